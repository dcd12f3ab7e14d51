"""Rendering recommend results: a header saying how the workload was read, the
ranked table with the top reasons under each row, and the excluded GPUs.

The table is laid out by hand (fixed-width columns) because the reasons go on
their own lines under each row, which a rich Table cannot span.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpusizer.domain.parallelism import NODE_GPUS, within_node
from gpusizer.render.common import NA, bar, columns, fmt, show_bool, show_value, wrap_note
from gpusizer.units import format_bytes, format_count, format_duration, plural

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

    from gpusizer.ranking.configs import Configuration, Plan
    from gpusizer.ranking.search import GpuResult, Recommendation

#: Column labels for key-spec fields; {p} is the working precision.
FIELD_LABELS: dict[str, str] = {
    "tensor_tflops": "tensor TF {p}",
    "precision_tflops": "TFLOPS {p}",
    "precision_tflops_per_w": "TF/W {p}",
    "fp64_tflops": "FP64 TF",
    "fp32_tflops": "FP32 TF",
    "fp16_tflops": "FP16 TF",
    "memory_gib": "mem GiB",
    "bandwidth_gb_s": "GB/s",
    "ecc": "ECC",
    "nvlink_gb_s": "NVLink GB/s",
    "gpudirect_rdma": "RDMA",
    "tdp_w": "W",
    "fp64_ratio": "FP64:FP32",
    "fp16_ratio": "FP16:FP32",
    "fp16_speedup": "FP16 x FP32",
    "launch_price_usd": "launch $",
}
UNIT_SHORT = {"images/s": "img/s", "sequences/s": "seq/s", "tokens/s": "tok/s"}
MODE_WORDS = {"train": "training", "inference": "inference"}


def precision_words(precision: str, tf32: bool, mode: str = "train") -> str:
    """The precision table's description (for inference where it has one); strict FP32 says so
    (the rules read fp32 as strict and name tf32 apart)."""
    from gpusizer.domain.precision import precision_spec

    spec = precision_spec(precision)
    strict = "; strict here: no TF32" if spec.tf32_field is not None and not tf32 else ""
    words = spec.inference_description if mode == "inference" and spec.inference_description else spec.description
    return words + strict


def field_label(field: str, precision: str) -> str:
    return FIELD_LABELS.get(field, field).format(p=precision)


# --------------------------------------------------------------------------
# header


def header_lines(rec: Recommendation, rules_files: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    gpus = rec.gpus_per_node * rec.nodes
    cluster = plural(gpus, "GPU")
    if rec.nodes > 1 or rec.gpus_per_node > 1:
        cluster += f" ({plural(rec.nodes, 'node')} x {rec.gpus_per_node} per node)"
    if rec.plan is not None:  # (the optimizer chose each configuration's count; the ranking is of single GPUs)
        cluster += " in the ranking (the plan chooses its counts)"
    words = ("the frozen base in this precision, the adapters and their optimizer state in fp32 (peft with "
             "Trainer(bf16=True))" if rec.precision_from == "adapter default" else precision_words(rec.precision, rec.tf32, rec.mode))
    read = f"precision {rec.precision} ({rec.precision_from}): {words}"
    if rec.speed_method == "performance-model":
        read = f"{MODE_WORDS[rec.mode]}, {read}"
    read += f"; {cluster}"
    if rec.model_name:
        read += f"; model {rec.model_name} ({show_value(rec.params, format_count)} params)"
    if rec.model_precision != rec.precision and rec.model_name:
        read += f", sized as {rec.model_precision}"
    weights = " · ".join(f"{c.id} {c.weight:g} ({c.field})" for c in sorted(rec.criteria, key=lambda c: -c.weight))
    lines = [
        ("Workload", f"{rec.workload}: {rec.description}"),
        ("Read as", read),
        ("Weights", weights or "none"),
        ("Constraints", "; ".join(rec.constraints_applied) or "none (no --require, --budget, --max-power, --segment; "
                        "no model to fit)"),
        ("Speed", rec.speed_basis),
        ("Prices", rec.price_basis),
    ]
    if rules_files and len(rules_files) > 1:
        lines.append(("Rules", " + ".join(("bundled data/rules.yaml", *rules_files[1:]))))
    return lines


# --------------------------------------------------------------------------
# table


def _speed_cells(r: GpuResult, bars: bool = True) -> tuple[str, str]:
    s = r.speed
    if s is None or s.throughput_per_s is None:  # (why: the caution line under the row)
        return NA, NA
    rel = (f"{s.relative:.2f} {bar(s.relative, 8)}" if bars else f"{s.relative:.2f}") if s.relative is not None else ""
    unit = UNIT_SHORT.get(s.unit, s.unit)
    return rel, f"{fmt(float(s.throughput_per_s))} {unit}".strip()


def _value_cell(r: GpuResult) -> str:
    if r.value_per_kusd is not None:
        return fmt(float(r.value_per_kusd))
    return r.value_note or NA


def _price_cell(r: GpuResult) -> str:
    return f"${r.price_total_usd:,.0f}" if r.price_total_usd is not None else "unknown"


def _fits_cell(r: GpuResult) -> str:
    if r.fits is None:
        return "-"  # no model given: the fit was not checked
    if r.fit is not None and r.fits:
        return f"{show_bool(True)} ({format_bytes(r.fit.headroom_bytes, digits=1)} spare)"
    return show_bool(False)


def table_rows(
    rec: Recommendation, results: Sequence[GpuResult], *, bars: bool = True,
) -> tuple[list[str], list[list[str]], list[bool]]:
    value_unit = rec.value_unit
    for unit, short in UNIT_SHORT.items():
        value_unit = value_unit.replace(unit, short)
    headers = ["#", "GPU", "score", *(field_label(f, rec.precision) for f in rec.key_fields), "fits", "rel. speed",
               "speed", "price", value_unit or "value"]
    numeric = [True, False, True, *([True] * len(rec.key_fields)), False, False, True, True, True]
    rows = []
    for r in results:
        rel, absolute = _speed_cells(r, bars)
        rows.append([
            str(r.rank) if r.rank is not None else "-", r.label, f"{r.score:.1f}",
            *(fmt(r.key_specs.get(f)) for f in rec.key_fields),
            _fits_cell(r), rel, absolute, _price_cell(r), _value_cell(r),
        ])
    return headers, rows, numeric


def fitted_table(rec: Recommendation, results: Sequence[GpuResult],
                 width: int | None) -> tuple[str, list[str], list[str]]:
    """The ranking table laid out within ``width`` columns: the bars go first, then the key-spec
    columns (least important first), then value and fits; numbers are never cut. None: every column.
    Returns the header line, the row lines and the headers of the columns left out."""
    for bars in (True, False):
        headers, rows, numeric = table_rows(rec, results, bars=bars)
        _, head, lines = columns(headers, rows, numeric, None)
        if width is None or max(len(x) for x in (head, *lines)) <= width:
            return head, lines, []
    n_keys = len(rec.key_fields)
    fits_col, value_col = 3 + n_keys, len(headers) - 1
    # the key specs go first (least important first), then value (unless it is the sort key), fits and score
    drop_order = [*(3 + i for i in reversed(range(n_keys))), *([value_col] if rec.sort != "value" else []),
                  fits_col, 2]
    kept, head, lines = columns(headers, rows, numeric, width, drop_order)
    return head, lines, [headers[i] for i in range(len(headers)) if i not in kept]


def reason_lines(r: GpuResult, limit: int | None = 3) -> list[str]:
    """The top ``limit`` contributions (None: all), then every advisory that fired."""
    out = []
    for c in r.reasons[:limit]:
        value = fmt(c.value)
        best = f" (best {fmt(c.best)})" if c.best is not None and not isinstance(c.value, bool) else ""
        out.append(f"+{c.points:4.1f} {c.field} {value}{best}: {c.message}")
    out += _cautions(r)
    return out


def _cautions(r: GpuResult) -> list[str]:
    out = [f"  ! {a.message}" for a in r.advisories]
    if r.outclassed_by:
        out.append(f"  ! {r.outclassed_by} is at least as fast for no more money")
    if r.speed is not None and r.speed.note and r.speed.throughput_per_s is None:
        out.append(f"  ! speed: {r.speed.note}")
    if r.speed is not None and r.speed.upper_bound and r.speed.throughput_per_s is not None:
        out.append("  ! speed is an upper bound (decode timed without the per-SM cap)")
    return out


def short_reasons(r: GpuResult, limit: int = 3) -> list[str]:
    """One line of reasons: the top ``limit`` contributions' points and values, then the first
    caution (with how many more ``--explain`` shows)."""
    why = " · ".join(f"+{c.points:.1f} {c.field} {fmt(c.value)}" for c in r.reasons[:limit])
    out = [why] if why else []
    cautions = _cautions(r)
    if cautions:
        more = f" (+{len(cautions) - 1} more)" if len(cautions) > 1 else ""
        out.append(cautions[0] + more)
    return out


def ranking_text(rec: Recommendation, *, reasons: int | None = 3, width: int | None = None,
                 explain: bool = True) -> str:
    """The ranking table with reasons under each row: every reason's wording with ``explain``
    (wrapped, never cut), else one line of points and values and the first caution."""
    head, lines, gone = fitted_table(rec, rec.ranked, width)
    indent = " " * 4
    out = [head, "-" * len(head)]
    for r, line in zip(rec.ranked, lines, strict=True):
        out.append(line)
        if explain:
            out += [wrap_note(reason.lstrip(), width, lead=indent) if width else indent + reason.lstrip()
                    for reason in reason_lines(r, reasons)]
        else:
            out += [_fit_words(indent + reason, width) for reason in short_reasons(r)]
    if gone:
        out.append(wrap_note(f"{', '.join(gone)} (a wider terminal or --json shows them)", width or 200,
                             lead=f"Left out at {width} columns: "))
    return "\n".join(out)


def _fit_words(line: str, width: int | None) -> str:
    """A reason line within ``width``: its wording is shortened at a word with "…"; the figures before
    the ": " that starts the wording are never cut."""
    if width is None or len(line) <= width:
        return line
    if ": " not in line:  # figures only: cut between them
        cut = line.rfind(" · ", 0, width - 2)
        return line if cut < 0 else line[:cut] + " …"
    keep = line.index(": ") + 2
    cut = line.rfind(" ", keep, width - 1)
    return line if cut <= keep else line[:cut] + " …"


def excluded_text(rec: Recommendation) -> str:
    if not rec.excluded:
        return "Excluded: none"
    out = [f"Excluded ({len(rec.excluded)}):"]
    width = max(len(r.label) for r in rec.excluded)
    for r in rec.excluded:
        reasons = "; ".join(f"[{f.rule}] {f.message}" for f in r.excluded_by)
        out.append(f"  {r.label.ljust(width)}  {reasons}")
    return "\n".join(out)


def sharded_flags(rec: Recommendation, strategy: str, gpus: int) -> str | None:
    """The options that ask for a sharded run over ``gpus`` GPUs per node (as ShardedOption
    counts them) on the run's nodes: whole nodes of :data:`NODE_GPUS` past one node's worth, and
    None for tensor parallelism past a node, which no one runs."""
    if gpus <= NODE_GPUS:
        return f"--gpus {gpus} --strategy {strategy}" + (f" --nodes {rec.nodes}" if rec.nodes > 1 else "")
    if within_node(strategy):
        return None
    nodes = -(-gpus * rec.nodes // NODE_GPUS)
    return f"--gpus {NODE_GPUS} --nodes {nodes} --strategy {strategy}"


def _gpu_list(ids: Sequence[str], most: int = 4) -> str:
    return ", ".join(ids[:most]) + (f" and {len(ids) - most} more" if len(ids) > most else "")


def sharded_text(rec: Recommendation) -> str:
    """GPUs the memory fit alone excluded, and the sharded run that would hold the model."""
    lines = [f"Excluded only because {rec.model_name} does not fit as configured; sharded, it fits with:"]
    for opt in rec.sharded_options:
        flags = sharded_flags(rec, opt.strategy, opt.gpus)
        if flags is not None:
            lines.append(f"  {flags}: {_gpu_list(opt.gpu_ids)}")
    lines.append("Rerun with those options to rank the GPUs as a group; price, power and speed then count every GPU.")
    return "\n".join(lines)


def exclusion_summary(rec: Recommendation, width: int | None = None, most: int = 5) -> list[str]:
    """Why GPUs were excluded: a line per kind of reason (a constraint, and its message with the
    figures left out) with its count and one example, most first, at most ``most`` lines; ``width``:
    wrap each within that many columns."""
    import re

    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for r in rec.excluded:
        for flag in r.excluded_by:
            kind = re.sub(r"\d[\d,.]*", "#", flag.message)
            groups.setdefault((flag.rule, kind), []).append((r.label, flag.message))
    out = []
    for (rule, _), hits in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:most]:
        label, message = hits[-1]  # (the list runs from the weakest GPU to the strongest)
        line = f"{plural(len(hits), 'GPU')}, e.g. {label}: {message}"
        out.append(wrap_note(line, width, lead=f"  [{rule}] ") if width else f"  [{rule}] {line}")
    return out


def next_steps(rec: Recommendation, most: int = 3) -> list[str]:
    """Up to ``most`` changes to the command that would let GPUs qualify: the sharded runs that hold
    the model (fewest GPUs first), then leaving out the constraint that excludes the most GPUs."""
    out = []
    for opt in rec.sharded_options:
        flags = sharded_flags(rec, opt.strategy, opt.gpus)
        if flags is not None:
            out.append(f"  add {flags}: fits on {_gpu_list(opt.gpu_ids, 3)}")
    alone: dict[str, int] = {}  # GPUs a constraint alone excludes: relaxing it lets them qualify
    for r in rec.excluded:
        rules = {flag.rule for flag in r.excluded_by}
        if len(rules) == 1 and r.excluded_by[0].kind != "fit":
            alone[r.excluded_by[0].rule] = alone.get(r.excluded_by[0].rule, 0) + 1
    for rule, n in sorted(alone.items(), key=lambda kv: -kv[1]):
        out.append(f"  relax the {rule} constraint: {plural(n, 'GPU')} fail{'s' if n == 1 else ''} only it")
    return out[:most]


def _hours_cell(hours: float | None) -> str:
    return format_duration(hours * 3600, short=True) if hours is not None else NA


def plan_text(plan: Plan, configurations: Sequence[Configuration] | None = None, width: int | None = None) -> str:
    """The configurations, best first by the objective, with one line of reasons under each;
    ``configurations``: these instead of the plan's (its closest miss, numbered "-"). ``width``: the
    host count, then the price's kind and date, go where the table would not fit (the row's label
    names its nodes), and the lines under each row wrap; a serving table still wider drops each
    label's layout, "(10,527 x TP=8)", which the line under it then gives ("TP=8, 10,527 replicas").
    No number is cut."""
    shown = plan.configurations if configurations is None else configurations
    headers, rows, numeric, drop = _plan_rows(plan, shown)
    kept, head, lines = columns(headers, rows, numeric, width, drop)
    serving = any(c.concurrency is not None for c in shown)
    short = serving and width is not None and max(map(len, (head, *lines))) > width
    if short:
        headers, rows, numeric, drop = _plan_rows(plan, shown, short=True)
        kept, head, lines = columns(headers, rows, numeric, width, drop)
    out = [head, "-" * len(head)]
    for c, line in zip(shown, lines, strict=True):
        out.append(line)
        replicas = (f", {plural(c.replicas, 'replica')}, ITL {_itl_ms(c.itl_s)} ms"
                    if c.replicas is not None and c.concurrency is not None and c.itl_s is not None else "")
        # a serving replica's layout is its tensor-parallel size, whatever the run's strategy word
        how = f"TP={c.tp}" if (short or c.replicas is not None) and c.tp is not None and c.tp > 1 else c.strategy
        replicas += f", {c.spare_gpus:,} spare" if short and c.spare_gpus else ""
        why = f"{how}{replicas}{_global_batch(c)}, score {c.score:.0f}/100" + (
            f": {', '.join(c.reason_fields)}" if c.reason_fields else "")
        under = [why]
        if c.fewer_reason and c.budget_buys_gpus is not None:
            under.append(f"{c.gpus_total:,} of the {c.budget_buys_gpus:,} the budget buys: {c.fewer_reason}")
        if c.nodes > 1 and c.transport == "tcp":
            under.append("! across nodes over TCP, staged through host memory (no GPUDirect RDMA)")
        if c.upper_bound:
            under.append("! throughput is an upper bound (decode without the per-SM cap)")
        out += [wrap_note(u, width, lead="    " if not u.startswith("!") else "      ") if width
                else ("    " if not u.startswith("!") else "      ") + u for u in under]
    gone = [headers[i] for i in range(len(headers)) if i not in kept]
    if gone:
        out.append(wrap_note(f"{', '.join(gone)} (a wider terminal or --json shows them)", width or 200,
                             lead=f"Left out at {width} columns: "))
    return "\n".join(out)


def _plan_rows(plan: Plan, shown: Sequence[Configuration],
               short: bool = False) -> tuple[list[str], list[list[str]], list[bool], list[int]]:
    """The plan table's headers, cells and numeric flags, and the columns to drop first where it does
    not fit: the hosts (the label names its nodes), then the price's kind and date. ``short``: labels
    without their layout."""
    cloud = plan.objective not in ("budget", "serve")  # (the cloud objectives rent; these two buy)
    unit = next((UNIT_SHORT.get(c.unit, c.unit) for c in shown), "speed")
    # serving: replicas exchange nothing, so the sequences each decodes stand where scaling would
    serving = any(c.concurrency is not None for c in shown)
    hosts = any(c.hosts is not None for c in shown)
    headers = ["#", "configuration", *(["hosts"] if hosts else []), "GPUs", unit, "seqs" if serving else "eff.",
               *(["$/h", "time", "cost"] if cloud else ["price"]), "priced"]
    numeric = [True, False, *([True] if hosts else []), True, True, True, *([True] * (3 if cloud else 1)), False]
    rows = []
    for c in shown:
        money = ([fmt(c.usd_per_hour), _hours_cell(c.hours), f"${c.cost_usd:,.0f}" if c.cost_usd is not None else NA]
                 if cloud else [f"${c.price_total_usd:,.0f}" if c.price_total_usd is not None else NA])
        eff = (f"{c.concurrency:,}" if c.concurrency is not None else NA) if serving else (
            f"{c.scaling_efficiency:.0%}" if c.scaling_efficiency is not None else NA)
        # (a cloud price is always on-demand, as the notes say)
        priced = f"{c.price.basis} {c.price.when}" if c.price is not None else c.usd_per_hour_date or NA
        label = c.label.split(" (")[0] if short else c.label
        rows.append([str(c.rank or "-"), label, *([f"{c.hosts:,}" if c.hosts is not None else NA] if hosts else []),
                     f"{c.gpus_total:,}", f"{c.throughput_per_s:,.0f}", eff, *money, priced])
    drop = [*([2] if hosts else []), len(headers) - 1]
    return headers, rows, numeric, drop


def _global_batch(c: Configuration) -> str:
    """A training configuration's samples (and tokens) per optimizer step, in words; "" where none."""
    if c.global_batch is None:
        return ""
    return f", global batch {c.global_batch:,} {c.unit.removesuffix('/s')}"


def verdict(rec: Recommendation) -> str:
    """The answer in one sentence: the first GPU and its speed, and the best value among those listed."""
    if rec.plan is not None and rec.plan.configurations:
        config = rec.plan.configurations[0]
        unit = UNIT_SHORT.get(config.unit, config.unit)
        return f"{config.label} is the best configuration for {rec.plan.goal} ({fmt(config.throughput_per_s)} {unit})."
    if rec.plan is not None and rec.plan.shortfall:  # (a plan that nothing meets: the ranking is no answer)
        return rec.plan.shortfall[0].upper() + rec.plan.shortfall[1:] + "."
    if not rec.ranked:
        return f"No GPU qualifies: all {len(rec.excluded)} candidates were excluded."
    top = rec.ranked[0]
    words = f"{top.label} ranks first of {rec.qualified} qualifying GPUs by {rec.sort}"
    if top.speed is not None and top.speed.throughput_per_s is not None:
        bound = ", an upper bound" if top.speed.upper_bound else ""
        words += f" ({fmt(float(top.speed.throughput_per_s))} {UNIT_SHORT.get(top.speed.unit, top.speed.unit)}{bound})"
    priced = [r for r in rec.ranked if r.value_per_kusd is not None]
    if priced:
        best = max(priced, key=lambda r: r.value_per_kusd or 0.0)
        words += f"; best value listed: {best.label} ({fmt(float(best.value_per_kusd or 0.0))} {rec.value_unit})"
    return words + "."


#: The header lines shown without --explain.
SHORT_HEADER = ("Workload", "Read as", "Constraints")


def _header(rec: Recommendation, rules_files: tuple[str, ...], explain: bool) -> Table:
    """The header as a grid, so a long value wraps under itself, not under its key."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True, min_width=11)
    grid.add_column()
    for key, value in header_lines(rec, rules_files):
        if explain or key in SHORT_HEADER:
            grid.add_row(key, value)
    grid.add_row("Verdict", verdict(rec))
    return grid


def recommend_renderables(
    rec: Recommendation, *, show_excluded: bool = False, rules_files: tuple[str, ...] = (), width: int | None = None,
    explain: bool = False,
) -> list[Text | Table]:
    """What recommend prints; ``width``: lay the ranking out within that many columns (None: all columns).
    ``explain``: the whole header, every reason in words, and every exclusion; else the answer, one
    line of reasons per GPU, and a summary of the exclusions."""
    from rich.text import Text

    parts: list[Text | Table] = [_header(rec, rules_files, explain)]
    if rec.ranked or rec.plan is not None:
        parts.append(Text(""))
    if rec.plan is not None:
        plan = rec.plan
        counts = (f"{len(plan.configurations)} of {plan.met}, {plan.considered} assessed" if plan.met
                  else f"none of {plan.considered} assessed meets it" if plan.considered
                  else "none is within it to assess")
        parts.append(Text(f"Configurations for {plan.goal} ({counts})", style="bold"))
        if plan.configurations:
            parts.append(Text(plan_text(plan, width=width), no_wrap=True, overflow="ignore"))
        elif plan.closest is not None:
            parts += [Text("The nearest miss:"),
                      Text(plan_text(plan, [plan.closest], width=width), no_wrap=True, overflow="ignore")]
        else:
            parts.append(Text("None meets the objective."))
        # the plan's own notes (those of the ranking print with it)
        own = [note for note in plan.notes if note not in rec.notes]
        parts += [Text(wrap_note(note, width, lead="  ") if width else f"  {note}") for note in own]
        if plan.held_back:
            from gpusizer.ranking.plan import HELD_NAMED

            sizes = ", ".join(f"--gpus {c.gpus_per_node} --nodes {c.nodes} ({c.gpu_id})" for c in plan.held_back[:HELD_NAMED])
            line = f"to rank such builds with the others, add {sizes}"
            parts.append(Text(wrap_note(line, width, lead="  ") if width else f"  {line}"))
        parts.append(Text(""))
    if rec.ranked:
        title = f"Top {len(rec.ranked)} of {rec.qualified} qualifying GPUs, by {rec.sort}"
        text = ranking_text(rec, width=width, reasons=None if explain else 3, explain=explain)
        parts += [Text(title, style="bold"), Text(text, no_wrap=True, overflow="ignore")]
    if show_excluded or explain:
        parts += [Text(""), Text(excluded_text(rec))]
    # a plan that lists configurations is the answer: the one-GPU ranking's exclusions then say no "why";
    # a serving plan lays out (shards) each GPU itself and refuses GPU counts, so it suggests none
    planned = rec.plan is not None and (bool(rec.plan.configurations) or rec.plan.objective == "serve")
    if not (show_excluded or explain) and rec.excluded:
        summary = "Excluded" if rec.ranked or planned else "Why"
        parts += [Text("")] if str(parts[-1]) else []
        parts.append(Text(f"{summary}: {len(rec.excluded)} GPUs excluded, some for several reasons (--explain "
                          "lists each):"))
        parts += [Text(line) for line in exclusion_summary(rec, width)]
    if not rec.ranked and not planned and next_steps(rec):
        parts += [Text(""), Text("Next, try:", style="bold"), *(Text(line) for line in next_steps(rec))]
    elif rec.sharded_options and not planned:  # (a plan chose its sharded counts: adding them would end it)
        parts += [Text(""), Text(sharded_text(rec))]
    for w in rec.why_not:
        parts += [Text(""), Text(f"Why not {w.asked}?", style="bold")]
        # (a reason wraps under its own first word, so each starts a line of its own)
        parts += [Text(textwrap.fill(reason, width=max(width or 80, 40), initial_indent="  ", subsequent_indent="    ",
                                     break_on_hyphens=False)) for reason in w.reasons]
    return parts


def _itl_ms(seconds: float) -> str:
    """An inter-token latency in ms: whole ms from 10, one decimal below (a small model's 1.7 ms)."""
    ms = seconds * 1e3
    return f"{ms:,.0f}" if ms >= 10 else f"{ms:.1f}"
