"""Rendering fit-model results: a memory breakdown with bars, a GPU table, a verdict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpusizer.domain.parallelism import LAYOUT_DEGREES, degree_words, layout_words, strategy_label
from gpusizer.render.common import Bar, fit_table, fmt, show_bool, show_value
from gpusizer.units import format_bytes, format_count

if TYPE_CHECKING:
    from rich.table import Table

    from gpusizer.memory.fit import FitReport

COMPONENTS: tuple[tuple[str, str], ...] = (
    ("weights_bytes", "weights"),
    ("gradients_bytes", "gradients"),
    ("optimizer_bytes", "optimizer state"),
    ("activations_bytes", "activations"),
    ("kv_cache_bytes", "KV cache"),
    ("transient_bytes", "transient buffers"),
    ("context_bytes", "CUDA context"),
    ("fragmentation_bytes", "allocator slack"),
)


def run_words(inputs: Mapping[str, Any]) -> str:
    """The run fit-model sized, every setting as resolved (its JSON ``input``), in one line."""
    train = inputs["mode"] == "train"
    words = ["training" if train else "inference", f"{inputs['precision']} precision"]
    adapter = inputs.get("adapter")
    if adapter:
        words.append(f"{'QLoRA' if adapter.get('base_quantisation') else 'LoRA'} rank {adapter.get('rank')}")
    if train:
        words.append(f"{inputs['optimizer']} optimizer")
    words.append(f"batch {inputs['batch']}")
    if inputs.get("seq_len"):
        words.append(f"{inputs['seq_len']:,} tokens")
        words.append("fused attention" if inputs.get("flash_attention") else "eager attention")
    if inputs.get("image_size"):
        words.append(f"{inputs['image_size']} px images")
    if train and inputs.get("checkpointing"):
        words.append("activation checkpointing")
    words.append(layout_words(inputs["strategy"], inputs["gpus"], inputs["mode"],
                              **{k: inputs.get(k) for k in LAYOUT_DEGREES}))
    return ", ".join(words)


def breakdown_table(report: FitReport, width: int | None = None, inputs: Mapping[str, Any] | None = None,
                    gpus_per_node: int = 1) -> Table:
    """Where the memory goes, component by component, with a bar each; ``width``: fit that many
    columns (the bars shrink, then the GiB column goes; exact bytes stay). ``inputs`` (the JSON
    ``input``): say under the title how the run was read. ``gpus_per_node``: offloaded state is
    shown for a node of that many GPUs too (the host memory to buy)."""
    from rich.table import Table

    b = report.breakdown
    summed = sum(getattr(b, f) for f, _ in COMPONENTS)
    table = Table(
        title=f"Memory per GPU: {report.model_name} ({format_count(report.params)} params), "
        f"peak {format_bytes(b.total_bytes)} at the {b.peak_phase} phase"
        + (f"\nRun: {run_words(inputs)}" if inputs and report.method != "rule-of-thumb" else ""),
        title_justify="left",
    )
    table.add_column("component", no_wrap=True)
    table.add_column("bytes", justify="right")
    table.add_column("GiB", justify="right")
    table.add_column("share", justify="right")
    table.add_column("")
    for field, label in COMPONENTS:
        value = getattr(b, field)
        if value == 0 and field in ("kv_cache_bytes", "transient_bytes", "gradients_bytes", "optimizer_bytes"):
            continue
        if field == "activations_bytes" and not b.activations_modelled:
            table.add_row(label, "not modelled", "", "", "")  # (unknown, not zero; JSON: activations_modelled)
            continue
        share = value / summed if summed else 0
        table.add_row(label, f"{value:,}", f"{value / 2**30:.2f}", f"{share:.0%}", Bar(share))
        if field == "transient_bytes":
            for part in b.transient_parts:
                table.add_row(f"  {part.name}", f"{part.bytes:,}", f"{part.bytes / 2**30:.2f}", "", "", style="dim")
    table.add_row("peak total", f"{b.total_bytes:,}", f"{b.total_bytes / 2**30:.2f}", "", "", style="bold")
    # the peak is below the rows' sum only where some rows are not live at once
    less = b.total_bytes < summed
    captions = {
        "backward": "Peak at the start of backward: all activations saved, gradients not yet written"
                    + (" (so the peak is less than the sum of the rows)." if less else "."),
        "optimizer": "Peak at the optimizer step: all gradients written, activations already freed"
                     + (" (so the peak is less than the sum of the rows)." if less else "."),
        "inference": "Inference: weights, KV cache and one pass's working activations.",
        "backward-end": "Peak at the end of backward: every gradient written, activations freed, and a tied "
                        "embedding's two gradients summed out of place (the transient row).",
        "forward": "Peak in the forward pass (traced): the tensors live then"
                   + (", so the peak is less than the sum of the rows." if less else "."),
    }
    table.caption = captions[b.peak_phase]
    if b.transient_bytes and b.transient_parts:
        table.caption += " Transient buffers: " + "; ".join(f"{p.name}: {p.explanation}" for p in b.transient_parts) \
            + "."
    for where, held in (("host memory", b.cpu_bytes), ("NVMe", b.nvme_bytes)):
        if held:
            node = f", {format_bytes(held * gpus_per_node)} per node of {gpus_per_node} GPUs" if gpus_per_node > 1 else ""
            table.caption += f" Offloaded to {where}: {format_bytes(held)} per GPU{node}."
    table.caption_justify = "left"
    return table if width is None else fit_table(table, width, drop=("GiB", "share"))


def gpu_table(report: FitReport, limit: int | None = None, width: int | None = None) -> Table:
    """Each GPU: its memory, whether the run fits, and the largest batch and fewest GPUs;
    ``width``: fit that many columns."""
    from rich import box
    from rich.table import Table

    cfg = report.config
    rows = sorted(report.gpus, key=lambda g: (not g.fits, g.memory_bytes))
    if limit is not None:
        rows = rows[:limit]
    rule = report.method == "rule-of-thumb"
    layout = layout_words(cfg.strategy, cfg.gpus, cfg.mode, **cfg.layout_degrees)
    title = "GPUs checked" + (f", each as one of {layout}" if cfg.gpus > 1 else "")
    table = Table(title="GPUs (rule of thumb)" if rule else title,
                  title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("GPU", no_wrap=True)
    table.add_column("memory", justify="right")
    table.add_column("fits", justify="center")
    table.add_column("headroom", justify="right")
    if rule:
        table.add_column("max params (rule)", justify="right")
    else:
        table.add_column("max batch/GPU", justify="right")
    label = strategy_label(cfg.strategy, cfg.mode)
    if degree_words(cfg.strategy, cfg.gpus, cfg.mode, cfg.layout_degrees) is not None:
        label = "layout"  # this layout's model-parallel group, times the replicas it needs
    table.add_column("min GPUs" if label == "replicas" else f"min GPUs ({label})", justify="right")
    for g in rows:
        label = g.gpu_id or g.gpu_name
        mem = format_bytes(g.memory_bytes) + (" free" if g.capacity_source == "probe-free" else "")
        if rule:
            extra = show_value(g.rule_of_thumb_params, format_count)
        elif g.max_batch is None and g.fits:
            extra = "unknown"  # --params only: activations, which set the batch, are not modelled
        else:
            extra = fmt(g.max_batch)
        table.add_row(
            label, mem, show_bool(g.fits), format_bytes(g.headroom_bytes), extra, fmt(g.min_gpus),
        )
    return table if width is None else fit_table(table, width, drop=("headroom",))


#: GPUs named on a remedy's line before "and N more"
REMEDY_GPUS = 3


def remedy_lines(report: FitReport, width: int) -> list[str]:
    """The changes that would make a run that fits nowhere fit (FitReport.remedies), a line each:
    the options, the peak with them, the GPUs that hold it and the largest batch there."""
    import textwrap

    if not report.remedies:
        return []
    lines = ["What would fit, each change measured by the same model:"]
    for r in report.remedies:
        gpus = ", ".join(r.fits_on[:REMEDY_GPUS])
        if len(r.fits_on) > REMEDY_GPUS:
            gpus += f" and {len(r.fits_on) - REMEDY_GPUS} more"
        batch = f"; batch up to {r.max_batch:,} there" if r.max_batch is not None else ""
        text = f"needs {format_bytes(r.total_bytes)}, fits on {gpus}{batch}"
        lines.append(textwrap.fill(f"{' '.join(r.options)}: {text}", width=max(width, 40), initial_indent="  ",
                                   subsequent_indent="    ", break_long_words=False, break_on_hyphens=False))
    return lines
