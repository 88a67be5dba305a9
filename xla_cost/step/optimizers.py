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

__all__ = ["LOSSES", "OPTIMIZERS", "LossFn", "one_hot_cross_entropy", "resolve_loss", "resolve_optimizer",
           "softmax_cross_entropy"]

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
    # Muon (Jordan et al. 2024, optax.contrib): the momentum of each 2-D parameter orthogonalized by 5
    # Newton-Schulz iterations, each 4 m^2 n + 2 m^3 FLOP of matrix products for an m x n matrix (m <= n);
    # Adam for the parameters that are not matrices (biases, norms, convolution kernels)
    "muon": lambda: optax.contrib.muon(1e-3),
}
"""Optimizers known by name, each with the textbook default hyper-parameters."""
if tuple(OPTIMIZERS) != OPTIMIZER_NAMES:  # pragma: no cover - a name added in one place only
    raise ImportError("xla_cost.step.optimizers.OPTIMIZERS and xla_cost.choices.OPTIMIZER_NAMES differ")


def softmax_cross_entropy(outputs: jax.Array, targets: jax.Array) -> jax.Array:
    """The default loss: mean softmax cross-entropy with integer class labels.

    Args:
      outputs: logits, classes on the last axis (cast to float32 first).
      targets: integer labels of shape ``outputs.shape[:-1]``.

    Logits typed with a sharding over a mesh's Explicit axes (a model built under ``jax.set_mesh`` of
    ``jax.make_mesh``'s default axes) take each label's logit by the same gather given its result's
    sharding, the log-normalizers' (`_label_logits`): jax cannot infer it (``ShardingTypeError``).
    """
    logits = outputs.astype(jnp.float32)
    if not _classes_sharded(logits):
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
    log_normalizers = jax.nn.logsumexp(logits, axis=-1)  # optax's, in the same order
    return (log_normalizers - _label_logits(logits, targets, jax.typeof(log_normalizers).sharding.spec)).mean()


def _classes_sharded(logits: jax.Array) -> bool:
    """Whether the logits' type shards their last axis over mesh axes (Explicit ones: Auto axes
    leave the type's spec empty)."""
    spec = tuple(getattr(getattr(jax.typeof(logits), "sharding", None), "spec", None) or ())
    return len(spec) == logits.ndim and logits.ndim > 0 and spec[-1] is not None


def _label_logits(logits: jax.Array, labels: jax.Array, spec: jax.sharding.PartitionSpec) -> jax.Array:
    """optax's gather of each label's logit, ``take_along_axis(logits, labels[..., None], -1)[..., 0]``,
    traced on the mesh's axes made Auto (``jax.sharding.auto_axes``) and typed ``spec`` after it: the
    compiler partitions it as it does on a mesh of Auto axes (each device gathers from its slice of the
    classes, an all-reduce of the N label logits), the same operations as on no mesh."""
    take = lambda z, t: jnp.take_along_axis(z, t[..., None], axis=-1)[..., 0]  # noqa: E731
    return jax.sharding.auto_axes(take, out_sharding=spec)(logits, labels)


@jax.custom_vjp
def _one_hot_xent(logits: jax.Array, targets: jax.Array) -> jax.Array:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return -jnp.sum(targets * (shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=-1, keepdims=True))), axis=-1)


def _one_hot_xent_fwd(logits: jax.Array, targets: jax.Array) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp_shifted = jnp.exp(shifted)
    sum_exp = jnp.sum(exp_shifted, axis=-1, keepdims=True)
    log_softmax = shifted - jnp.log(sum_exp)
    return -jnp.sum(targets * log_softmax, axis=-1), (logits, targets, exp_shifted, sum_exp, log_softmax)


def _one_hot_xent_bwd(res: tuple[jax.Array, ...], g: jax.Array) -> tuple[jax.Array, jax.Array]:
    logits, targets, exp_shifted, sum_exp, log_softmax = res
    deriv = exp_shifted / sum_exp - targets
    return (jnp.asarray(g[..., None] * deriv, logits.dtype),
            _typed_as(jnp.asarray(-g[..., None] * log_softmax, targets.dtype), targets))


def _typed_as(cotangent: jax.Array, primal: jax.Array) -> jax.Array:
    """``cotangent`` resharded to ``primal``'s type where their shardings differ: on a mesh's Explicit
    axes the targets' cotangent, computed from the log-softmax, carries the logits' sharding (their
    classes over ``model``), and jax refuses a backward rule whose output's type is not its primal's."""
    want = getattr(jax.typeof(primal), "sharding", None)
    have = getattr(jax.typeof(cotangent), "sharding", None)
    if want is None or have is None or tuple(want.spec) == tuple(have.spec):
        return cotangent
    return jax.sharding.reshard(cotangent, want.spec)


_one_hot_xent.defvjp(_one_hot_xent_fwd, _one_hot_xent_bwd)


def one_hot_cross_entropy(outputs: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy against one-hot targets, with T5X's stable custom gradient, as
    MaxText computes its loss (``MaxText/train.py`` ``loss_fn`` at tpu-recipes-v0.1.4, lines 290-291:
    ``jax.nn.one_hot(targets, vocab_size)`` then ``max_utils.cross_entropy_with_logits(logits,
    one_hot_targets, 0.0)``, ``max_utils.py`` lines 556-646: the forward keeps ``exp(logits - max)``,
    its sum and the log-softmax, the gradient is ``exp_shifted / sum_exp - targets``; z-loss 0).

    No gather of each position's label logit and no scatter into the logits'
    gradient: the float32 one-hot targets (an ``iota`` compared with the labels)
    fuse into the reductions and the gradient's elementwise work.

    Args:
      outputs: logits, classes on the last axis (cast to float32 first, as
        MaxText's ``cast_logits_to_fp32: True``, base.yml line 134).
      targets: integer labels of shape ``outputs.shape[:-1]``.
    """
    logits = outputs.astype(jnp.float32)
    return _one_hot_xent(logits, jax.nn.one_hot(targets, logits.shape[-1], dtype=jnp.float32)).mean()


LOSSES: Mapping[str, LossFn] = {"integer-labels": softmax_cross_entropy, "one-hot": one_hot_cross_entropy}
"""Losses known by name (`xla_cost.runs.configs.RunConfig.loss`): ``integer-labels``, the
default (`softmax_cross_entropy`: optax's, a gather of each label's logit); ``one-hot``
(`one_hot_cross_entropy`: MaxText's and T5X's)."""


def resolve_loss(name: str) -> LossFn:
    """The loss of `LOSSES` called ``name``.

    Raises:
      InputError: ``name`` is not one of them.
    """
    if name not in LOSSES:
        raise InputError(f"a loss name, one of {', '.join(LOSSES)}", repr(name), "Pass one of these names.")
    return LOSSES[name]


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
                "Pass one of these names (--optimizer NAME), or from Python an `optax.GradientTransformation`.",
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
