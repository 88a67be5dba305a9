"""The API on custom Linen and NNX models: training mode, names, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

import xla_cost
from tests import formulas as F
from tests.custom_models import D_HIDDEN, D_IN, D_OUT, LinenBatchNormNet, LinenIntParam, NnxMLP, NnxNested

B = 8


def x(batch: int = B, *rest: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((batch, *(rest or (D_IN,))), jnp.float32)


def batchnorm_forward_flops(b: int, d: int) -> int:
    """BatchNorm over b examples of d features in training mode, Flax's way.

    Statistics: x*x (bd); the sums of x and of x*x ((b-1)d each); their means
    (/ b: 2d); var = E[x^2] - E[x]^2 (square, subtract: 2d); max(0, var) (d).
    Running averages of mean and var, m*r + (1-m)*s (3d each: 6d). Normalise:
    x - mean (bd); var + eps (d), rsqrt (a transcendental); * scale (d); * (bd);
    + bias (bd). Total 6bd + 11d.
    """
    return b * d + 2 * (b - 1) * d + 2 * d + 2 * d + d + 6 * d + b * d + d + d + b * d + b * d


def test_nnx_mlp_per_layer():
    model = nnx.eval_shape(lambda: NnxMLP(nnx.Rngs(0)))
    report = xla_cost.analyze(model, x(), optimizer="sgd", per_layer=True)
    rows = {layer.path: layer for layer in report.layers}
    assert list(rows) == ["fc1", "fc2", "fc3", xla_cost.REMAINDER]
    # dense forward: 2*B*in*out + B*out (bias)
    assert rows["fc1"].forward_flops == 2 * B * D_IN * D_HIDDEN + B * D_HIDDEN
    assert rows["fc2"].forward_flops == 2 * B * D_HIDDEN * D_HIDDEN + B * D_HIDDEN
    # first layer: weight gradient only (2*B*in*out) + bias gradient (B*out - out)
    assert rows["fc1"].backward_flops == 2 * B * D_IN * D_HIDDEN + (B - 1) * D_HIDDEN
    # other layers: weight and input gradients (2 * 2*B*in*out) + bias gradient: 2:1
    assert rows["fc2"].backward_flops == 2 * 2 * B * D_HIDDEN * D_HIDDEN + (B - 1) * D_HIDDEN
    assert rows["fc2"].backward_flops == F.dense_backward_flops(B, D_HIDDEN, D_HIDDEN)
    # parameters: in*out + out
    assert rows["fc1"].parameters == D_IN * D_HIDDEN + D_HIDDEN
    assert report.parameters == (D_IN + 1) * D_HIDDEN + (D_HIDDEN + 1) * D_HIDDEN + (D_HIDDEN + 1) * D_OUT


def test_nnx_nested_batchnorm_dropout_in_training_mode():
    model = nnx.eval_shape(lambda: NnxNested(nnx.Rngs(0)))
    report = xla_cost.analyze(model, x(), optimizer="adam", per_layer=True)
    paths = [layer.path for layer in report.layers]
    assert paths[:2] == ["stem", "blocks/0/dense"]
    assert "blocks/1/bn" in paths
    # BatchNorm in training mode normalises with batch statistics: its rsqrt is
    # a transcendental per feature, in the forward pass.
    rows = {layer.path: layer for layer in report.layers}
    assert rows["blocks/0/bn"].forward_transcendentals == D_HIDDEN
    assert rows["blocks/0/bn"].forward_flops == batchnorm_forward_flops(B, D_HIDDEN)
    # NNX's class __call__ methods are restored after tracing.
    assert not hasattr(type(model.stem).__call__, "__wrapped__")


def test_linen_batchnorm_training_mode():
    report = xla_cost.analyze(LinenBatchNormNet(), x(), optimizer="sgd", per_layer=True)
    rows = {layer.path: layer for layer in report.layers}
    assert rows["bn"].parameters == 2 * D_HIDDEN  # scale and bias; stats are state
    assert rows["bn"].forward_transcendentals == D_HIDDEN  # rsqrt(var + eps) per feature
    assert rows["bn"].forward_flops == batchnorm_forward_flops(B, D_HIDDEN)
    # parameters exclude the batch statistics (mean, var)
    assert report.parameters == (D_IN + 1) * D_HIDDEN + 2 * D_HIDDEN + (D_HIDDEN + 1) * D_OUT


def test_custom_loss_and_targets():
    def mse(outputs, targets):
        return jnp.mean((outputs - targets) ** 2)

    model = nnx.eval_shape(lambda: NnxMLP(nnx.Rngs(0)))
    report = xla_cost.analyze(model, x(), optimizer="sgd", loss=mse)
    # three dense layers, two ReLUs, and the loss: outputs - targets, its
    # square, the sum (B*D_OUT - 1) and the division by B*D_OUT: 3 per output
    layers = F.dense_flops(B, D_IN, D_HIDDEN) + F.dense_flops(B, D_HIDDEN, D_HIDDEN) + F.dense_flops(B, D_HIDDEN, D_OUT)
    expected = layers + 2 * B * D_HIDDEN + 3 * B * D_OUT
    forward = report.phases["forward"]
    assert forward.jaxpr_flops == expected
    assert forward.flops == forward.xla_flops == expected


@pytest.mark.parametrize(
    "inputs, match",
    [
        (jax.ShapeDtypeStruct((0, D_IN), jnp.float32), "batch size of at least 1"),
        (jax.ShapeDtypeStruct((), jnp.float32), "leading batch axis"),
        ("not an array", "inputs as an array"),
    ],
)
def test_bad_inputs(inputs, match):
    with pytest.raises(xla_cost.InputError, match=match):
        xla_cost.analyze(LinenBatchNormNet(), inputs, optimizer="sgd")


def test_wrong_input_shape_for_zoo_model():
    from xla_cost.zoo import build_model

    with pytest.raises(xla_cost.InputError, match=r"inputs of shape \(B, 224, 224, 3\)"):
        xla_cost.analyze(build_model("conv_net"), x(2, 32, 32, 3), optimizer="sgd")


def test_wrong_input_rank_for_custom_model():
    model = nnx.eval_shape(lambda: NnxMLP(nnx.Rngs(0)))
    with pytest.raises(xla_cost.InputError, match="model failed"):
        xla_cost.analyze(model, x(B, 3), optimizer="sgd")


def test_non_float_parameters():
    with pytest.raises(xla_cost.InputError, match="floating-point parameters"):
        xla_cost.analyze(LinenIntParam(), x(), optimizer="sgd")


def test_not_a_module():
    with pytest.raises(xla_cost.InputError, match="flax.linen.Module"):
        xla_cost.analyze(NnxMLP, x(), optimizer="sgd")


def test_unknown_optimizer():
    with pytest.raises(xla_cost.InputError, match="sgd, momentum"):
        xla_cost.analyze(LinenBatchNormNet(), x(), optimizer="adamax2")


def test_a_zoo_model_loads_its_own_family_and_the_registry_loads_them_all():
    # Each family's Flax classes are made as its file loads (0.15 s of an analysis's imports
    # for all eight): asking for ResNet-50, by name or alias, loads the ResNet file alone.
    import json
    import os
    import subprocess
    import sys

    child = (
        "import json, sys\n"
        "from xla_cost import zoo\n"
        "zoo.build_model('ResNet-50'); zoo.get_spec('microsoft/resnet-50')\n"
        "alone = sorted(n for n in zoo.FAMILIES if f'xla_cost.zoo.{n}' in sys.modules)\n"
        "names = list(zoo.REGISTRY)\n"
        "every = sorted(n for n in zoo.FAMILIES if f'xla_cost.zoo.{n}' in sys.modules)\n"
        "print(json.dumps([alone, every, names]))\n"
    )
    done = subprocess.run([sys.executable, "-c", child], env={**os.environ, "JAX_PLATFORMS": "cpu"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    alone, every, names = json.loads(done.stdout.strip().splitlines()[-1])
    assert alone == ["resnet"]
    assert every == sorted(xla_cost.zoo.FAMILIES)
    assert names == [spec.name for family in xla_cost.zoo.FAMILIES
                     for spec in getattr(xla_cost.zoo, family).SPECS]  # the listing's order
