"""GPU systems (data/systems.yaml): node types and cloud instances, and where the catalog points to them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import gpusizer.api as api
from gpusizer.errors import DataFileError, ExitCode, UsageError
from gpusizer.hardware.catalog import load_catalog
from gpusizer.hardware.systems import Systems, load_systems

SYSTEMS = load_systems()
BY_ID = {s.id: s for s in SYSTEMS.systems}


def test_every_system_names_a_catalog_gpu_and_cites_a_source():
    gpus = {g.id for g in load_catalog().gpus}
    assert len(SYSTEMS.systems) >= 50
    for system in SYSTEMS.systems:
        assert system.gpu in gpus and system.sources and all(s.url for s in system.sources), system.id
        if system.kind == "cloud" and system.price and system.price.on_demand_usd_per_hour:
            assert system.price.date, system.id


def test_the_clouds_and_nodes_the_issue_names_are_there():
    ids = set(BY_ID)
    for wanted in ("aws-p4d-24xlarge", "aws-p5-48xlarge", "aws-g5-xlarge", "aws-g6e-xlarge", "gcp-a3-highgpu-8g",
                   "gcp-g2-standard-4", "azure-nd96isr-h100-v5", "nvidia-dgx-a100-640gb", "nvidia-dgx-h100",
                   "nvidia-dgx-1-v100", "nvidia-dgx-2"):
        assert wanted in ids, wanted
    assert {s.provider for s in SYSTEMS.systems if s.kind == "cloud"} >= {"aws", "gcp", "azure", "lambda"}


def test_published_figures_of_two_systems():
    """AWS p5.48xlarge after the mid-2025 price cut: $55.04 an hour in us-east-1 for 8 H100 SXM
    (Karpenter's table from the AWS Price List API), so $6.88 a GPU-hour; DGX H100: 8 GPUs on
    NVSwitch at 900 GB/s each and eight 400 Gb/s InfiniBand ports."""
    p5 = SYSTEMS.resolve("p5.48xlarge")
    assert p5.gpu == "h100-sxm5-80gb" and p5.gpus == 8 and p5.price is not None
    assert p5.price.on_demand_usd_per_hour == pytest.approx(55.04) and p5.usd_per_gpu_hour == pytest.approx(6.88)
    dgx = BY_ID["nvidia-dgx-h100"]
    assert (dgx.intra_node.fabric, dgx.intra_node.nvlink_gb_s) == ("nvswitch", 900)
    assert dgx.nics is not None and (dgx.nics.count, dgx.nics.gbit_s_each, dgx.nics.rdma) == (8, 400, True)
    assert dgx.price is None and dgx.usd_per_gpu_hour is None


def test_list_filters_by_any_gpu_name_and_puts_the_cheapest_gpu_hour_first():
    res = api.list_systems(gpu="H100 SXM")
    assert res.input["resolved_gpu"] == "h100-sxm5-80gb"
    prices = [s.usd_per_gpu_hour for s in res.results]
    priced = [p for p in prices if p is not None]
    assert priced == sorted(priced) and prices[: len(priced)] == priced  # unpriced (DGX) last
    assert {s.provider for s in api.list_systems(provider="aws").results} == {"aws"}
    with pytest.raises(UsageError, match="not one of"):
        api.list_systems(provider="acme")


def test_catalog_show_points_to_the_cloud_offers_of_a_gpu(cli_json):
    doc = cli_json("catalog", "show", "NVIDIA A10G")
    note = next(n for n in doc["notes"] if n.startswith("cloud offers:"))
    assert "gpusizer systems list --gpu a10g" in note and "g5.xlarge" in note
    assert not any(n.startswith("cloud offers:") for n in cli_json("catalog", "show", "rtx-4090")["notes"])


def test_systems_commands_json_and_errors(cli, cli_json):
    doc = cli_json("systems", "show", "dgx-h100")
    assert doc["command"] == "systems show" and doc["results"]["gpu"] == "h100-sxm5-80gb"
    listed = cli_json("systems", "list", "--gpu", "l4")
    assert listed["results"] and all(s["gpu"] == "l4" for s in listed["results"])
    bad = cli("systems", "show", "nope", "--json")
    assert bad.exit_code == ExitCode.USAGE and json.loads(bad.stdout)["error"]["message"] == "unknown system 'nope'"
    human = cli("systems", "list", "--provider", "aws")
    assert human.exit_code == 0 and "aws-p5-48xlarge" in human.stdout and "55.04" in human.stdout


def _doc() -> dict:
    return yaml.safe_load((Path(__file__).resolve().parent.parent / "data" / "systems.yaml").read_text())


@pytest.mark.parametrize(("change", "words"), [
    (lambda s: s.update(provider=None), "provider"),
    (lambda s: s["price"].update(date=None), "date"),
    (lambda s: s.update(gpus=1), "single-GPU"),
])
def test_inconsistent_systems_are_rejected(change, words):
    doc = _doc()
    cloud = next(s for s in doc["systems"] if s["id"] == "aws-p5-48xlarge")
    change(cloud)
    with pytest.raises(ValueError, match=words):
        Systems.model_validate(doc)


def test_a_system_with_a_gpu_the_catalog_lacks_is_a_data_error(tmp_path):
    doc = _doc()
    doc["systems"][0]["gpu"] = "no-such-gpu"
    path = tmp_path / "systems.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(DataFileError, match="no-such-gpu"):
        load_systems(path)
