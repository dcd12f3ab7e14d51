"""Communication: the link a collective uses and ring all-reduce time."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Gpu
from gpusizer.performance.calibration import (
    Interconnect,
    Interconnects,
    load_interconnects,
)

# --------------------------------------------------------------------------
# communication


class Link(BaseModel):
    """The effective path for a collective: bus bandwidth and per-step latency."""

    model_config = ConfigDict(frozen=True)

    label: str
    bandwidth_gb_s: float
    intra_latency_us: float
    inter_latency_us: float
    base_latency_us: float
    transport: Literal["none", "nvlink", "pcie", "rdma", "tcp"]
    notes: tuple[str, ...] = ()


def _intra_link(gpu: Gpu, gpus: int, links: Interconnects, requested: Interconnect | None) -> tuple[Interconnect, float, str]:
    """The link a ring uses inside a node and its per-GPU bandwidth (GB/s per direction)."""
    if requested is not None and requested.scope == "intra":
        if requested.kind == "nvlink":
            if not gpu.nvlink:
                raise UsageError(f"{gpu.id} has no NVLink", hint="connect its GPUs over PCIe", field="interconnect")
            return requested, (gpu.nvlink_gb_s or 2 * requested.bandwidth_gb_s) / 2, "nvlink"
        return requested, requested.bandwidth_gb_s, "pcie"
    # NVLink bridges on PCIe cards join pairs; a ring over more than two needs PCIe hops
    sxm = gpu.form_factor.upper().startswith("SXM")
    if gpu.nvlink and (sxm or gpus <= 2):
        link = links.nvlink(gpu.nvlink_generation)
        return link, (gpu.nvlink_gb_s or 2 * link.bandwidth_gb_s) / 2, "nvlink"
    link = links.pcie(gpu.pcie_generation)
    return link, link.bandwidth_gb_s, "pcie"


def resolve_interconnect(key: str | None, links: Interconnects, gpu: Gpu) -> Interconnect | None:
    if key is None:
        return None
    k = key.strip().lower()
    if k in ("nvlink", "nvswitch"):
        if not gpu.nvlink:
            raise UsageError(f"{gpu.id} has no NVLink", hint="connect its GPUs over PCIe", field="interconnect")
        return links.nvlink(gpu.nvlink_generation)
    if k == "pcie":
        return links.pcie(gpu.pcie_generation)
    return links.get(k)


def collective_link(
    gpu: Gpu, gpus_per_node: int, nodes: int, interconnect: str | None, *, nics_per_node: int | None = None,
    links: Interconnects | None = None,
) -> Link:
    """Effective bus bandwidth and latencies for a ring over gpus_per_node x nodes GPUs."""
    links = links or load_interconnects()
    notes: list[str] = []
    requested = resolve_interconnect(interconnect, links, gpu)
    intra, intra_bw, intra_kind = _intra_link(gpu, gpus_per_node, links, requested)
    intra_eff = intra_bw * intra.efficiency
    if nodes <= 1:
        if requested is not None and requested.scope == "inter":
            notes.append(f"interconnect {requested.id} is a network; inside one node GPUs talk over {intra.name}")
        return Link(
            label=intra.name, bandwidth_gb_s=intra_eff, intra_latency_us=intra.latency_us,
            inter_latency_us=intra.latency_us, base_latency_us=links.collective_base_latency_us,
            transport=intra_kind, notes=tuple(notes),
        )
    net = requested if (requested is not None and requested.scope == "inter") else None
    if net is None:
        net = links.get("ib-hdr")
        notes.append("no network given for a multi-node run: assuming InfiniBand HDR (name an interconnect to change it)")
    nics = max(1, min(nics_per_node or 1, gpus_per_node))
    if net.rdma and gpu.gpudirect_rdma:
        per_nic, latency, transport = net.bandwidth_gb_s * net.efficiency, net.latency_us, "rdma"
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
        pcie = links.pcie(gpu.pcie_generation)
        per_nic = min(per_nic, pcie.bandwidth_gb_s * pcie.efficiency / 2)
    bus = min(intra_eff, nics * per_nic)
    return Link(
        label=f"{net.name} x{nics} per node" + (" (TCP, host-staged)" if transport == "tcp" else ""),
        bandwidth_gb_s=bus, intra_latency_us=intra.latency_us, inter_latency_us=latency,
        base_latency_us=links.collective_base_latency_us, transport=transport, notes=tuple(notes),
    )


def allreduce_time_s(size_bytes: float, gpus_per_node: int, nodes: int, link: Link, *, calls: int = 1) -> float:
    """Ring all-reduce: 2(N-1)/N * S / B, plus NCCL's latency model per call.

    Latency per call = base + 2(N - nodes) intra-node steps + 2(nodes - 1)
    inter-node steps (NCCL src/graph/tuning.cc).
    """
    n = gpus_per_node * nodes
    if n <= 1 or size_bytes <= 0:
        return 0.0
    bandwidth = 2.0 * (n - 1) / n * size_bytes / (link.bandwidth_gb_s * 1e9)
    steps_inter = 2 * (nodes - 1)
    steps_intra = 2 * (n - 1) - steps_inter
    latency = link.base_latency_us + steps_intra * link.intra_latency_us + steps_inter * link.inter_latency_us
    return bandwidth + calls * latency * 1e-6
