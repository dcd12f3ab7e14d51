"""What one GPU does in one step: FLOPs and bytes moved, before any efficiency."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpusizer.domain.precision import (
    Precision,
    kv_element_bytes,
    precision_spec,
    storage_precision,
    storage_spec,
)
from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import CnnShape, ModelShape, RnnShape, TransformerShape
from gpusizer.errors import DataFileError
from gpusizer.memory.estimate import (
    MemoryBreakdown,
    activation_bytes,
    attention_params,
    default_seq_len,
    estimate_memory,
    kv_cache_bytes,
    mlp_params,
    routed_expert_params,
    trainable,
)
from gpusizer.performance.ops import OpTerm, op_terms

#: share of the full score matrix a causal fused-attention kernel computes: tiles
#: wholly above the diagonal are skipped (FlashAttention-2, Dao 2023, section 3.1.1)
CAUSAL_FLASH_FRACTION = 0.5


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

    model_config = ConfigDict(frozen=True, defer_build=True)

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
    #: the weights of a replica (of a tensor-parallel rank) in the dtype ZeRO-3/FSDP all-gathers them
    #: each pass: the compute dtype (FSDP's param_dtype; DeepSpeed's 16-bit weights), a quantised
    #: base in its packed form, frozen weights included
    gather_bytes: float = 0.0
    #: forward passes a step (_Step.forward_passes): each makes the forward's collectives
    forward_passes: int = 1
    #: tensor-parallel: number of all-reduces per step and bytes each
    tp_allreduces: int
    tp_allreduce_bytes: float
    #: bytes crossing PCIe to and from host memory per step for offloaded state
    offload_bytes: float = 0.0
    #: micro-batches per optimizer step: the optimizer step and the gradient
    #: all-reduce happen once per this many steps
    grad_accumulation: int = 1
    #: small-batch decode: the weights stream through matrix-vector kernels on
    #: CUDA cores (batch <= GEMV_MAX_BATCH), not Tensor Core GEMMs
    gemv: bool = False
    #: the step's operations one by one (zoo CNNs, data/cnn_ops.json): each is timed against its
    #: own roofline; empty where the step is described by its totals only
    ops: tuple[OpTerm, ...] = ()
    notes: tuple[str, ...] = ()


def workload_class(shape: ModelShape, cfg: RunConfig, phase: str | None = None) -> str:
    """cnn-train, transformer-train, cnn-infer, transformer-infer or llm-decode.

    RNNs (no reference measurements) use the transformer classes: both are
    GEMM-bound sequence models. A model given only by its parameter count is a
    decoder-style transformer.
    """
    kind = shape.kind
    if cfg.training:
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
    return max(1, round(math.pow(params / (12 * 128**2), 1 / 3)))


def _active_matrix_params(m: TransformerShape) -> int:
    """Linear-layer weights one token passes through (MoE: the routed experts only)."""
    layers = m.layers + m.decoder_layers
    moe = m.moe_layers
    mlps = (layers - moe) * mlp_params(m, m.dense_ffn) + moe * (m.experts_per_token * mlp_params(m)
                                                                + (mlp_params(m, m.shared_ffn) if m.shared_ffn else 0))
    return layers * attention_params(m) + mlps + m.decoder_layers * attention_params(m)


def _head_params(m: TransformerShape, head: str) -> int:
    return m.vocab * m.hidden if head in ("lm", "logits") else 0


def _attention_flops_per_token(m: TransformerShape, context: int, *, decode: bool = False) -> float:
    """QK^T and attention-times-V, forward: 2 FLOPs x context x heads x (query/key width +
    value width) per layer, 4 x head_dim when the two are equal (PaLM, Chowdhery et al. 2022,
    appendix B, counts it this way). Decoding with latent attention attends over the cached
    latent itself, the up-projections absorbed into the query and the output (DeepSeek-V2,
    section 2.1.2; vLLM's MLA backends): keys kv_lora_rank + rope wide, values kv_lora_rank."""
    layers = m.layers + 2 * m.decoder_layers  # decoder self + cross attention
    if decode and m.mla is not None:
        width = 2 * m.mla.kv_lora_rank + m.mla.qk_rope_head_dim
    else:
        width = m.qk_head_dim + m.v_head_dim
    return 2.0 * layers * context * m.heads * width


def _embedding_bytes(m: TransformerShape, storage: str) -> float:
    """Input-embedding bytes, which a forward pass does not stream (one row per token).
    Quantised formats keep embeddings in 16 bits."""
    st = storage_spec(storage)
    return float(m.vocab * m.hidden * (2 if st.quantised else st.weight_bytes))


class _Flow(BaseModel):
    """The model-specific part of a step: FLOPs, the weight stream and its unit."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    flops: float
    weights_read: float
    unit: Literal["images/s", "sequences/s", "tokens/s"]
    samples: float
    tokens: int | None = None
    layers: int = 0
    attention_flops: float = 0.0
    tp_allreduces: int = 0
    tp_allreduce_bytes: float = 0.0
    notes: tuple[str, ...] = ()


class _Step(BaseModel):
    """What every flow needs to know about the step."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    cfg: RunConfig
    spec: Precision
    storage: str
    mem: MemoryBreakdown
    #: the same run's memory without ZeRO/FSDP sharding or offload: the weights (a tensor-parallel
    #: slice) a GPU's matmuls read, gathered or streamed in whatever the GPU keeps between layers
    read: MemoryBreakdown
    workload: str
    passes: float
    #: passes over the weight matmuls: with adapters the frozen base computes no
    #: weight gradients, only input gradients (forward + backward-data)
    matmul_passes: float
    tp: int
    phase: str | None

    @property
    def train(self) -> bool:
        return self.cfg.training

    @property
    def forward_passes(self) -> int:
        """Forward passes a step: one, and in a checkpointed training step a second during
        backward (``passes`` counts backward as two forwards' FLOPs). Each repeats the forward's
        collectives: tensor-parallel all-reduces, the context-parallel ring, the expert all-to-all."""
        return int(self.passes) - 2 if self.train else int(self.passes)


def _measured_gflops(value: float | None, shape: ModelShape) -> float:
    if value is None:
        raise DataFileError(f"models.yaml: entry '{shape.model_id}': forward_gflops_per_sample: needed for performance")
    return value


def _cnn_flow(arch: CnnShape, shape: ModelShape, st: _Step) -> _Flow:
    cfg = st.cfg
    scale = (cfg.image_size / arch.image_size) ** 2 if cfg.image_size else 1.0
    flops = _measured_gflops(arch.forward_gflops_per_sample, shape) * 1e9 * scale * cfg.batch * st.passes
    weights_read = shape.params * st.spec.compute_element_bytes * (2 if st.train else 1)
    return _Flow(flops=flops, weights_read=weights_read, unit="images/s", samples=float(cfg.batch))


def _rnn_flow(arch: RnnShape, shape: ModelShape, st: _Step) -> _Flow:
    cfg = st.cfg
    seq = cfg.seq_len or arch.seq_len
    flops = _measured_gflops(arch.forward_gflops_per_sample, shape) * 1e9 * (seq / arch.seq_len) * cfg.batch
    # the recurrence is sequential: every timestep re-reads each layer's
    # hidden-to-hidden weights (4 gates x hidden x hidden for an LSTM), forward
    # and again in backward. This is what makes RNNs bandwidth-bound.
    elem = st.spec.compute_element_bytes
    recurrent = (arch.layers or 1) * 4 * (arch.hidden or 0) ** 2
    weights_read = shape.params * elem + recurrent * elem * seq * (2 if st.train else 1)
    return _Flow(flops=flops * st.passes, weights_read=weights_read, unit="sequences/s", samples=float(cfg.batch),
                 tokens=seq, layers=(arch.layers or 2) * seq)


def _decode_flow(m: TransformerShape, shape: ModelShape, st: _Step, seq: int) -> _Flow:
    """One new token for each of ``batch`` sequences, attending to ``seq`` cached tokens."""
    b, tp = st.cfg.batch, st.tp
    mm = _active_matrix_params(m) + _head_params(m, st.cfg.head)
    attn = _attention_flops_per_token(m, seq, decode=True) * b / tp
    weights = float(st.read.weights_bytes)
    if not m.tied_embeddings:
        weights -= _embedding_bytes(m, st.storage) / tp
    if m.experts > 1:
        # expected fraction of experts touched by b tokens routed to k of E each
        touched = 1.0 - (1.0 - m.experts_per_token / m.experts) ** b
        expert_share = min(1.0, routed_expert_params(m) / shape.params)
        weights *= (1.0 - expert_share) + expert_share * touched
    kv = kv_cache_bytes(m, b, seq, kv_element_bytes(st.cfg.kv_cache, st.spec.kv_element_bytes), tp)
    layers = m.layers + m.decoder_layers
    allreduces, ar_bytes = (2 * layers, float(b * m.hidden * 2)) if tp > 1 else (0, 0.0)
    return _Flow(flops=2.0 * mm * b / tp + attn, weights_read=weights + kv, unit="tokens/s", samples=float(b),
                 layers=layers, attention_flops=attn, tp_allreduces=allreduces, tp_allreduce_bytes=ar_bytes)


def _transformer_flow(m: TransformerShape, shape: ModelShape, st: _Step) -> _Flow:
    cfg, tp = st.cfg, st.tp
    seq = cfg.seq_len or default_seq_len(shape)
    if st.workload == "llm-decode":
        return _decode_flow(m, shape, st, seq)
    # context parallelism: each rank computes seq / cp of the tokens, each attending over the
    # whole context (ring attention); the replica still finishes batch x seq tokens a step
    tokens_per_step = cfg.batch * seq // cfg.cp
    attn_per_token = _attention_flops_per_token(m, seq)
    if m.kind == "decoder" and cfg.flash_attention:
        # causal fused kernels skip the masked half of the score matrix
        # (FlashAttention-2, Dao 2023, section 3.1.1); eager attention computes
        # the whole matrix and masks it afterwards
        attn_per_token *= CAUSAL_FLASH_FRACTION
    attn = attn_per_token * tokens_per_step * st.passes / tp
    mm = _active_matrix_params(m) + _head_params(m, cfg.head)
    flops = 2.0 * mm * tokens_per_step * st.matmul_passes / tp + attn
    weights_read = (st.read.weights_bytes - _embedding_bytes(m, st.storage) / tp) * (2 if st.train else 1)
    if storage_spec(st.storage).autocast:
        weights_read /= 2  # matmuls read the 16-bit copies
    layers = m.layers + m.decoder_layers
    # Megatron's two all-reduces a layer in each forward pass and two in backward
    allreduces, ar_bytes = (2 * (st.forward_passes + st.train) * layers, float(tokens_per_step * m.hidden * 2)) \
        if tp > 1 else (0, 0.0)
    if m.kind == "decoder" and (st.train or st.phase == "prefill"):
        return _Flow(flops=flops, weights_read=weights_read, unit="tokens/s", samples=float(cfg.batch * seq),
                     layers=layers, attention_flops=attn, tp_allreduces=allreduces, tp_allreduce_bytes=ar_bytes)
    return _Flow(flops=flops, weights_read=weights_read, unit="sequences/s", samples=float(cfg.batch), tokens=seq,
                 layers=layers, attention_flops=attn, tp_allreduces=allreduces, tp_allreduce_bytes=ar_bytes)


def _params_only_flow(shape: ModelShape, st: _Step) -> _Flow:
    """A model known only by its parameter count: a dense transformer-like model,
    2 x params FLOPs per token forward."""
    cfg, tp = st.cfg, st.tp
    layers = params_only_layers(shape.params)
    notes = ["model given by its parameter count only: treated as a dense transformer, "
             f"{'6' if st.train else '2'} x params FLOPs per token; activations not modelled"]
    if st.workload == "llm-decode":
        notes.insert(0, "model given by its parameter count only: the KV cache is not modelled (no layer shapes)")
        return _Flow(flops=2.0 * shape.params * cfg.batch / tp, weights_read=float(st.read.weights_bytes),
                     unit="tokens/s", samples=float(cfg.batch), layers=layers, notes=tuple(notes))
    seq = cfg.seq_len or default_seq_len(shape)
    return _Flow(flops=2.0 * shape.params * cfg.batch * seq * st.passes / tp,
                 weights_read=st.read.weights_bytes * (2 if st.train else 1), unit="tokens/s",
                 samples=float(cfg.batch * seq), layers=layers, notes=tuple(notes))


def _activation_traffic(shape: ModelShape, st: _Step, mem_cfg: RunConfig, flow: _Flow) -> float:
    """Activation traffic (memory-bound elementwise work), written and read once
    per forward pass; a training step moves ``passes`` times that."""
    cfg, elem = st.cfg, st.spec.traffic_activation_bytes
    arch = shape.arch
    if isinstance(arch, CnnShape):
        # conv outputs per FLOP as in ResNet-50 (see CNN_FLOPS_PER_ACTIVATION)
        return 2.0 * (flow.flops / st.passes) / CNN_FLOPS_PER_ACTIVATION * elem * st.passes
    if isinstance(arch, RnnShape):
        seq = cfg.seq_len or arch.seq_len
        return 2.0 * cfg.batch * seq * (arch.layers or 1) * LSTM_ACTIVATIONS_PER_HIDDEN * (arch.hidden or 1) \
            * elem * st.passes
    if st.workload == "llm-decode" or arch is None:
        return 0.0
    # what the memory model says a training step saves for backward: every
    # intermediate tensor of the forward pass, once
    one_byte = elem == 1 and not st.train  # INT8/FP8 inference engines keep 1-byte activations
    act_cfg = mem_cfg.model_copy(update={"precision": "fp16"}) if one_byte else mem_cfg
    saved = float(activation_bytes(shape, act_cfg)[0]) * (0.5 if one_byte else 1.0)
    return 2.0 * saved * st.passes


def _unsharded_memory(shape: ModelShape, mem_cfg: RunConfig, mem: MemoryBreakdown) -> MemoryBreakdown:
    """``mem_cfg``'s memory without ZeRO/FSDP sharding or offload (``mem`` where it has neither):
    the weights and gradients of a tensor-parallel rank, whole."""
    split = mem_cfg.sharding
    if split.weights == split.gradients == split.activations and mem_cfg.offload == "none":
        return mem
    return estimate_memory(shape, mem_cfg.model_copy(update={"strategy": "ddp", "offload": "none"}))


#: Work depends only on its arguments (frozen models, numbers and the bundled operation tables), and one
#: answer asks for the same work many times: recommend for every GPU type and count, estimate for the
#: run and again for its one-GPU baseline, the calibration fit for every row at each trial constant.
@lru_cache(maxsize=4096)
def model_work(
    shape: ModelShape, cfg: RunConfig, precision: str, *, phase: str | None = None, tp: int = 1,
    dp: int = 1, grad_accumulation: int = 1,
) -> Work:
    """FLOPs and bytes for one step of one GPU (``cfg.batch`` per model replica)."""
    spec = precision_spec(precision)
    storage = storage_precision(precision, cfg.mode)
    # a layout with model-parallel degrees keeps its own GPU count (its tp and dp follow from it)
    layout = cfg.tp is not None or max(cfg.pp, cfg.cp, cfg.ep) > 1
    # (the traffic keeps AMP's layout under ZeRO too: the constants were fitted on it)
    mem_cfg = cfg.model_copy(update={"precision": storage, "deepspeed_layout": False,
                                     "gpus": cfg.gpus if layout else tp if cfg.parallelism.tp > 1 else dp})
    mem = estimate_memory(shape, mem_cfg)
    read = _unsharded_memory(shape, mem_cfg, mem)
    wl = workload_class(shape, cfg, phase)
    notes: list[str] = []
    passes = 3.0 if cfg.training else 1.0  # forward + backward (2x forward)
    if cfg.training and cfg.checkpointing:
        passes = 4.0  # the forward pass is recomputed during backward
        notes.append("activation checkpointing recomputes the forward pass: 4x forward FLOPs")
    matmul_passes = passes - 1.0 if cfg.training and cfg.adapter is not None else passes
    if matmul_passes != passes:
        notes.append("adapters on a frozen base: its matmuls compute no weight gradients, one pass of "
                     "2 x params FLOPs per token fewer than full training")
    st = _Step(cfg=cfg, spec=spec, storage=storage, mem=mem, read=read, workload=wl, passes=passes,
               matmul_passes=matmul_passes, tp=tp, phase=phase)
    arch = shape.arch
    ops: tuple[OpTerm, ...] = ()
    if isinstance(arch, CnnShape):
        flow = _cnn_flow(arch, shape, st)
        if not cfg.training:
            # inference only: timed per operation, training steps fitted that way pressed the
            # efficiencies onto their physical bounds (docs/method.md, "CNN operations")
            ops = op_terms(shape.model_id, precision, cfg.batch, cfg.image_size) or ()
        if ops:
            flow = flow.model_copy(update={"flops": sum(o.count * o.flops for o in ops if o.matmul)})
            notes.append(f"timed operation by operation: {sum(o.count for o in ops)} kernels of an eager "
                         "PyTorch forward pass (data/cnn_ops.json), each against its own roofline; engines that "
                         "fuse kernels (TensorRT, torch.compile) move fewer bytes and run faster")
        elif not cfg.training and precision_spec(precision).eager_ops is None:
            notes.append("timed from the step's totals as a fused inference engine (TensorRT) runs it: "
                         f"{precision} CNN inference has no eager per-operation table, so this is not comparable "
                         "with an eager PyTorch estimate at fp16 or fp32")
    elif isinstance(arch, RnnShape):
        flow = _rnn_flow(arch, shape, st)
    elif isinstance(arch, TransformerShape):
        flow = _transformer_flow(arch, shape, st)
    else:
        flow = _params_only_flow(shape, st)
    notes.extend(flow.notes)
    opt, grads, gather = (_training_traffic(shape, cfg, spec, mem_cfg, mem, read, tp) if cfg.training
                          else (0.0, 0.0, 0.0))
    offload = _offload_traffic(shape, cfg, mem, tp)
    return Work(
        workload=wl, unit=flow.unit, samples_per_step=flow.samples, tokens_per_sample=flow.tokens,
        # with operations, each one's bytes include its weights (the table's fixed bytes)
        matmul_flops=flow.flops, attention_flops=flow.attention_flops,
        matmul_bytes=0.0 if ops else float(flow.weights_read),
        fused_attention=bool(flow.attention_flops) and cfg.flash_attention and wl != "llm-decode",
        activation_bytes=(sum(o.count * o.bytes for o in ops) if ops else _activation_traffic(shape, st, mem_cfg, flow)),
        optimizer_bytes=opt, ops=ops, gather_bytes=gather,
        layers=int(flow.layers), gradient_bytes=grads, forward_passes=st.forward_passes,
        tp_allreduces=flow.tp_allreduces,
        tp_allreduce_bytes=flow.tp_allreduce_bytes, grad_accumulation=grad_accumulation if cfg.training else 1,
        notes=tuple(notes), gemv=wl == "llm-decode" and cfg.batch <= GEMV_MAX_BATCH, offload_bytes=offload,
    )


def _training_traffic(shape: ModelShape, cfg: RunConfig, spec: Precision, mem_cfg: RunConfig,
                      mem: MemoryBreakdown, read: MemoryBreakdown, tp: int) -> tuple[float, float, float]:
    """(optimizer step bytes, data-parallel gradient bytes, ZeRO-3/FSDP gathered weight bytes) of one
    training step of one GPU."""
    # the optimizer step reads and writes its partition's weights and state, and reads its gradients
    zero = mem_cfg.sharding.optimizer / mem_cfg.sharding.activations
    opt = (2.0 * read.weights_bytes + read.gradients_bytes) / zero + 2.0 * mem.optimizer_bytes
    # PyTorch AMP (DDP, FSDP) all-reduces fp32 gradients and DeepSpeed ZeRO its 16-bit ones
    # (cfg.storage); FP8 training (Transformer Engine with Megatron) reduces them in bf16
    # (grad_reduce_in_fp32=False)
    train = trainable(shape, cfg)
    width = train.grad_bytes if train.adapters else spec.allreduce_grad_bytes or train.grad_bytes or 4
    grads = train.params * (width or 4) / tp
    # FSDP's MixedPrecision gathers in param_dtype, the compute dtype (torchtitan, Accelerate, LLM
    # Foundry): 16-bit copies of fp32 master weights; stored 16-bit or packed weights as they are
    store = mem_cfg.storage
    gather = read.weights_bytes * min(1.0, store.activation_bytes / store.weight_bytes)
    m = shape.transformer
    if cfg.ep > 1 and m is not None and not train.adapters:
        # the routed experts' gradients are split over the ep ranks too
        experts = min(routed_expert_params(m), train.params)
        grads = ((train.params - experts) + experts / cfg.ep) * (width or 4) / tp
    return opt, grads, gather


def _offload_traffic(shape: ModelShape, cfg: RunConfig, mem: MemoryBreakdown, tp: int) -> float:
    """PCIe bytes per step for offloaded state: with the optimizer on the CPU, 16-bit
    gradients go out and 16-bit weights come back each step (ZeRO-Offload); offloaded
    weights come in for forward and again for backward, and offloaded gradients go out."""
    if cfg.offload == "none":
        return 0.0
    train = trainable(shape, cfg)
    split = cfg.sharding
    traffic = 0.0
    if cfg.offload in ("optimizer", "all") and cfg.training:
        # this GPU's gradients out and its updated weights in, 16 bits each
        traffic += 2.0 * train.params / split.gradients + 2.0 * train.params / split.optimizer
    if cfg.offload in ("params", "all"):
        traffic += 2.0 * shape.params / split.weights * (2 if cfg.training else 1)
    return traffic
