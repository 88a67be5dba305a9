"""Timing on the CPU: seconds per phase, the split, MFU and the roofline; and
the counts survive when a step cannot be timed."""

from __future__ import annotations

import json

import pytest

import xla_cost
from xla_cost.analysis import timing
from xla_cost.cli import main

CONV = ["analyze", "conv_net", "--batch-size", "2", "--set", "image_size=64"]


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    out = tmp_path_factory.mktemp("timing") / "r.json"
    assert main([*CONV, "--time", "--format", "json", "--output", str(out)]) == 0
    return json.loads(out.read_text())


def test_time_gives_seconds_split_mfu_and_roofline(timed):
    t = timed["timing"]
    for phase in ("forward", "backward", "grad", "update", "train_step"):
        p = t["phases"][phase]
        assert p["median_s"] > 0 and p["repeats"] >= 5, phase
        assert p["flops_per_s"] == pytest.approx(timed["flops"][phase] / p["median_s"]), phase
        assert 0 < p["mfu"] < 2, phase  # against this CPU's measured matmul peak
        # roofline: the larger of FLOP at peak and bytes at peak bandwidth
        peak = t["peak"]
        compute = timed["flops"][phase] / peak["flops_per_s"]
        memory = timed["bytes_accessed"][phase] / peak["bandwidth"]
        assert p["roofline_s"] == pytest.approx(max(compute, memory)), phase
        assert p["bound"] == ("compute" if compute >= memory else "memory"), phase
    # backward is derived, grad - forward (never below 0), from the measured medians
    median = {phase: p["median_s"] for phase, p in t["phases"].items()}
    assert median["backward"] == pytest.approx(max(median["grad"] - median["forward"], 0.0), rel=1e-12)
    assert t["phases"]["backward"]["min_s"] is None  # only the median is derived
    # each share: the phase's median over forward + backward + update, exact to rounding
    split = median["forward"] + median["backward"] + median["update"]
    assert set(t["fractions"]) == {"forward", "backward", "update"}
    for phase in ("forward", "backward", "update"):
        assert t["fractions"][phase] == pytest.approx(median[phase] / split, rel=1e-12), phase
    assert sum(t["fractions"].values()) == pytest.approx(1.0, rel=1e-12)
    assert t["backward_to_forward_time"] == pytest.approx(
        t["phases"]["backward"]["median_s"] / t["phases"]["forward"]["median_s"]
    )
    assert t["backward_to_forward_flops"] == pytest.approx(timed["ratios"]["backward_to_forward"])
    assert t["peak"]["source"].startswith("measured")
    assert t["skipped"] is None


class _FakeClock:
    """``time.perf_counter`` for `timing._measure`: it advances only when a run does."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = list(durations)
        self.runs = 0

    def perf_counter(self):
        return self.now

    def run(self):
        self.now += self.durations[self.runs]
        self.runs += 1


def test_measure_reports_the_median_min_and_iqr_of_the_timed_runs(monkeypatch):
    # one warm-up of 100 s (not timed), then 5 timed runs of 3, 1, 4, 1, 5 s (whole
    # seconds: exact in floating point). Sorted 1, 1, 3, 4, 5: median 3 (not the mean 2.8,
    # not the min 1); quartiles by linear interpolation at ranks 1 and 3 (of 0..4): 1 and 4.
    clock = _FakeClock([100, 3, 1, 4, 1, 5])
    monkeypatch.setattr(timing, "time", clock)
    t = timing._measure(clock.run, warmup=1, min_repeats=5, max_repeats=5, budget_s=1e9, tolerance=0.02)
    assert clock.runs == 1 + 5
    assert (t.median_s, t.min_s, t.iqr_s, t.repeats) == (3.0, 1.0, 4.0 - 1.0, 5)


def test_measure_stops_when_the_median_is_stable(monkeypatch):
    # rounds: 3 runs (min_repeats), then len // 2 more each round, until the median moves by
    # at most 2% between rounds. 10, 2, 10: median 10; one more of 2 s: 2, 2, 10, 10 gives
    # (2 + 10) / 2 = 6, moved 40%; two more of 10 s: 2, 2, 10, 10, 10, 10 gives 10, moved
    # 67%; three more of 10 s: nine runs, median 10, moved 0: stop after 3 + 1 + 2 + 3 = 9
    clock = _FakeClock([10, 2, 10, 2, 10, 10, 10, 10, 10])
    monkeypatch.setattr(timing, "time", clock)
    t = timing._measure(clock.run, warmup=0, min_repeats=3, max_repeats=100, budget_s=1e9, tolerance=0.02)
    assert (t.repeats, t.median_s, t.min_s) == (9, 10.0, 2.0)


def test_timing_never_changes_the_counts(timed, capsys):
    assert main([*CONV, "--format", "json"]) == 0
    untimed = json.loads(capsys.readouterr().out)
    for key in ("flops", "xla_flops", "jaxpr_flops", "bytes_accessed", "transcendentals"):
        assert untimed[key] == timed[key], key


def test_too_big_for_the_device_still_reports_counts(monkeypatch):
    from xla_cost.zoo import build_model, example_inputs

    monkeypatch.setattr(timing, "_available_bytes", lambda: 1000)  # a 1 kB device
    report = xla_cost.analyze(
        build_model("one_net"), example_inputs("one_net", 2), optimizer="sgd", timed=True,
    )
    assert report.phases["forward"].flops > 0
    assert report.timing.phases == {} and "needs at least" in report.timing.skipped
    assert any(n.startswith("timing skipped") for n in report.notes)
    assert "timing skipped" in report.to_table()


def test_out_of_memory_while_running_is_reported(monkeypatch):
    from xla_cost.zoo import build_model, example_inputs

    def exhausted(*_args, **_kwargs):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 9 GB")

    monkeypatch.setattr(timing, "_random_like", exhausted)  # allocating the arrays fails
    report = xla_cost.analyze(
        build_model("one_net"), example_inputs("one_net", 2), optimizer="sgd", timed=True,
    )
    assert report.phases["grad"].flops > 0
    assert report.timing.skipped.startswith("out of memory: RESOURCE_EXHAUSTED")


@pytest.mark.parametrize(
    "kind, name, bf16_tflops, bandwidth",
    [
        # datasheet figures, dense (no sparsity); sources in xla_cost/timing.py
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", 989.4, 3.35e12),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 756, 2.0e12),
        ("NVIDIA H200", "NVIDIA H200 SXM", 989, 4.8e12),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB", 312, 2.039e12),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 40GB", 312, 1.555e12),
        ("Tesla V100-SXM2-16GB", "NVIDIA V100 SXM2", 15.7, 900e9),  # no bf16 tensor cores
    ],
)
def test_device_peak_table(kind, name, bf16_tflops, bandwidth):
    peak = timing.device_peak(kind)
    assert peak.name == name
    assert peak.for_dtype("bfloat16") == pytest.approx(bf16_tflops * 1e12)
    assert peak.bandwidth == pytest.approx(bandwidth)


def test_device_peak_overrides_and_unknown_devices():
    peak = timing.device_peak("NVIDIA H100 80GB HBM3", peak_tflops=500, peak_bandwidth=1e12)
    assert peak.for_dtype("float32") == 500e12 and peak.bandwidth == 1e12
    with pytest.raises(ValueError, match="--peak-tflops"):
        timing.device_peak("Some Future GPU")
    given = timing.device_peak("Some Future GPU", peak_tflops=100, peak_bandwidth=2e12)
    assert given.for_dtype("bfloat16") == 100e12


def test_bad_peak_flags(capsys):
    assert main(["analyze", "one_net", "--time", "--peak-tflops", "0"]) == 2
    err = capsys.readouterr().err
    assert "peak_tflops a positive number" in err and "--peak-tflops 989" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("kwargs", [{"peak_tflops": -1.0}, {"peak_bandwidth": -5e11}, {"peak_tflops": float("nan")}])
def test_api_rejects_bad_peaks_like_the_cli(kwargs):
    from xla_cost.zoo import build_model, example_inputs

    with pytest.raises(xla_cost.InputError, match="a positive number"):
        xla_cost.analyze(build_model("one_net"), example_inputs("one_net", 1), optimizer="sgd", timed=True, **kwargs)
