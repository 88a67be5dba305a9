"""Routed parameters a model declares (`xla_cost.Routing`): active parameters and the padding note.

A user's own mixture of experts, not a zoo model: E experts of one Dense layer each,
vmapped over a leading expert axis, a router, and a top-k gather. Expected figures
are written from its dimensions.
"""

from __future__ import annotations

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
