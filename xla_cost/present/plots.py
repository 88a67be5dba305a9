"""The figures a result draws for itself (`xla_cost.Report.plot`,
`xla_cost.SweepResult.plot`), in the reports' style (`xla_cost.present.figures`).

Each function returns a matplotlib ``Figure`` on the Agg canvas (no pyplot):
a notebook shows it, ``fig.savefig(path)`` writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.errors import InputError
from xla_cost.present.figures import LINE_COLORS, PASS_COLORS, figure, style
from xla_cost.present.units import flop_unit

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["MAX_LAYERS", "layer_bars", "sweep_lines"]

MAX_LAYERS = 40
"""Rows a per-layer figure shows; the rest are summed into one bar."""


def layer_bars(rows: Sequence[tuple[str, float, float, float]], title: str) -> Figure:
    """Horizontal bars, one per layer, of its forward, backward and update FLOP stacked.

    Args:
      rows: ``(path, forward, backward, update)`` per layer, in model order.
      title: the figure's title.
    """
    rows = list(rows)
    if len(rows) > MAX_LAYERS:
        keep = set(sorted(range(len(rows)), key=lambda i: -sum(rows[i][1:]))[: MAX_LAYERS - 1])
        rest = [rows[i] for i in range(len(rows)) if i not in keep]
        rows = [rows[i] for i in sorted(keep)] + [
            (f"({len(rest)} smaller rows)", *(sum(r[k] for r in rest) for k in (1, 2, 3)))]
    scale, unit = flop_unit([f + b + u for _, f, b, u in rows])
    with style():
        fig, axes = figure(9.0, 0.3 * len(rows) + 1.8)
        ax = axes[0][0]
        ys = list(range(len(rows)))[::-1]
        for y, (_, f, b, u) in zip(ys, rows):
            left = 0.0
            for phase, value in (("forward", f), ("backward", b), ("update", u)):
                ax.barh(y, value / scale, left=left, color=PASS_COLORS[phase], height=0.7,
                        label=phase if y == ys[0] else None)
                left += value / scale
        ax.set_yticks(ys, [path for path, *_ in rows])
        ax.set_xlabel(f"{unit} per training step")
        ax.grid(axis="y", visible=False)
        ax.legend(loc="lower right", frameon=False)
        fig.suptitle(title)
    return fig


def sweep_lines(frame: pd.DataFrame, x: str, y: str, hue: str | None = None, title: str = "") -> Figure:
    """``y`` against ``x``, one line per value of ``hue`` (or one line), from a sweep's runs.

    Raises:
      InputError: a column that the frame does not have, or a ``y`` that is not numeric.
    """
    import pandas as pd

    for name in (x, y, *([hue] if hue else [])):
        if name not in frame.columns:
            raise InputError("x, y and hue among the sweep's columns", repr(name),
                             f"Use one of {', '.join(map(str, frame.columns[:12]))}, ...")
    values = pd.to_numeric(frame[y], errors="coerce")
    if values.isna().all():
        raise InputError("a numeric column for y", f"{y!r} ({frame[y].dtype})",
                         "Plot a figure column, e.g. y='forward_flops'.")
    data = frame.assign(**{y: values}).dropna(subset=[y])
    groups: list[tuple[Any, Any]] = list(data.groupby(hue, sort=False)) if hue else [(None, data)]
    with style():
        fig, axes = figure(7.0, 4.5)
        ax = axes[0][0]
        numeric_x = pd.api.types.is_numeric_dtype(data[x])
        for i, (key, group) in enumerate(groups):
            group = group.sort_values(x) if numeric_x else group
            ax.plot(group[x].astype(float) if numeric_x else group[x].astype(str), group[y], marker="o",
                    color=LINE_COLORS[i % len(LINE_COLORS)], label=None if hue is None else f"{hue}={key}")
        if numeric_x and len(data[x].unique()) > 2 and (data[x] > 0).all():
            ax.set_xscale("log", base=2)
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        if hue is not None:
            ax.legend(frameon=False)
        fig.suptitle(title or f"{y} against {x}" + (f" by {hue}" if hue else ""))
    return fig
