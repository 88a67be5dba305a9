"""Units chosen per column, and small figures that never read 0 (issue 24)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import xla_cost
from xla_cost.present.units import bytes_unit, flop_unit, scaled
from xla_cost.zoo import build_model


def test_bytes_take_the_largest_unit_that_reads_at_least_one():
    assert bytes_unit([512]) == (1.0, "B")
    assert bytes_unit([2_000, None]) == (1e3, "KB")
    assert bytes_unit([8_952_037.1e6]) == (1e12, "TB")  # GPT-3's 8,952,037.1 MB reads 8.952 TB
    assert bytes_unit([]) == (1.0, "B")


def test_a_small_figure_in_a_large_unit_keeps_its_digits():
    scale, unit = flop_unit([766e9, 153e6])
    assert unit == "GFLOP"
    assert scaled(153_342_192, scale) == "0.153"
    assert scaled(25_557, scale) == "0.0000256"  # an SGD update of a small net beside a large forward
    assert scaled(0, scale) == "0.000" and scaled(None, scale) == "unknown"


def test_report_columns_choose_their_own_units():
    report = xla_cost.analyze(build_model("one_net"), jax.ShapeDtypeStruct((2, 1), jnp.float32), optimizer="sgd")
    text = report.to_table(width=200)
    # one_net at batch 2: 533,898 parameters, so its train step (SGD alone is 2 FLOP a parameter) is millions
    # of FLOP and moves megabytes (4 bytes a parameter, read and written); 22 transcendentals, a plain count
    assert "MFLOP" in text and "bytes accessed (MB)" in text and "transcendentals (" not in text
    update = report.phases["update"].flops
    scale, _ = flop_unit([report.phases[p].flops for p in report.phase_names])
    assert scaled(update, scale) in text
