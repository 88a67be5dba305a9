"""What a TPU program moves between its device and its host's memory: an activation a remat policy
offloads (`xla_cost.step.remat`'s ``custom`` policies, MaxText's ``remat_policy: custom``) written to a
stack in the host's memory space (`xla_cost.compiled.shapes.HOST_SPACE`) and read back. Only the
standard library is used."""

from __future__ import annotations

from collections.abc import Mapping

from xla_cost.compiled.hlo import Instruction, parse_shape
from xla_cost.compiled.shapes import HOST_SPACE, host_memory_bytes, shape_bytes, shape_leaves

__all__ = ["host_transfer_bytes"]

_HOST_MARK = f"S({HOST_SPACE})"
_SLICE_UPDATES = ("dynamic-update-slice", "dynamic-update-slice-start")
_SLICE_READS = ("dynamic-slice", "dynamic-slice-start", "copy", "copy-start")


def host_transfer_bytes(instruction: Instruction, shapes: Mapping[str, str], opcode: str | None = None) -> int | None:
    """The bytes ``instruction`` moves between the device and its host's memory
    (`xla_cost.compiled.shapes.HOST_SPACE`): 0 where none of its operands or
    its result is there. ``instruction``'s shape is its result's (an asynchronous
    start's: its done's); ``shapes`` maps its computation's names to their shape text; ``opcode``:
    the op it runs where that is not its own (an ``async-start``'s wrapped op, whose operands are its).

    A dynamic-update-slice into a host buffer (an offloaded activation written
    into its layer's row of a stack) moves its update; a dynamic-slice or a copy
    from (or to) one moves its result (the row read back, the array copied);
    any other op moves every host array it reads or writes, whole. None where a
    shape is not understood."""
    operands = [shapes.get(name) for name in instruction.operand_names()]
    texts = [instruction.shape_text, *(text for text in operands if text)]
    if not any(_HOST_MARK in text for text in texts):  # most instructions: no host array at all
        return 0
    parsed = [parse_shape(text) for text in texts]
    if not any(leaf.on_host for shape in parsed if shape is not None for leaf in shape_leaves(shape)):
        return 0
    if None in parsed or None in operands:
        return None
    opcode = opcode or instruction.opcode
    if opcode in _SLICE_UPDATES and len(operands) > 1:
        update = parse_shape(operands[1] or "")
        return None if update is None else shape_bytes(update)
    if opcode in _SLICE_READS:
        result = parse_shape(instruction.shape_text)
        if isinstance(result, tuple) and instruction.opcode.endswith("-start"):  # (operands, result, context)
            result = result[1] if len(result) > 1 else None
        return None if result is None else shape_bytes(result)
    moved = [host_memory_bytes(shape) for shape in parsed]
    return None if None in moved else sum(moved)  # type: ignore[arg-type]
