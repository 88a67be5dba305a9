"""The target compiler's program: library calls' FLOP, the program's costs, and its kernel list.

Deviceless compiles for an H100 (jax's CUDA plugin) and a TPU v5e (libtpu) of
small programs, each compiled once per module; and HLO text written here for
what this machine cannot compile (cuDNN fused attention needs cuDNN itself:
its call is written as a real H200 compile printed it, jax 0.11.2).
Every expected FLOP figure is a formula of the shapes beside it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from xla_cost import plugins
from xla_cost.compiled import kernels
from xla_cost.count import attention
from xla_cost.errors import InputError
from xla_cost.timemodel.devices import target

needs_gpu = pytest.mark.skipif(plugins.cuda_plugin() is None, reason="the gpu extra (jax's CUDA plugin) is not installed")
needs_tpu = pytest.mark.skipif(not plugins.has_libtpu(), reason="the tpu extra (libtpu) is not installed")

M, K, N = 128, 256, 512  # a float32 (M, K) @ (K, N)
MATMUL_FLOP = 2 * M * N * K

BATCH, SIDE, C_IN, C_OUT, TAPS = 2, 16, 8, 16, 3  # NHWC 2x16x16x8 -> 16 features, 3x3 SAME, stride 1
VALID_PAIRS = SIDE * TAPS - 2  # per spatial dim, (output, tap) pairs on real input: the 2 edge taps hit padding
CONV_FLOP = 2 * BATCH * C_IN * C_OUT * VALID_PAIRS**2


def _abstract(shapes, sharding, dtype=jnp.float32):
    return [jax.ShapeDtypeStruct(shape, dtype, sharding=sharding) for shape in shapes]


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


@pytest.fixture(scope="module")
def h100():
    return target("h100")


@pytest.fixture(scope="module")
def matmuls(h100):
    """The matmul compiled for the H100 twice: as XLA likes it (a Triton gemm
    fusion) and with Triton gemms off (a cuBLAS call)."""
    args = _abstract([(M, K), (K, N)], h100.placement())
    lowered = jax.jit(lambda a, b: a @ b).lower(*args)
    return lowered.compile(), lowered.compile({"xla_gpu_enable_triton_gemm": False})


@pytest.fixture(scope="module")
def convs(h100):
    """The convolution and its gradient (input and kernel), compiled for the H100."""
    args = _abstract([(BATCH, SIDE, SIDE, C_IN), (TAPS, TAPS, C_IN, C_OUT)], h100.placement())
    grad = jax.grad(lambda x, w: jnp.sum(jnp.tanh(_conv(x, w))), argnums=(0, 1))
    return jax.jit(_conv).lower(*args).compile(), jax.jit(grad).lower(*args).compile()


@needs_gpu
@pytest.mark.parametrize("which", [0, 1], ids=["triton", "cublas"])
def test_matmul_flop_is_2mnk_from_the_module_or_the_library(matmuls, which):
    compiled = matmuls[which]
    costs = kernels.module_costs(compiled)
    assert costs.source == "module+library"  # a deviceless GPU compile has no cost_analysis()
    assert costs.costs["flops"] == pytest.approx(MATMUL_FLOP, rel=0.01)  # a split-K reduction may add M*N*splits
    library = kernels.library_flops(compiled.as_text())
    if which == 1:
        assert library.per_target == {"__cublas$lt$matmul": MATMUL_FLOP}
        assert costs.costs["bytes accessed"] == 4 * (M * K + K * N + M * N)  # the call's operands and result
        assert [k.flops for k in kernels.kernel_list(compiled.as_text()) if k.category == "library"] == [MATMUL_FLOP]
    assert library.unknown == ()


@needs_gpu
def test_conv_flop_counts_the_taps_on_real_input(convs):
    forward, _ = convs
    library = kernels.library_flops(forward.as_text())
    assert library.per_target == {"__cudnn$convForward": CONV_FLOP}
    costs = kernels.module_costs(forward)
    assert costs.costs["flops"] == pytest.approx(CONV_FLOP, rel=0.01)
    calls = [k for k in kernels.kernel_list(forward.as_text()) if k.category == "library"]
    assert [(k.kind, k.flops, k.executions) for k in calls] == [("__cudnn$convForward", CONV_FLOP, 1)]
    assert calls[0].op_name.endswith("conv_general_dilated")
    x_bytes, w_bytes, y_bytes = (4 * BATCH * SIDE * SIDE * C_IN, 4 * TAPS * TAPS * C_IN * C_OUT,
                                 4 * BATCH * SIDE * SIDE * C_OUT)
    assert calls[0].bytes == x_bytes + w_bytes + y_bytes  # the scratch u8[0] left out


@needs_gpu
def test_conv_gradient_calls_each_cost_the_forward(convs):
    _, grad = convs
    library = kernels.library_flops(grad.as_text())
    assert library.per_target["__cudnn$convBackwardInput"] == CONV_FLOP
    assert library.per_target["__cudnn$convBackwardFilter"] == CONV_FLOP
    assert library.flops == 3 * CONV_FLOP  # the forward (jvp), then the two gradients: 2x the forward
    costs = kernels.module_costs(grad)
    assert costs.costs["flops"] > library.flops  # the tanh's derivative, the sum: the module's own FLOP
    assert costs.costs["flops"] == pytest.approx(library.flops, rel=0.01)


@pytest.fixture(scope="module")
def data_parallel_step(h100):
    """A two-layer MLP's SGD step over 8 H100s (2 hosts x 4), batch sharded on ``data``."""
    mesh = Mesh(np.array(h100.devices(8)), ("data",))
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

    def loss(params, x, y):
        w1, w2 = params
        return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)

    def step(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = tuple(_abstract([(128, 256), (256, 10)], replicated))
    x, y = _abstract([(64, 128), (64, 10)], sharded)
    return jax.jit(step).lower(params, x, y).compile()


@needs_gpu
def test_data_parallel_gradients_are_an_async_all_reduce_over_eight(data_parallel_step):
    listed = kernels.kernel_list(data_parallel_step.as_text())
    reduces = [k for k in listed if k.category == "collective"]
    assert reduces and all(k.kind == "all-reduce" and k.asynchronous for k in reduces)
    assert all(k.opcode == "all-reduce-start" and k.done.startswith("all-reduce-done") for k in reduces)
    assert all(k.groups == (tuple(range(8)),) and k.group_size == 8 for k in reduces)
    gradient_bytes = 4 * (128 * 256 + 256 * 10)  # both float32 weight gradients, combined or not
    assert sum(k.comm_bytes for k in reduces) == gradient_bytes
    summary = kernels.summarize_kernels(listed)
    assert [p.start for p in summary.async_pairs] == [k.name for k in reduces]
    assert summary.by_category["collective"] == len(reduces)
    assert summary.launches == len(listed) and summary.unknown == ()
    assert all(k.category in kernels.CATEGORIES and k.executions == 1 for k in listed)


@needs_tpu
def test_tpu_cost_analysis_is_used_as_it_is_with_its_time():
    tpu = target("tpu-v5e:2x2")
    args = _abstract([(64, 128), (128, 256), (256, 10)], tpu.placement())
    compiled = jax.jit(lambda x, w1, w2: jnp.tanh(x @ w1) @ w2).lower(*args).compile()
    costs = kernels.module_costs(compiled)
    assert costs.source == "cost_analysis"
    assert costs.costs == {k: float(v) for k, v in compiled.cost_analysis().items()}
    assert costs.costs["optimal_seconds"] > 0
    assert costs.costs["flops"] == pytest.approx(2 * 64 * 128 * 256 + 2 * 64 * 256 * 10, rel=0.01)


# ---------------------------------------------------------------------------
# HLO text written here


def _module(body: str, extra: str = "") -> str:
    return f"HloModule m, is_scheduled=true\n\n{extra}\nENTRY %main {{\n{body}\n}}\n"


B, T, S, HEADS, QK, V = 2, 128, 96, 4, 64, 32  # attention: batch, queries, keys, heads, head dims
SCORES = B * HEADS * T * S


def _attention_config() -> str:
    # as a real H200 compile printed it, the algorithm and layout left out
    return ('backend_config={"cudnn_fmha_backend_config":{"fmha_scale":0.125,"intermediate_tensor_shape":'
            f'{{"dimensions":["{B}","{HEADS}","{T}","{S}"],"element_type":"BF16"}},"mask_type":"NO_MASK"}},'
            '"operation_queue_id":"0"}')


def test_fused_attention_is_its_two_products_and_its_softmax():
    forward = (
        f"  %q = bf16[{B},{T},{HEADS},{QK}]{{3,2,1,0}} parameter(0)\n"
        f"  %k = bf16[{B},{S},{HEADS},{QK}]{{3,2,1,0}} parameter(1)\n"
        f"  %v = bf16[{B},{S},{HEADS},{V}]{{3,2,1,0}} parameter(2)\n"
        f"  %do = bf16[{B},{T},{HEADS},{V}]{{3,2,1,0}} parameter(3)\n"
        f"  %fwd = (bf16[{B},{HEADS},{T},{V}]{{3,1,2,0}}, f32[{B},{HEADS},{T}]{{2,1,0}}, u8[256]{{0}}) "
        f'custom-call(%q, %k, %v), custom_call_target="__cudnn$fmhaSoftmax", '
        f'metadata={{op_name="jit(f)/attention"}}, {_attention_config()}\n'
        f"  %stats = f32[{B},{HEADS},{T}]{{2,1,0}} get-tuple-element(%fwd), index=1\n"
        f"  %o = bf16[{B},{HEADS},{T},{V}]{{3,1,2,0}} get-tuple-element(%fwd), index=0\n"
        f"  ROOT %bwd = (bf16[{B},{HEADS},{T},{QK}]{{3,1,2,0}}, bf16[{B},{HEADS},{S},{QK}]{{3,1,2,0}}, "
        f"bf16[{B},{HEADS},{S},{V}]{{3,1,2,0}}, u8[1024]{{0}}) custom-call(%q, %k, %v, %stats, %do, "
        f'/*index=5*/%o), custom_call_target="__cudnn$fmhaSoftmaxBackward", {_attention_config()}'
    )
    products = 2 * SCORES * QK + 2 * SCORES * V  # Q.K^T, then P.V
    softmax = attention.SOFTMAX_FLOP * SCORES  # scale, row max, subtract, row sum, normalise
    found = kernels.library_flops(_module(forward))
    assert found.per_target == {"__cudnn$fmhaSoftmax": products + softmax,
                                "__cudnn$fmhaSoftmaxBackward": 2 * products + softmax}  # dQ, dK, dV, dP
    assert found.unknown == ()


def test_gemm_epilogue_and_a_loop_multiply_and_an_unknown_call_is_named():
    b, m, n, k, trips = 3, 16, 32, 64, 5
    config = ('backend_config={"gemm_backend_config":{"alpha_real":1,"beta":0,"epilogue":"BIAS_RELU",'
              '"dot_dimension_numbers":{"lhs_contracting_dimensions":["2"],"rhs_contracting_dimensions":["1"],'
              '"lhs_batch_dimensions":["0"],"rhs_batch_dimensions":["0"]}}}')
    body = (
        "%body (p: (f32[3,16,64], f32[3,64,32], f32[32])) -> (f32[3,16,64], f32[3,64,32], f32[32]) {\n"
        "  %p = (f32[3,16,64], f32[3,64,32], f32[32]) parameter(0)\n"
        "  %a = f32[3,16,64]{2,1,0} get-tuple-element(%p), index=0\n"
        "  %w = f32[3,64,32]{2,1,0} get-tuple-element(%p), index=1\n"
        "  %c = f32[32]{0} get-tuple-element(%p), index=2\n"
        f'  %gemm = (f32[3,16,32]{{2,1,0}}, s8[1024]{{0}}) custom-call(%a, %w, %c), custom_call_target="__cublas$lt$matmul", {config}\n'
        '  %pallas = f32[32]{0} custom-call(%c), custom_call_target="__gpu$xla.gpu.triton", metadata={op_name="jit(f)/kernel"}\n'
        "  ROOT %t = (f32[3,16,64], f32[3,64,32], f32[32]) tuple(%a, %w, %pallas)\n"
        "}\n\n"
        "%cond (q: (f32[3,16,64], f32[3,64,32], f32[32])) -> pred[] {\n"
        "  %q = (f32[3,16,64], f32[3,64,32], f32[32]) parameter(0)\n"
        "  ROOT %false = pred[] constant(false)\n"
        "}\n"
    )
    entry = (
        "  %x = (f32[3,16,64], f32[3,64,32], f32[32]) parameter(0)\n"
        f'  ROOT %loop = (f32[3,16,64], f32[3,64,32], f32[32]) while(%x), condition=%cond, body=%body, '
        f'backend_config={{"known_trip_count":{{"n":"{trips}"}}}}'
    )
    found = kernels.library_flops(_module(entry, body))
    per_call = 2 * b * m * n * k + 2 * b * m * n  # the product, then the bias add and the relu per output
    assert found.per_target == {"__cublas$lt$matmul": trips * per_call}
    assert len(found.unknown) == 1 and "pallas (jit(f)/kernel)" in found.unknown[0]
    listed = {k.name: k for k in kernels.kernel_list(_module(entry, body))}
    assert (listed["gemm"].executions, listed["gemm"].flops, listed["pallas"].flops) == (trips, per_call, None)
    assert listed["gemm"].bytes == 4 * (b * m * k + b * k * n + n + b * m * n)  # operands and result, no scratch


def test_strided_padded_dilated_conv_counts_only_real_input():
    # input 1x7x7x4, kernel 3x3 with rhs dilation 2 (a 5-wide footprint), stride 2, padding 2 each side:
    # out = (7 + 4 - 5) // 2 + 1 = 4 per dim; tap k of output o reads o*2 - 2 + 2k, real if in [0, 7)
    pairs = sum(1 for o in range(4) for tap in range(3) if 0 <= o * 2 - 2 + 2 * tap < 7)
    conv = (
        "  %x = f32[1,7,7,4]{3,2,1,0} parameter(0)\n"
        "  %w = f32[6,3,3,4]{3,2,1,0} parameter(1)\n"
        "  ROOT %c = (f32[1,4,4,6]{3,2,1,0}, u8[0]{0}) custom-call(%x, %w), "
        "window={size=3x3 stride=2x2 pad=2_2x2_2 rhs_dilate=2x2}, dim_labels=b01f_o01i->b01f, "
        'custom_call_target="__cudnn$convForward"'
    )
    assert kernels.library_flops(_module(conv)).flops == 2 * 1 * 4 * 6 * pairs**2


def test_overlap_of_an_async_collective_and_a_kernel_round_trip():
    text = _module(
        "  %g = f32[64]{0} parameter(0)\n"
        "  %ar = f32[64]{0} all-reduce-start(%g), replica_groups={{0,1},{2,3}}, to_apply=%add\n"
        '  %f = f32[64]{0} fusion(%g), kind=kLoop, calls=%neg, metadata={op_name="jit(f)/neg"}\n'
        "  %done = f32[64]{0} all-reduce-done(%ar)\n"
        "  ROOT %t = (f32[64], f32[64]) tuple(%done, %f)",
        "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
        "  ROOT %s = f32[] add(%a, %b)\n}\n\n"
        "%neg (p: f32[64]) -> f32[64] {\n  %p = f32[64]{0} parameter(0)\n  ROOT %n = f32[64]{0} negate(%p)\n}\n",
    )
    listed = kernels.kernel_list(text)
    assert [(k.name, k.category, k.kind) for k in listed] == [("ar", "collective", "all-reduce"),
                                                            ("f", "fusion", "kLoop")]
    start = listed[0]
    assert (start.done, start.overlaps, start.groups, start.group_size) == ("done", ("f",), ((0, 1), (2, 3)), 2)
    assert start.bytes == 2 * 4 * 64  # the operand, and the reduced buffer the done returns
    assert listed[1].bytes == 2 * 4 * 64 and listed[1].op_name == "jit(f)/neg"
    assert kernels.summarize_kernels(listed).async_pairs[0].overlaps == ("f",)
    assert tuple(kernels.Kernel.from_dict(k.to_dict()) for k in listed) == listed


@pytest.mark.parametrize("bad", [None, "not hlo", 3])
def test_bad_input_is_an_input_error(bad):
    with pytest.raises(InputError):
        kernels.library_flops(bad)
    with pytest.raises(InputError):
        kernels.kernel_list(bad)
    with pytest.raises(InputError):
        kernels.module_costs(bad)
