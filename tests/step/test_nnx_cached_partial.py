"""A step made by ``nnx.cached_partial(train_step, model, optimizer)`` (Flax's idiom for a training
loop's step) is analysed as ``train_step(model, optimizer, *args)``: was refused as a step that does not
trace (it mutates the Variables it holds, inside xla_cost's own jit)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax
import pytest
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


def test_a_functools_partial_holding_the_objects_is_the_function_called_with_them():
    # tunix's PeftTrainer hands its step over as functools.partial(nnx.jit(train_step, donate_argnames=...),
    # model, optimizer); the analysis takes the objects out as the arguments they are, leaves them intact (the
    # step still runs after it, its kernel an array), and figures as the direct call's
    model = nnx.Linear(IN, OUT, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    x, y = jnp.ones((B, IN)), jnp.ones((B, OUT))
    jitted = nnx.jit(train_step.fun, donate_argnames=("optimizer",))
    held = xla_cost.analyze_step(functools.partial(jitted, model, optimizer), x, y, counter="jaxpr")
    direct = xla_cost.analyze_step(jitted, model, optimizer, x, y, counter="jaxpr")
    for part in ("forward", "backward", "update", "other"):
        assert held.phases[part].flops == direct.phases[part].flops, part
    assert held.parameters == IN * OUT + OUT
    assert any(n.startswith("functools.partial of train_step holding NNX objects") for n in held.notes)
    assert isinstance(model.kernel[...], jax.Array) and not isinstance(model.kernel[...], jax.core.Tracer)
    assert jnp.isfinite(functools.partial(jitted, model, optimizer)(x, y))


def test_a_step_closing_over_the_objects_is_told_to_take_them_as_arguments():
    model = nnx.Linear(IN, OUT, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)

    def step(x, y):
        return train_step.fun(model, optimizer, x, y)

    with pytest.raises(xla_cost.InputError, match="pass the model and optimizer as the step's arguments"):
        xla_cost.analyze_step(step, jnp.ones((B, IN)), jnp.ones((B, OUT)))
