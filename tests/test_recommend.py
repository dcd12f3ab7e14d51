"""recommend: the rules file, the engine, and the command.

Figures asserted here come from the source documents (docs/sources.md
digests them; "SEED" below) or from the catalog's datasheet values, cited
where they are used. Speed numbers come from the performance model and are
only compared with each other or with a direct call of that model.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import shape_from_model, shape_from_params
from gpusizer.errors import DataFileError, ExitCode, UsageError
from gpusizer.hardware.catalog import Gpu, load_catalog
from gpusizer.memory.estimate import estimate_memory, fits
from gpusizer.models.zoo import load_zoo
from gpusizer.ranking.rules import Criterion, load_rules, rules_from_documents
from gpusizer.ranking.rules import Test as RuleTest
from gpusizer.ranking.search import (
    RecommendRequest,
    candidates_from_catalog,
    candidates_from_probe,
    evaluate,
    field_value,
    normalise,
    recommend,
)

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "data" / "rules.yaml"
CATALOG = load_catalog()
GPUS = CATALOG.gpus
BY_ID = {g.id: g for g in GPUS}
RULES = load_rules()
ISSUE_WORKLOADS = ("cnn", "rnn", "transformer", "llm-train", "llm-inference", "inference", "hpc")


@pytest.fixture(autouse=True)
def _register_command() -> None:
    """Register `recommend` on the app (the lead adds the import to cli.py)."""
    import gpusizer.cli.recommend  # noqa: F401


def rec_json(cli_json, *args: str, code: int = 0) -> dict[str, Any]:
    return cli_json("recommend", *args, code=code)["results"]


def ranked_ids(results: dict[str, Any]) -> list[str]:
    return [g["gpu_id"] for g in results["ranked"]]


def everyone(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [*results["ranked"], *results["beyond_top"], *results["excluded"]]


def engine(workload: str, gpus=GPUS, *, rules=RULES, **kwargs: Any):
    """The engine without a reference model: scores, exclusions, advisories (no speed)."""
    return recommend(candidates_from_catalog(gpus), rules, RecommendRequest(workload=workload, top=None, **kwargs),
                     pool=GPUS)


def is_geforce(gpu: Gpu) -> bool:
    """Consumer cards sold as GeForce/Titan: no ECC and no GPUDirect RDMA."""
    return gpu.segment == "consumer"


# --------------------------------------------------------------------------
# the bundled rules file


def test_bundled_rules_cover_every_workload_of_the_issue():
    assert set(ISSUE_WORKLOADS) <= set(RULES.workloads)
    assert set(RULES.requirements) == {"ecc", "rdma", "nvlink", "fp64"}
    for wl in RULES.workloads.values():
        assert wl.criteria, wl.name
        for rule in (*wl.criteria, *wl.constraints, *wl.advisories):
            assert len(rule.message) > 10, (wl.name, rule.id)


def _weights(workload: str) -> dict[str, float]:
    """The workload's own criteria (without the cluster ones from `common`)."""
    return {c.id: c.weight for c in RULES.workload(workload).criteria if c.id not in ("nvlink", "rdma")}


def test_cnn_priority_is_tensor_then_flops_then_memory_then_fp16():
    # SEED: CNNs: Tensor Cores > FLOPS > memory size > FP16 support
    w = _weights("cnn")
    assert w["tensor"] > w["flops"] > w["memory"] > w["fp16"]
    crit = {c.id: c.field for c in RULES.workload("cnn").criteria}
    assert (crit["tensor"], crit["flops"], crit["memory"]) == ("tensor_tflops", "fp32_tflops", "memory_gib")


def test_rnn_priority_is_bandwidth_and_memory_then_fp16_then_tensor_then_flops():
    # SEED: RNN/LSTM: bandwidth + memory size > FP16 > Tensor Cores > FLOPS
    w = _weights("rnn")
    assert min(w["bandwidth"], w["memory"]) > w["fp16"] > w["tensor"] > w["flops"]


def test_transformer_sits_between_and_is_memory_hungry():
    # SEED: transformers sit between CNNs and RNNs and need a lot of memory
    w, cnn, rnn = _weights("transformer"), _weights("cnn"), _weights("rnn")
    assert w["memory"] == max(w.values())
    share = {name: ws["bandwidth"] / ws["tensor"] for name, ws in (("cnn", cnn), ("transformer", w), ("rnn", rnn))}
    assert share["cnn"] < share["transformer"] < share["rnn"]


def test_hpc_is_fp64_and_ecc():
    w = _weights("hpc")
    assert sorted(w, key=lambda k: -w[k])[:2] == ["fp64", "ecc"]


def test_rules_that_encode_source_claims_cite_them():
    for wl in ("cnn", "rnn", "transformer"):
        for c in RULES.workload(wl).criteria:
            assert c.source and c.source.startswith("SEED"), (wl, c.id)
    for rule in ("fp64", "ecc"):
        assert "SEED" in next(c for c in RULES.workload("hpc").criteria if c.id == rule).source
    for wl in RULES.workloads.values():
        for rule in (*wl.criteria, *wl.constraints, *wl.advisories):
            assert rule.source is None or rule.source.startswith("SEED"), (wl.name, rule.id)
    common = {a.id: a for a in RULES.workload("cnn").advisories}
    assert "2.5x" in common["no-rdma-multinode"].source
    assert "5-12x" in common["no-nvlink-multigpu"].source


# --------------------------------------------------------------------------
# each rule kind


def test_criterion_normalisation_linear_log_bool_and_null():
    lin = Criterion(id="x", field="memory_gib", weight=1, message="linear one")
    log = Criterion(id="y", field="memory_gib", weight=1, scale="log", decades=2, message="log one")
    assert normalise(lin, 40.0, 80.0) == (0.5, "linear")
    assert normalise(log, 8.0, 80.0)[0] == pytest.approx(0.5)  # 10x below the best: half
    assert normalise(log, 0.8, 80.0)[0] == 0.0  # 100x below with 2 decades: nothing
    assert normalise(log, 0.08, 80.0)[0] == 0.0  # floored
    assert normalise(lin, True, None) == (1.0, "bool")
    assert normalise(lin, None, 80.0)[0] == 0.0


def test_criteria_points_add_up_to_the_score_and_explain_it():
    rec = engine("cnn")
    for g in rec.ranked:
        assert sum(c.points for c in g.contributions) == pytest.approx(g.score, abs=0.1)
        assert 0 <= g.score <= 100
        assert [c.rule for c in g.contributions] == [c.id for c in rec.criteria]
    best = rec.ranked[0]
    top = best.reasons[0]
    assert top.points == max(c.points for c in best.contributions)
    assert top.message and top.field in {c.field for c in rec.criteria}


def test_missing_skip_leaves_a_criterion_out_instead_of_scoring_zero(tmp_path):
    # B200 has no non-tensor fp16_tflops in the catalog and no rule derives it: unknown, not absent.
    h200 = BY_ID["b200-sxm-180gb"]
    assert h200.fp16_tflops is None
    doc = {"workloads": {"cnn": {"criteria": [{"id": "raw-fp16", "field": "fp16_tflops", "weight": 3,
                                               "scale": "log", "message": "raw fp16 rate"}]}}}
    zero = rules_from_documents([(str(BUNDLED), yaml.safe_load(BUNDLED.read_text())), ("z.yaml", doc)])
    doc["workloads"]["cnn"]["criteria"][0]["missing"] = "skip"
    skip = rules_from_documents([(str(BUNDLED), yaml.safe_load(BUNDLED.read_text())), ("s.yaml", doc)])
    z = engine("cnn", [h200], rules=zero).ranked[0]
    s = engine("cnn", [h200], rules=skip).ranked[0]
    raw_z = next(c for c in z.contributions if c.rule == "raw-fp16")
    raw_s = next(c for c in s.contributions if c.rule == "raw-fp16")
    assert raw_z.counted and raw_z.points == 0
    assert not raw_s.counted and raw_s.points == 0
    assert s.score > z.score  # the unknown value no longer drags the score down


def test_an_unknown_tensor_rate_is_left_out_of_the_score_with_a_note():
    """A GPU with Tensor Cores whose rate nothing gives is not scored 0 for Tensor Cores and is
    never told it lacks them: the criterion is left out, and a note says why."""
    nulls = {f: None for f in ("tensor_tf32_tflops", "tensor_fp16_tflops", "tensor_fp16_fp16acc_tflops",
                               "tensor_bf16_tflops", "tensor_fp8_tflops", "tensor_fp4_tflops", "tensor_int8_tops")}
    mystery = BY_ID["rtx-4080"].model_copy(update={**nulls, "boost_clock_mhz": None, "derived": (), "id": "mystery-4080"})
    known = BY_ID["rtx-4080"]
    for workload in ("cnn", "llm-train", "inference"):
        res = engine(workload, [mystery, known])
        row = next(g for g in (*res.ranked, *res.excluded) if g.gpu_id == "mystery-4080")
        tensor = [c for c in row.contributions if c.field in ("tensor_tflops", "precision_tflops",
                                                             "precision_tflops_per_w")]
        assert tensor and all(not c.counted and c.points == 0 for c in tensor), workload
        rules = {a.rule for a in row.advisories}
        assert "no-tensor-cores" not in rules and any(r.startswith("unknown-") for r in rules), (workload, rules)
        assert all("left out of its score" in a.message for a in row.advisories if a.rule.startswith("unknown-"))
    # the true absence still scores 0 and says so
    pascal = next(g for g in engine("cnn", [BY_ID["gtx-1080-ti"]]).ranked)
    tensor = next(c for c in pascal.contributions if c.field == "tensor_tflops")
    assert tensor.counted and tensor.points == 0 and "no-tensor-cores" in {a.rule for a in pascal.advisories}


def test_require_ecc_takes_optional_ecc_with_a_note(cli_json):
    res = rec_json(cli_json, "--workload", "cnn", "--require", "ecc", "--top", "100")
    ranked = {g["gpu_id"]: g for g in res["ranked"]}
    excluded = {g["gpu_id"] for g in res["excluded"]}
    assert {"rtx-4090", "rtx-3090-ti", "rtx-a6000", "a100-sxm4-80gb"} <= set(ranked)
    assert {"rtx-3090", "rtx-5090", "gtx-1080-ti"} <= excluded
    note = next(a for a in ranked["rtx-4090"]["advisories"] if a["rule"] == "ecc-optional")["message"]
    assert "turned on" in note and "memory" in note
    assert not any(a["rule"] == "ecc-optional" for a in ranked["a100-sxm4-80gb"]["advisories"])  # HBM: always on


def test_constraint_excludes_and_names_itself():
    # llm-train: matrix units (NVIDIA Tensor Cores from Volta, AMD Matrix Cores, Intel MMEs) are a
    # hard constraint. Pre-Volta parts and Turing boards without Tensor Cores (the T400's TU117,
    # tensor_cores: 0) fail it; an architecture test let the T400 through.
    rec = engine("llm-train", vendor="any")
    excluded = {g.gpu_id: g for g in rec.excluded}
    assert BY_ID["nvidia-t400-4gb"].tensor_cores == 0 and "nvidia-t400-4gb" in excluded
    for gpu in GPUS:
        if gpu.architecture in ("maxwell", "pascal") or gpu.tensor_cores == 0:
            flags = excluded[gpu.id].excluded_by
            assert [f.rule for f in flags] == ["tensor-cores"]
            assert "(has_tensor_cores = false)" in flags[0].message
        else:
            assert gpu.id not in excluded
    assert {"mi100", "mi300x", "gaudi3"} <= {g.gpu_id for g in rec.ranked}
    assert any(a.startswith("tensor-cores: has_tensor_cores == true") for a in rec.constraints_applied)


def test_precision_hardware_constraints_follow_the_matrix_units_not_nvidias_order():
    """bf16 needs BF16 matrix units (NVIDIA Ampere on, by architecture even where no rate is
    published; AMD CDNA and Gaudi by their rates); fp8 needs FP8 ones (Ada on, CDNA 3, Gaudi 3)."""
    def excluded_ids(precision: str) -> set[str]:
        return {g.gpu_id for g in engine("llm-train", vendor="any", precision=precision).excluded}

    bf16 = excluded_ids("bf16")
    assert {"v100-sxm2-16gb", "rtx-2080-ti", "t4"} <= bf16          # Volta and Turing: no BF16 Tensor Cores
    assert not {"a10g", "a100-sxm4-80gb", "mi100", "mi210", "gaudi3"} & bf16
    assert BY_ID["a10g"].tensor_bf16_tflops is None                  # kept by architecture, not by a rate
    fp8 = excluded_ids("fp8")
    assert {"a100-sxm4-80gb", "mi250x", "mi100"} <= fp8
    assert not {"l4", "h100-sxm5-80gb", "mi300x", "mi355x", "gaudi3"} & fp8


def test_common_constraint_applies_only_when_its_condition_holds():
    # bf16 needs Ampere or newer; with mixed precision the rule does not apply
    bf16 = {g.gpu_id for g in engine("cnn", precision="bf16").excluded}
    assert "v100-sxm2-16gb" in bf16 and "rtx-2080-ti" in bf16 and "a100-sxm4-80gb" not in bf16
    assert not engine("cnn", precision="mixed").excluded


def test_requirements_exclude_with_their_reason(cli_json):
    res = rec_json(cli_json, "--workload", "hpc", "--require", "ecc,fp64", "--top", "50")
    for g in res["ranked"]:
        gpu = BY_ID[g["gpu_id"]]
        assert gpu.ecc_capable and gpu.fp64_tflops / gpu.fp32_tflops >= 0.25
    excluded = {g["gpu_id"]: {f["rule"] for f in g["excluded_by"]} for g in res["excluded"]}
    assert excluded["gtx-1080-ti"] == {"require-ecc", "require-fp64"}  # no ECC, FP64 at 1:32
    assert excluded["titan-v"] == {"require-ecc"}  # full-rate FP64 (6.9 of 13.8), no ECC
    assert excluded["tesla-p40"] == {"require-fp64"}  # ECC (a driver setting), FP64 at 1:32 (0.37 of 12)
    assert "p100-sxm2-16gb" in ranked_ids(res)


def test_nvlink_requirement(cli_json):
    res = rec_json(cli_json, "--workload", "cnn", "--gpus", "8", "--require", "nvlink", "--top", "50")
    assert all(BY_ID[i].nvlink_gb_s for i in ranked_ids(res))
    assert "l40s" in {g["gpu_id"] for g in res["excluded"]}  # PCIe only


def test_advisory_fires_per_gpu_and_workload_notes_once(cli_json):
    doc = cli_json("recommend", "--workload", "rnn", "--gpus", "4", "--top", "50")
    # SEED: RNN multi-GPU speed-up is unclear and framework-dependent
    assert any("unclear and framework-dependent" in n for n in doc["notes"])
    for g in doc["results"]["ranked"]:
        fired = {a["rule"] for a in g["advisories"]}
        # fires where the GPUs talk over PCIe; an SXM module without an NVLink figure (b100) is unknown, not PCIe
        from gpusizer.hardware.vendors import gpu_fabric

        assert ("no-nvlink-multigpu" in fired) == (gpu_fabric(BY_ID[g["gpu_id"]]) == "pcie")
    b100 = next(g for g in doc["results"]["ranked"] if g["gpu_id"] == "b100")
    assert "no-nvlink-multigpu" not in {a["rule"] for a in b100["advisories"]}
    one = cli_json("recommend", "--workload", "rnn", "--top", "50")
    assert not any("unclear" in n for n in one["notes"])
    assert all(not g["advisories"] or {a["rule"] for a in g["advisories"]} <= {"no-tensor-cores"}
               for g in one["results"]["ranked"])


def test_when_conditions_switch_cluster_criteria_on():
    single = {c.id for c in engine("cnn").criteria}
    node = {c.id for c in engine("cnn", gpus_per_node=4).criteria}
    cluster = {c.id for c in engine("cnn", gpus_per_node=4, nodes=2).criteria}
    assert "nvlink" not in single and "rdma" not in single
    assert "nvlink" in node and "rdma" not in node
    assert {"nvlink", "rdma"} <= cluster


def test_test_evaluation_orders_architectures_and_handles_null():
    p100, a100 = BY_ID["p100-pcie-16gb"], BY_ID["a100-sxm4-80gb"]
    newer = RuleTest(field="architecture", op=">=", value="volta")
    assert evaluate(newer, a100, "mixed") is True and evaluate(newer, p100, "mixed") is False
    nvlink = RuleTest(field="nvlink_gb_s", op=">", value=100)
    assert evaluate(nvlink, p100, "mixed") is None  # unknown, not False
    assert evaluate(RuleTest(field="nvlink_gb_s", op="==", value=None), p100, "mixed") is True
    assert evaluate(RuleTest(field="segment", op="in", value=["consumer", "workstation"]), p100, "mixed") is False


def test_derived_fields_follow_the_working_precision():
    a100, v100, p100 = BY_ID["a100-sxm4-80gb"], BY_ID["v100-sxm2-16gb"], BY_ID["p100-sxm2-16gb"]
    assert field_value(a100, "tensor_tflops", "bf16") == 312  # A100 datasheet: 312 dense BF16
    assert field_value(a100, "tensor_tflops", "tf32") == 156
    assert field_value(a100, "tensor_tflops", "fp32") is None  # strict FP32: no Tensor Cores
    assert field_value(v100, "tensor_tflops", "mixed") == 125  # SEED: V100 SXM2 125 Tensor TFLOPS
    assert field_value(p100, "tensor_tflops", "mixed") is None
    assert field_value(p100, "fp64_ratio", "fp64") == pytest.approx(0.5)  # SEED: P100 1:2
    assert field_value(BY_ID["gtx-1080-ti"], "fp64_ratio", "fp64") == pytest.approx(1 / 32, rel=0.05)  # SEED: 1:32
    assert field_value(v100, "fp16_speedup", "mixed") == pytest.approx(125 / 15.7)  # SEED: up to 8x over FP32
    assert field_value(v100, "precision_tflops", "fp64") == 7.8


# --------------------------------------------------------------------------
# must hold: HPC


def test_hpc_ranks_p100_v100_far_above_geforce(cli_json):
    res = rec_json(cli_json, "--workload", "hpc", "--top", "200")
    rank = {g["gpu_id"]: g for g in res["ranked"]}
    tesla = [i for i in rank if i.startswith(("p100", "v100"))]
    slow_geforce = [i for i in rank if is_geforce(BY_ID[i]) and BY_ID[i].fp64_tflops / BY_ID[i].fp32_tflops < 1 / 8]
    assert len(tesla) == 10 and len(slow_geforce) >= 12  # issue 15 added the V100 SXM3 and FHHL
    worst_tesla = max(rank[i]["rank"] for i in tesla)
    best_geforce = min(rank[i]["rank"] for i in slow_geforce)
    assert worst_tesla < best_geforce
    # "far": at least 25 points of 100 between the weakest P100/V100 and the best such GeForce card
    # without ECC; the RTX 3090 Ti and 4090 can turn ECC on (a driver setting), which the ECC
    # criterion counts, and they are still well behind, with the ECC note
    no_ecc = [i for i in slow_geforce if not BY_ID[i].ecc_capable]
    assert min(rank[i]["score"] for i in tesla) - max(rank[i]["score"] for i in no_ecc) >= 25
    for gpu_id in ("rtx-3090-ti", "rtx-4090"):
        assert BY_ID[gpu_id].ecc == "optional" and gpu_id in slow_geforce
        assert min(rank[i]["score"] for i in tesla) - rank[gpu_id]["score"] >= 5
        assert {"slow-fp64", "ecc-optional"} <= {a["rule"] for a in rank[gpu_id]["advisories"]}
    # SEED: P100 5.3 vs GTX 1080 Ti 0.35 TFLOPS FP64, "P100 is ~16x the 1080 Ti"
    p100, ti = rank["p100-sxm2-16gb"]["speed"], rank["gtx-1080-ti"]["speed"]
    assert p100["throughput_per_s"] / ti["throughput_per_s"] == pytest.approx(16, rel=0.1)
    assert p100["method"] == "proxy"
    fired = {a["rule"] for a in rank["gtx-1080-ti"]["advisories"]}
    assert {"slow-fp64", "no-ecc-hpc"} <= fired


# --------------------------------------------------------------------------
# must hold: several nodes -> GPUDirect RDMA


def test_cnn_on_four_nodes_flags_geforce_for_lacking_rdma(cli_json):
    res = rec_json(cli_json, "--workload", "cnn", "--nodes", "4", "--top", "100")
    assert not res["excluded"]
    for g in res["ranked"]:
        gpu = BY_ID[g["gpu_id"]]
        advisories = {a["rule"]: a["message"] for a in g["advisories"]}
        assert ("no-rdma-multinode" in advisories) == (not gpu.gpudirect_rdma)
        if not gpu.gpudirect_rdma:
            assert "2.5x" in advisories["no-rdma-multinode"]  # SEED: RDMA 2.5x faster than TCP
            # the performance model takes the same path: TCP with host staging
            assert g["speed"]["transport"] == "tcp"
        else:
            assert g["speed"]["transport"] == "rdma"
        rdma = next(c for c in g["contributions"] if c["rule"] == "rdma")
        assert (rdma["points"] > 0) == gpu.gpudirect_rdma
    assert all(not BY_ID[i].gpudirect_rdma for i in ranked_ids(res) if is_geforce(BY_ID[i]))


def test_cnn_on_four_nodes_with_require_rdma_excludes_geforce(cli_json):
    res = rec_json(cli_json, "--workload", "cnn", "--nodes", "4", "--require", "rdma", "--top", "100")
    assert not [i for i in ranked_ids(res) if is_geforce(BY_ID[i])]
    excluded = {g["gpu_id"]: g["excluded_by"] for g in res["excluded"]}
    assert {g.id for g in GPUS if is_geforce(g)} == set(excluded)
    assert all(flags[0]["rule"] == "require-rdma" and "gpudirect_rdma = false" in flags[0]["message"]
               for flags in excluded.values())


def test_rdma_matters_more_across_nodes_than_on_one():
    def gap(**kw: Any) -> float:
        scores = {g.gpu_id: g.score for g in engine("cnn", **kw).ranked}
        return scores["rtx-a6000"] - scores["rtx-3090"]  # same GA102 chip; the A6000 has RDMA and ECC

    assert gap(nodes=4) > gap() + 5


# --------------------------------------------------------------------------
# must hold: RNN -> bandwidth decides


def _twins(tmp_path: Path) -> Path:
    """Two made-up cards, equal but for bandwidth vs FP32 FLOPS (A100 40GB PCIe otherwise)."""
    base = BY_ID["a100-pcie-40gb"].model_dump(mode="json")
    base.update(family=None, family_default=False, aliases=[], launch_price_usd=None, launch_price_year=None)
    fast_memory = {**base, "id": "twin-fast-memory", "name": "Twin fast memory", "bandwidth_gb_s": 2000.0,
                   "fp32_tflops": 15.0}
    fast_compute = {**base, "id": "twin-fast-compute", "name": "Twin fast compute", "bandwidth_gb_s": 1500.0,
                    "fp32_tflops": 19.5}
    path = tmp_path / "twins.yaml"
    path.write_text(yaml.safe_dump({"gpus": [fast_memory, fast_compute]}))
    return path


def test_rnn_bandwidth_decides_between_otherwise_similar_cards(cli_json, tmp_path):
    twins = str(_twins(tmp_path))
    for workload, first in (("rnn", "twin-fast-memory"), ("cnn", "twin-fast-compute")):
        res = rec_json(cli_json, "--workload", workload, "--catalog", twins, "--top", "100", "--sort", "score")
        order = [i for i in ranked_ids(res) if i.startswith("twin")]
        assert order[0] == first, (workload, order)


@pytest.mark.parametrize(
    ("faster", "slower"),
    [
        ("a100-sxm4-80gb", "a100-pcie-80gb"),  # 2039 vs 1935 GB/s, same chip and memory
        ("v100s-pcie-32gb", "v100-pcie-32gb"),  # 1134 vs 900 GB/s
        ("h100-nvl-94gb", "h100-sxm5-80gb"),  # 3900 vs 3350 GB/s, although the SXM5 has more FLOPS
        ("a30", "a10"),  # 933 vs 600 GB/s, although the A10 has 3x the FP32 FLOPS
        ("rtx-3090-ti", "rtx-3090"),  # 1008 vs 936 GB/s
    ],
)
def test_rnn_real_cards_ordered_by_bandwidth(faster, slower):
    scores = {g.gpu_id: g.score for g in engine("rnn").ranked}
    assert scores[faster] > scores[slower]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from([g.id for g in GPUS]), more=st.floats(min_value=1.0, max_value=20.0))
def test_more_bandwidth_never_lowers_an_rnn_score(base, more):
    gpu = BY_ID[base]
    richer = gpu.model_copy(update={"id": f"{gpu.id}-x", "bandwidth_gb_s": gpu.bandwidth_gb_s * more})
    scores = {g.gpu_id: g.score for g in engine("rnn", [gpu, richer], vendor="any").ranked}
    assert scores[richer.id] >= scores[gpu.id]


# --------------------------------------------------------------------------
# must hold: value under a consumer budget


def test_cnn_budget_that_covers_consumer_prices_prefers_rtx_on_value(cli_json):
    # 4 GPUs for $8,000: $2,000 a card covers GeForce launch prices, not data-center ones
    res = rec_json(cli_json, "--workload", "cnn", "--gpus", "4", "--budget", "8000", "--sort", "value",
                   "--top", "100")
    ids = ranked_ids(res)
    assert ids[0].startswith("rtx-") and BY_ID[ids[0]].segment == "consumer"
    # GeForce cards and the one workstation card priced under $2,000 (RTX 4000 Ada, $1,250)
    assert all(BY_ID[i].segment != "datacenter" for i in ids)
    assert {BY_ID[i].segment for i in ids} == {"consumer", "workstation"}
    gtx = [i for i in ids if i.startswith("gtx-") or i == "titan-xp"]
    assert gtx and ids.index(gtx[0]) > ids.index(ids[0])
    values = [g["value_per_kusd"] for g in res["ranked"]]
    assert values == sorted(values, reverse=True)
    for g in res["ranked"]:
        assert g["price_total_usd"] == BY_ID[g["gpu_id"]].price.usd * 4 <= 8000
        assert g["value_per_kusd"] == pytest.approx(g["speed"]["throughput_per_s"] / (g["price_total_usd"] / 1000))
    excluded = {g["gpu_id"]: g["excluded_by"][0]["message"] for g in res["excluded"]}
    assert "price unknown" in excluded["l40s"]
    # a data-center card with a dated street price is checked against the budget, not dropped
    assert "4 x $17,499 (street price 2025-03) = $69,996 is over the budget of $8,000" in excluded["a100-sxm4-80gb"]
    assert "over the budget of $8,000" in excluded["titan-v"]  # 4 x $2,999


def test_unknown_price_is_never_ranked_as_free(cli_json):
    doc = cli_json("recommend", "--workload", "cnn", "--sort", "value", "--top", "100")
    res = doc["results"]
    valued = [g for g in res["ranked"] if g["value_per_kusd"] is not None]
    unpriced = [g for g in res["ranked"] if g["price_total_usd"] is None]
    assert valued and unpriced
    assert all(g["value_per_kusd"] is None and g["value_note"] == "price unknown" for g in unpriced)
    assert max(g["rank"] for g in valued) < min(g["rank"] for g in unpriced)
    assert "launch prices" in res["price_basis"] and "never free" in res["price_basis"]


def test_a_budget_reaches_data_center_cards_through_their_street_prices(cli_json):
    """Data-center cards have no launch price (sold by quote); a dated street price (a cited
    reseller listing) lets --budget check them instead of dropping them."""
    res = rec_json(cli_json, "--workload", "llm-train", "--gpus", "4", "--budget", "100000", "--top", "100")
    ranked = {g["gpu_id"]: g for g in res["ranked"]}
    h100 = ranked["h100-pcie-80gb"]
    assert BY_ID["h100-pcie-80gb"].launch_price_usd is None
    assert h100["price"] == {"usd": 24500, "basis": "street", "when": "2025-03"} and h100["price_total_usd"] == 98000
    assert "h100-sxm5-80gb" not in ranked  # 4 x $31,250 = $125,000
    assert ranked["rtx-4090"]["price"] == {"usd": 1599, "basis": "launch", "when": "2022"}
    assert "street prices where known" in res["price_basis"]


def test_max_power_is_a_total_for_all_gpus(cli_json):
    res = rec_json(cli_json, "--workload", "cnn", "--gpus", "4", "--max-power", "1200", "--top", "100")
    assert all(BY_ID[i].tdp_w * 4 <= 1200 for i in ranked_ids(res))
    assert "l4" in ranked_ids(res) and "rtx-3090" not in ranked_ids(res)  # 72 W vs 350 W each


def test_segment_filter(cli_json):
    res = rec_json(cli_json, "--workload", "cnn", "--segment", "workstation,consumer", "--top", "100")
    assert {BY_ID[i].segment for i in ranked_ids(res)} == {"workstation", "consumer"}


# --------------------------------------------------------------------------
# must hold: memory fit


def test_a_gpu_the_model_does_not_fit_on_is_never_recommended(cli_json):
    res = rec_json(cli_json, "--workload", "llm-inference", "--model", "llama-2-13b", "--top", "100")
    shape = shape_from_model(load_zoo().resolve("llama-2-13b"))
    need = estimate_memory(shape, RunConfig(mode="inference", precision="fp16")).total_bytes
    assert res["memory_needed_bytes"] == need
    for g in res["ranked"]:
        assert g["fits"] is True and BY_ID[g["gpu_id"]].memory_bytes >= need
    for g in res["excluded"]:
        assert g["fits"] is False and g["excluded_by"][0]["rule"] == "memory-fit"
        assert BY_ID[g["gpu_id"]].memory_bytes < need
    excluded = {g["gpu_id"]: g for g in res["excluded"]}
    assert "with TP it needs 2 GPUs" in excluded["rtx-4090"]["excluded_by"][0]["message"]


def test_a_high_score_does_not_save_a_gpu_the_model_does_not_fit_on(cli_json):
    # GPT-2 XL training at batch 2 x 1024 tokens with eager attention needs more than 48 GiB: the L40S
    # and RTX 6000 Ada outscore the A100 80GB on CNN-style criteria, but only the 80 GB card is recommended
    res = rec_json(cli_json, "--workload", "cnn", "--model", "gpt2-xl", "--batch", "2", "--seq-len", "1024",
                   "--top", "100", "--attention", "eager")
    excluded = {g["gpu_id"]: g for g in res["excluded"]}
    ranked = {g["gpu_id"]: g for g in res["ranked"]}
    assert {"l40s", "rtx-6000-ada"} <= set(excluded) and "a100-sxm4-80gb" in ranked
    assert excluded["l40s"]["score"] > ranked["a100-sxm4-80gb"]["score"]
    assert all(g["fits"] for g in res["ranked"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params=st.integers(min_value=10**8, max_value=2 * 10**11), train=st.booleans())
def test_fit_is_a_hard_constraint_for_any_model_size(params, train):
    shape = shape_from_params(params)
    req = RecommendRequest(workload="llm-train" if train else "llm-inference", shape=shape, top=None)
    rec = recommend(candidates_from_catalog(GPUS), RULES, req, pool=GPUS)
    cfg = RunConfig(mode="train" if train else "inference", precision="mixed" if train else "fp16")
    for g in rec.ranked:
        assert fits(shape, cfg, BY_ID[g.gpu_id].memory_bytes)
    for g in rec.excluded:
        if any(f.rule == "memory-fit" for f in g.excluded_by):
            assert not fits(shape, cfg, BY_ID[g.gpu_id].memory_bytes)


# --------------------------------------------------------------------------
# speed: the performance model, through the same code path


def test_speed_column_is_the_performance_model(cli_json):
    from gpusizer.performance.estimate import estimate_performance

    res = rec_json(cli_json, "--workload", "cnn", "--model", "resnet50", "--batch", "32", "--gpus", "2",
                   "--top", "100")
    shape = shape_from_model(load_zoo().resolve("resnet50"))
    cfg = RunConfig(mode="train", precision="mixed", batch=32, gpus=2)
    for g in res["ranked"][:5] + res["beyond_top"][:5]:
        est = estimate_performance(BY_ID[g["gpu_id"]], shape, cfg, nodes=1, tf32=True, compute_precision="mixed")
        assert g["speed"]["throughput_per_s"] == pytest.approx(est.throughput_per_s)
        assert g["speed"]["unit"] == est.throughput_unit == "images/s"


def test_relative_speed_is_against_the_fastest_listed(cli_json):
    res = rec_json(cli_json, "--workload", "transformer", "--top", "7")
    listed = res["ranked"]
    assert len(listed) == 7
    fastest = max(g["speed"]["throughput_per_s"] for g in listed)
    for g in listed:
        assert g["speed"]["relative"] == pytest.approx(g["speed"]["throughput_per_s"] / fastest, abs=1e-4)
    assert max(g["speed"]["relative"] for g in listed) == 1.0
    assert all(g["speed"]["relative"] is None for g in res["beyond_top"])


def test_sort_speed_orders_by_throughput(cli_json):
    """Speed is the default order; speeds within 3% of each other (a near-tie, well inside the model's error
    band) go to the rules' score."""
    res = rec_json(cli_json, "--workload", "llm-inference", "--top", "100")
    assert res["sort"] == "speed"
    rows = [g for g in res["ranked"] if g["speed"]["throughput_per_s"] is not None]
    thr = [g["speed"]["throughput_per_s"] for g in rows]
    assert len(thr) > 10
    for a, b in zip(rows, rows[1:], strict=False):
        faster, slower = a["speed"]["throughput_per_s"], b["speed"]["throughput_per_s"]
        assert slower <= faster * 1.03 and (slower <= faster or b["score"] <= a["score"])
    assert sorted(thr, reverse=True)[0] / thr[0] < 1.03
    # the 7B reference model does not fit an 8 GB card: its speed is unknown and it comes last
    last = res["ranked"][-1]
    assert last["speed"]["throughput_per_s"] is None and "does not fit" in last["speed"]["note"]


# --------------------------------------------------------------------------
# JSON and human output


def test_json_has_every_rule_for_every_gpu_and_the_excluded(cli_json):
    doc = cli_json("recommend", "--workload", "llm-train", "--nodes", "2", "--gpus", "8", "--top", "5")
    assert doc["command"] == "recommend" and doc["schema_version"] == 1
    res = doc["results"]
    criteria = [c["id"] for c in res["criteria"]]
    assert {"rdma", "nvlink", "tensor", "memory"} <= set(criteria)
    everybody = everyone(res)
    # NVIDIA only by default: the AMD and Intel entries are not candidates unless --vendor asks
    assert len(everybody) == sum(g.vendor == "nvidia" for g in GPUS) and len(res["ranked"]) == 5 and res["excluded"]
    for g in everybody:
        assert [c["rule"] for c in g["contributions"]] == criteria
        for c in g["contributions"]:
            assert {"value", "best", "normalised", "weight", "points", "message"} <= set(c)
    assert all(g["excluded_by"] for g in res["excluded"])
    assert doc["input"]["gpus_per_node"] == 8 and doc["input"]["nodes"] == 2


def test_human_output_header_table_reasons_and_excluded(cli):
    result = cli("recommend", "--workload", "cnn", "--nodes", "2", "--require", "ecc", "--top", "3",
                 "--explain")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "precision mixed (workload default)" in out
    assert "2 GPUs (2 nodes x 1 per node)" in out
    assert "requirement ecc: ecc in ('optional', 'always')" in out
    assert "launch prices" in out
    for column in ("score", "tensor TF mixed", "fits", "rel. speed", "img/s per $1k"):
        assert column in out
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.lstrip().startswith("1  "))
    assert lines[first + 1].strip().startswith("+")  # a reason under the row
    assert "Excluded (" in out and "gtx-1080-ti" in out and "[require-ecc]" in out
    assert "Traceback" not in result.stderr


def test_human_output_says_price_unknown(cli):
    result = cli("recommend", "--workload", "hpc", "--top", "2")
    assert result.exit_code == 0
    assert "price unknown" in result.stdout


def test_nothing_qualifies_exits_4(cli):
    result = cli("recommend", "--workload", "cnn", "--budget", "100", "--gpus", "1")
    assert result.exit_code == ExitCode.NOTHING_FITS
    assert "No GPU qualifies" in result.stdout and "over the budget" in result.stdout


# --------------------------------------------------------------------------
# rules files: overrides, extension, errors


def test_example_override_file(cli_json):
    example = str(ROOT / "examples" / "my-rules.yaml")
    doc = cli_json("recommend", "--workload", "cnn", "--rules", example, "--nodes", "2", "--require",
                   "big-memory", "--top", "100")
    res = doc["results"]
    weights = {c["id"]: c["weight"] for c in res["criteria"]}
    assert weights["memory"] == 4 and weights["tensor"] == 4 and weights["power-efficiency"] == 1
    assert all(BY_ID[i].memory_gib >= 40 for i in ranked_ids(res))
    assert not any(a["rule"] == "no-rdma-multinode" for g in res["ranked"] for a in g["advisories"])
    excluded = {g["gpu_id"]: {f["rule"] for f in g["excluded_by"]} for g in res["excluded"]}
    assert excluded["gtx-1080-ti"] == {"min-memory", "require-big-memory"}
    gnn = rec_json(cli_json, "--workload", "gnn", "--rules", example)
    assert gnn["ranked"][0]["speed"]["unit"] == "GB/s" and gnn["ranked"][0]["speed"]["method"] == "proxy"


def test_override_replaces_only_the_given_keys():
    bundled = yaml.safe_load(BUNDLED.read_text())
    rules = rules_from_documents([
        (str(BUNDLED), bundled),
        ("mine.yaml", {"workloads": {"rnn": {"criteria": [{"id": "flops", "weight": 9}]}}}),
    ])
    flops = next(c for c in rules.workload("rnn").criteria if c.id == "flops")
    original = next(c for c in RULES.workload("rnn").criteria if c.id == "flops")
    assert flops.weight == 9 and flops.field == original.field and flops.message == original.message


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--workload", "cnnn"], ExitCode.USAGE, "unknown workload 'cnnn'"),
        (["--workload", "cnn", "--budget", "-5"], ExitCode.USAGE,
         "--budget: the budget must be a positive number of US dollars up to 1,000,000,000,000, not -5"),
        (["--workload", "cnn", "--budget", "0"], ExitCode.USAGE,
         "--budget: the budget must be a positive number of US dollars up to 1,000,000,000,000, not 0"),
        (["--workload", "cnn", "--max-power", "-300"], ExitCode.USAGE,
         "--max-power: the power limit must be a positive number of watts up to 1,000,000,000, not -300"),
        (["--workload", "cnn", "--require", "rdam"], ExitCode.USAGE, "unknown requirement 'rdam'"),
        (["--workload", "cnn", "--segment", "gamer"], ExitCode.USAGE, "--segment: 'gamer'"),
        (["--workload", "cnn", "--precision", "int8"], ExitCode.USAGE, "int8 is an inference precision"),
        (["--workload", "cnn", "--interconnect", "ib-hdrr"], ExitCode.USAGE, "unknown interconnect"),
        (["--workload", "cnn", "--batch", "8"], ExitCode.USAGE, "--batch: a batch needs a model"),
    ],
)
def test_bad_inputs_exit_cleanly(cli, args, code, message):
    result = cli("recommend", *args)
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert f"Error: {message}" in result.stderr or message in result.stderr
    assert "Traceback" not in result.stderr and not result.stdout


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"budget_usd": -5.0}, "budget_usd"),
        ({"max_power_w": 0.0}, "max_power_w"),
        ({"gpus_per_node": 0}, "gpus_per_node"),
        ({"nodes": 0}, "nodes"),
        ({"top": 0}, "top"),
        ({"batch": 0}, "batch"),
        ({"sort": "fast"}, "sort"),
        ({"segments": ("gamer",)}, "segments"),
        ({"require": ("rdam",)}, "require"),
        ({"precision": "int3"}, "precision"),
        ({"precision": "int8"}, "precision"),
        ({"workload": "cnnn"}, "workload"),
    ],
)
def test_engine_errors_name_the_input_in_domain_words(kwargs, field):
    """The engine names the request field; only the CLI knows the option it comes from."""
    req = RecommendRequest(**{"workload": "cnn", **kwargs})
    with pytest.raises(UsageError) as info:
        recommend(candidates_from_catalog(GPUS), RULES, req)
    assert info.value.field == field
    assert "--" not in info.value.message and "--" not in (info.value.hint or "")


def test_unknown_workload_suggests(cli):
    result = cli("recommend", "--workload", "tranformer")
    assert "Hint: did you mean transformer?" in result.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workloads:\n  cnn: [1\n", "malformed YAML"),
        ("- just\n- a list\n", "expected a mapping"),
        ("workload:\n  cnn: {}\n", "unknown top-level key(s) workload"),
        ("workloads:\n  cnn:\n    critera: []\n", "unknown key(s) critera"),
        ("workloads:\n  cnn:\n    criteria: {id: x}\n", "expected a list of rules"),
        ("workloads:\n  cnn:\n    criteria:\n      - weight: 2\n", "id: missing"),
        ("workloads:\n  cnn:\n    criteria:\n      - {id: tensor, weight: -1}\n", "weight: Input should be greater"),
        ("workloads:\n  cnn:\n    criteria:\n      - {id: new, field: ecc_capable, message: a new rule}\n", "weight: Field required"),
        ("workloads:\n  cnn:\n    criteria:\n      - {id: new, field: ecc, weight: 1, message: a new rule}\n",
         "a criterion needs a number or true/false field"),
        ("workloads:\n  gnn:\n    criteria: []\n", "description, mode, precision, speed: required for a new workload"),
        ("workloads:\n  cnn:\n    advisories:\n      - {id: a, message: 'hello {gpuu}'}\n", "unknown placeholder {gpuu}"),
        ("workloads:\n  cnn:\n    constraints:\n      - {id: c, message: big ones, test: {field: memory_gib, op: '>', value: big}}\n",
         "memory_gib is a number"),
        ("workloads:\n  cnn:\n    constraints:\n      - {id: c, message: new ones, test: {field: architecture, op: '>=', value: rubin}}\n",
         "'rubin' is not one of"),
        ("workloads:\n  cnn:\n    criteria:\n      - {id: t, field: segment, weight: 1, message: text field}\n",
         "a criterion needs a number"),
        ("schema_version: 2\n", "schema_version: 2 is not supported"),
    ],
)
def test_malformed_rules_file_is_a_data_error(cli, tmp_path, text, message):
    path = _write(tmp_path, text)
    result = cli("recommend", "--workload", "cnn", "--rules", path)
    assert result.exit_code == ExitCode.DATA, (result.stdout, result.stderr)
    assert message in result.stderr and path in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("rule", "where", "suggestion"),
    [
        ("criteria:\n      - {id: tensor, field: tensor_tflop}", "criterion 'tensor': field", "tensor_tflops"),
        ("constraints:\n      - {id: e, message: needs ecc, test: {field: ec, op: '==', value: true}}",
         "constraint 'e': test: field", "ecc"),
        ("advisories:\n      - {id: w, message: hot card, warn_if: {field: tdp, op: '>', value: 400}}",
         "advisory 'w': warn_if: field", "tdp_w"),
    ],
)
def test_rule_naming_an_unknown_field_suggests_close_names(cli, tmp_path, rule, where, suggestion):
    path = _write(tmp_path, f"workloads:\n  cnn:\n    {rule}\n")
    result = cli("recommend", "--workload", "cnn", "--rules", path)
    assert result.exit_code == ExitCode.DATA
    line = result.stderr.splitlines()[0]
    assert line.startswith(f"Error: {path}: workload 'cnn': {where}: unknown field")
    assert f"did you mean {suggestion}" in line


def test_missing_rules_file(cli, tmp_path):
    result = cli("recommend", "--workload", "cnn", "--rules", str(tmp_path / "nope.yaml"))
    assert result.exit_code == ExitCode.DATA and "file not found" in result.stderr


def test_engine_errors_are_typed():
    with pytest.raises(UsageError):
        engine("nope")
    with pytest.raises(UsageError):
        engine("cnn", budget_usd=-1.0)
    with pytest.raises(DataFileError):
        rules_from_documents([("x.yaml", {"workloads": {"cnn": {"criteria": [{"id": "a", "field": "nope"}]}}})])


# --------------------------------------------------------------------------
# --local


def _host(devices: list[tuple[int, str, int]]):
    from gpusizer.hardware.probe import DeviceSnapshot, HostSnapshot
    from gpusizer.units import GIB

    return HostSnapshot(devices=tuple(
        DeviceSnapshot(index=i, name=name, memory_total_bytes=24 * GIB, memory_free_bytes=free * GIB)
        for i, name, free in devices
    ))


def test_local_candidates_group_identical_gpus_and_use_free_memory():
    from gpusizer.hardware.probe import match_catalog
    from gpusizer.units import GIB

    host = _host([(0, "NVIDIA GeForce RTX 3090", 20), (1, "NVIDIA GeForce RTX 3090", 22),
                  (2, "Tesla V100-SXM2-16GB", 15), (3, "Mystery GPU 9000", 10)])
    cands, notes = candidates_from_probe(match_catalog(host, CATALOG))
    by_id = {c.gpu.id: c for c in cands}
    assert set(by_id) == {"rtx-3090", "v100-sxm2-16gb"}
    assert by_id["rtx-3090"].capacity_bytes == 20 * GIB and by_id["rtx-3090"].count == 2
    assert by_id["rtx-3090"].label == "rtx-3090 (GPU 0, 1)"
    assert len(notes) == 1 and "Mystery GPU 9000" in notes[0] and "emit a starter catalog entry" in notes[0]
    # fit uses the free memory: a model needing more than 20 GiB free is excluded on the 3090s
    shape = shape_from_model(load_zoo().resolve("llama-2-7b"))
    rec = recommend(cands, RULES, RecommendRequest(workload="llm-inference", shape=shape, seq_len=16384), pool=GPUS)
    need = rec.memory_needed_bytes
    for g in (*rec.ranked, *rec.excluded):
        assert g.fits == (by_id[g.gpu_id].capacity_bytes >= need)
    # normalised against the catalog: a local card does not score 100 for being the only one
    assert all(g.score < 90 for g in rec.ranked)


def _fake_nvml_module() -> Any:
    path = ROOT / "tests" / "fake_nvml" / "fixture.py"
    spec = importlib.util.spec_from_file_location("fake_nvml_fixture_rec", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_local_flag_ranks_this_machines_gpus_through_nvml(tmp_path):
    fx = _fake_nvml_module()
    if fx.compiler() is None or not sys.platform.startswith("linux"):
        pytest.skip("the fake libnvidia-ml.so.1 needs gcc on Linux")
    lib = fx.build_library(tmp_path / "lib")
    host = fx.hgx_a100_8x_host()
    host["devices"] = host["devices"][:2] + fx.rtx_3090_host()["devices"]
    config = fx.write_config(tmp_path / "nvml.cfg", host)
    code = (
        "import sys, gpusizer.cli.recommend\n"
        "from gpusizer.cli import main\n"
        "sys.argv = ['gpusizer', 'recommend', '--workload', 'cnn', '--local', '--json']\n"
        "main()\n"
    )
    proc = fx.run_in_subprocess(code, lib, config, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["input"]["local"] is True
    ranked = doc["results"]["ranked"]
    assert [g["gpu_id"] for g in ranked] == ["a100-sxm4-80gb", "rtx-3090"]
    assert ranked[0]["label"] == "a100-sxm4-80gb (GPU 0, 1)"
    assert math.isclose(ranked[0]["speed"]["relative"], 1.0)


def test_memory_only_exclusions_say_what_sharded_run_would_hold_the_model(cli_json):
    """Llama 2 70B in fp16 needs ~138 GiB: an 80 GB H100 is excluded alone, listed as
    holding it with 2-way tensor parallelism, and qualifies when rerun that way."""
    doc = cli_json("recommend", "--workload", "llm-inference", "--model", "llama-2-70b")
    options = {(o["strategy"], o["gpus"]): o["gpu_ids"] for o in doc["results"]["sharded_options"]}
    assert "h100-sxm5-80gb" in options[("tp", 2)]
    assert "rtx-4090" in options[("tp", 8)]  # 4-way tp still needs 35 GiB per 24 GB card
    # only GPUs that nothing but the memory fit excluded are listed
    listed = {g for ids in options.values() for g in ids}
    excluded = {r["label"]: r["excluded_by"] for r in doc["results"]["excluded"]}
    assert listed <= set(excluded)
    assert all(all(f["kind"] == "fit" for f in excluded[g]) for g in listed)
    again = cli_json("recommend", "--workload", "llm-inference", "--model", "llama-2-70b", "--gpus", "2",
                     "--strategy", "tp", "--top", "50")
    assert "h100-sxm5-80gb" in {r["gpu_id"] for r in again["results"]["ranked"]}


def test_sharded_options_respect_budget_nodes_and_the_given_strategy(cli_json):
    # every suggestion must pass --budget at its own GPU count (launch prices)
    # (--gpus 1: one GPU each; without it the budget also chooses counts, see test_plan.py)
    doc = cli_json("recommend", "--workload", "llm-inference", "--model", "llama-2-70b", "--budget", "20000",
                   "--gpus", "1", code=4)
    prices = {g.id: g.launch_price_usd for g in CATALOG.gpus}
    assert {"rtx-5090"} <= {g for o in doc["results"]["sharded_options"] for g in o["gpu_ids"]}  # 8 x $1,999
    for opt in doc["results"]["sharded_options"]:
        for gpu_id in opt["gpu_ids"]:
            assert prices[gpu_id] is not None and prices[gpu_id] * opt["gpus"] <= 20000
    # --gpus is per node: FSDP over 2 nodes needs half as many per node
    one = cli_json("recommend", "--workload", "llm-train", "--model", "llama-2-7b")["results"]["sharded_options"]
    two = cli_json("recommend", "--workload", "llm-train", "--model", "llama-2-7b", "--nodes", "2")
    per_node = {g: o["gpus"] for o in two["results"]["sharded_options"] for g in o["gpu_ids"]}
    for o in one:
        for g in o["gpu_ids"]:
            assert o["strategy"] == "fsdp" and per_node[g] == -(-o["gpus"] // 2)
    # a 4-GPU ddp run of a 13B model: switching to tp over 2 GPUs is still worth saying
    four = cli_json("recommend", "--workload", "llm-inference", "--model", "llama-2-13b", "--gpus", "4")
    assert any(o["strategy"] == "tp" and o["gpus"] == 2 and "rtx-4090" in o["gpu_ids"]
               for o in four["results"]["sharded_options"])


def test_flash_attention_reaches_the_memory_fit_and_the_speed_column(cli_json):
    """Llama 2 7B at 8,192 tokens under FSDP on 8 GPUs: eager attention keeps 32 heads x
    8,192^2 scores per layer and fits nowhere (exit 4); with fused attention (the default, and
    the old --flash-attention) the 80 GB H100 qualifies, and its speed is exactly what
    'gpusizer estimate' says for that run."""
    args = ("recommend", "--workload", "llm-train", "--model", "llama-2-7b", "--seq-len", "8192", "--batch", "1",
            "--gpus", "8", "--strategy", "fsdp", "--top", "50")
    eager = cli_json(*args, "--attention", "eager", code=4)
    flash = cli_json(*args, "--flash-attention")
    assert cli_json(*args) == flash
    assert eager["input"]["flash_attention"] is False and flash["input"]["flash_attention"] is True
    assert eager["results"]["ranked"] == []
    ranked = {g["gpu_id"]: g for g in flash["results"]["ranked"]}
    assert "h100-sxm5-80gb" in ranked
    est = cli_json("estimate", "--model", "llama-2-7b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--strategy", "fsdp",
                   "--seq-len", "8192", "--batch", "1", "--flash-attention")
    assert math.isclose(ranked["h100-sxm5-80gb"]["speed"]["throughput_per_s"],
                        est["results"]["estimate"]["throughput_per_s"], rel_tol=1e-9)


# ----- vendors ------------------------------------------------------------------------------


def test_recommend_considers_other_vendors_only_when_asked(cli_json):
    default = cli_json("recommend", "--workload", "cnn", "--top", "200")
    ids = {g["gpu_id"] for g in default["results"]["ranked"]}
    assert ids and not ids & {"mi300x", "mi355x", "gaudi3"}
    assert not any("ROCm" in n for n in default["notes"])
    every = cli_json("recommend", "--workload", "cnn", "--top", "200", "--vendor", "any")
    ids = {g["gpu_id"] for g in every["results"]["ranked"]}
    assert {"mi300x", "mi355x", "gaudi3"} <= ids and "h100-sxm5-80gb" in ids
    notes = " ".join(every["notes"])
    assert "CUDA-only code" in notes and "ROCm" in notes and "Gaudi" in notes
    assert every["input"]["vendor"] == "any"
    amd = cli_json("recommend", "--workload", "cnn", "--vendor", "amd")
    assert {g["gpu_id"] for g in amd["results"]["ranked"]} <= {"mi100", "mi210", "mi250", "mi250x", "mi300x",
                                                              "mi325x", "mi355x", "radeon-pro-w7900"}


def test_a_part_without_a_published_fp32_rate_is_ranked_on_what_is_known(cli_json, cli):
    """Gaudi 2: no FP16 matrix rate and no FP32 rate are published. cnn (mixed) leaves both out
    of its score and gives no speed, saying why; bf16 and fp8, whose rates are known, get one."""
    doc = cli_json("recommend", "--workload", "cnn", "--vendor", "intel")
    gaudi2 = next(g for g in doc["results"]["ranked"] if g["gpu_id"] == "gaudi2")
    assert gaudi2["speed"]["throughput_per_s"] is None
    assert "no FP32 rate" in gaudi2["speed"]["note"] and "tensor_fp16_tflops" in gaudi2["speed"]["note"]
    unknown = {c["field"] for c in gaudi2["contributions"] if not c["counted"]}
    assert {"tensor_tflops", "fp32_tflops", "fp16_speedup"} <= unknown
    # the inference workload scores the precision's rate: unknown there too, left out, never 0
    inference = cli_json("recommend", "--workload", "inference", "--vendor", "intel", "--precision", "fp16")
    gaudi2 = next(g for g in inference["results"]["ranked"] if g["gpu_id"] == "gaudi2")
    rates = [c for c in gaudi2["contributions"] if c["field"].startswith("precision_tflops")]
    assert rates and all(not c["counted"] for c in rates)
    failed = cli("estimate", "--model", "resnet50", "--gpu", "gaudi2", "--json")
    assert failed.exit_code == 2 and "no FP32 rate" in json.loads(failed.stdout)["error"]["message"]
    bf16 = cli_json("estimate", "--model", "resnet50", "--gpu", "gaudi2", "--precision", "bf16")
    assert bf16["results"]["estimate"]["peak_tflops"] == 432
    # fp8 serving: attention's 16-bit matmuls run at the one 16-bit rate Intel publishes, BF16's
    fp8 = cli_json("estimate", "--model", "llama-2-7b", "--gpu", "gaudi2", "--precision", "fp8", "--inference")
    assert any("432 TFLOPS 16-bit rate" in n for n in fp8["notes"] + fp8["results"]["estimate"].get("notes", []))


def test_recommend_rejects_an_unknown_vendor(cli):
    bad = cli("recommend", "--workload", "cnn", "--vendor", "acme")
    assert bad.exit_code == 2 and "--vendor" in bad.stderr


def test_an_architecture_rule_never_holds_for_another_vendor():
    """ARCH_ORDER is NVIDIA's: a CDNA3 part is neither 'architecture >= volta' nor '< volta'."""
    from gpusizer.ranking.search import evaluate

    mi300x = load_catalog().by_id("mi300x")
    for op in (">=", "<"):
        assert evaluate(RuleTest(field="architecture", op=op, value="volta"), mi300x, "bf16") is False
