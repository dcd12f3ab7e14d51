"""The models and probe commands."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpusizer.cli.options import (
    CatalogOpt,
    JsonOpt,
    _cache_dir,
    _catalog_files,
    _console,
    _local_report,
)
from gpusizer.cli.root import app, guarded

# --------------------------------------------------------------------------
# models and probe


@app.command("models")
@guarded
def models_cmd(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the model zoo."""
    from gpusizer.models.zoo import load_zoo

    zoo = load_zoo(cache_dir=_cache_dir())
    if json_out:
        from gpusizer.render.common import emit_json, envelope

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
        from gpusizer.hardware.probe import starter_catalog_yaml

        sys.stdout.write(starter_catalog_yaml(d.device for d in report.devices))
        return
    from gpusizer.render.probe import probe_json, probe_renderables

    if json_out:
        from gpusizer.render.common import emit_json, envelope

        emit_json(envelope("probe", {"catalog_files": _catalog_files(catalog)}, probe_json(report)))
        return
    console = _console(ctx)
    for renderable in probe_renderables(report):
        console.print(renderable)
