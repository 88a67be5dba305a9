"""The one place that lowers, compiles and reads XLA's cost and memory analyses.

``Compiled.cost_analysis()`` is unstable across jax versions and backends: it has
been a dict, a list holding one dict per program, or ``None``; keys go missing (a
program without arithmetic has no ``flops``); GPU custom calls (cuBLAS, cuDNN,
Pallas) add ``-1`` for "unknown". Everything here turns that into numbers or
``None`` (unknown), never a made-up zero, and says why a figure is unknown.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax

_LOG = logging.getLogger("xla_cost")

__all__ = [
    "XlaCosts",
    "XlaMemory",
    "CompiledPhase",
    "normalize_cost_analysis",
    "normalize_memory_analysis",
    "compile_phase",
    "compile_executable",
    "filter_compiler_log",
    "device_kind",
    "device_memory_bytes",
    "backend_name",
]

# Keys of ``cost_analysis()`` mapped to our field names.
_COST_KEYS = {
    "flops": "flops",
    "transcendentals": "transcendentals",
    "bytes accessed": "bytes_accessed",
}


@dataclasses.dataclass(frozen=True)
class XlaCosts:
    """Whole-program costs as XLA's ``HloCostAnalysis`` counts them.

    Attributes:
      flops: floating-point operations (a multiply-add is 2), or None if unknown.
      transcendentals: exp, log, tanh, sqrt, rsqrt, power, ... (one per element).
      bytes_accessed: bytes read and written by the (fused) HLO instructions.
      unknown_reasons: one line per field that is None, saying why.
    """

    flops: int | None
    transcendentals: int | None
    bytes_accessed: int | None
    unknown_reasons: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class XlaMemory:
    """Buffer sizes of a compiled executable (``Compiled.memory_analysis()``)."""

    argument_bytes: int | None
    output_bytes: int | None
    temp_bytes: int | None


@dataclasses.dataclass(frozen=True)
class CompiledPhase:
    """What compiling one phase function yields (the executable, for timing)."""

    costs: XlaCosts
    memory: XlaMemory
    executable: Any = dataclasses.field(default=None, compare=False, repr=False)


def _as_count(value: Any) -> int | None:
    """A non-negative finite number as an int; anything else is unknown."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return int(round(value))


def normalize_cost_analysis(raw: Any) -> XlaCosts:
    """Turns whatever ``cost_analysis()`` returned into `XlaCosts`.

    Args:
      raw: a dict of costs; a list holding exactly one such dict (the form jax
        used before 0.4.30 for a single program); or ``None``.

    Returns:
      ``XlaCosts`` whose fields are None where the analysis gave no usable number:
      the whole analysis missing, a list of several programs (no single figure), a
      missing key, or a negative value (GPU custom calls report -1 for unknown).
    """
    if isinstance(raw, Sequence) and not isinstance(raw, (str, bytes)):
        if len(raw) == 1:
            raw = raw[0]
        else:
            reason = (
                f"cost_analysis() returned a list of {len(raw)} entries, not one "
                "program's costs"
            )
            return XlaCosts(None, None, None, (reason,))
    if not isinstance(raw, Mapping):
        reason = f"cost_analysis() returned {type(raw).__name__}, not a dict of costs"
        return XlaCosts(None, None, None, (reason,))
    values: dict[str, int | None] = {}
    reasons: list[str] = []
    for key, field in _COST_KEYS.items():
        if key not in raw:
            values[field] = None
            reasons.append(f"cost_analysis() has no {key!r} key")
            continue
        count = _as_count(raw[key])
        if count is None:
            reasons.append(
                f"cost_analysis() gave {key!r} = {raw[key]!r} (negative means a custom "
                "call XLA cannot count)"
            )
        values[field] = count
    return XlaCosts(**values, unknown_reasons=tuple(reasons))


def normalize_memory_analysis(raw: Any) -> XlaMemory:
    """Reads argument, output and temporary buffer sizes; missing ones are None."""

    def read(name: str) -> int | None:
        return _as_count(getattr(raw, name, None)) if raw is not None else None

    return XlaMemory(
        argument_bytes=read("argument_size_in_bytes"),
        output_bytes=read("output_size_in_bytes"),
        temp_bytes=read("temp_size_in_bytes"),
    )


def _safe_call(method: Callable[[], Any]) -> Any:
    # Some backends raise instead of returning None (NotImplementedError,
    # XlaRuntimeError "Unimplemented"); both mean "no analysis".
    try:
        return method()
    except Exception:  # noqa: BLE001 - any failure here means "unknown"
        return None


# A glog line: severity, date, time, thread, file:line]. XLA's slow-operation alarm
# ("Constant folding an instruction is taking > 1s", "The operation took 2.1s")
# spans several lines, up to the next glog line.
_GLOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")
_ALARM = "slow_operation_alarm"


def filter_compiler_log(text: str) -> tuple[str, int]:
    """``text`` without XLA's slow-operation alarms, and how many were dropped.

    The alarms say that XLA spent a while folding constants; they are not
    errors and say nothing about the costs, so they do not reach the user.
    Every other line is kept.
    """
    kept: list[str] = []
    dropped, in_alarm = 0, False
    for line in text.splitlines(keepends=True):
        if _GLOG_LINE.match(line):
            in_alarm = _ALARM in line
            dropped += in_alarm
        if not in_alarm:
            kept.append(line)
    return "".join(kept), dropped


def _flush_stderr() -> None:
    try:
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass


@contextlib.contextmanager
def _quiet_compiler() -> Iterator[None]:
    """Holds back what the compiler writes to file descriptor 2 (its C++ logging),
    then lets all of it but the slow-operation alarms through."""
    stderr_fd = 2
    try:
        saved = os.dup(stderr_fd)
    except OSError:  # no descriptor 2: nothing to filter
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as capture:
        _flush_stderr()
        os.dup2(capture.fileno(), stderr_fd)
        try:
            yield
        finally:
            _flush_stderr()
            os.dup2(saved, stderr_fd)
            os.close(saved)
            capture.seek(0)
            text, dropped = filter_compiler_log(capture.read().decode("utf-8", "replace"))
            if text:
                os.write(stderr_fd, text.encode("utf-8"))
            if dropped:
                _LOG.info("dropped %d slow_operation_alarm message(s) from XLA", dropped)


def compile_phase(fn: Callable[..., Any], args: Sequence[Any]) -> CompiledPhase:
    """Jits, lowers and compiles ``fn(*args)`` and reads its analyses.

    Args:
      fn: a pure function of ``args``.
      args: pytrees of arrays or ``jax.ShapeDtypeStruct`` (nothing is allocated).

    Returns:
      The compiled program's costs and memory, unknown fields as None.
    """
    compiled = compile_executable(fn, args)
    costs = normalize_cost_analysis(_safe_call(compiled.cost_analysis))
    memory = normalize_memory_analysis(_safe_call(compiled.memory_analysis))
    return CompiledPhase(costs=costs, memory=memory, executable=compiled)


def compile_executable(fn: Callable[..., Any], args: Sequence[Any]) -> Any:
    """Jits, lowers and compiles ``fn`` for ``args``' shapes; returns the executable.

    For timing: call the result with concrete arrays of those shapes. Compiling
    here keeps compilation out of any measured time.
    """
    return jax.jit(fn).lower(*args).compile()


def device_kind() -> str:
    """The default device's kind, e.g. ``NVIDIA H100 80GB HBM3`` or ``cpu``."""
    return str(getattr(jax.devices()[0], "device_kind", jax.default_backend()))


def device_memory_bytes() -> int | None:
    """Memory the default device can allocate (GPU/TPU ``bytes_limit``), else None."""
    stats = _safe_call(jax.devices()[0].memory_stats)
    if isinstance(stats, Mapping):
        return _as_count(stats.get("bytes_limit"))
    return None


def backend_name() -> str:
    """The default backend's platform name, e.g. ``cpu``, ``gpu`` or ``tpu``."""
    return jax.default_backend()
