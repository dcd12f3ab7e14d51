"""The ``recommend`` command: a thin wrapper over gpusizer.ranking.search.

Registered on ``gpusizer.cli.app`` when this module is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gpusizer.api import RecommendResult

from gpusizer.choices import MAX_USERS, Sort
from gpusizer.cli import options as cli
from gpusizer.cli.options import (
    CONSTRAINTS,
    HARDWARE,
    MODEL,
    OUTPUT,
    RUN,
    AttentionOpt,
    BatchOpt,
    CatalogOpt,
    FlashOpt,
    HfConfigOpt,
    ImageOpt,
    InterconnectOpt,
    JsonOpt,
    ModelOpt,
    NodesOpt,
    OptimizerOptT,
    ParamsOpt,
    SeqOpt,
    VendorOpt,
    complete_gpu,
    examples,
    real,
)
from gpusizer.cli.root import command_app, guarded
from gpusizer.cli.run_options import (
    KvCacheOpt,
    OffloadOpt,
    OffloadToOpt,
    StrategyOptT,
    WeightsOpt,
    precision_help,
)
from gpusizer.domain.precision import RULE_PRECISIONS, PrecisionName
from gpusizer.errors import ExitCode
from gpusizer.hardware.vendors import DEFAULT_VENDOR

#: What each bundled workload means (the rules file says what matters for it).
WORKLOAD_HELP = (
    "What the GPUs are for. cnn: convolutional nets (ResNet, VGG), compute-bound, Tensor Cores first. "
    "rnn: RNNs/LSTMs, memory-bandwidth-bound. transformer: BERT/GPT-2-sized transformers, between the two "
    "and memory-hungry. llm-train: training or fine-tuning large language models (Tensor Cores, memory, ECC). "
    "llm-inference: serving LLMs, token generation is bandwidth-bound. inference: serving CNNs and other nets "
    "at FP16/INT8, throughput per watt. hpc: scientific codes in FP64, with ECC. A --rules file can add more."
)

recommend_app = command_app()






def _split(values: list[str] | None) -> tuple[str, ...]:
    """``--require ecc,rdma --require fp64`` -> ('ecc', 'rdma', 'fp64')."""
    out: list[str] = []
    for value in values or ():
        out.extend(v.strip().lower() for v in value.split(",") if v.strip())
    return tuple(dict.fromkeys(out))


WorkloadOpt = Annotated[str, typer.Option("--workload", "-w", metavar="WORKLOAD", rich_help_panel=MODEL, help=WORKLOAD_HELP)]
RecPrecisionOptT = Annotated[PrecisionName | None, typer.Option(metavar="PRECISION", rich_help_panel=RUN, help=precision_help(
    RULE_PRECISIONS, "Working precision (the rules are written for these; hpc defaults to fp64): "))]
BudgetOpt = Annotated[float | None, typer.Option(
    "--budget", **real(), metavar="USD", rich_help_panel=CONSTRAINTS, help="Total US dollars for all GPUs, at the catalog's dated street price where it has one, "
                     "else the launch price. GPUs without a known price are excluded when a budget is given. "
                     "Without --gpus, the tool also chooses how many of each GPU to buy.")]
MaxPowerOpt = Annotated[float | None, typer.Option(
    "--max-power", **real(), metavar="WATTS", rich_help_panel=CONSTRAINTS, help="Total board power in watts for all GPUs (TDP x count).")]
RequireOpt = Annotated[list[str] | None, typer.Option(
    "--require", metavar="FEATURES", rich_help_panel=CONSTRAINTS, help="Hard requirements, comma-separated or repeated: ecc, rdma, nvlink, fp64 (full-rate FP64).")]
SegmentOpt = Annotated[list[str] | None, typer.Option(
    "--segment", metavar="SEGMENTS", rich_help_panel=CONSTRAINTS, help="Only these segments: datacenter, workstation, consumer (comma-separated or repeated).")]
RankTopOpt = Annotated[int, typer.Option("--top", min=1, metavar="N", rich_help_panel=OUTPUT, help="Show the best N GPUs.")]
SortOptT = Annotated[Sort, typer.Option(
    metavar="ORDER", rich_help_panel=OUTPUT, help="speed (the default: the performance model; near-ties within 3% go to the score), score (the rules "
         "alone) or value (speed per dollar of street, else launch, price).")]
RulesOpt = Annotated[list[Path] | None, typer.Option(
    "--rules", metavar="FILE", rich_help_panel=CONSTRAINTS, readable=False, help="Extra rules YAML, repeatable: overrides or extends the bundled rules by workload and rule id "
                    "(see docs/rules.md).")]
RecGpusOpt = Annotated[int | None, typer.Option(
    "--gpus", min=1, metavar="N", rich_help_panel=HARDWARE, help="GPUs per node. Default 1; with --budget and no --gpus, the tool chooses the count.")]
DeadlineOpt = Annotated[str | None, typer.Option(
    "--deadline", metavar="DURATION", rich_help_panel=CONSTRAINTS, help="Cloud: the cheapest configuration that trains the job (--tokens, or "
                                           "--epochs with --dataset-size) within this time, e.g. 14d, 36h.")]
MaxCostOpt = Annotated[float | None, typer.Option(
    "--max-cost", **real(0), metavar="USD", rich_help_panel=CONSTRAINTS, help="Cloud: the fastest configuration whose job costs at most this.")]
PerHourOpt = Annotated[float | None, typer.Option(
    "--budget-per-hour", **real(0), metavar="USD", rich_help_panel=CONSTRAINTS, help="Cloud: the fastest configuration renting for at most this "
                                                    "an hour.")]
RecTokensOpt = Annotated[str | None, typer.Option("--tokens", metavar="COUNT", rich_help_panel=RUN, help="The job for a cloud objective: tokens, e.g. 1T.")]
RecEpochsOpt = Annotated[float | None, typer.Option("--epochs", **real(0), metavar="N", rich_help_panel=RUN, help="The job: epochs (with --dataset-size).")]
RecDatasetOpt = Annotated[str | None, typer.Option("--dataset-size", metavar="COUNT", rich_help_panel=RUN, help="Samples per epoch, e.g. 1.28M.")]
RecUsersOpt = Annotated[int | None, typer.Option(
    "--users", min=1, max=MAX_USERS, metavar="N", rich_help_panel=CONSTRAINTS,
    help="Serving (an inference workload and a decoder): size a deployment for this many concurrent sequences of "
         "--seq-len tokens (default 4,096, as serve): for each GPU the fewest GPUs (replicas of one TP size), "
         "cheapest first.")]
RecItlOpt = Annotated[float | None, typer.Option(
    "--max-itl-ms", **real(0.001, 1e6), metavar="MS", rich_help_panel=CONSTRAINTS,
    help="With --users: the inter-token latency each user may see, in ms.")]
WhyNotOpt = Annotated[list[str] | None, typer.Option(
    "--why-not", metavar="GPU", rich_help_panel=OUTPUT, autocompletion=complete_gpu, help="Say why this GPU is not first: its exclusions, or how it compares (repeatable). "
                                                                 "With --users: where the serving plan places its "
                                                                 "deployment, or why it has none.")]
ShowExcludedOpt = Annotated[bool, typer.Option("--show-excluded", rich_help_panel=OUTPUT, help="List excluded GPUs and why.")]
LocalOpt = Annotated[bool, typer.Option("--local", rich_help_panel=HARDWARE, help="Rank this machine's GPUs (NVML), with their free memory.")]


@recommend_app.command("recommend", epilog=examples(
    "gpusizer recommend --workload cnn",
    "gpusizer recommend -w llm-train --model gpt2 --budget 9000 --why-not a100",
    "gpusizer recommend -w llm-inference --model llama-3-70b --users 32",
))
@guarded
def recommend_cmd(
    ctx: typer.Context,
    workload: WorkloadOpt,
    precision: RecPrecisionOptT = None,
    params: ParamsOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    batch: BatchOpt = None,
    seq_len: SeqOpt = None,
    flash_attention: FlashOpt = False,
    attention: AttentionOpt = "fused",
    image_size: ImageOpt = None,
    optimizer: OptimizerOptT = "adamw",
    strategy: StrategyOptT = "ddp",
    checkpointing: cli.CheckpointOpt = False,
    lora: cli.LoraOpt = None,
    qlora: cli.QloraOpt = False,
    lora_targets: cli.LoraTargetsOpt = "all-linear",
    double_quant: cli.DoubleQuantOpt = True,
    offload: OffloadOpt = "none",
    offload_to: OffloadToOpt = "cpu",
    weights: WeightsOpt = None,
    kv_cache: KvCacheOpt = "auto",
    loss: cli.LossOpt = "full",
    gpus: RecGpusOpt = None,
    nodes: NodesOpt = 1,
    interconnect: InterconnectOpt = None,
    system: cli.SystemOpt = None,
    budget: BudgetOpt = None,
    deadline: DeadlineOpt = None,
    max_cost: MaxCostOpt = None,
    budget_per_hour: PerHourOpt = None,
    users: RecUsersOpt = None,
    max_itl_ms: RecItlOpt = None,
    tokens: RecTokensOpt = None,
    epochs: RecEpochsOpt = None,
    dataset_size: RecDatasetOpt = None,
    max_power: MaxPowerOpt = None,
    require: RequireOpt = None,
    segment: SegmentOpt = None,
    vendor: VendorOpt = DEFAULT_VENDOR,
    top: RankTopOpt = 10,
    sort: SortOptT = "speed",
    rules: RulesOpt = None,
    show_excluded: ShowExcludedOpt = False,
    explain: cli.ExplainOpt = False,
    why_not: WhyNotOpt = None,
    local: LocalOpt = False,
    report: cli.ReportOpt = None,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Rank GPUs for a workload, with the reasons for each score."""
    from gpusizer import api

    cli.check_report(report)

    result = api.recommend(
        workload, model=model, params=params, hf_config=hf_config, precision=precision,
        batch=batch, seq_len=seq_len, image_size=image_size,
        flash_attention=flash_attention or attention == "fused",
        optimizer=optimizer, strategy=strategy, gpus=gpus, nodes=nodes, interconnect=interconnect,
        budget=budget, max_power=max_power, require=_split(require), segments=_split(segment), top=top,
        sort=sort, rules=[str(p) for p in rules or ()], probe=cli._local_report(catalog) if local else None,
        catalog=cli._load_catalog(catalog), cache_dir=cli._cache_dir(), vendor=vendor, deadline=deadline,
        max_cost=max_cost, budget_per_hour=budget_per_hour, tokens=tokens, epochs=epochs, dataset_size=dataset_size,
        system=system, checkpointing=checkpointing, adapter=cli.adapter_settings(lora, qlora, lora_targets, double_quant),
        offload=offload, offload_to=offload_to, weight_format=weights, kv_cache=kv_cache, loss=loss, why_not=tuple(why_not or ()),
        users=users, max_itl_ms=max_itl_ms,
    )
    cli.write_report(ctx, report, result)
    _print_recommend(ctx, result, json_out, show_excluded, explain)


def _print_recommend(
    ctx: typer.Context, result: RecommendResult, json_out: bool, show_excluded: bool, explain: bool,
) -> None:
    if json_out:
        from gpusizer.render.common import emit_json

        emit_json(result.document())
    else:
        from gpusizer.render.recommend import recommend_renderables

        cli._warn(ctx, result.notes)
        console = cli._console(ctx)
        # a pipe without COLUMNS is 200 wide (render.common.make_console): every column stays
        for part in recommend_renderables(result.results, show_excluded=show_excluded, rules_files=result.rules_files,
                                          width=console.width, explain=explain):
            console.print(part)
    cli.report_note(ctx)
    if not result.fits:
        raise typer.Exit(int(ExitCode.NOTHING_FITS))
