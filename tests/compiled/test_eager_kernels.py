"""The program an eager framework runs: compiled unfused, one kernel per call of the model's code (issue 51).

Megatron-LM of 2019 ran its layers in eager PyTorch, each elementwise
operation its own kernel (a0368ddf, mpu/transformer.py lines 117-144), where
XLA fuses them. `xla_cost.compiled.xla.EAGER_OPTIONS` compiles a program with
XLA's fusion passes off: each operation a kernel of its own
(``wrapped_<opcode>``, the GPU compiler's fusion wrapper), broadcasts and
reshapes among them, which PyTorch takes as views; `xla_cost.compiled.eager.eager_kernels`
leaves those out and makes the operations of one call of the model's code
(one ``stack_frame_id``, one pass) one kernel, as PyTorch's softmax is.
Tiny functions compiled for a V100 (deviceless, well under a second each).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from xla_cost import plugins
from xla_cost.compiled import eager, kernels, xla
from xla_cost.timemodel.devices import target

ROWS, COLS = 64, 256
F32 = 4  # bytes per element
N = ROWS * COLS


def block(x, y):
    """Three calls, one elementwise operation each (``2.0`` a broadcast scalar: a view)."""
    t = x * y
    u = t + y
    return u * 2.0


def softmax(x):
    """One call: XLA's softmax is a max, a subtraction, an exponential, a sum and a division."""
    return jax.nn.softmax(x, axis=-1)


def dropout(x, key):
    """Three calls: the mask drawn (jax.random.bernoulli: functions jax traced nested in the call,
    jit(_bernoulli), jit(_uniform), the threefry hash, each of their operations a kernel of its own
    unfused, writing 32-bit words of the whole shape), the scaling and the select."""
    return jnp.where(jax.random.bernoulli(key, 0.9, x.shape), x / 0.9, 0.0)


@pytest.fixture(scope="module")
def compiled():
    if plugins.cuda_plugin() is None:
        pytest.skip("the gpu extra (jax's CUDA plugin) is not installed")
    placement = target("v100-32gb").placement()
    spec = jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32, sharding=placement)

    def text(fn, arguments, options):
        return jax.jit(fn).lower(*arguments).compile(compiler_options=dict(options)).as_text()

    key = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=placement)  # a threefry key's data
    return {(name, fused): text(fn, arguments, xla.COMPILER_OPTIONS if fused else xla.EAGER_OPTIONS)
            for name, fn, arguments in (("block", block, (spec, spec)), ("softmax", softmax, (spec,)),
                                        ("dropout", lambda x, k: dropout(x, jax.random.wrap_key_data(k)), (spec, key)))
            for fused in (True, False)}


def _eager(text):
    return eager.eager_kernels(text, kernels.kernel_list(text))


def _computing(found):
    return [k for k in found if k.category != "collective"]


def test_unfused_each_elementwise_operation_is_a_kernel_and_moves_more_bytes(compiled):
    fused = _computing(kernels.kernel_list(compiled["block", True]))
    launched = _computing(_eager(compiled["block", False]))
    # fused: one kernel reads x and y and writes the result
    assert [k.bytes for k in fused] == [3 * N * F32]
    # eager: t = x * y reads 2 arrays and writes 1, u = t + y reads 2 and writes 1, u * 2.0 reads 1 and writes 1
    # (the scalar's broadcast, a view in PyTorch, launches nothing)
    assert len(launched) == 3  # the block's three elementwise operations
    assert sum(k.bytes for k in launched) == (3 + 3 + 2) * N * F32
    assert sum(k.bytes for k in launched) > sum(k.bytes for k in fused)
    # compiled unfused and listed as XLA runs it, the broadcast is a kernel of its own
    assert any("broadcast" in k.name for k in kernels.kernel_list(compiled["block", False]))


def test_one_call_is_one_kernel_where_xla_decomposes_it(compiled):
    unfused = [k for k in _computing(kernels.kernel_list(compiled["softmax", False]))
               if "broadcast" not in k.name]
    # max, subtract, exp, sum, divide: five kernels as XLA runs it unfused
    assert len(unfused) >= 5, [k.name for k in unfused]
    launched = _computing(_eager(compiled["softmax", False]))
    # PyTorch's softmax: one kernel, x read and the probabilities written
    assert [k.bytes for k in launched] == [2 * N * F32]


def test_a_drawn_mask_is_one_kernel_whatever_jax_nests_in_the_call(compiled):
    unfused = _computing(kernels.kernel_list(compiled["dropout", False]))
    assert len(unfused) >= 8, [k.name for k in unfused]  # the threefry hash's operations, the compare, ...
    launched = _computing(_eager(compiled["dropout", False]))
    # the mask drawn in one kernel, as PyTorch draws its bits inside the kernel that uses them: the key's 2
    # words read, one byte an element written; x / 0.9 reads and writes N floats; the select reads the mask
    # and the scaled x and writes N floats
    assert [k.bytes for k in launched] == [2 * 4 + N, 2 * N * F32, N + 2 * N * F32]


def test_a_call_scope_ends_where_jax_traced_a_function_inside_the_call():
    assert eager.call_scope("jit(grad)/jvp(GPT)/h_0/attn/jit(_bernoulli)/jit(_uniform)/threefry2x32/add") \
        == "jit(grad)/jvp(GPT)/h_0/attn"
    assert eager.call_scope("jit(grad)/transpose(jvp(GPT))/h_0/attn/mul") == "jit(grad)/transpose(jvp(GPT))/h_0/attn"
    assert eager.call_scope("jit(forward)/add") == "jit(forward)"


def test_the_eager_options_turn_every_fusion_pass_off():
    options = dict(xla.EAGER_OPTIONS)
    assert set(options.pop("xla_disable_hlo_passes").split(",")) == set(xla.EAGER_FUSION_PASSES)
    assert options == dict(xla.COMPILER_OPTIONS)


def test_unfused_phases_need_a_target_and_known_names():
    from xla_cost.analysis.options import AnalysisOptions
    from xla_cost.errors import InputError

    if plugins.cuda_plugin() is not None:  # a target's compiler is its plugin
        AnalysisOptions(unfused=("forward", "grad"), target="v100-32gb").check()
    for bad, said in ((("grad",), "only with a target"), (("backward",), "a tuple of phases"),
                      ("grad", "a tuple of phases")):
        with pytest.raises(InputError, match=said) as err:
            AnalysisOptions(unfused=bad).check()
        assert "\n" not in str(err.value)
