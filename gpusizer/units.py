"""Unit conversion, done once at the boundary.

Inside gpusizer memory is an integer count of bytes. GiB means 2**30 bytes and
GB means 10**9 bytes; the two are never mixed. Counts such as "60M" or "1.3B"
are decimal (M = 10**6, B = 10**9).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TypeVar

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40
KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12

_COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_COUNT_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.IGNORECASE)

_SIZE_UNITS = {
    "b": 1,
    "kb": KB,
    "mb": MB,
    "gb": GB,
    "tb": TB,
    "kib": KIB,
    "mib": MIB,
    "gib": GIB,
    "tib": TIB,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_count(text: str, *, what: str = "value") -> int:
    """Parse a positive count such as ``60M``, ``1.3B``, ``7e9`` or ``60000000``.

    Raises ``ValueError`` with a message naming ``what`` for zero, negatives,
    unknown suffixes and non-numbers.
    """
    match = _COUNT_RE.match(str(text))
    if not match:
        raise ValueError(
            f"{what} {text!r} is not a count; use a number with an optional K, M, B or T "
            "suffix, e.g. 60M, 1.3B, 7e9"
        )
    number = float(match.group(1)) * _COUNT_SUFFIX[match.group(2).lower()]
    if not math.isfinite(number) or number < 1:
        raise ValueError(f"{what} {text!r} must be at least 1")
    return int(round(number))


_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*(h|d|w|hours?|days?|weeks?)\s*$", re.IGNORECASE)
_HOURS_PER = {"h": 1.0, "d": 24.0, "w": 168.0}


def parse_duration_hours(text: str, *, what: str = "duration") -> float:
    """Parse a wall-clock duration such as ``14d``, ``36h`` or ``2w`` into hours.

    Raises ``ValueError`` naming ``what`` for zero, a missing unit or anything else.
    """
    match = _DURATION_RE.match(str(text))
    if not match:
        raise ValueError(f"{what} {text!r} is not a duration; use a number with h, d or w, e.g. 36h, 14d, 2w")
    hours = float(match.group(1)) * _HOURS_PER[match.group(2)[0].lower()]
    if not hours > 0:
        raise ValueError(f"{what} {text!r} must be longer than zero")
    return hours


def parse_size(text: str, *, what: str = "size", default_unit: str = "gib") -> int:
    """Parse a memory size such as ``24GiB``, ``1536MB`` or ``3.5`` into bytes.

    A bare number is read in ``default_unit``. GB is 10**9 bytes, GiB 2**30.
    """
    match = _SIZE_RE.match(str(text))
    unit = (match.group(2).lower() if match else "") or default_unit
    if not match or unit not in _SIZE_UNITS:
        raise ValueError(
            f"{what} {text!r} is not a size; use e.g. 24GiB, 40GB or 1536MiB "
            "(GiB = 2^30 bytes, GB = 10^9 bytes)"
        )
    number = float(match.group(1)) * _SIZE_UNITS[unit]
    if not math.isfinite(number):  # (the pattern has no sign, so it is never negative)
        raise ValueError(f"{what} {text!r} is too large to be a size")
    return int(round(number))


#: How a missing value (``None``) is shown in tables and text. JSON keeps ``null``.
NA = "n/a"

_T = TypeVar("_T")


def show_bool(value: bool, yes: str = "yes", no: str = "no") -> str:
    """How a boolean is shown: "yes"/"no", or the two words given (e.g. "on"/"off")."""
    return yes if value else no


def show_value(value: _T | None, formatter: Callable[[_T], str] = str) -> str:
    """:data:`NA` for ``None``, else ``formatter(value)``."""
    return NA if value is None else formatter(value)


def gib_to_bytes(gib: float) -> int:
    return int(round(gib * GIB))


def bytes_to_gib(n: int) -> float:
    return n / GIB


def format_bytes(n: int | float, *, binary: bool = True, digits: int = 2) -> str:
    """Format a byte count as GiB/MiB/KiB (binary) or GB/MB/KB (decimal).

    A missing value is the caller's to show (``gpusizer.render.common.show_value``).
    """
    step, units = (1024, ("B", "KiB", "MiB", "GiB", "TiB")) if binary else (1000, ("B", "KB", "MB", "GB", "TB"))
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in units:
        if value < step or unit == units[-1]:
            if unit == "B":
                return f"{sign}{int(value)} B"
            return f"{sign}{value:.{digits}f} {unit}"
        value /= step
    raise AssertionError("unreachable")


def format_duration(seconds: float, *, short: bool = False) -> str:
    """A wall-clock time in the unit that reads best: s, min, h or days (d when ``short``)."""
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:,.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 86400:,.1f} {'d' if short else 'days'}"


def format_count(n: int | float) -> str:
    """Format a parameter or sample count with a decimal suffix (K, M, B, T).

    A missing value is the caller's to show (``gpusizer.render.common.show_value``).
    """
    # round to 3 significant figures first, so 999,885,952 reads 1B, not 1e+03M
    value = float(f"{float(n):.3g}")
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"
