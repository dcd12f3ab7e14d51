"""Golden files for the human output: the tables and charts people read.

Each case runs one command through CliRunner (NO_COLOR, COLUMNS=160, as set in
conftest) and compares stdout with ``tests/golden/<name>.txt``. A change to the
catalog, the rules, the calibration or a renderer shows up here as a diff to
review. After reviewing, rewrite the files with:

    GPUSIZER_UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"

CASES = {
    "catalog-list-datacenter": ["catalog", "list", "--segment", "datacenter", "--sort", "fp64_tflops"],
    "catalog-show-v100": ["catalog", "show", "v100"],
    "compare-1080ti-p100": ["compare", "1080ti", "p100"],
    "fit-model-resnet50": ["fit-model", "--model", "resnet50", "--batch", "64", "--gpu", "v100", "--gpu", "a100"],
    "fit-model-llama-7b-inference": ["fit-model", "--model", "llama-2-7b", "--inference", "--precision", "fp16", "--gpu", "rtx-4090",
                                     "--gpu", "l4"],
    "recommend-cnn": ["recommend", "--workload", "cnn", "--top", "3"],
    "estimate-resnet50-cluster": ["estimate", "--model", "resnet50", "--gpu", "v100-sxm2-16gb", "--gpus", "8",
                                  "--nodes", "4", "--interconnect", "ib-edr", "--precision", "mixed"],
    "models": ["models"],
    # at 80 and 120 columns (WIDTHS below): columns are left out, bars shrink, numbers stay whole
    "recommend-cnn-budget-80": ["recommend", "--workload", "cnn", "--budget", "10000", "--top", "3"],
    "recommend-nothing-fits-80": ["recommend", "--workload", "llm-inference", "--model", "llama-3.1-405b"],
    "recommend-explain-120": ["recommend", "--workload", "hpc", "--top", "2", "--explain"],
    "catalog-list-datacenter-80": ["catalog", "list", "--segment", "datacenter"],
    "compare-80": ["compare", "h100", "a100", "l40s", "rtx-4090"],
    "compare-speed-80": ["compare", "rtx-5080", "rtx-4080", "rtx-4090", "rtx-5090", "--workload", "cnn"],
    "fit-model-lora-80": ["fit-model", "--model", "llama-3.1-8b", "--lora", "16", "--gpu", "rtx-4090", "--gpu", "a100"],
    "fit-model-tp-120": ["fit-model", "--model", "llama-3.1-70b", "--inference", "--gpus", "4", "--strategy", "tp",
                         "--gpu", "h100", "--gpu", "l40s"],
    "estimate-resnet50-cluster-80": ["estimate", "--model", "resnet50", "--gpu", "v100-sxm2-16gb", "--gpus", "8",
                                     "--nodes", "4", "--interconnect", "ib-edr", "--precision", "mixed"],
    "models-80": ["models"],
}
#: cases laid out for a narrower terminal than conftest's
WIDTHS = {name: int(name.rsplit("-", 1)[1]) for name in CASES if name.endswith(("-80", "-120"))}


@pytest.mark.parametrize("name", sorted(CASES))
def test_human_output_matches_golden(cli, name):
    result = cli(*CASES[name], env={"COLUMNS": str(WIDTHS[name])} if name in WIDTHS else None)
    assert result.exit_code == (4 if "nothing-fits" in name else 0), result.stderr
    assert "\x1b[" not in result.stdout  # NO_COLOR: plain text
    if name in WIDTHS:
        assert max(len(line.rstrip()) for line in result.stdout.splitlines()) <= WIDTHS[name]
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("GPUSIZER_UPDATE_GOLDEN"):
        path.write_text(result.stdout, encoding="utf-8")
    assert path.exists(), f"no golden file {path.name}: run with GPUSIZER_UPDATE_GOLDEN=1 and review it"
    assert result.stdout == path.read_text(encoding="utf-8"), (
        f"{name}: output differs from {path.name}; review the change, then rewrite with GPUSIZER_UPDATE_GOLDEN=1"
    )
