"""fit-model: training or inference memory, and which GPUs hold it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from gpusizer.api._common import (
    _FROZEN,
    MAX_OVERHEAD_BYTES,
    Result,
    _check_range,
    _given_weights,
    _run,
    checkpoint_defaults,
    load_catalog,
    resolve_model,
)
from gpusizer.domain.parallelism import NODE_GPUS, idle_sharding_note
from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape, beyond_context_note
from gpusizer.errors import UsageError
from gpusizer.exact.source import ExactTrace
from gpusizer.hardware.catalog import Catalog
from gpusizer.memory.estimate import MemoryBreakdown, input_default_note, resolved_input
from gpusizer.memory.fit import (
    Capacity,
    FitReport,
    GpuFit,
    Remedy,
    capacities_from_catalog,
    capacities_from_probe,
    capacities_from_sizes,
    fit_rule_of_thumb,
)
from gpusizer.memory.fit import fit_model as _fit

if TYPE_CHECKING:
    from gpusizer.hardware.probe import ProbeReport  # (only --local's callers build one)


class FitResults(BaseModel):
    """``fit-model`` results: where the memory goes and which GPUs hold it."""

    model_config = _FROZEN

    model: str
    params: int
    method: Literal["physics", "rule-of-thumb", "exact"]
    breakdown: MemoryBreakdown
    gpus: tuple[GpuFit, ...]
    #: ids (or names) of the GPUs it fits on
    fits_on: tuple[str, ...]
    verdict: str
    #: exact mode: the traced step at the run's batch (null otherwise)
    trace: ExactTrace | None = None
    #: when it fits on no GPU checked: the smallest changes that make it fit, each measured
    #: (options in command-line words, peak per GPU, the GPUs that hold it, the largest batch)
    remedies: tuple[Remedy, ...] = ()
    #: GPUs in one node of the run: the system's count (at most the run's GPUs), else the run's
    #: GPUs up to NODE_GPUS (8, a DGX/HGX board; larger runs are counted in whole nodes of it)
    gpus_per_node: int = 1
    #: offloaded state one node holds in host memory, or on NVMe: the breakdown's per-GPU
    #: cpu_bytes (nvme_bytes) times gpus_per_node
    cpu_bytes_per_node: int = 0
    nvme_bytes_per_node: int = 0

#: The range a card's memory may be given in: 64 MiB to 64 TiB.
_CARD_BYTES = (1 << 26, 1 << 46)


def _card_size(memory: str | int) -> tuple[str, int]:
    """A size as written and in bytes; GB is 10^9 bytes, GiB 2^30, a bare number GiB."""
    from gpusizer.units import format_bytes, parse_size

    if isinstance(memory, int) and not isinstance(memory, bool):
        size, text = memory, format_bytes(memory)
    else:
        try:
            size, text = parse_size(str(memory), what="memory size"), str(memory)
        except ValueError as exc:
            raise UsageError(str(exc), field="memory") from None
    _check_range(size, "memory", "a card's memory in bytes", *_CARD_BYTES)
    return text, size


class FitModelResult(Result):
    command: Literal["fit-model"] = "fit-model"
    results: FitResults
    #: the engine's report, for renderers (not part of the JSON)
    report: FitReport = Field(exclude=True, repr=False)

    @property
    def fits(self) -> bool:
        return bool(self.results.fits_on)

def _system_gpus(
    system: str | None, gpu: str | Sequence[str] | None, probe: ProbeReport | None, settings: dict[str, Any],
    cache_dir: Path | None,
) -> tuple[str | Sequence[str] | None, dict[str, Any], int | None]:
    """A system checks its own GPU at its own count, unless a count is given; None counts are
    dropped. The GPUs a node of the system holds (None: no system)."""
    if system is None:
        return gpu, {k: v for k, v in settings.items() if not (k == "gpus" and v is None)}, None
    from gpusizer.hardware.systems import load_systems

    if gpu or probe is not None:
        raise UsageError("check a system, or named GPUs, not both", field="gpu")
    sys_ = load_systems(cache_dir=cache_dir).resolve(system)
    return sys_.gpu, {**settings, "gpus": settings.get("gpus") or sys_.gpus}, sys_.gpus


def fit_model(
    model: str | ModelShape | None = None, *, params: str | int | None = None, hf_config: str | Path | None = None,
    hf_model: str | None = None, torch_model: str | None = None, input_shape: str | Sequence[int] | None = None,
    trust_remote_code: bool = False,
    gpu: str | Sequence[str] | None = None, system: str | None = None, probe: ProbeReport | None = None,
    memory: Sequence[str | int] = (),
    method: Literal["physics", "rule-of-thumb", "exact"] = "physics", run: RunConfig | None = None,
    catalog: Catalog | None = None, cache_dir: Path | None = None, progress: Callable[[str], None] | None = None,
    **settings: Any,
) -> FitModelResult:
    """Training or inference memory of a model, and which GPUs hold it.

    ``gpu`` names the catalog GPUs to check (default: the whole catalog);
    ``probe`` checks that machine's GPUs and their free memory instead
    (``gpusizer.hardware.nvml.read_host()`` reads one). ``memory`` adds cards known only
    by their size (``"6GB"``, ``"24GiB"``, or bytes); without ``gpu`` or ``probe`` only
    those are checked. ``settings`` are :class:`RunConfig` fields (``batch=8``,
    ``precision="bf16"``, ``mode="inference"``, ``gpus=4``, ``strategy="fsdp"``);
    ``run`` is a RunConfig to start from.

    ``method="exact"`` builds the model (``hf_config``, ``hf_model`` or ``torch_model``,
    ``"torchvision.models:vit_b_16"``) and counts the live tensors of a real step under
    fake tensors; it needs ``gpusizer[torch]``. ``progress`` is called with a phase name
    as the trace goes on. ``hf_model`` (a Hub repo id) works for the analytic path too.

    >>> r = fit_model("llama-2-7b", gpu=["RTX 4090", "A100 80GB SXM4"], mode="inference")
    >>> r.results.fits_on
    ('rtx-4090', 'a100-sxm4-80gb')
    >>> r.input["precision"], r.input["batch"]
    ('fp16', 1)
    >>> fit_model("resnet50", memory=["6GB"], batch=64).results.gpus[0].gpu_name
    '6GB card'
    """
    if method not in ("physics", "rule-of-thumb", "exact"):
        raise UsageError(f"method {method!r} is not physics, rule-of-thumb or exact", field="method")
    gpu, settings, system_gpus = _system_gpus(system, gpu, probe, settings, cache_dir)
    _check_range(settings.get("context_bytes"), "context_bytes", "the fixed overhead in bytes", 0, MAX_OVERHEAD_BYTES)
    shape, source = _model_for(method, model, params, hf_config, hf_model, torch_model, input_shape,
                               trust_remote_code, cache_dir)
    mode = settings.get("mode") or (run.mode if run is not None else "train")
    ckpt, ckpt_note = checkpoint_defaults(shape, mode, given=_given_weights(settings, run))
    cfg = _run(run, {**settings, **ckpt})
    notes: list[str] = [ckpt_note] if ckpt_note else []
    given = capacities_from_sizes([_card_size(m) for m in dict.fromkeys(memory)])  # (checked first; a repeat once)
    capacities: list[Capacity] = []
    if probe is not None:
        if gpu:
            raise UsageError("check either a machine's GPUs or named catalog GPUs, not both", field="gpu")
        capacities = capacities_from_probe(probe)
    elif gpu or not memory:
        cat = catalog or load_catalog(cache_dir=cache_dir)
        if gpu:
            resolved = cat.resolve_many([gpu] if isinstance(gpu, str) else list(gpu))
            notes += [r.note for r in resolved if r.note]
            capacities = capacities_from_catalog([r.gpu for r in resolved])
        else:
            capacities = capacities_from_catalog(cat.gpus)
    capacities += given
    traced: ExactTrace | None = None
    if shape is None:
        report, traced, exact_input = _exact(source, cfg, capacities, progress)
        inputs: dict[str, Any] = {"model": report.model_name, "params": report.params, "method": method,
                                  **cfg.model_dump(mode="json"), "exact": exact_input}
    else:
        runner = fit_rule_of_thumb if method == "rule-of-thumb" else _fit
        report = runner(shape, cfg, capacities)
        inputs = {"model": shape.name, "params": shape.params, "method": method, **cfg.model_dump(mode="json"),
                  **resolved_input(shape, cfg)}
        assumed = input_default_note(shape, cfg) if method != "rule-of-thumb" else None
        beyond = beyond_context_note(shape, cfg.seq_len)
        notes += [n for n in (assumed, beyond) if n]
    inputs.update(gpus_checked=[c.label for c in capacities], local=probe is not None)
    notes += [n for n in (idle_sharding_note(cfg.strategy, cfg.parallelism),) if n]
    results = FitResults(
        model=report.model_name, params=report.params, method=report.method, breakdown=report.breakdown,
        gpus=report.gpus, fits_on=tuple(g.gpu_id or g.gpu_name for g in report.gpus if g.fits),
        verdict=report.verdict, trace=traced, remedies=report.remedies,
        **_host_per_node(report.breakdown, cfg.gpus, system_gpus),
    )
    return FitModelResult(input=inputs, results=results, notes=(*notes, *report.notes), report=report)


def _host_per_node(breakdown: MemoryBreakdown, gpus: int, system_gpus: int | None) -> dict[str, int]:
    """The offloaded state a node holds (the host RAM or NVMe to buy): a GPU's times the GPUs
    of a node (FitResults.gpus_per_node)."""
    per_node = min(gpus, system_gpus or NODE_GPUS)
    return {"gpus_per_node": per_node, "cpu_bytes_per_node": breakdown.cpu_bytes * per_node,
            "nvme_bytes_per_node": breakdown.nvme_bytes * per_node}


def _model_for(method: str, model: str | ModelShape | None, params: str | int | None, hf_config: str | Path | None,
               hf_model: str | None, torch_model: str | None, input_shape: str | Sequence[int] | None,
               trust_remote_code: bool, cache_dir: Path | None) -> tuple[ModelShape | None, Any]:
    """The analytic path's shape, or the model exact mode builds (its ModelSource)."""
    if method == "exact":
        from gpusizer.exact.trace import make_source

        others = [n for n, v in (("model", model), ("params", params)) if v is not None]
        return None, make_source(hf_config=hf_config, hf_model=hf_model, torch_model=torch_model,
                                 input_shape=input_shape, trust_remote_code=trust_remote_code, others=others)
    if torch_model is not None:
        raise UsageError("a Python model is measured by exact mode only", hint="measure it with exact mode", field="torch_model")
    if input_shape is not None:
        raise UsageError("an input shape is for exact mode with a model built by a Python callable", field="input_shape")
    return resolve_model(model, params=params, hf_config=hf_config, cache_dir=cache_dir, hf_model=hf_model), None


def _exact(source: Any, cfg: RunConfig, capacities: Sequence[Capacity],
           progress: Callable[[str], None] | None) -> tuple[FitReport, ExactTrace, dict[str, Any]]:
    """Trace the run at its batch and at twice it (for the largest batch), and report."""
    from gpusizer.exact.fit import exact_fit
    from gpusizer.exact.trace import source_label, trace

    first = trace(source, cfg, progress)
    second_batch = cfg.batch * 2
    second = trace(source, cfg.model_copy(update={"batch": second_batch}), progress)
    report = exact_fit((first, second), (cfg.batch, second_batch), cfg, capacities, source_label(source))
    echo = {"source": source.kind, "ref": source.ref, "traced_batches": [cfg.batch, second_batch],
            "versions": first.versions, "trust_remote_code": source.trust_remote_code}
    return report, first, echo
