"""Planning around an estimate: the default batch, scaling curves, time and cost to train."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpusizer.domain.parallelism import layout_words, sharding_advice, shards_weights
from gpusizer.domain.precision import storage_precision
from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape
from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Gpu
from gpusizer.memory.estimate import default_seq_len
from gpusizer.performance.estimate import Bound, PerfEstimate, estimate_performance
from gpusizer.performance.peak import default_compute_precision
from gpusizer.performance.work import workload_class

# --------------------------------------------------------------------------
# the default batch


class BatchChoice(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    batch: int
    #: the largest per-GPU batch that fits (memory.largest_batch); null if none fits
    largest_fitting: int | None
    cap: int
    reason: str


def batch_cap(shape: ModelShape, cfg: RunConfig, phase: str | None = None) -> int:
    """A sensible ceiling for the default batch: beyond it throughput barely grows
    while memory and latency do. CNNs: 256 images (the per-GPU batch of the
    DeepLearningExamples ResNet-50 recipe); transformers in training: 16,384 tokens
    per GPU; decode: 32 concurrent sequences; other inference: 64 sequences."""
    wl = workload_class(shape, cfg, phase)
    if wl in ("cnn-train", "cnn-infer"):
        return 256
    if wl == "llm-decode":
        return 32
    seq = cfg.seq_len or default_seq_len(shape)
    if wl == "transformer-train":
        return max(1, 16_384 // seq)
    return 64


def default_batch(
    shape: ModelShape, cfg: RunConfig, capacity_bytes: int, *, precision: str | None = None,
    phase: str | None = None, nodes: int = 1,
) -> BatchChoice:
    """The largest per-GPU batch that fits in ``capacity_bytes`` (memory.largest_batch),
    capped by :func:`batch_cap`. Raises NothingFitsError when batch 1 does not fit."""
    from gpusizer.domain.parallelism import sharded_gpus
    from gpusizer.errors import NothingFitsError
    from gpusizer.memory.estimate import MAX_BATCH, largest_batch

    prec = precision or default_compute_precision(cfg)
    mem_cfg = cfg.model_copy(update={
        "precision": storage_precision(prec, cfg.mode),
        "gpus": sharded_gpus(cfg.strategy, cfg.gpus, nodes, **cfg.layout_degrees),
    })
    largest = largest_batch(shape, mem_cfg, capacity_bytes)
    cap = batch_cap(shape, cfg, phase)
    if largest is None:
        raise NothingFitsError(
            f"{shape.name} does not fit at batch 1 ({cfg.mode}, {prec}, "
            f"{layout_words(cfg.strategy, mem_cfg.gpus, cfg.mode, **cfg.layout_degrees)})",
            hint=(f"try {'activation checkpointing, ' if cfg.training and not cfg.checkpointing else ''}"
                  f"{sharding_advice(cfg.mode)}, a lower precision, or a given batch"
                  if not shards_weights(cfg.strategy) else
                  "the weights are sharded already: try activation checkpointing, a shorter sequence or a lower "
                  "precision"),
        )
    if largest > cap:
        more = "memory allows more" if largest >= MAX_BATCH else f"largest that fits is {largest}"
        return BatchChoice(batch=cap, largest_fitting=largest, cap=cap, reason=f"{more}; capped at {cap}")
    return BatchChoice(batch=largest, largest_fitting=largest, cap=cap, reason="largest that fits")


# --------------------------------------------------------------------------
# scaling curves, time to train and cost


class ScalingPoint(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    gpus_per_node: int
    nodes: int
    gpus_total: int
    throughput_per_s: float
    speedup_vs_1gpu: float
    scaling_efficiency: float
    bound: Bound | None


def scaling_counts(gpus_per_node: int, nodes: int) -> tuple[tuple[int, int], ...]:
    """GPU counts for a scaling curve up to the requested cluster: 1, 2, 4, ...
    inside a node, then whole nodes 2, 4, ... up to ``nodes``. For a single GPU
    the curve shows what 2, 4 and 8 GPUs in one node would give."""
    if gpus_per_node == 1 and nodes == 1:
        gpus_per_node = 8
    counts: list[tuple[int, int]] = []
    g = 1
    while g < gpus_per_node:
        counts.append((g, 1))
        g *= 2
    counts.append((gpus_per_node, 1))
    k = 2
    while k < nodes:
        counts.append((gpus_per_node, k))
        k *= 2
    if nodes > 1:
        counts.append((gpus_per_node, nodes))
    return tuple(dict.fromkeys(counts))


def scaling_curve(
    gpu: Gpu, shape: ModelShape, cfg: RunConfig, counts: Sequence[tuple[int, int]], **kwargs: Any,
) -> tuple[ScalingPoint, ...]:
    """Estimates at several (gpus_per_node, nodes) with the same per-GPU batch; a count
    the run's layout does not allow (tensor parallelism that does not divide the heads,
    weight offload without sharding) is left out."""
    points = []
    for gpn, nodes in counts:
        try:
            est = estimate_performance(gpu, shape, cfg.model_copy(update={"gpus": gpn}), nodes=nodes, **kwargs)
        except UsageError:
            continue
        points.append(ScalingPoint(
            gpus_per_node=gpn, nodes=nodes, gpus_total=gpn * nodes, throughput_per_s=est.throughput_per_s,
            speedup_vs_1gpu=est.speedup_vs_1gpu, scaling_efficiency=est.scaling_efficiency, bound=est.bound,
        ))
    return tuple(points)


class TrainingTime(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    work_amount: float
    work_unit: str
    seconds: float
    hours: float
    gpu_hours: float
    #: null unless a price per GPU-hour is given (catalog prices are purchase prices)
    cost_usd: float | None
    price_per_gpu_hour_usd: float | None


def training_seconds(
    throughput_per_s: float, unit: str, tokens_per_sample: int | None, *, samples: float | None = None,
    tokens: float | None = None,
) -> tuple[float, float, str]:
    """(seconds, amount, "tokens" or "samples") to train on ``samples`` or ``tokens`` at a throughput in
    ``unit`` (images/s, sequences/s or tokens/s), a sample holding ``tokens_per_sample`` tokens."""
    if (samples is None) == (tokens is None):
        raise UsageError("give either a number of samples (epochs of a dataset size) or a token count", field="tokens")
    if tokens is not None:
        if unit == "tokens/s":
            return tokens / throughput_per_s, tokens, "tokens"
        if tokens_per_sample:
            return tokens / (throughput_per_s * tokens_per_sample), tokens, "tokens"
        raise UsageError("a token count needs a sequence model", hint="give epochs of a dataset size instead",
                         field="tokens")
    assert samples is not None
    if unit == "tokens/s":
        if not tokens_per_sample:
            raise UsageError("this model's speed is in tokens/s", hint="give a token count instead of a dataset size",
                             field="dataset_size")
        return samples * tokens_per_sample / throughput_per_s, samples, "samples"
    return samples / throughput_per_s, samples, "samples"


def time_to_train(
    est: PerfEstimate, *, samples: float | None = None, tokens: float | None = None,
    price_per_gpu_hour: float | None = None,
) -> TrainingTime:
    """Wall time (and cost, given a price per GPU-hour) for ``samples`` or ``tokens``."""
    seconds, amount, unit = training_seconds(est.throughput_per_s, est.throughput_unit, est.tokens_per_sample,
                                             samples=samples, tokens=tokens)
    hours = seconds / 3600
    gpu_hours = hours * est.gpus_total
    cost = gpu_hours * price_per_gpu_hour if price_per_gpu_hour is not None else None
    return TrainingTime(
        work_amount=amount, work_unit=unit, seconds=seconds, hours=hours, gpu_hours=gpu_hours,
        cost_usd=cost, price_per_gpu_hour_usd=price_per_gpu_hour,
    )
