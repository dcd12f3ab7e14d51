"""RunConfig: what is run and how, built on Precision, Parallelism and ModelShape.

The training and inference rules live here and in :mod:`.precision`: which
precisions can train (:func:`~gpusizer.domain.precision.check_mode`), the
default precision of each mode, and the validation of a whole run. The engine
raises :class:`~gpusizer.errors.UsageError` in domain words; the CLI maps them
to its options.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from gpusizer.choices import Logits, LossKind, Mode, Optimizer, OptimizerImpl
from gpusizer.domain.finetune import Adapter
from gpusizer.domain.parallelism import (
    LAYOUT_DEGREES,
    Offload,
    OffloadTarget,
    Parallelism,
    Sharding,
    Strategy,
    offload_strategy,
    runs_deepspeed,
    sharding,
)
from gpusizer.domain.precision import (
    WEIGHT_FORMATS,
    KvCache,
    Precision,
    Storage,
    StoragePrecision,
    WeightFormatName,
    check_mode,
    deepspeed_storage,
    default_precision,
    precision_spec,
    storage_spec,
)
from gpusizer.errors import UsageError

#: Allocator slack (fragmentation of PyTorch's caching allocator) as a fraction
#: of peak tensor memory; see docs/method.md.
DEFAULT_FRAGMENTATION = 0.05


class RunConfig(BaseModel):
    """What is run, and how. ``batch`` is per GPU (per model replica for tp, pp and cp: one
    micro-batch, ``micro_batches`` of them a step).

    ``precision`` is the storage precision the memory model counts; a run that
    computes in tf32 or fp8 names its storage with
    :func:`~gpusizer.domain.precision.storage_precision`. ``strategy`` over
    ``gpus`` GPUs is the parallelism (:attr:`parallelism`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    mode: Mode = "train"
    precision: StoragePrecision = "mixed"
    optimizer: Optimizer = "adamw"
    batch: int = Field(default=1, ge=1, le=1 << 24)
    seq_len: int | None = Field(default=None, ge=1, le=1 << 24)
    image_size: int | None = Field(default=None, ge=8, le=16384)
    #: encoder-decoder models: decoder (target) length; default seq_len
    target_len: int | None = Field(default=None, ge=1, le=1 << 24)
    checkpointing: bool = False
    #: fused attention kernels (PyTorch SDPA, FlashAttention), the default in PyTorch,
    #: transformers and every serving engine; False materialises the score matrix
    flash_attention: bool = True
    #: inference: logits of the last position only (generation, serving) or of all
    #: positions (a plain forward pass, scoring, evaluation)
    logits: Logits = "last"
    #: the KV cache's format during inference ("auto": the activations' precision)
    kv_cache: KvCache = "auto"
    #: LoRA/QLoRA adapters on a frozen base; None trains every parameter
    adapter: Adapter | None = None
    #: inference: a published weight format (GPTQ, AWQ, MXFP4, FP8, GGUF) instead of
    #: the precision's own storage; it runs on that format's compute path
    weight_format: WeightFormatName | None = None
    #: what lives in host memory (or NVMe) instead of on the GPU
    offload: Offload = "none"
    offload_to: OffloadTarget = "cpu"
    #: training loss: "full" materialises the fp32 logits and log-softmax (PyTorch's
    #: cross-entropy, the transformers default); "chunked" keeps 16-bit logits and
    #: upcasts one of 8 chunks at a time (torchtune); "fused" computes them chunk by
    #: chunk (Liger-Kernel's fused linear cross-entropy)
    loss: LossKind = "full"
    #: what the transformer's output head computes: vocabulary logits for every
    #: token (language modelling) or a handful of classes from one token
    head: Literal["lm", "classifier", "logits"] = "lm"
    #: gradients stay allocated between steps: gradient accumulation, or
    #: zero_grad(set_to_none=False), the default before PyTorch 2.0
    persistent_grads: bool = False
    #: how the optimizer steps (choices.OptimizerImpl); only foreach holds a temporary of
    #: every parameter at once
    optimizer_impl: OptimizerImpl = "fused"
    #: GPUs the model is spread over by ``strategy``
    gpus: int = Field(default=1, ge=1, le=1 << 16)
    strategy: Strategy = "ddp"
    #: internal: a ZeRO strategy keeps model state as DeepSpeed does (:attr:`storage`); the
    #: performance model's memory traffic turns it off, as its constants were fitted on AMP's
    #: layout (not in the input echo, and not kept through a dump)
    deepspeed_layout: bool = Field(default=True, exclude=True)
    #: tensor-parallel degree; None: every GPU left by pp and cp under strategy "tp", else 1
    tp: int | None = Field(default=None, ge=1, le=1 << 16)
    #: pipeline stages (1F1B), context-parallel ranks, expert-parallel ranks
    #: (domain.parallelism says how they combine with ``gpus`` and ``strategy``)
    pp: int = Field(default=1, ge=1, le=1 << 16)
    cp: int = Field(default=1, ge=1, le=1 << 16)
    ep: int = Field(default=1, ge=1, le=1 << 16)
    #: micro-batches of ``batch`` per optimizer step (gradient accumulation); with pipeline
    #: parallelism the 1F1B schedule's micro-batches
    micro_batches: int = Field(default=1, ge=1, le=1 << 16)
    #: fixed overhead in bytes (CUDA context); None = default
    context_bytes: int | None = Field(default=None, ge=0, le=1 << 40)
    fragmentation: float = Field(default=DEFAULT_FRAGMENTATION, ge=0, le=1)

    @model_validator(mode="before")
    @classmethod
    def _default_precision(cls, data: Any) -> Any:
        """No precision given: the mode's default (AMP to train, fp16 to serve). A training run
        that offloads under ddp runs on DeepSpeed's ZeRO stage for it (:func:`.parallelism.offload_strategy`).
        ``attention="fused"|"eager"`` is accepted for ``flash_attention``."""
        if isinstance(data, dict) and "attention" in data:
            attention = data["attention"]
            if attention not in ("fused", "eager"):
                raise ValueError(f"attention {attention!r} is not fused or eager")
            data = {k: v for k, v in data.items() if k != "attention"}
            data["flash_attention"] = attention == "fused"
        if isinstance(data, dict) and data.get("weight_format") is not None and data.get("precision") is None:
            fmt = WEIGHT_FORMATS.get(str(data["weight_format"]))
            if fmt is not None:
                data = {**data, "precision": fmt.runs_as}
        if isinstance(data, dict) and data.get("offload") not in (None, "none"):
            data = {**data, "strategy": run_strategy(data)}
        if isinstance(data, dict) and data.get("precision") is None:
            # adapters train on a frozen 16-bit base (peft with Trainer(bf16=True))
            mode = data.get("mode") or "train"
            return {**data, "precision": default_precision(mode, adapters=data.get("adapter") is not None)}
        return data

    @field_validator("weight_format")
    @classmethod
    def _formats_serve(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("mode") == "train":
            raise ValueError("weight formats are for inference; to fine-tune a 4-bit base, use QLoRA adapters")
        return value

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        try:
            check_mode(self.precision, self.mode)
        except UsageError as exc:
            raise ValueError(exc.message) from None
        return self

    @property
    def training(self) -> bool:
        return self.mode == "train"

    @property
    def spec(self) -> Precision:
        """The precision's table row."""
        return precision_spec(self.precision)

    @property
    def deepspeed(self) -> bool:
        """Whether this run is DeepSpeed ZeRO (:func:`.parallelism.runs_deepspeed`)."""
        return runs_deepspeed(self.strategy, self.layout_degrees)

    @property
    def precision_storage(self) -> Storage:
        """How the precision stores weights, gradients and optimizer state (on its own)."""
        return storage_spec(self.precision)

    @property
    def storage(self) -> Storage:
        """How this run stores weights, gradients and optimizer state: the precision's way, or,
        when DeepSpeed ZeRO trains, DeepSpeed's (:func:`.precision.deepspeed_storage`: AMP as
        its 16-bit mode, an fp32 master copy with fp32 optimizer state). Adapters keep their
        own widths; their frozen base is cast with the module."""
        st = storage_spec(self.precision)
        if self.training and self.deepspeed_layout and self.deepspeed:
            return deepspeed_storage(st)
        return st

    @property
    def parallelism(self) -> Parallelism:
        return Parallelism.of(self.strategy, self.gpus, tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep)

    @property
    def layout_degrees(self) -> dict[str, int | None]:
        """The model-parallel degrees as given (for Parallelism.of and of_cluster)."""
        return {"tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep}

    @property
    def sharding(self) -> Sharding:
        """What each GPU holds (the one sharding rule, :func:`.parallelism.sharding`)."""
        return sharding(self.parallelism)


def run_strategy(settings: Mapping[str, Any]) -> str:
    """The strategy a run of these RunConfig ``settings`` takes: a training run that offloads under
    ddp runs on DeepSpeed ZeRO, the only framework that offloads under plain data parallelism
    (:func:`.parallelism.offload_strategy`); any other run keeps the strategy given."""
    return offload_strategy(str(settings.get("strategy") or "ddp"), str(settings.get("offload") or "none"),
                            str(settings.get("offload_to") or "cpu"), (settings.get("mode") or "train") == "train",
                            {k: settings.get(k) for k in LAYOUT_DEGREES})


def make_run_config(**kwargs: object) -> RunConfig:
    """A RunConfig from optional settings (None means the default), with a bad
    combination reported as a one-line UsageError."""
    given = {k: v for k, v in kwargs.items() if v is not None}
    if isinstance(given.get("precision"), str) and isinstance(given.get("mode", "train"), str):
        check_mode(str(given["precision"]), str(given.get("mode", "train")))  # the one training rule, with its field
    try:
        return RunConfig.model_validate(given)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        msg = str(err["msg"]).removeprefix("Value error, ")
        field = str(err["loc"][0]) if err["loc"] else None
        raise UsageError(msg.removeprefix(f"{field}: ") if field else msg, field=field) from None


__all__ = ["DEFAULT_FRAGMENTATION", "RunConfig", "make_run_config", "run_strategy"]
