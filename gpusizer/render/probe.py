"""Turning a :class:`gpusizer.hardware.probe.ProbeReport` into rich tables and JSON.

``None`` is shown as :data:`~gpusizer.render.common.NA` in tables and stays
``null`` in JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from gpusizer.hardware.probe import (
    PCIE_PATH_MEANING,
    DeviceReport,
    DeviceSnapshot,
    GpuPair,
    ProbeReport,
)
from gpusizer.render.common import NA, show_bool, show_value
from gpusizer.units import format_bytes

#: Devices per table before the table is split (keeps 8-GPU hosts readable).
COLUMNS_PER_TABLE = 4


def _on_off(value: bool | None) -> str:
    return show_value(value, lambda on: show_bool(on, "on", "off"))


def _mode(current: bool | None, pending: bool | None) -> str:
    text = _on_off(current)
    if current is not None and pending is not None and pending != current:
        text += f" (pending {_on_off(pending)})"
    return text


def _pair(a: object, b: object, unit: str = "", sep: str = " / ") -> str:
    if a is None and b is None:
        return NA
    return f"{show_value(a)}{sep}{show_value(b)}{unit}"


def _watts(value: float | None) -> str | None:
    return None if value is None else f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _pcie(d: DeviceSnapshot) -> str:
    if d.pcie_gen is None and d.pcie_width is None and d.pcie_gen_max is None and d.pcie_width_max is None:
        return NA
    now = f"gen {show_value(d.pcie_gen)} x{show_value(d.pcie_width)}"
    top = f"gen {show_value(d.pcie_gen_max)} x{show_value(d.pcie_width_max)}"
    return now if now == top else f"{now} (max {top})"


def _nvlink(d: DeviceSnapshot) -> str:
    if d.nvlinks is None:
        return NA
    if not d.nvlinks:
        return "none up"
    peers = sorted({link.peer_index for link in d.nvlinks if link.peer_index is not None})
    switches = sum(1 for link in d.nvlinks if link.peer_type == "switch")
    text = f"{len(d.nvlinks)} up"
    details = []
    if peers:
        details.append("to GPU " + ", ".join(map(str, peers)))
    if switches:
        details.append(f"{switches} to NVSwitch")
    return text + (f" ({'; '.join(details)})" if details else "")


def _processes(d: DeviceSnapshot) -> str:
    if d.compute_processes is None:
        return NA
    if not d.compute_processes:
        return "none"
    used = [p.used_memory_bytes for p in d.compute_processes if p.used_memory_bytes is not None]
    text = f"{len(d.compute_processes)}"
    return text + (f" using {format_bytes(sum(used))}" if used else "")


def _catalog(r: DeviceReport) -> Text:
    if r.match is None:
        return Text("unmatched", style="yellow")
    return Text(r.match.gpu_id, style="green")


Row = tuple[str, Callable[[DeviceReport], "str | Text"]]

ROWS: tuple[Row, ...] = (
    ("Name", lambda r: show_value(r.device.name)),
    ("Catalog entry", _catalog),
    ("UUID", lambda r: show_value(r.device.uuid)),
    ("PCI bus id", lambda r: show_value(r.device.pci_bus_id)),
    ("Memory total", lambda r: show_value(r.device.memory_total_bytes, format_bytes)),
    ("Memory used", lambda r: show_value(r.device.memory_used_bytes, format_bytes)),
    ("Memory free", lambda r: show_value(r.device.memory_free_bytes, format_bytes)),
    ("Compute capability", lambda r: show_value(r.device.compute_capability)),
    ("ECC", lambda r: _mode(r.device.ecc_mode_current, r.device.ecc_mode_pending)),
    ("ECC errors (corr./uncorr.)", lambda r: _pair(r.device.ecc_errors_corrected, r.device.ecc_errors_uncorrected)),
    ("Power (draw / limit)", lambda r: _pair(_watts(r.device.power_draw_w), _watts(r.device.power_limit_w), " W")),
    ("Temperature", lambda r: show_value(r.device.temperature_c, lambda t: f"{t} °C")),
    ("SM clock (now / max)", lambda r: _pair(r.device.sm_clock_mhz, r.device.sm_clock_max_mhz, " MHz")),
    ("Memory clock (now / max)", lambda r: _pair(r.device.mem_clock_mhz, r.device.mem_clock_max_mhz, " MHz")),
    ("PCIe link", lambda r: _pcie(r.device)),
    ("NVLink", lambda r: _nvlink(r.device)),
    ("MIG", lambda r: _mode(r.device.mig_mode_current, r.device.mig_mode_pending)),
    (
        "Utilization (GPU / memory)",
        lambda r: _pair(r.device.utilization_gpu_pct, r.device.utilization_memory_pct, " %"),
    ),
    ("Compute processes", lambda r: _processes(r.device)),
    ("Status", lambda r: Text("LOST", style="bold red") if r.device.lost else Text("ok")),
)


def _host_table(report: ProbeReport) -> Table:
    host = report.host
    title = f"Host {host.hostname}" if host.hostname else "Host"
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("Field", style="bold")
    table.add_column("Value")
    table.add_row("NVIDIA driver", show_value(host.driver_version))
    table.add_row("CUDA (driver supports up to)", show_value(host.cuda_driver_version))
    table.add_row("NVML", show_value(host.nvml_version))
    lost = sum(1 for d in host.devices if d.lost)
    table.add_row("GPUs", f"{len(host.devices)}" + (f" ({lost} lost)" if lost else ""))
    return table


def _device_tables(devices: Sequence[DeviceReport]) -> list[Table]:
    tables = []
    for start in range(0, len(devices), COLUMNS_PER_TABLE):
        chunk = devices[start : start + COLUMNS_PER_TABLE]
        table = Table(title="GPUs" if start == 0 else None, title_justify="left")
        table.add_column("", style="bold")
        for r in chunk:
            table.add_column(f"GPU {r.device.index}")
        for label, cell in ROWS:
            values = [cell(r) for r in chunk]
            table.add_row(label, *(v if isinstance(v, Text) else Text(v) for v in values))
        tables.append(table)
    return tables


def _topology_cell(pair: GpuPair | None) -> str:
    if pair is None:
        return NA
    if pair.nvlink_links:
        return f"NV{pair.nvlink_links}"
    if pair.nvlink:
        return "NVSwitch" if pair.nvlink_via_switch else "NV"
    return pair.pcie_path or NA


def _topology_table(report: ProbeReport) -> Table | None:
    devices = [d for d in report.host.devices if not d.lost]
    if len(devices) < 2:
        return None
    pairs = {(p.a, p.b): p for p in report.host.pairs}
    table = Table(title="Topology", title_justify="left")
    table.add_column("", style="bold")
    for d in devices:
        table.add_column(f"GPU {d.index}", justify="center")
    for a in devices:
        row = []
        for b in devices:
            if a.index == b.index:
                row.append("X")
            else:
                key = (min(a.index, b.index), max(a.index, b.index))
                row.append(_topology_cell(pairs.get(key)))
        table.add_row(f"GPU {a.index}", *row)
    cells = {_topology_cell(p) for p in report.host.pairs}
    legend = []
    if any(c.startswith("NV") and c[2:].isdigit() for c in cells):
        legend.append("NV#: that many direct NVLinks")
    if "NVSwitch" in cells:
        legend.append("NVSwitch: NVLink through NVSwitches")
    if "NV" in cells:
        legend.append("NV: NVLink (P2P over NVLink works)")
    legend += [f"{k}: PCIe through {PCIE_PATH_MEANING[k]}" for k in PCIE_PATH_MEANING if k in cells]
    if legend:
        table.caption = "; ".join(legend)
    return table


def _notes(report: ProbeReport) -> list[RenderableType]:
    out: list[RenderableType] = []
    for r in report.devices:
        if r.match is not None and r.match.note:
            out.append(Text(f"GPU {r.device.index}: {r.match.note}", style="dim"))
        if r.hint:
            out.append(Text(f"GPU {r.device.index}: {r.hint}", style="yellow"))
        for warning in r.warnings:
            out.append(Text(f"Warning: {warning}", style="yellow"))
    return out


def probe_renderables(report: ProbeReport) -> list[RenderableType]:
    """Host summary, device tables (4 GPUs per table), topology and notes."""
    out: list[RenderableType] = [_host_table(report), *_device_tables(report.devices)]
    topology = _topology_table(report)
    if topology is not None:
        out.append(topology)
    out.extend(_notes(report))
    return out


