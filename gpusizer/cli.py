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
            console.print(f"Note: {note}", markup=False)


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

    if segment is not None and segment not in ("datacenter", "workstation", "consumer"):
        raise UsageError(f"--segment: {segment!r} is not one of datacenter, workstation, consumer")
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


def main() -> None:
    """Console-script entry point."""
    app(prog_name="gpusizer")
