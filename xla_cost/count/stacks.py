"""Name stacks: the ``/``-separated scopes jax records on every equation
(``transpose(jvp(MLP))/Dense_0``), read without reference to any model:
their components, the transforms that wrap them, the pass they imply, and
the scopes that are jax's own.

`xla_cost.count.attribution` maps them to a model's modules; the counter
(`xla_cost.count.interpret`) and the step classifier
(`xla_cost.count.step_parts`) read the pass and the recomputation scope here.
"""

from __future__ import annotations

import functools
import re

__all__ = ["REMAT_SCOPE", "JAX_SCOPES", "split_name_stack", "unwrap", "classify_pass", "bare_stack"]

REMAT_SCOPE = "rematted_computation"
"""jax's name scope for the body of a ``jax.checkpoint`` it recomputes."""

JAX_SCOPES = frozenset({REMAT_SCOPE})
"""Name-stack entries that jax adds for its own transforms, not modules."""

_WRAPPER = re.compile(r"^[A-Za-z_][\w.\-]*\((.*)\)$")


def split_name_stack(name_stack: str) -> list[str]:
    """Splits a name stack on the ``/`` that are outside parentheses."""
    return list(_split(name_stack))


@functools.lru_cache(maxsize=8192)
def _split(name_stack: str) -> tuple[str, ...]:
    # A model's equations share a few thousand stacks (ResNet-50's gradient: 3,946
    # equations, ten thousand reads): each is split once.
    if "(" not in name_stack:
        return tuple(p for p in name_stack.split("/") if p)
    parts, depth, current = [], 0, []
    for ch in name_stack:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "/" and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return tuple(p for p in parts if p)


def unwrap(component: str) -> tuple[str, list[str]]:
    """``transpose(jvp(Net))`` -> (``Net``, [``transpose``, ``jvp``])."""
    transforms = []
    while (match := _WRAPPER.match(component)) is not None:
        transforms.append(component[: component.index("(")])
        component = match.group(1)
    return component, transforms


@functools.lru_cache(maxsize=8192)
def classify_pass(name_stack: str) -> str | None:
    """``backward`` under a transpose, ``forward`` under a jvp, else None.

    Args:
      name_stack: an equation's name stack (``transpose(jvp(MLP))/Dense_0``).
    """
    transforms = [t for c in _split(name_stack) for t in unwrap(c)[1]]
    if "transpose" in transforms:
        return "backward"
    if "jvp" in transforms or "linearize" in transforms:
        return "forward"
    return None


@functools.lru_cache(maxsize=8192)
def bare_stack(name_stack: str) -> tuple[str, ...]:
    """The scopes of a name stack without jax's transforms and own scopes:
    ``transpose(jvp(jvp()))/rematted_computation/MLP/Dense_0`` and
    ``jvp(MLP)/Dense_0`` -> (``MLP``, ``Dense_0``): where in the model an
    equation is, whichever pass runs it."""
    names = (unwrap(c)[0] for c in _split(name_stack))
    return tuple(n for n in names if n and n not in JAX_SCOPES)
