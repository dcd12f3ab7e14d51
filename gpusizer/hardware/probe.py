"""What `gpusizer probe` knows about this machine's GPUs, as plain data.

This module is pure: it never touches NVML (that is :mod:`gpusizer.hardware.nvml`'s
job) and never loads the catalog (callers pass one in). It holds

* the snapshot models NVML readings are poured into (:class:`DeviceSnapshot`,
  :class:`HostSnapshot`), where ``None`` always means "NVML could not tell"
  (not supported, no permission, or the GPU was lost before we got there);
* :func:`match_catalog`, which pairs each device with a catalog entry;
* :func:`starter_entry` / :func:`starter_catalog_yaml`, which turn a device
  into a starting point for a user catalog file.

Units are in the field names: bytes, watts, degrees Celsius, MHz, percent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import VENDOR_WORDS, Gpu
from gpusizer.units import GIB

if TYPE_CHECKING:
    from gpusizer.hardware.catalog import Catalog

#: What to do about a GPU the catalog does not know, in plain words (the CLI names the option).
EMIT_CATALOG_HINT = "have 'gpusizer probe' emit a starter catalog entry for it and fill that in from the datasheet"

_FROZEN = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class NvLink(BaseModel):
    """One NVLink that is up, and what is on the far end."""

    model_config = _FROZEN

    link: int = Field(ge=0)
    peer_pci_bus_id: str | None = None
    #: Index of the peer GPU on this host, or None (an NVSwitch, or unknown).
    peer_index: int | None = None
    peer_type: Literal["gpu", "switch", "npu", "unknown"] | None = None


class ComputeProcess(BaseModel):
    model_config = _FROZEN

    pid: int
    used_memory_bytes: int | None = None


class DeviceSnapshot(BaseModel):
    """One GPU as NVML reported it. ``None``: NVML could not tell."""

    model_config = _FROZEN

    index: int = Field(ge=0)
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None

    memory_total_bytes: int | None = Field(default=None, ge=0)
    memory_used_bytes: int | None = Field(default=None, ge=0)
    memory_free_bytes: int | None = Field(default=None, ge=0)

    compute_capability: str | None = Field(default=None, pattern=r"^[0-9]+\.[0-9]+$")

    ecc_mode_current: bool | None = None
    ecc_mode_pending: bool | None = None
    #: Volatile counts (since the last driver load).
    ecc_errors_corrected: int | None = Field(default=None, ge=0)
    ecc_errors_uncorrected: int | None = Field(default=None, ge=0)

    power_draw_w: float | None = Field(default=None, ge=0)
    power_limit_w: float | None = Field(default=None, ge=0)
    temperature_c: int | None = None

    sm_clock_mhz: int | None = Field(default=None, ge=0)
    sm_clock_max_mhz: int | None = Field(default=None, ge=0)
    mem_clock_mhz: int | None = Field(default=None, ge=0)
    mem_clock_max_mhz: int | None = Field(default=None, ge=0)

    pcie_gen: int | None = Field(default=None, ge=0)
    pcie_gen_max: int | None = Field(default=None, ge=0)
    pcie_width: int | None = Field(default=None, ge=0)
    pcie_width_max: int | None = Field(default=None, ge=0)

    #: Links that are up. ``None``: the GPU has no NVLink (or NVML could not
    #: tell); an empty tuple: it has NVLink but no link is up.
    nvlinks: tuple[NvLink, ...] | None = None

    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None

    utilization_gpu_pct: int | None = Field(default=None, ge=0, le=100)
    utilization_memory_pct: int | None = Field(default=None, ge=0, le=100)
    #: Compute processes running now; ``None`` when NVML would not say.
    compute_processes: tuple[ComputeProcess, ...] | None = None

    #: NVML said the GPU fell off the bus while we were reading it; the fields
    #: read before that are kept, the rest are ``None``.
    lost: bool = False

    @property
    def label(self) -> str:
        return f"GPU {self.index}: {self.name or 'unknown'}"

    @property
    def nvlink_count(self) -> int:
        return len(self.nvlinks or ())


class GpuPair(BaseModel):
    """How two GPUs on the host are connected (``a < b``)."""

    model_config = _FROZEN

    a: int
    b: int
    #: Links from ``a`` whose far end is ``b`` (direct GPU-to-GPU NVLink).
    nvlink_links: int = Field(default=0, ge=0)
    #: Both GPUs have links up to NVSwitches (as on HGX/DGX boards).
    nvlink_via_switch: bool = False
    #: nvmlDeviceGetP2PStatus for NVLink and for reads: "ok", "not supported", ...
    p2p_nvlink: str | None = None
    p2p_read: str | None = None
    #: Closest common PCIe ancestor, in nvidia-smi's words (PIX, PXB, PHB, NODE, SYS).
    pcie_path: str | None = None

    @property
    def nvlink(self) -> bool:
        return self.nvlink_links > 0 or self.p2p_nvlink == "ok" or self.nvlink_via_switch


class HostSnapshot(BaseModel):
    model_config = _FROZEN

    hostname: str | None = None
    driver_version: str | None = None
    #: The newest CUDA version the driver supports, e.g. "12.4".
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    devices: tuple[DeviceSnapshot, ...] = ()
    #: One entry per pair of GPUs that were both read without being lost.
    pairs: tuple[GpuPair, ...] = ()

    @property
    def nvlink_pairs(self) -> tuple[GpuPair, ...]:
        return tuple(p for p in self.pairs if p.nvlink)


# --------------------------------------------------------------------------
# small conversions shared with gpusizer.hardware.nvml (kept here so they are testable
# without NVML)

_TOPOLOGY_LEVELS = {0: "internal", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

#: What nvidia-smi's abbreviations mean, for the legend under the table.
PCIE_PATH_MEANING = {
    "internal": "same board",
    "PIX": "one PCIe switch",
    "PXB": "several PCIe switches",
    "PHB": "a PCIe host bridge",
    "NODE": "host bridges within one NUMA node",
    "SYS": "the CPU interconnect between NUMA nodes",
}

_P2P_STATUS = {
    0: "ok",
    1: "chipset not supported",
    2: "GPU not supported",
    3: "IOH topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}


def topology_label(level: int | None) -> str | None:
    if level is None:
        return None
    return _TOPOLOGY_LEVELS.get(level, f"level {level}")


def p2p_status_label(code: int | None) -> str | None:
    if code is None:
        return None
    return _P2P_STATUS.get(code, f"status {code}")


def cuda_version_string(raw: int | None) -> str | None:
    """NVML's 12040 -> "12.4" (major*1000 + minor*10)."""
    if raw is None or raw <= 0:
        return None
    return f"{raw // 1000}.{(raw % 1000) // 10}"


def normalise_bus_id(bus_id: str | None) -> str | None:
    """ "00000000:07:00.0" and "0000:07:00.0" both -> "0000:07:00.0" (lower case)."""
    if not bus_id:
        return None
    match = re.fullmatch(r"\s*([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-7])\s*", bus_id)
    if not match:
        return bus_id.strip().lower()
    domain, bus, dev, fn = match.groups()
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def build_pairs(
    devices: Sequence[DeviceSnapshot],
    p2p: dict[tuple[int, int], dict[str, Any]] | None = None,
) -> tuple[GpuPair, ...]:
    """Pairwise topology from the devices' NVLinks plus optional P2P readings.

    ``p2p[(a, b)]`` may hold ``p2p_nvlink``, ``p2p_read`` and ``pcie_path``.
    Lost devices are left out.
    """
    p2p = p2p or {}
    usable = [d for d in devices if not d.lost]
    pairs = []
    for i, a in enumerate(usable):
        a_switch = any(link.peer_type == "switch" for link in a.nvlinks or ())
        for b in usable[i + 1 :]:
            b_switch = any(link.peer_type == "switch" for link in b.nvlinks or ())
            direct = sum(1 for link in a.nvlinks or () if link.peer_index == b.index)
            extra = p2p.get((a.index, b.index), {})
            pairs.append(
                GpuPair(a=a.index, b=b.index, nvlink_links=direct, nvlink_via_switch=a_switch and b_switch, **extra)
            )
    return tuple(pairs)


# --------------------------------------------------------------------------
# catalog matching


class CatalogMatch(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    gpu_id: str
    gpu_name: str
    matched_by: str
    note: str | None = None
    #: The full entry, for callers that go on to size things (not dumped to JSON).
    gpu: Gpu = Field(exclude=True, repr=False)


class DeviceReport(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    device: DeviceSnapshot
    match: CatalogMatch | None = None
    #: Why there is no match and what to do; None when matched.
    hint: str | None = None
    warnings: tuple[str, ...] = ()


class ProbeReport(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    host: HostSnapshot
    devices: tuple[DeviceReport, ...]

    @property
    def unmatched(self) -> tuple[DeviceReport, ...]:
        return tuple(d for d in self.devices if d.match is None)


def _memory_warning(device: DeviceSnapshot, gpu: Gpu) -> str | None:
    """NVML's total is a little under the datasheet figure (ECC, reservations);
    far off means the catalog entry is probably the wrong memory variant."""
    total = device.memory_total_bytes
    if not total:
        return None
    ratio = total / gpu.memory_bytes
    if 0.90 <= ratio <= 1.02:
        return None
    return (
        f"GPU {device.index} reports {total / GIB:.1f} GiB but catalog entry '{gpu.id}' has "
        f"{gpu.memory_gib:g} GiB; it may be a different memory variant"
    )


def match_device(device: DeviceSnapshot, catalog: Catalog) -> DeviceReport:
    warnings: list[str] = []
    if device.lost:
        warnings.append(f"GPU {device.index} was lost while being read; its figures are incomplete")
    if not device.name:
        return DeviceReport(
            device=device, hint="NVML did not report a name for this GPU; check nvidia-smi", warnings=tuple(warnings)
        )
    try:
        resolution = catalog.resolve_device(device.name, device.memory_total_bytes)
    except UsageError as exc:
        why = exc.message + (f" ({exc.hint})" if exc.hint and exc.hint.startswith("did you mean") else "")
        return DeviceReport(device=device, hint=f"{why}; {EMIT_CATALOG_HINT}", warnings=tuple(warnings))
    gpu = resolution.gpu
    match = CatalogMatch(
        gpu_id=gpu.id, gpu_name=gpu.name, matched_by=resolution.matched_by, note=resolution.note, gpu=gpu
    )
    memory = _memory_warning(device, gpu)
    if memory:
        warnings.append(memory)
    if device.compute_capability and device.compute_capability != gpu.compute_capability:
        warnings.append(
            f"GPU {device.index} reports compute capability {device.compute_capability} but catalog entry "
            f"'{gpu.id}' has {gpu.compute_capability}"
        )
    if device.mig_mode_current:
        warnings.append(
            f"GPU {device.index} has MIG enabled: the catalog figures are for the whole GPU, "
            "each MIG instance gets a slice"
        )
    return DeviceReport(device=device, match=match, warnings=tuple(warnings))


def match_catalog(host: HostSnapshot, catalog: Catalog) -> ProbeReport:
    """Attach to each device the catalog entry its NVML name resolves to.

    A name the catalog does not know (or finds ambiguous) is not an error here:
    the device is reported unmatched, with a hint to emit a starter entry.
    """
    return ProbeReport(host=host, devices=tuple(match_device(d, catalog) for d in host.devices))


# --------------------------------------------------------------------------
# starter catalog entries

#: Compute capability major (and minor where it matters) -> catalog architecture.
_ARCH_BY_CC = {
    "5": "maxwell", "6": "pascal", "7.0": "volta", "7.2": "volta", "7.5": "turing",
    "8.0": "ampere", "8.6": "ampere", "8.7": "ampere", "8.9": "ada", "9": "hopper",
    "10": "blackwell", "11": "blackwell", "12": "blackwell",
}  # fmt: skip


def report_results(report: ProbeReport) -> dict[str, Any]:
    """The ``results`` of ``probe --json``: host, devices with their catalog match, and
    the GPU-pair topology. None stays null; units are in the keys."""
    host = report.host
    devices = []
    for r in report.devices:
        entry = r.device.model_dump(mode="json")
        entry["catalog"] = r.match.model_dump(mode="json") if r.match is not None else None
        entry["hint"] = r.hint
        entry["warnings"] = list(r.warnings)
        devices.append(entry)
    pairs = []
    for p in host.pairs:
        item = p.model_dump(mode="json")
        item["nvlink"] = p.nvlink
        pairs.append(item)
    return {
        "host": {
            "hostname": host.hostname,
            "driver_version": host.driver_version,
            "cuda_driver_version": host.cuda_driver_version,
            "nvml_version": host.nvml_version,
            "device_count": len(host.devices),
        },
        "devices": devices,
        "topology": {"pairs": pairs},
    }



def architecture_for(compute_capability: str | None) -> str | None:
    if not compute_capability:
        return None
    major = compute_capability.split(".")[0]
    return _ARCH_BY_CC.get(compute_capability) or _ARCH_BY_CC.get(major)


def slug(name: str) -> str:
    """ "Tesla V100-SXM2-16GB" -> "v100-sxm2-16gb"; "NVIDIA GeForce RTX 3090" -> "rtx-3090".

    Leading vendor words are the catalog's (``catalog.VENDOR_WORDS``), so "Quadro" stays:
    "Quadro RTX 4000" -> "quadro-rtx-4000", the Turing card's id, not the RTX 4000 Ada's.
    """
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    while len(words) > 1 and words[0] in VENDOR_WORDS:
        words = words[1:]
    out = "-".join(words)[:64].strip("-")
    return out if len(out) >= 2 else f"gpu-{out or 'unknown'}"


def starter_entry(device: DeviceSnapshot) -> dict[str, Any]:
    """A catalog entry filled with what NVML can tell, nulls for the rest.

    It will not validate as it stands: ``segment``, ``launch_year``,
    ``memory_type``, ``bandwidth_gb_s``, ``fp32_tflops``, ``gpudirect_rdma``,
    ``form_factor`` and ``sources`` must come from the datasheet.
    """
    name = device.name or f"Unknown GPU {device.index}"
    measured: list[str] = []
    if device.sm_clock_max_mhz:
        measured.append(f"max SM clock {device.sm_clock_max_mhz} MHz")
    if device.mem_clock_max_mhz:
        measured.append(f"max memory clock {device.mem_clock_max_mhz} MHz")
    if device.power_limit_w:
        measured.append(f"power limit {device.power_limit_w:g} W")
    if device.nvlinks:
        measured.append(f"{len(device.nvlinks)} NVLinks up")
    if device.pcie_gen_max:
        measured.append(f"PCIe gen {device.pcie_gen_max} x{device.pcie_width_max or '?'}")
    notes = "fill in from the datasheet"
    if measured:
        notes += "; NVML reported " + ", ".join(measured)
    memory_gib = round(device.memory_total_bytes / GIB, 2) if device.memory_total_bytes else None
    return {
        "id": slug(name),
        "name": name,
        "aliases": [name],
        "segment": None,
        "architecture": architecture_for(device.compute_capability),
        "compute_capability": device.compute_capability,
        "launch_year": None,
        "memory_gib": memory_gib,
        "memory_type": None,
        "bandwidth_gb_s": None,
        "fp64_tflops": None,
        "fp32_tflops": None,
        "fp16_tflops": None,
        "tensor_tf32_tflops": None,
        "tensor_fp16_tflops": None,
        "tensor_bf16_tflops": None,
        "tensor_fp8_tflops": None,
        "tensor_int8_tops": None,
        "cuda_cores": None,
        "tensor_cores": None,
        "boost_clock_mhz": None,
        "tdp_w": None,
        # GetEccMode answers on any GPU with ECC (on or off): ``optional`` (a driver setting; HBM
        # parts, where it is ``always``, need the edit); a GPU lost before that read tells us nothing
        "ecc": None if device.lost and device.ecc_mode_current is None
        else ("optional" if device.ecc_mode_current is not None else "none"),
        "nvlink_generation": None,
        "nvlink_gb_s": None,
        "pcie_generation": None,
        "gpudirect_rdma": None,
        "form_factor": None,
        "sources": [],
        "notes": notes,
    }


STARTER_HEADER = """\
# Starter catalog entries written by `gpusizer probe --emit-catalog`.
#
# NVML filled in the name, memory, compute capability and ECC. Everything that
# is null (and the empty `sources` list) must be filled in from the datasheet:
# this file will NOT validate until at least segment, launch_year, memory_type,
# bandwidth_gb_s, fp32_tflops, gpudirect_rdma, form_factor and one source are
# set. memory_gib is what NVML reports as usable, which may be a little under the
# datasheet figure. Then pass it with --catalog FILE.
"""


def starter_catalog_yaml(devices: Iterable[DeviceSnapshot]) -> str:
    """A YAML document with one starter entry per distinct GPU model.

    Where several GPUs share a model, a healthy one is preferred over one that
    was lost mid-read (whose entry would have more blanks).
    """
    import yaml  # deferred: keeps `import gpusizer.hardware.probe` light

    entries: dict[str, dict[str, Any]] = {}
    for device in sorted(devices, key=lambda d: d.lost):
        entry = starter_entry(device)
        entries.setdefault(entry["id"], entry)
    # ASCII only: a name NVML reports is written with \u escapes, so no control or
    # bidirectional character reaches the terminal or the file as itself.
    body = yaml.safe_dump({"gpus": list(entries.values())}, sort_keys=False, allow_unicode=False, width=100)
    return STARTER_HEADER + "\n" + body
