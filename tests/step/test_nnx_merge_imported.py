"""A functional NNX step that merges its model with a ``merge`` imported from ``flax.nnx`` (the
function object held by the step's module, not looked up on ``nnx`` when called): its merged
modules are tagged all the same (`xla_cost.step.nnx_scopes` patches the function itself), so the
step has its per-layer rows (was: none, and no note)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
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
