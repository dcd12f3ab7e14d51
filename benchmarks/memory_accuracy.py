"""Memory estimates against every reference case in tests/data/memory_refs*.yaml.

    python benchmarks/memory_accuracy.py

Prints each case's measured and estimated bytes and the relative error, then the
median and worst errors that tests/test_memory.py holds to 10% and 25%.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_memory import _cases, estimate_case  # noqa: E402


def main() -> None:
    rows = []
    for param in _cases():
        case = param.values[0]
        est, ref = estimate_case(case)
        rows.append((case["id"], case["measures"], ref, est, (est - ref) / ref))
    print(f"{'case':60s} {'measures':8s} {'measured GiB':>12s} {'estimate GiB':>12s} {'error':>8s}")
    for cid, measures, ref, est, err in rows:
        print(f"{cid[:60]:60s} {measures:8s} {ref / 2**30:12.2f} {est / 2**30:12.2f} {err:+8.1%}")
    errs = [abs(r[4]) for r in rows]
    print(f"\n{len(rows)} cases: median |error| {statistics.median(errs):.1%}, worst {max(errs):.1%}")


if __name__ == "__main__":
    main()
