"""Audit finding 2: batch-1 decode on a GPU whose SM count is unknown (or that is not NVIDIA's) is
timed without the calibrated per-SM cap. It is marked as an upper bound with a widened band, and
compare and recommend carry the mark. SM counts: GH200 132 (GH200 whitepaper), B200 148 (Chips and
Cheese, measured), H20 78 (a run on one)."""

from __future__ import annotations

import pytest

from gpusizer.hardware.catalog import load_catalog
from gpusizer.performance.estimate import UPPER_BOUND_BAND_FACTOR, sm_count


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_sourced_sm_counts(cat):
    expected = {"gh200-96gb": 132, "gh200-144gb": 132, "b200-sxm-180gb": 148, "h20": 78}
    assert {g: sm_count(cat.by_id(g)) for g in expected} == expected
    # the full Blackwell Ultra die has 160 SMs, but no source gives how many a B300/GB300 enables
    assert sm_count(cat.by_id("b300-sxm-288gb")) is None and sm_count(cat.by_id("mi300x")) is None


def test_b200_decode_is_capped_like_b100_same_memory_system(cli_json):
    """Audit: B200 203.9 tok/s against B100 93.6 at the same 7,700 GB/s. Both now get 148 SMs x the
    per-SM rate, so batch-1 decode differs only by clock-scaled overheads."""
    b200 = cli_json("estimate", "--model", "llama-3.1-8b", "--gpu", "b200", "--inference", "--batch", "1")["results"]["estimate"]
    b100 = cli_json("estimate", "--model", "llama-3.1-8b", "--gpu", "b100", "--inference", "--batch", "1")["results"]["estimate"]
    assert not b200["upper_bound"] and not b100["upper_bound"]
    assert b200["throughput_per_s"] / b100["throughput_per_s"] < 1.15
    assert any("148 SMs" in n for n in b200["notes"])


def test_unknown_sm_count_marks_an_upper_bound_with_a_wider_band(cli_json):
    doc = cli_json("estimate", "--model", "llama-3.1-8b", "--gpu", "gb300", "--inference", "--batch", "1")["results"]["estimate"]
    h100 = cli_json("estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm5-80gb",
                    "--inference", "--batch", "1")["results"]["estimate"]
    assert doc["upper_bound"] is True and "SM count is unknown" in doc["upper_bound_reason"]
    assert h100["upper_bound"] is False and h100["upper_bound_reason"] is None
    assert doc["error_band"] == pytest.approx(h100["error_band"] * UPPER_BOUND_BAND_FACTOR)
    amd = cli_json("estimate", "--model", "llama-3.1-8b", "--gpu", "mi300x", "--inference", "--batch", "1")["results"]["estimate"]
    assert amd["upper_bound"] is True and "not NVIDIA SMs" in amd["upper_bound_reason"]


def test_training_is_never_marked_an_upper_bound(cli_json):
    doc = cli_json("estimate", "--model", "llama-3.2-1b", "--gpu", "mi300x")["results"]["estimate"]
    assert doc["upper_bound"] is False


def test_compare_carries_the_upper_bound(cli, cli_json):
    doc = cli_json("compare", "h100-sxm5-80gb", "mi300x", "rtx-4090", "--workload", "llm-inference")
    row = next(r for r in doc["results"]["rows"] if r["field"] == "modelled_throughput_per_s")
    assert row["upper_bounds"] == [False, True, False]
    assert any(n.startswith("mi300x: the modelled speed is an upper bound") for n in doc["notes"])
    text = cli("compare", "h100-sxm5-80gb", "mi300x", "--workload", "llm-inference", env={"COLUMNS": "80"}).stdout
    assert f"<= {row['values'][1]:,.0f}" in text


def test_recommend_says_which_speeds_are_upper_bounds(cli, cli_json):
    doc = cli_json("recommend", "--workload", "llm-inference", "--model", "llama-3.1-8b", "--vendor", "any",
                   "--top", "15")
    ranked = doc["results"]["ranked"]
    flagged = {r["gpu_id"] for r in ranked if r["speed"]["upper_bound"]}
    assert {"mi355x", "gb300"} <= flagged and not flagged & {"b200-sxm-180gb", "h200-sxm-141gb", "gh200-144gb"}
    assert any(n.startswith("speed is an upper bound for") and "gb300" in n for n in doc["notes"])
    text = cli("recommend", "--workload", "llm-inference", "--model", "llama-3.1-8b", "--vendor", "any",
               "--top", "3", env={"COLUMNS": "80"}).stdout
    assert "an upper bound)." in " ".join(text.split()) and "! speed is an upper bound" in text


def test_estimate_text_says_at_most(cli):
    text = cli("estimate", "--model", "llama-3.1-8b", "--gpu", "mi300x", "--inference", "--batch", "1",
               env={"COLUMNS": "80"}).stdout
    assert "throughput      at most " in text
    text = cli("estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm5-80gb", "--inference", "--batch", "1",
               env={"COLUMNS": "80"}).stdout
    assert "throughput      " in text and "at most" not in text


def test_budget_plan_marks_upper_bound_configurations(cli, cli_json):
    # at batch 1 (a serving plan otherwise decodes the sequences each replica's KV cache holds, on
    # Tensor Cores, where no per-SM cap applies)
    doc = cli_json("recommend", "--workload", "llm-inference", "--model", "llama-3.1-8b", "--budget", "200000",
                   "--vendor", "intel", "--batch", "1")
    plan = doc["results"]["plan"]
    assert [(c["label"], c["upper_bound"]) for c in plan["configurations"]] == [("8 x gaudi3", True)]
    assert [n for n in plan["notes"] if "upper bound" in n] == [
        n for n in plan["notes"] if n.startswith("throughput is an upper bound for 8 x gaudi3")]
    text = cli("recommend", "--workload", "llm-inference", "--model", "llama-3.1-8b", "--budget", "200000",
               "--vendor", "intel", "--batch", "1", env={"COLUMNS": "80"}).stdout
    assert "! throughput is an upper bound" in text
