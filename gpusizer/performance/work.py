"""What one GPU does in one step: FLOPs and bytes moved, before any efficiency."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpusizer.errors import DataFileError
from gpusizer.memory.estimate import (
    DEFAULT_SEQ_CAP,
    GRAD_BYTES,
    ModelShape,
    RunConfig,
    activation_bytes,
    attention_params,
    estimate_memory,
    kv_cache_bytes,
    mlp_params,
    transformer_seq_len,
)
from gpusizer.models.zoo import Model
from gpusizer.performance.peak import memory_precision

#: share of the full score matrix a causal fused-attention kernel computes: tiles
#: wholly above the diagonal are skipped (FlashAttention-2, Dao 2023, section 3.1.1)
CAUSAL_FLASH_FRACTION = 0.5


#: Element bytes of the matmul operands, by performance precision.
COMPUTE_ELEMENT_BYTES: dict[str, float] = {
    "fp64": 8, "fp32": 4, "tf32": 4, "mixed": 2, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5,
}
#: KV-cache element bytes during decode: FP8 engines (TensorRT-LLM use_fp8) keep
#: an FP8 cache; weight-only int8/int4 (llama.cpp, GPTQ, AWQ) keep a 16-bit one.
KV_ELEMENT_BYTES: dict[str, int] = {
    "fp64": 8, "fp32": 4, "tf32": 4, "mixed": 2, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 2, "int4": 2,
}


#: Bytes per activation element in memory-bound layers, by performance precision.
ACTIVATION_ELEMENT_BYTES: dict[str, int] = {
    "fp64": 8, "fp32": 4, "tf32": 4, "mixed": 2, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 2,
}
#: FLOPs per convolution output element, from torchvision's ResNet-50 v1.5 at
#: 224x224: 4.089 GMACs (8.178 GFLOPs) over 11,113,984 conv outputs per image
#: (counted layer by layer from the architecture; docs/method.md). The zoo's
#: per-sample activation figures for CNNs are placeholders until measured, so
#: CNN activation traffic is scaled from FLOPs with this ratio.
CNN_FLOPS_PER_ACTIVATION = 8.178e9 / 11_113_984
#: LSTM elements written per layer, step and hidden unit: four gates before and
#: after their nonlinearity, the cell and the hidden state.
LSTM_ACTIVATIONS_PER_HIDDEN = 10
#: Decode batches up to this size run matrix-vector kernels, not Tensor Core GEMMs:
#: llama.cpp's mul_mat_vec_q handles batches up to MMVQ_MAX_BATCH_SIZE = 8
#: (ggml/src/ggml-cuda/mmvq.cuh); Tensor Core MMA tiles are at least 8 rows wide.
GEMV_MAX_BATCH = 8


# --------------------------------------------------------------------------
# work per step


class Work(BaseModel):
    """What one GPU does in one step, before any efficiency is applied."""

    model_config = ConfigDict(frozen=True)

    workload: str
    unit: Literal["images/s", "sequences/s", "tokens/s"]
    #: samples (images, sequences, or tokens for tokens/s) one model replica finishes per step
    samples_per_step: float
    tokens_per_sample: int | None
    matmul_flops: float
    #: the part of matmul_flops in attention's score and value matmuls (QK^T, PV);
    #: these take 16-bit inputs even where the weights' matmuls run in FP8 or INT4
    attention_flops: float = 0.0
    #: attention runs in fused kernels (FlashAttention, SDPA's flash backend); only
    #: LLM Foundry's 2023 kernels are timed apart from the GEMMs (attention_kernels)
    fused_attention: bool = False
    #: bytes read by the matmul phase (weights, KV cache), overlapped with its FLOPs
    matmul_bytes: float
    #: activation traffic (memory-bound elementwise work)
    activation_bytes: float
    #: optimizer step traffic
    optimizer_bytes: float
    layers: int
    #: data-parallel gradient bytes to all-reduce per step (per GPU)
    gradient_bytes: float
    #: tensor-parallel: number of all-reduces per step and bytes each
    tp_allreduces: int
    tp_allreduce_bytes: float
    #: micro-batches per optimizer step: the optimizer step and the gradient
    #: all-reduce happen once per this many steps
    grad_accumulation: int = 1
    #: small-batch decode: the weights stream through matrix-vector kernels on
    #: CUDA cores (batch <= GEMV_MAX_BATCH), not Tensor Core GEMMs
    gemv: bool = False
    notes: tuple[str, ...] = ()


def workload_class(shape: ModelShape, cfg: RunConfig, phase: str | None = None) -> str:
    """cnn-train, transformer-train, cnn-infer, transformer-infer or llm-decode.

    RNNs (no reference measurements) use the transformer classes: both are
    GEMM-bound sequence models. A model given only by --params is a transformer.
    """
    kind = shape.model.kind if shape.model is not None else shape.kind
    if cfg.mode == "train":
        return "cnn-train" if kind == "cnn" else "transformer-train"
    if kind == "cnn":
        return "cnn-infer"
    if kind in ("decoder", "unknown"):
        return "transformer-infer" if phase == "prefill" else "llm-decode"
    return "transformer-infer"


def params_only_layers(params: int) -> int:
    """Layer count for a model known only by its parameter count, used for per-layer
    overheads: 12 * L * d^2 weights with d = 128 * L, the width-to-depth ratio of
    GPT-3 175B (12288 / 96) and Llama-2-7B (4096 / 32). Gives 33 for 7B, 71 for 70B."""
    return max(1, round((params / (12 * 128**2)) ** (1 / 3)))


def default_seq_len(shape: ModelShape) -> int:
    """The sequence length memory.py assumes when none is given."""
    m = shape.model
    if m is not None and m.is_transformer:
        return transformer_seq_len(m, RunConfig())
    if m is not None and m.seq_len:
        return m.seq_len
    return DEFAULT_SEQ_CAP


def _active_matrix_params(m: Model) -> int:
    """Linear-layer weights one token passes through (MoE: the routed experts only)."""
    k = m.experts_per_token or 1
    per_layer = attention_params(m) + k * mlp_params(m)
    layers = m.layers + (m.decoder_layers or 0)
    return layers * per_layer + (m.decoder_layers or 0) * attention_params(m)


def _head_params(m: Model, head: str) -> int:
    return m.vocab * m.hidden if head in ("lm", "logits") else 0


def _attention_flops_per_token(m: Model, context: int) -> float:
    """QK^T and attention-times-V, forward: 2 matmuls x 2 FLOPs x context x heads x head_dim
    per layer (PaLM, Chowdhery et al. 2022, appendix B, counts it this way)."""
    layers = m.layers + 2 * (m.decoder_layers or 0)  # decoder self + cross attention
    return 4.0 * layers * context * m.heads * m.attention_head_dim


def _embedding_bytes(shape: ModelShape, mem_precision: str) -> float:
    """Input-embedding bytes, which a forward pass does not stream (one row per token)."""
    m = shape.model
    if m is None or not m.is_transformer:
        return 0.0
    width = 2 if mem_precision in ("int8", "int4") else COMPUTE_ELEMENT_BYTES.get(mem_precision, 2)
    if mem_precision == "mixed":
        width = 4
    return float(m.vocab * m.hidden * width)


def model_work(
    shape: ModelShape, cfg: RunConfig, precision: str, *, phase: str | None = None, tp: int = 1,
    dp: int = 1, grad_accumulation: int = 1,
) -> Work:
    """FLOPs and bytes for one step of one GPU (``cfg.batch`` per model replica)."""
    m = shape.model
    mem_prec = memory_precision(precision, cfg.mode)
    mem_cfg = cfg.model_copy(update={"precision": mem_prec, "gpus": tp if cfg.strategy == "tp" else dp})
    mem = estimate_memory(shape, mem_cfg)
    wl = workload_class(shape, cfg, phase)
    b = cfg.batch
    elem = COMPUTE_ELEMENT_BYTES[precision]
    notes: list[str] = []
    train = cfg.mode == "train"
    passes = 3.0 if train else 1.0  # forward + backward (2x forward)
    if train and cfg.checkpointing:
        passes = 4.0  # the forward pass is recomputed during backward
        notes.append("activation checkpointing recomputes the forward pass: 4x forward FLOPs")
    tp_allreduces, tp_bytes = 0, 0.0
    attn = 0.0

    if m is not None and m.kind == "cnn":
        scale = (cfg.image_size / m.image_size) ** 2 if (cfg.image_size and m.image_size) else 1.0
        if m.forward_gflops_per_sample is None:
            raise DataFileError(f"models.yaml: entry '{m.id}': forward_gflops_per_sample: needed for performance")
        flops = m.forward_gflops_per_sample * 1e9 * scale * b * passes
        unit, samples, tokens, layers = "images/s", float(b), None, 0
        weights_read = shape.params * elem * (2 if train else 1)
    elif m is not None and m.kind == "rnn":
        seq = cfg.seq_len or m.seq_len or 1
        scale = seq / m.seq_len if m.seq_len else 1.0
        if m.forward_gflops_per_sample is None:
            raise DataFileError(f"models.yaml: entry '{m.id}': forward_gflops_per_sample: needed for performance")
        flops = m.forward_gflops_per_sample * 1e9 * scale * b * passes
        unit, samples, tokens, layers = "sequences/s", float(b), seq, (m.layers or 2) * seq
        # the recurrence is sequential: every timestep re-reads each layer's
        # hidden-to-hidden weights (4 gates x hidden x hidden for an LSTM), forward
        # and again in backward. This is what makes RNNs bandwidth-bound.
        recurrent = (m.layers or 1) * 4 * (m.hidden or 0) ** 2
        weights_read = shape.params * elem + recurrent * elem * seq * (2 if train else 1)
    elif m is not None and m.is_transformer:
        seq = cfg.seq_len or default_seq_len(shape)
        layers = m.layers + (m.decoder_layers or 0)
        mm = _active_matrix_params(m) + _head_params(m, cfg.head)
        if wl == "llm-decode":
            # one new token for each of b sequences, attending to `seq` cached tokens
            attn = _attention_flops_per_token(m, seq) * b / tp
            flops = 2.0 * mm * b / tp + attn
            unit, samples, tokens = "tokens/s", float(b), None
            experts = m.experts or 1
            k = m.experts_per_token or 1
            weights = mem.weights_bytes
            if not m.tied_embeddings:
                weights -= _embedding_bytes(shape, mem_prec) / tp
            if experts > 1:
                # expected fraction of experts touched by b tokens routed to k of E each
                touched = 1.0 - (1.0 - k / experts) ** b
                expert_share = min(1.0, m.layers * experts * mlp_params(m) / shape.params)
                weights *= (1.0 - expert_share) + expert_share * touched
            kv = kv_cache_bytes(m, b, seq, KV_ELEMENT_BYTES[precision], tp)
            weights_read = weights + kv
            if tp > 1:
                tp_allreduces, tp_bytes = 2 * layers, float(b * m.hidden * 2)
        else:
            tokens_per_step = b * seq
            attn_per_token = _attention_flops_per_token(m, seq)
            if m.kind == "decoder" and cfg.flash_attention:
                # causal fused kernels skip the masked half of the score matrix
                # (FlashAttention-2, Dao 2023, section 3.1.1); eager attention computes
                # the whole matrix and masks it afterwards
                attn_per_token *= CAUSAL_FLASH_FRACTION
            attn = attn_per_token * tokens_per_step * passes / tp
            flops = 2.0 * mm * tokens_per_step * passes / tp + attn
            if m.kind == "decoder" and (train or phase == "prefill"):
                unit, samples, tokens = "tokens/s", float(tokens_per_step), None
            else:
                unit, samples, tokens = "sequences/s", float(b), seq
            weights_read = (mem.weights_bytes - _embedding_bytes(shape, mem_prec) / tp) * (2 if train else 1)
            if mem_prec == "mixed":
                weights_read /= 2  # matmuls read the 16-bit copies
            if tp > 1:
                per = 4 if train else 2
                tp_allreduces, tp_bytes = per * layers, float(tokens_per_step * m.hidden * 2)
    else:
        # --params only: a dense transformer-like model, 2 * params FLOPs per token forward
        seq = cfg.seq_len or default_seq_len(shape)
        layers = params_only_layers(shape.params)
        if wl == "llm-decode":
            flops = 2.0 * shape.params * b / tp
            unit, samples, tokens = "tokens/s", float(b), None
            weights_read = mem.weights_bytes
            notes.append("model given by --params only: the KV cache is not modelled (no layer shapes)")
        else:
            flops = 2.0 * shape.params * b * seq * passes / tp
            unit, samples, tokens = "tokens/s", float(b * seq), None
            weights_read = mem.weights_bytes * (2 if train else 1)
        notes.append("model given by --params only: treated as a dense transformer, "
                     f"{'6' if train else '2'} x params FLOPs per token; activations not modelled")

    # activation traffic (memory-bound elementwise work), written and read once per
    # forward pass; a training step moves 3x that (passes).
    act = 0.0
    act_elem = ACTIVATION_ELEMENT_BYTES[precision]
    if m is not None and m.kind == "cnn":
        # conv outputs per FLOP as in ResNet-50 (see CNN_FLOPS_PER_ACTIVATION)
        act = 2.0 * (flops / passes) / CNN_FLOPS_PER_ACTIVATION * act_elem * passes
    elif m is not None and m.kind == "rnn":
        seq = cfg.seq_len or m.seq_len or 1
        act = 2.0 * b * seq * (m.layers or 1) * LSTM_ACTIVATIONS_PER_HIDDEN * (m.hidden or 1) * act_elem * passes
    elif wl != "llm-decode" and m is not None:
        # what memory.py says a training step saves for backward: every
        # intermediate tensor of the forward pass, once
        act_cfg = mem_cfg
        if precision in ("int8", "fp8") and not train:
            act_cfg = mem_cfg.model_copy(update={"precision": "fp16"})
        saved = float(activation_bytes(shape, act_cfg)[0])
        if precision in ("int8", "fp8") and not train:
            saved *= 0.5  # one-byte activations in INT8/FP8 inference engines
        act = 2.0 * saved * passes

    opt = 0.0
    if train:
        # optimizer step: read and write weights and optimizer state, read gradients
        opt = 2.0 * mem.weights_bytes + mem.gradients_bytes + 2.0 * mem.optimizer_bytes
        if precision == "fp64":
            opt *= 2
    grads = 0.0
    if train:
        # PyTorch AMP all-reduces fp32 gradients; FP8 training (Transformer Engine
        # with Megatron) reduces them in bf16 (grad_reduce_in_fp32=False)
        width = 2 if precision == "fp8" else GRAD_BYTES.get(mem_prec, 4)
        grads = shape.params * width / tp
    return Work(
        workload=wl, unit=unit, samples_per_step=samples, tokens_per_sample=tokens,
        matmul_flops=flops, attention_flops=attn, matmul_bytes=float(weights_read),
        fused_attention=bool(attn) and cfg.flash_attention and wl != "llm-decode", activation_bytes=act, optimizer_bytes=opt,
        layers=int(layers), gradient_bytes=grads, tp_allreduces=tp_allreduces, tp_allreduce_bytes=tp_bytes,
        grad_accumulation=grad_accumulation if train else 1, notes=tuple(notes),
        gemv=wl == "llm-decode" and b <= GEMV_MAX_BATCH,
    )
