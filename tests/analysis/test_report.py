"""The report: JSON schema, DataFrame, renderings."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import xla_cost

# xla_cost's caches on, shared with the other modules that opt in (tests/conftest.py): the zoo programs
# this module analyses again are read back, not compiled again.
pytestmark = pytest.mark.usefixtures("module_caches")


PHASES = ["forward", "backward", "grad", "update", "train_step"]


def test_json_schema(zoo_report):
    report = zoo_report("conv_net", 2)
    data = json.loads(report.to_json())
    for key, kind in [
        ("model", str), ("config", dict), ("batch_size", int), ("optimizer", str),
        ("dtype", str), ("backend", str), ("jax_version", str), ("parameters", int),
    ]:
        assert isinstance(data[key], kind), key
    for key in ("flops", "transcendentals", "bytes_accessed", "memory"):
        assert list(data[key]) == PHASES, key
    for phase in PHASES:
        assert set(data["memory"][phase]) == {"argument_bytes", "output_bytes", "temp_bytes"}
    assert set(data["ratios"]) == {"backward_to_forward", "backward_with_update_to_forward"}
    assert data["ratios"]["backward_to_forward"] == pytest.approx(
        data["flops"]["backward"] / data["flops"]["forward"]
    )
    for row in data["layers"]:
        assert {"path", "parameters", "forward_flops", "backward_flops", "backward_to_forward"} <= set(row)
    # the backward phase is not a program of its own: its memory is unknown, not 0
    assert data["memory"]["backward"] == {"argument_bytes": None, "output_bytes": None, "temp_bytes": None}
    # the forward program's arguments: conv_net's parameters, conv1 7·7·3·32 = 4,704 and conv2
    # 7·7·32·64 = 100,352 (no biases), fc1 64·10 + 10 = 650: 105,706 float32; the batch
    # 2 x 224 x 224 x 3 float32 and its 2 int32 labels. It returns the float32 loss.
    parameters = 7 * 7 * 3 * 32 + 7 * 7 * 32 * 64 + 64 * 10 + 10
    assert data["parameters"] == parameters == 105_706
    assert data["memory"]["forward"]["argument_bytes"] == 4 * parameters + 4 * 2 * 224 * 224 * 3 + 4 * 2
    assert data["memory"]["forward"]["output_bytes"] == 4
    assert data["memory"]["grad"]["argument_bytes"] == data["memory"]["forward"]["argument_bytes"]  # the same inputs
    # SGD's update reads the gradients and the parameters (no optimizer state): twice the parameters
    assert data["memory"]["update"]["argument_bytes"] == 2 * 4 * parameters


def test_layers_only_when_asked(zoo_report):
    report = zoo_report("one_net", 2, per_layer=False)
    assert "layers" not in report.to_dict()
    assert report.layers is None


def test_frame_one_row_per_phase(zoo_report):
    report = zoo_report("conv_net", 2)
    frame = report.to_frame()
    assert list(frame.index) == PHASES
    assert frame.loc["grad", "flops"] == report.phases["grad"].flops
    assert pd.isna(frame.loc["backward", "temp_bytes"])
    layers = report.layers_frame()
    assert list(layers.index)[-1] == xla_cost.REMAINDER


def test_renderings(zoo_report):
    report = zoo_report("conv_net", 2)
    table = report.to_table()
    assert "conv1" in table and "backward/forward" in table
    markdown = report.to_markdown()
    assert markdown.startswith("## conv_net") and "| forward" in markdown
    assert report.to_csv().splitlines()[0].startswith("kind,name,flops")


def test_unknown_shown_as_unknown():
    costs = xla_cost.PhaseCosts(None, None, None, xla_cost.MemoryStats(None, None, None))
    phases = {p: costs for p in PHASES}
    report = xla_cost.Report(
        model="m", config={}, batch_size=1, optimizer="sgd", dtype="float32",
        backend="cpu", jax_version="0", parameters=1, phases=phases,
    )
    assert report.backward_to_forward is None
    assert "unknown" in report.to_table()
    assert report.to_dict()["flops"]["forward"] is None
