"""The performance engine: formulas, source-document figures, calibration error, invariants.

Source-document figures come from docs/sources.md; each test states the
configuration it uses, because the documents do not.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import shape_from_model, shape_from_params
from gpusizer.errors import DataFileError, NothingFitsError, UsageError
from gpusizer.hardware.catalog import Source, load_catalog
from gpusizer.memory.estimate import estimate_memory
from gpusizer.models.zoo import Model, load_zoo
from gpusizer.performance.calibration import load_calibration, load_interconnects
from gpusizer.performance.comm import allreduce_time_s, collective_link
from gpusizer.performance.estimate import estimate_performance, roofline, sm_count
from gpusizer.performance.peak import peak_tflops
from gpusizer.performance.planning import (
    default_batch,
    scaling_counts,
    scaling_curve,
    time_to_train,
)
from gpusizer.performance.work import CNN_FLOPS_PER_ACTIVATION, model_work

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


@pytest.fixture(scope="module")
def zoo():
    return load_zoo()


def shape(zoo, name):
    return shape_from_model(zoo.resolve(name))


def est(gpu, shp, **kw):
    nodes = kw.pop("nodes", 1)
    extra = {k: kw.pop(k) for k in ("interconnect", "tf32", "compute_precision", "phase", "nics_per_node",
                                    "grad_accumulation") if k in kw}
    return estimate_performance(gpu, shp, RunConfig(**kw), nodes=nodes, **extra)


@pytest.fixture(scope="module")
def calibrate_module():
    """benchmarks/calibrate.py: the harness that fits the constants and defines the split."""
    path = ROOT / "benchmarks" / "calibrate.py"
    spec = importlib.util.spec_from_file_location("gpusizer_calibrate", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpusizer_calibrate"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cases(calibrate_module):
    return calibrate_module.build_cases()


# --------------------------------------------------------------------------
# source-document figures (docs/sources.md)


def test_rdma_vs_tcp_on_the_same_tesla_cluster_is_about_2_5x(cat, zoo):
    """SEED-FACTS: "on the same Tesla GPUs, GPU RDMA is 2.5x faster than plain TCP in a cluster".

    Configuration (the source states none): AlexNet, fp32, batch 512 per GPU
    (tf_cnn_benchmarks' AlexNet default), 4 nodes x 8 V100-SXM2-16GB, one NIC per
    node; InfiniBand EDR with GPUDirect RDMA against plain TCP over 10 GbE.
    """
    v100 = cat.by_id("v100-sxm2-16gb")
    kw = dict(mode="train", precision="fp32", optimizer="momentum", batch=512, image_size=224, gpus=8, nodes=4)
    rdma = est(v100, shape(zoo, "alexnet"), interconnect="ib-edr", nics_per_node=1, **kw)
    tcp = est(v100, shape(zoo, "alexnet"), interconnect="tcp-10g", nics_per_node=1, **kw)
    assert rdma.transport == "rdma" and tcp.transport == "tcp"
    ratio = rdma.throughput_per_s / tcp.throughput_per_s
    assert 2.0 <= ratio <= 3.0, ratio  # model: 2.41x


def test_rdma_speedup_at_32_gpus_is_about_30_6x(cat, zoo):
    """SEED-FACTS: "RDMA gives up to 30.6x speed-up over a single GPU (near linear; read as 32 GPUs)";
    "NCCL 2 scales near-linearly ... to 32 GPUs over 4 nodes".

    Configuration: ResNet-50, mixed precision, batch 256 per GPU (the DeepLearningExamples
    recipe), 4 nodes x 8 V100-SXM2-16GB over NVLink inside a node and one InfiniBand EDR
    NIC per node with GPUDirect RDMA.
    """
    v100 = cat.by_id("v100-sxm2-16gb")
    e = est(v100, shape(zoo, "resnet50"), mode="train", precision="mixed", optimizer="momentum", batch=256,
            image_size=224, gpus=8, nodes=4, interconnect="ib-edr")
    assert e.gpus_total == 32
    assert e.transport == "rdma"
    assert 28.6 <= e.speedup_vs_1gpu <= 32.0, e.speedup_vs_1gpu  # model: 30.3x
    assert e.scaling_efficiency < 1.0


@pytest.mark.parametrize("interconnect", ["ib-edr", "tcp-25g"])
def test_cnns_scale_better_than_lstms_and_dense_nets(cat, zoo, interconnect):
    """SEED-FACTS: CNNs scale very well (weight sharing keeps gradients small); LSTM speed-up
    is unclear; dense nets gain little from multiple GPUs.

    Configuration: 4 nodes x 8 V100-SXM2-16GB, fp32, momentum SGD; ResNet-50 at batch 64,
    the zoo's 2-layer LSTM language model at batch 64 x 35 steps, and a dense 100M-parameter
    network (given by --params, one "token" per sample) at batch 256.
    """
    v100 = cat.by_id("v100-sxm2-16gb")
    common = dict(mode="train", precision="fp32", optimizer="momentum", gpus=8, nodes=4, interconnect=interconnect)
    cnn = est(v100, shape(zoo, "resnet50"), batch=64, image_size=224, **common)
    lstm = est(v100, shape(zoo, "lstm-lm"), batch=64, seq_len=35, **common)
    dense = est(v100, shape_from_params(100_000_000), batch=256, seq_len=1, **common)
    assert cnn.scaling_efficiency > lstm.scaling_efficiency > dense.scaling_efficiency
    assert cnn.scaling_efficiency > 0.8


def _transformer(hidden: int, ffn: int, heads: int) -> Model:
    """The NMT Transformer of Vaswani et al. 2017 (6+6 layers; base: 512, big: 1024)."""
    return Model(
        id=f"transformer-{hidden}", name=f"Transformer (hidden {hidden})", kind="encoder-decoder",
        params=60_000_000 if hidden == 512 else 210_000_000, layers=6, decoder_layers=6, hidden=hidden,
        heads=heads, ffn=ffn, vocab=32000, mlp="relu", dropout=True,
        sources=(Source(title="Vaswani et al., Attention Is All You Need, 2017, Table 3"),),
    )


def test_mixed_precision_speedups_on_v100(cat, zoo):
    """SEED-FACTS: measured mixed-precision speed-ups on V100 vs FP32: language model 2.3x, NMT
    Transformer 1.6x (hidden 512) and 2.1x (hidden 1024), a small CNN+FC model 2.3x.

    Configuration: V100-SXM2-16GB, one GPU, Adam. CNN+FC: AlexNet (the zoo's conv net with
    large fully connected layers), batch 128 at 224 px. Transformers: base and big, batch
    64 x 64 tokens. LSTM LM: the zoo's lstm-lm, batch 64 x 35 steps.

    The model reproduces the CNN+FC figure and the ordering of the two Transformers; its
    Transformer and LSTM speed-ups are higher (about 3.0x, 4.2x and 3.6x) because it is
    calibrated on newer software (DeepLearningExamples measured 4.48x for BERT-Large on V100,
    tests/data/perf_refs.yaml); the 2018 figures are a floor it must not fall below.
    """
    v100 = cat.by_id("v100-sxm2-16gb")

    def speedup(shp, **kw):
        fp32 = est(v100, shp, mode="train", precision="fp32", optimizer="adam", **kw)
        amp = est(v100, shp, mode="train", precision="mixed", optimizer="adam", **kw)
        return amp.throughput_per_s / fp32.throughput_per_s

    cnn_fc = speedup(shape(zoo, "alexnet"), batch=128, image_size=224)
    base = speedup(shape_from_model(_transformer(512, 2048, 8)), batch=64, seq_len=64)
    big = speedup(shape_from_model(_transformer(1024, 4096, 16)), batch=64, seq_len=64)
    lm = speedup(shape(zoo, "lstm-lm"), batch=64, seq_len=35)
    assert 1.6 <= cnn_fc <= 2.3, cnn_fc
    assert base < big  # 1.6x < 2.1x in the source
    assert min(cnn_fc, base, big, lm) >= 1.6


def test_v100_has_no_tf32_so_fp32_runs_on_cuda_cores(cat):
    v100 = cat.by_id("v100-sxm2-16gb")
    assert peak_tflops(v100, "fp32")[0] == v100.fp32_tflops


# --------------------------------------------------------------------------
# held-out error and rank correlation


@pytest.fixture(scope="module")
def split_calibration(calibrate_module):
    """The constants fitted on the calibration split alone: what held-out errors are measured with."""
    return load_calibration(calibrate_module.SPLIT_OUT)


def test_held_out_split_is_by_die_and_unseen_and_its_error_is_gated(cases, calibrate_module, split_calibration):
    """The split holds out whole dies (benchmarks/calibrate.py): the split fit never saw a held-out row
    or GPU. Target (issue 18): held-out median error <= 10%. It is not met: held out by die (GH100, AD104,
    AD103) the median is 26.6% (docs/accuracy.md); this test fails if it grows past 30%, a regression gate,
    not the target."""
    usable, _ = cases
    calib, held = calibrate_module.split(usable)
    report = calibrate_module.evaluate(held, split_calibration)
    assert len(calibrate_module.held_out_dies(usable)) >= 3 and len(report["gpus"]) >= 7
    assert not set(report["gpus"]) & {c.gpu.id for c in calib}
    assert not {c.gpu.die for c in held} & {c.gpu.die for c in calib}
    fitted = {i for e in split_calibration.efficiencies for i in e.fitted_on}
    fitted |= set(split_calibration.data_parallel_overhead_fitted_on)
    assert not fitted & {c.id for c in held}
    assert report["median_abs_rel_error"] <= 0.30, report["median_abs_rel_error"]


@pytest.mark.skipif(not os.environ.get("GPUSIZER_SLOW"),
                    reason="refits the performance model on every row (about 1 minute): CI runs it with GPUSIZER_SLOW=1")
def test_a_refit_from_scratch_gives_the_shipped_constants(cases, calibrate_module):
    """benchmarks/calibrate.py's fit on all usable rows, from its starting point, is data/calibration.yaml."""
    usable, _ = cases
    fresh = calibrate_module._rounded(calibrate_module.fit(usable))
    shipped = load_calibration()
    assert fresh.data_parallel_overhead == shipped.data_parallel_overhead
    assert fresh.roofline_exponent == shipped.roofline_exponent
    assert [e.model_dump() for e in fresh.efficiencies] == [e.model_dump() for e in shipped.efficiencies]


def test_calibration_file_with_graph_overhead_above_eager_is_rejected(tmp_path):
    import yaml

    doc = yaml.safe_load((ROOT / "data" / "calibration.yaml").read_text())
    decode = next(e for e in doc["efficiencies"] if e["workload"] == "llm-decode")
    decode["graph_layer_overhead_us"] = decode["layer_overhead_us"] + 1
    path = tmp_path / "calibration.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(DataFileError) as err:
        load_calibration(path)
    assert "graph_layer_overhead_us" in str(err.value) and "only removes launch time" in str(err.value)


def test_split_holds_out_whole_dies_and_never_moves_a_gpu(cases, calibrate_module):
    """The split is by die: every card on a die falls on one side (no A100 80GB held out while its 40GB
    twin calibrates), and adding a GPU's rows leaves every other GPU where it was."""
    usable, _ = cases
    full = set(calibrate_module.held_out_gpus(usable))
    gpus = sorted({c.gpu.id for c in usable})
    for dropped in (gpus[0], gpus[len(gpus) // 2], "rtx-3070"):
        fewer = [c for c in usable if c.gpu.id != dropped]
        assert set(calibrate_module.held_out_gpus(fewer)) == full - {dropped}, dropped
    by_die: dict[str, set[bool]] = {}
    for c in usable:
        by_die.setdefault(c.gpu.die, set()).add(c.gpu.id in full)
    assert all(len(sides) == 1 for sides in by_die.values()), by_die
    assert {"h100-sxm5-80gb", "h100-pcie-80gb", "h200-sxm-141gb"} <= full  # GH100
    assert not {"a100-sxm4-80gb", "a100-sxm4-40gb", "a30"} & full  # GA100


def test_recorded_errors_match_a_fresh_evaluation(cases, calibrate_module, split_calibration):
    """data/calibration.yaml quotes the split fit's errors (the README quotes them too); they must
    be what the split constants actually give, and the shipped constants' in-sample error what
    they give."""
    usable, _ = cases
    shipped = load_calibration()
    calib, held = calibrate_module.split(usable)
    assert split_calibration.errors == shipped.errors and split_calibration.error_band == shipped.error_band
    assert math.isclose(calibrate_module.evaluate(held, split_calibration)["median_abs_rel_error"],
                        shipped.errors["held_out_median_abs_rel_error"], abs_tol=0.002)
    assert math.isclose(calibrate_module.evaluate(calib, split_calibration)["median_abs_rel_error"],
                        shipped.errors["calibration_median_abs_rel_error"], abs_tol=0.002)
    assert math.isclose(calibrate_module.evaluate(usable, shipped)["median_abs_rel_error"],
                        shipped.errors["shipped_median_abs_rel_error_in_sample"], abs_tol=0.002)
    assert math.isclose(shipped.error_band, shipped.errors["held_out_median_abs_rel_error"], abs_tol=0.002)
    # the shipped constants are the refit on every usable row
    fitted = {i for e in shipped.efficiencies for i in e.fitted_on}
    assert fitted == {c.id for c in usable if c.workload in {e.workload for e in shipped.efficiencies}}


@pytest.mark.parametrize("which", ["split", "shipped"])
def test_rank_correlation_per_model_across_gpus(cases, calibrate_module, split_calibration, which):
    """Target: Spearman >= 0.9 for each model across GPUs (>= 4 GPUs, single-GPU rows of one
    benchmark suite, so the software is the same), with the split fit and with the shipped one.
    For Lambda's TF 1.12 and PyTorch tables and the llama.cpp-on-RunPod tables every single-GPU
    cell of the columns used is a reference row where the catalog has the GPU."""
    usable, _ = cases
    cal = split_calibration if which == "split" else load_calibration()
    groups = calibrate_module.evaluate(usable, cal)["rank_correlations"]
    assert len(groups) >= 12
    for g in groups:
        assert g["spearman"] >= 0.9, (g["model"], g["task"], g["precision"], g["suite"], g["spearman"])


def test_pruning_keeps_the_constant_budget_by_total_gain_per_constant(calibrate_module, cases, monkeypatch):
    """Past MAX_CONSTANTS, pruning drops the generation entries whose constants lower the fit's
    total error least (an entry serving many rows outranks one serving a few), and never an
    'all' entry."""
    usable, _ = cases
    cal = load_calibration()
    calib = usable  # the shipped constants were fitted on every usable row
    # the shipped constants already fit the budget, and every generation entry earned its place
    assert calibrate_module._prune(cal, calib, verbose=False) == cal
    gains = {}
    for i, e in enumerate(cal.efficiencies):
        if e.generation != "all":
            rows = calibrate_module._cases_for(cal, i, calib)
            without = cal.model_copy(update={"efficiencies": tuple(x for x in cal.efficiencies if x is not e)})
            gains[(e.workload, e.generation)] = ((calibrate_module._loss(rows, without)
                                                  - calibrate_module._loss(rows, cal)) * len(rows) / len(e.fitted))
    assert len(gains) >= 3
    monkeypatch.setattr(calibrate_module, "MAX_CONSTANTS", cal.constant_count - 1)
    pruned = calibrate_module._prune(cal, calib, verbose=False)
    assert pruned.constant_count <= cal.constant_count - 1
    kept = {(e.workload, e.generation) for e in pruned.efficiencies}
    assert {(e.workload, e.generation) for e in cal.efficiencies if e.generation == "all"} <= kept
    dropped = set(gains) - kept
    assert dropped
    assert max(gains[k] for k in dropped) <= min(gains[k] for k in set(gains) & kept)


def test_data_parallel_overhead_is_fitted_on_speed_ups_against_a_baseline(cases, calibrate_module,
                                                                         split_calibration):
    """The overhead is fitted on each multi-GPU row's speed-up over its suite's single-GPU row,
    so the fit on the calibration split and the fit on every row find about the same value,
    and every multi-GPU row it cites comes with the single-GPU baseline it was measured against."""
    usable, _ = cases
    cal = load_calibration()
    pairs = calibrate_module.identifying_multi_gpu_rows(usable)
    assert len(pairs) >= 20
    cited = set(cal.data_parallel_overhead_fitted_on)
    for multi, baselines in pairs:
        assert multi.id in cited and {b.id for b in baselines} <= cited
        for b in baselines:  # the same workload on one GPU of the same kind
            assert (b.gpu.id, b.ref["precision"]) == (multi.gpu.id, multi.ref["precision"])
            assert [b.ref.get(k) for k in ("model", "task", "seq_len", "image_size", "framework")] == [
                multi.ref.get(k) for k in ("model", "task", "seq_len", "image_size", "framework")]
    assert 0.01 <= cal.data_parallel_overhead <= 0.10
    assert abs(cal.data_parallel_overhead - split_calibration.data_parallel_overhead) <= 0.01
    # a GPU measured 30% slower on one GPU and in the cluster (the same speed-up) leaves the loss,
    # and so the fitted overhead, where it was; a worse speed-up raises it
    def scaled(case, factor):
        return dataclasses.replace(case, ref={**case.ref, "throughput": case.ref["throughput"] * factor})

    loss = calibrate_module._scaling_loss(pairs, cal)
    slower = [(scaled(m, 0.7), [scaled(b, 0.7) for b in base]) for m, base in pairs]
    assert calibrate_module._scaling_loss(slower, cal) == pytest.approx(loss)
    worse = [(scaled(m, 0.7), base) for m, base in pairs]
    assert calibrate_module._scaling_loss(worse, cal) > loss


def test_calibration_constants_are_few_and_cite_their_rows(cases):
    usable, excluded = cases
    cal = load_calibration()
    ids = {c.id for c in usable}
    assert cal.constant_count <= 20
    assert load_calibration(ROOT / "tests" / "data" / "calibration_split.yaml").constant_count <= 20
    for entry in cal.efficiencies:
        assert set(entry.fitted_on) <= ids, entry.workload
        assert 0 < entry.compute_efficiency <= 1 and 0 < entry.memory_efficiency <= 1
    assert set(cal.data_parallel_overhead_fitted_on) <= ids
    assert any(e["id"].endswith("fp4-b200-sxm-180gb-1gpu-mlperf-v4.1") for e in excluded)
    assert all(e["reason"] for e in excluded)


# --------------------------------------------------------------------------
# formulas


def test_training_flops_are_three_times_the_forward_pass(cat, zoo):
    shp = shape(zoo, "resnet50")
    fwd = model_work(shp, RunConfig(mode="inference", precision="fp16", batch=32, image_size=224), "fp16")
    train = model_work(shp, RunConfig(mode="train", precision="mixed", batch=32, image_size=224), "mixed")
    # inference is timed per operation: its FLOPs are the traced convolutions' (8.17836 GFLOPs an
    # image), which the zoo's figure rounds to 8.178 (torchvision 4.089 GMACs x 2)
    assert fwd.ops and not train.ops
    assert train.matmul_flops == pytest.approx(3 * fwd.matmul_flops, rel=1e-4)
    assert fwd.matmul_flops == pytest.approx(32 * 8.178e9, rel=1e-4)


def test_cnn_flops_scale_with_image_area(zoo):
    shp = shape(zoo, "resnet50")
    a = model_work(shp, RunConfig(mode="train", batch=8, image_size=224), "mixed")
    b = model_work(shp, RunConfig(mode="train", batch=8, image_size=448), "mixed")
    assert b.matmul_flops == pytest.approx(4 * a.matmul_flops)


def test_transformer_flops_are_6_params_tokens_plus_attention(zoo):
    m = zoo.resolve("llama-2-7b")
    shp = shape_from_model(m)
    b, s = 2, 4096
    eager = model_work(shp, RunConfig(mode="train", batch=b, seq_len=s, flash_attention=False), "mixed")
    flash = model_work(shp, RunConfig(mode="train", batch=b, seq_len=s, flash_attention=True), "mixed")
    from gpusizer.memory.estimate import matrix_params

    assert shp.transformer is not None
    n = matrix_params(shp.transformer) + m.vocab * m.hidden  # linear layers plus the LM head
    attention = 12 * m.layers * s * m.heads * m.attention_head_dim  # PaLM's 6 x (4 L s d) per token
    # eager attention computes the whole score matrix, as PaLM (and MFU) count it
    assert eager.matmul_flops == pytest.approx((6 * n + attention) * b * s)
    assert eager.attention_flops == pytest.approx(attention * b * s)
    assert not eager.fused_attention
    # a causal fused kernel skips the tiles above the diagonal: half the score matrix
    assert flash.attention_flops == pytest.approx(attention * b * s / 2)
    assert flash.matmul_flops == pytest.approx((6 * n + attention / 2) * b * s)
    assert flash.fused_attention
    assert flash.matmul_flops == pytest.approx(6 * shp.params * b * s, rel=0.2)


def _foundry_row(cases, model, precision, seq, gpu="h100-sxm5-80gb"):
    usable, _ = cases
    ids = [c for c in usable if c.id == f"{model}-train-{precision}-{gpu}-8gpu-seq{seq}-foundry"]
    assert len(ids) == 1, (model, precision, seq)
    return ids[0]


@pytest.mark.parametrize(("seq", "measured"), [
    # LLM Foundry README (commit 061f2c7), 8 x H100 80GB, MPT-1B, FSDP, same micro-batch and
    # accumulation in both precisions: tokens/s amp_fp8 / amp_bf16
    (512, 562523 / 418201),     # 1.35x: the weight matmuls dominate and gain from FP8
    (32768, 100643 / 96203),    # 1.05x: attention dominates, and it stays 16-bit
])
def test_fp8_training_speedup_shrinks_as_attention_grows(cases, calibrate_module, seq, measured):
    """Transformer Engine's FP8 recipe leaves attention's Q, K, V in 16 bits, so at long
    sequences FP8 training is barely faster than BF16 (the model once ran attention at the
    FP8 rate and predicted 3x the measured FP8 throughput at 32k tokens)."""
    cal = load_calibration()
    fp8 = calibrate_module.predict(_foundry_row(cases, "mpt-1b", "fp8", seq), cal)
    bf16 = calibrate_module.predict(_foundry_row(cases, "mpt-1b", "bf16", seq), cal)
    assert abs(math.log((fp8 / bf16) / measured)) < 0.15, (fp8 / bf16, measured)


def test_llm_foundry_sequence_sweeps_are_ordered(cases, calibrate_module):
    """Each (GPU, MPT size) sweep over sequence lengths without activation checkpointing:
    the predicted tokens/s fall with the sequence length as measured (Spearman >= 0.9).
    One measured sweep is not monotonic: MPT-760M on the A100 80GB ran 512 and 1,024 tokens
    slower than 2,048 (235,571 and 238,122 against 259,472 tokens/s, MFU 45% and 48% against
    57%), which no sequence-length model reproduces; it is held to 0.85."""
    usable, _ = cases
    cal = load_calibration()
    sweeps: dict[tuple[str, str, str], list] = {}
    for c in usable:
        if c.id.endswith("-foundry") and not c.ref.get("checkpointing"):
            sweeps.setdefault((c.gpu.id, c.ref["model"], c.ref["precision"]), []).append(c)
    checked = 0
    for key, rows in sweeps.items():
        if len(rows) < 4:
            continue
        rho = calibrate_module.spearman([calibrate_module.predict(c, cal) for c in rows], [c.measured for c in rows])
        assert rho >= (0.85 if key == ("a100-sxm4-80gb", "mpt-760m", "mixed") else 0.9), (key, rho)
        checked += 1
    assert checked >= 10


def test_current_attention_kernels_fit_the_nemo_and_megatron_llama_runs(cases, calibrate_module):
    """NeMo 24.07 and Megatron-Bridge train Llama in FP8 with Transformer Engine's cuDNN fused
    attention: timed at the matmuls' efficiency ("current", the default) every row is within
    20%; timed like the 2023 kernels LLM Foundry ran, each would be predicted 13-30% slower."""
    usable, _ = cases
    cal = load_calibration()
    rows = [c for c in usable if "nemo2407" in c.id or "megatron-bridge" in c.id]
    assert len(rows) == 5
    for c in rows:
        assert c.kwargs["attention_kernels"] == "current"
        now = calibrate_module.predict(c, cal)
        assert abs(now / c.measured - 1) < 0.20, (c.id, now / c.measured - 1)
        old = calibrate_module.Case(ref=c.ref, gpu=c.gpu, shape=c.shape, cfg=c.cfg,
                                    kwargs={**c.kwargs, "attention_kernels": "llm-foundry-2023"})
        assert calibrate_module.predict(old, cal) < now * 0.9, c.id


def test_llm_foundry_training_rows_within_ten_percent_median(cases, calibrate_module):
    """152 single-node MPT training measurements (125M-30B, 512-65,536 tokens, A100 40/80GB and
    H100, BF16 and FP8, FSDP); they are calibration rows, so this bounds the fit, not
    generalisation (docs/method.md gives the error before they were added)."""
    usable, _ = cases
    cal = load_calibration()
    errs = sorted(abs(calibrate_module.predict(c, cal) / c.measured - 1) for c in usable if c.id.endswith("-foundry"))
    assert len(errs) == 152
    assert errs[len(errs) // 2] <= 0.10, errs[len(errs) // 2]


def test_encoder_attention_is_not_halved(zoo):
    """Bidirectional attention (BERT) has no masked half to skip, flash or not."""
    m = zoo.resolve("bert-large")
    shp = shape_from_model(m)
    a = model_work(shp, RunConfig(mode="train", batch=8, seq_len=512), "mixed")
    b = model_work(shp, RunConfig(mode="train", batch=8, seq_len=512, flash_attention=True), "mixed")
    assert a.attention_flops == pytest.approx(b.attention_flops)
    assert a.attention_flops == pytest.approx(12 * m.layers * 512 * m.hidden * 8 * 512)


def test_resnet50_conv_output_ratio():
    """CNN activation traffic is scaled from FLOPs with ResNet-50's ratio; recount it from the
    architecture (torchvision ResNet-50 v1.5 at 224 px) and check the MACs against torchvision's
    published 4.089 GMACs."""

    def conv(h, cin, cout, k, stride):
        out = (h + 2 * (k // 2) - k) // stride + 1
        return out, out * out * cout, out * out * cout * cin * k * k

    h, outputs, macs = conv(224, 3, 64, 7, 2)
    h, cin = 56, 64  # after the 3x3 max pool
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            parts = [conv(h, cin, width, 1, 1), conv(h, width, width, 3, s)]
            h2 = parts[1][0]
            parts.append(conv(h2, width, 4 * width, 1, 1))
            if i == 0:
                parts.append(conv(h, cin, 4 * width, 1, s))
            outputs += sum(p[1] for p in parts)
            macs += sum(p[2] for p in parts)
            h, cin = h2, 4 * width
    macs += 2048 * 1000
    assert outputs == 11_113_984
    assert macs / 1e9 == pytest.approx(4.089, abs=0.001)
    assert CNN_FLOPS_PER_ACTIVATION == pytest.approx(8.178e9 / outputs)


def test_ring_allreduce_is_2_n_minus_1_over_n_s_over_b_plus_latency(cat):
    v100 = cat.by_id("v100-sxm2-16gb")
    link = collective_link(v100, 8, 4, "ib-edr", nics_per_node=1)
    size = 100e6
    n, nodes = 32, 4
    expected_bw = 2 * (n - 1) / n * size / (link.bandwidth_gb_s * 1e9)
    # NCCL's model: base latency + (2(N-1) - 2(nodes-1)) intra steps + 2(nodes-1) network steps
    expected_lat = (8.4 + (2 * (n - 1) - 2 * (nodes - 1)) * 3.4 + 2 * (nodes - 1) * 9.6) * 1e-6
    assert allreduce_time_s(size, 8, nodes, link) == pytest.approx(expected_bw + expected_lat)
    # one EDR port at 90% of 12.5 GB/s is the bottleneck, not NVLink
    assert link.bandwidth_gb_s == pytest.approx(12.5 * 0.9)
    assert allreduce_time_s(size, 1, 1, link) == 0.0


def test_small_all_reduces_go_by_nccls_low_latency_protocol(cat):
    """NCCL times Simple and LL for each message and runs the faster (src/graph/tuning.cc): LL's
    latencies are 3.6 us + 0.47 us per NVLink step, at a quarter of the bus bandwidth."""
    h100 = cat.by_id("h100-sxm5-80gb")
    link = collective_link(h100, 8, 1, None)
    assert link.ll is not None and link.ll.bandwidth_share == 0.25
    n, steps = 8, 14
    # one decode token's hidden state of Llama 3.1 70B: 8,192 x 2 bytes, 160 calls a step
    size, calls = 16_384 * 160, 160
    bw = 2 * (n - 1) / n * size / (link.bandwidth_gb_s * 1e9)
    simple = bw + calls * (8.4 + steps * 3.4) * 1e-6
    ll = bw * 4 + calls * (3.6 + steps * 0.47) * 1e-6
    assert ll < simple and allreduce_time_s(size, 8, 1, link, calls=calls) == pytest.approx(ll)
    # a 25 MiB gradient bucket goes by Simple: LL's quarter bandwidth costs more than its latency saves
    bucket = 25 * 2**20
    simple_bucket = 2 * (n - 1) / n * bucket / (link.bandwidth_gb_s * 1e9) + (8.4 + steps * 3.4) * 1e-6
    assert allreduce_time_s(bucket, 8, 1, link) == pytest.approx(simple_bucket)
    # across nodes an intra-node LL step costs 1.8x; TCP has no LL figure and keeps Simple
    two = collective_link(h100, 8, 2, "ib-ndr")
    assert two.ll is not None and two.ll.intra_latency_us == pytest.approx(0.47 * 1.8)
    assert two.ll.inter_latency_us == 2.7
    assert collective_link(h100, 8, 2, "tcp-100g").ll is None


def test_tensor_parallel_decode_latency_uses_ll(cli):
    """Llama 3.1 70B at batch 1 on 8 H100s: 160 tensor-parallel all-reduces of 16 KB a step cost
    about 1.7 ms under LL, against 9.0 ms under Simple's 56 us a call."""
    import json as _json

    out = cli("estimate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--strategy",
              "tp", "--inference", "--batch", "1", "--json").stdout
    res = _json.loads(out)["results"]
    assert res["comm_s"] == pytest.approx(1.68e-3, rel=0.02)


def test_geforce_across_nodes_falls_back_to_tcp(cat):
    geforce = cat.by_id("rtx-2080-ti")
    tesla = cat.by_id("quadro-rtx-8000")
    assert not geforce.gpudirect_rdma and tesla.gpudirect_rdma
    g = collective_link(geforce, 4, 2, "ib-edr")
    t = collective_link(tesla, 4, 2, "ib-edr")
    assert g.transport == "tcp" and t.transport == "rdma"
    assert g.bandwidth_gb_s < t.bandwidth_gb_s
    assert g.inter_latency_us > t.inter_latency_us
    assert any("GPUDirect RDMA" in n for n in g.notes)
    # inside one node GeForce cards still talk peer to peer
    assert collective_link(geforce, 4, 1, None).transport == "pcie"


def test_nvlink_bandwidth_comes_from_the_gpu(cat):
    a100 = cat.by_id("a100-sxm4-80gb")
    link = collective_link(a100, 8, 1, None)
    assert link.transport == "nvlink"
    assert link.bandwidth_gb_s == pytest.approx(600 / 2 * 0.78)  # 600 GB/s bidirectional, per direction
    # an NVLink bridge joins pairs of PCIe cards; a ring over four needs PCIe
    assert collective_link(cat.by_id("rtx-3090"), 2, 1, None).transport == "nvlink"
    assert collective_link(cat.by_id("rtx-3090"), 4, 1, None).transport == "pcie"


def test_fp32_defaults_to_tf32_on_ampere_unless_disabled(cat):
    a100 = cat.by_id("a100-sxm4-80gb")
    value, label, notes = peak_tflops(a100, "fp32")
    assert value == a100.tensor_tf32_tflops and "TF32" in notes[0]
    assert peak_tflops(a100, "fp32", tf32=False)[0] == a100.fp32_tflops
    assert peak_tflops(a100, "tf32", tf32=False)[0] == a100.tensor_tf32_tflops


def test_peaks_by_precision(cat):
    assert peak_tflops(cat.by_id("a100-sxm4-80gb"), "mixed")[0] == 312.0  # FP16 Tensor, FP32 accumulate
    assert peak_tflops(cat.by_id("h100-sxm5-80gb"), "fp8")[0] == 1978.9
    assert peak_tflops(cat.by_id("v100-sxm2-16gb"), "fp64")[0] == 7.8
    # no FP8 on Ampere: falls back to the 16-bit rate and says so
    value, _, notes = peak_tflops(cat.by_id("a100-sxm4-80gb"), "fp8")
    assert value == 312.0 and "no FP8" in notes[0]
    # Pascal GP102 (cc 6.1) has DP4A: INT8 = 4x FP32 (Tesla P40: 47 TOPS vs 12 TFLOPS)
    assert peak_tflops(cat.by_id("tesla-p40"), "int8")[0] == pytest.approx(4 * 12.0)
    # GTX 1080 Ti FP16 is 1/64 rate: AMP keeps FP32 math with 16-bit storage
    assert peak_tflops(cat.by_id("gtx-1080-ti"), "mixed")[0] == cat.by_id("gtx-1080-ti").fp32_tflops
    with pytest.raises(UsageError):
        peak_tflops(cat.by_id("a30"), "nonsense")


def test_decode_is_bandwidth_bound_and_prefill_compute_bound(cat, zoo):
    gpu = cat.by_id("a100-sxm4-80gb")
    shp = shape(zoo, "llama-2-7b")
    decode = est(gpu, shp, mode="inference", precision="fp16", batch=1, seq_len=1024)
    # serving engines fuse attention (no s x s score matrix in memory)
    prefill = est(gpu, shp, mode="inference", precision="fp16", batch=1, seq_len=2048, phase="prefill",
                  flash_attention=True)
    assert decode.bound == "memory" and decode.throughput_unit == "tokens/s"
    assert prefill.bound == "compute"
    assert prefill.throughput_per_s > 20 * decode.throughput_per_s
    # bytes per token: the fp16 weights (minus the input embedding) plus the KV cache read
    m = zoo.resolve("llama-2-7b")
    weights = estimate_memory(shp, RunConfig(mode="inference", precision="fp16", batch=1, seq_len=1024)).weights_bytes
    kv = 2 * m.layers * 1024 * m.n_kv_heads * m.attention_head_dim * 2
    assert decode.memory_traffic_bytes == pytest.approx(weights - m.vocab * m.hidden * 2 + kv)


def test_decode_batch_raises_throughput_but_not_linearly(cat, zoo):
    gpu = cat.by_id("h100-sxm5-80gb")
    shp = shape(zoo, "llama-2-7b")
    speeds = [est(gpu, shp, mode="inference", precision="fp16", batch=b, seq_len=1024).throughput_per_s
              for b in (1, 8, 64)]
    assert speeds[0] < speeds[1] < speeds[2]
    assert speeds[2] < 64 * speeds[0]


def test_gradient_accumulation_amortises_communication(cat, zoo):
    gpu = cat.by_id("rtx-3090")
    shp = shape(zoo, "bert-large")
    kw = dict(mode="train", precision="mixed", batch=8, seq_len=128, gpus=4, nodes=2, interconnect="tcp-10g")
    one = est(gpu, shp, **kw)
    eight = est(gpu, shp, grad_accumulation=8, **kw)
    assert eight.comm_exposed_s < one.comm_exposed_s
    assert eight.throughput_per_s > one.throughput_per_s


def test_sm_count_from_cuda_cores_and_compute_capability(cat):
    """FP32 lanes per SM from the CUDA C++ Programming Guide (64 on 6.0/7.x/8.0, 128 on 6.1/8.6/8.9/9.0)."""
    expected = {"a100-sxm4-80gb": 108, "h100-pcie-80gb": 114, "h100-sxm5-80gb": 132, "rtx-4090": 128,
                "rtx-3090": 82, "v100-sxm2-16gb": 80, "p100-sxm2-16gb": 56, "tesla-p40": 30, "t4": 40,
                "rtx-6000-ada": 142}
    for gpu_id, sms in expected.items():
        assert sm_count(cat.by_id(gpu_id)) == sms, gpu_id


def test_small_batch_decode_runs_on_cuda_cores_and_is_limited_per_sm(cat, zoo):
    """Batch <= 8 decode: matrix-vector kernels on CUDA cores, whose weight stream is capped by
    Little's law at SMs x sm_bandwidth_gb_s; batched decode keeps Tensor Core GEMMs."""
    cal = load_calibration()
    eff = cal.lookup("llm-decode", "ampere")
    assert eff.sm_bandwidth_gb_s > 0
    shp = shape(zoo, "llama-2-7b")
    a100 = cat.by_id("a100-sxm4-80gb")
    one = est(a100, shp, mode="inference", precision="int4", batch=1, seq_len=512)
    assert one.peak_tflops == a100.fp32_tflops and "CUDA cores" in one.peak_label
    assert any("matrix-vector" in n for n in one.notes)
    many = est(a100, shp, mode="inference", precision="int4", batch=64, seq_len=512)
    assert many.peak_tflops == a100.tensor_fp16_tflops
    # the A100's weight stream is SM-bound: 108 SMs x q is below 2039 GB/s x eta_m
    sm_rate = 108 * eff.sm_bandwidth_gb_s * 1e9
    assert sm_rate < a100.bandwidth_gb_s * 1e9 * eff.memory_efficiency
    work = model_work(shp, RunConfig(mode="inference", precision="int4", batch=1, seq_len=512), "int4")
    assert work.gemv
    assert one.memory_s == pytest.approx(work.matmul_bytes / sm_rate)
    # an RTX 4090 has more SMs and half the bandwidth: it stays bandwidth-bound
    g4090 = cat.by_id("rtx-4090")
    d4090 = est(g4090, shp, mode="inference", precision="int4", batch=1, seq_len=512)
    assert d4090.memory_s == pytest.approx(work.matmul_bytes / (g4090.bandwidth_gb_s * 1e9 * eff.memory_efficiency))


def test_roofline_is_a_smooth_maximum():
    assert roofline(3.0, 4.0, 2.0) == pytest.approx(5.0)
    assert roofline(3.0, 4.0, 1.0) == pytest.approx(7.0)
    assert max(3.0, 4.0) < roofline(3.0, 4.0, 8.0) < 4.1


def test_tensor_parallel_decode_splits_the_model(cat, zoo):
    gpu = cat.by_id("h100-sxm5-80gb")
    shp = shape(zoo, "llama-2-70b")
    tp4 = est(gpu, shp, mode="inference", precision="int8", compute_precision="fp8", batch=64, seq_len=1024,
              gpus=4, strategy="tp")
    assert tp4.comm_s > 0 and tp4.gpus_total == 4
    assert 1.0 < tp4.speedup_vs_1gpu < 4.0
    assert tp4.scaling_efficiency <= 1.0


def test_default_batch_uses_the_memory_model(cat, zoo):
    gpu = cat.by_id("rtx-3090")
    shp = shape(zoo, "bert-large")
    cfg = RunConfig(mode="train", precision="mixed", seq_len=512)
    choice = default_batch(shp, cfg, gpu.memory_bytes)
    assert choice.largest_fitting is not None
    assert choice.batch == min(choice.largest_fitting, choice.cap)
    assert estimate_memory(shp, cfg.model_copy(update={"batch": choice.batch})).total_bytes <= gpu.memory_bytes
    with pytest.raises(NothingFitsError):
        default_batch(shape(zoo, "llama-2-70b"), RunConfig(mode="train", precision="mixed", seq_len=512),
                      gpu.memory_bytes)


def test_time_to_train_and_cost(cat, zoo):
    e = est(cat.by_id("a100-sxm4-80gb"), shape(zoo, "resnet50"), mode="train", batch=256, image_size=224)
    tt = time_to_train(e, samples=90 * 1_281_167)
    assert tt.seconds == pytest.approx(90 * 1_281_167 / e.throughput_per_s)
    assert tt.cost_usd is None
    priced = time_to_train(e, samples=1e6, price_per_gpu_hour=2.0)
    assert priced.cost_usd == pytest.approx(priced.gpu_hours * 2.0)
    llm = est(cat.by_id("a100-sxm4-80gb"), shape(zoo, "gpt2"), mode="train", batch=8, seq_len=1024)
    assert time_to_train(llm, tokens=1e9).seconds == pytest.approx(1e9 / llm.throughput_per_s)
    with pytest.raises(UsageError):
        time_to_train(e, tokens=1e9)


def test_scaling_curve_reaches_the_cluster(cat, zoo):
    counts = scaling_counts(8, 4)
    assert counts[0] == (1, 1) and counts[-1] == (8, 4)
    assert scaling_counts(1, 1)[-1] == (8, 1)
    curve = scaling_curve(cat.by_id("v100-sxm2-16gb"), shape(zoo, "resnet50"),
                          RunConfig(mode="train", batch=64, image_size=224), counts, interconnect="ib-edr")
    speedups = [p.speedup_vs_1gpu for p in curve]
    assert speedups == sorted(speedups)
    assert curve[0].speedup_vs_1gpu == 1.0


def test_interconnect_data_file():
    links = load_interconnects()
    ids = {i.id for i in links.interconnects}
    assert {"nvlink1", "nvlink2", "nvlink3", "nvlink4", "nvlink5", "pcie3", "pcie4", "pcie5", "ib-edr", "ib-hdr",
            "ib-ndr", "roce-100g", "tcp-10g", "tcp-25g", "tcp-100g"} <= ids
    for link in links.interconnects:
        assert link.sources
        covered = {f for s in link.sources for f in s.fields}
        assert {"bandwidth_gb_s", "efficiency", "latency_us"} <= covered, link.id
    assert links.get("ib-hdr").bandwidth_gb_s == 25.0  # 200 Gb/s
    with pytest.raises(UsageError):
        links.get("ib-xdr")


# --------------------------------------------------------------------------
# invariants


def _scaled(gpu, compute: float, bandwidth: float):
    fields = ("fp64_tflops", "fp32_tflops", "fp16_tflops", "tensor_tf32_tflops", "tensor_fp16_tflops",
              "tensor_fp16_fp16acc_tflops", "tensor_bf16_tflops", "tensor_fp8_tflops", "tensor_fp4_tflops",
              "tensor_int8_tops")
    update = {f: getattr(gpu, f) * compute for f in fields if getattr(gpu, f) is not None}
    update["bandwidth_gb_s"] = gpu.bandwidth_gb_s * bandwidth
    return gpu.model_copy(update=update)


WORKLOADS = [
    ("resnet50", dict(mode="train", precision="mixed", batch=128, image_size=224)),
    ("bert-large", dict(mode="train", precision="mixed", batch=16, seq_len=128, gpus=8, nodes=2,
                        interconnect="ib-hdr")),
    ("llama-2-7b", dict(mode="inference", precision="int4", batch=4, seq_len=512)),
    ("llama-2-70b", dict(mode="inference", precision="fp16", batch=32, seq_len=1024, gpus=4, strategy="tp")),
    ("lstm-lm", dict(mode="train", precision="fp32", batch=32, seq_len=35, gpus=4)),
]


@settings(max_examples=60, deadline=None)
@given(
    gpu_id=st.sampled_from(["v100-sxm2-16gb", "rtx-2080-ti", "a100-sxm4-80gb", "rtx-4090", "h100-sxm5-80gb",
                            "p100-sxm2-16gb"]),
    workload=st.sampled_from(range(len(WORKLOADS))),
    compute=st.floats(1.0, 4.0),
    bandwidth=st.floats(1.0, 4.0),
)
def test_throughput_never_drops_with_more_peak_or_bandwidth(cat, zoo, gpu_id, workload, compute, bandwidth):
    name, kw = WORKLOADS[workload]
    gpu = cat.by_id(gpu_id)
    base = est(gpu, shape(zoo, name), **dict(kw))
    faster = est(_scaled(gpu, compute, bandwidth), shape(zoo, name), **dict(kw))
    assert faster.throughput_per_s >= base.throughput_per_s * (1 - 1e-9)


@settings(max_examples=40, deadline=None)
@given(
    gpu_id=st.sampled_from(["a100-sxm4-80gb", "h100-sxm5-80gb", "rtx-4090", "v100-sxm2-16gb", "l40s"]),
    model=st.sampled_from(["mpt-125m", "mpt-1b", "llama-2-7b", "gpt2"]),
    log_seq=st.integers(8, 14),
    precision=st.sampled_from(["mixed", "bf16", "fp8"]),
    flash=st.booleans(),
)
def test_tokens_per_second_fall_as_sequences_grow_at_fixed_tokens_per_step(
        cat, zoo, gpu_id, model, log_seq, precision, flash):
    """Attention work per token grows with the context, so at a fixed number of tokens per
    step a longer sequence is never faster."""
    gpu = cat.by_id(gpu_id)
    s = shape(zoo, model)
    kw = {"mode": "train", "precision": "mixed", "compute_precision": precision, "flash_attention": flash}
    seq = 2 ** log_seq
    short = est(gpu, s, batch=2 ** 15 // seq, seq_len=seq, **kw)
    long = est(gpu, s, batch=2 ** 14 // seq, seq_len=2 * seq, **kw)
    assert long.throughput_per_s <= short.throughput_per_s * (1 + 1e-9)


@settings(max_examples=80, deadline=None)
@given(
    gpu_id=st.sampled_from(["v100-sxm2-16gb", "rtx-3090", "a100-sxm4-80gb", "h100-sxm5-80gb", "gtx-1080-ti"]),
    workload=st.sampled_from(range(len(WORKLOADS))),
    gpus=st.sampled_from([1, 2, 4, 8]),
    nodes=st.sampled_from([1, 2, 4, 16]),
    interconnect=st.sampled_from([None, "ib-edr", "ib-ndr", "roce-100g", "tcp-10g", "tcp-100g"]),
    strategy=st.sampled_from(["ddp", "zero1", "zero3", "fsdp", "tp"]),
)
# the lone GPU of an FSDP run runs FSDP's mixed precision too (no autocast copies): timed as plain
# AMP it was 8% slower, and 8 V100s came out 11.4x faster than one
@example(gpu_id="v100-sxm2-16gb", workload=1, gpus=8, nodes=1, interconnect=None, strategy="fsdp")
def test_scaling_efficiency_is_at_most_one_but_for_a_partitioned_optimizer_step(cat, zoo, gpu_id, workload, gpus, nodes, interconnect, strategy):
    name, kw = WORKLOADS[workload]
    kw = {**kw, "gpus": gpus, "nodes": nodes, "interconnect": interconnect, "strategy": strategy}
    s = shape(zoo, name)
    if strategy == "tp" and gpus > 1 and (s.transformer is None or s.transformer.heads % gpus):
        with pytest.raises(UsageError):  # tp needs a transformer whose heads divide the GPU count
            est(cat.by_id(gpu_id), s, **kw)
        return
    gpu = cat.by_id(gpu_id)
    e = est(gpu, s, **kw)
    assert e.throughput_per_s > 0 and e.step_time_s > 0
    if strategy in ("ddp", "tp"):
        assert 0 < e.scaling_efficiency <= 1.0 + 1e-9
        assert e.speedup_vs_1gpu <= e.gpus_total * (1 + 1e-9)
        return
    # ZeRO and FSDP partition the optimizer step, so a rank's step can be shorter than a lone
    # GPU's by at most that step's memory time; nothing else gets faster with more GPUs
    lone = est(gpu, s, **{**kw, "gpus": 1, "nodes": 1})
    run = {k: v for k, v in kw.items() if k not in ("nodes", "interconnect")} | {"gpus": 1}
    opt_s = model_work(s, RunConfig(**run), lone.compute_precision).optimizer_bytes / (
        gpu.bandwidth_gb_s * 1e9 * lone.memory_efficiency)
    assert 0 < e.speedup_vs_1gpu <= e.gpus_total * lone.step_time_s / (lone.step_time_s - opt_s) * (1 + 1e-9)


def test_sm_counts_from_cores_or_from_the_fp32_identity(cat):
    """SMs = CUDA cores / FP32 lanes per SM (CUDA C++ Programming Guide); without a core
    count, FP32 peak / (2 x lanes x boost clock). Whitepaper SM counts: A100 108, H100 SXM5
    132, RTX 4090 128, V100 80, P100 56; the H100 NVL (no core count in its datasheet) comes
    out at 131 of the die's 132."""
    from gpusizer.performance.estimate import sm_count

    expected = {"a100-sxm4-80gb": 108, "h100-sxm5-80gb": 132, "rtx-4090": 128, "v100-sxm2-16gb": 80,
                "p100-sxm2-16gb": 56, "h100-nvl-94gb": 131}
    assert {g: sm_count(cat.by_id(g)) for g in expected} == expected
    assert sm_count(cat.by_id("b200-sxm-180gb")) == 148  # Chips and Cheese, measured: 2 x 74 SMs
    assert sm_count(cat.by_id("b300-sxm-288gb")) is None  # neither cores nor clock published


# --------------------------------------------------------------------------
# unknown is not absent; constants stay within their class


def test_resnet50_mixed_follows_the_tensor_rates_of_the_cards_the_audit_named(cat, zoo):
    """RTX 5080 and 4060 Ti 16GB had no tensor rate and ran at their CUDA-core rate, and the
    RTX 5090 took the H100's 11% CNN efficiency; now each runs at its (derived) Tensor Core rate
    with the constants of its class: 5090 > 4090 > 5080 > 4080 > 4060 Ti."""
    shp = shape(zoo, "resnet50")
    speed = {}
    for gpu_id in ("rtx-5090", "rtx-4090", "rtx-5080", "rtx-4080", "rtx-4060-ti-16gb", "rtx-3090-ti"):
        e = est(cat.by_id(gpu_id), shp, mode="train", batch=64, precision="mixed")
        assert "Tensor Core" in e.peak_label, gpu_id
        assert not any("has no" in n and "Tensor Cores" in n for n in e.notes), (gpu_id, e.notes)
        speed[gpu_id] = e.throughput_per_s
    assert speed["rtx-5090"] > speed["rtx-4090"] > speed["rtx-5080"] > speed["rtx-4080"] > speed["rtx-4060-ti-16gb"]
    assert speed["rtx-3090-ti"] > est(cat.by_id("rtx-3090"), shp, mode="train", batch=64, precision="mixed").throughput_per_s


def test_bf16_on_the_3090_ti_runs_on_its_tensor_cores(cat, zoo):
    e = est(cat.by_id("rtx-3090-ti"), shape(zoo, "bert-base"), mode="train", batch=32, seq_len=128, precision="bf16")
    assert e.peak_tflops == 80 and "bf16 Tensor Core" in e.peak_label
    assert not any("no BF16" in n for n in e.notes)


def test_an_unknown_tensor_rate_is_a_lower_bound_with_a_wide_band_never_absent(cat, zoo):
    """A GPU with Tensor Cores whose rate nothing gives (no source, no rule: here no clock) is
    computed at its CUDA-core rate as a stated lower bound, with the error band widened."""
    from gpusizer.performance.peak import UNKNOWN_RATE_BAND, peak_detail

    nulls = {f: None for f in ("tensor_tf32_tflops", "tensor_fp16_tflops", "tensor_fp16_fp16acc_tflops",
                               "tensor_bf16_tflops", "tensor_fp8_tflops", "tensor_fp4_tflops", "tensor_int8_tops")}
    gpu = cat.by_id("rtx-4080").model_copy(update={**nulls, "boost_clock_mhz": None, "derived": ()})
    assert gpu.has_tensor_cores and gpu.provenance("tensor_fp16_tflops") == "unknown"
    detail = peak_detail(gpu, "mixed")
    assert detail.unknown_rate and detail.tflops == gpu.fp32_tflops and "unknown" in detail.label
    e = est(gpu, shape(zoo, "resnet50"), mode="train", batch=64, precision="mixed")
    assert e.error_band >= UNKNOWN_RATE_BAND
    assert any("lower bound" in n for n in e.notes) and not any("has no" in n for n in e.notes)
    # a GPU without Tensor Cores still says so
    pascal = peak_detail(cat.by_id("gtx-1080-ti"), "mixed")
    assert not pascal.unknown_rate and any("has no Tensor Cores" in n for n in pascal.notes)


def test_calibration_constants_do_not_leak_across_segments(cat, zoo):
    """The cnn-train hopper-blackwell entry (11% of peak) was fitted on H100s: it serves the
    data-center Hopper and Blackwell parts; a consumer Blackwell card falls back to the class's
    'all' entry, says so, and states a wider band."""
    from gpusizer.performance.calibration import UNCOVERED_BAND_FACTOR

    cal = load_calibration()
    shp = shape(zoo, "resnet50")
    h100 = est(cat.by_id("h100-sxm5-80gb"), shp, mode="train", batch=64, precision="mixed")
    b200 = est(cat.by_id("b200-sxm-180gb"), shp, mode="train", batch=64, precision="mixed")
    rtx = est(cat.by_id("rtx-5090"), shp, mode="train", batch=64, precision="mixed")
    ada = est(cat.by_id("rtx-4090"), shp, mode="train", batch=64, precision="mixed")
    special = cal.lookup("cnn-train", "hopper")
    assert special.generation == "hopper-blackwell" and h100.compute_efficiency == b200.compute_efficiency
    assert h100.compute_efficiency == special.compute_efficiency and h100.error_band == cal.error_band
    assert rtx.compute_efficiency == cal.lookup("cnn-train", "maxwell").compute_efficiency  # the 'all' entry
    assert rtx.error_band == pytest.approx(cal.error_band * UNCOVERED_BAND_FACTOR)
    assert any("no cnn-train measurement covers consumer Blackwell" in n for n in rtx.notes)
    assert ada.error_band == cal.error_band  # consumer Ada CNN training is measured
    # without a segment the lookup is what benchmarks/calibrate.py fits with
    assert cal.lookup("cnn-train", "blackwell") is special
    assert cal.lookup("cnn-train", "blackwell", "consumer").generation == "all"


def test_calibration_coverage_is_the_classes_of_the_fitted_rows(cat, cases):
    """`covers` records the generation/segment of every GPU an entry was fitted on, so a
    refit that drops it (benchmarks/calibrate.py must write it) fails here, not silently."""
    usable, _ = cases
    gpu_of = {c.id: c.gpu for c in usable}
    cal = load_calibration()
    for entry in cal.efficiencies:
        classes = {f"{cal.generation_of(gpu_of[i].architecture)}/{gpu_of[i].segment}" for i in entry.fitted_on}
        assert set(entry.covers) == classes, (entry.workload, entry.generation)


@pytest.mark.parametrize("strategy", ["zero3", "fsdp"])
def test_gathered_weights_are_read_in_full_whatever_the_shard_count(zoo, strategy):
    """Under ZeRO-3 and FSDP every rank gathers each layer and multiplies by the whole weight, so
    the bytes its matmuls read are DDP's, at 8 GPUs as at 128 (they were once the rank's shard,
    negative at 8 GPUs for Llama 3.2 1B once the unsharded embedding was subtracted)."""
    shp = shape(zoo, "llama-3.2-1b")
    run = {"mode": "train", "precision": "mixed", "batch": 1, "seq_len": 2048}
    ddp = model_work(shp, RunConfig(**run, gpus=8, strategy="ddp"), "mixed", dp=8).matmul_bytes
    for gpus in (8, 128):
        sharded = model_work(shp, RunConfig(**run, gpus=gpus, strategy=strategy), "mixed", dp=gpus).matmul_bytes
        assert sharded == ddp > 0


def test_zero_optimizer_step_reads_only_the_ranks_partition(zoo):
    """ZeRO-1/2 update only their partition of the weights (then all-gather them): over 8 GPUs the
    optimizer step's traffic is an eighth of one GPU's, as under ZeRO-3."""
    shp = shape(zoo, "llama-3.2-1b")
    run = {"mode": "train", "precision": "mixed", "batch": 1, "seq_len": 2048}
    one = model_work(shp, RunConfig(**run), "mixed").optimizer_bytes
    for strategy in ("zero1", "zero2", "zero3"):
        eight = model_work(shp, RunConfig(**run, gpus=8, strategy=strategy), "mixed", dp=8).optimizer_bytes
        assert eight == pytest.approx(one / 8, rel=0.01)


def test_scaling_speed_up_is_the_throughput_ratio_to_one_gpu(zoo, cat):
    """The speed-up column is the row's throughput over the same run's on one GPU (same batch per
    GPU), so it agrees with the tokens/s column."""
    gpu, shp = cat.by_id("h100-sxm5-80gb"), shape(zoo, "llama-3.1-8b")
    run = {"mode": "train", "precision": "mixed", "batch": 2, "seq_len": 2048, "checkpointing": True}
    one = estimate_performance(gpu, shp, RunConfig(**run))
    assert one.speedup_vs_1gpu == 1.0
    for strategy, gpus in (("fsdp", 8), ("zero2", 4), ("ddp", 2)):
        est = estimate_performance(gpu, shp, RunConfig(**run, gpus=gpus, strategy=strategy))
        # (one GPU under FSDP still runs FSDP's mixed precision: no autocast copies)
        lone = estimate_performance(gpu, shp, RunConfig(**run, gpus=1, strategy=strategy))
        assert est.speedup_vs_1gpu == pytest.approx(est.throughput_per_s / lone.throughput_per_s, rel=1e-9)
        assert (lone.throughput_per_s > one.throughput_per_s) == (strategy == "fsdp")


def test_fsdp_gathers_weights_in_the_compute_dtype(zoo, cat):
    """PyTorch FSDP's MixedPrecision gathers param_dtype (bf16) copies of its fp32 shards and
    reduce-scatters fp32 gradients (torchtitan's and LLM Foundry's defaults): (N-1)/N x (2 + 2 + 4)
    bytes a parameter a step, against DeepSpeed ZeRO-3's 16-bit (2 + 2 + 2). It had gathered fp32 (12)."""
    gpu, shp = cat.by_id("l40s"), shape(zoo, "gpt2-xl")
    run = {"mode": "train", "precision": "mixed", "batch": 4, "seq_len": 1024, "gpus": 8}
    params = model_work(shp, RunConfig(**run, strategy="fsdp"), "mixed", dp=8).gradient_bytes / 4
    fsdp = estimate_performance(gpu, shp, RunConfig(**run, strategy="fsdp")).comm_bytes
    zero3 = estimate_performance(gpu, shp, RunConfig(**run, strategy="zero3")).comm_bytes
    assert fsdp == pytest.approx(7 / 8 * 8 * params, rel=1e-6)
    assert zero3 == pytest.approx(7 / 8 * 6 * params, rel=1e-6)


def test_fsdp_lora_gathers_the_frozen_base(zoo, cat):
    """Under FSDP a LoRA run's frozen base is sharded too and gathered each pass: the traffic is the
    base's 16-bit weights twice, not the adapters' gradients alone."""
    gpu, shp = cat.by_id("a100-sxm4-80gb"), shape(zoo, "llama-2-7b")
    run = {"mode": "train", "precision": "bf16", "batch": 1, "seq_len": 2048, "gpus": 8, "strategy": "fsdp"}
    est_ = estimate_performance(gpu, shp, RunConfig(**run, adapter={"rank": 16}))
    # two 16-bit gathers of the base a step, and the adapters' fp32 weights and gradients (2% more)
    assert est_.comm_bytes == pytest.approx(7 / 8 * 2 * 2 * shp.params, rel=0.03)


def test_zero1_and_2_wait_for_the_weights_gathered_after_the_step(zoo, cat):
    """DeepSpeed ZeRO-1/2 reduce-scatter gradients during backward but all-gather the updated
    16-bit weights after the optimizer step (stage_1_and_2.py, step): half the traffic is exposed."""
    gpu, shp = cat.by_id("l40s"), shape(zoo, "gpt2-xl")
    run = {"mode": "train", "precision": "mixed", "batch": 4, "seq_len": 1024, "gpus": 8}
    for strategy in ("zero1", "zero2"):
        e = estimate_performance(gpu, shp, RunConfig(**run, strategy=strategy))
        # the all-gather in full, and of the reduce-scatter only its last 25 MiB bucket (0.4% of 3.1 GB)
        assert e.comm_exposed_s == pytest.approx(e.comm_s / 2, rel=0.01)
    # above N GPUs' worth, the note weighs the sharded optimizer step against the exposed all-gather
    a100 = cat.by_id("a100-sxm4-80gb")
    e = estimate_performance(a100, shape(zoo, "llama-2-7b"), RunConfig(mode="train", precision="mixed", batch=1,
                             seq_len=2048, gpus=8, strategy="zero1"), nodes=2)
    assert e.scaling_efficiency > 1 and e.comm_exposed_s > 0.05
    assert any(n.startswith("scaling above 100%: under zero1") and f"that saves more than the {e.comm_exposed_s * 1e3:,.1f} "
               "ms a step waits for communication" in n for n in e.notes)


def test_a_speed_up_above_n_and_a_baseline_one_gpu_cannot_hold_are_explained(zoo, cat):
    gpu, shp = cat.by_id("l40s"), shape(zoo, "llama-3.1-8b")
    run = {"mode": "train", "precision": "mixed", "batch": 7, "seq_len": 2048, "checkpointing": True, "gpus": 8}
    e = estimate_performance(gpu, shp, RunConfig(**run, strategy="fsdp"))
    assert e.scaling_efficiency > 1.0
    assert any(n.startswith("scaling above 100%: under fsdp each GPU runs the optimizer step on 1/8") for n in e.notes)
    assert any("hypothetical run" in n and "l40s has 48.00 GiB" in n for n in e.notes)
    ddp = estimate_performance(cat.by_id("h100-sxm5-80gb"), shape(zoo, "resnet50"),
                               RunConfig(mode="train", precision="mixed", batch=64, gpus=8))
    assert ddp.scaling_efficiency <= 1.0 and not any("hypothetical" in n or "above 100%" in n for n in ddp.notes)
