"""Training and inference memory: the one source of truth for every memory formula.

``fit-model``, ``recommend`` and ``estimate`` all call :func:`estimate_memory`.
Every formula is explained, with citations, in ``docs/method.md`` ("Memory").
All sizes are integer bytes.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpusizer.choices import Mode, Optimizer, Precision, Strategy
from gpusizer.errors import UsageError
from gpusizer.models.zoo import Model
from gpusizer.units import GIB, MIB

#: Bytes per weight, by precision. ``mixed`` keeps fp32 master weights (PyTorch
#: AMP); its 16-bit working copies are counted with the activations.
WEIGHT_BYTES: dict[str, float] = {"fp64": 8, "fp32": 4, "mixed": 4, "fp16": 2, "bf16": 2, "int8": 1, "int4": 0.5}
#: Bytes per gradient element: gradients take the dtype of the weights.
GRAD_BYTES: dict[str, float] = {"fp64": 8, "fp32": 4, "mixed": 4, "fp16": 2, "bf16": 2}
#: Optimizer state elements per parameter (Adafactor is handled from shapes).
OPTIMIZER_STATES: dict[str, int] = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2, "adafactor": 0, "adam8bit": 2}
#: Bytes of activations per element: 16-bit for everything autocast or .half() touches.
ACT_BYTES: dict[str, int] = {"fp64": 8, "fp32": 4, "mixed": 2, "fp16": 2, "bf16": 2, "int8": 2, "int4": 2}
#: Extra bytes per weight for quantisation scales: int4 as bitsandbytes NF4 stores
#: it by default (one fp32 absmax per block of 64 weights; GPTQ/AWQ with groups of
#: 128 need less), int8 with per-row scales (negligible).
QUANT_SCALE_BYTES: dict[str, float] = {"int8": 0.0, "int4": 4 / 64}

#: Default fixed overhead: the CUDA context and kernels loaded by PyTorch.
#: HF "Model training anatomy" measured 1343 MiB on a V100 before CUDA 11.7 lazy
#: loading; with lazy loading (the default since PyTorch 2.x) contexts measure
#: 300-500 MiB. We take 500 MiB; see docs/method.md.
DEFAULT_CONTEXT_BYTES = 500 * MIB
#: Default allocator slack (fragmentation of PyTorch's caching allocator) as a
#: fraction of peak tensor memory; see docs/method.md.
DEFAULT_FRAGMENTATION = 0.05


class RunConfig(BaseModel):
    """What is run, and how. ``batch`` is per GPU (per model replica for tp)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = "train"
    precision: Precision = "mixed"
    optimizer: Optimizer = "adamw"
    batch: int = Field(default=1, ge=1, le=1 << 24)
    seq_len: int | None = Field(default=None, ge=1, le=1 << 24)
    image_size: int | None = Field(default=None, ge=8, le=16384)
    #: encoder-decoder models: decoder (target) length; default seq_len
    target_len: int | None = Field(default=None, ge=1, le=1 << 24)
    checkpointing: bool = False
    flash_attention: bool = False
    #: what the transformer's output head computes: vocabulary logits for every
    #: token (language modelling) or a handful of classes from one token
    head: Literal["lm", "classifier", "logits"] = "lm"
    #: gradients stay allocated between steps: gradient accumulation, or
    #: zero_grad(set_to_none=False), the default before PyTorch 2.0
    persistent_grads: bool = False
    gpus: int = Field(default=1, ge=1, le=1 << 16)
    strategy: Strategy = "ddp"
    #: fixed overhead in bytes (CUDA context); None = default
    context_bytes: int | None = Field(default=None, ge=0)
    fragmentation: float = Field(default=DEFAULT_FRAGMENTATION, ge=0, le=1)

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        if self.mode == "train" and self.precision in ("int8", "int4"):
            raise ValueError(
                f"precision {self.precision} is weight-only quantisation for inference; "
                "train with fp32, mixed, fp16 or bf16"
            )
        return self


class ModelShape(BaseModel):
    """What the memory model needs of a model: from the zoo, an HF config, or --params."""

    model_config = ConfigDict(frozen=True)

    name: str
    params: int
    kind: Literal["cnn", "rnn", "encoder", "encoder-decoder", "decoder", "unknown"] = "unknown"
    model: Model | None = None

    @property
    def is_transformer(self) -> bool:
        return self.model is not None and self.model.is_transformer


class MemoryBreakdown(BaseModel):
    """Per-GPU memory of one run. ``total_bytes`` is the peak, not the sum:
    activations are freed during backward while gradients are written, so the
    two are not all live at once (see ``peak_phase``)."""

    model_config = ConfigDict(frozen=True)

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    kv_cache_bytes: int
    #: transient buffers at the peak: the loss/logits gradient, gathered
    #: FSDP/ZeRO-3 layers, DDP gradient buckets, a recomputed layer
    transient_bytes: int
    #: CUDA context plus allocator fragmentation
    overhead_bytes: int
    context_bytes: int
    fragmentation_bytes: int
    #: peak bytes of live tensors (without overhead)
    tensor_peak_bytes: int
    total_bytes: int
    peak_phase: Literal["forward", "backward", "optimizer", "inference"]
    activations_modelled: bool
    notes: tuple[str, ...] = ()


# --------------------------------------------------------------------------
# parameter counts from shapes


def attention_params(m: Model) -> int:
    h, d, a, g = m.hidden, m.attention_head_dim, m.heads, m.n_kv_heads
    return h * a * d + 2 * h * g * d + a * d * h


def mlp_params(m: Model) -> int:
    gated = m.mlp in ("swiglu", "geglu")
    return (3 if gated else 2) * m.hidden * m.ffn


def layer_params(m: Model) -> int:
    """Weights of one transformer layer (biases and norms are negligible here)."""
    experts = m.experts or 1
    return attention_params(m) + experts * mlp_params(m)


def matrix_params(m: Model) -> int:
    """Weights that sit in the transformer layers' linear layers (quantisable)."""
    layers = m.layers + (m.decoder_layers or 0)
    cross = (m.decoder_layers or 0) * attention_params(m)
    return layers * layer_params(m) + cross


# --------------------------------------------------------------------------
# activations


def _score_bytes_per_element(p: int, softmax_fp32: bool, dropout: bool) -> int:
    """Bytes saved per attention-score element in eager attention.

    Softmax backward needs its output; attention-times-V needs its input (a
    16-bit copy when softmax ran in fp32); dropout adds a one-byte mask. With
    16-bit softmax and dropout this is Korthikanti's 2 + 1 + 2 = 5 bytes.
    """
    softmax_out = 4 if softmax_fp32 else p
    if dropout:
        return softmax_out + 1 + p
    return softmax_out if softmax_out == p else softmax_out + p


def _layer_activation_bytes(
    m: Model, s: int, b: int, p: int, *, dropout: bool, flash: bool, tp: int, cross_len: int | None = None,
    residual_bytes: int | None = None, softmax_fp32: bool = False,
) -> int:
    """Saved-for-backward bytes of one transformer layer.

    Korthikanti et al. 2022, section 4.1, generalised for grouped KV heads,
    gated MLPs, element width ``p`` and the absence of dropout. With GPT's
    shape (ffn = 4h, MHA), 16-bit activations and dropout it reduces to
    s*b*h*(34 + 5*a*s/h); with tensor parallelism t to s*b*h*(10 + 24/t + 5*a*s/(h*t)).
    """
    h, a, g, d, f = m.hidden, m.heads, m.n_kv_heads, m.attention_head_dim, m.ffn
    sbh = s * b * h
    r = residual_bytes if residual_bytes is not None else p
    mask = 1 if dropout else 0
    score_elem = _score_bytes_per_element(p, softmax_fp32, dropout)
    k = m.experts_per_token or 1

    # replicated across tensor-parallel ranks: the two norm inputs, their outputs
    # (the QKV and MLP inputs) and the dropout masks after the two projections.
    replicated = 2 * r * sbh + 2 * p * sbh + 2 * mask * sbh
    if m.norm == "rmsnorm":
        # x.to(float32).pow(2).mean() then x * rsqrt(...) then weight * (...):
        # an fp32 tensor more per norm than a fused norm keeps
        replicated += 2 * 4 * sbh

    # grouped KV heads are repeated to the full head count before the attention
    # matmuls (HF's repeat_kv), so K and V are saved at a heads each
    qkv = p * s * b * (a * d + 2 * a * d)
    proj_in = p * s * b * a * d
    if flash:
        # no s x s matrix: the fused kernel saves its own output and an fp32
        # log-sum-exp per row (the projection saves a reshaped copy of the output)
        scores = p * s * b * a * d + 4 * a * s * b
    else:
        scores = score_elem * a * s * s * b
    attention = qkv + proj_in + scores

    if m.mlp in ("swiglu", "geglu"):
        mlp = 4 * p * s * b * f
    elif m.mlp == "relu":
        mlp = p * s * b * f + ((p + 1) * s * b * f if dropout else 0)
    elif m.mlp == "gelu_new":
        # 0.5*x*(1 + tanh(c*(x + 0.044715*x^3))) op by op saves x (pow's input),
        # tanh's output, 0.5*x, 1 + tanh and the product; under CUDA autocast pow
        # runs in fp32, so x's copy, tanh and 1 + tanh are fp32 (4+4+2+4+2 bytes)
        per = 16 if r == 4 and p == 2 else 5 * p
        mlp = per * s * b * f
    else:  # gelu: input and output of the activation
        mlp = 2 * p * s * b * f
    mlp *= k

    cross = 0
    if cross_len is not None:
        # decoder cross-attention: its norm input/output, Q, the encoder's K and V
        # (projected per layer), scores and the output projection input
        t_len = cross_len
        cross = 2 * r * sbh + p * s * b * a * d * 2 + 2 * p * t_len * b * g * d
        cross += (4 * a * s * b) if flash else score_elem * a * s * t_len * b
        cross += mask * sbh
    return replicated + (attention + mlp + cross) // tp


def transformer_activation_bytes(
    m: Model, cfg: RunConfig, seq_len: int, *, tp: int = 1, shards: int = 1
) -> tuple[int, int, int]:
    """(saved activations, one layer's activations, logits bytes) for a training step.

    Includes the embedding output, final norm, logits and the fp32 log-softmax
    that cross-entropy saves. Under AMP the residual stream stays fp32. With
    checkpointing only each layer's input is kept, and one layer is recomputed
    during backward (returned as the second value, a transient).
    """
    p = ACT_BYTES[cfg.precision]
    r = 4 if cfg.precision in ("fp32", "mixed") else p
    b, s = cfg.batch, seq_len
    dropout = bool(m.dropout)
    # CUDA autocast runs softmax in fp32; some implementations upcast it themselves
    softmax_fp32 = cfg.precision == "mixed" or bool(m.softmax_fp32)
    kw = {"dropout": dropout, "flash": cfg.flash_attention, "tp": tp, "residual_bytes": r, "softmax_fp32": softmax_fp32}
    layer = _layer_activation_bytes(m, s, b, p, **kw)
    dec_layer = 0
    t = cfg.target_len or s
    if m.decoder_layers:
        dec_layer = _layer_activation_bytes(m, t, b, p, cross_len=s, **kw)
    sbh = s * b * m.hidden
    if cfg.checkpointing:
        stored = m.layers * r * sbh + (m.decoder_layers or 0) * r * t * b * m.hidden
        recompute = max(layer, dec_layer)
    else:
        stored = m.layers * layer + (m.decoder_layers or 0) * dec_layer
        recompute = 0
    # embedding dropout mask and final norm input
    stored += (sbh if dropout else 0) + r * sbh
    # cross-entropy saves the fp32 log-softmax of the logits (the logits themselves
    # are not saved: the output head saves its input); at the start of backward
    # its fp32 gradient and that gradient cast to the logits' dtype are live
    t_len = cfg.target_len or s
    tokens_out = t_len * b
    if cfg.head == "lm":
        saved_logits = 4 * tokens_out * m.vocab // tp
        logits = (4 + p) * tokens_out * m.vocab // tp
    elif cfg.head == "logits":  # logits kept, no cross-entropy (e.g. loss = logits.sum())
        saved_logits = p * tokens_out * m.vocab // tp
        logits = p * tokens_out * m.vocab // tp
    else:
        saved_logits = logits = 0
    if cfg.precision == "mixed" and not cfg.checkpointing:
        # autocast's 16-bit copies of the layer weights are saved for backward
        # (under checkpointing they are recomputed instead); sharded runs hold
        # copies of their own shard only
        stored += int(2 * matrix_params(m) / shards)
    return stored + saved_logits, recompute, logits


#: sequence length when none is given: the model's context, capped at 2048 tokens
DEFAULT_SEQ_CAP = 2048


def transformer_seq_len(m: Model, cfg: RunConfig) -> int:
    """The sequence length a run uses: --seq-len, else the model's context
    (512 if unknown), capped at DEFAULT_SEQ_CAP."""
    return cfg.seq_len or min(m.max_seq_len or 512, DEFAULT_SEQ_CAP)


def activation_bytes(shape: ModelShape, cfg: RunConfig) -> tuple[int, int, int, bool]:
    """(saved activations, recompute transient, logits/loss transient, modelled?)."""
    m = shape.model
    if m is None:
        return 0, 0, 0, False
    tp = cfg.gpus if cfg.strategy == "tp" else 1
    if m.is_transformer:
        seq = transformer_seq_len(m, cfg)
        shards = cfg.gpus if cfg.strategy in ("tp", "fsdp", "zero3") else 1
        saved, recompute, logits = transformer_activation_bytes(m, cfg, seq, tp=tp, shards=shards)
        return saved, recompute, logits, True
    per_sample = m.activation_bytes_per_sample_fp32
    if cfg.precision == "mixed" and m.activation_bytes_per_sample_mixed:
        per_sample = m.activation_bytes_per_sample_mixed
    elif cfg.precision in ("fp16", "bf16"):
        per_sample = per_sample // 2
    copies = 0
    if cfg.precision == "mixed" and not cfg.checkpointing:
        # autocast's 16-bit weight copies, saved for backward (the zoo's mixed
        # figures are per sample and leave them out)
        copies = 2 * shape.params
    scale = 1.0
    if m.kind == "cnn" and cfg.image_size and m.image_size:
        scale = (cfg.image_size / m.image_size) ** 2
    if m.kind == "rnn" and cfg.seq_len and m.seq_len:
        scale = cfg.seq_len / m.seq_len
    transient = 0
    if m.kind == "rnn" and m.vocab and cfg.head == "lm":
        # the per-token figure includes the saved log-softmax; its gradient and
        # the logits' gradient are live at the start of backward
        seq = cfg.seq_len or m.seq_len or 1
        transient = (4 + ACT_BYTES[cfg.precision]) * cfg.batch * seq * m.vocab
    return int(per_sample * scale * cfg.batch / tp) + copies, 0, transient, True


# --------------------------------------------------------------------------
# weights, gradients, optimizer


def head_gradient_bytes(shape: ModelShape, cfg: RunConfig) -> int:
    """Gradients of the last layers, written at the very start of backward: a
    transformer's output head (vocab x hidden; with tied embeddings the
    embedding's gradient is allocated then), a CNN's classifier (the zoo's
    ``head_params``), an RNN's decoder (vocab x hidden)."""
    m = shape.model
    if m is None or cfg.mode != "train":
        return 0
    width = GRAD_BYTES.get(cfg.precision, 4)
    shards = cfg.gpus if cfg.strategy in ("zero2", "zero3", "fsdp", "tp") and cfg.gpus > 1 else 1
    if m.kind == "cnn":
        return int((m.head_params or 0) * width / shards)
    if m.vocab and m.hidden and cfg.head == "lm":
        return int(m.vocab * m.hidden * width / shards)
    return 0


def adafactor_state_elements(shape: ModelShape) -> int:
    """Adafactor (no momentum) keeps a row and a column factor per matrix.

    For transformers we know the matrices; otherwise we count the weights as
    if they formed square matrices of one layer's size, which is small either way.
    """
    m = shape.model
    if m is not None and m.is_transformer:
        h, f = m.hidden, m.ffn
        per_layer = 4 * (h + h) + (3 if m.mlp in ("swiglu", "geglu") else 2) * (h + f)
        layers = m.layers + (m.decoder_layers or 0)
        return layers * per_layer * (m.experts or 1) + (m.vocab + h)
    return 2 * int(math.isqrt(shape.params)) * 64


def weight_bytes(shape: ModelShape, precision: str) -> int:
    """Weights; for int8/int4 only the layers' linear weights are quantised,
    embeddings and the output head stay 16-bit (GPTQ, AWQ, LLM.int8 all do this)."""
    if precision in ("int8", "int4"):
        m = shape.model
        quantised = min(matrix_params(m), shape.params) if (m is not None and m.is_transformer) else shape.params
        rest = shape.params - quantised
        return int(quantised * (WEIGHT_BYTES[precision] + QUANT_SCALE_BYTES[precision]) + rest * 2)
    return int(shape.params * WEIGHT_BYTES[precision])


def optimizer_bytes(shape: ModelShape, cfg: RunConfig) -> int:
    if cfg.mode != "train":
        return 0
    if cfg.optimizer == "adafactor":
        return 4 * adafactor_state_elements(shape)
    if cfg.optimizer == "adam8bit":
        # bitsandbytes: m and v in 8 bits, one fp32 absmax per 2048-element block each
        return int(shape.params * (2 + 2 * 4 / 2048))
    state_width = {"fp16": 2, "bf16": 2, "fp64": 8}.get(cfg.precision, 4)
    return shape.params * OPTIMIZER_STATES[cfg.optimizer] * state_width


# --------------------------------------------------------------------------
# inference


def kv_cache_bytes(m: Model, batch: int, seq_len: int, p: int, tp: int = 1) -> int:
    """2 (K and V) x layers x batch x seq x kv_heads x head_dim x bytes."""
    layers = m.decoder_layers or m.layers
    return 2 * layers * batch * seq_len * m.n_kv_heads * m.attention_head_dim * p // tp


def inference_working_bytes(m: Model, cfg: RunConfig, seq_len: int, tp: int = 1) -> int:
    """Transient activations of a prefill pass over ``seq_len`` tokens.

    Nothing is saved for backward; the peak is the largest set of tensors
    alive at once inside a layer: the hidden state and its norm, the MLP's
    intermediate tensors, or (without flash attention) the score matrix, plus
    the last position's fp32 logits (generation computes only those).
    """
    p = ACT_BYTES[cfg.precision]
    b, s, h = cfg.batch, seq_len, m.hidden
    base = 3 * p * s * b * h
    gated = m.mlp in ("swiglu", "geglu")
    mlp = (3 if gated else 1) * p * s * b * m.ffn // tp
    attn = (2 * 4 * m.heads * s * s * b // tp) if not cfg.flash_attention else 4 * m.heads * s * b
    qkv = p * s * b * (m.heads + 2 * m.n_kv_heads) * m.attention_head_dim // tp
    return base + max(mlp, attn + qkv) + 4 * b * m.vocab


# --------------------------------------------------------------------------
# the estimate


def estimate_memory(shape: ModelShape, cfg: RunConfig) -> MemoryBreakdown:
    """Per-GPU peak memory for one run of ``shape`` under ``cfg``."""
    m = shape.model
    n = cfg.gpus
    strategy = cfg.strategy if n > 1 else "ddp"
    notes: list[str] = []
    if strategy == "tp":
        if m is None or not m.is_transformer:
            raise UsageError(
                "--strategy tp splits attention heads and needs a transformer's shape",
                hint="give --model or --hf-config for a transformer, or use zero3/fsdp",
            )
        if m.heads % n:
            raise UsageError(
                f"--strategy tp over {n} GPUs does not divide {m.name}'s {m.heads} attention heads",
                hint=f"use a GPU count that divides {m.heads}",
            )

    weights = weight_bytes(shape, cfg.precision)
    grads = int(shape.params * GRAD_BYTES[cfg.precision]) if cfg.mode == "train" else 0
    opt = optimizer_bytes(shape, cfg)

    shard_w = strategy in ("zero3", "fsdp", "tp")
    shard_g = strategy in ("zero2", "zero3", "fsdp", "tp")
    shard_o = strategy in ("zero1", "zero2", "zero3", "fsdp", "tp")
    if shard_w:
        weights = math.ceil(weights / n)
    if shard_g:
        grads = math.ceil(grads / n)
    if shard_o:
        opt = math.ceil(opt / n)

    transient = 0
    if strategy in ("zero3", "fsdp") and m is not None and m.is_transformer:
        # one layer gathered for compute plus one prefetched
        transient += 2 * int(layer_params(m) * WEIGHT_BYTES[cfg.precision])
    if strategy == "ddp" and n > 1 and cfg.mode == "train":
        # DDP's flat gradient buckets hold a second copy of the gradients
        transient += grads
        notes.append("DDP gradient buckets double the gradient memory (gradient_as_bucket_view=False, the default)")

    kv = 0
    if cfg.mode == "train":
        acts, recompute, logits, modelled = activation_bytes(shape, cfg)
        # Peak: the start of backward (all activations saved plus the loss
        # gradient) or the optimizer step (all gradients, activations freed).
        # Backward starts with the loss gradient (logits); the output head then
        # consumes it and writes its own weight gradients, before any activation
        # is freed and before the last layer is recomputed. So the loss gradient
        # is not live together with the head's gradients or the recomputed layer.
        head = min(grads, head_gradient_bytes(shape, cfg))
        kept_grads = grads if cfg.persistent_grads else 0
        # once cast to the logits' dtype, the loss gradient (p of its 4 + p bytes)
        # is live with the head's gradients until the head's backward finishes
        p_act = ACT_BYTES[cfg.precision]
        cast = logits * p_act // (4 + p_act) if cfg.head == "lm" else logits
        start_of_backward = weights + opt + kept_grads + acts + transient + max(logits, cast + head, head + recompute)
        optimizer_step = weights + opt + grads + transient
        if start_of_backward >= optimizer_step:
            tensor_peak, phase = start_of_backward, "backward"
        else:
            tensor_peak, phase = optimizer_step, "optimizer"
        transient += recompute + logits
    else:
        modelled = m is not None
        acts = 0
        if m is not None and m.is_transformer:
            tp = n if strategy == "tp" else 1
            seq = transformer_seq_len(m, cfg)
            p_kv = ACT_BYTES[cfg.precision]
            if m.kind in ("decoder", "encoder-decoder"):
                kv = kv_cache_bytes(m, cfg.batch, seq, p_kv, tp)
            acts = inference_working_bytes(m, cfg, seq, tp)
            if cfg.precision in ("int8", "int4"):
                # each quantised matrix is dequantised to 16 bits for its matmul
                h, f = m.hidden, m.ffn
                transient += 2 * max(h * f, h * (m.heads + 2 * m.n_kv_heads) * m.attention_head_dim) // tp
        elif m is not None:
            got, _, _, _ = activation_bytes(shape, cfg)
            acts = got
            notes.append("CNN/RNN inference activations use the training figure, an upper bound")
        tensor_peak, phase = weights + kv + acts + transient, "inference"
    if not modelled:
        notes.append("activations not modelled: give --model or --hf-config for the model's shape")

    context = DEFAULT_CONTEXT_BYTES if cfg.context_bytes is None else cfg.context_bytes
    fragmentation = int(tensor_peak * cfg.fragmentation)
    overhead = context + fragmentation
    return MemoryBreakdown(
        weights_bytes=weights,
        gradients_bytes=grads,
        optimizer_bytes=opt,
        activations_bytes=acts,
        kv_cache_bytes=kv,
        transient_bytes=transient,
        overhead_bytes=overhead,
        context_bytes=context,
        fragmentation_bytes=fragmentation,
        tensor_peak_bytes=tensor_peak,
        total_bytes=tensor_peak + overhead,
        peak_phase=phase,
        activations_modelled=modelled,
        notes=tuple(notes),
    )


# --------------------------------------------------------------------------
# the classic rule of thumb


def rule_of_thumb_params(memory_mb: float) -> int:
    """Dettmers' rule for momentum SGD in fp32 (SEED-FACTS, "Memory"):
    usable params = (MB - 400 MB buffer) / 2 (momentum) x 1024 x 1024 / 4 bytes.
    6 GB (6144 MB) gives 752,877,568; 1536 MB gives 148,897,792."""
    if memory_mb <= 400:
        return 0
    return int((memory_mb - 400) / 2 * 1024 * 1024 / 4)


# --------------------------------------------------------------------------
# searches over batch size and GPU count


def fits(shape: ModelShape, cfg: RunConfig, capacity_bytes: int) -> bool:
    return estimate_memory(shape, cfg).total_bytes <= capacity_bytes


MAX_BATCH = 1 << 20


def largest_batch(shape: ModelShape, cfg: RunConfig, capacity_bytes: int) -> int | None:
    """The largest per-GPU batch that fits, or None if batch 1 does not fit.

    Memory is monotone in batch, so doubling then bisection finds it exactly.
    """
    if not fits(shape, cfg.model_copy(update={"batch": 1}), capacity_bytes):
        return None
    lo, hi = 1, 2
    while hi <= MAX_BATCH and fits(shape, cfg.model_copy(update={"batch": hi}), capacity_bytes):
        lo, hi = hi, hi * 2
    if hi > MAX_BATCH:
        return MAX_BATCH
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(shape, cfg.model_copy(update={"batch": mid}), capacity_bytes):
            lo = mid
        else:
            hi = mid
    return lo


MAX_GPUS = 4096


def fewest_gpus(shape: ModelShape, cfg: RunConfig, capacity_bytes: int) -> int | None:
    """The fewest GPUs for which the run fits under ``cfg.strategy``.

    DDP replicates everything, so it either fits on one GPU or never. Tensor
    parallelism needs the GPU count to divide the attention heads.
    """
    if fits(shape, cfg.model_copy(update={"gpus": 1}), capacity_bytes):
        return 1
    if cfg.strategy == "ddp":
        return None
    def ok(n: int) -> bool:
        return fits(shape, cfg.model_copy(update={"gpus": n}), capacity_bytes)

    if cfg.strategy == "tp":
        m = shape.model
        if m is None or not m.is_transformer:
            return None
        for n in range(2, m.heads + 1):
            if m.heads % n == 0 and ok(n):
                return n
        return None
    # per-GPU memory only falls as N grows: double, then bisect
    lo, hi = 1, 2
    while hi <= MAX_GPUS and not ok(hi):
        lo, hi = hi, hi * 2
    if hi > MAX_GPUS:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def make_run_config(**kwargs: object) -> RunConfig:
    """A RunConfig from optional settings (None means the default), with a bad
    combination reported as a one-line UsageError."""
    from pydantic import ValidationError

    try:
        return RunConfig(**{k: v for k, v in kwargs.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        msg = str(err["msg"]).removeprefix("Value error, ")
        loc = ".".join(str(x) for x in err["loc"])
        raise UsageError(f"{loc + ': ' if loc else ''}{msg}") from None


def sharding_gpus(strategy: str, gpus_per_node: int, nodes: int = 1) -> int:
    """GPUs a model is sharded over: tensor parallelism stays inside a node
    (data parallel across nodes); ZeRO and FSDP shard over every GPU."""
    return gpus_per_node if strategy == "tp" else gpus_per_node * nodes


def rule_of_thumb_bytes(params: int) -> int:
    """Memory the rule of thumb assumes: 8 bytes per parameter (fp32 weights and
    momentum) plus the 400 MB buffer."""
    return params * 8 + 400 * MIB


def model_shape_from_params(params: int) -> ModelShape:
    return ModelShape(name=f"{params:,} parameters", params=params)


def model_shape_from_zoo(model: Model) -> ModelShape:
    return ModelShape(name=model.name, params=model.params, kind=model.kind, model=model)


def check_capacity(memory_bytes: int) -> int:
    if memory_bytes <= 0:
        raise UsageError("GPU memory must be positive")
    return memory_bytes


__all__ = [
    "GIB",
    "MemoryBreakdown",
    "ModelShape",
    "RunConfig",
    "estimate_memory",
    "fewest_gpus",
    "largest_batch",
    "rule_of_thumb_params",
]
