"""Numbers that read (issue 30): a column that spans orders of magnitude gives each
cell its own unit ("1" FLOP, not "0.00000100 MFLOP"; "2.000 G", not "0.002 TFLOP"),
and the phase table has the FLOP per parameter, the optimizer's cost per parameter
in the update's row (SGD 2, Adam 13)."""

from __future__ import annotations

import dataclasses
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pandas as pd
import pytest
from flax.training import train_state

import xla_cost
from xla_cost.analysis.report_tables import PER_PARAMETER_HEADER, flop_per_parameter, phase_frame
from xla_cost.present.markdown import markdown_table
from xla_cost.present.units import (
    READABLE_SHARE, bytes_column, count_column, flop_column, per_parameter, si, size,
)
from xla_cost.zoo import build_model
from tests.formulas import mlp_params

# xla_cost's caches on, shared with the other modules that opt in (tests/conftest.py): the zoo programs
# this module analyses again are read back, not compiled again.
pytestmark = pytest.mark.usefixtures("module_caches")


# ------------------------------------------------------------------ the column rule


def test_a_column_within_three_orders_of_magnitude_shares_its_unit():
    # 1,064,000 to 3,742,000 FLOP: all at least 0.1 MFLOP, so one MFLOP column, three decimals
    unit, show = flop_column([1_064_000, 3_742_000, None])
    assert unit == "MFLOP"
    assert [show(v) for v in (1_064_000, 3_742_000, None, 0)] == ["1.064", "3.742", "unknown", "0.000"]
    # 100,000 FLOP is exactly READABLE_SHARE of an MFLOP: it still reads in the column's unit
    assert READABLE_SHARE == 0.1 and flop_column([100_000, 1_000_000])[0] == "MFLOP"


def test_a_column_that_spans_orders_of_magnitude_gives_each_cell_its_prefix():
    # a step's forward of 262,144 FLOP beside its metrics' 1 FLOP: 1 / 262,144 of a kFLOP... in MFLOP it
    # read 0.00000100; each cell now takes its own prefix, 4 significant digits
    unit, show = flop_column([2 * 16 * 64 * 128, 1])
    assert unit == "FLOP"
    assert show(2 * 16 * 64 * 128) == "262.1 k" and show(1) == "1" and show(0) == "0" and show(None) == "unknown"
    # 2e12 and 2e9 FLOP: in TFLOP the second read 0.002; now 2.000 T and 2.000 G
    unit, show = flop_column([2e12, 2e9])
    assert unit == "FLOP" and (show(2e12), show(2e9)) == ("2.000 T", "2.000 G")
    # 99,999 FLOP is just under 0.1 MFLOP beside 1e6: the column goes per cell
    assert flop_column([99_999, 1_000_000])[0] == "FLOP"


def test_counts_under_a_thousand_read_whole_and_bytes_take_their_own_unit():
    unit, show = count_column([11, 0, 22])
    assert unit == "" and [show(v) for v in (11, 0, 22)] == ["11", "0", "22"]
    # 2.2 MB and 8.6 MB share MB; 16,900 bytes beside 2,100,000 is 0.008 MB: each cell its own unit
    unit, show = bytes_column([2.2e6, 8.6e6])
    assert unit == "MB" and show(2.2e6) == "2.2"
    unit, show = bytes_column([16_900, 2_100_000])
    assert unit == "" and (show(16_900), show(2_100_000)) == ("16.9 KB", "2.10 MB")
    assert size(512) == "512 B" and size(999_500) == "1.00 MB"  # the rounded value's unit
    assert per_parameter(2.0) == "2" and per_parameter(13.004) == "13" and per_parameter(5012.4) == "5,012"
    # a step's 1 FLOP of metrics over 9,610 parameters is 0.000104 a parameter: not 0
    assert per_parameter(1 / 9610) == "0.00010" and per_parameter(0.0) == "0"


def test_the_table_check_finds_a_figure_below_a_tenth_of_its_unit():
    # what the reports' tests below assert is absent: 8,192 FLOP in an MFLOP column read 0.008
    old = "| layer | forward MFLOP |\n|:---|---:|\n| fc1 | 0.008 |\n| fc2 | 1.049 |"
    assert _no_cell_below_a_tenth_of_its_column_unit(old) == ["forward MFLOP: 0.008"]
    assert _no_cell_below_a_tenth_of_its_column_unit(old.replace("0.008", "0.100")) == []


def test_markdown_keeps_cells_with_units_right_aligned():
    frame = pd.DataFrame(
        {"phase": ["forward", "other"], "FLOP": ["262.1 k *", "1"], "temp": ["16.9 KB", "—"]}).set_index("phase")
    rule = markdown_table(frame).splitlines()[1]
    assert rule == "|:---|---:|---:|"


# ------------------------------------------------------------------ the reports' tables

B, IN, HIDDEN, CLASSES = 16, 64, 128, 10
PARAMS = IN * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(CLASSES)(nn.relu(nn.Dense(HIDDEN)(x)))


def _state(tx):
    def create():
        params = MLP().init(jax.random.key(0), jnp.ones((1, IN)))["params"]
        return train_state.TrainState.create(apply_fn=MLP().apply, params=params, tx=tx)

    return jax.eval_shape(create)


def _step(state, batch):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


BATCH = {"x": jax.ShapeDtypeStruct((B, IN), jnp.float32), "y": jax.ShapeDtypeStruct((B,), jnp.int32)}


def _cells(markdown: str, first: str) -> dict[str, str]:
    """The row starting with ``first`` of the markdown table that has it, by header."""
    lines = markdown.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    header = next(lines[i] for i in range(row, -1, -1) if lines[i + 1].startswith("|:---"))
    split = lambda line: [c.strip() for c in line.strip("|").split("|")]  # noqa: E731
    return dict(zip(split(header), split(lines[row])))


def _no_cell_below_a_tenth_of_its_column_unit(markdown: str) -> list[str]:
    """Cells of a column headed in a prefixed unit (``MFLOP``, ``(MB)``) that read below 0.1 of it."""
    bad = []
    lines = markdown.splitlines()
    for i, line in enumerate(lines[:-1]):
        if not lines[i + 1].startswith("|:---"):
            continue
        header = [c.strip() for c in line.strip("|").split("|")]
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            for name, cell in zip(header, (c.strip() for c in row.strip("|").split("|"))):
                prefixed = re.search(r"\b[kMGTP]FLOP\b|\((k|M|G|T|P|KB|MB|GB|TB)\)", name)
                number = re.fullmatch(r"[\d,]*\.?\d+( \*)?", cell)
                if prefixed and number and 0 < float(cell.split()[0].replace(",", "")) < READABLE_SHARE:
                    bad.append(f"{name}: {cell}")
    return bad


def test_a_users_step_reads_its_one_flop_of_metrics_as_1_and_sgd_as_2_flop_a_parameter():
    report = xla_cost.analyze_step(_step, _state(optax.sgd(0.1)), BATCH, counter="jaxpr")
    markdown = report.to_markdown()
    # TrainState.apply_gradients' step + 1 is the "other" part: 1 FLOP beside a forward of
    # 2 x 16 x 64 x 128 = 262,144 FLOP and more; it read 0.00000100 in an MFLOP column
    assert report.phases["other"].flops == 1
    other = _cells(markdown, "other")
    assert other["FLOP"] == "1" and "0.000001" not in markdown
    assert other[PER_PARAMETER_HEADER] == per_parameter(1 / PARAMS) != "0"
    assert _no_cell_below_a_tenth_of_its_column_unit(markdown) == []
    # SGD: -lr * g and p + u, 2 FLOP a parameter (a multiply and an add), so the update over the
    # 64 x 128 + 128 + 128 x 10 + 10 parameters is exactly 2
    assert report.parameters == PARAMS and report.phases["update"].flops == 2 * PARAMS
    assert flop_per_parameter(report, "update") == 2
    assert _cells(markdown, "update")[PER_PARAMETER_HEADER] == "2"
    # the train step's: forward + backward + update + other over the parameters, two decimals
    step = report.phases["train_step"].flops
    assert _cells(markdown, "train_step")[PER_PARAMETER_HEADER] == per_parameter(step / PARAMS)
    assert PER_PARAMETER_HEADER in report.to_table(width=200)


@pytest.mark.parametrize("optimizer, per_parameter_flops", [
    ("sgd", 2),  # p - lr * g: a multiply and a subtract
    # Adam: m = b1 m + (1 - b1) g (3), v = b2 v + (1 - b2) g^2 (4), m / bc1 and v / bc2 (2),
    # sqrt(v) + eps (1; the root is a transcendental), their quotient (1), times -lr (1), p + u (1): 13
    ("adam", 13),
])
def test_analyze_reports_the_optimizers_flop_per_parameter(optimizer, per_parameter_flops):
    report = xla_cost.analyze(build_model("one_net"), jax.ShapeDtypeStruct((2, 1), jnp.float32),
                              optimizer=optimizer, per_layer=True)
    assert report.parameters == mlp_params(1)  # one_net: 1 -> 4096 -> 128 -> 10, weights and biases
    # the bias corrections run once a step on scalars: a few FLOP in all, below 0.01 a parameter
    assert flop_per_parameter(report, "update") == pytest.approx(per_parameter_flops, abs=0.01)
    markdown = report.to_markdown()
    assert _cells(markdown, "update")[PER_PARAMETER_HEADER] == str(per_parameter_flops)
    assert _no_cell_below_a_tenth_of_its_column_unit(markdown) == []
    # the layer table: fc2's 524,416 parameters and fc3's 1,290 are 400 times apart, each cell its prefix
    fc3 = _cells(markdown, "fc3")
    assert fc3["update FLOP"] == si(report.layers[2].update_flops)


def test_an_update_xla_counts_above_its_jaxpr_gives_the_optimizers_arithmetic_beside_it():
    # optax.MultiSteps(adam, 3): per parameter the running mean of the gradients (3), Adam without its
    # apply (12), 2 selects, (1 - emit) * acc and emit * u (1 each) and the apply (1): 20 FLOP, plus a few
    # dozen a step on scalars (the counters, the bias corrections). XLA's CPU fusions compute the cheap
    # producers again in every fusion that reads them (+75% on a 32-64-10 MLP): analyze's update is XLA's
    # count, so its FLOP / parameter cell gives the jaxpr's beside it, the figure analyze_step's update has
    tx = optax.MultiSteps(optax.adam(1e-3), every_k_schedule=3)
    report = xla_cost.analyze(MLP(), BATCH["x"], optimizer=tx)
    update = report.phases["update"]
    per_step = 64  # the scalar work of a step, whatever the parameters
    assert 20 * PARAMS <= update.jaxpr_flops <= 20 * PARAMS + per_step
    assert update.flops == update.xla_flops > 1.05 * update.jaxpr_flops  # the fused count (the case tested)
    cell = _cells(report.to_markdown(), "update")[PER_PARAMETER_HEADER]
    assert cell == f"{per_parameter(update.flops / PARAMS)} (jaxpr {per_parameter(update.jaxpr_flops / PARAMS)})"
    assert any(line.startswith(f"- update's {PER_PARAMETER_HEADER}: ") and "fusions' copies" in line
               for line in report.to_markdown().splitlines())
    step = xla_cost.analyze_step(_step, _state(tx), BATCH, counter="jaxpr")
    assert abs(step.phases["update"].flops - update.jaxpr_flops) <= per_step  # the same 20 a parameter
    # Adam alone: XLA's count is the jaxpr's within 0.5%, one figure (test above: "13")


def test_unknown_flop_or_no_parameters_read_unknown_not_0():
    report = xla_cost.analyze(build_model("one_net"), jax.ShapeDtypeStruct((2, 1), jnp.float32), optimizer="sgd",
                              counter="jaxpr")
    none = dataclasses.replace(report, parameters=0)
    assert flop_per_parameter(none, "update") is None
    assert phase_frame(none).loc["update", PER_PARAMETER_HEADER] == "unknown"
