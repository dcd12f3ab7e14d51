"""Turning results into rich tables for people, or one JSON document for scripts.

Rich decides on colour: it honours NO_COLOR, FORCE_COLOR and non-TTY output.
``--no-color`` wins over all of them. JSON never goes through rich.

This module is the one place that says how a missing value and a boolean look
in human output (:data:`NA`, :func:`show_value`, :func:`show_bool`, :func:`fmt`);
the other render modules use it rather than spelling "n/a" or "yes"/"no"."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpusizer.units import NA, show_bool, show_value

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["NA", "bar", "emit_json", "fmt", "fmt_ratio", "make_console", "show_bool", "show_value"]

def make_console(*, stderr: bool = False, no_color: bool = False) -> Console:
    import os

    from rich.console import Console

    kwargs: dict[str, Any] = {"stderr": stderr, "highlight": False}
    stream = sys.stderr if stderr else sys.stdout
    if not os.environ.get("COLUMNS") and not (hasattr(stream, "isatty") and stream.isatty()):
        # Piped or redirected: no terminal to fit, so do not squeeze tables to 80 columns.
        kwargs["width"] = 200
    if no_color:
        kwargs["no_color"] = True
        kwargs["color_system"] = None
    return Console(**kwargs)


def emit_json(document: Mapping[str, Any]) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, allow_nan=False))
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
