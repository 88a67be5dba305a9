"""Numbers as people read them: units, significant digits, percentages.

Data everywhere else holds raw integers and floats; these functions format
them, and only when rendering. Each says ``unknown`` for None (and NaN), never 0.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

__all__ = [
    "UNKNOWN", "PREFIXES", "BYTE_UNITS", "TIME_UNITS", "isnan", "number", "scaled", "unit", "flop_unit",
    "bytes_unit", "time_unit",
    "duration", "sig",
    "count", "SHORT_COUNT_PREFIXES", "short_count", "ratio", "pct", "pct_sig",
    "si", "exponent", "amount", "size", "per_parameter", "value_range", "join_words", "slug",
    "READABLE_SHARE", "spans_orders", "count_column", "flop_column", "bytes_column",
]

UNKNOWN = "unknown"
"""How a figure that is not known reads."""

PREFIXES: tuple[tuple[float, str], ...] = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
"""SI prefixes, largest first."""


def isnan(value: Any) -> bool:
    """Whether ``value`` is a float NaN (pandas' missing value)."""
    return isinstance(value, float) and math.isnan(value)


def _missing(value: Any) -> bool:
    return value is None or isnan(value)


F = TypeVar("F", bound=Callable[..., str])


def _known(format_value: F) -> F:
    """``format_value`` with `UNKNOWN` for a first argument that is None or NaN."""

    @functools.wraps(format_value)
    def formatted(value: Any, *args: Any, **kwargs: Any) -> str:
        return UNKNOWN if _missing(value) else format_value(value, *args, **kwargs)

    return formatted  # type: ignore[return-value]


@_known
def number(value: float | int | None, scale: float = 1.0, digits: int = 3) -> str:
    """``value / scale`` with thousands separators and ``digits`` decimals."""
    return f"{value / scale:,.{digits}f}"


@_known
def scaled(value: float | int | None, scale: float = 1.0, digits: int = 3) -> str:
    """`number`, except that a value that is not 0 never reads 0: below the last
    decimal it keeps three significant digits (``0.000153``, not ``0.000``)."""
    text = f"{value / scale:,.{digits}f}"
    if value != 0 and float(text.replace(",", "")) == 0:
        return sig(value / scale, 3)
    return text


BYTE_UNITS: tuple[tuple[float, str], ...] = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1.0, "B"))
"""Decimal byte units, largest first (as `xla_cost.Hardware` and the device datasheets count)."""


def bytes_unit(values: Iterable[float | int | None]) -> tuple[float, str]:
    """The largest unit in which the largest of ``values`` reads at least 1: ``(1e9, "GB")``."""
    largest = max((abs(v) for v in values if not _missing(v)), default=0)
    return next(((s, u) for s, u in BYTE_UNITS if largest >= s), (1.0, "B"))


TIME_UNITS: tuple[tuple[float, str], ...] = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
"""Units for a step's times, largest first."""


def time_unit(values: Iterable[float | int | None]) -> tuple[float, str]:
    """The largest time unit in which the largest of ``values`` (seconds)
    reads at least 1: ``(1e-3, "ms")`` for 0.15 ms; seconds from 1 s up."""
    largest = max((abs(v) for v in values if not _missing(v)), default=0)
    return next(((s, u) for s, u in TIME_UNITS if largest >= s), TIME_UNITS[-1])


@_known
def duration(seconds: float | None, digits: int = 4) -> str:
    """A run's length to ``digits`` significant digits in the largest unit
    that reads at least 1: ``16.87 s``, ``2.000 h``, ``34.21 days``."""
    for scale, name in ((86400.0, "days"), (3600.0, "h"), (60.0, "min")):
        if abs(seconds) >= scale:
            return f"{sig(seconds / scale, digits)} {name}"
    scale, name = time_unit([seconds])
    return f"{sig(seconds / scale, digits)} {name}"


def unit(values: Iterable[float | int | None]) -> tuple[float, str]:
    """The largest SI prefix in which the largest value reads at least 1:
    ``(1e9, "G")``; ``(1.0, "")`` below a thousand."""
    largest = max((abs(v) for v in values if not _missing(v)), default=0)
    return next(((s, p) for s, p in (*PREFIXES, (1.0, "")) if largest >= s), (1.0, ""))


def flop_unit(values: Iterable[float | int | None]) -> tuple[float, str]:
    """`unit` for FLOP counts: ``(1e9, "GFLOP")``."""
    scale, prefix = unit(values)
    return scale, f"{prefix}FLOP"


@_known
def sig(value: float | int | None, digits: int = 4) -> str:
    """``value`` to ``digits`` significant digits, without an exponent
    (``1,234``, ``12.35``, ``0.001235``)."""
    if value == 0:
        return "0"
    rounded = float(f"{value:.{digits - 1}e}")  # 0.99996 to 4 digits is 1.000, not 0.9999
    exponent = math.floor(math.log10(abs(rounded)))
    decimals = max(0, digits - 1 - exponent)
    return f"{rounded:,.{decimals}f}"


@_known
def count(value: int | float | None) -> str:
    """An exact count with thousands separators."""
    return f"{int(value):,}"


SHORT_COUNT_PREFIXES: tuple[tuple[int, str], ...] = ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "k"))
"""The letters of `short_count`, largest first: a billion is ``B``, as model sizes are written."""


@_known
def short_count(value: int | float | None, digits: int = 3) -> str:
    """A count as model sizes are written: ``digits`` significant digits and at
    least one decimal, with a letter of `SHORT_COUNT_PREFIXES` (``8.03B``,
    ``70.6B``, ``405.9B``, ``124.4M``); the letter is the rounded value's
    (``999,960,000`` reads ``1.00B``); below a thousand the exact count (``512``)."""
    for index, (scale, letter) in enumerate(SHORT_COUNT_PREFIXES):
        if abs(value) < scale:
            continue
        scaled_value = value / scale
        decimals = max(1, digits - 1 - math.floor(math.log10(abs(scaled_value))))
        text = f"{scaled_value:.{decimals}f}"
        if abs(float(text)) >= 1000 and index > 0:  # rounds up into the next letter
            scale, letter = SHORT_COUNT_PREFIXES[index - 1]
            text = f"{value / scale:.{digits - 1}f}"
        return f"{text}{letter}"
    return count(value)


@_known
def ratio(value: float | None, digits: int = 3) -> str:
    """A ratio to ``digits`` decimals."""
    return f"{value:.{digits}f}"


@_known
def pct(value: float | None, digits: int = 1) -> str:
    """A share as a percentage to ``digits`` decimals (``23.4%``)."""
    return f"{100 * value:.{digits}f}%"


@_known
def pct_sig(value: float | None, digits: int = 3) -> str:
    """A share as a percentage to ``digits`` significant digits (``1.56%``, ``0.000352%``)."""
    return f"{sig(100 * value, digits)}%"


@_known
def si(value: float | int | None, digits: int = 4) -> str:
    """A count with an SI prefix, ``digits`` significant digits: ``78.92 G``, ``2,580``; the
    prefix is the rounded value's (``999,999,999,999`` reads ``1.000 T``, not ``1,000 G``)."""
    rounded = float(f"{value:.{digits - 1}e}")
    for scale, prefix in PREFIXES:
        if abs(rounded) >= scale:
            return f"{sig(rounded / scale, digits)} {prefix}"
    return sig(value, digits) if value != int(value) else count(value)


@_known
def exponent(value: float | int | None, digits: int = 3) -> str:
    """``value`` in powers of ten, ``digits`` significant digits: ``3.24e23``, ``-1.50e-7``, ``0``."""
    if value == 0:
        return "0"
    mantissa, _, power = f"{value:.{digits - 1}e}".partition("e")
    return f"{mantissa}e{int(power)}"


@_known
def amount(value: float | int | None, name: str, digits: int = 3) -> str:
    """A total as a reader reads it: with an SI prefix of `PREFIXES` while it
    reads under a thousand of the largest (``2.21 PFLOP``, ``78.9 GFLOP``,
    ``512 FLOP``), in powers of ten beyond (`exponent`: ``3.24e23 FLOP``, not
    ``323,586,568.387 PFLOP``)."""
    if abs(float(f"{value:.{digits - 1}e}")) >= 1000 * PREFIXES[0][0]:
        return f"{exponent(value, digits)} {name}"
    text = si(value, digits)
    return f"{text}{name}" if text.endswith(tuple(p for _, p in PREFIXES)) else f"{text} {name}"


@_known
def size(value: float | int | None, digits: int = 3) -> str:
    """Bytes in the largest decimal unit they reach, ``digits`` significant
    digits: ``16.9 KB``, ``2.14 MB``, ``512 B`` (the unit is the rounded value's)."""
    rounded = float(f"{value:.{digits - 1}e}")
    scale, name = next(((s, u) for s, u in BYTE_UNITS if abs(rounded) >= s), (1.0, "B"))
    if scale == 1.0 and value == int(value):
        return f"{int(value):,} B"
    return f"{sig(rounded / scale, digits)} {name}"


READABLE_SHARE = 0.1
"""The smallest share of a column's unit a figure may be and still share it:
0.1 reads ``0.100`` (three significant digits at three decimals); a figure
below it (``0.008 MFLOP`` for 8,192 FLOP, ``0.00000100 MFLOP`` for 1) reads in
a unit of its own instead (`spans_orders`)."""


def spans_orders(values: Iterable[float | int | None], scale: float) -> bool:
    """Whether a column in the unit ``scale`` would show a non-zero figure
    below `READABLE_SHARE` of it: the column spans orders of magnitude, and
    each of its cells takes its own unit."""
    known = [abs(v) for v in values if not _missing(v) and v != 0]
    return bool(known) and min(known) / scale < READABLE_SHARE


def count_column(values: Iterable[float | int | None], name: str = "",
                 digits: int = 3) -> tuple[str, Callable[[Any], str]]:
    """How a column of counts reads: its unit for the header and the formatter of
    its cells. One SI prefix for the column (`unit`: ``("MFLOP", ...)``, cells
    ``1.064``) where every figure reads at least `READABLE_SHARE` of it; else the
    prefix per cell (`si`: ``("FLOP", ...)``, cells ``8.192 k``, ``1.049 M``, ``1``),
    where the column spans orders of magnitude (`spans_orders`). Counts under a
    thousand read whole (``11``).

    Args:
      values: the column's figures (None or NaN: ``unknown``).
      name: the counted thing after the prefix (``FLOP``; "" for a bare count).
      digits: decimals of a shared unit (`scaled`); a cell of its own has one
        significant digit more (`si`).
    """
    values = list(values)
    scale, prefix = unit(values)
    if scale == 1.0:
        return name, lambda v: count(v) if _missing(v) or v == int(v) else sig(v, digits + 1)
    if spans_orders(values, scale):
        return name, lambda v: si(v, digits + 1)
    return f"{prefix}{name}", lambda v: scaled(v, scale, digits)


def flop_column(values: Iterable[float | int | None], digits: int = 3) -> tuple[str, Callable[[Any], str]]:
    """`count_column` for FLOP: ``("GFLOP", ...)``, or ``("FLOP", ...)`` with a prefix per cell."""
    return count_column(values, "FLOP", digits)


def bytes_column(values: Iterable[float | int | None], digits: int = 1) -> tuple[str, Callable[[Any], str]]:
    """How a column of bytes reads: ``("MB", ...)`` with every cell in one
    unit (`bytes_unit`, ``digits`` decimals) where each figure reads at least
    `READABLE_SHARE` of it; else ``("", ...)``, each cell in its own unit
    (`size`: ``16.9 KB``, ``2.14 MB``)."""
    values = list(values)
    scale, name = bytes_unit(values)
    if spans_orders(values, scale):
        return "", lambda v: size(v)
    return name, lambda v: scaled(v, scale, digits)


def per_parameter(value: float) -> str:
    """A per-parameter figure: two decimals, trailing zeros dropped (``13``, ``4.96``);
    from a thousand on, whole and with separators (``5,012``); one that is not 0
    never reads 0: below 0.005, two significant digits (``0.00010``)."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    if text in ("", "0", "-0"):
        return "0" if value == 0 else sig(value, 2)
    return text


def value_range(values: Sequence[float], fmt: Callable[[float], str] = ratio) -> str:
    """``a`` if all values print alike, else ``a–b`` (smallest to largest)."""
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low}–{high}"


def join_words(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def slug(name: str) -> str:
    """A file name for ``name``: letters, digits, ``.``, ``_`` and ``-``."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return text or "model"
