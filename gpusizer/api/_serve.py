"""serve: concurrent sequences a deployment holds, and the fewest GPUs for N users."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from gpusizer.api._common import (
    _FROZEN,
    Result,
    _given_weights,
    _run,
    check_latency_target,
    checkpoint_defaults,
    load_catalog,
    resolve_model,
)
from gpusizer.domain.parallelism import tensor_parallel
from gpusizer.domain.precision import default_precision, storage_precision
from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape, beyond_context_note
from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Catalog, Gpu
from gpusizer.hardware.vendors import DEFAULT_VENDOR, VENDOR_NAMES, check_vendor, vendor_notes, vendor_wanted
from gpusizer.memory.serving import (
    BLOCK_TOKENS,
    DEFAULT_UTILIZATION,
    MAX_BATCHED_TOKENS,
    MAX_TP,
    ServingCapacity,
    fewest_gpus_to_serve,
    group_capacities,
    serving_capacity,
    serving_context,
    tp_sizes,
)


class ServeRow(BaseModel):
    """One GPU type: the tensor-parallel group that serves the users, and what it holds."""

    model_config = _FROZEN

    gpu_id: str
    gpu_name: str
    memory_bytes: int
    #: GPUs in the group (the tensor-parallel size); None: no size the model allows suffices
    gpus: int | None
    #: sequences of the context held at once by that group (the largest group tried, if none suffices)
    max_concurrency: int
    capacity: ServingCapacity | None
    #: every tensor-parallel size tried, smallest first
    tried: tuple[ServingCapacity, ...]
    #: with a latency target: groups of ``gpus`` GPUs that share the users, the sequences each
    #: decodes at once, and the inter-token latency each user then sees
    replicas: int = 1
    concurrency: int | None = None
    itl_s: float | None = None
    #: the ITL is a lower bound: matrix-vector decode timed without the per-SM cap (estimate's upper_bound)
    itl_lower_bound: bool = False

    @property
    def gpus_total(self) -> int | None:
        return None if self.gpus is None else self.gpus * self.replicas

class ServeResults(BaseModel):
    model_config = _FROZEN

    model: str
    context_tokens: int
    users: int | None
    #: the inter-token latency target, if any
    max_itl_s: float | None = None
    rows: tuple[ServeRow, ...]
    #: ids of the GPUs that serve the users (or hold one sequence when no users are given)
    serves_on: tuple[str, ...]

class ServeResult(Result):
    command: Literal["serve"] = "serve"
    results: ServeResults

    @property
    def fits(self) -> bool:
        return bool(self.results.serves_on)

def _window_note(shape: ModelShape, context: int) -> str | None:
    """How sliding-window layers are counted, when the window is shorter than the context."""
    m = shape.transformer
    if m is None or not m.sliding_layers or m.sliding_window is None \
            or m.sliding_window - 1 + MAX_BATCHED_TOKENS >= context:
        return None  # (a window and a prefill chunk that reach the context hold all of it)
    layers = m.layers + m.decoder_layers
    return (f"{m.sliding_layers} of {layers} layers attend within a {m.sliding_window:,}-token window: each "
            f"sequence holds their KV cache for the window plus one prefill chunk (up to {MAX_BATCHED_TOKENS:,} "
            "tokens: vLLM's max_num_batched_tokens, less on GPUs below 70 GiB and the A100), "
            "not the whole context (vLLM's hybrid KV-cache manager); kv_bytes_per_token counts every layer")


def _check_tp(shape: ModelShape, tp: int | None) -> None:
    """A fixed tensor-parallel size must divide the model's attention heads and KV heads."""
    m = shape.transformer
    if tp is not None and m is not None and not m.allows_tp(tp):
        raise UsageError(f"tensor parallelism over {tp} GPUs does not divide {shape.name}'s {m.heads} "
                         f"attention heads and {m.n_kv_heads} KV heads", field="tp")


def _user_rows(
    shape: ModelShape, cfg: RunConfig, gpus: Sequence[Gpu], context: int, users: int | None, max_itl_ms: float | None,
    tp: int | None, max_tp: int, utilization: float, compute_precision: str,
) -> tuple[list[ServeRow], list[str]]:
    """Each GPU's deployment for ``users`` (:func:`_latency_row`), and the notes on them: the GPUs
    whose speed is unknown (left out of the search) and those whose latency is a lower bound."""
    max_itl_s = check_latency_target(max_itl_ms, users)
    rows, unknown = [], []
    for g in gpus:
        try:
            rows.append(_latency_row(shape, cfg, g, context, users or 1, max_itl_s, tp, max_tp, utilization,
                                     compute_precision))
        except UsageError as exc:  # (a GPU the speed model cannot time: its rates are unknown)
            if exc.field is not None:
                raise
            unknown.append(g.id)
            rows.append(ServeRow(gpu_id=g.id, gpu_name=g.name, memory_bytes=g.memory_bytes, gpus=None,
                                 max_concurrency=0, capacity=None, tried=()))
    notes = [f"not sized, their speed being unknown: {', '.join(unknown)} (estimate on each says why)"] if unknown else []
    low = [r.gpu_id for r in rows if r.itl_lower_bound]
    if low:
        notes.append(f"the inter-token latency is a lower bound on {', '.join(low)}: their decode is timed without "
                     "the per-SM cap calibrated on NVIDIA GPUs (estimate on each says why), so they may need more "
                     "GPUs than shown")
    return rows, notes


def _latency_row(
    shape: ModelShape, cfg: RunConfig, g: Gpu, context: int, users: int, max_itl_s: float | None, tp: int | None,
    max_tp: int, utilization: float, compute_precision: str,
) -> ServeRow:
    """One GPU type serving ``users``: the fewest GPUs, as replicas of one tensor-parallel size
    (``tp``, else each the model allows up to ``max_tp``), whose KV caches hold the users and,
    with ``max_itl_s``, decode them within it."""
    from gpusizer.performance.serving import fewest_gpus_within_latency  # (the speed model: only when asked)

    m = shape.transformer
    sizes = (tp,) if tp is not None else tp_sizes(m, max_tp) if m is not None else None
    caps = group_capacities(shape, cfg, g.memory_bytes, context, gpu_name=g.name, sizes=sizes, utilization=utilization)
    dep = fewest_gpus_within_latency(g, shape, cfg, {t: c.max_running for t, c in caps.items()},
                                     context=context, users=users, max_itl_s=max_itl_s,
                                     compute_precision=compute_precision)
    cap = caps[dep.tp] if dep is not None else None
    best = cap or max(caps.values(), key=lambda c: c.max_concurrency)
    return ServeRow(gpu_id=g.id, gpu_name=g.name, memory_bytes=g.memory_bytes, gpus=dep.tp if dep else None,
                    max_concurrency=best.max_concurrency, capacity=cap, tried=tuple(caps.values()),
                    replicas=dep.replicas if dep else 1, concurrency=dep.concurrency if dep else None,
                    itl_s=dep.speed.itl_s if dep else None, itl_lower_bound=dep.speed.upper_bound if dep else False)


def _serving_run(shape: ModelShape, settings: dict[str, Any]) -> tuple[RunConfig, str, str | None]:
    """The run served, the precision its decode is timed in and the checkpoint's note. As estimate:
    the precision named (fp8 computes in FP8 and stores one-byte weights, as int8), else the
    checkpoint's, else fp16 (a weight-only format computes in 16 bits)."""
    ckpt, note = checkpoint_defaults(shape, "inference", given=_given_weights(settings))
    given = settings.get("precision")
    stored = {"precision": storage_precision(given, "inference")} if given else {}
    cfg = _run(None, {**settings, **ckpt, **stored, "mode": "inference"})
    return cfg, given or ckpt.get("precision") or default_precision("inference"), note


def serve(
    model: str | ModelShape | None = None, *, context: int | None = None, users: int | None = None,
    gpu: str | Sequence[str] | None = None, tp: int | None = None, params: str | int | None = None,
    hf_config: str | Path | None = None, gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    max_tp: int = MAX_TP, vendor: str = DEFAULT_VENDOR, catalog: Catalog | None = None,
    cache_dir: Path | None = None, max_itl_ms: float | None = None, **settings: Any,
) -> ServeResult:
    """How many sequences of ``context`` tokens a deployment holds at once, and the
    fewest GPUs (replicas of one tensor-parallel group) that serve ``users`` of them.

    The KV cache gets what is left of ``gpu_memory_utilization`` of each GPU once the
    weights, a prefill chunk's activations and the engine's reserves are placed (vLLM's
    accounting, 16-token blocks). ``tp`` fixes the group size instead of searching up
    to ``max_tp`` GPUs (one node: tensor parallelism needs NVLink-class links).
    ``users``: the fewest GPUs, as replicas of one tensor-parallel size sharing the users, whose
    KV caches hold them and, with ``max_itl_ms``, whose decode step for their share takes at most
    that many milliseconds (performance.serving.fewest_gpus_within_latency; the speed is
    ``estimate``'s, and each row gives the inter-token latency either way).
    Without ``gpu``, the catalog's GPUs of ``vendor`` are checked (nvidia, amd, intel or
    any; NVIDIA only by default, as ``recommend``); GPUs named in ``gpu`` are always checked.
    ``settings`` are RunConfig fields (``precision``, ``kv_cache``, ...).

    >>> r = serve("llama-3-70b", gpu="H100 SXM", context=4096, users=32)
    >>> row = r.results.rows[0]
    >>> row.gpus, row.max_concurrency >= 32
    (4, True)
    """
    shape = resolve_model(model, params=params, hf_config=hf_config, cache_dir=cache_dir)
    context = serving_context(shape, context)
    cfg, compute, ckpt_note = _serving_run(shape, settings)
    vendor = check_vendor(vendor)
    cat = catalog or load_catalog(cache_dir=cache_dir)
    names = [gpu] if isinstance(gpu, str) else list(gpu or ())
    resolved = (cat.resolve_many(names) if names
                else [cat.resolve(g.id) for g in cat.gpus if vendor_wanted(vendor, g)])
    # one row per GPU type, however many of its names are given ("h100" and "h100-sxm5-80gb")
    resolved = list({r.gpu.id: r for r in reversed(resolved)}.values())[::-1]
    notes = [*(r.note for r in resolved if r.note), *vendor_notes([r.gpu for r in resolved], speeds=False, verb="checked")]
    beyond = beyond_context_note(shape, context, "context")
    notes += [n for n in (ckpt_note, beyond, _window_note(shape, context)) if n]
    _check_tp(shape, tp)
    rows: list[ServeRow] = []
    if users is not None or max_itl_ms is not None:
        rows, more = _user_rows(shape, cfg, [r.gpu for r in resolved], context, users, max_itl_ms, tp, max_tp,
                                gpu_memory_utilization, compute)
        notes += more
    for res in resolved if users is None and max_itl_ms is None else ():
        g = res.gpu
        if tp is not None:
            run = cfg.model_copy(update=tensor_parallel(tp))
            cap = serving_capacity(shape, run, g.memory_bytes, context, utilization=gpu_memory_utilization,
                                   gpu_name=g.name)
            ok = cap.max_concurrency >= (users or 1)
            rows.append(ServeRow(gpu_id=g.id, gpu_name=g.name, memory_bytes=g.memory_bytes, gpus=tp if ok else None,
                                 max_concurrency=cap.max_concurrency, capacity=cap, tried=(cap,)))
            continue
        plan = fewest_gpus_to_serve(shape, cfg, g.memory_bytes, context, users or 1,
                                    utilization=gpu_memory_utilization, max_gpus=max_tp, gpu_name=g.name)
        best = plan.capacity or (plan.tried[-1] if plan.tried else None)
        rows.append(ServeRow(gpu_id=g.id, gpu_name=g.name, memory_bytes=g.memory_bytes, gpus=plan.gpus,
                             max_concurrency=best.max_concurrency if best else 0, capacity=plan.capacity,
                             tried=plan.tried))
    inputs = {"model": shape.name, "params": shape.params, "context_tokens": context, "users": users,
              "max_itl_ms": max_itl_ms, "tp": tp,
              "max_tp": max_tp, "vendor": None if names else vendor,
              "gpu_memory_utilization": gpu_memory_utilization, "block_tokens": BLOCK_TOKENS,
              **cfg.model_dump(mode="json", include={"kv_cache", "flash_attention", "weight_format"}),
              "precision": compute, "memory_precision": cfg.precision,
              "gpus_checked": [r.gpu.id for r in resolved]}
    results = ServeResults(model=shape.name, context_tokens=context, users=users, rows=tuple(rows),
                           max_itl_s=max_itl_ms / 1e3 if max_itl_ms is not None else None,
                           serves_on=tuple(r.gpu_id for r in rows if r.gpus is not None))
    if not names and vendor != "any" and not results.serves_on:
        notes.append(f"only {VENDOR_NAMES.get(vendor, vendor)} GPUs were checked; the vendor 'any' checks every "
                     "vendor's")
    return ServeResult(input=inputs, results=results, notes=tuple(notes))
