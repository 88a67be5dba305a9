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

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["SOFTMAX_FLOP", "FMA", "FUSED_ATTENTION_CALL", "products", "attention_flops", "attention_transcendentals",
           "SplashCall", "splash_call", "kernel_cost_estimate"]

FMA = 2
"""FLOP per multiply-add (XLA's convention, `xla_cost.count.registry.FLOPS_PER_FMA`)."""

FUSED_ATTENTION_CALL = "__cudnn$fmha"
"""How the custom-call target of every cuDNN fused attention call of a GPU program begins
(``__cudnn$fmhaSoftmax``, ``__cudnn$fmhaSoftmaxBackward``, ...)."""

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


_SPLASH_NAME = re.compile(r"splash_(mha|mqa)_(fwd|dq|dkv)(_segmented)?_(no_)?residuals")


class SplashCall:
    """One call of jax's Pallas splash attention kernels for a TPU
    (``jax.experimental.pallas.ops.tpu.splash_attention``; a ``pallas_call`` named
    ``splash_{mha,mqa}_{fwd,dq,dkv}[_segmented]_{residuals,no_residuals}`` in the jaxpr,
    a ``tpu_custom_call`` of that name in a compiled TPU program), counted by this
    module's convention: every ``T x S`` pair, the blocks a causal mask leaves out
    included (the kernel skips them: at MaxText's 512-wide blocks it computes
    ``n (n + 1) / 2`` of ``n^2`` block pairs, 10 of 16 at T = 2048), and the backward
    pass's products once each as the model's arithmetic has them, the scores and
    ``dP`` the ``dq`` and ``dkv`` kernels recompute not counted (7 products run, 4
    counted), as cuDNN's calls are counted. The products go where their result is
    written: the forward kernel ``Q K^T`` and ``P V`` and the softmax; ``dq`` the
    ``dQ`` product; ``dkv`` ``dK``, ``dV`` and ``dP`` and the softmax's gradient (with
    ``dQ`` too where the backward is one fused kernel, its results holding ``dQ``).

    Attributes:
      phase: ``fwd``, ``dq`` or ``dkv``.
      scores: ``B x N x T x S`` query-key pairs (every query head).
      qk_head, v_head: the query's and the value's head width.
      with_dq: a ``dkv`` kernel that writes ``dQ`` as well (the fused backward).
    """

    def __init__(self, phase: str, scores: int, qk_head: int, v_head: int, with_dq: bool = False) -> None:
        self.phase, self.scores, self.qk_head, self.v_head, self.with_dq = phase, scores, qk_head, v_head, with_dq

    @property
    def products(self) -> int:
        """FLOP of the call's matrix products."""
        if self.phase == "fwd":
            return products(self.scores, self.qk_head, self.v_head, False)
        dq = FMA * self.scores * self.qk_head
        if self.phase == "dq":
            return dq
        return products(self.scores, self.qk_head, self.v_head, True) - (0 if self.with_dq else dq)

    @property
    def flops(self) -> int:
        """FLOP of the call: its `products` and its softmax's (`SOFTMAX_FLOP` per score; none in ``dq``)."""
        return self.products + (0 if self.phase == "dq" else self.scores * SOFTMAX_FLOP)

    @property
    def transcendentals(self) -> int:
        """The exp of every score, forward (`attention_transcendentals`)."""
        return attention_transcendentals(self.scores, self.phase != "fwd")


def splash_call(name: str, operands: Sequence[Sequence[int]], results: Sequence[Sequence[int]]) -> SplashCall | None:
    """The splash attention call ``name`` (the ``pallas_call``'s or the custom call's name) of its
    floating-point ``operands``' and ``results``' dimensions (the mask's integer block arrays left
    out); None for another kernel or shapes not understood. The first three operands are ``q``
    ``[B, N, T, H]`` (``[N, T, H]`` where the batch is not mapped), ``k`` and ``v`` ``[B, K, S, H]``
    (``[B, S, H]`` for MQA), as jax 0.10's kernels take them."""
    found = _SPLASH_NAME.search(name)
    arrays = [tuple(int(d) for d in dims) for dims in operands]
    if found is None or len(arrays) < 3 or len(arrays[0]) < 3 or len(arrays[1]) < 2:
        return None
    q, k, v = arrays[:3]
    scores = math.prod(q[:-1]) * k[-2]
    with_dq = found.group(2) == "dkv" and sum(1 for r in results if tuple(r) in (q, k, v)) >= 3  # dQ, dK, dV
    return SplashCall(found.group(2), scores, q[-1], v[-1], with_dq)


def kernel_cost_estimate(config: Mapping[str, Any] | str | None) -> dict[str, int] | None:
    """A Pallas TPU kernel's own cost estimate (``pl.CostEstimate``: ``flops``,
    ``transcendentals``, ``bytes_accessed``), from a ``tpu_custom_call``'s
    ``custom_call_config`` (a mapping, or its JSON) or a ``pallas_call``'s
    ``cost_estimate``; None where the kernel gave none."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return None
    if not isinstance(config, Mapping):
        return None
    estimate = config.get("cost_estimate", config)
    if not isinstance(estimate, Mapping) or "flops" not in estimate:
        return None
    try:
        return {key: int(estimate.get(key, 0)) for key in ("flops", "transcendentals", "bytes_accessed")}
    except (TypeError, ValueError):
        return None
