"""gpusizer: which GPU to use, and how much of it.

The public API answers the tool's questions in one process, with the results
the command line prints under ``--json``::

    import gpusizer

    fit = gpusizer.fit_model("llama-2-7b", gpu="RTX 4090", mode="inference")
    est = gpusizer.estimate("resnet50", gpu="A100 80GB SXM4", batch=256)
    rec = gpusizer.recommend("cnn", model="resnet50")
    cat = gpusizer.load_catalog()

See ``docs/api.md``. The names load lazily, so ``import gpusizer`` stays cheap
for the command line.
"""

from __future__ import annotations

# typing is not imported at run time: the command line installs its Ctrl-C handler
# after this package loads, and every import before it widens the window in which
# an interrupt still shows Python's traceback (mypy treats TYPE_CHECKING as True)
TYPE_CHECKING = False

__version__ = "0.1.0"

if TYPE_CHECKING:
    from gpusizer.api import estimate as estimate
    from gpusizer.api import fit_model as fit_model
    from gpusizer.api import load_catalog as load_catalog
    from gpusizer.api import recommend as recommend
    from gpusizer.api import resolve_model as resolve_model
    from gpusizer.api import serve as serve
    from gpusizer.domain import ModelShape as ModelShape
    from gpusizer.domain import Parallelism as Parallelism
    from gpusizer.domain import Precision as Precision
    from gpusizer.domain import RunConfig as RunConfig

_API = {
    "fit_model": "gpusizer.api",
    "estimate": "gpusizer.api",
    "recommend": "gpusizer.api",
    "serve": "gpusizer.api",
    "load_catalog": "gpusizer.api",
    "resolve_model": "gpusizer.api",
    "RunConfig": "gpusizer.domain",
    "ModelShape": "gpusizer.domain",
    "Precision": "gpusizer.domain",
    "Parallelism": "gpusizer.domain",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> object:
    import importlib

    if name in ("api", "domain"):
        return importlib.import_module(f"gpusizer.{name}")
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'gpusizer' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
