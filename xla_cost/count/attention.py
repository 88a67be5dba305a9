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
``attention_flops="causal"`` (`xla_cost.analysis.options.ATTENTION_CONVENTIONS`)
halves the products of both where the mask is causal, and keeps a window's share of them where
the mask is a window (`xla_cost.count.attention_flow.attention_masks`; a fused kernel's
window in closed form: `xla_cost.count.mask_values.window_share`). Flash attention's recomputation of the scores in
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
           "SplashCall", "splash_call", "kernel_cost_estimate", "SPLASH_RUN", "SPLASH_MASK_SCOPE", "splash_mask",
           "splash_mask_scope",
           "mask_block_pairs"]

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

    def executed(self, share: float = 1.0) -> int:
        """FLOP of the matrix products the call RUNS (not `products`, what it is counted): each
        computed query-key pair's products as the kernel runs them (`SPLASH_RUN`: ``dq`` and ``dkv``
        recompute the scores and ``dP``), over ``share`` of the pairs (the block pairs its mask
        leaves computed, `mask_block_pairs`; 1: every pair, an upper bound where the mask is unknown)."""
        qk, v = SPLASH_RUN[self.phase]
        if self.phase == "dkv" and self.with_dq:
            qk += 1
        return round(FMA * self.scores * share * (qk * self.qk_head + v * self.v_head))

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


SPLASH_RUN: Mapping[str, tuple[int, int]] = {"fwd": (1, 1), "dq": (2, 1), "dkv": (2, 2)}
"""The products each splash kernel runs per computed block pair, as (products contracting or
producing the query's head width, the value's), in jax's kernels
(jax/experimental/pallas/ops/tpu/splash_attention/splash_attention_kernel.py at jax 0.10.2):
``fwd`` ``Q K^T`` (line 768) and ``P V`` (822): 2; ``dq`` ``Q K^T`` (1367), ``dP = dO V^T`` (1391)
and ``dQ = dS K`` (1402): 3; ``dkv`` ``K Q^T`` (1778), ``dV = P^T dO`` (1799), ``dP`` (1803) and
``dK = dS Q`` (1814): 4, and ``dQ`` (1820) where the backward is one fused kernel: 5."""

SPLASH_MASK_SCOPE = re.compile(r"splash_(causal|full|local)_mask(?:_(\d+)_(\d+))?")
"""How a splash call's mask is named in its kernels' ``op_name`` (a ``jax.named_scope`` around the
call: ``splash_causal_mask``, ``splash_full_mask``, ``splash_local_mask_<left>_<right>``, as
``models._transformer.splash_attention`` writes it). The compiled program holds the mask only as
the kernels' block-mask operands, constants its printed text elides (``{...}``)."""


def splash_mask_scope(window: tuple[int | None, int | None]) -> str:
    """The ``jax.named_scope`` that names a splash call's mask in its kernels' ``op_name``
    (`SPLASH_MASK_SCOPE`), of its (left, right) window (`splash_mask`'s)."""
    left, right = window
    if left is None and right is None:
        return "splash_full_mask"
    if left is None and right == 0:
        return "splash_causal_mask"
    if left is None or right is None:
        raise ValueError(f"a splash mask's window is unbounded on both sides, causal or local, got {window}")
    return f"splash_local_mask_{left}_{right}"


def splash_mask(op_name: str) -> tuple[int | None, int | None] | None:
    """The (left, right) window of keys each query sees that a kernel's ``op_name`` names
    (`SPLASH_MASK_SCOPE`: causal ``(None, 0)``, full ``(None, None)``: None is unbounded);
    None where it names none (the mask unknown)."""
    found = SPLASH_MASK_SCOPE.search(op_name)
    if found is None:
        return None
    if found.group(1) == "causal":
        return None, 0
    if found.group(1) == "full":
        return None, None
    if found.group(2) is None:
        return None
    return int(found.group(2)), int(found.group(3))


def mask_block_pairs(length_q: int, length_k: int, block_q: int, block_k: int,
                     window: tuple[int | None, int | None]) -> tuple[int, int]:
    """(block pairs a splash kernel computes, block pairs in all) over ``length_q x length_k``
    pairs in ``block_q x block_k`` blocks: a block pair is computed where any of its query ``q``
    sees any of its keys ``k`` (``q - left <= k <= q + right``, ``window`` (left, right), None
    unbounded); jax's kernels skip the others (``_next_nonzero``'s ``should_run``, from the block
    mask ``splash_attention_mask_info`` makes). A causal mask over ``n x n`` blocks: ``n (n + 1) / 2``."""
    left, right = window
    rows, columns = -(-length_q // block_q), -(-length_k // block_k)
    computed = 0
    for i in range(rows):
        q_low, q_high = i * block_q, min(length_q, (i + 1) * block_q) - 1
        for j in range(columns):
            k_low, k_high = j * block_k, min(length_k, (j + 1) * block_k) - 1
            if (right is None or k_low <= q_high + right) and (left is None or k_high >= q_low - left):
                computed += 1
    return computed, rows * columns


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
