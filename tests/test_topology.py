"""Node topology: systems, the defaults by form factor and segment, and what they do to scaling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_script

import gpusizer.cli.estimate
import gpusizer.cli.fit
import gpusizer.cli.recommend  # noqa: F401
from gpusizer import api
from gpusizer.hardware.catalog import load_catalog
from gpusizer.performance.calibration import load_interconnects
from gpusizer.performance.comm import collective_link
from gpusizer.performance.topology import default_p2p, node_topology

CAT = load_catalog()
ROOT = Path(__file__).resolve().parents[1]


def test_sxm_nodes_default_to_their_dgx_one_nic_per_gpu():
    h100 = CAT.by_id("h100-sxm5-80gb")
    topo = node_topology(h100, 8, 16)
    assert (topo.fabric, topo.network, topo.nics_per_node) == ("nvswitch", "ib-ndr", 8)
    assert "DGX H100" in topo.origin and topo.assumed
    # DGX A100: 8 x 200 Gb/s HDR compute ports
    a100 = node_topology(CAT.by_id("a100-sxm4-80gb"), 8, 4)
    assert (a100.network, a100.nics_per_node) == ("ib-hdr", 8)


@pytest.mark.parametrize(("gpu_id", "p2p"), [
    ("rtx-4090", "none"), ("rtx-3090", "none"), ("rtx-2080-ti", "none"),
    ("rtx-a6000", "root-complex"), ("rtx-6000-ada", "root-complex"), ("a100-pcie-80gb", "root-complex"),
])
def test_pcie_p2p_defaults_follow_the_segment(gpu_id, p2p):
    assert default_p2p(CAT.by_id(gpu_id), load_interconnects())[0] == p2p
    assert node_topology(CAT.by_id(gpu_id), 4, 1).p2p == p2p


def test_pcie_paths_order_the_ring_bandwidth():
    """NVIDIA/nccl #1603, 4x RTX 4090 on PCIe 4.0: 22 GB/s with P2P through the CPU, 18 GB/s staged in
    host memory; NVIDIA/nccl #406: 12 GB/s of 15.75 inside a PCIe switch (0.76)."""
    gpu = CAT.by_id("rtx-a6000")
    links = load_interconnects()
    bw = {p: collective_link(gpu, 4, 1, links=links,
                             topology=node_topology(gpu, 4, 1).model_copy(update={"p2p": p})).bandwidth_gb_s
          for p in ("switch", "root-complex", "none")}
    assert bw["none"] == pytest.approx(18, abs=0.1)
    assert bw["root-complex"] == pytest.approx(22, abs=0.1)
    assert bw["switch"] > bw["root-complex"] > bw["none"]


def test_network_is_capped_by_the_pcie_links_gpudirect_reads_through():
    """AWS P5: 32 x 100 Gb/s EFA for 8 GPUs is 400 GB/s of ports, more than NVLink's ring; one GPU
    per node still cannot send faster than its own PCIe 5.0 link."""
    h100 = CAT.by_id("h100-sxm5-80gb")
    one = collective_link(h100, 1, 2, topology=node_topology(h100, 1, 2, system="aws-p5.48xlarge"))
    assert one.bandwidth_gb_s == pytest.approx(63.0 * 0.8)


def test_mpt_7b_on_dgx_h100_scales_as_llm_foundry_measured():
    """mosaicml/llm-foundry scripts/train/benchmarking/README.md (8c8dd48), H100 80GB BF16 large scale:
    MPT-7B, micro-batch 6, sequence 2048: 1,340,830 tokens/s on 128 GPUs and 4,951,479 on 512, a per-GPU
    efficiency of 0.923 relative to 128 GPUs."""
    measured = (4_951_479 / 512) / (1_340_830 / 128)

    def per_gpu(nodes: int) -> float:
        r = api.estimate("mpt-7b", system="dgx-h100", nodes=nodes, strategy="fsdp", batch=6, seq_len=2048,
                         precision="mixed")
        assert r.results.gpus_total == 8 * nodes
        return r.results.throughput_per_s / (8 * nodes)

    predicted = per_gpu(64) / per_gpu(16)
    assert predicted == pytest.approx(measured, rel=0.1)
    # and near-linear against one GPU, not the 19% the single-HDR-port default gave
    assert api.estimate("mpt-7b", system="dgx-h100", nodes=16, strategy="fsdp", batch=6).results \
        .scaling_efficiency > 0.9


def test_system_sets_gpu_count_topology_and_cloud_price(cli_json):
    doc = cli_json("estimate", "--system", "aws-p5.48xlarge", "--model", "mpt-7b", "--strategy", "fsdp",
                   "--tokens", "10B")
    r = doc["results"]
    assert doc["input"]["system"] == "aws-p5.48xlarge" and doc["input"]["resolved_id"] == "h100-sxm5-80gb"
    assert r["gpus_total"] == 8
    topo = r["estimate"]["topology"]
    assert topo["system"] == "aws-p5-48xlarge" and topo["fabric"] == "nvswitch"
    # AWS's on-demand price for the instance, per GPU-hour, becomes the run's price
    assert r["price_per_gpu_hour_usd"] == pytest.approx(55.04 / 8)
    assert r["cost_usd"] == pytest.approx(r["time_to_train"]["gpu_hours"] * 55.04 / 8)


@pytest.mark.parametrize(("args", "message"), [
    (["--system", "dgx-h100", "--gpu", "rtx-4090"], "holds h100-sxm5-80gb"),
    (["--system", "dgx-h100", "--gpus", "16"], "holds 8 GPUs"),
    (["--system", "no-such-box"], "unknown system"),
    ([], "name a GPU or a system"),
])
def test_system_errors_exit_2_with_json(cli, args, message):
    result = cli("estimate", "--model", "resnet50", *args, "--json")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    doc = json.loads(result.stdout)
    assert message in json.dumps(doc)


def test_held_out_scaling_error_is_what_the_docs_quote():
    """benchmarks/scaling_check.py over tests/data/scaling_refs.yaml (no constant fitted on it): the
    median and 90th percentile quoted in docs/accuracy.md."""
    check = load_script(ROOT / "benchmarks" / "scaling_check.py", "scaling_check")
    out = check.check()
    median, p90 = check.summary([r["error"] for r in out["rows"] if r["held_out"]])
    text = (ROOT / "docs" / "accuracy.md").read_text()
    assert f"median {median:.1%}" in text and f"90th percentile {p90:.1%}" in text, (median, p90)
    assert median <= check.TARGET_MEDIAN


def test_fit_model_and_recommend_take_a_system(cli_json):
    """--system sets the GPU and its count on fit-model and recommend as on estimate."""
    fit = cli_json("fit-model", "--model", "llama-3.1-8b", "--system", "dgx-h100", "--strategy", "fsdp",
                   "--checkpointing")
    assert fit["input"]["gpus"] == 8
    assert [g["gpu_id"] for g in fit["results"]["gpus"]] == ["h100-sxm5-80gb"]
    rec = cli_json("recommend", "--workload", "llm-train", "--model", "llama-3.1-8b", "--system", "dgx-h100",
                   "--strategy", "fsdp")
    assert rec["input"]["system"] == "nvidia-dgx-h100" and rec["results"]["gpus_per_node"] == 8
    (row,) = rec["results"]["ranked"]
    assert row["gpu_id"] == "h100-sxm5-80gb" and row["speed"]["transport"] == "nvlink"
    same = api.estimate("llama-3.1-8b", system="dgx-h100", strategy="fsdp", batch=row["speed"]["batch"])
    assert row["speed"]["throughput_per_s"] == pytest.approx(same.results.throughput_per_s)


def test_published_network_totals_and_tcp_ports_are_read():
    """GCP A3 High: 4 GPUDirect-TCPX NICs, 1,000 Gb/s in all, no RDMA: timed as TCP at that total; a system
    that does not publish its NICs (Lambda's 8x H100) gets its GPU's DGX-class defaults, said so."""
    h100 = CAT.by_id("h100-sxm5-80gb")
    tcpx = node_topology(h100, 8, 2, system="gcp-a3-highgpu-8g")
    assert (tcpx.network, tcpx.nics_per_node) == ("tcp-100g", 10)
    assert collective_link(h100, 8, 2, topology=tcpx).transport == "tcp"
    lam = node_topology(h100, 8, 2, system="lambda-8x-h100-sxm")
    assert (lam.network, lam.nics_per_node) == ("ib-ndr", 8)
    assert any("not published" in a for a in lam.assumed)


def test_interconnect_overrides_keep_their_generation_and_the_fabric():
    gpu = CAT.by_id("rtx-a6000")  # PCIe 4.0 card
    gen3 = node_topology(gpu, 4, 1, interconnect="pcie3")
    assert gen3.pcie_generation == 3
    assert collective_link(gpu, 4, 1, topology=gen3).bandwidth_gb_s == pytest.approx(15.75 * 0.70)
    v100 = CAT.by_id("v100-sxm2-16gb")
    mesh = node_topology(v100, 8, 1, interconnect="nvlink1")
    assert mesh.fabric == "nvlink-mesh" and mesh.nvlink_gb_s == 160
    # a network override replaces the default's network note
    h100 = node_topology(CAT.by_id("h100-sxm5-80gb"), 8, 2, interconnect="ib-hdr")
    assert h100.network == "ib-hdr" and not any("ib-ndr" in a for a in h100.assumed)


def test_a_4x_rtx_3090_workstation_scales_as_lambda_measured():
    """lambdal/deeplearning-benchmark pytorch-train-throughput-fp16.csv (67a9bb5), BERT-base SQuAD, batch 52 per
    GPU: 160 sequences/s on one RTX 3090 and 547 on four, a per-GPU efficiency of 0.855. The Puget 4x RTX 3090
    workstation (PCIe, GeForce: no P2P) is predicted sub-linear by as much."""
    measured = 547 / (4 * 160)
    r = api.estimate("bert-base", system="puget-4x-rtx-3090-c422", batch=52, seq_len=384, precision="mixed")
    assert r.results.gpus_total == 4 and r.results.estimate.topology.p2p == "none"
    assert r.results.scaling_efficiency == pytest.approx(measured, abs=0.05)
    assert r.results.scaling_efficiency < 0.9


def test_a_newer_pcie_slot_runs_at_the_cards_generation(cli_json):
    """Audit finding 13: an RTX 3090 (PCIe 4.0) given --interconnect pcie5 was timed at PCIe 5.0's 35.9 GB/s;
    a link trains at the lower of the slot's and the card's generations."""
    args = ("estimate", "--model", "resnet50", "--gpu", "rtx3090", "--gpus", "4")
    given = cli_json(*args, "--interconnect", "pcie5")
    plain = cli_json(*args, "--interconnect", "pcie4")
    assert (given["results"]["estimate"]["comm_bandwidth_gb_s"] == plain["results"]["estimate"]["comm_bandwidth_gb_s"]
            == pytest.approx(18.0, abs=0.1))
    notes = given["results"]["estimate"]["notes"] + given["notes"]
    assert any(n.startswith("rtx-3090 is a PCIe 4.0 card: in a PCIe 5.0 slot its link trains at 4.0") for n in notes)
    # an older slot than the card's is taken as given
    older = cli_json("estimate", "--model", "resnet50", "--gpu", "h100-pcie-80gb", "--gpus", "4", "--interconnect", "pcie4")
    assert older["results"]["estimate"]["interconnect"].startswith("PCIe 4.0")


def test_a_bridged_pair_is_named_as_a_bridge_and_its_copies_are_not_host_staged(cli_json):
    """Audit finding 15: an RTX 3090 pair read "NVLink 3.0 (Ampere A100)" and "no P2P: copies staged in host
    memory", though its copies cross the bridge; the host path joins pairs only."""
    res = cli_json("estimate", "--model", "resnet50", "--gpu", "rtx3090", "--gpus", "2")["results"]["estimate"]
    assert res["interconnect"] == "NVLink 3.0 bridge"
    assert res["transport"] == "nvlink"


def test_a_network_given_without_its_ports_says_how_many_it_keeps(cli_json):
    """Audit finding 14: 10 GbE named on an SXM node kept the DGX default's 8 ports a node, said only in the
    node line; now a note says so, and the NICs per node change it."""
    args = ("estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "8", "--nodes", "2", "--strategy", "fsdp",
            "--interconnect", "tcp-10g")
    kept = cli_json(*args)
    assert "8 x tcp-10g ports per node, as many as the default network's; give the NICs per node if the nodes " \
           "have fewer" in kept["results"]["estimate"]["notes"] + kept["notes"]
    one = cli_json(*args, "--nics-per-node", "1")
    assert not any("as many as the default network's" in n for n in one["results"]["estimate"]["notes"] + one["notes"])
    assert one["results"]["estimate"]["comm_bandwidth_gb_s"] < kept["results"]["estimate"]["comm_bandwidth_gb_s"]
