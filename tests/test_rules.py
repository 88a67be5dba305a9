"""Cost rules and the jaxpr interpreter, each against a hand derivation."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost import rules
from xla_cost.interpret import SCAN_COUNTER_FLOPS, count_function

F32 = jnp.float32


def sds(*shape):
    return jax.ShapeDtypeStruct(shape, F32)


def test_dot_general_with_batch_dims():
    b, m, k, n = 3, 4, 5, 6
    counted = count_function(lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y), sds(b, m, k), sds(b, k, n))
    assert counted.total.flops == xla_cost.FLOPS_PER_FMA * b * m * k * n  # 2*b*m*k*n = 720


def test_conv_valid_positions_by_hand():
    # 3 taps, SAME padding (1, 1), 5 inputs, stride 1: 5*3 = 15 pairs, minus the
    # tap left of position 0 and the tap right of position 4: 13.
    assert rules.conv_valid_positions(5, 3, 5, padding=(1, 1)) == 13
    # stride 2, VALID: outputs (5-3)//2+1 = 2, every tap valid: 6.
    assert rules.conv_valid_positions(5, 3, 2, stride=2) == 6
    # input dilated by 2 (a transposed conv): 3 inputs become 5 positions with
    # holes at 1 and 3; a 1-tap kernel over 5 outputs hits 3 real inputs.
    assert rules.conv_valid_positions(3, 1, 5, lhs_dilation=2) == 3


def test_conv_and_its_gradients_match_xla():
    # The jaxpr count of a conv's forward and both gradients equals XLA's.
    def f(x, w):
        y = jax.lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.sum(y)

    args = (sds(2, 9, 9, 4), sds(3, 3, 4, 8))
    for fn in (f, jax.grad(f, argnums=(0, 1))):
        counted = count_function(fn, *args).total.flops
        compiled = jax.jit(fn).lower(*args).compile().cost_analysis()["flops"]
        assert counted == pytest.approx(compiled, rel=0.01)


def test_elementwise_and_transcendentals():
    n = 10
    counted = count_function(lambda x: jnp.exp(x) * 2.0 + jnp.tanh(x), sds(n)).total
    assert counted.flops == 2 * n  # mul, add
    assert counted.transcendentals == 2 * n  # exp, tanh


def test_scan_multiplies_body_by_length():
    length, d = 10, 4

    def f(x, w):
        return jax.lax.scan(lambda c, _: (c @ w, None), x, None, length=length)[0]

    counted = count_function(f, sds(d, d), sds(d, d))
    # length x (a d x d x d matmul + the loop counter's add and compare)
    assert counted.total.flops == length * (2 * d * d * d + SCAN_COUNTER_FLOPS)
    assert counted.loops[0].trip_count == length


def test_fori_loop_with_literal_bounds_and_unknown_while():
    d = 4

    def static(x):
        return jax.lax.while_loop(lambda c: c[0] < 7, lambda c: (c[0] + 1, c[1] @ x), (0, x))[1]

    counted = count_function(static, sds(d, d))
    # 7 iterations of a d^3 matmul (2*d^3 each) and the counter add, 8 compares
    assert counted.total.flops == 7 * (2 * d**3 + 1) + 8
    assert not counted.notes

    def dynamic(x, n):
        return jax.lax.fori_loop(0, n, lambda i, c: c @ x, x)

    counted = count_function(dynamic, sds(d, d), jax.ShapeDtypeStruct((), jnp.int32))
    assert counted.loops[0].trip_count is None
    assert "trip count unknown" in counted.notes[0]


def test_cond_charges_most_expensive_branch():
    d = 4
    counted = count_function(
        lambda p, x: jax.lax.cond(p, lambda x: x @ x, lambda x: x + 1.0, x),
        jax.ShapeDtypeStruct((), jnp.bool_), sds(d, d),
    )
    assert counted.total.flops == 2 * d**3 + 1  # the matmul, and bool -> index convert
    assert any("most expensive branch" in n for n in counted.notes)


def test_unknown_primitive_is_unsupported_not_zero():
    from jax.extend.core import Primitive

    mystery = Primitive("mystery_op")
    mystery.def_abstract_eval(lambda x: x)
    counted = count_function(lambda x: mystery.bind(x) + 1.0, sds(3))
    assert counted.unsupported == {"mystery_op": 1}
    assert counted.total.flops == 3  # the add only


def test_duplicate_registration_fails():
    with pytest.raises(rules.DuplicateRuleError, match="dot_general"):
        rules.register("dot_general")(lambda ins, outs, **_: rules.Cost())
    with pytest.raises(rules.DuplicateRuleError, match="reshape"):
        rules.register("reshape")(lambda ins, outs, **_: rules.Cost())
    with pytest.raises(TypeError, match="jax Primitive"):
        rules.register(42)


def test_name_stack_parsing():
    assert xla_cost.classify_pass("transpose(jvp(Net))/fc1") == "backward"
    assert xla_cost.classify_pass("jvp(Net)/fc1") == "forward"
    assert xla_cost.classify_pass("Net/fc1") is None
    assert xla_cost.module_path("transpose(jvp(Net))/block/fc1", "Net") == "block/fc1"


def xla_flops(fn, *args):
    costs = jax.jit(fn).lower(*args).compile().cost_analysis()
    return costs.get("flops", 0.0), costs.get("transcendentals", 0.0)


@pytest.mark.parametrize(
    "shape, window, strides",
    [
        ((1, 8, 8, 1), (2, 2), (2, 2)),  # rank 4, W = 4
        ((2, 9, 9, 3), (3, 3), (2, 2)),  # rank 4, W = 9, overlapping windows
        ((2, 9, 2), (3,), (1,)),  # rank 3
        ((1, 4, 4, 4, 1), (2, 2, 2), (2, 2, 2)),  # rank 5
    ],
)
def test_max_pool_gradient_as_xla_expands_it(shape, window, strides):
    import flax.linen as nn

    x = sds(*shape)
    pool = lambda x: jnp.sum(nn.max_pool(x, window, strides, "VALID"))  # noqa: E731
    counted = count_function(jax.grad(pool), x).total.flops
    # S source (pooled) elements, W window elements, operand rank r:
    # S * ((W - 1) * (r + SELECT_AND_SCATTER_STEP_OPS) + W)
    s = math.prod(jax.eval_shape(lambda x: nn.max_pool(x, window, strides, "VALID"), x).shape)
    w, r = math.prod(window), len(shape)
    assert counted == s * ((w - 1) * (r + rules.SELECT_AND_SCATTER_STEP_OPS) + w)
    assert counted == xla_flops(jax.grad(pool), x)[0]


EXPANDED = {
    "logistic": jax.lax.logistic, "erfc": jax.lax.erfc, "erf_inv": jax.lax.erf_inv,
    "lgamma": jax.lax.lgamma, "digamma": jax.lax.digamma, "sinh": jax.lax.sinh,
    "cosh": jax.lax.cosh, "asinh": jax.lax.asinh, "acosh": jax.lax.acosh,
    "atanh": jax.lax.atanh, "asin": jax.lax.asin, "acos": jax.lax.acos, "exp2": jax.lax.exp2,
}


def test_every_expansion_is_tested():
    assert set(EXPANDED) == set(rules.XLA_EXPANSIONS)


@pytest.mark.parametrize("name", sorted(EXPANDED))
def test_xla_expansion_table_matches_compiled_counts(name):
    # n elements; the table's per-element (FLOP, transcendentals) times n, in the
    # jaxpr count and in XLA's compiled count alike.
    n, x = 8 * 32, sds(8, 32)
    flops, transcendentals = rules.XLA_EXPANSIONS[name]
    counted = count_function(EXPANDED[name], x).total
    assert (counted.flops, counted.transcendentals) == (flops * n, transcendentals * n)
    assert xla_flops(EXPANDED[name], x) == (flops * n, transcendentals * n)


def test_argmax_counts_its_comparator_steps():
    rows, n = 8, 32
    fn = lambda x: jnp.argmax(x, -1)  # noqa: E731
    counted = count_function(fn, sds(rows, n)).total.flops
    assert counted == rules.ARGMAX_STEP_OPS * rows * (n - 1)
    assert counted == xla_flops(fn, sds(rows, n))[0]


def test_contraction_of_length_one_is_a_multiply():
    # An outer product (K = 1) has no additions: M * N FLOP, as XLA counts it.
    m, n = 6, 7
    fn = lambda a, b: a @ b  # noqa: E731
    assert count_function(fn, sds(m, 1), sds(1, n)).total.flops == m * n
    assert xla_flops(fn, sds(m, 1), sds(1, n))[0] == m * n


def test_algebraic_identities_cost_nothing():
    n = 10
    assert count_function(lambda x: x + 0.0, sds(n)).total.flops == 0
    assert count_function(lambda x: (x * 1.0) / 1.0 - 0.0, sds(n)).total.flops == 0
    assert count_function(lambda x: x + 1.0, sds(n)).total.flops == n
    # a broadcast hidden in "+ 0" is still work: x (scalar) + zeros(n) is not counted
    # as an identity on x
    assert count_function(lambda x: x * 2.0, sds(n)).total.flops == n


@pytest.mark.parametrize(
    "strides, padding, lhs_dil, rhs_dil, groups",
    [
        ((1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1),
        ((2, 2), ((0, 1), (2, 0)), (1, 1), (2, 2), 1),  # strided, asymmetric, dilated kernel
        ((1, 1), ((2, 2), (2, 2)), (2, 2), (1, 1), 1),  # transposed (input-dilated) conv
        ((1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 4),  # depthwise-style groups
    ],
)
def test_conv_variants_and_their_gradients_match_xla(strides, padding, lhs_dil, rhs_dil, groups):
    n, h, w, c_in, c_out, k = 2, 7, 6, 8, 8, 3

    def f(x, kernel):
        y = jax.lax.conv_general_dilated(
            x, kernel, strides, padding, lhs_dilation=lhs_dil, rhs_dilation=rhs_dil,
            dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=groups,
        )
        return jnp.sum(y)

    args = (sds(n, h, w, c_in), sds(k, k, c_in // groups, c_out))
    for fn in (f, jax.grad(f, argnums=(0, 1))):
        counted = count_function(fn, *args).total.flops
        assert counted == pytest.approx(xla_flops(fn, *args)[0], rel=0.01)


def test_method_calls_belong_to_their_module():
    # Flax names `self.wte.attend(x)` (a tied LM head) "wte.attend" on the name stack.
    assert xla_cost.module_path("jvp(GPT)/wte.attend", "GPT") == "wte"
    assert xla_cost.module_path("GPT/h/attn/bqhd,bkhd->bhqk", "GPT") == "h/attn/bqhd,bkhd->bhqk"


ROWS, N, D = 8, 32, 16  # named dimensions of the small rule checks below


@pytest.mark.parametrize(
    "name, fn, args, expected",
    [
        # reducing N inputs to 1, ROWS times: N - 1 adds per row
        ("reduce_sum", lambda x: jnp.sum(x, -1), [sds(ROWS, N)], ROWS * (N - 1)),
        ("reduce_max", lambda x: jnp.max(x, -1), [sds(ROWS, N)], ROWS * (N - 1)),
        # 2x2/2 max-pool of (1, N, N, D): (N/2)^2 * D outputs, W - 1 = 3 compares each
        (
            "reduce_window_max",
            lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
            [sds(1, N, N, D)],
            (N // 2) ** 2 * D * 3,
        ),
        # x**3 = x*x*x: 2 multiplies per element; x**-2 = 1/(x*x): 2
        ("integer_pow 3", lambda x: x**3, [sds(ROWS, N)], 2 * ROWS * N),
        ("integer_pow -2", lambda x: x**-2, [sds(ROWS, N)], 2 * ROWS * N),
        # an embedding lookup moves data (gather: 0 FLOP); jnp wraps negative
        # indices first: lt, add, select per index (3 * ROWS)
        ("gather", lambda t, i: t[i], [sds(N, D), jax.ShapeDtypeStruct((ROWS,), jnp.int32)], 3 * ROWS),
        # sort: XLA's convention, N_total * ceil(log2 N_total) over the whole operand
        ("sort", lambda x: jnp.sort(x, -1), [sds(ROWS, N)], ROWS * N * math.ceil(math.log2(ROWS * N))),
        # clamp: one operation per element
        ("clamp", lambda x: jax.lax.clamp(-1.0, x, 1.0), [sds(ROWS, N)], ROWS * N),
    ],
)
def test_rules_by_formula_and_against_xla(name, fn, args, expected):
    assert count_function(fn, *args).total.flops == expected, name
    assert xla_flops(fn, *args)[0] == expected, name


def test_scatter_add_counts_one_add_per_update():
    # The gradient of an embedding lookup scatters ROWS rows of D values: ROWS * D
    # adds, after jnp's negative-index wrapping (lt, add, select: 3 per index).
    table, ids = sds(N, D), jax.ShapeDtypeStruct((ROWS,), jnp.int32)
    counted = count_function(
        lambda t, i, g: t.at[i].add(g), table, ids, sds(ROWS, D)
    ).total.flops
    assert counted == ROWS * D + 3 * ROWS
