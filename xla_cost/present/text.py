"""Plain-text tables for terminals: they fit a width and never cut a word.

`render` lays out text lines and `TextTable`s with rich (no colours, no
markup). Each column gets at least its longest word (header included), so a
header such as ``backward/forward`` is never shortened to ``backward/forwa…``;
the widest columns wrap at spaces first. Where even the longest words do not
fit, the table is wider than asked rather than cut.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

from xla_cost.errors import InputError

__all__ = ["TextTable", "render", "resolve_width", "UNLIMITED"]

UNLIMITED = 1_000_000
"""A width no line reaches: pass it for natural width (a file) even from a terminal."""


def resolve_width(width: int | None) -> int | None:
    """The width to render at: ``width``; else the terminal's when stdout is one; else None.

    None means unlimited: every line at its natural width, as in a file or a pipe.
    """
    if width is None:
        return shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise InputError(
            "width None or an integer >= 1", repr(width),
            "Pass e.g. width=80, or None for the terminal's width.",
        )
    return width


@dataclasses.dataclass(frozen=True)
class TextTable:
    """A frame to render: its index is the first column, justified left.

    Attributes:
      frame: the cells, already formatted (anything ``str`` can show).
      title: a line above the table.
      left: columns justified left; the others are justified right (numbers).
      prose: columns of running text, the first to wrap when the table is too wide.
    """

    frame: pd.DataFrame
    title: str = ""
    left: tuple[str, ...] = ()
    prose: tuple[str, ...] = ()


def _longest_word(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(word) for word in text.split()), default=0)


def _longest_line(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(line) for line in text.splitlines()), default=0)


def _shrink(widths: list[int], targets: list[int], excess: int) -> int:
    """Narrows the widest columns above their targets, one cell at a time; the excess left."""
    while excess > 0:
        shrinkable = [i for i, (w, t) in enumerate(zip(widths, targets)) if w > t]
        if not shrinkable:
            break
        widest = max(widths[i] for i in shrinkable)
        for i in shrinkable:
            if widths[i] == widest and excess > 0:
                widths[i] -= 1
                excess -= 1
    return excess


def _column_widths(cells: list[list[str]], prose: list[bool], room: int | None) -> list[int]:
    """Content width per column, at most ``room`` in all where the longest words allow.

    From the natural widths, narrowing in this order: headers wrap at spaces; then
    running text (``prose``) wraps; then every column, down to its longest word.
    """
    widths = [max(1, max(_longest_line(c) for c in column)) for column in cells]
    if room is None:
        return widths
    floors = [max(1, max(_longest_word(c) for c in column)) for column in cells]
    data = [
        max(_longest_word(column[0]), max((_longest_line(c) for c in column[1:]), default=0), 1)
        for column in cells
    ]
    excess = sum(widths) - room
    excess = _shrink(widths, data, excess)
    excess = _shrink(widths, [f if p else w for f, p, w in zip(floors, prose, widths)], excess)
    _shrink(widths, floors, excess)  # what is left over: wider than asked, never cut
    return widths


def _render_table(table: TextTable, width: int | None) -> str:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    frame = table.frame
    headers = [str(frame.index.name or ""), *map(str, frame.columns)]
    rows = [[str(index), *map(str, row)] for index, row in zip(frame.index, frame.itertuples(index=False))]
    columns = [list(column) for column in zip(headers, *rows)]
    # The default box draws an edge and a separator per column, and rich pads
    # each cell with a space on either side: 3 per column and one more.
    overhead = 3 * len(headers) + 1
    prose = [position > 0 and header in table.prose for position, header in enumerate(headers)]
    widths = _column_widths(columns, prose, None if width is None else width - overhead)
    total = sum(widths) + overhead

    rich_table = Table(title=Text(table.title) if table.title else None, title_justify="left", box=box.HEAVY_HEAD)
    for position, (header, content_width) in enumerate(zip(headers, widths)):
        justify = "left" if position == 0 or header in table.left else "right"
        rich_table.add_column(Text(header), justify=justify, width=content_width, overflow="fold")
    for row in rows:
        rich_table.add_row(*(Text(cell) for cell in row))
    return _print(rich_table, total)


def _print(renderable: object, width: int) -> str:
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(
        file=buffer, width=width, color_system=None, force_terminal=False,
        markup=False, emoji=False, highlight=False,
    )
    console.print(renderable, overflow="fold")
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


def render(blocks: Sequence[str | TextTable], width: int | None) -> str:
    """Lines of text and tables, one after the other, wrapped to ``width`` (None: unlimited).

    Args:
      blocks: text (wrapped at spaces) and `TextTable`s.
      width: the terminal width; None keeps every line at its natural width.

    Returns:
      The text, each line at most ``width`` wide unless a single word is wider.
    """
    from rich.text import Text

    out = []
    for block in blocks:
        if isinstance(block, TextTable):
            out.append(_render_table(block, width))
        else:
            out.append(_print(Text(block), width or UNLIMITED))
    return "".join(out)
