"""Helpers for tests that run gpusizer against the fake NVML library.

* :func:`build_library` compiles ``fake_nvml.c`` into ``libnvidia-ml.so.1``.
* :func:`write_config` turns a plain dict into the fake's config file.
* The ``*_host()`` functions describe the machines the probe tests use.
* :func:`run_in_subprocess` runs Python code with the fake library in place
  (pynvml loads the library once per process, so each scenario needs its own).

Nothing here is pytest-specific, so other test modules can reuse it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_nvml.c"
REPO_ROOT = HERE.parent.parent
LIBRARY_NAME = "libnvidia-ml.so.1"

MIB = 1 << 20


class BuildError(RuntimeError):
    pass


def compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")


def build_library(dest: Path) -> Path:
    """Compile the fake into ``dest/libnvidia-ml.so.1``; return ``dest``."""
    cc = compiler()
    if cc is None:
        raise BuildError("no C compiler (gcc or cc) on PATH")
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / LIBRARY_NAME
    cmd = [cc, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(out), str(SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return dest


# --------------------------------------------------------------------------
# config files


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value)


def write_config(path: Path, host: Mapping[str, Any]) -> Path:
    """Write the fake's config. ``host`` holds host keys plus ``devices``: a list
    of dicts of device keys. A device's ``nvlinks`` is a list of
    ``(link, remote_bus_id[, kind[, "down"]])`` tuples, written one per line."""
    lines = ["# written by tests/fake_nvml/fixture.py"]
    for key, value in host.items():
        if key != "devices":
            lines.append(f"{key} = {_value(value)}")
    for device in host.get("devices", ()):
        lines.append("")
        lines.append("[device]")
        for key, value in device.items():
            if key == "nvlinks":
                for link in value:
                    lines.append("nvlink = " + " ".join(str(part) for part in link))
            elif key == "processes":
                lines.append("processes = " + " ".join(f"{pid}:{used}" for pid, used in value))
            else:
                lines.append(f"{key} = {_value(value)}")
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------
# machines

HOST_DEFAULTS = {
    "driver_version": "550.54.15",
    "cuda_driver_version": 12040,
    "nvml_version": "12.550.54.15",
    "topology_level": 40,
}


def v100_sxm2_16gb(index: int = 0, bus: str = "00000000:00:1E.0", **overrides: Any) -> dict[str, Any]:
    """As an AWS p3.2xlarge shows it: six NVLinks, none up (no peer)."""
    device = {
        "name": "Tesla V100-SXM2-16GB",
        "uuid": f"GPU-5a8e1b2c-0000-4000-8000-{index:012d}",
        "pci_bus_id": bus,
        "pci_device_id": "0x1DB110DE",
        "memory_total": 16160 * MIB,
        "memory_used": 0,
        "memory_free": 16160 * MIB - 309 * MIB,
        "memory_reserved": 309 * MIB,
        "compute_capability": "7.0",
        "ecc_current": 1,
        "ecc_pending": 1,
        "ecc_corrected": 0,
        "ecc_uncorrected": 0,
        "power_usage_mw": 24_125,
        "power_limit_mw": 300_000,
        "temperature": 38,
        "graphics_clock": 135,
        "sm_clock": 135,
        "mem_clock": 877,
        "graphics_clock_max": 1530,
        "sm_clock_max": 1530,
        "mem_clock_max": 877,
        "pcie_gen": 1,
        "pcie_gen_max": 3,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "nvlink_count": 6,
        "utilization_gpu": 0,
        "utilization_memory": 0,
        "not_supported": ["mig_mode"],
    }
    device.update(overrides)
    return device


def single_v100_host() -> dict[str, Any]:
    return {**HOST_DEFAULTS, "devices": [v100_sxm2_16gb()]}


A100_BUSES = ["00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0",
              "00000000:87:00.0", "00000000:90:00.0", "00000000:B7:00.0", "00000000:BD:00.0"]  # fmt: skip
NVSWITCH_BUSES = [f"00000000:{bus:02X}:00.0" for bus in (0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9)]


def a100_sxm4_80gb(index: int, bus: str, **overrides: Any) -> dict[str, Any]:
    device = {
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": f"GPU-a100a100-0000-4000-8000-{index:012d}",
        "pci_bus_id": bus,
        "pci_device_id": "0x20B210DE",
        "memory_total": 81920 * MIB,
        "memory_used": 4 * MIB,
        "memory_free": 81920 * MIB - 4 * MIB - 555 * MIB,
        "memory_reserved": 555 * MIB,
        "compute_capability": "8.0",
        "ecc_current": 1,
        "ecc_pending": 1,
        "ecc_corrected": 0,
        "ecc_uncorrected": 0,
        "power_usage_mw": 61_000 + index * 1000,
        "power_limit_mw": 400_000,
        "temperature": 30 + index,
        "graphics_clock": 210,
        "sm_clock": 210,
        "mem_clock": 1593,
        "graphics_clock_max": 1410,
        "sm_clock_max": 1410,
        "mem_clock_max": 1593,
        "pcie_gen": 4,
        "pcie_gen_max": 4,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "mig_current": 0,
        "mig_pending": 0,
        "utilization_gpu": 0,
        "utilization_memory": 0,
    }
    device.update(overrides)
    return device


def hgx_a100_8x_host() -> dict[str, Any]:
    """DGX/HGX A100: 8 GPUs, each with 12 NVLinks, two to each of 6 NVSwitches,
    so every GPU reaches every other over NVLink (all-to-all)."""
    devices = []
    for i, bus in enumerate(A100_BUSES):
        links = [(link, NVSWITCH_BUSES[link // 2], "switch") for link in range(12)]
        devices.append(a100_sxm4_80gb(i, bus, nvlink_count=12, nvlinks=links))
    return {**HOST_DEFAULTS, "topology_level": 50, "devices": devices}


V100_MESH_BUSES = ["00000000:07:00.0", "00000000:08:00.0", "00000000:0E:00.0", "00000000:0F:00.0"]


def v100_mesh_4x_host() -> dict[str, Any]:
    """Four V100-SXM2-32GB wired directly, two NVLinks between every pair (6 each)."""
    devices = []
    for i, bus in enumerate(V100_MESH_BUSES):
        peers = [j for j in range(4) if j != i]
        links = []
        for n, peer in enumerate(peers):
            links.append((2 * n, V100_MESH_BUSES[peer], "gpu"))
            links.append((2 * n + 1, V100_MESH_BUSES[peer], "gpu"))
        devices.append(
            v100_sxm2_16gb(
                i,
                bus,
                name="Tesla V100-SXM2-32GB",
                memory_total=32510 * MIB,
                memory_free=32000 * MIB,
                nvlinks=links,
            )
        )
    return {**HOST_DEFAULTS, "topology_level": 20, "devices": devices}


def rtx_3090_host() -> dict[str, Any]:
    """A GeForce card: ECC and NVLink are not supported, nor MIG."""
    device = {
        "name": "NVIDIA GeForce RTX 3090",
        "uuid": "GPU-30903090-0000-4000-8000-000000000000",
        "pci_bus_id": "00000000:01:00.0",
        "pci_device_id": "0x220410DE",
        "memory_total": 24576 * MIB,
        "memory_used": 1200 * MIB,
        "memory_free": 24576 * MIB - 1200 * MIB - 300 * MIB,
        "memory_reserved": 300 * MIB,
        "compute_capability": "8.6",
        "power_usage_mw": 112_345,
        "power_limit_mw": 350_000,
        "temperature": 52,
        "graphics_clock": 1695,
        "sm_clock": 1695,
        "mem_clock": 9751,
        "graphics_clock_max": 2100,
        "sm_clock_max": 2100,
        "mem_clock_max": 9751,
        "pcie_gen": 4,
        "pcie_gen_max": 4,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "utilization_gpu": 37,
        "utilization_memory": 12,
        "processes": [(4242, 1100 * MIB)],
        "not_supported": ["ecc_mode", "ecc_errors", "nvlink_state", "nvlink_remote", "mig_mode"],
    }
    return {**HOST_DEFAULTS, "devices": [device]}


def a100_mig_host() -> dict[str, Any]:
    """An A100 40GB with MIG on: utilization is not available per GPU then."""
    device = a100_sxm4_80gb(
        0,
        "00000000:81:00.0",
        name="NVIDIA A100-SXM4-40GB",
        memory_total=40960 * MIB,
        memory_used=0,
        memory_free=40960 * MIB - 600 * MIB,
        memory_reserved=600 * MIB,
        mig_current=1,
        mig_pending=1,
        nvlink_count=12,
        not_supported=["utilization"],
        no_permission=["processes"],
    )
    return {**HOST_DEFAULTS, "devices": [device]}


def zero_gpu_host() -> dict[str, Any]:
    return {**HOST_DEFAULTS, "devices": []}


def init_failure_host(mode: str = "driver_not_loaded") -> dict[str, Any]:
    return {**HOST_DEFAULTS, "init": mode, "devices": [v100_sxm2_16gb()]}


def lost_gpu_host(lost_at: str = "ecc_mode") -> dict[str, Any]:
    """Two A100s; device 1 falls off the bus when ``lost_at`` is queried."""
    devices = [
        a100_sxm4_80gb(0, "00000000:17:00.0", nvlink_count=12),
        a100_sxm4_80gb(1, "00000000:65:00.0", nvlink_count=12, gpu_lost=lost_at),
    ]
    return {**HOST_DEFAULTS, "devices": devices}


# --------------------------------------------------------------------------
# running code against the fake

READ_HOST_SCRIPT = """
import json
from gpusizer.errors import NoDeviceError
from gpusizer.hardware.nvml import read_host
try:
    host = read_host()
except NoDeviceError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": exc.message, "hint": exc.hint,
                      "exit_code": int(exc.exit_code)}))
else:
    print(json.dumps({"host": host.model_dump(mode="json")}))
"""


def fake_env(lib_dir: Path | None, config: Path | None, log: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["LD_LIBRARY_PATH"] = str(lib_dir) if lib_dir is not None else ""
    env.pop("FAKE_NVML_CONFIG", None)
    env.pop("FAKE_NVML_LOG", None)
    if config is not None:
        env["FAKE_NVML_CONFIG"] = str(config)
    if log is not None:
        env["FAKE_NVML_LOG"] = str(log)
    return env


def run_in_subprocess(
    code: str, lib_dir: Path | None, config: Path | None, log: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=fake_env(lib_dir, config, log),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO_ROOT),
    )


def read_host_json(lib_dir: Path | None, config: Path | None, log: Path | None = None) -> dict[str, Any]:
    """Run gpusizer.hardware.nvml.read_host() in a fresh process; return its JSON result."""
    proc = run_in_subprocess(READ_HOST_SCRIPT, lib_dir, config, log)
    if proc.returncode != 0:
        raise AssertionError(f"read_host subprocess failed ({proc.returncode}):\n{proc.stderr}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(f"no JSON from read_host subprocess:\nstdout={proc.stdout}\nstderr={proc.stderr}")
    return json.loads(lines[-1])


def system_has_real_nvml() -> bool:
    """True when libnvidia-ml.so.1 loads without LD_LIBRARY_PATH (a real driver)."""
    code = "import ctypes\ntry:\n    ctypes.CDLL('libnvidia-ml.so.1')\nexcept OSError:\n    print('missing')\nelse:\n    print('present')"
    proc = run_in_subprocess(code, None, None)
    return "present" in proc.stdout


def log_calls(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []
