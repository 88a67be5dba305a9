"""BERT: the bidirectional transformer encoder of Devlin et al. (2019), "BERT:
Pre-training of Deep Bidirectional Transformers for Language Understanding", with
its masked-language-model head, in Flax Linen.

The layout follows the Hugging Face ``BertForMaskedLM`` (the parameter names are
shortened): embeddings (word, position, token type, then a LayerNorm), ``n_layer``
post-LayerNorm encoder layers ``layer_0`` ... ``layer_{L-1}`` (or one scanned stack
``layer``), and the MLM head ``cls``: a dense transform with GELU and LayerNorm,
then a decoder tied to the word embeddings plus an output bias. A layer is::

    x = attention.LayerNorm(x + attention.output(self_attention(x)))   # q, k, v Dense
    x = LayerNorm(x + output(gelu(intermediate(x))))

GELU is the exact (erf) form, LayerNorm epsilon is 1e-12, as in BERT. There is no
dropout, no attention mask (every token is valid) and no pooler or next-sentence
head (``BertForMaskedLM`` has neither). Every token has token type 0.

The model returns logits for every position, ``(B, seq_len, vocab_size)``, so the
analyzer's default loss is a cross-entropy over all positions. That is an upper
bound on the MLM head's work: real pre-training computes the head (and its
``d x V`` decoder matmul) only on the ~15% of masked positions.

Parameters, with ``V`` the vocabulary, ``P`` the position table's rows
(``max_position``), ``d`` the width, ``f`` the FFN width and ``L`` the depth::

    P_total = (V + P + 2)*d + 2d                               embeddings + LayerNorm
            + L*(4*(d^2 + d) + 2d + (d*f + f) + (f*d + d) + 2d) encoder layers
            + (d^2 + d) + 2d + V                               MLM transform, LN, bias

BERT-base (L 12, d 768, f 3072) has 109,514,298 and BERT-large (L 24, d 1024,
f 4096) 335,174,458, the Hugging Face ``BertForMaskedLM`` counts; `BertBase`
and `BertLarge`.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from ._common import expect_input_shape
from ._spec import ModelSpec
from xla_cost.errors import InputError
from xla_cost.parallel.sharding import RULES_ATTRIBUTE

__all__ = [
    "Bert",
    "BertAttention",
    "BertBase",
    "BertEmbeddings",
    "BertLarge",
    "BertLayer",
    "MLMHead",
    "SPECS",
    "bert_parameters",
]

Dtype = Any

_INIT_STD = 0.02  # BERT's initializer_range
_LN_EPS = 1e-12  # BERT's layer_norm_eps


def bert_parameters(
    vocab_size: int, n_layer: int, d_model: int, d_ff: int, max_position: int = 512, type_vocab_size: int = 2
) -> int:
    """The closed-form parameter count of `Bert`."""
    d, f = d_model, d_ff
    embeddings = (vocab_size + max_position + type_vocab_size) * d + 2 * d
    layer = 4 * (d * d + d) + 2 * d + (d * f + f) + (f * d + d) + 2 * d
    head = (d * d + d) + 2 * d + vocab_size
    return embeddings + n_layer * layer + head


def _dense(features: int, name: str, m: Any) -> nn.Dense:
    return nn.Dense(
        features,
        dtype=m.dtype,
        param_dtype=m.param_dtype,
        kernel_init=nn.initializers.normal(_INIT_STD),
        name=name,
    )


def _layer_norm(name: str, m: Any) -> nn.LayerNorm:
    return nn.LayerNorm(epsilon=_LN_EPS, dtype=m.dtype, param_dtype=m.param_dtype, name=name)


def _embed(rows: int, features: int, name: str, m: Any) -> nn.Embed:
    return nn.Embed(
        rows,
        features,
        dtype=m.dtype,
        param_dtype=m.param_dtype,
        embedding_init=nn.initializers.normal(_INIT_STD),
        name=name,
    )


class BertEmbeddings(nn.Module):
    """Word + position + token-type (type 0) embeddings, then LayerNorm.

    Returns the embedded tokens and the word-embedding table, which the MLM
    decoder reuses (tied weights).
    """

    vocab_size: int
    max_position: int
    type_vocab_size: int
    d_model: int
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, tokens: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        length = tokens.shape[1]
        word = _embed(self.vocab_size, self.d_model, "word_embeddings", self)
        position = _embed(self.max_position, self.d_model, "position_embeddings", self)
        token_type = _embed(self.type_vocab_size, self.d_model, "token_type_embeddings", self)
        x = word(tokens)
        x = x + position(jnp.arange(length)[None])
        x = x + token_type(jnp.zeros((1, length), jnp.int32))
        return _layer_norm("LayerNorm", self)(x), word.embedding


class BertAttention(nn.Module):
    """Bidirectional multi-head self-attention, output projection, residual, LayerNorm.

    Written out (no fused kernel) so that its matmuls appear in the jaxpr under
    this module: separate ``query``, ``key`` and ``value`` projections,
    ``q k^T / sqrt(head_dim)`` over all ``T x T`` pairs (no mask), softmax in
    float32, ``probs v``, then ``output`` and ``LayerNorm(x + output)``.
    """

    n_head: int
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        batch, length, d = x.shape
        head_dim = d // self.n_head

        def heads(name: str) -> jnp.ndarray:
            return _dense(d, name, self)(x).reshape(batch, length, self.n_head, head_dim)

        q, k, v = heads("query"), heads("key"), heads("value")
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / math.sqrt(head_dim))
        probs = nn.softmax(scores.astype(jnp.float32), axis=-1).astype(self.dtype)
        out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, length, d)
        return _layer_norm("LayerNorm", self)(x + _dense(d, "output", self)(out))


class BertLayer(nn.Module):
    """One post-LayerNorm encoder layer; ``(x, _) -> (x, None)`` so `nn.scan` can stack it."""

    n_head: int
    d_ff: int
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, _: Any = None) -> tuple[jnp.ndarray, None]:
        x = BertAttention(self.n_head, dtype=self.dtype, param_dtype=self.param_dtype, name="attention")(x)
        h = nn.gelu(_dense(self.d_ff, "intermediate", self)(x), approximate=False)
        x = _layer_norm("LayerNorm", self)(x + _dense(x.shape[-1], "output", self)(h))
        return x, None


class MLMHead(nn.Module):
    """``BertOnlyMLMHead``: dense d -> d, GELU, LayerNorm, tied decoder, output bias.

    The decoder is ``x @ word_embeddings^T``, computed here (so its FLOP belong
    to this module) with the table passed in; only the bias ``V`` is this
    module's own.
    """

    vocab_size: int
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, word_embeddings: jnp.ndarray) -> jnp.ndarray:
        h = nn.gelu(_dense(x.shape[-1], "dense", self)(x), approximate=False)
        h = _layer_norm("LayerNorm", self)(h)
        bias = self.param("bias", nn.initializers.zeros_init(), (self.vocab_size,), self.param_dtype)
        logits = jnp.einsum("btd,vd->btv", h, word_embeddings.astype(self.dtype))
        return logits + bias.astype(self.dtype)[None, None]


class Bert(nn.Module):
    """BERT with an MLM head: token ids ``(B, seq_len)`` -> logits ``(B, seq_len, vocab_size)``.

    Attributes:
      vocab_size: ``V``, rows of the word embedding (and logits per token).
      seq_len: the input length; the inputs must be exactly this long, and it
        may not exceed ``max_position``. 512 here; the zoo's `BertBase` and
        `BertLarge` default to 128, the length of BERT's pre-training phase 1
        (``--set seq_len=512`` for phase 2).
      max_position: rows of the position table (``max_position_embeddings``).
      n_layer: number of encoder layers ``L``.
      n_head: attention heads; must divide ``d_model``.
      d_model: the hidden width ``d``.
      d_ff: the FFN's intermediate width.
      type_vocab_size: rows of the token-type table (every input uses type 0).
      scan_layers: stack the layers with `nn.scan` (one module ``layer`` whose
        parameters have a leading ``n_layer`` axis, traced once) instead of
        unrolling ``layer_0`` ... ``layer_{L-1}``. The parameter count is the same.
      dtype: the computation dtype.
      param_dtype: the parameters' dtype.
    """

    vocab_size: int = 30522
    seq_len: int = 512
    max_position: int = 512
    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768
    d_ff: int = 3072
    type_vocab_size: int = 2
    scan_layers: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    def _validate(self, tokens: Any) -> None:
        if self.d_model % self.n_head:
            raise InputError(
                "d_model divisible by n_head",
                f"d_model={self.d_model}, n_head={self.n_head}",
                "Change d_model or n_head with --set so that n_head divides d_model.",
            )
        if self.seq_len > self.max_position:
            raise InputError(
                "seq_len <= max_position",
                f"seq_len={self.seq_len}, max_position={self.max_position}",
                "Lower seq_len or raise max_position with --set.",
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
        kw = {"dtype": self.dtype, "param_dtype": self.param_dtype}
        x, table = BertEmbeddings(
            self.vocab_size, self.max_position, self.type_vocab_size, self.d_model, **kw, name="embeddings"
        )(tokens)

        layer_kw = {"n_head": self.n_head, "d_ff": self.d_ff, **kw}
        if self.scan_layers:
            stack = nn.scan(
                BertLayer,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                length=self.n_layer,
            )
            x, _ = stack(**layer_kw, name="layer")(x, None)
        else:
            for i in range(self.n_layer):
                x, _ = BertLayer(**layer_kw, name=f"layer_{i}")(x, None)

        return MLMHead(self.vocab_size, **kw, name="cls")(x, table)


class BertBase(Bert):
    """BERT-base: 12 layers, 12 heads, d 768, d_ff 3072; 109,514,298 parameters with the MLM head."""

    seq_len: int = 128
    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768
    d_ff: int = 3072


class BertLarge(Bert):
    """BERT-large: 24 layers, 16 heads, d 1024, d_ff 4096; 335,174,458 parameters with the MLM head."""

    seq_len: int = 128
    n_layer: int = 24
    n_head: int = 16
    d_model: int = 1024
    d_ff: int = 4096


MEGATRON_RULES: tuple[tuple[str, tuple[str | None, ...]], ...] = (
    (r"(query|key|value|intermediate)/kernel$", (None, "model")),
    (r"(query|key|value|intermediate)/bias$", ("model",)),
    (r"output/kernel$", ("model", None)),
    (r"word_embeddings/embedding$", ("model", None)),
)
"""Megatron-LM's tensor parallelism (Shoeybi et al. 2019) for a sharded step's
``model`` axis (`xla_cost.parallel.sharding`): the query/key/value projections and the
MLP's first layer split by columns (attention heads, hidden units), the two
output projections by rows (one all-reduce each in the forward pass), the
word embedding by vocabulary rows where the axis divides the vocabulary."""
setattr(Bert, RULES_ATTRIBUTE, MEGATRON_RULES)  # read by `xla_cost.parallel.sharding.model_rules`

_SOURCE = "Devlin et al. 2019; HF BertForMaskedLM"

SPECS: list[ModelSpec] = [
    ModelSpec(
        "bert-base",
        "BERT-base encoder with MLM head: 12 post-LN layers x 768, 12 heads, seq 128, tied decoder",
        BertBase,
        lambda c: (c["seq_len"],),
        input_dtype="int32",
        source=_SOURCE,
        aliases=("bert-base-uncased", "google-bert/bert-base-uncased"),
    ),
    ModelSpec(
        "bert-large",
        "BERT-large encoder with MLM head: 24 post-LN layers x 1024, 16 heads, seq 128, tied decoder",
        BertLarge,
        lambda c: (c["seq_len"],),
        input_dtype="int32",
        source=_SOURCE,
        aliases=("bert-large-uncased", "google-bert/bert-large-uncased"),
    ),
]
"""The zoo entries of this family."""
