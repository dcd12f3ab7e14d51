"""Node topology: how a run's GPUs reach each other inside a node and across nodes.

A :class:`Topology` is what the communication model (``performance.comm``) reads: the intra-node
fabric (NVSwitch, an NVLink mesh, NVLink-bridged pairs, or PCIe), the PCIe peer-to-peer path
(through a PCIe switch, through the CPU's root complex, or none, so that copies are staged in host
memory), and the network between nodes (an interconnect id and the NICs per node).

It comes from one of three places, in this order:

1. a system (``data/systems.yaml``) the user names;
2. an interconnect and a NIC count per node, which override single fields;
3. the defaults for the GPU (:func:`node_topology`), each stated in ``Topology.assumed``:
   - an SXM GPU sits in the HGX board its DGX ships with (the on-prem system in systems.yaml with
     that GPU, else one of its architecture), with that system's fabric and NICs;
   - a PCIe card talks over PCIe (an NVLink-bridged pair when two bridged cards are asked for),
     with the P2P path of the first matching ``pcie_p2p_defaults`` rule in data/interconnects.yaml;
   - a multi-node run of PCIe cards assumes one InfiniBand HDR port per node.

Pure: no printing, no environment.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Gpu
from gpusizer.hardware.systems import Nics, System, Systems, load_systems
from gpusizer.performance.calibration import Interconnects, load_interconnects

FabricKind = Literal["nvswitch", "nvlink-mesh", "nvlink-bridge", "pcie"]
P2pPath = Literal["switch", "root-complex", "none"]

#: the network a multi-node run of PCIe cards gets when nothing names one
DEFAULT_NETWORK = "ib-hdr"


class Topology(BaseModel):
    """The links a run's collectives use. ``assumed`` lists, in words, every default applied."""

    model_config = ConfigDict(frozen=True)

    fabric: FabricKind
    #: the PCIe peer-to-peer path, for rings with PCIe hops (fabric pcie or nvlink-bridge)
    p2p: P2pPath
    #: per GPU, bidirectional; None: the GPU's catalog figure
    nvlink_gb_s: float | None = None
    #: None: the GPU's catalog figure
    pcie_generation: int | None = None
    #: an inter-node interconnect id (data/interconnects.yaml)
    network: str
    nics_per_node: int
    #: the system (data/systems.yaml) it came from, if any
    system: str | None = None
    #: a short description: "system nvidia-dgx-h100" or "defaults for an SXM5 GPU (as NVIDIA DGX H100)"
    origin: str
    assumed: tuple[str, ...] = ()

    def describe(self, nodes: int = 2) -> str:
        """One line: fabric, P2P path and, for more than one node, the network."""
        intra = {"nvswitch": "NVSwitch", "nvlink-mesh": "NVLink mesh", "nvlink-bridge": "NVLink-bridged pairs",
                 "pcie": "PCIe"}[self.fabric]
        if self.fabric in ("pcie", "nvlink-bridge"):
            intra += {"switch": " (P2P through a PCIe switch)", "root-complex": " (P2P through the CPU root complex)",
                      "none": " (no P2P: copies staged in host memory)"}[self.p2p]
        return f"{intra}; {self.nics_per_node} x {self.network} per node" if nodes > 1 else intra


def network_for(nics: Nics | None, links: Interconnects) -> tuple[str | None, str | None]:
    """(interconnect id, note) for a system's NICs: the entry of the same kind and port speed.
    Without RDMA (GPUDirect-TCPX, plain Ethernet) the Ethernet entry of that speed or the nearest."""
    if nics is None or nics.gbit_s_each is None:
        return None, "the system's network ports are not published"
    speed_gb_s = nics.gbit_s_each / 8.0
    if nics.rdma:
        kinds = {"infiniband": ("infiniband",), "roce": ("roce",), "efa": ("roce", "infiniband")}.get(
            nics.kind or "", ("infiniband", "roce"))
    else:
        kinds = ("ethernet",)
    pool = [i for i in links.interconnects if i.scope == "inter" and i.kind in kinds]
    if not pool:
        return None, f"no interconnect entry of kind {'/'.join(kinds)}"
    best = min(pool, key=lambda i: (abs(i.bandwidth_gb_s - speed_gb_s), -i.bandwidth_gb_s))
    note = None
    if abs(best.bandwidth_gb_s - speed_gb_s) > 0.01 * speed_gb_s or (nics.kind == "efa"):
        note = (f"{nics.gbit_s_each:g} Gb/s {nics.kind or 'network'} ports timed as {best.name} "
                "(the nearest entry in data/interconnects.yaml)")
    return best.id, note


def _reference_system(gpu: Gpu, systems: Systems) -> System | None:
    """The on-prem multi-GPU system an SXM GPU ships in: one with this GPU, NVIDIA's DGX first,
    else one whose GPU has the same architecture and form factor."""
    on_prem = [s for s in systems.systems if s.kind == "on-prem" and s.gpus > 1 and s.intra_node.fabric is not None]
    same = sorted((s for s in on_prem if s.gpu == gpu.id), key=lambda s: (not s.id.startswith("nvidia-dgx"), s.id))
    if same:
        return same[0]
    from gpusizer.hardware.catalog import load_catalog

    by_id = {g.id: g for g in load_catalog().gpus}
    kin = sorted((s for s in on_prem if (g := by_id.get(s.gpu)) is not None and g.architecture == gpu.architecture
                  and g.form_factor == gpu.form_factor), key=lambda s: (not s.id.startswith("nvidia-dgx"), s.id))
    return kin[0] if kin else None


def default_p2p(gpu: Gpu, links: Interconnects) -> tuple[P2pPath, str]:
    """The PCIe P2P path of the first ``pcie_p2p_defaults`` rule matching the GPU, and its reason."""
    for rule in links.pcie_p2p_defaults:
        if rule.matches(gpu):
            return rule.p2p, rule.reason
    return "root-complex", "no rule matched: P2P through the CPU root complex"


def system_topology(system: System, gpus_per_node: int, links: Interconnects) -> Topology:
    """A named system's topology; what it does not publish is filled by the defaults, and said."""
    from gpusizer.hardware.catalog import load_catalog

    if gpus_per_node > system.gpus:
        raise UsageError(f"{system.id} holds {system.gpus} GPU(s), not {gpus_per_node}",
                         hint=f"use {system.gpus} GPUs per node or fewer, or add nodes", field="gpus")
    gpu = load_catalog().resolve(system.gpu).gpu
    assumed: list[str] = []
    intra = system.intra_node
    fabric: FabricKind
    if intra.fabric is not None:
        fabric = intra.fabric
    else:
        fabric = "pcie"
        if system.gpus > 1:
            assumed.append(f"{system.id} does not publish its GPU fabric: assuming PCIe")
    if intra.p2p is not None:
        p2p: P2pPath = intra.p2p
    else:
        p2p, why = default_p2p(gpu, links)
        if fabric in ("pcie", "nvlink-bridge") and system.gpus > 1:
            assumed.append(f"PCIe P2P path not published for {system.id}: {why}")
    network, note = network_for(system.nics, links)
    nics = system.nics.count if system.nics is not None and system.nics.count else None
    if network is None:
        network = DEFAULT_NETWORK
        assumed.append(f"{note}: assuming InfiniBand HDR between nodes")
    elif note:
        assumed.append(note)
    if nics is None:
        nics = 1
        assumed.append(f"{system.id} does not publish its NIC count: assuming 1 port per node")
    return Topology(fabric=fabric, p2p=p2p, nvlink_gb_s=intra.nvlink_gb_s, pcie_generation=intra.pcie_generation,
                    network=network, nics_per_node=nics, system=system.id, origin=f"system {system.id}",
                    assumed=tuple(assumed))


def node_topology(
    gpu: Gpu, gpus_per_node: int, nodes: int, *, system: str | System | None = None,
    interconnect: str | None = None, nics_per_node: int | None = None,
    links: Interconnects | None = None, systems: Systems | None = None,
) -> Topology:
    """The topology of ``gpus_per_node`` x ``nodes`` ``gpu``: a system's, or the GPU's defaults;
    ``interconnect`` (an intra-node link, nvlink or pcie, or a network) and ``nics_per_node``
    override single fields."""
    links = links or load_interconnects()
    if system is not None:
        sys_ = system if isinstance(system, System) else (systems or load_systems()).resolve(system)
        topo = system_topology(sys_, gpus_per_node, links)
    else:
        topo = _default_topology(gpu, gpus_per_node, nodes, links, systems)
    return _override(topo, gpu, interconnect, nics_per_node, links)


def _default_topology(gpu: Gpu, gpus_per_node: int, nodes: int, links: Interconnects,
                      systems: Systems | None) -> Topology:
    sxm = gpu.form_factor.upper().startswith("SXM")
    if sxm and (gpus_per_node > 1 or nodes > 1):
        ref = _reference_system(gpu, systems or load_systems())
        if ref is not None:
            base = system_topology(ref, min(gpus_per_node, ref.gpus), links)
            what = f"{'; '.join(base.assumed) + '; ' if base.assumed else ''}"
            # the GPU's own NVLink and PCIe figures where the catalog has them, else the system's
            return base.model_copy(update={
                "system": None, "nvlink_gb_s": None if gpu.nvlink_gb_s else base.nvlink_gb_s,
                "pcie_generation": None if gpu.pcie_generation else base.pcie_generation,
                "origin": f"defaults for an {gpu.form_factor} GPU (as {ref.name})",
                "assumed": (f"{gpu.form_factor} node as in {ref.name}: {base.describe()}; name a system "
                            f"or an interconnect and NICs per node to change it{'; ' + what if what else ''}"
                            .rstrip("; "),),
            })
    p2p, why = default_p2p(gpu, links)
    bridged = bool(gpu.nvlink) and not sxm and gpus_per_node == 2
    fabric: FabricKind = "nvlink-bridge" if bridged else ("nvswitch" if sxm and gpu.nvlink else "pcie")
    assumed: list[str] = []
    if gpus_per_node > 1:
        if bridged:
            assumed.append(f"2 x {gpu.id} joined by an NVLink bridge")
        elif fabric == "pcie":
            assumed.append(f"{gpus_per_node} x {gpu.id} over PCIe: {why}")
    if nodes > 1:
        assumed.append("no network given for a multi-node run: assuming 1 InfiniBand HDR port per node "
                       "(name an interconnect, a system or the NICs per node to change it)")
    return Topology(fabric=fabric, p2p=p2p, network=DEFAULT_NETWORK, nics_per_node=1,
                    origin=f"defaults for a {gpu.form_factor} GPU", assumed=tuple(assumed))


def _override(topo: Topology, gpu: Gpu, interconnect: str | None, nics_per_node: int | None,
              links: Interconnects) -> Topology:
    update: dict[str, object] = {}
    if interconnect is not None:
        key = interconnect.strip().lower()
        if key in ("nvlink", "nvswitch") or key.startswith("nvlink"):
            sxm = gpu.form_factor.upper().startswith("SXM")
            if not (gpu.nvlink or sxm or topo.nvlink_gb_s):
                raise UsageError(f"{gpu.id} has no NVLink", hint="connect its GPUs over PCIe", field="interconnect")
            update["fabric"] = "nvswitch" if (sxm or key == "nvswitch") else "nvlink-bridge"
        elif key.startswith("pcie"):
            update["fabric"] = "pcie"
        else:
            link = links.get(key)
            if link.scope == "intra":
                update["fabric"] = "pcie" if link.kind == "pcie" else "nvswitch"
            else:
                update["network"] = link.id
        update["assumed"] = tuple(a for a in topo.assumed if not a.startswith("no network given"))
    if nics_per_node is not None:
        update["nics_per_node"] = nics_per_node
    return topo.model_copy(update=update) if update else topo
