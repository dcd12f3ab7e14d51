"""Option help that reads at 80 columns.

typer draws each help panel as a table of five columns (long name, short name, negative
long and short names, type) beside the help text. At 80 columns those columns take most
of the width: the help text is left about 18 characters, a word per line, and long
names such as ``--no-double-quant`` are cut. Below :data:`WIDE` columns, each panel is
drawn as a list instead, the way man pages and argparse lay options out: the option and
its value in a column of at most :data:`NAME_COLUMN` characters, the help beside it
(an option longer than that gets a line of its own, with its help below). At
:data:`WIDE` columns and more, typer's own table is kept.

typer draws a panel with ``rich_utils._print_options_panel``; :func:`stacked_panels`
puts :func:`_print_stacked_panel` in its place while one help page is drawn. Where a
typer release renames it, typer's layout is used unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: from this terminal width on, typer's table layout is kept
WIDE = 100
#: the widest option-and-value column; longer options get a line of their own
NAME_COLUMN = 26
#: spaces between the option column and the help
GAP = 2


def with_stacked_help(format_help: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """``format_help`` of a click command, drawing its option panels as lists when narrow."""

    def format_stacked(ctx: Any, formatter: Any) -> None:
        with stacked_panels():
            format_help(ctx, formatter)

    return format_stacked


@contextmanager
def stacked_panels() -> Iterator[None]:
    """While active, typer's option panels narrower than :data:`WIDE` are drawn as lists."""
    from typer import rich_utils

    original = getattr(rich_utils, "_print_options_panel", None)
    if original is None:  # pragma: no cover - a typer without it keeps its own layout
        yield
        return

    def panel(*, name: str, params: Any, ctx: Any, markup_mode: Any, console: Any) -> None:
        if console.width >= WIDE or not params:
            original(name=name, params=params, ctx=ctx, markup_mode=markup_mode, console=console)
        else:
            _print_stacked_panel(name=name, params=params, ctx=ctx, markup_mode=markup_mode, console=console)

    rich_utils._print_options_panel = panel
    try:
        yield
    finally:
        rich_utils._print_options_panel = original


def option_words(param: Any, ctx: Any) -> str:
    """How an option or argument is written: ``--batch N``, ``--cuda-graphs / --no-cuda-graphs``,
    ``-v, --explain``, ``GPU...`` (an argument shows its value alone)."""
    shown = getattr(param, "display_type_rich", None)
    value = (shown(ctx=ctx) or "") if shown is not None else ""
    if param.param_type_name == "argument":
        display = getattr(param, "_rich_display_name", None)
        name = display() if display else param.human_readable_name
        return f"{name} {value}" if value else name
    names = ", ".join(sorted(param.opts, key=lambda o: (o.startswith("--"), o)))
    if param.secondary_opts:
        names += " / " + ", ".join(param.secondary_opts)
    return f"{names} {value}" if value else names


def _print_stacked_panel(*, name: str, params: Any, ctx: Any, markup_mode: Any, console: Any) -> None:
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text
    from typer import rich_utils

    inner = max(console.width - 4, 20)  # the panel's borders and padding
    def words_of(param: Any) -> str:
        return ("*" if getattr(param, "required", False) else "") + option_words(param, ctx)

    words = [words_of(p) for p in params]
    # one column for the whole page, so every panel's help starts at the same place
    page = [words_of(p) for p in getattr(ctx.command, "params", ()) if not getattr(p, "hidden", False)] or words
    column = min(NAME_COLUMN, max(len(w) for w in (*page, *words)))
    help_width = max(inner - column - GAP, 10)
    option_style = getattr(rich_utils, "STYLE_OPTION", "bold cyan")
    lines: list[Any] = []
    for param, word in zip(params, words, strict=True):
        help_text = rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
        range_str = getattr(param, "_get_number_range_help_str", lambda: None)()
        rendered = console.render_lines(help_text, console.options.update(width=help_width), pad=False,
                                        new_lines=False)
        help_lines = [Text.assemble(*((seg.text, seg.style) for seg in line if not seg.control))
                      for line in rendered]
        help_lines = [line for line in help_lines if line.plain.strip()]
        if range_str:
            bounds = Text(f"[{range_str}]", style=getattr(rich_utils, "STYLE_TYPES", "yellow"))
            if help_lines:
                help_lines[-1].rstrip()
            if help_lines and len(help_lines[-1]) + 1 + len(bounds) <= help_width:
                help_lines[-1] = Text.assemble(help_lines[-1], " ", bounds)
            else:
                help_lines.append(bounds)
        label = Text(word, style=option_style)
        indent = " " * (column + GAP)
        if len(label) <= column and help_lines:
            label.pad_right(column + GAP - len(label))
            lines.append(label + help_lines[0])
            rest = help_lines[1:]
        else:
            lines.append(label)
            rest = help_lines
        lines.extend(Text(indent) + line for line in rest)
    console.print(Panel(Group(*lines), border_style=getattr(rich_utils, "STYLE_OPTIONS_PANEL_BORDER", "dim"),
                        title=name, title_align=getattr(rich_utils, "ALIGN_OPTIONS_PANEL", "left")))
