"""Interconnect and calibration data files (data/interconnects.yaml, data/calibration.yaml)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpusizer import datafiles
from gpusizer.errors import DataFileError, UsageError
from gpusizer.hardware.catalog import ARCH_ORDER, Gpu, Source

#: How much wider the stated error band is for a GPU class (generation and market segment)
#: that no calibration measurement covers for the workload: the estimate then uses the
#: class's "all" constants, fitted on other GPUs. A judgement, not a fit: the held-out error
#: is measured on unseen GPUs of covered classes, and an uncovered class is further away.
UNCOVERED_BAND_FACTOR = 2.0

#: transformer-infer is a forward pass over whole sequences: encoders, and the
#: prefill of decoders; llm-decode generates one token per sequence per step.
WorkloadClass = Literal["cnn-train", "transformer-train", "cnn-infer", "transformer-infer", "llm-decode"]
WORKLOAD_CLASSES: tuple[str, ...] = get_args(WorkloadClass)


# --------------------------------------------------------------------------
# data files: interconnects and calibration


class RingLinks(BaseModel):
    """A ring over the first ``gpus`` GPUs of a board whose links are uneven, read from its link
    diagram: the per-GPU bandwidth a direction that bounds it, and the links it crosses."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    gpus: int = Field(ge=2, le=64)
    #: per GPU, decimal GB/s per direction
    bandwidth_gb_s: float = Field(gt=0, le=100_000)
    #: the links that bound it, in words ("the 4 links between the two GCDs of an OAM")
    via: str = Field(min_length=3)


class Interconnect(BaseModel):
    """One link or network (data/interconnects.yaml). Bandwidth per direction."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    name: str
    scope: Literal["intra", "inter"]
    kind: Literal["nvlink", "pcie", "xgmi", "infiniband", "roce", "ethernet"]
    generation: int | None = Field(default=None, ge=1, le=10)
    #: per GPU (NVLink, PCIe, a scale-up mesh) or per NIC port (networks), decimal GB/s per direction
    bandwidth_gb_s: float = Field(gt=0, le=100_000)
    #: a scale-up mesh (OAM baseboards: AMD Infinity Fabric, Intel Gaudi's on-die RoCE ports): the direct
    #: links of one GPU to its peers, over which bandwidth_gb_s is spread evenly; a ring over n GPUs of
    #: the board uses n - 1 of them. None: not a mesh
    peer_links: int | None = Field(default=None, ge=1, le=64)
    #: a mesh whose links are uneven (MI250: 4 links between the GCDs of an OAM, one or two between
    #: OAMs): rings over the board's first n GPUs, in device order, timed from its link diagram; a
    #: count not given here is timed at n - 1 of the peer_links and said to be approximate
    ring_links: tuple[RingLinks, ...] = ()
    #: achievable fraction of bandwidth_gb_s for a NCCL ring (bus bandwidth)
    efficiency: float = Field(gt=0, le=1)
    #: NCCL per-hop latency of a ring step (the Simple protocol)
    latency_us: float = Field(ge=0, le=10_000)
    #: the same under NCCL's low-latency protocol (LL); None: only Simple is modelled on this link
    ll_latency_us: float | None = Field(default=None, ge=0, le=10_000)
    rdma: bool
    #: when GPUDirect RDMA is not possible: TCP with host staging
    tcp_efficiency: float | None = Field(default=None, gt=0, le=1)
    tcp_latency_us: float | None = Field(default=None, ge=0, le=100_000)
    sources: tuple[Source, ...] = Field(min_length=1)

    def ring(self, gpus: int) -> RingLinks | None:
        """The diagram's ring over the board's first ``gpus`` GPUs, if it gives one."""
        return next((r for r in self.ring_links if r.gpus == gpus), None)


class HostLink(BaseModel):
    """A GPU's link to its host CPU's memory where it is not the GPU's PCIe slot: the chip-to-chip
    link of a Grace superchip (data/interconnects.yaml ``host_links``; a catalog GPU names its own in
    ``host_link``). Offloaded state crosses it each step, and the PCIe row of the GPU's generation
    times it where a GPU names none."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    name: str
    #: per GPU, decimal GB/s per direction (on a two-GPU superchip, the GPU's own half of the CPU's links)
    bandwidth_gb_s: float = Field(gt=0, le=100_000)
    #: achievable fraction of bandwidth_gb_s for bulk host-device copies
    efficiency: float = Field(gt=0, le=1)
    sources: tuple[Source, ...] = Field(min_length=1)


class PciePath(BaseModel):
    """How GPUs exchange data over PCIe: peer-to-peer through a PCIe switch or through the CPU's
    root complex, or without P2P, staged through host memory (NCCL's SHM transport)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    path: Literal["switch", "root-complex", "none"]
    #: achieved fraction of the PCIe link's per-direction rate for a NCCL ring (bus bandwidth)
    efficiency: float = Field(gt=0, le=1)
    #: NCCL per-hop latency of a ring step on this path (the Simple protocol)
    latency_us: float = Field(ge=0, le=10_000)
    #: the same under NCCL's low-latency protocol (LL)
    ll_latency_us: float | None = Field(default=None, ge=0, le=10_000)
    #: the fraction of the backward pass a gradient all-reduce on this path can hide behind (1: all of
    #: it, as DDP overlaps with P2P copies; less where staged copies contend with the compute)
    overlap: float = Field(default=1.0, ge=0, le=1)
    sources: tuple[Source, ...] = Field(min_length=1)


class P2pDefault(BaseModel):
    """A rule for the PCIe P2P path of a GPU when no system says: the first rule whose every
    given field matches applies."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    vendors: tuple[str, ...] = ()
    segments: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    p2p: Literal["switch", "root-complex", "none"]
    reason: str = Field(min_length=3)
    sources: tuple[Source, ...] = ()

    def matches(self, gpu: Gpu) -> bool:
        return ((not self.vendors or gpu.vendor in self.vendors)
                and (not self.segments or gpu.segment in self.segments)
                and (not self.architectures or gpu.architecture in self.architectures))


class ScaleUpDefault(BaseModel):
    """The GPU-to-GPU fabric of a multi-GPU node of a GPU that is neither SXM nor PCIe (OAM modules
    on a universal baseboard) when no system says: the first rule whose every given field matches
    applies; ``form_factors`` match the catalog's form_factor exactly."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    vendors: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    form_factors: tuple[str, ...] = ()
    #: an intra-node interconnect id with peer_links (a mesh)
    link: str
    #: GPUs on the baseboard the rule describes
    gpus_per_board: int = Field(ge=2, le=64)
    reason: str = Field(min_length=3)
    sources: tuple[Source, ...] = Field(min_length=1)

    def matches(self, gpu: Gpu) -> bool:
        return ((not self.vendors or gpu.vendor in self.vendors)
                and (not self.architectures or gpu.architecture in self.architectures)
                and (not self.form_factors or gpu.form_factor in self.form_factors))


class LowLatencyProtocol(BaseModel):
    """NCCL's LL protocol (data/interconnects.yaml ``ll_protocol``): each 8-byte word carries a flag,
    so a ring step waits less but only part of the bus bandwidth carries data. NCCL times every
    protocol for a message and runs the fastest (src/graph/tuning.cc), so small messages, such as a
    decode step's tensor-parallel all-reduce, go by LL."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    base_latency_us: float = Field(ge=0, le=10_000)
    #: the share of the Simple protocol's bus bandwidth a ring all-reduce reaches
    bandwidth_share: float = Field(gt=0, le=1)
    #: the factor on the intra-node step latency when the ring spans nodes
    multi_node_intra_factor: float = Field(ge=1, le=10)
    #: the GPU vendors whose collective library these figures are NCCL's for; others keep Simple's
    vendors: tuple[str, ...] = Field(min_length=1)
    source: Source


class Interconnects(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    schema_version: int = 1
    collective_base_latency_us: float = Field(ge=0)
    collective_base_latency_source: Source
    ll_protocol: LowLatencyProtocol | None = None
    interconnects: tuple[Interconnect, ...]
    pcie_paths: tuple[PciePath, ...] = Field(min_length=3)
    pcie_p2p_defaults: tuple[P2pDefault, ...] = Field(min_length=1)
    scale_up_defaults: tuple[ScaleUpDefault, ...] = ()
    host_links: tuple[HostLink, ...] = ()

    @model_validator(mode="after")
    def _each_path_once(self) -> Interconnects:
        paths = [p.path for p in self.pcie_paths]
        if sorted(paths) != sorted(set(paths)) or len(paths) != 3:
            raise ValueError("pcie_paths: give switch, root-complex and none once each")
        meshes = {i.id for i in self.interconnects if i.scope == "intra" and i.peer_links}
        for rule in self.scale_up_defaults:
            if rule.link not in meshes:
                raise ValueError(f"scale_up_defaults: {rule.link!r} is not an intra-node interconnect with peer_links")
        return self

    def scale_up(self, gpu: Gpu) -> tuple[Interconnect, ScaleUpDefault] | None:
        """The scale-up mesh of the first ``scale_up_defaults`` rule matching ``gpu``, and the rule."""
        for rule in self.scale_up_defaults:
            if rule.matches(gpu):
                return self.get(rule.link), rule
        return None

    def host_path(self, gpu: Gpu, pcie_generation: int | None) -> tuple[str, float]:
        """(name, achievable decimal GB/s per direction) of the link between ``gpu`` and its host's
        memory: the catalog's ``host_link`` (a ``host_links`` row), else the PCIe row of
        ``pcie_generation`` (resolved by the caller, :meth:`pcie`). A host_link no row names is a
        DataFileError, never read as PCIe."""
        if gpu.host_link is None:
            link = self.pcie(pcie_generation)
            return link.name, link.bandwidth_gb_s * link.efficiency
        for row in self.host_links:
            if row.id == gpu.host_link:
                return row.name, row.bandwidth_gb_s * row.efficiency
        raise DataFileError(f"{gpu.id}: host_link {gpu.host_link!r} is not a host_links row of the interconnects file",
                            hint=f"one of: {', '.join(r.id for r in self.host_links) or 'none defined'}")

    def pcie_path(self, path: str) -> PciePath:
        return next(p for p in self.pcie_paths if p.path == path)

    def get(self, key: str) -> Interconnect:
        wanted = key.strip().lower()
        for link in self.interconnects:
            if link.id == wanted:
                return link
        import difflib

        ids = [i.id for i in self.interconnects]
        close = difflib.get_close_matches(wanted, [*ids, "nvlink", "pcie"], n=3, cutoff=0.4)
        hint = f"did you mean {', '.join(close)}?" if close else f"one of: nvlink, pcie, {', '.join(ids)}"
        raise UsageError(f"unknown interconnect {key!r}", hint=hint)

    def nvlink(self, generation: int | None) -> Interconnect:
        links = [i for i in self.interconnects if i.kind == "nvlink"]
        for link in links:
            if link.generation == generation:
                return link
        return links[-1]

    def pcie(self, generation: int | None) -> Interconnect:
        """The PCIe row of ``generation``; a generation newer than any row gets the newest row. An unknown
        one (None) gets the oldest row: callers that time a GPU resolve an unknown generation first, by
        the stated rule of performance.topology.pcie_generation_for, and say so."""
        links = sorted((i for i in self.interconnects if i.kind == "pcie"), key=lambda i: i.generation or 0)
        for link in links:
            if link.generation == generation:
                return link
        if generation is not None and generation > (links[-1].generation or 0):
            return links[-1]
        return links[0]


#: The physically plausible range of each efficiency (docs/method.md, "Constants"): dense GEMMs and
#: convolutions reach 30-95% of the matmul peak and streaming kernels 50-95% of the memory bandwidth
#: (the ranges issue 18 states; the CNN inference operation tables of data/cnn_ops.json, fitted within
#: them, reach 0.67 and 0.71).
#: A fitted constant outside its range carries a missing term of the model, so a step is not called
#: compute- or memory-bound on its strength.
PHYSICAL_BOUNDS: dict[str, tuple[float, float]] = {"compute_efficiency": (0.3, 0.95),
                                                   "memory_efficiency": (0.5, 0.95)}


def out_of_range(entry: Efficiency) -> tuple[str, ...]:
    """The entry's efficiencies outside PHYSICAL_BOUNDS, in words ("memory efficiency 15% (50-95%)")."""
    return tuple(f"{name.replace('_', ' ')} {getattr(entry, name):.0%} ({lo:.0%}-{hi:.0%})"
                 for name, (lo, hi) in PHYSICAL_BOUNDS.items() if not lo <= getattr(entry, name) <= hi)


class Efficiency(BaseModel):
    """Calibrated efficiencies for one workload class on one architecture generation."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    workload: WorkloadClass
    #: a key of Calibration.generations, or "all" (the class's fallback)
    generation: str
    #: achieved fraction of the precision's peak on matmul/convolution FLOPs
    compute_efficiency: float = Field(gt=0, le=1)
    #: achieved fraction of memory bandwidth on the modelled traffic
    memory_efficiency: float = Field(gt=0, le=1)
    #: achieved fraction of the peak in the fused-attention kernels LLM Foundry ran in
    #: 2023, on the FLOPs they execute (causal: half the score matrix); used for runs
    #: with attention_kernels="llm-foundry-2023" (its reference rows); current kernels
    #: are timed at compute_efficiency. 0 = not fitted
    attention_efficiency: float = Field(default=0.0, ge=0, le=1)
    #: fixed time per layer and step (kernel launches, synchronisation) at
    #: REFERENCE_CLOCK_MHZ when the host launches kernels one by one; it scales
    #: with 1 / the GPU's boost clock
    layer_overhead_us: float = Field(default=0.0, ge=0, le=100_000)
    #: the same when a step's kernels are replayed as one CUDA graph (or enqueued
    #: by a compiled engine such as TensorRT): only the GPU-side gaps and small
    #: kernels remain
    graph_layer_overhead_us: float = Field(default=0.0, ge=0, le=100_000)
    #: memory bandwidth one SM sustains in matrix-vector (small-batch decode)
    #: kernels, decimal GB/s; 0 = no such limit. Little's law: bandwidth = bytes
    #: in flight / latency, and these kernels keep few bytes in flight per SM.
    sm_bandwidth_gb_s: float = Field(default=0.0, ge=0, le=10_000)
    #: which of the values above were fitted for this entry; the others are
    #: taken from the workload's "all" entry
    fitted: tuple[Literal["compute_efficiency", "memory_efficiency", "attention_efficiency", "layer_overhead_us",
                          "graph_layer_overhead_us", "sm_bandwidth_gb_s"], ...] = (
        "compute_efficiency", "memory_efficiency",
    )
    #: reference case ids (tests/data/perf_refs.yaml) the values were fitted on
    fitted_on: tuple[str, ...] = Field(min_length=1)
    #: the GPU classes, ``generation/segment`` (``hopper-blackwell/datacenter``), of the GPUs
    #: those rows were measured on. A generation entry applies only to the segments it covers
    #: (a consumer Blackwell card is not an H100); other GPUs get the class's "all" entry with a
    #: wider error band. Empty: not recorded, read as covering every class.
    covers: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _graphs_remove_overhead(self) -> Efficiency:
        if self.graph_layer_overhead_us > self.layer_overhead_us:
            raise ValueError(
                f"graph_layer_overhead_us ({self.graph_layer_overhead_us}) exceeds layer_overhead_us "
                f"({self.layer_overhead_us}): a CUDA graph only removes launch time")
        return self


class Calibration(BaseModel):
    """data/calibration.yaml: written by benchmarks/calibrate.py."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    schema_version: int = 1
    fitted_by: str
    references: str
    split: str
    generations: dict[str, tuple[str, ...]]
    efficiencies: tuple[Efficiency, ...]
    #: k in the smooth roofline (c^k + m^k)^(1/k) that combines compute and memory time
    roofline_exponent: float = Field(default=2.0, ge=1, le=64)
    #: fraction by which a data-parallel step slows when N > 1 beyond the modelled
    #: communication (NCCL kernels sharing SMs and memory, stragglers, input pipeline)
    data_parallel_overhead: float = Field(ge=0, le=1)
    data_parallel_overhead_fitted_on: tuple[str, ...] = Field(min_length=1)
    #: median relative error on held-out references; reported as the error band
    error_band: float = Field(gt=0, le=10)
    errors: dict[str, Any] = Field(default_factory=dict)
    excluded: tuple[dict[str, str], ...] = ()

    def generation_of(self, architecture: str) -> str:
        for name, archs in self.generations.items():
            if architecture in archs:
                return name
        return "all"

    def lookup(self, workload: str, architecture: str, segment: str | None = None) -> Efficiency:
        """The constants for ``workload`` on ``architecture``: its generation's entry, else the
        class's "all" entry. With ``segment``, a generation entry that no measurement of that
        segment backs is passed over too (see :meth:`select`)."""
        return self.select(workload, architecture, segment).entry

    def select(self, workload: str, architecture: str, segment: str | None = None,
               vendor: str = "nvidia") -> Selection:
        """The constants for ``workload`` on a GPU of ``architecture`` and ``segment``, and whether
        a measurement covers that class.

        A generation entry applies when it covers the segment (``covers``); otherwise the "all"
        entry does, the nearest-physics default. When no entry's rows include the GPU's class,
        the selection is uncovered and says so: its error band is UNCOVERED_BAND_FACTOR wider.
        Every measurement is of an NVIDIA GPU, so another ``vendor``'s GPU always gets the "all"
        entry, uncovered, with a note that says so.
        """
        if vendor != "nvidia":
            return self._other_vendor(workload, architecture, vendor)
        gen = self.generation_of(architecture)
        specific = next((e for e in self.efficiencies if e.workload == workload and e.generation == gen), None)
        fallback = next((e for e in self.efficiencies if e.workload == workload and e.generation == "all"), None)
        key = f"{gen}/{segment}"

        def covered(entry: Efficiency) -> bool:
            return segment is None or not entry.covers or key in entry.covers

        if specific is not None and covered(specific):
            return Selection(specific, True, None)
        if fallback is None:
            if specific is not None:
                return Selection(specific, False, self._uncovered_note(workload, architecture, segment, specific))
            raise DataFileError(
                f"calibration.yaml: no efficiency for workload {workload!r} (generation {gen!r} or 'all')",
                hint="rerun benchmarks/calibrate.py --write",
            )
        if covered(fallback):
            return Selection(fallback, True, None)
        return Selection(fallback, False, self._uncovered_note(workload, architecture, segment, fallback, specific))

    def _other_vendor(self, workload: str, architecture: str, vendor: str) -> Selection:
        used = next((e for e in self.efficiencies if e.workload == workload and e.generation == "all"), None)
        if used is None:
            raise DataFileError(f"calibration.yaml: no efficiency for workload {workload!r} (generation 'all')",
                                hint="rerun benchmarks/calibrate.py --write")
        band = self.error_band * UNCOVERED_BAND_FACTOR
        from gpusizer.hardware.vendors import VENDOR_NAMES

        who = VENDOR_NAMES.get(vendor, vendor)
        note = (f"no calibration data for {who} GPUs ({architecture}): every {workload} measurement behind the "
                f"constants is from NVIDIA GPUs; using the 'all' constants ({used.compute_efficiency:.0%} of peak "
                f"compute) on the {who} peak rates; the error band is widened to {band:.0%}")
        return Selection(used, False, note)

    def _uncovered_note(self, workload: str, architecture: str, segment: str | None, used: Efficiency,
                        passed_over: Efficiency | None = None) -> str:
        band = self.error_band * UNCOVERED_BAND_FACTOR
        which = (f"the {used.generation!r} constants ({used.compute_efficiency:.0%} of peak compute, fitted on "
                 f"{len(used.fitted_on)} measurements)")
        over = (f"; the {passed_over.generation} entry ({passed_over.compute_efficiency:.0%} of peak) was measured on "
                f"{', '.join(c.split('/')[1] for c in passed_over.covers)} GPUs only") if passed_over else ""
        return (f"no {workload} measurement covers {segment} {architecture.capitalize()} GPUs: using {which}{over}; "
                f"the error band is widened to {band:.0%}")

    def error_band_for(self, selection: Selection) -> float:
        """The stated error band of an estimate made with ``selection``."""
        return self.error_band * (1.0 if selection.covered else UNCOVERED_BAND_FACTOR)

    @property
    def constant_count(self) -> int:
        """How many fitted numbers the model carries."""
        return 2 + sum(len(e.fitted) for e in self.efficiencies)  # + overhead and exponent


class Selection(NamedTuple):
    """The calibration entry an estimate uses, and whether measurements cover the GPU's class."""

    entry: Efficiency
    covered: bool
    #: why the class is uncovered and what was used instead; None when covered
    note: str | None


_M = TypeVar("_M", bound=BaseModel)


def _validate(model: type[_M], doc: Any, origin: str) -> _M:
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise DataFileError(datafiles.describe_validation_error(exc, origin)) from None


@functools.cache
def load_interconnects(cache_dir: Path | None = None) -> Interconnects:
    path = datafiles.bundled_path("interconnects.yaml")
    return _validate(Interconnects, datafiles.load_yaml(path, cache_dir), str(path))


@functools.cache
def load_calibration(path: Path | None = None, cache_dir: Path | None = None) -> Calibration:
    path = path or datafiles.bundled_path("calibration.yaml")
    cal = _validate(Calibration, datafiles.load_yaml(path, cache_dir), str(path))
    for archs in cal.generations.values():
        for arch in archs:
            if arch not in ARCH_ORDER:
                raise DataFileError(f"{path}: generations: unknown architecture {arch!r}")
    return cal
