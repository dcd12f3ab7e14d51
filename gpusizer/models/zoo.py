"""The model zoo (``data/models.yaml``): parameter counts and the dimensions that
the memory and performance models need, each with a source.

Transformers carry their shape (layers, hidden, heads, ...) and activation
memory is computed from it. CNNs and RNNs carry measured per-sample activation
figures, counted as described in ``docs/method.md`` ("Counting activations").
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpusizer import datafiles
from gpusizer.domain.precision import CheckpointQuantization
from gpusizer.domain.shape import GATED_MLPS, ExpertAdapters, MlpKind
from gpusizer.errors import DataFileError, UsageError
from gpusizer.hardware.catalog import Source, normalise

Kind = Literal["cnn", "rnn", "encoder", "encoder-decoder", "decoder"]
TRANSFORMER_KINDS = ("encoder", "encoder-decoder", "decoder")


class Model(BaseModel):
    """One model. Unknown values are null; every figure is covered by a source."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    name: str
    aliases: tuple[str, ...] = ()
    kind: Kind
    params: int = Field(gt=0, le=10**14)
    #: parameters touched per token (MoE: shared + the routed experts); null = all
    active_params: int | None = Field(default=None, gt=0)

    # transformer shape
    layers: int | None = Field(default=None, gt=0, le=1000)
    decoder_layers: int | None = Field(default=None, gt=0, le=1000)
    hidden: int | None = Field(default=None, gt=0)
    heads: int | None = Field(default=None, gt=0)
    kv_heads: int | None = Field(default=None, gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    ffn: int | None = Field(default=None, gt=0)
    vocab: int | None = Field(default=None, gt=0)
    max_seq_len: int | None = Field(default=None, gt=0)
    #: gelu_new = the tanh GELU written out op by op (HF GPT-2's NewGELUActivation),
    #: which saves five tensors of the MLP width instead of two
    mlp: MlpKind | None = None
    experts: int | None = Field(default=None, gt=0)
    experts_per_token: int | None = Field(default=None, gt=0)
    tied_embeddings: bool | None = None
    dropout: bool | None = None
    #: rmsnorm = HF's op-by-op RMSNorm (Llama, Mistral, T5), which keeps an fp32
    #: copy of its input besides the normalised tensor; layernorm = a fused kernel
    norm: Literal["layernorm", "rmsnorm"] | None = None
    #: the reference implementation computes attention softmax in fp32 even in
    #: 16-bit training (HF Llama, Mistral, T5, GPT-NeoX do; GPT-2 and BERT do not)
    softmax_fp32: bool | None = None
    #: RMSNorms per layer (2; Gemma 2 and 3: 4), q/k RMSNorms (Qwen3, Gemma 3), tanh
    #: soft-capping of attention scores and final logits (Gemma 2)
    norms_per_layer: int | None = Field(default=None, ge=2, le=8)
    qk_norm: bool | None = None
    attn_softcap: bool | None = None
    final_softcap: bool | None = None
    #: T5's relative position bias (a (batch, heads, s, s) tensor every layer adds)
    relative_position_bias: bool | None = None
    #: multi-head latent attention (DeepSeek-V2/V3): the KV latent's width, the query
    #: latent's (null: a plain query projection), each head's rotary and value widths;
    #: ``head_dim`` is then each head's non-rotary query/key width
    kv_lora_rank: int | None = Field(default=None, gt=0)
    q_lora_rank: int | None = Field(default=None, gt=0)
    qk_rope_head_dim: int | None = Field(default=None, gt=0)
    v_head_dim: int | None = Field(default=None, gt=0)
    #: MoE in DeepSeek's layout: shared experts' total width, and leading dense layers
    #: with an MLP of ``dense_ffn`` (``ffn`` is then each routed expert's width)
    shared_ffn: int | None = Field(default=None, gt=0)
    #: one fused Q/K/V projection whose output the value is a view of (GPT-NeoX, Phi-3): saving
    #: the value for attention keeps the whole projection output alive
    fused_qkv: bool | None = None
    #: Q/K/V in one projection and (gated MLPs) gate and up in one (GPT-2, GPT-NeoX, Phi-3);
    #: separate projections each take their own 16-bit copy of their input under autocast
    fused_projections: bool | None = None
    #: MoE: the routing weights stay fp32 (transformers' Mixtral and DeepSeek-V3 routers), so
    #: each expert's output scaled by its weight is fp32 too
    router_fp32: bool | None = None
    #: MoE: how peft's target names reach the routed experts (peft 0.21 with transformers 5):
    #: "linear", each expert's projections are nn.Linear layers (transformers 4, remote code such as
    #: Kimi K2's); "parameter", the experts are fused 3-D parameters that peft adapts as parameters
    #: (Mixtral, Qwen-MoE, DeepSeek); "none", fused experts peft leaves alone (gpt-oss)
    expert_adapters: ExpertAdapters | None = None
    #: sliding-window attention: layers that attend within the last ``sliding_window`` tokens
    sliding_layers: int | None = Field(default=None, gt=0)
    sliding_window: int | None = Field(default=None, gt=0)
    dense_layers: int | None = Field(default=None, gt=0)
    dense_ffn: int | None = Field(default=None, gt=0)
    #: a Hugging Face config's quantization_config, read (hfconfig); the zoo's entries are unquantised
    checkpoint_quantization: CheckpointQuantization | None = None

    # CNN / RNN measured figures
    image_size: int | None = Field(default=None, gt=0)
    seq_len: int | None = Field(default=None, gt=0)
    activation_bytes_per_sample_fp32: int | None = Field(default=None, gt=0)
    activation_bytes_per_sample_mixed: int | None = Field(default=None, gt=0)
    #: CNNs: peak non-weight bytes per sample of an inference pass (fp32, reference image size)
    inference_bytes_per_sample_fp32: int | None = Field(default=None, gt=0)

    #: CNNs: parameters of the classifier head (the last layers), whose gradients
    #: are written at the start of backward while every activation is still alive
    head_params: int | None = Field(default=None, ge=0)

    # compute
    forward_gflops_per_sample: float | None = Field(default=None, gt=0)

    sources: tuple[Source, ...] = Field(min_length=1)
    notes: str | None = None

    @model_validator(mode="after")
    def _shape_checks(self) -> Model:
        if self.kind in TRANSFORMER_KINDS:
            for field in ("layers", "hidden", "heads", "ffn", "vocab"):
                if getattr(self, field) is None:
                    raise ValueError(f"{field}: required for a {self.kind} model")
            # heads is set (checked just above); the test says so to mypy
            if self.heads is not None and self.kv_heads is not None and self.heads % self.kv_heads:
                raise ValueError(f"kv_heads: {self.kv_heads} does not divide heads {self.heads}")
        else:
            if self.activation_bytes_per_sample_fp32 is None:
                raise ValueError(f"activation_bytes_per_sample_fp32: required for a {self.kind} model")
            if self.kind == "cnn" and self.image_size is None:
                raise ValueError("image_size: required for a cnn model")
            if self.kind == "rnn" and self.seq_len is None:
                raise ValueError("seq_len: required for an rnn model")
        if (self.experts is None) != (self.experts_per_token is None):
            raise ValueError("experts_per_token: experts and experts_per_token go together")
        latent = ("q_lora_rank", "qk_rope_head_dim", "v_head_dim")
        if self.kv_lora_rank is None and any(getattr(self, f) is not None for f in latent):
            raise ValueError("kv_lora_rank: q_lora_rank, qk_rope_head_dim and v_head_dim describe latent attention "
                             "and need kv_lora_rank")
        if self.kv_lora_rank is not None and (self.qk_rope_head_dim is None or self.v_head_dim is None):
            raise ValueError("kv_lora_rank: latent attention needs qk_rope_head_dim and v_head_dim")
        if self.kv_lora_rank is not None and self.kind != "decoder":
            raise ValueError("kv_lora_rank: latent attention is described for decoders only")
        mixture = self.experts is not None and self.experts > 1
        for name in ("dense_layers", "shared_ffn", "router_fp32", "expert_adapters"):
            if getattr(self, name) and not mixture:
                raise ValueError(f"{name}: describes a mixture of experts, which needs experts > 1")
        if (self.dense_layers is None) != (self.dense_ffn is None):
            raise ValueError("dense_layers: dense_layers and dense_ffn go together")
        if self.dense_layers and self.layers and self.dense_layers >= self.layers:
            raise ValueError(f"dense_layers: {self.dense_layers} leaves no expert layer of {self.layers}")
        if self.shared_ffn and self.mlp not in GATED_MLPS:
            raise ValueError("shared_ffn: shared experts are gated MLPs (swiglu, geglu)")
        return self

    @property
    def is_transformer(self) -> bool:
        return self.kind in TRANSFORMER_KINDS

    @property
    def attention_head_dim(self) -> int | None:
        if self.head_dim is not None:
            return self.head_dim
        if self.hidden and self.heads:
            return self.hidden // self.heads
        return None

    @property
    def n_kv_heads(self) -> int | None:
        return self.kv_heads if self.kv_heads is not None else self.heads


class Zoo(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    models: tuple[Model, ...]

    def resolve(self, name: str) -> Model:
        key = normalise(name)
        for model in self.models:
            if key in (normalise(model.id), normalise(model.name), *(normalise(a) for a in model.aliases)):
                return model
        import difflib

        ids = [m.id for m in self.models]
        close = difflib.get_close_matches(name.lower(), ids, n=4, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else "run 'gpusizer models' to list the zoo"
        raise UsageError(f"unknown model {name!r}", hint=hint)


def _parse(doc: object, origin: str) -> tuple[Model, ...]:
    if not isinstance(doc, dict) or not isinstance(doc.get("models"), list):
        raise DataFileError(f"{origin}: expected 'models:' followed by a list of entries")
    out: list[Model] = []
    seen: set[str] = set()
    for i, raw in enumerate(doc["models"]):
        if not isinstance(raw, dict):
            raise DataFileError(f"{origin}: entry #{i + 1} is not a mapping")
        try:
            model = Model.model_validate(raw)
        except ValidationError as exc:
            raise DataFileError(datafiles.describe_validation_error(exc, origin, raw.get("id"))) from None
        if model.id in seen:
            raise DataFileError(f"{origin}: entry '{model.id}': id: duplicate id")
        seen.add(model.id)
        out.append(model)
    return tuple(out)


@functools.cache
def _load_cached(paths: tuple[str, ...], cache_dir: Path | None) -> Zoo:
    return datafiles.read_retrying_uncached(_read_files, paths, cache_dir)


def _read_files(paths: tuple[str, ...], cache_dir: Path | None, refresh: bool = False) -> Zoo:
    models: list[Model] = []
    for path in paths:
        models.extend(_parse(datafiles.load_yaml(Path(path), cache_dir, refresh=refresh), path))
    return Zoo(models=tuple(models))


def load_zoo(extra: Sequence[str] = (), cache_dir: Path | None = None) -> Zoo:
    """Load the bundled model zoo, plus any extra model files."""
    return _load_cached((str(datafiles.bundled_path("models.yaml")), *extra), cache_dir)
