"""What an HLO instruction reads and writes, where that is less than its
operands and result: the part of a stack it slices, a buffer it updates in
place, the element an asynchronous start's tuple repeats.

`untouched_bytes` is what `xla_cost.compiled.work.work_bytes` (and
`instruction_bytes`) leave out of an instruction's operand and result bytes;
`result_shape` is what an instruction writes. Instructions are
`xla_cost.compiled.hlo.Instruction` (read here by their fields: ``name``,
``opcode``, ``operands``, ``shape_text``, ``callees``, ``operand_names()``).
It imports `xla_cost.compiled.shapes` only.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from xla_cost.compiled.shapes import Array, Shape, device_memory_bytes, element_bits, parse_shape

__all__ = ["result_shape", "untouched_bytes"]


def result_shape(instruction: Any, text: str | None = None) -> Shape | None:
    """What an instruction writes. The start of an asynchronous pair prints
    more than that: ``copy-start`` its destination, its source and a context
    (``(dst, src, u32[])``), the others (``slice-start``, ``async-start``) the
    operands, the result and a context (``((operands), result, s32[])``): the
    destination, the result. (Collectives' starts are left to
    `xla_cost.compiled.collectives`.) ``text`` stands in for the instruction's
    shape text where given."""
    shape = parse_shape(instruction.shape_text if text is None else text)
    if not instruction.opcode.endswith("-start") or not isinstance(shape, tuple) or len(shape) < 2:
        return shape
    if instruction.opcode == "copy-start":
        return shape[0]
    return shape[1] if isinstance(shape[0], tuple) else shape


_SLICES = frozenset({"dynamic-slice", "slice", "gather", "slice-start"})
"""Ops that read part of their first operand: the elements of their result
(``slice-start``: a TPU's asynchronous slice, a copy of part of a buffer)."""

_UPDATE_OPERAND = {"dynamic-update-slice": 1, "scatter": 2}
"""Ops that write part of a buffer (their first operand) in place, and the position of
the operand that holds what they write (a ``scatter`` of one buffer: buffer, indices, updates)."""

_ALONE = _SLICES | set(_UPDATE_OPERAND)
"""Ops outside a fusion that touch part of a buffer (`untouched_bytes`)."""

_VIEWS = frozenset({"bitcast", "reshape"})
"""Ops that give a buffer another shape without moving it (the same bytes, in place)."""

_REMAPS = _VIEWS | {"copy", "transpose"}
"""Ops that, inside a fusion, only change where an element is read from: a
slice of their result reads only its own elements of their operand."""


@dataclasses.dataclass(frozen=True)
class _Body:
    """What an instruction runs, as one fused computation: its parameters by
    operand position, its instructions' users and shapes, its root."""

    parameters: dict[int, str]
    users: dict[str, list[Any]]
    shapes: dict[str, str]
    producers: dict[str, Any]
    root: Any


def _body(instruction: Any, shapes: Mapping[str, str], computations: Mapping[str, Any]) -> _Body | None:
    """A fusion's computation, or a lone slice or update (`_ALONE`) as a
    computation of its own (its operands its parameters); None otherwise."""
    if instruction.opcode in _ALONE:
        names = instruction.operand_names()
        users: dict[str, list[Any]] = {}
        for name in dict.fromkeys(names):
            users[name] = [instruction]
        return _Body(dict(enumerate(names)), users, {**shapes, instruction.name: instruction.shape_text},
                     {instruction.name: instruction}, instruction)
    callee = next((c for k, c in instruction.callees if k == "calls"), None)
    computation = computations.get(callee or "")
    if instruction.opcode != "fusion" or computation is None or computation.root() is None:
        return None
    parameters: dict[int, str] = {}
    users = {}
    for i in computation.instructions:
        if i.opcode == "parameter" and i.operands.strip().isdigit():
            parameters[int(i.operands.strip())] = i.name
        for name in dict.fromkeys(i.operand_names()):
            users.setdefault(name, []).append(i)
    return _Body(parameters, users, {i.name: i.shape_text for i in computation.instructions},
                 {i.name: i for i in computation.instructions}, computation.root())  # type: ignore[arg-type]


def _outputs(body: _Body) -> list[Any]:
    """The values the body writes: its root, or the elements of a root tuple."""
    if body.root.opcode != "tuple":
        return [body.root]
    return [body.producers[n] for n in body.root.operand_names() if n in body.producers]


def _viewed(body: _Body, value: Any) -> Any:
    """``value`` with the views (`_VIEWS`) that produce it stripped off."""
    while value.opcode in _VIEWS and value.operand_names() and value.operand_names()[0] in body.producers:
        value = body.producers[value.operand_names()[0]]
    return value


def _written(update: Any) -> str | None:
    """The name of the operand that holds what an update (`_UPDATE_OPERAND`) writes into its
    buffer; None for any other op, and for a scatter of several buffers at once (left whole)."""
    position, names = _UPDATE_OPERAND.get(update.opcode), update.operand_names()
    if position is None or len(names) <= position or (update.opcode == "scatter" and len(names) != 3):
        return None
    return names[position]


def _in_place_updates(body: _Body) -> dict[str, Any]:
    """The ``dynamic-update-slice`` and ``scatter`` outputs of the body (through
    views) whose buffer is, through views, one of its parameters: XLA writes
    them into that parameter's buffer, the update alone (its dataflow analysis
    pairs such an op's buffer with its result in place, ``GetInPlaceInputOutputPairs``;
    its GPU and TPU backends emit them so, and its cost analysis counts them so).
    By output name."""
    parameters = set(body.parameters.values())
    found: dict[str, Any] = {}
    for output in _outputs(body):
        update = _viewed(body, output)
        if _written(update) is None:
            continue
        buffer = body.producers.get(update.operand_names()[0])
        source = update.operand_names()[0] if buffer is None else _viewed(body, buffer).name
        if source in parameters:
            found[output.name] = update
    return found


_ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2", "and", "or",
    "xor", "not", "negate", "abs", "sign", "exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt",
    "rsqrt", "cbrt", "tanh", "logistic", "sine", "cosine", "tan", "floor", "ceil", "round-nearest-afz",
    "round-nearest-even", "is-finite", "compare", "select", "clamp", "convert", "shift-left",
    "shift-right-arithmetic", "shift-right-logical", "popcnt", "count-leading-zeros", "real", "imag", "complex",
    "erf", "reduce-precision",
})
"""Ops whose every result element reads one element of each operand (the same one)."""

_AT_MOST_ONE = _ELEMENTWISE | _REMAPS | {"broadcast", "pad", "concatenate", "reverse", "dynamic-slice"}
"""Ops whose every result element reads at most one element of each operand
(``dynamic-slice``'s others are its scalar indices)."""


def _elements(body: _Body, name: str) -> int | None:
    producer = body.producers.get(name)
    text = body.shapes.get(name, "")
    shape = parse_shape(text) if producer is None else result_shape(producer, text)
    return math.prod(shape.dims) if isinstance(shape, Array) else None


def _demanded(body: _Body, in_place: Sequence[Any]) -> dict[str, int | None]:
    """How many elements of each value of the body it reads (None: all of
    them, or unknown), from its outputs back: an output is written whole; an op
    that reads at most one element of an operand per result element
    (`_AT_MOST_ONE`, a slice's or gather's sliced operand, an update's update)
    reads no more of it than is read of its result; a reduction reads its
    result's share of its input; a buffer updated in place is not read (a
    scatter's: the elements it updates, which its combiner reads); any
    other op reads an operand whole. Summed over a value's readers (a bound:
    two readers may read the same elements), never more than it holds."""
    outputs = {o.name for o in _outputs(body)}
    order = [*reversed(body.producers), *(p for p in body.parameters.values() if p not in body.producers)]
    demand: dict[str, int | None] = {}
    for name in order:
        full = _elements(body, name)
        total: int | None = full if name in outputs or full is None else 0
        for user in body.users.get(name, []):
            if total is None or total == full:
                break
            read = demand.get(user.name)
            result = _elements(body, user.name)
            for k, operand in enumerate(user.operand_names()):
                if operand != name or total is None:
                    continue
                if user.opcode in _UPDATE_OPERAND and k == 0:
                    # a buffer updated in place: a slice's update reads none of it; a scatter's
                    # combiner reads the elements it updates (as many as its updates)
                    written = _written(user) if any(user is update for update in in_place) else None
                    part = None if written is None else 0 if user.opcode == "dynamic-update-slice" \
                        else _elements(body, written)
                elif read is not None and (user.opcode in _AT_MOST_ONE or (k == 0 and user.opcode in _SLICES)
                                           or (k > 0 and user.opcode == "dynamic-update-slice")):
                    part = read
                elif read is not None and user.opcode == "reduce" and k < len(user.operand_names()) // 2:
                    part = None if not result else -(-read * full // result)  # type: ignore[operator]
                else:
                    part = None
                total = None if part is None else total + part
        demand[name] = None if total is None else min(total, full)  # type: ignore[type-var]
    return demand


def untouched_bytes(instruction: Any, shapes: Mapping[str, str], computations: Mapping[str, Any]) -> int:
    """The bytes among an instruction's operands and result that it does not
    move, as XLA's GPU and TPU backends run it (a fusion computes each result
    element from the operand elements it needs, `_demanded`): of an operand,
    what no result element needs (all but the slices of a stack it slices,
    however many bitcasts, transposes or elementwise ops lie between); of a
    buffer it updates in place (a ``dynamic-update-slice`` or a ``scatter`` whose
    buffer is, through bitcasts and reshapes, an operand, and whose result is,
    through them, the result or an element of a result tuple), all of it but,
    for a scatter, the elements its combiner reads (as many as its updates);
    and of that result, all but the update, written once (its read is the
    operand, or the fused work, that makes it). A loop-carried stack ``[L, ...]``
    that a scanned layer slices or updates so costs a layer's bytes per
    iteration, not the stack's (read whole, a scan's bytes grow with the square
    of its length); the gradient of ``take_along_axis`` over a language model's
    logits (a scatter-add of one element a token into the ``[tokens, vocabulary]``
    gradient) its tokens' elements, not the logits twice (an H100 ran GPT-2's,
    8,192 tokens into ``f32[8, 1024, 50257]``, in 1.7 µs, where the logits twice
    are 3.3 GB: ``reports/data/kernels_nvidia-h100-80gb-hbm3_2026-11-26-2.csv``,
    ``input_scatter_fusion_2``). XLA's cost analysis counts a lone update the
    same: twice the update, plus the indices (a scatter: its updates read, and
    as many elements of the buffer read and written)."""
    if instruction.opcode == "fusion" and _reads_whole(instruction, computations):
        return 0
    body = _body(instruction, shapes, computations)
    if body is None:
        return 0
    names = instruction.operand_names()
    in_place = _in_place_updates(body)
    demand = _demanded(body, list(in_place.values()))
    untouched = 0
    for index, parameter in body.parameters.items():
        full = _shape_size(shapes.get(names[index], "")) if index < len(names) else None
        if not full:
            continue
        read, leaf = demand.get(parameter), parse_shape(body.shapes.get(parameter, ""))
        bits = element_bits(leaf.dtype) if isinstance(leaf, Array) else None
        if read is not None and bits is not None:
            untouched += max(full - math.ceil(read * bits / 8), 0)
    result = result_shape(instruction)
    written: int | None = 0
    for output in _outputs(body):
        update = in_place.get(output.name)
        shape = parse_shape(body.shapes.get(_written(update) or "", "")) if update else result_shape(output)
        size = None if shape is None else device_memory_bytes(shape)
        whole = result_shape(output)
        if update is not None and size is not None and whole is not None:
            size = min(size, device_memory_bytes(whole) or 0)  # a scatter's updates may outnumber its buffer's
        written = None if written is None or size is None else written + size
    if result is not None and written is not None and (size := device_memory_bytes(result)) is not None:
        untouched += max(size - written, 0)  # of the result, what an update in place leaves as it was
    return max(untouched, 0)


_PARTIAL = _ALONE | {"pad"}
"""Ops through which a fusion may read part of an operand (``pad`` crops with a
negative edge) or update a buffer in place."""


def _reads_whole(fusion: Any, computations: Mapping[str, Any]) -> bool:
    """Whether a fusion reads every operand whole and writes its result whole, so
    that `untouched_bytes` is 0 without tracing what it demands: its computation
    holds no op that reads part of a value or updates one (`_PARTIAL`) and uses
    every parameter (most fusions: elementwise work, reductions, products)."""
    callee = next((c for k, c in fusion.callees if k == "calls"), None)
    computation = computations.get(callee or "")
    if computation is None:
        return False
    parameters, operands = set(), []
    for instruction in computation.instructions:
        if instruction.opcode in _PARTIAL:
            return False
        if instruction.opcode == "parameter":
            parameters.add(instruction.name)
        else:
            operands.append(instruction.operands)
    return parameters <= set(_OPERAND_NAMES.findall(", ".join(operands)))


_OPERAND_NAMES = re.compile(r"(?:^|[\s,/])%?([A-Za-z_][\w.\-]*)(?=\s*(?:,|$))")
"""The operand names in an instruction's operand list, all at once: the last
word of each operand (``f32[8]{0} %x``, ``%x`` or ``/*index=5*/%x``), the one
a comma or the end follows (a shape's words are followed by its brackets); the
same names as ``Instruction.operand_names`` (on 10,143 computations of CPU, GPU
and TPU programs) without reading each operand apart."""


def _shape_size(text: str) -> int | None:
    shape = parse_shape(text)
    return None if shape is None else device_memory_bytes(shape)
