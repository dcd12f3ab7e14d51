"""Rules added for issue 16's published fine-tuning and serving figures, each with hand-computed
values: activation offloading, FSDP gathering a QLoRA base as its 4-bit codes (its constants whole on
every rank), DeepSpeed ZeRO's gradient bucket, QLoRA under autocast with
peft's prepare_model_for_kbit_training, and vLLM's hybrid KV cache for sliding-window models."""

from __future__ import annotations

import json

import pytest

import gpusizer
from gpusizer.domain.finetune import Adapter
from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape, TransformerShape
from gpusizer.errors import ExitCode, UsageError
from gpusizer.memory.estimate import (
    OFFLOAD_RESIDENT_LAYERS,
    TRANSIENT_BUFFERS,
    deepspeed_bucket_bytes,
    estimate_memory,
    fsdp_root_bytes,
    layer_params,
    matrix_params,
    offloaded_activation_bytes,
)
from gpusizer.memory.serving import BLOCK_TOKENS, blocks_per_request, kv_cache_groups, serving_capacity

GIB = 2**30


def _llama_3_2_3b_lora(**kw: object) -> RunConfig:
    adapter = Adapter(rank=64, targets=("q", "v", "o", "gate", "up", "down"), dtype="bf16")
    return RunConfig.model_validate({"mode": "train", "precision": "bf16", "batch": 2, "seq_len": 4096,
                                     "checkpointing": True, "loss": "chunked", "adapter": adapter, **kw})


def test_activation_offload_keeps_two_checkpointed_layer_inputs_on_the_gpu():
    """torchtune's enable_activation_offloading with activation checkpointing: each of Llama 3.2
    3B's 28 layers saves its bf16 input, 2 x 4096 x 3072 x 2 B = 50,331,648 bytes; 26 of them wait
    in host memory and OFFLOAD_RESIDENT_LAYERS = 2 stay on the GPU."""
    shape = gpusizer.resolve_model("llama-3.2-3b")
    m = shape.transformer
    assert m is not None and m.layers == 28 and m.hidden == 3072
    per_layer = 2 * 4096 * 3072 * 2
    on = estimate_memory(shape, _llama_3_2_3b_lora(offload="activations"))
    off = estimate_memory(shape, _llama_3_2_3b_lora())
    assert OFFLOAD_RESIDENT_LAYERS == 2
    assert offloaded_activation_bytes(shape, _llama_3_2_3b_lora(offload="activations")) == 26 * per_layer
    assert off.activations_bytes - on.activations_bytes == 26 * per_layer
    assert on.cpu_bytes == 26 * per_layer and off.cpu_bytes == 0
    # the weights, the adapters' state and the loss stay where they were
    assert on.weights_bytes == off.weights_bytes and on.optimizer_bytes == off.optimizer_bytes
    assert any("activation offloading" in n for n in on.notes)


def test_activation_offload_without_checkpointing_moves_whole_layers():
    shape = gpusizer.resolve_model("llama-3.2-3b")
    cfg = _llama_3_2_3b_lora(checkpointing=False)
    off = estimate_memory(shape, cfg)
    on = estimate_memory(shape, cfg.model_copy(update={"offload": "activations"}))
    moved = off.activations_bytes - on.activations_bytes
    # 26 of 28 layers' saved tensors, each far more than a checkpointed layer's input
    assert moved == on.cpu_bytes and moved > 26 * 10 * 2 * 4096 * 3072


@pytest.mark.parametrize(("update", "field"), [({"mode": "inference"}, "offload"),
                                               ({"offload_to": "nvme"}, "offload-to")])
def test_activation_offload_errors_name_the_option(update, field):
    shape = gpusizer.resolve_model("llama-3.2-3b")
    cfg = RunConfig.model_validate({"offload": "activations", "seq_len": 512, **update})
    with pytest.raises(UsageError) as err:
        estimate_memory(shape, cfg)
    assert err.value.field == field


def test_offload_activations_on_the_command_line(cli_json):
    doc = cli_json("fit-model", "--model", "llama-3.2-3b", "--lora", "64", "--seq-len", "4096",
                   "--batch", "2", "--checkpointing", "--offload", "activations", "--gpu", "a100-80gb")
    assert doc["input"]["offload"] == "activations"
    assert doc["results"]["breakdown"]["cpu_bytes"] == 26 * 2 * 4096 * 3072 * 2


def test_offload_activations_at_inference_exits_2(cli):
    result = cli("fit-model", "--model", "llama-3.2-3b", "--inference", "--offload", "activations", "--json")
    assert result.exit_code == ExitCode.USAGE


def test_fsdp_gathers_a_qlora_base_as_its_packed_4bit_codes():
    """FSDP/ZeRO-3 gather each layer in the format its shards are stored in: bitsandbytes flattens
    a Params4bit's packed codes (bnb_4bit_quant_storage) into the flat parameter, 4 bits a weight,
    so two gathered Llama-2-70B layers (855,638,016 weights each) are 855,638,016 bytes, not the
    3,422,552,064 of a bf16 gather. The absmax constants are not gathered: see the next test. FSDP's
    root unit (the 16-bit embedding and head, 2 x 32,000 x 8,192 x 2 = 1,048,576,000 bytes) stays
    gathered besides."""
    shape = gpusizer.resolve_model("llama-2-70b")
    m = shape.transformer
    assert m is not None and layer_params(m) == 855_638_016
    adapter = Adapter(rank=8, base_quantisation="nf4", dtype="bf16")
    base = {"mode": "train", "precision": "bf16", "batch": 1, "seq_len": 512, "checkpointing": True,
            "adapter": adapter}
    one = estimate_memory(shape, RunConfig.model_validate(base))
    fsdp = estimate_memory(shape, RunConfig.model_validate({**base, "strategy": "fsdp", "gpus": 8}))
    assert fsdp.transient_bytes - one.transient_bytes == 855_638_016 + 1_048_576_000


def test_qlora_absmax_constants_stay_whole_on_every_rank():
    """bitsandbytes keeps a 4-bit weight's absmax constants in a QuantState beside the parameter,
    so FSDP and ZeRO-3 shard only the codes. Llama-2-70B's 68,451,041,280 quantised weights carry
    68,451,041,280 / 64 = 1,069,547,520 bytes of 8-bit absmax and 68,451,041,280 / 16,384 x 4 =
    16,711,680 bytes of fp32 second-level constants: 1,086,259,200 bytes, all of it on each of 2
    FSDP ranks instead of half (543,129,600 bytes more a GPU). fms-acceleration's QLoRA runs
    (scripts/benchmarks/refs/a100_80gb.csv at 24bdadb, mem_torch_mem_alloc_in_bytes) kept, on each of
    2 FSDP ranks, this much more than half of what one GPU kept, against half the constants:
    Llama-2-70B 677,242,880 (543,129,600), Mixtral-8x7B 404,224,000 (368,476,160), Mistral-7B
    91,011,072 (55,377,920)."""
    shape = gpusizer.resolve_model("llama-2-70b")
    m = shape.transformer
    assert m is not None and matrix_params(m) == 68_451_041_280
    adapter = Adapter(rank=16, targets=("attention",), base_quantisation="nf4")
    base = {"mode": "train", "precision": "bf16", "batch": 2, "seq_len": 4096, "checkpointing": True,
            "adapter": adapter}
    one = estimate_memory(shape, RunConfig.model_validate(base))
    for strategy in ("fsdp", "zero3"):
        two = estimate_memory(shape, RunConfig.model_validate({**base, "strategy": strategy, "gpus": 2}))
        assert two.weights_bytes - -(-one.weights_bytes // 2) == 543_129_600
    # FSDP's CPU offload moves the sharded codes to the host; the constants stay on the GPU
    offload = estimate_memory(shape, RunConfig.model_validate(
        {**base, "strategy": "fsdp", "gpus": 2, "offload": "all"}))
    assert offload.weights_bytes == 1_086_259_200


def test_weight_offload_under_fsdp_streams_the_gathered_layers_once():
    """Under FSDP the layers offloaded weights stream into are the gathered layers already counted;
    offload adds only the GPU copy of the rank's CPU shard a layer is gathered from
    (FlatParamHandle.pre_unshard: flat_param_to(device)), dropped once gathered: 427,819,008 / 2 =
    213,909,504 bytes for a Llama-2-70B QLoRA layer (427,819,008 bytes of 4-bit codes) over 2 GPUs,
    not the two 16-bit layers (3,422,552,064 bytes) counted before."""
    shape = gpusizer.resolve_model("llama-2-70b")
    adapter = Adapter(rank=8, base_quantisation="nf4", dtype="bf16")
    base = {"mode": "train", "precision": "bf16", "batch": 2, "seq_len": 2048, "checkpointing": True,
            "adapter": adapter, "strategy": "fsdp", "gpus": 2}
    kept = estimate_memory(shape, RunConfig.model_validate(base))
    offload = estimate_memory(shape, RunConfig.model_validate({**base, "offload": "all"}))
    assert offload.transient_bytes - kept.transient_bytes == 213_909_504


@pytest.mark.parametrize("offload", ["optimizer", "params"])
def test_fsdp_offloads_everything_or_nothing(cli, offload):
    """PyTorch FSDP's CPU offload moves the weights, gradients and optimizer step together
    (torch/distributed/fsdp/api.py); it has no optimizer-only or weights-only offload."""
    result = cli("fit-model", "--model", "llama-2-7b", "--gpus", "8", "--strategy", "fsdp", "--offload", offload,
                 "--gpu", "h100-sxm5-80gb", "--json")
    assert result.exit_code == ExitCode.USAGE
    error = json.loads(result.stdout)["error"]
    assert error["message"].startswith("--offload: PyTorch FSDP cannot offload the")
    full = cli("fit-model", "--model", "llama-2-7b", "--gpus", "8", "--strategy", "fsdp", "--offload", "all",
               "--gpu", "h100-sxm5-80gb", "--json")
    breakdown = json.loads(full.stdout)["results"]["breakdown"]
    assert full.exit_code == 0 and breakdown["gradients_bytes"] == breakdown["optimizer_bytes"] == 0


@pytest.mark.parametrize(
    ("strategy", "precision", "gpus", "tp", "bucket"),
    [
        ("zero3", "bf16", 8, None, 1_000_000_000),   # 5e8 elements x 2 bytes (bf16 mode)
        ("zero2", "mixed", 4, None, 1_000_000_000),  # AMP runs as DeepSpeed's 16-bit mode: 16-bit gradients
        ("zero1", "fp32", 2, None, 2_000_000_000),   # fp32 training: 4 bytes an element
        ("fsdp", "bf16", 8, None, 0),                # PyTorch FSDP has no such bucket
        ("ddp", "bf16", 8, None, 0),
        ("zero3", "bf16", 1, None, 1_000_000_000),   # one GPU too: allocated whatever the world size
        ("zero1", "bf16", 8, 2, 0),                  # with tp: Megatron-Core's distributed optimizer
    ],
)
def test_deepspeed_zero_holds_its_gradient_bucket(strategy, precision, gpus, tp, bucket):
    """DeepSpeed ZeRO keeps one flat gradient bucket of reduce_bucket_size elements (5e8 by
    default, contiguous_gradients on) in the dtype it trains in."""
    cfg = RunConfig.model_validate({"mode": "train", "precision": precision, "strategy": strategy, "gpus": gpus,
                                    **({"tp": tp} if tp else {})})
    assert deepspeed_bucket_bytes(cfg) == bucket


def test_zero3_and_fsdp_differ_by_the_bucket_and_the_root_unit():
    """DeepSpeed ZeRO-3 and FSDP shard alike; their transients differ by DeepSpeed's gradient
    bucket (1e9 bytes in bf16) and FSDP's root unit, gathered from the forward through the backward
    (Llama-2-70B's embedding and head: 2 x 32,000 x 8,192 x 2 = 1,048,576,000 bytes; over 8 GPUs
    with tp=1 the whole of it on every GPU)."""
    shape = gpusizer.resolve_model("llama-2-70b")
    base = {"mode": "train", "precision": "bf16", "batch": 8, "seq_len": 2048, "checkpointing": True,
            "adapter": Adapter(rank=8), "gpus": 8}
    zero3 = estimate_memory(shape, RunConfig.model_validate({**base, "strategy": "zero3"}))
    fsdp = estimate_memory(shape, RunConfig.model_validate({**base, "strategy": "fsdp"}))
    m = shape.transformer
    assert m is not None
    assert fsdp_root_bytes(m, RunConfig.model_validate({**base, "strategy": "fsdp"})) == 1_048_576_000
    assert zero3.transient_bytes - fsdp.transient_bytes == 1_000_000_000 - 1_048_576_000
    assert any("reduce_bucket_size" in n for n in zero3.notes)
    assert any("root unit" in n for n in fsdp.notes)
    # a tied embedding is one matrix (Llama-3.2-1B: 128,256 x 2,048 x 2 bytes)
    small = gpusizer.resolve_model("llama-3.2-1b")
    assert small.transformer is not None and small.transformer.tied_embeddings
    cfg = RunConfig.model_validate({"mode": "train", "precision": "bf16", "strategy": "fsdp", "gpus": 2})
    assert fsdp_root_bytes(small.transformer, cfg) == 525_336_576


def test_qlora_under_autocast_keeps_the_unquantised_parameters_in_fp32():
    """peft's prepare_model_for_kbit_training casts every parameter that is not Params4bit to fp32:
    with --precision mixed, Mistral-7B's embeddings, norms and head (262,410,240 parameters) take
    4 bytes a parameter instead of 2, and the checkpointed layer inputs are fp32."""
    shape = gpusizer.resolve_model("mistral-7b")
    m = shape.transformer
    assert m is not None
    rest = shape.params - matrix_params(m)
    assert rest == 262_410_240
    adapter = Adapter(rank=16, targets=("attention",), base_quantisation="nf4")
    base = {"mode": "train", "batch": 4, "seq_len": 4096, "checkpointing": True, "adapter": adapter}
    bf16 = estimate_memory(shape, RunConfig.model_validate({**base, "precision": "bf16"}))
    mixed = estimate_memory(shape, RunConfig.model_validate({**base, "precision": "mixed"}))
    assert mixed.weights_bytes - bf16.weights_bytes == 2 * rest
    # 32 checkpointed layer inputs of 4 x 4096 x 4096, 2 bytes more each
    assert mixed.activations_bytes - bf16.activations_bytes >= 32 * 4 * 4096 * 4096 * 2


# --------------------------------------------------------------------------
# vLLM's hybrid KV cache (sliding-window layers)


def _window_model(layers: int, sliding: int, window: int) -> TransformerShape:
    return TransformerShape(kind="decoder", layers=layers, hidden=1024, heads=8, n_kv_heads=8,
                            attention_head_dim=128, ffn=4096, vocab=32000, sliding_layers=sliding,
                            sliding_window=window)


@pytest.mark.parametrize(
    ("layers", "sliding", "groups"),
    [
        (24, 12, (12, 1, 1)),   # gpt-oss-20b: two groups of 12 (vLLM's comment on gpt-oss-20b)
        (25, 12, (13, 1, 1)),   # 12 sw + 13 full, under 1.5x: padded to (13, 13) as vLLM's comment says
        (26, 22, (4, 1, 6)),    # Gemma 3 1B: 22 sliding, 4 full -> groups of 4, 6 sliding + 1 full
        (32, 0, (32, 1, 0)),    # every layer global: one group
        (32, 32, (32, 0, 1)),   # every layer windowed: one group
    ],
)
def test_kv_cache_groups_follow_vllm(layers, sliding, groups):
    g = kv_cache_groups(_window_model(layers, sliding, 128) if sliding else
                        TransformerShape(kind="decoder", layers=layers, hidden=1024, heads=8, n_kv_heads=8,
                                         attention_head_dim=128, ffn=4096, vocab=32000))
    assert (g.group_size, g.full, g.sliding) == groups


def test_sliding_window_blocks_per_request_reproduce_vllms_gpt_oss_concurrency():
    """vLLM 0.19 serving gpt-oss-20b at TP=2 logged 323,972 blocks and "Maximum concurrency for
    8,192 tokens per request: 316.07x": 323,972 / (512 full + 513 sliding blocks) = 316.07. At
    131,072 tokens the sliding group needs only ceil((128 - 1 + 8192) / 16) + 1 = 521 blocks."""
    m = gpusizer.resolve_model("gpt-oss-20b").transformer
    assert m is not None and (m.sliding_layers, m.sliding_window) == (12, 128)
    assert blocks_per_request(m, 8192) == 512 + 513
    assert round(323_972 / blocks_per_request(m, 8192), 2) == 316.07
    assert blocks_per_request(m, 131_072) == 8192 + 521


def test_hybrid_kv_tokens_count_every_layer_and_windows_raise_long_context_concurrency():
    shape = gpusizer.resolve_model("gpt-oss-20b")
    m = shape.transformer
    assert m is not None
    h100 = gpusizer.load_catalog().resolve("h100-sxm5-80gb").gpu
    cfg = RunConfig(mode="inference", weight_format="mxfp4")
    cap = serving_capacity(shape, cfg, h100.memory_bytes, 131_072)
    # a block is 16 tokens of 12 layers; the logged tokens are blocks / 2 groups x 16
    assert cap.blocks == cap.kv_budget_bytes // (BLOCK_TOKENS * cap.kv_bytes_per_token // 2)
    assert cap.kv_tokens == cap.blocks // 2 * BLOCK_TOKENS
    assert cap.max_concurrency == cap.blocks // (8192 + 521)
    global_only = ModelShape.model_validate({**shape.model_dump(), "arch": {
        **m.model_dump(), "sliding_layers": 0, "sliding_window": None}})
    flat = serving_capacity(global_only, cfg, h100.memory_bytes, 131_072)
    assert flat.kv_tokens == pytest.approx(cap.kv_tokens, abs=16)
    assert cap.max_concurrency >= 1.8 * flat.max_concurrency


def test_sliding_layers_need_a_window():
    with pytest.raises(ValueError, match="sliding_window"):
        TransformerShape(kind="decoder", layers=4, hidden=64, heads=4, n_kv_heads=4, attention_head_dim=16,
                         ffn=256, vocab=100, sliding_layers=2)


def test_deepspeed_offloads_weights_and_swaps_to_nvme_only_under_zero3(cli):
    """DeepSpeed's offload_param is a ZeRO-3 option, and its NVMe swappers live in stage3.py
    (ZeRO-Infinity): ZeRO-1/2 keep offloaded state in host memory. So a ddp run that offloads the
    optimizer to NVMe runs on ZeRO-3, and ZeRO-2 refuses weights or NVMe."""
    base = ("fit-model", "--model", "llama-2-7b", "--gpu", "h100-sxm5-80gb", "--checkpointing")
    nvme = json.loads(cli(*base, "--offload", "optimizer", "--offload-to", "nvme", "--json").stdout)
    assert nvme["input"]["strategy"] == "zero3" and nvme["results"]["breakdown"]["nvme_bytes"] > 0
    for extra, field in ((("--offload", "optimizer", "--offload-to", "nvme"), "--offload-to"),
                         (("--offload", "params"), "--offload"), (("--offload", "all"), "--offload")):
        result = cli(*base, "--strategy", "zero2", *extra, "--json")
        assert result.exit_code == ExitCode.USAGE, extra
        assert json.loads(result.stdout)["error"]["message"].startswith(f"{field}: DeepSpeed"), extra


def test_recommend_sizes_an_offloading_run_as_zero_offload_and_shards_it_with_zero3(cli_json):
    """recommend echoes the stage an offloading run takes, and a plan that must shard it falls back
    to ZeRO-3 (FSDP cannot offload the optimizer alone)."""
    doc = cli_json("recommend", "--workload", "llm-train", "--params", "100B", "--offload", "optimizer",
                   "--budget", "1000000", "--top", "3")
    assert doc["input"]["strategy"] == "zero2"
    configs = doc["results"]["plan"]["configurations"]
    assert configs and {c["strategy"] for c in configs} <= {"zero2", "zero3"}


@pytest.mark.parametrize("optimizer", ["adam8bit", "paged-adamw-8bit"])
@pytest.mark.parametrize(("offload", "strategy", "framework"), [
    ("optimizer", "ddp", "DeepSpeed's ZeRO-Offload"), ("optimizer", "zero2", "DeepSpeed's ZeRO-Offload"),
    ("all", "zero3", "DeepSpeed's ZeRO-Offload"), ("all", "fsdp", "PyTorch FSDP's CPU offload")])
def test_bitsandbytes_8bit_optimizers_refuse_a_host_optimizer_step(cli, optimizer, offload, strategy, framework):
    """bitsandbytes' 8-bit optimizers are CUDA kernels; ZeRO-Offload steps the host's state with
    DeepSpeed's CPU Adam and FSDP's CPU offload steps on CPU tensors, so both refuse them. Weights
    alone offloaded (ZeRO-3 offload_param) leave the step on the GPU."""
    base = ("fit-model", "--model", "llama-2-7b", "--gpu", "h100-sxm5-80gb", "--optimizer", optimizer,
            "--gpus", "2", "--json")
    result = cli(*base, "--strategy", strategy, "--offload", offload)
    assert result.exit_code == ExitCode.USAGE
    error = json.loads(result.stdout)["error"]
    assert error["message"].startswith(f"--optimizer: {optimizer} (a bitsandbytes 8-bit optimizer)")
    what = "the optimizer" if offload == "optimizer" else "everything"
    assert f"offloading {what} moves the optimizer step to the host ({framework})" in error["message"]
    assert "adamw" in error["hint"]
    weights_only = cli(*base, "--strategy", "zero3", "--offload", "params")
    assert weights_only.exit_code == 0
    assert json.loads(weights_only.stdout)["results"]["breakdown"]["optimizer_bytes"] > 0


def test_lora_zero_offload_holds_the_whole_reduce_bucket_and_an_adapter_sized_copy_buffer(cli_json):
    """A LoRA run offloading its optimizer (ZeRO-2 on one GPU): DeepSpeed allocates the reduce
    bucket at reduce_bucket_size elements whatever is trained (setup_buckets, stage_1_and_2.py:
    5e8 x 2 bytes in its bf16 mode), and copies gradients through a buffer of the largest trained
    parameter, in the dtype DeepSpeed casts the module to: Llama 2 7B's largest LoRA rank-16
    matrix is 16 x 11,008 elements, 352,256 bytes in bf16 (not the adapters' fp32 704,512)."""
    doc = cli_json("fit-model", "--model", "llama-2-7b", "--lora", "16", "--offload", "optimizer",
                   "--gpu", "rtx4090", code=ExitCode.NOTHING_FITS)
    breakdown = doc["results"]["breakdown"]
    parts = {p["name"]: p for p in breakdown["transient_parts"]}
    assert parts["ZeRO reduce bucket"]["bytes"] == 500_000_000 * 2
    assert parts["offload copy buffer"]["bytes"] == 16 * 11_008 * 2
    assert "largest trained gradient" in parts["offload copy buffer"]["explanation"]
    assert sum(p["bytes"] for p in parts.values()) == breakdown["transient_bytes"]
    assert any("16-bit copy buffer of the largest trained parameter" in n and "(344.00 KiB each)" in n
               for n in breakdown["notes"])


@pytest.mark.parametrize("settings", [
    {"strategy": "fsdp", "gpus": 8, "checkpointing": True},
    {"strategy": "zero3", "gpus": 8, "offload": "all"},
    {"strategy": "zero2", "gpus": 4, "offload": "optimizer", "micro_batches": 2},
    {"strategy": "ddp", "gpus": 2, "precision": "mixed"},
    {"strategy": "fsdp", "gpus": 2, "adapter": Adapter(rank=8, base_quantisation="nf4"), "precision": "bf16"},
    {"gpus": 1, "offload": "params", "strategy": "zero3", "precision": "bf16"},
    {"mode": "inference", "precision": "int4"},
    {"mode": "inference", "precision": "mixed"},
    {"tied": True, "precision": "bf16"},
])
def test_every_transient_buffer_is_named_and_explained(settings):
    """The breakdown's transient row is the sum of named buffers, each with its explanation."""
    settings = dict(settings)
    shape = gpusizer.resolve_model("llama-3.2-1b" if settings.pop("tied", False) else "llama-2-7b")
    cfg = RunConfig.model_validate({"mode": "train", "batch": 2, "seq_len": 2048, **settings})
    b = estimate_memory(shape, cfg)
    assert b.transient_bytes > 0 and b.transient_parts
    assert sum(p.bytes for p in b.transient_parts) == b.transient_bytes
    for part in b.transient_parts:
        assert part.bytes > 0 and part.explanation == TRANSIENT_BUFFERS[part.name]
