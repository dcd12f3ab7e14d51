"""GPU systems (on-prem nodes and cloud instances), as API results."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from gpusizer.api._envelope import Result, load_catalog
from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Catalog
from gpusizer.hardware.systems import PROVIDERS, System


class SystemListResult(Result):
    command: Literal["systems list"] = "systems list"
    results: tuple[System, ...]


class SystemResult(Result):
    command: Literal["systems show"] = "systems show"
    results: System


def list_systems(
    *, gpu: str | None = None, provider: str | None = None, kind: str | None = None, catalog: Catalog | None = None,
    cache_dir: Path | None = None,
) -> SystemListResult:
    """GPU systems (data/systems.yaml): on-prem node types and cloud instances, filtered by GPU
    (any name the catalog resolves), provider or kind, cheapest on-demand GPU-hour first where priced.

    >>> [s.instance_type for s in list_systems(gpu="H100 SXM", provider="aws").results][:1]
    ['p5.48xlarge']
    """
    from gpusizer.hardware.systems import load_systems

    if provider is not None and provider.lower() not in PROVIDERS:
        raise UsageError(f"{provider!r} is not one of {', '.join(PROVIDERS)}", field="provider")
    if kind is not None and kind.lower() not in ("cloud", "on-prem"):
        raise UsageError(f"{kind!r} is not cloud or on-prem", field="kind")
    gpu_id = (catalog or load_catalog(cache_dir=cache_dir)).resolve(gpu).gpu.id if gpu is not None else None
    systems = [s for s in load_systems(cache_dir=cache_dir).systems
               if (gpu_id is None or s.gpu == gpu_id) and (provider is None or s.provider == provider.lower())
               and (kind is None or s.kind == kind.lower())]
    systems.sort(key=lambda s: (s.usd_per_gpu_hour is None, s.usd_per_gpu_hour or 0.0, s.id))
    return SystemListResult(input={"gpu": gpu, "resolved_gpu": gpu_id, "provider": provider, "kind": kind},
                            results=tuple(systems))


def show_system(name: str, *, cache_dir: Path | None = None) -> SystemResult:
    """One system by id, name or instance type (``"p5.48xlarge"``), with its sources."""
    from gpusizer.hardware.systems import load_systems

    system = load_systems(cache_dir=cache_dir).resolve(name)
    return SystemResult(input={"system": name, "resolved_id": system.id}, results=system)
