"""What exact mode traces and what it returns; no torch needed to import this."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpusizer.domain.parallelism import LAYOUT_DEGREES
from gpusizer.domain.run import RunConfig
from gpusizer.errors import UsageError

SourceKind = Literal["hf-config", "hf-model", "torch-model"]

#: MODULE:CALLABLE, both dotted Python names
_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

#: an input shape's rank and each dimension's bound
MAX_INPUT_RANK = 6
MAX_INPUT_DIM = 1 << 20


class ModelSource(BaseModel):
    """The model exact mode builds: a Hugging Face config (a local file, or one read
    from the Hub into ``path``), or a Python callable that returns an ``nn.Module``."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: SourceKind
    #: the config.json path, the Hub repo id, or MODULE:CALLABLE
    ref: str
    #: for hf-model: where the Hub's config.json was stored locally
    path: str | None = None
    #: one sample's input shape for a torch model, e.g. (3, 224, 224); default from --image-size
    input_shape: tuple[int, ...] | None = None
    #: run the repository's own modelling code (only when the user asks)
    trust_remote_code: bool = False


def parse_callable(text: str) -> tuple[str, str]:
    """``torchvision.models:resnet101`` -> (module, attribute path)."""
    if not _CALLABLE.match(text):
        raise UsageError(f"{text[:80]!r} is not MODULE:CALLABLE", hint="e.g. torchvision.models:resnet101",
                         field="torch_model")
    module, attr = text.split(":", 1)
    return module, attr


def parse_input_shape(text: str) -> tuple[int, ...]:
    """``3,224,224`` or ``3x224x224`` -> (3, 224, 224): one sample's shape, without the batch."""
    parts = [p for p in re.split(r"[,x ]+", text.strip()) if p]
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if not dims or len(dims) > MAX_INPUT_RANK or any(not 1 <= d <= MAX_INPUT_DIM for d in dims):
        raise UsageError(f"input shape {text[:80]!r} is not 1 to {MAX_INPUT_RANK} positive sizes",
                         hint="one sample's shape without the batch, e.g. 3,224,224", field="input_shape")
    return dims


#: the hint when exact mode cannot trace a run
ANALYTIC = "the analytic model (not exact mode) estimates this run"

#: settings exact mode cannot trace on a CPU, and why; each points back to the analytic path
_UNTRACEABLE: tuple[tuple[str, object, str], ...] = (
    ("gpus", 1, "exact mode traces one GPU; sharded and parallel runs use the analytic model"),
    (LAYOUT_DEGREES[0], None, "exact mode traces one GPU; tensor parallelism uses the analytic model"),
    *((degree, 1, "exact mode traces one GPU; pipeline, context and expert parallelism use the analytic model")
      for degree in LAYOUT_DEGREES[1:]),
    ("offload", "none", "offloading moves state off the GPU outside PyTorch's ops"),
    ("weight_format", None, "published quantised weight formats need their CUDA kernels"),
    ("kv_cache", "auto", "quantised KV caches need a serving engine's kernels"),
    ("loss", "full", "chunked and fused losses come from torchtune and Liger-Kernel"),
)


#: optimizers exact mode cannot run under fake tensors, and why
UNTRACEABLE_OPTIMIZERS: dict[str, str] = {
    "adam8bit": "bitsandbytes' 8-bit optimizers need CUDA",
    "paged-adamw-8bit": "bitsandbytes' 8-bit optimizers need CUDA",
    "adafactor": "PyTorch's Adafactor reads its step count back as a number, which fake tensors cannot give",
}


def check_traceable(cfg: RunConfig) -> None:
    """Raise, in domain words, if ``cfg`` asks for something exact mode cannot run."""
    for field, plain, why in _UNTRACEABLE:
        if getattr(cfg, field) != plain:
            raise UsageError(f"exact mode cannot trace {field.replace('_', ' ')} {getattr(cfg, field)!s}: {why}",
                             hint=ANALYTIC, field=field)
    if cfg.head != "lm":
        raise UsageError(f"exact mode runs the model's own head and loss; a {cfg.head} head is the analytic "
                         "model's setting", hint=ANALYTIC, field="head")
    if cfg.storage.quantised:
        raise UsageError(f"exact mode cannot trace {cfg.precision} weights: quantised kernels need CUDA",
                         hint=ANALYTIC, field="precision")
    reason = UNTRACEABLE_OPTIMIZERS.get(cfg.optimizer) if cfg.training else None
    if reason is not None:
        raise UsageError(f"exact mode cannot trace {cfg.optimizer}: {reason}", hint=ANALYTIC, field="optimizer")
    if cfg.adapter is not None and cfg.adapter.base_quantisation is not None:
        raise UsageError("exact mode cannot trace QLoRA: bitsandbytes' 4-bit layers need CUDA",
                         hint="trace LoRA of the same rank, or use the analytic model", field="adapter")


class ExactTrace(BaseModel):
    """Live tensor bytes of one traced step, split by what holds them."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    model_class: str
    params: int
    trainable_params: int
    #: parameters and buffers
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    #: training: what autograd saved for backward (live at the end of the forward
    #: pass, less weights and optimizer state); inference: the other tensors at the peak
    activations_bytes: int
    kv_cache_bytes: int
    tensor_peak_bytes: int
    peak_phase: Literal["forward", "backward", "optimizer", "inference"]
    #: the peak's composition: weights, gradients, optimizer, kv_cache, other
    peak_bytes_by_kind: dict[str, int]
    #: the highest live bytes in each phase of the traced step
    phase_peak_bytes: dict[str, int] = Field(default_factory=dict)
    #: ops run in the traced step, and the seconds the trace took
    ops: int
    seconds: float
    versions: dict[str, str] = Field(default_factory=dict)
    notes: tuple[str, ...] = ()
