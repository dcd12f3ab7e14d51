"""LoRA/QLoRA memory and serving capacity against published measurements none of
which shaped the model (tests/data/memory_refs_finetune.yaml; the comparison is in
benchmarks/finetune_accuracy.py and docs/accuracy.md).

Serving capacity meets a 5% median on vLLM's logged KV-cache tokens. Fine-tuning
memory does NOT yet meet the issue's targets (median <= 5%, none beyond 12%): it is
at 12.4% median, with torchtune's compiled, activation-offloading and FSDP runs
and the HF QLoRA path the largest misses. These bounds hold the current figures so
that a change that makes them worse fails, and are tightened as the model improves.
"""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("finetune_accuracy", ROOT / "benchmarks" / "finetune_accuracy.py")
assert _spec and _spec.loader
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def results():
    return bench.evaluate()


def test_every_reference_case_is_evaluated(results):
    doc = bench.load()
    adapters = [c for c in doc["finetune_cases"] if c["method"] in ("lora", "qlora")]
    assert len(results["finetune"]) == len(adapters) - sum(1 for c in adapters if c.get("model") is None)
    assert len(results["serving"]) >= 15


def test_serving_kv_tokens_match_vllm_logs(results):
    errors = [abs(r[3]) for r in results["serving"]]
    assert statistics.median(errors) <= 0.05
    # Llama-3.1-8B on one H100 at utilization 0.95: vLLM 0.19 logged 476,016 tokens
    by_id = {r[0]: r for r in results["serving"]}
    case = by_id["llama-3.1-8b-vllm-tp1-len8192-bf16-u095-h100-llmd"]
    assert case[1] == 476_016 and abs(case[3]) < 0.01


def test_tensor_parallel_serving_counts_the_communication_buffers(results):
    """vLLM's logs at TP=2 and 4 (H100): with the 1.79 GiB per GPU of NCCL and all-reduce buffers
    read from vLLM's own profile (PR #10511), Llama-3.1-8B and Llama-3.3-70B FP8 are within 2%;
    without them every such row was over by 3.6% to 4.4% (Qwen2.5-72B at TP=2 by 72%)."""
    by_id = {r[0]: r for r in results["serving"]}
    for case in ("llama-3.1-8b-vllm-tp2-len8192-bf16-u095-h100-llmd", "llama-3.1-8b-vllm-tp4-len8192-bf16-u095-h100-llmd",
                 "llama-3.3-70b-fp8-vllm-tp2-len8192-u095-h100-llmd", "llama-3.3-70b-fp8-vllm-tp4-len8192-u095-h100-llmd"):
        assert abs(by_id[case][3]) <= 0.02, case
    assert by_id["qwen2.5-72b-vllm-tp2-len8192-bf16-u095-h100-llmd"][3] <= 0.15


def test_finetune_memory_stays_within_its_current_error(results):
    errors = [abs(r[3]) for r in results["finetune"]]
    assert statistics.median(errors) <= 0.10  # 9.2% at this commit (12.1% before the exact-mode physics)
    within = sum(e <= 0.12 for e in errors) / len(errors)
    assert within >= 0.50


def test_peft_lora_rows_are_within_8_percent(results):
    """The HF/peft runs the recipe models (peft's MetaMathQA benchmark, LitGPT's bf16 LoRA).

    All within 8% (worst -6.9%, LitGPT's Llama-3.2-1B). peft's Llama-3.2-3B rows were over by
    11-12% until SDPA's unrepeated KV heads and its in-place output were counted; none of the
    corrections was fitted on these rows."""
    rows = [r for r in results["finetune"] if r[0].endswith(("peft-metamathqa", "litgpt"))]
    assert len(rows) >= 7
    assert max(abs(r[3]) for r in rows) <= 0.08
