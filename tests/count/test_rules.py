"""Cost rules and the jaxpr interpreter, each against a hand derivation."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from tests import formulas as F
from xla_cost.count import random_rules, registry, rules
from xla_cost.count.interpret import count_function

F32 = jnp.float32

# XLA runs a scan as a while loop: each iteration adds 1 to its counter and
# compares it with the length, 2 FLOP (docs/conventions.md; checked against the
# compiled count in tests/count/test_interpret_loops.py::test_nested_scan_counts_by_hand).
SCAN_COUNTER_FLOPS = 2


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
    # The jaxpr count of a conv's forward and both gradients equals XLA's, and
    # the closed form: 3x3/2 with padding 1 over 9 -> 5 outputs, 5*3 - 2 = 13
    # valid (output, tap) pairs per dimension; 2 images, 4 -> 8 channels.
    def f(x, w):
        y = jax.lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.sum(y)

    args = (sds(2, 9, 9, 4), sds(3, 3, 4, 8))
    conv = 2 * 2 * 4 * 8 * F.valid_pairs(9, 3, 2, 1) ** 2
    assert F.valid_pairs(9, 3, 2, 1) == 13
    total = 2 * 5 * 5 * 8 - 1  # the sum of the outputs
    # grad: the input gradient and the weight gradient read the same valid
    # pairs (the sum's gradient is a broadcast: free)
    for fn, expected in ((f, conv + total), (jax.grad(f, argnums=(0, 1)), 2 * conv)):
        counted = count_function(fn, *args).total.flops
        compiled = jax.jit(fn).lower(*args).compile().cost_analysis()["flops"]
        assert counted == compiled == expected


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
    # the totals say they are a lower bound wherever they are shown, never a bare figure
    assert not counted.complete and count_function(lambda x: x + 1.0, sds(3)).complete
    shown = counted._repr_markdown_()
    assert shown.splitlines()[0].startswith("1 operation counted: at least 3 FLOP, at least 0 transcendentals")
    assert "1 operation has no cost rule: unknown" in shown and "mystery_op x1" in shown
    alone = count_function(mystery.bind, sds(3))  # nothing but the rule-less primitive: unknown, not 0 FLOP
    assert alone.total.flops == 0 and not alone.complete and "at least 0 FLOP" in alone._repr_markdown_()


def test_duplicate_registration_fails():
    with pytest.raises(registry.DuplicateRuleError, match="dot_general"):
        registry.register("dot_general")(lambda ins, outs, **_: registry.Cost())
    with pytest.raises(registry.DuplicateRuleError, match="reshape"):
        registry.register("reshape")(lambda ins, outs, **_: registry.Cost())
    with pytest.raises(TypeError, match="jax Primitive"):
        registry.register(42)


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


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float8_e4m3fn, jnp.float8_e5m2,
                                   jnp.float8_e4m3fnuz, jnp.float8_e5m2fnuz])
def test_algebraic_identities_of_narrow_floats_cost_nothing(dtype):
    # bfloat16's and float8's NumPy kind is 'V', not 'f': their literal 0 and 1 are still 0 and 1
    # (optax's set_to_zero update of a frozen bfloat16 parameter is `p + 0`, a copy in XLA's program).
    n = 10
    x = jax.ShapeDtypeStruct((n,), dtype)
    assert count_function(lambda x: x + jnp.zeros((), dtype), x).total.flops == 0
    assert count_function(lambda x: (x * jnp.ones((), dtype)) - jnp.zeros((), dtype), x).total.flops == 0
    assert count_function(lambda x: x + jnp.ones((), dtype), x).total.flops == n  # one add an element


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
    # The closed form, from the tests' own enumeration of valid taps: an input
    # dilated by lhs_dil is the real cells with lhs_dil - 1 holes between them.
    pairs = 1
    for size, pad, stride, l_dil, r_dil in zip((h, w), padding, strides, lhs_dil, rhs_dil):
        pairs *= _dilated_valid_taps(size, k, stride, pad, l_dil, r_dil)
    conv = 2 * n * (c_in // groups) * c_out * pairs
    out = jax.eval_shape(lambda x, kernel: jax.lax.conv_general_dilated(
        x, kernel, strides, padding, lhs_dilation=lhs_dil, rhs_dilation=rhs_dil,
        dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=groups), *args)
    total = math.prod(out.shape) - 1  # the sum of the outputs
    for fn, expected in ((f, conv + total), (jax.grad(f, argnums=(0, 1)), 2 * conv)):
        counted = count_function(fn, *args).total.flops
        assert counted == xla_flops(fn, *args)[0] == expected


def _dilated_valid_taps(size, k, stride, pad, lhs_dil, rhs_dil):
    # real cells at multiples of lhs_dil in the dilated input, then F.valid_taps's layout
    cells = [i % lhs_dil == 0 for i in range((size - 1) * lhs_dil + 1)]
    padded = [False] * pad[0] + cells + [False] * pad[1]
    span = (k - 1) * rhs_dil + 1
    return sum(padded[o + t * rhs_dil] for o in range(0, len(padded) - span + 1, stride) for t in range(k))


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


# ------------------------------------------------------------------ random numbers


def _counter_ops(shape):
    # iota_2x32_shape, as random_rules.threefry_counter_ops derives it: on the r axes
    # longer than 1, 3 per element (shift, two conversions), 2 per element per
    # axis after the first (an add for each word), 2 per element of each
    # non-trailing axis (its stride multiply, for each word); nothing for one element
    dims = [d for d in shape if d != 1]
    m = math.prod(shape)
    return 0 if m <= 1 else 3 * m + 2 * (len(dims) - 1) * m + 2 * sum(dims[:-1])


def _hash_ops(words, keys, constant_counter=False):
    # threefry2x32 as XLA counts it on the CPU: per word, per key (unless the
    # counter is the constant 0), per call
    key_ops = 0 if constant_counter else random_rules.THREEFRY_KEY_OPS * keys
    return random_rules.THREEFRY_WORD_OPS * words + key_ops + random_rules.THREEFRY_CALL_OPS


KEY = jax.random.key(0)


@pytest.mark.parametrize("dtype", [jnp.uint8, jnp.uint16, jnp.uint32])
@pytest.mark.parametrize("shape", [(), (1,), (7,), (8, 32), (3, 1, 5), (2, 3, 4, 5)])
def test_random_bits_as_xla_counts_it(shape, dtype):
    # one key, m = prod(shape) elements: the hash of m words, the counters of
    # the shape, and per element the combining of the hash's two words
    bits = lambda k: jax.random.bits(k, shape, dtype)  # noqa: E731
    m = math.prod(shape)
    width = jnp.dtype(dtype).itemsize * 8
    expected = (
        _hash_ops(m, 1, constant_counter=m == 1) + _counter_ops(shape)
        + random_rules.RANDOM_BITS_COMBINE_OPS[width] * m
    )
    assert count_function(bits, KEY).total.flops == expected
    assert xla_flops(bits, KEY)[0] == expected


def test_a_step_that_draws_random_bits_says_what_the_cpus_count_of_the_hash_leaves_out():
    # a dropout of rate 0.5 on B x D: the CPU's count holds the threefry hash's 5-trip loop body once (41
    # operations a word of 117 run): the note gives up to (117 / 41 - 1) x the random FLOP more, per program
    import flax.linen as nn

    class Drop(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dropout(0.5, deterministic=False)(nn.Dense(D)(x))

    report = xla_cost.analyze(Drop(), sds(N, D), optimizer="sgd")
    forward = report.phases["forward"]
    assert forward.random_flops >= random_rules.THREEFRY_WORD_OPS * N * D  # every element's word hashed
    hidden = round((random_rules.THREEFRY_UNROLLED_WORD_OPS / random_rules.THREEFRY_WORD_OPS - 1)
                   * forward.random_flops)
    note = next(n for n in report.notes if n.startswith("forward: random numbers counted as XLA's CPU program"))
    assert f"({forward.random_flops:,} FLOP)" in note and f"up to {hidden:,} FLOP more run than are counted" in note


def test_random_bits_of_a_batch_of_keys_share_the_counters():
    # vmap over K keys: K*m words hashed, 2 key operations per key, the
    # counters of the (per-key) shape once
    keys, shape = 5, (5, 7)
    keys_array = jax.random.split(KEY, keys)
    bits = jax.vmap(lambda k: jax.random.bits(k, shape))
    m = math.prod(shape)
    expected = _hash_ops(keys * m, keys) + _counter_ops(shape) + keys * m
    assert count_function(bits, keys_array).total.flops == expected
    assert xla_flops(bits, keys_array)[0] == expected


@pytest.mark.parametrize("shape", [(1,), (2,), (16,), (5, 7)])
def test_random_split_and_fold_in_as_xla_counts_them(shape):
    # a split key is the hash's two words at its position: random_bits without
    # the combining step
    split = lambda k: jax.random.split(k, shape)  # noqa: E731
    m = math.prod(shape)
    expected = _hash_ops(m, 1, constant_counter=m == 1) + _counter_ops(shape)
    assert count_function(split, KEY).total.flops == expected
    assert xla_flops(split, KEY)[0] == expected
    # fold_in hashes one word pair per key, after masking the message's low word
    fold_in = lambda k, d: jax.random.fold_in(k, d)  # noqa: E731
    msg = jax.ShapeDtypeStruct((), jnp.uint32)
    assert count_function(fold_in, KEY, msg).total.flops == _hash_ops(1, 1) + 1
    assert xla_flops(fold_in, KEY, msg)[0] == _hash_ops(1, 1) + 1


@pytest.mark.parametrize("shape", [(1,), (4,), (8, 32)])
def test_threefry2x32_hash_and_its_counters(shape):
    from jax._src.random import prng, threefry2x32  # the raw primitives

    words = jax.ShapeDtypeStruct(shape, jnp.uint32)
    scalar = jax.ShapeDtypeStruct((), jnp.uint32)
    hash_fn = lambda k1, k2, x1, x2: threefry2x32.threefry2x32_p.bind(k1, k2, x1, x2)  # noqa: E731
    m = math.prod(shape)
    for key in (scalar, words):  # one key, or a key per word (2 key operations each)
        expected = _hash_ops(m, math.prod(key.shape))
        assert count_function(hash_fn, key, key, words, words).total.flops == expected
        assert xla_flops(hash_fn, key, key, words, words)[0] == expected
    counters = lambda: prng.iota_2x32_shape(shape)  # noqa: E731
    assert count_function(counters).total.flops == _counter_ops(shape)
    assert xla_flops(counters)[0] == _counter_ops(shape)


def test_random_seed_and_key_relabelling():
    # an int32 seed: its high word (a shift), its low word (an and) and a
    # conversion, 3 operations; a uint32 seed, only the mask: 1. Wrapping and
    # unwrapping key data cost nothing.
    for dtype, ops in ((jnp.int32, 3), (jnp.uint32, 1)):
        seed = jax.ShapeDtypeStruct((), dtype)
        assert count_function(jax.random.key, seed).total.flops == ops
        assert xla_flops(jax.random.key, seed)[0] == ops
    data = jax.ShapeDtypeStruct((2,), jnp.uint32)
    relabel = lambda d: jax.random.key_data(jax.random.wrap_key_data(d))  # noqa: E731
    assert count_function(relabel, data).total.flops == 0
    assert xla_flops(relabel, data)[0] == 0


def test_uniform_folds_its_literal_bounds_inside_the_call():
    # jax.random.uniform(key, shape) runs in a jit called with the literals 0.0
    # and 1.0; XLA inlines it and folds "* (max - min)" and "+ min" away. What
    # is left per element: shift, or, bitcast, - 1.0 and max with min: 5.
    shape = (8, 32)
    m = math.prod(shape)
    uniform = lambda k: jax.random.uniform(k, shape)  # noqa: E731
    bits = _hash_ops(m, 1) + _counter_ops(shape) + random_rules.RANDOM_BITS_COMBINE_OPS[32] * m
    assert count_function(uniform, KEY).total.flops == bits + 5 * m
    assert xla_flops(uniform, KEY)[0] == bits + 5 * m


@pytest.mark.parametrize("where", ["closure", "jit of a partial"])
def test_work_on_a_closed_over_table_folds_as_xla_folds_it(where):
    # maxdiffusion's compute_snr: a step closes over a noise-schedule table and takes
    # sqrt(1 - table) of all of it before indexing; the table is a constant of the compiled
    # program and XLA folds that work. The jaxpr counted the n subtractions and n square
    # roots (n FLOP, n transcendentals) on top of the n multiplications with the input.
    n = 1000
    table = jnp.linspace(0.999, 0.01, n, dtype=F32)
    scaled = lambda x, sched: x * (1.0 - sched) ** 0.5  # noqa: E731
    fn = (lambda x: scaled(x, table)) if where == "closure" else jax.jit(functools.partial(scaled, sched=table))
    counted = count_function(fn, sds(n)).total
    assert (counted.flops, counted.transcendentals) == (n, 0)  # the multiplication alone
    assert xla_flops(fn, sds(n)) == (n, 0)


def test_other_generators_are_unknown_not_zero():
    rbg_key = jax.random.key(0, impl="rbg")
    counted = count_function(lambda k: jax.random.bits(k, (8,)), rbg_key)
    assert counted.unsupported == {"random_bits": 1}


# ------------------------------------------------------------------ cumulative, FFT, bitcasts


@pytest.mark.parametrize("n", [2, 3, 16, 17, 100, 256, 1000, 4096])
def test_cumsum_counts_xla_reduce_window_rewrite(n):
    # rows * cumulative_steps(n); by hand for n <= 16: n * (n - 1) per row, and
    # n = 100: padded to 112, 7 blocks: 112 * 15 + 8 * 6 + 112 = 1840 per row
    rows = 4
    x = sds(rows, n)
    fn = lambda a: jnp.cumsum(a, axis=-1)  # noqa: E731
    if n <= rules.CUMULATIVE_REWRITE_BASE:
        assert rules.cumulative_steps(n) == n * (n - 1)
    if n == 100:
        assert rules.cumulative_steps(n) == 112 * 15 + 8 * 6 + 112
    expected = rows * rules.cumulative_steps(n)
    assert count_function(fn, x).total.flops == expected
    assert xla_flops(fn, x)[0] == expected


@pytest.mark.parametrize(
    "name, fn, per_step",
    [
        ("cummax", lambda a: jax.lax.cummax(a, 1), (1, 0)),
        ("cumprod, reversed, axis 0", lambda a: jax.lax.cumprod(a.T, 0, reverse=True), (1, 0)),
        # logaddexp per step: 8 operations, exp and log1p
        ("cumlogsumexp", lambda a: jax.lax.cumlogsumexp(a, 1), (8, 2)),
    ],
)
def test_other_cumulative_reductions(name, fn, per_step):
    rows, n = 4, 100
    steps = rows * rules.cumulative_steps(n)
    expected = (per_step[0] * steps, per_step[1] * steps)
    counted = count_function(fn, sds(rows, n)).total
    assert (counted.flops, counted.transcendentals) == expected, name
    assert xla_flops(fn, sds(rows, n)) == expected, name


@pytest.mark.parametrize("n", [5, 8, 12, 100])
def test_fft_counts(n):
    # FFT_FLOPS_PER_LOG_FACTOR * operand elements * floor(log2 n)
    rows, log_n = 3, n.bit_length() - 1
    c = jax.ShapeDtypeStruct((rows, n), jnp.complex64)
    half = jax.ShapeDtypeStruct((rows, n // 2 + 1), jnp.complex64)
    per = rules.FFT_FLOPS_PER_LOG_FACTOR * log_n
    for fn, arg, operand in [
        (jnp.fft.fft, c, rows * n), (jnp.fft.rfft, sds(rows, n), rows * n),
        (lambda a: jnp.fft.irfft(a, n), half, rows * (n // 2 + 1)),
    ]:
        counted = count_function(fn, arg).total.flops
        # irfft's jaxpr has one scalar operation more than XLA keeps
        assert counted == pytest.approx(per * operand, abs=1)
        assert xla_flops(fn, arg)[0] == per * operand


def test_fft_of_several_axes_multiplies_the_log_factors():
    shape = (2, 4, 8, 16)
    x = jax.ShapeDtypeStruct(shape, jnp.complex64)
    fn = lambda a: jnp.fft.fftn(a, axes=(1, 2, 3))  # noqa: E731
    expected = rules.FFT_FLOPS_PER_LOG_FACTOR * (2 * 3 * 4) * math.prod(shape)  # log2 4, 8, 16
    assert count_function(fn, x).total.flops == expected
    assert xla_flops(fn, x)[0] == expected


@pytest.mark.parametrize(
    "src, dst, shape, per",
    [
        (jnp.uint32, jnp.float32, (8, 32), ("out", 1)),  # same width: 1 per element
        (jnp.float32, jnp.uint8, (8, 32), ("out", 6)),  # narrowing: 6 per output element
        (jnp.uint16, jnp.float32, (8, 32, 2), ("in", 5)),  # widening: 5 per input element
    ],
)
def test_bitcast_convert(src, dst, shape, per):
    x = jax.ShapeDtypeStruct(shape, src)
    fn = lambda a: jax.lax.bitcast_convert_type(a, dst)  # noqa: E731
    out = jax.eval_shape(fn, x)
    expected = per[1] * math.prod(out.shape if per[0] == "out" else shape)
    assert count_function(fn, x).total.flops == expected
    assert xla_flops(fn, x)[0] == expected


# ------------------------------------------------------------------ indexing modes


@pytest.mark.parametrize("table", [(64,), (128, 64), (128, 8, 8)])
def test_take_in_fill_mode_checks_bounds_and_selects(table):
    # jnp.take's default "fill" mode: per index, the wrap of negative indices
    # (lt, add, select: 3) and the bounds check (4k - 1 = 3 with k = 1); per
    # output element one select
    ids = jax.ShapeDtypeStruct((4, 4), jnp.int32)
    fn = lambda t, i: jnp.take(t, i, axis=0)  # noqa: E731
    out = math.prod(ids.shape) * math.prod(table[1:])
    expected = 3 * 16 + 3 * 16 + out
    assert count_function(fn, sds(*table), ids).total.flops == expected
    assert xla_flops(fn, sds(*table), ids)[0] == expected


def test_gather_with_two_index_components_in_fill_mode():
    # k = 2 components per index: 2 * 3 for the wraps, 4k - 1 = 7 checks; 8 outputs each
    t, i = sds(32, 16, 8), jax.ShapeDtypeStruct((10,), jnp.int32)
    fn = lambda t, i, j: t.at[i, j].get(mode="fill", fill_value=0)  # noqa: E731
    expected = 10 * (2 * 3 + 7) + 10 * 8
    assert count_function(fn, t, i, i).total.flops == expected
    assert xla_flops(fn, t, i, i)[0] == expected


def test_scatter_add_in_clip_mode_clamps_each_index():
    table, ids, updates = sds(N, D), jax.ShapeDtypeStruct((ROWS,), jnp.int32), sds(ROWS, D)
    fn = lambda t, i, u: t.at[i].add(u, mode="clip")  # noqa: E731
    # ROWS * D adds, jnp's wrap of negative indices (lt, add, select: 3 per
    # index) and one clamp per index
    expected = ROWS * D + 3 * ROWS + ROWS
    assert count_function(fn, table, ids, updates).total.flops == expected
    assert xla_flops(fn, table, ids, updates)[0] == expected


# ------------------------------------------------------------------ generic reductions, calls


def test_reduce_and_reduce_window_with_their_own_computation():
    # a variadic reduce of ROWS x N to ROWS with a 2-operation reducer: 2 * ROWS * (N - 1)
    x = sds(ROWS, N)
    reduce = lambda a: jax.lax.reduce(  # noqa: E731
        (a, a), (0.0, 1.0), lambda p, q: (p[0] + q[0], p[1] * q[1]), (1,)
    )
    assert count_function(reduce, x).total.flops == 2 * ROWS * (N - 1)
    assert xla_flops(reduce, x)[0] == 2 * ROWS * (N - 1)
    # a 3x3 SAME variadic reduce-window: 8 steps of 2 operations per output,
    # padding taps included
    window = lambda a: jax.lax.reduce_window(  # noqa: E731
        (a, a), (0.0, -jnp.inf), lambda p, q: (p[0] + q[0], jnp.maximum(p[1], q[1])),
        (3, 3), (1, 1), "SAME",
    )
    assert count_function(window, x).total.flops == 2 * 8 * ROWS * N
    assert xla_flops(window, x)[0] == 2 * 8 * ROWS * N


def test_structural_primitives_and_composites():
    x = sds(ROWS, N)
    # stack, unstack and tile move data: only the multiply (ROWS * N) and the
    # ROWS - 1 adds of N elements summing the unstacked rows are counted
    assert count_function(lambda a: jnp.stack([a, a * 2.0]), x).total.flops == ROWS * N
    unstacked = lambda a: sum(jnp.unstack(a * 2.0))  # noqa: E731
    assert count_function(unstacked, x).total.flops == ROWS * N + (ROWS - 1) * N
    assert xla_flops(unstacked, x)[0] == ROWS * N + (ROWS - 1) * N
    assert count_function(lambda a: jnp.tile(a * 2.0, (2, 3)), x).total.flops == ROWS * N
    # a composite runs its decomposition: a multiply and an add per element
    composite = jax.lax.composite(lambda v: v * 2.0 + 1.0, name="my.scale_shift")
    assert count_function(composite, x).total.flops == 2 * ROWS * N
    assert xla_flops(composite, x)[0] == 2 * ROWS * N


def test_one_minus_square_is_a_multiply_and_a_subtract():
    # jax 0.11 differentiates tanh with a one_minus_square primitive; older jax has none
    from jax._src.lax import lax as lax_internal

    primitive = getattr(lax_internal, "one_minus_square_p", None)
    if primitive is None:
        pytest.skip("this jax has no one_minus_square primitive")
    x = jax.ShapeDtypeStruct((3, 5), jnp.float32)
    count = count_function(lambda v: primitive.bind(v), x)
    assert count.total.flops == 2 * 3 * 5 and not count.unsupported


def test_a_reduction_over_no_elements_counts_nothing_not_a_negative():
    """Issue 49: a batch of 0 gave backward -266 FLOP: reducing n = 0 inputs into m outputs was
    counted n - m = -m operations; an empty reduction computes nothing (it writes its identity)."""
    empty = jax.ShapeDtypeStruct((0, 10), jnp.float32)
    for fn in (lambda x: x.sum(0), lambda x: jax.lax.reduce_max(x, (0,)), lambda x: jax.lax.reduce(
            x, 0.0, lambda a, b: a * b + a, (0,))):
        assert count_function(fn, empty).total.flops == 0
    full = jax.ShapeDtypeStruct((4, 10), jnp.float32)
    assert count_function(lambda x: x.sum(0), full).total.flops == (4 - 1) * 10  # n - m adds


def test_a_phase_whose_jaxpr_has_a_rule_less_primitive_says_its_flops_are_a_lower_bound():
    # solve_triangular has no cost rule, and the CPU hands it to LAPACK, whose call XLA counts as nothing:
    # XLA's figure for the forward stands, said to be at least that
    import flax.linen as nn

    class Solve(nn.Module):
        @nn.compact
        def __call__(self, x):
            a = jnp.tril(x @ jnp.swapaxes(x, -1, -2)) + jnp.eye(x.shape[-1])[None]
            return nn.Dense(D)(jax.scipy.linalg.solve_triangular(a, x, lower=True))

    report = xla_cost.analyze(Solve(), sds(2, D, D), optimizer="sgd")
    assert "triangular_solve" in report.unsupported
    forward = report.phases["forward"]
    note = next(n for n in report.notes if n.startswith("forward: flops at least"))
    assert f"at least {forward.flops:,}" in note and "triangular_solve" in note


def test_psum_scatter_adds_once_per_element_each_device_keeps_as_psum_per_element_it_returns():
    # psum (XLA's all-reduce convention, whatever the group's size): one add per result element;
    # psum_scatter (the primitive reduce_scatter, once without a rule: a step holding one was
    # unknown) is that sum of which each of the n devices keeps 1/n: one add per element kept.
    # Its transpose, all_gather, moves data: 0 FLOP.
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec as P

    n, rows, cols = 8, 64, 16  # tests/conftest.py simulates eight CPU devices
    mesh = Mesh(np.array(jax.devices()[:n]), ("d",))
    x = sds(n * rows, cols)  # each device's block: rows x cols

    def per_device(body):
        return jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d"), check_vma=False)

    whole = count_function(per_device(lambda v: jax.lax.psum(v, "d")), x)
    assert whole.unsupported == {} and whole.total.flops == rows * cols  # 1,024
    tiled = count_function(per_device(lambda v: jax.lax.psum_scatter(v, "d", tiled=True)), x)
    assert tiled.unsupported == {} and tiled.total.flops == rows * cols // n  # 128: (rows / n) x cols kept
    assert tiled.total.bytes_accessed == 4 * (rows * cols + rows * cols // n)  # read the block, write the share
    # untiled: the scattered dimension (n) is dropped, each device keeps one of its n slices
    split = count_function(per_device(lambda v: jax.lax.psum_scatter(v.reshape(n, rows // n, cols), "d")), x)
    assert split.total.flops == rows * cols // n
    # its gradient (the forward's result unused): the cotangent all-gathered, its transpose, no arithmetic
    grad = jax.grad(lambda v: jnp.sum(per_device(lambda b: jax.lax.psum_scatter(b, "d", tiled=True))(v)))
    assert "all_gather" in str(jax.make_jaxpr(grad)(x))
    assert count_function(grad, x).unsupported == {} and count_function(grad, x).total.flops == 0
