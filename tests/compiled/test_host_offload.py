"""Activations offloaded to the host's memory by a remat policy, compiled deviceless for a TPU v6e.

MaxText's ``remat_policy: custom`` (the Trillium recipes' Llama 3.1 and Mixtral runs) moves the
decoder layer's input and the attention's projections to the host after the forward pass and
back for the backward pass (``jax.checkpoint_policies.save_and_offload_only_these_names``,
``pinned_host``). The zoo's blocks name those tensors as MaxText does, and libtpu puts the
scanned stacks of the offloaded names in the host's memory space (``S(5)``): each layer's row is
written there by a ``dynamic-update-slice-start`` and read back by a ``dynamic-slice-start``.
Each such kernel moves its row over the host link (`Kernel.host_bytes`), its bytes in the HBM
its row only (never the whole stack), and the time model prices the link's time behind the
kernels XLA scheduled beside the transfers.
"""

from __future__ import annotations

import pytest

from xla_cost import plugins

needs_libtpu = pytest.mark.skipif(not plugins.has_libtpu(), reason="the tpu extra (libtpu) is not installed")

B, T, D, N, K, H, F, L, V = 1, 256, 256, 2, 1, 128, 512, 2, 512  # batch, context, width, heads, kv heads, head, MLP, layers, vocabulary
OFFLOADED = ("decoder_layer_input", "query_proj", "key_proj")
ROW = {"decoder_layer_input": B * T * D * 2,  # a layer's input, bfloat16
       "query_proj": B * T * N * H * 2,  # its queries after the rotary embedding
       "key_proj": B * T * K * H * 2}  # its keys
"""Bytes of one layer's row of each offloaded tensor's stack."""
MOVED = 2 * L * sum(ROW.values())
"""Over the host link in one step: every layer's row written after the forward pass and read back
for the backward pass."""


@pytest.fixture(scope="module")
def v6e_grad():
    import jax
    import jax.numpy as jnp
    import optax

    from xla_cost.compiled import targets, xla
    from xla_cost.step.remat import custom_policy
    from xla_cost.timemodel import devices
    from xla_cost.zoo.llama import Llama

    policy = custom_policy({name: "offload" for name in OFFLOADED})
    model = Llama(vocab_size=V, seq_len=T, n_layer=L, n_head=N, n_kv_head=K, head_dim=H, d_model=D, d_ff=F,
                  remat=policy, dtype=jnp.bfloat16)
    target = devices.target("tpu-v6e")
    with targets.use(target):
        placed = jax.sharding.SingleDeviceSharding(target.devices(1)[0])
        tokens = jax.ShapeDtypeStruct((B, T), jnp.int32, sharding=placed)
        params = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((B, T), jnp.int32))
        params = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype, sharding=placed), params)

        def grad(p, t):
            return jax.grad(lambda p: optax.softmax_cross_entropy_with_integer_labels(model.apply(p, t), t).mean())(p)

        return xla.compile_phase(grad, (params, tokens), compiler_options=xla.COMPILER_OPTIONS, executable=False)


@needs_libtpu
def test_the_offloaded_rows_cross_the_host_link(v6e_grad):
    moving = [k for k in v6e_grad.kernel_list if k.host_bytes]
    assert {k.opcode for k in moving} == {"dynamic-update-slice-start", "dynamic-slice-start"}
    assert sum(k.host_bytes * k.executions for k in moving) == MOVED
    rows = sorted(ROW.values())
    for k in moving:  # a row each, in the HBM too (the stack it belongs to is in the host's memory)
        assert k.host_bytes in rows and k.host_bytes <= k.bytes <= k.host_bytes + 64  # the row and its indices
        assert k.asynchronous and k.overlaps


@needs_libtpu
def test_the_link_is_priced_behind_the_kernels_beside_it(v6e_grad):
    from xla_cost.timemodel import calibration, devices, kernel_time

    priced = kernel_time.price_kernels(v6e_grad.kernel_list, "tpu-v6e", calibration.constants())
    link = devices.host_link("tpu-v6e")
    assert link is not None and link.bandwidth == 32e9  # Austin et al. 2025: 'Trillium (TPU v6e) has 32GB/s'
    assert priced.host_bytes == MOVED and priced.host_link == link.bandwidth
    assert 0 <= priced.host <= MOVED / link.bandwidth  # never more than the link's time, less what is hidden
    assert priced.seconds == pytest.approx(priced.matmul + priced.memory + priced.launch + priced.host)
    # on a device without a host link in the registry the transfers are unknown, not free: said, not priced
    assert devices.host_link("h100") is None


def test_a_custom_policy_names_its_tensors_and_places():
    from xla_cost.errors import InputError
    from xla_cost.step import remat

    policy = remat.custom_policy({"decoder_layer_input": "offload", "out_proj": "device"})
    assert policy == "custom:decoder_layer_input=offload,out_proj=device"
    assert remat.named_tensors(policy) == {"decoder_layer_input": "offload", "out_proj": "device"}
    assert remat.resolve(policy) == policy and remat.policy(policy) is not None
    for bad in ("custom:query=offload", "custom:out_proj=host", "custom:", "custom:out_proj=device,out_proj=offload"):
        with pytest.raises(InputError):
            remat.check(bad)


L2, ROWS, WIDTH = 4, 1024, 512  # layers of a stack, one row's rows and width
STACK = f"bf16[{L2},{ROWS},{WIDTH}]{{2,1,0:T(8,128)(2,1)S(5)}}"  # in the host's memory
ROW_HBM = f"bf16[1,{ROWS},{WIDTH}]{{2,1,0:T(8,128)(2,1)}}"
ROW_BYTES = ROWS * WIDTH * 2  # one layer's row, bfloat16
ASYNC_OFFLOAD = "\n".join([
    "HloModule offload",
    "",
    f"%async_computation (p0: bf16[{L2},{ROWS},{WIDTH}], p1: bf16[1,{ROWS},{WIDTH}], p2: s32[], p3: s32[], "
    f"p4: s32[]) -> bf16[{L2},{ROWS},{WIDTH}] {{",
    f"  %p0 = {STACK} parameter(0)",
    f"  %p1 = {ROW_HBM} parameter(1)",
    "  %p2 = s32[]{:T(128)} parameter(2)",
    "  %p3 = s32[]{:T(128)} parameter(3)",
    "  %p4 = s32[]{:T(128)} parameter(4)",
    f"  ROOT %dus = {STACK} dynamic-update-slice(%p0, %p1, %p2, %p3, %p4)",
    "}",
    "",
    f"ENTRY %main (stack: bf16[{L2},{ROWS},{WIDTH}], row: bf16[1,{ROWS},{WIDTH}], i: s32[]) "
    f"-> bf16[{L2},{ROWS},{WIDTH}] {{",
    f"  %stack = {STACK} parameter(0)",
    f"  %row = {ROW_HBM} parameter(1)",
    "  %i = s32[]{:T(128)} parameter(2)",
    "  %zero = s32[]{:T(128)} constant(0)",
    f"  %dynamic-update-slice-start = (({STACK}, {ROW_HBM}, s32[]{{:T(128)}}, s32[]{{:T(128)}}, s32[]{{:T(128)}}), "
    f"{STACK}, u32[]{{:S(2)}}) async-start(%stack, %row, %i, %zero, %zero), calls=%async_computation",
    f"  ROOT %dynamic-update-slice-done = {STACK} async-done(%dynamic-update-slice-start)",
    "}",
])
"""libtpu's form in a sharded program (a deviceless v6e compile of maxtext-llama3.1-8b-v6e-256's grad): the
row's write into the stack in the host's memory wrapped in an ``async-start``."""


def test_an_offload_wrapped_in_an_async_start_moves_its_row():
    from xla_cost.compiled import kernels

    (start,) = kernels.kernel_list(ASYNC_OFFLOAD)
    assert start.opcode == "async-start" and start.host_bytes == ROW_BYTES  # the row, not the stack
    assert start.bytes == ROW_BYTES + 3 * 4  # in the HBM: the row and its three indices
