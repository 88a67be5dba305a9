"""Building blocks of today's decoder-only language models, in Flax Linen.

Shared by the ``llama``, ``gemma`` and ``mixtral`` families: `RMSNorm` (with
Gemma's ``(1 + scale)`` variant), rotary position embedding (`apply_rope`, with
Llama 3.1's frequency scaling as an option), grouped-query `Attention` (``n_heads``
query heads sharing ``n_kv_heads`` key/value heads: MHA, GQA or MQA; causal;
an optional sliding window for local layers), the gated MLP (`GatedMLP`: SwiGLU
or GeGLU), the `attention` function every attention goes through (``dense``:
written out; ``fused``: `jax.nn.dot_product_attention`), a tied `Embedder` whose
``attend`` method is the language-model head, the pre-norm `DecoderBlock` and
`decoder_stack`, which unrolls or scans the blocks and rematerialises each.
With ``fp8`` (the zoo's ``--dtype float8``) the projections' and MLPs' matrix
products go through `fp8_dot_general`: FP8 with current scaling, the rest in
the blocks' dtype.

Parameter names follow the Hugging Face implementations (``self_attn.q_proj``,
``mlp.gate_proj``, ``input_layernorm`` ...), and `MEGATRON_RULES` splits them for
a sharded step's ``model`` axis as the GPT family's rules do: the projections
into the heads and the MLP's hidden width by columns, the projections back to
the residual stream by rows. Nothing has a bias.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name

from ._common import expect_input_shape
from ._fp8 import FP8_FORWARD, FP8_GRADIENT, fp8_dot_general, joint_fp8
from xla_cost.compiled import targets
from xla_cost.count.attention import splash_mask_scope
from xla_cost.errors import InputError
from xla_cost.parallel import context as _context
from xla_cost.parallel import sharding
from xla_cost.step import remat as _remat

__all__ = [
    "ATTENTION_IMPLEMENTATIONS",
    "FP8_FORWARD",
    "FP8_GRADIENT",
    "MEGATRON_RULES",
    "Attention",
    "BlockConfig",
    "DecoderBlock",
    "Embedder",
    "GatedMLP",
    "MLP_ACTIVATIONS",
    "PlainMLP",
    "RMSNorm",
    "apply_rope",
    "attention",
    "check_options",
    "check_tokens",
    "decoder_stack",
    "fp8_dot_general",
    "rope_frequencies",
    "splash_attention",
    "SPLASH_BLOCK",
]

Dtype = Any

ATTENTION_IMPLEMENTATIONS: tuple[str, ...] = ("dense", "fused")
"""``dense``: attention written out (einsum, mask, softmax, einsum), so its FLOP
are in the jaxpr; ``fused``: one `jax.nn.dot_product_attention` call."""

_INIT_STD = 0.02


def _dense(features: int, name: str, dtype: Dtype, param_dtype: Dtype, fp8: bool = False) -> nn.Dense:
    return nn.Dense(
        features, use_bias=False, dtype=dtype, param_dtype=param_dtype,
        kernel_init=nn.initializers.normal(_INIT_STD), name=name, dot_general=fp8_dot_general if fp8 else None,
    )


# --------------------------------------------------------------------------- norm


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (Zhang and Sennrich 2019): ``x / rms(x) * scale``.

    Computed in float32. With ``unit_offset`` (Gemma) the scale is ``1 + scale``,
    its parameter initialised at 0; else it is ``scale``, initialised at 1.

    Attributes:
      eps: added to the mean square before the square root.
      unit_offset: Gemma's ``(1 + scale)``.
    """

    eps: float = 1e-6
    unit_offset: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        init = nn.initializers.zeros if self.unit_offset else nn.initializers.ones
        scale = self.param("scale", init, (x.shape[-1],), self.param_dtype)
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        scale = scale.astype(jnp.float32).reshape((1,) * (x.ndim - 1) + (-1,))
        return (y * (1.0 + scale if self.unit_offset else scale)).astype(self.dtype)


# --------------------------------------------------------------------------- rotary


_LLAMA3_LOW_FREQ_FACTOR = 1.0
_LLAMA3_HIGH_FREQ_FACTOR = 4.0
_LLAMA3_ORIGINAL_CONTEXT = 8192
"""Llama 3.1's rope scaling (Meta's reference code, ``apply_scaling``): wavelengths
above 8192/1 positions are divided by the factor, those below 8192/4 kept, the
band between interpolated."""


def rope_frequencies(head_dim: int, theta: float, scaling: float = 0.0) -> np.ndarray:
    """The ``head_dim / 2`` rotary frequencies ``theta ** (-2i / head_dim)``.

    Args:
      head_dim: the rotated width (even).
      theta: the base (10,000 for Llama 2 and Gemma, 500,000 for Llama 3).
      scaling: Llama 3.1's scaling factor (8 for its 128K context); 0 or 1: none.
    """
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling and scaling != 1.0:
        wavelength = 2 * math.pi / inv_freq
        low_wavelength = _LLAMA3_ORIGINAL_CONTEXT / _LLAMA3_LOW_FREQ_FACTOR
        high_wavelength = _LLAMA3_ORIGINAL_CONTEXT / _LLAMA3_HIGH_FREQ_FACTOR
        smooth = (_LLAMA3_ORIGINAL_CONTEXT / wavelength - _LLAMA3_LOW_FREQ_FACTOR) / (
            _LLAMA3_HIGH_FREQ_FACTOR - _LLAMA3_LOW_FREQ_FACTOR
        )
        between = (1 - smooth) * inv_freq / scaling + smooth * inv_freq
        inv_freq = np.where(
            wavelength < high_wavelength, inv_freq,
            np.where(wavelength > low_wavelength, inv_freq / scaling, between),
        )
    return inv_freq.astype(np.float32)


def apply_rope(x: jnp.ndarray, positions: jnp.ndarray, theta: float, scaling: float = 0.0) -> jnp.ndarray:
    """Rotary position embedding (Su et al. 2021) of ``x`` ``(B, T, heads, head_dim)``
    at ``positions`` ``(T,)``, rotating the two halves of the head (Hugging Face's
    ``rotate_half`` layout); the angles in float32."""
    head_dim = x.shape[-1]
    if head_dim % 2:
        raise InputError("an even head_dim for rotary embeddings", f"head_dim={head_dim}",
                         "Change head_dim (or d_model / n_heads) with --set.")
    angles = positions.astype(jnp.float32)[:, None] * rope_frequencies(head_dim, theta, scaling)[None, :]
    sin = jnp.sin(angles)[None, :, None, :]
    cos = jnp.cos(angles)[None, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


# --------------------------------------------------------------------------- attention


def _mask(length_q: int, length_k: int, causal: bool, window: int,
          positions: tuple[Any, Any] | None = None) -> jnp.ndarray | None:
    """``(T, S)`` True where query ``i`` may attend to key ``j``: ``j <= i`` when
    causal, ``|i - j| < window`` with a window (``window`` keys, the query's own
    included); None when every pair attends. ``positions``: the queries' and the
    keys' positions in the sequence (a context-parallel device's, `xla_cost.parallel.context`)
    instead of ``0 .. T - 1`` and ``0 .. S - 1``."""
    if not causal and not window:
        return None
    i = (jnp.arange(length_q) if positions is None else positions[0])[:, None]
    j = (jnp.arange(length_k) if positions is None else positions[1])[None, :]
    mask = jnp.ones((length_q, length_k), jnp.bool_)
    if causal:
        mask = mask & (j <= i)
    if window:
        mask = mask & (i - j < window) & (j - i < window)
    return mask


SPLASH_BLOCK = 512
"""The block of queries and of keys every splash attention kernel of `splash_attention` works on (or the
whole sequence where shorter): MaxText's (MaxText/layers/attentions.py, ``AttentionOp.tpu_flash_attention``:
``BlockSizes(block_q=min(512, query.shape[2]), ...)`` for every block of the forward and both backward
kernels)."""


def splash_attention(q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, *, causal: bool = True, window: int = 0,
                     scale: float | None = None) -> jnp.ndarray:
    """Attention of ``q`` ``(B, T, N, H)`` over ``k``, ``v`` ``(B, S, K, H)`` in jax's Pallas splash
    attention kernels for a TPU (``jax.experimental.pallas.ops.tpu.splash_attention``), as MaxText's
    ``attention: flash`` (and ``autoselected`` in training) runs it on a TPU
    (MaxText/layers/attentions.py, ``AttentionOp.apply_attention`` -> ``tpu_flash_attention``: the
    query scaled by ``1 / sqrt(H)`` first, ``make_splash_mha`` over a `SPLASH_BLOCK` block, a
    ``CausalMask`` per head, ``head_shards=1, q_seq_shards=1``, ``jax.vmap`` over the batch, all
    under ``shard_map`` over the mesh: the batch split over its batch axes, the heads over
    ``model``). The scores stay in the kernel's memory, block by block; the blocks a causal or
    windowed mask leaves empty are skipped. Three Mosaic custom calls (forward, ``dq``, ``dkv``)
    in the compiled program: `xla_cost.compiled.products` prices them. Only a TPU lowers them.
    """
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernels
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    length_q, length_k = q.shape[1], k.shape[1]

    def heads_first(x: jnp.ndarray) -> jnp.ndarray:
        return jnp.transpose(x, (0, 2, 1, 3))

    def local(q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray) -> jnp.ndarray:
        if window:
            mask: Any = masks.LocalMask((length_q, length_k), (window - 1, 0 if causal else window - 1), 0)
        elif causal:
            mask = masks.CausalMask((length_q, length_k))
        else:
            mask = masks.FullMask((length_q, length_k))
        bq, bk = min(SPLASH_BLOCK, length_q), min(SPLASH_BLOCK, length_k)
        blocks = kernels.BlockSizes(block_q=bq, block_kv_compute=bk, block_kv=bk, block_q_dkv=bq, block_kv_dkv=bk,
                                    block_kv_dkv_compute=bk, block_q_dq=bq, block_kv_dq=bk)
        splash = kernels.make_splash_mha(masks.MultiHeadMask([mask] * q.shape[1]), head_shards=1, q_seq_shards=1,
                                         block_sizes=blocks)
        # the mask named in the kernels' op_name: the compiled program elides its block-mask constants,
        # and the time model prices the block pairs it leaves (xla_cost.count.attention.splash_mask)
        seen = (window - 1, 0 if causal else window - 1) if window else ((None, 0) if causal else (None, None))
        with jax.named_scope(splash_mask_scope(seen)):
            return jax.vmap(splash)(q, k, v)

    q, k, v = heads_first((q * scale).astype(q.dtype)), heads_first(k), heads_first(v)
    mesh = sharding.active_mesh()
    if mesh is not None:
        sizes = dict(mesh.shape)
        batch = tuple(a for a in sharding.BATCH_AXES if sizes.get(a, 1) > 1)
        split = math.prod(sizes[a] for a in batch)
        batch_spec = (batch[0] if len(batch) == 1 else batch) if batch and q.shape[0] % split == 0 else None
        model = sizes.get("model", 1)
        heads = "model" if model > 1 and q.shape[1] % model == 0 and k.shape[1] % model == 0 else None
        spec = jax.sharding.PartitionSpec(batch_spec, heads, None, None)
        local = jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)
    return heads_first(local(q, k, v))


def attention(
    q: jnp.ndarray,
    k: jnp.ndarray,
    v: jnp.ndarray,
    *,
    implementation: str = "dense",
    causal: bool = True,
    window: int = 0,
    scale: float | None = None,
    softcap: float = 0.0,
) -> jnp.ndarray:
    """Scaled dot-product attention of ``q`` ``(B, T, N, H)`` over ``k``, ``v``
    ``(B, S, K, H)``, ``K`` dividing ``N`` (each group of ``N / K`` query heads
    shares one key/value head): ``(B, T, N, H)``.

    This is the one place where an attention's implementation is chosen, for
    the target it runs on.

    ``dense`` writes it out: ``q k^T`` over all ``T x S`` pairs (2·B·N·T·S·H
    FLOP), scaled, soft-capped if asked, masked with `jnp.where` (nothing is
    skipped: a causal or windowed mask costs what a full one does), softmax in
    float32, then ``probs v`` (2·B·N·T·S·H FLOP again), so every FLOP is an
    equation of the jaxpr. ``fused`` is a single `jax.nn.dot_product_attention`
    call with the active compile target's implementation
    (`xla_cost.compiled.targets.fused_attention`): cuDNN's flash attention on a
    GPU target (one custom call each way, no ``T x S`` scores in memory; counted
    by `xla_cost.count.attention`'s rule, every pair as here), jax's Pallas
    splash attention on a TPU target (`splash_attention`), XLA's own
    decomposition (the same products) on the CPU.

    With a ``context`` mesh axis each device's queries attend to the keys and
    values gathered over it (`xla_cost.parallel.context.gathered_attention`).

    Args:
      implementation: one of `ATTENTION_IMPLEMENTATIONS`.
      causal: query ``i`` attends to keys ``j <= i``.
      window: a sliding window of this many keys (the query's own included);
        0: every key the causal mask allows.
      scale: multiplies the scores; default ``1 / sqrt(H)``.
      softcap: Gemma 2's soft-capping of the scores, ``c * tanh(s / c)``; 0: none.
        ``dense`` only.
    """
    batch, length_q, n_heads, head_dim = q.shape
    length_k, n_kv = k.shape[1], k.shape[2]
    if n_kv < 1 or n_heads % n_kv:
        raise InputError("n_kv_heads dividing n_heads", f"n_heads={n_heads}, n_kv_heads={n_kv}",
                         "Set n_kv_heads to a divisor of n_heads (1: MQA, n_heads: MHA).")
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    local = functools.partial(_local_attention, implementation=implementation, causal=causal, window=window,
                              scale=scale, softcap=softcap)
    if _context.context_size() > 1:  # the positions split over a context axis
        return _context.gathered_attention(q, k, v, local, fused=implementation == "fused")
    return local(q, k, v)


def _local_attention(q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, *, implementation: str, causal: bool,
                     window: int, scale: float, softcap: float,
                     positions: tuple[Any, Any] | None = None) -> jnp.ndarray:
    """`attention` on one device (or partitioned by XLA), the mask from ``positions`` where given."""
    batch, length_q, n_heads, head_dim = q.shape
    length_k, n_kv = k.shape[1], k.shape[2]
    if implementation == "fused":
        if softcap:
            raise InputError(
                "attention=fused without soft-capped scores (jax.nn.dot_product_attention has none)",
                f"attn_softcap={softcap}",
                "Use --set attention=dense, or --set attn_softcap=0 as fused-kernel runs of Gemma 2 do.",
            )
        local = None if not window else (window - 1, 0 if causal else window - 1)
        kernel = targets.fused_attention()  # the compile target's fused kernel: cudnn for a GPU, splash for a TPU
        if kernel == "splash":
            try:
                return splash_attention(q, k, v, causal=causal, window=window, scale=scale)
            except (NotImplementedError, ValueError) as exc:  # the kernel's own refusal, in one line
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
                raise InputError(
                    "attention=fused in a form a TPU's splash attention kernel takes (a sequence a multiple of "
                    f"128, and of its {SPLASH_BLOCK}-long blocks past that)",
                    f"{first} (q {q.dtype} {tuple(q.shape)})",
                    "Change seq_len (--set seq_len=...), or use --set attention=dense.",
                ) from exc
        try:
            return jax.nn.dot_product_attention(
                q, k, v, scale=scale, is_causal=causal, local_window_size=local, implementation=kernel
            )
        except (NotImplementedError, RuntimeError, ValueError) as exc:  # the kernel's own refusal, in one line
            if kernel == "xla":
                raise
            raise InputError(
                f"attention=fused in a form {kernel}'s fused attention takes (bfloat16 or float16 q, k, v; "
                "a head dimension of at most 256 on Hopper or later, 128 before, a multiple of 8; a window only "
                "with a causal mask; "
                "the cuDNN library installed)",
                f"{str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__} "
                f"(q {q.dtype} {tuple(q.shape)})",
                "Pass --dtype bfloat16, change the shapes, install cuDNN (pip install 'xla-cost[gpu]') "
                "or use --set attention=dense.",
            ) from exc
    if implementation != "dense":
        raise InputError(f"an attention implementation ({', '.join(ATTENTION_IMPLEMENTATIONS)})",
                         repr(implementation), "Use --set attention=dense or --set attention=fused.")
    groups = n_heads // n_kv
    qg = q.reshape(batch, length_q, n_kv, groups, head_dim)
    scores = jnp.einsum("btkgh,bskh->bkgts", qg, k).astype(jnp.float32) * scale
    if softcap:
        scores = softcap * jnp.tanh(scores / softcap)
    mask = _mask(length_q, length_k, causal, window, positions)
    if mask is not None:
        scores = jnp.where(mask[None, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskh->btkgh", probs, v)
    return out.reshape(batch, length_q, n_heads, head_dim)


class Attention(nn.Module):
    """Causal grouped-query self-attention with rotary embeddings.

    ``q_proj`` (d -> N·H), ``k_proj`` and ``v_proj`` (d -> K·H), rotary on q and
    k, `attention`, ``o_proj`` (N·H -> d); no biases.

    Attributes:
      n_heads: query heads ``N``.
      n_kv_heads: key/value heads ``K`` (``N``: MHA; 1: MQA; between: GQA).
      head_dim: ``H``.
      rope_theta, rope_scaling: see `rope_frequencies`.
      window: a sliding window of this many keys (a local layer); 0: global.
      implementation: see `attention`.
      query_scale: the scores are divided by ``sqrt(query_scale)``; 0: by
        ``sqrt(head_dim)`` (Gemma 2 27B divides by ``sqrt(d_model / n_heads)``).
      softcap: see `attention`.
      fp8: the four projections' products in FP8 (`fp8_dot_general`), the query,
        key and value ones as one (`joint_fp8`, Megatron's ``linear_qkv``); the
        attention's own products (``q k^T``, ``probs v``) stay in ``dtype``.
      names: name the query, key and value after the rotary embedding and the
        output projection's result (``query_proj``, ``key_proj``, ``value_proj``,
        ``out_proj``: `xla_cost.step.remat.CHECKPOINT_NAMES`) for a policy that
        keeps tensors by name.
    """

    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_theta: float = 10_000.0
    rope_scaling: float = 0.0
    window: int = 0
    implementation: str = "dense"
    query_scale: float = 0.0
    softcap: float = 0.0
    fp8: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    names: bool = False

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        batch, length, d = x.shape
        n, kv, h = self.n_heads, self.n_kv_heads, self.head_dim
        if self.fp8:  # one FP8 product, Megatron's linear_qkv: each key/value head's queries, key and value
            q, k, v = joint_fp8(x, ("q_proj", "k_proj", "v_proj"), (n * h, kv * h, kv * h), kv, self.dtype,
                                self.param_dtype, nn.initializers.normal(_INIT_STD))
            q, k, v = q.reshape(batch, length, n, h), k.reshape(batch, length, kv, h), v.reshape(batch, length, kv, h)
        else:
            q = _dense(n * h, "q_proj", self.dtype, self.param_dtype)(x).reshape(batch, length, n, h)
            k = _dense(kv * h, "k_proj", self.dtype, self.param_dtype)(x).reshape(batch, length, kv, h)
            v = _dense(kv * h, "v_proj", self.dtype, self.param_dtype)(x).reshape(batch, length, kv, h)
        positions = _context.position_ids(length)  # split over a context axis, in its devices' order
        q = apply_rope(q, positions, self.rope_theta, self.rope_scaling)
        k = apply_rope(k, positions, self.rope_theta, self.rope_scaling)
        if self.names:  # as MaxText names them (attentions.py at tpu-recipes-v0.1.4, lines 1782-1784)
            q, k, v = checkpoint_name(q, "query_proj"), checkpoint_name(k, "key_proj"), checkpoint_name(v, "value_proj")
        scale = 1.0 / math.sqrt(self.query_scale or h)
        out = attention(q, k, v, implementation=self.implementation, causal=True,
                        window=self.window, scale=scale, softcap=self.softcap)
        out = _dense(d, "o_proj", self.dtype, self.param_dtype, self.fp8)(out.reshape(batch, length, n * h))
        return checkpoint_name(out, "out_proj") if self.names else out


# --------------------------------------------------------------------------- MLP

_ACTIVATIONS: dict[str, Callable[[jnp.ndarray], jnp.ndarray]] = {
    "silu": jax.nn.silu,  # SwiGLU (Shazeer 2020), Llama
    "gelu": lambda x: jax.nn.gelu(x, approximate=True),  # GeGLU, Gemma
    "relu": jax.nn.relu,  # a plain ReLU feed-forward (MaxText's 2023 default decoder)
    "relu2": lambda x: jnp.square(jax.nn.relu(x)),  # squared ReLU (So et al. 2021; Nemotron-4)
}

MLP_ACTIVATIONS: tuple[str, ...] = tuple(_ACTIVATIONS)
"""The MLP activations a block takes: ``silu``, ``gelu`` (tanh approximation),
``relu`` and ``relu2`` (squared ReLU)."""


class GatedMLP(nn.Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))``: SwiGLU (``silu``) or GeGLU
    (``gelu``, tanh approximation); ``hidden`` the width of each of the two
    projections up, no biases; ``fp8``: the three products in FP8 (`fp8_dot_general`), the gate's
    and up's as one (`joint_fp8`, Megatron's ``linear_fc1``)."""

    hidden: int
    activation: str = "silu"
    fp8: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    names: bool = False

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        act = _ACTIVATIONS[self.activation]
        if self.fp8:  # one FP8 product, Megatron's linear_fc1 (gate and up), column by column
            gate, up = joint_fp8(x, ("gate_proj", "up_proj"), (self.hidden, self.hidden), self.hidden, self.dtype,
                                 self.param_dtype, nn.initializers.normal(_INIT_STD))
        else:
            gate = _dense(self.hidden, "gate_proj", self.dtype, self.param_dtype)(x)
            up = _dense(self.hidden, "up_proj", self.dtype, self.param_dtype)(x)
        if self.names:  # as MaxText's MlpBlock names them (linears.py at tpu-recipes-v0.1.4, lines 359 and 390)
            gate, up = checkpoint_name(gate, "mlpwi_0"), checkpoint_name(up, "mlpwi_1")
        out = _dense(x.shape[-1], "down_proj", self.dtype, self.param_dtype, self.fp8)(act(gate) * up)
        return checkpoint_name(out, "mlpwo") if self.names else out


class PlainMLP(nn.Module):
    """``down_proj(act(up_proj(x)))``: a feed-forward without a gate (two matrices,
    ``hidden`` wide), no biases; ``fp8``: the two products in FP8 (`fp8_dot_general`)."""

    hidden: int
    activation: str = "relu"
    fp8: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    names: bool = False

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        up = _dense(self.hidden, "up_proj", self.dtype, self.param_dtype, self.fp8)(x)
        if self.names:  # MaxText's one input projection (linears.py at tpu-recipes-v0.1.4, line 340)
            up = checkpoint_name(up, "mlpwi")
        out = _dense(x.shape[-1], "down_proj", self.dtype, self.param_dtype, self.fp8)(_ACTIVATIONS[self.activation](up))
        return checkpoint_name(out, "mlpwo") if self.names else out


# --------------------------------------------------------------------------- embedding


class Embedder(nn.Module):
    """A token embedding whose transpose is the language-model head (tied), as
    Gemma's own ``Embedder`` is written: ``encode`` looks tokens up (times
    ``sqrt(d_model)`` with ``scale_by_sqrt_dim``), ``attend`` is the head's matmul,
    a method of this module, not its ``__call__``.

    Attributes:
      vocab_size: rows of ``embedding``.
      d_model: its width.
      scale_by_sqrt_dim: Gemma multiplies the looked-up rows by ``sqrt(d_model)``.
    """

    vocab_size: int
    d_model: int
    scale_by_sqrt_dim: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    def setup(self) -> None:
        self.embedding = self.param(
            "embedding", nn.initializers.normal(1.0), (self.vocab_size, self.d_model), self.param_dtype
        )

    def encode(self, tokens: jnp.ndarray) -> jnp.ndarray:
        x = jnp.take(self.embedding, tokens, axis=0).astype(self.dtype)
        return x * jnp.asarray(math.sqrt(self.d_model), self.dtype) if self.scale_by_sqrt_dim else x

    def attend(self, x: jnp.ndarray) -> jnp.ndarray:
        return jnp.dot(x, self.embedding.astype(self.dtype).T)

    def __call__(self, tokens: jnp.ndarray) -> jnp.ndarray:
        return self.encode(tokens)


# --------------------------------------------------------------------------- block


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """One decoder block's configuration (hashable: a Linen module field).

    Attributes:
      n_heads, n_kv_heads, head_dim: see `Attention`.
      d_ff: the MLP's hidden width (each of gate and up when gated).
      activation: one of `MLP_ACTIVATIONS`: ``silu`` (SwiGLU) or ``gelu``
        (GeGLU) gated, ``relu`` or ``relu2`` in a plain MLP.
      gated: a gated MLP (`GatedMLP`, three matrices); False: `PlainMLP` (two).
      norm_eps: `RMSNorm`'s epsilon.
      norm_unit_offset: Gemma's ``(1 + scale)`` norms.
      post_norms: Gemma 2's norms after the attention and the MLP too
        (``post_attention_layernorm`` on the attention's output,
        ``pre_feedforward_layernorm`` and ``post_feedforward_layernorm``
        around the MLP).
      rope_theta, rope_scaling, window, query_scale: see `Attention`.
      attention: see `attention`'s ``implementation``.
      attn_softcap: see `attention`'s ``softcap``.
      fp8: the projections' and the MLP's products in FP8 (`fp8_dot_general`:
        current scaling, e4m3 forward, e5m2 gradients); the attention's
        softmax products, the norms and the residual stream stay in the
        block's ``dtype``.
      names: the block names its input (``decoder_layer_input``), its
        attention's and its dense MLP's activations as MaxText does
        (`xla_cost.step.remat.CHECKPOINT_NAMES`), for a remat policy that keeps
        tensors by name (`decoder_stack` sets it for one; off, the program is
        the one without names).
    """

    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    activation: str = "silu"
    gated: bool = True
    norm_eps: float = 1e-5
    norm_unit_offset: bool = False
    post_norms: bool = False
    rope_theta: float = 10_000.0
    rope_scaling: float = 0.0
    window: int = 0
    query_scale: float = 0.0
    attention: str = "dense"
    attn_softcap: float = 0.0
    fp8: bool = False
    names: bool = False


class DecoderBlock(nn.Module):
    """A pre-norm decoder block, ``(x, _) -> (x, None)`` so that `nn.scan` can stack it::

        x = x + self_attn(input_layernorm(x))
        x = x + mlp(post_attention_layernorm(x))

    or, with ``post_norms`` (Gemma 2)::

        x = x + post_attention_layernorm(self_attn(input_layernorm(x)))
        x = x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))

    A family with another MLP (a mixture of experts) overrides `make_mlp`.
    """

    config: BlockConfig
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    def norm(self, name: str) -> RMSNorm:
        c = self.config
        return RMSNorm(c.norm_eps, c.norm_unit_offset, dtype=self.dtype, param_dtype=self.param_dtype, name=name)

    def make_mlp(self) -> nn.Module:
        """The block's MLP, named ``mlp``: `GatedMLP`, or `PlainMLP` where the configuration is not gated."""
        c = self.config
        kind = GatedMLP if c.gated else PlainMLP
        return kind(c.d_ff, c.activation, c.fp8, dtype=self.dtype, param_dtype=self.param_dtype, names=c.names,
                    name="mlp")

    @nn.compact
    def __call__(self, x: jnp.ndarray, _: Any = None) -> tuple[jnp.ndarray, None]:
        c = self.config
        attn = Attention(
            c.n_heads, c.n_kv_heads, c.head_dim, c.rope_theta, c.rope_scaling, c.window, c.attention,
            c.query_scale, c.attn_softcap, c.fp8, dtype=self.dtype, param_dtype=self.param_dtype, names=c.names,
            name="self_attn",
        )
        if c.names:  # MaxText's name for a layer's input (llama2.py at tpu-recipes-v0.1.4, line 73)
            x = checkpoint_name(x, "decoder_layer_input")
        h = attn(self.norm("input_layernorm")(x))
        if c.post_norms:
            x = x + self.norm("post_attention_layernorm")(h)
            x = x + self.norm("post_feedforward_layernorm")(self.make_mlp()(self.norm("pre_feedforward_layernorm")(x)))
        else:
            x = x + h
            x = x + self.make_mlp()(self.norm("post_attention_layernorm")(x))
        return x, None


class _BlockGroup(nn.Module):
    """Consecutive blocks of different configurations (Gemma 2's local then global
    layer), the unit `decoder_stack` scans when the layers repeat a pattern."""

    configs: tuple[BlockConfig, ...]
    block: Any
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, _: Any = None) -> tuple[jnp.ndarray, None]:
        for i, config in enumerate(self.configs):
            x, _ = self.block(config, dtype=self.dtype, param_dtype=self.param_dtype, name=f"block_{i}")(x, None)
        return x, None


def _period(configs: Sequence[BlockConfig]) -> int:
    """The shortest period ``p`` with ``configs[i] == configs[i % p]`` dividing their number."""
    n = len(configs)
    for p in range(1, n + 1):
        if n % p == 0 and all(configs[i] == configs[i % p] for i in range(n)):
            return p
    return n  # pragma: no cover - p = n always holds


def decoder_stack(
    x: jnp.ndarray,
    configs: Sequence[BlockConfig],
    *,
    scan_layers: bool,
    remat: str,
    block: type[DecoderBlock] = DecoderBlock,
    dtype: Dtype = jnp.float32,
    param_dtype: Dtype = jnp.float32,
    name: str = "layers",
) -> jnp.ndarray:
    """Applies one ``block`` per entry of ``configs`` to ``x``, inside a compact method.

    Unrolled: modules ``layers_0`` ... ``layers_{L-1}``. With ``scan_layers``, one
    `nn.scan` module ``layers`` whose parameters have a leading axis, traced
    once: over the blocks when all configurations are equal, else over groups
    of the pattern the configurations repeat (Gemma 2's local/global pair: a
    group ``block_0``, ``block_1`` scanned ``L/2`` times). The parameter count is
    the same either way.

    ``remat`` (a `xla_cost.step.remat.REMAT_LEVELS` name, ``none`` / ``selective`` /
    ``full``, or a policy of `REMAT_POLICIES`) wraps each block in `nn.remat`
    with that policy: ``full`` keeps only the block's input and recomputes its
    forward pass in the backward pass; a `xla_cost.step.remat.CUSTOM` policy
    keeps the tensors it names (the blocks name them: `BlockConfig.names`) on
    the device or in the host's memory and recomputes the rest.
    """
    policy = _remat.resolve(remat)
    if policy.startswith(_remat.CUSTOM + ":"):  # a policy that keeps tensors by name: the blocks name them
        configs = [dataclasses.replace(config, names=True) for config in configs]
    unit: Any = block
    if policy != "none":
        unit = nn.remat(block, policy=_remat.policy(policy), prevent_cse=not scan_layers)
    kw = {"dtype": dtype, "param_dtype": param_dtype}
    if not scan_layers:
        for i, config in enumerate(configs):
            x, _ = unit(config, **kw, name=f"{name}_{i}")(x, None)
        return x
    period = _period(configs)
    if period == 1:
        scanned, args = unit, (configs[0],)
    else:
        scanned, args = _BlockGroup, (tuple(configs[:period]), unit)
    stack = nn.scan(
        scanned, variable_axes={"params": 0}, split_rngs={"params": True}, length=len(configs) // period,
    )
    x, _ = stack(*args, **kw, name=name)(x, None)
    return x


def check_options(model: str, *, attention_implementation: str, remat: str, n_heads: int,
                  n_kv_heads: int, d_model: int, head_dim: int) -> None:
    """The options every family takes, each refused in one line (`InputError`);
    ``head_dim`` 0 means ``d_model / n_heads``, which must then divide."""
    if attention_implementation not in ATTENTION_IMPLEMENTATIONS:
        raise InputError(f"a {model} attention option ({', '.join(ATTENTION_IMPLEMENTATIONS)})",
                         repr(attention_implementation), "Use --set attention=dense or --set attention=fused.")
    _remat.resolve(remat)
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        raise InputError(f"{model} n_kv_head dividing n_head", f"n_head={n_heads}, n_kv_head={n_kv_heads}",
                         "Set n_kv_head to a divisor of n_head with --set (1: MQA, n_head: MHA).")
    if not head_dim and d_model % n_heads:
        raise InputError(f"{model} d_model divisible by n_head (or a head_dim)",
                         f"d_model={d_model}, n_head={n_heads}",
                         "Change d_model or n_head with --set so that n_head divides d_model, or set head_dim.")


def check_tokens(model: str, tokens: Any, seq_len: int) -> None:
    """Refuses inputs that are not ``(B, seq_len)`` integer token ids (`InputError`)."""
    expect_input_shape(model, tokens, (seq_len,))
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise InputError(f"{model} inputs of integer token ids", f"dtype {tokens.dtype}",
                         "Pass int32 token ids (a zoo model's example inputs already are).")


MEGATRON_RULES: tuple[tuple[str, tuple[str | None, ...]], ...] = (
    (r"(q_proj|k_proj|v_proj|gate_proj|up_proj)/kernel$", (None, "model")),
    (r"(o_proj|down_proj)/kernel$", ("model", None)),
    (r"(embed_tokens|embedder)/embedding$", ("model", None)),
    (r"lm_head/kernel$", (None, "model")),
)
"""Megatron-LM's tensor parallelism (Shoeybi et al. 2019) for these blocks, as
`models.gpt.MEGATRON_RULES` for GPT: the projections into the heads and the MLP's
gate and up by columns (heads, hidden units), ``o_proj`` and ``down_proj`` by rows
(one all-reduce each in the forward pass), the embedding by vocabulary rows, an
untied head by vocabulary columns."""
