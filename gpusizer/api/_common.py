"""The envelope every API result comes in, model resolution, and input bounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

# (the envelope lives in _envelope, which imports no domain model; re-exported here)
from gpusizer.api._envelope import _FROZEN as _FROZEN
from gpusizer.api._envelope import SCHEMA_VERSION as SCHEMA_VERSION
from gpusizer.api._envelope import Result as Result
from gpusizer.api._envelope import load_catalog as load_catalog
from gpusizer.domain.precision import DEFAULT_PRECISION
from gpusizer.domain.run import RunConfig, make_run_config
from gpusizer.domain.shape import ModelShape, shape_from_model, shape_from_params
from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Catalog
from gpusizer.units import finite_number, parse_count

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

def _check_range(value: float | None, field: str, what: str, low: float, high: float) -> None:
    """A UsageError naming ``field`` unless ``value`` is None or a finite number in [low, high]
    (the one check, :func:`gpusizer.units.finite_number`, says which it is not)."""
    if value is None:
        return
    try:
        finite_number(value, low, high)
    except ValueError as exc:
        raise UsageError(f"{what} {exc}", field=field) from None

def check_latency_target(max_itl_ms: float | None, users: int | None, *, needs_users: bool = True) -> float | None:
    """An inter-token latency target in seconds (None: none given), checked: a positive, finite
    number of milliseconds, and (``needs_users``) given with the users it sizes the GPUs for."""
    if max_itl_ms is None:
        return None
    if needs_users and users is None:
        raise UsageError("a latency target sizes the GPUs for a number of users: give the users", field="max_itl_ms")
    if not 0 < max_itl_ms < float("inf"):
        raise UsageError(f"the latency target {max_itl_ms:g} ms must be a positive number", field="max_itl_ms")
    return max_itl_ms / 1e3


def resolve_model(
    model: str | ModelShape | None = None, *, params: str | int | None = None, hf_config: str | Path | None = None,
    cache_dir: Path | None = None, hf_model: str | None = None,
) -> ModelShape:
    """A model shape from exactly one of: a zoo name (or a ModelShape), a parameter
    count (``60M``, ``7e9`` or an int), a local Hugging Face ``config.json``, or a
    Hub repository id whose config.json is read from the cache or downloaded."""
    given = [n for n, v in (("model", model), ("params", params), ("hf_config", hf_config), ("hf_model", hf_model))
             if v is not None]
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

    if hf_model is not None:
        from gpusizer.models.hub import hub_config_path

        return shape_from_model(load_hf_config(hub_config_path(hf_model)))
    return shape_from_model(load_hf_config(Path(str(hf_config))))

def checkpoint_defaults(shape: ModelShape | None, mode: str, *, given: bool) -> tuple[dict[str, str], str | None]:
    """What an inference run of a quantised checkpoint (its config's ``quantization_config``)
    defaults to, a ``weight_format`` or a ``precision`` setting, and a note saying so; nothing
    when the run ``given`` a precision or weight format of its own (it wins), and for training."""
    q = shape.checkpoint if shape is not None else None
    if q is None:
        return {}, None
    what = f"the checkpoint's quantization_config ({q.detail})"
    if mode != "inference":
        return {}, f"{what} is for inference: training counts the weights at the run's precision"
    if given:
        return {}, f"{what} is not applied: the precision or weight format given is used"
    if not q.mapped:
        return {}, (f"{what} has no weight format in gpusizer: the weights are counted at the default "
                    f"{DEFAULT_PRECISION['inference']}; give a precision or a weight format to size them")
    if q.weight_format is not None:
        return {"weight_format": q.weight_format}, (f"weight format {q.weight_format} (default: {what}); give a "
                                                    "precision or a weight format to change it")
    assert q.precision is not None  # mapped
    return {"precision": q.precision}, (f"precision {q.precision} (default: {what}); give a precision or a weight "
                                        "format to change it")

def checkpoint_run(
    shape: ModelShape | None, mode: str, settings: dict[str, Any], *, run: RunConfig | None = None,
    precision: str | None = None, precisions: tuple[str, ...] | None = None,
) -> tuple[str | None, dict[str, Any], str | None]:
    """:func:`checkpoint_defaults` for a command that takes the precision apart from the run's
    settings: (the precision, the settings with the checkpoint's weight format, the note).
    ``precisions``: those the command takes (a checkpoint precision outside them is noted, not used)."""
    ckpt, note = checkpoint_defaults(shape, mode, given=_given_weights(settings, run, precision))
    if precisions is not None and ckpt.get("precision", precisions[0]) not in precisions:
        note = (f"the checkpoint's weights are {ckpt['precision']} (its quantization_config), which this command "
                "does not rank: they are counted at its default precision")
        ckpt = {}
    weights = {"weight_format": ckpt["weight_format"]} if "weight_format" in ckpt else {}
    return ckpt.get("precision", precision), {**settings, **weights}, note

def _given_weights(settings: dict[str, Any], run: RunConfig | None = None, precision: str | None = None) -> bool:
    """The run names its own precision or weight format (settings, a base RunConfig, or an argument)."""
    named = {"precision", "weight_format"}
    return (precision is not None or any(settings.get(k) is not None for k in named)
            or (run is not None and bool(named & run.model_fields_set)))

def _run(run: RunConfig | None, settings: dict[str, Any]) -> RunConfig:
    """A RunConfig from ``run`` with ``settings`` (RunConfig fields) applied over it."""
    base = run.model_dump() if run is not None else {}
    return make_run_config(**{**base, **settings})

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

class NodeChoice(BaseModel):
    """The GPU, GPUs per node and link topology of a run: from a named system or from the
    GPU and count given (the topology then follows the GPU's defaults inside the engine)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, defer_build=True)

    gpu: str
    gpus: int
    #: the system named, if any (data/systems.yaml)
    system: Any = None
    #: a named system's topology with the overrides applied; None: the engine's defaults
    topology: Any = None
    #: a cloud system's on-demand price per GPU-hour, when the caller gave none
    price_per_gpu_hour: float | None = None
    notes: tuple[str, ...] = ()


def resolve_node(
    system: str | None, gpu: str | None, gpus: int | None, *, catalog: Catalog, interconnect: str | None = None,
    nics_per_node: int | None = None, nodes: int = 1, price_per_hour: float | None = None,
    cache_dir: Path | None = None,
) -> NodeChoice:
    """``system`` sets the GPU, GPUs per node (unless ``gpus`` is given, up to the system's
    count), the fabric and NICs, and for a cloud instance the price; else ``gpu`` and ``gpus``."""
    if system is None:
        if gpu is None:
            raise UsageError("name a GPU or a system", hint="e.g. H100 SXM, or a system from 'gpusizer systems list'",
                             field="gpu")
        return NodeChoice(gpu=gpu, gpus=gpus or 1, price_per_gpu_hour=price_per_hour)
    from gpusizer.hardware.systems import load_systems
    from gpusizer.performance.topology import node_topology

    sys_ = load_systems(cache_dir=cache_dir).resolve(system)
    if gpu is not None and catalog.resolve(gpu).gpu.id != sys_.gpu:
        raise UsageError(f"system {sys_.id} holds {sys_.gpu}, not {gpu}", hint="give the system or the GPU",
                         field="gpu")
    count = gpus or sys_.gpus
    g = catalog.resolve(sys_.gpu).gpu
    topo = node_topology(g, count, nodes, system=sys_, interconnect=interconnect, nics_per_node=nics_per_node,
                         catalog=catalog)
    notes = [f"system {sys_.id}: {count} x {sys_.gpu}; {topo.describe()}"]
    price = price_per_hour
    if price is None and sys_.usd_per_gpu_hour is not None and sys_.price is not None:
        price = sys_.usd_per_gpu_hour
        where = sys_.price.region or "region not given"
        notes.append(f"price: ${price:,.2f} per GPU-hour, {sys_.id}'s on-demand price ({where}, {sys_.price.date})")
    return NodeChoice(gpu=sys_.gpu, gpus=count, system=sys_, topology=topo, price_per_gpu_hour=price,
                      notes=tuple(notes))


def perf_data(cat: Catalog, cache_dir: Path | None) -> dict[str, Any]:
    """The performance model's data files (estimate_performance's ``calibration``,
    ``interconnects``, ``systems`` and ``catalog``), loaded through the cache, with the catalog
    in use: without them the engine parses the bundled YAML afresh on every run."""
    from gpusizer.hardware.systems import load_systems
    from gpusizer.performance.calibration import load_calibration, load_interconnects

    return {"calibration": load_calibration(cache_dir=cache_dir), "interconnects": load_interconnects(cache_dir),
            "systems": load_systems(cache_dir=cache_dir), "catalog": cat}
