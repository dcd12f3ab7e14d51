"""fit-model: will a model fit, the largest batch, and how many GPUs a sharded run needs.

Pure: takes catalog entries (or probed capacities), a model shape and a run
configuration, and returns a frozen report. All memory arithmetic is in
``gpusizer.memory``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpusizer.choices import ADAM_OPTIMIZERS, EIGHT_BIT_ADAM
from gpusizer.domain.finetune import DEFAULT_RANK, QLORA_QUANTISATION, Adapter
from gpusizer.domain.parallelism import LAYOUT_DEGREES, layout_words, sharding_advice, shards_weights, strategy_label
from gpusizer.domain.precision import (
    ADAPTER_BASE_PRECISION,
    KV_CACHE_BYTES,
    SMALLER_KV_CACHE,
    SMALLER_SERVING_PRECISIONS,
    storage_spec,
)
from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape
from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Gpu
from gpusizer.memory.estimate import (
    MemoryBreakdown,
    estimate_memory,
    fewest_gpus,
    fits,
    largest_batch,
    rule_of_thumb_bytes,
    rule_of_thumb_params,
)
from gpusizer.units import MIB, format_bytes

#: Where a capacity comes from: the catalog's datasheet size, the probe's free memory,
#: or a size given on its own (``fit-model --memory 6GB``).
CapacitySource = Literal["catalog", "probe-free", "given"]


class Capacity(BaseModel):
    """The memory a GPU offers to the run: the datasheet size, what the probe saw
    free, or a size the user gave for a card that is not in the catalog."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    gpu: Gpu | None
    label: str
    memory_bytes: int
    source: CapacitySource = "catalog"


class GpuFit(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    gpu_id: str | None
    gpu_name: str
    memory_bytes: int
    capacity_source: CapacitySource
    fits: bool
    total_bytes: int
    headroom_bytes: int
    #: largest per-GPU batch at the requested GPU count; null if batch 1 does not
    #: fit, or if it is unknown (``max_batch_reason`` says which)
    max_batch: int | None
    #: fewest GPUs under the chosen strategy; null if no count up to 4096 is enough
    min_gpus: int | None
    #: rule-of-thumb method only: parameters that fit by the classic rule
    rule_of_thumb_params: int | None = None
    #: why ``max_batch`` is null; null when it is a number
    max_batch_reason: str | None = None
    #: why ``min_gpus`` is null when that is not "no count is enough"
    min_gpus_reason: str | None = None


class Remedy(BaseModel):
    """A change to the run that makes it fit on a GPU checked, where the run as given fits on
    none: the change in command-line words and what the same memory model says of it."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    #: the options that make the change, e.g. ("--checkpointing", "--loss chunked")
    options: tuple[str, ...]
    #: peak memory per GPU with the change
    total_bytes: int
    #: ids (or names) of the GPUs checked that hold it
    fits_on: tuple[str, ...]
    #: the largest per-GPU batch with the change, on the smallest of those GPUs
    max_batch: int | None


class FitReport(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    model_name: str
    params: int
    method: Literal["physics", "rule-of-thumb", "exact"]
    config: RunConfig
    breakdown: MemoryBreakdown
    gpus: tuple[GpuFit, ...]
    verdict: str
    notes: tuple[str, ...] = ()
    #: when the run fits on no GPU checked: the smallest changes that make it fit (see REMEDIES)
    remedies: tuple[Remedy, ...] = ()

    @property
    def fitting(self) -> tuple[GpuFit, ...]:
        return tuple(g for g in self.gpus if g.fits)


def capacities_from_catalog(gpus: Sequence[Gpu]) -> list[Capacity]:
    return [Capacity(gpu=g, label=g.id, memory_bytes=g.memory_bytes) for g in gpus]


#: why a --params-only run has no largest batch
UNKNOWN_BATCH_REASON = "unknown: without the model's shape its activations, which grow with the batch, are not modelled"


def fit_one(shape: ModelShape, cfg: RunConfig, cap: Capacity, breakdown: MemoryBreakdown) -> GpuFit:
    total = breakdown.total_bytes
    reason: str | None
    if shape.arch is None:
        # memory would not grow with the batch, so any batch would "fit": say unknown
        max_batch = None
        batch1 = fits(shape, cfg.model_copy(update={"batch": 1}), cap.memory_bytes)
        reason = UNKNOWN_BATCH_REASON if batch1 else "batch 1 does not fit"
    else:
        max_batch = largest_batch(shape, cfg, cap.memory_bytes)
        reason = None if max_batch is not None else "batch 1 does not fit"
    return GpuFit(
        gpu_id=cap.gpu.id if cap.gpu else None,
        gpu_name=cap.gpu.name if cap.gpu else cap.label,
        memory_bytes=cap.memory_bytes,
        capacity_source=cap.source,
        fits=fits(shape, cfg, cap.memory_bytes),
        total_bytes=total,
        headroom_bytes=cap.memory_bytes - total,
        max_batch=max_batch,
        max_batch_reason=reason,
        min_gpus=fewest_gpus(shape, cfg, cap.memory_bytes),
    )


def fit_model(shape: ModelShape, cfg: RunConfig, capacities: Sequence[Capacity], *,
              suggest: bool = True) -> FitReport:
    """Fit one model and run configuration against each GPU; when it fits on none (and
    ``suggest``), the changes that would make it fit (:func:`remedies`)."""
    breakdown = estimate_memory(shape, cfg)
    results = tuple(fit_one(shape, cfg, cap, breakdown) for cap in capacities)
    changes = () if not suggest or any(r.fits for r in results) else remedies(shape, cfg, capacities)
    return FitReport(
        remedies=changes,
        model_name=shape.name,
        params=shape.params,
        method="physics",
        config=cfg,
        breakdown=breakdown,
        gpus=results,
        verdict=verdict(results, cfg, breakdown, changes),
        notes=breakdown.notes,
    )


def fit_rule_of_thumb(shape: ModelShape, cfg: RunConfig, capacities: Sequence[Capacity]) -> FitReport:
    """The source documents' rule: (MB - 400) / 2 x 1024^2 / 4 params fit (momentum SGD, fp32).
    It knows one GPU's parameters: a layout (tp, pp, cp, ep) is refused, and more GPUs help
    only a strategy that spreads the weights, whose parameters it divides evenly."""
    for degree in LAYOUT_DEGREES:
        value = getattr(cfg, degree)
        if value not in (None, 1):
            raise UsageError(f"the rule of thumb counts one GPU's parameters and has no {degree} = {value} layout",
                             hint="use the physics method for a parallel layout", field=degree)
    breakdown = estimate_memory(shape, cfg)
    spreads = shards_weights(cfg.strategy)
    results = []
    for cap in capacities:
        usable = rule_of_thumb_params(cap.memory_bytes / MIB)
        results.append(
            GpuFit(
                gpu_id=cap.gpu.id if cap.gpu else None,
                gpu_name=cap.gpu.name if cap.gpu else cap.label,
                memory_bytes=cap.memory_bytes,
                capacity_source=cap.source,
                fits=shape.params <= usable,
                total_bytes=rule_of_thumb_bytes(shape.params),
                headroom_bytes=cap.memory_bytes - rule_of_thumb_bytes(shape.params),
                max_batch=None,
                max_batch_reason="the rule of thumb has no batch",
                min_gpus=math.ceil(shape.params / usable) if usable and (spreads or shape.params <= usable) else None,
                rule_of_thumb_params=usable,
            )
        )
    notes = (
        "rule of thumb (Dettmers): usable params = (MB - 400) / 2 x 1024^2 / 4; "
        "it ignores activations, which for conv nets are often larger than the weights",
    )
    return FitReport(
        model_name=shape.name,
        params=shape.params,
        method="rule-of-thumb",
        config=cfg,
        breakdown=breakdown,
        gpus=tuple(results),
        verdict=verdict(tuple(results), cfg, breakdown),
        notes=notes,
    )


def verdict(results: Sequence[GpuFit], cfg: RunConfig, breakdown: MemoryBreakdown,
            changes: Sequence[Remedy] = ()) -> str:
    """The answer in one line, with the memory the results were judged on (the rule of thumb's
    own figure under that method); where nothing fits, the first of ``changes``
    (:func:`remedies`) that would, else sharding, else what to try."""
    need = format_bytes(results[0].total_bytes if results else breakdown.total_bytes)
    per = f"per GPU on {layout_words(cfg.strategy, cfg.gpus, cfg.mode, **cfg.layout_degrees)}" if cfg.gpus > 1 else ""
    fitting = [r for r in results if r.fits]
    if fitting:
        smallest = min(fitting, key=lambda r: r.memory_bytes)
        where = f"{smallest.gpu_id or smallest.gpu_name} ({format_bytes(smallest.memory_bytes)})"
        if len(results) > 1:
            share = f"{len(fitting)} of the {len(results)}"
            if len(fitting) == len(results):
                share = "both" if len(results) == 2 else f"all {len(results)}"
            where = f"{share} GPUs checked, the smallest being {where}"
        return f"needs {need} {per}".rstrip() + f"; fits on {where}"
    sharded = [r for r in results if r.min_gpus is not None]
    if sharded:
        best = min(sharded, key=lambda r: (r.min_gpus, r.memory_bytes))
        return (
            f"needs {need} {per}".rstrip()
            + f"; fits on no GPU as configured; with {strategy_label(cfg.strategy, cfg.mode)} it needs "
            f"{best.min_gpus} x "
            f"{best.gpu_id or best.gpu_name}"
        )
    if changes:
        first = changes[0]
        return (f"needs {need} {per}".rstrip() + f"; fits on no GPU as configured; with {' '.join(first.options)} "
                f"it needs {format_bytes(first.total_bytes)} and fits on {first.fits_on[0]}")
    ideas = []
    if not shards_weights(cfg.strategy):
        ideas.append(sharding_advice(cfg.mode))
    else:
        ideas.append("more GPUs")
    if cfg.storage.weight_bytes > 2:
        ideas.append("bf16 precision" + (" or int8/int4 quantisation" if cfg.mode == "inference" else ""))
    if cfg.mode == "train" and not cfg.checkpointing:
        ideas.append("activation checkpointing")
    if cfg.batch > 1:
        ideas.append("a smaller batch")
    return f"needs {need} {per}".rstrip() + f"; fits on no GPU as configured (try {', '.join(ideas)})"


_Update = Callable[[ModelShape, RunConfig], dict[str, Any] | None]


def _set(**update: Any) -> _Update:
    """A change that sets RunConfig fields, tried when they differ from the run's."""
    return lambda shape, cfg: None if all(getattr(cfg, k) == v for k, v in update.items()) else update


def _training(change: _Update) -> _Update:
    return lambda shape, cfg: change(shape, cfg) if cfg.mode == "train" else None


def _chunked_loss(shape: ModelShape, cfg: RunConfig) -> dict[str, Any] | None:
    """Chunked cross-entropy matters where there are vocabulary logits to keep."""
    lm = cfg.mode == "train" and cfg.head == "lm" and shape.transformer is not None and cfg.loss == "full"
    return {"loss": "chunked"} if lm else None


def _eight_bit_adam(shape: ModelShape, cfg: RunConfig) -> dict[str, Any] | None:
    """8-bit Adam (bitsandbytes) where full training keeps Adam's two fp32 moments."""
    return {"optimizer": EIGHT_BIT_ADAM} if cfg.mode == "train" and cfg.adapter is None and cfg.optimizer in \
        ADAM_OPTIMIZERS else None


def _qlora(shape: ModelShape, cfg: RunConfig) -> dict[str, Any] | None:
    """A LoRA run's frozen base in 4-bit NF4 (QLoRA), with the same adapters."""
    if cfg.adapter is None or cfg.adapter.base_quantisation is not None:
        return None
    return {"adapter": cfg.adapter.model_copy(update={"base_quantisation": QLORA_QUANTISATION})}


def _lora(shape: ModelShape, cfg: RunConfig) -> dict[str, Any] | None:
    """Full training of a transformer replaced by LoRA rank 16 on a frozen 16-bit base (the
    precision LoRA runs default to: ADAPTER_BASE_PRECISION)."""
    full = cfg.mode == "train" and cfg.adapter is None and shape.transformer is not None
    return {"adapter": Adapter(rank=DEFAULT_RANK), "precision": ADAPTER_BASE_PRECISION} if full else None


def _full_to_qlora(shape: ModelShape, cfg: RunConfig) -> dict[str, Any] | None:
    """Full training of a transformer replaced by QLoRA rank 16 (a 4-bit NF4 base)."""
    update = _lora(shape, cfg)
    return update and {**update, "adapter": Adapter(rank=DEFAULT_RANK, base_quantisation=QLORA_QUANTISATION)}


def _offload_activations(shape: ModelShape, cfg: RunConfig) -> dict[str, Any] | None:
    """A transformer's saved activations kept in host memory (torchtune's activation offloading),
    where nothing is offloaded yet; a run it does not suit is refused by the memory model."""
    ok = cfg.mode == "train" and shape.transformer is not None and cfg.offload == "none"
    return {"offload": "activations"} if ok else None


def _quantised(precision: str) -> _Update:
    """Serving weights in a smaller weight-only precision (SMALLER_SERVING_PRECISIONS)."""
    return lambda shape, cfg: ({"precision": precision} if cfg.mode == "inference" and cfg.weight_format is None
                               and cfg.storage.weight_bytes > storage_spec(precision).weight_bytes else None)


def _smaller_kv_cache(shape: ModelShape, cfg: RunConfig) -> dict[str, Any] | None:
    """A served transformer's KV cache in SMALLER_KV_CACHE where it is kept in more bytes."""
    wider = cfg.kv_cache == "auto" or KV_CACHE_BYTES[cfg.kv_cache] > KV_CACHE_BYTES[SMALLER_KV_CACHE]
    return {"kv_cache": SMALLER_KV_CACHE} if cfg.mode == "inference" and shape.transformer is not None and wider \
        else None


_CHECKPOINTING = _training(_set(checkpointing=True))

#: Changes tried when a run fits on no GPU checked, in order: how the step runs before what is
#: stored, and what is stored before what is trained. Each is (its options, the RunConfig
#: update it makes, or None where it does not apply to the run). A combination is listed only
#: where neither of its parts fits alone.
REMEDIES: tuple[tuple[tuple[str, ...], tuple[_Update, ...]], ...] = (
    (("--checkpointing",), (_CHECKPOINTING,)),
    (("--loss chunked",), (_chunked_loss,)),
    (("--checkpointing", "--loss chunked"), (_CHECKPOINTING, _chunked_loss)),
    ((f"--kv-cache {SMALLER_KV_CACHE}",), (_smaller_kv_cache,)),
    *(((f"--precision {p}",), (_quantised(p),)) for p in SMALLER_SERVING_PRECISIONS),
    ((f"--optimizer {EIGHT_BIT_ADAM}",), (_eight_bit_adam,)),
    (("--checkpointing", f"--optimizer {EIGHT_BIT_ADAM}"), (_CHECKPOINTING, _eight_bit_adam)),
    (("--qlora",), (_qlora,)),
    (("--checkpointing", "--qlora"), (_CHECKPOINTING, _qlora)),
    (("--offload activations",), (_offload_activations,)),
    (("--checkpointing", "--offload activations"), (_CHECKPOINTING, _offload_activations)),
    (("--offload optimizer",), (_training(_set(offload="optimizer")),)),
    (("--checkpointing", "--offload optimizer"), (_CHECKPOINTING,
                                                  _training(_set(offload="optimizer")))),
    ((f"--lora {DEFAULT_RANK} --precision {ADAPTER_BASE_PRECISION}", "--checkpointing"),
     (_lora, _CHECKPOINTING)),
    ((f"--qlora --precision {ADAPTER_BASE_PRECISION}", "--checkpointing"),
     (_full_to_qlora, _CHECKPOINTING)),
)
#: at most this many changes are offered
MAX_REMEDIES = 3


def remedies(shape: ModelShape, cfg: RunConfig, capacities: Sequence[Capacity]) -> tuple[Remedy, ...]:
    """The first :data:`MAX_REMEDIES` changes that make the run fit on a GPU of ``capacities``,
    each measured by the memory model: its peak, the GPUs that hold it, and the largest batch on
    the smallest of them. First a smaller micro-batch (:func:`_rebatched`), then the entries of
    :data:`REMEDIES`, then those entries with a smaller micro-batch too."""
    found: list[Remedy] = []

    def add(options: tuple[str, ...], changed: RunConfig) -> None:
        if len(found) < MAX_REMEDIES and not any(set(r.options) <= set(options) for r in found):
            remedy = _measured(shape, options, changed, capacities)
            if remedy is not None:
                found.append(remedy)

    rebatched = _rebatched(shape, cfg, capacities)
    if rebatched is not None:
        add(rebatched[1], rebatched[0])
    changes = []
    for options, updates in REMEDIES:
        wanted = [update(shape, cfg) for update in updates]
        if any(u is None for u in wanted):
            continue
        try:  # validated, unlike model_copy
            changed = RunConfig.model_validate({**dict(cfg), **{k: v for u in wanted if u for k, v in u.items()}})
        except ValueError:
            continue
        changes.append((options, changed))
        add(options, changed)
    for options, changed in changes:
        rebatched = _rebatched(shape, changed, capacities)
        if rebatched is not None:
            add((*options, *rebatched[1]), rebatched[0])
    return tuple(found)


def _measured(shape: ModelShape, options: tuple[str, ...], changed: RunConfig,
              capacities: Sequence[Capacity]) -> Remedy | None:
    """``changed`` as a remedy, if it fits on a GPU of ``capacities``."""
    try:
        total = estimate_memory(shape, changed).total_bytes
    except UsageError:
        return None  # a change this run cannot take (e.g. offload that needs sharding)
    holding = sorted((c for c in capacities if total <= c.memory_bytes), key=lambda c: c.memory_bytes)
    if not holding:
        return None
    batch = largest_batch(shape, changed, holding[0].memory_bytes) if shape.arch is not None else None
    return Remedy(options=options, total_bytes=total, max_batch=batch,
                  fits_on=tuple(c.gpu.id if c.gpu else c.label for c in holding))


def _rebatched(shape: ModelShape, cfg: RunConfig,
               capacities: Sequence[Capacity]) -> tuple[RunConfig, tuple[str, ...]] | None:
    """``cfg`` at the largest micro-batch that fits on the largest GPU checked, where its batch does
    not, and the options that say so. Training keeps the samples per step: the micro-batch divides
    the batch, and the micro-batches a step (``--grad-accumulation``, the 1F1B micro-batches under
    pipeline stages) grow to match, gradients kept between them."""
    if cfg.batch <= 1 or shape.arch is None or not capacities:
        return None
    biggest = max(c.memory_bytes for c in capacities)
    train = cfg.mode == "train"
    try:
        largest = largest_batch(shape, cfg.model_copy(update={"persistent_grads": True}) if train else cfg, biggest)
    except UsageError:
        return None
    if largest is None or largest >= cfg.batch:
        return None
    if not train:
        return cfg.model_copy(update={"batch": largest}), (f"--batch {largest}",)
    batch = max(d for d in range(1, largest + 1) if cfg.batch % d == 0)
    steps = cfg.micro_batches * (cfg.batch // batch)
    try:  # validated: the micro-batches a step are bounded as the option is
        changed = RunConfig.model_validate({**dict(cfg), "batch": batch, "micro_batches": steps,
                                            "persistent_grads": True})
    except ValueError:
        return None
    return changed, (f"--batch {batch}", f"--grad-accumulation {steps}")


def capacities_from_sizes(sizes: Sequence[tuple[str, int]]) -> list[Capacity]:
    """Cards known only by their memory: (the size as written, bytes) -> a capacity
    labelled "6GB card". The whole size counts, as for a catalog GPU."""
    return [Capacity(gpu=None, label=f"{text.strip()} card", memory_bytes=size, source="given") for text, size in sizes]


def capacities_from_probe(report: object) -> list[Capacity]:
    """Local GPUs with the memory the probe saw free (``probe.ProbeReport``)."""
    caps = []
    for dev in report.devices:  # type: ignore[attr-defined]
        d = dev.device
        if d.lost or d.memory_free_bytes is None:
            continue
        label = f"GPU {d.index}: {d.name}"
        caps.append(
            Capacity(
                gpu=dev.match.gpu if dev.match else None, label=label, memory_bytes=d.memory_free_bytes,
                source="probe-free",
            )
        )
    return caps
