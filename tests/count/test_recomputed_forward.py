"""What ``jax.checkpoint`` recomputes, as the jaxpr count reports it (issue 49):
`xla_cost.count_function`'s ``recomputed`` (the figure behind the note "jax.checkpoint
recomputes N FLOP of the forward pass").

The backward pass of a checkpointed function runs its forward again and then the
backward's own equations, some of them of the same primitive and shape as a forward
one (the sigmoid's derivative s (1 - s) is a multiply of the same shape as the
forward's x * w). Only as many equations as the forward ran are a recomputation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from xla_cost import count_function

N = 16
VECTOR = jax.ShapeDtypeStruct((N,), jnp.float32)


def _checkpointed(w, x):
    return jax.nn.sigmoid(x * w)  # one multiply and one sigmoid per element


def test_a_checkpointed_function_is_recomputed_once_and_its_backward_is_not():
    def loss(w, x):
        return jnp.sum(jax.checkpoint(_checkpointed)(w, x))

    once = count_function(_checkpointed, VECTOR, VECTOR).total  # the checkpointed forward, counted alone
    counted = count_function(jax.value_and_grad(loss), VECTOR, VECTOR)
    # the step runs the forward (for the loss), then again in the backward pass: exactly once more
    assert (counted.recomputed.flops, counted.recomputed.transcendentals) == (once.flops, once.transcendentals)
    assert once.flops >= N and once.transcendentals == N  # (the multiply's N FLOP, the sigmoid's exponentials)


def test_a_function_without_checkpoint_recomputes_nothing():
    def loss(w, x):
        return jnp.sum(_checkpointed(w, x))

    assert count_function(jax.value_and_grad(loss), VECTOR, VECTOR).recomputed.flops == 0
