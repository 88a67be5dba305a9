"""An apply function's per-layer rows whatever Linen variables dict its ``params=`` is: nested
(``{'params': {'params': ...}}``) or with collections beside ``params`` (``batch_stats``): the
collection names are left out leaf by leaf (`xla_cost.step.trees.leaf_modules`), as
`xla_cost.analyze_step` looks into a step's state."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
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
