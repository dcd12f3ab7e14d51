"""Parallelism: how a run is spread over GPUs, and what each kind of parallelism shards.

:func:`sharding` is the one rule the memory and performance models use to divide
weights, gradients, optimizer state and activations among GPUs. A run states
its parallelism as a ``strategy`` over a number of GPUs (``RunConfig.strategy``
and ``RunConfig.gpus``, what the command line takes), optionally with the model-parallel
degrees ``tp``, ``pp``, ``cp`` and ``ep``; :meth:`Parallelism.of` turns that into the
degrees below.

What each degree shards (per GPU, ``/`` = divided by the degree; ``dp`` counts the
data-parallel replicas, ``dp x cp`` the ranks ZeRO/FSDP shard over):

=============  =========  =========  =========  ===========  ======================
degree         weights    gradients  optimizer  activations  notes
=============  =========  =========  =========  ===========  ======================
dp (DDP)       -          -          -          -            replicas; DDP buckets
                                                             copy the gradients
ZeRO-1         -          -          / dp cp    -            Rajbhandari et al. 2020
ZeRO-2         -          / dp cp    / dp cp    -
ZeRO-3, FSDP   / dp cp    / dp cp    / dp cp    -            two layers gathered
tp             / tp       / tp       / tp       / tp (most)  Megatron-LM (Shoeybi
                                                             et al. 2019)
pp             layers     layers     layers     min(pp, m)   1F1B (Narayanan et al.
               / pp       / pp       / pp       micro-       2021); embedding on
                                                batches      the first stage, head
                                                on stage 1   on the last
cp             -          -          -          sequence     ring attention
                                                / cp         (Megatron-Core CP)
ep             experts    experts    experts    -            ep ranks are dp (or
               / ep       / ep       / ep                    cp) ranks: Megatron-
                                                             Core MoE
=============  =========  =========  =========  ===========  ======================

How the degrees combine (:meth:`Parallelism.of`): a run's GPUs are
``tp x pp x cp x dp``. Tensor parallelism is ``tp`` when given, else every GPU
(of a node) left by ``pp`` and ``cp`` under ``strategy="tp"``, else 1; the GPUs
left are data-parallel replicas, sharded per the strategy (ZeRO/FSDP shard over
``dp x cp``, as Megatron-Core's distributed optimizer does over its data-parallel
group with context parallelism). Expert parallelism does not multiply the GPUs:
as in Megatron-Core and DeepSpeed-MoE, each ep rank runs its own data and holds
1/ep of every MoE layer's experts, so ``ep`` must divide ``dp x cp`` (MoE Parallel
Folding, Liu et al. 2025). A layout whose degrees do not divide is a UsageError
naming the options.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from gpusizer.choices import BNB_OPTIMIZERS
from gpusizer.errors import UsageError
from gpusizer.units import plural

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
#: The strategy a training run that offloads runs on when it asks for plain data parallelism,
#: which offloads nothing itself: optimizer offload is DeepSpeed's ZeRO-Offload, built on ZeRO-2
#: (Ren et al. 2021, "ZeRO-Offload", section 4), and weight offload is ZeRO-3's offload_param
#: (ZeRO-Infinity); DeepSpeed offloads only under a ZeRO stage.
OFFLOAD_STRATEGY: dict[str, Strategy] = {"optimizer": "zero2", "params": "zero3", "all": "zero3"}
#: DeepSpeed swaps offloaded state to NVMe only under ZeRO-3 (ZeRO-Infinity: the optimizer and
#: parameter swappers live in stage3.py; stage_1_and_2.py keeps offloaded state in host memory)
NVME_STRATEGY: Strategy = "zero3"
#: The ZeRO stage DeepSpeed needs to offload the weights (offload_param is a ZeRO-3 option)
WEIGHT_OFFLOAD_STAGE = 3
#: Offloads that move the optimizer step to the host: DeepSpeed's offload_optimizer, and FSDP's
#: CPU offload, which offloads everything
OPTIMIZER_OFFLOADS: tuple[str, ...] = ("optimizer", "all")


class Parallelism(BaseModel):
    """The parallel degrees of a run. Its GPUs are ``tp * pp * cp * dp``; ``ep`` ranks are
    data-parallel (or context-parallel) ranks that split the experts among them."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    #: data-parallel replicas (the ZeRO/FSDP shard count, times cp, when zero_stage > 0)
    dp: int = Field(default=1, ge=1, le=1 << 16)
    #: tensor parallelism (Megatron-LM): each layer's matrices split over tp GPUs
    tp: int = Field(default=1, ge=1, le=1 << 16)
    #: pipeline stages (1F1B): each holds layers / pp of the layers
    pp: int = Field(default=1, ge=1, le=1 << 16)
    #: context parallelism: each rank holds seq / cp of every sequence's tokens
    cp: int = Field(default=1, ge=1, le=1 << 16)
    #: expert parallelism: each rank holds experts / ep of every MoE layer's routed experts
    ep: int = Field(default=1, ge=1, le=1 << 16)
    #: ZeRO stage over the dp x cp ranks: 1 shards optimizer state, 2 also gradients,
    #: 3 (and FSDP FULL_SHARD) also the weights
    zero_stage: Literal[0, 1, 2, 3] = 0
    #: the run names FSDP rather than DeepSpeed ZeRO-3 (same sharding)
    fsdp: bool = False

    @classmethod
    def of(cls, strategy: str, gpus: int, *, tp: int | None = None, pp: int = 1, cp: int = 1, ep: int = 1,
           node_gpus: int | None = None) -> Parallelism:
        """The degrees of ``strategy`` over ``gpus`` GPUs (one GPU is never sharded), with the
        model-parallel degrees given (see the module's docstring): ``tp`` fixes tensor
        parallelism, else ``strategy="tp"`` takes every GPU left by ``pp`` and ``cp`` (at most
        ``node_gpus``, a node's)."""
        if strategy not in ZERO_STAGE:
            raise UsageError(f"unknown strategy {strategy!r}", hint=f"one of {', '.join(STRATEGIES)}")
        if tp is None and pp == cp == ep == 1:
            if gpus <= 1:
                # (PyTorch FSDP on one GPU still runs mixed precision its own way: each unit cast to
                # 16 bits as it runs, no autocast copies; nothing is sharded)
                return cls(fsdp=strategy == "fsdp")
            if strategy == "tp":
                return cls(tp=gpus)
            return cls(dp=gpus, zero_stage=ZERO_STAGE[strategy], fsdp=strategy == "fsdp")
        return _layout(cls, strategy, gpus, tp=tp, pp=pp, cp=cp, ep=ep, node_gpus=node_gpus)

    @classmethod
    def of_cluster(cls, strategy: str, gpus_per_node: int, nodes: int = 1, *, tp: int | None = None, pp: int = 1,
                   cp: int = 1, ep: int = 1) -> Parallelism:
        """The degrees of ``strategy`` on ``nodes`` nodes of ``gpus_per_node`` GPUs:
        tensor parallelism stays inside a node (its fast links) and the nodes are
        data-parallel replicas (or pipeline stages); ZeRO and FSDP shard over every GPU."""
        if tp is not None or pp > 1 or cp > 1 or ep > 1:
            return cls.of(strategy, gpus_per_node * nodes, tp=tp, pp=pp, cp=cp, ep=ep, node_gpus=gpus_per_node)
        if strategy == "tp" and gpus_per_node > 1:
            return cls(tp=gpus_per_node, dp=nodes)
        return cls.of(strategy, gpus_per_node * nodes)

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def zero_ranks(self) -> int:
        """The ranks ZeRO/FSDP shard over and gradients are reduced over: the data-parallel
        replicas and, as in Megatron-Core, the context-parallel ranks (they hold the same weights)."""
        return self.dp * self.cp

    @property
    def gathers_layers(self) -> bool:
        """ZeRO-3 and FSDP gather each layer's full weights before using it."""
        return self.zero_ranks > 1 and self.zero_stage >= 3

    @property
    def optimizer_shards(self) -> int:
        """The ranks ZeRO (every stage) and FSDP split the optimizer step and its state over."""
        return self.zero_ranks if self.zero_stage >= 1 else 1

    @property
    def gathers_after_step(self) -> bool:
        """ZeRO-1 and 2 all-gather the updated weights from their owners after the optimizer step,
        when no backward is left to hide it behind (DeepSpeed stage_1_and_2.py, ``step``)."""
        return self.zero_ranks > 1 and self.zero_stage in (1, 2)

    @property
    def weight_shards(self) -> int:
        """The ranks ZeRO-3 and FSDP split each weight over (1 below stage 3)."""
        return self.zero_ranks if self.zero_stage >= 3 else 1

    @property
    def replicated_gradients(self) -> bool:
        """Plain DDP: every replica keeps all gradients, plus a bucket copy."""
        return self.zero_ranks > 1 and self.zero_stage == 0

    @property
    def model_parallel(self) -> bool:
        """Whether one replica's work is split over GPUs (tp, pp, cp or ep above 1)."""
        return max(self.tp, self.pp, self.cp, self.ep) > 1

    def words(self, strategy: str, mode: str) -> str:
        """The degrees in words: "TP=2, PP=4, DP=2 ZeRO-1"; data parallelism is named by the
        strategy ("DP=2 FSDP", or "replicas" serving)."""
        parts = [f"{name}={value}" for name, value in (("TP", self.tp), ("PP", self.pp), ("CP", self.cp),
                                                        ("EP", self.ep)) if value > 1]
        if self.dp > 1:
            label = "replicas" if mode == "inference" and self.zero_stage < 3 else \
                "DDP" if strategy == "tp" else STRATEGY_LABELS[strategy]
            parts.append(f"DP={self.dp} {label}")
        elif self.zero_stage and self.cp > 1:
            parts.append(f"{STRATEGY_LABELS[strategy]} over CP")
        return ", ".join(parts)


def _layout(cls: type[Parallelism], strategy: str, gpus: int, *, tp: int | None, pp: int, cp: int, ep: int,
            node_gpus: int | None) -> Parallelism:
    """Parallelism.of for a layout with model-parallel degrees: check that they divide."""
    if gpus % (pp * cp):
        groups = " x ".join(f"{n} {what}" for n, what in ((pp, "pipeline stages"), (cp, "context-parallel ranks"))
                            if n > 1)
        raise UsageError(f"{gpus} GPU{'s do' if gpus > 1 else ' does'} not split into {groups}",
                         hint=f"use a GPU count that {pp * cp} (pipeline stages x context-parallel ranks) divides", field="gpus")
    rest = gpus // (pp * cp)
    if tp is None:
        tp = (min(rest, node_gpus) if node_gpus else rest) if strategy == "tp" else 1
    if rest % tp:
        others = [f"{n} {what}" for n, what in ((pp, "pipeline stages"), (cp, "context-parallel ranks")) if n > 1]
        left = f"the {rest} GPUs left by {' and '.join(others)}" if others else plural(gpus, "GPU")
        raise UsageError(f"{left} do not split into {tp}-way tensor parallelism",
                         hint=f"use a GPU count that is a multiple of {tp * pp * cp}", field="tp")
    dp = rest // tp
    if (dp * cp) % ep:
        raise UsageError(f"expert parallelism over {ep} GPUs needs the data-parallel x context-parallel ranks "
                         f"({dp} x {cp}) to be a multiple of {ep}: ep ranks are data-parallel ranks",
                         hint="use a GPU count that leaves a multiple of the expert-parallel degree as data-parallel ranks", field="ep")
    zero = ZERO_STAGE[strategy] if dp * cp > 1 else 0
    return cls(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, zero_stage=zero, fsdp=strategy == "fsdp" and zero > 0)


class Sharding(BaseModel):
    """What one GPU holds: each quantity is divided by its divisor."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    #: the dense weights' (attention, embeddings, dense MLPs) divisors
    weights: int = Field(ge=1)
    gradients: int = Field(ge=1)
    optimizer: int = Field(ge=1)
    #: the tensor-parallel split of the layers' activations, KV cache and logits
    activations: int = Field(ge=1)
    #: the routed experts' divisors: also split by expert parallelism (ZeRO then shards the
    #: rest over the dp x cp / ep ranks that hold the same experts)
    expert_weights: int = Field(default=1, ge=1)
    expert_gradients: int = Field(default=1, ge=1)
    expert_optimizer: int = Field(default=1, ge=1)
    #: pipeline stages: each GPU holds the layers of one stage
    stages: int = Field(default=1, ge=1)
    #: context parallelism: each GPU holds this fraction of every sequence's tokens
    sequence: int = Field(default=1, ge=1)

    @property
    def ep_split(self) -> bool:
        """Whether the routed experts are divided otherwise than the dense weights (expert parallelism)."""
        return (self.expert_weights, self.expert_gradients, self.expert_optimizer) != \
            (self.weights, self.gradients, self.optimizer)


def sharding(par: Parallelism) -> Sharding:
    """The one rule for what each GPU of ``par`` holds (see the module's table). The weights
    divisors are for the whole model's weights of their kind; pipeline stages divide the
    layers (memory.estimate places the embedding and the head)."""
    zero, z = par.zero_ranks, par.zero_stage
    expert_zero = zero // par.ep

    def div(stage: int, shard: int) -> int:
        return shard if z >= stage else 1

    return Sharding(
        weights=par.tp * div(3, zero), gradients=par.tp * div(2, zero), optimizer=par.tp * div(1, zero),
        activations=par.tp,
        expert_weights=par.tp * par.ep * div(3, expert_zero), expert_gradients=par.tp * par.ep * div(2, expert_zero),
        expert_optimizer=par.tp * par.ep * div(1, expert_zero), stages=par.pp, sequence=par.cp,
    )


#: the RunConfig fields (and JSON input keys) of the model-parallel degrees
LAYOUT_DEGREES: tuple[str, ...] = ("tp", "pp", "cp", "ep")


def tensor_parallel_field(given: bool) -> str:
    """The input that set the tensor-parallel degree: ``tp`` when given, else ``gpus``
    (strategy "tp" over the GPUs)."""
    return LAYOUT_DEGREES[0] if given else "gpus"


def shards_over_replicas(strategy: str) -> bool:
    """Whether more data-parallel ranks hold less of the model state (ZeRO, FSDP)."""
    return Parallelism.of(strategy, 2).zero_stage > 0


def runs_deepspeed(strategy: str, degrees: Mapping[str, int | None]) -> bool:
    """Whether a run of ``strategy`` with the model-parallel ``degrees`` given (tp, pp, cp, ep;
    None or 1: none) is DeepSpeed ZeRO: a ZeRO strategy (any stage; FSDP is PyTorch's) on any
    number of GPUs (DeepSpeed allocates its buffers whatever the world size, and ZeRO-Offload on
    one GPU is its best-known use), without model-parallel degrees (with them, the layout is
    Megatron-Core's distributed optimizer)."""
    return (ZERO_STAGE.get(strategy, 0) >= 1 and strategy != "fsdp"
            and all((d or 1) == 1 for d in degrees.values()))


def offload_strategy(strategy: str, offload: str, offload_to: str, training: bool,
                     degrees: Mapping[str, int | None]) -> str:
    """The strategy a run of ``strategy`` that offloads ``offload`` to ``offload_to`` runs on: plain
    data parallelism (no model-parallel degrees) becomes the ZeRO stage DeepSpeed offloads under
    (:data:`OFFLOAD_STRATEGY`; :data:`NVME_STRATEGY` for NVMe) when training; any other run keeps
    its strategy."""
    if training and strategy == "ddp" and offload in OFFLOAD_STRATEGY and all((d or 1) == 1 for d in degrees.values()):
        return NVME_STRATEGY if offload_to == "nvme" else OFFLOAD_STRATEGY[offload]
    return strategy


def check_offload(strategy: str, offload: str, offload_to: str, training: bool,
                  degrees: Mapping[str, int | None], optimizer: str) -> None:
    """Refuse an offload the framework of ``strategy`` cannot run. PyTorch FSDP's CPU offload
    (FSDP1's CPUOffload(offload_params=True), FSDP2's CPUOffloadPolicy) moves the weights and with
    them the gradients and the optimizer step ("offloads gradients to CPU as well, meaning that the
    optimizer step runs on CPU", torch/distributed/fsdp/api.py): no optimizer-only or weights-only
    offload. DeepSpeed offloads the weights only under ZeRO-3 and swaps to NVMe only under ZeRO-3.

    An offload that moves the optimizer step to the host (:data:`OPTIMIZER_OFFLOADS`) cannot run
    bitsandbytes' 8-bit optimizers (:data:`.choices.BNB_OPTIMIZERS`), "a lightweight Python wrapper
    around CUDA custom functions, in particular 8-bit optimizers" (bitsandbytes README, PyPI 0.45.1)
    that step state in GPU memory. ZeRO-Offload steps the host's fp32 partition with DeepSpeed's
    CPU Adam (DeepSpeedCPUAdam, "ZeRO-Offload" tutorial, deepspeed.ai), and DeepSpeed refuses a
    client optimizer there (ZeRORuntimeException unless zero_force_ds_cpu_optimizer is false,
    deepspeed/runtime/engine.py); FSDP's CPU offload steps the optimizer on CPU tensors too."""
    if not training or offload not in OFFLOAD_STRATEGY:
        return
    if optimizer in BNB_OPTIMIZERS and offload in OPTIMIZER_OFFLOADS:
        where = "PyTorch FSDP's CPU offload" if strategy == "fsdp" else "DeepSpeed's ZeRO-Offload"
        what = "the optimizer" if offload == "optimizer" else "everything"
        raise UsageError(f"{optimizer} (a bitsandbytes 8-bit optimizer) steps on the GPU, but offloading {what} "
                         f"moves the optimizer step to the host ({where})",
                         hint="offload with the adamw optimizer (a CPU Adam steps it on the host), "
                              "or keep the 8-bit optimizer and offload nothing", field="optimizer")
    if strategy == "fsdp" and offload != "all":
        raise UsageError(f"PyTorch FSDP cannot offload the {'optimizer' if offload == 'optimizer' else 'weights'} "
                         "alone: its CPU offload moves the weights, the gradients and the optimizer step together",
                         hint="offload all of them with FSDP, or offload the optimizer under DeepSpeed ZeRO-2 or ZeRO-3",
                         field="offload")
    if not runs_deepspeed(strategy, degrees) or ZERO_STAGE[strategy] >= WEIGHT_OFFLOAD_STAGE:
        return
    if offload != "optimizer":
        raise UsageError(f"DeepSpeed offloads the weights only under ZeRO-3, not {STRATEGY_LABELS[strategy]}",
                         hint="shard with ZeRO-3, or offload the optimizer only", field="offload")
    if offload_to == "nvme":
        raise UsageError(f"DeepSpeed swaps offloaded state to NVMe only under ZeRO-3 (ZeRO-Infinity), not "
                         f"{STRATEGY_LABELS[strategy]}", hint="shard with ZeRO-3, or offload to the CPU",
                         field="offload-to")


def shards_weights(strategy: str) -> bool:
    """Whether ``strategy`` spreads the weights over GPUs (ZeRO-3, FSDP, tp)."""
    return sharding(Parallelism.of(strategy, 2)).weights > 1


def sharding_alternative(strategy: str, mode: str, offload: str = "none") -> str:
    """The strategy to suggest when a model does not fit: the run's own if it shards the
    weights, else tensor parallelism to serve and FSDP to train (ZeRO and FSDP are training
    strategies; inference has no gradients or optimizer state); ZeRO-1/2 and a training run that
    offloads go on to ZeRO-3, which offloads anything (FSDP offloads only everything)."""
    if shards_weights(strategy):
        return strategy
    if mode == "inference":
        return "tp"
    deepspeed = ZERO_STAGE[strategy] >= 1 or offload in OFFLOAD_STRATEGY
    return "zero3" if deepspeed else "fsdp"


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


def sharded_gpus(strategy: str, gpus_per_node: int, nodes: int = 1, *, tp: int | None = None, pp: int | None = 1,
                 cp: int | None = 1, ep: int | None = 1) -> int:
    """GPUs one model is spread over by ``strategy`` (:meth:`Parallelism.of_cluster`):
    a node's GPUs for tensor parallelism, every GPU for ZeRO and FSDP, and every GPU for a
    layout with model-parallel degrees (tp, pp, cp, ep given)."""
    if tp is not None or max(pp or 1, cp or 1, ep or 1) > 1:
        return gpus_per_node * nodes
    par = Parallelism.of_cluster(strategy, gpus_per_node, nodes)
    return par.tp if par.tp > 1 else par.dp


#: GPUs in one node (DGX/HGX boards, and the largest PCIe servers people buy): tensor
#: parallelism stays inside it, and larger runs are counted in whole nodes of it.
NODE_GPUS = 8

#: How each strategy reads in human output.
STRATEGY_LABELS: dict[str, str] = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3",
                                   "fsdp": "FSDP", "tp": "TP"}


def idle_sharding_note(strategy: str, par: Parallelism) -> str | None:
    """A note when ``strategy`` names ZeRO or FSDP sharding that the layout leaves nothing to
    do: the model-parallel degrees take every GPU, so one data-parallel replica (and no
    context-parallel rank) holds the whole state, which ZeRO and FSDP shard only across
    replicas; the run is sized and timed without them (its label leaves them out)."""
    if ZERO_STAGE.get(strategy, 0) == 0 or par.zero_ranks > 1 or not par.model_parallel:
        return None
    degrees = " x ".join(f"{name}={value}" for name, value in (("TP", par.tp), ("PP", par.pp), ("EP", par.ep))
                         if value > 1)
    return (f"{STRATEGY_LABELS[strategy]} has nothing to shard with one data-parallel replica ({degrees} take all "
            f"{par.gpus} GPUs): the run is sized and timed without it; more GPUs would add replicas for it to "
            "shard over")


def strategy_label(strategy: str, mode: str) -> str:
    """``strategy`` in words for a run of ``mode``: a data-parallel strategy serving a model
    holds whole copies ("replicas"); ZeRO, FSDP and DDP are training words."""
    if mode == "inference" and not shards_weights(strategy):
        return "replicas"
    return STRATEGY_LABELS[strategy]


def degree_words(strategy: str, gpus: int, mode: str, degrees: Mapping[str, int | None]) -> str | None:
    """The model-parallel degrees of a layout in words ("TP=8, PP=2, DP=2 ZeRO-1"), from
    ``degrees`` (the JSON input's tp, pp, cp and ep); None for a run without them."""
    tp, pp, cp, ep = (degrees.get(k) for k in LAYOUT_DEGREES)
    if tp is None and max(pp or 1, cp or 1, ep or 1) == 1:
        return None
    return Parallelism.of(strategy, gpus, tp=tp, pp=pp or 1, cp=cp or 1, ep=ep or 1).words(strategy, mode) or None


def layout_words(strategy: str, gpus: int, mode: str, *, tp: int | None = None, pp: int | None = 1,
                 cp: int | None = 1, ep: int | None = 1) -> str:
    """The run's GPUs in words: "1 GPU", "1 GPU (ZeRO-2)", "4 GPUs (TP=4)", "8 GPUs (FSDP)", "2 GPUs (replicas)",
    and with model-parallel degrees "16 GPUs (TP=2, PP=4, DP=2 ZeRO-1)"."""
    if tp is not None or max(pp or 1, cp or 1, ep or 1) > 1:
        words = degree_words(strategy, gpus, mode, dict(zip(LAYOUT_DEGREES, (tp, pp, cp, ep), strict=True)))
        return f"{gpus} GPUs ({words})" if gpus > 1 and words else "1 GPU"
    label = strategy_label(strategy, mode)
    if gpus <= 1:
        # one GPU under DeepSpeed still keeps DeepSpeed's layout (and its offload)
        return f"1 GPU ({label})" if mode == "train" and runs_deepspeed(strategy, {}) else "1 GPU"
    return f"{gpus} GPUs ({label}={gpus})" if strategy == "tp" else f"{gpus} GPUs ({label})"


__all__ = [
    "LAYOUT_DEGREES",
    "degree_words",
    "shards_over_replicas",
    "tensor_parallel_field",
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
    "runs_deepspeed",
    "OFFLOAD_STRATEGY",
    "offload_strategy",
    "check_offload",
    "NVME_STRATEGY",
    "shards_weights",
    "strategy_label",
    "idle_sharding_note",
]
