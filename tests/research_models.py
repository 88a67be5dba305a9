"""Models written the way public research code writes them, for the tests.

Each class follows a pattern from a well-known public Flax codebase (named in
its docstring), written here from scratch at small sizes. None of them is bent
to fit xla_cost: they are called the way their own training loops call them.
The CLI loads them as ``tests.research_models:NAME``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import nnx

# ---------------------------------------------------------------- data parallel BN

WIDTH, CLASSES = 16, 10


class DataParallelBlock(nn.Module):
    """A residual block in the style of Flax's ImageNet example (`ResNetBlock`)."""

    filters: int
    conv: Callable[..., nn.Module]
    norm: Callable[..., nn.Module]

    @nn.compact
    def __call__(self, x):
        residual = x
        y = self.conv(self.filters, (3, 3))(x)
        y = self.norm()(y)
        y = nn.relu(y)
        y = self.conv(self.filters, (3, 3))(y)
        y = self.norm(scale_init=nn.initializers.zeros_init())(y)
        return nn.relu(residual + y)


class DataParallelResNet(nn.Module):
    """Flax ImageNet-example style: BatchNorm(axis_name="batch") for `pmap`.

    The example builds ``norm = partial(nn.BatchNorm, use_running_average=not
    train, momentum=0.9, epsilon=1e-5, axis_name='batch')`` and its train step
    runs under ``jax.pmap(..., axis_name='batch')``; called outside ``pmap``, the
    batch statistics' ``pmean`` has no axis to reduce over.
    """

    num_blocks: int = 2
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = functools.partial(nn.Conv, use_bias=False, dtype=self.dtype)
        norm = functools.partial(
            nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5,
            dtype=self.dtype, axis_name="batch",
        )
        x = conv(WIDTH, (3, 3), name="conv_init")(x)
        x = norm(name="bn_init")(x)
        x = nn.relu(x)
        for i in range(self.num_blocks):
            x = DataParallelBlock(WIDTH, conv=conv, norm=norm, name=f"block{i}")(x)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(CLASSES, dtype=self.dtype, name="head")(x)


class CrossReplicaMean(nn.Module):
    """A model that averages over a data axis it names itself (``lax.pmean``)."""

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(WIDTH)(x)
        h = h - jax.lax.pmean(h.mean(axis=0, keepdims=True), axis_name="data")
        return nn.Dense(CLASSES)(h)


# ---------------------------------------------------------------- call arguments


class NnxMnistCNN(nnx.Module):
    """Flax's NNX MNIST tutorial style: dropout keys come in as ``model(x, rngs=rngs)``."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 8, kernel_size=(3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(8, 16, kernel_size=(3, 3), rngs=rngs)
        self.avg_pool = functools.partial(nnx.avg_pool, window_shape=(2, 2), strides=(2, 2))
        self.linear1 = nnx.Linear(16 * 7 * 7, 32, rngs=rngs)
        self.dropout = nnx.Dropout(rate=0.025)
        self.linear2 = nnx.Linear(32, CLASSES, rngs=rngs)

    def __call__(self, x, rngs: nnx.Rngs):
        x = self.avg_pool(nnx.relu(self.conv1(x)))
        x = self.avg_pool(nnx.relu(self.conv2(x)))
        x = x.reshape(x.shape[0], -1)
        x = self.dropout(nnx.relu(self.linear1(x)), rngs=rngs)
        return self.linear2(x)


SEQ, VOCAB, D_MODEL = 8, 32, 16


class MaskedEncoder(nn.Module):
    """A Linen encoder whose call needs keywords: a padding mask and ``deterministic``.

    Its dropout draws from ``self.make_rng('dropout')`` and a second stream
    ``'noise'`` (as diffusion and VAE code does), so ``apply`` needs
    ``rngs={'dropout': ..., 'noise': ...}``. ``embed`` is a second method.
    """

    @nn.compact
    def __call__(self, tokens, *, mask, deterministic: bool):
        x = self.embed(tokens)
        x = x + 0.01 * jax.random.normal(self.make_rng("noise"), x.shape)
        attention = nn.MultiHeadDotProductAttention(num_heads=2, name="attn")
        x = x + attention(x, mask=nn.make_attention_mask(mask, mask), deterministic=deterministic)
        x = nn.Dropout(0.1, name="drop")(x, deterministic=deterministic)
        return nn.Dense(VOCAB, name="head")(x)

    @nn.compact
    def embed(self, tokens):
        return nn.Embed(VOCAB, D_MODEL, name="wte")(tokens)


class GPTConfig:
    """A minGPT/nanoGPT-port style config object."""

    block_size = SEQ
    vocab_size = VOCAB
    n_embd = D_MODEL
    n_layer = 2


class GPTPort(nn.Module):
    """A nanoGPT port in the style of the public JAX ports.

    It overrides ``Module.init(self, rng)`` with its own signature (making a
    dummy batch itself), returns ``(logits, loss)`` when given targets and
    ``logits`` otherwise, and takes ``deterministic`` as a keyword.
    """

    config: GPTConfig = GPTConfig()

    @nn.compact
    def __call__(self, idx, deterministic: bool | None = None, targets=None):
        cfg = self.config
        pos = jnp.arange(idx.shape[1])[None]
        x = nn.Embed(cfg.vocab_size, cfg.n_embd, name="wte")(idx)
        x = x + nn.Embed(cfg.block_size, cfg.n_embd, name="wpe")(pos)
        for i in range(cfg.n_layer):
            h = nn.LayerNorm(name=f"ln_{i}")(x)
            x = x + nn.Dense(cfg.n_embd, name=f"mlp_{i}")(nn.gelu(h))
        logits = nn.Dense(cfg.vocab_size, use_bias=False, name="lm_head")(x)
        if targets is None:
            return logits
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
        return logits, loss

    def init(self, rng):  # noqa: D102 - the port's own init, not Flax's
        tokens = jnp.zeros((2, self.config.block_size), dtype=jnp.int32)
        return jax.jit(super().init, static_argnums=(2,))(rng, tokens, True)


class TupleOutput(nn.Module):
    """Returns ``(logits, auxiliary loss)``, as mixture-of-experts code does."""

    @nn.compact
    def __call__(self, x):
        logits = nn.Dense(CLASSES, name="head")(nn.relu(nn.Dense(WIDTH, name="body")(x)))
        return logits, jnp.mean(logits**2)


class DictOutput(nn.Module):
    """Returns a dict, as HF-style Flax models do."""

    @nn.compact
    def __call__(self, x):
        logits = nn.Dense(CLASSES, name="head")(nn.relu(nn.Dense(WIDTH, name="body")(x)))
        return {"logits": logits, "hidden": x}


@flax.struct.dataclass
class Output:
    """A model's outputs as a record, as gemma's Transformer returns them (``gm.nn.Output``)."""

    logits: jax.Array
    cache: dict | None


class StructOutput(nn.Module):
    """Returns a `flax.struct.dataclass` ``Output(logits=..., cache=None)``, as gemma does."""

    @nn.compact
    def __call__(self, x):
        return Output(logits=nn.Dense(CLASSES, name="head")(nn.relu(nn.Dense(WIDTH, name="body")(x))), cache=None)


class Logits(NamedTuple):
    hidden: jax.Array
    logits: jax.Array


class NamedTupleOutput(nn.Module):
    """Returns a NamedTuple whose logits are not its first field."""

    @nn.compact
    def __call__(self, x):
        return Logits(hidden=x, logits=nn.Dense(CLASSES, name="head")(nn.relu(nn.Dense(WIDTH, name="body")(x))))


class LogitsOnly(nn.Module):
    """`TupleOutput` without its auxiliary output."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(CLASSES, name="head")(nn.relu(nn.Dense(WIDTH, name="body")(x)))


class TwoLayerMLP(nn.Module):
    """A Linen MLP analysed through ``TrainState.apply_fn`` (`model.apply`)."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(CLASSES, name="out")(nn.relu(nn.Dense(WIDTH, name="hidden")(x)))


class NoParams(nn.Module):
    """A model without parameters."""

    @nn.compact
    def __call__(self, x):
        return nn.relu(x)


class WithDtype(nn.Module):
    """A Linen model with a ``dtype`` field (computes in it)."""

    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        return nn.Dense(CLASSES, dtype=self.dtype)(x)


class WithoutDtype(nn.Module):
    """A Linen model without a ``dtype`` field (computes in the inputs' dtype)."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(CLASSES, dtype=jnp.float32)(x)


class Failing(nn.Module):
    """A model that raises an error of its own, unrelated to shapes."""

    @nn.compact
    def __call__(self, x):
        nn.Dense(CLASSES)(x)
        raise RuntimeError("the config file was not found")
