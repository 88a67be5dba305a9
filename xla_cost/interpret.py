"""Walks a closed jaxpr and counts every equation with the rules of `xla_cost.rules`.

Nested jaxprs (jit, custom_jvp/custom_vjp calls, checkpoint) are walked once; a
``scan`` body is counted ``length`` times and a ``while`` body as many times as its
static trip count, when one can be read off the loop (``fori_loop`` with literal
bounds). A loop whose trip count cannot be known is counted once and reported in
`JaxprCount.notes`; a ``cond`` is charged its most expensive branch and noted.

Two totals come out: `JaxprCount.total`, with every loop multiplied out, and
`JaxprCount.total_once`, with every loop body counted once, the way XLA's
``cost_analysis()`` counts a while loop. Their difference is what a compiled
figure misses, which `xla_cost.analysis` adds back (the loop correction).

Equations that XLA's algebraic simplifier removes before it counts (``x + 0``,
``x - 0``, ``x * 1``, ``x / 1`` with a literal) are not counted either.

Every count keeps the equation's full name stack (``jvp(Net)/fc1``,
``transpose(jvp(Net))/fc1``), which `xla_cost.attribution` turns into a module
path and a pass.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex_core

from xla_cost.rules import ZERO_COST, Cost, get_rule

__all__ = [
    "EqnCount", "LoopInfo", "JaxprCount", "count_jaxpr", "count_function", "SCAN_COUNTER_FLOPS",
]

# Primitives that call one nested jaxpr exactly once.
_CALL_LIKE = frozenset(
    {
        "jit", "pjit", "closed_call", "core_call", "xla_call", "named_call",
        "remat", "remat2", "checkpoint",
        "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin",
        "shard_map",
    }
)
_CALL_PARAMS = ("jaxpr", "call_jaxpr", "fun_jaxpr")


@dataclasses.dataclass(frozen=True)
class EqnCount:
    """The summed cost of one primitive at one name stack.

    Attributes:
      name_stack: the full JAX name stack, e.g. ``transpose(jvp(Net))/fc1``.
      primitive: the primitive's name, e.g. ``dot_general``.
      executions: how often it runs (equations times loop trip counts).
      cost: the summed cost of those executions.
      repeat: the product of the trip counts of the loops around it (1 outside
        any loop): a scanned layer's equations have the scan's length.
    """

    name_stack: str
    primitive: str
    executions: int
    cost: Cost
    repeat: int = 1


@dataclasses.dataclass(frozen=True)
class LoopInfo:
    """A loop met in the jaxpr: ``scan`` or ``while``, and its trip count."""

    name_stack: str
    kind: str
    trip_count: int | None
    body_cost: Cost  # one iteration, nested loops included


@dataclasses.dataclass(frozen=True)
class JaxprCount:
    """The result of counting one jaxpr.

    Attributes:
      equations: costs summed per (name stack, primitive, loop repeat).
      unsupported: primitives without a rule, with how often they run; their cost
        is unknown and not in any total.
      loops: every scan and while loop, with its trip count (None: unknown).
      notes: human-readable caveats (unknown trip counts, cond branches).
      total_once: the cost with every loop body counted once, as XLA's compiled
        cost analysis counts it.
    """

    equations: tuple[EqnCount, ...]
    unsupported: Mapping[str, int]
    loops: tuple[LoopInfo, ...]
    notes: tuple[str, ...]
    total_once: Cost = Cost()

    @property
    def total(self) -> Cost:
        """The cost with every loop multiplied by its trip count."""
        return sum((e.cost for e in self.equations), Cost())

    @property
    def repeated_loops(self) -> tuple[LoopInfo, ...]:
        """The loops that run their body more than once (what XLA undercounts)."""
        return tuple(loop for loop in self.loops if (loop.trip_count or 1) > 1)


def _join(prefix: str, stack: str) -> str:
    if not prefix:
        return stack
    if not stack:
        return prefix
    return f"{prefix}/{stack}"


SCAN_COUNTER_FLOPS = 2
"""FLOP per scan iteration for the loop counter (an add and a compare), which XLA
counts in the while loop a scan becomes."""

_Key = tuple[str, str, int]  # (name stack, primitive, loop repeat)


class _Counter:
    """Walks a jaxpr; with ``trip_counts=False`` every loop body counts once."""

    def __init__(self, trip_counts: bool = True) -> None:
        self.trip_counts = trip_counts
        self.costs: dict[_Key, Cost] = collections.defaultdict(Cost)
        self.executions: collections.Counter[_Key] = collections.Counter()
        self.unsupported: collections.Counter[str] = collections.Counter()
        self.loops: list[LoopInfo] = []
        self.notes: list[str] = []

    # Returns the cost of one execution of ``jaxpr`` and records it ``times`` times.
    def walk(self, jaxpr: Any, prefix: str, times: int) -> Cost:
        jaxpr = getattr(jaxpr, "jaxpr", jaxpr)  # ClosedJaxpr -> Jaxpr
        total = Cost()
        for eqn in jaxpr.eqns:
            stack = _join(prefix, str(eqn.source_info.name_stack))
            total = total + self.eqn(eqn, stack, times)
        return total

    def eqn(self, eqn: Any, stack: str, times: int) -> Cost:
        name = eqn.primitive.name
        params = eqn.params
        if name == "scan":
            length = int(params["length"])
            n = length if self.trip_counts else 1
            body = self.walk(params["jaxpr"], stack, times * n)
            # XLA runs a scan as a while loop: each iteration also increments
            # and compares the counter (SCAN_COUNTER_FLOPS).
            counter = Cost(flops=SCAN_COUNTER_FLOPS)
            key = (stack, "scan", times * n)
            self.costs[key] = self.costs[key] + counter * (times * n)
            self.executions[key] += times * n
            self.loops.append(LoopInfo(stack, "scan", length, body + counter))
            return (body + counter) * n
        if name == "while":
            trip = _static_trip_count(eqn)
            if trip is None:
                self.notes.append(
                    f"while loop at {stack or '<top>'}: trip count unknown, its body is "
                    "counted once (the true cost is higher)"
                )
            n = 1 if trip is None or not self.trip_counts else trip
            body = self.walk(params["body_jaxpr"], stack, times * n)
            checks = n + 1 if self.trip_counts else 1
            cond = self.walk(params["cond_jaxpr"], stack, times * checks)
            self.loops.append(LoopInfo(stack, "while", trip, body + cond))
            return body * n + cond * checks
        if name == "cond":
            return self.cond(params["branches"], stack, times)
        if name in _CALL_LIKE:
            sub = next((params[p] for p in _CALL_PARAMS if p in params), None)
            if sub is not None:
                return self.walk(sub, stack, times)
        if name in ZERO_COST or _is_algebraic_identity(eqn):
            return Cost()
        rule = get_rule(name)
        if rule is None:
            self.unsupported[name] += times
            return Cost()
        ins = [v.aval for v in eqn.invars]
        outs = [v.aval for v in eqn.outvars]
        cost = rule(ins, outs, **params)
        key = (stack, name, times)
        self.costs[key] = self.costs[key] + cost * times
        self.executions[key] += times
        return cost

    def cond(self, branches: Any, stack: str, times: int) -> Cost:
        # Count each branch on the side, charge the most expensive one.
        trial = [_Counter(self.trip_counts) for _ in branches]
        costs = [t.walk(b, stack, times) for t, b in zip(trial, branches)]
        index = max(range(len(costs)), key=lambda i: (costs[i].flops, costs[i].transcendentals))
        chosen = trial[index]
        for key, cost in chosen.costs.items():
            self.costs[key] = self.costs[key] + cost
            self.executions[key] += chosen.executions[key]
        self.unsupported.update(chosen.unsupported)
        self.loops.extend(chosen.loops)
        self.notes.extend(chosen.notes)
        if len(branches) > 1:
            self.notes.append(
                f"cond at {stack or '<top>'}: charged its most expensive branch "
                f"({index} of {len(branches)})"
            )
        return costs[index]


def _literal(var: Any) -> Any:
    return var.val if isinstance(var, jex_core.Literal) else None


def _is_scalar_literal(var: Any, value: float) -> bool:
    literal = _literal(var)
    if literal is None:
        return False
    array = np.asarray(literal)
    return array.size == 1 and bool(array.reshape(()) == value)


def _is_algebraic_identity(eqn: Any) -> bool:
    """``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1`` with a literal.

    XLA's algebraic simplifier removes these before cost analysis (optax's Adam
    adds ``eps_root = 0.0``), so counting them would put the jaxpr above XLA.
    Only when ``x`` already has the result's shape (no broadcast is hidden in it).
    """
    name, invars = eqn.primitive.name, eqn.invars
    if len(invars) != 2:
        return False
    a, b = invars
    out_shape = eqn.outvars[0].aval.shape

    def passes(x: Any) -> bool:
        return _literal(x) is None and x.aval.shape == out_shape

    if name in ("add", "add_any"):
        return (_is_scalar_literal(a, 0) and passes(b)) or (_is_scalar_literal(b, 0) and passes(a))
    if name == "sub":
        return _is_scalar_literal(b, 0) and passes(a)
    if name == "mul":
        return (_is_scalar_literal(a, 1) and passes(b)) or (_is_scalar_literal(b, 1) and passes(a))
    if name == "div":
        return _is_scalar_literal(b, 1) and passes(a)
    return False


def _static_trip_count(eqn: Any) -> int | None:
    """The trip count of a ``while`` whose counter and bound are static, else None.

    Recognises the shape ``fori_loop`` produces: the condition is ``i < n``, the
    body returns ``i + step`` for a literal step > 0, and ``i``'s initial value and
    ``n`` are literals (or ``n`` is a loop-invariant carry with a literal initial
    value).
    """
    params = eqn.params
    cond, body = params["cond_jaxpr"].jaxpr, params["body_jaxpr"].jaxpr
    cond_nconsts, body_nconsts = params["cond_nconsts"], params["body_nconsts"]
    if len(cond.eqns) != 1 or cond.eqns[0].primitive.name != "lt":
        return None
    carry_init = eqn.invars[cond_nconsts + body_nconsts:]
    cond_carry = cond.invars[cond_nconsts:]
    body_carry_in = body.invars[body_nconsts:]

    def resolve(var: Any) -> Any:
        if _literal(var) is not None:
            return _literal(var)
        if var in cond_carry:
            position = cond_carry.index(var)
            if body.outvars[position] is body_carry_in[position]:  # loop-invariant
                return _literal(carry_init[position])
            return None
        if var in cond.invars[:cond_nconsts]:
            return _literal(eqn.invars[cond.invars.index(var)])
        return None

    counter, bound = cond.eqns[0].invars
    if counter not in cond_carry:
        return None
    position = cond_carry.index(counter)
    start, stop = _literal(carry_init[position]), resolve(bound)
    step_eqn = next(
        (e for e in body.eqns if body.outvars[position] in e.outvars), None
    )
    if start is None or stop is None or step_eqn is None:
        return None
    if step_eqn.primitive.name != "add":
        return None
    a, b = step_eqn.invars
    step = _literal(b) if a is body_carry_in[position] else (
        _literal(a) if b is body_carry_in[position] else None
    )
    if step is None or int(step) <= 0:
        return None
    return max(0, math.ceil((int(stop) - int(start)) / int(step)))


def _dead_code_eliminated(jaxpr: Any) -> Any:
    """Drops equations whose results no output needs, as XLA does.

    ``jax.grad`` keeps the primal output's computation in the jaxpr even when only
    the gradient is returned; XLA removes it, and so must a count meant to agree
    with XLA. jax has no public DCE, so this uses the internal one and counts the
    jaxpr as it is if that ever moves.
    """
    try:
        from jax._src.interpreters import partial_eval as pe
    except ImportError:  # pragma: no cover - depends on jax internals
        return jaxpr
    try:
        pruned, _ = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate=True)
    except Exception:  # noqa: BLE001 - counting the undead jaxpr is still right
        return jaxpr
    return pruned


def count_jaxpr(closed_jaxpr: Any) -> JaxprCount:
    """Counts every equation of ``closed_jaxpr`` (loops multiplied out).

    Equations whose results are never used are removed first, as XLA does.

    Args:
      closed_jaxpr: a ``ClosedJaxpr`` (from ``jax.make_jaxpr``) or a ``Jaxpr``.

    Returns:
      A `JaxprCount` with costs per (name stack, primitive).
    """
    jaxpr = _dead_code_eliminated(getattr(closed_jaxpr, "jaxpr", closed_jaxpr))
    counter = _Counter()
    counter.walk(jaxpr, "", 1)
    once = _Counter(trip_counts=False)
    total_once = once.walk(jaxpr, "", 1) if counter.loops else None
    equations = tuple(
        EqnCount(stack, prim, counter.executions[key], cost, repeat)
        for key, cost in counter.costs.items()
        for stack, prim, repeat in [key]
    )
    total = sum((e.cost for e in equations), Cost())
    return JaxprCount(
        equations=equations,
        unsupported=dict(counter.unsupported),
        loops=tuple(counter.loops),
        notes=tuple(dict.fromkeys(counter.notes)),
        total_once=total if total_once is None else total_once,
    )


def count_function(fn: Callable[..., Any], *args: Any) -> JaxprCount:
    """Traces ``fn(*args)`` (abstract arguments are fine) and counts its jaxpr."""
    return count_jaxpr(jax.make_jaxpr(fn)(*args))
