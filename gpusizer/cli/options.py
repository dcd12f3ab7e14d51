"""Options and helpers the commands share, each declared once.

This module is light: it imports typer and nothing of the engine, so building
a command's options costs only typer's own work. Options whose choices are
domain concepts (precisions, strategies, offload targets, KV-cache and weight
formats) live in :mod:`gpusizer.cli.run_options`, next to the domain tables
they name, and only the commands that run the engine import them.

Every option sits in one of the help panels in :data:`PANELS` and names its
value with a human metavar (``N``, ``GPU``, ``FILE``, ``SIZE``...), never a
Python type.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from gpusizer.choices import OPTIMIZERS, Attention, Head, Logits, LossKind, Optimizer, OptimizerImpl
from gpusizer.errors import OutputError, UsageError

# --------------------------------------------------------------------------
# help panels: every option of every command sits in one of these, in this order

#: what is being sized: the model and where its shape comes from
MODEL = "Model"
#: how it runs: training or inference, batch, precision, parallelism, memory savers
RUN = "Run"
#: where it runs: GPUs, systems, nodes, the interconnect, extra catalog files
HARDWARE = "Hardware"
#: what an answer must satisfy: filters, requirements, budgets, deadlines
CONSTRAINTS = "Constraints"
#: how the answer is shown
OUTPUT = "Output"
PANELS: tuple[str, ...] = (MODEL, RUN, HARDWARE, CONSTRAINTS, OUTPUT)


# --------------------------------------------------------------------------
# real-valued options


def real(low: float | None = None, high: float | None = None) -> dict[str, Any]:
    """The settings of a real-valued (float) option, to spread into its ``typer.Option``: the
    range its help shows (``min``, ``max``) and a parser that checks it with the one check for
    real inputs (:func:`gpusizer.units.finite_number`), so NaN and the infinities read "must be
    a finite number" rather than a range they do not break. The error names the option."""

    def parse(value: Any) -> float:
        from gpusizer.units import finite_number

        try:
            return finite_number(value, low, high)
        except ValueError as exc:
            from pydantic_core import PydanticCustomError

            raise PydanticCustomError("real_number", str(exc)) from None

    return {"min": low, "max": high, "parser": parse}


# --------------------------------------------------------------------------
# examples: every command's help ends with two or three that run as written
# (tests/test_help.py runs each one and checks its exit code)


def examples(*lines: str) -> str:
    """A help epilog of example command lines. A line that is meant to fail ends with
    ``# exit N: why`` (or ``# exit N without ...`` where it depends on the machine)."""
    return "Examples:\n\n" + "\n".join(f"  $ {line}" for line in lines)


# --------------------------------------------------------------------------
# shell completion: cheap, from the data files' raw YAML (no pydantic, no engine)


def _data_ids(filename: str, key: str, extra: list[str]) -> list[tuple[str, str]]:
    """(id, name) of every entry in a bundled data file and the extra files, read through
    the same cached YAML reader the loaders use; [] when a file cannot be read."""
    from gpusizer import datafiles

    out: list[tuple[str, str]] = []
    for path in [str(datafiles.bundled_path(filename)), *extra]:
        try:
            doc = datafiles.load_yaml(Path(path), _cache_dir())
        except Exception:  # (completion never fails loudly: a bad file just completes nothing)
            continue
        entries = doc.get(key) if isinstance(doc, dict) else None
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                out.append((entry["id"], str(entry.get("name") or "")))
    return out


def complete_gpu(incomplete: str) -> list[tuple[str, str]]:
    """Catalog GPU ids (bundled and GPUSIZER_CATALOG files) that start with what was typed."""
    return [(i, n) for i, n in _data_ids("gpus.yaml", "gpus", _catalog_files(None)) if i.startswith(incomplete.lower())]


def complete_model(incomplete: str) -> list[tuple[str, str]]:
    """Model-zoo names that start with what was typed."""
    return [(i, n) for i, n in _data_ids("models.yaml", "models", []) if i.startswith(incomplete.lower())]


def complete_system(incomplete: str) -> list[tuple[str, str]]:
    """System ids (gpusizer systems list) that start with what was typed."""
    return [(i, n) for i, n in _data_ids("systems.yaml", "systems", []) if i.startswith(incomplete.lower())]


# --------------------------------------------------------------------------
# shared options

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (docs/json.md).",
                                       rich_help_panel=OUTPUT)]
ExplainOpt = Annotated[bool, typer.Option(
    "--explain", "-v", rich_help_panel=OUTPUT,
    help="Show the whole reasoning: every header line, each rule's points in words, every caution and every "
         "excluded GPU with its reason.")]
CatalogOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--catalog",
        help="Extra catalog YAML file; repeatable. Adds GPUs or overrides fields by id. "
        "GPUSIZER_CATALOG holds more, separated by the path separator.",
        metavar="FILE",
        rich_help_panel=HARDWARE,
        readable=False,  # (the loader says why a file cannot be read: exit 3, like any data-file problem)
    ),
]


def _catalog_files(cli_files: list[Path] | None) -> list[str]:
    env = os.environ.get("GPUSIZER_CATALOG", "")
    from_env = [p for p in env.split(os.pathsep) if p.strip()]
    return [*from_env, *(str(p) for p in (cli_files or []))]


def _cache_dir() -> Path | None:
    """Where parsed YAML is cached: $GPUSIZER_CACHE_DIR, else the XDG cache folder.

    GPUSIZER_NO_CACHE=1 turns the cache off.
    """
    if os.environ.get("GPUSIZER_NO_CACHE"):
        return None
    explicit = os.environ.get("GPUSIZER_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpusizer"


def _load_catalog(cli_files: list[Path] | None) -> Any:
    from gpusizer.hardware.catalog import load_catalog

    return load_catalog(_catalog_files(cli_files), cache_dir=_cache_dir())


def _console(ctx: typer.Context, *, stderr: bool = False) -> Any:
    from gpusizer.render.common import make_console

    return make_console(stderr=stderr, no_color=bool((ctx.obj or {}).get("no_color")))


def _warn(ctx: typer.Context, notes: list[str] | tuple[str, ...]) -> None:
    """Notes for people go to stderr, so stdout stays data."""
    if notes:
        from gpusizer.render.common import wrap_note

        console = _console(ctx, stderr=True)
        for note in notes:
            console.print(wrap_note(note, console.width), markup=False, soft_wrap=True)


def _show(ctx: typer.Context, result: Any, json_out: bool, render: Callable[[int], Any]) -> None:
    """A browsing command's output: the JSON document, or its notes on stderr and ``render(width)``'s
    table on stdout, laid out for the terminal's width (``render`` imports rich only when a table
    is printed)."""
    if json_out:
        from gpusizer.render.common import emit_json

        emit_json(result.document())
        return
    _warn(ctx, result.notes)
    from gpusizer.render.common import Lines, chosen_width, print_lines

    width = chosen_width(sys.stdout)
    shown = render(width) if width is not None else None
    if isinstance(shown, Lines) and print_lines(shown):
        return  # (plain lines: rich's console is not loaded)
    console = _console(ctx)
    if shown is None or console.width != width:
        shown = render(console.width)
    console.print(shown.rich_text() if isinstance(shown, Lines) else shown)




ReportOpt = Annotated[Path | None, typer.Option(
    "--report", metavar="FILE", rich_help_panel=OUTPUT, help=(
        "Also write a report: FILE.html (one self-contained page: plots, tables, inputs, version), FILE.svg (the "
        "plots) or FILE.md (tables, plots in sibling FILE-*.svg files). Another suffix exits 2; without "
        "the 'report' extra it exits 6, under --json with the JSON error document (docs/usage.md, Reports)."))]


def check_report(path: Path | None) -> None:
    """Before any work: a --report whose suffix is not .html, .svg or .md is a usage error (exit 2), a
    missing gpusizer[report] is MissingExtraError (exit 6), and a folder that does not exist cannot be
    written to (exit 1, as any output that cannot be written)."""
    if path is None:
        return
    from gpusizer.render.report import report_format, require_matplotlib

    report_format(path)
    require_matplotlib()
    folder = path.parent
    if not folder.is_dir():
        raise OutputError(f"cannot write the report {path}: {folder} is not a folder",
                          hint="--report needs an existing folder")


def write_report(ctx: typer.Context, path: Path | None, result: Any) -> None:
    """Write the report of ``result`` (an API result) to ``path``, and say where on stderr."""
    if path is None:
        return
    from gpusizer.render.report import report_files

    files = report_files(result.document(), path)
    for target, text in files:
        try:
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise OutputError(f"cannot write the report {target}: {exc.strerror or exc}") from None
    ctx.meta["report_written"] = [str(target) for target, _ in files]


def report_note(ctx: typer.Context) -> None:
    """``Note: report written to FILE`` on stderr, after the command's own output."""
    written = ctx.meta.get("report_written")
    if written:
        _warn(ctx, [f"report written to {written[-1]}"
                    + (f" (plots in {', '.join(written[:-1])})" if len(written) > 1 else "")])


ParamsOpt = Annotated[str | None, typer.Option(
    "--params", metavar="COUNT", rich_help_panel=MODEL, help="Parameter count: 60M, 1.3B, 7e9, 175B or 60000000.")]
ModelOpt = Annotated[str | None, typer.Option(
    "--model", metavar="MODEL", rich_help_panel=MODEL, autocompletion=complete_model,
    help="A model from the zoo (gpusizer models), e.g. resnet50, llama-2-7b.")]
HfConfigOpt = Annotated[Path | None, typer.Option(
    "--hf-config", metavar="FILE", rich_help_panel=MODEL, readable=False,
    help="A local Hugging Face config.json (no network).")]
HfModelOpt = Annotated[str | None, typer.Option("--hf-model", metavar="ORG/NAME", rich_help_panel=MODEL, help=(
    "A Hugging Face Hub model: its config.json from the local cache, or downloaded (HF_TOKEN, "
    "HF_HUB_OFFLINE and HF_ENDPOINT apply; needs the 'hub' extra)."))]
TorchModelOpt = Annotated[str | None, typer.Option("--torch-model", metavar="MODULE:CALLABLE", rich_help_panel=MODEL, help=(
    "Exact mode: a callable that returns a torch.nn.Module, e.g. torchvision.models:resnet101 "
    "(input: --image-size, or --input-shape)."))]
InputShapeOpt = Annotated[str | None, typer.Option("--input-shape", metavar="C,H,W", rich_help_panel=MODEL, help=(
    "Exact mode with --torch-model: one sample's input shape without the batch, e.g. 3,224,224."))]
ExactOpt = Annotated[bool, typer.Option("--exact", rich_help_panel=MODEL, help=(
    "Build the real model and count the live tensors of a real step under PyTorch's fake tensors "
    "(needs the 'torch' extra; docs/method.md, 'Exact mode')."))]
TrustRemoteCodeOpt = Annotated[bool, typer.Option("--trust-remote-code", rich_help_panel=MODEL, help=(
    "Exact mode: run the model repository's own Python code (auto_map). Only for code you trust."))]
BatchOpt = Annotated[int | None, typer.Option(
    "--batch", min=1, metavar="N", rich_help_panel=RUN, help="Batch per GPU (per model replica with tp). Default 1.")]
SeqOpt = Annotated[int | None, typer.Option(
    "--seq-len", min=1, metavar="TOKENS", rich_help_panel=RUN, help="Sequence length in tokens (transformers, RNNs).")]
AttentionOpt = Annotated[Attention, typer.Option(
    "--attention", metavar="KERNEL", rich_help_panel=RUN,
    help="fused (default: PyTorch SDPA, FlashAttention, every serving engine): no s x s score matrix "
         "is kept and causal models compute half of it; eager: the score matrix is materialised.")]
#: the option before fused attention became the default; kept so old command lines still run
FlashOpt = Annotated[bool, typer.Option("--flash-attention", hidden=True, help="Same as --attention fused.")]
LogitsOpt = Annotated[Logits, typer.Option(
    "--logits", metavar="WHICH", rich_help_panel=RUN,
    help="Inference: last = logits of the last position only, as generate() and serving engines compute "
         "(default); all = every position, as a plain forward pass for scoring or evaluation.")]
LoraOpt = Annotated[int | None, typer.Option(
    "--lora", min=1, max=65_536, metavar="RANK", rich_help_panel=RUN,
    help="Fine-tune LoRA adapters of this rank on a frozen 16-bit base (fp32 adapters and optimizer state, "
         "16-bit autocast: peft with Trainer(bf16=True)).")]
QloraOpt = Annotated[bool, typer.Option(
    "--qlora", rich_help_panel=RUN,
    help="QLoRA: the frozen base's linear layers in 4-bit NF4 with blockwise absmax (double quantised "
         "unless --no-double-quant), as bitsandbytes stores it; adapters as --lora (rank 16 unless given).")]
LoraTargetsOpt = Annotated[str, typer.Option(
    "--lora-targets", metavar="LAYERS", rich_help_panel=RUN,
    help="Which linear layers get adapters: all-linear (default, every linear but the output "
         "head, as peft's 'all-linear'), attention, mlp, or names among q,k,v,o,gate,up,down.")]
LossOpt = Annotated[LossKind, typer.Option(
    "--loss", metavar="LOSS", rich_help_panel=RUN,
    help="Training loss: full (PyTorch cross-entropy: full fp32 logits, default), chunked (torchtune's "
         "CEWithChunkedOutputLoss: 16-bit logits, fp32 one chunk in 8 at a time) or fused (Liger-Kernel's "
         "fused linear cross-entropy: logits in chunks, never all at once).")]
DoubleQuantOpt = Annotated[bool, typer.Option(
    "--double-quant/--no-double-quant", rich_help_panel=RUN,
    help="QLoRA: quantise the absmax constants too (0.127 against 0.5 bits per weight).")]


def adapter_settings(lora: int | None, qlora: bool, targets: str, double_quant: bool) -> dict[str, object] | None:
    """The RunConfig ``adapter`` for the LoRA options, or None to train every parameter."""
    if lora is None and not qlora:
        return None
    names = tuple(t.strip() for t in targets.split(",") if t.strip())
    from gpusizer.domain.finetune import DEFAULT_RANK, QLORA_QUANTISATION

    return {"rank": lora or DEFAULT_RANK, "targets": names, "base_quantisation": QLORA_QUANTISATION if qlora else None,
            "double_quant": double_quant}


ImageOpt = Annotated[int | None, typer.Option(
    "--image-size", min=8, metavar="PIXELS", rich_help_panel=RUN, help="Image side in pixels (CNNs).")]
TrainOpt = Annotated[bool, typer.Option(
    "--train/--inference", rich_help_panel=RUN, help="Training step (default) or inference.")]
OptimizerOptT = Annotated[Optimizer, typer.Option(
    metavar="OPTIMIZER", rich_help_panel=RUN, help=f"Optimizer (training): {', '.join(OPTIMIZERS)}.")]
OptimizerImplOpt = Annotated[OptimizerImpl, typer.Option("--optimizer-impl", metavar="IMPL", rich_help_panel=RUN, help=(
    "How the optimizer steps: fused (one kernel: transformers' Trainer on PyTorch >= 2.8, torchtune, DeepSpeed; "
    "default), foreach (torch.optim's multi-tensor default: Adam holds a temporary as large as its state) "
    "or per-tensor (a loop over parameters)."))]
HeadOptT = Annotated[Head, typer.Option(
    metavar="HEAD", rich_help_panel=MODEL,
    help="Transformer output: lm = vocabulary logits for every token; classifier = a few classes.")]
CheckpointOpt = Annotated[bool, typer.Option("--checkpointing", rich_help_panel=RUN, help="Activation recomputation.")]
GradAccumOpt = Annotated[int, typer.Option(
    min=1, metavar="N", rich_help_panel=RUN,
    help="Micro-batches per optimizer step; more than 1 keeps gradients alive through backward.")]
GpusPerNodeOpt = Annotated[int, typer.Option("--gpus", min=1, metavar="N", rich_help_panel=HARDWARE,
                                             help="GPUs per node.")]
SystemOpt = Annotated[str | None, typer.Option(
    "--system", metavar="SYSTEM", rich_help_panel=HARDWARE, autocompletion=complete_system,
    help="A node type from 'gpusizer systems list' (dgx-h100, aws-p5.48xlarge, ...): sets the GPU, GPUs per node, "
         "fabric, NICs and, for a cloud instance, the price per GPU-hour. Replaces --gpu.")]
NodesOpt = Annotated[int, typer.Option("--nodes", min=1, metavar="N", rich_help_panel=HARDWARE,
                                       help="Nodes (machines).")]
InterconnectOpt = Annotated[str | None, typer.Option(
    "--interconnect", metavar="LINK", rich_help_panel=HARDWARE,
    help="Inside a node: nvlink, nvswitch, pcie or a generation (nvlink3, pcie4). Between nodes: ib-edr, ib-hdr, "
         "ib-ndr, roce-100g, roce-400g, tcp-10g, tcp-25g, tcp-100g. Default: the system's; an SXM GPU's DGX "
         "(DGX H100: NVSwitch, 8 x ib-ndr); a PCIe card over PCIe with 1 x ib-hdr. GeForce cards fall back to TCP "
         "with host staging across nodes.")]
TopOpt = Annotated[int | None, typer.Option("--top", min=1, metavar="N", rich_help_panel=OUTPUT,
                                            help="Show at most this many GPUs.")]


def _parse_overhead(text: str | None) -> int | None:
    if text is None:
        return None
    from gpusizer.units import parse_size

    try:
        return parse_size(text, what="--overhead", default_unit="mib")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _local_report(cli_files: list[Path] | None) -> Any:
    """Probe this machine (the only path that loads NVML) and match to the catalog."""
    from gpusizer.hardware.nvml import read_host
    from gpusizer.hardware.probe import match_catalog

    return match_catalog(read_host(), _load_catalog(cli_files))

VendorOpt = Annotated[str, typer.Option(
    "--vendor", metavar="VENDOR", rich_help_panel=CONSTRAINTS, help="Whose GPUs to consider: nvidia, amd, intel or any. AMD and Intel parts need ROCm or the "
                     "Gaudi software instead of CUDA, so they are considered only when asked for.")]
