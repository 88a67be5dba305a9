"""A functional NNX step that merges its model with a ``merge`` imported from ``flax.nnx`` (the
function object held by the step's module, not looked up on ``nnx`` when called): its merged
modules are tagged all the same (`xla_cost.step.nnx_scopes` patches the function itself), so the
step has its per-layer rows (was: none, and no note)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx
from flax.nnx import merge  # the step below calls this name, bound before any analysis

import xla_cost
from tests import lm_models as L
from tests.repo_steps import integer_cross_entropy_flops

CFG = L.CONFIG


@jax.jit
def merged_step(graphdef: nnx.GraphDef, state: nnx.State, batch):
    model, optimizer = merge(graphdef, state)

    def loss_fn(model):
        return L.lm_loss(model(batch["inputs"]), batch["targets"])

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss, nnx.state((model, optimizer))


@jax.jit
def attribute_step(graphdef: nnx.GraphDef, state: nnx.State, batch):
    """`merged_step` calling ``nnx.merge``: looked up on ``nnx`` when it runs."""
    model, optimizer = nnx.merge(graphdef, state)

    def loss_fn(model):
        return L.lm_loss(model(batch["inputs"]), batch["targets"])

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss, nnx.state((model, optimizer))


def test_step_merging_with_an_imported_merge_has_the_rows():
    graphdef, state = L.nnx_split_state(CFG, "attend")
    report = xla_cost.analyze_step(merged_step, graphdef, state, L.batch_of(CFG), per_layer=True, counter="jaxpr")
    rows = {row.path: row for row in report.layers}
    assert merge is nnx.merge and merge.__code__ is nnx.graph.merge.__code__  # the same function, restored
    assert {"embedder", "final_norm", "blocks/0/attn/q", "blocks/1/mlp/down"} <= set(rows)
    # the lookup of B*T tokens and the tied head's 2*B*T*d*V (tests.lm_models' closed form)
    assert rows["embedder"].forward_flops == L.embedding_forward_flops(CFG, "attend")
    for block in ("blocks/0", "blocks/1"):
        for name, flops in L.block_matmul_flops(CFG).items():
            if name != "attn":
                assert rows[f"{block}/{name}"].forward_flops == flops
    n = CFG.batch * CFG.seq  # the remainder holds the loss alone: mean cross-entropy over B*T tokens of V logits
    assert rows[xla_cost.REMAINDER].forward_flops == integer_cross_entropy_flops(n, CFG.vocab)
    assert sum(row.parameters for row in report.layers) == L.lm_parameters(CFG)


def test_a_merge_that_is_no_plain_function_is_patched_where_flax_exports_it(monkeypatch):
    """A Flax whose merge is some other callable (its code cannot be swapped): the step that
    calls ``nnx.merge`` still has its rows, through the attributes patched as before."""
    original = nnx.graph.merge

    class Merge:
        def __call__(self, *args, **kwargs):
            return original(*args, **kwargs)

    wrapped = Merge()
    monkeypatch.setattr(nnx.graph, "merge", wrapped)
    monkeypatch.setattr(nnx, "merge", wrapped)
    graphdef, state = L.nnx_split_state(CFG, "attend")
    report = xla_cost.analyze_step(attribute_step, graphdef, state, L.batch_of(CFG), per_layer=True,
                                   counter="jaxpr")
    rows = {row.path: row for row in report.layers}
    assert rows["embedder"].forward_flops == L.embedding_forward_flops(CFG, "attend")
    assert nnx.merge is wrapped and nnx.graph.merge is wrapped  # restored to what it was


def test_an_nnx_submodule_named_value_keeps_its_row():
    # nnx.MultiHeadAttention names its value projection `value`; analyze_step took every path entry named
    # "value" for a Variable's `.value` and dropped it: the projection's row went to the remainder
    class Net(nnx.Module):
        def __init__(self, rngs):
            self.key = nnx.Linear(16, 32, rngs=rngs)
            self.value = nnx.Linear(32, 32, rngs=rngs)
            self.head = nnx.Linear(32, 10, rngs=rngs)

        def __call__(self, x):
            return self.head(self.value(self.key(x)))

    @nnx.jit
    def step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(
            lambda m: optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean())(model)
        optimizer.update(model, grads)
        return loss

    model = nnx.eval_shape(lambda: Net(nnx.Rngs(0)))
    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(Net(nnx.Rngs(0)), optax.sgd(0.1), wrt=nnx.Param))
    b = 4
    x, y = jax.ShapeDtypeStruct((b, 16), jnp.float32), jax.ShapeDtypeStruct((b,), jnp.int32)
    report = xla_cost.analyze_step(step, model, optimizer, x, y, per_layer=True, counter="jaxpr")
    rows = {r.path: (r.parameters, r.forward_flops) for r in report.layers}
    assert rows["value"] == (32 * 32 + 32, 2 * b * 32 * 32 + b * 32)  # its kernel and bias; matmul + bias add
    assert rows[xla_cost.REMAINDER][0] == 0


class _MLP(nnx.Module):
    def __init__(self, d_in: int, d_hidden: int, d_out: int, rngs: nnx.Rngs):
        self.fc1, self.fc2 = nnx.Linear(d_in, d_hidden, rngs=rngs), nnx.Linear(d_hidden, d_out, rngs=rngs)

    def __call__(self, x):
        return self.fc2(nnx.relu(self.fc1(x)))


def test_a_merging_step_traced_before_the_analysis_keeps_its_rows():
    """A step that merges its model (``jax.jit``, or a plain function) traced once before
    ``analyze_step`` (the training loop's call, a ``jax.eval_shape``): jax's trace of it, kept by
    the function, has no name scopes; the analysis traces afresh (was: every row 0, all of it in
    the remainder)."""
    batch, d_in, d_hidden, d_out = 4, 32, 64, 10
    graphdef, params = nnx.split(_MLP(d_in, d_hidden, d_out, nnx.Rngs(0)), nnx.Param)
    x = jax.ShapeDtypeStruct((batch, d_in), jnp.float32)

    def infer(x, params):
        return nnx.merge(graphdef, params)(x)

    jitted = jax.jit(infer)
    jax.eval_shape(infer, x, params)  # traced before, as the user checks the output's shape
    jitted.trace(x, params)
    fc1 = 2 * batch * d_in * d_hidden + batch * d_hidden  # the matrix product and the bias
    fc2 = 2 * batch * d_hidden * d_out + batch * d_out
    for step in (infer, jitted):
        report = xla_cost.analyze_step(step, x, params, per_layer=True, counter="jaxpr")
        rows = {row.path: row.forward_flops for row in report.layers}
        assert (rows["fc1"], rows["fc2"]) == (fc1, fc2), step


class _HashesItsState(nnx.Module):
    """A module whose ``__hash__`` hashes its state (as EasyDeL's ``EasyDeLBaseModule`` does): it
    fails on a traced copy, as the one ``nnx.merge`` returns inside a step holds."""

    def __init__(self, d_in: int, d_out: int, rngs: nnx.Rngs):
        self.fc = nnx.Linear(d_in, d_out, rngs=rngs)

    def __call__(self, x):
        return self.fc(x)

    def __hash__(self):
        leaves = jax.tree.leaves(nnx.state(self))
        if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
            raise ValueError("cannot hash a traced module")
        return hash(tuple(leaf.shape for leaf in leaves))


def _hashing_step(d_in: int = 8, d_out: int = 4):
    graphdef, params = nnx.split(_HashesItsState(d_in, d_out, nnx.Rngs(0)))

    def train_step(params, x, y):
        def loss_fn(p):
            return optax.softmax_cross_entropy_with_integer_labels(nnx.merge(graphdef, p)(x), y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        return jax.tree.map(lambda a, g: a - 0.1 * g, params, grads), loss

    return train_step, params


def test_a_module_whose_hash_fails_on_traced_state_is_analysed():
    """xla_cost's tagging of merged modules hashed each one (a weak-keyed side table's lookup):
    the step, which jax.jit traces, was refused as failing with the module's own ValueError."""
    b, d_in, d_out = 2, 8, 4
    train_step, params = _hashing_step(d_in, d_out)
    x, y = jax.ShapeDtypeStruct((b, d_in), jnp.float32), jax.ShapeDtypeStruct((b,), jnp.int32)
    jax.jit(train_step).trace(params, x, y)  # jax traces it
    report = xla_cost.analyze_step(train_step, params, x, y, per_layer=True, counter="jaxpr")
    rows = {row.path: row for row in report.layers}
    assert rows["fc"].forward_flops == 2 * b * d_in * d_out + b * d_out  # the matrix product and the bias
    n = d_in * d_out + d_out
    assert report.parameters == n
    assert report.phases["update"].flops == 2 * n  # a - 0.1 * g: a multiply and a subtract per parameter


def test_a_failure_of_xla_costs_own_tagging_names_xla_cost_not_the_step(monkeypatch):
    """An exception of xla_cost's bookkeeping inside the trace (here its tagging of what nnx.merge
    returns, made to fail) is xla_cost's: the refusal told the user to fix the step."""
    from xla_cost.step import nnx_scopes

    def failing(node):
        raise RuntimeError("tagging failed")

    monkeypatch.setattr(nnx_scopes, "tag_modules", failing)
    train_step, params = _hashing_step()
    x, y = jax.ShapeDtypeStruct((2, 8), jnp.float32), jax.ShapeDtypeStruct((2,), jnp.int32)
    with pytest.raises(xla_cost.InternalError) as info:
        xla_cost.analyze_step(train_step, params, x, y, counter="jaxpr")
    message = str(info.value)
    assert "xla_cost's own work" in message and "tagging the modules nnx.merge returns" in message
    assert "RuntimeError: 'tagging failed'" in message and "Fix the step" not in message
    assert not isinstance(info.value, xla_cost.InputError)
