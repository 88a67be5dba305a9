"""GPT-2: the decoder-only transformer of Radford et al. (2019), "Language Models
are Unsupervised Multitask Learners", in Flax Linen.

The layout and the parameter names follow the Hugging Face ``GPT2LMHeadModel``:
token embedding ``wte``, learned positional embedding ``wpe``, ``n_layer``
pre-LayerNorm blocks ``h_0`` ... ``h_{L-1}`` (or one scanned stack ``h``), a final
LayerNorm ``ln_f`` and a language-model head tied to ``wte`` (no parameters of its
own). A block is::

    x = x + attn.c_proj(causal_attention(attn.c_attn(ln_1(x))))
    x = x + mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x))))

There is no dropout unless ``dropout`` sets a rate: it adds elementwise work
(random bits, a mask, a select) but no parameters and no matmuls, and is
there for the frameworks that ran it as kernels of their own (eager Megatron-LM).

Parameters, with ``V`` the vocabulary, ``n_ctx`` the context (``seq_len``), ``d``
the width, ``L`` the depth and the default ``d_ff = 4d``::

    P = V*d + n_ctx*d + L*(12*d^2 + 13*d) + 2*d

per block: ``ln_1`` 2d, ``attn.c_attn`` 3d^2 + 3d, ``attn.c_proj`` d^2 + d,
``ln_2`` 2d, ``mlp.c_fc`` 4d^2 + 4d, ``mlp.c_proj`` 4d^2 + d; plus ``ln_f`` 2d.
With a general ``d_ff = f`` a block has ``4d^2 + 2df + 9d + f`` parameters; with
``n_head`` heads of a ``head_dim`` other than ``d / n_head`` (``a = n_head *
head_dim`` wide), ``4da + 3a + 2df + 6d + f``.
GPT-2 small (124,439,808), medium (354,823,168), large (774,030,080) and XL
(1,557,611,200) are `GPT2Small`, `GPT2Medium`, `GPT2Large` and `GPT2XL`.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from ._common import expect_input_shape
from ._spec import ModelSpec
from ._transformer import ATTENTION_IMPLEMENTATIONS, attention as _attention, fp8_dot_general
from xla_cost.parallel import context as _context
from xla_cost.errors import InputError
from xla_cost.parallel.residual import constrain_residual, constrain_sequence, gather_sequence, split_features
from xla_cost.parallel.sharding import RULES_ATTRIBUTE
from xla_cost.step import remat as _remat

__all__ = [
    "CORE_ATTENTION",
    "CORE_ATTENTION_KEEPS",
    "GPT",
    "GPT3Small",
    "GPT3Medium",
    "GPT3Large",
    "GPT3XL",
    "GPT3_2_7B",
    "GPT3_6_7B",
    "GPT3_13B",
    "GPT3_175B",
    "GPT3_PUBLISHED",
    "GPT2XL",
    "MLP",
    "SPECS",
    "Block",
    "CausalSelfAttention",
    "GPT2Large",
    "GPT2Medium",
    "GPT2Small",
    "gpt_parameters",
]

Dtype = Any

_INIT_STD = 0.02  # GPT-2's initializer_range

CORE_ATTENTION = "core_attention"
"""The GPT's own ``remat`` policy beside `xla_cost.step.remat.REMAT_POLICIES`: Megatron-LM's selective
recomputation (Korthikanti et al. 2022, §5; megatron/model/transformer.py at d07d29df, 2022-06-08,
lines 356 and 366-382: ``checkpoint_core_attention = args.recompute_granularity == 'selective'`` runs
``CoreAttention`` under ``mpu.checkpoint``): the core attention recomputed in the backward pass (its
``q k^T``, masked softmax and product with the values), the activations around it kept. Each block
names the activations Megatron keeps (`CORE_ATTENTION_KEEPS`, ``jax.ad_checkpoint.checkpoint_name``)
and its `nn.remat` saves those alone (``jax.checkpoint_policies.save_only_these_names``); the layer
norms' statistics and the GeLU's inner values are recomputed from them (elementwise). Not
``selective`` (`xla_cost.step.remat.REMAT_LEVELS`: ``dots_with_no_batch_dims_saveable``, MaxText's
``minimal``), which keeps the products' outputs and recomputes the layer norms' outputs, and under
``sequence_parallel`` gathers them over ``model`` again."""

CORE_ATTENTION_KEEPS: tuple[str, ...] = ("ln_1", "qkv", "attn_residual", "ln_2", "mlp_fc", "mlp_gelu")
"""The activations a block keeps under `CORE_ATTENTION`, as Megatron's layer keeps them: the first
layer norm's output (split over ``model`` by positions under ``sequence_parallel``), ``c_attn``'s
output, the residual after the attention, the second layer norm's output, ``c_fc``'s output and the
GeLU's. The block's input is its `nn.remat`'s argument, kept anyway; the attention's context (``probs
v``) is not kept: recomputed with the scores, as Megatron's checkpointed ``CoreAttention`` recomputes
its last product."""
_LN_EPS = 1e-5  # GPT-2's layer_norm_epsilon


def gpt_parameters(vocab_size: int, seq_len: int, n_layer: int, d_model: int, d_ff: int = 0, n_head: int = 1,
                   head_dim: int = 0) -> int:
    """The closed-form parameter count of `GPT` (``d_ff = 0`` means ``4 * d_model``;
    ``head_dim = 0`` means ``d_model / n_head``, and then ``n_head`` does not count)."""
    d, f = d_model, d_ff or 4 * d_model
    a = n_head * head_dim if head_dim else d  # the attention's width: every head's
    block = 2 * d + (3 * d * a + 3 * a) + (a * d + d) + 2 * d + (d * f + f) + (f * d + d)
    return vocab_size * d + seq_len * d + n_layer * block + 2 * d


def _dense(features: int, name: str, m: Any, std: float = _INIT_STD) -> nn.Dense:
    return nn.Dense(
        features,
        dtype=m.dtype,
        param_dtype=m.param_dtype,
        kernel_init=nn.initializers.normal(std),
        name=name,
        dot_general=fp8_dot_general if m.fp8 else None,  # the module's fp8: its product in FP8 (bias apart)
    )


def _kept(x: jnp.ndarray, name: str, on: bool) -> jnp.ndarray:
    """``x`` named ``name`` for `CORE_ATTENTION`'s policy where ``on``; else ``x`` (the program without names)."""
    return checkpoint_name(x, name) if on else x


def _dropped(x: jnp.ndarray, rate: float, name: str) -> jnp.ndarray:
    """``x`` through `flax.linen.Dropout` at ``rate`` (its ``dropout`` random stream), or ``x`` itself at 0."""
    return nn.Dropout(rate, deterministic=False, name=name)(x) if rate else x


def _layer_norm(name: str, m: Any) -> nn.LayerNorm:
    return nn.LayerNorm(epsilon=_LN_EPS, dtype=m.dtype, param_dtype=m.param_dtype, name=name)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a fused ``c_attn`` and ``c_proj``.

    ``attention="dense"`` writes it out (no fused kernel) so that its matmuls
    appear in the jaxpr under this module: ``q k^T / sqrt(head_dim)`` over all
    ``T x T`` pairs, the causal mask applied by `jnp.where` (nothing is skipped),
    softmax in float32 (``softmax_float32``; else in ``dtype``, as Megatron-LM runs it
    without ``--attention-softmax-in-fp32``), then ``probs v``. ``"fused"`` is the compile target's
    fused attention (`models._transformer.attention`: cuDNN's on a GPU, the
    Pallas splash kernel on a TPU, as MaxText runs its GPT-style decoders).
    """

    n_head: int
    head_dim: int = 0
    proj_std: float = _INIT_STD
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    attention: str = "dense"
    fp8: bool = False
    sequence_parallel: bool = False
    names: bool = False
    softmax_float32: bool = True
    dropout: float = 0.0

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        batch, length, d = x.shape
        # under sequence parallelism the heads stay split over ``model`` (Megatron's layout), forward and back
        split = split_features if self.sequence_parallel else (lambda y: y)
        head_dim = self.head_dim or d // self.n_head
        width = self.n_head * head_dim
        qkv = _kept(split(_dense(3 * width, "c_attn", self)(x)), "qkv", self.names)
        # Head by head ([q k v] of head 0, then head 1, ...) as Megatron-LM lays it
        # out, so that a column split of c_attn over heads needs no data movement.
        qkv = qkv.reshape(batch, length, self.n_head, 3, head_dim)
        q, k, v = qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :]
        if self.attention != "dense":
            out = _attention(q, k, v, implementation=self.attention, causal=True).reshape(batch, length, width)
            return _dropped(_dense(d, "c_proj", self, self.proj_std)(out), self.dropout, "out_dropout")
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / math.sqrt(head_dim))
        kind = jnp.float32 if self.softmax_float32 else scores.dtype
        scores = scores.astype(kind)
        causal = jnp.tril(jnp.ones((length, length), dtype=jnp.bool_))[None, None]
        scores = jnp.where(causal, scores, jnp.finfo(kind).min)
        probs = _dropped(nn.softmax(scores, axis=-1).astype(self.dtype), self.dropout, "probs_dropout")
        out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, length, width)
        return _dropped(_dense(d, "c_proj", self, self.proj_std)(split(out)), self.dropout, "out_dropout")


class MLP(nn.Module):
    """``c_fc`` (d -> d_ff), GELU (tanh approximation), ``c_proj`` (d_ff -> d)."""

    d_ff: int
    proj_std: float = _INIT_STD
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    fp8: bool = False
    sequence_parallel: bool = False
    names: bool = False
    dropout: float = 0.0

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        split = split_features if self.sequence_parallel else (lambda y: y)  # as the attention's heads
        h = _kept(split(_dense(self.d_ff, "c_fc", self)(x)), "mlp_fc", self.names)
        h = _kept(split(nn.gelu(h, approximate=True)), "mlp_gelu", self.names)
        return _dropped(_dense(x.shape[-1], "c_proj", self, self.proj_std)(h), self.dropout, "out_dropout")


class Block(nn.Module):
    """One pre-LayerNorm GPT-2 block; ``(x, _) -> (x, None)`` so `nn.scan` can stack it.

    With ``shard_residual`` every ``(B, T, d)`` array of the block (its input, the norms' outputs, the
    attention's and the MLP's outputs, the residual after each sum) is constrained to the residual
    stream's logical axes (`xla_cost.parallel.residual.constrain_residual`), as MaxText's
    ``DecoderLayer`` constrains its own; with ``sequence_parallel`` the same arrays are split over
    ``model`` by their positions (`xla_cost.parallel.residual.constrain_sequence`), as Megatron-LM's
    sequence parallelism holds them."""

    n_head: int
    d_ff: int
    head_dim: int = 0
    proj_std: float = _INIT_STD
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    attention: str = "dense"
    shard_residual: bool = False
    sequence_parallel: bool = False
    fp8: bool = False
    names: bool = False
    softmax_float32: bool = True
    dropout: float = 0.0

    @nn.compact
    def __call__(self, x: jnp.ndarray, _: Any = None) -> tuple[jnp.ndarray, None]:
        kw = {"proj_std": self.proj_std, "dtype": self.dtype, "param_dtype": self.param_dtype, "fp8": self.fp8,
              "dropout": self.dropout}
        stream = constrain_sequence if self.sequence_parallel else constrain_residual if self.shard_residual \
            else (lambda y: y)
        # under sequence parallelism a column-parallel projection's input is gathered whole first
        gather = gather_sequence if self.sequence_parallel else (lambda y: y)
        names = self.names  # CORE_ATTENTION's: the activations Megatron keeps, named
        x = stream(x)
        h = _kept(stream(_layer_norm("ln_1", self)(x)), "ln_1", names)
        h = CausalSelfAttention(self.n_head, self.head_dim, **kw, attention=self.attention,
                                sequence_parallel=self.sequence_parallel, names=names,
                                softmax_float32=self.softmax_float32, name="attn")(gather(h))
        x = _kept(stream(x + stream(h)), "attn_residual", names)
        h = _kept(stream(_layer_norm("ln_2", self)(x)), "ln_2", names)
        h = MLP(self.d_ff, **kw, sequence_parallel=self.sequence_parallel, names=names, name="mlp")(gather(h))
        return stream(x + stream(h)), None


class GPT(nn.Module):
    """GPT-2 language model: token ids ``(B, seq_len)`` -> logits ``(B, seq_len, vocab_size)``.

    Attributes:
      vocab_size: ``V``, rows of the token embedding ``wte`` (and logits per token).
      seq_len: ``n_ctx``, rows of the positional embedding ``wpe``; the inputs must
        be exactly this long.
      n_layer: number of blocks ``L``.
      n_head: attention heads; must divide ``d_model`` unless ``head_dim`` is set.
      d_model: the residual width ``d``.
      d_ff: the MLP's hidden width; 0 means ``4 * d_model``.
      head_dim: each head's width; 0 means ``d_model / n_head`` (GPT-2's).
        Another width makes ``c_attn`` ``d x 3 n_head head_dim`` and ``c_proj``
        ``n_head head_dim x d`` (MaxText's 2023 decoder: heads of 256).
      scan_layers: stack the blocks with `nn.scan` (one module ``h`` whose
        parameters have a leading ``n_layer`` axis, traced once) instead of
        unrolling ``h_0`` ... ``h_{L-1}``. The parameter count is the same.
      dtype: the computation dtype.
      param_dtype: the parameters' dtype.
      remat: rematerialise each block (`nn.remat` with a policy of
        `xla_cost.step.remat.REMAT_POLICIES`): ``full`` keeps only the blocks'
        inputs and recomputes their forward passes in the backward pass; or
        `CORE_ATTENTION`, Megatron-LM's selective recomputation (the core
        attention recomputed, the activations around it kept).
      attention: ``dense`` (written out, the default) or ``fused`` (the
        compile target's fused kernel: `CausalSelfAttention`).
      shard_residual: in a sharded step, the residual stream's width
        ``d_model`` split over the tensor-parallel ``model`` axis inside and
        between the blocks, as MaxText splits it (its logical rule
        ``activation_embed`` -> ``tensor``: `Block`,
        `xla_cost.parallel.residual`); the activations the
        blocks save are then ``1 / model`` as wide on each device. Off (the
        default): the partitioner's choice, Megatron's, each tensor-parallel
        device holding the whole width. No effect without a ``model`` axis.
      sequence_parallel: in a sharded step, the residual stream split over
        the tensor-parallel ``model`` axis by its positions between the
        blocks' linear layers, as Megatron-LM's sequence parallelism splits
        it (Korthikanti et al. 2022, §4.2.2: `Block`,
        `xla_cost.parallel.residual.constrain_sequence`): each device's layer
        norms and residual sums over ``T / model`` positions, the
        column-parallel projections' inputs all-gathered and the
        row-parallel ones' outputs reduce-scattered instead of all-reduced.
        Not with ``shard_residual``. No effect without a ``model`` axis.
      fp8: the blocks' four products (``c_attn``, the attention's ``c_proj``,
        ``c_fc``, the MLP's ``c_proj``) in FP8 with current scaling
        (`models._transformer.fp8_dot_general`, the zoo's ``--dtype float8``), as
        Transformer Engine's FP8 linear layers run a GPT's; the attention's own
        products, the tied head and the rest in ``dtype``.
      softmax_float32: the dense attention's masked softmax computed in
        float32 (the default; the scores converted first and the
        probabilities back), else in ``dtype``, as Megatron-LM's eager
        ``torch.nn.Softmax`` ran it on float16 scores (2019's
        ``mpu/transformer.py``; v1.0 without ``--attention-softmax-in-fp32``).
        No effect on the fused attention.
      dropout: the rate of dropout on the embeddings, the attention's
        probabilities (dense attention) and each block's two outputs, as
        Megatron-LM's ``--attention-dropout`` and ``--hidden-dropout`` (0.1 by
        default) drop them; 0 (the default): none, nothing drawn.
    """

    vocab_size: int = 50257
    seq_len: int = 1024
    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768
    d_ff: int = 0
    head_dim: int = 0
    scan_layers: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    remat: str = "none"
    attention: str = "dense"
    # before the sharding options: `xla-cost models` lists the fields in this order, and the last one's
    # ``sequence_parallel=False`` without its comma keeps the zoo table's longest word at 23 (80 columns)
    softmax_float32: bool = True
    dropout: float = 0.0
    shard_residual: bool = False
    sequence_parallel: bool = False
    fp8: bool = False

    def _validate(self, tokens: Any) -> None:
        if self.shard_residual and self.sequence_parallel:
            raise InputError("one split of the residual stream: shard_residual (its width) or sequence_parallel "
                             "(its positions)", "both", "Drop --set shard_residual=true or "
                             "--set sequence_parallel=true.")
        if self.attention not in ATTENTION_IMPLEMENTATIONS:
            raise InputError(f"an attention implementation ({', '.join(ATTENTION_IMPLEMENTATIONS)})",
                             repr(self.attention), "Use --set attention=dense or --set attention=fused.")
        if not self.head_dim and self.d_model % self.n_head:
            raise InputError(
                "d_model divisible by n_head",
                f"d_model={self.d_model}, n_head={self.n_head}",
                "Change d_model or n_head with --set so that n_head divides d_model, or set head_dim.",
            )
        expect_input_shape(type(self).__name__, tokens, (self.seq_len,))
        if not jnp.issubdtype(tokens.dtype, jnp.integer):
            raise InputError(
                f"{type(self).__name__} inputs of integer token ids",
                f"dtype {tokens.dtype}",
                "Pass int32 token ids (a zoo model's example inputs already are).",
            )

    @nn.compact
    def __call__(self, tokens: jnp.ndarray) -> jnp.ndarray:
        self._validate(tokens)
        d = self.d_model
        wte = nn.Embed(
            self.vocab_size,
            d,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            embedding_init=nn.initializers.normal(_INIT_STD),
            name="wte",
        )
        wpe = nn.Embed(
            self.seq_len,
            d,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            embedding_init=nn.initializers.normal(0.01),
            name="wpe",
        )
        x = wte(tokens) + wpe(_context.position_ids(tokens.shape[1]))[None]  # a context axis's order where split
        x = _dropped(x, self.dropout, "embedding_dropout")

        block_kw = {
            "n_head": self.n_head,
            "d_ff": self.d_ff or 4 * d,
            "head_dim": self.head_dim,
            "attention": self.attention,
            "shard_residual": self.shard_residual,
            "sequence_parallel": self.sequence_parallel,
            "fp8": self.fp8,
            "softmax_float32": self.softmax_float32,
            "dropout": self.dropout,
            # GPT-2 scales the residual projections' init by 1/sqrt(2L).
            "proj_std": _INIT_STD / math.sqrt(2 * self.n_layer),
            "dtype": self.dtype,
            "param_dtype": self.param_dtype,
        }
        core = self.remat == CORE_ATTENTION
        block_kw["names"] = core
        block = Block if not core and _remat.check(self.remat) == "none" else nn.remat(
            Block, policy=jax.checkpoint_policies.save_only_these_names(*CORE_ATTENTION_KEEPS) if core
            else _remat.policy(self.remat), prevent_cse=not self.scan_layers
        )
        if self.scan_layers:
            stack = nn.scan(
                block,
                variable_axes={"params": 0},
                split_rngs={"params": True, **({"dropout": True} if self.dropout else {})},
                length=self.n_layer,
            )
            x, _ = stack(**block_kw, name="h")(x, None)
        else:
            for i in range(self.n_layer):
                x, _ = block(**block_kw, name=f"h_{i}")(x, None)

        x = _layer_norm("ln_f", self)(x)
        return wte.attend(x)  # the LM head, tied to the token embedding


class GPT2Small(GPT):
    """GPT-2 small: 12 layers, 12 heads, d 768; 124,439,808 parameters."""

    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768


class GPT2Medium(GPT):
    """GPT-2 medium: 24 layers, 16 heads, d 1024; 354,823,168 parameters."""

    n_layer: int = 24
    n_head: int = 16
    d_model: int = 1024


class GPT2Large(GPT):
    """GPT-2 large: 36 layers, 20 heads, d 1280; 774,030,080 parameters."""

    n_layer: int = 36
    n_head: int = 20
    d_model: int = 1280


class GPT2XL(GPT):
    """GPT-2 XL: 48 layers, 25 heads, d 1600; 1,557,611,200 parameters."""

    n_layer: int = 48
    n_head: int = 25
    d_model: int = 1600


# --------------------------------------------------------------------------- GPT-3


class _GPT3(GPT):
    """GPT-3 (Brown et al. 2020): GPT-2's architecture at n_ctx 2048, scanned by default.

    The sizes are Table 2.1's. Two departures, stated: attention is dense in
    every layer (the paper alternates dense and locally banded sparse layers,
    which changes attention FLOP, not parameters), and the head count of
    GPT-3 XL is 16 (Table 2.1 lists 24 heads of 128, which does not multiply
    to its d_model of 2048), GPT-3 13B's d_model is 5120 (40 heads of 128;
    the table prints 5140). ``scan_layers`` defaults to True so that a 96-layer
    model traces one block.
    """

    seq_len: int = 2048
    scan_layers: bool = True


class GPT3Small(_GPT3):
    """GPT-3 Small: 12 layers, d 768, 12 heads; "125M" (Table 2.1)."""

    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768


class GPT3Medium(_GPT3):
    """GPT-3 Medium: 24 layers, d 1024, 16 heads; "350M"."""

    n_layer: int = 24
    n_head: int = 16
    d_model: int = 1024


class GPT3Large(_GPT3):
    """GPT-3 Large: 24 layers, d 1536, 16 heads of 96; "760M"."""

    n_layer: int = 24
    n_head: int = 16
    d_model: int = 1536


class GPT3XL(_GPT3):
    """GPT-3 XL: 24 layers, d 2048, 16 heads of 128; "1.3B"."""

    n_layer: int = 24
    n_head: int = 16
    d_model: int = 2048


class GPT3_2_7B(_GPT3):  # noqa: N801 - the paper's name
    """GPT-3 2.7B: 32 layers, d 2560, 32 heads of 80."""

    n_layer: int = 32
    n_head: int = 32
    d_model: int = 2560


class GPT3_6_7B(_GPT3):  # noqa: N801
    """GPT-3 6.7B: 32 layers, d 4096, 32 heads of 128."""

    n_layer: int = 32
    n_head: int = 32
    d_model: int = 4096


class GPT3_13B(_GPT3):  # noqa: N801
    """GPT-3 13B: 40 layers, d 5120, 40 heads of 128."""

    n_layer: int = 40
    n_head: int = 40
    d_model: int = 5120


class GPT3_175B(_GPT3):  # noqa: N801
    """GPT-3 175B: 96 layers, d 12288, 96 heads of 128."""

    n_layer: int = 96
    n_head: int = 96
    d_model: int = 12288


GPT3_PUBLISHED: dict[str, float] = {
    "gpt3-small": 125e6,
    "gpt3-medium": 350e6,
    "gpt3-large": 760e6,
    "gpt3-xl": 1.3e9,
    "gpt3-2.7b": 2.7e9,
    "gpt3-6.7b": 6.7e9,
    "gpt3-13b": 13.0e9,
    "gpt3-175b": 175.0e9,
}
"""Brown et al. 2020, Table 2.1: parameter counts as published (rounded)."""


# --------------------------------------------------------------------------- zoo

_GPT2_SOURCE = "Radford et al. 2019, GPT-2; HF GPT2LMHeadModel"
_GPT3_SOURCE = "Brown et al. 2020, Table 2.1 (dense attention in every layer)"
_MINIMUMS = {"d_ff": 0, "head_dim": 0}  # d_ff = 0 means 4 * d_model; head_dim = 0, d_model / n_head


def _tokens(config: Any) -> tuple[int, ...]:
    return (config["seq_len"],)


MEGATRON_RULES: tuple[tuple[str, tuple[str | None, ...]], ...] = (
    (r"(c_attn|c_fc)/kernel$", (None, "model")),
    (r"(c_attn|c_fc)/bias$", ("model",)),
    (r"c_proj/kernel$", ("model", None)),
    (r"wte/embedding$", ("model", None)),
)
"""Megatron-LM's tensor parallelism (Shoeybi et al. 2019) for a sharded step's
``model`` axis (`xla_cost.parallel.sharding`): ``c_attn`` (laid out head by head) and
``c_fc`` split by columns, both ``c_proj`` by rows (one all-reduce each in the
forward pass), the token embedding by vocabulary rows where the axis divides
the vocabulary (50257 is prime to 2: GPT-2's stays whole)."""
setattr(GPT, RULES_ATTRIBUTE, MEGATRON_RULES)  # read by `xla_cost.parallel.sharding.model_rules`


def _spec(name: str, description: str, module: type[GPT], source: str, *aliases: str) -> ModelSpec:
    return ModelSpec(
        name, description, module, _tokens, input_dtype="int32", source=source,
        aliases=aliases, minimums=_MINIMUMS,
    )


SPECS: list[ModelSpec] = [
    _spec(
        "gpt2-small",
        "GPT-2 small decoder-only transformer: 12 layers x 768, 12 heads, tied LM head",
        GPT2Small, _GPT2_SOURCE, "gpt2", "openai-community/gpt2",
    ),
    _spec(
        "gpt2-medium",
        "GPT-2 medium decoder-only transformer: 24 layers x 1024, 16 heads, tied LM head",
        GPT2Medium, _GPT2_SOURCE, "openai-community/gpt2-medium",
    ),
    _spec(
        "gpt2-large",
        "GPT-2 large decoder-only transformer: 36 layers x 1280, 20 heads, tied LM head",
        GPT2Large, _GPT2_SOURCE, "openai-community/gpt2-large",
    ),
    _spec(
        "gpt2-xl",
        "GPT-2 XL decoder-only transformer: 48 layers x 1600, 25 heads, tied LM head",
        GPT2XL, _GPT2_SOURCE, "openai-community/gpt2-xl",
    ),
    *(
        _spec(
            name,
            f"GPT-3 {label} decoder-only transformer: {module.n_layer} layers x {module.d_model}, "
            "n_ctx 2048, nn.scan over layers",
            module, _GPT3_SOURCE,
        )
        for name, label, module in [
            ("gpt3-small", "Small", GPT3Small),
            ("gpt3-medium", "Medium", GPT3Medium),
            ("gpt3-large", "Large", GPT3Large),
            ("gpt3-xl", "XL", GPT3XL),
            ("gpt3-2.7b", "2.7B", GPT3_2_7B),
            ("gpt3-6.7b", "6.7B", GPT3_6_7B),
            ("gpt3-13b", "13B", GPT3_13B),
            ("gpt3-175b", "175B", GPT3_175B),
        ]
    ),
]
"""The zoo entries of this family."""
