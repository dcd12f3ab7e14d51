"""recommend as an optimizer: configurations chosen for a purchase budget or a cloud deadline."""

from __future__ import annotations

import json

import pytest

import gpusizer.cli.recommend  # noqa: F401  (registers the command on the shared app)
from gpusizer import api
from gpusizer.hardware.catalog import load_catalog
from gpusizer.hardware.systems import load_systems

CAT = load_catalog()


@pytest.fixture(scope="module")
def cnn_budget():
    return api.recommend("cnn", budget=10_000).results.plan


def test_a_budget_without_a_count_buys_configurations_ranked_by_throughput(cnn_budget):
    """Issue 17's acceptance: `recommend --workload cnn --budget 10000` spends the budget on several
    cards, ranked by predicted throughput, the count chosen by the tool."""
    plan = cnn_budget
    configs = plan.configurations
    assert plan.objective == "budget" and len(configs) == 10
    speeds = [c.throughput_per_s for c in configs]
    assert speeds == sorted(speeds, reverse=True)
    assert all(c.unit == "images/s" for c in configs)
    assert sum(c.gpus_total > 1 for c in configs) >= 8
    for c in configs:
        gpu = CAT.by_id(c.gpu_id)
        price = gpu.price
        assert price is not None and c.price_total_usd == pytest.approx(price.usd * c.gpus_total)
        assert c.price_total_usd <= 10_000
        # as many as the budget buys (or the power of two below, for layouts that need one), one box of at most
        # 8 unless the GPU reaches across nodes with GPUDirect RDMA
        most = int(10_000 // price.usd)
        assert c.gpus_total in {min(most, 8 if not gpu.gpudirect_rdma else most),
                                1 << (min(most, 8).bit_length() - 1)}
        assert c.nodes == 1 or gpu.gpudirect_rdma


def test_a_configuration_is_what_recommend_and_estimate_say_for_that_run(cnn_budget):
    """The optimizer assesses each configuration through the same pipeline: the speed of 'N x GPU' is the
    speed recommend --gpus N gives that GPU."""
    top = cnn_budget.configurations[0]
    same = api.recommend("cnn", gpus=top.gpus_per_node, nodes=top.nodes, top=200).results
    row = next(r for r in same.ranked if r.gpu_id == top.gpu_id)
    assert row.speed.throughput_per_s == pytest.approx(top.throughput_per_s)


def test_a_budget_with_a_count_keeps_the_per_gpu_ranking(cli_json):
    doc = cli_json("recommend", "--workload", "cnn", "--budget", "10000", "--gpus", "2")
    assert doc["results"]["plan"] is None and doc["input"]["objective"] is None


def test_a_deadline_picks_the_cheapest_cloud_configuration_that_finishes():
    """Issue 17's acceptance: Llama 3.1 8B on 1T tokens within 14 days: cloud configurations that finish in
    time, cheapest first, with their cost at the systems' dated on-demand prices."""
    r = api.recommend("llm-train", model="llama-3.1-8b", tokens="1T", deadline="14d")
    plan = r.results.plan
    assert r.fits and plan.objective == "deadline" and plan.configurations
    systems = {s.id: s for s in load_systems().systems}
    costs = [c.cost_usd for c in plan.configurations]
    assert costs == sorted(costs)
    for c in plan.configurations:
        system = systems[c.system]
        assert c.hours is not None and c.hours <= 14 * 24
        assert c.gpus_per_node == system.gpus and c.gpus_total == system.gpus * c.nodes
        assert c.usd_per_hour == pytest.approx(system.price.on_demand_usd_per_hour * c.nodes)
        assert c.cost_usd == pytest.approx(c.hours * c.usd_per_hour)
        assert c.hours == pytest.approx(1e12 / c.throughput_per_s / 3600)
        # the fewest nodes that finish: half as many would not, late or not fitting at all (node
        # counts are powers of two)
        if c.nodes > 1:
            half = api.estimate("llama-3.1-8b", system=c.system, nodes=c.nodes // 2, strategy=c.strategy,
                                tokens="1T").results
            assert half.time_to_train is None or half.time_to_train.hours > 14 * 24
            assert half.time_to_train is not None or half.estimate is None


def test_max_cost_and_hourly_budget_objectives():
    capped = api.recommend("llm-train", model="llama-3.1-8b", tokens="100B", max_cost=50_000).results.plan
    assert capped.configurations and all(c.cost_usd <= 50_000 for c in capped.configurations)
    hours = [c.hours for c in capped.configurations]
    assert hours == sorted(hours)
    hourly = api.recommend("llm-train", model="llama-3.1-8b", tokens="100B", budget_per_hour=100).results.plan
    assert hourly.configurations and all(c.usd_per_hour <= 100 for c in hourly.configurations)


@pytest.mark.parametrize(("args", "message"), [
    (["--tokens", "1T"], "a job (tokens or epochs) is for a cloud objective"),
    (["--deadline", "14d"], "needs the job"),
    (["--deadline", "fortnight", "--tokens", "1T"], "is not a duration"),
    (["--deadline", "14d", "--max-cost", "100", "--tokens", "1T"], "give one cloud objective"),
])
def test_plan_errors_exit_2_with_json(cli, args, message):
    result = cli("recommend", "--workload", "llm-train", "--model", "llama-3.1-8b", *args, "--json")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert message in json.dumps(json.loads(result.stdout))


def test_plan_prints_the_configurations(cli):
    result = cli("recommend", "--workload", "cnn", "--budget", "10000")
    assert result.exit_code == 0
    assert "Configurations for the most images/s for $10,000 of GPUs" in result.stdout
    assert "no hosts, power or networking" in result.stdout


def test_single_gpu_instances_stay_single_and_sxm_is_bought_by_the_board():
    plan = api.recommend("llm-train", model="llama-3.2-1b", tokens="10B", deadline="30d", top=100).results.plan
    systems = {s.id: s for s in load_systems().systems}
    assert all(c.nodes == 1 for c in plan.configurations if systems[c.system].gpus == 1)
    buy = api.recommend("llm-train", budget=300_000, top=100).results.plan
    for c in buy.configurations:
        if CAT.by_id(c.gpu_id).is_sxm:
            assert c.gpus_total % 8 == 0


@pytest.mark.parametrize(("args", "message"), [
    (["--workload", "llm-inference", "--model", "llama-3.1-8b", "--tokens", "1T", "--deadline", "7d"],
     "times a training run"),
    (["--workload", "llm-train", "--model", "llama-3.1-8b", "--epochs", "1", "--dataset-size", "10M",
      "--deadline", "7d"], "speed is in tokens/s"),
    (["--workload", "llm-train", "--model", "llama-3.1-8b", "--tokens", "1T", "--deadline", "7d", "--gpus", "8"],
     "would be ignored"),
    (["--workload", "cnn", "--budget", "10000", "--nodes", "2"], "chooses the counts"),
])
def test_plans_refuse_what_they_would_get_wrong_or_ignore(cli, args, message):
    result = cli("recommend", *args, "--json")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert message in json.dumps(json.loads(result.stdout))


@pytest.mark.parametrize("run", [["--lora", "16"], ["--qlora"], ["--checkpointing"]])
def test_recommend_sizes_the_same_run_as_fit_model(cli, run):
    """The memory fit takes fit-model's run settings (LoRA on a frozen 16-bit base, QLoRA, checkpointing), so
    both commands need the same bytes for the same run and agree on the RTX 4090."""
    fit_run = cli("fit-model", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", *run, "--json")
    rec_run = cli("recommend", "--workload", "llm-train", "--model", "llama-3.1-8b", "--top", "200", *run, "--json")
    fit, rec = json.loads(fit_run.stdout), json.loads(rec_run.stdout)
    assert rec["results"]["memory_needed_bytes"] == fit["results"]["breakdown"]["total_bytes"]
    fits = fit["results"]["gpus"][0]["fits"]
    assert fit_run.exit_code == (0 if fits else 4)
    assert ("rtx-4090" in {g["gpu_id"] for g in rec["results"]["ranked"]}) == fits
    assert fits == (run == ["--qlora"])  # 24.4 GB under QLoRA; 35 GB under LoRA; full training far more


def test_the_quadro_rtx_8000_no_longer_outranks_a_faster_cheaper_rtx_3090(cli_json):
    """Issue 17: the spec-sheet score put a $10,000 Quadro RTX 8000 above an RTX 3090 that its own speed column
    said was faster at a sixth of the price. The default order is now the predicted speed; under --sort score
    the Quadro row says that a listed GPU is at least as fast for no more money, and --why-not explains it."""
    args = ("recommend", "--workload", "cnn", "--segment", "workstation,consumer", "--top", "200")
    by_speed = {g["gpu_id"]: g for g in cli_json(*args)["results"]["ranked"]}
    assert by_speed["rtx-3090"]["rank"] < by_speed["quadro-rtx-8000"]["rank"]
    by_score = cli_json(*args, "--sort", "score", "--why-not", "Quadro RTX 8000", "--why-not", "MI300X")["results"]
    quadro = next(g for g in by_score["ranked"] if g["gpu_id"] == "quadro-rtx-8000")
    other = next(g for g in by_score["ranked"] if g["gpu_id"] == quadro["outclassed_by"])
    assert other["speed"]["throughput_per_s"] >= quadro["speed"]["throughput_per_s"]
    assert other["price"]["usd"] <= quadro["price"]["usd"]
    why, amd = by_score["why_not"]
    assert why["gpu_id"] == "quadro-rtx-8000" and why["rank"] == quadro["rank"]
    assert any("at least as fast for no more money" in r for r in why["reasons"])
    assert amd["gpu_id"] == "mi300x" and amd["rank"] is None and "AMD" in amd["reasons"][0]


def test_adapters_read_as_a_frozen_16_bit_base(cli_json):
    doc = cli_json("recommend", "--workload", "llm-train", "--model", "llama-3.1-8b", "--qlora", "--top", "1")
    assert doc["results"]["precision"] == "bf16" and doc["results"]["precision_from"] == "adapter default"
    plain = cli_json("recommend", "--workload", "llm-train", "--model", "llama-3.1-8b", "--top", "1", code=0)
    assert plain["results"]["precision_from"] == "workload default"
