"""Tables for catalog list, catalog show and compare."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from gpusizer.render.common import NA, Lines, columns, fit_table, fmt, fmt_ratio, show_value
from gpusizer.units import format_bytes, format_count

if TYPE_CHECKING:
    from rich.console import Group
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
    ("street_price_usd", "street $"),
)


#: How a derived value is marked in a listing with provenance.
DERIVED_MARK = "*"
#: How a null Tensor Core rate reads in a listing with provenance: the hardware lacks it, or
#: the catalog does not know it.
UNKNOWN_MARK = "?"


def _cell(gpu: Gpu, field: str, provenance: bool) -> str:
    text = fmt(getattr(gpu, field))
    if not provenance:
        return text
    if field in ("id", "vendor", "architecture", "segment", "ecc"):
        return text
    status = gpu.provenance(field)
    if status == "derived":
        return text + DERIVED_MARK
    # only a Tensor Core rate can be told absent from unknown; other nulls read n/a
    return text + UNKNOWN_MARK if status == "unknown" and field.startswith("tensor_") else text


#: The catalog list's columns a narrow terminal leaves out, first to last (never the sort column).
LIST_DROP_ORDER = ("street_price_usd", "nvlink_gb_s", "gpudirect_rdma", "ecc", "launch_price_usd", "fp64_tflops",
                   "vendor", "segment", "architecture")


def catalog_table(gpus: Iterable[Gpu], title: str | None = None, *, provenance: bool = False,
                  width: int | None = None, sort: str | None = None) -> Lines:
    """The catalog list, as plain columns (a rich Table costs several times as much to draw 149
    rows, and plain lines print without loading rich's console at all). ``provenance``: mark derived values (``*``) and unknown Tensor Core rates (``?``), add
    the count of derived values, and say so in a caption. ``width``: lay it out within that many
    columns, leaving out :data:`LIST_DROP_ORDER`'s columns (but ``sort``'s) as needed, and say which."""
    import textwrap

    rows = list(gpus)
    fields = list(LIST_COLUMNS)
    if len({g.vendor for g in rows}) > 1:
        fields.insert(1, ("vendor", "vendor"))
    headers = [label for _, label in fields] + (["derived"] if provenance else [])
    numeric = [f not in ("id", "vendor", "architecture", "segment", "ecc") for f, _ in fields] + [True] * provenance
    cells = [[_cell(gpu, f, provenance) for f, _ in fields] + ([str(len(gpu.derived))] if provenance else [])
             for gpu in rows]
    order = [f for f, _ in fields]
    drop = [order.index(f) for f in LIST_DROP_ORDER if f in order and f != sort]
    kept, head, lines = columns(headers, cells, numeric, width, drop)
    captions = []
    if provenance:
        captions.append(f"{DERIVED_MARK} derived by a rule of data/derivations.yaml ('catalog show' gives the "
                        f"formula); n/a{UNKNOWN_MARK} a Tensor Core rate the GPU has but no source or rule gives; "
                        "other values are sourced (cited in 'catalog show'); n/a alone is unknown or absent (for a "
                        "Tensor Core rate: absent)")
    gone = [headers[i] for i in range(len(headers)) if i not in kept]
    if gone:
        names = ", ".join(name.replace(" ", "\u00a0") for name in gone)  # (a name is not wrapped inside)
        captions.append(f"Left out at {width} columns: {names} (a wider terminal or --json shows them).")
    out = [*([title, ""] if title else []), head, "─" * len(head), *lines]
    for caption in captions:
        out += ["", *(line.replace("\u00a0", " ") for line in textwrap.wrap(caption, width or 200))]
    return Lines("\n".join(out))


def _detail_value(gpu: Gpu, field: str, formulas: Mapping[str, str]) -> str:
    """A field's value for ``catalog show``: derived values name their rule and formula; a
    null Tensor Core rate says whether the hardware lacks it or the catalog does not know it."""
    value = getattr(gpu, field)
    status = gpu.provenance(field)
    rule = gpu.derived_by.get(field)
    if rule is not None:
        formula = formulas.get(rule)
        return f"{fmt(value)}  (derived: {rule}" + (f", {formula})" if formula else ")")
    if value is None and status == "unknown" and field.startswith("tensor_"):
        return f"{NA}  (unknown: no source gives it and no rule applies)"
    if value is None and status == "absent":
        from gpusizer.hardware.catalog import TENSOR_SINCE

        if gpu.has_tensor_cores is False:
            return f"{NA}  (absent: no Tensor Cores)"
        return f"{NA}  (absent: Tensor Cores run it from {TENSOR_SINCE[field].capitalize()} on)"
    return fmt(value) if not isinstance(value, str) else value


def gpu_detail(gpu: Gpu, formulas: Mapping[str, str] | None = None, width: int | None = None) -> Table:
    """One entry, field by field; ``formulas`` (rule id -> formula) spell out derived values.
    ``width``: fit that many columns (long source addresses fold)."""
    from rich.table import Table

    table = Table(title=f"{gpu.name} ({gpu.id})", title_justify="left", show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for field in type(gpu).model_fields:
        if field in ("sources", "name", "id", "derived"):
            continue
        if field == "aliases":
            text = ", ".join(gpu.aliases) or NA
        elif field == "memory_gib":
            text = f"{fmt(gpu.memory_gib)} GiB ({format_bytes(gpu.memory_bytes, binary=False)})"
        else:
            text = _detail_value(gpu, field, formulas or {})
        table.add_row(field, text)
    for i, src in enumerate(gpu.sources, 1):
        covers = f" [{', '.join(src.fields)}]" if src.fields else ""
        table.add_row(f"source {i}", f"{src.title}{covers}" + (f"\n{src.url}" if src.url else ""))
    return table if width is None else fit_table(table, width)


def comparison_table(comparison: Comparison, width: int | None = None) -> Table | Group:
    """The GPUs side by side, each value with its ratio to the first GPU's. ``width``: fit that
    many columns: each ratio goes under its value when a line cannot hold both, and GPUs that
    still do not fit go on to further tables, the first GPU's values repeated in each."""
    from rich.console import Group

    from gpusizer.render.common import _minimum_width

    gpus = list(range(len(comparison.gpus)))
    if width is None:
        return _comparison_part(comparison, gpus, stacked=False)
    for stacked in (False, True):
        table = fit_table(_comparison_part(comparison, gpus, stacked), width)
        if _minimum_width(table) <= width:
            return table
    for size in range(len(gpus) - 1, 1, -1):  # the first GPU and size - 1 others a table
        others = gpus[1:]
        parts = [[0, *others[i:i + size - 1]] for i in range(0, len(others), size - 1)]
        tables = [fit_table(_comparison_part(comparison, cols, True, (n, len(parts))), width)
                  for n, cols in enumerate(parts, 1)]
        if all(_minimum_width(t) <= width for t in tables):
            return Group(*tables)
    return table  # (one GPU a table does not fit either: fit_table's caption says cells are cut)


def _comparison_part(comparison: Comparison, cols: list[int], stacked: bool,
                     part: tuple[int, int] | None = None) -> Table:
    from rich.table import Table

    first = comparison.gpus[0].id
    title = f"Side by side (ratios against {first})" + (f", part {part[0]} of {part[1]}" if part else "")
    table = Table(title=title, title_justify="left")
    table.add_column("", min_width=12)
    for i in cols:
        table.add_column(comparison.gpus[i].id, justify="right")
    for row in comparison.rows:
        cells = []
        for i in cols:
            text = fmt(row.values[i])
            if row.upper_bounds and row.upper_bounds[i] and row.values[i] is not None:
                text = f"<= {text}"  # an upper bound (the notes say why)
            if i > 0 and row.ratios[i] is not None:
                text += ("\n" if stacked else " ") + f"({fmt_ratio(row.ratios[i])})"
            cells.append(text)
        table.add_row(row.label, *cells)
    for _, label, values in comparison.facts:
        table.add_row(label, *(fmt(values[i]) for i in cols))
    return table


#: The zoo table's columns a narrow terminal leaves out, first to last.
MODELS_DROP_ORDER = ("vocab", "hidden", "heads/kv", "layers", "kind")


def models_table(models: Sequence[Model], width: int | None = None) -> Table:
    """The model zoo: shape at a glance; a missing dimension shows as n/a. ``width``: fit that
    many columns, leaving out :data:`MODELS_DROP_ORDER`'s columns as needed."""
    from rich.table import Table

    table = Table(title="Model zoo (data/models.yaml)", title_justify="left")
    for col in ("id", "kind", "params", "layers", "hidden", "heads/kv", "vocab"):
        table.add_column(col, justify="left" if col in ("id", "kind") else "right", no_wrap=col == "id")
    for m in models:
        # latent attention caches one latent for all heads: "MLA" instead of a KV head count
        heads = f"{m.heads}/{'MLA' if m.kv_lora_rank else m.n_kv_heads}" if m.heads else NA
        table.add_row(m.id, m.kind, format_count(m.params), show_value(m.layers), show_value(m.hidden), heads,
                      show_value(m.vocab))
    return table if width is None else fit_table(table, width, drop=MODELS_DROP_ORDER)
