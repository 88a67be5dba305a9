"""Tables that fit a 100-column terminal, in units that scale, and results that
say their own defaults (issue 24)."""

from __future__ import annotations

import pandas as pd

import xla_cost
from xla_cost.analysis.memory import MemoryBreakdown
from xla_cost.timemodel import schedule
from xla_cost.present.units import duration, time_unit
from xla_cost.runs.estimates import TrainingEstimate
from xla_cost.runs.scaling import ScalingResult, StepEstimate
from xla_cost.runs.sweeps import SweepResult

WIDTH = 100


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def _step(devices: int, batch: int, compute: float, communication: float) -> StepEstimate:
    prediction = schedule.predict_step(compute * 1e15, None, communication, peak_flops=1e15, peak_bandwidth=None)
    return StepEstimate(devices, batch, flops=3_741_715, bytes_accessed=None,
                        communication_bytes=2_135_596 * (devices > 1), prediction=prediction)


def _scaling(hardware: xla_cost.Hardware) -> ScalingResult:
    # 144 µs of compute a step; 0, 6.75 and 13.1 µs of communication on 1, 2 and 4 devices
    steps = (_step(1, 1, 144e-6, 0.0), _step(2, 2, 144e-6, 6.75e-6), _step(4, 4, 144e-6, 13.1e-6))
    curve = schedule.scaling_curve([(s.devices, s.global_batch, s.prediction) for s in steps])
    return ScalingResult("one_net", "data", 1, hardware, steps, curve, optimizer="sgd", dtype="float32")


def test_time_units_and_durations():
    assert time_unit([150e-6, 20e-6]) == (1e-6, "µs")
    assert time_unit([0.25]) == (1e-3, "ms") and time_unit([3.0]) == (1.0, "s")
    # a run's length in the largest unit that reads at least 1
    assert duration(37.8) == "37.80 s" and duration(2 * 3600) == "2.000 h"
    assert duration(34 * 86400) == "34.00 days" and duration(150e-6) == "150.0 µs"
    assert duration(None) == "unknown"


def test_the_scaling_table_fits_a_terminal_in_its_own_units():
    result = _scaling(xla_cost.Hardware(mfu=1.0, overlap=0.0))
    text = result.to_table(width=WIDTH)
    assert _widest(text) <= WIDTH
    # 3,741,715 FLOP a device read in MFLOP, 2,135,596 bytes in MB, microsecond steps in µs
    assert "MFLOP" in text and "(MB)" in text and "(µs)" in text and "3,741,715" not in text
    assert "3.742" in text and "2.136" in text
    # a bound at mfu 1 says 100% of peak, not "1 of peak"
    assert "compute at 100% of peak" in result.describe() and "at 1 of peak" not in result.describe()
    # one device is the baseline: speed-up 1.00x at 100.0% efficiency
    assert "1.00x" in text and "100.0%" in text
    # the total communication is a note, the table keeps the part not hidden
    assert any(line.startswith("- exposed comm.") for line in text.splitlines())


def test_the_estimate_table_reads_in_units():
    step = _step(2, 16, 0.6, 0.0)
    run = TrainingEstimate("one_net", 2, 1000, None, 3.0e6, 3.0e9, 63, step, 63 * 0.6, optimizer="adam",
                           dtype="float32")
    text = run.to_table(width=WIDTH)
    assert _widest(text) <= WIDTH
    # 3e6 FLOP a sample is 3.00 MFLOP; 3e9 in all 3.00 GFLOP (three figures); 63 steps of 0.6 s are 37.80 s
    assert "3.00 MFLOP" in text and "3.00 GFLOP" in text and "37.80 s" in text
    assert run.describe().startswith("one_net (adam, float32):")
    assert run.to_dict()["optimizer"] == "adam" and len(run.to_frame()) == 1


def test_fit_reads_a_tiny_memory_in_its_own_unit():
    parts = MemoryBreakdown(2_136_000, 2_136_000, 4_271_000, 0, 16, 21_170,
                            argument_bytes=6_407_016, output_bytes=4, temp_bytes=2_114_000, alias_bytes=0)
    fit = xla_cost.FitResult("one_net", 0, 750.0, 1000.0, "given", None, 1, parts, ((1, 8_521_320),),
                             optimizer="adam", dtype="float32")
    line = fit.describe()
    # 1,000 bytes is 1.00 KB (it read "usable 0.00 MB of 0.00 MB")
    assert "usable 0.75 KB of 1.00 KB" in line and "0.00 MB" not in line
    assert line.startswith("one_net (adam, float32):")
    text = fit.to_table(width=WIDTH)
    # the table's unit is its values': 8,521,320 bytes at the peak read 8.521 MB
    assert "(MB per device)" in text and "8.521" in text and "tried: 1 (8.52 MB)" in text


def test_the_sweep_table_fits_a_terminal():
    rows = [dict(model="resnet50", batch_size=b, width=64, optimizer=o, dtype="bfloat16", counter="xla",
                 status="ok", error=None, parameters=25_557_032, forward_flops=4.1e9 * b, backward_flops=8.2e9 * b,
                 update_flops=5e7 if o == "sgd" else 2.5e8, backward_to_forward=2.0,
                 backward_with_update_to_forward=2.01, seconds=12.3, key="k")
            for b in (1, 8, 64) for o in ("sgd", "adam")]
    runs = pd.DataFrame(rows)
    died = "worker process died 2 times (killed: most likely out of memory)"
    runs.loc[2, ["status", "error"]] = ["failed", died]
    text = SweepResult(runs, pd.DataFrame()).to_table(width=WIDTH)
    assert _widest(text) <= WIDTH
    lines = text.splitlines()
    # the columns with one value in every row are named once, above the table
    assert lines[0] == "6 configurations, 1 not ok (width=64, dtype=bfloat16, counter=xla)"
    # the failure's error is a numbered line under the table, not a cell wrapped over ten rows
    assert "failed[1]" in text and lines[-1] == f"[1] {died}"
    assert sum("resnet50" in line for line in lines) == 6


def test_markdown_keeps_every_cell_as_formatted():
    from xla_cost.present.markdown import markdown_table

    frame = pd.DataFrame({"phase": ["forward", "update"], "XLA / jaxpr": ["1.010", "1.000"],
                          "update GFLOP": ["0.0000188", "unknown"], "share": ["12.3%", "n/a"],
                          "bound": ["memory", "compute"]}).set_index("phase")
    text = markdown_table(frame)
    # tabulate alone reads the cells back as numbers: 1.01, 1, 1.88e-05
    assert "1.010" in text and "1.000" in text and "0.0000188" in text and "e-05" not in text
    rule = text.splitlines()[1]
    # the figures right, the words left
    assert [c.strip()[-1] == ":" and not c.strip().startswith(":") for c in rule.strip("|").split("|")] == [
        False, True, True, True, False]


def test_a_report_in_a_notebook_keeps_its_digits():
    import jax
    import jax.numpy as jnp

    from xla_cost.zoo import build_model

    report = xla_cost.analyze(build_model("one_net"), jax.ShapeDtypeStruct((2, 1), jnp.float32), optimizer="sgd",
                              per_layer=True)
    text = report._repr_markdown_()
    # the update's XLA / jaxpr is 1.000 (SGD's one multiply-add a parameter, counted alike by both), not "1"
    update = next(line for line in text.splitlines() if line.startswith("| update "))
    assert " 1.000 |" in update
    # the layer table's update column has units of its own: SGD's 2 FLOP a parameter are 2 x 524,416 =
    # 1,048,832 on fc2 and 2 x 1,290 = 2,580 on fc3, 400 times apart, so each cell takes its own prefix
    # (fc3 read "0.003" in an MFLOP column)
    assert "update FLOP" in text
    fc2, fc3 = (next(line for line in text.splitlines() if line.startswith(f"| {n} ")) for n in ("fc2", "fc3"))
    assert "| 1.049 M |" in fc2 and "| 2.580 k |" in fc3


def test_a_resnet50_report_with_layers_and_memory_fits_a_terminal():
    from xla_cost.zoo import example_inputs
    from xla_cost.zoo.resnet import ResNet

    # ResNet-50's layers at ImageNet's shape, one bottleneck block a stage (the names and figures of the widest
    # rows are the whole network's: layer4_0/downsample_conv, GFLOP at 224 x 224; a quarter of its compile)
    stages = (1, 1, 1, 1)
    report = xla_cost.analyze(ResNet(stage_sizes=stages, bottleneck=True), example_inputs("resnet50", 1),
                              optimizer="adam", per_layer=True, depth=1, memory=True)
    text = report.to_table(width=WIDTH)
    # phases, the layer rows with their saved activations, the memory parts: each table within 100 columns
    # (the layer table was 105: "backward / forward" and "saved activations" headers)
    assert _widest(text) <= WIDTH
    # the bottleneck blocks are rows of their own, none wrapped
    assert sum(line.startswith("│ layer") for line in text.splitlines()) == sum(stages)
