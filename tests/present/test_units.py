"""Units chosen per column, and small figures that never read 0 (issue 24)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost.present.units import (
    bytes_unit, count, flop_unit, pct, pct_sig, scaled, short_count, si, time_unit, unit,
)
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


# Each SI prefix from its power of ten (1e3 k, 1e6 M, 1e9 G, 1e12 T, 1e15 P): a figure reads in
# the largest prefix it reaches; one less than the power reads in the prefix below.
BOUNDARIES = [(10**3, "k", 1.0, ""), (10**6, "M", 1e3, "k"), (10**9, "G", 1e6, "M"),
              (10**12, "T", 1e9, "G"), (10**15, "P", 1e12, "T")]


@pytest.mark.parametrize("power, prefix, below_scale, below_prefix", BOUNDARIES,
                         ids=[b[1] for b in BOUNDARIES])
def test_a_prefix_starts_exactly_at_its_power_of_ten(power, prefix, below_scale, below_prefix):
    assert unit([power]) == (float(power), prefix)
    assert unit([power - 1]) == (below_scale, below_prefix)
    assert unit([-power]) == (float(power), prefix)  # the magnitude chooses
    assert flop_unit([power]) == (float(power), f"{prefix}FLOP")
    assert flop_unit([power - 1]) == (below_scale, f"{below_prefix}FLOP")
    # si, 4 significant digits: the power reads 1.000 of its prefix; 999 of the prefix below
    # (999 x power / 1000) reads 999.0 of it (999 plain below a thousand: a count)
    assert si(power) == f"1.000 {prefix}"
    assert si(999 * power // 1000) == (f"999.0 {below_prefix}" if below_prefix else "999")
    # a column scaled to the prefix: the power reads 1.000, 999 of the prefix below 0.999
    assert scaled(power, float(power)) == "1.000"
    assert scaled(999 * power // 1000, float(power)) == "0.999"


def test_figures_past_the_largest_prefix_stay_in_it_and_below_a_thousand_have_none():
    assert unit([10**18]) == (1e15, "P") and flop_unit([10**18]) == (1e15, "PFLOP")
    assert si(10**18) == "1,000 P"  # 1e18 / 1e15 = 1000, with a thousands separator
    assert unit([999, None, float("nan")]) == (1.0, "") and unit([]) == (1.0, "")
    assert si(999.5) == "999.5"  # not an integer: 4 significant digits, no prefix


@pytest.mark.parametrize("power, prefix, below_scale, below_prefix", BOUNDARIES,
                         ids=[b[1] for b in BOUNDARIES])
def test_a_figure_that_rounds_up_to_a_power_reads_in_its_prefix(power, prefix, below_scale, below_prefix):
    # 0.99999 of the power, to 4 significant digits, is the power: 1.000 of its prefix, never
    # 1,000 of the prefix below; 0.9999 of it is 999.9 of the prefix below (999.9 below a thousand)
    assert si(0.99999 * power) == f"1.000 {prefix}" and si(-0.99999 * power) == f"-1.000 {prefix}"
    assert si(0.9999 * power) == f"999.9 {below_prefix}".strip()
    # 3 significant digits: 0.9995 of the power rounds up to it as well, 0.9994 does not
    assert si(0.9995 * power, 3) == f"1.00 {prefix}"
    assert si(0.9994 * power, 3) == f"999 {below_prefix}".strip()


def test_a_tflop_figure_reads_in_tflop_not_pflop():
    # an A100's 312e12 bfloat16 FLOP/s (NVIDIA's datasheet) is 312 T, not 0.312 P
    scale, name = flop_unit([312e12])
    assert (scale, name) == (1e12, "TFLOP")
    assert scaled(312e12, scale) == "312.000" and si(312e12) == "312.0 T"


def test_percentages_are_a_hundred_times_the_share():
    assert pct(0.234) == "23.4%"  # 100 x 0.234 = 23.4, one decimal
    assert pct(1.0) == "100.0%" and pct(0.0) == "0.0%"
    assert pct(0.5, 0) == "50%"  # 100 x 0.5, no decimals
    assert pct(0.00352, 2) == "0.35%"  # 100 x 0.00352 = 0.352, two decimals
    assert pct_sig(0.0156) == "1.56%"  # 100 x 0.0156, 3 significant digits
    assert pct_sig(3.52e-6) == "0.000352%"  # 100 x 3.52e-6 = 3.52e-4
    assert pct_sig(0.25, 2) == "25%" and pct_sig(1.0) == "100%"
    assert pct(None) == pct_sig(float("nan")) == "unknown"


def test_time_and_byte_units_start_exactly_at_their_powers():
    # seconds from 1 s, ms from 1e-3 s, µs from 1e-6 s, ns below
    assert time_unit([1.0]) == (1.0, "s") and time_unit([0.999]) == (1e-3, "ms")
    assert time_unit([1e-3]) == (1e-3, "ms") and time_unit([0.999e-3]) == (1e-6, "µs")
    assert time_unit([1e-6]) == (1e-6, "µs") and time_unit([0.999e-6]) == (1e-9, "ns")
    # decimal bytes: KB from 1,000, MB from 10^6, GB from 10^9, TB from 10^12
    for power, name, below in [(10**3, "KB", (1.0, "B")), (10**6, "MB", (1e3, "KB")),
                               (10**9, "GB", (1e6, "MB")), (10**12, "TB", (1e9, "GB"))]:
        assert bytes_unit([power]) == (float(power), name)
        assert bytes_unit([power - 1]) == below


# (count, its letter's power of ten): three significant digits, at least one decimal.
SHORT_COUNTS = [
    (8_030_261_248, 9, "B"),  # Llama 3 8B (Dubey et al. 2024, Table 3 configuration): 8.03B
    (70_553_706_496, 9, "B"),  # Llama 3 70B: 70.6B
    (405_853_388_800, 9, "B"),  # Llama 3.1 405B: 405.9B (a decimal kept past three digits)
    (124_439_808, 6, "M"),
    (2_500, 3, "k"),
    (1_500_000_000_000, 12, "T"),
]


@pytest.mark.parametrize("value, power, letter", SHORT_COUNTS)
def test_a_short_count_has_three_significant_digits_and_a_decimal(value, power, letter):
    scaled_value = value / 10**power
    decimals = max(1, 2 - len(str(int(scaled_value))) + 1)  # 3 digits: 8.03, 70.6; never fewer than 1 decimal
    assert short_count(value) == f"{scaled_value:.{decimals}f}{letter}"


def test_a_short_count_takes_the_rounded_values_letter_and_stays_exact_below_a_thousand():
    assert short_count(999_960_000) == f"{999_960_000 / 1e9:.2f}B"  # 999.96M rounds to 1.00B, not 1000.0M
    assert short_count(512) == count(512) == "512"
    assert short_count(None) == "unknown"
