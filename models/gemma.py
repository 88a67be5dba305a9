"""Gemma and Gemma 2: decoder-only transformers with GeGLU, rotary embeddings,
RMSNorm ``(1 + scale)``, head width 256 and a language-model head tied to the
embedding, in Flax Linen (`models._transformer`'s blocks).

As Gemma's own code writes it, the embedding is a module (``embedder``) with two
methods: ``encode`` looks the tokens up and multiplies them by ``sqrt(d_model)``,
``attend`` is the head's matmul (`models._transformer.Embedder`), called as
``self.embedder.attend(x)``, not through the module's ``__call__``. Blocks are named as in
Hugging Face's ``GemmaForCausalLM`` / ``Gemma2ForCausalLM`` (``input_layernorm``,
``self_attn.{q,k,v,o}_proj``, ``post_attention_layernorm``, ``mlp.{gate,up,down}_proj``;
Gemma 2 adds ``pre_feedforward_layernorm`` and ``post_feedforward_layernorm``),
the final norm ``final_norm``.

Gemma 2 alternates local attention layers (a sliding window of 4096 keys) and
global ones, starting with a local one; it soft-caps the attention scores
(``50 tanh(s / 50)``) and the logits (``30 tanh(z / 30)``). Scanned
(``scan_layers``, the default), the stack is ``L / 2`` pairs ``layers/block_0``
(local), ``layers/block_1`` (global).

Parameters, with ``V`` the vocabulary, ``d`` the width, ``L`` the depth, ``N``
query heads and ``K`` key/value heads of width ``H``, ``f`` the width of each of
the MLP's gate and up projections (the papers' "feedforward hidden dims" are
``2f``), ``n`` the norms per block (2; Gemma 2: 4)::

    P = V*d + L*(2*d*N*H + 2*d*K*H + 3*d*f + n*d) + d

(`gemma_parameters`); the papers give the embedding (``V*d``) and the rest
("non-embedding") apart.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from ._spec import ModelSpec, Published
from ._transformer import (
    MEGATRON_RULES,
    BlockConfig,
    Embedder,
    RMSNorm,
    check_options,
    check_tokens,
    decoder_stack,
)
from xla_cost.errors import InputError
from xla_cost.parallel.sharding import RULES_ATTRIBUTE

__all__ = [
    "GEMMA_PUBLISHED",
    "SPECS",
    "Gemma",
    "Gemma2B",
    "Gemma7B",
    "Gemma2_2B",
    "Gemma2_9B",
    "Gemma2_27B",
    "gemma_forward_flops",
    "gemma_parameters",
]

Dtype = Any


def gemma_parameters(vocab_size: int, n_layer: int, d_model: int, n_head: int, n_kv_head: int, head_dim: int,
                     d_ff: int, norms_per_block: int = 2) -> tuple[int, int]:
    """``(embedding, non-embedding)`` parameters of `Gemma` in closed form: the
    tied embedding ``V*d``, and the blocks plus the final norm."""
    d, h = d_model, head_dim
    block = 2 * d * n_head * h + 2 * d * n_kv_head * h + 3 * d * d_ff + norms_per_block * d
    return vocab_size * d, n_layer * block + d


def gemma_forward_flops(model: Gemma) -> int:
    """The matrix products' FLOP of one forward pass of `Gemma` over one sequence
    of ``T = seq_len`` tokens, 2 per multiply-add: per token and layer the
    projections ``2 d (2N + 2K) H`` and the GeGLU MLP ``2 * 3 d f``, the tied head
    (``embedder.attend``) ``2 d V`` per token; per layer ``q k^T`` and ``probs v``,
    ``2 N H T^2`` each: the causal mask and Gemma 2's sliding window are selects,
    so local layers compute all ``T x T`` pairs as global ones do."""
    t, d, n, k, h = model.seq_len, model.d_model, model.n_head, model.n_kv_head, model.head_dim
    per_token = model.n_layer * (2 * d * (2 * n + 2 * k) * h + 2 * 3 * d * model.d_ff) + 2 * d * model.vocab_size
    return t * per_token + model.n_layer * 2 * 2 * n * h * t * t


class Gemma(nn.Module):
    """A Gemma language model: token ids ``(B, seq_len)`` -> logits ``(B, seq_len, vocab_size)``.

    Attributes:
      vocab_size: ``V``.
      seq_len: the inputs' length (no parameters depend on it).
      n_layer: blocks ``L``.
      n_head: query heads ``N``.
      n_kv_head: key/value heads ``K`` dividing ``N`` (1: MQA, Gemma 2B; ``N``: MHA, Gemma 7B).
      d_model: the residual width ``d``.
      d_ff: the width ``f`` of each of the GeGLU MLP's gate and up projections.
      head_dim: ``H`` (256; Gemma 2 27B: 128).
      rope_theta: the rotary base (10,000).
      norm_eps: the RMSNorms' epsilon.
      local_window: Gemma 2: even layers (0, 2, ...) attend over a sliding window
        of this many keys, odd ones globally; 0: every layer global (Gemma).
      post_norms: Gemma 2's norms after the attention and after the MLP.
      attn_softcap: soft-cap of the attention scores (Gemma 2: 50); 0: none.
        ``attention=fused`` needs 0 (`jax.nn.dot_product_attention` has none).
      final_softcap: soft-cap of the logits (Gemma 2: 30); 0: none.
      query_scale: the scores are divided by ``sqrt(query_scale)``; 0: by
        ``sqrt(head_dim)`` (Gemma 2 27B: ``d_model / n_head`` = 144).
      attention: ``dense`` or ``fused`` (`models._transformer.attention`).
      scan_layers: stack the blocks (or Gemma 2's local/global pairs) with `nn.scan`.
      remat: rematerialise each block: ``none``, ``selective`` or ``full``
        (`xla_cost.step.remat.REMAT_LEVELS`), or a policy of `REMAT_POLICIES`.
      fp8: the projections' and the MLP's matrix products in FP8
        (`models._transformer.fp8_dot_general`: current scaling, e4m3 forward,
        e5m2 gradients, float32 accumulation), the tied head and the rest in ``dtype``; the
        zoo's ``--dtype float8`` (bfloat16 and this).
      dtype: the computation dtype.
      param_dtype: the parameters' dtype.
    """

    vocab_size: int = 256_128
    seq_len: int = 8192
    n_layer: int = 18
    n_head: int = 8
    n_kv_head: int = 1
    d_model: int = 2048
    d_ff: int = 16_384
    head_dim: int = 256
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-6
    local_window: int = 0
    post_norms: bool = False
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    query_scale: float = 0.0
    attention: str = "dense"
    scan_layers: bool = True
    remat: str = "none"
    fp8: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    def block_configs(self) -> tuple[BlockConfig, ...]:
        """One `BlockConfig` per layer: local (windowed) at even layers when ``local_window``."""
        config = BlockConfig(
            n_heads=self.n_head, n_kv_heads=self.n_kv_head, head_dim=self.head_dim, d_ff=self.d_ff,
            activation="gelu", norm_eps=self.norm_eps, norm_unit_offset=True, post_norms=self.post_norms,
            rope_theta=self.rope_theta, query_scale=self.query_scale, attention=self.attention,
            attn_softcap=self.attn_softcap, fp8=self.fp8,
        )
        local = dataclasses.replace(config, window=self.local_window)
        return tuple(local if self.local_window and i % 2 == 0 else config for i in range(self.n_layer))

    @nn.compact
    def __call__(self, tokens: jnp.ndarray) -> jnp.ndarray:
        name = type(self).__name__
        check_options(name, attention_implementation=self.attention, remat=self.remat, n_heads=self.n_head,
                      n_kv_heads=self.n_kv_head, d_model=self.d_model, head_dim=self.head_dim)
        if self.local_window and self.scan_layers and self.n_layer % 2:
            raise InputError(
                f"{name} with local and global layers scanned in pairs: an even n_layer",
                f"n_layer={self.n_layer}", "Set an even n_layer, or --set scan_layers=False.",
            )
        check_tokens(name, tokens, self.seq_len)
        embedder = Embedder(self.vocab_size, self.d_model, scale_by_sqrt_dim=True, dtype=self.dtype,
                            param_dtype=self.param_dtype, name="embedder")
        x = decoder_stack(embedder.encode(tokens), self.block_configs(), scan_layers=self.scan_layers,
                          remat=self.remat, dtype=self.dtype, param_dtype=self.param_dtype)
        x = RMSNorm(self.norm_eps, unit_offset=True, dtype=self.dtype, param_dtype=self.param_dtype,
                    name="final_norm")(x)
        logits = embedder.attend(x)  # the LM head: the embedding's method, as Gemma writes it
        if self.final_softcap:
            logits = self.final_softcap * jnp.tanh(logits / self.final_softcap)
        return logits


setattr(Gemma, RULES_ATTRIBUTE, MEGATRON_RULES)  # read by `xla_cost.parallel.sharding.model_rules`


class Gemma2B(Gemma):
    """Gemma 2B: 18 layers, d 2048, 8 heads of 256, MQA, f 16384 (Gemma Team 2024a, Table 1)."""


class Gemma7B(Gemma):
    """Gemma 7B: 28 layers, d 3072, 16 heads of 256, MHA, f 24576."""

    n_layer: int = 28
    n_head: int = 16
    n_kv_head: int = 16
    d_model: int = 3072
    d_ff: int = 24_576


class _Gemma2(Gemma):
    """Gemma 2 (Gemma Team 2024b, Table 1): local (4096) and global layers in turn,
    post-norms, soft-capping 50 (scores) and 30 (logits)."""

    local_window: int = 4096
    post_norms: bool = True
    attn_softcap: float = 50.0
    final_softcap: float = 30.0


class Gemma2_2B(_Gemma2):  # noqa: N801 - the paper's name
    """Gemma 2 2B: 26 layers, d 2304, 8 heads of 256, 4 key/value heads, f 9216."""

    n_layer: int = 26
    n_head: int = 8
    n_kv_head: int = 4
    d_model: int = 2304
    d_ff: int = 9216


class Gemma2_9B(_Gemma2):  # noqa: N801
    """Gemma 2 9B: 42 layers, d 3584, 16 heads of 256, 8 key/value heads, f 14336."""

    n_layer: int = 42
    n_head: int = 16
    n_kv_head: int = 8
    d_model: int = 3584
    d_ff: int = 14_336


class Gemma2_27B(_Gemma2):  # noqa: N801
    """Gemma 2 27B: 46 layers, d 4608, 32 heads of 128, 16 key/value heads, f 36864,
    scores divided by sqrt(d_model / n_head) = 12."""

    n_layer: int = 46
    n_head: int = 32
    n_kv_head: int = 16
    d_model: int = 4608
    d_ff: int = 36_864
    head_dim: int = 128
    query_scale: float = 144.0


GEMMA_PUBLISHED: dict[str, tuple[int, int, str]] = {
    "gemma-2b": (524_550_144, 1_981_884_416, "Gemma Team 2024a (Gemma), Table 2"),
    "gemma-7b": (786_825_216, 7_751_248_896, "Gemma Team 2024a (Gemma), Table 2"),
    "gemma2-2b": (590_118_912, 2_024_517_888, "Gemma Team 2024b (Gemma 2), Table 2"),
    "gemma2-9b": (917_962_752, 8_324_201_984, "Gemma Team 2024b (Gemma 2), Table 2"),
    "gemma2-27b": (1_180_237_824, 26_047_480_320, "Gemma Team 2024b (Gemma 2), Table 2"),
}
"""Published ``(embedding, non-embedding)`` parameter counts and their sources; the
total is their sum (the head is the embedding: tied)."""


# --------------------------------------------------------------------------- zoo

_GEMMA_SOURCE = "Gemma Team 2024, Gemma: Open Models Based on Gemini Research and Technology, Tables 1-2"
_GEMMA2_SOURCE = "Gemma Team 2024, Gemma 2: Improving Open Language Models at a Practical Size, Tables 1-2"


_MINIMUMS = {"local_window": 0}  # 0: every layer global


def _tokens(config: Any) -> tuple[int, ...]:
    return (config["seq_len"],)


def _spec(name: str, label: str, module: type[Gemma], source: str, *aliases: str) -> ModelSpec:
    heads = {1: "MQA", module.n_head: "MHA"}.get(module.n_kv_head, f"GQA {module.n_head}/{module.n_kv_head} heads")
    layers = "local 4096 and global layers in turn, " if module.local_window else ""
    description = (
        f"{label} decoder-only transformer: {module.n_layer} layers x {module.d_model}, {heads} of "
        f"{module.head_dim}, {layers}GeGLU {module.d_ff}, tied head (embedder.attend), vocabulary "
        f"{module.vocab_size:,}"
    )
    embedding, rest, published = GEMMA_PUBLISHED[name]
    return ModelSpec(name, description, module, _tokens, input_dtype="int32", source=source, aliases=aliases,
                     minimums=_MINIMUMS, published=Published(embedding + rest, published),
                     forward_flops=gemma_forward_flops)


# No Hugging Face aliases (google/gemma-2b, ...): those checkpoints have 256,000
# vocabulary rows, not the 256,128 of Gemma's own JAX code and the papers' Table 2
# (128 * d parameters fewer), and an alias names the same parameter count.
SPECS: list[ModelSpec] = [
    _spec("gemma-2b", "Gemma 2B", Gemma2B, _GEMMA_SOURCE),
    _spec("gemma-7b", "Gemma 7B", Gemma7B, _GEMMA_SOURCE),
    _spec("gemma2-2b", "Gemma 2 2B", Gemma2_2B, _GEMMA2_SOURCE),
    _spec("gemma2-9b", "Gemma 2 9B", Gemma2_9B, _GEMMA2_SOURCE),
    _spec("gemma2-27b", "Gemma 2 27B", Gemma2_27B, _GEMMA2_SOURCE),
]
"""The zoo entries of this family."""
