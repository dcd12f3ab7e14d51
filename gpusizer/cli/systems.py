"""The systems list and systems show commands."""

from __future__ import annotations

from typing import Annotated

import typer

from gpusizer.cli.options import (
    CONSTRAINTS,
    CatalogOpt,
    JsonOpt,
    _cache_dir,
    _load_catalog,
    _show,
    complete_gpu,
    complete_system,
    examples,
)
from gpusizer.cli.root import command_app, guarded

systems_app = command_app(help="Browse GPU systems: on-prem nodes and cloud instances, with prices.",
                          no_args_is_help=True, epilog=examples(
                              "gpusizer systems list --provider aws",
                              "gpusizer systems show dgx-h100",
                          ))


@systems_app.command("list", epilog=examples(
    "gpusizer systems list --provider aws",
    "gpusizer systems list --gpu h100 --kind cloud",
))
@guarded
def systems_list(
    ctx: typer.Context,
    gpu: Annotated[str | None, typer.Option(metavar="GPU", rich_help_panel=CONSTRAINTS, autocompletion=complete_gpu, help="Only systems with this GPU (id, alias or name).",
                                            show_default=False)] = None,
    provider: Annotated[str | None, typer.Option(metavar="PROVIDER", rich_help_panel=CONSTRAINTS, help="aws, gcp, azure, lambda, runpod or coreweave.",
                                                 show_default=False)] = None,
    kind: Annotated[str | None, typer.Option(metavar="KIND", rich_help_panel=CONSTRAINTS, help="cloud or on-prem.", show_default=False)] = None,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List GPU systems, cheapest on-demand GPU-hour first."""
    from gpusizer import api

    result = api.list_systems(gpu=gpu, provider=provider, kind=kind, catalog=_load_catalog(catalog),
                               cache_dir=_cache_dir())

    def table(width: int) -> object:
        from gpusizer.render.systems import systems_table

        return systems_table(result.results, width=width)

    _show(ctx, result, json_out, table)


@systems_app.command("show", epilog=examples(
    "gpusizer systems show dgx-h100",
    "gpusizer systems show p5.48xlarge --json",
))
@guarded
def systems_show(
    ctx: typer.Context,
    system: Annotated[str, typer.Argument(metavar="SYSTEM", autocompletion=complete_system, help="System id, name or instance type, e.g. p5.48xlarge, dgx-h100.")],
    json_out: JsonOpt = False,
) -> None:
    """Show one system with its sources."""
    from gpusizer import api

    result = api.show_system(system, cache_dir=_cache_dir())

    def table(width: int) -> object:
        from gpusizer.render.systems import system_detail

        return system_detail(result.results, width=width)

    _show(ctx, result, json_out, table)
