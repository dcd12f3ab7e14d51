"""recommend: rank GPUs for a workload with explainable, weighted rules.

Pure. It takes candidate GPUs, a :class:`~gpusizer.ranking.rules.RuleSet` and a
:class:`RecommendRequest`, and returns a frozen :class:`Recommendation` in which
every GPU carries every rule's contribution to its score, the advisories that
fired, and (for excluded GPUs) the constraints that excluded it.

Nothing here knows about particular GPUs: the rules file says what matters and
the catalog says what each GPU has. Memory fit goes through ``gpusizer.memory.fit`` /
``gpusizer.memory``; the speed column through
``gpusizer.performance.estimate_performance``. Neither formula is repeated here.
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from gpusizer.choices import SORTS, Mode
from gpusizer.domain.parallelism import (
    NODE_GPUS,
    Parallelism,
    gpus_per_node_for,
    layout_words,
    sharded_gpus,
    sharding_alternative,
    strategy_label,
    tensor_parallel,
    within_node,
)
from gpusizer.domain.precision import (
    RULE_PRECISIONS,
    WEIGHT_FORMATS,
    check_mode,
    default_precision,
    precision_spec,
    storage_precision,
)
from gpusizer.domain.run import RunConfig, make_run_config
from gpusizer.domain.shape import ModelShape
from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import SEGMENTS, TENSOR_FIELDS, Gpu, Price
from gpusizer.hardware.vendors import DEFAULT_VENDOR, VENDOR_NAMES, check_vendor, vendor_notes, vendor_wanted
from gpusizer.memory.estimate import MAX_BATCH, fewest_gpus, largest_batch
from gpusizer.memory.estimate import fits as fits_memory
from gpusizer.memory.fit import Capacity, CapacitySource, GpuFit, fit_model
from gpusizer.ranking.configs import Configuration, Plan
from gpusizer.ranking.rules import (
    DERIVED_FIELDS,
    ORDERED_VALUES,
    Advisory,
    Constraint,
    Criterion,
    Requirement,
    RuleSet,
    SpeedSpec,
    Test,
    Workload,
)
from gpusizer.units import NA, format_bytes, plural, show_bool

DEFAULT_TOP = 10


_FROZEN = ConfigDict(frozen=True, defer_build=True)


# --------------------------------------------------------------------------
# inputs


class Candidate(BaseModel):
    """A GPU to rank: a catalog entry, and the memory it offers the run."""

    model_config = _FROZEN

    gpu: Gpu
    label: str
    capacity_bytes: int
    capacity_source: CapacitySource = "catalog"
    #: how many of this GPU the machine has (ranking this machine's GPUs); None for the catalog
    count: int | None = None


def candidates_from_catalog(gpus: Sequence[Gpu]) -> tuple[Candidate, ...]:
    return tuple(Candidate(gpu=g, label=g.id, capacity_bytes=g.memory_bytes) for g in gpus)


def candidates_from_probe(report: Any) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
    """This machine's GPUs (``probe.ProbeReport``), one candidate per catalog entry.

    Identical GPUs are grouped; the memory offered is the least free memory
    among them. Devices the catalog does not know are reported in the notes.
    """
    from gpusizer.memory.fit import capacities_from_probe

    groups: dict[str, list[Capacity]] = {}
    for cap in capacities_from_probe(report):
        if cap.gpu is not None:
            groups.setdefault(cap.gpu.id, []).append(cap)
    notes = [
        f"{d.device.label} is not in the catalog and cannot be ranked: {d.hint}"
        for d in report.devices
        if d.match is None
    ]
    cands = []
    for gpu_id, caps in groups.items():
        indices = ", ".join(c.label.split(":")[0].removeprefix("GPU ") for c in caps)
        cands.append(
            Candidate(
                gpu=caps[0].gpu, label=f"{gpu_id} (GPU {indices})", capacity_bytes=min(c.memory_bytes for c in caps),
                capacity_source="probe-free", count=len(caps),
            )
        )
    return tuple(cands), tuple(notes)


class RecommendRequest(BaseModel):
    """What the user asked. Values are checked by :func:`recommend` (UsageError)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    workload: str
    #: None: the workload's default from the rules file
    precision: str | None = None
    #: the model to size; None: no memory fit, speed from the workload's reference model
    shape: ModelShape | None = None
    batch: int | None = None
    seq_len: int | None = None
    image_size: int | None = None
    #: fused attention, for the memory fit and the speed (as in the memory and performance models)
    flash_attention: bool = True
    #: further RunConfig settings of the run, as fit-model takes them (checkpointing, adapter, offload,
    #: offload_to, weight_format, loss, logits, kv_cache), so both commands size the same run
    run_settings: dict[str, Any] = Field(default_factory=dict)
    optimizer: str = "adamw"
    strategy: str = "ddp"
    gpus_per_node: int = 1
    nodes: int = 1
    interconnect: str | None = None
    #: a node type (data/systems.yaml) whose fabric and NICs the speed is timed on
    system: str | None = None
    #: total for all GPUs (gpus_per_node x nodes), in US dollars
    budget_usd: float | None = None
    #: an objective's configurations (ranking.plan) choose the GPU counts: the single GPUs ranked
    #: here are one each, and a purchase budget is for all the GPUs a configuration buys
    counts_chosen: bool = False
    #: time a decoder's inference as a serving engine runs it: each replica decodes as many
    #: sequences of the context as its paged KV cache holds (memory.serving, at most vLLM's
    #: max_num_seqs), not the workload's batch; the purchase plan of an inference workload sets it
    serving_concurrency: bool = False
    #: total board power of all GPUs, in watts
    max_power_w: float | None = None
    require: tuple[str, ...] = ()
    segments: tuple[str, ...] = ()
    #: whose GPUs to consider: nvidia (the default), amd, intel, or any
    #: whose GPUs: a vendor or "any", in any case (kept in lower case)
    vendor: Annotated[str, BeforeValidator(lambda v: v.lower() if isinstance(v, str) else v)] = DEFAULT_VENDOR
    top: int | None = DEFAULT_TOP
    sort: str = "speed"
    #: GPUs to explain, once each as (catalog id, the name as given): why they are not first, or excluded
    why_not: tuple[tuple[str, str], ...] = ()
    #: the performance model's data files as the caller loaded them (estimate_performance's
    #: calibration, interconnects, systems and catalog); empty: the bundled files, parsed afresh
    perf_data: dict[str, Any] = Field(default_factory=dict, exclude=True, repr=False)

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes


# --------------------------------------------------------------------------
# outputs


class Contribution(BaseModel):
    """One criterion's share of one GPU's score."""

    model_config = _FROZEN

    rule: str
    field: str
    value: float | bool | None
    #: the best value of this field among the GPUs scored against
    best: float | None
    scale: Literal["linear", "log", "bool"]
    #: 0..1, see rules.Criterion
    normalised: float
    weight: float
    #: points of the 0..100 score: 100 x weight x normalised / total weight
    points: float
    #: False: the value is unknown and the rule says ``missing: skip``, so the
    #: criterion is left out of this GPU's score (and of its total weight)
    counted: bool = True
    message: str
    source: str | None = None


FlagKind = Literal["advisory", "constraint", "requirement", "fit", "budget", "power", "segment", "precision"]


class Flag(BaseModel):
    """An advisory that fired, or the reason a GPU was excluded."""

    model_config = _FROZEN

    rule: str
    kind: FlagKind
    message: str
    source: str | None = None


class Speed(BaseModel):
    """The speed column: from the performance model, or a labelled proxy field."""

    model_config = _FROZEN

    method: Literal["performance-model", "proxy"]
    #: whole cluster; for a proxy, the field's value x GPUs
    throughput_per_s: float | None
    unit: str
    per_gpu_throughput_per_s: float | None = None
    batch: int | None = None
    #: what one step takes in over all replicas, in the unit's items (tokens, images, sequences): a
    #: training run's global batch (PerfEstimate.samples_per_step x its data-parallel replicas)
    per_step: int | None = None
    bound: str | None = None
    scaling_efficiency: float | None = None
    error_band: float | None = None
    #: how gradients cross nodes or GPUs: rdma, tcp, nvlink, pcie or none
    transport: str | None = None
    #: throughput / the best throughput among the listed GPUs
    relative: float | None = None
    #: tokens in one sample of a sequence model (to turn tokens into samples and back); None otherwise
    tokens_per_sample: int | None = None
    #: the modelled speed is an upper bound, not an estimate (PerfEstimate.upper_bound): a ranking on it
    #: may put this GPU too high; upper_bound_reason says why
    upper_bound: bool = False
    upper_bound_reason: str | None = None
    note: str | None = None


class GpuResult(BaseModel):
    model_config = _FROZEN

    gpu_id: str
    name: str
    label: str
    segment: str
    architecture: str
    rank: int | None = None
    score: float
    contributions: tuple[Contribution, ...]
    advisories: tuple[Flag, ...] = ()
    excluded_by: tuple[Flag, ...] = ()
    #: None: no model given, so memory fit was not checked
    fits: bool | None = None
    fit: GpuFit | None = None
    speed: Speed | None = None
    #: one GPU's price and what kind it is: a dated street price or the launch price
    price: Price | None = None
    price_total_usd: float | None = None
    power_total_w: float | None = None
    #: cluster throughput per $1000 of GPU price (street, else launch); None: price or speed unknown
    value_per_kusd: float | None = None
    value_note: str | None = None
    #: a listed GPU that is at least as fast for no more money per GPU, when there is one
    outclassed_by: str | None = None
    key_specs: dict[str, float | bool | str | None] = Field(default_factory=dict)

    @property
    def reasons(self) -> tuple[Contribution, ...]:
        """Contributions that earned points, largest first."""
        return tuple(sorted((c for c in self.contributions if c.points > 0), key=lambda c: -c.points))


class ShardedOption(BaseModel):
    """GPUs excluded only because the model does not fit, grouped by the GPUs per node
    (``gpus_per_node``) a sharded run on them needs (memory.fewest_gpus)."""

    model_config = _FROZEN

    strategy: str
    gpus: int
    #: labels, best score first
    gpu_ids: tuple[str, ...]


class WhyNot(BaseModel):
    """Why a GPU the user named is not the recommendation: its exclusions, or how it compares with the first."""

    model_config = _FROZEN

    asked: str
    gpu_id: str | None
    rank: int | None
    reasons: tuple[str, ...]
    #: a serving plan (recommend with users): the GPU's cheapest deployment for the users, listed or
    #: not (over a budget or power cap); None where it has none, and in a ranking
    configuration: Configuration | None = None


class Recommendation(BaseModel):
    model_config = _FROZEN

    workload: str
    description: str
    mode: Mode
    precision: str
    #: where the precision came from: the request, the adapters' frozen 16-bit base (LoRA, QLoRA), or the workload
    precision_from: Literal["given", "adapter default", "workload default"]
    #: the memory model's precision for this run (domain.precision.storage_precision)
    model_precision: str
    tf32: bool
    gpus_per_node: int
    nodes: int
    model_name: str | None
    params: int | None
    #: per GPU, when a model was given
    memory_needed_bytes: int | None
    speed_basis: str
    speed_method: Literal["performance-model", "proxy"]
    speed_unit: str
    value_unit: str
    sort: str
    criteria: tuple[Criterion, ...]
    constraints_applied: tuple[str, ...]
    key_fields: tuple[str, ...]
    #: the top K qualifying GPUs, in order
    ranked: tuple[GpuResult, ...]
    #: qualifying GPUs after the top K (relative speed left null)
    beyond_top: tuple[GpuResult, ...] = ()
    #: how many GPUs qualified before ``top`` cut the list
    qualified: int
    price_basis: str
    excluded: tuple[GpuResult, ...]
    #: GPUs excluded only by the memory fit, and what a sharded run on them needs
    sharded_options: tuple[ShardedOption, ...] = ()
    #: whole configurations chosen for an objective (budget, deadline, ...; ranking.plan)
    plan: Plan | None = None
    #: for each GPU asked about: why it is not first
    why_not: tuple[WhyNot, ...] = ()
    notes: tuple[str, ...] = ()


# --------------------------------------------------------------------------
# field values


def tensor_tflops(gpu: Gpu, precision: str) -> float | None:
    """Dense Tensor Core throughput at ``precision``.

    BF16 runs at the FP16 rate on every architecture that has it, so a missing
    BF16 figure on Ampere or newer falls back to the FP16 one.
    """
    name = precision_spec(precision).tensor_field
    if name is None:
        return None
    value: float | None = getattr(gpu, name)
    spec = precision_spec(precision)
    if value is None and spec.same_rate_as and spec.same_rate_from \
            and gpu.arch_at_least(spec.same_rate_from):
        value = tensor_tflops(gpu, spec.same_rate_as)
    return value


def tensor_precision_present(gpu: Gpu, precision: str) -> bool | None:
    """Whether the matrix units run ``precision``: a known rate says yes; an NVIDIA
    architecture from the one that introduced it says yes even when no source gives the
    rate (an A10G has BF16 Tensor Cores); ``absent`` says no; anything else is unknown."""
    name = precision_spec(precision).tensor_field
    if name is None:
        return False
    if tensor_tflops(gpu, precision) is not None:
        return True
    provenance = gpu.provenance(name)
    if provenance == "absent":
        return False
    return True if gpu.vendor == "nvidia" else None


def precision_tflops(gpu: Gpu, precision: str) -> float | None:
    """Peak matmul throughput at ``precision``, as the performance model sees it
    (``performance.peak_detail``: Tensor Cores, else CUDA cores). ``fp32`` is
    strict FP32 here; ``tf32`` is the TF32 path. None when unknown: no FP64 figure,
    or a Tensor Core rate the GPU has but the catalog cannot give (never the
    CUDA-core lower bound the performance model falls back to)."""
    from gpusizer.performance.peak import peak_detail

    try:
        detail = peak_detail(gpu, precision, tf32=_tf32_in_rules(precision))
    except UsageError:
        return None  # e.g. no FP64 figure in the catalog
    return None if detail.unknown_rate else detail.tflops


def value_unknown(gpu: Gpu, field: str, precision: str) -> bool:
    """A null ``field`` that means "the catalog does not know", not "the GPU lacks it":
    a Tensor Core rate of a GPU with Tensor Cores for that precision, and the rates and
    ratios built on one. Such a value is left out of a score, never scored as 0."""
    if field in TENSOR_FIELDS:
        return gpu.provenance(field) == "unknown"
    if gpu.fp32_tflops is None and field in ("fp32_tflops", "fp64_ratio", "fp16_ratio", "fp16_speedup"):
        return True  # every chip has an FP32 rate: a null one is unpublished, never zero
    if field == "tensor_tflops":
        name = precision_spec(precision).tensor_field
        return name is not None and tensor_tflops(gpu, precision) is None and gpu.provenance(name) == "unknown"
    if field in ("precision_tflops", "precision_tflops_per_w"):
        from gpusizer.performance.peak import peak_detail

        try:
            unknown = peak_detail(gpu, precision, tf32=_tf32_in_rules(precision)).unknown_rate
        except UsageError:
            # no FP64 figure: the rule's `missing` decides; no FP32 rate to fall back to (a
            # part whose maker publishes none): unknown, never 0
            return gpu.fp32_tflops is None
        return unknown or (field == "precision_tflops_per_w" and gpu.tdp_w is None)
    return False


def field_value(gpu: Gpu, field: str, precision: str) -> Any:
    """A catalog field, or a derived one (``rules.DERIVED_FIELDS``)."""
    if field not in DERIVED_FIELDS:
        return getattr(gpu, field)
    if field == "tensor_tflops":
        return tensor_tflops(gpu, precision)
    if field == "precision_tflops":
        return precision_tflops(gpu, precision)
    if field == "precision_tflops_per_w":
        p = precision_tflops(gpu, precision)
        return p / gpu.tdp_w if p is not None and gpu.tdp_w else None
    fp32 = gpu.fp32_tflops
    if field == "fp64_ratio":
        return gpu.fp64_tflops / fp32 if gpu.fp64_tflops is not None and fp32 is not None else None
    if field == "fp16_speedup":
        rates = [r for r in (gpu.fp16_tflops, gpu.tensor_fp16_tflops) if r is not None]
        return max(rates) / fp32 if rates and fp32 is not None else None
    if field == "fp16_ratio":
        return gpu.fp16_tflops / fp32 if gpu.fp16_tflops is not None and fp32 is not None else None
    if field == "ecc_capable":
        return gpu.ecc_capable
    if field == "has_tensor_cores":
        return gpu.has_tensor_cores
    if field == "has_tensor_precision":
        return tensor_precision_present(gpu, precision)
    if field == "gpu_fabric":
        from gpusizer.hardware.vendors import gpu_fabric

        return gpu_fabric(gpu)
    if field == "vendor_fabric":
        from gpusizer.hardware.vendors import GPU_FABRIC

        return GPU_FABRIC.get(gpu.vendor, "GPU-to-GPU link")
    raise KeyError(field)  # pragma: no cover - DERIVED_FIELDS and this function move together


def evaluate(test: Test, gpu: Gpu, precision: str) -> bool | None:
    """True, False, or None when the field is unknown (null). A ``== null`` test asks
    whether the GPU lacks something, so an unknown value (:func:`value_unknown`) gives None."""
    value = field_value(gpu, test.field, precision)
    if test.value is None:
        if value is None and value_unknown(gpu, test.field, precision):
            return None
        return (value is None) == (test.op == "==")
    if value is None:
        return None
    order = ORDERED_VALUES.get(test.field)
    if order is not None and test.op in (">", ">=", "<", "<=") and value not in order:
        return False  # ARCH_ORDER is NVIDIA's: an AMD or Intel architecture is neither before nor after Volta

    def key(v: Any) -> Any:
        return order.index(v) if order is not None else v

    if test.op == "in":
        return value in test.value
    if test.op == "not in":
        return value not in test.value
    a, b = key(value), key(test.value)
    outcome: bool = {
        "==": a == b, "!=": a != b, ">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b,
    }[test.op]
    return outcome


class _MessageFormatter(string.Formatter):
    """Fills ``{field}`` and context placeholders; null prints as n/a."""

    def __init__(self, gpu: Gpu | None, precision: str, context: Mapping[str, Any]) -> None:
        super().__init__()
        self.gpu, self.precision, self.context = gpu, precision, context

    def get_value(self, key: Any, args: Any, kwargs: Any) -> Any:
        if key in self.context:
            return self.context[key]
        if self.gpu is None:
            return None
        return field_value(self.gpu, key, self.precision)

    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None:
            return NA
        if isinstance(value, bool):
            return show_bool(value)
        if isinstance(value, float) and not format_spec:
            return f"{value:g}"
        try:
            return str(super().format_field(value, format_spec))
        except (ValueError, TypeError):
            return str(value)


def format_message(message: str, gpu: Gpu | None, precision: str, context: Mapping[str, Any]) -> str:
    return _MessageFormatter(gpu, precision, context).format(message)


def normalise(criterion: Criterion, value: Any, best: float | None) -> tuple[float, Literal["linear", "log", "bool"]]:
    """A criterion's value as 0..1 against the best; see ``rules.Criterion``."""
    if isinstance(value, bool):
        return (1.0 if value else 0.0), "bool"
    if value is None or best is None or best <= 0 or value <= 0:
        return 0.0, criterion.scale
    ratio = min(1.0, value / best)
    if criterion.scale == "linear":
        return ratio, "linear"
    return max(0.0, 1.0 + math.log10(ratio) / criterion.decades), "log"


# --------------------------------------------------------------------------
# precision and run configuration


def model_precision(precision: str, mode: str) -> tuple[str, bool]:
    """(the memory model's precision, TF32 allowed) for a recommend precision.

    The mapping is ``domain.precision.storage_precision``: tf32 keeps fp32 storage;
    fp8 trains like mixed precision and serves with one-byte weights.
    ``fp32`` means strict FP32 (no TF32); ``tf32`` asks for TF32.
    """
    return storage_precision(precision, mode), _tf32_in_rules(precision)


def _tf32_in_rules(precision: str) -> bool:
    """Rules read ``fp32`` as strict FP32 and ``tf32`` as the TF32 path, so TF32 is
    allowed for every precision but the one whose matmuls it would replace."""
    return precision_spec(precision).tf32_field is None


#: The largest budget a question may give, in US dollars (a trillion): far beyond any GPU purchase
#: (65,536 GPUs, recommend's cap, at $100,000 each is $6.6 billion), yet short enough that every
#: figure derived from it prints whole, digit for digit, where float64 noise would follow past 1e15.
MAX_BUDGET_USD = 1e12
#: The largest power limit, in watts (a gigawatt): 65,536 GPUs at 1,400 W (the GB300's TDP, the
#: highest in the catalog) draw 92 MW.
MAX_POWER_W = 1e9


def _check_request(req: RecommendRequest, rules: RuleSet) -> tuple[Workload, str]:
    wl = rules.workload(req.workload)
    # adapters train on a frozen 16-bit base (domain.precision.default_precision), not the workload's AMP
    adapted = req.run_settings.get("adapter") is not None and wl.mode == "train"
    precision = req.precision or (default_precision(wl.mode, adapters=True) if adapted else wl.precision)
    if precision not in RULE_PRECISIONS:
        raise UsageError(f"precision {precision!r} is not one of {', '.join(RULE_PRECISIONS)}", field="precision",
                         hint=f"the rules are written for these; give quantised weights as the weights' format "
                              f"({', '.join(WEIGHT_FORMATS)}), ranked over one of them")
    if req.budget_usd is not None and not (0 < req.budget_usd <= MAX_BUDGET_USD):
        raise UsageError(f"the budget must be a positive number of US dollars up to {MAX_BUDGET_USD:,.0f}, "
                         f"not {req.budget_usd:g}", hint="the budget is the total for all GPUs, e.g. 10000",
                         field="budget_usd")
    if req.max_power_w is not None and not (0 < req.max_power_w <= MAX_POWER_W):
        raise UsageError(f"the power limit must be a positive number of watts up to {MAX_POWER_W:,.0f}, "
                         f"not {req.max_power_w:g}", hint="the limit is the total board power of all GPUs, e.g. 1600",
                         field="max_power_w")
    if req.gpus_per_node < 1:
        raise UsageError("the number of GPUs per node must be at least 1", field="gpus_per_node")
    if req.nodes < 1:
        raise UsageError("the number of nodes must be at least 1", field="nodes")
    if req.top is not None and req.top < 1:
        raise UsageError("the number of GPUs to list must be at least 1", field="top")
    if req.batch is not None and req.batch < 1:
        raise UsageError("the batch size must be at least 1", field="batch")
    if req.sort not in SORTS:
        raise UsageError(f"{req.sort!r} is not one of the sort orders {', '.join(SORTS)}", field="sort")
    check_vendor(req.vendor)
    for seg in req.segments:
        if seg not in SEGMENTS:
            raise UsageError(f"{seg!r} is not one of the segments {', '.join(SEGMENTS)}", field="segments")
    for name in req.require:
        rules.requirement(name)
    if req.interconnect is not None and req.interconnect.strip().lower() not in ("nvlink", "nvswitch", "pcie"):
        from gpusizer.performance.calibration import load_interconnects

        load_interconnects().get(req.interconnect)  # UsageError with close names
    try:
        check_mode(precision, wl.mode)
    except UsageError:
        raise UsageError(
            f"precision {precision} is an inference precision, but workload {wl.name!r} trains",
            hint="use an inference workload (inference, llm-inference), or a training precision (mixed, bf16, fp32)",
            field="precision",
        ) from None
    return wl, precision


# --------------------------------------------------------------------------
# the engine


def reference_shape(workload: Workload, zoo: Any) -> ModelShape | None:
    """The zoo model a workload's speed column uses when no model is given."""
    from gpusizer.domain.shape import shape_from_model

    if workload.speed.model is None:
        return None
    return shape_from_model(zoo.resolve(workload.speed.model))


#: A hard test a GPU must pass: (rule id, flag kind, the constraint or requirement).
_HardTest = tuple[str, FlagKind, Constraint | Requirement]


@dataclass(frozen=True)
class _Run:
    """A checked request with the rules that apply to it: what every step below reads."""

    req: RecommendRequest
    wl: Workload
    precision: str
    #: the memory model's precision, and whether TF32 is allowed (:func:`model_precision`)
    model_precision: str
    tf32: bool
    #: the placeholders every rule message may name besides fields
    context: Mapping[str, Any]
    criteria: tuple[Criterion, ...]
    advisories: tuple[Advisory, ...]
    constraints: tuple[Constraint, ...]
    requirements: Mapping[str, Requirement]
    #: the workload's constraints, then the requirements asked for, in order
    hard_tests: tuple[_HardTest, ...]
    #: the run the memory fit sizes
    mem_cfg: RunConfig


def _prepare(rules: RuleSet, req: RecommendRequest) -> _Run:
    """Check ``req`` and pick the rules that apply to this run (their ``when`` holds)."""
    wl, precision = _check_request(req, rules)
    mp, tf32 = model_precision(precision, wl.mode)

    def applies(rule: Criterion | Constraint | Advisory) -> bool:
        return rule.enabled and rule.when.holds(gpus_per_node=req.gpus_per_node, nodes=req.nodes,
                                                precision=precision, mode=wl.mode)

    constraints = tuple(c for c in wl.constraints if applies(c))
    requirements = {name: rules.requirement(name) for name in dict.fromkeys(req.require)}
    hard_tests: list[_HardTest] = [(c.id, "constraint", c) for c in constraints]
    hard_tests += [(f"require-{name}", "requirement", r) for name, r in requirements.items()]
    mem_cfg = make_run_config(**{
        **req.run_settings, "mode": wl.mode, "precision": mp, "optimizer": req.optimizer, "batch": req.batch,
        "seq_len": req.seq_len, "image_size": req.image_size,
        "gpus": sharded_gpus(req.strategy, req.gpus_per_node, req.nodes), "strategy": req.strategy,
        "flash_attention": req.flash_attention,
    })
    return _Run(
        req=req, wl=wl, precision=precision, model_precision=mp, tf32=tf32,
        context={"precision": precision, "gpus": req.gpus_per_node, "nodes": req.nodes, "total_gpus": req.total_gpus,
                 "workload": wl.name},
        criteria=tuple(c for c in wl.criteria if c.weight > 0 and applies(c)),
        advisories=tuple(a for a in wl.advisories if applies(a)),
        constraints=constraints, requirements=requirements, hard_tests=tuple(hard_tests), mem_cfg=mem_cfg,
    )


def run_config(rules: RuleSet, req: RecommendRequest) -> RunConfig:
    """The run ``req`` sizes and times (its memory fit's RunConfig), checked."""
    return _prepare(rules, req).mem_cfg


def recommend(
    candidates: Sequence[Candidate],
    rules: RuleSet,
    req: RecommendRequest,
    *,
    reference: ModelShape | None = None,
    pool: Sequence[Gpu] | None = None,
) -> Recommendation:
    """Rank ``candidates`` for ``req.workload``.

    ``reference``: the workload's reference model (``reference_shape``), used for
    the speed column when ``req.shape`` is None. ``pool``: the GPUs each criterion
    is normalised against (default: the candidates' GPUs); ranking a machine's own
    GPUs passes the whole catalog, so that a single local GPU does not score 100 by default.
    """
    run = _prepare(rules, req)
    wl = run.wl
    candidates = [c for c in candidates if vendor_wanted(req.vendor, c.gpu)]
    best = _best_values(run, [g for g in (pool if pool is not None else [c.gpu for c in candidates])
                              if vendor_wanted(req.vendor, g)])
    fits_by_label, memory_needed, fit_notes = _fit_candidates(run, candidates)
    results = [_assess(run, cand, best, fits_by_label.get(cand.label)) for cand in candidates]
    by_label = {c.label: c for c in candidates}
    speed_shape = req.shape if req.shape is not None else reference
    qualified = _sort(_with_speed(run, results, by_label, speed_shape), req.sort)
    key_fields = _key_fields(run.criteria)
    ranked, beyond = _place(run, _outclassed(qualified), by_label, key_fields)
    excluded = tuple(_with_key_specs(r, by_label[r.label].gpu, key_fields, run.precision)
                     for r in results if r.excluded_by)
    unit = next((r.speed.unit for r in qualified if r.speed is not None and r.speed.unit), "")
    return Recommendation(
        workload=wl.name, description=wl.description, mode=wl.mode, precision=run.precision,
        precision_from="given" if req.precision else (
            "adapter default" if req.run_settings.get("adapter") is not None and wl.mode == "train"
            else "workload default"), model_precision=run.model_precision,
        tf32=run.tf32, gpus_per_node=req.gpus_per_node, nodes=req.nodes,
        model_name=req.shape.name if req.shape else None, params=req.shape.params if req.shape else None,
        memory_needed_bytes=memory_needed, speed_basis=_speed_basis(wl, req, run.precision, speed_shape),
        speed_method="proxy" if _proxy_field(wl.speed, req) else "performance-model", speed_unit=unit,
        value_unit=f"{unit} per $1k" if unit else "", sort=req.sort, criteria=run.criteria,
        constraints_applied=_constraints_applied(run, memory_needed), key_fields=key_fields, ranked=tuple(ranked),
        beyond_top=tuple(beyond), qualified=len(qualified), price_basis=_price_basis(qualified, req.sort),
        excluded=excluded,
        sharded_options=_sharded_options(results, req, run.mem_cfg) if req.shape is not None else (),
        notes=(*_notes(run, fit_notes), *_upper_bound_notes(ranked),
               *vendor_notes([by_label[r.label].gpu for r in ranked])),
        why_not=tuple(why_not_ranking(gpu_id, asked, [*ranked, *beyond], excluded, pool or [c.gpu for c in candidates], req)
                      for gpu_id, asked in req.why_not),
    )


# --- scores ---------------------------------------------------------------


def _best_values(run: _Run, pool: Sequence[Gpu]) -> dict[str, float | None]:
    """Each criterion's best (largest) number among the ``pool`` GPUs; None if none is known."""
    best: dict[str, float | None] = {}
    for c in run.criteria:
        values = [field_value(g, c.field, run.precision) for g in pool]
        numbers = [float(v) for v in values if v is not None and not isinstance(v, bool)]
        best[c.id] = max(numbers) if numbers else None
    return best


def _contributions(run: _Run, gpu: Gpu, best: Mapping[str, float | None]) -> tuple[Contribution, ...]:
    """Every criterion's share of ``gpu``'s 0..100 score."""
    values = {c.id: field_value(gpu, c.field, run.precision) for c in run.criteria}
    counted = {c.id: not (values[c.id] is None and (c.missing == "skip" or value_unknown(gpu, c.field, run.precision)))
               for c in run.criteria}
    total_weight = sum(c.weight for c in run.criteria if counted[c.id])
    out = []
    for c in run.criteria:
        value = values[c.id]
        norm, scale = normalise(c, value, best[c.id])
        points = 100 * c.weight * norm / total_weight if total_weight and counted[c.id] else 0.0
        out.append(
            Contribution(
                rule=c.id, field=c.field, value=value, best=best[c.id], scale=scale, normalised=round(norm, 4),
                weight=c.weight, points=round(points, 2), counted=counted[c.id],
                message=format_message(c.message, gpu, run.precision, {**run.context, "gpu": gpu.name,
                                                                       "gpu_id": gpu.id, "value": value}),
                source=c.source,
            )
        )
    return tuple(out)


# --- memory fit -----------------------------------------------------------


def _fit_candidates(run: _Run, candidates: Sequence[Candidate]) -> tuple[dict[str, GpuFit], int | None, tuple[str, ...]]:
    """(each candidate's fit by label, memory needed per GPU, the fit's notes); empty without a model."""
    if run.req.shape is None:
        return {}, None, ()
    caps = [Capacity(gpu=c.gpu, label=c.label, memory_bytes=c.capacity_bytes, source=c.capacity_source)
            for c in candidates]
    report = fit_model(run.req.shape, run.mem_cfg, caps, suggest=False)  # recommend has its own next steps
    # fit_model answers one GpuFit per capacity, in order
    fits = {c.label: f for c, f in zip(candidates, report.gpus, strict=True)}
    return fits, report.breakdown.total_bytes, tuple(report.notes)


# --- per GPU --------------------------------------------------------------


def _assess(run: _Run, cand: Candidate, best: Mapping[str, float | None], gfit: GpuFit | None) -> GpuResult:
    """One candidate's score, the advisories that fire on it and what excludes it (no speed yet)."""
    gpu = cand.gpu
    total = run.req.total_gpus
    ctx = {**run.context, "gpu": gpu.name, "gpu_id": gpu.id}
    price = gpu.price
    price_total = price.usd * total if price is not None else None
    power_total = gpu.tdp_w * total if gpu.tdp_w is not None else None
    excluded = _segment_flags(run, gpu)
    for rule, kind, hard in run.hard_tests:
        flag = _failed_test(run, gpu, ctx, rule, kind, hard)
        if flag is not None:
            excluded.append(flag)
    excluded += _limit_flags(run, gpu, power_total)
    if gfit is not None and not gfit.fits:
        excluded.append(Flag(rule="memory-fit", kind="fit", message=_fit_message(gfit, run.req, run.mem_cfg)))
    contribs = _contributions(run, gpu, best)
    return GpuResult(
        gpu_id=gpu.id, name=gpu.name, label=cand.label, segment=gpu.segment, architecture=gpu.architecture,
        score=round(sum(c.points for c in contribs), 1), contributions=contribs,
        advisories=_fired_advisories(run, gpu, ctx), excluded_by=tuple(excluded),
        fits=None if gfit is None else gfit.fits, fit=gfit,
        price=price, price_total_usd=price_total, power_total_w=power_total, key_specs={},
    )


def _segment_flags(run: _Run, gpu: Gpu) -> list[Flag]:
    segments = run.req.segments
    if not segments or gpu.segment in segments:
        return []
    return [Flag(rule="segment", kind="segment",
                 message=f"segment {gpu.segment} is not one of the segments asked for ({', '.join(segments)})")]


def _failed_test(
    run: _Run, gpu: Gpu, ctx: Mapping[str, Any], rule: str, kind: FlagKind, hard: Constraint | Requirement,
) -> Flag | None:
    """The flag for a constraint or requirement ``gpu`` fails (or cannot be checked on); None if it passes."""
    ok = evaluate(hard.test, gpu, run.precision)
    if ok:
        return None
    field = hard.test.field
    value = field_value(gpu, field, run.precision)
    msg = format_message(hard.message, gpu, run.precision, {**ctx, "value": value})
    msg += f" ({field} is unknown for this GPU)" if ok is None else f" ({field} = {_show(value)})"
    return Flag(rule=rule, kind=kind, message=msg, source=hard.source)


def _limit_flags(run: _Run, gpu: Gpu, power_total: int | None) -> list[Flag]:
    """The budget and the power limit, for all the run's GPUs together (where a plan chooses the counts,
    SXM and OAM modules at a board of eight: they are sold no other way)."""
    req, total = run.req, run.req.total_gpus
    flags = []
    price = gpu.price
    # a plan buys SXM and OAM modules by the board of eight, so its one-GPU ranking checks the board's price
    board = NODE_GPUS if req.counts_chosen and gpu.on_baseboard else 1
    if req.budget_usd is not None:
        if price is None:
            flags.append(Flag(rule="budget", kind="budget", message=(
                "price unknown, so the budget cannot be checked (add street_price_usd and street_price_date, or "
                "launch_price_usd, in a user catalog file)")))
        elif price.usd * max(total, board) > req.budget_usd:
            sold = f"sold only on boards of {NODE_GPUS} (SXM/OAM): " if board > total else ""
            flags.append(Flag(rule="budget", kind="budget", message=(
                f"{sold}{max(total, board)} x ${price.usd:,.0f} ({price.label}) = ${price.usd * max(total, board):,.0f} "
                f"is over the budget of ${req.budget_usd:,.0f}")))
    if req.max_power_w is not None:
        if power_total is None:
            flags.append(Flag(rule="max-power", kind="power",
                              message="board power (tdp_w) unknown, so the power limit cannot be checked"))
        elif power_total > req.max_power_w:
            flags.append(Flag(rule="max-power", kind="power", message=(
                f"{total} x {gpu.tdp_w} W = {power_total:,} W is over the power limit of {req.max_power_w:,.0f} W")))
    return flags


#: What --require ecc adds for a GPU whose ECC is a driver setting (when the workload's own
#: ecc-optional advisory has not said it already).
ECC_OPTIONAL_NOTE = ("ECC on {gpu} is a driver setting: it qualifies, but must be turned on (NVIDIA: nvidia-smi -e 1, "
                     "then reboot; data-center boards ship with it on); NVIDIA boards then keep about 1/16 of the "
                     "memory for check bits, and it costs some bandwidth")


def _fired_advisories(run: _Run, gpu: Gpu, ctx: Mapping[str, Any]) -> tuple[Flag, ...]:
    """The per-GPU advisories whose ``warn_if`` holds for ``gpu``; then a note for each
    criterion whose value is unknown (left out of the score), and for ECC that is only a
    driver setting when ECC is required."""
    fired = []
    for adv in run.advisories:
        if adv.warn_if is not None and evaluate(adv.warn_if, gpu, run.precision):
            value = field_value(gpu, adv.warn_if.field, run.precision)
            fired.append(Flag(rule=adv.id, kind="advisory", source=adv.source,
                              message=format_message(adv.message, gpu, run.precision, {**ctx, "value": value})))
    for c in run.criteria:
        if field_value(gpu, c.field, run.precision) is None and value_unknown(gpu, c.field, run.precision):
            fired.append(Flag(rule=f"unknown-{c.field}", kind="advisory", message=(
                f"{c.field} at {run.precision} is unknown for {gpu.id}: it has Tensor Cores, but no source gives "
                f"the rate and no derivation rule computes it, so criterion {c.id!r} is left out of its score")))
    if "ecc" in run.requirements and gpu.ecc == "optional" and not any(f.rule == "ecc-optional" for f in fired):
        fired.append(Flag(rule="ecc-optional", kind="advisory", message=ECC_OPTIONAL_NOTE.format(gpu=gpu.name)))
    return tuple(dict((f.rule, f) for f in fired).values())


# --- speed, value and rank ------------------------------------------------


def _with_speed(
    run: _Run, results: Sequence[GpuResult], by_label: Mapping[str, Candidate], shape: ModelShape | None,
) -> list[GpuResult]:
    """The qualifying GPUs (nothing excluded them), with their speed and value filled in."""
    qualified: list[GpuResult] = []
    for res in results:
        if res.excluded_by:
            continue
        speed = _speed(by_label[res.label], run.wl.speed, run.req, run.precision, run.tf32, shape, run.mem_cfg)
        value, value_note = None, None
        if res.price_total_usd is None:
            value_note = "price unknown"
        elif speed is None or speed.throughput_per_s is None:
            value_note = "speed unknown"
        else:
            value = speed.throughput_per_s / (res.price_total_usd / 1000)
        qualified.append(res.model_copy(update={"speed": speed, "value_per_kusd": value, "value_note": value_note}))
    return qualified


def _throughput(r: GpuResult) -> float:
    """Cluster throughput; -1 when unknown, so it sorts last."""
    return r.speed.throughput_per_s if r.speed and r.speed.throughput_per_s is not None else -1.0


#: speeds closer than this ratio are a near-tie, which the rules' score decides
NEAR_TIE = 1.03


def _speed_class(r: GpuResult) -> int:
    """The throughput on a log scale in NEAR_TIE steps: equal for near-ties (the same step)."""
    thr = _throughput(r)
    return math.floor(math.log(thr) / math.log(NEAR_TIE)) if thr > 0 else -(1 << 30)


def _sort(qualified: list[GpuResult], sort: str) -> list[GpuResult]:
    """Best first by ``sort``; ties go to the score, then the id. Unknown speed or value sorts last."""
    if sort == "speed":
        # within NEAR_TIE of each other, speeds are one tie (the model's error band is wider): the rules'
        # score decides between them
        return sorted(qualified, key=lambda r: (_throughput(r) < 0, -_speed_class(r), -r.score, r.gpu_id))
    if sort == "value":
        return sorted(qualified, key=lambda r: (r.value_per_kusd is None, -(r.value_per_kusd or 0), -r.score, r.gpu_id))
    return sorted(qualified, key=lambda r: (-r.score, -_throughput(r), r.gpu_id))


def _outclassed(qualified: Sequence[GpuResult]) -> list[GpuResult]:
    """Each GPU with the first listed GPU that is at least as fast and costs no more, if one is: the rules
    may rank a GPU high that the speed column and the price say is a worse buy."""
    out = []
    for r in qualified:
        better = next((o for o in qualified if o is not r and r.price is not None and o.price is not None
                       and _throughput(o) >= _throughput(r) > 0 and o.price.usd <= r.price.usd
                       and (_throughput(o) > _throughput(r) or o.price.usd < r.price.usd)), None)
        out.append(r.model_copy(update={"outclassed_by": better.gpu_id}) if better is not None else r)
    return out


def why_not_ranking(name: str, asked: str, listed: Sequence[GpuResult], excluded: Sequence[GpuResult],
             pool: Sequence[Gpu], req: RecommendRequest) -> WhyNot:
    """Why ``name`` is not first: its exclusions, or its rank and how it compares with the first."""
    found = next((r for r in [*listed, *excluded] if r.gpu_id == name), None)
    if found is None:
        gpu = next((g for g in pool if g.id == name), None)
        who = VENDOR_NAMES.get(gpu.vendor, gpu.vendor) if gpu is not None else ""
        why = (f"not considered: it is {'an' if who[:1] in 'AEIOU' else 'a'} {who} GPU, and only "
               f"{VENDOR_NAMES.get(req.vendor, req.vendor)} GPUs were (ask for its vendor, or any)"
               if gpu is not None and gpu.vendor != req.vendor else "not among the GPUs considered (see the segments, "
               "the system and the local GPUs asked for)")
        return WhyNot(asked=asked, gpu_id=gpu.id if gpu else None, rank=None, reasons=(why,))
    if found.excluded_by:
        return WhyNot(asked=asked, gpu_id=found.gpu_id, rank=None,
                      reasons=tuple(f"excluded by {f.rule}: {f.message}" for f in found.excluded_by))
    first = listed[0]
    reasons = [f"ranked {found.rank} of {len(listed)} by {req.sort}"]
    if found is not first:
        if _throughput(found) > 0 and _throughput(first) > 0:
            reasons.append(f"{first.gpu_id} is {_throughput(first) / _throughput(found):.2f}x its speed")
        reasons.append(f"score {found.score:.1f} against {first.gpu_id}'s {first.score:.1f}")
        prices = [f"${p.usd:,.0f}" if p is not None else "unknown" for p in (found.price, first.price)]
        reasons.append(f"price {prices[0]} against {prices[1]}")
    if found.outclassed_by:
        reasons.append(f"{found.outclassed_by} is at least as fast for no more money")
    return WhyNot(asked=asked, gpu_id=found.gpu_id, rank=found.rank, reasons=tuple(reasons))


def _with_key_specs(res: GpuResult, gpu: Gpu, key_fields: Sequence[str], precision: str, **update: Any) -> GpuResult:
    return res.model_copy(update={**update, "key_specs": {f: field_value(gpu, f, precision) for f in key_fields}})


def _place(
    run: _Run, qualified: Sequence[GpuResult], by_label: Mapping[str, Candidate], key_fields: Sequence[str],
) -> tuple[list[GpuResult], list[GpuResult]]:
    """Number the sorted GPUs; (the top ``req.top``, with speed relative to the fastest of them; the rest)."""
    shown = len(qualified) if run.req.top is None else min(run.req.top, len(qualified))
    top_thr = max((_throughput(r) for r in qualified[:shown]), default=-1.0)
    ranked: list[GpuResult] = []
    beyond: list[GpuResult] = []
    for i, r in enumerate(qualified, 1):
        speed = r.speed
        if i <= shown and speed is not None and speed.throughput_per_s is not None and top_thr > 0:
            speed = speed.model_copy(update={"relative": round(speed.throughput_per_s / top_thr, 4)})
        placed = _with_key_specs(r, by_label[r.label].gpu, key_fields, run.precision, rank=i, speed=speed)
        (ranked if i <= shown else beyond).append(placed)
    return ranked, beyond


# --- header and notes -----------------------------------------------------


def _constraints_applied(run: _Run, memory_needed: int | None) -> tuple[str, ...]:
    """One line per constraint, requirement and limit the run was checked against."""
    req, cfg = run.req, run.mem_cfg
    total = req.total_gpus
    gpus = plural(total, "GPU")
    applied = [f"{c.id}: {c.test.describe()}" for c in run.constraints]
    applied += [f"requirement {n}: {r.test.describe()}" for n, r in run.requirements.items()]
    if req.segments:
        applied.append(f"segments {', '.join(req.segments)}")
    if req.vendor != DEFAULT_VENDOR:  # the default, NVIDIA only, is not listed
        applied.append(f"vendor {req.vendor}")
    if req.budget_usd is not None:
        applied.append(f"budget ${req.budget_usd:,.0f} for all the GPUs a configuration buys (1 GPU in the "
                       "ranking; street prices, else launch prices)" if req.counts_chosen else
                       f"budget ${req.budget_usd:,.0f} for {gpus} (street prices, else launch prices)")
    if req.max_power_w is not None:
        applied.append(f"power limit {req.max_power_w:,.0f} W for {gpus}")
    if req.shape is not None and memory_needed is not None:
        applied.append(f"memory fit: {req.shape.name} needs {format_bytes(memory_needed)} per GPU "
                       f"({cfg.mode}, {cfg.precision}, batch {cfg.batch} per GPU, "
                       f"{layout_words(cfg.strategy, cfg.gpus, cfg.mode)})")
    return tuple(applied)


def _price_basis(qualified: Sequence[GpuResult], sort: str) -> str:
    unpriced = sum(1 for r in qualified if r.price_total_usd is None)
    street = sum(1 for r in qualified if r.price is not None and r.price.basis == "street")
    return (f"catalog street prices where known ({street} GPUs, dated market prices), else launch prices (MSRP at "
            "launch); purchase prices, not cloud hourly ones; ") + (
        f"{unpriced} of {len(qualified)} qualifying GPUs have no price (most data-center cards are sold by quote): "
        "their value is unknown, never free" + ("; sorting by value lists them last" if sort == "value" else "")
        if unpriced else f"all {len(qualified)} qualifying GPUs have one"
    )


def _upper_bound_notes(ranked: Sequence[GpuResult]) -> tuple[str, ...]:
    """One note naming the listed GPUs whose speed is an upper bound, and what that does to the order."""
    upper = [r for r in ranked if r.speed is not None and r.speed.upper_bound]
    if not upper:
        return ()
    return (f"speed is an upper bound for {', '.join(r.label for r in upper)}: matrix-vector decode on them is "
            "timed without the per-SM cap calibrated on NVIDIA GPUs (their SM count is unknown, or they have no "
            "SMs in NVIDIA's sense), so they may rank higher than they run; their error band is widened "
            "(estimate --gpu ID says why)",)


def _notes(run: _Run, fit_notes: Sequence[str]) -> tuple[str, ...]:
    """The memory fit's notes, the workload's notes (advisories without a test), then what was not checked."""
    notes = list(fit_notes)
    notes += [format_message(a.message, None, run.precision, {**run.context, "value": None})
              for a in run.advisories if a.warn_if is None]
    if run.req.shape is None:
        notes.append("memory fit not checked: give a model or a parameter count (and a batch size) "
                     "to exclude GPUs it does not fit on")
    if not run.criteria:
        notes.append(f"workload {run.wl.name!r} has no criteria that apply, so every score is 0")
    return tuple(dict.fromkeys(notes))


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _sharded_need(gfit: GpuFit, req: RecommendRequest, cfg: RunConfig) -> tuple[str, int | None]:
    """The sharding strategy to suggest (the user's, else tp to serve, fsdp to train) and
    the fewest GPUs that hold the model with it (memory.fewest_gpus)."""
    alternative = sharding_alternative(cfg.strategy, cfg.mode, cfg.offload)
    if req.shape is None:
        return alternative, None
    return alternative, fewest_gpus(req.shape, cfg.model_copy(update={"strategy": alternative}), gfit.memory_bytes)


def _fit_message(gfit: GpuFit, req: RecommendRequest, cfg: RunConfig) -> str:
    """Why the model does not fit, and what sharding would take."""
    msg = (f"does not fit: needs {format_bytes(gfit.total_bytes)} per GPU, has {format_bytes(gfit.memory_bytes)}"
           + (" free" if gfit.capacity_source == "probe-free" else ""))
    alternative, need = _sharded_need(gfit, req, cfg)
    if need is not None and within_node(alternative) and need > NODE_GPUS:
        msg += f"; even {strategy_label(alternative, cfg.mode)} over a node's {NODE_GPUS} GPUs does not hold it"
    elif need is not None:
        msg += f"; with {strategy_label(alternative, cfg.mode)} it needs {need} GPUs"
    return msg


def _sharded_options(results: Sequence[GpuResult], req: RecommendRequest, cfg: RunConfig) -> tuple[ShardedOption, ...]:
    """Group the GPUs that only the memory fit excluded by the sharded run that holds the model.

    ``gpus`` is per node, as ``gpus_per_node`` is: tensor parallelism shards inside a node,
    ZeRO and FSDP over every GPU of every node (domain.parallelism.sharded_gpus). A GPU is
    listed only if that run also keeps within the budget and the power limit at its GPU count.
    """
    groups: dict[tuple[str, int], list[GpuResult]] = {}
    for res in results:
        if not res.excluded_by or res.fit is None or any(f.kind != "fit" for f in res.excluded_by):
            continue
        strategy, need = _sharded_need(res.fit, req, cfg)
        if need is None:
            continue
        per_node = gpus_per_node_for(strategy, need, req.nodes)
        if strategy == cfg.strategy and per_node <= req.gpus_per_node:
            continue  # the run as given already has that many: nothing new to suggest
        total = per_node * req.nodes
        if req.budget_usd is not None and (res.price is None or res.price.usd * total > req.budget_usd):
            continue
        if req.max_power_w is not None and (res.power_total_w is None
                                            or res.power_total_w / req.total_gpus * total > req.max_power_w):
            continue
        groups.setdefault((strategy, per_node), []).append(res)
    return tuple(
        ShardedOption(strategy=strategy, gpus=per_node, gpu_ids=tuple(r.label for r in sorted(rs, key=lambda r: -r.score)))
        for (strategy, per_node), rs in sorted(groups.items(), key=lambda kv: kv[0][1])
    )


def _key_fields(criteria: Sequence[Criterion]) -> tuple[str, ...]:
    fields: list[str] = []
    for c in sorted(criteria, key=lambda c: -c.weight):
        if c.field not in fields:
            fields.append(c.field)
    return tuple(fields[:4])


def _speed_basis(wl: Workload, req: RecommendRequest, precision: str, shape: ModelShape | None) -> str:
    """One line saying where the speed column comes from."""
    proxy = _proxy_field(wl.speed, req)
    if proxy is not None:
        return (f"peak {proxy} x GPUs: workload {wl.name!r} has no model in the performance model, so this is "
                "a datasheet ratio, not a modelled runtime")
    if shape is None:
        return "not estimated: no model given and no reference model passed (see recommend.reference_shape)"
    mode = "training" if wl.mode == "train" else "inference"
    if serves(req, shape, wl.mode):
        batch = (f"decoding as many sequences of {input_seq_len(req, wl.speed, shape):,} tokens as each "
                 "replica's paged KV cache holds (at most vLLM's max_num_seqs for the GPU)")
    else:
        batch = (f"batch {req.batch} per GPU" if req.batch is not None
                 else f"batch {wl.speed.batch or 1} per GPU (less where it does not fit)")
    who = "your model" if req.shape is not None else f"reference model for {wl.name}; give a model to change it"
    return (f"{shape.name} {mode} ({who}), {precision}, {batch}, from the performance model "
            "('gpusizer estimate'); relative to the fastest GPU listed")


def proxy_unit(field: str) -> str:
    """The unit a proxy field's name carries (``_tflops`` -> TFLOPS, ``_gb_s`` -> GB/s)."""
    for suffix, unit in (("_tflops_per_w", "TFLOPS/W"), ("_tflops", "TFLOPS"), ("_tops", "TOPS"), ("_gb_s", "GB/s"),
                         ("_gib", "GiB"), ("_w", "W")):
        if field.endswith(suffix):
            return unit
    return field


def serves(req: RecommendRequest, shape: ModelShape | None, mode: str) -> bool:
    """Whether ``req`` times ``shape`` at its serving concurrency (:attr:`RecommendRequest.serving_concurrency`):
    a decoder's inference (``mode``), without a batch given."""
    return (req.serving_concurrency and mode == "inference" and req.batch is None and shape is not None
            and shape.generates)


def input_seq_len(req: RecommendRequest, spec: SpeedSpec, shape: ModelShape) -> int:
    """The sequence length the speed column times: the one given, else the workload's (for its
    reference model), else the model's default."""
    from gpusizer.memory.estimate import default_seq_len

    return req.seq_len or (spec.seq_len if req.shape is None else None) or default_seq_len(shape)


def serving_batch(shape: ModelShape, cfg: RunConfig, cand: Candidate, strategy: str, gpus_per_node: int) -> int:
    """Sequences of ``cfg``'s context one replica decodes at once: what its paged KV cache holds
    (memory.serving, vLLM's accounting), at most vLLM's ``max_num_seqs`` for the GPU. A
    tensor-parallel replica is a node's GPUs; otherwise each GPU is one."""
    from gpusizer.memory.estimate import default_seq_len
    from gpusizer.memory.serving import serving_capacity

    tp = cfg.tp or Parallelism.of(strategy, gpus_per_node).tp  # (a tensor-parallel size given: replicas share a node)
    run = cfg.model_copy(update=tensor_parallel(tp))
    return serving_capacity(shape, run, cand.capacity_bytes, cfg.seq_len or default_seq_len(shape),
                            gpu_name=cand.gpu.name).max_running


def _proxy_field(spec: SpeedSpec, req: RecommendRequest) -> str | None:
    return spec.proxy if req.shape is None else None


def _speed(
    cand: Candidate, spec: SpeedSpec, req: RecommendRequest, precision: str, tf32: bool,
    shape: ModelShape | None, mem_cfg: RunConfig,
) -> Speed | None:
    gpu = cand.gpu
    total = req.total_gpus
    proxy = _proxy_field(spec, req)
    if proxy is not None:
        value = field_value(gpu, proxy, precision)
        return Speed(method="proxy", throughput_per_s=value * total if value is not None else None,
                     per_gpu_throughput_per_s=value, unit=proxy_unit(proxy),
                     note=None if value is not None else f"{proxy} unknown")
    if shape is None:
        return None
    user_model = req.shape is not None
    seq_len = req.seq_len or (None if user_model else spec.seq_len)
    image_size = req.image_size or (None if user_model else spec.image_size)
    sized = mem_cfg.model_copy(update={k: v for k, v in (("seq_len", seq_len), ("image_size", image_size)) if v})
    if req.batch is not None:
        batch = req.batch
    elif serves(req, shape, sized.mode):
        try:
            batch = serving_batch(shape, sized, cand, req.strategy, req.gpus_per_node)
        except UsageError as exc:
            return Speed(method="performance-model", throughput_per_s=None, unit="", note=exc.message)
        if batch < 1:
            return Speed(method="performance-model", throughput_per_s=None, unit="",
                         note=f"no room for the KV cache of one {input_seq_len(req, spec, shape):,}-token sequence")
    else:
        batch = spec.batch or 1
        # memory grows with batch (largest_batch's premise), so the workload's batch stands
        # where it fits: one memory estimate, where finding the largest batch takes about 20
        if batch > MAX_BATCH or not fits_memory(shape, sized.model_copy(update={"batch": batch}), cand.capacity_bytes):
            most = largest_batch(shape, sized, cand.capacity_bytes)
            if most is None:
                return Speed(method="performance-model", throughput_per_s=None, unit="",
                             note=f"{shape.name} does not fit at batch 1")
            batch = min(batch, most)
    perf_cfg = sized.model_copy(update={"batch": batch, "gpus": req.gpus_per_node})
    from gpusizer.performance.estimate import estimate_performance

    try:
        topology = None
        if req.system is not None:
            from gpusizer.performance.topology import node_topology

            data = req.perf_data
            topology = node_topology(gpu, req.gpus_per_node, req.nodes, system=req.system,
                                     interconnect=req.interconnect, links=data.get("interconnects"),
                                     systems=data.get("systems"), catalog=data.get("catalog"))
        est = estimate_performance(gpu, shape, perf_cfg, nodes=req.nodes, interconnect=req.interconnect, tf32=tf32,
                                   compute_precision=precision, topology=topology, **req.perf_data)
    except UsageError as exc:
        return Speed(method="performance-model", throughput_per_s=None, unit="", note=exc.message)
    return Speed(
        method="performance-model", throughput_per_s=est.throughput_per_s, unit=est.throughput_unit,
        per_gpu_throughput_per_s=est.per_gpu_throughput_per_s, batch=batch, bound=est.bound,
        per_step=round(est.throughput_per_s * est.step_time_s),
        scaling_efficiency=est.scaling_efficiency, error_band=est.error_band,
        transport=est.transport, tokens_per_sample=est.tokens_per_sample,
        upper_bound=est.upper_bound, upper_bound_reason=est.upper_bound_reason,
        note="; ".join(est.notes) or None,
    )
