"""The time model's global constants (issue 32): one set for every device,
committed, checked against their bounds, read, overridden and written back.

The per-device profiles of issue 22 are gone: a V100 and an H100 are priced
with the same constants (`xla_cost.timemodel.calibration`), and what differs
between them comes from the device registry. Every bound below is the one
`calibration.BOUNDS` documents (a share of a peak in [0.05, 1], the products' share up to the
best measured, `MATMUL_CEILING`, a launch up to the shortest cuDNN call profiled,
`LAUNCH_CEILING`, a half-rate depth under 4,096, a host cost under 50 ms a step, a share of the
CUDA cores' rate in [0.05, 1]). Three are fitted (`FIELDS`); matmul, launch and host are set by
measurements (`MEASURED`; tests/study/test_validation.py derives the ceilings from the files).
"""

from __future__ import annotations

import json

import pytest

from xla_cost.errors import InputError
from xla_cost.timemodel import calibration
from xla_cost.timemodel.calibration import (
    BOUNDS, CONSTANTS, FIELDS, LAUNCH_CEILING, MATMUL_CEILING, MEASURED, Calibration, constants, describe,
    use_constants, write_constants,
)

LOWEST = {"matmul": 0.05, "memory": 0.05, "launch": 0.0, "depth": 0.0, "host": 0.0, "vector": 0.05}
HIGHEST = {"matmul": MATMUL_CEILING, "memory": 1.0, "launch": LAUNCH_CEILING, "depth": 4096.0, "host": 0.05,
           "vector": 1.0}
"""The bounds as the module's docstring states them, written out here."""


def test_the_constants_are_six_named_fields_with_their_documented_bounds():
    assert CONSTANTS == ("matmul", "memory", "launch", "depth", "host", "vector") == tuple(BOUNDS)
    assert FIELDS == ("memory", "depth", "vector")  # fitted; the others measured
    assert MEASURED == {"matmul": MATMUL_CEILING, "launch": LAUNCH_CEILING, "host": 0.0}
    assert {name: BOUNDS[name] for name in CONSTANTS} == {name: (LOWEST[name], HIGHEST[name]) for name in CONSTANTS}
    given = Calibration(matmul=0.5, memory=0.8, launch=3e-6, depth=128.0, host=2e-3, vector=0.3)
    assert given.values() == (0.8, 128.0, 0.3)  # the fitted ones, FIELDS' order
    # launch, depth and host default to none: a product at its share of the peak, nothing added; the CUDA
    # cores at their datasheet rate
    assert Calibration(0.5, 0.8).values() == (0.8, 0.0, 1.0)
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
    ("memory", 0.0), ("memory", 0.05 - 1e-9), ("memory", 1.0 + 1e-9), ("memory", float("nan")),
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


def test_a_missing_share_in_the_file_is_refused_not_read_as_zero():
    # from_dict reads an absent fitted field as 0: a share of 0 is outside its bounds, so the file is refused
    with pytest.raises(InputError, match="memory"):
        Calibration.from_dict({"matmul": 0.5})
    # the optional ones are 0 when absent, the measured ones their measurement
    assert Calibration.from_dict({"memory": 0.6}) == Calibration(MATMUL_CEILING, 0.6, launch=LAUNCH_CEILING)


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
    given = Calibration(0.4, 0.6, launch=2e-6, depth=256.0, host=1e-3, fitted_on=("a", "b"), source="test")
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
