"""Training and inference memory: the one source of truth for every memory formula.

``fit-model``, ``recommend`` and ``estimate`` all call :func:`estimate_memory`.
Every formula is explained, with citations, in ``docs/method.md`` ("Memory").
All sizes are integer bytes.
"""

from __future__ import annotations

import functools
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpusizer.choices import BNB_OPTIMIZERS
from gpusizer.domain.finetune import (
    Adapter,
    adapter_input_elements,
    adapter_params,
    expert_weight_copy_elements,
    largest_adapter_elements,
    require_transformer,
)
from gpusizer.domain.parallelism import (
    NODE_GPUS,
    ZERO_STAGE,
    Parallelism,
    check_offload,
    sharded_gpus,
    sharding,
    shards_over_replicas,
    shards_weights,
    tensor_parallel_field,
    within_node,
)
from gpusizer.domain.precision import WEIGHT_FORMATS, Storage, kv_element_bytes, storage_spec
from gpusizer.domain.run import DEFAULT_FRAGMENTATION, RunConfig, make_run_config
from gpusizer.domain.shape import (
    GATED_MLPS,
    CnnShape,
    ModelShape,
    TransformerShape,
    shape_from_model,
    shape_from_params,
)
from gpusizer.errors import UsageError
from gpusizer.units import GIB, MIB, format_bytes, plural

#: Optimizer state elements per trainable parameter (Adafactor is counted from
#: shapes, 8-bit Adam apart; see optimizer_bytes).
OPTIMIZER_STATES: dict[str, int] = {
    "sgd": 0, "momentum": 1, "adam": 2, "adamw": 2, "adafactor": 0, "adam8bit": 2, "paged-adamw-8bit": 2,
}

#: Temporaries of the optimizer step, in elements per trained parameter at the state's
#: width. PyTorch's multi-tensor ("foreach") Adam and AdamW, its default on CUDA,
#: compute sqrt(v) for every parameter at once (torch/optim/adam.py, _multi_tensor_adam:
#: exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)) and update the rest in
#: place; SGD and momentum update in place. Exact mode measures 1.0 and 0 (docs/method.md).
OPTIMIZER_STEP_TEMPORARIES: dict[str, int] = {"adam": 1, "adamw": 1}

#: torchtune's CEWithChunkedOutputLoss default (num_output_chunks=8)
CHUNKED_LOSS_CHUNKS = 8
#: activation offloading: layers whose saved activations stay on the GPU at once. torchtune's
#: OffloadActivations (training/_activation_offloading.py) copies a saved tensor back when
#: backward unpacks it and frees the previous autograd node's copies only once backward has
#: moved on, so two layers' worth is resident at most
OFFLOAD_RESIDENT_LAYERS = 2

#: DeepSpeed ZeRO's gradient bucket, in elements: ``reduce_bucket_size``, default 5e8
#: (deepspeed/runtime/zero/config.py). With ``contiguous_gradients`` (default True) every stage
#: allocates one flat buffer of that many elements in the trained parameters' dtype: ZeRO-3 when it
#: builds its optimizer (stage3.py, the IPG bucket, one per trainable dtype), ZeRO-1 and 2 at the
#: start of each backward (stage_1_and_2.py, backward(); a second with overlap_comm, off by default
#: below stage 3). Accelerate's DeepSpeed config (no JSON file) leaves it at the default;
#: transformers' "auto" sets hidden x hidden instead.
DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000

#: Default fixed overhead: the CUDA context and kernels loaded by PyTorch.
#: HF "Model training anatomy" measured 1343 MiB on a V100 before CUDA 11.7 lazy
#: loading; with lazy loading (the default since PyTorch 2.x) contexts measure
#: 300-500 MiB. We take 500 MiB; see docs/method.md.
DEFAULT_CONTEXT_BYTES = 500 * MIB


class TransientPart(BaseModel):
    """One buffer of the breakdown's transient row: its name, its bytes per GPU, and what it is."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    name: str
    bytes: int
    explanation: str


#: The transient buffers the memory model counts: name -> what each is (one place, so every
#: buffer in a breakdown carries a name and an explanation)
TRANSIENT_BUFFERS: dict[str, str] = {
    "gathered layers": "ZeRO-3/FSDP gather a layer to compute and prefetch the next",
    "FSDP root unit": "FSDP keeps the embedding and head gathered through backward",
    "dequantised matrix": "a quantised matrix dequantised to 16 bits for its matmul",
    "DDP gradient buckets": "DDP's buckets hold a second copy of the gradients",
    "ZeRO reduce bucket": "DeepSpeed's reduce_bucket_size elements, whatever is trained",
    "offload copy buffer": "ZeRO-Offload copies the largest trained gradient through it",
    "streamed layers": "offloaded weights streamed back layer by layer",
    "recomputed layer": "checkpointing recomputes one layer in backward",
    "logits and loss": "the logits, their log-softmax and their gradient",
    "tied embedding gradients": "a tied embedding's two gradients, summed out of place",
    "autocast weight copies": "autocast's cached 16-bit copies of the weights",
}


def transient_part(name: str, nbytes: int) -> tuple[TransientPart, ...]:
    """The buffer ``name`` (a key of :data:`TRANSIENT_BUFFERS`) of ``nbytes``; none when empty."""
    return (TransientPart(name=name, bytes=nbytes, explanation=TRANSIENT_BUFFERS[name]),) if nbytes else ()


class MemoryBreakdown(BaseModel):
    """Per-GPU memory of one run. ``total_bytes`` is the peak, not the sum:
    activations are freed during backward while gradients are written, so the
    two are not all live at once (see ``peak_phase``)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    kv_cache_bytes: int
    #: transient buffers at the peak: the loss/logits gradient, gathered
    #: FSDP/ZeRO-3 layers, DDP gradient buckets, a recomputed layer
    transient_bytes: int
    #: the buffers transient_bytes sums, each named and explained (analytic estimates; empty
    #: where the bytes were measured as a whole, as exact mode does)
    transient_parts: tuple[TransientPart, ...] = ()
    #: CUDA context plus allocator fragmentation
    overhead_bytes: int
    context_bytes: int
    fragmentation_bytes: int
    #: peak bytes of live tensors (without overhead)
    tensor_peak_bytes: int
    total_bytes: int
    peak_phase: Literal["forward", "backward", "backward-end", "optimizer", "inference"]
    activations_modelled: bool
    #: offloaded state held in host memory, or on NVMe, per GPU (a node needs this
    #: times its GPUs)
    cpu_bytes: int = 0
    nvme_bytes: int = 0
    notes: tuple[str, ...] = ()


# --------------------------------------------------------------------------
# pipeline stages


class Stage(BaseModel):
    """The layers one pipeline stage holds. Stages take consecutive, equal runs of layers
    (Megatron-LM's default); the first also holds the embedding, the last the final norm and
    the output head (with tied embeddings a copy of the embedding, as Megatron-LM keeps)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    index: int
    stages: int
    #: a mixture's leading dense layers on this stage
    dense_layers: int
    #: its other layers (every layer of a dense model)
    main_layers: int
    #: micro-batches whose activations it holds at once under 1F1B: min(stages - index, m)
    in_flight: int

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def last(self) -> bool:
        return self.index == self.stages - 1

    @property
    def layers(self) -> int:
        return self.dense_layers + self.main_layers

    @property
    def name(self) -> str:
        return "first" if self.first else "last" if self.last else f"stage {self.index + 1}"


def pipeline_stage(m: TransformerShape, cfg: RunConfig, index: int) -> Stage:
    """Stage ``index`` (0-based) of the run's pipeline: layers / pp consecutive layers, and
    under 1F1B (Narayanan et al. 2021, section 2.2.1) the activations of min(pp - index,
    micro-batches) micro-batches."""
    pp = cfg.sharding.stages
    per = m.layers // pp
    lo, hi = index * per, (index + 1) * per
    dense = max(0, min(hi, m.dense_layers) - lo)
    return Stage(index=index, stages=pp, dense_layers=dense, main_layers=per - dense,
                 in_flight=min(pp - index, cfg.micro_batches))


def held_fractions(shape: ModelShape, cfg: RunConfig, stage: Stage | None = None) -> tuple[float, float, float]:
    """The fractions of the model's parameters whose weights, gradients and optimizer state one
    GPU holds: its stage's layers (the embedding on the first stage, the head on the last), the
    dense parts divided by the dense divisors and the routed experts by the expert divisors
    (Sharding). Norms, biases and routers are spread over the layers in proportion to their
    matrices."""
    split, m, total = cfg.sharding, shape.transformer, shape.params
    if m is None or total <= 0:
        return 1 / split.weights, 1 / split.gradients, 1 / split.optimizer
    experts = routed_expert_params(m)
    if stage is None:
        dense, routed = float(total - experts), float(experts)
    else:
        embedding = m.vocab * m.hidden
        head = 0 if m.tied_embeddings else embedding
        rest = max(0, total - experts - embedding - head)
        moe = m.experts > 1
        main = attention_params(m) + (mlp_params(m, m.shared_ffn) if moe and m.shared_ffn else 0 if moe
                                      else mlp_params(m))
        lead = attention_params(m) + (_dense_mlp_params(m) if m.dense_layers else 0)
        shaped = m.dense_layers * lead + (m.layers - m.dense_layers) * main
        scale = rest / shaped if shaped else 0.0
        dense = scale * (stage.dense_layers * lead + stage.main_layers * main)
        dense += (embedding if stage.first else 0) + (embedding if stage.last and (not stage.first or head) else 0)
        routed = float(stage.main_layers * m.experts * mlp_params(m)) if moe else 0.0
    return ((dense / split.weights + routed / split.expert_weights) / total,
            (dense / split.gradients + routed / split.expert_gradients) / total,
            (dense / split.optimizer + routed / split.expert_optimizer) / total)


# --------------------------------------------------------------------------
# parameter counts from shapes


def attention_params(m: TransformerShape) -> int:
    """Weights of one attention block's projections (biases and norms are negligible)."""
    return sum(n_in * n_out for _, n_in, n_out in m.attention_projections())


def mlp_params(m: TransformerShape, ffn: int | None = None) -> int:
    """Weights of one MLP of width ``ffn`` (default: the model's, each routed expert's in a MoE)."""
    gated = m.mlp in GATED_MLPS
    return (3 if gated else 2) * m.hidden * (m.ffn if ffn is None else ffn)


def _moe_mlp_params(m: TransformerShape) -> int:
    """The MLP weights of one expert layer: every routed expert and the shared experts."""
    return m.experts * mlp_params(m) + (mlp_params(m, m.shared_ffn) if m.shared_ffn else 0)


def _dense_mlp_params(m: TransformerShape) -> int:
    """The MLP weights of one dense layer (a mixture's leading dense layers, or any layer of
    a dense model)."""
    return mlp_params(m, m.dense_ffn)


def layer_params(m: TransformerShape) -> int:
    """Weights of the largest transformer layer (biases, norms and routers are negligible
    here): attention, and every expert and the shared experts, or the one MLP."""
    mlps = [_moe_mlp_params(m)] if m.moe_layers else []
    if m.layers + m.decoder_layers > m.moe_layers:
        mlps.append(_dense_mlp_params(m))
    return attention_params(m) + max(mlps)


def routed_expert_params(m: TransformerShape) -> int:
    """Weights of every routed expert (0 for a dense model): transformers runs them with a
    grouped GEMM that autocast does not cover."""
    return m.moe_layers * m.experts * mlp_params(m)


def matrix_params(m: TransformerShape) -> int:
    """Weights that sit in the transformer layers' linear layers (quantisable)."""
    layers = m.layers + m.decoder_layers
    mlps = m.moe_layers * _moe_mlp_params(m) + (layers - m.moe_layers) * _dense_mlp_params(m)
    return layers * attention_params(m) + mlps + m.decoder_layers * attention_params(m)


def largest_matrix(m: TransformerShape) -> int:
    """Elements of the largest linear weight a layer dequantises at once: an MLP's
    projection, the fused Q/K/V projection, or latent attention's up-projections."""
    mlp = m.hidden * max(m.ffn, m.dense_ffn or 0, m.shared_ffn)
    if m.mla is not None:
        return max(mlp, *(n_in * n_out for _, n_in, n_out in m.attention_projections()))
    return max(mlp, m.hidden * (m.heads + 2 * m.n_kv_heads) * m.attention_head_dim)


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


def _attention_saved_bytes(m: TransformerShape, s: int, b: int, p: int, *, flash: bool,
                           score_elem: int) -> tuple[int, int]:
    """(per-head bytes, split by tensor parallelism; latent bytes, whole on every rank) that
    one self-attention block saves for backward."""
    a, g, d = m.heads, m.n_kv_heads, m.attention_head_dim
    latents = 0
    if m.mla is not None:
        # latent attention: the query (rotary part joined back) and the key, each qk_head_dim
        # per head, and the KV up-projection's output, whose value half attention saves
        qkv = p * s * b * a * (2 * m.mla.qk_head_dim + m.mla.qk_nope_head_dim + m.mla.v_head_dim)
        # the latents: each latent RMSNorm saves its input upcast to fp32 and its normalised
        # value, the up-projection its output
        latents = (4 + 2 * p) * s * b * (m.mla.kv_lora_rank + (m.mla.q_lora_rank or 0))
    elif flash:
        # SDPA takes grouped KV heads as they are (transformers passes enable_gqa=True when
        # there is no mask), so K and V are saved at g heads each
        qkv = p * s * b * (a * d + 2 * g * d)
    else:
        # grouped KV heads are repeated to the full head count before the attention
        # matmuls (HF's repeat_kv), so K and V are saved at a heads each
        qkv = p * s * b * (a * d + 2 * a * d)
    if m.fused_qkv and (flash or g == a):
        # the value attention saves is a view of the fused projection's output (not copied by
        # repeat_kv), so that whole output stays alive: the query and key parts too
        qkv += p * s * b * (a + g) * d
    if m.qk_norm:
        # the per-head RMSNorms on q and k save their input upcast to fp32 and the normalised
        # value in the activations' dtype (rotary embedding then saves only cos and sin)
        qkv += (4 + p) * s * b * (a + g) * d
    v = m.v_head_dim
    proj_in = p * s * b * a * v
    if flash and m.mla is None:
        # no s x s matrix: the fused kernel saves its output, which it writes in (batch,
        # sequence, heads, dim) order, so the output projection's input is the same storage,
        # and an fp32 log-sum-exp per row
        scores = 4 * a * s * b
    elif flash:
        # latent attention's memory-efficient kernel: its output and the projection's
        # reshaped copy of it (the value view it is given is not contiguous), and the
        # log-sum-exp
        scores = p * s * b * a * v + 4 * a * s * b
    else:
        scores = score_elem * a * s * s * b
        if m.attn_softcap:
            scores += p * a * s * s * b  # tanh's output, saved for its backward
    return qkv + proj_in + scores, latents


def _layer_activation_bytes(
    m: TransformerShape, s: int, b: int, p: int, *, dropout: bool, flash: bool, tp: int, cross_len: int | None = None,
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
    # Gemma 2 and 3's norms after attention and after the MLP each save the fp32 upcast of
    # their input and the fp32 normalised value (exact mode: 8 bytes an element in bf16,
    # mixed and fp32 alike)
    replicated += 8 * ((m.norms_per_layer or 2) - 2) * sbh

    if r != p:
        # autocast: each projection saves its own 16-bit copy of the norm output it reads
        # (the two counted above are one per norm)
        replicated += p * (m.input_casts - 2) * sbh
    attention, latents = _attention_saved_bytes(m, s, b, p, flash=flash, score_elem=score_elem)
    replicated += latents

    # 0.5*x*(1 + tanh(c*(x + 0.044715*x^3))) op by op saves x (pow's input),
    # tanh's output, 0.5*x, 1 + tanh and the product; under CUDA autocast pow
    # runs in fp32, so x's copy, tanh and 1 + tanh are fp32 (4+4+2+4+2 bytes)
    tanh_gelu = 16 if r == 4 and p == 2 else 5 * p
    if m.mlp == "geglu_new":
        # the tanh GELU's chain on the gate, the linear branch, and the product (or,
        # with dropout after it, its mask and output) that the down projection saves
        mlp = (tanh_gelu + p + (1 + p if dropout else p)) * s * b * f
    elif m.mlp in GATED_MLPS:
        mlp = 4 * p * s * b * f
    elif m.mlp == "relu":
        mlp = p * s * b * f + ((p + 1) * s * b * f if dropout else 0)
    elif m.mlp == "gelu_new":
        mlp = tanh_gelu * s * b * f
    else:  # gelu: input and output of the activation
        mlp = 2 * p * s * b * f
    mlp *= k
    if (m.experts or 1) > 1:
        # routed experts (transformers 5's grouped GEMM): each token is copied once per
        # routed expert (the up projection saves the copy), and each expert's output is kept
        # per slot for the routing weight's gradient: two (tokens x k x hidden) tensors,
        # hidden wide and so replicated across tensor-parallel ranks. Autocast does not cover
        # the grouped GEMM, so under AMP the experts run on the fp32 residual stream's width.
        mlp = mlp * r // p
        replicated += 2 * r * s * b * k * h
    if m.shared_ffn:
        mlp += 4 * p * s * b * m.shared_ffn  # the shared experts: one gated MLP every token passes

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
    m: TransformerShape, cfg: RunConfig, seq_len: int, *, tp: int = 1, shards: int = 1, stage: Stage | None = None,
) -> tuple[int, int, int, int]:
    """(saved activations on the GPU, one layer's activations, logits bytes, saved activations
    offloaded to host memory) for a training step, of a pipeline ``stage`` where there are stages.

    Includes the embedding output, final norm, logits and the fp32 log-softmax
    that cross-entropy saves. Under AMP the residual stream stays fp32. With
    checkpointing only each layer's input is kept, and one layer is recomputed
    during backward (returned as the second value, a transient).

    A pipeline ``stage`` holds its own layers' activations for each micro-batch in flight
    (1F1B), the embedding's on the first stage, the final norm's and the loss's on the last.
    """
    st = cfg.storage
    p = st.activation_bytes
    # under autocast the residual stream stays fp32
    r = 4 if st.autocast else p
    b, s = cfg.batch, seq_len
    dropout = m.dropout
    # CUDA autocast runs softmax in fp32; some implementations upcast it themselves
    softmax_fp32 = st.autocast or m.softmax_fp32
    layer_bytes = functools.partial(_layer_activation_bytes, dropout=dropout, flash=cfg.flash_attention, tp=tp,
                                    residual_bytes=r, softmax_fp32=softmax_fp32)
    layer = layer_bytes(m, s, b, p)
    dense = m.dense_layer()
    dense_layer = layer_bytes(dense, s, b, p) if dense is not None else 0
    dec_layer = 0
    t = cfg.target_len or s
    if m.decoder_layers:
        dec_layer = layer_bytes(m, t, b, p, cross_len=s)
    sbh = s * b * m.hidden
    n_dense = stage.dense_layers if stage is not None else m.dense_layers
    n_main = stage.main_layers if stage is not None else m.layers - m.dense_layers
    first, last = stage is None or stage.first, stage is None or stage.last
    if cfg.checkpointing:
        stored = (n_dense + n_main) * r * sbh + (m.decoder_layers or 0) * r * t * b * m.hidden
        recompute = max(layer, dense_layer, dec_layer)
        largest = r * max(s, t) * b * m.hidden
    else:
        stored = n_main * layer + n_dense * dense_layer + (m.decoder_layers or 0) * dec_layer
        recompute = 0
        largest = max(layer, dense_layer, dec_layer)
    in_layers = stored  # what the layers save, apart from what they save per adapter or weight
    # embedding dropout mask and final norm input
    stored += (sbh if dropout and first else 0) + (r * sbh if last else 0)
    if m.kind == "decoder" and last:
        # a decoder's final norm keeps, like the layers' norms, its output for the output head
        # and, op by op (RMSNorm), the fp32 upcast of its input
        stored += (p + (4 if m.norm == "rmsnorm" else 0)) * sbh
    bias_saved, bias_recompute = _relative_bias_bytes(m, cfg, s, t, tp)
    stored, recompute = stored + bias_saved, recompute + bias_recompute
    saved_logits, logits = _loss_bytes(m, cfg, (cfg.target_len or s) * b, tp) if last else (0, 0)
    if stage is not None:
        # activation offloading is modelled without pipeline stages (the layout check refuses both)
        return (*_stage_activations(m, cfg, stage, stored, recompute, saved_logits, logits, b * s, tp, shards), 0)
    per_layer_extra = 0  # adapter intermediates and weight copies the layers save
    if cfg.adapter is not None and not cfg.checkpointing:
        # each adapter saves its rank-r intermediate (x A) for backward, in 16 bits
        per_layer_extra += 2 * adapter_input_elements(m, cfg.adapter) * b * s // tp
    if cfg.checkpointing:
        recompute += adapted_expert_bytes(m, cfg, tp)
    else:
        per_layer_extra += adapted_expert_bytes(m, cfg, tp)
    stored += per_layer_extra
    if st.autocast:
        # autocast's 16-bit weight copies are saved for backward; under checkpointing the
        # layers' are recomputed instead, the output head's (outside the checkpointed
        # layers) saved either way
        stored += autocast_weight_copy_bytes(m, cfg, layers=not cfg.checkpointing)
        if not cfg.checkpointing:
            per_layer_extra += autocast_weight_copy_bytes(m, cfg) - autocast_weight_copy_bytes(
                m, cfg, layers=False)
    offloaded = _offloaded_layer_bytes(m, cfg, in_layers + per_layer_extra, largest, per_layer_extra)
    return stored + saved_logits - offloaded, recompute, logits, offloaded


def _relative_bias_bytes(m: TransformerShape, cfg: RunConfig, s: int, t: int, tp: int) -> tuple[int, int]:
    """(saved, recompute transient) of T5's relative position bias: each stack's first layer looks
    up an (s, s, heads) table and adds the mask, a (batch, heads, s, s) bias every layer shares and
    every checkpointed layer takes as an input; in the embedding's dtype (autocast leaves
    embeddings in fp32). Nothing for other models."""
    if not m.relative_position_bias:
        return 0, 0
    w = int(cfg.storage.weight_bytes)
    saved = w * cfg.batch * m.heads * (s * s + t * t) // tp
    return saved, (w * m.heads * s * s // tp if cfg.checkpointing else 0)


def _offloaded_layer_bytes(m: TransformerShape, cfg: RunConfig, in_layers: int, largest: int, extra: int) -> int:
    """What activation offloading (torchtune's OffloadActivations, a saved-tensors hook around
    the layers) moves to host memory of the ``in_layers`` bytes the layers save: all but
    OFFLOAD_RESIDENT_LAYERS layers' worth (``largest`` plus a layer's share of ``extra``, the
    adapters' intermediates and weight copies). The output head and the loss are outside the
    hook (torchtune leaves the head out on purpose) and keep theirs on the GPU."""
    if cfg.offload != "activations":
        return 0
    n = m.layers + (m.decoder_layers or 0)
    per_layer = largest + -(-extra // max(n, 1))
    return max(0, in_layers - min(n, OFFLOAD_RESIDENT_LAYERS) * per_layer)


def _stage_activations(m: TransformerShape, cfg: RunConfig, stage: Stage, stored: int, recompute: int,
                       saved_logits: int, logits: int, tokens: int, tp: int, shards: int) -> tuple[int, int, int]:
    """A pipeline stage's activations: its layers' share of the per-layer extras (adapter inputs,
    adapted experts, autocast's weight copies; the head's copy on the last stage), times the
    micro-batches it holds in flight (1F1B: the first stage min(pp, m), the last 1)."""
    share = stage.layers / m.layers
    if cfg.adapter is not None and not cfg.checkpointing:
        stored += int(2 * adapter_input_elements(m, cfg.adapter) * tokens // tp * share)
    if cfg.checkpointing:
        recompute += adapted_expert_bytes(m, cfg, tp)
    else:
        stored += int(adapted_expert_bytes(m, cfg, tp) * share)
    if cfg.storage.autocast:
        head = autocast_weight_copy_bytes(m, cfg, layers=False)
        layers = autocast_weight_copy_bytes(m, cfg, layers=not cfg.checkpointing) - head
        stored += int(layers * share) + (head if stage.last else 0)
    return (stored + saved_logits) * stage.in_flight, recompute, logits


def adapted_expert_bytes(m: TransformerShape, cfg: RunConfig, tp: int) -> int:
    """The adapted expert weights (W + B A, 16 bits) that adapters on fused expert parameters
    build and save for backward: every MoE layer's, or under checkpointing the one layer's
    stack being rebuilt (0 without such adapters)."""
    if cfg.adapter is None or not cfg.training:
        return 0
    per_layer = 2 * expert_weight_copy_elements(m, cfg.adapter) // tp
    return per_layer if cfg.checkpointing else m.moe_layers * per_layer


def autocast_weight_copy_bytes(m: TransformerShape, cfg: RunConfig, *, layers: bool = True) -> int:
    """The 16-bit copies autocast makes of a transformer's weights: the layers' matrices
    (``layers``) but the routed experts, whose grouped GEMM autocast does not cover, and a
    vocabulary head's. Tensor parallelism splits them with the weights. FSDP runs mixed precision
    through its own MixedPrecision (:func:`fsdp_gather_bytes`), so its gathered weights are 16-bit
    already and autocast copies none (plain torch.autocast over fp32 FSDP would save full-size
    copies at any world size: traced under FSDP1 and FSDP2). A QLoRA base's NF4 matrices are
    dequantised, not cast: autocast copies none of them."""
    if cfg.parallelism.fsdp:
        return 0  # FSDP's mixed precision gathers the weights in 16 bits: nothing left to cast
    if cfg.adapter is not None and cfg.adapter.base_quantisation is not None:
        layers = False
    copied = (matrix_params(m) - routed_expert_params(m) if layers else 0) \
        + (m.vocab * m.hidden if cfg.head in ("lm", "logits") else 0)
    return int(2 * copied / cfg.sharding.activations)


def fsdp_gather_bytes(cfg: RunConfig) -> float:
    """Bytes per weight as FSDP gathers a unit: under AMP in the 16-bit compute dtype, as
    FSDP's MixedPrecision(param_dtype=...) runs it (what HF Accelerate, LLM Foundry and torchtitan
    set: the fp32 shard is cast before the all-gather); otherwise as the weights are stored."""
    return cfg.storage.activation_bytes if cfg.storage.autocast and cfg.parallelism.fsdp else cfg.storage.weight_bytes


def _loss_bytes(m: TransformerShape, cfg: RunConfig, tokens_out: int, tp: int) -> tuple[int, int]:
    """(saved, backward transient) bytes of the output head's loss over ``tokens_out`` tokens.

    Cross-entropy saves the log-softmax of the logits (the logits themselves are not saved:
    the output head saves its input)."""
    p = cfg.storage.activation_bytes
    if cfg.head == "lm" and cfg.loss == "fused":
        # fused linear cross-entropy (Liger-Kernel) computes logits, loss and gradients
        # chunk by chunk in the forward pass, ceil(vocab / hidden) chunks of tokens; it
        # keeps the gradient of the head's input for backward, never the full logits
        chunks = -(-m.vocab // m.hidden)
        saved_logits = p * tokens_out * m.hidden
        logits = (4 + p) * -(-tokens_out // chunks) * m.vocab // tp
    elif cfg.head == "lm" and cfg.loss == "chunked":
        # torchtune's CEWithChunkedOutputLoss: the head returns 16-bit logits in 8 chunks,
        # each upcast and passed to cross-entropy on its own, which keeps every chunk's
        # fp32 log-softmax for backward; only the backward transient is one chunk's
        saved_logits = 4 * tokens_out * m.vocab // tp
        logits = (4 + p) * -(-tokens_out // CHUNKED_LOSS_CHUNKS) * m.vocab // tp
    elif cfg.head == "lm":
        # log_softmax saves its output; its backward takes nll_loss's gradient and writes
        # its own, both of the loss's width, while the saved output is still live
        w = loss_element_bytes(m, cfg)
        saved_logits = w * tokens_out * m.vocab // tp
        logits = 2 * w * tokens_out * m.vocab // tp
        if m.final_softcap:
            saved_logits += p * tokens_out * m.vocab // tp  # tanh's output, in the logits' dtype
    elif cfg.head == "logits":  # logits kept, no cross-entropy (e.g. loss = logits.sum())
        saved_logits = p * tokens_out * m.vocab // tp
        logits = p * tokens_out * m.vocab // tp
    else:
        saved_logits = logits = 0
    return saved_logits, logits


def loss_element_bytes(m: TransformerShape, cfg: RunConfig) -> int:
    """Bytes per logit element in cross-entropy: fp32 when the loss upcasts the logits or
    autocast runs log_softmax in fp32 (CUDA's autocast policy), else the activations' width."""
    return 4 if m.loss_fp32 or cfg.storage.autocast else cfg.storage.activation_bytes


#: sequence length when none is given: the model's context, capped at 2048 tokens
DEFAULT_SEQ_CAP = 2048


def transformer_seq_len(m: TransformerShape, cfg: RunConfig) -> int:
    """The sequence length a run uses: --seq-len, else the model's context
    (512 if unknown), capped at DEFAULT_SEQ_CAP."""
    return cfg.seq_len or min(m.max_seq_len or 512, DEFAULT_SEQ_CAP)


def default_seq_len(shape: ModelShape) -> int:
    """The sequence length the memory model assumes when none is given."""
    if shape.transformer is not None:
        return transformer_seq_len(shape.transformer, RunConfig())
    if shape.rnn is not None:
        return shape.rnn.seq_len
    return DEFAULT_SEQ_CAP


def resolved_input(shape: ModelShape, cfg: RunConfig) -> dict[str, int | None]:
    """The input size a run uses, defaults resolved: the sequence length of a transformer or RNN
    and the image size of a CNN; None where the model has no such dimension (or is unknown)."""
    seq = cfg.seq_len or default_seq_len(shape) if shape.transformer is not None or shape.rnn is not None else None
    cnn = shape.cnn
    return {"seq_len": seq, "image_size": cfg.image_size or (cnn.image_size if cnn is not None else None)}


def input_default_note(shape: ModelShape, cfg: RunConfig) -> str | None:
    """What a run assumed for an input size it was not given, in words; None if it was given."""
    m = shape.transformer
    if cfg.seq_len is None and m is not None:
        if m.max_seq_len is None:
            context = "512, the model's context being unknown"
        elif m.max_seq_len > DEFAULT_SEQ_CAP:
            context = f"the model's context ({m.max_seq_len:,}), capped at {DEFAULT_SEQ_CAP:,}"
        else:
            context = "the model's context"
        return f"sequence length {transformer_seq_len(m, cfg):,} tokens (default: {context}); give a sequence length " \
               "to change it"
    if cfg.seq_len is None and shape.rnn is not None:
        return f"sequence length {shape.rnn.seq_len:,} steps (default: the model's)"
    if cfg.image_size is None and shape.cnn is not None:
        return f"image size {shape.cnn.image_size} px (default: the model's)"
    return None


def offloaded_activation_bytes(shape: ModelShape, cfg: RunConfig) -> int:
    """Saved activations an activation-offloading run holds in host memory (0 otherwise)."""
    m = shape.transformer
    if cfg.offload != "activations" or not cfg.training or m is None:
        return 0
    split = cfg.sharding
    return transformer_activation_bytes(m, cfg, transformer_seq_len(m, cfg) // split.sequence,
                                        tp=split.activations, shards=split.weights)[3]


def activation_bytes(shape: ModelShape, cfg: RunConfig, stage: Stage | None = None) -> tuple[int, int, int, bool]:
    """(saved activations, recompute transient, logits/loss transient, modelled?), of a pipeline
    ``stage`` where there are stages. Context parallelism gives each rank seq / cp tokens."""
    arch = shape.arch
    if arch is None:
        return 0, 0, 0, False
    split = cfg.sharding
    if isinstance(arch, TransformerShape):
        seq = transformer_seq_len(arch, cfg) // split.sequence
        saved, recompute, logits, _ = transformer_activation_bytes(arch, cfg, seq, tp=split.activations,
                                                                   shards=split.weights, stage=stage)
        if split.sequence > 1:
            # ring attention: the K and V chunk in use and the one being received, one layer at a time
            p = cfg.storage.activation_bytes
            recompute += 2 * 2 * arch.n_kv_heads * arch.attention_head_dim * seq * cfg.batch * p // split.activations
        return saved, recompute, logits, True
    st = cfg.storage
    per_sample = arch.activation_bytes_per_sample_fp32
    if st.autocast:
        per_sample = arch.activation_bytes_per_sample_mixed or per_sample
    else:
        # the measured figure is fp32: scale it to the precision's element width
        per_sample = per_sample * st.activation_bytes // 4
    copies = 0
    if st.autocast and not cfg.checkpointing:
        # autocast's 16-bit weight copies, saved for backward (the zoo's mixed
        # figures are per sample and leave them out)
        copies = 2 * shape.params
    scale = 1.0
    transient = 0
    if isinstance(arch, CnnShape):
        if cfg.image_size:
            scale = (cfg.image_size / arch.image_size) ** 2
    else:
        if cfg.seq_len:
            scale = cfg.seq_len / arch.seq_len
        if arch.vocab and cfg.head == "lm":
            # the per-token figure includes the saved log-softmax; its gradient and
            # the logits' gradient are live at the start of backward
            seq = cfg.seq_len or arch.seq_len
            transient = (4 + st.activation_bytes) * cfg.batch * seq * arch.vocab
    return int(per_sample * scale * cfg.batch / split.activations) + copies, 0, transient, True


# --------------------------------------------------------------------------
# weights, gradients, optimizer


class Trainable(BaseModel):
    """The parameters a run trains, and the bytes of their gradients and optimizer state."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    params: int
    grad_bytes: int | None
    state_bytes: int | None
    #: the trained parameters are adapters beside the model's own weights
    adapters: bool = False


def trainable(shape: ModelShape, cfg: RunConfig) -> Trainable:
    """What trains: the model's trainable parameters in its storage precision, or,
    with LoRA/QLoRA, the adapters in fp32 (the base is frozen)."""
    if cfg.adapter is not None:
        m = require_transformer(shape.transformer, cfg.adapter)
        width = cfg.adapter.bytes_per_param
        return Trainable(params=adapter_params(m, cfg.adapter), grad_bytes=width, state_bytes=width, adapters=True)
    st = cfg.storage
    return Trainable(params=shape.trainable, grad_bytes=st.grad_bytes, state_bytes=st.optimizer_state_bytes)


def head_gradient_bytes(shape: ModelShape, cfg: RunConfig) -> int:
    """Gradients of the last layers, written at the very start of backward: a
    transformer's output head (vocab x hidden; with tied embeddings the
    embedding's gradient is allocated then), a CNN's classifier (the zoo's
    ``head_params``), an RNN's decoder (vocab x hidden)."""
    arch = shape.arch
    width = cfg.storage.grad_bytes
    if arch is None or not cfg.training or width is None or cfg.adapter is not None:
        return 0  # with adapters the output head is frozen
    shards = cfg.sharding.gradients
    if isinstance(arch, CnnShape):
        return int(arch.head_params * width / shards)
    if arch.vocab and arch.hidden and cfg.head == "lm":
        return int(arch.vocab * arch.hidden * width / shards)
    return 0


def adafactor_state_elements(shape: ModelShape) -> int:
    """Adafactor (no momentum) keeps a row and a column factor per matrix.

    For transformers we know the matrices; otherwise we count the weights as
    if they formed square matrices of one layer's size, which is small either way.
    """
    m = shape.transformer
    if m is not None:
        h, f = m.hidden, m.ffn
        per_layer = 4 * (h + h) + (3 if m.gated_mlp else 2) * (h + f)
        layers = m.layers + m.decoder_layers
        return layers * per_layer * m.experts + (m.vocab + h)
    return 2 * int(math.isqrt(shape.trainable)) * 64


def weight_bytes(
    shape: ModelShape, precision: str, adapter: Adapter | None = None, weight_format: str | None = None,
    storage: Storage | None = None,
) -> int:
    """Weights; for int8/int4 only the layers' linear weights are quantised,
    embeddings and the output head stay 16-bit (GPTQ, AWQ, LLM.int8 all do this).
    QLoRA stores the same linear layers in NF4 with its absmax constants; adapters
    add their own fp32 weights. ``storage``: how the run stores them (``RunConfig.storage``),
    when not as ``precision`` does on its own."""
    st = storage or storage_spec(precision)
    if weight_format is not None:
        fmt = WEIGHT_FORMATS[weight_format]
        if fmt.scope == "model":
            return int(shape.params * fmt.bits_per_weight / 8)
        m = shape.transformer
        quantised = min(matrix_params(m), shape.params) if m is not None else shape.params
        return int(quantised * fmt.bits_per_weight / 8 + (shape.params - quantised) * 2)
    if adapter is not None:
        m = require_transformer(shape.transformer, adapter)
        extra = adapter_params(m, adapter) * adapter.bytes_per_param
        if adapter.base_quantisation is not None:
            quantised = min(matrix_params(m), shape.params)
            rest = shape.params - quantised
            # the rest (embeddings, norms, head) in the run's storage: 16 bits, or fp32 under
            # mixed precision, as peft's prepare_model_for_kbit_training casts them
            return int(quantised * adapter.base_bytes_per_weight + rest * st.weight_bytes) + extra
        return int(shape.params * st.weight_bytes) + extra
    if st.quantised:
        shaped = shape.transformer
        quantised = min(matrix_params(shaped), shape.params) if shaped is not None else shape.params
        rest = shape.params - quantised
        return int(quantised * (st.weight_bytes + st.quant_scale_bytes) + rest * 2)
    return int(shape.params * st.weight_bytes)


def optimizer_step_bytes(shape: ModelShape, cfg: RunConfig, stage: Stage | None = None) -> int:
    """Temporaries the optimizer step holds on the GPU (OPTIMIZER_STEP_TEMPORARIES), per GPU."""
    train = trainable(shape, cfg)
    per = OPTIMIZER_STEP_TEMPORARIES.get(cfg.optimizer, 0) if cfg.optimizer_impl == "foreach" else 0
    if not cfg.training or train.state_bytes is None or cfg.offload in ("optimizer", "all"):
        return 0
    # DeepSpeed ZeRO steps on an fp32 copy of the partition's gradients (stage_1_and_2.py step():
    # flatten(...).to(fp32); stage3.py _prepare_fp32_grad_for_sub_group)
    fp32_grads = 4 if cfg.storage.master_weight_bytes and not train.adapters else 0
    if stage is not None or cfg.sharding.ep_split:
        return math.ceil(train.params * (per * train.state_bytes + fp32_grads) * held_fractions(shape, cfg, stage)[2])
    return math.ceil(train.params * (per * train.state_bytes + fp32_grads) / cfg.sharding.optimizer)


def optimizer_bytes(shape: ModelShape, cfg: RunConfig) -> int:
    train = trainable(shape, cfg)
    if not cfg.training or train.state_bytes is None:
        return 0
    # DeepSpeed's 16-bit modes keep an fp32 master copy with the optimizer state
    master = 0 if train.adapters else train.params * cfg.storage.master_weight_bytes
    if cfg.optimizer == "adafactor" and not train.adapters:
        return 4 * adafactor_state_elements(shape) + master
    if cfg.optimizer in BNB_OPTIMIZERS:
        # bitsandbytes: m and v in 8 bits, one fp32 absmax per 2048-element block each
        return int(train.params * (2 + 2 * 4 / 2048)) + master
    # Adafactor's factors of rank-r adapter matrices are about as large as the matrices
    states = 2 if cfg.optimizer == "adafactor" else OPTIMIZER_STATES[cfg.optimizer]
    return train.params * states * train.state_bytes + master


# --------------------------------------------------------------------------
# inference


def kv_cache_bytes(m: TransformerShape, batch: int, seq_len: int, p: float, tp: int = 1) -> int:
    """layers x batch x seq x the cached elements per token and layer x bytes: K and V of
    each KV head on this GPU (2 x kv_heads x head_dim), or latent attention's latent and
    rotary key (TransformerShape.kv_cache_elements). A sliding-window layer caches at most its
    window of the sequence (transformers' sliding-window cache layers keep only the window;
    serving engines' paged caches are sized in memory.serving)."""
    layers = m.decoder_layers or m.layers
    sliding = min(m.sliding_layers, layers)
    tokens = (layers - sliding) * seq_len + sliding * min(seq_len, m.sliding_window or seq_len)
    return int(tokens * batch * m.kv_cache_elements(tp) * p)


#: MLP intermediates (ffn wide) live at once in an inference pass, with no autograd to
#: keep anything: a gated MLP holds act(gate), up and their product; GELU and ReLU their
#: input and output; GPT-2's tanh GELU (gelu_new, op by op) its input, 0.5*x and two
#: temporaries of the chain at a time.
INFERENCE_MLP_TENSORS: dict[str, int] = {"swiglu": 3, "geglu": 3, "gelu": 2, "relu": 2, "gelu_new": 4,
                                            "geglu_new": 4}


def inference_working_bytes(m: TransformerShape, cfg: RunConfig, seq_len: int, tp: int = 1) -> int:
    """Transient activations of a prefill pass over ``seq_len`` tokens.

    Nothing is saved for backward; the peak is the largest set of tensors
    alive at once inside a layer: the hidden state and its norm, the MLP's
    intermediate tensors, or (without flash attention) the score matrix, plus
    the last position's fp32 logits (generation computes only those).
    """
    p = cfg.storage.activation_bytes
    b, s, h = cfg.batch, seq_len, m.hidden
    # a layer's input, the residual after attention and the norm's output; a decoder's
    # forward also keeps its embedding output referenced for the whole pass, a tensor of its
    # own from the second layer on
    base = (4 if m.kind == "decoder" and m.layers > 1 else 3) * p * s * b * h
    k = m.experts_per_token or 1

    def mlp_tensors(width: int, copies: int = 1) -> int:
        """Bytes of the intermediates live at once in ``copies`` MLPs of ``width`` per token."""
        return INFERENCE_MLP_TENSORS[m.mlp] * copies * p * s * b * width // tp

    mlp = mlp_tensors(m.ffn, k)
    if (m.experts or 1) > 1:
        # routed experts (transformers' grouped GEMM): the tokens copied once per routed expert
        # live through the experts' MLPs, whose fused gate-and-up output stays live while the
        # gate is applied (one ffn-wide tensor more than separate projections); then their down
        # projections, scaled by the routing weights (in fp32 when the router keeps them so)
        # and put back in token order, the scaled copy live while it is reordered
        # (autocast does not cover the grouped GEMM: under AMP the experts run in fp32)
        e = 4 if cfg.storage.autocast else p
        w = 4 if m.router_fp32 or cfg.storage.autocast else p
        fused = k * e * s * b * m.ffn // tp if m.gated_mlp else 0
        mlp = max(e * s * b * k * h + mlp * e // p + fused, (2 * e + 2 * w) * s * b * k * h)
    if m.shared_ffn:
        # the shared experts run after the routed ones, whose output is live beside them
        mlp = max(mlp, p * s * b * h + mlp_tensors(m.shared_ffn))
    if m.dense_ffn is not None:
        mlp = max(mlp, mlp_tensors(m.dense_ffn))
    # eager attention: the scores and the softmax's output are live together; a model that
    # upcasts the softmax (softmax(x, dtype=float32)) first copies the 16-bit scores to fp32,
    # so the scores, that copy and the fp32 output are live at once. A decoder adds its
    # causal mask, one (s x s) matrix per sequence in the activations' dtype.
    upcast = m.softmax_fp32 or cfg.storage.autocast  # CUDA's autocast runs softmax in fp32
    score_bytes = p + (8 if upcast and p < 4 else p)  # (soft-capping replaces the scores)
    mask = p * s * s * b if m.kind == "decoder" else 0
    attn = (score_bytes * m.heads * s * s * b // tp + mask) if not cfg.flash_attention else 4 * m.heads * s * b
    if m.mla is not None:
        # latent attention (transformers' DeepseekV3Attention): the query projection's output
        # and its rotated part, both still referenced, the joined query and the expanded key
        # (qk_head_dim a head), the KV up-projection's output, and the KV latent
        mla = m.mla
        per_head = 3 * mla.qk_head_dim + mla.qk_rope_head_dim + mla.qk_nope_head_dim + mla.v_head_dim
        qkv = p * s * b * (m.heads * per_head // tp + mla.kv_lora_rank + mla.qk_rope_head_dim)
    else:
        qkv = p * s * b * (m.heads + 2 * m.n_kv_heads) * m.attention_head_dim // tp
    # generation computes the last position's logits (in fp32); a plain forward pass
    # keeps every position's, in the activations' dtype (transformers >= 4.45 no longer
    # upcasts them unless it computes a loss)
    logits = 4 * b * m.vocab if cfg.logits == "last" else p * s * b * m.vocab // tp
    if m.final_softcap:
        logits *= 2  # logits / cap, tanh and * cap: two logit-sized tensors at a time
    # the layers' tensors are freed before the head runs: the peak is the larger of a
    # layer's working set and the head's (the final hidden state, its norm, the logits)
    return max(base + max(mlp, attn + qkv), 2 * p * s * b * h + logits)


# --------------------------------------------------------------------------
# the estimate


def check_layout(shape: ModelShape, cfg: RunConfig) -> None:
    """The layout fits the model: tensor parallelism splits attention heads (it needs a
    transformer whose head count the tensor-parallel degree divides); pipeline stages split
    the layers evenly, context parallelism the sequence, expert parallelism the experts."""
    par = cfg.parallelism
    _check_model_parallel(shape, cfg, par)
    tp = par.tp
    if tp == 1:
        return
    m = shape.transformer
    if m is None:
        raise UsageError(
            "tensor parallelism splits attention heads and needs a transformer's shape",
            hint="describe the model by name or by its Hugging Face config, or shard with ZeRO-3/FSDP",
            field=tensor_parallel_field(True) if cfg.tp is not None else None,
        )
    if not m.allows_tp(tp):
        raise UsageError(
            f"tensor parallelism over {tp} GPUs does not divide {shape.name}'s {m.heads} attention heads and "
            f"{m.n_kv_heads} KV heads",
            hint=f"use a {'tensor-parallel degree' if cfg.tp is not None else 'GPU count'} that divides {m.heads} "
                 f"and divides or is a multiple of {m.n_kv_heads}",
            field=tensor_parallel_field(cfg.tp is not None),
        )


def _check_model_parallel(shape: ModelShape, cfg: RunConfig, par: Parallelism) -> None:
    """Pipeline, context and expert parallelism: what each needs of the model and the run."""
    given = [(name, value) for name, value in (("pp", par.pp), ("cp", par.cp), ("ep", par.ep)) if value > 1]
    if not given:
        return
    m = shape.transformer
    name, value = given[0]
    if m is None:
        what = f"{value} " + {"pp": "pipeline stages", "cp": "context-parallel ranks", "ep": "expert-parallel ranks"}[name]
        raise UsageError(f"{what} need a transformer's layer shapes, which a parameter count does not give"
                         if shape.arch is None else f"{what} are modelled for transformers only",
                         hint="describe the model by name or by its Hugging Face config", field=name)
    if m.decoder_layers and (par.pp > 1 or par.cp > 1):
        raise UsageError(f"pipeline and context parallelism of an encoder-decoder model ({shape.name}) are not "
                         "modelled", hint="use tp, or ZeRO/FSDP", field="pp" if par.pp > 1 else "cp")
    if par.pp > m.layers:
        raise UsageError(f"{par.pp} pipeline stages are more than {shape.name}'s {m.layers} layers", field="pp",
                         hint=f"use at most {m.layers} stages")
    if m.layers % par.pp:
        raise UsageError(f"{shape.name}'s {m.layers} layers do not split evenly into {par.pp} pipeline stages",
                         hint=f"use a stage count that divides {m.layers}", field="pp")
    if par.cp > 1:
        if not cfg.training:
            raise UsageError("context parallelism is modelled for training", field="cp")
        if not cfg.flash_attention:
            raise UsageError("context parallelism runs fused (ring) attention kernels; eager attention is not "
                             "modelled with it", hint="use fused attention", field="cp")
        seq = transformer_seq_len(m, cfg)
        if seq % (2 * par.cp):
            raise UsageError(f"the sequence of {seq:,} tokens does not split into 2 x {par.cp} chunks: context "
                             "parallelism gives each rank two chunks to balance causal attention (Megatron-Core)",
                             hint=f"use a sequence length that is a multiple of {2 * par.cp}", field="cp")
    if par.ep > 1:
        if (m.experts or 1) <= 1:
            raise UsageError(f"expert parallelism needs a mixture-of-experts model; {shape.name} is dense",
                             hint="use tensor or pipeline parallelism instead", field="ep")
        if m.experts % par.ep:
            raise UsageError(f"{shape.name}'s {m.experts} experts per layer do not split evenly over {par.ep} GPUs",
                             hint=f"use an expert-parallel degree that divides {m.experts}", field="ep")


class _State(BaseModel):
    """Weights, gradients and optimizer state one GPU holds, and what else is
    live for the whole step (gathered layers, gradient buckets)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    weights: int
    grads: int
    opt: int
    #: what else is live for the whole step, buffer by buffer
    parts: tuple[TransientPart, ...] = ()
    #: of ``weights``, what stays whole on every rank and on the GPU under ZeRO-3/FSDP and weight
    #: offload: a QLoRA base's quantisation constants (:func:`quant_constant_bytes`)
    resident: int = 0
    #: offloaded bytes held off the GPU
    host: int = 0
    notes: tuple[str, ...] = ()

    @property
    def transient(self) -> int:
        return sum(p.bytes for p in self.parts)


def gathered_layer_bytes(m: TransformerShape, cfg: RunConfig, ep: int = 1) -> int:
    """Bytes of one transformer layer as ZeRO-3/FSDP all-gathers it (a rank's own experts under
    ``ep``): in the format its shards are stored in. A QLoRA base is gathered as its packed 4-bit
    codes: bitsandbytes' Params4bit with bnb_4bit_quant_storage=bfloat16 is flattened and gathered
    as that storage (peft's FSDP-QLoRA guide), while its absmax constants live in the module's
    QuantState, beside the parameter and whole on every rank (:func:`quant_constant_bytes`). Each
    matrix is dequantised for compute one at a time (the dequantisation transient)."""
    params = layer_params(m) if ep == 1 else attention_params(m) + _moe_mlp_params(m) // ep
    adapter = cfg.adapter
    if adapter is not None and adapter.base_quantisation is not None:
        return int(params * adapter.base_code_bytes_per_weight)
    return int(params * fsdp_gather_bytes(cfg))


def quant_constant_bytes(shape: ModelShape, cfg: RunConfig, held: float) -> tuple[int, int]:
    """(bytes of a QLoRA base's quantisation constants one GPU holds, the share of them its
    sharded weights already count) for a GPU holding ``held`` of the weights. bitsandbytes keeps
    the absmax constants in a QuantState object on the Params4bit and its Linear4bit module
    (bitsandbytes/nn/modules.py), not as an nn.Parameter; FSDP flattens and ZeRO-3 partitions only
    parameters, so every rank holds the constants of all the layers it runs whole, and FSDP's CPU
    offload (which moves flat parameters) leaves them on the GPU. (0, 0) without a QLoRA base."""
    adapter, m = cfg.adapter, shape.transformer
    if adapter is None or adapter.base_quantisation is None or m is None:
        return 0, 0
    constants = min(matrix_params(m), shape.params) * adapter.base_constant_bytes_per_weight
    return math.ceil(constants * held * cfg.parallelism.weight_shards), math.ceil(constants * held)


def fsdp_root_bytes(m: TransformerShape, cfg: RunConfig) -> int:
    """Bytes of FSDP's root unit, gathered in full through the backward of a training step: the
    parameters outside the wrapped transformer layers, the embedding and an untied output head (the
    final norm is negligible). PyTorch's FSDP does not reshard the root after forward
    (torch/distributed/fsdp/_runtime_utils.py, _post_forward_reshard frees the unsharded parameters
    only ``not state._is_root``) and reshards it when backward ends; FSDP2's fully_shard leaves the
    root's reshard_after_forward off unless told otherwise; and the head runs first in backward, so
    its group is gathered at the start of backward either way. In the weights' stored width, split
    by tensor parallelism (vocabulary-parallel embedding and head). 0 but for FSDP training."""
    par = cfg.parallelism
    if not (cfg.training and par.fsdp and par.gathers_layers):
        return 0
    params = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
    return int(params * fsdp_gather_bytes(cfg)) // cfg.sharding.activations


def deepspeed_bucket_bytes(cfg: RunConfig) -> int:
    """DeepSpeed ZeRO's flat gradient bucket (DEEPSPEED_REDUCE_BUCKET_ELEMENTS) in the dtype of
    the trained parameters (``self.dtype`` in stage_1_and_2.py and stage3.py): the run's gradient
    width for a whole model (16 bits for AMP under ZeRO, :func:`..domain.precision.deepspeed_storage`;
    4 bytes in fp32), and for adapters the 16-bit width DeepSpeed's bf16/fp16 mode casts the
    whole module to (engine.py, ``module.bfloat16()`` / ``half()``). 0 but for DeepSpeed ZeRO
    (:attr:`RunConfig.deepspeed`, one GPU included: DeepSpeed allocates it whatever the world
    size) or outside training."""
    if not cfg.training or not cfg.deepspeed:
        return 0
    return DEEPSPEED_REDUCE_BUCKET_ELEMENTS * deepspeed_gradient_width(cfg)


def deepspeed_gradient_width(cfg: RunConfig) -> int:
    """Bytes an element of DeepSpeed ZeRO's gradient buffers (``self.dtype`` in stage_1_and_2.py and
    stage3.py, the trained parameters' dtype): the run's gradient width for a whole model, and for
    adapters the 16-bit width DeepSpeed's bf16/fp16 mode casts the whole module to."""
    st = cfg.storage
    return st.grad_bytes if cfg.adapter is None and st.grad_bytes else st.activation_bytes


def model_state(shape: ModelShape, cfg: RunConfig, stage: Stage | None = None) -> _State:
    """Per-GPU weights, gradients and optimizer state under the run's sharding (of a pipeline
    ``stage`` where there are stages)."""
    split, par = cfg.sharding, cfg.parallelism
    train = trainable(shape, cfg)
    if stage is not None or split.ep_split:
        held_w, held_g, held_o = held_fractions(shape, cfg, stage)
        weights = math.ceil(weight_bytes(shape, cfg.precision, cfg.adapter, cfg.weight_format, cfg.storage) * held_w)
        grads = math.ceil(train.params * train.grad_bytes * held_g) if cfg.training and train.grad_bytes else 0
        opt = math.ceil(optimizer_bytes(shape, cfg) * held_o)
    else:
        held_w = 1 / split.weights
        weights = math.ceil(weight_bytes(shape, cfg.precision, cfg.adapter, cfg.weight_format, cfg.storage)
                            / split.weights)
        grads = math.ceil(train.params * train.grad_bytes / split.gradients) if cfg.training and train.grad_bytes \
            else 0
        opt = math.ceil(optimizer_bytes(shape, cfg) / split.optimizer)
    parts: list[TransientPart] = []
    notes: list[str] = []
    # a QLoRA base's quantisation constants are not sharded: whole on every rank (ZeRO-3, FSDP)
    resident, share = quant_constant_bytes(shape, cfg, held_w)
    weights += resident - share
    if resident > share:
        notes.append(f"QLoRA under {'FSDP' if par.fsdp else 'ZeRO-3'}: bitsandbytes keeps the 4-bit base's absmax "
                     f"constants beside its parameters, so each GPU holds them whole ({format_bytes(resident)})")
    m = shape.transformer
    if par.gathers_layers and m is not None:
        # one layer gathered for compute plus one prefetched, in the layer's stored format (a rank's
        # own experts under ep)
        parts += transient_part("gathered layers", 2 * gathered_layer_bytes(m, cfg, par.ep))
        root = fsdp_root_bytes(m, cfg) if stage is None else 0
        if root:
            parts += transient_part("FSDP root unit", root)
            notes.append(f"FSDP's root unit (embedding, final norm, output head) stays gathered from the forward "
                         f"through the backward ({format_bytes(root)})")
    if cfg.adapter is not None and cfg.adapter.base_quantisation is not None and m is not None:
        # each NF4 matrix is dequantised to 16 bits for its matmul, forward and backward
        tp = split.activations
        parts += transient_part("dequantised matrix", 2 * largest_matrix(m) // tp)
    saved = adapted_expert_bytes(m, cfg, split.activations) if m is not None else 0
    if saved:
        notes.append(f"adapters on fused experts: peft builds each MoE layer's adapted expert weights (W + B A) and "
                     f"saves them for backward, {format_bytes(saved)} among the activations "
                     f"({'one layer, as checkpointing rebuilds them' if cfg.checkpointing else 'every MoE layer'})")
    if par.replicated_gradients and cfg.training:
        # DDP's flat gradient buckets hold a second copy of the gradients
        parts += transient_part("DDP gradient buckets", grads)
        notes.append("DDP gradient buckets double the gradient memory (gradient_as_bucket_view=False, the default)")
    bucket = deepspeed_bucket_bytes(cfg)
    if cfg.storage.master_weight_bytes and cfg.training and cfg.adapter is None:
        notes.append("DeepSpeed ZeRO keeps an fp32 master copy of the weights with fp32 optimizer state, sharded "
                     "alike, and runs mixed precision as its own 16-bit mode (it refuses torch AMP): 16-bit "
                     "weights and gradients on each GPU (ZeRO paper: 2 + 2 + 12 bytes a parameter with Adam)")
    if bucket:
        parts += transient_part("ZeRO reduce bucket", bucket)
        notes.append(f"DeepSpeed's gradient bucket: reduce_bucket_size, 500M elements by default "
                     f"({format_bytes(bucket)})")
    state = _State(weights=weights, grads=grads, opt=opt, parts=tuple(parts), resident=resident,
                   notes=tuple(notes))
    return _offload(state, shape, cfg, train.params, stage) if cfg.offload != "none" else state


def _offload(state: _State, shape: ModelShape, cfg: RunConfig, trained: int, stage: Stage | None = None) -> _State:
    """Move offloaded state off the GPU. Optimizer offload (ZeRO-Offload) keeps AMP's
    fp32 master weights and fp32 gradients with the optimizer state on the host; the
    GPU keeps 16-bit working weights and gradients. Weight offload streams the weights
    in layer by layer, two layers resident (one in use, one prefetched)."""
    split = cfg.sharding
    if cfg.offload == "activations" and not cfg.training:
        raise UsageError("activation offloading moves what training saves for backward; inference saves nothing",
                         hint="offload nothing, or train", field="offload")
    if cfg.offload == "activations" and shape.transformer is None:
        raise UsageError("activation offloading is modelled for transformers only",
                         hint="describe the model by name or by its Hugging Face config", field="offload")
    if cfg.offload == "activations" and stage is not None:
        raise UsageError("activation offloading is modelled without pipeline stages (torchtune runs it so)",
                         hint="use one pipeline stage, or offload nothing", field="offload")
    if cfg.offload == "activations" and cfg.offload_to != "cpu":
        raise UsageError("offloaded activations live in host RAM (pinned memory), not on NVMe",
                         hint="offload them to the CPU", field="offload-to")
    check_offload(cfg.strategy, cfg.offload, cfg.offload_to, cfg.training, cfg.layout_degrees, cfg.optimizer)
    if cfg.offload in ("params", "all") and cfg.gpus > 1 and not shards_weights(cfg.strategy):
        raise UsageError("offloading the weights streams each GPU's shard: it needs ZeRO-3 or FSDP over several GPUs",
                         hint="shard with ZeRO-3 or FSDP, or offload the optimizer only", field="offload")
    weights, grads, opt, parts, host = state.weights, state.grads, state.opt, state.parts, 0
    notes = list(state.notes)
    if cfg.offload in ("optimizer", "all") and cfg.training:
        host += opt
        opt = 0
        if cfg.storage.master_weight_bytes and cfg.adapter is None:
            # DeepSpeed's 16-bit mode: the master weights went with the optimizer state; the
            # CPU step also keeps fp32 gradients on the host
            # (a buffer per optimizer partition: initialize_optimizer_states, stage_1_and_2.py)
            host += math.ceil(trained * 4 / split.optimizer)
        elif cfg.storage.autocast and cfg.adapter is None:
            if stage is not None or cfg.sharding.ep_split:
                held_w, held_g, _ = held_fractions(shape, cfg, stage)
                master = math.ceil(shape.params * 4 * held_w)
                host += master + math.ceil(trained * 4 * held_g)
            else:
                master = math.ceil(shape.params * 4 / split.weights)
                host += master + math.ceil(trained * 4 / split.gradients)
            weights -= master // 2
            grads //= 2
        notes.append("optimizer offload: the optimizer step runs on the CPU")
        if cfg.deepspeed:
            grads, buffers, pinned, note = _deepspeed_offloaded_gradients(shape, cfg, grads)
            parts += transient_part("offload copy buffer", buffers)
            host += pinned
            notes.append(note)
    if cfg.offload in ("params", "all"):
        m = shape.transformer
        par = cfg.parallelism
        if m is None:
            layer = 0
        elif par.gathers_layers:
            # the two gathered layers are already counted (model_state); each is all-gathered from
            # a GPU copy of the rank's CPU shard (FSDP's FlatParamHandle.pre_unshard,
            # flat_param_to(device)), dropped once the gathered parameter replaces it: one at a time
            layer = -(-gathered_layer_bytes(m, cfg, par.ep) // par.zero_ranks)
        else:
            # one GPU: two layers streamed in, in their stored format
            layer = 2 * gathered_layer_bytes(m, cfg, par.ep) // split.activations
        # a QLoRA base's quantisation constants are not parameters: they stay on the GPU
        host += weights - state.resident
        weights = state.resident
        parts += transient_part("streamed layers", layer)
        notes.append("weight offload: each layer's weights stream in over PCIe, forward and backward")
    if cfg.offload == "all" and cfg.training:
        host += grads
        grads = 0
    return state.model_copy(update={"weights": weights, "grads": grads, "opt": opt, "parts": parts,
                                    "host": host, "notes": tuple(notes)})


def largest_trained_elements(shape: ModelShape, cfg: RunConfig) -> int | None:
    """Elements of the largest trained parameter: an adapter matrix, or a transformer's embedding,
    output head, largest linear weight or (fused as one 3-D parameter) a layer's experts; None
    where the model's shape is unknown."""
    m = shape.transformer
    if m is None:
        return None
    if cfg.adapter is not None:
        return largest_adapter_elements(m, cfg.adapter)
    fused_experts = m.experts * m.hidden * m.ffn * (2 if m.gated_mlp else 1) \
        if m.experts > 1 and m.expert_adapters == "parameter" else 0
    return max(largest_matrix(m), m.vocab * m.hidden, fused_experts)


def _deepspeed_offloaded_gradients(shape: ModelShape, cfg: RunConfig, grads: int) -> tuple[int, int, int, str]:
    """(gradients left on the GPU, GPU buffers, host bytes, note) of DeepSpeed's optimizer offload.
    ZeRO-1 keeps the 16-bit gradients on the GPU until the end of backward; ZeRO-2 copies each
    bucket's share into the host's fp32 gradients as it is reduced (copy_grads_in_partition,
    stage_1_and_2.py), so no gradient partition stays on the GPU (ZeRO-Offload, Ren et al. 2021:
    16-bit weights on the GPU, gradients offloaded); both keep a copy buffer of the largest trained
    parameter on the GPU and in pinned host memory (temp_grad_buffer_for_gpu_offload / _cpu_offload,
    sized by the largest parameter of the optimizer's groups: for adapters an adapter matrix) and,
    when gradients accumulate, a host copy of the partition's (accumulated_grads_in_cpu), all in
    DeepSpeed's gradient dtype (:func:`deepspeed_gradient_width`). The larger GPU buffer of an
    offloading ZeRO-1/2 run is not this one but the reduce bucket (:func:`deepspeed_bucket_bytes`):
    CPU offload turns contiguous_gradients on ("contiguous_gradients or self.cpu_offload") and
    setup_buckets allocates reduce_bucket_size elements whatever the trained parameters number, so
    a LoRA run holds the whole 5e8-element bucket too. ZeRO-3 keeps its 16-bit gradient partitions in a host buffer (grad_partitions_flat_buffer on the
    optimizer's device, stage3.py)."""
    train = trainable(shape, cfg)
    stage = ZERO_STAGE[cfg.strategy]
    if stage >= 3:
        return 0, 0, grads, ("ZeRO-3 offload: each gradient partition leaves the GPU for a 16-bit host buffer "
                             "as it is reduced")
    width = deepspeed_gradient_width(cfg)
    largest = largest_trained_elements(shape, cfg)
    buffer = largest * width if largest is not None else 0
    accumulated = math.ceil(train.params * width / cfg.sharding.optimizer) \
        if cfg.micro_batches > 1 or cfg.persistent_grads else 0
    kept = grads if stage == 1 else 0
    where = "stay on the GPU until the end of backward" if stage == 1 else \
        "leave the GPU bucket by bucket for the host's fp32 gradients"
    copy = f"a {8 * width}-bit copy buffer of the largest trained parameter on the GPU and in pinned host " \
        f"memory ({format_bytes(buffer)} each)" if largest is not None else \
        f"a {8 * width}-bit copy buffer of the largest trained parameter, not counted: the model's shape is unknown"
    return kept, buffer, buffer + accumulated, (f"ZeRO-Offload on DeepSpeed ZeRO-{stage} (the stage a ddp run that "
                                                f"offloads its optimizer runs on is ZeRO-2): the 16-bit gradients "
                                                f"{where}; DeepSpeed keeps {copy}")


def tied_embedding_gradient_bytes(shape: ModelShape, cfg: RunConfig) -> int:
    """With tied embeddings the output head and the embedding each produce a gradient of the
    shared matrix, and autograd sums them out of place: both contributions and their sum
    (the one kept, counted with the gradients) are live at once. Exact mode shows the two
    extra copies in fp32 under autocast and in 16 bits in pure bf16."""
    m = shape.transformer
    width = cfg.storage.grad_bytes
    if m is None or not m.tied_embeddings or not cfg.training or width is None or cfg.adapter is not None:
        return 0
    # the sum is taken at full size before any reduce-scatter: only tensor parallelism splits it
    return int(2 * m.vocab * m.hidden * width / cfg.sharding.activations)


def _head_input_gradient(shape: ModelShape, cfg: RunConfig, logits: int) -> int:
    """The logits' gradient in the logits' own dtype, live with the output head's weight
    gradients until the head's backward finishes."""
    p = cfg.storage.activation_bytes
    m = shape.transformer
    if cfg.head != "lm":
        return logits
    if cfg.loss == "full" and m is not None:
        return logits * p // (2 * loss_element_bytes(m, cfg))
    return logits * p // (4 + p)  # an fp32 gradient and its cast (RNNs, chunked and fused losses)


def _training_peak(shape: ModelShape, cfg: RunConfig, state: _State,
                   stage: Stage | None = None) -> tuple[int, str, int, tuple[TransientPart, ...], bool]:
    """(tensor peak, peak phase, activations, transient buffers, modelled?) of a training step.

    Peak: the start of backward (all activations saved plus the loss gradient)
    or the optimizer step (all gradients, activations freed). Backward starts
    with the loss gradient (logits); the output head then consumes it and writes
    its own weight gradients, before any activation is freed and before the last
    layer is recomputed. So the loss gradient is not live together with the
    head's gradients or the recomputed layer.
    """
    acts, recompute, logits, modelled = activation_bytes(shape, cfg, stage)
    head = min(state.grads, head_gradient_bytes(shape, cfg)) if stage is None or stage.last else 0
    kept_grads = state.grads if cfg.persistent_grads else 0
    cast = _head_input_gradient(shape, cfg, logits)
    held = state.weights + state.opt + state.transient
    start_of_backward = held + kept_grads + acts + max(logits, cast + head, head + recompute)
    # the end of backward: every gradient written, and a tied embedding's two gradient
    # contributions live while autograd sums them
    # (pipeline stages: the embedding and its tied copy sit on different stages)
    tied = tied_embedding_gradient_bytes(shape, cfg) if stage is None else 0
    end_of_backward = held + state.grads + tied
    optimizer_step = held + state.grads + optimizer_step_bytes(shape, cfg, stage)
    transient = (*state.parts, *transient_part("recomputed layer", recompute), *transient_part("logits and loss", logits))
    if start_of_backward >= max(optimizer_step, end_of_backward):
        return start_of_backward, "backward", acts, transient, modelled
    if end_of_backward > optimizer_step:
        # activations are freed by then; the tied copies are the transient
        return end_of_backward, "backward-end", 0, (*state.parts, *transient_part("tied embedding gradients", tied)), \
            modelled
    return optimizer_step, "optimizer", acts, transient, modelled


def _inference_peak(shape: ModelShape, cfg: RunConfig, state: _State,
                    stage: Stage | None = None) -> tuple[int, int, int, tuple[TransientPart, ...], tuple[str, ...]]:
    """(tensor peak, activations, KV cache, transient buffers, notes) of an inference pass (of a pipeline
    ``stage``: the KV cache of its layers)."""
    m = shape.transformer
    parts, kv, acts = state.parts, 0, 0
    notes: tuple[str, ...] = ()
    if m is not None:
        tp = cfg.sharding.activations
        seq = transformer_seq_len(m, cfg)
        if m.has_kv_cache:
            kv = kv_cache_bytes(m, cfg.batch, seq, kv_element_bytes(cfg.kv_cache, cfg.storage.activation_bytes), tp)
            if stage is not None:
                kv = kv * stage.layers // m.layers
        acts = inference_working_bytes(m, cfg, seq, tp)
        if cfg.storage.quantised:
            # each quantised matrix is dequantised to 16 bits for its matmul
            parts += transient_part("dequantised matrix", 2 * largest_matrix(m) // tp)
        if cfg.storage.autocast:
            # autocast caches the 16-bit copy of every weight it casts (leaf tensors that
            # require grad, as a model's parameters do) until its region ends
            parts += transient_part("autocast weight copies", autocast_weight_copy_bytes(m, cfg))
    elif isinstance(shape.arch, CnnShape) and (per_sample := shape.arch.inference_bytes_per_sample_fp32):
        scale = (cfg.image_size / shape.arch.image_size) ** 2 if cfg.image_size else 1.0
        width = cfg.storage.activation_bytes / 4
        acts = int(per_sample * scale * width * cfg.batch / cfg.sharding.activations)
    elif shape.arch is not None:
        acts = activation_bytes(shape, cfg)[0]
        notes = ("CNN/RNN inference activations use the training figure, an upper bound",)
    return state.weights + kv + acts + sum(p.bytes for p in parts), acts, kv, parts, notes


def estimate_memory(shape: ModelShape, cfg: RunConfig) -> MemoryBreakdown:
    """Per-GPU peak memory for one run of ``shape`` under ``cfg``; with pipeline stages, of the
    stage that needs the most: the first (the embedding and min(pp, m) micro-batches in flight)
    or the last (the output head and the loss)."""
    check_layout(shape, cfg)
    m = shape.transformer
    if cfg.sharding.stages == 1 or m is None:
        return _estimate_stage(shape, cfg, None)
    pp = cfg.sharding.stages
    first, last = (_estimate_stage(shape, cfg, pipeline_stage(m, cfg, i)) for i in (0, pp - 1))
    worst, other = (first, last) if first.total_bytes >= last.total_bytes else (last, first)
    worst_name, other_name = ("first", "last") if worst is first else ("last", "first")
    note = (f"pipeline of {pp} stages, {m.layers // pp} layers each (1F1B over {cfg.micro_batches} micro-batch"
            f"{'es' if cfg.micro_batches > 1 else ''} a step, the gradient accumulation): the {worst_name} stage "
            "needs the most, "
            f"{format_bytes(worst.total_bytes)} against {format_bytes(other.total_bytes)} on the {other_name}; the "
            f"first holds the embedding and {plural(first_inflight(pp, cfg.micro_batches), 'micro-batch', 'micro-batches')} of activations, "
            "the last the output head and the loss")
    return worst.model_copy(update={"notes": (*worst.notes, note)})


def first_inflight(pp: int, micro_batches: int) -> int:
    """Micro-batches whose activations the first 1F1B stage holds at once: min(pp, m)
    (Narayanan et al. 2021, section 2.2.1)."""
    return min(pp, micro_batches)


def _estimate_stage(shape: ModelShape, cfg: RunConfig, stage: Stage | None) -> MemoryBreakdown:
    """Per-GPU peak memory of one pipeline stage (the whole model where ``stage`` is None)."""
    state = model_state(shape, cfg, stage)
    notes = list(state.notes)
    kv = 0
    phase: Literal["forward", "backward", "backward-end", "optimizer", "inference"]
    if cfg.training:
        tensor_peak, train_phase, acts, parts, modelled = _training_peak(shape, cfg, state, stage)
        phase = "backward" if train_phase == "backward" else "backward-end" if train_phase == "backward-end" \
            else "optimizer"
    else:
        tensor_peak, acts, kv, parts, more = _inference_peak(shape, cfg, state, stage)
        phase, modelled = "inference", shape.arch is not None
        notes.extend(more)
    if not modelled:
        notes.append("activations not modelled: give the model's name or Hugging Face config for its shape")
    host = state.host + offloaded_activation_bytes(shape, cfg)
    if cfg.offload == "activations" and cfg.training:
        notes.append("activation offloading: the layers' saved activations wait in host memory and come back "
                     "layer by layer in backward (their PCIe traffic is not timed)")
    context = DEFAULT_CONTEXT_BYTES if cfg.context_bytes is None else cfg.context_bytes
    fragmentation = int(tensor_peak * cfg.fragmentation)
    overhead = context + fragmentation
    return MemoryBreakdown(
        weights_bytes=state.weights, gradients_bytes=state.grads, optimizer_bytes=state.opt,
        activations_bytes=acts, kv_cache_bytes=kv, transient_bytes=sum(p.bytes for p in parts),
        transient_parts=parts, overhead_bytes=overhead,
        context_bytes=context, fragmentation_bytes=fragmentation, tensor_peak_bytes=tensor_peak,
        total_bytes=tensor_peak + overhead, peak_phase=phase, activations_modelled=modelled, notes=tuple(notes),
        cpu_bytes=host if cfg.offload_to == "cpu" else 0, nvme_bytes=host if cfg.offload_to == "nvme" else 0,
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

    Plain data parallelism replicates everything, so it either fits on one GPU or never. Tensor
    parallelism needs the GPU count to divide the attention heads. With model-parallel degrees
    (tp, pp, cp, ep given), the counts tried are the layout's own times 1, 2, 4, ... replicas.
    """
    if cfg.tp is not None or max(cfg.pp, cfg.cp, cfg.ep) > 1:
        return _fewest_layout_gpus(shape, cfg, capacity_bytes)
    if fits(shape, cfg.model_copy(update={"gpus": 1}), capacity_bytes):
        return 1
    two = Parallelism.of(cfg.strategy, 2)
    split = sharding(two)
    if max(split.weights, split.gradients, split.optimizer) == 1:
        return None  # replicas shard nothing: more GPUs never hold less

    def ok(n: int) -> bool:
        return fits(shape, cfg.model_copy(update={"gpus": n}), capacity_bytes)

    if two.tp > 1:
        m = shape.transformer
        if m is None:
            return None
        for n in range(2, m.heads + 1):
            if m.allows_tp(n) and ok(n):
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


def _fewest_layout_gpus(shape: ModelShape, cfg: RunConfig, capacity_bytes: int) -> int | None:
    """fewest_gpus for a layout with model-parallel degrees: its smallest GPU count
    (tp x pp x cp, with enough data-parallel ranks for ep) times 1, 2, 4, ... while more
    data-parallel ranks shard more (ZeRO, FSDP)."""
    group = (cfg.tp or 1) * cfg.pp * cfg.cp
    base = group * (cfg.ep // math.gcd(cfg.ep, cfg.cp))
    sharded = shards_over_replicas(cfg.strategy)
    # a tensor-parallel strategy without --tp splits each layer over the GPUs left by pp and cp,
    # up to a node's: more GPUs hold less until then
    grows_tp = cfg.tp is None and within_node(cfg.strategy)
    n = base
    while n <= MAX_GPUS:
        tp_grows = grows_tp and n // base < NODE_GPUS
        try:
            if fits(shape, cfg.model_copy(update={"gpus": n}), capacity_bytes):
                return n
        except UsageError:
            if not tp_grows:
                return None  # a layout this model cannot take (e.g. heads tp does not divide)
        if not (sharded or tp_grows):
            return None
        n *= 2
    return None


def rule_of_thumb_bytes(params: int) -> int:
    """Memory the rule of thumb assumes: 8 bytes per parameter (fp32 weights and
    momentum) plus the 400 MB buffer."""
    return params * 8 + 400 * MIB


def check_capacity(memory_bytes: int) -> int:
    if memory_bytes <= 0:
        raise UsageError("GPU memory must be positive")
    return memory_bytes


__all__ = [
    "GIB",
    "DEFAULT_FRAGMENTATION",
    "make_run_config",
    "sharded_gpus",
    "shape_from_model",
    "shape_from_params",
    "MemoryBreakdown",
    "ModelShape",
    "RunConfig",
    "estimate_memory",
    "fewest_gpus",
    "largest_batch",
    "rule_of_thumb_params",
]
