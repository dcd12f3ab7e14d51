"""recommend: GPUs ranked for a workload, every rule's contribution shown."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field

from gpusizer.api._common import Result, _check_cluster, load_catalog, resolve_model
from gpusizer.domain.shape import ModelShape
from gpusizer.errors import DataFileError, NothingFitsError, UsageError
from gpusizer.hardware.catalog import Catalog
from gpusizer.hardware.probe import ProbeReport
from gpusizer.ranking.search import Recommendation


class RecommendResult(Result):
    command: Literal["recommend"] = "recommend"
    results: Recommendation
    #: the rules files that were merged, for renderers
    rules_files: tuple[str, ...] = Field(default=(), exclude=True, repr=False)

    @property
    def fits(self) -> bool:
        return bool(self.results.ranked)

def recommend(
    workload: str, *, model: str | ModelShape | None = None, params: str | int | None = None,
    hf_config: str | Path | None = None, precision: str | None = None, batch: int | None = None,
    seq_len: int | None = None, image_size: int | None = None, flash_attention: bool = True,
    optimizer: str = "adamw", strategy: str = "ddp", gpus: int = 1, nodes: int = 1, interconnect: str | None = None,
    budget: float | None = None, max_power: float | None = None, require: Sequence[str] = (),
    segments: Sequence[str] = (), top: int = 10, sort: str = "score", rules: Sequence[str | Path] = (),
    probe: ProbeReport | None = None, catalog: Catalog | None = None, cache_dir: Path | None = None,
    vendor: str = "nvidia",
) -> RecommendResult:
    """Rank GPUs for a workload (``cnn``, ``llm-train``, ``hpc``, ... or one from ``rules``),
    with every rule's contribution to each score.

    ``budget`` is total US dollars and ``max_power`` total watts for ``gpus`` x
    ``nodes`` GPUs; ``require`` names hard requirements (ecc, rdma, nvlink,
    fp64); ``vendor`` (nvidia, amd, intel or any) picks whose GPUs are considered, NVIDIA only
    by default. A model (by name, parameter count or HF config) adds the memory fit
    and the performance model's speed. ``probe`` ranks that machine's GPUs
    (``gpusizer.hardware.nvml.read_host()`` reads one) instead of the catalog.

    >>> r = recommend("hpc", require=["ecc"], top=3)
    >>> len(r.results.ranked)
    3
    >>> cat = load_catalog()
    >>> all(cat.resolve(g.gpu_id).gpu.ecc for g in r.results.ranked)
    True
    """
    from gpusizer.ranking.rules import load_rules
    from gpusizer.ranking.search import (
        RecommendRequest,
        candidates_from_catalog,
        candidates_from_probe,
        reference_shape,
    )
    from gpusizer.ranking.search import recommend as _recommend

    _check_cluster(gpus, nodes, None, 1, None)
    ruleset = load_rules([str(p) for p in rules], cache_dir=cache_dir)
    wl = ruleset.workload(workload)
    shape = None
    if any(v is not None for v in (params, model, hf_config)):
        shape = resolve_model(model, params=params, hf_config=hf_config, cache_dir=cache_dir)
    elif batch is not None:
        raise UsageError("a batch needs a model (by name, parameter count or HF config)", field="batch")
    req = RecommendRequest(
        workload=workload, precision=precision, shape=shape, batch=batch, seq_len=seq_len, image_size=image_size,
        flash_attention=flash_attention, optimizer=optimizer, strategy=strategy, gpus_per_node=gpus, nodes=nodes,
        interconnect=interconnect, budget_usd=budget, max_power_w=max_power, require=tuple(require),
        segments=tuple(segments), top=top, sort=sort, vendor=vendor.lower(),
    )
    notes: list[str] = []
    cat = catalog or load_catalog(cache_dir=cache_dir)
    if probe is not None:
        candidates, local_notes = candidates_from_probe(probe)
        notes += list(local_notes)
        if not candidates:
            raise NothingFitsError("none of this machine's GPUs is in the catalog, so none can be ranked",
                                   hint="add catalog entries for them (the probe can write starter entries)")
    else:
        candidates = candidates_from_catalog(cat.gpus)
    reference = None
    if shape is None and wl.speed.model is not None:
        from gpusizer.models.zoo import load_zoo

        try:
            reference = reference_shape(wl, load_zoo(cache_dir=cache_dir))
        except UsageError as exc:
            raise DataFileError(f"{ruleset.speed_files.get(wl.name, 'rules')}: workload '{wl.name}': speed.model: "
                                f"{exc.message}",
                                hint="name a model from the zoo") from None
    rec = _recommend(candidates, ruleset, req, reference=reference, pool=cat.gpus)
    inputs = {
        "workload": workload, "precision": rec.precision, "model": shape.name if shape else None,
        "params": shape.params if shape else None, "batch": batch, "seq_len": seq_len, "image_size": image_size,
        "flash_attention": flash_attention, "optimizer": optimizer, "strategy": strategy, "gpus_per_node": gpus,
        "nodes": nodes, "interconnect": interconnect, "budget_usd": budget, "max_power_w": max_power,
        "require": list(req.require), "segments": list(req.segments), "vendor": req.vendor, "top": top,
        "sort": sort, "local": probe is not None, "rules_files": list(ruleset.files), "catalog_files": list(cat.files),
    }
    return RecommendResult(input=inputs, results=rec, notes=(*notes, *rec.notes), rules_files=ruleset.files)
