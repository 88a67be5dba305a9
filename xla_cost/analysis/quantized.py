"""Quantized weights among a step's parameters (`xla_cost.analyze_step`).

An integer array takes no gradient, so a step's parameters leave integer leaves out
(`xla_cost.step.user_step.UserStep.integer_parameters`: a schedule's timesteps passed among the
params is no parameter). An int8 weight is one all the same: the forward reads it as a weight.
A leaf is read as a weight where it reaches, through copies that keep its values (a convert to
the compute dtype, a reshape, a transpose, a broadcast, a slice or gather of it: one layer's
slice of a scanned stack, an embedding's rows), an operand of a product (``dot_general``, a
convolution, a ``ragged_dot``) or a multiplication by a float parameter (its scale: a dequantized
weight). Such leaves are counted as parameters, at their own itemsize in memory, with a note;
they are never trained (no gradient, no optimizer update: `xla_cost.analysis.step_checks`).
An NNX model's integer ``nnx.Param`` (which NNX counts with the rest) is read the same way: an
int8 weight stays a parameter, an integer index table or counter the forward does not read as a
weight is none (model state).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex_core

from xla_cost.count.primitives import CALL_LIKE, CALL_PARAMS
from xla_cost.step.user_step import UserStep

__all__ = ["QUANTIZED_NOTE", "read_as_weights", "with_quantized_weights"]

QUANTIZED_NOTE = "quantized parameters: "
"""How the note of `with_quantized_weights` begins."""

_PRODUCTS = frozenset({"dot_general", "conv_general_dilated", "ragged_dot_general", "ragged_dot"})
_KEEPS_VALUES = frozenset({
    "convert_element_type", "reshape", "transpose", "broadcast_in_dim", "squeeze", "expand_dims", "copy",
    "copy_p", "slice", "dynamic_slice", "gather", "rev", "concatenate", "reshard", "sharding_constraint",
    "mesh_cast", "pvary", "device_put",
})
_FIRST_OPERAND = frozenset({"dynamic_slice", "gather"})  # (their other operands are indices)


def read_as_weights(jaxpr: Any, integers: Collection[int], floats: Collection[int]) -> set[int]:
    """Which of the inputs ``integers`` (positions among the jaxpr's inputs) the jaxpr reads as
    weights: they reach a product's operand, or a multiplication with a value that one of the
    inputs ``floats`` (the float parameters) reaches, through copies that keep their values."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    origin: dict[Any, frozenset[int]] = {}
    scale: set[Any] = set()
    for i, var in enumerate(inner.invars):
        if i in integers:
            origin[var] = frozenset({i})
        elif i in floats:
            scale.add(var)
    found: set[int] = set()
    _walk(inner, origin, scale, found)
    return found


def _walk(jaxpr: Any, origin: dict[Any, frozenset[int]], scale: set[Any], found: set[int]) -> None:
    def of(var: Any) -> frozenset[int]:
        return frozenset() if isinstance(var, jex_core.Literal) else origin.get(var, frozenset())

    def scaled(var: Any) -> bool:
        return not isinstance(var, jex_core.Literal) and var in scale

    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        inner = _inner(eqn)
        if inner:
            for sub, operands in inner:
                sub = getattr(sub, "jaxpr", sub)
                inner_origin = {v: of(o) for v, o in zip(sub.invars, operands) if of(o)}
                inner_scale = {v for v, o in zip(sub.invars, operands) if scaled(o)}
                _walk(sub, inner_origin, inner_scale, found)
                if name in CALL_LIKE:
                    for outer, out in zip(eqn.outvars, sub.outvars):
                        if not isinstance(out, jex_core.Literal):
                            if inner_origin.get(out):
                                origin[outer] = inner_origin[out]
                            if out in inner_scale:
                                scale.add(outer)
            continue
        if name in _PRODUCTS:
            found.update(*(of(v) for v in eqn.invars))
        elif name == "mul" and len(eqn.invars) == 2:
            a, b = eqn.invars
            if (of(a) and scaled(b)) or (of(b) and scaled(a)):
                found.update(of(a) | of(b))
        elif name in _KEEPS_VALUES:
            read = eqn.invars[:1] if name in _FIRST_OPERAND else eqn.invars
            carried = frozenset().union(*(of(v) for v in read))
            for out in eqn.outvars:
                if carried:
                    origin[out] = carried
                if any(scaled(v) for v in read):
                    scale.add(out)


def _inner(eqn: Any) -> list[tuple[Any, Sequence[Any]]]:
    """The jaxprs an equation runs, each with the operands its inputs take (a call's, a scan's
    body, a while loop's body, a cond's branches); empty for any other equation."""
    name, params = eqn.primitive.name, eqn.params
    if name in CALL_LIKE:
        sub = next((params[p] for p in CALL_PARAMS if p in params), None)
        return [] if sub is None else [(sub, eqn.invars)]
    if name == "scan":
        return [(params["jaxpr"], eqn.invars)]
    if name == "while":
        return [(params["body_jaxpr"], eqn.invars[int(params["cond_nconsts"]):])]
    if name == "cond":
        return [(branch, eqn.invars[1:]) for branch in params["branches"]]
    return []


def with_quantized_weights(jaxpr: Any, prepared: UserStep) -> UserStep:
    """The step with the integer leaves of its parameters that ``jaxpr`` reads as weights
    (`read_as_weights`) counted as parameters, and a note that says how many and of which dtype;
    the step as it is where there are none or the jaxpr's inputs are not the flattened arguments."""
    integers = prepared.integer_parameters()
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    leaves = jax.tree.leaves(prepared.args)
    if not integers or len(inner.invars) != len(leaves):
        return prepared
    floats = {i for i, module in enumerate(prepared.owners) if module is not None and i not in integers}
    found = sorted(read_as_weights(inner, set(integers), floats))
    if prepared.kind != "jax":  # an NNX model's integer Params: those not read as weights are none
        prepared = _without(prepared, [i for i in integers if i not in found], leaves)
        step = dataclasses.replace(prepared, quantized=frozenset(found))
    elif found:
        step = prepared.with_quantized(found)
    if not found:
        return prepared
    by_dtype: dict[str, int] = {}
    for i in found:
        dtype = str(leaves[i].dtype)
        by_dtype[dtype] = by_dtype.get(dtype, 0) + int(np.prod(leaves[i].shape))
    said = ", ".join(f"{n:,} of them {dtype} (quantized)" for dtype, n in by_dtype.items())
    note = (f"{QUANTIZED_NOTE}{step.parameters:,} parameters, {said}: integer arrays of the params the forward "
            "reads as weights (into a product, or multiplied by their float scale), counted at their own "
            "itemsize in memory; an integer array takes no gradient: they are not trained")
    return dataclasses.replace(step, notes=(*step.notes, note))


def _without(prepared: UserStep, leaves: Collection[int], flat: Sequence[Any]) -> UserStep:
    """The step with the parameter leaves ``leaves`` (by flattened index) no parameters: no module, not counted."""
    if not leaves:
        return prepared
    owners, counts = list(prepared.owners), dict(prepared.param_paths)
    for i in leaves:
        module, owners[i] = owners[i], None
        counts[module] -= int(np.prod(flat[i].shape))
    holding = set(owners)  # a module left holding no parameter (an index table's alone) has no row
    return dataclasses.replace(prepared, owners=tuple(owners),
                               param_paths={m: n for m, n in counts.items() if m in holding})
