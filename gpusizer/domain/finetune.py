"""Fine-tuning with adapters: LoRA and QLoRA, and the parameters they train.

An :class:`Adapter` on a :class:`~gpusizer.domain.run.RunConfig` says the base
model is frozen and only low-rank adapters train. :func:`adapter_params` counts
the adapters exactly from the model's shape: a rank-``r`` LoRA on a linear layer
of ``n_in`` inputs and ``n_out`` outputs adds ``r * (n_in + n_out)`` parameters
(A is r x n_in, B is n_out x r; Hu et al. 2021, "LoRA", section 4).

The recipe assumed, as peft with ``Trainer(bf16=True)`` runs it:

* the frozen base in 16 bits (LoRA) or in 4-bit NF4 with blockwise absmax
  constants (QLoRA, Dettmers et al. 2023), dequantised on the fly for each matmul;
* the adapters and their optimizer state in fp32 (or bf16, :data:`ADAPTER_DTYPE_BYTES`);
* compute under 16-bit autocast; activations of backprop through the frozen base.

``targets`` follows peft: ``all-linear`` is every linear layer but the output head
(peft's ``"all-linear"``; on mixture-of-experts models that includes each
expert's projections and the router), ``attention`` the q, k, v and o
projections, ``mlp`` the feed-forward projections, or a list of the names
``q, k, v, o, gate, up, down`` (and ``head``, the output projection, which
only an explicit name adapts).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpusizer.domain.precision import (
    ADAPTER_DTYPE_BYTES,
    NF4_BITS,
    AdapterDtype,
    nf4_bytes_per_weight,
    nf4_constant_bytes_per_weight,
)
from gpusizer.domain.shape import TransformerShape
from gpusizer.errors import UsageError

#: The projection names a target list may use, and the sets they stand for.
LINEAR_NAMES: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
TARGET_SETS: dict[str, tuple[str, ...]] = {
    "all-linear": LINEAR_NAMES,
    "attention": ("q", "k", "v", "o"),
    "mlp": ("gate", "up", "down"),
}


#: QLoRA's base format (Dettmers et al. 2023: 4-bit NormalFloat), and the rank --qlora uses
#: unless --lora gives one (and fit-model's remedies propose)
QLORA_QUANTISATION: Literal["nf4"] = "nf4"
DEFAULT_RANK = 16


class Adapter(BaseModel):
    """Low-rank adapters on a frozen base: LoRA, or QLoRA (a 4-bit NF4 base)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    rank: int = Field(ge=1, le=65_536)
    #: the projections that get adapters (see the module docstring)
    targets: tuple[str, ...] = ("all-linear",)
    #: QLoRA: the base's linear layers stored in 4-bit NF4
    base_quantisation: Literal["nf4"] | None = None
    #: QLoRA's double quantisation of the absmax constants (bitsandbytes' default in peft recipes)
    double_quant: bool = True
    #: the adapters' dtype, and so of their gradients and optimizer state: fp32 as peft
    #: keeps them (autocast_adapter_dtype), bf16 as torchtune and LitGPT do
    dtype: AdapterDtype = "fp32"

    @field_validator("targets")
    @classmethod
    def _known_targets(cls, targets: tuple[str, ...]) -> tuple[str, ...]:
        for name in targets:
            if name not in TARGET_SETS and name not in (*LINEAR_NAMES, "head"):
                raise ValueError(
                    f"unknown adapter target {name!r}: use all-linear, attention, mlp, or names among "
                    f"{', '.join(LINEAR_NAMES)}, head")
        if not targets:
            raise ValueError("adapters need at least one target")
        return targets

    @property
    def modules(self) -> frozenset[str]:
        """The projection names the targets stand for."""
        out: set[str] = set()
        for name in self.targets:
            out.update(TARGET_SETS.get(name, (name,)))
        return frozenset(out)

    @property
    def bytes_per_param(self) -> int:
        """Bytes of each adapter weight, gradient and optimizer-state element."""
        return ADAPTER_DTYPE_BYTES[self.dtype]

    @property
    def method(self) -> Literal["lora", "qlora"]:
        return "qlora" if self.base_quantisation else "lora"

    @property
    def base_bytes_per_weight(self) -> float:
        """Bytes per quantised base weight, its absmax constants included."""
        return nf4_bytes_per_weight(double_quant=self.double_quant)

    @property
    def base_code_bytes_per_weight(self) -> float:
        """Bytes per quantised base weight of its 4-bit codes alone: what bitsandbytes packs into
        the ``bnb_4bit_quant_storage`` tensor, the parameter that ZeRO-3 and FSDP shard."""
        return NF4_BITS / 8

    @property
    def base_constant_bytes_per_weight(self) -> float:
        """Bytes per quantised base weight of its quantisation constants, which bitsandbytes keeps
        beside the parameter (in its QuantState), not in it."""
        return nf4_constant_bytes_per_weight(double_quant=self.double_quant)


class _Linear(NamedTuple):
    """A linear layer adapters may target: ``copies`` exist, a token passes ``passes`` of them
    (fewer for routed experts), and its adapter has rank ``rank_factor`` x r. ``expert_param``:
    fused expert parameters peft adapts through a parametrization (no rank-r intermediates; the
    adapted weights themselves). A name "gate+up" needs both names targeted."""

    name: str
    n_in: int
    n_out: int
    copies: int
    passes: int
    rank_factor: int = 1
    expert_param: bool = False

    def targeted(self, wanted: frozenset[str]) -> bool:
        return all(part in wanted for part in self.name.split("+"))


def _linears(m: TransformerShape, adapter: Adapter) -> list[_Linear]:
    """Every linear layer an adapter may target, the output head last (only named targets reach it)."""
    h, f = m.hidden, m.ffn
    n = m.layers + 2 * m.decoder_layers  # attention blocks: decoder self- and cross-attention
    layers = m.layers + m.decoder_layers
    out = [_Linear(name, n_in, n_out, n, n) for name, n_in, n_out in m.attention_projections()]
    moe = m.experts > 1
    # (width, MLPs, MLPs a token passes): the routed experts, the shared experts, dense layers
    mlps = [] if moe and m.expert_adapters != "linear" else \
        [(f, (layers - m.dense_layers) * m.experts, m.moe_layers * m.experts_per_token if moe else layers)]
    if m.shared_ffn and m.expert_adapters == "linear":
        mlps.append((m.shared_ffn, m.moe_layers, m.moe_layers))
    if m.dense_layers and m.dense_ffn and m.expert_adapters == "linear":
        mlps.append((m.dense_ffn, m.dense_layers, m.dense_layers))
    for width, count, passes in mlps:
        names = (("gate", h, width), ("up", h, width), ("down", width, h)) if m.gated_mlp else \
            (("up", h, width), ("down", width, h))
        out += [_Linear(name, n_in, n_out, count, passes) for name, n_in, n_out in names]
    if moe and m.expert_adapters == "parameter":
        # peft 0.21 on transformers 5 (utils/transformers_weight_conversion.py, _convert_peft_config_moe):
        # the gate, up and down names become the fused 3-D expert parameters, gate and up one adapter
        # of twice the rank; those names then match no nn.Linear, so dense and shared MLPs get none
        if m.gated_mlp and len(adapter.modules & {"gate", "up"}) == 1:
            raise UsageError("peft fuses the experts' gate and up projections into one parameter: target both or "
                             "neither", hint="add the missing one of gate and up, or use mlp or all-linear",
                             field="lora-targets")
        count, passes = m.moe_layers * m.experts, m.moe_layers * m.experts_per_token
        fused = _Linear("gate+up", h, 2 * f, count, passes, 2, True) if m.gated_mlp else \
            _Linear("up", h, f, count, passes, 1, True)
        out += [fused, _Linear("down", f, h, count, passes, 1, True)]
    if moe and m.expert_adapters != "none":
        out.append(_Linear("gate", h, m.experts, m.moe_layers, m.moe_layers))  # the router, which peft adapts too
    out.append(_Linear("head", h, m.vocab, 1, 1))  # the output head: only when named (all-linear leaves it out)
    return out


def adapter_params(m: TransformerShape, adapter: Adapter) -> int:
    """Trainable parameters the adapters add: rank x (inputs + outputs) per targeted linear."""
    wanted = adapter.modules
    return sum(adapter.rank * x.rank_factor * (x.n_in + x.n_out) * x.copies
               for x in _linears(m, adapter) if x.targeted(wanted))


def largest_adapter_elements(m: TransformerShape, adapter: Adapter) -> int:
    """Elements of the largest adapter matrix (A is rank x inputs, B outputs x rank)."""
    wanted = adapter.modules
    return max((adapter.rank * x.rank_factor * max(x.n_in, x.n_out) for x in _linears(m, adapter)
                if x.targeted(wanted)), default=0)


def adapter_input_elements(m: TransformerShape, adapter: Adapter) -> int:
    """Rank-sized intermediates (x A) the adapters save per token for backward: one per
    targeted linear a token passes (a token passes only its routed experts). Adapters on fused
    expert parameters keep none: they change the weight (expert_weight_copy_elements)."""
    wanted = adapter.modules
    return sum(adapter.rank * x.rank_factor * x.passes for x in _linears(m, adapter)
               if x.targeted(wanted) and not x.expert_param)


def expert_weight_copy_elements(m: TransformerShape, adapter: Adapter) -> int:
    """Elements of the adapted expert weights (W + B A) one MoE layer computes: peft adapts a 3-D
    expert parameter through torch.nn.utils.parametrize, so every forward builds the whole
    adapted stack, and the grouped matmul saves it for backward (measured in exact mode: a
    4-layer, 8-expert Mixtral with LoRA saves one such copy per layer)."""
    wanted = adapter.modules
    return sum(x.n_in * x.n_out * m.experts for x in _linears(m, adapter) if x.expert_param and x.targeted(wanted))


def require_transformer(m: TransformerShape | None, adapter: Adapter) -> TransformerShape:
    """Adapters attach to a transformer's linear layers: its shape must be known."""
    if m is None:
        raise UsageError(
            f"{'QLoRA' if adapter.base_quantisation else 'LoRA'} attaches adapters to a transformer's linear layers and needs its shape",
            hint="describe the model by name or by its Hugging Face config",
            field="qlora" if adapter.base_quantisation else "lora")
    return m


__all__ = [
    "LINEAR_NAMES",
    "TARGET_SETS",
    "Adapter",
    "adapter_input_elements",
    "adapter_params",
    "expert_weight_copy_elements",
    "largest_adapter_elements",
    "require_transformer",
]
