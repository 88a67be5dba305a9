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

__all__ = ["REMAT_SCOPE", "JAX_SCOPES", "split_name_stack", "unwrap", "classify_pass", "bare_stack", "call_site_once",
           "model_scopes", "differentiated_scopes", "mapped_backward"]

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
def mapped_backward(name_stack: str) -> bool:
    """Whether a ``vmap`` maps the backward pass an equation is in: a ``vmap`` wraps the stack's
    first ``transpose`` (``vmap(transpose(jvp(MLP)))/Dense_0``: ``jax.vmap(jax.grad(loss))``,
    per-example gradients, each result batched over the examples); not the gradient of a
    loss that maps its model itself (``transpose(jvp(vmap(MLP)))``), whose results are the
    parameters' own shapes."""
    transforms = [t for c in _split(name_stack) for t in unwrap(c)[1]]
    return "transpose" in transforms and "vmap" in transforms[:transforms.index("transpose")]


_AUTODIFF = frozenset({"jvp", "transpose", "linearize"})  # the transforms of the gradient's passes


@functools.lru_cache(maxsize=8192)
def differentiated_scopes(name_stack: str) -> tuple[str, ...]:
    """The scopes of a name stack from the first one a ``jvp`` or ``transpose`` wraps: the code
    the differentiated function calls (``ActorCritic``, ``Dense_0`` of
    ``train/jvp(ActorCritic)/Dense_0``, and of ``jvp()/ActorCritic/Dense_0``, a jit's call
    inside the differentiated function); () outside the passes or where none follows (the
    loss's own work: ``jvp()``)."""
    entries = [unwrap(c) for c in _split(name_stack)]
    first = next((i for i, (_, transforms) in enumerate(entries) if _AUTODIFF & set(transforms)), None)
    if first is None:
        return ()
    return tuple(name for name, _ in entries[first:] if name and name not in JAX_SCOPES)


@functools.lru_cache(maxsize=8192)
def bare_stack(name_stack: str) -> tuple[str, ...]:
    """The scopes of a name stack without jax's transforms and own scopes:
    ``transpose(jvp(jvp()))/rematted_computation/MLP/Dense_0`` and
    ``jvp(MLP)/Dense_0`` -> (``MLP``, ``Dense_0``): where in the model an
    equation is, whichever pass runs it."""
    names = (unwrap(c)[0] for c in _split(name_stack))
    return tuple(n for n in names if n and n not in JAX_SCOPES)


@functools.lru_cache(maxsize=8192)
def call_site_once(name_stack: str) -> str:
    """A name stack without the copy of a call site that jax's transpose writes before it.

    The backward pass of ``jax.checkpoint`` (``nn.remat``, ``nnx.remat``, a rematted scan
    body) records the checkpoint's equations under the transposed call site followed by
    the call site itself: ``transpose(jvp(LM))/model/decoder/jvp(LM)/model/decoder/
    rematted_computation/0/q``. Where the stack's first entries are repeated, from an
    entry wrapped in a transform (``jvp(LM)``), the copy before it is left out:
    ``jvp(LM)/model/decoder/rematted_computation/0/q``, whose scopes are those of the
    forward's ``jvp(LM)/model/decoder/0/q``; a copy of a copy (a checkpoint inside a
    checkpoint) likewise. Other stacks are returned as they are. The pass is the whole
    stack's (`classify_pass`): the copy left out holds the ``transpose``."""
    components = _split(name_stack)
    names = [unwrap(c)[0] for c in components]
    start = 0
    while True:
        rest = names[start:]
        found = next((i for i in range(1, len(rest) // 2 + 1)
                      if unwrap(components[start + i])[1] and rest[:i] == rest[i:2 * i]), None)
        if found is None:
            break
        start += found
    return name_stack if start == 0 else "/".join(components[start:])


@functools.lru_cache(maxsize=8192)
def model_scopes(name_stack: str) -> tuple[str, ...]:
    """Where in the model an equation is, once: `bare_stack` of `call_site_once`
    (``transpose(jvp(LM))/model/decoder/jvp(LM)/model/decoder/rematted_computation/0/q``
    and ``jvp(LM)/model/decoder/0/q`` -> (``LM``, ``model``, ``decoder``, ``0``, ``q``))."""
    return bare_stack(call_site_once(name_stack))
