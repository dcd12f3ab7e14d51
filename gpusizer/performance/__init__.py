"""Performance: throughput, step time, scaling and time-to-train.

``work`` turns a run into FLOPs and bytes, ``peak`` picks the rate a precision
runs at, ``comm`` times collectives over the node's links, ``estimate`` combines
them with the calibrated efficiencies of ``calibration``, and ``planning`` picks
batches and builds scaling curves and training times on top.
"""

from __future__ import annotations

from gpusizer.performance.calibration import (
    Calibration,
    Interconnects,
    load_calibration,
    load_interconnects,
)
from gpusizer.performance.estimate import PerfEstimate, estimate_performance, sm_count
from gpusizer.performance.peak import peak_tflops
from gpusizer.performance.planning import (
    ScalingPoint,
    TrainingTime,
    default_batch,
    scaling_counts,
    scaling_curve,
    time_to_train,
)

__all__ = [
    "Calibration",
    "Interconnects",
    "PerfEstimate",
    "ScalingPoint",
    "TrainingTime",
    "default_batch",
    "estimate_performance",
    "load_calibration",
    "load_interconnects",
    "peak_tflops",
    "scaling_counts",
    "scaling_curve",
    "sm_count",
    "time_to_train",
]
