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
import pytest

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


def _block(w, x, activation):
    return getattr(jnp, activation)(x @ w) @ w  # two products around an activation


@pytest.mark.parametrize("checkpoint", [jax.checkpoint, jax.remat])
def test_static_arguments_and_a_policy(checkpoint):
    # two blocks in a row, the activation's name a static argument (issue 50)
    w, x = jax.ShapeDtypeStruct((N, N), jnp.float32), jax.ShapeDtypeStruct((4, N), jnp.float32)

    def loss(policy):
        block = checkpoint(_block, static_argnums=(2,), policy=policy)
        return lambda w, x: jnp.sum(block(w, block(w, x, "tanh"), "tanh") ** 2)

    everything = count_function(jax.value_and_grad(loss(None)), w, x).recomputed
    dots = count_function(jax.value_and_grad(loss(jax.checkpoint_policies.dots_saveable)), w, x).recomputed
    # nothing saved: each block's first product and its tanh again (the second product's result is the
    # next block's saved input, or the loss's, read outside the checkpoint): 2 x (2 * 4 * N * N) FLOP
    assert (everything.flops, everything.transcendentals) == (2 * 2 * 4 * N * N, 2 * 4 * N)
    # the products saved: the tanh alone again, a transcendental per element, no FLOP
    assert (dots.flops, dots.transcendentals) == (0, 2 * 4 * N)
