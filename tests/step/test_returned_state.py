"""What a step returns decides what it computes: XLA removes whatever no result reads.

Flax's examples/gemma/train.py jits its NNX step with ``jax.jit`` (not ``nnx.jit``), which carries
no change made to an NNX object inside the step out of it; the step returns
``nnx.state((model, optimizer))`` for the caller to ``nnx.update``. Those results are the
objects' new state, so the optimizer's work on them is the update, as `xla_cost.analyze` counts
it, not metrics. The same step written to update the objects in place and return only the loss
computes its forward pass alone, and a note says why.

One ``nnx.Linear(D, C)`` on a batch of B rows, Adam: P = D C + C parameters.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx

import xla_cost

B, D, C = 8, 64, 10
P = D * C + C


def _loss(logits, y):
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def _objects():
    def build():
        model = nnx.Linear(D, C, rngs=nnx.Rngs(0))
        return model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    return nnx.eval_shape(build)


X, Y = jax.ShapeDtypeStruct((B, D), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.int32)


def _split_step(model, optimizer, x, y):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    loss, grads = jax.value_and_grad(lambda p: _loss(nnx.merge(graphdef, p, rest)(x), y))(params)
    optimizer.update(model, grads)
    return loss, grads


def test_a_jax_jit_step_returning_the_objects_state_has_adams_update():
    def train_step(model, optimizer, x, y):
        _split_step(model, optimizer, x, y)
        return nnx.state((model, optimizer))

    report = xla_cost.analyze_step(jax.jit(train_step), *_objects(), X, Y, counter="jaxpr")
    reference = xla_cost.analyze(nnx.eval_shape(lambda: nnx.Linear(D, C, rngs=nnx.Rngs(0))), X,
                                 optimizer="adam", counter="jaxpr")
    # Adam's rule over the P parameters: the same work `analyze` counts for the same optimizer (13 P and
    # its step counter's few), all of it the update; no metric is returned, so nothing is other
    assert reference.phases["update"].flops >= 13 * P
    assert report.phases["update"].flops == pytest.approx(reference.phases["update"].flops, abs=8)
    assert report.phases["other"].flops <= 8
    assert not any("returned metrics read" in n for n in report.notes)


def test_a_jax_jit_step_that_updates_nnx_objects_in_place_computes_its_forward_alone_and_says_why():
    def train_step(model, optimizer, x, y):
        return _split_step(model, optimizer, x, y)[0]

    report = xla_cost.analyze_step(jax.jit(train_step), *_objects(), X, Y)
    # the loss is all it returns: x W + b and the cross-entropy, no backward pass, no update
    assert report.phases["backward"].flops == 0 and report.phases["update"].flops == 0
    assert report.phases["forward"].flops >= 2 * B * D * C
    note = report.notes[0]
    assert note.startswith("no backward: the step takes a gradient but returns nothing that reads it")
    assert "nnx.jit" in note and "nnx.state((model, optimizer))" in note


@pytest.mark.parametrize("returns", ["nothing", "the loss"])
def test_a_dead_multisteps_update_is_said_dead_code_not_zero_gradients(returns):
    # optax's gradient_accumulation notebook: optax.MultiSteps resets its accumulated gradients with
    # zeros of each parameter's shape, outside the passes; under jax.jit the in-place update is dead
    # code, which the note must say, not that nothing differentiable reaches the cross-entropy loss.
    # The optimizer is there (its state a memory part), so the header keeps it.
    def build():
        model = nnx.Linear(D, C, rngs=nnx.Rngs(0))
        return model, nnx.Optimizer(model, optax.MultiSteps(optax.sgd(1e-3), every_k_schedule=3), wrt=nnx.Param)

    @jax.jit
    def update(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lambda m: _loss(m(x), y))(model)
        optimizer.update(model, grads)
        return loss if returns == "the loss" else None

    report = xla_cost.analyze_step(update, *nnx.eval_shape(build), X, Y, counter="jaxpr")
    assert report.phases["backward"].flops == 0 and report.phases["update"].flops == 0
    note = report.notes[0]
    assert note.startswith("no backward: the step takes a gradient but returns nothing that reads it"), note
    assert "the gradients are zeros" not in note and "nnx.jit" in note
    assert report.optimizer == "its own optimizer"


def test_a_linen_step_returning_the_loss_alone_is_told_to_return_its_new_state():
    model = nn.Dense(C)
    params = jax.eval_shape(model.init, jax.random.key(0), X)["params"]
    tx = optax.adam(1e-3)

    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(lambda p: _loss(model.apply({"params": p}, x), y))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        optax.apply_updates(params, updates)
        return loss

    report = xla_cost.analyze_step(train_step, params, tx.init(params), X, Y)
    assert report.phases["backward"].flops == 0 and report.phases["update"].flops == 0
    assert report.notes[0].startswith("no backward: the step takes a gradient but returns nothing that reads it")
    assert "return the new parameters and optimizer state" in report.notes[0]


def test_an_nnx_metrics_objects_update_is_other_not_the_models_update():
    # Flax's NNX steps update an nnx.MultiMetric (accuracy, average loss) beside the optimizer: its state is
    # a metric the step keeps, so the accuracy's argmax over the B x C logits is other, and the update is
    # Adam's alone, as `analyze` counts it for the same optimizer
    @nnx.jit
    def train_step(model, optimizer, metrics, x, y):
        def loss_fn(model):
            logits = model(x)
            return _loss(logits, y), logits

        (loss, logits), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
        optimizer.update(model, grads)
        metrics.update(loss=loss, logits=logits, labels=y)

    class Mlp(nnx.Module):  # the logits are fc2's: the argmax reads that layer's output
        def __init__(self, rngs):
            self.fc1, self.fc2 = nnx.Linear(D, 32, rngs=rngs), nnx.Linear(32, C, rngs=rngs)

        def __call__(self, x):
            return self.fc2(nnx.relu(self.fc1(x)))

    def build():
        model = Mlp(nnx.Rngs(0))
        return model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average("loss"))
    report = xla_cost.analyze_step(train_step, *nnx.eval_shape(build), metrics, X, Y, per_layer=True, counter="jaxpr")
    reference = xla_cost.analyze(nnx.eval_shape(lambda: Mlp(nnx.Rngs(0))), X, optimizer="adam", counter="jaxpr")
    assert report.phases["update"].flops == pytest.approx(reference.phases["update"].flops, abs=8)
    argmax = xla_cost.count_function(lambda a: jnp.argmax(a, -1), jax.ShapeDtypeStruct((B, C), jnp.float32))
    assert report.phases["other"].flops >= argmax.total.flops



def test_a_gradient_norm_an_nnx_metric_keeps_is_other_though_it_reads_the_gradients():
    # metrics.update(grad_norm=optax.tree.norm(grads)): a metric object's state, written from the gradients
    # as the optimizer's is, is a metric the step keeps, not new state: the norm's P squares and their sum
    # (2 P - 1 FLOP at least) are other, and the update is Adam's alone, as `analyze` counts it
    @nnx.jit
    def train_step(model, optimizer, metrics, x, y):
        loss, grads = nnx.value_and_grad(lambda m: _loss(m(x), y))(model)
        optimizer.update(model, grads)
        metrics.update(loss=loss, grad_norm=optax.tree.norm(grads))

    metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"), grad_norm=nnx.metrics.Average("grad_norm"))
    report = xla_cost.analyze_step(train_step, *_objects(), metrics, X, Y, counter="jaxpr")
    reference = xla_cost.analyze(nnx.eval_shape(lambda: nnx.Linear(D, C, rngs=nnx.Rngs(0))), X,
                                 optimizer="adam", counter="jaxpr")
    assert report.phases["update"].flops == pytest.approx(reference.phases["update"].flops, abs=8)
    assert report.phases["other"].flops >= 2 * P - 1


DENSE = nn.Dense(C)


def _dense_step(accuracy_inside: bool, returns_loss: bool = True):
    """An SGD step of a Dense layer returning its accuracy, computed inside the differentiated function
    (through has_aux) or after it from the logits, and its loss or not."""
    def train_step(params, x, y):
        def loss_fn(p):
            logits = DENSE.apply({"params": p}, x)
            return _loss(logits, y), (jnp.mean(jnp.argmax(logits, -1) == y) if accuracy_inside else logits)

        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        metrics = {"accuracy": aux if accuracy_inside else jnp.mean(jnp.argmax(aux, -1) == y)}
        if returns_loss:
            metrics["loss"] = loss
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), metrics

    return train_step


@pytest.mark.parametrize("counter", ["jaxpr", "xla"])
def test_an_accuracy_returned_beside_the_loss_is_other_as_one_computed_outside(counter):
    # EasyLM's cross_entropy_loss_and_accuracy: the accuracy computed inside the differentiated function and
    # returned through has_aux carries no derivative of the loss; it is a metric, other, as the same accuracy
    # computed after value_and_grad from the logits is: the two steps split alike, the argmax of the B x C
    # logits in other, and the forward the loss's alone
    params = jax.eval_shape(DENSE.init, jax.random.key(0), X)["params"]
    inside, outside = (xla_cost.analyze_step(_dense_step(flag), params, X, Y, counter=counter) for flag in (True, False))
    for part in ("forward", "backward", "update", "other"):
        assert inside.phases[part].flops == outside.phases[part].flops, part
    argmax = xla_cost.count_function(lambda a: jnp.argmax(a, -1), jax.ShapeDtypeStruct((B, C), jnp.float32))
    assert inside.phases["other"].flops >= argmax.total.flops


@pytest.mark.parametrize("form", ["nnx.jit", "jax.jit"])
def test_xlas_memory_figures_are_those_of_the_users_own_jit_with_its_donation(form):
    # The step as the training loop compiles it donates the model and the optimizer: XLA writes the new
    # parameters and Adam's moments over them, 3 P floats and the two int32 counters (Adam's count, the
    # optimizer's step) aliased. The same step jitted without donation aliases nothing.
    def in_place(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lambda m: _loss(m(x), y))(model)
        optimizer.update(model, grads)
        return loss

    def returning_state(model, optimizer, x, y):
        _split_step(model, optimizer, x, y)
        return nnx.state((model, optimizer))

    def jitted(donate: bool):
        names = ("model", "optimizer") if donate else ()
        if form == "nnx.jit":
            return nnx.jit(in_place, donate_argnames=names)
        return jax.jit(returning_state, donate_argnames=names)

    donated, kept = (xla_cost.analyze_step(jitted(flag), *_objects(), X, Y, memory=True).memory_breakdown
                     for flag in (True, False))
    assert donated.alias_bytes == 4 * 3 * P + 2 * 4
    assert kept.alias_bytes == 0


@pytest.mark.parametrize("donate", [True, False])
def test_the_outputs_row_is_what_the_step_returns_outside_the_donated_buffers(donate):
    # a jax.jit step returning (loss, nnx.state((model, optimizer))): not donated, the new state (3 P floats:
    # parameters, Adam's mu and nu; two int32 counters) and the float32 loss are returned outside any donated
    # buffer; donated, the new state is written over the arguments and the loss alone is (the outputs row was
    # empty, the parts alike in both). XLA's outputs add its result tuple's pointer table: 8 bytes an array.
    from xla_cost.analysis.report_tables import memory_frame

    def step(model, optimizer, x, y):
        loss, _ = _split_step(model, optimizer, x, y)
        return loss, nnx.state((model, optimizer))

    jitted = jax.jit(step, donate_argnames=("model", "optimizer") if donate else ())
    memory = xla_cost.analyze_step(jitted, *_objects(), X, Y, memory=True).memory_breakdown
    state, loss = 4 * 3 * P + 2 * 4, 4
    results = len(jax.tree.leaves(nnx.state(_objects()))) + 1
    returned = loss if donate else state + loss
    assert returned <= memory.outputs <= returned + 8 * results
    assert memory.parts_total == sum(memory.parts.values()) + memory.outputs
    what = memory_frame(memory).loc["outputs", "what"]
    assert ("outside the donated buffers" in what) == donate and ("nothing donated" in what) != donate


def test_a_loss_the_step_drops_keeps_its_softmax_in_the_forward_pass():
    # Flax's lm1b drops the loss value_and_grad returns and recomputes its metrics from the logits: the loss's
    # log-softmax still runs (its exps, B C of them, are what the backward's softmax reads), so they are the
    # forward's, as they are where the step returns its loss; only the loss's last reductions (the log of each
    # row's sum: B logarithms, and the mean) are dead code, never computed. The backward pass computes no exp.
    params = jax.eval_shape(DENSE.init, jax.random.key(0), X)["params"]
    dropped, returned = (xla_cost.analyze_step(_dense_step(False, returns_loss=flag), params, X, Y, counter="jaxpr")
                         for flag in (False, True))
    assert dropped.phases["forward"].transcendentals == B * C
    assert returned.phases["forward"].transcendentals == B * C + B
    assert dropped.phases["backward"].transcendentals == returned.phases["backward"].transcendentals == 0


def test_an_inference_steps_output_of_its_inputs_shape_is_no_new_state():
    # a jax.jit NNX step that only calls its model (an inference or decode step): the output of a square layer
    # has the batch's shape and dtype, and was taken for state handed back (an argument's arrays), its
    # product counted as the update: B x D x D multiply-adds (no bias: 2 B D^2 FLOP), no optimizer's work
    model = nnx.eval_shape(lambda: nnx.Linear(D, D, use_bias=False, rngs=nnx.Rngs(0)))

    @jax.jit
    def infer(model, x):
        return model(x)

    report = xla_cost.analyze_step(infer, model, jax.ShapeDtypeStruct((B, D), jnp.float32), counter="jaxpr")
    assert report.phases["train_step"].flops == 2 * B * D * D
    assert report.phases["update"].flops == 0  # was all of it
