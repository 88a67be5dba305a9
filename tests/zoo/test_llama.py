"""Llama zoo family: parameter counts against closed forms and published figures,
forward matmul FLOP against a closed form, dense and fused attention, scanned
and unrolled stacks, remat's recomputation.

Everything is abstract (`jax.eval_shape`, `jax.ShapeDtypeStruct`, the jaxpr
counter): nothing the size of a Llama is allocated, nothing is compiled.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import xla_cost
from xla_cost.zoo import build_model, count_parameters, example_inputs, get_spec, partition_rules
from xla_cost.zoo._transformer import rope_frequencies

# Published counts, rounded as published, and the tolerance each is read with:
# half a unit of its last digit (8.03B: +-0.005B), or, for a nominal size, 2%.
PUBLISHED = {
    # Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3 gives the
    # configurations (8B: 32 layers, d 4096, FFN 14,336, 32 heads, 8 KV heads;
    # 70B: 80, 8192, 28,672, 64, 8; 405B: 126, 16,384, 53,248, 128, 8; vocabulary
    # 128,256 tokens, RoPE base 500,000); 8.03B / 70.6B / 405.9B are those
    # configurations' counts as issue 50 quotes them (Hugging Face's model pages
    # of meta-llama/Meta-Llama-3-8B and -70B show 8.03B and 70.6B).
    "llama3-8b": (8.03e9, 0.005e9),
    "llama3-70b": (70.6e9, 0.05e9),
    "llama3-405b": (405.9e9, 0.05e9),
    # Touvron et al. 2023a, "LLaMA", Table 2: 6.7B and 13.0B for LLaMA 7B and 13B,
    # whose configurations Llama 2 7B and 13B keep (Touvron et al. 2023b, the
    # context aside: d 4096 / 5120, 32 / 40 layers and heads, FFN 11,008 / 13,824,
    # vocabulary 32,000).
    "llama2-7b": (6.7e9, 0.05e9),
    "llama2-13b": (13.0e9, 0.05e9),
    # Touvron et al. 2023b, "Llama 2", Table 1: 70B, a nominal size (80 layers,
    # d 8192, 64 heads, 8 KV heads, FFN 28,672): 2%.
    "llama2-70b": (70e9, 0.02 * 70e9),
}

TINY = {"vocab_size": 128, "seq_len": 16, "n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 2, "d_ff": 96}


def closed_form_parameters(c: dict) -> int:
    """P = 2*V*d + L*(2*d*N*H + 2*d*K*H + 3*d*f + 2*d) + d: embed_tokens and lm_head
    V*d each; per block q_proj and o_proj d*N*H, k_proj and v_proj d*K*H, gate, up
    and down d*f each, two RMSNorms d each; the final norm d."""
    v, n_layer, d, n, k, f = (c[key] for key in ("vocab_size", "n_layer", "d_model", "n_head", "n_kv_head", "d_ff"))
    h = c.get("head_dim") or d // n
    return 2 * v * d + n_layer * (2 * d * n * h + 2 * d * k * h + 3 * d * f + 2 * d) + d


def forward_matmul_flops(batch: int, c: dict) -> int:
    """dot_general FLOP of one forward pass (2 per multiply-add): per token, the
    projections d*(2N + 2K)*H, the MLP 3*d*f per layer and the head d*V; per
    sequence and layer, q k^T and probs v N*H*T*T each. The causal mask is a
    select: all T*T pairs are computed."""
    t, n_layer, d, n, k, f, v = (c[key] for key in ("seq_len", "n_layer", "d_model", "n_head", "n_kv_head", "d_ff",
                                                    "vocab_size"))
    h = d // n
    weights = 2 * batch * t * (n_layer * (d * (2 * n + 2 * k) * h + 3 * d * f) + d * v)
    attention = n_layer * 2 * 2 * batch * n * h * t * t
    return weights + attention


def _abstract(model, inputs):
    return jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)


def _count(name: str, batch: int, grad: bool = False, **config):
    model = build_model(name, **config)
    inputs = example_inputs(name, batch, **config)
    variables = _abstract(model, inputs)

    def loss(p, x):
        return model.apply(p, x).astype(jnp.float32).mean()

    return xla_cost.count_function(jax.grad(loss) if grad else loss, variables, inputs)


def _dots(count) -> int:
    return sum(e.cost.flops for e in count.equations if e.primitive == "dot_general")


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_parameter_counts(name):
    config = get_spec(name).defaults
    count = count_parameters(name)  # scanned by default: abstract, one block traced
    assert count == closed_form_parameters(config)
    published, tolerance = PUBLISHED[name]
    assert abs(count - published) <= tolerance, (count, published)


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_the_familys_published_count_and_forward_closed_form_are_the_tests(name):
    # What the zoo page reads (ModelSpec.published, ModelSpec.forward_flops): the
    # family's table and closed form, against the figures and formula written here.
    spec = get_spec(name)
    assert spec.published.parameters == PUBLISHED[name][0] and spec.published.active is None
    assert spec.forward_flops(build_model(name)) == forward_matmul_flops(1, spec.defaults)
    assert spec.forward_flops(build_model(name, **TINY)) == forward_matmul_flops(1, TINY)


def test_llama3_8b_count_exactly():
    # Dubey et al. 2024, Table 3's 8B: 2 * 128,256 * 4096 (embedding, untied head)
    # + 32 * (2 * 4096^2 + 2 * 4096 * 1024 + 3 * 4096 * 14,336 + 2 * 4096) + 4096.
    assert count_parameters("meta-llama/Meta-Llama-3-8B") == 8_030_261_248


def test_scan_and_unrolled_same_parameters_and_flops():
    assert count_parameters("llama3-8b", scan_layers=False, **TINY) == closed_form_parameters(TINY)
    for grad in (False, True):
        unrolled = _count("llama3-8b", 2, grad, scan_layers=False, **TINY)
        scanned = _count("llama3-8b", 2, grad, scan_layers=True, **TINY)
        assert _dots(unrolled) == _dots(scanned)
        assert grad or _dots(scanned) == forward_matmul_flops(2, TINY)
        # Not equal to the FLOP: the scan's counter adds 1 per step, and in the grad
        # jax hoists the loop-invariant mask out of the scanned body (computed once).
        assert abs(unrolled.total.flops - scanned.total.flops) <= 1e-4 * unrolled.total.flops
        assert not unrolled.unsupported and not scanned.unsupported


@pytest.mark.parametrize("batch", [1, 3])
def test_forward_matmul_flops_exact(batch):
    count = _count("llama3-8b", batch, **TINY)
    assert _dots(count) == forward_matmul_flops(batch, TINY)
    # GQA: the scores and probs v run in the attention module, N*H*T*T each.
    attention = [e for e in count.equations if e.primitive == "dot_general" and "/self_attn/" in e.name_stack
                 and not e.name_stack.endswith("_proj")]
    assert len(attention) == 2  # q k^T and probs v, under the einsums' names
    assert sum(e.cost.flops for e in attention) == TINY["n_layer"] * 4 * batch * TINY["d_model"] * TINY["seq_len"] ** 2


def test_forward_flops_within_one_percent_and_fused_equals_dense():
    # Wide enough that the products dominate: the rest (norms, rotary, softmax,
    # SiLU, the mean) is elementwise, well under 1%.
    config = {"vocab_size": 1024, "seq_len": 16, "n_layer": 2, "d_model": 512, "n_head": 8, "n_kv_head": 2,
              "d_ff": 1024}
    closed = forward_matmul_flops(2, config)
    dense = _count("llama3-8b", 2, attention="dense", **config).total.flops
    fused = _count("llama3-8b", 2, attention="fused", **config)
    assert closed <= dense <= 1.01 * closed
    # jax.nn.dot_product_attention on the CPU is XLA's decomposition: the same products.
    assert _dots(fused) == closed
    assert abs(fused.total.flops - dense) <= 0.01 * dense
    assert not fused.unsupported


def test_remat_recomputes_what_its_policy_drops():
    # Backward matmul FLOP beyond the plain model's: "selective" (dots without batch
    # dimensions saved) recomputes the two attention products, 2 * 2*B*N*H*T*T per
    # layer; "full" recomputes the block's forward but its last product (down_proj:
    # its output is the next block's saved input): the projections into the heads,
    # q k^T and probs v, o_proj (its output feeds the MLP's norm), gate and up.
    b, t, n_layer, d, n, k, f = 2, TINY["seq_len"], TINY["n_layer"], TINY["d_model"], TINY["n_head"], \
        TINY["n_kv_head"], TINY["d_ff"]
    h = d // n
    attention = 2 * 2 * b * n * h * t * t
    full = n_layer * (2 * b * t * d * (n + 2 * k) * h + attention + 2 * b * t * n * h * d + 2 * 2 * b * t * d * f)
    assert _dots(_count("llama3-8b", b, remat="full", **TINY)) == forward_matmul_flops(b, TINY)
    backward = {remat: _dots(_count("llama3-8b", b, True, remat=remat, **TINY)) - forward_matmul_flops(b, TINY)
                for remat in ("none", "selective", "full")}
    assert backward["selective"] - backward["none"] == n_layer * attention
    assert backward["full"] - backward["none"] == full


def test_analyze_separates_full_remat_recomputation():
    # The recomputation is split out: hardware FLOP - model FLOP in the backward
    # pass is what jax.checkpoint repeats, at least the matmuls of the test above.
    b, t, n_layer, d, n, k, f = 2, TINY["seq_len"], TINY["n_layer"], TINY["d_model"], TINY["n_head"], \
        TINY["n_kv_head"], TINY["d_ff"]
    h = d // n
    matmuls = n_layer * (2 * b * t * d * (2 * n + 2 * k) * h + 2 * 2 * b * n * h * t * t + 2 * 2 * b * t * d * f)
    model = build_model("llama3-8b", remat="full", scan_layers=False, **TINY)
    report = xla_cost.analyze(model, example_inputs("llama3-8b", b, **TINY), optimizer="sgd", counter="jaxpr")
    backward, forward = report.phases["backward"], report.phases["forward"]
    recomputed = backward.hardware_flops - backward.model_flops
    assert matmuls <= recomputed <= 1.2 * matmuls
    assert forward.model_flops == forward.hardware_flops
    assert any("recomput" in note for note in report.notes)


def test_parameter_tree_untied_head_and_partition_rules():
    model = build_model("llama3-8b", scan_layers=False, **TINY)
    params = _abstract(model, example_inputs("llama3-8b", 1, **TINY))["params"]
    assert set(params) == {"embed_tokens", "layers_0", "layers_1", "norm", "lm_head"}
    assert set(params["layers_0"]) == {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"}
    d, k, h = TINY["d_model"], TINY["n_kv_head"], TINY["d_model"] // TINY["n_head"]
    assert params["layers_0"]["self_attn"]["k_proj"]["kernel"].shape == (d, k * h)
    assert params["lm_head"]["kernel"].shape == (d, TINY["vocab_size"])  # untied
    scanned = _abstract(build_model("llama3-8b", **TINY), example_inputs("llama3-8b", 1, **TINY))["params"]
    assert scanned["layers"]["mlp"]["gate_proj"]["kernel"].shape == (TINY["n_layer"], d, TINY["d_ff"])
    # Megatron's splits name every projection of the block, the embedding and the head.
    from xla_cost.parallel.sharding import param_specs  # noqa: PLC0415

    _, sources, _ = param_specs(params, {"model": 2}, model_rules=partition_rules(model))
    split = {path for path, source in sources.items() if source == "zoo"}
    assert {p.rsplit("/", 2)[-2] for p in split} == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "embed_tokens", "lm_head"
    }


def test_llama31_rope_scaling():
    # Meta's apply_scaling: wavelengths under 8192/4 = 2048 positions kept, over
    # 8192/1 divided by the factor, 500,000 ** (-2i/128) the unscaled frequencies.
    plain = 500_000.0 ** (-np.arange(0, 128, 2) / 128)
    scaled = rope_frequencies(128, 500_000.0, 8.0)
    wavelength = 2 * np.pi / plain
    high, low = wavelength < 2048, wavelength > 8192
    assert high.any() and low.any()
    np.testing.assert_allclose(scaled[high], plain[high], rtol=1e-6)
    np.testing.assert_allclose(scaled[low], plain[low] / 8, rtol=1e-6)
    assert build_model("llama3-405b").rope_scaling == 8.0


def test_bad_options_are_one_line_errors():
    inputs = example_inputs("llama3-8b", 1, **TINY)
    for bad, match in [({"attention": "flash"}, "dense, fused"), ({"n_kv_head": 3}, "n_kv_head dividing n_head"),
                       ({"remat": "most"}, "selective"), ({"d_model": 66}, "d_model divisible by n_head")]:
        model = build_model("llama3-8b", **{**TINY, **bad})
        with pytest.raises(xla_cost.InputError, match=match):
            _abstract(model, inputs)
    with pytest.raises(xla_cost.InputError, match=r"\(B, 16\)"):
        _abstract(build_model("llama3-8b", **TINY), jax.ShapeDtypeStruct((1, 8), "int32"))


def test_a_plain_mlp_has_two_matrices():
    # gated_mlp=False: up_proj and down_proj (2 d f per block, not 3 d f), so per block d f fewer parameters
    # and per token 2 d f fewer forward FLOP than the gated MLP of the same width (Nemotron-4's squared ReLU)
    c = {**TINY, "gated_mlp": False, "activation": "relu2"}
    d, f, layers, t = c["d_model"], c["d_ff"], c["n_layer"], c["seq_len"]
    assert count_parameters("llama3-8b", **c) == closed_form_parameters(TINY) - layers * d * f
    counted = _dots(_count("llama3-8b", 1, **c))
    assert counted == forward_matmul_flops(1, TINY) - 2 * t * layers * d * f
    assert get_spec("llama3-8b").forward_flops(build_model("llama3-8b", **c)) == counted


def test_an_unknown_activation_is_refused_in_one_line():
    with pytest.raises(xla_cost.InputError, match="activation"):
        count_parameters("llama3-8b", **TINY, activation="tanh")
