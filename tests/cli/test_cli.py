"""The CLI: a thin layer over the API; bad input is one line and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import xla_cost
from tests import formulas as F
from xla_cost.choices import DEFAULT_OPTIMIZER
from xla_cost.cli import main

# xla_cost's caches on, shared with the other modules that opt in (tests/conftest.py): the zoo programs
# this module analyses again are read back, not compiled again.
pytestmark = pytest.mark.usefixtures("module_caches")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_matches_api(capsys, zoo_report):
    code, out, err = run(capsys, "analyze", "deeper_conv_net", "--batch-size", "2", "--set", "depth=3", "--per-layer", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    api = zoo_report("deeper_conv_net", 2, DEFAULT_OPTIMIZER, depth=3).to_dict()  # the CLI's default: adam
    assert data["flops"] == api["flops"]
    assert data["layers"] == api["layers"]
    assert data["config"] == {"depth": 3}


@pytest.mark.parametrize("fmt, marker", [("table", "backward/forward"), ("csv", "kind,name,flops"), ("markdown", "## one_net")])
def test_formats(capsys, fmt, marker):
    code, out, _ = run(capsys, "analyze", "one_net", "--batch-size", "2", "--format", fmt)
    assert code == 0 and marker in out


def test_output_file(capsys, tmp_path):
    target = tmp_path / "r.json"
    code, out, _ = run(capsys, "analyze", "one_net", "--format", "json", "--output", str(target))
    assert code == 0 and out == ""
    assert json.loads(target.read_text())["model"] == "one_net"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_custom_model_by_import_path(capsys):
    code, out, err = run(capsys, "analyze", "tests.custom_models:LinenBatchNormNet", "--input-shape", "4,12", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["batch_size"] == 4
    code, out, err = run(capsys, "analyze", "tests.custom_models:NnxMLP", "--input-shape", "4,12", "--format", "json")
    assert code == 0, err
    code, _, err = run(capsys, "analyze", "tests.custom_models:linen_factory", "--input-shape", "4,12")
    assert code == 0, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["analyze", "resnet9000"], "zoo model name (linear_net, one_net"),
        (["analyze", "conv_net", "--optimizer", "adamax2"], "optimizer name, one of sgd"),
        (["analyze", "conv_net", "--set", "depth"], "--set KEY=VALUE"),
        (["analyze", "conv_net", "--set", "=3"], "--set KEY=VALUE"),
        (["analyze", "conv_net", "--set", "depth=3"], "conv_net argument (image_size, num_classes)"),
        (["analyze", "deeper_conv_net", "--set", "depth=zero"], "depth to be an int"),
        (["analyze", "conv_net", "--batch-size", "0"], "batch size of at least 1"),
        (["analyze", "conv_net", "--batch-size", "-3"], "batch size of at least 1"),
        (["analyze", "conv_net", "--input-shape", "2,32,32,3"], "(B, 224, 224, 3)"),
        (["analyze", "one_net", "--input-shape", "2,1,1"], "(B, 1)"),
        (["analyze", "conv_net", "--input-shape", "a,b"], "--input-shape as positive integers"),
        (["analyze", "tests.custom_models:LinenIntParam", "--input-shape", "2,12"], "floating-point parameters"),
        (["analyze", "tests.custom_models:NnxMLP", "--input-shape", "2,7"], "model failed"),
        (["analyze", "tests.custom_models:NnxMLP"], "--input-shape for a custom model"),
        (["analyze", "no.such.module:Net", "--input-shape", "2,7"], "importable package.module:attribute"),
        (["analyze", "conv_net", "--dtype", "float64"], "invalid choice"),
    ],
)
def test_bad_input_one_line_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert message in err


def test_backend_without_cost_analysis_exits_2(capsys, monkeypatch):
    import jax

    monkeypatch.setenv("XLA_COST_NO_CACHE", "1")  # the patched backend must see its compile run: no cache read
    monkeypatch.setattr(jax.stages.Compiled, "cost_analysis", lambda self: None)
    code, out, err = run(capsys, "analyze", "one_net")
    assert code == 2 and "cost analysis" in err and err.count("\n") == 1


def test_failed_run_leaves_no_output_file(capsys, tmp_path):
    target = tmp_path / "r.json"
    code, _, _ = run(capsys, "analyze", "one_net", "--optimizer", "nope", "--output", str(target))
    assert code == 2 and list(tmp_path.iterdir()) == []


def test_debug_shows_traceback():
    with pytest.raises(xla_cost.InputError):
        main(["--debug", "analyze", "nope"])


def test_python_dash_m():
    result = subprocess.run(
        [sys.executable, "-m", "xla_cost", "analyze", "one_net", "--format", "json"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    # OneNet: (1*4096 + 4096) + (4096*128 + 128) + (128*10 + 10)
    assert json.loads(result.stdout)["parameters"] == F.mlp_params(1)


def test_counter_jaxpr_and_depth(capsys):
    code, out, err = run(
        capsys, "analyze", "tests.custom_models:ScannedMLP", "--input-shape", "4,8",
        "--counter", "jaxpr", "--depth", "1", "--format", "json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["counter"] == "jaxpr" and data["depth"] == 1
    assert data["xla_flops"]["forward"] is None and data["bytes_accessed"]["grad"] is None
    assert data["flops"]["forward"] == data["jaxpr_flops"]["forward"]
    rows = {row["path"]: row for row in data["layers"]}
    assert rows["layers"]["trip_count"] == 12  # tests.custom_models.N_SCAN
    # the same call from Python gives the same answer
    from tests import custom_models

    api = xla_cost.analyze(  # the Python default optimizer is the command's (adam)
        custom_models.ScannedMLP(), jax_inputs((4, 8)), depth=1, counter="jaxpr", name="ScannedMLP",
    ).to_dict()
    assert data["flops"] == api["flops"] and data["layers"] == api["layers"]


def test_loop_corrected_table_marks_headline(capsys):
    code, out, err = run(capsys, "analyze", "tests.custom_models:ScannedMLP", "--input-shape", "4,8")
    assert code == 0, err
    assert " *" in out and "loop-corrected" in out and "XLA / jaxpr" in out


@pytest.mark.parametrize("argv, message", [
    (["--depth", "0"], "depth (--depth) an integer >= 1, or None"),
    (["--counter", "hlo"], "invalid choice"),
])
def test_bad_depth_and_counter(capsys, argv, message):
    code, _, err = run(capsys, "analyze", "one_net", *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def jax_inputs(shape):
    import jax
    import jax.numpy as jnp

    return jax.ShapeDtypeStruct(shape, jnp.float32)
