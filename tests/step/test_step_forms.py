"""The step counted right (issue 30): one training step written the ways
repositories write it gives the same forward, backward and update; metrics
are other; a step with no gradient, or a gradient of nothing differentiable,
says so; XLA's count above the parts' is explained.

Closed forms from tests/formulas.py (a multiply-add is 2 FLOP; the loss is
optax's mean softmax cross-entropy with integer labels).
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx
from flax.training import train_state

import xla_cost
from tests.formulas import dense_backward_flops, dense_flops, loss_backward_flops, loss_flops, relu_backward_flops

B, IN, HIDDEN, CLASSES = 16, 64, 128, 10
PARAMS = IN * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES  # two Dense layers' kernels and biases
ADAM_MOMENTS = 2  # mu and nu, one of each per parameter


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(HIDDEN, name="fc1")(x))
        return nn.Dense(CLASSES, name="fc2")(x)


class NnxMLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.fc1, self.fc2 = nnx.Linear(IN, HIDDEN, rngs=rngs), nnx.Linear(HIDDEN, CLASSES, rngs=rngs)

    def __call__(self, x):
        return self.fc2(nnx.relu(self.fc1(x)))


# fc1, its ReLU (a max per element), fc2, the loss
FORWARD = dense_flops(B, IN, HIDDEN) + B * HIDDEN + dense_flops(B, HIDDEN, CLASSES) + loss_flops(B, CLASSES)
# fc1 (no input gradient), the ReLU's mask and select, fc2, the loss's gradient
BACKWARD = (dense_backward_flops(B, IN, HIDDEN, first=True) + relu_backward_flops(B * HIDDEN)
            + dense_backward_flops(B, HIDDEN, CLASSES) + loss_backward_flops(B, CLASSES))

X = jax.ShapeDtypeStruct((B, IN), jnp.float32)
Y = jax.ShapeDtypeStruct((B,), jnp.int32)


def _state(tx=None):
    model = MLP()

    def create():
        params = model.init(jax.random.key(0), jnp.ones((1, IN)))["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx or optax.adam(1e-3))

    return jax.eval_shape(create)


def _loss_fn(state, x, y):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    return loss_fn


def value_and_grad_step(state, x, y):
    loss, grads = jax.value_and_grad(_loss_fn(state, x, y))(state.params)
    return state.apply_gradients(grads=grads), loss


def grad_step(state, x, y):
    grads = jax.grad(_loss_fn(state, x, y))(state.params)
    return state.apply_gradients(grads=grads)


def grad_checkpoint_step(state, x, y):
    grads = jax.grad(jax.checkpoint(_loss_fn(state, x, y)))(state.params)
    return state.apply_gradients(grads=grads)


def nnx_grad_step(model, optimizer, x, y):
    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()
    grads = nnx.grad(loss_fn)(model)
    optimizer.update(model, grads)


def _nnx_args():
    model = nnx.eval_shape(lambda: NnxMLP(nnx.Rngs(0)))
    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(NnxMLP(nnx.Rngs(0)), optax.adam(1e-3), wrt=nnx.Param))
    return model, optimizer, X, Y


def _flops(report):
    return {p: report.phases[p].flops for p in ("forward", "backward", "update", "other", "train_step")}


@pytest.fixture(scope="module")
def forms():
    state = _state()
    return {
        "value_and_grad": xla_cost.analyze_step(value_and_grad_step, state, X, Y),
        "grad": xla_cost.analyze_step(grad_step, state, X, Y),
        "grad+checkpoint": xla_cost.analyze_step(grad_checkpoint_step, state, X, Y),
        "nnx.grad": xla_cost.analyze_step(nnx_grad_step, *_nnx_args()),
    }


def test_value_and_grad_is_the_closed_form(forms):
    flops = _flops(forms["value_and_grad"])
    assert flops["forward"] == FORWARD
    assert flops["backward"] == BACKWARD


@pytest.mark.parametrize("form", ["grad", "grad+checkpoint", "nnx.grad"])
@pytest.mark.parametrize("part", ["forward", "backward", "update"])
def test_every_form_of_one_step_gives_the_same_parts(forms, form, part):
    """Issue 30's acceptance: jax.grad, value_and_grad, grad + checkpoint and nnx.grad within 0.1%."""
    assert _flops(forms[form])[part] == pytest.approx(_flops(forms["value_and_grad"])[part], rel=1e-3)


@pytest.mark.parametrize("form", ["grad", "grad+checkpoint"])
def test_a_dead_loss_keeps_the_forward_it_needs(forms, form):
    """jax.grad drops the loss's value, and so its last reductions: the forward loses at most
    the loss's own arithmetic, never the model's (row 1: it was 0)."""
    forward = _flops(forms[form])["forward"]
    assert FORWARD - loss_flops(B, CLASSES) <= forward <= FORWARD


def test_a_checkpointed_loss_under_grad_recomputes_nothing(forms):
    """Row 2: under jax.grad the checkpointed primal is dead code; the forward that runs is the
    recomputation, which is then no recomputation: the parts add up to the step."""
    report = forms["grad+checkpoint"]
    assert not any("recomputes" in note for note in report.notes)
    step = report.phases["train_step"]
    assert step.model_flops == step.hardware_flops
    flops = _flops(report)
    assert flops["forward"] + flops["backward"] + flops["update"] + flops["other"] == step.jaxpr_flops


def test_the_update_is_the_optimizer_s_in_every_form(forms):
    """Adam as optax writes it: per parameter, the same FLOP in every form (the NNX optimizer runs the
    same optax chain); the counter's step + 1 of TrainState is other or update, at most 2 FLOP."""
    updates = {form: _flops(report)["update"] for form, report in forms.items()}
    per_parameter = updates["value_and_grad"] / PARAMS
    assert all(abs(u - updates["value_and_grad"]) <= 2 for u in updates.values()), updates
    assert 10 <= per_parameter <= 20  # mu, nu (3 each), the bias corrections, sqrt, add, divide, scale, add


def metrics_step(state, x, y):
    loss, grads = jax.value_and_grad(_loss_fn(state, x, y))(state.params)
    new = state.apply_gradients(grads=grads)
    return new, {"loss": loss, "grad_norm": optax.tree.norm(grads), "param_norm": optax.tree.norm(new.params)}


def test_metrics_on_the_gradients_and_parameters_are_other():
    """Row 4: a gradient norm and a norm of the new parameters, returned as metrics only, are other
    (before: 23 FLOP per parameter of update against 19 without them)."""
    sgd = optax.sgd(0.1)
    plain = _flops(xla_cost.analyze_step(value_and_grad_step, _state(sgd), X, Y, counter="jaxpr"))
    with_metrics = _flops(xla_cost.analyze_step(metrics_step, _state(sgd), X, Y, counter="jaxpr"))
    assert with_metrics["update"] == plain["update"] == 2 * PARAMS  # SGD: -lr * g, p + u
    # each global norm: a square per parameter, PARAMS - 1 adds over all leaves, one sqrt (transcendental)
    assert with_metrics["other"] - plain["other"] == 2 * (PARAMS + PARAMS - 1)


def test_the_checker_names_metrics_on_the_gradients():
    report = xla_cost.analyze_step(metrics_step, _state(optax.sgd(0.1)), X, Y, counter="jaxpr")
    note = next(n for n in report.notes if n.startswith("step checker: other holds"))
    assert f"{2 * (2 * PARAMS - 1):,} FLOP" in note  # the two norms, as in the test above


def second_forward_step(state, x, y):
    loss, grads = jax.value_and_grad(_loss_fn(state, x, y))(state.params)
    logits = state.apply_fn({"params": state.params}, x)  # the model again, for the accuracy
    return state.apply_gradients(grads=grads), {"loss": loss, "accuracy": jnp.mean(jnp.argmax(logits, -1) == y)}


def test_the_checker_names_a_second_forward_pass():
    report = xla_cost.analyze_step(second_forward_step, _state(optax.sgd(0.1)), X, Y, counter="jaxpr")
    note = next(n for n in report.notes if n.startswith("step checker: the model also runs outside the gradient"))
    # fc1 and fc2 (matmuls and biases) under their modules; the ReLU is under the model's own scope
    assert f"{dense_flops(B, IN, HIDDEN) + dense_flops(B, HIDDEN, CLASSES):,} FLOP in other" in note
    assert "fc1" in note and "fc2" in note
    assert "has_aux=True" in note  # only a metric reads it: the loss could return it
    assert not [n for n in report.notes if "the loss reads as a constant" in n]


class TargetState(train_state.TrainState):
    target_params: Any  # a DQN's target network: a copy of the parameters the update does not train


def _target_state():
    model = MLP()

    def create():
        params = model.init(jax.random.key(0), jnp.ones((1, IN)))["params"]
        return TargetState.create(apply_fn=model.apply, params=params, target_params=params, tx=optax.sgd(0.1))

    return jax.eval_shape(create)


def target_network_step(state, x, y, next_x, metrics=False):
    """cleanrl's dqn_jax.py update: the TD target is the target network's forward on the next inputs,
    outside the gradient, and the loss reads it; ``metrics``: the model again on ``x``, for an accuracy."""
    target = jnp.max(state.apply_fn({"params": state.target_params}, next_x), -1)

    def loss_fn(params):
        q = state.apply_fn({"params": params}, x)[jnp.arange(x.shape[0]), y]
        return jnp.mean((q - target) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    if not metrics:
        return state.apply_gradients(grads=grads), loss
    logits = state.apply_fn({"params": state.params}, x)
    return state.apply_gradients(grads=grads), {"loss": loss, "accuracy": jnp.mean(jnp.argmax(logits, -1) == y)}


@pytest.mark.parametrize("metrics", [False, True])
def test_a_target_networks_forward_that_the_loss_reads_is_no_second_forward_pass(metrics):
    """A target network's forward outside the gradient makes the TD target the loss reads: work the loss
    needs, which has_aux cannot return (before: 'a second forward pass (for metrics?) ... has_aux=True');
    a metrics forward beside it keeps that advice, for its own FLOP."""
    step = functools.partial(target_network_step, metrics=metrics)
    report = xla_cost.analyze_step(step, _target_state(), X, Y, X, counter="jaxpr")
    once = dense_flops(B, IN, HIDDEN) + dense_flops(B, HIDDEN, CLASSES)  # fc1 and fc2 under their modules
    (fed,) = [n for n in report.notes if "the loss reads as a constant" in n]
    assert fed.startswith(f"other: {once:,} FLOP") and "target or teacher network" in fed
    assert "fc1" in fed and "fc2" in fed
    again = [n for n in report.notes if n.startswith("step checker: the model also runs outside the gradient")]
    if not metrics:
        assert again == [] and not [n for n in report.notes if "has_aux" in n]
    else:  # the accuracy's forward on x: the same FLOP as the target's on next_x, only a metric reads it
        (note,) = again
        assert f"{once:,} FLOP in other" in note and "has_aux=True" in note


def test_a_second_forward_pass_that_xla_merges_is_not_said_to_cost_every_step():
    """Issue 49: compiled, the second forward pass reads what the gradient's forward pass computes (the
    same inputs and parameters): XLA computes it once, so the step's count is about one forward below
    the parts'; the checker and the train-step note say so and agree (neither calls it paid)."""
    report = xla_cost.analyze_step(second_forward_step, _state(optax.sgd(0.1)), X, Y)
    again = dense_flops(B, IN, HIDDEN) + dense_flops(B, HIDDEN, CLASSES)  # fc1 and fc2 again, as above
    step = report.phases["train_step"]
    below = step.jaxpr_flops - step.flops
    assert 0.9 * again <= below <= 1.02 * again  # the whole second pass is gone from the compiled step
    note = next(n for n in report.notes if n.startswith("step checker: the model also runs outside the gradient"))
    assert "XLA computes it once with the gradient's forward pass" in note and f"{below:,} below the parts'" in note
    assert "reuse the forward pass" not in note
    fusion = next(n for n in report.notes if n.startswith("train_step: XLA counts"))
    assert "second forward pass outside the gradient, which XLA computes once" in fusion
    assert "own rewriting" not in fusion


def frozen_step(state, x, y):
    def loss_fn(params):
        params = {**params, "fc1": jax.lax.stop_gradient(params["fc1"])}
        logits = state.apply_fn({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def test_the_checker_names_parameters_without_a_gradient():
    report = xla_cost.analyze_step(frozen_step, _state(optax.sgd(0.1)), X, Y, counter="jaxpr")
    note = next(n for n in report.notes if n.startswith("step checker: parameters that receive no gradient"))
    assert note.startswith("step checker: parameters that receive no gradient: fc1/bias, fc1/kernel:")
    assert not any(n.startswith("step checker") for n in
                   xla_cost.analyze_step(value_and_grad_step, _state(), X, Y, counter="jaxpr").notes)


def test_the_checker_names_an_optimizer_state_beyond_adam_s():
    twice = optax.chain(optax.scale_by_adam(), optax.scale_by_adam(), optax.scale(-1e-3))
    report = xla_cost.analyze_step(value_and_grad_step, _state(twice), X, Y, counter="jaxpr")
    note = next(n for n in report.notes if n.startswith("step checker: the optimizer state"))
    assert "holds 4.0x the parameters (ScaleByAdamState 4.0x)" in note  # two mu and two nu per parameter


def clipped_step(state, x, y):
    loss, grads = jax.value_and_grad(_loss_fn(state, x, y))(state.params)
    norm = optax.tree.norm(grads)
    grads = jax.tree.map(lambda g: g * jnp.minimum(1.0, 1.0 / norm), grads)
    return state.apply_gradients(grads=grads), {"loss": loss, "grad_norm": norm}


def test_a_gradient_norm_the_update_also_reads_is_the_update_s():
    """A norm that clips the gradients and is logged too is the update's."""
    sgd = optax.sgd(0.1)
    plain = _flops(xla_cost.analyze_step(value_and_grad_step, _state(sgd), X, Y, counter="jaxpr"))
    clipped = _flops(xla_cost.analyze_step(clipped_step, _state(sgd), X, Y, counter="jaxpr"))
    # the norm (PARAMS squares, PARAMS - 1 adds), per leaf (2 kernels, 2 biases) 1 / norm and a min,
    # a scale per parameter
    leaves = 4
    assert clipped["update"] - plain["update"] == PARAMS + PARAMS - 1 + 2 * leaves + PARAMS
    assert clipped["other"] == plain["other"]


def eval_step(state, x, y):
    logits = state.apply_fn({"params": state.params}, x)
    return {"accuracy": jnp.mean(jnp.argmax(logits, -1) == y)}


def test_a_step_without_a_gradient_reports_the_model_as_forward():
    """Row 3: the note says forward and other, and the model's work is the forward."""
    report = xla_cost.analyze_step(eval_step, _state(), X, Y, counter="jaxpr")
    flops = _flops(report)
    assert report.notes[0].startswith("no backward found")
    assert flops["forward"] == dense_flops(B, IN, HIDDEN) + B * HIDDEN + dense_flops(B, HIDDEN, CLASSES)
    assert flops["backward"] == flops["update"] == 0
    assert flops["forward"] + flops["other"] == flops["train_step"]


class IntegerOutput(nn.Module):
    @nn.compact
    def __call__(self, x):
        return jnp.argmax(nn.Dense(CLASSES)(x), -1).astype(jnp.int32)


def test_a_loss_of_integer_outputs_says_nothing_is_differentiable():
    """Row 7: jax differentiates through nothing; the note says the gradients are zeros and why."""
    model = IntegerOutput()
    state = jax.eval_shape(lambda: train_state.TrainState.create(
        apply_fn=model.apply, params=model.init(jax.random.key(0), jnp.ones((1, IN)))["params"], tx=optax.sgd(0.1)))

    def step(state, x, y):
        def loss_fn(params):
            return jnp.mean((state.apply_fn({"params": params}, x) - y).astype(jnp.float32) ** 2)
        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    report = xla_cost.analyze_step(step, state, X, Y, counter="jaxpr")
    assert report.phases["backward"].flops == 0
    assert "the gradients are zeros (Dense_0)" in report.notes[0]
    assert "nothing the loss depends on is differentiable" in report.notes[0]


class ConvBN(nn.Module):
    @nn.compact
    def __call__(self, x, train=True):
        x = nn.relu(nn.BatchNorm(use_running_average=not train)(nn.Conv(8, (3, 3))(x)))
        return nn.Dense(CLASSES)(x.mean(axis=(1, 2)))


def _batch_norm_step_report(model: nn.Module, tx: optax.GradientTransformation) -> xla_cost.Report:
    """``analyze_step`` of the README's ImageNet-style step (a TrainState with batch statistics) on ``model``."""
    class State(train_state.TrainState):
        batch_stats: dict

    def create():
        variables = model.init(jax.random.key(0), jnp.ones((1, 16, 16, 3)))
        return State.create(apply_fn=model.apply, params=variables["params"], tx=tx,
                            batch_stats=variables["batch_stats"])

    def step(state, image, label):
        def loss_fn(params):
            logits, updates = state.apply_fn({"params": params, "batch_stats": state.batch_stats}, image,
                                             mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, label).mean(), updates
        (loss, updates), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        return state.apply_gradients(grads=grads, batch_stats=updates["batch_stats"]), loss

    return xla_cost.analyze_step(step, jax.eval_shape(create), jax.ShapeDtypeStruct((8, 16, 16, 3), jnp.float32),
                                 jax.ShapeDtypeStruct((8,), jnp.int32))


def test_xla_above_the_parts_is_explained_by_fusion():
    """Row 8: the README's ImageNet-style step (Conv, BatchNorm, ReLU): XLA's fused program counts
    more than the parts; the note gives the unfused count, which the parts' sum is within 2% of."""
    report = _batch_norm_step_report(ConvBN(), optax.sgd(0.1, momentum=0.9))
    step_costs = report.phases["train_step"]
    parts = step_costs.jaxpr_flops
    assert step_costs.flops > 1.02 * parts
    note = next(n for n in report.notes if n.startswith("train_step: XLA counts"))
    unfused = int(note.split("compiled without fusion XLA counts ")[1].split(" ")[0].replace(",", ""))
    assert unfused == pytest.approx(parts, rel=0.02)
    assert f"{step_costs.flops - unfused:,} FLOP are XLA's fusions" in note
    # BatchNorm's jvp builds arrays of zeros of its parameters' shape: no gradient of zeros, no checker note
    assert not [n for n in report.notes if n.startswith("step checker")]


def test_a_recomputed_steps_gap_to_xla_is_noted_without_an_unfused_compile():
    # the same step with the block under nn.remat: the backward pass recomputes the forward (in the parts), which
    # XLA's CPU compile merges with the forward it keeps; the gap is said, not split by a compile without fusion
    report = _batch_norm_step_report(nn.remat(ConvBN)(), optax.sgd(0.1))
    step_costs = report.phases["train_step"]
    assert abs(step_costs.flops - step_costs.jaxpr_flops) > 0.02 * step_costs.jaxpr_flops
    note = next(n for n in report.notes if n.startswith("train_step: XLA counts"))
    assert f"{step_costs.flops:,} FLOP" in note and "not split further: with the step's recomputation" in note


def _plain_params():
    return jax.eval_shape(lambda: MLP().init(jax.random.key(0), jnp.ones((1, IN)))["params"])


def params_step(params, opt_state, x, y):
    tx = optax.adam(1e-3)
    grads = jax.grad(lambda p: optax.softmax_cross_entropy_with_integer_labels(
        MLP().apply({"params": p}, x), y).mean())(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def variables_step(variables, opt_state, x, y):
    tx = optax.adam(1e-3)
    grads = jax.grad(lambda v: optax.softmax_cross_entropy_with_integer_labels(MLP().apply(v, x), y).mean())(
        variables)
    updates, opt_state = tx.update(grads, opt_state, variables)
    return optax.apply_updates(variables, updates), opt_state


def test_parameters_of_a_step_of_plain_pytrees():
    """`step(params, opt_state, batch)`: the argument named params is the parameters (it was "no
    parameters found"); a {"params": ...} tree with Adam: mu['params'] and nu['params'] mirror the
    parameters and are none of them (it was 3 x PARAMS)."""
    params = _plain_params()
    opt_state = jax.eval_shape(optax.adam(1e-3).init, params)
    report = xla_cost.analyze_step(params_step, params, opt_state, X, Y, counter="jaxpr", per_layer=True)
    assert report.parameters == PARAMS
    assert {row.path: row.parameters for row in report.layers if row.parameters} == {
        "fc1": IN * HIDDEN + HIDDEN, "fc2": HIDDEN * CLASSES + CLASSES}
    variables = {"params": params}
    report = xla_cost.analyze_step(variables_step, variables, jax.eval_shape(optax.adam(1e-3).init, variables), X, Y,
                                   counter="jaxpr")
    assert report.parameters == PARAMS


def _clipped_per_example(loss_fn):
    """Each example's gradient of ``loss_fn(params, x, y)`` clipped to norm 1, as DP-SGD (jax_privacy's
    ``clipped_grad``) computes it inside a ``jax.vmap``: an example whose norm is not finite is zeroed by a
    ``where`` whose predicate reads every layer's gradient."""
    def clipped(params, x, y):
        grads = jax.grad(loss_fn)(params, x[None], y[None])
        norm = optax.tree.norm(grads)
        grads = jax.tree.map(lambda g: g * jnp.minimum(1.0, 1.0 / norm), grads)
        return jax.tree.map(lambda g: jnp.where(jnp.isfinite(norm), g, 0.0), grads)
    return jax.vmap(clipped, in_axes=(None, 0, 0))


def _dp_step(model, tx):
    def loss_fn(params, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply({"params": params}, x), y).mean()

    def dp_step(model_params, opt_state, x, y):  # jax_privacy's examples name the parameters model_params
        per_example = _clipped_per_example(loss_fn)(model_params, x, y)
        grads = jax.tree.map(lambda g: g.sum(0) / x.shape[0], per_example)
        updates, opt_state = tx.update(grads, opt_state, model_params)
        return optax.apply_updates(model_params, updates), opt_state
    return dp_step


def test_a_per_example_gradient_steps_parameters_and_update_rows_are_found_whatever_the_argument_is_named():
    """DP-SGD's step: ``jax.vmap(jax.grad(loss))`` makes each parameter's gradient batched over the examples,
    (B, *p.shape), clipped and summed. With the argument named ``model_params`` (jax_privacy's examples) the
    parameters were "unknown (none in the arguments)", all the update in the remainder; named ``params``, the
    ``where`` on every layer's norm made each layer's clipped gradient and Adam's work on it no layer's (fc1's
    row 50 FLOP a parameter, the remainder 413,459 FLOP)."""
    tx = optax.adam(1e-3)
    params = _plain_params()
    report = xla_cost.analyze_step(_dp_step(MLP(), tx), params, jax.eval_shape(tx.init, params), X, Y,
                                   counter="jaxpr", per_layer=True)
    assert report.parameters == PARAMS
    assert report.trained_parameters is None  # all: each gets its gradient, per example
    rows = {row.path: row for row in report.layers}
    fc1 = IN * HIDDEN + HIDDEN
    assert rows["fc1"].parameters == fc1
    # on fc1's gradients: Adam's 13 a parameter, and per example its square for the norm and its clip (B each),
    # then the sum over the examples (B - 1 adds)
    assert rows["fc1"].update.flops >= (13 + 3 * B - 1) * fc1
    assert rows["(remainder)"].update.flops < PARAMS  # only scalar work: no parameter's arithmetic


class _Conv(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(CLASSES, name="head")(nn.relu(nn.Conv(CONV_FEATURES, (3, 3), name="conv")(x)).mean((1, 2)))


CONV_FEATURES, SIDE, CHANNELS = 4, 6, 3
CONV_PARAMS = 3 * 3 * CHANNELS * CONV_FEATURES + CONV_FEATURES + CONV_FEATURES * CLASSES + CLASSES


def test_a_per_example_convolutions_kernel_gradient_batched_beside_its_features_is_its_gradient():
    """Under ``vmap``, a convolution's kernel gradient has the examples beside its output features,
    (3, 3, C, B, F); the ``vmap``'s end moves them to the front: that array is the kernel's gradient (the
    kernel was missed: only the biases and the head were found, the kernel "frozen")."""
    tx = optax.sgd(0.1, momentum=0.9)
    x = jax.ShapeDtypeStruct((B, SIDE, SIDE, CHANNELS), jnp.float32)
    params = jax.eval_shape(lambda: _Conv().init(jax.random.key(0), jnp.ones((1, SIDE, SIDE, CHANNELS)))["params"])
    report = xla_cost.analyze_step(_dp_step(_Conv(), tx), params, jax.eval_shape(tx.init, params), x, Y,
                                   counter="jaxpr")
    assert report.parameters == CONV_PARAMS
    assert report.trained_parameters is None


class _Config:  # a training config object as repositories pass one (ml_collections, a dataclass): no arrays
    label_smoothing = 0.0


def _configured_step(state, batch, config, learning_rate_fn, dropout_rate, rng):
    # Flax's lm1b writes its step so: jax.jit(train_step, static_argnums=(2, 3, 4)) over (state, batch, config,
    # learning_rate_fn, dropout_rate, rng); the config and the schedule are no arrays, the rate a static float
    del rng, dropout_rate
    lr = learning_rate_fn(state.step)

    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean() + config.label_smoothing

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), {"loss": loss, "learning_rate": lr}


@pytest.mark.parametrize("jitted", [True, False])
def test_static_and_untraceable_arguments_are_bound_as_given(jitted):
    step = jax.jit(_configured_step, static_argnums=(2, 3, 4)) if jitted else _configured_step
    args = (_state(), {"x": X, "y": Y}, _Config(), optax.constant_schedule(1e-3), 0.1, jax.random.key(0))
    report = xla_cost.analyze_step(step, *args, counter="jaxpr")
    assert report.parameters == PARAMS and report.batch_size == B
    # the step's forward is the model's and the loss's; Adam's 13 a parameter (and its counter's few) the update
    assert report.phases["forward"].flops == FORWARD
    assert 13 * PARAMS <= report.phases["update"].flops <= 13 * PARAMS + 16
    bound = ("argument(s) 2 (config), 3 (learning_rate_fn), 4 (dropout_rate) bound" if jitted
             else "argument(s) 2 (config), 3 (learning_rate_fn) bound")
    assert any(n.startswith(bound) for n in report.notes)


@pytest.mark.parametrize("optimizer, per_parameter", [(optax.adam(1e-3), 13), (optax.adamw(1e-3), 15)])
def test_a_pure_jax_models_layers_each_carry_their_whole_update(optimizer, per_parameter):
    # a pure-JAX model (jax-llm-examples' form): weights in a pytree, no modules, no name scopes; the backward
    # pass's gradients belong to no module, but the optimizer's arithmetic on each (Adam's (1 - b1) g and g g)
    # updates that layer's moments: every row carries its layer's whole rule, 13 (Adam) or 15 (AdamW) FLOP a
    # parameter, the remainder only the step counter's few
    def loss_fn(params, x):
        h = x @ params["layers"][0]["w"]
        return jnp.mean((h @ params["layers"][1]["w"]) ** 2)

    def train_step(params, opt_state, x):
        grads = jax.grad(loss_fn)(params, x)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    w = jax.ShapeDtypeStruct((IN, IN), jnp.float32)
    params = {"layers": [{"w": w}, {"w": w}]}
    report = xla_cost.analyze_step(train_step, params, jax.eval_shape(optimizer.init, params), X, per_layer=True,
                                   counter="jaxpr")
    rows = report.layers_frame()
    for layer in ("layers/0", "layers/1"):
        assert rows.loc[layer, "update_flops"] == per_parameter * IN * IN, layer
    assert rows.loc["(remainder)", "update_flops"] <= 8


def test_a_pure_jax_models_own_scopes_are_scopes_that_match_no_module_not_the_roots_code():
    # jax.named_scope("attn") and ("ffn", "up") around a pure-JAX model's products: scopes of the user's own
    # over no module (no parameter path starts with them), not a model class whose own code computes them
    def loss_fn(params, x):
        with jax.named_scope("attn"):
            h = x @ params["layers"][0]["w"]
        with jax.named_scope("ffn"), jax.named_scope("up"):
            h = h @ params["layers"][1]["w"]
        return jnp.mean(h ** 2)

    def train_step(params, x):
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.grad(loss_fn)(params, x))

    w = jax.ShapeDtypeStruct((IN, IN), jnp.float32)
    report = xla_cost.analyze_step(train_step, {"layers": [{"w": w}, {"w": w}]}, X, per_layer=True, counter="jaxpr")
    [unmatched] = [n for n in report.notes if "match no row's module" in n]
    assert unmatched.startswith("per-layer rows: 2 name stacks match no row's module")
    assert "`attn`" in unmatched and "`ffn/up`" in unmatched
    assert not [n for n in report.notes if "in the root's own code" in n]


def test_an_eval_steps_root_work_is_the_models_not_a_scope_that_matches_no_module():
    # Flax ImageNet's eval_step differentiates nothing: its name stacks carry no jvp or transpose, and the
    # model class's own work (a relu before its Dense: B x IN maxima, in the remainder as a train step's)
    # was reported as a scope of the user's own over no module ("rename it"), which a model's root cannot be
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(CLASSES)(nn.relu(x))

    model = Net()
    state = jax.eval_shape(lambda: train_state.TrainState.create(
        apply_fn=model.apply, params=model.init(jax.random.key(0), jnp.ones((1, IN)))["params"], tx=optax.sgd(0.1)))

    def eval_step(state, x):
        return state.apply_fn({"params": state.params}, x).mean()

    report = xla_cost.analyze_step(eval_step, state, X, per_layer=True, counter="jaxpr")
    rows = report.layers_frame()
    assert rows.loc["Dense_0", "forward_flops"] == dense_flops(B, IN, CLASSES)
    assert rows.loc["(remainder)", "forward_flops"] == B * IN  # the relu's maxima
    assert not [n for n in report.notes if "match" in n and "no row's module" in n]


@pytest.mark.parametrize("form", ["positional", "keyword"])
def test_an_abstract_key_given_by_keyword_is_an_input_as_one_given_by_position(form):
    # Flax's wmt loop calls its step as p_train_step(state, batch, dropout_rng=rng): an abstract key given by
    # keyword is an input of the traced program, as one given by position (was bound as a constant and refused)
    def train_step(params, x, dropout_rng=None):
        def loss(p):
            keep = jax.random.bernoulli(jax.random.fold_in(dropout_rng, 0), 0.9, (B, CLASSES))
            return jnp.mean(jnp.where(keep, x @ p["w"], 0.0) ** 2)

        return jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.grad(loss)(params))

    params, key = {"w": jax.ShapeDtypeStruct((IN, CLASSES), jnp.float32)}, jax.eval_shape(lambda: jax.random.key(0))
    args, kwargs = ((params, X, key), {}) if form == "positional" else ((params, X), {"dropout_rng": key})
    report = xla_cost.analyze_step(train_step, *args, counter="jaxpr", **kwargs)
    assert report.parameters == IN * CLASSES and report.batch_size == B
    assert report.phases["forward"].flops >= 2 * B * IN * CLASSES  # the product x W


def test_a_pmapped_steps_batch_is_one_devices_samples():
    # jax.pmap(train_step) over arrays with a leading device axis (Flax's wmt and DiT steps): the figures are one
    # device's, and so is the batch, the arrays' second axis (was the device axis, 1)
    def train_step(state, batch):
        grads = jax.grad(lambda p: jnp.mean((state.apply_fn({"params": p}, batch["x"]) - 1.0) ** 2))(state.params)
        return state.apply_gradients(grads=jax.lax.pmean(grads, "batch"))

    devices = 1
    state = jax.tree.map(lambda a: jax.ShapeDtypeStruct((devices, *a.shape), a.dtype), _state(optax.sgd(0.1)))
    batch = {"x": jax.ShapeDtypeStruct((devices, B, IN), jnp.float32)}
    report = xla_cost.analyze_step(jax.pmap(train_step, axis_name="batch"), state, batch, counter="jaxpr")
    assert report.batch_size == B


def test_a_pmapped_step_whose_state_is_not_mapped_reads_its_batch_from_the_mapped_inputs():
    # Flax's ImageNet example: jax.pmap(train_step, axis_name="batch", in_axes=(None, 0)), the state passed whole
    # (P()), the batch mapped: the batch is one device's, the mapped arrays' second axis (was their first, devices)
    def train_step(state, batch):
        grads = jax.grad(lambda p: jnp.mean((state.apply_fn({"params": p}, batch["x"]) - 1.0) ** 2))(state.params)
        return state.apply_gradients(grads=jax.lax.pmean(grads, "batch"))

    devices = 1
    batch = {"x": jax.ShapeDtypeStruct((devices, B, IN), jnp.float32)}
    step = jax.pmap(train_step, axis_name="batch", in_axes=(None, 0))
    report = xla_cost.analyze_step(step, _state(optax.sgd(0.1)), batch, counter="jaxpr")
    assert report.batch_size == B and report.parameters == PARAMS


@pytest.mark.skipif(jax.device_count() < 2, reason="needs 2 (simulated) devices: tests/conftest.py sets them")
def test_a_pmapped_steps_memory_parts_are_one_devices():
    # jax.pmap over 2 devices, every argument led by the device axis: the table is "on each of 2 devices", so its
    # parts are one device's, each argument over its 2 shards (were both devices' summed: parameters 2 D D floats)
    devices = 2

    def train_step(params, x):
        grads = jax.lax.pmean(jax.grad(lambda p: jnp.mean((x @ p["w"]) ** 2))(params), "batch")
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"w": jax.ShapeDtypeStruct((devices, IN, IN), jnp.float32)}
    x = jax.ShapeDtypeStruct((devices, B, IN), jnp.float32)
    report = xla_cost.analyze_step(jax.pmap(train_step, axis_name="batch"), params, x, memory=True)
    memory = report.memory_breakdown
    assert memory.devices == devices and report.batch_size == B
    assert memory.parameters == memory.gradients == 4 * IN * IN  # one device's float32 (IN, IN) kernel
    assert memory.inputs == 4 * B * IN  # one device's (B, IN) rows
    # the pmap's axis is named "batch": the note must not read as a batch of 2
    assert any("mapped over 2 devices along axis 'batch'" in n for n in report.notes)
    assert not any("batch=2" in n for n in report.notes)


@pytest.mark.skipif(jax.device_count() < 2, reason="needs 2 (simulated) devices: tests/conftest.py sets them")
@pytest.mark.parametrize("closes_over", [False, True])
def test_a_pmapped_step_that_closes_over_an_array_counts_one_devices_parameters(closes_over):
    # scenic's classification step: lr_schedules makes a constant learning rate a concrete jnp.asarray that the
    # pmapped step closes over, an operand of the shard_map that is none of the step's arguments. The parameters and
    # the memory parts are still one device's (were counted once per device: 2 * (IN * CLASSES + CLASSES)), and the
    # mapped step is still noted (was not)
    devices, model, tx, lr = 2, nn.Dense(CLASSES), optax.adam(1e-3), jnp.asarray(1e-3, jnp.float32)

    def train_step(params, opt_state, x, y):
        loss = lambda p: optax.softmax_cross_entropy_with_integer_labels(model.apply({"params": p}, x), y).mean()
        grads = jax.lax.pmean(jax.grad(loss)(params), "batch")
        updates, opt_state = tx.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: u * lr, updates) if closes_over else updates
        return optax.apply_updates(params, updates), opt_state

    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.ones((1, IN)))["params"])
    opt_state = jax.eval_shape(tx.init, params)
    lead = lambda t: jax.tree.map(lambda a: jax.ShapeDtypeStruct((devices, *a.shape), a.dtype), t)
    report = xla_cost.analyze_step(jax.pmap(train_step, "batch"), lead(params), lead(opt_state),
                                   jax.ShapeDtypeStruct((devices, B, IN), jnp.float32),
                                   jax.ShapeDtypeStruct((devices, B), jnp.int32), memory=True)
    dense = IN * CLASSES + CLASSES  # one Dense layer's kernel and bias
    assert report.parameters == dense
    assert report.memory_breakdown.parameters == 4 * dense  # one device's float32 parameters
    assert report.memory_breakdown.optimizer_state >= 4 * ADAM_MOMENTS * dense  # one device's mu and nu
    # Adam's 13 a parameter, the pmean's sum and division 2, the closed-over rate's product 1, its counter's few
    update = (13 + 2 + closes_over) * dense
    assert update <= report.phases["update"].jaxpr_flops <= update + 16
    assert any(n.startswith(f"the step maps its body over {devices} devices") for n in report.notes)
    assert any(f"mapped over {devices} devices along axis 'batch'" in n for n in report.notes)


@pytest.mark.parametrize("devices", [1, 2])
def test_a_pmapped_steps_parameters_are_found_whatever_their_argument_is_named(devices):
    # AlgoPerf's pmapped step takes its parameters as `current_param_container`, a name that marks nothing: they are
    # the leaves its loss is differentiated with respect to, read from the mapped body's data flow, where each is one
    # device's block (1, *shape), squeezed before the passes read it (were none found: 'parameters unknown', 0 B)
    if jax.device_count() < devices:
        pytest.skip("needs 2 (simulated) devices: tests/conftest.py sets them")
    model, tx = nn.Dense(CLASSES), optax.sgd(0.1)

    def train_step(opt_state, current_param_container, x, y):
        loss = lambda p: optax.softmax_cross_entropy_with_integer_labels(model.apply({"params": p}, x), y).mean()
        grads = jax.lax.pmean(jax.grad(loss)(current_param_container), "batch")
        updates, opt_state = tx.update(grads, opt_state, current_param_container)
        return opt_state, optax.apply_updates(current_param_container, updates)

    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.ones((1, IN)))["params"])
    lead = lambda t: jax.tree.map(lambda a: jax.ShapeDtypeStruct((devices, *a.shape), a.dtype), t)
    report = xla_cost.analyze_step(jax.pmap(train_step, "batch"), lead(jax.eval_shape(tx.init, params)), lead(params),
                                   jax.ShapeDtypeStruct((devices, B, IN), jnp.float32),
                                   jax.ShapeDtypeStruct((devices, B), jnp.int32), counter="jaxpr", memory=True)
    dense = IN * CLASSES + CLASSES  # one Dense layer's kernel and bias
    assert report.parameters == dense and report.batch_size == B
    memory = report.memory_breakdown
    assert memory.parameters == memory.gradients == 4 * dense  # one device's float32 parameters and their gradients
    assert memory.model_state == 0


@pytest.mark.skipif(jax.device_count() < 2, reason="needs 2 (simulated) devices: tests/conftest.py sets them")
def test_a_pmapped_steps_notes_compare_one_devices_figures():
    # jax.pmap of a dropout step over 2 devices: the mapped body's jaxpr and XLA's program are both one device's.
    # The random numbers' note of train_step (which draws the forward's mask, once) says what the forward's says
    # (was half of it: divided by the devices again); XLA's count of the step against the parts' sum is compared
    # as it is and noted where more than 2% off (was never noted on a mapped step)
    devices = 2

    class Dropped(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(CLASSES)(nn.Dropout(0.1, deterministic=False)(nn.Dense(HIDDEN)(x)))

    model = Dropped()

    def train_step(params, x, y, rng):
        def loss(p):
            logits = model.apply({"params": p}, x, rngs={"dropout": rng})
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        return jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.lax.pmean(jax.grad(loss)(params), "batch"))

    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.ones((B, IN)))["params"])
    params = jax.tree.map(lambda a: jax.ShapeDtypeStruct((devices, *a.shape), a.dtype), params)
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(1), devices))
    report = xla_cost.analyze_step(jax.pmap(train_step, "batch"), params, jax.ShapeDtypeStruct((devices, B, IN),
                                   jnp.float32), jax.ShapeDtypeStruct((devices, B), jnp.int32), keys)
    hidden = {n.split(":")[0]: n.split("up to ")[1].split(" FLOP")[0] for n in report.notes if "more run than" in n}
    assert hidden["train_step"] == hidden["forward"]
    step = report.phases["train_step"]
    # XLA's fusions count the dropout's mask and scaling again: more than 2% over the parts here, so noted
    assert abs(step.flops - step.jaxpr_flops) > 0.02 * step.jaxpr_flops
    assert any(n.startswith(f"train_step: XLA counts {step.flops:,} FLOP on one device") for n in report.notes)


def test_a_pmean_of_batchnorm_statistics_is_model_state_not_the_update():
    # Flax's ImageNet example: batch_stats=lax.pmean(new_model_state["batch_stats"], "batch") beside the pmean of the
    # gradients: the running mean and variance (IN each) averaged over devices are model state the forward made,
    # not parameters or optimizer state; the BatchNorm's update is SGD's on its scale and bias alone
    class Normed(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(CLASSES)(nn.BatchNorm(use_running_average=False, axis_name="batch", name="bn")(x))

    class State(train_state.TrainState):
        batch_stats: dict

    model = Normed()

    def create():
        variables = model.init(jax.random.key(0), jnp.ones((B, IN)))
        return State.create(apply_fn=model.apply, params=variables["params"], batch_stats=variables["batch_stats"],
                            tx=optax.sgd(0.1))

    def train_step(state, x):
        def loss_fn(params):
            y, new = state.apply_fn({"params": params, "batch_stats": state.batch_stats}, x, mutable=["batch_stats"])
            return jnp.mean(y ** 2), new

        grads, new = jax.grad(loss_fn, has_aux=True)(state.params)
        return state.apply_gradients(grads=jax.lax.pmean(grads, "batch"),
                                     batch_stats=jax.lax.pmean(new["batch_stats"], "batch"))

    report = xla_cost.analyze_step(train_step, jax.eval_shape(create), X, per_layer=True, counter="jaxpr")
    bn = report.layers_frame().loc["bn"]
    # per parameter (scale and bias: 2 IN): the pmean's division by the devices, -lr g, p + u
    assert bn["parameters"] == 2 * IN and bn["update_flops"] == 3 * 2 * IN


def test_a_root_modules_parameters_are_not_taken_for_the_batch():
    # a Dense as the whole model: its parameters' module is the root's (""), and its kernel and bias share their
    # leading dimension with nothing; the batch is x's B rows, not the kernel's IN (was IN when IN = HIDDEN)
    model = nn.Dense(IN)
    state = jax.eval_shape(lambda: train_state.TrainState.create(
        apply_fn=model.apply, params=model.init(jax.random.key(0), jnp.ones((1, IN)))["params"], tx=optax.sgd(0.1)))

    def train_step(state, x, y):
        grads = jax.grad(lambda p: jnp.mean((state.apply_fn({"params": p}, x) - y) ** 2))(state.params)
        return state.apply_gradients(grads=grads)

    report = xla_cost.analyze_step(train_step, state, X, X, counter="jaxpr")
    assert report.batch_size == B and report.parameters == IN * IN + IN


@pytest.mark.parametrize("key", ["raw", "split raw", "split typed", "pmapped raw"])
def test_a_random_key_or_a_scalar_before_the_batch_is_not_taken_for_it(key):
    # EasyLM's train_step(train_state, rng, batch) with rng a jax.random.PRNGKey: a uint32[2] (jax's legacy raw
    # key layout) holds no parameter and comes before the batch; it is keys, not samples (was batch 2 for B rows).
    # Keys split ahead ((4, 2) raw, (4,) typed) and a learning rate (a scalar, one per device under a pmap) neither
    devices, splits = 1, 4  # (splits != B: a split key array taken for the batch would read 4)
    raw = jax.ShapeDtypeStruct((2,), jnp.uint32)  # jax.random.PRNGKey(0): two uint32 words of threefry
    rng = {"raw": raw, "split raw": jax.ShapeDtypeStruct((splits, 2), jnp.uint32),
           "split typed": jax.eval_shape(lambda: jax.random.split(jax.random.key(0), splits)),
           "pmapped raw": jax.ShapeDtypeStruct((devices, 2), jnp.uint32)}[key]

    def train_step(state, lr, rng, batch):
        grads = jax.grad(lambda p: jnp.mean((state.apply_fn({"params": p}, batch["x"]) - 1.0) ** 2))(state.params)
        return state.apply_gradients(grads=jax.tree.map(lambda g: lr * g, grads)), rng  # (the key handed on)

    state, batch = _state(optax.sgd(0.1)), {"x": X, "y": Y}
    lr = jax.ShapeDtypeStruct((), jnp.float32)
    if key == "pmapped raw":  # every argument led by the device axis: the rate is one scalar per device
        state = jax.tree.map(lambda a: jax.ShapeDtypeStruct((devices, *a.shape), a.dtype), state)
        batch = jax.tree.map(lambda a: jax.ShapeDtypeStruct((devices, *a.shape), a.dtype), batch)
        lr = jax.ShapeDtypeStruct((devices,), jnp.float32)
        step = jax.pmap(lambda s, lr, r, b: train_step(s, lr, r, b)[0], axis_name="batch")
    else:
        step = train_step
    report = xla_cost.analyze_step(step, state, lr, rng, batch, counter="jaxpr")
    assert report.batch_size == B and report.parameters == PARAMS


def test_a_pmapped_partial_given_its_key_by_keyword_analyses():
    # Flax wmt's loop: jax.pmap(functools.partial(train_step, config=..., label_smoothing=...)) called as
    # p_train_step(state, batch, dropout_rng=keys); the keyword must reach the step by its name, not be bound
    # to the partial's next parameter (was "got multiple values for argument 'scale'")
    import functools

    def train_step(state, batch, scale, dropout_rng=None):
        keep = jax.random.bernoulli(dropout_rng, 0.9, (B, IN))
        grads = jax.grad(lambda p: scale * jnp.mean(state.apply_fn({"params": p}, jnp.where(keep, batch, 0.0)) ** 2))(
            state.params)
        return state.apply_gradients(grads=jax.lax.pmean(grads, "batch"))

    step = jax.pmap(functools.partial(train_step, scale=2.0), axis_name="batch")
    state = jax.tree.map(lambda a: jax.ShapeDtypeStruct((1, *a.shape), a.dtype), _state(optax.sgd(0.1)))
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), 1))
    report = xla_cost.analyze_step(step, state, jax.ShapeDtypeStruct((1, B, IN), jnp.float32), dropout_rng=keys)
    assert report.batch_size == B and report.parameters == PARAMS


def _sized_step(params, x, width):
    # Flax's VAE example calls train_step(state, batch, key, config.latents): a Python int that sets a layer's width
    loss, grads = jax.value_and_grad(lambda p: nn.Dense(width).apply({"params": p}, x).sum())(params)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss


def test_a_python_int_the_trace_needs_concrete_is_bound_as_static_argnums_binds_it():
    width = 20
    params = jax.eval_shape(nn.Dense(width).init, jax.random.key(0), X)["params"]
    for args, kwargs, bound in [((width,), {}, "argument(s) 2 (width) bound as they are given (Python numbers"),
                                ((), {"width": width}, "keyword argument(s) width bound as they are given")]:
        report = xla_cost.analyze_step(_sized_step, params, X, *args, counter="jaxpr", **kwargs)
        assert report.parameters == IN * width + width
        # x W + b at the model's own width, and the loss's sum of its B x width outputs
        assert report.phases["forward"].flops == dense_flops(B, IN, width) + B * width - 1
        assert any(n.startswith(bound) for n in report.notes)


@pytest.mark.parametrize("form", ["array", "jit"])
def test_a_value_the_trace_needs_that_cannot_be_bound_is_refused_naming_it(form):
    # an int32 array, or a Python int given to the user's own jax.jit without static_argnums: jax traces it
    width = 20
    params = jax.eval_shape(nn.Dense(width).init, jax.random.key(0), X)["params"]
    step, arg = (_sized_step, jnp.int32(width)) if form == "array" else (jax.jit(_sized_step), width)
    with pytest.raises(xla_cost.InputError) as info:
        xla_cost.analyze_step(step, params, X, arg, counter="jaxpr")
    message = str(info.value)
    assert "the trace needs width concrete" in message and len(message.splitlines()) == 1
    assert "functools.partial(_sized_step, width=...)" in message and "static_argnames=('width',)" in message


def test_a_sharded_steps_count_off_its_parts_per_device_sum_says_why_it_is_not_split_further():
    # a jit step sharded over 4 devices: XLA's count is one device's, the parts the whole jaxpr's shared out; held
    # against the parts' per-device sum, a count 10% over it is noted with the reason it is not split further (a
    # compile without fusion does not check how the work is shared out), one within 2% is not (was: no note)
    from types import SimpleNamespace

    from xla_cost.analysis.step_checks import fusion_note

    devices, whole = 4, 4_000_000
    counted = SimpleNamespace(total=SimpleNamespace(flops=whole))
    each = whole // devices
    off = fusion_note(None, counted, SimpleNamespace(flops=each * 110 // 100), shared=devices, parts_per_device=each)
    assert len(off) == 1 and "+10.0% against the parts' per-device sum" in off[0] and "not split further" in off[0]
    assert fusion_note(None, counted, SimpleNamespace(flops=each * 101 // 100), shared=devices,
                       parts_per_device=each) == []
