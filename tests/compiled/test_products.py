"""The matrix products a compiled kernel runs (issue 32): `kernel_product` on HLO.

HLO text written here (an unfused ``dot`` with batch dimensions, a
``convolution``, a fusion that calls a computation holding dots, a cuBLAS call
with its ``gemm_backend_config``, cuDNN fused attention), and deviceless H100
compiles of a matmul and of a convolution and its gradients (jax's CUDA
plugin). Each product is read as a batched GEMM ``[batch, m, k] x [batch, k,
n]`` (a convolution as its implicit GEMM: m output positions, n output
features, k input features times taps); every expected shape and FLOP figure
is derived from the shapes beside it, at 2 FLOP per multiply-add, every tap
counted (padding included: the work the device does).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from xla_cost import plugins
from xla_cost.compiled import kernels
from xla_cost.compiled.hlo import parse_module
from xla_cost.compiled.products import DTYPE_NAMES, Product, kernel_product
from xla_cost.timemodel.devices import target

needs_gpu = pytest.mark.skipif(plugins.cuda_plugin() is None, reason="the gpu extra (jax's CUDA plugin) is not installed")

FMA = 2  # FLOP per multiply-add


def _module(body: str, extra: str = "") -> str:
    return f"HloModule m, is_scheduled=true\n\n{extra}\nENTRY %main {{\n{body}\n}}\n"


def _product(text: str, name: str) -> Product | None:
    """`kernel_product` of the instruction called ``name`` in the module ``text``."""
    module = parse_module(text)
    for computation in module.computations.values():
        shapes = {i.name: i.shape_text for i in computation.instructions}
        for instruction in computation.instructions:
            if instruction.name == name:
                return kernel_product(module, instruction, shapes)
    raise AssertionError(f"no instruction {name}")


# ---------------------------------------------------------------------------
# HLO text written here


def test_a_dot_with_batch_dimensions():
    b, m, k, n = 8, 32, 128, 64  # [b, m, k] x [b, k, n] -> [b, m, n]
    text = _module(
        f"  %a = f32[{b},{m},{k}]{{2,1,0}} parameter(0)\n  %w = f32[{b},{k},{n}]{{2,1,0}} parameter(1)\n"
        f"  ROOT %d = f32[{b},{m},{n}]{{2,1,0}} dot(%a, %w), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, "
        "rhs_batch_dims={0}, rhs_contracting_dims={1}")
    assert _product(text, "d") == Product(batch=b, m=m, n=n, k=k, dtype="float32", flops=FMA * b * m * n * k)


def test_a_dot_contracting_its_first_dimension_with_its_operands_spelled_inline():
    # x^T dy, a weight gradient: [k, m]^T x [k, n] in bfloat16, the operands' shapes written before their names
    k, m, n = 256, 48, 80
    text = _module(
        f"  %x = bf16[{k},{m}]{{1,0}} parameter(0)\n  %dy = bf16[{k},{n}]{{1,0}} parameter(1)\n"
        f"  ROOT %d = bf16[{m},{n}]{{1,0}} dot(bf16[{k},{m}]{{1,0}} %x, bf16[{k},{n}]{{1,0}} %dy), "
        "lhs_contracting_dims={0}, rhs_contracting_dims={0}")
    assert _product(text, "d") == Product(1, m, n, k, "bfloat16", FMA * m * n * k)


def test_a_convolution_is_its_implicit_gemm_valid_taps_counted():
    # NHWC 2x16x16x8 by a 3x3x8x32 kernel, SAME (pad 1): 16x16 outputs, each summing 3x3 taps x 8 features
    batch, side, c_in, c_out = 2, 16, 8, 32
    text = _module(
        f"  %x = f32[{batch},{side},{side},{c_in}]{{3,2,1,0}} parameter(0)\n"
        f"  %w = f32[3,3,{c_in},{c_out}]{{3,2,1,0}} parameter(1)\n"
        f"  ROOT %c = f32[{batch},{side},{side},{c_out}]{{3,2,1,0}} convolution(%x, %w), "
        "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f")
    positions = batch * side * side  # m: every output position of every sample
    # XLA's convention: only taps on real input elements; along each side the first output misses
    # tap 0 and the last tap 2: 3 * 16 - 2 = 46 (output, tap) pairs, 46^2 over the two sides
    pairs = (3 * side - 2) ** 2
    flops = FMA * batch * pairs * c_out * c_in
    assert _product(text, "c") == Product(1, positions, c_out, flops // (FMA * positions * c_out), "float32", flops,
                                          features=c_in)


def test_a_tpu_batched_product_written_as_a_dilated_convolution():
    # libtpu writes q @ k^T over [2, 4] batch dims as a convolution whose batch dims are spatial ones,
    # the input dilated so that each output reads one tap: 2 x (2 x 4) x 256 x 256 x 64 FLOP, not 8x that
    text = _module(
        "  %q = bf16[2,4,256,64]{3,2,1,0} parameter(0)\n"
        "  %k = bf16[2,4,256,64]{3,2,1,0} parameter(1)\n"
        "  ROOT %s = bf16[2,4,256,256]{3,2,1,0} convolution(%q, %k), "
        "window={size=2x4 stride=1x3 lhs_dilate=2x4}, dim_labels=01bf_01oi->01bf")
    product = _product(text, "s")
    assert product.flops == FMA * (2 * 4) * 256 * 256 * 64
    assert product.k == 64  # each score sums one head's 64 features


def test_a_depthwise_convolution_sums_one_feature_per_output():
    # feature_group_count = 8 groups of 1 input feature: each output sums its 3x3 taps of one feature
    batch, side, features = 2, 16, 8
    text = _module(
        f"  %x = f32[{batch},{side},{side},{features}]{{3,2,1,0}} parameter(0)\n"
        f"  %w = f32[3,3,1,{features}]{{3,2,1,0}} parameter(1)\n"
        f"  ROOT %c = f32[{batch},{side},{side},{features}]{{3,2,1,0}} convolution(%x, %w), "
        f"window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f, feature_group_count={features}")
    positions = batch * side * side
    pairs = (3 * side - 2) ** 2  # valid (output, tap) pairs of a SAME 3x3 over 16x16 (see above)
    flops = FMA * batch * pairs * features
    assert _product(text, "c") == Product(1, positions, features, flops // (FMA * positions * features), "float32",
                                          flops, features=1)  # one input feature per group


FUSED = (
    "%fused (p0: f32[64,128], p1: f32[128,256], p2: f32[256,16]) -> f32[64,16] {\n"
    "  %p0 = f32[64,128]{1,0} parameter(0)\n  %p1 = f32[128,256]{1,0} parameter(1)\n"
    "  %p2 = f32[256,16]{1,0} parameter(2)\n"
    "  %d1 = f32[64,256]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  %t = f32[64,256]{1,0} tanh(%d1)\n"
    "  ROOT %d2 = f32[64,16]{1,0} dot(%t, %p2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "}\n"
    "%plain (q: f32[64,16]) -> f32[64,16] {\n"
    "  %q = f32[64,16]{1,0} parameter(0)\n  ROOT %n = f32[64,16]{1,0} negate(%q)\n"
    "}\n"
)


def test_a_fusion_is_its_largest_product_and_all_of_their_flop():
    text = _module(
        "  %a = f32[64,128]{1,0} parameter(0)\n  %b = f32[128,256]{1,0} parameter(1)\n"
        "  %c = f32[256,16]{1,0} parameter(2)\n"
        "  %f = f32[64,16]{1,0} fusion(%a, %b, %c), kind=kCustom, calls=%fused\n"
        "  ROOT %g = f32[64,16]{1,0} fusion(%f), kind=kLoop, calls=%plain", FUSED)
    first = FMA * 64 * 256 * 128  # [64, 128] x [128, 256]: the larger (64 * 256 * 128 > 64 * 16 * 256)
    second = FMA * 64 * 16 * 256  # tanh(...) [64, 256] x [256, 16]
    assert _product(text, "f") == Product(1, 64, 256, 128, "float32", first + second, count=2)
    assert _product(text, "g") is None  # an elementwise fusion runs no product
    listed = {k.name: k for k in kernels.kernel_list(text)}  # the kernel list carries it
    assert listed["f"].product == _product(text, "f") and listed["g"].product is None
    assert kernels.Kernel.from_dict(listed["f"].to_dict()) == listed["f"]  # and writes it and reads it back


def test_a_cublas_gemm_reads_its_dimension_numbers_from_its_backend_config():
    b, m, k, n = 3, 16, 64, 32
    config = ('backend_config={"gemm_backend_config":{"alpha_real":1,"beta":0,"dot_dimension_numbers":'
              '{"lhs_contracting_dimensions":["2"],"rhs_contracting_dimensions":["1"],'
              '"lhs_batch_dimensions":["0"],"rhs_batch_dimensions":["0"]}}}')
    text = _module(
        f"  %a = bf16[{b},{m},{k}]{{2,1,0}} parameter(0)\n  %w = bf16[{b},{k},{n}]{{2,1,0}} parameter(1)\n"
        f"  ROOT %g = (bf16[{b},{m},{n}]{{2,1,0}}, s8[1024]{{0}}) custom-call(%a, %w), "
        f'custom_call_target="__cublas$gemm", {config}')
    expected = Product(b, m, n, k, "bfloat16", FMA * b * m * n * k)
    assert _product(text, "g") == expected
    (call,) = kernels.kernel_list(text)
    assert (call.category, call.product) == ("library", expected)
    # without its dimension numbers the shape cannot be read: none, not a guess
    bare = text.replace(f", {config}", "")
    assert _product(bare, "g") is None


def test_fused_attention_is_its_products_as_batched_gemms():
    # cuDNN's fused attention, as a real H200 compile printed it (tests/compiled/test_kernels.py);
    # query and value head dims equal here: QK^T is [T, D] x [D, S], PV is [T, S] x [S, D]
    b, t, s, heads, head = 2, 128, 96, 4, 64
    config = ('backend_config={"cudnn_fmha_backend_config":{"fmha_scale":0.125,"intermediate_tensor_shape":'
              f'{{"dimensions":["{b}","{heads}","{t}","{s}"],"element_type":"BF16"}},"mask_type":"NO_MASK"}},'
              '"operation_queue_id":"0"}')
    text = _module(
        f"  %q = bf16[{b},{t},{heads},{head}]{{3,2,1,0}} parameter(0)\n"
        f"  %k = bf16[{b},{s},{heads},{head}]{{3,2,1,0}} parameter(1)\n"
        f"  %v = bf16[{b},{s},{heads},{head}]{{3,2,1,0}} parameter(2)\n"
        f"  ROOT %fwd = (bf16[{b},{heads},{t},{head}]{{3,1,2,0}}, u8[256]{{0}}) custom-call(%q, %k, %v), "
        f'custom_call_target="__cudnn$fmhaSoftmax", {config}')
    scores = b * heads * t * s
    # Q.K^T and P.V, each 2 B H T S D
    assert _product(text, "fwd") == Product(b * heads, t, s, head, "bfloat16", 2 * FMA * scores * head, count=2)


def test_what_runs_no_product_or_cannot_be_read_is_none():
    text = _module(
        "  %a = f32[4,8]{1,0} parameter(0)\n  %e = f32[4,8]{1,0} exponential(%a)\n"
        "  ROOT %d = f32[4,4]{1,0} dot(%e, %missing), lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    assert _product(text, "e") is None  # elementwise
    assert _product(text, "d") is None  # an operand whose shape is nowhere: unknown, not zero


def test_dtype_names_are_the_registrys():
    assert {DTYPE_NAMES[t] for t in ("bf16", "f16", "f32")} == {"bfloat16", "float16", "float32"}
    product = Product(2, 3, 4, 5, "bfloat16", FMA * 2 * 3 * 4 * 5, count=1)
    assert Product.from_dict(product.to_dict()) == product


# ---------------------------------------------------------------------------
# Deviceless H100 compiles


@pytest.fixture(scope="module")
def h100():
    return target("h100")


@needs_gpu
def test_an_h100_matmul_is_one_product_of_2mnk_flop(h100):
    m, k, n = 128, 256, 512
    args = [jax.ShapeDtypeStruct(shape, jnp.float32, sharding=h100.placement()) for shape in ((m, k), (k, n))]
    lowered = jax.jit(lambda a, b: a @ b).lower(*args)
    for compiled in (lowered.compile(), lowered.compile({"xla_gpu_enable_triton_gemm": False})):
        (product,) = [kernel.product for kernel in kernels.kernel_list(compiled.as_text()) if kernel.product]
        assert product.flops == FMA * m * n * k and (product.m, product.n) == (m, n)
        # a Triton gemm may split the contraction (split-K): the splits become its batch
        assert product.batch * product.k == k and product.dtype == "float32"


@needs_gpu
def test_an_h100_convolution_and_its_gradients_are_three_implicit_gemms(h100):
    batch, side, c_in, c_out, taps = 2, 16, 8, 16, 3 * 3

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    args = [jax.ShapeDtypeStruct(shape, jnp.float32, sharding=h100.placement())
            for shape in ((batch, side, side, c_in), (3, 3, c_in, c_out))]
    grad = jax.grad(lambda x, w: jnp.sum(jnp.tanh(conv(x, w))), argnums=(0, 1))
    compiled = jax.jit(grad).lower(*args).compile()
    found = {k.kind: k.product for k in kernels.kernel_list(compiled.as_text()) if k.product is not None}
    positions = batch * side * side
    # each of the three: every (position, valid tap, in, out); a SAME 3x3 over 16 has 3 * 16 - 2 valid
    # (output, tap) pairs per side (the edge outputs miss one tap each)
    flops = FMA * batch * (3 * side - 2) ** 2 * c_out * c_in
    assert taps == 3 * 3
    assert found == {
        # y = im2col(x) [positions, taps Cin] x W [taps Cin, Cout]
        "__cudnn$convForward": Product(1, positions, c_out, flops // (FMA * positions * c_out), "float32", flops,
                                       features=c_in),
        # dW = im2col(x)^T [taps Cin, positions] x dy [positions, Cout]
        "__cudnn$convBackwardFilter": Product(1, c_in * taps, c_out, flops // (FMA * c_in * taps * c_out), "float32",
                                              flops, features=c_in),
        # dx = dy's windows [positions, taps Cout] x W^T [taps Cout, Cin]
        "__cudnn$convBackwardInput": Product(1, positions, c_in, flops // (FMA * positions * c_in), "float32", flops,
                                             features=c_in),
    }


# ---------------------------------------------------------------------------
# What a gradient, a backward pass and an asynchronous wrapper run (issue 49)


def test_a_depthwise_convolution_s_weight_gradient_costs_what_its_forward_pass_does():
    # G = 8 channels, each convolved alone (feature_group_count = 8): NHWC 2x16x16x8 by 3x3x1x8, SAME.
    # The weight gradient is the convolution of the input with the output's gradient, as XLA writes it
    # (a TPU compile printed one of these): the channels made the batch, split in G groups
    # (batch_group_count = 8), the images made the features summed over, the output the 3x3 taps of each
    # channel. Both pair each of the 46 x 46 valid (output, tap) positions of each image with each channel
    # once: 2 x 2 x 46^2 x 8 FLOP (46 = 3 x 16 - 2: the edge outputs miss a tap, see above)
    batch, side, channels = 2, 16, 8
    text = _module(
        f"  %x = f32[{batch},{side},{side},{channels}]{{3,2,1,0}} parameter(0)\n"
        f"  %w = f32[3,3,1,{channels}]{{3,2,1,0}} parameter(1)\n"
        f"  %dy = f32[{batch},{side},{side},{channels}]{{3,2,1,0}} parameter(2)\n"
        f"  %y = f32[{batch},{side},{side},{channels}]{{3,2,1,0}} convolution(%x, %w), "
        f"window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f, feature_group_count={channels}\n"
        f"  ROOT %dw = f32[3,3,1,{channels}]{{3,2,1,0}} convolution(%x, %dy), "
        f"window={{size={side}x{side} pad=1_1x1_1}}, dim_labels=f01b_i01o->01bf, batch_group_count={channels}")
    flops = FMA * batch * (3 * side - 2) ** 2 * channels
    assert _product(text, "y").flops == flops
    gradient = _product(text, "dw")
    assert gradient.flops == flops  # not G times it
    assert (gradient.m, gradient.n) == (3 * 3, channels)  # each channel's 9 taps


def _attention_call(name: str, target: str, operands: str, results: str) -> str:
    b, t, s, heads = 2, 128, 96, 4
    config = ('backend_config={"cudnn_fmha_backend_config":{"fmha_scale":0.125,"intermediate_tensor_shape":'
              f'{{"dimensions":["{b}","{heads}","{t}","{s}"],"element_type":"BF16"}},"mask_type":"NO_MASK"}},'
              '"operation_queue_id":"0"}')
    return f'  %{name} = ({results}) custom-call({operands}), custom_call_target="{target}", {config}'


def test_a_fused_attention_backward_runs_twice_the_products_of_its_forward():
    # the cuDNN forward runs Q.K^T and P.V; its backward dP = dO.V^T, dV = P^T.dO, dQ = dS.K and dK = dS^T.Q:
    # four products of the same sizes, 2 x 2 x B H T S D = 50,331,648 FLOP at B 2, H 4, T 128, S 96, D 64
    b, t, s, heads, head = 2, 128, 96, 4, 64
    q, k, o = f"bf16[{b},{t},{heads},{head}]{{3,2,1,0}}", f"bf16[{b},{s},{heads},{head}]{{3,2,1,0}}", \
        f"bf16[{b},{heads},{t},{head}]{{3,1,2,0}}"
    text = _module(
        f"  %q = {q} parameter(0)\n  %k = {k} parameter(1)\n  %v = {k} parameter(2)\n"
        f"  %do = {q} parameter(3)\n"
        + _attention_call("fwd", "__cudnn$fmhaSoftmax", "%q, %k, %v",
                          f"{o}, f32[{b},{heads},{t}]{{2,1,0}}, u8[256]{{0}}") + "\n"
        f"  %stats = f32[{b},{heads},{t}]{{2,1,0}} get-tuple-element(%fwd), index=1\n"
        f"  %o = {o} get-tuple-element(%fwd), index=0\n"
        + _attention_call("bwd", "__cudnn$fmhaSoftmaxBackward", "%q, %k, %v, %stats, %do, %o",
                          f"{o}, bf16[{b},{heads},{s},{head}]{{3,1,2,0}}, bf16[{b},{heads},{s},{head}]{{3,1,2,0}}, "
                          "u8[1024]{0}").replace("  %bwd", "  ROOT %bwd"))
    one_pass = 2 * FMA * b * heads * t * s * head  # two products of 2 B H T S D each
    assert _product(text, "fwd").flops == one_pass == 25_165_824
    backward = _product(text, "bwd")
    assert backward.flops == 2 * one_pass == 50_331_648 and backward.count == 4
    listed = {kernel.name: kernel for kernel in kernels.kernel_list(text)}
    assert listed["bwd"].product.flops == 2 * listed["fwd"].product.flops  # what the time model prices


def test_an_asynchronous_start_runs_the_product_its_computation_wraps():
    # a product XLA runs asynchronously (on another stream): the async-start's computation holds it
    m, k, n = 64, 128, 32
    text = "\n".join([
        "HloModule m, is_scheduled=true",
        f"%wrapped (a: f32[{m},{k}], b: f32[{k},{n}]) -> f32[{m},{n}] {{",
        f"  %a = f32[{m},{k}]{{1,0}} parameter(0)",
        f"  %b = f32[{k},{n}]{{1,0}} parameter(1)",
        f"  ROOT %d = f32[{m},{n}]{{1,0}} dot(%a, %b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
        "}",
        "ENTRY %main {",
        f"  %x = f32[{m},{k}]{{1,0}} parameter(0)",
        f"  %w = f32[{k},{n}]{{1,0}} parameter(1)",
        f"  %s = ((f32[{m},{k}]{{1,0}}, f32[{k},{n}]{{1,0}}), f32[{m},{n}]{{1,0}}, s32[]) async-start(%x, %w), "
        "calls=%wrapped",
        f"  ROOT %r = f32[{m},{n}]{{1,0}} async-done(%s)",
        "}",
    ])
    expected = Product(1, m, n, k, "float32", FMA * m * n * k)
    assert _product(text, "s") == expected  # asked of the start itself
    (listed,) = [kernel for kernel in kernels.kernel_list(text) if kernel.product is not None]
    assert listed.product == expected  # and in the kernel list
