"""What the results store holds, and cleaning it: `store_contents`, `store_delete`, `store_vacuum`
(``xla-cost store list|show|delete|vacuum``).

The store is the SQLite file `xla_cost.sweep`, ``analyze(cache=True)`` and the
report pages write (`xla_cost.compiled.store.Store`); its rows are keyed by a
hash of everything an analysis depended on, so a user needs these to see what
is there, drop failures to retry them, or drop one model's rows.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any

import pandas as pd

from xla_cost.compiled.store import Store, StoredResult, default_store_path
from xla_cost.errors import InputError
from xla_cost.present.document import Rendered, Section
from xla_cost.present.units import bytes_unit, scaled

__all__ = ["StoreContents", "store_contents", "store_delete", "store_vacuum", "KEY_SHOWN"]

KEY_SHOWN = 12
"""Characters of a row's key shown in listings (enough to name it in ``store show``)."""


@dataclasses.dataclass(frozen=True)
class StoreContents(Rendered):
    """Rows of the results store, as `store_contents` selected them.

    Attributes:
      path: the store's file.
      rows: the rows, oldest first.
      created: when each row was stored, by key.
      size: the store's size on disk in bytes: the database file and its write-ahead log
        (None in memory).
      selection: what was asked for (``failed``, ``model NAME``), for the title.
    """

    path: str
    rows: tuple[StoredResult, ...]
    created: dict[str, str]
    size: int | None
    selection: str = ""

    def describe(self) -> str:
        failed = sum(r.status != "ok" for r in self.rows)
        where = f"{self.path}" + ("" if self.size is None else f", {_bytes(self.size)}")
        chosen = f" ({self.selection})" if self.selection else ""
        return f"{len(self.rows)} stored results{chosen}, {failed} failed; {where}"

    def to_frame(self) -> pd.DataFrame:
        """One row per stored result: its key (the first `KEY_SHOWN` characters), model,
        its ``settings`` (the model's arguments, ``--set``: ``image_size=32``), status,
        when it was stored, seconds, batch size, optimizer, dtype, ``target``
        and error. The configuration's figures are the sweep's; an ``analyze --cache``
        row (whose configuration holds the model alone) takes them from its report.
        ``target`` is the compile target (``h100``, ``tpu-v5e:2x2``) or, without
        one, the backend it was compiled for (``cpu``)."""
        frame = pd.DataFrame([
            {"key": r.key[:KEY_SHOWN], "model": r.model, "settings": _settings(r), "status": r.status,
             "created": self.created.get(r.key, ""),
             "seconds": r.seconds, **{name: _setting(r, name) for name in ("batch_size", "optimizer", "dtype")},
             "target": _target(r), "error": r.error or ""}
            for r in self.rows
        ], columns=["key", "model", "settings", "status", "created", "seconds", "batch_size", "optimizer", "dtype",
                    "target", "error"])
        # a count stays a whole number (8, not 8.000) where some rows have none
        return frame.astype({"batch_size": "Int64"})

    def sections(self) -> list[Section]:
        frame = self.to_frame().astype(object).where(lambda f: f.notna(), "")
        frame["seconds"] = [f"{v:.2f}" if v != "" else "" for v in frame["seconds"]]
        return [Section("", frame, left=("model", "settings", "status", "created", "optimizer", "dtype", "target",
                                          "error"))]

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size_bytes": self.size, "selection": self.selection,
                "rows": [{**dataclasses.asdict(r), "created": self.created.get(r.key), "target": _target(r)}
                         for r in self.rows]}


def _setting(row: StoredResult, name: str) -> Any:
    """``name`` (``batch_size``, ``optimizer``, ``dtype``) of a stored row: its configuration's
    (a sweep's), else its report's (``analyze --cache`` stores the model's name alone); None
    for a failed row without it."""
    if name in row.config:
        return row.config[name]
    return (row.report or {}).get(name)


def _settings(row: StoredResult) -> str:
    """The model's arguments of a stored row as ``--set`` writes them (``image_size=32, n_layer=2``):
    its configuration's (a sweep's), else its report's; empty for none."""
    config = row.config.get("config")
    if config is None:
        config = (row.report or {}).get("config") or {}
    return ", ".join(f"{key}={value}" for key, value in sorted(config.items()))


def _target(row: StoredResult) -> str | None:
    """The compile target of a stored row (``h100``), else the backend it was compiled for
    (``cpu``: from its report, or the environment it ran in); None where neither is stored."""
    target = row.config.get("target") or (row.report or {}).get("target")
    if target:
        return str(target)
    backend = (row.report or {}).get("backend") or row.environment.get("backend")
    return None if backend is None else str(backend)


def _bytes(size: int) -> str:
    scale, unit = bytes_unit([size])
    return f"{scaled(size, scale, 1)} {unit}"


def _size(path: str | os.PathLike[str]) -> int | None:
    """The bytes the store takes on disk: its file and its write-ahead log (``-wal``), if any."""
    if str(path) == ":memory:":
        return None
    return sum(os.path.getsize(f) for f in (str(path), f"{path}-wal") if os.path.isfile(f))


def _open(path: str | os.PathLike[str] | None) -> Store:
    where = default_store_path() if path is None else pathlib.Path(path).expanduser()
    if str(where) != ":memory:" and not pathlib.Path(where).is_file():
        raise InputError("an existing results store", repr(str(where)),
                         "Run a sweep first, or pass --store PATH to the file a sweep wrote.")
    return Store(where)


def stored_model_name(model: str | None) -> str | None:
    """The name the store keeps ``model``'s rows under: a zoo model's canonical name for any of its
    names (``gpt2``, ``GPT2-small``: ``gpt2-small``), any other name as given."""
    if not model:
        return model
    from xla_cost import zoo

    try:
        return zoo.get_spec(model).name
    except InputError:
        return model


def _selection(failed: bool, model: str | None, key: str | None) -> str:
    return ", ".join(part for part in (
        "failed" if failed else "", f"model {model}" if model else "", f"key {key}..." if key else "") if part)


def store_contents(path: str | os.PathLike[str] | None = None, *, failed: bool = False, model: str | None = None,
                   key: str | None = None) -> StoreContents:
    """The rows of the results store at ``path`` (default: the user's), all of them or those that
    failed, of one model, or whose key starts with ``key``.

    Args:
      path: the store's file (None: `xla_cost.default_store_path`, or ``XLA_COST_STORE``).
      failed: only the rows that failed.
      model: only this model's rows (a zoo model by any of its names: `stored_model_name`).
      key: only the rows whose key starts with this.

    Raises:
      InputError: no store at ``path``.
    """
    model = stored_model_name(model)
    with _open(path) as store:
        rows = tuple(store.select(failed=failed, model=model, key=key))
        created = {r.key: store.created(r.key) or "" for r in rows}
        size = _size(store.path)
        return StoreContents(str(store.path), rows, created, size, _selection(failed, model, key))


def store_delete(path: str | os.PathLike[str] | None = None, *, failed: bool = False, model: str | None = None,
                 key: str | None = None, everything: bool = False) -> int:
    """Deletes the rows that failed, of ``model``, and whose key starts with ``key`` (every
    condition given); with ``everything`` and no condition, every row. ``everything`` with a
    condition deletes all the rows it selects (``--all --model one_net``: one_net's rows, no
    other model's). Returns how many went. A later sweep analyses them again.

    Args:
      path: the store's file (None: `xla_cost.default_store_path`, or ``XLA_COST_STORE``).
      failed: the rows that failed.
      model: this model's rows.
      key: the rows whose key starts with this.
      everything: every row (with a condition: every row it selects).

    Raises:
      InputError: no selection given (nothing is deleted by accident), an empty ``model`` or
        ``key`` beside ``everything``, or no store at ``path``.
    """
    if not (failed or model or key or everything):
        raise InputError("what to delete: failed=True, model=NAME, key=PREFIX or everything=True",
                         "no selection", "Pass --failed, --model NAME, --key PREFIX or --all.")
    for flag, value in (("--model", model), ("--key", key)):
        if value is not None and not value:
            raise InputError(f"{flag} naming the rows to delete", f"{flag} ''", f"Give {flag} a value, or drop it.")
    model = stored_model_name(model)
    with _open(path) as store:
        rows = store.select(failed=failed, model=model, key=key)  # no condition: every row
        return store.delete(r.key for r in rows)


def store_vacuum(path: str | os.PathLike[str] | None = None) -> tuple[int, int]:
    """Gives deleted rows' space back; returns the store's size on disk in bytes (its file and
    its write-ahead log) before and after, the log written into the file first
    (`Store.vacuum`): what ``ls -l`` shows once the command is done.

    Args:
      path: the store's file (None: `xla_cost.default_store_path`, or ``XLA_COST_STORE``).
    """
    with _open(path) as store:
        before = _size(store.path)
        store.vacuum()
        after = _size(store.path)
    return before or 0, after or 0
