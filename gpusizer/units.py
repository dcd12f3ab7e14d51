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
    if not math.isfinite(number):  # (the pattern has no sign or letters: a literal past float's range)
        raise ValueError(f"{what} {text!r} is too large to be a count")
    if number < 1:
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


def finite_number(value: object, low: float | None = None, high: float | None = None) -> float:
    """``value`` (a number, or text such as ``"2.5"``) as a float within [``low``, ``high``].

    The one check for a real-valued input: raises ``ValueError`` saying what is wrong, with no
    option name (the caller adds it): "must be a finite number" for NaN and the infinities
    (which a range check alone lets through or words wrongly, as NaN compares false with
    everything), "must be a number", or the range it must be in. An int is compared exactly,
    however large."""
    number: int | float
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {value!r}")
    if isinstance(value, int):
        number = value
    else:
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(f"must be a number, not {str(value)[:24]!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"must be a finite number, not {str(value)[:24]}")
    if (low is not None and number < low) or (high is not None and number > high):
        if high is None:
            raise ValueError(f"must be at least {_shown(low)}, not {_shown(number)}")
        if low is None:
            raise ValueError(f"must be at most {_shown(high)}, not {_shown(number)}")
        raise ValueError(f"must be between {_shown(low)} and {_shown(high)}, not {_shown(number)}")
    return float(number)


def _shown(value: int | float | None) -> str:
    """A bound or a bad value in an error message, briefly: ``1,000,000``, ``0.05``, ``1e+20``."""
    if isinstance(value, int) and abs(value) >= 10**16:
        digits = len(str(abs(value)))
        return f"a number of {digits:,} digits" if digits > 308 else f"{float(value):.4g}"
    if value is None or not float(value).is_integer() or abs(value) >= 1e16:
        return f"{value:.4g}" if value is not None else "none"
    return f"{int(value):,}"


def plural(count: int | float, word: str, many: str | None = None, *, shown: str | None = None) -> str:
    """``count`` and ``word``, the word in the plural unless the count is one: "1 GPU",
    "8 GPUs", "1 sequence", "1,024 sequences". ``many``: the plural where it is not ``word``
    + "s" ("1 micro-batch", "2 micro-batches"); ``shown``: the count as written elsewhere
    (``format_count``'s "10.2K"), else with thousands separators."""
    text = shown if shown is not None else (f"{count:,}" if isinstance(count, int) else f"{count:,g}")
    return f"{text} {word if count == 1 else (many or word + 's')}"


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
