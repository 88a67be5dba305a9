"""Where a sweep's configurations run besides this process's worker processes, and its progress bar.

`connect` reaches a Dask distributed scheduler (refused in one line where none
answers) and `run_on_dask` runs configurations there; `Progress` is the rich
progress bar on the standard error that `xla_cost.runs.sweeps.sweep` shows.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from xla_cost.errors import InputError
from xla_cost.runs.configs import RunConfig

__all__ = ["SCHEDULER_TIMEOUT", "Progress", "connect", "run_on_dask"]


class Progress:
    """A rich progress bar (configuration, done/total, elapsed, ETA), or nothing."""

    def __init__(self, total: int, enabled: bool | None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar: Any = None
        if self.enabled and total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, \
                TimeRemainingColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                console=Console(stderr=True), transient=False,
            )
            self._task = self._bar.add_task("sweep", total=total)
            self._bar.start()

    def show(self, running: Iterable[str]) -> None:
        """Names the configurations running now (the first two, and how many more)."""
        if self._bar is not None:
            labels = list(running)
            text = ", ".join(labels[:2]) + (f" +{len(labels) - 2}" if len(labels) > 2 else "")
            self._bar.update(self._task, description=text or "sweep")

    def advance(self) -> None:
        """One more configuration done."""
        if self._bar is not None:
            self._bar.advance(self._task)

    def close(self) -> None:
        """Stops the bar (it stays on the terminal)."""
        if self._bar is not None:
            self._bar.update(self._task, description="sweep")
            self._bar.stop()


SCHEDULER_TIMEOUT = 5.0
"""Seconds a sweep waits for a Dask scheduler to answer at its ``scheduler`` address."""


def connect(scheduler: Any) -> tuple[Any, Callable[[], None]]:
    """A ``distributed.Client`` of ``scheduler`` (a client is used as it is) and how to let it go.
    An address where nothing listens is refused at once; where something other than a Dask
    scheduler answers (an HTTP server), or nothing within `SCHEDULER_TIMEOUT` seconds, too."""
    if scheduler is None:
        return None, lambda: None
    try:
        from distributed import Client
        from distributed.comm import parse_address, parse_host_port
    except ImportError as exc:
        raise InputError("Dask distributed installed for --scheduler", "no module 'distributed'",
                         "pip install 'xla-cost[dask]' (or pip install -e '.[dask]').") from exc
    if isinstance(scheduler, Client):
        return scheduler, lambda: None
    expected, fix = ("--scheduler the address of a running Dask scheduler (tcp://HOST:8786)",
                     "Start one with `dask scheduler` and `dask worker tcp://HOST:8786`, or drop --scheduler.")
    try:
        protocol, location = parse_address(scheduler) if isinstance(scheduler, str) else ("", "")  # or a cluster
        if protocol in ("tcp", "tls"):  # nothing listening: refused now, not after Dask's retries
            socket.create_connection(parse_host_port(location, 8786), timeout=SCHEDULER_TIMEOUT).close()
    except (OSError, ValueError, TypeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise InputError(expected, f"{scheduler!r}, where nothing answered ({why})", fix) from exc
    try:
        client = Client(scheduler, timeout=SCHEDULER_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - whatever answered (a MemoryError from an HTTP reply) is no scheduler
        timed_out = isinstance(exc, TimeoutError) or "Timed out" in str(exc)
        why = f"nothing within {SCHEDULER_TIMEOUT:g} s" if timed_out else "what answered speaks something else"
        raise InputError(expected, f"{scheduler!r}, where no Dask scheduler answered ({why})", fix) from exc
    return client, client.close


def run_on_dask(
    todo: list[RunConfig], client: Any, record: Callable[[RunConfig, Mapping[str, Any]], None],
    progress: Progress, run: Callable[[Mapping[str, Any]], dict[str, Any]],
) -> None:
    """Runs ``todo`` on a Dask distributed cluster, each configuration (its `RunConfig.to_dict`) by
    ``run`` (`xla_cost.runs.sweeps.run_config`); results come back here to be stored by ``record``."""
    from distributed import as_completed

    futures = {
        client.submit(run, config.to_dict(), pure=False, key=f"xla-cost-{i}-{time.time_ns()}"): config
        for i, config in enumerate(todo)
    }
    progress.show([f"{len(todo)} configurations on {client.scheduler.address}"])
    for future in as_completed(futures):
        record(futures[future], future.result())
