"""Small custom models for the tests (also loaded by the CLI as tests.custom_models:X)."""

from __future__ import annotations

import flax.linen as nn
import jax
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


# --------------------------------------------------------------------------- loops

# Width, number of blocks, classes. The width is realistic on purpose: XLA's
# fusion duplicates small elementwise producers (bias add, residual) into each
# consumer and counts every copy, which the jaxpr counts once. At width 16 that
# is ~0.7% of a block's backward and differs between a scanned and an unrolled
# program; at width 128 the matmuls dominate and it is below 0.1%.
D_SCAN, N_SCAN, C_SCAN = 128, 12, 10


class ResidualBlock(nn.Module):
    """up (D -> 2D) -> relu -> down (2D -> D) -> + input; an ``nn.scan`` carry."""

    @nn.compact
    def __call__(self, x, _=None):
        h = nn.relu(nn.Dense(2 * D_SCAN, name="up")(x))
        return nn.Dense(D_SCAN, name="down")(h) + x, None


class ScannedMLP(nn.Module):
    """embed -> N_SCAN ResidualBlocks with ``nn.scan`` (traced once) -> head."""

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(D_SCAN, name="embed")(x)
        stack = nn.scan(
            ResidualBlock, variable_axes={"params": 0}, split_rngs={"params": True},
            length=N_SCAN,
        )
        x, _ = stack(name="layers")(x, None)
        return nn.Dense(C_SCAN, name="head")(x)


class UnrolledMLP(nn.Module):
    """ScannedMLP with the blocks unrolled in Python: block_0 ... block_11."""

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(D_SCAN, name="embed")(x)
        for i in range(N_SCAN):
            x, _ = ResidualBlock(name=f"block_{i}")(x)
        return nn.Dense(C_SCAN, name="head")(x)


OUTER, INNER = 3, 4  # trip counts of NestedLoopNet


class NestedLoopNet(nn.Module):
    """One D_SCAN x D_SCAN kernel applied OUTER*INNER times: a fori_loop in a scan."""

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(D_SCAN, name="embed")(x)
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (D_SCAN, D_SCAN))

        def inner(_, h):
            return jnp.tanh(h @ kernel)

        def outer(h, _):
            return jax.lax.fori_loop(0, INNER, inner, h), None

        x, _ = jax.lax.scan(outer, x, None, length=OUTER)
        return nn.Dense(C_SCAN, name="head")(x)


class DynamicLoopNet(nn.Module):
    """A while loop whose trip count depends on the data: unknowable statically.

    The loop rescales the inputs (not the parameters), so it needs no gradient.
    """

    @nn.compact
    def __call__(self, x):
        def cond(carry):
            return jnp.sum(jnp.abs(carry)) < 100.0

        def body(carry):
            return carry * 2.0 + 1.0

        x = jax.lax.while_loop(cond, body, x)
        x = nn.Dense(D_SCAN, name="embed")(x)
        return nn.Dense(C_SCAN, name="head")(x)


N_NNX_SCAN = 6  # blocks in NnxScanned


class NnxScanBlock(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.lin = nnx.Linear(D_SCAN, D_SCAN, rngs=rngs)

    def __call__(self, x):
        return nnx.relu(self.lin(x))


class NnxScanned(nnx.Module):
    """embed -> N_NNX_SCAN blocks created with nnx.vmap and run with nnx.scan -> head."""

    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Linear(8, D_SCAN, rngs=rngs)

        @nnx.split_rngs(splits=N_NNX_SCAN)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create(rngs: nnx.Rngs) -> NnxScanBlock:
            return NnxScanBlock(rngs)

        self.blocks = create(rngs)
        self.head = nnx.Linear(D_SCAN, C_SCAN, rngs=rngs)

    def __call__(self, x):
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        def step(h, block):
            return block(h)

        return self.head(step(self.embed(x), self.blocks))


class TanhBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        return jnp.tanh(nn.Dense(D_SCAN, name="dense")(x))


class TanhCarry(nn.Module):
    @nn.compact
    def __call__(self, x, _=None):
        return jnp.tanh(nn.Dense(D_SCAN, name="dense")(x)), None


class RematMLP(nn.Module):
    """embed -> 4 TanhBlocks, each under ``nn.remat`` (jax.checkpoint) if ``remat`` -> head;
    ``scanned``: the 4 blocks under one ``nn.scan`` (`TanhCarry`)."""

    remat: bool = True
    scanned: bool = False

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(D_SCAN, name="embed")(x)
        if self.scanned:
            carry = nn.remat(TanhCarry) if self.remat else TanhCarry
            x, _ = nn.scan(carry, variable_axes={"params": 0}, split_rngs={"params": True}, length=4)(
                name="blocks")(x, None)
        else:
            block = nn.remat(TanhBlock) if self.remat else TanhBlock
            for i in range(4):
                x = block(name=f"b{i}")(x)
        return nn.Dense(C_SCAN, name="head")(x)


def dies_on_its_first_attempt(attempts: str):
    """A Dense(D_OUT) whose first construction kills the process it runs in, as the
    kernel's out-of-memory killer would a sweep's worker; later ones build it.

    ``attempts``: a file that gets one line per call (the tests count the attempts).
    Never call it in the test process itself: it sends SIGKILL to its own process.
    """
    import os
    import signal

    with open(attempts, "a", encoding="ascii") as handle:
        handle.write(f"{os.getpid()}\n")
    with open(attempts, encoding="ascii") as handle:
        first = len(handle.read().splitlines()) == 1
    if first:
        os.kill(os.getpid(), signal.SIGKILL)
    return nn.Dense(D_OUT)
