"""Tables for systems list and systems show."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpusizer.render.common import NA, fit_table, fmt

if TYPE_CHECKING:
    from rich.table import Table

    from gpusizer.hardware.systems import System


def _network(system: System) -> str:
    nics = system.nics
    if nics is None:
        return NA
    if nics.count is not None and nics.gbit_s_each is not None:
        speed = f"{nics.count} x {nics.gbit_s_each:,g} Gb/s"
    elif nics.total_gbit_s is not None:
        speed = f"{nics.total_gbit_s:,g} Gb/s total"
    else:
        speed = NA
    rdma = {True: "rdma", False: "no rdma", None: "rdma?"}[nics.rdma]
    return f"{speed} {nics.kind or ''} {rdma}".replace("  ", " ")


def _fabric(system: System) -> str:
    fabric = system.intra_node.fabric
    if fabric is None:
        return "-" if system.gpus == 1 else NA
    link = system.intra_node.nvlink_gb_s
    return fabric + (f" {link:,g} GB/s" if link else "")


#: The systems list's columns a narrow terminal leaves out, first to last.
SYSTEMS_DROP_ORDER = ("priced", "fabric", "$/hour", "network")


def systems_table(systems: Sequence[System], width: int | None = None) -> Table:
    """The systems list: GPU and count, fabric, network, price per hour and per GPU-hour.
    ``width``: fit that many columns, leaving out :data:`SYSTEMS_DROP_ORDER`'s as needed."""
    from rich.table import Table

    table = Table(title=f"{len(systems)} systems", title_justify="left")
    table.add_column("id", no_wrap=True)
    for name, justify in (("GPUs", "left"), ("fabric", "left"), ("network", "left"), ("$/hour", "right"),
                          ("$/GPU-h", "right"), ("priced", "left")):
        table.add_column(name, justify=justify, no_wrap=justify == "right")  # type: ignore[arg-type]
    for s in systems:
        hourly = s.price.on_demand_usd_per_hour if s.price else None
        table.add_row(s.id, f"{s.gpus} x {s.gpu}", _fabric(s), _network(s),
                      f"{hourly:,.2f}" if hourly is not None else NA,
                      f"{s.usd_per_gpu_hour:,.2f}" if s.usd_per_gpu_hour is not None else NA,
                      (s.price.date or NA) if s.price else NA)
    return table if width is None else fit_table(table, width, drop=SYSTEMS_DROP_ORDER)


def system_detail(system: System, width: int | None = None) -> Table:
    """One system, field by field, with its sources; ``width``: fit that many columns."""
    from rich.table import Table

    table = Table(title=f"{system.name} ({system.id})", title_justify="left", show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    price = system.price
    rows = [
        ("kind", system.kind + (f", {system.provider} {system.instance_type}" if system.provider else "")),
        ("GPUs", f"{system.gpus} x {system.gpu}"),
        ("fabric", _fabric(system)),
        ("PCIe", fmt(system.intra_node.pcie_generation, 0) + (f", P2P {system.intra_node.p2p}"
                                                              if system.intra_node.p2p else "")),
        ("network", _network(system)),
        ("host memory", f"{fmt(system.cpu_ram_gib, 0)} GiB" if system.cpu_ram_gib else NA),
    ]
    if price is not None:
        rows += [
            ("on demand", f"${price.on_demand_usd_per_hour:,.2f}/hour" if price.on_demand_usd_per_hour else NA),
            ("per GPU-hour", f"${system.usd_per_gpu_hour:,.2f}" if system.usd_per_gpu_hour is not None else NA),
            ("spot", f"${price.spot_usd_per_hour:,.2f}/hour" if price.spot_usd_per_hour else NA),
            ("priced", f"{price.date or NA}, {price.region or 'region not stated'}"),
        ]
    rows.append(("notes", system.notes or NA))
    for field, value in rows:
        table.add_row(field, value)
    for i, src in enumerate(system.sources, 1):
        covers = f" [{', '.join(src.fields)}]" if src.fields else ""
        table.add_row(f"source {i}", f"{src.title}{covers}" + (f"\n{src.url}" if src.url else ""))
    return table if width is None else fit_table(table, width)
