"""Measured per-kernel and per-step costs of the device here, apart from any work (issue 32).

The time model (`xla_cost.timemodel.kernel_time`) charges every kernel a
``launch`` and every step a ``host`` cost beside its work. Fitted on whole
steps, the two trade against each other where few cases pin them (the tiny
steps). This measures them directly, as a training loop meets them: each
program's outputs fed back as its next call's donated arguments, calls
dispatched back to back, one wait at the end of a block (the harness of
`xla_cost.analysis.timing.Stepper`):

* ``chain``: one argument, ``n`` elementwise kernels one after the other (an
  optimization barrier between each keeps XLA from fusing them): the slope
  over ``n`` is a kernel's cost with no work, its launch;
* ``arguments``: ``n`` small arrays in, ``n`` out, each incremented (XLA may
  fuse them into few kernels; the kernels are counted): what a step with ``n``
  arrays costs to dispatch.

Each row is the median over five blocks (each at least 20 ms) of seconds per
call, with the kernels of the compiled program (`xla_cost.compiled.kernels`),
the device, driver, CUDA, cuDNN, clocks (`time_zoo.gpu_environment`), jax's
version and the date::

    python benchmarks/dispatch_costs.py --out reports/data
"""

from __future__ import annotations

import argparse
import csv
import datetime
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from xla_cost.compiled import kernels, xla

sys.path.insert(0, str(Path(__file__).resolve().parent))
from time_zoo import gpu_environment  # noqa: E402 - the timing's GPU environment columns, one reader of them

CHAIN = (1, 16, 64, 256, 1024)
ARGUMENTS = (1, 16, 64, 256, 1024)
ELEMENTS = 256


def chain(n: int):
    """``n`` dependent elementwise kernels on one array."""
    def fn(x):
        for _ in range(n):
            x = jax.lax.optimization_barrier(x * 1.0001 + 1e-6)
        return x
    return fn, [jnp.zeros((ELEMENTS,), jnp.float32)]


def arguments(n: int):
    """``n`` small arrays in, each incremented, ``n`` out."""
    def fn(*xs):
        return tuple(x + 1.0 for x in xs)
    return fn, [jnp.zeros((ELEMENTS,), jnp.float32) + i for i in range(n)]


def seconds_per_call(fn, args: list, *, blocks: int = 5, block_s: float = 0.02) -> float:
    """Median seconds per call, calls back to back with the outputs fed back (donated)."""
    step = jax.jit(fn, donate_argnums=tuple(range(len(args))))
    state = list(args)

    def run(calls: int) -> float:
        nonlocal state
        start = time.perf_counter()
        out = None
        for _ in range(calls):
            out = step(*state)
            state = list(out) if isinstance(out, tuple) else [out]
        jax.block_until_ready(out)
        return (time.perf_counter() - start) / calls

    run(3)
    one = run(10)
    calls = max(10, int(block_s / max(one, 1e-7)))
    return statistics.median(run(calls) for _ in range(blocks))


def kernel_count(fn, args: list) -> int | None:
    text = jax.jit(fn).lower(*args).compile().as_text()
    return len(kernels.kernel_list(text)) if text else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "reports" / "data"))
    args = parser.parse_args(argv)
    device = xla.device_kind()
    name = "".join(c if c.isalnum() else "-" for c in device.lower()).strip("-")
    today = datetime.date.today().isoformat()
    path = Path(args.out) / f"dispatch_{name}_{today}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    environment = gpu_environment()
    fields = ["program", "n", "kernels", "seconds_per_call", "device", "backend", *environment, "jax_version", "date"]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for program, sizes in ((chain, CHAIN), (arguments, ARGUMENTS)):
            for n in sizes:
                fn, inputs = program(n)
                row = {"program": program.__name__, "n": n, "kernels": kernel_count(fn, inputs),
                       "seconds_per_call": f"{seconds_per_call(fn, inputs):.3e}", "device": device,
                       "backend": jax.default_backend(), **environment, "jax_version": jax.__version__, "date": today}
                writer.writerow(row)
                handle.flush()
                print(row, flush=True)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
