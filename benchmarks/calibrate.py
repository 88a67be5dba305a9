"""Analyses the validation's cases, fits the time model's constants, writes them.

The time model has one set of global constants
(`xla_cost.timemodel.calibration`), fitted on every case of
`xla_cost.study.cases.CASES` (published training runs and this project's
measurements), each setup compiled for the device it ran on:

    python benchmarks/calibrate.py --programs          # analyse the setups the committed file lacks, add them
    python benchmarks/calibrate.py --programs --again  # analyse every setup again
    python benchmarks/calibrate.py --programs --whole  # unrolled programs compiled whole, not by depth
    python benchmarks/calibrate.py              # fit, write constants.json with the prediction interval, print
    python benchmarks/calibrate.py --check      # fit and compare with the committed constants; write nothing

An unrolled program of more than three identical blocks (the frameworks that
do not scan their layers) is built from its compiles at two and three blocks
(`xla_cost.study.validation.analyse_by_depth`: every figure f(3) + (L - 3)
(f(3) - f(2))), marked in the file as extrapolated; ``--whole`` compiles it
whole. The GPU programs are compiled first, the TPU ones (scanned FSDP
programs over hundreds of chips, minutes each) last.

A program whose compiler refuses it is recorded in the file with its error
(`xla_cost.study.validation.REFUSED_RULE`): its case is left out, listed on
the page, and it is not compiled again unless ``--again`` or ``--only`` names it.

The held-out (leave-one-paper-out) errors are the validation page's
(``xla-cost report validation``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import math
import pathlib
import sys
import time

import jax

from xla_cost.parallel.sharding import simulate_devices

simulate_devices(8)

DATA = pathlib.Path(__file__).resolve().parents[1] / "reports" / "data"


@contextlib.contextmanager
def _locked(path: pathlib.Path):
    """Holds an exclusive lock beside the programs file: two ``--programs`` runs
    at once write in turn, each merging with what the other wrote."""
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _save(path: pathlib.Path, fresh: dict, refused: dict, stale: set) -> int:
    """Writes this run's programs over the file as it is now (another run's
    programs, written since this one started, are kept); returns the count."""
    from xla_cost.study import validation

    with _locked(path):
        disk = dict(validation.read_programs(path)) if path.is_file() else {}
        merged = {k: v for k, v in {**disk, **fresh}.items() if k not in stale}
        declined = {k: v for k, v in {**validation.read_refused(path), **refused}.items()
                    if k not in merged and k not in stale}
        validation.write_programs(merged, path, declined)
    return len(merged)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", action="store_true", help="analyse every setup for its target first")
    parser.add_argument("--only", default=None, help="with --programs: the cases (comma-separated) to analyse "
                        "again; the others are kept from the committed file")
    parser.add_argument("--again", action="store_true", help="with --programs: analyse every setup again, not only "
                        "those the committed file lacks")
    parser.add_argument("--whole", action="store_true", help="with --programs: compile unrolled programs whole, "
                        "not from their compiles at two and three blocks")
    parser.add_argument("--check", action="store_true", help="compare with the committed constants; write nothing")
    parser.add_argument("--store", default=None, help="the results store (default: the user's)")
    args = parser.parse_args(argv)
    from xla_cost.timemodel import calibration
    from xla_cost.study import validation

    path = validation.programs_path(DATA)
    if args.programs:
        again = args.again or args.only
        only = set(args.only.split(",")) if args.only else None
        chosen = [c for c in validation.CASES if only is None or c.name in only]
        # the GPU programs first, the TPU ones last; fewer devices first within each
        chosen.sort(key=lambda c: (any(s.compile_target.startswith("tpu") for s in c.setups),
                                   max(math.prod(s.mesh.values()) if s.mesh else 1 for s in c.setups)))
        redo = {s.key() for c in chosen for s in c.setups} if again else set()
        kept = {k: v for k, v in (validation.read_programs(path) if path.is_file() else {}).items() if k not in redo}
        refused = {k: v for k, v in validation.read_refused(path).items() if k not in redo}
        started = time.perf_counter()
        wanted = {s.key() for c in validation.CASES for s in c.setups}
        stale = (set(kept) | set(refused)) - wanted  # what no case of this code wants: dropped; others' new kept
        fresh: dict = {}
        for case in chosen:  # the file written after each case that compiled something: a stopped run keeps them
            known = set(kept) | set(fresh)
            new = validation.analyse_setups([case], args.store, progress=lambda text: print(text, flush=True),
                                            known=known, refused=refused, by_depth=not args.whole)
            fresh.update(new)
            if new or any(s.key() in refused and s.key() not in known for s in case.setups):
                count = _save(path, fresh, refused, stale)
                print(f"  {time.perf_counter() - started:.0f} s: {count} programs in the file", flush=True)
        count = _save(path, fresh, refused, stale)
        print(f"wrote {path} ({count} programs, {len(fresh)} compiled now, {len(refused)} refused; "
              f"{time.perf_counter() - started:.0f} s)")
    reports, refused = validation.read_programs(path), validation.read_refused(path)
    cases = [c for c in validation.CASES if c.name not in validation.refused_cases(validation.CASES, refused)]
    started = time.perf_counter()
    fitted = validation.fit_constants(cases, reports)
    print(f"fitted on {len(cases)} cases in {time.perf_counter() - started:.1f} s: {calibration.describe(fitted)}")
    print("  " + ", ".join(f"{name} {value:.6g}" for name, value in zip(calibration.FIELDS, fitted.values())))
    started = time.perf_counter()
    result = validation.validate(reports, cases, constants=fitted, refused={}, generations=False)
    fitted = dataclasses.replace(fitted, interval=validation.prediction_interval(result))
    print(f"held out paper by paper in {time.perf_counter() - started:.1f} s: {fitted.interval.describe()}")
    for label, refit in [("every case", fitted), *((f"without {p}", c) for p, c in result.held_out_constants.items())]:
        if calibration.at_bound(refit):
            print(f"  at a bound, fitted on {label}: {', '.join(calibration.at_bound(refit))}")
    if args.check:
        committed = calibration.constants()
        same = all(abs(a - b) <= 1e-3 * max(abs(b), 1e-9) for a, b in zip(fitted.values(), committed.values()))
        print("committed:", ", ".join(f"{n} {v:.6g}" for n, v in zip(calibration.FIELDS, committed.values())))
        return 0 if same else 1
    print("wrote", calibration.write_constants(fitted))
    print("jax", jax.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
