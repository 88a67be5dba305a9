"""Fused attention (issue 50): ``attention="fused"`` is cuDNN's flash attention on a GPU target.

A tiny Llama (``xla_cost.zoo``'s llama family) is analysed for a deviceless H100
twice, with its attention written out (``dense``) and as
``jax.nn.dot_product_attention`` with the target's kernel (``fused``): the fused
program runs one ``__cudnn$fmha*`` custom call each way, its FLOP are the dense
model's within 1% (every ``T x T`` pair counted in both, a causal mask's skipped
half too: `xla_cost.count.attention`), and its temporaries lack the ``T x T``
scores the dense program writes out. The jaxpr rule of the primitive that
``implementation="cudnn"`` binds counts what the compiled custom call is priced at.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost.analysis import programs
from xla_cost.compiled import targets, xla
from xla_cost.count import attention, registry
from xla_cost.count.interpret import count_function
from xla_cost.timemodel.devices import target
from xla_cost.zoo import build_model, example_inputs

B = 1
CONFIG = dict(vocab_size=256, seq_len=1024, n_layer=2, n_head=4, n_kv_head=2, d_model=256, d_ff=512,
              scan_layers=True)  # the layers in a loop, the fused call in its body (run L times)
V, T, L, N, K, D, F = 256, 1024, 2, 4, 2, 256, 512
H = D // N  # head dimension: 64
SCORES = B * N * T * T  # query-key pairs of one layer, every query head
PRODUCTS = 2 * SCORES * (H + H)  # Q K^T and P V, 2 FLOP per multiply-add
SOFTMAX = attention.SOFTMAX_FLOP * SCORES  # scale, row max, subtract, row sum, normalise
FORWARD = (
    L * (2 * B * T * D * (N * H + 2 * K * H)  # q_proj, k_proj, v_proj
         + 2 * B * T * (N * H) * D  # o_proj
         + 3 * 2 * B * T * D * F  # gate, up, down (SwiGLU)
         + PRODUCTS + SOFTMAX)
    + 2 * B * T * D * V  # the untied head
)
"""The forward pass's FLOP in closed form: its matrix products and the attention's
softmax (the norms, rotary embeddings, SiLU and the loss add well under 1%)."""
SCORES_BYTES = SCORES * 2  # the dense model's scores, bfloat16: its products' output (computed further in float32)


@pytest.fixture(scope="module")
def fused() -> xla_cost.Report:
    return xla_cost.analyze(
        build_model("llama3-8b", attention="fused", dtype="bfloat16", **CONFIG),
        example_inputs("llama3-8b", B, **CONFIG), optimizer="sgd", dtype="bfloat16", target="h100",
    )


@pytest.fixture(scope="module")
def dense() -> xla.CompiledPhase:
    """The dense model's forward program for the H100 alone (its layers unrolled: the
    compiled FLOP whole, not a loop's body once); the same arithmetic as the scanned one."""
    config = dict(CONFIG, scan_layers=False)
    model = build_model("llama3-8b", attention="dense", dtype="bfloat16", **config)
    with targets.use(target("h100")):
        workload, _ = xla_cost.build_workload(model, example_inputs("llama3-8b", B, **config), optimizer="sgd")
        program = jax.jit(workload.phase_fn("forward"), **programs.placement())
        lowered = program.lower(*workload.phase_args("forward"))
        return xla.compile_phase(lowered, compiler_options=xla.COMPILER_OPTIONS, executable=False)


def _calls(report: xla_cost.Report, phase: str) -> dict[str, list[int | None]]:
    """Each fused attention call's FLOP, once per run."""
    found: dict[str, list[int | None]] = {}
    for kernel in report.phases[phase].kernel_list or ():
        if kernel.category == "library" and kernel.kind.startswith("__cudnn$fmha"):
            found.setdefault(kernel.kind, []).extend([kernel.flops] * (kernel.executions or 0))
    return found


def test_the_fused_program_holds_cudnns_attention_priced_as_the_jaxpr_counts_it(fused):
    assert _calls(fused, "forward") == {"__cudnn$fmhaSoftmax": [PRODUCTS + SOFTMAX] * L}
    backward = 2 * PRODUCTS + SOFTMAX  # dQ, dK, dV, dP and the softmax's gradient
    assert _calls(fused, "grad") == {"__cudnn$fmhaSoftmax": [PRODUCTS + SOFTMAX] * L,
                                     "__cudnn$fmhaSoftmaxBackward": [backward] * L}
    assert fused.unsupported == {}
    # the attention's products, every T x T pair: the dense model's formula, forward and backward
    assert fused.phases["forward"].attention_flops == L * PRODUCTS
    assert fused.phases["grad"].attention_flops == 3 * L * PRODUCTS
    for phase in ("forward", "grad"):
        # the two counters agree: the target's count (its custom calls priced, the loop's other
        # iterations added once, not twice) and the jaxpr's
        assert fused.phases[phase].flops == pytest.approx(fused.phases[phase].jaxpr_flops, rel=0.01)
    # and the exps of its softmax, one per score forward, which XLA's analysis leaves out too
    # (not compared in grad: there the compiled program has 23% more transcendentals than the
    # jaxpr in this tiny model, outside the attention calls; the dense 8B's grad: +1.9%)
    forward = fused.phases["forward"]
    assert forward.transcendentals == pytest.approx(forward.jaxpr_transcendentals, rel=0.01)
    assert forward.jaxpr_transcendentals >= L * SCORES


def test_fused_forward_flop_are_the_dense_models_and_its_memory_has_no_scores(fused, dense):
    forward = fused.phases["forward"]
    assert forward.flops == pytest.approx(FORWARD, rel=0.01)
    assert dense.costs.flops == pytest.approx(FORWARD, rel=0.02)  # its mask and float32 casts: more per score
    assert forward.flops == pytest.approx(dense.costs.flops, rel=0.01)
    assert dense.memory.temp_bytes - forward.memory.temp_bytes >= SCORES_BYTES  # one layer's at a time


def test_the_jaxpr_rule_counts_every_pair_of_grouped_query_attention():
    b, t, s, n, k, h = 2, 64, 96, 8, 2, 64  # 4 query heads per key/value head; S != T
    q = jax.ShapeDtypeStruct((b, t, n, h), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((b, s, k, h), jnp.bfloat16)

    def loss(q, key, value):
        out = jax.nn.dot_product_attention(q, key, value, is_causal=True, implementation="cudnn")
        return out.astype(jnp.float32).sum()

    counted = count_function(jax.grad(loss, argnums=(0, 1, 2)), q, kv, kv)
    assert counted.unsupported == {}
    by_primitive = {e.primitive: e.cost for e in counted.equations if e.primitive.startswith("dot_product")}
    scores = b * n * t * s
    products = 2 * scores * (h + h)
    forward = by_primitive["dot_product_attention_fwd_wrapper"]
    backward = by_primitive["dot_product_attention_bwd_wrapper"]
    assert (forward.flops, forward.products, forward.transcendentals) == (products + 5 * scores, products, scores)
    assert (backward.flops, backward.products, backward.transcendentals) == (2 * products + 5 * scores,
                                                                            2 * products, 0)
    # dropout inside the kernel is not modelled: unknown, never 0
    rule = registry.get_rule("dot_product_attention_fwd_wrapper")
    assert rule([q, kv, kv, jax.ShapeDtypeStruct((0,), jnp.bfloat16)], [q], dropout_rate=0.1) is None


@pytest.mark.parametrize("is_causal", [True, False])
def test_cudnns_mask_type_says_whether_causal_halves_its_products(is_causal):
    # attention_flops="causal" halves a fused call's products (Cost.causal) only where its mask_type is causal
    b, t, n, h = 2, 16, 4, 32
    q = jax.ShapeDtypeStruct((b, t, n, h), jnp.bfloat16)

    def loss(q, key, value):
        out = jax.nn.dot_product_attention(q, key, value, is_causal=is_causal, implementation="cudnn")
        return out.astype(jnp.float32).sum()

    counted = count_function(jax.grad(loss, argnums=(0, 1, 2)), q, q, q)
    fused = [e.cost for e in counted.equations if e.primitive.startswith("dot_product")]
    products = 3 * 2 * (b * n * t * t) * (h + h)  # forward Q K^T and P V, 2·B·N·T·T·h each; backward twice
    assert sum(c.products for c in fused) == products
    assert sum(c.causal for c in fused) == (products if is_causal else 0)


def test_the_target_declares_the_kernel_and_a_form_cudnn_refuses_is_one_line():
    assert targets.fused_attention() == "xla"  # no target: the CPU, XLA's own attention
    with targets.use(target("h100")):
        assert targets.fused_attention() == "cudnn"
    with targets.use(target("tpu-v5e")):
        assert targets.fused_attention() == "splash"  # jax's Pallas splash kernels (tests/compiled/test_splash_attention.py)
    small = dict(CONFIG, seq_len=16, d_model=64, d_ff=64)
    with pytest.raises(xla_cost.InputError, match="bfloat16 or float16 q, k, v.*float32"):
        xla_cost.analyze(build_model("llama3-8b", attention="fused", **small),
                         example_inputs("llama3-8b", B, **small), optimizer="sgd", target="h100")


@pytest.mark.parametrize("window", [8, 2, 16])
def test_cudnns_sliding_window_keeps_the_pairs_it_allows(window):
    # jax.nn.dot_product_attention(..., local_window_size=(W - 1, 0)) passes cuDNN sliding_window_length W:
    # query i sees keys (i - W, i]. attention_flops="causal" keeps (A - D/2)/T² of its products, A the
    # pairs allowed, D = T its bounded diagonal, as a dense sliding window's (docs/memory.md)
    from xla_cost.analysis import model_flops

    b, t, n, h = 2, 16, 4, 32
    q = jax.ShapeDtypeStruct((b, t, n, h), jnp.bfloat16)

    def loss(q, key, value):
        out = jax.nn.dot_product_attention(q, key, value, is_causal=True, local_window_size=(window - 1, 0),
                                           implementation="cudnn")
        return out.astype(jnp.float32).sum()

    counted = count_function(jax.grad(loss, argnums=(0, 1, 2)), q, q, q)
    causal = 3 * 2 * (b * n * t * t) * (h + h)  # forward Q K^T and P V, 2·B·N·T·T·h each; backward twice
    assert sum(e.cost.causal for e in counted.equations) == causal
    allowed = t * window - window * (window - 1) // 2  # every query's W keys, less those before position 0
    kept = causal * (2 * allowed - t) // (2 * t * t)  # (A - T/2) / T²
    assert causal - causal // 2 - model_flops.window_flops(counted) == kept
    if window < t:
        words = f"sliding window of {window} keys ({t} x {t})"
        assert model_flops.causal_windows({"train_step": counted}) == {words: (causal, kept)}
        assert f"{words}: {kept:,} FLOP kept of {causal:,}" in model_flops.causal_note(
            (causal, 0, 0, model_flops.window_flops(counted)), causal, model_flops.causal_windows({"train_step": counted}))
    else:  # a window of every key: the causal mask, half kept
        assert kept == causal // 2 and counted.windows == {}


def test_a_cudnn_window_over_more_keys_than_queries_is_halved_and_said_so():
    b, t, s, n, h = 1, 16, 24, 2, 32
    q = jax.ShapeDtypeStruct((b, t, n, h), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((b, s, n, h), jnp.bfloat16)
    counted = count_function(lambda q, k, v: jax.nn.dot_product_attention(
        q, k, v, is_causal=True, local_window_size=(3, 0), implementation="cudnn"), q, kv, kv)
    causal = 2 * (b * n * t * s) * (h + h)  # Q K^T and P V, every T x S pair
    assert sum(e.cost.causal for e in counted.equations) == causal
    assert sum(e.cost.window for e in counted.equations) == 0  # halved, as a causal mask
    assert list(counted.windows) == [f"not evaluated: a window over {t} queries and {s} keys, no square T x T one"]
