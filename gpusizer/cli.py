"""The command line: parse options, call the engine, hand the result to a renderer.

No formula lives here. Every command takes ``--json``. Errors raised by the
engine are turned into one ``Error:`` line on stderr and a documented exit code
by the root group below.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from gpusizer import __version__
from gpusizer.errors import ExitCode, GpusizerError, UsageError


_STATE = {"debug": False}


def guarded(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn GpusizerError (and anything unexpected) into one line and an exit code.

    Every command is wrapped in this, so CliRunner and the console script
    behave the same. Tracebacks only with ``--debug``.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except GpusizerError as exc:
            _print_error(exc.message, exc.hint)
            raise typer.Exit(int(exc.exit_code)) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            # the reader went away (`gpusizer ... | head`): stop quietly
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, ValueError):
                pass
            raise typer.Exit(0) from None
        except Exception as exc:  # noqa: BLE001 - the one place that catches everything
            if _STATE["debug"] or type(exc).__module__.startswith("typer"):
                raise
            _print_error(f"internal error: {type(exc).__name__}: {exc}", "rerun with --debug for the traceback")
            raise typer.Exit(int(ExitCode.INTERNAL)) from None

    return wrapper


def _print_error(message: str, hint: str | None) -> None:
    lines = message.splitlines() or [message]
    for line in lines:
        sys.stderr.write(f"Error: {line}\n")
    if hint:
        sys.stderr.write(f"Hint: {hint}\n")


app = typer.Typer(
    help="Which GPU to use and how much of it, with numbers you can check.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
catalog_app = typer.Typer(help="Browse the GPU catalog.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(catalog_app, name="catalog")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpusizer {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for internal errors.")] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help="Never use colour (NO_COLOR=1 does the same).")] = False,
) -> None:
    _STATE["debug"] = debug
    ctx.obj = {"debug": debug, "no_color": no_color}


# --------------------------------------------------------------------------
# shared options

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (see README, 'JSON output').")]
CatalogOpt = Annotated[
    Optional[list[Path]],
    typer.Option(
        "--catalog",
        help="Extra catalog YAML file; repeatable. Adds GPUs or overrides fields by id. "
        "GPUSIZER_CATALOG holds more, separated by the path separator.",
    ),
]


def _catalog_files(cli_files: list[Path] | None) -> list[str]:
    env = os.environ.get("GPUSIZER_CATALOG", "")
    from_env = [p for p in env.split(os.pathsep) if p.strip()]
    return [*from_env, *(str(p) for p in (cli_files or []))]


def _cache_dir() -> Path | None:
    """Where parsed YAML is cached: $GPUSIZER_CACHE_DIR, else the XDG cache folder.

    GPUSIZER_NO_CACHE=1 turns the cache off.
    """
    if os.environ.get("GPUSIZER_NO_CACHE"):
        return None
    explicit = os.environ.get("GPUSIZER_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpusizer"


def _load_catalog(cli_files: list[Path] | None) -> Any:
    from gpusizer.catalog import load_catalog

    return load_catalog(_catalog_files(cli_files), cache_dir=_cache_dir())


def _console(ctx: typer.Context, *, stderr: bool = False) -> Any:
    from gpusizer.render import make_console

    return make_console(stderr=stderr, no_color=bool((ctx.obj or {}).get("no_color")))


def _warn(ctx: typer.Context, notes: list[str] | tuple[str, ...]) -> None:
    """Notes for people go to stderr, so stdout stays data."""
    if notes:
        console = _console(ctx, stderr=True)
        for note in notes:
            console.print(f"Note: {note}", markup=False, soft_wrap=True)


# --------------------------------------------------------------------------
# catalog


@catalog_app.command("list")
@guarded
def catalog_list(
    ctx: typer.Context,
    segment: Annotated[
        Optional[str], typer.Option(help="datacenter, workstation or consumer.", show_default=False)
    ] = None,
    arch: Annotated[Optional[str], typer.Option(help="Architecture, e.g. ampere, hopper.")] = None,
    min_memory: Annotated[Optional[float], typer.Option(help="Minimum memory in GiB.", min=0)] = None,
    ecc: Annotated[Optional[bool], typer.Option("--ecc/--no-ecc", help="Only GPUs with (or without) ECC.")] = None,
    rdma: Annotated[Optional[bool], typer.Option("--rdma/--no-rdma", help="Only GPUs with (or without) GPUDirect RDMA.")] = None,
    nvlink: Annotated[Optional[bool], typer.Option("--nvlink/--no-nvlink", help="Only GPUs with (or without) NVLink.")] = None,
    sort: Annotated[Optional[str], typer.Option(help="Sort by a numeric field, e.g. fp64_tflops, bandwidth_gb_s.")] = None,
    ascending: Annotated[bool, typer.Option("--ascending", help="Sort smallest first.")] = False,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List catalog GPUs, with filters and sorting."""
    from gpusizer.browse import CatalogFilter, filter_gpus

    from gpusizer.catalog import ARCH_ORDER

    if segment is not None:
        segment = segment.lower()
        if segment not in ("datacenter", "workstation", "consumer"):
            raise UsageError(f"--segment: {segment!r} is not one of datacenter, workstation, consumer")
    if arch is not None:
        arch = arch.lower()
        if arch not in ARCH_ORDER:
            import difflib

            close = difflib.get_close_matches(arch, ARCH_ORDER, n=2)
            raise UsageError(
                f"--arch: {arch!r} is not an architecture in the catalog",
                hint=f"did you mean {', '.join(close)}?" if close else f"one of: {', '.join(ARCH_ORDER)}",
            )
    cat = _load_catalog(catalog)
    spec = CatalogFilter(
        segment=segment, architecture=arch, min_memory_gib=min_memory, ecc=ecc, rdma=rdma, nvlink=nvlink,
        sort=sort, descending=not ascending,
    )
    gpus = filter_gpus(cat.gpus, spec)
    if json_out:
        from gpusizer.render import emit_json, envelope

        inputs = {**spec.model_dump(mode="json"), "catalog_files": list(cat.files)}
        emit_json(envelope("catalog list", inputs, [g.model_dump(mode="json") for g in gpus]))
        return
    from gpusizer.render import catalog_table

    _console(ctx).print(catalog_table(gpus, title=f"{len(gpus)} of {len(cat.gpus)} GPUs"))


@catalog_app.command("show")
@guarded
def catalog_show(
    ctx: typer.Context,
    gpu: Annotated[str, typer.Argument(help="GPU id, alias or name, e.g. v100, 'RTX 3090'.")],
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one catalog entry with its sources."""
    cat = _load_catalog(catalog)
    res = cat.resolve(gpu)
    notes = [res.note] if res.note else []
    if json_out:
        from gpusizer.render import emit_json, envelope

        emit_json(envelope("catalog show", {"gpu": gpu, "resolved_id": res.gpu.id}, res.gpu.model_dump(mode="json"), notes))
        return
    _warn(ctx, notes)
    from gpusizer.render import gpu_detail

    _console(ctx).print(gpu_detail(res.gpu))


@app.command("compare")
@guarded
def compare_cmd(
    ctx: typer.Context,
    gpus: Annotated[list[str], typer.Argument(help="Two or more GPU names; ratios are against the first.")],
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Put GPUs side by side, with ratios against the first."""
    from gpusizer.browse import compare

    cat = _load_catalog(catalog)
    result = compare(cat.resolve_many(gpus))
    if json_out:
        from gpusizer.render import emit_json, envelope

        results = {
            "gpus": [g.id for g in result.gpus],
            "rows": [r.model_dump(mode="json") for r in result.rows],
            "facts": [{"field": f, "label": label, "values": list(v)} for f, label, v in result.facts],
        }
        emit_json(envelope("compare", {"gpus": gpus}, results, list(result.notes)))
        return
    _warn(ctx, list(result.notes))
    from gpusizer.render import comparison_table

    _console(ctx).print(comparison_table(result))


# --------------------------------------------------------------------------
# shared model and run options (fit-model, recommend, estimate)

from gpusizer import choices

PrecisionOpt = choices.choice_enum("PrecisionOpt", choices.PRECISIONS)
OptimizerOpt = choices.choice_enum("OptimizerOpt", choices.OPTIMIZERS)
StrategyOpt = choices.choice_enum("StrategyOpt", choices.STRATEGIES)
HeadOpt = choices.choice_enum("HeadOpt", choices.HEADS)


ParamsOpt = Annotated[Optional[str], typer.Option("--params", help="Parameter count: 60M, 1.3B, 7e9, 175B or 60000000.")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", help="A model from the zoo (gpusizer models), e.g. resnet50, llama-2-7b.")]
HfConfigOpt = Annotated[Optional[Path], typer.Option("--hf-config", help="A local Hugging Face config.json (no network).")]
BatchOpt = Annotated[Optional[int], typer.Option("--batch", min=1, help="Batch per GPU (per model replica with tp). Default 1.")]
SeqOpt = Annotated[Optional[int], typer.Option("--seq-len", min=1, help="Sequence length in tokens (transformers, RNNs).")]
FlashOpt = Annotated[bool, typer.Option(
    "--flash-attention", help="Fused attention (FlashAttention, PyTorch SDPA): no s x s score matrix is kept, and "
                              "causal models compute half of it.")]
ImageOpt = Annotated[Optional[int], typer.Option("--image-size", min=8, help="Image side in pixels (CNNs).")]


def _model_shape(params: str | None, model: str | None, hf_config: Path | None) -> Any:
    from gpusizer.memory import model_shape_from_params, model_shape_from_zoo

    given = [n for n, v in (("--params", params), ("--model", model), ("--hf-config", hf_config)) if v is not None]
    if len(given) != 1:
        raise UsageError(
            "give exactly one of --params, --model or --hf-config" + (f" (got {', '.join(given)})" if given else ""),
            hint="e.g. --model resnet50, --params 60M, --hf-config ./config.json",
        )
    if params is not None:
        from gpusizer.units import parse_count

        try:
            return model_shape_from_params(parse_count(params, what="--params"))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if model is not None:
        from gpusizer.zoo import load_zoo

        return model_shape_from_zoo(load_zoo(cache_dir=_cache_dir()).resolve(model))
    import json

    from gpusizer.errors import DataFileError
    from gpusizer.hfconfig import model_from_hf_config

    try:
        doc = json.loads(Path(hf_config).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFileError(f"{hf_config}: file not found") from None
    except (OSError, ValueError) as exc:
        raise DataFileError(f"{hf_config}: not a readable JSON file: {exc}") from None
    return model_shape_from_zoo(model_from_hf_config(doc, str(hf_config)))


def _run_config(**kwargs: Any) -> Any:
    from gpusizer.memory import make_run_config

    return make_run_config(**kwargs)


def _parse_overhead(text: str | None) -> int | None:
    if text is None:
        return None
    from gpusizer.units import parse_size

    try:
        return parse_size(text, what="--overhead", default_unit="mib")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _local_report(cli_files: list[Path] | None) -> Any:
    """Probe this machine (the only path that loads NVML) and match to the catalog."""
    from gpusizer.nvml import read_host
    from gpusizer.probe import match_catalog

    return match_catalog(read_host(), _load_catalog(cli_files))


# --------------------------------------------------------------------------
# fit-model


@app.command("fit-model")
@guarded
def fit_model_cmd(
    ctx: typer.Context,
    params: ParamsOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    batch: BatchOpt = None,
    seq_len: SeqOpt = None,
    image_size: ImageOpt = None,
    target_len: Annotated[Optional[int], typer.Option("--target-len", min=1, help="Encoder-decoder models: decoder length (default --seq-len).")] = None,
    train: Annotated[bool, typer.Option("--train/--inference", help="Training step (default) or inference.")] = True,
    precision: Annotated[
        Optional[PrecisionOpt],
        typer.Option(help="fp64, fp32; fp16/bf16 = pure 16-bit (optimizer state too); mixed = AMP; int8/int4 = "
                     "weight-only quantisation for inference. Default: mixed for training, fp16 for inference."),
    ] = None,
    optimizer: Annotated[OptimizerOpt, typer.Option(help="Optimizer (training).")] = OptimizerOpt.adamw,
    checkpointing: Annotated[bool, typer.Option("--checkpointing", help="Activation recomputation.")] = False,
    flash_attention: FlashOpt = False,
    head: Annotated[HeadOpt, typer.Option(help="Transformer output: lm = vocabulary logits for every token; classifier = a few classes.")] = HeadOpt.lm,
    grad_accumulation: Annotated[int, typer.Option(min=1, help="Micro-batches per optimizer step; >1 keeps gradients alive through backward.")] = 1,
    gpus: Annotated[int, typer.Option(min=1, help="GPUs the run is spread over.")] = 1,
    strategy: Annotated[StrategyOpt, typer.Option(help="ddp replicates; zero1/2/3, fsdp and tp shard.")] = StrategyOpt.ddp,
    gpu: Annotated[Optional[list[str]], typer.Option("--gpu", help="Check these GPUs (repeatable). Default: the whole catalog.")] = None,
    local: Annotated[bool, typer.Option("--local", help="Check this machine's GPUs and their free memory (NVML).")] = False,
    overhead: Annotated[Optional[str], typer.Option(help="Fixed per-GPU overhead (CUDA context), e.g. 800MiB. Default 500 MiB.")] = None,
    method: Annotated[str, typer.Option(help="physics (default) or rule-of-thumb: (MB - 400) / 2 x 1024^2 / 4 params.")] = "physics",
    top: Annotated[Optional[int], typer.Option(min=1, help="Show at most this many GPUs in the table.")] = None,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Estimate training or inference memory and check which GPUs it fits on."""
    from gpusizer import fit

    if method not in ("physics", "rule-of-thumb"):
        raise UsageError(f"--method: {method!r} is not physics or rule-of-thumb")
    shape = _model_shape(params, model, hf_config)
    prec = precision.value if precision else ("mixed" if train else "fp16")
    cfg = _run_config(
        mode="train" if train else "inference", precision=prec, optimizer=optimizer.value, batch=batch,
        seq_len=seq_len, image_size=image_size, target_len=target_len, checkpointing=checkpointing,
        flash_attention=flash_attention, head=head.value, persistent_grads=grad_accumulation > 1, gpus=gpus,
        strategy=strategy.value, context_bytes=_parse_overhead(overhead),
    )
    notes: list[str] = []
    if local:
        if gpu:
            raise UsageError("--local and --gpu cannot be combined")
        caps = fit.capacities_from_probe(_local_report(catalog))
    else:
        cat = _load_catalog(catalog)
        if gpu:
            resolved = cat.resolve_many(gpu)
            notes += [r.note for r in resolved if r.note]
            caps = fit.capacities_from_catalog([r.gpu for r in resolved])
        else:
            caps = fit.capacities_from_catalog(cat.gpus)
    runner = fit.fit_rule_of_thumb if method == "rule-of-thumb" else fit.fit_model
    report = runner(shape, cfg, caps)
    notes += list(report.notes)
    inputs = {
        "model": shape.name, "params": shape.params, "method": method, **cfg.model_dump(mode="json"),
        "gpus_checked": [c.label for c in caps], "local": local,
    }
    if json_out:
        from gpusizer.render import emit_json, envelope
        from gpusizer.render_fit import fit_json

        emit_json(envelope("fit-model", inputs, fit_json(report), notes))
    else:
        from gpusizer.render_fit import breakdown_table, gpu_table

        _warn(ctx, notes)
        console = _console(ctx)
        console.print(breakdown_table(report))
        console.print(gpu_table(report, limit=top))
        console.print(f"Verdict: {report.verdict}", markup=False)
    if not report.fitting:
        raise typer.Exit(int(ExitCode.NOTHING_FITS))


# --------------------------------------------------------------------------
# models and probe


@app.command("models")
@guarded
def models_cmd(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the model zoo."""
    from gpusizer.zoo import load_zoo

    zoo = load_zoo(cache_dir=_cache_dir())
    if json_out:
        from gpusizer.render import emit_json, envelope

        emit_json(envelope("models", {}, [m.model_dump(mode="json") for m in zoo.models]))
        return
    from rich.table import Table

    from gpusizer.units import format_count

    table = Table(title="Model zoo (data/models.yaml)", title_justify="left")
    for col in ("id", "kind", "params", "layers", "hidden", "heads/kv", "vocab"):
        table.add_column(col, justify="left" if col in ("id", "kind") else "right")
    for m in zoo.models:
        heads = f"{m.heads}/{m.n_kv_heads}" if m.heads else "n/a"
        table.add_row(m.id, m.kind, format_count(m.params), str(m.layers or "n/a"), str(m.hidden or "n/a"), heads,
                      str(m.vocab or "n/a"))
    _console(ctx).print(table)


@app.command("probe")
@guarded
def probe_cmd(
    ctx: typer.Context,
    emit_catalog: Annotated[bool, typer.Option("--emit-catalog", help="Print a starter catalog YAML entry for each GPU.")] = False,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Read this machine's NVIDIA GPUs through NVML and match them to the catalog."""
    report = _local_report(catalog)
    if emit_catalog:
        from gpusizer.probe import starter_catalog_yaml

        sys.stdout.write(starter_catalog_yaml(d.device for d in report.devices))
        return
    from gpusizer.render_probe import probe_json, probe_renderables

    if json_out:
        from gpusizer.render import emit_json, envelope

        emit_json(envelope("probe", {"catalog_files": _catalog_files(catalog)}, probe_json(report)))
        return
    console = _console(ctx)
    for renderable in probe_renderables(report):
        console.print(renderable)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="gpusizer")


# Commands that live in their own modules register themselves on `app` when imported.
import gpusizer.cli_estimate  # noqa: E402,F401
import gpusizer.cli_recommend  # noqa: E402,F401
