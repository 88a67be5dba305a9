"""Results that render themselves from their data: the `Rendered` mixin.

A result says what it is in one line (`Rendered.describe`), holds its figures
as raw numbers (`Rendered.to_frame`, `Rendered.to_dict`) and, if it wants more
than one table, lists them (`Rendered.sections`); the mixin gives it the four
formats of `xla_cost.present.formats.Renderable` (a terminal table, markdown,
CSV and JSON), formatted the same way for every result.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from typing import TYPE_CHECKING, Any

from xla_cost.present.markdown import markdown_table
from xla_cost.present.text import TextTable, render, resolve_width
from xla_cost.present.units import UNKNOWN, sig

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Section", "Rendered", "cell"]


def cell(value: Any) -> str:
    """One value as a table shows it: integers with separators, other numbers
    to 4 significant digits, ``unknown`` for None and NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return UNKNOWN
    if isinstance(value, (bool, str)):
        return str(value)
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        return sig(float(value), 4)
    return str(value)


@dataclasses.dataclass(frozen=True)
class Section:
    """One table of a result.

    Attributes:
      title: a line above it ("" for none).
      frame: raw values; the first column is the rows' label.
      left: columns justified left in a terminal (the label always is).
    """

    title: str
    frame: pd.DataFrame
    left: tuple[str, ...] = ()

    def cells(self) -> pd.DataFrame:
        """The frame's values as `cell` writes them, its first column as the index."""
        shown = self.frame.map(cell) if len(self.frame) else self.frame.astype(str)
        return shown.set_index(shown.columns[0])


class Rendered:
    """Mixin: `to_table`, `to_markdown`, `to_csv` and `to_json` from the
    result's `describe`, `to_frame`, `to_dict` and, optionally, `sections` and
    `notes`."""

    def describe(self) -> str:
        """One line: what the result is."""
        raise NotImplementedError

    def to_frame(self) -> pd.DataFrame:
        """The result's rows, raw numbers (its CSV)."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values, every figure raw."""
        raise NotImplementedError

    def sections(self) -> list[Section]:
        """The tables shown (default: `to_frame` as one table)."""
        return [Section("", self.to_frame())]

    def notes(self) -> list[str]:
        """Lines shown after the tables (assumptions, unknowns)."""
        return []

    def to_table(self, width: int | None = None) -> str:
        """Plain-text tables for terminals, wrapped to ``width`` (None: the terminal's)."""
        blocks: list[str | TextTable] = [self.describe()]
        blocks += [TextTable(s.cells(), s.title, left=s.left) for s in self.sections()]
        blocks += [f"- {note}" for note in self.notes()]
        return render(blocks, resolve_width(width))

    def _repr_markdown_(self) -> str:
        """How a notebook (IPython's display) shows the result: `to_markdown`."""
        return self.to_markdown()

    def to_markdown(self) -> str:
        """A markdown section: the description, the tables, the notes as a list."""
        parts = [self.describe()]
        for section in self.sections():
            parts.append((f"**{section.title}**\n\n" if section.title else "") + markdown_table(section.cells()))
        if self.notes():
            parts.append("\n".join(f"- {note}" for note in self.notes()))
        return "\n\n".join(parts) + "\n"

    def to_csv(self) -> str:
        """`to_frame` as CSV."""
        return self.to_frame().to_csv(index=False)

    def to_json(self) -> str:
        """`to_dict` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2)
