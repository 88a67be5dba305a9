"""The optimizers known by name and the default loss.

An optimizer is any ``optax.GradientTransformation``; `OPTIMIZERS` builds the
ones the command line names, with textbook hyper-parameters (the FLOP of an
update do not depend on them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import optax

from xla_cost.choices import OPTIMIZER_NAMES
from xla_cost.errors import InputError

__all__ = ["OPTIMIZERS", "LossFn", "softmax_cross_entropy", "resolve_optimizer"]

LossFn = Callable[[jax.Array, jax.Array], jax.Array]

# Default hyper-parameters: the FLOP count of an update does not depend on them.
OPTIMIZERS: Mapping[str, Callable[[], optax.GradientTransformation]] = {
    "sgd": lambda: optax.sgd(1e-2),
    "momentum": lambda: optax.sgd(1e-2, momentum=0.9),
    "nesterov": lambda: optax.sgd(1e-2, momentum=0.9, nesterov=True),
    "adam": lambda: optax.adam(1e-3),
    "adamw": lambda: optax.adamw(1e-3),
    "rmsprop": lambda: optax.rmsprop(1e-3),
    "adagrad": lambda: optax.adagrad(1e-2),
    "lion": lambda: optax.lion(1e-4),
    "adafactor": lambda: optax.adafactor(1e-3),
    "lamb": lambda: optax.lamb(1e-3),
}
"""Optimizers known by name, each with the textbook default hyper-parameters."""
if tuple(OPTIMIZERS) != OPTIMIZER_NAMES:  # pragma: no cover - a name added in one place only
    raise ImportError("xla_cost.step.optimizers.OPTIMIZERS and xla_cost.choices.OPTIMIZER_NAMES differ")


def softmax_cross_entropy(outputs: jax.Array, targets: jax.Array) -> jax.Array:
    """The default loss: mean softmax cross-entropy with integer class labels.

    Args:
      outputs: logits, classes on the last axis (cast to float32 first).
      targets: integer labels of shape ``outputs.shape[:-1]``.
    """
    logits = outputs.astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def resolve_optimizer(
    optimizer: str | optax.GradientTransformation,
) -> tuple[str, optax.GradientTransformation]:
    """Returns ``(name, transformation)`` for a name in `OPTIMIZERS` or an optax object."""
    if isinstance(optimizer, str):
        key = optimizer.strip().lower()
        if key not in OPTIMIZERS:
            raise InputError(
                f"an optimizer name, one of {', '.join(OPTIMIZERS)}",
                repr(optimizer),
                "Pass one of these names or an `optax.GradientTransformation`.",
            )
        return key, OPTIMIZERS[key]()
    if isinstance(optimizer, optax.GradientTransformation) or (
        callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))
    ):
        return "custom", optimizer
    raise InputError(
        "an `optax.GradientTransformation` or an optimizer name",
        f"{type(optimizer).__name__}",
        f"Use e.g. `optax.adam(1e-3)` or one of: {', '.join(OPTIMIZERS)}.",
    )
