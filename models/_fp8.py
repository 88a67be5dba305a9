"""FP8 matrix products as today's training recipes run them (the zoo's ``--dtype float8``).

`fp8_dot_general` is ``jax.lax.dot_general`` in FP8 with current (per-tensor) scaling, the
signature Flax's ``nn.Dense(dot_general=...)`` takes; `joint_fp8` multiplies several
projections of one input as one FP8 product, as Transformer Engine runs Megatron Core's fused
linear layers. Split from `models._transformer` (its blocks use both).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["FP8_FORWARD", "FP8_GRADIENT", "fp8_dot_general", "joint_fp8"]

Dtype = Any

FP8_FORWARD = jnp.float8_e4m3fn
"""The forward operands' FP8 format (inputs and weights): 3 mantissa bits, largest 448."""
FP8_GRADIENT = jnp.float8_e5m2
"""The gradients' FP8 format in the backward products: 2 mantissa bits, largest 57,344."""


def _current_scaled(x: jnp.ndarray, fp8: Any) -> tuple[jnp.ndarray, jnp.ndarray]:
    """``x`` in ``fp8`` with current (per-tensor, just-in-time) scaling: ``x / s``
    saturated to the format's largest value, ``s = amax(|x|) / largest`` from this
    very tensor (float32); returns ``(x / s in fp8, s)``."""
    largest = float(jnp.finfo(fp8).max)
    amax = jnp.max(jnp.abs(x)).astype(jnp.float32)
    scale = jnp.maximum(amax, jnp.finfo(jnp.float32).tiny) / largest
    return jnp.clip(x.astype(jnp.float32) / scale, -largest, largest).astype(fp8), scale


def _free(ndim: int, contracting: Sequence[int], batch: Sequence[int]) -> list[int]:
    return [i for i in range(ndim) if i not in contracting and i not in batch]


def _scaled_product(a: jnp.ndarray, b: jnp.ndarray, dimension_numbers: Any, scale: jnp.ndarray,
                    dtype: Any) -> jnp.ndarray:
    """``dot_general`` of two FP8 operands written in ``dtype`` (the GEMM accumulates in float32
    inside), times the scales: as Transformer Engine's FP8 GEMM writes its output in the
    activations' dtype (``out_dtype``, bfloat16), so that a tensor-parallel product's partial sums
    are reduced in that dtype, as a bfloat16 product's are, not in float32."""
    product = jax.lax.dot_general(a, b, dimension_numbers, preferred_element_type=dtype)
    return product * scale.astype(dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _fp8_product(lhs: jnp.ndarray, rhs: jnp.ndarray, dimension_numbers: Any, dtype: Any) -> jnp.ndarray:
    return _fp8_forward(lhs, rhs, dimension_numbers, dtype)[0]


def _fp8_forward(lhs: jnp.ndarray, rhs: jnp.ndarray, dimension_numbers: Any, dtype: Any) -> tuple[jnp.ndarray, Any]:
    lq, ls = _current_scaled(lhs, FP8_FORWARD)
    rq, rs = _current_scaled(rhs, FP8_FORWARD)
    kinds = (jnp.zeros((0,), lhs.dtype), jnp.zeros((0,), rhs.dtype))  # the cotangents' dtypes, as arrays
    return _scaled_product(lq, rq, dimension_numbers, ls * rs, dtype), (lq, ls, rq, rs, kinds)


def _fp8_backward(dimension_numbers: Any, dtype: Any, residuals: Any, g: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    """The two backward products in FP8: the output's gradient in e5m2 (its own
    current scale) against the saved e4m3 operands, each accumulated in float32,
    then transposed to its operand's layout (as jax's own ``dot_general``
    transpose rule lays them out)."""
    lq, ls, rq, rs, (lhs_kind, rhs_kind) = residuals
    (lc, rc), (lb, rb) = dimension_numbers
    lf, rf = _free(lq.ndim, lc, lb), _free(rq.ndim, rc, rb)
    nb = len(lb)
    g_lhs = tuple(range(nb, nb + len(lf)))  # g's axes: batch, the lhs's free, the rhs's free
    g_rhs = tuple(range(nb + len(lf), nb + len(lf) + len(rf)))
    gq, gs = _current_scaled(g, FP8_GRADIENT)
    batch = tuple(range(nb))
    # d lhs = g . rhs over the rhs's free axes: [batch, lhs free, rhs contracting (in rhs order)]
    d_lhs = _scaled_product(gq, rq, ((g_rhs, tuple(rf)), (batch, tuple(rb))), gs * rs, lhs_kind.dtype)
    rc_sorted = sorted(rc)
    source = {**{a: i for i, a in enumerate(lb)}, **{a: nb + j for j, a in enumerate(lf)},
              **{a: nb + len(lf) + rc_sorted.index(c) for a, c in zip(lc, rc)}}
    d_lhs = jnp.transpose(d_lhs, [source[a] for a in range(lq.ndim)])
    # d rhs = lhs . g over the lhs's free axes: [batch, lhs contracting (in lhs order), rhs free]
    d_rhs = _scaled_product(lq, gq, ((tuple(lf), g_lhs), (tuple(lb), batch)), ls * gs, rhs_kind.dtype)
    lc_sorted = sorted(lc)
    source = {**{a: i for i, a in enumerate(rb)}, **{c: nb + lc_sorted.index(a) for a, c in zip(lc, rc)},
              **{a: nb + len(lc) + j for j, a in enumerate(rf)}}
    return d_lhs, jnp.transpose(d_rhs, [source[a] for a in range(rq.ndim)])


_fp8_product.defvjp(_fp8_forward, _fp8_backward)


def fp8_dot_general(lhs: jnp.ndarray, rhs: jnp.ndarray, dimension_numbers: Any, precision: Any = None,
                    preferred_element_type: Any = None) -> jnp.ndarray:
    """``jax.lax.dot_general`` in FP8 as training recipes run it today, with
    current (per-tensor, just-in-time) scaling, the signature of
    ``lax.dot_general`` (Flax's ``nn.Dense(dot_general=...)`` injection point).

    Forward: ``lhs`` and ``rhs`` each scaled by its own ``amax / 448`` to
    ``float8_e4m3fn`` (`FP8_FORWARD`), one ``dot_general`` of the two FP8 tensors
    accumulated in float32, times both scales, returned in
    ``preferred_element_type`` (default: the operands' dtype, bfloat16 in the
    zoo). Backward (a custom VJP): the output's gradient scaled by its own
    ``amax / 57344`` to ``float8_e5m2`` (`FP8_GRADIENT`) and multiplied with the
    saved e4m3 operands, two FP8 ``dot_general`` (each the forward's multiply-adds),
    accumulated in float32. The scaling's elementwise work (abs, the amax
    reduction, divide, clip, convert; the rescaling multiply) is separate
    equations. ``precision`` is ignored (FP8 has one).
    """
    del precision
    dtype = preferred_element_type or jnp.result_type(lhs, rhs)
    dimension_numbers = tuple(tuple(tuple(int(a) for a in axes) for axes in pair) for pair in dimension_numbers)
    return _fp8_product(lhs, rhs, dimension_numbers, jnp.dtype(dtype))


class _Kernel(nn.Module):
    """A projection's ``kernel`` alone, ``(d_in, features)``, named and initialised as the
    separate projection's ``nn.Dense`` (the same parameter tree, so the same sharding rules)."""

    features: int
    init: Callable[..., Any]
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, d_in: int) -> jnp.ndarray:
        return self.param("kernel", self.init, (d_in, self.features), self.param_dtype)


def joint_fp8(x: jnp.ndarray, names: Sequence[str], widths: Sequence[int], groups: int, dtype: Dtype,
              param_dtype: Dtype, init: Callable[..., Any]) -> list[jnp.ndarray]:
    """The projections ``names`` of one input ``x`` (``widths`` their output widths) as ONE FP8
    product (`fp8_dot_general`: one scale for the joint weight, one for its output's gradient),
    as Transformer Engine multiplies a fused linear layer: Megatron Core's ``linear_qkv`` (the
    query, key and value projections side by side) and ``linear_fc1`` (a gated feed-forward's gate
    and up projections), so that a tensor-parallel step reduces the input's gradient once per
    layer, not once per projection. Each kernel ``(d, w)`` is split into ``groups`` column blocks
    laid side by side per group (``(d, groups, sum w / groups)``), the grouping Megatron gives
    ``linear_qkv`` (each key/value head with its queries) so that a column split of the kernels
    over devices stays where it is. The parameters are the separate projections' (`_Kernel`,
    initialised by ``init``)."""
    d = x.shape[-1]
    kernels = [_Kernel(w, init, param_dtype, name=name)(d).astype(dtype).reshape(d, groups, w // groups)
               for name, w in zip(names, widths)]
    joint = fp8_dot_general(x.astype(dtype), jnp.concatenate(kernels, axis=-1), (((x.ndim - 1,), (0,)), ((), ())))
    cuts = np.cumsum([w // groups for w in widths])[:-1].tolist()
    return [part.reshape(*x.shape[:-1], w) for part, w in zip(jnp.split(joint, cuts, axis=-1), widths)]
