"""Serving speed at a concurrency: time to first token, inter-token latency, tokens/s.

A serving engine with continuous batching runs one decode step for every
sequence in flight: the step time is the inter-token latency (ITL) each user
sees, and ``concurrency / ITL`` is the aggregate rate. The time to first token
(TTFT) of a prompt is its prefill pass, when the engine runs it alone; under
load prefill chunks share steps with decode, which this model leaves out and
says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpusizer.domain.parallelism import tensor_parallel
from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape
from gpusizer.hardware.catalog import Gpu
from gpusizer.memory.serving import served_decoder
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
    #: the latency target the concurrency was chosen for, if any (above ``itl_s`` where even one
    #: sequence misses it: the figures are then at concurrency 1)
    max_itl_s: float | None = None
    #: with a latency target: what stopped the search, the target ("latency"), the sequences the
    #: GPU's memory holds ("memory") or the engine runs at once ("engine", vLLM's max_num_seqs);
    #: but for "latency" the ITL is below the target
    limited_by: Literal["latency", "memory", "engine"] | None = None
    #: with a latency target: sequences of the context memory holds (serve's paged KV cache)
    memory_concurrency: int | None = None
    #: the decode step is a lower bound, so the rates are upper bounds (PerfEstimate.upper_bound)
    upper_bound: bool = False


def serving_speed(
    gpu: Gpu, shape: ModelShape, cfg: RunConfig, *, context: int, prompt: int, concurrency: int,
    **kwargs: Any,
) -> ServingSpeed:
    """ITL and tokens/s at ``concurrency`` sequences (per model replica) of ``context``
    cached tokens, and the TTFT of a ``prompt``-token prefill. The aggregate rate counts
    every replica. ``kwargs`` go to ``estimate_performance``."""
    served_decoder(shape)
    decode_cfg = cfg.model_copy(update={"mode": "inference", "batch": concurrency, "seq_len": context})
    decode = estimate_performance(gpu, shape, decode_cfg, phase="decode", **kwargs)
    prefill_cfg = cfg.model_copy(update={"mode": "inference", "batch": 1, "seq_len": prompt})
    prefill = estimate_performance(gpu, shape, prefill_cfg, phase="prefill", **kwargs)
    itl = decode.step_time_s
    return ServingSpeed(
        concurrency=concurrency, context_tokens=context, prompt_tokens=prompt, ttft_s=prefill.step_time_s,
        itl_s=itl, per_user_tokens_s=1.0 / itl, aggregate_tokens_s=decode.throughput_per_s,
        upper_bound=decode.upper_bound,
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


class LatencyDeployment(BaseModel):
    """The fewest GPUs that serve a number of users within a latency target: ``replicas``
    tensor-parallel groups of ``tp`` GPUs, each decoding ``concurrency`` of the users, and
    ``spare_gpus`` bought with them (whole units) that serve none."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    tp: int
    replicas: int
    #: sequences each replica decodes at once at most (the users shared out; the last may run fewer)
    concurrency: int
    users: int
    #: one replica at that concurrency (its ITL is what each user sees)
    speed: ServingSpeed
    spare_gpus: int = 0

    @property
    def gpus_total(self) -> int:
        return self.tp * self.replicas + self.spare_gpus

    @property
    def aggregate_tokens_s(self) -> float:
        """Every user's tokens each step: the users over the inter-token latency."""
        return self.users / self.speed.itl_s


def fewest_gpus_within_latency(
    gpu: Gpu, shape: ModelShape, cfg: RunConfig, held: Mapping[int, int], *, context: int, users: int,
    max_itl_s: float | None, unit: int = 1, **kwargs: Any,
) -> LatencyDeployment | None:
    """The fewest GPUs, as replicas of one tensor-parallel size, that decode ``users``
    sequences of ``context`` tokens with an inter-token latency of at most ``max_itl_s``
    (None: any latency, memory alone). ``held``: for each tensor-parallel size to try, the
    sequences its KV cache holds (memory.serving.serving_capacity). For each size, the largest
    concurrency that meets the target within what memory holds (:func:`concurrency_for_latency`)
    sets the replicas needed; the size with the fewest GPUs in all wins (the lower latency on a
    tie). None when no size meets the target even with one sequence a replica. ``unit``: GPUs
    come in multiples of it (SXM and OAM modules, on baseboards of eight): a deployment is rounded
    up to whole units, and the users go to the replicas needed or to every replica the units hold,
    whichever decodes faster (the rest are ``spare_gpus``)."""
    best: LatencyDeployment | None = None
    for tp, most in sorted(held.items()):
        if best is not None and best.gpus_total < tp:
            break  # (no larger group can use as few GPUs)
        if most < 1:
            continue
        run = cfg.model_copy(update=tensor_parallel(tp))
        found: ServingSpeed | None
        if max_itl_s is None:
            found = serving_speed(gpu, shape, run, context=context, prompt=context, concurrency=min(most, users),
                                  **kwargs)
        else:
            found = concurrency_for_latency(gpu, shape, run, context=context, prompt=context, max_itl_s=max_itl_s,
                                            limit=min(most, users), **kwargs)
        if found is None:
            continue
        needed = -(-users // found.concurrency)
        bought = -(-tp * needed // unit) * unit  # (whole units)
        # the users shared out evenly over the replicas needed, or over every replica the units
        # hold; whichever decodes faster and meets the target (below the matrix-vector switch a
        # smaller batch need not be faster), else ``found``'s concurrency on the replicas needed
        options = []
        for replicas in dict.fromkeys((needed, bought // tp)):
            share = serving_speed(gpu, shape, run, context=context, prompt=context,
                                  concurrency=-(-users // replicas), **kwargs).model_copy(update={"max_itl_s": max_itl_s})
            if max_itl_s is None or share.itl_s <= max_itl_s:
                options.append((share.itl_s, replicas, share))
        itl, replicas, speed = min(options, key=lambda o: (o[0], o[1])) if options else (found.itl_s, needed, found)
        if best is None or (bought, itl) < (best.gpus_total, best.speed.itl_s):
            best = LatencyDeployment(tp=tp, replicas=replicas, concurrency=speed.concurrency, users=users, speed=speed,
                                     spare_gpus=bought - tp * replicas)
    return best


def fastest_decode(
    gpu: Gpu, shape: ModelShape, cfg: RunConfig, held: Mapping[int, int], *, context: int, **kwargs: Any,
) -> tuple[int, ServingSpeed] | None:
    """The lowest inter-token latency any tensor-parallel size in ``held`` reaches: one sequence of
    ``context`` tokens on a group whose KV cache holds one, as (size, speed); None when none holds
    one. What :func:`fewest_gpus_within_latency` needed to serve anyone, where it found nothing."""
    speeds = [(tp, serving_speed(gpu, shape, cfg.model_copy(update=tensor_parallel(tp)), context=context,
                                 prompt=context, concurrency=1, **kwargs)) for tp, most in sorted(held.items()) if most >= 1]
    return min(speeds, key=lambda s: (s[1].itl_s, s[0]), default=None)


__all__ = ["LatencyDeployment", "ServingSpeed", "concurrency_for_latency", "fastest_decode",
           "fewest_gpus_within_latency", "serving_speed"]
