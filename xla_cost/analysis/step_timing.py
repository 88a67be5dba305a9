"""The measured time of a user's own training step (`xla_cost.analyze_step(timed=True)`).

The step runs as its own jit compiles it (its donation included), on arrays
made from the example arguments (the concrete ones as given, abstract ones as
zeros, random keys from key 0), each call on fresh copies of the donated
arguments and waited for; the median of the runs and its bootstrap interval
are reported beside the counted FLOP. The parts are not timed separately: a
user's step is one program, and `xla_cost.analyze`'s traced split needs the
model it builds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from xla_cost.analysis.report import PhaseCosts
from xla_cost.analysis.split import bootstrap
from xla_cost.analysis.timing import PhaseTiming, Timing, device_peak
from xla_cost.compiled import xla
from xla_cost.step.user_step import UserStep

__all__ = ["time_user_step", "STEP_RUNS", "STEP_BUDGET_S"]

STEP_RUNS = (5, 30)
"""The fewest and the most timed runs of a user's step (after two untimed ones)."""

STEP_BUDGET_S = 10.0
"""Seconds of timed runs after which no more are started (past the fewest)."""


def _concrete(tree: Any) -> Any:
    def make(leaf: Any) -> Any:
        if isinstance(leaf, jax.Array):
            return leaf
        dtype = getattr(leaf, "dtype", None)
        shape = tuple(getattr(leaf, "shape", ()))
        if dtype is None:
            return leaf
        if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            keys = jax.random.split(jax.random.key(0), int(np.prod(shape)) or 1)
            return keys[: int(np.prod(shape))].reshape(shape)
        return jnp.zeros(shape, dtype)

    return jax.tree.map(make, tree)


def time_user_step(prepared: UserStep, compiled: xla.CompiledPhase | None,
                   costs: Mapping[str, PhaseCosts]) -> Timing:
    """Runs the compiled step and times it (`Timing` with ``train_step`` only)."""
    device = xla.device_kind()
    dtype = next((str(leaf.dtype) for leaf, o in zip(jax.tree.leaves(prepared.args), prepared.owners)
                  if o is not None), "float32")
    try:
        peak = device_peak()
    except ValueError:
        peak = None
    if compiled is None or compiled.executable is None:
        return Timing(device, peak, dtype, {}, {}, None,
                      skipped="timing needs the compiled step (counter='xla')")
    try:
        args = _concrete(prepared.args)
        runs: list[float] = []

        def once() -> float:
            fresh = jax.tree.map(lambda a: a.copy() if isinstance(a, jax.Array) else a, args)
            jax.block_until_ready(fresh)
            start = time.perf_counter()
            jax.block_until_ready(compiled.executable(*fresh))
            return time.perf_counter() - start

        for _ in range(2):
            once()
        began = time.perf_counter()
        while len(runs) < STEP_RUNS[1] and (len(runs) < STEP_RUNS[0] or time.perf_counter() - began < STEP_BUDGET_S):
            runs.append(once())
    except Exception as exc:  # noqa: BLE001 - the counts must survive a failed run
        first = next((line for line in str(exc).strip().splitlines() if line.strip()), type(exc).__name__)
        return Timing(device, peak, dtype, {}, {}, None,
                      skipped=f"running the step failed: {type(exc).__name__}: {first}")
    median = statistics.median(runs)
    q25, q75 = np.percentile(runs, [25, 75])
    spread = bootstrap(runs)
    flops = costs["train_step"].flops
    per_second = flops / median if flops is not None and median > 0 else None
    rate = peak.for_dtype(dtype) if peak is not None else None
    step = PhaseTiming(
        median_s=median, min_s=min(runs), iqr_s=float(q75 - q25), repeats=len(runs), flops_per_s=per_second,
        mfu=per_second / rate if per_second is not None and rate else None, low_s=spread.low_s,
        high_s=spread.high_s, source="one program",
    )
    return Timing(
        device, peak, dtype, {"train_step": step}, {}, None,
        notes=("the step as its own jit compiles it, each run on fresh copies of its arguments (zeros where "
               "they were abstract) and waited for: dispatch included; its parts are not timed apart",),
    )
