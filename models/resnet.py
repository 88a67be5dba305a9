"""ResNet: the residual networks of He et al. (2016), "Deep Residual Learning for
Image Recognition", in Flax Linen, laid out as ``torchvision.models.resnet``.

Inputs are NHWC images ``(B, image_size, image_size, 3)``; outputs are logits
``(B, num_classes)``. The layout is torchvision's (ResNet "v1.5": a bottleneck
block strides on its 3x3 convolution, not on its first 1x1)::

    conv1 7x7/2, 64 (padding 3, no bias) -> bn1 -> ReLU -> max-pool 3x3/2 (padding 1)
    layer1 ... layer4: stages of base width 64, 128, 256, 512; the first block of
        layer2..4 strides by 2
    global average pool -> fc (Dense with bias) to num_classes

Blocks are named like torchvision's ``layerN.M`` modules: ``layer1_0``,
``layer1_1``, ... Inside a block: ``conv1``/``bn1``, ``conv2``/``bn2`` (and
``conv3``/``bn3`` for a bottleneck), and ``downsample_conv``/``downsample_bn`` (a
1x1 strided projection) when the block changes the shape of its input::

    BasicBlock (expansion 1):  3x3/s -> BN -> ReLU -> 3x3 -> BN, + shortcut, ReLU
    Bottleneck (expansion 4):  1x1 -> BN -> ReLU -> 3x3/s -> BN -> ReLU
                               -> 1x1 (x4 width) -> BN, + shortcut, ReLU

Every convolution has no bias and torchvision's explicit padding (7x7: 3, 3x3: 1,
1x1: 0), so that the feature maps have torchvision's shapes for any image size.
BatchNorm runs in training mode by default (``__call__(x, train=True)``: batch
statistics, the running averages in the mutable ``batch_stats`` collection,
momentum 0.9 i.e. torchvision's 0.1, epsilon 1e-5); the cost analyzer passes
``train=True`` itself.

Parameters (BatchNorm scale and bias count, its running statistics do not, as
torchvision's ``parameters()`` excludes buffers): ResNet-18 11,689,512, ResNet-34
21,797,672, ResNet-50 25,557,032, ResNet-101 44,549,160 and ResNet-152
60,192,808 at 1000 classes; `resnet_parameters` is the closed form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import flax.linen as nn
import jax.numpy as jnp

from ._common import expect_input_shape, image_shape
from ._spec import ModelSpec
from xla_cost.errors import InputError
from xla_cost.parallel.sharding import RULES_ATTRIBUTE

__all__ = [
    "SPECS",
    "BasicBlock",
    "Bottleneck",
    "ResNet",
    "ResNet18",
    "ResNet34",
    "ResNet50",
    "ResNet101",
    "ResNet152",
    "STAGE_WIDTHS",
    "resnet_parameters",
]

Dtype = Any

STAGE_WIDTHS: tuple[int, ...] = (64, 128, 256, 512)
"""Base width of each stage (the 3x3 convolutions' width; a bottleneck's output is 4x)."""

_STEM_WIDTH = 64
_BN_MOMENTUM = 0.9  # Flax's decay of the running averages: torchvision's momentum 0.1
_BN_EPS = 1e-5

# torchvision's initialization: Kaiming-normal (fan_out, ReLU gain) convolutions,
# BatchNorm scale 1 and bias 0, PyTorch's default Linear (uniform +-1/sqrt(fan_in)).
_CONV_INIT = nn.initializers.variance_scaling(2.0, "fan_out", "normal")
_FC_INIT = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def _conv(features: int, kernel: int, stride: int, name: str, m: Any) -> nn.Conv:
    pad = (kernel - 1) // 2  # 7x7: 3, 3x3: 1, 1x1: 0, as torchvision
    return nn.Conv(
        features,
        (kernel, kernel),
        strides=(stride, stride),
        padding=((pad, pad), (pad, pad)),
        use_bias=False,
        dtype=m.dtype,
        param_dtype=m.param_dtype,
        kernel_init=_CONV_INIT,
        name=name,
    )


def _batch_norm(name: str, train: bool, m: Any) -> nn.BatchNorm:
    return nn.BatchNorm(
        use_running_average=not train,
        momentum=_BN_MOMENTUM,
        epsilon=_BN_EPS,
        dtype=m.dtype,
        param_dtype=m.param_dtype,
        name=name,
    )


class BasicBlock(nn.Module):
    """Two 3x3 convolutions (the first one strided) and a residual; expansion 1.

    Attributes:
      features: the block's width (its output has ``features`` channels).
      strides: the first convolution's (and the projection's) stride.
      dtype: the computation dtype.
      param_dtype: the parameters' dtype.
    """

    features: int
    strides: int = 1
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    expansion: ClassVar[int] = 1

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        out = _conv(self.features, 3, self.strides, "conv1", self)(x)
        out = nn.relu(_batch_norm("bn1", train, self)(out))
        out = _conv(self.features, 3, 1, "conv2", self)(out)
        out = _batch_norm("bn2", train, self)(out)
        return nn.relu(out + _shortcut(x, self.features, self.strides, train, self))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided, torchvision's v1.5), 1x1 expand x4, and a residual.

    Attributes:
      features: the base width (the 3x3 convolution's); the output has
        ``4 * features`` channels.
      strides: the 3x3 convolution's (and the projection's) stride.
      dtype: the computation dtype.
      param_dtype: the parameters' dtype.
    """

    features: int
    strides: int = 1
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    expansion: ClassVar[int] = 4

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        out = _conv(self.features, 1, 1, "conv1", self)(x)
        out = nn.relu(_batch_norm("bn1", train, self)(out))
        out = _conv(self.features, 3, self.strides, "conv2", self)(out)
        out = nn.relu(_batch_norm("bn2", train, self)(out))
        out = _conv(self.features * self.expansion, 1, 1, "conv3", self)(out)
        out = _batch_norm("bn3", train, self)(out)
        shortcut = _shortcut(x, self.features * self.expansion, self.strides, train, self)
        return nn.relu(out + shortcut)


def _shortcut(x: jnp.ndarray, features: int, strides: int, train: bool, m: Any) -> jnp.ndarray:
    """The identity, or torchvision's ``downsample`` (1x1 strided conv + BN) if the shape changes."""
    if strides == 1 and x.shape[-1] == features:
        return x
    x = _conv(features, 1, strides, "downsample_conv", m)(x)
    return _batch_norm("downsample_bn", train, m)(x)


class ResNet(nn.Module):
    """ResNet classifier: images ``(B, image_size, image_size, 3)`` -> logits ``(B, num_classes)``.

    Attributes:
      stage_sizes: blocks per stage (``layer1`` ... ``layerN``; torchvision has 4).
      bottleneck: `Bottleneck` blocks (ResNet-50 and deeper) instead of `BasicBlock`.
      num_classes: outputs of ``fc``.
      image_size: the inputs' height and width; inputs must be exactly this size.
      dtype: the computation dtype.
      param_dtype: the parameters' dtype.

    The named depths (`ResNet18` ... `ResNet152`) fix ``stage_sizes`` and
    ``bottleneck`` as class constants, so their configuration is ``num_classes``
    and ``image_size`` alone.
    """

    stage_sizes: tuple[int, ...]
    bottleneck: bool
    num_classes: int = 1000
    image_size: int = 224
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    def _validate(self, x: Any) -> None:
        name = type(self).__name__
        if not 1 <= len(self.stage_sizes) <= len(STAGE_WIDTHS) or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in self.stage_sizes
        ):
            raise InputError(
                f"stage_sizes of 1 to {len(STAGE_WIDTHS)} stages of at least one block each",
                repr(tuple(self.stage_sizes)),
                "Use e.g. stage_sizes=(3, 4, 6, 3).",
            )
        expect_input_shape(name, x, (self.image_size, self.image_size, 3))
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise InputError(
                f"{name} inputs of floating-point images",
                f"dtype {x.dtype}",
                "Pass float32 or bfloat16 images (a zoo model's example inputs already are).",
            )

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool = True) -> jnp.ndarray:
        self._validate(x)
        x = _conv(_STEM_WIDTH, 7, 2, "conv1", self)(x)
        x = nn.relu(_batch_norm("bn1", train, self)(x))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))

        block_cls = Bottleneck if self.bottleneck else BasicBlock
        for stage, (blocks, width) in enumerate(zip(self.stage_sizes, STAGE_WIDTHS)):
            for index in range(blocks):
                strides = 2 if stage > 0 and index == 0 else 1
                x = block_cls(
                    width,
                    strides,
                    dtype=self.dtype,
                    param_dtype=self.param_dtype,
                    name=f"layer{stage + 1}_{index}",
                )(x, train)

        x = jnp.mean(x, axis=(1, 2))  # global average pool
        return nn.Dense(
            self.num_classes,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            kernel_init=_FC_INIT,
            name="fc",
        )(x)


class ResNet18(ResNet):
    """ResNet-18: basic blocks (2, 2, 2, 2); 11,689,512 parameters at 1000 classes."""

    stage_sizes: ClassVar[tuple[int, ...]] = (2, 2, 2, 2)
    bottleneck: ClassVar[bool] = False


class ResNet34(ResNet):
    """ResNet-34: basic blocks (3, 4, 6, 3); 21,797,672 parameters."""

    stage_sizes: ClassVar[tuple[int, ...]] = (3, 4, 6, 3)
    bottleneck: ClassVar[bool] = False


class ResNet50(ResNet):
    """ResNet-50: bottleneck blocks (3, 4, 6, 3); 25,557,032 parameters."""

    stage_sizes: ClassVar[tuple[int, ...]] = (3, 4, 6, 3)
    bottleneck: ClassVar[bool] = True


class ResNet101(ResNet):
    """ResNet-101: bottleneck blocks (3, 4, 23, 3); 44,549,160 parameters."""

    stage_sizes: ClassVar[tuple[int, ...]] = (3, 4, 23, 3)
    bottleneck: ClassVar[bool] = True


class ResNet152(ResNet):
    """ResNet-152: bottleneck blocks (3, 8, 36, 3); 60,192,808 parameters."""

    stage_sizes: ClassVar[tuple[int, ...]] = (3, 8, 36, 3)
    bottleneck: ClassVar[bool] = True


def resnet_parameters(stage_sizes: Sequence[int], bottleneck: bool, num_classes: int = 1000) -> int:
    """The closed-form trainable parameter count of `ResNet` (BatchNorm: 2 per channel)."""

    def conv_bn(cin: int, cout: int, k: int) -> int:
        return cin * cout * k * k + 2 * cout

    expansion = 4 if bottleneck else 1
    total = conv_bn(3, _STEM_WIDTH, 7)
    channels = _STEM_WIDTH
    for stage, (blocks, width) in enumerate(zip(stage_sizes, STAGE_WIDTHS)):
        for index in range(blocks):
            strides = 2 if stage > 0 and index == 0 else 1
            out = width * expansion
            if bottleneck:
                total += conv_bn(channels, width, 1) + conv_bn(width, width, 3) + conv_bn(width, out, 1)
            else:
                total += conv_bn(channels, width, 3) + conv_bn(width, width, 3)
            if strides != 1 or channels != out:
                total += conv_bn(channels, out, 1)
            channels = out
    return total + channels * num_classes + num_classes


CHANNEL_RULES: tuple[tuple[str, tuple[str | None, ...]], ...] = (
    (r"kernel$", ("model",)),
    (r"(bias|scale)$", ("model",)),
)
"""Partition rules for a sharded step's ``model`` axis (`xla_cost.parallel.sharding`):
every kernel split on its output channels (features), biases and BatchNorm
scales with them; XLA gathers the activations each layer needs whole."""
setattr(ResNet, RULES_ATTRIBUTE, CHANNEL_RULES)  # read by `xla_cost.parallel.sharding.model_rules`

_SOURCE = "He et al. 2016; torchvision.models.resnet"

SPECS: list[ModelSpec] = [
    ModelSpec(
        "resnet18",
        "ResNet-18: 18 layers, basic blocks (2, 2, 2, 2), torchvision layout, BatchNorm in training mode",
        ResNet18,
        image_shape,
        source=_SOURCE,
        aliases=("microsoft/resnet-18",),
    ),
    ModelSpec(
        "resnet34",
        "ResNet-34: 34 layers, basic blocks (3, 4, 6, 3), torchvision layout, BatchNorm in training mode",
        ResNet34,
        image_shape,
        source=_SOURCE,
        aliases=("microsoft/resnet-34",),
    ),
    ModelSpec(
        "resnet50",
        "ResNet-50: 50 layers, bottleneck blocks (3, 4, 6, 3), torchvision v1.5 (stride on the 3x3)",
        ResNet50,
        image_shape,
        source=_SOURCE,
        aliases=("microsoft/resnet-50",),
    ),
    ModelSpec(
        "resnet101",
        "ResNet-101: 101 layers, bottleneck blocks (3, 4, 23, 3), torchvision v1.5 (stride on the 3x3)",
        ResNet101,
        image_shape,
        source=_SOURCE,
        aliases=("microsoft/resnet-101",),
    ),
    ModelSpec(
        "resnet152",
        "ResNet-152: 152 layers, bottleneck blocks (3, 8, 36, 3), torchvision v1.5 (stride on the 3x3)",
        ResNet152,
        image_shape,
        source=_SOURCE,
        aliases=("microsoft/resnet-152",),
    ),
]
"""The zoo entries of the family, for `models.REGISTRY`."""
