"""The closed sets of choices the engine and the CLI share, each written once.

Precisions live in :mod:`gpusizer.domain.precision` and strategies in
:mod:`gpusizer.domain.parallelism`, with what they mean; the small sets here
are plain names.

Every set is a ``Literal`` type (what the engine's models validate and the
CLI's options accept) with the tuple of its values beside it (what messages list).
This module imports nothing heavy, so the CLI can build its options from it
without loading the engine.
"""

from __future__ import annotations

from typing import Literal, get_args

Mode = Literal["train", "inference"]
#: The most concurrent sequences (users) a serving deployment is sized for: the bound the CLI's
#: options and the engine's checks share
MAX_USERS = 1 << 20
#: adam8bit: bitsandbytes 8-bit Adam; paged-adamw-8bit the same with its state in paged (CPU-evictable) memory
Optimizer = Literal["sgd", "momentum", "adam", "adamw", "adafactor", "adam8bit", "paged-adamw-8bit"]
#: How the optimizer steps: one fused kernel (the default of transformers' Trainer on
#: PyTorch >= 2.8, torchtune, DeepSpeed and Megatron), PyTorch's multi-tensor "foreach"
#: kernels (torch.optim's own CUDA default), or a loop over parameters
#: Adam's two fp32 moments, and the 8-bit optimizer that keeps them in a byte each (fit-model's remedies)
ADAM_OPTIMIZERS: tuple[str, ...] = ("adam", "adamw")
EIGHT_BIT_ADAM: Optimizer = "adam8bit"
#: bitsandbytes' 8-bit optimizers: CUDA kernels that step state on the GPU
BNB_OPTIMIZERS: tuple[str, ...] = ("adam8bit", "paged-adamw-8bit")
OptimizerImpl = Literal["fused", "foreach", "per-tensor"]
Head = Literal["lm", "classifier"]
#: Inference logits: the last position only (generate(), serving engines) or every position (a plain forward pass, scoring)
Logits = Literal["last", "all"]
#: Attention kernels: fused (PyTorch SDPA, FlashAttention; no score matrix kept) or eager (the score matrix materialised)
Attention = Literal["fused", "eager"]
#: Training loss over the vocabulary: full fp32 logits, or a fused chunked kernel
LossKind = Literal["full", "chunked", "fused"]
Phase = Literal["decode", "prefill"]
#: Which fused-attention kernels a run uses: current ones (FlashAttention-2/3, cuDNN),
#: timed at the matmuls' efficiency, or the slower ones LLM Foundry measured in 2023.
AttentionKernels = Literal["current", "llm-foundry-2023"]
#: How recommend orders its rows: by rule score, predicted speed, or speed per dollar.
Sort = Literal["score", "speed", "value"]

OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
HEADS: tuple[str, ...] = get_args(Head)
PHASES: tuple[str, ...] = get_args(Phase)
SORTS: tuple[str, ...] = get_args(Sort)

