"""Language models written the way 2025-2026 repositories write them, small, for the tests.

A decoder-only LM whose head is the tied token embedding, computed by a method
of the embedding module rather than its ``__call__``: Flax's ``Embed.attend``,
or a ``decode`` method of the repository's own ``Embedder`` (Gemma's layout:
``encode`` looks tokens up, ``decode`` multiplies by the transposed table), in
Linen (modules made in ``setup()``, as Gemma's and MaxText's Linen code makes
them) and in NNX (modules made in ``__init__``). Each block is pre-RMSNorm
causal attention (bias-free q, k, v, o projections) and a SwiGLU feed-forward
(bias-free gate, up, down), as Llama and Gemma write them. Written here from
scratch at small sizes; nothing is bent to fit xla_cost.

The closed forms beside them (`embedding_forward_flops`, `block_matmul_flops`)
are derived from the definitions, not from xla_cost's output.
"""

from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from flax.training import train_state


@dataclasses.dataclass(frozen=True)
class LMConfig:
    vocab: int = 64
    d_model: int = 32  # the loss (3 V + 12 FLOP a token) under 1% of the forward (about 2 d V + 24 d^2 L)
    heads: int = 2
    hidden: int = 64  # the SwiGLU's width
    layers: int = 2
    seq: int = 8
    batch: int = 2

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


CONFIG = LMConfig()


# ---------------------------------------------------------------- closed forms


def head_flops(cfg: LMConfig) -> int:
    """The tied LM head: every token's hidden state (d) against every embedding row (V),
    a multiply-add each: 2 * B * T * d * V."""
    return 2 * cfg.batch * cfg.seq * cfg.d_model * cfg.vocab


def embedding_forward_flops(cfg: LMConfig, head: str) -> int:
    """The embedding module's forward FLOP: the lookup of B*T tokens and the tied head.

    ``nn.Embed`` / ``nnx.Embed`` look up with ``jnp.take`` (mode "fill"): per token
    index the wrap of a negative index (lt, add, select) and the bounds check (>= 0,
    < V, and), 6; per element looked up the fill's select, 1. The ``Embedder``'s
    ``encode`` (``table[(tokens,)]``, mode "promise_in_bounds") wraps negative
    indices alone (lt, add, select: 3 per token) and scales by sqrt(d) (1 per
    element), as Gemma does. Then the head, `head_flops`."""
    n, d = cfg.batch * cfg.seq, cfg.d_model
    lookup = 6 * n + n * d if head == "attend" else 3 * n + n * d
    return lookup + head_flops(cfg)


def block_matmul_flops(cfg: LMConfig) -> dict[str, int]:
    """The matrix products of one block, by module: q, k, v, o projections (d x d each),
    gate and up (d x hidden), down (hidden x d), 2 FLOP per multiply-add per token; the
    scores q k^T and the values att v, 2 * B * heads * T * T * head_dim each (the
    attention module's own, between its projections)."""
    n, d, f = cfg.batch * cfg.seq, cfg.d_model, cfg.hidden
    core = 2 * 2 * cfg.batch * cfg.heads * cfg.seq * cfg.seq * cfg.head_dim
    return {"attn/q": 2 * n * d * d, "attn/k": 2 * n * d * d, "attn/v": 2 * n * d * d, "attn/o": 2 * n * d * d,
            "attn": core, "mlp/gate": 2 * n * d * f, "mlp/up": 2 * n * d * f, "mlp/down": 2 * n * f * d}


def lm_parameters(cfg: LMConfig) -> int:
    """V*d (the tied table) + per block: 4 d^2 (attention), 3 d*hidden (SwiGLU), 2 d (two
    RMSNorm scales) + d (the final norm)."""
    d = cfg.d_model
    return cfg.vocab * d + cfg.layers * (4 * d * d + 3 * d * cfg.hidden + 2 * d) + d


def lm_loss(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Next-token cross-entropy, mean over tokens."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def _causal_attention(q: jax.Array, k: jax.Array, v: jax.Array, heads: int) -> jax.Array:
    b, t, d = q.shape
    q, k, v = (a.reshape(b, t, heads, d // heads) for a in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d // heads)
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -1e9)
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, t, d)


# ---------------------------------------------------------------- Linen


class Embedder(nn.Module):
    """Gemma's Linen embedder: its own table, ``encode`` for tokens, ``decode`` for logits."""

    vocab_size: int
    embed_dim: int

    def setup(self):
        self.input_embedding = self.param(
            "input_embedding", nn.initializers.normal(), (self.vocab_size, self.embed_dim)
        )

    def encode(self, x):
        x = self.input_embedding[(x,)]
        return x * jnp.sqrt(self.embed_dim).astype(x.dtype)

    def decode(self, x):
        return jnp.dot(x, self.input_embedding.T)


class LinenAttention(nn.Module):
    cfg: LMConfig

    def setup(self):
        self.q, self.k, self.v, self.o = (nn.Dense(self.cfg.d_model, use_bias=False) for _ in range(4))

    def __call__(self, x):
        return self.o(_causal_attention(self.q(x), self.k(x), self.v(x), self.cfg.heads))


class LinenMLP(nn.Module):
    cfg: LMConfig

    def setup(self):
        self.gate = nn.Dense(self.cfg.hidden, use_bias=False)
        self.up = nn.Dense(self.cfg.hidden, use_bias=False)
        self.down = nn.Dense(self.cfg.d_model, use_bias=False)

    def __call__(self, x):
        return self.down(nn.silu(self.gate(x)) * self.up(x))


class LinenBlock(nn.Module):
    cfg: LMConfig

    def setup(self):
        self.pre_attention_norm = nn.RMSNorm()
        self.attn = LinenAttention(self.cfg)
        self.pre_ffw_norm = nn.RMSNorm()
        self.mlp = LinenMLP(self.cfg)

    def __call__(self, x):
        x = x + self.attn(self.pre_attention_norm(x))
        return x + self.mlp(self.pre_ffw_norm(x))


class LinenHead(nn.Module):
    """A head module handed the embedder (a module shared from its parent): the tied
    matmul is a method of a module called from outside the module that owns it."""

    embedder: nn.Module

    def __call__(self, x):
        return self.embedder.decode(x)


class LinenLM(nn.Module):
    """A decoder LM with a tied head.

    head: ``attend`` (``nn.Embed`` and ``self.embedder.attend(x)``, in the parent),
    ``decode`` (the ``Embedder`` above, ``self.embedder.decode(x)``, in the parent) or
    ``shared`` (the ``Embedder``'s ``decode`` called by a `LinenHead` it is handed).
    """

    cfg: LMConfig = CONFIG
    head: str = "attend"

    def setup(self):
        cfg = self.cfg
        if self.head == "attend":
            self.embedder = nn.Embed(cfg.vocab, cfg.d_model)
        else:
            self.embedder = Embedder(cfg.vocab, cfg.d_model)
        self.blocks = [LinenBlock(cfg) for _ in range(cfg.layers)]
        self.final_norm = nn.RMSNorm()
        if self.head == "shared":
            self.lm_head = LinenHead(self.embedder)

    def __call__(self, tokens):
        x = self.embedder(tokens) if self.head == "attend" else self.embedder.encode(tokens)
        for block in self.blocks:
            x = block(x)
        x = self.final_norm(x)
        if self.head == "attend":
            return self.embedder.attend(x)
        return self.lm_head(x) if self.head == "shared" else self.embedder.decode(x)


def linen_train_step(state: train_state.TrainState, batch):
    """A Linen step over a TrainState whose ``params`` is the whole variables dict
    ``model.init`` returns (``{'params': ...}``): ``apply_fn(state.params, ...)``."""

    def loss_fn(variables):
        logits = state.apply_fn(variables, batch["inputs"])
        return lm_loss(logits, batch["targets"])

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def linen_state(cfg: LMConfig = CONFIG, head: str = "attend", nest: int = 1, extra: bool = False,
                wrapper: str | None = None):
    """(model, abstract TrainState, batch): ``params`` is ``model.init``'s dict nested
    ``nest`` times below its ``params`` (1: ``{'params': ...}``, as ``model.init``
    returns it; 2: ``{'params': {'params': ...}}``); ``extra`` adds a collection
    beside the parameters (``{'params': ..., 'stats': ...}``); ``wrapper`` keeps the
    parameters' tree under a key of its own (``{'params': {'model': ...}}``)."""
    model = LinenLM(cfg, head)
    tokens = jnp.zeros((cfg.batch, cfg.seq), jnp.int32)

    def create(rng):
        variables = model.init(rng, tokens)
        if wrapper:
            variables = {**variables, "params": {wrapper: variables["params"]}}
        if extra:
            variables = {**variables, "stats": {"mean": jnp.zeros((cfg.d_model,))}}
        for _ in range(nest - 1):
            variables = {"params": variables}

        def apply_fn(v, x):
            for _ in range(nest - 1):
                v = v["params"]
            return model.apply({"params": v["params"][wrapper] if wrapper else v["params"]}, x)

        return train_state.TrainState.create(apply_fn=apply_fn, params=variables, tx=optax.adamw(1e-3))

    state = jax.eval_shape(create, jax.random.key(0))
    return model, state, batch_of(cfg)


def batch_of(cfg: LMConfig = CONFIG) -> dict[str, jax.ShapeDtypeStruct]:
    tokens = jax.ShapeDtypeStruct((cfg.batch, cfg.seq), jnp.int32)
    return {"inputs": tokens, "targets": tokens}


# ---------------------------------------------------------------- NNX


class NnxEmbedder(nnx.Module):
    """Gemma's NNX embedder: ``encode`` and ``decode`` methods over one table."""

    def __init__(self, vocab_size: int, embed_dim: int, *, rngs: nnx.Rngs):
        self.input_embedding = nnx.Param(jax.random.normal(rngs.params(), (vocab_size, embed_dim)))
        self.embed_dim = embed_dim

    def encode(self, x):
        x = self.input_embedding[(x,)]
        return x * jnp.sqrt(self.embed_dim).astype(x.dtype)

    def decode(self, x):
        return jnp.dot(x, self.input_embedding[...].T)


class NnxAttention(nnx.Module):
    def __init__(self, cfg: LMConfig, *, rngs: nnx.Rngs):
        d = cfg.d_model
        self.heads = cfg.heads
        self.q, self.k, self.v, self.o = (nnx.Linear(d, d, use_bias=False, rngs=rngs) for _ in range(4))

    def __call__(self, x):
        return self.o(_causal_attention(self.q(x), self.k(x), self.v(x), self.heads))


class NnxMLP(nnx.Module):
    def __init__(self, cfg: LMConfig, *, rngs: nnx.Rngs):
        self.gate = nnx.Linear(cfg.d_model, cfg.hidden, use_bias=False, rngs=rngs)
        self.up = nnx.Linear(cfg.d_model, cfg.hidden, use_bias=False, rngs=rngs)
        self.down = nnx.Linear(cfg.hidden, cfg.d_model, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down(nnx.silu(self.gate(x)) * self.up(x))


class NnxBlock(nnx.Module):
    def __init__(self, cfg: LMConfig, *, rngs: nnx.Rngs):
        self.pre_attention_norm = nnx.RMSNorm(cfg.d_model, rngs=rngs)
        self.attn = NnxAttention(cfg, rngs=rngs)
        self.pre_ffw_norm = nnx.RMSNorm(cfg.d_model, rngs=rngs)
        self.mlp = NnxMLP(cfg, rngs=rngs)

    def __call__(self, x):
        x = x + self.attn(self.pre_attention_norm(x))
        return x + self.mlp(self.pre_ffw_norm(x))


class NnxLM(nnx.Module):
    """The NNX twin of `LinenLM`: head ``attend`` (``nnx.Embed.attend``) or ``decode``
    (`NnxEmbedder.decode`), called by ``__call__``; `hidden` is the model up to the
    final norm, for a step that applies the head itself (outside the model)."""

    def __init__(self, cfg: LMConfig = CONFIG, head: str = "attend", *, rngs: nnx.Rngs):
        self.head = head
        if head == "attend":
            self.embedder = nnx.Embed(cfg.vocab, cfg.d_model, rngs=rngs)
        else:
            self.embedder = NnxEmbedder(cfg.vocab, cfg.d_model, rngs=rngs)
        self.blocks = nnx.List([NnxBlock(cfg, rngs=rngs) for _ in range(cfg.layers)])
        self.final_norm = nnx.RMSNorm(cfg.d_model, rngs=rngs)

    def hidden(self, tokens):
        x = self.embedder(tokens) if self.head == "attend" else self.embedder.encode(tokens)
        for block in self.blocks:
            x = block(x)
        return self.final_norm(x)

    def __call__(self, tokens):
        x = self.hidden(tokens)
        return self.embedder.attend(x) if self.head == "attend" else self.embedder.decode(x)


def nnx_model(cfg: LMConfig = CONFIG, head: str = "attend") -> NnxLM:
    """The model, abstract (``nnx.eval_shape``: nothing allocated)."""
    return nnx.eval_shape(lambda: NnxLM(cfg, head, rngs=nnx.Rngs(0)))


@nnx.jit
def nnx_train_step(model: NnxLM, optimizer: nnx.Optimizer, batch):
    """The NNX step as Flax's examples write it: ``nnx.value_and_grad`` of a loss of
    the model, ``optimizer.update(model, grads)``."""

    def loss_fn(model):
        return lm_loss(model(batch["inputs"]), batch["targets"])

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


@nnx.jit
def nnx_outside_step(model: NnxLM, optimizer: nnx.Optimizer, batch):
    """A step that applies the tied head itself, outside the model:
    ``model.embedder.attend(model.hidden(x))``."""

    def loss_fn(model):
        x = model.hidden(batch["inputs"])
        logits = model.embedder.attend(x) if model.head == "attend" else model.embedder.decode(x)
        return lm_loss(logits, batch["targets"])

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def nnx_optimizer(cfg: LMConfig = CONFIG, head: str = "attend") -> nnx.Optimizer:
    """``nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)``, abstract (it holds no model)."""
    return nnx.eval_shape(lambda: nnx.Optimizer(NnxLM(cfg, head, rngs=nnx.Rngs(0)), optax.adamw(1e-3), wrt=nnx.Param))


@jax.jit
def nnx_state_step(graphdef: nnx.GraphDef, state: nnx.State, batch):
    """The step Flax's performance guide writes for speed: a plain ``jax.jit`` of the
    state of ``(model, optimizer)`` (``nnx.split``), merged inside, its new state returned."""
    model, optimizer = nnx.merge(graphdef, state)

    def loss_fn(model):
        return lm_loss(model(batch["inputs"]), batch["targets"])

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss, nnx.state((model, optimizer))


def nnx_split_state(cfg: LMConfig = CONFIG, head: str = "attend") -> tuple[nnx.GraphDef, nnx.State]:
    """``nnx.split((model, optimizer))`` of an abstract model and its AdamW optimizer."""

    def create():
        model = NnxLM(cfg, head, rngs=nnx.Rngs(0))
        return model, nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)

    return nnx.split(nnx.eval_shape(create))


def nnx_functional_step(cfg: LMConfig = CONFIG, head: str = "decode"):
    """(step, params, rest, opt_state, batch): the functional NNX form, ``nnx.split(model,
    nnx.Param, ...)`` and a plain optax optimizer over the Params' state, the model merged
    inside the loss of a ``jax.jit`` step."""
    graphdef, params, rest = nnx.split(nnx_model(cfg, head), nnx.Param, ...)
    tx = optax.adamw(1e-3)

    @jax.jit
    def step(params, rest, opt_state, batch):
        def loss_fn(params):
            return lm_loss(nnx.merge(graphdef, params, rest)(batch["inputs"]), batch["targets"])

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step, params, rest, jax.eval_shape(tx.init, params), batch_of(cfg)
