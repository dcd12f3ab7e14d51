"""The domain model: each concept once.

* :mod:`.precision`: what each precision stores and computes on, and which can train;
* :mod:`.parallelism`: the parallel degrees of a run and what each shards;
* :mod:`.shape`: a model's total and trainable parameters and its typed shape;
* :mod:`.run`: :class:`RunConfig`, a run built on those.

Every engine package (memory, performance, ranking) asks these instead of
keeping tables of its own; ``tests/test_architecture.py`` guards that.
"""

from __future__ import annotations

from gpusizer._lazy import lazy_dir, lazy_names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpusizer.domain.parallelism import Parallelism as Parallelism
    from gpusizer.domain.parallelism import Sharding as Sharding
    from gpusizer.domain.parallelism import sharding as sharding
    from gpusizer.domain.precision import Precision as Precision
    from gpusizer.domain.precision import Storage as Storage
    from gpusizer.domain.precision import precision_spec as precision_spec
    from gpusizer.domain.precision import storage_precision as storage_precision
    from gpusizer.domain.run import RunConfig as RunConfig
    from gpusizer.domain.run import make_run_config as make_run_config
    from gpusizer.domain.shape import CnnShape as CnnShape
    from gpusizer.domain.shape import ModelShape as ModelShape
    from gpusizer.domain.shape import RnnShape as RnnShape
    from gpusizer.domain.shape import TransformerShape as TransformerShape

#: Which module holds each name: importing one module of the package (the model zoo needs
#: only ``shape``) does not import the others, whose precision tables are built on import.
_HOMES: dict[str, str] = {
    **dict.fromkeys(("Parallelism", "Sharding", "sharding"), "parallelism"),
    **dict.fromkeys(("Precision", "Storage", "precision_spec", "storage_precision"), "precision"),
    **dict.fromkeys(("RunConfig", "make_run_config"), "run"),
    **dict.fromkeys(("CnnShape", "ModelShape", "RnnShape", "TransformerShape"), "shape"),
}

__all__ = sorted(_HOMES)


__getattr__ = lazy_names(__name__, _HOMES)
__dir__ = lazy_dir(globals(), _HOMES)
