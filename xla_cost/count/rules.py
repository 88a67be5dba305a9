"""Per-primitive cost rules, registered with a decorator (`xla_cost.count.registry`).

A rule is a pure function of the equation's input and output avals (shape and
dtype) and the equation params it needs; it returns a `Cost`. The conventions are
XLA's ``HloCostAnalysis`` ones, so that the jaxpr count and the compiled count can
be compared line by line:

* a multiply-add is ``FLOPS_PER_FMA`` = 2 FLOP;
* elementwise arithmetic, comparisons, select and type conversion: 1 FLOP per
  output element;
* exp, log, tanh, sqrt, rsqrt, erf, power, sin, ...: 1 transcendental per output
  element and no FLOP; primitives XLA expands first (logistic, erfc, sinh, ...)
  cost what they expand to (`XLA_EXPANSIONS`);
* a convolution counts only the kernel taps that land on real input, not on
  padding or in the holes of a dilated input;
* ``bytes_accessed`` is the unfused estimate: every operand read once and every
  result written once. XLA fuses, so its figure is lower; treat ours as a bound.

Structural primitives (reshape, broadcast, transpose, slicing, ...) cost nothing
and are listed in `ZERO_COST`. A primitive with neither a rule nor a place in
`ZERO_COST` is unsupported: the interpreter reports it, it is never counted as 0;
those left without a rule on purpose are listed in `NOT_COSTED` with the reason.
Random numbers have their rules in `xla_cost.count.random_rules`.
Higher-order primitives (jit, scan, while, cond, custom_jvp_call, ...) are walked
by `xla_cost.count.interpret`, not costed here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from xla_cost.count import attention as _attention
from xla_cost.count.registry import FLOPS_PER_FMA, ZERO_COST, Aval, Cost, Rule, get_rule, io_bytes, register, size

__all__ = [
    "TRANSCENDENTAL",
    "ELEMENTWISE",
    "XLA_EXPANSIONS",
    "COMPOSITES",
    "conv_valid_positions",
    "ragged_groups",
    "FUSED_ATTENTION",
    "SELECT_AND_SCATTER_STEP_OPS",
    "ARGMAX_STEP_OPS",
    "CUMULATIVE_REWRITE_BASE",
    "cumulative_steps",
    "FFT_FLOPS_PER_LOG_FACTOR",
    "NOT_COSTED",
]

# ------------------------------------------------------------------ elementwise

TRANSCENDENTAL: frozenset[str] = frozenset(
    {
        "exp", "log", "log1p", "expm1", "tanh",
        "sin", "cos", "tan", "atan", "atan2",
        "sqrt", "rsqrt", "cbrt", "pow",
        "erf", "igamma", "igammac", "igamma_grad_a", "random_gamma_grad", "polygamma",
        "zeta", "bessel_i0e", "bessel_i1e", "regularized_incomplete_beta",
    }
)
"""Elementwise primitives XLA counts as 1 transcendental per element, 0 FLOP."""

XLA_EXPANSIONS: dict[str, tuple[int, int]] = {
    "logistic": (3, 1),
    "erfc": (60, 1),
    "erf_inv": (37, 2),
    "lgamma": (52, 4),
    "digamma": (73, 3),
    "sinh": (10, 3),
    "cosh": (3, 2),
    "asinh": (11, 3),
    "acosh": (7, 4),
    "atanh": (6, 2),
    "asin": (5, 2),
    "acos": (3, 2),
    "exp2": (1, 1),
}
"""(FLOP, transcendentals) per element of primitives XLA expands before counting.

XLA rewrites these into simpler operations (``logistic(x)`` into a tanh form,
``erfc`` into a rational approximation, ``sinh`` into exponentials) and counts
what it expands to. Measured with jax 0.10 on the CPU; tests/count/test_rules.py
checks every entry against the compiled count, so a jax upgrade that changes an
expansion fails loudly.
"""

ELEMENTWISE: frozenset[str] = frozenset(
    {
        "add", "add_any", "add_jaxvals", "sub", "mul", "div", "rem", "max", "min", "neg", "abs",
        "sign", "floor", "ceil", "round", "nextafter", "square", "reciprocal",
        "and", "or", "xor", "not", "shift_left", "shift_right_arithmetic",
        "shift_right_logical", "population_count", "clz", "is_finite", "mulhi",
        "eq", "ne", "lt", "le", "gt", "ge", "eq_to", "le_to", "lt_to",
        "select_n", "clamp", "reduce_precision",
        "real", "imag", "conj", "complex",
    }
)
"""Elementwise primitives XLA counts as 1 FLOP per output element."""


@register(*sorted(TRANSCENDENTAL))
def _transcendental(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # One transcendental per output element, as XLA counts them.
    return Cost(transcendentals=size(outs[0]), bytes_accessed=io_bytes(ins, outs))


def _per_unit(units: int, flops: int, transcendentals: int, ins: Sequence[Aval], outs: Sequence[Aval]) -> Cost:
    """``units`` times ``flops`` and ``transcendentals``, with the unfused bytes."""
    return Cost(flops=flops * units, transcendentals=transcendentals * units, bytes_accessed=io_bytes(ins, outs))


def _expansion_rule(flops: int, transcendentals: int) -> Rule:
    def rule(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
        return _per_unit(size(outs[0]), flops, transcendentals, ins, outs)

    return rule


for _name, (_flops, _transcendentals) in sorted(XLA_EXPANSIONS.items()):
    register(_name)(_expansion_rule(_flops, _transcendentals))

COMPOSITES: dict[str, tuple[int, int]] = {
    "one_minus_square": (2, 0),
}
"""(FLOP, transcendentals) per element of primitives newer jax versions add
for a fixed composite of elementwise operations: ``one_minus_square(x) = 1 -
x * x`` (jax 0.11, in tanh's derivative) is a multiply and a subtract. Not in
the jax this project's CI runs (0.10), so checked where it exists
(tests/count/test_rules.py)."""

for _name, (_flops, _transcendentals) in sorted(COMPOSITES.items()):
    register(_name)(_expansion_rule(_flops, _transcendentals))


@register(*sorted(ELEMENTWISE))
def _elementwise(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # One operation per output element.
    return Cost(flops=size(outs[0]), bytes_accessed=io_bytes(ins, outs))


@register("convert_element_type")
def _convert(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # XLA counts a conversion as 1 FLOP per element; a same-type convert is removed.
    if np.dtype(ins[0].dtype) == np.dtype(outs[0].dtype):
        return Cost()
    return Cost(flops=size(outs[0]), bytes_accessed=io_bytes(ins, outs))


@register("bitcast_convert_type")
def _bitcast_convert(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # XLA counts a same-width bitcast-convert as 1 FLOP per element. Between
    # widths it expands it: 6 operations per output element when narrowing
    # (f32 -> 4 x u8: shifts, masks, conversions) and 5 per input element when
    # widening. Measured with jax 0.10 on the CPU (f32, f16, bf16, u8, u16, i8).
    n_in, n_out = size(ins[0]), size(outs[0])
    if n_in == n_out:
        flops = n_out
    elif n_out > n_in:
        flops = 6 * n_out
    else:
        flops = 5 * n_in
    return Cost(flops=flops, bytes_accessed=io_bytes(ins, outs))


@register("integer_pow")
def _integer_pow(ins: Sequence[Aval], outs: Sequence[Aval], *, y: int, **_: Any) -> Cost:
    # x**y by repeated squaring: (bit_length - 1) squarings, (popcount - 1)
    # multiplies, and one reciprocal when y < 0; x**0 and x**1 cost nothing.
    n = abs(int(y))
    if n <= 1 and y >= 0:
        return Cost()
    muls = max(n.bit_length() - 1, 0) + max(bin(n).count("1") - 1, 0) + (1 if y < 0 else 0)
    return Cost(flops=muls * size(outs[0]), bytes_accessed=io_bytes(ins, outs))


# ------------------------------------------------------------------ contractions


@register("dot_general")
def _dot_general(
    ins: Sequence[Aval], outs: Sequence[Aval], *, dimension_numbers: Any, **_: Any
) -> Cost:
    # Each output element is a contraction of length K = prod(lhs contracting
    # dims): K multiply-adds, FLOPS_PER_FMA * out_elements * K. Batch dimensions
    # are part of the output. A contraction of length 1 has nothing to add: XLA
    # rewrites it into an elementwise multiply, 1 FLOP per output element.
    (lhs_contract, _rhs_contract), _batch = dimension_numbers
    k = math.prod(ins[0].shape[d] for d in lhs_contract)
    flops = size(outs[0]) if k == 1 else FLOPS_PER_FMA * size(outs[0]) * k
    return Cost(flops=flops, bytes_accessed=io_bytes(ins, outs), float8=flops if _float8(*ins[:2]) else 0)


@register("ragged_dot_general")
def _ragged_dot_general(
    ins: Sequence[Aval], outs: Sequence[Aval], *, ragged_dot_dimension_numbers: Any,
    constant_values: Sequence[Any] = (), **_: Any
) -> Cost:
    # jax.lax.ragged_dot (a mixture of experts' grouped matmul): the lhs rows are split into G groups
    # (group_sizes), each group's rows multiplied by its own matrix. Whichever dimension is ragged (the
    # lhs rows: rhs [G, K, N]; the contraction, a weight gradient: out [G, K, N]; a batch dimension),
    # every lhs element in a group meets each rhs column of its group once: FLOPS_PER_FMA * prod(lhs) *
    # prod(the rhs dimensions neither contracted, batched nor grouped) * the share of the ragged
    # dimension's rows in a group. Rows past sum(group_sizes) belong to no group and are not computed:
    # with constant group sizes (`constant_values`) that share is exact, sum(group_sizes) / rows; with
    # sizes computed at run time it is taken as 1, an upper bound (the interpreter notes it).
    (_lhs_contract, rhs_contract), (_lhs_batch, rhs_batch) = ragged_dot_dimension_numbers.dot_dimension_numbers
    taken = {*rhs_contract, *rhs_batch, *ragged_dot_dimension_numbers.rhs_group_dimensions}
    free = math.prod(n for d, n in enumerate(ins[1].shape) if d not in taken)
    flops = FLOPS_PER_FMA * size(ins[0]) * free
    sizes = constant_values[2] if len(constant_values) > 2 else None
    ragged = ragged_dot_dimension_numbers.lhs_ragged_dimensions
    if sizes is not None and len(ragged) == 1 and ins[0].shape[ragged[0]]:
        rows = ins[0].shape[ragged[0]]
        covered = np.minimum(np.maximum(np.asarray(sizes), 0).sum(axis=-1), rows)  # per batch of groups
        flops = round(flops * float(np.mean(covered)) / rows)
    return Cost(flops=flops, bytes_accessed=io_bytes(ins, outs), float8=flops if _float8(*ins[:2]) else 0)


def ragged_groups(ins: Sequence[Aval]) -> int:
    """The number of groups of a ``ragged_dot_general`` (its ``group_sizes`` operand's last dimension)."""
    return int(ins[2].shape[-1]) if len(ins) > 2 and ins[2].shape else 1


def _float8(*operands: Aval) -> bool:
    """Whether every operand is an 8-bit float (``float8_e4m3fn``, ``float8_e5m2``, ...): a product
    FP8 tensor cores run (`Cost.float8`)."""
    return all(jax.numpy.issubdtype(x.dtype, jax.numpy.floating) and jax.numpy.finfo(x.dtype).bits == 8
               for x in operands)


def conv_valid_positions(
    in_size: int,
    kernel_size: int,
    out_size: int,
    *,
    stride: int = 1,
    padding: tuple[int, int] = (0, 0),
    lhs_dilation: int = 1,
    rhs_dilation: int = 1,
) -> int:
    """Number of (output position, kernel tap) pairs that read a real input element.

    Along one spatial dimension, output ``o`` and tap ``k`` read the position
    ``u = o*stride - pad_low + k*rhs_dilation`` of the padded, ``lhs_dilation``-
    dilated input. It is real input iff ``u`` is a multiple of ``lhs_dilation`` and
    ``0 <= u / lhs_dilation < in_size``; taps on padding or in dilation holes are
    not executed, and XLA does not count them.

    Example: a 3-wide SAME convolution (padding (1, 1)) over 5 inputs has
    5*3 = 15 pairs of which 2 fall on padding: 13.
    """
    return _valid_positions(in_size, kernel_size, out_size, stride, int(padding[0]), lhs_dilation, rhs_dilation)


@functools.lru_cache(maxsize=4096)
def _valid_positions(
    in_size: int, kernel_size: int, out_size: int, stride: int, pad_low: int, lhs_dilation: int, rhs_dilation: int,
) -> int:
    # a network repeats its convolutions' shapes: ResNet-50's forward and gradient ask 422 times, 36 distinct
    o = np.arange(out_size, dtype=np.int64)[:, None]
    k = np.arange(kernel_size, dtype=np.int64)[None, :]
    u = o * stride - pad_low + k * rhs_dilation
    valid = (u >= 0) & (u % lhs_dilation == 0) & (u // lhs_dilation < in_size)
    return int(valid.sum())


@register("conv_general_dilated")
def _conv_general_dilated(
    ins: Sequence[Aval],
    outs: Sequence[Aval],
    *,
    window_strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None,
    rhs_dilation: Sequence[int] | None,
    dimension_numbers: Any,
    feature_group_count: int,
    batch_group_count: int,
    **_: Any,
) -> Cost:
    # FLOPS_PER_FMA * (C_in / feature_groups) * C_out * (N / batch_groups)
    #   * prod over spatial dims of the valid (output, tap) pairs.
    # This covers the transposed convolutions of the backward pass: the input
    # gradient has lhs_dilation = stride, the weight gradient contracts over the
    # batch (batch_group_count > 1 for grouped convolutions).
    lhs, rhs = ins[0], ins[1]
    out = outs[0]
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    n_spatial = len(lhs_spec) - 2
    lhs_dil = tuple(lhs_dilation or (1,) * n_spatial)
    rhs_dil = tuple(rhs_dilation or (1,) * n_spatial)
    positions = 1
    for d in range(n_spatial):
        positions *= conv_valid_positions(
            lhs.shape[lhs_spec[2 + d]],
            rhs.shape[rhs_spec[2 + d]],
            out.shape[out_spec[2 + d]],
            stride=window_strides[d],
            padding=tuple(padding[d]),
            lhs_dilation=lhs_dil[d],
            rhs_dilation=rhs_dil[d],
        )
    batch = lhs.shape[lhs_spec[0]] // batch_group_count
    in_features = lhs.shape[lhs_spec[1]] // feature_group_count
    out_features = out.shape[out_spec[1]]
    fmas = batch * in_features * out_features * positions
    return Cost(flops=FLOPS_PER_FMA * fmas, bytes_accessed=io_bytes(ins, outs))


FUSED_ATTENTION: Mapping[str, bool] = {
    "dot_product_attention_fwd_wrapper": False, "dot_product_attention_fwd": False,
    "dot_product_attention_bwd_wrapper": True, "dot_product_attention_bwd": True,
}
"""The primitives of cuDNN's fused attention (``jax.nn.dot_product_attention(...,
implementation="cudnn")``), each with whether it is the backward pass: jax binds
the ``_wrapper`` ones while tracing, the others where a wrapper is lowered."""


def _fused_attention(
    ins: Sequence[Aval], outs: Sequence[Aval], layout: Any, dropout_rate: float, backward: bool
) -> Cost | None:
    # operands: query, key, value, bias (empty: none), sequence lengths and offsets,
    # page tables[, softmax statistics, output, output gradient]; the query
    # [B, T, N, qk head] (layout 0, BTNH) or [B, N, T, qk head] (1, BNTH), the
    # value [..., v head]: every T x S pair of every query head, as the custom
    # call is priced (`xla_cost.count.attention`). The exp of each score is a
    # transcendental of the forward pass, as in the dense model.
    if len(ins) < 4 or dropout_rate:
        return None  # dropout inside the kernel is not modelled: unknown, not 0
    query, key, value, bias = ins[:4]
    if len(query.shape) != 4 or len(key.shape) != 4:
        return None
    sequence = 1 if int(getattr(layout, "value", layout)) == 0 else 2
    scores = math.prod(query.shape[:-1]) * key.shape[sequence]
    heads = (query.shape[-1], value.shape[-1])
    return Cost(
        flops=_attention.attention_flops(scores, *heads, backward, size(bias) > 0),
        transcendentals=_attention.attention_transcendentals(scores, backward), bytes_accessed=io_bytes(ins, outs),
        products=_attention.products(scores, *heads, backward),
    )


@register(*(name for name, backward in FUSED_ATTENTION.items() if not backward))
def _fused_attention_forward(
    ins: Sequence[Aval], outs: Sequence[Aval], *, layout: Any = 0, dropout_rate: float = 0.0, **_: Any
) -> Cost | None:
    return _fused_attention(ins, outs, layout, dropout_rate, backward=False)


@register(*(name for name, backward in FUSED_ATTENTION.items() if backward))
def _fused_attention_backward(
    ins: Sequence[Aval], outs: Sequence[Aval], *, layout: Any = 0, dropout_rate: float = 0.0, **_: Any
) -> Cost | None:
    return _fused_attention(ins, outs, layout, dropout_rate, backward=True)


@register("pallas_call")
def _pallas_call(ins: Sequence[Aval], outs: Sequence[Aval], *, name: str = "", cost_estimate: Any = None,
                 **_: Any) -> Cost | None:
    # A Pallas kernel: its own cost estimate where it gives one (pl.CostEstimate), else jax's
    # splash attention kernels for a TPU by the fused-attention convention (`xla_cost.count.
    # attention.splash_call`: every T x S pair; forward, dq, dkv), else unknown: its body is one
    # block's program, run over a grid whose blocks a kernel may skip, not the call's arithmetic.
    estimate = _attention.kernel_cost_estimate(
        {key: getattr(cost_estimate, key, 0) for key in ("flops", "transcendentals", "bytes_accessed")}
        if cost_estimate is not None else None)
    if estimate is not None:
        return Cost(flops=estimate["flops"], transcendentals=estimate["transcendentals"],
                    bytes_accessed=estimate["bytes_accessed"] or io_bytes(ins, outs))
    floating = [tuple(a.shape) for a in ins if jax.numpy.issubdtype(getattr(a, "dtype", np.int8), jax.numpy.floating)]
    call = _attention.splash_call(str(name), floating, [tuple(a.shape) for a in outs if hasattr(a, "shape")])
    if call is None:
        return None
    return Cost(flops=call.flops, transcendentals=call.transcendentals, bytes_accessed=io_bytes(ins, outs),
                products=call.products)


@register("scaled_matmul_wrapper", "scaled_matmul")
def _block_scaled_matmul(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost | None:
    # jax.nn.scaled_matmul (and scaled_dot_general's MXFP8 / NVFP4 products): lhs [B, M, K]
    # and rhs [B, N, K] in a narrow float (float8_e4m3fn, float8_e5m2, float4), each with a
    # scale per block of K, into [B, M, N]. Its arithmetic is the product, 2 FLOP per
    # multiply-add, as a block-scaled tensor-core kernel runs it (the scales applied in the
    # multiply-accumulate); a target without such a kernel (an H100) adds its dequantization
    # (`xla_cost.analysis.costs.library_flops` compares the two counts).
    if len(ins) < 2 or len(ins[0].shape) != 3 or len(ins[1].shape) != 3 or not outs:
        return None
    batch, m, k = ins[0].shape
    flops = FLOPS_PER_FMA * batch * m * ins[1].shape[1] * k
    return Cost(flops=flops, bytes_accessed=io_bytes(ins, outs), products=flops,
                float8=flops if _float8(*ins[:2]) else 0)


# ------------------------------------------------------------------ reductions

_REDUCTIONS = (
    "reduce_sum", "reduce_max", "reduce_min", "reduce_prod",
    "reduce_and", "reduce_or", "reduce_xor",
)

ARGMAX_STEP_OPS = 9
"""Counted operations per step of the variadic reduction behind argmax/argmin.

jax reduces (value, index) pairs with a comparator that handles NaN and ties
(compares, selects for the value and the index); XLA counts 9 operations per
reduction step (measured with jax 0.10 on the CPU, checked in tests)."""


@register(*_REDUCTIONS)
def _reduction(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # Reducing n inputs into m outputs takes n - m binary operations (none when n is 0: an
    # empty reduction writes its identity, it computes nothing).
    return Cost(
        flops=max(0, size(ins[0]) - size(outs[0])), bytes_accessed=io_bytes(ins, outs)
    )


@register("argmax", "argmin")
def _argmax(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # n inputs reduced to m outputs: n - m comparator steps of ARGMAX_STEP_OPS.
    return Cost(
        flops=ARGMAX_STEP_OPS * max(0, size(ins[0]) - size(outs[0])),
        bytes_accessed=io_bytes(ins, outs),
    )


@register("reduce_window_sum", "reduce_window_max", "reduce_window_min")
def _reduce_window(
    ins: Sequence[Aval], outs: Sequence[Aval], *, window_dimensions: Sequence[int], **_: Any
) -> Cost:
    # Each output reduces a window of W = prod(window) elements: W - 1 operations.
    window = math.prod(window_dimensions)
    return Cost(
        flops=(window - 1) * size(outs[0]), bytes_accessed=io_bytes(ins, outs)
    )


CUMULATIVE_REWRITE_BASE = 16
"""Block length of XLA's rewrite of a cumulative reduction (CPU, jax 0.10).

jax lowers ``cumsum``, ``cumprod``, ``cummax``, ``cummin`` and ``cumlogsumexp``
to a reduce-window whose window spans the whole axis, and XLA's
``ReduceWindowRewriter`` turns an axis longer than this base into blocks of
this length, scans the block totals (an exclusive scan, recursively) and adds
them back. XLA's cost analysis counts every window tap of every reduce-window,
padding included: see `cumulative_steps`."""


def cumulative_steps(n: int, *, exclusive: bool = False) -> int:
    """Reducer applications XLA counts for a cumulative reduction along ``n`` elements.

    With ``B`` = `CUMULATIVE_REWRITE_BASE`: an axis of ``n <= B`` is one
    reduce-window of ``n`` outputs, each a window of ``n`` taps: ``n * (n - 1)``
    steps (``(n + 1) * (n - 1)`` for the exclusive scan of block totals, which
    has one output more). A longer axis is padded to ``n' = B * ceil(n / B)``:
    ``n' * (B - 1)`` steps within the blocks, the exclusive scan of the
    ``n' / B`` block totals, and ``n'`` steps to add them back.

    Example: ``n = 100``: ``n' = 112``, 7 blocks: ``112 * 15 + 8 * 6 + 112 = 1840``.
    Measured with jax 0.10 on the CPU for lengths 2 to 4096 (tests/count/test_rules.py).
    """
    base = CUMULATIVE_REWRITE_BASE
    if n <= base:
        return (n + 1) * (n - 1) if exclusive else n * (n - 1)
    padded = -(-n // base) * base
    return padded * (base - 1) + cumulative_steps(padded // base, exclusive=True) + padded


_CUMULATIVE_STEP_COST = {
    "cumsum": (1, 0), "cumprod": (1, 0), "cummax": (1, 0), "cummin": (1, 0),
    # logaddexp(a, b) = max + log1p(exp(-|a - b|)) with its NaN and infinity
    # guards: 8 operations and 2 transcendentals per step, as XLA counts them
    "cumlogsumexp": (8, 2),
}
"""(FLOP, transcendentals) of one reducer step of each cumulative reduction."""


def _cumulative_rule(flops: int, transcendentals: int) -> Rule:
    def rule(ins: Sequence[Aval], outs: Sequence[Aval], *, axis: int, **_: Any) -> Cost:
        # rows (every other axis) times the reducer steps XLA counts along the
        # axis (cumulative_steps) times the cost of one step
        n = ins[0].shape[axis] if ins[0].shape else 1
        rows = size(ins[0]) // n if n else 0
        return _per_unit(rows * cumulative_steps(n), flops, transcendentals, ins, outs)

    return rule


for _name, (_flops, _transcendentals) in sorted(_CUMULATIVE_STEP_COST.items()):
    register(_name)(_cumulative_rule(_flops, _transcendentals))


@register("select_and_gather_add")
def _select_and_gather_add(
    ins: Sequence[Aval], outs: Sequence[Aval], *, window_dimensions: Sequence[int], **_: Any
) -> Cost:
    # The JVP of max-pooling: a reduce-window whose reducer compares and selects
    # (2 operations) over W - 1 steps per output.
    window = math.prod(window_dimensions)
    return Cost(
        flops=2 * (window - 1) * size(outs[0]), bytes_accessed=io_bytes(ins, outs)
    )


SELECT_AND_SCATTER_STEP_OPS = 6
"""Counted operations per reducer step of an expanded select-and-scatter, less the rank.

XLA's CPU and GPU pipelines rewrite ``select-and-scatter`` (the gradient of
max-pooling) into a variadic ``reduce-window`` that carries the running maximum
and its index along every dimension, then a ``scatter-add``. One reducer step
compares the values, checks the indices for the "empty" sentinel, combines the
predicates and selects the value and each of the ``rank`` indices; XLA's cost
analysis counts ``rank + 6`` operations for it. Measured with jax 0.10 on the CPU
for ranks 3, 4 and 5 and windows of 2 to 9 elements (tests/count/test_rules.py checks
the rule against the compiled count).
"""


@register("select_and_scatter_add")
def _select_and_scatter_add(
    ins: Sequence[Aval], outs: Sequence[Aval], *, window_dimensions: Sequence[int], **_: Any
) -> Cost:
    # For each of the S source elements: W - 1 reducer steps of (rank + 6)
    # operations to find the maximum (SELECT_AND_SCATTER_STEP_OPS), then a
    # scatter-add that XLA counts as W operations (one per window element).
    window = math.prod(window_dimensions)
    source = size(ins[0])
    per_step = SELECT_AND_SCATTER_STEP_OPS + len(ins[1].shape)
    return Cost(
        flops=source * ((window - 1) * per_step + window),
        bytes_accessed=io_bytes(ins, outs),
    )


# ------------------------------------------------------------------ indexing


@register("gather")
def _gather(
    ins: Sequence[Aval], outs: Sequence[Aval], *, mode: Any = None,
    constant_operands: Sequence[bool] = (), **_: Any,
) -> Cost:
    # A gather moves data: 0 FLOP, except in jnp's default "fill" mode for
    # out-of-bounds indices (jnp.take, Flax's Embed), which jax lowers to a
    # clamped gather and a select: per index vector of k components, a
    # conversion, a lower and an upper bound check and an and per component
    # and k - 1 ands to combine them (4k - 1), then 1 select per output element.
    # Measured with jax 0.10 on the CPU: exact for k = 1 and 2 (XLA counts one
    # less for k = 3). With constant indices XLA folds the check and the select.
    constant_indices = len(constant_operands) > 1 and constant_operands[1]
    if mode != jax.lax.GatherScatterMode.FILL_OR_DROP or constant_indices:
        return Cost(bytes_accessed=io_bytes(ins, outs))
    indices = ins[1]
    k = indices.shape[-1] if indices.shape else 1
    vectors = size(indices) // max(k, 1)
    return Cost(
        flops=(4 * k - 1) * vectors + size(outs[0]), bytes_accessed=io_bytes(ins, outs)
    )


def _scatter_clamps(indices: Aval, mode: Any) -> int:
    # In "clip" mode jax clamps every index component before scattering (XLA
    # drops out-of-bounds updates itself, the other modes need nothing more):
    # 1 operation per component. Measured with jax 0.10 on the CPU.
    if mode != jax.lax.GatherScatterMode.CLIP:
        return 0
    return size(indices)


@register("scatter-add", "scatter-sub", "scatter-mul", "scatter-min", "scatter-max")
def _scatter_combine(
    ins: Sequence[Aval], outs: Sequence[Aval], *, mode: Any = None, **_: Any
) -> Cost:
    # One combining operation per update element (operands: operand, indices,
    # updates), and the index clamps of "clip" mode.
    updates = ins[2]
    return Cost(
        flops=size(updates) + _scatter_clamps(ins[1], mode), bytes_accessed=io_bytes(ins, outs)
    )


@register("scatter")
def _scatter(ins: Sequence[Aval], outs: Sequence[Aval], *, mode: Any = None, **_: Any) -> Cost:
    # A plain scatter overwrites: no arithmetic but the index clamps of "clip" mode.
    return Cost(flops=_scatter_clamps(ins[1], mode), bytes_accessed=io_bytes(ins, outs))


@register("sort")
def _sort(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # XLA's convention: N * ceil(log2 N) comparisons for N elements of operand 0.
    n = size(ins[0])
    return Cost(
        flops=n * max(math.ceil(math.log2(n)), 0) if n > 1 else 0,
        bytes_accessed=io_bytes(ins, outs),
    )


@register("top_k")
def _top_k(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # A partial sort along the last axis: about one comparison per input element
    # and per output slot, rows * n * log2(k) with k outputs per row.
    n = size(ins[0])
    k = outs[0].shape[-1] if outs[0].shape else 1
    return Cost(
        flops=n * max(math.ceil(math.log2(k)), 1), bytes_accessed=io_bytes(ins, outs)
    )


@register("reduce")
def _reduce(
    ins: Sequence[Aval], outs: Sequence[Aval], *, jaxpr: Any, **_: Any
) -> Cost | None:
    # A reduction with a computation of its own (variadic, or a custom
    # reducer): n inputs into m outputs take n - m steps, each costing the
    # reducer's equations (unknown if one of them is).
    step = _reducer_step(jaxpr)
    if step is None:
        return None
    steps = max(0, size(ins[0]) - size(outs[0]))
    return Cost(
        flops=step.flops * steps, transcendentals=step.transcendentals * steps,
        bytes_accessed=io_bytes(ins, outs),
    )


@register("reduce_window")
def _reduce_window_generic(
    ins: Sequence[Aval], outs: Sequence[Aval], *, jaxpr: Any,
    window_dimensions: Sequence[int], **_: Any,
) -> Cost | None:
    # Each output applies the reducer W - 1 times (W = prod(window)); XLA counts
    # window taps on padding too, as for reduce_window_sum.
    step = _reducer_step(jaxpr)
    if step is None:
        return None
    steps = (math.prod(window_dimensions) - 1) * size(outs[0])
    return Cost(
        flops=step.flops * steps, transcendentals=step.transcendentals * steps,
        bytes_accessed=io_bytes(ins, outs),
    )


def _reducer_step(jaxpr: Any) -> Cost | None:
    """One application of a reducer computation: the sum of its equations' rules."""
    total = Cost()
    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        name = eqn.primitive.name
        if name in ZERO_COST:
            continue
        rule = get_rule(name)
        cost = None if rule is None else rule(
            [v.aval for v in eqn.invars], [v.aval for v in eqn.outvars], **eqn.params
        )
        if cost is None:
            return None
        total = total + Cost(cost.flops, cost.transcendentals)
    return total


FFT_FLOPS_PER_LOG_FACTOR = 8
"""XLA's count for an FFT: 8 FLOP (one complex multiply-add, 4 real multiply-adds)
per operand element and per factor ``floor(log2 L)`` of each transformed length.
Measured with jax 0.10 on the CPU: FFT, IFFT, RFFT and IRFFT of lengths 5 to 100,
and a 3-D FFT (tests/count/test_rules.py)."""


@register("fft")
def _fft(
    ins: Sequence[Aval], outs: Sequence[Aval], *, fft_lengths: Sequence[int], **_: Any
) -> Cost:
    # FFT_FLOPS_PER_LOG_FACTOR * operand elements * prod(floor(log2 L)); the
    # operand is the real input of an RFFT and the half spectrum of an IRFFT.
    log_factors = math.prod(max(int(length).bit_length() - 1, 0) for length in fft_lengths)
    return Cost(
        flops=FFT_FLOPS_PER_LOG_FACTOR * log_factors * size(ins[0]),
        bytes_accessed=io_bytes(ins, outs),
    )


# ------------------------------------------------------------------ not costed

NOT_COSTED: Mapping[str, str] = {
    # linear algebra: LAPACK custom calls on the CPU, which XLA counts as 0 or -1
    **dict.fromkeys(
        (
            "cholesky", "cholesky_update", "eig", "eigh", "geqp3", "geqrf", "hessenberg",
            "householder_product", "lu", "lu_pivots_to_permutation", "ormqr", "qr", "schur",
            "svd", "symmetric_product", "triangular_solve", "tridiagonal",
            "tridiagonal_solve",
        ),
        "a linear-algebra decomposition or solve: XLA hands it to a library (LAPACK on "
        "the CPU) and counts 0 or -1, so there is no XLA figure to agree with",
    ),
    **dict.fromkeys(
        ("approx_top_k",),
        "XLA's cost analysis reports -1 (unknown) for it on the CPU",
    ),
    **dict.fromkeys(
        ("scaled_dot",),
        "a block-scaled matmul whose XLA expansion (with scale conversions) is not modelled",
    ),
    # random numbers other than threefry's hashing
    **dict.fromkeys(
        ("random_gamma",),
        "rejection sampling: a data-dependent while loop per element",
    ),
    **dict.fromkeys(
        ("rng_bit_generator", "rng_uniform"),
        "XLA's stateless generator, expanded with an algorithm-dependent count (philox "
        "or threefry) that is not modelled",
    ),
    **dict.fromkeys(
        ("threefry4x32", "philox2x32", "philox4x32"),
        "a hash of one of jax's other PRNG implementations, not measured (random_bits "
        "with such keys is unsupported too)",
    ),
    **dict.fromkeys(
        ("select_and_scatter",),
        "a select-and-scatter with arbitrary select and scatter computations (max-pooling's "
        "gradient is select_and_scatter_add, which has a rule)",
    ),
    # higher-order primitives that xla_cost.count.interpret does not walk
    **dict.fromkeys(
        (
            "custom_linear_solve", "linear_call", "remat_opt", "eval_jaxpr",
            "call_hi_primitive", "stage", "compute_on", "custom_partitioning",
            "custom_vmap_call", "run_state",
        ),
        "a higher-order or staging primitive that xla_cost.count.interpret does not walk",
    ),
    # host callbacks and foreign calls: work the jaxpr does not show
    **dict.fromkeys(
        ("pure_callback", "io_callback", "buffer_callback"),
        "a host callback: its work runs in Python, outside the program",
    ),
    **dict.fromkeys(
        ("ffi_call",),
        "a foreign-function (custom) call: XLA cannot see inside it either",
    ),
    **dict.fromkeys(
        ("check",),
        "a checkify error check, lowered to a host-side error callback",
    ),
    # mutable array references and the state primitives of Pallas-style kernels
    **dict.fromkeys(
        (
            "new_ref", "empty_ref", "free_ref", "freeze", "accum_grad_in_ref",
            "get", "swap", "addupdate", "broadcast_to", "create_linear", "pin", "unpin",
        ),
        "a mutable array reference operation (jax.new_ref, state), not supported by the counter",
    ),
    **dict.fromkeys(
        ("unreachable",),
        "a placeholder that raises when executed",
    ),
    # collectives without a rule yet (the collective rules are in their own
    # section below; move a name there when it gets one)
    **dict.fromkeys(
        (
            "all_gather_done", "all_gather_reduced",
            "all_gather_reduced_start", "all_gather_start", "all_to_all_done",
            "all_to_all_start", "pbroadcast_done", "pbroadcast_start",
            "ppermute_done", "ppermute_start", "preduced", "psum_done",
            "psum_invariant_start", "psum_start",
            "reduce_scatter_done", "reduce_scatter_start",
            "unreduced_psum", "unreduced_psum_start", "unreduced_reduce_scatter",
            "unreduced_reduce_scatter_start",
        ),
        "a collective (or one half of an asynchronous one) without a rule yet",
    ),
}
"""Primitives that deliberately have no rule, each with the reason.

They are reported as unsupported when they occur (unknown, never 0); the list
exists so that tests can tell them from primitives that a new jax adds without
anyone deciding: tests/count/test_coverage.py fails for a primitive of jax that has a
rule nowhere and is not listed here."""


# ------------------------------------------------------------------ collectives


@register("psum", "psum_invariant", "pmax", "pmin", "reduce_scatter")
def _all_reduce(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # XLA's convention for all-reduce: one operation per output element, whatever the group's
    # size. psum_invariant is the psum of shard_map's default (check_vma=True): a device-varying
    # value summed into one every device holds. reduce_scatter (lax.psum_scatter) is that sum of
    # which each device keeps 1/n: by the same convention one add per element it keeps (XLA's
    # cost analysis counts its reduce-scatter as nothing).
    return Cost(
        flops=sum(size(o) for o in outs), bytes_accessed=io_bytes(ins, outs)
    )
