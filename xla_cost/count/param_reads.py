"""Which modules' parameters each matrix product reads, and under which name stack.

The work of any method is its module's (`xla_cost.count.attribution`): a parent
whose method computes with a child's weights (a mixture of experts's block that
passes ``self.experts.w1.kernel`` to its own routed product) has the products on
its own row, and the child's row holds parameters with no forward or backward
work. `parameter_reads` finds such reads in a jaxpr: each product operand that is a
module's parameter, or a view of one (reshaped, transposed, cast, sliced, gathered:
an expert's weights picked from the stack), with the product's name stack, so that
`xla_cost.count.attribution.borrowed_note` can say where those rows' work is.

A slice or gather that picks rows of a parameter (vectors: an embedding lookup
``table[tokens]``, ``jnp.take``, ``table[i]``) makes activations, not a view of it:
what a product then reads is the lookup's output, as a Dense after the embedding reads
it, with the Dense's own kernel as the weights (`picks_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jax.extend import core as jex_core

from xla_cost.count.interpret import join_stack
from xla_cost.count.primitives import CALL_LIKE, CALL_PARAMS
from xla_cost.count.registry import MATRIX_PRODUCTS

__all__ = ["PRODUCTS", "VIEWS_OF_FIRST", "parameter_reads", "picks_rows"]

PRODUCTS: frozenset[str] = MATRIX_PRODUCTS | {"ragged_dot"}
"""The matrix products whose operands are followed back to parameters (``ragged_dot``: its
name in jax releases before ``ragged_dot_general``)."""

VIEWS_OF_FIRST: frozenset[str] = frozenset({
    "reshape", "squeeze", "expand_dims", "transpose", "convert_element_type", "broadcast_in_dim",
    "slice", "dynamic_slice", "gather", "rev", "reduce_precision", "copy", "copy_p",
    "sharding_constraint", "mesh_cast", "reshard", "device_put",
})
"""Primitives whose one result is the data of their first operand, rearranged (the other
operands: indices, shapes): what they make of a parameter is still the parameter."""

_SLICES: frozenset[str] = frozenset({"slice", "dynamic_slice", "gather"})
"""The views of `VIEWS_OF_FIRST` that may keep only part of their first operand: `picks_rows`
says whether what they keep is still a weight."""

_VIEWS_OF_ALL: frozenset[str] = frozenset({"concatenate"})
"""Primitives whose result holds the data of every operand (``w1`` and ``w3`` fused)."""

_ONE_TO_ONE: frozenset[str] = frozenset({"optimization_barrier"})
"""Primitives whose each result is the matching operand."""

Reads = tuple[tuple[str, str], ...]
"""``(module, name stack)`` pairs: a matrix product under the name stack reads the module's parameter."""


def _kept_sizes(eqn: Any) -> tuple[int, ...] | None:
    """How many elements of each dimension of its operand one slice of ``eqn`` (a `_SLICES`
    equation) keeps; None where its parameters say no sizes."""
    params = eqn.params
    if eqn.primitive.name == "slice":
        strides = params.get("strides") or (1,) * len(params["start_indices"])
        return tuple(-(-(stop - start) // step)
                     for start, stop, step in zip(params["start_indices"], params["limit_indices"], strides))
    sizes = params.get("slice_sizes")
    return tuple(int(size) for size in sizes) if sizes is not None else None


def picks_rows(eqn: Any) -> bool:
    """Whether a slice, dynamic slice or gather picks rows (vectors) of its operand, not a
    slab of it: each slice it takes spans at most one dimension (keeps more than one
    element of it) of an operand that spans two or more.

    Rows picked per index are the data a product then reads, not its weights: an embedding
    lookup (``table[tokens]``, ``jnp.take(table, tokens, axis=0)``: a gather of
    ``slice_sizes=(1, D)``), one row (``table[i]``: a dynamic slice ``(1, D)``), elements
    (``jnp.take_along_axis``: ``(1, 1)``); a Dense reading them multiplies its own kernel by
    them. A slab keeps a matrix of the operand, a weight still: an expert's ``(D, H)`` picked
    from the ``(E, D, H)`` stack (``w[idx]``: a gather ``(1, D, H)``; ``w[e]``: a dynamic slice),
    ``w13[:, :H]`` of a fused kernel. A matrix whose whole dimensions are all size 1 but one
    (a ``(1, H)`` kernel) has no rows to pick: any slice of it is still it. Rows gathered as a
    product's weights (a sampled softmax's ``table[sampled]``) read as data too: no rule on
    shapes tells them from a lookup."""
    kept = _kept_sizes(eqn) if eqn.primitive.name in _SLICES else None
    shape = getattr(getattr(eqn.invars[0], "aval", None), "shape", None)
    if kept is None or shape is None:
        return False
    return sum(size > 1 for size in shape) >= 2 and sum(size > 1 for size in kept) <= 1


def _jaxpr(value: Any) -> Any:
    while hasattr(value, "jaxpr") and not hasattr(value, "eqns"):
        value = value.jaxpr
    return value


def parameter_reads(program: Any, owners: Sequence[str | None]) -> Reads:
    """The ``(module, name stack)`` of each matrix product in ``program`` (a jaxpr, closed or
    not, or what ``jax.jit(f).trace`` returns) that reads a parameter of a module, or a view
    of one; ``owners``: per input variable, the module whose parameter it is (None: none).
    Calls, loops' bodies and branches are followed, their name stacks below their equation's;
    a value computed from a parameter by arithmetic (a dequantized weight) is no view of it,
    nor are rows picked from it (an embedding lookup: `picks_rows`)."""
    found: dict[tuple[str, str], None] = {}

    def walk(jaxpr: Any, prefix: str, given: Sequence[frozenset[str]]) -> list[frozenset[str]]:
        jaxpr = _jaxpr(jaxpr)
        env: dict[Any, frozenset[str]] = {v: g for v, g in zip(jaxpr.invars, given) if g}

        def of(var: Any) -> frozenset[str]:
            return frozenset() if isinstance(var, jex_core.Literal) else env.get(var, frozenset())

        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            ins = [of(v) for v in eqn.invars]
            if not any(ins):
                continue
            stack = join_stack(prefix, str(eqn.source_info.name_stack))
            if name in PRODUCTS:
                for modules in ins:
                    found.update(((module, stack), None) for module in sorted(modules))
                continue
            results: list[frozenset[str]] = []
            if name in CALL_LIKE:
                sub = next((eqn.params[p] for p in CALL_PARAMS if p in eqn.params), None)
                if sub is not None:
                    results = walk(sub, stack, ins)
            elif name == "scan":  # consts, carry and scanned inputs, in that order, as the body takes them
                walk(eqn.params["jaxpr"], stack, ins)
            elif name == "while":
                walk(eqn.params["body_jaxpr"], stack, ins[eqn.params.get("cond_nconsts", 0):])
            elif name == "cond":
                for branch in eqn.params.get("branches", ()):
                    walk(branch, stack, ins[1:])
            elif name in VIEWS_OF_FIRST and not picks_rows(eqn):
                results = [ins[0]] * len(eqn.outvars)
            elif name in _VIEWS_OF_ALL:
                results = [frozenset().union(*ins)] * len(eqn.outvars)
            elif name in _ONE_TO_ONE:
                results = ins
            env.update((v, r) for v, r in zip(eqn.outvars, results) if r)
        return [of(v) for v in jaxpr.outvars]

    walk(program, "", [frozenset({o}) if o else frozenset() for o in owners])
    return tuple(found)
