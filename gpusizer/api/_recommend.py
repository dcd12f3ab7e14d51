"""recommend: GPUs ranked for a workload, every rule's contribution shown."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from gpusizer.api._common import (
    Result,
    _check_cluster,
    check_latency_target,
    checkpoint_run,
    load_catalog,
    perf_data,
    resolve_model,
)
from gpusizer.choices import MAX_USERS
from gpusizer.domain.precision import RULE_PRECISIONS as RULES
from gpusizer.domain.shape import ModelShape, beyond_context_note
from gpusizer.errors import DataFileError, NothingFitsError, UsageError
from gpusizer.hardware.catalog import Catalog
from gpusizer.hardware.systems import System
from gpusizer.hardware.vendors import DEFAULT_VENDOR
from gpusizer.ranking.configs import Plan, PlanRequest
from gpusizer.ranking.rules import RuleSet, Workload
from gpusizer.ranking.search import MAX_BUDGET_USD, Candidate, Recommendation, RecommendRequest

if TYPE_CHECKING:
    from gpusizer.hardware.probe import ProbeReport  # (only --local's callers build one)


class RecommendResult(Result):
    command: Literal["recommend"] = "recommend"
    results: Recommendation
    #: the rules files that were merged, for renderers
    rules_files: tuple[str, ...] = Field(default=(), exclude=True, repr=False)

    @property
    def fits(self) -> bool:
        plan = self.results.plan
        return bool(plan.configurations) if plan is not None else bool(self.results.ranked)

def recommend(
    workload: str, *, model: str | ModelShape | None = None, params: str | int | None = None,
    hf_config: str | Path | None = None, precision: str | None = None, batch: int | None = None,
    seq_len: int | None = None, image_size: int | None = None, flash_attention: bool = True,
    optimizer: str = "adamw", strategy: str = "ddp", gpus: int | None = None, nodes: int = 1,
    interconnect: str | None = None, budget: float | None = None, max_power: float | None = None,
    require: Sequence[str] = (), segments: Sequence[str] = (), top: int = 10, sort: str = "speed",
    rules: Sequence[str | Path] = (), probe: ProbeReport | None = None, catalog: Catalog | None = None,
    cache_dir: Path | None = None, vendor: str = DEFAULT_VENDOR, deadline: str | None = None,
    max_cost: float | None = None, budget_per_hour: float | None = None, tokens: str | int | None = None,
    epochs: float | None = None, dataset_size: str | int | None = None, system: str | None = None,
    why_not: Sequence[str] = (), users: int | None = None, max_itl_ms: float | None = None, **settings: Any,
) -> RecommendResult:
    """Rank GPUs for a workload (``cnn``, ``llm-train``, ``hpc``, ... or one from ``rules``),
    with every rule's contribution to each score.

    ``budget`` is total US dollars and ``max_power`` total watts for ``gpus`` x ``nodes`` GPUs; ``require``
    names hard requirements (ecc, rdma, nvlink, fp64); ``vendor`` (nvidia, amd, intel or any) picks whose
    GPUs are considered, NVIDIA only by default. A model (by name, parameter count or HF config) adds the memory fit and the performance
    model's speed. ``probe`` (``gpusizer.hardware.nvml.read_host()`` reads one) ranks its GPUs instead.

    Whole configurations (``results.plan``, ranking.plan): a ``budget`` without ``gpus`` buys as
    many of each GPU as it can, ranked by predicted throughput; a ``deadline`` (``14d``), a
    ``max_cost`` or a ``budget_per_hour`` in USD, with the job (``tokens``, or ``epochs`` of a
    ``dataset_size``), picks node counts of the priced cloud systems (data/systems.yaml); ``users``
    (and ``max_itl_ms``) size a serving deployment per GPU instead (ranking.plan.plan_serving).
    ``system`` assesses one node type: its GPU, at its count (unless ``gpus``), on its fabric and NICs.
    ``settings`` are further :class:`RunConfig` fields, as ``fit_model`` takes them (``checkpointing``,
    ``adapter``, ``offload``, ...), for the memory fit and the speed. ``why_not`` names GPUs to explain
    (``results.why_not``): exclusions or comparison; with ``users``, each one's place in the plan.

    >>> r = recommend("hpc", require=["ecc"], top=3)
    >>> len(r.results.ranked)
    3
    >>> cat = load_catalog()
    >>> all(cat.resolve(g.gpu_id).gpu.ecc for g in r.results.ranked)
    True
    """
    from gpusizer.ranking.rules import load_rules
    from gpusizer.ranking.search import recommend as _recommend

    sys_ = _system(system, probe, cache_dir)
    gpus = gpus or (sys_.gpus if sys_ else None)
    _check_cluster(gpus or 1, nodes, None, 1, None)
    ruleset = load_rules([str(p) for p in rules], cache_dir=cache_dir)
    wl = ruleset.workload(workload)
    given = any(v is not None for v in (params, model, hf_config))
    shape = resolve_model(model, params=params, hf_config=hf_config, cache_dir=cache_dir) if given else None
    if shape is None and batch is not None:
        raise UsageError("a batch needs a model (by name, parameter count or HF config)", field="batch")
    precision, settings, ckpt_note = checkpoint_run(shape, wl.mode, settings, precision=precision, precisions=RULES)
    cat = catalog or load_catalog(cache_dir=cache_dir)
    preq = _serving_request(_plan_request(budget if gpus is None and probe is None else None, deadline, max_cost,
                                          budget_per_hour, tokens, epochs, dataset_size, top), users, max_itl_ms, budget, top)
    req = RecommendRequest(
        workload=workload, precision=precision, shape=shape, batch=batch, image_size=image_size,
        seq_len=_serving_seq_len(preq, wl, shape, seq_len),
        flash_attention=flash_attention, optimizer=optimizer, strategy=_run_strategy(strategy, settings, wl.mode),
        gpus_per_node=gpus or 1, nodes=nodes, counts_chosen=preq is not None, serving_concurrency=_buys(preq),
        interconnect=interconnect, budget_usd=budget, max_power_w=max_power, require=tuple(require),
        segments=tuple(segments), top=top, sort=sort, vendor=vendor.lower(), system=sys_.id if sys_ else None,
        run_settings={k: v for k, v in settings.items() if v is not None}, perf_data=perf_data(cat, cache_dir),
        why_not=tuple({cat.resolve(name).gpu.id: name for name in reversed(list(why_not))}.items())[::-1],
    )
    candidates, notes = _candidates(probe, cat)
    notes += [n for n in (ckpt_note, shape and beyond_context_note(shape, req.seq_len)) if n] + _variants(cat, why_not)
    if sys_ is not None:
        candidates = tuple(c for c in candidates if c.gpu.id == sys_.gpu)
    reference = _reference(ruleset, wl, cache_dir) if shape is None else None
    rec = _recommend(candidates, ruleset, req, reference=reference, pool=cat.gpus)
    _check_plan_inputs(preq, gpus, nodes, budget, system)
    if preq is not None:
        rec = _with_plan(rec, _plan(preq, candidates, ruleset, req, reference, cat, cache_dir))
    inputs = {
        **_inputs(req, rec, preq, probe is not None), "batch": batch, "image_size": image_size,
        **_input_size(shape, reference, wl, req.seq_len, image_size),
        "interconnect": interconnect, "max_cost_usd": max_cost, "budget_per_hour_usd": budget_per_hour,
        "rules_files": list(ruleset.files), "catalog_files": list(cat.files),
    }
    return RecommendResult(input=inputs, results=rec, notes=(*notes, *rec.notes), rules_files=ruleset.files)


def _with_plan(rec: Recommendation, update: dict[str, Any]) -> Recommendation:
    """The ranking with its plan (``_plan``'s update), the why-not answers given by the plan: a serving
    plan's its own (plan_serving), a purchase or cloud plan's by its rows (ranking.plan.plan_why_not)."""
    from gpusizer.ranking.plan import plan_why_not

    plan: Plan = update["plan"]
    why_not = update.get("why_not", plan_why_not(rec.why_not, plan))
    return rec.model_copy(update={"plan": plan, "why_not": why_not})


def _serving_seq_len(preq: PlanRequest | None, wl: Workload, shape: ModelShape | None, given: int | None) -> int | None:
    """The context a plan that serves a decoder sizes (for users, or a purchase budget) unless one
    is given: serve's (memory.serving.serving_context: 4,096 tokens, or the model's own where
    shorter), so recommend and serve answer the same question alike; else the length given."""
    from gpusizer.memory.serving import serving_context

    if preq is None or preq.objective not in ("serve", "budget") or wl.mode != "inference" or shape is None \
            or not shape.generates:
        return given
    return serving_context(shape, given)


def _variants(cat: Catalog, names: Sequence[str]) -> list[str]:
    """The notes of why-not names that cover several variants, saying which one each answer is for (as
    estimate and serve say of the GPU they time)."""
    return list(dict.fromkeys(note for name in names if (note := cat.resolve(name).note)))


def _buys(preq: PlanRequest | None) -> bool:
    """A purchase plan: its serving runs are timed at the concurrency each replica holds (ranking.plan)."""
    return preq is not None and preq.objective == "budget"


def _run_strategy(strategy: str, settings: dict[str, Any], mode: str) -> str:
    """The strategy the run takes (domain.run.run_strategy), as fit-model and estimate size it."""
    from gpusizer.domain.run import run_strategy

    return run_strategy({**settings, "strategy": strategy, "mode": mode})


def _inputs(req: RecommendRequest, rec: Recommendation, preq: PlanRequest | None, local: bool) -> dict[str, Any]:
    """The resolved request, every run setting with the value used (as fit-model echoes them)."""
    from gpusizer.domain.run import make_run_config

    run = make_run_config(**{**req.run_settings, "mode": rec.mode}).model_dump(mode="json", include={
        "checkpointing", "adapter", "offload", "offload_to", "weight_format", "kv_cache", "loss"})
    shape = req.shape
    return {
        "workload": req.workload, "precision": rec.precision, "model": shape.name if shape else None,
        "params": shape.params if shape else None, "flash_attention": req.flash_attention,
        "optimizer": req.optimizer, "strategy": req.strategy, "gpus_per_node": req.gpus_per_node, "nodes": req.nodes,
        "budget_usd": req.budget_usd, "max_power_w": req.max_power_w, "require": list(req.require),
        "segments": list(req.segments), "vendor": req.vendor, "top": req.top, "sort": req.sort, "local": local,
        "system": req.system, **run, "why_not": [asked for _, asked in req.why_not], "objective": preq.objective if preq else None,
        "deadline_hours": preq.deadline_hours if preq else None, "tokens": preq.tokens if preq else None,
        "samples": preq.samples if preq else None, "users": preq.users if preq else None,
        "max_itl_ms": preq.max_itl_s * 1e3 if preq and preq.max_itl_s is not None else None,
    }


def _system(system: str | None, probe: ProbeReport | None, cache_dir: Path | None) -> System | None:
    if system is None:
        return None
    if probe is not None:
        raise UsageError("rank this machine's GPUs or a system, not both", field="system")
    from gpusizer.hardware.systems import load_systems

    return load_systems(cache_dir=cache_dir).resolve(system)


def _candidates(probe: ProbeReport | None, cat: Catalog) -> tuple[tuple[Candidate, ...], list[str]]:
    """This machine's GPUs (with notes) when a probe is given, else the catalog's."""
    from gpusizer.ranking.search import candidates_from_catalog, candidates_from_probe

    if probe is None:
        return candidates_from_catalog(cat.gpus), []
    candidates, local_notes = candidates_from_probe(probe)
    if not candidates:
        raise NothingFitsError("none of this machine's GPUs is in the catalog, so none can be ranked",
                               hint="add catalog entries for them (the probe can write starter entries)")
    return candidates, list(local_notes)


def _reference(ruleset: RuleSet, wl: Workload, cache_dir: Path | None) -> ModelShape | None:
    """The workload's reference model for the speed column, when no model is given."""
    from gpusizer.ranking.search import reference_shape

    if wl.speed.model is None:
        return None
    from gpusizer.models.zoo import load_zoo

    try:
        return reference_shape(wl, load_zoo(cache_dir=cache_dir))
    except UsageError as exc:
        raise DataFileError(f"{ruleset.speed_files.get(wl.name, 'rules')}: workload '{wl.name}': speed.model: "
                            f"{exc.message}", hint="name a model from the zoo") from None


def _plan(
    preq: PlanRequest, candidates: Sequence[Candidate], ruleset: RuleSet, req: RecommendRequest,
    reference: ModelShape | None, cat: Catalog, cache_dir: Path | None,
) -> dict[str, Any]:
    """The recommendation's plan; a serving plan's also explains the GPUs asked about (``why_not``)
    by the deployments it sized, not by the one-GPU ranking."""
    from gpusizer.ranking.plan import plan_cloud, plan_purchase, plan_serving

    if preq.objective == "budget":
        return {"plan": plan_purchase(candidates, ruleset, req, preq, reference=reference, pool=cat.gpus)}
    if preq.objective == "serve":
        plan, why = plan_serving(candidates, ruleset, req, preq, pool=cat.gpus)
        return {"plan": plan, "why_not": why}
    from gpusizer.hardware.systems import load_systems

    return {"plan": plan_cloud(load_systems(cache_dir=cache_dir).systems, cat.gpus, ruleset, req, preq,
                               reference=reference, pool=cat.gpus)}


def _check_plan_inputs(preq: PlanRequest | None, gpus: int | None, nodes: int, budget: float | None,
                       system: str | None = None) -> None:
    """The optimizer chooses the counts: a count or a second objective given with it would be ignored."""
    if preq is None:
        return
    if preq.objective == "budget" and nodes > 1:
        raise UsageError("a purchase budget chooses the counts, nodes included", hint="drop the nodes, or give the "
                         "GPUs per node too to rank single GPUs at that size", field="nodes")
    if preq.objective == "serve":
        if system is not None:
            raise UsageError("sizing a deployment for users chooses the GPU type and count, not a system's",
                             hint="drop the system, or size its GPU with serve", field="system")
        if gpus is not None or nodes > 1:
            raise UsageError("sizing a deployment for users chooses the GPU count", hint="drop the GPU and node counts, "
                             "or the users", field="gpus_per_node" if gpus is not None else "nodes")
        return
    if preq.objective != "budget":
        given = [n for n, v in (("gpus_per_node", gpus), ("budget_usd", budget)) if v is not None]
        if given or nodes > 1:
            raise UsageError(f"a cloud objective chooses each system's node count; {(given or ['nodes'])[0]} "
                             "would be ignored", hint="drop it, or leave out the cloud objective",
                             field=(given or ["nodes"])[0])


def _serving_request(
    preq: PlanRequest | None, users: int | None, max_itl_ms: float | None, budget: float | None, top: int,
) -> PlanRequest | None:
    """The serving objective when users are given (a purchase budget then caps its price)."""
    max_itl_s = check_latency_target(max_itl_ms, users)
    if users is None:
        return preq
    if preq is not None and preq.objective != "budget":
        raise UsageError(f"give the users or a cloud objective ({preq.objective}), not both", field="users")
    if not 1 <= users <= MAX_USERS:
        raise UsageError(f"the users must be a whole number from 1 to {MAX_USERS:,}", field="users")
    return PlanRequest(objective="serve", users=users, budget_usd=budget, top=top, max_itl_s=max_itl_s)


def _plan_request(
    budget: float | None, deadline: str | None, max_cost: float | None, budget_per_hour: float | None,
    tokens: str | int | None, epochs: float | None, dataset_size: str | int | None, top: int,
) -> PlanRequest | None:
    """The optimizer's objective, if the request asks for one: a cloud deadline, cost cap or hourly
    budget (with the job), else a purchase budget with no GPU count given."""
    from gpusizer.api._estimate import _training_amount
    from gpusizer.units import parse_duration_hours

    cloud = [n for n, v in (("deadline", deadline), ("max_cost", max_cost), ("budget_per_hour", budget_per_hour))
             if v is not None]
    if len(cloud) > 1:
        raise UsageError(f"give one cloud objective, not {' and '.join(cloud)}", field=cloud[1])
    if not cloud:
        if tokens is not None or epochs is not None:
            raise UsageError("a job (tokens or epochs) is for a cloud objective: a deadline, a cost cap or an "
                             "hourly budget", field="tokens" if tokens is not None else "epochs")
        return PlanRequest(objective="budget", budget_usd=budget, top=top) if budget is not None else None
    amount = _training_amount(epochs, dataset_size, tokens)
    hours = None
    if deadline is not None:
        try:
            hours = parse_duration_hours(deadline, what="deadline")
        except ValueError as exc:
            raise UsageError(str(exc), field="deadline") from None
    for value, field in ((max_cost, "max_cost"), (budget_per_hour, "budget_per_hour")):
        if value is not None and not (0 < value <= MAX_BUDGET_USD):
            raise UsageError(f"{field.replace('_', ' ')} must be a positive number of US dollars up to "
                             f"{MAX_BUDGET_USD:,.0f}", field=field)
    if amount.tokens is None and amount.samples is None and budget_per_hour is None:
        raise UsageError(f"a {cloud[0].replace('_', ' ')} needs the job: a token count, or epochs of a dataset size",
                         hint="e.g. 1T tokens", field="tokens")
    objective = {"deadline": "deadline", "max_cost": "max-cost", "budget_per_hour": "budget-per-hour"}[cloud[0]]
    return PlanRequest(objective=objective, deadline_hours=hours, max_cost_usd=max_cost,
                       budget_per_hour_usd=budget_per_hour, tokens=amount.tokens, samples=amount.samples, top=top)


def _input_size(shape: ModelShape | None, reference: ModelShape | None, wl: Workload, seq_len: int | None,
                image_size: int | None) -> dict[str, int | None]:
    """The input size the speed column times: the model's, else the workload's reference model's
    at the workload's size; nothing without either."""
    from gpusizer.domain.run import RunConfig
    from gpusizer.memory.estimate import resolved_input

    if shape is not None:
        return resolved_input(shape, RunConfig(seq_len=seq_len, image_size=image_size))
    if reference is not None:
        return resolved_input(reference, RunConfig(seq_len=seq_len or wl.speed.seq_len,
                                                   image_size=image_size or wl.speed.image_size))
    return {}
