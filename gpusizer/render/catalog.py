"""Tables for catalog list, catalog show and compare."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from gpusizer.render.common import NA, fmt, fmt_ratio, show_value
from gpusizer.units import format_bytes, format_count

if TYPE_CHECKING:
    from rich.table import Table

    from gpusizer.hardware.browse import Comparison
    from gpusizer.hardware.catalog import Gpu
    from gpusizer.models.zoo import Model

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


def catalog_table(gpus: Iterable[Gpu], title: str | None = None) -> Table:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for field, label in LIST_COLUMNS:
        numeric = field not in ("id", "architecture", "segment")
        table.add_column(label, justify="right" if numeric else "left", no_wrap=field == "id")
    for gpu in gpus:
        # Text cells skip markup parsing: about a sixth of the table's render time
        table.add_row(*(Text(fmt(getattr(gpu, f))) for f, _ in LIST_COLUMNS))
    return table


def gpu_detail(gpu: Gpu) -> Table:
    from rich.table import Table

    table = Table(title=f"{gpu.name} ({gpu.id})", title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for field in type(gpu).model_fields:
        if field in ("sources", "name", "id"):
            continue
        value = getattr(gpu, field)
        if field == "aliases":
            value = ", ".join(value) or NA
        elif field == "memory_gib":
            value = f"{fmt(value)} GiB ({format_bytes(gpu.memory_bytes, binary=False)})"
        table.add_row(field, fmt(value) if not isinstance(value, str) else value)
    for i, src in enumerate(gpu.sources, 1):
        covers = f" [{', '.join(src.fields)}]" if src.fields else ""
        table.add_row(f"source {i}", f"{src.title}{covers}" + (f"\n{src.url}" if src.url else ""))
    return table


def comparison_table(comparison: Comparison) -> Table:
    from rich.table import Table

    first = comparison.gpus[0].id
    table = Table(title=f"Side by side (ratios against {first})", title_justify="left")
    table.add_column("")
    for gpu in comparison.gpus:
        table.add_column(gpu.id, justify="right")
    for row in comparison.rows:
        cells = []
        for i, (value, ratio) in enumerate(zip(row.values, row.ratios, strict=True)):
            text = fmt(value)
            if i > 0 and ratio is not None:
                text += f" ({fmt_ratio(ratio)})"
            cells.append(text)
        table.add_row(row.label, *cells)
    for _, label, values in comparison.facts:
        table.add_row(label, *(fmt(v) for v in values))
    return table


def models_table(models: Sequence[Model]) -> Table:
    """The model zoo: shape at a glance; a missing dimension shows as n/a."""
    from rich.table import Table

    table = Table(title="Model zoo (data/models.yaml)", title_justify="left")
    for col in ("id", "kind", "params", "layers", "hidden", "heads/kv", "vocab"):
        table.add_column(col, justify="left" if col in ("id", "kind") else "right")
    for m in models:
        heads = f"{m.heads}/{m.n_kv_heads}" if m.heads else NA
        table.add_row(m.id, m.kind, format_count(m.params), show_value(m.layers), show_value(m.hidden), heads,
                      show_value(m.vocab))
    return table
