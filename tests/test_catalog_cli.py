"""The catalog commands, name matching, user catalogs and bad-catalog errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import load_catalog, resolve_name

ROOT = Path(__file__).resolve().parent.parent
GPUS = load_catalog().gpus


# ----- name matching ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "gpu_id"),
    [
        ("v100-sxm2-16gb", "v100-sxm2-16gb"),
        ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
        ("tesla v100 sxm2 16gb", "v100-sxm2-16gb"),
        ("V100 32GB SXM2", "v100-sxm2-32gb"),
        ("rtx3090", "rtx-3090"),
        ("RTX 3090", "rtx-3090"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("3090", "rtx-3090"),
        ("1080ti", "gtx-1080-ti"),
        ("GTX 1080 Ti", "gtx-1080-ti"),
        ("RTX 2080 Ti", "rtx-2080-ti"),
        ("A100 80GB SXM4", "a100-sxm4-80gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"),
    ],
)
def test_forgiving_names(name, gpu_id):
    assert resolve_name(GPUS, name).gpu.id == gpu_id


@pytest.mark.parametrize(("family", "default"), [("v100", "v100-sxm2-16gb"), ("p100", "p100-sxm2-16gb"), ("a100", "a100-sxm4-80gb")])
def test_family_name_picks_default_and_says_so(family, default):
    res = resolve_name(GPUS, family)
    assert res.gpu.id == default
    assert res.matched_by == "family"
    assert default in res.note and "others" in res.note


def test_ambiguous_name_lists_candidates():
    with pytest.raises(UsageError) as err:
        resolve_name(GPUS, "a100 pcie")
    assert "a100-pcie-40gb" in err.value.message and "a100-pcie-80gb" in err.value.message


@pytest.mark.parametrize(("name", "plain", "tier"), [("RTX 4070", "rtx-4070", "rtx-4070-ti"), ("RTX 4060", "rtx-4060", "rtx-4060-ti-16gb")])
def test_partial_name_never_adds_a_tier_word(name, plain, tier):
    # the RTX 4070 and 4060 are other cards than the 4070 Ti and 4060 Ti (all in the catalog since issue 15)
    assert resolve_name(GPUS, name).gpu.id == plain
    assert resolve_name(GPUS, name + " Ti").gpu.id == tier


@pytest.mark.parametrize(
    ("name", "gpu_id"),
    [
        ("Quadro RTX 4000", "quadro-rtx-4000"),  # NVML names of the Turing cards
        ("Quadro RTX 5000", "quadro-rtx-5000"),
        ("Quadro RTX 6000", "quadro-rtx-6000"),
        ("NVIDIA RTX 4000 Ada Generation", "rtx-4000-ada"),
        ("RTX 4000 Ada", "rtx-4000-ada"),
        ("RTX 8000", "quadro-rtx-8000"),  # no other RTX 8000 exists
    ],
)
def test_turing_quadro_and_ada_workstation_cards_are_told_apart(name, gpu_id):
    gpu = resolve_name(GPUS, name).gpu
    assert gpu.id == gpu_id
    assert gpu.architecture == ("ada" if "ada" in gpu_id else "turing")


@pytest.mark.parametrize(
    ("name", "candidates"),
    [
        ("RTX 4000", {"quadro-rtx-4000", "rtx-4000-ada", "rtx-4000-sff-ada", "rtx-a4000", "rtx-pro-4000-blackwell",
                      "quadro-p4000"}),
        ("RTX 5000", {"quadro-rtx-5000", "rtx-a5000", "rtx-5000-ada", "rtx-pro-5000-blackwell", "quadro-p5000"}),
        ("RTX 6000", {"quadro-rtx-6000", "rtx-a6000", "rtx-6000-ada", "rtx-pro-6000-blackwell", "quadro-p6000",
                      "rtx-pro-6000-blackwell-max-q", "rtx-pro-6000-blackwell-server"}),
    ],
)
def test_bare_workstation_number_is_ambiguous_across_generations(name, candidates):
    # "RTX 4000" is a Turing card with 8 GB and an Ada card with 20 GB: never a silent pick
    with pytest.raises(UsageError) as err:
        resolve_name(GPUS, name)
    listed = set(err.value.message.split(": it matches ")[1].split(", "))
    assert listed == candidates


def test_unknown_name_suggests_close_matches():
    with pytest.raises(UsageError) as err:
        resolve_name(GPUS, "rtx 4009")
    assert err.value.message == "unknown GPU 'rtx 4009'"
    assert "rtx-4090" in err.value.hint


# ----- commands -----------------------------------------------------------------------------


def test_catalog_list_json_envelope(cli_json):
    doc = cli_json("catalog", "list")
    assert doc["schema_version"] == 1
    assert doc["command"] == "catalog list"
    assert len(doc["results"]) == len(GPUS)
    v100 = next(g for g in doc["results"] if g["id"] == "v100-sxm2-16gb")
    assert v100["fp64_tflops"] == 7.8 and v100["memory_gib"] == 16 and v100["bandwidth_gb_s"] == 900
    # unknown values are null, not sentinels
    assert v100["launch_price_usd"] is None


def test_catalog_json_carries_provenance_vendor_and_three_valued_ecc(cli_json):
    doc = cli_json("catalog", "show", "rtx-5080")
    gpu = doc["results"]
    assert gpu["vendor"] == "nvidia" and gpu["ecc"] == "none"
    assert gpu["derived"]["tensor_fp16_tflops"] == "tensor-fp16-gb20x-geforce"
    assert gpu["tensor_fp16_tflops"] == pytest.approx(112.6)
    assert "fp32_tflops" not in gpu["derived"]  # sourced
    listed = {g["id"]: g for g in cli_json("catalog", "list")["results"]}
    assert listed["rtx-4090"]["ecc"] == "optional" and listed["h100-sxm5-80gb"]["ecc"] == "always"
    assert listed["v100-sxm2-16gb"]["derived"] == {"tensor_fp16_fp16acc_tflops": "tensor-fp16acc-volta"}


def test_catalog_show_marks_derived_values_with_their_rule(cli):
    result = cli("catalog", "show", "rtx-5080")
    assert result.exit_code == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if "│ tensor_fp16_tflops " in x)
    assert "derived: tensor-fp16-gb20x-geforce" in line and "x tensor_cores x boost_clock_mhz" in line
    v100 = cli("catalog", "show", "v100-sxm2-16gb").stdout
    assert "absent: Tensor Cores run it from Ampere on" in next(x for x in v100.splitlines() if "tensor_bf16_tflops" in x)


def test_catalog_list_vendor_and_provenance(cli, cli_json):
    assert len(cli_json("catalog", "list", "--vendor", "nvidia")["results"]) == sum(g.vendor == "nvidia" for g in GPUS)
    amd = cli_json("catalog", "list", "--vendor", "AMD")["results"]
    assert amd and {g["vendor"] for g in amd} == {"amd"} and "mi300x" in {g["id"] for g in amd}
    bad = cli("catalog", "list", "--vendor", "acme")
    assert bad.exit_code == 2 and "--vendor" in bad.stderr
    plain = cli("catalog", "list", "--arch", "ada").stdout
    marked = cli("catalog", "list", "--arch", "ada", "--show-provenance").stdout
    assert "*" not in plain and "derived" not in plain
    row = next(x for x in marked.splitlines() if x.lstrip().startswith("rtx-4060-ti-16gb"))
    assert "44.1*" in row and "derived by a rule" in marked


def test_ecc_filter_counts_a_driver_setting_as_ecc(cli_json):
    with_ecc = {g["id"] for g in cli_json("catalog", "list", "--ecc")["results"]}
    without = {g["id"] for g in cli_json("catalog", "list", "--no-ecc")["results"]}
    assert {"rtx-4090", "rtx-a6000", "h100-sxm5-80gb"} <= with_ecc
    assert {"rtx-3090", "rtx-5090", "titan-v"} <= without and not with_ecc & without


def test_catalog_list_filters(cli_json):
    doc = cli_json("catalog", "list", "--segment", "datacenter", "--min-memory", "80", "--nvlink")
    ids = {g["id"] for g in doc["results"]}
    assert "a100-sxm4-80gb" in ids and "h100-sxm5-80gb" in ids
    assert all(g["memory_gib"] >= 80 and g["nvlink_gb_s"] for g in doc["results"])
    assert "rtx-pro-6000-blackwell" not in ids  # workstation
    consumer = cli_json("catalog", "list", "--no-rdma", "--arch", "ada")["results"]
    assert {g["id"] for g in consumer} >= {"rtx-4090", "rtx-4080"}
    assert all(not g["gpudirect_rdma"] for g in consumer)


def test_catalog_list_sort_puts_unknown_last(cli_json):
    rows = cli_json("catalog", "list", "--sort", "fp64_tflops")["results"]
    values = [g["fp64_tflops"] for g in rows]
    known = [v for v in values if v is not None]
    assert known == sorted(known, reverse=True)
    assert values[: len(known)] == known
    assert rows[0]["id"] in {"mi300x", "mi325x"}  # both 81.7 TFLOPS vector FP64 (AMD CDNA3)
    nvidia = [g for g in rows if g["vendor"] == "nvidia"]
    assert nvidia[0]["id"] in {"b200-sxm-180gb", "gb200"}  # both 40 TFLOPS FP64


def test_catalog_list_bad_sort_field(cli):
    result = cli("catalog", "list", "--sort", "fp64")
    assert result.exit_code == 2
    assert "--sort: 'fp64' is not a numeric catalog field" in result.stderr
    assert "fp64_tflops" in result.stderr


def test_catalog_show_family_note_on_stderr(cli):
    result = cli("catalog", "show", "v100", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["input"]["resolved_id"] == "v100-sxm2-16gb"
    assert any("v100-sxm2-16gb" in n for n in doc["notes"])
    human = cli("catalog", "show", "v100")
    assert "Note: 'v100' names several variants" in human.stderr
    assert "Tesla V100 SXM2 16 GB" in human.stdout


def test_compare_shows_p100_fp64_advantage(cli, cli_json):
    doc = cli_json("compare", "1080ti", "p100")
    row = next(r for r in doc["results"]["rows"] if r["field"] == "fp64_tflops")
    assert row["values"] == [0.35, 5.3]
    assert 14 <= row["ratios"][1] <= 17
    text = cli("compare", "1080ti", "p100").stdout
    assert "5.3 (15x)" in text


def test_compare_needs_two(cli):
    result = cli("compare", "v100")
    assert result.exit_code == 2
    assert "at least two" in result.stderr


def test_unknown_gpu_exit_code_and_suggestion(cli):
    result = cli("catalog", "show", "rtx 4009")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == "Error: unknown GPU 'rtx 4009'"
    assert "rtx-4090" in result.stderr
    assert "Traceback" not in result.stderr


def test_version(cli):
    from gpusizer import __version__

    result = cli("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"gpusizer {__version__}"


def test_json_has_no_colour_codes_even_when_forced(cli):
    result = cli("catalog", "list", "--json", env={"FORCE_COLOR": "1"})
    assert "\x1b[" not in result.stdout
    json.loads(result.stdout)


def test_human_output_has_no_colour_under_no_color(installed):
    result = installed("catalog", "list", env={"NO_COLOR": "1", "FORCE_COLOR": ""})
    assert result.returncode == 0
    assert "\x1b[" not in result.stdout
    assert "v100-sxm2-16gb" in result.stdout


# ----- user catalogs --------------------------------------------------------------------------


def test_example_user_catalog_overrides_and_adds(cli_json):
    doc = cli_json("catalog", "list", "--catalog", str(ROOT / "examples" / "my-gpus.yaml"))
    by_id = {g["id"]: g for g in doc["results"]}
    assert len(by_id) == len(GPUS) + 1
    assert by_id["rtx-4090"]["launch_price_usd"] == 1750
    assert by_id["rtx-4090"]["fp32_tflops"] == 82.6  # untouched fields keep bundled values
    assert by_id["lab-a100-40gb-lowpower"]["fp32_tflops"] == 12.0


def test_catalog_from_environment(cli_json, tmp_path, monkeypatch):
    a = tmp_path / "a.yaml"
    a.write_text("gpus:\n  - id: t4\n    launch_price_usd: 2000\n")
    b = tmp_path / "b.yaml"
    b.write_text("gpus:\n  - id: t4\n    launch_price_usd: 2100\n")
    monkeypatch.setenv("GPUSIZER_CATALOG", os.pathsep.join([str(a), str(b)]))
    doc = cli_json("catalog", "show", "t4")
    assert doc["results"]["launch_price_usd"] == 2100  # later files win


# ----- bad catalogs: each kind has exit code 3 and one line naming file, entry and field ------

BAD = {
    "malformed": ("gpus:\n  - id: t4\n\ttdp_w: 70\n", r"malformed YAML \(line 3, column 1\): found character '\\t'"),
    "wrong_type": ("gpus:\n  - id: t4\n    memory_gib: lots\n", "entry 't4': memory_gib: Input should be a valid number"),
    "unknown_field": ("gpus:\n  - id: t4\n    memroy_gib: 16\n", "entry 't4': memroy_gib: unknown field"),
    "negative": ("gpus:\n  - id: t4\n    bandwidth_gb_s: -5\n", "entry 't4': bandwidth_gb_s: Input should be greater than 0"),
    "absurd": ("gpus:\n  - id: t4\n    memory_gib: 100000\n", "entry 't4': memory_gib: Input should be less than or equal to 4096"),
    "fp64_over_fp32": ("gpus:\n  - id: t4\n    fp64_tflops: 50\n", "entry 't4': fp64_tflops: 50.0 exceeds fp32_tflops"),
    "duplicate": ("gpus:\n  - id: t4\n    tdp_w: 70\n  - id: t4\n    tdp_w: 75\n", "entry 't4': id: duplicate id in the same file"),
    "not_a_list": ("gpus: 3\n", "expected a list of GPU entries"),
    "unknown_derivation_rule": ("gpus:\n  - id: quadro-gv100\n    derived:\n      tensor_fp16_tflops: no-such-rule\n",
                                "entry 'quadro-gv100': derived: tensor_fp16_tflops: no rule 'no-such-rule'"),
    "value_against_its_rule": ("gpus:\n  - id: quadro-gv100\n    tensor_fp16_tflops: 100\n",
                               "entry 'quadro-gv100': derived: tensor_fp16_tflops: 100 is not what 'tensor-fp16-volta' gives"),
    "missing_fields_new_entry": ("gpus:\n  - id: my-card\n    name: My card\n", "entry 'my-card': segment: Field required"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_catalog_file(cli, tmp_path, kind):
    text, expected = BAD[kind]
    path = tmp_path / f"{kind}.yaml"
    path.write_text(text)
    result = cli("catalog", "list", "--catalog", str(path))
    assert result.exit_code == 3, result.stderr
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"Error: {path}: ")
    import re

    assert re.search(expected, first), first
    assert "Traceback" not in result.stderr


def test_missing_catalog_file(cli, tmp_path):
    result = cli("catalog", "list", "--catalog", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 3
    assert result.stderr.startswith(f"Error: {tmp_path / 'nope.yaml'}: file not found")


def test_python_yaml_tags_are_refused(cli, tmp_path):
    """safe_load only: a python/object tag is a YAML error, not code execution."""
    path = tmp_path / "evil.yaml"
    path.write_text("gpus: !!python/object/apply:os.system ['echo pwned']\n")
    result = cli("catalog", "list", "--catalog", str(path))
    assert result.exit_code == 3
    assert "malformed YAML" in result.stderr
    assert "pwned" not in result.stdout


def test_installed_command_and_module_agree(installed):
    import subprocess
    import sys

    a = installed("catalog", "list", "--json")
    b = subprocess.run([sys.executable, "-m", "gpusizer", "catalog", "list", "--json"], capture_output=True, text=True)
    assert a.returncode == 0 and b.returncode == 0
    assert json.loads(a.stdout)["results"] == json.loads(b.stdout)["results"]


def test_unknown_architecture_and_case_of_segment(cli, cli_json):
    bad = cli("catalog", "list", "--arch", "hoper")
    assert bad.exit_code == 2 and "hopper" in bad.stderr
    assert {g["id"] for g in cli_json("catalog", "list", "--segment", "Datacenter", "--arch", "Hopper")["results"]} >= {
        "h100-sxm5-80gb", "h200-sxm-141gb"}


def test_closed_pipe_is_quiet(installed):
    import subprocess

    cmd = " ".join(__import__("shlex").quote(c) for c in __import__("conftest").gpusizer_command())
    result = subprocess.run(f"{cmd} catalog list --json | head -1", shell=True, capture_output=True, text=True)
    assert result.stdout.strip() == "{"
    assert "Error" not in result.stderr and "Traceback" not in result.stderr


# --------------------------------------------------------------------------
# the validated-catalog cache


def _fresh_load(extra, cache_dir):
    from gpusizer.hardware import catalog as catalog

    catalog._load_cached.cache_clear()
    try:
        return catalog.load_catalog(extra, cache_dir=cache_dir)
    finally:
        catalog._load_cached.cache_clear()


def test_cached_catalog_equals_the_validated_one(tmp_path):
    first = _fresh_load([], tmp_path)  # validates, then writes the dump
    assert len(list(tmp_path.glob("catalog-*.json"))) == 1
    second = _fresh_load([], tmp_path)  # built from the dump without validating
    assert second == first
    for a, b in zip(first.gpus, second.gpus, strict=True):
        assert a == b and hash(a) == hash(b)
        assert isinstance(b.aliases, tuple) and isinstance(b.sources, tuple)
        assert all(type(s).__name__ == "Source" and isinstance(s.fields, tuple) for s in b.sources)
    assert second.resolve("Tesla V100-SXM2-16GB").gpu.memory_bytes == 16 * 2**30
    # the dump is never trusted: an edit to it (here one that still validates) is ignored
    (dump,) = tmp_path.glob("catalog-*.json")
    edited = dump.read_bytes().replace(first.gpus[0].name.encode(), b"edited in the cache", 1)
    assert edited != dump.read_bytes()
    dump.write_bytes(edited)
    assert _fresh_load([], tmp_path).gpus[0].name == first.gpus[0].name


def test_cache_never_hides_a_changed_user_file(tmp_path, installed):
    user = tmp_path / "mine.yaml"
    user.write_text("gpus:\n  - id: v100-sxm2-16gb\n    launch_price_usd: 9000\n")
    env = {"GPUSIZER_CACHE_DIR": str(tmp_path / "cache")}
    ok = installed("catalog", "show", "v100-sxm2-16gb", "--catalog", str(user), "--json", env=env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["results"]["launch_price_usd"] == 9000
    user.write_text("gpus:\n  - id: v100-sxm2-16gb\n    launch_price_usd: -5\n")
    bad = installed("catalog", "show", "v100-sxm2-16gb", "--catalog", str(user), "--json", env=env)
    assert bad.returncode == 3
    assert "mine.yaml: entry 'v100-sxm2-16gb': launch_price_usd" in bad.stderr


def test_foreign_cache_dump_is_ignored(tmp_path):
    _fresh_load([], tmp_path)
    (dump,) = tmp_path.glob("catalog-*.json")
    dump.write_text(json.dumps([{"id": "not-a-gpu", "surprise": 1}]))
    again = _fresh_load([], tmp_path)
    assert len(again.gpus) == len(load_catalog().gpus)
    assert again.by_id("p100-sxm2-16gb").fp64_tflops == 5.3


def test_catalog_show_an_amd_gpu(cli, cli_json):
    gpu = cli_json("catalog", "show", "AMD Instinct MI300X")["results"]
    assert gpu["id"] == "mi300x" and gpu["vendor"] == "amd" and gpu["compute_capability"] is None
    assert gpu["architecture"] == "cdna3" and gpu["tensor_bf16_tflops"] == 1307.4
    human = cli("catalog", "show", "AMD Instinct MI300X")
    assert human.exit_code == 0 and "cdna3" in human.stdout
    assert {g["id"] for g in cli_json("catalog", "list", "--arch", "cdna2")["results"]} == {"mi210", "mi250", "mi250x"}


def test_compare_with_a_workload_adds_the_modelled_speed_estimate_gives(cli_json):
    """The speed row is estimate's throughput for the workload's run (ResNet-50 training, mixed,
    batch 64), GPU by GPU, with its ratio to the first, above the datasheet rows."""
    doc = cli_json("compare", "rtx-3090", "rtx-4090", "--workload", "cnn")
    speed = doc["results"]["rows"][0]
    assert speed["field"] == "modelled_throughput_per_s" and "images/s" in speed["label"]
    for gpu, value in zip(("rtx-3090", "rtx-4090"), speed["values"], strict=True):
        est = cli_json("estimate", "--model", "resnet50", "--gpu", gpu, "--precision", "mixed", "--batch", "64")
        assert value == est["results"]["throughput_per_s"]
    assert speed["ratios"][1] == speed["values"][1] / speed["values"][0]
    assert speed["values"][1] > speed["values"][0]  # the 4090 is the faster card
    assert doc["input"]["workload"] == "cnn"


def test_compare_with_a_model_that_does_not_fit_says_why(cli_json):
    doc = cli_json("compare", "rtx-4090", "h100", "--model", "llama-3.1-70b")
    assert doc["results"]["rows"][0]["values"] == [None, None]
    assert any("rtx-4090: not timed: Llama 3.1 70B does not fit" in n for n in doc["notes"])


def test_compare_a_workload_without_a_model_in_the_performance_model_is_refused(cli):
    result = cli("compare", "v100", "a100", "--workload", "hpc")
    assert result.exit_code == 2 and "no model in the performance model" in result.stderr


@pytest.mark.parametrize("workload", ["cnn", "transformer", "llm-inference"])
def test_compare_speed_is_recommends_speed_column(cli_json, workload):
    """compare --workload and recommend time the same run (the workload's reference model, mode,
    precision and batch): GPU by GPU the figures are equal."""
    gpus = ("rtx-4090", "a100-sxm4-80gb")
    row = cli_json("compare", *gpus, "--workload", workload)["results"]["rows"][0]
    ranked = {r["gpu_id"]: r for r in cli_json("recommend", "--workload", workload, "--top", "200")["results"]["ranked"]}
    assert row["values"] == [ranked[g]["speed"]["throughput_per_s"] for g in gpus]


def test_a_gpu_named_twice_is_checked_once(cli_json):
    """fit-model (as serve) listed one row per name: "h100" and "h100-sxm5-80gb" are the same GPU."""
    doc = cli_json("fit-model", "--model", "llama-2-7b", "--inference", "--gpu", "h100", "--gpu", "h100-sxm5-80gb",
                   "--gpu", "l4")
    ids = [r["gpu_id"] for r in doc["results"]["gpus"]]
    assert sorted(ids) == ["h100-sxm5-80gb", "l4"]
