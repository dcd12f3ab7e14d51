"""The `estimate` command: how fast a workload trains or serves on a GPU or a cluster.

Thin: parse options, pick the default batch through the memory model, call the
performance engine (gpusizer.performance), hand the results to render_estimate.
Registered on the shared app by importing this module.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpusizer import choices
from gpusizer.cli.options import (
    CatalogOpt,
    FlashOpt,
    HeadOpt,
    HfConfigOpt,
    ImageOpt,
    JsonOpt,
    ModelOpt,
    OptimizerOpt,
    ParamsOpt,
    SeqOpt,
    StrategyOpt,
    _console,
    _load_catalog,
    _model_shape,
    _run_config,
    _warn,
)
from gpusizer.cli.root import app, guarded
from gpusizer.domain.precision import (
    ALL_PRECISIONS,
    default_precision,
    storage_precision,
)
from gpusizer.errors import ExitCode, NothingFitsError, UsageError

EstPrecisionOpt = choices.choice_enum("EstPrecisionOpt", ALL_PRECISIONS)
PhaseOpt = choices.choice_enum("PhaseOpt", choices.PHASES)


PRECISION_HELP = (
    "Math precision. fp64 = FP64 units (memory counted as fp32); fp32 = FP32, which runs as TF32 on Ampere+ "
    "Tensor Cores as cuDNN, TensorFlow and NGC containers do by default (--no-tf32 for strict FP32); tf32 = "
    "TF32 Tensor Cores, fp32 storage; mixed = AMP, FP16 Tensor Cores with fp32 master weights; fp16/bf16 = pure "
    "16-bit; fp8 = FP8 Tensor Cores (trains like mixed, serves with 1-byte weights); int8/int4 = quantised "
    "inference. Default: mixed for training, fp16 for inference."
)


@app.command("estimate")
@guarded
def estimate_cmd(
    ctx: typer.Context,
    gpu: Annotated[str, typer.Option("--gpu", help="GPU name or id, e.g. 'A100 80GB SXM4', 'RTX 2080 Ti', v100.")],
    params: ParamsOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs per node.")] = 1,
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="Nodes (machines).")] = 1,
    interconnect: Annotated[Optional[str], typer.Option(
        "--interconnect",
        help="Inside a node: nvlink or pcie (default: the GPU's own NVLink, else PCIe). Between nodes: "
             "ib-edr, ib-hdr, ib-ndr, roce-100g, roce-400g, tcp-10g, tcp-25g, tcp-100g (default ib-hdr). "
             "GeForce cards fall back to TCP with host staging across nodes.")] = None,
    nics_per_node: Annotated[Optional[int], typer.Option(
        "--nics-per-node", min=1, help="Network ports per node used by NCCL (DGX-class nodes have one per GPU). "
                                       "Default 1.")] = None,
    precision: Annotated[Optional[EstPrecisionOpt], typer.Option("--precision", help=PRECISION_HELP)] = None,
    no_tf32: Annotated[bool, typer.Option("--no-tf32", help="Keep fp32 on FP32 CUDA cores on Ampere and newer.")] = False,
    batch: Annotated[Optional[int], typer.Option(
        "--batch", min=1, help="Batch per GPU (per model replica with tp); for decode, concurrent sequences. "
                               "Default: the largest that fits, capped (shown).")] = None,
    seq_len: SeqOpt = None,
    image_size: ImageOpt = None,
    train: Annotated[bool, typer.Option("--train/--inference", help="Training step (default) or inference.")] = True,
    phase: Annotated[Optional[PhaseOpt], typer.Option(
        "--phase", help="Decoder inference: decode (tokens generated; --seq-len is the context) or prefill "
                        "(prompt processing). Default decode.")] = None,
    cuda_graphs: Annotated[bool, typer.Option(
        "--cuda-graphs/--no-cuda-graphs",
        help="Decode: each step's kernels replay as one CUDA graph (TensorRT-LLM, vLLM, SGLang; llama.cpp at "
             "batch 1 since May 2024), or --no-cuda-graphs: launched one by one from the host (Hugging Face "
             "transformers, ExLlama, older llama.cpp, llama.cpp at batch > 1). Sets the per-layer overhead.")] = True,
    optimizer: Annotated[OptimizerOpt, typer.Option(help="Optimizer (training).")] = OptimizerOpt.adamw,
    strategy: Annotated[StrategyOpt, typer.Option(help="ddp replicates; zero1/2/3 and fsdp shard; tp splits "
                                                       "layers across a node's GPUs.")] = StrategyOpt.ddp,
    head: Annotated[HeadOpt, typer.Option(help="Transformer output: lm = vocabulary logits for every token; "
                                               "classifier = a few classes.")] = HeadOpt.lm,
    checkpointing: Annotated[bool, typer.Option("--checkpointing", help="Activation recomputation.")] = False,
    flash_attention: FlashOpt = False,
    grad_accumulation: Annotated[int, typer.Option(min=1, help="Micro-batches per optimizer step.")] = 1,
    epochs: Annotated[Optional[float], typer.Option("--epochs", min=0, help="Epochs to train (with --dataset-size).")] = None,
    dataset_size: Annotated[Optional[str], typer.Option(
        "--dataset-size", help="Samples per epoch, e.g. 1.28M (with --epochs).")] = None,
    tokens: Annotated[Optional[str], typer.Option("--tokens", help="Tokens to train on, e.g. 300B.")] = None,
    price_per_hour: Annotated[Optional[float], typer.Option(
        "--price-per-hour", min=0, help="Price per GPU-hour in USD; cost is unknown without it (catalog "
                                        "prices are purchase prices).")] = None,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Predict throughput, step-time breakdown, scaling, time-to-train and cost."""
    from gpusizer import performance as perf
    from gpusizer.memory.estimate import estimate_memory
    from gpusizer.units import parse_count

    mode = "train" if train else "inference"
    if phase is not None and train:
        raise UsageError("--phase is for inference", hint="add --inference")
    if (epochs is None) != (dataset_size is None):
        raise UsageError("--epochs and --dataset-size go together", hint="e.g. --epochs 90 --dataset-size 1.28M")
    if tokens is not None and epochs is not None:
        raise UsageError("give --tokens or --epochs with --dataset-size, not both")
    try:
        samples = epochs * parse_count(dataset_size, what="--dataset-size") if dataset_size is not None else None
        token_count = float(parse_count(tokens, what="--tokens")) if tokens is not None else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if samples is not None and samples <= 0:
        raise UsageError("--epochs must be positive")

    shape = _model_shape(params, model, hf_config)
    cat = _load_catalog(catalog)
    res = cat.resolve(gpu)
    g = res.gpu
    notes: list[str] = [res.note] if res.note else []

    prec = precision.value if precision else default_precision(mode)
    mem_prec = storage_precision(prec, mode)
    ph = phase.value if phase else None
    cfg = _run_config(
        mode=mode, precision=mem_prec, optimizer=optimizer.value, batch=batch or 1, seq_len=seq_len,
        image_size=image_size, checkpointing=checkpointing, flash_attention=flash_attention, head=head.value,
        persistent_grads=grad_accumulation > 1, gpus=gpus, strategy=strategy.value,
    )
    from gpusizer.domain.parallelism import sharded_gpus

    def run_inputs() -> dict:
        return {
            "model": shape.name, "params": shape.params, "gpu": gpu, "resolved_id": g.id, "gpus": gpus,
            "nodes": nodes, "interconnect": interconnect, "nics_per_node": nics_per_node, "precision": prec,
            "memory_precision": mem_prec, "tf32": not no_tf32, "batch": cfg.batch, "seq_len": cfg.seq_len,
            "image_size": cfg.image_size, "mode": mode, "phase": ph, "optimizer": cfg.optimizer,
            "strategy": cfg.strategy, "grad_accumulation": grad_accumulation, "cuda_graphs": cuda_graphs,
            "epochs": epochs,
            "dataset_size": dataset_size, "tokens": tokens, "price_per_hour": price_per_hour,
            "catalog_files": list(cat.files),
        }

    if batch is None:
        try:
            choice = perf.default_batch(shape, cfg, g.memory_bytes, precision=prec, phase=ph, nodes=nodes)
        except NothingFitsError as exc:
            if not json_out:
                raise
            # --json still prints its document: what was asked, and why there is no estimate
            from gpusizer.render.common import emit_json, envelope
            from gpusizer.render.estimate import nothing_fits_json

            one = estimate_memory(shape, cfg.model_copy(update={"gpus": sharded_gpus(cfg.strategy, gpus, nodes)}))
            memory = {"per_gpu_bytes": one.total_bytes, "capacity_bytes": g.memory_bytes, "fits": False}
            inputs = {**run_inputs(), "batch": None}
            why = exc.message + (f"; {exc.hint}" if exc.hint else "")
            emit_json(envelope("estimate", inputs, nothing_fits_json(g, exc.message, exc.hint, memory),
                               list(dict.fromkeys([*notes, why]))))
            raise typer.Exit(int(ExitCode.NOTHING_FITS)) from None
        cfg = cfg.model_copy(update={"batch": choice.batch})
        batch_note = choice.reason
    else:
        batch_note = "given"

    mem_cfg = cfg.model_copy(update={"gpus": sharded_gpus(cfg.strategy, gpus, nodes)})
    mem = estimate_memory(shape, mem_cfg)
    fits = mem.total_bytes <= g.memory_bytes
    if not fits:
        notes.append(f"does not fit: {mem.total_bytes / 2**30:.1f} GiB per GPU needed, {g.memory_gib:g} GiB on "
                     f"{g.id} (gpusizer fit-model shows the breakdown); the speed below is hypothetical")

    kwargs = dict(
        nodes=nodes, interconnect=interconnect, tf32=not no_tf32, compute_precision=prec, phase=ph,
        nics_per_node=nics_per_node, grad_accumulation=grad_accumulation, cuda_graphs=cuda_graphs,
    )
    est = perf.estimate_performance(g, shape, cfg, **kwargs)
    notes += list(est.notes)
    curve_kwargs = {k: v for k, v in kwargs.items() if k != "nodes"}
    curve = perf.scaling_curve(g, shape, cfg, perf.scaling_counts(gpus, nodes), **curve_kwargs)
    training = None
    if samples is not None or token_count is not None:
        training = perf.time_to_train(est, samples=samples, tokens=token_count, price_per_gpu_hour=price_per_hour)
    if price_per_hour is None:
        notes.append("cost unknown: give --price-per-hour (USD per GPU-hour); catalog launch prices are purchase "
                     "prices, not hourly ones")

    inputs = run_inputs()
    memory = {"per_gpu_bytes": mem.total_bytes, "capacity_bytes": g.memory_bytes, "fits": fits}
    if json_out:
        from gpusizer.render.common import emit_json, envelope
        from gpusizer.render.estimate import estimate_json

        results = estimate_json(est, gpu=g, batch=batch_note, memory=memory, curve=curve, training=training,
                                inputs=inputs)
        if price_per_hour is not None:
            results["price_per_gpu_hour_usd"] = price_per_hour
            results["cluster_cost_per_hour_usd"] = price_per_hour * est.gpus_total
        emit_json(envelope("estimate", inputs, results, list(dict.fromkeys(notes))))
    else:
        from gpusizer.render.estimate import (
            breakdown_table,
            scaling_table,
            summary_table,
            training_table,
        )

        _warn(ctx, list(dict.fromkeys(notes)))
        console = _console(ctx)
        console.print(summary_table(est, g, inputs, batch_note))
        console.print(breakdown_table(est))
        console.print(scaling_table(curve, est.throughput_unit))
        if training is not None:
            console.print(training_table(training))
        elif price_per_hour is not None:
            console.print(f"Cost: ${price_per_hour * est.gpus_total:,.2f} per hour for {est.gpus_total} GPU(s)",
                          markup=False)
    if not fits:
        raise typer.Exit(int(ExitCode.NOTHING_FITS))


__all__ = ["estimate_cmd"]
