"""ModelShape: what the engine knows of a model, with no optional fields to guess at.

A model comes from the zoo, a Hugging Face config or a bare parameter count.
The zoo's entries (:class:`gpusizer.models.zoo.Model`) allow nulls, because one
schema serves every kind; the engine works on the typed shapes below instead:
a :class:`TransformerShape` has every dimension, a :class:`CnnShape` and a
:class:`RnnShape` their measured activation figures. A model known only by its
parameter count has no shape (``arch is None``), and the engine says so.

``trainable_params`` is the one home of "which parameters train": gradients and
optimizer state are counted for those, weights for all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpusizer.domain.precision import CheckpointQuantization

if TYPE_CHECKING:
    from gpusizer.models.zoo import Model

#: MLP kinds: plain GELU, GPT-2's tanh GELU op by op (gelu_new), ReLU, and the gated
#: SwiGLU, GeGLU and GeGLU with the op-by-op tanh GELU (T5 v1.1's and mT5's gated-gelu)
MlpKind = Literal["gelu", "gelu_new", "relu", "swiglu", "geglu", "geglu_new"]
GATED_MLPS: tuple[str, ...] = ("swiglu", "geglu", "geglu_new")

Kind = Literal["cnn", "rnn", "encoder", "encoder-decoder", "decoder", "unknown"]
TransformerKind = Literal["encoder", "encoder-decoder", "decoder"]
_FROZEN = ConfigDict(frozen=True, extra="forbid", defer_build=True)


#: How adapters reach a mixture of experts' routed experts (TransformerShape.expert_adapters).
ExpertAdapters = Literal["linear", "parameter", "none"]

class LatentAttention(BaseModel):
    """Multi-head latent attention (MLA; DeepSeek-V2 and V3, Kimi K2).

    Keys and values are compressed into one latent of ``kv_lora_rank`` per token, plus one
    rotary key of ``qk_rope_head_dim`` shared by all heads; both are what the KV cache
    holds (vLLM, SGLang and transformers >= 5 cache the latent, not per-head K and V).
    Each head's query and key are ``qk_nope_head_dim + qk_rope_head_dim`` wide, its value
    ``v_head_dim``. Queries go through a latent of ``q_lora_rank`` too, or (None) through
    one plain projection.
    """

    model_config = _FROZEN

    kv_lora_rank: int = Field(gt=0)
    q_lora_rank: int | None = Field(default=None, gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class TransformerShape(BaseModel):
    """Every dimension of a transformer (encoder, decoder or encoder-decoder).

    A mixture of experts has ``experts`` routed MLPs of width ``ffn`` per layer, plus, in
    DeepSeek's layout, always-on shared experts (``shared_ffn`` wide in all) and
    ``dense_layers`` leading layers with one dense MLP of ``dense_ffn`` instead.
    """

    model_config = _FROZEN

    kind: TransformerKind
    layers: int = Field(gt=0)
    #: encoder-decoder models: the decoder's layers (``layers`` is the encoder's)
    decoder_layers: int = Field(default=0, ge=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0)
    attention_head_dim: int = Field(gt=0)
    ffn: int = Field(gt=0)
    vocab: int = Field(gt=0)
    #: the model's context length; None when its config does not say
    max_seq_len: int | None = Field(default=None, gt=0)
    mlp: MlpKind = "gelu"
    #: mixture of experts: experts per layer and routed per token (1 = dense)
    experts: int = Field(default=1, ge=1)
    experts_per_token: int = Field(default=1, ge=1)
    tied_embeddings: bool = False
    dropout: bool = False
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    softmax_fp32: bool = False
    #: RMSNorms per layer (Gemma 2 and 3 add a norm after attention and after the MLP)
    norms_per_layer: int = Field(default=2, ge=2)
    #: per-head RMSNorm on queries and keys (Qwen3, Gemma 3)
    qk_norm: bool = False
    #: tanh soft-capping of the attention scores and of the final logits (Gemma 2)
    attn_softcap: bool = False
    final_softcap: bool = False
    #: T5's learned relative position bias, added to every layer's attention scores
    relative_position_bias: bool = False
    #: multi-head latent attention (DeepSeek); None: multi-head or grouped-query attention
    mla: LatentAttention | None = None
    #: MoE: the shared experts' total width, run for every token (0: none)
    shared_ffn: int = Field(default=0, ge=0)
    #: MoE: leading layers whose MLP is one dense MLP of ``dense_ffn``
    dense_layers: int = Field(default=0, ge=0)
    dense_ffn: int | None = Field(default=None, gt=0)
    #: MoE: the routing weights are fp32, and so are the experts' weighted outputs
    router_fp32: bool = False
    #: the value is a view of one fused Q/K/V projection's output (GPT-NeoX, Phi-3)
    fused_qkv: bool = False
    #: Q/K/V in one projection and gate and up in one (GPT-2, GPT-NeoX, Phi-3)
    fused_projections: bool = False
    #: MoE: how peft's target names reach the routed experts (peft 0.21 with transformers 5):
    #: "linear", each expert's projections are nn.Linear layers (transformers 4, remote code such as
    #: Kimi K2's); "parameter", the experts are fused 3-D parameters that peft adapts as parameters
    #: (Mixtral, Qwen-MoE, DeepSeek); "none", fused experts peft leaves alone (gpt-oss)
    expert_adapters: ExpertAdapters = "linear"
    #: sliding-window attention: how many layers attend only within the last
    #: ``sliding_window`` tokens (config.json's ``layer_types`` / ``sliding_window``); the
    #: rest attend to the whole context. 0: every layer is global.
    sliding_layers: int = Field(default=0, ge=0)
    sliding_window: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _window(self) -> TransformerShape:
        if self.sliding_layers > self.layers:
            raise ValueError(f"sliding_layers: {self.sliding_layers} is more than the {self.layers} layers")
        if bool(self.sliding_layers) != (self.sliding_window is not None):
            raise ValueError("sliding_layers: sliding_layers and sliding_window go together")
        return self

    @property
    def input_casts(self) -> int:
        """16-bit copies of the two norms' outputs autocast makes and the layers' matmuls save:
        autocast caches the casts of weights only, so each projection casts its input itself.
        Attention: one per projection reading the norm (separate Q, K, V: 3; one fused
        projection: 1; latent attention: the query's and the KV latent's, 2). MLP: gate and
        up (2, or 1 fused), a plain MLP's up (1), a mixture's router (1) and shared experts'
        gate and up (the routed experts' grouped GEMM is not autocast)."""
        attention = 2 if self.mla is not None else 1 if self.fused_projections else 3
        if self.experts > 1:
            mlp = 1 + (2 if self.shared_ffn else 0)
        else:
            mlp = 2 if self.mlp in GATED_MLPS and not self.fused_projections else 1
        return attention + mlp

    @model_validator(mode="after")
    def _check_layers(self) -> TransformerShape:
        if self.dense_layers and (self.dense_ffn is None or self.experts == 1 or self.dense_layers >= self.layers):
            raise ValueError("dense_layers: needs dense_ffn and experts, and fewer than all layers")
        return self

    @property
    def qk_head_dim(self) -> int:
        """Width of each head's query and key."""
        return self.mla.qk_head_dim if self.mla is not None else self.attention_head_dim

    @property
    def v_head_dim(self) -> int:
        """Width of each head's value (and of the attention output per head)."""
        return self.mla.v_head_dim if self.mla is not None else self.attention_head_dim

    def kv_cache_elements(self, tp: int = 1) -> int:
        """KV-cache elements per token and layer on one of ``tp`` tensor-parallel GPUs.

        GQA and MHA: K and V for each KV head, each GPU holding its share but at least one
        (vLLM replicates KV heads when tp exceeds their number). MLA: the latent and the
        shared rotary key, which every GPU holds whole (vLLM's MLA backends)."""
        if self.mla is not None:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        heads_per_gpu = max(1, -(-self.n_kv_heads // tp)) if tp > 1 else self.n_kv_heads
        return 2 * heads_per_gpu * self.attention_head_dim

    def attention_projections(self) -> list[tuple[str, int, int]]:
        """(name, inputs, outputs) of one attention block's projections, the one list the
        parameter counts, adapters and dequantisation read. Latent attention: "q" is the
        query projection (or its latent pair q_a_proj, q_b_proj), "k" the KV latent's
        projection with the rotary key (kv_a_proj_with_mqa), "v" its up-projection to every
        head's key and value (kv_b_proj)."""
        h, a = self.hidden, self.heads
        if self.mla is None:
            d, g = self.attention_head_dim, self.n_kv_heads
            return [("q", h, a * d), ("k", h, g * d), ("v", h, g * d), ("o", a * d, h)]
        mla, ql = self.mla, self.mla.q_lora_rank
        query = [("q", h, ql), ("q", ql, a * mla.qk_head_dim)] if ql else [("q", h, a * mla.qk_head_dim)]
        return [*query, ("k", h, mla.kv_lora_rank + mla.qk_rope_head_dim),
                ("v", mla.kv_lora_rank, a * (mla.qk_nope_head_dim + mla.v_head_dim)), ("o", a * mla.v_head_dim, h)]

    @property
    def moe_layers(self) -> int:
        """Layers (of ``layers``) whose MLP is the experts."""
        return self.layers - self.dense_layers if self.experts > 1 else 0

    def dense_layer(self) -> TransformerShape | None:
        """The shape of the leading dense layers (one MLP of ``dense_ffn``), or None without any."""
        if not self.dense_layers or self.dense_ffn is None:
            return None
        return self.model_copy(update={"experts": 1, "experts_per_token": 1, "ffn": self.dense_ffn,
                                       "shared_ffn": 0, "dense_layers": 0, "dense_ffn": None})

    @property
    def loss_fp32(self) -> bool:
        """Whether the training loss upcasts the logits to fp32 before cross-entropy.
        transformers' causal- and masked-LM losses do (ForCausalLMLoss, ForMaskedLMLoss:
        logits.float()); T5's seq2seq loss takes the logits as they are."""
        return self.kind != "encoder-decoder"

    @property
    def gated_mlp(self) -> bool:
        return self.mlp in GATED_MLPS

    def allows_tp(self, tp: int) -> bool:
        """Tensor parallelism splits attention heads: ``tp`` must divide them, and divide
        the KV heads or be a multiple of them (the KV heads are then replicated), as
        Megatron-LM and vLLM require."""
        return self.heads % tp == 0 and (self.n_kv_heads % tp == 0 or tp % self.n_kv_heads == 0)

    @property
    def has_kv_cache(self) -> bool:
        """Generation keeps keys and values: decoders and encoder-decoders."""
        return self.kind in ("decoder", "encoder-decoder")


class CnnShape(BaseModel):
    """A CNN's measured activation bytes per sample at its reference image size."""

    model_config = _FROZEN

    image_size: int = Field(gt=0)
    activation_bytes_per_sample_fp32: int = Field(gt=0)
    activation_bytes_per_sample_mixed: int | None = Field(default=None, gt=0)
    #: peak non-weight bytes per sample of an inference pass (fp32, ``image_size``); None: unknown
    inference_bytes_per_sample_fp32: int | None = Field(default=None, gt=0)
    #: parameters of the classifier head, whose gradients are written first
    head_params: int = Field(default=0, ge=0)
    forward_gflops_per_sample: float | None = Field(default=None, gt=0)


class RnnShape(BaseModel):
    """An RNN's measured activation bytes per sample at its reference sequence length."""

    model_config = _FROZEN

    seq_len: int = Field(gt=0)
    activation_bytes_per_sample_fp32: int = Field(gt=0)
    activation_bytes_per_sample_mixed: int | None = Field(default=None, gt=0)
    layers: int | None = Field(default=None, gt=0)
    hidden: int | None = Field(default=None, gt=0)
    vocab: int | None = Field(default=None, gt=0)
    forward_gflops_per_sample: float | None = Field(default=None, gt=0)


Arch = TransformerShape | CnnShape | RnnShape


class ModelShape(BaseModel):
    """What the memory and performance models need of a model."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    #: every parameter (weights are counted for all of them)
    params: int = Field(gt=0)
    #: parameters that train (gradients and optimizer state); None = all of them
    trainable_params: int | None = Field(default=None, ge=0)
    kind: Kind = "unknown"
    arch: Arch | None = None
    #: the zoo id (or HF-config id) the shape came from; None for --params
    model_id: str | None = None
    #: how the checkpoint stores its weights (a Hugging Face config's quantization_config); None:
    #: unquantised, or not known. Inference runs default to it (gpusizer.api._common.checkpoint_defaults)
    checkpoint: CheckpointQuantization | None = None

    @model_validator(mode="after")
    def _check(self) -> ModelShape:
        if self.trainable_params is not None and self.trainable_params > self.params:
            raise ValueError(f"trainable_params ({self.trainable_params:,}) exceeds params ({self.params:,})")
        return self

    @property
    def trainable(self) -> int:
        return self.params if self.trainable_params is None else self.trainable_params

    @property
    def transformer(self) -> TransformerShape | None:
        return self.arch if isinstance(self.arch, TransformerShape) else None

    @property
    def cnn(self) -> CnnShape | None:
        return self.arch if isinstance(self.arch, CnnShape) else None

    @property
    def generates(self) -> bool:
        """A model served token by token from a KV cache (a decoder or an encoder-decoder)."""
        return self.transformer is not None and self.transformer.has_kv_cache

    @property
    def rnn(self) -> RnnShape | None:
        return self.arch if isinstance(self.arch, RnnShape) else None

    @property
    def is_transformer(self) -> bool:
        return isinstance(self.arch, TransformerShape)


def arch_of(model: Model) -> Arch:
    """The typed shape of a zoo entry; the zoo's validator guarantees the fields."""
    if model.kind in ("encoder", "encoder-decoder", "decoder"):
        assert model.layers and model.hidden and model.heads and model.ffn and model.vocab
        return TransformerShape(
            kind=model.kind, layers=model.layers, decoder_layers=model.decoder_layers or 0, hidden=model.hidden,
            heads=model.heads, n_kv_heads=model.kv_heads or model.heads,
            attention_head_dim=model.head_dim or model.hidden // model.heads, ffn=model.ffn, vocab=model.vocab,
            max_seq_len=model.max_seq_len, mlp=model.mlp or "gelu", experts=model.experts or 1,
            experts_per_token=model.experts_per_token or 1, tied_embeddings=bool(model.tied_embeddings),
            dropout=bool(model.dropout), norm=model.norm or "layernorm", softmax_fp32=bool(model.softmax_fp32),
            norms_per_layer=model.norms_per_layer or 2, qk_norm=bool(model.qk_norm),
            attn_softcap=bool(model.attn_softcap), final_softcap=bool(model.final_softcap),
            relative_position_bias=bool(model.relative_position_bias),
            mla=LatentAttention(kv_lora_rank=model.kv_lora_rank, q_lora_rank=model.q_lora_rank,
                                qk_nope_head_dim=model.head_dim or model.hidden // model.heads,
                                qk_rope_head_dim=model.qk_rope_head_dim or 0, v_head_dim=model.v_head_dim or 0)
            if model.kv_lora_rank else None,
            shared_ffn=model.shared_ffn or 0, dense_layers=model.dense_layers or 0, dense_ffn=model.dense_ffn,
            router_fp32=bool(model.router_fp32), fused_qkv=bool(model.fused_qkv),
            fused_projections=bool(model.fused_projections),
            expert_adapters=model.expert_adapters or "linear",
            sliding_layers=model.sliding_layers or 0, sliding_window=model.sliding_window,
        )
    assert model.activation_bytes_per_sample_fp32 is not None
    if model.kind == "cnn":
        assert model.image_size is not None
        return CnnShape(
            image_size=model.image_size, activation_bytes_per_sample_fp32=model.activation_bytes_per_sample_fp32,
            activation_bytes_per_sample_mixed=model.activation_bytes_per_sample_mixed,
            inference_bytes_per_sample_fp32=model.inference_bytes_per_sample_fp32,
            head_params=model.head_params or 0, forward_gflops_per_sample=model.forward_gflops_per_sample,
        )
    assert model.seq_len is not None
    return RnnShape(
        seq_len=model.seq_len, activation_bytes_per_sample_fp32=model.activation_bytes_per_sample_fp32,
        activation_bytes_per_sample_mixed=model.activation_bytes_per_sample_mixed, layers=model.layers,
        hidden=model.hidden, vocab=model.vocab, forward_gflops_per_sample=model.forward_gflops_per_sample,
    )


def shape_from_model(model: Model, *, trainable_params: int | None = None) -> ModelShape:
    """The shape of a zoo entry or of a model read from a Hugging Face config."""
    return ModelShape(name=model.name, params=model.params, trainable_params=trainable_params, kind=model.kind,
                      arch=arch_of(model), model_id=model.id, checkpoint=model.checkpoint_quantization)


def shape_from_params(params: int) -> ModelShape:
    """A model known only by its parameter count: no layer shapes."""
    return ModelShape(name=f"{params:,} parameters", params=params)


def beyond_context_note(shape: ModelShape, tokens: int | None, what: str = "sequence length") -> str | None:
    """A note when ``tokens`` is longer than the model's known context (its config's
    ``max_position_embeddings``); None when it is not, or the context is unknown. Not an
    error: RoPE scaling (YaRN, linear or NTK interpolation) runs models past it."""
    m = shape.transformer
    if tokens is None or m is None or m.max_seq_len is None or tokens <= m.max_seq_len:
        return None
    return (f"a {what} of {tokens:,} tokens is beyond {shape.name}'s context of {m.max_seq_len:,} tokens: it "
            "needs RoPE scaling or a long-context variant (quality past the context is not modelled); the figures "
            "assume it runs")


__all__ = [
    "CnnShape",
    "LatentAttention",
    "ModelShape",
    "RnnShape",
    "TransformerShape",
    "arch_of",
    "beyond_context_note",
    "shape_from_model",
    "shape_from_params",
]
