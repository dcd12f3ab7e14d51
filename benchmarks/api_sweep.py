"""Sizing many configurations: the Python API in one process against one CLI call each.

A sweep (a notebook, a grid search over batch, precision and GPU) pays the
command's start-up once per configuration when it shells out, and once in all
when it calls ``gpusizer.fit_model`` / ``gpusizer.estimate``. This measures both:

* the API: N configurations drawn at random (fixed seed) from the zoo's
  transformers and CNNs, batch, precision, mode and GPU, each answered with
  ``fit_model`` on one GPU and ``estimate`` on the same GPU;
* the CLI: the same kind of question as a subprocess (``gpusizer fit-model
  --json``), timed on a sample and scaled to N.

    python benchmarks/api_sweep.py [--configs 1000] [--cli-sample 20]

Results quoted in docs/accuracy.md ("Speed") come from this script.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import gpusizer  # noqa: E402
from gpusizer.errors import GpusizerError  # noqa: E402

GPUS = ("rtx-3090", "rtx-4090", "a100-sxm4-80gb", "h100-sxm5-80gb", "l40s", "v100-sxm2-16gb")
MODELS = ("resnet50", "bert-base", "gpt2", "llama-2-7b", "mistral-7b", "t5-base")
PRECISIONS = {"train": ("mixed", "bf16", "fp32"), "inference": ("fp16", "int8", "int4")}


def configs(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        mode = rng.choice(("train", "inference"))
        out.append({
            "model": rng.choice(MODELS), "gpu": rng.choice(GPUS), "mode": mode,
            "precision": rng.choice(PRECISIONS[mode]), "batch": rng.choice((1, 2, 4, 8, 16, 32)),
        })
    return out


def run_api(cases: list[dict[str, Any]]) -> tuple[float, int]:
    """Seconds for every case through fit_model and estimate, and how many fit."""
    start = time.perf_counter()
    fitted = 0
    for case in cases:
        try:
            fit = gpusizer.fit_model(**case)
            fitted += fit.fits
            if fit.fits:
                gpusizer.estimate(**case)
        except GpusizerError:
            pass  # e.g. a model the zoo lacks; counts as answered
    return time.perf_counter() - start, fitted


def cli_seconds(cases: list[dict[str, Any]]) -> list[float]:
    times = []
    for case in cases:
        cmd = [sys.executable, "-m", "gpusizer", "fit-model", "--model", case["model"], "--gpu", case["gpu"],
               "--precision", case["precision"], "--batch", str(case["batch"]), "--json",
               "--train" if case["mode"] == "train" else "--inference"]
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=1000)
    ap.add_argument("--cli-sample", type=int, default=20)
    args = ap.parse_args()
    cases = configs(args.configs)
    known = {m.id for m in gpusizer.api.load_catalog().gpus}
    missing = [g for g in GPUS if g not in known]
    if missing:
        sys.exit(f"catalog lacks {missing}")
    first = time.perf_counter()
    gpusizer.fit_model(**cases[0])  # loads the catalog, zoo and calibration once
    warm = time.perf_counter() - first
    total, fitted = run_api(cases)
    sample = cli_seconds(cases[: args.cli_sample])
    per_cli = statistics.median(sample)
    print(f"API, one process: {args.configs} configurations (fit-model + estimate where it fits; "
          f"{fitted} fit) in {total:.2f} s = {total / args.configs * 1e3:.1f} ms each "
          f"(first call, loading the data: {warm * 1e3:.0f} ms)")
    print(f"CLI, one process per configuration: median {per_cli * 1e3:.0f} ms for fit-model alone "
          f"({len(sample)} runs) -> {per_cli * args.configs:.0f} s for {args.configs}")
    print(f"speed-up of the API for the sweep: {per_cli * args.configs / total:.0f}x")


if __name__ == "__main__":
    main()
