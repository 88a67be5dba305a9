"""Mixtures of experts: Mixtral 8x7B (Jiang et al. 2024, "Mixtral of Experts") and
DeepSeekMoE 16B (Dai et al. 2024, "DeepSeekMoE: Towards Ultimate Expert
Specialization in Mixture-of-Experts Language Models"), in Flax Linen, on
`models._transformer`'s blocks.

A decoder block's MLP is a routed mixture of SwiGLU experts (`MoE`): a router
``gate`` sends each token to ``top_k`` of ``n_experts`` experts, each with a
capacity per sequence (``capacity_factor``), and the experts compute on every
capacity slot, filled or not, so the FLOP include the capacity padding (a note
in every analysis says its share: `xla_cost.step.routing`). The tokens reach the
experts through one-hot dispatch and combine masks contracted by einsums
(GShard, Lepikhin et al. 2021; Switch, Fedus et al. 2022: ``dispatch="einsum"``)
or by indices, a scatter into the slots and a gather back (``dispatch="gather"``).
DeepSeekMoE's fine-grained experts are narrow (``d_ff`` 1408), many (64), and
routed 6 at a time beside 2 shared experts every token goes through
(``n_shared_experts``); its first layer is a dense MLP (``n_dense_layers``).

Layout and names follow Hugging Face's ``MixtralForCausalLM`` and DeepSeek's
``DeepseekForCausalLM`` where the stacked experts allow: ``embed_tokens``;
``dense_layers_i`` (DeepSeek's dense first layer), then ``layers_i`` (or one
scanned stack ``layers``) each ``input_layernorm``, ``self_attn`` (``q_proj``
``k_proj`` ``v_proj`` ``o_proj``), ``post_attention_layernorm`` and ``mlp``:
``gate`` (the router, d x E), ``experts`` (``gate_proj`` and ``up_proj``
``[E, d, f]``, ``down_proj`` ``[E, f, d]``: the E experts' weights stacked) and
``shared_experts`` (a SwiGLU of width ``n_shared_experts * d_ff``); ``norm``;
an untied ``lm_head``. No biases.

Parameters, with ``V`` the vocabulary, ``d`` the width, ``N`` query heads and
``K`` key/value heads of ``H``, ``E`` experts of width ``f``, ``s`` shared
experts, ``L`` layers of which the first ``L0`` are dense of width ``f0``::

    attention and norms  A = 2 d N H + 2 d K H + 2 d
    MoE layer            A + d E + 3 d f (E + s)
    dense layer          A + 3 d f0
    P = 2 V d + d + L0 (A + 3 d f0) + (L - L0)(A + d E + 3 d f (E + s))

and the active parameters, those a token's computation reads, count the routed
experts ``k / E``: ``3 d f (k + s)`` per MoE layer instead of ``3 d f (E + s)``
(`moe_parameters`). Mixtral 8x7B: 46,702,792,704 and 12,879,925,248 (46.7B and
12.9B as published); DeepSeekMoE 16B: 16,375,728,128 and 2,828,650,496 (16.4B
and 2.8B).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from ._spec import ModelSpec, Published
from ._transformer import (
    MEGATRON_RULES, BlockConfig, DecoderBlock, GatedMLP, RMSNorm, check_options, check_tokens, decoder_stack,
    fp8_dot_general,
)
from xla_cost.errors import InputError
from xla_cost.parallel.sharding import RULES_ATTRIBUTE
from xla_cost.step.routing import ROUTING_ATTRIBUTE, Routing

__all__ = [
    "DISPATCHES",
    "EXPERT_RULES",
    "MOE_PUBLISHED",
    "SPECS",
    "DeepSeekMoE16B",
    "Experts",
    "MoE",
    "MoEBlock",
    "MoEConfig",
    "Mixtral",
    "Mixtral8x7B",
    "capacity",
    "moe_forward_flops",
    "moe_parameters",
]

Dtype = Any

DISPATCHES: tuple[str, ...] = ("einsum", "gather")
"""How tokens reach their experts: one-hot masks contracted by einsums, or indices (scatter and gather)."""

_INIT_STD = 0.02


def capacity(group_tokens: int, experts: int, top_k: int, capacity_factor: float) -> int:
    """Slots per expert per routing group, ``C = ceil(capacity_factor * S * k / E)`` (GShard, Switch)."""
    return max(1, math.ceil(capacity_factor * group_tokens * top_k / experts))


def moe_parameters(model: Mixtral) -> tuple[int, int]:
    """``(total, active)`` parameters of a `Mixtral` in closed form, from its configuration."""
    d, n, kv = model.d_model, model.n_head, model.n_kv_head
    h, f, e = model.head_dim or d // n, model.d_ff, model.n_experts
    attention = 2 * d * n * h + 2 * d * kv * h + 2 * d
    dense = attention + 3 * d * (model.dense_d_ff or f)
    shared = 3 * d * f * model.n_shared_experts
    rest = 2 * model.vocab_size * d + d + model.n_dense_layers * dense
    layers = model.n_layer - model.n_dense_layers
    return (rest + layers * (attention + d * e + shared + 3 * d * f * e),
            rest + layers * (attention + d * e + shared + 3 * d * f * model.top_k))


def moe_forward_flops(model: Mixtral) -> int:
    """The matrix products' FLOP of one forward pass of a `Mixtral` over one
    sequence (one routing group of ``S = T = seq_len`` tokens), 2 per multiply-add,
    as the routed work runs: per layer the attention's projections ``2 T d (2N +
    2K) H`` and ``q k^T``, ``probs v`` over all ``T x T`` pairs (``2 N H T^2``
    each); a dense layer's SwiGLU ``2 * 3 T d f0``; a MoE layer's router ``2 T d
    E``, its experts on every one of the ``E x C`` capacity slots, filled or not
    (``2 * 3 E C d f``: the padding included), the shared experts ``2 * 3 T d f
    s``, and the dispatch: ``einsum`` builds the ``[S, E, C]`` dispatch and
    combine masks over the ``k`` choices (``2 T k E C`` each) and contracts them
    with the tokens (``2 T E C d`` each way), ``gather`` weights and sums the
    ``k`` outputs it takes back (``2 T k d``); the head ``2 T d V``."""
    t, d, n, kv = model.seq_len, model.d_model, model.n_head, model.n_kv_head
    h, f, e, k = model.head_dim or d // n, model.d_ff, model.n_experts, model.top_k
    c = capacity(t, e, k, model.capacity_factor)
    attention = 2 * t * d * (2 * n + 2 * kv) * h + 2 * 2 * n * h * t * t
    dense = attention + 2 * 3 * t * d * (model.dense_d_ff or f)
    dispatch = 2 * 2 * t * k * e * c + 2 * 2 * t * e * c * d if model.dispatch == "einsum" else 2 * t * k * d
    moe = attention + 2 * t * d * e + 2 * 3 * e * c * d * f + 2 * 3 * t * d * f * model.n_shared_experts + dispatch
    layers = model.n_layer - model.n_dense_layers
    return model.n_dense_layers * dense + layers * moe + 2 * t * d * model.vocab_size


def _dense_init(m: Any) -> dict[str, Any]:
    return {"dtype": m.dtype, "param_dtype": m.param_dtype, "kernel_init": nn.initializers.normal(_INIT_STD)}


class Experts(nn.Module):
    """``E`` SwiGLU experts, their weights stacked: ``gate_proj`` and ``up_proj``
    ``[E, d, f]``, ``down_proj`` ``[E, f, d]`` (Mixtral's ``w1``, ``w3``, ``w2``).
    ``[E, G, C, d]`` expert slots in, the same out; every slot is computed,
    filled or not (the capacity padding). ``fp8``: the three products in FP8
    (`models._transformer.fp8_dot_general`, the experts' axis a batch axis)."""

    n_experts: int
    d_ff: int
    fp8: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        e, d, f = self.n_experts, x.shape[-1], self.d_ff
        init = nn.initializers.normal(_INIT_STD)
        gate = self.param("gate_proj", init, (e, d, f), self.param_dtype).astype(self.dtype)
        up = self.param("up_proj", init, (e, d, f), self.param_dtype).astype(self.dtype)
        down = self.param("down_proj", init, (e, f, d), self.param_dtype).astype(self.dtype)
        if self.fp8:  # the einsums' dot_general: contract the last axis with the weights' middle, batch E
            product = functools.partial(fp8_dot_general, dimension_numbers=(((3,), (1,)), ((0,), (0,))))
            return product(nn.silu(product(x, gate)) * product(x, up), down)
        h = nn.silu(jnp.einsum("egcd,edf->egcf", x, gate)) * jnp.einsum("egcd,edf->egcf", x, up)
        return jnp.einsum("egcf,efd->egcd", h, down)


_EXPERT_SLOTS = ("activation_exp", "activation_batch_no_exp", None, None)
"""The logical axes of the expert slots ``[E, G, C, d]``: experts over the mesh's
``expert`` axis, groups over the other batch axes (`xla_cost.parallel.sharding.DEFAULT_LOGICAL_RULES`)."""
_GROUPED_SLOTS = (None, "activation_batch", None, None)
"""The logical axes of the expert slots ``[E, G, C, d]`` where the tokens are: groups
over every batch axis (the ``expert`` axis included), each device its own groups'
slots of every expert. From there to `_EXPERT_SLOTS` and back is one all-to-all each."""
_GROUP_SLOTS = ("activation_batch", None, None)
"""The logical axes of a group's slots ``[G, E*C, d]`` (gather dispatch): groups over every batch axis."""


class MoE(nn.Module):
    """A routed mixture of SwiGLU experts, with optional shared experts.

    Tokens are routed in groups of one sequence (``G = B`` groups of ``S = T``
    tokens): a linear router ``gate`` (no bias) scores the ``E`` experts, each
    token goes to its ``top_k`` (weights: the softmax over the experts, then
    renormalised over the chosen ``k`` where ``normalize_top_k``), and each
    expert takes at most ``C = ceil(capacity_factor * S * k / E)`` tokens of a
    group, the first choices of all tokens before the second ones (GShard's
    order); the rest are dropped. The experts compute on all ``E x C`` slots.

    ``dispatch``:

    * ``einsum``: GShard and Switch's one-hot ``[G, S, E, C]`` dispatch and
      combine masks, contracted with the tokens (``2 G S E C d`` FLOP each way);
    * ``gather``: each assignment's slot index (expert x C + position), the
      tokens scattered into the ``[G, E*C, d]`` slots and the experts' outputs
      taken back from them, weighted and summed over the ``k`` choices.

    The expert slots are constrained (``nn.with_logical_constraint``) to be
    split by expert over the mesh's ``expert`` axis and the groups over the
    batch axes, so that XLA's partitioner moves the tokens to their experts'
    devices and back with all-to-alls.

    Shared experts (``n_shared``, DeepSeekMoE) are one SwiGLU MLP of width
    ``n_shared * d_ff`` every token goes through, added to the routed output.
    ``fp8``: the experts' products (routed and shared) in FP8; the router's in ``dtype``.
    """

    n_experts: int
    top_k: int
    d_ff: int
    capacity_factor: float = 1.25
    dispatch: str = "einsum"
    normalize_top_k: bool = True
    n_shared: int = 0
    fp8: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        g, s, d = x.shape
        e, k = self.n_experts, self.top_k
        c = capacity(s, e, k, self.capacity_factor)
        logits = nn.Dense(e, use_bias=False, name="gate", **_dense_init(self))(x)
        probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
        weights, index = jax.lax.top_k(probs, k)  # [G, S, k]
        if self.normalize_top_k:
            weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
        # each assignment's position among its expert's: every token's first choice before any second one
        chosen = jax.nn.one_hot(index, e, dtype=jnp.int32)  # [G, S, k, E]
        order = jnp.swapaxes(chosen, 1, 2).reshape(g, k * s, e)
        position = jnp.sum((jnp.cumsum(order, axis=1) - 1) * order, axis=-1)
        position = jnp.swapaxes(position.reshape(g, k, s), 1, 2)  # [G, S, k]
        experts = Experts(e, self.d_ff, self.fp8, dtype=self.dtype, param_dtype=self.param_dtype, name="experts")
        if self.dispatch == "einsum":
            y = self._einsum(x, experts, chosen, position, weights, c)
        else:
            y = self._gather(x, experts, index, position, weights, c)
        if self.n_shared:
            y = y + GatedMLP(self.n_shared * self.d_ff, "silu", self.fp8, dtype=self.dtype, param_dtype=self.param_dtype,
                             name="shared_experts")(x)
        return y

    def _einsum(self, x: jnp.ndarray, experts: Experts, chosen: jnp.ndarray, position: jnp.ndarray,
                weights: jnp.ndarray, c: int) -> jnp.ndarray:
        slot = jax.nn.one_hot(position, c, dtype=self.dtype)  # all zeros past the capacity: dropped
        chosen = chosen.astype(self.dtype)
        dispatch = jnp.einsum("gske,gskc->gsec", chosen, slot)
        combine = jnp.einsum("gske,gskc->gsec", chosen * weights.astype(self.dtype)[..., None], slot)
        slots = nn.with_logical_constraint(jnp.einsum("gsec,gsd->egcd", dispatch, x), _GROUPED_SLOTS)
        out = experts(nn.with_logical_constraint(slots, _EXPERT_SLOTS))
        out = nn.with_logical_constraint(nn.with_logical_constraint(out, _EXPERT_SLOTS), _GROUPED_SLOTS)
        return jnp.einsum("gsec,egcd->gsd", combine, out)

    def _gather(self, x: jnp.ndarray, experts: Experts, index: jnp.ndarray, position: jnp.ndarray,
                weights: jnp.ndarray, c: int) -> jnp.ndarray:
        g, s, d = x.shape
        e, k = self.n_experts, self.top_k
        where = jnp.where(position < c, index * c + position, e * c).reshape(g, s * k)  # e * c: dropped
        tokens = jnp.broadcast_to(x[:, :, None, :], (g, s, k, d)).reshape(g, s * k, d)
        slots = jax.vmap(lambda t, i: jnp.zeros((e * c, d), x.dtype).at[i].set(t, mode="drop"))(tokens, where)
        slots = nn.with_logical_constraint(slots, _GROUP_SLOTS).reshape(g, e, c, d)
        slots = nn.with_logical_constraint(jnp.swapaxes(slots, 0, 1), _EXPERT_SLOTS)
        out = nn.with_logical_constraint(experts(slots), _EXPERT_SLOTS)
        out = nn.with_logical_constraint(jnp.swapaxes(out, 0, 1).reshape(g, e * c, d), _GROUP_SLOTS)
        taken = jax.vmap(lambda o, i: jnp.take(o, i, axis=0, mode="fill", fill_value=0))(out, where)
        return jnp.einsum("gskd,gsk->gsd", taken.reshape(g, s, k, d), weights.astype(x.dtype))


@dataclasses.dataclass(frozen=True)
class MoEConfig(BlockConfig):
    """A decoder block whose MLP is a mixture of experts (`MoE`): `BlockConfig`'s
    fields (``d_ff`` each expert's hidden width) and the routing's.

    Attributes:
      n_experts, top_k, capacity_factor, dispatch, normalize_top_k: see `MoE`.
      n_shared_experts: see `MoE`'s ``n_shared``.
    """

    n_experts: int = 8
    top_k: int = 2
    capacity_factor: float = 1.25
    dispatch: str = "einsum"
    normalize_top_k: bool = True
    n_shared_experts: int = 0


class MoEBlock(DecoderBlock):
    """`DecoderBlock` whose MLP is a `MoE` where its config is a `MoEConfig` (else the dense `GatedMLP`)."""

    def make_mlp(self) -> nn.Module:
        """The block's MLP, named ``mlp``."""
        c = self.config
        if not isinstance(c, MoEConfig):
            return super().make_mlp()
        return MoE(c.n_experts, c.top_k, c.d_ff, c.capacity_factor, c.dispatch, c.normalize_top_k,
                   c.n_shared_experts, c.fp8, dtype=self.dtype, param_dtype=self.param_dtype, name="mlp")


class Mixtral(nn.Module):
    """A mixture-of-experts language model: token ids ``(B, seq_len)`` -> logits ``(B, seq_len, vocab_size)``.

    Attributes:
      vocab_size: ``V``.
      seq_len: the inputs' length, one routing group (the capacity is per sequence).
      n_layer: blocks ``L``, the dense ones included.
      n_head: query heads ``N``.
      n_kv_head: key/value heads ``K`` dividing ``N``.
      d_model: the residual width ``d``.
      d_ff: each expert's hidden width ``f`` (and each shared expert's).
      head_dim: ``H``; 0 means ``d_model / n_head``.
      n_experts: routed experts per MoE layer ``E``.
      top_k: experts each token is routed to ``k``.
      capacity_factor: each expert's slots per sequence are
        ``ceil(capacity_factor * seq_len * k / E)`` (`capacity`); tokens past
        them are dropped, slots left empty are still computed. ``E / k``
        holds every token (dropless), at ``E / k`` times the experts' FLOP.
      dispatch: ``einsum`` or ``gather`` (`DISPATCHES`, `MoE`).
      normalize_top_k: renormalise the chosen experts' weights to sum to 1
        (Mixtral); DeepSeekMoE keeps the softmax's.
      n_shared_experts: experts every token goes through (DeepSeekMoE: 2).
      n_dense_layers: the first layers' MLPs are dense (DeepSeekMoE: 1).
      dense_d_ff: the dense layers' MLP width; 0 means ``d_ff``.
      rope_theta: the rotary base.
      norm_eps: the RMSNorms' epsilon.
      attention: ``dense`` or ``fused`` (`models._transformer.attention`).
      scan_layers: stack the MoE blocks with `nn.scan` (one module ``layers``,
        traced once) instead of unrolling ``layers_0`` ...
      remat: rematerialise each block: ``none``, ``selective`` or ``full``
        (`xla_cost.step.remat.REMAT_LEVELS`), or a policy of `REMAT_POLICIES`.
      fp8: the projections', the experts' (routed and shared) and the dense
        MLPs' matrix products in FP8 (`models._transformer.fp8_dot_general`:
        current scaling, e4m3 forward, e5m2 gradients, float32 accumulation);
        the router, the dispatch and combine, the head and the rest in
        ``dtype``; the zoo's ``--dtype float8`` (bfloat16 and this).
      dtype: the computation dtype.
      param_dtype: the parameters' dtype.
    """

    vocab_size: int = 32_000
    seq_len: int = 4096
    n_layer: int = 32
    n_head: int = 32
    n_kv_head: int = 8
    d_model: int = 4096
    d_ff: int = 14_336
    head_dim: int = 0
    n_experts: int = 8
    top_k: int = 2
    capacity_factor: float = 1.25
    dispatch: str = "einsum"
    normalize_top_k: bool = True
    n_shared_experts: int = 0
    n_dense_layers: int = 0
    dense_d_ff: int = 0
    rope_theta: float = 1_000_000.0
    norm_eps: float = 1e-5
    attention: str = "dense"
    scan_layers: bool = True
    remat: str = "none"
    fp8: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    def _check(self) -> None:
        name = type(self).__name__
        if self.dispatch not in DISPATCHES:
            raise InputError(f"a {name} dispatch ({', '.join(DISPATCHES)})", repr(self.dispatch),
                             "Use --set dispatch=einsum or --set dispatch=gather.")
        if not 1 <= self.top_k <= self.n_experts:
            raise InputError(f"{name} top_k between 1 and n_experts ({self.n_experts})", f"top_k={self.top_k}",
                             "Route each token to at least one and at most all experts (--set top_k=K).")
        if not self.capacity_factor > 0:
            raise InputError(f"a {name} capacity_factor above 0", repr(self.capacity_factor),
                             "Use e.g. --set capacity_factor=1.25 (E / top_k holds every token).")
        if self.n_dense_layers >= self.n_layer:
            raise InputError(f"{name} n_dense_layers below n_layer ({self.n_layer}): at least one MoE layer",
                             f"n_dense_layers={self.n_dense_layers}", "Lower n_dense_layers with --set.")

    def block_configs(self) -> tuple[tuple[BlockConfig, ...], tuple[MoEConfig, ...]]:
        """The dense layers' `BlockConfig` and the MoE layers' `MoEConfig`, one per layer."""
        common = {
            "n_heads": self.n_head, "n_kv_heads": self.n_kv_head,
            "head_dim": self.head_dim or self.d_model // self.n_head, "activation": "silu",
            "norm_eps": self.norm_eps, "rope_theta": self.rope_theta, "attention": self.attention, "fp8": self.fp8,
        }
        dense = BlockConfig(d_ff=self.dense_d_ff or self.d_ff, **common)
        moe = MoEConfig(
            d_ff=self.d_ff, n_experts=self.n_experts, top_k=self.top_k, capacity_factor=float(self.capacity_factor),
            dispatch=self.dispatch, normalize_top_k=self.normalize_top_k, n_shared_experts=self.n_shared_experts,
            **common,
        )
        return (dense,) * self.n_dense_layers, (moe,) * (self.n_layer - self.n_dense_layers)

    @nn.compact
    def __call__(self, tokens: jnp.ndarray) -> jnp.ndarray:
        name = type(self).__name__
        check_options(name, attention_implementation=self.attention, remat=self.remat, n_heads=self.n_head,
                      n_kv_heads=self.n_kv_head, d_model=self.d_model, head_dim=self.head_dim)
        check_tokens(name, tokens, self.seq_len)
        self._check()
        embed = nn.Embed(
            self.vocab_size, self.d_model, dtype=self.dtype, param_dtype=self.param_dtype,
            embedding_init=nn.initializers.normal(_INIT_STD), name="embed_tokens",
        )
        x = embed(tokens)
        dense, moe = self.block_configs()
        kw = {"scan_layers": self.scan_layers, "remat": self.remat, "dtype": self.dtype,
              "param_dtype": self.param_dtype}
        if dense:
            x = decoder_stack(x, dense, name="dense_layers", **kw)
        x = decoder_stack(x, moe, block=MoEBlock, **kw)
        x = RMSNorm(self.norm_eps, dtype=self.dtype, param_dtype=self.param_dtype, name="norm")(x)
        head = nn.Dense(self.vocab_size, use_bias=False, dtype=self.dtype, param_dtype=self.param_dtype,
                        kernel_init=nn.initializers.normal(_INIT_STD), name="lm_head")
        return head(x)


def _routing(model: Mixtral, inputs: Any) -> tuple[Routing, ...]:
    """The routing `Mixtral` declares (`xla_cost.step.routing.ROUTING_ATTRIBUTE`): its
    experts' stacked weights, ``top_k`` of ``n_experts`` per token, ``capacity``
    slots per expert for each sequence."""
    tokens = jax.tree.leaves(inputs)[0].shape[1]
    slots = capacity(tokens, model.n_experts, model.top_k, model.capacity_factor)
    return (Routing(r"(^|/)experts/", model.n_experts, model.top_k, slots, tokens,
                    layers=model.n_layer - model.n_dense_layers, dispatch=model.dispatch),)


EXPERT_RULES: tuple[tuple[str, tuple[str | None, ...]], ...] = (
    (r"(^|/)experts/(gate_proj|up_proj)$", ("expert", None, "model")),
    (r"(^|/)experts/down_proj$", ("expert", "model", None)),
)
"""Expert parallelism (GShard; Megatron-LM's expert-parallel MoE): the experts'
stacked weights split by expert over the mesh's ``expert`` axis, and each expert's
hidden width over ``model`` as Megatron splits a dense MLP. Before
`models._transformer.MEGATRON_RULES`, which split the attention, the shared
experts, the embedding and the head."""
setattr(Mixtral, RULES_ATTRIBUTE, EXPERT_RULES + MEGATRON_RULES)  # `xla_cost.parallel.sharding.model_rules`
setattr(Mixtral, ROUTING_ATTRIBUTE, _routing)  # `xla_cost.step.routing.declared_routing`


class Mixtral8x7B(Mixtral):
    """Mixtral 8x7B (Jiang et al. 2024, Table 1): 32 layers, d 4096, 32 heads of 128,
    8 key/value heads, 8 SwiGLU experts of 14336, top 2, V 32000, rotary base 10^6.

    Mistral's own implementation routes without a capacity (dropless, MegaBlocks'
    grouped products); here a capacity factor of 1.25 (one Switch Transformer trained with)
    pads the experts' work by 20%; ``capacity_factor=4`` (``E / k``) drops no token
    at four times the experts' FLOP. The paper trains at 32,768 tokens; the zoo's
    default sequence is 4,096 (``--set seq_len=32768``)."""


class DeepSeekMoE16B(Mixtral):
    """DeepSeekMoE 16B (Dai et al. 2024, section 5): 28 layers, d 2048, 16 heads of
    128 (MHA), the first layer's MLP dense (10944), then 64 routed experts of 1408
    (a quarter of a standard FFN each) top 6 and 2 shared experts, V 102400,
    the softmax's weights kept (not renormalised over the 6), gather dispatch
    (an einsum's masks cost as much as the fine-grained experts themselves)."""

    vocab_size: int = 102_400
    n_layer: int = 28
    n_head: int = 16
    n_kv_head: int = 16
    d_model: int = 2048
    d_ff: int = 1408
    n_experts: int = 64
    top_k: int = 6
    dispatch: str = "gather"
    normalize_top_k: bool = False
    n_shared_experts: int = 2
    n_dense_layers: int = 1
    dense_d_ff: int = 10_944
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-6


MOE_PUBLISHED: dict[str, tuple[float, float, str]] = {
    "mixtral-8x7b": (46.7e9, 12.9e9, "Mistral AI, 'Mixtral of experts' (2023-12-11): 46.7B total, 12.9B per token; "
                     "Jiang et al. 2024, section 2: '47B parameters, ... 13B active parameters'"),
    "deepseek-moe-16b": (16.4e9, 2.8e9, "Dai et al. 2024 (DeepSeekMoE), section 5: 16.4B total parameters, "
                         "2.8B activated"),
}
"""Published ``(total, active)`` parameter counts (rounded, as published) and where each is from."""


# --------------------------------------------------------------------------- zoo

_MINIMUMS = {"head_dim": 0, "n_shared_experts": 0, "n_dense_layers": 0, "dense_d_ff": 0}


def _tokens(config: Any) -> tuple[int, ...]:
    return (config["seq_len"],)


def _published(name: str) -> tuple[float, str, float]:
    """`Published`'s (total, source, active) from `MOE_PUBLISHED`."""
    total, active, source = MOE_PUBLISHED[name]
    return total, source, active


SPECS: list[ModelSpec] = [
    ModelSpec(
        "mixtral-8x7b",
        "Mixtral 8x7B mixture of experts: 32 layers x 4096, GQA 32/8 heads, 8 SwiGLU experts of 14336 top 2 "
        "(capacity factor, einsum or gather dispatch), RoPE, RMSNorm, untied head, vocabulary 32,000",
        Mixtral8x7B, _tokens, input_dtype="int32",
        source="Jiang et al. 2024, Mixtral of Experts, Table 1; HF MixtralForCausalLM",
        aliases=("mistralai/Mixtral-8x7B-v0.1",), minimums=_MINIMUMS,
        published=Published(*_published("mixtral-8x7b")), forward_flops=moe_forward_flops,
    ),
    ModelSpec(
        "deepseek-moe-16b",
        "DeepSeekMoE 16B fine-grained mixture of experts: 28 layers x 2048, 16 heads, a dense first layer, "
        "64 routed experts of 1408 top 6 and 2 shared, RoPE, RMSNorm, untied head, vocabulary 102,400",
        DeepSeekMoE16B, _tokens, input_dtype="int32",
        source="Dai et al. 2024, DeepSeekMoE, section 5; HF deepseek-ai/deepseek-moe-16b-base",
        aliases=("deepseek-ai/deepseek-moe-16b-base",), minimums=_MINIMUMS,
        published=Published(*_published("deepseek-moe-16b")), forward_flops=moe_forward_flops,
    ),
]
"""The zoo entries of this family."""
