"""Forward work that only the step's metrics read, at any depth of its loops: other, not forward.

An accuracy computed inside the differentiated function and returned beside the loss (``has_aux``:
EasyLM's ``cross_entropy_loss_and_accuracy``, simply's ``compute_train_loss``) is under ``jvp(...)``
like the loss, but it carries no derivative of the loss and only the step's metrics read it: its
argmax, comparison and mean are other work, as the same accuracy computed after ``value_and_grad``
from the logits is. The step classifier (`xla_cost.count.step_parts`) asks `metric_only_forward`
which of its forward equations those are, once every level's parts are known.

A value *carries a derivative* where it is a float computed from a parameter through floats (the
loss and everything it is made of); an integer, a comparison and what is computed from them alone
do not. A forward equation none of whose values carries one, and whose values only other work and
the step's metrics read, is a metric's. Loops are followed: a micro-batch's ``value_and_grad``
inside a ``lax.scan`` (or a ``fori_loop``, a ``while_loop``) of gradient accumulation returns its
accuracy as the loop's per-iteration output or adds it to a carry, and what reads the loop's
results after it says what the body's values are for. A carry read in the next iteration is read
by what reads it there too, and a carry that holds a derivative after an iteration holds one
before (both to their fixpoint). A ``while_loop``'s condition and a ``cond``'s branch index decide
what runs: what they read is never a metric's alone.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import jax.numpy as jnp

from xla_cost.step.phases import STEP_PARTS

__all__ = ["metric_only_forward"]

FORWARD, _BACKWARD, _UPDATE, OTHER = STEP_PARTS
_CONTROL = "control"  # what a loop's condition or a cond's index is read as: never a metric alone

Path = tuple[Any, ...]


def metric_only_forward(top: Any, carrying: Sequence[bool], result_readers: Sequence[Collection[str]],
                        quiet: Collection[str]) -> set[Path]:
    """The paths of the forward equations, at any depth, that carry no derivative of the loss and
    whose values only ``quiet`` readers read.

    Args:
      top: the step's level as the classifier flattened it (``nodes``, ``invars``, ``outvars``; a
        loop's node holds its bodies in ``levels``, a ``while``'s condition last).
      carrying: per input of the step, whether it carries a derivative (a parameter).
      result_readers: per result of the step, what reads it (the marks of new state or a metric).
      quiet: the readers that make a value a metric's: other work and the metrics' mark.
    """
    moved: set[Path] = set()
    _walk(top, carrying, result_readers, set(quiet), moved)
    return moved


def _walk(level: Any, given: Sequence[bool], out_readers: Sequence[Collection[str]], quiet: set[str],
          moved: set[Path]) -> list[set[str]]:
    """Adds to ``moved`` the metric-only forward work of ``level`` and of its loops, given which of
    its inputs carry a derivative and what reads its results; returns what reads each of its inputs
    (a moved equation reads as other)."""
    carries, inner = _carrying(level, given)
    readers: dict[Any, set[str]] = {}
    for var, marks in zip(level.outvars, out_readers):
        if var is not None:
            readers.setdefault(var, set()).update(marks)
    for node in reversed(level.nodes):
        outs = [readers.get(var, set()) for var in node.outs]
        if node.levels:
            operands = _loop_walk(node, inner[node.path], outs, quiet, moved)
        else:
            seen = set().union(*outs)
            part = node.part
            if part == FORWARD and seen and seen <= quiet and not any(var in carries for var in node.outs):
                moved.add(node.path)
                part = OTHER
            operands = [{part}] * len(node.ins)
        for var, marks in zip(node.ins, operands):
            if var is not None:
                readers.setdefault(var, set()).update(marks)
    return [readers.get(var, set()) if var is not None else set() for var in level.invars]


def _loop_walk(node: Any, given: list[list[bool]], outs: list[set[str]], quiet: set[str],
               moved: set[Path]) -> list[set[str]]:
    """`_walk` through a loop or a cond: what reads each of its operands. A body's moves are kept
    from its last round, once what reads its carries is known to the fixpoint."""
    eqn, name = node.eqn, node.eqn.primitive.name
    if name == "cond":
        branches = [_walk(branch, g, outs, quiet, moved) for branch, g in zip(node.levels, given)]
        return [{_CONTROL}, *(set().union(*(b[j] for b in branches)) for j in range(len(node.ins) - 1))]
    if name == "scan":
        consts, carry = eqn.params["num_consts"], eqn.params["num_carry"]
        extra: list[set[str]] = [set() for _ in range(carry)]  # what reads a carry in the next iteration
        while True:
            local: set[Path] = set()
            operands = _walk(node.levels[0], given[0], [o | extra[j] if j < carry else o for j, o in enumerate(outs)],
                             quiet, local)
            grown = [e | operands[consts + j] for j, e in enumerate(extra)]
            if grown == extra:
                break
            extra = grown
        moved |= local
        return [o | outs[j - consts] if consts <= j < consts + carry else o for j, o in enumerate(operands)]
    cond_n, body_n = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    body, cond = node.levels
    counting = _walk(cond, given[1], [{_CONTROL}], quiet, moved)
    wanted = [o | counting[cond_n + j] for j, o in enumerate(outs)]
    while True:
        local = set()
        operands = _walk(body, given[0], wanted, quiet, local)
        grown = [w | operands[body_n + j] for j, w in enumerate(wanted)]
        if grown == wanted:
            break
        wanted = grown
    moved |= local
    return [*counting[:cond_n], *operands[:body_n], *wanted]


def _carrying(level: Any, given: Sequence[bool]) -> tuple[set[Any], dict[Path, list[list[bool]]]]:
    """The values of ``level`` that carry a derivative, given which of its inputs do, and per loop
    in it, which inputs of each of its bodies do."""
    carries = {var for var, flag in zip(level.invars, given) if flag and var is not None}
    inner: dict[Path, list[list[bool]]] = {}
    for node in level.nodes:
        ins = [var is not None and var in carries for var in node.ins]
        if node.levels:
            inner[node.path], flags = _loop_carrying(node, ins)
            carries.update(var for var, flag in zip(node.outs, flags) if flag)
        elif any(ins):
            carries.update(var for var, out in zip(node.outs, node.eqn.outvars)
                           if jnp.issubdtype(out.aval.dtype, jnp.inexact))
    return carries, inner


def _results_carrying(level: Any, given: Sequence[bool]) -> list[bool]:
    carries, _ = _carrying(level, given)
    return [var is not None and var in carries for var in level.outvars]


def _loop_carrying(node: Any, ins: list[bool]) -> tuple[list[list[bool]], list[bool]]:
    """Per body of a loop (or branch of a cond), which of its inputs carry a derivative, and which of
    the loop's results do: a carry that holds one after an iteration holds one before."""
    eqn, name = node.eqn, node.eqn.primitive.name
    if name == "cond":
        results = [_results_carrying(branch, ins[1:]) for branch in node.levels]
        return [ins[1:]] * len(node.levels), [any(r[j] for r in results) for j in range(len(node.outs))]
    if name == "scan":
        consts, carry = eqn.params["num_consts"], eqn.params["num_carry"]
        given = list(ins)
        while True:
            results = _results_carrying(node.levels[0], given)
            grown = [g or (consts <= j < consts + carry and results[j - consts]) for j, g in enumerate(given)]
            if grown == given:
                return [given], results
            given = grown
    cond_n, body_n = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    carried = ins[cond_n + body_n:]
    while True:
        results = _results_carrying(node.levels[0], [*ins[cond_n:cond_n + body_n], *carried])
        grown = [a or b for a, b in zip(carried, results)]
        if grown == carried:
            break
        carried = grown
    return [[*ins[cond_n:cond_n + body_n], *carried], [*ins[:cond_n], *carried]], carried
