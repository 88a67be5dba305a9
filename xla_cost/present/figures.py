"""The one figure style: every PNG xla_cost draws (report pages, a result's ``plot``).

Figures are drawn on matplotlib's Agg canvas (no pyplot, no global figure
registry) under a fixed style whatever the user's matplotlibrc, and saved
without the ``Software`` stamp, so the same data gives the same bytes.
matplotlib is imported inside the functions: it loads only when a figure is drawn.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["DPI", "STYLE", "PASS_COLORS", "LINE_COLORS", "LINE_STYLES", "line_style", "style", "figure", "png", "log2_batch_axis", "reference"]

DPI = 120
"""Figure resolution: a 9-inch-wide figure is 1080 pixels, legible at 100% zoom."""

STYLE: Mapping[str, Any] = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.titlesize": 12,
    "figure.titleweight": "bold",
}
"""matplotlib settings on top of its defaults."""

PASS_COLORS: Mapping[str, str] = {"forward": "#4C72B0", "backward": "#DD8452", "update": "#55A868"}
"""One colour per pass, the same in every figure."""

LINE_COLORS: tuple[str, ...] = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3",
                                "#8C8C8C", "#CCB974", "#64B5CD")
"""Colours of successive lines or bars."""

LINE_STYLES: tuple[str, ...] = ("-", "--", ":", "-.")
"""Dashes of successive rounds of `LINE_COLORS`: the eleventh line is the first colour, dashed."""


def line_style(index: int) -> dict[str, str]:
    """``color`` and ``linestyle`` of the ``index``-th line of a figure: every line its own pair,
    however many there are (a colour comes back with other dashes), so none is left out."""
    colors = len(LINE_COLORS)
    return {"color": LINE_COLORS[index % colors], "linestyle": LINE_STYLES[index // colors % len(LINE_STYLES)]}


@contextlib.contextmanager
def style() -> Iterator[None]:
    """Matplotlib's default style plus `STYLE`, whatever the user's matplotlibrc;
    restored on exit (nothing global changes)."""
    import matplotlib

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(STYLE)
        yield


def figure(width: float, height: float, rows: int = 1, cols: int = 1, **kwargs: Any) -> tuple[Figure, Any]:
    """A figure on the Agg canvas and its grid of axes (``squeeze=False``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, **kwargs)
    return fig, axes


def png(draw: Callable[[], Figure]) -> bytes:
    """The PNG of the figure ``draw`` makes, under `style`, without metadata stamps."""
    with style():
        fig = draw()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def log2_batch_axis(ax: Axes, batches: Sequence[int]) -> None:
    """A batch-size x axis on a log-2 scale, a tick at each batch."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(batches))
    ax.set_xticklabels([str(b) for b in batches], rotation=0)
    ax.set_xlabel("batch size (log scale)")
    ax.minorticks_off()


def reference(ax: Axes, y: float, label: str, *, horizontal: bool = True, color: str = "0.35") -> None:
    """A dotted reference line with its label at the line's right (or top) end."""
    if horizontal:
        ax.axhline(y, color=color, linestyle=":", linewidth=1.2, zorder=1)
        ax.annotate(label, (1.0, y), xycoords=("axes fraction", "data"), xytext=(-3, 3),
                    textcoords="offset points", ha="right", va="bottom", fontsize=8, color=color)
    else:
        ax.axvline(y, color=color, linestyle=":", linewidth=1.2, zorder=1)
        ax.annotate(label, (y, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -3),
                    textcoords="offset points", ha="left", va="top", fontsize=8, color=color)
