"""Small language models whose blocks are rematerialised the ways 2025-2026 repositories
write it (issue 50), for the tests of recomputation.

Each block is pre-RMSNorm causal attention (bias-free q, k, v, o projections, two heads)
and a SwiGLU feed-forward (bias-free gate, up, down), as Llama's repositories write them,
with the signature they give it: ``block(x, mask, deterministic, decode)``, the two flags
static. The remat forms:

* Linen, blocks made in ``setup()`` as ``nn.remat(Block, static_argnums=(3, 4),
  policy=...)`` and kept in a list (``[B(cfg, name=str(i)) for i in ...]``: EasyLM's and
  many a fine-tuning repository's layout), also in a module nested in others; the same
  in a compact ``__call__``; a rematted stack of rematted blocks; ``nn.remat_scan`` over
  the block; ``nn.scan`` over ``nn.remat(Block)``;
* NNX: ``nnx.remat`` of the block's ``__call__`` per block (also in a nested module), and
  ``nnx.scan`` over blocks
  made by ``nnx.vmap`` with ``nnx.remat`` inside the scanned function.

The closed forms beside them count what the definitions compute, operation by operation,
with the conventions of XLA's cost analysis (a multiply-add 2 FLOP; elementwise
arithmetic, comparisons and selects 1 per element; exp, rsqrt 1 transcendental and no
FLOP; a reduction of n values into m, n - m); what jax recomputes under each policy is
derived from what the backward pass reads. Written here from scratch; nothing is read
from xla_cost's output.
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

POLICIES = {
    "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "checkpoint_dots_with_no_batch_dims": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
}
"""The policies the tests remat with, by the name jax gives them."""


@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int = 64
    d_model: int = 16
    heads: int = 2
    hidden: int = 32  # the SwiGLU's width
    layers: int = 2
    seq: int = 8
    batch: int = 2

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


CONFIG = Config()


# ---------------------------------------------------------------- closed forms


def rms_norm_flops(cfg: Config) -> int:
    """One RMSNorm over B*T rows of d: square (d), the mean's sum (d - 1) and division (1),
    + eps (1), x * rsqrt (d), * scale (d): 4 d + 1 per row (the rsqrt is a transcendental)."""
    return cfg.tokens * (4 * cfg.d_model + 1)


def scores_elementwise_flops(cfg: Config) -> int:
    """The attention's work on its B*H*T*T scores between its two products: / sqrt(head_dim)
    (1), the causal mask's select (1), then the softmax per row of T: max (T - 1), max with
    -inf (1), - max (T), exp (transcendental), sum (T - 1), / sum (T): 4 T - 1 per row."""
    rows = cfg.batch * cfg.heads * cfg.seq
    return 2 * rows * cfg.seq + rows * (4 * cfg.seq - 1)


def silu_gate_flops(cfg: Config) -> int:
    """silu(gate) * up on B*T*hidden elements: the logistic as XLA expands it (3 FLOP and a
    transcendental), x * sigmoid (1), * up (1)."""
    return cfg.tokens * cfg.hidden * 5


def attention_product_flops(cfg: Config) -> int:
    """The scores q k^T and the values p v: 2 * B * H * T * T * head_dim each."""
    return 2 * 2 * cfg.batch * cfg.heads * cfg.seq * cfg.seq * cfg.head_dim


def projection_flops(cfg: Config) -> dict[str, int]:
    """The bias-free projections of one block, 2 FLOP per multiply-add per token."""
    n, d, f = cfg.tokens, cfg.d_model, cfg.hidden
    return {"q": 2 * n * d * d, "k": 2 * n * d * d, "v": 2 * n * d * d, "o": 2 * n * d * d,
            "gate": 2 * n * d * f, "up": 2 * n * d * f, "down": 2 * n * f * d}


def block_forward_flops(cfg: Config) -> int:
    """One block's forward: two RMSNorms, the projections, the attention's products and its
    elementwise work, SwiGLU's, and the two residual adds (B*T*d each)."""
    return (2 * rms_norm_flops(cfg) + sum(projection_flops(cfg).values()) + attention_product_flops(cfg)
            + scores_elementwise_flops(cfg) + silu_gate_flops(cfg) + 2 * cfg.tokens * cfg.d_model)


def recomputed_flops(cfg: Config, policy: str) -> int:
    """What the backward pass of one rematted block recomputes, by policy: the forward
    values it reads that the policy did not save, and what they are computed from.

    ``nothing_saveable``: the whole forward but what no backward step reads: the down
    projection's result and the last residual add (their gradients are linear in the
    incoming cotangent); every other value feeds a product's weight gradient, the
    softmax's, SwiGLU's or RMSNorm's derivative, or the second RMSNorm's input.
    ``dots_saveable``: every matrix product's result is saved; recomputed are the two
    RMSNorms (their outputs are the projections' inputs), the scores' work (the softmax
    output is the values product's input), the first residual add (the second norm's
    input) and SwiGLU's gate (the down projection's input).
    ``checkpoint_dots_with_no_batch_dims``: the projections (no batch dimension) are
    saved, the attention's two products (batched over B and H) are not: the
    ``dots_saveable`` work and those two products."""
    dots_saveable = (2 * rms_norm_flops(cfg) + scores_elementwise_flops(cfg) + cfg.tokens * cfg.d_model
                     + silu_gate_flops(cfg))
    if policy == "nothing_saveable":
        return block_forward_flops(cfg) - projection_flops(cfg)["down"] - cfg.tokens * cfg.d_model
    if policy == "dots_saveable":
        return dots_saveable
    if policy == "checkpoint_dots_with_no_batch_dims":
        return dots_saveable + attention_product_flops(cfg)
    raise ValueError(f"no closed form for policy {policy!r}")


def lm_loss(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Next-token cross-entropy, mean over tokens."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def causal_mask(seq: int) -> jax.Array:
    return jnp.tril(jnp.ones((seq, seq), bool))[None, None]


def _attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, heads: int) -> jax.Array:
    b, t, d = q.shape
    q, k, v = (a.reshape(b, t, heads, d // heads) for a in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d // heads)
    scores = jnp.where(mask, scores, -1e9)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v).reshape(b, t, d)


def _rms_norm(x: jax.Array, scale: jax.Array, eps: float = 1e-6) -> jax.Array:
    scale = scale.reshape((1,) * (x.ndim - 1) + scale.shape)  # rank promotion made explicit
    return x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps) * scale


# ---------------------------------------------------------------- Linen


class RMSNorm(nn.Module):
    @nn.compact
    def __call__(self, x):
        return _rms_norm(x, self.param("scale", nn.initializers.ones, (x.shape[-1],)))


class Block(nn.Module):
    """``block(x, mask, deterministic, decode)``; with ``scanned``, ``(x, None)`` for
    ``nn.scan``; a mask of None is the causal one, made inside."""

    cfg: Config
    scanned: bool = False

    @nn.compact
    def __call__(self, x, mask=None, deterministic: bool = True, decode: bool = False):
        cfg = self.cfg
        mask = causal_mask(x.shape[1]) if mask is None else mask
        dense = [nn.Dense(cfg.d_model, use_bias=False, name=n) for n in ("q", "k", "v", "o")]
        h = RMSNorm(name="attention_norm")(x)
        x = x + dense[3](_attention(dense[0](h), dense[1](h), dense[2](h), mask, cfg.heads))
        h = RMSNorm(name="ffn_norm")(x)
        gate = nn.Dense(cfg.hidden, use_bias=False, name="gate")(h)
        up = nn.Dense(cfg.hidden, use_bias=False, name="up")(h)
        x = x + nn.Dense(cfg.d_model, use_bias=False, name="down")(nn.silu(gate) * up)
        return (x, None) if self.scanned else x


class CarriedBlock(Block):
    """The block for ``nn.remat_scan``, whose body takes one carry: ``(x, mask)``."""

    def __call__(self, carry):
        x, mask = carry
        return super().__call__(x, mask), mask


class SetupLM(nn.Module):
    """Blocks made in ``setup()``, kept in a list: ``nn.remat(Block, static_argnums=(3, 4),
    policy=...)`` (``self`` is argument 0) when ``policy`` is not None."""

    cfg: Config = CONFIG
    policy: str | None = "nothing_saveable"

    def setup(self):
        cfg = self.cfg
        block = Block if self.policy is None else nn.remat(
            Block, static_argnums=(3, 4), policy=POLICIES[self.policy])
        self.embed = nn.Embed(cfg.vocab, cfg.d_model)
        self.blocks = [block(cfg, name=str(i)) for i in range(cfg.layers)]
        self.norm = RMSNorm()
        self.lm_head = nn.Dense(cfg.vocab, use_bias=False)

    def __call__(self, tokens, deterministic: bool = True):
        x = self.embed(tokens)
        mask = causal_mask(tokens.shape[1])
        for block in self.blocks:
            x = block(x, mask, deterministic, False)
        return self.lm_head(self.norm(x))


class Decoder(nn.Module):
    """The rematted blocks made in ``setup()`` of a module of their own, in a list
    (EasyLM's and Hugging Face's Flax Llama: ``...BlockCollection`` inside ``...Module``)."""

    cfg: Config
    policy: str

    def setup(self):
        block = nn.remat(Block, static_argnums=(3, 4), policy=POLICIES[self.policy])
        self.blocks = [block(self.cfg, name=str(i)) for i in range(self.cfg.layers)]

    def __call__(self, x, mask, deterministic: bool = True):
        for block in self.blocks:
            x = block(x, mask, deterministic, False)
        return x


class NestedLM(nn.Module):
    """A causal-LM wrapper over a model whose `Decoder` holds the rematted blocks:
    ``CausalLM -> model -> decoder -> blocks``, each made in ``setup()``."""

    cfg: Config = CONFIG
    policy: str = "nothing_saveable"

    def setup(self):
        cfg = self.cfg
        self.embed = nn.Embed(cfg.vocab, cfg.d_model)
        self.decoder = Decoder(cfg, self.policy)
        self.norm = RMSNorm()
        self.lm_head = nn.Dense(cfg.vocab, use_bias=False)

    def __call__(self, tokens, deterministic: bool = True):
        x = self.decoder(self.embed(tokens), causal_mask(tokens.shape[1]), deterministic)
        return self.lm_head(self.norm(x))


class CausalLM(nn.Module):
    cfg: Config = CONFIG
    policy: str = "nothing_saveable"

    def setup(self):
        self.model = NestedLM(self.cfg, self.policy)

    def __call__(self, tokens):
        return self.model(tokens)


class CompactLM(nn.Module):
    """The same blocks, rematted in a compact ``__call__``."""

    cfg: Config = CONFIG
    policy: str | None = "nothing_saveable"

    @nn.compact
    def __call__(self, tokens, deterministic: bool = True):
        cfg = self.cfg
        block = Block if self.policy is None else nn.remat(
            Block, static_argnums=(3, 4), policy=POLICIES[self.policy])
        x = nn.Embed(cfg.vocab, cfg.d_model, name="embed")(tokens)
        mask = causal_mask(tokens.shape[1])
        for i in range(cfg.layers):
            x = block(cfg, name=str(i))(x, mask, deterministic, False)
        return nn.Dense(cfg.vocab, use_bias=False, name="lm_head")(RMSNorm(name="norm")(x))


class RematStack(nn.Module):
    """Compact: the blocks, each ``nn.remat(Block, static_argnums=(3, 4), policy=...)``."""

    cfg: Config
    policy: str

    @nn.compact
    def __call__(self, x, mask):
        block = nn.remat(Block, static_argnums=(3, 4), policy=POLICIES[self.policy])
        for i in range(self.cfg.layers):
            x = block(self.cfg, name=str(i))(x, mask, True, False)
        return x


class NestedRematLM(nn.Module):
    """A checkpoint inside a checkpoint: ``nn.remat(RematStack)`` around the rematted blocks."""

    cfg: Config = CONFIG
    policy: str = "nothing_saveable"

    @nn.compact
    def __call__(self, tokens):
        cfg = self.cfg
        x = nn.Embed(cfg.vocab, cfg.d_model, name="embed")(tokens)
        x = nn.remat(RematStack)(cfg, self.policy, name="decoder")(x, causal_mask(tokens.shape[1]))
        return nn.Dense(cfg.vocab, use_bias=False, name="lm_head")(RMSNorm(name="norm")(x))


class RematScanLM(nn.Module):
    """``nn.remat_scan(Block, lengths=(layers, 1))``: a scan over L checkpointed scans of one
    block (flax checkpoints every level but the innermost: ``lengths=(layers,)`` alone would be
    a plain scan, with nothing recomputed)."""

    cfg: Config = CONFIG
    policy: str = "nothing_saveable"

    @nn.compact
    def __call__(self, tokens):
        cfg = self.cfg
        x = nn.Embed(cfg.vocab, cfg.d_model, name="embed")(tokens)
        stack = nn.remat_scan(CarriedBlock, lengths=(cfg.layers, 1), policy=POLICIES[self.policy])
        x, _ = stack(cfg, name="blocks")((x, causal_mask(tokens.shape[1])))
        return nn.Dense(cfg.vocab, use_bias=False, name="lm_head")(RMSNorm(name="norm")(x))


class ScanLM(nn.Module):
    """``nn.scan`` over ``nn.remat(Block, policy=..., prevent_cse=False)`` (MaxText's layout);
    ``policy`` None: over the block itself."""

    cfg: Config = CONFIG
    policy: str | None = "nothing_saveable"

    @nn.compact
    def __call__(self, tokens):
        cfg = self.cfg
        x = nn.Embed(cfg.vocab, cfg.d_model, name="embed")(tokens)
        block = Block if self.policy is None else nn.remat(Block, policy=POLICIES[self.policy], prevent_cse=False)
        stack = nn.scan(block, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=nn.broadcast,
                        length=cfg.layers)
        x, _ = stack(cfg, scanned=True, name="blocks")(x, causal_mask(tokens.shape[1]))
        return nn.Dense(cfg.vocab, use_bias=False, name="lm_head")(RMSNorm(name="norm")(x))


def linen_train_step(state: train_state.TrainState, batch):
    """The step as Flax's examples write it over a TrainState."""

    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch["inputs"])
        return lm_loss(logits, batch["targets"])

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def linen_state(model: nn.Module, cfg: Config = CONFIG) -> train_state.TrainState:
    """An abstract TrainState (SGD) of ``model``'s parameters."""
    tokens = jnp.zeros((cfg.batch, cfg.seq), jnp.int32)

    def create(rng):
        params = model.init(rng, tokens)["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.1))

    return jax.eval_shape(create, jax.random.key(0))


def tokens_of(cfg: Config = CONFIG) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((cfg.batch, cfg.seq), jnp.int32)


def batch_of(cfg: Config = CONFIG) -> dict[str, jax.ShapeDtypeStruct]:
    return {"inputs": tokens_of(cfg), "targets": tokens_of(cfg)}


# ---------------------------------------------------------------- NNX


class NnxRMSNorm(nnx.Module):
    def __init__(self, d: int):
        self.scale = nnx.Param(jnp.ones((d,)))

    def __call__(self, x):
        return _rms_norm(x, self.scale[...])


class NnxBlock(nnx.Module):
    def __init__(self, cfg: Config, *, rngs: nnx.Rngs):
        d, f = cfg.d_model, cfg.hidden
        self.heads = cfg.heads
        self.attention_norm = NnxRMSNorm(d)
        self.q, self.k, self.v, self.o = (nnx.Linear(d, d, use_bias=False, rngs=rngs) for _ in range(4))
        self.ffn_norm = NnxRMSNorm(d)
        self.gate = nnx.Linear(d, f, use_bias=False, rngs=rngs)
        self.up = nnx.Linear(d, f, use_bias=False, rngs=rngs)
        self.down = nnx.Linear(f, d, use_bias=False, rngs=rngs)

    def __call__(self, x, mask, deterministic: bool = True):
        h = self.attention_norm(x)
        x = x + self.o(_attention(self.q(h), self.k(h), self.v(h), mask, self.heads))
        h = self.ffn_norm(x)
        return x + self.down(nnx.silu(self.gate(h)) * self.up(h))


class NnxRematLM(nnx.Module):
    """Blocks in a list, each called through ``nnx.remat(NnxBlock.__call__, policy=...,
    static_argnums=(3,))`` (the block is argument 0); ``policy`` None: no remat."""

    def __init__(self, cfg: Config = CONFIG, policy: str | None = "nothing_saveable", *, rngs: nnx.Rngs):
        self.policy = policy
        self.embed = nnx.Embed(cfg.vocab, cfg.d_model, rngs=rngs)
        self.blocks = nnx.List([NnxBlock(cfg, rngs=rngs) for _ in range(cfg.layers)])
        self.norm = NnxRMSNorm(cfg.d_model)
        self.lm_head = nnx.Linear(cfg.d_model, cfg.vocab, use_bias=False, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens)
        mask = causal_mask(tokens.shape[1])
        call = NnxBlock.__call__ if self.policy is None else nnx.remat(
            NnxBlock.__call__, policy=POLICIES[self.policy], static_argnums=(3,))
        for block in self.blocks:
            x = call(block, x, mask, True)
        return self.lm_head(self.norm(x))


class NnxCausalLM(nnx.Module):
    """`NnxRematLM` as the ``model`` of a causal-LM wrapper: the checkpoints called inside a
    nested module."""

    def __init__(self, cfg: Config = CONFIG, policy: str | None = "nothing_saveable", *, rngs: nnx.Rngs):
        self.model = NnxRematLM(cfg, policy, rngs=rngs)

    def __call__(self, tokens):
        return self.model(tokens)


class NnxScanLM(nnx.Module):
    """Blocks made by ``nnx.vmap`` (stacked parameters) and run by ``nnx.scan`` of a function
    under ``nnx.remat`` (Flax's NNX scan-over-layers guide); ``policy`` None: not rematted."""

    def __init__(self, cfg: Config = CONFIG, policy: str | None = "nothing_saveable", *, rngs: nnx.Rngs):
        self.policy = policy

        @nnx.split_rngs(splits=cfg.layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make(rngs):
            return NnxBlock(cfg, rngs=rngs)

        self.embed = nnx.Embed(cfg.vocab, cfg.d_model, rngs=rngs)
        self.blocks = make(rngs)
        self.norm = NnxRMSNorm(cfg.d_model)
        self.lm_head = nnx.Linear(cfg.d_model, cfg.vocab, use_bias=False, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens)
        mask = causal_mask(tokens.shape[1])

        def layer(x, block):
            return block(x, mask)

        if self.policy is not None:
            layer = nnx.remat(layer, policy=POLICIES[self.policy])
        run = nnx.scan(layer, in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        return self.lm_head(self.norm(run(x, self.blocks)))


def nnx_model(cls: type = NnxRematLM, policy: str | None = "nothing_saveable", cfg: Config = CONFIG) -> nnx.Module:
    """The model, abstract (``nnx.eval_shape``: nothing allocated)."""
    return nnx.eval_shape(lambda: cls(cfg, policy, rngs=nnx.Rngs(0)))


def nnx_optimizer(cls: type = NnxRematLM, policy: str | None = "nothing_saveable", cfg: Config = CONFIG
                  ) -> nnx.Optimizer:
    """``nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)``, abstract."""
    return nnx.eval_shape(lambda: nnx.Optimizer(cls(cfg, policy, rngs=nnx.Rngs(0)), optax.sgd(0.1), wrt=nnx.Param))


@nnx.jit
def nnx_train_step(model: nnx.Module, optimizer: nnx.Optimizer, batch):
    """``nnx.value_and_grad`` of the loss, ``optimizer.update(model, grads)``."""

    def loss_fn(model):
        return lm_loss(model(batch["inputs"]), batch["targets"])

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss
