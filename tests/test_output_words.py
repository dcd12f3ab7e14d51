"""What the commands say, checked word for word: node totals for offloaded state, wording that
fits the run (a plan's counts, inference's "Time to process"), an objective nothing meets,
plurals, bounds on money, non-finite inputs, and hints wrapped to the terminal, never cut."""

from __future__ import annotations

import json
import math
import re

import pytest

from gpusizer.errors import ExitCode, UsageError
from gpusizer.units import GIB, finite_number, format_bytes, format_duration, parse_count, plural

# --------------------------------------------------------------------------
# the shared helpers


@pytest.mark.parametrize(("count", "word", "many", "expected"), [
    (1, "GPU", None, "1 GPU"), (8, "GPU", None, "8 GPUs"), (0, "GPU", None, "0 GPUs"),
    (1, "sequence", None, "1 sequence"), (1024, "sequence", None, "1,024 sequences"),
    (1, "micro-batch", "micro-batches", "1 micro-batch"), (2, "micro-batch", "micro-batches", "2 micro-batches"),
])
def test_plural(count, word, many, expected):
    assert plural(count, word, many) == expected


def test_plural_keeps_a_count_as_written_elsewhere():
    assert plural(10_240, "token", shown="10.2K") == "10.2K tokens"
    assert plural(1, "token", shown="1") == "1 token"


@pytest.mark.parametrize(("value", "message"), [
    (math.nan, "must be a finite number, not nan"),
    ("nan", "must be a finite number, not nan"),
    (math.inf, "must be a finite number, not inf"),
    ("-inf", "must be a finite number, not -inf"),
    ("lots", "must be a number, not 'lots'"),
    (True, "must be a number, not True"),
    (-1, "must be between 0 and 1,000,000, not -1"),
    (10**400, "must be between 0 and 1,000,000, not a number of 401 digits"),
])
def test_finite_number_says_what_is_wrong(value, message):
    with pytest.raises(ValueError) as err:
        finite_number(value, 0, 1e6)
    assert str(err.value) == message


def test_finite_number_passes_a_number_in_range():
    assert finite_number("2.5", 0, 10) == 2.5 and finite_number(7) == 7.0
    with pytest.raises(ValueError, match="^must be at least 0.05, not 0.01$"):
        finite_number(0.01, 0.05)


def test_a_count_past_floats_range_is_too_large_not_below_one():
    with pytest.raises(ValueError, match=r"^parameter count '1e400' is too large to be a count$"):
        parse_count("1e400", what="parameter count")
    with pytest.raises(ValueError, match="must be at least 1"):
        parse_count("0.1", what="parameter count")


# --------------------------------------------------------------------------
# finding 11: offloaded state per node


def test_offload_shows_the_host_memory_a_node_needs(cli, cli_json):
    args = ("fit-model", "--model", "llama-2-7b", "--offload", "optimizer", "--strategy", "zero2", "--gpus", "8",
            "--gpu", "h100-sxm5-80gb")
    res = cli_json(*args)["results"]
    per_gpu = res["breakdown"]["cpu_bytes"]
    assert per_gpu > 10 * GIB  # (ZeRO-Offload: the fp32 state of 6.74B params over 8 GPUs, and more)
    assert res["gpus_per_node"] == 8 and res["cpu_bytes_per_node"] == 8 * per_gpu
    assert res["nvme_bytes_per_node"] == 0
    text = " ".join(cli(*args).stdout.split())
    assert (f"Offloaded to host memory: {format_bytes(per_gpu)} per GPU, {format_bytes(8 * per_gpu)} per node "
            "of 8 GPUs.") in text


def test_offload_per_node_follows_the_systems_node_and_nvme(cli_json):
    res = cli_json("fit-model", "--model", "llama-2-7b", "--offload", "optimizer", "--offload-to", "nvme",
                   "--strategy", "zero3", "--system", "dgx-h100", "--gpus", "16")["results"]
    assert res["gpus_per_node"] == 8  # 16 GPUs on nodes of 8
    assert res["breakdown"]["nvme_bytes"] > 0 and res["breakdown"]["cpu_bytes"] == 0
    assert res["nvme_bytes_per_node"] == 8 * res["breakdown"]["nvme_bytes"] and res["cpu_bytes_per_node"] == 0


def test_one_gpu_offload_says_per_gpu_only(cli, cli_json):
    args = ("fit-model", "--model", "llama-2-7b", "--offload", "optimizer", "--gpu", "h100-sxm5-80gb")
    res = cli_json(*args)["results"]
    assert res["gpus_per_node"] == 1 and res["cpu_bytes_per_node"] == res["breakdown"]["cpu_bytes"]
    text = " ".join(cli(*args).stdout.split())
    assert f"Offloaded to host memory: {format_bytes(res['breakdown']['cpu_bytes'])} per GPU." in text
    assert "per node" not in text


# --------------------------------------------------------------------------
# finding 12: words that fit the run


def test_a_purchase_plans_budget_is_for_all_the_gpus_it_buys(cli, cli_json):
    doc = cli_json("recommend", "--workload", "cnn", "--budget", "10000", "--top", "3")
    budget = [c for c in doc["results"]["constraints_applied"] if c.startswith("budget")]
    assert budget == ["budget $10,000 for all the GPUs a configuration buys (1 GPU in the ranking; street prices, "
                      "else launch prices)"]
    assert doc["results"]["plan"]["configurations"][0]["gpus_total"] > 1
    text = " ".join(cli("recommend", "--workload", "cnn", "--budget", "10000", "--top", "3").stdout.split())
    assert "1 GPU in the ranking (the plan chooses its counts)" in text and "for 1 GPU (" not in text


def test_a_budget_for_a_given_count_stays_for_that_count(cli_json):
    doc = cli_json("recommend", "--workload", "cnn", "--budget", "10000", "--gpus", "2", "--top", "3")
    assert "budget $10,000 for 2 GPUs (street prices, else launch prices)" in doc["results"]["constraints_applied"]


@pytest.mark.parametrize(("args", "title"), [
    (("--model", "llama-3.1-8b", "--gpu", "h100-sxm5-80gb", "--inference", "--batch", "32", "--tokens", "1B",
      "--price-per-hour", "3"), "Time to process"),
    (("--model", "resnet50", "--gpu", "l4", "--inference", "--epochs", "1", "--dataset-size", "1M"), "Time to process"),
    (("--model", "resnet50", "--gpu", "l4", "--epochs", "1", "--dataset-size", "1M"), "Time to train"),
])
def test_time_table_is_named_for_the_run(cli, args, title):
    out = cli("estimate", *args).stdout
    other = {"Time to train", "Time to process"} - {title}
    assert title in out.splitlines() or any(line.strip() == title for line in out.splitlines())
    assert not any(o in out for o in other)


# --------------------------------------------------------------------------
# finding 13: an objective nothing meets


DEADLINE = ("recommend", "--workload", "llm-train", "--model", "llama-3.1-8b", "--tokens", "1T", "--deadline", "0.001d")


def test_an_unmeetable_deadline_exits_4_and_names_the_fastest(cli, cli_json):
    doc = cli_json(*DEADLINE, code=ExitCode.NOTHING_FITS)
    plan = doc["results"]["plan"]
    assert plan["met"] == 0 and plan["configurations"] == [] and plan["considered"] > 0
    closest = plan["closest"]
    assert closest is not None and closest["hours"] > 0.024  # the deadline: 0.001 days
    # its time is its own throughput's: 1T tokens at its tokens/s
    assert closest["hours"] == pytest.approx(1e12 / closest["throughput_per_s"] / 3600, rel=1e-9)
    gpus = plural(closest["gpus_total"], "GPU")
    assert plan["shortfall"] == (f"no configuration meets the deadline; the fastest, {closest['label']} ({gpus}), "
                                 f"takes {format_duration(closest['hours'] * 3600)}, ${closest['cost_usd']:,.0f}")
    result = cli(*DEADLINE)
    assert result.exit_code == ExitCode.NOTHING_FITS
    text = " ".join(result.stdout.split())
    assert f"Verdict {plan['shortfall'][0].upper()}{plan['shortfall'][1:]}." in text
    assert f"(none of {plan['considered']} assessed meets it)" in text and "ranks first" not in text
    assert "The nearest miss:" in text and "(0 of 0," not in text


def test_a_purchase_budget_that_buys_nothing_names_the_cheapest(cli_json):
    doc = cli_json("recommend", "--workload", "cnn", "--budget", "100", code=ExitCode.NOTHING_FITS)
    plan = doc["results"]["plan"]
    closest = plan["closest"]
    # the cheapest priced GPU that qualifies without the budget, one of it
    ranked = cli_json("recommend", "--workload", "cnn", "--gpus", "1", "--top", "1000")["results"]
    priced = [r for r in (*ranked["ranked"], *ranked["beyond_top"]) if r["price"] is not None]
    cheapest = min(r["price"]["usd"] for r in priced)
    assert closest["gpus_total"] == 1 and closest["price_total_usd"] == cheapest > 100
    assert plan["shortfall"].startswith(f"the budget buys no qualifying GPU; the cheapest, {closest['label']}, "
                                        f"costs ${cheapest:,.0f} (")


def test_a_met_objective_has_no_shortfall(cli_json):
    plan = cli_json("recommend", "--workload", "cnn", "--budget", "10000", "--top", "3")["results"]["plan"]
    assert plan["shortfall"] is None and plan["closest"] is None and plan["met"] >= 3


# --------------------------------------------------------------------------
# finding 14: plurals and true statements


def test_cost_line_for_one_gpu(cli):
    out = cli("estimate", "--model", "resnet50", "--gpu", "a100-sxm4-80gb", "--price-per-hour", "2").stdout
    assert "Cost: $2.00 per hour for 1 GPU\n" in out and "GPU(s)" not in out


def test_serving_one_sequence_reads_singular(cli):
    out = cli("estimate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm5-80gb", "--inference", "--seq-len", "4096",
              "--max-itl-ms", "16", "--gpus", "4", "--strategy", "tp", env={"COLUMNS": "200"}).stdout
    assert "per step of 1 token per replica" in out and "Serving 1 sequence of 4,096 tokens" in out
    assert not re.search(r"(?<![\d.,])1 (tokens|sequences)\b", out)


def test_serve_verdict_one_sequence(cli):
    out = cli("serve", "--model", "llama-2-7b", "--gpu", "h100-sxm5-80gb", "--users", "1", "--context", "1000000",
              env={"COLUMNS": "200"}).stdout
    assert "serve 1 sequence of 1,000,000 tokens, up to 1 a replica" in out


def test_unmodelled_activations_are_not_shown_as_zero(cli, cli_json):
    args = ("fit-model", "--params", "13B", "--gpu", "a100-sxm4-80gb")
    b = cli_json(*args, code=ExitCode.NOTHING_FITS)["results"]["breakdown"]
    assert b["activations_modelled"] is False and b["activations_bytes"] == 0
    rows = sum(b[k] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                              "kv_cache_bytes", "transient_bytes", "context_bytes", "fragmentation_bytes"))
    assert rows == b["total_bytes"] == 218_924_288_000  # the peak is the sum of the rows
    out = cli(*args).stdout
    line = next(x for x in out.splitlines() if "activations" in x)
    assert "not modelled" in line and "0.00" not in line and "0%" not in line
    assert "less than the sum" not in out


def test_a_peak_below_the_sum_says_so(cli, cli_json):
    args = ("fit-model", "--model", "llama-2-7b", "--gpu", "h100-sxm5-80gb")
    b = cli_json(*args, code=ExitCode.NOTHING_FITS)["results"]["breakdown"]
    rows = sum(b[k] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                              "kv_cache_bytes", "transient_bytes", "context_bytes", "fragmentation_bytes"))
    assert b["total_bytes"] < rows
    assert "(so the peak is less than the sum of the rows)" in " ".join(cli(*args).stdout.split())


# --------------------------------------------------------------------------
# finding 15: money has a bound and is never cut


def test_budget_has_an_upper_bound(cli):
    result = cli("recommend", "--workload", "cnn", "--budget", "1e300", "--top", "3")
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.startswith("Error: --budget: the budget must be a positive number of US dollars up to "
                                    "1,000,000,000,000, not 1e+300\n")


def test_the_largest_budget_prints_whole(cli):
    result = cli("recommend", "--workload", "cnn", "--budget", "1e12", "--gpus", "1", "--top", "3",
                 env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert "budget $1,000,000,000,000 for 1 GPU" in " ".join(result.stdout.split()) and "…" not in result.stdout


def test_power_limit_has_an_upper_bound(cli):
    result = cli("recommend", "--workload", "cnn", "--max-power", "1e300")
    assert result.exit_code == ExitCode.USAGE and "up to 1,000,000,000" in result.stderr


# --------------------------------------------------------------------------
# finding 16: non-finite values


@pytest.mark.parametrize(("args", "option"), [
    (("estimate", "--model", "resnet50", "--gpu", "l4", "--price-per-hour"), "--price-per-hour"),
    (("estimate", "--model", "llama-3.1-8b", "--gpu", "l4", "--inference", "--max-itl-ms"), "--max-itl-ms"),
    (("estimate", "--model", "resnet50", "--gpu", "l4", "--dataset-size", "1M", "--epochs"), "--epochs"),
    (("serve", "--model", "llama-3.1-8b", "--gpu-memory-utilization"), "--gpu-memory-utilization"),
    (("recommend", "--workload", "cnn", "--budget"), "--budget"),
    (("recommend", "--workload", "cnn", "--max-power"), "--max-power"),
    (("recommend", "--workload", "llm-train", "--model", "gpt2", "--tokens", "1B", "--max-cost"), "--max-cost"),
    (("recommend", "--workload", "llm-train", "--model", "gpt2", "--tokens", "1B", "--budget-per-hour"),
     "--budget-per-hour"),
    (("recommend", "--workload", "cnn", "--dataset-size", "1M", "--deadline", "1d", "--epochs"), "--epochs"),
    (("catalog", "list", "--min-memory"), "--min-memory"),
])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_option_rejects_non_finite_values(cli, args, option, value):
    result = cli(*args, value)
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.splitlines()[0] == f"Error: Invalid value for '{option}': must be a finite number, not {value}"
    doc = json.loads(cli(*args, value, "--json").stdout)
    assert doc["error"]["message"] == f"Invalid value for '{option}': must be a finite number, not {value}"


def test_a_float_option_out_of_range_names_its_range(cli):
    result = cli("serve", "--model", "llama-3.1-8b", "--gpu-memory-utilization", "2")
    assert result.stderr.splitlines()[0] == ("Error: Invalid value for '--gpu-memory-utilization': must be between "
                                             "0.05 and 1, not 2")


def test_the_api_rejects_non_finite_values_in_the_same_words():
    from gpusizer import api

    with pytest.raises(UsageError) as err:
        api.estimate("resnet50", gpu="l4", price_per_hour=math.nan)
    assert err.value.message == "the price per GPU-hour must be a finite number, not nan"
    assert err.value.field == "price_per_gpu_hour"


@pytest.mark.parametrize(("field", "value"), [("memory_gib", ".nan"), ("launch_price_usd", ".inf"),
                                              ("bandwidth_gb_s", "-.inf")])
def test_catalog_float_fields_reject_non_finite_values(cli, tmp_path, field, value):
    path = tmp_path / "bad.yaml"
    path.write_text(f"gpus:\n  - id: t4\n    {field}: {value}\n")
    result = cli("catalog", "list", "--catalog", str(path))
    assert result.exit_code == ExitCode.DATA
    shown = {".nan": "nan", ".inf": "inf", "-.inf": "-inf"}[value]
    assert result.stderr.splitlines()[0] == f"Error: {path}: entry 't4': {field}: must be a finite number, not {shown}"


def test_params_past_floats_range(cli):
    result = cli("fit-model", "--params", "1e400")
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.splitlines()[0] == "Error: --params: parameter count '1e400' is too large to be a count"


# --------------------------------------------------------------------------
# finding 17: hints wrapped, never cut; ZeRO with one replica


def test_a_long_hint_is_wrapped_to_the_terminal_not_cut(cli):
    from gpusizer.hardware.browse import numeric_fields

    result = cli("catalog", "list", "--sort", "name", env={"COLUMNS": "80"})
    assert result.exit_code == ExitCode.USAGE
    lines = result.stderr.splitlines()
    assert lines[0] == "Error: --sort: 'name' is not a numeric catalog field"
    assert lines[1].startswith("Hint: choose one of: ") and all(line.startswith("      ") for line in lines[2:])
    assert all(len(line) <= 80 for line in lines) and len(lines) > 3
    hint = " ".join(line.strip() for line in lines[1:])
    assert hint == "Hint: choose one of: " + ", ".join(numeric_fields())
    doc = json.loads(cli("catalog", "list", "--sort", "name", "--json").stdout)
    assert doc["error"]["hint"] == "choose one of: " + ", ".join(numeric_fields())


ZERO1 = ("--model", "llama-2-70b", "--gpu", "h100-sxm5-80gb", "--tp", "8", "--pp", "2", "--strategy", "zero1")
IDLE = ("ZeRO-1 has nothing to shard with one data-parallel replica (TP=8 x PP=2 take all 16 GPUs): the run is "
        "sized and timed without it; more GPUs would add replicas for it to shard over")


def test_zero_with_one_replica_says_it_shards_nothing(cli, cli_json):
    doc = cli_json("estimate", *ZERO1, "--gpus", "8", "--nodes", "2", "--grad-accumulation", "16",
                   code=ExitCode.NOTHING_FITS)
    assert IDLE in doc["notes"]
    result = cli("estimate", *ZERO1, "--gpus", "8", "--nodes", "2", "--grad-accumulation", "16",
                 env={"COLUMNS": "80"})
    assert "Note: " + IDLE in " ".join(line.strip() for line in result.stderr.splitlines())
    assert all(len(line) <= 80 for line in result.stderr.splitlines())
    assert IDLE in json.loads(cli("fit-model", *ZERO1, "--gpus", "16", "--json").stdout)["notes"]


def test_zero_with_replicas_has_no_such_note(cli):
    doc = json.loads(cli("fit-model", *ZERO1, "--gpus", "32", "--json").stdout)
    assert "DP=2 ZeRO-1" in doc["results"]["verdict"]
    assert not any("nothing to shard" in n for n in doc["notes"])
