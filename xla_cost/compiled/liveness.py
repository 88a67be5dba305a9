"""What a compiled program holds at its memory peak, from its scheduled HLO.

XLA's ``memory_analysis()`` gives four totals (arguments, outputs, temporaries,
aliased) but not which buffers make up the temporaries. A compiled module
carries its schedule (``is_scheduled=true``: each computation's instructions
are printed in the order they run), so the buffers live at each point can be
replayed from the text, as XLA's heap simulator does before it packs them:

* every instruction defines one buffer per array in its result, except those
  that alias another's: ``bitcast``, ``get-tuple-element``, ``tuple``,
  ``optimization-barrier``, a ``while`` (its state is updated in place), the
  ``-done`` half of an asynchronous pair (the result its ``-start`` made; the
  start's operands are held, not copied), a ``dynamic-update-slice`` or
  ``scatter`` (in place on its first operand, fused or not) and whatever
  ``output_to_operand_aliasing`` names;
* a buffer is freed after the last instruction that reads it (directly or
  through an alias); an elementwise fusion may take over an operand's buffer
  of the same size that dies there, as XLA's buffer sharing does;
* the entry's parameters are the arguments (live throughout) and what the
  root returns are the outputs (allocated apart from the temporaries, as
  ``memory_analysis`` counts them); constants are neither;
* a ``while``, ``call`` or ``conditional`` adds the peak of its body's own
  temporaries while it runs (fused computations allocate nothing);
* an array a TPU program keeps outside its HBM holds none of the device
  memory's bytes and is not listed: one in its host's memory
  (`xla_cost.compiled.shapes.HOST_SPACE`, ``S(5)``: a remat policy's offloaded
  stacks, which ``memory_analysis`` counts apart, in ``host_temp_size_in_bytes``)
  or on the chip (`xla_cost.compiled.shapes.ON_CHIP_SPACES`: a prefetch into
  its vector memory), as `xla_cost.compiled.shapes.device_memory_bytes` counts.

The result names every buffer live when the temporaries peak, with the
``op_name`` XLA kept from the jaxpr, so its source (forward pass, backward
pass, update) and its layer can be read off. Its total beside XLA's own
temporaries says how faithful the replay is: XLA's heap packing leaves gaps
(fragmentation) and may reuse a donated argument's buffer for temporaries.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from xla_cost.compiled import hlo
from xla_cost.present.markdown import markdown_table
from xla_cost.present.units import size as bytes_text

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LiveBuffer", "LivenessProfile", "simulate", "MARKDOWN_BUFFERS"]

MARKDOWN_BUFFERS = 20
"""The temporaries a notebook shows of a replay (`LivenessProfile._repr_markdown_`), largest first."""


@dataclasses.dataclass(frozen=True)
class LiveBuffer:
    """One buffer of a compiled program.

    Attributes:
      instruction: the HLO instruction that defines it (``name{index}`` for an
        element of a tuple result).
      opcode: that instruction's opcode (``fusion``, ``convolution``, ...).
      shape: its array type, as HLO prints it (``f32[8,112,112,32]``).
      nbytes: its size in bytes.
      op_name: the jaxpr's name stack XLA kept in the metadata ("" if none).
      computation: the HLO computation it lives in (a loop body's, or ENTRY's).
    """

    instruction: str
    opcode: str
    shape: str
    nbytes: int
    op_name: str
    computation: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LiveBuffer:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class LivenessProfile:
    """The replayed schedule of one compiled program.

    Attributes:
      arguments: the entry's parameter buffers (live throughout).
      outputs: the buffers the program returns that are neither arguments
        nor written into a donated argument's buffer (``input_output_alias``);
        counted apart from the temporaries, as ``memory_analysis`` does.
      temp_peak_bytes: the most temporary bytes live at once.
      at_peak: the temporaries live at that point, largest first.
      peak_instruction: the instruction running at that point
        (``computation/instruction``).
      notes: what the replay could not follow (an unknown element type, a
        computation that was not found); empty when it followed everything.
    """

    arguments: tuple[LiveBuffer, ...]
    outputs: tuple[LiveBuffer, ...]
    temp_peak_bytes: int
    at_peak: tuple[LiveBuffer, ...]
    peak_instruction: str
    notes: tuple[str, ...] = ()

    @property
    def peak_bytes(self) -> int:
        """Arguments + outputs + the temporaries' peak: the replay's figure
        for ``memory_analysis``'s ``arguments + outputs + temp - aliased``."""
        return (sum(b.nbytes for b in self.arguments) + sum(b.nbytes for b in self.outputs)
                + self.temp_peak_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "arguments": [b.to_dict() for b in self.arguments],
            "outputs": [b.to_dict() for b in self.outputs],
            "temp_peak_bytes": self.temp_peak_bytes,
            "at_peak": [b.to_dict() for b in self.at_peak],
            "peak_instruction": self.peak_instruction,
            "notes": list(self.notes),
        }

    def to_frame(self) -> pd.DataFrame:
        """One row per buffer: its ``role`` (``argument``, ``output``, or
        ``at_peak``: a temporary live at the peak), then its `LiveBuffer` fields, raw."""
        import pandas as pd

        columns = ["role", *(f.name for f in dataclasses.fields(LiveBuffer))]
        return pd.DataFrame([(role, *dataclasses.astuple(b)) for role, buffers in (
            ("argument", self.arguments), ("output", self.outputs), ("at_peak", self.at_peak)) for b in buffers],
            columns=columns)

    def _repr_markdown_(self) -> str:
        """How a notebook (IPython's display) shows the replay: its peak and the
        temporaries live there (the largest `MARKDOWN_BUFFERS`), each in its own unit."""
        import pandas as pd

        head = (f"peak {bytes_text(self.peak_bytes)}: arguments {bytes_text(sum(b.nbytes for b in self.arguments))}, "
                f"outputs {bytes_text(sum(b.nbytes for b in self.outputs))}, temporaries "
                f"{bytes_text(self.temp_peak_bytes)} "
                f"(during `{self.peak_instruction}`)")
        shown = pd.DataFrame([(b.instruction, b.shape, bytes_text(b.nbytes), b.op_name or "(XLA, no source)")
                              for b in self.at_peak[:MARKDOWN_BUFFERS]],
                             columns=["buffer", "shape", "size", "made by"]).set_index("buffer")
        notes = "".join(f"- {note}\n" for note in self.notes)
        return f"{head}\n\n{markdown_table(shown)}\n" + (f"\n{notes}" if notes else "")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LivenessProfile:
        return cls(
            arguments=tuple(LiveBuffer.from_dict(b) for b in data["arguments"]),
            outputs=tuple(LiveBuffer.from_dict(b) for b in data["outputs"]),
            temp_peak_bytes=int(data["temp_peak_bytes"]),
            at_peak=tuple(LiveBuffer.from_dict(b) for b in data["at_peak"]),
            peak_instruction=str(data["peak_instruction"]),
            notes=tuple(data.get("notes", ())),
        )


_ALIASING = frozenset({"bitcast", "get-tuple-element", "tuple", "optimization-barrier", "while"})
"""Opcodes whose result is (elements of) their operands' buffers."""

_IN_PLACE = frozenset({"dynamic-update-slice", "scatter"})
"""Opcodes that update their first operand's buffer (XLA makes them in place)."""

_BODIES = frozenset({"body", "condition", "calls", "true_computation", "false_computation",
                     "branch_computations", "called_computations"})
"""Callee attributes of computations that allocate buffers of their own while
their caller waits (fused computations are under ``calls`` too: excluded by opcode)."""

_ALIAS_PAIR = re.compile(r"\{([\d,\s]*)\}\s*:\s*\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}")
_PARAMETER_NUMBER = re.compile(r"parameter\((\d+)\)")


@dataclasses.dataclass(eq=False)
class _Buffer:
    buffer: LiveBuffer
    temp: bool
    born: int
    last_use: int = -1
    shares: bool = False
    """Whether its instruction may write it over an operand buffer of the same
    size that dies there (an elementwise loop fusion)."""


def _apart(first: _Buffer, second: _Buffer) -> bool:
    """Whether two buffers can share bytes: one dies before the other is
    written, or where it dies the other is written over it."""
    if first.born > second.born:
        first, second = second, first
    if first.last_use < second.born:
        return True
    return (first.last_use == second.born and second.shares
            and first.buffer.nbytes == second.buffer.nbytes)


def _index(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


def _leaf_paths(shape: Any, prefix: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], Any]]:
    if isinstance(shape, tuple):
        return [pair for i, element in enumerate(shape) for pair in _leaf_paths(element, (*prefix, i))]
    return [(prefix, shape)]


def _shape_text(leaf: Any) -> str:
    return f"{leaf.dtype}[{','.join(str(d) for d in leaf.dims)}]"


class _Replay:
    def __init__(self, module: Any) -> None:
        self.module = module
        self.notes: list[str] = []
        self.body_peaks: dict[str, tuple[int, list[LiveBuffer]]] = {}

    def in_place_operand(self, instruction: Any) -> int | None:
        """The operand a fusion's or op's result is written over, if any."""
        if instruction.opcode in _IN_PLACE:
            return 0
        if instruction.opcode != "fusion":
            return None
        called = [c for key, c in instruction.callees if key == "calls"]
        computation = self.module.computations.get(called[0]) if called else None
        root = computation.root() if computation is not None else None
        if root is None or root.opcode not in _IN_PLACE:
            return None
        operands = root.operand_names()
        target = next((i for i in computation.instructions if operands and i.name == operands[0]), None)
        if target is None or target.opcode != "parameter":
            return None
        number = _PARAMETER_NUMBER.search(f"{target.opcode}({target.operands})")
        return int(number.group(1)) if number else None

    def run(self, name: str, entry: bool) -> tuple[dict[str, list[_Buffer | None]], int, list[LiveBuffer], str, set[int]]:
        """Replays one computation: (leaf buffers by instruction, temp peak,
        live temporaries at the peak, the instruction at the peak, ids of output buffers)."""
        computation = self.module.computations[name]
        instructions = computation.instructions
        leaves: dict[str, list[_Buffer | None]] = {}
        owned: list[_Buffer] = []
        for position, instruction in enumerate(instructions):
            shape = hlo.parse_shape(instruction.shape_text)
            if shape is None:
                self.notes.append(f"{name}/{instruction.name}: result type {instruction.shape_text!r} not read")
                leaves[instruction.name] = []
                continue
            paths = _leaf_paths(shape)
            operands = instruction.operand_names()
            opcode = instruction.opcode
            result: list[_Buffer | None]
            if opcode == "parameter":
                if entry:
                    result = [self._new(instruction, name, path, leaf, temp=False, owned=owned, born=position)
                              for path, leaf in paths]
                else:
                    result = [None] * len(paths)  # the caller's buffers
            elif opcode == "constant":
                result = [None] * len(paths)
            elif opcode == "get-tuple-element":
                index = re.search(r"index=(\d+)", instruction.attributes)
                source = leaves.get(operands[0], []) if operands else []
                start = self._offset(operands[0], int(index.group(1)) if index else 0)
                result = source[start:start + len(paths)]
            elif opcode.endswith("-done"):
                result = self._done(instruction, operands, leaves, len(paths))
            elif opcode in _ALIASING:
                result = [b for operand in operands for b in leaves.get(operand, [])]
                if len(result) != len(paths):
                    result = (result + [None] * len(paths))[:len(paths)]
            else:
                result = [self._new(instruction, name, path, leaf, temp=True, owned=owned, born=position)
                          for path, leaf in paths]
                if opcode.endswith("-start"):
                    self._start_operands(instruction, shape, result, operands, leaves, owned)
                target = self.in_place_operand(instruction)
                if target is not None and target < len(operands) and len(result) == 1:
                    source = leaves.get(operands[target], [])
                    if len(source) == 1:
                        owned.remove(result[0])
                        result = list(source)
                for pair in _ALIAS_PAIR.finditer(instruction.attributes):
                    out, operand, inner = _index(pair.group(1)), int(pair.group(2)), _index(pair.group(3))
                    if operand < len(operands):
                        source = leaves.get(operands[operand], [])
                        slot = next((i for i, (p, _) in enumerate(paths) if p == out), None)
                        at = self._offset_path(operands[operand], inner)
                        if slot is not None and at is not None and at < len(source) and result[slot] is not None:
                            owned.remove(result[slot])
                            result[slot] = source[at]
            if opcode == "fusion" and "kind=kLoop" in instruction.attributes and len(result) == 1 \
                    and result[0] is not None and result[0].born == position:
                result[0].shares = True
            leaves[instruction.name] = result
            self._shapes[instruction.name] = shape
            for operand in operands:
                for buffer in leaves.get(operand, []):
                    if buffer is not None:
                        buffer.last_use = position
        root = computation.root()
        outputs = {id(b) for b in leaves.get(root.name, []) if b is not None} if root is not None else set()
        end = len(instructions)
        for buffer in owned:
            if id(buffer) in outputs:
                buffer.temp = buffer.temp and not entry
                buffer.last_use = end
            elif buffer.last_use < buffer.born:
                buffer.last_use = buffer.born  # never read: dead once written
        hosted = self.reuse_donated(leaves, owned, root) if entry else set()
        peak, at_peak, peak_at = self.walk(name, instructions, owned, leaves, hosted)
        return leaves, peak, at_peak, peak_at, outputs

    def reuse_donated(self, leaves: Mapping[str, list[_Buffer | None]], owned: list[_Buffer], root: Any) -> set[int]:
        """Temporaries XLA can place in a donated argument's buffer.

        An argument aliased with an output (``input_output_alias``) has a
        buffer that holds nothing between its last read and the write of that
        output; XLA's buffer assignment puts temporaries there, largest first,
        each in the smallest such buffer where it fits without overlapping
        what is there. Returns the ids of the temporaries placed so.
        """
        header = self.header
        match = re.search(r"input_output_alias=\{(.*?)\}\s*(?:,\s*[a-z_]+=|$)", header)
        if match is None or root is None:
            return set()
        root_paths = _leaf_paths(self._shapes.get(root.name, ()))
        root_leaves = leaves.get(root.name, [])
        entry = self.module.computations[self.module.entry]
        parameters = {int(m.group(1)): i for i in entry.instructions if i.opcode == "parameter"
                      for m in [_PARAMETER_NUMBER.search(f"parameter({i.operands})")] if m}
        hosts: list[tuple[int, list[tuple[int, int]]]] = []
        for pair in _ALIAS_PAIR.finditer(match.group(1)):
            out, number, inner = _index(pair.group(1)), int(pair.group(2)), _index(pair.group(3))
            argument = parameters.get(number)
            slot = next((i for i, (p, _) in enumerate(root_paths) if p == out), None)
            if argument is None or slot is None or slot >= len(root_leaves):
                continue
            at = self._offset_path(argument.name, inner)
            sources = leaves.get(argument.name, [])
            if at is None or at >= len(sources) or sources[at] is None or root_leaves[slot] is None:
                continue
            source, result = sources[at], root_leaves[slot]
            self.aliased.add(id(result))
            if source is result:
                continue  # returned untouched: never free
            hosts.append((source.buffer.nbytes, [source, result]))
        if not hosts:
            return set()
        hosts.sort(key=lambda h: h[0])
        placed: set[int] = set()
        temps = sorted((b for b in owned if b.temp), key=lambda b: (-b.buffer.nbytes, b.born))
        for buffer in temps:
            for size, taken in hosts:
                if size >= buffer.buffer.nbytes and all(_apart(buffer, other) for other in taken):
                    taken.append(buffer)
                    placed.add(id(buffer))
                    break
        return placed

    def walk(self, name: str, instructions: list[Any], owned: list[_Buffer],
             leaves: Mapping[str, list[_Buffer | None]], hosted: set[int]) -> tuple[int, list[LiveBuffer], str]:
        """The most temporary bytes live at once, what they are, and where."""
        born: dict[int, list[_Buffer]] = {}
        for buffer in owned:
            if buffer.temp and id(buffer) not in hosted:
                born.setdefault(buffer.born, []).append(buffer)
        live: dict[int, _Buffer] = {}
        live_bytes = 0
        peak, at_peak, peak_at = 0, [], ""
        for position, instruction in enumerate(instructions):
            new = born.get(position, [])
            taken = self._shared(instruction, new, live, position, leaves)
            for buffer in new:
                live[id(buffer)] = buffer
                live_bytes += buffer.buffer.nbytes
            for key in taken:
                live_bytes -= live.pop(key).buffer.nbytes
            extra, inner = self._callee_peak(instruction)
            if live_bytes + extra > peak:
                peak = live_bytes + extra
                at_peak = [b.buffer for b in live.values()] + inner
                peak_at = f"{name}/{instruction.name}"
            for key in [k for k, b in live.items() if b.last_use <= position]:
                live_bytes -= live.pop(key).buffer.nbytes
        return peak, at_peak, peak_at

    _shapes: dict[str, Any]

    def _start_operands(self, instruction: Any, shape: Any, result: list[_Buffer | None], operands: list[str],
                        leaves: Mapping[str, list[_Buffer | None]], owned: list[_Buffer]) -> None:
        """The half of an asynchronous start's result that is its operands'
        buffers (held while it runs), not new ones: ``copy-start``'s second
        element; the first element of the others' tuples (``async-start``,
        ``all-gather-start``, ``collective-permute-start``)."""
        if not isinstance(shape, tuple) or not shape:
            return  # all-reduce-start: its result alone
        sources = [b for operand in operands for b in leaves.get(operand, [])]
        element = 1 if instruction.opcode == "copy-start" else 0
        if element >= len(shape):
            return
        start = sum(len(_leaf_paths(e)) for e in shape[:element])
        count = len(_leaf_paths(shape[element]))
        if count != len(sources):
            return
        for i, source in enumerate(sources):
            buffer = result[start + i]
            if buffer is not None:
                owned.remove(buffer)
            result[start + i] = source

    def _done(self, instruction: Any, operands: list[str], leaves: Mapping[str, list[_Buffer | None]],
              count: int) -> list[_Buffer | None]:
        """An asynchronous pair's result: the buffers its start made for it
        (``copy-done``: the copy, element 0; the others: element 1 of a tuple
        start, or the start's own buffer)."""
        started = leaves.get(operands[0], []) if operands else []
        shape = self._shapes.get(operands[0]) if operands else None
        if isinstance(shape, tuple) and instruction.opcode != "copy-done" and len(shape) > 1:
            start = len(_leaf_paths(shape[0]))
            started = started[start:start + len(_leaf_paths(shape[1]))]
        result = list(started[:count])
        return result + [None] * (count - len(result))

    def _offset(self, operand: str, index: int) -> int:
        shape = self._shapes.get(operand)
        if not isinstance(shape, tuple):
            return 0
        return sum(len(_leaf_paths(element)) for element in shape[:index])

    def _offset_path(self, operand: str, path: tuple[int, ...]) -> int | None:
        shape = self._shapes.get(operand)
        if shape is None:
            return None
        for i, (p, _) in enumerate(_leaf_paths(shape)):
            if p == path:
                return i
        return None

    def _new(self, instruction: Any, computation: str, path: tuple[int, ...], leaf: Any, *, temp: bool,
             owned: list[_Buffer], born: int) -> _Buffer:
        size = leaf.nbytes()
        if size is None:
            self.notes.append(f"{computation}/{instruction.name}: element type {leaf.dtype} of unknown size")
            size = 0
        elif leaf.on_host or leaf.on_chip:  # not the HBM's bytes (the host's memory, the chip's own)
            size = 0
        suffix = "{" + ",".join(map(str, path)) + "}" if path else ""
        buffer = _Buffer(LiveBuffer(instruction.name + suffix, instruction.opcode, _shape_text(leaf), size,
                                    instruction.op_name, computation), temp, born)
        owned.append(buffer)
        return buffer

    def _shared(self, instruction: Any, new: list[_Buffer], live: Mapping[int, _Buffer], position: int,
                leaves: Mapping[str, list[_Buffer | None]]) -> set[int]:
        """Operand buffers dying here whose bytes an elementwise loop fusion's
        result of the same size takes over (XLA's buffer sharing)."""
        if instruction.opcode != "fusion" or "kind=kLoop" not in instruction.attributes or len(new) != 1:
            return set()
        for operand in instruction.operand_names():
            for buffer in leaves.get(operand, []):
                if (buffer is not None and id(buffer) in live and buffer.last_use == position
                        and buffer.buffer.nbytes == new[0].buffer.nbytes):
                    return {id(buffer)}
        return set()

    def _callee_peak(self, instruction: Any) -> tuple[int, list[LiveBuffer]]:
        if instruction.opcode == "fusion":
            return 0, []
        extra, inner = 0, []
        for key, callee in instruction.callees:
            if key not in _BODIES or callee not in self.module.computations:
                continue
            if callee not in self.body_peaks:
                self.body_peaks[callee] = (0, [])  # a recursion guard
                _, peak, at_peak, _, _ = self.run(callee, entry=False)
                self.body_peaks[callee] = (peak, at_peak)
            peak, at_peak = self.body_peaks[callee]
            if peak > extra:  # a loop's condition and body do not run at once
                extra, inner = peak, at_peak
        return extra, inner


def simulate(hlo_text: str) -> LivenessProfile:
    """Replays the schedule of a compiled HLO module (``compiled.as_text()``).

    Args:
      hlo_text: the optimized, scheduled module's text.

    Returns:
      Its arguments, outputs and the temporaries live at their peak.

    Raises:
      ValueError: the text has no entry computation, or is not scheduled.
    """
    if "is_scheduled=true" not in hlo_text.split("\n", 1)[0]:
        raise ValueError("expected a scheduled HLO module (compiled.as_text(), whose header says "
                         "is_scheduled=true); got an unscheduled one: pass the compiled program's text")
    module = hlo.parse_module(hlo_text)
    if module.entry is None:
        raise ValueError("expected an HLO module with an ENTRY computation; found none")
    replay = _Replay(module)
    replay._shapes = {}
    replay.aliased = set()
    replay.header = hlo_text.split("\n", 1)[0]
    leaves, peak, at_peak, peak_at, outputs = replay.run(module.entry, entry=True)
    arguments, returned = [], []
    seen: set[int] = set()
    for instruction in module.computations[module.entry].instructions:
        for buffer in leaves.get(instruction.name, []):
            if buffer is None or id(buffer) in seen:
                continue
            seen.add(id(buffer))
            if not buffer.buffer.nbytes:  # nothing in the HBM (an array in the host's memory or on the chip)
                continue
            if instruction.opcode == "parameter":
                arguments.append(buffer.buffer)
            elif id(buffer) in outputs and id(buffer) not in replay.aliased:
                returned.append(buffer.buffer)
    ordered = tuple(sorted((b for b in at_peak if b.nbytes), key=lambda b: (-b.nbytes, b.instruction)))
    return LivenessProfile(
        arguments=tuple(arguments), outputs=tuple(returned), temp_peak_bytes=peak, at_peak=ordered,
        peak_instruction=peak_at, notes=tuple(dict.fromkeys(replay.notes)),
    )
