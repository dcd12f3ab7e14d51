"""recommend as an optimizer: whole configurations (GPU or system x GPUs per node x nodes x strategy)
chosen for an objective, each assessed by the same pipeline as a single GPU (ranking.search.recommend:
the rules, the memory fit and the performance model), so a configuration's speed, fit and flags are
exactly what ``recommend --gpus N --nodes K`` and ``estimate`` say for it.

Objectives:

- ``budget``: capex. For each GPU that qualifies, the count within the budget (at its street price,
  else its launch price; up to ``NODE_GPUS`` a node, in whole nodes past one; several nodes for
  training only with GPUDirect RDMA) that gives the most throughput, a near-tie going to the
  cheaper; ranked by predicted throughput, near-ties by price. GPU prices only: hosts and
  networking are not counted, and the notes say so.
- ``deadline``: cloud. For each priced cloud system whose GPU qualifies, the fewest nodes (1, 2, 4, ...)
  that train ``tokens`` or ``samples`` within the deadline; ranked by the job's cost.
- ``max-cost``: cloud. The fastest node count whose job cost stays within the cap; ranked by time.
- ``budget-per-hour``: cloud. The most nodes the hourly budget rents; ranked by time.

Where data parallelism does not fit the model, training is sharded (fsdp) and inference split by
tensor parallelism, as ``fit-model`` suggests. Pure: no printing, no environment.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from gpusizer.domain.parallelism import NODE_GPUS, Parallelism, sharding_alternative, tensor_parallel
from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape
from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Gpu
from gpusizer.hardware.systems import System
from gpusizer.memory.serving import (
    LARGE_GPU_LIMITS,
    SMALL_GPU_LIMITS,
    ServingCapacity,
    group_capacities,
    served_decoder,
    serving_context,
    tp_sizes,
)
from gpusizer.performance.planning import training_seconds
from gpusizer.ranking.configs import Configuration, Plan, PlanRequest
from gpusizer.ranking.rules import RuleSet
from gpusizer.ranking.search import (
    NEAR_TIE,
    Candidate,
    GpuResult,
    Recommendation,
    RecommendRequest,
    WhyNot,
    _sharded_need,
    input_seq_len,
    recommend,
    run_config,
    why_not_ranking,
)
from gpusizer.units import format_bytes, format_count, format_duration, plural

if TYPE_CHECKING:
    from gpusizer.performance.serving import LatencyDeployment

#: cloud node counts tried: 1, 2, 4, ... up to this
MAX_NODES = 128
#: what a purchase's price counts
GPU_PRICES_ONLY = "GPU prices only (street, else launch): no hosts, power or networking"


def plan_purchase(
    candidates: Sequence[Candidate], rules: RuleSet, req: RecommendRequest, preq: PlanRequest, *,
    reference: ModelShape | None = None, pool: Sequence[Gpu] | None = None,
) -> Plan:
    """Capex: for each qualifying GPU, the count within the budget that gives the most throughput
    (:func:`_best_count`), ranked by predicted throughput (:func:`_by_speed`)."""
    budget = preq.budget_usd
    if budget is None:
        raise UsageError("a purchase plan needs a budget", field="budget_usd")
    # serving: each replica decodes the sequences its KV cache holds, and replicas need no fabric
    shape = req.shape or reference
    serving = rules.workload(req.workload).mode == "inference" and shape is not None and shape.generates
    req = req.model_copy(update={"serving_concurrency": serving})
    single = req.model_copy(update={"gpus_per_node": 1, "nodes": 1, "top": None})
    base = recommend(candidates, rules, single, reference=reference, pool=pool)
    by_id = {c.gpu.id: c for c in candidates}
    configs: list[Configuration] = []
    slower: list[Configuration] = []
    held: list[Configuration] = []
    considered = 0
    too_big: set[str] = set()  # GPUs one of which cannot hold the run: their eff. is against a hypothetical run
    capped: list[str] = []  # GPUs the budget buys more of than the plan lays out
    for res in _qualifying(base):
        if res.price is None or res.price.usd > budget:
            continue
        if budget // res.price.usd > NODE_GPUS * MAX_NODES:
            capped.append(res.gpu_id)
        gpu = by_id[res.gpu_id].gpu
        most = _most_bought(budget, res.price.usd, gpu, serving)
        options: list[Configuration] = []
        fewest = _fewest(res, rules, single)
        if fewest is None or fewest > 1:
            too_big.add(gpu.id)
        for n in _purchase_counts(most, fewest, gpu.on_baseboard, linear=serving):
            for gpn, strategy, tp in _layouts(n, gpu, shape if serving else None):
                considered += 1
                cfg = _assess(by_id[res.gpu_id], rules, req, gpn, n // gpn, reference, pool, only=strategy, tp=tp)
                if cfg is not None:
                    options.append(cfg)
        useful = [c for c in options if _speed_up(c) >= 1]
        # training across nodes only with GPUDirect RDMA: others stay in one box, and a faster build of
        # several is held back, named in the notes (serving replicas exchange nothing)
        one_box = not (gpu.gpudirect_rdma or serving)
        ranked = [c for c in useful if c.nodes == 1] if one_box else useful
        if ranked:
            configs.append(_best_count(ranked, min(most, NODE_GPUS) if one_box else most))
        elif options and not useful:
            slower.append(max(options, key=_speed_up))
        several = [c for c in useful if c.nodes > 1] if one_box else []
        if several and (not ranked or max(c.throughput_per_s for c in several) > configs[-1].throughput_per_s):
            held.append(_best_count(several, most))
    configs = _by_speed(configs)
    closest = None if configs else _cheapest_purchase(candidates, by_id, rules, single, reference, pool)
    first = configs[0] if configs else closest
    unit = first.unit if first is not None else "throughput"
    numbered = _numbered(configs, preq.top)
    # the held-back builds that would be listed: faster than the last row
    held = [c for c in _by_speed(held) if not numbered or c.throughput_per_s > numbered[-1].throughput_per_s]
    notes = (GPU_PRICES_ONLY, *((_serving_note(req, rules, shape),) if serving else ()), _COUNTS_NOTE,
             *_held_note(held), *_slower_note(slower),
             *((f"the plan lays out at most {MAX_NODES} nodes of {NODE_GPUS} of one GPU; the budget buys more of "
                f"{', '.join(capped[:3])}{', ...' if len(capped) > 3 else ''}",) if capped else ()),
             *(() if serving else _efficiency_notes(numbered, too_big)))
    return Plan(objective="budget", goal=f"the most {unit} {'served ' if serving else ''}for ${budget:,.0f} of GPUs",
                configurations=numbered, considered=considered, met=len(configs),
                notes=notes + upper_bound_notes(numbered) + _base_notes(base.notes), closest=closest,
                shortfall=None if configs else _shortfall("budget", closest), held_back=tuple(held))


def _efficiency_notes(configs: Sequence[Configuration], too_big: set[str]) -> tuple[str, ...]:
    """What a row's eff. is measured against, where it would otherwise read oddly (estimate's notes say
    the same of one run): above 100%, or against one GPU that cannot hold the run."""
    above = [c.label for c in configs if (c.scaling_efficiency or 0.0) > 1.0]
    alone = [c.label for c in configs if c.gpu_id in too_big]
    notes = []
    if above:
        notes.append(f"eff. above 100% ({', '.join(above[:3])}{', ...' if len(above) > 3 else ''}): under ZeRO/FSDP "
                     "each GPU runs the optimizer step on its share of the weights, which the one-GPU baseline "
                     "updates whole")
    if alone:
        notes.append(f"eff. against a hypothetical run for {', '.join(alone[:3])}{', ...' if len(alone) > 3 else ''}: "
                     "one of their GPUs cannot hold the run, so the baseline is the speed it would have if it could")
    return tuple(notes)


#: how a purchase plan chooses each GPU's count, in words
_COUNTS_NOTE = (f"each GPU's count: the most throughput within the budget ({NODE_GPUS} a node, SXM/OAM by boards of "
                f"{NODE_GPUS}); within {NEAR_TIE - 1:.0%}, a near-tie, the cheaper (so between rows too)")


def _most_bought(budget: float, usd: float, gpu: Gpu, serving: bool = False) -> int:
    """The most of ``gpu`` that ``budget`` buys as a plan lays them out, up to :data:`MAX_NODES` nodes:
    SXM and OAM modules on their boards of eight; training, whole nodes of eight past one node
    (serving: replicas in boxes of their own, _layouts)."""
    count = min(int(budget // usd), NODE_GPUS * MAX_NODES)
    if (count > NODE_GPUS and not serving) or gpu.on_baseboard:
        count -= count % NODE_GPUS
    return count


def _fewest(res: GpuResult, rules: RuleSet, single: RecommendRequest) -> int | None:
    """The fewest GPUs of ``res`` that hold the model (memory.fewest_gpus, sharded): 1 where one does;
    None where no count does."""
    if res.fit is None or res.fit.fits or single.shape is None:
        return 1
    return _sharded_need(res.fit, single, run_config(rules, single))[1]


def _purchase_counts(most: int, fewest: int | None, baseboard: bool, linear: bool = False) -> list[int]:
    """The GPU counts a purchase plan assesses for one GPU, up to ``most`` and from ``fewest`` (fewer
    do not hold the model; None: none does): every count in one node (a board of eight for SXM and
    OAM modules), then whole nodes of eight: 2, 4, 8, ... nodes, the fewest that hold the model and
    the most bought. ``linear``: throughput grows with the replicas (serving, whose replicas exchange
    nothing), so past one node only the most bought, as _layouts lays them out."""
    if fewest is None:
        return []
    if linear and most > NODE_GPUS:
        return [most] if fewest <= most else []
    one_node = [NODE_GPUS] if baseboard else list(range(1, min(most, NODE_GPUS) + 1))
    nodes = most // NODE_GPUS
    several = {k for k in (1 << i for i in range(1, MAX_NODES.bit_length())) if k < nodes}
    several |= {nodes, -(-fewest // NODE_GPUS)}
    return [n for n in (*one_node, *(NODE_GPUS * k for k in sorted(several) if k > 1 and k <= nodes))
            if fewest <= n <= most]


def _best_count(options: Sequence[Configuration], most: int) -> Configuration:
    """Of one GPU's configurations, the fastest; one within :data:`NEAR_TIE` of it is a near-tie, which
    goes to the cheaper (then the fewer GPUs), so a count no faster than fewer GPUs is never bought.
    Where that buys fewer than ``most``, the configuration says why."""
    fastest = max(c.throughput_per_s for c in options)
    best = min((c for c in options if c.throughput_per_s * NEAR_TIE >= fastest),
               key=lambda c: (c.price_total_usd or 0.0, c.gpus_total, -c.throughput_per_s))
    more = [c for c in options if c.gpus_total > best.gpus_total]
    if best.gpus_total >= most:
        return best.model_copy(update={"budget_buys_gpus": most})
    if not more:  # (no layout of more GPUs holds the model: serving replicas are whole)
        why = (f"the other {most - best.gpus_total:,} would not make another whole replica" if best.replicas
               else "no layout of more GPUs runs")
        return best.model_copy(update={"budget_buys_gpus": most, "fewer_reason": why})
    top = max(more, key=lambda c: (c.throughput_per_s, -c.gpus_total))
    unit = top.unit
    if top.throughput_per_s <= best.throughput_per_s:
        why = f"{top.gpus_total:,} give {top.throughput_per_s:,.0f} {unit}, no more than {best.gpus_total:,} do"
    else:
        extra = (top.price_total_usd or 0.0) - (best.price_total_usd or 0.0)
        why = (f"{top.gpus_total:,} give {top.throughput_per_s / best.throughput_per_s - 1:.1%} more "
               f"({top.throughput_per_s:,.0f} {unit}) for ${extra:,.0f} more: a near-tie, which goes to the cheaper")
    return best.model_copy(update={"budget_buys_gpus": most, "fewer_reason": why})


def _speed_up(c: Configuration) -> float:
    """The configuration's speed over one of its GPUs (estimate's "N x the speed of 1 GPU"); N where unknown."""
    return c.scaling_efficiency * c.gpus_total if c.scaling_efficiency is not None else float(c.gpus_total)


def _slower_note(slower: Sequence[Configuration]) -> tuple[str, ...]:
    """A note naming the GPUs left out because every count that holds the model runs slower than one GPU."""
    if not slower:
        return ()
    left = ", ".join(f"{c.label} ({_speed_up(c):.2f}x)" for c in slower)
    return (f"not bought, being slower than one of their GPUs (the speed-up over one GPU estimate gives is "
            f"below 1 at every count that holds the model): {left}",)


def _by_speed(configs: Sequence[Configuration]) -> list[Configuration]:
    """Fastest first; configurations within :data:`NEAR_TIE` of the fastest of their group are a near-tie,
    ordered by price (then speed, then score): a slower and dearer configuration never ranks above one
    that dominates it."""
    ordered = sorted(configs, key=lambda c: (-c.throughput_per_s, c.gpu_id))
    out: list[Configuration] = []
    while ordered:
        head = ordered[0].throughput_per_s
        group = [c for c in ordered if c.throughput_per_s * NEAR_TIE >= head]
        ordered = ordered[len(group):]
        out += sorted(group, key=lambda c: (c.price_total_usd if c.price_total_usd is not None else math.inf,
                                            -c.throughput_per_s, -c.score, c.gpu_id))
    return out


#: the held-back builds a note names (the plan's JSON lists every one)
HELD_NAMED = 3


def _held_note(held: Sequence[Configuration]) -> tuple[str, ...]:
    """A note naming the fastest of the multi-node builds held back (GPUs without GPUDirect RDMA,
    which a training plan keeps in one node) that would be listed."""
    if not held:
        return ()
    builds = ", ".join(f"{c.label} ({c.throughput_per_s:,.0f} {c.unit}, ${c.price_total_usd or 0:,.0f})"
                       for c in held[:HELD_NAMED]) + (f" and {len(held) - HELD_NAMED} more" if len(held) > HELD_NAMED else "")
    return (f"held to one node, having no GPUDirect RDMA: across nodes over TCP no measurement checks the model, which "
            f"rates GeForce scaling in one node above Lambda's (benchmarks/scaling_check.py), and hosts are not "
            f"priced; faster so: {builds}",)


def _row_cost(c: Configuration) -> str:
    """What a plan's row costs, in words: a purchase's price, a cloud job's cost or an hourly rent."""
    if c.price_total_usd is not None:
        return f"${c.price_total_usd:,.0f}"
    if c.cost_usd is not None:
        return f"${c.cost_usd:,.0f} for the job"
    return f"${c.usd_per_hour:,.2f} an hour" if c.usd_per_hour is not None else "an unknown price"


def plan_why_not(why_not: Sequence[WhyNot], plan: Plan) -> tuple[WhyNot, ...]:
    """The why-not answers by a purchase or cloud plan: a GPU the plan lists is answered by its row (the
    one-GPU ranking's exclusions, such as a memory fit the plan's count overcomes, do not apply to it);
    each GPU the plan kept to one node (Plan.held_back) says so."""
    held = {c.gpu_id: c for c in plan.held_back}
    listed = {c.gpu_id: c for c in plan.configurations}
    first = plan.configurations[0] if plan.configurations else None
    out = []
    for w in why_not:
        row = listed.get(w.gpu_id or "")
        if row is not None and first is not None:
            lead = "it is the plan's first" if row is first else (
                f"the first, {first.label}, gives {first.throughput_per_s:,.0f} {first.unit} for {_row_cost(first)}")
            fewer = (f"; {row.gpus_total:,} of the {row.budget_buys_gpus:,} the budget buys: {row.fewer_reason}"
                     if row.fewer_reason and row.budget_buys_gpus is not None else "")
            w = w.model_copy(update={"rank": row.rank, "configuration": row, "reasons": (
                f"row {row.rank} of the plan: {row.label}, {row.throughput_per_s:,.0f} {row.unit} for "
                f"{_row_cost(row)}{fewer}", lead)})
        if w.gpu_id in held:
            c = held[w.gpu_id]
            w = w.model_copy(update={"reasons": (*w.reasons, (
                f"the plan keeps it to one node, having no GPUDirect RDMA; as {c.label} it would give "
                f"{c.throughput_per_s:,.0f} {c.unit} for {_row_cost(c)}, over TCP"))})
        out.append(w)
    return tuple(out)


def plan_serving(
    candidates: Sequence[Candidate], rules: RuleSet, req: RecommendRequest, preq: PlanRequest, *,
    pool: Sequence[Gpu] | None = None,
) -> tuple[Plan, tuple[WhyNot, ...]]:
    """Serving: for each qualifying GPU, the fewest GPUs, as replicas of one tensor-parallel size
    (up to a node's), whose paged KV caches hold ``preq.users`` sequences of the run's context and,
    with ``preq.max_itl_s``, decode them within that latency (performance.serving.
    fewest_gpus_within_latency, at serve's capacity and estimate's speed); SXM and OAM modules in
    whole boards of eight. Ranked by the GPUs' price, then their count. A budget or a power cap
    drops deployments beyond it, or whose price or power is unknown. With the plan, for each GPU
    in ``req.why_not``, where the plan places it or why it has no place (:func:`_serving_why_not`)."""
    shape, wl = req.shape, rules.workload(req.workload)
    if preq.users is None or wl.mode != "inference":
        raise UsageError(f"sizing a deployment for users needs an inference workload, not {wl.name!r} ({wl.mode})",
                         hint="e.g. the llm-inference workload with a model", field="users")
    if shape is None:
        raise UsageError("sizing a deployment for users needs the decoder served",
                         hint="give a model by name, parameter count or HF config", field="model")
    served_decoder(shape)
    if req.batch is not None:
        raise UsageError("sizing a deployment for users chooses each replica's batch: the users it shares",
                         hint="drop the batch", field="batch")
    single = req.model_copy(update={"gpus_per_node": 1, "nodes": 1, "top": None, "budget_usd": None,
                                    "max_power_w": None})
    base = recommend(candidates, rules, single, pool=pool)
    run = _ServingRun(shape=shape, cfg=run_config(rules, single), context=serving_context(shape, req.seq_len),
                      by_id={c.gpu.id: c for c in candidates}, base=base, req=req, preq=preq)
    out = _Outcomes()
    qualifying = _qualifying(base)
    for res in qualifying:
        _size_deployment(run, res, out)
    configs = sorted(out.listed, key=_serving_order)
    numbered = _numbered(configs, preq.top)
    notes = (f"replicas of one tensor-parallel size (up to {NODE_GPUS} GPUs) share the sequences; each holds its share "
             f"in its paged KV cache (serve's accounting) and decodes it at estimate's speed; SXM and OAM modules "
             f"come in boards of {NODE_GPUS}, whose GPUs all serve",
             GPU_PRICES_ONLY,
             *((f"not sized, their speed being unknown: {', '.join(out.unknown)}",) if out.unknown else ()))
    closest = None if configs else min(out.over, key=_serving_order, default=None)
    plan = Plan(objective="serve", goal=_serving_goal(preq, run.context), configurations=numbered,
                considered=len(qualifying), met=len(configs),
                notes=notes + upper_bound_notes(numbered) + _base_notes(base.notes), closest=closest,
                shortfall=None if configs else _serving_shortfall(preq, req, closest))
    pool = pool or [c.gpu for c in candidates]
    return plan, tuple(_serving_why_not(run, out, configs, gpu_id, asked, pool) for gpu_id, asked in req.why_not)


class _ServingRun(NamedTuple):
    """What every GPU of a serving plan is sized with."""

    shape: ModelShape
    cfg: RunConfig
    context: int
    by_id: dict[str, Candidate]
    base: Recommendation
    req: RecommendRequest
    preq: PlanRequest


@dataclass
class _Outcomes:
    """What the serving plan found for each GPU it sized: a deployment within the caps (``listed``),
    one beyond them (``over``), none (``unserved``: each group size's capacity), or no speed
    (``unknown``: why)."""

    listed: list[Configuration] = field(default_factory=list)
    over: list[Configuration] = field(default_factory=list)
    unserved: dict[str, dict[int, ServingCapacity]] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)


def _size_deployment(run: _ServingRun, res: GpuResult, out: _Outcomes) -> None:
    """One GPU's fewest-GPU deployment for the users, filed in ``out``."""
    from gpusizer.performance.serving import fewest_gpus_within_latency

    gpu, preq = run.by_id[res.gpu_id].gpu, run.preq
    caps = group_capacities(run.shape, run.cfg, run.by_id[res.gpu_id].capacity_bytes, run.context, gpu_name=gpu.name)
    try:
        dep = fewest_gpus_within_latency(
            gpu, run.shape, run.cfg, {t: c.max_running for t, c in caps.items()}, context=run.context,
            users=preq.users or 1, max_itl_s=preq.max_itl_s, unit=NODE_GPUS if gpu.on_baseboard else 1,  # (boards)
            compute_precision=run.base.precision, tf32=run.base.tf32, **run.req.perf_data)
    except UsageError as exc:  # (a GPU the speed model cannot time: its rates are unknown)
        if exc.field is not None:
            raise
        out.unknown[res.gpu_id] = exc.message
        return
    if dep is None:
        out.unserved[res.gpu_id] = caps
        return
    config = _deployment(res, dep)
    (out.over if _beyond_caps(config, gpu, preq, run.req) else out.listed).append(config)


def _power_w(config: Configuration, gpu: Gpu) -> float | None:
    return gpu.tdp_w * config.gpus_total if gpu.tdp_w is not None else None


def _beyond_caps(config: Configuration, gpu: Gpu, preq: PlanRequest, req: RecommendRequest) -> list[str]:
    """The caps a deployment misses, in words with its figures (none: it is within them)."""
    misses = []
    budget, cap, price, power = preq.budget_usd, req.max_power_w, config.price_total_usd, _power_w(config, gpu)
    if budget is not None and (price is None or price > budget):
        misses.append(f"costs ${price:,.0f}, over the ${budget:,.0f} budget" if price is not None
                      else f"has no known price, and the budget (${budget:,.0f}) excludes the unpriced")
    if cap is not None and (power is None or power > cap):
        misses.append(f"draws {power:,.0f} W (TDP x {config.gpus_total:,}), over the {cap:,.0f} W power cap"
                      if power is not None else f"has no known TDP, and the power cap ({cap:,.0f} W) excludes it")
    return misses


def _serving_why_not(run: _ServingRun, out: _Outcomes, configs: Sequence[Configuration], gpu_id: str, asked: str,
                     pool: Sequence[Gpu]) -> WhyNot:
    """Where the serving plan places ``gpu_id``, or why it has no place, with the plan's figures."""
    found = next((i for i, c in enumerate(configs, 1) if c.gpu_id == gpu_id), None)
    if found is not None:
        config = configs[found - 1].model_copy(update={"rank": found})
        return WhyNot(asked=asked, gpu_id=gpu_id, rank=found, reasons=_placed(config, configs, run.preq.top),
                      configuration=config)
    over = next((c for c in out.over if c.gpu_id == gpu_id), None)
    if over is not None:
        misses = _beyond_caps(over, run.by_id[gpu_id].gpu, run.preq, run.req)
        return WhyNot(asked=asked, gpu_id=gpu_id, rank=None, configuration=over, reasons=(
            f"its cheapest deployment for the users, {over.label}, {', and '.join(misses)}",))
    if gpu_id in out.unknown:
        return WhyNot(asked=asked, gpu_id=gpu_id, rank=None, reasons=(
            f"not sized: its decode speed is unknown ({out.unknown[gpu_id]})",))
    if gpu_id in out.unserved:
        return WhyNot(asked=asked, gpu_id=gpu_id, rank=None, reasons=(_unserved(run, gpu_id, out.unserved[gpu_id]),))
    # not sized at all: a rule excluded it (not the one-GPU memory fit, which the plan's layouts
    # get past), or it was not among the GPUs considered
    excluded = [r.model_copy(update={"excluded_by": tuple(f for f in r.excluded_by if f.kind != "fit")})
                for r in run.base.excluded]
    return why_not_ranking(gpu_id, asked, [], excluded, pool, run.req)


def _placed(config: Configuration, configs: Sequence[Configuration], top: int) -> tuple[str, ...]:
    """A listed deployment's place in the plan (cheapest first), against the first."""
    price = f"${config.price_total_usd:,.0f}" if config.price_total_usd is not None else "an unknown price"
    itl = f", ITL {_ms(config.itl_s)}" if config.itl_s is not None else ""
    shown = f"; the first {top} shown" if config.rank > top else ""
    reasons = [f"{'listed' if config.rank <= top else 'placed'} {config.rank} of {len(configs)} deployments "
               f"(cheapest first{shown}): {config.label}, {price}{itl}, {config.throughput_per_s:,.0f} tokens/s"]
    if config.upper_bound:
        reasons.append("its tokens/s is an upper bound and its ITL a lower bound: decode on it is timed without "
                       "the per-SM cap calibrated on NVIDIA GPUs")
    first = configs[0]
    if first is not config and first.gpu_id != config.gpu_id:
        cost = f"${first.price_total_usd:,.0f}" if first.price_total_usd is not None else "an unknown price"
        reasons.append(f"the first, {first.label}, costs {cost}" + (
            "; deployments of unknown price come after the priced" if config.price_total_usd is None else ""))
    return tuple(reasons)


def _unserved(run: _ServingRun, gpu_id: str, caps: dict[int, ServingCapacity]) -> str:
    """Why no deployment of ``gpu_id`` serves the users: no group size's KV cache holds one
    sequence, or none decodes one within the latency target (the best ITL it reaches)."""
    from gpusizer.performance.serving import fastest_decode

    context = f"{run.context:,} tokens"
    most = max(caps)
    if not any(c.max_running >= 1 for c in caps.values()):
        cap = caps[most]
        need = format_bytes(cap.blocks_per_sequence * cap.block_bytes)
        taken = cap.budget_bytes - cap.kv_budget_bytes
        left = format_bytes(cap.kv_budget_bytes) if cap.kv_budget_bytes > 0 else "nothing"
        return (f"its KV caches hold no sequence of {context} in any layout up to TP={most}: at TP={most} its "
                f"weights ({format_bytes(cap.weights_bytes)}) and the engine's working memory "
                f"({format_bytes(taken - cap.weights_bytes)}) take {format_bytes(taken)} of the "
                f"{format_bytes(cap.budget_bytes)} each GPU gives the engine ({cap.utilization:.0%}), leaving {left} "
                f"for the KV cache, where one sequence needs {need}")
    gpu = run.by_id[gpu_id].gpu
    best = fastest_decode(gpu, run.shape, run.cfg, {t: c.max_running for t, c in caps.items()}, context=run.context,
                          compute_precision=run.base.precision, tf32=run.base.tf32, **run.req.perf_data)
    target = run.preq.max_itl_s
    assert best is not None and target is not None
    tp, speed = best
    where = "one GPU" if tp == 1 else f"TP={tp}"
    return (f"no layout meets the {_ms(target)} ITL target: its fastest, one sequence on {where}, "
            f"decodes a token in {_ms(speed.itl_s)}")


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def _deployment(res: GpuResult, dep: LatencyDeployment) -> Configuration:
    """A serving deployment as a plan's configuration, priced by the GPUs bought (spare ones too)."""
    total = dep.gpus_total
    layout = plural(dep.replicas, "replica") if dep.tp == 1 else (
        f"TP={dep.tp}" if dep.replicas == 1 else f"{dep.replicas:,} x TP={dep.tp}")
    layout += f", {dep.spare_gpus} spare" if dep.spare_gpus else ""
    return Configuration(
        label=f"{total:,} x {res.gpu_id}" + (f" ({layout})" if total > 1 else ""),
        gpu_id=res.gpu_id, gpus_per_node=dep.tp, nodes=dep.replicas, gpus_total=total,
        strategy=str(tensor_parallel(dep.tp)["strategy"]), throughput_per_s=dep.aggregate_tokens_s,
        unit="tokens/s", price_total_usd=res.price.usd * total if res.price is not None else None,
        price=res.price, score=res.score, reasons=tuple(c.message for c in res.reasons[:2]),
        reason_fields=tuple(c.field for c in res.reasons[:2]), advisories=tuple(a.message for a in res.advisories),
        replicas=dep.replicas, concurrency=dep.concurrency, itl_s=dep.speed.itl_s, upper_bound=dep.speed.upper_bound,
        tp=dep.tp, spare_gpus=dep.spare_gpus)


def _serving_goal(preq: PlanRequest, context: int) -> str:
    within = f" within {preq.max_itl_s * 1e3:g} ms a token" if preq.max_itl_s is not None else ""
    return f"the cheapest GPUs that serve {plural(preq.users or 1, 'sequence')} of {context:,} tokens{within}"


def _serving_shortfall(preq: PlanRequest, req: RecommendRequest, closest: Configuration | None) -> str:
    """Why no deployment is listed: a budget or power cap it misses (naming the nearest), or none
    that serves the users (within the latency target, if one is given)."""
    if closest is not None:
        caps = " or ".join(w for w, v in (("budget", preq.budget_usd), ("power cap", req.max_power_w)) if v is not None)
        price = (f"costs ${closest.price_total_usd:,.0f}" if closest.price_total_usd is not None
                 else "has no known price")
        return f"no deployment that serves them is within the {caps}; the cheapest, {closest.label}, {price}"
    within = f" within {preq.max_itl_s * 1e3:g} ms a token" if preq.max_itl_s is not None else ""
    return f"no GPU checked serves them{within} in replicas of up to {NODE_GPUS} GPUs each"


def _serving_order(c: Configuration) -> tuple[bool, float, int, float]:
    """Serving deployments, best first: priced before unknown, cheaper, fewer GPUs, faster."""
    return c.price_total_usd is None, c.price_total_usd or 0.0, c.gpus_total, -c.throughput_per_s


def plan_cloud(
    systems: Sequence[System], gpus: Sequence[Gpu], rules: RuleSet, req: RecommendRequest, preq: PlanRequest, *,
    reference: ModelShape | None = None, pool: Sequence[Gpu] | None = None,
) -> Plan:
    """Cloud: node counts of each priced cloud system whose GPU qualifies, for the objective."""
    if preq.tokens is None and preq.samples is None and preq.objective != "budget-per-hour":
        raise UsageError("a cloud plan needs the job: a token count, or epochs of a dataset size", field="tokens")
    wl = rules.workload(req.workload)
    if wl.mode != "train":
        raise UsageError(f"a cloud job plan times a training run; workload {wl.name!r} is {wl.mode}",
                         hint="for serving, size the GPUs with a budget or a GPU count", field="workload")
    if req.shape is None and reference is None:
        raise UsageError(f"workload {wl.name!r} has no model the performance model can time, so no job time",
                         hint="give a model", field="model")
    by_id = {g.id: g for g in gpus}
    priced = [s for s in systems if s.kind == "cloud" and s.usd_per_gpu_hour is not None and s.gpu in by_id]
    cands = [Candidate(gpu=by_id[g], label=g, capacity_bytes=by_id[g].memory_bytes)
             for g in dict.fromkeys(s.gpu for s in priced)]
    single = req.model_copy(update={"gpus_per_node": 1, "nodes": 1, "top": None, "budget_usd": None})
    base = recommend(cands, rules, single, reference=reference, pool=pool)
    ok = {r.gpu_id for r in _qualifying(base)}
    configs: list[Configuration] = []
    misses: list[Configuration] = []
    considered = 0
    for system in priced:
        if system.gpu not in ok:
            continue
        best, tried, nearest = _cloud_choice(system, by_id[system.gpu], rules, req, preq, reference, pool)
        considered += tried
        if best is not None:
            configs.append(best)
        elif nearest is not None:
            misses.append(nearest)
    key = (lambda c: (c.cost_usd or math.inf, c.hours or math.inf)) if preq.objective == "deadline" else (
        lambda c: (c.hours if c.hours is not None else -c.throughput_per_s, c.cost_usd or math.inf))
    configs.sort(key=key)
    closest = None if configs or not misses else min(misses, key=_MISS_ORDER[preq.objective])
    numbered = _numbered(configs, preq.top)
    notes = ("on-demand list prices (dated: gpusizer systems list); no storage or egress", _BATCH_NOTE,
             *_network_notes(numbered, priced, by_id, req), *_efficiency_notes(numbered, set()))
    return Plan(objective=preq.objective, goal=_cloud_goal(preq), configurations=numbered,
                considered=considered, met=len(configs),
                notes=notes + upper_bound_notes(numbered) + _base_notes(base.notes), closest=closest,
                shortfall=None if configs else _shortfall(preq.objective, closest))


#: what a cloud plan's job time assumes of its global batch
_BATCH_NOTE = ("the global batch grows with the GPUs (the batch per GPU timed, no gradient accumulation); the time "
               "assumes the job's tokens reach the same loss at any batch, which past the critical batch size they "
               "do not (McCandlish et al. 2018, arXiv:1812.06162; Merrill et al. 2025, arXiv:2505.23971)")


def _network_notes(configs: Sequence[Configuration], systems: Sequence[System], gpus: dict[str, Gpu],
                   req: RecommendRequest) -> tuple[str, ...]:
    """For the listed multi-node configurations of systems whose network data/systems.yaml does not
    publish, the network they are timed on (as estimate assumes it, and says)."""
    from gpusizer.performance.calibration import load_interconnects
    from gpusizer.performance.topology import network_for, node_topology

    data = req.perf_data
    links = data.get("interconnects") or load_interconnects()
    by_id = {s.id: s for s in systems}
    assumed: dict[tuple[str, str], list[str]] = {}
    for sid in dict.fromkeys(c.system for c in configs if c.nodes > 1 and c.system is not None):
        system = by_id[sid]
        network, _, why = network_for(system.nics, links)
        if network is None:
            topo = node_topology(gpus[system.gpu], system.gpus, 2, system=system, links=links,
                                 systems=data.get("systems"), catalog=data.get("catalog"))
            assumed.setdefault((str(why).removeprefix("the system's "), f"{topo.nics_per_node} x {topo.network}"),
                               []).append(sid)
    return tuple(f"{', '.join(ids)}: {why}, so several nodes are timed as joined by {net} per node, the defaults "
                 "for the GPU, as estimate assumes; separately rented on-demand instances are not in general "
                 "joined by such a fabric" for (why, net), ids in assumed.items())


# --------------------------------------------------------------------------


def _qualifying(rec: Any) -> list[GpuResult]:
    """GPUs that qualify at one GPU, and those excluded only because one GPU does not hold the model
    (a sharded configuration may)."""
    shardable = [r for r in rec.excluded if r.excluded_by and all(f.kind == "fit" for f in r.excluded_by)]
    return [*rec.ranked, *rec.beyond_top, *shardable]


def _layouts(n: int, gpu: Gpu, serving: ModelShape | None) -> list[tuple[int, str | None, int | None]]:
    """The ways to lay out ``n`` GPUs: (GPUs per node, strategy, tensor-parallel size; None: data
    parallel, else sharded where that does not fit), in nodes of up to eight. Serving (``serving``:
    the model served) also tries each smaller tensor-parallel replica the model allows, since more
    replicas of fewer GPUs may hold more sequences in all: one per box, or, on the baseboards of
    SXM and OAM modules, which stay whole, several a board."""
    node = min(n, NODE_GPUS)
    m = serving.transformer if serving is not None else None
    if m is None:
        return [(node, None, None)]
    data = str(tensor_parallel(1)["strategy"])
    sizes = [t for t in tp_sizes(m, node) if t > 1]
    if gpu.on_baseboard:
        return [(node, data, None), *((node, data, t) for t in sizes if t < node),
                *((node, str(tensor_parallel(t)["strategy"]), None) for t in sizes if t == node)]
    return [(node, data, None), *((t, str(tensor_parallel(t)["strategy"]), None) for t in sizes)]


def _assess(
    cand: Candidate, rules: RuleSet, req: RecommendRequest, gpn: int, nodes: int,
    reference: ModelShape | None, pool: Sequence[Gpu] | None, system: System | None = None,
    only: str | None = None, tp: int | None = None,
) -> Configuration | None:
    """One configuration through the single-GPU pipeline: strategy ``only``, else data parallel first,
    then sharded (fsdp for training, tp inside a node for inference) if the model does not fit.
    ``tp``: replicas of that tensor-parallel size share each node (data parallel over them)."""
    mode = rules.workload(req.workload).mode
    strategies = [only] if only is not None else [req.strategy] if gpn * nodes == 1 else list(dict.fromkeys(
        [req.strategy, sharding_alternative(req.strategy, mode, str(req.run_settings.get("offload", "none")))]))
    for strategy in strategies:
        one = req.model_copy(update={"gpus_per_node": gpn, "nodes": nodes, "strategy": strategy, "top": None,
                                     "system": system.id if system else None,
                                     "budget_usd": None if system else req.budget_usd,
                                     "run_settings": {**req.run_settings, **({"tp": tp} if tp else {})}})
        try:
            rec = recommend([cand], rules, one, reference=reference, pool=pool)
        except UsageError:
            continue  # a layout this strategy cannot take (tp that does not divide the heads)
        if rec.ranked:
            return _config(rec.ranked[0], gpn, nodes, strategy, system, serving=req.serving_concurrency, tp=tp,
                           train=mode == "train")
    return None


def _serving_note(req: RecommendRequest, rules: RuleSet, shape: ModelShape | None) -> str:
    """How a serving plan's throughput is counted, in words."""
    assert shape is not None
    context = input_seq_len(req, rules.workload(req.workload).speed, shape)
    held = (f"the sequences of {context:,} tokens its KV cache holds (at most vLLM's max_num_seqs: "
            f"{LARGE_GPU_LIMITS.max_num_seqs:,} on 70 GiB GPUs but the A100, else {SMALL_GPU_LIMITS.max_num_seqs})"
            if req.batch is None else f"{plural(req.batch, 'sequence')} of {context:,} tokens (the batch given)")
    return (f"each replica decodes {held}; tok/s counts every replica; replicas exchange nothing; no latency "
            "bound (the ITL under each row): to size for a latency, give the users and a target instead")


def _config(r: GpuResult, gpn: int, nodes: int, strategy: str, system: System | None,
            serving: bool = False, tp: int | None = None, train: bool = False) -> Configuration | None:
    speed = r.speed
    if speed is None or speed.throughput_per_s is None:
        return None
    total = gpn * nodes
    group = tp or Parallelism.of(strategy, gpn).tp
    replicas = total // group
    concurrency = speed.batch if serving else None
    where = f"{nodes} x {system.id}" if system else (f"{gpn} x {r.gpu_id}" if nodes == 1
                                                      else f"{nodes} nodes x {gpn} x {r.gpu_id}")
    where += f" (TP={tp})" if tp else ""
    top = r.reasons[:2]
    rented = system.price if system is not None and system.price and system.price.on_demand_usd_per_hour else None
    return Configuration(
        label=where, gpu_id=r.gpu_id, system=system.id if system else None, gpus_per_node=gpn, nodes=nodes,
        gpus_total=total, hosts=nodes, strategy=strategy, throughput_per_s=speed.throughput_per_s, unit=speed.unit,
        tokens_per_sample=speed.tokens_per_sample, scaling_efficiency=speed.scaling_efficiency,
        global_batch=speed.per_step if train else None, transport=speed.transport,
        price_total_usd=r.price.usd * total if r.price is not None and system is None else None,
        price=r.price if system is None else None,
        usd_per_hour=rented.on_demand_usd_per_hour * nodes if rented and rented.on_demand_usd_per_hour else None,
        usd_per_hour_date=rented.date if rented else None,
        score=r.score, reasons=tuple(c.message for c in top), reason_fields=tuple(c.field for c in top), advisories=tuple(a.message for a in r.advisories),
        upper_bound=speed.upper_bound,
        replicas=replicas if serving else None, concurrency=concurrency,
        tp=group if serving else None, spare_gpus=0 if serving else None,
        itl_s=concurrency * replicas / speed.throughput_per_s if concurrency else None,
    )


def _hours(cfg: Configuration, preq: PlanRequest) -> float | None:
    if preq.tokens is None and preq.samples is None:
        return None
    seconds, _, _ = training_seconds(cfg.throughput_per_s, cfg.unit, cfg.tokens_per_sample, samples=preq.samples,
                                     tokens=preq.tokens)
    return seconds / 3600


def _cloud_choice(
    system: System, gpu: Gpu, rules: RuleSet, req: RecommendRequest, preq: PlanRequest,
    reference: ModelShape | None, pool: Sequence[Gpu] | None,
) -> tuple[Configuration | None, int, Configuration | None]:
    """The node count of ``system`` that meets the objective best, how many counts were tried,
    and, when none meets it, the count that comes nearest (:data:`_MISS_ORDER`)."""
    cand = Candidate(gpu=gpu, label=system.id, capacity_bytes=gpu.memory_bytes)
    per_hour = system.price.on_demand_usd_per_hour if system.price else None
    assert per_hour is not None
    chosen: Configuration | None = None
    misses: list[Configuration] = []
    tried = 0
    nodes = 1

    def assess(nodes: int) -> Configuration | None:
        cfg = _assess(cand, rules, req, system.gpus, nodes, reference, pool, system)
        if cfg is None:
            return None
        hours = _hours(cfg, preq)
        return cfg.model_copy(update={"hours": hours, "cost_usd": hours * per_hour * nodes if hours is not None
                                      else None})

    # single-GPU instances are not cluster building blocks: one node each
    while nodes <= (MAX_NODES if system.gpus > 1 else 1):
        if preq.budget_per_hour_usd is not None and per_hour * nodes > preq.budget_per_hour_usd:
            if nodes == 1:  # not even one node within the hourly budget: the one node is the nearest miss
                misses += [c for c in (assess(1),) if c is not None]
            break
        tried += 1
        cfg = assess(nodes)
        if cfg is not None:
            hours, cost = cfg.hours, cfg.cost_usd
            if preq.objective == "deadline":
                assert preq.deadline_hours is not None
                if hours is not None and hours <= preq.deadline_hours:
                    return cfg, tried, None
                misses.append(cfg)
            elif preq.objective == "max-cost":
                assert preq.max_cost_usd is not None
                if cost is not None and cost <= preq.max_cost_usd and (
                        chosen is None or (chosen.hours or math.inf) > (hours or math.inf)):
                    chosen = cfg
                misses.append(cfg)
            else:
                chosen = cfg
        nodes *= 2
    nearest = None if chosen is not None or not misses else min(misses, key=_MISS_ORDER[preq.objective])
    return chosen, tried, nearest


#: How the configurations that miss an objective are ordered, nearest first: a deadline by the
#: job's time, a cost cap by the job's cost, an hourly budget by the price an hour, a purchase
#: budget by the price.
_MISS_ORDER: dict[str, Callable[[Configuration], tuple[float, ...]]] = {
    "deadline": lambda c: (c.hours if c.hours is not None else math.inf, c.cost_usd or math.inf),
    "max-cost": lambda c: (c.cost_usd if c.cost_usd is not None else math.inf, c.hours or math.inf),
    "budget-per-hour": lambda c: (c.usd_per_hour if c.usd_per_hour is not None else math.inf, -c.throughput_per_s),
    "budget": lambda c: (c.price_total_usd if c.price_total_usd is not None else math.inf, -c.throughput_per_s),
}


def _cheapest_purchase(
    candidates: Sequence[Candidate], by_id: dict[str, Candidate], rules: RuleSet, single: RecommendRequest,
    reference: ModelShape | None, pool: Sequence[Gpu] | None,
) -> Configuration | None:
    """The nearest miss of a purchase budget that buys nothing: the cheapest priced GPU that
    qualifies but for the budget, assessed without the budget as the fewest the plan would buy (one;
    a board of eight for SXM; a node of eight where fewer do not hold the model)."""
    free = single.model_copy(update={"budget_usd": None})
    base = recommend(candidates, rules, free, reference=reference, pool=pool)
    priced = sorted((r for r in _qualifying(base) if r.price is not None),
                    key=lambda r: (r.price.usd if r.price is not None else math.inf, r.gpu_id))
    for res in priced:
        price = res.price
        assert price is not None
        # one (an SXM board of eight), else a node of eight sharded, where one does not hold the model
        for count in dict.fromkeys((NODE_GPUS if by_id[res.gpu_id].gpu.on_baseboard else 1, NODE_GPUS)):
            cfg = _assess(by_id[res.gpu_id], rules, free, count, 1, reference, pool)
            if cfg is not None:
                return cfg.model_copy(update={"price_total_usd": price.usd * count, "price": price})
    return None


def _shortfall(objective: str, closest: Configuration | None) -> str:
    """That no configuration meets the objective, and the nearest miss with its figure."""
    if closest is None:
        return "no configuration assessed meets the objective, and none comes near: no qualifying GPU was timed"
    gpus = plural(closest.gpus_total, "GPU")
    speed = f"{closest.throughput_per_s:,.0f} {closest.unit}"
    if objective == "deadline":
        when = format_duration(closest.hours * 3600) if closest.hours is not None else "an unknown time"
        cost = f", ${closest.cost_usd:,.0f}" if closest.cost_usd is not None else ""
        return f"no configuration meets the deadline; the fastest, {closest.label} ({gpus}), takes {when}{cost}"
    if objective == "max-cost":
        cost = f"${closest.cost_usd:,.0f}" if closest.cost_usd is not None else "an unknown cost"
        when = f" over {format_duration(closest.hours * 3600)}" if closest.hours is not None else ""
        return f"no configuration stays within the cost cap; the cheapest, {closest.label} ({gpus}), costs {cost}{when}"
    if objective == "budget-per-hour":
        rate = f"${closest.usd_per_hour:,.2f}" if closest.usd_per_hour is not None else "an unknown price"
        return (f"no configuration rents within the hourly budget; the cheapest, {closest.label} ({gpus}), "
                f"costs {rate} an hour ({speed})")
    price = f"${closest.price_total_usd:,.0f}" if closest.price_total_usd is not None else "an unknown price"
    return f"the budget buys no qualifying GPU; the cheapest, {closest.label}, costs {price} ({speed})"


def _amount(value: float) -> str:
    """A count as given (1T, 300B, 1.28M) where 3 significant figures hold it exactly, else in full."""
    short = format_count(value)
    return short if float(f"{value:.3g}") == value else f"{value:,.0f}"


def _cloud_goal(preq: PlanRequest) -> str:
    job = (f"{_amount(preq.tokens)} tokens" if preq.tokens is not None
           else f"{_amount(preq.samples)} samples" if preq.samples is not None else "the run")
    if preq.objective == "deadline":
        assert preq.deadline_hours is not None
        return f"the cheapest cloud configuration that trains {job} within {format_duration(preq.deadline_hours * 3600)}"
    if preq.objective == "max-cost":
        return f"the fastest cloud configuration that trains {job} for at most ${preq.max_cost_usd:,.0f}"
    return f"the fastest cloud configuration renting for at most ${preq.budget_per_hour_usd:,.2f} an hour"


def _numbered(configs: Sequence[Configuration], top: int) -> tuple[Configuration, ...]:
    return tuple(c.model_copy(update={"rank": i}) for i, c in enumerate(configs[:top], 1))


def _base_notes(notes: Sequence[str]) -> tuple[str, ...]:
    """The one-GPU ranking's notes a plan repeats; its upper-bound note gives way to the plan's own."""
    return tuple(n for n in notes if not n.startswith("speed is an upper bound for"))


def upper_bound_notes(configs: Sequence[Configuration]) -> tuple[str, ...]:
    """A note naming the listed configurations whose throughput is an upper bound."""
    upper = [c.label for c in configs if c.upper_bound]
    return (f"throughput is an upper bound for {', '.join(upper)}: decode on those GPUs is timed without the per-SM "
            "cap calibrated on NVIDIA GPUs, so they may place higher than they run",) if upper else ()
