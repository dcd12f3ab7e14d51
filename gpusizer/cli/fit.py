"""The fit-model command."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Literal

import typer

if TYPE_CHECKING:
    from gpusizer.api import FitModelResult

from gpusizer.cli.options import (
    HARDWARE,
    MODEL,
    RUN,
    AttentionOpt,
    BatchOpt,
    CatalogOpt,
    CheckpointOpt,
    DoubleQuantOpt,
    ExactOpt,
    FlashOpt,
    GradAccumOpt,
    HeadOptT,
    HfConfigOpt,
    HfModelOpt,
    ImageOpt,
    InputShapeOpt,
    JsonOpt,
    LogitsOpt,
    LoraOpt,
    LoraTargetsOpt,
    LossOpt,
    ModelOpt,
    OptimizerImplOpt,
    OptimizerOptT,
    ParamsOpt,
    QloraOpt,
    ReportOpt,
    SeqOpt,
    SystemOpt,
    TopOpt,
    TorchModelOpt,
    TrainOpt,
    TrustRemoteCodeOpt,
    _cache_dir,
    _console,
    _load_catalog,
    _local_report,
    _parse_overhead,
    _warn,
    adapter_settings,
    check_report,
    complete_gpu,
    examples,
    report_note,
    write_report,
)
from gpusizer.cli.root import command_app, guarded
from gpusizer.cli.run_options import (
    CpOpt,
    EpOpt,
    KvCacheOpt,
    OffloadOpt,
    OffloadToOpt,
    PpOpt,
    StrategyOptT,
    TpOpt,
    WeightsOpt,
    precision_help,
)
from gpusizer.domain.precision import (
    STORAGE_PRECISIONS,
    StoragePrecision,
)
from gpusizer.errors import ExitCode, UsageError

fit_app = command_app()

# --------------------------------------------------------------------------
# fit-model


FitPrecisionOpt = Annotated[StoragePrecision | None, typer.Option(metavar="PRECISION", rich_help_panel=RUN, help=precision_help(
    STORAGE_PRECISIONS, "How weights, gradients and optimizer state are stored: "))]


@fit_app.command("fit-model", epilog=examples(
    "gpusizer fit-model --params 60M --gpu h100",
    "gpusizer fit-model --model llama-2-7b --inference --gpu rtx-4090 --gpu a100",
    "gpusizer fit-model --model llama-2-70b --gpu rtx-4090  # exit 4: too big",
))
@guarded
def fit_model_cmd(
    ctx: typer.Context,
    params: ParamsOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    hf_model: HfModelOpt = None,
    torch_model: TorchModelOpt = None,
    input_shape: InputShapeOpt = None,
    exact: ExactOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
    batch: BatchOpt = None,
    seq_len: SeqOpt = None,
    image_size: ImageOpt = None,
    target_len: Annotated[int | None, typer.Option("--target-len", min=1, metavar="TOKENS", rich_help_panel=RUN, help="Encoder-decoder models: decoder length (default --seq-len).")] = None,
    train: TrainOpt = True,
    precision: FitPrecisionOpt = None,
    optimizer: OptimizerOptT = "adamw",
    optimizer_impl: OptimizerImplOpt = "fused",
    checkpointing: CheckpointOpt = False,
    flash_attention: FlashOpt = False,
    attention: AttentionOpt = "fused",
    logits: LogitsOpt = "last",
    kv_cache: KvCacheOpt = "auto",
    lora: LoraOpt = None,
    qlora: QloraOpt = False,
    lora_targets: LoraTargetsOpt = "all-linear",
    double_quant: DoubleQuantOpt = True,
    weights: WeightsOpt = None,
    loss: LossOpt = "full",
    offload: OffloadOpt = "none",
    offload_to: OffloadToOpt = "cpu",
    head: HeadOptT = "lm",
    grad_accumulation: GradAccumOpt = 1,
    gpus: Annotated[int | None, typer.Option(
        min=1, metavar="N", rich_help_panel=HARDWARE, help="GPUs the run is spread over. Default 1, or the --system's count.")] = None,
    system: SystemOpt = None,
    strategy: StrategyOptT = "ddp",
    tp: TpOpt = None, pp: PpOpt = 1, cp: CpOpt = 1, ep: EpOpt = 1,  # (the layout: domain.parallelism)
    gpu: Annotated[list[str] | None, typer.Option("--gpu", metavar="GPU", rich_help_panel=HARDWARE, autocompletion=complete_gpu, help="Check these GPUs (repeatable). Default: the whole catalog.")] = None,
    local: Annotated[bool, typer.Option("--local", rich_help_panel=HARDWARE, help="Check this machine's GPUs and their free memory (NVML).")] = False,
    memory: Annotated[list[str] | None, typer.Option("--memory", metavar="SIZE", rich_help_panel=HARDWARE, help=(
        "Check a card known only by its memory, e.g. 6GB or 24GiB (GB = 10^9 bytes, GiB = 2^30; repeatable). "
        "Without --gpu or --local, only these are checked."))] = None,
    overhead: Annotated[str | None, typer.Option(metavar="SIZE", rich_help_panel=HARDWARE, help="Fixed per-GPU overhead (CUDA context), e.g. 800MiB. Default 500 MiB.")] = None,
    method: Annotated[Literal["physics", "rule-of-thumb", "exact"], typer.Option(metavar="METHOD", rich_help_panel=MODEL, help="physics (default), rule-of-thumb: (MB - 400) / 2 x 1024^2 / 4 params, or exact (as --exact).")] = "physics",
    top: TopOpt = None,
    report: ReportOpt = None,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Estimate training or inference memory and check which GPUs it fits on."""
    from gpusizer import api

    check_report(report)

    mode = "train" if train else "inference"
    if local and gpu:
        raise UsageError("--local and --gpu cannot be combined")
    if exact:
        if method == "rule-of-thumb":
            raise UsageError("--exact and --method rule-of-thumb cannot be combined")
        method = "exact"
    with _tracing_status(ctx, enabled=method == "exact" and not json_out) as progress:
        result = api.fit_model(
            model, params=params, hf_config=hf_config, hf_model=hf_model, torch_model=torch_model,
            input_shape=input_shape, trust_remote_code=trust_remote_code, progress=progress, gpu=gpu, system=system,
            probe=_local_report(catalog) if local else None,
            memory=memory or (),
            method=method, catalog=None if local else _load_catalog(catalog), cache_dir=_cache_dir(),
            mode=mode, precision=precision, optimizer=optimizer, optimizer_impl=optimizer_impl,
            batch=batch, seq_len=seq_len, image_size=image_size, target_len=target_len, checkpointing=checkpointing,
            attention="fused" if flash_attention else attention, logits=logits, kv_cache=kv_cache,
            adapter=adapter_settings(lora, qlora, lora_targets, double_quant),
            offload=offload, offload_to=offload_to, weight_format=weights, loss=loss,
            head=head, persistent_grads=grad_accumulation > 1, gpus=gpus,
            strategy=strategy, context_bytes=_parse_overhead(overhead), tp=tp, pp=pp, cp=cp, ep=ep,
            micro_batches=grad_accumulation,
        )
    write_report(ctx, report, result)
    _print_fit(ctx, result, json_out, top)


def _print_fit(ctx: typer.Context, result: FitModelResult, json_out: bool, top: int | None) -> None:
    if json_out:
        from gpusizer.render.common import emit_json

        emit_json(result.document())
    else:
        from gpusizer.render.fit import breakdown_table, gpu_table, remedy_lines

        _warn(ctx, result.notes)
        console = _console(ctx)
        console.print(breakdown_table(result.report, width=console.width, inputs=result.input,
                                      gpus_per_node=result.results.gpus_per_node))
        console.print(gpu_table(result.report, limit=top, width=console.width))
        console.print(f"Verdict: {result.results.verdict}", markup=False)
        for line in remedy_lines(result.report, console.width):
            console.print(line, markup=False, highlight=False)
    report_note(ctx)
    if not result.fits:
        raise typer.Exit(int(ExitCode.NOTHING_FITS))


@contextlib.contextmanager
def _tracing_status(ctx: typer.Context, *, enabled: bool) -> Iterator[Callable[[str], None] | None]:
    """A spinner on a terminal's stderr while exact mode traces, shown once it has run
    for a second (the trace reports each phase as it starts)."""
    if not enabled:
        yield None
        return
    console = _console(ctx, stderr=True)
    if not console.is_terminal:
        yield None
        return
    status = console.status("exact mode: starting")
    started = time.monotonic()
    shown = False

    def update(phase: str) -> None:
        nonlocal shown
        status.update(f"exact mode: {phase}")
        if not shown and time.monotonic() - started > 1.0:
            status.start()
            shown = True

    try:
        yield update
    finally:
        if shown:
            status.stop()
