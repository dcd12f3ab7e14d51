"""Options whose choices are domain concepts: precisions, strategies, offload targets,
KV-cache and weight formats.

Their names live in :mod:`gpusizer.domain.precision` and
:mod:`gpusizer.domain.parallelism` alone (tests/test_architecture.py), so these
options import the domain. Only the commands that run the engine (fit-model,
estimate, recommend, serve) import this module, and they load the domain to do
their work anyway; the browsing commands (catalog, compare, systems, models,
probe) never do.
"""

from __future__ import annotations

from typing import Annotated

import typer

from gpusizer.cli.options import HARDWARE, RUN
from gpusizer.domain.parallelism import Offload, OffloadTarget, Strategy
from gpusizer.domain.precision import KvCache, WeightFormatName

KvCacheOpt = Annotated[KvCache, typer.Option(
    "--kv-cache", metavar="FORMAT", rich_help_panel=RUN,
    help="KV-cache format during inference: auto (the activations' precision, default), fp16, bf16, "
         "fp8, int8 or int4.")]
WeightsOpt = Annotated[WeightFormatName | None, typer.Option(
    "--weights", metavar="FORMAT", rich_help_panel=RUN,
    help="Inference: serve a published weight format instead of the precision's storage: "
         "gptq-int4-g128, awq-int4-g128, mxfp4, fp8, gguf-q4_k_m, gguf-q5_k_m, gguf-q6_k, gguf-q8_0 "
         "(bits per weight with their scales; docs/method.md).")]
OffloadOpt = Annotated[Offload, typer.Option(
    "--offload", metavar="WHAT", rich_help_panel=RUN,
    help="Keep state in host memory instead of on the GPU: optimizer (ZeRO-Offload: optimizer state, "
         "fp32 master weights and gradients; the step runs on the CPU), params (weights stream in "
         "layer by layer), all (both, gradients too); with --strategy ddp these run on DeepSpeed ZeRO-2 "
         "(optimizer) or ZeRO-3 (params, all). activations (training: the layers' saved activations "
         "wait in host RAM, two layers' worth on the GPU; torchtune's enable_activation_offloading), "
         "or none (default).")]
OffloadToOpt = Annotated[OffloadTarget, typer.Option(
    "--offload-to", metavar="WHERE", rich_help_panel=RUN,
    help="Where offloaded state lives: cpu (host RAM, default) or nvme (ZeRO-Infinity).")]
StrategyOptT = Annotated[Strategy, typer.Option(
    metavar="STRATEGY", rich_help_panel=HARDWARE,
    help="ddp replicates; zero1/2/3 (DeepSpeed: mixed runs as its 16-bit mode) and fsdp (PyTorch FSDP, "
         "Hugging Face wrapping) shard over every GPU; tp splits each layer over a node's GPUs.")]

TpOpt = Annotated[int | None, typer.Option(
    "--tp", min=1, max=1024, metavar="N", rich_help_panel=HARDWARE,
    help="Tensor-parallel degree. Default: every GPU (of a node) left by --pp and --cp with --strategy tp, "
         "else 1. The GPUs left by --tp x --pp x --cp are data-parallel replicas, sharded per --strategy.")]
PpOpt = Annotated[int, typer.Option(
    "--pp", min=1, max=1024, metavar="N", rich_help_panel=HARDWARE,
    help="Pipeline stages (1F1B): each holds layers / N layers; the first holds the activations of "
         "min(N, --grad-accumulation) micro-batches.")]
CpOpt = Annotated[int, typer.Option(
    "--cp", min=1, max=1024, metavar="N", rich_help_panel=HARDWARE,
    help="Context parallelism (ring attention): each rank holds seq / N tokens; training only.")]
EpOpt = Annotated[int, typer.Option(
    "--ep", min=1, max=1024, metavar="N", rich_help_panel=HARDWARE,
    help="Expert parallelism for mixture-of-experts models: each rank holds 1/N of the experts. Its ranks "
         "are data-parallel ranks (N divides the GPUs left by --tp x --pp).")]


def precision_help(names: tuple[str, ...], lead: str = "") -> str:
    """Help for a --precision option, from the precision table's own descriptions."""
    from gpusizer.domain.precision import DEFAULT_PRECISION, precision_spec

    listed = "; ".join(f"{n} = {precision_spec(n).description}" for n in names)
    return (f"{lead}{listed}. Default: {DEFAULT_PRECISION['train']} for training, "
            f"{DEFAULT_PRECISION['inference']} for inference.")
