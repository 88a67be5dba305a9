"""A TPU program's text where jaxlib cannot read it back (`xla_cost.compiled.printed`).

libtpu 0.0.52 offloads a GPT's scatters to a v5p's SparseCores as an
``async-start()`` whose ``async-update`` hands it the scatter's operands;
jaxlib's XLA declares ``async-update`` with one operand and ``as_text()``
failed ("RET_CHECK ... async-update instruction should have 1 operands but
sees 4"): every GPT compiled for a v5p or v6e was refused. The program is read
from libtpu's own print of it instead.
"""

from __future__ import annotations

import os

import pytest

from xla_cost import plugins
from xla_cost.compiled import kernels, printed

needs_libtpu = pytest.mark.skipif(not plugins.has_libtpu(), reason="the tpu extra (libtpu) is not installed")

V, T, D, HEADS = 256, 64, 64, 2  # a one-layer GPT: vocabulary, context, width, heads


@pytest.fixture(scope="module")
def v5p_grad():
    import jax
    import jax.numpy as jnp
    import optax

    from xla_cost.compiled import targets, xla
    from xla_cost.timemodel import devices
    from xla_cost.zoo.gpt import GPT

    model = GPT(vocab_size=V, seq_len=T, n_layer=1, n_head=HEADS, d_model=D)
    target = devices.target("tpu-v5p")
    with targets.use(target):
        placed = jax.sharding.SingleDeviceSharding(target.devices(1)[0])
        tokens = jax.ShapeDtypeStruct((1, T), jnp.int32, sharding=placed)
        params = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, T), jnp.int32))
        params = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype, sharding=placed), params)

        def grad(p, t):
            return jax.grad(lambda p: optax.softmax_cross_entropy_with_integer_labels(model.apply(p, t), t).mean())(p)

        return xla.compile_phase(grad, (params, tokens), compiler_options=xla.COMPILER_OPTIONS, executable=False,
                                 liveness=True)


@needs_libtpu
def test_a_gpt_compiled_for_a_tpu_v5p_gives_its_figures(v5p_grad):
    # the products of one block and the tied head, forward: c_attn 2T d 3d, c_proj 2T d d, the MLP
    # 2 x 2T d 4d (24 T d^2), scores and values 2 x 2 T^2 d, the head 2 T d V; the gradient adds the
    # input and the weight gradient of each (every product's input depends on the parameters): 3x
    forward = 24 * T * D**2 + 4 * T**2 * D + 2 * T * D * V
    found = v5p_grad.kernel_list
    assert found and sum(k.product.flops * k.executions for k in found if k.product is not None) == 3 * forward
    assert v5p_grad.costs.flops >= 3 * forward  # libtpu's cost analysis: the products and the elementwise rest
    assert v5p_grad.liveness is not None and v5p_grad.liveness.peak_bytes > 0
    assert v5p_grad.memory.temp_bytes is not None


OFFLOADED = """HloModule offloaded, is_scheduled=true

%offloaded_scatter (p0: f32[64,256], p1: s32[64], p2: f32[64]) -> f32[64,256] {
  %p0 = f32[64,256]{1,0} parameter(0)
  %p1 = s32[64]{0} parameter(1)
  %p2 = f32[64]{0} parameter(2)
  ROOT %scatter = f32[64,256]{1,0} custom-call(%p0, %p1, %p2), custom_call_target="SparseCoreScatter"
}, execution_thread="sparsecore"

ENTRY %main (x: f32[64,256], i: s32[64], u: f32[64]) -> f32[64,256] {
  %x = f32[64,256]{1,0} parameter(0)
  %i = s32[64]{0} parameter(1)
  %u = f32[64]{0} parameter(2)
  %start = ((), (), s32[8]{0}) async-start(), async_execution_thread="sparsecore", calls=%offloaded_scatter
  %update = ((f32[64,256]{1,0}, s32[64]{0}, f32[64]{0}), f32[64,256]{1,0}, s32[8]{0}) async-update(%start, %x, %i, %u)
  ROOT %done = f32[64,256]{1,0} async-done(%update)
}
"""


def test_an_offload_started_without_operands_reads_those_its_update_hands_it():
    # libtpu's queued SparseCore offload (the form of its v5p GPT programs): the scatter's buffer
    # [64, 256] f32, its 64 int32 indices and 64 f32 updates reach it through the async-update
    (kernel,) = kernels.kernel_list(OFFLOADED)
    assert (kernel.name, kernel.done, kernel.asynchronous) == ("start", "done", True)
    assert kernel.bytes == 64 * 256 * 4 + 64 * 4 + 64 * 4 + 64 * 256 * 4  # operands read, result written


def test_a_print_with_an_async_update_of_several_operands_is_one_jaxlib_cannot_rebuild():
    assert printed.unreadable_by_jaxlib(OFFLOADED)  # async-update(%start, %x, %i, %u): 4 operands, XLA declares 1
    one = OFFLOADED.replace("async-update(%start, %x, %i, %u)", "async-update(%start)")
    assert not printed.unreadable_by_jaxlib(one)

    class Refusing:
        def as_text(self):
            raise AssertionError("as_text is not asked for a print jaxlib cannot rebuild (its refusal is logged)")

    assert printed.program_text(Refusing(), OFFLOADED) == OFFLOADED


class _Unreadable:
    def as_text(self):
        raise RuntimeError("INTERNAL: RET_CHECK failure async-update instruction should have 1 operands but sees 4")


def test_the_compilers_print_is_read_only_where_as_text_fails():
    assert printed.program_text(_Unreadable(), "HloModule m") == "HloModule m"
    with pytest.raises(RuntimeError, match="RET_CHECK"):
        printed.program_text(_Unreadable(), None)  # nothing printed: as_text's own error

    class Readable:
        def as_text(self):
            return "HloModule jaxlib"

    assert printed.program_text(Readable(), "HloModule printed") == "HloModule jaxlib"


def test_only_a_tpu_targets_compile_is_dumped():
    from xla_cost.timemodel import devices

    for name, dumped in (("h100", False), ("tpu-v5p", True)):
        with printed.compiler_dump(devices.target(name)) as dump:
            assert (dump is not None) == dumped
            if dump is not None:
                assert dump.options["xla_dump_to"] == dump.directory and dump.read() is None  # nothing printed yet
        if dump is not None:
            assert not os.path.exists(dump.directory)  # the compile's print goes with its context
    with printed.compiler_dump(None) as dump:
        assert dump is None
