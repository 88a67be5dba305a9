"""Small questions about a jaxpr's values and equations that the step classifier
(`xla_cost.count.step_parts`) asks: is a value a literal, a float scalar (a loss), what is its
shape and dtype; is an equation a scalar broadcast or the rounding ``jax.checkpoint`` puts on a
saved residual; which value an alias chain ends at."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
from jax.extend import core as jex_core

__all__ = ["literal", "aval_key", "float_scalar", "broadcast_scalar", "residual_rounding", "resolve_alias"]


def literal(var: Any) -> bool:
    """Whether a jaxpr operand is a literal (a constant written into the equation), not a variable."""
    return isinstance(var, jex_core.Literal)


def aval_key(var: Any) -> tuple[tuple[int, ...], str]:
    """A value's (a flattened level's key: ``(scope, jaxpr var)``) shape and dtype."""
    aval = getattr(var[1] if isinstance(var, tuple) else var, "aval", None)
    return tuple(getattr(aval, "shape", ())), str(getattr(aval, "dtype", ""))


def float_scalar(var: Any) -> bool:
    """Whether a value (a flattened level's key: ``(scope, jaxpr var)``) is a float scalar: a loss."""
    aval = getattr(var[1] if isinstance(var, tuple) else var, "aval", None)
    return aval is not None and getattr(aval, "shape", None) == () and jnp.issubdtype(aval.dtype, jnp.floating)


def broadcast_scalar(eqn: Any) -> bool:
    """A scalar broadcast to an array (a mask's ``finfo.min`` fill, ReLU's zeros): XLA fuses it into
    what reads it (or sinks it into the loop that does), no buffer held for the backward pass, as
    `xla_cost.analysis.memory.saved_activations` leaves it out too."""
    if eqn.primitive.name != "broadcast_in_dim" or not eqn.invars:
        return False
    source = eqn.invars[0]
    return literal(source) or not getattr(getattr(source, "aval", None), "shape", ())


def residual_rounding(eqn: Any) -> bool:
    """A ``reduce_precision`` to its operand's own type: the rounding ``jax.checkpoint`` puts
    on a value its policy saves for the backward pass (so that both passes read the same
    bits), not the model's arithmetic."""
    if eqn.primitive.name != "reduce_precision":
        return False
    try:
        info = jnp.finfo(eqn.outvars[0].aval.dtype)
    except (TypeError, ValueError, AttributeError):
        return False
    return (eqn.params.get("exponent_bits"), eqn.params.get("mantissa_bits")) == (info.nexp, info.nmant)


def resolve_alias(alias: Mapping[Any, Any], key: Any) -> Any:
    """The value an alias chain (a call's or a loop's inner name for an outer value) ends at."""
    while key in alias and alias[key] != key:
        key = alias[key]
    return key
