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

The HLO is read with `xla_cost.compiled.hlo`; only the standard library and
numpy are used (no jax), so HLO text from any source can be read.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xla_cost.compiled.hlo import (
    NAME_PATTERN, Array, Computation, Instruction, Module, Shape, attribute_value, computation_runs,
    Runs, matching_bracket, merge_names, parse_module, parse_shape, program_order, shape_bytes,
    shape_dtypes, split_top_level,
)

__all__ = ["KINDS", "HloCollective", "parse_collectives", "group_axes"]

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
      op_name: the ``op_name`` of its metadata (the jax name stack); where it
        has none (a GPU's combined all-reduce), its operands' (`_combined_name`),
        ``""`` where none of them has one.
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


def _explicit_groups(text: str) -> list[list[int]]:
    if not (text.startswith("{") and text.endswith("}")):
        raise _GroupsError("not a list of lists")
    inner = text[1:-1].strip()
    groups = []
    for part in split_top_level(inner):
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
    for part in split_top_level(match.group(1)):
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
        close = matching_bracket(rest, ids.end() - 1)
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
    for part in split_top_level(rest[1:-1]):
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
# Collectives

_SYNC = {kind: kind for kind in KINDS}

_ASYNC_STARTS = {f"{kind}-start": kind for kind in KINDS}


def _async_result(opcode: str, shape: Shape) -> Shape:
    """The operation's result inside the result of an async ``*-start``."""
    if opcode == "all-reduce-start" or isinstance(shape, Array):
        return shape  # all-reduce-start returns the reduced buffer(s) itself
    if opcode == "all-gather-start":
        return shape[-1]  # (operand(s), output(s))
    # collective-permute-start: (operand, output, contexts...); the async
    # wrappers (reduce-scatter-start, all-to-all-start, async-start, ...):
    # ((operands...), output, context...)
    return shape[1] if len(shape) > 1 else shape[0]


def _done_shapes(computation: Computation) -> dict[str, str]:
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
    module = parse_module(hlo_text)
    runs = computation_runs(module)
    notes: list[str] = []
    if module.entry is None and module.computations:
        notes.append("no ENTRY computation found: executions unknown")
    wrapped_roots: set[tuple[str, str]] = set()
    found: list[tuple[int, HloCollective]] = []
    order = program_order(module)
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
    return tuple(listed), tuple(merge_names(notes))


def _wrapped_collective(module: Module, start: Instruction) -> tuple[str, Instruction] | None:
    """(computation, root) of the computation an ``async-start`` wraps, if a collective."""
    match = re.search(r"(?:^|[\s,])calls=" + NAME_PATTERN, start.attributes)
    if match is None:
        return None
    wrapped = module.computations.get(match.group(1))
    root = wrapped.root() if wrapped is not None else None
    if root is None or (root.opcode not in _SYNC):
        return None
    return wrapped.name, root


def _collective(
    module: Module,
    computation: Computation,
    instruction: Instruction,
    source: Instruction,
    kind: str,
    asynchronous: bool,
    done_shape: str | None,
    runs: Runs | None,
    notes: list[str],
) -> HloCollective:
    label = f"{kind} {instruction.name} in {computation.name}"
    shape = parse_shape(done_shape) if done_shape is not None else None
    if shape is None:
        shape = parse_shape(instruction.shape_text)
        if shape is not None and asynchronous:
            shape = _async_result(instruction.opcode, shape)
    result_bytes = shape_bytes(shape) if shape is not None else None
    if result_bytes is None:
        notes.append(f"{label}: result shape {instruction.shape_text!r} not understood; bytes counted as 0")
        result_bytes = 0
    dtype = shape_dtypes(shape) if shape is not None else ""

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
        op_name=instruction.op_name or source.op_name or _combined_name(module, computation, instruction),
        dtype=dtype,
        result_bytes=result_bytes,
        bytes=nbytes,
        groups=groups,
        group_size=group_size,
        executions=executions,
        asynchronous=asynchronous,
    )


_PASSES_ON = frozenset({"bitcast", "copy", "reshape", "concatenate", "tuple", "get-tuple-element"})
"""Opcodes that pass their operands' elements on unchanged: the packing of the buffers XLA's
combiner reduces in one collective (a concatenate of bitcasts, on a GPU fused alone)."""


def _combined_name(module: Module, computation: Computation, collective: Instruction) -> str:
    """The ``op_name`` of a collective that has none (a GPU's combined all-reduce): its operands',
    found through instructions that only pass elements on (`_PASSES_ON`, a fusion of nothing
    else) and have no name of their own. One name where they all have it; else XLA's combiner's
    own form, ``jit(f)/(a/dot_general:b/reduce_sum)``, one member per buffer packed (their common
    ``jit(...)`` entries before the parentheses); ``""`` where none is named (an argument's)."""
    by_name = {instruction.name: instruction for instruction in computation.instructions}
    members: list[str] = []
    seen: set[str] = set()
    pending = list(reversed(collective.operand_names()))
    while pending:
        name = pending.pop()
        instruction = by_name.get(name)
        if instruction is None or name in seen or instruction.opcode == "parameter":
            continue
        seen.add(name)
        if instruction.op_name:
            members.append(instruction.op_name)
            continue
        operands = instruction.operand_names()
        if instruction.opcode == "get-tuple-element" and operands:
            inner = by_name.get(operands[0])
            index = re.search(r"\bindex=(\d+)", instruction.attributes)
            if inner is not None and inner.opcode == "tuple" and not inner.op_name and index is not None:
                operands = inner.operand_names()[int(index.group(1)):][:1]
        elif not (instruction.opcode in _PASSES_ON or _moves_only(module, instruction)):
            continue
        pending.extend(reversed(operands))
    if len(set(members)) <= 1:
        return members[0] if members else ""
    entries = [_entries(member) for member in members]
    common = 0
    while all(len(e) > common + 1 and e[common] == entries[0][common] and e[common].startswith("jit(")
              for e in entries):
        common += 1
    prefix = "".join(entry + "/" for entry in entries[0][:common])
    return prefix + "(" + ":".join("/".join(e[common:]) for e in entries) + ")"


def _moves_only(module: Module, instruction: Instruction) -> bool:
    """Whether ``instruction`` is a fusion of parameters and `_PASSES_ON` alone (a wrapped concatenate)."""
    if instruction.opcode != "fusion":
        return False
    called = [module.computations.get(callee) for key, callee in instruction.callees if key == "calls"]
    return len(called) == 1 and called[0] is not None and all(
        i.opcode in _PASSES_ON or i.opcode == "parameter" for i in called[0].instructions)


def _entries(op_name: str) -> list[str]:
    """An ``op_name`` split on the ``/`` outside parentheses."""
    entries, depth, start = [], 0, 0
    for position, char in enumerate(op_name):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "/" and depth == 0:
            entries.append(op_name[start:position])
            start = position + 1
    entries.append(op_name[start:])
    return [entry for entry in entries if entry]


def _groups(
    module: Module, kind: str, source: Instruction, label: str, notes: list[str]
) -> tuple[tuple[tuple[int, ...], ...] | None, int | None]:
    if kind == "collective-permute":
        text = attribute_value(source.attributes, "source_target_pairs")
        try:
            pairs = _explicit_groups(text or "")
            if any(len(pair) != 2 for pair in pairs):
                raise _GroupsError("a pair of other than two ids")
        except _GroupsError:
            notes.append(f"{label}: source_target_pairs {text!r} not understood; groups unknown")
            return None, None
        return tuple(tuple(pair) for pair in pairs), 2
    text = attribute_value(source.attributes, "replica_groups")
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
