"""The results store: finished analyses in one embedded SQLite file.

Every row is one configuration's result (a `xla_cost.Report` as JSON, or the
one-line reason it failed), keyed by a hash of everything that determines it:
the configuration (`xla_cost.runs.configs.RunConfig`, or for `analyze(cache=True)`
a description of the model object and inputs), and the environment (jax,
jaxlib, flax, optax and xla_cost versions, a digest of xla_cost's own source,
the backend, the device and ``XLA_FLAGS``). A row is written in a
transaction of its own, so a process killed mid-sweep leaves every finished
row and no partial one, and a primary key keeps a result from being stored
twice.

The default file is ``$XLA_COST_STORE``, else
``$XDG_CACHE_HOME/xla_cost/results.sqlite`` (``~/.cache/...``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from xla_cost.errors import InputError
from xla_cost.version import __version__

__all__ = [
    "STORE_ENV", "Store", "StoredResult", "default_store_path", "environment", "result_key",
    "PRESENTATION", "source_files", "source_digest", "analysis_key",
]

STORE_ENV = "XLA_COST_STORE"
"""Environment variable naming the default store file."""

FORMAT = 1
"""Version of the row layout; part of every key, so a change leaves old rows unused."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key         TEXT PRIMARY KEY,
    model       TEXT NOT NULL,
    config      TEXT NOT NULL,
    environment TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
    error       TEXT,
    report      TEXT,
    seconds     REAL,
    created     TEXT NOT NULL
)
"""


def default_store_path() -> pathlib.Path:
    """``$XLA_COST_STORE``, else ``$XDG_CACHE_HOME/xla_cost/results.sqlite``
    (``~/.cache/xla_cost/results.sqlite``)."""
    explicit = os.environ.get(STORE_ENV)
    if explicit:
        return pathlib.Path(explicit).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "xla_cost" / "results.sqlite"


PRESENTATION: frozenset[str] = frozenset({"present", "study", "cli", "__init__.py", "__main__.py"})
"""Parts of xla_cost that only present results (subpackages and top-level
modules, by name): left out of the source digest, so that editing a renderer,
a report page or the command line keeps the stored results."""


def source_files(roots: Mapping[str, pathlib.Path] | None = None) -> list[tuple[str, pathlib.Path]]:
    """``(name, path)`` of every source file that computes results: each module
    of xla_cost at any depth (named by its path inside the package), less
    `PRESENTATION`, and each module of the zoo.

    Args:
      roots: the directory of ``xla_cost`` and of ``xla_cost.zoo``; default:
        where Python finds them (found, not imported).
    """
    if roots is None:
        import importlib.util  # only to find the packages, not to import them

        roots = {}
        for package in ("xla_cost", "xla_cost.zoo"):
            spec = importlib.util.find_spec(package)
            assert spec is not None and spec.origin is not None, package
            roots[package] = pathlib.Path(spec.origin).parent
    files = []
    for package, root in roots.items():
        for path in sorted(root.rglob("*.py")):
            relative = path.relative_to(root)
            if package == "xla_cost" and (relative.parts[0] in PRESENTATION or relative.parts[0] == "zoo"):
                continue
            files.append((f"{package}/{relative.as_posix()}", path))
    return files


def source_digest(files: Iterable[tuple[str, pathlib.Path]]) -> str:
    """A digest of the files' names and contents (`source_files`)."""
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    """The digest of this installation's sources: a changed analyzer or model is a new key."""
    return source_digest(source_files())


@functools.lru_cache(maxsize=1)
def _installation() -> dict[str, str]:
    """The versions and the sources: the same for the whole process."""
    from importlib import metadata

    # Versions from the installed distributions: reading them imports nothing.
    return {
        **{name: metadata.version(name) for name in ("jax", "jaxlib", "flax", "optax")},
        "xla_cost": __version__,
        "source": _source_digest(),
    }


def environment() -> dict[str, str]:
    """What besides the configuration determines a result: versions, backend, device.

    The backend and device are the active compile target's where one is active
    (`xla_cost.compiled.xla.device_kind`), so they are read at every call, with
    ``XLA_FLAGS``; the versions and the sources' digest once per process (a key
    made under an H100 target first gave every later CPU analysis of the process
    the H100's environment: keys no other process makes)."""
    from xla_cost.compiled import xla  # jax loads only when a key needs the environment

    return {
        **_installation(),
        "backend": xla.backend_name(),
        "device": xla.device_kind(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def result_key(config: Mapping[str, Any], env: Mapping[str, str] | None = None) -> str:
    """The store key of a configuration (plain JSON values) in an environment."""
    text = json.dumps(
        {"format": FORMAT, "config": config, "environment": dict(env or environment())},
        sort_keys=True, default=str,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True)
class StoredResult:
    """One row of the store.

    Attributes:
      key: the row's key (`result_key`).
      model: the model's name.
      config: the configuration as stored (JSON values).
      environment: versions, backend and device it ran with.
      status: ``ok`` or ``failed``.
      error: the one-line reason of a failure, else None.
      report: the `xla_cost.Report` as `Report.to_dict` gives it, else None.
      seconds: how long the analysis took.
    """

    key: str
    model: str
    config: Mapping[str, Any]
    environment: Mapping[str, str]
    status: str
    error: str | None
    report: Mapping[str, Any] | None
    seconds: float | None


class Store:
    """An SQLite file of finished analyses (use as a context manager, or `close`).

    Args:
      path: the database file (created with its directory); None:
        `default_store_path`. ``":memory:"`` keeps it in memory.

    Raises:
      InputError: the path is a directory or cannot be opened as a database.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = default_store_path() if path is None else (
            path if str(path) == ":memory:" else pathlib.Path(path).expanduser().absolute()
        )
        try:
            if self.path != ":memory:":
                if pathlib.Path(self.path).is_dir():
                    raise sqlite3.OperationalError(f"{self.path} is a directory")
                pathlib.Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are opened explicitly, one per row.
            self._db = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL" if self.path != ":memory:" else "PRAGMA journal_mode=MEMORY")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise InputError(
                "--store naming an SQLite file (created if missing)", f"{str(self.path)!r} ({exc})",
                "Pass --store PATH to a file in a writable directory, e.g. --store sweep.sqlite.",
            ) from exc

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the database."""
        self._db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def put(
        self, key: str, *, model: str, config: Mapping[str, Any], environment: Mapping[str, str],
        report: Mapping[str, Any] | None = None, error: str | None = None,
        seconds: float | None = None,
    ) -> bool:
        """Stores one result in its own transaction (exactly one of ``report``
        and ``error``). Returns False when ``key`` was already stored (kept as it was)."""
        if (report is None) == (error is None):
            raise ValueError("Store.put takes a report or an error, not both or neither")
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key, model, json.dumps(config, sort_keys=True, default=str),
                    json.dumps(dict(environment), sort_keys=True), "ok" if error is None else "failed",
                    error, None if report is None else json.dumps(report, sort_keys=True),
                    seconds, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                ),
            )
        return cursor.rowcount == 1

    def get(self, key: str) -> StoredResult | None:
        """The row stored under ``key``, or None."""
        row = self._db.execute("SELECT * FROM results WHERE key = ?", (key,)).fetchone()
        return None if row is None else _result(row)

    def get_many(self, keys: Iterable[str]) -> dict[str, StoredResult]:
        """The rows stored under any of ``keys``, by key."""
        keys = list(dict.fromkeys(keys))
        out: dict[str, StoredResult] = {}
        for start in range(0, len(keys), 500):  # SQLite's limit on bound parameters
            chunk = keys[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for row in self._db.execute(f"SELECT * FROM results WHERE key IN ({marks})", chunk):
                out[row[0]] = _result(row)
        return out

    def delete(self, keys: Iterable[str]) -> int:
        """Removes the rows of ``keys`` (to rerun them); returns how many went."""
        keys = list(keys)
        with self._transaction() as db:
            removed = sum(db.execute("DELETE FROM results WHERE key = ?", (k,)).rowcount for k in keys)
        return removed

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def results(self) -> list[StoredResult]:
        """Every row, oldest first."""
        return [_result(r) for r in self._db.execute("SELECT * FROM results ORDER BY created, key")]

    def select(self, *, failed: bool = False, model: str | None = None, key: str | None = None) -> list[StoredResult]:
        """The rows, oldest first, that are failures (``failed``), of ``model``, or whose key starts
        with ``key`` (all of the given conditions)."""
        where, values = [], []
        if failed:
            where.append("status = 'failed'")
        if model is not None:
            where.append("model = ?")
            values.append(model)
        if key is not None:
            where.append("substr(key, 1, ?) = ?")
            values += [len(key), key]
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._db.execute(f"SELECT * FROM results{clause} ORDER BY created, key", values)
        return [_result(r) for r in rows]

    def created(self, key: str) -> str | None:
        """When the row of ``key`` was stored (UTC, ISO 8601), or None."""
        row = self._db.execute("SELECT created FROM results WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def vacuum(self) -> None:
        """Gives the space of deleted rows back to the file system (SQLite's VACUUM), the
        write-ahead log written into the file and emptied before and after: the file's size
        is then the store's."""
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._db.execute("VACUUM")
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # VACUUM's pages are in the log until then


def _result(row: tuple[Any, ...]) -> StoredResult:
    key, model, config, env, status, error, report, seconds, _created = row
    return StoredResult(
        key=key, model=model, config=json.loads(config), environment=json.loads(env),
        status=status, error=error, report=None if report is None else json.loads(report),
        seconds=seconds,
    )


class _Undescribable(Exception):
    """An argument with no stable description across processes (no cache key)."""


def _file_digest(obj: Any) -> str:
    import inspect

    try:
        path = inspect.getsourcefile(obj if inspect.isclass(obj) or inspect.isfunction(obj) else type(obj))
        return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()[:16] if path else ""
    except (TypeError, OSError):
        return ""


def _describe(value: Any) -> Any:
    """A JSON description of an argument of `xla_cost.analyze` that is the same
    in every process for the same thing, or `_Undescribable`."""
    import functools as _functools
    import inspect

    import flax.linen as nn
    import jax

    from xla_cost.step.trees import loaded_nnx

    nnx = loaded_nnx()  # no NNX module exists before flax.nnx is imported (0.45 s with IPython): not imported here

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (jax.ShapeDtypeStruct, jax.Array)) or hasattr(value, "shape") and hasattr(value, "dtype"):
        return {"shape": list(value.shape), "dtype": str(value.dtype)}
    if isinstance(value, nn.Module):
        text = repr(value)
        if " at 0x" in text:
            raise _Undescribable(f"{type(value).__name__} has a field without a stable repr")
        return {"linen": text, "class": type(value).__qualname__, "source": _file_digest(value)}
    if nnx is not None and isinstance(value, nnx.Module):
        graphdef, state = nnx.split(value)
        text = repr(graphdef)
        if " at 0x" in text:
            raise _Undescribable(f"{type(value).__name__} has an attribute without a stable repr")
        return {"nnx": text, "state": _describe(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)),
                "source": _file_digest(value)}
    if isinstance(value, _functools.partial):
        return {"partial": _describe(value.func), "args": _describe(list(value.args)),
                "keywords": _describe(dict(value.keywords))}
    if inspect.isfunction(value) or inspect.ismethod(value):
        code = value.__code__
        closure = [c.cell_contents for c in (value.__closure__ or ())]
        return {"function": f"{value.__module__}.{value.__qualname__}",
                "code": hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()[:16],
                "closure": _describe(closure), "source": _file_digest(value)}
    if isinstance(value, Mapping):
        return {str(k): _describe(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if callable(value) and " at 0x" not in repr(value):
        return {"callable": repr(value)}
    raise _Undescribable(f"{type(value).__name__} has no stable description")


def analysis_key(arguments: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The store key of an `xla_cost.analyze` call, from its arguments.

    Returns:
      (key, None), or (None, why) where an argument has no description that is
      the same in every process (a custom optax transformation, a module with a
      function-valued field): such a call is not cached.
    """
    try:
        described = {name: _describe(value) for name, value in sorted(arguments.items())}
    except _Undescribable as exc:
        return None, str(exc)
    except RecursionError:
        return None, "an argument refers to itself (a recursive closure)"
    return result_key({"analyze": described}), None
