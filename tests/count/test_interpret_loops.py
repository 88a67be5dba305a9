"""Loop-correct totals: XLA counts a loop body once; the analyzer must not."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from tests import custom_models as M
from tests import formulas as F
from xla_cost import FLOPS_PER_FMA
from xla_cost.analysis.costs import describe_loops
from xla_cost.count import interpret

B = 4  # batch
D_IN = 8
INPUTS = jax.ShapeDtypeStruct((B, D_IN), jnp.float32)

# `report(name, depth=1)` merges the rows of the same programs `report(name)` compiled: with the
# module's caches on they are read back, not compiled again (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("module_caches")
PHASES = ("forward", "backward", "grad", "update", "train_step")

# XLA runs a scan as a while loop: each iteration adds 1 to its counter and
# compares it with the length, 2 FLOP (docs/conventions.md; checked against the
# compiled count in test_nested_scan_counts_by_hand below).
SCAN_COUNTER_FLOPS = 2


@functools.lru_cache(maxsize=None)
def report(model_name: str, depth: int | None = None) -> xla_cost.Report:
    model = getattr(M, model_name)()
    return xla_cost.analyze(
        model, INPUTS, optimizer="adam", per_layer=True, depth=depth
    )


def block_forward_flops() -> int:
    """One ResidualBlock's forward FLOP at batch B, width D = D_SCAN."""
    d = M.D_SCAN
    up = FLOPS_PER_FMA * B * d * (2 * d) + B * 2 * d  # matmul + bias
    relu = B * 2 * d  # one max per element
    down = FLOPS_PER_FMA * B * (2 * d) * d + B * d  # matmul + bias
    residual = B * d
    return up + relu + down + residual


def test_scanned_equals_unrolled_in_every_phase():
    # Acceptance: nn.scan over 12 identical blocks and the same blocks unrolled
    # cost the same in every phase (within 0.1%).
    scanned, unrolled = report("ScannedMLP"), report("UnrolledMLP")
    assert scanned.parameters == unrolled.parameters
    # The jaxpr counts differ by the scan's counter only: SCAN_COUNTER_FLOPS per
    # iteration of each scan (forward: 1; grad: the forward scan and its
    # transpose, 2; the update has none).
    scans = {"forward": 1, "backward": 1, "grad": 2, "update": 0, "train_step": 2}
    for phase in PHASES:
        s, u = scanned.phases[phase], unrolled.phases[phase]
        assert s.jaxpr_flops == u.jaxpr_flops + scans[phase] * M.N_SCAN * SCAN_COUNTER_FLOPS, phase
        assert s.jaxpr_transcendentals == u.jaxpr_transcendentals, phase
        # The headlines: XLA's count of the unrolled program against XLA's count
        # of one block corrected by the jaxpr: XLA fuses the unrolled blocks'
        # elementwise producers into more consumers. Measured (u - s) / s:
        # forward 7.7e-5, grad 5.1e-4, train_step 3.3e-4, update 8.5e-6.
        assert s.flops == pytest.approx(u.flops, rel=1e-3), phase
        assert s.transcendentals == u.transcendentals, phase


def test_raw_xla_figure_of_the_scan_is_low_and_flagged():
    scanned, unrolled = report("ScannedMLP"), report("UnrolledMLP")
    for phase in ("forward", "grad", "train_step"):
        s = scanned.phases[phase]
        assert s.loop_corrected and s.sources["flops"] == "xla+loops", phase
        assert not unrolled.phases[phase].loop_corrected, phase
        # XLA saw one block of 12: its raw figure is what the jaxpr counts with
        # every loop body once, to XLA's fusion (measured: forward +36 FLOP, 6.6e-5;
        # grad and train_step +3145, 1.9e-3: its fused backward recomputes small
        # elementwise producers), and the correction adds the other 11
        # iterations exactly.
        assert s.xla_flops == pytest.approx(s.jaxpr_flops - _missed(scanned, phase), rel=2.5e-3), phase
        assert s.flops - s.xla_flops == _missed(scanned, phase), phase
    # the unrolled program: XLA and the jaxpr within XLA's fusion (measured 8.6e-5)
    assert unrolled.phases["forward"].xla_to_jaxpr == pytest.approx(1.0, rel=1e-4)
    assert any("loop body once" in note for note in scanned.notes)
    data = scanned.to_dict()
    assert data["loop_corrected"]["forward"] is True
    assert data["xla_flops"]["forward"] == scanned.phases["forward"].xla_flops
    assert data["flops"]["forward"] > data["xla_flops"]["forward"]
    # The update has no loop: XLA's figure stands.
    assert not scanned.phases["update"].loop_corrected


def _missed(r: xla_cost.Report, phase: str) -> int:
    """The FLOP of the 11 block iterations XLA does not see: from the closed
    forms of one block (forward, and for grad its backward too), and the scan
    counter of each iteration (SCAN_COUNTER_FLOPS)."""
    scans = {"forward": 1, "grad": 2, "train_step": 2}[phase]
    block = block_forward_flops() + (block_backward_flops() if phase != "forward" else 0)
    return (M.N_SCAN - 1) * (block + scans * SCAN_COUNTER_FLOPS)


def block_backward_flops() -> int:
    """One ResidualBlock's backward FLOP: both dense layers' gradients, relu's
    mask and select, and the residual's two cotangents of the input added."""
    d = M.D_SCAN
    return (
        F.dense_backward_flops(B, d, 2 * d) + F.dense_backward_flops(B, 2 * d, d)
        + F.relu_backward_flops(B * 2 * d) + B * d
    )


def test_scanned_forward_matches_closed_form():
    d, c = M.D_SCAN, M.C_SCAN
    embed = FLOPS_PER_FMA * B * D_IN * d + B * d
    head = FLOPS_PER_FMA * B * d * c + B * c
    layers = M.N_SCAN * (block_forward_flops() + SCAN_COUNTER_FLOPS)
    loss = F.loss_flops(B, c)  # softmax cross-entropy over C classes
    forward = report("ScannedMLP").phases["forward"]
    assert forward.jaxpr_flops == embed + layers + head + loss
    # the headline: XLA's count of one block, corrected; XLA counts the loss
    # 9 FLOP per example above the jaxpr (fusion): 5.7e-6
    assert forward.flops == pytest.approx(embed + layers + head + loss, rel=1e-5)


def test_scanned_layer_group_rows_carry_their_trip_count():
    rows = {row.path: row for row in report("ScannedMLP").layers}
    d = M.D_SCAN
    assert rows["layers/up"].trip_count == M.N_SCAN
    assert rows["layers/down"].trip_count == M.N_SCAN
    assert rows["embed"].trip_count == 1
    # up: 12 x (matmul + bias) in the forward pass; parameters stacked 12 times
    assert rows["layers/up"].forward_flops == M.N_SCAN * (FLOPS_PER_FMA * B * d * 2 * d + B * 2 * d)
    assert rows["layers/up"].parameters == M.N_SCAN * (d * 2 * d + 2 * d)
    # the block's own glue (relu, residual add) is the `layers` row
    assert rows["layers"].forward_flops == M.N_SCAN * (B * 2 * d + B * d)
    assert rows["layers"].parameters == 0


def test_depth_one_merges_scanned_stack_like_unrolled_blocks():
    scanned = {r.path: r for r in report("ScannedMLP", depth=1).layers}
    unrolled = {r.path: r for r in report("UnrolledMLP", depth=1).layers}
    assert list(scanned) == ["embed", "layers", "head", xla_cost.REMAINDER]
    blocks = [unrolled[f"block_{i}"] for i in range(M.N_SCAN)]
    assert scanned["layers"].forward_flops == sum(b.forward_flops for b in blocks)
    assert scanned["layers"].forward_flops == M.N_SCAN * block_forward_flops()
    assert scanned["layers"].parameters == sum(b.parameters for b in blocks)
    # the scan's counter (forward and transposed scan) sits in the remainder
    assert scanned["layers"].backward_flops == sum(b.backward_flops for b in blocks)
    assert scanned["layers"].backward_flops == M.N_SCAN * block_backward_flops()


def test_layer_columns_add_up_to_the_phase_jaxpr_counts():
    for name in ("ScannedMLP", "UnrolledMLP"):
        for depth in (None, 1):
            r = report(name, depth=depth)
            for column, phase in [
                ("forward_flops", "forward"), ("backward_flops", "backward"),
                ("update_flops", "update"),
            ]:
                total = sum(getattr(row, column) for row in r.layers)
                assert total == r.phases[phase].jaxpr_flops, (name, depth, column)


def test_jaxpr_counter_skips_compilation(monkeypatch):
    def no_compile(*_args, **_kwargs):
        raise AssertionError("counter=jaxpr must not compile")

    monkeypatch.setattr(xla_cost.compiled.xla, "compile_phase", no_compile)
    fast = xla_cost.analyze(M.ScannedMLP(), INPUTS, optimizer="adam", counter="jaxpr", per_layer=True)
    full = report("ScannedMLP")
    assert fast.counter == "jaxpr"
    for phase in PHASES:
        p = fast.phases[phase]
        assert p.flops == full.phases[phase].jaxpr_flops, phase
        assert p.sources["flops"] == "jaxpr"
        assert p.xla_flops is None and p.bytes_accessed is None
        assert p.memory.temp_bytes is None
    assert fast.layers == full.layers


def test_nested_loops_are_multiplied_out():
    # A D x D matmul (and tanh) runs OUTER * INNER times inside a scan of fori_loops.
    d = M.D_SCAN
    r = xla_cost.analyze(M.NestedLoopNet(), INPUTS, optimizer="sgd")
    forward = r.phases["forward"]
    matmul = FLOPS_PER_FMA * B * d * d
    assert forward.loop_corrected
    embed_head = F.dense_flops(B, D_IN, d) + F.dense_flops(B, d, M.C_SCAN)
    loss = F.loss_flops(B, M.C_SCAN)
    # fori_loop with literal bounds is a scan: each iteration bumps a counter
    # (SCAN_COUNTER_FLOPS); the loop index i + 1 is unused and dropped
    counters = (M.OUTER * M.INNER + M.OUTER) * SCAN_COUNTER_FLOPS
    expected = M.OUTER * M.INNER * matmul + counters + embed_head + loss
    assert forward.jaxpr_flops == expected
    # XLA counts the loss 9 FLOP per example above the jaxpr (fusion): 2.3e-5
    assert forward.flops == pytest.approx(expected, rel=1e-4)
    # the tanh of each of the 12 matmuls, and the loss's exp per logit and log per example
    assert forward.transcendentals == M.OUTER * M.INNER * B * d + F.loss_transcendentals(B, M.C_SCAN)
    # XLA counted one matmul of the twelve, and each loop's counter once
    once = matmul + 2 * SCAN_COUNTER_FLOPS + embed_head + loss
    assert forward.xla_flops == pytest.approx(once, rel=1e-3)  # fusion: 2.4e-4
    assert forward.flops - forward.xla_flops == expected - once


def test_scan_counter_is_the_library_convention():
    assert interpret.SCAN_COUNTER_FLOPS == SCAN_COUNTER_FLOPS


def test_nested_scan_counts_by_hand():
    d, outer, inner = 4, 3, 5

    def f(x, w):
        def body(c, _):
            c = jax.lax.scan(lambda h, _: (h @ w, None), c, None, length=inner)[0]
            return c, None

        return jax.lax.scan(body, x, None, length=outer)[0]

    sds = jax.ShapeDtypeStruct((d, d), jnp.float32)
    counted = xla_cost.count_function(f, sds, sds)
    step = SCAN_COUNTER_FLOPS  # each iteration also bumps and tests its counter
    assert counted.total.flops == outer * (inner * (FLOPS_PER_FMA * d**3 + step) + step)
    assert counted.total_once.flops == FLOPS_PER_FMA * d**3 + 2 * step  # what XLA sees
    compiled = jax.jit(f).lower(sds, sds).compile().cost_analysis()["flops"]
    assert compiled == counted.total_once.flops


def test_a_nested_loop_is_named_with_the_loop_it_runs_inside():
    # purejaxrl's and cleanrl's PPO: a minibatch scan inside an epoch scan. The loop note once listed them
    # as 'scan x2 at <top>, scan x2 at <top>', as if one ran after the other
    outer, inner, beside = 3, 5, 2

    def f(x):
        def epoch(c, _):
            return jax.lax.scan(lambda h, _: (h * 2.0, None), c, None, length=inner)[0], None

        x = jax.lax.scan(lambda h, _: (h + 1.0, None), x, None, length=beside)[0]
        return jax.lax.scan(epoch, x, None, length=outer)[0]

    counted = xla_cost.count_function(f, jax.ShapeDtypeStruct((4,), jnp.float32))
    # in the order their walks end: an inner loop's before its outer one's
    assert describe_loops(counted) == (f"scan x{beside} at <top>, scan x{inner} at <top> inside scan x{outer} at "
                                       f"<top>, scan x{outer} at <top>")


def test_every_while_loop_of_unknown_trip_count_is_said_with_those_it_runs_inside():
    # optax's L-BFGS run_opt (lbfgs.ipynb): a while_loop until the gradient's norm is small, its zoom line
    # search a while_loop inside it, the two-loop recursion a scan over the memory. The notes once said
    # 'scan x10 at <top> inside while xNone at <top>' and one 'trip count unknown' note for the two loops
    memory = 3

    def f(x, tol):
        def line_search(c):
            return jax.lax.while_loop(lambda s: s[1] > tol, lambda s: (s[0] * 0.5, s[1] * 0.5), (c, tol * 4))[0]

        def step(c):
            c = jax.lax.scan(lambda h, _: (h * 2.0, None), c, None, length=memory)[0]
            return line_search(c)

        x = jax.lax.while_loop(lambda c: jnp.sum(c) > tol, step, x)
        y = jax.lax.while_loop(lambda c: jnp.sum(c) < tol, lambda c: c + 1.0, x)  # two at <top>, one after
        return jax.lax.while_loop(lambda c: jnp.sum(c) < tol * 2, lambda c: c + 1.0, y)

    counted = xla_cost.count_function(f, jax.ShapeDtypeStruct((4,), jnp.float32),
                                      jax.ShapeDtypeStruct((), jnp.float32))
    outer = "while of unknown trip count at <top>"
    assert describe_loops(counted) == f"scan x{memory} at <top> inside {outer}"
    said = [n for n in counted.notes if "trip count" in n]
    # the optimisation loop and the two after it are all at <top>: 3 loops, said as 3 (the first note is
    # made where the first of them is met, before its body's)
    assert said == [
        "3 while loops at <top>: trip counts unknown, each body is counted once (the true cost is higher)",
        f"while loop at <top> inside {outer}: trip count unknown, its body is counted once (the true cost is higher)",
    ]
    assert not any("xNone" in n for n in counted.notes)


def test_unknown_trip_count_is_reported_not_guessed():
    r = xla_cost.analyze(M.DynamicLoopNet(), INPUTS, optimizer="sgd")
    assert any("trip count unknown" in note for note in r.notes)
    # counted once, as XLA does: nothing to correct, and nothing claimed (its condition's one check
    # beside the body's is no iteration XLA unrolled)
    assert not r.phases["forward"].loop_corrected
    assert not any("it unrolled them" in note for note in r.notes)


@pytest.mark.parametrize("index", ["dynamic_index", "take", "update"])
@pytest.mark.parametrize("start", [0, 1])
def test_an_unknown_trip_count_is_bounded_by_the_axis_its_counter_indexes_not_multiplied(index, start):
    slices, d = 5, 3

    def body(i, carry):
        xs, total = carry
        if index == "dynamic_index":  # lax.dynamic_index_in_dim: a dynamic_slice at i
            return xs, total + jax.lax.dynamic_index_in_dim(xs, i, keepdims=False)
        if index == "take":  # xs[i] through jnp.take: a gather at i, after jnp's wrap of a negative index
            return xs, total + jnp.take(xs, i, axis=0)
        return jax.lax.dynamic_update_index_in_dim(xs, total, i, 0), total * 2.0  # a write at i

    def f(xs, n):
        return jax.lax.fori_loop(start, n, body, (xs, jnp.zeros(d)))[1]

    counted = interpret.count_function(f, jax.ShapeDtypeStruct((slices, d), jnp.float32),
                                       jax.ShapeDtypeStruct((), jnp.int32))
    loop = counted.loops[0]
    assert loop.trip_count is None
    # i runs from start by 1, each reading (or writing) row i of `slices` rows: slices - start stay inside
    assert loop.bound.iterations == slices - start
    assert f"at most {slices - start} iterations if none reads past its end (a bound, not assumed)" in counted.notes[0]
    # the body is still counted once, as XLA counts every loop: the bound is no trip count
    assert counted.total.flops == counted.total_once.flops


def test_a_loop_whose_counter_indexes_nothing_has_no_bound():
    def f(x, n):
        return jax.lax.fori_loop(0, n, lambda i, c: c * 2.0, x)

    counted = interpret.count_function(f, jax.ShapeDtypeStruct((3,), jnp.float32), jax.ShapeDtypeStruct((), jnp.int32))
    assert counted.loops[0].bound is None
    assert counted.notes[0] == ("while loop at <top>: trip count unknown, its body is counted once "
                                "(the true cost is higher)")


def test_nnx_scan_over_vmapped_blocks():
    from flax import nnx

    model = nnx.eval_shape(lambda: M.NnxScanned(nnx.Rngs(0)))
    r = xla_cost.analyze(model, INPUTS, optimizer="sgd", per_layer=True)
    d, n = M.D_SCAN, M.N_NNX_SCAN
    assert r.phases["forward"].loop_corrected
    rows = {row.path: row for row in r.layers}
    # the scanned copies are named after the stacked module they come from
    assert rows["blocks/lin"].trip_count == n
    assert rows["blocks/lin"].forward_flops == n * (FLOPS_PER_FMA * B * d * d + B * d)
    assert rows["blocks/lin"].parameters == n * (d * d + d)
    assert rows["blocks"].forward_flops == n * B * d  # the relu
    assert rows[xla_cost.REMAINDER].trip_count == 1
    # SGD per layer: 2 FLOP per parameter, all of the stack's parameters
    assert rows["blocks/lin"].update_flops == 2 * rows["blocks/lin"].parameters


@pytest.mark.parametrize("loop", ["scan", "while"])
def test_a_constant_a_loop_reads_unchanged_folds_in_its_body(loop):
    # jax hoists a layer's constant out of a scanned body (Flax's RMSNorm subtracts a mean of zeros): the body
    # reads it as one of the loop's constants. XLA sinks it back into the body and removes `x - 0`, so its figure
    # counts only the scan's counter (SCAN_COUNTER_FLOPS an iteration); the jaxpr count did count R*C subtractions
    # an iteration (a fourth new user's scanned LM: a LayerNorm row +25%).
    rows, cols, length = 16, 32, 4

    def body_fn(zeros, c):
        return jnp.tanh(c - zeros)  # tanh: a transcendental, no FLOP

    def f(x):
        zeros = jnp.zeros((rows, cols))
        if loop == "scan":
            return jax.lax.scan(lambda c, _: (body_fn(zeros, c), None), x, None, length=length)[0]
        return jax.lax.fori_loop(0, length, lambda i, c: body_fn(zeros, c), x)

    x = jax.ShapeDtypeStruct((rows, cols), jnp.float32)
    counted = interpret.count_jaxpr(jax.make_jaxpr(f)(x))
    xla = jax.jit(f).lower(x).compile().cost_analysis()["flops"]
    assert counted.total_once.flops == xla  # the loop's bookkeeping alone, as XLA counts it
    assert counted.total.flops < rows * cols  # not one subtraction an element


def test_the_remainder_row_of_a_root_scan_runs_once():
    # a GRU scanned at the root: the remainder holds the loss (once) and the scan's counter (every iteration);
    # its "runs" said x12, the counter's, where most of its work ran once
    import flax.linen as nn

    class Scanned(nn.Module):  # a hand-written scan over a cell, as repositories write it
        @nn.compact
        def __call__(self, x):
            cell = nn.GRUCell(8, name="gru")
            scan = nn.scan(lambda c, carry, xt: c(carry, xt), variable_broadcast="params",
                           split_rngs={"params": False}, in_axes=1, out_axes=1)
            carry, _ = scan(cell, jnp.zeros((x.shape[0], 8)), x)
            return nn.Dense(10, name="head")(carry)

    # batch 2: the scan's counter (2 FLOP x 12) outweighs each of the loss's operations (at batch 4, not)
    report = xla_cost.analyze(Scanned(), jax.ShapeDtypeStruct((2, 12, D_IN), jnp.float32), optimizer="sgd",
                              per_layer=True, counter="jaxpr")
    rows = {r.path: r for r in report.layers}
    assert rows["gru"].trip_count == 12
    assert rows[xla_cost.REMAINDER].trip_count == 1


class _Selective(__import__("flax").linen.Module):
    """A selective-scan recurrence as Mamba writes it: per step ``h = a * h + b`` on B x Di x N lanes,
    ``a`` and ``b`` made before the loop by fused elementwise work (exp, products) that XLA's fusions
    duplicate: its count of the program, each body once, is nearer the unrolled total than the
    once-count, yet the compiled program keeps its while loop."""

    di: int = 16
    n: int = 4

    @__import__("flax").linen.compact
    def __call__(self, x):
        nn = __import__("flax").linen
        u = nn.Dense(self.di)(x)  # (B, T, Di)
        dt = jax.nn.softplus(nn.Dense(self.di)(u))
        a_log = self.param("a_log", nn.initializers.zeros, (self.di, self.n))
        b = nn.Dense(self.n)(u)  # (B, T, N)
        da = jnp.exp(dt[..., None] * -jnp.exp(a_log)[None, None])  # (B, T, Di, N)
        db = dt[..., None] * b[:, :, None, :] * u[..., None]

        def step(h, ab):
            h = ab[0] * h + ab[1]
            return h, h

        h0 = jnp.zeros((x.shape[0], self.di, self.n), x.dtype)
        _, hs = jax.lax.scan(step, h0, (jnp.moveaxis(da, 1, 0), jnp.moveaxis(db, 1, 0)))
        return jnp.sum(hs, axis=(2, 3))


def test_a_loop_xla_kept_is_corrected_though_fusion_puts_its_count_near_the_unrolled_total():
    batch, steps, model = 2, 16, _Selective()
    report = xla_cost.analyze(model, jax.ShapeDtypeStruct((batch, steps, 8), jnp.float32), optimizer="sgd")
    forward = report.phases["forward"]
    assert forward.sources["flops"] == "xla+loops"
    assert not any("it unrolled them" in note for note in report.notes)
    # the iterations XLA's count of one body misses: (T - 1) steps of a * h + b on B x Di x N lanes
    # (2 FLOP each) and the loop counter's 2
    per_step = FLOPS_PER_FMA * batch * model.di * model.n + SCAN_COUNTER_FLOPS
    assert forward.flops - forward.xla_flops == (steps - 1) * per_step


@pytest.mark.parametrize("unroll", [4, 5])
def test_a_scan_unrolled_k_times_adds_the_bodies_its_loop_does_not_hold(unroll):
    # XLA's loop holds `unroll` copies of the body and runs the length % unroll left over outside it:
    # it counts unroll + length % unroll bodies; the rest are added (and no more)
    steps, d = 16, 8

    def rnn(w, xs):
        def step(h, x):
            h = jnp.tanh(h @ w + x)
            return h, h
        return jnp.sum(jax.lax.scan(step, jnp.zeros((2, d)), xs, unroll=unroll)[1])

    w, xs = jax.ShapeDtypeStruct((d, d), jnp.float32), jax.ShapeDtypeStruct((steps, 2, d), jnp.float32)
    counted = xla_cost.count_function(rnn, w, xs)
    body = FLOPS_PER_FMA * 2 * d * d + 2 * d  # h @ w (2 x d by d x d) and + x; tanh is a transcendental
    held = unroll + steps % unroll
    assert counted.total.transcendentals - counted.total_once.transcendentals == (steps - held) * 2 * d
    assert counted.total.flops - counted.total_once.flops == (steps - held) * (body + SCAN_COUNTER_FLOPS)

