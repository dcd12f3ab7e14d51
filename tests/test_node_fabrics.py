"""Audit finding 3: OAM nodes get their scale-up mesh, an unknown PCIe generation is a stated rule,
and the no-fabric advisory reads unknown as unknown and names each vendor's link. Meshes: AMD's ROCm
blog (7 xGMI links of 64 GB/s per direction on MI300X, about 75% usable), AMD's MI355X page (153.6
GB/s a link, both directions), Intel's Gaudi network guide (21 scale-up ports, 3 per peer)."""

from __future__ import annotations

import pytest

from gpusizer.hardware.catalog import load_catalog
from gpusizer.performance.calibration import load_interconnects
from gpusizer.performance.topology import node_topology, pcie_generation_for


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_unknown_pcie_generation_is_a_stated_rule_not_the_oldest(cat):
    links = load_interconnects()
    gen, note = pcie_generation_for(cat.by_id("h20"), links, cat)
    assert gen == 5 and note is not None and "unknown" in note and "hopper" in note
    assert pcie_generation_for(cat.by_id("h100-sxm5-80gb"), links, cat) == (5, None)
    assert cat.by_id("gaudi3").pcie_generation == 5  # EE Times: 16 PCIe 5.0 lanes


def test_gpu_without_pcie_generation_gets_a_note(tmp_path, cli_json):
    import yaml

    base = load_catalog().by_id("l40s").model_dump(mode="json", exclude={"derived"})
    base.update(id="my-card", name="My card", aliases=[], pcie_generation=None, family=None)
    (tmp_path / "cat.yaml").write_text(yaml.safe_dump({"schema_version": 1, "gpus": [base]}))
    doc = cli_json("estimate", "--catalog", str(tmp_path / "cat.yaml"), "--model", "llama-3.2-1b", "--gpu",
                   "my-card", "--gpus", "2", "--strategy", "ddp")
    est = doc["results"]["estimate"]
    assert "PCIe 4.0" in est["interconnect"] and not est["interconnect"].startswith("PCIe 3.0")
    assert any("PCIe generation is unknown" in n for n in est["notes"] + doc["notes"])


@pytest.mark.parametrize(("gpu", "mesh", "per_gpu"), [("mi300x", "xgmi-cdna3", 448.0), ("mi325x", "xgmi-cdna3", 448.0),
                                                      ("mi355x", "xgmi-cdna4", 537.6), ("gaudi2", "gaudi2-scaleup", 262.5),
                                                      ("gaudi3", "gaudi3-scaleup", 525.0)])
def test_oam_nodes_default_to_their_scale_up_mesh(cat, gpu, mesh, per_gpu):
    links = load_interconnects()
    topo = node_topology(cat.by_id(gpu), 8, 1, links=links)
    assert topo.fabric == "scale-up" and topo.scale_up == mesh
    assert links.get(mesh).bandwidth_gb_s == per_gpu and links.get(mesh).peer_links == 7


def test_gaudi3_and_mi300x_scale_as_a_mesh(cli_json):
    """Audit: 8 x Gaudi 3 scaled 21% (PCIe 3.0 via the root complex), MI300X 49%."""
    for gpu in ("gaudi3", "mi300x"):
        est = cli_json("estimate", "--model", "llama-3.1-8b", "--gpu", gpu, "--gpus", "8",
                       "--strategy", "fsdp")["results"]["estimate"]
        assert est["transport"] == "scale-up" and est["scaling_efficiency"] > 0.9
        assert "7 of 7 peer links" in est["interconnect"]
    two = cli_json("estimate", "--model", "llama-3.1-8b", "--gpu", "mi300x", "--gpus", "2",
                   "--strategy", "fsdp")["results"]["estimate"]
    assert two["comm_bandwidth_gb_s"] == pytest.approx(64 * 0.75)  # one xGMI link, 75% usable
    pcie = cli_json("estimate", "--model", "llama-3.1-8b", "--gpu", "mi300x", "--gpus", "8", "--strategy", "fsdp",
                    "--interconnect", "pcie")["results"]["estimate"]
    assert pcie["transport"] == "pcie"


def test_no_fabric_advisory_reads_unknown_as_unknown_and_names_the_vendor_link(cli_json):
    doc = cli_json("recommend", "--workload", "llm-train", "--model", "llama-3.1-8b", "--gpus", "8",
                   "--strategy", "fsdp", "--vendor", "any", "--top", "80")
    res = doc["results"]
    rows = {r["gpu_id"]: r for r in [*res["ranked"], *res.get("beyond_top", [])]}

    def fired(gpu_id):
        return [a["message"] for a in rows[gpu_id]["advisories"] if a["rule"] == "no-nvlink-multigpu"]

    assert fired("b100") == [] and fired("mi300x") == [] and fired("gaudi3") == []
    assert fired("rtx-pro-6000-blackwell") and fired("rtx-pro-6000-blackwell")[0].startswith("no NVLink:")
    assert fired("mi210") and fired("mi210")[0].startswith("no Infinity Fabric (xGMI) link:")


def test_every_host_link_of_the_catalog_is_a_sourced_row(cat):
    links = load_interconnects()
    rows = {r.id: r for r in links.host_links}
    named = {g.id: g.host_link for g in cat.gpus if g.host_link is not None}
    assert {"gh200-96gb", "gh200-144gb", "gb200", "gb300"} <= set(named)
    for gpu, link in named.items():
        assert link in rows, gpu
        assert {"bandwidth_gb_s", "efficiency"} <= {f for s in rows[link].sources for f in s.fields}


@pytest.mark.parametrize(("gpu", "per_direction"), [
    ("gh200-96gb", 450),  # NVIDIA: NVLink-C2C 900 GB/s total, 450 GB/s per direction
    ("gb200", 900 / 2 / 2),  # NVIDIA: 900 GB/s bidirectional for the superchip's two GPUs
])
def test_grace_superchips_time_offload_over_nvlink_c2c_not_pcie(cli_json, gpu, per_direction):
    """A one-GPU offloading run's communication is its offload traffic. A Grace superchip moves it
    over NVLink-C2C at 75% of the link (Schieffer et al. 2024: 375 + 297 of 900 GB/s), an H100
    SXM over PCIe 5.0 x16 (63 GB/s a direction) at 80%: the offload time scales by their ratio."""
    def offload(g: str) -> dict:
        return cli_json("estimate", "--model", "llama-2-7b", "--offload", "optimizer", "--gpu", g)["results"]

    c2c, pcie = offload(gpu), offload("h100-sxm5-80gb")
    assert c2c["comm_s"] == pytest.approx(pcie["comm_s"] * (63.0 * 0.8) / (per_direction * 0.75), rel=1e-9)
    assert any("over NVLink-C2C" in n for n in c2c["estimate"]["notes"])
    # the lone-GPU baseline a multi-GPU run is compared with times its offload the same way
    four = cli_json("estimate", "--model", "llama-2-7b", "--offload", "optimizer", "--gpu", gpu,
                    "--gpus", "4")["results"]
    assert four["speedup_vs_1gpu"] == pytest.approx(four["throughput_per_s"] / c2c["throughput_per_s"], rel=1e-6)


@pytest.mark.parametrize("gpu", ["mi250", "mi250x"])
def test_mi250_nodes_time_their_infinity_fabric_not_pcie(cat, cli_json, gpu):
    """AMD's MI250 microarchitecture guide (ROCm docs): 4 OAMs, 8 GCDs a node, and the catalog's
    entries are one GCD each. Each GCD has 8 Infinity Fabric links, 4 to its sibling GCD and one
    used as its PCIe host link, so 3 go to GCDs of other OAMs, 50 GB/s per direction each. An
    8-GCD FSDP ring (a whole node) is bounded by those 3: 150 GB/s at the 75% xGMI links carry
    (AMD's MI300X RCCL blog), not PCIe 4.0 through the root complex."""
    links = load_interconnects()
    topo = node_topology(cat.by_id(gpu), 8, 1, links=links)
    assert topo.fabric == "scale-up" and topo.scale_up == "xgmi-cdna2"
    doc = cli_json("estimate", "--model", "llama-3.1-8b", "--gpu", gpu, "--gpus", "8", "--strategy", "fsdp")
    est = doc["results"]["estimate"]
    assert est["transport"] == "scale-up" and "up to 3 links a GCD to other OAMs" in est["interconnect"]
    assert est["comm_bandwidth_gb_s"] == pytest.approx(3 * 50 * 0.75)
    assert not any("no published board" in n or "approximately" in n for n in doc["notes"] + est["notes"])


@pytest.mark.parametrize("gpu", ["mi250", "mi250x"])
def test_fewer_mi250_gcds_are_timed_from_the_node_diagram_or_said_to_be_approximate(cli_json, gpu):
    """AMD's MI250 guide: the two GCDs of an OAM are joined by 4 Infinity Fabric links, 200 GB/s a
    direction; links between OAMs carry 50 GB/s each, and its node diagram joins the first two OAMs
    (GCD0-1 and GCD2-3) by one link, GCD1-GCD3. So 2 GCDs (one OAM) run at 200 x 75% = 150 GB/s,
    where they were timed at one external link (37.5), and 4 GCDs at that one link, 37.5, where they
    were timed at all 3 of a GCD's external links (112.5). 3 GCDs keep the peer-link rule, and say so."""
    def run(gpus: int) -> tuple[dict, list[str]]:
        doc = cli_json("estimate", "--model", "llama-3.2-1b", "--gpu", gpu, "--gpus", str(gpus), "--strategy", "fsdp")
        est = doc["results"]["estimate"]
        return est, doc["notes"] + est["notes"]

    two, notes2 = run(2)
    assert two["comm_bandwidth_gb_s"] == pytest.approx(4 * 50 * 0.75)
    assert "GCD0-1: the 4 links between the two GCDs of an OAM" in two["interconnect"]
    four, notes4 = run(4)
    assert four["comm_bandwidth_gb_s"] == pytest.approx(50 * 0.75)
    assert "GCD0-3: the one link between their two OAMs" in four["interconnect"]
    assert not any("approximately" in n for n in notes2 + notes4)
    three, notes3 = run(3)
    assert three["comm_bandwidth_gb_s"] == pytest.approx(2 * 50 * 0.75) and "2 of 3 peer links" in three["interconnect"]
    assert any(n.startswith("a ring over 3 GPUs of the AMD Infinity Fabric") and "timed approximately" in n
               and "rings over 2, 4 and 8 GPUs only" in n for n in notes3)


def test_even_meshes_have_no_diagram_rings_and_no_approximation_note(cli_json):
    """MI300X's 8 OAMs link all-to-all with one link a pair, so n - 1 peer links is exact there."""
    links = load_interconnects()
    assert links.get("xgmi-cdna3").ring_links == ()
    doc = cli_json("estimate", "--model", "llama-3.2-1b", "--gpu", "mi300x", "--gpus", "3", "--strategy", "fsdp")
    assert not any("approximately" in n for n in doc["notes"] + doc["results"]["estimate"]["notes"])


@pytest.mark.parametrize("gpu", ["gb200", "gb300"])
def test_grace_blackwell_gpus_talk_over_nvlink_not_pcie(cli_json, gpu):
    """GB200 and GB300 sit in NVL72 racks, whose GPUs reach each other through NVLink switches
    (1.8 TB/s a GPU, the catalog's nvlink_gb_s): 8 of them at TP=8 communicate as a DGX B200's do,
    where they were timed over an assumed PCIe 5.0 link at twice the communication time."""
    doc = cli_json("estimate", "--inference", "--model", "llama-3-70b", "--gpu", gpu, "--gpus", "8", "--strategy", "tp",
                   "--batch", "64", "--seq-len", "4096")
    ref = cli_json("estimate", "--inference", "--model", "llama-3-70b", "--gpu", "b200-sxm-180gb", "--gpus", "8",
                   "--strategy", "tp", "--batch", "64", "--seq-len", "4096")
    assert doc["results"]["estimate"]["transport"] == "nvlink"
    assert doc["results"]["comm_s"] == pytest.approx(ref["results"]["comm_s"], rel=1e-6)


@pytest.mark.parametrize("gpu", ["gh200-96gb", "gh200-144gb"])
def test_gh200_gpus_talk_over_nvlink_switches_not_pcie(cat, cli_json, gpu):
    """The GH200's Hopper GPU has the H100 SXM's 18 NVLink 4 links, 900 GB/s bidirectional (Bekman's
    NVLink table), which NVIDIA's NVL32 racks and the DGX GH200 join through NVLink switches. Two or
    eight of them were timed over an assumed PCIe link; now over NVLink 4 at 450 GB/s a direction and
    the 78% NCCL reaches on NVSwitch (the H100 SXM's figure), with the assumption printed."""
    g = cat.by_id(gpu)
    assert (g.nvlink_generation, g.nvlink_gb_s, g.nvlink_switched) == (4, 900, True)
    assert {"nvlink_generation", "nvlink_gb_s"} <= {f for s in g.sources for f in s.fields}
    links = load_interconnects()
    per_gpu = 450 * links.nvlink(4).efficiency
    for gpus in (2, 8):
        doc = cli_json("estimate", "--model", "llama-2-7b", "--gpu", gpu, "--gpus", str(gpus), "--strategy", "fsdp")
        est = doc["results"]["estimate"]
        assert est["transport"] == "nvlink" and est["comm_bandwidth_gb_s"] == pytest.approx(per_gpu)
        notes = " ".join(doc["notes"] + est["notes"])
        assert "one GPU of a Grace superchip" in notes and "NVLink switches (900 GB/s a GPU)" in notes
        assert "node as in NVIDIA DGX H100: NVSwitch" in notes
    # two nodes: NVLink inside, the DGX H100's 8 x 400 Gb/s InfiniBand NDR ports between, said so
    doc = cli_json("estimate", "--model", "llama-2-7b", "--gpu", gpu, "--gpus", "8", "--nodes", "2",
                   "--strategy", "fsdp")
    est = doc["results"]["estimate"]
    assert est["transport"] == "rdma" and "InfiniBand NDR" in est["interconnect"] and "x8 per node" in est["interconnect"]
    assert any("a node with NVIDIA DGX H100's network ports" in n for n in doc["notes"] + est["notes"])
    # a GH200 pair without NVLink between them (a workstation) is named as such
    pcie = cli_json("estimate", "--model", "llama-2-7b", "--gpu", gpu, "--gpus", "2", "--strategy", "fsdp",
                    "--interconnect", "pcie")["results"]["estimate"]
    assert pcie["transport"] == "pcie"


@pytest.mark.parametrize("gpu", ["gb200", "gb300"])
def test_a_lone_grace_blackwell_gpu_offloads_over_its_own_half_of_nvlink_c2c(cli_json, gpu):
    """NVIDIA gives the GB200 superchip's NVLink-C2C as 900 GB/s bidirectional for one Grace CPU and
    two GPUs; the split is the wiring's (NVML reports C2C links per GPU, and NCCL joins each GPU to
    its CPU with a link of its own, sharing one only among partitions of one GPU). So one GPU
    offloading alone moves at 900 / 2 / 2 = 225 GB/s a direction, 168.75 at the 75% Grace Hopper
    copies reach, as it does beside the superchip's other GPU: the per-GPU offload time is the same."""
    links = load_interconnects()
    row = next(r for r in links.host_links if r.id == "nvlink-c2c-gb200")
    assert (row.bandwidth_gb_s, row.efficiency) == (225, 0.75)
    assert any("nccl" in s.url for s in row.sources)

    def run(gpus: int) -> dict:
        return cli_json("estimate", "--model", "llama-2-7b", "--offload", "optimizer", "--gpu", gpu,
                        "--gpus", str(gpus), "--strategy", "ddp")["results"]

    lone = run(1)
    note = next(n for n in lone["estimate"]["notes"] if n.startswith("offload moves"))
    moved_gb = float(note.split()[2].replace(",", ""))
    assert lone["comm_s"] == pytest.approx(moved_gb / 168.75, rel=2e-3)  # the GB figure is rounded to 0.1
    assert "each GPU's half of the Grace CPU's links" in note
    # a pair (one superchip; ZeRO-2 halves each GPU's optimizer bytes) moves at the same per-GPU rate
    pair = run(2)
    pair_note = next(n for n in pair["estimate"]["notes"] if n.startswith("offload moves"))
    pair_gb = float(pair_note.split()[2])
    pair_ms = float(pair_note.split(" each step (")[1].split(" ms")[0])
    assert pair_gb == pytest.approx(moved_gb / 2, abs=0.1)
    assert pair_ms == pytest.approx(pair_gb / 168.75 * 1e3, abs=1.0)  # 13.5 GB: 80 ms
