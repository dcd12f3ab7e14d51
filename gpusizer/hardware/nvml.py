"""The NVML edge: the only module that imports ``pynvml`` (from nvidia-ml-py).

:func:`read_host` initialises NVML, reads every GPU into a
:class:`gpusizer.hardware.probe.HostSnapshot` and always shuts NVML down again.

* A field a GPU does not support (or that needs privileges we lack) is ``None``.
* A GPU that falls off the bus mid-read (NVML_ERROR_GPU_IS_LOST) is reported
  with ``lost=True`` and whatever was read before; the other GPUs still are.
* No library, no driver, a failed init or zero GPUs raise
  :class:`gpusizer.errors.NoDeviceError` with a next step.

``pynvml`` is imported inside functions only, so importing this module costs
nothing and works on machines without it.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from ctypes import ArgumentError
from typing import Any, TypeVar

from gpusizer.errors import NoDeviceError
from gpusizer.hardware.probe import (
    ComputeProcess,
    DeviceSnapshot,
    HostSnapshot,
    NvLink,
    build_pairs,
    cuda_version_string,
    normalise_bus_id,
    p2p_status_label,
    topology_label,
)

T = TypeVar("T")

_CHECK = "check that nvidia-smi works"


class _GpuLost(Exception):
    """Internal: NVML said the GPU being read is lost."""


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    value = str(value).strip()
    return value or None


def _init_error(nv: Any, exc: Exception) -> NoDeviceError:
    code = getattr(exc, "value", None)
    if code == nv.NVML_ERROR_LIBRARY_NOT_FOUND:
        return NoDeviceError(
            "NVIDIA driver library libnvidia-ml.so.1 not found",
            hint="install the NVIDIA driver (or add the folder holding libnvidia-ml.so.1 to LD_LIBRARY_PATH), "
            f"then {_CHECK}",
        )
    if code == nv.NVML_ERROR_DRIVER_NOT_LOADED:
        return NoDeviceError(
            "the NVIDIA kernel driver is not loaded",
            hint=f"load it ('sudo modprobe nvidia') or reinstall the NVIDIA driver, then {_CHECK}",
        )
    if code == nv.NVML_ERROR_NO_PERMISSION:
        return NoDeviceError(
            "no permission to open the NVIDIA devices (/dev/nvidia*)",
            hint=f"run as a user with access to /dev/nvidia* (or start the container with the GPUs passed through), then {_CHECK}",
        )
    if code == getattr(nv, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", -1):
        return NoDeviceError(
            "the NVIDIA driver and its user-space library are different versions",
            hint="reboot (or reload the nvidia kernel module) after the driver update, then " + _CHECK,
        )
    return NoDeviceError(
        f"NVML failed to initialise: {_describe(exc)}",
        hint=f"{_CHECK}; if it also fails, reinstall the NVIDIA driver",
    )


def _describe(exc: Exception) -> str:
    try:
        text = str(exc)
    except Exception:  # pragma: no cover - pynvml's __str__ can call into the library
        text = ""
    code = getattr(exc, "value", None)
    text = text or type(exc).__name__
    return f"{text} (NVML error {code})" if code is not None else text


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - it is a declared dependency
        raise NoDeviceError(
            f"the NVML Python bindings are not installed ({exc})",
            hint="pip install nvidia-ml-py",
        ) from None
    return pynvml


class _Reader:
    """Reads fields, turning per-field NVML errors into None and GPU-lost into _GpuLost."""

    def __init__(self, nv: Any) -> None:
        self.nv = nv
        self.lost_code = nv.NVML_ERROR_GPU_IS_LOST
        mismatch = getattr(nv, "NVMLLibraryMismatchError", None)
        # ArgumentError: a bindings/struct mismatch; the mismatch error: a
        # function this driver lacks (nvidia-ml-py raises it for some calls).
        self.soft_errors: tuple[type[BaseException], ...] = (nv.NVMLError, ArgumentError)
        if mismatch is not None:
            self.soft_errors += (mismatch,)

    def get(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except self.nv.NVMLError as exc:
            if getattr(exc, "value", None) == self.lost_code:
                raise _GpuLost from None
            return None
        except self.soft_errors:
            # a missing symbol in an older driver, or a bindings/library mismatch
            return None


def _read_memory(r: _Reader, nv: Any, handle: Any) -> Any:
    """Prefer nvmlDeviceGetMemoryInfo_v2 ("used" excludes the driver's reservation,
    as nvidia-smi shows it); fall back to v1 on older drivers."""
    version = getattr(nv, "nvmlMemory_v2", None)
    if version is not None:
        mem = r.get(nv.nvmlDeviceGetMemoryInfo, handle, version)
        if mem is not None:
            return mem
    return r.get(nv.nvmlDeviceGetMemoryInfo, handle)


def _read_nvlinks(r: _Reader, nv: Any, handle: Any) -> list[dict[str, Any]] | None:
    max_links = int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))
    links: list[dict[str, Any]] = []
    supported = False
    remote_type = getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
    types = {
        getattr(nv, "NVML_NVLINK_DEVICE_TYPE_GPU", 0): "gpu",
        getattr(nv, "NVML_NVLINK_DEVICE_TYPE_IBMNPU", 1): "npu",
        getattr(nv, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2): "switch",
    }
    for link in range(max_links):
        state = r.get(nv.nvmlDeviceGetNvLinkState, handle, link)
        if state is None:
            continue
        supported = True
        if not state:
            continue
        pci = r.get(nv.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        kind = r.get(remote_type, handle, link) if remote_type is not None else None
        links.append(
            {
                "link": link,
                "peer_pci_bus_id": _text(pci.busId) if pci is not None else None,
                "peer_type": types.get(kind, "unknown") if kind is not None else None,
            }
        )
    return links if supported else None


def _read_device(r: _Reader, nv: Any, index: int, fields: dict[str, Any]) -> Any:
    """Fill ``fields`` as it goes, so a lost GPU keeps what was read. Returns the handle."""
    handle = r.get(nv.nvmlDeviceGetHandleByIndex, index)
    if handle is None:
        return None
    fields["name"] = _text(r.get(nv.nvmlDeviceGetName, handle))
    fields["uuid"] = _text(r.get(nv.nvmlDeviceGetUUID, handle))
    pci = r.get(nv.nvmlDeviceGetPciInfo, handle)
    if pci is not None:
        fields["pci_bus_id"] = _text(pci.busId)

    mem = _read_memory(r, nv, handle)
    if mem is not None:
        fields["memory_total_bytes"] = int(mem.total)
        fields["memory_used_bytes"] = int(mem.used)
        fields["memory_free_bytes"] = int(mem.free)

    cc = r.get(nv.nvmlDeviceGetCudaComputeCapability, handle)
    if cc is not None:
        fields["compute_capability"] = f"{cc[0]}.{cc[1]}"

    ecc = r.get(nv.nvmlDeviceGetEccMode, handle)
    if ecc is not None:
        fields["ecc_mode_current"] = bool(ecc[0])
        fields["ecc_mode_pending"] = bool(ecc[1])
        fields["ecc_errors_corrected"] = r.get(
            nv.nvmlDeviceGetTotalEccErrors, handle, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC
        )
        fields["ecc_errors_uncorrected"] = r.get(
            nv.nvmlDeviceGetTotalEccErrors, handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
        )

    power = r.get(nv.nvmlDeviceGetPowerUsage, handle)
    fields["power_draw_w"] = power / 1000 if power is not None else None
    limit = r.get(nv.nvmlDeviceGetEnforcedPowerLimit, handle)
    if limit is None:
        limit = r.get(nv.nvmlDeviceGetPowerManagementLimit, handle)
    fields["power_limit_w"] = limit / 1000 if limit is not None else None
    fields["temperature_c"] = r.get(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)

    fields["sm_clock_mhz"] = r.get(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)
    fields["sm_clock_max_mhz"] = r.get(nv.nvmlDeviceGetMaxClockInfo, handle, nv.NVML_CLOCK_SM)
    fields["mem_clock_mhz"] = r.get(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM)
    fields["mem_clock_max_mhz"] = r.get(nv.nvmlDeviceGetMaxClockInfo, handle, nv.NVML_CLOCK_MEM)

    fields["pcie_gen"] = r.get(nv.nvmlDeviceGetCurrPcieLinkGeneration, handle)
    fields["pcie_gen_max"] = r.get(nv.nvmlDeviceGetMaxPcieLinkGeneration, handle)
    fields["pcie_width"] = r.get(nv.nvmlDeviceGetCurrPcieLinkWidth, handle)
    fields["pcie_width_max"] = r.get(nv.nvmlDeviceGetMaxPcieLinkWidth, handle)

    fields["nvlinks"] = _read_nvlinks(r, nv, handle)

    mig = r.get(nv.nvmlDeviceGetMigMode, handle)
    if mig is not None:
        fields["mig_mode_current"] = bool(mig[0])
        fields["mig_mode_pending"] = bool(mig[1])

    util = r.get(nv.nvmlDeviceGetUtilizationRates, handle)
    if util is not None:
        fields["utilization_gpu_pct"] = int(util.gpu)
        fields["utilization_memory_pct"] = int(util.memory)

    procs = r.get(nv.nvmlDeviceGetComputeRunningProcesses, handle)
    if procs is not None:
        fields["compute_processes"] = [
            {"pid": int(p.pid), "used_memory_bytes": None if p.usedGpuMemory is None else int(p.usedGpuMemory)}
            for p in procs
        ]
    return handle


def _pair_topology(r: _Reader, nv: Any, handles: dict[int, Any]) -> dict[tuple[int, int], dict[str, Any]]:
    out: dict[tuple[int, int], dict[str, Any]] = {}
    nvlink_index = getattr(nv, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
    read_index = 0  # NVML_P2P_CAPS_INDEX_READ is the tuple (0,) in some bindings
    indices = sorted(handles)
    for i, a in enumerate(indices):
        for b in indices[i + 1 :]:
            try:
                out[(a, b)] = {
                    "p2p_nvlink": p2p_status_label(
                        r.get(nv.nvmlDeviceGetP2PStatus, handles[a], handles[b], nvlink_index)
                    ),
                    "p2p_read": p2p_status_label(r.get(nv.nvmlDeviceGetP2PStatus, handles[a], handles[b], read_index)),
                    "pcie_path": topology_label(r.get(nv.nvmlDeviceGetTopologyCommonAncestor, handles[a], handles[b])),
                }
            except _GpuLost:
                continue
    return out


def _device_from_fields(fields: dict[str, Any], by_bus: dict[str, int]) -> DeviceSnapshot:
    links = fields.pop("nvlinks", None)
    if links is not None:
        fields["nvlinks"] = [
            NvLink(**link, peer_index=by_bus.get(normalise_bus_id(link["peer_pci_bus_id"]) or "")) for link in links
        ]
    procs = fields.pop("compute_processes", None)
    if procs is not None:
        fields["compute_processes"] = [ComputeProcess(**p) for p in procs]
    return DeviceSnapshot(**fields)


def read_host() -> HostSnapshot:
    """Read every GPU NVML can see. Raises NoDeviceError when there are none."""
    nv = _import_pynvml()
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        raise _init_error(nv, exc) from None
    except OSError as exc:  # pragma: no cover - pynvml maps this itself, but be safe
        raise NoDeviceError(
            f"could not load the NVIDIA driver library: {exc}", hint=f"install the NVIDIA driver, then {_CHECK}"
        ) from None
    try:
        return _read_initialised(nv)
    finally:
        with contextlib.suppress(nv.NVMLError):  # nothing useful to do if shutdown fails
            nv.nvmlShutdown()


def _read_initialised(nv: Any) -> HostSnapshot:
    r = _Reader(nv)
    try:
        count = nv.nvmlDeviceGetCount()
    except nv.NVMLError as exc:
        raise NoDeviceError(
            f"NVML could not count the GPUs: {_describe(exc)}", hint=f"{_CHECK}; reinstall the driver if it fails"
        ) from None
    if count == 0:
        raise NoDeviceError(
            "NVML is working but reports no NVIDIA GPUs",
            hint=f"{_CHECK} and lists a GPU (in a container, start it with the GPUs passed through)",
        )

    def system(fn_name: str) -> Any:
        fn = getattr(nv, fn_name, None)
        if fn is None:
            return None
        try:
            return r.get(fn)
        except _GpuLost:
            return None

    cuda = system("nvmlSystemGetCudaDriverVersion_v2")
    if cuda is None:
        cuda = system("nvmlSystemGetCudaDriverVersion")

    per_device: list[dict[str, Any]] = []
    handles: dict[int, Any] = {}
    for index in range(count):
        fields: dict[str, Any] = {"index": index}
        try:
            handle = _read_device(r, nv, index, fields)
            if handle is not None:
                handles[index] = handle
        except _GpuLost:
            fields["lost"] = True
        per_device.append(fields)

    by_bus: dict[str, int] = {}
    for fields in per_device:
        key = normalise_bus_id(fields.get("pci_bus_id"))
        if key:
            by_bus[key] = fields["index"]
    devices = [_device_from_fields(f, by_bus) for f in per_device]
    healthy = {i: h for i, h in handles.items() if not devices[i].lost}
    p2p = _pair_topology(r, nv, healthy) if len(healthy) > 1 else {}

    return HostSnapshot(
        hostname=_hostname(),
        driver_version=_text(system("nvmlSystemGetDriverVersion")),
        cuda_driver_version=cuda_version_string(cuda),
        nvml_version=_text(system("nvmlSystemGetNVMLVersion")),
        devices=tuple(devices),
        pairs=build_pairs(devices, p2p),
    )


def _hostname() -> str | None:
    try:
        return socket.gethostname() or None
    except OSError:  # pragma: no cover
        return None
