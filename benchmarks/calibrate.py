"""Analyses the validation's cases, fits the time model's constants, writes them.

The time model has one set of global constants
(`xla_cost.timemodel.calibration`), fitted on every case of
`xla_cost.study.cases.CASES` (published training runs and this project's
measurements), each setup compiled for the device it ran on:

    python benchmarks/calibrate.py --programs   # analyse every setup for its target, write reports/data/validation_programs.json.gz
    python benchmarks/calibrate.py              # fit on the committed programs, write constants.json, print
    python benchmarks/calibrate.py --check      # fit and compare with the committed constants; write nothing

The held-out (leave-one-paper-out) errors are the validation page's
(``xla-cost report validation``).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax

from xla_cost.parallel.sharding import simulate_devices

simulate_devices(8)

DATA = pathlib.Path(__file__).resolve().parents[1] / "reports" / "data"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", action="store_true", help="analyse every setup for its target first")
    parser.add_argument("--only", default=None, help="with --programs: the cases (comma-separated) to analyse "
                        "again; the others are kept from the committed file")
    parser.add_argument("--check", action="store_true", help="compare with the committed constants; write nothing")
    parser.add_argument("--store", default=None, help="the results store (default: the user's)")
    args = parser.parse_args(argv)
    from xla_cost.timemodel import calibration
    from xla_cost.study import validation

    path = validation.programs_path(DATA)
    if args.programs:
        kept = validation.read_programs(path) if args.only and path.is_file() else {}
        chosen = [c for c in validation.CASES if not args.only or c.name in args.only.split(",")]
        started = time.perf_counter()
        fresh = validation.analyse_setups(chosen, args.store, progress=lambda text: print(text, flush=True))
        wanted = {s.key() for c in validation.CASES for s in c.setups}
        merged = {k: v for k, v in {**kept, **fresh}.items() if k in wanted}
        validation.write_programs(merged, path)
        print(f"wrote {path} ({len(merged)} programs, {time.perf_counter() - started:.0f} s)")
    reports = validation.read_programs(path)
    started = time.perf_counter()
    fitted = validation.fit_constants(validation.CASES, reports)
    print(f"fitted in {time.perf_counter() - started:.1f} s: {calibration.describe(fitted)}")
    print("  " + ", ".join(f"{name} {value:.6g}" for name, value in zip(calibration.FIELDS, fitted.values())))
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
