"""The ``recommend`` command: a thin wrapper over gpusizer.ranking.search.

Registered on ``gpusizer.cli.app`` when this module is imported.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from gpusizer import choices
from gpusizer.cli import options as cli
from gpusizer.cli.options import (
    BatchOpt,
    CatalogOpt,
    FlashOpt,
    HfConfigOpt,
    ImageOpt,
    JsonOpt,
    ModelOpt,
    OptimizerOpt,
    ParamsOpt,
    SeqOpt,
    StrategyOpt,
)
from gpusizer.cli.root import app, guarded
from gpusizer.domain.precision import RULE_PRECISIONS
from gpusizer.errors import ExitCode

#: What each bundled workload means (the rules file says what matters for it).
WORKLOAD_HELP = (
    "What the GPUs are for. cnn: convolutional nets (ResNet, VGG), compute-bound, Tensor Cores first. "
    "rnn: RNNs/LSTMs, memory-bandwidth-bound. transformer: BERT/GPT-2-sized transformers, between the two "
    "and memory-hungry. llm-train: training or fine-tuning large language models (Tensor Cores, memory, ECC). "
    "llm-inference: serving LLMs, token generation is bandwidth-bound. inference: serving CNNs and other nets "
    "at FP16/INT8, throughput per watt. hpc: scientific codes in FP64, with ECC. A --rules file can add more."
)


RecPrecisionOpt = choices.choice_enum("RecPrecisionOpt", RULE_PRECISIONS)


class SortOpt(str, Enum):
    score = "score"
    speed = "speed"
    value = "value"


def _split(values: list[str] | None) -> tuple[str, ...]:
    """``--require ecc,rdma --require fp64`` -> ('ecc', 'rdma', 'fp64')."""
    out: list[str] = []
    for value in values or ():
        out.extend(v.strip().lower() for v in value.split(",") if v.strip())
    return tuple(dict.fromkeys(out))


@app.command("recommend")
@guarded
def recommend_cmd(
    ctx: typer.Context,
    workload: Annotated[str, typer.Option("--workload", "-w", help=WORKLOAD_HELP)],
    precision: Annotated[
        RecPrecisionOpt | None,
        typer.Option(help="Working precision. Default: the workload's (mixed for training, fp16 for inference, "
                     "fp64 for hpc). tf32 = TF32 matmuls with FP32 storage; mixed = AMP."),
    ] = None,
    params: ParamsOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    batch: BatchOpt = None,
    seq_len: SeqOpt = None,
    flash_attention: FlashOpt = False,
    image_size: ImageOpt = None,
    optimizer: Annotated[OptimizerOpt, typer.Option(help="Optimizer (training), for the memory fit.")] = OptimizerOpt.adamw,
    strategy: Annotated[StrategyOpt, typer.Option(help="ddp replicates; zero1/2/3, fsdp and tp shard over all GPUs.")] = StrategyOpt.ddp,
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs per node.")] = 1,
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="Nodes. Several nodes make GPUDirect RDMA matter.")] = 1,
    interconnect: Annotated[
        str | None, typer.Option(help="Inter-node network for the performance model, as in 'gpusizer estimate'. "
                                    "Default: the performance model's choice for each GPU.")
    ] = None,
    budget: Annotated[
        float | None, typer.Option("--budget", help="Total US dollars for all GPUs (launch prices). GPUs without "
                                      "a known price are excluded when a budget is given.")
    ] = None,
    max_power: Annotated[
        float | None, typer.Option("--max-power", help="Total board power in watts for all GPUs (TDP x count).")
    ] = None,
    require: Annotated[
        list[str] | None, typer.Option("--require", help="Hard requirements, comma-separated or repeated: "
                                          "ecc, rdma, nvlink, fp64 (full-rate FP64).")
    ] = None,
    segment: Annotated[
        list[str] | None, typer.Option("--segment", help="Only these segments: datacenter, workstation, consumer "
                                          "(comma-separated or repeated).")
    ] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Show the best K GPUs.")] = 10,
    sort: Annotated[SortOpt, typer.Option(help="score (rules), speed (performance model) or value "
                                          "(speed per dollar of launch price).")] = SortOpt.score,
    rules: Annotated[
        list[Path] | None, typer.Option("--rules", help="Extra rules YAML, repeatable: overrides or extends the "
                                           "bundled rules by workload and rule id (see docs/rules.md).")
    ] = None,
    show_excluded: Annotated[bool, typer.Option("--show-excluded", help="List excluded GPUs and why.")] = False,
    local: Annotated[bool, typer.Option("--local", help="Rank this machine's GPUs (NVML), with their free memory.")] = False,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Rank GPUs for a workload, with the reasons for each score."""
    from gpusizer import api

    result = api.recommend(
        workload, model=model, params=params, hf_config=hf_config, precision=precision.value if precision else None,
        batch=batch, seq_len=seq_len, image_size=image_size, flash_attention=flash_attention,
        optimizer=optimizer.value, strategy=strategy.value, gpus=gpus, nodes=nodes, interconnect=interconnect,
        budget=budget, max_power=max_power, require=_split(require), segments=_split(segment), top=top,
        sort=sort.value, rules=[str(p) for p in rules or ()], probe=cli._local_report(catalog) if local else None,
        catalog=cli._load_catalog(catalog), cache_dir=cli._cache_dir(),
    )
    if json_out:
        from gpusizer.render.common import emit_json

        emit_json(result.document())
    else:
        from gpusizer.render.recommend import recommend_renderables

        cli._warn(ctx, result.notes)
        console = cli._console(ctx)
        for part in recommend_renderables(result.results, show_excluded=show_excluded, rules_files=result.rules_files):
            console.print(part)
    if not result.fits:
        raise typer.Exit(int(ExitCode.NOTHING_FITS))
