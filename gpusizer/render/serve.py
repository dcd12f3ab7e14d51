"""Rendering ``serve`` results: one row per GPU type, and a one-line verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpusizer.render.common import NA, fit_table
from gpusizer.units import format_bytes, plural

if TYPE_CHECKING:
    from rich.table import Table

    from gpusizer.api import ServeResults
    from gpusizer.api._serve import ServeRow


def shown_rows(res: ServeResults, top: int | None = None) -> tuple[ServeRow, ...]:
    """The rows a table shows: those that serve first (fewest GPUs, then most sequences),
    then those that do not; the first ``top`` of them (all without ``top``)."""
    rows = sorted(res.rows, key=lambda r: (r.gpus is None, r.gpus_total or 0, r.gpus or 0, -r.max_concurrency))
    return tuple(rows if top is None else rows[:top])


def serve_table(res: ServeResults, width: int | None = None, top: int | None = None) -> Table:
    """Each GPU type: how many it takes (TP) and how many sequences fit; ``width``: fit that
    many columns; ``top``: show that many rows (``shown_rows``)."""
    from rich.table import Table

    want = plural(res.users, "sequence") if res.users else "one sequence"
    target = f", ITL <= {res.max_itl_s * 1e3:g} ms" if res.max_itl_s is not None else ""
    table = Table(title=f"Serving {res.model}: {want} of {res.context_tokens:,} tokens{target}", title_justify="left")
    # with a latency target, replicas x TP GPUs share the users; ITL: what each user then sees
    itl = res.users is not None  # (sized for users: each row's deployment has its latency)
    cols = ("GPU", "memory", "GPUs (TP)", "sequences", *(("ITL ms",) if itl else ()), "weights/GPU", "KV cache/GPU")
    for col in cols:
        table.add_column(col, justify="left" if col == "GPU" else "right", no_wrap=col == "GPU")
    for row in shown_rows(res, top):
        cap = row.capacity or (row.tried[-1] if row.tried else None)
        gpus = NA if not row.gpus else str(row.gpus) if row.replicas == 1 else f"{row.replicas:,} x {row.gpus}"
        table.add_row(
            row.gpu_id, format_bytes(row.memory_bytes), gpus, f"{row.max_concurrency:,}",
            *((f"{row.itl_s * 1e3:,.1f}" if row.itl_s is not None else NA,) if itl else ()),
            format_bytes(cap.weights_bytes) if cap else NA,
            format_bytes(max(0, cap.kv_budget_bytes)) if cap else NA,
        )
    return table if width is None else fit_table(table, width, drop=("memory", "weights/GPU"))


def left_out_line(res: ServeResults, top: int | None) -> str | None:
    """What the table left out, counted: GPU types that serve and that do not (as the
    verdict's "serves on X of Y")."""
    shown = {r.gpu_id for r in shown_rows(res, top)}
    rest = [r for r in res.rows if r.gpu_id not in shown]
    if not rest:
        return None
    serving = sum(r.gpus is not None for r in rest)
    others = len(rest) - serving
    parts = ([f"{plural(serving, 'more GPU type')} that serve{'s' if serving == 1 else ''}"]
             if serving else []) + ([f"{others} that do{'es' if others == 1 else ''} not"] if others else [])
    return f"Not shown: {' and '.join(parts)} (--top {len(res.rows)} or --json lists them)."


def serve_verdict(res: ServeResults) -> str:
    fitting = [r for r in res.rows if r.gpus is not None]
    held = any(c.max_concurrency >= 1 for r in res.rows for c in r.tried)  # (memory holds a sequence somewhere)
    if not fitting and res.max_itl_s is not None and held:
        return (f"Verdict: no GPU checked decodes even one sequence within {res.max_itl_s * 1e3:g} ms a token in "
                "one node's tensor-parallel group (try a looser target, quantised weights or a smaller model)")
    if not fitting:
        return ("Verdict: no GPU checked serves this within one node's tensor-parallel group (try a smaller "
                "context, an fp8 KV cache or quantised weights)")
    best = min(fitting, key=lambda r: (r.gpus_total or 0, r.gpus or 0, -r.max_concurrency))
    tp = f" at TP={best.gpus}" if (best.gpus or 1) > 1 else ""
    if res.users is not None and best.itl_s is not None and best.concurrency is not None:
        total = best.gpus_total or 0
        groups = (f"{total:,} x {best.gpu_id}" + (f" as {best.replicas:,} x TP={best.gpus}" if best.replicas > 1
                                                   else tp))
        verb = "serves" if total == 1 else "serve"
        target = f" (target {res.max_itl_s * 1e3:g})" if res.max_itl_s is not None else ""
        return (f"Verdict: {groups} {verb} "
                f"{plural(res.users, 'sequence')} of {res.context_tokens:,} tokens, up to {best.concurrency:,} "
                f"a replica, at {best.itl_s * 1e3:,.1f} ms a token{target}; serves on "
                f"{len(fitting)} of {plural(len(res.rows), 'GPU type')}")
    return (f"Verdict: {best.gpus} x {best.gpu_id}{tp} holds {plural(best.max_concurrency, 'sequence')} of "
            f"{res.context_tokens:,} tokens; serves on {len(fitting)} of {plural(len(res.rows), 'GPU type')}")
