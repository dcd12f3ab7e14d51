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
from gpusizer.hardware.catalog import Catalog, Gpu, load_catalog
from gpusizer.hardware.systems import Nics, System, Systems, load_systems
from gpusizer.performance.calibration import Interconnects, load_interconnects
from gpusizer.units import plural

FabricKind = Literal["nvswitch", "nvlink-mesh", "nvlink-bridge", "scale-up", "pcie"]
P2pPath = Literal["switch", "root-complex", "none"]

#: the network a multi-node run of PCIe cards gets when nothing names one
DEFAULT_NETWORK = "ib-hdr"
NO_NETWORK = "no network given for a multi-node run"


class Topology(BaseModel):
    """The links a run's collectives use. ``assumed`` lists, in words, every default applied."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    fabric: FabricKind
    #: the PCIe peer-to-peer path, for rings with PCIe hops (fabric pcie or nvlink-bridge)
    p2p: P2pPath
    #: per GPU, bidirectional; None: the GPU's catalog figure
    nvlink_gb_s: float | None = None
    #: None: the GPU's catalog figure
    pcie_generation: int | None = None
    #: fabric scale-up: the mesh's interconnect id (data/interconnects.yaml, with peer_links)
    scale_up: str | None = None
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
                 "scale-up": f"{self.scale_up} all-to-all mesh", "pcie": "PCIe"}[self.fabric]
        if self.fabric in ("pcie", "nvlink-bridge"):
            path = {"switch": "P2P through a PCIe switch", "root-complex": "P2P through the CPU root complex",
                    "none": "no P2P: copies staged in host memory"}[self.p2p]
            # (a bridged pair's own copies go over its bridge: the PCIe path joins the pairs)
            intra += f" ({'between pairs, ' if self.fabric == 'nvlink-bridge' else ''}{path})"
        return f"{intra}; {self.nics_per_node} x {self.network} per node" if nodes > 1 else intra


def network_for(nics: Nics | None, links: Interconnects) -> tuple[str | None, int | None, str | None]:
    """(interconnect id, ports of that entry per node, note) for a system's NICs: the entry of the same
    kind nearest the port speed; ports count so the node's total bandwidth stays what is published
    (a port speed is the node total over its ports where only the total is published). Without RDMA
    (GPUDirect-TCPX, plain Ethernet) the Ethernet entries."""
    if nics is None:
        return None, None, "the system's network ports are not published"
    count = nics.count or 1
    if nics.gbit_s_each is not None:
        port_gbit = nics.gbit_s_each
    elif nics.total_gbit_s is not None:
        port_gbit = nics.total_gbit_s / count
    else:
        return None, None, "the system's network port speed is not published"
    rdma = nics.rdma if nics.rdma is not None else nics.kind in ("infiniband", "roce", "efa")
    kinds = ({"infiniband": ("infiniband",), "roce": ("roce",)}.get(nics.kind or "", ("infiniband", "roce"))
             if rdma else ("ethernet",))
    pool = [i for i in links.interconnects if i.scope == "inter" and i.kind in kinds]
    if not pool:
        return None, None, f"no interconnect entry of kind {'/'.join(kinds)}"
    best = min(pool, key=lambda i: (abs(i.bandwidth_gb_s * 8 - port_gbit), -i.bandwidth_gb_s))
    ports = max(1, round(count * port_gbit / (best.bandwidth_gb_s * 8)))
    notes = []
    if nics.rdma is None:
        notes.append(f"RDMA over the {nics.kind} ports is not published: assumed from their kind")
    if abs(best.bandwidth_gb_s * 8 - port_gbit) > 0.01 * port_gbit or nics.kind in ("efa", "gpudirect-tcpx"):
        notes.append(f"{count} x {port_gbit:g} Gb/s {nics.kind or 'network'} timed as {ports} x {best.name} "
                     "(the nearest entry in data/interconnects.yaml, same node total)")
    return best.id, ports, "; ".join(notes) or None


def _reference_system(gpu: Gpu, gpus_per_node: int, systems: Systems, catalog: Catalog) -> System | None:
    """The on-prem multi-GPU system an SXM GPU ships in: one that holds ``gpus_per_node`` first, then
    one with this GPU, then one of its form factor, NVIDIA's DGX first; among systems whose GPU has the
    same architecture and that publish their fabric and network ports."""
    by_id = {g.id: g for g in catalog.gpus}
    kin = [s for s in systems.systems if s.kind == "on-prem" and s.gpus > 1 and s.intra_node.fabric is not None
           and s.nics is not None and s.nics.gbit_s_each is not None
           and (g := by_id.get(s.gpu)) is not None and g.architecture == gpu.architecture and g.is_sxm]
    return min(kin, key=lambda s: (s.gpus < gpus_per_node, s.gpu != gpu.id, by_id[s.gpu].form_factor != gpu.form_factor,
                                   not s.id.startswith("nvidia-dgx"), s.id), default=None)


def pcie_generation_for(gpu: Gpu, links: Interconnects, catalog: Catalog | None = None) -> tuple[int, str | None]:
    """The PCIe generation to time ``gpu``'s PCIe link at, and a note when the catalog does not give it.

    Unknown is never read as the oldest generation. The rule: the generation most of the catalog's
    GPUs of the same vendor and architecture have (the older one on a tie, as the less favourable
    of the likely values); with none to go by, the newest generation data/interconnects.yaml times."""
    if gpu.pcie_generation is not None:
        return gpu.pcie_generation, None
    cat = catalog or load_catalog()
    kin = [g.pcie_generation for g in cat.gpus
           if g.vendor == gpu.vendor and g.architecture == gpu.architecture and g.pcie_generation is not None]
    if kin:
        counts = {n: kin.count(n) for n in set(kin)}
        gen = min(counts, key=lambda n: (-counts[n], n))
        return gen, (f"{gpu.id}'s PCIe generation is unknown: timed as PCIe {gen}.0, the generation of "
                     f"{counts[gen]} of the {len(kin)} {gpu.architecture} GPUs in the catalog that give one")
    newest = max(i.generation or 0 for i in links.interconnects if i.kind == "pcie")
    return newest, (f"{gpu.id}'s PCIe generation is unknown and no {gpu.architecture} GPU in the catalog gives one: "
                    f"timed as PCIe {newest}.0, the newest generation timed")


def default_p2p(gpu: Gpu, links: Interconnects) -> tuple[P2pPath, str]:
    """The PCIe P2P path of the first ``pcie_p2p_defaults`` rule matching the GPU, and its reason."""
    for rule in links.pcie_p2p_defaults:
        if rule.matches(gpu):
            return rule.p2p, rule.reason
    return "root-complex", "no rule matched: P2P through the CPU root complex"


def system_topology(system: System, gpus_per_node: int, links: Interconnects, catalog: Catalog | None = None,
                    systems: Systems | None = None) -> Topology:
    """A named system's topology; what it does not publish is filled by the defaults, and said."""
    if gpus_per_node > system.gpus:
        raise UsageError(f"{system.id} holds {plural(system.gpus, 'GPU')}, not {gpus_per_node}",
                         hint=f"use {plural(system.gpus, 'GPU')} per node or fewer, or add nodes", field="gpus")
    cat = catalog or load_catalog()
    gpu = cat.resolve(system.gpu).gpu
    assumed: list[str] = []
    intra = system.intra_node
    fabric: FabricKind = intra.fabric or "pcie"
    if intra.fabric is None and system.gpus > 1:
        assumed.append(f"{system.id} does not publish its GPU fabric: assuming PCIe")
    p2p, why = (intra.p2p, "") if intra.p2p is not None else default_p2p(gpu, links)
    if intra.p2p is None and fabric in ("pcie", "nvlink-bridge") and system.gpus > 1:
        assumed.append(f"PCIe P2P path not published for {system.id}: {why}")
    network, nics, note = network_for(system.nics, links)
    if network is None or nics is None:
        # unpublished: the defaults of its GPU (an SXM GPU's DGX-class NICs), rather than a guess
        fallback = _default_topology(gpu, system.gpus, 2, links, systems, cat)
        network, nics = fallback.network, fallback.nics_per_node
        assumed.append(f"{note} for {system.id}: assuming {nics} x {network} per node, the defaults for its GPU")
    elif note:
        assumed.append(note)
    pcie_gen = intra.pcie_generation
    if pcie_gen is None and gpu.pcie_generation is None:
        pcie_gen, why_pcie = pcie_generation_for(gpu, links, cat)
        assumed.append(f"{why_pcie} ({system.id} does not publish it either)")
    return Topology(fabric=fabric, p2p=p2p, nvlink_gb_s=intra.nvlink_gb_s, pcie_generation=pcie_gen,
                    network=network, nics_per_node=nics, system=system.id, origin=f"system {system.id}",
                    assumed=tuple(assumed))


def node_topology(
    gpu: Gpu, gpus_per_node: int, nodes: int, *, system: str | System | None = None,
    interconnect: str | None = None, nics_per_node: int | None = None,
    links: Interconnects | None = None, systems: Systems | None = None, catalog: Catalog | None = None,
) -> Topology:
    """The topology of ``gpus_per_node`` x ``nodes`` ``gpu``: a system's, or the GPU's defaults;
    ``interconnect`` (an intra-node link, nvlink or pcie, or a network) and ``nics_per_node``
    override single fields. ``catalog`` resolves a system's GPU (default: the bundled one)."""
    links = links or load_interconnects()
    if system is not None:
        sys_ = system if isinstance(system, System) else (systems or load_systems()).resolve(system)
        topo = system_topology(sys_, gpus_per_node, links, catalog, systems)
    else:
        topo = _default_topology(gpu, gpus_per_node, nodes, links, systems, catalog)
    return _override(topo, gpu, interconnect, nics_per_node, links)


def _superchip_notes(gpu: Gpu, ref: System, nodes: int) -> tuple[str, ...]:
    """What a Grace superchip's defaults assume: NVIDIA racks its superchips' GPUs behind NVLink
    switches (GH200 NVL32, GB200 and GB300 NVL72), and data/systems.yaml has no node of superchips,
    so the network ports are those of the SXM system of the same architecture."""
    if not gpu.is_superchip or gpu.nvlink_gb_s is None:
        return ()
    return (f"{gpu.id} is one GPU of a Grace superchip, taken to reach the others through NVLink switches "
            f"({gpu.nvlink_gb_s:,.0f} GB/s a GPU) as in NVIDIA's NVL32 and NVL72 racks"
            + (f", a node with {ref.name}'s network ports" if nodes > 1 else "")
            + "; superchips without NVLink between them talk over their network: name an interconnect to change it",)


def _default_topology(gpu: Gpu, gpus_per_node: int, nodes: int, links: Interconnects,
                      systems: Systems | None, catalog: Catalog | None) -> Topology:
    if gpu.nvlink_switched and (gpus_per_node > 1 or nodes > 1):
        cat = catalog or load_catalog()
        ref = _reference_system(gpu, gpus_per_node, systems or load_systems(), cat)
        if ref is not None:
            base = system_topology(ref, ref.gpus, links, cat, systems)
            larger = (f"no published node holds {gpus_per_node} of them: timed as one {base.fabric} node"
                      if gpus_per_node > ref.gpus else "")
            # the GPU's own NVLink and PCIe figures where the catalog has them, else the system's
            return base.model_copy(update={
                "system": None, "nvlink_gb_s": None if gpu.nvlink_gb_s else base.nvlink_gb_s,
                "pcie_generation": None if gpu.pcie_generation else (
                    base.pcie_generation or pcie_generation_for(gpu, links, cat)[0]),
                "origin": f"defaults for {'an' if gpu.is_sxm else 'a'} {gpu.form_factor} GPU (as {ref.name})",
                "assumed": (f"{gpu.form_factor} node as in {ref.name}: {base.describe(nodes)}; name a system, "
                            "an interconnect or the NICs per node to change it", *_superchip_notes(gpu, ref, nodes),
                            *base.assumed, *([larger] if larger else [])),
            })
    p2p, why = default_p2p(gpu, links)
    pcie_gen, why_pcie = pcie_generation_for(gpu, links, catalog)
    pcie_notes = [why_pcie] if why_pcie else []
    mesh = links.scale_up(gpu) if not gpu.nvlink_switched else None
    if mesh is not None and (gpus_per_node > 1 or nodes > 1):
        link, rule = mesh
        notes = [f"{gpus_per_node} x {gpu.id} on an {rule.gpus_per_board}-GPU {gpu.form_factor} baseboard: {rule.reason} "
                 f"({link.name}); name a system or an interconnect to change it"]
        if gpus_per_node > rule.gpus_per_board:
            notes.append(f"no published board holds {gpus_per_node} of them: timed as one {link.id} mesh")
        if nodes > 1:
            notes.append(f"{NO_NETWORK}: assuming 1 InfiniBand HDR port per node (name an interconnect, a system "
                         "or the NICs per node to change it)")
        return Topology(fabric="scale-up", scale_up=link.id, p2p=p2p, pcie_generation=pcie_gen,
                        network=DEFAULT_NETWORK, nics_per_node=1, origin=f"defaults for an {gpu.form_factor} GPU",
                        assumed=(*notes, *pcie_notes))
    bridged = gpu.nvlink and not gpu.nvlink_switched and gpus_per_node == 2
    fabric: FabricKind = "nvlink-bridge" if bridged else ("nvswitch" if gpu.nvlink_switched and gpu.nvlink else "pcie")
    assumed: list[str] = []
    if gpus_per_node > 1:
        if bridged:
            assumed.append(f"2 x {gpu.id} joined by an NVLink bridge")
        elif fabric == "pcie":
            assumed.append(f"{gpus_per_node} x {gpu.id} over PCIe: {why}")
    if nodes > 1:
        assumed.append(f"{NO_NETWORK}: assuming 1 InfiniBand HDR port per node (name an interconnect, a system "
                       "or the NICs per node to change it)")
    return Topology(fabric=fabric, p2p=p2p, network=DEFAULT_NETWORK, nics_per_node=1, pcie_generation=pcie_gen,
                    origin=f"defaults for a {gpu.form_factor} GPU", assumed=(*assumed, *pcie_notes))


def _override(topo: Topology, gpu: Gpu, interconnect: str | None, nics_per_node: int | None,
              links: Interconnects) -> Topology:
    """``interconnect`` names the intra-node link (nvlink, nvswitch, pcie, or a generation: nvlink3,
    pcie4) or the network; ``nics_per_node`` the ports per node. What they replace leaves the notes."""
    update: dict[str, object] = {}
    notes = list(topo.assumed)
    extra = ""
    if interconnect is not None:
        key = interconnect.strip().lower()
        link = None if key in ("nvlink", "nvswitch", "pcie") else links.get(key)
        if key in ("nvlink", "nvswitch") or (link is not None and link.kind == "nvlink"):
            if not (gpu.nvlink or gpu.nvlink_switched or topo.nvlink_gb_s):
                raise UsageError(f"{gpu.id} has no NVLink", hint="connect its GPUs over PCIe", field="interconnect")
            if topo.fabric == "pcie" or key == "nvswitch":
                update["fabric"] = "nvswitch" if (gpu.nvlink_switched or key == "nvswitch") else "nvlink-bridge"
            if link is not None:
                update["nvlink_gb_s"] = 2 * link.bandwidth_gb_s
        elif link is not None and link.scope == "intra" and link.peer_links:
            update.update(fabric="scale-up", scale_up=link.id)
        elif key == "pcie" or (link is not None and link.kind == "pcie"):
            update["fabric"] = "pcie"
            update["scale_up"] = None
            if link is not None:
                # a link trains at the lower of the slot's and the card's generations (PCIe base spec)
                card = gpu.pcie_generation or topo.pcie_generation
                if card is not None and link.generation is not None and link.generation > card:
                    extra = (f"{gpu.id} is a PCIe {card}.0 card: in a PCIe {link.generation}.0 slot its link "
                               f"trains at {card}.0 (the lower generation), so it is timed at that")
                    update["pcie_generation"] = card
                else:
                    update["pcie_generation"] = link.generation
        elif link is not None:
            update["network"] = link.id
            notes = [n for n in notes if not n.startswith(NO_NETWORK) and topo.network not in n]
            if nics_per_node is None and topo.nics_per_node > 1:
                extra = (f"{topo.nics_per_node} x {link.id} ports per node, as many as the default network's; "
                           "give the NICs per node if the nodes have fewer")
        notes += [f"interconnect {key} given", *([extra] if extra else [])]
    if nics_per_node is not None:
        update["nics_per_node"] = nics_per_node
        notes = [n for n in notes if f"x {topo.network} per node" not in n] + [f"{nics_per_node} NICs per node given"]
    return topo.model_copy(update={**update, "assumed": tuple(notes)}) if update or interconnect else topo
