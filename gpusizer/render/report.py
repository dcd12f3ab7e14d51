"""Reports for ``--report FILE``: the command's result as a self-contained HTML page,
one SVG of its plots, or Markdown tables with the plots in sibling SVG files.

Everything here is built from a result's :meth:`document` (the dict ``--json``
prints), so a report shows exactly the numbers the JSON does. The plots are drawn
by matplotlib, which comes with the optional extra ``gpusizer[report]``; it is
imported only inside the functions that draw, so the default install never loads
it. Text in the SVG stays text (``svg.fonttype: none``): the labels can be searched
and read by a browser, and the files are small.

What each command's report holds:

* ``fit-model``: the memory breakdown as one stacked bar (GiB), with the peak and
  the checked GPUs' capacities marked, and the per-GPU table;
* ``estimate``: the scaling curve (throughput and per-GPU efficiency against the
  GPU count) and the step-time breakdown (ms), with the summary and scaling tables;
* ``recommend``: the ranked GPUs' speed and their score by rule, and the ranking
  table with each GPU's reasons;
* every report: the resolved inputs (the JSON ``input``) and the gpusizer version.
"""

from __future__ import annotations

import html
import io
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpusizer import __version__
from gpusizer.errors import MissingExtraError, UsageError
from gpusizer.render.common import NA, show_bool
from gpusizer.render.fit import COMPONENTS
from gpusizer.units import GIB, format_count

#: the report formats, by the file's suffix
FORMATS: dict[str, str] = {".html": "html", ".svg": "svg", ".md": "md"}
INSTALL = "pip install 'gpusizer[report]'"
#: the first line of an SVG file of its own (an SVG inlined in HTML goes without it)
XML_DECLARATION = '<?xml version="1.0" encoding="utf-8" standalone="no"?>\n'

#: matplotlib's tab10, the colours of the plots' series in order
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
#: at most this many GPUs in the recommend plots and ranking table
MAX_RANKED = 15
#: at most this many GPU capacities marked on the memory bar
MAX_MARKED_GPUS = 6

Doc = Mapping[str, Any]
Rows = list[list[str]]


def report_format(path: Path) -> str:
    """The report format ``path``'s suffix asks for: html, svg or md; any other is a usage error."""
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        given = f"not {path.suffix} ({path.name})" if path.suffix else f"and '{path}' has no suffix"
        raise UsageError(f"the report file must end in .html, .svg or .md, {given}", field="report")
    return kind


def require_matplotlib() -> None:
    """Raise MissingExtraError unless matplotlib (``gpusizer[report]``) can be imported."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise MissingExtraError("reports need matplotlib", hint=INSTALL)
    try:
        import matplotlib  # noqa: F401  (a broken install fails here, not halfway through a report)
    except ImportError as exc:
        raise MissingExtraError(f"reports need matplotlib, which cannot be imported: {exc}", hint=INSTALL) from None


# --------------------------------------------------------------------------
# the report's parts, independent of the format


@dataclass(frozen=True)
class Plot:
    """One picture: ``draw`` fills a matplotlib (sub)figure; ``height`` is in inches."""

    name: str
    title: str
    height: float
    draw: Callable[[Any], None]


@dataclass(frozen=True)
class Table:
    title: str
    header: list[str]
    rows: Rows
    note: str = ""


@dataclass
class Report:
    command: str
    title: str
    plots: list[Plot] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    inputs: Rows = field(default_factory=list)
    version: str = __version__


def build_report(document: Doc) -> Report:
    """The plots and tables for one command's result document."""
    command = str(document.get("command") or "")
    results = document.get("results") or {}
    builders: dict[str, Callable[[Doc, Doc], Report]] = {
        "fit-model": _fit_report, "estimate": _estimate_report, "recommend": _recommend_report}
    build = builders.get(command)
    if build is None:
        raise UsageError(f"no report for the {command or 'unnamed'} command", field="report")
    report = build(results, document.get("input") or {})
    report.command = command
    report.notes = [str(n) for n in document.get("notes") or ()]
    report.inputs = [[str(k), _value(v)] for k, v in (document.get("input") or {}).items()]
    return report


def _value(value: object) -> str:
    """An input's value as text: null as n/a, lists joined, other structures as JSON."""
    if value is None:
        return NA
    if isinstance(value, bool):
        return show_bool(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(_value(v) for v in value) if value else "none"
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _gib(value: object) -> str:
    return NA if not isinstance(value, (int, float)) else f"{value / GIB:,.2f} GiB"


def _num(value: object, unit: str = "", digits: int = 0) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return NA
    return f"{value:,.{digits}f}" + (f" {unit}" if unit else "")


def _pct(value: object) -> str:
    return NA if not isinstance(value, (int, float)) else f"{value:.0%}"


# --------------------------------------------------------------------------
# fit-model


def memory_segments(breakdown: Doc) -> list[tuple[str, str, int]]:
    """(JSON key, label, bytes) of each memory component the bar stacks, as the
    terminal's breakdown table lists them (empty components left out)."""
    return [(key, label, int(breakdown.get(key) or 0)) for key, label in COMPONENTS if breakdown.get(key)]


def _fit_report(results: Doc, inputs: Doc) -> Report:
    b = results.get("breakdown") or {}
    params = results.get("params")
    shown = format_count(params) if isinstance(params, (int, float)) else NA
    report = Report("fit-model", f"Memory per GPU: {results.get('model')} ({shown} params)")
    if b:
        report.plots.append(Plot("memory", "Memory per GPU", 2.8, lambda fig: _draw_memory(fig, results)))
        rows = [[label, _gib(v), f"{v:,}"] for _, label, v in memory_segments(b)]
        rows.append([f"peak total (at the {b.get('peak_phase')} phase)", _gib(b.get("total_bytes")),
                     f"{int(b.get('total_bytes') or 0):,}"])
        report.tables.append(Table("Memory breakdown", ["component", "GiB", "bytes"], rows, _fit_caption(b)))
    gpus = results.get("gpus") or []
    rows = [[str(g.get("gpu_id") or g.get("gpu_name")), _gib(g.get("memory_bytes")), _value(g.get("fits")),
             _gib(g.get("headroom_bytes")), _value(g.get("max_batch")), _value(g.get("min_gpus"))] for g in gpus]
    if rows:
        report.tables.append(Table("GPUs", ["GPU", "memory", "fits", "headroom", "max batch/GPU", "min GPUs"], rows))
    report.tables.append(Table("Verdict", ["verdict"], [[str(results.get("verdict") or NA)]]))
    return report


def _fit_caption(b: Doc) -> str:
    summed = sum(v for _, _, v in memory_segments(b))
    total = int(b.get("total_bytes") or 0)
    if summed > total:
        return (f"The peak ({_gib(total)}, at the {b.get('peak_phase')} phase) is less than the sum of the "
                f"components ({_gib(summed)}): not all of them are live at once.")
    return f"The components add up to the peak ({_gib(total)})."


def _draw_memory(fig: Any, results: Doc) -> None:
    b = results["breakdown"]
    ax = fig.subplots()
    left = 0.0
    for i, (key, label, value) in enumerate(memory_segments(b)):
        gib = value / GIB
        bars = ax.barh([0], [gib], height=0.6, left=left, color=PALETTE[i % len(PALETTE)],
                       label=f"{label} {gib:,.2f} GiB")
        bars.patches[0].set_gid(f"segment-{key}")
        left += gib
    total = int(b.get("total_bytes") or 0) / GIB
    ax.plot([total, total], [-0.4, 0.4], color="black", linewidth=2.5, gid="peak")
    ax.annotate(f"peak {total:,.2f} GiB", (total, 0.42), ha="center", va="bottom", fontsize=9)
    capacities: dict[float, list[str]] = {}
    for g in [g for g in results.get("gpus") or [] if g.get("memory_bytes")][:MAX_MARKED_GPUS]:
        capacities.setdefault(g["memory_bytes"] / GIB, []).append(str(g.get("gpu_id") or g.get("gpu_name")))
    for cap, names in capacities.items():
        ax.axvline(cap, color="#555555", linestyle="--", linewidth=1)
        ax.annotate(", ".join(names), (cap, -0.5), ha="center", va="top", fontsize=8, color="#444444")
    ax.set_yticks([])
    ax.set_ylim(-0.75, 0.65)
    ax.set_xlabel("memory per GPU (GiB)")
    ax.set_xlim(0, max([left, total, *capacities]) * 1.05 or 1)
    fig.legend(loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    ax.set_title("Memory per GPU by component (dashed: the GPUs' capacity)", fontsize=10, loc="left")


# --------------------------------------------------------------------------
# estimate


def step_parts(results: Doc) -> list[tuple[str, str, float]]:
    """(JSON key, label, seconds) of the step-time bars: each resource's busy time, then the step."""
    parts = [("compute_s", "compute"), ("memory_s", "memory"), ("comm_exposed_s", "communication (exposed)"),
             ("comm_s", "communication (in all)"), ("overhead_s", "fixed overhead"), ("step_time_s", "step")]
    out = []
    for key, label in parts:
        value = results.get(key)
        if not isinstance(value, (int, float)) or (value <= 0 and key not in ("compute_s", "memory_s", "step_time_s")):
            continue
        if key == "comm_s" and value <= (results.get("comm_exposed_s") or 0):
            continue  # (nothing hidden behind compute: the exposed bar says it all)
        out.append((key, label, float(value)))
    return out


def _estimate_report(results: Doc, inputs: Doc) -> Report:
    unit = str(results.get("throughput_unit") or "samples/s")
    n = results.get("gpus_total") or 1
    where = f"{n} x {results.get('gpu')}" if n > 1 else str(results.get("gpu"))
    report = Report("estimate", f"Estimate: {inputs.get('model') or 'the model'} on {where}")
    if not results.get("fits"):
        report.tables.append(Table("Does not fit", ["reason", "hint"],
                                   [[str(results.get("reason") or NA), str(results.get("hint") or "")]]))
        return report
    curve = results.get("scaling_curve") or []
    if curve:
        report.plots.append(Plot("scaling", "Scaling", 3.0, lambda fig: _draw_scaling(fig, curve, unit)))
    report.plots.append(Plot("step", "Step time", 2.4, lambda fig: _draw_step(fig, results)))
    memory = results.get("memory") or {}
    rows = [["throughput", _num(results.get("throughput_per_s"), unit)],
            ["per GPU", _num(results.get("per_gpu_throughput_per_s"), unit)],
            ["error band", _pct(results.get("error_band"))],
            ["step time", _num((results.get("step_time_s") or 0) * 1e3, "ms", 2)],
            ["binding resource", str(results.get("bound") or "not named")],
            ["batch per GPU", f"{results.get('batch_per_gpu')} ({results.get('batch_source')})"],
            ["scaling efficiency", _pct(results.get("scaling_efficiency"))],
            ["memory per GPU", f"{_gib(memory.get('per_gpu_bytes'))} of {_gib(memory.get('capacity_bytes'))}"]]
    rows += _training_rows(results)
    report.tables.append(Table("Summary", ["what", "value"], rows))
    report.tables.append(Table("Step time", ["resource", "ms"],
                               [[label, f"{s * 1e3:,.3f}"] for _, label, s in step_parts(results)],
                               "Compute and memory overlap, so the step is shorter than their sum; communication "
                               "counts in the step only where it is not hidden behind compute (exposed)."))
    if curve:
        report.tables.append(Table("Scaling (same batch per GPU)", ["GPUs", "nodes", unit, "speed-up", "efficiency"],
                                   [[str(p.get("gpus_total")), str(p.get("nodes")), _num(p.get("throughput_per_s")),
                                     f"{p.get('speedup_vs_1gpu') or 0:.2f}x", _pct(p.get("scaling_efficiency"))]
                                    for p in curve]))
    serving = results.get("serving")
    if serving:
        report.tables.append(Table("Serving", ["what", "value"], [[str(k), _value(v)] for k, v in serving.items()]))
    return report


def _training_rows(results: Doc) -> Rows:
    tt = results.get("time_to_train")
    rows: Rows = []
    if tt:
        rows += [["work", f"{_num(tt.get('work_amount'))} {tt.get('work_unit')}"],
                 ["wall time", _num(tt.get("hours"), "h", 2)], ["GPU-hours", _num(tt.get("gpu_hours"), "", 1)]]
    if results.get("cost_usd") is not None:
        rows.append(["cost", f"${results['cost_usd']:,.2f} at ${results.get('price_per_gpu_hour_usd') or 0:,.2f} "
                             "per GPU-hour"])
    elif results.get("cluster_cost_per_hour_usd") is not None:
        rows.append(["cost per hour", f"${results['cluster_cost_per_hour_usd']:,.2f}"])
    return rows


def _draw_scaling(fig: Any, curve: Sequence[Doc], unit: str) -> None:
    gpus = [int(p["gpus_total"]) for p in curve]
    speed = [float(p["throughput_per_s"] or 0) for p in curve]
    eff = [100 * float(p["scaling_efficiency"] or 0) for p in curve]
    left, right = fig.subplots(1, 2)
    left.plot(gpus, speed, marker="o", color=PALETTE[0], gid="throughput", label="estimate")
    # ideal: each point's throughput at 100% per-GPU efficiency, as the estimate defines efficiency
    # (against its own 1-GPU reference, which is not always the curve's first point)
    ideal = [s / (e / 100) if e > 0 else None for s, e in zip(speed, eff, strict=True)]
    left.plot(gpus, ideal, linestyle=":", color="#888888", label="ideal (100% efficiency)")
    left.set_ylabel(f"throughput ({unit})")
    left.set_title(f"Throughput ({unit})", fontsize=10, loc="left")
    left.legend(fontsize=8, frameon=False)
    left.set_ylim(bottom=0)
    right.plot(gpus, eff, marker="o", color=PALETTE[1], gid="efficiency")
    right.set_ylabel("per-GPU efficiency (%)")
    right.set_ylim(0, 105)
    right.set_title("Per-GPU efficiency (%)", fontsize=10, loc="left")
    for ax in (left, right):
        ax.set_xlabel("GPUs")
        if len(gpus) > 1 and gpus[-1] / gpus[0] >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(gpus, [str(n) for n in gpus])
        ax.grid(True, alpha=0.3)


def _draw_step(fig: Any, results: Doc) -> None:
    parts = step_parts(results)
    ax = fig.subplots()
    labels = [label for _, label, _ in parts]
    values = [s * 1e3 for _, _, s in parts]
    colours = ["#333333" if key == "step_time_s" else PALETTE[i % len(PALETTE)] for i, (key, _, _) in enumerate(parts)]
    bars = ax.barh(labels, values, color=colours)
    for patch, (key, _, _) in zip(bars.patches, parts, strict=True):
        patch.set_gid(f"step-{key}")
    ax.bar_label(bars, labels=[f"{v:,.2f} ms" for v in values], padding=3, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time per step (ms)")
    ax.set_xlim(0, max(values, default=1) * 1.2 or 1)
    bound = results.get("bound")
    ax.set_title("Step time by resource" + (f" ({bound}-bound)" if bound else ""), fontsize=10, loc="left")


# --------------------------------------------------------------------------
# recommend


def _recommend_report(results: Doc, inputs: Doc) -> Report:
    ranked = list(results.get("ranked") or [])[:MAX_RANKED]
    unit = str(results.get("speed_unit") or "samples/s")
    report = Report("recommend", f"GPUs for {results.get('workload')}: {results.get('description') or ''}".rstrip(": "))
    plan = results.get("plan") or {}
    configs = list(plan.get("configurations") or [])[:MAX_RANKED]
    if configs:
        plan_bars = [(str(c.get("label")), float(c.get("throughput_per_s") or 0), f"config-{c.get('rank')}")
                     for c in configs]
        report.plots.append(Plot("configurations", "Configurations", 0.9 + 0.28 * len(plan_bars),
                                 lambda fig: _draw_speed(fig, plan_bars, unit, f"Speed of the configurations ({unit})")))
    if any((g.get("speed") or {}).get("throughput_per_s") for g in ranked):
        gpu_bars = [(str(g.get("label") or g.get("gpu_id")), float((g.get("speed") or {}).get("throughput_per_s") or 0),
                     f"speed-{g.get('gpu_id')}") for g in ranked]
        report.plots.append(Plot("speed", "Speed", 0.9 + 0.28 * len(ranked),
                                 lambda fig: _draw_speed(fig, gpu_bars, unit, f"Speed of the ranked GPUs ({unit})")))
    if any(g.get("contributions") for g in ranked):
        report.plots.append(Plot("score", "Score", 1.3 + 0.28 * len(ranked), lambda fig: _draw_score(fig, ranked)))
    rows = [[str(g.get("rank")), str(g.get("gpu_id")), _num(g.get("score"), "", 1),
             _num((g.get("speed") or {}).get("throughput_per_s"), unit), _price(g), _fits(g), reasons(g)]
            for g in ranked]
    report.tables.append(Table(f"Ranking ({len(ranked)} shown of {results.get('qualified')} qualifying)",
                               ["#", "GPU", "score", "speed", "price", "fits", "reasons"], rows,
                               str(results.get("speed_basis") or "")))
    if configs:
        report.tables.append(Table(f"Configurations: {plan.get('goal')}", ["#", "configuration", unit, "price", "reasons"],
                                   [[str(c.get("rank")), str(c.get("label")), _num(c.get("throughput_per_s")),
                                     _usd(c.get("price_total_usd")), "; ".join(c.get("reasons") or ())]
                                    for c in configs]))
    for w in results.get("why_not") or ():
        report.tables.append(Table(f"Why not {w.get('asked')}", ["reason"], [[str(r)] for r in w.get("reasons") or ()]))
    return report


def _fits(gpu: Doc) -> str:
    """Whether the model fits a ranked GPU, with the headroom left (n/a: no model given)."""
    fit = gpu.get("fit") or {}
    if gpu.get("fits") is None or fit.get("headroom_bytes") is None:
        return _value(gpu.get("fits"))
    return f"{_value(gpu.get('fits'))} ({_gib(fit['headroom_bytes'])} left)"


def _usd(value: object) -> str:
    return NA if not isinstance(value, (int, float)) else f"${value:,.0f}"


def _price(gpu: Doc) -> str:
    price = gpu.get("price")
    if not price or price.get("usd") is None:
        return "unknown"
    return f"${price.get('usd'):,.0f} ({price.get('basis')}, {price.get('when')})"


def reasons(gpu: Doc) -> str:
    """A ranked GPU's reasons: its rules by the points they gave, then its advisories."""
    parts = [f"{c.get('rule')} +{c.get('points', 0):.1f}: {c.get('message')}"
             for c in sorted(gpu.get("contributions") or (), key=lambda c: -(c.get("points") or 0))
             if c.get("points")]
    parts += [str(a) for a in gpu.get("advisories") or ()]
    if gpu.get("outclassed_by"):
        parts.append(f"outclassed by {gpu['outclassed_by']}")
    return "; ".join(parts)


def _draw_speed(fig: Any, bars: Sequence[tuple[str, float, str]], unit: str, title: str) -> None:
    """Horizontal bars of (name, throughput, SVG id), best first."""
    ax = fig.subplots()
    names = [name for name, _, _ in bars]
    values = [value for _, value, _ in bars]
    drawn = ax.barh(range(len(bars)), values, color=PALETTE[0], tick_label=names)
    for patch, (_, _, gid) in zip(drawn.patches, bars, strict=True):
        patch.set_gid(gid)
    ax.bar_label(drawn, labels=[f"{v:,.0f}" for v in values], padding=3, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"throughput ({unit})")
    ax.set_xlim(0, max(values, default=1) * 1.15 or 1)
    ax.set_title(title, fontsize=10, loc="left")


def _draw_score(fig: Any, ranked: Sequence[Doc]) -> None:
    ax = fig.subplots()
    names = [str(g.get("label") or g.get("gpu_id")) for g in ranked]
    rules = list(dict.fromkeys(str(c.get("rule")) for g in ranked for c in g.get("contributions") or ()))
    left = [0.0] * len(ranked)
    for i, rule in enumerate(rules):
        points = [sum(float(c.get("points") or 0) for c in g.get("contributions") or () if c.get("rule") == rule)
                  for g in ranked]
        ax.barh(names, points, left=left, color=PALETTE[i % len(PALETTE)], label=rule, gid=f"rule-{rule}")
        left = [a + b for a, b in zip(left, points, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("score (points of 100, by rule)")
    ax.set_xlim(0, max(100.0, *left))
    fig.legend(loc="outside lower center", ncol=min(6, len(rules)), fontsize=8, frameon=False)
    ax.set_title("Score by rule", fontsize=10, loc="left")


# --------------------------------------------------------------------------
# drawing and writing


def _rc(salt: str) -> dict[str, Any]:
    return {"svg.fonttype": "none", "svg.hashsalt": f"gpusizer-{salt}", "font.size": 9,
            "font.family": "sans-serif", "font.sans-serif": ["DejaVu Sans", "Helvetica", "Arial"],
            "axes.spines.top": False, "axes.spines.right": False}


def _svg(fig: Any, metadata: dict[str, str | None]) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, **metadata})
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # (no XML declaration or DOCTYPE: the SVG may be inlined)


def plot_svg(plot: Plot, width: float = 10.0) -> str:
    """One plot as an SVG document (without the XML declaration)."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_rc(plot.name)):
        fig = Figure(figsize=(width, plot.height), layout="constrained")
        plot.draw(fig)
        return _svg(fig, {"Title": plot.title})


def combined_svg(report: Report, width: float = 10.0) -> str:
    """Every plot of ``report`` in one SVG, stacked, under a title naming the version;
    the inputs are in the SVG's metadata (its description)."""
    import matplotlib
    from matplotlib.figure import Figure

    heights = [p.height for p in report.plots] or [0.5]
    with matplotlib.rc_context(_rc("combined")):
        fig = Figure(figsize=(width, sum(heights) + 0.5), layout="constrained")
        fig.suptitle(f"{report.title} (gpusizer {report.version})", fontsize=11, x=0.01, ha="left")
        subs: Any = fig.subfigures(len(report.plots), 1, height_ratios=heights) if len(report.plots) > 1 else [fig]
        for sub, plot in zip(subs, report.plots, strict=False):
            plot.draw(sub)
        if not report.plots:
            fig.text(0.01, 0.3, "nothing to plot: see the .html or .md report for the numbers", fontsize=9)
        inputs = "; ".join(f"{k}={v}" for k, v in report.inputs)
        return _svg(fig, {"Title": f"{report.title} (gpusizer {report.version})", "Description": inputs})


def _e(text: str) -> str:
    return html.escape(text, quote=True)


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #222; background: #fff; line-height: 1.4; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
.meta { color: #555; margin-top: 0; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; }
.note { color: #555; font-size: 0.9em; } .inputs td:first-child { font-family: monospace; }
"""


def _html_table(table: Table, css_class: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in table.header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    note = f'<p class="note">{_e(table.note)}</p>' if table.note else ""
    cls = f' class="{css_class}"' if css_class else ""
    return f"<h2>{_e(table.title)}</h2>\n<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}\n"


def render_html(report: Report) -> str:
    """The whole report as one HTML page: inline CSS and SVG, no scripts, nothing fetched."""
    figures = "".join(f'<figure id="plot-{_e(p.name)}">{plot_svg(p)}</figure>\n' for p in report.plots)
    tables = "".join(_html_table(t) for t in report.tables)
    notes = "".join(f"<li>{_e(n)}</li>" for n in report.notes)
    inputs = _html_table(Table("Inputs (resolved, as the JSON input)", ["input", "value"], report.inputs), "inputs")
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="generator" content="gpusizer {_e(report.version)}">\n'
            f"<title>{_e(report.title)} - gpusizer {_e(report.version)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            f"<h1>{_e(report.title)}</h1>\n"
            f'<p class="meta">gpusizer {_e(report.command)}, made by <span id="version">gpusizer '
            f"{_e(report.version)}</span></p>\n{figures}{tables}"
            + (f"<h2>Notes</h2>\n<ul>{notes}</ul>\n" if notes else "")
            + f"{inputs}</body>\n</html>\n")


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_table(table: Table) -> str:
    lines = [f"## {table.title}", "", "| " + " | ".join(_md_cell(h) for h in table.header) + " |",
             "|" + "---|" * len(table.header)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    if table.note:
        lines += ["", _md_cell(table.note)]
    return "\n".join(lines) + "\n\n"


def render_markdown(report: Report, plot_files: Sequence[tuple[Plot, str]]) -> str:
    """The report as Markdown: the plots as images in sibling SVG files (named relatively), then tables."""
    out = [f"# {report.title}\n\ngpusizer {report.command}, made by gpusizer {report.version}\n\n"]
    out += [f"![{_md_cell(p.title)}]({name})\n\n" for p, name in plot_files]
    out += [_md_table(t) for t in report.tables]
    if report.notes:
        out.append("## Notes\n\n" + "".join(f"- {_md_cell(n)}\n" for n in report.notes) + "\n")
    out.append(_md_table(Table("Inputs (resolved, as the JSON input)", ["input", "value"], report.inputs)))
    return "".join(out).rstrip("\n") + "\n"


def report_files(document: Doc, path: Path) -> list[tuple[Path, str]]:
    """The files a report to ``path`` consists of, with their text: the report itself and,
    for Markdown, one sibling SVG per plot (``NAME-memory.svg``...), written first."""
    kind = report_format(path)
    report = build_report(document)
    if kind == "html":
        return [(path, render_html(report))]
    if kind == "svg":
        return [(path, XML_DECLARATION + combined_svg(report))]
    siblings = [(p, path.with_name(f"{path.stem}-{p.name}.svg")) for p in report.plots]
    files = [(sibling, XML_DECLARATION + plot_svg(p)) for p, sibling in siblings]
    return [*files, (path, render_markdown(report, [(p, s.name) for p, s in siblings]))]
