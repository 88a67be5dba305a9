"""A ``while`` loop's trip count where its jaxpr states it, and a bound on it where its counter
indexes an axis of a static size (`xla_cost.count.interpret` counts the loops; the parts of a
user's step say which of their work a loop of unknown trip count holds: `unknown_loop_notes`).

A ``fori_loop`` with literal bounds runs ``ceil((stop - start) / step)`` times (`static_trip_count`).
One whose bound is computed at run time (``fori_loop(0, n, ...)`` with ``n`` traced: jax_privacy's
micro-batching counts its micro-batches so) states none: its body is counted once, and the parts
whose work it holds are at least that. Its body often reads the counter's slice of an array along
an axis of a static size: the ``i``-th micro-batch of a batch reshaped to ``(micro-batches,
size, ...)``, by ``xs[i]`` (a ``dynamic_slice`` or a ``gather``) or written by
``.at[i].set``. Counting ``i`` from ``start`` by ``step``, the iterations whose slice lies inside
that axis are `trip_bound`'s; an iteration past its end reads no slice of its own (jax clamps a
dynamic slice's start and fills a gather's out-of-range rows), which the program does not forbid,
so this is a bound the notes state, never a trip count the count multiplies by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from jax.extend import core as jex_core

from xla_cost.count.primitives import CALL_LIKE, CALL_PARAMS

__all__ = ["TripBound", "static_trip_count", "trip_bound", "unknown_loop_notes"]

_SAME_VALUE = frozenset({"convert_element_type", "broadcast_in_dim", "reshape", "squeeze", "expand_dims", "copy",
                         "copy_p"})
"""Primitives whose result holds the value of their (scalar) operand: the counter, as an index."""


class TripBound(NamedTuple):
    """The iterations of a loop whose counter's slice lies inside the axis it indexes."""

    iterations: int
    start: int
    step: int
    axis: int  # the axis's size
    array: str  # the array indexed (its type: ``float32[4,2,64]``)

    def describe(self) -> str:
        return (f"its counter (from {self.start} by {self.step}) indexes an axis of {self.axis} of a {self.array}: "
                f"at most {self.iterations} iteration{'s' if self.iterations != 1 else ''} if none reads past "
                "its end (a bound, not assumed)")


def _literal(var: Any) -> Any:
    return var.val if isinstance(var, jex_core.Literal) else None


def _counter(eqn: Any) -> tuple[int, Any, int, Any] | None:
    """Of a ``while`` of the shape ``fori_loop`` makes (its condition ``i < n``, its body returning
    ``i + step`` for a literal step > 0): the counter's position among the carries, its initial
    value (None: not a literal), its step and the condition's bound (a variable or a literal)."""
    params = eqn.params
    cond, body = params["cond_jaxpr"].jaxpr, params["body_jaxpr"].jaxpr
    cond_nconsts, body_nconsts = params["cond_nconsts"], params["body_nconsts"]
    if len(cond.eqns) != 1 or cond.eqns[0].primitive.name != "lt":
        return None
    counter, bound = cond.eqns[0].invars
    cond_carry = cond.invars[cond_nconsts:]
    if counter not in cond_carry:
        return None
    position = cond_carry.index(counter)
    before = body.invars[body_nconsts + position]
    step_eqn = next((e for e in body.eqns if body.outvars[position] in e.outvars), None)
    if step_eqn is None or step_eqn.primitive.name != "add":
        return None
    a, b = step_eqn.invars
    step = _literal(b) if a is before else (_literal(a) if b is before else None)
    if step is None or int(step) <= 0:
        return None
    return position, _literal(eqn.invars[cond_nconsts + body_nconsts + position]), int(step), bound


def static_trip_count(eqn: Any) -> int | None:
    """The trip count of a ``while`` whose counter and bound are static, else None.

    Recognises the shape ``fori_loop`` produces: the condition is ``i < n``, the
    body returns ``i + step`` for a literal step > 0, and ``i``'s initial value and
    ``n`` are literals (or ``n`` is a loop-invariant carry with a literal initial
    value).
    """
    found = _counter(eqn)
    if found is None:
        return None
    _, start, step, bound = found
    params = eqn.params
    cond, body = params["cond_jaxpr"].jaxpr, params["body_jaxpr"].jaxpr
    cond_nconsts, body_nconsts = params["cond_nconsts"], params["body_nconsts"]
    carry_init, cond_carry = eqn.invars[cond_nconsts + body_nconsts:], cond.invars[cond_nconsts:]
    stop = _literal(bound)
    if stop is None and bound in cond_carry:
        position = cond_carry.index(bound)
        if body.outvars[position] is body.invars[body_nconsts + position]:  # loop-invariant
            stop = _literal(carry_init[position])
    elif stop is None and bound in cond.invars[:cond_nconsts]:
        stop = _literal(eqn.invars[cond.invars.index(bound)])
    if start is None or stop is None:
        return None
    return max(0, math.ceil((int(stop) - int(start)) / step))


def trip_bound(eqn: Any) -> TripBound | None:
    """The fewest iterations, over the slices the counter of the ``while`` ``eqn`` indexes in its
    body (``dynamic_slice``, ``dynamic_update_slice``, a one-index ``gather``: ``xs[i]``), that stay
    inside the axis indexed: a bound on its trip count if no iteration reads past the axis's end;
    None where the loop has no such counter (a literal start >= 0, a literal step) or indexes nothing."""
    found = _counter(eqn)
    if found is None or found[1] is None or int(found[1]) < 0:
        return None
    position, start, step, _ = found
    body = eqn.params["body_jaxpr"].jaxpr
    start = int(start)
    best: TripBound | None = None
    slices: list[tuple[int, int, str]] = []
    _indexed(body, {body.invars[eqn.params["body_nconsts"] + position]: _COUNTER}, slices)
    for axis, width, array in slices:
        if axis - width < start:
            continue  # (already past the end: says nothing)
        bound = TripBound((axis - width - start) // step + 1, start, step, axis, array)
        best = bound if best is None or bound.iterations < best.iterations else best
    return best


_COUNTER, _SHIFTED = "counter", "shifted"  # a value that is the counter; the counter plus a literal > 0


def _indexed(jaxpr: Any, given: dict[Any, str], slices: list[tuple[int, int, str]]) -> dict[Any, str]:
    """Adds to ``slices`` (axis size, slice width, array type) each slice ``jaxpr`` takes or writes
    at an index holding the counter, into the calls it makes; returns its variables that hold the
    counter (`_COUNTER`) or the counter plus a literal (`_SHIFTED`), given its inputs' (``given``).
    jnp's wrap of a negative index, ``select_n(i < 0, i, i + n)``, is the counter (which starts at
    0 or more and grows)."""
    held = dict(given)
    for eqn in jaxpr.eqns:
        name, ins = eqn.primitive.name, eqn.invars
        kinds = [None if isinstance(v, jex_core.Literal) else held.get(v) for v in ins]
        sub = next((eqn.params[p] for p in CALL_PARAMS if p in eqn.params), None) if name in CALL_LIKE else None
        if sub is not None:
            inner = getattr(sub, "jaxpr", sub)
            inside = {v: kind for v, kind in zip(inner.invars, kinds) if kind is not None}
            if inside:
                within = _indexed(inner, inside, slices)
                held.update((o, within[v]) for o, v in zip(eqn.outvars, inner.outvars) if v in within)
        elif name in _SAME_VALUE and kinds[:1] == [_COUNTER]:
            held.update(dict.fromkeys(eqn.outvars, _COUNTER))
        elif name == "add" and _COUNTER in kinds and any((_literal(v) or 0) > 0 for v in ins):
            held.update(dict.fromkeys(eqn.outvars, _SHIFTED))
        elif name == "select_n" and len(ins) > 1 and _COUNTER in kinds[1:] and None not in kinds[1:]:
            held.update(dict.fromkeys(eqn.outvars, _COUNTER))
        elif name in ("dynamic_slice", "dynamic_update_slice"):
            widths = eqn.params["slice_sizes"] if name == "dynamic_slice" else ins[1].aval.shape
            first = 1 if name == "dynamic_slice" else 2
            slices.extend((int(size), int(width), ins[0].aval.str_short())
                          for size, width, kind in zip(ins[0].aval.shape, widths, kinds[first:]) if kind == _COUNTER)
        elif name == "gather" and kinds[1:2] == [_COUNTER] and math.prod(ins[1].aval.shape) == 1:
            mapped = eqn.params["dimension_numbers"].start_index_map
            if len(mapped) == 1:
                slices.append((int(ins[0].aval.shape[mapped[0]]), int(eqn.params["slice_sizes"][mapped[0]]),
                               ins[0].aval.str_short()))
    return held


def unknown_loop_notes(loops: Sequence[Any], equations: Sequence[Any], part: str) -> list[str]:
    """Per ``while`` loop of unknown trip count (`xla_cost.count.interpret.LoopInfo`: ``path``,
    ``bound``) that holds work of ``part`` (`xla_cost.count.interpret.EqnCount`: ``part``, ``loop``,
    the innermost loop's path, under the loop's own), a note that the part is at least its figure:
    that work is counted once."""
    notes = []
    for loop in loops:
        if loop.kind != "while" or loop.trip_count is not None or not loop.path:
            continue
        depth = len(loop.path)
        flops = sum(e.cost.flops for e in equations if e.part == part and tuple(e.loop[:depth]) == loop.path)
        if not flops:
            continue
        bound = loop.bound
        notes.append(f"at least: a while loop of unknown trip count at {loop.name_stack or '<top>'} holds "
                     f"{flops:,} FLOP of this part, counted once (the true cost is higher)"
                     + (f"; {bound.describe()}: up to {bound.iterations * flops:,} FLOP" if bound is not None else ""))
    return list(dict.fromkeys(notes))
