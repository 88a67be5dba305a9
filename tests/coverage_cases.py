"""Every Flax layer and common op, each in a small trainable model: the cases of
tests/count/test_coverage.py and of the coverage table (benchmarks/coverage.py).

A case is a model, its abstract inputs and, where the default softmax
cross-entropy does not fit, a loss. Shapes are small (the suite runs on a 2-core
machine) but the layers are at least 64 wide, so that XLA's fusion of a few
cheap operations does not dominate a phase's count. Activations and ops are
grouped into a few models each; every layer family has a model of its own.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import flax.linen as nn
import flax.linen.activation as linen_activation
import flax.linen.pooling as linen_pooling
import jax
import jax.numpy as jnp
from flax import nnx
from jax.extend import core as jex_core

import xla_cost
from xla_cost.step.workload import build_workload

__all__ = [
    "Case", "CASES", "PHASES", "BATCH", "WIDTH", "CLASSES",
    "activation_names", "ACTIVATION_CALLS", "analyze_case", "phase_jaxprs", "primitives_in",
]

BATCH, WIDTH, CLASSES = 16, 64, 10
"""Batch, feature width and output classes of every case."""

SEQ, VOCAB, HEADS = 16, 128, 4
"""Sequence length, vocabulary and attention heads of the sequence cases."""

PHASES: tuple[str, ...] = ("forward", "grad", "update")
"""The phases whose jaxpr and XLA counts the coverage test compares."""

OPTIMIZER = "adam"

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Case:
    """One model of the coverage matrix.

    Attributes:
      id: a readable name, ``<family>/<what>``, the test id and the table's row.
      build: makes the model (a Linen module, or an abstract NNX module).
      inputs: the abstract inputs (``jax.ShapeDtypeStruct``).
      covers: the layers or ops the case exercises (for the table).
      loss: ``loss(outputs, targets)``; None for the default cross-entropy.
    """

    id: str
    build: Callable[[], Any]
    inputs: Callable[[], Any]
    covers: tuple[str, ...]
    loss: Callable[[jax.Array, jax.Array], jax.Array] | None = None


def _features(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, F32)


def _tokens() -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32)


def _nnx(cls: Callable[..., nnx.Module]) -> Callable[[], nnx.Module]:
    return lambda: nnx.eval_shape(lambda: cls(nnx.Rngs(0)))


# ------------------------------------------------------------------ activations


def activation_names() -> tuple[str, ...]:
    """The activation functions ``flax.linen.activation`` exports, found by enumeration.

    Every public callable that is not a class, a typing alias or Linen's
    ``compact`` decorator: a new activation in Flax shows up here (and the
    coverage test then asks for a case).
    """
    names = []
    for name, value in vars(linen_activation).items():
        if name.startswith("_") or not callable(value) or inspect.isclass(value):
            continue
        if getattr(value, "__module__", "") == "typing" or value is nn.compact:
            continue
        if inspect.ismodule(value):
            continue
        names.append(name)
    return tuple(sorted(names))


def _act(name: str) -> Callable[..., jax.Array]:
    return getattr(linen_activation, name)


ACTIVATION_CALLS: dict[str, Callable[[jax.Array], jax.Array]] = {
    # Each maps a (BATCH, WIDTH) activation to an array that broadcasts against it.
    "gelu": lambda h: _act("gelu")(h, approximate=True),
    "gelu(approximate=False)": lambda h: _act("gelu")(h, approximate=False),
    "glu": lambda h: _act("glu")(jnp.concatenate([h, h], axis=-1)),  # halves the axis
    "logsumexp": lambda h: _act("logsumexp")(h, axis=-1, keepdims=True),
    "one_hot": lambda h: _act("one_hot")(jnp.argmax(h, axis=-1), WIDTH) * h,
}
"""How the activations that need arguments (or change the shape) are applied;
the others are called as ``act(h)``."""


def _apply_activation(name: str, h: jax.Array) -> jax.Array:
    call = ACTIVATION_CALLS.get(name)
    return call(h) if call is not None else _act(name)(h)


class ActivationNet(nn.Module):
    """One Dense branch per activation, summed -> Dense head.

    Each activation gets an input of its own: applied to one shared input,
    XLA would share their common subexpressions (``max(h, 0)`` of relu and
    relu6), which the jaxpr count does not do.
    """

    names: tuple[str, ...]

    @nn.compact
    def __call__(self, x):
        y = sum(
            _apply_activation(name, nn.Dense(WIDTH, name=f"fc{i}")(x))
            for i, name in enumerate(self.names)
        )
        return nn.Dense(CLASSES, name="head")(y)


ACTIVATION_GROUPS: dict[str, tuple[str, ...]] = {
    "piecewise-linear": (
        "relu", "relu6", "leaky_relu", "hard_tanh", "hard_sigmoid", "hard_silu", "hard_swish",
    ),
    "exponential": (
        "elu", "celu", "selu", "softplus", "soft_sign", "sigmoid", "log_sigmoid", "silu",
        "swish", "tanh",
    ),
    "gelu": ("gelu", "gelu(approximate=False)"),
    "normalizing": ("softmax", "log_softmax", "logsumexp", "standardize", "normalize", "glu", "one_hot"),
}
"""Activations grouped by how XLA treats them, one model per group."""


# ------------------------------------------------------------------ jnp and lax ops


class OpsNet(nn.Module):
    """Dense -> an op (or a few) -> Dense head."""

    op: Callable[[jax.Array], jax.Array]

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(WIDTH, name="fc")(x)
        return nn.Dense(CLASSES, name="head")(self.op(h))


def _shuffle_ops(h: jax.Array) -> jax.Array:
    # split into halves, stack them, concatenate, select with where
    a, b = jnp.split(h, 2, axis=-1)
    stacked = jnp.stack([a, b], axis=1)  # (BATCH, 2, WIDTH / 2)
    joined = jnp.concatenate([stacked[:, 0] * stacked[:, 1], a + b], axis=-1)
    return jnp.where(h > 0, h, joined)


def _sort_ops(h: jax.Array) -> jax.Array:
    # sort, and gather along the axis by the sorted order
    order = jnp.argsort(h, axis=-1)
    return jnp.sort(h, axis=-1) + jnp.take_along_axis(h, order[:, ::-1], axis=-1)


def _top_k(h: jax.Array) -> jax.Array:
    values, _ = jax.lax.top_k(h, 8)
    return jnp.concatenate([values] * (WIDTH // 8), axis=-1) * h


def _one_hot(h: jax.Array) -> jax.Array:
    return jax.nn.one_hot(jnp.argmax(h, axis=-1), WIDTH) * h


OPS: dict[str, tuple[Callable[[jax.Array], jax.Array], tuple[str, ...]]] = {
    "split-stack-concatenate-where": (
        _shuffle_ops, ("jnp.split", "jnp.stack", "jnp.concatenate", "jnp.where"),
    ),
    "cumsum": (lambda h: jnp.cumsum(h, axis=-1), ("jnp.cumsum",)),
    "sort-take_along_axis": (_sort_ops, ("jnp.sort", "jnp.argsort", "jnp.take_along_axis")),
    "top_k": (_top_k, ("jax.lax.top_k",)),
    "one_hot": (_one_hot, ("jax.nn.one_hot",)),
}


# ------------------------------------------------------------------ Linen layers


class LinenDenseFamily(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(WIDTH, name="dense")(x)
        x = nn.DenseGeneral((4, WIDTH // 4), name="dense_general")(x)  # (B, 4, 16)
        x = nn.Einsum((4, WIDTH // 4, WIDTH), "bhd,hdo->bo", name="einsum")(x)
        return nn.Dense(CLASSES, name="head")(x)


class LinenConvs(nn.Module):
    @nn.compact
    def __call__(self, x):  # (B, 8, 8, 16)
        x = nn.Conv(WIDTH, (3, 3), name="conv")(x)
        x = nn.ConvTranspose(16, (3, 3), strides=(2, 2), name="conv_transpose")(x)
        return nn.Dense(CLASSES, name="head")(jnp.mean(x, axis=(1, 2)))


class LinenConvLocal(nn.Module):
    @nn.compact
    def __call__(self, x):  # (B, 8, 8, 16)
        x = nn.ConvLocal(16, (3, 3), name="conv_local")(x)
        return nn.Dense(CLASSES, name="head")(jnp.mean(x, axis=(1, 2)))


class LinenPooling(nn.Module):
    @nn.compact
    def __call__(self, x):  # (B, 8, 8, 16)
        x = nn.Conv(WIDTH, (3, 3), name="conv")(x)
        pooled = (
            linen_pooling.max_pool(x, (2, 2), (2, 2))
            + linen_pooling.avg_pool(x, (2, 2), (2, 2))
            + linen_pooling.min_pool(x, (3, 3), (2, 2), padding="SAME")
        )
        return nn.Dense(CLASSES, name="head")(jnp.mean(pooled, axis=(1, 2)))


class LinenEmbed(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, WIDTH, name="embed")(tokens)
        return nn.Dense(CLASSES, name="head")(x)


class LinenNorms(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.LayerNorm(name="layer_norm")(nn.Dense(WIDTH, name="fc1")(x))
        x = nn.RMSNorm(name="rms_norm")(nn.Dense(WIDTH, name="fc2")(x))
        x = nn.GroupNorm(num_groups=8, name="group_norm")(nn.Dense(WIDTH, name="fc3")(x))
        x = nn.BatchNorm(use_running_average=not train, name="batch_norm")(x)
        return nn.Dense(CLASSES, name="head")(x)


class LinenSyncBatchNorm(nn.Module):
    """BatchNorm synchronised over a data-parallel axis: its statistics are
    stacked, averaged with ``pmean`` and unstacked."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dense(WIDTH, name="fc")(x)
        x = nn.BatchNorm(use_running_average=not train, axis_name="batch", name="batch_norm")(x)
        return nn.Dense(CLASSES, name="head")(x)


def _attention_mask(tokens: jax.Array) -> jax.Array:
    # causal, and padding: token 0 is padding
    padding = nn.make_attention_mask(tokens > 0, tokens > 0)
    return nn.combine_masks(nn.make_causal_mask(tokens), padding)


class LinenAttention(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, WIDTH, name="embed")(tokens)
        x = nn.MultiHeadDotProductAttention(num_heads=HEADS, name="attention")(
            x, mask=_attention_mask(tokens)
        )
        return nn.Dense(CLASSES, name="head")(x)


class LinenDropout(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(WIDTH, name="fc")(x)
        x = nn.Dropout(0.1, deterministic=False, name="dropout")(x)
        return nn.Dense(CLASSES, name="head")(x)


class LinenRNN(nn.Module):
    cell: str

    @nn.compact
    def __call__(self, x):  # (B, SEQ, features)
        cell = getattr(nn, self.cell)(WIDTH, name="cell")
        x = nn.RNN(cell, name="rnn")(x)
        return nn.Dense(CLASSES, name="head")(x)


# ------------------------------------------------------------------ NNX layers


class NnxLinearFamily(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.linear = nnx.Linear(WIDTH, WIDTH, rngs=rngs)
        self.linear_general = nnx.LinearGeneral(WIDTH, (4, WIDTH // 4), rngs=rngs)
        self.einsum = nnx.Einsum("bhd,hdo->bo", (4, WIDTH // 4, WIDTH), (WIDTH,), rngs=rngs)
        self.head = nnx.Linear(WIDTH, CLASSES, rngs=rngs)

    def __call__(self, x):
        return self.head(self.einsum(self.linear_general(self.linear(x))))


class NnxConvs(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.conv = nnx.Conv(16, WIDTH, (3, 3), rngs=rngs)
        self.conv_transpose = nnx.ConvTranspose(WIDTH, 16, (3, 3), strides=(2, 2), rngs=rngs)
        self.head = nnx.Linear(16, CLASSES, rngs=rngs)

    def __call__(self, x):
        x = self.conv_transpose(self.conv(x))
        return self.head(jnp.mean(x, axis=(1, 2)))


class NnxEmbed(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
        self.head = nnx.Linear(WIDTH, CLASSES, rngs=rngs)

    def __call__(self, tokens):
        return self.head(self.embed(tokens))


class NnxNorms(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.fc1 = nnx.Linear(WIDTH, WIDTH, rngs=rngs)
        self.layer_norm = nnx.LayerNorm(WIDTH, rngs=rngs)
        self.fc2 = nnx.Linear(WIDTH, WIDTH, rngs=rngs)
        self.rms_norm = nnx.RMSNorm(WIDTH, rngs=rngs)
        self.fc3 = nnx.Linear(WIDTH, WIDTH, rngs=rngs)
        self.group_norm = nnx.GroupNorm(WIDTH, num_groups=8, rngs=rngs)
        self.batch_norm = nnx.BatchNorm(WIDTH, rngs=rngs)
        self.head = nnx.Linear(WIDTH, CLASSES, rngs=rngs)

    def __call__(self, x):
        x = self.layer_norm(self.fc1(x))
        x = self.rms_norm(self.fc2(x))
        x = self.batch_norm(self.group_norm(self.fc3(x)))
        return self.head(x)


class NnxAttention(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(HEADS, WIDTH, decode=False, rngs=rngs)
        self.head = nnx.Linear(WIDTH, CLASSES, rngs=rngs)

    def __call__(self, tokens):
        x = self.attention(self.embed(tokens), mask=_attention_mask(tokens))
        return self.head(x)


class NnxDropout(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.fc = nnx.Linear(WIDTH, WIDTH, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)
        self.head = nnx.Linear(WIDTH, CLASSES, rngs=rngs)

    def __call__(self, x):
        return self.head(self.dropout(self.fc(x)))


class NnxRNNs(nnx.Module):
    """One nnx.RNN per cell, one after the other."""

    def __init__(self, rngs: nnx.Rngs):
        self.lstm = nnx.RNN(nnx.LSTMCell(WIDTH, WIDTH, rngs=rngs))
        self.gru = nnx.RNN(nnx.GRUCell(WIDTH, WIDTH, rngs=rngs))
        self.optimized_lstm = nnx.RNN(nnx.OptimizedLSTMCell(WIDTH, WIDTH, rngs=rngs))
        self.simple = nnx.RNN(nnx.SimpleCell(WIDTH, WIDTH, rngs=rngs))
        self.head = nnx.Linear(WIDTH, CLASSES, rngs=rngs)

    def __call__(self, x):
        return self.head(self.simple(self.optimized_lstm(self.gru(self.lstm(x)))))


# ------------------------------------------------------------------ the list

_IMAGE = lambda: _features(BATCH, 8, 8, 16)  # noqa: E731
_VECTOR = lambda: _features(BATCH, WIDTH)  # noqa: E731
_SEQUENCE = lambda: _features(BATCH, SEQ, WIDTH)  # noqa: E731


def _cases() -> Iterator[Case]:
    yield Case("linen/Dense-DenseGeneral-Einsum", LinenDenseFamily, _VECTOR,
               ("nn.Dense", "nn.DenseGeneral", "nn.Einsum"))
    yield Case("linen/Conv-ConvTranspose", LinenConvs, _IMAGE, ("nn.Conv", "nn.ConvTranspose"))
    yield Case("linen/ConvLocal", LinenConvLocal, _IMAGE, ("nn.ConvLocal",))
    yield Case("linen/Embed", LinenEmbed, _tokens, ("nn.Embed",))
    yield Case("linen/norms", LinenNorms, _VECTOR,
               ("nn.LayerNorm", "nn.RMSNorm", "nn.GroupNorm", "nn.BatchNorm"))
    yield Case("linen/BatchNorm(axis_name)", LinenSyncBatchNorm, _VECTOR, ("nn.BatchNorm",))
    yield Case("linen/MultiHeadDotProductAttention", LinenAttention, _tokens,
               ("nn.MultiHeadDotProductAttention", "nn.make_causal_mask", "nn.make_attention_mask"))
    yield Case("linen/Dropout", LinenDropout, _VECTOR, ("nn.Dropout",))
    for cell in ("LSTMCell", "GRUCell", "OptimizedLSTMCell"):
        yield Case(f"linen/RNN({cell})", lambda cell=cell: LinenRNN(cell), _SEQUENCE,
                   ("nn.RNN", f"nn.{cell}"))
    yield Case("linen/pooling", LinenPooling, _IMAGE, ("max_pool", "avg_pool", "min_pool"))
    for group, names in ACTIVATION_GROUPS.items():
        yield Case(f"activation/{group}", lambda names=names: ActivationNet(names), _VECTOR,
                   tuple(f"nn.{n}" for n in names))
    for name, (op, covers) in OPS.items():
        yield Case(f"op/{name}", lambda op=op: OpsNet(op), _VECTOR, covers)
    yield Case("nnx/Linear-LinearGeneral-Einsum", _nnx(NnxLinearFamily), _VECTOR,
               ("nnx.Linear", "nnx.LinearGeneral", "nnx.Einsum"))
    yield Case("nnx/Conv-ConvTranspose", _nnx(NnxConvs), _IMAGE, ("nnx.Conv", "nnx.ConvTranspose"))
    yield Case("nnx/Embed", _nnx(NnxEmbed), _tokens, ("nnx.Embed",))
    yield Case("nnx/norms", _nnx(NnxNorms), _VECTOR,
               ("nnx.LayerNorm", "nnx.RMSNorm", "nnx.GroupNorm", "nnx.BatchNorm"))
    yield Case("nnx/MultiHeadAttention", _nnx(NnxAttention), _tokens, ("nnx.MultiHeadAttention",))
    yield Case("nnx/Dropout", _nnx(NnxDropout), _VECTOR, ("nnx.Dropout",))
    yield Case("nnx/RNN(cells)", _nnx(NnxRNNs), _SEQUENCE,
               ("nnx.RNN", "nnx.LSTMCell", "nnx.GRUCell", "nnx.OptimizedLSTMCell", "nnx.SimpleCell"))


CASES: tuple[Case, ...] = tuple(_cases())


# ------------------------------------------------------------------ running a case


def analyze_case(case: Case) -> xla_cost.Report:
    """The case's report: compiled and counted, per layer, with `OPTIMIZER`."""
    return xla_cost.analyze(
        case.build(), case.inputs(), optimizer=OPTIMIZER, loss=case.loss, per_layer=True,
        name=case.id,
    )


def phase_jaxprs(case: Case) -> dict[str, Any]:
    """The jaxpr of each of `PHASES`, traced as `xla_cost.analyze` traces it."""
    workload, _ = build_workload(
        case.build(), case.inputs(), optimizer=OPTIMIZER, loss=case.loss
    )
    jaxprs = {}
    for phase in PHASES:
        with workload.tracing():
            jaxprs[phase] = jax.make_jaxpr(workload.phase_fn(phase))(*workload.phase_args(phase))
    return jaxprs


def primitives_in(jaxpr: Any) -> set[str]:
    """Names of every primitive in ``jaxpr`` and in the jaxprs nested in its equations."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    names: set[str] = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, (jex_core.ClosedJaxpr, jex_core.Jaxpr)):
                    names |= primitives_in(sub)
    return names
