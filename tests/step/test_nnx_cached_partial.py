"""A step made by ``nnx.cached_partial(train_step, model, optimizer)`` (Flax's idiom for a training
loop's step) is analysed as ``train_step(model, optimizer, *args)``: was refused as a step that does not
trace (it mutates the Variables it holds, inside xla_cost's own jit)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

import xla_cost

B, IN, OUT = 4, 16, 8


@nnx.jit
def train_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(lambda m: ((m(x) - y) ** 2).mean())(model)
    optimizer.update(model, grads)
    return loss


def test_a_cached_partial_step_is_the_function_called_with_what_it_holds():
    model = nnx.Linear(IN, OUT, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    x, y = jnp.ones((B, IN)), jnp.ones((B, OUT))
    step = nnx.cached_partial(train_step, model, optimizer)
    cached = xla_cost.analyze_step(step, x, y, counter="jaxpr")
    direct = xla_cost.analyze_step(train_step, model, optimizer, x, y, counter="jaxpr")
    assert cached.parameters == direct.parameters == IN * OUT + OUT
    # the matmul 2 B IN OUT, the bias B OUT; the loss: the difference, its square, the mean's B OUT - 1 adds
    # and its divide
    assert cached.phases["forward"].flops == 2 * B * IN * OUT + B * OUT + 2 * B * OUT + B * OUT  # 1152
    for part in ("forward", "backward", "update", "other"):
        assert cached.phases[part].flops == direct.phases[part].flops, part
    assert any(n.startswith("nnx.cached_partial of train_step") for n in cached.notes)
    # the analysis traced the step on its own: the model keeps its arrays, and the step still runs
    assert isinstance(model.kernel[...], jax.Array) and not isinstance(model.kernel[...], jax.core.Tracer)
    assert jnp.isfinite(step(x, y))
