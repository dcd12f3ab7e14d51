"""The catalog list, catalog show and compare commands."""

from __future__ import annotations

from typing import Annotated

import typer

from gpusizer.cli.options import CatalogOpt, JsonOpt, _console, _load_catalog, _warn
from gpusizer.cli.root import app, catalog_app, guarded
from gpusizer.errors import UsageError

# --------------------------------------------------------------------------
# catalog


@catalog_app.command("list")
@guarded
def catalog_list(
    ctx: typer.Context,
    segment: Annotated[
        str | None, typer.Option(help="datacenter, workstation or consumer.", show_default=False)
    ] = None,
    arch: Annotated[str | None, typer.Option(help="Architecture, e.g. ampere, hopper.")] = None,
    min_memory: Annotated[float | None, typer.Option(help="Minimum memory in GiB.", min=0)] = None,
    ecc: Annotated[bool | None, typer.Option("--ecc/--no-ecc", help="Only GPUs with (or without) ECC.")] = None,
    rdma: Annotated[bool | None, typer.Option("--rdma/--no-rdma", help="Only GPUs with (or without) GPUDirect RDMA.")] = None,
    nvlink: Annotated[bool | None, typer.Option("--nvlink/--no-nvlink", help="Only GPUs with (or without) NVLink.")] = None,
    sort: Annotated[str | None, typer.Option(help="Sort by a numeric field, e.g. fp64_tflops, bandwidth_gb_s.")] = None,
    ascending: Annotated[bool, typer.Option("--ascending", help="Sort smallest first.")] = False,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List catalog GPUs, with filters and sorting."""
    from gpusizer.hardware.browse import CatalogFilter, filter_gpus
    from gpusizer.hardware.catalog import ARCH_ORDER

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
        from gpusizer.render.common import emit_json, envelope

        inputs = {**spec.model_dump(mode="json"), "catalog_files": list(cat.files)}
        emit_json(envelope("catalog list", inputs, [g.model_dump(mode="json") for g in gpus]))
        return
    from gpusizer.render.catalog import catalog_table

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
        from gpusizer.render.common import emit_json, envelope

        emit_json(envelope("catalog show", {"gpu": gpu, "resolved_id": res.gpu.id}, res.gpu.model_dump(mode="json"), notes))
        return
    _warn(ctx, notes)
    from gpusizer.render.catalog import gpu_detail

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
    from gpusizer.hardware.browse import compare

    cat = _load_catalog(catalog)
    result = compare(cat.resolve_many(gpus))
    if json_out:
        from gpusizer.render.common import emit_json, envelope

        results = {
            "gpus": [g.id for g in result.gpus],
            "rows": [r.model_dump(mode="json") for r in result.rows],
            "facts": [{"field": f, "label": label, "values": list(v)} for f, label, v in result.facts],
        }
        emit_json(envelope("compare", {"gpus": gpus}, results, list(result.notes)))
        return
    _warn(ctx, list(result.notes))
    from gpusizer.render.catalog import comparison_table

    _console(ctx).print(comparison_table(result))
