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
import pytest
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


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(CLASSES)(nn.relu(nn.Dense(16)(x)))


def _mlp_state(tx):
    def create():
        params = MLP().init(jax.random.key(0), jnp.ones((1, IN)))["params"]
        return train_state.TrainState.create(apply_fn=MLP().apply, params=params, tx=tx)

    return jax.eval_shape(create)


def _nnx_notes(tx, frozen: bool = False) -> list[str]:
    from flax import nnx

    class NnxMLP(nnx.Module):
        def __init__(self, rngs):
            self.linear1, self.linear2 = nnx.Linear(IN, 16, rngs=rngs), nnx.Linear(16, CLASSES, rngs=rngs)

        def __call__(self, x):
            h = self.linear1(x)
            return self.linear2(nnx.relu(jax.lax.stop_gradient(h) if frozen else h))

    x, y = jax.ShapeDtypeStruct((B, IN), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.int32)

    @nnx.jit
    def nnx_step(model, optimizer, x, y):
        grads = nnx.grad(lambda m: optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean())(model)
        optimizer.update(model, grads)

    model = nnx.eval_shape(lambda: NnxMLP(nnx.Rngs(0)))
    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(NnxMLP(nnx.Rngs(0)), tx, wrt=nnx.Param))
    return list(xla_cost.analyze_step(nnx_step, model, optimizer, x, y, counter="jaxpr").notes)


MLP_PARAMS = IN * 16 + 16 + 16 * CLASSES + CLASSES  # the two Dense layers' kernels and biases


def test_an_nnx_optimizers_state_is_read_as_linens_is():
    # a sixth new user's nnx.Optimizer: NNX holds optax's states as its own nodes, so MultiSteps' 3 x the
    # parameters went unnoted where Linen's TrainState is noted
    notes = [n for n in _nnx_notes(optax.MultiSteps(optax.adam(1e-3), every_k_schedule=4)) if n.startswith(NOTE)]
    (note,) = notes
    assert f"holds {3 * MLP_PARAMS / MLP_PARAMS:.1f}x the parameters" in note and "opt_state." in note


def test_adafactors_factored_state_is_not_taken_for_parameters_without_a_gradient():
    # the same user's Adafactor: its factored rows and columns ((1,) here: no side reaches 128) were judged as
    # parameters no backward equation makes, "every parameter receives no gradient", in Linen and NNX alike
    # (NNX naming them linear1/value); the backward pass computes every gradient
    x, y = jax.ShapeDtypeStruct((B, IN), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.int32)
    linen = xla_cost.analyze_step(step, _mlp_state(optax.adafactor(1e-3)), x, y, counter="jaxpr").notes
    assert not [n for n in (*linen, *_nnx_notes(optax.adafactor(1e-3))) if "receive no gradient" in n]
    # a layer that truly gets none is named by its variables' names, not NNX's `value`
    (said,) = [n for n in _nnx_notes(optax.adam(1e-3), frozen=True) if "receive no gradient" in n]
    assert "linear1/bias, linear1/kernel:" in said and "linear2" not in said


@pytest.mark.parametrize("hidden", [16, IN])
def test_parameters_an_nnx_optimizer_leaves_alone_are_not_said_to_get_zero_gradients_applied(hidden):
    # a linear probe as NNX writes it: nnx.DiffState restricts the gradient and Optimizer(wrt=) the update to
    # the head; the frozen layer comes back as it went in (no update touches it), so no zero gradient of it is
    # applied and the advice to mask it would be wrong. The same layer under stop_gradient with every
    # parameter updated (above) is still named. With hidden = IN and CLASSES = IN the frozen layer has the
    # head's shapes: the head's new arrays are no evidence that the frozen one is updated
    from flax import nnx

    classes = CLASSES if hidden != IN else IN

    class Probe(nnx.Module):
        def __init__(self, rngs):
            self.linear1, self.linear2 = nnx.Linear(IN, hidden, rngs=rngs), nnx.Linear(hidden, classes, rngs=rngs)

        def __call__(self, x):
            return self.linear2(nnx.relu(self.linear1(x)))

    head = nnx.All(nnx.Param, nnx.PathContains("linear2"))

    @nnx.jit
    def probe_step(model, optimizer, x, y):
        loss = lambda m: optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean()  # noqa: E731
        grads = nnx.grad(loss, argnums=nnx.DiffState(0, head))(model)
        optimizer.update(model, grads)

    model = nnx.eval_shape(lambda: Probe(nnx.Rngs(0)))
    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(Probe(nnx.Rngs(0)), optax.adam(1e-3), wrt=head))
    x, y = jax.ShapeDtypeStruct((B, IN), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.int32)
    notes = xla_cost.analyze_step(probe_step, model, optimizer, x, y, counter="jaxpr").notes
    assert not [n for n in notes if "receive no gradient" in n]


class _ConvNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(CLASSES)(nn.relu(nn.Conv(4, (3, 3))(x)).mean((1, 2)))


def _per_example_step(frozen: str | None = None):
    """DP-SGD's gradient: ``jax.vmap(jax.grad(loss))``, one gradient per example, (B, *p.shape), clipped by
    each example's norm and summed over the examples; ``frozen``: a module under stop_gradient."""
    def dp_step(state, x, y):
        def loss_fn(params, x, y):
            if frozen:
                params = {**params, frozen: jax.lax.stop_gradient(params[frozen])}
            logits = state.apply_fn({"params": params}, x[None])
            return optax.softmax_cross_entropy_with_integer_labels(logits, y[None]).mean()

        per_example = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))(state.params, x, y)
        scale = jnp.minimum(1.0, 1.0 / jax.vmap(optax.tree.norm)(per_example))
        grads = jax.tree.map(lambda g: (g * scale.reshape((-1,) + (1,) * (g.ndim - 1))).sum(0), per_example)
        return state.apply_gradients(grads=grads)
    return dp_step


@pytest.mark.parametrize("model, sample", [(MLP(), (IN,)), (_ConvNet(), (6, 6, 3))])
def test_per_example_gradients_are_gradients_and_a_frozen_layer_among_them_is_still_named(model, sample):
    # jax.vmap(jax.grad(loss)) makes each gradient batched over the examples, (B, *p.shape), and a
    # convolution's kernel gradient with the examples beside its output features, (3, 3, C, B, F): every
    # parameter was said to "receive no gradient" (the conv's kernel alone was recognised: its flipped copy
    # for the input's gradient has its shape)
    def create():
        params = model.init(jax.random.key(0), jnp.ones((1, *sample)))["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-3))

    state = jax.eval_shape(create)
    x, y = jax.ShapeDtypeStruct((B, *sample), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.int32)
    report = xla_cost.analyze_step(_per_example_step(), state, x, y, counter="jaxpr")
    assert not [n for n in report.notes if "receive no gradient" in n]
    assert report.trained_parameters is None  # all of them
    first, head = ("Dense_0", "Dense_1") if isinstance(model, MLP) else ("Conv_0", "Dense_0")
    frozen = xla_cost.analyze_step(_per_example_step(frozen=first), state, x, y, counter="jaxpr").notes
    (said,) = [n for n in frozen if "receive no gradient" in n]
    assert f"gradient: {first}/bias, {first}/kernel:" in said and head not in said


def test_a_scanned_blocks_hoisted_derivative_of_a_loop_invariant_is_no_second_forward_pass():
    # a DiT-style conditioning: every scanned block applies silu to the same vector c. jax hoists the loop-
    # invariant work of silu's derivative out of the backward loop, where its name stack loses jvp and
    # transpose: it is the backward pass's (only the backward reads it), not a second forward pass in other
    from flax import nnx

    depth, width = 3, 16

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.lin, self.mod = nnx.Linear(width, width, rngs=rngs), nnx.Linear(width, width, rngs=rngs)

        def __call__(self, h, c):
            return h + self.lin(h) * self.mod(nnx.silu(c))

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.emb = nnx.Linear(width, width, rngs=rngs)

            @nnx.split_rngs(splits=depth)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def make(rngs):
                return Block(rngs)

            self.blocks = make(rngs)

        def __call__(self, x, t):
            c = self.emb(t)

            @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
            def run(h, block):
                return block(h, c)

            return run(x, self.blocks)

    @nnx.jit
    def train_step(model, optimizer, x, t):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean(m(x, t) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    model = nnx.eval_shape(lambda: Net(nnx.Rngs(0)))
    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(Net(nnx.Rngs(0)), optax.adam(1e-3), wrt=nnx.Param))
    x = jax.ShapeDtypeStruct((B, width), jnp.float32)
    report = xla_cost.analyze_step(train_step, model, optimizer, x, x, counter="jaxpr")
    assert not [n for n in report.notes if "a second forward pass" in n]
    assert report.phases["other"].flops < B * width  # no elementwise pass over the conditioning vector


def test_a_reference_models_scan_is_all_work_the_loss_reads_not_a_second_forward_pass():
    # DPO: a frozen reference model (its own parameters, outside the gradient) whose forward runs a
    # lax.scan over the sequence (EasyDeL's Qwen3 computes its positions so); the loss reads its log-probs
    # as a constant. All of its work, the scan's counter included, feeds the loss: one note, no
    # "second forward pass (for metrics?)" for the counter's FLOP alone
    from flax import nnx

    steps, width = 4, 8

    class Recurrent(nnx.Module):
        def __init__(self, rngs):
            self.cell = nnx.Linear(width, width, rngs=rngs)

        def __call__(self, xs):  # xs: (steps, B, width); the scan runs under this module
            return jax.lax.scan(lambda h, x: (jnp.tanh(self.cell(h) + x), None), jnp.zeros(xs.shape[1:]), xs)[0]

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.rnn, self.head = Recurrent(rngs), nnx.Linear(width, CLASSES, rngs=rngs)

        def __call__(self, xs):
            return self.head(self.rnn(xs))

    tx = optax.adamw(1e-3)

    def logp(model, xs, y):
        return jnp.take_along_axis(jax.nn.log_softmax(model(xs)), y[:, None], -1).sum()

    def dpo_step(graphdef, params, opt_state, ref_params, xs, y):
        ref = jax.lax.stop_gradient(logp(nnx.merge(graphdef, ref_params), xs, y))
        loss, g = jax.value_and_grad(lambda p: -jax.nn.log_sigmoid(logp(nnx.merge(graphdef, p), xs, y) - ref))(params)
        u, opt_state = tx.update(g, opt_state, params)
        return optax.apply_updates(params, u), opt_state, loss

    graphdef, params = nnx.split(nnx.eval_shape(lambda: Net(nnx.Rngs(0))))
    report = xla_cost.analyze_step(lambda *a: dpo_step(graphdef, *a), params, jax.eval_shape(tx.init, params), params,
                                   jax.ShapeDtypeStruct((steps, B, width), jnp.float32),
                                   jax.ShapeDtypeStruct((B,), jnp.int32), counter="jaxpr")
    assert not [n for n in report.notes if "the model also runs outside the gradient" in n]
    assert len([n for n in report.notes if "whose result the loss reads as a constant" in n]) == 1
