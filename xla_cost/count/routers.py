"""A mixture of experts found in a program whose model declares no routing: the note that says so.

A model that routes its tokens to experts declares it (`xla_cost.step.routing.ROUTING_ATTRIBUTE`)
to have its active parameters computed and its capacity padding left out of the model FLOP. One
that does not (a repository's own V-MoE, GShard or Switch layer) would be counted as a dense
model in silence: `find_router` finds its routing in its jaxpr, and `undeclared_routing_note`
says what that leaves uncounted and how to declare it.

A router is a ``top_k`` (or ``approx_top_k``) over an axis of E, where a matrix product reads
a parameter stacked along a leading axis of E (at least three axes: E matrices), or an
``argmax`` over an axis of E whose result reaches such a product (the expert it picks: a gather
of its weights, a one-hot dispatch). A ``top_k`` over a classifier's or a language model's logits
matches no such stack (its axis is the classes or the vocabulary; an embedding table is two-axed).
Experts written as E modules of their own (``experts_0`` .. ``experts_{E-1}``, or ``experts/0``
.., alike in their parameters' paths: Flax Mixtral ports that keep a list of expert MLPs and mask
each one's output) are found as such a stack is, where the ``top_k`` is inside their parent module
(`_expert_modules`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from jax.extend import core as jex_core

from xla_cost.count.interpret import join_stack
from xla_cost.count.param_reads import VIEWS_OF_FIRST
from xla_cost.count.primitives import CALL_LIKE, CALL_PARAMS
from xla_cost.count.stacks import model_scopes
from xla_cost.step.routing import ROUTING_ATTRIBUTE

__all__ = ["Router", "ROUTING_DOCS", "UNDECLARED_ROUTING_NOTE", "find_router", "undeclared_routing_note",
           "undeclared_routing_notes"]

UNDECLARED_ROUTING_NOTE = "routed experts not declared: "
"""How the note of `undeclared_routing_note` begins."""

ROUTING_DOCS = "docs/api.md#routed-experts-a-mixture-of-experts"
"""The manual's section on declaring a model's routing."""

_TOP_K = frozenset({"top_k", "approx_top_k"})
_PRODUCTS = frozenset({"dot_general", "ragged_dot_general", "ragged_dot"})
@dataclasses.dataclass(frozen=True)
class Router:
    """A routing found in a program: ``primitive`` (``top_k``, ``approx_top_k``, ``argmax``) over
    ``experts`` under the name stack ``where``, the experts' weights those of ``module`` (its
    parameter stacked ``[experts, ...]``; "" where unknown or the root's own; with ``separate``, the E
    modules of their own, ``moe/experts_0 .. experts_7``)."""

    where: str
    experts: int
    primitive: str
    module: str = ""
    separate: bool = False  # the experts are E modules of their own (`_expert_modules`), not one stack


def _jaxpr(value: Any) -> Any:
    while hasattr(value, "jaxpr") and not hasattr(value, "eqns"):
        value = value.jaxpr
    return value


def _shape(var: Any) -> tuple[int, ...]:
    return tuple(getattr(getattr(var, "aval", None), "shape", ()) or ())


Label = tuple[Any, frozenset[tuple[int, str]]]
"""What a value is to `find_router`: a parameter or a view of one (``(shape, module)``: its shape where
it entered the jaxpr; None: none), and the ``(experts, name stack)`` of each argmax it is computed from."""

_NONE: Label = (None, frozenset())


def find_router(program: Any, owners: Sequence[str | None]) -> Router | None:
    """The first routing of ``program`` (a jaxpr, closed or not, or a traced program) into its
    experts' stacked parameters, or None. ``owners``: per input variable, the module whose
    parameter it is (None: no parameter; "" the root's). Calls, loops' bodies (a scanned
    stack's slice is a layer's parameter) and branches are followed."""
    routes: list[tuple[str, int, str]] = []  # (stack, experts, how) of each top_k
    stacked: dict[int, str] = {}  # leading axis of a stacked parameter a product reads -> its module
    chosen: list[Router] = []  # an argmax that reaches a product over a stack of as many

    def walk(jaxpr: Any, prefix: str, given: Sequence[Label]) -> list[Label]:
        jaxpr = _jaxpr(jaxpr)
        env: dict[Any, Label] = {v: g for v, g in zip(jaxpr.invars, given) if g != _NONE}
        swapped: set[Any] = set()  # a transpose's result whose last axis was the one before it: [.., E, S]

        def of(var: Any) -> Label:
            return _NONE if isinstance(var, jex_core.Literal) else env.get(var, _NONE)

        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            stack = join_stack(prefix, str(eqn.source_info.name_stack))
            ins = [of(v) for v in eqn.invars]
            taken = frozenset().union(*(picks for _, picks in ins))
            outs: list[Label] = [(None, taken)] * len(eqn.outvars)
            if name in _TOP_K or name == "argmax":
                shape = _shape(eqn.invars[0])
                axis = eqn.params["axes"][0] if name == "argmax" else eqn.params.get(
                    "axis", eqn.params.get("reduction_dimension", -1))
                if shape and name == "argmax":
                    outs = [(None, taken | {(shape[int(axis)], stack)})]
                elif shape:
                    routes.append((stack, shape[int(axis)], name))
                    if len(shape) >= 2 and eqn.invars[0] in swapped:  # each expert's top tokens (expert choice)
                        routes.append((stack, shape[-2], f"{name} of the tokens per expert"))
            elif name in _PRODUCTS:
                for param, _ in ins:
                    if param is not None and len(param[0]) >= 3:
                        stacked.setdefault(param[0][0], param[1])
                        chosen.extend(Router(where, experts, "argmax", param[1])
                                      for experts, where in taken if experts == param[0][0])
            elif name in CALL_LIKE or name in ("scan", "while", "cond"):
                outs = _called(eqn, stack, ins, walk) or outs
            elif name in VIEWS_OF_FIRST:  # a view of a parameter is still the parameter
                permutation = eqn.params.get("permutation", ()) if name == "transpose" else ()
                if len(permutation) >= 2 and permutation[-2] == len(permutation) - 1:
                    swapped.update(eqn.outvars)
                if ins[0][0] is not None:
                    outs = [(ins[0][0], taken)] * len(eqn.outvars)
            env.update((v, o) for v, o in zip(eqn.outvars, outs) if o != _NONE)
        return [of(v) for v in jaxpr.outvars]

    walk(program, "", [((_shape(v), o), frozenset()) if o is not None else _NONE
                       for v, o in zip(_jaxpr(program).invars, owners)])
    for where, experts, primitive in routes:
        if experts in stacked:
            return Router(where, experts, primitive, stacked[experts])
    if chosen:
        return chosen[0]
    groups = _expert_modules(owners)
    for where, experts, primitive in routes:
        scopes = "/" + "/".join(model_scopes(where)) + "/"
        for parent, module in groups.get(experts, ()):
            if f"/{parent}/" in scopes:
                return Router(where, experts, primitive, module, separate=True)
    return None


def _expert_modules(owners: Sequence[str | None]) -> dict[int, list[tuple[str, str]]]:
    """Sibling modules numbered 0 .. E - 1 (``experts_0``, or ``experts/0`` in an NNX list) below a
    module other than the root, each holding parameters at the same paths below it: per E, the
    ``(parent, "parent/experts_{0..E-1}")`` of each such group."""
    found: dict[tuple[str, str, str], dict[int, set[str]]] = {}
    for module in {o for o in owners if o}:
        parts = module.split("/")
        for j in range(1, len(parts)):
            number = re.fullmatch(r"(.*?_)?(\d+)", parts[j])
            if number is not None:
                stem = number.group(1) or ""
                key = ("/".join(parts[:j]), stem, "" if stem else "/")
                found.setdefault(key, {}).setdefault(int(number.group(2)), set()).add("/".join(parts[j + 1:]))
    groups: dict[int, list[tuple[str, str]]] = {}
    for (parent, stem, sep), members in sorted(found.items()):
        count = len(members)
        alike = len({frozenset(paths) for paths in members.values()}) == 1
        if count >= 2 and sorted(members) == list(range(count)) and alike:
            first, last = (f"{parent}/{stem}0", f"{stem}{count - 1}") if stem else (f"{parent}/0", f"{count - 1}")
            groups.setdefault(count, []).append((parent, f"{first} .. {last}"))
    return groups


def _called(eqn: Any, stack: str, ins: list[Label], walk: Any) -> list[Label]:
    """Walks the jaxprs an equation calls (its operands given to their variables); its results'
    labels where it is one call (else [])."""
    name = eqn.primitive.name
    if name == "scan":  # consts, carry, then the scanned inputs: a layer's slice of each
        start = eqn.params["num_consts"] + eqn.params["num_carry"]
        walk(eqn.params["jaxpr"], stack, [((p[0][1:], p[1]) if p is not None and i >= start else p, picks)
                                          for i, (p, picks) in enumerate(ins)])
    elif name == "while":
        walk(eqn.params["body_jaxpr"], stack, ins[eqn.params.get("cond_nconsts", 0):])
    elif name == "cond":
        for branch in eqn.params.get("branches", ()):
            walk(branch, stack, ins[1:])
    else:
        sub = next((eqn.params[p] for p in CALL_PARAMS if p in eqn.params), None)
        if sub is not None:
            return walk(sub, stack, ins)
    return []


def undeclared_routing_note(router: Router) -> str:
    """The report's note on a routing the model does not declare: where it routes, what is not
    counted for it, and how to declare it."""
    where = "/".join(model_scopes(router.where)) or "the model's root"
    held = f" in {router.module}" if router.module else ""
    if router.separate:
        return (f"{UNDECLARED_ROUTING_NOTE}the forward routes tokens to {router.experts} experts ({router.primitive} "
                f"in {where}; the experts are {router.experts} modules of their own, {router.module}); active "
                "parameters are not computed (None), and the FLOP and model_flops count whatever each expert "
                "computes: on every token where its output is masked by the routing rather than its tokens "
                "gathered (dense work, not a routed model's): declare the routing in the model's "
                f"{ROUTING_ATTRIBUTE} (xla_cost.Routing, a pattern matching the experts' paths; {ROUTING_DOCS}) for "
                "its active parameters")
    return (f"{UNDECLARED_ROUTING_NOTE}the forward routes tokens to {router.experts} experts ({router.primitive} "
            f"in {where}; their weights stacked along a leading axis of {router.experts}{held}); active parameters "
            "are not computed (None), and model_flops count the experts' products on any capacity padding (slots "
            "no token fills) and the dispatch and combine products as model FLOP: declare the routing in the "
            f"model's {ROUTING_ATTRIBUTE} (xla_cost.Routing; {ROUTING_DOCS}) for its active parameters and its "
            "padding left out of model_flops")


def undeclared_routing_notes(program: Any, owners: Sequence[str | None] | None,
                             declared: bool) -> tuple[str, ...]:
    """`undeclared_routing_note` of ``program``'s router, where its model declares no routing
    (``declared``: it does) and ``owners`` (as for `find_router`) are known; else ()."""
    if declared or program is None or owners is None:
        return ()
    router = find_router(program, owners)
    return () if router is None else (undeclared_routing_note(router),)
