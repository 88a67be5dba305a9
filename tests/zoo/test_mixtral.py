"""Mixtral and DeepSeekMoE zoo family: total and active parameters, and the routed FLOP.

Everything is abstract (`jax.eval_shape`, `jax.ShapeDtypeStruct`) except one tiny run
that checks the two dispatches compute the same function. Expected figures are
closed forms written here from the configurations, and the published counts with
their sources.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import xla_cost
from xla_cost.present.units import short_count
from xla_cost.step.routing import active_parameters, declared_routing
from xla_cost.zoo import build_model, count_parameters, example_inputs, get_spec
from xla_cost.zoo.mixtral import moe_parameters

PUBLISHED = {
    # Mistral AI, "Mixtral of experts" (2023-12-11): "46.7B total parameters but only uses 12.9B
    # parameters per token"; Jiang et al. 2024 (arXiv:2401.04088), section 2: 47B / 13B active.
    "mixtral-8x7b": (46.7e9, 12.9e9),
    # Dai et al. 2024, DeepSeekMoE (arXiv:2401.06066), section 5: 16.4B total, 2.8B activated.
    "deepseek-moe-16b": (16.4e9, 2.8e9),
}


def closed_form(c: dict) -> tuple[int, int]:
    """(total, active) parameters from the configuration.

    Per layer: q_proj and o_proj d*N*H, k_proj and v_proj d*K*H, two RMSNorms d each;
    a dense layer's SwiGLU 3*d*f0; a MoE layer's router d*E, its E routed experts
    3*d*f each (a token reads k of them) and s shared experts 3*d*f each (always read).
    Plus the embedding and the untied head V*d each, and the final norm d.
    """
    d, n, kv, v = c["d_model"], c["n_head"], c["n_kv_head"], c["vocab_size"]
    h = c.get("head_dim") or d // n
    e, k, f, s = c["n_experts"], c["top_k"], c["d_ff"], c.get("n_shared_experts", 0)
    dense_layers = c.get("n_dense_layers", 0)
    attention = 2 * d * n * h + 2 * d * kv * h + 2 * d
    dense = attention + 3 * d * (c.get("dense_d_ff") or f)
    moe_layers = c["n_layer"] - dense_layers
    rest = 2 * v * d + d + dense_layers * dense
    total = rest + moe_layers * (attention + d * e + 3 * d * f * (e + s))
    active = rest + moe_layers * (attention + d * e + 3 * d * f * (k + s))
    return total, active


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_total_and_active_parameters_of_the_published_configurations(name):
    config = get_spec(name).defaults
    model, inputs = build_model(name), example_inputs(name, 1)
    params = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)["params"]
    total = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))
    active = active_parameters(params, declared_routing(model, inputs))
    assert (total, active) == closed_form(config)
    assert count_parameters(name) == total
    assert moe_parameters(model) == (total, active)  # the family's own closed form agrees
    published_total, published_active = PUBLISHED[name]
    assert round(total / 1e9, 1) == published_total / 1e9  # as published, to the 0.1B they print
    assert round(active / 1e9, 1) == published_active / 1e9


# A tiny Mixtral where the products dominate: d 256, 4 heads of 64, 2 key/value heads,
# 4 experts of 512, top 2, 2 layers, T 32; capacity C = ceil(1.25 * 32 * 2 / 4) = 20 slots.
TINY = {"vocab_size": 128, "seq_len": 32, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 256,
        "d_ff": 512, "n_experts": 4, "top_k": 2, "capacity_factor": 1.25, "scan_layers": False}
BATCH = 2


def forward_matmul_flops(c: dict, batch: int, dispatch: str) -> dict[str, int]:
    """dot_general FLOP of one forward pass by part, 2 per multiply-add.

    Tokens N = B*T in groups of one sequence (G = B, S = T); each expert computes
    on C = ceil(cf * S * k / E) slots per group, filled or not: the experts' three
    products cost 3 * 2*G*E*C*d*f, the capacity padding included. The einsum dispatch
    builds the [G, S, E, C] dispatch and combine masks by contracting the one-hot
    choices with the one-hot positions over k (2*N*k*E*C each) and contracts them with
    the tokens (2*N*E*C*d each way); the gather dispatch only weights and sums the k
    outputs it takes back (2*N*k*d).
    """
    b, t, d, n, kv = batch, c["seq_len"], c["d_model"], c["n_head"], c["n_kv_head"]
    h, f, e, k, v, layers = d // n, c["d_ff"], c["n_experts"], c["top_k"], c["vocab_size"], c["n_layer"]
    tokens, slots = b * t, math.ceil(c["capacity_factor"] * t * k / e)
    parts = {
        "projections": 2 * tokens * d * (2 * n * h + 2 * kv * h),
        "attention": 2 * 2 * b * n * t * t * h,  # q k^T and probs v over all T x T pairs
        "router": 2 * tokens * d * e,
        "experts": 3 * 2 * b * e * slots * d * f,
        "dispatch": (2 * 2 * tokens * k * e * slots + 2 * 2 * tokens * e * slots * d) if dispatch == "einsum"
        else 2 * tokens * k * d,
    }
    out = {key: layers * value for key, value in parts.items()}
    out["head"] = 2 * tokens * d * v
    return out


@pytest.fixture(scope="module")
def counts():
    out = {}
    for dispatch in ("einsum", "gather"):
        model = build_model("mixtral-8x7b", dispatch=dispatch, **TINY)
        inputs = example_inputs("mixtral-8x7b", BATCH, **TINY)
        variables = jax.eval_shape(lambda x, m=model: m.init(jax.random.key(0), x), inputs)
        out[dispatch] = xla_cost.count_function(lambda p, x, m=model: m.apply(p, x), variables, inputs)
    return out


@pytest.mark.parametrize("dispatch", ["einsum", "gather"])
def test_forward_flops_hold_the_capacity_padding(counts, dispatch):
    count = counts[dispatch]
    expected = forward_matmul_flops(TINY, BATCH, dispatch)
    dots = [e for e in count.equations if e.primitive == "dot_general"]
    assert sum(e.cost.flops for e in dots) == sum(expected.values())
    # the experts' products are the experts' (their module's name stack), E x C slots each
    experts = sum(e.cost.flops for e in dots if "/experts" in e.name_stack)
    assert experts == expected["experts"]
    assert not count.unsupported
    # everything else (softmax, norms, rotary, SwiGLU's product, routing's one-hots) is under 1%
    assert count.total.flops == pytest.approx(sum(expected.values()), rel=0.01)


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_the_familys_published_counts_are_the_tests(name):
    # What the zoo page reads (ModelSpec.published): the family's table, against the figures written here.
    published = get_spec(name).published
    assert (published.parameters, published.active) == PUBLISHED[name]


@pytest.mark.parametrize("dispatch", ["einsum", "gather"])
def test_the_familys_forward_closed_form_is_the_tests(dispatch):
    # ModelSpec.forward_flops (the zoo page's analytic figure) for one sequence, against the
    # formula written here; Mixtral 8x7B's defaults too (C = ceil(1.25 * 4096 * 2 / 8) = 1280).
    spec = get_spec("mixtral-8x7b")
    assert spec.forward_flops(build_model("mixtral-8x7b", dispatch=dispatch, **TINY)) == \
        sum(forward_matmul_flops(TINY, 1, dispatch).values())
    defaults = spec.defaults
    assert spec.forward_flops(build_model("mixtral-8x7b", dispatch=dispatch)) == \
        sum(forward_matmul_flops(defaults, 1, dispatch).values())


def test_the_familys_forward_closed_form_counts_shared_experts_and_dense_layers():
    # DeepSeekMoE's parts the formula above leaves out: against the products the jaxpr counts.
    config = {**TINY, "d_model": 32, "d_ff": 16, "n_head": 2, "n_kv_head": 2, "n_layer": 3, "n_experts": 8,
              "top_k": 3, "n_shared_experts": 2, "n_dense_layers": 1, "dense_d_ff": 64, "dispatch": "gather"}
    model, inputs = build_model("deepseek-moe-16b", **config), example_inputs("deepseek-moe-16b", 1, **config)
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)
    count = xla_cost.count_function(lambda p, x: model.apply(p, x), variables, inputs)
    dots = sum(e.cost.flops for e in count.equations if e.primitive == "dot_general")
    assert get_spec("deepseek-moe-16b").forward_flops(model) == dots


def test_the_einsum_dispatch_costs_its_masks_and_contractions_over_the_gather():
    c, b = TINY, BATCH
    einsum, gather = forward_matmul_flops(c, b, "einsum"), forward_matmul_flops(c, b, "gather")
    assert {k: v for k, v in einsum.items() if k != "dispatch"} == {k: v for k, v in gather.items() if k != "dispatch"}
    tokens, slots, k, e, d = b * c["seq_len"], 20, c["top_k"], c["n_experts"], c["d_model"]
    difference = c["n_layer"] * (4 * tokens * k * e * slots + 4 * tokens * e * slots * d - 2 * tokens * k * d)
    assert einsum["dispatch"] - gather["dispatch"] == difference


@pytest.fixture(scope="module")
def reports():
    """The tiny Mixtral's step counted from the jaxpr, plain and with each block rematerialised."""
    inputs = example_inputs("mixtral-8x7b", BATCH, **TINY)
    return {remat: xla_cost.analyze(build_model("mixtral-8x7b", remat=remat, **TINY), inputs, optimizer="sgd",
                                    counter="jaxpr") for remat in ("none", "full")}


def test_the_analysis_reports_active_parameters_and_the_padding(reports):
    report = reports["none"]
    total, active = closed_form(TINY)
    assert (report.parameters, report.active_parameters) == (total, active)
    # 32 tokens x top 2 = 64 assignments in E x C = 4 x 20 = 80 slots: 1 - 64/80 = 20% padding
    note = next(n for n in report.notes if n.startswith("mixture of experts"))
    assert "64 assignments for E x C = 4 x 20 = 80 expert slots" in note and "at least 20.0%" in note
    assert f"{total:,} ({short_count(total)}) parameters, {active:,} ({short_count(active)}) active per token" \
        in report.to_table(width=400)
    back = xla_cost.Report.from_dict(report.to_dict())
    assert back.active_parameters == active
    dense = xla_cost.analyze(build_model("one_net"), example_inputs("one_net", 2), optimizer="sgd", counter="jaxpr")
    assert dense.active_parameters is None and "active" not in dense.to_table(width=400)


@pytest.mark.parametrize("dispatch", ["einsum", "gather"])
def test_attention_flops_are_the_attentions_products_alone(dispatch):
    # The MoE block ("mlp") holds no parameter of its own, only its router's and experts' submodules: a
    # module rule took its dispatch and combine einsums for attention (einsum dispatch: 3.6x the attention's
    # forward FLOP), and attention_flops="causal" halved them out of model_flops. Attention is q k^T and
    # probs v over all T x T pairs, 2*2*B*H*T^2*dh per layer (forward_matmul_flops' "attention"); the
    # backward computes two products for each (dq, dk; dprobs, dv).
    report = xla_cost.analyze(build_model("mixtral-8x7b", dispatch=dispatch, **TINY),
                              example_inputs("mixtral-8x7b", BATCH, **TINY), optimizer="sgd", counter="jaxpr")
    attention = forward_matmul_flops(TINY, BATCH, dispatch)["attention"]
    assert report.phases["forward"].attention_flops == attention
    assert report.phases["backward"].attention_flops == 2 * attention


def test_the_two_dispatches_compute_the_same_function():
    config = {**TINY, "n_layer": 1, "d_model": 32, "d_ff": 32, "n_head": 2, "n_kv_head": 1, "seq_len": 16,
              "capacity_factor": 1.0}
    tokens = (jnp.arange(2 * 16, dtype=jnp.int32).reshape(2, 16) * 7) % TINY["vocab_size"]
    einsum = build_model("mixtral-8x7b", dispatch="einsum", **config)
    gather = build_model("mixtral-8x7b", dispatch="gather", **config)
    rng = np.random.default_rng(0)  # random weights from NumPy: Flax's initialisers compile for seconds
    variables = jax.tree.map(lambda a: jnp.asarray(rng.normal(0.0, 0.3, a.shape), a.dtype),
                             jax.eval_shape(lambda x: einsum.init(jax.random.key(0), x), tokens))
    a, b = jax.jit(lambda v, t: (einsum.apply(v, t), gather.apply(v, t)))(variables, tokens)
    assert jnp.allclose(a, b, atol=1e-5) and float(jnp.abs(a).max()) > 0.1


@pytest.mark.parametrize(("change", "match"), [
    ({"dispatch": "ragged"}, "dispatch"), ({"top_k": 5}, "top_k between 1 and n_experts"),
    ({"capacity_factor": 0.0}, "capacity_factor to be a float > 0"), ({"n_dense_layers": 2}, "n_dense_layers below"),
])
def test_bad_options_are_refused_in_one_line(change, match):
    config = {**TINY, "d_model": 32, "d_ff": 32, "n_head": 2, "n_kv_head": 1, **change}
    with pytest.raises(xla_cost.InputError, match=match):
        count_parameters("mixtral-8x7b", **config)


def test_full_remat_recomputes_the_blocks_forward(reports):
    plain, remat = reports["none"], reports["full"]
    assert remat.phases["forward"].flops == plain.phases["forward"].flops
    # the backward pass runs every block's forward again, its products (all but the head's) less the
    # last one, the combine einsum 2*N*E*C*d, whose result no gradient reads, and under 1% of
    # elementwise work beside them
    expected = forward_matmul_flops(TINY, BATCH, "einsum")
    combine = TINY["n_layer"] * 2 * BATCH * TINY["seq_len"] * TINY["n_experts"] * 20 * TINY["d_model"]
    blocks = sum(expected.values()) - expected["head"] - combine
    # hardware less model FLOP: the recomputation, and the experts' capacity padding (20% of their products in
    # the forward and the backward's two gradients: test_capacity_padding_is_in_the_flops_but_not_the_model_flops)
    padding = round((1 - TINY["top_k"] * TINY["seq_len"] / (TINY["n_experts"] * 20)) * 3 * expected["experts"])
    recomputed = remat.hardware_flops - remat.model_flops - padding
    assert blocks <= recomputed <= 1.01 * blocks
    assert plain.hardware_flops == plain.model_flops + padding


def test_a_fine_grained_model_with_shared_experts_and_a_dense_layer_counts_alike_scanned_or_not():
    config = {**TINY, "d_model": 32, "d_ff": 16, "n_head": 2, "n_kv_head": 2, "n_layer": 3, "n_experts": 8,
              "top_k": 3, "n_shared_experts": 2, "n_dense_layers": 1, "dense_d_ff": 64, "normalize_top_k": False,
              "dispatch": "gather"}
    inputs = example_inputs("deepseek-moe-16b", 1, **config)
    for scan in (False, True):
        model = build_model("deepseek-moe-16b", **{**config, "scan_layers": scan})
        params = jax.eval_shape(lambda x, m=model: m.init(jax.random.key(0), x), inputs)["params"]
        total = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))
        assert (total, active_parameters(params, declared_routing(model, inputs))) == closed_form(config)
        assert ("dense_layers" in params or "dense_layers_0" in params) and "shared_experts" in str(params)


def test_a_train_step_of_the_model_reports_its_active_parameters_and_the_padding():
    # analyze_step finds the model the step calls (a TrainState's apply_fn) and the tokens it hands it: the
    # routing the model declares gives the same active parameters and capacity note as the model's analysis
    import optax
    from flax.training import train_state

    model, tokens = build_model("mixtral-8x7b", **TINY), example_inputs("mixtral-8x7b", BATCH, **TINY)
    params = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), tokens)["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.1))

    def train_step(state, batch):
        def loss_fn(p):
            logits = state.apply_fn({"params": p}, batch["tokens"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    report = xla_cost.analyze_step(train_step, state, {"tokens": tokens, "labels": tokens}, counter="jaxpr")
    total, active = closed_form(TINY)
    assert (report.parameters, report.active_parameters) == (total, active)
    note = next(n for n in report.notes if n.startswith("mixture of experts"))
    assert "64 assignments for E x C = 4 x 20 = 80 expert slots" in note  # as the model's analysis says
    plain = xla_cost.analyze_step(lambda p, x: jnp.sum(p["params"]["w"] @ x), {"params": {"w": jnp.ones((2, 2))}},
                                  jnp.ones(2), counter="jaxpr")
    assert plain.active_parameters is None  # no model declaring a routing: none, not every parameter


def test_capacity_padding_is_in_the_flops_but_not_the_model_flops(reports):
    # the experts compute on E x C slots a group, k S of them filled: 1 - k S / (E C) = 1 - 64/80 = 20% of their
    # products (forward, and backward's input and weight gradients: twice the forward) is padding, no model FLOP
    report, c = reports["none"], TINY
    slots = math.ceil(c["capacity_factor"] * c["seq_len"] * c["top_k"] / c["n_experts"])
    padding = 1 - c["top_k"] * c["seq_len"] / (c["n_experts"] * slots)
    experts = forward_matmul_flops(c, BATCH, "einsum")["experts"]
    forward, grad = report.phases["forward"], report.phases["grad"]
    assert forward.flops - forward.model_flops == round(padding * experts)
    assert grad.flops - grad.model_flops == round(padding * 3 * experts)
    assert report.hardware_flops == report.phases["train_step"].flops  # the padding is computed all the same
    assert any("capacity padding" in n and "not in model_flops (MFU)" in n for n in report.notes)


def test_an_estimates_mfu_leaves_the_capacity_padding_out_and_says_so():
    c = TINY
    run = xla_cost.estimate("mixtral-8x7b", tokens=1e6, config=c, batch_size=BATCH, device="h100")
    slots = math.ceil(c["capacity_factor"] * c["seq_len"] * c["top_k"] / c["n_experts"])
    padding = 1 - c["top_k"] * c["seq_len"] / (c["n_experts"] * slots)
    experts = forward_matmul_flops(c, BATCH, "einsum")["experts"]  # a step's, B sequences
    # HFU counts the padded slots' products (forward and the backward's two gradients), MFU does not
    assert (run.hardware_flops_per_sample - run.model_flops_per_sample) * BATCH == pytest.approx(
        padding * 3 * experts, abs=1)
    notes = run.notes()
    assert any(n.startswith("mixture of experts (") for n in notes)
    total, active = closed_form(TINY)
    assert (run.parameters, run.active_parameters) == (total, active) == tuple(
        run.to_dict()[k] for k in ("parameters", "active_parameters"))
    assert f"({short_count(total)} parameters ({short_count(active)} active), layers unrolled;" in run.describe()
    assert any("HFU with remat's recomputation and the routed experts' capacity padding" in n for n in notes)
