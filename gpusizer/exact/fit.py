"""From traced steps to fit-model's answer: the breakdown, which GPUs hold it, and the
largest batch. Pure: no torch, no I/O.

The largest batch comes from two traces, at the run's batch ``b`` and at ``2b``.
Within a phase, live tensor bytes are a constant (weights, gradients, optimizer
state) plus a part proportional to the batch (activations, logits, KV cache), so
each phase's peak is a line through the two traced points; the step's peak at
any batch is the highest of those lines ("linear in the batch, per phase").
"""

from __future__ import annotations

from collections.abc import Sequence

from gpusizer.domain.run import RunConfig
from gpusizer.exact.source import ExactTrace
from gpusizer.memory.estimate import DEFAULT_CONTEXT_BYTES, MAX_BATCH, MemoryBreakdown
from gpusizer.memory.fit import Capacity, FitReport, GpuFit, verdict

#: why exact mode gives no GPU count
MIN_GPUS_REASON = "exact mode traces one GPU; the analytic model gives the fewest GPUs of a sharded run"


def exact_breakdown(trace: ExactTrace, cfg: RunConfig) -> MemoryBreakdown:
    """The traced peak in the analytic path's terms. Overheads fake tensors cannot see
    (the CUDA context with cuBLAS's workspace, allocator rounding and fragmentation)
    are the analytic model's, shown apart."""
    peak = trace.peak_bytes_by_kind
    other = peak.get("other", 0)
    if cfg.training:
        # saved activations still live at the peak (none once the optimizer runs)
        acts = 0 if trace.peak_phase == "optimizer" else min(trace.activations_bytes, other)
    else:
        acts = other
    transient = other - acts
    context = DEFAULT_CONTEXT_BYTES if cfg.context_bytes is None else cfg.context_bytes
    fragmentation = int(trace.tensor_peak_bytes * cfg.fragmentation)
    notes = list(trace.notes)
    notes.append(f"exact: {trace.model_class} traced with fake tensors ({trace.ops:,} ops in {trace.seconds:.1f} s); "
                 "the CUDA context and allocator fragmentation are the analytic model's")
    return MemoryBreakdown(
        weights_bytes=trace.weights_bytes, gradients_bytes=trace.gradients_bytes, optimizer_bytes=trace.optimizer_bytes,
        activations_bytes=acts, kv_cache_bytes=trace.kv_cache_bytes, transient_bytes=transient,
        overhead_bytes=context + fragmentation, context_bytes=context, fragmentation_bytes=fragmentation,
        tensor_peak_bytes=trace.tensor_peak_bytes, total_bytes=trace.tensor_peak_bytes + context + fragmentation,
        peak_phase=trace.peak_phase, activations_modelled=True, notes=tuple(notes),
    )


def peak_at_batch(first: ExactTrace, second: ExactTrace, b1: int, b2: int, batch: int) -> int:
    """Tensor peak at ``batch``, each phase's peak a line through its two traced points."""
    best = 0
    for phase, y1 in first.phase_peak_bytes.items():
        y2 = second.phase_peak_bytes.get(phase, y1)
        slope = max(0.0, (y2 - y1) / (b2 - b1))
        best = max(best, int(y1 + slope * (batch - b1)))
    return best


def largest_batch(first: ExactTrace, second: ExactTrace, b1: int, b2: int, cfg: RunConfig, capacity: int) -> int | None:
    """The largest batch whose peak plus overheads fits ``capacity`` (None if batch 1 does not)."""
    context = DEFAULT_CONTEXT_BYTES if cfg.context_bytes is None else cfg.context_bytes

    def fits(b: int) -> bool:
        tensors = peak_at_batch(first, second, b1, b2, b)
        return tensors + int(tensors * cfg.fragmentation) + context <= capacity

    if not fits(1):
        return None
    lo, hi = 1, 2
    while hi <= MAX_BATCH and fits(hi):
        lo, hi = hi, hi * 2
    if hi > MAX_BATCH:
        return MAX_BATCH
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def exact_fit(traces: tuple[ExactTrace, ExactTrace], batches: tuple[int, int], cfg: RunConfig,
              capacities: Sequence[Capacity], model_name: str) -> FitReport:
    """fit-model's report from a trace at the run's batch and one at another batch."""
    first, second = traces
    breakdown = exact_breakdown(first, cfg)
    total = breakdown.total_bytes
    gpus = tuple(
        GpuFit(
            gpu_id=cap.gpu.id if cap.gpu else None, gpu_name=cap.gpu.name if cap.gpu else cap.label,
            memory_bytes=cap.memory_bytes, capacity_source=cap.source, fits=total <= cap.memory_bytes,
            total_bytes=total, headroom_bytes=cap.memory_bytes - total,
            max_batch=(mb := largest_batch(first, second, *batches, cfg, cap.memory_bytes)),
            max_batch_reason=None if mb is not None else "batch 1 does not fit",
            min_gpus=None, min_gpus_reason=MIN_GPUS_REASON,
        )
        for cap in capacities
    )
    notes = (*breakdown.notes, f"largest batch: each phase's peak linear in the batch through traces at batch "
                               f"{batches[0]} and {batches[1]}")
    return FitReport(model_name=model_name, params=first.params, method="exact", config=cfg, breakdown=breakdown,
                     gpus=gpus, verdict=verdict(gpus, cfg, breakdown), notes=notes)
