"""Fit gpusizer's performance constants on published measurements, and report
calibration and held-out errors.

    python benchmarks/calibrate.py            # fit, print the report
    python benchmarks/calibrate.py --write    # ... and rewrite data/calibration.yaml and
                                              # tests/data/calibration_split.yaml
    python benchmarks/calibrate.py --json     # the report as JSON

References: tests/data/perf_refs.yaml (every row cites its source). The engine is
gpusizer.performance.estimate_performance; this script only turns each reference
row into the engine's inputs, splits the rows, fits the constants on one part and
measures the error on the other.

The split (deterministic, documented in docs/method.md):
  Whole GPUs are held out, so held-out error measures how the model carries to
  GPUs it has not seen. A GPU is held out, with all of its rows, when the SHA-256
  digest of its catalog id, read as an integer, is divisible by 3. The rule looks
  at the id alone, so adding rows or GPUs never moves a GPU from one split to the
  other. Everything else is the calibration split.

  The constants are fitted twice. The fit on the calibration split alone
  (tests/data/calibration_split.yaml) is what every reported error is measured
  with, so the held-out error is the error on GPUs the fit never saw. The
  constants gpusizer ships (data/calibration.yaml) are then refitted, by the same
  procedure, on all usable rows, so no measurement is wasted; the held-out error
  of the split fit is their error band.

The constants (data/calibration.yaml):
  For each workload class, an "all" entry (compute efficiency, memory efficiency,
  for transformer training the efficiency of fused attention, and for decode a
  per-layer overhead and the bandwidth per SM of small-batch matrix-vector
  kernels) fitted on all of the class's rows in the fit; and a
  generation-specific entry where the class has at least MIN_ROWS calibration
  rows on at least MIN_GPUS GPUs of that generation. One data-parallel overhead
  is fitted on the speed-up over one GPU of the multi-GPU training rows whose
  suite also measured the same workload (model, task, sequence length, image
  size), GPU and precision on one GPU. The fit
  minimises the mean absolute log error, by coordinate descent over each
  constant's logarithm (a coarse scan of its bounds, then golden-section search
  around the best point). Generation entries that lower their rows' error by
  less than PRUNE_GAIN are then pruned, and while more than MAX_CONSTANTS
  constants remain, so are those whose constants lower the total loss least;
  the entries left are refitted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpusizer.domain.run import RunConfig  # noqa: E402
from gpusizer.domain.shape import ModelShape, shape_from_model  # noqa: E402
from gpusizer.hardware.catalog import Gpu, load_catalog  # noqa: E402
from gpusizer.models.zoo import load_zoo  # noqa: E402
from gpusizer.performance.calibration import (  # noqa: E402
    PHYSICAL_BOUNDS,
    Calibration,
    Efficiency,
    load_calibration,
)
from gpusizer.performance.estimate import estimate_performance  # noqa: E402
from gpusizer.performance.work import workload_class  # noqa: E402

REFS = ROOT / "tests" / "data" / "perf_refs.yaml"
OUT = ROOT / "data" / "calibration.yaml"
#: the constants fitted on the calibration split alone: what the held-out errors are measured with
SPLIT_OUT = ROOT / "tests" / "data" / "calibration_split.yaml"

#: generation groups: architectures that share constants
GENERATIONS: dict[str, tuple[str, ...]] = {
    "pre-tensor": ("maxwell", "pascal"),
    "volta-turing": ("volta", "turing"),
    "ampere-ada": ("ampere", "ada"),
    "hopper-blackwell": ("hopper", "blackwell"),
}
MIN_ROWS = 4
MIN_GPUS = 2
#: a generation entry must lower the mean |log error| of its rows by this much to stay
PRUNE_GAIN = 0.02
#: the most constants the model may carry; past it, the entries whose constants lower the fit's
#: total loss least are pruned too
MAX_CONSTANTS = 20
#: coordinate-descent sweeps run again on the entries pruning kept
REFIT_SWEEPS = 2
#: what a generation entry fits; the rest comes from its class's "all" entry
GEN_FITTED: tuple[str, ...] = ("compute_efficiency",)
#: a GPU is held out, with every other card on its die, when int(sha256(die)) % HOLD_OUT_MODULUS == 0.
#: 2 holds out GH100, AD104 and AD103 (85 of 414 usable rows, 21%), the size nearest the third of the rows
#: the former split by catalog id held out; 3 would hold out 28 rows (7%). Chosen by size, before any error.
HOLD_OUT_MODULUS = 2

#: rows left out entirely, with the reason
EXCLUDED: dict[str, str] = {
    "llama-2-70b-serve-fp4-b200-sxm-180gb-1gpu-mlperf-v4.1": (
        "precision fp4 is outside the model's precisions (fp64..int4): no FP4 memory precision exists and this "
        "is the only FP4 measurement, so nothing could be checked against it"
    ),
    "llama-2-70b-pretrain-fp8-h100-sxm5-80gb-8x8gpu-nemo2407": (
        "NeMo trains Llama-2-70B with tensor and pipeline parallelism together; the model has no pipeline "
        "parallelism (pipeline bubbles, interleaving), so this row cannot be represented"
    ),
    "mobilenetv2-train-tf32-a100-sxm4-40gb-8gpu-flagperf": (
        "doubtful by its own notes (a full convergence run whose time includes data loading and evaluation); "
        "also depthwise-separable CNNs move far more activation bytes per FLOP than the ResNet-50 ratio the "
        "model uses while the zoo's CNN activation figures are placeholders"
    ),
}
SERVE_REASON = (
    "MLPerf offline LLM serving mixes prefill and decode over OpenOrca prompts whose input length the "
    "reference does not give, so the work per output token is not determined"
)
BERT_MLPERF_REASON = (
    "MLPerf BERT packs variable-length SQuAD sequences, so the tokens per sample (below 384) are not given"
)


def exclusion_reason(ref: dict[str, Any]) -> str | None:
    if ref["id"] in EXCLUDED:
        return EXCLUDED[ref["id"]]
    if "-serve-" in ref["id"] and "mlperf" in ref["id"]:
        return SERVE_REASON
    if ref["model"] == "bert-large" and "mlperf" in ref["id"]:
        return BERT_MLPERF_REASON
    return None


# --------------------------------------------------------------------------
# turning a reference row into engine inputs

#: NICs per node of the systems in the multi-node rows (hardware specs quoted in each row's notes)
NICS_PER_NODE = {"ib-edr": 4, "ib-hdr": 8, "ib-ndr": 8}
#: DGX-2H rows: 8 EDR NICs per node (row notes)
DGX2_NICS = 8


def _decode_context(ref: dict[str, Any]) -> int:
    """Mean context attended while generating, from what each source states."""
    rid, seq = ref["id"], ref["seq_len"]
    if "trtllm" in rid and seq == 128 + 2048:
        return 128 + 2048 // 2  # TensorRT-LLM tables: ISL 128, OSL 2048; mean context over generation
    if seq is None:
        return 128  # MLC, ExLlama: context not stated; a short prompt assumed
    if ref.get("tokens_of_one_sequence"):
        # llama-bench with -ub N: N tokens of ONE sequence per forward pass. The
        # weights are read once per pass, as in batch-N decode, but the KV cache
        # is one sequence's: N sequences of 1/N of the context read the same bytes.
        return max(1, seq // 2 // ref["batch"])
    return max(1, seq // 2)  # generating seq tokens from an (almost) empty context


def _cuda_graphs(ref: dict[str, Any]) -> bool:
    value = ref.get("cuda_graphs")
    if not isinstance(value, bool):
        raise SystemExit(f"{REFS}: case {ref['id']!r}: decode rows must say cuda_graphs: true or false "
                         "(did the engine replay each step as one CUDA graph?)")
    return value


@dataclass
class Case:
    ref: dict[str, Any]
    gpu: Gpu
    shape: ModelShape
    cfg: RunConfig
    kwargs: dict[str, Any] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return self.ref["id"]

    @property
    def measured(self) -> float:
        return float(self.ref["throughput"])

    @property
    def workload(self) -> str:
        return workload_class(self.shape, self.cfg, self.kwargs.get("phase"))

    @property
    def multi_gpu_train(self) -> bool:
        return self.cfg.mode == "train" and self.cfg.gpus * self.kwargs.get("nodes", 1) > 1


def build_case(ref: dict[str, Any], catalog: Any, zoo: Any) -> Case:
    gpu = catalog.by_id(ref["gpu"])
    model = zoo.resolve(ref["model"])
    shape = shape_from_model(model)
    task = ref["task"]
    mode = "train" if task == "train" else "inference"
    phase = {"inference-decode": "decode", "inference-prefill": "prefill"}.get(task)
    prec = ref["precision"]
    mem_prec = {"tf32": "fp32", "fp8": "mixed" if mode == "train" else "int8"}.get(prec, prec)
    assumptions: list[str] = []
    batch = ref["batch"]
    if batch is None:
        batch = 64 if mode == "train" else 256
        assumptions.append(f"batch not stated; {batch} assumed")
    gpus, nodes = ref["gpus"], ref["nodes"]
    strategy = "ddp"
    rid = ref["id"]
    if "trtllm" in rid and "-tp" in rid:
        tp = int(rid.split("-tp")[1].split("-")[0])
        if tp > 1:
            strategy = "tp"
    if "nemo2407" in rid:
        if "70b" in rid:
            strategy = "tp"  # NeMo runs 70B with tensor (and pipeline) parallelism inside a node
        else:
            strategy = "zero1"  # Megatron distributed optimizer
    if "megatron-bridge" in rid and "h100" in rid:
        strategy = "fsdp"
    # micro-batches per optimizer step, where the row gives them: NeMo's global
    # batch of 128 sequences over data-parallel ranks at micro-batch 1; the
    # Megatron-Bridge rows state GA 8 (B200) and GA 16 (H100)
    grad_accumulation = 1
    if "nemo2407" in rid:
        grad_accumulation = max(1, 128 // (gpus * nodes * batch))
    if "megatron-bridge" in rid:
        grad_accumulation = 8 if "b200" in rid else 16
    # rows that state their run settings (strategy, micro-batches per step) use them
    strategy = ref.get("strategy") or strategy
    grad_accumulation = ref.get("grad_accumulation") or grad_accumulation
    optimizer = "momentum" if model.kind == "cnn" else "adam"
    seq = ref["seq_len"]
    if phase == "decode":
        seq = _decode_context(ref)
    head = "lm"
    if "squad" in rid or (model.kind == "encoder" and mode == "inference"):
        head = "classifier"
    cfg = RunConfig(
        mode=mode, precision=mem_prec, optimizer=optimizer if mode == "train" else "adamw", batch=batch,
        seq_len=seq, image_size=ref["image_size"], gpus=gpus, strategy=strategy, head=head,
        flash_attention=model.kind == "decoder", checkpointing=bool(ref.get("checkpointing")),
    )
    nics = None
    ic = ref["interconnect"]
    if nodes > 1:
        nics = DGX2_NICS if gpus == 16 else NICS_PER_NODE.get(ic)
    kwargs = {
        "nodes": nodes, "interconnect": ic, "tf32": True, "compute_precision": prec, "phase": phase,
        "nics_per_node": nics, "grad_accumulation": grad_accumulation,
        # decode rows say whether the engine replayed each step as a CUDA graph
        "cuda_graphs": _cuda_graphs(ref) if phase == "decode" else True,
        "attention_kernels": ref.get("attention_kernels") or "current",
    }
    return Case(ref=ref, gpu=gpu, shape=shape, cfg=cfg, kwargs=kwargs, assumptions=tuple(assumptions))


def load_refs() -> list[dict[str, Any]]:
    import yaml

    return yaml.safe_load(REFS.read_text(encoding="utf-8"))["cases"]


def build_cases() -> tuple[list[Case], list[dict[str, str]]]:
    catalog, zoo = load_catalog(), load_zoo()
    cases, excluded = [], []
    for ref in load_refs():
        reason = exclusion_reason(ref)
        if reason:
            excluded.append({"id": ref["id"], "reason": reason})
            continue
        cases.append(build_case(ref, catalog, zoo))
    return cases, excluded


def is_held_out(gpu: Gpu) -> bool:
    """The split depends on the die alone (the catalog id where the die is unknown), so every card on
    one die falls on the same side (an A100 80GB is not held out while its 40GB twin calibrates), and
    adding rows or GPUs never moves a die from one side to the other."""
    key = gpu.die or gpu.id
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % HOLD_OUT_MODULUS == 0


def held_out_gpus(cases: list[Case]) -> tuple[str, ...]:
    return tuple(sorted({c.gpu.id for c in cases if is_held_out(c.gpu)}))


def held_out_dies(cases: list[Case]) -> tuple[str, ...]:
    return tuple(sorted({c.gpu.die or c.gpu.id for c in cases if is_held_out(c.gpu)}))


def split(cases: list[Case]) -> tuple[list[Case], list[Case]]:
    held = set(held_out_gpus(cases))
    return [c for c in cases if c.gpu.id not in held], [c for c in cases if c.gpu.id in held]


# --------------------------------------------------------------------------
# evaluation


def predict(case: Case, cal: Calibration) -> float:
    est = estimate_performance(case.gpu, case.shape, case.cfg, calibration=cal, **case.kwargs)
    return est.throughput_per_s


def rel_error(pred: float, measured: float) -> float:
    return pred / measured - 1.0


def spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2.0
            i = j + 1
        return r

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den if den else float("nan")


def suite(ref: dict[str, Any]) -> str:
    """The benchmark suite a row comes from: rows of one suite share their software stack."""
    return ref["framework"]


def rank_groups(cases: list[Case], preds: dict[str, float], min_gpus: int = 4,
                by_suite: bool = True) -> list[dict[str, Any]]:
    """Spearman correlation per model, task and precision across GPUs (single-GPU rows;
    several rows for one GPU are combined by their geometric mean). With ``by_suite``
    only rows of one benchmark suite (same software) are ranked together."""
    groups: dict[tuple[str, str, str, str], dict[str, list[tuple[float, float]]]] = {}
    for c in cases:
        if c.cfg.gpus * c.kwargs["nodes"] != 1:
            continue
        key = (c.ref["model"], c.ref["task"], c.ref["precision"], suite(c.ref) if by_suite else "all suites")
        groups.setdefault(key, {}).setdefault(c.gpu.id, []).append((c.measured, preds[c.id]))
    out = []
    for (model, task, prec, src), per_gpu in sorted(groups.items()):
        if len(per_gpu) < min_gpus:
            continue
        gpus = sorted(per_gpu)
        meas = [math.exp(statistics.fmean(math.log(m) for m, _ in per_gpu[g])) for g in gpus]
        pred = [math.exp(statistics.fmean(math.log(p) for _, p in per_gpu[g])) for g in gpus]
        out.append({"model": model, "task": task, "precision": prec, "suite": src, "gpus": gpus,
                    "spearman": spearman(meas, pred)})
    return out


def evaluate(cases: list[Case], cal: Calibration) -> dict[str, Any]:
    preds = {c.id: predict(c, cal) for c in cases}
    errs = {c.id: rel_error(preds[c.id], c.measured) for c in cases}
    abs_errs = [abs(e) for e in errs.values()]
    return {
        "cases": len(cases),
        "gpus": sorted({c.gpu.id for c in cases}),
        "median_abs_rel_error": statistics.median(abs_errs) if abs_errs else float("nan"),
        "mean_abs_rel_error": statistics.fmean(abs_errs) if abs_errs else float("nan"),
        "within_20pct": sum(e <= 0.2 for e in abs_errs) / len(abs_errs) if abs_errs else float("nan"),
        "predictions": preds,
        "errors": errs,
        "rank_correlations": rank_groups(cases, preds),
        "rank_correlations_pooled": rank_groups(cases, preds, by_suite=False),
        "by_workload": {w: {"cases": len(e), "median_abs_rel_error": statistics.median(e)} for w, e in sorted(
            _by_workload(cases, errs).items())},
    }


def _by_workload(cases: list[Case], errs: dict[str, float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for c in cases:
        out.setdefault(c.workload, []).append(abs(errs[c.id]))
    return out


# --------------------------------------------------------------------------
# fitting

BOUNDS = {
    "compute_efficiency": (0.02, 1.0),
    "memory_efficiency": (0.05, 1.0),
    "attention_efficiency": (0.02, 1.0),
    "layer_overhead_us": (0.0, 2000.0),
    "graph_layer_overhead_us": (0.0, 2000.0),
    "sm_bandwidth_gb_s": (1.0, 100.0),
    "data_parallel_overhead": (0.0, 0.5),
    "roofline_exponent": (1.0, 8.0),
}
#: the physical bounds (calibration.PHYSICAL_BOUNDS) are enforced where the model's traffic is counted
#: operation by operation (zoo CNNs, data/cnn_ops.json). A fit that presses on a bound signals a missing term.
CLASS_BOUNDS: dict[str, dict[str, tuple[float, float]]] = {cls: dict(PHYSICAL_BOUNDS) for cls in ("cnn-infer",)}


def bounds(workload: str, name: str) -> tuple[float, float]:
    return CLASS_BOUNDS.get(workload, {}).get(name, BOUNDS[name])


#: starting grid for the efficiencies (log-spaced from 0.05 to 1)
GRID = tuple(round(0.05 * (20 ** (k / 11)), 4) for k in range(12))
#: classes whose per-layer overhead is fitted (single-stream decode is launch-bound)
OVERHEAD_CLASSES = ("llm-decode",)
#: classes whose per-SM matrix-vector bandwidth is fitted (small-batch decode)
SM_BANDWIDTH_CLASSES = ("llm-decode",)
#: classes whose fused-attention efficiency is fitted (where rows ran LLM Foundry's 2023 kernels)
ATTENTION_CLASSES = ("transformer-train",)


def _loss(cases: list[Case], cal: Calibration) -> float:
    if not cases:
        return 0.0
    return statistics.fmean(abs(math.log(predict(c, cal) / c.measured)) for c in cases)


def _golden(f: Any, lo: float, hi: float, iters: int = 28) -> float:
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def _bracketed(f: Any, lo: float, hi: float, points: int = 17) -> float:
    """Minimise f on [lo, hi]: a coarse scan first (the loss over one constant can have
    flat stretches and several valleys, which a golden-section search alone can miss),
    then a golden-section search between the best point's neighbours."""
    xs = [lo + (hi - lo) * k / (points - 1) for k in range(points)]
    k = min(range(points), key=lambda j: f(xs[j]))
    return _golden(f, xs[max(0, k - 1)], xs[min(points - 1, k + 1)])


def _replace_entry(cal: Calibration, index: int, **update: Any) -> Calibration:
    entries = list(cal.efficiencies)
    entries[index] = entries[index].model_copy(update=update)
    return cal.model_copy(update={"efficiencies": tuple(entries)})


def _cases_for(cal: Calibration, index: int, cases: list[Case]) -> list[Case]:
    entry = cal.efficiencies[index]
    return [c for c in cases if cal.lookup(c.workload, c.gpu.architecture) is entry]


def _old_kernels(c: Case) -> bool:
    return c.cfg.flash_attention and c.kwargs.get("attention_kernels") == "llm-foundry-2023"


def _structure(calib: list[Case]) -> list[Efficiency]:
    """Which entries exist: an 'all' entry per class with data, plus generation entries with enough data."""
    entries: list[Efficiency] = []
    by_class: dict[str, list[Case]] = {}
    for c in calib:
        by_class.setdefault(c.workload, []).append(c)
    gen_of = {a: g for g, archs in GENERATIONS.items() for a in archs}
    for wl in sorted(by_class):
        rows = by_class[wl]
        overhead = 50.0 if wl in OVERHEAD_CLASSES else 0.0
        sm_bw = 20.0 if wl in SM_BANDWIDTH_CLASSES else 0.0
        attention = wl in ATTENTION_CLASSES and any(_old_kernels(c) for c in rows)
        fitted = (("compute_efficiency", "memory_efficiency")
                  + (("attention_efficiency",) if attention else ())
                  + (("layer_overhead_us", "graph_layer_overhead_us") if overhead else ())
                  + (("sm_bandwidth_gb_s",) if sm_bw else ()))
        entries.append(Efficiency(workload=wl, generation="all", compute_efficiency=0.4, memory_efficiency=0.6,
                                  attention_efficiency=0.3 if attention else 0.0,
                                  layer_overhead_us=overhead, graph_layer_overhead_us=overhead / 2,
                                  sm_bandwidth_gb_s=sm_bw,
                                  fitted_on=tuple(sorted(c.id for c in rows)), fitted=fitted,
                                  covers=_covers(rows, gen_of)))
        for gen in GENERATIONS:
            sub = [c for c in rows if gen_of[c.gpu.architecture] == gen]
            if len(sub) == len(rows):
                continue  # the class has no other generation: the "all" entry is this one
            if len(sub) >= MIN_ROWS and len({c.gpu.id for c in sub}) >= MIN_GPUS:
                entries.append(Efficiency(workload=wl, generation=gen, compute_efficiency=0.4,
                                          memory_efficiency=0.6, layer_overhead_us=overhead,
                                          graph_layer_overhead_us=overhead / 2,
                                          fitted_on=tuple(sorted(c.id for c in sub)),
                                          covers=_covers(sub, gen_of),
                                          fitted=GEN_FITTED + (("attention_efficiency",)
                                                               if attention and any(_old_kernels(c) for c in sub) else ())))
    return entries


def _covers(rows: list[Case], gen_of: dict[str, str]) -> tuple[str, ...]:
    """The GPU classes (``generation/segment``) the rows were measured on: an entry applies to
    those classes only (Efficiency.covers)."""
    return tuple(sorted({f"{gen_of[c.gpu.architecture]}/{c.gpu.segment}" for c in rows}))


def identifying_multi_gpu_rows(calib: list[Case]) -> list[tuple[Case, list[Case]]]:
    """Multi-GPU training rows that identify the data-parallel overhead, each with its
    baselines: the rows of the same suite that measured the same workload, GPU and
    precision on one GPU. Without that baseline (LLM Foundry measures FSDP on 8 GPUs only) the
    overhead only trades off against the compute efficiency."""
    singles: dict[tuple[Any, ...], list[Case]] = {}
    for c in calib:
        if c.cfg.mode == "train" and not c.multi_gpu_train:
            singles.setdefault(_baseline_key(c), []).append(c)
    return [(c, singles[key]) for c in calib if c.multi_gpu_train and (key := _baseline_key(c)) in singles]


def _baseline_key(c: Case) -> tuple[Any, ...]:
    """What a single-GPU row must share with a multi-GPU row to be its baseline: the same
    workload (model, task, sequence length, image size) in the same suite, GPU and precision."""
    r = c.ref
    return (r["model"], r["task"], r.get("seq_len"), r.get("image_size"), c.gpu.id, r["precision"], suite(r))


def _scaling_loss(pairs: list[tuple[Case, list[Case]]], cal: Calibration) -> float:
    """Mean |log error| of the speed-up over one GPU (cluster throughput over the same
    suite's single-GPU throughput), so an error in the single-GPU level, which the
    efficiencies carry, does not move the data-parallel overhead."""
    terms = [abs(math.log((predict(m, cal) / predict(s, cal)) / (m.measured / s.measured)))
             for m, baselines in pairs for s in baselines]
    return statistics.fmean(terms) if terms else 0.0


def fit(calib: list[Case], sweeps: int = 4, verbose: bool = False, fit_exponent: bool = True,
        exponent: float = 2.0) -> Calibration:
    """Fit every constant on the given rows (coordinate descent on log values), prune the
    generation entries that do not earn their constants, then refit what is left so the
    remaining constants take up what the pruned entries had carried."""
    entries = _structure(calib)
    multi = identifying_multi_gpu_rows(calib)
    cal = Calibration(
        fitted_by="benchmarks/calibrate.py", references="tests/data/perf_refs.yaml", split="",
        generations={k: tuple(v) for k, v in GENERATIONS.items()}, efficiencies=tuple(entries),
        data_parallel_overhead=0.05, roofline_exponent=exponent,
        data_parallel_overhead_fitted_on=tuple(sorted({c.id for m, base in multi for c in (m, *base)})) or ("none",),
        error_band=1.0,
    )
    for sweep in range(sweeps):
        cal = _sweep(cal, calib, multi, grid=sweep == 0, fit_exponent=fit_exponent)
        if verbose:
            print(f"sweep {sweep + 1}: calibration loss {_loss(calib, cal):.4f}", file=sys.stderr)
    pruned = _prune(cal, calib, verbose)
    if len(pruned.efficiencies) == len(cal.efficiencies):
        return cal
    cal = pruned
    for sweep in range(REFIT_SWEEPS):
        cal = _sweep(cal, calib, multi, grid=False, fit_exponent=fit_exponent)
        if verbose:
            print(f"refit after pruning, sweep {sweep + 1}: calibration loss {_loss(calib, cal):.4f}",
                  file=sys.stderr)
    return cal


def _sweep(cal: Calibration, calib: list[Case], multi: list[tuple[Case, list[Case]]], grid: bool,
           fit_exponent: bool) -> Calibration:
    """One pass of coordinate descent over every constant of `cal`."""
    entries = cal.efficiencies
    # 'all' entries are fitted on every row of their class, so fit them first
    # with the generation entries set aside, then fit the generation entries.
    order = sorted(range(len(entries)), key=lambda i: entries[i].generation != "all")
    for i in order:
        entry = cal.efficiencies[i]
        if entry.generation == "all":
            rows = [c for c in calib if c.workload == entry.workload]
            only_all = cal.model_copy(update={"efficiencies": tuple(
                e for j, e in enumerate(cal.efficiencies) if e.generation == "all" or j == i)})
            idx = [j for j, e in enumerate(only_all.efficiencies) if e is entry][0]
            target = only_all
        else:
            rows = _cases_for(cal, i, calib)
            target, idx = cal, i
        if not rows:
            continue
        params = list(entry.fitted)
        if entry.generation != "all":
            # inherit what is not fitted from the class's "all" entry
            parent = next(e for e in cal.efficiencies if e.workload == entry.workload and e.generation == "all")
            inherit = {k: getattr(parent, k) for k in ("compute_efficiency", "memory_efficiency", "attention_efficiency",
                                                        "layer_overhead_us", "graph_layer_overhead_us",
                                                        "sm_bandwidth_gb_s")
                       if k not in entry.fitted}
            target = _replace_entry(target, idx, **inherit)
            cal = _replace_entry(cal, i, **inherit)
            entry = cal.efficiencies[i]
        if grid and len(params) >= 2:
            # a coarse grid over the two efficiencies first: the loss has several valleys
            best = (math.inf, entry.compute_efficiency, entry.memory_efficiency)
            (c_lo, c_hi), (m_lo, m_hi) = bounds(entry.workload, "compute_efficiency"), bounds(entry.workload,
                                                                                             "memory_efficiency")
            for a in (min(max(g, c_lo), c_hi) for g in GRID):
                for b in (min(max(g, m_lo), m_hi) for g in GRID):
                    loss = _loss(rows, _replace_entry(target, idx, compute_efficiency=a, memory_efficiency=b))
                    if loss < best[0]:
                        best = (loss, a, b)
            target = _replace_entry(target, idx, compute_efficiency=best[1], memory_efficiency=best[2])
            cal = _replace_entry(cal, i, compute_efficiency=best[1], memory_efficiency=best[2])
        for name in params:
            lo, hi = bounds(entry.workload, name)
            # a CUDA graph removes the host's launches and keeps the GPU-side time, so
            # the graph overhead lies between 0 and the eager one
            if name == "graph_layer_overhead_us":
                hi = target.efficiencies[idx].layer_overhead_us
            elif name == "layer_overhead_us":
                lo = target.efficiencies[idx].graph_layer_overhead_us
            linear = name in ("layer_overhead_us", "graph_layer_overhead_us")

            def f(x: float, name: str = name, linear: bool = linear, rows: Any = rows, target: Any = target,
                  idx: int = idx) -> float:
                value = x if linear else math.exp(x)
                return _loss(rows, _replace_entry(target, idx, **{name: value}))

            best = _bracketed(f, lo, hi) if linear else _bracketed(f, math.log(lo), math.log(hi))
            value = best if linear else math.exp(best)
            target = _replace_entry(target, idx, **{name: value})
            cal = _replace_entry(cal, i, **{name: value})
    if multi:
        def g(x: float) -> float:
            return _scaling_loss(multi, cal.model_copy(update={"data_parallel_overhead": x}))

        cal = cal.model_copy(update={"data_parallel_overhead": _golden(g, *BOUNDS["data_parallel_overhead"])})
    if fit_exponent:
        def h(x: float) -> float:
            return _loss(calib, cal.model_copy(update={"roofline_exponent": x}))

        cal = cal.model_copy(update={"roofline_exponent": _golden(h, *BOUNDS["roofline_exponent"], iters=20)})
    return cal


def _prune(cal: Calibration, calib: list[Case], verbose: bool) -> Calibration:
    """Drop generation entries that do not earn their constants: those that lower the
    mean absolute log error on their own rows by less than PRUNE_GAIN; then, while the
    model carries more than MAX_CONSTANTS constants, the kept entry whose constants lower
    the fit's total loss least (its gain times its rows, per constant)."""
    gains: dict[int, float] = {}
    totals: dict[int, float] = {}
    for i, entry in enumerate(cal.efficiencies):
        if entry.generation == "all":
            continue
        rows = _cases_for(cal, i, calib)
        without = cal.model_copy(update={"efficiencies": tuple(e for e in cal.efficiencies if e is not entry)})
        gains[i] = _loss(rows, without) - _loss(rows, cal)
        totals[i] = gains[i] * len(rows) / len(entry.fitted)
    drop = {i for i, gain in gains.items() if gain < PRUNE_GAIN}

    def count() -> int:
        return cal.model_copy(update={"efficiencies": tuple(
            e for i, e in enumerate(cal.efficiencies) if i not in drop)}).constant_count

    # over budget: drop the entries whose constants lower the total loss least
    for i in sorted((i for i in gains if i not in drop), key=lambda i: totals[i]):
        if count() <= MAX_CONSTANTS:
            break
        drop.add(i)
    if verbose:
        for i in sorted(drop):
            entry = cal.efficiencies[i]
            per = len(entry.fitted)
            why = "" if gains[i] < PRUNE_GAIN else (f" ({per} constants, {totals[i]:.2f} total gain each, over the "
                                                     f"{MAX_CONSTANTS}-constant budget)")
            print(f"pruned {entry.workload}/{entry.generation}: gain {gains[i]:.4f}{why}", file=sys.stderr)
    return cal.model_copy(update={"efficiencies": tuple(e for i, e in enumerate(cal.efficiencies) if i not in drop)})


# --------------------------------------------------------------------------
# the report and the data file


def report(cases: list[Case], excluded: list[dict[str, str]], cal: Calibration) -> dict[str, Any]:
    calib, held = split(cases)
    ev_c, ev_h, ev_all = evaluate(calib, cal), evaluate(held, cal), evaluate(cases, cal)
    return {
        "held_out_gpus": list(held_out_gpus(cases)),
        "held_out_dies": list(held_out_dies(cases)),
        "calibration": {k: v for k, v in ev_c.items() if k not in ("predictions", "errors")},
        "held_out": {k: v for k, v in ev_h.items() if k not in ("predictions", "errors")},
        "all": {k: v for k, v in ev_all.items() if k not in ("predictions", "errors")},
        "constants": cal.constant_count,
        "excluded": excluded,
        "rows": [
            {"id": c.id, "split": "held-out" if c in held else "calibration", "workload": c.workload,
             "measured": c.measured, "predicted": ev_all["predictions"][c.id], "error": ev_all["errors"][c.id]}
            for c in cases
        ],
    }


def _rounded(cal: Calibration) -> Calibration:
    entries = tuple(
        e.model_copy(update={
            "compute_efficiency": round(e.compute_efficiency, 4),
            "memory_efficiency": round(e.memory_efficiency, 4),
            "attention_efficiency": round(e.attention_efficiency, 4),
            "layer_overhead_us": round(e.layer_overhead_us, 2),
            "graph_layer_overhead_us": round(e.graph_layer_overhead_us, 2),
            "sm_bandwidth_gb_s": round(e.sm_bandwidth_gb_s, 3),
        })
        for e in cal.efficiencies
    )
    return cal.model_copy(update={"efficiencies": entries,
                                  "data_parallel_overhead": round(cal.data_parallel_overhead, 4),
                                  "roofline_exponent": round(cal.roofline_exponent, 3)})


def write_calibration(cal: Calibration, split_cal: Calibration, rep: dict[str, Any]) -> None:
    """data/calibration.yaml gets the constants fitted on all rows, tests/data/calibration_split.yaml
    those fitted on the calibration split; both carry the split fit's errors."""
    rule = (
        f"Whole dies held out: of the {len(rep['all']['gpus'])} GPUs in the usable references, those on a die "
        f"(catalog field die) whose SHA-256 digest is divisible by {HOLD_OUT_MODULUS} are held out with all "
        f"their rows (dies {', '.join(rep['held_out_dies'])}: {', '.join(rep['held_out_gpus'])})."
    )
    _write(OUT, cal, rep, rule + " The errors below are those of the same procedure fitted on the other GPUs' "
           "rows (tests/data/calibration_split.yaml); these constants are that procedure refitted on all usable rows.")
    _write(SPLIT_OUT, split_cal, rep, rule + " These constants are fitted on the other GPUs' rows only, and are what "
           "the errors below are measured with. gpusizer ships the refit on all rows (data/calibration.yaml).")


def _write(path: Path, cal: Calibration, rep: dict[str, Any], split_text: str) -> None:
    import yaml

    held = rep["held_out"]
    doc = cal.model_dump(mode="json")
    doc["split"] = split_text
    doc["error_band"] = round(held["median_abs_rel_error"], 3)
    doc["errors"] = {
        "calibration_median_abs_rel_error": round(rep["calibration"]["median_abs_rel_error"], 4),
        "calibration_cases": rep["calibration"]["cases"],
        "held_out_median_abs_rel_error": round(held["median_abs_rel_error"], 4),
        "held_out_cases": held["cases"],
        "held_out_gpus": len(held["gpus"]),
        "held_out_within_20pct": round(held["within_20pct"], 4),
        "shipped_median_abs_rel_error_in_sample": round(rep["shipped"]["median_abs_rel_error"], 4),
        "shipped_within_20pct_in_sample": round(rep["shipped"]["within_20pct"], 4),
        "rank_correlations": [
            {"model": g["model"], "task": g["task"], "precision": g["precision"], "suite": g["suite"],
             "gpus": len(g["gpus"]), "spearman": round(g["spearman"], 3)}
            for g in rep["all"]["rank_correlations"]
        ],
        "rank_correlations_pooled": [
            {"model": g["model"], "task": g["task"], "precision": g["precision"], "gpus": len(g["gpus"]),
             "spearman": round(g["spearman"], 3)}
            for g in rep["all"]["rank_correlations_pooled"]
        ],
    }
    doc["excluded"] = rep["excluded"]
    header = (
        "# gpusizer performance calibration: written by benchmarks/calibrate.py --write; do not edit by hand.\n"
        "# Each efficiency entry applies to one workload class on one generation of architectures (or 'all',\n"
        "# the class's fallback) and lists the reference rows (tests/data/perf_refs.yaml) it was fitted on.\n"
        "# compute_efficiency: fraction of the precision's peak reached on matmul/convolution FLOPs;\n"
        "# memory_efficiency: fraction of memory bandwidth reached on the modelled traffic;\n"
        "# attention_efficiency: fraction of the peak reached by the fused-attention kernels LLM Foundry ran in\n"
        "# 2023, on the FLOPs they execute (its rows only; current kernels run at compute_efficiency);\n"
        "# layer_overhead_us: fixed time per layer and step when kernels are launched one by one (launch-bound\n"
        "# single-stream decode); graph_layer_overhead_us: the same when each step is replayed as a CUDA graph;\n"
        "# sm_bandwidth_gb_s: bandwidth one SM sustains in small-batch matrix-vector decode kernels (0: no limit).\n"
        "# data_parallel_overhead: fractional growth of the step when N > 1, fitted on the speed-up of the\n"
        "# multi-GPU rows listed over the single-GPU rows (also listed) of the same suite, workload, GPU and\n"
        "# precision.\n"
        "# The model and the split are described in docs/method.md (\"Performance\").\n"
    )
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=110), encoding="utf-8")


def print_held_out(rep: dict[str, Any]) -> None:
    """The held-out table the README quotes: by die, beside the calibration split, per suite."""
    c, h = rep["calibration"], rep["held_out"]
    print(f"held out by die ({', '.join(rep['held_out_dies'])}): {h['cases']} rows on {len(h['gpus'])} GPUs "
          f"({', '.join(rep['held_out_gpus'])})")
    print(f"  {'split':<12} {'rows':>5} {'GPUs':>5} {'median |error|':>15} {'within 20%':>11}")
    for name, ev in (("calibration", c), ("held out", h)):
        print(f"  {name:<12} {ev['cases']:>5} {len(ev['gpus']):>5} {ev['median_abs_rel_error']:>15.1%} "
              f"{ev['within_20pct']:>11.0%}")
    print("  held-out rows by workload class:")
    for workload, ev in sorted(h.get("by_workload", {}).items()):
        print(f"    {workload:<18} {ev['cases']:>4} rows  median |error| {ev['median_abs_rel_error']:.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true",
                        help="rewrite data/calibration.yaml and tests/data/calibration_split.yaml")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-fit", action="store_true", help="evaluate the bundled constants without fitting")
    parser.add_argument("--sweeps", type=int, default=4)
    parser.add_argument("--exponent", type=float, default=None, help="fix the roofline exponent instead of fitting it")
    parser.add_argument("--report-held-out", action="store_true",
                        help="also print the held-out (by die) errors; development runs leave them out so the "
                             "model is not shaped on them")
    args = parser.parse_args(argv)

    cases, excluded = build_cases()
    calib, _ = split(cases)
    if args.no_fit:
        split_cal, cal = load_calibration(SPLIT_OUT), load_calibration()
    else:
        options = {"sweeps": args.sweeps, "verbose": not args.json, "fit_exponent": args.exponent is None,
                   "exponent": args.exponent or 2.0}
        split_cal = _rounded(fit(calib, **options))
        if not args.json:
            print("refit on all usable rows:", file=sys.stderr)
        cal = _rounded(fit(cases, **options))
    rep = report(cases, excluded, split_cal)
    shipped = evaluate(cases, cal)
    rep["shipped"] = {k: v for k, v in shipped.items() if k not in ("predictions", "errors")}
    if args.write:
        write_calibration(cal, split_cal, rep)
    if args.json:
        print(json.dumps(rep, indent=2))
        return 0
    c, h = rep["calibration"], rep["held_out"]
    for title, constants in (("fitted on the calibration split (every error below is measured with these)", split_cal),
                             ("refitted on all usable rows (shipped in data/calibration.yaml)", cal)):
        print(f"{title}:")
        print(f"  roofline exponent {constants.roofline_exponent}, data-parallel overhead {constants.data_parallel_overhead}")
        for e in constants.efficiencies:
            print(f"  {e.workload:<17} {e.generation:<17} eta_c {e.compute_efficiency:.3f} eta_m {e.memory_efficiency:.3f} "
                  f"eta_attn {e.attention_efficiency:.3f} overhead {e.layer_overhead_us:.1f}/{e.graph_layer_overhead_us:.1f} us "
                  f"(eager/graphs) sm_bw {e.sm_bandwidth_gb_s:.2f} GB/s  ({len(e.fitted_on)} rows)")
        print(f"  constants: {constants.constant_count} ({len(constants.efficiencies)} efficiency entries + roofline "
              "exponent + data-parallel overhead)")
    sh = rep["shipped"]
    print(f"shipped constants, in sample: {sh['cases']} rows, median |error| {sh['median_abs_rel_error']:.1%}, "
          f"within 20%: {sh['within_20pct']:.0%}")
    print(f"calibration: {c['cases']} rows on {len(c['gpus'])} GPUs, median |error| {c['median_abs_rel_error']:.1%}")
    if args.report_held_out:
        print_held_out(rep)
    else:
        print(f"held out:    {h['cases']} rows on {len(h['gpus'])} GPUs of the dies {', '.join(rep['held_out_dies'])}: "
              "errors not printed (--report-held-out prints them)")
    print("rank correlation (Spearman, single-GPU rows, per model/task/precision/suite with >= 4 GPUs):")
    for g in rep["all"]["rank_correlations"]:
        print(f"  {g['model']:<14} {g['task']:<18} {g['precision']:<6} {len(g['gpus']):>2} GPUs  {g['spearman']:+.3f}"
              f"  {g['suite'][:60]}")
    print("rank correlation pooled over suites:")
    for g in rep["all"]["rank_correlations_pooled"]:
        print(f"  {g['model']:<14} {g['task']:<18} {g['precision']:<6} {len(g['gpus']):>2} GPUs  {g['spearman']:+.3f}")
    print("rows (error = predicted / measured - 1):")
    for r in sorted(rep["rows"], key=lambda r: (r["workload"], r["id"])):
        if r["split"] == "held-out" and not args.report_held_out:
            continue
        print(f"  {r['split'][:5]:<5} {r['workload']:<17} {r['error']:+7.1%}  {r['measured']:>10.1f} "
              f"{r['predicted']:>10.1f}  {r['id']}")
    print(f"excluded: {len(excluded)} rows")
    for e in excluded:
        print(f"  {e['id']}: {e['reason']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
