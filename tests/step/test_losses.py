"""Losses known by name (`xla_cost.LOSSES`): MaxText's one-hot cross-entropy beside the default.

MaxText's ``loss_fn`` (``MaxText/train.py`` at tpu-recipes-v0.1.4, lines 290-291) takes the
cross-entropy against ``jax.nn.one_hot`` targets with T5X's custom gradient
(``max_utils.cross_entropy_with_logits``): the same value and gradient as optax's integer-label
loss, computed without a gather of each position's label logit and without a scatter into the
logits' gradient. Compiled for a TPU v6e at Llama 3.1 70B's shapes (5 x 8192 positions per chip, a
vocabulary of 128,256), the gather made libtpu keep the float32 logits (5 x 8192 x 128,256 x 4 bytes,
21.0 GB) beside the bfloat16 ones in the forward program, which then did not fit.
"""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np

from xla_cost import LOSSES, one_hot_cross_entropy, softmax_cross_entropy
from xla_cost.step.checks import default_targets

B, T, V = 2, 3, 7  # batch, positions, vocabulary


def _primitives(jaxpr) -> set[str]:
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            names |= _primitives(sub)
    return names


def test_one_hot_loss_is_the_default_loss_value_and_gradient():
    logits = jax.random.normal(jax.random.key(0), (B, T, V), jnp.float32)
    labels = jax.random.randint(jax.random.key(1), (B, T), 0, V)
    # mean over the B T positions of log(sum_v exp(z_v)) - z_label, by hand
    expected = np.mean(np.log(np.exp(np.asarray(logits)).sum(-1))
                       - np.take_along_axis(np.asarray(logits), np.asarray(labels)[..., None], -1)[..., 0])
    # the gradient (softmax(z) - one_hot(label)) / (B T), T5X's custom rule
    z = np.asarray(logits)
    by_hand = (np.exp(z) / np.exp(z).sum(-1, keepdims=True) - np.eye(V)[np.asarray(labels)]) / (B * T)
    for loss in (one_hot_cross_entropy, softmax_cross_entropy):
        value, grad = jax.jit(jax.value_and_grad(loss))(logits, labels)
        assert np.isclose(value, expected, rtol=1e-6)
        np.testing.assert_allclose(grad, by_hand, atol=1e-7)


def test_one_hot_loss_gathers_and_scatters_nothing():
    logits = jax.ShapeDtypeStruct((B, T, V), jnp.bfloat16)
    labels = jax.ShapeDtypeStruct((B, T), jnp.int32)
    default = _primitives(jax.make_jaxpr(jax.value_and_grad(softmax_cross_entropy))(logits, labels).jaxpr)
    one_hot = _primitives(jax.make_jaxpr(jax.value_and_grad(one_hot_cross_entropy))(logits, labels).jaxpr)
    assert "gather" in default and {"scatter-add", "scatter_add", "scatter"} & default
    assert not {"gather", "scatter-add", "scatter_add", "scatter"} & one_hot


def test_named_losses_take_integer_labels():
    outputs = jax.ShapeDtypeStruct((B, T, V), jnp.bfloat16)
    for loss in (None, *LOSSES.values()):
        assert default_targets(outputs, loss) == jax.ShapeDtypeStruct((B, T), jnp.int32)
    assert default_targets(outputs, lambda o, t: o.sum()) == outputs  # a user's loss: outputs-shaped targets


def test_maxtext_runs_compute_the_one_hot_loss_and_no_other_key_changes():
    from xla_cost.study.published_record import framework
    from xla_cost.study.published_runs import PUBLISHED_RUNS
    from xla_cost.study.run_cases import run_setup

    assert framework("maxtext").loss == "one-hot"
    for run in PUBLISHED_RUNS:
        if run.name not in ("maxtext-llama3.1-70b-v6e-256", "korthikanti2022-22b-selective", "mpt-7b-2k-8"):
            continue
        setup = run_setup(run)
        maxtext = run.framework == "maxtext"
        assert setup.loss == ("one-hot" if maxtext else None)
        assert ("('loss', 'one-hot')" in setup.key()) is maxtext
        assert "'loss'" not in setup.key() or maxtext  # every other run's program and key as before
