"""Fused attention's FLOP: the one convention both counters follow.

A fused attention kernel (cuDNN's flash attention on a GPU, which
``jax.nn.dot_product_attention(..., implementation="cudnn")`` binds as the
``dot_product_attention_fwd_wrapper`` and ``..._bwd_wrapper`` primitives and a
GPU program runs as ``__cudnn$fmha*`` custom calls) computes what the dense
attention written out computes, without writing its ``T x S`` scores to memory:

* forward: the scores ``Q K^T`` and the outputs ``P V``, ``2 x B x N x T x S x
  (qk head + v head)`` FLOP, and the softmax, `SOFTMAX_FLOP` per score (one
  more per score with a bias);
* backward: two products per forward product (``dQ``, ``dK``, ``dV``, ``dP``),
  and the softmax's gradient, `SOFTMAX_FLOP` per score (one more with a bias).

Every ``T x S`` pair is counted, a causal mask's or a sliding window's skipped
pairs included, as the dense model counts them (its masked scores are
computed, then replaced): the two ways of writing attention count alike, and
``attention_flops="causal"`` (`xla_cost.analysis.costs.ATTENTION_CONVENTIONS`)
halves the products of both. Flash attention's recomputation of the scores in
the backward pass is not counted either (the model's arithmetic, as the dense
model's backward pass does it). Only the standard library is used: the
compiled programs' reader (`xla_cost.compiled.kernels`) prices the custom
calls by the same functions.
"""

from __future__ import annotations

__all__ = ["SOFTMAX_FLOP", "FMA", "products", "attention_flops", "attention_transcendentals"]

FMA = 2
"""FLOP per multiply-add (XLA's convention, `xla_cost.count.registry.FLOPS_PER_FMA`)."""

SOFTMAX_FLOP = 5
"""FLOP per attention score of fused attention's softmax, forward: scale, row
max, subtract, row sum, normalise (the exp is a transcendental); backward:
dP times P, its row sum, subtract, times P, scale. A bias adds one per score
in each direction."""


def products(scores: int, qk_head: int, v_head: int, backward: bool) -> int:
    """FLOP of the matrix products of fused attention over ``scores`` (``B x N x T x S``)
    query-key pairs: ``Q K^T`` (``qk_head`` deep) and ``P V`` (``v_head``), twice
    as many in the backward pass."""
    return (2 if backward else 1) * FMA * scores * (qk_head + v_head)


def attention_flops(scores: int, qk_head: int, v_head: int, backward: bool, bias: bool = False) -> int:
    """FLOP of one fused attention call (forward or backward): its `products`
    and its softmax (`SOFTMAX_FLOP` per score, one more with a bias)."""
    return products(scores, qk_head, v_head, backward) + scores * (SOFTMAX_FLOP + (1 if bias else 0))


def attention_transcendentals(scores: int, backward: bool) -> int:
    """Transcendentals of one fused attention call: the exp of every score
    forward; none backward (the dense model's backward pass reuses the exps)."""
    return 0 if backward else scores
