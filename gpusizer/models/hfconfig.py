"""Turn a Hugging Face ``config.json`` into a zoo :class:`~gpusizer.models.zoo.Model`.

The caller reads and parses the file; nothing here touches the network or
needs ``transformers``. :func:`model_from_hf_config` fills the shape the memory
model needs and derives ``params`` exactly as
``sum(p.numel() for p in model.parameters())`` counts it for one transformers
class per family (shared tensors, such as a tied LM head, counted once;
buffers such as rotary ``inv_freq``, causal masks or ``position_ids`` are not
parameters and are not counted):

==================  ===============================  ==========================================
model_type          class whose count is reproduced  what it holds
==================  ===============================  ==========================================
llama               LlamaForCausalLM                 embed_tokens; per layer q/k/v/o (biases if
                                                     ``attention_bias``), gate/up/down (biases if
                                                     ``mlp_bias``), 2 RMSNorm weights; final
                                                     RMSNorm; lm_head unless tied
mistral             MistralForCausalLM               as llama, never biases
mixtral             MixtralForCausalLM               as mistral, the MLP replaced by
                                                     ``num_local_experts`` SwiGLU experts (w1, w2,
                                                     w3) and a bias-free router (hidden x experts)
qwen2               Qwen2ForCausalLM                 as llama with biases on q/k/v (not o)
qwen3               Qwen3ForCausalLM                 as llama (biases if ``attention_bias``), an
                                                     RMSNorm of ``head_dim`` (default 128) on q and
                                                     on k per layer
qwen3_moe           Qwen3MoeForCausalLM              as qwen3, the MLP replaced by ``num_experts``
                                                     SwiGLU experts of ``moe_intermediate_size``
                                                     and a bias-free router (every layer sparse)
phi3                Phi3ForCausalLM                  as mistral (qkv_proj and gate_up_proj fused:
                                                     the same sizes); Phi-3 and Phi-4
gemma               GemmaForCausalLM                 as llama, ``head_dim`` default 256, tied
                                                     embeddings by default
gemma2              Gemma2ForCausalLM                as gemma with four RMSNorms per layer (pre-
                                                     and post-attention, pre- and post-MLP)
gemma3_text         Gemma3ForCausalLM                as gemma2 with q and k RMSNorms of
                                                     ``head_dim``
deepseek_v3         DeepseekV3ForCausalLM            embed_tokens; per layer 2 RMSNorms and multi-
                                                     head latent attention (q_a_proj, q_a_layernorm,
                                                     q_b_proj, or q_proj without ``q_lora_rank``;
                                                     kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj,
                                                     o_proj; biases if ``attention_bias``); the first
                                                     ``first_k_dense_replace`` layers a SwiGLU MLP,
                                                     the rest ``n_routed_experts`` SwiGLU experts, a
                                                     router and the shared experts; final RMSNorm;
                                                     lm_head unless tied. DeepSeek-V3 and R1
kimi_k2             DeepseekV3ForCausalLM            as deepseek_v3 (Kimi K2's repository ships
                                                     this model_type with its own copy of the
                                                     class)
gpt2                GPT2LMHeadModel                  wte, learned wpe; per layer ln_1, c_attn,
                                                     c_proj, ln_2, c_fc, c_proj (all with bias,
                                                     LayerNorm weight and bias), cross-attention
                                                     if ``add_cross_attention``; ln_f; lm_head
                                                     (no bias) unless tied
gpt_neox            GPTNeoXForCausalLM               embed_in; per layer 2 LayerNorms,
                                                     query_key_value and dense (biases if
                                                     ``attention_bias``), dense_h_to_4h and
                                                     dense_4h_to_h with biases; final LayerNorm;
                                                     embed_out unless tied
bert                BertForMaskedLM                  word, learned position and token-type
                                                     embeddings + LayerNorm; per layer q/k/v,
                                                     attention output dense + LayerNorm,
                                                     intermediate, output dense + LayerNorm (all
                                                     with bias); no pooler; the MLM head's
                                                     transform (dense + LayerNorm) and decoder
                                                     bias, the decoder weight tied to the word
                                                     embeddings unless ``tie_word_embeddings`` is
                                                     false
roberta             RobertaForMaskedLM               as bert (RobertaLMHead: dense, LayerNorm,
                                                     tied decoder, bias); no pooler
t5, mt5             T5ForConditionalGeneration /     shared embedding; encoder and decoder layers
                    MT5ForConditionalGeneration      (q, k, v, o without bias, RMSNorm weights,
                                                     wi or wi_0 + wi_1 for gated activations, wo),
                                                     one relative-attention bias table
                                                     (buckets x heads) per stack, cross-attention
                                                     in the decoder, a final norm per stack;
                                                     lm_head unless tied (t5 ties by default,
                                                     mt5 does not)
==================  ===============================  ==========================================

These are the counts of the transformers 4.x classes, and the tensors the
published checkpoints hold; every family, tied and untied, with and without
the optional biases, was checked against ``transformers`` 4.46.3 (models built
on the ``meta`` device). transformers 5.x departs in two places this module
does not follow: its T5Config and MT5Config force ``tie_word_embeddings`` to
true (so t5-v1_1-base counts 222,903,552 there, not 247,577,856), and with
``tie_word_embeddings: false`` its BertForMaskedLM and RobertaForMaskedLM keep
a second decoder bias of ``vocab_size`` entries.

Keys that fix the shape (layers, width, heads, feed-forward width, vocabulary)
are required. Other keys fall back to the defaults of the transformers
configuration class, as ``from_pretrained`` would; JSON ``null`` counts as
absent. ``mlp`` is null for an activation outside gelu, relu, swiglu and geglu
(a gated relu, say). RoBERTa numbers positions from ``pad_token_id + 1``, so its
``max_seq_len`` is ``max_position_embeddings - pad_token_id - 1`` (514 -> 512).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from types import MappingProxyType
from typing import Any, Literal

from pydantic import ValidationError

from gpusizer import datafiles
from gpusizer.domain.precision import MalformedQuantizationConfig, checkpoint_quantization
from gpusizer.errors import DataFileError
from gpusizer.models.zoo import Model


class _Required(enum.Enum):
    """Sentinel default: the key must be present (and not null)."""

    KEY = "required"


_REQUIRED = _Required.KEY

_GELU = frozenset(
    {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate", "gelu_10", "quick_gelu"}
)
_SILU = frozenset({"silu", "swish"})


class _Config:
    """Typed reads from one config document; every failure is a one-line DataFileError."""

    def __init__(self, doc: dict[str, Any], origin: str) -> None:
        self.doc = doc
        self.origin = origin

    def _get(self, key: str, default: object) -> Any:
        value = self.doc.get(key)
        if value is None:
            if default is _REQUIRED:
                raise DataFileError(f"{self.origin}: missing key '{key}'")
            return default
        return value

    def _bad(self, key: str, expected: str, value: object) -> DataFileError:
        return DataFileError(f"{self.origin}: key '{key}' must be {expected}, got {type(value).__name__} "
                             f"{datafiles.quote(value)}")

    def get_int(self, key: str, default: int | _Required = _REQUIRED, minimum: int = 1) -> int:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(key, "an integer", value)
        if value < minimum:
            raise DataFileError(f"{self.origin}: key '{key}' must be at least {minimum}, got {value}")
        return value

    def get_prob(self, key: str, default: float) -> float:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._bad(key, "a number", value)
        if not 0 <= value <= 1:
            raise DataFileError(f"{self.origin}: key '{key}' must be between 0 and 1, got {value}")
        return float(value)

    def get_bool(self, key: str, default: bool) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise self._bad(key, "true or false", value)
        return value

    def get_str(self, key: str, default: str | _Required = _REQUIRED) -> str:
        value = self._get(key, default)
        if not isinstance(value, str):
            raise self._bad(key, "a string", value)
        return value

    def heads_divide(self, hidden: int, hidden_key: str, heads: int, heads_key: str) -> None:
        if hidden % heads:
            raise DataFileError(
                f"{self.origin}: key '{hidden_key}' ({hidden}) is not a multiple of '{heads_key}' ({heads})"
            )


def _dropout(c: _Config, defaults: dict[str, float]) -> bool:
    return any(c.get_prob(key, default) > 0 for key, default in defaults.items())


def _gated_mlp(act: str) -> str | None:
    if act in _SILU:
        return "swiglu"
    if act in ("gelu_new", "gelu_fast"):
        return "geglu_new"  # transformers' NewGELUActivation: the tanh formula op by op
    if act in _GELU:
        return "geglu"
    return None


def _plain_mlp(act: str) -> str | None:
    if act == "gelu_new":
        return "gelu_new"  # transformers' NewGELUActivation: the tanh formula op by op
    if act in _GELU:
        return "gelu"
    if act == "relu":
        return "relu"
    return None


# ----------------------------------------------------------------------------- families


@dataclass(frozen=True)
class _Family:
    """One supported ``model_type``: the class whose count is reproduced and how its config is read.

    A builder that serves several model types (``_llama_like``, ``_bert_like``,
    ``_t5``) branches on ``model_type`` for the tensors that differ between them.
    """

    model_type: str
    #: the transformers class whose ``parameters()`` count ``build`` reproduces
    hf_class: str
    #: reads the config into zoo Model fields (without id, name, sources, notes)
    build: Callable[[_Config, _Family], dict[str, Any]]
    #: the config class's default ``max_position_embeddings``, for builders that
    #: serve classes with different defaults; None: the key is required
    max_positions: int | None = None
    #: the config class's default ``head_dim``; None: hidden_size / num_attention_heads
    head_dim: int | None = None
    #: the config class's default ``tie_word_embeddings``
    tied: bool = False
    #: RMSNorm weights per layer, as multiples of the hidden size (Gemma 2 and 3 have four)
    layer_norms: int = 2
    #: per-head RMSNorm on queries and keys (Qwen3, Gemma 3): head_dim weights each
    qk_norm: bool = False
    #: how the config class lays out sliding-window layers when config.json has no ``layer_types``
    #: (:func:`_sliding_window`): "every", each layer attends within ``sliding_window``
    #: (MistralConfig; vLLM's attention layers take the model's window); an int n, each layer but
    #: every n-th (Gemma2Config: 2; Gemma3TextConfig: ``sliding_window_pattern``, 6); "qwen", layers
    #: from ``max_window_layers`` on, only with ``use_sliding_window`` (Qwen2Config); None: no window
    sliding: Literal["every", "qwen"] | int | None = None


#: model types whose config classes soft-cap by default (Gemma2Config: 50.0 and 30.0); a key
#: present in config.json, null included, decides
_SOFTCAP_DEFAULTS: Mapping[str, float] = MappingProxyType({"gemma2": 30.0})


def _llama_like(c: _Config, family: _Family) -> dict[str, Any]:
    """LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
    Qwen3MoeForCausalLM, Phi3ForCausalLM (fused qkv and gate_up, the same tensors' sizes),
    GemmaForCausalLM, Gemma2ForCausalLM and Gemma3ForCausalLM."""
    model_type = family.model_type
    h = c.get_int("hidden_size")
    layers = c.get_int("num_hidden_layers")
    heads = c.get_int("num_attention_heads")
    kv = c.get_int("num_key_value_heads", heads)
    ffn = c.get_int("intermediate_size")
    vocab = c.get_int("vocab_size")
    if c.doc.get("head_dim") is None and family.head_dim is None:
        c.heads_divide(h, "hidden_size", heads, "num_attention_heads")
        hd = h // heads
    else:
        hd = c.get_int("head_dim", family.head_dim if family.head_dim is not None else _REQUIRED)
    max_pos = c.get_int(
        "max_position_embeddings", _REQUIRED if family.max_positions is None else family.max_positions
    )
    tied = c.get_bool("tie_word_embeddings", family.tied)
    act = c.get_str("hidden_activation", "") or c.get_str("hidden_act", "silu")

    attn_bias = c.get_bool("attention_bias", False) if model_type in ("llama", "qwen3", "qwen3_moe") else False
    mlp_bias = c.get_bool("mlp_bias", False) if model_type == "llama" else False
    q_out, kv_out = heads * hd, kv * hd
    attn = h * q_out + 2 * h * kv_out + q_out * h
    if attn_bias:
        attn += q_out + 2 * kv_out + h
    if model_type == "qwen2":
        attn += q_out + 2 * kv_out  # q/k/v carry biases, o_proj does not
    if family.qk_norm:
        attn += 2 * hd
    mlp = 3 * h * ffn + ((2 * ffn + h) if mlp_bias else 0)
    norms = family.layer_norms * h
    embeddings = vocab * h * (1 if tied else 2) + h  # embed_tokens (+ lm_head) + final norm

    out: dict[str, Any] = {}
    if model_type == "mixtral":
        experts = c.get_int("num_local_experts")
        top_k = c.get_int("num_experts_per_tok")
        if top_k > experts:
            raise DataFileError(
                f"{c.origin}: key 'num_experts_per_tok' ({top_k}) exceeds 'num_local_experts' ({experts})"
            )
        router = h * experts
        params = layers * (attn + experts * mlp + router + norms) + embeddings
        # MixtralTopKRouter: softmax(logits.float()), weights kept fp32; MixtralExperts: fused 3-D parameters
        out.update(active_params=layers * (attn + top_k * mlp + router + norms) + embeddings, experts=experts,
                   experts_per_token=top_k, router_fp32=True, expert_adapters="parameter")
    elif model_type == "qwen3_moe":
        params, out = _qwen3_moe(c, h, layers, attn, norms, embeddings)
    else:
        params = layers * (attn + mlp + norms) + embeddings

    return {
        "kind": "decoder",
        "params": params,
        "layers": layers,
        "hidden": h,
        "heads": heads,
        "kv_heads": kv,
        "head_dim": hd if heads * hd != h else None,
        "ffn": ffn,
        **out,
        "vocab": vocab,
        "max_seq_len": max_pos,
        "mlp": _gated_mlp(act),
        "tied_embeddings": tied,
        "dropout": _dropout(c, {"attention_dropout": 0.0}),
        "softmax_fp32": True,
        # Phi3Attention: one qkv_proj, sliced into views; Phi3MLP: one gate_up_proj
        "fused_qkv": model_type == "phi3" or None,
        "fused_projections": model_type == "phi3" or None,
        "norm": "rmsnorm",  # LlamaRMSNorm: op by op
        "norms_per_layer": family.layer_norms,
        "qk_norm": family.qk_norm,
        "attn_softcap": c.doc.get("attn_logit_softcapping", _SOFTCAP_DEFAULTS.get(model_type)) is not None,
        "final_softcap": c.doc.get("final_logit_softcapping", _SOFTCAP_DEFAULTS.get(model_type)) is not None,
        **_sliding_window(c, family, layers),
    }


def _sliding_window(c: _Config, family: _Family, layers: int) -> dict[str, Any]:
    """``sliding_layers`` and ``sliding_window`` (the zoo's fields) from config.json's
    ``sliding_window`` and ``layer_types`` (transformers 4.53+ writes the list; older configs
    follow the config class's default, :attr:`_Family.sliding`). A window at least the model's
    context changes nothing, and is left out."""
    window = c.doc.get("sliding_window")
    if family.sliding is None or not isinstance(window, int) or isinstance(window, bool) or window < 1:
        return {}
    types = c.doc.get("layer_types")
    if isinstance(types, list) and len(types) == layers and all(isinstance(t, str) for t in types):
        sliding = sum(t == "sliding_attention" for t in types)
    elif family.sliding == "every":
        sliding = layers
    elif family.sliding == "qwen":
        use = c.get_bool("use_sliding_window", False)
        sliding = max(0, layers - c.get_int("max_window_layers", layers, minimum=0)) if use else 0
    else:
        every = c.get_int("sliding_window_pattern", family.sliding)
        sliding = layers - layers // every
    max_pos = c.doc.get("max_position_embeddings")
    if not sliding or (isinstance(max_pos, int) and window >= max_pos):
        return {}
    return {"sliding_layers": sliding, "sliding_window": window}


def _qwen3_moe(c: _Config, h: int, layers: int, attn: int, norms: int, embeddings: int) -> tuple[int, dict[str, Any]]:
    """Qwen3MoeForCausalLM: every ``decoder_sparse_step``-th layer not in ``mlp_only_layers``
    has ``num_experts`` SwiGLU experts of ``moe_intermediate_size`` and a bias-free router;
    the others a dense MLP of ``intermediate_size``. No shared experts. transformers 5 writes the
    expert count as ``num_local_experts`` (its attribute map), the published configs ``num_experts``."""
    experts = c.get_int("num_local_experts" if "num_experts" not in c.doc and "num_local_experts" in c.doc
                        else "num_experts")
    top_k = c.get_int("num_experts_per_tok")
    moe_ffn = c.get_int("moe_intermediate_size")
    step = c.get_int("decoder_sparse_step", 1)
    dense_layers = c.doc.get("mlp_only_layers") or []
    if not isinstance(dense_layers, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                     for i in dense_layers):
        raise c._bad("mlp_only_layers", "a list of layer indices", dense_layers)
    if top_k > experts:
        raise DataFileError(f"{c.origin}: key 'num_experts_per_tok' ({top_k}) exceeds 'num_experts' ({experts})")
    sparse = [i for i in range(layers) if i not in dense_layers and (i + 1) % step == 0]
    dense = layers - len(sparse)
    expert_mlp = 3 * h * moe_ffn
    dense_mlp = 3 * h * c.get_int("intermediate_size")
    per_layer = attn + norms
    params = layers * per_layer + len(sparse) * (experts * expert_mlp + h * experts) + dense * dense_mlp + embeddings
    active = layers * per_layer + len(sparse) * (top_k * expert_mlp + h * experts) + dense * dense_mlp + embeddings
    if dense:
        raise DataFileError(f"{c.origin}: dense layers among the experts' (mlp_only_layers, decoder_sparse_step) are "
                            "not described by one layer shape", hint="trace it with exact mode")
    return params, {"active_params": active, "experts": experts, "experts_per_token": top_k, "ffn": moe_ffn,
                    "expert_adapters": "parameter"}  # Qwen3MoeExperts: fused 3-D parameters


def _deepseek_v3(c: _Config, family: _Family) -> dict[str, Any]:
    """DeepseekV3ForCausalLM (DeepSeek-V3, R1, Kimi K2): multi-head latent attention, and
    after ``first_k_dense_replace`` dense layers, ``n_routed_experts`` SwiGLU experts of
    ``moe_intermediate_size``, a bias-free fp32 router and ``n_shared_experts`` shared
    experts fused into one SwiGLU MLP. The multi-token-prediction layers the checkpoints
    carry (``num_nextn_predict_layers``) are not built, so not counted."""
    h = c.get_int("hidden_size")
    layers = c.get_int("num_hidden_layers")
    heads = c.get_int("num_attention_heads")
    vocab = c.get_int("vocab_size")
    ffn = c.get_int("intermediate_size")
    moe_ffn = c.get_int("moe_intermediate_size", 2048)
    experts = c.get_int("n_routed_experts", 256, minimum=2)
    top_k = c.get_int("num_experts_per_tok", 8)
    shared = c.get_int("n_shared_experts", 1, minimum=0)
    dense = c.get_int("first_k_dense_replace", 3, minimum=0)
    kv_rank = c.get_int("kv_lora_rank", 512)
    # an explicit null means no query latent (DeepSeek-V2-Lite's layout), not the default
    q_rank = None if "q_lora_rank" in c.doc and c.doc["q_lora_rank"] is None else c.get_int("q_lora_rank", 1536)
    nope = c.get_int("qk_nope_head_dim", 128)
    rope = c.get_int("qk_rope_head_dim", 64)
    v_dim = c.get_int("v_head_dim", 128)
    tied = c.get_bool("tie_word_embeddings", False)
    bias = c.get_bool("attention_bias", False)
    act = c.get_str("hidden_act", "silu")
    if top_k > experts:
        raise DataFileError(f"{c.origin}: key 'num_experts_per_tok' ({top_k}) exceeds 'n_routed_experts' ({experts})")
    if dense >= layers:
        raise DataFileError(f"{c.origin}: key 'first_k_dense_replace' ({dense}) leaves no expert layer of {layers}",
                            hint="a model with no expert layers is not DeepSeek's layout; trace it with exact mode")

    qk = nope + rope
    if q_rank is None:
        q = h * heads * qk
    else:
        q = h * q_rank + (q_rank if bias else 0) + q_rank + q_rank * heads * qk  # q_a_proj, q_a_layernorm, q_b_proj
    kv = h * (kv_rank + rope) + ((kv_rank + rope) if bias else 0) + kv_rank + kv_rank * heads * (nope + v_dim)
    attn = q + kv + heads * v_dim * h + (h if bias else 0)
    norms = 2 * h
    expert = 3 * h * moe_ffn
    moe_fixed = h * experts + 3 * h * moe_ffn * shared  # router, shared experts
    sparse = layers - dense
    embeddings = vocab * h * (1 if tied else 2) + h
    base = layers * (attn + norms) + dense * 3 * h * ffn + sparse * moe_fixed + embeddings
    return {
        "kind": "decoder",
        "params": base + sparse * experts * expert,
        "active_params": base + sparse * top_k * expert,
        "layers": layers,
        "hidden": h,
        "heads": heads,
        "kv_heads": heads,  # the latent is expanded to every head's key and value
        "head_dim": nope,
        "kv_lora_rank": kv_rank,
        "q_lora_rank": q_rank,
        "qk_rope_head_dim": rope,
        "v_head_dim": v_dim,
        "ffn": moe_ffn,
        "experts": experts,
        "experts_per_token": top_k,
        "shared_ffn": moe_ffn * shared if shared else None,
        "dense_layers": dense or None,
        "dense_ffn": ffn if dense else None,
        "router_fp32": True,  # the router's weight and its sigmoid scores are fp32
        # transformers' DeepseekV3 fuses the experts into 3-D parameters; Kimi K2 runs its own
        # code (trust_remote_code), whose experts are nn.Linear layers
        "expert_adapters": "parameter" if family.model_type == "deepseek_v3" else "linear",
        "vocab": vocab,
        "max_seq_len": c.get_int("max_position_embeddings", 4096),
        "mlp": _gated_mlp(act),
        "tied_embeddings": tied,
        "dropout": _dropout(c, {"attention_dropout": 0.0}),
        "softmax_fp32": True,
        "norm": "rmsnorm",
    }


def _gpt2(c: _Config, family: _Family) -> dict[str, Any]:
    """GPT2LMHeadModel."""
    h = c.get_int("n_embd")
    layers = c.get_int("n_layer")
    heads = c.get_int("n_head")
    vocab = c.get_int("vocab_size")
    c.heads_divide(h, "n_embd", heads, "n_head")
    positions = c.get_int("n_positions", 1024)
    ffn = c.get_int("n_inner", 4 * h)
    tied = c.get_bool("tie_word_embeddings", True)
    act = c.get_str("activation_function", "gelu_new")

    layer = (
        2 * h  # ln_1
        + h * 3 * h + 3 * h  # attn.c_attn
        + h * h + h  # attn.c_proj
        + 2 * h  # ln_2
        + h * ffn + ffn  # mlp.c_fc
        + ffn * h + h  # mlp.c_proj
    )
    if c.get_bool("add_cross_attention", False):
        layer += (h * 2 * h + 2 * h) + (h * h + h) + (h * h + h) + 2 * h  # c_attn, q_attn, c_proj, ln_cross_attn
    params = vocab * h + positions * h + layers * layer + 2 * h + (0 if tied else vocab * h)
    return {
        "kind": "decoder",
        "params": params,
        "layers": layers,
        "hidden": h,
        "heads": heads,
        "kv_heads": heads,
        "ffn": ffn,
        "vocab": vocab,
        "max_seq_len": positions,
        "mlp": _plain_mlp(act),
        "tied_embeddings": tied,
        "dropout": _dropout(c, {"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1}),
        "softmax_fp32": False,
        "fused_projections": True,  # one c_attn for Q, K and V
    }


def _gpt_neox(c: _Config, family: _Family) -> dict[str, Any]:
    """GPTNeoXForCausalLM."""
    h = c.get_int("hidden_size")
    layers = c.get_int("num_hidden_layers")
    heads = c.get_int("num_attention_heads")
    ffn = c.get_int("intermediate_size")
    vocab = c.get_int("vocab_size")
    c.heads_divide(h, "hidden_size", heads, "num_attention_heads")
    max_pos = c.get_int("max_position_embeddings", 2048)
    tied = c.get_bool("tie_word_embeddings", False)
    bias = c.get_bool("attention_bias", True)
    act = c.get_str("hidden_act", "gelu")

    layer = (
        4 * h  # input_layernorm, post_attention_layernorm
        + h * 3 * h + (3 * h if bias else 0)  # attention.query_key_value
        + h * h + (h if bias else 0)  # attention.dense
        + h * ffn + ffn  # mlp.dense_h_to_4h
        + ffn * h + h  # mlp.dense_4h_to_h
    )
    params = vocab * h + layers * layer + 2 * h + (0 if tied else vocab * h)
    return {
        "kind": "decoder",
        "params": params,
        "layers": layers,
        "hidden": h,
        "heads": heads,
        "kv_heads": heads,
        "ffn": ffn,
        "vocab": vocab,
        "max_seq_len": max_pos,
        "mlp": _plain_mlp(act),
        "tied_embeddings": tied,
        "dropout": _dropout(c, {"attention_dropout": 0.0, "hidden_dropout": 0.0}),
        "softmax_fp32": True,
        "fused_qkv": True,  # GPTNeoXAttention: one query_key_value, sliced into views
        "fused_projections": True,
    }


def _bert_like(c: _Config, family: _Family) -> dict[str, Any]:
    """BertForMaskedLM and RobertaForMaskedLM (same tensors; no pooler)."""
    h = c.get_int("hidden_size")
    layers = c.get_int("num_hidden_layers")
    heads = c.get_int("num_attention_heads")
    ffn = c.get_int("intermediate_size")
    vocab = c.get_int("vocab_size")
    c.heads_divide(h, "hidden_size", heads, "num_attention_heads")
    max_pos = c.get_int("max_position_embeddings", 512)
    type_vocab = c.get_int("type_vocab_size", 2, minimum=0)
    tied = c.get_bool("tie_word_embeddings", True)
    act = c.get_str("hidden_act", "gelu")
    position_type = c.get_str("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise DataFileError(
            f"{c.origin}: key 'position_embedding_type' {position_type!r} is not supported; supported: 'absolute'"
        )

    embeddings = vocab * h + max_pos * h + type_vocab * h + 2 * h
    layer = (
        4 * (h * h + h)  # query, key, value, attention.output.dense
        + 2 * h  # attention.output.LayerNorm
        + h * ffn + ffn  # intermediate.dense
        + ffn * h + h  # output.dense
        + 2 * h  # output.LayerNorm
    )
    head = (h * h + h) + 2 * h + vocab + (0 if tied else vocab * h)  # transform dense + LayerNorm, decoder bias
    params = embeddings + layers * layer + head

    max_seq_len = max_pos
    if family.model_type == "roberta":
        # RoBERTa numbers positions from padding_idx + 1, so 514 tables hold 512 tokens
        max_seq_len = max_pos - (c.get_int("pad_token_id", 1, minimum=0) + 1)
    return {
        "kind": "encoder",
        "params": params,
        "layers": layers,
        "hidden": h,
        "heads": heads,
        "kv_heads": heads,
        "ffn": ffn,
        "vocab": vocab,
        "max_seq_len": max_seq_len if max_seq_len > 0 else None,
        "mlp": _plain_mlp(act),
        "tied_embeddings": tied,
        "dropout": _dropout(c, {"attention_probs_dropout_prob": 0.1, "hidden_dropout_prob": 0.1}),
        "softmax_fp32": False,
    }


def _t5(c: _Config, family: _Family) -> dict[str, Any]:
    """T5ForConditionalGeneration and MT5ForConditionalGeneration."""
    model_type = family.model_type
    d = c.get_int("d_model")
    layers = c.get_int("num_layers")
    heads = c.get_int("num_heads")
    d_kv = c.get_int("d_kv")
    ff = c.get_int("d_ff")
    vocab = c.get_int("vocab_size")
    dec_layers = c.get_int("num_decoder_layers", layers)
    buckets = c.get_int("relative_attention_num_buckets", 32)
    tied = c.get_bool("tie_word_embeddings", model_type == "t5")
    proj = c.get_str("feed_forward_proj", "gated-gelu" if model_type == "mt5" else "relu")
    parts = proj.split("-")
    gated = parts[0] == "gated"
    if (len(parts) > 1 and not gated) or len(parts) > 2:
        raise DataFileError(
            f"{c.origin}: key 'feed_forward_proj' {proj!r} is not valid; expected 'ACT' or 'gated-ACT'"
        )
    act = parts[-1]
    if proj == "gated-gelu":
        act = "gelu_new"  # T5Config maps the legacy "gated-gelu" to dense_act_fn "gelu_new"

    inner = heads * d_kv
    attention = 4 * d * inner  # q, k, v, o; no biases
    ff_params = (3 if gated else 2) * d * ff  # wi (or wi_0, wi_1) and wo
    encoder = layers * (attention + ff_params + 2 * d) + buckets * heads + d
    decoder = dec_layers * (2 * attention + ff_params + 3 * d) + buckets * heads + d
    params = vocab * d + encoder + decoder + (0 if tied else vocab * d)
    positions = c.doc.get("n_positions")
    return {
        "kind": "encoder-decoder",
        "params": params,
        "layers": layers,
        "decoder_layers": dec_layers,
        "hidden": d,
        "heads": heads,
        "kv_heads": heads,
        "head_dim": d_kv if inner != d else None,
        "ffn": ff,
        "vocab": vocab,
        # relative positions: n_positions, where given, is the pre-training length
        "max_seq_len": c.get_int("n_positions") if positions is not None else None,
        "mlp": _gated_mlp(act) if gated else _plain_mlp(act),
        "tied_embeddings": tied,
        "dropout": _dropout(c, {"dropout_rate": 0.1}),
        "softmax_fp32": False,  # transformers 5 softmaxes T5's scores in their own dtype (4.x upcast them)
        "norm": "rmsnorm",  # T5LayerNorm: op-by-op RMS norm
        "relative_position_bias": True,
    }


#: every supported model_type; a new one is one record here (and a row in the module docstring)
_FAMILIES: Mapping[str, _Family] = MappingProxyType({
    family.model_type: family
    for family in (
        _Family("bert", "BertForMaskedLM", _bert_like),
        _Family("deepseek_v3", "DeepseekV3ForCausalLM", _deepseek_v3),
        # Kimi K2 ships model_type kimi_k2 with its own copy of DeepseekV3ForCausalLM
        _Family("kimi_k2", "DeepseekV3ForCausalLM", _deepseek_v3),
        _Family("gpt2", "GPT2LMHeadModel", _gpt2),
        _Family("gpt_neox", "GPTNeoXForCausalLM", _gpt_neox),
        _Family("llama", "LlamaForCausalLM", _llama_like, max_positions=2048),
        _Family("mistral", "MistralForCausalLM", _llama_like, max_positions=4096 * 32, sliding="every"),
        _Family("mixtral", "MixtralForCausalLM", _llama_like, max_positions=4096 * 32, sliding="every"),
        _Family("mt5", "MT5ForConditionalGeneration", _t5),
        _Family("qwen2", "Qwen2ForCausalLM", _llama_like, max_positions=32768, sliding="qwen"),
        _Family("qwen3", "Qwen3ForCausalLM", _llama_like, max_positions=32768, head_dim=128, qk_norm=True,
                sliding="qwen"),
        _Family("qwen3_moe", "Qwen3MoeForCausalLM", _llama_like, max_positions=32768, head_dim=128, qk_norm=True,
                sliding="qwen"),
        _Family("phi3", "Phi3ForCausalLM", _llama_like, max_positions=4096),
        _Family("gemma", "GemmaForCausalLM", _llama_like, max_positions=8192, head_dim=256, tied=True),
        _Family("gemma2", "Gemma2ForCausalLM", _llama_like, max_positions=8192, head_dim=256, tied=True,
                layer_norms=4, sliding=2),
        _Family("gemma3_text", "Gemma3ForCausalLM", _llama_like, max_positions=131072, head_dim=256, tied=True,
                layer_norms=4, qk_norm=True, sliding=6),
        _Family("roberta", "RobertaForMaskedLM", _bert_like),
        _Family("t5", "T5ForConditionalGeneration", _t5),
    )
})
SUPPORTED_MODEL_TYPES = tuple(sorted(_FAMILIES))
#: transformers class whose parameters() count is reproduced, per model_type (derived from the table above)
HF_CLASS: Mapping[str, str] = MappingProxyType({t: f.hf_class for t, f in _FAMILIES.items()})


# ----------------------------------------------------------------------------- naming


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")


def _label_from_origin(origin: str) -> str:
    path: PurePath = PureWindowsPath(origin) if "\\" in origin else PurePosixPath(origin)
    for part in reversed(path.parts):
        if part.startswith("models--"):  # Hugging Face cache: models--org--name/snapshots/<sha>/config.json
            return part.split("--")[-1]
    stem = path.name[: -len(".json")] if path.name.lower().endswith(".json") else path.name
    if stem.lower() in ("config", ""):
        return path.parent.name  # "" when there is no folder: the caller falls back to model_type
    return stem


def _naming(c: _Config, model_type: str) -> tuple[str, str]:
    raw = c.doc.get("_name_or_path")
    label = ""
    name = ""
    if isinstance(raw, str) and raw.strip():
        raw = raw.strip().rstrip("/\\")
        hub_id = not raw.startswith(("/", ".", "~")) and raw.count("/") <= 1 and "\\" not in raw and ":" not in raw
        label = re.split(r"[/\\]", raw)[-1]
        name = raw if hub_id else label
    if not _slug(label):
        label = _label_from_origin(c.origin)
        name = label
    slug = _slug(label) or _slug(model_type)
    return slug, name or slug


# ----------------------------------------------------------------------------- entry point


def model_from_hf_config(doc: object, origin: str) -> Model:
    """A zoo :class:`Model` from a parsed Hugging Face ``config.json``.

    ``origin`` names the file in error messages and in the model's source. An
    unsupported ``model_type``, a missing or mistyped key, or a shape the zoo
    rejects raises :class:`DataFileError` (exit code 3) with one line that
    starts with ``origin``. See the module docstring for which transformers
    class's parameter count ``params`` reproduces for each family.
    """
    if not isinstance(doc, dict):
        raise DataFileError(f"{origin}: expected a JSON object (the contents of config.json), got {type(doc).__name__}")
    c = _Config(doc, origin)
    model_type = c.get_str("model_type")
    family = _FAMILIES.get(model_type)
    if family is None:
        raise DataFileError(
            f"{origin}: model_type {datafiles.quote(model_type)} is not supported; supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}",
            hint="exact mode (fit-model's exact method) builds any model transformers knows and counts its "
                 "memory (pip install 'gpusizer[torch]')",
        )
    fields = family.build(c, family)
    try:
        fields["checkpoint_quantization"] = checkpoint_quantization(doc.get("quantization_config"))
    except MalformedQuantizationConfig as exc:
        raise c._bad(exc.key, exc.expected, exc.value) from None
    model_id, name = _naming(c, model_type)
    fields.update(
        id=model_id,
        name=name,
        sources=[{"title": f"Hugging Face config.json: {origin}"}],
        notes=f"params = sum of parameter sizes of transformers' {family.hf_class}, derived from config.json",
    )
    try:
        return Model.model_validate(fields)
    except ValidationError as exc:
        message = datafiles.describe_validation_error(exc, origin, model_id)
        raise DataFileError(message.splitlines()[0]) from None


def load_hf_config(path: Path) -> Model:
    """A zoo :class:`Model` from a local ``config.json``: a regular file of at most
    16 MiB holding one JSON object, nested at most 64 levels, without NaN or
    Infinity (``datafiles.load_json``). Errors are DataFileError naming the file."""
    return model_from_hf_config(datafiles.load_json(path), str(path))
