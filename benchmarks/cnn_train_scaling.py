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

With ``--valley`` it asks what the calibration rows say about the shipped model's own CNN-training
step: on the cnn-train rows of the calibration split (benchmarks/calibrate.py; the held-out dies are
not read), it holds the class's compute efficiency at each of a range of values, fits the memory
efficiency alone (golden-section search on the mean |log error|, as calibrate.py does), and prints
the in-sample error beside the ratios it implies: RTX 5080 / 4080 and 5090 / 4090 at batch 256, and
RTX 4090 / 3090, which Lambda's rows measure (1.44). A lower compute efficiency gives the
convolutions weight against bandwidth. A second table does the same with the Tensor Core rows
(mixed, TF32) held at a compute efficiency of their own, eta_t, while the CUDA-core rows' (FP32
before Volta or with TF32 off) and the memory efficiency are fitted: a split the shipped model
does not make, which docs/accuracy.md weighs.

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


#: the compute efficiencies --valley holds the cnn-train class at
VALLEY_COMPUTE = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)


def valley() -> None:
    """In-sample error of the cnn-train class against the ratios it implies, along its compute efficiency."""
    from gpusizer.performance.calibration import Calibration
    from gpusizer.performance.peak import peak_detail

    cases, _ = calibrate.build_cases()
    calib, _ = calibrate.split(cases)
    rows = [c for c in calib if c.workload == "cnn-train"]
    split_cal = load_calibration(calibrate.SPLIT_OUT)
    catalog = load_catalog()
    lambda_4090 = next(c for c in rows if c.id == "resnet50-train-mixed-rtx-4090-1gpu-lambda")
    at_256 = calibrate.Case(ref=lambda_4090.ref, gpu=lambda_4090.gpu, shape=lambda_4090.shape,
                            cfg=lambda_4090.cfg.model_copy(update={"batch": 256}), kwargs=lambda_4090.kwargs)

    def speed(gid: str, cal: Calibration, case: calibrate.Case = at_256) -> float:
        return calibrate.predict(calibrate.Case(ref=case.ref, gpu=catalog.by_id(gid), shape=case.shape,
                                                cfg=case.cfg, kwargs=case.kwargs), cal)

    lambda_3090 = next(c for c in rows if c.id == "resnet50-train-mixed-rtx-3090-1gpu-lambda")
    print(f"{len(rows)} cnn-train rows of the calibration split (other entries of the class set aside, "
          f"roofline exponent {split_cal.roofline_exponent})")
    print(f"{'eta_c':>6} {'eta_m':>6} {'mean |log err|':>15} {'median':>7} {'5080/4080':>10} {'5090/4090':>10} "
          f"{'4090/3090':>10}")
    only_all = split_cal.model_copy(update={"efficiencies": tuple(
        e for e in split_cal.efficiencies if e.workload != "cnn-train" or e.generation == "all")})
    index = next(i for i, e in enumerate(only_all.efficiencies) if e.workload == "cnn-train")
    for eta_c in VALLEY_COMPUTE:
        def loss(x: float, eta_c: float = eta_c) -> float:
            return calibrate._loss(rows, calibrate._replace_entry(only_all, index, compute_efficiency=eta_c,
                                                                  memory_efficiency=math.exp(x)))

        lo, hi = calibrate.BOUNDS["memory_efficiency"]
        eta_m = math.exp(calibrate._bracketed(loss, math.log(lo), math.log(hi)))
        cal = calibrate._replace_entry(only_all, index, compute_efficiency=eta_c, memory_efficiency=eta_m)
        errors = [abs(calibrate.predict(c, cal) / c.measured - 1) for c in rows]
        ratio_lambda = calibrate.predict(lambda_4090, cal) / calibrate.predict(lambda_3090, cal)
        print(f"{eta_c:>6.2f} {eta_m:>6.3f} {calibrate._loss(rows, cal):>15.4f} {statistics.median(errors):>7.1%} "
              f"{speed('rtx-5080', cal) / speed('rtx-4080', cal):>10.2f} "
              f"{speed('rtx-5090', cal) / speed('rtx-4090', cal):>10.2f} {ratio_lambda:>10.2f}")
    # the same with a compute efficiency of their own for Tensor Core convolutions (mixed, TF32), the CUDA-core
    # rows (FP32 before Volta or with TF32 off) keeping theirs: a split the shipped model does not make
    print("with Tensor Core convolutions at their own compute efficiency (eta_t; CUDA-core rows keep eta_c):")
    print(f"{'eta_t':>6} {'eta_c':>6} {'eta_m':>6} {'mean |log err|':>15} {'median':>7} {'5080/4080':>10} "
          f"{'5090/4090':>10} {'4090/3090':>10}")

    def on_tensor(case: calibrate.Case) -> bool:
        return "Tensor Core" in peak_detail(case.gpu, case.kwargs["compute_precision"], tf32=case.kwargs["tf32"]).label

    tensor_rows = {c.id for c in rows if on_tensor(c)}

    def two(eta_t: float, eta_c: float, eta_m: float) -> tuple[Calibration, Calibration]:
        return (calibrate._replace_entry(only_all, index, compute_efficiency=eta_t, memory_efficiency=eta_m),
                calibrate._replace_entry(only_all, index, compute_efficiency=eta_c, memory_efficiency=eta_m))

    def split_loss(eta_t: float, eta_c: float, eta_m: float) -> float:
        tensor, cuda = two(eta_t, eta_c, eta_m)
        return statistics.fmean(abs(math.log(calibrate.predict(c, tensor if c.id in tensor_rows else cuda)
                                             / c.measured)) for c in rows)

    for eta_t in VALLEY_COMPUTE:
        eta_c, eta_m = split_cal.efficiencies[index].compute_efficiency, 0.15
        for _ in range(3):  # coordinate descent over the CUDA-core efficiency and the memory efficiency
            eta_m = math.exp(calibrate._golden(lambda x, t=eta_t, c=eta_c: split_loss(t, c, math.exp(x)),
                                               math.log(0.05), math.log(1.0), iters=16))
            eta_c = math.exp(calibrate._golden(lambda x, t=eta_t, m=eta_m: split_loss(t, math.exp(x), m),
                                               math.log(0.3), math.log(1.0), iters=16))
        tensor, cuda = two(eta_t, eta_c, eta_m)
        errors = [abs(calibrate.predict(c, tensor if c.id in tensor_rows else cuda) / c.measured - 1) for c in rows]
        ratio_lambda = calibrate.predict(lambda_4090, tensor) / calibrate.predict(lambda_3090, tensor)
        print(f"{eta_t:>6.2f} {eta_c:>6.2f} {eta_m:>6.3f} {split_loss(eta_t, eta_c, eta_m):>15.4f} "
              f"{statistics.median(errors):>7.1%} {speed('rtx-5080', tensor) / speed('rtx-4080', tensor):>10.2f} "
              f"{speed('rtx-5090', tensor) / speed('rtx-4090', tensor):>10.2f} {ratio_lambda:>10.2f}")
    print("published: 5090/4090 1.19 (timm) and 1.49 (CIFAR-10, AMP); 4090/3090 1.44 (Lambda, these rows), "
          "1.53 and 1.46 (the same two sources); no 5080/4080 pair")


def main() -> int:
    if "--valley" in sys.argv[1:]:
        valley()
        return 0
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
