"""`sweep`: many configurations analysed in parallel, every result kept in the store.

A sweep is the product of models, batch sizes, model settings, optimizers and
dtypes. What the results store (`xla_cost.compiled.store`) already holds is read back;
the rest runs in worker processes on this machine (``jobs``) or on a Dask
distributed cluster (``scheduler``), and each finished configuration is
committed to the store by this process as it arrives. A configuration that
raises is stored as a failure with its one-line reason; the sweep goes on.
"""

from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import itertools
import json
import multiprocessing
import os
import pathlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import pandas as pd

from xla_cost.analysis.report import PHASES
from xla_cost.choices import DEFAULT_OPTIMIZER, DTYPES
from xla_cost.present.markdown import markdown_table
from xla_cost.present.units import flop_unit, scaled
from xla_cost.compiled.store import Store, StoredResult, default_store_path, environment, result_key
from xla_cost.count.layers import LAYER_FIELDS
from xla_cost.errors import InputError, XlaCostError
from xla_cost.options import changed_fields, split_fields
from xla_cost.runs.configs import RunConfig
from xla_cost.runs.sweep_runners import SCHEDULER_TIMEOUT, Progress, connect, run_on_dask

__all__ = ["Grid", "SCHEDULER_TIMEOUT", "WORKER_MEMORY", "SweepResult", "configurations", "default_jobs",
           "run_config", "sweep", "sweep_frames"]

WORKER_MEMORY = 2 << 30
"""Memory set aside per worker process when choosing the default ``jobs``
(ResNet-152's analysis peaks at 1.5 GB)."""

DEATHS_BEFORE_FAILURE = 2
"""A configuration in flight when a worker process died this often is stored
as failed (killed, most likely out of memory) instead of being tried again."""


class SweepResult(NamedTuple):
    """What `sweep` returns.

    Attributes:
      runs: one row per configuration, in the order they were asked for: the
        configuration (``model``, ``batch_size``, the ``--set`` keys,
        ``optimizer``, ``dtype``, ``counter``), ``status`` (``ok``/``failed``),
        ``error``, ``parameters``, ``active_parameters`` (a mixture of
        experts' declared routing: `xla_cost.step.routing`; empty for the
        others), per phase ``<phase>_flops``,
        ``_xla_flops``, ``_jaxpr_flops``, ``_transcendentals``,
        ``_bytes_accessed``, ``_jaxpr_bytes_accessed``, ``_temp_bytes``,
        ``_argument_bytes``, ``_output_bytes``, ``_source``; the ratios
        ``backward_to_forward`` and ``backward_with_update_to_forward``;
        ``seconds`` (the analysis's own time), ``notes``, ``unsupported`` and
        the store ``key``.
      layers: with ``per_layer``, one row per layer per configuration (the
        configuration's columns, then the JSON layer fields); else empty.
    """

    runs: pd.DataFrame
    layers: pd.DataFrame

    def to_frame(self) -> pd.DataFrame:
        """The runs, one row per configuration, every figure raw (what `to_csv`
        writes; the per-layer rows are `layers`)."""
        return self.runs

    def raise_if_all_failed(self) -> None:
        """Raises `XlaCostError` when no configuration was analysed (every row
        failed), with the failures in one line; a sweep of rows none of which
        is ok gives no table, no ``--output`` and no ``--layers`` file on the
        command line (which calls this first), and exits 2. Its failures are
        stored rows all the same: ``retry_failed=True`` (``--retry-failed``)
        analyses them again."""
        runs, most = self.runs, 3
        if not len(runs) or (runs["status"] == "ok").any():
            return
        errors = list(dict.fromkeys(str(e).rstrip(".") for e in runs["error"]))
        listed = "; ".join(f"[{i}] {e}" for i, e in enumerate(errors[:most], 1))
        more = f"; and {len(errors) - most} other errors" if len(errors) > most else ""
        raise XlaCostError("at least one configuration analysed",
                           f"{len(runs)} of {len(runs)} failed ({listed}{more})",
                           "Fix what the errors say and rerun with --retry-failed (retry_failed=True): "
                           "failures are stored (`xla-cost store list --failed`).")

    def summary(self) -> pd.DataFrame:
        """The runs in brief: configuration, status, GFLOP per phase, the ratios, seconds."""
        runs = self.runs
        out = runs[_configuration(runs)].copy()
        for phase in ("forward", "backward", "update"):
            column = f"{phase}_flops"
            # a failed row's figure (pandas' NA in an Int64 column) is None: unknown, not a number
            values = [None if pd.isna(v) else v for v in runs[column]] if column in runs else [None] * len(runs)
            scale, unit = flop_unit(values)  # per column: an update reads in its own unit, not 0.000 GFLOP
            out[f"{phase} {unit}"] = [scaled(v, scale) for v in values]
        for name, column in (("bwd/fwd", "backward_to_forward"), ("(bwd+upd)/fwd", "backward_with_update_to_forward")):
            values = runs[column] if column in runs else [None] * len(runs)
            out[name] = ["" if v is None or pd.isna(v) else f"{v:.3f}" for v in values]
        out["seconds"] = ["" if pd.isna(v) else f"{v:.2f}" for v in runs["seconds"]] if "seconds" in runs else ""
        out["status"] = [s if s == "ok" else f"{s}: {e}" for s, e in zip(runs.get("status", ()), runs.get("error", ()))]
        return out

    def to_table(self, width: int | None = None) -> str:
        """The `summary` for terminals, wrapped to ``width``: a configuration
        column with one value in every row is named once in the title, and a
        failure's error is a numbered line under the table, not a cell."""
        from xla_cost.present.text import TextTable, render, resolve_width  # rich: only to print

        failed = int((self.runs["status"] != "ok").sum()) if len(self.runs) else 0
        shown = self.summary().rename(columns={"batch_size": "batch", "bwd/fwd": "bwd / fwd",
                                               "(bwd+upd)/fwd": "(bwd + upd) / fwd", "seconds": "time (s)"})
        results = {"status", "time (s)", "batch"} | {c for c in shown.columns if "/" in c or "FLOP" in c}
        same = {c: shown[c].iloc[0] for c in shown.columns
                if c != "model" and c not in results and len(shown) > 1 and shown[c].nunique(dropna=False) == 1}
        title = f"{len(self.runs)} configurations" + (f", {failed} not ok" if failed else "")
        if same:
            title += " (" + ", ".join(f"{c}={v}" for c, v in same.items()) + ")"
        errors: list[str] = []
        status = []
        for text in shown["status"]:
            if text == "ok":
                status.append(text)
                continue
            kind, _, error = text.partition(": ")
            if error not in errors:
                errors.append(error)
            status.append(f"{kind}[{errors.index(error) + 1}]")
        shown = shown.drop(columns=list(same)).assign(status=status)
        lines = [f"[{i}] {error}" for i, error in enumerate(errors, 1)]
        return render([TextTable(shown.set_index("model"), title, left=("status",)), *lines], resolve_width(width))

    def to_json(self) -> str:
        """``{"runs": [...], "layers": [...]}``, every figure raw."""
        return json.dumps({"runs": json.loads(self.runs.to_json(orient="records")),
                           "layers": json.loads(self.layers.to_json(orient="records"))}, indent=2)

    def to_csv(self) -> str:
        """The runs frame as CSV (the layers: ``layers.to_csv()``)."""
        return self.runs.to_csv(index=False)

    def to_markdown(self) -> str:
        """The `summary` as a markdown table."""
        return markdown_table(self.summary(), index=False) + "\n"

    def _repr_markdown_(self) -> str:
        """How a notebook (IPython's display) shows the sweep: `to_markdown`."""
        return self.to_markdown()

    def plot(self, x: str = "batch_size", y: str = "backward_to_forward", hue: str | None = "model") -> Any:
        """A matplotlib ``Figure`` of ``y`` against ``x`` from `runs`' ok rows, in the reports' style
        (`xla_cost.present.plots.sweep_lines`): a line per ``hue`` value (None: one line) and per
        value of every other configuration column that varies, so that no line joins two
        configurations (``hue="optimizer"`` over two models: a line per optimizer and model).

        Raises:
          InputError: a column `runs` does not have, a ``y`` that is not numeric, or no ok row.
        """
        from xla_cost.present.plots import sweep_lines

        ok = self.runs[self.runs["status"] == "ok"] if "status" in self.runs else self.runs
        if not len(ok):
            raise InputError("runs that succeeded, to plot", f"none of {len(self.runs)}", "See runs['error'].")
        lines = [*([hue] if hue else []), *(c for c in _configuration(ok) if c not in (x, hue)
                                           and ok[c].astype(str).nunique() > 1)]
        if len(lines) > 1 and all(c in ok.columns for c in lines):
            hue = ", ".join(lines)  # one legend entry per line: "optimizer, model=adam, one_net"
            ok = ok.assign(**{hue: ok[lines].astype(str).agg(", ".join, axis=1)})
        return sweep_lines(ok, x, y, lines[0] if len(lines) == 1 else hue)


def _configuration(runs: pd.DataFrame) -> list[str]:
    """The columns of `SweepResult.runs` that say the configuration (model, batch size, settings, ...)."""
    fixed = {"status", "error", "parameters", "active_parameters", "seconds", "key", "notes", "unsupported"}
    return [c for c in runs.columns if c not in fixed and not any(c.startswith(p + "_") for p in PHASES)
            and c not in ("backward_to_forward", "backward_with_update_to_forward")]


def default_jobs() -> int:
    """Worker processes for a sweep: one per core, as many as memory allows
    at `WORKER_MEMORY` each, at least one."""
    cores = _cores()
    available = _available_memory()
    by_memory = cores if available is None else max(1, available // WORKER_MEMORY)
    return max(1, min(cores, by_memory))


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _values(name: str, given: Iterable[Any] | Any) -> list[Any]:
    values = [given] if isinstance(given, (str, int)) else list(given)
    if not values:
        raise InputError(f"at least one value for {name}", "none", f"Give e.g. {name}=[1].")
    return list(dict.fromkeys(values))


@dataclasses.dataclass(frozen=True)
class Grid:
    """The values a sweep combines: every combination is one `RunConfig`.

    Attributes:
      batch_sizes: batch sizes to analyse.
      settings: model arguments and their values, e.g. ``{"depth": [0, 1, 3]}``.
      optimizers, dtypes: names (`xla_cost.OPTIMIZERS`, default
        `xla_cost.choices.DEFAULT_OPTIMIZER`: adam; ``float32``, ``bfloat16``).
      counter: ``xla`` or ``jaxpr`` (`xla_cost.COUNTERS`).
      per_layer, depth: also the per-layer rows.
      input_shape: a custom model's input shape, batch first (the batch axis is
        replaced by each batch size).
      input_dtype: a custom model's input dtype (``int32`` for token ids); None:
        the run's dtype.
      target: compile every configuration for this device
        (`xla_cost.timemodel.devices.target`: ``h100``, ``tpu-v5e:2x2``) with its
        own compiler; each row records it and the store keys its results apart
        from the default backend's. None: the default backend.
    """

    batch_sizes: Iterable[int] | int = (1,)
    settings: Mapping[str, Iterable[Any]] | None = None
    optimizers: Iterable[str] | str = (DEFAULT_OPTIMIZER,)
    dtypes: Iterable[str] | str = ("float32",)
    counter: str = "xla"
    per_layer: bool = False
    depth: int | None = None
    input_shape: Sequence[int] | None = None
    input_dtype: str | None = None
    target: str | None = None


def _the_grid(function: str, grid: Grid | None, fields: Mapping[str, Any]) -> Grid:
    (given,) = split_fields(function, fields, Grid)
    return dataclasses.replace(grid or Grid(), **given)


def configurations(
    models: Sequence[str] | str,
    grid: Grid | None = None,
    *,
    # the values combined: `Grid`'s fields, replacing ``grid``'s
    batch_sizes: Iterable[int] | int = (1,),
    settings: Mapping[str, Iterable[Any]] | None = None,
    optimizers: Iterable[str] | str = (DEFAULT_OPTIMIZER,),
    dtypes: Iterable[str] | str = ("float32",),
    counter: str = "xla",
    per_layer: bool = False,
    depth: int | None = None,
    input_shape: Sequence[int] | None = None,
    input_dtype: str | None = None,
    target: str | None = None,
) -> list[RunConfig]:
    """Every combination, in order (models outermost, then settings, optimizers,
    dtypes, batch sizes), with zoo names canonical and duplicates dropped.

    Args:
      models: zoo names, ``FILE.py:attr`` or ``package.module:attr``.
      grid: the values combined (`Grid`), as one object.
      batch_sizes, settings, optimizers, dtypes, counter, per_layer, depth,
        input_shape, input_dtype, target: the fields of `Grid` (documented there); each one
        not at its default replaces ``grid``'s.

    A setting given as text (``"1"``, as ``--set depth=1,x`` gives it) is read by
    the type of the zoo model's field: ``1`` for an int field.

    Raises:
      InputError: an unknown zoo name, model argument, optimizer, dtype,
        counter or compile target (or its compiler not installed), a setting whose value is not of its field's type or out of
        its range (`RunConfig.checked_settings`), or a batch size below 1, before
        anything runs.
    """
    # jax and optax load only here: a sweep answered from the store needs neither
    from xla_cost.analysis.options import check_options, check_target
    from xla_cost.step.optimizers import OPTIMIZERS

    grid = _the_grid("configurations", grid, changed_fields(Grid, locals()))
    _check_dtypes(grid)
    if grid.target is not None:
        check_target(grid.target, counter=grid.counter)
    given = _grid(models, grid)
    for config in given:
        batch = config.batch_size
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise InputError("batch sizes of at least 1", repr(batch), "Use e.g. --batch-sizes 1,2,4.")
        if config.optimizer not in OPTIMIZERS:
            raise InputError(f"optimizers among {', '.join(OPTIMIZERS)}", repr(config.optimizer),
                             "Use e.g. --optimizers sgd,adam.")
        check_options(dtype=config.dtype, counter=grid.counter, depth=grid.depth)
        config.check_arguments()
    return _dedupe([config.canonical().checked_settings() for config in given])


def _check_dtypes(grid: Grid) -> None:
    """Refuses a dtype no model computes in here (``float64`` needs JAX's x64 mode), without jax."""
    for dtype in _values("dtypes", grid.dtypes):
        if dtype not in DTYPES:
            raise InputError(f"dtypes among {', '.join(DTYPES)}", repr(dtype),
                             "Use e.g. --dtypes float32,bfloat16 (dtypes=['float32', 'bfloat16']).")


def _grid(models: Sequence[str] | str, grid: Grid) -> list[RunConfig]:
    """The combinations as given: not checked, names not made canonical."""
    models = _values("models", models)
    batch_sizes = _values("batch_sizes", grid.batch_sizes)
    optimizers = _values("optimizers", grid.optimizers)
    dtypes = _values("dtypes", grid.dtypes)
    settings = grid.settings or {}
    keys = sorted(settings)
    grids = [_values(key, settings[key]) for key in keys]
    out: list[RunConfig] = []
    for model in models:
        for values in itertools.product(*grids):
            for optimizer, dtype, batch in itertools.product(optimizers, dtypes, batch_sizes):
                out.append(RunConfig(
                    model, batch, dict(zip(keys, values)), optimizer=optimizer, dtype=dtype,
                    counter=grid.counter, per_layer=grid.per_layer, depth=grid.depth,
                    input_shape=tuple(grid.input_shape) if grid.input_shape else None,
                    input_dtype=grid.input_dtype, target=grid.target,
                ))
    return _dedupe(out)


def _dedupe(configs: list[RunConfig]) -> list[RunConfig]:
    seen: dict[str, RunConfig] = {}
    for config in configs:
        seen.setdefault(json.dumps(config.to_dict(), sort_keys=True, default=str), config)
    return list(seen.values())


def run_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Analyses one configuration (a `RunConfig.to_dict`) in this process.

    What a worker process or a Dask worker runs. Never raises for a failed
    analysis: the result says ``failed`` with the one-line reason.

    Returns:
      ``{"report": Report.to_dict() or None, "error": str or None,
      "seconds": float, "environment": the worker's environment}``.
    """
    start = time.perf_counter()
    run = RunConfig(**{**config, "input_shape": tuple(config["input_shape"]) if config.get("input_shape") else None})
    report, error = None, None
    try:
        report = run.run().to_dict()
    except XlaCostError as exc:
        error = str(exc)
    except Exception as exc:  # noqa: BLE001 - a failed configuration is a row, not the end
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        error = f"{type(exc).__name__}: {first}".rstrip(": ")
    return {"report": report, "error": error, "seconds": time.perf_counter() - start, "environment": environment()}


WORKER_PRELOAD: tuple[str, ...] = ("xla_cost.analysis.pipeline", "xla_cost.zoo")
"""Modules a fork server imports once for all worker processes."""


def _worker_init(cores: int, started: Any) -> None:
    """Each worker compiles in at most its share of the cores: `analyze`
    overlaps compiles with tracing in threads, which only pays while cores are
    idle. ``started`` counts the workers that got this far (past importing the
    main script again).

    A worker ignores SIGINT: Ctrl-C reaches the whole process group, and the
    sweep's own process answers it (one line) and kills its workers; raised in
    a worker, the `KeyboardInterrupt` could land in one of jax's garbage
    collection callbacks and be printed as "Exception ignored in ..." on the
    terminal the workers share."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from xla_cost.analysis import programs  # a worker's first import of the analysis

    programs.COMPILE_THREADS = max(1, min(programs.COMPILE_THREADS, cores))
    with started.get_lock():
        started.value += 1


_GUARD = 'if __name__ == "__main__":'
"""The block a script's sweep belongs in when worker processes run it: each imports the script again."""


def _check_workers_can_start() -> None:
    """Raises `InputError` when this call comes from the top level of the main script outside an
    ``if __name__ == "__main__":`` block: workers (forkserver or spawn) import the main script again,
    where the sweep would run again in each (which dies before running anything, after starting
    workers of its own). Checked before any worker starts or anything is stored. A main module not
    imported again (``python -m xla_cost``, ``python -c``, a session, a notebook) always passes."""
    main = sys.modules.get("__main__")
    if main is None or not _reimported_by_workers(main):
        return
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)):
        frame = frame.f_back
    if frame is None:
        return  # not called from the script's top level: the workers' import does not reach it
    try:
        with open(frame.f_code.co_filename, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return  # the source is not readable: _run_local still sees workers that die starting
    if not _under_main_guard(tree, frame.f_lineno):
        where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        raise InputError(
            f"a script's sweep under `{_GUARD}`", f"a call at {where} outside it",
            "Each worker process imports the script again and would run the call too: "
            "put it under the guard, or pass jobs=0.",
        )


def _reimported_by_workers(main: Any) -> bool:
    """Whether multiprocessing's workers import ``main`` again (as `multiprocessing.spawn` decides)."""
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return name != "__main__" and not name.endswith(".__main__")
    path = getattr(main, "__file__", None)
    return path is not None and os.path.splitext(os.path.basename(path))[0] != "ipython"


def _under_main_guard(tree: ast.Module, line: int) -> bool:
    """Whether ``line`` is in the branch of an ``if __name__ == "__main__":`` (or
    ``!=``'s else) that runs only when the script is the main program."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
            continue
        test = node.test
        if len(test.ops) != 1 or not isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
            continue
        sides = [test.left, *test.comparators]
        names = any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
        main = any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
        branch = node.body if isinstance(test.ops[0], ast.Eq) else node.orelse
        if names and main and branch and branch[0].lineno <= line <= (branch[-1].end_lineno or branch[-1].lineno):
            return True
    return False


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _spawn_pool(jobs: int) -> tuple[concurrent.futures.ProcessPoolExecutor, Any]:
    """Worker processes forked from a fork server that has imported jax, flax,
    optax and xla_cost (and started no backend), where the platform has one;
    else spawned. Never forked from this process, whose JAX may run threads.
    Returns the pool and the count of its workers that have started."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(WORKER_PRELOAD))
        _start_fork_server_ignoring_sigint()
    else:  # pragma: no cover - Windows
        context = multiprocessing.get_context("spawn")
    started = context.Value("i", 0)
    pool = concurrent.futures.ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_worker_init, initargs=(_cores() // jobs, started)
    )
    return pool, started


def _start_fork_server_ignoring_sigint() -> None:
    """Starts multiprocessing's fork server (where none runs yet) with SIGINT
    ignored, so that it and every worker it forks ignore Ctrl-C from their
    first instruction: an ignored signal stays ignored across exec, Python then
    installs no handler of its own, and the server hands its children the
    handlers it started with. `_worker_init` ignores SIGINT too, but only once
    a worker has imported the main script again (a console script: the
    command line's modules, seconds), and a `KeyboardInterrupt` raised before
    that landed in jax's garbage-collection callback: "Exception ignored in:
    _xla_gc_callback" on the shared terminal. Ignored here, SIGINT no longer
    interrupts the server's own import of jax and xla_cost either.

    SIGINT is ignored in this process only while the server is exec'd
    (milliseconds: the resource tracker is started first): a Ctrl-C in that
    window is lost. Off the main thread (where Python cannot change a handler)
    and where SIGINT has a handler not set from Python, nothing is changed."""
    from multiprocessing import forkserver, resource_tracker

    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is None):
        return
    resource_tracker.ensure_running()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_local(
    todo: list[RunConfig], jobs: int, record: Callable[[RunConfig, Mapping[str, Any]], None],
    progress: Progress,
) -> None:
    """Runs ``todo`` in ``jobs`` worker processes (or here, with 0), at most
    ``jobs`` at a time; a worker that dies is replaced and what it ran retried.
    Workers that die before any of them has started (the main script fails
    when they import it again) are the harness's failure, not the
    configurations': `InputError`, and nothing is stored for them."""
    if jobs == 0:
        for config in todo:
            progress.show([config.label()])
            record(config, run_config(config.to_dict()))
        return
    queue = list(todo)
    deaths: dict[int, int] = {}
    while queue:
        pool, started = _spawn_pool(jobs)
        running: dict[concurrent.futures.Future[dict[str, Any]], tuple[int, RunConfig]] = {}
        broken = finished = False
        try:
            while queue or running:
                while queue and len(running) < jobs and not broken:
                    config = queue[0]
                    try:
                        future = pool.submit(run_config, config.to_dict())
                    except concurrent.futures.process.BrokenProcessPool:
                        # a worker died before this was handed over (as quickly as a script that fails in
                        # the workers' import of it): the pool is new again, and the configuration waits for it
                        if started.value == 0:
                            raise _never_started() from None
                        broken = True
                        break
                    running[future] = (id(config), queue.pop(0))
                progress.show(c.label() for _, c in running.values())
                done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    index, config = running.pop(future)
                    try:
                        result = future.result()
                    except concurrent.futures.process.BrokenProcessPool:
                        if started.value == 0:
                            raise _never_started() from None
                        broken = True
                        deaths[index] = deaths.get(index, 0) + 1
                        if deaths[index] >= DEATHS_BEFORE_FAILURE:
                            record(config, {
                                "report": None, "seconds": None, "environment": environment(),
                                "error": f"the worker process died {deaths[index]} times while "
                                "analysing this configuration (killed: most likely out of memory)",
                            })
                        else:
                            queue.insert(0, config)
                        continue
                    record(config, result)
                if broken and not running:
                    break
            finished = not broken
        finally:
            # Interrupted or broken: the workers are killed, not waited for.
            _shutdown(pool, kill=not finished)


def _never_started() -> InputError:
    """The harness's failure: every worker died before any started (`_run_local`)."""
    return InputError("worker processes that start", "workers that died before running anything",
                      f"A script's sweep belongs under `{_GUARD}` (each worker process imports the script again), "
                      "or pass jobs=0.")


def _shutdown(pool: concurrent.futures.ProcessPoolExecutor, *, kill: bool) -> None:
    processes = list((getattr(pool, "_processes", None) or {}).values())
    if kill:
        for process in processes:
            if process.is_alive():
                process.kill()
    pool.shutdown(wait=True, cancel_futures=True)  # killed, the workers are gone at once


def sweep(
    models: Sequence[str] | str,
    grid: Grid | None = None,
    *,
    store: Store | str | os.PathLike[str] | None = None,
    jobs: int | None = None,
    scheduler: Any = None,
    progress: bool | None = None,
    retry_failed: bool = False,
    on_result: Callable[[RunConfig, StoredResult], None] | None = None,
    # the values combined: `Grid`'s fields, replacing ``grid``'s
    batch_sizes: Iterable[int] | int = (1,),
    settings: Mapping[str, Iterable[Any]] | None = None,
    optimizers: Iterable[str] | str = (DEFAULT_OPTIMIZER,),
    dtypes: Iterable[str] | str = ("float32",),
    counter: str = "xla",
    per_layer: bool = False,
    depth: int | None = None,
    input_shape: Sequence[int] | None = None,
    input_dtype: str | None = None,
    target: str | None = None,
) -> SweepResult:
    """Analyses every combination of the arguments; results go through the store.

    Args:
      models: zoo names (``linear_net``, ``resnet50``), ``FILE.py:attr`` or ``package.module:attr``
        (with ``input_shape``).
      grid: the values combined (`Grid`), as one object.
      store: a `Store`, a path to its file, or None for `default_store_path`.
      jobs: worker processes on this machine (None: `default_jobs`; 0: run in
        this process).
      scheduler: a Dask scheduler address (``tcp://HOST:8786``) or a
        ``distributed.Client``: run there instead (``pip install 'xla-cost[dask]'``).
      progress: a progress bar on stderr (None: when stderr is a terminal).
      retry_failed: analyse again configurations stored as failed.
      on_result: called with each configuration and its stored row as it is stored.
      batch_sizes, settings, optimizers, dtypes, counter, per_layer, depth,
        input_shape, input_dtype, target: the fields of `Grid` (documented there); each
        one not at its default replaces ``grid``'s.

    Returns:
      A `SweepResult`: ``runs`` (a row per configuration) and ``layers``.

    Raises:
      InputError: a bad name or value (a dtype other than float32, bfloat16 and
        float16; a setting not of its field's type or out of its range), a
        ``scheduler`` where no Dask scheduler answers, an unusable
        ``$XLA_COST_CACHE_DIR``, or (with
        worker processes) a call from a script's top level outside
        ``if __name__ == "__main__":``, before anything runs or is stored;
        workers that die before any has started (nothing is stored for them).
    """
    grid = _the_grid("sweep", grid, changed_fields(Grid, locals()))
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0):
        raise InputError("jobs a number of worker processes, 0 or more", repr(jobs), "Use e.g. --jobs 2.")
    _check_dtypes(grid)
    own = not isinstance(store, Store)
    if own and str(store) != ":memory:" and not (default_store_path() if store is None else pathlib.Path(store)
                                                   ).expanduser().exists():
        configurations(models, grid)  # nothing stored yet: a bad name is refused before the file is made
        if scheduler is None:
            _check_cache_dir()
    client, disconnect = connect(scheduler)  # before the store: a wrong address leaves no file
    try:
        db = Store(store) if own else store
    except BaseException:
        disconnect()
        raise
    try:
        env = environment() if client is None else client.submit(environment, pure=False).result()
        if not retry_failed:
            # Everything stored already (under the names as given, so they were
            # valid): no model, optimizer or zoo module needs importing.
            given = _dedupe(_grid(models, grid))
            keys = {id(c): result_key(c.to_dict(), env) for c in given}
            stored = db.get_many(keys.values())
            if all(key in stored for key in keys.values()):
                return sweep_frames([(c, stored[keys[id(c)]]) for c in given])
        configs = configurations(models, grid)
        keys = {id(c): result_key(c.to_dict(), env) for c in configs}
        stored = db.get_many(keys.values())
        todo = [c for c in configs
                if keys[id(c)] not in stored or (retry_failed and stored[keys[id(c)]].status == "failed")]
        if todo and client is None:
            _check_cache_dir()
            if jobs != 0:
                _check_workers_can_start()
        if retry_failed:
            db.delete(keys[id(c)] for c in todo if keys[id(c)] in stored)

        bar = Progress(len(todo), progress)
        try:
            def record(config: RunConfig, result: Mapping[str, Any]) -> None:
                key = result_key(config.to_dict(), result["environment"])
                keys[id(config)] = key
                db.put(key, model=config.model, config=config.to_dict(), environment=result["environment"],
                       report=result["report"], error=result["error"], seconds=result["seconds"])
                bar.advance()
                if on_result is not None:
                    on_result(config, db.get(key))

            if todo:
                if client is not None:
                    run_on_dask(todo, client, record, bar, run_config)
                else:
                    _run_local(todo, default_jobs() if jobs is None else min(jobs, len(todo)), record, bar)
        finally:
            bar.close()
        rows = db.get_many(keys.values())
        return sweep_frames([(c, rows.get(keys[id(c)])) for c in configs])
    finally:
        if own:
            db.close()
        disconnect()


def _check_cache_dir() -> None:
    """Refuses a ``$XLA_COST_CACHE_DIR`` the analyses here could not use, before anything is stored."""
    from xla_cost.compiled import xla  # jax: loaded only when something runs here

    xla.check_cache_dir()


_CONFIG_COLUMNS = ("model", "batch_size")


def _config_columns(config: RunConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"model": config.model, "batch_size": config.batch_size}
    out.update(config.config)
    out.update(optimizer=config.optimizer, dtype=config.dtype, counter=config.counter)
    if config.target is not None:  # a column only where a target was asked for: CPU sweeps keep theirs
        out["target"] = config.target
    return out


def _run_row(config: RunConfig, row: StoredResult | None) -> dict[str, Any]:
    out = _config_columns(config)
    if row is None:  # interrupted before it ran
        out.update(status="missing", error="not analysed (the sweep stopped before it)")
        return out
    out.update(status=row.status, error=row.error)
    report = row.report
    if report is not None:
        out["parameters"] = report["parameters"]
        out["active_parameters"] = report.get("active_parameters")  # None: the model declares no routing
        for phase in PHASES:
            for key in (
                "flops", "xla_flops", "jaxpr_flops", "transcendentals", "bytes_accessed",
                "jaxpr_bytes_accessed",
            ):
                out[f"{phase}_{key}"] = report[key][phase]
            for key, value in report["memory"][phase].items():
                out[f"{phase}_{key}"] = value
            out[f"{phase}_source"] = report["sources"][phase]["flops"]
        out.update(report["ratios"])
        out["unsupported"] = json.dumps(report["unsupported"], sort_keys=True)
        out["notes"] = json.dumps(report["notes"])
    out["seconds"] = row.seconds
    out["key"] = row.key
    return out


def sweep_frames(rows: Sequence[tuple[RunConfig, StoredResult | None]]) -> SweepResult:
    """The `SweepResult` of stored rows (None: not analysed), in the given order."""
    runs = pd.DataFrame([_run_row(c, r) for c, r in rows],
                        columns=None if rows else [*_CONFIG_COLUMNS, "optimizer", "dtype", "status", "error"])
    integer = [
        c for c in runs.columns
        if c in ("parameters", "active_parameters")
        or (c.endswith(("_flops", "_transcendentals", "_bytes")) or c.endswith("_bytes_accessed"))
    ]
    if len(runs):
        runs[integer] = runs[integer].astype("Int64")
    layer_rows = []
    for config, row in rows:
        if row is None or row.report is None or row.report.get("layers") is None:
            continue
        for layer in row.report["layers"]:
            layer_rows.append({**_config_columns(config), **{k: layer.get(k) for k in LAYER_FIELDS}})
    layers = pd.DataFrame(layer_rows, columns=None if layer_rows else [*_CONFIG_COLUMNS, *LAYER_FIELDS])
    return SweepResult(runs, layers)

