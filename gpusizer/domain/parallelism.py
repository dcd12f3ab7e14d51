"""Parallelism: how a run is spread over GPUs, and what each kind of parallelism shards.

:func:`sharding` is the one rule the memory and performance models use to divide
weights, gradients, optimizer state and activations among GPUs. A run states
its parallelism as a ``strategy`` over a number of GPUs (``RunConfig.strategy``
and ``RunConfig.gpus``, what the command line takes); :meth:`Parallelism.of`
turns that into the degrees below.

What each degree shards (per GPU, ``/`` = divided by the degree):

=============  =======  =========  =========  ===========  ====================
degree         weights  gradients  optimizer  activations  notes
=============  =======  =========  =========  ===========  ====================
dp (DDP)       -        -          -          -            replicas; DDP buckets
                                                           copy the gradients
ZeRO-1         -        -          / dp       -            Rajbhandari et al. 2020
ZeRO-2         -        / dp       / dp       -
ZeRO-3, FSDP   / dp     / dp       / dp       -            two layers gathered
tp             / tp     / tp       / tp       / tp (most)  Megatron-LM
pp, cp, ep     see :class:`Parallelism`; not yet modelled
=============  =======  =========  =========  ===========  ====================
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from gpusizer.errors import UsageError

#: How a run names its parallelism on the command line and in RunConfig.
Strategy = Literal["ddp", "zero1", "zero2", "zero3", "fsdp", "tp"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
#: ZeRO stage each data-parallel strategy runs; FSDP's FULL_SHARD is stage 3.
#: What a run keeps in host memory instead of on the GPU (ZeRO-Offload, ZeRO-Infinity,
#: FSDP CPU offload): the optimizer state (with AMP's fp32 master weights and fp32
#: gradients, which the CPU optimizer step updates), the weights (streamed to the GPU
#: layer by layer), or all of them and the gradients too; or, on its own, the activations
#: training saves for backward (torchtune's enable_activation_offloading).
Offload = Literal["none", "optimizer", "params", "all", "activations"]
OffloadTarget = Literal["cpu", "nvme"]
ZERO_STAGE: dict[str, int] = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3, "tp": 0}


class Parallelism(BaseModel):
    """The parallel degrees of a run. The product of the degrees is the GPU count
    that shares one model (``tp * pp * cp * ep``) times the data-parallel replicas."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: data-parallel replicas (the ZeRO/FSDP shard count when zero_stage > 0)
    dp: int = Field(default=1, ge=1, le=1 << 16)
    #: tensor parallelism (Megatron-LM): each layer's matrices split over tp GPUs
    tp: int = Field(default=1, ge=1, le=1 << 16)
    #: pipeline stages; not yet modelled (the engine rejects pp > 1)
    pp: int = Field(default=1, ge=1, le=1 << 16)
    #: context (sequence) parallelism; not yet modelled (rejected when > 1)
    cp: int = Field(default=1, ge=1, le=1 << 16)
    #: expert parallelism for mixture-of-experts layers; not yet modelled (rejected when > 1)
    ep: int = Field(default=1, ge=1, le=1 << 16)
    #: ZeRO stage over the dp replicas: 1 shards optimizer state, 2 also gradients,
    #: 3 (and FSDP FULL_SHARD) also the weights
    zero_stage: Literal[0, 1, 2, 3] = 0
    #: the run names FSDP rather than DeepSpeed ZeRO-3 (same sharding)
    fsdp: bool = False

    @classmethod
    def of(cls, strategy: str, gpus: int) -> Parallelism:
        """The degrees of ``strategy`` over ``gpus`` GPUs (one GPU is always plain)."""
        if strategy not in ZERO_STAGE:
            raise UsageError(f"unknown strategy {strategy!r}", hint=f"one of {', '.join(STRATEGIES)}")
        if gpus <= 1:
            return cls()
        if strategy == "tp":
            return cls(tp=gpus)
        return cls(dp=gpus, zero_stage=ZERO_STAGE[strategy], fsdp=strategy == "fsdp")

    @classmethod
    def of_cluster(cls, strategy: str, gpus_per_node: int, nodes: int = 1) -> Parallelism:
        """The degrees of ``strategy`` on ``nodes`` nodes of ``gpus_per_node`` GPUs:
        tensor parallelism stays inside a node (its fast links) and the nodes are
        data-parallel replicas; ZeRO and FSDP shard over every GPU."""
        if strategy == "tp" and gpus_per_node > 1:
            return cls(tp=gpus_per_node, dp=nodes)
        return cls.of(strategy, gpus_per_node * nodes)

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp * self.ep

    @property
    def gathers_layers(self) -> bool:
        """ZeRO-3 and FSDP gather each layer's full weights before using it."""
        return self.dp > 1 and self.zero_stage >= 3

    @property
    def replicated_gradients(self) -> bool:
        """Plain DDP: every replica keeps all gradients, plus a bucket copy."""
        return self.dp > 1 and self.zero_stage == 0


class Sharding(BaseModel):
    """What one GPU holds: each quantity is divided by its divisor."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weights: int = Field(ge=1)
    gradients: int = Field(ge=1)
    optimizer: int = Field(ge=1)
    #: the tensor-parallel split of the layers' activations, KV cache and logits
    activations: int = Field(ge=1)


def sharding(par: Parallelism) -> Sharding:
    """The one rule for what each GPU of ``par`` holds (see the module's table)."""
    unmodelled = [f"{name}={value}" for name, value in (("pp", par.pp), ("cp", par.cp), ("ep", par.ep)) if value > 1]
    if unmodelled:
        raise UsageError(
            f"pipeline, context and expert parallelism are not modelled yet ({', '.join(unmodelled)})",
            hint="use dp with ZeRO/FSDP, or tp",
        )
    model = par.tp
    return Sharding(
        weights=model * (par.dp if par.zero_stage >= 3 else 1),
        gradients=model * (par.dp if par.zero_stage >= 2 else 1),
        optimizer=model * (par.dp if par.zero_stage >= 1 else 1),
        activations=par.tp,
    )


def shards_weights(strategy: str) -> bool:
    """Whether ``strategy`` spreads the weights over GPUs (ZeRO-3, FSDP, tp)."""
    return sharding(Parallelism.of(strategy, 2)).weights > 1


def sharding_alternative(strategy: str, mode: str) -> str:
    """The strategy to suggest when a model does not fit: the run's own if it shards
    the model, else tensor parallelism to serve and FSDP to train (ZeRO and FSDP
    are training strategies; inference has no gradients or optimizer state)."""
    split = sharding(Parallelism.of(strategy, 2))
    if max(split.weights, split.gradients, split.optimizer) > 1:
        return strategy
    return "tp" if mode == "inference" else "fsdp"


def sharding_advice(mode: str) -> str:
    """How to spread a model that does not fit, in words, for the run's mode: ZeRO and
    FSDP shard training state, so serving is told about tensor parallelism only."""
    if mode == "inference":
        return "tensor parallelism over more GPUs"
    return "sharding with ZeRO-3, FSDP or tensor parallelism over more GPUs"


def gpus_per_node_for(strategy: str, shard_gpus: int, nodes: int) -> int:
    """GPUs per node that give a model ``shard_gpus`` shards: tensor parallelism puts
    them all in each node; ZeRO and FSDP spread them over the nodes."""
    return shard_gpus if within_node(strategy) else -(-shard_gpus // nodes)


def within_node(strategy: str) -> bool:
    """Whether ``strategy`` keeps its shards inside one node (tensor parallelism does: its
    all-reduces on every layer need NVLink-class bandwidth)."""
    return Parallelism.of(strategy, 2).tp > 1


def tensor_parallel(tp: int) -> dict[str, int | str]:
    """RunConfig settings for one model split over ``tp`` GPUs by tensor parallelism."""
    return {"gpus": tp, "strategy": "tp" if tp > 1 else "ddp"}


def sharded_gpus(strategy: str, gpus_per_node: int, nodes: int = 1) -> int:
    """GPUs one model is spread over by ``strategy`` (:meth:`Parallelism.of_cluster`):
    a node's GPUs for tensor parallelism, every GPU for ZeRO and FSDP."""
    par = Parallelism.of_cluster(strategy, gpus_per_node, nodes)
    return par.tp if par.tp > 1 else par.dp


#: GPUs in one node (DGX/HGX boards, and the largest PCIe servers people buy): tensor
#: parallelism stays inside it, and larger runs are counted in whole nodes of it.
NODE_GPUS = 8

#: How each strategy reads in human output.
STRATEGY_LABELS: dict[str, str] = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3",
                                   "fsdp": "FSDP", "tp": "TP"}


def strategy_label(strategy: str, mode: str) -> str:
    """``strategy`` in words for a run of ``mode``: a data-parallel strategy serving a model
    holds whole copies ("replicas"); ZeRO, FSDP and DDP are training words."""
    if mode == "inference" and not shards_weights(strategy):
        return "replicas"
    return STRATEGY_LABELS[strategy]


def layout_words(strategy: str, gpus: int, mode: str) -> str:
    """The run's GPUs in words: "1 GPU", "4 GPUs (TP=4)", "8 GPUs (FSDP)", "2 GPUs (replicas)"."""
    if gpus <= 1:
        return "1 GPU"
    label = strategy_label(strategy, mode)
    return f"{gpus} GPUs ({label}={gpus})" if strategy == "tp" else f"{gpus} GPUs ({label})"


__all__ = [
    "STRATEGIES",
    "NODE_GPUS",
    "STRATEGY_LABELS",
    "Parallelism",
    "Sharding",
    "Strategy",
    "gpus_per_node_for",
    "layout_words",
    "sharded_gpus",
    "sharding",
    "sharding_advice",
    "sharding_alternative",
    "tensor_parallel",
    "within_node",
    "shards_weights",
    "strategy_label",
]
