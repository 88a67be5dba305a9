"""The higher-order primitives the jaxpr interpreter walks rather than costs: calls, loops,
branches, recomputation (`xla_cost.count.interpret`, `xla_cost.count.folding` and
`xla_cost.count.step_parts` read them)."""

from __future__ import annotations

__all__ = ["CALL_LIKE", "CALL_PARAMS", "WALKED", "REMAT_PRIMITIVES", "VIEWS"]

CALL_LIKE: frozenset[str] = frozenset(
    {
        "jit", "pjit", "closed_call", "core_call", "xla_call", "named_call", "call",
        "remat", "remat2", "checkpoint",
        "custom_jvp_call", "custom_jvp_call_jaxpr", "custom_vjp_call",
        "custom_vjp_call_jaxpr", "custom_lin",
        "shard_map",
        "composite",  # lax.composite: XLA runs (and counts) its decomposition
    }
)
"""Primitives that call one nested jaxpr exactly once (walked as if inlined)."""

CALL_PARAMS: tuple[str, ...] = ("jaxpr", "call_jaxpr", "fun_jaxpr")
"""The parameter of a `CALL_LIKE` equation that holds the jaxpr it calls."""

WALKED: frozenset[str] = CALL_LIKE | {"scan", "while", "cond"}
"""Higher-order primitives whose nested jaxprs the interpreter walks (no rule of their own)."""

REMAT_PRIMITIVES: frozenset[str] = frozenset({"remat", "remat2", "checkpoint"})
"""The names ``jax.checkpoint``'s primitive has had; one with ``differentiated=True`` is the
backward pass's call that recomputes the forward values it needs."""

VIEWS: frozenset[str] = frozenset({"reshape", "squeeze", "expand_dims", "transpose"})
"""Primitives whose result of an argument XLA does not copy: a reshape is a bitcast of its
operand's buffer, and a transposed weight is read in place by the dot that uses it (its
dimension numbers). What they make of a parameter is the parameter's buffer, not a saved
activation (`xla_cost.analysis.memory`, `xla_cost.count.step_parts`)."""
