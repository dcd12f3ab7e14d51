"""The systems list and systems show commands."""

from __future__ import annotations

from typing import Annotated

import typer

from gpusizer.cli.options import CatalogOpt, JsonOpt, _load_catalog, _show
from gpusizer.cli.root import guarded, systems_app


@systems_app.command("list")
@guarded
def systems_list(
    ctx: typer.Context,
    gpu: Annotated[str | None, typer.Option(help="Only systems with this GPU (id, alias or name).",
                                            show_default=False)] = None,
    provider: Annotated[str | None, typer.Option(help="aws, gcp, azure, lambda, runpod or coreweave.",
                                                 show_default=False)] = None,
    kind: Annotated[str | None, typer.Option(help="cloud or on-prem.", show_default=False)] = None,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List GPU systems, cheapest on-demand GPU-hour first."""
    from gpusizer import api

    result = api.list_systems(gpu=gpu, provider=provider, kind=kind, catalog=_load_catalog(catalog))

    def table(width: int) -> object:
        from gpusizer.render.systems import systems_table

        return systems_table(result.results, width=width)

    _show(ctx, result, json_out, table)


@systems_app.command("show")
@guarded
def systems_show(
    ctx: typer.Context,
    system: Annotated[str, typer.Argument(help="System id, name or instance type, e.g. p5.48xlarge, dgx-h100.")],
    json_out: JsonOpt = False,
) -> None:
    """Show one system with its sources."""
    from gpusizer import api

    result = api.show_system(system)

    def table(width: int) -> object:
        from gpusizer.render.systems import system_detail

        return system_detail(result.results, width=width)

    _show(ctx, result, json_out, table)
