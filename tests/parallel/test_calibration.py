"""Calibration profiles (issue 22, part 2): committed per device, checked, read and overridden."""

from __future__ import annotations

import json

import pytest

from xla_cost.errors import InputError
from xla_cost.parallel import calibration
from xla_cost.parallel.calibration import Calibration, compute_seconds, profile, profiles, use_profiles, write_profiles


def test_every_committed_profile_names_its_fit():
    found = profiles()
    assert set(found) == {"a100-80gb", "h100", "p100", "p40"}
    for device, calibrated in found.items():
        assert calibrated.device == device and calibrated.fitted_on and "calibrate.py" in calibrated.source


def test_a_profile_by_any_name_the_registry_knows():
    assert profile("A100-80GB") == profiles()["a100-80gb"]
    assert profile("v100") is None  # no published case fits one


@pytest.mark.parametrize("fields", [
    {"matmul": 0.0, "memory": 0.5}, {"matmul": 1.5, "memory": 0.5}, {"matmul": 0.5, "memory": 4.5},
    {"matmul": True, "memory": 0.5}, {"matmul": 0.5, "memory": 0.5, "launch": -1e-6},
    {"matmul": 0.5, "memory": 0.5, "launch": 0.01},
])
def test_out_of_range_shares_are_refused(fields):
    with pytest.raises(InputError, match="calibration share|seconds per kernel"):
        Calibration("h100", **fields)


def test_the_limits_of_each_share_are_accepted_and_one_past_them_refused():
    # matmul in (0, 1], memory in (0, MEMORY_LIMIT], launch in [0, 1 ms)
    assert Calibration("h100", matmul=1.0, memory=calibration.MEMORY_LIMIT, launch=0.0).matmul == 1.0
    assert Calibration("h100", matmul=1e-9, memory=1e-9, launch=0.999e-3).launch == 0.999e-3
    for fields in ({"matmul": 1.0 + 1e-9, "memory": 1.0}, {"matmul": 1.0, "memory": calibration.MEMORY_LIMIT + 1e-9},
                   {"matmul": 1.0, "memory": 0.0}, {"matmul": 1.0, "memory": 1.0, "launch": 1e-3}):
        with pytest.raises(InputError, match="calibration share|seconds per kernel"):
            Calibration("h100", **fields)


def test_compute_seconds_is_the_two_kinds_of_work_and_the_launches():
    c = Calibration("h100", matmul=0.5, memory=0.8, launch=4e-6)
    # 1e12 FLOP at half of 1e15 FLOP/s: 2 ms; 1e9 bytes at 0.8 of 1e12 B/s: 1.25 ms; 100 kernels at 4 us: 0.4 ms
    assert compute_seconds(1e12, 1e9, 1e15, 1e12, c, kernels=100) == pytest.approx(2e-3 + 1.25e-3 + 0.4e-3)


def test_use_profiles_overrides_and_restores():
    mine = Calibration("p40", 0.5, 0.5)
    with use_profiles({"p40": mine}):
        assert profile("p40") is mine and profile("a100-80gb") is None
    assert profile("p40") == profiles()["p40"]
    with use_profiles(None):
        assert profile("p40") == profiles()["p40"]


def test_written_profiles_read_back(tmp_path, monkeypatch):
    given = {"p100": Calibration("p100", 0.4, 0.6, ("a", "b"), "test", 2e-6)}
    (path,) = write_profiles(given, tmp_path)
    assert json.loads(path.read_text())["fitted_on"] == ["a", "b"]
    monkeypatch.setattr(calibration, "DIRECTORY", tmp_path)
    profiles.cache_clear()
    try:
        assert profiles() == given
    finally:
        monkeypatch.undo()
        profiles.cache_clear()
