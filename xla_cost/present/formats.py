"""The output formats every result renders in, chosen in one place.

A result (`xla_cost.Report`, `xla_cost.SweepResult`, `xla_cost.FitResult`,
`xla_cost.ScalingResult`, `xla_cost.TrainingEstimate`, the zoo listing) is a
`Renderable`; `render_as` picks the format. This module imports nothing heavy,
so the command line reads `FORMATS` for its choices without loading pandas.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from xla_cost.errors import InputError

__all__ = ["FORMATS", "Renderable", "render_as"]

FORMATS: tuple[str, ...] = ("table", "json", "csv", "markdown")
"""The output formats of every command (``--format``) and of `render_as`."""


@runtime_checkable
class Renderable(Protocol):
    """What can be written in every format: a `xla_cost.Report`, the zoo listing."""

    def to_table(self, width: int | None = None) -> str: ...

    def to_json(self) -> str: ...

    def to_csv(self) -> str: ...

    def to_markdown(self) -> str: ...


def render_as(result: Renderable, format: str, width: int | None = None) -> str:  # noqa: A002 - --format
    """``result`` in one of `FORMATS`, the one place where a format is chosen.

    Args:
      result: a report or listing with ``to_table``/``to_json``/``to_csv``/``to_markdown``.
      format: ``table`` (for terminals, wrapped to ``width``), ``json``, ``csv``
        or ``markdown``.
      width: the table's width (see `resolve_width`); the other formats ignore it.
    """
    if format not in FORMATS:
        raise InputError(
            f"a format in {', '.join(FORMATS)}", repr(format), "Use e.g. format='json' (--format json)."
        )
    if format == "table":
        return result.to_table(width=width)
    return getattr(result, f"to_{format}")()
