"""Loop-invariant forward work that a gradient program computes once where the forward program repeats it.

jax's partial evaluation of ``lax.scan`` (``nn.scan``, ``nnx.scan``, a scanned layer stack) moves the
body's known, loop-invariant equations out of the loop in the gradient program: a scanned Llama's
rotary embedding (the ``sin`` and ``cos`` of positions times frequencies, which no layer's input
changes) runs once before the loop in ``jax.grad``'s program, where the forward program, which jax
does not partially evaluate, runs it in each of the loop's iterations. ``backward = grad - forward``
then subtracts work the grad program never did and comes out short (negative, for a figure the
backward pass has none of: the transcendentals).

The hoisted equations keep the name stack they had inside the body, relative to the loop
(``layers/self_attn``, no ``jvp(...)`` around it: jax writes them outside the transform's trace),
which is how they are recognised here: an equation of the grad program that no transform wraps
(`xla_cost.count.stacks.classify_pass` is None) whose primitive and scopes end a forward program's
equation run more times (inside a loop). Its work times the extra runs is the forward's work the
grad program's forward share skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from xla_cost.count.interpret import EqnCount, JaxprCount
from xla_cost.count.registry import Cost
from xla_cost.count.stacks import classify_pass, model_scopes

__all__ = ["Hoisted", "hoisted_invariants"]


@dataclasses.dataclass(frozen=True)
class Hoisted:
    """The forward work a grad program skipped by computing loop invariants once.

    Attributes:
      cost: the work the forward program does that the grad program does not: each hoisted
        equation's cost times the runs it lost (its loop's trip count less one).
      matmul_flops: the part of ``cost.flops`` that matrix products do (dot_general, convolutions,
        products inside fused primitives).
      where: ``primitive at stack x runs`` per hoisted equation, for the note.
      lost: each hoisted equation group of the grad program with the runs it lost.
    """

    cost: Cost = Cost()
    matmul_flops: int = 0
    where: tuple[str, ...] = ()
    lost: tuple[tuple[EqnCount, int], ...] = ()

    def restored(self, grad: Iterable[EqnCount]) -> tuple[EqnCount, ...]:
        """The grad program's equations with each hoisted group's lost runs added beside it
        (its cost times the runs, under its own name stack): what the grad program would run
        without the hoisting, so that per-layer rows' ``grad - forward`` holds no negative share."""
        extra = tuple(dataclasses.replace(eqn, executions=eqn.executions * runs, cost=_times(eqn.cost, runs),
                                          recomputed=_times(eqn.recomputed, runs))
                      for eqn, runs in self.lost)
        return (*grad, *extra)


def _times(cost: Cost, runs: int) -> Cost:
    return cost * runs


def _per_run(eqn: EqnCount) -> tuple[int, int]:
    """(FLOP, transcendentals) of one execution of ``eqn``."""
    runs = max(1, eqn.executions)
    return eqn.cost.flops // runs, eqn.cost.transcendentals // runs


def _matched_repeat(eqn: EqnCount, forward: dict[tuple[str, tuple[str, ...]], int],
                    each: dict[tuple[str, tuple[str, ...]], set[tuple[int, int]]]) -> int:
    scopes = model_scopes(eqn.name_stack)
    if not scopes:
        # hoisted to no scope at all (a module's own lax.scan whose invariant reads a parameter alone:
        # exp(w)): the one looped forward equation of its primitive that does the same work a run
        matched = [repeat for key, repeat in forward.items() if key[0] == eqn.primitive and _per_run(eqn) in each[key]]
        return matched[0] if len(matched) == 1 else 1
    return max((repeat for (primitive, stack), repeat in forward.items()
                if primitive == eqn.primitive and len(stack) >= len(scopes)
                and stack[len(stack) - len(scopes):] == scopes), default=1)


def hoisted_invariants(forward: JaxprCount | Iterable[EqnCount], grad: JaxprCount | Iterable[EqnCount],
                       matmuls: frozenset[str] = frozenset()) -> Hoisted:
    """The forward program's loop-invariant work that ``grad`` computes outside the loop, once.

    Args:
      forward: the forward program's count (or its equations).
      grad: the gradient program's count or equations (``jax.grad`` or ``jax.value_and_grad`` of the same loss).
      matmuls: the primitives counted as matrix products.
    Returns:
      `Hoisted`: empty where nothing was hoisted (no loop, or no untransformed equation in ``grad``).
    """
    forward = forward.equations if isinstance(forward, JaxprCount) else forward
    grad = grad.equations if isinstance(grad, JaxprCount) else grad
    looped: dict[tuple[str, tuple[str, ...]], int] = {}
    each: dict[tuple[str, tuple[str, ...]], set[tuple[int, int]]] = {}
    for eqn in forward:
        if eqn.repeat > 1:
            key = (eqn.primitive, model_scopes(eqn.name_stack))
            looped[key] = max(looped.get(key, 1), eqn.repeat)
            each.setdefault(key, set()).add(_per_run(eqn))
    if not looped:
        return Hoisted()
    cost, matmul, where, lost_runs = Cost(), 0, [], []
    for eqn in grad:
        if classify_pass(eqn.name_stack) is not None:
            continue
        lost = _matched_repeat(eqn, looped, each) // eqn.repeat - 1
        if lost <= 0:
            continue
        cost += _times(eqn.cost, lost)
        matmul += (eqn.cost.flops if eqn.primitive in matmuls else eqn.cost.products) * lost
        where.append(f"{eqn.primitive} at {eqn.name_stack or '<top>'} x{lost + 1}")
        lost_runs.append((eqn, lost))
    return Hoisted(cost, matmul, tuple(where), tuple(lost_runs))
