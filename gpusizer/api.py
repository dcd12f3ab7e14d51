"""The public Python API: the four questions as functions that return typed results.

Every function here returns what the matching command prints under ``--json``:
``result.document()`` is that JSON document, key for key, and the command line
is a thin layer that calls these functions and renders their results. A
notebook or a sweep calls them in one process instead of paying start-up for
each configuration (``benchmarks/api_sweep.py`` measures the difference).

>>> import gpusizer
>>> fit = gpusizer.fit_model("resnet50", gpu="V100 16GB", batch=64)
>>> fit.results.fits_on
('v100-sxm2-16gb',)
>>> round(fit.results.breakdown.total_bytes / 2**30, 1)
3.6
>>> est = gpusizer.estimate("resnet50", gpu="A100 80GB SXM4", batch=256)
>>> est.results.throughput_unit
'images/s'
>>> est.document()["results"]["throughput_per_s"] == est.results.throughput_per_s
True

Errors are :class:`gpusizer.errors.GpusizerError` subclasses in domain words,
each with the exit code the CLI uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpusizer.domain.parallelism import sharded_gpus, tensor_parallel
from gpusizer.domain.precision import default_precision, storage_precision
from gpusizer.domain.run import RunConfig, make_run_config
from gpusizer.domain.shape import ModelShape, shape_from_model, shape_from_params
from gpusizer.errors import DataFileError, NothingFitsError, UsageError
from gpusizer.hardware.browse import CompareRow, Comparison
from gpusizer.hardware.catalog import Catalog, Gpu
from gpusizer.hardware.probe import HostSnapshot, ProbeReport
from gpusizer.memory.estimate import MemoryBreakdown, estimate_memory, largest_batch
from gpusizer.memory.fit import FitReport, GpuFit, capacities_from_catalog, capacities_from_probe, fit_rule_of_thumb
from gpusizer.memory.fit import fit_model as _fit
from gpusizer.memory.serving import (
    BLOCK_TOKENS,
    DEFAULT_UTILIZATION,
    MAX_TP,
    ServingCapacity,
    fewest_gpus_to_serve,
    serving_capacity,
)
from gpusizer.models.zoo import Model
from gpusizer.performance.estimate import PerfEstimate, estimate_performance
from gpusizer.performance.planning import (
    ScalingPoint,
    TrainingTime,
    default_batch,
    scaling_counts,
    scaling_curve,
    time_to_train,
)
from gpusizer.performance.serving import ServingSpeed, concurrency_for_latency, serving_speed
from gpusizer.performance.work import default_seq_len
from gpusizer.ranking.search import Recommendation
from gpusizer.units import parse_count

#: The JSON schema's version; a change that breaks readers bumps it.
SCHEMA_VERSION = 1

#: Upper bounds on what a question may ask; beyond them is a UsageError (exit 2), not
#: an overflow. GPUs in all: recommend's cap; parameters: the zoo's.
MAX_TOTAL_GPUS = 65_536
MAX_PARAMS = 10**14
MAX_NICS_PER_NODE = 1024
MAX_GRAD_ACCUMULATION = 65_536
MAX_EPOCHS = 1e6
#: samples per epoch, or tokens to train on
MAX_TRAINING_COUNT = 10**18
MAX_PRICE_PER_GPU_HOUR = 1e6
#: fixed per-GPU overhead (the CUDA context): 1 TiB
MAX_OVERHEAD_BYTES = 1 << 40


def _show_number(value: object) -> str:
    """``1,000,000`` or ``1e+308``: a bound or a bad value, briefly."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:
        return f"a number of {len(str(value))} digits"
    except (TypeError, ValueError):
        return repr(value)[:24]
    if number.is_integer() and abs(number) < 1e16:
        return f"{int(number):,}"
    return f"{number:.4g}"


def _check_range(value: float | None, field: str, what: str, low: float, high: float) -> None:
    """A UsageError naming ``field`` unless ``value`` is None or a finite number in [low, high]."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high):
        return  # (NaN fails both comparisons)
    raise UsageError(f"{what} must be between {_show_number(low)} and {_show_number(high)}, "
                     f"not {_show_number(value)}", field=field)
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Result(BaseModel):
    """The envelope every answer comes in: what was asked, the results, and notes."""

    model_config = _FROZEN

    schema_version: int = SCHEMA_VERSION
    command: str
    #: the resolved inputs: every default that was applied, as used
    input: dict[str, Any]
    results: Any
    notes: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        """The JSON document the command prints under ``--json``."""
        return self.model_dump(mode="json")


# --------------------------------------------------------------------------
# catalog and models


def load_catalog(files: Sequence[str | Path] = (), *, cache_dir: Path | None = None) -> Catalog:
    """The bundled GPU catalog, with ``files`` merged over it (added GPUs, overridden fields).

    >>> cat = load_catalog()
    >>> cat.resolve("H100 SXM").gpu.memory_gib
    80.0
    """
    from gpusizer.hardware.catalog import load_catalog as _load

    return _load(files, cache_dir=cache_dir)


def resolve_model(
    model: str | ModelShape | None = None, *, params: str | int | None = None, hf_config: str | Path | None = None,
    cache_dir: Path | None = None,
) -> ModelShape:
    """A model shape from exactly one of: a zoo name (or a ModelShape), a parameter
    count (``60M``, ``7e9`` or an int), or a local Hugging Face ``config.json``."""
    given = [n for n, v in (("model", model), ("params", params), ("hf_config", hf_config)) if v is not None]
    if len(given) != 1:
        raise UsageError(
            "give exactly one of a model name, a parameter count or a Hugging Face config"
            + (f" (got {', '.join(given)})" if given else ""),
            hint="e.g. the zoo's resnet50, 60M parameters, or ./config.json",
            field=given[-1] if given else "model",
        )
    if isinstance(model, ModelShape):
        return model
    if params is not None:
        try:
            count = params if isinstance(params, int) else parse_count(params, what="parameter count")
        except ValueError as exc:
            raise UsageError(str(exc), field="params") from None
        _check_range(count, "params", "the parameter count", 1, MAX_PARAMS)
        return shape_from_params(count)
    if model is not None:
        from gpusizer.models.zoo import load_zoo

        return shape_from_model(load_zoo(cache_dir=cache_dir).resolve(model))
    from gpusizer.models.hfconfig import load_hf_config

    return shape_from_model(load_hf_config(Path(str(hf_config))))


def _run(run: RunConfig | None, settings: dict[str, Any]) -> RunConfig:
    """A RunConfig from ``run`` with ``settings`` (RunConfig fields) applied over it."""
    base = run.model_dump() if run is not None else {}
    return make_run_config(**{**base, **settings})


# --------------------------------------------------------------------------
# fit-model


class FitResults(BaseModel):
    """``fit-model`` results: where the memory goes and which GPUs hold it."""

    model_config = _FROZEN

    model: str
    params: int
    method: Literal["physics", "rule-of-thumb"]
    breakdown: MemoryBreakdown
    gpus: tuple[GpuFit, ...]
    #: ids (or names) of the GPUs it fits on
    fits_on: tuple[str, ...]
    verdict: str


class FitModelResult(Result):
    command: Literal["fit-model"] = "fit-model"
    results: FitResults
    #: the engine's report, for renderers (not part of the JSON)
    report: FitReport = Field(exclude=True, repr=False)

    @property
    def fits(self) -> bool:
        return bool(self.results.fits_on)


def fit_model(
    model: str | ModelShape | None = None, *, params: str | int | None = None, hf_config: str | Path | None = None,
    gpu: str | Sequence[str] | None = None, probe: ProbeReport | None = None,
    method: Literal["physics", "rule-of-thumb"] = "physics", run: RunConfig | None = None,
    catalog: Catalog | None = None, cache_dir: Path | None = None, **settings: Any,
) -> FitModelResult:
    """Training or inference memory of a model, and which GPUs hold it.

    ``gpu`` names the catalog GPUs to check (default: the whole catalog);
    ``probe`` checks that machine's GPUs and their free memory instead
    (``gpusizer.hardware.nvml.read_host()`` reads one). ``settings`` are :class:`RunConfig` fields (``batch=8``,
    ``precision="bf16"``, ``mode="inference"``, ``gpus=4``, ``strategy="fsdp"``);
    ``run`` is a RunConfig to start from.

    >>> r = fit_model("llama-2-7b", gpu=["RTX 4090", "A100 80GB SXM4"], mode="inference")
    >>> r.results.fits_on
    ('rtx-4090', 'a100-sxm4-80gb')
    >>> r.input["precision"], r.input["batch"]
    ('fp16', 1)
    """
    if method not in ("physics", "rule-of-thumb"):
        raise UsageError(f"method {method!r} is not physics or rule-of-thumb", field="method")
    _check_range(settings.get("context_bytes"), "context_bytes", "the fixed overhead in bytes", 0, MAX_OVERHEAD_BYTES)
    shape = resolve_model(model, params=params, hf_config=hf_config, cache_dir=cache_dir)
    cfg = _run(run, settings)
    notes: list[str] = []
    if probe is not None:
        if gpu:
            raise UsageError("check either a machine's GPUs or named catalog GPUs, not both", field="gpu")
        capacities = capacities_from_probe(probe)
    else:
        cat = catalog or load_catalog(cache_dir=cache_dir)
        if gpu:
            resolved = cat.resolve_many([gpu] if isinstance(gpu, str) else list(gpu))
            notes += [r.note for r in resolved if r.note]
            capacities = capacities_from_catalog([r.gpu for r in resolved])
        else:
            capacities = capacities_from_catalog(cat.gpus)
    runner = fit_rule_of_thumb if method == "rule-of-thumb" else _fit
    report = runner(shape, cfg, capacities)
    inputs = {
        "model": shape.name, "params": shape.params, "method": method, **cfg.model_dump(mode="json"),
        "gpus_checked": [c.label for c in capacities],
        "local": probe is not None,
    }
    results = FitResults(
        model=report.model_name, params=report.params, method=report.method, breakdown=report.breakdown,
        gpus=report.gpus, fits_on=tuple(g.gpu_id or g.gpu_name for g in report.gpus if g.fits),
        verdict=report.verdict,
    )
    return FitModelResult(input=inputs, results=results, notes=(*notes, *report.notes), report=report)


# --------------------------------------------------------------------------
# estimate


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


def _check_cluster(gpus: int, nodes: int, nics_per_node: int | None, grad_accumulation: int,
                   price_per_hour: float | None) -> None:
    """The bounds recommend applies, for an estimate: at most 65,536 GPUs in all."""
    _check_range(gpus, "gpus_per_node", "the number of GPUs per node", 1, MAX_TOTAL_GPUS)
    _check_range(nodes, "nodes", "the number of nodes", 1, MAX_TOTAL_GPUS)
    if gpus * nodes > MAX_TOTAL_GPUS:
        raise UsageError(f"{gpus:,} GPUs per node x {nodes:,} nodes is more than {MAX_TOTAL_GPUS:,} GPUs in all",
                         field="nodes")
    _check_range(nics_per_node, "nics_per_node", "the number of network ports per node", 1, MAX_NICS_PER_NODE)
    _check_range(grad_accumulation, "grad_accumulation", "the number of micro-batches per step", 1,
                 MAX_GRAD_ACCUMULATION)
    _check_range(price_per_hour, "price_per_gpu_hour", "the price per GPU-hour", 0, MAX_PRICE_PER_GPU_HOUR)


def estimate(
    model: str | ModelShape | None = None, *, gpu: str, params: str | int | None = None,
    hf_config: str | Path | None = None, gpus: int = 1, nodes: int = 1, interconnect: str | None = None,
    nics_per_node: int | None = None, precision: str | None = None, tf32: bool = True, phase: str | None = None,
    cuda_graphs: bool = True, grad_accumulation: int = 1, epochs: float | None = None,
    dataset_size: str | int | None = None, tokens: str | int | None = None, price_per_hour: float | None = None,
    prompt: int | None = None, max_itl_ms: float | None = None, run: RunConfig | None = None,
    catalog: Catalog | None = None, cache_dir: Path | None = None, **settings: Any,
) -> EstimateResult:
    """Throughput, step-time breakdown, scaling, time-to-train and cost of a run.

    Serving a decoder (inference, decode phase), the results also carry the
    time to first token of a ``prompt`` (default: the whole context), the
    inter-token latency and per-user and aggregate tokens/s at the batch, which
    is the concurrency; ``max_itl_ms`` picks the largest concurrency that meets
    that latency.

    ``gpus`` is GPUs per node. ``precision`` is the math precision (tf32 and
    fp8 included); the memory model counts its storage precision.
    ``settings`` are :class:`RunConfig` fields (``batch``, ``seq_len``,
    ``mode``, ``strategy``, ...). Without ``batch`` the largest that fits is
    used, capped at a typical size. Cost needs ``price_per_hour`` (USD per GPU-hour).

    >>> r = estimate("resnet50", gpu="V100 SXM2 16GB", gpus=8, batch=256)
    >>> r.results.gpus_total, r.results.throughput_unit
    (8, 'images/s')
    >>> 0.5 < r.results.scaling_efficiency <= 1
    True
    """
    mode = settings.get("mode", run.mode if run is not None else "train")
    if phase is not None and mode == "train":
        raise UsageError("a phase (decode or prefill) is for inference", hint="run inference", field="phase")
    _check_cluster(gpus, nodes, nics_per_node, grad_accumulation, price_per_hour)
    amount = _training_amount(epochs, dataset_size, tokens)
    shape = resolve_model(model, params=params, hf_config=hf_config, cache_dir=cache_dir)
    cat = catalog or load_catalog(cache_dir=cache_dir)
    res = cat.resolve(gpu)
    g = res.gpu
    notes: list[str] = [res.note] if res.note else []
    adapted = settings.get("adapter", run.adapter if run is not None else None) is not None
    prec = precision or default_precision(mode, adapters=adapted)
    mem_prec = storage_precision(prec, mode)
    given_batch = settings.get("batch", run.batch if run is not None and "batch" in run.model_fields_set else None)
    cfg = _run(run, {**settings, "mode": mode, "precision": mem_prec, "batch": given_batch or 1,
                     "persistent_grads": grad_accumulation > 1, "gpus": gpus})
    inputs = {
        "model": shape.name, "params": shape.params, "gpu": gpu, "resolved_id": g.id, "gpus": gpus, "nodes": nodes,
        "interconnect": interconnect, "nics_per_node": nics_per_node, "precision": prec,
        "memory_precision": mem_prec, "tf32": tf32, **_run_echo(cfg), "phase": phase,
        "grad_accumulation": grad_accumulation, "cuda_graphs": cuda_graphs, "epochs": epochs,
        "dataset_size": dataset_size, "tokens": tokens, "price_per_hour": price_per_hour,
        "catalog_files": list(cat.files),
    }
    mem_cfg = cfg.model_copy(update={"gpus": sharded_gpus(cfg.strategy, gpus, nodes)})
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
                     compute_precision=prec, phase=phase, grad_accumulation=grad_accumulation, cuda_graphs=cuda_graphs)
    serving = None
    if _serves(shape, cfg, phase):
        inputs["prompt"] = prompt or cfg.seq_len or default_seq_len(shape)
        inputs["max_itl_ms"] = max_itl_ms
        serving, cfg, batch_note = _serving(shape, cfg, mem_cfg, g, perf, inputs["prompt"], max_itl_ms, batch_note,
                                            notes)
        mem_cfg = mem_cfg.model_copy(update={"batch": cfg.batch})
        inputs["batch"] = cfg.batch
    elif max_itl_ms is not None or prompt is not None:
        raise UsageError("a prompt length and a latency target are for serving a decoder (inference, decode)",
                         field="max_itl_ms" if max_itl_ms is not None else "prompt")
    return _estimate_run(shape, cfg, mem_cfg, g, inputs, notes, batch_note, amount, perf, price_per_hour, serving)


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
        "checkpointing", "adapter", "offload", "offload_to", "weight_format", "loss"})


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

    def kwargs(self) -> dict[str, Any]:
        return self.model_dump(exclude={"nodes"})


def _serves(shape: ModelShape, cfg: RunConfig, phase: str | None) -> bool:
    m = shape.transformer
    return not cfg.training and m is not None and m.has_kv_cache and phase != "prefill"


def _serving(
    shape: ModelShape, cfg: RunConfig, mem_cfg: RunConfig, g: Gpu, perf: _PerfArgs, prompt: int,
    max_itl_ms: float | None, batch_note: str, notes: list[str],
) -> tuple[ServingSpeed | None, RunConfig, str]:
    """Serving latency at the batch (the concurrency), or the largest concurrency
    meeting ``max_itl_ms`` within what memory holds."""
    context = cfg.seq_len or default_seq_len(shape)
    kw = {**perf.kwargs(), "nodes": perf.nodes}
    kw.pop("phase")
    if max_itl_ms is None:
        return serving_speed(g, shape, cfg, context=context, prompt=prompt, concurrency=cfg.batch, **kw), cfg, \
            batch_note
    if not max_itl_ms > 0:
        raise UsageError(f"the latency target {max_itl_ms:g} ms must be positive", field="max_itl_ms")
    limit = largest_batch(shape, mem_cfg.model_copy(update={"seq_len": context}), g.memory_bytes) or 1
    found = concurrency_for_latency(g, shape, cfg, context=context, prompt=prompt, max_itl_s=max_itl_ms / 1e3,
                                    limit=limit, **kw)
    if found is None:
        notes.append(f"even one sequence takes longer than {max_itl_ms:g} ms a token on {g.id}: "
                     "the latency target cannot be met (the estimate below is at concurrency 1)")
        one = cfg.model_copy(update={"batch": 1})
        return serving_speed(g, shape, one, context=context, prompt=prompt, concurrency=1, **kw), one, \
            "latency target not met: concurrency 1"
    note = f"largest concurrency with an inter-token latency of at most {max_itl_ms:g} ms (memory holds {limit})"
    return found, cfg.model_copy(update={"batch": found.concurrency}), note


def _estimate_run(
    shape: ModelShape, cfg: RunConfig, mem_cfg: RunConfig, g: Gpu, inputs: dict[str, Any], notes: list[str],
    batch_note: str, amount: _Work, perf: _PerfArgs, price_per_hour: float | None, serving: ServingSpeed | None,
) -> EstimateResult:
    mem = estimate_memory(shape, mem_cfg)
    fits = mem.total_bytes <= g.memory_bytes
    if not fits:
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
        notes.append("cost unknown: give a price per GPU-hour in USD; catalog launch prices are purchase "
                     "prices, not hourly ones")
    speed = {key: getattr(est, key) for key in (
        "throughput_per_s", "throughput_unit", "step_time_s", "compute_s", "memory_s", "comm_s", "comm_exposed_s",
        "overhead_s", "bound", "per_gpu_throughput_per_s", "scaling_efficiency", "speedup_vs_1gpu", "error_band",
        "gpus_total")}
    results = EstimateResults(
        gpu=g.id, gpu_name=g.name, **speed, batch_per_gpu=cfg.batch, batch_source=batch_note,
        memory=MemoryCheck(per_gpu_bytes=mem.total_bytes, capacity_bytes=g.memory_bytes, fits=fits),
        scaling_curve=tuple(curve), time_to_train=training,
        cost_usd=training.cost_usd if training is not None else None,
        price_per_gpu_hour_usd=price_per_hour,
        cluster_cost_per_hour_usd=price_per_hour * est.gpus_total if price_per_hour is not None else None,
        estimate=est, serving=serving,
    )
    return EstimateResult(input=inputs, results=results, notes=tuple(dict.fromkeys(notes)), gpu=g)


# --------------------------------------------------------------------------
# serve


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


class ServeResults(BaseModel):
    model_config = _FROZEN

    model: str
    context_tokens: int
    users: int | None
    rows: tuple[ServeRow, ...]
    #: ids of the GPUs that serve the users (or hold one sequence when no users are given)
    serves_on: tuple[str, ...]


class ServeResult(Result):
    command: Literal["serve"] = "serve"
    results: ServeResults

    @property
    def fits(self) -> bool:
        return bool(self.results.serves_on)


def serve(
    model: str | ModelShape | None = None, *, context: int, users: int | None = None,
    gpu: str | Sequence[str] | None = None, tp: int | None = None, params: str | int | None = None,
    hf_config: str | Path | None = None, gpu_memory_utilization: float = DEFAULT_UTILIZATION,
    max_tp: int = MAX_TP, catalog: Catalog | None = None, cache_dir: Path | None = None, **settings: Any,
) -> ServeResult:
    """How many sequences of ``context`` tokens a deployment holds at once, and the
    fewest GPUs (a tensor-parallel group) that serve ``users`` of them.

    The KV cache gets what is left of ``gpu_memory_utilization`` of each GPU once the
    weights, a prefill chunk's activations and the engine's reserves are placed (vLLM's
    accounting, 16-token blocks). ``tp`` fixes the group size instead of searching up
    to ``max_tp`` GPUs (one node: tensor parallelism needs NVLink-class links).
    ``settings`` are RunConfig fields (``precision``, ``kv_cache``, ...).

    >>> r = serve("llama-3-70b", gpu="H100 SXM", context=4096, users=32)
    >>> row = r.results.rows[0]
    >>> row.gpus, row.max_concurrency >= 32
    (4, True)
    """
    shape = resolve_model(model, params=params, hf_config=hf_config, cache_dir=cache_dir)
    cfg = _run(None, {**settings, "mode": "inference"})
    cat = catalog or load_catalog(cache_dir=cache_dir)
    names = [gpu] if isinstance(gpu, str) else list(gpu or ())
    resolved = cat.resolve_many(names) if names else [cat.resolve(g.id) for g in cat.gpus]
    notes = [r.note for r in resolved if r.note]
    rows = []
    for res in resolved:
        g = res.gpu
        if tp is not None:
            m = shape.transformer
            if m is not None and not m.allows_tp(tp):
                raise UsageError(f"tensor parallelism over {tp} GPUs does not divide {shape.name}'s {m.heads} "
                                 f"attention heads and {m.n_kv_heads} KV heads", field="tp")
            run = cfg.model_copy(update=tensor_parallel(tp))
            cap = serving_capacity(shape, run, g.memory_bytes, context, utilization=gpu_memory_utilization)
            ok = cap.max_concurrency >= (users or 1)
            rows.append(ServeRow(gpu_id=g.id, gpu_name=g.name, memory_bytes=g.memory_bytes, gpus=tp if ok else None,
                                 max_concurrency=cap.max_concurrency, capacity=cap, tried=(cap,)))
            continue
        plan = fewest_gpus_to_serve(shape, cfg, g.memory_bytes, context, users or 1,
                                    utilization=gpu_memory_utilization, max_gpus=max_tp)
        best = plan.capacity or (plan.tried[-1] if plan.tried else None)
        rows.append(ServeRow(gpu_id=g.id, gpu_name=g.name, memory_bytes=g.memory_bytes, gpus=plan.gpus,
                             max_concurrency=best.max_concurrency if best else 0, capacity=plan.capacity,
                             tried=plan.tried))
    inputs = {"model": shape.name, "params": shape.params, "context_tokens": context, "users": users, "tp": tp,
              "max_tp": max_tp,
              "gpu_memory_utilization": gpu_memory_utilization, "block_tokens": BLOCK_TOKENS,
              **cfg.model_dump(mode="json", include={"precision", "kv_cache", "flash_attention", "weight_format"}),
              "gpus_checked": [r.gpu.id for r in resolved]}
    results = ServeResults(model=shape.name, context_tokens=context, users=users, rows=tuple(rows),
                           serves_on=tuple(r.gpu_id for r in rows if r.gpus is not None))
    return ServeResult(input=inputs, results=results, notes=tuple(notes))


# --------------------------------------------------------------------------
# recommend


class RecommendResult(Result):
    command: Literal["recommend"] = "recommend"
    results: Recommendation
    #: the rules files that were merged, for renderers
    rules_files: tuple[str, ...] = Field(default=(), exclude=True, repr=False)

    @property
    def fits(self) -> bool:
        return bool(self.results.ranked)


def recommend(
    workload: str, *, model: str | ModelShape | None = None, params: str | int | None = None,
    hf_config: str | Path | None = None, precision: str | None = None, batch: int | None = None,
    seq_len: int | None = None, image_size: int | None = None, flash_attention: bool = True,
    optimizer: str = "adamw", strategy: str = "ddp", gpus: int = 1, nodes: int = 1, interconnect: str | None = None,
    budget: float | None = None, max_power: float | None = None, require: Sequence[str] = (),
    segments: Sequence[str] = (), top: int = 10, sort: str = "score", rules: Sequence[str | Path] = (),
    probe: ProbeReport | None = None, catalog: Catalog | None = None, cache_dir: Path | None = None,
    vendor: str = "nvidia",
) -> RecommendResult:
    """Rank GPUs for a workload (``cnn``, ``llm-train``, ``hpc``, ... or one from ``rules``),
    with every rule's contribution to each score.

    ``budget`` is total US dollars and ``max_power`` total watts for ``gpus`` x
    ``nodes`` GPUs; ``require`` names hard requirements (ecc, rdma, nvlink,
    fp64); ``vendor`` (nvidia, amd, intel or any) picks whose GPUs are considered, NVIDIA only
    by default. A model (by name, parameter count or HF config) adds the memory fit
    and the performance model's speed. ``probe`` ranks that machine's GPUs
    (``gpusizer.hardware.nvml.read_host()`` reads one) instead of the catalog.

    >>> r = recommend("hpc", require=["ecc"], top=3)
    >>> len(r.results.ranked)
    3
    >>> cat = load_catalog()
    >>> all(cat.resolve(g.gpu_id).gpu.ecc for g in r.results.ranked)
    True
    """
    from gpusizer.ranking.rules import load_rules
    from gpusizer.ranking.search import (
        RecommendRequest,
        candidates_from_catalog,
        candidates_from_probe,
        reference_shape,
    )
    from gpusizer.ranking.search import recommend as _recommend

    _check_cluster(gpus, nodes, None, 1, None)
    ruleset = load_rules([str(p) for p in rules], cache_dir=cache_dir)
    wl = ruleset.workload(workload)
    shape = None
    if any(v is not None for v in (params, model, hf_config)):
        shape = resolve_model(model, params=params, hf_config=hf_config, cache_dir=cache_dir)
    elif batch is not None:
        raise UsageError("a batch needs a model (by name, parameter count or HF config)", field="batch")
    req = RecommendRequest(
        workload=workload, precision=precision, shape=shape, batch=batch, seq_len=seq_len, image_size=image_size,
        flash_attention=flash_attention, optimizer=optimizer, strategy=strategy, gpus_per_node=gpus, nodes=nodes,
        interconnect=interconnect, budget_usd=budget, max_power_w=max_power, require=tuple(require),
        segments=tuple(segments), top=top, sort=sort, vendor=vendor.lower(),
    )
    notes: list[str] = []
    cat = catalog or load_catalog(cache_dir=cache_dir)
    if probe is not None:
        candidates, local_notes = candidates_from_probe(probe)
        notes += list(local_notes)
        if not candidates:
            raise NothingFitsError("none of this machine's GPUs is in the catalog, so none can be ranked",
                                   hint="add catalog entries for them (the probe can write starter entries)")
    else:
        candidates = candidates_from_catalog(cat.gpus)
    reference = None
    if shape is None and wl.speed.model is not None:
        from gpusizer.models.zoo import load_zoo

        try:
            reference = reference_shape(wl, load_zoo(cache_dir=cache_dir))
        except UsageError as exc:
            raise DataFileError(f"{ruleset.speed_files.get(wl.name, 'rules')}: workload '{wl.name}': speed.model: "
                                f"{exc.message}",
                                hint="name a model from the zoo") from None
    rec = _recommend(candidates, ruleset, req, reference=reference, pool=cat.gpus)
    inputs = {
        "workload": workload, "precision": rec.precision, "model": shape.name if shape else None,
        "params": shape.params if shape else None, "batch": batch, "seq_len": seq_len, "image_size": image_size,
        "flash_attention": flash_attention, "optimizer": optimizer, "strategy": strategy, "gpus_per_node": gpus,
        "nodes": nodes, "interconnect": interconnect, "budget_usd": budget, "max_power_w": max_power,
        "require": list(req.require), "segments": list(req.segments), "vendor": req.vendor, "top": top,
        "sort": sort, "local": probe is not None, "rules_files": list(ruleset.files), "catalog_files": list(cat.files),
    }
    return RecommendResult(input=inputs, results=rec, notes=(*notes, *rec.notes), rules_files=ruleset.files)


# --------------------------------------------------------------------------
# catalog, compare, models, probe


class GpuListResult(Result):
    command: Literal["catalog list"] = "catalog list"
    results: tuple[Gpu, ...]
    #: how many GPUs the catalog holds (the list is after filtering)
    catalog_size: int = Field(exclude=True, repr=False)


class GpuResult(Result):
    command: Literal["catalog show"] = "catalog show"
    results: Gpu
    #: the formula of each derivation rule the entry's ``derived`` names (rule id -> formula)
    formulas: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)


class CompareResults(BaseModel):
    model_config = _FROZEN

    gpus: tuple[str, ...]
    rows: tuple[CompareRow, ...]
    facts: tuple[CompareFact, ...]


class CompareFact(BaseModel):
    model_config = _FROZEN

    field: str
    label: str
    values: tuple[str | int | bool | None, ...]


class CompareResult(Result):
    command: Literal["compare"] = "compare"
    results: CompareResults
    comparison: Comparison = Field(exclude=True, repr=False)


class ModelsResult(Result):
    command: Literal["models"] = "models"
    results: tuple[Model, ...]


class ProbeResult(Result):
    command: Literal["probe"] = "probe"
    results: dict[str, Any]
    report: ProbeReport = Field(exclude=True, repr=False)


def list_gpus(
    *, segment: str | None = None, arch: str | None = None, min_memory_gib: float | None = None,
    ecc: bool | None = None, rdma: bool | None = None, nvlink: bool | None = None, sort: str | None = None,
    descending: bool = True, vendor: str | None = None, catalog: Catalog | None = None,
    cache_dir: Path | None = None,
) -> GpuListResult:
    """Catalog GPUs, filtered (segment, architecture, vendor, memory, ECC available, RDMA,
    NVLink) and sorted by a numeric field; unknown values sort last. Each entry's ``derived``
    maps the values a derivation rule gave to the rule's id (``data/derivations.yaml``).

    >>> [g.id for g in list_gpus(arch="hopper", segment="datacenter", sort="memory_gib").results][:2]
    ['gh200-144gb', 'h200-sxm-141gb']
    """
    import difflib

    from gpusizer.hardware.browse import CatalogFilter, filter_gpus
    from gpusizer.hardware.catalog import ARCH_ORDER, OTHER_ARCHITECTURES, SEGMENTS, VENDORS

    archs = (*ARCH_ORDER, *OTHER_ARCHITECTURES)
    if segment is not None and segment.lower() not in SEGMENTS:
        raise UsageError(f"{segment!r} is not one of {', '.join(SEGMENTS)}", field="segment")
    if vendor is not None and vendor.lower() not in VENDORS:
        raise UsageError(f"{vendor!r} is not one of {', '.join(VENDORS)}", field="vendor")
    if arch is not None and arch.lower() not in archs:
        close = difflib.get_close_matches(arch.lower(), archs, n=2)
        raise UsageError(f"{arch!r} is not an architecture in the catalog", field="arch",
                         hint=f"did you mean {', '.join(close)}?" if close else f"one of: {', '.join(archs)}")
    cat = catalog or load_catalog(cache_dir=cache_dir)
    spec = CatalogFilter(segment=segment.lower() if segment else None, architecture=arch.lower() if arch else None,
                         vendor=vendor.lower() if vendor else None, min_memory_gib=min_memory_gib, ecc=ecc, rdma=rdma,
                         nvlink=nvlink, sort=sort, descending=descending)
    gpus = filter_gpus(cat.gpus, spec)
    inputs = {**spec.model_dump(mode="json"), "catalog_files": list(cat.files)}
    return GpuListResult(input=inputs, results=tuple(gpus), catalog_size=len(cat.gpus))


def show_gpu(name: str, *, catalog: Catalog | None = None, cache_dir: Path | None = None) -> GpuResult:
    """One catalog entry, with its sources, by id, alias or name (``"RTX 3090"``); its
    ``derived`` maps each value a derivation rule gave to the rule's id."""
    from gpusizer.hardware.catalog import load_derivations

    cat = catalog or load_catalog(cache_dir=cache_dir)
    res = cat.resolve(name)
    rules = load_derivations(cache_dir)
    formulas = {rule_id: rule.formula for rule_id in res.gpu.derived_by.values()
                if (rule := rules.by_id(rule_id)) is not None}
    return GpuResult(input={"gpu": name, "resolved_id": res.gpu.id}, results=res.gpu,
                     notes=(res.note,) if res.note else (), formulas=formulas)


def compare(names: Sequence[str], *, catalog: Catalog | None = None, cache_dir: Path | None = None) -> CompareResult:
    """GPUs side by side, with ratios against the first.

    >>> compare(["GTX 1080 Ti", "P100 SXM2"]).results.gpus
    ('gtx-1080-ti', 'p100-sxm2-16gb')
    """
    from gpusizer.hardware.browse import compare as _compare

    cat = catalog or load_catalog(cache_dir=cache_dir)
    result = _compare(cat.resolve_many(list(names)))
    results = CompareResults(
        gpus=tuple(g.id for g in result.gpus), rows=result.rows,
        facts=tuple(CompareFact(field=f, label=label, values=v) for f, label, v in result.facts),
    )
    return CompareResult(input={"gpus": list(names)}, results=results, notes=result.notes, comparison=result)


def models(*, cache_dir: Path | None = None) -> ModelsResult:
    """The model zoo: every model with its shape and sources."""
    from gpusizer.models.zoo import load_zoo

    return ModelsResult(input={}, results=load_zoo(cache_dir=cache_dir).models)


def probe(
    host: HostSnapshot | None = None, *, catalog: Catalog | None = None, catalog_files: Sequence[str] = (),
    cache_dir: Path | None = None,
) -> ProbeResult:
    """This machine's NVIDIA GPUs read through NVML (or a given host snapshot), matched
    to the catalog. Raises NoDeviceError without a driver or GPU."""
    from gpusizer.hardware.probe import match_catalog, report_results

    if host is None:
        from gpusizer.hardware.nvml import read_host

        host = read_host()
    cat = catalog or load_catalog(catalog_files, cache_dir=cache_dir)
    matched = match_catalog(host, cat)
    return ProbeResult(input={"catalog_files": list(catalog_files)}, results=report_results(matched), report=matched)


__all__ = [
    "SCHEMA_VERSION",
    "EstimateResult",
    "EstimateResults",
    "FitModelResult",
    "FitResults",
    "Result",
    "estimate",
    "fit_model",
    "CompareResult",
    "GpuListResult",
    "GpuResult",
    "ModelsResult",
    "ProbeResult",
    "RecommendResult",
    "ServeResult",
    "serve",
    "compare",
    "list_gpus",
    "models",
    "probe",
    "show_gpu",
    "load_catalog",
    "recommend",
    "resolve_model",
]
