"""The domain model: each concept once.

* :mod:`.precision`: what each precision stores and computes on, and which can train;
* :mod:`.parallelism`: the parallel degrees of a run and what each shards;
* :mod:`.shape`: a model's total and trainable parameters and its typed shape;
* :mod:`.run`: :class:`RunConfig`, a run built on those.

Every engine package (memory, performance, ranking) asks these instead of
keeping tables of its own; ``tests/test_architecture.py`` guards that.
"""

from __future__ import annotations

from gpusizer.domain.parallelism import Parallelism, Sharding, sharding
from gpusizer.domain.precision import (
    Precision,
    Storage,
    precision_spec,
    storage_precision,
)
from gpusizer.domain.run import RunConfig, make_run_config
from gpusizer.domain.shape import CnnShape, ModelShape, RnnShape, TransformerShape

__all__ = [
    "CnnShape",
    "ModelShape",
    "Parallelism",
    "Precision",
    "RnnShape",
    "RunConfig",
    "Sharding",
    "Storage",
    "TransformerShape",
    "make_run_config",
    "precision_spec",
    "sharding",
    "storage_precision",
]
