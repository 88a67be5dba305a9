"""Markdown as the report pages write it: pipe tables, and a page as a file's bytes.

Presentation only, like the rest of `xla_cost.present`: the cells arrive
formatted (`xla_cost.present.units`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["markdown_file", "pipe_table"]


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


def markdown_file(markdown: str) -> bytes:
    """``markdown`` as a file's bytes: UTF-8, ending in exactly one newline."""
    return (markdown.rstrip("\n") + "\n").encode("utf-8")
