"""Small custom models for the tests (also loaded by the CLI as tests.custom_models:X)."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
from flax import nnx

D_IN, D_HIDDEN, D_OUT = 12, 32, 5


class LinenBatchNormNet(nn.Module):
    """Dense -> BatchNorm -> relu -> Dense, with a ``train`` flag."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dense(D_HIDDEN, name="fc1")(x)
        x = nn.BatchNorm(use_running_average=not train, name="bn")(x)
        return nn.Dense(D_OUT, name="fc2")(nn.relu(x))


class LinenIntParam(nn.Module):
    """A model with an integer parameter: not differentiable."""

    @nn.compact
    def __call__(self, x):
        table = self.param("table", lambda key, shape: jnp.zeros(shape, jnp.int32), (3,))
        return nn.Dense(D_OUT)(x) + table.sum()


class NnxMLP(nnx.Module):
    """fc1 (D_IN -> D_HIDDEN) -> relu -> fc2 -> relu -> fc3 (-> D_OUT)."""

    def __init__(self, rngs: nnx.Rngs):
        self.fc1 = nnx.Linear(D_IN, D_HIDDEN, rngs=rngs)
        self.fc2 = nnx.Linear(D_HIDDEN, D_HIDDEN, rngs=rngs)
        self.fc3 = nnx.Linear(D_HIDDEN, D_OUT, rngs=rngs)

    def __call__(self, x):
        return self.fc3(nnx.relu(self.fc2(nnx.relu(self.fc1(x)))))


class NnxBlock(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.dense = nnx.Linear(D_HIDDEN, D_HIDDEN, rngs=rngs)
        self.bn = nnx.BatchNorm(D_HIDDEN, rngs=rngs)
        self.drop = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        return self.drop(nnx.relu(self.bn(self.dense(x))))


class NnxNested(nnx.Module):
    """stem -> two blocks (Dense, BatchNorm, Dropout) in a list -> head."""

    def __init__(self, rngs: nnx.Rngs):
        self.stem = nnx.Linear(D_IN, D_HIDDEN, rngs=rngs)
        self.blocks = nnx.List([NnxBlock(rngs) for _ in range(2)])
        self.head = nnx.Linear(D_HIDDEN, D_OUT, rngs=rngs)

    def __call__(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def linen_factory():
    """A zero-argument factory, as the CLI accepts."""
    return LinenBatchNormNet()
