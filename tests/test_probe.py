"""Tests for `probe`: the NVML edge against a fake libnvidia-ml, and the pure engine.

The NVML tests build ``tests/fake_nvml/fake_nvml.c`` once per session and run
``gpusizer.hardware.nvml.read_host()`` in a subprocess per scenario (pynvml loads the
library once per process and cannot reload it).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from rich.console import Console

from gpusizer.errors import ExitCode
from gpusizer.hardware.catalog import Catalog, Gpu, _entries_from_document
from gpusizer.hardware.probe import (
    EMIT_CATALOG_HINT,
    DeviceSnapshot,
    HostSnapshot,
    NvLink,
    architecture_for,
    build_pairs,
    cuda_version_string,
    match_catalog,
    normalise_bus_id,
    slug,
    starter_catalog_yaml,
    starter_entry,
)
from gpusizer.hardware.probe import report_results as probe_json
from gpusizer.render.probe import probe_renderables
from gpusizer.units import GIB, MIB


def _load_fixture_module() -> Any:
    path = Path(__file__).resolve().parent / "fake_nvml" / "fixture.py"
    spec = importlib.util.spec_from_file_location("fake_nvml_fixture", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fx = _load_fixture_module()


# --------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the freshly built fake libnvidia-ml.so.1."""
    if fx.compiler() is None:
        pytest.skip("gcc (or cc) is not installed, so the fake libnvidia-ml.so.1 cannot be built")
    if not sys.platform.startswith("linux"):
        pytest.skip("the fake NVML library is a Linux shared object")
    try:
        return fx.build_library(tmp_path_factory.mktemp("fake_nvml"))
    except fx.BuildError as exc:
        pytest.skip(f"could not build the fake NVML library: {exc}")


@pytest.fixture
def probe(fake_lib: Path, tmp_path: Path):
    """probe(host_dict) -> (result json, list of NVML calls made)."""

    def run(host: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        config = fx.write_config(tmp_path / "nvml.cfg", host)
        log = tmp_path / "calls.log"
        if log.exists():
            log.unlink()
        result = fx.read_host_json(fake_lib, config, log)
        return result, fx.log_calls(log)

    return run


def snapshot(result: dict[str, Any]) -> HostSnapshot:
    assert "host" in result, f"expected a host, got {result}"
    return HostSnapshot.model_validate(result["host"])


# --------------------------------------------------------------------------
# NVML edge against the fake library


def test_single_v100(probe) -> None:
    result, calls = probe(fx.single_v100_host())
    host = snapshot(result)
    assert host.driver_version == "550.54.15"
    assert host.cuda_driver_version == "12.4"
    assert host.nvml_version == "12.550.54.15"
    assert len(host.devices) == 1
    d = host.devices[0]
    assert d.index == 0
    assert d.name == "Tesla V100-SXM2-16GB"
    assert d.uuid == "GPU-5a8e1b2c-0000-4000-8000-000000000000"
    assert d.pci_bus_id == "00000000:00:1E.0"
    assert d.memory_total_bytes == 16160 * MIB == 16_944_988_160
    # memory info v2: "used" excludes the driver's reservation
    assert d.memory_used_bytes == 0
    assert d.memory_free_bytes == (16160 - 309) * MIB
    assert d.compute_capability == "7.0"
    assert d.ecc_mode_current is True and d.ecc_mode_pending is True
    assert d.ecc_errors_corrected == 0 and d.ecc_errors_uncorrected == 0
    assert d.power_draw_w == pytest.approx(24.125)
    assert d.power_limit_w == 300
    assert d.temperature_c == 38
    assert (d.sm_clock_mhz, d.sm_clock_max_mhz) == (135, 1530)
    assert (d.mem_clock_mhz, d.mem_clock_max_mhz) == (877, 877)
    assert (d.pcie_gen, d.pcie_gen_max, d.pcie_width, d.pcie_width_max) == (1, 3, 16, 16)
    assert d.nvlinks == ()  # six links exist, none is up
    assert d.mig_mode_current is None and d.mig_mode_pending is None  # V100 has no MIG
    assert (d.utilization_gpu_pct, d.utilization_memory_pct) == (0, 0)
    assert d.compute_processes == ()
    assert d.lost is False
    assert host.pairs == ()
    assert calls[0] == "nvmlInitWithFlags"
    assert calls[-1] == "nvmlShutdown"


def test_hgx_a100_8x_nvswitch_all_to_all(probe) -> None:
    result, calls = probe(fx.hgx_a100_8x_host())
    host = snapshot(result)
    assert len(host.devices) == 8
    for i, d in enumerate(host.devices):
        assert d.index == i
        assert d.name == "NVIDIA A100-SXM4-80GB"
        assert d.pci_bus_id == fx.A100_BUSES[i]
        assert d.memory_total_bytes == 80 * GIB
        assert d.compute_capability == "8.0"
        assert d.mig_mode_current is False
        assert d.power_limit_w == 400
        assert d.nvlinks is not None and len(d.nvlinks) == 12
        assert {link.link for link in d.nvlinks} == set(range(12))
        assert all(link.peer_type == "switch" and link.peer_index is None for link in d.nvlinks)
        assert {link.peer_pci_bus_id for link in d.nvlinks} == set(fx.NVSWITCH_BUSES)
    assert len(host.pairs) == 28
    assert len(host.nvlink_pairs) == 28
    for pair in host.pairs:
        assert pair.nvlink_via_switch and pair.nvlink_links == 0
        assert pair.p2p_nvlink == "ok" and pair.p2p_read == "ok"
        assert pair.pcie_path == "SYS"
    assert "nvmlDeviceGetP2PStatus" in calls and "nvmlDeviceGetTopologyCommonAncestor" in calls
    assert calls[-1] == "nvmlShutdown"


def test_v100_direct_nvlink_mesh_peer_counts(probe) -> None:
    result, _ = probe(fx.v100_mesh_4x_host())
    host = snapshot(result)
    assert len(host.devices) == 4
    for d in host.devices:
        assert d.nvlinks is not None and len(d.nvlinks) == 6
        peers: dict[int | None, int] = {}
        for link in d.nvlinks:
            peers[link.peer_index] = peers.get(link.peer_index, 0) + 1
        assert peers == {j: 2 for j in range(4) if j != d.index}
        assert all(link.peer_type == "gpu" for link in d.nvlinks)
    assert len(host.pairs) == 6
    for pair in host.pairs:
        assert pair.nvlink_links == 2
        assert not pair.nvlink_via_switch
        assert pair.p2p_nvlink == "ok"
        assert pair.pcie_path == "PXB"


def test_geforce_rtx_3090_has_no_ecc(probe) -> None:
    result, _ = probe(fx.rtx_3090_host())
    d = snapshot(result).devices[0]
    assert d.name == "NVIDIA GeForce RTX 3090"
    assert d.memory_total_bytes == 24 * GIB
    assert d.memory_used_bytes == 1200 * MIB
    assert d.compute_capability == "8.6"
    assert d.ecc_mode_current is None and d.ecc_mode_pending is None
    assert d.ecc_errors_corrected is None and d.ecc_errors_uncorrected is None
    assert d.nvlinks is None
    assert d.mig_mode_current is None
    assert (d.utilization_gpu_pct, d.utilization_memory_pct) == (37, 12)
    assert d.compute_processes is not None and len(d.compute_processes) == 1
    assert d.compute_processes[0].pid == 4242
    assert d.compute_processes[0].used_memory_bytes == 1100 * MIB
    assert d.power_draw_w == pytest.approx(112.345)
    assert d.sm_clock_max_mhz == 2100


def test_a100_with_mig_enabled(probe) -> None:
    result, _ = probe(fx.a100_mig_host())
    d = snapshot(result).devices[0]
    assert d.name == "NVIDIA A100-SXM4-40GB"
    assert d.memory_total_bytes == 40 * GIB
    assert d.mig_mode_current is True and d.mig_mode_pending is True
    assert d.utilization_gpu_pct is None and d.utilization_memory_pct is None
    assert d.compute_processes is None  # NoPermission -> None, not an error
    assert d.nvlinks == ()  # 12 links, none up
    assert d.lost is False


def test_zero_gpus_is_no_device_error_and_still_shuts_down(probe) -> None:
    result, calls = probe(fx.zero_gpu_host())
    assert result["error"] == "NoDeviceError"
    assert result["exit_code"] == ExitCode.NO_DEVICE == 5
    assert "no NVIDIA GPUs" in result["message"]
    assert "nvidia-smi" in result["hint"]
    assert "\n" not in result["message"]
    assert calls[-1] == "nvmlShutdown"


@pytest.mark.parametrize(
    ("mode", "message", "hint"),
    [
        ("driver_not_loaded", "kernel driver is not loaded", "modprobe nvidia"),
        ("uninitialized", "NVML failed to initialise: Uninitialized", "nvidia-smi"),
        ("unknown", "NVML failed to initialise: Unknown Error", "reinstall the NVIDIA driver"),
        ("no_permission", "no permission", "/dev/nvidia"),
        ("lib_rm_version_mismatch", "different versions", "reboot"),
    ],
)
def test_init_failure_is_no_device_error(probe, mode: str, message: str, hint: str) -> None:
    result, calls = probe(fx.init_failure_host(mode))
    assert result["error"] == "NoDeviceError"
    assert result["exit_code"] == 5
    assert message in result["message"]
    assert hint in result["hint"]
    assert "\n" not in result["message"] and "\n" not in result["hint"]
    assert calls == ["nvmlInitWithFlags"]  # nothing else was called


def test_gpu_lost_mid_query_keeps_other_devices(probe) -> None:
    result, calls = probe(fx.lost_gpu_host("ecc_mode"))
    host = snapshot(result)
    assert len(host.devices) == 2
    good, lost = host.devices
    assert good.lost is False
    assert good.name == "NVIDIA A100-SXM4-80GB"
    assert good.ecc_mode_current is True
    assert good.utilization_gpu_pct == 0
    assert lost.lost is True
    assert lost.index == 1
    # read before the GPU fell off the bus
    assert lost.name == "NVIDIA A100-SXM4-80GB"
    assert lost.pci_bus_id == "00000000:65:00.0"
    assert lost.memory_total_bytes == 80 * GIB
    assert lost.compute_capability == "8.0"
    # from the lost call on: nothing
    assert lost.ecc_mode_current is None
    assert lost.power_draw_w is None
    assert lost.nvlinks is None
    assert lost.utilization_gpu_pct is None
    assert host.pairs == ()  # no topology with a lost GPU
    assert calls[-1] == "nvmlShutdown"


def test_gpu_lost_at_handle(probe) -> None:
    host = snapshot(probe(fx.lost_gpu_host("handle"))[0])
    lost = host.devices[1]
    assert lost.lost is True and lost.name is None and lost.memory_total_bytes is None
    assert host.devices[0].name == "NVIDIA A100-SXM4-80GB"


def test_field_errors_map_to_none_and_memory_falls_back_to_v1(probe) -> None:
    device = fx.v100_sxm2_16gb(
        not_supported=["mig_mode", "memory_info_v2", "temperature", "max_clock"],
        no_permission=["power_usage", "ecc_errors"],
        **{"error.uuid": "unknown", "error.power_limit": "not_supported"},
    )
    result, calls = probe({**fx.HOST_DEFAULTS, "devices": [device]})
    d = snapshot(result).devices[0]
    assert d.uuid is None
    assert d.temperature_c is None
    assert d.sm_clock_max_mhz is None and d.mem_clock_max_mhz is None
    assert d.sm_clock_mhz == 135
    assert d.power_draw_w is None
    assert d.power_limit_w == 300  # enforced limit unsupported: management limit used
    assert d.ecc_mode_current is True and d.ecc_errors_corrected is None
    # v1 memory info: "used" includes the 309 MiB reservation
    assert d.memory_total_bytes == 16160 * MIB
    assert d.memory_used_bytes == 309 * MIB
    assert "nvmlDeviceGetMemoryInfo" in calls and "nvmlDeviceGetPowerManagementLimit" in calls
    assert d.lost is False


def test_no_library(tmp_path: Path) -> None:
    if fx.system_has_real_nvml():
        pytest.skip("a real libnvidia-ml.so.1 is installed system-wide, so it cannot be hidden")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = fx.read_host_json(empty, tmp_path / "unused.cfg")
    assert result["error"] == "NoDeviceError"
    assert result["exit_code"] == 5
    assert "libnvidia-ml.so.1 not found" in result["message"]
    assert "install the NVIDIA driver" in result["hint"]


def test_imports_stay_light() -> None:
    code = (
        "import sys\n"
        "import gpusizer.hardware.probe, gpusizer.hardware.nvml, gpusizer.render.probe\n"
        "import gpusizer.hardware.catalog as c\n"
        "assert 'pynvml' not in sys.modules, 'pynvml imported at import time'\n"
        "assert c._load_cached.cache_info().currsize == 0, 'catalog loaded at import time'\n"
        "print('ok')\n"
    )
    proc = fx.run_in_subprocess(code, None, None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_only_nvml_module_imports_pynvml() -> None:
    pkg = Path(__file__).resolve().parent.parent / "gpusizer"
    offenders = [p.name for p in pkg.glob("*.py") if p.name != "nvml.py" and "pynvml" in p.read_text(encoding="utf-8")]
    assert offenders == []


# --------------------------------------------------------------------------
# catalog matching (pure)

SOURCES = ({"title": "NVIDIA datasheet", "url": "https://example.com/datasheet.pdf"},)


def make_gpu(**fields: Any) -> Gpu:
    base: dict[str, Any] = {
        "segment": "datacenter",
        "launch_year": 2020,
        "memory_type": "HBM2e",
        "bandwidth_gb_s": 2039,
        "fp32_tflops": 19.5,
        "ecc": True,
        "gpudirect_rdma": True,
        "form_factor": "SXM4",
        "sources": SOURCES,
    }
    base.update(fields)
    return Gpu.model_validate(base)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog(
        gpus=(
            make_gpu(
                id="v100-sxm2-16gb", name="Tesla V100-SXM2-16GB", architecture="volta",
                compute_capability="7.0", launch_year=2017, memory_gib=16, memory_type="HBM2",
                bandwidth_gb_s=900, fp32_tflops=15.7, form_factor="SXM2",
            ),
            make_gpu(
                id="a100-sxm4-80gb", name="NVIDIA A100-SXM4-80GB", aliases=("A100 80GB SXM",),
                family="a100", family_default=True, architecture="ampere", compute_capability="8.0",
                memory_gib=80,
            ),
            make_gpu(
                id="a100-sxm4-40gb", name="NVIDIA A100-SXM4-40GB", family="a100", architecture="ampere",
                compute_capability="8.0", memory_gib=40, bandwidth_gb_s=1555,
            ),
        )
    )  # fmt: skip


def dev(index: int = 0, **fields: Any) -> DeviceSnapshot:
    return DeviceSnapshot(index=index, **fields)


def test_match_catalog_by_nvml_name(catalog: Catalog) -> None:
    host = HostSnapshot(
        devices=(
            dev(0, name="Tesla V100-SXM2-16GB", memory_total_bytes=16160 * MIB, compute_capability="7.0"),
            dev(1, name="NVIDIA A100-SXM4-80GB", memory_total_bytes=80 * GIB, compute_capability="8.0"),
        )
    )
    report = match_catalog(host, catalog)
    assert [r.match.gpu_id for r in report.devices if r.match] == ["v100-sxm2-16gb", "a100-sxm4-80gb"]
    assert all(r.hint is None and r.warnings == () for r in report.devices)
    assert report.devices[0].match is not None and report.devices[0].match.gpu.memory_gib == 16
    assert report.unmatched == ()


def test_quadro_rtx_4000_is_not_matched_to_the_ada_card() -> None:
    """NVML calls the Turing card "Quadro RTX 4000"; the bundled catalog also holds the RTX 4000
    Ada (20 GB). The probe must report the 8 GB Turing card, with no memory warning."""
    from gpusizer.hardware.catalog import load_catalog

    host = HostSnapshot(devices=(dev(0, name="Quadro RTX 4000", memory_total_bytes=7982 * MIB,
                                     compute_capability="7.5"),))
    (r,) = match_catalog(host, load_catalog()).devices
    assert r.match is not None and r.match.gpu_id == "quadro-rtx-4000"
    assert r.match.gpu.memory_gib == 8 and r.match.gpu.architecture == "turing"
    assert r.warnings == ()


def test_unknown_gpu_is_unmatched_with_emit_catalog_hint(catalog: Catalog) -> None:
    report = match_catalog(HostSnapshot(devices=(dev(0, name="NVIDIA GeForce RTX 3090"),)), catalog)
    (r,) = report.devices
    assert r.match is None
    assert r.hint is not None
    assert "'NVIDIA GeForce RTX 3090'" in r.hint  # the resolver's own message comes first
    assert "'gpusizer probe' emit a starter catalog entry" in r.hint
    assert EMIT_CATALOG_HINT in r.hint
    assert report.unmatched == (r,)


def test_match_warnings_memory_variant_mig_and_lost(catalog: Catalog) -> None:
    host = HostSnapshot(
        devices=(
            # claims to be the 40 GB part, but has 80 GiB
            dev(0, name="NVIDIA A100-SXM4-40GB", memory_total_bytes=80 * GIB, mig_mode_current=True),
            dev(1, name=None, lost=True),
            dev(2, name="Tesla V100-SXM2-16GB", compute_capability="7.5"),
        )
    )
    a, b, c = match_catalog(host, catalog).devices
    # match_device tells memory variants apart by the memory NVML reports (resolve_device)
    assert a.match is not None and a.match.gpu_id == "a100-sxm4-80gb"
    assert a.match.note is not None and "memory variants" in a.match.note
    assert any("MIG enabled" in w for w in a.warnings)
    assert b.match is None and b.hint is not None and "nvidia-smi" in b.hint
    assert any("lost" in w for w in b.warnings)
    assert c.match is not None and any("compute capability 7.5" in w for w in c.warnings)


def test_family_name_match_keeps_the_note(catalog: Catalog) -> None:
    (r,) = match_catalog(HostSnapshot(devices=(dev(0, name="A100"),)), catalog).devices
    assert r.match is not None and r.match.gpu_id == "a100-sxm4-80gb"
    assert r.match.matched_by == "family" and r.match.note


# --------------------------------------------------------------------------
# starter entries


def test_slug_and_architecture() -> None:
    assert slug("Tesla V100-SXM2-16GB") == "v100-sxm2-16gb"
    assert slug("NVIDIA GeForce RTX 3090") == "rtx-3090"
    assert slug("NVIDIA A100-SXM4-80GB") == "a100-sxm4-80gb"
    assert slug("NVIDIA RTX A6000") == "rtx-a6000"
    assert slug("NVIDIA") == "nvidia"
    # the catalog's vendor words: "Quadro" stays, so the Turing card keeps its catalog id
    assert slug("Quadro RTX 4000") == "quadro-rtx-4000"
    assert architecture_for("7.0") == "volta"
    assert architecture_for("7.5") == "turing"
    assert architecture_for("8.6") == "ampere"
    assert architecture_for("8.9") == "ada"
    assert architecture_for("9.0") == "hopper"
    assert architecture_for("12.0") == "blackwell"
    assert architecture_for(None) is None
    assert cuda_version_string(12040) == "12.4"
    assert cuda_version_string(11080) == "11.8"
    assert cuda_version_string(None) is None
    assert normalise_bus_id("00000000:0F:00.0") == normalise_bus_id("0000:0f:00.0") == "0000:0f:00.0"


def test_starter_entry_from_rtx_3090() -> None:
    d = dev(
        0, name="NVIDIA GeForce RTX 3090", memory_total_bytes=24576 * MIB, compute_capability="8.6",
        sm_clock_max_mhz=2100, power_limit_w=350.0,
    )  # fmt: skip
    entry = starter_entry(d)
    assert entry["id"] == "rtx-3090"
    assert entry["name"] == "NVIDIA GeForce RTX 3090"
    assert entry["aliases"] == ["NVIDIA GeForce RTX 3090"]
    assert entry["memory_gib"] == 24.0
    assert entry["compute_capability"] == "8.6"
    assert entry["architecture"] == "ampere"
    assert entry["ecc"] == "none"  # NVML: ECC not supported
    assert entry["fp32_tflops"] is None and entry["sources"] == []
    assert entry["notes"].startswith("fill in from the datasheet")
    assert "2100 MHz" in entry["notes"]
    # every key is a catalog field, so filling in the blanks makes it valid
    assert set(entry) <= set(Gpu.model_fields)
    with pytest.raises(ValidationError):
        Gpu.model_validate(entry)
    filled = {
        **entry,
        "segment": "consumer", "launch_year": 2020, "memory_type": "GDDR6X", "bandwidth_gb_s": 936,
        "fp32_tflops": 35.6, "gpudirect_rdma": False, "form_factor": "PCIe", "sources": list(SOURCES),
    }  # fmt: skip
    assert Gpu.model_validate(filled).id == "rtx-3090"


def test_starter_entry_v100_memory_and_ecc() -> None:
    entry = starter_entry(dev(0, name="Tesla V100-SXM2-16GB", memory_total_bytes=16160 * MIB,
                              compute_capability="7.0", ecc_mode_current=True))  # fmt: skip
    assert entry["id"] == "v100-sxm2-16gb"
    assert entry["memory_gib"] == pytest.approx(15.78)
    assert entry["ecc"] == "optional"
    assert entry["architecture"] == "volta"


def test_starter_prefers_a_healthy_device_over_a_lost_one() -> None:
    lost = dev(0, name="NVIDIA A100-SXM4-80GB", memory_total_bytes=80 * GIB, lost=True)
    good = dev(1, name="NVIDIA A100-SXM4-80GB", memory_total_bytes=80 * GIB, compute_capability="8.0",
               ecc_mode_current=True)  # fmt: skip
    assert starter_entry(lost)["ecc"] is None
    (entry,) = yaml.safe_load(starter_catalog_yaml([lost, good]))["gpus"]
    assert entry["ecc"] == "optional" and entry["compute_capability"] == "8.0"


def test_starter_catalog_yaml_dedupes_and_warns() -> None:
    devices = [dev(i, name="NVIDIA A100-SXM4-80GB", memory_total_bytes=80 * GIB, compute_capability="8.0",
                   ecc_mode_current=True) for i in range(8)]  # fmt: skip
    devices.append(dev(8, name="NVIDIA GeForce RTX 3090", memory_total_bytes=24 * GIB, compute_capability="8.6"))
    text = starter_catalog_yaml(devices)
    assert "will NOT validate" in text
    assert all(line.startswith("#") for line in text.splitlines()[:3])
    doc = yaml.safe_load(text)
    entries = _entries_from_document(doc, "starter.yaml")
    assert [e["id"] for e in entries] == ["a100-sxm4-80gb", "rtx-3090"]
    assert entries[0]["memory_gib"] == 80.0 and entries[0]["fp32_tflops"] is None


# --------------------------------------------------------------------------
# rendering


def _render(renderables: list[Any]) -> str:
    console = Console(record=True, width=240, color_system=None)
    for item in renderables:
        console.print(item)
    return console.export_text()


def test_render_and_json_for_geforce(probe, catalog: Catalog) -> None:
    host = snapshot(probe(fx.rtx_3090_host())[0])
    report = match_catalog(host, catalog)
    text = _render(probe_renderables(report))
    assert "NVIDIA GeForce RTX 3090" in text
    assert "unmatched" in text
    assert "emit a starter catalog entry" in text
    ecc_line = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("ECC "))
    assert "n/a" in ecc_line
    assert "24.00 GiB" in text
    assert "12.4" in text
    data = probe_json(report)
    json.dumps(data)  # serialisable
    (device,) = data["devices"]
    assert device["ecc_mode_current"] is None
    assert device["nvlinks"] is None
    assert device["catalog"] is None
    assert "emit a starter catalog entry" in device["hint"]
    assert device["memory_total_bytes"] == 24 * GIB
    assert data["host"]["device_count"] == 1
    assert data["topology"]["pairs"] == []


def test_render_and_json_for_hgx(probe, catalog: Catalog) -> None:
    host = snapshot(probe(fx.hgx_a100_8x_host())[0])
    report = match_catalog(host, catalog)
    assert all(r.match is not None and r.match.gpu_id == "a100-sxm4-80gb" for r in report.devices)
    text = _render(probe_renderables(report))
    assert "Topology" in text
    assert text.count("NVSwitch") >= 56  # every off-diagonal cell
    assert "12 up (12 to NVSwitch)" in text
    assert "GPU 7" in text
    data = probe_json(report)
    assert len(data["devices"]) == 8
    catalog_part = data["devices"][0]["catalog"]
    assert set(catalog_part) == {"gpu_id", "gpu_name", "matched_by", "note"}  # the Gpu itself is not dumped
    assert catalog_part["gpu_id"] == "a100-sxm4-80gb"
    assert catalog_part["gpu_name"] == "NVIDIA A100-SXM4-80GB"
    assert len(data["topology"]["pairs"]) == 28
    assert all(p["nvlink"] for p in data["topology"]["pairs"])


def test_render_lost_and_direct_links() -> None:
    links = tuple(NvLink(link=i, peer_pci_bus_id="0000:08:00.0", peer_index=1, peer_type="gpu") for i in range(4))
    devices = (
        dev(0, name="Tesla V100-SXM2-16GB", pci_bus_id="0000:07:00.0", nvlinks=links),
        dev(1, name="Tesla V100-SXM2-16GB", pci_bus_id="0000:08:00.0", nvlinks=()),
        dev(2, name="Tesla V100-SXM2-16GB", lost=True),
    )
    host = HostSnapshot(devices=devices, pairs=build_pairs(devices))
    assert [(p.a, p.b, p.nvlink_links) for p in host.pairs] == [(0, 1, 4)]
    text = _render(probe_renderables(match_catalog(host, Catalog(gpus=()))))
    assert "NV4" in text
    assert "LOST" in text
    assert "(1 lost)" in text


def test_fake_machines_match_the_bundled_catalog() -> None:
    """The NVML names the fake reports resolve in data/gpus.yaml, without memory warnings."""
    from gpusizer.errors import DataFileError
    from gpusizer.hardware.catalog import load_catalog

    try:
        bundled = load_catalog()
    except DataFileError as exc:
        pytest.skip(f"no bundled catalog yet: {exc.message}")
    expected = {
        "Tesla V100-SXM2-16GB": "v100-sxm2-16gb",
        "Tesla V100-SXM2-32GB": "v100-sxm2-32gb",
        "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb",
        "NVIDIA A100-SXM4-40GB": "a100-sxm4-40gb",
        "NVIDIA GeForce RTX 3090": "rtx-3090",
    }
    ids = {g.id for g in bundled.gpus}
    if not set(expected.values()) <= ids:
        pytest.skip(f"bundled catalog lacks {sorted(set(expected.values()) - ids)}")
    machines = [fx.single_v100_host(), fx.v100_mesh_4x_host(), fx.hgx_a100_8x_host(), fx.a100_mig_host()]
    machines.append(fx.rtx_3090_host())
    devices = []
    for machine in machines:
        for raw in machine["devices"]:
            devices.append(
                dev(
                    len(devices),
                    name=raw["name"],
                    memory_total_bytes=raw["memory_total"],
                    compute_capability=raw["compute_capability"],
                )
            )
    report = match_catalog(HostSnapshot(devices=tuple(devices)), bundled)
    for r in report.devices:
        assert r.match is not None, r.hint
        assert r.match.gpu_id == expected[r.device.name or ""]
        assert r.warnings == (), r.warnings


# ---------------------------------------------------------------------------
# the installed command against the fake library: the --json schema and --local


def _run_installed(fake_lib: Path | None, config: Path | None, *args: str):
    import subprocess

    from conftest import gpusizer_command

    env = fx.fake_env(fake_lib, config)
    return subprocess.run([*gpusizer_command(), *args], capture_output=True, text=True, env=env, timeout=120)


def test_probe_json_schema_through_the_installed_command(fake_lib: Path, tmp_path: Path) -> None:
    config = fx.write_config(tmp_path / "hgx.cfg", fx.hgx_a100_8x_host())
    result = _run_installed(fake_lib, config, "probe", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1 and doc["command"] == "probe"
    assert set(doc) == {"schema_version", "command", "input", "results", "notes"}
    res = doc["results"]
    assert set(res) >= {"host", "devices", "topology"}
    assert res["host"]["driver_version"] == "550.54.15"
    assert len(res["devices"]) == 8
    dev = res["devices"][0]
    for key in ("index", "name", "uuid", "pci_bus_id", "memory_total_bytes", "memory_used_bytes",
                "memory_free_bytes", "compute_capability", "ecc_mode_current", "power_draw_w", "temperature_c",
                "pcie_gen", "mig_mode_current", "utilization_gpu_pct", "compute_processes"):
        assert key in dev, key
    assert dev["name"] == "NVIDIA A100-SXM4-80GB"
    assert dev["catalog"]["gpu_id"] == "a100-sxm4-80gb"
    assert len(res["topology"]["pairs"]) == 28  # 8 GPUs, every pair over NVSwitch


def test_probe_json_is_valid_when_fields_are_not_supported(fake_lib: Path, tmp_path: Path) -> None:
    config = fx.write_config(tmp_path / "rtx.cfg", fx.rtx_3090_host())
    doc = json.loads(_run_installed(fake_lib, config, "probe", "--json").stdout)
    dev = doc["results"]["devices"][0]
    assert dev["ecc_mode_current"] is None  # GeForce: NVML says NotSupported -> null, not a sentinel
    assert dev["catalog"]["gpu_id"] == "rtx-3090"


def test_probe_without_library_exits_5_with_a_next_step(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = _run_installed(empty, None, "probe")
    assert result.returncode == int(ExitCode.NO_DEVICE)
    assert result.stderr.startswith("Error: ") and "Traceback" not in result.stderr
    assert "nvidia-smi" in result.stderr or "driver" in result.stderr


def test_fit_model_local_uses_free_memory(fake_lib: Path, tmp_path: Path) -> None:
    config = fx.write_config(tmp_path / "v100.cfg", fx.single_v100_host())
    result = _run_installed(fake_lib, config, "fit-model", "--model", "resnet50", "--batch", "32", "--local", "--json")
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout)["results"]["gpus"][0]
    assert row["capacity_source"] == "probe-free"
    assert row["gpu_id"] == "v100-sxm2-16gb"
    assert row["memory_bytes"] < 16 * GIB  # what NVML reports free, not the datasheet size


def test_starter_catalog_yaml_escapes_control_and_bidi_characters() -> None:
    """A hostile device name round-trips through the YAML but never reaches the
    terminal as a raw escape sequence or a bidirectional override."""
    name = "NVIDIA \u202eevil\x1b[31m GPU"
    text = starter_catalog_yaml([dev(0, name=name, memory_total_bytes=24 * GIB, compute_capability="8.9")])
    assert "\u202e" not in text and "\x1b" not in text
    (entry,) = yaml.safe_load(text)["gpus"]
    assert entry["name"] == name
