"""The models and probe commands."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpusizer.cli.options import (
    OUTPUT,
    CatalogOpt,
    JsonOpt,
    _cache_dir,
    _catalog_files,
    _console,
    _show,
    examples,
)
from gpusizer.cli.root import command_app, guarded

models_app = command_app()
probe_app = command_app()

# --------------------------------------------------------------------------
# models and probe


@models_app.command("models", epilog=examples(
    "gpusizer models",
    "gpusizer models --json",
))
@guarded
def models_cmd(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the model zoo."""
    from gpusizer import api

    result = api.models(cache_dir=_cache_dir())

    def table(width: int) -> object:
        from gpusizer.render.catalog import models_table

        return models_table(result.results, width=width)

    _show(ctx, result, json_out, table)


@probe_app.command("probe", epilog=examples(
    "gpusizer probe   # exit 5 without an NVIDIA driver",
    "gpusizer probe --json   # exit 5 without an NVIDIA driver",
))
@guarded
def probe_cmd(
    ctx: typer.Context,
    emit_catalog: Annotated[bool, typer.Option("--emit-catalog", rich_help_panel=OUTPUT, help="Print a starter catalog YAML entry for each GPU.")] = False,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Read this machine's NVIDIA GPUs through NVML and match them to the catalog."""
    from gpusizer import api

    result = api.probe(catalog_files=_catalog_files(catalog), cache_dir=_cache_dir())
    if emit_catalog:
        from gpusizer.hardware.probe import starter_catalog_yaml

        sys.stdout.write(starter_catalog_yaml(d.device for d in result.report.devices))
        return
    if json_out:
        from gpusizer.render.common import emit_json

        emit_json(result.document())
        return
    from gpusizer.render.probe import probe_renderables

    console = _console(ctx)
    for renderable in probe_renderables(result.report):
        console.print(renderable)
