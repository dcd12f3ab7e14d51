"""The configurations recommend's optimizer (ranking.plan) answers with: the request, each
configuration and the plan. Plain frozen models, shared by ranking.search (a Recommendation
carries its plan) and ranking.plan."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpusizer.hardware.catalog import Price

Objective = Literal["budget", "deadline", "max-cost", "budget-per-hour", "serve"]
_FROZEN = ConfigDict(frozen=True, defer_build=True)


class PlanRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    objective: Objective
    budget_usd: float | None = None
    deadline_hours: float | None = None
    max_cost_usd: float | None = None
    budget_per_hour_usd: float | None = None
    #: the job, for the cloud objectives: tokens, or samples (epochs x dataset size)
    tokens: float | None = None
    samples: float | None = None
    #: serving: the sequences served at once (their context is the run's sequence length), and the
    #: inter-token latency target in seconds (None: memory alone sets the GPUs)
    users: int | None = None
    max_itl_s: float | None = None
    top: int = 10


class Configuration(BaseModel):
    """One configuration and what the engine predicts for it."""

    model_config = _FROZEN

    rank: int = 0
    label: str
    gpu_id: str
    #: the system (data/systems.yaml) for a cloud configuration
    system: str | None = None
    gpus_per_node: int
    nodes: int
    gpus_total: int
    #: host machines the configuration needs (a purchase: its nodes; cloud: its instances); None: not counted
    hosts: int | None = None
    strategy: str
    throughput_per_s: float
    unit: str
    #: tokens in one sample of a sequence model; None: not a sequence model
    tokens_per_sample: int | None = None
    #: training: what one optimizer step takes in over all its replicas, in the unit's items (tokens
    #: for tokens/s, else samples): the batch timed per replica times the replicas, no gradient
    #: accumulation (Speed.per_step); None otherwise
    global_batch: int | None = None
    scaling_efficiency: float | None = None
    #: how gradients or activations cross GPUs or nodes (Speed.transport): rdma, tcp, nvlink, pcie or none
    transport: str | None = None
    #: capex: the GPUs' price in all, and its basis (street or launch, with the date)
    price_total_usd: float | None = None
    price: Price | None = None
    #: a purchase: the most of this GPU the budget buys as the plan lays them out (whole nodes of
    #: eight past one node, SXM/OAM in boards of eight), and, when the plan bought fewer, why
    budget_buys_gpus: int | None = None
    fewer_reason: str | None = None
    #: cloud: the whole configuration's on-demand price per hour
    usd_per_hour: float | None = None
    #: cloud: the month that on-demand price was read or published (YYYY-MM, data/systems.yaml)
    usd_per_hour_date: str | None = None
    #: the job's wall time and cost (cloud), given tokens or samples
    hours: float | None = None
    cost_usd: float | None = None
    #: the GPU's rule score (0..100), its top reasons (one line each) and the fields they score
    score: float
    reasons: tuple[str, ...] = ()
    reason_fields: tuple[str, ...] = ()
    advisories: tuple[str, ...] = ()
    #: the throughput is an upper bound (Speed.upper_bound: decode without the per-SM cap)
    upper_bound: bool = False
    #: serving (an inference plan of a decoder): independent model replicas, the sequences each
    #: decodes at once, and the inter-token latency each user sees; None otherwise
    replicas: int | None = None
    concurrency: int | None = None
    itl_s: float | None = None
    #: serving: the GPUs of one replica (its tensor-parallel size), and GPUs bought that serve none
    #: (a board of eight holds more than the replicas need)
    tp: int | None = None
    spare_gpus: int | None = None


class Plan(BaseModel):
    model_config = _FROZEN

    objective: Objective
    #: the objective in words: "the most images/s for $10,000 of GPUs"
    goal: str
    configurations: tuple[Configuration, ...]
    #: configurations assessed, and how many met the objective
    considered: int
    met: int
    notes: tuple[str, ...] = ()
    #: when none meets the objective: the configuration that comes nearest (a deadline: the
    #: fastest; a cost cap: the cheapest job; an hourly budget: the cheapest to rent; a purchase
    #: budget: the cheapest GPU that qualifies), or None where none was assessed
    closest: Configuration | None = None
    #: when none meets the objective: that, and the closest miss, in words (None when some meet it)
    shortfall: str | None = None
    #: a purchase for training: multi-node builds of GPUs without GPUDirect RDMA, which the plan keeps
    #: to one node, where they are faster than that GPU's listed configuration (or it has none)
    held_back: tuple[Configuration, ...] = ()
