"""The measured split: bootstrap intervals, traced shares scaled to the step and
attributed like the counts, and a profiled Dense stack whose layer costs are known."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost.analysis import split as S
from xla_cost.compiled.trace import RunShares, Source

# ------------------------------------------------------------------ bootstrap


def test_bootstrap_gives_the_median_and_an_interval_around_it_deterministically():
    samples = [1.0, 2.0, 3.0, 4.0, 100.0]
    spread = S.bootstrap(samples)
    assert spread.seconds == 3.0  # the median, not the mean (22)
    assert 1.0 <= spread.low_s <= 3.0 <= spread.high_s <= 100.0
    assert S.bootstrap(samples) == spread  # a fixed seed: the same interval every time
    # a 50% interval lies inside the 95% one
    narrow = S.bootstrap(samples, S.Bootstrap(confidence=0.5))
    assert spread.low_s <= narrow.low_s <= narrow.high_s <= spread.high_s


def test_bootstrap_of_equal_samples_has_no_width_and_of_none_is_refused():
    assert S.bootstrap([2.5] * 7) == S.Spread(2.5, 2.5, 2.5)
    with pytest.raises(ValueError, match="at least one sample"):
        S.bootstrap([])


# ------------------------------------------------------------------ the split of traced shares

FWD = "jit(train_step)/jvp(Net)/block/fc1/dot_general"
BWD = "jit(train_step)/transpose(jvp(Net))/block/fc1/dot_general"
UPD = "jit(train_step)/add"


def _split(blocks=(0.020, 0.020, 0.020)):
    runs = [
        # traced periods of 10 ms: shares forward .4 / .5, backward .3, update .1, idle .2 / .1
        RunShares("1", 0.010, {"f": 0.004, "b": 0.003, "u": 0.001}, {"f": 1, "b": 2, "u": 1}, 0.002),
        RunShares("2", 0.010, {"f": 0.005, "b": 0.003, "u": 0.001}, {"f": 1, "b": 2, "u": 1}, 0.001),
    ]
    program = S.TracedProgram(
        sources={"f": Source(FWD), "b": Source(BWD),
                 "u": Source(UPD, inferred=True, reads=("opt_state[0].mu['block']['fc2']['kernel']",))},
        bytes={"f": 100, "b": 200, "u": 50},
    )
    attribution = S.Attribution.of(
        ["block/fc1", "block/fc2"], roots=("Net",),
        inputs={"opt_state[0].mu['block']['fc2']['kernel']": "block/fc2"},
    )
    return S.split_step(runs, program, attribution, list(blocks))


def test_parts_are_the_step_median_times_the_mean_shares_and_add_up_to_it():
    split = _split()
    # step 20 ms (every block); mean shares: forward (.4 + .5) / 2 = .45, backward .3,
    # update .1, idle (.2 + .1) / 2 = .15
    parts = {name: spread.seconds for name, spread in split.parts.items()}
    assert parts == pytest.approx(
        {"forward": 0.009, "backward": 0.006, "update": 0.002, "idle": 0.003, "grad": 0.015})
    assert sum(parts[p] for p in S.PARTS) == pytest.approx(split.step_s) == pytest.approx(0.020)
    # backward's share is .3 in both traced steps and every block is 20 ms: no spread
    assert (split.parts["backward"].low_s, split.parts["backward"].high_s) == pytest.approx((0.006, 0.006))
    assert 0.008 <= split.parts["forward"].low_s <= 0.009 <= split.parts["forward"].high_s <= 0.010
    # as traced: the mean share times the traced period (10 ms); they add up to it
    assert split.trace_s == pytest.approx({"forward": 0.0045, "backward": 0.003, "update": 0.001, "idle": 0.0015})
    assert sum(split.trace_s.values()) == pytest.approx(split.traced_period_s)
    assert split.trace_overhead == pytest.approx(0.010 / 0.020 - 1)
    assert (split.traced_steps, split.inferred_s, split.unnamed_s) == (2, pytest.approx(0.001), 0.0)


def test_rows_are_attributed_like_the_counts_and_add_up_to_the_passes():
    split = _split()
    rows = {row.path: row for row in split.layers()}
    assert list(rows) == ["block/fc1", "block/fc2", xla_cost.REMAINDER]
    assert rows["block/fc1"].seconds == pytest.approx({"forward": 0.009, "backward": 0.006, "update": 0.0})
    # the optimizer's arithmetic, outside every module, goes to the module whose state it reads
    assert rows["block/fc2"].seconds == pytest.approx({"forward": 0.0, "backward": 0.0, "update": 0.002})
    assert rows[xla_cost.REMAINDER].total_s == 0.0
    # bytes of a step: f once (100), b twice (2 * 200); u once (50)
    assert (rows["block/fc1"].bytes, rows["block/fc2"].bytes) == (100 + 2 * 200, 50)
    # grouped onto the rows of a report at depth 1 (block)
    (block, remainder) = split.layers(["block"])
    assert block.path == "block" and block.total_s == pytest.approx(0.017)
    assert block.bytes == 550 and remainder.total_s == 0.0
    assert block.low_s <= block.total_s <= block.high_s


def test_the_layer_table_puts_the_counts_and_the_roofline_beside_the_time():
    split = _split()
    counted = [xla_cost.LayerCosts(path="block/fc1", parameters=12, forward=xla_cost.Cost(9_000_000),
                                   backward=xla_cost.Cost(12_000_000))]
    # peak 1e12 FLOP/s and 1e9 bytes/s: compute 21e6 / 1e12 = 21 us, memory 500 / 1e9 = 0.5 us
    (fc1, remainder) = split.table(counted, peak_flops=1e12, bandwidth=1e9)
    assert fc1["flops"] == 21_000_000 and fc1["total_s"] == pytest.approx(0.015)
    assert fc1["flops_per_s"] == pytest.approx(21e6 / 0.015)
    assert fc1["bytes_per_s"] == pytest.approx(500 / 0.015)
    assert fc1["roofline_s"] == pytest.approx(21e-6) and fc1["bound"] == "compute"
    assert fc1["share"] == pytest.approx(0.015 / 0.020)
    # block/fc2 is no row of the report: its update time joins the remainder, its FLOP unknown
    assert remainder["path"] == xla_cost.REMAINDER and remainder["update_s"] == pytest.approx(0.002)
    assert remainder["flops"] is None and remainder["bound"] is None


KERNEL1, MU2 = "params['block']['fc1']['kernel']", "opt_state[0].mu['block']['fc2']['kernel']"


def test_a_row_is_the_op_names_module_unless_the_name_was_inferred_or_the_update_is_outside_every_module():
    attribution = S.Attribution.of(["block/fc1", "block/fc2"], roots=("Net",),
                                   inputs={KERNEL1: "block/fc1", MU2: "block/fc2"})
    # XLA's rewritten weight gradient: named after its input (fc1's backward), it reads fc2's
    # optimizer state only: the gradient of fc2's weight, fc2's row
    assert attribution.row(Source(BWD, inferred=True, reads=(MU2,))) == "block/fc2"
    # the same name given by jax itself is trusted, whatever it reads
    assert attribution.row(Source(BWD, reads=(MU2,))) == "block/fc1"
    # an inferred name reading two modules' arguments, or none, keeps its name's module
    assert attribution.row(Source(BWD, inferred=True, reads=(MU2, KERNEL1))) == "block/fc1"
    assert attribution.row(Source(BWD, inferred=True, reads=("batch[0]",))) == "block/fc1"
    # the update's arithmetic outside every module goes to the one module whose state it reads;
    # reading two modules' or none, it stays in the remainder
    assert attribution.row(Source(UPD, reads=(MU2,))) == "block/fc2"
    assert attribution.row(Source(UPD, reads=(MU2, KERNEL1))) == xla_cost.REMAINDER
    assert attribution.row(Source(UPD)) == xla_cost.REMAINDER
    # backward arithmetic outside every module (jax's name, not inferred) is no module's
    assert attribution.row(Source("jit(train_step)/transpose(jvp(Net))/mul", reads=(MU2,))) == xla_cost.REMAINDER
    assert attribution.row(Source("", inferred=True, reads=(MU2,))) == xla_cost.REMAINDER  # no name, no row


def test_a_split_needs_traced_steps_and_step_times():
    with pytest.raises(ValueError, match="traced steps and step times"):
        S.split_step([], S.TracedProgram({}, {}), S.Attribution.of([]), [0.1])


# ------------------------------------------------------------------ a Dense stack, profiled

B, D, C = 128, 256, 16
"""Batch, width, classes: small is D -> D (2 B D^2 FLOP), big D -> 16 D (16x that), head 16 D -> C."""


class Stack(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(D, name="small")(x))
        x = nn.relu(nn.Dense(16 * D, name="big")(x))
        return nn.Dense(C, name="head")(x)


@pytest.fixture(scope="module")
def stack():
    return xla_cost.analyze(Stack(), jax.ShapeDtypeStruct((B, D), jnp.float32), optimizer="adam",
                            timed=True, per_layer=True)


def test_the_layer_with_16x_the_flop_takes_the_larger_share(stack):
    timing = stack.timing
    counted = {layer.path: layer for layer in stack.layers}
    # forward: small 2 B D^2 + B D (the bias), big 2 B D (16 D) + B (16 D) = 16x; backward:
    # small has no input gradient (the first layer), big both
    assert counted["small"].forward_flops == 2 * B * D * D + B * D
    assert counted["big"].forward_flops == 16 * counted["small"].forward_flops
    rows = {row["path"]: row for row in timing.layer_table(stack.layers)}
    assert list(rows) == [layer.path for layer in stack.layers]  # the report's rows, in its order
    # measured: a wall clock, which load only lengthens, on whichever instruction it hits; within one
    # traced step two rows' shares compare as their times do (one period). In the least disturbed
    # of the traced steps (three at least), the layer with 16x the FLOP takes the larger share,
    # in the step and in the forward pass
    split = timing.split
    assert split.traced_steps >= 3

    def per_step(row, which=None):
        return [sum(share for (r, p), share in zip(split.columns, step) if r == row and which in (None, p))
                for step in split.shares]

    assert any(big > small for big, small in zip(per_step("big"), per_step("small")))
    assert any(big > small for big, small in zip(per_step("big", "forward"), per_step("small", "forward")))
    assert rows["big"]["flops"] == counted["big"].total.flops
    assert rows["big"]["flops_per_s"] == pytest.approx(rows["big"]["flops"] / rows["big"]["total_s"])


def test_the_parts_of_the_traced_step_add_up_to_the_one_program_step(stack):
    timing = stack.timing
    split = timing.split
    step = timing.phases["train_step"]
    assert step.source == "one program" and step.low_s <= step.median_s <= step.high_s
    # the parts, scaled to the step, add up to it; the rows to the parts
    parts = sum(split.parts[p].seconds for p in S.PARTS)
    assert parts == pytest.approx(step.median_s, rel=1e-9)
    rows = timing.layer_table(stack.layers)
    for phase in ("forward", "backward", "update"):
        assert sum(r[f"{phase}_s"] for r in rows) == pytest.approx(timing.phases[phase].median_s, rel=1e-9)
        assert timing.phases[phase].source == "trace"
    # as traced, unscaled: the parts add up to the traced period (how that period compares with
    # the untraced steps is the profiler's cost, a wall-clock figure the benchmark reports)
    assert sum(split.trace_s.values()) == pytest.approx(split.traced_period_s, rel=1e-9)
    assert split.trace_overhead == pytest.approx(split.traced_period_s / split.step_s - 1)
    assert split.block_s == timing.step.block_s
    assert sum(timing.fractions.values()) == pytest.approx(1.0)
    # every time has its interval
    for part in S.PARTS:
        assert split.parts[part].low_s <= split.parts[part].high_s
    data = stack.to_dict()["timing"]
    assert data["step"]["donated"] == ["params", "opt_state", "state"]
    assert {r["path"] for r in data["layers"]} == {"small", "big", "head", xla_cost.REMAINDER}
    assert data["split"]["parts"]["idle"]["seconds"] == pytest.approx(split.parts["idle"].seconds)
