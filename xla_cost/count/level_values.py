"""What the values of one classified level of a user's step are (`xla_cost.count.step_parts`): the
values its forward work makes (`made_from_forward`), its losses (`losses`), the activations its
forward keeps for its backward pass (`saved_values`), and its nodes at any depth (`every_node`).

A level is a jaxpr as the step classifier flattens it: ``nodes`` (each with ``eqn``, ``part``, ``ins``,
``outs`` and ``levels``: a loop's bodies or a cond's branches), ``invars`` and ``outvars``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xla_cost.count.jaxpr_values import broadcast_scalar, float_scalar
from xla_cost.count.primitives import VIEWS
from xla_cost.step.phases import STEP_PARTS
from xla_cost.step.trees import nbytes

__all__ = ["MIXED", "every_node", "losses", "made_from_forward", "saved_values"]

FORWARD, BACKWARD, _UPDATE, OTHER = STEP_PARTS

MIXED = "mixed"
"""The consumer label of a loop whose body holds several parts: it keeps its
operands' producers as they are."""


def made_from_forward(level: Any) -> set[Any]:
    """The values of ``level`` its forward work computes, and those work outside autodiff makes of
    them alone (no gradient: a BatchNorm's new batch statistics averaged over devices)."""
    made: set[Any] = set()
    for node in level.nodes:
        if not node.levels and (node.part == FORWARD or (node.part == OTHER and any(v in made for v in node.ins))):
            made.update(v for v in node.outs if v is not None)
    return made


def losses(top: Any) -> list[bool]:
    """Per result of the step, whether it is its loss: a float scalar the forward work makes (a metric
    computed from the outputs, an accuracy, is other work: `xla_cost.count.aux_metrics`), not any float scalar."""
    made = {var: node.part for node in top.nodes for var in node.outs}
    return [var is not None and float_scalar(var) and made.get(var) == FORWARD for var in top.outvars]


def saved_values(level: Any, readers: Mapping[Any, set[str]] | None = None) -> dict[Any, int]:
    """The bytes of the values the forward work of ``level`` computes and the backward
    work reads (a loop of several parts counts as reading them), by value."""
    if readers is None:
        readers = {}
        for node in level.nodes:
            if node.levels:
                parts = set().union(*(inner.parts() for inner in node.levels))
                part = parts.pop() if len(parts) == 1 else MIXED
            else:
                part = node.part
            for var in node.ins:
                if var is not None:
                    readers.setdefault(var, set()).add(part)
    saved = {}
    arguments = {var for var in level.invars if var is not None}  # and the views of them (`VIEWS`): their buffers
    for node in level.nodes:
        if node.eqn.primitive.name in VIEWS and node.ins and node.ins[0] in arguments:
            arguments.update(var for var in node.outs if var is not None)
            continue
        if node.part != FORWARD or broadcast_scalar(node.eqn):
            continue
        for var, out in zip(node.outs, node.eqn.outvars):
            if BACKWARD in readers.get(var, ()) or MIXED in readers.get(var, ()):
                saved[var] = nbytes(out.aval)  # (a typed PRNG key included)
    return saved


def every_node(level: Any) -> Any:
    """Every node of ``level`` and of its loops' bodies and branches, each before those it holds."""
    for node in level.nodes:
        yield node
        for inner in node.levels:
            yield from every_node(inner)
