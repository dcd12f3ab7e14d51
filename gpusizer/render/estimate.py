"""Rendering `estimate` results: throughput, a step-time breakdown with the binding
resource, a scaling curve drawn with bars, and time-to-train and cost.

Everything shown comes from the engine's frozen results (gpusizer.performance);
``--json`` prints the API's result document instead (gpusizer.api.estimate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpusizer.domain.parallelism import degree_words
from gpusizer.render.common import Bar, fit_table, fmt
from gpusizer.units import format_bytes, format_count, format_duration, plural

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

    from gpusizer.api import EstimateResult
    from gpusizer.hardware.catalog import Gpu
    from gpusizer.performance.estimate import PerfEstimate
    from gpusizer.performance.planning import ScalingPoint, TrainingTime
    from gpusizer.performance.serving import ServingSpeed


def _rate(value: float, unit: str) -> str:
    if value >= 100:
        return f"{value:,.0f} {unit}"
    if value >= 10:
        return f"{value:,.1f} {unit}"
    return f"{value:,.2f} {unit}"


def _seconds(s: float) -> str:
    if s >= 1:
        return f"{s:,.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:,.2f} ms"
    return f"{s * 1e6:,.1f} us"


def _miss_share(within: float | None) -> str:
    """'; 20% of held-out cases miss by over 20%', from the calibration's recorded share of
    held-out cases within 20% (``errors.held_out_within_20pct``)."""
    if within is None:
        return ""
    return f"; {1 - within:.0%} of held-out cases miss by over 20%"


def summary_table(est: PerfEstimate, gpu: Gpu, inputs: Mapping[str, Any], batch_note: str,
                  held_out_within: float | None) -> Table:
    from rich import box
    from rich.table import Table

    n = est.gpus_total
    where = f"{n} x {gpu.id}" if n > 1 else gpu.id
    if inputs.get("nodes", 1) > 1:
        where += f" ({inputs['gpus']} per node x {inputs['nodes']} nodes)"
    degrees = degree_words(inputs["strategy"], n, inputs["mode"], inputs) if n > 1 else None
    where += f": {degrees}" if degrees else ""
    table = Table(title=f"Estimate: {inputs['model']} on {where}", title_justify="left", box=box.SIMPLE_HEAD,
                  show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    band = f" (error band {est.error_band:.0%}{_miss_share(held_out_within)}; docs/accuracy.md)"
    bound = "at most " if est.upper_bound else ""  # an upper bound: the notes say why
    table.add_row("throughput", bound + _rate(est.throughput_per_s, est.throughput_unit) + band)
    if n > 1:
        table.add_row("per GPU", _rate(est.per_gpu_throughput_per_s, est.throughput_unit))
    word = "token" if est.throughput_unit == "tokens/s" else "sample"
    table.add_row("step time", f"{_seconds(est.step_time_s)} per step of "
                  f"{plural(est.samples_per_step, word, shown=format_count(est.samples_per_step))} per replica")
    table.add_row("batch per GPU", f"{inputs['batch']} ({batch_note})")
    if inputs.get("seq_len") or inputs.get("image_size"):
        table.add_row("input", f"{inputs['seq_len']:,} tokens per sequence" if inputs.get("seq_len")
                      else f"{inputs['image_size']} x {inputs['image_size']} px images")
    table.add_row("workload", f"{est.workload}" + (f", {est.phase}" if est.phase else ""))
    table.add_row("precision", f"{est.compute_precision} at {fmt(est.peak_tflops)} TFLOPS peak ({est.peak_label}); "
                  f"memory counted as {inputs['memory_precision']}")
    from gpusizer.performance.calibration import PHYSICAL_BOUNDS

    def flag(name: str, value: float) -> str:
        lo, hi = PHYSICAL_BOUNDS[name]
        return "" if lo <= value <= hi else f" (outside the physical {lo:.0%}-{hi:.0%})"

    table.add_row("calibrated", f"{est.compute_efficiency:.0%} of peak compute"
                  f"{flag('compute_efficiency', est.compute_efficiency)}, {est.memory_efficiency:.0%} of "
                  f"{fmt(gpu.bandwidth_gb_s)} GB/s{flag('memory_efficiency', est.memory_efficiency)}")
    if n > 1:
        table.add_row("scaling", f"{est.speedup_vs_1gpu:.1f}x the speed of 1 GPU ({est.scaling_efficiency:.0%} "
                      "efficiency)")
        if est.topology is not None:
            table.add_row("node", f"{est.topology.describe(est.nodes)} ({est.topology.origin})")
        if est.interconnect:
            table.add_row("interconnect", f"{est.interconnect}: {fmt(est.comm_bandwidth_gb_s)} GB/s effective, "
                          f"{est.transport}")
    return table


def breakdown_table(est: PerfEstimate, width: int | None = None) -> Table:
    """Busy time of each resource in one step; the binding resource is marked. ``width``: fit
    that many columns (the bars shrink, the details wrap)."""
    from rich import box
    from rich.table import Table

    rows = [
        ("compute", est.compute_s, f"{est.flops_per_step / 1e12:,.2f} TFLOP"),
        ("memory", est.memory_s, format_bytes(est.memory_traffic_bytes, binary=False) + " moved"),
        ("communication", est.comm_exposed_s,
         (f"{format_bytes(est.comm_bytes, binary=False)} sent; {_seconds(est.comm_s)} in all, "
          f"{_seconds(max(0.0, est.comm_s - est.comm_exposed_s))} hidden behind compute") if est.comm_s else "none"),
    ]
    if est.pipeline_bubble_s:
        rows.append(("pipeline bubble", est.pipeline_bubble_s, "1F1B: GPUs idle while the pipeline fills and drains"))
    if est.overhead_s:
        launch = {True: "; each step one CUDA graph", False: "; kernels launched one by one", None: ""}[est.cuda_graphs]
        rows.append(("fixed overhead", est.overhead_s, f"kernel launches and synchronisation per layer{launch}"))
    longest = max([t for _, t, _ in rows] + [est.step_time_s]) or 1.0
    title = f"Step time {_seconds(est.step_time_s)}" + (f": {est.bound}-bound" if est.bound else "")
    table = Table(title=title, title_justify="left",
                  box=box.SIMPLE_HEAD)
    table.add_column("resource")
    table.add_column("time", justify="right")
    table.add_column("")
    table.add_column("detail", ratio=1)
    for name, t, detail in rows:
        label = f"{name} (binding)" if name == est.bound else name
        table.add_row(label, _seconds(t), Bar(t / longest, 30, 10), detail, style="bold" if name == est.bound else None)
    table.add_row("step", _seconds(est.step_time_s), Bar(est.step_time_s / longest, 30, 10), "", style="bold")
    table.caption = ("Compute and memory overlap (a smooth roofline), so the step is shorter than their sum; "
                     "only the exposed part of communication is shown.")
    table.caption_justify = "left"
    return table if width is None else fit_table(table, width)


def scaling_table(points: Sequence[ScalingPoint], unit: str, width: int | None = None) -> Table:
    """The scaling curve: speed-up against GPU count, drawn with bars that shrink to fit ``width``
    columns before any number does."""
    from rich import box
    from rich.table import Table

    best = max((p.speedup_vs_1gpu for p in points), default=1.0) or 1.0
    top = max((p.gpus_total for p in points), default=1)
    table = Table(title="Scaling (same batch per GPU)", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("GPUs", justify="right", no_wrap=True)
    table.add_column("layout", no_wrap=True)
    table.add_column(unit, justify="right", no_wrap=True)
    table.add_column("speed-up", justify="right", no_wrap=True)
    table.add_column("efficiency", justify="right", no_wrap=True)
    table.add_column(f"bar: ideal {top}x")
    for p in points:
        layout = f"{p.gpus_per_node} x {p.nodes} nodes" if p.nodes > 1 else f"{p.gpus_per_node} in 1 node"
        table.add_row(str(p.gpus_total), layout, f"{p.throughput_per_s:,.0f}", f"{p.speedup_vs_1gpu:.2f}x",
                      f"{p.scaling_efficiency:.0%}", Bar(p.speedup_vs_1gpu / max(best, top), 40))
    return table if width is None else fit_table(table, width)


def training_table(tt: TrainingTime, mode: str = "train") -> Table:
    """The job's wall time, GPU-hours and cost: "Time to train", or for an inference run (which
    trains nothing) "Time to process" the same work."""
    from rich import box
    from rich.table import Table

    title = "Time to train" if mode == "train" else "Time to process"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("work", f"{format_count(tt.work_amount)} {tt.work_unit}")
    table.add_row("wall time", format_duration(tt.seconds))
    table.add_row("GPU-hours", f"{tt.gpu_hours:,.1f}")
    if tt.cost_usd is not None:
        table.add_row("cost", f"${tt.cost_usd:,.2f} at ${tt.price_per_gpu_hour_usd:,.2f} per GPU-hour")
    else:
        table.add_row("cost", "unknown: give --price-per-hour (the catalog has purchase prices, not hourly ones)")
    return table


def serving_table(s: ServingSpeed) -> Table:
    """Latency and throughput a serving deployment offers at its concurrency."""
    from rich import box
    from rich.table import Table

    title = f"Serving {plural(s.concurrency, 'sequence')} of {s.context_tokens:,} tokens"
    if s.max_itl_s is not None and s.itl_s > s.max_itl_s:  # (the target not met even by one sequence)
        title += f" (none within {s.max_itl_s * 1e3:g} ms a token)"
    elif s.max_itl_s is not None and s.limited_by in ("memory", "engine"):
        most = "memory holds" if s.limited_by == "memory" else "the engine runs at once"
        title += f" (the most {most}; within {s.max_itl_s * 1e3:g} ms a token)"
    elif s.max_itl_s is not None:
        title += f" (the most within {s.max_itl_s * 1e3:g} ms a token)"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("time to first token", f"{_seconds(s.ttft_s)} for a {s.prompt_tokens:,}-token prompt run alone")
    table.add_row("inter-token latency", _seconds(s.itl_s))
    table.add_row("per user", _rate(s.per_user_tokens_s, "tokens/s"))
    table.add_row("all users", _rate(s.aggregate_tokens_s, "tokens/s"))
    return table


def estimate_renderables(result: EstimateResult, width: int | None = None, *,
                         held_out_within: float | None) -> list[Table | Text]:
    """Everything ``estimate`` shows for a run that fits, top to bottom. ``held_out_within``: the
    share of the calibration's held-out cases within 20% (from the calibration the estimate used:
    the caller has it loaded, where reading it again here would parse its YAML afresh)."""
    from rich.text import Text

    res = result.results
    est = res.estimate
    assert est is not None  # a run that fits has an estimate
    parts: list[Table | Text] = [
        summary_table(est, result.gpu, result.input, res.batch_source, held_out_within), breakdown_table(est, width),
        scaling_table(list(res.scaling_curve), est.throughput_unit, width),
    ]
    if res.serving is not None:
        parts.append(serving_table(res.serving))
    if res.time_to_train is not None:
        parts.append(training_table(res.time_to_train, result.input["mode"]))
    elif res.cluster_cost_per_hour_usd is not None:
        parts.append(Text(f"Cost: ${res.cluster_cost_per_hour_usd:,.2f} per hour for {plural(est.gpus_total, 'GPU')}"))
    return parts
