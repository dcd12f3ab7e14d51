"""The fit-model command."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpusizer.cli.options import (
    BatchOpt,
    CatalogOpt,
    FlashOpt,
    HeadOpt,
    HfConfigOpt,
    ImageOpt,
    JsonOpt,
    ModelOpt,
    OptimizerOpt,
    ParamsOpt,
    PrecisionOpt,
    SeqOpt,
    StrategyOpt,
    _console,
    _load_catalog,
    _local_report,
    _model_shape,
    _parse_overhead,
    _run_config,
    _warn,
)
from gpusizer.cli.root import app, guarded
from gpusizer.domain.precision import (
    default_precision,
)
from gpusizer.errors import ExitCode, UsageError

# --------------------------------------------------------------------------
# fit-model


@app.command("fit-model")
@guarded
def fit_model_cmd(
    ctx: typer.Context,
    params: ParamsOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    batch: BatchOpt = None,
    seq_len: SeqOpt = None,
    image_size: ImageOpt = None,
    target_len: Annotated[Optional[int], typer.Option("--target-len", min=1, help="Encoder-decoder models: decoder length (default --seq-len).")] = None,
    train: Annotated[bool, typer.Option("--train/--inference", help="Training step (default) or inference.")] = True,
    precision: Annotated[
        Optional[PrecisionOpt],
        typer.Option(help="fp64, fp32; fp16/bf16 = pure 16-bit (optimizer state too); mixed = AMP; int8/int4 = "
                     "weight-only quantisation for inference. Default: mixed for training, fp16 for inference."),
    ] = None,
    optimizer: Annotated[OptimizerOpt, typer.Option(help="Optimizer (training).")] = OptimizerOpt.adamw,
    checkpointing: Annotated[bool, typer.Option("--checkpointing", help="Activation recomputation.")] = False,
    flash_attention: FlashOpt = False,
    head: Annotated[HeadOpt, typer.Option(help="Transformer output: lm = vocabulary logits for every token; classifier = a few classes.")] = HeadOpt.lm,
    grad_accumulation: Annotated[int, typer.Option(min=1, help="Micro-batches per optimizer step; >1 keeps gradients alive through backward.")] = 1,
    gpus: Annotated[int, typer.Option(min=1, help="GPUs the run is spread over.")] = 1,
    strategy: Annotated[StrategyOpt, typer.Option(help="ddp replicates; zero1/2/3, fsdp and tp shard.")] = StrategyOpt.ddp,
    gpu: Annotated[Optional[list[str]], typer.Option("--gpu", help="Check these GPUs (repeatable). Default: the whole catalog.")] = None,
    local: Annotated[bool, typer.Option("--local", help="Check this machine's GPUs and their free memory (NVML).")] = False,
    overhead: Annotated[Optional[str], typer.Option(help="Fixed per-GPU overhead (CUDA context), e.g. 800MiB. Default 500 MiB.")] = None,
    method: Annotated[str, typer.Option(help="physics (default) or rule-of-thumb: (MB - 400) / 2 x 1024^2 / 4 params.")] = "physics",
    top: Annotated[Optional[int], typer.Option(min=1, help="Show at most this many GPUs in the table.")] = None,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Estimate training or inference memory and check which GPUs it fits on."""
    from gpusizer.memory import fit

    if method not in ("physics", "rule-of-thumb"):
        raise UsageError(f"--method: {method!r} is not physics or rule-of-thumb")
    shape = _model_shape(params, model, hf_config)
    prec = precision.value if precision else default_precision("train" if train else "inference")
    cfg = _run_config(
        mode="train" if train else "inference", precision=prec, optimizer=optimizer.value, batch=batch,
        seq_len=seq_len, image_size=image_size, target_len=target_len, checkpointing=checkpointing,
        flash_attention=flash_attention, head=head.value, persistent_grads=grad_accumulation > 1, gpus=gpus,
        strategy=strategy.value, context_bytes=_parse_overhead(overhead),
    )
    notes: list[str] = []
    if local:
        if gpu:
            raise UsageError("--local and --gpu cannot be combined")
        caps = fit.capacities_from_probe(_local_report(catalog))
    else:
        cat = _load_catalog(catalog)
        if gpu:
            resolved = cat.resolve_many(gpu)
            notes += [r.note for r in resolved if r.note]
            caps = fit.capacities_from_catalog([r.gpu for r in resolved])
        else:
            caps = fit.capacities_from_catalog(cat.gpus)
    runner = fit.fit_rule_of_thumb if method == "rule-of-thumb" else fit.fit_model
    report = runner(shape, cfg, caps)
    notes += list(report.notes)
    inputs = {
        "model": shape.name, "params": shape.params, "method": method, **cfg.model_dump(mode="json"),
        "gpus_checked": [c.label for c in caps], "local": local,
    }
    if json_out:
        from gpusizer.render.common import emit_json, envelope
        from gpusizer.render.fit import fit_json

        emit_json(envelope("fit-model", inputs, fit_json(report), notes))
    else:
        from gpusizer.render.fit import breakdown_table, gpu_table

        _warn(ctx, notes)
        console = _console(ctx)
        console.print(breakdown_table(report))
        console.print(gpu_table(report, limit=top))
        console.print(f"Verdict: {report.verdict}", markup=False)
    if not report.fitting:
        raise typer.Exit(int(ExitCode.NOTHING_FITS))
