"""A profiler trace of a compiled program as it runs: each HLO instruction's wall-clock time.

`record` runs a function under ``jax.profiler.trace`` (the Python tracer
off) and reads the Chrome-trace JSON the profiler writes
(``plugins/profile/<date>/<host>.trace.json.gz``; gzip and json from the
standard library). On the CPU of jax 0.10 no flag is needed: XLA's thunk
executor marks every thunk it runs (one per HLO instruction of the entry
computation and of loop bodies) with a complete event (``"ph": "X"``) whose
``args`` name the instruction (``hlo_op``), the module (``hlo_module``) and
the execution (``run_id``); fused computations run inside their thunk. The
option ``xla_cpu_enable_xprof_traceme``, which jaxlib knows, changes nothing
there: it wraps the code of the older CPU runtime in TraceMe calls.

`wall_shares` turns the events of consecutive executions into seconds per
instruction and per execution: where thunks overlap (the executor runs
independent ones on several threads) the wall clock is shared between them,
and a thunk's time inside another (a loop's body in its ``while``) is the
inner one's, so that an execution's instructions and its idle time add up to
its period exactly (from its first op to the next execution's first op).

`instruction_sources` gives every instruction the ``op_name`` jax left in its
metadata, or, for instructions XLA made (layout copies and transposes, a
weight-gradient convolution rewritten by the convolution canonicaliser,
select-and-scatter's expansion), the one of the operation it feeds or is fed
by (see there). `instruction_bytes` is what each instruction reads and writes.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import glob
import gzip
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax

from xla_cost.compiled import hlo
from xla_cost.count.attribution import classify_pass

__all__ = [
    "OpEvent",
    "RunShares",
    "Source",
    "DONATED_COPY",
    "record",
    "read_events",
    "module_name",
    "wall_shares",
    "instruction_sources",
    "instruction_bytes",
    "TRACE_FORMAT",
]

TRACE_FORMAT = (
    "jax.profiler trace (Chrome-trace JSON, *.trace.json.gz): complete events whose args "
    "name the HLO instruction (hlo_op), its module (hlo_module) and the execution (run_id)"
)
"""What the trace reader reads, in one line (for notes and docs)."""


@dataclasses.dataclass(frozen=True)
class OpEvent:
    """One run of one HLO instruction in a trace.

    Attributes:
      op: the instruction's name (``fusion.3``), as in ``compiled.as_text()``.
      start_us, end_us: when it ran, in the trace's microseconds.
      thread: the thread (or device stream) it ran on.
      run: the execution of the program it belongs to (``run_id``; ``""``
        where the trace has none).
    """

    op: str
    start_us: float
    end_us: float
    thread: Any = 0
    run: str = ""


_RECORDING = threading.Lock()


def record(run: Callable[[], Any], module: str | None = None) -> tuple[OpEvent, ...]:
    """Runs ``run()`` under the profiler and returns the HLO op events of ``module``.

    Args:
      run: executes the program (and waits for it: ``block_until_ready``).
      module: the HLO module's name (`module_name`); None for every module.

    Raises:
      RuntimeError: the profiler cannot start (one is already running), or
        wrote no trace.
    """
    options = _profile_options()
    with _RECORDING, tempfile.TemporaryDirectory(prefix="xla_cost_trace_") as directory:
        with jax.profiler.trace(directory, **({"profiler_options": options} if options is not None else {})):
            run()
        found = sorted(glob.glob(os.path.join(directory, "**", "*.trace.json.gz"), recursive=True))
        if not found:
            raise RuntimeError(f"the profiler wrote no *.trace.json.gz under {directory}")
        return read_events(found[-1], module)


def _profile_options() -> Any:
    """The Python tracer off: it records every Python call, which slows the host."""
    make = getattr(jax.profiler, "ProfileOptions", None)
    if make is None:
        return None
    options = make()
    if hasattr(options, "python_tracer_level"):
        options.python_tracer_level = 0
    return options


def read_events(path: str, module: str | None = None) -> tuple[OpEvent, ...]:
    """The HLO op events of a Chrome-trace JSON file (gzipped or not), in time order.

    An event counts when it is complete (``"ph": "X"``) and its ``args`` hold
    ``hlo_op`` (and ``hlo_module`` equal to ``module``, unless None).
    """
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    events = data.get("traceEvents", []) if isinstance(data, Mapping) else data
    return events_of(events, module)


def events_of(events: Iterable[Mapping[str, Any]], module: str | None = None) -> tuple[OpEvent, ...]:
    """`OpEvent` of every HLO op event among Chrome-trace ``events`` (dicts)."""
    found = []
    for event in events:
        args = event.get("args") or {}
        if event.get("ph") != "X" or "hlo_op" not in args:
            continue
        if module is not None and args.get("hlo_module") != module:
            continue
        start = float(event.get("ts", 0.0))
        found.append(OpEvent(
            op=str(args["hlo_op"]), start_us=start, end_us=start + float(event.get("dur", 0.0)),
            thread=(event.get("pid"), event.get("tid")), run=str(args.get("run_id", "")),
        ))
    return tuple(sorted(found, key=lambda e: (e.start_us, -e.end_us)))


_MODULE = re.compile(r"^\s*HloModule\s+([^\s,]+)", re.MULTILINE)


def module_name(hlo_text: str) -> str | None:
    """The ``HloModule`` name of a compiled program's text (``jit_train_step``)."""
    match = _MODULE.search(hlo_text)
    return match.group(1) if match else None


@dataclasses.dataclass(frozen=True)
class RunShares:
    """One execution's wall clock, instruction by instruction.

    Attributes:
      run: the execution (``run_id``).
      period_s: from its first op to the next execution's first op.
      seconds: each instruction's share of the period (overlapping ops share).
      runs: how often each instruction ran (a loop body's, once per iteration).
      idle_s: the part of the period when no op of the program ran (the
        runtime between thunks, the host between executions).
    """

    run: str
    period_s: float
    seconds: Mapping[str, float]
    runs: Mapping[str, int]
    idle_s: float

    @property
    def busy_s(self) -> float:
        return sum(self.seconds.values())


def wall_shares(events: Sequence[OpEvent]) -> tuple[RunShares, ...]:
    """Each complete execution's period split over its instructions and idle time.

    Executions are ordered by their first op; the last one only closes the
    period of the one before it (record one more than you need). Per thread
    the innermost running op holds the thread; at each instant the running
    threads share the wall clock equally. Within an execution the shares and
    the idle time add up to its period (where executions do not overlap, as
    steps fed each other's results cannot).
    """
    by_run: dict[str, list[OpEvent]] = collections.defaultdict(list)
    for event in events:
        by_run[event.run].append(event)
    starts = sorted((min(e.start_us for e in group), run) for run, group in by_run.items())
    if len(starts) < 2:
        return ()
    boundaries = [start for start, _ in starts]
    seconds: dict[str, dict[str, float]] = {run: collections.defaultdict(float) for _, run in starts}
    idle: dict[str, float] = {run: 0.0 for _, run in starts}
    index_of = {run: i for i, (_, run) in enumerate(starts)}

    def period_of(t: float) -> str | None:  # the execution whose period holds instant t
        if t < boundaries[0] or t >= boundaries[-1]:
            return None
        return starts[bisect.bisect_right(boundaries, t) - 1][1]

    points = sorted(
        [(e.start_us, 1, i) for i, e in enumerate(events)] + [(e.end_us, 0, i) for i, e in enumerate(events)]
    )
    active: dict[Any, list[int]] = collections.defaultdict(list)  # thread -> running ops, innermost last
    previous = points[0][0] if points else 0.0
    cuts = sorted({p[0] for p in points} | set(boundaries))
    cut = 0
    for time, is_start, i in points:
        while cut < len(cuts) and cuts[cut] <= time:  # split every interval at period boundaries
            _share(previous, cuts[cut], active, events, seconds, idle, period_of)
            previous = max(previous, cuts[cut])
            cut += 1
        event = events[i]
        if is_start:
            active[event.thread].append(i)
        elif i in active[event.thread]:
            active[event.thread].remove(i)
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for event in events:
        counts[event.run][event.op] += 1
    complete = [run for _, run in starts[:-1]]
    return tuple(
        RunShares(
            run=run,
            period_s=(boundaries[index_of[run] + 1] - boundaries[index_of[run]]) * 1e-6,
            seconds={op: s * 1e-6 for op, s in seconds[run].items()},
            runs=dict(counts[run]),
            idle_s=idle[run] * 1e-6,
        )
        for run in complete
    )


def _share(
    t0: float, t1: float, active: Mapping[Any, list[int]], events: Sequence[OpEvent],
    seconds: dict[str, dict[str, float]], idle: dict[str, float], period_of: Callable[[float], str | None],
) -> None:
    if t1 <= t0:
        return
    owners = [
        max(running, key=lambda i: (events[i].start_us, -events[i].end_us, i))
        for running in active.values() if running
    ]
    if not owners:
        run = period_of(t0)
        if run is not None:
            idle[run] += t1 - t0
        return
    part = (t1 - t0) / len(owners)
    for i in owners:
        seconds[events[i].run][events[i].op] += part


# ---------------------------------------------------------------------------
# Which operation of the program each instruction stands for


@dataclasses.dataclass(frozen=True)
class Source:
    """What an instruction stands for.

    Attributes:
      op_name: the ``op_name`` it is attributed by (``""``: none).
      inferred: the name is a neighbour's (`instruction_sources`).
      reads: the names of the program's arguments it reads, directly or
        through copies (``params['fc1']['kernel']``,
        ``opt_state[0].mu['fc1']['kernel']``: jax names an entry parameter by
        its argument's path), by which the optimizer's arithmetic, outside
        every module, and an instruction named after a neighbour find their
        module.
    """

    op_name: str
    inferred: bool = False
    reads: tuple[str, ...] = ()


_PASS_ORDER = {"forward": 0, "backward": 1}
"""The order passes run in; an operation outside autodiff (the update) runs after both."""


def _rank(op_name: str) -> int:
    return _PASS_ORDER.get(classify_pass(op_name) or "", 2) if op_name else -1


DONATED_COPY = "donated_copy"
"""The ``op_name`` given to a copy of a donated argument: no pass of autodiff, so the update's."""


def instruction_sources(module: hlo.Module) -> dict[str, Source]:
    """What every instruction of ``module`` that runs as a thunk stands for.

    An instruction that computes is named by its own metadata, or, for a
    fusion without any, by its fused computation's root's (else the
    commonest name inside). One XLA made without a name (a weight gradient's
    convolution rewritten by the convolution canonicaliser, a
    select-and-scatter's expansion) runs in the pass of its latest-pass
    input, named after that input (a value is made after its inputs), unless
    nothing named feeds it: then after the first named operation that reads
    it. At a pass boundary (its input backward, its reader the update) a
    matrix product or convolution is the gradient's last step, named after
    its input and reading, for its row, what its readers read (the
    optimizer state of the module whose gradient it is); other arithmetic
    there is the update's.

    An instruction that only moves data (a copy, a transpose, a fusion of
    such: XLA's layout changes, which keep the metadata of what they copy)
    is part of the operation that reads its result: named after the first
    one that does (inside a reading fusion, the instruction that reads it),
    with what that one reads, else after itself or its inputs. So is a
    fusion that ends in a layout change for a reader in a later pass (the
    CPU recomputes a forward activation into the transposed copy a backward
    weight gradient reads, rather than keep it): it runs for the reader.

    A copy of a donated argument (the header's ``input_output_alias``), same
    shape and layout, keeps the old value while the update writes the new one
    into the argument's buffer (XLA's copy insertion): it is the update's
    (`DONATED_COPY`), its module's whose argument it copies.

    ``reads`` are the program's arguments an instruction reads, directly or
    through copies (jax names an entry parameter by its argument's path). Parameters,
    constants, tuples and bitcasts run no code and are left out.
    """
    names: dict[str, hlo.Instruction] = {}
    for computation in module.computations.values():
        for instruction in computation.instructions:
            names[instruction.name] = instruction
    users: dict[str, list[hlo.Instruction]] = collections.defaultdict(list)
    for computation in module.computations.values():
        for instruction in computation.instructions:
            for operand in instruction.operand_names():
                users[operand].append(instruction)
    entry = module.computations[module.entry].instructions if module.entry in module.computations else []
    arguments = {j.name: _unescape(j.op_name) for j in entry if j.opcode == "parameter" and j.op_name}
    own = {name: _own_name(instruction, module) for name, instruction in names.items()}
    moves = {name: _moves_data(instruction, module) for name, instruction in names.items()}

    def reads(name: str) -> tuple[str, ...]:
        found, queue, seen = [], collections.deque(names[name].operand_names()), set()
        while queue:  # through what runs no code or only moves data (a copy of a parameter)
            operand = queue.popleft()
            if operand in seen or operand not in names:
                continue
            seen.add(operand)
            if operand in arguments:
                found.append(arguments[operand])
            elif _runs_no_code(names[operand]) or moves[operand]:
                queue.extend(names[operand].operand_names())
        return tuple(dict.fromkeys(found))

    def readers(name: str, named: Callable[[hlo.Instruction, str], str]) -> tuple[str, str]:
        """(op_name, reading instruction) of the first named reader of ``name``,
        looking through what runs no code or only moves data."""
        seen, queue = {name}, collections.deque([name])
        while queue:
            current = queue.popleft()
            for user in users.get(current, ()):
                if not (_runs_no_code(user) or moves[user.name]):
                    found = (_reader_name(user, current, module) if user.opcode == "fusion" else "") or named(
                        user, current)
                    if found:
                        return found, user.name
                if user.name not in seen:
                    seen.add(user.name)
                    queue.append(user.name)
        return "", ""

    upstream: dict[str, str] = {}

    def produced(name: str) -> str:
        """The latest-pass name among what feeds ``name``, looking through data moves."""
        if name in upstream:
            return upstream[name]
        best = ""
        for operand in names[name].operand_names():
            if operand not in names:
                continue
            found = own[operand] if own[operand] and not moves[operand] else produced(operand)
            if _rank(found) > _rank(best):
                best = found
        upstream[name] = best
        return best

    resolved: dict[str, Source] = {}
    donated = {j.name: arguments.get(j.name, "") for j in entry
               if j.opcode == "parameter" and j.operands.strip().isdigit()
               and int(j.operands) in module.aliased_parameters}
    for instruction in entry:  # the old value of a donated argument, kept while the update writes its buffer
        operands = instruction.operand_names()
        if instruction.opcode == "copy" and not own[instruction.name] and len(operands) == 1 \
                and operands[0] in donated and instruction.shape_text == names[operands[0]].shape_text:
            resolved[instruction.name] = Source(DONATED_COPY, inferred=True, reads=tuple(filter(None, [
                donated[operands[0]]])))
    for name, instruction in names.items():  # what computes
        if _runs_no_code(instruction) or moves[name] or _relayouts(instruction, module):
            continue
        if own[name]:
            resolved[name] = Source(own[name], reads=reads(name))
            continue
        before, (after, reader) = produced(name), readers(name, lambda user, _: own[user.name])
        late = bool(before) and bool(after) and _rank(after) > _rank(before)
        if late and not _contracts(instruction, module):
            resolved[name] = Source(after, inferred=True, reads=reads(name))
        elif before:
            resolved[name] = Source(before, inferred=True, reads=reads(reader) if late else reads(name))
        else:
            resolved[name] = Source(after, inferred=bool(after), reads=reads(name))
    for name, instruction in names.items():  # what moves data, or ends in a layout change
        if _runs_no_code(instruction) or name in resolved:
            continue
        after, reader = readers(name, lambda user, _: resolved[user.name].op_name if user.name in resolved else "")
        if after and (moves[name] or _rank(after) > _rank(own[name])):
            read = resolved[reader].reads if reader in resolved else reads(reader)
            resolved[name] = Source(after, inferred=True, reads=read)
        else:
            chosen = own[name] or produced(name)
            resolved[name] = Source(chosen, inferred=bool(chosen) and chosen != own[name], reads=reads(name))
    return resolved


def _unescape(op_name: str) -> str:
    """``params[\\'fc1\\']`` as the HLO text escapes it -> ``params['fc1']``."""
    return op_name.replace("\\'", "'")


_NO_CODE = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast"})

_DATA_MOVES = frozenset({
    "copy", "transpose", "reshape", "reverse", "broadcast", "slice", "concatenate", "iota",
    "dynamic-slice", "dynamic-update-slice", "copy-start", "copy-done", *_NO_CODE,
})
"""Opcodes that move or make data without arithmetic (a layout change, an index)."""

_CONTRACTIONS = frozenset({"convolution", "dot"})


def _runs_no_code(instruction: hlo.Instruction) -> bool:
    return instruction.opcode in _NO_CODE


def _fused(instruction: hlo.Instruction, module: hlo.Module) -> list[hlo.Instruction]:
    return [j for _, callee in instruction.callees if callee in module.computations
            for j in module.computations[callee].instructions]


def _moves_data(instruction: hlo.Instruction, module: hlo.Module) -> bool:
    if instruction.opcode == "fusion":
        return all(j.opcode in _DATA_MOVES for j in _fused(instruction, module))
    return instruction.opcode in _DATA_MOVES and instruction.opcode not in _NO_CODE


def _relayouts(instruction: hlo.Instruction, module: hlo.Module) -> bool:
    """Whether a fusion's result is a layout change (its root a transpose or a copy)."""
    roots = [j for j in _fused(instruction, module) if j.is_root]
    return instruction.opcode == "fusion" and bool(roots) and roots[0].opcode in ("transpose", "copy")


def _contracts(instruction: hlo.Instruction, module: hlo.Module) -> bool:
    """Whether it is, or fuses, a matrix product or a convolution."""
    return instruction.opcode in _CONTRACTIONS or any(j.opcode in _CONTRACTIONS for j in _fused(instruction, module))


def _own_name(instruction: hlo.Instruction, module: hlo.Module) -> str:
    if instruction.opcode in ("parameter", "constant"):
        return ""  # an argument's or a literal's name, not an operation's
    if instruction.op_name:
        return instruction.op_name
    if instruction.opcode != "fusion":
        return ""
    inner = [j for j in _fused(instruction, module) if j.op_name and j.opcode != "parameter"]
    roots = [j for j in inner if j.is_root]
    if roots:
        return roots[0].op_name
    common = collections.Counter(j.op_name for j in inner).most_common(1)
    return common[0][0] if common else ""


_PARAMETER_NUMBER = re.compile(r"^\s*(\d+)\s*$")


def _reader_name(fusion: hlo.Instruction, operand: str, module: hlo.Module) -> str:
    """The name of the first named instruction inside ``fusion`` that reads ``operand``."""
    positions = [k for k, name in enumerate(fusion.operand_names()) if name == operand]
    for _, callee in fusion.callees:
        computation = module.computations.get(callee)
        if computation is None:
            continue
        params = [
            j.name for j in computation.instructions
            if j.opcode == "parameter" and (m := _PARAMETER_NUMBER.match(j.operands)) and int(m.group(1)) in positions
        ]
        inner_users: dict[str, list[hlo.Instruction]] = collections.defaultdict(list)
        for j in computation.instructions:
            for name in j.operand_names():
                inner_users[name].append(j)
        seen, queue = set(params), collections.deque(params)
        while queue:
            for j in inner_users.get(queue.popleft(), ()):
                if j.op_name:
                    return j.op_name
                if j.name not in seen:
                    seen.add(j.name)
                    queue.append(j.name)
    return ""


def instruction_bytes(module: hlo.Module) -> dict[str, int]:
    """Bytes each instruction reads (its operands) and writes (its result), from
    the shapes in the text; instructions with an unreadable shape are left out."""
    shapes: dict[str, int | None] = {}
    for computation in module.computations.values():
        for instruction in computation.instructions:
            shape = hlo.parse_shape(instruction.shape_text)
            shapes[instruction.name] = None if shape is None else hlo.shape_bytes(shape)
    out: dict[str, int] = {}
    for computation in module.computations.values():
        for instruction in computation.instructions:
            sizes = [shapes.get(name) for name in instruction.operand_names()] + [shapes[instruction.name]]
            if None not in sizes:
                out[instruction.name] = sum(sizes)  # type: ignore[arg-type]
    return out
