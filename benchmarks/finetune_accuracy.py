"""LoRA/QLoRA memory and serving KV capacity against published measurements.

Reads tests/data/memory_refs_finetune.yaml (collected for the fine-tuning and
serving issue; nothing in it was used to shape the model) and prints, per case,
the measured figure, gpusizer's, and the relative error:

* fine-tuning cases compare the peak the source measured with the matching part
  of gpusizer's breakdown: ``tensor`` (max allocated) with the tensor peak,
  ``reserved`` and ``unstated`` with the tensor peak plus allocator slack, and
  ``device`` (nvidia-smi) with the whole total;
* serving cases compare the KV-cache tokens a vLLM start-up log printed with the
  tokens gpusizer's serving model gives the same GPU, weight format, utilization,
  context and tensor-parallel size (``ServingCapacity.kv_tokens``, vLLM's blocks /
  KV-cache groups x 16).

Fine-tuning cases are counted in three classes (:func:`finetune_class`): the headline
figures; runs under torch.compile (``compile: true`` with its source), reported but not
counted; and cases whose ``excluded`` key says why their figure cannot test the model.
Each case passes the features it ran: activation offloading (``activation_offloading``
-> ``offload="activations"``), torchtune's chunked loss, and, for QLoRA prepared by
peft's prepare_model_for_kbit_training under autocast (``base_non_quantised_dtype:
fp32``), ``precision="mixed"``.

    python benchmarks/finetune_accuracy.py [--verbose]

tests/test_finetune_accuracy.py imports ``evaluate`` and checks the targets.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from gpusizer.domain.finetune import Adapter  # noqa: E402
from gpusizer.domain.parallelism import tensor_parallel  # noqa: E402
from gpusizer.domain.run import RunConfig  # noqa: E402
from gpusizer.domain.shape import ModelShape, shape_from_model  # noqa: E402
from gpusizer.errors import GpusizerError  # noqa: E402
from gpusizer.memory.estimate import estimate_memory  # noqa: E402
from gpusizer.memory.serving import EngineLimits, serving_capacity  # noqa: E402
from gpusizer.models.zoo import load_zoo  # noqa: E402

REFS = ROOT / "tests" / "data" / "memory_refs_finetune.yaml"
GIB = 2**30


def load() -> dict[str, Any]:
    return yaml.safe_load(REFS.read_text())


def _shape(case: dict[str, Any]) -> ModelShape | None:
    if case.get("model") is None:
        return None
    try:
        return shape_from_model(load_zoo().resolve(case["model"]))
    except GpusizerError:
        return None


def finetune_config(case: dict[str, Any]) -> RunConfig:
    """The RunConfig a fine-tuning case describes."""
    settings: dict[str, Any] = {
        "mode": "train", "batch": case["batch"], "seq_len": case["seq_len"],
        "checkpointing": bool(case.get("checkpointing")), "flash_attention": case.get("flash_attention", True),
        "optimizer": case.get("optimizer") or "adamw",
    }
    precision = case.get("precision") or "bf16"
    if case["method"] in ("lora", "qlora"):
        a = case["adapter"]
        targets = tuple(a.get("targets") or ("all-linear",)) + tuple(a.get("targets_extra") or ())
        base = case.get("base") or {}
        settings["adapter"] = Adapter(
            rank=a["rank"], targets=targets, base_quantisation="nf4" if base.get("quantisation") == "nf4" else None,
            double_quant=bool(base.get("double_quant", True)), dtype=a.get("adapter_dtype") or "fp32",
        )
        settings["precision"] = "bf16" if precision in ("bf16", "mixed") else precision
        if base.get("quantisation") == "nf4" and case.get("autocast") and case.get("base_non_quantised_dtype") == "fp32":
            # peft's prepare_model_for_kbit_training under Trainer autocast: --precision mixed --qlora
            settings["precision"] = "mixed"
    else:
        settings["precision"] = "mixed" if case.get("autocast") and precision == "fp32" else precision
    if case.get("strategy") and (case.get("gpus") or 1) > 1:
        settings.update(strategy=case["strategy"], gpus=case["gpus"])
    if "ChunkedOutputLoss" in str(case.get("loss_as_published")):
        settings["loss"] = "chunked"
    if case.get("offload") not in (None, "none"):
        settings["offload"] = case["offload"]
    if case.get("activation_offloading"):
        settings["offload"] = "activations"  # torchtune's enable_activation_offloading
    return RunConfig.model_validate(settings)


def predicted(case: dict[str, Any], shape: ModelShape) -> int:
    mem = estimate_memory(shape, finetune_config(case))
    if case["measures"] == "tensor":
        return mem.tensor_peak_bytes
    if case["measures"] == "device":
        return mem.total_bytes
    return mem.tensor_peak_bytes + mem.fragmentation_bytes


def serving_tokens(case: dict[str, Any], shape: ModelShape) -> int | None:
    m = case.get("measured") or {}
    if "kv_cache_tokens" not in m or not case.get("gpu_total_memory_gib"):
        return None
    tp = case.get("tp") or 1
    weights = {"bf16": None, "fp8": "fp8", "int4": "gptq-int4-g128", "w4a16": "gptq-int4-g128", "mxfp4": "mxfp4"}
    fmt = weights.get(str(case.get("weight_format")).split()[0].lower())
    kv = "fp8" if str(case.get("kv_cache_dtype", "")).startswith("fp8") else "auto"
    cfg = RunConfig(mode="inference", kv_cache=kv, weight_format=fmt, **tensor_parallel(tp))
    capacity = int(case["gpu_total_memory_gib"] * GIB)
    # the engine's limits as the run logged them, else vLLM's defaults for its GPU
    limits = (EngineLimits(case["max_num_batched_tokens"], case["max_num_seqs"])
              if case.get("max_num_batched_tokens") and case.get("max_num_seqs") else None)
    cap = serving_capacity(shape, cfg, capacity, case.get("max_model_len") or 8192, gpu_name=str(case.get("gpu", "")),
                           utilization=case.get("gpu_memory_utilization") or 0.9, limits=limits)
    return cap.kv_tokens


def finetune_class(case: dict[str, Any]) -> str:
    """Where a fine-tuning case counts: "finetune" (the headline figures), "finetune_compile"
    (ran under torch.compile, whose Inductor partitioner chooses what to save for backward and
    which gpusizer does not model: reported, not counted) or "finetune_excluded" (the case
    records why its figure cannot test the model)."""
    if case.get("excluded"):
        return "finetune_excluded"
    if case.get("compile"):
        return "finetune_compile"
    return "finetune"


FINETUNE_CLASSES = ("finetune", "finetune_compile", "finetune_excluded")


def evaluate() -> dict[str, list[tuple[str, float, float, float]]]:
    """{class: [(id, measured, predicted, error)]} for every usable case: the fine-tuning
    classes of :func:`finetune_class` and "serving"."""
    doc = load()
    out: dict[str, list[tuple[str, float, float, float]]] = {k: [] for k in (*FINETUNE_CLASSES, "serving")}
    for case in doc.get("finetune_cases") or ():
        shape = _shape(case)
        if shape is None or case["method"] not in ("lora", "qlora"):
            continue
        got = predicted(case, shape)
        want = case["measured_peak_bytes"]
        out[finetune_class(case)].append((case["id"], want, got, got / want - 1))
    for case in doc.get("serving_cases") or ():
        shape = _shape(case)
        if shape is None or case.get("engine") != "vllm":
            continue
        try:
            got_tokens = serving_tokens(case, shape)
        except GpusizerError:
            continue
        if got_tokens is None:
            continue
        want_tokens = case["measured"]["kv_cache_tokens"]
        out["serving"].append((case["id"], want_tokens, got_tokens, got_tokens / want_tokens - 1))
    return out


def summary(rows: list[tuple[str, float, float, float]]) -> str:
    errs = [abs(r[3]) for r in rows]
    if not errs:
        return "no cases"
    return (f"{len(rows)} cases, median |error| {statistics.median(errs):.1%}, max {max(errs):.1%}, "
            f"within 12%: {sum(e <= 0.12 for e in errs) / len(errs):.0%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    res = evaluate()
    res["finetune_all"] = [r for k in FINETUNE_CLASSES for r in res[k]]
    res["finetune_with_compile"] = res["finetune"] + res["finetune_compile"]
    kinds = (("finetune", "GiB"), ("finetune_compile", "GiB"), ("finetune_excluded", "GiB"),
             ("finetune_with_compile", None), ("finetune_all", None), ("serving", "tokens"))
    for kind, unit in kinds:
        print(f"{kind}: {summary(res[kind])}")
        if unit is None:
            continue
        if args.verbose:
            for cid, want, got, err in sorted(res[kind], key=lambda r: -abs(r[3])):
                scale = GIB if unit == "GiB" else 1
                print(f"  {err:+7.1%}  measured {want / scale:10.2f}  gpusizer {got / scale:10.2f} {unit}  {cid}")


if __name__ == "__main__":
    main()
