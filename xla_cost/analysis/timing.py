"""Measured time of one training step on the default device, split by a trace, against the counts.

Timing is a separate, optional stage: it builds real random arrays with the
workload's shapes (the gradients apart from the parameters), compiles the
programs (compilation is not timed) and runs them. It never changes a count;
it attaches a `Timing` to the report.

1. The step as it runs: the train step as one program, the arguments it
   returns updated (parameters, optimizer state, model state) donated, each
   step's outputs fed to the next, N steps back to back and waited for once
   (a block), blocks repeated: the median step time and its 95% interval
   (bootstrap over the blocks, fixed seed).
2. The split: a profiler trace of a few more steps (`xla_cost.compiled.trace`)
   gives each HLO instruction's share of the step; `xla_cost.analysis.split`
   attributes it to forward, backward and update, and to the layers, the way
   the counts are attributed (and the idle time apart).
3. The cross-check: forward, grad and update each run as a program of their
   own, each run waited for; what grad + update take beyond the one program
   is the dispatch gap (`Timing.dispatch_gap_s`, and a note).

Utilisation needs the device's peak: the device registry
(`xla_cost.timemodel.devices`) holds published dense peaks of common
accelerators (sources beside each entry), chosen by
``jax.devices()[0].device_kind``; on a CPU the peak is measured (a large float32
matmul and a large copy). Either can be overridden.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from xla_cost.analysis.split import (
    IDLE, Attribution, Bootstrap, StepSplit, bootstrap, roofline as _roofline, split_step, traced_program,
)
from xla_cost.step import phases as _phases
from xla_cost.compiled import trace, xla
from xla_cost.timemodel import devices as registry
from xla_cost.timemodel.devices import DevicePeak
from xla_cost.present.units import number
from xla_cost.step.trees import tree_bytes
from xla_cost.step.workload import Workload
if TYPE_CHECKING:  # pandas (0.3 s to import) loads where a table is made, not with the analysis
    import pandas as pd

__all__ = [
    "PhaseTiming",
    "StepRun",
    "Timing",
    "device_peak",
    "measure_cpu_peak",
    "time_workload",
    "TimingOptions",
    "StepProgram",
    "Stepper",
    "run_blocks",
    "trace_split",
    "against_counts",
    "TIMED_PHASES",
    "STEP",
    "CROSS_CHECK",
]

TIMED_PHASES: tuple[str, ...] = _phases.PROGRAMS
"""The programs that can be run (every phase with a program, `xla_cost.step.phases`);
a phase without one (``backward``) is derived by its formula."""

STEP = "train_step"
"""The program that is timed as the step runs, and split."""

CROSS_CHECK: tuple[str, ...] = tuple(p for p in _phases.PROGRAMS if p != STEP)
"""The programs run on their own as a cross-check (forward, grad, update)."""


@functools.cache
def measure_cpu_peak(size: int = 1024, copy_bytes: int = 1 << 27) -> DevicePeak:
    """Measures this CPU's float32 matmul FLOP/s and copy bandwidth with XLA.

    The best of 20 runs (after 3) of a ``size``-cubed matmul (2*size^3 FLOP) and of
    ``x = x + 1`` over ``copy_bytes`` of float32 (read and written: 2x bytes),
    in place: the array is donated, as a training step donates its
    parameters, so that the copy writes memory it already holds. (A fresh
    128 MiB result each run measures the kernel zeroing new pages instead:
    11 to 17 GB/s on the 2-core CI machine, where the copy in place moves
    130 to 175.)
    """
    key = jax.random.key(0)
    a = jax.random.normal(key, (size, size), jnp.float32)
    matmul = jax.jit(lambda x: x @ x)
    n = copy_bytes // 4
    state = {"x": jnp.ones((n,), jnp.float32)}
    add_one = jax.jit(lambda v: v + 1.0, donate_argnums=0)

    def copy() -> jax.Array:
        state["x"] = add_one(state["x"])
        return state["x"]

    def best(fn: Callable[[], Any], repeats: int = 20) -> float:
        for _ in range(3):
            fn().block_until_ready()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn().block_until_ready()
            times.append(time.perf_counter() - start)
        return min(times)

    flops = 2 * size**3 / best(lambda: matmul(a))
    bandwidth = 2 * n * 4 / best(copy)
    return DevicePeak(
        f"cpu ({os.cpu_count()} cores, measured)",
        {"float32": flops, "bfloat16": flops, "float16": flops},
        bandwidth,
        f"measured: {size}^3 float32 matmul and a {copy_bytes >> 20} MiB copy in place, best of 20",
    )


def device_peak(
    kind: str | None = None,
    *,
    peak_tflops: float | None = None,
    peak_bandwidth: float | None = None,
) -> DevicePeak:
    """The peak of device ``kind`` (default: the default device), overrides applied; a CPU's is
    measured (`measure_cpu_peak`, about a second) unless both figures are given.

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
        cpu = on_default_cpu or kind.lower() == "cpu"
        if peak_tflops is not None and peak_bandwidth is not None:
            peak = DevicePeak(f"cpu ({os.cpu_count()} cores)" if cpu else kind, {}, 0.0, "given")
        elif cpu:
            peak = measure_cpu_peak()
        else:
            known = ", ".join(registry.DEVICES[name].title for name in registry.names("peak"))
            raise ValueError(f"Expected a device with a known peak ({known}), got {kind!r} instead. "
                             "Pass --peak-tflops and --peak-bandwidth.")
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
      median_s: seconds per step: for ``train_step`` the median of the
        one-program step over its blocks; for ``forward``, ``backward`` and
        ``update`` the step's median times the part's mean share of the
        traced steps (``grad``: forward + backward); for a separate program
        (`Timing.separate`) the median of its runs (``backward`` there:
        grad - forward).
      min_s, iqr_s: the fastest block or run and the interquartile range
        (q75 - q25) of the repeated blocks or runs; None for a part of the
        trace and for a derived phase.
      repeats: blocks, traced steps, or runs.
      low_s, high_s: the 95% interval of ``median_s`` (bootstrap, fixed
        seed); None for a derived phase.
      source: how it was measured (``one program``, ``trace``, ``separate
        program``, or a formula).
      flops_per_s, bytes_per_s: the phase's counted FLOP and bytes over
        ``median_s`` (bytes: XLA's, with the library calls' operands and
        results where XLA's analysis leaves them out).
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
    low_s: float | None = None
    high_s: float | None = None
    bytes_per_s: float | None = None
    source: str = ""


@dataclasses.dataclass(frozen=True)
class StepRun:
    """How the one-program step was run and timed.

    Attributes:
      steps_per_block: steps run back to back, each fed the last one's
        outputs, before waiting once (``block_until_ready``).
      block_s: seconds per step of each block, in the order run.
      donated: the arguments donated to the step (their buffers are reused
        for its results).
      warmup: untimed steps first.
    """

    steps_per_block: int
    block_s: tuple[float, ...]
    donated: tuple[str, ...]
    warmup: int

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "block_s": list(self.block_s), "donated": list(self.donated)}


@dataclasses.dataclass(frozen=True)
class Timing:
    """Measured time of one training step on one device.

    Attributes:
      device: the device kind.
      peak: the `DevicePeak` used for utilisation and the roofline.
      dtype: the computation dtype the peak was chosen for.
      phases: `PhaseTiming` per phase: ``train_step`` the one-program step,
        ``forward``, ``backward``, ``update`` (and ``grad``; a user's step
        also ``other``) its parts from the trace; where no trace could be
        had, the separate programs' (a user's step: none).
      fractions: forward, backward and update shares of forward + backward +
        update (they sum to 1); seed 000 quotes 23% / 74% / 3% (PyTorch DDP
        paper, V100).
      backward_to_forward: measured backward time over forward time.
      skipped: why timing did not run (too big for the device, ...), else None.
      step: how the one-program step ran (`StepRun`).
      split: the trace's split of the step (`xla_cost.analysis.split.StepSplit`):
        its parts, idle time and layers; None where no trace could be had.
      separate: the cross-check: each program run on its own and waited for
        (``forward``, ``grad``, ``update``; ``backward`` = grad - forward).
      dispatch_gap_s: the separate programs' grad + update over the one
        program's step: dispatch, synchronisation and the gradients handed
        from one program to the next, which one program hides.
      notes: what a reader of the figures should know.
      library_bytes: per phase, the library calls' operand and result bytes
        added to XLA's for the roofline (empty where there are none).
    """

    device: str
    peak: DevicePeak | None
    dtype: str
    phases: Mapping[str, PhaseTiming]
    fractions: Mapping[str, float]
    backward_to_forward: float | None
    skipped: str | None = None
    step: StepRun | None = None
    split: StepSplit | None = None
    separate: Mapping[str, PhaseTiming] = dataclasses.field(default_factory=dict)
    dispatch_gap_s: float | None = None
    notes: tuple[str, ...] = ()
    library_bytes: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def to_dict(self, flops_ratio: float | None = None, layers: Sequence[Any] | None = None) -> dict[str, Any]:
        """The measurement as JSON values; ``flops_ratio``: the counted
        backward/forward FLOP, beside the measured time ratio; ``layers``: the
        report's rows (`xla_cost.LayerCosts`), the measured ones grouped onto
        them (`layer_table`)."""
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
            "step": None if self.step is None else self.step.to_dict(),
            "split": None if self.split is None else self.split.to_dict(),
            "layers": self.layer_table(layers),
            "separate": {p: dataclasses.asdict(t) for p, t in self.separate.items()},
            "dispatch_gap_s": self.dispatch_gap_s,
            "library_bytes": dict(self.library_bytes),
            "notes": list(self.notes),
        }

    def title(self) -> str:
        """The line above the timing table: device, dtype and the peak used."""
        peak = self.peak
        where = "" if peak is None else (
            f"; peak {peak.for_dtype(self.dtype) / 1e12:,.3f} TFLOP/s, "
            f"{peak.bandwidth / 1e9:,.0f} GB/s ({peak.name})"
        )
        run = "" if self.step is None else (
            f"; the train step as one program, {self.step.steps_per_block} steps a block, "
            f"{len(self.step.block_s)} blocks"
        )
        return f"timing on {self.device} ({self.dtype}{where}{run}; 95% intervals)"

    def _rows(self) -> list[tuple[str, PhaseTiming]]:
        rows = list(self.phases.items())  # in report order (a user's step has ``other`` before train_step)
        if self.split is not None:
            idle = self.split.parts[IDLE]
            at = next((i for i, (p, _) in enumerate(rows) if p == STEP), len(rows))
            rows.insert(at, (IDLE, PhaseTiming(
                idle.seconds, None, None, self.split.traced_steps, low_s=idle.low_s, high_s=idle.high_s,
                source="trace")))
        return rows

    def frame(self) -> pd.DataFrame:
        """One row per phase (and the idle time), formatted: time and interval,
        share, FLOP/s, bytes/s, MFU (HFU), roofline, bound, source."""
        import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
        rows = []
        hfu = any(x.hfu != x.mfu for x in self.phases.values())
        for phase, t in self._rows():
            rows.append({
                "phase": phase,
                "median ms": f"{t.median_s * 1e3:,.3f}",
                "95% interval ms": _interval(t),
                "share": f"{self.fractions[phase]:.1%}" if phase in self.fractions else "",
                "TFLOP/s": number(t.flops_per_s, 1e12),
                "GB/s": number(t.bytes_per_s, 1e9, 1),
                "MFU": "" if phase == IDLE else ("unknown" if t.mfu is None else f"{t.mfu:.1%}"),
                **({"HFU": "unknown" if t.hfu is None else f"{t.hfu:.1%}"} if hfu else {}),
                "roofline ms": number(None if t.roofline_s is None else t.roofline_s * 1e3, 1.0),
                "bound": t.bound or "",
                "source": t.source,
            })
        return pd.DataFrame(rows).set_index("phase")

    def layer_table(self, layers: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """The measured rows with the counts beside them, as raw numbers.

        Each row of the trace's split (`xla_cost.analysis.split.StepSplit.layers`),
        grouped onto ``layers`` (the report's rows, `xla_cost.LayerCosts`;
        None: the modules as traced): seconds per pass and in total with its
        interval, its share of the step, the counted FLOP, FLOP/s, the bytes
        its instructions move and bytes/s, the roofline and its bound. Empty
        without a split.
        """
        if self.split is None:
            return []
        peak_flops = self.peak.for_dtype(self.dtype) if self.peak is not None else 0.0
        return self.split.table(layers, peak_flops, self.peak.bandwidth if self.peak is not None else 0.0)


def _interval(t: PhaseTiming) -> str:
    if t.low_s is None or t.high_s is None:
        return ""
    return f"{t.low_s * 1e3:,.3f} – {t.high_s * 1e3:,.3f}"


def _random_like(trees: Mapping[str, Any], key: jax.Array) -> dict[str, Any]:
    """Real arrays with the shapes of each named tree: small normals, integers in {0, 1}.

    Each name gets arrays of its own, even where two names share a tree
    (``grads`` and ``params``): an update that reads its gradients and its
    parameters from one buffer would read half the memory it reads in training.
    """
    return {name: _random_tree(tree, jax.random.fold_in(key, index)) for index, (name, tree) in enumerate(trees.items())}


def _random_tree(tree: Any, key: jax.Array) -> Any:
    """Drawn on the host (numpy) and copied over: jax's own random functions compile a
    program for every new shape, seconds for a model's worth of them."""
    leaves, treedef = jax.tree.flatten(tree)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    keys = jax.random.split(key, max(len(leaves), 1)) if any(
        jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key) for leaf in leaves) else None
    out = []
    for index, leaf in enumerate(leaves):
        shape = tuple(leaf.shape)
        if keys is not None and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):  # a typed random key
            out.append(jax.random.split(keys[index], int(np.prod(shape))).reshape(shape))
            continue
        dtype = jnp.dtype(leaf.dtype)
        if jnp.issubdtype(dtype, jnp.floating):
            host = (0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(dtype)
        elif jnp.issubdtype(dtype, jnp.integer):
            # valid as a token id, a class label and a step count for any model
            host = rng.integers(0, 2, shape).astype(dtype)
        else:  # booleans (False) and anything else: zeros
            host = np.zeros(shape, dtype)
        out.append(jnp.asarray(host))
    return jax.tree.unflatten(treedef, out)


def _measure(
    run: Callable[[], Any], *, warmup: int, min_repeats: int, max_repeats: int,
    budget_s: float, tolerance: float, how: Bootstrap = Bootstrap(),
) -> PhaseTiming:
    """Times ``run`` (a separate program, waited for each time) in rounds until its median settles."""
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
    return _summary(times, how, "separate program")


def _summary(times: Sequence[float], how: Bootstrap, source: str) -> PhaseTiming:
    """The median of ``times``, its interval, the minimum and the IQR."""
    q25, q75 = np.percentile(times, [25, 75])
    spread = bootstrap(times, how)
    return PhaseTiming(
        median_s=statistics.median(times), min_s=min(times), iqr_s=float(q75 - q25), repeats=len(times),
        low_s=spread.low_s, high_s=spread.high_s, source=source,
    )


def _needed_bytes(
    workload: Workload, compiled: Mapping[str, tuple[int | None, int | None]] | None = None
) -> tuple[int, str]:
    """Bytes the timing run needs at its peak, and how that was found.

    One set of arrays (parameters, gradients, optimizer state, model state,
    batch, targets) lives through every program; each adds its outputs and
    its temporaries. With the compiled programs' ``memory_analysis``
    (``compiled``: phase -> (output bytes, temp bytes)) that is exact up to
    fragmentation; without it, 3x the arrays (the arrays, the gradients and
    the updated copies).
    """
    arrays = tree_bytes(list(workload.trees().values()))
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
    """How the step and the programs are run and timed.

    Attributes:
      phases: the programs run on their own as a cross-check (default
        `CROSS_CHECK`: forward, grad, update); empty: none.
      warmup: untimed runs (steps) first.
      min_repeats, max_repeats, budget_s, tolerance: a separate program's
        timed runs come in rounds; timing stops when the median moves by less
        than ``tolerance`` (relative) between rounds, after ``max_repeats``
        runs, or after ``budget_s`` seconds. ``budget_s`` also bounds the
        one-program step's blocks once ``min_blocks`` are done.
      block_s: a block of steps lasts at least this long (its steps, at
        most ``max_steps_per_block``, chosen from one step's time).
      min_blocks, max_blocks: how many blocks of the one-program step.
      trace_s: the profiler traces about this long of steps, at least
        ``min_traced`` (and one more, which closes the last one's period);
        0 traces nothing (no split).
      seed: for the random arrays; ``bootstrap`` for the intervals.
    """

    phases: Sequence[str] = CROSS_CHECK
    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 200
    budget_s: float = 10.0
    tolerance: float = 0.02
    block_s: float = 0.1
    max_steps_per_block: int = 1000
    min_blocks: int = 5
    max_blocks: int = 30
    trace_s: float = 0.5
    min_traced: int = 3
    max_traced: int = 50
    seed: int = 0
    bootstrap: Bootstrap = Bootstrap()


@dataclasses.dataclass(frozen=True)
class StepProgram:
    """What the one-program step needs besides the arrays: how its rows are
    attributed (`xla_cost.analysis.split.Attribution`; None: by the workload,
    its root name the model's) and the library calls' bytes per phase that
    XLA's analysis leaves out (`xla_cost.compiled.xla.CompiledPhase.library_bytes`)."""

    attribution: Attribution | None = None
    library_bytes: Mapping[str, int] = dataclasses.field(default_factory=dict)


def time_workload(
    workload: Workload,
    costs: Mapping[str, Any],
    *,
    dtype: str,
    peak: DevicePeak | None = None,
    executables: Mapping[str, Any] | None = None,
    options: TimingOptions = TimingOptions(),
    program: StepProgram = StepProgram(),
) -> Timing:
    """Runs the train step of ``workload`` on real random arrays, times it and splits it.

    Args:
      workload: from `xla_cost.build_workload`.
      costs: the counts per phase (`xla_cost.PhaseCosts`): FLOP for FLOP/s,
        model and hardware FLOP for MFU and HFU, bytes for the roofline, and
        the compiled programs' output and temporary bytes, by which a step
        that cannot fit is skipped before anything is allocated.
      dtype: the computation dtype (chooses the peak).
      peak: the device's peak; default `device_peak()`.
      executables: already compiled programs (from the counts), reused for
        the cross-check so that nothing is compiled twice; the others are
        compiled here (the step always, with its donations).
      options: how many steps, blocks and runs (`TimingOptions`).
      program: how the step's instructions are attributed, and the library
        calls' bytes (`StepProgram`).

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
    notes: list[str] = []
    try:
        arrays = _random_like(workload.trees(), jax.random.key(options.seed))
        separate = _cross_check(workload, arrays, executables or {}, options)
        run, text = _step_run(workload, arrays, options)
        split = trace_split(run, text, program.attribution or Attribution.of_workload(workload), options, notes)
    except Exception as exc:  # noqa: BLE001 - out of memory is the expected case
        message = str(exc)
        if "RESOURCE_EXHAUSTED" in message or "out of memory" in message.lower() or isinstance(exc, MemoryError):
            first = message.strip().splitlines()[0] if message.strip() else type(exc).__name__
            return Timing(kind, peak, dtype, {}, {}, None, skipped=f"out of memory: {first}")
        raise
    step = run.record
    results = _phases_of(step, split, separate, options.bootstrap)
    gap = None
    if step is not None and STEP in separate:
        gap = separate[STEP].median_s - results[STEP].median_s
        notes.append(
            f"cross-check: {separate[STEP].source or STEP} run as separate programs, each waited for, take "
            f"{(gap + results[STEP].median_s) * 1e3:,.3f} ms against the one-program step's "
            f"{results[STEP].median_s * 1e3:,.3f} ms: a dispatch gap of {gap * 1e3:+,.3f} ms "
            f"({gap / results[STEP].median_s:+.1%}): the launches, waits and gradients handed from one "
            "program to the next that one program hides, and what XLA compiles differently in one program "
            "(below 0: the one program is the slower)"
        )
    library = {p: n for p, n in _library_bytes(program.library_bytes).items() if n}
    if library:
        notes.append(
            "roofline bytes: XLA's bytes_accessed plus the operands and results of the library calls "
            "(cuBLAS, cuDNN custom calls) its analysis leaves out: "
            + ", ".join(f"{p} {n / 1e6:,.1f} MB" for p, n in library.items())
        )
    results = {p: against_counts(t, costs.get(p), library.get(p, 0), peak, dtype) for p, t in results.items()}
    separate = {p: against_counts(t, costs.get(p), library.get(p, 0), peak, dtype) for p, t in separate.items()}
    fractions: dict[str, float] = {}
    ratio = None
    if set(_phases.SPLIT) <= set(results):
        shares = {p: results[p].median_s for p in _phases.SPLIT}
        total = sum(shares.values())
        fractions = {p: v / total for p, v in shares.items()} if total > 0 else {}
        if shares["forward"] > 0:
            ratio = shares["backward"] / shares["forward"]
    return Timing(
        kind, peak, dtype, results, fractions, ratio, step=step, split=split, separate=separate,
        dispatch_gap_s=gap, notes=tuple(notes), library_bytes=library,
    )


class Stepper:
    """The one-program step on real arrays: each step is fed the last one's outputs
    (``fed``: argument position -> index of the result that replaces it)."""

    def __init__(self, executable: Any, args: list[Any], fed: Mapping[int, int]) -> None:
        self.executable, self.args, self.fed = executable, args, dict(fed)
        self.record: StepRun | None = None

    def run(self, steps: int) -> None:
        """``steps`` steps back to back, then one wait for the last."""
        out = None
        for _ in range(steps):
            out = self.executable(*self.args)
            for position, result in self.fed.items():
                self.args[position] = out[result]
        jax.block_until_ready(out)

    def timed(self, steps: int) -> float:
        start = time.perf_counter()
        self.run(steps)
        return (time.perf_counter() - start) / steps


def _step_run(workload: Workload, arrays: Mapping[str, Any], options: TimingOptions) -> tuple[Stepper, str]:
    """Compiles the train step with its fed-back arguments donated and times it in blocks."""
    step = _phases.phase(STEP)
    fed = {i: step.results.index(name) for i, name in enumerate(step.arguments) if name in step.results}
    with workload.tracing(), warnings.catch_warnings():
        # an argument whose buffer no result can take (a dtype or a shape that no result has) stays
        warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
        traced = jax.jit(workload.phase_fn(STEP), donate_argnums=tuple(sorted(fed))).trace(*workload.phase_args(STEP))
        executable = xla.compile_executable(traced)
    stepper = Stepper(executable, [arrays[name] for name in step.arguments], fed)
    run_blocks(stepper, options, tuple(step.arguments[i] for i in sorted(fed)))
    return stepper, executable.as_text() or ""


def run_blocks(stepper: Stepper, options: TimingOptions, donated: tuple[str, ...]) -> StepRun:
    """Times ``stepper`` in blocks of steps (`TimingOptions`), after ``options.warmup``
    untimed ones; the `StepRun` is also kept as ``stepper.record``."""
    if options.warmup > 0:
        stepper.run(options.warmup)
    one = stepper.timed(1)
    per_block = max(1, min(options.max_steps_per_block, math.ceil(options.block_s / one) if one > 0 else 1))
    blocks: list[float] = []
    started = time.perf_counter()
    while len(blocks) < max(options.max_blocks, options.min_blocks):
        blocks.append(stepper.timed(per_block))
        if len(blocks) >= options.min_blocks and time.perf_counter() - started > options.budget_s:
            break
    stepper.record = StepRun(per_block, tuple(blocks), donated, options.warmup)
    return stepper.record


_BY_OP_NAME = "by its op_name as the counts are (jvp forward, transpose backward, the rest the update)"
_SEPARATE = "forward, backward and update are the separate programs'"


def trace_split(
    stepper: Stepper, text: str, attribution: Attribution, options: TimingOptions, notes: list[str], *,
    how: str = _BY_OP_NAME, instead: str = _SEPARATE,
) -> StepSplit | None:
    """The trace of a few more steps of ``stepper`` (compiled HLO ``text``), split by
    ``attribution`` (`xla_cost.analysis.split.split_step`); None, with a note saying why and
    what stands ``instead``, where it cannot be had. ``how``: how instructions are attributed
    (for the note)."""
    if options.trace_s <= 0 or stepper.record is None:
        return None
    step_s = statistics.median(stepper.record.block_s)
    count = max(options.min_traced, min(options.max_traced, math.ceil(options.trace_s / step_s) if step_s > 0 else 1))
    module = trace.module_name(text)
    try:
        events = trace.record(lambda: stepper.run(count + 1), module)
    except (RuntimeError, OSError, ValueError) as exc:
        notes.append(f"no split: the profiler trace failed ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                     + instead)
        return None
    runs = trace.wall_shares(events)
    if not runs:
        found = (f"{len(events)} HLO op events of {module} but not two executions told apart by run_id"
                 if events else f"no HLO op events of {module}")
        notes.append(f"no split: the trace held {found} ({trace.TRACE_FORMAT}); " + instead)
        return None
    split = split_step(runs, traced_program(text), attribution, stepper.record.block_s, options.bootstrap)
    overhead = split.trace_overhead
    notes.append(
        f"split: a profiler trace of {split.traced_steps} steps of the one program (their period "
        f"{split.traced_period_s * 1e3:,.3f} ms, {0.0 if overhead is None else overhead:+.1%} against the "
        "untraced step); each HLO instruction's share of the step, overlapping ones sharing the clock, "
        f"attributed {how}; each part is the step's median time times its mean share, and the parts with the idle time (no "
        "instruction running) add up to the step"
    )
    if split.inferred_s or split.unnamed_s:
        notes.append(
            f"split: {split.inferred_s * 1e3:,.3f} ms a step in instructions XLA made without an op_name "
            "(layout copies, rewritten convolutions), each named after the operation it feeds or is fed by"
            + (f"; {split.unnamed_s * 1e3:,.3f} ms in instructions left without one (the update's remainder)"
               if split.unnamed_s else "")
        )
    return split


def _cross_check(
    workload: Workload, arrays: Mapping[str, Any], executables: Mapping[str, Any], options: TimingOptions,
) -> dict[str, PhaseTiming]:
    """Each program of ``options.phases`` run on its own and waited for; derived phases by formula."""
    results: dict[str, PhaseTiming] = {}
    for phase in options.phases:
        executable = executables.get(phase)
        if executable is None:
            with workload.tracing():
                executable = xla.compile_executable(workload.phase_fn(phase), workload.phase_args(phase))
        args = tuple(arrays[name] for name in _phases.phase(phase).arguments)
        results[phase] = _measure(
            lambda executable=executable, args=args: executable(*args),
            warmup=options.warmup, min_repeats=options.min_repeats, max_repeats=options.max_repeats,
            budget_s=options.budget_s, tolerance=options.tolerance, how=options.bootstrap,
        )
    for derived in _phases.DECLARED:
        if derived.name in results or not derived.formula or not set(derived.formula) <= set(results):
            continue
        parts = {name: results[name] for name in derived.formula}
        median = _phases.combine(derived.formula, {n: t.median_s for n, t in parts.items()})
        results[derived.name] = PhaseTiming(
            median_s=max(median, 0.0), min_s=None, iqr_s=None,
            repeats=min(t.repeats for t in parts.values()), source=derived.formula_text,
        )
    return {p: results[p] for p in _phases.NAMES if p in results}


def _phases_of(
    step: StepRun | None, split: StepSplit | None, separate: Mapping[str, PhaseTiming], how: Bootstrap,
) -> dict[str, PhaseTiming]:
    """The step's phases: the one program's time, its parts from the trace
    (the separate programs' where there is no trace)."""
    results: dict[str, PhaseTiming] = {}
    if split is not None:
        for part in (*_phases.SPLIT, "grad"):
            spread = split.parts[part]
            results[part] = PhaseTiming(
                spread.seconds, None, None, split.traced_steps, low_s=spread.low_s, high_s=spread.high_s,
                source="trace",
            )
    else:
        results.update({p: t for p, t in separate.items() if p != STEP})
    if step is not None:
        results[STEP] = dataclasses.replace(_summary(step.block_s, how, "one program"), repeats=len(step.block_s))
    elif STEP in separate:
        results[STEP] = separate[STEP]
    return {p: results[p] for p in _phases.NAMES if p in results}


def against_counts(
    t: PhaseTiming, costs: Any, library: int, peak: DevicePeak, dtype: str,
) -> PhaseTiming:
    """FLOP/s, bytes/s, MFU, HFU and the roofline of a measured phase from its counts."""
    if costs is None:
        return t
    peak_flops = peak.for_dtype(dtype)
    moved = None if costs.bytes_accessed is None else costs.bytes_accessed + library
    roof, bound = _roofline(costs.flops, moved, peak_flops, peak.bandwidth)

    def per_second(n: int | None) -> float | None:
        return None if n is None or t.median_s <= 0 else n / t.median_s

    def utilisation(n: int | None) -> float | None:
        rate = per_second(n)
        return None if rate is None or peak_flops <= 0 else rate / peak_flops

    return dataclasses.replace(
        t, flops_per_s=per_second(costs.flops), bytes_per_s=per_second(moved),
        mfu=utilisation(costs.model_flops), hfu=utilisation(costs.hardware_flops), roofline_s=roof, bound=bound,
    )


def _library_bytes(given: Mapping[str, int | None]) -> dict[str, int]:
    """The library calls' bytes of every phase: the programs' as given, the
    derived phases' by their formulas (``backward = grad - forward``)."""
    known = {p: n for p, n in given.items() if n is not None}
    for derived in _phases.DECLARED:
        if derived.name not in known and derived.formula and set(derived.formula) <= set(known):
            known[derived.name] = max(_phases.combine(derived.formula, known), 0)
    return {p: known[p] for p in _phases.NAMES if p in known}
