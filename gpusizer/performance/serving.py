"""Serving speed at a concurrency: time to first token, inter-token latency, tokens/s.

A serving engine with continuous batching runs one decode step for every
sequence in flight: the step time is the inter-token latency (ITL) each user
sees, and ``concurrency / ITL`` is the aggregate rate. The time to first token
(TTFT) of a prompt is its prefill pass, when the engine runs it alone; under
load prefill chunks share steps with decode, which this model leaves out and
says so.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape
from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Gpu
from gpusizer.performance.estimate import estimate_performance
from gpusizer.performance.work import GEMV_MAX_BATCH

#: The largest concurrency the latency search tries (vLLM's max_num_seqs is 256 by default;
#: engines are run with up to a few thousand)
MAX_SEARCH_CONCURRENCY = 4096


class ServingSpeed(BaseModel):
    """Latency and throughput of ``concurrency`` sequences decoding at once."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    concurrency: int
    context_tokens: int
    prompt_tokens: int
    #: prefill of one prompt run alone
    ttft_s: float
    #: one decode step for every sequence in flight
    itl_s: float
    per_user_tokens_s: float
    aggregate_tokens_s: float
    #: the latency target the concurrency was chosen for, if any
    max_itl_s: float | None = None
    #: with a latency target: what stopped the search, the target ("latency") or the sequences the
    #: GPU's memory holds ("memory", the ITL is then below the target)
    limited_by: Literal["latency", "memory"] | None = None
    #: with a latency target: sequences of the context memory holds (serve's paged KV cache)
    memory_concurrency: int | None = None


def serving_speed(
    gpu: Gpu, shape: ModelShape, cfg: RunConfig, *, context: int, prompt: int, concurrency: int,
    **kwargs: Any,
) -> ServingSpeed:
    """ITL and tokens/s at ``concurrency`` sequences (per model replica) of ``context``
    cached tokens, and the TTFT of a ``prompt``-token prefill. The aggregate rate counts
    every replica. ``kwargs`` go to ``estimate_performance``."""
    if shape.transformer is None or not shape.transformer.has_kv_cache:
        raise UsageError("serving speed is for decoders: the model needs a decoder's shape", field="model")
    decode_cfg = cfg.model_copy(update={"mode": "inference", "batch": concurrency, "seq_len": context})
    decode = estimate_performance(gpu, shape, decode_cfg, phase="decode", **kwargs)
    prefill_cfg = cfg.model_copy(update={"mode": "inference", "batch": 1, "seq_len": prompt})
    prefill = estimate_performance(gpu, shape, prefill_cfg, phase="prefill", **kwargs)
    itl = decode.step_time_s
    return ServingSpeed(
        concurrency=concurrency, context_tokens=context, prompt_tokens=prompt, ttft_s=prefill.step_time_s,
        itl_s=itl, per_user_tokens_s=1.0 / itl, aggregate_tokens_s=decode.throughput_per_s,
    )


def concurrency_for_latency(
    gpu: Gpu, shape: ModelShape, cfg: RunConfig, *, context: int, prompt: int, max_itl_s: float, limit: int,
    **kwargs: Any,
) -> ServingSpeed | None:
    """The largest concurrency, up to ``limit`` (what memory holds), whose ITL meets
    ``max_itl_s``; None when even one sequence is slower. ITL grows with concurrency
    (more KV cache to read, more FLOPs), so a bisection finds it."""
    def speed(n: int) -> ServingSpeed:
        return serving_speed(gpu, shape, cfg, context=context, prompt=prompt, concurrency=n, **kwargs)

    limit = max(1, min(limit, MAX_SEARCH_CONCURRENCY))
    # below GEMV_MAX_BATCH decode runs matrix-vector kernels and ITL need not grow with
    # concurrency (the switch to Tensor Cores can make it fall): scan that range
    small = [n for n in range(1, min(limit, GEMV_MAX_BATCH + 1) + 1) if speed(n).itl_s <= max_itl_s]
    if not small:
        return None
    if limit <= GEMV_MAX_BATCH + 1 or small[-1] < GEMV_MAX_BATCH + 1:
        return speed(small[-1]).model_copy(update={"max_itl_s": max_itl_s})
    lo, hi = GEMV_MAX_BATCH + 1, limit
    if speed(hi).itl_s <= max_itl_s:
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if speed(mid).itl_s <= max_itl_s:
            lo = mid
        else:
            hi = mid
    return speed(lo).model_copy(update={"max_itl_s": max_itl_s})


__all__ = ["ServingSpeed", "concurrency_for_latency", "serving_speed"]
