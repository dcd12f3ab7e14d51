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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpusizer.choices import Mode
from gpusizer.domain.parallelism import sharded_gpus
from gpusizer.domain.precision import (
    RULE_PRECISIONS,
    check_mode,
    precision_spec,
    storage_precision,
)
from gpusizer.domain.run import RunConfig, make_run_config
from gpusizer.domain.shape import ModelShape
from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import ARCH_ORDER, Gpu
from gpusizer.memory.estimate import fewest_gpus, largest_batch
from gpusizer.memory.fit import Capacity, GpuFit, fit_model
from gpusizer.ranking.rules import (
    DERIVED_FIELDS,
    ORDERED_VALUES,
    Criterion,
    RuleSet,
    SpeedSpec,
    Test,
    Workload,
)
from gpusizer.units import format_bytes

SORTS: tuple[str, ...] = ("score", "speed", "value")
SEGMENTS: tuple[str, ...] = ("datacenter", "workstation", "consumer")
DEFAULT_TOP = 10


_FROZEN = ConfigDict(frozen=True)


# --------------------------------------------------------------------------
# inputs


class Candidate(BaseModel):
    """A GPU to rank: a catalog entry, and the memory it offers the run."""

    model_config = _FROZEN

    gpu: Gpu
    label: str
    capacity_bytes: int
    capacity_source: Literal["catalog", "probe-free"] = "catalog"
    #: how many of this GPU the machine has (``--local``); None for the catalog
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

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: str
    #: None: the workload's default from the rules file
    precision: str | None = None
    #: the model to size (--model/--params); None: no memory fit, speed from the
    #: workload's reference model
    shape: ModelShape | None = None
    batch: int | None = None
    seq_len: int | None = None
    image_size: int | None = None
    #: fused attention (memory fit and speed), as fit-model and estimate --flash-attention
    flash_attention: bool = False
    optimizer: str = "adamw"
    strategy: str = "ddp"
    gpus_per_node: int = 1
    nodes: int = 1
    interconnect: str | None = None
    #: total for all GPUs (gpus_per_node x nodes), in US dollars
    budget_usd: float | None = None
    #: total board power of all GPUs, in watts
    max_power_w: float | None = None
    require: tuple[str, ...] = ()
    segments: tuple[str, ...] = ()
    top: int | None = DEFAULT_TOP
    sort: str = "score"

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


class Flag(BaseModel):
    """An advisory that fired, or the reason a GPU was excluded."""

    model_config = _FROZEN

    rule: str
    kind: Literal["advisory", "constraint", "requirement", "fit", "budget", "power", "segment", "precision"]
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
    bound: str | None = None
    scaling_efficiency: float | None = None
    error_band: float | None = None
    #: how gradients cross nodes or GPUs: rdma, tcp, nvlink, pcie or none
    transport: str | None = None
    #: throughput / the best throughput among the listed GPUs
    relative: float | None = None
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
    price_each_usd: float | None = None
    price_total_usd: float | None = None
    power_total_w: float | None = None
    #: cluster throughput per $1000 of GPU launch price; None: price or speed unknown
    value_per_kusd: float | None = None
    value_note: str | None = None
    key_specs: dict[str, float | bool | str | None] = Field(default_factory=dict)

    @property
    def reasons(self) -> tuple[Contribution, ...]:
        """Contributions that earned points, largest first."""
        return tuple(sorted((c for c in self.contributions if c.points > 0), key=lambda c: -c.points))


class ShardedOption(BaseModel):
    """GPUs excluded only because the model does not fit, grouped by the GPUs per node
    (``--gpus``) a sharded run on them needs (memory.fewest_gpus)."""

    model_config = _FROZEN

    strategy: str
    gpus: int
    #: labels, best score first
    gpu_ids: tuple[str, ...]


class Recommendation(BaseModel):
    model_config = _FROZEN

    workload: str
    description: str
    mode: Mode
    precision: str
    precision_from: Literal["--precision", "workload default"]
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
    #: how many GPUs qualified before --top cut the list
    qualified: int
    price_basis: str
    excluded: tuple[GpuResult, ...]
    #: GPUs excluded only by the memory fit, and what a sharded run on them needs
    sharded_options: tuple[ShardedOption, ...] = ()
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
    value = getattr(gpu, name)
    if value is None and precision == "bf16" and ARCH_ORDER.index(gpu.architecture) >= ARCH_ORDER.index("ampere"):
        value = gpu.tensor_fp16_tflops
    return value


def precision_tflops(gpu: Gpu, precision: str) -> float | None:
    """Peak matmul throughput at ``precision``, as the performance model sees it
    (``performance.peak_tflops``: Tensor Cores, else CUDA cores). ``fp32`` is
    strict FP32 here; ``tf32`` is the TF32 path."""
    from gpusizer.performance.peak import peak_tflops

    try:
        return peak_tflops(gpu, precision, tf32=precision != "fp32")[0]
    except UsageError:
        return None  # e.g. no FP64 figure in the catalog


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
    if field == "fp64_ratio":
        return gpu.fp64_tflops / gpu.fp32_tflops if gpu.fp64_tflops is not None else None
    if field == "fp16_speedup":
        rates = [r for r in (gpu.fp16_tflops, gpu.tensor_fp16_tflops) if r is not None]
        return max(rates) / gpu.fp32_tflops if rates else None
    if field == "fp16_ratio":
        return gpu.fp16_tflops / gpu.fp32_tflops if gpu.fp16_tflops is not None else None
    raise KeyError(field)  # pragma: no cover - DERIVED_FIELDS and this function move together


def evaluate(test: Test, gpu: Gpu, precision: str) -> bool | None:
    """True, False, or None when the field is unknown (null)."""
    value = field_value(gpu, test.field, precision)
    if test.value is None:
        return (value is None) == (test.op == "==")
    if value is None:
        return None
    order = ORDERED_VALUES.get(test.field)

    def key(v: Any) -> Any:
        return order.index(v) if order is not None else v

    if test.op == "in":
        return value in test.value
    if test.op == "not in":
        return value not in test.value
    a, b = key(value), key(test.value)
    return {
        "==": a == b, "!=": a != b, ">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b,
    }[test.op]


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
            return "n/a"
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, float) and not format_spec:
            return f"{value:g}"
        try:
            return super().format_field(value, format_spec)
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
    return storage_precision(precision, mode), precision != "fp32"


def _check_request(req: RecommendRequest, rules: RuleSet) -> tuple[Workload, str]:
    wl = rules.workload(req.workload)
    precision = req.precision or wl.precision
    if precision not in RULE_PRECISIONS:
        raise UsageError(f"precision {precision!r} is not one of {', '.join(RULE_PRECISIONS)}")
    if req.budget_usd is not None and not (req.budget_usd > 0 and math.isfinite(req.budget_usd)):
        raise UsageError(f"--budget: {req.budget_usd:g} must be a positive number of US dollars",
                         hint="the budget is the total for all GPUs, e.g. --budget 10000")
    if req.max_power_w is not None and not (req.max_power_w > 0 and math.isfinite(req.max_power_w)):
        raise UsageError(f"--max-power: {req.max_power_w:g} must be a positive number of watts",
                         hint="the limit is the total board power of all GPUs, e.g. --max-power 1600")
    if req.gpus_per_node < 1 or req.nodes < 1:
        raise UsageError("--gpus and --nodes must be at least 1")
    if req.top is not None and req.top < 1:
        raise UsageError("--top must be at least 1")
    if req.batch is not None and req.batch < 1:
        raise UsageError("--batch must be at least 1")
    if req.sort not in SORTS:
        raise UsageError(f"--sort: {req.sort!r} is not one of {', '.join(SORTS)}")
    for seg in req.segments:
        if seg not in SEGMENTS:
            raise UsageError(f"--segment: {seg!r} is not one of {', '.join(SEGMENTS)}")
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
    is normalised against (default: the candidates' GPUs); ``--local`` passes the
    whole catalog so that a single local GPU does not score 100 by default.
    """
    wl, precision = _check_request(req, rules)
    mp, tf32 = model_precision(precision, wl.mode)
    total = req.total_gpus
    env = {"gpus_per_node": req.gpus_per_node, "nodes": req.nodes, "precision": precision, "mode": wl.mode}
    context = {
        "precision": precision, "gpus": req.gpus_per_node, "nodes": req.nodes, "total_gpus": total,
        "workload": wl.name,
    }
    criteria = tuple(c for c in wl.criteria if c.enabled and c.weight > 0 and c.when.holds(**env))
    constraints = tuple(c for c in wl.constraints if c.enabled and c.when.holds(**env))
    advisories = tuple(a for a in wl.advisories if a.enabled and a.when.holds(**env))
    requirements = {name: rules.requirement(name) for name in dict.fromkeys(req.require)}
    notes: list[str] = []

    # --- scores -----------------------------------------------------------
    pool_gpus = list(pool) if pool is not None else [c.gpu for c in candidates]
    best: dict[str, float | None] = {}
    for c in criteria:
        values = [field_value(g, c.field, precision) for g in pool_gpus]
        numbers = [float(v) for v in values if v is not None and not isinstance(v, bool)]
        best[c.id] = max(numbers) if numbers else None

    def contributions(gpu: Gpu) -> tuple[Contribution, ...]:
        values = {c.id: field_value(gpu, c.field, precision) for c in criteria}
        counted = {c.id: not (values[c.id] is None and c.missing == "skip") for c in criteria}
        total_weight = sum(c.weight for c in criteria if counted[c.id])
        out = []
        for c in criteria:
            value = values[c.id]
            norm, scale = normalise(c, value, best[c.id])
            points = 100 * c.weight * norm / total_weight if total_weight and counted[c.id] else 0.0
            out.append(
                Contribution(
                    rule=c.id, field=c.field, value=value, best=best[c.id], scale=scale, normalised=round(norm, 4),
                    weight=c.weight, points=round(points, 2), counted=counted[c.id],
                    message=format_message(c.message, gpu, precision, {**context, "gpu": gpu.name, "gpu_id": gpu.id,
                                                                        "value": value}),
                    source=c.source,
                )
            )
        return tuple(out)

    # --- memory fit --------------------------------------------------------
    fits_by_label: dict[str, GpuFit] = {}
    memory_needed: int | None = None
    mem_cfg = make_run_config(
        mode=wl.mode, precision=mp, optimizer=req.optimizer, batch=req.batch, seq_len=req.seq_len,
        image_size=req.image_size, gpus=sharded_gpus(req.strategy, req.gpus_per_node, req.nodes), strategy=req.strategy,
        flash_attention=req.flash_attention,
    )
    if req.shape is not None:
        caps = [Capacity(gpu=c.gpu, label=c.label, memory_bytes=c.capacity_bytes, source=c.capacity_source)
                for c in candidates]
        report = fit_model(req.shape, mem_cfg, caps)
        memory_needed = report.breakdown.total_bytes
        fits_by_label = {c.label: f for c, f in zip(candidates, report.gpus)}
        notes.extend(report.notes)

    # --- per GPU ------------------------------------------------------------
    results: list[GpuResult] = []
    for cand in candidates:
        gpu = cand.gpu
        ctx = {**context, "gpu": gpu.name, "gpu_id": gpu.id}
        excluded: list[Flag] = []
        if req.segments and gpu.segment not in req.segments:
            excluded.append(Flag(rule="segment", kind="segment",
                                 message=f"segment {gpu.segment} is not in --segment {','.join(req.segments)}"))
        for con in constraints:
            ok = evaluate(con.test, gpu, precision)
            if not ok:
                value = field_value(gpu, con.test.field, precision)
                msg = format_message(con.message, gpu, precision, {**ctx, "value": value})
                msg += (f" ({con.test.field} is unknown for this GPU)" if ok is None
                        else f" ({con.test.field} = {_show(value)})")
                excluded.append(Flag(rule=con.id, kind="constraint", message=msg, source=con.source))
        for name, requirement in requirements.items():
            ok = evaluate(requirement.test, gpu, precision)
            if not ok:
                value = field_value(gpu, requirement.test.field, precision)
                msg = format_message(requirement.message, gpu, precision, {**ctx, "value": value})
                msg += (f" ({requirement.test.field} is unknown for this GPU)" if ok is None
                        else f" ({requirement.test.field} = {_show(value)})")
                excluded.append(Flag(rule=f"require-{name}", kind="requirement", message=msg, source=requirement.source))
        price_each = gpu.launch_price_usd
        price_total = price_each * total if price_each is not None else None
        if req.budget_usd is not None:
            if price_total is None:
                excluded.append(Flag(rule="budget", kind="budget", message=(
                    "launch price unknown, so --budget cannot be checked (add launch_price_usd with --catalog)")))
            elif price_total > req.budget_usd:
                excluded.append(Flag(rule="budget", kind="budget", message=(
                    f"{total} x ${price_each:,.0f} = ${price_total:,.0f} is over --budget ${req.budget_usd:,.0f}")))
        power_total = gpu.tdp_w * total if gpu.tdp_w is not None else None
        if req.max_power_w is not None:
            if power_total is None:
                excluded.append(Flag(rule="max-power", kind="power",
                                     message="board power (tdp_w) unknown, so --max-power cannot be checked"))
            elif power_total > req.max_power_w:
                excluded.append(Flag(rule="max-power", kind="power", message=(
                    f"{total} x {gpu.tdp_w} W = {power_total:,} W is over --max-power {req.max_power_w:,.0f} W")))
        gfit = fits_by_label.get(cand.label)
        if gfit is not None and not gfit.fits:
            excluded.append(Flag(rule="memory-fit", kind="fit", message=_fit_message(gfit, req, mem_cfg)))
        fired = []
        for adv in advisories:
            if adv.warn_if is None:
                continue
            if evaluate(adv.warn_if, gpu, precision):
                value = field_value(gpu, adv.warn_if.field, precision)
                fired.append(Flag(rule=adv.id, kind="advisory", source=adv.source,
                                  message=format_message(adv.message, gpu, precision, {**ctx, "value": value})))
        contribs = contributions(gpu)
        results.append(
            GpuResult(
                gpu_id=gpu.id, name=gpu.name, label=cand.label, segment=gpu.segment, architecture=gpu.architecture,
                score=round(sum(c.points for c in contribs), 1), contributions=contribs, advisories=tuple(fired),
                excluded_by=tuple(excluded), fits=None if gfit is None else gfit.fits, fit=gfit,
                price_each_usd=price_each, price_total_usd=price_total, power_total_w=power_total,
                key_specs={},
            )
        )

    # --- speed and value (qualifying GPUs only) ---------------------------
    speed_shape = req.shape if req.shape is not None else reference
    speed_spec = wl.speed
    basis = _speed_basis(wl, req, precision, speed_shape)
    by_label = {c.label: c for c in candidates}
    qualified: list[GpuResult] = []
    for res in results:
        if res.excluded_by:
            continue
        cand = by_label[res.label]
        speed = _speed(cand, speed_spec, req, precision, tf32, speed_shape, mem_cfg)
        value, value_note = None, None
        if res.price_total_usd is None:
            value_note = "launch price unknown"
        elif speed is None or speed.throughput_per_s is None:
            value_note = "speed unknown"
        else:
            value = speed.throughput_per_s / (res.price_total_usd / 1000)
        qualified.append(res.model_copy(update={"speed": speed, "value_per_kusd": value, "value_note": value_note}))

    # --- rank ---------------------------------------------------------------
    def thr(r: GpuResult) -> float:
        return r.speed.throughput_per_s if r.speed and r.speed.throughput_per_s is not None else -1.0

    if req.sort == "speed":
        qualified.sort(key=lambda r: (thr(r) < 0, -thr(r), -r.score, r.gpu_id))
    elif req.sort == "value":
        qualified.sort(key=lambda r: (r.value_per_kusd is None, -(r.value_per_kusd or 0), -r.score, r.gpu_id))
    else:
        qualified.sort(key=lambda r: (-r.score, -thr(r), r.gpu_id))
    listed = qualified[: req.top] if req.top is not None else qualified
    top_thr = max((thr(r) for r in listed), default=-1.0)
    key_fields = _key_fields(criteria)
    ranked, beyond = [], []
    for i, r in enumerate(qualified, 1):
        speed = r.speed
        shown = i <= len(listed)
        if shown and speed is not None and speed.throughput_per_s is not None and top_thr > 0:
            speed = speed.model_copy(update={"relative": round(speed.throughput_per_s / top_thr, 4)})
        gpu = by_label[r.label].gpu
        (ranked if shown else beyond).append(r.model_copy(update={
            "rank": i, "speed": speed, "key_specs": {f: field_value(gpu, f, precision) for f in key_fields},
        }))
    excluded_results = tuple(
        r.model_copy(update={"key_specs": {f: field_value(by_label[r.label].gpu, f, precision) for f in key_fields}})
        for r in results if r.excluded_by
    )

    # --- header and notes ------------------------------------------------
    applied = [f"{c.id}: {c.test.describe()}" for c in constraints]
    applied += [f"--require {n}: {r.test.describe()}" for n, r in requirements.items()]
    if req.segments:
        applied.append(f"--segment {','.join(req.segments)}")
    if req.budget_usd is not None:
        applied.append(f"--budget ${req.budget_usd:,.0f} for {total} GPU{'s' if total > 1 else ''} (launch prices)")
    if req.max_power_w is not None:
        applied.append(f"--max-power {req.max_power_w:,.0f} W for {total} GPU{'s' if total > 1 else ''}")
    if req.shape is not None and memory_needed is not None:
        applied.append(f"memory fit: {req.shape.name} needs {format_bytes(memory_needed)} per GPU "
                       f"({mem_cfg.mode}, {mem_cfg.precision}, batch {mem_cfg.batch} per GPU, {mem_cfg.strategy})")
    for adv in advisories:
        if adv.warn_if is None:
            notes.append(format_message(adv.message, None, precision, {**context, "value": None}))
    unpriced = sum(1 for r in qualified if r.price_total_usd is None)
    price_basis = "catalog launch prices (MSRP at launch, not today's street or cloud prices); " + (
        f"{unpriced} of {len(qualified)} qualifying GPUs have no price (most data-center cards are sold by quote): "
        "their value is unknown, never free" + ("; --sort value lists them last" if req.sort == "value" else "")
        if unpriced else f"all {len(qualified)} qualifying GPUs have one"
    )
    if req.shape is None:
        notes.append("memory fit not checked: give --model or --params (with --batch) to exclude GPUs it does not fit on")
    if not criteria:
        notes.append(f"workload {wl.name!r} has no criteria that apply, so every score is 0")
    unit = next((r.speed.unit for r in qualified if r.speed is not None and r.speed.unit), "")
    value_unit = f"{unit} per $1k" if unit else ""
    return Recommendation(
        workload=wl.name, description=wl.description, mode=wl.mode, precision=precision,
        precision_from="--precision" if req.precision else "workload default", model_precision=mp, tf32=tf32,
        gpus_per_node=req.gpus_per_node, nodes=req.nodes,
        model_name=req.shape.name if req.shape else None, params=req.shape.params if req.shape else None,
        memory_needed_bytes=memory_needed, speed_basis=basis,
        speed_method="proxy" if _proxy_field(wl.speed, req) else "performance-model", speed_unit=unit, value_unit=value_unit, sort=req.sort,
        criteria=criteria, constraints_applied=tuple(applied), key_fields=key_fields, ranked=tuple(ranked),
        beyond_top=tuple(beyond), qualified=len(qualified), price_basis=price_basis, excluded=excluded_results,
        sharded_options=_sharded_options(results, req, mem_cfg) if req.shape is not None else (),
        notes=tuple(dict.fromkeys(notes)),
    )


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
    alternative = cfg.strategy if cfg.strategy != "ddp" else ("tp" if cfg.mode == "inference" else "fsdp")
    if req.shape is None:
        return alternative, None
    return alternative, fewest_gpus(req.shape, cfg.model_copy(update={"strategy": alternative}), gfit.memory_bytes)


def _fit_message(gfit: GpuFit, req: RecommendRequest, cfg: RunConfig) -> str:
    """Why the model does not fit, and what sharding would take."""
    msg = (f"does not fit: needs {format_bytes(gfit.total_bytes)} per GPU, has {format_bytes(gfit.memory_bytes)}"
           + (" free" if gfit.capacity_source == "probe-free" else ""))
    alternative, need = _sharded_need(gfit, req, cfg)
    if need is not None:
        msg += f"; with --strategy {alternative} it needs {need} GPUs"
    return msg


def _sharded_options(results: Sequence[GpuResult], req: RecommendRequest, cfg: RunConfig) -> tuple[ShardedOption, ...]:
    """Group the GPUs that only the memory fit excluded by the sharded run that holds the model.

    ``gpus`` is per node, as ``--gpus`` means: tensor parallelism shards inside a node,
    ZeRO and FSDP over every GPU of every node (memory.sharded_gpus). A GPU is listed
    only if that run also passes --budget and --max-power at its GPU count.
    """
    groups: dict[tuple[str, int], list[GpuResult]] = {}
    for res in results:
        if not res.excluded_by or res.fit is None or any(f.kind != "fit" for f in res.excluded_by):
            continue
        strategy, need = _sharded_need(res.fit, req, cfg)
        if need is None:
            continue
        per_node = need if strategy == "tp" else -(-need // req.nodes)
        if strategy == cfg.strategy and per_node <= req.gpus_per_node:
            continue  # the run as given already has that many: nothing new to suggest
        total = per_node * req.nodes
        if req.budget_usd is not None and (res.price_each_usd is None or res.price_each_usd * total > req.budget_usd):
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
    batch = (f"batch {req.batch} per GPU" if req.batch is not None
             else f"batch {wl.speed.batch or 1} per GPU (less where it does not fit)")
    who = "your model" if req.shape is not None else f"reference model for {wl.name}; --model to change"
    return (f"{shape.name} {mode} ({who}), {precision}, {batch}, from the performance model "
            "('gpusizer estimate'); relative to the fastest GPU listed")


def proxy_unit(field: str) -> str:
    """The unit a proxy field's name carries (``_tflops`` -> TFLOPS, ``_gb_s`` -> GB/s)."""
    for suffix, unit in (("_tflops_per_w", "TFLOPS/W"), ("_tflops", "TFLOPS"), ("_tops", "TOPS"), ("_gb_s", "GB/s"),
                         ("_gib", "GiB"), ("_w", "W")):
        if field.endswith(suffix):
            return unit
    return field


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
    else:
        most = largest_batch(shape, sized, cand.capacity_bytes)
        if most is None:
            return Speed(method="performance-model", throughput_per_s=None, unit="",
                         note=f"{shape.name} does not fit at batch 1")
        batch = min(spec.batch or 1, most)
    perf_cfg = sized.model_copy(update={"batch": batch, "gpus": req.gpus_per_node})
    from gpusizer.performance.estimate import estimate_performance

    try:
        est = estimate_performance(gpu, shape, perf_cfg, nodes=req.nodes, interconnect=req.interconnect, tf32=tf32,
                                   compute_precision=precision)
    except UsageError as exc:
        return Speed(method="performance-model", throughput_per_s=None, unit="", note=exc.message)
    return Speed(
        method="performance-model", throughput_per_s=est.throughput_per_s, unit=est.throughput_unit,
        per_gpu_throughput_per_s=est.per_gpu_throughput_per_s, batch=batch, bound=est.bound,
        scaling_efficiency=est.scaling_efficiency, error_band=est.error_band,
        transport=est.transport, note="; ".join(est.notes) or None,
    )
