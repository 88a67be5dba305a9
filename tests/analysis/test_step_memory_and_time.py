"""A user's own step: its memory by part (issue 30, rows 5 and 6) and its measured time split
into parts and layers (``step --time``).

Expected bytes are the closed forms of the model's dimensions: a Dense layer of ``i`` inputs
and ``o`` outputs holds ``i * o + o`` float32 parameters (4 bytes each); Adam keeps two moments
of the parameters' shapes (``mu``, ``nu``) and an int32 count; SGD with momentum one trace of
them; a typed threefry key is two uint32 words (``jax.random.key_data``), 8 bytes. Timing is
never asserted against the clock: only structure and formulas (GB/s = bytes / seconds, the
roofline = max(FLOP / peak, bytes / bandwidth), parts adding up to the step).
"""

from __future__ import annotations

import json
import sys
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx
from flax.training import train_state

import xla_cost
from xla_cost.analysis import step_timing, timing
from xla_cost.analysis.split import traced_program
from xla_cost.cli import main
from xla_cost.count.interpret import count_jaxpr
from xla_cost.count.step_parts import classify_step
from xla_cost.timemodel.devices import DevicePeak
from xla_cost.step.user_step import prepare_step

B, IN, HIDDEN, CLASSES = 8, 32, 64, 10
PARAMS = IN * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES  # fc1 and fc2, kernels and biases
F32, I32, U32 = 4, 4, 4
KEY_BYTES = 2 * U32  # a threefry key's data: two uint32 words
INPUTS = B * IN * F32 + B * I32  # the batch: float32 features, int32 labels


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(CLASSES, name="fc2")(nn.relu(nn.Dense(HIDDEN, name="fc1")(x)))


def _params():
    return MLP().init(jax.random.key(0), jnp.ones((1, IN)))["params"]


def _state(tx):
    return jax.eval_shape(lambda: train_state.TrainState.create(apply_fn=MLP().apply, params=_params(), tx=tx))


BATCH = {"x": jax.ShapeDtypeStruct((B, IN), jnp.float32), "y": jax.ShapeDtypeStruct((B,), jnp.int32)}


def _loss(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def train_step(state, batch):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch["x"])
        return _loss(logits, batch["y"]), logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["y"])
    return state.apply_gradients(grads=grads), {"loss": loss, "accuracy": accuracy}


STEP_FILE = f'''
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from flax.training import train_state


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense({CLASSES}, name="fc2")(nn.relu(nn.Dense({HIDDEN}, name="fc1")(x)))


def make_args():
    def create():
        params = MLP().init(jax.random.key(0), jnp.ones((1, {IN})))["params"]
        return train_state.TrainState.create(apply_fn=MLP().apply, params=params, tx=optax.adam(1e-3))
    batch = {{"x": jax.ShapeDtypeStruct(({B}, {IN}), jnp.float32), "y": jax.ShapeDtypeStruct(({B},), jnp.int32)}}
    return jax.eval_shape(create), batch


def train_step(state, batch):
    def loss_fn(params):
        logits = state.apply_fn({{"params": params}}, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


class Net(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear({IN}, {HIDDEN}, rngs=rngs)
        self.drop = nnx.Dropout(0.1, rngs=rngs)
        self.fc2 = nnx.Linear({HIDDEN}, {CLASSES}, rngs=rngs)

    def __call__(self, x):
        return self.fc2(self.drop(nnx.relu(self.fc1(x))))


def make_nnx_args():
    model = Net(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    return model, optimizer, {{"x": jnp.ones(({B}, {IN})), "y": jnp.zeros(({B},), jnp.int32)}}


def nnx_step(model, optimizer, batch):
    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss
'''


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working directory of its own with the step file, its own (absent) store, the import
    path restored after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XLA_COST_STORE", str(tmp_path / "store.sqlite"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "steps.py").write_text(STEP_FILE)
    return tmp_path


def _json(capsys, *argv: str) -> dict:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


# ------------------------------------------------------------------ row 5: TrainState + Adam


def test_row_05_train_state_adam_memory_is_parameters_and_two_moments(capsys, place):
    report = _json(capsys, "step", "steps.py:train_step", "--args", "steps.py:make_args", "--memory",
                   "--format", "json", "--quiet")
    memory = report["memory_breakdown"]
    assert report["parameters"] == PARAMS
    assert memory["parameters"] == memory["gradients"] == F32 * PARAMS  # was 3x: mu and nu counted as parameters
    assert memory["optimizer_state"] == 2 * F32 * PARAMS + I32  # mu, nu and Adam's int32 count (was 4 bytes)
    assert memory["model_state"] == I32  # TrainState.step
    assert memory["inputs"] == INPUTS
    # XLA's arguments are every leaf the step takes, whatever the labels
    assert memory["xla"]["argument_bytes"] == (memory["parameters"] + memory["optimizer_state"]
                                               + memory["model_state"] + memory["inputs"])


@pytest.mark.parametrize("tx, moments, scalars", [
    (optax.sgd(0.1, momentum=0.9), 1, 0),  # TraceState: one trace, no count
    (optax.adamw(1e-3, weight_decay=0.1), 2, I32),  # mu, nu, count; the decay keeps nothing
    (optax.sgd(0.1), 0, 0),  # nothing at all
])
def test_optimizer_state_is_the_optimizers_whatever_it_mirrors(tx, moments, scalars):
    memory = xla_cost.analyze_step(train_step, _state(tx), BATCH, counter="jaxpr", memory=True).memory_breakdown
    assert memory.parameters == memory.gradients == F32 * PARAMS
    assert memory.optimizer_state == moments * F32 * PARAMS + scalars
    assert (memory.model_state, memory.inputs) == (I32, INPUTS)


def test_plain_pytrees_params_opt_state_batch():
    tx = optax.adam(1e-3)
    variables = jax.eval_shape(lambda: {"params": _params()})
    opt_state = jax.eval_shape(tx.init, variables)

    def step(variables, opt_state, batch):
        loss, grads = jax.value_and_grad(lambda v: _loss(MLP().apply(v, batch["x"]), batch["y"]))(variables)
        updates, opt_state = tx.update(grads, opt_state, variables)
        return optax.apply_updates(variables, updates), opt_state, loss

    memory = xla_cost.analyze_step(step, variables, opt_state, BATCH, counter="jaxpr", memory=True).memory_breakdown
    assert memory.parameters == F32 * PARAMS
    assert memory.optimizer_state == 2 * F32 * PARAMS + I32  # mu['params'][...] is state, not parameters
    assert (memory.model_state, memory.inputs) == (0, INPUTS)


def _own_optimizer_step(update):
    """A plain-jax step on a state dict ``{'params', <the optimizer's leaves>, 'steps'}`` with an optimizer
    written by hand (no optax): ``update(state, grads) -> new state``."""
    def step(state, batch):
        loss, grads = jax.value_and_grad(lambda p: _loss(MLP().apply({"params": p}, batch["x"]), batch["y"]))(
            state["params"])
        return update(state, grads), loss
    return step


def test_a_hand_written_adams_moments_in_a_plain_dict_are_optimizer_state():
    # simply's layout: 'm' and 'v' mirror the parameters' paths and 'm' comes before 'params' in the dict; the
    # moments were taken for the parameters (the first of each path counted, the real ones 'model state'): its
    # optimizer state read 0 and its model state 2 * F32 * PARAMS + F32 * PARAMS + I32. An EMA of the new
    # parameters (kept in bfloat16, its dict key before 'params' too) depends on the gradient through them alone:
    # model state, as the step counter is, and no parameter (the header's dtype is not bfloat16/float32).
    params = jax.eval_shape(_params)
    ema = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, jnp.bfloat16), params)
    state = {"params": params, "m": params, "v": params, "ema": ema, "steps": jax.ShapeDtypeStruct((), jnp.int32)}

    def adam(state, grads):
        t = (state["steps"] + 1).astype(jnp.float32)
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, state["m"], grads)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, state["v"], grads)
        new = jax.tree.map(lambda p, m, v: p - 1e-3 * (m / (1 - 0.9 ** t)) / (jnp.sqrt(v / (1 - 0.999 ** t)) + 1e-8),
                           state["params"], m, v)
        ema = jax.tree.map(lambda e, p: (0.99 * e + 0.01 * p).astype(jnp.bfloat16), state["ema"], new)
        return {"params": new, "m": m, "v": v, "ema": ema, "steps": state["steps"] + 1}

    report = xla_cost.analyze_step(_own_optimizer_step(adam), state, BATCH, counter="jaxpr", memory=True)
    memory = report.memory_breakdown
    assert memory.parameters == memory.gradients == F32 * PARAMS
    assert memory.optimizer_state == 2 * F32 * PARAMS  # m and v
    assert (memory.model_state, memory.inputs) == (2 * PARAMS + I32, INPUTS)  # the bfloat16 EMA and the step counter
    assert report.param_dtype == report.dtype == "float32"


class _NAdamWState(NamedTuple):
    """AlgoPerf's NAdamW keeps its own NamedTuple (not optax's ScaleByAdamState): a count beside the moments."""

    count: jax.Array
    mu: dict
    nu: dict


def test_a_counter_in_an_optimizers_own_state_beside_its_moments_is_optimizer_state():
    # AlgoPerf's NAdamW (algorithms' jax NAdamW): count, mu, nu in a NamedTuple of its own. The moments are
    # optimizer state by the data flow (written back from the gradients); the count reads no gradient and was
    # model state (4 B), where analyze, given optax's own type, counts it as optimizer state
    params = jax.eval_shape(_params)
    opt_state = _NAdamWState(jax.ShapeDtypeStruct((), jnp.int32), params, params)

    def step(current_param_container, optimizer_state, batch):
        loss, grads = jax.value_and_grad(lambda p: _loss(MLP().apply({"params": p}, batch["x"]), batch["y"]))(
            current_param_container)
        count = optimizer_state.count + 1
        mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, optimizer_state.mu, grads)
        nu = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, optimizer_state.nu, grads)
        bias = (1 - 0.9 ** count.astype(jnp.float32), 1 - 0.999 ** count.astype(jnp.float32))
        new = jax.tree.map(lambda p, m, g, v: p - 1e-3 * (0.9 * m + 0.1 * g) / bias[0] / (jnp.sqrt(v / bias[1]) + 1e-8),
                           current_param_container, mu, grads, nu)
        return new, _NAdamWState(count, mu, nu), loss

    report = xla_cost.analyze_step(step, params, opt_state, BATCH, counter="jaxpr", memory=True)
    memory = report.memory_breakdown
    assert memory.parameters == memory.gradients == F32 * PARAMS
    assert (memory.optimizer_state, memory.model_state) == (2 * F32 * PARAMS + I32, 0)  # mu, nu and the count


def test_per_example_gradients_are_the_parameters_gradients_and_their_bytes_are_said():
    # DP-SGD's step (jax_privacy's examples name the argument model_params): jax.vmap(jax.grad(loss)) makes one
    # gradient per example, (B, *p.shape), clipped and summed. The gradients part read 0 (no gradient of a
    # parameter's shape came out of the backward pass), the parameters model state; the per-example copies,
    # which XLA's peak holds, were said nowhere
    tx = optax.adam(1e-3)
    params = jax.eval_shape(_params)

    def dp_step(model_params, opt_state, batch):
        def loss_fn(p, x, y):
            return _loss(MLP().apply({"params": p}, x[None]), y[None])

        per_example = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))(model_params, batch["x"], batch["y"])
        scale = jnp.minimum(1.0, 1.0 / jax.vmap(optax.tree.norm)(per_example))
        grads = jax.tree.map(lambda g: (g * scale.reshape((-1,) + (1,) * (g.ndim - 1))).sum(0), per_example)
        updates, opt_state = tx.update(grads, opt_state)
        return optax.apply_updates(model_params, updates), opt_state

    report = xla_cost.analyze_step(dp_step, params, jax.eval_shape(tx.init, params), BATCH, counter="jaxpr",
                                   memory=True)
    memory = report.memory_breakdown
    assert memory.parameters == memory.gradients == F32 * PARAMS
    assert memory.optimizer_state == 2 * F32 * PARAMS + I32
    (note,) = [n for n in memory.notes if n.startswith("per-example gradients")]
    assert f"{B * F32 * PARAMS / 1000:.3g} KB, {B} times the gradients" in note  # B copies of them
    assert note in report.notes  # said beside the report's figures too (its text shows no memory notes)


def test_a_bfloat16_lion_moment_is_optimizer_state_not_the_parameters_dtype():
    # Lion's one moment kept in bfloat16 beside float32 parameters: it was counted as the parameters (P * 2 bytes),
    # the header read 'parameters bfloat16/float32' with a mixed-precision note, the float32 parameters 'model state'
    params = jax.eval_shape(_params)
    state = {"params": params, "m": jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, jnp.bfloat16), params),
             "steps": jax.ShapeDtypeStruct((), jnp.int32)}

    def lion(state, grads):
        grads = jax.tree.map(lambda g: g.astype(jnp.bfloat16), grads)
        update = jax.tree.map(lambda m, g: jnp.sign(0.9 * m + 0.1 * g), state["m"], grads)
        m = jax.tree.map(lambda m, g: 0.99 * m + 0.01 * g, state["m"], grads)
        new = jax.tree.map(lambda p, u: p - 1e-4 * u, state["params"], update)
        return {"params": new, "m": m, "steps": state["steps"] + 1}

    report = xla_cost.analyze_step(_own_optimizer_step(lion), state, BATCH, counter="jaxpr", memory=True)
    memory = report.memory_breakdown
    assert memory.parameters == memory.gradients == F32 * PARAMS
    assert memory.optimizer_state == 2 * PARAMS  # m, bfloat16: 2 bytes a parameter
    assert (memory.model_state, memory.inputs) == (I32, INPUTS)
    assert report.param_dtype == report.dtype == "float32"
    assert not any("mixed precision" in note for note in report.notes)
    assert str(report).splitlines()[0].count("float32") == 1 and "bfloat16" not in str(report).splitlines()[0]


def _lookahead_step(solver, apply):
    """optax's lookahead example's step (examples/lookahead_mnist.ipynb): the loss differentiated with
    respect to ``params.fast`` alone, the update given the whole ``LookaheadParams(fast, slow)``."""
    def train_step(params, solver_state, batch):
        loss, grad = jax.value_and_grad(lambda p: _loss(apply(p, batch["x"]), batch["y"]))(params.fast)
        updates, solver_state = solver.update(grad, solver_state, params)
        return optax.apply_updates(params, updates), solver_state, loss

    return train_step


LOOKAHEAD_STATE = 2 * F32 * PARAMS + I32 + I32  # Adam's mu, nu and count; lookahead's steps_since_sync


def test_lookaheads_fast_weights_are_the_parameters_and_its_slow_weights_optimizer_state():
    # optax.LookaheadParams is an optax type: its leaves were all taken for optimizer state, the parameters 0 and
    # their gradients 0 B (with "no parameters found") though the loss is differentiated with respect to
    # params.fast. The slow weights are optimizer state, as the memory's parts define it: no pass reads them,
    # and the step writes them back from the fast optimizer's updates, not from the parameters' new values
    solver = optax.lookahead(optax.adam(2e-3), sync_period=5, slow_step_size=0.1)
    params = jax.eval_shape(lambda: optax.LookaheadParams.init_synced(_params()))
    step = _lookahead_step(solver, lambda p, x: MLP().apply({"params": p}, x))
    report = xla_cost.analyze_step(step, params, jax.eval_shape(solver.init, params), BATCH, counter="jaxpr",
                                   memory=True)
    memory = report.memory_breakdown
    assert report.parameters == PARAMS
    assert memory.parameters == memory.gradients == F32 * PARAMS  # params.fast and its gradient
    assert memory.optimizer_state == LOOKAHEAD_STATE + F32 * PARAMS  # and params.slow
    assert (memory.model_state, memory.inputs) == (0, INPUTS)
    assert not any("no parameters found" in note for note in report.notes)
    # the step checker reads the same parts: the slow copy and Adam's two moments, 3 x PARAMS elements
    (note,) = [n for n in report.notes if "the optimizer state holds" in n]
    assert f"holds {3 * PARAMS / PARAMS:.1f}x the parameters (LookaheadParams 1.0x, LookaheadState 2.0x)" in note


class NnxMLP(nnx.Module):
    def __init__(self, rngs):
        self.fc1, self.fc2 = nnx.Linear(IN, HIDDEN, rngs=rngs), nnx.Linear(HIDDEN, CLASSES, rngs=rngs)

    def __call__(self, x):
        return self.fc2(nnx.relu(self.fc1(x)))


def test_an_nnx_lookahead_step_differentiates_the_fast_weights_not_the_models_overwritten_params():
    # optax's lookahead notebook on NNX: the loss writes params.fast into the model (nnx.update) and calls it, so
    # the model's own Params are never read; they were taken for the parameters and the gradients read 0 B
    solver = optax.lookahead(optax.adam(2e-3), sync_period=5, slow_step_size=0.1)
    net = nnx.eval_shape(lambda: NnxMLP(nnx.Rngs(0)))
    params = optax.LookaheadParams.init_synced(nnx.state(net, nnx.Param))

    @jax.jit
    def predict(params, model, inputs):  # the notebook's, as it writes it
        nnx.update(model, params)
        return model(inputs)

    def train_step(params, model, solver_state, batch):
        loss, grad = jax.value_and_grad(lambda p, m: _loss(predict(p, m, batch["x"]), batch["y"]))(params.fast, model)
        updates, solver_state = solver.update(grad, solver_state, params)
        return optax.apply_updates(params, updates), solver_state, loss

    report = xla_cost.analyze_step(train_step, params, net, jax.eval_shape(solver.init, params), BATCH,
                                   counter="jaxpr", memory=True)
    memory = report.memory_breakdown
    assert report.parameters == PARAMS
    assert memory.parameters == memory.gradients == F32 * PARAMS  # params.fast and its gradient
    assert memory.optimizer_state == LOOKAHEAD_STATE + F32 * PARAMS  # and params.slow
    assert memory.model_state == F32 * PARAMS  # the model's Params, overwritten from params.fast: a copy


def test_an_nnx_variable_type_of_the_users_own_that_the_loss_is_differentiated_by_is_a_parameter():
    # a scale held in a Variable subclass of the user's own, differentiated and updated with the Params: it was
    # model state, the parameters PARAMS; it is one of them, at the model's root (no object position as a module)
    class Scale(nnx.Variable):
        pass

    class Scaled(NnxMLP):
        def __init__(self, rngs):
            super().__init__(rngs)
            self.scale = Scale(jnp.ones((1, HIDDEN)))

        def __call__(self, x):
            return self.fc2(nnx.relu(self.fc1(x) * self.scale[...]))

    trained = nnx.Any(nnx.Param, Scale)

    def step(model, optimizer, batch):
        loss = lambda m: _loss(m(batch["x"]), batch["y"])  # noqa: E731
        optimizer.update(model, nnx.grad(loss, argnums=nnx.DiffState(0, trained))(model))

    model = nnx.eval_shape(lambda: Scaled(nnx.Rngs(0)))
    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(Scaled(nnx.Rngs(0)), optax.adam(1e-3), wrt=trained))
    report = xla_cost.analyze_step(step, model, optimizer, BATCH, counter="jaxpr", memory=True, per_layer=True)
    assert report.parameters == PARAMS + HIDDEN
    memory = report.memory_breakdown
    assert memory.parameters == memory.gradients == F32 * (PARAMS + HIDDEN)
    assert memory.model_state == 0
    assert "0" not in report.layers_frame().index


def test_a_kv_cache_the_step_returns_written_is_state_not_the_batch():
    # decode(params, cache, tokens) -> (logits, cache): the cache (L layers' k and v, its position) goes back
    # written; it was taken for the batch (its leading L, the inputs its bytes), the tokens are the batch
    layers, length = 3, 16
    params = {"embed": jax.ShapeDtypeStruct((CLASSES, IN), jnp.float32),
              "w": jax.ShapeDtypeStruct((IN, IN), jnp.float32)}
    kv = jax.ShapeDtypeStruct((layers, B, length, IN), jnp.float32)
    cache = {"k": kv, "v": kv, "index": jax.ShapeDtypeStruct((), jnp.int32)}

    def decode(params, cache, tokens):
        x = params["embed"][tokens] @ params["w"]
        row = jnp.broadcast_to(x[None, :, None, :], (layers, B, 1, IN))
        k = jax.lax.dynamic_update_slice(cache["k"], row, (0, 0, cache["index"], 0))
        v = jax.lax.dynamic_update_slice(cache["v"], row, (0, 0, cache["index"], 0))
        logits = (x + k.sum((0, 2)) + v.sum((0, 2))) @ params["embed"].T
        return logits, {"k": k, "v": v, "index": cache["index"] + 1}

    report = xla_cost.analyze_step(decode, params, cache, jax.ShapeDtypeStruct((B,), jnp.int32), counter="jaxpr",
                                   memory=True)
    memory = report.memory_breakdown
    assert report.batch_size == B
    assert memory.model_state == 2 * layers * B * length * IN * F32 + I32  # k, v and the index
    assert memory.inputs == B * I32  # the tokens
    assert memory.parameters == (CLASSES * IN + IN * IN) * F32


class _KeepdimsNorm(nn.Module):
    """AlgoPerf's Conformer BatchNorm: running statistics kept (C,), written back (1, 1, C) by keepdims means."""

    @nn.compact
    def __call__(self, x):
        mean = self.variable("batch_stats", "mean", jnp.zeros, (x.shape[-1],))
        var = self.variable("batch_stats", "var", jnp.ones, (x.shape[-1],))
        batch_mean = x.mean((0, 1), keepdims=True)
        batch_var = ((x - batch_mean) ** 2).mean((0, 1), keepdims=True)
        if not self.is_initializing():  # (init keeps them (C,), as AlgoPerf's init with train=False does)
            mean.value = 0.9 * mean.value[None, None] + 0.1 * batch_mean  # (1, 1, C)
            var.value = 0.9 * var.value[None, None] + 0.1 * batch_var
        return (x - batch_mean) * jax.lax.rsqrt(batch_var + 1e-5)


def test_running_statistics_written_back_with_unit_axes_are_state_not_the_batch():
    # step(model_state, opt_state, params, batch), the state first: its running mean and var come back (1, 1, C),
    # the same C elements as the (C,) it holds, so it is state written back and the batch is the batch's B rows
    # (was C: the state, its arrays all leading with C, taken for the batch, its bytes the inputs)
    length = 5

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(CLASSES)(_KeepdimsNorm()(nn.Dense(HIDDEN)(x)))

    model, tx = Net(), optax.sgd(0.1)
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.ones((1, length, IN))))
    params, model_state = variables["params"], {"batch_stats": variables["batch_stats"]}

    def train_step(model_state, opt_state, params, batch):
        def loss(p):
            logits, new_state = model.apply({"params": p, **model_state}, batch["x"], mutable=["batch_stats"])
            return _loss(logits, batch["y"]), new_state

        (value, new_state), grads = jax.value_and_grad(loss, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return new_state, opt_state, optax.apply_updates(params, updates), value

    batch = {"x": jax.ShapeDtypeStruct((B, length, IN), jnp.float32), "y": jax.ShapeDtypeStruct((B, length), jnp.int32)}
    report = xla_cost.analyze_step(train_step, model_state, jax.eval_shape(tx.init, params), params, batch,
                                   counter="jaxpr", memory=True)
    assert report.batch_size == B
    memory = report.memory_breakdown
    assert memory.parameters == F32 * PARAMS  # Dense(IN, HIDDEN) and Dense(HIDDEN, CLASSES), kernels and biases
    assert memory.model_state == 2 * HIDDEN * F32  # the running mean and var
    assert memory.inputs == B * length * (IN * F32 + I32)


def test_a_root_module_named_as_a_nested_one_is_parameters_not_a_copy_of_it():
    # the root's Dense_0 and LayerNorm_0 beside Block_0's Dense_0 and LayerNorm_0: their paths end alike, names
    # and shapes match (the biases, the scales), and they are other parameters, not copies of the block's (the
    # root's LayerNorm_0 scale and bias and its Dense_0 bias were model state: 3 HIDDEN floats)
    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x + nn.Dense(HIDDEN)(nn.LayerNorm()(x))

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = Block()(nn.Dense(HIDDEN)(x))  # (named as made: the root's Dense_0 first)
            return nn.Dense(CLASSES)(nn.LayerNorm()(x))

    model, tx = Net(), optax.sgd(0.1)
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.ones((1, IN))))["params"]

    def train_step(params, opt_state, batch):
        grads = jax.grad(lambda p: _loss(model.apply({"params": p}, batch["x"]), batch["y"]))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    memory = xla_cost.analyze_step(train_step, params, jax.eval_shape(tx.init, params), BATCH, counter="jaxpr",
                                   memory=True).memory_breakdown
    layer_norm = 2 * HIDDEN  # scale and bias
    # Dense_0, Block_0/LayerNorm_0, Block_0/Dense_0, LayerNorm_0, Dense_1
    parameters = (IN * HIDDEN + HIDDEN) + layer_norm + (HIDDEN * HIDDEN + HIDDEN) + layer_norm + (HIDDEN * CLASSES + CLASSES)
    assert memory.parameters == memory.gradients == F32 * parameters
    assert memory.model_state == 0


# ------------------------------------------------------------------ row 6: NNX with RNG keys


def test_row_06_nnx_step_with_rng_keys_gives_the_breakdown(capsys, place):
    assert jax.random.key_data(jax.random.key(0)).nbytes == KEY_BYTES  # the threefry key's size, as jax has it
    report = _json(capsys, "step", "steps.py:nnx_step", "--args", "steps.py:make_nnx_args", "--memory",
                   "--format", "json", "--quiet")
    memory = report["memory_breakdown"]
    assert memory["parameters"] == memory["gradients"] == F32 * PARAMS
    # Adam's mu and nu, its int32 count, and nnx.Optimizer's uint32 step
    assert memory["optimizer_state"] == 2 * F32 * PARAMS + I32 + U32
    assert memory["model_state"] == KEY_BYTES + U32  # the Dropout's Rngs: its key and its uint32 count
    assert memory["inputs"] == INPUTS
    assert memory["xla"]["argument_bytes"] == (memory["parameters"] + memory["optimizer_state"]
                                               + memory["model_state"] + memory["inputs"])


# ------------------------------------------------------------------ step --time


FAST = timing.TimingOptions(phases=(), block_s=0.002, min_blocks=3, max_blocks=4, trace_s=0.01, min_traced=3,
                            max_traced=4)
PEAK = DevicePeak("test device", {"float32": 1e11}, 2e10, "given")


@pytest.fixture
def fast(monkeypatch):
    """Few short blocks and a short trace; a given peak, so that the roofline's terms are known."""
    monkeypatch.setattr(step_timing, "STEP_OPTIONS", FAST)
    monkeypatch.setattr(step_timing, "device_peak", lambda: PEAK)


def test_step_time_is_split_into_parts_and_layers_with_gb_per_s_and_the_roofline(capsys, place, fast):
    report = _json(capsys, "step", "steps.py:train_step", "--args", "steps.py:make_args", "--time", "--per-layer",
                   "--format", "json", "--quiet")
    t = report["timing"]
    phases, split = t["phases"], t["split"]
    assert list(phases) == ["forward", "backward", "grad", "update", "train_step"]
    assert {p: phases[p]["source"] for p in phases} == {
        "forward": "trace", "backward": "trace", "grad": "trace", "update": "trace", "train_step": "one program"}
    step = phases["train_step"]["median_s"]
    # the parts and the idle time add up to the one-program step; grad is forward + backward
    assert sum(split["parts"][p]["seconds"] for p in ("forward", "backward", "update", "idle")) == pytest.approx(
        step, rel=1e-9)
    assert phases["grad"]["median_s"] == pytest.approx(phases["forward"]["median_s"] + phases["backward"]["median_s"])
    moved = dict(split["pass_bytes"], grad=split["pass_bytes"]["forward"] + split["pass_bytes"]["backward"])
    moved["train_step"] = report["bytes_accessed"]["train_step"]  # XLA's, for the whole step
    # the compiled instructions of each part move at least what it must: the forward and the backward
    # each read every kernel; the update writes the parameters, mu and nu
    kernels = F32 * (IN * HIDDEN + HIDDEN * CLASSES)
    assert moved["forward"] >= kernels and moved["backward"] >= kernels and moved["update"] >= 3 * F32 * PARAMS
    for phase, p in phases.items():
        seconds, flops = p["median_s"], report["flops"][phase]
        assert p["flops_per_s"] == pytest.approx(flops / seconds), phase
        assert p["bytes_per_s"] == pytest.approx(moved[phase] / seconds), phase  # GB/s: bytes over seconds
        compute, memory = flops / PEAK.flops_per_s["float32"], moved[phase] / PEAK.bandwidth
        assert p["roofline_s"] == pytest.approx(max(compute, memory)), phase
        assert p["bound"] == ("compute" if compute >= memory else "memory"), phase
        assert p["mfu"] == pytest.approx(report["model_flops"][phase] / seconds / PEAK.flops_per_s["float32"])
    assert sum(t["fractions"].values()) == pytest.approx(1.0)
    # per layer: the report's rows, each row's passes adding up to it, the rows to the parts
    rows = {row["path"]: row for row in t["layers"]}
    assert list(rows) == ["fc1", "fc2", "(remainder)"]
    for row in rows.values():
        assert row["forward_s"] + row["backward_s"] + row["update_s"] == pytest.approx(row["total_s"], rel=1e-9)
        assert row["bytes_per_s"] == pytest.approx(row["bytes"] / row["total_s"])
    for part in ("forward", "backward", "update"):
        assert sum(row[f"{part}_s"] for row in rows.values()) == pytest.approx(split["parts"][part]["seconds"],
                                                                               rel=1e-9)
    assert any("fed each step's results: args[0]" in note for note in t["notes"])  # the new state, as training


def test_each_instruction_goes_to_the_part_its_equations_have():
    state, batch = _state(optax.adam(1e-3)), BATCH
    prepared = prepare_step(train_step, (state, batch))
    counted = count_jaxpr(prepared.trace().jaxpr, owners=list(prepared.owners),
                          classify=lambda jaxpr, given: classify_step(jaxpr, given, lambda stack: None))
    attribution = step_timing.StepAttribution.of_step(counted, list(prepared.param_paths), ("MLP",))
    names = {s.op_name for s in traced_program(prepared.lower().compile().as_text()).sources.values()}
    forward = {n for n in names if "/jvp(MLP)/fc" in n and n.endswith("/dot_general")}
    backward = {n for n in names if "/transpose(jvp(MLP))/fc" in n}  # the gradients' products and transposes
    update = {n for n in names if n.endswith("/sqrt")}  # Adam's sqrt(nu): no autodiff scope
    assert forward == {f"jit(train_step)/jvp(MLP)/{layer}/dot_general" for layer in ("fc1", "fc2")}
    assert {attribution.pass_of(n) for n in forward} == {"forward"}
    assert backward and {attribution.pass_of(n) for n in backward} == {"backward"}
    assert update and {attribution.pass_of(n) for n in update} == {"update"}
    assert attribution.pass_of("jit(train_step)/eq") == "other"  # the accuracy's comparison: a metric
    assert attribution.pass_of("jit(train_step)/jvp(MLP)/gt") == "backward"  # the ReLU's mask: backward reads it
    assert attribution.pass_of("jit(train_step)/jvp(jit(take_along_axis))/gather") == "forward"  # nested jit
    assert attribution.pass_of("") == "update"  # no name: the update's remainder, as analyze has it


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")  # the user's jit: no result takes them
def test_a_donated_batch_is_copied_and_the_callers_arrays_survive(fast):
    state = jax.jit(lambda: train_state.TrainState.create(apply_fn=MLP().apply, params=_params(),
                                                          tx=optax.sgd(0.1)))()
    batch = {"x": jnp.ones((B, IN)), "y": jnp.zeros((B,), jnp.int32)}
    report = xla_cost.analyze_step(jax.jit(train_step, donate_argnums=(0, 1)), state, batch, timed=True)
    t = report.timing
    assert t.skipped is None and t.step.steps_per_block == 1  # a fresh batch each step, made outside the clock
    assert any("copied afresh before each step" in note and "args[1]" in note for note in t.notes)
    assert not state.params["fc1"]["kernel"].is_deleted() and not batch["x"].is_deleted()  # ran on copies


def test_nnx_step_is_timed_and_split_each_step_waited_for(fast):
    rngs = nnx.Rngs(0)

    class Net(nnx.Module):
        def __init__(self):
            self.fc1, self.fc2 = nnx.Linear(IN, HIDDEN, rngs=rngs), nnx.Linear(HIDDEN, CLASSES, rngs=rngs)

        def __call__(self, x):
            return self.fc2(nnx.relu(self.fc1(x)))

    def step(model, optimizer, batch):
        loss, grads = nnx.value_and_grad(lambda m: _loss(m(batch["x"]), batch["y"]))(model)
        optimizer.update(model, grads)
        return loss

    model = Net()
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    report = xla_cost.analyze_step(step, model, optimizer, {"x": jnp.ones((B, IN)), "y": jnp.zeros((B,), jnp.int32)},
                                   timed=True)
    t = report.timing
    assert {"forward", "backward", "update", "train_step"} <= set(t.phases)
    assert sum(t.split.parts[p].seconds for p in (*t.split.passes, "idle")) == pytest.approx(
        t.phases["train_step"].median_s, rel=1e-9)
    # its objects come back as one state: nothing to feed, so each step is waited for
    assert any("each step waited for" in note for note in t.notes)


def test_other_is_measured_where_the_counts_have_it(fast):
    def step(state, batch, held_out):
        new_state, metrics = train_step(state, batch)
        logits = state.apply_fn({"params": state.params}, held_out["x"])  # a metric on a held-out batch
        return new_state, {**metrics, "held_out_loss": _loss(logits, held_out["y"])}

    report = xla_cost.analyze_step(step, _state(optax.adam(1e-3)), BATCH, BATCH, timed=True, per_layer=True)
    t = report.timing
    assert t.split.passes == ("forward", "backward", "update", "other")
    assert list(t.phases) == ["forward", "backward", "grad", "update", "other", "train_step"]
    assert sum(t.split.parts[p].seconds for p in (*t.split.passes, "idle")) == pytest.approx(
        t.phases["train_step"].median_s, rel=1e-9)
    other = t.phases["other"]
    assert other.source == "trace"
    assert t.split.pass_bytes["other"] >= F32 * (IN * HIDDEN + HIDDEN * CLASSES)  # the held-out forward's kernels
    assert other.bytes_per_s == pytest.approx(t.split.pass_bytes["other"] / other.median_s)
    assert other.flops_per_s == pytest.approx(report.phases["other"].flops / other.median_s)
    rows = t.layer_table(report.layers)
    for row in rows:  # each row's four parts add up to it
        assert sum(row[f"{p}_s"] for p in t.split.passes) == pytest.approx(row["total_s"], rel=1e-9)
    assert sum(row["other_s"] for row in rows) == pytest.approx(other.median_s, rel=1e-9)
    assert set(t.fractions) == {"forward", "backward", "update"}  # seed 000's shares, as analyze gives them
