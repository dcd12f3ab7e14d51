"""How ResNet-50 mixed-precision training speed scales across GPUs: the shipped model against
simple two-rate laws, on one harness.

    python benchmarks/cnn_train_scaling.py

Question (issue 15): does ResNet-50 AMP training follow a GPU's tensor rate, its memory
bandwidth, or a blend? The answer decides how an RTX 5080 compares with an RTX 4080 (tensor
rates 1.155x, bandwidth 1.34x), a pair no published table measures side by side.

Data: the 12 single-GPU ResNet-50 AMP rows of Lambda's PyTorch benchmark in
tests/data/perf_refs.yaml (one harness: NGC container, DeepLearningExamples, synthetic data).
For each law, throughput = a * rate1^b * rate2^c is fitted by least squares on logarithms, and
its leave-one-GPU-out error is reported next to its in-sample error. The laws' ratios for GPUs
outside the data (RTX 5080 / 4080, RTX 5090 / the 4090, which is in it) are then compared with
the shipped model's, and
with the published RTX 5090 / RTX 4090 ratio of tests/data/perf_refs_unseen.yaml (timm, batch
256), which no law or constant here was fitted on.

Nothing here changes gpusizer's numbers; docs/accuracy.md quotes the output.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import calibrate  # noqa: E402  (benchmarks/calibrate.py: the same row-to-engine translation)

from gpusizer.hardware.catalog import Gpu, load_catalog  # noqa: E402
from gpusizer.models.zoo import load_zoo  # noqa: E402
from gpusizer.performance.calibration import load_calibration  # noqa: E402

HARNESS = "PyTorch NGC 22.09+ container"
#: the GPUs of the two ratios reported (the 4090 is in the data; the others are not)
OUTSIDE = ("rtx-4080", "rtx-5080", "rtx-4090", "rtx-5090")

#: each law's two rates, by name: the datasheet figures it multiplies
LAWS: dict[str, tuple[Callable[[Gpu], float], ...]] = {
    "bandwidth only": (lambda g: g.bandwidth_gb_s,),
    "tensor (fp32 accumulate) only": (lambda g: g.tensor_fp16_tflops or 0.0,),
    "tensor (fp32 acc.) + bandwidth": (lambda g: g.tensor_fp16_tflops or 0.0, lambda g: g.bandwidth_gb_s),
    "tensor (fp16 acc.) + bandwidth": (lambda g: g.tensor_fp16_fp16acc_tflops or g.tensor_fp16_tflops or 0.0,
                                       lambda g: g.bandwidth_gb_s),
    "FP32 rate + bandwidth": (lambda g: g.fp32_tflops or 0.0, lambda g: g.bandwidth_gb_s),
}


def solve(rows: list[list[float]], ys: list[float]) -> list[float]:
    """Least squares by the normal equations (at most 3 unknowns), Gauss-Jordan elimination."""
    n = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(n)] + [sum(r[i] * y for r, y in zip(rows, ys, strict=True))]
         for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def features(gpu: Gpu, law: tuple[Callable[[Gpu], float], ...]) -> list[float]:
    return [1.0, *(math.log(f(gpu)) for f in law)]


def law_at(coef: list[float], x: list[float]) -> float:
    """The law's throughput at one GPU's features."""
    return math.exp(sum(a * b for a, b in zip(coef, x, strict=True)))


def main() -> int:
    refs = yaml.safe_load((ROOT / "tests" / "data" / "perf_refs.yaml").read_text())
    refs = refs["cases"] if isinstance(refs, dict) else refs
    catalog, zoo = load_catalog(), load_zoo()
    gpus = {g.id: g for g in catalog.gpus}
    rows = [r for r in refs if r["model"] == "resnet50" and r["task"] == "train" and r["precision"] == "mixed"
            and r["gpus"] == 1 and r["framework"].startswith(HARNESS)]
    cal = load_calibration()
    shipped = {}
    for r in rows:
        shipped[r["gpu"]] = calibrate.predict(calibrate.build_case(r, catalog, zoo), cal)
    template = next(r for r in rows if r["gpu"] == "rtx-4090")
    for gid in OUTSIDE:
        shipped[gid] = calibrate.predict(calibrate.build_case({**template, "gpu": gid}, catalog, zoo), cal)
    ys = [math.log(r["throughput"]) for r in rows]
    unseen = {r["id"]: r["throughput"] for r in yaml.safe_load(
        (ROOT / "tests" / "data" / "perf_refs_unseen.yaml").read_text())["cases"]}
    published = (unseen["resnet50-train-mixed-rtx-5090-1gpu-nikolasent"]
                 / unseen["resnet50-train-mixed-rtx-4090-1gpu-nikolasent"])

    print(f"{len(rows)} ResNet-50 AMP rows, one GPU each ({HARNESS}, Lambda)")
    print(f"{'law':34} {'in-sample':>15} {'leave-one-out':>15} {'5080/4080':>10} {'5090/4090':>10}")
    fmt = "{:34} {:>6.1%} / {:>6.1%} {:>6.1%} / {:>6.1%} {:>10.2f} {:>10.2f}"
    err = [abs(shipped[r["gpu"]] / r["throughput"] - 1) for r in rows]
    print(f"{'shipped model (fitted on these too)':34} {statistics.median(err):>6.1%} / {max(err):>6.1%} {'-':>15} "
          f"{shipped['rtx-5080'] / shipped['rtx-4080']:>10.2f} {shipped['rtx-5090'] / shipped['rtx-4090']:>10.2f}")
    for name, law in LAWS.items():
        xs = [features(gpus[r["gpu"]], law) for r in rows]
        coef = solve(xs, ys)
        fitted = [abs(law_at(coef, x) / r["throughput"] - 1) for x, r in zip(xs, rows, strict=True)]
        loo = [abs(law_at(solve(xs[:i] + xs[i + 1:], ys[:i] + ys[i + 1:]), xs[i]) / r["throughput"] - 1)
               for i, r in enumerate(rows)]

        def at(gid: str, law: tuple[Callable[[Gpu], float], ...] = law, coef: list[float] = coef) -> float:
            return law_at(coef, features(gpus[gid], law))

        print(fmt.format(name, statistics.median(fitted), max(fitted), statistics.median(loo), max(loo),
                         at("rtx-5080") / at("rtx-4080"), at("rtx-5090") / at("rtx-4090")))
    print("errors: median / worst. Ratios are predictions: no row measures the RTX 4080, 5080 or 5090 here.")
    print(f"published RTX 5090 / RTX 4090 (timm, batch 256, tests/data/perf_refs_unseen.yaml): {published:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
