"""How long one `analyze()` of every zoo model takes: the data of reports/zoo.md.

Each zoo model at batch 1, SGD, float32, compiled (four programs and the jaxpr
counts, as `xla-cost analyze NAME` runs it), one after the other in this
process after a warm-up analysis (so that the first model does not pay JAX's
start-up), with the persistent compilation cache off and a fresh results
store: every program is compiled. The seconds are the analysis's own, as the
sweep records them. Writes
``reports/data/analysis_time_<device>_<date>.csv`` (model, batch_size,
optimizer, counter, seconds, device, cores, jax_version, date, and the load
average while it ran: the machine may be shared).

    python benchmarks/time_analysis.py            # every zoo model
    python benchmarks/time_analysis.py resnet50   # some
"""

from __future__ import annotations

import csv
import datetime
import os
import re
import sys
import tempfile
from pathlib import Path

os.environ["XLA_COST_NO_CACHE"] = "1"  # compile every program: the time a first analysis takes

import xla_cost  # noqa: E402
from xla_cost.compiled.xla import device_kind  # noqa: E402 - xla_cost loads its subpackages lazily
from xla_cost import zoo  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

FIELDS = ["model", "batch_size", "optimizer", "counter", "seconds", "device", "cores", "jax_version", "date",
          "load_average"]


def main(argv: list[str]) -> int:
    import jax

    models = argv or list(zoo.REGISTRY)
    today = datetime.date.today().isoformat()
    device = re.sub(r"[^a-z0-9]+", "-", device_kind().lower()).strip("-")
    path = ROOT / "reports" / "data" / f"analysis_time_{device}_{today}.csv"
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "results.sqlite"
        xla_cost.sweep(["one_net"], batch_sizes=[3], optimizers=["sgd"], store=store, jobs=0, progress=False)  # warm-up
        rows = []
        for model in models:  # one sweep each: the load average is read around each analysis
            before = os.getloadavg()[0]
            result = xla_cost.sweep([model], batch_sizes=[1], optimizers=["sgd"], store=store, jobs=0, progress=False)
            run = result.runs.iloc[0]
            if run["status"] != "ok":
                print(f"{model}: {run['status']}: {run['error']}", flush=True)
                continue
            load = (before + os.getloadavg()[0]) / 2
            rows.append({
                "model": model, "batch_size": 1, "optimizer": "sgd", "counter": "xla",
                "seconds": f"{run['seconds']:.2f}", "device": device_kind(),
                "cores": os.cpu_count(), "jax_version": jax.__version__, "date": today,
                "load_average": f"{load:.1f}",
            })
            print(f"{model}: {run['seconds']:.2f} s (load {load:.1f})", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} models -> {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
