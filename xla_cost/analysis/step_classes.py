"""Parameter trees named after the module classes a user's step applies to them
(`xla_cost.analysis.user_step`).

A step may hold several Linen models' variables side by side under keys of its own
(cleanrl's PPO: ``AgentParams(network_params, actor_params, critic_params)``, each
``{"params": ...}`` applied with its own class: ``Network``, ``Actor``, ``Critic``). Flax names
each model's work by its class and its submodules (``jvp(Network)/Conv_0``), never by the key
the step keeps its variables under, so no name stack matches a parameter path
(``network_params/params/Conv_0``), and ``Dense_0`` is in all three trees.

Which tree a class is applied to is read from the data flow, not guessed from names: an
equation of the gradient's passes under ``Class/Sub_0/...`` that reads a parameter leaf of
module ``prefix/Sub_0/...`` says that ``Class`` is applied to the tree ``prefix``. Where each
such class reads one tree and each tree is read by one class, the tree's modules are named
after the class (``network_params/params/Conv_0`` -> ``Network/Conv_0``): the rows and the
name stacks then agree. A class applied to two trees (two critics of one class) or a tree
applied by two classes is left as it is: its work stays in the remainder, as the
unmatched-stack note says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from jax.extend import core as jex_core

from xla_cost.count.interpret import join_stack
from xla_cost.count.primitives import VIEWS
from xla_cost.count.stacks import classify_pass, differentiated_scopes
from xla_cost.step.user_step import UserStep

__all__ = ["applied_trees", "with_class_names"]

_SAME_VALUE = VIEWS | {"convert_element_type", "copy", "copy_p"}
"""Equations whose result is their operand's value (a weight cast to the compute dtype): the
parameter it reads is still its module's."""


def _inner_operands(eqn: Any) -> list[tuple[Any, list[Any]]]:
    """``(jaxpr, the outer values its inputs are)`` for each jaxpr an equation holds, where its inputs
    line up with the equation's operands (a call, a scan; a cond's branches after the index; a while
    loop's body and condition)."""
    found = []
    name = eqn.primitive.name
    for key, value in eqn.params.items():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            inner = getattr(item, "jaxpr", item)
            if not hasattr(inner, "eqns"):
                continue
            operands = list(eqn.invars)
            if name == "cond":
                operands = operands[1:]
            elif name == "while":
                cond_n, body_n = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
                carry = operands[cond_n + body_n:]
                operands = operands[cond_n:] if key == "body_jaxpr" else [*operands[:cond_n], *carry]
            found.append((inner, operands if len(operands) == len(inner.invars) else [None] * len(inner.invars)))
    return found


def applied_trees(jaxpr: Any, owners: list[str | None]) -> dict[str, set[str]]:
    """Per class name opening a stack of the gradient's passes, the parameter trees (module-path
    prefixes) its equations read parameters of (the module docstring)."""
    found: dict[str, set[str]] = {}

    def walk(inner: Any, prefix: str, env: Mapping[Any, str]) -> None:
        env = dict(env)
        for eqn in inner.eqns:
            stack = join_stack(prefix, str(eqn.source_info.name_stack))
            nested = _inner_operands(eqn)
            for sub, operands in nested:
                walk(sub, stack, {var: env[outer] for var, outer in zip(sub.invars, operands)
                                  if outer is not None and not isinstance(outer, jex_core.Literal) and outer in env})
            if nested:
                continue
            read = [env[v] for v in eqn.invars if not isinstance(v, jex_core.Literal) and v in env]
            if eqn.primitive.name in _SAME_VALUE and len(read) == 1:
                env.update((out, read[0]) for out in eqn.outvars)
            if not read or classify_pass(stack) is None:
                continue
            scopes = differentiated_scopes(stack)
            for module in read:
                applied = _applied(module, scopes)
                if applied is not None:
                    found.setdefault(applied[0], set()).add(applied[1])

    closed = getattr(jaxpr, "jaxpr", jaxpr)
    walk(closed, "", {var: o for var, o in zip(closed.invars, owners) if o is not None})
    return found


def _applied(module: str, scopes: tuple[str, ...]) -> tuple[str, str] | None:
    """``(class, tree)`` of a parameter of module ``module`` read under ``scopes``: the outermost
    scope whose next scopes the module's path ends with (the longest run of them), and the prefix of
    the path above them (``Network``, ``network_params/params`` of ``network_params/params/Conv_0``
    read under ``loss/Network/Conv_0``); None where no run of scopes ends it, or nothing is above it."""
    for k in range(len(scopes) - 1):
        for m in range(len(scopes) - k - 1, 0, -1):
            tail = "/".join(scopes[k + 1:k + 1 + m])
            if module.endswith("/" + tail):
                return scopes[k], module[:-len(tail) - 1]
    return None


def with_class_names(jaxpr: Any, prepared: UserStep, matched: Callable[[UserStep], int]) -> UserStep:
    """The step with each parameter tree that one class alone is applied to, and that class to it
    alone (`applied_trees`), named after that class, where that makes more of the passes' equations'
    stacks resolve to a module (``matched``); the step as it is otherwise."""
    if prepared.kind != "jax" or not prepared.param_paths:
        return prepared
    owners = list(prepared.owners)
    closed = getattr(jaxpr, "jaxpr", jaxpr)
    if len(owners) != len(closed.invars):
        return prepared
    trees = applied_trees(jaxpr, owners)
    classes: dict[str, list[str]] = {}
    for name, prefixes in trees.items():
        if len(prefixes) == 1:
            classes.setdefault(next(iter(prefixes)), []).append(name)
    renamed = {prefix: names[0] for prefix, names in classes.items() if len(names) == 1 and prefix != names[0]}
    if not renamed:
        return prepared

    def rename(path: str | None) -> str | None:
        if path is None:
            return None
        for prefix, name in renamed.items():
            if path == prefix or path.startswith(prefix + "/"):
                return name + path[len(prefix):]
        return path

    paths: dict[str, int] = {}
    for path, count in prepared.param_paths.items():
        paths[rename(path) or path] = paths.get(rename(path) or path, 0) + count
    if len(paths) != len(prepared.param_paths):  # a new name taken already: left as it is
        return prepared
    candidate = dataclasses.replace(prepared, owners=tuple(rename(o) for o in owners), param_paths=paths)
    return candidate if matched(candidate) > matched(prepared) else prepared
