"""This machine's GPUs read through NVML, as an API result."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from gpusizer.api._envelope import Result, load_catalog
from gpusizer.hardware.catalog import Catalog
from gpusizer.hardware.probe import HostSnapshot, ProbeReport


class ProbeResult(Result):
    command: Literal["probe"] = "probe"
    results: dict[str, Any]
    report: ProbeReport = Field(exclude=True, repr=False)


def probe(
    host: HostSnapshot | None = None, *, catalog: Catalog | None = None, catalog_files: Sequence[str] = (),
    cache_dir: Path | None = None,
) -> ProbeResult:
    """This machine's NVIDIA GPUs read through NVML (or a given host snapshot), matched
    to the catalog. Raises NoDeviceError without a driver or GPU."""
    from gpusizer.hardware.probe import match_catalog, report_results

    if host is None:
        from gpusizer.hardware.nvml import read_host

        host = read_host()
    cat = catalog or load_catalog(catalog_files, cache_dir=cache_dir)
    matched = match_catalog(host, cat)
    return ProbeResult(input={"catalog_files": list(catalog_files)}, results=report_results(matched), report=matched)
