"""The time model's global constants (issue 32): one set for every device,
committed, checked against their bounds, read, overridden and written back.

The per-device profiles of issue 22 are gone: a V100 and an H100 are priced
with the same constants (`xla_cost.timemodel.calibration`), and what differs
between them comes from the device registry. Every bound below is the one
`calibration.BOUNDS` documents (a share of a peak in [0.05, 1], the products' share up to the
best measured, `MATMUL_CEILING`, the bandwidth's share up to the best measured, `MEMORY_CEILING`,
a launch up to the shortest cuDNN call profiled, `LAUNCH_CEILING`, a half-rate depth under 4,096,
a host cost under 50 ms a step, a share of the CUDA cores' rate in [0.05, 1]). Two are fitted
(`FIELDS`); matmul, memory, launch and host are set by measurements (`MEASURED`;
tests/study/test_validation.py and tests/timemodel/test_memory_ceiling.py derive the ceilings
from the files).
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from xla_cost.errors import InputError
from xla_cost.timemodel import calibration
from xla_cost.timemodel.calibration import (
    BOUNDS, CONSTANTS, FIELDS, LAUNCH_CEILING, MATMUL_CEILING, MEASURED, MEMORY_CEILING, Calibration, constants,
    describe,
    use_constants, write_constants,
)

LOWEST = {"matmul": 0.05, "memory": 0.05, "launch": 0.0, "depth": 0.0, "host": 0.0, "vector": 0.05}
HIGHEST = {"matmul": MATMUL_CEILING, "memory": MEMORY_CEILING, "launch": LAUNCH_CEILING, "depth": 4096.0, "host": 0.05,
           "vector": 1.0}
"""The bounds as the module's docstring states them, written out here."""


def test_the_constants_are_six_named_fields_with_their_documented_bounds():
    assert CONSTANTS == ("matmul", "memory", "launch", "depth", "host", "vector") == tuple(BOUNDS)
    assert FIELDS == ("depth", "vector")  # fitted; the others measured
    assert MEASURED == {"matmul": MATMUL_CEILING, "memory": MEMORY_CEILING, "launch": LAUNCH_CEILING, "host": 0.0}
    assert {name: BOUNDS[name] for name in CONSTANTS} == {name: (LOWEST[name], HIGHEST[name]) for name in CONSTANTS}
    given = Calibration(matmul=0.5, memory=0.8, launch=3e-6, depth=128.0, host=2e-3, vector=0.3)
    assert given.values() == (128.0, 0.3)  # the fitted ones, FIELDS' order
    # launch, depth and host default to none: a product at its share of the peak, nothing added; the CUDA
    # cores at their datasheet rate
    assert Calibration(0.5, 0.8).values() == (0.0, 1.0)
    assert (Calibration(0.5, 0.8).launch, Calibration(0.5, 0.8).host) == (0.0, 0.0)


def test_the_committed_constants_are_one_set_within_bounds_that_names_its_fit():
    committed = constants()
    assert committed == Calibration.from_dict(json.loads(calibration.PATH.read_text()))
    assert calibration.PATH.name == "constants.json"
    for name in CONSTANTS:
        assert LOWEST[name] <= getattr(committed, name) <= HIGHEST[name], name
    for name, value in MEASURED.items():
        assert getattr(committed, name) == value, name  # measured, never fitted
    assert committed.source  # how they came to be, never blank
    if committed.fitted_on:
        # fitted by benchmarks/calibrate.py on cases the validation knows
        from xla_cost.study.validation import CASES

        assert "calibrate.py" in committed.source
        assert set(committed.fitted_on) <= {case.name for case in CASES}
    else:
        assert committed.source.startswith("not fitted")  # a starting point says it is one


@pytest.mark.parametrize("name, value", [
    ("matmul", 0.0), ("matmul", 0.05 - 1e-9), ("matmul", MATMUL_CEILING + 1e-9), ("matmul", True), ("matmul", "0.5"),
    ("memory", 0.0), ("memory", 0.05 - 1e-9), ("memory", MEMORY_CEILING + 1e-9), ("memory", 1.0),
    ("memory", float("nan")),
    ("launch", -1e-9), ("launch", LAUNCH_CEILING * (1 + 1e-9)), ("launch", 1e-3),
    ("depth", -1.0), ("depth", 4096.0 + 1e-6),
    ("host", -1e-9), ("host", 0.05 + 1e-9), ("host", None),
    ("vector", 0.0), ("vector", 1.0 + 1e-9),
])
def test_a_constant_out_of_its_bounds_is_refused_and_named(name, value):
    fields = {"matmul": 0.5, "memory": 0.5, name: value}
    low, high = BOUNDS[name]
    with pytest.raises(InputError, match=rf"a time-model constant {name} in \[{low:g}, {high:g}\]"):
        Calibration(**fields)


def test_the_bounds_themselves_are_accepted():
    assert Calibration(**LOWEST).values() == tuple(LOWEST[name] for name in FIELDS)
    assert Calibration(**HIGHEST).values() == tuple(HIGHEST[name] for name in FIELDS)


def test_a_file_is_read_with_the_measured_constants_and_its_fitted_ones():
    # a fitted share out of its bounds in the file is refused, never clipped
    with pytest.raises(InputError, match="vector"):
        Calibration.from_dict({"vector": 0.0})
    # the measured constants are their measurement whatever the file holds (a file fitted before memory was
    # measured holds memory 0.999999999, over MEMORY_CEILING); an absent depth reads 0, an absent vector 1
    measured = Calibration(MATMUL_CEILING, MEMORY_CEILING, launch=LAUNCH_CEILING)
    assert Calibration.from_dict({"memory": 0.999999999, "matmul": 0.5, "host": 0.01}) == measured
    assert Calibration.from_dict({"depth": 200.0, "vector": 0.25}) == dataclasses.replace(measured, depth=200.0,
                                                                                          vector=0.25)


def test_use_constants_overrides_nests_and_restores():
    committed = constants()
    mine, inner = Calibration(0.5, 0.8, launch=3e-6), Calibration(0.25, 0.25)
    with use_constants(mine):
        assert constants() is mine
        with use_constants(inner):
            assert constants() is inner
        assert constants() is mine
        with use_constants(None):  # None: no override, what is in place stays
            assert constants() is mine
    assert constants() == committed
    with pytest.raises(RuntimeError, match="inside"):
        with use_constants(mine):
            raise RuntimeError("inside")
    assert constants() == committed  # restored after an error too


def test_written_constants_read_back(tmp_path, monkeypatch):
    given = Calibration(**MEASURED, depth=256.0, vector=0.5, fitted_on=("a", "b"), source="test")
    committed = constants()
    monkeypatch.setattr(calibration, "PATH", tmp_path / "sub" / "constants.json")
    try:
        path = write_constants(given, calibration.PATH)
        # write_constants forgets what it read before: constants() answers the file just written
        assert constants() == given
    finally:
        monkeypatch.undo()
        calibration._committed.cache_clear()  # noqa: SLF001 - read the real file again
    assert path == tmp_path / "sub" / "constants.json"  # its folder made
    data = json.loads(path.read_text())
    assert data["fitted_on"] == ["a", "b"] and list(data) == sorted(data)  # sorted keys, the cases as a list
    assert Calibration.from_dict(data) == given == Calibration.from_dict(given.to_dict())
    assert constants() == committed


def test_describe_names_every_constant_and_the_fit():
    given = Calibration(0.5, 0.8, launch=3e-6, depth=128.0, host=2e-3, vector=0.25, fitted_on=("a", "b", "c"))
    text = describe(given)
    # 0.5 of the peak, half rate at k = 128, 0.8 of the bandwidth, 3 us a kernel, 0.25 of the CUDA cores,
    # 2 ms a step, 3 cases
    assert text == ("products at 50.0% of peak (half rate at k = 128), other kernels at 80.0% of the bandwidth, "
                    "3.00 µs per cuDNN call (other kernels up to their work), convolutions off the tensor cores "
                    "at 25.0% of the CUDA cores, 2.00 ms per step; one set for every "
                    "device, fitted on 3 cases (published runs and this project's measurements)")


# held-out residuals r = log(predicted / published seconds), four papers of one case and one of four
# (paper A's cases weigh 1/4 each, every paper 1 in all, as the fit weighs them)
RESIDUALS = {"a1": 0.05, "a2": -0.05, "a3": 0.15, "a4": 0.25, "b": -0.40, "c": 0.30, "d": 0.10, "e": 0.60}
PAPERS = {"a1": "A", "a2": "A", "a3": "A", "a4": "A", "b": "B", "c": "C", "d": "D", "e": "E"}


def test_the_prediction_interval_is_the_weighted_quantile_of_the_held_out_errors():
    from xla_cost.timemodel.calibration import PredictionInterval, weighted_quantile

    found = PredictionInterval.from_residuals(RESIDUALS, PAPERS, 80.0, "synthetic")
    # |r| sorted with their weights: 0.05 (1/4), 0.05 (1/4), 0.10 (1), 0.15 (1/4), 0.25 (1/4), 0.30 (1),
    # 0.40 (1), 0.60 (1); cumulated 0.25, 0.5, 1.5, 1.75, 2, 3, 4, 5 of 5: 80% (4 of 5) first reached at b's 0.40
    assert found.spread == 0.40
    # r sorted: -0.40 (1), -0.05, 0.05 (1/4 each), 0.10 (1), ...: cumulated 1, 1.25, 1.5, 2.5: half of 5 at d's 0.10
    assert found.bias == 0.10
    assert (found.cases, found.papers, found.coverage) == (8, 5, 80.0)
    # unweighted, A's four cases would count four times: numpy's 80th percentile of the 8 |r| is
    # 0.30 + 0.6 x (0.40 - 0.30) = 0.36, narrower than what the papers say
    assert found.spread > 0.36
    # a step predicted at 2 s took 2 e^-0.4 to 2 e^0.4 s: the range holds its own point
    assert found.seconds(2.0) == pytest.approx((2 * math.exp(-0.4), 2 * math.exp(0.4)), rel=1e-12)
    assert found.factor == pytest.approx(math.exp(0.4), rel=1e-12)
    # equal weights: the ceil(share n)-th smallest (the 8th of 10 at 80%)
    assert weighted_quantile([float(v) for v in range(10, 0, -1)], [1.0] * 10, 0.8) == 8.0
    text = found.describe()
    assert "0.67x to 1.49x the predicted one" in text and "8 cases of 5 papers" in text  # e^-0.4, e^0.4
    assert "the median case ran at 0.90x its predicted time" in text  # e^-0.10: the bias, said, not applied
    assert PredictionInterval.from_dict(found.to_dict()) == found


def test_a_biased_model_s_interval_still_holds_its_point():
    from xla_cost.timemodel.calibration import PredictionInterval

    # every held-out case predicted too slow (r from 0.1 to 0.5, one paper each): the 10th-90th percentiles of
    # r, e^-0.46 to e^-0.14 of the point, would have left the point out, as "2.049 h (1.548 h to 1.949 h)" did
    biased = {name: 0.1 * (i + 1) for i, name in enumerate("vwxyz")}
    found = PredictionInterval.from_residuals(biased, {name: name for name in biased})
    assert found.spread == pytest.approx(0.4) and found.bias == pytest.approx(0.3)  # 4th of 5 |r|; the 3rd r
    shortest, longest = found.seconds(7380.0)
    assert shortest < 7380.0 < longest
    assert "the median case ran at 0.74x its predicted time" in found.describe()  # e^-0.3


def test_an_interval_of_the_old_form_is_refused_alone_and_read_as_none_with_the_constants():
    from xla_cost.timemodel.calibration import PredictionInterval, interval, interval_description

    old = {"low": -0.37, "high": 0.53, "percentiles": [10.0, 90.0], "cases": 20, "papers": 7, "how": "x"}
    with pytest.raises(InputError, match="'spread' and 'bias'"):
        PredictionInterval.from_dict(old)
    read = Calibration.from_dict({"memory": 0.6, "interval": old})
    assert read.interval is None  # no range rather than a range of another definition
    with use_constants(read):
        assert interval(1.0) is None and "calibrate.py" in interval_description()
    with pytest.raises(InputError, match="at least two"):
        PredictionInterval.from_residuals({"a": 0.1}, {"a": "A"})
    with pytest.raises(InputError, match="each with its paper"):
        PredictionInterval.from_residuals({"a": 0.1, "b": 0.2}, {"a": "A"})
