"""The closed sets of choices the engine and the CLI share, each written once.

Every set is a ``Literal`` type (what the engine's models validate) with the
tuple of its values beside it (what messages and the CLI's option enums list).
This module imports nothing heavy, so the CLI can build its options from it
without loading the engine.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal, get_args

Mode = Literal["train", "inference"]
#: Precisions the memory model stores weights in (``RunConfig.precision``).
Precision = Literal["fp64", "fp32", "fp16", "bf16", "mixed", "int8", "int4"]
#: Precisions the performance model computes in: the memory precisions plus
#: tf32 and fp8, which have no storage format of their own.
PerfPrecision = Literal["fp64", "fp32", "tf32", "mixed", "fp16", "bf16", "fp8", "int8", "int4"]
#: The working precisions ``recommend --precision`` accepts (rules are written for these).
RulePrecision = Literal["fp64", "fp32", "tf32", "mixed", "fp16", "bf16", "fp8", "int8"]
Optimizer = Literal["sgd", "momentum", "adam", "adamw", "adafactor", "adam8bit"]
Strategy = Literal["ddp", "zero1", "zero2", "zero3", "fsdp", "tp"]
Head = Literal["lm", "classifier"]
Phase = Literal["decode", "prefill"]
#: Which fused-attention kernels a run uses: current ones (FlashAttention-2/3, cuDNN),
#: timed at the matmuls' efficiency, or the slower ones LLM Foundry measured in 2023.
AttentionKernels = Literal["current", "llm-foundry-2023"]

PRECISIONS: tuple[str, ...] = get_args(Precision)
PERF_PRECISIONS: tuple[str, ...] = get_args(PerfPrecision)
RULE_PRECISIONS: tuple[str, ...] = get_args(RulePrecision)
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
STRATEGIES: tuple[str, ...] = get_args(Strategy)
HEADS: tuple[str, ...] = get_args(Head)
PHASES: tuple[str, ...] = get_args(Phase)


def choice_enum(name: str, values: tuple[str, ...]) -> type[Enum]:
    """A ``str`` Enum with one member per value, for a typer option's choices."""
    return Enum(name, [(v, v) for v in values], type=str)  # type: ignore[return-value]
