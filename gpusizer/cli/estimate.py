"""The `estimate` command: how fast a workload trains or serves on a GPU or a cluster.

Thin: parse options, pick the default batch through the memory model, call the
performance engine (gpusizer.performance), hand the results to render_estimate.
Registered on the shared app by importing this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gpusizer.api import EstimateResult

from gpusizer.choices import Phase
from gpusizer.cli.options import (
    CONSTRAINTS,
    HARDWARE,
    RUN,
    AttentionOpt,
    CatalogOpt,
    CheckpointOpt,
    DoubleQuantOpt,
    FlashOpt,
    GradAccumOpt,
    HeadOptT,
    HfConfigOpt,
    ImageOpt,
    InterconnectOpt,
    JsonOpt,
    LogitsOpt,
    LoraOpt,
    LoraTargetsOpt,
    LossOpt,
    ModelOpt,
    NodesOpt,
    OptimizerOptT,
    ParamsOpt,
    QloraOpt,
    ReportOpt,
    SeqOpt,
    SystemOpt,
    TrainOpt,
    _cache_dir,
    _console,
    _load_catalog,
    _warn,
    adapter_settings,
    check_report,
    complete_gpu,
    examples,
    real,
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
    ALL_PRECISIONS,
    PrecisionName,
)
from gpusizer.errors import ExitCode, NothingFitsError

estimate_app = command_app()

GpuOpt = Annotated[str | None, typer.Option(
    "--gpu", metavar="GPU", rich_help_panel=HARDWARE, autocompletion=complete_gpu, help="GPU name or id, e.g. 'A100 80GB SXM4', 'RTX 2080 Ti', v100 (or give --system).")]
EstGpusOpt = Annotated[int | None, typer.Option("--gpus", min=1, metavar="N", rich_help_panel=HARDWARE, help="GPUs per node. Default 1, or the system's count.")]
NicsOpt = Annotated[int | None, typer.Option(
    "--nics-per-node", min=1, metavar="N", rich_help_panel=HARDWARE, help="Network ports per node used by NCCL. Default: the system's, one per GPU for SXM "
                                   "nodes (as DGX), else 1.")]
EstPrecisionOptT = Annotated[PrecisionName | None, typer.Option("--precision", metavar="PRECISION", rich_help_panel=RUN, help=precision_help(
    ALL_PRECISIONS, "Math precision; the memory model counts its storage precision. "))]
NoTf32Opt = Annotated[bool, typer.Option("--no-tf32", rich_help_panel=RUN, help="Keep fp32 on FP32 CUDA cores on Ampere and newer.")]
EstBatchOpt = Annotated[int | None, typer.Option(
    "--batch", min=1, metavar="N", rich_help_panel=RUN, help="Batch per GPU (per model replica with tp); for decode, concurrent sequences. "
                           "Default: the largest that fits, capped (shown).")]
PhaseOptT = Annotated[Phase | None, typer.Option(
    "--phase", metavar="PHASE", rich_help_panel=RUN, help="Decoder inference: decode (tokens generated; --seq-len is the context) or prefill "
                    "(prompt processing). Default decode.")]
CudaGraphsOpt = Annotated[bool, typer.Option(
    "--cuda-graphs/--no-cuda-graphs", rich_help_panel=RUN,
    help="Decode: each step's kernels replay as one CUDA graph (TensorRT-LLM, vLLM, SGLang; llama.cpp at "
         "batch 1 since May 2024), or --no-cuda-graphs: launched one by one from the host (Hugging Face "
         "transformers, ExLlama, older llama.cpp, llama.cpp at batch > 1). Sets the per-layer overhead.")]
EpochsOpt = Annotated[float | None, typer.Option("--epochs", **real(0), metavar="N", rich_help_panel=RUN, help="Epochs to train (with --dataset-size).")]
DatasetOpt = Annotated[str | None, typer.Option("--dataset-size", metavar="COUNT", rich_help_panel=RUN, help="Samples per epoch, e.g. 1.28M (with --epochs).")]
TokensOpt = Annotated[str | None, typer.Option("--tokens", metavar="COUNT", rich_help_panel=RUN, help="Tokens to train on, e.g. 300B.")]
PromptOpt = Annotated[int | None, typer.Option(
    "--prompt", min=1, max=1 << 24, metavar="TOKENS", rich_help_panel=RUN,
    help="Serving: prompt tokens for the time to first token. Default: the whole --seq-len context.")]
MaxItlOpt = Annotated[float | None, typer.Option(
    "--max-itl-ms", **real(0.001, 1e6), metavar="MS", rich_help_panel=CONSTRAINTS,
    help="Serving: the largest concurrency (batch) whose inter-token latency stays within this many ms.")]
PriceOpt = Annotated[float | None, typer.Option(
    "--price-per-hour", **real(0), metavar="USD", rich_help_panel=CONSTRAINTS, help="Price per GPU-hour in USD; cost is unknown without it (catalog prices are "
                                    "purchase prices).")]


@estimate_app.command("estimate", epilog=examples(
    "gpusizer estimate --model resnet50 --gpu a100",
    "gpusizer estimate --model llama-2-7b --gpu h100 --inference --batch 8",
    "gpusizer estimate --model gpt2-xl --system dgx-h100 --tokens 100B",
))
@guarded
def estimate_cmd(
    ctx: typer.Context,
    gpu: GpuOpt = None,
    system: SystemOpt = None,
    params: ParamsOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    gpus: EstGpusOpt = None,
    nodes: NodesOpt = 1,
    interconnect: InterconnectOpt = None,
    nics_per_node: NicsOpt = None,
    precision: EstPrecisionOptT = None,
    no_tf32: NoTf32Opt = False,
    batch: EstBatchOpt = None,
    seq_len: SeqOpt = None,
    image_size: ImageOpt = None,
    train: TrainOpt = True,
    phase: PhaseOptT = None,
    cuda_graphs: CudaGraphsOpt = True,
    optimizer: OptimizerOptT = "adamw",
    strategy: StrategyOptT = "ddp",
    tp: TpOpt = None, pp: PpOpt = 1, cp: CpOpt = 1, ep: EpOpt = 1,  # (the layout: domain.parallelism)
    head: HeadOptT = "lm",
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
    grad_accumulation: GradAccumOpt = 1,
    epochs: EpochsOpt = None,
    dataset_size: DatasetOpt = None,
    tokens: TokensOpt = None,
    price_per_hour: PriceOpt = None,
    prompt: PromptOpt = None,
    max_itl_ms: MaxItlOpt = None,
    report: ReportOpt = None,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Predict throughput, step-time breakdown, scaling, time-to-train and cost."""
    from gpusizer import api

    check_report(report)

    result = api.estimate(
        model, gpu=gpu, system=system, params=params, hf_config=hf_config, gpus=gpus, nodes=nodes, interconnect=interconnect,
        nics_per_node=nics_per_node, precision=precision, tf32=not no_tf32,
        phase=phase, cuda_graphs=cuda_graphs, grad_accumulation=grad_accumulation,
        epochs=epochs, dataset_size=dataset_size, tokens=tokens, price_per_hour=price_per_hour, prompt=prompt,
        max_itl_ms=max_itl_ms, catalog=_load_catalog(catalog), cache_dir=_cache_dir(), mode="train" if train else "inference",
        batch=batch, seq_len=seq_len, image_size=image_size, optimizer=optimizer, strategy=strategy,
        head=head, checkpointing=checkpointing, attention="fused" if flash_attention else attention, logits=logits,
        kv_cache=kv_cache, adapter=adapter_settings(lora, qlora, lora_targets, double_quant),
        offload=offload, offload_to=offload_to, weight_format=weights, loss=loss, tp=tp, pp=pp, cp=cp, ep=ep,
    )
    write_report(ctx, report, result)
    _print_estimate(ctx, result, json_out)


def _print_estimate(ctx: typer.Context, result: EstimateResult, json_out: bool) -> None:
    res = result.results
    if json_out:
        from gpusizer.render.common import emit_json

        emit_json(result.document())
        report_note(ctx)
        if not result.fits:
            raise typer.Exit(int(ExitCode.NOTHING_FITS))
        return
    if not res.fits:
        # the notes but the last, which repeats the error (the JSON document has no error to say it)
        _warn(ctx, [n for n in result.notes if not (res.reason and n.startswith(res.reason))])
        report_note(ctx)
        raise NothingFitsError(res.reason or "nothing fits", hint=res.hint)
    from gpusizer.performance.calibration import load_calibration
    from gpusizer.render.estimate import estimate_renderables

    _warn(ctx, list(result.notes))
    console = _console(ctx)
    within = load_calibration(cache_dir=_cache_dir()).errors.get("held_out_within_20pct")  # (the one estimate used)
    for part in estimate_renderables(result, width=console.width, held_out_within=within):
        console.print(part)
    report_note(ctx)
    if not result.fits:
        raise typer.Exit(int(ExitCode.NOTHING_FITS))


__all__ = ["estimate_cmd"]
