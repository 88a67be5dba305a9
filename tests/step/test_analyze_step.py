"""`xla_cost.analyze_step`: a hand-written train step split into forward,
backward, update and other, checked against closed forms and against
`xla_cost.analyze` on the same model, loss and optimizer.

The closed forms are those of tests/formulas.py (a multiply-add is 2 FLOP;
the loss is optax's mean softmax cross-entropy with integer labels). The
repository-style steps (ImageNet, MNIST, the NNX tutorial, a GPT with
accumulation, a sharded step) are in tests/step/test_repo_steps.py.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx
from flax.training import train_state
from jax import lax

import xla_cost
from tests.formulas import (
    dense_backward_flops, dense_flops, loss_backward_flops, loss_flops, relu_backward_flops,
)

B, IN, HIDDEN, CLASSES = 16, 64, 128, 10
PARAMS = IN * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(HIDDEN, name="fc1")(x))
        return nn.Dense(CLASSES, name="fc2")(x)


def _forward() -> int:
    # fc1, its ReLU (a max per element), fc2, the loss
    return dense_flops(B, IN, HIDDEN) + B * HIDDEN + dense_flops(B, HIDDEN, CLASSES) + loss_flops(B, CLASSES)


def _backward() -> int:
    # fc1 needs no input gradient (first layer); the ReLU's mask (computed in the forward pass for
    # the backward pass only) and its select; fc2; the loss's gradient
    return (dense_backward_flops(B, IN, HIDDEN, first=True) + relu_backward_flops(B * HIDDEN)
            + dense_backward_flops(B, HIDDEN, CLASSES) + loss_backward_flops(B, CLASSES))


def _loss(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def _state(tx):
    model = MLP()

    def create():
        params = model.init(jax.random.key(0), jnp.ones((1, IN)))["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

    return jax.eval_shape(create)


BATCH = {"x": jax.ShapeDtypeStruct((B, IN), jnp.float32), "y": jax.ShapeDtypeStruct((B,), jnp.int32)}


def plain_step(state, batch):
    def loss_fn(params):
        return _loss(state.apply_fn({"params": params}, batch["x"]), batch["y"])

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def test_parts_are_the_closed_forms_and_add_up_to_the_step():
    report = xla_cost.analyze_step(plain_step, _state(optax.sgd(0.1)), BATCH, counter="jaxpr")
    flops = {p: report.phases[p].flops for p in report.phase_names}
    assert report.phase_names == ("forward", "backward", "grad", "update", "other", "train_step")
    assert flops["forward"] == _forward()
    assert flops["backward"] == _backward()
    assert flops["update"] == 2 * PARAMS  # SGD: -lr * g, then p + u (seed 001, appendix B)
    assert flops["other"] == 1  # TrainState.apply_gradients' step + 1: read by nothing but the results
    assert flops["forward"] + flops["backward"] + flops["update"] + flops["other"] == flops["train_step"]
    assert report.parameters == PARAMS and report.batch_size == B


def test_agrees_with_analyze_per_phase_and_per_layer():
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3, weight_decay=0.1))
    step = xla_cost.analyze_step(plain_step, _state(tx), BATCH, per_layer=True, counter="jaxpr")
    model = xla_cost.analyze(MLP(), BATCH["x"], optimizer=tx, loss=_loss, targets=BATCH["y"], per_layer=True,
                             counter="jaxpr")
    for phase in ("forward", "backward", "update"):
        assert step.phases[phase].flops == pytest.approx(model.phases[phase].flops, rel=1e-3), phase
    rows = {row.path: row for row in model.layers}
    for row in step.layers:
        for column in ("forward_flops", "backward_flops", "update_flops"):
            assert getattr(row, column) == pytest.approx(getattr(rows[row.path], column), rel=1e-3, abs=64), (
                row.path, column)
    # per parameter, as analyze gives it for the same optax transformation
    assert step.phases["update"].flops / PARAMS == pytest.approx(model.phases["update"].flops / PARAMS, rel=1e-3)


def test_nested_jits_split_as_one_step():
    @jax.jit
    def apply_model(state, batch):
        def loss_fn(params):
            logits = state.apply_fn({"params": params}, batch["x"])
            return _loss(logits, batch["y"]), logits

        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["y"])
        return grads, loss, accuracy

    @jax.jit
    def update_model(state, grads):
        return state.apply_gradients(grads=grads)

    def train_step(state, batch):
        grads, loss, accuracy = apply_model(state, batch)
        return update_model(state, grads), loss, accuracy

    report = xla_cost.analyze_step(train_step, _state(optax.sgd(0.1)), BATCH, counter="jaxpr")
    assert report.phases["forward"].flops == _forward()
    assert report.phases["backward"].flops == _backward()
    assert report.phases["update"].flops == 2 * PARAMS
    # the accuracy: argmax over the classes (B * (C - 1) steps of jax's NaN- and tie-aware comparator of
    # value and index, 9 operations each as XLA counts them: xla_cost.count.rules.ARGMAX_STEP_OPS), the
    # == (B), its conversions bool -> int32 -> float32 (2 B), and the mean's B - 1 adds and one divide: all
    # "other"; and TrainState.apply_gradients' step + 1
    accuracy = 9 * B * (CLASSES - 1) + B + 2 * B + (B - 1) + 1  # 1296 + 16 + 32 + 15 + 1
    assert report.phases["other"].flops == accuracy + 1


def test_bare_and_jitted_with_donation_give_the_same_figures():
    state = _state(optax.sgd(0.1))
    bare = xla_cost.analyze_step(plain_step, state, BATCH)
    donated = xla_cost.analyze_step(jax.jit(plain_step, donate_argnums=0), state, BATCH, memory=True)
    for phase in bare.phase_names:
        assert donated.phases[phase].flops == bare.phases[phase].flops, phase
    memory = donated.memory_breakdown
    assert memory.parameters == PARAMS * 4  # float32
    # the donated state is reused: the parameters and TrainState's int32 step (SGD keeps no state)
    assert memory.alias_bytes == PARAMS * 4 + 4
    # the forward values the backward pass reads (float32 but the int32 labels): fc1's output (the ReLU's
    # mask is computed from it) and the ReLU's (fc2's kernel gradient); the loss's softmax numerators
    # exp(logits - max) (B * CLASSES), their sum and its absolute value (log-sum-exp's backward, B each),
    # and the labels as take_along_axis's gather indices (B); its one-element index, a broadcast scalar, is
    # no buffer (XLA fuses it)
    assert memory.saved_activations == 4 * (2 * B * HIDDEN + B * CLASSES + 2 * B + B)  # 17216


def test_unbound_pmean_is_bound_and_the_gradients_mean_is_the_update():
    def step(state, batch):
        def loss_fn(params):
            return _loss(state.apply_fn({"params": params}, batch["x"]), batch["y"])

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        grads = lax.pmean(grads, axis_name="batch")
        return state.apply_gradients(grads=grads), lax.pmean(loss, axis_name="batch")

    report = xla_cost.analyze_step(step, _state(optax.sgd(0.1)), BATCH, counter="jaxpr")
    assert any("collective axis names batch detected and bound" in n for n in report.notes)
    # one psum per gradient (fc1's and fc2's kernel and bias) and the loss's
    assert report.collectives == {"psum": 4 + 1}
    assert report.phases["forward"].flops == _forward()
    # the gradients' pmean consumes the gradients: update: its psum, one add per element as XLA counts an
    # all-reduce (the division by the one-device group's size, 1, is none), and SGD's two
    assert report.phases["update"].flops == PARAMS + 2 * PARAMS
    assert report.phases["other"].flops == 1 + 1  # the loss's psum; the step + 1


def test_accumulation_loop_counts_every_micro_batch():
    micro = 4

    @jax.jit
    def step(state, batch):
        def loss_fn(params, x, y):
            return _loss(state.apply_fn({"params": params}, x), y)

        def accumulate(total, mb):
            loss, grads = jax.value_and_grad(loss_fn)(state.params, *mb)
            return jax.tree.map(jnp.add, total, grads), loss

        parts = batch["x"].reshape(micro, B // micro, IN), batch["y"].reshape(micro, B // micro)
        grads, losses = lax.scan(accumulate, jax.tree.map(jnp.zeros_like, state.params), parts)
        grads = jax.tree.map(lambda g: g / micro, grads)
        return state.apply_gradients(grads=grads), losses.mean()

    report = xla_cost.analyze_step(step, _state(optax.sgd(0.1)), BATCH, per_layer=True)
    b = B // micro
    forward = micro * (dense_flops(b, IN, HIDDEN) + b * HIDDEN + dense_flops(b, HIDDEN, CLASSES) + loss_flops(b, CLASSES))
    assert report.phases["forward"].flops == forward
    # the update: the gradients summed over the micro-batches (micro adds per parameter), divided once,
    # then SGD's two
    assert report.phases["update"].flops == (micro + 1 + 2) * PARAMS
    # XLA counts the loop body once; the step's figure is corrected from the jaxpr and within 2% of the sum
    step_flops = report.phases["train_step"].flops
    parts = sum(report.phases[p].flops for p in ("forward", "backward", "update", "other"))
    assert report.phases["train_step"].loop_corrected
    assert step_flops == pytest.approx(parts, rel=0.02)
    assert {row.path: row.trip_count for row in report.layers}["fc1"] == micro


@pytest.mark.parametrize("index", ["dynamic_index", "take"])
def test_a_loop_of_micro_batches_of_unknown_trip_count_is_said_on_every_part_it_holds(index):
    # optax's micro_vmap under jax_privacy: a fori_loop over the micro-batches whose bound is computed at run time
    micro = 4
    b = B // micro

    @jax.jit
    def step(state, batch):
        def loss_fn(params, x, y):
            return _loss(state.apply_fn({"params": params}, x), y)

        xs, ys = batch["x"].reshape(micro, b, IN), batch["y"].reshape(micro, b)
        n = jnp.sum(batch["y"] >= 0) // b  # the micro-batches holding labels: known at run time only

        def accumulate(i, carry):
            total, loss_sum = carry
            if index == "take":
                x, y = jnp.take(xs, i, axis=0), jnp.take(ys, i, axis=0)
            else:
                x, y = lax.dynamic_index_in_dim(xs, i, keepdims=False), lax.dynamic_index_in_dim(ys, i, keepdims=False)
            loss, grads = jax.value_and_grad(loss_fn)(state.params, x, y)
            return jax.tree.map(jnp.add, total, grads), loss_sum + loss

        grads, loss = lax.fori_loop(0, n, accumulate, (jax.tree.map(jnp.zeros_like, state.params), 0.0))
        return state.apply_gradients(grads=grads), loss

    report = xla_cost.analyze_step(step, _state(optax.sgd(0.1)), BATCH, counter="jaxpr")
    # one micro-batch's forward, as if the loop ran once; the backward pass is all in the loop too
    forward, backward = report.phases["forward"].flops, report.phases["backward"].flops
    assert forward == dense_flops(b, IN, HIDDEN) + b * HIDDEN + dense_flops(b, HIDDEN, CLASSES) + loss_flops(b, CLASSES)
    bound = f"its counter (from 0 by 1) indexes an axis of {micro} of a float32[{micro},{b},{IN}]: at most {micro} " \
            "iterations if none reads past its end (a bound, not assumed)"
    for part, flops in (("forward", forward), ("backward", backward)):  # all of it in the loop, counted once
        assert (f"{part}: at least: a while loop of unknown trip count at <top> holds {flops:,} FLOP of this part, "
                f"counted once (the true cost is higher); {bound}: up to {micro * flops:,} FLOP") in report.notes
    # the accumulation's adds (a parameter each) are in the loop too; SGD's after it is not
    update = next(note for note in report.notes if note.startswith("update: at least"))
    assert f"holds {PARAMS:,} FLOP" in update
    assert report.phases["update"].flops == PARAMS + 2 * PARAMS
    assert any(note.startswith(f"train_step: while loop at <top>: trip count unknown, its body is counted once "
                               f"(the true cost is higher); {bound}") for note in report.notes)


def _accuracy_flops(b: int) -> int:
    # jnp.mean(jnp.argmax(logits, -1) == y) over b samples: b * (C - 1) steps of the argmax's comparator
    # (9 operations each: xla_cost.count.rules.ARGMAX_STEP_OPS), the == (b), bool -> int32 -> float32 (2 b),
    # the mean's b - 1 adds and its divide
    return 9 * b * (CLASSES - 1) + b + 2 * b + (b - 1) + 1


def _accuracy_step(loop: str | None, micro: int = 2):
    """A step whose loss returns its accuracy through has_aux, on the whole batch (``loop=None``) or
    accumulated over ``micro`` micro-batches: each's loss and accuracy returned as the scan's
    per-iteration outputs ("scan") or summed in its carry ("carry"), or summed in a while_loop's."""
    b = B // micro

    def loss_fn(params, state, x, y):
        logits = state.apply_fn({"params": params}, x)
        return _loss(logits, y), jnp.mean(jnp.argmax(logits, -1) == y)

    def grads_of(state, x, y):
        (loss, accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, state, x, y)
        return grads, loss, accuracy

    def step(state, batch):
        if loop is None:
            grads, loss, accuracy = grads_of(state, batch["x"], batch["y"])
            return state.apply_gradients(grads=grads), {"loss": loss, "accuracy": accuracy}
        parts = batch["x"].reshape(micro, b, IN), batch["y"].reshape(micro, b)
        zeros = jax.tree.map(jnp.zeros_like, state.params)
        if loop == "scan":
            def body(total, mb):
                grads, loss, accuracy = grads_of(state, *mb)
                return jax.tree.map(jnp.add, total, grads), (loss, accuracy)

            grads, (losses, accuracies) = lax.scan(body, zeros, parts)
            loss, accuracy = losses.mean(), accuracies.mean()
        elif loop == "carry":
            def body(carry, mb):
                total, loss_sum, accuracy_sum = carry
                grads, loss, accuracy = grads_of(state, *mb)
                return (jax.tree.map(jnp.add, total, grads), loss_sum + loss, accuracy_sum + accuracy), None

            (grads, loss, accuracy), _ = lax.scan(body, (zeros, 0.0, 0.0), parts)
            loss, accuracy = loss / micro, accuracy / micro
        else:
            def cond(carry):
                return carry[0] < micro

            def body(carry):
                i, total, loss_sum, accuracy_sum = carry
                mb = (lax.dynamic_index_in_dim(p, i, keepdims=False) for p in parts)
                grads, loss, accuracy = grads_of(state, *mb)
                return i + 1, jax.tree.map(jnp.add, total, grads), loss_sum + loss, accuracy_sum + accuracy

            _, grads, loss, accuracy = lax.while_loop(cond, body, (0, zeros, 0.0, 0.0))
            loss, accuracy = loss / micro, accuracy / micro
        new = state.apply_gradients(grads=jax.tree.map(lambda g: g / micro, grads))
        return new, {"loss": loss, "accuracy": accuracy}

    return step


@pytest.mark.parametrize("loop", ["scan", "carry", "while"])
def test_an_accuracy_returned_through_has_aux_in_an_accumulation_loop_is_other_as_without_the_loop(loop):
    # simply's train_one_step: the accuracy a micro-batch's loss returns through has_aux carries no derivative
    # of the loss and only a returned metric reads it, inside the accumulation loop as without one; it was
    # forward where the loop's body holds it (grad_accum_steps=2: forward 46,668,802, other 16; without
    # accumulation 46,078,721 and 589,185), its argmax, == and mean in every iteration
    micro, b = 2, B // 2
    state = _state(optax.sgd(0.1))
    whole, looped = (xla_cost.analyze_step(_accuracy_step(form, micro), state, BATCH, counter="jaxpr")
                     for form in (None, loop))
    # the forward is each micro-batch's: micro x (the MLP on b samples and the loss), and this MLP and mean
    # cross-entropy are linear in the batch (tests/formulas.py: loss_flops = 3bc + 12b): the whole batch's
    # forward exactly; the loop's own arithmetic on the losses (a mean, a carry's adds) is outside autodiff
    per_micro = dense_flops(b, IN, HIDDEN) + b * HIDDEN + dense_flops(b, HIDDEN, CLASSES) + loss_flops(b, CLASSES)
    assert looped.phases["forward"].flops == micro * per_micro == whole.phases["forward"].flops == _forward()
    # the accuracy is other: micro x the micro-batch's, the whole batch's (its mean's b - 1 adds and divide
    # per micro-batch, B - 1 and one for the whole); TrainState's step + 1
    assert micro * _accuracy_flops(b) == _accuracy_flops(B)
    assert whole.phases["other"].flops == _accuracy_flops(B) + 1
    bookkeeping = {
        # the scan's counter (an add and a compare an iteration); the mean of the losses and of the
        # accuracies after it (micro - 1 adds and a divide each)
        "scan": 2 * micro + 2 * micro,
        # the counter; the carry's adds to the loss's and the accuracy's sums; the two sums / micro
        "carry": 2 * micro + 2 * micro + 2,
        # the while_loop's i + 1 an iteration and i < micro before each and after the last; the carry's
        # adds; the two sums / micro; each micro-batch's slice of x and of y: a negative index wrapped
        # (i < 0, i + micro, a select: 3; the slice's other start indices are literal 0s)
        "while": micro + (micro + 1) + 2 * micro + 2 + micro * 2 * 3,
    }[loop]
    assert looped.phases["other"].flops == micro * _accuracy_flops(b) + bookkeeping + 1


@pytest.mark.parametrize("micro", [2, 3])
def test_a_first_micro_batch_before_the_loop_is_one_more_run(micro):
    """vision_transformer's accumulate_gradient: micro-batch 0 outside, 1..micro-1 in a
    fori_loop (one trip with micro = 2): each layer runs micro times, its row's runs say so."""

    def step(state, batch):
        b = B // micro

        def grads_of(i):
            x, y = lax.dynamic_slice_in_dim(batch["x"], i * b, b), lax.dynamic_slice_in_dim(batch["y"], i * b, b)
            return jax.grad(lambda p: _loss(state.apply_fn({"params": p}, x), y))(state.params)

        total = lax.fori_loop(1, micro, lambda i, g: jax.tree.map(jnp.add, g, grads_of(i)), grads_of(0))
        return state.apply_gradients(grads=jax.tree.map(lambda g: g / micro, total))

    report = xla_cost.analyze_step(step, _state(optax.sgd(0.1)), BATCH, per_layer=True, counter="jaxpr")
    rows = {row.path: row for row in report.layers}
    b = B // micro
    for name, n_in, n_out in (("fc1", IN, HIDDEN), ("fc2", HIDDEN, CLASSES)):
        assert rows[name].forward_flops == micro * dense_flops(b, n_in, n_out)  # every run's FLOP
        assert rows[name].trip_count == micro  # and as many runs: 1 outside the loop + micro - 1 in it


def test_custom_vjp_backward_and_remat_recomputation_are_backward():
    @jax.custom_vjp
    def scaled(x):
        return 2.0 * x

    scaled.defvjp(lambda x: (2.0 * x, None), lambda _, g: (2.0 * g,))

    def step(params, x):
        def loss_fn(p):
            h = jax.checkpoint(lambda w: jnp.tanh(x @ w))(p["w"])
            return jnp.sum(scaled(h))

        loss, grads = jax.value_and_grad(loss_fn)(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss

    params = {"w": jax.ShapeDtypeStruct((IN, HIDDEN), jnp.float32)}
    x = jax.ShapeDtypeStruct((B, IN), jnp.float32)
    report = xla_cost.analyze_step(step, params, x, counter="jaxpr")
    forward = report.phases["forward"].flops
    # forward: the matmul 2*B*IN*HIDDEN, custom_vjp's scaling B*HIDDEN, the sum B*HIDDEN - 1
    assert forward == 2 * B * IN * HIDDEN + B * HIDDEN + B * HIDDEN - 1
    # backward: the recomputed matmul (remat; its tanh is a transcendental), tanh's derivative (1 - t, times
    # the cotangent, times t, added: 4 per element) and the weight gradient's matmul; the custom VJP's
    # 2 * g scales a constant cotangent (the sum's, 1): folded into the constant 2, 0 FLOP
    assert report.phases["backward"].flops == 2 * (2 * B * IN * HIDDEN) + 4 * B * HIDDEN
    assert report.phases["update"].flops == 2 * IN * HIDDEN  # p - 0.1 * g


def test_a_step_without_a_gradient_says_so_and_is_reported_whole():
    def evaluate(params, x):
        return {"mean": jnp.mean(jnp.tanh(x @ params["w"]))}

    params = {"w": jax.ShapeDtypeStruct((IN, HIDDEN), jnp.float32)}
    report = xla_cost.analyze_step(evaluate, params, jax.ShapeDtypeStruct((B, IN), jnp.float32), counter="jaxpr")
    assert report.notes[0].startswith("no backward found")
    assert report.phases["backward"].flops == 0 and report.phases["update"].flops == 0
    # no module opens a scope: the work computing the result from the parameters is the forward (was other):
    # the matmul, tanh (a transcendental), the mean's B * HIDDEN - 1 adds and one divide
    assert report.phases["forward"].flops == report.phases["train_step"].flops == 2 * B * IN * HIDDEN + B * HIDDEN
    assert report.phases["other"].flops == 0


def _two_layers(params, x):
    return jnp.tanh(x @ params["fc1"]["w"]) @ params["fc2"]["w"]


_TWO = {"fc1": {"w": jax.ShapeDtypeStruct((IN, IN), jnp.float32)},
        "fc2": {"w": jax.ShapeDtypeStruct((IN, IN), jnp.float32)}}
_TWO_FORWARD = 2 * (2 * B * IN * IN)  # two B x IN x IN products (tanh: transcendentals)


@pytest.mark.parametrize("scope", [None, "mlp"])
def test_a_pure_jax_inference_step_is_the_forward_not_the_update(scope):
    # an apply function over a params pytree (jax-llm-examples' prefill): no module's scope, or one that names
    # no parameter's path; its work was the update (32,768 FLOP), as if it made new parameters
    def infer(params, x):
        if scope is None:
            return _two_layers(params, x)
        with jax.named_scope(scope):
            return _two_layers(params, x)

    report = xla_cost.analyze_step(infer, _TWO, jax.ShapeDtypeStruct((B, IN), jnp.float32), counter="jaxpr")
    flops = {part: report.phases[part].flops for part in ("forward", "backward", "update", "other")}
    assert flops == {"forward": _TWO_FORWARD, "backward": 0, "update": 0, "other": 0}


def test_a_decode_steps_kv_cache_is_written_by_the_forward_and_an_ema_is_the_update():
    # decode(params, cache, ema, x): the KV cache returned written (its new row x W1) is the forward's state,
    # not an update; the EMA of the parameters made from them alone is the update: 0.9 e, 0.1 p and their sum
    S = 8

    def decode(params, cache, ema, x, index):
        k = x @ params["fc1"]["w"]
        cache = jax.lax.dynamic_update_slice(cache, k[:, None, :], (0, index, 0))
        y = _two_layers(params, x) + cache.sum(1)
        ema = jax.tree.map(lambda e, p: 0.9 * e + 0.1 * p, ema, params)
        return y, cache, ema

    report = xla_cost.analyze_step(decode, _TWO, jax.ShapeDtypeStruct((B, S, IN), jnp.float32), _TWO,
                                   jax.ShapeDtypeStruct((B, IN), jnp.float32), jax.ShapeDtypeStruct((), jnp.int32),
                                   counter="jaxpr")
    flops = {part: report.phases[part].flops for part in ("forward", "backward", "update", "other")}
    # the forward: the two layers, the cache's row (B x IN x IN products), its sum over S rows and the add,
    # and the index's wrap that jax writes for the written row (index < 0, index + S, a select: 3)
    assert flops["forward"] == _TWO_FORWARD + 2 * B * IN * IN + B * (S - 1) * IN + B * IN + 3
    assert flops["update"] == 3 * 2 * IN * IN and flops["backward"] == 0


def _mse_step(tx, returns_batch=False):
    def step(weights, opt_state, batch):  # no argument named params
        x, y = batch["x"], batch["y"]
        loss, grads = jax.value_and_grad(lambda w: jnp.mean((_two_layers(w, x) - y) ** 2))(weights)
        updates, opt_state = tx.update(grads, opt_state, weights)
        return (optax.apply_updates(weights, updates), opt_state, loss) + ((batch,) if returns_batch else ())
    return step


@pytest.mark.parametrize("form", ["named", "lambda"])
def test_the_parameters_are_the_leaves_the_loss_is_differentiated_by_whatever_the_arguments_are_named(form):
    # kauldron's step called as `lambda p, o, b: step(p, o, b)`: no argument named params; the leaves the loss is
    # differentiated with respect to are the parameters (were none: 0 parameters and gradients, their bytes model
    # state). The batch's arrays have a weight's shape (IN x IN) and are read by the forward pass: still the batch
    tx = optax.adam(1e-3)
    step = _mse_step(tx)
    fn = {"named": lambda params, opt_state, batch: step(params, opt_state, batch),
          "lambda": lambda p, o, b: step(p, o, b)}[form]
    batch = {"x": jax.ShapeDtypeStruct((IN, IN), jnp.float32), "y": jax.ShapeDtypeStruct((IN, IN), jnp.float32)}
    report = xla_cost.analyze_step(fn, _TWO, jax.eval_shape(tx.init, _TWO), batch, counter="jaxpr", memory=True)
    memory = report.memory_breakdown
    weights = 2 * IN * IN  # fc1 and fc2, IN x IN each
    assert report.parameters == weights and report.batch_size == IN
    assert (memory.parameters, memory.gradients) == (4 * weights, 4 * weights)  # float32
    assert memory.optimizer_state == 2 * 4 * weights + 4  # Adam's mu and nu, and its int32 count
    assert (memory.model_state, memory.inputs) == (0, 2 * 4 * IN * IN)  # x and y


@pytest.mark.parametrize("nested", [False, True])
def test_a_batch_the_step_returns_as_it_came_in_is_the_batch_not_state_written_back(nested):
    # kauldron's Context carries the batch out of the step unchanged: a value passed through (directly, or out of
    # a jit the step calls) is not written back as a KV cache is (was batch size 0, the batch model state)
    tx = optax.sgd(0.1)
    step = _mse_step(tx, returns_batch=True)
    fn = jax.jit(step) if nested else step
    batch = {"x": jax.ShapeDtypeStruct((B, IN), jnp.float32), "y": jax.ShapeDtypeStruct((B, IN), jnp.float32)}
    report = xla_cost.analyze_step(lambda params, opt_state, batch: fn(params, opt_state, batch), _TWO,
                                   jax.eval_shape(tx.init, _TWO), batch, counter="jaxpr", memory=True)
    memory = report.memory_breakdown
    assert report.batch_size == B
    assert (memory.model_state, memory.inputs) == (0, 2 * 4 * B * IN)  # x and y, float32



def test_a_step_without_a_gradient_holds_no_gradients_in_memory():
    # an evaluation or decode step of an NNX model that is the root module (its parameters under no name stack):
    # no backward pass, so no gradient is made (was one per parameter taken as made: 4 IN HIDDEN bytes)
    infer = jax.jit(lambda model, x: model(x))
    model = nnx.eval_shape(lambda: nnx.Linear(IN, HIDDEN, use_bias=False, rngs=nnx.Rngs(0)))
    report = xla_cost.analyze_step(infer, model, jax.ShapeDtypeStruct((B, IN), jnp.float32), memory=True)
    memory = report.memory_breakdown
    assert report.notes[0].startswith("no backward found")
    assert memory.parameters == 4 * IN * HIDDEN and memory.gradients == 0


def test_a_step_that_fails_to_trace_gives_its_own_error_in_one_line():
    def broken(params, x):
        raise ValueError("the batch has no 'image' key\nsecond line")

    with pytest.raises(xla_cost.InputError) as caught:
        xla_cost.analyze_step(broken, {"w": jnp.ones(2)}, jnp.ones(2))
    message = str(caught.value)
    assert "ValueError: \"the batch has no 'image' key\"" in message and "\n" not in message


def test_a_non_function_is_an_input_error():
    with pytest.raises(xla_cost.InputError, match="a training step function"):
        xla_cost.analyze_step(42, jnp.ones(2))


def test_cond_is_charged_its_most_expensive_branch_and_noted():
    def step(params, x, flag):
        def loss_fn(p):
            return jnp.sum(jnp.tanh(x @ p["w"]))

        loss, grads = jax.value_and_grad(loss_fn)(params)
        new = lax.cond(flag, lambda: jax.tree.map(lambda p, g: p - 0.1 * g * g, params, grads),
                       lambda: params)
        return new, loss

    params = {"w": jax.ShapeDtypeStruct((IN, HIDDEN), jnp.float32)}
    report = xla_cost.analyze_step(step, params, jax.ShapeDtypeStruct((B, IN), jnp.float32),
                                   jax.ShapeDtypeStruct((), jnp.bool_), counter="jaxpr")
    # g * g, * 0.1, p - : the branch that computes; and the flag's conversion to a branch index (1), which
    # only the update reads
    assert report.phases["update"].flops == 3 * IN * HIDDEN + 1
    assert any("cond" in n and "most expensive branch" in n for n in report.notes)


STEP_FILE = '''
import jax, jax.numpy as jnp, optax
from flax.training import train_state
from tests.step.test_analyze_step import MLP, plain_step, BATCH, IN

def make_args():
    model = MLP()
    state = jax.eval_shape(lambda: train_state.TrainState.create(
        apply_fn=model.apply, params=model.init(jax.random.key(0), jnp.ones((1, IN)))["params"],
        tx=optax.sgd(0.1)))
    return state, BATCH

train_step = plain_step
'''


def test_cli_gives_what_python_gives(tmp_path):
    from xla_cost.cli.main import main
    from xla_cost.present.formats import render_as

    (tmp_path / "mystep.py").write_text(STEP_FILE)
    out = tmp_path / "report.json"
    code = main(["step", f"{tmp_path / 'mystep.py'}:train_step", "--args", f"{tmp_path / 'mystep.py'}:make_args",
                 "--counter", "jaxpr", "--format", "json", "--output", str(out)])
    assert code == 0
    expected = xla_cost.analyze_step(plain_step, _state(optax.sgd(0.1)), BATCH, counter="jaxpr")
    assert out.read_text().strip() == render_as(expected, "json", 100).strip()


def test_cli_bad_function_is_one_line_exit_2(tmp_path):
    (tmp_path / "mystep.py").write_text(STEP_FILE)
    root = pathlib.Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "xla_cost", "step", f"{tmp_path / 'mystep.py'}:nope", "--args",
         f"{tmp_path / 'mystep.py'}:make_args"], capture_output=True, text=True, cwd=root,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "nope" in result.stderr and not result.stdout


def test_a_data_parallel_step_jitted_with_shardings_is_split_per_device():
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = 8  # tests/conftest.py simulates eight CPU devices
    mesh = Mesh(np.array(jax.devices()[:devices]), ("data",))
    state = _state(optax.sgd(0.1))
    replicated, split = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("data"))
    shardings = jax.tree.map(lambda _: replicated, state)
    step = jax.jit(plain_step, in_shardings=(shardings, {"x": split, "y": split}),
                   out_shardings=(shardings, replicated))
    report = xla_cost.analyze_step(step, state, BATCH)
    assert report.devices == devices
    assert report.phases["forward"].flops == _forward() / devices  # the batch split over the devices
    assert report.phases["update"].flops == 2 * PARAMS  # replicated parameters: every device updates them all
    # the gradients' all-reduce: every parameter's gradient (float32), and XLA's combiner adds the
    # loss's scalar to it; no other part communicates
    rows = {p: [(c.kind, c.axes, c.bytes) for c in report.phases[p].communication] for p in report.phase_names}
    assert rows["backward"] == [("all-reduce", ("data",), PARAMS * 4 + 4)]
    assert rows["forward"] == rows["update"] == rows["other"] == []


class NnxMLP(nnx.Module):
    """`MLP` in NNX."""

    def __init__(self, rngs):
        self.fc1, self.fc2 = nnx.Linear(IN, HIDDEN, rngs=rngs), nnx.Linear(HIDDEN, CLASSES, rngs=rngs)

    def __call__(self, x):
        return self.fc2(nnx.relu(self.fc1(x)))


def nnx_sgd_step(model, batch):
    loss, grads = nnx.value_and_grad(lambda m: _loss(m(batch["x"]), batch["y"]))(model)
    return jax.tree.map(lambda p, g: p - 0.1 * g, nnx.state(model, nnx.Param), grads), loss


@pytest.mark.parametrize("jit", [jax.jit, nnx.jit])
def test_an_nnx_step_the_user_jitted_with_a_split_batch_has_per_device_parts(jit):
    # the user's own jit (jax.jit, nnx.jit) shards the batch over 2 devices; xla_cost traces the NNX step in a
    # function of the model's state of its own, inside which the user's jit (and its in_shardings) is nested
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = 2
    mesh = Mesh(np.array(jax.devices()[:devices]), ("data",))
    step = jit(nnx_sgd_step, in_shardings=(None, NamedSharding(mesh, PartitionSpec("data"))))
    report = xla_cost.analyze_step(step, nnx.eval_shape(lambda: NnxMLP(nnx.Rngs(0))), BATCH)
    assert report.devices == devices
    forward = report.phases["forward"]
    assert forward.flops == _forward() / devices  # the batch's B / 2 samples on one device
    assert forward.matmul_flops == 2 * (B // devices) * (IN * HIDDEN + HIDDEN * CLASSES)
    assert report.phases["backward"].flops == _backward() / devices
    assert report.phases["update"].flops == 2 * PARAMS  # replicated: every device updates every parameter
    assert any(f"sharded over {devices} devices" in note for note in report.notes)


def test_a_tensor_parallel_steps_memory_and_update_are_one_devices():
    # a pure-JAX step (jax-llm-examples' form) whose parameters carry their shardings over a mesh of 2 on "y":
    # w1 (D x F) split by columns, w2sh (F x D) by rows, w2 (D x D) replicated. One device holds
    # D F / 2 + F D / 2 + D D parameters; Adam's moments follow them; the replicated x is whole on each.
    # Its update runs Adam's 13 a parameter over its own shards (a replicated parameter's whole).
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((2,), ("y",), axis_types=(AxisType.Explicit,))
    d, f, n = 64, 256, 8
    tx = optax.adam(1e-3)

    def loss_fn(params, x):
        h = jnp.einsum("nd,df->nf", x, params["w1"], out_sharding=P(None, "y"))
        h = jnp.einsum("nf,fd->nd", jnp.tanh(h), params["w2sh"], out_sharding=P(None, None))
        return (h @ params["w2"]).mean()

    @jax.jit
    def train_step(params, opt_state, x):
        loss, grads = jax.value_and_grad(loss_fn)(params, x)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def sds(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    params = {"w1": sds((d, f), P(None, "y")), "w2sh": sds((f, d), P("y", None)), "w2": sds((d, d), P())}
    with jax.set_mesh(mesh):
        opt_state = jax.eval_shape(tx.init, params)
        report = xla_cost.analyze_step(train_step, params, opt_state, sds((n, d), P()), memory=True)
    one_device = d * f // 2 + f * d // 2 + d * d
    memory = report.memory_breakdown
    assert memory.parameters == memory.gradients == 4 * one_device
    assert memory.optimizer_state == 2 * 4 * one_device + 4  # mu, nu and Adam's int32 count
    assert memory.inputs == 4 * n * d
    assert memory.argument_bytes == memory.parameters + memory.optimizer_state + memory.inputs
    assert 13 * one_device <= report.phases["update"].flops <= 13 * one_device + 8


def test_timed_runs_the_compiled_step():
    report = xla_cost.analyze_step(jax.jit(plain_step, donate_argnums=0), _state(optax.sgd(0.1)), BATCH,
                                   timed=True)
    run = report.timing.phases["train_step"]
    assert run.median_s > 0 and run.repeats >= 5 and run.low_s <= run.median_s <= run.high_s


def test_a_tied_heads_transposed_embedding_is_the_parameter_not_a_saved_activation():
    # embed.attend(x) multiplies by the embedding's transpose: a view of a parameter, read in place by the dot
    # (analyze leaves it out by the same rule), never a V x D activation kept for the backward pass
    vocab, width, tokens = 256, 32, (2, 8)
    n = tokens[0] * tokens[1]

    class Tied(nn.Module):
        @nn.compact
        def __call__(self, ids):
            embed = nn.Embed(vocab, width, name="embed")
            return embed.attend(jnp.tanh(embed(ids)))

    model = Tied()
    ids = jax.ShapeDtypeStruct(tokens, jnp.int32)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), ids)["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.1))

    memory = xla_cost.analyze_step(plain_step, state, {"x": ids, "y": ids}, memory=True).memory_breakdown
    # the gather's clamped ids (n int32), tanh's output (n x width: the head's weight gradient and tanh's
    # derivative read it), the loss's as in the test above: exp(logits - max) (n x vocab), their sum and its
    # absolute value (n each), the labels as gather indices (n)
    assert memory.saved_activations == 4 * (n + n * width + n * vocab + 2 * n + n)  # 18688


def test_a_batch_given_split_into_micro_batches_is_all_of_their_samples():
    # the data loader hands the step (micro, B / micro, ...) arrays that it scans over: a step's batch is
    # micro x B / micro = B samples, not micro
    micro = 4

    def step(state, x, y):
        def accumulate(total, mb):
            grads = jax.grad(lambda p: _loss(state.apply_fn({"params": p}, mb[0]), mb[1]))(state.params)
            return jax.tree.map(jnp.add, total, grads), None

        grads, _ = lax.scan(accumulate, jax.tree.map(jnp.zeros_like, state.params), (x, y))
        return state.apply_gradients(grads=jax.tree.map(lambda g: g / micro, grads))

    x = jax.ShapeDtypeStruct((micro, B // micro, IN), jnp.float32)
    y = jax.ShapeDtypeStruct((micro, B // micro), jnp.int32)
    assert xla_cost.analyze_step(step, _state(optax.sgd(0.1)), x, y, counter="jaxpr").batch_size == B


def test_a_step_accumulating_over_micro_batches_keeps_one_micro_batchs_activations():
    # the forward and backward passes inside a lax.scan over M micro-batches: each iteration keeps its own
    # activations for its backward pass and lets them go before the next, so the step keeps one micro-batch's,
    # the closed form of test_bare_and_jitted_with_donation_give_the_same_figures at B / M (was: 0)
    micro = 2
    b = B // micro

    def accumulating(state, batch):
        def body(total, chunk):
            loss, grads = jax.value_and_grad(
                lambda p: _loss(state.apply_fn({"params": p}, chunk["x"]), chunk["y"]))(state.params)
            return jax.tree.map(jnp.add, total, grads), loss

        chunks = jax.tree.map(lambda a: a.reshape(micro, b, *a.shape[1:]), batch)
        grads, losses = lax.scan(body, jax.tree.map(jnp.zeros_like, state.params), chunks)
        return state.apply_gradients(grads=jax.tree.map(lambda g: g / micro, grads)), losses.mean()

    memory = xla_cost.analyze_step(jax.jit(accumulating, donate_argnums=0), _state(optax.sgd(0.1)), BATCH,
                                   memory=True, counter="jaxpr").memory_breakdown
    assert memory.saved_activations == 4 * (2 * b * HIDDEN + b * CLASSES + 2 * b + b)  # 8608 at b = 8


def test_a_masks_fill_is_no_saved_activation():
    # a scanned remat'd block masks its scores with finfo.min: under a policy that saves the products, the
    # backward loop recomputes the mask from a fill broadcast once outside it, a scalar XLA fuses or sinks into
    # the loop (no buffer; an attention mask's fill is B x heads x T x T): not saved, as analyze leaves it out
    layers, d = 2, 16

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            h = nn.Dense(d)(x)
            h = jnp.where(h > 0, h, jnp.finfo(jnp.float32).min)
            return jnp.tanh(jax.nn.logsumexp(h, axis=-1, keepdims=True) + h), None

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            block = nn.remat(Block, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
            x, _ = nn.scan(block, variable_axes={"params": 0}, split_rngs={"params": True}, length=layers)(
                name="layers")(x, None)
            return nn.Dense(CLASSES)(x)

    model = Net()
    x = jax.ShapeDtypeStruct((B, d), jnp.float32)
    params = jax.eval_shape(model.init, jax.random.key(0), x)["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.1))

    batch = {"x": x, "y": jax.ShapeDtypeStruct((B,), jnp.int32)}
    memory = xla_cost.analyze_step(plain_step, state, batch, memory=True, counter="jaxpr").memory_breakdown
    # the policy keeps each layer's product (L x B x d) and the loop stacks each layer's input for its weight
    # gradient (L x B x d); the head keeps its input (B x d); the loss as above
    kept = 2 * layers * B * d + B * d
    assert memory.saved_activations == 4 * (kept + B * CLASSES + 2 * B + B)


def test_a_step_that_takes_no_gradient_and_updates_nothing_says_no_optimizer():
    # a decode or evaluation step's header said "its own optimizer"
    d_in, d_out, b = 8, 16, 2

    def infer(params, x):
        return x @ params["w"]

    params = {"w": jax.ShapeDtypeStruct((d_in, d_out), jnp.float32)}
    report = xla_cost.analyze_step(infer, params, jax.ShapeDtypeStruct((b, d_in), jnp.float32), counter="jaxpr")
    assert report.phases["train_step"].flops == 2 * b * d_in * d_out  # the product alone
    assert report.optimizer == "no optimizer" and "no optimizer" in str(report).splitlines()[0]

    def train(params, x):
        g = jax.grad(lambda p: jnp.sum(infer(p, x)))(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, g)

    assert xla_cost.analyze_step(train, params, jax.ShapeDtypeStruct((b, d_in), jnp.float32),
                                 counter="jaxpr").optimizer == "its own optimizer"


def test_a_mixed_precision_step_has_analyzes_precision_note():
    # analyze notes a step computing in bfloat16 on float32 parameters, with its conversions; analyze_step did not
    b, d, e = 2, 8, 16

    def step(params, x):
        def loss(p):
            h = x.astype(jnp.bfloat16) @ p["w"].astype(jnp.bfloat16)
            return jnp.mean(h.astype(jnp.float32) ** 2)

        return jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.grad(loss)(params))

    params = {"w": jax.ShapeDtypeStruct((d, e), jnp.float32)}
    report = xla_cost.analyze_step(step, params, jax.ShapeDtypeStruct((b, d), jnp.float32), counter="jaxpr")
    # one convert an element: x, w and h in the forward, h's and w's cotangents in the backward
    converts = b * d + d * e + b * e + b * e + d * e
    [note] = [n for n in report.notes if n.startswith("mixed precision:")]
    assert "parameters float32, computation bfloat16" in note and f"({converts:,} in the train step's jaxpr)" in note


def test_a_step_that_makes_its_parameters_inside_itself_has_no_mixed_precision_note():
    """purejaxrl's train(rng) initialises its network inside the jit: no parameter is in the arguments,
    so their dtype is unknown, not different from the computation's (before: 'mixed precision:
    parameters unknown, computation float32; FLOP are the same arithmetic as in unknown ...' and a
    header 'float32 (parameters unknown)'); the 'no parameters found' note says what is missing."""
    d_in, d_out, b = 4, 4, 8

    def train(rng):
        model = nn.Dense(d_out)
        x = jnp.ones((b, d_in))
        params = model.init(rng, x)
        grads = jax.grad(lambda p: jnp.mean(model.apply(p, x) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    report = xla_cost.analyze_step(train, jax.random.PRNGKey(0), counter="jaxpr")
    assert not [n for n in report.notes if n.startswith("mixed precision") or "unknown plus" in n]
    assert report.param_dtype is None and report.dtype == "float32"
    header = str(report).splitlines()[0]
    # no dtype "unknown" given for the parameters; their count unknown, not 0 (unknown is not zero)
    assert header.count("unknown") == 1 and ", float32, parameters unknown (none in the arguments)," in header
    assert header.startswith("train() no batch in the arguments, ")  # its data made inside it too: not a batch of 0
    assert [n for n in report.notes if n.startswith("no parameters found in the arguments")]
    assert report.to_dict()["param_dtype"] is None


@pytest.mark.parametrize(("tx", "per_parameter"), [
    (optax.sgd(0.1), 2),  # -lr * g, p + u
    # docs/api.md: Adam's 13 FLOP per parameter, less the 4 on its moments that tx.init made zeros inside the
    # step (b1 * mu, b2 * nu and their adds: constants, folded); its count is a constant too (bias corrections folded)
    (optax.adam(1e-3), 13 - 4),
], ids=["sgd", "adam"])
def test_the_update_of_parameters_a_step_makes_inside_itself_is_the_update(tx, per_parameter):
    """A step that initialises its network and optimizer inside itself and returns the new parameters and
    optimizer state: no result matches an argument, yet they are the new state, not metrics (before: update
    0 FLOP, its work in other with 'a step checker: other holds ... that only the returned metrics read')."""
    d_in, d_out, b = 4, 4, 8
    model = nn.Dense(d_out, use_bias=False)  # (a bias made zeros inside the step would fold its update away)

    def train(rng):
        x = jnp.ones((b, d_in))
        params = model.init(rng, x)
        opt_state = tx.init(params)
        grads = jax.grad(lambda p: jnp.mean(model.apply(p, x) ** 2))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    report = xla_cost.analyze_step(train, jax.random.PRNGKey(0), counter="jaxpr")
    assert report.phases["update"].jaxpr_flops == per_parameter * d_in * d_out
    assert not [n for n in report.notes if "metrics read" in n]
