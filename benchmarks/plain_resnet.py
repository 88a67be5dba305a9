"""ResNet-18 ... ResNet-152 in plain Flax Linen, for the hand-written baseline of
`bench_analyze.py`: a script a user writes without xla_cost imports nothing of it.

The layout is the zoo's (`xla_cost.zoo`'s ``models/resnet.py``, torchvision's v1.5):
a 7x7/2 stem without bias, BatchNorm (momentum 0.9, epsilon 1e-5, batch statistics in
training), a 3x3/2 max-pool padded by 1, bottleneck blocks striding on their 3x3
convolution with a 1x1 strided projection where the shape changes, a global average
pool and a Dense classifier. Explicit torchvision padding (7x7: 3, 3x3: 1, 1x1: 0).
Nothing here validates inputs, carries sharding rules or custom initialisers: none of
it changes what is compiled. `bench_analyze.py --check-plain` checks that each model
here has the zoo's parameter count and XLA's FLOP of the zoo's forward pass.

Only jax and flax are imported.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

STAGES = {
    "resnet18": ((2, 2, 2, 2), False),
    "resnet34": ((3, 4, 6, 3), False),
    "resnet50": ((3, 4, 6, 3), True),
    "resnet101": ((3, 4, 23, 3), True),
    "resnet152": ((3, 8, 36, 3), True),
}
"""Blocks per stage, and whether the blocks are bottlenecks, per model name."""


def conv(features: int, kernel: int, stride: int, name: str) -> nn.Conv:
    pad = (kernel - 1) // 2
    return nn.Conv(features, (kernel, kernel), strides=(stride, stride), padding=((pad, pad), (pad, pad)),
                   use_bias=False, name=name)


def norm(name: str, train: bool) -> nn.BatchNorm:
    return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, name=name)


class Block(nn.Module):
    width: int
    strides: int
    bottleneck: bool

    @nn.compact
    def __call__(self, x, train: bool = True):
        out_width = self.width * (4 if self.bottleneck else 1)
        if self.bottleneck:
            y = nn.relu(norm("bn1", train)(conv(self.width, 1, 1, "conv1")(x)))
            y = nn.relu(norm("bn2", train)(conv(self.width, 3, self.strides, "conv2")(y)))
            y = norm("bn3", train)(conv(out_width, 1, 1, "conv3")(y))
        else:
            y = nn.relu(norm("bn1", train)(conv(self.width, 3, self.strides, "conv1")(x)))
            y = norm("bn2", train)(conv(self.width, 3, 1, "conv2")(y))
        if self.strides != 1 or x.shape[-1] != out_width:
            x = norm("downsample_bn", train)(conv(out_width, 1, self.strides, "downsample_conv")(x))
        return nn.relu(y + x)


class ResNet(nn.Module):
    stage_sizes: tuple[int, ...]
    bottleneck: bool
    num_classes: int = 1000

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.relu(norm("bn1", train)(conv(64, 7, 2, "conv1")(x)))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for stage, (blocks, width) in enumerate(zip(self.stage_sizes, (64, 128, 256, 512))):
            for index in range(blocks):
                strides = 2 if stage > 0 and index == 0 else 1
                x = Block(width, strides, self.bottleneck, name=f"layer{stage + 1}_{index}")(x, train)
        return nn.Dense(self.num_classes, name="fc")(jnp.mean(x, axis=(1, 2)))


def build_model(name: str, num_classes: int = 1000, image_size: int = 224) -> ResNet:
    """The plain ResNet called ``name`` (a key of `STAGES`); ``image_size`` is the inputs'."""
    stage_sizes, bottleneck = STAGES["".join(c for c in name.lower() if c not in "-_ ")]
    return ResNet(stage_sizes, bottleneck, num_classes)


def example_inputs(name: str, batch: int, num_classes: int = 1000, image_size: int = 224) -> jax.ShapeDtypeStruct:
    """Abstract float32 NHWC images ``(batch, image_size, image_size, 3)``."""
    return jax.ShapeDtypeStruct((batch, image_size, image_size, 3), jnp.float32)
