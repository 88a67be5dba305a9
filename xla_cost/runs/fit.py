"""The largest batch whose compiled training step fits in a device's memory.

Each candidate batch is traced and its train step compiled as one program with
the parameters and optimizer state donated, abstractly (nothing is allocated);
XLA's ``memory_analysis()`` gives its peak (arguments + outputs + temporaries
- donated), which must not exceed the usable memory: the device's capacity
times ``memory_fraction`` (JAX's GPU allocator takes 75% of the memory by
default, ``XLA_PYTHON_CLIENT_MEM_FRACTION``).

The search compiles the smallest batch and twice it, extrapolates the peak
(it grows about linearly with the batch) to the largest batch that would
fit, refines that with the batches it compiles (secants, `SECANTS` rounds),
and from there steps outwards, doubling the step, until it holds a batch
that fits and one that does not; then it bisects between them. The
answer ``B`` fits and ``B + 1`` does not, each established by a compile, in
a handful of compiles whatever the memory. No batch above `MAX_BATCH`
(jax indexes arrays with int32) is tried: a memory that even that batch
fits is refused.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from xla_cost.analysis.memory import PARTS, MemoryBreakdown
from xla_cost.analysis.programs import step_memory
from xla_cost.errors import InputError
from xla_cost.present import progress
from xla_cost.options import split_fields
from xla_cost.parallel import devices as registry
from xla_cost.parallel import sharding
from xla_cost.present.document import Rendered, Section
from xla_cost.present.units import bytes_unit, scaled
from xla_cost.runs.configs import RunConfig
from xla_cost.step.checks import INT32_MAX
from xla_cost.step.workload import build_workload

__all__ = ["FitResult", "max_batch_size", "breakdown_at", "device_memory", "DEFAULT_MEMORY_FRACTION"]

SECANTS = 4
"""Rounds of extrapolation before the search steps outwards (`_search`)."""

DEFAULT_MEMORY_FRACTION = 0.75
"""The share of the memory a JAX program may use: JAX's GPU default."""

MAX_BATCH = INT32_MAX
"""The largest batch searched: the largest dimension jax indexes with int32
(`xla_cost.step.checks.INT32_MAX`), which `xla_cost.analyze` refuses beyond."""


def device_memory(device: str) -> tuple[float, str]:
    """``(bytes, source)`` of a device of the registry (`xla_cost.parallel.devices`).

    Raises:
      InputError: a device whose memory is not known; the message lists those that are.
    """
    found = registry.device(device, has="memory",
                            fix="Pass one of these, or the bytes with --device-memory / device_memory=.")
    return float(found.memory), found.memory_source  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class FitResult(Rendered):
    """The answer of `max_batch_size`.

    Attributes:
      model: the model's name.
      batch_size: the largest batch that fits (0: not even batch 1).
      limit: the usable bytes per device (capacity x fraction).
      capacity: the device's memory in bytes, and where it comes from.
      fits: the memory breakdown at ``batch_size`` (None when 0).
      next_size: ``batch_size + 1``, the smallest that does not fit.
      does_not_fit: the breakdown at ``next_size``.
      tried: every batch compiled and its peak, in the order tried.
      mesh: the mesh the step was sharded over (empty: one device).
      optimizer, dtype: the step's (``fit`` defaults to adam, whose state
        `analyze`'s default sgd does not have: the sentence names it).
    """

    model: str
    batch_size: int
    limit: float
    capacity: float
    capacity_source: str
    fits: Any
    next_size: int
    does_not_fit: Any
    tried: tuple[tuple[int, int], ...]
    mesh: Mapping[str, int] = dataclasses.field(default_factory=dict)
    optimizer: str = ""
    dtype: str = ""

    def describe(self) -> str:
        scale, unit = self._unit()
        step = ", ".join(x for x in (self.optimizer, self.dtype) if x)
        return (
            f"{self.model}{f' ({step})' if step else ''}: the largest batch that fits is {self.batch_size}"
            + (f" per step over {'x'.join(f'{k}={v}' for k, v in self.mesh.items())}" if self.mesh else "")
            + f" (usable {scaled(self.limit, scale, 2)} {unit} of {scaled(self.capacity, scale, 2)} {unit}; "
            f"{self.capacity_source})"
        )

    def _unit(self) -> tuple[float, str]:
        """One byte unit for the result's sentence, table and notes, chosen by
        the capacity (`xla_cost.present.units.bytes_unit`)."""
        return bytes_unit([self.capacity])

    def _rows(self) -> list[tuple[str, str, int | None, int | None]]:
        """``(name, label, bytes at batch_size, bytes at next_size)`` per part
        (`xla_cost.analysis.memory.PARTS`), their sums and XLA's peak."""
        labels = {"parts_total": "sum of parts", "workspace": "workspace (at peak)",
                  "at_peak_total": "sum at XLA's peak", "peak": "XLA's peak"}
        return [
            (name, labels.get(name, name),
             *(None if b is None else getattr(b, name) for b in (self.fits, self.does_not_fit)))
            for name in (*PARTS, "parts_total", "workspace", "at_peak_total", "peak")
        ]

    def to_frame(self) -> pd.DataFrame:
        """One row per part: its bytes per device at ``batch_size`` and at ``next_size``."""
        return pd.DataFrame(
            [{"part": name, f"batch_{self.batch_size}": a, f"batch_{self.next_size}": b}
             for name, _, a, b in self._rows()]
        ).astype({f"batch_{self.batch_size}": "Int64", f"batch_{self.next_size}": "Int64"})

    def sections(self) -> list[Section]:
        rows = self._rows()
        scale, unit = bytes_unit([v for _, _, a, b in rows for v in (a, b)])
        frame = pd.DataFrame(
            [{f"part ({unit} per device)": label,
              f"batch {self.batch_size}": None if a is None else a / scale,
              f"batch {self.next_size}": None if b is None else b / scale}
             for _, label, a, b in rows],
            dtype=object,
        )
        return [Section("", frame)]

    def notes(self) -> list[str]:
        scale, unit = bytes_unit([p for _, p in self.tried])
        return ["tried: " + ", ".join(f"{b} ({scaled(p, scale, 2)} {unit})" for b, p in self.tried)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "optimizer": self.optimizer, "dtype": self.dtype,
            "batch_size": self.batch_size, "limit": self.limit,
            "capacity": self.capacity, "capacity_source": self.capacity_source, "mesh": dict(self.mesh),
            "fits": None if self.fits is None else self.fits.to_dict(),
            "next_size": self.next_size,
            "does_not_fit": None if self.does_not_fit is None else self.does_not_fit.to_dict(),
            "tried": [list(t) for t in self.tried],
        }


def breakdown_at(run: RunConfig, batch: int) -> MemoryBreakdown:
    """The memory breakdown of ``run``'s donated train step at ``batch`` (its mesh applied)."""
    run = dataclasses.replace(run, batch_size=batch)
    built, inputs, _, _, _ = run.build()
    workload, _ = build_workload(built, inputs, optimizer=run.optimizer)
    plan = None
    if sharding.mesh_devices(run.mesh) > 1:
        plan = sharding.plan_sharding(workload, dict(run.mesh), model_rules=sharding.model_rules(built))
    return step_memory(workload, plan, True)


def max_batch_size(
    model: Any,
    *,
    device: str = "h100",
    device_memory_bytes: float | None = None,
    memory_fraction: float = DEFAULT_MEMORY_FRACTION,
    mesh: Mapping[str, int] | None = None,
    **options: Any,
) -> FitResult:
    """The largest batch whose train step fits in ``device``'s memory.

    Args:
      model: a zoo name, ``package.module:attr`` or a Linen or NNX module
        object (both with ``input_shape``).
      device: a device of the registry with a known memory (`xla_cost.parallel.devices`).
      device_memory_bytes: the capacity in bytes instead (e.g. a CPU budget).
      memory_fraction: the usable share of the capacity.
      mesh: shard the step (``{"fsdp": 8}``); the batch is then the global
        batch and the memory per device; it must divide by the batch axes.
      **options: the run's `xla_cost.RunConfig` fields: ``optimizer``
        (default ``adam``), ``dtype``, ``config``, ``input_shape`` (a custom
        model's input shape; its first entry is replaced by each batch tried),
        ``input_dtype``.

    Raises:
      InputError: an unknown device, a fraction outside (0, 1], a capacity
        that is not finite and positive, or one that even batch `MAX_BATCH` fits.
    """
    if device_memory_bytes is None:
        capacity, source = device_memory(device)
    else:
        if isinstance(device_memory_bytes, bool) or not isinstance(device_memory_bytes, (int, float)) \
                or not 0 < device_memory_bytes < math.inf:
            raise InputError("a device memory in bytes, finite and > 0", repr(device_memory_bytes),
                             "Pass e.g. --device-memory 8e9.")
        capacity, source = float(device_memory_bytes), "given"
    if isinstance(memory_fraction, bool) or not isinstance(memory_fraction, (int, float)) \
            or not 0 < memory_fraction <= 1:
        raise InputError("a memory fraction in (0, 1]", repr(memory_fraction), "Pass e.g. --memory-fraction 0.9.")
    (fields,) = split_fields("max_batch_size", options, RunConfig)
    if {"model", "batch_size", "mesh"} & set(fields):
        raise TypeError(f"max_batch_size() got an unexpected keyword argument {sorted({'model', 'batch_size', 'mesh'} & set(fields))[0]!r}")
    mesh = dict(mesh or {})
    run = RunConfig(model, **{"optimizer": "adam", **fields, "config": dict(fields.get("config") or {}), "mesh": mesh})
    step = 1
    if mesh:
        sizes = sharding.check_mesh(mesh)
        sharding.simulate_devices(sharding.mesh_devices(sizes))
        step = max(1, sharding.mesh_devices({a: sizes.get(a, 1) for a in sharding.BATCH_AXES}))
    limit = capacity * memory_fraction
    cache: dict[int, Any] = {}
    tried: list[tuple[int, int]] = []

    def peak(batch: int) -> int:
        if batch not in cache:
            progress.stage(f"compiling the step at batch {batch}", len(tried))
            cache[batch] = breakdown_at(run, batch)
            if cache[batch].peak is None:
                raise InputError("a backend whose compiled step has a memory analysis",
                                 "no memory_analysis() figures", "Run on a CPU or GPU backend of jax >= 0.4.30.")
            tried.append((batch, cache[batch].peak))
        return cache[batch].peak

    bound = MAX_BATCH // step * step
    low, high = _search(peak, limit, step, bound)
    if high > bound:
        raise InputError(
            f"a memory limit that the step outgrows by batch {bound:,} (no larger batch is searched: jax "
            "indexes arrays with int32)",
            f"{capacity:g} bytes x {memory_fraction:g}, while the step at batch {bound:,} needs "
            f"{peak(bound):,} bytes", "Pass the device's real memory: --device NAME or --device-memory BYTES.")
    return FitResult(
        model=run.name, batch_size=low, limit=limit, capacity=capacity, capacity_source=source,
        fits=cache.get(low), next_size=high, does_not_fit=cache[high], tried=tuple(tried), mesh=mesh,
        optimizer=run.optimizer, dtype=run.dtype,
    )


def _search(peak: Callable[[int], int], limit: float, step: int, bound: int) -> tuple[int, int]:
    """``(low, high)``: the largest multiple of ``step`` up to ``bound`` whose
    ``peak`` is within ``limit`` (0: not even ``step``) and the next multiple,
    which is not (beyond ``bound`` when ``bound`` fits).

    Secants through the last two batches compiled predict where the peak
    reaches the limit (a few rounds: the bytes per sample shrink as XLA reuses
    buffers); from the prediction, batches outwards at steps that double until
    one fits and the other does not; bisection between them ends it.
    """
    if peak(step) > limit:
        return 0, step
    if 2 * step > bound:
        return step, 2 * step
    a, b = step, 2 * step
    for _ in range(SECANTS):
        grows = (peak(b) - peak(a)) / (b - a)  # bytes a sample adds
        guess = bound if grows <= 0 else int(min(bound, max(2 * step, b + (limit - peak(b)) // grows)))
        guess = guess // step * step
        if guess in (a, b):
            break
        a, b = b, guess
    reach = max(step, b // 1024 // step * step)  # about 0.1% of the prediction
    if peak(b) <= limit:
        low = b
        while True:
            if low >= bound:
                return low, bound + step
            high = min(low + reach, bound)
            if peak(high) > limit:
                break
            low, reach = high, reach * 2
    else:
        high = b
        while True:
            low = max(high - reach, step)  # step fits
            if peak(low) <= limit:
                break
            high, reach = low, reach * 2
    while high - low > step:
        middle = (low + high) // 2 // step * step
        if middle <= low:
            break
        if peak(middle) <= limit:
            low = middle
        else:
            high = middle
    return low, high
