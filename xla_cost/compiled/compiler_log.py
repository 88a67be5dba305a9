"""What XLA's compiler writes to standard error while it compiles: held back,
its slow-operation alarms and the messages xla_cost says in its own words dropped
(`quiet_compiler`, `filter_compiler_log`, `DROPPED`),
and read for what the compiler could not do (`remat_shortfall`, `out_of_memory`).

Only the standard library is used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator

__all__ = ["DROPPED", "remat_shortfall", "out_of_memory", "filter_compiler_log", "quiet_compiler"]

_LOG = logging.getLogger("xla_cost")


_REMAT_SHORT = re.compile(
    r"Can't reduce memory use below \S+ \((\d+) bytes\) by rematerialization; "
    r"only reduced to \S+ \((\d+) bytes\)")


def remat_shortfall(log: str) -> tuple[int, int] | None:
    """``(limit, reached)`` bytes of the compiler log's "Can't reduce memory use
    below ... by rematerialization; only reduced to ..." (XLA's
    ``hlo_rematerialization``), the largest if several; None: no such line."""
    found = [(int(a), int(b)) for a, b in _REMAT_SHORT.findall(log)]
    return max(found, key=lambda pair: pair[1]) if found else None


_OOM_MARKS = ("RESOURCE_EXHAUSTED", "CompileTimeHbmOom")
_OOM_REQUIRED = re.compile(r"required for HLO temporaries \(([0-9.]+)([KMGT]?)i?B?\)")
_OOM_AVAILABLE = re.compile(r"exceeds available HBM \(([0-9.]+)([KMGT]?)i?B?\)")
_BINARY = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def out_of_memory(message: str) -> tuple[str, int | None, int | None] | None:
    """``(first line, required, available)`` bytes of a compile a target's compiler
    refused for want of memory (a TPU's ``RESOURCE_EXHAUSTED: ... CompileTimeHbmOom:
    ... the total memory required for HLO temporaries (16.09G) exceeds available
    HBM (15.75G)``: binary units); the figures None where it names none; None: no
    such refusal in ``message``."""
    if not any(mark in message for mark in _OOM_MARKS):
        return None
    first = next((line.strip() for line in message.splitlines() if line.strip()), "")
    figures = [None if found is None else int(float(found.group(1)) * _BINARY[found.group(2)])
               for found in (_OOM_REQUIRED.search(message), _OOM_AVAILABLE.search(message))]
    return first[:300], figures[0], figures[1]


# A glog line: severity, date, time, thread, file:line]. XLA's slow-operation alarm
# ("Constant folding an instruction is taking > 1s", "The operation took 2.1s")
# spans several lines, up to the next glog line.
_GLOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")

DROPPED: tuple[tuple[str, str], ...] = (
    ("slow_operation_alarm", "XLA spent a while folding constants: not an error, nothing about the costs"),
    ("Can't reduce memory use below",
     "hlo_rematerialization's shortfall of a program too big for the target: read by remat_shortfall and "
     "reported as the memory's remat_short_of and its verdict"),
    ("The byte size of input/output arguments",
     "gpu_hlo_schedule's check that the arguments alone exceed the target's memory (it calls it 'an error in "
     "the calculation'): the same program's verdict says it does not fit"),
)
"""The compiler's log messages that do not reach the user, each a marker in its
first line and why: every one is either noise or said by xla_cost in its own
words. Every other line is kept."""


def filter_compiler_log(text: str) -> tuple[str, int]:
    """``text`` without the messages of `DROPPED` (each up to the next glog line),
    and how many were dropped."""
    kept: list[str] = []
    dropped, in_dropped = 0, False
    for line in text.splitlines(keepends=True):
        if _GLOG_LINE.match(line):
            in_dropped = any(marker in line for marker, _ in DROPPED)
            dropped += in_dropped
        if not in_dropped:
            kept.append(line)
    return "".join(kept), dropped


def _flush_stderr() -> None:
    try:
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass


_QUIET = {"depth": 0, "saved": None, "capture": None}
_QUIET_LOCK = threading.Lock()


@contextlib.contextmanager
def quiet_compiler() -> Iterator[list[str]]:
    """Holds back what the compiler writes to file descriptor 2 (its C++ logging),
    then lets all of it but `DROPPED`'s messages through. Yields a list
    that holds, once the block ends, the text written while it ran (with that
    of any compile that overlapped it; empty when descriptor 2 was not held).

    Compiles may run in several threads at once: the first to enter redirects
    the descriptor, the last to leave restores it and writes what was held.
    """
    stderr_fd = 2
    held: list[str] = []
    with _QUIET_LOCK:
        if _QUIET["depth"] == 0:
            try:
                saved = os.dup(stderr_fd)
            except OSError:  # no descriptor 2: nothing to filter
                saved = None
            if saved is not None:
                capture = tempfile.TemporaryFile(mode="w+b")
                _flush_stderr()
                os.dup2(capture.fileno(), stderr_fd)
                _QUIET.update(saved=saved, capture=capture)
        _QUIET["depth"] += 1
        mine = _QUIET["capture"]
        start = None if mine is None else os.fstat(mine.fileno()).st_size
    try:
        yield held
    finally:
        with _QUIET_LOCK:
            if mine is not None and start is not None:
                end = os.fstat(mine.fileno()).st_size
                held.append(os.pread(mine.fileno(), end - start, start).decode("utf-8", "replace"))
            _QUIET["depth"] -= 1
            if _QUIET["depth"] == 0 and _QUIET["saved"] is not None:
                saved, capture = _QUIET["saved"], _QUIET["capture"]
                _QUIET.update(saved=None, capture=None)
                _flush_stderr()
                os.dup2(saved, stderr_fd)
                os.close(saved)
                capture.seek(0)
                text, dropped = filter_compiler_log(capture.read().decode("utf-8", "replace"))
                capture.close()
                if text:
                    os.write(stderr_fd, text.encode("utf-8"))
                if dropped:
                    _LOG.info("dropped %d message(s) of XLA's log (compiler_log.DROPPED)", dropped)
