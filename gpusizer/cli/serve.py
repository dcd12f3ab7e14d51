"""The serve command: how many sequences a deployment holds, and the fewest GPUs for N users."""

from __future__ import annotations

from typing import Annotated

import typer

from gpusizer.choices import MAX_USERS
from gpusizer.cli.options import (
    CONSTRAINTS,
    HARDWARE,
    OUTPUT,
    RUN,
    AttentionOpt,
    CatalogOpt,
    HfConfigOpt,
    JsonOpt,
    ModelOpt,
    ParamsOpt,
    VendorOpt,
    _cache_dir,
    _console,
    _load_catalog,
    _warn,
    complete_gpu,
    examples,
    real,
)
from gpusizer.cli.root import command_app, guarded
from gpusizer.cli.run_options import KvCacheOpt, WeightsOpt, precision_help
from gpusizer.domain.precision import ALL_PRECISIONS, PrecisionName
from gpusizer.errors import ExitCode
from gpusizer.hardware.vendors import DEFAULT_VENDOR

serve_app = command_app()

ContextOpt = Annotated[int | None, typer.Option(
    "--context", min=1, max=1 << 24, metavar="TOKENS", rich_help_panel=RUN,
    help="Tokens per sequence the cache must hold: prompt plus generated tokens. Default: 4,096, or the "
         "model's own context where that is shorter.")]
UsersOpt = Annotated[int | None, typer.Option(
    "--users", min=1, max=MAX_USERS, metavar="N", rich_help_panel=CONSTRAINTS,
    help="Concurrent sequences to serve; the answer is the fewest GPUs (tensor-parallel) that hold them.")]
TpOpt = Annotated[int | None, typer.Option(
    "--tp", min=1, max=1024, metavar="N", rich_help_panel=HARDWARE, help="Fix the tensor-parallel size instead of searching for the fewest.")]
ServeGpuOpt = Annotated[list[str] | None, typer.Option(
    "--gpu", metavar="GPU", rich_help_panel=HARDWARE, autocompletion=complete_gpu, help="GPUs to check (repeatable). Default: the whole catalog.")]
ServePrecisionOpt = Annotated[PrecisionName | None, typer.Option("--precision", metavar="PRECISION", rich_help_panel=RUN, help=precision_help(
    ALL_PRECISIONS, "Weight format served: "))]
ServeTopOpt = Annotated[int, typer.Option(
    "--top", min=1, max=10_000, metavar="N", rich_help_panel=OUTPUT,
    help="Show the first N GPU types: those that serve, fewest GPUs first; --json lists all.")]
ServeItlOpt = Annotated[float | None, typer.Option(
    "--max-itl-ms", **real(0.001, 1e6), metavar="MS", rich_help_panel=CONSTRAINTS,
    help="With --users: the fewest GPUs, as replicas of one TP size sharing the users, whose inter-token "
         "latency stays within this many ms (the speed of 'gpusizer estimate').")]
UtilizationOpt = Annotated[float, typer.Option(
    "--gpu-memory-utilization", **real(0.05, 1.0), metavar="SHARE", rich_help_panel=HARDWARE,
    help="Share of each GPU's memory the engine may use (vLLM's default 0.9).")]


@serve_app.command("serve", epilog=examples(
    "gpusizer serve --model llama-2-7b --context 4096",
    "gpusizer serve --model llama-2-70b --users 64 --gpu h100",
    "gpusizer serve --model llama-3.1-70b --users 32 --max-itl-ms 50 --gpu h100",
))
@guarded
def serve_cmd(
    ctx: typer.Context,
    params: ParamsOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    context: ContextOpt = None,
    users: UsersOpt = None,
    max_itl_ms: ServeItlOpt = None,
    gpu: ServeGpuOpt = None,
    tp: TpOpt = None,
    precision: ServePrecisionOpt = None,
    kv_cache: KvCacheOpt = "auto",
    weights: WeightsOpt = None,
    gpu_memory_utilization: UtilizationOpt = 0.9,
    attention: AttentionOpt = "fused",
    vendor: VendorOpt = DEFAULT_VENDOR,
    catalog: CatalogOpt = None,
    top: ServeTopOpt = 10,
    json_out: JsonOpt = False,
) -> None:
    """Serving capacity: concurrent sequences per GPU type, and the fewest GPUs for --users."""
    from gpusizer import api

    result = api.serve(
        model, params=params, hf_config=hf_config, context=context, users=users, max_itl_ms=max_itl_ms, gpu=gpu, tp=tp,
        gpu_memory_utilization=gpu_memory_utilization, vendor=vendor, catalog=_load_catalog(catalog),
        cache_dir=_cache_dir(),
        precision=precision, kv_cache=kv_cache,
        attention=attention, weight_format=weights,
    )
    if json_out:
        from gpusizer.render.common import emit_json

        emit_json(result.document())
    else:
        from gpusizer.render.serve import left_out_line, serve_table, serve_verdict

        _warn(ctx, result.notes)
        console = _console(ctx)
        console.print(serve_table(result.results, width=console.width, top=top))
        left_out = left_out_line(result.results, top)
        if left_out:
            console.print(left_out, markup=False)
        console.print(serve_verdict(result.results), markup=False)
    if not result.fits:
        raise typer.Exit(int(ExitCode.NOTHING_FITS))
