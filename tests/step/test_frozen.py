"""Fine-tuning: an optimizer that freezes parameters never reads their gradients, so the step
computes none of them (`xla_cost.step.workload.unread_gradients`).

A body Dense(D -> H) and a head Dense(H -> C) on a batch of B rows, the body frozen by
``optax.multi_transform`` with ``set_to_zero`` (linear probing). The fused train step
computes only the head's gradients: XLA removes the body's weight gradient (2 B D H) and the
head's input gradient (2 B H C) that only it needs. The grad phase, compiled alone, must
count the same work, and the memory breakdown holds only the head's gradients.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest

import xla_cost

B, D, H, C = 8, 64, 256, 10
F32 = 4


class Probe(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(C, name="head")(nn.relu(nn.Dense(H, name="body")(x)))


def _labels(params):
    return {k: jax.tree.map(lambda _: "train" if k == "head" else "freeze", v) for k, v in params.items()}


FROZEN_BODY = optax.multi_transform({"train": optax.adam(1e-3), "freeze": optax.set_to_zero()}, _labels)
X = jax.ShapeDtypeStruct((B, D), jnp.float32)


def _optax_step(module: type[nn.Module], tx: optax.GradientTransformation):
    """A step as optax's docs write one: the squared error's gradient of ``module``'s parameters, ``tx``'s update."""
    def train_step(params, opt_state, x, y):
        grads = jax.grad(lambda p: jnp.mean((module().apply({"params": p}, x) - y) ** 2))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return train_step


@pytest.fixture(scope="module")
def frozen():
    return xla_cost.analyze(Probe(), X, optimizer=FROZEN_BODY, per_layer=True, memory=True)


def test_the_frozen_body_has_no_backward_work_and_the_head_only_its_parameter_gradients(frozen):
    rows = frozen.layers_frame()
    assert rows.loc["body", "backward_flops"] == 0
    # the head's kernel gradient h^T g (2 B H C) and its bias gradient, the column sums of g ((B - 1) C);
    # not its input gradient g W^T (2 B H C), which only the frozen body would read
    assert rows.loc["head", "backward_flops"] == 2 * B * H * C + (B - 1) * C


def test_grad_plus_update_is_the_fused_step(frozen):
    fused = xla_cost.analyze(Probe(), X, optimizer=FROZEN_BODY, exact_train_step=True)
    derived = frozen.phases["grad"].flops + frozen.phases["update"].flops
    assert derived == pytest.approx(fused.phases["train_step"].flops, rel=1e-5)


def test_the_memory_holds_the_head_gradients_only_and_a_note_names_the_frozen_parameters(frozen):
    assert frozen.memory_breakdown.gradients == F32 * (H * C + C)
    assert frozen.memory_breakdown.parameters == F32 * (D * H + H + H * C + C)
    note = next(n for n in frozen.notes if n.startswith("frozen by the optimizer"))
    assert f"{D * H + H:,} parameters: body/bias, body/kernel" in note


def test_an_optimizer_that_reads_every_gradient_keeps_them_all():
    # optax.masked applies the unmasked gradients raw (it reads them): nothing is frozen
    masked = optax.masked(optax.adam(1e-3), lambda p: {k: jax.tree.map(lambda _: k == "head", v)
                                                        for k, v in p.items()})
    report = xla_cost.analyze(Probe(), X, optimizer=masked, per_layer=True)
    assert not any(n.startswith("frozen by the optimizer") for n in report.notes)
    # the body's kernel gradient x^T g (2 B D H) and its bias gradient ((B - 1) H) at least
    assert report.layers_frame().loc["body", "backward_flops"] >= 2 * B * D * H + (B - 1) * H


@pytest.mark.parametrize("names", [("kernel", "bias"), ("w", "b")])
def test_a_step_given_its_frozen_weights_apart_reads_the_batch_from_its_inputs(names):
    # train_step(head, body, opt_state, x, y): only the head is differentiated; the frozen body's arrays
    # (a D x H kernel and an H bias: leading dimensions D and H) hold no differentiated parameter, as x
    # and y do not, but only x and y share a leading dimension: the batch, B. Keyed as the head's are, the
    # body's leaves mirror its parameters' paths; keyed w and b, nothing marks them but their shapes
    weight, shift = names

    def train_step(head, body, opt_state, x, y):
        def loss(head):
            hidden = nn.relu(x @ body[weight] + body[shift][None])
            return jnp.mean((hidden @ head["kernel"] + head["bias"][None] - y) ** 2)

        grads = jax.grad(loss)(head)
        updates, opt_state = optax.sgd(0.1).update(grads, opt_state, head)
        return optax.apply_updates(head, updates), opt_state

    head = {"kernel": jax.ShapeDtypeStruct((H, C), jnp.float32), "bias": jax.ShapeDtypeStruct((C,), jnp.float32)}
    body = {weight: jax.ShapeDtypeStruct((D, H), jnp.float32), shift: jax.ShapeDtypeStruct((H,), jnp.float32)}
    report = xla_cost.analyze_step(train_step, head, body, optax.sgd(0.1).init(head), X,
                                   jax.ShapeDtypeStruct((B, C), jnp.float32))
    assert report.batch_size == B


def test_an_nnx_step_given_an_ema_state_reads_the_batch_and_its_bytes_as_inputs():
    from flax import nnx

    class Mlp(nnx.Module):
        def __init__(self, rngs):
            self.body, self.head = nnx.Linear(D, H, rngs=rngs), nnx.Linear(H, C, rngs=rngs)

        def __call__(self, x):
            return self.head(nnx.relu(self.body(x)))

    @nnx.jit
    def step(model, optimizer, ema, batch):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(batch["x"]) - batch["y"]) ** 2))(model)
        optimizer.update(model, grads)
        return loss, optax.incremental_update(nnx.state(model, nnx.Param), ema, 1e-3)

    model = nnx.eval_shape(lambda: Mlp(nnx.Rngs(0)))
    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(Mlp(nnx.Rngs(0)), optax.adam(1e-3), wrt=nnx.Param))
    ema = jax.eval_shape(lambda: nnx.state(Mlp(nnx.Rngs(0)), nnx.Param))
    batch = {"x": X, "y": jax.ShapeDtypeStruct((B, C), jnp.float32)}
    report = xla_cost.analyze_step(step, model, optimizer, ema, batch, memory=True)
    # the EMA's arrays (body/bias of H, body/kernel of D x H, ...) are not the batch: x and y are, B rows
    assert report.batch_size == B
    assert report.memory_breakdown.inputs == F32 * (B * D + B * C)
    # one gradient a parameter: the EMA's copies of them get none; and the EMA is no second set of
    # parameters: its P = D H + H + H C + C floats are model state the step keeps
    assert report.memory_breakdown.gradients == F32 * (D * H + H + H * C + C)
    assert report.memory_breakdown.parameters == F32 * (D * H + H + H * C + C)
    assert report.memory_breakdown.model_state == F32 * (D * H + H + H * C + C)
    # the EMA returned is state fed back, not a metric: its 3 FLOP a parameter ((1 - a) e + a p) are the
    # update's, and no note calls them metrics to log every N steps
    assert not any("returned metrics read" in n for n in report.notes)
    assert report.phases["other"].flops < 3 * (D * H + H + H * C + C)


def test_a_linen_steps_ema_passed_beside_its_train_state_is_model_state_not_parameters():
    # step(state, ema_params, batch): the EMA mirrors state.params (same modules, names and shapes); the
    # parameters are counted once, P = D H + H + H C + C floats, and the copy as model state, with the
    # TrainState's step counter (one int32)
    from flax.training import train_state

    params = jax.eval_shape(Probe().init, jax.random.key(0), X)["params"]
    state = jax.eval_shape(lambda p: train_state.TrainState.create(apply_fn=Probe().apply, params=p,
                                                                   tx=optax.adam(1e-3)), params)

    def step(state, ema, x, y):
        grads = jax.grad(lambda p: jnp.mean((state.apply_fn({"params": p}, x) - y) ** 2))(state.params)
        state = state.apply_gradients(grads=grads)
        return state, optax.incremental_update(state.params, ema, 1e-3)

    report = xla_cost.analyze_step(step, state, params, X, jax.ShapeDtypeStruct((B, C), jnp.float32), memory=True)
    parameters = D * H + H + H * C + C
    assert report.memory_breakdown.parameters == F32 * parameters
    assert report.memory_breakdown.model_state == F32 * parameters + 4
    assert report.memory_breakdown.gradients == F32 * parameters


def test_a_linen_step_with_a_freezing_optimizer_holds_only_the_gradients_it_makes():
    # jax.grad of every parameter, the body's then dropped by set_to_zero: XLA removes its gradient's
    # computation, so the step holds the head's gradients alone
    train_step = _optax_step(Probe, FROZEN_BODY)

    params = jax.eval_shape(Probe().init, jax.random.key(0), X)["params"]
    report = xla_cost.analyze_step(train_step, params, FROZEN_BODY.init(params), X,
                                   jax.ShapeDtypeStruct((B, C), jnp.float32), memory=True)
    assert report.memory_breakdown.parameters == F32 * (D * H + H + H * C + C)
    assert report.memory_breakdown.gradients == F32 * (H * C + C)
    # the header's count is every parameter; a note says how many are trained
    assert report.parameters == D * H + H + H * C + C
    assert (f"trained parameters: {H * C + C:,} of the {D * H + H + H * C + C:,} (the backward pass makes "
            f"gradients for those alone; {D * H + H:,} frozen)") in report.notes


FREEZE_AFTER_ADAM = optax.chain(optax.adam(0.1), optax.transforms.freeze({"body": True, "head": False}))


@pytest.mark.parametrize("named", [False, True])
def test_freezing_after_adam_trains_every_parameter_whatever_the_arguments_are_named(named):
    # optax's freezing notebook (cell 5): chain(adam, freeze(mask)) and a step written train_step(p, s). Adam
    # reads every gradient (its moments of the body keep moving), freeze zeroes the body's updates: the body's new
    # value is p + 0, from no gradient, so the data flow took only the head for the parameters (H C + C of them),
    # the body "model state", and the step checker said the optimizer state held 8.5x the parameters. Named
    # params, it read all of them: the parameters must not depend on the argument's name (docs/api.md)
    def train_step(p, s):
        grads = jax.grad(lambda q: jnp.mean(Probe().apply({"params": q}, jnp.ones((B, D))) ** 2))(p)
        updates, s = FREEZE_AFTER_ADAM.update(grads, s, p)
        return optax.apply_updates(p, updates), s

    def named_step(params, s):
        return train_step(params, s)

    params = jax.eval_shape(Probe().init, jax.random.key(0), X)["params"]
    every = D * H + H + H * C + C
    report = xla_cost.analyze_step(named_step if named else train_step, params, FREEZE_AFTER_ADAM.init(params),
                                   counter="jaxpr", memory=True)
    assert report.parameters == every
    assert report.trained_parameters is None  # every gradient is made and read (Adam's moments): none frozen
    memory = report.memory_breakdown
    assert memory.parameters == memory.gradients == F32 * every
    assert memory.optimizer_state == 2 * F32 * every + 4  # Adam's mu, nu and int32 count; freeze keeps nothing
    assert memory.model_state == 0
    assert not any("the optimizer state holds" in n for n in report.notes)  # 2.0x: Adam's two moments
    # the backward pass is whole: the body's kernel gradient x^T g (2 B D H) among it
    assert report.phases["backward"].flops >= 2 * B * D * H + 2 * B * H * C


def test_analyze_with_freezing_after_adam_trains_every_parameter_as_analyze_step_does():
    # analyze's trained parameters are those whose gradients the optimizer reads: Adam reads the body's before
    # freeze zeroes its updates, so none is frozen (no note, the backward whole), as analyze_step says above
    report = xla_cost.analyze(Probe(), X, optimizer=FREEZE_AFTER_ADAM, counter="jaxpr")
    assert report.trained_parameters is None
    assert not any(n.startswith("frozen by the optimizer") for n in report.notes)
    assert report.phases["backward"].flops >= 2 * B * D * H + 2 * B * H * C


def test_the_optimizers_rule_on_a_stop_gradient_layers_zeros_is_the_update():
    # the body frozen by stop_gradient, every parameter given to Adam: its rule still runs on the body's
    # zero gradients (moments decayed, the parameters rewritten), which is update work, not other
    class Stopped(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(C, name="head")(jax.lax.stop_gradient(nn.relu(nn.Dense(H, name="body")(x))))

    tx = optax.adam(1e-3)

    train_step = _optax_step(Stopped, tx)

    params = jax.eval_shape(Stopped().init, jax.random.key(0), X)["params"]
    report = xla_cost.analyze_step(train_step, params, tx.init(params), X, jax.ShapeDtypeStruct((B, C), jnp.float32),
                                   counter="jaxpr")
    body = D * H + H
    assert report.phases["other"].flops < body  # not one operation a body parameter
    assert report.phases["update"].flops > body + 2 * (H * C + C)  # the head's rule and at least one on the body's


def test_a_step_computing_in_bfloat16_of_float32_parameters_says_so():
    # mixed precision as fine-tuning code writes it: float32 parameters, the products in bfloat16
    def train_step(params, x, y):
        def loss(p):
            h = jnp.dot(x.astype(jnp.bfloat16), p["w"].astype(jnp.bfloat16))
            return jnp.mean((h.astype(jnp.float32) - y) ** 2)

        return jax.tree.map(lambda p, g: p - 0.1 * g, params, jax.grad(loss)(params))

    params = {"w": jax.ShapeDtypeStruct((D, C), jnp.float32)}
    report = xla_cost.analyze_step(train_step, params, X, jax.ShapeDtypeStruct((B, C), jnp.float32),
                                   counter="jaxpr")
    assert (report.dtype, report.param_dtype) == ("bfloat16", "float32")


def test_adams_moments_kept_in_bfloat16_are_not_the_parameters_dtype():
    # optax.adam(mu_dtype=bfloat16), as big_vision's ViT configs set it: the first moment is bfloat16, every
    # parameter float32; the parameters' dtype is float32, and the moment's bytes are the optimizer state's:
    # P floats of 2 bytes (mu), P of 4 (nu) and Adam's int32 count, P = D H + H + H C + C
    tx = optax.adam(1e-3, mu_dtype=jnp.bfloat16)

    train_step = _optax_step(Probe, tx)

    params = jax.eval_shape(Probe().init, jax.random.key(0), X)["params"]
    report = xla_cost.analyze_step(train_step, params, tx.init(params), X, jax.ShapeDtypeStruct((B, C), jnp.float32),
                                   counter="jaxpr", memory=True)
    parameters = D * H + H + H * C + C
    assert report.param_dtype == "float32"
    assert report.memory_breakdown.optimizer_state == 2 * parameters + F32 * parameters + 4


def test_the_updates_flop_per_parameter_is_over_the_trained_parameters(frozen):
    # Adam on the head alone (H C + C parameters), set_to_zero on the body: 13 FLOP a trained parameter (and
    # Adam's counter's few), not 13 (H C + C) spread over every parameter; the report says how many it trains
    from xla_cost.analysis.report_tables import flop_per_parameter

    head = H * C + C
    assert frozen.trained_parameters == head
    assert 13 <= flop_per_parameter(frozen, "update") < 13 + 16 / head
    assert xla_cost.Report.from_dict(frozen.to_dict()).trained_parameters == head
    # a step whose backward pass grades the head alone says the same
    train_step = _optax_step(Probe, FROZEN_BODY)

    params = jax.eval_shape(Probe().init, jax.random.key(0), X)["params"]
    step = xla_cost.analyze_step(train_step, params, FROZEN_BODY.init(params), X,
                                 jax.ShapeDtypeStruct((B, C), jnp.float32), counter="jaxpr")
    assert step.trained_parameters == head
    assert 13 <= flop_per_parameter(step, "update") < 13 + 16 / head


def test_an_ema_kept_in_a_second_train_state_is_counted_once():
    # kvfrans/jax-diffusion-transformer keeps its EMA as a second TrainState's params beside the trained one:
    # the model has P = D H + H + H C + C parameters, all trained; the EMA's copy is no second set, frozen or not
    import flax
    from typing import Any

    class Holder(flax.struct.PyTreeNode):
        params: Any
        opt_state: Any

    class Trainer(flax.struct.PyTreeNode):
        model: Holder
        model_eps: Holder

    tx = optax.adam(1e-3)
    params = jax.eval_shape(Probe().init, jax.random.key(0), X)["params"]
    trainer = Trainer(Holder(params, jax.eval_shape(tx.init, params)), Holder(params, None))

    def update(trainer, x, y):
        grads = jax.grad(lambda p: jnp.mean((Probe().apply({"params": p}, x) - y) ** 2))(trainer.model.params)
        updates, opt_state = tx.update(grads, trainer.model.opt_state, trainer.model.params)
        new = optax.apply_updates(trainer.model.params, updates)
        ema = jax.tree.map(lambda p, e: 1e-4 * p + (1 - 1e-4) * e, new, trainer.model_eps.params)
        return trainer.replace(model=Holder(new, opt_state), model_eps=Holder(ema, None))

    report = xla_cost.analyze_step(update, trainer, X, jax.ShapeDtypeStruct((B, C), jnp.float32), memory=True,
                                   counter="jaxpr")
    parameters = D * H + H + H * C + C
    assert report.parameters == parameters and report.trained_parameters is None
    assert not [n for n in report.notes if n.startswith("trained parameters")]
    assert report.memory_breakdown.parameters == F32 * parameters


@pytest.mark.parametrize("axis", [0, 1])
def test_layers_stacked_on_any_axis_get_their_gradients(axis):
    # MaxText's NNX scan (param_scan_axis=1) stacks a block's kernels on axis 1, moves it to 0 and scans one
    # layer's slice: its backward makes the (D, H) and (H, D) slices of the (D, L, H) and (H, L, D) stacks
    from flax import nnx

    L = 2

    class Block(nnx.Module):
        def __init__(self, layer):
            self.wi = nnx.Param(jnp.zeros((D, H)))
            self.wo = nnx.Param(jnp.zeros((H, D)))

        def __call__(self, h):
            return h + jax.nn.relu(h @ self.wi[...]) @ self.wo[...]

    class Stack(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.vmap(Block, in_axes=0, out_axes=axis)(jnp.arange(L))
            self.head = nnx.Linear(D, C, rngs=rngs)

        def __call__(self, x):
            graph, params = nnx.split(self.layers, nnx.Param)
            params = jax.tree.map(lambda p: jnp.moveaxis(p, axis, 0), params)
            h, _ = jax.lax.scan(lambda h, p: (nnx.merge(graph, p)(h), None), x, params)
            return self.head(h)

    def make():
        model = Stack(nnx.Rngs(0))
        return model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    graph, state = nnx.split(nnx.eval_shape(make))

    def train_step(state, x, y):
        model, optimizer = nnx.merge(graph, state)
        grads = nnx.grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer))

    report = xla_cost.analyze_step(train_step, state, X, jax.ShapeDtypeStruct((B, C), jnp.float32), memory=True,
                                   per_layer=True)
    parameters = L * (D * H + H * D) + D * C + C  # the stacks' kernels and the head's
    assert report.parameters == parameters and report.trained_parameters is None
    assert not any("receive no gradient" in n for n in report.notes)
    assert report.memory_breakdown.gradients == F32 * parameters


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_a_frozen_parameters_update_is_no_work_in_bfloat16_as_in_float32(dtype):
    # set_to_zero's update of a frozen parameter p is `p + 0`, which XLA's program returns as p (in bfloat16 too,
    # whose literal 0 has NumPy kind 'V'); SGD on the T trained ones: -lr g (a multiply) and p + u (an add), 2 T
    frozen, trained = 1000, 10
    params = {"frozen": jax.ShapeDtypeStruct((frozen,), dtype), "trained": jax.ShapeDtypeStruct((trained,), dtype)}
    tx = optax.multi_transform({"train": optax.sgd(1e-3), "freeze": optax.set_to_zero()},
                               {"frozen": "freeze", "trained": "train"})

    def train_step(params, opt_state, x):
        grads = jax.grad(lambda p: jnp.sum(p["frozen"] * x) + jnp.sum(p["trained"] * x[:trained]))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    step = xla_cost.analyze_step(train_step, params, jax.eval_shape(tx.init, params),
                                 jax.ShapeDtypeStruct((frozen,), dtype), counter="jaxpr")
    assert step.phases["update"].flops == 2 * trained


def _two_layer_nnx_step(stopped: bool):
    """An NNX model of two Linear(D, D) layers (no bias) under AdamW, the second unused or under stop_gradient."""
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.used, self.unused = nnx.Linear(D, D, use_bias=False, rngs=rngs), nnx.Linear(D, D, use_bias=False,
                                                                                             rngs=rngs)

        def __call__(self, x):
            return self.used(x) + jax.lax.stop_gradient(self.unused(x)) if stopped else self.used(x)

    @nnx.jit
    def train_step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lambda m: optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean())(
            model)
        optimizer.update(model, grads)
        return loss

    model = nnx.eval_shape(lambda: Net(nnx.Rngs(0)))
    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(Net(nnx.Rngs(0)), optax.adamw(1e-3), wrt=nnx.Param))
    return xla_cost.analyze_step(train_step, model, optimizer, X, jax.ShapeDtypeStruct((B,), jnp.int32),
                                 counter="jaxpr", memory=True)


def test_an_unused_modules_parameters_get_no_gradient_and_are_said_so():
    # Gemma3 run text-only leaves its vision tower unused: no name stack shows it, so it went unjudged (no note,
    # its gradients counted in memory); it is the stop_gradient case's: D D of the 2 D D parameters trained
    report = _two_layer_nnx_step(stopped=False)
    assert any("receive no gradient: unused/kernel:" in n for n in report.notes)
    assert report.trained_parameters == D * D
    assert report.memory_breakdown.gradients == F32 * D * D


def test_the_updates_flop_per_parameter_is_over_every_parameter_adam_runs_on():
    # AdamW runs on the frozen layer's zero gradients as on the trained one's: the update's FLOP over the 2 D D
    # parameters it updates (about 12.5 each), not over the D D it trains (twice as many, 25)
    from xla_cost.analysis.report_tables import flop_per_parameter

    for stopped in (True, False):
        report = _two_layer_nnx_step(stopped)
        assert (report.trained_parameters, report.updated_parameters) == (D * D, 2 * D * D)
        assert flop_per_parameter(report, "update") == report.phases["update"].flops / (2 * D * D)
        assert any("the optimizer still updates" in n and f"{2 * D * D:,}" in n for n in report.notes)
        assert xla_cost.Report.from_dict(report.to_dict()).updated_parameters == 2 * D * D


def test_analyze_trains_only_what_the_loss_reads_and_names_the_unread_parameters_as_analyze_step_does():
    # a tied Gemma3 keeps an unused lm_head; a DETR analysed on pred_logits leaves its box head dead. The loss
    # reads the used layer's D D weights alone: D D trained, the unused layer's D D get zero gradients that AdamW
    # still applies (2 D D updated), said with analyze_step's notes
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.used, self.unused = nnx.Linear(D, C, use_bias=False, rngs=rngs), nnx.Linear(D, D, rngs=rngs)

        def __call__(self, x):
            return self.used(x)

    report = xla_cost.analyze(nnx.eval_shape(lambda: Net(nnx.Rngs(0))), X, optimizer="adamw", counter="jaxpr")
    assert report.parameters == D * C + D * D + D
    assert (report.trained_parameters, report.updated_parameters) == (D * C, D * C + D * D + D)
    assert any("receive no gradient: unused/bias, unused/kernel:" in n and "zeros the optimizer still applies" in n
               for n in report.notes)
    assert any(n.startswith(f"trained parameters: {D * C:,} of the {D * C + D * D + D:,}")
               and "the optimizer still updates" in n for n in report.notes)


def test_a_noise_schedule_passed_as_params_is_not_trained_and_its_integers_no_parameters():
    # maxdiffusion's _train_step(state, batch, rng, params={"scheduler": ...}): the schedule's tables are read
    # outside the loss. Its int32 timesteps (S) can have no gradient: no parameter; its float32 table (S) gets
    # none: not trained, and never returned, so not said to have zeros applied. Trained: the D x C weight.
    from flax.training import train_state

    S = 100

    def step(state, x, rng, params):
        a = params["scheduler"]["alphas_cumprod"][jax.random.randint(rng, (B,), 0, S)][:, None]
        loss = lambda p: jnp.mean((a * x @ p["w"]) ** 2)  # noqa: E731
        return state.apply_gradients(grads=jax.grad(loss)(state.params))

    tx = optax.adamw(1e-3)
    state = jax.eval_shape(lambda: train_state.TrainState.create(apply_fn=None, params={"w": jnp.zeros((D, C))},
                                                                 tx=tx))
    sched = {"scheduler": {"alphas_cumprod": jax.ShapeDtypeStruct((S,), jnp.float32),
                           "timesteps": jax.ShapeDtypeStruct((S,), jnp.int32)}}
    report = xla_cost.analyze_step(jax.jit(step), state, X, jax.ShapeDtypeStruct((2,), jnp.uint32), params=sched,
                                   counter="jaxpr", memory=True)
    assert report.parameters == D * C + S
    assert report.trained_parameters == D * C and report.updated_parameters is None
    assert report.memory_breakdown.gradients == F32 * D * C
    assert not any("receive no gradient" in n for n in report.notes)


def test_int8_weights_read_as_weights_are_quantized_parameters_an_index_table_is_not():
    # jax-llm-examples' QuantArray: an int8 weight and its float scale. The fc1 weight goes into the product
    # converted; the embedding's int8 rows are multiplied by their scale; an int32 table of lengths only masks.
    # Were 8-bit weights no parameter (no gradient): only the scales and fc2 counted, the int8 bytes state.
    V, T = 32, 4
    i8 = lambda *s: jax.ShapeDtypeStruct(s, jnp.int8)  # noqa: E731
    f32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)  # noqa: E731
    params = {"embed": {"quant": i8(V, D), "scale": f32(D)}, "fc1": {"quant": i8(D, H), "scale": f32(H)},
              "fc2": {"w": f32(H, C)}, "lengths": jax.ShapeDtypeStruct((B,), jnp.int32)}

    def prefill(params, tokens):
        x = params["embed"]["quant"][tokens].astype(jnp.float32) * params["embed"]["scale"][None, None, :]
        x = jnp.where(jnp.arange(T)[None, :, None] < params["lengths"][:, None, None], x, 0.0)
        h = (x @ params["fc1"]["quant"].astype(jnp.float32)) * params["fc1"]["scale"][None, None, :]
        return jax.nn.relu(h) @ params["fc2"]["w"]

    report = xla_cost.analyze_step(prefill, params, jax.ShapeDtypeStruct((B, T), jnp.int32), counter="jaxpr",
                                   memory=True)
    int8 = V * D + D * H  # the embedding's and fc1's int8 values
    assert report.parameters == int8 + D + H + H * C  # with the two scales and fc2, not the B lengths
    assert report.memory_breakdown.parameters == 1 * int8 + F32 * (D + H + H * C)  # int8: one byte each
    assert report.memory_breakdown.model_state == 4 * B  # the int32 lengths
    (note,) = [n for n in report.notes if n.startswith("quantized parameters")]
    assert f"{int8:,} of them int8 (quantized)" in note


def test_an_nnx_models_int8_param_read_as_a_weight_is_a_parameter_its_index_table_is_not():
    # The same in NNX: an int8 nnx.Param weight converted into the product, its float scale, a head; an
    # int32 nnx.Param table of lengths only masks, a step counter is a Variable. Was: every Param counted,
    # the table too (D H + H + H C + C + B), and no note; xla_cost.analyze refuses integer Params in one line.
    from flax import nnx

    class QuantNet(nnx.Module):
        def __init__(self, rngs):
            self.quant = nnx.Param(jnp.zeros((D, H), jnp.int8))
            self.scale = nnx.Param(jnp.ones((H,), jnp.float32))
            self.lengths = nnx.Param(jnp.zeros((B,), jnp.int32))
            self.count = nnx.Variable(jnp.zeros((), jnp.int32))
            self.head = nnx.Linear(H, C, rngs=rngs)

        def __call__(self, x):
            self.count[...] += 1
            h = (x @ self.quant[...].astype(jnp.float32)) * self.scale[...][None, :]
            h = jnp.where(jnp.arange(B)[:, None] < self.lengths[...][:, None], jax.nn.relu(h), 0.0)
            return self.head(h)

    model = nnx.eval_shape(lambda: QuantNet(nnx.Rngs(0)))
    report = xla_cost.analyze_step(nnx.jit(lambda m, x: m(x)), model, X, counter="jaxpr", memory=True)
    int8 = D * H  # the quantized weight's values
    assert report.parameters == int8 + H + H * C + C  # with its scale and the head, not the B lengths
    assert report.memory_breakdown.parameters == 1 * int8 + F32 * (H + H * C + C)  # int8: one byte each
    assert report.memory_breakdown.model_state == 4 * B + 4  # the int32 lengths and the int32 counter
    (note,) = [n for n in report.notes if n.startswith("quantized parameters")]
    assert f"{int8:,} of them int8 (quantized)" in note
    with pytest.raises(xla_cost.InputError, match="floating-point parameters"):
        xla_cost.analyze(model, X, optimizer="sgd", loss=lambda y, _: jnp.mean(y ** 2), targets=X, counter="jaxpr")


def _int8_head_step(kind: str):
    """A float32 body Linear(D, H) and a head of an int8 kernel (H, C) with its float32 per-channel scale (C),
    dequantized in the call, trained by Adam on the float parameters alone (an int8 array takes no gradient):
    NNX as its users write it (nnx.Optimizer and nnx.value_and_grad with a floating-Param filter), or a plain
    jax step on a params dict."""
    if kind == "nnx":
        from flax import nnx

        class QuantLinear(nnx.Module):
            def __init__(self):
                self.kernel = nnx.Param(jnp.zeros((H, C), jnp.int8))
                self.scale = nnx.Param(jnp.ones((C,), jnp.float32))

            def __call__(self, x):
                return (x @ self.kernel[...].astype(jnp.float32)) * self.scale[...][None, :]

        class Net(nnx.Module):
            def __init__(self, rngs):
                self.body, self.head = nnx.Linear(D, H, rngs=rngs), QuantLinear()

            def __call__(self, x):
                return self.head(jax.nn.relu(self.body(x)))

        floating = nnx.All(nnx.Param, lambda _, v: jnp.issubdtype(v.dtype, jnp.floating))

        @nnx.jit
        def train_step(model, optimizer, x, y):
            loss_fn = lambda m: optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean()  # noqa: E731
            loss, grads = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, floating))(model)
            optimizer.update(model, grads)
            return loss

        model = nnx.eval_shape(lambda: Net(nnx.Rngs(0)))
        optimizer = nnx.eval_shape(lambda: nnx.Optimizer(Net(nnx.Rngs(0)), optax.adam(1e-3), wrt=floating))
        return xla_cost.analyze_step(train_step, model, optimizer, X, jax.ShapeDtypeStruct((B,), jnp.int32),
                                     counter="jaxpr", memory=True)
    f32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)  # noqa: E731
    params = {"body": {"w": f32(D, H), "b": f32(H)},
              "head": {"kernel": jax.ShapeDtypeStruct((H, C), jnp.int8), "scale": f32(C)}}
    tx = optax.adam(1e-3)

    def train_step(params, opt_state, x, y):
        def loss_fn(p):
            h = jax.nn.relu(x @ p["body"]["w"] + p["body"]["b"][None, :])
            logits = (h @ params["head"]["kernel"].astype(jnp.float32)) * p["head"]["scale"][None, :]
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        floats = {"body": params["body"], "head": {"scale": params["head"]["scale"]}}
        loss, grads = jax.value_and_grad(loss_fn)(floats)
        updates, opt_state = tx.update(grads, opt_state, floats)
        new = optax.apply_updates(floats, updates)
        return {"body": new["body"], "head": {**params["head"], "scale": new["head"]["scale"]}}, opt_state, loss

    opt_state = jax.eval_shape(lambda: tx.init({"body": params["body"], "head": {"scale": params["head"]["scale"]}}))
    return xla_cost.analyze_step(jax.jit(train_step), params, opt_state, X, jax.ShapeDtypeStruct((B,), jnp.int32),
                                 counter="jaxpr", memory=True)


@pytest.mark.parametrize("kind", ["nnx", "jax"])
def test_an_int8_weight_is_a_parameter_but_not_trained(kind):
    # An int8 kernel takes no gradient (jax: float0): a (quantized) parameter, but no gradient bytes and no part of
    # the trained parameters. Was: every parameter trained (trained_parameters None), gradients 4 D H + 4 H +
    # 1 H C + 4 C bytes, the int8 kernel's included; in NNX and in a plain jax step alike.
    report = _int8_head_step(kind)
    int8, trained = H * C, D * H + H + C  # the head's kernel; the body's weight and bias, the head's scale
    assert report.parameters == int8 + trained
    assert report.trained_parameters == trained and report.updated_parameters is None
    assert report.memory_breakdown.parameters == 1 * int8 + F32 * trained
    assert report.memory_breakdown.gradients == F32 * trained
    counts = 4 + 4 * (kind == "nnx")  # adam's int32 count (and nnx.Optimizer's uint32 step)
    assert report.memory_breakdown.optimizer_state == 2 * F32 * trained + counts  # mu and nu of the floats alone
    (note,) = [n for n in report.notes if n.startswith("quantized parameters")]
    assert f"{int8:,} of them int8 (quantized)" in note and "not trained" in note
    (said,) = [n for n in report.notes if n.startswith("trained parameters")]
    assert f"{trained:,} of the {int8 + trained:,}" in said and f"{int8:,} of them integer (quantized)" in said


def test_an_ema_beside_the_params_in_one_nnx_train_state_is_model_state_not_parameters():
    # openpi's TrainState: params and ema_params, two NNX states of one model, side by side; the step merges
    # params alone into the model and differentiates it, then updates the EMA from the new params. The
    # parameters are P = D H + H + H C + C, all trained (was: 2 P, P of them "frozen", "receive no
    # gradient" notes and ema_params/... rows); the EMA's P floats are model state, beside the step counter
    import dataclasses

    from flax import nnx, struct

    @struct.dataclass
    class TrainState:
        step: jax.Array
        params: nnx.State
        model_def: nnx.GraphDef = struct.field(pytree_node=False)
        opt_state: optax.OptState = None
        ema_params: nnx.State | None = None

    class Mlp(nnx.Module):
        def __init__(self, rngs):
            self.body, self.head = nnx.Linear(D, H, rngs=rngs), nnx.Linear(H, C, rngs=rngs)

        def __call__(self, x):
            return self.head(nnx.relu(self.body(x)))

    tx, decay = optax.sgd(0.1), 0.99

    def init():
        model = Mlp(nnx.Rngs(0))
        params = nnx.state(model)
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, model_def=nnx.graphdef(model),
                          opt_state=tx.init(params), ema_params=params)

    def train_step(state, x, y):
        model = nnx.merge(state.model_def, state.params)
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        ema = jax.tree.map(lambda old, new: decay * old + (1 - decay) * new, state.ema_params, params)
        return dataclasses.replace(state, step=state.step + 1, params=params, opt_state=opt_state,
                                   ema_params=ema), loss

    report = xla_cost.analyze_step(train_step, jax.eval_shape(init), X, jax.ShapeDtypeStruct((B, C), jnp.float32),
                                   per_layer=True, memory=True, counter="jaxpr")
    parameters = D * H + H + H * C + C
    assert report.parameters == parameters
    assert report.trained_parameters is None and report.updated_parameters is None
    assert not [n for n in report.notes if "no gradient" in n or n.startswith("trained parameters")]
    assert {row.path for row in report.layers} == {"body", "head", xla_cost.REMAINDER}
    # SGD's p - lr g (2 FLOP a parameter) and the EMA's a e + (1 - a) p (3) are the update
    assert report.phases["update"].jaxpr_flops == (2 + 3) * parameters
    assert report.memory_breakdown.parameters == F32 * parameters
    assert report.memory_breakdown.model_state == F32 * parameters + 4  # the EMA and the int32 step


@pytest.mark.parametrize("remat", [False, True])
def test_a_frozen_norm_scale_under_remat_is_not_trained(remat):
    # openpi's Gemma: RMSNorm's x * rsqrt(mean(x^2)) * (1 + scale), the scale frozen by a DiffState filter,
    # a Linear(D, D) beside it trained, the block under nnx.remat. The backward pass recomputes 1 + scale
    # (an array of the scale's shape) but makes it no gradient: D D + D trained of D D + 2 D, gradients
    # 4 (D D + D) bytes, as without remat (was, with remat: every parameter trained, 4 (D D + 2 D) bytes)
    import re

    from flax import nnx

    class Norm(nnx.Module):
        def __init__(self):
            self.scale = nnx.Param(jnp.zeros((D,), jnp.bfloat16))

        def __call__(self, x):
            return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * (1 + self.scale[...])[None]

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.norm, self.fc = Norm(), nnx.Linear(D, D, rngs=rngs)

        def __call__(self, x):
            return x + self.fc(self.norm(x))

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.block = Block(rngs)

        def __call__(self, x):
            run = nnx.remat(lambda block, x: block(x)) if remat else (lambda block, x: block(x))
            return jnp.mean(run(self.block, x) ** 2)

    trainable = nnx.All(nnx.Param, nnx.Not(lambda path, _: re.fullmatch(".*norm.*", "/".join(map(str, path)))
                                           is not None))
    graphdef, params = nnx.split(nnx.eval_shape(lambda: Model(nnx.Rngs(0))))
    tx = optax.adam(1e-3)

    def train_step(params, opt_state, x):
        model = nnx.merge(graphdef, params)
        loss, grads = nnx.value_and_grad(lambda m: m(x), argnums=nnx.DiffState(0, trainable))(model)
        updates, opt_state = tx.update(grads, opt_state, nnx.filter_state(params, trainable))
        nnx.update(model, optax.apply_updates(nnx.filter_state(params, trainable), updates))
        return nnx.state(model), opt_state, loss

    report = xla_cost.analyze_step(train_step, params, jax.eval_shape(tx.init, nnx.filter_state(params, trainable)), X,
                                   counter="jaxpr", memory=True)
    assert report.parameters == D * D + 2 * D
    assert report.trained_parameters == D * D + D
    assert report.memory_breakdown.gradients == F32 * (D * D + D)
    assert (f"trained parameters: {D * D + D:,} of the {D * D + 2 * D:,} (the backward pass makes gradients for "
            f"those alone; {D:,} frozen)") in report.notes


class _Mlp(nn.Module):
    out: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.out)(nn.relu(nn.Dense(H)(x)))


def _mlp_state(n_in, out, target=False):
    from flax.training.train_state import TrainState

    class WithTarget(TrainState):  # cleanrl's TD3: a target network's copy beside the params
        target_params: dict

    def make(key):
        model = _Mlp(out)
        params = model.init(key, jnp.ones((1, n_in)))
        if target:
            return WithTarget.create(apply_fn=model.apply, params=params, target_params=params, tx=optax.adam(1e-3))
        return TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-3))

    return jax.eval_shape(make, jax.random.key(0))


def _two_states_step(s1, s2, x, y):
    """Two TrainStates of one network class, each trained by its own gradient of one squared error."""
    def loss(p, s):
        return jnp.mean((s.apply_fn(p, x) - y) ** 2)
    return s1.apply_gradients(grads=jax.grad(loss)(s1.params, s1)), s2.apply_gradients(
        grads=jax.grad(loss)(s2.params, s2))


def test_two_train_states_of_one_network_class_are_two_sets_of_parameters():
    # TD3's critics: two TrainStates of one MLP (the same module paths Dense_0, Dense_1), both trained by Adam
    # in one step: 2 P parameters (P = D H + H + H C + C each), params and gradients 2 P floats, Adam's
    # 13 FLOP a parameter (its update FLOP over 2 P, not P)
    s1, s2 = _mlp_state(D, C), _mlp_state(D, C)
    y = jax.ShapeDtypeStruct((B, C), jnp.float32)
    step = _two_states_step

    report = xla_cost.analyze_step(step, s1, s2, X, y, counter="jaxpr", memory=True)
    P = D * H + H + H * C + C
    assert report.parameters == 2 * P
    assert report.memory_breakdown.parameters == report.memory_breakdown.gradients == F32 * 2 * P
    assert 13 <= report.phases["update"].flops / (2 * P) < 13 + 16 / P
    assert not [n for n in report.notes if "receive no gradient" in n]


def test_an_actor_beside_two_critics_of_one_class_is_read_not_trained():
    # TD3's update_critic, cleanrl's form: update_critic(actor_state, qf1_state, qf2_state, ...) returning
    # ((qf1_state, qf2_state), losses): the actor (D -> H -> A, A = 2) runs outside the gradient; the critics
    # (D + A -> H -> 1) are trained, each with its target network's copy beside it (read outside the gradient)
    A = 2
    actor, q1, q2 = _mlp_state(D, A, target=True), _mlp_state(D + A, 1, target=True), _mlp_state(D + A, 1, target=True)
    y = jax.ShapeDtypeStruct((B,), jnp.float32)

    def update_critic(actor, q1, q2, obs, y):
        a = actor.apply_fn(actor.target_params, obs)
        x = jnp.concatenate([obs, a], -1)
        target = jnp.minimum(q1.apply_fn(q1.target_params, x), q2.apply_fn(q2.target_params, x))[:, 0] + y

        def loss(p, s):
            return jnp.mean((s.apply_fn(p, x)[:, 0] - target) ** 2)
        (l1, g1), (l2, g2) = jax.value_and_grad(loss)(q1.params, q1), jax.value_and_grad(loss)(q2.params, q2)
        return (q1.apply_gradients(grads=g1), q2.apply_gradients(grads=g2)), (l1, l2)

    report = xla_cost.analyze_step(update_critic, actor, q1, q2, X, y, counter="jaxpr")
    Pa, Pq = D * H + H + H * A + A, (D + A) * H + H + H + 1  # the actor's, one critic's
    assert report.parameters == Pa + 2 * Pq  # each target network a copy of its own state's params
    assert report.trained_parameters == 2 * Pq
    # the critics' Adam (13 FLOP a parameter) is the update, not metrics
    assert 13 <= report.phases["update"].flops / (2 * Pq) < 13 + 16 / Pq
    assert not [n for n in report.notes if "receive no gradient" in n or "returned metrics read" in n]


ACTIONS = 2


def _td3_update_actor(actor, q1, q2, obs):
    """TD3's update_actor: the actor trained through qf1; every state's target copy moved towards its params."""
    grads = jax.grad(lambda p: -q1.apply_fn(q1.params, jnp.concatenate([obs, actor.apply_fn(p, obs)], -1)).mean())(
        actor.params)
    actor = actor.apply_gradients(grads=grads)
    moved = [s.replace(target_params=optax.incremental_update(s.params, s.target_params, 0.005))
             for s in (actor, q1, q2)]
    return moved[0], (moved[1], moved[2])


def test_an_actor_step_names_no_critic_as_receiving_zero_gradients():
    # TD3's update_actor: the actor trained through qf1; both critics' target copies moved towards their params
    # (3 FLOP a parameter) and the critics returned as they came otherwise: no optimizer runs on them
    A = ACTIONS
    actor, q1, q2 = _mlp_state(D, A, target=True), _mlp_state(D + A, 1, target=True), _mlp_state(D + A, 1, target=True)
    update_actor = _td3_update_actor

    report = xla_cost.analyze_step(update_actor, actor, q1, q2, X, counter="jaxpr")
    Pa, Pq = D * H + H + H * A + A, (D + A) * H + H + H + 1
    assert report.parameters == Pa + 2 * Pq
    assert report.trained_parameters == Pa
    assert not [n for n in report.notes if "receive no gradient" in n]
    # Adam on the actor, 13 a parameter, and three targets' incremental updates, 3 a parameter each
    update = report.phases["update"].flops
    assert 13 * Pa + 3 * (Pa + 2 * Pq) <= update < 13 * Pa + 3 * (Pa + 2 * Pq) + 64


def _columns_add_up(report):
    for part in ("forward", "backward", "update"):
        assert sum(getattr(row, part).flops for row in report.layers) == report.phases[part].jaxpr_flops, part


def test_two_train_states_of_one_network_class_get_rows_of_their_own():
    # _Mlp(C) names its output layer Dense_0 (H -> C, made first) and its input layer Dense_1 (D -> H): both
    # states run under one name stack (_Mlp/Dense_1); each state's rows hold its own parameters and work
    s1, s2 = _mlp_state(D, C), _mlp_state(D, C)
    y = jax.ShapeDtypeStruct((B, C), jnp.float32)
    step = _two_states_step

    report = xla_cost.analyze_step(step, s1, s2, X, y, counter="jaxpr", per_layer=True)
    rows = {row.path: row for row in report.layers}
    assert set(rows) == {"s1/Dense_0", "s1/Dense_1", "s2/Dense_0", "s2/Dense_1", "(remainder)"}
    for tree in ("s1", "s2"):
        first, last = rows[f"{tree}/Dense_1"], rows[f"{tree}/Dense_0"]
        assert (first.parameters, last.parameters) == (D * H + H, H * C + C)
        assert first.forward.flops == 2 * B * D * H + B * H  # x @ W, + b
        assert last.forward.flops == 2 * B * H * C + B * C
        # the input layer's gradients: dW = x^T g (2 B D H), db = sum over the batch ((B - 1) H); no dX
        assert first.backward.flops == 2 * B * D * H + (B - 1) * H
        # the output layer's: dW and dX (2 B H C each), db ((B - 1) C)
        assert last.backward.flops == 2 * (2 * B * H * C) + (B - 1) * C
        assert first.update.flops == 13 * first.parameters and last.update.flops == 13 * last.parameters  # Adam
    _columns_add_up(report)


def test_an_actors_rows_and_each_critics_are_their_own_in_its_step():
    # TD3's update_actor: the actor (D -> H -> A) trained through qf1 (D + A -> H -> 1); qf2 only has its
    # target moved (3 FLOP a parameter). The critic's forward and its input's cotangent (dX, reading its kernels)
    # are qf1's rows; the actor's weight gradients, which read qf1's cotangent and the actor's own
    # activations, are the actor's
    A = ACTIONS
    actor, q1, q2 = _mlp_state(D, A, target=True), _mlp_state(D + A, 1, target=True), _mlp_state(D + A, 1, target=True)
    update_actor = _td3_update_actor

    report = xla_cost.analyze_step(update_actor, actor, q1, q2, X, counter="jaxpr", per_layer=True)
    rows = {row.path: row for row in report.layers}
    assert {f"{t}/Dense_{k}" for t in ("actor", "q1", "q2") for k in (0, 1)} <= set(rows)
    # (known limit: the actor's output layer's bias gradient, a sum of the cotangent qf1's dX made, and Adam's
    # first steps on it go by that cotangent's tree: a few FLOP to q1/Dense_0 and to a row Dense_0 of several trees)
    assert {row.path for row in report.layers if row.parameters == 0} <= {"Dense_0", "(remainder)"}
    Pa1, Pq1 = D * H + H, (D + A) * H + H  # the input layers' parameters
    assert rows["actor/Dense_1"].parameters == Pa1 and rows["q1/Dense_1"].parameters == rows["q2/Dense_1"].parameters == Pq1
    assert rows["actor/Dense_1"].forward.flops == 2 * B * D * H + B * H
    assert rows["q1/Dense_1"].forward.flops == 2 * B * (D + A) * H + B * H
    assert rows["actor/Dense_1"].backward.flops == 2 * B * D * H + (B - 1) * H  # dW, db (obs: no dX)
    assert rows["q1/Dense_1"].backward.flops == 2 * B * H * (D + A)  # dX alone (qf1 is not differentiated)
    # the actor's output layer: dW (reading qf1's cotangent and the actor's activations) and dX, 2 B H A each
    # (its bias gradient, the known limit above, goes by the cotangent's tree)
    assert rows["actor/Dense_0"].backward.flops == 2 * (2 * B * H * A)
    assert rows["actor/Dense_1"].update.flops == (13 + 3) * Pa1  # Adam, then the target's move
    for k, n in ((1, Pq1), (0, H + 1)):
        q2_row = rows[f"q2/Dense_{k}"]
        assert (q2_row.forward.flops, q2_row.backward.flops, q2_row.update.flops) == (0, 0, 3 * n)
    assert rows["q1/Dense_1"].update.flops == 3 * Pq1
    _columns_add_up(report)


def test_one_model_keeps_its_rows_by_module_path():
    # a single TrainState: no tree is named, rows are the module paths alone
    s1 = _mlp_state(D, C)
    y = jax.ShapeDtypeStruct((B, C), jnp.float32)

    def step(s1, x, y):
        return s1.apply_gradients(grads=jax.grad(lambda p: jnp.mean((s1.apply_fn(p, x) - y) ** 2))(s1.params))

    report = xla_cost.analyze_step(step, s1, X, y, counter="jaxpr", per_layer=True)
    assert [row.path for row in report.layers] == ["Dense_1", "Dense_0", "(remainder)"]
    assert report.layers[0].forward.flops == 2 * B * D * H + B * H


def test_a_gradient_norm_over_a_frozen_bodys_gradients_is_said_to_cost_their_backward_pass():
    # octo's finetune.py (head_only): the body frozen by multi_transform's set_to_zero, and the step logs
    # optax.global_norm(grads) (optax.tree.norm now) over every gradient. The norm reads the body's gradients the update never reads:
    # the backward pass computes them for the metric alone. The trained count dropped to "all" (the frozen note
    # gone) and the checker priced the metric at the norm's 2 FLOP per parameter
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((Probe().apply({"params": p}, x) - y) ** 2))(params)
        updates, opt_state = FROZEN_BODY.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, {"loss": loss, "grad_norm": optax.tree.norm(grads)}

    params = jax.eval_shape(Probe().init, jax.random.key(0), X)["params"]
    report = xla_cost.analyze_step(train_step, params, jax.eval_shape(FROZEN_BODY.init, params), X,
                                   jax.ShapeDtypeStruct((B, C), jnp.float32), counter="jaxpr")
    head, body = H * C + C, D * H + H
    assert report.trained_parameters == head
    [note] = [n for n in report.notes if "read the gradients of" in n]
    assert note.startswith(f"step checker: the returned metrics read the gradients of {body:,} parameters")
    flops = int(note.split("the metrics cost ")[1].split(" FLOP")[0].replace(",", ""))
    # for the metric alone: the head's input gradient g W^T (2 B H C), the ReLU's mask, the body's kernel
    # gradient x^T g (2 B D H) and bias gradient ((B - 1) H), and the norm's square and add per parameter
    products = 2 * B * H * C + 2 * B * D * H
    assert products + (B - 1) * H + 2 * body <= flops <= products + (B - 1) * H + 2 * (head + body) + 3 * B * H
    [trained] = [n for n in report.notes if n.startswith("trained parameters:")]
    assert f"{head:,} of the {head + body:,}" in trained and "gradients only the metrics read" in trained
