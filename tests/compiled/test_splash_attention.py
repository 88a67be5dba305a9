"""A TPU target's fused attention: jax's Pallas splash attention kernels, compiled deviceless.

The zoo's GPT with ``attention="fused"`` compiled for a TPU v5e runs its attention in three
Mosaic kernels (``tpu_custom_call``: the forward, ``dq`` and ``dkv``), whose work libtpu's
cost analysis leaves out. Each is priced by `xla_cost.count.attention`'s convention (every
T x T pair, the backward's products once each), in the compiled program and in the jaxpr alike;
a kernel mapped over a mesh (``shard_map``) counts on every device it runs on.
"""

from __future__ import annotations

import pytest

from xla_cost import plugins

needs_libtpu = pytest.mark.skipif(not plugins.has_libtpu(), reason="the tpu extra (libtpu) is not installed")

B, T, N, H, D, V = 1, 256, 2, 128, 128, 256  # batch, context, heads of H (MaxText's widths), width, vocabulary
A = N * H  # the attention's width
F = 4 * D  # the MLP's hidden width (the GPT's default)
PAIRS = B * N * T * T  # query-key pairs, every head (the causal mask's skipped half counted)
SOFTMAX = 5 * PAIRS  # xla_cost.count.attention.SOFTMAX_FLOP per pair, forward and backward
FORWARD_KERNEL = 2 * (2 * PAIRS * H) + SOFTMAX  # Q K^T and P V, 2 FLOP per multiply-add
DQ_KERNEL = 2 * PAIRS * H  # dQ = dS K
DKV_KERNEL = 3 * (2 * PAIRS * H) + SOFTMAX  # dK = dS^T Q, dV = P^T dO, dP = dO V^T and the softmax's gradient
PRODUCTS = (2 * T * D * 3 * A + 2 * T * A * D + 2 * (2 * T * D * F)  # c_attn, c_proj, the MLP
            + 2 * (2 * T * T * A) + 2 * T * D * V)  # the attention's two products, the tied head
"""The forward's products of the one-block GPT (B = 1); its gradient runs each three times."""


def _gpt(attention: str):
    from xla_cost.zoo.gpt import GPT

    return GPT(vocab_size=V, seq_len=T, n_layer=1, n_head=N, head_dim=H, d_model=D, attention=attention,
               dtype="bfloat16")


@pytest.fixture(scope="module")
def v5e_grad():
    import jax
    import jax.numpy as jnp
    import optax

    from xla_cost.compiled import targets, xla
    from xla_cost.timemodel import devices

    model = _gpt("fused")
    target = devices.target("tpu-v5e")
    with targets.use(target):
        placed = jax.sharding.SingleDeviceSharding(target.devices(1)[0])
        tokens = jax.ShapeDtypeStruct((B, T), jnp.int32, sharding=placed)
        params = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((B, T), jnp.int32))
        params = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype, sharding=placed), params)

        def grad(p, t):
            return jax.grad(lambda p: optax.softmax_cross_entropy_with_integer_labels(model.apply(p, t), t).mean())(p)

        return xla.compile_phase(grad, (params, tokens), compiler_options=xla.COMPILER_OPTIONS, executable=False)


@needs_libtpu
def test_the_splash_kernels_are_priced_by_the_attention_formula(v5e_grad):
    from xla_cost.compiled import products

    found = v5e_grad.kernel_list
    splash = {k.name.split(".")[0]: (k.flops, k.product.flops) for k in found if k.kind == products.PALLAS_TARGET}
    assert splash == {"splash_mha_fwd_residuals": (FORWARD_KERNEL, FORWARD_KERNEL - SOFTMAX),
                      "splash_mha_dq_no_residuals": (DQ_KERNEL, DQ_KERNEL),
                      "splash_mha_dkv_no_residuals": (DKV_KERNEL, DKV_KERNEL - SOFTMAX)}
    assert not any("tpu_custom_call" in reason for reason in v5e_grad.costs.unknown_reasons)
    # every product on the MXU, the kernels' among them: three times the forward's
    assert sum(k.product.flops * k.executions for k in found if k.product is not None) == 3 * PRODUCTS
    assert v5e_grad.costs.flops >= 3 * PRODUCTS + 2 * SOFTMAX  # libtpu's analysis (no kernel's) plus the kernels'


@needs_libtpu
def test_a_kernel_mapped_over_the_mesh_counts_on_every_device():
    import jax
    import jax.numpy as jnp

    from xla_cost.compiled import targets
    from xla_cost.count.interpret import count_function
    from xla_cost.parallel.sharding import ShardingPlan
    from xla_cost.timemodel import devices
    from xla_cost.zoo import _transformer

    target = devices.target("tpu-v5e")
    batch = 4  # one sequence on each of 4 chips
    with targets.use(target):
        mesh = jax.sharding.Mesh(target.devices(4), ("fsdp",))
        plan = ShardingPlan(mesh, {"fsdp": 4}, {}, {})
        q = jax.ShapeDtypeStruct((batch, T, N, H), jnp.bfloat16)
        with plan.constraints(batch):
            counted = count_function(lambda q, k, v: _transformer.splash_attention(q, k, v), q, q, q)
    attention = [e for e in counted.equations if e.primitive == "pallas_call"]
    assert sum(e.cost.flops for e in attention) == batch * FORWARD_KERNEL  # the step's, not one chip's
    assert not counted.unsupported


@pytest.mark.parametrize("causal, window", [(True, 64), (False, 64), (False, 192)])
def test_a_splash_local_mask_keeps_the_pairs_its_window_allows(causal, window):
    # a LocalMask of W keys before each query (and W - 1 after it where not causal), named in the kernels'
    # scope (splash_local_mask_<left>_<right>): attention_flops="causal" keeps (A - D/2)/T² of the products,
    # as a dense mask's (docs/memory.md); traced without a TPU (the jaxpr alone, no compile)
    from fractions import Fraction

    import jax
    import jax.numpy as jnp

    from xla_cost.analysis import model_flops
    from xla_cost.count.interpret import count_function
    from xla_cost.zoo import _transformer

    q = jax.ShapeDtypeStruct((B, T, N, H), jnp.bfloat16)

    def loss(q, k, v):
        return _transformer.splash_attention(q, k, v, causal=causal, window=window).astype(jnp.float32).sum()

    counted = count_function(jax.grad(loss, argnums=(0, 1, 2)), q, q, q)
    kernels = FORWARD_KERNEL + DQ_KERNEL + DKV_KERNEL - 2 * SOFTMAX  # the products, forward and backward
    assert sum(e.cost.causal for e in counted.equations if e.primitive == "pallas_call") == kernels
    if causal:  # keys i - W + 1 .. i: every query's W, less those before position 0; its diagonal bounded
        allowed, diagonal = T * window - window * (window - 1) // 2, T
        words = f"sliding window of {window} keys ({T} x {T})"
    else:  # keys i - W + 1 .. i + W - 1, less those past either end (W <= T); no diagonal bounded
        allowed, diagonal = T * (2 * window - 1) - window * (window - 1), 0
        words = f"a mask allowing {allowed:,} of {T * T:,} pairs (kept {Fraction(allowed, T * T)})"
    kept = kernels * (2 * allowed - diagonal) // (2 * T * T)  # (A - D/2) / T²
    assert kernels - kernels // 2 - model_flops.window_flops(counted) == kept
    assert model_flops.causal_windows({"train_step": counted}) == {words: (kernels, kept)}
    beyond = kernels // 2 - kept  # left out beyond half: negative where the window keeps more than half
    note = model_flops.causal_note((kernels, 0, 0, beyond), kernels, {words: (kernels, kept)})
    assert (f"and {beyond:,} more that a sliding window masks" if beyond > 0 else
            f"less {-beyond:,} that a two-sided window keeps beyond half") in note
    assert f"{words}: {kept:,} FLOP kept of {kernels:,}" in note
