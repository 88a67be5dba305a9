"""Time and peak memory of `xla_cost.analyze` on the zoo (the analyzer itself).

Each case runs in a fresh process so that peak resident memory (ru_maxrss) is the
case's own. Usage:

    python benchmarks/bench_analyze.py                 # the default cases
    python benchmarks/bench_analyze.py linear_net:64   # name:batch[:key=value,...]

Target (issue 2): LinearNet (617M parameters, 2.5 GB of float32 weights)
analysed in under 2 s and 0.5 GB peak on a CPU, without allocating its weights.
"""

from __future__ import annotations

import json
import subprocess
import sys

DEFAULT_CASES = ["linear_net:64", "one_net:64", "conv_net:64", "deeper_conv_net:8:depth=100"]

_CHILD = r"""
import json, os, resource, sys, time
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp
import xla_cost
from xla_cost.zoo import build_model, example_inputs
name, batch, config = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
rss_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
model, inputs = build_model(name, **config), example_inputs(name, batch, **config)
t0 = time.perf_counter()
report = xla_cost.analyze(model, inputs, optimizer="sgd", name=name, config=config)
seconds = time.perf_counter() - t0
t1 = time.perf_counter()
xla_cost.analyze(model, inputs, optimizer="sgd", per_layer=True, name=name, config=config)
seconds_layers = time.perf_counter() - t1
# The issue's target names forward, grad and update: build the workload and
# compile those three alone (train_step, all three in one program, is extra).
from xla_cost.analysis import _compile
t2 = time.perf_counter()
workload, _ = xla_cost.build_workload(model, inputs, optimizer="sgd")
for phase in ("forward", "grad", "update"):
    _compile(workload, phase)
seconds_fgu = time.perf_counter() - t2
print(json.dumps({
    "model": name, "batch": batch, "config": config, "parameters": report.parameters,
    "seconds": seconds, "seconds_per_layer": seconds_layers, "seconds_fgu": seconds_fgu,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "rss_after_import_bytes": rss_import,
    "weights_bytes": 4 * report.parameters,
    "jax": jax.__version__, "backend": report.backend,
}))
"""


def parse(case: str) -> tuple[str, int, dict]:
    name, batch, *rest = case.split(":")
    config = {}
    for item in (rest[0].split(",") if rest else []):
        key, value = item.split("=")
        config[key] = int(value)
    return name, int(batch), config


def main(argv: list[str]) -> int:
    cases = argv or DEFAULT_CASES
    print(f"{'model':<28}{'batch':>6}{'params':>14}{'f+g+u s':>9}{'analyze s':>11}{'+layers s':>11}{'peak RSS MB':>13}{'weights MB':>12}")
    for case in cases:
        name, batch, config = parse(case)
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, name, str(batch), json.dumps(config)],
            capture_output=True, text=True, check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        label = name + ("(" + ",".join(f"{k}={v}" for k, v in config.items()) + ")" if config else "")
        print(
            f"{label:<28}{batch:>6}{r['parameters']:>14,}{r['seconds_fgu']:>9.2f}{r['seconds']:>11.2f}"
            f"{r['seconds_per_layer']:>11.2f}{r['peak_rss_bytes'] / 1e6:>13.0f}{r['weights_bytes'] / 1e6:>12.0f}"
        )
    print(
        f"jax {r['jax']}, backend {r['backend']}. 'f+g+u s': build + compile forward, grad, "
        "update; 'analyze s': analyze() (also train_step, jaxpr counts), the first call in "
        "the process; '+layers s': a second analyze(per_layer=True)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
