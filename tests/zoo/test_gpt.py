"""GPT-2 zoo family: exact parameter counts and exact forward matmul FLOP.

Everything is abstract (`jax.eval_shape`, `jax.ShapeDtypeStruct`): nothing the size
of GPT-2 is ever allocated.
"""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import xla_cost
from xla_cost.zoo import build_model, count_parameters, example_inputs, get_spec

GPT2_SIZES = ["gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl"]

# Source: Hugging Face `GPT2LMHeadModel.from_pretrained(name).num_parameters()` for
# gpt2, gpt2-medium, gpt2-large and gpt2-xl (embeddings tied, so the LM head adds
# nothing). Radford et al. 2019, Table 2, quotes these models as 117M, 345M, 762M
# and 1542M.
PUBLISHED = {
    "gpt2-small": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
}

TINY = {"vocab_size": 100, "seq_len": 16, "n_layer": 3, "d_model": 64, "n_head": 4}


def closed_form_parameters(c: dict) -> int:
    """P = V*d + n_ctx*d + L*(12*d^2 + 13*d) + 2*d, for d_ff = 4d."""
    v, n_ctx, n_layer, d = c["vocab_size"], c["seq_len"], c["n_layer"], c["d_model"]
    assert c.get("d_ff", 0) in (0, 4 * d)
    # ln_1 2d, c_attn 3d^2+3d, attn.c_proj d^2+d, ln_2 2d, c_fc 4d^2+4d, mlp.c_proj 4d^2+d
    block = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d)
    assert block == 12 * d * d + 13 * d
    return v * d + n_ctx * d + n_layer * block + 2 * d  # + ln_f; the head is tied to wte


def forward_matmul_flops(batch: int, c: dict) -> int:
    """dot_general FLOP of one forward pass, 2 FLOP per multiply-add.

    Block weights: c_attn 3d^2, attn.c_proj d^2, c_fc 4d^2, mlp.c_proj 4d^2 = 12d^2
    multiply-adds per token and layer. Tied head: d*V per token. Attention: q k^T
    and probs v are each T*T*d per sequence and layer; the causal mask is applied
    with a select, so all T*T pairs are computed.
    """
    b, t, n_layer, d, v = batch, c["seq_len"], c["n_layer"], c["d_model"], c["vocab_size"]
    weights = 2 * b * t * (n_layer * 12 * d * d + d * v)
    attention = 2 * 2 * b * n_layer * t * t * d
    return weights + attention


@pytest.mark.parametrize("name", GPT2_SIZES)
def test_published_parameter_counts(name):
    config = get_spec(name).defaults
    assert count_parameters(name) == PUBLISHED[name]
    assert closed_form_parameters(config) == PUBLISHED[name]


@pytest.mark.parametrize("name", GPT2_SIZES)
def test_scanned_full_size_counts(name):
    assert count_parameters(name, scan_layers=True) == PUBLISHED[name]


def test_scan_and_unrolled_same_parameters():
    unrolled = count_parameters("gpt2-small", **TINY)
    scanned = count_parameters("gpt2-small", scan_layers=True, **TINY)
    assert unrolled == scanned == closed_form_parameters(TINY)


def _abstract_params(model, inputs):
    return jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)


@pytest.mark.parametrize("scan_layers", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_forward_matmul_flops_exact(batch, scan_layers):
    model = build_model("gpt2-small", scan_layers=scan_layers, **TINY)
    inputs = example_inputs("gpt2-small", batch, **TINY)
    assert inputs.shape == (batch, TINY["seq_len"]) and inputs.dtype == "int32"
    variables = _abstract_params(model, inputs)
    count = xla_cost.count_function(lambda p, x: model.apply(p, x), variables, inputs)
    dots = [e for e in count.equations if e.primitive == "dot_general"]
    assert sum(e.cost.flops for e in dots) == forward_matmul_flops(batch, TINY)
    assert not count.unsupported
    # The attention matmuls are attributed to the attention module.
    attn = [e for e in dots if "/attn/" in e.name_stack and "/c_" not in e.name_stack]
    assert sum(e.cost.flops for e in attn) == 4 * batch * TINY["n_layer"] * TINY["seq_len"] ** 2 * TINY["d_model"]


def test_output_shape_and_param_tree():
    model = build_model("gpt2-small", **TINY)
    inputs = example_inputs("gpt2-small", 2, **TINY)
    variables = _abstract_params(model, inputs)
    out = jax.eval_shape(model.apply, variables, inputs)
    assert out.shape == (2, TINY["seq_len"], TINY["vocab_size"])
    params = variables["params"]
    assert set(params) == {"wte", "wpe", "ln_f", "h_0", "h_1", "h_2"}  # no head weights
    assert set(params["h_0"]) == {"ln_1", "attn", "ln_2", "mlp"}
    assert set(params["h_0"]["attn"]) == {"c_attn", "c_proj"}
    assert set(params["h_0"]["mlp"]) == {"c_fc", "c_proj"}

    scanned = build_model("gpt2-small", scan_layers=True, **TINY)
    stacked = _abstract_params(scanned, inputs)["params"]
    assert set(stacked) == {"wte", "wpe", "ln_f", "h"}
    assert stacked["h"]["attn"]["c_attn"]["kernel"].shape == (3, 64, 192)


def test_d_ff_override_counts():
    config = {**TINY, "d_ff": 48}
    d, f = TINY["d_model"], 48
    block = 4 * d * d + 2 * d * f + 9 * d + f
    expected = (TINY["vocab_size"] + TINY["seq_len"]) * d + TINY["n_layer"] * block + 2 * d
    assert count_parameters("gpt2-small", **config) == expected


def test_config_accepts_bool_and_int_fields():
    model = build_model("gpt2-small", scan_layers=True, seq_len=128, n_layer=2)
    assert model.scan_layers is True and model.seq_len == 128 and model.n_layer == 2
    assert example_inputs("gpt2-small", 4, seq_len=128).shape == (4, 128)
    with pytest.raises(xla_cost.InputError):
        build_model("gpt2-small", scan_layers=1)


def test_head_count_must_divide_width():
    config = {**TINY, "d_model": 66}
    with pytest.raises(xla_cost.InputError, match="d_model divisible by n_head"):
        count_parameters("gpt2-small", **config)


def test_wrong_sequence_length_and_dtype():
    model = build_model("gpt2-small", **TINY)
    with pytest.raises(xla_cost.InputError, match=r"\(B, 16\)"):
        _abstract_params(model, jax.ShapeDtypeStruct((2, 8), "int32"))
    with pytest.raises(xla_cost.InputError, match="integer token ids"):
        _abstract_params(model, jax.ShapeDtypeStruct((2, 16), "float32"))


def test_causal_and_scan_equivalent_numerically():
    # Tiny real run (a few thousand floats): the mask hides later tokens, and the
    # scanned stack computes the same function as the unrolled one.
    config = {**TINY, "n_layer": 2}
    tokens = (jnp.arange(32, dtype=jnp.int32).reshape(2, 16) * 7) % TINY["vocab_size"]
    model = build_model("gpt2-small", **config)
    # Random weights from NumPy: compiling Flax's initialisers takes seconds.
    rng = np.random.default_rng(0)
    variables = jax.tree.map(
        lambda a: jnp.asarray(rng.normal(0.0, 0.1, a.shape), a.dtype),
        _abstract_params(model, tokens),
    )
    apply = jax.jit(model.apply)
    logits = apply(variables, tokens)
    changed = apply(variables, tokens.at[:, -1].set(3))
    assert jnp.allclose(logits[:, :-1], changed[:, :-1])
    assert not jnp.allclose(logits[:, -1], changed[:, -1])

    params = dict(variables["params"])
    layers = [params.pop(f"h_{i}") for i in range(config["n_layer"])]
    params["h"] = jax.tree.map(lambda *xs: jnp.stack(xs), *layers)
    scanned = build_model("gpt2-small", scan_layers=True, **config)
    assert jnp.allclose(jax.jit(scanned.apply)({"params": params}, tokens), logits, atol=1e-5)


def test_d_ff_zero_means_four_d():
    assert count_parameters("gpt2-small", d_ff=0, **TINY) == closed_form_parameters(TINY)
    with pytest.raises(xla_cost.InputError, match=">= 0"):
        build_model("gpt2-small", d_ff=-1)
    with pytest.raises(xla_cost.InputError, match=">= 1"):
        build_model("gpt2-small", n_layer=0)


def test_heads_of_another_width():
    # head_dim h with n heads (a = n h wide, not d): c_attn d x 3a + 3a, c_proj a x d + d, so per block 4 d (a - d)
    # + 3 (a - d) parameters more than GPT-2's; per token and layer 2 x 4 d (a - d) forward FLOP more in the
    # projections and, per sequence and layer, 2 x 2 T T (a - d) more in q k^T and probs v
    c = {**TINY, "head_dim": 32}
    d, a, layers, t = c["d_model"], c["n_head"] * c["head_dim"], c["n_layer"], c["seq_len"]
    assert count_parameters("gpt2-small", **c) == closed_form_parameters(TINY) + layers * (4 * d * (a - d) + 3 * (a - d))
    model, inputs = build_model("gpt2-small", **c), example_inputs("gpt2-small", 1, **c)
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)
    counted = xla_cost.count_function(lambda p, x: model.apply(p, x), variables, inputs)
    dots = sum(e.cost.flops for e in counted.equations if e.primitive == "dot_general")
    assert dots == forward_matmul_flops(1, TINY) + layers * (2 * 4 * t * d * (a - d) + 2 * 2 * t * t * (a - d))


def _float32_scores(config: dict, batch: int) -> int:
    """The float32 arrays of the attention scores' shape (B, H, T, T) the forward pass's jaxpr makes."""
    model = build_model("gpt2-small", dtype="float16", **config)
    tokens = jax.ShapeDtypeStruct((batch, config["seq_len"]), jnp.int32)
    variables = _abstract_params(model, tokens)
    jaxpr = jax.make_jaxpr(model.apply)(variables, tokens)
    shape = (batch, config["n_head"], config["seq_len"], config["seq_len"])

    def arrays(eqns) -> int:
        found = 0
        for eqn in eqns:
            found += sum(v.aval.shape == shape and v.aval.dtype == jnp.float32 for v in eqn.outvars)
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                found += arrays(sub.eqns)
        return found

    return arrays(jaxpr.jaxpr.eqns)


def test_a_float16_softmax_keeps_the_scores_in_float16():
    # Megatron-LM's eager torch.nn.Softmax ran on the float16 scores (xla_cost.study.published_record's
    # megatron-2019 and megatron-v1.0). With softmax_float32=False the one float32 array of the scores' shape
    # a layer makes is the softmax's sum accumulating in float32 (jnp.sum's, as PyTorch's kernel accumulates);
    # the default converts the scores first: the mask's select, the exponent and the division in float32 too
    config = {**TINY, "n_layer": 2}
    assert _float32_scores({**config, "softmax_float32": False}, 2) == config["n_layer"]
    assert _float32_scores(config, 2) >= 4 * config["n_layer"]  # convert, select, exp, divide: per layer


def test_dropout_draws_a_mask_per_dropped_array_and_none_by_default():
    # dropout=r drops the embeddings, each layer's attention probabilities (B, H, T, T) and its two outputs
    # (B, T, d): 1 + 3 L masks drawn (jax.random.bernoulli, one `random_bits` each); at 0, none and no stream
    config = {**TINY, "n_layer": 2}
    model = build_model("gpt2-small", dropout=0.1, **config)
    tokens = jax.ShapeDtypeStruct((2, config["seq_len"]), jnp.int32)
    variables = _abstract_params(model, tokens)
    jaxpr = jax.make_jaxpr(lambda v, t, k: model.apply(v, t, rngs={"dropout": k}))(variables, tokens, jax.random.key(1))
    assert _drawn(jaxpr.jaxpr.eqns) == 1 + 3 * config["n_layer"]
    plain = build_model("gpt2-small", **config)
    assert _drawn(jax.make_jaxpr(plain.apply)(_abstract_params(plain, tokens), tokens).jaxpr.eqns) == 0


def _drawn(eqns) -> int:
    """The `random_bits` equations (one per mask drawn), nested jaxprs included."""
    return sum((eqn.primitive.name == "random_bits")
               + sum(_drawn(sub.eqns) for sub in jax.extend.core.jaxprs_in_params(eqn.params)) for eqn in eqns)
