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
    "count", "ratio", "pct", "pct_sig",
    "si", "per_parameter", "value_range", "join_words", "slug",
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


def per_parameter(value: float) -> str:
    """A per-parameter figure: two decimals, trailing zeros dropped (``13``, ``4.96``)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


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
