"""The collectives of a compiled, SPMD-partitioned XLA program, read from its HLO text.

``jax.jit(f, in_shardings=..., out_shardings=...).lower(*args).compile().as_text()``
is the program one device runs. `parse_collectives` lists every collective in it
(all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute, ...)
with the bytes it works on per device, its device groups spelled out as global
device ids, and how many times it runs per execution of the program: the
product of the trip counts of the ``while`` loops around it.

Nothing here guesses: a ``replica_groups`` format that is not understood gives
``groups=None`` and a note; a loop without a known trip count gives
``executions=None`` and a note naming the loop.

Only the standard library and numpy are used (no jax), so HLO text from any
source can be read.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "KINDS",
    "HloCollective",
    "parse_collectives",
    "group_axes",
    "has_while_loop",
]

KINDS: tuple[str, ...] = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
    "ragged-all-to-all",
)
"""The collective opcodes listed, in HLO spelling."""


@dataclasses.dataclass(frozen=True)
class HloCollective:
    """One collective instruction of a compiled program, as one device sees it.

    Attributes:
      kind: one of `KINDS`.
      name: the HLO instruction name without ``%`` (``all-reduce.4``); for an
        asynchronous pair, the name of the ``*-start`` (or ``async-start``).
      computation: the HLO computation that holds the instruction.
      op_name: the ``op_name`` of its metadata (the jax name stack), ``""``
        when it has none.
      dtype: element type(s) of the result, ``"f32"``, or ``"f32,bf16"`` for a
        tuple of several types (in order of first appearance).
      result_bytes: bytes of the result per device (a tuple: the sum of its
        elements). For an asynchronous start, the result of the operation, as
        the matching ``*-done`` returns it.
      bytes: the full buffer the collective works on, per device and execution:
        the reduced buffer (all-reduce), the gathered result (all-gather), the
        buffer before scattering, ``result_bytes * group_size``
        (reduce-scatter; ``result_bytes`` and a note when the group size is
        unknown), the result otherwise.
      groups: the device groups as global device (partition) ids; for a
        collective-permute, its (source, target) pairs. None when the format
        of the groups was not understood.
      group_size: devices per group (2 for a collective-permute), None when
        unknown or when the groups differ in size.
      executions: runs per execution of the program: the product of the trip
        counts of the enclosing ``while`` loops (1 outside loops), summed over
        the call paths that reach it; None when an enclosing loop has no known
        trip count.
      asynchronous: True for the start of an asynchronous start/done pair (the
        done is not listed).
    """

    kind: str
    name: str
    computation: str
    op_name: str
    dtype: str
    result_bytes: int
    bytes: int
    groups: tuple[tuple[int, ...], ...] | None
    group_size: int | None
    executions: int | None
    asynchronous: bool = False

    @property
    def total_bytes(self) -> int | None:
        """``bytes * executions``: what it works on per program execution."""
        return None if self.executions is None else self.bytes * self.executions

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain JSON-able values (groups as lists)."""
        data = dataclasses.asdict(self)
        if self.groups is not None:
            data["groups"] = [list(group) for group in self.groups]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HloCollective:
        """The inverse of `to_dict` (also reads ``dataclasses.asdict`` after JSON)."""
        fields = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in fields}
        groups = values.get("groups")
        if groups is not None:
            values["groups"] = tuple(tuple(int(i) for i in group) for group in groups)
        return cls(**values)


# ---------------------------------------------------------------------------
# Shapes and sizes

_ELEMENT_BITS: dict[str, int] = {
    "pred": 8, "s8": 8, "u8": 8,
    "s16": 16, "u16": 16, "f16": 16, "bf16": 16,
    "s32": 32, "u32": 32, "f32": 32,
    "s64": 64, "u64": 64, "f64": 64, "c64": 64,
    "c128": 128,
    "s4": 4, "u4": 4, "s2": 2, "u2": 2, "s1": 1, "u1": 1,
    "token": 0, "opaque": 0,
}
"""Bits per element; ``f8*`` (8), ``f6*`` (6) and ``f4*`` (4) are matched by prefix."""

_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_COMMENT = re.compile(r"/\*.*?\*/")


def _element_bits(dtype: str) -> int | None:
    if dtype in _ELEMENT_BITS:
        return _ELEMENT_BITS[dtype]
    for prefix, bits in (("f8", 8), ("f6", 6), ("f4", 4)):
        if dtype.startswith(prefix):
            return bits
    return None


@dataclasses.dataclass(frozen=True)
class _Array:
    dtype: str
    dims: tuple[int, ...]

    def nbytes(self) -> int | None:
        bits = _element_bits(self.dtype)
        if bits is None:
            return None
        return math.ceil(math.prod(self.dims) * bits / 8)


_Shape = Any
"""An `_Array`, or a tuple of shapes."""


def _split_top_level(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` outside any (), [] or {}."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _parse_shape(text: str) -> _Shape | None:
    """``f32[8,16]{1,0}``, ``f32[]``, ``(f32[], (s32[2], u32[]))``; None if not a shape."""
    text = _COMMENT.sub("", text).strip()
    if text.startswith("("):
        if not text.endswith(")"):
            return None
        elements = [_parse_shape(part) for part in _split_top_level(text[1:-1])]
        return None if any(element is None for element in elements) else tuple(elements)
    match = _ARRAY.match(text)
    if match is None:
        return None
    dims: list[int] = []
    for dim in match.group(2).split(","):
        dim = dim.strip().removeprefix("<=")  # a dynamic dimension: its bound
        if not dim:
            continue
        if not dim.isdigit():
            return None
        dims.append(int(dim))
    return _Array(match.group(1), tuple(dims))


def _leaves(shape: _Shape) -> list[_Array]:
    if isinstance(shape, _Array):
        return [shape]
    return [leaf for element in shape for leaf in _leaves(element)]


def _shape_bytes(shape: _Shape) -> int | None:
    sizes = [leaf.nbytes() for leaf in _leaves(shape)]
    return None if None in sizes else sum(sizes)


def _shape_dtypes(shape: _Shape) -> str:
    names: list[str] = []
    for leaf in _leaves(shape):
        if leaf.dtype not in names:
            names.append(leaf.dtype)
    return ",".join(names)


# ---------------------------------------------------------------------------
# Instructions and computations


@dataclasses.dataclass(frozen=True)
class _Instruction:
    name: str
    shape_text: str
    opcode: str
    operands: str
    attributes: str
    is_root: bool

    @property
    def op_name(self) -> str:
        match = _OP_NAME.search(self.attributes)
        return match.group(1).replace('\\"', '"') if match else ""

    @functools.cached_property
    def callees(self) -> tuple[tuple[str, str], ...]:
        """(attribute, computation) of every computation the instruction runs."""
        if self.opcode.endswith(("-done", "-update")):
            return ()  # the start of an async pair is what runs its computation
        found = list(_SINGLE_CALLEE.findall(self.attributes))
        for key, body in _CALLEE_LIST.findall(self.attributes):
            found.extend((key, callee.lstrip("%")) for callee in _split_top_level(body))
        return tuple(found)

    def operand_names(self) -> list[str]:
        """Operand names without ``%`` (an operand may be spelled ``f32[8] %x``)."""
        names = []
        for operand in _split_top_level(_COMMENT.sub("", self.operands)):  # drop /*index=5*/
            match = _OPERAND_NAME.search(operand.split()[-1])
            if match is not None:
                names.append(match.group(1))
        return names


@dataclasses.dataclass
class _Computation:
    name: str
    is_entry: bool
    instructions: list[_Instruction] = dataclasses.field(default_factory=list)

    def root(self) -> _Instruction | None:
        for instruction in self.instructions:
            if instruction.is_root:
                return instruction
        return self.instructions[-1] if self.instructions else None


_NAME = r"%?([A-Za-z_][\w.\-]*)"
_INSTRUCTION_START = re.compile(r"^\s*(ROOT\s+)?" + _NAME + r"\s*=\s+")
_OP_NAME = re.compile(r'\bop_name="((?:[^"\\]|\\.)*)"')
_OPERAND_NAME = re.compile(r"^%?([A-Za-z_][\w.\-]*)$")
_HEADER = re.compile(r"^(ENTRY\s+)?" + _NAME + r"(?=[\s({])")
_TOKEN = re.compile(r"\S+")
_OPCODE = re.compile(r"\s*([a-z][\w\-]*)\(")


def _matching(text: str, start: int) -> int:
    """Index just past the bracket that closes the one at ``text[start]``."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    i = start
    quoted = False
    while i < len(text):
        char = text[i]
        if quoted:
            if char == "\\":
                i += 1
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in pairs:
            stack.append(pairs[char])
        elif stack and char == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return len(text)


def _parse_instruction(text: str) -> _Instruction | None:
    head = _INSTRUCTION_START.match(text)
    if head is None:
        return None
    pos = head.end()
    if text.startswith("(", pos):
        end = _matching(text, pos)
    else:
        match = _TOKEN.match(text, pos)
        if match is None:
            return None
        end = match.end()
    shape_text = text[pos:end]
    opcode_match = _OPCODE.match(text, end)
    if opcode_match is None:
        return None
    open_paren = opcode_match.end() - 1
    close = _matching(text, open_paren)
    return _Instruction(
        name=head.group(2),
        shape_text=shape_text,
        opcode=opcode_match.group(1),
        operands=text[open_paren + 1:close - 1],
        attributes=text[close:],
        is_root=head.group(1) is not None,
    )


@dataclasses.dataclass(frozen=True)
class _Module:
    computations: dict[str, _Computation]
    entry: str | None
    replica_count: int
    num_partitions: int

    @property
    def num_devices(self) -> int:
        return self.replica_count * self.num_partitions


def _parse_module(hlo_text: str) -> _Module:
    """Computations (in text order) and the header's replica/partition counts."""
    computations: dict[str, _Computation] = {}
    entry: str | None = None
    replica_count = num_partitions = 1
    current: _Computation | None = None
    pending: list[str] = []

    def flush() -> None:
        if current is not None and pending:
            instruction = _parse_instruction(" ".join(pending))
            if instruction is not None:
                current.instructions.append(instruction)
        pending.clear()

    for raw in hlo_text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        if line.startswith("HloModule"):
            replicas = re.search(r"[\s,]replica_count=(\d+)", line)
            partitions = re.search(r"[\s,]num_partitions=(\d+)", line)
            replica_count = int(replicas.group(1)) if replicas else 1
            num_partitions = int(partitions.group(1)) if partitions else 1
            continue
        if current is None:
            match = _HEADER.match(line)
            if match is not None and line.endswith("{"):
                current = _Computation(match.group(2), match.group(1) is not None)
                computations[current.name] = current
                if current.is_entry:
                    entry = current.name
            continue
        if line.startswith("}"):
            flush()
            current = None
            continue
        if _INSTRUCTION_START.match(line):
            flush()
        pending.append(stripped)
    flush()
    return _Module(computations, entry, replica_count, num_partitions)


# ---------------------------------------------------------------------------
# Device groups

_IOTA_GROUPS = re.compile(r"\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_MESH = re.compile(r"mesh\[([^\]]*)\]")
_MESH_AXIS = re.compile(r"""^(?:'([^']*)'|"([^"]*)"|([\w.\-]+))=(\d+)$""")
_AXIS_REF = re.compile(r"""^(?:'([^']*)'|"([^"]*)"|([\w.\-]+))(?::\((\d+)\)(\d+))?$""")
_IOTA_LIST = re.compile(r"^\[([\d,]+)\](?:T\(([\d,]+)\))?$")


class _GroupsError(ValueError):
    """A device-group attribute in a form that is not understood."""


def _iota(dims: Sequence[int], perm: Sequence[int] | None) -> np.ndarray:
    """iota(prod(dims)) reshaped to ``dims``, transposed by ``perm``, flattened."""
    array = np.arange(math.prod(dims), dtype=np.int64).reshape(tuple(dims))
    if perm is not None:
        if sorted(perm) != list(range(len(dims))):
            raise _GroupsError(f"T({','.join(map(str, perm))}) is no permutation of {len(dims)} dims")
        array = array.transpose(tuple(perm))
    return array.reshape(-1)


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _attribute_value(attributes: str, key: str) -> str | None:
    """The raw text after ``key=`` (up to the next top-level ``, word=``), or None."""
    match = re.search(r"(?:^|[\s,])" + re.escape(key) + r"=", attributes)
    if match is None:
        return None
    start = match.end()
    i = start
    while i < len(attributes):
        char = attributes[i]
        if char in "([{":
            i = _matching(attributes, i)
            continue
        if char == "," and re.match(r",\s*[a-z_]+=", attributes[i:]):
            if not attributes[i:].lstrip(", ").startswith("device_ids="):
                break
        i += 1
    return attributes[start:i].strip()


def _explicit_groups(text: str) -> list[list[int]]:
    if not (text.startswith("{") and text.endswith("}")):
        raise _GroupsError("not a list of lists")
    inner = text[1:-1].strip()
    groups = []
    for part in _split_top_level(inner):
        if not (part.startswith("{") and part.endswith("}")):
            raise _GroupsError("not a list of lists")
        body = part[1:-1]
        if not re.fullmatch(r"[\d,\s]*", body):
            raise _GroupsError("a group holds something other than integers")
        groups.append(_ints(body))
    return groups


def _mesh_groups(text: str) -> list[list[int]]:
    """Groups of ``mesh['a'=2,'b'=4][, device_ids=(...)] {'a'}``."""
    match = _MESH.match(text)
    if match is None:
        raise _GroupsError("not a mesh")
    names: list[str] = []
    sizes: list[int] = []
    for part in _split_top_level(match.group(1)):
        axis = _MESH_AXIS.match(part)
        if axis is None:
            raise _GroupsError(f"mesh axis {part!r}")
        names.append(next(g for g in axis.groups()[:3] if g is not None))
        sizes.append(int(axis.group(4)))
    rest = text[match.end():].strip()
    total = math.prod(sizes)
    devices = np.arange(total, dtype=np.int64)
    if rest.startswith(","):
        ids = re.match(r",\s*device_ids=\(", rest)
        if ids is None:
            raise _GroupsError(f"mesh attribute {rest!r}")
        close = _matching(rest, ids.end() - 1)
        iota = _IOTA_LIST.match(rest[ids.end():close - 1].strip())
        if iota is None:
            raise _GroupsError("device_ids that are not an iota list")
        dims = _ints(iota.group(1))
        perm = _ints(iota.group(2)) if iota.group(2) else None
        if math.prod(dims) != total:
            raise _GroupsError("device_ids of another size than the mesh")
        devices = _iota(dims, perm)
        rest = rest[close:].strip()
    if not (rest.startswith("{") and rest.endswith("}")):
        raise _GroupsError("no axes in braces after the mesh")
    refs: list[tuple[int, int | None, int | None]] = []
    for part in _split_top_level(rest[1:-1]):
        ref = _AXIS_REF.match(part)
        if ref is None:
            raise _GroupsError(f"axis {part!r}")
        name = next(g for g in ref.groups()[:3] if g is not None)
        if name not in names:
            raise _GroupsError(f"axis {name!r} is not in the mesh")
        pre = int(ref.group(4)) if ref.group(4) else None
        size = int(ref.group(5)) if ref.group(5) else None
        refs.append((names.index(name), pre, size))
    return _axes_groups(devices, sizes, refs)


def _axes_groups(
    devices: np.ndarray, sizes: Sequence[int], refs: Sequence[tuple[int, int | None, int | None]]
) -> list[list[int]]:
    """Groups of devices that agree on every mesh (sub-)axis not in ``refs``.

    A reference ``(axis, pre, size)`` with ``pre`` set is the sub-axis of
    ``size`` whose more major part on that axis has ``pre`` elements.
    """
    dims: list[int] = []
    grouped: list[int] = [-1] * len(refs)
    for axis, axis_size in enumerate(sizes):
        on_axis = [(i, pre, size) for i, (a, pre, size) in enumerate(refs) if a == axis]
        if not on_axis:
            dims.append(axis_size)
            continue
        if any(pre is None for _, pre, _ in on_axis):
            if len(on_axis) > 1:
                raise _GroupsError("an axis named twice")
            grouped[on_axis[0][0]] = len(dims)
            dims.append(axis_size)
            continue
        prefix = 1
        for i, pre, size in sorted(on_axis, key=lambda item: item[1]):
            if pre < 1 or size is None or size < 1:
                raise _GroupsError("a sub-axis of no size")
            if pre % prefix:
                raise _GroupsError("overlapping sub-axes")
            if pre > prefix:
                dims.append(pre // prefix)
            grouped[i] = len(dims)
            dims.append(size)
            prefix = pre * size
        if axis_size % prefix:
            raise _GroupsError("a sub-axis that does not divide its axis")
        if axis_size > prefix:
            dims.append(axis_size // prefix)
    array = devices.reshape(tuple(dims))
    order = [d for d in range(len(dims)) if d not in grouped] + grouped
    group_size = math.prod(dims[d] for d in grouped)
    return array.transpose(order).reshape(-1, group_size).tolist()


@functools.lru_cache(maxsize=256)
def _replica_groups(text: str, num_devices: int) -> tuple[tuple[int, ...], ...]:
    """Explicit groups from any ``replica_groups=`` spelling; `_GroupsError` if unknown."""
    return tuple(tuple(int(i) for i in group) for group in _replica_groups_lists(text, num_devices))


def _replica_groups_lists(text: str, num_devices: int) -> list[list[int]]:
    if text.startswith("mesh["):
        return _mesh_groups(text)
    iota = _IOTA_GROUPS.fullmatch(text)
    if iota is not None:
        count, size = int(iota.group(1)), int(iota.group(2))
        dims = _ints(iota.group(3))
        if count * size != math.prod(dims):
            raise _GroupsError("iota groups of another size than their devices")
        perm = _ints(iota.group(4)) if iota.group(4) else None
        return _iota(dims, perm).reshape(count, size).tolist()
    groups = _explicit_groups(text)
    if not groups:
        return [list(range(num_devices))]
    return groups


# ---------------------------------------------------------------------------
# Call graph and loop multiplicity

_KNOWN_TRIP_COUNT = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)"?')
_SINGLE_CALLEE = re.compile(
    r"(?:^|[\s,])(condition|body|calls|to_apply|select|scatter|true_computation|"
    r"false_computation|comparator)=" + _NAME
)
_CALLEE_LIST = re.compile(r"(?:^|[\s,])(branch_computations|called_computations|calls)=\{([^}]*)\}")


@dataclasses.dataclass(frozen=True)
class _Call:
    """``caller`` runs ``callee`` ``factor`` times (None: unknown) per execution."""

    caller: str
    callee: str
    factor: int | None
    unknown_loop: str = ""
    conditional: str = ""


def _describe(instruction: _Instruction) -> str:
    op_name = instruction.op_name
    return f"{instruction.name} ({op_name})" if op_name else instruction.name


def _calls(module: _Module) -> list[_Call]:
    return [
        _edge(computation.name, callee, key, instruction)
        for computation in module.computations.values()
        for instruction in computation.instructions
        for key, callee in instruction.callees
        if callee in module.computations
    ]


def _program_order(module: _Module) -> dict[tuple[str, int], int]:
    """Rank of every (computation, instruction position) in program order.

    From ENTRY, instruction by instruction; a called computation is walked where
    it is first called. Computations never reached follow, in text order.
    """
    rank: dict[tuple[str, int], int] = {}
    seen: set[str] = set()

    def walk(name: str) -> None:
        stack = [(name, 0)]
        seen.add(name)
        while stack:
            current, start = stack.pop()
            instructions = module.computations[current].instructions
            for position in range(start, len(instructions)):
                rank[(current, position)] = len(rank)
                callees = [callee for _, callee in instructions[position].callees
                           if callee in module.computations and callee not in seen]
                if callees:
                    stack.append((current, position + 1))
                    for callee in reversed(callees):
                        seen.add(callee)
                        stack.append((callee, 0))
                    break

    if module.entry is not None:
        walk(module.entry)
    for name in module.computations:
        if name not in seen:
            walk(name)
    return rank


def _edge(caller: str, callee: str, key: str, instruction: _Instruction) -> _Call:
    if instruction.opcode == "while" and key in ("body", "condition"):
        trip = _KNOWN_TRIP_COUNT.search(instruction.attributes)
        if trip is None:
            return _Call(caller, callee, None, unknown_loop=_describe(instruction))
        count = int(trip.group(1))
        return _Call(caller, callee, count if key == "body" else count + 1)
    if instruction.opcode == "conditional":
        return _Call(caller, callee, 1, conditional=_describe(instruction))
    return _Call(caller, callee, 1)


@dataclasses.dataclass(frozen=True)
class _Runs:
    """How often a computation runs, and the unknowns behind that figure."""

    executions: int | None
    unknown_loops: tuple[str, ...] = ()
    conditionals: tuple[str, ...] = ()
    reachable: bool = True


def _merge(*names: Sequence[str]) -> tuple[str, ...]:
    merged: list[str] = []
    for group in names:
        for name in group:
            if name not in merged:
                merged.append(name)
    return tuple(merged)


def _runs(module: _Module) -> dict[str, _Runs]:
    """Executions of every computation per execution of ENTRY."""
    callers: dict[str, list[_Call]] = {}
    for call in _calls(module):
        callers.setdefault(call.callee, []).append(call)
    memo: dict[str, _Runs] = {}

    def visit(name: str, active: frozenset[str]) -> _Runs:
        if name in memo:
            return memo[name]
        if name == module.entry:
            result = _Runs(1)
        elif name in active:  # a cycle: not valid HLO, say unknown
            return _Runs(None)
        else:
            total: int | None = 0
            loops: tuple[str, ...] = ()
            conditionals: tuple[str, ...] = ()
            reachable = False
            for call in callers.get(name, []):
                parent = visit(call.caller, active | {name})
                if not parent.reachable:
                    continue
                reachable = True
                loops = _merge(loops, parent.unknown_loops, [call.unknown_loop] if call.unknown_loop else [])
                conditionals = _merge(conditionals, parent.conditionals,
                                      [call.conditional] if call.conditional else [])
                if total is None or parent.executions is None or call.factor is None:
                    total = None
                else:
                    total += parent.executions * call.factor
            result = _Runs(total if reachable else 0, loops, conditionals, reachable)
        memo[name] = result
        return result

    return {name: visit(name, frozenset()) for name in module.computations}


_CUSTOM_CALL_TARGET = re.compile(r"custom_call_target=\"([^\"]+)\"")

_BOOKKEEPING_TARGETS = frozenset({
    "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "AllocateBuffer",
    "annotate_device_placement", "MoveToHost", "MoveToDevice", "LayoutConstraint",
})
"""Custom calls that do no arithmetic (sharding and placement annotations)."""


def custom_call_targets(hlo_text: str) -> dict[str, int]:
    """How many custom calls of each target the HLO text holds
    (``__cublas$gemm``, ``__cudnn$convForward``, ...), annotations that do no
    arithmetic left out."""
    counts: dict[str, int] = {}
    for line in hlo_text.splitlines():
        if " custom-call(" not in line:
            continue
        found = _CUSTOM_CALL_TARGET.search(line)
        target = found.group(1) if found else "?"
        if target not in _BOOKKEEPING_TARGETS:
            counts[target] = counts.get(target, 0) + 1
    return counts


def has_while_loop(hlo_text: str) -> bool:
    """Whether the HLO text keeps a ``while`` instruction (a loop XLA did not unroll)."""
    module = _parse_module(hlo_text)
    return any(
        instruction.opcode == "while"
        for computation in module.computations.values()
        for instruction in computation.instructions
    )


# ---------------------------------------------------------------------------
# Collectives

_SYNC = {kind: kind for kind in KINDS}
_ASYNC_STARTS = {f"{kind}-start": kind for kind in KINDS}


def _async_result(opcode: str, shape: _Shape) -> _Shape:
    """The operation's result inside the result of an async ``*-start``."""
    if opcode == "all-reduce-start" or isinstance(shape, _Array):
        return shape  # all-reduce-start returns the reduced buffer(s) itself
    if opcode == "all-gather-start":
        return shape[-1]  # (operand(s), output(s))
    # collective-permute-start: (operand, output, contexts...); the async
    # wrappers (reduce-scatter-start, all-to-all-start, async-start, ...):
    # ((operands...), output, context...)
    return shape[1] if len(shape) > 1 else shape[0]


def _done_shapes(computation: _Computation) -> dict[str, str]:
    """The result text of the ``*-done`` of every async start in ``computation``."""
    by_name = {instruction.name: instruction for instruction in computation.instructions}
    shapes: dict[str, str] = {}
    for instruction in computation.instructions:
        if not instruction.opcode.endswith("-done"):
            continue
        operands = instruction.operand_names()
        source = by_name.get(operands[0]) if operands else None
        while source is not None and source.opcode.endswith("-update"):
            inner = source.operand_names()
            source = by_name.get(inner[0]) if inner else None
        if source is not None:
            shapes[source.name] = instruction.shape_text
    return shapes


def parse_collectives(hlo_text: str) -> tuple[tuple[HloCollective, ...], tuple[str, ...]]:
    """Every collective of a compiled HLO module, in program order.

    Args:
      hlo_text: ``Compiled.as_text()`` of an SPMD-partitioned program.

    Returns:
      The collectives (in the order ENTRY runs them, a called computation's
      where it is first called), and notes that say what was unknown or approximate: an
      unparsed ``replica_groups`` format, a loop without known trip count (its
      name and op_name), a conditional whose branches are counted as if each
      ran once, a collective in a computation never called from ENTRY.
    """
    module = _parse_module(hlo_text)
    runs = _runs(module)
    notes: list[str] = []
    if module.entry is None and module.computations:
        notes.append("no ENTRY computation found: executions unknown")
    wrapped_roots: set[tuple[str, str]] = set()
    found: list[tuple[int, HloCollective]] = []
    order = _program_order(module)
    for computation in module.computations.values():
        done_shapes = _done_shapes(computation)
        for position, instruction in enumerate(computation.instructions):
            source = instruction
            asynchronous = False
            kind = _SYNC.get(instruction.opcode)
            if kind is None and instruction.opcode in _ASYNC_STARTS:
                kind, asynchronous = _ASYNC_STARTS[instruction.opcode], True
            if kind is None and instruction.opcode == "async-start":
                wrapped = _wrapped_collective(module, instruction)
                if wrapped is not None:
                    source = wrapped[1]
                    kind, asynchronous = source.opcode, True
                    wrapped_roots.add((wrapped[0], source.name))
            if kind is None:
                continue
            collective = _collective(
                module, computation, instruction, source, kind, asynchronous,
                done_shapes.get(instruction.name), runs.get(computation.name), notes,
            )
            found.append((order[(computation.name, position)], collective))
    listed = [c for _, c in sorted(found, key=lambda item: item[0])
              if (c.computation, c.name) not in wrapped_roots]
    return tuple(listed), tuple(_merge(notes))


def _wrapped_collective(module: _Module, start: _Instruction) -> tuple[str, _Instruction] | None:
    """(computation, root) of the computation an ``async-start`` wraps, if a collective."""
    match = re.search(r"(?:^|[\s,])calls=" + _NAME, start.attributes)
    if match is None:
        return None
    wrapped = module.computations.get(match.group(1))
    root = wrapped.root() if wrapped is not None else None
    if root is None or (root.opcode not in _SYNC):
        return None
    return wrapped.name, root


def _collective(
    module: _Module,
    computation: _Computation,
    instruction: _Instruction,
    source: _Instruction,
    kind: str,
    asynchronous: bool,
    done_shape: str | None,
    runs: _Runs | None,
    notes: list[str],
) -> HloCollective:
    label = f"{kind} {instruction.name} in {computation.name}"
    shape = _parse_shape(done_shape) if done_shape is not None else None
    if shape is None:
        shape = _parse_shape(instruction.shape_text)
        if shape is not None and asynchronous:
            shape = _async_result(instruction.opcode, shape)
    result_bytes = _shape_bytes(shape) if shape is not None else None
    if result_bytes is None:
        notes.append(f"{label}: result shape {instruction.shape_text!r} not understood; bytes counted as 0")
        result_bytes = 0
    dtype = _shape_dtypes(shape) if shape is not None else ""

    groups, group_size = _groups(module, kind, source, label, notes)
    nbytes = result_bytes
    if kind == "reduce-scatter":
        if group_size is None:
            notes.append(f"{label}: group size unknown; bytes is the scattered result only")
        else:
            nbytes = result_bytes * group_size

    executions: int | None
    if module.entry is None or runs is None:
        executions = None
    else:
        executions = runs.executions
        for loop in runs.unknown_loops:
            notes.append(
                f"while loop {loop} has no known trip count: executions of the collectives in it unknown"
            )
        for conditional in runs.conditionals:
            notes.append(f"conditional {conditional}: each branch counted as if it ran once")
        if not runs.reachable:
            notes.append(f"{label}: computation never called from ENTRY (0 executions)")
    return HloCollective(
        kind=kind,
        name=instruction.name,
        computation=computation.name,
        op_name=instruction.op_name or source.op_name,
        dtype=dtype,
        result_bytes=result_bytes,
        bytes=nbytes,
        groups=groups,
        group_size=group_size,
        executions=executions,
        asynchronous=asynchronous,
    )


def _groups(
    module: _Module, kind: str, source: _Instruction, label: str, notes: list[str]
) -> tuple[tuple[tuple[int, ...], ...] | None, int | None]:
    if kind == "collective-permute":
        text = _attribute_value(source.attributes, "source_target_pairs")
        try:
            pairs = _explicit_groups(text or "")
            if any(len(pair) != 2 for pair in pairs):
                raise _GroupsError("a pair of other than two ids")
        except _GroupsError:
            notes.append(f"{label}: source_target_pairs {text!r} not understood; groups unknown")
            return None, None
        return tuple(tuple(pair) for pair in pairs), 2
    text = _attribute_value(source.attributes, "replica_groups")
    try:
        raw = _replica_groups(text if text is not None else "{}", module.num_devices)
    except (_GroupsError, ValueError) as exc:
        notes.append(f"{label}: replica_groups={text} not understood ({exc}); groups unknown")
        return None, None
    mixed = module.replica_count > 1 and module.num_partitions > 1
    if mixed and "use_global_device_ids=true" not in source.attributes:
        notes.append(
            f"{label}: replica_groups without use_global_device_ids in a module of "
            f"{module.replica_count} replicas x {module.num_partitions} partitions: ids read as "
            "written (replica or partition ids), not global device ids"
        )
    groups = raw
    sizes = {len(group) for group in groups}
    return groups, (sizes.pop() if len(sizes) == 1 else None)


# ---------------------------------------------------------------------------
# Mesh axes


def group_axes(groups: Sequence[Sequence[int]], mesh_shape: Mapping[str, int]) -> tuple[str, ...]:
    """The mesh axes a collective's device groups span.

    Args:
      groups: device groups of global device ids (`HloCollective.groups`).
      mesh_shape: the mesh's axes in order, name to size (``Mesh.shape``);
        device ``i`` sits at ``np.unravel_index(i, sizes)``, the row-major order
        of ``jax.sharding.Mesh.devices``.

    Returns:
      The axes along which the coordinate varies within some group, in mesh
      order; empty for groups of one device.

    Raises:
      ValueError: a device id outside the mesh.
    """
    names = list(mesh_shape)
    sizes = tuple(int(mesh_shape[name]) for name in names)
    total = math.prod(sizes)
    spanned = [False] * len(names)
    for group in groups:
        ids = np.asarray(list(group), dtype=np.int64)
        if ids.size < 2:
            continue
        if ids.min() < 0 or ids.max() >= total:
            raise ValueError(f"device ids {sorted(set(ids.tolist()))} outside a mesh of {total} devices")
        coords = np.unravel_index(ids, sizes)
        for axis, coord in enumerate(coords):
            if not spanned[axis] and np.any(coord != coord[0]):
                spanned[axis] = True
    return tuple(name for name, span in zip(names, spanned) if span)
