"""Which of a user's step's arguments its loss is differentiated with respect to, read from the
traced program rather than from names (`xla_cost.analysis.user_step`).

The parameters of a step are the leaves the loss is differentiated with respect to: a step
called as ``lambda p, o, b: step(p, o, b)`` names no argument ``params``, and its parameters
are those all the same. jax keeps no mark of what it differentiated once a step is traced
(``value_and_grad`` leaves the primal computation under ``jvp(...)`` and the gradients'
under ``transpose(jvp(...))``), so a leaf is taken as differentiated where the program shows the
three things a gradient step does with it:

* the gradient's passes read it (the loss depends on it);
* the backward pass hands back an array of its shape and dtype (an array made under the
  transpose that an equation outside the passes reads, or that the step returns): its gradient;
* the step returns an array of its shape and dtype computed, outside the passes, both from it
  and from such a gradient: its new value (``p - lr * g``, any optax update).

A backward pass that a ``vmap`` maps (``jax.vmap(jax.grad(loss))``: per-example gradients, as
DP-SGD clips them) hands back each gradient batched over the examples, ``(n, *p.shape)`` (or with
the examples on another axis, which the ``vmap``'s end moves to the front): an array so made is a
gradient of ``p``'s shape and dtype, and what is computed from it (a clip, the sum over the
examples) is computed from ``p``'s gradient (`per_example_gradients`).

A batch is read by the forward pass but never combined with a gradient into a result; an
optimizer's moments are combined with the gradients but read by neither pass; an EMA of the
parameters is neither. Shapes are compared up to unit axes, and an argument under any shape a call it
is passed into sees it with: a ``jax.pmap``'d step's body (a ``shard_map`` in this jax) sees one device's
``(1, *shape)`` block of a mapped ``(devices, *shape)`` parameter and squeezes it, so that a pmapped
step's parameters are found as a jitted one's are. Scalars are left out (a learning rate passed beside the parameters meets a
scalar parameter's gradient in its update as the parameter does).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.extend import core as jex_core

from xla_cost.count.interpret import join_stack
from xla_cost.count.primitives import CALL_LIKE, CALL_PARAMS
from xla_cost.count.stacks import classify_pass, mapped_backward
from xla_cost.step.trees import elements_key

if TYPE_CHECKING:  # (the step's arguments module imports flax.nnx, which a Linen analysis never loads)
    from xla_cost.step.user_step import UserStep

__all__ = ["differentiated_leaves", "new_values", "optimizer_state_leaves", "per_example_gradients",
           "trained_and_rewritten", "with_differentiated_parameters"]

_BACKWARD = "backward"


class _Flow:
    """The step's equations as (the values read, the values made, the gradient's pass or None), with
    the calls a value passes through one for one (a jit, a remat, a custom derivative's call)
    followed in as if inlined, and every other equation that holds a jaxpr (a scan, a loop, a
    cond, a mapped body) taken whole: its results made from all its operands, in the backward
    pass where any equation of it is, else in the forward where any is; ``batched``: the values
    made in a backward pass that a ``vmap`` maps (`mapped_backward`); ``fronted``: the values made
    outside the passes by a transpose that moves one axis to the front, the others in order (where
    the ``vmap`` ends, its batch axis moved to its ``out_axes``: a convolution's kernel gradient is
    batched on its features' axis inside), with the value they move."""

    def __init__(self, jaxpr: Any) -> None:
        self.nodes: list[tuple[list[Any], list[Any], str | None]] = []
        self.alias: dict[Any, Any] = {}
        # per value, the shapes and dtypes (`_key`) the calls it passes into see it with: a ``pmap``'s
        # body (a ``shard_map`` in this jax) sees a mapped argument ``(devices, *shape)`` as one device's block
        self.views: dict[Any, set[tuple[tuple[int, ...], str]]] = {}
        self.batched: set[Any] = set()
        self.fronted: dict[Any, Any] = {}
        self.walk(jaxpr, "")
        self.outs = [self.at(v) for v in jaxpr.outvars if not isinstance(v, jex_core.Literal)]

    def at(self, var: Any) -> Any:
        return self.alias.get(var, var)

    def walk(self, jaxpr: Any, prefix: str) -> None:
        for eqn in jaxpr.eqns:
            stack = join_stack(prefix, str(eqn.source_info.name_stack))
            ins = [self.at(v) for v in eqn.invars if not isinstance(v, jex_core.Literal)]
            sub = next((eqn.params[p] for p in CALL_PARAMS if p in eqn.params), None) \
                if eqn.primitive.name in CALL_LIKE else None
            inner = getattr(sub, "jaxpr", sub)
            if inner is not None and len(inner.invars) == len(eqn.invars) and len(inner.outvars) == len(eqn.outvars):
                for var, outer in zip(inner.invars, eqn.invars):
                    if not isinstance(outer, jex_core.Literal):
                        self.alias[var] = self.at(outer)
                        self.views.setdefault(self.at(outer), set()).add(_key(var.aval))
                self.walk(inner, stack)
                for var, made in zip(eqn.outvars, inner.outvars):
                    if not isinstance(made, jex_core.Literal):
                        self.alias[var] = self.at(made)
                continue
            passes = {classify_pass(stack)} | set(_passes(eqn, stack))
            found = _BACKWARD if _BACKWARD in passes else next((p for p in passes if p is not None), None)
            self.nodes.append((ins, list(eqn.outvars), found))
            if found == _BACKWARD and mapped_backward(stack):
                self.batched.update(eqn.outvars)
            perm = tuple(eqn.params.get("permutation", ())) if eqn.primitive.name == "transpose" else ()
            if found is None and perm and perm[0] != 0 and perm[1:] == tuple(sorted(perm[1:])) and ins:
                self.fronted[eqn.outvars[0]] = ins[0]  # (an axis moved to the front: a vmap's out_axes=0)

    def keys(self, var: Any) -> set[tuple[tuple[int, ...], str]]:
        """The shapes and dtypes (`_key`) of ``var`` and of the calls' inputs it is passed as."""
        return {_key(var.aval)} | self.views.get(var, set())

    def outside(self, start: Iterable[Any]) -> set[Any]:
        """``start`` and every value computed from it by equations outside the gradient's passes."""
        reached = set(start)
        for ins, outs, found in self.nodes:
            if found is None and any(v in reached for v in ins):
                reached.update(outs)
        return reached


def _passes(eqn: Any, prefix: str) -> Iterable[str | None]:
    """The passes of the equations nested in ``eqn``'s jaxprs, at any depth."""
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            inner = getattr(item, "jaxpr", item)
            if hasattr(inner, "eqns"):
                for nested in inner.eqns:
                    stack = join_stack(prefix, str(nested.source_info.name_stack))
                    yield classify_pass(stack)
                    yield from _passes(nested, stack)


def _key(aval: Any) -> tuple[tuple[int, ...], str]:
    """A value's shape up to its unit axes, and its dtype (`elements_key`): a ``pmap``'s body squeezes one
    device's ``(1, *shape)`` block of a parameter before its passes read it, and its gradient and new
    value are ``shape``, the latter broadcast back."""
    return elements_key(aval)


def differentiated_leaves(jaxpr: Any, prepared: UserStep) -> set[int]:
    """The flattened leaves of the step's arguments (by index) that its loss is differentiated with
    respect to and that the step updates from their gradients (the module's docstring), among those
    no name marks as parameters; none where the jaxpr's inputs are not the flattened arguments."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    leaves = jax.tree.leaves(prepared.args)
    if len(inner.invars) != len(leaves):
        return set()
    # (whatever holds them: optax's ``LookaheadParams(fast, slow)`` is an optax type, its ``fast`` the
    # parameters; an optimizer's moments are read by no pass, and are none)
    candidates = [i for i, (leaf, owner) in enumerate(zip(leaves, prepared.owners))
                  if owner is None and getattr(leaf, "ndim", 0) > 0
                  and jax.numpy.issubdtype(getattr(leaf, "dtype", np.int32), jax.numpy.inexact)]
    if not candidates:
        return set()
    flow = _Flow(inner)
    found = _from_gradients(inner, flow, candidates)
    return found | _beside(inner, flow, _arguments(prepared.args), found, candidates)


def _arguments(args: Any) -> list[tuple[int, ...]]:
    """Per flattened leaf of ``args``, the argument it is in: its positions in the arguments' tuple and
    in the tuples or lists there (``states[1]`` of ``step(states, batch)``)."""
    found = []
    for path, _ in jax.tree_util.tree_flatten_with_path(tuple(args))[0]:
        positions = []
        for entry in path:
            if not isinstance(entry, jax.tree_util.SequenceKey):
                break
            positions.append(entry.idx)
        found.append(tuple(positions))
    return found


def _beside(inner: Any, flow: _Flow, arguments: list[tuple[int, ...]], found: set[int],
            candidates: Iterable[int]) -> set[int]:
    """The ``candidates`` the loss is differentiated with respect to beside ``found`` (those the step
    updates from their gradients) though their new value is made from no gradient: an optimizer that
    zeroes their updates (``optax.chain(optax.adam(lr), optax.transforms.freeze(mask))``: Adam reads
    their gradients, ``freeze`` replaces its updates by zeros, their new value is ``p + 0``). ``jax.grad``
    differentiates with respect to a whole argument, so a leaf of an argument that holds a leaf of
    ``found`` is one where the passes read it, the backward pass makes an array of its shape and dtype
    (its gradient, read or not) and the step returns an array of its shape and dtype computed from
    it anew outside the passes (its new value); a batch in that argument is returned by no such array."""
    held = {arguments[i] for i in found}
    rest = [i for i in candidates if i not in found and arguments[i] in held]
    if not rest:
        return set()
    made = {_key(v.aval) for _, outs, found_pass in flow.nodes if found_pass == _BACKWARD for v in outs}
    origins, read = _origins(flow, [inner.invars[i] for i in rest])
    beside = set()
    for bit, index in enumerate(rest):
        var = inner.invars[index]
        key = _key(var.aval)
        if read >> bit & 1 and key in made and any(
                v is not var and _key(v.aval) == key and origins.get(v, 0) >> bit & 1 for v in flow.outs):
            beside.add(index)
    return beside


def trained_and_rewritten(jaxpr: Any, count: int, indices: Iterable[int]) -> tuple[set[int], set[int]]:
    """Of the flattened argument leaves ``indices`` (of ``count``): (those the step updates from
    their gradients, as `differentiated_leaves` finds them, those it returns an array of their
    shape and dtype computed anew from, outside the passes: a new value, from a gradient, zeros or
    none); both empty where the jaxpr's inputs are not the ``count`` leaves. Read by data flow, not
    by name or shape alone: the parameters of two trees of one network class (TD3's critics, its
    actor beside them) have the same modules and shapes, and only the flow tells which the step
    trains and which it returns rewritten."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    indices = list(indices)
    if len(inner.invars) != count or not indices:
        return set(), set()
    flow = _Flow(inner)
    rewritten = set()
    for index in indices:
        var = inner.invars[index]
        mine, keys = flow.outside([var]), flow.keys(var)
        if any(v in mine and v is not var and _key(v.aval) in keys for v in flow.outs):
            rewritten.add(index)
    return _from_gradients(inner, flow, indices), rewritten


def new_values(jaxpr: Any) -> set[int]:
    """The step's results (by index among its outputs) that are the new value of an array the
    gradient's passes read and that the step makes or takes outside them: a result of its shape and
    dtype computed, outside the passes, from such an array and from a gradient of that shape and
    dtype (the module's docstring), and the results these are computed from outside the passes (an
    optimizer's new state). The parameters of a step that initialises them inside itself (purejaxrl's
    ``train(rng)``) match no argument, and their update is the update all the same."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    flow = _Flow(inner)
    gradients = _handed_back(flow, scalars=False)  # (scalars left out, as in `differentiated_leaves`)
    if not gradients:
        return set()
    in_passes = {v for _, outs, found in flow.nodes if found is not None for v in outs}
    primals: dict[tuple[tuple[int, ...], str], set[Any]] = {}
    for ins, _, found in flow.nodes:  # what the passes read, made outside them (or an argument)
        for var in ins:
            key = _key(getattr(var, "aval", None))
            if found is not None and key in gradients and var not in in_passes:
                primals.setdefault(key, set()).add(var)
    outs = [None if isinstance(v, jex_core.Literal) else flow.at(v) for v in inner.outvars]
    found_results: set[int] = set()
    for key, values in primals.items():
        both = flow.outside(values) & flow.outside(gradients[key])
        found_results.update(j for j, v in enumerate(outs)
                             if v is not None and v in both and v not in values and _key(v.aval) == key)
    # and the results the new values are computed from outside the passes: the optimizer's new
    # state (Adam's moments and step count, which its update reads)
    needed = {outs[j] for j in found_results}
    for ins, made_here, found in reversed(flow.nodes):
        if found is None and any(v in needed for v in made_here):
            needed.update(ins)
    return found_results | {j for j, v in enumerate(outs) if v is not None and v in needed}


def optimizer_state_leaves(jaxpr: Any, count: int, parameters: Iterable[int], candidates: Iterable[int]) -> set[int]:
    """Of the flattened argument leaves ``candidates`` (of ``count``), those an optimizer's state
    holds, whatever container holds them (a plain dict's ``m`` and ``v``, not only an optax state):
    a leaf no pass of the gradient reads (the loss does not depend on it) that the step writes back
    (it returns an array of its shape and dtype computed from it outside the passes) and whose new
    value depends on a gradient other than through the parameters' new values (those of the leaves
    ``parameters``: a result of a parameter's shape and dtype computed from it and from a gradient).
    Adam's moments, Lion's and momentum's are; a step counter, an RNG key, the batch statistics the
    forward pass makes and an EMA computed from the parameters (old or new) are not: model state.
    No leaf where the jaxpr's inputs are not the ``count`` leaves, or where it hands back no gradient."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    candidates = list(candidates)
    if len(inner.invars) != count or not candidates:
        return set()
    flow = _Flow(inner)
    gradients = [v for found in _handed_back(flow, scalars=True).values() for v in found]
    if not gradients:
        return set()
    from_gradients = flow.outside(gradients)
    inputs = set(inner.invars)
    # the parameters' new values: what depends on a gradient through them alone is theirs
    parameters = list(parameters)
    origins, _ = _origins(flow, [inner.invars[i] for i in parameters])
    updated = {v for v in flow.outs if v in from_gradients and v not in inputs
               for bit, index in enumerate(parameters) if origins.get(v, 0) >> bit & 1
               and _key(v.aval) == _key(inner.invars[index].aval)}
    reached = set(gradients)
    for ins, outs, found in flow.nodes:
        if found is None and any(v in reached and v not in updated for v in ins):
            reached.update(outs)
    origins, read = _origins(flow, [inner.invars[i] for i in candidates])
    states = set()
    for v in flow.outs:
        mask = origins.get(v, 0) & ~read if v in reached and v not in inputs else 0
        states.update(index for bit, index in enumerate(candidates)
                      if mask >> bit & 1 and _key(v.aval) == _key(inner.invars[index].aval))
    return states


def _origins(flow: _Flow, sources: list[Any]) -> tuple[dict[Any, int], int]:
    """Per value, the ``sources`` (a bit each, by position) it is computed from outside the
    gradient's passes (`_Flow.outside`, for all of them at once); and those a pass reads, or reads
    a value so computed (the loss depends on them: a parameter, the batch)."""
    origins: dict[Any, int] = {}
    for bit, var in enumerate(sources):
        origins[var] = origins.get(var, 0) | 1 << bit
    read = 0
    for ins, outs, found in flow.nodes:
        mask = 0
        for v in ins:
            mask |= origins.get(v, 0)
        if not mask:
            continue
        if found is not None:
            read |= mask
            continue
        for v in outs:
            origins[v] = origins.get(v, 0) | mask
    return origins, read


def _handed_back(flow: _Flow, scalars: bool) -> dict[tuple[tuple[int, ...], str], list[Any]]:
    """The arrays the backward pass hands back (made by it, read outside the passes or returned), by
    shape and dtype, a per-example gradient (made in a backward pass a ``vmap`` maps) also by its
    shape less the leading axis, the examples' (`per_example_gradients`); ``scalars``: scalars too."""
    handed = _handed(flow)
    gradients: dict[tuple[tuple[int, ...], str], list[Any]] = {}
    for var in handed:
        shape, dtype = _key(var.aval)
        if scalars or shape:
            gradients.setdefault((shape, dtype), []).append(var)
    for var in _per_example(flow, handed):
        shape, dtype = _key(var.aval)
        if scalars or shape[1:]:
            gradients.setdefault((shape[1:], dtype), []).append(var)
    return gradients


def _handed(flow: _Flow) -> set[Any]:
    """The values the backward pass makes that an equation outside the passes reads or the step returns."""
    made = {v for _, outs, found in flow.nodes if found == _BACKWARD for v in outs}
    return made & ({v for ins, _, found in flow.nodes if found is None for v in ins} | set(flow.outs))


def _per_example(flow: _Flow, handed: set[Any]) -> list[Any]:
    """Of the arrays the backward pass hands back (``handed``), the floating ones a backward pass
    that a ``vmap`` maps makes, and the arrays computed from them outside the passes whose batch axis
    the ``vmap``'s end moves to the front (`_Flow.fronted`): per-example gradients, ``(n, *p.shape)``.
    One whose layout such a move reads (an array of its shape, computed from it) has the examples on
    another axis (a convolution's kernel gradient, beside its features): left out, its move kept."""
    batched = [v for v in handed if v in flow.batched and getattr(v.aval, "ndim", 0) > 0
               and jax.numpy.issubdtype(v.aval.dtype, jax.numpy.inexact)]
    if not batched or not flow.fronted:
        return batched
    origins, _ = _origins(flow, batched)
    moved, fronted = 0, []
    for out, source in flow.fronted.items():
        mask = origins.get(source, 0)
        if mask:
            fronted.append(out)
            moved |= sum(1 << bit for bit, v in enumerate(batched)
                         if mask >> bit & 1 and v.aval.shape == source.aval.shape)
    return [v for bit, v in enumerate(batched) if not moved >> bit & 1] + fronted


def per_example_gradients(jaxpr: Any) -> dict[tuple[tuple[int, ...], str], int]:
    """The per-example gradients the step's backward pass hands back: per shape and dtype of the
    parameters they are gradients of (``p.shape``, as `_key` writes it), the most examples one is
    batched over. A backward pass that a ``vmap`` maps (``jax.vmap(jax.grad(loss))``, as DP-SGD
    computes each example's gradient to clip it) makes the gradient of ``p`` as an array of shape
    ``(n, *p.shape)``, one per example, before the step sums them."""
    flow = _Flow(getattr(jaxpr, "jaxpr", jaxpr))
    examples: dict[tuple[tuple[int, ...], str], int] = {}
    for var in _per_example(flow, _handed(flow)):
        shape, dtype = _key(var.aval)
        examples[shape[1:], dtype] = max(examples.get((shape[1:], dtype), 0), shape[0])
    return examples


def _from_gradients(inner: Any, flow: _Flow, candidates: Iterable[int]) -> set[int]:
    """The ``candidates`` (flattened leaves, by index) that the step updates from their gradients:
    each under any shape a call sees it with (`_Flow.keys`: one device's, in a ``pmap``'s body)."""
    gradients = _handed_back(flow, scalars=True)
    if not gradients:
        return set()
    from_gradients: dict[tuple[tuple[int, ...], str], set[Any]] = {}
    found: set[int] = set()
    # a new value that a gradient's passes then read is an input perturbed along its gradient (FGSM's
    # adversarial batch, returned beside the new state), not a new parameter: a parameter's new value
    # is the step's result for the next step's passes
    fed = {v for ins, _, found_pass in flow.nodes if found_pass is not None for v in ins}
    for index in candidates:
        var = inner.invars[index]
        keys = [key for key in flow.keys(var) if key in gradients]
        if not keys:
            continue
        mine = flow.outside([var])
        if not any(found_pass is not None and any(v in mine for v in ins) for ins, _, found_pass in flow.nodes):
            continue  # no pass reads it: the loss does not depend on it (an optimizer's moment, an EMA)
        for key in keys:
            if key not in from_gradients:
                from_gradients[key] = flow.outside(gradients[key])
            both = mine & from_gradients[key]
            if any(v in both and v is not var and v not in fed and _key(v.aval) == key for v in flow.outs):
                found.add(index)
    return found


def with_differentiated_parameters(jaxpr: Any, prepared: UserStep) -> UserStep:
    """The step with the leaves its loss is differentiated with respect to (`differentiated_leaves`)
    parameters, as well as those its arguments' names mark (`UserStep.with_differentiated`)."""
    found = differentiated_leaves(jaxpr, prepared)
    return prepared.with_differentiated(found) if found else prepared
