"""The catalog and compare, as API results (systems, the model zoo and the probe have
their own modules, so each browsing command loads only the data models it shows)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from gpusizer.api._envelope import _FROZEN, Result, load_catalog
from gpusizer.errors import UsageError
from gpusizer.hardware.browse import CompareRow, Comparison
from gpusizer.hardware.catalog import Catalog, Gpu


class GpuListResult(Result):
    command: Literal["catalog list"] = "catalog list"
    results: tuple[Gpu, ...]
    #: how many GPUs the catalog holds (the list is after filtering)
    catalog_size: int = Field(exclude=True, repr=False)

class GpuResult(Result):
    command: Literal["catalog show"] = "catalog show"
    results: Gpu
    #: the formula of each derivation rule the entry's ``derived`` names (rule id -> formula)
    formulas: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)

class CompareResults(BaseModel):
    model_config = _FROZEN

    gpus: tuple[str, ...]
    rows: tuple[CompareRow, ...]
    facts: tuple[CompareFact, ...]

class CompareFact(BaseModel):
    model_config = _FROZEN

    field: str
    label: str
    values: tuple[str | int | bool | None, ...]

class CompareResult(Result):
    command: Literal["compare"] = "compare"
    results: CompareResults
    comparison: Comparison = Field(exclude=True, repr=False)

def list_gpus(
    *, segment: str | None = None, arch: str | None = None, min_memory_gib: float | None = None,
    ecc: bool | None = None, rdma: bool | None = None, nvlink: bool | None = None, sort: str | None = None,
    descending: bool = True, vendor: str | None = None, catalog: Catalog | None = None,
    cache_dir: Path | None = None,
) -> GpuListResult:
    """Catalog GPUs, filtered (segment, architecture, vendor, memory, ECC available, RDMA,
    NVLink) and sorted by a numeric field; unknown values sort last. Each entry's ``derived``
    maps the values a derivation rule gave to the rule's id (``data/derivations.yaml``).

    >>> [g.id for g in list_gpus(arch="hopper", segment="datacenter", sort="memory_gib").results][:2]
    ['gh200-144gb', 'h200-sxm-141gb']
    """
    import difflib

    from gpusizer.hardware.browse import CatalogFilter, filter_gpus
    from gpusizer.hardware.catalog import ARCH_ORDER, OTHER_ARCHITECTURES, SEGMENTS
    from gpusizer.hardware.vendors import VENDORS

    archs = (*ARCH_ORDER, *OTHER_ARCHITECTURES)
    if segment is not None and segment.lower() not in SEGMENTS:
        raise UsageError(f"{segment!r} is not one of {', '.join(SEGMENTS)}", field="segment")
    if vendor is not None and vendor.lower() not in VENDORS:
        raise UsageError(f"{vendor!r} is not one of {', '.join(VENDORS)}", field="vendor")
    if arch is not None and arch.lower() not in archs:
        close = difflib.get_close_matches(arch.lower(), archs, n=2)
        raise UsageError(f"{arch!r} is not an architecture in the catalog", field="arch",
                         hint=f"did you mean {', '.join(close)}?" if close else f"one of: {', '.join(archs)}")
    cat = catalog or load_catalog(cache_dir=cache_dir)
    spec = CatalogFilter(segment=segment.lower() if segment else None, architecture=arch.lower() if arch else None,
                         vendor=vendor.lower() if vendor else None, min_memory_gib=min_memory_gib, ecc=ecc, rdma=rdma,
                         nvlink=nvlink, sort=sort, descending=descending)
    gpus = filter_gpus(cat.gpus, spec)
    inputs = {**spec.model_dump(mode="json"), "catalog_files": list(cat.files)}
    return GpuListResult(input=inputs, results=tuple(gpus), catalog_size=len(cat.gpus))

def show_gpu(name: str, *, catalog: Catalog | None = None, cache_dir: Path | None = None) -> GpuResult:
    """One catalog entry, with its sources, by id, alias or name (``"RTX 3090"``); its
    ``derived`` maps each value a derivation rule gave to the rule's id."""
    from gpusizer.hardware.catalog import load_derivations

    cat = catalog or load_catalog(cache_dir=cache_dir)
    res = cat.resolve(name)
    rules = load_derivations(cache_dir)
    formulas = {rule_id: rule.formula for rule_id in res.gpu.derived_by.values()
                if (rule := rules.by_id(rule_id)) is not None}
    offers = cloud_offer_note(res.gpu, cache_dir)
    notes = tuple(n for n in (res.note, offers) if n)
    return GpuResult(input={"gpu": name, "resolved_id": res.gpu.id}, results=res.gpu, notes=notes, formulas=formulas)

def cloud_offer_note(gpu: Gpu, cache_dir: Path | None = None) -> str | None:
    """Where to rent ``gpu``: how many cloud systems carry it, the cheapest on-demand price per
    GPU-hour among them, and the command that lists them; None where none does."""
    from gpusizer.hardware.systems import load_systems

    offers = [s for s in load_systems(cache_dir=cache_dir).with_gpu(gpu.id) if s.kind == "cloud"]
    if not offers:
        return None
    priced = [s for s in offers if s.usd_per_gpu_hour is not None]
    cheapest = min(priced, key=lambda s: s.usd_per_gpu_hour or 0.0, default=None)
    price = "" if cheapest is None or cheapest.price is None else (
        f"; cheapest on demand ${cheapest.usd_per_gpu_hour:,.2f} per GPU-hour ({cheapest.name}, "
        f"{cheapest.price.date})")
    return f"cloud offers: {len(offers)} instance types carry this GPU{price}: gpusizer systems list --gpu {gpu.id}"


def compare(
    names: Sequence[str], *, workload: str | None = None, model: str | None = None, catalog: Catalog | None = None,
    cache_dir: Path | None = None,
) -> CompareResult:
    """GPUs side by side, with ratios against the first.

    With a ``workload`` (its reference model, mode, precision and batch, as recommend's speed
    column uses them) or a ``model`` (trained as ``estimate`` would by default), the first row is
    each GPU's throughput from the performance model, next to the datasheet ratios.

    >>> compare(["GTX 1080 Ti", "P100 SXM2"]).results.gpus
    ('gtx-1080-ti', 'p100-sxm2-16gb')
    """
    from gpusizer.hardware.browse import compare as _compare

    cat = catalog or load_catalog(cache_dir=cache_dir)
    result = _compare(cat.resolve_many(list(names)))
    notes = list(result.notes)
    if workload is not None or model is not None:
        speed, speed_notes = _modelled_speed(result.gpus, workload, model, cat, cache_dir)
        result = result.model_copy(update={"rows": (speed, *result.rows)})
        notes += speed_notes
    results = CompareResults(
        gpus=tuple(g.id for g in result.gpus), rows=result.rows,
        facts=tuple(CompareFact(field=f, label=label, values=v) for f, label, v in result.facts),
    )
    inputs = {"gpus": list(names), "workload": workload, "model": model}
    return CompareResult(input=inputs, results=results, notes=tuple(notes), comparison=result)

def _modelled_speed(
    gpus: Sequence[Gpu], workload: str | None, model: str | None, cat: Catalog, cache_dir: Path | None,
) -> tuple[CompareRow, list[str]]:
    """Each GPU's modelled throughput as a compare row: the run ``estimate`` times (the workload's
    settings, or a model trained by default), at the given batch or, where it does not fit, the
    largest that does. A GPU the run does not fit on, or cannot run, shows null and a note why."""
    from gpusizer.api._estimate import estimate
    from gpusizer.errors import GpusizerError
    from gpusizer.hardware.browse import ratios

    settings: dict[str, Any] = {}
    if workload is not None:
        from gpusizer.ranking.rules import load_rules

        wl = load_rules(cache_dir=cache_dir).workload(workload)
        if model is None and wl.speed.model is None:
            raise UsageError(f"workload {workload!r} has no model in the performance model", field="model",
                             hint="give a model to time")
        settings = {"mode": wl.mode, "precision": wl.precision}
        if model is None:
            settings.update(batch=wl.speed.batch, seq_len=wl.speed.seq_len, image_size=wl.speed.image_size)
        model = model or wl.speed.model
    from gpusizer.api._common import resolve_model

    shape = resolve_model(model, cache_dir=cache_dir)  # (an unknown model is the user's error, exit 2)
    values: list[float | None] = []
    upper: list[bool] = []
    notes: list[str] = []
    unit, what = "", shape.name
    for g in gpus:
        try:
            est = estimate(shape, gpu=g.id, catalog=cat, cache_dir=cache_dir,
                           **{k: v for k, v in settings.items() if v is not None})
            if not est.fits and settings.get("batch"):  # the workload's batch: less where it does not fit
                est = estimate(shape, gpu=g.id, catalog=cat, cache_dir=cache_dir,
                               **{k: v for k, v in settings.items() if v is not None and k != "batch"})
                notes.append(f"{g.id}: timed at batch {est.input['batch']}, the largest that fits (the workload's "
                             f"{settings['batch']} does not)")
        except GpusizerError as exc:
            values.append(None)
            upper.append(False)
            notes.append(f"{g.id}: not timed: {exc.message}")
            continue
        timed = est.results.estimate
        values.append(timed.throughput_per_s if timed is not None else None)
        upper.append(timed is not None and timed.upper_bound)
        if timed is not None and timed.upper_bound:
            notes.append(f"{g.id}: the modelled speed is an upper bound: {timed.upper_bound_reason}, so matrix-vector "
                         f"decode is timed without the per-SM cap calibrated on NVIDIA GPUs (error band "
                         f"{timed.error_band:.0%}); its ratio to the others may be too high")
        if timed is None:
            notes.append(f"{g.id}: not timed: {est.results.reason}")
        else:
            unit = timed.throughput_unit
            what = f"{est.input['model']} {'training' if est.input['mode'] == 'train' else 'inference'}, " \
                   f"{est.input['precision']}"
    label = f"modelled {unit or 'speed'} ({what})"
    notes.append(f"modelled speed: {what}, from the performance model ('estimate' on each GPU; docs/accuracy.md "
                 "gives its error)")
    return CompareRow(field="modelled_throughput_per_s", label=label, values=tuple(values),
                      ratios=ratios(values), upper_bounds=tuple(upper) if any(upper) else ()), notes
