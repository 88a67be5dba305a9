"""Per-layer rows split by the tree a layer's parameters belong to, where several of a step's
arguments hold parameters of one module path (TD3's actor and two critics, two TrainStates of one
network class: `xla_cost.step.user_step.UserStep.trees`).

Name stacks cannot tell such trees apart: both critics run under ``QNetwork/Dense_0``. The data
flow can. Every value carries the trees it is computed from, starting at the step's arguments
(each leaf of an argument that holds a tree: its parameters, optimizer state and counter):

* an equation that reads an argument's leaf, or a view of one (reshaped, transposed, cast,
  sliced), is that argument's tree's: a forward product reading a critic's kernel, the
  backward product that reads it for the input's cotangent (``dX``), the optimizer's update of it;
* any other equation is the tree all its operands' trees share, else theirs together: a weight's
  gradient ``dW`` reads the layer's input (the batch, no tree; or an activation of its own
  forward) and the cotangent its tree's ``dX`` made, so it mirrors its tree's forward product;
  the actor's layers reading the critic's cotangent and the actor's own activations are the actor's.

An equation of one tree whose label (`xla_cost.count.step_labels.Label`) names a module is that
module's of that tree (owner ``qf1_state/Dense_0``); `rows_by_tree` groups rows so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from jax.extend import core as jex_core

from xla_cost.choices import REMAINDER
from xla_cost.count.attribution import attribute_parts
from xla_cost.count.interpret import CALL_LIKE, CALL_PARAMS, EqnCount
from xla_cost.count.layers import LayerCosts
from xla_cost.count.param_reads import PRODUCTS
from xla_cost.count.registry import Cost
from xla_cost.count.step_labels import Label, StepLabels

__all__ = ["tree_labels", "rows_by_tree"]

_VIEWS = frozenset({
    "reshape", "squeeze", "expand_dims", "transpose", "convert_element_type", "broadcast_in_dim", "slice",
    "dynamic_slice", "gather", "rev", "reduce_precision", "copy", "copy_p", "sharding_constraint",
    "mesh_cast", "reshard", "device_put",
})
"""Primitives whose one result is their first operand's data, rearranged: an argument's leaf still."""

_Trees = frozenset[str]
_NONE: _Trees = frozenset()


class _Flow:
    """Walks a step's jaxpr: per value, its trees (`env`), whether it is an argument's leaf or a view
    of one, and the trees of the products that read it beside a leaf (`reader`: a layer's input,
    which its weight's gradient reads again)."""

    def __init__(self) -> None:
        self.found: dict[tuple[Any, ...], _Trees] = {}  # equation path -> its trees

    def walk(self, jaxpr: Any, path: tuple[Any, ...], given: Sequence[_Trees], direct: Sequence[bool],
             readers: Sequence[_Trees]) -> tuple[list[_Trees], list[bool], list[_Trees]]:
        """The trees of ``jaxpr``'s results, whether each is a leaf (or a view of one), and per input
        the trees of the products that read it beside a leaf."""
        jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
        env: dict[Any, _Trees] = dict(zip(jaxpr.invars, given))
        leaf: set[Any] = {v for v, d in zip(jaxpr.invars, direct) if d}
        reader: dict[Any, _Trees] = {v: r for v, r in zip(jaxpr.invars, readers) if r}
        source: dict[Any, Any] = {}  # a view's operand

        def of(var: Any) -> _Trees:
            return _NONE if isinstance(var, jex_core.Literal) else env.get(var, _NONE)

        def read_by(var: Any, trees: _Trees) -> None:
            while not isinstance(var, jex_core.Literal) and trees:
                reader[var] = reader.get(var, _NONE) | trees
                var = source.get(var)
                if var is None:
                    break

        for index, eqn in enumerate(jaxpr.eqns):
            here = (*path, index)
            name = eqn.primitive.name
            ins = [of(v) for v in eqn.invars]
            read = [not isinstance(v, jex_core.Literal) and v in leaf for v in eqn.invars]
            held = [_NONE if isinstance(v, jex_core.Literal) else reader.get(v, _NONE) for v in eqn.invars]
            sub = next((eqn.params[p] for p in CALL_PARAMS if p in eqn.params), None) if name in CALL_LIKE else None
            outs: list[_Trees]
            if sub is not None or name in ("scan", "while", "cond"):
                outs, views, inner = self.nested(eqn, sub, here, ins, read, held)
                leaf.update(v for v, d in zip(eqn.outvars, views) if d)
                for var, trees in zip(eqn.invars, inner):
                    read_by(var, trees)
            else:
                tree = _combine(ins, read)
                if name in PRODUCTS and not any(read):  # a weight's gradient: the tree of the product it mirrors
                    tree = _mirrored(frozenset().union(*held), tree)
                elif name in PRODUCTS and tree:
                    for var, r in zip(eqn.invars, read):
                        if not r:
                            read_by(var, tree)
                outs = [tree] * len(eqn.outvars)
                if name in _VIEWS and eqn.invars and not isinstance(eqn.invars[0], jex_core.Literal):
                    source.update((v, eqn.invars[0]) for v in eqn.outvars)
                    if read[0]:
                        outs = [ins[0]] * len(eqn.outvars)
                        leaf.update(eqn.outvars)
            self.found[here] = frozenset().union(*outs)
            env.update((v, t) for v, t in zip(eqn.outvars, outs) if t)
        return ([of(v) for v in jaxpr.outvars],
                [not isinstance(v, jex_core.Literal) and v in leaf for v in jaxpr.outvars],
                [reader.get(v, _NONE) for v in jaxpr.invars])

    def nested(self, eqn: Any, sub: Any, here: tuple[Any, ...], ins: list[_Trees], read: list[bool],
               held: list[_Trees]) -> tuple[list[_Trees], list[bool], list[_Trees]]:
        """A call's, a loop's or a branch's results (their trees, whether leaves) and its operands'
        readers; a loop's body walked until its carries' trees settle."""
        params, name = eqn.params, eqn.primitive.name
        if sub is not None:
            return self.walk(sub, here, ins, read, held)
        none = [False] * len(ins)
        if name == "cond":
            found = [self.walk(b, (*here, f"b{k}"), ins[1:], read[1:], held[1:])
                     for k, b in enumerate(params["branches"])]
            return ([frozenset().union(*column) for column in zip(*(f[0] for f in found))], none,
                    [_NONE, *(frozenset().union(*column) for column in zip(*(f[2] for f in found)))])
        if name == "scan":
            consts, carry = int(params["num_consts"]), int(params["num_carry"])
            given = list(ins)
            for _ in range(carry + 1):
                outs, _, inner = self.walk(params["jaxpr"], here, given, read, held)
                grown = [*given[:consts], *(g | o for g, o in zip(given[consts:consts + carry], outs)),
                         *given[consts + carry:]]
                if grown == given:
                    break
                given = grown
            return outs, none, inner
        cond_n, body_n = int(params["cond_nconsts"]), int(params["body_nconsts"])
        carry = ins[cond_n + body_n:]
        for _ in range(len(carry) + 1):
            outs, _, inner = self.walk(params["body_jaxpr"], (*here, "body"), [*ins[cond_n:cond_n + body_n], *carry],
                                       read[cond_n:], held[cond_n:])
            grown = [c | o for c, o in zip(carry, outs)]
            if grown == carry:
                break
            carry = grown
        self.walk(params["cond_jaxpr"], (*here, "cond"), [*ins[:cond_n], *carry], [False] * (cond_n + len(carry)),
                  [_NONE] * (cond_n + len(carry)))
        return carry, none, [*[_NONE] * cond_n, *inner]


def _mirrored(readers: _Trees, tree: _Trees) -> _Trees:
    """The tree of a product that reads no leaf (a weight's gradient, ``x^T g``), from the trees
    of the products that read its operands beside a leaf (the layer's forward product, which read
    ``x`` with the weight) and its operands' own (``tree``): the one tree of those products, else
    the one they share with the operands, else the operands'."""
    if len(readers) == 1:
        return readers
    return (readers & tree) if len(readers & tree) == 1 else tree


def _combine(ins: Sequence[_Trees], read: Sequence[bool]) -> _Trees:
    """An equation's trees: those of the arguments' leaves it reads, else those its operands share,
    else all of theirs."""
    direct = [t for t, r in zip(ins, read) if r and t]
    if direct:
        return frozenset().union(*direct)
    known = [t for t in ins if t]
    if not known:
        return _NONE
    shared = frozenset.intersection(*known)
    return shared or frozenset().union(*known)


def tree_labels(jaxpr: Any, labels: StepLabels, trees: Sequence[str]) -> StepLabels:
    """``labels`` (of ``jaxpr``, a step classified by `xla_cost.count.step_parts.classify_step`)
    with each equation's module owner named after its tree (``qf1_state/Dense_0``) where the data
    flow gives it one tree (the module's docstring); ``trees``: per input variable of ``jaxpr``, the
    tree of the argument it is a leaf of ('' for none)."""
    flow = _Flow()
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    given = [frozenset({t}) if t else _NONE for t in trees]
    flow.walk(inner, (), given, [bool(t) for t in trees], [_NONE] * len(trees))
    out = StepLabels()
    for path, label in labels.items():
        found = flow.found.get(path, _NONE)
        owner = label.owner
        if owner is not None and len(found) == 1:
            owner = f"{next(iter(found))}/{owner}" if owner else next(iter(found))
        out[path] = Label(label.part, owner)
    out.saved_bytes, out.first_forward, out.tags = labels.saved_bytes, labels.first_forward, labels.tags
    out.gradients = labels.gradients
    return out


def rows_by_tree(
    parts: Mapping[str, Iterable[EqnCount]], params: Mapping[str, Mapping[str, int]], *,
    root: str | Sequence[str] | None, depth: int | None = None, known_modules: Collection[str] = (),
) -> tuple[LayerCosts, ...]:
    """`xla_cost.count.attribution.attribute_parts` of each tree's equations (those whose owner
    `tree_labels` named after one of ``params``' trees), with its own parameters (``params``: per
    tree, its parameter count per module path), each row's path after its tree's name; then the
    rows of the equations of no one tree (module work the data flow leaves to several: no
    parameters of their own), and one remainder row for them all."""
    groups: dict[str, dict[str, list[EqnCount]]] = {tree: {p: [] for p in parts} for tree in (*params, "")}
    for part, equations in parts.items():
        for eqn in equations:
            tree = next((t for t in params if eqn.owner is not None and eqn.owner.startswith(f"{t}/")), "")
            if tree:
                eqn = dataclasses.replace(eqn, owner=eqn.owner[len(tree) + 1:] or None)
            groups[tree][part].append(eqn)
    rows: list[LayerCosts] = []
    rest: list[LayerCosts] = []
    for tree, found in groups.items():
        for row in attribute_parts(found, params.get(tree, {}), root=root, depth=depth, known_modules=known_modules):
            if row.path == REMAINDER:
                rest.append(row)
            elif tree:
                rows.append(dataclasses.replace(row, path=f"{tree}/{row.path}"))
            elif row.forward.flops or row.backward.flops or row.update.flops or row.parameters:
                rows.append(row)
    remainder = LayerCosts(
        path=REMAINDER, parameters=sum(r.parameters for r in rest),
        forward=sum((r.forward for r in rest), Cost()), backward=sum((r.backward for r in rest), Cost()),
        update=sum((r.update for r in rest), Cost()), trip_count=max((r.trip_count for r in rest), default=1),
        recomputed=sum((r.recomputed for r in rest), Cost()))
    return (*rows, remainder)
