"""Routed parameters a model declares (`xla_cost.Routing`): active parameters and the padding note.

A user's own mixture of experts, not a zoo model: E experts of one Dense layer each,
vmapped over a leading expert axis, a router, and a top-k gather. Expected figures
are written from its dimensions.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost.step.routing import active_parameters, declared_routing, routing_notes

D, E, K, B = 8, 4, 1, 6


class TopOneMoE(nn.Module):
    """Each example goes to its router's best expert (an ``[E, D, D]`` stack of kernels)."""

    xla_cost_routing = (xla_cost.Routing(r"(^|/)experts/", experts=E, top_k=K),)  # dropless: no capacity

    @nn.compact
    def __call__(self, x):
        scores = nn.Dense(E, name="router")(x)
        kernels = self.param("experts/kernel", nn.initializers.lecun_normal(), (E, D, D))
        chosen = jnp.take(kernels, jnp.argmax(scores, axis=-1), axis=0)  # [B, D, D]
        return nn.Dense(3, name="head")(jnp.einsum("bd,bde->be", x, chosen))


def test_a_users_model_declares_its_routing_and_the_report_counts_active_parameters():
    report = xla_cost.analyze(TopOneMoE(), jax.ShapeDtypeStruct((B, D), jnp.float32), optimizer="sgd",
                              counter="jaxpr")
    router, experts, head = D * E + E, E * D * D, D * 3 + 3
    assert report.parameters == router + experts + head
    assert report.active_parameters == router + experts * K // E + head  # one expert of four read per example
    assert not any(n.startswith("mixture of experts") for n in report.notes)  # no capacity, no padding to tell


def test_capacity_padding_note_and_refusals():
    padded = xla_cost.Routing("experts/", experts=8, top_k=2, capacity=5, group_tokens=16, layers=3)
    assert padded.slots == 40 and padded.padding == pytest.approx(1 - 2 * 16 / 40)
    (note,) = routing_notes([padded])
    assert "3 routed layers" in note and "32 assignments for E x C = 8 x 5 = 40" in note and "at least 20.0%" in note
    short = xla_cost.Routing("experts/", experts=8, top_k=2, capacity=3, group_tokens=16)
    assert "at least 25.0% of the routed assignments are dropped" in routing_notes([short])[0]  # 1 - 24/32
    params = {"experts": {"w": jnp.zeros((8, 2, 2))}, "other": {"w": jnp.zeros((3,))}}
    assert active_parameters(params, [padded]) == 8 * 4 * 2 // 8 + 3
    assert active_parameters(params, []) is None  # nothing declared: unknown, not "all of them"
    with pytest.raises(xla_cost.InputError, match="every routing pattern to match some parameter path"):
        active_parameters(params, [xla_cost.Routing("expert_weights/", experts=8, top_k=2)])
    with pytest.raises(xla_cost.InputError, match="1 <= top_k <= experts"):
        declared_routing(type("M", (), {"xla_cost_routing": xla_cost.Routing("e/", experts=2, top_k=3)})(), None)
    with pytest.raises(xla_cost.InputError, match="both given"):
        xla_cost.Routing("e/", experts=2, top_k=1, capacity=4).check()


# A top-2-of-4 mixture of experts as a repository writes it (GShard / V-MoE): a router, top_k, one-hot
# dispatch into C capacity slots per expert, the experts' kernels stacked [E, D, H], a combine back.
# Nothing declared: the report says it routes, and what that leaves uncounted.
S, H, K2 = 6, 12, 2
C = 4  # slots per expert: E * C = 16 for S * K2 = 12 assignments


class Experts(nn.Module):
    @nn.compact
    def __call__(self, slots):  # [E, C, D] -> [E, C, D]
        w_in = self.param("w_in", nn.initializers.lecun_normal(), (E, D, H))
        w_out = self.param("w_out", nn.initializers.lecun_normal(), (E, H, D))
        return jnp.einsum("ech,ehd->ecd", jax.nn.relu(jnp.einsum("ecd,edh->ech", slots, w_in)), w_out)


class UndeclaredMoE(nn.Module):
    """S tokens routed to top K2 of E experts through [S, E, C] dispatch and combine masks."""

    @nn.compact
    def __call__(self, x):  # [S, D]
        gates = jax.nn.softmax(nn.Dense(E, use_bias=False, name="router")(x))
        weights, chosen = jax.lax.top_k(gates, K2)  # [S, K2]
        mask = jax.nn.one_hot(chosen, E).sum(axis=1)  # [S, E]
        position = (jnp.cumsum(mask, axis=0) - 1) * mask
        dispatch = jax.nn.one_hot(position.astype(jnp.int32), C) * mask[..., None]  # [S, E, C]
        combine = dispatch * (gates * mask)[..., None]
        out = Experts(name="experts")(jnp.einsum("sec,sd->ecd", dispatch, x))
        return jnp.einsum("sec,ecd->sd", combine, out)


class ExpertChoiceMoE(nn.Module):
    """Each of the E experts takes its top C tokens (expert choice, Zhou et al. 2022): a top_k over the
    tokens of the router's [E, S] transposed gates."""

    @nn.compact
    def __call__(self, x):  # [S, D]
        gates = jax.nn.softmax(nn.Dense(E, use_bias=False, name="router")(x))
        weights, tokens = jax.lax.top_k(gates.T, C)  # [E, C]
        dispatch = jax.nn.one_hot(tokens, S)  # [E, C, S]
        out = Experts(name="experts")(jnp.einsum("ecs,sd->ecd", dispatch, x))
        return jnp.einsum("ecs,ec,ecd->sd", dispatch, weights, out)


class DeclaredMoE(UndeclaredMoE):
    xla_cost_routing = (xla_cost.Routing(r"(^|/)experts/", experts=E, top_k=K2, capacity=C, group_tokens=S),)


class TopKMetricsMLP(nn.Module):
    """A dense model with a top_k over its logits (top-2 predictions): the vocabulary V, which the
    embedding table's rows (a two-axed [V, D] table, no stack of experts) match."""

    @nn.compact
    def __call__(self, tokens):  # [S] int
        embed = nn.Embed(V, D, name="embed")
        logits = embed.attend(jax.nn.relu(nn.Dense(D, name="mlp")(embed(tokens))))  # [S, V]
        return logits, jax.lax.top_k(logits, 2)[1]


V = 16


def _routing_notes(report):
    return [n for n in report.notes if n.startswith("routed experts not declared")]


def test_an_undeclared_mixture_of_experts_is_said_and_a_declared_one_is_not():
    x = jax.ShapeDtypeStruct((S, D), jnp.float32)
    (note,) = _routing_notes(xla_cost.analyze(UndeclaredMoE(), x, optimizer="sgd", counter="jaxpr"))
    assert f"routes tokens to {E} experts (top_k in UndeclaredMoE;" in note  # where it routes, where the weights are
    assert f"stacked along a leading axis of {E} in experts)" in note
    assert "active parameters are not computed" in note and "capacity padding" in note
    assert "dispatch and combine products" in note and "xla_cost_routing" in note and "docs/api.md#" in note
    (chosen,) = _routing_notes(xla_cost.analyze(ExpertChoiceMoE(), x, optimizer="sgd", counter="jaxpr"))
    assert f"routes tokens to {E} experts (top_k of the tokens per expert in ExpertChoiceMoE;" in chosen
    declared = xla_cost.analyze(DeclaredMoE(), x, optimizer="sgd", counter="jaxpr")
    assert not _routing_notes(declared) and declared.active_parameters is not None
    dense = xla_cost.analyze(TopKMetricsMLP(), jax.ShapeDtypeStruct((S,), jnp.int32), optimizer="sgd",
                             loss=lambda out, _: jnp.mean(out[0]), counter="jaxpr")
    assert not _routing_notes(dense)


def test_a_step_of_an_undeclared_mixture_of_experts_is_said_and_an_argmax_router_too():
    """analyze_step's report says it as analyze's does; an argmax router (`TopOneMoE`'s, its expert's
    kernel gathered from the stack) is found by its index reaching the experts' product."""
    x = jax.ShapeDtypeStruct((S, D), jnp.float32)

    def step_of(model):
        def step(params, x):
            grads = jax.grad(lambda p: jnp.sum(model.apply(p, x) ** 2))(params)
            return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
        return step, jax.eval_shape(model.init, jax.random.key(0), x)

    (note,) = _routing_notes(xla_cost.analyze_step(*step_of(UndeclaredMoE()), x, counter="jaxpr"))
    assert f"routes tokens to {E} experts (top_k in UndeclaredMoE;" in note and f"axis of {E} in experts)" in note
    assert not _routing_notes(xla_cost.analyze_step(*step_of(DeclaredMoE()), x, counter="jaxpr"))

    class UndeclaredTopOne(TopOneMoE):
        xla_cost_routing = None

    (note,) = _routing_notes(xla_cost.analyze(UndeclaredTopOne(), jax.ShapeDtypeStruct((B, D), jnp.float32),
                                              optimizer="sgd", counter="jaxpr"))
    assert f"routes tokens to {E} experts (argmax in UndeclaredTopOne;" in note
    assert not _routing_notes(xla_cost.analyze(TopOneMoE(), jax.ShapeDtypeStruct((B, D), jnp.float32),
                                               optimizer="sgd", counter="jaxpr"))


# The zoo's mixture of experts, small: 2 scanned layers of 4 experts of 16, top 2, d 32, T 16.
MIXTRAL = {"vocab_size": 64, "seq_len": 16, "n_layer": 2, "n_head": 2, "n_kv_head": 1, "d_model": 32, "d_ff": 16,
           "n_experts": 4, "top_k": 2, "capacity_factor": 1.25, "scan_layers": True}


@pytest.mark.parametrize("dispatch", ["einsum", "gather"])
def test_the_zoos_mixtral_declares_its_routing_and_is_found_without_it(dispatch):
    """The zoo's Mixtral declares its routing: no note. The same model with its declaration taken away
    is found routing, in both dispatches, its experts' weights a scanned stack [layers, E, d, f]."""
    from xla_cost.zoo import build_model, example_inputs

    model = build_model("mixtral-8x7b", dispatch=dispatch, **MIXTRAL)
    inputs = example_inputs("mixtral-8x7b", 1, **MIXTRAL)
    if dispatch == "einsum":
        declared = xla_cost.analyze(model, inputs, optimizer="sgd", counter="jaxpr")
        assert declared.active_parameters is not None and not _routing_notes(declared)
    fields = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
              if f.init and f.name not in ("parent", "name")}
    undeclared = type("Undeclared", (type(model),), {"xla_cost_routing": None})(**fields)
    (note,) = _routing_notes(xla_cost.analyze(undeclared, inputs, optimizer="sgd", counter="jaxpr"))
    assert f"routes tokens to {MIXTRAL['n_experts']} experts (top_k in Undeclared/" in note and "/experts)" in note


class _ExpertMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(D, use_bias=False, name="w2")(nn.silu(nn.Dense(H, use_bias=False, name="w1")(x)))


class ListedExpertsMoE(nn.Module):
    """Flax Mixtral ports' layer (transformers' FlaxMixtralSparseMoeBlock, EasyDeL's before its stacked
    experts): E expert MLPs as modules of their own, each run on every token and its output masked by the
    top-K routing weights."""

    def setup(self):
        self.gate = nn.Dense(E, use_bias=False)
        self.experts = [_ExpertMLP(name=f"experts_{i}") for i in range(E)]

    def __call__(self, x):  # [S, D]
        weights, chosen = jax.lax.top_k(self.gate(x), K2)
        weights = jax.nn.softmax(weights, axis=-1)
        out = jnp.zeros_like(x)
        for i, expert in enumerate(self.experts):
            out = out + jnp.sum(jnp.where(chosen == i, weights, 0.0), -1, keepdims=True) * expert(x)
        return out


class ListedMoENet(nn.Module):
    @nn.compact
    def __call__(self, x):
        return ListedExpertsMoE(name="moe")(x)


class DeclaredListedMoENet(ListedMoENet):
    xla_cost_routing = (xla_cost.Routing(r"experts_\d+/", experts=E, top_k=K2),)


def test_experts_written_as_modules_of_their_own_are_a_routing_too():
    x = jax.ShapeDtypeStruct((S, D), jnp.float32)
    report = xla_cost.analyze(ListedMoENet(), x, optimizer="sgd", counter="jaxpr")
    (note,) = _routing_notes(report)
    assert f"routes tokens to {E} experts (top_k in ListedMoENet/moe;" in note
    assert f"the experts are {E} modules of their own, moe/experts_0 .. experts_{E - 1})" in note
    assert "on every token where its output is masked" in note
    # every expert runs on every token: the FLOP are dense, E (not K2) expert MLPs of 2 * S * D * H FLOP each
    # per product; the router's S * D * E products beside them
    assert report.phases["forward"].flops >= E * 2 * (2 * S * D * H) + 2 * S * D * E
    declared = xla_cost.analyze(DeclaredListedMoENet(), x, optimizer="sgd", counter="jaxpr")
    assert not _routing_notes(declared)
    # the experts' 2 D H each, K2 of E of them a token's; the gate's D E whole
    assert declared.active_parameters == E * 2 * D * H * K2 // E + D * E


def test_an_estimate_of_an_undeclared_mixture_of_experts_says_so_beside_its_mfu():
    # its MFU counts every expert's work (here on every token): the estimate says what its analysis said
    estimate = xla_cost.estimate(ListedMoENet(), samples=10 * S, batch_size=S, input_shape=(S, D))
    (note,) = _routing_notes_of(estimate.notes())
    assert f"the experts are {E} modules of their own" in note
    [mfu] = [n for n in estimate.notes() if n.startswith("MFU and HFU:")]
    assert "capacity padding" not in mfu  # (HFU's alone where a declared routing says its padding)
    declared = xla_cost.estimate(DeclaredListedMoENet(), samples=10 * S, batch_size=S, input_shape=(S, D))
    assert not _routing_notes_of(declared.notes())


def _routing_notes_of(notes):
    return [n for n in notes if n.startswith("routed experts not declared")]
