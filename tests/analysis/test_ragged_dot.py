"""``jax.lax.ragged_dot``, a mixture of experts' grouped matmul, has a rule.

A fifth new user's gather-dispatch MoE (tokens sorted by expert, each expert's rows
multiplied by its own matrix) was reported at 3.9x its forward FLOP: XLA's CPU compiler
makes a ragged_dot dense (every row times every group's matrix, G times the products),
and the primitive had no rule, so the jaxpr count could not stand in, the MoE row left
its products out with no mark and a step's note blamed XLA's fusions.

A ragged_dot of lhs [M, K] and G matrices [G, K, N] is 2 M K N FLOP (each row meets its
own group's matrix once); its weight gradient (ragged in the contraction) and its input
gradient are 2 M K N each. The jaxpr count stands where XLA's figure carries the
expansion (`xla_cost.analysis.costs.densified_flops`), and a note says so.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

import xla_cost
from xla_cost.count.interpret import count_function
from xla_cost.present.units import size as bytes_text

M, K, N, G = 64, 32, 48, 4  # rows, contraction, columns, groups
PRODUCT = 2 * M * K * N  # one ragged_dot: every row times its group's K x N matrix


def _sds(*shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


def test_a_ragged_dot_and_its_two_gradients_are_2_m_k_n_each():
    lhs, rhs, sizes = _sds(M, K), _sds(G, K, N), _sds(G, dtype=jnp.int32)
    forward = count_function(lambda a, b, s: jax.lax.ragged_dot(a, b, s), lhs, rhs, sizes)
    assert forward.unsupported == {} and forward.total.flops == PRODUCT
    assert forward.dense_expansion.flops == (G - 1) * PRODUCT  # what a compiler making it dense adds

    def grads(a, b, s, t):  # the VJP: d lhs (rhs grouped, contracted over N), d rhs (ragged contraction over M)
        _, vjp = jax.vjp(lambda x, y: jax.lax.ragged_dot(x, y, s), a, b)
        return vjp(t)

    backward = count_function(grads, lhs, rhs, sizes, _sds(M, N))  # the forward's output is dead: not counted
    assert {e.primitive for e in backward.equations if e.cost.flops} == {"ragged_dot_general"}
    assert backward.unsupported == {} and backward.total.flops == 2 * PRODUCT



def test_constant_group_sizes_count_the_grouped_rows_exactly_and_traced_ones_are_noted_as_a_bound():
    """Rows past sum(group_sizes) belong to no group: with constant sizes covering half the rows a ragged_dot
    is 2 sum(group_sizes) K N, and so are its two gradients (was: 2 M K N each, every row); with sizes
    computed at run time 2 M K N stays, an upper bound, and a note says so (was: no word)."""
    import numpy as np

    sizes = np.full(G, M // (2 * G), np.int32)  # G groups of M / 2G rows: half the M rows in a group
    grouped = int(sizes.sum())  # M / 2
    lhs, rhs = _sds(M, K), _sds(G, K, N)

    def grads(a, b, t):
        _, vjp = jax.vjp(lambda x, y: jax.lax.ragged_dot(x, y, jnp.asarray(sizes)), a, b)
        return vjp(t)

    forward = count_function(lambda a, b: jax.lax.ragged_dot(a, b, jnp.asarray(sizes)), lhs, rhs)
    assert forward.total.flops == 2 * grouped * K * N and forward.notes == ()
    backward = count_function(grads, lhs, rhs, _sds(M, N))  # d lhs and d rhs, 2 sum(sizes) K N each
    assert backward.total.flops == 2 * (2 * grouped * K * N) and backward.notes == ()
    traced = count_function(lambda a, b, s: jax.lax.ragged_dot(a, b, s), lhs, rhs, _sds(G, dtype=jnp.int32))
    assert traced.total.flops == PRODUCT
    assert any("group_sizes computed at run time" in n and "an upper bound" in n for n in traced.notes)


D, F, EXPERTS, TOP, TOKENS = 32, 48, 4, 2, 16
ROUTED = 2 * (2 * (TOKENS * TOP) * D * F)  # two ragged_dots (up, down) over the TOKENS x TOP routed rows


class Experts(nn.Module):
    """Each expert's two matrices; rows sorted by expert, ``sizes`` rows each."""

    @nn.compact
    def __call__(self, rows, sizes):
        wi = self.param("wi", nn.initializers.lecun_normal(), (EXPERTS, D, F))
        wo = self.param("wo", nn.initializers.lecun_normal(), (EXPERTS, F, D))
        return jax.lax.ragged_dot(nn.relu(jax.lax.ragged_dot(rows, wi, sizes)), wo, sizes)


class RaggedMoE(nn.Module):
    """Top-2 routing, the routed rows sorted by expert and multiplied by their experts' matrices."""

    @nn.compact
    def __call__(self, x):
        logits = nn.Dense(EXPERTS, use_bias=False, name="router")(x)
        weights, experts = jax.lax.top_k(jax.nn.softmax(logits), TOP)
        flat = experts.reshape(-1)
        order = jnp.argsort(flat)
        sizes = jnp.bincount(flat, length=EXPERTS).astype(jnp.int32)
        out = Experts(name="experts")(jnp.repeat(x, TOP, axis=0)[order], sizes)
        out = jnp.zeros_like(out).at[order].set(out).reshape(TOKENS, TOP, D)
        return nn.Dense(10, name="head")((out * weights[..., None]).sum(axis=1))


def test_a_ragged_moe_is_counted_from_its_jaxpr_with_its_products_in_its_row():
    report = xla_cost.analyze(RaggedMoE(), _sds(TOKENS, D), optimizer="sgd", per_layer=True,
                              compilation_cache=False)
    forward = report.phases["forward"]
    # XLA's CPU figure holds every group's products for every row; the count is the model's
    assert forward.sources["flops"] == "jaxpr" and forward.flops == forward.jaxpr_flops
    assert forward.xla_flops > 2 * forward.flops
    assert any("made the grouped products" in n and "ragged_dot" in n for n in report.notes)
    assert not any("ragged_dot_general" in n for n in report.notes)  # no primitive without a rule
    # the router's bincount gives the group sizes at run time: the count is an upper bound, and says so
    assert any(n.startswith("forward: ragged_dot with group_sizes computed at run time") for n in report.notes)
    experts = next(layer for layer in report.layers if layer.path == "experts")
    # the experts' row: the two ragged_dots and the ReLU between them (TOKENS x TOP x F compares and selects)
    assert ROUTED <= experts.forward_flops <= ROUTED + 2 * TOKENS * TOP * F, experts.forward_flops
    # its backward: the down projection's input and weight gradients, the up projection's weight gradient (its
    # input, routed tokens of the model's input, needs none), the ReLU's
    assert 3 * ROUTED // 2 <= experts.backward_flops <= 3 * ROUTED // 2 + 2 * TOKENS * TOP * F
    # the products run on the matrix units: the router's, the experts' and the head's
    assert forward.matmul_flops == ROUTED + 2 * TOKENS * D * EXPERTS + 2 * TOKENS * D * 10


def test_a_targets_dense_ragged_dot_is_hardware_flop_not_model_flop():
    """A GPU target's compiler makes a ragged_dot dense too (every row times every group's matrix): that
    is its program's work, so flops and hardware_flops keep it, but model_flops (MFU's numerator) is the
    model's arithmetic, 2 M K N, and a note says which is which (was: G x 2 M K N as model_flops, no note)."""
    groups, rows = 16, 128  # enough groups that the dense form stands out of the count
    report = xla_cost.analyze(lambda p, xs: jax.lax.ragged_dot(xs[0], p["w"], xs[1]),
                              (_sds(rows, K), _sds(groups, dtype=jnp.int32)), params={"w": _sds(groups, K, N)},
                              optimizer="sgd", loss=lambda o, t: jnp.sum(o), target="h100", compilation_cache=False)
    forward = report.phases["forward"]
    model = 2 * rows * K * N + (rows * N - 1)  # the ragged_dot's products, and the loss's sum of its rows x N outputs
    assert forward.model_flops == model
    assert forward.hardware_flops == forward.flops > (groups // 2) * model  # the program's dense G x products
    assert any(n.startswith("forward: the compiled program computes the grouped products") and "ragged_dot" in n
               and f"the jaxpr count ({model:,})" in n for n in report.notes)


def test_the_cpus_dense_ragged_dot_buffers_at_the_peak_are_noted():
    """XLA's CPU program computes a ragged_dot's gradients densely: its peak holds G x the cotangent [M, N]
    and G x the lhs [M, K]. The peak is that program's real one; a memory note says which buffers are the
    dense form and how large (was: the workspace held them with no word)."""
    report = xla_cost.analyze(lambda p, xs: jax.lax.ragged_dot(xs[0], p["w"], xs[1]),
                              (_sds(M, K), _sds(G, dtype=jnp.int32)), params={"w": _sds(G, K, N)},
                              optimizer="sgd", loss=lambda o, t: jnp.sum(o), memory=True, compilation_cache=False)
    breakdown = report.memory_breakdown
    dense = G * M * N * 4 + G * M * K * 4  # f32[G, M, N] and f32[G, M, K]: the dense input and weight gradients
    note = next(n for n in breakdown.notes if "expands ragged_dot densely" in n)
    assert f"ragged_dot's lhs or result {G} times over" in note and f"{bytes_text(dense)} in all" in note
    assert breakdown.at_peak["workspace"] >= dense  # in the peak as compiled, not taken out of it


def test_analyze_steps_memory_notes_the_cpus_dense_ragged_dot_buffers_at_the_peak_too():
    """analyze_step's memory of a train step over the same ragged_dot says which buffers at XLA's peak are the
    dense form, as analyze's does (was: no word: its compile replayed no schedule)."""
    opt = optax.sgd(0.1)

    @jax.jit
    def step(params, opt_state, x, sizes):
        loss, grads = jax.value_and_grad(lambda p: jnp.sum(jax.lax.ragged_dot(x, p["w"], sizes)))(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    params = {"w": _sds(G, K, N)}
    report = xla_cost.analyze_step(step, params, jax.eval_shape(opt.init, params), _sds(M, K),
                                   _sds(G, dtype=jnp.int32), memory=True)
    dense = G * M * N * 4 + G * M * K * 4  # f32[G, M, N] and f32[G, M, K]: the dense input and weight gradients
    note = next(n for n in report.memory_breakdown.notes if "expands ragged_dot densely" in n)
    assert f"ragged_dot's lhs or result {G} times over" in note and f"{bytes_text(dense)} in all" in note


class RaggedContraction(nn.Module):
    """A ragged_dot_general ragged in its contraction (the rows split into G groups, each group's product
    apart): its forward traces, but jax has no gradient of it in that mode."""

    @nn.compact
    def __call__(self, x):  # [M, K] -> [K, N], summed over the groups
        w = self.param("w", nn.initializers.lecun_normal(), (M, N))
        numbers = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(([1], [0]), ([], [])),
                                                    lhs_ragged_dimensions=[1], rhs_group_dimensions=[])
        return jax.lax.ragged_dot_general(x.T, w, jnp.full((G,), M // G, jnp.int32), numbers).sum(axis=0)


def test_a_model_jax_cannot_differentiate_is_refused_in_one_line():
    """A failure while differentiating the model is an InputError saying so, as a forward failure is
    (was: jax's own NotImplementedError from inside the analysis)."""
    import pytest

    from xla_cost.errors import InputError

    with pytest.raises(InputError, match="while differentiating the model") as refused:
        xla_cost.analyze(RaggedContraction(), _sds(M, K), optimizer="sgd", loss=lambda o, t: o.sum(),
                         counter="jaxpr")
    assert "NotImplementedError" in str(refused.value) and "\n" not in str(refused.value)
    assert isinstance(refused.value.__cause__, NotImplementedError)


def test_a_rule_less_primitive_beside_the_cpus_dense_ragged_dot_bounds_the_flops_below_xlas_less_the_expansion():
    """XLA's CPU figure stands where the jaxpr count is incomplete (a primitive without a rule: here
    rng_bit_generator), and it holds the dense ragged_dot's G - 1 extra products: the model's FLOP are at
    least that figure less them, and the notes say so together (was: "flops at least" XLA's whole figure,
    beside "XLA's flops include up to ... more than the model's")."""
    groups, rows = 16, 128  # enough groups that the dense form stands out of the count

    def noisy(p, xs):
        _, bits = jax.lax.rng_bit_generator(xs[2], (rows, K), dtype=jnp.uint32)
        return jax.lax.ragged_dot(xs[0] + bits.astype(jnp.float32), p["w"], xs[1])

    report = xla_cost.analyze(noisy, (_sds(rows, K), _sds(groups, dtype=jnp.int32), _sds(4, dtype=jnp.uint32)),
                              params={"w": _sds(groups, K, N)}, optimizer="sgd", loss=lambda o, t: jnp.sum(o),
                              compilation_cache=False)
    assert report.unsupported == {"rng_bit_generator": 1}
    forward = report.phases["forward"]
    assert forward.sources["flops"] == "xla" and forward.flops == forward.xla_flops
    excess = (groups - 1) * 2 * rows * K * N  # the dense form: every row times the G - 1 other groups' matrices
    assert any(n.startswith("forward: XLA's flops") and f"up to {excess:,} FLOP more than the model's" in n
               for n in report.notes)
    bound = next(n for n in report.notes if n.startswith("forward: flops at least"))
    assert bound.startswith(f"forward: flops at least {forward.flops - excess:,} (XLA's {forward.flops:,} less")
