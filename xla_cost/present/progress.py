"""A progress line for long work (an analysis's stages, fit's search, scaling's points).

The library marks where it is with `stage` (a no-op unless a progress line is
shown); the CLI shows one with `shown` on a terminal (rich: the stage, steps
done of the total, elapsed time and, with a total, the time left), and nothing
when its output is piped or ``--quiet`` is given. Nothing is printed to stdout.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["stage", "shown", "active"]

_CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar("xla_cost_progress", default=None)


class _Line:
    """One rich progress line on stderr."""

    def __init__(self, what: str) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn,
        )

        self.what = what
        self.bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(), console=Console(stderr=True), transient=True,
        )
        self.task = self.bar.add_task(what, total=None)
        self.bar.start()

    def update(self, text: str, done: int | None, total: int | None) -> None:
        self.bar.update(self.task, description=f"{self.what}: {text}",
                        **({"completed": done} if done is not None else {}),
                        **({"total": total} if total is not None else {}))

    def close(self) -> None:
        self.bar.stop()


def active() -> bool:
    """Whether a progress line is shown (the work may then say more often where it is)."""
    return _CURRENT.get() is not None


def stage(text: str, done: int | None = None, total: int | None = None) -> None:
    """Says where the work is (``"compiling grad"``, step ``done`` of ``total``); no-op without a line."""
    line = _CURRENT.get()
    if line is not None:
        line.update(text, done, total)


@contextlib.contextmanager
def shown(what: str, enabled: bool | None = None) -> Iterator[None]:
    """Shows a progress line for the work inside the block: ``enabled`` True or False, or None for
    "when stderr is a terminal". An inner `shown` inside an active line adds nothing."""
    enabled = sys.stderr.isatty() if enabled is None else enabled
    if not enabled or _CURRENT.get() is not None:
        yield
        return
    line = _Line(what)
    token = _CURRENT.set(line)
    try:
        yield
    finally:
        _CURRENT.reset(token)
        line.close()
