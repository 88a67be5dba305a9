"""How long a target's compiler takes next to the CPU's (issue 31): ResNet-50's train step.

The step of `device_check.resnet_step` (ResNet-50, batch 32, bfloat16 images, float32 parameters, SGD with
momentum, one program) compiled for the CPU and for each target named, each
compile in a fresh Python process (nothing cached in memory), with JAX's
persistent compilation cache and the analyses cache off, ``--repeats`` times
interleaved; the clock runs around ``jax.jit(step).lower(*args).compile()``
alone (the model is built and its arguments made before it). Prints the
median seconds per target and its ratio to the CPU's, against the issue's
target of at most 2x. Run it on a quiet machine::

    python benchmarks/bench_target_compile.py                     # cpu, h100
    python benchmarks/bench_target_compile.py --targets h100,a100-80gb,tpu-v5e --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, time
sys.path.insert(0, {here!r})
import xla_cost  # first: the plugins start quietly
import jax
from device_check import resnet_step
from xla_cost.compiled import targets
from xla_cost.timemodel import devices

name = {name!r}
target = None if name == "cpu" else devices.target(name)
with targets.use(target):
    step, args = resnet_step(None if target is None else target.placement())
    lowered = jax.jit(step).lower(*args)
    start = time.perf_counter()
    lowered.compile()
    print(json.dumps({{"target": name, "seconds": time.perf_counter() - start}}))
"""


def measure(name: str) -> float:
    env = dict(os.environ, XLA_COST_NO_CACHE="1", JAX_ENABLE_COMPILATION_CACHE="false")
    out = subprocess.run([sys.executable, "-c", CHILD.format(here=str(HERE), name=name)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["seconds"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="h100", help="comma-separated compile targets (default h100)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    names = ["cpu", *[t for t in args.targets.split(",") if t]]
    times: dict[str, list[float]] = {n: [] for n in names}
    for repeat in range(args.repeats):
        for name in names:
            times[name].append(measure(name))
            print(f"repeat {repeat + 1}: {name} {times[name][-1]:.2f} s", file=sys.stderr, flush=True)
    cpu = statistics.median(times["cpu"])
    print(f"ResNet-50 train step (batch 32, bfloat16 images, float32 parameters, SGD momentum), compile only, median of {args.repeats}:")
    print("| target | seconds | / cpu | target <= 2x |")
    print("|---|---|---|---|")
    for name in names:
        median = statistics.median(times[name])
        ratio = median / cpu
        print(f"| {name} | {median:.2f} | {ratio:.2f} | {'-' if name == 'cpu' else ('yes' if ratio <= 2 else 'no')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
