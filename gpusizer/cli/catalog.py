"""The catalog list, catalog show and compare commands."""

from __future__ import annotations

from typing import Annotated

import typer

from gpusizer.cli.options import (
    CONSTRAINTS,
    MODEL,
    OUTPUT,
    CatalogOpt,
    JsonOpt,
    _cache_dir,
    _load_catalog,
    _show,
    complete_gpu,
    complete_model,
    examples,
    real,
)
from gpusizer.cli.root import command_app, guarded

catalog_app = command_app(help="Browse the GPU catalog.", no_args_is_help=True, epilog=examples(
    "gpusizer catalog list --vendor nvidia --min-memory 40",
    "gpusizer catalog show h100",
))
compare_app = command_app()

# --------------------------------------------------------------------------
# catalog


@catalog_app.command("list", epilog=examples(
    "gpusizer catalog list --segment datacenter --sort fp64_tflops",
    "gpusizer catalog list --min-memory 80 --nvlink --json",
))
@guarded
def catalog_list(
    ctx: typer.Context,
    segment: Annotated[
        str | None, typer.Option(metavar="SEGMENT", rich_help_panel=CONSTRAINTS, help="datacenter, workstation or consumer.", show_default=False)
    ] = None,
    arch: Annotated[str | None, typer.Option(metavar="ARCH", rich_help_panel=CONSTRAINTS, help="Architecture, e.g. ampere, hopper.")] = None,
    vendor: Annotated[str | None, typer.Option(metavar="VENDOR", rich_help_panel=CONSTRAINTS, help="nvidia, amd or intel (default: all).", show_default=False)] = None,
    min_memory: Annotated[float | None, typer.Option(metavar="GIB", rich_help_panel=CONSTRAINTS, help="Minimum memory in GiB.", **real(0))] = None,
    ecc: Annotated[bool | None, typer.Option(
        "--ecc/--no-ecc", rich_help_panel=CONSTRAINTS, help="Only GPUs whose ECC can be on (always, or a driver setting), or only those without.",
    )] = None,
    rdma: Annotated[bool | None, typer.Option("--rdma/--no-rdma", rich_help_panel=CONSTRAINTS, help="Only GPUs with (or without) GPUDirect RDMA.")] = None,
    nvlink: Annotated[bool | None, typer.Option("--nvlink/--no-nvlink", rich_help_panel=CONSTRAINTS, help="Only GPUs with (or without) NVLink.")] = None,
    sort: Annotated[str | None, typer.Option(metavar="FIELD", rich_help_panel=OUTPUT, help="Sort by a numeric field, e.g. fp64_tflops, bandwidth_gb_s.")] = None,
    ascending: Annotated[bool, typer.Option("--ascending", rich_help_panel=OUTPUT, help="Sort smallest first.")] = False,
    show_provenance: Annotated[bool, typer.Option(
        "--show-provenance", rich_help_panel=OUTPUT, help="Mark derived values (*) and unknown Tensor Core rates (?); JSON always has 'derived'.",
    )] = False,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List catalog GPUs, with filters and sorting."""
    from gpusizer import api

    result = api.list_gpus(segment=segment, arch=arch, vendor=vendor, min_memory_gib=min_memory, ecc=ecc, rdma=rdma,
                           nvlink=nvlink, sort=sort, descending=not ascending, catalog=_load_catalog(catalog))

    def table(width: int) -> object:
        from gpusizer.render.catalog import catalog_table

        return catalog_table(result.results, title=f"{len(result.results)} of {result.catalog_size} GPUs",
                             provenance=show_provenance, width=width, sort=sort)

    _show(ctx, result, json_out, table)


@catalog_app.command("show", epilog=examples(
    "gpusizer catalog show v100",
    "gpusizer catalog show 'RTX 3090' --json",
))
@guarded
def catalog_show(
    ctx: typer.Context,
    gpu: Annotated[str, typer.Argument(metavar="GPU", autocompletion=complete_gpu, help="GPU id, alias or name, e.g. v100, 'RTX 3090'.")],
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one catalog entry with its sources."""
    from gpusizer import api

    result = api.show_gpu(gpu, catalog=_load_catalog(catalog), cache_dir=_cache_dir())

    def table(width: int) -> object:
        from gpusizer.render.catalog import gpu_detail

        return gpu_detail(result.results, result.formulas, width=width)

    _show(ctx, result, json_out, table)


@compare_app.command("compare", epilog=examples(
    "gpusizer compare h100 a100",
    "gpusizer compare 'RTX 4090' 'RTX 3090' a100",
    "gpusizer compare rtx-4090 rtx-5090 --workload cnn",
))
@guarded
def compare_cmd(
    ctx: typer.Context,
    gpus: Annotated[list[str], typer.Argument(metavar="GPU", autocompletion=complete_gpu, help="Two or more GPU names; ratios are against the first.")],
    workload: Annotated[str | None, typer.Option(
        "--workload", metavar="WORKLOAD", rich_help_panel=MODEL,
        help="Add each GPU's modelled speed for this workload (its reference model and settings, "
             "as recommend's speed column), e.g. cnn, llm-train.")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", metavar="MODEL", rich_help_panel=MODEL, autocompletion=complete_model,
        help="Add each GPU's modelled speed for this zoo model (trained, as estimate does by default; "
             "with --workload, run as the workload runs it).")] = None,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Put GPUs side by side, with ratios against the first."""
    from gpusizer import api

    result = api.compare(gpus, workload=workload, model=model, catalog=_load_catalog(catalog),
                         cache_dir=_cache_dir())

    def table(width: int) -> object:
        from gpusizer.render.catalog import comparison_table

        return comparison_table(result.comparison, width=width)

    _show(ctx, result, json_out, table)
