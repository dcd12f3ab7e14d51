"""The performance model against published measurements it was never fitted on.

    python benchmarks/unseen_check.py

Reads tests/data/perf_refs_unseen.yaml (rows benchmarks/calibrate.py never sees), predicts each
with the shipped constants (data/calibration.yaml) through the same code as `gpusizer estimate`,
and prints each row's error, the median and the worst, and the ratios between GPUs of one source
(same model, task and precision). Rows marked ``ratio_only`` (their batch or input size is not
stated) are predicted at batch 256 and 224 px and enter the ratios only, never the errors.
"""

from __future__ import annotations

import itertools
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import calibrate  # noqa: E402  (benchmarks/calibrate.py: the same row-to-engine translation)

from gpusizer.performance.calibration import load_calibration  # noqa: E402

#: what a ratio_only row is predicted at (its source does not say)
RATIO_ONLY_BATCH, RATIO_ONLY_IMAGE = 256, 224


def source_of(ref: dict[str, Any]) -> str:
    """The measurement's source (one author, one harness): the part of the id after its GPU count or
    batch (``...-1gpu-nikolasent``, ``...-bs1024-timm-pt291``)."""
    found = re.search(r"-(?:\d+gpu|bs\d+)-(.+)$", str(ref["id"]))
    return found.group(1) if found else str(ref["id"])


def main() -> int:
    refs = yaml.safe_load((ROOT / "tests" / "data" / "perf_refs_unseen.yaml").read_text())["cases"]
    catalog, zoo = calibrate.load_catalog(), calibrate.load_zoo()
    cal = load_calibration()
    errors: dict[str, list[float]] = {}
    predicted: dict[str, float] = {}
    for ref in refs:
        row = ref
        if ref.get("ratio_only"):
            row = {**ref, "batch": ref["batch"] or RATIO_ONLY_BATCH, "image_size": ref["image_size"] or RATIO_ONLY_IMAGE}
        case = calibrate.build_case(row, catalog, zoo)
        pred = predicted[ref["id"]] = calibrate.predict(case, cal)
        if ref.get("ratio_only"):
            print(f"{ref['id']:66s} measured {ref['throughput']:9.1f}  predicted {pred:9.1f}  (ratios only)")
            continue
        err = pred / ref["throughput"] - 1
        errors.setdefault(ref["task"], []).append(abs(err))
        print(f"{ref['id']:66s} measured {ref['throughput']:9.1f}  predicted {pred:9.1f}  {err:+7.1%}")
    for task, errs in errors.items():
        print(f"{task}: {len(errs)} rows, median |error| {statistics.median(errs):.1%}, worst {max(errs):.1%}")
    print("ratios between GPUs of one source (measured / predicted):")
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for ref in refs:
        groups.setdefault((source_of(ref), ref["model"], ref["task"], ref["precision"]), []).append(ref)
    for (src, model, task, prec), rows in groups.items():
        for a, b in itertools.combinations(sorted(rows, key=lambda r: str(r["gpu"]), reverse=True), 2):
            measured = a["throughput"] / b["throughput"]
            model_ratio = predicted[a["id"]] / predicted[b["id"]]
            print(f"  {src:11s} {model:12s} {task:9s} {prec:5s} {a['gpu']:>28s} / {b['gpu']:<16s} "
                  f"{measured:5.2f} / {model_ratio:5.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
