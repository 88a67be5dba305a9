"""How long `xla-cost report all` takes, cold and warm: the run time index.md states.

Runs ``python -m xla_cost report all`` twice in fresh processes, into a
temporary directory: first with an empty results store and an empty
compilation cache (a fresh clone on a fresh machine: every analysis runs),
then again with the same store (every analysis is read back). Checks that the
two runs wrote byte-identical markdown and says whether it equals the
committed pages under reports/. Writes
``reports/data/report_time_<device>_<date>.csv`` (store, seconds, command,
device, cores, jax_version, date, load average while it ran: the machine may
be shared); regenerate the pages afterwards so that index.md states it.

    python benchmarks/time_report.py [--jobs N]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FIELDS = ["store", "seconds", "command", "device", "cores", "jax_version", "date", "load_average"]


def _run(out: Path, store: Path, cache: Path, jobs: int | None) -> tuple[float, float]:
    command = [sys.executable, "-m", "xla_cost", "report", "all", "--out", str(out), "--store", str(store),
               "--quiet"] + ([] if jobs is None else ["--jobs", str(jobs)])
    env = {**os.environ, "XLA_COST_CACHE_DIR": str(cache)}
    env.pop("XLA_COST_NO_CACHE", None)
    before = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    return seconds, (before + os.getloadavg()[0]) / 2


def _markdown(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.md"))}


def main(argv: list[str]) -> int:
    import jax

    import xla_cost.compiled.xla

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core)")
    args = parser.parse_args(argv)
    today = datetime.date.today().isoformat()
    device = xla_cost.compiled.xla.device_kind()
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        store, cache = tmp_path / "results.sqlite", tmp_path / "jax-cache"
        common = {"command": "xla-cost report all --out reports/", "device": device, "cores": os.cpu_count(),
                  "jax_version": jax.__version__, "date": today}
        for label, out in (("an empty store and compilation cache (cold)", tmp_path / "cold"),
                           ("every analysis in the store (warm)", tmp_path / "warm")):
            seconds, load = _run(out, store, cache, args.jobs)
            rows.append({**common, "store": label, "seconds": f"{seconds:.1f}", "load_average": f"{load:.1f}"})
            print(f"{label}: {seconds:.1f} s (load {load:.1f})", flush=True)
        cold, warm = _markdown(tmp_path / "cold"), _markdown(tmp_path / "warm")
        print("cold and warm markdown identical:", cold == warm)
        committed = _markdown(ROOT / "reports")
        same = sorted(n for n in cold if committed.get(n) == cold[n])
        print(f"equal to the committed pages: {len(same)} of {len(cold)}"
              + ("" if len(same) == len(cold) else f" (differ: {', '.join(sorted(set(cold) - set(same)))})"))
    path = ROOT / "reports" / "data" / f"report_time_{slug}_{today}.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"-> {path.relative_to(ROOT)}")
    return 0 if cold == warm else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
