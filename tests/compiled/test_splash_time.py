"""A splash attention kernel's time priced from the products it runs, its count unchanged (issue 51).

jax's Pallas splash kernels for a TPU skip the block pairs their mask leaves out (a causal mask
over ``n x n`` blocks computes ``n (n + 1) / 2`` of them) and recompute the scores and ``dP`` in
the backward (per computed block pair: ``fwd`` 2 products, ``dq`` 3, ``dkv`` 4, with ``dQ`` fused 5;
splash_attention_kernel.py at jax 0.10.2, lines 768, 822, 1367, 1391, 1402, 1778, 1799, 1803,
1814, 1820). Their FLOP stay counted by `xla_cost.count.attention`'s convention (every pair, the
backward's products once each). The kernels are written by hand as libtpu prints them: the mask
named in the ``op_name`` (the zoo's `jax.named_scope`), the blocks in ``kernel_metadata``.
"""

from __future__ import annotations

import pytest

from xla_cost.compiled import hlo, products
from xla_cost.compiled.kernel_summary import summarize_kernels
from xla_cost.compiled.kernels import Kernel
from xla_cost.timemodel import kernel_time
from xla_cost.timemodel.calibration import Calibration
from xla_cost.timemodel.devices import matrix_units

B, N, T, H = 1, 2, 2048, 128  # batch, heads, context, head width
BLOCK = 512  # MaxText's sa_block_* (the zoo's SPLASH_BLOCK)
BLOCKS = T // BLOCK  # 4 query blocks, 4 key blocks
CAUSAL = BLOCKS * (BLOCKS + 1) // 2  # 10 of the 16 block pairs computed
PAIRS = B * N * T * T  # every query-key pair, the causal mask's skipped ones too
BLOCK_PRODUCT = 2 * BLOCK * BLOCK * H  # one [512, 128] x [128, 512] product, 2 FLOP per multiply-add
V5E_PEAK = 197e12  # bfloat16 (Cloud TPU v5e documentation)
CONSTANTS = Calibration(matmul=0.6, memory=0.75, launch=5e-6, depth=128.0, host=1e-3)

_METADATA = ('frontend_attributes={kernel_metadata={"xprof_metadata":"{\\"block_q\\": 512, \\"block_kv\\": 512, '
             '\\"block_kv_compute\\": 512, \\"block_q_dkv\\": 512, \\"block_kv_dkv\\": 512, '
             '\\"block_kv_dkv_compute\\": 512, \\"block_q_dq\\": 512, \\"block_kv_dq\\": 512, '
             '\\"use_fused_bwd_kernel\\": false}"}}')
_SHAPES = {"mask_next": "s8[1,4,4]{2,1,0}", "block_mask": "s8[1,4,4]{2,1,0}", "q": "bf16[2,2048,128]{2,1,0}",
           "k": "bf16[2,2048,128]{2,1,0}", "v": "bf16[2,2048,128]{2,1,0}", "iota": "s32[2048,128]{1,0}",
           "lse": "f32[2,1,2048]{2,1,0}", "do": "bf16[2,2048,128]{2,1,0}", "di": "f32[2,1,2048]{2,1,0}"}


def _kernel(phase: str, scope: str, metadata: bool = True) -> products.Product:
    """A splash kernel of ``phase`` (its operands and results as jax 0.10's kernels take them)."""
    name, operands, result = {
        "fwd": ("splash_mha_fwd_residuals", "%mask_next, %block_mask, %q, %k, %v, %iota",
                "(bf16[2,2048,128]{2,1,0}, f32[2,2048,128]{2,1,0})"),
        "dq": ("splash_mha_dq_no_residuals", "%mask_next, %block_mask, %q, %k, %v, %lse, %do, %di, %iota",
               "(f32[512,128]{1,0}, bf16[2,2048,128]{2,1,0})"),
        "dkv": ("splash_mha_dkv_no_residuals", "%mask_next, %block_mask, %q, %k, %v, %lse, %do, %di, %iota",
                "(bf16[2,2048,128]{2,1,0}, bf16[2,2048,128]{2,1,0})"),
    }[phase]
    line = (f'%{name}.1 = {result} custom-call({operands}), custom_call_target="tpu_custom_call", '
            + (_METADATA + ", " if metadata else "")
            + f'metadata={{op_name="jit(grad)/h_0/attn/{scope}vmap(static_sparsity_splash)/{name}/pallas_call"}}')
    instruction = hlo.parse_instruction(line)
    assert instruction is not None
    found = products.kernel_product(hlo.Module({}, None, 1, 1), instruction, _SHAPES)
    assert found is not None
    return found


def _seconds(product: products.Product) -> float:
    kernel = Kernel("splash", "library", products.PALLAS_TARGET, "custom-call", "main", "", 0, 1, product=product)
    return kernel_time.price_table(kernel_time.kernel_table([kernel]), "tpu-v5e", CONSTANTS).matmul


@pytest.mark.parametrize("phase, run, counted", [
    ("fwd", 2, 2),  # Q K^T, P V; counted: the same
    ("dq", 3, 1),  # Q K^T, dP, dQ recomputed; counted: dQ
    ("dkv", 4, 3),  # K Q^T, dV, dP, dK; counted: dK, dV, dP
])
def test_a_causal_splash_kernel_is_priced_at_the_block_pairs_it_computes(phase, run, counted):
    product = _kernel(phase, "splash_causal_mask/")
    assert product.flops == counted * 2 * PAIRS * H  # the count: every pair, unchanged
    executed = CAUSAL * run * BLOCK_PRODUCT * B * N  # n(n+1)/2 block pairs x products run, every head
    assert product.executed == executed and product.executed_note == ""
    units, side = matrix_units("tpu-v5e")
    share = float(kernel_time.shape_efficiency(B * N, T, T, H, units, side, CONSTANTS.depth))
    assert _seconds(product) == pytest.approx(executed / (V5E_PEAK * CONSTANTS.matmul * share), rel=1e-9)


def test_a_splash_kernel_of_unknown_mask_is_priced_at_every_pair_and_says_so():
    product = _kernel("dq", "")  # no scope names the mask: every block pair, an upper bound
    assert product.executed == BLOCKS * BLOCKS * 3 * BLOCK_PRODUCT * B * N
    assert "upper bound" in product.executed_note and "mask unknown" in product.executed_note
    unblocked = _kernel("fwd", "splash_causal_mask/", metadata=False)  # no block sizes: every pair too
    assert unblocked.executed == BLOCKS * BLOCKS * 2 * BLOCK_PRODUCT * B * N and "upper bound" in unblocked.executed_note
    assert products.Product.from_dict(product.to_dict()) == product
    kernel = Kernel("splash_mha_dq_no_residuals.1", "library", products.PALLAS_TARGET, "custom-call", "main", "", 0,
                    1, product=product)
    assert summarize_kernels([kernel]).unknown == (f"splash_mha_dq_no_residuals.1: {product.executed_note}",)
