"""Measured time of each phase on the default device, against the counts.

Timing is a separate, optional stage: it builds real random arrays with the
workload's shapes, compiles each phase (compilation is not timed), warms it up
and runs it until the median time is stable, always waiting for the result
(``block_until_ready``). It never changes a count; it attaches a `Timing` to
the report.

Utilisation needs the device's peak: the device registry
(`xla_cost.parallel.devices`) holds published dense peaks of common
accelerators (sources beside each entry), chosen by
``jax.devices()[0].device_kind``; on a CPU the peak is measured (a large float32
matmul and a large copy). Either can be overridden.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from xla_cost.step import phases as _phases
from xla_cost.compiled import xla
from xla_cost.parallel import devices as registry
from xla_cost.parallel.devices import DevicePeak
from xla_cost.present.units import number
from xla_cost.step.trees import tree_bytes
from xla_cost.step.workload import Workload

__all__ = [
    "PhaseTiming",
    "Timing",
    "device_peak",
    "measure_cpu_peak",
    "time_workload",
    "TimingOptions",
    "TIMED_PHASES",
]

TIMED_PHASES: tuple[str, ...] = _phases.PROGRAMS
"""The programs that are run (every phase with a program, `xla_cost.step.phases`);
a phase without one (``backward``) is derived by its formula."""


@functools.cache
def measure_cpu_peak(size: int = 1024, copy_bytes: int = 1 << 27) -> DevicePeak:
    """Measures this CPU's float32 matmul FLOP/s and copy bandwidth with XLA.

    The best of several runs of a ``size``-cubed matmul (2*size^3 FLOP) and of
    ``y = x + 1`` over ``copy_bytes`` of float32 (read and written: 2x bytes).
    """
    key = jax.random.key(0)
    a = jax.random.normal(key, (size, size), jnp.float32)
    matmul = jax.jit(lambda x: x @ x)
    n = copy_bytes // 4
    x = jnp.ones((n,), jnp.float32)
    copy = jax.jit(lambda v: v + 1.0)

    def best(fn: Callable[[], Any], repeats: int = 5) -> float:
        fn().block_until_ready()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn().block_until_ready()
            times.append(time.perf_counter() - start)
        return min(times)

    flops = 2 * size**3 / best(lambda: matmul(a))
    bandwidth = 2 * n * 4 / best(lambda: copy(x))
    return DevicePeak(
        f"cpu ({os.cpu_count()} cores, measured)",
        {"float32": flops, "bfloat16": flops, "float16": flops},
        bandwidth,
        f"measured: {size}^3 float32 matmul and a {copy_bytes >> 20} MiB copy, best of 5",
    )


def device_peak(
    kind: str | None = None,
    *,
    peak_tflops: float | None = None,
    peak_bandwidth: float | None = None,
) -> DevicePeak:
    """The peak of device ``kind`` (default: the default device), overrides applied.

    Args:
      kind: a ``device_kind`` string; None for ``jax.devices()[0]``.
      peak_tflops: replaces the FLOP/s peak of every dtype (in TFLOP/s).
      peak_bandwidth: replaces the bandwidth (bytes/s).

    Raises:
      ValueError: an unknown accelerator and no ``peak_tflops``/``peak_bandwidth``.
    """
    on_default_cpu = kind is None and jax.default_backend() == "cpu"
    kind = kind or xla.device_kind()
    found = registry.match_kind(kind)
    peak = found.peak if found is not None else None
    if peak is None:
        if on_default_cpu or kind.lower() == "cpu":
            peak = measure_cpu_peak()
        elif peak_tflops is None or peak_bandwidth is None:
            known = ", ".join(registry.DEVICES[name].title for name in registry.names("peak"))
            raise ValueError(
                f"Expected a device with a known peak ({known}), "
                f"got {kind!r} instead. Pass --peak-tflops and --peak-bandwidth."
            )
        else:
            peak = DevicePeak(kind, {}, 0.0, "given")
    if peak_tflops is not None:
        peak = dataclasses.replace(
            peak, flops_per_s={d: peak_tflops * 1e12 for d in ("float32", "bfloat16", "float16")},
            source=peak.source + "; FLOP/s peak given",
        )
    if peak_bandwidth is not None:
        peak = dataclasses.replace(peak, bandwidth=peak_bandwidth, source=peak.source + "; bandwidth given")
    return peak


@dataclasses.dataclass(frozen=True)
class PhaseTiming:
    """Measured time of one phase and what it means against the counts.

    Attributes:
      median_s, min_s, iqr_s: seconds per run (interquartile range q75 - q25).
        For ``backward``, derived as grad - forward, only the median (the
        others are None).
      repeats: timed runs after the warm-up.
      flops_per_s: the phase's FLOP over its median time.
      mfu: the phase's model FLOP (without remat's recomputation) per second
        over the device's peak (model FLOP utilisation).
      hfu: the same with the hardware FLOP (recomputation included): hardware
        FLOP utilisation; equal to ``mfu`` without remat.
      roofline_s: ``max(flops / peak, bytes / bandwidth)``, the time the counts
        predict on a perfect device; None without bytes.
      bound: ``compute`` or ``memory``, whichever term of the roofline is larger.
    """

    median_s: float
    min_s: float | None
    iqr_s: float | None
    repeats: int
    flops_per_s: float | None = None
    mfu: float | None = None
    roofline_s: float | None = None
    hfu: float | None = None
    bound: str | None = None


@dataclasses.dataclass(frozen=True)
class Timing:
    """Measured phases of one training step on one device.

    Attributes:
      device: the device kind.
      peak: the `DevicePeak` used for utilisation and the roofline.
      dtype: the computation dtype the peak was chosen for.
      phases: `PhaseTiming` per phase (``backward`` = grad - forward).
      fractions: forward, backward and update shares of forward + backward +
        update (they sum to 1); seed 000 quotes 23% / 74% / 3% (PyTorch DDP
        paper, V100).
      backward_to_forward: measured backward time over forward time.
      skipped: why timing did not run (too big for the device, ...), else None.
    """

    device: str
    peak: DevicePeak | None
    dtype: str
    phases: Mapping[str, PhaseTiming]
    fractions: Mapping[str, float]
    backward_to_forward: float | None
    skipped: str | None = None

    def to_dict(self, flops_ratio: float | None = None) -> dict[str, Any]:
        """The measurement as JSON values; ``flops_ratio``: the counted
        backward/forward FLOP, beside the measured time ratio."""
        return {
            "device": self.device,
            "dtype": self.dtype,
            "peak": None if self.peak is None else {
                "name": self.peak.name,
                "flops_per_s": self.peak.for_dtype(self.dtype),
                "bandwidth": self.peak.bandwidth,
                "source": self.peak.source,
            },
            "phases": {p: dataclasses.asdict(t) for p, t in self.phases.items()},
            "fractions": dict(self.fractions),
            "backward_to_forward_time": self.backward_to_forward,
            "backward_to_forward_flops": flops_ratio,
            "skipped": self.skipped,
        }

    def title(self) -> str:
        """The line above the timing table: device, dtype and the peak used."""
        peak = self.peak
        where = "" if peak is None else (
            f"; peak {peak.for_dtype(self.dtype) / 1e12:,.3f} TFLOP/s, "
            f"{peak.bandwidth / 1e9:,.0f} GB/s ({peak.name})"
        )
        return f"timing on {self.device} ({self.dtype}{where})"

    def frame(self) -> pd.DataFrame:
        """One row per timed phase, formatted: times, share, FLOP/s, MFU (HFU), roofline."""
        rows = []
        for phase in _phases.NAMES:
            t = self.phases.get(phase)
            if t is None:
                continue
            rows.append(
                {
                    "phase": phase,
                    "median ms": f"{t.median_s * 1e3:,.3f}",
                    "min ms": _phases.phase(phase).formula_text if t.min_s is None else f"{t.min_s * 1e3:,.3f}",
                    "IQR ms": "" if t.iqr_s is None else f"{t.iqr_s * 1e3:,.3f}",
                    "runs": t.repeats,
                    "share": f"{self.fractions[phase]:.1%}" if phase in self.fractions else "",
                    "TFLOP/s": number(t.flops_per_s, 1e12),
                    "MFU": "unknown" if t.mfu is None else f"{t.mfu:.1%}",
                    **({"HFU": "unknown" if t.hfu is None else f"{t.hfu:.1%}"} if any(
                        x.hfu != x.mfu for x in self.phases.values()) else {}),
                    "roofline ms": number(None if t.roofline_s is None else t.roofline_s * 1e3, 1.0),
                    "bound": t.bound or "",
                }
            )
        return pd.DataFrame(rows).set_index("phase")


def _random_like(trees: Mapping[str, Any], key: jax.Array) -> dict[str, Any]:
    """Real arrays with the shapes of each named tree: small normals, integers in {0, 1}.

    Trees that are the same object (``grads`` and ``params``) share one set of
    arrays, so that a phase's memory is not counted twice.
    """
    made: dict[int, Any] = {}
    out: dict[str, Any] = {}
    for index, (name, tree) in enumerate(trees.items()):
        if id(tree) not in made:
            made[id(tree)] = _random_tree(tree, jax.random.fold_in(key, index))
        out[name] = made[id(tree)]
    return out


def _random_tree(tree: Any, key: jax.Array) -> Any:
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, max(len(leaves), 1))
    out = []
    for leaf, k in zip(leaves, keys):
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):  # a typed random key
            out.append(jax.random.split(k, int(np.prod(leaf.shape))).reshape(leaf.shape))
            continue
        dtype = jnp.dtype(leaf.dtype)
        if jnp.issubdtype(dtype, jnp.floating):
            out.append((0.02 * jax.random.normal(k, leaf.shape, jnp.float32)).astype(dtype))
        elif jnp.issubdtype(dtype, jnp.integer):
            # valid as a token id, a class label and a step count for any model
            out.append(jax.random.randint(k, leaf.shape, 0, 2, dtype))
        elif dtype == jnp.bool_:
            out.append(jnp.zeros(leaf.shape, jnp.bool_))
        else:
            out.append(jnp.zeros(leaf.shape, dtype))
    return jax.tree.unflatten(treedef, out)


def _measure(
    run: Callable[[], Any], *, warmup: int, min_repeats: int, max_repeats: int,
    budget_s: float, tolerance: float,
) -> PhaseTiming:
    for _ in range(warmup):
        jax.block_until_ready(run())
    times: list[float] = []
    previous: float | None = None
    started = time.perf_counter()
    while len(times) < max_repeats:
        for _ in range(min_repeats if not times else max(len(times) // 2, 1)):
            start = time.perf_counter()
            jax.block_until_ready(run())
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        stable = previous is not None and abs(median - previous) <= tolerance * previous
        if stable or time.perf_counter() - started > budget_s:
            break
        previous = median
    q25, q75 = np.percentile(times, [25, 75])
    return PhaseTiming(
        median_s=statistics.median(times), min_s=min(times), iqr_s=float(q75 - q25),
        repeats=len(times),
    )


def _needed_bytes(
    workload: Workload, compiled: Mapping[str, tuple[int | None, int | None]] | None = None
) -> tuple[int, str]:
    """Bytes the timing run needs at its peak, and how that was found.

    One set of arrays (parameters, optimizer state, model state, batch, targets)
    lives through every phase; each phase adds its outputs and its temporaries.
    With the compiled programs' ``memory_analysis`` (``compiled``: phase ->
    (output bytes, temp bytes)) that is exact up to fragmentation; without it,
    3x the arrays (the arrays, the gradients and the updated copies).
    """
    unique = {id(tree): tree for tree in workload.trees().values()}
    arrays = tree_bytes(list(unique.values()))
    known = [
        out + temp for out, temp in (compiled or {}).values() if out is not None and temp is not None
    ]
    if known:
        return arrays + max(known), "compiled memory analysis: arrays + outputs + temporaries"
    return 3 * arrays, "parameters, optimizer state and their updates"


def _available_bytes() -> int | None:
    limit = xla.device_memory_bytes()
    if limit is not None:
        return limit
    try:  # the CPU: physical memory
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


@dataclasses.dataclass(frozen=True)
class TimingOptions:
    """How the phases are run and timed.

    Attributes:
      phases: which programs to run (default every program, `TIMED_PHASES`).
      warmup: untimed runs first.
      min_repeats, max_repeats, budget_s, tolerance: timed runs come in rounds;
        timing stops when the median moves by less than ``tolerance``
        (relative) between rounds, after ``max_repeats`` runs, or after
        ``budget_s`` seconds.
      seed: for the random arrays.
    """

    phases: Sequence[str] = TIMED_PHASES
    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 200
    budget_s: float = 10.0
    tolerance: float = 0.02
    seed: int = 0


def time_workload(
    workload: Workload,
    costs: Mapping[str, Any],
    *,
    dtype: str,
    peak: DevicePeak | None = None,
    executables: Mapping[str, Any] | None = None,
    options: TimingOptions = TimingOptions(),
) -> Timing:
    """Runs each phase of ``workload`` on real random arrays and times it.

    Args:
      workload: from `xla_cost.build_workload`.
      costs: the counts per phase (`xla_cost.PhaseCosts`): FLOP for FLOP/s,
        model and hardware FLOP for MFU and HFU, bytes for the roofline, and
        the compiled programs' output and temporary bytes, by which a step
        that cannot fit is skipped before anything is allocated.
      dtype: the computation dtype (chooses the peak).
      peak: the device's peak; default `device_peak()`.
      executables: already compiled phases (from the counts), reused so that
        nothing is compiled twice; the others are compiled here.
      options: which phases, how many runs (`TimingOptions`).

    Returns:
      A `Timing`; if the step does not fit in the device's memory, or running
      it fails for lack of memory, one with ``skipped`` saying why and no phases.
    """
    compiled_memory = {p: (c.memory.output_bytes, c.memory.temp_bytes) for p, c in costs.items()
                       if p in (executables or {})}
    kind = xla.device_kind()
    (needed, basis), available = _needed_bytes(workload, compiled_memory), _available_bytes()
    if available is not None and needed > available:
        return Timing(
            kind, None, dtype, {}, {}, None,
            skipped=(
                f"the step needs at least {needed / 1e9:.1f} GB ({basis}); the device has "
                f"{available / 1e9:.1f} GB"
            ),
        )
    peak = peak if peak is not None else device_peak()
    key = jax.random.key(options.seed)
    try:
        arrays = _random_like(workload.trees(), key)
        results: dict[str, PhaseTiming] = {}
        for phase in options.phases:
            executable = (executables or {}).get(phase)
            if executable is None:
                with workload.tracing():
                    executable = xla.compile_executable(
                        workload.phase_fn(phase), workload.phase_args(phase)
                    )
            args = tuple(arrays[name] for name in _phases.phase(phase).arguments)
            results[phase] = _measure(
                lambda executable=executable, args=args: executable(*args),
                warmup=options.warmup, min_repeats=options.min_repeats, max_repeats=options.max_repeats,
                budget_s=options.budget_s, tolerance=options.tolerance,
            )
    except Exception as exc:  # noqa: BLE001 - out of memory is the expected case
        text = str(exc)
        if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower() or isinstance(exc, MemoryError):
            first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
            return Timing(kind, peak, dtype, {}, {}, None, skipped=f"out of memory: {first}")
        raise
    for derived in _phases.DECLARED:
        if derived.name in results or not set(derived.formula) <= set(results):
            continue
        parts = {name: results[name] for name in derived.formula}
        median = _phases.combine(derived.formula, {n: t.median_s for n, t in parts.items()})
        results[derived.name] = PhaseTiming(
            median_s=max(median, 0.0), min_s=None, iqr_s=None,
            repeats=min(t.repeats for t in parts.values()),
        )
    peak_flops = peak.for_dtype(dtype)
    for phase, t in list(results.items()):
        count = costs[phase].flops if phase in costs else None
        moved = costs[phase].bytes_accessed if phase in costs else None
        rate = count / t.median_s if count is not None and t.median_s > 0 else None
        roof = bound = None
        if count is not None and moved is not None and peak_flops > 0 and peak.bandwidth > 0:
            compute, memory = count / peak_flops, moved / peak.bandwidth
            roof, bound = max(compute, memory), "compute" if compute >= memory else "memory"
        def utilisation(n: int | None) -> float | None:
            return None if n is None or t.median_s <= 0 or peak_flops <= 0 else n / t.median_s / peak_flops

        phase_costs = costs.get(phase)
        results[phase] = dataclasses.replace(
            t, flops_per_s=rate,
            mfu=utilisation(phase_costs.model_flops if phase_costs is not None else None),
            hfu=utilisation(phase_costs.hardware_flops if phase_costs is not None else None),
            roofline_s=roof, bound=bound,
        )
    fractions: dict[str, float] = {}
    ratio = None
    if set(_phases.SPLIT) <= set(results):
        parts = {p: results[p].median_s for p in _phases.SPLIT}
        total = sum(parts.values())
        fractions = {p: v / total for p, v in parts.items()} if total > 0 else {}
        if parts["forward"] > 0:
            ratio = parts["backward"] / parts["forward"]
    return Timing(kind, peak, dtype, results, fractions, ratio)
