"""FP8 matrix products (issue 50), as jax writes them, counted by both counters.

Three forms: a ``dot_general`` of ``float8_e4m3fn`` operands with current
(per-tensor, this step's amax) scaling, which an H100 compiles to an FP8 gemm
(a Triton fusion reading ``f8e4m3fn``; the time model prices it at the float8
peak), and ``jax.nn.scaled_matmul``'s block-scaled product (MXFP8: a scale per
32 values of the contraction), whose primitive has a rule of its own; and the
zoo's ``--dtype float8`` Llama, whose projections and MLP an H100 and a B200
(sm_100, issue 51) multiply in FP8 gemms priced at their FP8 peaks.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from xla_cost.analysis import programs
from xla_cost.analysis.model_flops import attention_flops
from xla_cost.compiled import kernels, targets
from xla_cost.count.interpret import count_function
from xla_cost.timemodel import calibration, kernel_time
from xla_cost.timemodel.devices import target

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
    # its products are matrix-unit work, not attention's: attention_flops (and the causal convention) leave it
    assert attention_flops(counted, (), "") == 0


# dense FP8 and bfloat16 peaks: NVIDIA H100 datasheet, SXM5 (FP8 3,958 TFLOPS with sparsity, BF16 989.4 dense);
# NVIDIA HGX B200 specifications, per GPU (FP8 9 PFLOPS and FP16/BF16 4.5 PFLOPS with sparsity), halved
PEAKS = {"h100": (1979e12, 989.4e12), "b200": (9000e12 / 2, 4500e12 / 2)}


@pytest.mark.parametrize("device", ["h100", "b200"])
def test_the_zoos_float8_llama_compiles_to_fp8_gemms_priced_at_the_fp8_peak(device):
    """``--dtype float8`` (`models._transformer.fp8_dot_general`): a tiny Llama's forward
    compiled deviceless for an H100 (sm_90) or a B200 (sm_100) multiplies its projections
    and MLP in FP8 gemms (f8e4m3fn operands), its attention and head in bfloat16 ones."""
    from xla_cost.zoo import build_model, example_inputs

    b, t, layers, d, n, k, f, v = 2, 16, 1, 64, 4, 2, 96, 128
    h = d // n
    config = {"vocab_size": v, "seq_len": t, "n_layer": layers, "d_model": d, "n_head": n, "n_kv_head": k,
              "d_ff": f, "scan_layers": False}
    model = build_model("llama3-8b", dtype="float8", **config)
    inputs = example_inputs("llama3-8b", b, dtype="float8", **config)
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)
    with targets.use(target(device)):
        compiled = jax.jit(lambda p, x: model.apply(p, x), **programs.placement()).lower(variables, inputs).compile()
    listed = [kernel for kernel in kernels.kernel_list(compiled.as_text()) if kernel.product is not None]
    fp8 = [kernel for kernel in listed if kernel.product.dtype == "float8"]
    # per token and layer q and o d*N*H, k and v d*K*H, gate, up and down d*f multiply-adds, 2 FLOP each
    assert sum(kernel.product.flops for kernel in fp8) == 2 * b * t * layers * (d * (2 * n + 2 * k) * h + 3 * d * f)
    # XLA's dot merger joins the products that share an input: q, k, v one gemm, gate and up one; o, down
    assert len(fp8) == 4 * layers
    # bfloat16: per layer and sequence q k^T and probs v, 2*N*H*T*T multiply-adds each; the head d*V per token
    rest = [kernel for kernel in listed if kernel.product.dtype != "float8"]
    assert {kernel.product.dtype for kernel in rest} == {"bfloat16"}
    assert sum(kernel.product.flops for kernel in rest) == b * (layers * 4 * d * t * t + 2 * t * d * v)
    # priced at the device's FP8 peak, twice its bfloat16 one: each FP8 gemm takes less than it would at the
    # bfloat16 peak
    fp8_peak, bf16_peak = PEAKS[device]
    constants = calibration.constants()
    at_fp8 = kernel_time.price_kernels(tuple(fp8), device, constants)
    at_bf16 = kernel_time.price_kernels(tuple(fp8), device, constants, arithmetic="bfloat16")
    assert at_fp8.matmul < at_bf16.matmul
    flops = sum(kernel.product.flops for kernel in fp8)
    totals = kernel_time.price_totals(flops, 0.0, 0, device, "float8", constants)
    assert totals.matmul == pytest.approx(flops / (fp8_peak * constants.matmul), rel=1e-12)
    rest = kernel_time.price_totals(flops, 0.0, 0, device, "bfloat16", constants)
    assert rest.matmul == pytest.approx(flops / (bf16_peak * constants.matmul), rel=1e-12)


def test_a_tensor_parallel_float8_llama_reduces_in_bfloat16_once_per_fused_layer():
    """TE's FP8 GEMM writes bfloat16 and Megatron fuses q, k, v (linear_qkv) and gate, up (linear_fc1): a
    tensor-parallel layer all-reduces four (B, T, d) bfloat16 arrays, o's and down's outputs forward, the
    qkv and fc1 inputs' gradients backward (issue 51: the zoo's FP8 products reduced seven float32 ones)."""
    import xla_cost
    from xla_cost.zoo import build_model, example_inputs

    b, t, layers, d, n, k, f, v = 2, 64, 1, 128, 4, 2, 256, 256
    config = {"vocab_size": v, "seq_len": t, "n_layer": layers, "d_model": d, "n_head": n, "n_kv_head": k,
              "d_ff": f, "scan_layers": False}
    report = xla_cost.analyze(build_model("llama3-8b", dtype="float8", **config),
                              example_inputs("llama3-8b", b, dtype="float8", **config), optimizer="sgd",
                              dtype="bfloat16", mesh={"model": 2}, target="h100")
    reduced = [c for c in report.phases["grad"].communication if c.kind == "all-reduce"]
    count = lambda nbytes: sum(c.executions for c in reduced if c.bytes == nbytes)  # noqa: E731
    # 4 a layer, and the vocabulary-parallel embedding's output forward and the head's input gradient backward
    assert count(b * t * d * 2) == 4 * layers + 2
    assert count(b * t * d * 4) == 0  # none in float32
