"""An apply function's per-layer rows whatever Linen variables dict its ``params=`` is: nested
(``{'params': {'params': ...}}``) or with collections beside ``params`` (``batch_stats``): the
collection names are left out leaf by leaf (`xla_cost.step.trees.leaf_modules`), as
`xla_cost.analyze_step` looks into a step's state."""

from __future__ import annotations

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest

import xla_cost

B, IN, WIDTH, OUT = 4, 12, 16, 10


class NormedMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(WIDTH, name="hidden")(x)
        x = nn.BatchNorm(use_running_average=True, name="norm")(x)
        return nn.Dense(OUT, name="out")(nn.relu(x))


@pytest.fixture(scope="module")
def setup():
    model, x = NormedMLP(), jax.ShapeDtypeStruct((B, IN), jnp.float32)
    variables = jax.eval_shape(model.init, jax.random.key(0), x)  # {'params': ..., 'batch_stats': ...}
    direct = xla_cost.analyze(model, x, optimizer="sgd", per_layer=True, counter="jaxpr")
    return model, x, variables, {r.path: r for r in direct.layers}


@pytest.mark.parametrize("nesting", ["params_in_params", "collections_beside", "collections_in_params"])
def test_apply_function_rows_whatever_the_nesting(setup, nesting):
    model, x, variables, direct = setup
    if nesting == "params_in_params":  # {'params': {'params': P}}: the function unwraps one level itself
        params = {"params": {"params": variables["params"]}}
        stats = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), variables["batch_stats"])  # not differentiated
        fn = lambda p, x: model.apply({**p["params"], "batch_stats": stats}, x)  # noqa: E731
    elif nesting == "collections_beside":  # {'params': P, 'batch_stats': S}, as model.init returns it
        params, fn = variables, (lambda p, x: model.apply(p, x))
    else:  # {'params': {'params': P, 'batch_stats': S}}
        params, fn = {"params": variables}, (lambda p, x: model.apply(p["params"], x))
    report = xla_cost.analyze(fn, x, params=params, optimizer="sgd", per_layer=True, counter="jaxpr")
    rows = {r.path: r for r in report.layers}
    assert list(rows) == ["hidden", "norm", "out", "(remainder)"]
    stats = 2 * WIDTH if "collections" in nesting else 0  # batch_stats' mean and var, differentiated as given
    assert [rows[p].parameters for p in ("hidden", "norm", "out")] == [
        IN * WIDTH + WIDTH, 2 * WIDTH + stats, WIDTH * OUT + OUT]  # kernels + biases; the norm's scale and bias
    # stats closed over as constants (params_in_params): XLA folds the norm's `var + epsilon` (WIDTH FLOP) and
    # its rsqrt, as the jaxpr count does (docs/conventions.md: what is computed from constants only costs nothing)
    folded = {"norm": WIDTH} if nesting == "params_in_params" else {}
    for path in ("hidden", "norm", "out"):
        assert rows[path].forward_flops == direct[path].forward_flops - folded.get(path, 0)
    assert rows["hidden"].forward_flops == 2 * B * IN * WIDTH + B * WIDTH  # multiply-adds, bias adds


# ------------------------------------------------------------------ parameters held in a wrapper node
# simply keeps each weight in an AnnotatedArray: a pytree node of its own whose flatten gives the array with no
# key (jax's path ends in [<flat index 0>]), and each weight was a "module" of its own (rows fc1/w, fc1/b with
# the parameters and no forward work, beside fc1 with the forward and no parameters). A wrapper's keys are no
# module levels (`xla_cost.step.trees.named_leaves`): the module is the path to the key holding the parameter.


@jax.tree_util.register_pytree_node_class
class Keyless:
    """An array with metadata, flattened with no key (simply's ``common.AnnotatedArray``)."""

    def __init__(self, array, note=""):
        self.array, self.note = array, note

    shape = property(lambda self: self.array.shape)
    dtype = property(lambda self: self.array.dtype)

    def tree_flatten(self):
        return (self.array,), self.note

    @classmethod
    def tree_unflatten(cls, note, children):
        return cls(children[0], note)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["array"], meta_fields=["note"])
@dataclasses.dataclass
class Keyed:
    """An array with metadata, a dataclass node whose field adds the key ``.array``."""

    array: jax.Array
    note: str = ""
    shape = property(lambda self: self.array.shape)
    dtype = property(lambda self: self.array.dtype)


def _wrapped_mlp(wrap, unused=False):
    S = lambda *shape: wrap(jax.ShapeDtypeStruct(shape, jnp.float32))  # noqa: E731
    params = {"fc1": {"w": S(IN, WIDTH), "b": S(WIDTH)}, "fc2": {"w": S(WIDTH, OUT), "b": S(OUT)}}
    if unused:
        params["fc3"] = {"w": S(OUT, OUT)}  # never read: no gradient

    def apply(params, x):
        for name in ("fc1", "fc2"):
            with jax.named_scope(name):  # the docs' advice: a scope named after the params key
                x = jnp.tanh(x @ params[name]["w"].array + params[name]["b"].array[None])
        return x
    return params, apply


@pytest.mark.parametrize("wrap", [Keyless, Keyed], ids=["keyless", "keyed .array"])
@pytest.mark.parametrize("entry", ["analyze", "analyze_step"])
def test_parameters_in_a_wrapper_node_are_their_layers_rows(wrap, entry):
    params, apply = _wrapped_mlp(wrap, unused=True)
    x = jax.ShapeDtypeStruct((B, IN), jnp.float32)
    if entry == "analyze":
        report = xla_cost.analyze(apply, x, params=params, optimizer="adam", per_layer=True, counter="jaxpr")
    else:
        def step(params, opt_state, x):
            grads = jax.grad(lambda p: jnp.mean(apply(p, x)))(params)
            updates, opt_state = optax.adam(1e-3).update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        opt_state = jax.eval_shape(optax.adam(1e-3).init, params)
        report = xla_cost.analyze_step(step, params, opt_state, x, per_layer=True, counter="jaxpr")
    rows = {r.path: r for r in report.layers}
    assert list(rows) == ["fc1", "fc2", "fc3", "(remainder)"]  # (was fc1, fc2, fc1/b, fc1/w, fc2/b, fc2/w, ...)
    sizes = {"fc1": IN * WIDTH + WIDTH, "fc2": WIDTH * OUT + OUT, "fc3": OUT * OUT}  # kernel + bias
    assert {path: rows[path].parameters for path in sizes} == sizes
    # multiply-adds (2 a product) and the bias adds; the tanh is a transcendental, no FLOP
    assert rows["fc1"].forward_flops == 2 * B * IN * WIDTH + B * WIDTH
    assert rows["fc2"].forward_flops == 2 * B * WIDTH * OUT + B * OUT
    assert rows["fc1"].backward_flops > 0 and rows["fc3"].forward_flops == 0
    for path in ("fc1", "fc2"):  # Adam: 13 FLOP a parameter, on its layer's row
        assert rows[path].update_flops == 13 * sizes[path], path
    assert 0 < rows["fc3"].update_flops <= 13 * sizes["fc3"]  # its zero gradients' update (what of it is not folded)
    # the parameter's name is its key's, not the wrapper's index or field
    [ungraded] = [n for n in report.notes if "parameters that receive no gradient" in n]
    assert "receive no gradient: fc3/w:" in ungraded
