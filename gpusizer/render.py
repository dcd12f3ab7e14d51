"""Turning results into rich tables for people, or one JSON document for scripts.

Rich decides on colour: it honours NO_COLOR, FORCE_COLOR and non-TTY output.
``--no-color`` wins over all of them. JSON never goes through rich.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpusizer.units import format_bytes

SCHEMA_VERSION = 1


def make_console(*, stderr: bool = False, no_color: bool = False) -> Any:
    from rich.console import Console

    import os

    kwargs: dict[str, Any] = {"stderr": stderr, "highlight": False}
    stream = sys.stderr if stderr else sys.stdout
    if not os.environ.get("COLUMNS") and not (hasattr(stream, "isatty") and stream.isatty()):
        # Piped or redirected: no terminal to fit, so do not squeeze tables to 80 columns.
        kwargs["width"] = 200
    if no_color:
        kwargs["no_color"] = True
        kwargs["color_system"] = None
    return Console(**kwargs)


def envelope(command: str, inputs: Mapping[str, Any], results: Any, notes: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON envelope every command prints under ``--json``."""
    return {
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "input": dict(inputs),
        "results": results,
        "notes": list(notes),
    }


def emit_json(document: Mapping[str, Any]) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, allow_nan=False))
    sys.stdout.write("\n")


def fmt(value: Any, digits: int = 1) -> str:
    """Format a catalog value for a table cell; None shows as 'n/a'."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 10:
            return f"{int(value):,}"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}" if abs(value) >= 1 else f"{value:.{max(digits, 2)}f}"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    return str(value)


def fmt_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "n/a"
    if ratio >= 10:
        return f"{ratio:.0f}x"
    if ratio >= 0.1:
        return f"{ratio:.2f}x"
    return f"{ratio:.3f}x"


def bar(fraction: float, width: int = 30) -> str:
    """A text bar of ``width`` cells for a fraction in [0, 1]."""
    fraction = max(0.0, min(1.0, fraction))
    full = int(fraction * width)
    rest = fraction * width - full
    partial = " ▏▎▍▌▋▊▉"[int(rest * 8)] if full < width else ""
    return ("█" * full + partial).ljust(width)


# --------------------------------------------------------------------------
# catalog


LIST_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "id"),
    ("architecture", "arch"),
    ("segment", "segment"),
    ("memory_gib", "mem GiB"),
    ("bandwidth_gb_s", "GB/s"),
    ("fp64_tflops", "FP64"),
    ("fp32_tflops", "FP32"),
    ("tensor_fp16_tflops", "FP16 TC"),
    ("ecc", "ECC"),
    ("nvlink_gb_s", "NVLink GB/s"),
    ("gpudirect_rdma", "RDMA"),
    ("launch_price_usd", "launch $"),
)


def catalog_table(gpus: Iterable[Any], title: str | None = None) -> Any:
    from rich.table import Table
    from rich.text import Text

    from rich import box

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for field, label in LIST_COLUMNS:
        numeric = field not in ("id", "architecture", "segment")
        table.add_column(label, justify="right" if numeric else "left", no_wrap=field == "id")
    for gpu in gpus:
        # Text cells skip markup parsing: about a sixth of the table's render time
        table.add_row(*(Text(fmt(getattr(gpu, f))) for f, _ in LIST_COLUMNS))
    return table


def gpu_detail(gpu: Any) -> Any:
    from rich.table import Table

    table = Table(title=f"{gpu.name} ({gpu.id})", title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for field in type(gpu).model_fields:
        if field in ("sources", "name", "id"):
            continue
        value = getattr(gpu, field)
        if field == "aliases":
            value = ", ".join(value) or "n/a"
        elif field == "memory_gib":
            value = f"{fmt(value)} GiB ({format_bytes(gpu.memory_bytes, binary=False)})"
        table.add_row(field, fmt(value) if not isinstance(value, str) else value)
    for i, src in enumerate(gpu.sources, 1):
        covers = f" [{', '.join(src.fields)}]" if src.fields else ""
        table.add_row(f"source {i}", f"{src.title}{covers}" + (f"\n{src.url}" if src.url else ""))
    return table


def comparison_table(comparison: Any) -> Any:
    from rich.table import Table

    first = comparison.gpus[0].id
    table = Table(title=f"Side by side (ratios against {first})", title_justify="left")
    table.add_column("")
    for gpu in comparison.gpus:
        table.add_column(gpu.id, justify="right")
    for row in comparison.rows:
        cells = []
        for i, (value, ratio) in enumerate(zip(row.values, row.ratios)):
            text = fmt(value)
            if i > 0 and ratio is not None:
                text += f" ({fmt_ratio(ratio)})"
            cells.append(text)
        table.add_row(row.label, *cells)
    for _, label, values in comparison.facts:
        table.add_row(label, *(fmt(v) for v in values))
    return table
