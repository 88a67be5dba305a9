"""Fits the time model's calibration profiles and writes them.

Each device's profile (`xla_cost.parallel.calibration`) is fitted on the
published or measured cases of `xla_cost.study.validation.CASES` marked
``fitted`` (two cases: the matrix products' and the memory-bound work's
shares; one case: one share for both) and written to
``xla_cost/parallel/calibrations/<device>.json``; every other case tests it
(``xla-cost report validation``).

    python benchmarks/calibrate.py            # fit, write, print
    python benchmarks/calibrate.py --check    # fit and compare with the committed profiles
"""

from __future__ import annotations

import argparse
import sys

import jax

from xla_cost.parallel.sharding import simulate_devices

simulate_devices(8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed profiles; write nothing")
    parser.add_argument("--store", default=None, help="the results store (default: the user's)")
    args = parser.parse_args(argv)
    from xla_cost.parallel import calibration
    from xla_cost.study.validation import fit_calibrations

    fitted = fit_calibrations(args.store)
    committed = calibration.profiles()
    differ = False
    for device, profile in sorted(fitted.items()):
        old = committed.get(device)
        same = old is not None and abs(old.matmul - profile.matmul) <= 1e-3 and abs(old.memory - profile.memory) <= 1e-3
        differ |= not same
        print(f"{device}: matmul {profile.matmul:.4f}, memory {profile.memory:.4f}, launch {profile.launch * 1e6:.2f} us "
              f"(fitted on {', '.join(profile.fitted_on)})"
              + ("" if same else f"; committed: {old.matmul:.4f}, {old.memory:.4f}" if old else "; none committed"))
    if args.check:
        return 1 if differ else 0
    for path in calibration.write_profiles(fitted):
        print("wrote", path)
    print("jax", jax.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
