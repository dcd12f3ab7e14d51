"""The public Python API: the four questions as functions that return typed results.

Every function here returns what the matching command prints under ``--json``:
``result.document()`` is that JSON document, key for key, and the command line
is a thin layer that calls these functions and renders their results. A
notebook or a sweep calls them in one process instead of paying start-up for
each configuration (``benchmarks/api_sweep.py`` measures the difference).

>>> import gpusizer
>>> fit = gpusizer.fit_model("resnet50", gpu="V100 16GB", batch=64)
>>> fit.results.fits_on
('v100-sxm2-16gb',)
>>> round(fit.results.breakdown.total_bytes / 2**30, 1)
3.6
>>> est = gpusizer.estimate("resnet50", gpu="A100 80GB SXM4", batch=256)
>>> est.results.throughput_unit
'images/s'
>>> est.document()["results"]["throughput_per_s"] == est.results.throughput_per_s
True

Errors are :class:`gpusizer.errors.GpusizerError` subclasses in domain words,
each with the exit code the CLI uses.
"""

from __future__ import annotations

from gpusizer._lazy import lazy_dir, lazy_names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpusizer.api._browse import CompareResult as CompareResult
    from gpusizer.api._browse import GpuListResult as GpuListResult
    from gpusizer.api._browse import GpuResult as GpuResult
    from gpusizer.api._browse import compare as compare
    from gpusizer.api._browse import list_gpus as list_gpus
    from gpusizer.api._browse import show_gpu as show_gpu
    from gpusizer.api._common import resolve_model as resolve_model
    from gpusizer.api._envelope import SCHEMA_VERSION as SCHEMA_VERSION
    from gpusizer.api._envelope import Result as Result
    from gpusizer.api._envelope import load_catalog as load_catalog
    from gpusizer.api._estimate import EstimateResult as EstimateResult
    from gpusizer.api._estimate import EstimateResults as EstimateResults
    from gpusizer.api._estimate import estimate as estimate
    from gpusizer.api._fit import FitModelResult as FitModelResult
    from gpusizer.api._fit import FitResults as FitResults
    from gpusizer.api._fit import fit_model as fit_model
    from gpusizer.api._models import ModelsResult as ModelsResult
    from gpusizer.api._models import models as models
    from gpusizer.api._probe import ProbeResult as ProbeResult
    from gpusizer.api._probe import probe as probe
    from gpusizer.api._recommend import RecommendResult as RecommendResult
    from gpusizer.api._recommend import recommend as recommend
    from gpusizer.api._serve import ServeResult as ServeResult
    from gpusizer.api._serve import ServeResults as ServeResults
    from gpusizer.api._serve import serve as serve
    from gpusizer.api._systems import SystemListResult as SystemListResult
    from gpusizer.api._systems import SystemResult as SystemResult
    from gpusizer.api._systems import list_systems as list_systems
    from gpusizer.api._systems import show_system as show_system

#: Which module holds each public name: a command imports only what it uses, so
#: ``catalog list`` never loads the performance model.
_HOMES: dict[str, str] = {
    **dict.fromkeys(("SCHEMA_VERSION", "Result", "load_catalog"), "_envelope"),
    "resolve_model": "_common",
    **dict.fromkeys(("CompareResult", "GpuListResult", "GpuResult", "compare", "list_gpus", "show_gpu"), "_browse"),
    **dict.fromkeys(("SystemListResult", "SystemResult", "list_systems", "show_system"), "_systems"),
    **dict.fromkeys(("ModelsResult", "models"), "_models"),
    **dict.fromkeys(("ProbeResult", "probe"), "_probe"),
    **dict.fromkeys(("EstimateResult", "EstimateResults", "estimate"), "_estimate"),
    **dict.fromkeys(("FitModelResult", "FitResults", "fit_model"), "_fit"),
    **dict.fromkeys(("RecommendResult", "recommend"), "_recommend"),
    **dict.fromkeys(("ServeResult", "ServeResults", "serve"), "_serve"),
}

__all__ = sorted(_HOMES)


__getattr__ = lazy_names(__name__, _HOMES)
__dir__ = lazy_dir(globals(), _HOMES)

