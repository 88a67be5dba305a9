"""Per-primitive cost rules, registered with a decorator.

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
`ZERO_COST` is unsupported: the interpreter reports it, it is never counted as 0.
Higher-order primitives (jit, scan, while, cond, custom_jvp_call, ...) are walked
by `xla_cost.interpret`, not costed here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

__all__ = [
    "FLOPS_PER_FMA",
    "Cost",
    "Rule",
    "DuplicateRuleError",
    "register",
    "get_rule",
    "registered_primitives",
    "ZERO_COST",
    "TRANSCENDENTAL",
    "ELEMENTWISE",
    "conv_valid_positions",
    "SELECT_AND_SCATTER_STEP_OPS",
    "ARGMAX_STEP_OPS",
    "XLA_EXPANSIONS",
]

FLOPS_PER_FMA = 2
"""A fused multiply-add is two floating-point operations (one mul, one add)."""


@dataclasses.dataclass(frozen=True)
class Cost:
    """Operation counts of one equation, or of a sum of equations."""

    flops: int = 0
    transcendentals: int = 0
    bytes_accessed: int = 0

    @classmethod
    def zeros(cls) -> "Cost":
        return cls()

    def __add__(self, other: "Cost") -> "Cost":
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(
            self.flops + other.flops,
            self.transcendentals + other.transcendentals,
            self.bytes_accessed + other.bytes_accessed,
        )

    def __sub__(self, other: "Cost") -> "Cost":
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(
            self.flops - other.flops,
            self.transcendentals - other.transcendentals,
            self.bytes_accessed - other.bytes_accessed,
        )

    def __mul__(self, times: int) -> "Cost":
        if not isinstance(times, int) or isinstance(times, bool):
            return NotImplemented
        return Cost(
            self.flops * times, self.transcendentals * times, self.bytes_accessed * times
        )

    __rmul__ = __mul__


class Aval(Protocol):
    """What a rule may read of an operand: jax's ``ShapedArray`` satisfies it."""

    shape: tuple[int, ...]
    dtype: Any


class Rule(Protocol):
    def __call__(self, ins: Sequence[Aval], outs: Sequence[Aval], **params: Any) -> Cost: ...


class DuplicateRuleError(ValueError):
    """A second rule was registered for a primitive that already has one."""


_RULES: dict[str, Rule] = {}


def _primitive_name(primitive: Any) -> str:
    name = primitive if isinstance(primitive, str) else getattr(primitive, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(
            "Expected a jax Primitive or a primitive name (str), got "
            f"{primitive!r} instead. Pass e.g. `jax.lax.dot_general_p` or 'dot_general'."
        )
    return name


def register(*primitives: Any) -> Callable[[Rule], Rule]:
    """Registers the decorated function as the cost rule of ``primitives``.

    Args:
      *primitives: jax primitives or their names.

    Raises:
      DuplicateRuleError: a primitive already has a rule or is in `ZERO_COST`.

    Example::

      @register("my_matmul")
      def _my_matmul(ins, outs, **_):
          (m, k), (_, n) = ins[0].shape, ins[1].shape
          return Cost(flops=FLOPS_PER_FMA * m * k * n)
    """
    names = [_primitive_name(p) for p in primitives]

    def decorator(rule: Rule) -> Rule:
        for name in names:
            if name in _RULES or name in ZERO_COST:
                raise DuplicateRuleError(
                    f"Expected one cost rule per primitive, got a second one for {name!r} "
                    f"({getattr(rule, '__name__', rule)!r}). Remove one of them."
                )
            _RULES[name] = rule
        return rule

    return decorator


def get_rule(primitive: Any) -> Rule | None:
    """The rule registered for ``primitive`` (a primitive or its name), or None."""
    return _RULES.get(_primitive_name(primitive))


def registered_primitives() -> frozenset[str]:
    """Names of all primitives with a rule."""
    return frozenset(_RULES)


# --------------------------------------------------------------------------- helpers


def _size(aval: Aval) -> int:
    return int(math.prod(aval.shape))


def _nbytes(aval: Aval) -> int:
    dtype = np.dtype(aval.dtype) if not hasattr(aval.dtype, "itemsize") else aval.dtype
    return _size(aval) * int(dtype.itemsize)


def _io_bytes(ins: Sequence[Aval], outs: Sequence[Aval]) -> int:
    """Unfused traffic: each operand read once, each result written once."""
    return sum(_nbytes(a) for a in ins if hasattr(a, "shape")) + sum(
        _nbytes(a) for a in outs if hasattr(a, "shape")
    )


# ------------------------------------------------------------------ zero-cost set

ZERO_COST: frozenset[str] = frozenset(
    {
        # shape and layout
        "reshape", "squeeze", "expand_dims", "broadcast_in_dim", "transpose", "rev",
        "concatenate", "pad", "slice", "dynamic_slice", "dynamic_update_slice",
        "gather", "copy", "copy_p", "iota", "bitcast_convert_type",
        "split",
        # markers and no-ops
        "stop_gradient", "sharding_constraint", "device_put", "optimization_barrier",
        "name", "pvary", "mesh_cast", "reshard", "empty", "empty2",
        "create_token", "after_all",
        # random keys are bookkeeping; the bits they make are counted elsewhere
        "random_seed", "random_wrap", "random_unwrap", "random_fold_in",
        "random_split",
        # collectives that move data without arithmetic
        "all_gather", "all_to_all", "ppermute", "axis_index",
    }
)
"""Primitives that move or relabel data and do no arithmetic (XLA: 0 FLOP)."""

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
what it expands to. Measured with jax 0.10 on the CPU; tests/test_rules.py
checks every entry against the compiled count, so a jax upgrade that changes an
expansion fails loudly.
"""

ELEMENTWISE: frozenset[str] = frozenset(
    {
        "add", "add_any", "add_jaxvals", "sub", "mul", "div", "rem", "max", "min", "neg", "abs",
        "sign", "floor", "ceil", "round", "nextafter", "square", "reciprocal",
        "and", "or", "xor", "not", "shift_left", "shift_right_arithmetic",
        "shift_right_logical", "population_count", "clz", "is_finite",
        "eq", "ne", "lt", "le", "gt", "ge", "eq_to", "le_to", "lt_to",
        "select_n", "clamp", "reduce_precision",
        "real", "imag", "conj", "complex",
    }
)
"""Elementwise primitives XLA counts as 1 FLOP per output element."""


@register(*sorted(TRANSCENDENTAL))
def _transcendental(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # One transcendental per output element, as XLA counts them.
    return Cost(transcendentals=_size(outs[0]), bytes_accessed=_io_bytes(ins, outs))


def _expansion_rule(flops: int, transcendentals: int) -> Rule:
    def rule(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
        n = _size(outs[0])
        return Cost(
            flops=flops * n, transcendentals=transcendentals * n,
            bytes_accessed=_io_bytes(ins, outs),
        )

    return rule


for _name, (_flops, _transcendentals) in sorted(XLA_EXPANSIONS.items()):
    register(_name)(_expansion_rule(_flops, _transcendentals))


@register(*sorted(ELEMENTWISE))
def _elementwise(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # One operation per output element.
    return Cost(flops=_size(outs[0]), bytes_accessed=_io_bytes(ins, outs))


@register("convert_element_type")
def _convert(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # XLA counts a conversion as 1 FLOP per element; a same-type convert is removed.
    if np.dtype(ins[0].dtype) == np.dtype(outs[0].dtype):
        return Cost()
    return Cost(flops=_size(outs[0]), bytes_accessed=_io_bytes(ins, outs))


@register("integer_pow")
def _integer_pow(ins: Sequence[Aval], outs: Sequence[Aval], *, y: int, **_: Any) -> Cost:
    # x**y by repeated squaring: (bit_length - 1) squarings, (popcount - 1)
    # multiplies, and one reciprocal when y < 0; x**0 and x**1 cost nothing.
    n = abs(int(y))
    if n <= 1 and y >= 0:
        return Cost()
    muls = max(n.bit_length() - 1, 0) + max(bin(n).count("1") - 1, 0) + (1 if y < 0 else 0)
    return Cost(flops=muls * _size(outs[0]), bytes_accessed=_io_bytes(ins, outs))


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
    flops = _size(outs[0]) if k == 1 else FLOPS_PER_FMA * _size(outs[0]) * k
    return Cost(flops=flops, bytes_accessed=_io_bytes(ins, outs))


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
    o = np.arange(out_size, dtype=np.int64)[:, None]
    k = np.arange(kernel_size, dtype=np.int64)[None, :]
    u = o * stride - padding[0] + k * rhs_dilation
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
    return Cost(flops=FLOPS_PER_FMA * fmas, bytes_accessed=_io_bytes(ins, outs))


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
    # Reducing n inputs into m outputs takes n - m binary operations.
    return Cost(
        flops=_size(ins[0]) - _size(outs[0]), bytes_accessed=_io_bytes(ins, outs)
    )


@register("argmax", "argmin")
def _argmax(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # n inputs reduced to m outputs: n - m comparator steps of ARGMAX_STEP_OPS.
    return Cost(
        flops=ARGMAX_STEP_OPS * (_size(ins[0]) - _size(outs[0])),
        bytes_accessed=_io_bytes(ins, outs),
    )


@register("reduce_window_sum", "reduce_window_max", "reduce_window_min")
def _reduce_window(
    ins: Sequence[Aval], outs: Sequence[Aval], *, window_dimensions: Sequence[int], **_: Any
) -> Cost:
    # Each output reduces a window of W = prod(window) elements: W - 1 operations.
    window = math.prod(window_dimensions)
    return Cost(
        flops=(window - 1) * _size(outs[0]), bytes_accessed=_io_bytes(ins, outs)
    )


@register("cumsum", "cumprod", "cummax", "cummin")
def _cumulative(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # A running sum of n elements is n - 1 additions along the axis; we count one
    # operation per element (the associative-scan lowering does up to two).
    return Cost(flops=_size(outs[0]), bytes_accessed=_io_bytes(ins, outs))


@register("cumlogsumexp")
def _cumlogsumexp(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # Per element: one max, one add, and exp + log1p (two transcendentals).
    n = _size(outs[0])
    return Cost(flops=2 * n, transcendentals=2 * n, bytes_accessed=_io_bytes(ins, outs))


@register("select_and_gather_add")
def _select_and_gather_add(
    ins: Sequence[Aval], outs: Sequence[Aval], *, window_dimensions: Sequence[int], **_: Any
) -> Cost:
    # The JVP of max-pooling: a reduce-window whose reducer compares and selects
    # (2 operations) over W - 1 steps per output.
    window = math.prod(window_dimensions)
    return Cost(
        flops=2 * (window - 1) * _size(outs[0]), bytes_accessed=_io_bytes(ins, outs)
    )


SELECT_AND_SCATTER_STEP_OPS = 6
"""Counted operations per reducer step of an expanded select-and-scatter, less the rank.

XLA's CPU and GPU pipelines rewrite ``select-and-scatter`` (the gradient of
max-pooling) into a variadic ``reduce-window`` that carries the running maximum
and its index along every dimension, then a ``scatter-add``. One reducer step
compares the values, checks the indices for the "empty" sentinel, combines the
predicates and selects the value and each of the ``rank`` indices; XLA's cost
analysis counts ``rank + 6`` operations for it. Measured with jax 0.10 on the CPU
for ranks 3, 4 and 5 and windows of 2 to 9 elements (tests/test_rules.py checks
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
    source = _size(ins[0])
    per_step = SELECT_AND_SCATTER_STEP_OPS + len(ins[1].shape)
    return Cost(
        flops=source * ((window - 1) * per_step + window),
        bytes_accessed=_io_bytes(ins, outs),
    )


# ------------------------------------------------------------------ indexing


@register("scatter-add", "scatter-sub", "scatter-mul", "scatter-min", "scatter-max")
def _scatter_combine(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # One combining operation per update element (operands: operand, indices, updates).
    updates = ins[2]
    return Cost(flops=_size(updates), bytes_accessed=_io_bytes(ins, outs))


@register("scatter")
def _scatter(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # A plain scatter overwrites: no arithmetic.
    return Cost(bytes_accessed=_io_bytes(ins, outs))


@register("sort")
def _sort(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # XLA's convention: N * ceil(log2 N) comparisons for N elements of operand 0.
    n = _size(ins[0])
    return Cost(
        flops=n * max(math.ceil(math.log2(n)), 0) if n > 1 else 0,
        bytes_accessed=_io_bytes(ins, outs),
    )


@register("top_k")
def _top_k(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # A partial sort along the last axis: about one comparison per input element
    # and per output slot, rows * n * log2(k) with k outputs per row.
    n = _size(ins[0])
    k = outs[0].shape[-1] if outs[0].shape else 1
    return Cost(
        flops=n * max(math.ceil(math.log2(k)), 1), bytes_accessed=_io_bytes(ins, outs)
    )


# ------------------------------------------------------------------ collectives


@register("psum", "pmax", "pmin")
def _all_reduce(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # XLA's convention for all-reduce: one operation per output element.
    return Cost(
        flops=sum(_size(o) for o in outs), bytes_accessed=_io_bytes(ins, outs)
    )
