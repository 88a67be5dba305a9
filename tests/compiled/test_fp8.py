"""FP8 matrix products (issue 50), as jax writes them, counted by both counters.

Two forms: a ``dot_general`` of ``float8_e4m3fn`` operands with current
(per-tensor, this step's amax) scaling, which an H100 compiles to an FP8 gemm
(a Triton fusion reading ``f8e4m3fn``; the time model prices it at the float8
peak), and ``jax.nn.scaled_matmul``'s block-scaled product (MXFP8: a scale per
32 values of the contraction), whose primitive has a rule of its own.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from xla_cost.analysis import programs
from xla_cost.compiled import kernels, targets
from xla_cost.count.interpret import count_function
from xla_cost.parallel.devices import target

E4M3_MAX = 448.0  # the largest finite float8_e4m3fn


def _fp8_dense(x: jax.Array, w: jax.Array) -> jax.Array:
    """x @ w in float8 with current scaling: each operand over its amax / 448, the product rescaled."""
    sx, sw = jnp.max(jnp.abs(x)) / E4M3_MAX, jnp.max(jnp.abs(w)) / E4M3_MAX
    xq, wq = (x / sx).astype(jnp.float8_e4m3fn), (w / sw).astype(jnp.float8_e4m3fn)
    product = lax.dot_general(xq, wq, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    return (product * (sx * sw)).astype(jnp.bfloat16)


def test_a_scaled_float8_product_on_an_h100_is_an_fp8_gemm_counted_alike():
    m, k, n = 256, 512, 1024
    args = (jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16))
    counted = count_function(_fp8_dense, *args)
    assert counted.unsupported == {}
    products = [e for e in counted.equations if e.primitive == "dot_general"]
    assert sum(e.cost.flops for e in products) == 2 * m * k * n  # 2 FLOP per multiply-add
    with targets.use(target("h100")):
        compiled = jax.jit(_fp8_dense, **programs.placement()).lower(*args).compile()
    listed = [kernel for kernel in kernels.kernel_list(compiled.as_text()) if kernel.product is not None]
    assert [(kernel.product.dtype, kernel.product.flops) for kernel in listed] == [("float8", 2 * m * k * n)]
    costs = kernels.module_costs(compiled, "gpu")
    # the rest is elementwise (scales, converts, the amax reductions): the two counts agree within 1%
    assert costs.costs["flops"] == pytest.approx(counted.total.flops, rel=0.01)


def test_a_block_scaled_product_is_its_multiply_adds():
    b, m, n, k, block = 2, 128, 256, 512, 32  # MXFP8: one float8_e8m0fnu scale per 32 values of K
    operands = (
        jax.ShapeDtypeStruct((b, m, k), jnp.float8_e4m3fn), jax.ShapeDtypeStruct((b, n, k), jnp.float8_e5m2),
        jax.ShapeDtypeStruct((b, m, k // block), jnp.float8_e8m0fnu),
        jax.ShapeDtypeStruct((b, n, k // block), jnp.float8_e8m0fnu),
    )
    counted = count_function(lambda *a: jax.nn.scaled_matmul(*a, preferred_element_type=jnp.float32), *operands)
    assert counted.unsupported == {}
    assert counted.total.flops == counted.total.products == 2 * b * m * n * k
