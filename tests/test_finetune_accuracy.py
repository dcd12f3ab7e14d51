"""LoRA/QLoRA memory and serving capacity against published measurements none of
which shaped the model (tests/data/memory_refs_finetune.yaml; the comparison is in
benchmarks/finetune_accuracy.py and docs/accuracy.md).

Serving capacity meets a 5% median on vLLM's logged KV-cache tokens. Fine-tuning
memory is counted in three classes (benchmarks/finetune_accuracy.py, finetune_class):
the headline cases; runs under torch.compile, reported but not counted (Inductor
chooses what to save for backward, which gpusizer does not model); and two cases whose
figure cannot test the model, each with its reason in the data. The headline median
meets the issue's 5% target only nearly (5.4%) and its maximum does not: the sharded
Hugging Face runs (accelerate FSDP, DeepSpeed ZeRO-3) are under by 18-43%. These
bounds hold the current figures so that a change that makes them worse fails.
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
    evaluated = sum(len(results[k]) for k in bench.FINETUNE_CLASSES)
    assert evaluated == len(adapters) - sum(1 for c in adapters if c.get("model") is None)
    assert len(results["finetune"]) >= 25
    assert len(results["serving"]) >= 15


def test_cases_left_out_of_the_headline_say_why(results):
    """Compile rows cite the source that says torch.compile was on; excluded rows carry their
    reason. The torchtune May-2024 70B row cannot have run as stated: 8-way-sharded bf16 weights
    (17.2 GB) and 80 checkpointed layer inputs at 4 x 4096 tokens (21.5 GB) exceed the 26.4 GB
    it reports."""
    by_id = {c["id"]: c for c in bench.load()["finetune_cases"]}
    assert len(results["finetune_compile"]) == 8 and len(results["finetune_excluded"]) == 2
    for cid, *_ in results["finetune_compile"]:
        assert by_id[cid]["compile"] is True and "compile" in by_id[cid]["compile_source"]
    for cid, *_ in results["finetune_excluded"]:
        assert len(by_id[cid]["excluded"]) > 100
    m = bench._shape(by_id["llama-2-70b-lora-r16-qkv-b4-s4096-bf16-ckpt-fsdp8-a100-torchtune-readme"])
    assert m is not None and m.transformer is not None
    lower_bound = m.params * 2 / 8 + m.transformer.layers * 4 * 4096 * m.transformer.hidden * 2
    assert lower_bound > 26.4e9 * 1.4


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
    # 5.4% median, 80% within 12%, worst 42.8% at this commit (all 35 cases together: 9.2%
    # median and 106% worst before the offload, NF4-gather and prepare_model_for_kbit_training rules).
    # The worst, peft's FSDP QLoRA with CPU offload, was -36.3% before the sharding rules and -25.8%
    # with them while weight offload counted two 16-bit layers on top of the two gathered ones it
    # streams into (a double count, now removed), and -41.8% before the row recorded FSDP's CPU
    # offload as --offload all (gradients and the optimizer step on the CPU too)
    assert statistics.median(errors) <= 0.055
    within = sum(e <= 0.12 for e in errors) / len(errors)
    assert within >= 0.80
    assert max(errors) <= 0.43


def test_unsharded_finetune_runs_are_within_11_percent(results):
    """Every headline case on one GPU (or DDP) is within 11% (worst: fms-acceleration's Mixtral
    8x7B QLoRA, +10.9%); the misses beyond 12% are all ZeRO-3/FSDP runs through Hugging Face."""
    by_id = {c["id"]: c for c in bench.load()["finetune_cases"]}
    single = [r for r in results["finetune"] if not by_id[r[0]].get("strategy")]
    assert len(single) >= 19
    assert max(abs(r[3]) for r in single) <= 0.11
    beyond = [r[0] for r in results["finetune"] if abs(r[3]) > 0.12]
    assert beyond and all(by_id[c]["strategy"] in ("fsdp", "zero3") for c in beyond)


def test_hf_qlora_with_prepare_model_for_kbit_training_matches_fms_acceleration(results):
    """fms-acceleration's a100_80gb.csv, baseline-peft-bnb (TRL's SFTTrainer preparing the 4-bit
    model with peft's prepare_model_for_kbit_training, under bf16 autocast): Mistral-7B QLoRA peaked
    at 20,669,338,112 bytes at batch 4 and 37,002,646,016 at batch 8. Modelled as --precision mixed
    --qlora: within 2% (they were under by 25% and 28% as a pure-bf16 base)."""
    by_id = {r[0]: r for r in results["finetune"]}
    b4 = by_id["mistral-7b-qlora-r16-qkvo-b4-s4096-nf4dq-ckpt-a100-fms"]
    b8 = by_id["mistral-7b-qlora-r16-qkvo-b8-s4096-nf4dq-ckpt-a100-fms"]
    assert (b4[1], b8[1]) == (20_669_338_112, 37_002_646_016)
    assert abs(b4[3]) <= 0.02 and abs(b8[3]) <= 0.02


def test_gpt_oss_kv_tokens_match_vllms_hybrid_allocator_log(results):
    """vLLM 0.19, gpt-oss-20b (MXFP4 experts) at TP=2 on H100s: "GPU KV cache size: 2,591,776
    tokens" = 323,972 blocks / 2 KV-cache groups x 16. Within 4% once the benchmark passes the
    checkpoint's MXFP4 weights (it was 19% under, sizing them in bf16)."""
    by_id = {r[0]: r for r in results["serving"]}
    case = by_id["gpt-oss-20b-mxfp4-vllm-tp2-len8192-u090-h100-llmd"]
    assert case[1] == 2_591_776 and abs(case[3]) <= 0.04


def test_peft_lora_rows_are_within_8_percent(results):
    """The HF/peft runs the recipe models (peft's MetaMathQA benchmark, LitGPT's bf16 LoRA).

    All within 8% (worst -6.9%, LitGPT's Llama-3.2-1B). peft's Llama-3.2-3B rows were over by
    11-12% until SDPA's unrepeated KV heads and its in-place output were counted; none of the
    corrections was fitted on these rows."""
    rows = [r for r in results["finetune"] if r[0].endswith(("peft-metamathqa", "litgpt"))]
    assert len(rows) >= 7
    assert max(abs(r[3]) for r in rows) <= 0.08
