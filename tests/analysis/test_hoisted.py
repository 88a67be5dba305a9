"""A scanned model's backward pass when jax's scan partial evaluation hoists the forward's
loop-invariant work out of the loop in the grad program (`xla_cost.count.hoisted`): backward is the
grad program's work beyond its own forward share, never negative."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
import pytest
from flax.training import train_state

import xla_cost
from xla_cost.analysis.costs import without_negatives
from xla_cost.zoo import build_model, example_inputs

# tests/zoo/test_llama.py's tiny Llama: head_dim h = d_model / n_head = 16.
TINY = {"vocab_size": 128, "seq_len": 16, "n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 2, "d_ff": 96}


@pytest.fixture(scope="module")
def reports():
    def run(scan: bool) -> xla_cost.Report:
        model = build_model("llama3-8b", scan_layers=scan, **TINY)
        return xla_cost.analyze(model, example_inputs("llama3-8b", 1, **TINY), optimizer="sgd", counter="jaxpr",
                                per_layer=True)
    return run(True), run(False)


def test_scanned_backward_adds_back_the_hoisted_rope_and_mask(reports):
    scanned, unrolled = reports
    t, n_layer, h = TINY["seq_len"], TINY["n_layer"], TINY["d_model"] // TINY["n_head"]
    # Each layer's rotary embedding, applied to q and to k: angles = positions (T converts) x
    # frequencies (T h/2 multiplies), then sin and cos (T h/2 transcendentals each); its causal mask,
    # (j <= i) & ones: 2 T^2 elementwise operations. The grad program computes them once before the
    # loop, the forward program once per layer: n_layer - 1 runs fewer.
    hoisted_transcendentals = (n_layer - 1) * 2 * 2 * t * (h // 2)
    hoisted_flops = (n_layer - 1) * (2 * (t + t * (h // 2)) + 2 * t * t)
    fwd, grad, bwd = (scanned.phases[p] for p in ("forward", "grad", "backward"))
    assert fwd.transcendentals - grad.transcendentals == hoisted_transcendentals  # grad - forward < 0 before
    assert bwd.transcendentals == grad.transcendentals - fwd.transcendentals + hoisted_transcendentals == 0
    assert bwd.flops == grad.flops - fwd.flops + hoisted_flops
    assert bwd.jaxpr_transcendentals == 0 and bwd.model_flops == bwd.flops
    # The unrolled stack hoists nothing (no loop): its backward needs no transcendental either, and
    # its FLOP agree with the scanned one's within the few integer operations the two stacks differ by.
    assert unrolled.phases["backward"].transcendentals == 0
    assert abs(unrolled.phases["backward"].flops - bwd.flops) <= t
    assert not any("loop-invariant" in note for note in unrolled.notes)
    assert any(note.startswith("backward: the grad program computes") and f"{hoisted_flops:,} FLOP and "
               f"{hoisted_transcendentals:,} transcendentals" in note for note in scanned.notes)


def test_the_rows_backward_adds_up_to_the_phase_and_none_is_negative(reports):
    scanned = reports[0]
    backward = scanned.phases["backward"]
    rows = {row.path: row for row in scanned.layers}
    assert sum(row.backward_flops for row in rows.values()) == backward.jaxpr_flops
    assert sum(row.backward_transcendentals for row in rows.values()) == backward.jaxpr_transcendentals == 0
    # the rope and the mask are the attention module's own work (was: -512 transcendentals in its row)
    assert all(row.backward_flops >= 0 and row.backward_transcendentals >= 0 for row in rows.values())
    assert rows["layers/self_attn"].backward_transcendentals == 0


def _step_report(scan: bool) -> xla_cost.Report:
    model = build_model("llama3-8b", scan_layers=scan, **TINY)
    tokens = example_inputs("llama3-8b", 1, **TINY)
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), tokens)
    state = train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optax.sgd(0.1))

    def step(state, tokens):
        def loss(params):
            return state.apply_fn({"params": params}, tokens).astype(jnp.float32).mean()
        value, grads = jax.value_and_grad(loss)(state.params)
        return state.apply_gradients(grads=grads), value

    return xla_cost.analyze_step(step, state, tokens, counter="jaxpr")


def test_a_steps_hoisted_invariants_are_its_forward():
    """In the model's own train step the hoisted rope and mask (no jvp on their name stack) are
    forward work, once: not ``other`` with a note of a second forward pass outside the gradient."""
    scanned, unrolled = _step_report(True), _step_report(False)
    t, n_layer, h = TINY["seq_len"], TINY["n_layer"], TINY["d_model"] // TINY["n_head"]
    hoisted_transcendentals = (n_layer - 1) * 2 * 2 * t * (h // 2)  # as above: the runs the scan saves
    assert scanned.phases["other"].transcendentals == 0  # was 2 * 2 * T * h/2 = 512
    assert not any("outside the gradient" in note for note in scanned.notes)
    assert scanned.phases["forward"].transcendentals == unrolled.phases["forward"].transcendentals \
        - hoisted_transcendentals


def test_a_negative_derived_count_is_unknown_and_noted(reports):
    backward = dataclasses.replace(reports[0].phases["backward"], transcendentals=-512)
    fixed, notes = without_negatives("backward", backward)
    assert fixed.transcendentals is None and fixed.flops == backward.flops
    assert notes == ["backward: transcendentals unknown: its formula gives -512 (below zero: the programs it is "
                     "derived from do not split as the formula assumes)"]


def test_a_modules_own_scan_hoisting_a_parameters_invariant_adds_it_back():
    # a decay recurrence as a module writes it: exp(w) of a parameter of D inside its own lax.scan over T
    # steps. The forward program runs it T times (T * D transcendentals); jax's grad runs it once, outside
    # the loop and outside every scope. backward = grad - forward adds the T - 1 runs back: no exp in the
    # backward pass (it read -(T - 1) * D), and no row below zero
    import flax.linen as nn

    batch, steps, width = 2, 8, 16

    class Decay(nn.Module):
        @nn.compact
        def __call__(self, x):
            u = nn.Dense(width, use_bias=False, name="inp")(x)
            w = self.param("w", nn.initializers.zeros, (width,))

            def body(h, ut):
                h = jnp.exp(w)[None] * h + ut
                return h, h

            return jnp.swapaxes(jax.lax.scan(body, jnp.zeros((batch, width)), jnp.swapaxes(u, 0, 1))[1], 0, 1)

    report = xla_cost.analyze(Decay(), jax.ShapeDtypeStruct((batch, steps, width), jnp.float32), optimizer="sgd",
                              loss=lambda o, t: jnp.mean(o ** 2), per_layer=True)
    assert report.phases["forward"].transcendentals == steps * width
    assert report.phases["backward"].transcendentals == 0
    assert all(row.backward_transcendentals >= 0 for row in report.layers)
    assert any(f"exp at <top> x{steps}" in n for n in report.notes)
