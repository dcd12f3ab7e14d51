"""Pipeline, context and expert parallelism: layouts, per-GPU memory and speed.

Figures are computed by hand from the zoo's published shapes (config.json) and from
Narayanan et al. 2021 (1F1B's bubble and in-flight micro-batches) and Korthikanti et al.
2022 (the first stage holds p micro-batches of L / p layers: L layers' activations).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpusizer.domain.parallelism import Parallelism, layout_words, sharding
from gpusizer.domain.run import make_run_config
from gpusizer.domain.shape import shape_from_model
from gpusizer.errors import ExitCode, UsageError
from gpusizer.hardware.catalog import load_catalog
from gpusizer.memory.estimate import (
    estimate_memory,
    model_state,
    pipeline_stage,
    weight_bytes,
)
from gpusizer.models.zoo import load_zoo
from gpusizer.performance.estimate import bubble_fraction, estimate_performance


def _shape(name: str):
    return shape_from_model(load_zoo().resolve(name))


# --------------------------------------------------------------------------
# how the degrees combine


def test_sixteen_gpus_as_tp2_pp4_dp2_zero1():
    par = Parallelism.of("zero1", 16, tp=2, pp=4)
    assert (par.tp, par.pp, par.cp, par.dp, par.ep) == (2, 4, 1, 2, 1)
    assert layout_words("zero1", 16, "train", tp=2, pp=4) == "16 GPUs (TP=2, PP=4, DP=2 ZeRO-1)"
    split = sharding(par)
    # ZeRO-1 shards the optimizer over the 2 replicas; the weights only by tp (pp places layers)
    assert (split.weights, split.gradients, split.optimizer, split.stages) == (2, 2, 4, 4)


def test_expert_parallel_ranks_are_data_parallel_ranks():
    # Megatron-Core / DeepSpeed-MoE: 8 GPUs with ep=8 are 8 replicas of the dense part, each
    # holding one expert of every MoE layer; ZeRO-3 then has nothing left to shard the experts over
    par = Parallelism.of("zero3", 8, ep=8)
    assert (par.dp, par.ep, par.gpus) == (8, 8, 8)
    split = sharding(par)
    assert (split.weights, split.expert_weights) == (8, 8)
    assert sharding(Parallelism.of("zero3", 16, ep=8)).expert_weights == 16


def test_strategy_tp_takes_the_gpus_left_in_a_node():
    assert Parallelism.of_cluster("tp", 8, 4, pp=2).tp == 8  # 32 GPUs: TP=8 in a node, PP=2, DP=2
    assert Parallelism.of_cluster("tp", 8, 4, pp=2).dp == 2
    assert Parallelism.of("tp", 16, pp=4).tp == 4


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(gpus=16, pp=3), "gpus"),
    (dict(gpus=12, tp=8), "tp"),
    (dict(gpus=8, tp=2, ep=8), "ep"),
])
def test_layouts_that_do_not_divide_name_their_option(kwargs, field):
    gpus = kwargs.pop("gpus")
    with pytest.raises(UsageError) as err:
        Parallelism.of("ddp", gpus, **kwargs)
    assert err.value.field == field


# --------------------------------------------------------------------------
# memory


def test_llama2_70b_tp8_pp4_stage_weights_from_its_shapes():
    """Llama 2 70B (config.json: 80 layers, hidden 8192, vocab 32000, untied head) in bf16 over
    tp=8 x pp=4: each stage holds 20 layers, the first also the embedding, the last the head."""
    shape = _shape("llama-2-70b")
    m = shape.transformer
    cfg = make_run_config(precision="bf16", gpus=32, tp=8, pp=4, batch=1, seq_len=4096, checkpointing=True,
                          micro_batches=8)
    embedding = m.vocab * m.hidden  # 262,144,000
    per_layer = (shape.params - 2 * embedding) / m.layers  # the layers' share, norms included
    stage_params = 20 * per_layer + embedding
    expected = math.ceil(stage_params / 8 * 2)  # bf16 weights over tp = 8
    assert expected == 4_343_808_512
    for index in (0, 3):
        assert model_state(shape, cfg, pipeline_stage(m, cfg, index)).weights == expected
    assert estimate_memory(shape, cfg).weights_bytes == expected


@pytest.mark.parametrize(("micro_batches", "in_flight"), [(8, 4), (2, 2), (1, 1)])
def test_first_stage_holds_min_pp_m_micro_batches(micro_batches, in_flight):
    """With checkpointing each layer keeps its input, s x b x h in bf16; the first 1F1B stage
    keeps its 20 layers' inputs for min(pp, m) micro-batches (Narayanan et al. 2021, 2.2.1)."""
    shape = _shape("llama-2-70b")
    cfg = make_run_config(precision="bf16", gpus=32, tp=8, pp=4, batch=1, seq_len=4096, checkpointing=True,
                          micro_batches=micro_batches)
    mem = estimate_memory(shape, cfg)
    s, b, h = 4096, 1, 8192
    assert mem.activations_bytes == in_flight * 20 * 2 * s * b * h
    assert any("first stage" in n for n in mem.notes) or micro_batches == 1


def test_first_stage_holds_as_many_layer_activations_as_the_whole_model():
    """Korthikanti et al. 2022, section 4.2: with m >= p the first stage stores p micro-batches
    of L / p layers, the activations of all L layers, whatever p is."""
    shape = _shape("llama-2-70b")
    base = dict(precision="bf16", tp=8, batch=1, seq_len=4096, checkpointing=True, micro_batches=8)
    whole = estimate_memory(shape, make_run_config(gpus=8, **base)).activations_bytes
    staged = estimate_memory(shape, make_run_config(gpus=32, pp=4, **base)).activations_bytes
    # the whole model adds the final norm's input and output and the loss's saved log-softmax
    assert staged == 80 * 2 * 4096 * 8192
    assert staged < whole < staged * 1.2


def test_mixtral_8x7b_ep8_expert_weights_per_gpu():
    """Mixtral 8x7B (config.json: 32 layers, 8 experts of 3 x 4096 x 14336): ep=8 leaves one
    expert per MoE layer on each GPU; attention, embeddings and routers stay whole."""
    shape = _shape("mixtral-8x7b")
    experts = 32 * 8 * 3 * 4096 * 14336
    assert experts == 45_097_156_608
    dense = shape.params - experts
    cfg = make_run_config(mode="inference", precision="bf16", gpus=8, ep=8)
    assert estimate_memory(shape, cfg).weights_bytes == 2 * (dense + experts // 8) == 14_485_561_344


def test_context_parallel_halves_the_sequence_each_rank_holds():
    shape = _shape("llama-2-70b")
    base = dict(precision="bf16", tp=8, batch=1, seq_len=4096, checkpointing=True)
    one = estimate_memory(shape, make_run_config(gpus=8, **base))
    two = estimate_memory(shape, make_run_config(gpus=16, cp=2, **base))
    # the layers' checkpointed inputs: 80 x 2 bytes x 2,048 tokens x 8192
    assert two.activations_bytes < one.activations_bytes
    assert two.weights_bytes == one.weights_bytes  # cp replicates the weights
    assert two.activations_bytes >= 80 * 2 * 2048 * 8192


@pytest.mark.parametrize(("name", "gpus", "layout"), [
    ("llama-2-70b", 32, dict(tp=8, pp=4, strategy="zero1")),
    ("mixtral-8x7b", 16, dict(tp=2, ep=4, strategy="zero3")),
    ("llama-2-70b", 16, dict(pp=2, cp=2, strategy="fsdp")),
])
def test_total_over_gpus_holds_every_weight(name, gpus, layout):
    _check_no_bytes_lost(name, gpus, layout)


def _check_no_bytes_lost(name: str, gpus: int, layout: dict) -> None:
    shape = _shape(name)
    m = shape.transformer
    cfg = make_run_config(precision="bf16", gpus=gpus, batch=1, seq_len=1024, **layout)
    par = cfg.parallelism
    total = weight_bytes(shape, "bf16")
    gpus_per_stage = par.gpus // par.pp
    held = sum(model_state(shape, cfg, pipeline_stage(m, cfg, i) if par.pp > 1 else None).weights * gpus_per_stage
               for i in range(par.pp))
    assert held >= total
    # and nothing counted twice but the replicas, a tied embedding's copy on the last stage, and rounding
    split = cfg.sharding
    replicas = max(gpus_per_stage // split.weights, gpus_per_stage // split.expert_weights)
    assert held <= (total + 2 * m.vocab * m.hidden) * replicas + gpus


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["llama-2-70b", "mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b", "llama-2-7b"]),
    tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2]),
    dp=st.sampled_from([1, 2, 4]), ep=st.sampled_from([1, 2, 4]),
    strategy=st.sampled_from(["ddp", "zero1", "zero3", "fsdp"]),
)
def test_no_weight_bytes_are_lost_on_any_valid_layout(name, tp, pp, cp, dp, ep, strategy):
    shape = _shape(name)
    m = shape.transformer
    # only valid layouts (the errors of the others are tested above)
    assume(not (m.layers % pp or not m.allows_tp(tp) or (dp * cp) % ep or (ep > 1 and (m.experts <= 1 or m.experts % ep))))
    _check_no_bytes_lost(name, tp * pp * cp * dp, dict(tp=tp, pp=pp, cp=cp, ep=ep, strategy=strategy))


# --------------------------------------------------------------------------
# speed


def test_1f1b_bubble_is_3_of_11_at_pp4_m8():
    """Narayanan et al. 2021, section 2.2.1: (p - 1) / (m + p - 1) of the step is bubble."""
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    shape = _shape("llama-2-70b")
    gpu = load_catalog().resolve("h100-sxm5-80gb").gpu
    cfg = make_run_config(precision="bf16", gpus=8, tp=2, pp=4, batch=1, seq_len=4096, checkpointing=True)
    est = estimate_performance(gpu, shape, cfg, grad_accumulation=8)
    assert est.micro_batches == 8
    assert est.pipeline_bubble_s / est.step_time_s == pytest.approx(3 / 11)


def test_pipeline_stage_does_a_pp_th_of_the_flops():
    shape = _shape("llama-2-70b")
    gpu = load_catalog().resolve("h100-sxm5-80gb").gpu
    base = dict(precision="bf16", tp=8, batch=1, seq_len=4096, checkpointing=True)
    one = estimate_performance(gpu, shape, make_run_config(gpus=8, **base), grad_accumulation=16)
    four = estimate_performance(gpu, shape, make_run_config(gpus=8, pp=4, **base), nodes=4, grad_accumulation=16)
    assert four.flops_per_step == pytest.approx(one.flops_per_step / 4)
    # four times the GPUs, less the bubble (3 / 19) and the sends between stages
    assert 2.5 * one.throughput_per_s < four.throughput_per_s < 4 * 16 / 19 * one.throughput_per_s


def test_expert_parallel_all_to_all_is_counted():
    """Mixtral at ep=8 in one NVSwitch node: 4,096 tokens x 2 experts x 4096 x 2 bytes, 7/8 of it
    off the rank, dispatched and combined around 32 layers, forward and backward."""
    shape = _shape("mixtral-8x7b")
    gpu = load_catalog().resolve("h100-sxm5-80gb").gpu
    base = dict(precision="bf16", batch=1, seq_len=4096, checkpointing=True, gpus=8, strategy="zero1")
    with_ep = estimate_performance(gpu, shape, make_run_config(ep=8, **base))
    size = 4096 * 2 * 4096 * 2 * 7 / 8
    note = next(n for n in with_ep.notes if n.startswith("expert parallelism"))
    assert f"{size / 1e6:,.2f} MB" in note  # 58.72 MB
    assert with_ep.comm_bytes >= 4 * 32 * size


# --------------------------------------------------------------------------
# the command line


def test_fit_model_words_and_echoes_the_layout(cli, cli_json):
    args = ("fit-model", "--model", "llama-2-70b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--tp", "2",
            "--pp", "4", "--strategy", "zero1", "--grad-accumulation", "8", "--seq-len", "4096", "--checkpointing")
    doc = cli_json(*args, code=ExitCode.NOTHING_FITS)
    assert {k: doc["input"][k] for k in ("gpus", "tp", "pp", "cp", "ep", "micro_batches")} == \
        dict(gpus=16, tp=2, pp=4, cp=1, ep=1, micro_batches=8)
    text = cli(*args, env={"COLUMNS": "200"}).stdout
    assert "16 GPUs (TP=2, PP=4, DP=2 ZeRO-1)" in text


def test_estimate_echoes_the_layout(cli_json):
    doc = cli_json("estimate", "--model", "llama-2-70b", "--system", "dgx-h100", "--nodes", "2", "--tp", "8",
                   "--pp", "2", "--grad-accumulation", "8", "--batch", "1", "--seq-len", "4096", "--checkpointing",
                   "--strategy", "zero1")
    assert {k: doc["input"][k] for k in ("tp", "pp", "cp", "ep", "micro_batches")} == \
        dict(tp=8, pp=2, cp=1, ep=1, micro_batches=8)
    est = doc["results"]["estimate"]
    assert est["pipeline_bubble_s"] / est["step_time_s"] == pytest.approx(1 / 9)


@pytest.mark.parametrize(("args", "option", "words"), [
    (("--model", "llama-2-70b", "--gpus", "24", "--pp", "3"), "--pp", "80 layers do not split evenly"),
    (("--model", "llama-2-70b", "--gpus", "16", "--pp", "3"), "--gpus", "pipeline stage"),
    (("--model", "llama-2-7b", "--gpus", "8", "--ep", "2"), "--ep", "is dense"),
    (("--model", "mixtral-8x7b", "--gpus", "3", "--ep", "3"), "--ep", "8 experts per layer"),
    (("--model", "llama-2-70b", "--gpus", "8", "--tp", "3"), "--tp", "do not split into 3-way tensor parallelism"),
    (("--model", "llama-2-70b", "--gpus", "8", "--tp", "8", "--pp", "2"), "--tp", "the 4 GPUs left by 2 pipeline stages"),
    (("--model", "llama-2-7b", "--gpus", "2", "--cp", "2", "--seq-len", "1001"), "--cp", "2 x 2 chunks"),
    (("--model", "llama-2-7b", "--gpus", "2", "--cp", "2", "--inference"), "--cp", "training"),
    (("--model", "resnet50", "--gpus", "2", "--pp", "2"), "--pp", "transformers"),
    (("--model", "llama-2-70b", "--gpus", "128", "--pp", "128"), "--pp", "more than"),
])
def test_invalid_layouts_exit_2_naming_the_option(cli, args, option, words):
    result = cli("fit-model", "--gpu", "h100-sxm5-80gb", *args)
    assert result.exit_code == ExitCode.USAGE, result.stdout
    first = result.stderr.strip().splitlines()[0]
    assert first.startswith(f"Error: {option}:") and words in first, first
    doc = json.loads(cli("fit-model", "--gpu", "h100-sxm5-80gb", *args, "--json").stdout)
    assert doc["error"]["exit_code"] == 2


def test_estimate_strategy_tp_resolves_tp_within_a_node(cli_json):
    doc = cli_json("estimate", "--model", "llama-2-70b", "--system", "dgx-h100", "--nodes", "4", "--strategy", "tp",
                   "--pp", "4", "--grad-accumulation", "16", "--batch", "1", "--seq-len", "4096", "--checkpointing")
    # 32 GPUs: pp = 4 leaves 8, a node's worth, all tensor-parallel
    assert (doc["input"]["tp"], doc["input"]["pp"]) == (8, 4)
    assert doc["results"]["gpus_total"] == 32


def test_fewest_gpus_keeps_the_layout(cli_json):
    """min GPUs under a layout is its own GPU count times 1, 2, 4, ... replicas: the first that fits."""
    from gpusizer.memory.estimate import fits

    doc = cli_json("fit-model", "--model", "mixtral-8x7b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--ep", "8",
                   "--strategy", "zero1", "--seq-len", "4096", "--checkpointing", code=ExitCode.NOTHING_FITS)
    need = doc["results"]["gpus"][0]["min_gpus"]
    assert need is not None and need % 8 == 0
    shape = _shape("mixtral-8x7b")
    base = dict(ep=8, strategy="zero1", seq_len=4096, checkpointing=True)
    capacity = doc["results"]["gpus"][0]["memory_bytes"]
    assert fits(shape, make_run_config(gpus=need, **base), capacity)
    assert not fits(shape, make_run_config(gpus=need // 2, **base), capacity)


def test_context_parallel_ring_volume():
    """Llama 3.1 8B (32 layers, 8 KV heads of 128) at 131,072 tokens over cp = 8: each rank passes
    its K and V chunk (16,384 tokens, 16 bits) 7 times a layer forward, twice that backward, and
    again in the forward that checkpointing repeats during backward: 4 passes."""
    shape = _shape("llama-3.1-8b")
    gpu = load_catalog().resolve("h100-sxm5-80gb").gpu
    cfg = make_run_config(precision="bf16", gpus=8, cp=8, batch=1, seq_len=131072, checkpointing=True)
    est = estimate_performance(gpu, shape, cfg)
    chunk = 2 * 8 * 128 * (131072 // 8) * 2
    volume = 7 * chunk * 32 * 4
    note = next(n for n in est.notes if n.startswith("context parallelism"))
    assert f"{volume / 1e9:,.2f} GB" in note  # 60.13 GB
    # the ring overlaps attention, which at 131K tokens takes longer than the exchange
    assert est.comm_exposed_s < est.comm_s


def test_estimate_words_the_layout_in_its_title(cli):
    result = cli("estimate", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--ep", "8", "--strategy", "zero1",
                 "--seq-len", "4096", "--batch", "1", "--checkpointing", env={"COLUMNS": "120"})
    assert result.exit_code in (0, ExitCode.NOTHING_FITS)
    assert "Mixtral 8x7B (v0.1) on 8 x h100-sxm5-80gb: EP=8, DP=8 ZeRO-1" in result.stdout


def test_activation_offloading_with_pipeline_stages_is_refused(cli):
    """torchtune's activation offloading is modelled for runs without pipeline stages; together
    they are a usage error naming --offload, not a silently unoffloaded estimate."""
    result = cli("fit-model", "--model", "llama-3.2-3b", "--lora", "8", "--offload", "activations", "--gpus", "2",
                 "--pp", "2", "--gpu", "a100")
    assert result.exit_code == 2
    assert "--offload" in result.stderr and "pipeline stages" in result.stderr


def test_strategy_tp_with_stages_finds_its_fewest_gpus(cli_json):
    """--strategy tp without --tp splits each layer over the GPUs the stages leave, up to a node's:
    the fewest GPUs is a count the layout takes (pp=4 times 1, 2, 4 or 8), not 'none'."""
    res = cli_json("fit-model", "--model", "llama-2-70b", "--strategy", "tp", "--pp", "4", "--gpus", "16",
                   "--grad-accumulation", "8", "--checkpointing", "--gpu", "h100-sxm5-80gb")["results"]
    (gpu,) = res["gpus"]
    assert gpu["fits"] and gpu["min_gpus"] in (4, 8, 16)
    fewer = cli_json("fit-model", "--model", "llama-2-70b", "--strategy", "tp", "--pp", "4", "--gpus",
                     str(gpu["min_gpus"]), "--grad-accumulation", "8", "--checkpointing", "--gpu",
                     "h100-sxm5-80gb")["results"]
    assert fewer["gpus"][0]["fits"]
    if gpu["min_gpus"] > 4:
        half = cli_json("fit-model", "--model", "llama-2-70b", "--strategy", "tp", "--pp", "4", "--gpus",
                        str(gpu["min_gpus"] // 2), "--grad-accumulation", "8", "--checkpointing", "--gpu",
                        "h100-sxm5-80gb", code=4)["results"]
        assert not half["gpus"][0]["fits"]


@pytest.mark.parametrize(("args", "option"), [
    (("--method", "rule-of-thumb", "--gpus", "8", "--pp", "8"), "--pp"),
    (("--method", "rule-of-thumb", "--gpus", "8", "--tp", "8"), "--tp"),
])
def test_the_rule_of_thumb_refuses_layouts(cli, args, option):
    result = cli("fit-model", "--model", "llama-2-70b", "--gpu", "h100-sxm5-80gb", *args)
    assert result.exit_code == 2 and option in result.stderr and "rule of thumb" in result.stderr


def test_exact_mode_refuses_tensor_parallelism_before_needing_torch(cli):
    result = cli("fit-model", "--hf-config", str(Path(__file__).parent / "data/hf/tiny-llama/config.json"), "--exact", "--tp", "2",
                 "--gpu", "h100-sxm5-80gb")
    assert result.exit_code == 2 and "--tp" in result.stderr


def test_checkpointing_repeats_the_forward_collectives():
    """Megatron's tensor parallelism all-reduces twice a layer in each forward pass and twice in
    backward; a checkpointed step runs the forward again during backward, so 6 all-reduces a layer
    instead of 4 (the same bytes each): 1.5x the traffic on a run with no other collective."""
    shape = _shape("llama-2-7b")
    gpu = load_catalog().resolve("h100-sxm5-80gb").gpu
    base = {"precision": "bf16", "gpus": 4, "strategy": "tp", "batch": 1, "seq_len": 4096}
    plain = estimate_performance(gpu, shape, make_run_config(**base))
    ckpt = estimate_performance(gpu, shape, make_run_config(**base, checkpointing=True))
    assert ckpt.comm_bytes == pytest.approx(1.5 * plain.comm_bytes)


def test_stages_send_the_residual_stream_at_the_width_the_memory_model_keeps():
    """Under AMP the residual stream is fp32 (memory model), so a stage boundary sends 4 bytes a
    value; in bf16, 2: Llama 2 7B, 4 x 4,096 tokens, tp = 1."""
    shape = _shape("llama-2-7b")
    gpu = load_catalog().resolve("h100-sxm5-80gb").gpu
    for precision, width in (("mixed", 4), ("bf16", 2)):
        est = estimate_performance(gpu, shape, make_run_config(precision=precision, gpus=2, pp=2, batch=4,
                                                               seq_len=4096, micro_batches=4))
        note = next(n for n in est.notes if n.startswith("pipeline"))
        size = 4 * 4096 * 4096 * width
        assert f"sends {size / 1e6:,.2f} MB a GPU ({8 * width}-bit)" in note, note


def test_too_many_micro_batches_name_the_option_people_type(cli):
    """RunConfig.micro_batches comes from --grad-accumulation: its bound is reported under that
    option, not under a --micro-batches that does not exist."""
    result = cli("fit-model", "--model", "resnet50", "--gpu", "t4", "--grad-accumulation", "70000")
    assert result.exit_code == 2 and "--grad-accumulation" in result.stderr and "--micro-batches" not in result.stderr
