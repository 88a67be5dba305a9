"""What a compiled program's kernels move: `work_bytes` reads an HLO module
(`xla_cost.compiled.hlo`) for the bytes of its matrix products and of the
memory-bound rest, and the kernels it launches, per execution of the program.
The time model prices these where no kernel list is read
(`xla_cost.timemodel.kernel_time.price_totals`).

Only the standard library is used (no jax).
"""

from __future__ import annotations

import dataclasses

from xla_cost.compiled.hlo import (
    ASYNC_WRAPPERS, Module, code_computations, computation_runs, describe_instruction, instruction_bytes, library_call_target,
    parse_module,
)

__all__ = ["WorkBytes", "work_bytes"]


@dataclasses.dataclass(frozen=True)
class WorkBytes:
    """A program's bytes by the kind of work that moves them, per execution.

    Attributes:
      matmul: operands and results of matrix products and convolutions (``dot``,
        ``convolution``, a fusion that holds one, a library call).
      other: operands and results of everything else that runs code (fusions
        and ops outside fusions): the memory-bound work.
      kernels: instructions that run code, each execution counted: on an
        accelerator, about the kernels launched.
      unknown: instructions whose bytes or runs could not be read (``name (op_name)``).
    """

    matmul: int
    other: int
    kernels: int = 0
    unknown: tuple[str, ...] = ()


_NO_CODE = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while", "call", "conditional",
    "after-all", "partition-id", "replica-id", "opt-barrier", "add-dependency", "domain",
})
"""Opcodes that move no data of their own (a called computation's work is counted where it runs)."""

_COLLECTIVE_PREFIXES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                        "send", "recv", "collective-broadcast")
"""Opcodes priced as communication, not memory traffic."""

_MATMULS = frozenset({"dot", "convolution"})


def work_bytes(hlo_text: str) -> WorkBytes:
    """The operand and result bytes of every instruction that runs code, split
    into matrix products and the memory-bound rest (`WorkBytes`), per
    execution of the program.

    A fusion counts as one instruction (its operands and result: what it reads
    from and writes to memory), a matrix product if its fused computation holds
    a ``dot`` or ``convolution``; a library call (cuBLAS, cuDNN) is a matrix
    product; collectives are communication and left out, as are instructions
    that run no code (parameters, tuples, bitcasts, loops and calls, whose
    computations count where they run). Only the computations that run as code
    of their own are read (`xla_cost.compiled.hlo.code_computations`): a reduction's or sort's
    computation runs inside the instruction that names it, not as a kernel. What an instruction does not touch
    is left out (`xla_cost.compiled.hlo.instruction_bytes`): the unread part of an operand it slices,
    a buffer it updates in place. An instruction inside a loop counts once per
    iteration (`xla_cost.compiled.hlo.computation_runs`); one whose loop has no known trip count is
    listed in ``unknown`` and counted once.
    """
    module = parse_module(hlo_text)
    runs = computation_runs(module)
    holds_matmul: dict[str, bool] = {}
    matmul = other = kernels = 0
    unknown: list[str] = []
    for name in code_computations(module):
        computation = module.computations[name]
        executions = runs[name].executions
        if executions == 0:
            continue
        shapes = {i.name: i.shape_text for i in computation.instructions}
        for instruction in computation.instructions:
            opcode = instruction.opcode
            if (opcode in _NO_CODE or opcode in ASYNC_WRAPPERS or opcode.startswith(_COLLECTIVE_PREFIXES)
                    or opcode.endswith(("-done", "-update"))):
                continue  # (an asynchronous start's op counts in its own computation)
            if opcode == "custom-call" and library_call_target(instruction) is None:
                continue  # an annotation (sharding, placement): no arithmetic
            kernels += executions or 1
            size = instruction_bytes(instruction, shapes, module)
            if size is None or executions is None:
                unknown.append(describe_instruction(instruction))
                if size is None:
                    continue
            size *= executions or 1
            if opcode in _MATMULS or opcode == "custom-call" or (
                    opcode == "fusion" and any(_holds_matmul(callee, module, holds_matmul)
                                               for _, callee in instruction.callees)):
                matmul += size
            else:
                other += size
    return WorkBytes(matmul, other, kernels, tuple(unknown))




def _holds_matmul(name: str, module: Module, memo: dict[str, bool]) -> bool:
    """Whether the fused computation ``name`` holds a ``dot`` or ``convolution``."""
    found = memo.get(name)
    if found is None:
        computation = module.computations.get(name)
        found = memo[name] = computation is not None and any(i.opcode in _MATMULS for i in computation.instructions)
    return found
