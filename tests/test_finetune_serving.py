"""LoRA and QLoRA fine-tuning, inference defaults and serving capacity.

Adapter counts reproduce peft's ``print_trainable_parameters()`` as printed in
published training logs; the serving case is the question users ask ("how many
H100s to serve Llama-3-70B to 32 users at 4k context?").
"""

from __future__ import annotations

import json

import pytest

import gpusizer
from gpusizer.domain.finetune import Adapter, adapter_params
from gpusizer.domain.run import RunConfig
from gpusizer.errors import ExitCode, UsageError
from gpusizer.memory.estimate import estimate_memory
from gpusizer.memory.serving import BLOCK_TOKENS, fewest_gpus_to_serve, serving_capacity, tp_sizes
from gpusizer.performance.work import model_work

GIB = 2**30


@pytest.mark.parametrize(
    ("model", "rank", "targets", "trainable", "total"),
    [
        # llama-recipes' default LoRA (r=8 on q_proj, v_proj) on meta-llama/Llama-2-7b-hf; its fine-tuning
        # logs print "trainable params: 4,194,304 || all params: 6,742,609,920"
        ("llama-2-7b", 8, ("q", "v"), 4_194_304, 6_742_609_920),
        # r=16 on all seven projections of Meta-Llama-3-8B(-Instruct); training logs print
        # "trainable params: 41,943,040 || all params: 8,072,204,288"
        ("llama-3-8b", 16, ("all-linear",), 41_943_040, 8_072_204_288),
    ],
    ids=["peft-llama2-7b-r8-qv", "peft-llama3-8b-r16-all-linear"],
)
def test_adapter_counts_reproduce_peft_printouts(model, rank, targets, trainable, total):
    shape = gpusizer.resolve_model(model)
    assert shape.transformer is not None
    got = adapter_params(shape.transformer, Adapter(rank=rank, targets=targets))
    assert got == trainable
    assert shape.params + got == total


def test_target_sets_are_unions_of_projections():
    m = gpusizer.resolve_model("llama-3-8b").transformer
    assert m is not None
    whole = adapter_params(m, Adapter(rank=4))
    parts = adapter_params(m, Adapter(rank=4, targets=("attention",))) + adapter_params(
        m, Adapter(rank=4, targets=("mlp",)))
    assert whole == parts
    with pytest.raises(ValueError, match="unknown adapter target"):
        Adapter(rank=4, targets=("lm_head",))


def test_lora_trains_only_the_adapters_on_a_frozen_16_bit_base():
    shape = gpusizer.resolve_model("llama-3-8b")
    adapter = Adapter(rank=16)
    cfg = RunConfig(adapter=adapter, seq_len=512, checkpointing=True)
    assert cfg.precision == "bf16"  # the frozen base is 16-bit unless asked otherwise
    mem = estimate_memory(shape, cfg)
    n = adapter_params(shape.transformer, adapter)  # type: ignore[arg-type]
    assert mem.gradients_bytes == n * 4  # fp32 adapters
    assert mem.optimizer_bytes == n * 2 * 4  # AdamW m and v in fp32
    assert mem.weights_bytes == shape.params * 2 + n * 4
    full = estimate_memory(shape, RunConfig(precision="bf16", seq_len=512, checkpointing=True))
    assert mem.total_bytes < full.total_bytes / 2


def test_qlora_stores_the_linear_layers_in_nf4():
    """NF4: 4 bits plus the absmax constants, 0.5 bits a weight, or 0.127 with double
    quantisation (QLoRA, section 3); embeddings and the head stay 16-bit."""
    assert Adapter(rank=8, base_quantisation="nf4", double_quant=False).base_bytes_per_weight == 4.5 / 8
    assert Adapter(rank=8, base_quantisation="nf4").base_bytes_per_weight == pytest.approx(4.127 / 8, abs=1e-3)
    shape = gpusizer.resolve_model("llama-2-70b")
    lora = estimate_memory(shape, RunConfig(adapter=Adapter(rank=16), seq_len=512, checkpointing=True))
    qlora = estimate_memory(shape, RunConfig(adapter=Adapter(rank=16, base_quantisation="nf4"), seq_len=512,
                                              checkpointing=True))
    assert 3.5 < lora.weights_bytes / qlora.weights_bytes < 4.0
    assert qlora.transient_bytes > 0  # a dequantised 16-bit matrix per matmul


def test_qlora_70b_fits_one_48_gb_card(cli_json):
    """The QLoRA paper's headline: a 65B model fine-tunes on one 48 GB GPU. A 70B Llama 2 with
    rank-16 adapters at 512 tokens and checkpointing fits the RTX A6000, with room for a batch."""
    doc = cli_json("fit-model", "--model", "llama-2-70b", "--qlora", "--gpu", "rtx-a6000", "--seq-len", "512",
                   "--checkpointing")
    gpu = doc["results"]["gpus"][0]
    assert gpu["fits"] and gpu["max_batch"] >= 1
    assert doc["input"]["adapter"] == {"rank": 16, "targets": ["all-linear"], "base_quantisation": "nf4", "dtype": "fp32",
                                       "double_quant": True}
    assert doc["input"]["precision"] == "bf16"


def test_lora_needs_a_shape(cli):
    result = cli("fit-model", "--params", "7B", "--lora", "8", "--json")
    assert result.exit_code == ExitCode.USAGE
    assert "--lora:" in result.stderr and "Traceback" not in result.stderr


def test_lora_skips_the_weight_gradients_of_the_base():
    shape = gpusizer.resolve_model("llama-3-8b")
    full = model_work(shape, RunConfig(precision="bf16", batch=1, seq_len=1024), "bf16")
    lora = model_work(shape, RunConfig(adapter=Adapter(rank=16), batch=1, seq_len=1024), "bf16")
    attention = full.attention_flops
    assert lora.attention_flops == attention
    assert (lora.matmul_flops - attention) / (full.matmul_flops - attention) == pytest.approx(2 / 3)
    assert lora.gradient_bytes == adapter_params(shape.transformer, Adapter(rank=16)) * 4  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# inference defaults


def test_attention_is_fused_by_default_and_eager_opts_out():
    shape = gpusizer.resolve_model("llama-2-7b")
    assert RunConfig().flash_attention
    fused = estimate_memory(shape, RunConfig(mode="inference", seq_len=4096))
    eager = estimate_memory(shape, RunConfig(mode="inference", seq_len=4096, attention="eager"))
    # eager materialises 32 heads x 4096^2 fp32 scores twice (scores and softmax)
    assert eager.activations_bytes - fused.activations_bytes > 32 * 4096**2 * 4


def test_logits_all_keeps_every_position():
    shape = gpusizer.resolve_model("llama-3-8b")
    last = estimate_memory(shape, RunConfig(mode="inference", seq_len=2048))
    every = estimate_memory(shape, RunConfig(mode="inference", seq_len=2048, logits="all"))
    vocab, hidden, tokens = 128_256, 4096, 2048
    # every position: the head's phase is the peak, the final hidden state, its norm and
    # 16-bit logits; the last position's fp32 logits leave a layer's working set the peak
    assert every.activations_bytes == 2 * 2 * tokens * hidden + 2 * tokens * vocab
    assert last.activations_bytes < every.activations_bytes
    assert last.activations_bytes > 2 * 2 * tokens * hidden + 4 * vocab


def test_fp8_kv_cache_halves_it():
    shape = gpusizer.resolve_model("llama-3-70b")
    fp16 = estimate_memory(shape, RunConfig(mode="inference", seq_len=4096, batch=8))
    fp8 = estimate_memory(shape, RunConfig(mode="inference", seq_len=4096, batch=8, kv_cache="fp8"))
    assert fp16.kv_cache_bytes == 2 * fp8.kv_cache_bytes == 2 * 80 * 8 * 128 * 2 * 4096 * 8


# --------------------------------------------------------------------------
# serving


def test_serving_llama3_70b_to_32_users_at_4k_takes_4_h100s_at_tp4(cli_json):
    """The issue's question. Weights are 141 GB in 16 bits: two 80 GB H100s hold them with
    about 2.8 GiB each for the cache once tensor parallelism's buffers are placed (4 sequences
    of 4k); four leave 36 GiB each, 114 sequences."""
    doc = cli_json("serve", "--model", "llama-3-70b", "--gpu", "h100-sxm5-80gb", "--users", "32",
                   "--context", "4096")
    row = doc["results"]["rows"][0]
    assert row["gpus"] == 4 and row["capacity"]["tp"] == 4
    assert row["max_concurrency"] >= 32
    assert [c["max_concurrency"] for c in row["tried"]][:3] == [0, 3, 113]
    assert doc["input"]["gpu_memory_utilization"] == 0.9 and doc["input"]["block_tokens"] == 16


def test_serving_capacity_follows_the_block_arithmetic():
    shape = gpusizer.resolve_model("llama-3-8b")
    h100 = gpusizer.load_catalog().resolve("h100-sxm5-80gb").gpu
    cap = serving_capacity(shape, RunConfig(mode="inference"), h100.memory_bytes, 8192)
    assert cap.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert cap.blocks == cap.kv_budget_bytes // (BLOCK_TOKENS * cap.kv_bytes_per_token)
    assert cap.max_concurrency == cap.blocks // (8192 // BLOCK_TOKENS)
    lower = serving_capacity(shape, RunConfig(mode="inference"), h100.memory_bytes, 8192, utilization=0.5)
    assert lower.max_concurrency < cap.max_concurrency
    fp8 = serving_capacity(shape, RunConfig(mode="inference", kv_cache="fp8"), h100.memory_bytes, 8192)
    assert fp8.max_concurrency >= 2 * cap.max_concurrency - 1


def test_tensor_parallel_sizes_divide_the_heads():
    m = gpusizer.resolve_model("llama-3-70b").transformer
    assert m is not None
    assert tp_sizes(m) == (1, 2, 4, 8, 16, 32, 64)


def test_serve_needs_a_decoder():
    with pytest.raises(UsageError) as info:
        gpusizer.serve("resnet50", gpu="h100-sxm5-80gb", context=1024)
    assert info.value.field == "model"


def test_nothing_serves_exits_4(cli_json):
    """Llama 3.1 405B in 16 bits (810 GB) is more than 8 RTX 4090s hold, so no replica serves anyone;
    Llama 3 70B fits 12 sequences in 8 of them, so 32 users take 3 replicas."""
    doc = cli_json("serve", "--model", "llama-3.1-405b", "--gpu", "rtx-4090", "--users", "32",
                   code=ExitCode.NOTHING_FITS)
    assert doc["results"]["serves_on"] == []
    row = cli_json("serve", "--model", "llama-3-70b", "--gpu", "rtx-4090", "--users", "32")["results"]["rows"][0]
    assert (row["gpus"], row["replicas"]) == (8, 3) and row["max_concurrency"] * 3 >= 32


def test_serve_checks_nvidia_gpus_unless_another_vendor_is_asked_for(cli_json):
    """As recommend: CUDA is what most serving code assumes, so AMD and Intel parts are checked
    only with --vendor, and then with the software-stack caveat (and no speed caveat: serve
    sizes memory). GPUs named with --gpu are checked whoever makes them."""
    cat = gpusizer.load_catalog()
    vendor = {g.id: g.vendor for g in cat.gpus}
    args = ("serve", "--model", "llama-3-8b", "--context", "4096")
    default = cli_json(*args)
    assert default["input"]["vendor"] == "nvidia"
    assert {vendor[r["gpu_id"]] for r in default["results"]["rows"]} == {"nvidia"}
    assert len(default["results"]["rows"]) == sum(v == "nvidia" for v in vendor.values())
    assert not any("ROCm" in n for n in default["notes"])
    every = cli_json(*args, "--vendor", "any")
    assert len(every["results"]["rows"]) == len(cat.gpus)
    caveat = [n for n in every["notes"] if n.startswith("AMD GPUs checked")]
    assert len(caveat) == 1 and "ROCm" in caveat[0] and "calibrated" not in caveat[0]
    amd = cli_json(*args, "--vendor", "AMD")
    assert {vendor[r["gpu_id"]] for r in amd["results"]["rows"]} == {"amd"}
    named = cli_json("serve", "--model", "llama-3-8b", "--gpu", "mi300x", "--gpu", "h100-sxm5-80gb")
    assert [r["gpu_id"] for r in named["results"]["rows"]] == ["mi300x", "h100-sxm5-80gb"]
    assert named["input"]["vendor"] is None and any("ROCm" in n for n in named["notes"])


def test_when_nothing_serves_serve_says_which_vendors_it_checked(cli_json):
    """No GPU holds one DeepSeek-V3 sequence of 16M tokens (its latent cache alone is over a TB) in
    a node: the note says only NVIDIA GPUs were checked (the default), and not when every vendor's were."""
    args = ("serve", "--model", "deepseek-v3", "--context", "16777216", "--users", "64")
    default = cli_json(*args, code=ExitCode.NOTHING_FITS)
    assert default["results"]["serves_on"] == []
    assert any(n.startswith("only NVIDIA GPUs were checked") for n in default["notes"])
    every = cli_json(*args, "--vendor", "any", code=ExitCode.NOTHING_FITS)
    assert not any(n.startswith("only") for n in every["notes"])


def test_serve_rejects_an_unknown_vendor(cli):
    result = cli("serve", "--model", "llama-3-8b", "--vendor", "acme")
    assert result.exit_code == ExitCode.USAGE
    assert "--vendor" in result.stderr and "nvidia, amd, intel, any" in result.stderr


def test_serve_shows_the_first_gpu_types_and_counts_the_rest(cli, cli_json):
    """The answer first: --top rows, those that serve ahead of those that do not, and one
    line that counts what was left out (the JSON has every row)."""
    args = ("serve", "--model", "llama-3-70b", "--users", "32", "--context", "4096")
    rows = cli_json(*args)["results"]["rows"]
    serving = [r for r in rows if r["gpus"] is not None]
    assert 3 < len(serving) < len(rows)
    text = cli(*args, "--top", "3", env={"COLUMNS": "80"}).stdout
    listed = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]
    first = sorted(serving, key=lambda r: (r["gpus"], -r["max_concurrency"]))[:3]
    assert listed == [r["gpu_id"] for r in first]
    assert (f"Not shown: {len(serving) - 3} more GPU types that serve and {len(rows) - len(serving)} that "
            "do not") in " ".join(text.split())
    one = cli("serve", "--model", "llama-3-8b", "--vendor", "intel", "--top", "1").stdout
    assert "Not shown: 1 more GPU type that serves (--top 2" in " ".join(one.split())
    named = cli("serve", "--model", "llama-3-70b", "--users", "32", "--gpu", "h100", "--gpu", "rtx-4090").stdout
    assert "Not shown" not in named and "rtx-4090" in named


def test_fewest_gpus_is_monotone_in_users():
    shape = gpusizer.resolve_model("llama-3-70b")
    h100 = gpusizer.load_catalog().resolve("h100-sxm5-80gb").gpu
    plans = [fewest_gpus_to_serve(shape, RunConfig(mode="inference"), h100.memory_bytes, 4096, u).gpus
             for u in (1, 8, 32, 200, 400)]
    assert plans[:4] == sorted(plans[:4]) and plans[0] == 2


# --------------------------------------------------------------------------
# serving speed


def test_serving_speed_at_a_concurrency():
    est = gpusizer.estimate("llama-3-8b", gpu="h100-sxm5-80gb", mode="inference", seq_len=4096, batch=32,
                            prompt=1000)
    s = est.results.serving
    assert s is not None and s.concurrency == 32 and s.prompt_tokens == 1000
    assert s.itl_s == est.results.step_time_s
    assert s.aggregate_tokens_s == pytest.approx(32 / s.itl_s)
    assert s.per_user_tokens_s == pytest.approx(1 / s.itl_s)
    longer = gpusizer.estimate("llama-3-8b", gpu="h100-sxm5-80gb", mode="inference", seq_len=4096, batch=32,
                               prompt=4000).results.serving
    assert longer is not None and longer.ttft_s > s.ttft_s


def test_latency_target_picks_the_largest_concurrency_that_meets_it():
    kw = {"gpu": "a100-sxm4-80gb", "mode": "inference", "seq_len": 2048}
    loose = gpusizer.estimate("llama-2-13b", max_itl_ms=60, **kw).results.serving
    tight = gpusizer.estimate("llama-2-13b", max_itl_ms=30, **kw).results.serving
    assert loose is not None and tight is not None
    assert tight.itl_s <= 0.030 and loose.itl_s <= 0.060
    assert tight.concurrency <= loose.concurrency
    one_more = gpusizer.estimate("llama-2-13b", batch=tight.concurrency + 1, **kw).results.serving
    assert one_more is not None
    # either the next concurrency misses the target, or memory stopped the search
    assert one_more.itl_s > 0.030 or "memory holds" in gpusizer.estimate(
        "llama-2-13b", max_itl_ms=30, **kw).results.batch_source


@pytest.mark.parametrize(("model", "tp", "target_ms"), [("llama-3.1-8b", 1, 30), ("llama-3.1-70b", 4, 60)])
def test_latency_search_stops_where_serve_says_memory_is_full(cli_json, model, tp, target_ms):
    """estimate --max-itl-ms and serve count memory the same way (serve's paged KV cache with
    chunked prefill, not a forward pass over every prompt at once): when the target is loose,
    the concurrency is what serve holds on the same GPU, context and utilization, and the
    result says memory, not latency, stopped it (audit finding 6: it said 63, serve 110)."""
    gpu, context = "h100-sxm5-80gb", 4096
    served = cli_json("serve", "--model", model, "--gpu", gpu, "--context", str(context), "--tp", str(tp))
    held = served["results"]["rows"][0]["max_concurrency"]
    layout = ["--gpus", str(tp), "--strategy", "tp"] if tp > 1 else []
    doc = cli_json("estimate", "--model", model, "--gpu", gpu, "--inference", "--seq-len", str(context),
                   "--max-itl-ms", str(target_ms), *layout)
    serving = doc["results"]["serving"]
    assert held > 64 and serving["concurrency"] == serving["memory_concurrency"] == held
    assert serving["limited_by"] == "memory" and serving["itl_s"] <= target_ms / 1e3
    assert doc["results"]["memory"]["fits"] is True and doc["results"]["batch_per_gpu"] == held
    assert any(n.startswith("memory, not latency, limits the concurrency") for n in doc["notes"])


def test_latency_search_says_when_latency_stops_it(cli, cli_json):
    kw = ("--model", "llama-3.1-8b", "--gpu", "h100-sxm5-80gb", "--inference", "--seq-len", "4096")
    serving = cli_json("estimate", *kw, "--max-itl-ms", "20")["results"]["serving"]
    assert serving["limited_by"] == "latency" and serving["itl_s"] <= 0.020
    assert serving["concurrency"] < serving["memory_concurrency"]
    beyond = cli_json("estimate", *kw, "--batch", str(serving["concurrency"] + 1))["results"]["serving"]
    assert beyond["itl_s"] > 0.020
    human = cli("estimate", *kw, "--max-itl-ms", "30", env={"COLUMNS": "80"}).stdout
    assert "(the most memory holds; within" in " ".join(human.split())
    assert "(the most within 20 ms a token)" in cli("estimate", *kw, "--max-itl-ms", "20",
                                                     env={"COLUMNS": "80"}).stdout


def test_serving_estimate_checks_memory_as_serve_does(cli_json):
    """A decode batch over what serve holds does not fit; at what it holds it does (not the
    126 GiB a single forward pass over 110 whole prompts would need)."""
    kw = ("--model", "llama-3.1-8b", "--gpu", "h100-sxm5-80gb", "--inference", "--seq-len", "4096")
    held = cli_json("serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm5-80gb", "--context", "4096",
                    "--tp", "1")["results"]["rows"][0]["capacity"]
    at = cli_json("estimate", *kw, "--batch", str(held["max_concurrency"]))["results"]["memory"]
    over = cli_json("estimate", *kw, "--batch", str(held["max_concurrency"] + 1), code=4)["results"]["memory"]
    assert at["fits"] and not over["fits"] and at["capacity_bytes"] == held["budget_bytes"]
    assert at["per_gpu_bytes"] <= held["budget_bytes"] < over["per_gpu_bytes"]


def test_serving_options_belong_to_decoders(cli):
    result = cli("estimate", "--model", "resnet50", "--gpu", "a100-sxm4-80gb", "--max-itl-ms", "20", "--json")
    assert result.exit_code == ExitCode.USAGE and "--max-itl-ms:" in result.stderr


# --------------------------------------------------------------------------
# offload


def test_optimizer_offload_keeps_only_16_bit_weights_on_the_gpu():
    """ZeRO-Offload (Ren et al. 2021, section 4) keeps the 16-bit weights on the GPU and offloads
    the 16-bit gradients as they are produced; the fp32 master weights, fp32 gradients and Adam's
    two states, 16 bytes a parameter, live in host memory. DeepSpeed's ZeRO-2 offload also keeps a
    16-bit copy buffer of the largest parameter (Llama 2's 32,000 x 4,096 embedding) on the GPU and
    in pinned host memory (stage_1_and_2.py, temp_grad_buffer_for_gpu_offload / _cpu_offload)."""
    shape = gpusizer.resolve_model("llama-2-7b")
    m = shape.transformer
    assert m is not None
    off = estimate_memory(shape, RunConfig(seq_len=512, checkpointing=True, offload="optimizer"))
    n, buffer = shape.params, 2 * m.vocab * m.hidden
    assert off.weights_bytes == n * 2 and off.gradients_bytes == 0 and off.optimizer_bytes == 0
    assert off.cpu_bytes == n * 16 + buffer and off.nvme_bytes == 0
    assert off.transient_bytes >= buffer + 10**9  # the copy buffer and the 5e8-element reduce bucket
    nvme = estimate_memory(shape, RunConfig(seq_len=512, checkpointing=True, offload="all", offload_to="nvme"))
    assert nvme.cpu_bytes == 0 and nvme.weights_bytes == 0 and nvme.nvme_bytes > off.cpu_bytes


def test_zero_offload_paper_trains_13b_on_one_32_gb_v100():
    """ZeRO-Offload (Ren et al. 2021, arXiv 2101.06840), abstract: it "can train models with over
    13 billion parameters on a single GPU" (a 32 GB V100), "a 10x increase in size compared to
    popular framework such as PyTorch". A 13B model (Llama 2 13B, 1,024 tokens, checkpointing)
    fits one V100 32GB with the optimizer offloaded and needs 16 bytes a parameter without it; a
    1.4B model fits without offload."""
    kw = {"gpu": "v100-sxm2-32gb", "seq_len": 1024, "checkpointing": True}
    offloaded = gpusizer.fit_model("llama-2-13b", offload="optimizer", **kw)
    assert offloaded.input["strategy"] == "zero2" and offloaded.results.fits_on == ("v100-sxm2-32gb",)
    assert offloaded.results.breakdown.cpu_bytes >= 16 * offloaded.results.params
    assert gpusizer.fit_model("llama-2-13b", **kw).results.fits_on == ()
    assert gpusizer.fit_model(params="1.4B", **kw).results.fits_on == ("v100-sxm2-32gb",)


def test_offload_costs_pcie_time():
    kw = {"gpu": "rtx-4090", "seq_len": 1024, "checkpointing": True, "batch": 4}
    plain = gpusizer.estimate("llama-2-7b", **kw).results.step_time_s
    off = gpusizer.estimate("llama-2-7b", offload="all", **kw)
    assert off.results.step_time_s is not None and plain is not None
    assert off.results.step_time_s > plain
    assert any("offload moves" in n for n in off.notes)
    # speed-up is against a lone GPU of the same run, which moves its offloaded state too
    assert off.results.speedup_vs_1gpu == pytest.approx(1.0)
    two = gpusizer.estimate("llama-2-7b", offload="all", gpus=2, **kw).results
    assert two.throughput_per_s / off.results.throughput_per_s == pytest.approx(two.speedup_vs_1gpu)


# --------------------------------------------------------------------------
# weight formats


def test_gguf_q4_k_m_llama_2_7b_is_the_published_file_size():
    """llama.cpp's quantize README gives Llama 2 7B Q4_K_M 4.84 bits per weight; the
    widely shared llama-2-7b.Q4_K_M.gguf file is 4.08 GB (3.80 GiB)."""
    r = gpusizer.fit_model("llama-2-7b", gpu="rtx-4090", mode="inference", weight_format="gguf-q4_k_m")
    assert r.input["precision"] == "int4" and r.input["weight_format"] == "gguf-q4_k_m"
    assert r.results.breakdown.weights_bytes / 1e9 == pytest.approx(4.08, abs=0.01)


def test_group_quantised_formats_keep_embeddings_in_16_bits():
    shape = gpusizer.resolve_model("llama-3-8b")
    m = shape.transformer
    assert m is not None
    gptq = estimate_memory(shape, RunConfig(mode="inference", weight_format="gptq-int4-g128")).weights_bytes
    embed = 2 * 2 * m.vocab * m.hidden  # untied input embedding and output head, 16-bit
    linear = shape.params - 2 * m.vocab * m.hidden
    assert gptq == pytest.approx(linear * (4 + 20 / 128) / 8 + embed, rel=0.01)


def test_weight_formats_are_for_inference():
    with pytest.raises(UsageError, match="weight formats are for inference"):
        gpusizer.fit_model("llama-2-7b", weight_format="mxfp4")


def test_fused_loss_never_holds_the_full_logits():
    """Llama 3's 128,256-token vocabulary at 8 x 2048 tokens: full cross-entropy keeps fp32
    log-softmax (8.4 GB) and a (4 + 2)-byte gradient transient; the fused kernel holds one
    of ceil(128256 / 4096) = 32 chunks at a time. (Plain SGD: with AdamW the optimizer
    step, holding foreach Adam's sqrt(v) temporary, is the higher peak.)"""
    shape = gpusizer.resolve_model("llama-3-8b")
    cfg = RunConfig(precision="bf16", optimizer="sgd", batch=8, seq_len=2048, checkpointing=True)
    full = estimate_memory(shape, cfg)
    fused = estimate_memory(shape, cfg.model_copy(update={"loss": "fused"}))
    tokens, vocab = 8 * 2048, 128_256
    assert full.activations_bytes - fused.activations_bytes == 4 * tokens * vocab - 2 * tokens * 4096
    assert fused.total_bytes < full.total_bytes - 8 * 2**30


# --------------------------------------------------------------------------
# review fixes: one rule each, and edges


def test_kv_cache_format_reaches_decode_speed():
    kw = {"gpu": "h100-sxm5-80gb", "mode": "inference", "batch": 64, "seq_len": 8192}
    fp16 = gpusizer.estimate("llama-3-8b", **kw).results
    fp8 = gpusizer.estimate("llama-3-8b", kv_cache="fp8", **kw).results
    assert fp8.step_time_s is not None and fp16.step_time_s is not None
    assert fp8.step_time_s < fp16.step_time_s


def test_one_tensor_parallel_rule(cli):
    """40 heads and 8 KV heads: 5 divides the heads but neither divides nor is a multiple
    of the KV heads, which Megatron-LM and vLLM reject; 4 and 8 are allowed."""
    m = gpusizer.resolve_model("qwen2.5-14b").transformer
    assert m is not None and (m.heads, m.n_kv_heads) == (40, 8)
    assert not m.allows_tp(5) and m.allows_tp(4) and m.allows_tp(8)
    serve = cli("serve", "--model", "qwen2.5-14b", "--gpu", "h100-sxm5-80gb", "--tp", "5")
    assert serve.exit_code == ExitCode.USAGE and "--tp:" in serve.stderr
    est = cli("estimate", "--model", "qwen2.5-14b", "--gpu", "h100-sxm5-80gb", "--inference", "--strategy", "tp",
              "--gpus", "5", "--batch", "1")
    assert est.exit_code == ExitCode.USAGE and "Traceback" not in est.stderr


def test_latency_search_looks_across_the_matrix_vector_switch():
    """Decode on CUDA cores up to batch 8, Tensor Cores above: ITL can fall there, so a
    bisection alone could stop at 7 when 9 also meets the target."""
    kw = {"gpu": "rtx-4090", "mode": "inference", "seq_len": 1024}
    itl = {n: gpusizer.estimate("llama-3-8b", batch=n, **kw).results.step_time_s for n in range(1, 11)}
    target = max(itl[9], itl[10]) * 1e3 + 1e-6
    found = gpusizer.estimate("llama-3-8b", max_itl_ms=target, **kw).results.serving
    assert found is not None and found.concurrency >= 9


def test_chunked_loss_keeps_fp32_log_softmax_and_chunks_the_gradient():
    shape = gpusizer.resolve_model("llama-3-8b")
    cfg = RunConfig(precision="bf16", batch=8, seq_len=2048, checkpointing=True)
    full = estimate_memory(shape, cfg)
    chunked = estimate_memory(shape, cfg.model_copy(update={"loss": "chunked"}))
    tokens, vocab = 8 * 2048, 128_256
    assert chunked.activations_bytes == full.activations_bytes
    # full: nll_loss's and log_softmax's fp32 gradients at once (8 bytes a logit); chunked:
    # one chunk in 8 of an fp32 gradient and its 16-bit cast
    assert full.transient_bytes - chunked.transient_bytes == pytest.approx(
        8 * tokens * vocab - 6 * tokens * vocab / 8, rel=1e-3)


def test_moe_adapter_intermediates_count_routed_experts_only():
    """With per-expert nn.Linear layers (transformers 4, remote code), an adapter saves one rank-r
    intermediate per routed expert a token passes (2 of 8 in Mixtral)."""
    m = gpusizer.resolve_model("mixtral-8x7b").transformer
    assert m is not None and m.experts == 8 and m.experts_per_token == 2
    from gpusizer.domain.finetune import adapter_input_elements

    linear = m.model_copy(update={"expert_adapters": "linear"})
    assert adapter_input_elements(linear, Adapter(rank=8, targets=("up",))) == 8 * m.layers * 2


def test_peft_adapts_fused_experts_as_parameters():
    """peft 0.21 on transformers 5 (Mixtral, Qwen3-MoE, DeepSeek-V3): the experts are fused 3-D
    parameters; gate and up share one adapter of rank 2r, down has rank r, the router its own,
    and the dense and shared MLPs none. Trainable counts peft reported for LoRA r8 all-linear on
    three small configs (measured with peft 0.21.0 and transformers 5.24 on the meta device)."""
    from gpusizer.domain.finetune import adapter_input_elements, adapter_params, expert_weight_copy_elements

    def shape(doc):
        from gpusizer.domain.shape import shape_from_model
        from gpusizer.models.hfconfig import model_from_hf_config

        return shape_from_model(model_from_hf_config(doc, "test")).transformer

    mixtral = shape({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
                     "num_experts_per_tok": 2, "vocab_size": 128})
    qwen = shape({"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128,
                  "moe_intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                  "vocab_size": 128})
    deepseek = shape({"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 160,
                      "moe_intermediate_size": 48, "num_hidden_layers": 3, "first_k_dense_replace": 1,
                      "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 4,
                      "n_shared_experts": 1, "num_experts_per_tok": 2, "q_lora_rank": 32, "kv_lora_rank": 16,
                      "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16, "vocab_size": 128})
    lora = Adapter(rank=8)
    assert (adapter_params(mixtral, lora), adapter_params(qwen, lora), adapter_params(deepseek, lora)) == \
        (51_264, 35_904, 42_752)
    # the adapted expert stacks one layer builds: 4 experts x (64 x 2*96 + 96 x 64)
    assert expert_weight_copy_elements(mixtral, lora) == 4 * (64 * 192 + 96 * 64)
    # no rank-r intermediates for the experts: attention (4 projections) and the router only
    assert adapter_input_elements(mixtral, lora) == 8 * 2 * 5
    with pytest.raises(UsageError, match="gate and up"):
        adapter_params(mixtral, Adapter(rank=8, targets=("up",)))


def test_weight_offload_needs_sharding(cli):
    """DeepSpeed offloads weights only under ZeRO-3, so a data-parallel run that offloads them runs
    on ZeRO-3; under ZeRO-2 they cannot be offloaded."""
    args = ("fit-model", "--model", "llama-2-7b", "--gpu", "a100-sxm4-80gb", "--gpus", "2", "--offload", "params")
    result = cli(*args, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["input"]["strategy"] == "zero3"
    result = cli(*args, "--strategy", "zero2")
    assert result.exit_code == ExitCode.USAGE and "--offload:" in result.stderr


def test_adapter_errors_name_the_option(cli):
    result = cli("fit-model", "--model", "llama-2-7b", "--lora", "8", "--lora-targets", "foo")
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.startswith("Error: --lora-targets:") and "adapter:" not in result.stderr


def test_lora_on_fused_experts_counts_and_says_the_saved_expert_weights():
    """Mixtral 8x7B, LoRA r16 under peft 0.21: every MoE layer's adapted expert stack, 8 x 3 x
    4096 x 14336 weights in 16 bits, is saved for backward (32 layers: 84 GiB); checkpointing
    keeps one layer's."""
    from gpusizer.domain.finetune import expert_weight_copy_elements

    shape = gpusizer.resolve_model("mixtral-8x7b")
    m = shape.transformer
    per_layer = expert_weight_copy_elements(m, Adapter(rank=16))
    assert per_layer == 8 * 3 * 4096 * 14336
    full = estimate_memory(shape, RunConfig(mode="train", precision="bf16", batch=1, seq_len=2048,
                                            adapter=Adapter(rank=16)))
    ckpt = estimate_memory(shape, RunConfig(mode="train", precision="bf16", batch=1, seq_len=2048,
                                            adapter=Adapter(rank=16), checkpointing=True))
    assert any("84.00 GiB among the activations (every MoE layer)" in n for n in full.notes)
    assert any("one layer" in n for n in ckpt.notes)
    linear = m.model_copy(update={"expert_adapters": "linear"})
    assert expert_weight_copy_elements(linear, Adapter(rank=16)) == 0


# --------------------------------------------------------------------------
# contexts beyond the model's


@pytest.mark.parametrize("command", [
    ("serve", "--model", "llama-2-7b", "--gpu", "h100-sxm5-80gb", "--users", "1", "--context", "1000000"),
    ("fit-model", "--model", "llama-2-7b", "--inference", "--seq-len", "100000", "--gpu", "h100-sxm5-80gb"),
    ("estimate", "--model", "llama-2-7b", "--gpu", "h100-sxm5-80gb", "--inference", "--seq-len", "100000",
     "--batch", "1"),
    ("recommend", "--workload", "llm-inference", "--model", "llama-2-7b", "--seq-len", "100000", "--top", "1"),
], ids=lambda c: c[0])
def test_a_context_beyond_the_models_is_a_note_naming_both(cli, command):
    """Llama 2's config.json: max_position_embeddings 4096. Past it is allowed (RoPE scaling
    exists), but every command says so, naming both numbers, in --json notes and on stderr."""
    doc = json.loads(cli(*command, "--json").stdout)
    tokens = "1,000,000" if "1000000" in command else "100,000"
    beyond = [n for n in doc["notes"] if "beyond" in n]
    assert len(beyond) == 1 and tokens in beyond[0] and "context of 4,096 tokens" in beyond[0]
    human = cli(*command, env={"COLUMNS": "80"})
    assert "beyond Llama 2 7B's context of 4,096" in " ".join(human.stderr.split())


def test_a_context_within_the_models_has_no_note(cli_json):
    doc = cli_json("serve", "--model", "llama-2-7b", "--gpu", "h100-sxm5-80gb", "--context", "4096")
    assert not [n for n in doc["notes"] if "beyond" in n]
    gemma = cli_json("fit-model", "--model", "gemma-2-9b", "--inference", "--seq-len", "8193", "--gpu", "h200")
    assert any("8,193 tokens is beyond Gemma 2 9B's context of 8,192" in n for n in gemma["notes"])


# --------------------------------------------------------------------------
# sliding-window layers in serve


def test_serve_says_how_sliding_window_layers_are_counted(cli_json):
    """Gemma 3 27B: 52 of its 62 layers attend within 1,024 tokens (config.json sliding_window 1024,
    sliding_window_pattern 6). At 32k context each sequence holds those layers' window plus a
    prefill chunk (vLLM's SlidingWindowSpec), so it needs far fewer blocks than the whole context."""
    kw = ("--model", "gemma-3-27b-text", "--gpu", "h100-sxm5-80gb", "--tp", "1")
    long = cli_json("serve", *kw, "--context", "32768")
    cap = long["results"]["rows"][0]["capacity"]
    assert any(n.startswith("52 of 62 layers attend within a 1,024-token window") for n in long["notes"])
    full_blocks = 62 * 32768 // BLOCK_TOKENS // 10  # every layer at full context, in blocks of 10 layers
    assert cap["blocks_per_sequence"] == 2048 + 6 * ((1023 + 8192 + 15) // 16 + 1) < full_blocks / 2
    # a context the window and one prefill chunk reach: sliding layers hold all of it, no note
    short = cli_json("serve", *kw, "--context", "8192")
    assert not [n for n in short["notes"] if "window" in n]


def test_mistral_7b_v01_keeps_a_4096_token_window_on_every_layer():
    """mistralai/Mistral-7B-v0.1 config.json: sliding_window 4096, no layer_types: vLLM gives every
    layer a SlidingWindowSpec, so a 32k sequence holds 4,095 + 8,192 tokens a layer, not 32,768."""
    shape = gpusizer.resolve_model("mistral-7b")
    m = shape.transformer
    assert m is not None and (m.sliding_layers, m.sliding_window) == (32, 4096)
    windowed = serving_capacity(shape, RunConfig(mode="inference"), 80 * GIB, 32768)
    unwindowed = serving_capacity(shape.model_copy(update={"arch": m.model_copy(
        update={"sliding_layers": 0, "sliding_window": None})}), RunConfig(mode="inference"), 80 * GIB, 32768)
    assert windowed.blocks_per_sequence == (4095 + 8192 + 15) // 16 + 1
    assert unwindowed.blocks_per_sequence == 32768 // 16
    assert windowed.max_concurrency > 2 * unwindowed.max_concurrency


def test_latency_search_stops_at_what_the_engine_runs_at_once(cli_json):
    """A short context on an H100 fits more sequences than vLLM runs at once (max_num_seqs 1,024 on a
    GPU of 70 GiB or more): a loose target then stops at the engine's limit, and says so."""
    doc = cli_json("estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm5-80gb", "--inference", "--seq-len", "256",
                   "--max-itl-ms", "1000")
    serving = doc["results"]["serving"]
    assert serving["memory_concurrency"] > 1024
    assert serving["concurrency"] == 1024 and serving["limited_by"] == "engine"
    assert serving["itl_s"] <= 1.0
    assert any(n.startswith("the engine, not latency or memory, limits the concurrency") for n in doc["notes"])
