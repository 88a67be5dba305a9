"""The four networks of seed 001 (Epoch AI, "What's the backward-forward FLOP
ratio for neural networks?", Appendix A), translated from PyTorch to Flax Linen.

Layouts are NHWC; layer names and hyper-parameters are the seed's. As in the
seed, DeeperConvNet applies one ``conv_layer`` (shared weights) ``depth`` times
and defines a padded max-pool that its forward pass never uses. At ``depth=0``
(seed 001's "0 intermediate layers") ``conv_layer`` is never called, so Flax
creates no parameters for it: 9,216 fewer than the seed's PyTorch module, whose
unused weights get no gradient and no update either.
"""

from __future__ import annotations

from typing import Any, ClassVar

import flax.linen as nn
import jax.numpy as jnp

from xla_cost.parallel.sharding import RULES_ATTRIBUTE

from ._common import expect_input_shape, image_shape
from ._spec import ModelSpec

__all__ = ["SPECS", "LinearNet", "OneNet", "ConvNet", "DeeperConvNet"]

Dtype = Any


def _flatten(x: jnp.ndarray) -> jnp.ndarray:
    return x.reshape((x.shape[0], -1))  # torch.flatten(x, 1)


class _ThreeLayerMLP(nn.Module):
    """fc1 -> relu -> fc2 (128) -> relu -> fc3 (num_classes), as in the seed."""

    input_shape: ClassVar[tuple[int, ...]]
    num_classes: int = 10
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        expect_input_shape(type(self).__name__, x, self.input_shape)
        dense = lambda n, name: nn.Dense(  # noqa: E731
            n, dtype=self.dtype, param_dtype=self.param_dtype, name=name
        )
        x = _flatten(x).astype(self.dtype)
        x = nn.relu(dense(4096, "fc1")(x))
        x = nn.relu(dense(128, "fc2")(x))
        return dense(self.num_classes, "fc3")(x)


class LinearNet(_ThreeLayerMLP):
    """Linear network with a large first layer: 224*224*3 -> 4096 -> 128 -> 10.

    616,562,688 + 4,096 + 524,288 + 128 + 1,280 + 10 = 617,092,490 parameters.
    """

    input_shape: ClassVar[tuple[int, ...]] = (224, 224, 3)


class OneNet(_ThreeLayerMLP):
    """Linear network with a single input: 1 -> 4096 -> 128 -> 10."""

    input_shape: ClassVar[tuple[int, ...]] = (1,)


def _conv(features: int, kernel: int, stride: int, padding: int, name: str, m: Any) -> nn.Conv:
    return nn.Conv(
        features,
        (kernel, kernel),
        strides=(stride, stride),
        padding=((padding, padding), (padding, padding)),
        use_bias=False,
        dtype=m.dtype,
        param_dtype=m.param_dtype,
        name=name,
    )


def _max_pool(x: jnp.ndarray, padding: int) -> jnp.ndarray:
    # nn.MaxPool2d(kernel_size=3, stride=2, padding=padding); pads with -inf.
    return nn.max_pool(x, (3, 3), strides=(2, 2), padding=((padding, padding),) * 2)


class ConvNet(nn.Module):
    """Small CNN: conv1 (3->32, 7x7/2) -> pool -> conv2 (32->64, 7x7/2) -> pool -> fc1."""

    image_size: int = 224
    num_classes: int = 10
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        expect_input_shape("ConvNet", x, (self.image_size, self.image_size, 3))
        x = x.astype(self.dtype)
        x = _max_pool(nn.relu(_conv(32, 7, 2, 3, "conv1", self)(x)), padding=1)
        x = _max_pool(nn.relu(_conv(64, 7, 2, 3, "conv2", self)(x)), padding=1)
        x = x.mean(axis=(1, 2))  # AdaptiveAvgPool2d((1, 1)) + flatten
        return nn.Dense(
            self.num_classes, dtype=self.dtype, param_dtype=self.param_dtype, name="fc1"
        )(x)


class DeeperConvNet(nn.Module):
    """CNN with ``depth`` applications of one shared 3x3 conv (seed: depth 100; 0 allowed).

    first_layer (3->32, 7x7/2, then 3x3/2 max-pool without padding) ->
    ``depth`` x conv_layer (32->32, 3x3/1, shared) -> convN (32->64, 7x7/2) -> fc1.
    """

    depth: int = 100
    image_size: int = 224
    num_classes: int = 10
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    def setup(self) -> None:
        self.first_layer = _conv(32, 7, 2, 3, "first_layer", self)
        self.conv_layer = _conv(32, 3, 1, 1, "conv_layer", self)
        self.convN = _conv(64, 7, 2, 3, "convN", self)
        self.fc1 = nn.Dense(self.num_classes, dtype=self.dtype, param_dtype=self.param_dtype)

    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        expect_input_shape("DeeperConvNet", x, (self.image_size, self.image_size, 3))
        x = x.astype(self.dtype)
        x = _max_pool(nn.relu(self.first_layer(x)), padding=0)
        for _ in range(self.depth):
            x = nn.relu(self.conv_layer(x))
        x = nn.relu(self.convN(x))
        x = x.mean(axis=(1, 2))
        return self.fc1(x)


CHANNEL_RULES: tuple[tuple[str, tuple[str | None, ...]], ...] = (
    (r"kernel$", ("model",)),
    (r"(bias|scale)$", ("model",)),
)
"""Partition rules for a sharded step's ``model`` axis (`xla_cost.parallel.sharding`):
every kernel split on its output channels (features), biases and BatchNorm
scales with them; XLA gathers the activations each layer needs whole."""
setattr(_ThreeLayerMLP, RULES_ATTRIBUTE, CHANNEL_RULES)  # read by `xla_cost.parallel.sharding.model_rules`
setattr(ConvNet, RULES_ATTRIBUTE, CHANNEL_RULES)  # read by `xla_cost.parallel.sharding.model_rules`
setattr(DeeperConvNet, RULES_ATTRIBUTE, CHANNEL_RULES)  # read by `xla_cost.parallel.sharding.model_rules`

_SOURCE = "Epoch AI, backward-forward FLOP ratio, Appendix A"

SPECS: list[ModelSpec] = [
    ModelSpec(
        "linear_net",
        "Seed 001 LinearNet: 150528 -> 4096 -> 128 -> 10, nearly all weights in fc1",
        LinearNet,
        lambda c: LinearNet.input_shape,
        source=_SOURCE,
    ),
    ModelSpec(
        "one_net",
        "Seed 001 OneNet: 1 -> 4096 -> 128 -> 10, nearly all weights after fc1",
        OneNet,
        lambda c: OneNet.input_shape,
        source=_SOURCE,
    ),
    ModelSpec(
        "conv_net",
        "Seed 001 ConvNet: two 7x7/2 convs with max-pools, global pool, fc1",
        ConvNet,
        image_shape,
        source=_SOURCE,
    ),
    ModelSpec(
        "deeper_conv_net",
        "Seed 001 DeeperConvNet: 7x7/2 conv, depth x shared 3x3 conv, 7x7/2 conv, fc1",
        DeeperConvNet,
        image_shape,
        source=_SOURCE,
        minimums={"depth": 0},  # seed 001 studies 0 intermediate layers too
    ),
]
"""The zoo entries of this family."""
