"""Rendering ``serve`` results: one row per GPU type, and a one-line verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpusizer.render.common import NA, fit_table
from gpusizer.units import format_bytes

if TYPE_CHECKING:
    from rich.table import Table

    from gpusizer.api import ServeResults


def serve_table(res: ServeResults, width: int | None = None) -> Table:
    """Each GPU type: how many it takes (TP) and how many sequences fit; ``width``: fit that
    many columns."""
    from rich.table import Table

    want = f"{res.users} sequences" if res.users else "one sequence"
    table = Table(title=f"Serving {res.model}: {want} of {res.context_tokens:,} tokens", title_justify="left")
    for col in ("GPU", "memory", "GPUs (TP)", "sequences", "weights/GPU", "KV cache/GPU"):
        table.add_column(col, justify="left" if col == "GPU" else "right", no_wrap=col == "GPU")
    rows = sorted(res.rows, key=lambda r: (r.gpus is None, r.gpus or 0, -r.max_concurrency))
    for row in rows:
        cap = row.capacity or (row.tried[-1] if row.tried else None)
        table.add_row(
            row.gpu_id, format_bytes(row.memory_bytes), str(row.gpus) if row.gpus else NA, f"{row.max_concurrency:,}",
            format_bytes(cap.weights_bytes) if cap else NA,
            format_bytes(max(0, cap.kv_budget_bytes)) if cap else NA,
        )
    return table if width is None else fit_table(table, width, drop=("memory", "weights/GPU"))


def serve_verdict(res: ServeResults) -> str:
    fitting = [r for r in res.rows if r.gpus is not None]
    if not fitting:
        return ("Verdict: no GPU checked serves this within one node's tensor-parallel group (try a smaller "
                "context, an fp8 KV cache or quantised weights)")
    best = min(fitting, key=lambda r: (r.gpus or 0, -r.max_concurrency))
    tp = f" at TP={best.gpus}" if (best.gpus or 1) > 1 else ""
    return (f"Verdict: {best.gpus} x {best.gpu_id}{tp} holds {best.max_concurrency:,} sequences of "
            f"{res.context_tokens:,} tokens; serves on {len(fitting)} of {len(res.rows)} GPU types")
