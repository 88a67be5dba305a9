"""The kernels an eager framework launches, read from the unfused program that stands for its own.

An eager framework (PyTorch without a compiler) launches a kernel for each
operator the model's code calls, where XLA fuses them. Compiled with XLA's
fusion passes off (`xla_cost.compiled.xla.EAGER_OPTIONS`), the GPU compiler's
``fusion-wrapper`` puts each remaining operation in a kernel of its own
(``wrapped_<opcode>``), which is closer, but not the same: XLA writes out
the broadcasts and reshapes PyTorch takes as views (`EAGER_VIEWS`), and
decomposes operators PyTorch runs as one kernel (its softmax, apex's fused
LayerNorm, a scripted GeLU) into several. `eager_kernels` leaves the views out
and makes the operations of one call of the model's code in one pass one
kernel (`eager_groups`), its bytes what it reads from outside and writes for
outside. Only the standard library and the HLO parser are used.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from xla_cost.compiled.hlo import Computation, Instruction, Module, parse_module
from xla_cost.compiled.kernels import Kernel
from xla_cost.compiled.shapes import parse_shape, shape_bytes

__all__ = ["EAGER_VIEWS", "call_scope", "eager_groups", "eager_kernels"]

EAGER_VIEWS = frozenset({"broadcast", "reshape", "bitcast"})
"""Operations an eager framework takes as views, launching nothing: PyTorch
broadcasts a tensor by giving it a stride of 0 (``expand``, and every
elementwise operation's operands), and ``view``/``reshape`` of a contiguous
tensor is new metadata on the same storage. Compiled unfused, XLA writes each
of them out as a kernel of its own; `eager_kernels` leaves those out."""

_STACK_FRAME = re.compile(r"stack_frame_id=(\d+)")


def eager_kernels(hlo_text: str, kernels: Sequence[Kernel]) -> tuple[Kernel, ...]:
    """The kernels an eager framework launches for the unfused program ``hlo_text``
    whose kernel list (`xla_cost.compiled.kernels.kernel_list`) is ``kernels``: a
    kernel that runs one of `EAGER_VIEWS` alone is left out, and the operations of
    one call of the model's code in one pass are one kernel (`eager_groups`), at
    its first operation's place, its bytes its inputs from outside the group (read
    through views to the array behind them; a constant, a scalar in PyTorch's
    call, none) and its results used outside it."""
    module = parse_module(hlo_text)
    views = {(name, i.name) for name, c in module.computations.items() for i in c.instructions
             if _lone_view(module, i)}
    return _merged(module, [k for k in kernels if (k.computation, k.name) not in views])


def eager_groups(module: Module, computation: Computation) -> list[list[Instruction]]:
    """The operations of ``computation`` (of an unfused program) an eager framework
    runs as one kernel each: those, neither matrix products nor library calls nor
    collectives, that one call of the model's code made in one pass (the same
    ``stack_frame_id`` in their metadata, the same `call_scope`:
    ``jvp(GPT)/h_0/attn`` for the forward pass's softmax, its
    recomputation's and its transpose's apart). XLA decomposes PyTorch's
    softmax, apex's fused LayerNorm, a scripted GeLU or a cross-entropy into
    several operations, each a kernel of its own unfused; the framework ran
    each as one. An operation without a stack frame is a group of its own;
    updates in place (a scatter, a dynamic-update-slice) are left as they are
    (not returned), their bytes those `instruction_bytes` counts."""
    groups: dict[tuple[str, str], list[Instruction]] = {}
    for instruction in computation.instructions:
        if instruction.opcode != "fusion" or _lone_view(module, instruction):
            continue
        called = [module.computations.get(c) for _, c in instruction.callees]
        body = called[0] if len(called) == 1 and called[0] is not None else None
        if body is None or any(i.opcode in _NOT_GROUPED for i in body.instructions):
            continue
        frame, op_name = _STACK_FRAME.search(instruction.attributes), instruction.op_name
        key = (frame.group(1), call_scope(op_name)) if frame is not None and "/" in op_name \
            else ("", instruction.name)
        groups.setdefault(key, []).append(instruction)
    return list(groups.values())


def call_scope(op_name: str) -> str:
    """The scope of the call of the model's code an operation was made by, from its ``op_name``:
    the name up to the first function jax traced inside the call (a ``jit(...)`` component after
    the program's own: ``jit(grad)/jvp(GPT)/h_0/attn/jit(_bernoulli)/jit(_uniform)/.../add`` is
    ``jit(grad)/jvp(GPT)/h_0/attn``; jax.random's bits, a `jax.numpy` reduction, `jax.nn`'s
    softmax are jitted functions, nested, whose operations the call made all the same), else the
    name without its last component (the operation's own)."""
    parts = op_name.split("/")
    for index in range(1, len(parts) - 1):
        if parts[index].startswith("jit("):
            return "/".join(parts[:index])
    return op_name.rpartition("/")[0]


_NOT_GROUPED = frozenset({"dot", "convolution", "custom-call", "scatter", "dynamic-update-slice"})
"""Operations `eager_groups` leaves as they are: products and library calls (cuBLAS's in PyTorch too),
and updates in place, whose bytes `instruction_bytes` counts at their updates."""


def _merged(module: Module, kernels: Sequence[Kernel]) -> tuple[Kernel, ...]:
    """``kernels`` with each `eager_groups` group one kernel, at its first operation's
    place: its bytes its inputs from outside the group (read through views to the
    array behind them; a constant, a scalar in PyTorch's call, none) and its results
    used outside it."""
    merged: dict[tuple[str, str], Kernel | None] = {}
    for name, computation in module.computations.items():
        groups = eager_groups(module, computation)
        if not groups:
            continue
        by_name = {i.name: i for i in computation.instructions}
        users: dict[str, list[str]] = {}
        for instruction in computation.instructions:
            for operand in instruction.operand_names():
                users.setdefault(operand, []).append(instruction.name)

        def behind(array: str) -> str:  # through views to the array read
            seen = by_name.get(array)
            while seen is not None and _lone_view(module, seen) and seen.operand_names():
                array = seen.operand_names()[0]
                seen = by_name.get(array)
            return array

        def consumers(array: str) -> list[str]:  # through views to the operations that read it
            found = []
            for user in users.get(array, ()):
                view = by_name.get(user)
                found += consumers(user) if view is not None and _lone_view(module, view) else [user]
            return found

        def size(array: str) -> int:
            found = by_name.get(array)
            shape = parse_shape(found.shape_text) if found is not None else None
            return (shape_bytes(shape) or 0) if shape is not None else 0

        for members in groups:
            inside = {m.name for m in members}
            inputs = {behind(o) for m in members for o in m.operand_names()} - inside
            inputs = {a for a in inputs if a not in by_name or by_name[a].opcode != "constant"}
            outputs = [m.name for m in members if m.is_root or any(c not in inside for c in consumers(m.name))]
            total = sum(size(a) for a in inputs) + sum(size(a) for a in outputs)
            first, *rest = members
            merged[(name, first.name)] = Kernel(name=first.name, category="fusion", kind="kLoop", opcode="fusion",
                                                computation=name,
                                                op_name=first.op_name, bytes=total, executions=None)
            merged.update({(name, m.name): None for m in rest})
    out = []
    for kernel in kernels:
        key = (kernel.computation, kernel.name)
        if key not in merged:
            out.append(kernel)
        elif merged[key] is not None:
            out.append(dataclasses.replace(merged[key], name=kernel.name, executions=kernel.executions))
    return tuple(out)


def _lone_view(module: Module, instruction: Instruction) -> bool:
    """Whether ``instruction`` is one of `EAGER_VIEWS`, alone or as the one operation of a fusion."""
    if instruction.opcode in EAGER_VIEWS:
        return True
    if instruction.opcode != "fusion":
        return False
    called = [module.computations.get(c) for _, c in instruction.callees]
    if len(called) != 1 or called[0] is None:
        return False
    ops = [i.opcode for i in called[0].instructions if i.opcode != "parameter"]
    return len(ops) == 1 and ops[0] in EAGER_VIEWS
