"""Communication: the link a collective uses and ring all-reduce time."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Gpu
from gpusizer.performance.calibration import Interconnects, load_interconnects
from gpusizer.performance.topology import Topology, node_topology

# --------------------------------------------------------------------------
# communication


class LowLatencyPath(BaseModel):
    """A ring's latencies and bandwidth share under NCCL's LL protocol (data/interconnects.yaml
    ``ll_protocol``)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    base_latency_us: float
    intra_latency_us: float
    inter_latency_us: float
    bandwidth_share: float


class Link(BaseModel):
    """The effective path for a collective: bus bandwidth and per-step latency (NCCL's Simple
    protocol), and the LL protocol's where every hop has an LL figure."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    label: str
    bandwidth_gb_s: float
    intra_latency_us: float
    inter_latency_us: float
    base_latency_us: float
    ll: LowLatencyPath | None = None
    transport: Literal["none", "nvlink", "scale-up", "pcie", "rdma", "tcp"]
    #: the fraction of the backward pass the collective can hide behind (data/interconnects.yaml pcie_paths)
    overlap: float = 1.0
    notes: tuple[str, ...] = ()


def _intra_link(gpu: Gpu, gpus: int, topo: Topology,
                links: Interconnects) -> tuple[str, float, float, str, float, float | None]:
    """(name, effective per-GPU bus bandwidth GB/s, per-step latency us, transport, overlap, per-step
    latency us under NCCL's LL protocol or None) of a ring inside a node. NVLink bridges join pairs
    only: a ring over more than two bridged cards crosses PCIe, so PCIe sets its pace."""
    if topo.fabric == "scale-up" and topo.scale_up is not None:
        mesh = links.get(topo.scale_up)
        ring = mesh.ring(gpus)
        if ring is not None:
            # uneven links (MI250's OAMs): the ring the board's link diagram gives for this count
            return (f"{mesh.name} ({ring.via})", ring.bandwidth_gb_s * mesh.efficiency, mesh.latency_us, "scale-up",
                    1.0, mesh.ll_latency_us)
        # an all-to-all mesh: a ring over n of the board's GPUs uses n - 1 of each GPU's peer links
        peers = mesh.peer_links or 1
        used = min(max(1, gpus - 1), peers)
        per_gpu = mesh.bandwidth_gb_s * used / peers
        return (f"{mesh.name} ({used} of {peers} peer links)", per_gpu * mesh.efficiency, mesh.latency_us,
                "scale-up", 1.0, mesh.ll_latency_us)
    nvlinked = topo.fabric in ("nvswitch", "nvlink-mesh") or (topo.fabric == "nvlink-bridge" and gpus <= 2)
    if nvlinked:
        if not (topo.nvlink_gb_s or gpu.nvlink):
            raise UsageError(f"{gpu.id} has no NVLink", hint="connect its GPUs over PCIe", field="interconnect")
        link = links.nvlink(gpu.nvlink_generation)
        per_gpu = (topo.nvlink_gb_s or gpu.nvlink_gb_s or 2 * link.bandwidth_gb_s) / 2
        # a bridge is the GPU's own links to one peer: named by generation, not by the module it came with
        name = f"{link.name.split(' (')[0]} bridge" if topo.fabric == "nvlink-bridge" else link.name
        return name, per_gpu * link.efficiency, link.latency_us, "nvlink", 1.0, link.ll_latency_us
    link = links.pcie(topo.pcie_generation or gpu.pcie_generation)
    path = links.pcie_path(topo.p2p)
    name = {"switch": f"{link.name} through a PCIe switch",
            "root-complex": f"{link.name} through the CPU root complex",
            "none": f"PCIe {link.generation}.0 x16 without P2P (staged in host memory)"}[topo.p2p]
    return name, link.bandwidth_gb_s * path.efficiency, path.latency_us, "pcie", path.overlap, path.ll_latency_us


def _uneven_mesh_note(gpus: int, topo: Topology, links: Interconnects) -> tuple[str, ...]:
    """A mesh with uneven links whose diagram gives no ring for ``gpus``: the peer-link rule times
    it, approximately, and the note says so plainly."""
    if topo.fabric != "scale-up" or topo.scale_up is None or gpus < 2:
        return ()
    mesh = links.get(topo.scale_up)
    if not mesh.ring_links or mesh.ring(gpus) is not None:
        return ()
    peers = mesh.peer_links or 1
    counts = [str(r.gpus) for r in mesh.ring_links]
    timed = " and ".join([", ".join(counts[:-1]), counts[-1]] if len(counts) > 1 else counts)
    return (f"a ring over {gpus} GPUs of the {mesh.name} board is timed approximately, at {min(gpus - 1, peers)} "
            f"of a GPU's {peers} peer links: the board's links are uneven, and its link diagram is read for "
            f"rings over {timed} GPUs only",)


def collective_link(
    gpu: Gpu, gpus_per_node: int, nodes: int, interconnect: str | None = None, *, nics_per_node: int | None = None,
    links: Interconnects | None = None, topology: Topology | None = None,
) -> Link:
    """Effective bus bandwidth and latencies for a ring over gpus_per_node x nodes GPUs, on
    ``topology`` (default: performance.topology.node_topology of the GPU, with ``interconnect``
    and ``nics_per_node`` as overrides)."""
    links = links or load_interconnects()
    topo = topology or node_topology(gpu, gpus_per_node, nodes, interconnect=interconnect,
                                     nics_per_node=nics_per_node, links=links)
    notes: list[str] = [*topo.assumed, *_uneven_mesh_note(gpus_per_node, topo, links)]
    intra_name, intra_eff, intra_lat, intra_kind, overlap, intra_ll = _intra_link(gpu, gpus_per_node, topo, links)
    if nodes <= 1:
        return Link(
            label=intra_name, bandwidth_gb_s=intra_eff, intra_latency_us=intra_lat, inter_latency_us=intra_lat,
            base_latency_us=links.collective_base_latency_us, ll=_low_latency(links, gpu, intra_ll, intra_ll, 1),
            transport=intra_kind if gpus_per_node > 1 else "none", overlap=overlap, notes=tuple(notes),
        )
    net = links.get(topo.network)
    nics = max(1, topo.nics_per_node)
    inter_ll = None  # TCP sockets: NCCL's LL figures are for GPUDirect RDMA networks
    if net.rdma and gpu.gpudirect_rdma:
        per_nic, latency, transport = net.bandwidth_gb_s * net.efficiency, net.latency_us, "rdma"
        inter_ll = net.ll_latency_us
    else:
        if net.rdma and not gpu.gpudirect_rdma:
            notes.append(
                f"{gpu.id} cannot use GPUDirect RDMA across nodes ({gpu.segment} card): traffic falls back "
                "to TCP with staging through host memory"
            )
        eff = net.tcp_efficiency if net.tcp_efficiency is not None else net.efficiency
        lat = net.tcp_latency_us if net.tcp_latency_us is not None else net.latency_us
        per_nic, latency, transport = net.bandwidth_gb_s * eff, lat, "tcp"
        # host staging: every byte also crosses PCIe to and from host memory
        pcie = links.pcie(topo.pcie_generation or gpu.pcie_generation)
        per_nic = min(per_nic, pcie.bandwidth_gb_s * pcie.efficiency / 2)
    # GPUDirect RDMA reads GPU memory over each GPU's PCIe link, so a node's GPUs cannot feed more
    # network than their PCIe links carry (AWS P5: 32 x 100 Gb/s EFA for 8 GPUs, 4 ports per GPU)
    pcie = links.pcie(topo.pcie_generation or gpu.pcie_generation)
    feed = gpus_per_node * pcie.bandwidth_gb_s * pcie.efficiency
    bus = min(intra_eff, nics * per_nic, feed)
    return Link(
        label=f"{net.name} x{nics} per node" + (" (TCP, host-staged)" if transport == "tcp" else ""),
        bandwidth_gb_s=bus, intra_latency_us=intra_lat, inter_latency_us=latency,
        base_latency_us=links.collective_base_latency_us, ll=_low_latency(links, gpu, intra_ll, inter_ll, nodes),
        transport=transport, overlap=overlap if gpus_per_node > 1 else 1.0, notes=tuple(notes),
    )


def _low_latency(links: Interconnects, gpu: Gpu, intra_us: float | None, inter_us: float | None,
                 nodes: int) -> LowLatencyPath | None:
    """The ring's LL timing, where the file gives the protocol for the GPU's vendor and every hop an LL
    latency."""
    proto = links.ll_protocol
    if proto is None or gpu.vendor not in proto.vendors or intra_us is None or inter_us is None:
        return None
    factor = proto.multi_node_intra_factor if nodes > 1 else 1.0
    return LowLatencyPath(base_latency_us=proto.base_latency_us, intra_latency_us=intra_us * factor,
                          inter_latency_us=inter_us, bandwidth_share=proto.bandwidth_share)


def allreduce_time_s(size_bytes: float, gpus_per_node: int, nodes: int, link: Link, *, calls: int = 1) -> float:
    """Ring all-reduce of ``size_bytes`` in ``calls`` equal calls: 2(N-1)/N * S / B, plus NCCL's
    latency model per call, under the faster of NCCL's Simple and LL protocols, as NCCL chooses.

    Latency per call = base + 2(N - nodes) intra-node steps + 2(nodes - 1)
    inter-node steps (NCCL src/graph/tuning.cc); LL has its own latencies and a quarter of the
    bandwidth (``Link.ll``).
    """
    n = gpus_per_node * nodes
    if n <= 1 or size_bytes <= 0:
        return 0.0
    bandwidth = 2.0 * (n - 1) / n * size_bytes / (link.bandwidth_gb_s * 1e9)
    steps_inter = 2 * (nodes - 1)
    steps_intra = 2 * (n - 1) - steps_inter
    latency = link.base_latency_us + steps_intra * link.intra_latency_us + steps_inter * link.inter_latency_us
    simple = bandwidth + calls * latency * 1e-6
    ll = link.ll
    if ll is None:
        return simple
    ll_latency = ll.base_latency_us + steps_intra * ll.intra_latency_us + steps_inter * ll.inter_latency_us
    return min(simple, bandwidth / ll.bandwidth_share + calls * ll_latency * 1e-6)
