"""`xla-cost estimate` and `xla-cost scaling` with a mesh, micro-batches and
bounds: a thin layer over `xla_cost.runs.estimates.estimate` and `xla_cost.runs.scaling.scaling`
(their figures are tested in tests/runs/test_estimate.py); bad input is one
line and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from xla_cost.cli import main
from xla_cost.cli.parser import build_parser
from xla_cost.timemodel import devices
from xla_cost.timemodel.calibration import constants, describe
from xla_cost.runs import estimates

# xla_cost's caches on, shared with the other modules that opt in (tests/conftest.py): the zoo programs
# this module analyses again are read back, not compiled again.
pytestmark = pytest.mark.usefixtures("module_caches")


TINY = {"n_layer": 4, "d_model": 64, "n_head": 4, "seq_len": 32, "vocab_size": 256}
SETTINGS = [arg for key, value in TINY.items() for arg in ("--set", f"{key}={value}")]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_parse_mesh_micro_batches_and_bound():
    args = build_parser().parse_args(["estimate", "gpt2-small", "--tokens", "1e6", "--mesh", "data=16,model=8,pipeline=8",
                                      "--micro-batches", "64", "--bound", "--mfu", "0.5"])
    assert (args.mesh, args.micro_batches, args.bound, args.mfu) == ("data=16,model=8,pipeline=8", 64, True, 0.5)
    plain = build_parser().parse_args(["scaling", "resnet50"])
    # predictions by default: no fixed MFU, no fixed overlap, no mesh, one micro-batch
    assert (plain.mfu, plain.overlap, plain.bound, plain.mesh, plain.micro_batches) == (None, None, False, None, 1)


def test_estimate_with_a_pipeline_is_the_api(capsys, tmp_path):
    store = str(tmp_path / "s.sqlite")
    argv = ["estimate", "gpt2-small", "--tokens", "64000", *SETTINGS, "--batch-size", "2",
            "--mesh", "data=2,model=2,pipeline=2", "--micro-batches", "4", "--store", store, "--format", "json"]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    shown = json.loads(out)
    api = estimates.estimate("gpt2-small", tokens=64000, config=TINY, batch_size=2, mesh="data=2,model=2,pipeline=2",
                           micro_batches=4, store=store).to_dict()
    assert shown == json.loads(json.dumps(api))
    # 2 x 2 x 2 devices; 2 samples x 4 micro-batches x 2 replicas a step
    assert (shown["devices"], shown["global_batch"], shown["priced_as"]) == (8, 16, "prediction")
    assert shown["calibration"] == describe(constants())  # the global constants, one set for every device
    # what a planner asks, in the JSON and the table: throughput, MFU and HFU, the memory verdict
    assert shown["tokens_per_second"] == pytest.approx(16 * TINY["seq_len"] / shown["step_seconds"], rel=1e-12)
    assert shown["tokens_per_second_per_device"] == pytest.approx(shown["tokens_per_second"] / 8, rel=1e-12)
    assert shown["model_flops_utilization"] > 0 and shown["memory_verdict"] == "unknown"  # no target compiled
    code, out, err = run(capsys, *argv[:-2])
    assert code == 0, err
    assert out.startswith("gpt2-small with n_layer=4, d_model=64, n_head=4, seq_len=32, vocab_size=256 (")
    for row in ("tokens per second per device", "MFU (model FLOP / peak)", "HFU (with recomputation)",
                "memory per device", "- memory per device unknown: no target compiled"):
        assert row in out, row
    code, out, err = run(capsys, *argv, "--bound")
    assert code == 0, err
    bound = json.loads(out)
    assert (bound["priced_as"], bound["calibration"], bound["mfu"]) == ("bound", None, 1.0)
    assert bound["total_flops"] == shown["total_flops"]  # the same work, priced otherwise


def test_scaling_prints_each_predicted_step_s_range_where_the_device_s_program_is_priced(capsys, tmp_path):
    import dataclasses
    import math

    from xla_cost.timemodel.calibration import PROXY_NO_RANGE, PredictionInterval, use_constants

    # held-out cases within a factor 1.5 of their predictions (spread log 1.5): each point's step s took s / 1.5
    # to 1.5 s, in the JSON (xla_cost.predict's StepEstimate.interval; the table's "step range" column:
    # tests/runs/test_predict.py::test_a_prediction_carries_its_held_out_range_and_a_bound_none). Each case was
    # its device's own program: conv_net compiled for the H100 has the range at every point
    given = PredictionInterval(spread=math.log(1.5), bias=0.0, cases=10, papers=3, how="given here")
    store = ["--store", str(tmp_path / "s.sqlite")]
    with use_constants(dataclasses.replace(constants(), interval=given)):
        code, out, err = run(capsys, "scaling", "conv_net", "--devices", "1,2", "--batch-size", "4", "--target",
                             "h100", *store, "--format", "json")
        assert code == 0, err
        shown = json.loads(out)
        assert [p["devices"] for p in shown["points"]] == [1, 2] and shown["priced_as"] == "prediction"
        for point in shown["points"]:
            assert point["step_low_s"] == pytest.approx(point["step_s"] / 1.5, rel=1e-12)
            assert point["step_high_s"] == pytest.approx(point["step_s"] * 1.5, rel=1e-12)
        # a mesh's CPU program, priced from its totals: no range at any point, and the note says why
        argv = ["scaling", "gpt2-small", "--devices", "1,2", "--mesh", "model=2,pipeline=2", "--micro-batches", "2",
                *SETTINGS, *store]
        code, out, err = run(capsys, *argv, "--format", "json")
        assert code == 0, err
        shown = json.loads(out)
        assert [p["devices"] for p in shown["points"]] == [4, 8] and shown["mesh"] == {"model": 2, "pipeline": 2}
        assert all(p["step_low_s"] is None and p["step_high_s"] is None for p in shown["points"])
        code, out, err = run(capsys, *argv, "--format", "markdown")
        assert code == 0, err
        assert f"no range beside the predicted step times: {PROXY_NO_RANGE}" in out


@pytest.mark.parametrize("argv, expected", [
    (["estimate", "conv_net", "--samples", "10", "--device", "p100", "--dtype", "bfloat16"],
     "a dtype the NVIDIA Tesla P100 SXM2 has a published peak for"),
    (["estimate", "conv_net", "--samples", "10", "--device", "cpu"], "a device with a published peak"),
    (["estimate", "conv_net", "--samples", "10", "--mesh", "pipeline=2"], "n_layer"),
    (["estimate", "conv_net", "--samples", "10", "--devices", "2", "--mesh", "data=2"], "not both"),
    (["estimate", "conv_net", "--samples", "10", "--mesh", "data=two"], "positive integer"),
    (["estimate", "conv_net", "--samples", "10", "--mfu", "0"], "mfu in (0, 1]"),
    (["estimate", "conv_net", "--samples", "10", "--micro-batches", "0"], "micro-batches"),
    (["scaling", "conv_net", "--devices", "1,2", "--mesh", "data=2"], "without the grown axis"),
])
def test_bad_layouts_are_one_line(capsys, argv, expected):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and expected in err and "Expected" in err, err


PREDICTED = [name for name in devices.names("peak") if name != "cpu"]
"""Every device of the registry with a published peak (the CPU's is measured, not published)."""


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    """One store for every device: the step is analysed once (on the CPU) and priced on each."""
    return str(tmp_path_factory.mktemp("store") / "s.sqlite")


@pytest.mark.parametrize("device", PREDICTED)
def test_every_registry_device_predicts(capsys, shared_store, device):
    # issue 32's acceptance: `xla-cost estimate gpt2-small --samples 1e6 --device D` is a prediction on
    # every device with a peak (no per-device profile to lack); a 2-layer GPT-2 small keeps it fast
    small = [arg for key, value in {**TINY, "n_layer": 2}.items() for arg in ("--set", f"{key}={value}")]
    code, out, err = run(capsys, "estimate", "gpt2-small", "--samples", "1e6", "--device", device, *small,
                         "--store", shared_store, "--format", "json")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["priced_as"], shown["device"], shown["samples"]) == ("prediction", device, 10**6)
    # one set of constants for every device; a TPU's description without the two a GPU's libraries alone read
    assert shown["calibration"] == describe(constants(), gpu=devices.device(device).gpu is not None)
    assert shown["mfu"] is None
    # one sample a step on one device: 1e6 steps, each a positive time
    assert shown["steps"] == 10**6 and shown["step_seconds"] > 0
    assert shown["seconds"] == pytest.approx(shown["steps"] * shown["step_seconds"], rel=1e-12)


def test_every_device_with_a_peak_is_tried():
    assert {"h100", "a100", "v100", "p40", "tpu-v5e"} <= set(PREDICTED) and "cpu" not in devices.names("peak")


def test_a_fresh_process_simulates_the_mesh(tmp_path):
    # the command asks for the devices the analysed program needs (model=2) before JAX starts
    done = subprocess.run(
        [sys.executable, "-m", "xla_cost", "estimate", "gpt2-small", "--tokens", "64000", *SETTINGS,
         "--mesh", "data=2,model=2,pipeline=2", "--micro-batches", "4", "--bound", "--store",
         str(tmp_path / "s.sqlite"), "--format", "json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert (shown["devices"], shown["priced_as"], shown["micro_batches"]) == (8, "bound", 4)


@pytest.mark.parametrize("extra, shown", [([], None), (["--format", "json"], False), (["--quiet"], False)])
def test_estimate_shows_progress_on_a_terminal_but_not_in_json(capsys, monkeypatch, extra, shown):
    import contextlib

    from xla_cost.cli import commands

    asked = []

    @contextlib.contextmanager
    def line(what, enabled=None):
        asked.append((what, enabled))
        yield

    monkeypatch.setattr(commands.progress, "shown", line)
    code, _, err = run(capsys, "estimate", "conv_net", "--samples", "10", "--mfu", "0", *extra)  # refused at once
    assert code == 2 and "mfu in (0, 1]" in err
    # None: a line where stderr is a terminal; False: none (--quiet, or JSON for a program to read)
    assert asked == [("estimate", shown)]


@pytest.mark.parametrize("given, samples", [("1.5k", 1500), ("1,500", 1500), ("1_500", 1500), ("1.5e3", 1500)])
def test_counts_as_planners_write_them(capsys, tmp_path, given, samples):
    code, out, err = run(capsys, "estimate", "one_net", "--samples", given, "--batch-size", "2", "--format", "json",
                         "--store", str(tmp_path / "s.sqlite"))
    assert code == 0, err
    assert json.loads(out)["samples"] == samples


@pytest.mark.parametrize("flag", ["--samples", "--tokens"])
def test_a_count_that_is_no_number_is_refused_in_one_line(capsys, flag):
    code, _, err = run(capsys, "estimate", "gpt2-small", flag, "15X")
    assert code == 2
    assert err.strip().splitlines() == [f"xla-cost: error: Expected {flag} as a number, in full or with a suffix k, "
                                        f"M, B (or G) or T, got '15X' instead. Write e.g. {flag} 3e11, {flag} 300B "
                                        f"or {flag} 300_000_000_000."]


def test_an_estimates_json_and_csv_carry_its_notes(capsys, tmp_path):
    # what the terminal prints below the tables (no target: no memory verdict, no range) reaches a machine too
    store = str(tmp_path / "s.sqlite")
    code, out, err = run(capsys, "estimate", "one_net", "--samples", "1000", "--batch-size", "2", "--format", "json",
                         "--store", store)
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any(n.startswith("memory per device unknown") for n in notes)
    assert any(n.startswith("no range beside the predicted figures") for n in notes)
    code, out, err = run(capsys, "estimate", "one_net", "--samples", "1000", "--batch-size", "2", "--format", "csv",
                         "--store", store)
    assert code == 0, err
    import csv
    import io

    (row,) = csv.DictReader(io.StringIO(out))
    assert json.loads(row["notes"]) == notes


_TOKEN_MODEL = '''
import flax.linen as nn


class TokenLM(nn.Module):  # token ids in, logits out: an embedding of 16 x 8 and a head of 8 x 16
    @nn.compact
    def __call__(self, ids):
        return nn.Dense(16)(nn.Embed(16, 8)(ids))
'''


def test_estimate_scaling_and_fit_take_a_custom_token_model_as_analyze_does(capsys, tmp_path):
    # the options analyze has, declared once (parser._input_options), for every command that takes a model
    for command in ("analyze", "estimate", "scaling", "fit", "sweep"):
        args = build_parser().parse_args([command, "m.py:M", "--input-shape", "2,16", "--input-dtype", "int32"])
        assert (args.input_shape, args.input_dtype) == ("2,16", "int32"), command
    model = tmp_path / "tokens.py"
    model.write_text(_TOKEN_MODEL)
    store = str(tmp_path / "s.sqlite")
    shape = ["--input-shape", "2,16", "--input-dtype", "int32"]
    # without --input-shape: one line naming both options
    code, out, err = run(capsys, "estimate", f"{model}:TokenLM", "--tokens", "320", "--store", store)
    assert code == 2 and "--input-shape" in err and "--input-dtype int32" in err and len(err.splitlines()) == 1
    code, out, err = run(capsys, "estimate", f"{model}:TokenLM", "--tokens", "320", *shape, "--store", store,
                         "--format", "json")
    assert code == 0, err
    shown = json.loads(out)
    api = estimates.estimate(f"{model}:TokenLM", tokens=320, input_shape=(2, 16),
                             input_dtype="int32", store=store).to_dict()
    assert shown == json.loads(json.dumps(api))  # a thin layer: the batch is input_shape's first axis in both
    # 320 tokens of 16 positions: 20 sequences, 2 a step on one device
    assert (shown["samples"], shown["steps"], shown["global_batch"]) == (320 / 16, 320 / 16 / 2, 2)
    code, out, err = run(capsys, "scaling", f"{model}:TokenLM", "--devices", "1,2", *shape, "--store", store,
                         "--format", "json")
    assert code == 0, err
    assert [p["devices"] for p in json.loads(out)["points"]] == [1, 2]
    # the embedding (16 x 8) and the head (16 x 8 + 16) in float32, twice for adam's moments, fit in any H100
    code, out, err = run(capsys, "fit", f"{model}:TokenLM", *shape, "--max-batch", "4", "--quiet", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["batch_size"] == 4
    # sweep too (it had --input-shape alone: the int32 ids became --dtypes' floats, refused by the embedding);
    code, out, err = run(capsys, "sweep", f"{model}:TokenLM", "--batch-sizes", "1,2", *shape, "--jobs", "0",
                         "--store", store, "--quiet", "--format", "json")
    assert code == 0, err
    rows = {row["batch_size"]: row for row in json.loads(out)["runs"]}
    assert sorted(rows) == [1, 2] and all(row["status"] == "ok" for row in rows.values())
    # the embedding V x D, the head D x V and its bias V: 16 * 8 + 8 * 16 + 16
    assert all(row["parameters"] == 16 * 8 + 8 * 16 + 16 for row in rows.values())
