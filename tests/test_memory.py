"""The memory model: published and self-measured references, exact formulas, properties."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape, TransformerShape, arch_of, shape_from_model, shape_from_params
from gpusizer.memory.estimate import (
    estimate_memory,
    fewest_gpus,
    fits,
    kv_cache_bytes,
    largest_batch,
    optimizer_step_bytes,
    rule_of_thumb_params,
)
from gpusizer.models.zoo import Model, load_zoo

DATA = Path(__file__).parent / "data"
ZOO = load_zoo()
REF_FILES = sorted(DATA.glob("memory_refs*.yaml"))


def _cases():
    out = []
    for path in REF_FILES:
        for case in yaml.safe_load(path.read_text())["cases"]:
            out.append(pytest.param(case, id=case["id"]))
    return out


def _shape(case) -> ModelShape:
    if case.get("model"):
        return shape_from_model(ZOO.resolve(case["model"]))
    raw = {k: v for k, v in case["shape"].items() if k in Model.model_fields}
    raw.setdefault("id", case["id"].lower())
    raw.setdefault("name", case["id"])
    raw.setdefault("sources", [{"title": case["source"]["title"]}])
    return shape_from_model(Model.model_validate(raw))


#: The CUDA context measured in the HF docs run that the `device` cases come from
#: ("GPU memory occupied: 1343 MB" after torch.ones((1, 1)).to("cuda")).
HF_DOCS_CONTEXT_BYTES = 1343 * 2**20


def estimate_case(case) -> tuple[int, int]:
    """(estimated, measured) bytes for one reference case."""
    device = case["measures"] == "device"
    cfg = RunConfig(
        mode=case["mode"],
        precision=case["precision"],
        optimizer=case.get("optimizer") or "sgd",
        batch=case["batch"],
        seq_len=case.get("seq_len"),
        image_size=case.get("image_size"),
        checkpointing=bool(case.get("checkpointing")),
        flash_attention=bool(case.get("flash_attention")),
        head=case.get("head", "lm"),
        target_len=case.get("target_len"),
        persistent_grads=bool(case.get("persistent_grads")),
        optimizer_impl=case.get("optimizer_impl", "foreach"),
        context_bytes=HF_DOCS_CONTEXT_BYTES if device else 0,
    )
    est = estimate_memory(_shape(case), cfg)
    return (est.total_bytes if device else est.tensor_peak_bytes), case["measured_peak_bytes"]


def _errors():
    return [(c.values[0]["id"], (lambda e, m: (e - m) / m)(*estimate_case(c.values[0]))) for c in _cases()]


def test_reference_cases_exist():
    ids = [c.values[0]["id"] for c in _cases()]
    assert len(ids) >= 20
    assert len(ids) == len(set(ids))


def test_median_error_within_10_percent_and_every_case_within_25():
    errors = _errors()
    median = statistics.median(abs(e) for _, e in errors)
    worst = max(errors, key=lambda x: abs(x[1]))
    assert median <= 0.10, f"median relative error {median:.1%}"
    assert abs(worst[1]) <= 0.25, f"worst case {worst[0]}: {worst[1]:+.1%}"


# ----- exact formulas ------------------------------------------------------------------------


def test_rule_of_thumb_reproduces_source_figures():
    """SEED-FACTS (Dettmers): GTX Titan 6 GB -> 752,877,568 params; 1536 MB -> 148,897,792."""
    assert rule_of_thumb_params(6 * 1024) == 752_877_568
    assert rule_of_thumb_params(1536) == 148_897_792


def test_rule_of_thumb_through_cli(cli_json, tmp_path):
    card = tmp_path / "titan.yaml"
    card.write_text(
        "gpus:\n  - id: gtx-titan-6gb\n    name: GTX Titan 6 GB\n    segment: consumer\n    architecture: maxwell\n"
        "    compute_capability: '3.5'\n    launch_year: 2013\n    memory_gib: 6\n    memory_type: GDDR5\n"
        "    bandwidth_gb_s: 288\n    fp32_tflops: 4.5\n    ecc: false\n    gpudirect_rdma: false\n"
        "    form_factor: PCIe dual-slot\n    sources: [{title: test fixture for the rule of thumb}]\n"
    )
    doc = cli_json("fit-model", "--params", "752877568", "--method", "rule-of-thumb", "--gpu", "gtx-titan-6gb",
                   "--catalog", str(card), "--precision", "fp32", "--optimizer", "momentum")
    row = doc["results"]["gpus"][0]
    assert row["rule_of_thumb_params"] == 752_877_568
    assert row["fits"] is True
    over = cli_json("fit-model", "--params", "752877569", "--method", "rule-of-thumb", "--gpu", "gtx-titan-6gb",
                    "--catalog", str(card), code=4)
    assert over["results"]["gpus"][0]["fits"] is False


@pytest.mark.parametrize(("size", "published"), [("6GiB", 752_877_568), ("1536MiB", 148_897_792)])
def test_rule_of_thumb_figures_for_a_card_given_by_its_memory(cli_json, size, published):
    """SEED-FACTS (Dettmers): the same figures as above, asked with --memory instead of an
    11-field catalog entry (the source's "6 GB" is 6,144 MB)."""
    doc = cli_json("fit-model", "--params", str(published), "--method", "rule-of-thumb", "--memory", size)
    (row,) = doc["results"]["gpus"]
    assert row["rule_of_thumb_params"] == published and row["fits"] is True
    assert row["gpu_id"] is None and row["gpu_name"] == f"{size} card" and row["capacity_source"] == "given"
    assert doc["input"]["gpus_checked"] == [f"{size} card"]
    over = cli_json("fit-model", "--params", str(published + 1), "--method", "rule-of-thumb", "--memory", size, code=4)
    assert over["results"]["gpus"][0]["fits"] is False


def test_memory_sizes_are_read_as_written_and_checked_next_to_catalog_gpus(cli_json):
    doc = cli_json("fit-model", "--model", "resnet50", "--batch", "64", "--gpu", "rtx-3060",
                   "--memory", "6GB", "--memory", "6GiB")
    rows = {g["gpu_name"]: g for g in doc["results"]["gpus"]}
    assert rows["6GB card"]["memory_bytes"] == 6 * 10**9 and rows["6GiB card"]["memory_bytes"] == 6 * 2**30
    (catalog_row,) = [g for g in doc["results"]["gpus"] if g["gpu_id"] == "rtx-3060-12gb"]
    assert catalog_row["capacity_source"] == "catalog" and len(rows) == 3
    # more memory never holds a smaller batch
    assert rows["6GB card"]["max_batch"] <= rows["6GiB card"]["max_batch"]


@pytest.mark.parametrize(("size", "words"), [("lots", "is not a size"), ("1MB", "must be between"),
                                             ("1e9TB", "must be between"), ("1e300GiB", "too large")])
def test_a_bad_memory_size_is_a_usage_error(cli, size, words):
    result = cli("fit-model", "--params", "7B", "--memory", size)
    assert result.exit_code == 2 and result.stderr.startswith("Error: --memory: ") and words in result.stderr


@pytest.mark.parametrize(
    ("precision", "optimizer", "bytes_per_param"),
    [
        ("mixed", "adam", 16),  # fp32 weights 4 + fp32 grads 4 + Adam m, v 8 (ZeRO paper: 16 B/param)
        ("fp32", "momentum", 12),  # weights 4 + grads 4 + momentum 4
        ("fp32", "sgd", 8),
        ("bf16", "adamw", 8),  # pure bf16: weights, grads, m and v all 2 bytes
        ("fp16", "momentum", 6),
    ],
)
def test_bytes_per_parameter_tables(precision, optimizer, bytes_per_param):
    shape = shape_from_params(10**9)
    est = estimate_memory(shape, RunConfig(precision=precision, optimizer=optimizer))
    assert est.weights_bytes + est.gradients_bytes + est.optimizer_bytes == bytes_per_param * 10**9


@pytest.mark.parametrize(
    ("strategy", "gb"),
    [("ddp", 120.0), ("zero1", 31.4), ("zero2", 16.6), ("zero3", 1.9)],
)
def test_zero_paper_figure_1_model_states(strategy, gb):
    """ZeRO (Rajbhandari et al. 2020), Figure 1: a 7.5B-parameter model on 64 GPUs with mixed
    precision and Adam holds 120 GB of model states a GPU under data parallelism, 31.4 GB with
    the optimizer state partitioned (P_os), 16.6 GB with the gradients too (P_os+g) and 1.9 GB
    with the parameters too (P_os+g+p): 2 + 2 + 12 bytes a parameter, K = 12 partitioned. Under
    DeepSpeed the fp32 master weights live in the optimizer partition (it runs AMP as its own
    16-bit mode), so P_os keeps only 16-bit weights and gradients whole."""
    psi = 7_500_000_000
    est = estimate_memory(shape_from_params(psi), RunConfig(precision="mixed", optimizer="adam", gpus=64,
                                                            strategy=strategy))
    states = est.weights_bytes + est.gradients_bytes + est.optimizer_bytes
    exact = {"ddp": 16 * psi, "zero1": 4 * psi + 12 * psi / 64, "zero2": 2 * psi + 14 * psi / 64,
             "zero3": 16 * psi / 64}[strategy]
    assert states == pytest.approx(exact, abs=64)
    assert round(states / 1e9, 1) == gb


@pytest.mark.parametrize(
    ("precision", "bytes_per_param"),
    [("mixed", 16), ("bf16", 16), ("fp16", 16), ("fp32", 20)],
)
def test_deepspeed_keeps_an_fp32_master_copy_whatever_the_dtype(precision, bytes_per_param):
    """ZeRO clones each partition to fp32 (``.clone().float()``, stage_1_and_2.py, stage3.py)
    and keeps Adam's state in fp32 beside it: 2 + 2 + 12 bytes a parameter in 16 bits, 4 + 4 + 12
    in fp32. The optimizer step also holds an fp32 copy of the partition's gradients."""
    psi = 1_000_000_000
    cfg = RunConfig(precision=precision, optimizer="adam", gpus=8, strategy="zero3")
    est = estimate_memory(shape_from_params(psi), cfg)
    assert (est.weights_bytes + est.gradients_bytes + est.optimizer_bytes) * 8 == pytest.approx(
        bytes_per_param * psi, abs=64)
    assert optimizer_step_bytes(shape_from_params(psi), cfg) == 4 * psi // 8


def test_zero1_offload_keeps_one_fp32_gradient_buffer_per_partition():
    """ZeRO-1 with the optimizer on the CPU: the host holds each rank's partition of master
    weights, Adam's state and fp32 gradients (initialize_optimizer_states allocates the fp32
    gradient buffer at the partition's size), 16 bytes a parameter over the ranks."""
    psi = 1_000_000_000
    est = estimate_memory(shape_from_params(psi), RunConfig(precision="mixed", gpus=8, strategy="zero1",
                                                            offload="optimizer"))
    assert est.cpu_bytes == 16 * psi // 8
    assert est.weights_bytes == est.gradients_bytes == 2 * psi


def test_fsdp_keeps_amp_layout_and_zero_offload_keeps_fp32_state_on_the_host():
    """FSDP runs torch AMP (fp32 weights and gradients, sharded alike); DeepSpeed's ZeRO-Offload
    on one GPU keeps 16-bit weights on the GPU (ZeRO-2 sends each gradient bucket to the host as it
    is reduced) and the fp32 master weights, Adam's state and fp32 gradients on the host (12 + 4
    bytes a parameter), plus its gradient bucket. Its copy buffer of the largest parameter is not
    counted for a model known only by its size, and the note says so."""
    psi = 1_000_000_000
    shape = shape_from_params(psi)
    fsdp = estimate_memory(shape, RunConfig(precision="mixed", gpus=8, strategy="fsdp"))
    assert fsdp.weights_bytes == fsdp.gradients_bytes == 4 * psi // 8
    offload = estimate_memory(shape, RunConfig(precision="mixed", strategy="zero2", offload="optimizer"))
    assert offload.weights_bytes == 2 * psi and offload.gradients_bytes == 0
    assert offload.optimizer_bytes == 0 and offload.cpu_bytes == 16 * psi
    assert any("reduce_bucket_size" in n for n in offload.notes)
    assert any("not counted: the model's shape is unknown" in n for n in offload.notes)


def test_korthikanti_activation_formula_for_gpt_shape():
    """Korthikanti et al. 2022, eq. (1): s*b*h*(34 + 5*a*s/h) bytes per layer (16-bit, dropout,
    ffn = 4h, no flash). Our generalised formula must reduce to it exactly."""
    from gpusizer.memory.estimate import _layer_activation_bytes

    # h=1024, a=16, ffn=4096, dropout; with a fused GELU, as Megatron has
    m = arch_of(ZOO.resolve("gpt2-medium").model_copy(update={"mlp": "gelu"}))
    assert isinstance(m, TransformerShape)
    s, b, h, a = 1024, 4, m.hidden, m.heads
    got = _layer_activation_bytes(m, s, b, 2, dropout=True, flash=False, tp=1)
    assert got == s * b * h * 34 + 5 * a * s * s * b
    t = 4
    got_tp = _layer_activation_bytes(m, s, b, 2, dropout=True, flash=False, tp=t)
    assert got_tp == s * b * h * 10 + (s * b * h * 24 + 5 * a * s * s * b) // t


def test_kv_cache_formula_llama2_7b():
    """2 x 32 layers x 4096 tokens x 32 heads x 128 dims x 2 bytes = 2 GiB for one sequence."""
    m = _transformer("llama-2-7b")
    assert kv_cache_bytes(m, batch=1, seq_len=4096, p=2) == 2 * 2**30
    # Llama-2-70B uses 8 KV heads (GQA): 2 x 80 x 4096 x 8 x 128 x 2 = 1.25 GiB
    assert kv_cache_bytes(_transformer("llama-2-70b"), batch=1, seq_len=4096, p=2) == 1_342_177_280


def test_latent_attention_caches_576_elements_a_token_and_layer_on_every_gpu():
    """DeepSeek-V2 paper (arXiv 2405.04434), Table 1: MLA caches (d_c + d_h^R) x l elements a
    token, the 512-wide latent and the 64-wide rotary key: 61 x 576 x 2 = 70,272 bytes a token
    for DeepSeek-V3 in 16 bits, against 2 x 128 heads x 128 x 61 x 2 = 3,997,696 for the
    same heads cached as plain K and V. Tensor parallelism does not split the latent."""
    m = _transformer("deepseek-v3")
    assert kv_cache_bytes(m, batch=1, seq_len=1, p=2) == 70_272 == 61 * (512 + 64) * 2
    assert kv_cache_bytes(m, batch=4, seq_len=4096, p=2, tp=8) == 4 * 4096 * 70_272
    plain = m.model_copy(update={"mla": None})
    assert kv_cache_bytes(plain, batch=1, seq_len=1, p=2) == 3_997_696


def _transformer(model_id: str) -> TransformerShape:
    m = arch_of(ZOO.resolve(model_id))
    assert isinstance(m, TransformerShape)
    return m


def test_inference_reports_kv_cache_key(cli_json):
    doc = cli_json("fit-model", "--model", "llama-2-7b", "--inference", "--batch", "1", "--seq-len", "4096",
                   "--gpu", "a100-sxm4-80gb")
    b = doc["results"]["breakdown"]
    assert b["kv_cache_bytes"] == 2 * 2**30
    assert b["gradients_bytes"] == 0 and b["optimizer_bytes"] == 0
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "kv_cache_bytes",
                "overhead_bytes", "total_bytes"):
        assert isinstance(b[key], int)


# ----- properties ---------------------------------------------------------------------------

TRANSFORMERS = [m for m in ZOO.models if m.is_transformer]
ALL = list(ZOO.models)
precisions = st.sampled_from(["fp32", "mixed", "bf16"])


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(ALL), batch=st.integers(1, 64), extra=st.integers(1, 64), precision=precisions,
       ckpt=st.booleans())
def test_monotone_in_batch(model, batch, extra, precision, ckpt):
    shape = shape_from_model(model)
    a = estimate_memory(shape, RunConfig(batch=batch, precision=precision, checkpointing=ckpt))
    b = estimate_memory(shape, RunConfig(batch=batch + extra, precision=precision, checkpointing=ckpt))
    assert b.total_bytes >= a.total_bytes


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(TRANSFORMERS), seq=st.integers(1, 4096), extra=st.integers(1, 4096),
       mode=st.sampled_from(["train", "inference"]), flash=st.booleans())
def test_monotone_in_sequence_length(model, seq, extra, mode, flash):
    shape = shape_from_model(model)
    prec = "bf16" if mode == "inference" else "mixed"
    a = estimate_memory(shape, RunConfig(mode=mode, precision=prec, seq_len=seq, flash_attention=flash))
    b = estimate_memory(shape, RunConfig(mode=mode, precision=prec, seq_len=seq + extra, flash_attention=flash))
    assert b.total_bytes >= a.total_bytes


@settings(max_examples=60, deadline=None)
@given(params=st.integers(1, 10**12), extra=st.integers(1, 10**11),
       optimizer=st.sampled_from(["sgd", "momentum", "adam", "adafactor", "adam8bit"]))
def test_monotone_in_parameter_count(params, extra, optimizer):
    a = estimate_memory(shape_from_params(params), RunConfig(optimizer=optimizer))
    b = estimate_memory(shape_from_params(params + extra), RunConfig(optimizer=optimizer))
    assert b.total_bytes >= a.total_bytes


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(TRANSFORMERS), n=st.integers(1, 256), more=st.integers(1, 256))
def test_more_gpus_under_zero3_never_increase_per_gpu_memory(model, n, more):
    shape = shape_from_model(model)
    a = estimate_memory(shape, RunConfig(gpus=n, strategy="zero3", seq_len=1024))
    b = estimate_memory(shape, RunConfig(gpus=n + more, strategy="zero3", seq_len=1024))
    assert b.total_bytes <= a.total_bytes


@settings(max_examples=25, deadline=None)
@given(model=st.sampled_from(ALL), capacity_gib=st.sampled_from([8, 16, 24, 40, 80]),
       precision=precisions)
def test_largest_batch_fits_and_one_more_does_not(model, capacity_gib, precision):
    shape = shape_from_model(model)
    cfg = RunConfig(precision=precision, seq_len=512 if model.is_transformer else None)
    cap = capacity_gib * 2**30
    best = largest_batch(shape, cfg, cap)
    if best is None:
        assert not fits(shape, cfg.model_copy(update={"batch": 1}), cap)
    else:
        from gpusizer.memory.estimate import MAX_BATCH

        assert fits(shape, cfg.model_copy(update={"batch": best}), cap)
        if best < MAX_BATCH:  # the search stops at MAX_BATCH
            assert not fits(shape, cfg.model_copy(update={"batch": best + 1}), cap)


def test_fewest_gpus_is_minimal():
    shape = shape_from_model(ZOO.resolve("llama-2-13b"))
    cfg = RunConfig(strategy="fsdp", seq_len=2048, checkpointing=True, flash_attention=True)
    cap = 24 * 2**30
    n = fewest_gpus(shape, cfg, cap)
    assert n is not None and n > 1
    assert fits(shape, cfg.model_copy(update={"gpus": n}), cap)
    assert not fits(shape, cfg.model_copy(update={"gpus": n - 1}), cap)
    assert fewest_gpus(shape, cfg.model_copy(update={"strategy": "ddp"}), cap) is None


def test_int8_training_is_refused_with_a_clear_message(cli):
    result = cli("fit-model", "--model", "gpt2", "--precision", "int8")
    assert result.exit_code == 2
    assert "weight-only quantisation for inference" in result.stderr


@pytest.mark.parametrize("value", ["0", "-5M", "60X", "abc", "1e-3"])
def test_params_rejects_bad_values(cli, value):
    result = cli("fit-model", "--params", value)
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: --params")


@pytest.mark.parametrize(("text", "count"), [("60M", 60_000_000), ("1.3B", 1_300_000_000), ("7e9", 7 * 10**9),
                                             ("175B", 175 * 10**9), ("60000000", 60_000_000)])
def test_params_accepts(cli_json, text, count):
    # 175B in mixed precision needs 2.8 TB: it fits on no single GPU (exit 4)
    doc = cli_json("fit-model", "--params", text, "--gpu", "b200", code=4 if count > 10**10 else 0)
    assert doc["input"]["params"] == count
    assert doc["results"]["breakdown"]["weights_bytes"] == 4 * count  # mixed: fp32 master weights


def test_fit_model_json_lists_fitting_gpus_and_exit_4_when_none(cli, cli_json):
    doc = cli_json("fit-model", "--model", "resnet50", "--batch", "32", "--precision", "mixed")
    assert "a100-sxm4-80gb" in doc["results"]["fits_on"]
    big = cli("fit-model", "--model", "llama-2-70b", "--seq-len", "4096", "--json")
    assert big.exit_code == 4
    import json

    doc = json.loads(big.stdout)
    assert doc["results"]["fits_on"] == []
    assert all(g["min_gpus"] is None for g in doc["results"]["gpus"])  # ddp cannot shard


def test_fewest_gpus_bisects_beyond_16():
    """175B parameters in mixed precision with Adam under ZeRO-3 on 80 GiB cards: the
    search must find the exact minimum, not the next power of two."""
    shape = shape_from_params(175 * 10**9)
    cfg = RunConfig(strategy="zero3")
    cap = 80 * 2**30
    n = fewest_gpus(shape, cfg, cap)
    assert n is not None and n > 16
    assert fits(shape, cfg.model_copy(update={"gpus": n}), cap)
    assert not fits(shape, cfg.model_copy(update={"gpus": n - 1}), cap)


@pytest.mark.parametrize(("args", "message"), [
    (("--model", "llama-2-7b", "--strategy", "tp", "--gpus", "3"), "does not divide"),
    (("--model", "resnet50", "--strategy", "tp", "--gpus", "2"), "needs a transformer"),
])
def test_tensor_parallel_is_validated(cli, args, message):
    result = cli("fit-model", *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_fp64_counts_eight_bytes(cli_json):
    """FP64 HPC training: 8-byte weights and gradients, 8-byte Adam state (2 x 8)."""
    est = estimate_memory(shape_from_params(10**9), RunConfig(precision="fp64", optimizer="adam"))
    assert (est.weights_bytes, est.gradients_bytes, est.optimizer_bytes) == (8 * 10**9, 8 * 10**9, 16 * 10**9)
    doc = cli_json("recommend", "--workload", "hpc", "--params", "1B", "--show-excluded")
    excluded = {e["gpu_id"] for e in doc["results"]["excluded"]} if "excluded" in doc["results"] else set()
    assert "rtx-3060-12gb" in excluded  # 32 GB of fp64 state does not fit in 12 GiB


def test_params_only_model_has_no_invented_largest_batch(cli, cli_json):
    """With --params alone the activations are unknown, so memory would not grow with
    the batch; the largest batch is reported as unknown, not as the search limit."""
    doc = cli_json("fit-model", "--params", "60M", "--gpu", "v100")
    row = doc["results"]["gpus"][0]
    assert row["fits"] is True and row["max_batch"] is None
    assert row["max_batch_reason"].startswith("unknown")
    shaped = cli_json("fit-model", "--model", "alexnet", "--batch", "128", "--gpu", "v100")["results"]["gpus"][0]
    assert 1000 < shaped["max_batch"] < 10_000 and shaped["max_batch_reason"] is None
    human = cli("fit-model", "--params", "60M", "--gpu", "v100")
    assert human.exit_code == 0
    assert "unknown" in human.stdout and "1,048,576" not in human.stdout


def test_a_repeated_memory_size_is_checked_once(cli_json):
    doc = cli_json("fit-model", "--params", "60M", "--memory", "6GB", "--memory", "6GB")
    assert doc["input"]["gpus_checked"] == ["6GB card"]


# --------------------------------------------------------------------------
# what would fit: fit-model's remedies (memory/fit.py, REMEDIES)

REMEDY_RUNS = [
    # "Can I fine-tune a 7B model on my 24 GB card?" (issue 16): LoRA needs checkpointing or QLoRA
    ("llama-3.1-8b", "--lora", "16", "--gpu", "rtx4090"),
    # full training of a 7B model does not fit a 24 GB card however it is run; LoRA does
    ("llama-2-7b", "--gpu", "rtx4090"),
    # serving a 70B model on a 48 GB card: int4 weights
    ("llama-3.1-70b", "--inference", "--gpu", "rtx-a6000"),
    # a batch too large for a small card: the largest micro-batch that divides it
    ("resnet50", "--memory", "2GB", "--batch", "256"),
    # the user's own gradient accumulation is kept in the samples per step
    ("llama-2-7b", "--gpu", "rtx-4090", "--qlora", "--precision", "bf16", "--checkpointing", "--seq-len", "4096",
     "--batch", "16", "--grad-accumulation", "4"),
    # under pipeline stages the micro-batches set what the first stage holds in flight
    ("llama-2-13b", "--gpus", "4", "--pp", "4", "--gpu", "rtx-4090", "--checkpointing", "--seq-len", "4096",
     "--batch", "32", "--qlora", "--precision", "bf16"),
    # nothing fits at the run's batch: a change and a smaller micro-batch together
    ("llama-3.1-8b", "--lora", "16", "--offload", "activations", "--gpu", "rtx-4090", "--batch", "64",
     "--grad-accumulation", "4", "--seq-len", "8192"),
]


@pytest.mark.parametrize("run", REMEDY_RUNS, ids=[f"{r[0]}-{i}" for i, r in enumerate(REMEDY_RUNS)])
def test_each_remedy_is_what_its_command_line_gives(cli_json, run):
    """Where a run fits on no GPU (exit 4), fit-model lists changes that would fit, and each is
    exactly what running with those options gives: the same peak, on the same GPUs, with the
    same largest batch. The verdict names the first."""
    doc = cli_json("fit-model", "--model", *run, code=4)
    res = doc["results"]
    assert res["fits_on"] == [] and 1 <= len(res["remedies"]) <= 3
    first = res["remedies"][0]
    assert f"with {' '.join(first['options'])} it needs" in res["verdict"]
    for remedy in res["remedies"]:
        words = [w for option in remedy["options"] for w in option.split()]
        changed = cli_json("fit-model", "--model", *run, *words)["results"]
        assert changed["breakdown"]["total_bytes"] == remedy["total_bytes"], remedy
        assert changed["fits_on"] == remedy["fits_on"], remedy
        smallest = next(g for g in changed["gpus"] if (g["gpu_id"] or g["gpu_name"]) == remedy["fits_on"][0])
        assert smallest["max_batch"] == remedy["max_batch"], remedy


def test_remedies_for_a_lora_run_on_a_24gb_card(cli_json):
    """Llama 3.1 8B, LoRA rank 16, 2,048 tokens on an RTX 4090: the activations of backprop through
    the frozen base do not fit beside its 16-bit weights; recomputing them does (batch 1), and so
    do a 4-bit base and keeping them in host memory; a micro-batch change cannot help at batch 1."""
    res = cli_json("fit-model", "--model", "llama-3.1-8b", "--lora", "16", "--gpu", "rtx4090", code=4)["results"]
    assert [r["options"] for r in res["remedies"]] == [["--checkpointing"], ["--qlora"], ["--offload activations"]]
    assert all(r["max_batch"] == 1 for r in res["remedies"])


def test_a_batch_remedy_keeps_the_samples_per_step(cli_json):
    res = cli_json("fit-model", "--model", "resnet50", "--memory", "2GB", "--batch", "256", code=4)["results"]
    batch, steps = (int(o.split()[1]) for o in res["remedies"][0]["options"])
    assert batch * steps == 256 and batch <= res["remedies"][0]["max_batch"] < 2 * batch
    # with gradient accumulation given: 16 x 4 = 64 samples a step before and after
    res = cli_json("fit-model", "--model", *REMEDY_RUNS[4], code=4)["results"]
    assert res["remedies"][0]["options"] == ["--batch 4", "--grad-accumulation 16"]


def test_nothing_is_suggested_when_the_run_fits(cli_json):
    assert cli_json("fit-model", "--model", "resnet50", "--gpu", "a100")["results"]["remedies"] == []


def test_sliding_window_layers_cache_only_their_window(cli_json):
    """gpt-oss-20b (config.json: 24 layers, layer_types alternating sliding and full attention,
    sliding_window 128, 8 KV heads of 64): at 131,072 tokens, 12 layers cache every token and 12
    only the last 128, in 16 bits: (12 x 131,072 + 12 x 128) x 2 x 8 x 64 x 2 bytes, as transformers'
    sliding-window cache layers hold it."""
    doc = cli_json("fit-model", "--model", "gpt-oss-20b", "--inference", "--seq-len", "131072", "--gpu", "h100")
    assert doc["results"]["breakdown"]["kv_cache_bytes"] == (12 * 131072 + 12 * 128) * 2 * 8 * 64 * 2
