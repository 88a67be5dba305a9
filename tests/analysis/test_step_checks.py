"""The step checker's note on an optimizer state larger than Adam's (issue 49):
`xla_cost.analyze_step`'s "step checker: the optimizer state holds ..." note.

Adam keeps two moments per parameter (mu and nu): a state of 2x the parameters is
expected and not noted; one beyond it (gradient accumulation's copy of the
gradients, a float32 master copy of the parameters, a transformation chained twice)
is, whatever its size past 2x.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

import xla_cost

B, IN, CLASSES = 8, 32, 10
PARAMS = IN * CLASSES + CLASSES  # one Dense layer's kernel and bias
NOTE = "step checker: the optimizer state"


def _state(tx):
    model = nn.Dense(CLASSES)

    def create():
        params = model.init(jax.random.key(0), jnp.ones((1, IN)))["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

    return jax.eval_shape(create)


def step(state, x, y):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def _notes(tx) -> list[str]:
    x, y = jax.ShapeDtypeStruct((B, IN), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.int32)
    return [n for n in xla_cost.analyze_step(step, _state(tx), x, y, counter="jaxpr").notes if n.startswith(NOTE)]


def test_adam_s_two_moments_are_not_noted():
    assert _notes(optax.adam(1e-3)) == []


def test_adam_with_gradient_accumulation_holds_three_times_the_parameters_and_is_noted():
    # optax.MultiSteps keeps Adam's mu and nu and a sum of the gradients: 3 x PARAMS elements
    (note,) = _notes(optax.MultiSteps(optax.adam(1e-3), every_k_schedule=4).gradient_transformation())
    assert f"holds {3 * PARAMS / PARAMS:.1f}x the parameters" in note  # 3.0x, more than 2
    assert "gradient accumulation" in note
