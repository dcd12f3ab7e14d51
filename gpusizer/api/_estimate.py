"""estimate: throughput, scaling, time and cost to train, and serving latency."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from gpusizer.api._common import (
    _FROZEN,
    MAX_EPOCHS,
    MAX_TRAINING_COUNT,
    Result,
    _check_cluster,
    _check_range,
    _run,
    check_latency_target,
    checkpoint_run,
    load_catalog,
    perf_data,
    resolve_model,
    resolve_node,
)
from gpusizer.domain.parallelism import LAYOUT_DEGREES, Parallelism, idle_sharding_note, sharded_gpus, tensor_parallel
from gpusizer.domain.precision import default_precision, storage_precision
from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape, beyond_context_note
from gpusizer.errors import NothingFitsError, UsageError
from gpusizer.hardware.catalog import Catalog, Gpu
from gpusizer.hardware.systems import Systems
from gpusizer.memory.estimate import (
    default_seq_len,
    estimate_memory,
    input_default_note,
    largest_batch,
    resolved_input,
)
from gpusizer.memory.serving import ServingCapacity, serving_capacity
from gpusizer.performance.calibration import Calibration, Interconnects
from gpusizer.performance.estimate import PerfEstimate, estimate_performance
from gpusizer.performance.planning import (
    ScalingPoint,
    TrainingTime,
    default_batch,
    scaling_counts,
    scaling_curve,
    time_to_train,
)
from gpusizer.performance.serving import MAX_SEARCH_CONCURRENCY, ServingSpeed, concurrency_for_latency, serving_speed
from gpusizer.performance.topology import Topology
from gpusizer.units import parse_count


class MemoryCheck(BaseModel):
    model_config = _FROZEN

    per_gpu_bytes: int
    capacity_bytes: int
    fits: bool

class EstimateResults(BaseModel):
    """``estimate`` results. When not even batch 1 fits, ``fits`` is false, ``reason``
    and ``hint`` say why, and the speed fields are null."""

    model_config = _FROZEN

    gpu: str
    gpu_name: str
    fits: bool = True
    reason: str | None = None
    hint: str | None = None
    throughput_per_s: float | None = None
    throughput_unit: str | None = None
    step_time_s: float | None = None
    compute_s: float | None = None
    memory_s: float | None = None
    comm_s: float | None = None
    comm_exposed_s: float | None = None
    overhead_s: float | None = None
    bound: str | None = None
    per_gpu_throughput_per_s: float | None = None
    scaling_efficiency: float | None = None
    speedup_vs_1gpu: float | None = None
    error_band: float | None = None
    gpus_total: int | None = None
    batch_per_gpu: int | None = None
    batch_source: str
    memory: MemoryCheck
    scaling_curve: tuple[ScalingPoint, ...] = ()
    time_to_train: TrainingTime | None = None
    cost_usd: float | None = None
    price_per_gpu_hour_usd: float | None = None
    cluster_cost_per_hour_usd: float | None = None
    estimate: PerfEstimate | None = None
    #: serving a decoder: TTFT, inter-token latency and tokens/s at the concurrency
    serving: ServingSpeed | None = None

class EstimateResult(Result):
    command: Literal["estimate"] = "estimate"
    results: EstimateResults
    #: the GPU estimated (its catalog entry), for renderers
    gpu: Gpu = Field(exclude=True, repr=False)

    @property
    def fits(self) -> bool:
        return self.results.fits and self.results.memory.fits

class _Work(BaseModel):
    """How much training an estimate is asked to time: samples or tokens."""

    model_config = _FROZEN

    samples: float | None = None
    tokens: float | None = None

def _training_amount(epochs: float | None, dataset_size: str | int | None, tokens: str | int | None) -> _Work:
    if (epochs is None) != (dataset_size is None):
        raise UsageError("epochs and a dataset size go together", hint="e.g. 90 epochs of 1.28M samples",
                         field="epochs")
    if tokens is not None and epochs is not None:
        raise UsageError("give a token count, or epochs with a dataset size, not both", field="tokens")
    try:
        size = parse_count(str(dataset_size), what="dataset size") if dataset_size is not None else None
        count = float(parse_count(str(tokens), what="token count")) if tokens is not None else None
    except ValueError as exc:
        raise UsageError(str(exc), field="tokens" if tokens is not None else "dataset_size") from None
    if epochs is not None and epochs <= 0:
        raise UsageError("the number of epochs must be positive", field="epochs")
    _check_range(epochs, "epochs", "the number of epochs", 0, MAX_EPOCHS)
    _check_range(size, "dataset_size", "the dataset size", 1, MAX_TRAINING_COUNT)
    _check_range(count, "tokens", "the token count", 1, MAX_TRAINING_COUNT)
    return _Work(samples=epochs * size if epochs is not None and size is not None else None, tokens=count)

def estimate(
    model: str | ModelShape | None = None, *, gpu: str | None = None, system: str | None = None,
    params: str | int | None = None, hf_config: str | Path | None = None, gpus: int | None = None, nodes: int = 1,
    interconnect: str | None = None,
    nics_per_node: int | None = None, precision: str | None = None, tf32: bool = True, phase: str | None = None,
    cuda_graphs: bool = True, grad_accumulation: int = 1, epochs: float | None = None,
    dataset_size: str | int | None = None, tokens: str | int | None = None, price_per_hour: float | None = None,
    prompt: int | None = None, max_itl_ms: float | None = None, run: RunConfig | None = None,
    catalog: Catalog | None = None, cache_dir: Path | None = None, **settings: Any,
) -> EstimateResult:
    """Throughput, step-time breakdown, scaling, time-to-train and cost of a run.

    Serving a decoder (inference, decode phase), the results also carry the time to first token
    of a ``prompt`` (default: the whole context), the inter-token latency and per-user and
    aggregate tokens/s at the batch (the concurrency); ``max_itl_ms`` picks the largest
    concurrency that meets that latency.

    ``gpus`` is GPUs per node (default 1, or a ``system``'s count). ``system`` names a node type
    (data/systems.yaml): its GPU, fabric, NICs and a cloud instance's on-demand price per GPU-hour.
    ``precision`` is the math precision (tf32, fp8 too); memory counts its storage precision.
    ``settings`` are :class:`RunConfig` fields (``batch``, ``seq_len``, ``mode``, ``strategy``, ...).
    Without ``batch``, the largest that fits, capped. Cost needs a price per GPU-hour (USD).

    >>> r = estimate("resnet50", gpu="V100 SXM2 16GB", gpus=8, batch=256)
    >>> r.results.gpus_total, r.results.throughput_unit
    (8, 'images/s')
    >>> 0.5 < r.results.scaling_efficiency <= 1
    True
    """
    mode = settings.get("mode", run.mode if run is not None else "train")
    _check_phase(phase, mode)
    _check_cluster(gpus or 1, nodes, nics_per_node, grad_accumulation, price_per_hour)
    amount = _training_amount(epochs, dataset_size, tokens)
    shape = resolve_model(model, params=params, hf_config=hf_config, cache_dir=cache_dir)
    cat = catalog or load_catalog(cache_dir=cache_dir)
    node = resolve_node(system, gpu, gpus, catalog=cat, interconnect=interconnect, nics_per_node=nics_per_node,
                        nodes=nodes, price_per_hour=price_per_hour, cache_dir=cache_dir)
    gpus, price_per_hour, g = node.gpus, node.price_per_gpu_hour, (res := cat.resolve(node.gpu)).gpu
    precision, settings, ckpt_note = checkpoint_run(shape, mode, settings, run=run, precision=precision)
    adapted = settings.get("adapter", run.adapter if run is not None else None) is not None
    prec = precision or default_precision(mode, adapters=adapted)
    mem_prec = storage_precision(prec, mode)
    given_batch = settings.get("batch", run.batch if run is not None and "batch" in run.model_fields_set else None)
    cfg = _layout(_run(run, {**settings, "mode": mode, "precision": mem_prec, "batch": given_batch or 1,
                             "persistent_grads": grad_accumulation > 1, "gpus": gpus}), nodes, grad_accumulation)
    notes = [n for n in (res.note, *node.notes, ckpt_note, *_input_notes(shape, cfg, gpus, nodes)) if n]
    inputs = {
        "model": shape.name, "params": shape.params, "gpu": gpu or node.gpu, "system": system, "resolved_id": g.id,
        "gpus": gpus, "nodes": nodes, "interconnect": interconnect, "nics_per_node": nics_per_node, "precision": prec,
        "memory_precision": mem_prec, "tf32": tf32, **_run_echo(cfg), **resolved_input(shape, cfg), "phase": phase,
        "grad_accumulation": grad_accumulation, "cuda_graphs": cuda_graphs, "epochs": epochs,
        "dataset_size": dataset_size, "tokens": tokens, "price_per_hour": price_per_hour,
        "catalog_files": list(cat.files),
    }
    mem_cfg = cfg.model_copy(update={"gpus": sharded_gpus(cfg.strategy, gpus, nodes, **cfg.layout_degrees)})
    if given_batch is None:
        try:
            choice = default_batch(shape, cfg, g.memory_bytes, precision=prec, phase=phase, nodes=nodes)
        except NothingFitsError as exc:
            return _nothing_fits(exc, shape, mem_cfg, g, inputs, notes)
        cfg = cfg.model_copy(update={"batch": choice.batch})
        mem_cfg = mem_cfg.model_copy(update={"batch": choice.batch})
        batch_note = choice.reason
        inputs["batch"] = choice.batch
    else:
        batch_note = "given"
    perf = _PerfArgs(nodes=nodes, interconnect=interconnect, nics_per_node=nics_per_node, tf32=tf32,
                     compute_precision=prec, phase=phase, grad_accumulation=grad_accumulation, cuda_graphs=cuda_graphs,
                     topology=node.topology, **perf_data(cat, cache_dir))
    serving = None
    if _serves(shape, cfg, phase):
        inputs.update(prompt=prompt or cfg.seq_len or default_seq_len(shape), max_itl_ms=max_itl_ms)
        serving, cfg, batch_note = _serving(shape, cfg, mem_cfg, g, perf, inputs["prompt"], max_itl_ms,
                                            batch_note if given_batch is None else None, notes)
        mem_cfg = mem_cfg.model_copy(update={"batch": cfg.batch})
        inputs["batch"] = cfg.batch
    elif max_itl_ms is not None or prompt is not None:
        raise UsageError("a prompt length and a latency target are for serving a decoder (inference, decode)",
                         field="max_itl_ms" if max_itl_ms is not None else "prompt")
    return _estimate_run(shape, cfg, mem_cfg, g, inputs, notes, batch_note, amount, perf, price_per_hour, serving)

def _input_notes(shape: ModelShape, cfg: RunConfig, gpus: int, nodes: int) -> tuple[str | None, ...]:
    """What the run assumed for its input size, whether the sequence outruns the model's context,
    and whether ZeRO or FSDP has one data-parallel replica to shard."""
    return input_default_note(shape, cfg), beyond_context_note(shape, cfg.seq_len), _idle_note(cfg, gpus, nodes)


def _idle_note(cfg: RunConfig, gpus: int, nodes: int) -> str | None:
    """The note when ZeRO or FSDP has one data-parallel replica to shard (idle_sharding_note)."""
    spread = cfg.model_copy(update={"gpus": sharded_gpus(cfg.strategy, gpus, nodes, **cfg.layout_degrees)})
    return idle_sharding_note(cfg.strategy, spread.parallelism)

def _check_phase(phase: str | None, mode: str) -> None:
    if phase is not None and mode == "train":
        raise UsageError("a phase (decode or prefill) is for inference", hint="run inference", field="phase")

def _nothing_fits(
    exc: NothingFitsError, shape: ModelShape, mem_cfg: RunConfig, g: Gpu, inputs: dict[str, Any], notes: list[str],
) -> EstimateResult:
    """The estimate when not even batch 1 fits: why, and the memory batch 1 needs."""
    one = estimate_memory(shape, mem_cfg)
    memory = MemoryCheck(per_gpu_bytes=one.total_bytes, capacity_bytes=g.memory_bytes, fits=False)
    why = exc.message + (f"; {exc.hint}" if exc.hint else "")
    results = EstimateResults(
        gpu=g.id, gpu_name=g.name, fits=False, reason=exc.message, hint=exc.hint, memory=memory,
        batch_source="nothing fits: batch 1 exceeds the GPU's memory",
    )
    return EstimateResult(input={**inputs, "batch": None}, results=results,
                          notes=tuple(dict.fromkeys([*notes, why])), gpu=g)

def _run_echo(cfg: RunConfig) -> dict[str, Any]:
    """The run settings every estimate echoes in its input."""
    return cfg.model_dump(mode="json", include={
        "batch", "seq_len", "image_size", "mode", "optimizer", "strategy", "flash_attention", "logits", "kv_cache",
        "checkpointing", "adapter", "offload", "offload_to", "weight_format", "loss", *LAYOUT_DEGREES,
        "micro_batches"})


def _layout(cfg: RunConfig, nodes: int, grad_accumulation: int) -> RunConfig:
    """The run's micro-batches (the gradient accumulation), and with model-parallel degrees
    ``--strategy tp`` without ``--tp`` takes the GPUs of a node that pp and cp leave
    (Parallelism.of_cluster); the memory model, which sees the whole cluster, is told that degree."""
    cfg = cfg.model_copy(update={"micro_batches": grad_accumulation})
    if cfg.tp is not None or max(cfg.pp, cfg.cp, cfg.ep) == 1:
        return cfg
    par = Parallelism.of_cluster(cfg.strategy, cfg.gpus, nodes, pp=cfg.pp, cp=cfg.cp, ep=cfg.ep)
    return cfg.model_copy(update={"tp": par.tp})

class _PerfArgs(BaseModel):
    """The performance model's settings beyond the RunConfig."""

    model_config = _FROZEN

    nodes: int
    interconnect: str | None
    nics_per_node: int | None
    tf32: bool
    compute_precision: str
    phase: str | None
    grad_accumulation: int
    cuda_graphs: bool
    #: a named system's topology; None: the GPU's defaults at each count
    topology: Topology | None = None
    #: the data files, loaded through the caller's cache (the engine would parse them afresh)
    calibration: Calibration | None = None
    interconnects: Interconnects | None = None
    systems: Systems | None = None
    catalog: Catalog | None = None

    def kwargs(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in type(self).model_fields if name != "nodes"}

def _serves(shape: ModelShape, cfg: RunConfig, phase: str | None) -> bool:
    m = shape.transformer
    return not cfg.training and m is not None and m.has_kv_cache and phase != "prefill"

def _serving(
    shape: ModelShape, cfg: RunConfig, mem_cfg: RunConfig, g: Gpu, perf: _PerfArgs, prompt: int,
    max_itl_ms: float | None, default_note: str | None, notes: list[str],
) -> tuple[ServingSpeed | None, RunConfig, str]:
    """Serving latency at the batch (the concurrency), or the largest concurrency
    meeting ``max_itl_ms`` within what memory holds. ``default_note``: why the default batch
    was chosen (it is then at most what serve holds); None: the batch was given."""
    context = cfg.seq_len or default_seq_len(shape)
    kw = {**perf.kwargs(), "nodes": perf.nodes}
    kw.pop("phase")
    batch_note = "given" if default_note is None else default_note
    if max_itl_ms is None and default_note is not None:
        cfg, batch_note = _served_batch(shape, cfg, mem_cfg, g, default_note)
    if max_itl_ms is None:
        return serving_speed(g, shape, cfg, context=context, prompt=prompt, concurrency=cfg.batch, **kw), cfg, \
            batch_note
    check_latency_target(max_itl_ms, None, needs_users=False)
    capacity = _serving_capacity(shape, mem_cfg, g, context)
    engine = None  # the sequences the engine runs at once at most (vLLM's max_num_seqs for the GPU)
    if capacity is not None:
        held, engine = capacity.max_concurrency, capacity.max_num_seqs
    else:  # a layout the serving model does not cover (pipeline, context or expert parallel, sharded weights)
        held = largest_batch(shape, mem_cfg.model_copy(update={"seq_len": context}), g.memory_bytes) or 0
    limit = max(1, min(held, engine or held, MAX_SEARCH_CONCURRENCY))
    found = concurrency_for_latency(g, shape, cfg, context=context, prompt=prompt, max_itl_s=max_itl_ms / 1e3,
                                    limit=limit, **kw)
    if found is None:
        notes.append(f"even one sequence takes longer than {max_itl_ms:g} ms a token on {g.id}: "
                     "the latency target cannot be met (the estimate below is at concurrency 1)")
        one = cfg.model_copy(update={"batch": 1})
        # the target kept, above the ITL, so a reader of the JSON sees it missed
        speed = serving_speed(g, shape, one, context=context, prompt=prompt, concurrency=1, **kw)
        return speed.model_copy(update={"max_itl_s": max_itl_ms / 1e3}), one, "latency target not met: concurrency 1"
    # the search stops at what memory holds (or its own cap); below that the latency stopped it
    limited_by: Literal["latency", "memory", "engine"] = "latency" if found.concurrency < limit else (
        "engine" if engine is not None and engine < held else "memory")
    found = found.model_copy(update={"limited_by": limited_by, "memory_concurrency": held})
    if limited_by == "engine":
        notes.append(f"the engine, not latency or memory, limits the concurrency: it runs at most {engine:,} "
                     f"sequences at once (vLLM's max_num_seqs on {g.id}; memory holds {held:,}), which decode in "
                     f"{found.itl_s * 1e3:.2f} ms a token, within {max_itl_ms:g} ms")
        note = f"the most the engine runs at once, {engine:,}; their inter-token latency is within {max_itl_ms:g} ms"
    elif limited_by == "memory" and held < 1:
        notes.append(f"memory holds no sequence of {context:,} tokens on {g.id}: the figures at concurrency 1 "
                     "are hypothetical")
        note = "memory holds no sequence: concurrency 1"
    elif limited_by == "memory":
        where = g.id if capacity is None or capacity.tp == 1 else f"{capacity.tp} x {g.id} at TP={capacity.tp}"
        notes.append(f"memory, not latency, limits the concurrency: {where} holds {held:,} sequences of {context:,} "
                     f"tokens, which decode in {found.itl_s * 1e3:.2f} ms a token, within {max_itl_ms:g} ms")
        note = f"the most memory holds, {held:,}; their inter-token latency is within {max_itl_ms:g} ms"
    else:
        note = f"largest concurrency with an inter-token latency of at most {max_itl_ms:g} ms (memory holds {held:,})"
    return found, cfg.model_copy(update={"batch": found.concurrency}), note


def _served_batch(shape: ModelShape, cfg: RunConfig, mem_cfg: RunConfig, g: Gpu, batch_note: str
                  ) -> tuple[RunConfig, str]:
    """The default concurrency of a serving run: the default batch, at most what a serving
    engine's KV cache holds (as ``serve`` counts it)."""
    capacity = _serving_capacity(shape, mem_cfg, g, cfg.seq_len or default_seq_len(shape))
    if capacity is None or not 1 <= capacity.max_concurrency < cfg.batch:
        return cfg, batch_note
    return (cfg.model_copy(update={"batch": capacity.max_concurrency}),
            "the most a serving engine's KV cache holds (as gpusizer serve counts it)")


def _serving_capacity(shape: ModelShape, mem_cfg: RunConfig, g: Gpu, context: int) -> ServingCapacity | None:
    """What a serving engine holds on ``g`` (``serve``'s paged KV cache, gpusizer.memory.serving) for
    the run's tensor-parallel group; None for a layout that model does not cover."""
    par = mem_cfg.parallelism
    if max(par.pp, par.cp, par.ep) > 1 or par.weight_shards > 1:
        return None
    run = mem_cfg.model_copy(update={**tensor_parallel(par.tp), "tp": None})
    return serving_capacity(shape, run, g.memory_bytes, context, gpu_name=g.name)

def _estimate_run(
    shape: ModelShape, cfg: RunConfig, mem_cfg: RunConfig, g: Gpu, inputs: dict[str, Any], notes: list[str],
    batch_note: str, amount: _Work, perf: _PerfArgs, price_per_hour: float | None, serving: ServingSpeed | None,
) -> EstimateResult:
    capacity = _serving_capacity(shape, mem_cfg, g, serving.context_tokens) if serving is not None else None
    if capacity is not None and serving is not None:
        # a serving engine prefills in chunks and pages the KV cache: serve's accounting
        memory = MemoryCheck(per_gpu_bytes=capacity.bytes_for(serving.concurrency),
                             capacity_bytes=capacity.budget_bytes, fits=serving.concurrency <= capacity.max_concurrency)
        if not memory.fits:
            notes.append(f"does not fit: {g.id} holds {capacity.max_concurrency:,} sequences of "
                         f"{serving.context_tokens:,} tokens at {capacity.utilization:.0%} of its memory (gpusizer "
                         f"serve shows the breakdown), not {serving.concurrency:,}; the speed below is hypothetical")
    else:
        mem = estimate_memory(shape, mem_cfg)
        memory = MemoryCheck(per_gpu_bytes=mem.total_bytes, capacity_bytes=g.memory_bytes,
                             fits=mem.total_bytes <= g.memory_bytes)
        if not memory.fits:
            notes.append(f"does not fit: {mem.total_bytes / 2**30:.1f} GiB per GPU needed, {g.memory_gib:g} GiB on "
                         f"{g.id} (gpusizer fit-model shows the breakdown); the speed below is hypothetical")
    kwargs = perf.kwargs()
    est = estimate_performance(g, shape, cfg, nodes=perf.nodes, **kwargs)
    notes += list(est.notes)
    curve = scaling_curve(g, shape, cfg, scaling_counts(cfg.gpus, perf.nodes), **kwargs)
    training = None
    if amount.samples is not None or amount.tokens is not None:
        training = time_to_train(est, samples=amount.samples, tokens=amount.tokens,
                                 price_per_gpu_hour=price_per_hour)
    if price_per_hour is None:
        notes.append("cost unknown: give a price per GPU-hour in USD; catalog prices are purchase "
                     "prices, not hourly ones")
    speed = {key: getattr(est, key) for key in (
        "throughput_per_s", "throughput_unit", "step_time_s", "compute_s", "memory_s", "comm_s", "comm_exposed_s",
        "overhead_s", "bound", "per_gpu_throughput_per_s", "scaling_efficiency", "speedup_vs_1gpu", "error_band",
        "gpus_total")}
    results = EstimateResults(
        gpu=g.id, gpu_name=g.name, **speed, batch_per_gpu=cfg.batch, batch_source=batch_note,
        memory=memory,
        scaling_curve=tuple(curve), time_to_train=training,
        cost_usd=training.cost_usd if training is not None else None,
        price_per_gpu_hour_usd=price_per_hour,
        cluster_cost_per_hour_usd=price_per_hour * est.gpus_total if price_per_hour is not None else None,
        estimate=est, serving=serving,
    )
    return EstimateResult(input=inputs, results=results, notes=tuple(dict.fromkeys(notes)), gpu=g)
