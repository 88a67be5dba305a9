"""Writing the study pages: `write_report`.

`write_report` builds the pages of `xla_cost.study.pages.PAGES` (seed 001's
backward/forward study redone with XLA's counts, the optimizers, measured step
time, the zoo, scaling, memory, every quantitative claim of the seeds, an
index) and their PNG figures from sweeps it runs through the results store
(`xla_cost.sweep`), or, given a `xla_cost.Report`, one page for that model
(`xla_cost.study.model_page`).

Determinism: a page holds only counted figures (FLOP, parameters, ratios, each
formatted to a fixed number of digits) and figures read from the committed
data files under ``reports/data/`` (measured times). Nothing measured while
the pages are built (an analysis's seconds, the date) reaches them, so the
same store, or an empty one whose analyses are run again, gives the same
markdown byte for byte. The figures are drawn with matplotlib's Agg canvas,
without the ``Software`` stamp, under a fixed style (the user's matplotlibrc
does not apply; `xla_cost.present.figures`).

Collecting data and rendering are separate: a `xla_cost.study.data.StudyData`
runs the sweeps (each once, on demand), and each page is a function of it that
returns the page's files as bytes; `write_report` writes them only when all
are built, each atomically.
"""

from __future__ import annotations

import os
import pathlib
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from xla_cost.compiled.store import Store
from xla_cost.errors import InputError
from xla_cost.present.files import cannot_create_in, write_file
from xla_cost.study.data import StudyData
from xla_cost.study.model_page import model_files
from xla_cost.study.pages import BUILDERS, PAGES, SHARDED
from xla_cost.study.plan import COMMAND, DEFAULT_PLAN, ReportPlan

if TYPE_CHECKING:
    from xla_cost.analysis.report import Report

__all__ = ["check_out", "default_data_dir", "write_report"]


def default_data_dir() -> pathlib.Path:
    """The committed data of a source checkout: ``reports/data`` beside the package."""
    return pathlib.Path(__file__).resolve().parents[2] / "reports" / "data"


def _resolve_pages(target: str | Sequence[str]) -> list[str]:
    names = [target] if isinstance(target, str) else list(target)
    if not names or not all(isinstance(n, str) for n in names):
        raise InputError(
            "page names (a name, a list of names or \"all\") or a Report", repr(target),
            f"Use one of {', '.join(PAGES)}, or \"all\".",
        )
    if "all" in names:
        return list(PAGES)
    import difflib

    for name in names:
        if name not in PAGES:
            close = difflib.get_close_matches(name, PAGES, n=1)
            raise InputError(
                f"a page name ({', '.join(PAGES)}) or \"all\"", repr(name),
                (f"Did you mean `{close[0]}`? " if close else "") + "Run `xla-cost report all` for every page.",
            )
    return [p for p in PAGES if p in names]  # reading order, each once


def check_out(out: str | os.PathLike[str]) -> pathlib.Path:
    """The directory ``out`` names, or `InputError` (one line) when no page could be
    written there: empty, a file, under a file, or where nothing can be created
    (tried with a temporary directory, removed at once). Nothing is created."""
    path = pathlib.Path(out)
    fix = "Pass a directory you can write, e.g. --out reports/."
    if str(out).strip() == "":
        raise InputError("--out naming a directory", "an empty name", "Pass e.g. --out reports/.")
    if path.exists() and not path.is_dir():
        raise InputError("--out naming a directory", f"{str(out)!r}, a file", "Pass a directory, e.g. --out reports/.")
    existing = next((p for p in (path, *path.absolute().parents) if os.path.lexists(p)), None)
    if existing is not None and not existing.is_dir():
        raise InputError("--out naming a directory", f"{str(out)!r} ({str(existing)!r} is a file, not a directory)",
                         fix)
    reason = None if existing is None else cannot_create_in(str(existing))
    if reason is not None:
        raise InputError("--out in a writable place",
                         f"{str(out)!r} (nothing can be created in {str(existing)!r}: {reason})", fix)
    return path


def _command(pages: Sequence[str], out: str | os.PathLike[str], directory: pathlib.Path) -> str:
    """The command the pages say made them: `COMMAND` for the checkout's ``reports/`` (the committed
    pages, whichever of them a run rewrites), else ``xla-cost report PAGES --out OUT`` as given."""
    if directory.resolve() == default_data_dir().parent:
        return COMMAND
    words = "all" if list(pages) == list(PAGES) else " ".join(pages)
    return f"xla-cost report {words} --out {shlex.quote(os.fspath(out))}"


def _write_files(out: pathlib.Path, files: Mapping[str, bytes]) -> list[pathlib.Path]:
    """Writes every file under ``out``, each atomically (`write_file`): a reader
    never sees a half-written file. A directory that cannot be made or written
    at this point (removed, or a full disk) is one `InputError`."""
    written = []
    for relative in sorted(files):
        target = out / relative
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_file(target, files[relative])
        except OSError as exc:
            raise InputError("--out a directory the pages can be written to",
                             f"{str(out)!r} ({type(exc).__name__}: {exc.strerror or exc})",
                             "Pass a directory you can write, e.g. --out reports/.") from exc
        written.append(target)
    return written


def write_report(
    target: str | Sequence[str] | Report,
    out: str | os.PathLike[str] = "reports",
    *,
    store: Store | str | os.PathLike[str] | None = None,
    jobs: int | None = None,
    progress: bool | None = None,
    plan: ReportPlan | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> list[pathlib.Path]:
    """Writes markdown pages and their PNG figures.

    Args:
      target: a page name of `PAGES`, a list of them, ``"all"``, or a
        `xla_cost.Report` analysed with ``per_layer=True`` (one page,
        ``<model>.md``, with the phase table, the per-layer table and a stacked
        bar figure of forward/backward/update per layer).
      out: the directory (created if missing); figures go to ``out/figures/``.
      store: the results store the sweeps go through (a `xla_cost.Store` or a
        path; None: `xla_cost.default_store_path`). Not used for a Report.
      jobs: worker processes for the sweeps (None: one per core; 0: in this process).
      progress: a progress bar on stderr while sweeps run (None: when stderr is
        a terminal).
      plan: the configurations the pages analyse (default `DEFAULT_PLAN`, the
        committed pages'); a smaller plan makes quicker, smaller pages.
      data_dir: the committed measurements (``timing_*.csv``, ...); default
        ``reports/data`` of the source checkout.

    Returns:
      The files written, sorted.

    Raises:
      InputError: an unknown page name, ``out`` naming a file, a Report
        without per-layer rows, or (for the scaling and claims pages) JAX
        already started with fewer CPU devices than the plan's sharded
        analyses simulate (call it before any JAX computation, or
        `xla_cost.simulate_devices` first); raised before anything runs or is
        written.

    Example::

        import xla_cost
        xla_cost.write_report("all")                       # reports/*.md, reports/figures/*.png
        report = xla_cost.analyze(model, x, optimizer="adam", per_layer=True)
        xla_cost.write_report(report, "out/")              # out/<model>.md
    """
    from xla_cost.analysis.report import Report

    if isinstance(target, Report):
        directory = check_out(out)
        return _write_files(directory, model_files(target))
    if not isinstance(target, (str, list, tuple)):
        raise InputError(
            "page names (a name, a list of names or \"all\") or a Report", f"a {type(target).__name__}",
            f"Use one of {', '.join(PAGES)}, or \"all\".",
        )
    pages = _resolve_pages(target)
    directory = check_out(out)
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0):
        raise InputError("jobs a number of worker processes, 0 or more", repr(jobs), "Use e.g. --jobs 2.")
    resolved = (plan or DEFAULT_PLAN).resolved()
    if SHARDED & set(pages):
        from xla_cost.parallel.sharding import simulate_devices

        simulate_devices(resolved.simulated_devices)
    data_path = pathlib.Path(data_dir) if data_dir is not None else default_data_dir()
    own = not isinstance(store, Store)
    db = Store(store) if own else store
    try:
        data = StudyData(db, resolved, data_path, jobs, progress, out=directory,
                         command=_command(pages, out, directory))
        files: dict[str, bytes] = {}
        for page in pages:
            files.update(BUILDERS[page](data))
    finally:
        if own:
            db.close()
    return _write_files(directory, files)
