"""Markdown as the report pages write it: pipe tables, and a page as a file's bytes.

Presentation only, like the rest of `xla_cost.present`: the cells arrive
formatted (`xla_cost.present.units`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.present.units import UNKNOWN

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["markdown_file", "pipe_table", "markdown_table"]


def pipe_table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """A markdown pipe table; ``align`` is ``l``/``r`` per column (default: the
    first column left, the others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(":---" if a == "l" else "---:" for a in align) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    return "\n".join(lines)


_FIGURE = re.compile(r"[-+]?(\d[\d,]*)?\.?\d+(e[-+]?\d+)?( \*)?(%|x| [kMGTP]?| [KMGT]?B)?( \*)?")
"""A formatted figure: ``1,234``, ``0.000153``, ``1.010``, ``12.3%``, ``1.91x``, ``64.252 *``,
a count or bytes in a unit of its own (``8.192 k``, ``1.049 M *``, ``16.9 KB``)."""

_NO_FIGURE = frozenset({UNKNOWN, "n/a", "", "—"})


def markdown_table(frame: pd.DataFrame, index: bool = True) -> str:
    """``frame`` as a `pipe_table`, every cell exactly as formatted (pandas'
    own ``to_markdown`` reads ``1.010`` back as ``1.01`` and ``0.0000188`` as
    ``1.88e-05``): the columns of figures right, the others left.

    Args:
      frame: formatted cells (strings or numbers; None is empty).
      index: write the index as the first column (its name as the header).
    """
    shown = frame.reset_index() if index else frame
    columns = [["" if v is None else str(v) for v in shown[c]] for c in shown.columns]

    def figures(cells: list[str]) -> bool:
        found = [v for v in cells if v not in _NO_FIGURE]
        return bool(found) and all(_FIGURE.fullmatch(v) for v in found)

    align = "".join("r" if figures(cells) else "l" for cells in columns)
    return pipe_table([str(c) for c in shown.columns], zip(*columns), align)


def markdown_file(markdown: str) -> bytes:
    """``markdown`` as a file's bytes: UTF-8, ending in exactly one newline."""
    return (markdown.rstrip("\n") + "\n").encode("utf-8")
