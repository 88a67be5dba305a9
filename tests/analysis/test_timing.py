"""Timing on the CPU: the step as one program with its donations, its split,
MFU and the roofline, the separate programs' cross-check; and the counts
survive when a step cannot be timed."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from tests import formulas as F
from xla_cost.analysis import timing
from xla_cost.cli import main

CONV = ["analyze", "conv_net", "--batch-size", "2", "--set", "image_size=64"]

# The timed and untimed runs of conv_net and OneNet compile the same programs again: each compiled
# once in the module (tests/conftest.py). Nothing here patches the compile, only the clock, the
# trace and the device's memory.
pytestmark = pytest.mark.usefixtures("module_caches")


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    out = tmp_path_factory.mktemp("timing") / "r.json"
    assert main([*CONV, "--time", "--format", "json", "--output", str(out)]) == 0
    return json.loads(out.read_text())


def test_time_gives_the_one_program_step_its_split_mfu_and_roofline(timed):
    t = timed["timing"]
    peak = t["peak"]
    for phase in ("forward", "backward", "grad", "update", "train_step"):
        p = t["phases"][phase]
        assert 0 < p["low_s"] <= p["high_s"], phase  # every time with its 95% interval
        assert p["flops_per_s"] == pytest.approx(timed["flops"][phase] / p["median_s"]), phase
        assert p["bytes_per_s"] == pytest.approx(timed["bytes_accessed"][phase] / p["median_s"]), phase
        # MFU: the model FLOP per second over this CPU's measured matmul peak (two measurements
        # taken at different moments: their ratio has no bound a loaded machine keeps, the formula does)
        assert p["mfu"] == pytest.approx(timed["model_flops"][phase] / p["median_s"] / peak["flops_per_s"]), phase
        # roofline: the larger of FLOP at peak and bytes at peak bandwidth
        compute = timed["flops"][phase] / peak["flops_per_s"]
        memory = timed["bytes_accessed"][phase] / peak["bandwidth"]
        assert p["roofline_s"] == pytest.approx(max(compute, memory)), phase
        assert p["bound"] == ("compute" if compute >= memory else "memory"), phase
    # the step as one program, in blocks of steps with its arguments donated
    step = t["phases"]["train_step"]
    assert step["source"] == "one program" and step["repeats"] == len(t["step"]["block_s"]) >= 5
    assert step["low_s"] <= step["median_s"] <= step["high_s"]
    assert t["step"]["donated"] == ["params", "opt_state", "state"]
    # its parts from the trace, scaled to it: forward + backward + update + idle = the step
    parts = t["split"]["parts"]
    for phase in ("forward", "backward", "update", "grad"):
        assert t["phases"][phase]["source"] == "trace"
        assert t["phases"][phase]["median_s"] == pytest.approx(parts[phase]["seconds"])
    assert sum(parts[p]["seconds"] for p in ("forward", "backward", "update", "idle")) == pytest.approx(
        step["median_s"], rel=1e-9)
    assert parts["grad"]["seconds"] == pytest.approx(parts["forward"]["seconds"] + parts["backward"]["seconds"])
    # each share: the phase's time over forward + backward + update, exact to rounding
    median = {phase: p["median_s"] for phase, p in t["phases"].items()}
    split = median["forward"] + median["backward"] + median["update"]
    assert set(t["fractions"]) == {"forward", "backward", "update"}
    for phase in ("forward", "backward", "update"):
        assert t["fractions"][phase] == pytest.approx(median[phase] / split, rel=1e-12), phase
    assert t["backward_to_forward_time"] == pytest.approx(median["backward"] / median["forward"])
    assert t["backward_to_forward_flops"] == pytest.approx(timed["ratios"]["backward_to_forward"])
    # the cross-check: each program on its own; backward = grad - forward (never below 0), the
    # step = grad + update, and what that takes beyond the one program is the dispatch gap
    separate = t["separate"]
    assert {p["source"] for name, p in separate.items() if name in ("forward", "grad", "update")} == {
        "separate program"}
    assert separate["backward"]["median_s"] == pytest.approx(
        max(separate["grad"]["median_s"] - separate["forward"]["median_s"], 0.0), rel=1e-12)
    assert separate["backward"]["min_s"] is None  # only the median is derived
    assert separate["train_step"]["median_s"] == pytest.approx(
        separate["grad"]["median_s"] + separate["update"]["median_s"])
    assert t["dispatch_gap_s"] == pytest.approx(separate["train_step"]["median_s"] - step["median_s"])
    assert any("dispatch gap" in n for n in t["notes"])
    assert t["peak"]["source"].startswith("measured")
    assert t["skipped"] is None


def test_the_table_shows_the_step_its_parts_and_the_cross_check(timed, capsys):
    assert main([*CONV, "--time", "--per-layer"]) == 0
    out = capsys.readouterr().out
    assert "the train step as one program" in out and "95% interval ms" in out
    assert "measured time per layer in the one-program step" in out
    assert "cross-check: each program run on its own" in out and "dispatch gap" in out


def test_random_arrays_give_the_gradients_their_own_buffers():
    from xla_cost.zoo import build_model, example_inputs

    workload, _ = xla_cost.build_workload(build_model("one_net"), example_inputs("one_net", 2), optimizer="sgd")
    arrays = timing._random_like(workload.trees(), jax.random.key(0))
    assert workload.trees()["grads"] is workload.trees()["params"]  # one abstract tree for both
    for grad, param in zip(jax.tree.leaves(arrays["grads"]), jax.tree.leaves(arrays["params"])):
        assert grad.shape == param.shape and grad is not param
        assert grad.unsafe_buffer_pointer() != param.unsafe_buffer_pointer()
        assert not bool(jnp.array_equal(grad, param))  # drawn from keys of their own


def test_the_step_donates_what_it_returns_and_feeds_it_to_the_next_step():
    from xla_cost.zoo import build_model, example_inputs

    workload, _ = xla_cost.build_workload(build_model("one_net"), example_inputs("one_net", 4), optimizer="adam")
    arrays = timing._random_like(workload.trees(), jax.random.key(0))
    options = timing.TimingOptions(warmup=1, block_s=0.001, min_blocks=3, max_blocks=3, budget_s=0.0)
    stepper, text = timing._step_run(workload, arrays, options)
    # the first step took the parameters' and the optimizer state's buffers: deleted
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves((arrays["params"], arrays["opt_state"])))
    assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(arrays["batch"]))  # not donated
    assert "input_output_alias" in text
    assert stepper.record.donated == ("params", "opt_state", "state")
    assert len(stepper.record.block_s) == 3 and stepper.record.warmup == 1
    # each step is fed the last one's results: the optimizer's step count moved on
    before = int(jax.tree.leaves(stepper.args[1])[0])
    stepper.run(2)
    assert int(jax.tree.leaves(stepper.args[1])[0]) == before + 2


def test_library_bytes_of_derived_phases_and_in_the_roofline():
    # backward = grad - forward, train_step = grad + update
    assert timing._library_bytes({"forward": 10, "grad": 30, "update": 5}) == {
        "forward": 10, "backward": 20, "grad": 30, "update": 5, "train_step": 35}
    assert timing._library_bytes({"forward": None, "grad": 30}) == {"grad": 30}
    peak = xla_cost.DEVICES["h100"].peak
    costs = xla_cost.PhaseCosts(flops=1_000, transcendentals=0, bytes_accessed=4_000_000,
                                memory=xla_cost.MemoryStats(None, None, None), model_flops=1_000,
                                hardware_flops=1_000)
    measured = timing.PhaseTiming(1e-3, None, None, 1)
    # XLA's 4 MB and the library calls' 6 MB: 10 MB at the H100's 3.35 TB/s
    t = timing.against_counts(measured, costs, 6_000_000, peak, "bfloat16")
    assert t.roofline_s == pytest.approx(10e6 / 3.35e12) and t.bound == "memory"
    assert t.bytes_per_s == pytest.approx(10e6 / 1e-3)


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
    # the counts as without timing: OneNet's forward at batch 2 (tests/formulas.py)
    assert report.phases["forward"].jaxpr_flops == F.mlp_forward_phase(2, 1)
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
    # the counts as without timing: OneNet's forward and backward at batch 2 (tests/formulas.py)
    assert report.phases["grad"].jaxpr_flops == F.mlp_forward_phase(2, 1) + F.mlp_backward_phase(2, 1)
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


def test_a_cpu_peak_given_whole_is_not_measured(monkeypatch):
    # measuring the CPU takes a second of matmuls and copies: where both figures are given it is not needed
    measured = timing.DevicePeak("cpu (measured)", {"float32": 7e10}, 3e10, "measured")
    calls = []
    monkeypatch.setattr(timing, "measure_cpu_peak", lambda: calls.append(1) or measured)
    given = timing.device_peak("cpu", peak_tflops=1.0, peak_bandwidth=1e11)
    assert calls == [] and given.for_dtype("float32") == 1e12 and given.bandwidth == 1e11
    assert given.name.startswith("cpu (") and "measured" not in given.name
    half = timing.device_peak("cpu", peak_tflops=1.0)  # the bandwidth is still the measured one
    assert calls == [1] and half.bandwidth == 3e10 and half.for_dtype("float32") == 1e12


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


@pytest.mark.parametrize("events, said", [
    (RuntimeError("Profile has already been started"), "the profiler trace failed (RuntimeError"),
    ((), "no HLO op events of jit_train_step"),
])
def test_without_a_trace_the_parts_are_the_separate_programs(monkeypatch, events, said):
    from xla_cost.compiled import trace
    from xla_cost.zoo import build_model, example_inputs

    def record(run, module=None):
        if isinstance(events, Exception):
            raise events
        run()
        return events

    monkeypatch.setattr(trace, "record", record)
    workload, _ = xla_cost.build_workload(build_model("one_net"), example_inputs("one_net", 4), optimizer="sgd")
    report = xla_cost.analyze(build_model("one_net"), example_inputs("one_net", 4), optimizer="sgd")
    options = timing.TimingOptions(min_repeats=3, max_repeats=3, block_s=0.001, min_blocks=3, max_blocks=3)
    measured = timing.time_workload(workload, report.phases, dtype="float32", options=options)
    assert measured.split is None and measured.layer_table() == []
    assert any(note.startswith("no split") and said in note for note in measured.notes)
    for phase in ("forward", "grad", "update"):  # the parts: each program on its own
        assert measured.phases[phase] == measured.separate[phase]
    assert measured.phases["train_step"].source == "one program"  # the step is still one program
