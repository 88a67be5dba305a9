"""How fast a sweep runs with one and with several worker processes, and from the store.

Issue 11's targets: a 24-configuration sweep of the seed nets with ``--jobs 2``
takes at most 0.6x the time of the same sweep with ``--jobs 1``, and a rerun
from the store takes under 2 s. Each sweep runs as ``xla-cost sweep`` in a
fresh process (wall clock, interpreter start included) with a new empty store
and JAX's persistent compilation cache off, so no run profits from another's
compiles; the rerun reads the ``--jobs 2`` run's store.

    python benchmarks/bench_sweep.py                  # the issue's sweep
    python benchmarks/bench_sweep.py --jobs 1,2,4 --batch-sizes 1,8
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

SEED_NETS = ["linear_net", "one_net", "conv_net", "deeper_conv_net"]


def _run(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "xla_cost", "sweep", *args], env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({done.returncode}): {done.stderr.strip()}")
    failed = [line for line in done.stdout.splitlines() if ",failed," in line]
    if failed:
        raise SystemExit(f"{len(failed)} configurations failed: {failed[0]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(SEED_NETS))
    parser.add_argument("--batch-sizes", default="1,16,256")
    parser.add_argument("--optimizers", default="sgd,adam")
    parser.add_argument("--jobs", default="1,2", help="comma-separated worker counts to compare")
    args = parser.parse_args()
    models = args.models.split(",")
    count = len(models) * len(args.batch_sizes.split(",")) * len(args.optimizers.split(","))
    env = {**os.environ, "XLA_COST_NO_CACHE": "1", "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    common = [*models, "--batch-sizes", args.batch_sizes, "--optimizers", args.optimizers,
              "--quiet", "--format", "csv"]
    print(f"{count} configurations: {', '.join(models)} x batch {args.batch_sizes} x {args.optimizers}; "
          f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.2f}")
    times: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in [int(j) for j in args.jobs.split(",")]:
            store = os.path.join(tmp, f"jobs{jobs}.sqlite")
            times[jobs] = _run([*common, "--jobs", str(jobs), "--store", store], env)
            print(f"  --jobs {jobs}: {times[jobs]:.1f} s")
        last = max(times)
        rerun = _run([*common, "--jobs", str(last), "--store", os.path.join(tmp, f"jobs{last}.sqlite")], env)
    print(f"  rerun from the store (--jobs {last}'s): {rerun:.2f} s  target < 2 s  "
          f"{'PASS' if rerun < 2 else 'FAIL'}")
    base = times.get(1)
    for jobs, seconds in sorted(times.items()):
        if jobs != 1 and base:
            ratio = seconds / base
            verdict = f"  target <= 0.6  {'PASS' if ratio <= 0.6 else 'FAIL'}" if jobs == 2 else ""
            print(f"  --jobs {jobs} / --jobs 1: {ratio:.3f}{verdict}")


if __name__ == "__main__":
    main()
