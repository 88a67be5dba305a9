"""The analyses cache: `xla_cost.analyze` answered from the results store.

`cached` wraps one run of the pipeline: it describes the arguments as a key
(`xla_cost.compiled.store.analysis_key`), returns the stored report when the
store has it, and stores what the run returns when it has not. An argument
without a stable description (an object whose repr holds its memory address)
runs uncached, with a note saying why. A store file that does not exist yet is
made only once there is a report to put in it.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

from xla_cost.analysis.report import Report
from xla_cost.compiled.store import Store, analysis_key, default_store_path, environment

__all__ = ["cached"]


def cached(
    arguments: Mapping[str, Any], cache: bool | str | os.PathLike[str] | Store, compute: Callable[[], Report]
) -> Report:
    """The report of ``compute()``, from the store when it holds one for ``arguments``.

    Args:
      arguments: every argument that determines the report (`xla_cost.analysis.pipeline.Request.arguments`).
      cache: True for the default store, a path, or an open `Store` (left open).
      compute: runs the analysis.
    """
    key, why = analysis_key(arguments)
    if not isinstance(cache, Store):
        path = default_store_path() if cache is True else pathlib.Path(cache).expanduser()
        if str(cache) != ":memory:" and not path.exists():
            # Nothing to look up: analyse first, so that an analysis that is refused
            # (bad input) leaves no store file behind.
            report = compute()
            if key is None:
                return dataclasses.replace(report, notes=(*report.notes, f"not cached: {why}"))
            with Store(path) as db:
                _put(db, key, report)
            return report
    db = cache if isinstance(cache, Store) else Store(None if cache is True else cache)
    try:
        if key is not None:
            row = db.get(key)
            if row is not None and row.status == "ok":
                return Report.from_dict(row.report)
        report = compute()
        if key is None:
            return dataclasses.replace(report, notes=(*report.notes, f"not cached: {why}"))
        _put(db, key, report)
        return report
    finally:
        if db is not cache:
            db.close()


def _put(db: Store, key: str, report: Report) -> None:
    db.put(key, model=report.model, config={"analyze": report.model}, environment=environment(),
           report=report.to_dict(), seconds=None)
