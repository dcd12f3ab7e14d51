"""fit-model: will a model fit, the largest batch, and how many GPUs a sharded run needs.

Pure: takes catalog entries (or probed capacities), a model shape and a run
configuration, and returns a frozen report. All memory arithmetic is in
``gpusizer.memory``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpusizer.domain.parallelism import layout_words, sharding_advice, shards_weights, strategy_label
from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape
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

    model_config = ConfigDict(frozen=True)

    gpu: Gpu | None
    label: str
    memory_bytes: int
    source: CapacitySource = "catalog"


class GpuFit(BaseModel):
    model_config = ConfigDict(frozen=True)

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


class FitReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    model_name: str
    params: int
    method: Literal["physics", "rule-of-thumb", "exact"]
    config: RunConfig
    breakdown: MemoryBreakdown
    gpus: tuple[GpuFit, ...]
    verdict: str
    notes: tuple[str, ...] = ()

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


def fit_model(shape: ModelShape, cfg: RunConfig, capacities: Sequence[Capacity]) -> FitReport:
    """Fit one model and run configuration against each GPU."""
    breakdown = estimate_memory(shape, cfg)
    results = tuple(fit_one(shape, cfg, cap, breakdown) for cap in capacities)
    return FitReport(
        model_name=shape.name,
        params=shape.params,
        method="physics",
        config=cfg,
        breakdown=breakdown,
        gpus=results,
        verdict=verdict(results, cfg, breakdown),
        notes=breakdown.notes,
    )


def fit_rule_of_thumb(shape: ModelShape, cfg: RunConfig, capacities: Sequence[Capacity]) -> FitReport:
    """The source documents' rule: (MB - 400) / 2 x 1024^2 / 4 params fit (momentum SGD, fp32)."""
    breakdown = estimate_memory(shape, cfg)
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
                min_gpus=math.ceil(shape.params / usable) if usable else None,
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


def verdict(results: Sequence[GpuFit], cfg: RunConfig, breakdown: MemoryBreakdown) -> str:
    need = format_bytes(breakdown.total_bytes)
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
