"""Turning results into rich tables for people, or one JSON document for scripts.

Rich decides on colour: it honours NO_COLOR, FORCE_COLOR and non-TTY output.
``--no-color`` wins over all of them. JSON never goes through rich.

This module is the one place that says how a missing value and a boolean look
in human output (:data:`NA`, :func:`show_value`, :func:`show_bool`, :func:`fmt`);
the other render modules use it rather than spelling "n/a" or "yes"/"no".

Text from data files and drivers (catalog names, a config's ``_name_or_path``,
NVML strings) never reaches the terminal raw: every console made here drops
control characters (escape sequences included) from what it prints, and reads
no markup or emoji codes in it (:func:`make_console`). Error lines show them
escaped (:func:`escape_control`). JSON escapes them by itself."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from gpusizer.units import NA, show_bool, show_value

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderResult
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

__all__ = ["NA", "Bar", "Lines", "bar", "chosen_width", "emit_json", "escape_control", "fit_table", "fmt", "fmt_ratio",
           "make_console", "print_lines", "strip_control", "show_bool", "show_value", "wrap_note"]

#: C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), the
#: Unicode line and paragraph separators, and the bidirectional overrides and
#: isolates that reorder what a terminal shows.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def strip_control(text: str) -> str:
    """``text`` without terminal control characters (see :data:`_CONTROL`)."""
    return _CONTROL.sub("", text) if _CONTROL.search(text) else text


def escape_control(text: str) -> str:
    """``text`` with terminal control characters shown as ``\\x1b``-style escapes."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class _Clean:
    """A renderable whose text segments are stripped of control characters."""

    def __init__(self, renderable: ConsoleRenderable) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.segment import Segment

        for segment in console.render(self.renderable, options):
            if segment.control or not _CONTROL.search(segment.text):
                yield segment
            else:
                yield Segment(strip_control(segment.text), segment.style)


def _clean_hook() -> Any:
    from rich.console import RenderHook

    class CleanHook(RenderHook):
        def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
            return [_Clean(r) for r in renderables]

    return CleanHook()


#: The narrowest layout, a choice rather than a measurement: the longest catalog id (29
#: characters) and one figure beside it; a smaller COLUMNS is read as this.
MIN_WIDTH = 40


def chosen_width(stream: Any) -> int | None:
    """The width output to ``stream`` is laid out at, where gpusizer chooses it; None where rich
    reads the terminal's own."""
    import os

    columns = os.environ.get("COLUMNS", "").strip()
    if not columns and not (hasattr(stream, "isatty") and stream.isatty()):
        # Piped or redirected: no terminal to fit, so do not squeeze tables to 80 columns.
        return 200
    # COLUMNS as given, but never below MIN_WIDTH: nothing lays out in fewer (rich prints
    # nothing at 0); not a number: the terminal's own width
    return max(MIN_WIDTH, int(columns)) if columns.isdigit() else None


def make_console(*, stderr: bool = False, no_color: bool = False) -> Console:
    from rich.console import Console

    kwargs: dict[str, Any] = {"stderr": stderr, "highlight": False, "markup": False, "emoji": False}
    kwargs["width"] = chosen_width(sys.stderr if stderr else sys.stdout)
    if no_color:
        kwargs["no_color"] = True
        kwargs["color_system"] = None

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            """Let the CLI's guard end quietly (rich would exit 1 by itself)."""
            self.quiet = True
            raise BrokenPipeError

    console = _Console(**kwargs)
    console.push_render_hook(_clean_hook())
    return console


class Lines:
    """Text laid out already, in lines of no style: where they fit the width, what a console from
    :func:`make_console` prints of them is the text, control characters dropped, and a newline,
    so :func:`print_lines` writes that itself, without loading rich's console. Elsewhere
    :meth:`rich_text` is what to give ``console.print`` (which folds a line wider than the
    console, as it always has)."""

    def __init__(self, text: str) -> None:
        self.plain = text

    def rich_text(self) -> Text:
        from rich.text import Text

        return Text(self.plain, no_wrap=True, overflow="ignore")


def print_lines(lines: Lines) -> bool:
    """Write ``lines`` to stdout as a console from :func:`make_console` prints them, and say so;
    False, having written nothing, where rich would print them differently: a width gpusizer does
    not choose (a terminal's own), a dumb terminal (rich lays out at 80 there), a tab (rich
    expands it) or a line wider than the width (rich folds it), in cells as rich counts them."""
    import os

    from rich.cells import cell_len

    width = chosen_width(sys.stdout)
    text = strip_control(lines.plain)
    if (width is None or os.environ.get("TERM", "").lower() in ("dumb", "unknown") or "\t" in text
            or max(cell_len(line) for line in text.split("\n")) > width):
        return False
    sys.stdout.write(text + "\n")
    return True


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as null, for a document that must be JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return [_finite(v) for v in value]
    return value


#: How many JSON documents this run has written to stdout (the CLI writes an error
#: document under --json only when the command has not written its own).
JSON_WRITTEN = {"documents": 0}


def emit_json(document: Mapping[str, Any]) -> None:
    """One JSON document on stdout: always valid JSON (RFC 8259), so a number that is
    not finite is written as null, and always ASCII (non-ASCII text is escaped)."""
    try:
        text = json.dumps(document, indent=2, sort_keys=False, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(document), indent=2, sort_keys=False, allow_nan=False)
    JSON_WRITTEN["documents"] += 1
    sys.stdout.write(text)
    sys.stdout.write("\n")


def fmt(value: object, digits: int = 1) -> str:
    """Format a catalog value for a table cell: None as :data:`NA`, booleans by
    :func:`show_bool`, numbers with thousands separators and ``digits`` decimals."""
    if value is None:
        return NA
    if isinstance(value, bool):
        return show_bool(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 10:
            return f"{int(value):,}"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}" if abs(value) >= 1 else f"{value:.{max(digits, 2)}f}"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    return str(value)


def fmt_ratio(ratio: float | None) -> str:
    """A ratio as "1.23x"; None as :data:`NA`."""
    if ratio is None:
        return NA
    if ratio >= 10:
        return f"{ratio:.0f}x"
    if ratio >= 0.1:
        return f"{ratio:.2f}x"
    return f"{ratio:.3f}x"


def bar(fraction: float, width: int = 30) -> str:
    """A text bar of ``width`` cells for a fraction in [0, 1]."""
    fraction = max(0.0, min(1.0, fraction))
    full = int(fraction * width)
    rest = fraction * width - full
    partial = " ▏▎▍▌▋▊▉"[int(rest * 8)] if full < width else ""
    return ("█" * full + partial).ljust(width)


class Bar:
    """A bar for a fraction in [0, 1] that takes the width its table column is given, from
    ``min_width`` to ``max_width`` cells: at a narrow terminal bars shrink before data does."""

    def __init__(self, fraction: float, max_width: int = 30, min_width: int = 6) -> None:
        self.fraction, self.max_width, self.min_width = fraction, max_width, min_width

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        from rich.measure import Measurement

        return Measurement(self.min_width, self.max_width).with_maximum(options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.segment import Segment

        yield Segment(bar(self.fraction, max(1, min(self.max_width, options.max_width))))


def fit_table(table: Table, width: int, drop: Sequence[str] = ()) -> Table:
    """``table`` laid out within ``width`` cells without cutting a number.

    Right-justified columns hold numbers: each keeps the width of its widest figure, so no figure
    wraps or is cut (words in such a column may wrap), and a ``no_wrap`` column (ids) keeps the
    width of its widest cell. Other text columns may wrap, and :class:`Bar` cells shrink. If the
    table still needs more than ``width``, the columns whose headers ``drop`` names go, in that
    order, until it fits, and the caption says which went (``--json`` and a wider terminal show
    them).
    """
    fixed = [c for c in table.columns if c.width is None and (c.justify == "right" or c.no_wrap or _one_word(c))]
    for whole in (True, False):  # every cell on one line if that fits; else words in these columns may wrap
        for column in fixed:
            head = _whole_width(column.header, True) if whole else max(map(len, str(column.header).split() or [""]))
            column.width = max([head, *(_whole_width(c, whole or column.no_wrap) for c in column._cells)])
        if _minimum_width(table) <= width:
            break
    original = list(table.columns)
    named = {str(c.header): c for c in original}
    gone: list[Any] = []

    def lay(without: list[Any]) -> bool:
        table.columns[:] = [c for c in original if c not in without]
        for i, column in enumerate(table.columns):
            column._index = i  # (rich pads the first and last columns by their index)
        return _minimum_width(table) <= width

    for header in drop:
        if lay(gone):
            break  # (it fits, and nothing more goes: laying it out again for each header tells nothing new)
        if header in named:
            gone.append(named[header])
    # take back what fits again, most important first (a later drop may have made room)
    for column in reversed(gone[:]):
        if lay([c for c in gone if c is not column]):
            gone.remove(column)
    lay(gone)
    dropped = [str(c.header) for c in gone]
    words = []
    if dropped:
        words.append(f"Left out at {width} columns: {', '.join(dropped)} (a wider terminal or --json shows them).")
    if _minimum_width(table) > width:
        words.append(f"Too narrow for this table at {width} columns: some cells are cut (a wider terminal or --json "
                     "shows them whole).")
    if words:
        table.caption = " ".join([*([str(table.caption)] if table.caption else []), *words])
        table.caption_justify = "left"
    return table


def _one_word(column: Any) -> bool:
    """Whether every cell of ``column`` is one word (yes, no, n/a): it cannot wrap, only be cut."""
    return all(not isinstance(c, Bar) and len(_plain(c).split()) <= 1 for c in column._cells)


def _whole_width(cell: object, no_wrap: bool) -> int:
    """Cells a fixed column needs to show ``cell`` whole: each line of a cell with a figure in it
    (or of any cell, in a ``no_wrap`` column), and the longest word of a text cell, which may wrap."""
    from rich.cells import cell_len

    text = _plain(cell)
    if no_wrap or any(ch.isdigit() for ch in text):
        return max(cell_len(line) for line in text.split("\n"))
    return max((cell_len(word) for word in text.split()), default=0)


def _plain(cell: object) -> str:
    return cell.plain if hasattr(cell, "plain") else str(cell)


def _minimum_width(table: Table) -> int:
    """The fewest cells ``table`` can be laid out in: what rich's own measurement gives for these
    cells (fixed columns at their width, text at its longest word, bars at their least), counted
    directly because measuring through rich costs as much as rendering the table twice."""
    from rich.cells import cell_len
    from rich.console import Console
    from rich.measure import Measurement

    total = table._extra_width
    for i, column in enumerate(table.columns):
        pad = table._get_padding_width(i)
        if column.width is not None:
            total += column.width + pad
            continue
        least = column.min_width or 1
        for cell in ([column.header] if table.show_header else []) + list(column._cells):
            if isinstance(cell, Bar):
                least = max(least, cell.min_width)
            elif isinstance(cell, str) or hasattr(cell, "plain"):
                least = max(least, *(cell_len(word) for word in _plain(cell).split() or [""]))
            else:
                measure = Console(width=1_000, color_system=None)
                least = max(least, Measurement.get(measure, measure.options, cell).minimum)
        total += least + pad
    return total


def wrap_note(text: str, width: int, lead: str = "Note: ") -> str:
    """``lead`` + ``text`` wrapped to ``width``, the wrapped lines indented under the text."""
    import textwrap

    return textwrap.fill(text, width=max(width, 40), initial_indent=lead, subsequent_indent=" " * min(len(lead), 12),
                         break_long_words=False, break_on_hyphens=False)


def columns(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool], width: int | None,
            drop: Sequence[int] = ()) -> tuple[list[int], str, list[str]]:
    """Plain-text columns, two spaces apart, numbers right-aligned and never cut: the kept column
    indexes, the header line and the row lines. Within ``width``, the columns ``drop`` lists go, in
    that order, until the lines fit; then those that fit again come back, most important first.
    Rich's Table draws the same at several times the cost, which a 149-row listing feels."""
    keep = list(range(len(headers)))

    def laid(cols: list[int]) -> tuple[str, list[str]]:
        sizes = {i: max([len(headers[i]), *(len(r[i]) for r in rows)]) for i in cols}

        def line(cells: Sequence[str]) -> str:
            return "  ".join(cells[i].rjust(sizes[i]) if numeric[i] else cells[i].ljust(sizes[i])
                             for i in cols).rstrip()

        return line(headers), [line(r) for r in rows]

    def fits(table: tuple[str, list[str]]) -> bool:
        return width is None or max(len(x) for x in (table[0], *table[1])) <= width

    dropped: list[int] = []
    for col in drop:
        if fits(laid(keep)):
            break
        keep.remove(col)
        dropped.append(col)
    for col in reversed(dropped):
        trial = sorted([*keep, col])
        if fits(laid(trial)):
            keep = trial
    return (keep, *laid(keep))
