"""The closed sets of choices the engine and the CLI share, each written once.

Precisions live in :mod:`gpusizer.domain.precision` and strategies in
:mod:`gpusizer.domain.parallelism`, with what they mean; the small sets here
are plain names.

Every set is a ``Literal`` type (what the engine's models validate) with the
tuple of its values beside it (what messages and the CLI's option enums list).
This module imports nothing heavy, so the CLI can build its options from it
without loading the engine.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal, get_args

Mode = Literal["train", "inference"]
Optimizer = Literal["sgd", "momentum", "adam", "adamw", "adafactor", "adam8bit"]
Head = Literal["lm", "classifier"]
Phase = Literal["decode", "prefill"]
#: Which fused-attention kernels a run uses: current ones (FlashAttention-2/3, cuDNN),
#: timed at the matmuls' efficiency, or the slower ones LLM Foundry measured in 2023.
AttentionKernels = Literal["current", "llm-foundry-2023"]

OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
HEADS: tuple[str, ...] = get_args(Head)
PHASES: tuple[str, ...] = get_args(Phase)


def choice_enum(name: str, values: tuple[str, ...]) -> type[Enum]:
    """A ``str`` Enum with one member per value, for a typer option's choices."""
    return Enum(name, [(v, v) for v in values], type=str)  # type: ignore[return-value]
