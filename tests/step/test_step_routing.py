"""analyze_step on an NNX mixture of experts that declares its routing (`xla_cost.Routing`): the step's
active parameters and capacity note are the model's, as `xla_cost.analyze` gives them (was: none)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

import xla_cost

B, T, D, F, E, K = 2, 8, 16, 32, 4, 2


class TinyMoE(nnx.Module):
    """A router over E experts (one [E, D, F] and one [E, F, D] weight), each token's output the
    sum of its top-K experts' (computed for every expert and masked: every slot computed)."""

    def __init__(self, rngs: nnx.Rngs):
        self.router = nnx.Linear(D, E, use_bias=False, rngs=rngs)
        self.w_in = nnx.Param(jax.random.normal(rngs.params(), (E, D, F)))
        self.w_out = nnx.Param(jax.random.normal(rngs.params(), (E, F, D)))

    def __call__(self, x):
        weights, chosen = jax.lax.top_k(jax.nn.softmax(self.router(x)), K)
        gate = jnp.sum(jax.nn.one_hot(chosen, E) * weights[..., None], axis=-2)  # [B, T, E]
        hidden = jax.nn.relu(jnp.einsum("btd,edf->btef", x, self.w_in[...]))
        return jnp.einsum("btef,efd,bte->btd", hidden, self.w_out[...], gate)

    def xla_cost_routing(self, inputs):
        return [xla_cost.Routing(r"^w_", E, K, capacity=T, group_tokens=T)]


def _step_and_analysis(module: type, optimizer: str = "sgd") -> tuple[xla_cost.Report, xla_cost.Report]:
    """``analyze_step`` of a step (``optimizer``: sgd or adam) on the mean square of ``module``'s output,
    and ``analyze`` of the same."""
    model = nnx.eval_shape(lambda: module(nnx.Rngs(0)))
    transform = optax.adam(1e-3) if optimizer == "adam" else optax.sgd(0.1)
    state = nnx.eval_shape(lambda: nnx.Optimizer(module(nnx.Rngs(0)), transform, wrt=nnx.Param))
    x = jax.ShapeDtypeStruct((B, T, D), jnp.float32)

    @nnx.jit
    def train_step(model, optimizer, x):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean(m(x) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    report = xla_cost.analyze_step(train_step, model, state, x, counter="jaxpr")
    analysed = xla_cost.analyze(model, x, optimizer=optimizer, loss=lambda y, _: jnp.mean(y ** 2),
                                targets=x, counter="jaxpr")
    return report, analysed


def test_the_step_of_a_routed_nnx_model_has_the_models_active_parameters():
    report, analysed = _step_and_analysis(TinyMoE, "adam")
    total = D * E + 2 * E * D * F
    # a token reads K of the E experts' weights, and the whole router
    assert (report.parameters, report.active_parameters) == (total, D * E + 2 * K * D * F)
    # T tokens a group, K assignments each, for E x C = E x T slots: 1 - K/E of them padding
    note = next(n for n in report.notes if n.startswith("mixture of experts"))
    assert f"makes {K * T} assignments for E x C = {E} x {T} = {E * T} expert slots" in note
    assert f"at least {1 - K / E:.1%}" in note
    assert analysed.active_parameters == report.active_parameters


class Experts(nnx.Module):
    """E experts' weights, one [E, D, F] and one [E, F, D], in a module of their own."""

    def __init__(self, rngs: nnx.Rngs):
        self.w_in = nnx.Param(jax.random.normal(rngs.params(), (E, D, F)))
        self.w_out = nnx.Param(jax.random.normal(rngs.params(), (E, F, D)))

    def __call__(self, x):  # [B, T, D] -> [B, T, E, D]: every token through every expert
        hidden = jax.nn.relu(jnp.einsum("btd,edf->btef", x, self.w_in[...]))
        return jnp.einsum("btef,efd->bted", hidden, self.w_out[...])


class PaddedMoE(nnx.Module):
    """Every token through every expert (E x C slots with C = T, filled or not), its top-K gated in."""

    def __init__(self, rngs: nnx.Rngs):
        self.router = nnx.Linear(D, E, use_bias=False, rngs=rngs)
        self.experts = Experts(rngs)

    def __call__(self, x):
        weights, chosen = jax.lax.top_k(jax.nn.softmax(self.router(x)), K)
        gate = jnp.sum(jax.nn.one_hot(chosen, E) * weights[..., None], axis=-2)  # [B, T, E]
        return jnp.sum(self.experts(x) * gate[..., None], axis=2)

    def xla_cost_routing(self, inputs):
        return [xla_cost.Routing(r"experts/", E, K, capacity=T, group_tokens=T)]


def test_the_step_of_a_routed_nnx_model_leaves_capacity_padding_out_of_model_flops():
    """analyze_step's model FLOP leave the experts' products on capacity padding out, as analyze's do
    (was: analyze_step's model_flops were its flops, padding and all, beside the note saying it is padding)."""
    report, analysed = _step_and_analysis(PaddedMoE)
    padding = 1 - K * T / (E * T)  # 1 - k S / (E C): the share of the E x C slots no assignment fills
    experts = 2 * (2 * B * T * E * D * F)  # the forward's two expert products, every slot
    forward = report.phases["forward"]
    assert forward.flops - forward.model_flops == round(padding * experts)
    assert analysed.phases["forward"].flops - analysed.phases["forward"].model_flops == round(padding * experts)


class RootExperts(TinyMoE):
    """`PaddedMoE` with the experts' weights its own (the routed module is the model: parameters at the
    root, as `TinyMoE`'s), each expert's output a product of its own, then weighted by the gate."""

    def __call__(self, x):
        weights, chosen = jax.lax.top_k(jax.nn.softmax(self.router(x)), K)
        gate = jnp.sum(jax.nn.one_hot(chosen, E) * weights[..., None], axis=-2)  # [B, T, E]
        hidden = jax.nn.relu(jnp.einsum("btd,edf->btef", x, self.w_in[...]))
        return jnp.sum(jnp.einsum("btef,efd->bted", hidden, self.w_out[...]) * gate[..., None], axis=2)


def test_capacity_padding_of_experts_at_the_root_module_is_out_of_model_flops():
    """Experts whose weights the root module holds (path "") leave their padding out of model_flops, as
    in a submodule (was: the root's products read as the remainder's, model_flops = flops)."""
    padding = 1 - K * T / (E * T)  # 1 - k S / (E C)
    experts = 2 * (2 * B * T * E * D * F)  # the forward's two expert products, every slot
    report, analysed = _step_and_analysis(RootExperts)
    for result in (report, analysed):
        forward = result.phases["forward"]
        assert forward.flops - forward.model_flops == round(padding * experts)
        # the step: the forward's two products, the backward's three (w_out's weight and input gradients,
        # w_in's weight gradient: x takes none), each 2 B T E D F
        assert result.hardware_flops - result.model_flops == round(padding * (2 + 3) * (2 * B * T * E * D * F))
