"""Inputs a demanding user types that must be refused (issue 24): numbers,
model loading and presets.

Each bad case runs the exact command (or call) and checks what the first-hour
tests check: one line on stderr that says what was expected, exit code 2,
nothing on stdout, and nothing written (no ``--output`` file) or stored (no
results store, or an empty one). Each runs in its own working directory with
its own store.
"""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost.cli import main
from xla_cost.errors import InputError
from xla_cost.timemodel import calibration, comm, devices
from xla_cost.runs import fit as fit_module
from xla_cost.runs.configs import RunConfig, parse_shape
from xla_cost.step.checks import INT32_MAX

ROOT = pathlib.Path(__file__).resolve().parents[2]

MLP_MODULE = '''
import flax.linen as nn


class MLP(nn.Module):
    width: int = 16

    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.Dense(self.width)(x)))
'''


# The fits and the commands given module objects analyse the same OneNet and MLP programs again:
# each compiled once in the module (tests/conftest.py); the fits' searches still call their
# compile per batch (counted below), and the commands run as subprocesses keep the caches off.
pytestmark = pytest.mark.usefixtures("module_caches")


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working directory of its own with its own (absent) results store; the
    import path and the modules imported from the directory are restored after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XLA_COST_STORE", str(tmp_path / "store.sqlite"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name in [n for n in sys.modules if n.split(".")[0] in ("mypkg", "nets")]:
        del sys.modules[name]


def _refused(capsys, place: pathlib.Path, *argv: str, words: str) -> str:
    """Runs ``xla-cost ARGV --output out.json``: one line naming ``words``, exit 2, nothing left."""
    before = sorted(p.name for p in place.iterdir())
    output = ["--out", "out"] if argv[0] == "report" else ["--output", "out.json"]
    code = main([*argv, *output])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "", err
    assert len(lines) == 1 and lines[0].startswith("xla-cost: error: Expected "), err
    assert words in lines[0], lines[0]
    new = sorted(set(p.name for p in place.iterdir()) - set(before))
    assert new == []  # no output file, no store file (a sweep checks its names before it makes one)
    return lines[0]


# ------------------------------------------------------------------ numbers that must be refused


@pytest.mark.parametrize("argv, words", [
    (["--samples", "-1"], "--samples (samples=) as a whole number > 0, got -1.0"),
    (["--samples", "10", "--epochs", "-2"], "--epochs (epochs=) as a finite number > 0, got -2.0"),
    (["--samples", "10", "--epochs", "0"], "--epochs (epochs=) as a finite number > 0, got 0.0"),
    (["--samples", "10", "--epochs", "inf"], "--epochs (epochs=) as a finite number > 0, got inf"),
    (["--samples", "nan"], "--samples (samples=) as a whole number > 0, got nan"),
    (["--samples", "1.5"], "--samples (samples=) as a whole number > 0, got 1.5"),
    (["--tokens", "-5"], "--tokens (tokens=) as a finite number > 0"),
])
def test_estimate_refuses_counts_that_are_not_positive_and_finite(capsys, place, argv, words):
    _refused(capsys, place, "estimate", "one_net", *argv, words=words)


@pytest.mark.parametrize("kwargs, words", [
    ({"samples": -1}, "got -1 instead"),
    ({"samples": 0}, "got 0 instead"),
    ({"samples": 10, "epochs": math.inf}, "got inf instead"),
    ({"samples": 10, "epochs": -2}, "got -2 instead"),
    ({"samples": "10"}, "got '10' instead"),
    ({"tokens": math.nan}, "got nan instead"),
    ({"samples": 1e308, "epochs": 1e308}, "samples x epochs finite"),
])
def test_the_api_refuses_them_first(place, kwargs, words):
    with pytest.raises(InputError, match=words):
        xla_cost.estimate("one_net", **kwargs)
    assert list(place.iterdir()) == []  # refused before the one-device analysis is stored


def test_tokens_are_refused_for_a_model_without_a_sequence(capsys, place):
    # conv_net's inputs are 224 x 224 images: 1e9 tokens used to become 1e9 / 224 "samples"
    line = _refused(capsys, place, "estimate", "conv_net", "--tokens", "1e9",
                    words="--tokens only for a model whose inputs are token ids")
    assert "conv_net with inputs float32[1, 224, 224, 3]" in line and "--samples N [--epochs E]" in line
    _refused(capsys, place, "estimate", "gpt2-small", "--tokens", "1e9", "--epochs", "2",
             words="--epochs only with --samples")


def test_tokens_of_a_token_model_count_its_positions(place):
    tiny = {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 16, "vocab_size": 64}
    run = xla_cost.estimate("gpt2-small", tokens=1600, config=tiny, bound=True)
    assert run.tokens == 1600 and run.samples == 1600 // 16  # tokens / seq_len sequences
    assert run.total_flops == run.flops_per_sample * 100
    # samples and epochs keep their meaning for a token model: sequences
    again = xla_cost.estimate("gpt2-small", samples=50, epochs=2, config=tiny, bound=True)
    assert again.samples == 100 and again.tokens is None and again.total_flops == run.total_flops


@pytest.mark.parametrize("memory", ["inf", "nan", "-1", "0"])
def test_fit_refuses_a_memory_that_is_not_finite_and_positive(capsys, place, memory):
    _refused(capsys, place, "fit", "one_net", "--device-memory", memory,
             words=f"a device memory in bytes, finite and > 0, got {float(memory)!r}")


def test_fit_with_a_memory_no_batch_fills_ends_in_a_few_compiles(capsys, place, monkeypatch):
    compiled = []
    real = fit_module.breakdown_at
    monkeypatch.setattr(fit_module, "breakdown_at", lambda run, batch: compiled.append(batch) or real(run, batch))
    assert main(["fit", "one_net", "--device-memory", "1e40", "--quiet", "--format", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    # batches 1 and 2, then the largest batch searched (65,536 unless --max-batch; it fits): the answer
    # says the search stopped at its bound (issue 49: 24 doublings up to int32's largest used to run)
    assert compiled == [1, 2, fit_module.DEFAULT_MAX_BATCH]
    assert (answer["batch_size"], answer["at_bound"], answer["does_not_fit"]) == (fit_module.DEFAULT_MAX_BATCH, True,
                                                                                  None)
    for bad in ("0", str(INT32_MAX + 1)):  # a bound outside 1 .. int32's largest: one line, nothing compiled
        _refused(capsys, place, "fit", "one_net", "--device-memory", "1e40", "--max-batch", bad,
                 words=f"a largest batch to search (max_batch, --max-batch) from 1 (one sample) to {INT32_MAX:,}")
    assert compiled == [1, 2, fit_module.DEFAULT_MAX_BATCH]


def test_fit_search_finds_the_boundary_in_few_compiles(place):
    limit = 12e6 * 0.75
    result = xla_cost.max_batch_size("one_net", device_memory_bytes=12e6, optimizer="sgd")
    # established by compiles: the answer fits, the next batch does not
    assert result.fits.peak <= limit < result.does_not_fit.peak and result.next_size == result.batch_size + 1
    assert len(result.tried) <= 8  # doubling then bisecting took 2 x log2(batch) compiles


def test_a_mesh_larger_than_the_batch_is_refused_before_devices_start(capsys, place):
    _refused(capsys, place, "analyze", "one_net", "--mesh", "data=100000", "--batch-size", "8",
             words="a batch size divisible by data = 100000")


def test_a_mesh_larger_than_the_cpu_can_simulate_is_refused_at_once(place):
    # a fresh process, as the CLI runs: asking the CPU for 100,000 devices used to take
    # minutes of silence before the first line. Refused before the backend starts, the
    # command costs seconds (an import of jax); the timeout is a hang guard, generous on a
    # machine busy with other work (16,384 devices alone take over 10 minutes to start)
    result = subprocess.run(
        [sys.executable, "-m", "xla_cost", "analyze", "one_net", "--mesh", "data=100000", "--batch-size", "100000",
         "--output", "out.json"],
        capture_output=True, text=True, timeout=120, cwd=place, check=False,
        env={**_env(), "XLA_COST_STORE": str(place / "store.sqlite")},
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "xla-cost: error: Expected a mesh of at most 4,096 devices (the CPU simulates them; more take minutes "
        "to start), got 100,000 devices instead. Price a larger run as replicas of a smaller analysed mesh: "
        "estimate and scaling take --mesh data=D,... with the data replicas outside the analysed program."]
    assert list(place.iterdir()) == []


def test_fit_and_scaling_refuse_such_a_mesh_too(capsys, place):
    _refused(capsys, place, "fit", "one_net", "--mesh", "data=100000", words="a mesh of at most 4,096 devices")
    _refused(capsys, place, "scaling", "one_net", "--devices", "1,100000", words="a mesh of at most 4,096 devices")


@pytest.mark.parametrize("text", ["8,,784", "8,784,", ",8,784", "8x x784"])
def test_an_empty_dimension_is_refused(capsys, place, text):
    _refused(capsys, place, "analyze", "tests.custom_models:NnxMLP", "--input-shape", text,
             words=f"--input-shape as positive integers B,D1,... (batch first), got {text!r}")
    with pytest.raises(InputError):
        parse_shape(text)
    assert parse_shape("8,784") == parse_shape("8x784") == (8, 784)


@pytest.mark.parametrize("argv, words", [
    (["analyze", "one_net", "--call-kwarg", "mask=[["],
     "--call-kwarg mask=VALUE as a Python literal, got '[[' ('[' was never closed)"),
    (["analyze", "deeper_conv_net", "--set", "depth=(1,"], "--set depth=VALUE as a Python literal"),
    (["analyze", "one_net", "--call-kwarg", "name='abc"], "--call-kwarg name=VALUE as a Python literal"),
    (["sweep", "deeper_conv_net", "--set", "depth=[1,"], "--set depth=VALUE as a Python literal"),
])
def test_a_value_that_starts_like_a_literal_must_parse(capsys, place, argv, words):
    _refused(capsys, place, *argv, words=words)


def test_an_invalid_regex_is_named_as_a_regex(capsys, place):
    _refused(capsys, place, "analyze", "one_net", "--mesh", "model=2", "--param-sharding", "[unclosed=None,model",
             words="--param-sharding REGEX as a Python regular expression, got '[unclosed' (unterminated "
                   "character set at position 0)")


def test_a_rule_that_matches_no_parameter_is_refused(capsys, place):
    # one_net's parameters are fc1..fc3/kernel and bias
    _refused(capsys, place, "analyze", "one_net", "--mesh", "model=2", "--param-sharding", "Dense_0=None,model",
             words="every param_sharding rule to give some parameter its spec, got 'Dense_0' matching no "
                   "parameter path (the parameters: fc1/bias, fc1/kernel")
    _refused(capsys, place, "analyze", "one_net", "--mesh", "model=2", "--param-sharding", "fc=None,model",
             "--param-sharding", "fc1/kernel=model,None",
             words="'fc1/kernel' matching only parameters an earlier rule takes (first match wins)")


def test_rules_that_all_apply_still_shard(capsys, place):
    code = main(["analyze", "one_net", "--mesh", "model=2", "--param-sharding", "fc1/kernel=None,model",
                 "--format", "json"])
    assert code == 0, capsys.readouterr().err


def test_sweep_refuses_an_unknown_model_argument_before_anything_runs(capsys, place):
    line = _refused(capsys, place, "sweep", "one_net", "--set", "foo=1,2", "--jobs", "0",
                    words="a one_net argument (num_classes), got 'foo'")
    assert line.endswith("Use --set KEY=VALUE with one of those keys.")


def test_sweep_checks_a_custom_models_arguments_by_its_signature(place):
    (place / "nets.py").write_text(MLP_MODULE)
    with pytest.raises(InputError, match=r"a MLP argument \(width\), got 'depth'"):
        xla_cost.sweep(["nets:MLP"], settings={"depth": [1]}, input_shape=(1, 8), store=place / "s.sqlite", jobs=0)
    assert RunConfig("nets:MLP", config={"width": 4}).check_arguments() is None


# ------------------------------------------------------------------ model loading


def _package(place: pathlib.Path) -> None:
    (place / "mypkg").mkdir()
    (place / "mypkg" / "__init__.py").write_text("")
    (place / "mypkg" / "nets.py").write_text(MLP_MODULE)
    (place / "mypkg" / "needs_dep.py").write_text("import a_dependency_not_installed\n")
    (place / "mypkg" / "own_error.py").write_text("raise ImportError('needs the CUDA build')\n")
    (place / "mypkg" / "divides.py").write_text("ratio = 1 / 0\n")


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "XLA_COST_NO_CACHE": "1"}


def test_report_model_from_the_directory_that_holds_the_package(place):
    _package(place)
    # the console script's import path holds its bin folder, not the working directory
    script = "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; " \
             "from xla_cost.cli import main; raise SystemExit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", script, "report", "--model", "mypkg.nets:MLP", "--input-shape", "2,8", "--out", "out"],
        capture_output=True, text=True, timeout=300, cwd=place, env=_env(), check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (place / "out" / "MLP.md").is_file()


@pytest.mark.parametrize("module, words", [
    ("mypkg.needs_dep", "mypkg.needs_dep was found and failed while importing: ModuleNotFoundError: \"No module "
                        "named 'a_dependency_not_installed'\" instead. Install what it imports, or fix the import."),
    ("mypkg.own_error", "mypkg.own_error was found and failed while importing: ImportError: 'needs the CUDA build'"),
    ("mypkg.divides", "mypkg.divides was found and failed while importing: ZeroDivisionError: 'division by zero' "
                      "instead. Fix the module"),
])
def test_a_module_that_fails_while_importing_says_so(capsys, place, module, words):
    _package(place)
    _refused(capsys, place, "analyze", f"{module}:MLP", "--input-shape", "2,8", words=words)


def test_a_module_that_is_not_there_is_still_not_found(capsys, place):
    _package(place)
    _refused(capsys, place, "analyze", "mypkg.absent:MLP", "--input-shape", "2,8",
             words="MODEL as a zoo name, FILE.py:attribute or an importable package.module:attribute, "
                   "got 'mypkg.absent'")
    _refused(capsys, place, "analyze", "mypkg.nets:Missing", "--input-shape", "2,8",
             words="MODEL 'Missing' in mypkg.nets, got no such name (it has MLP)")  # flax.linen (nn): a module


def test_fit_scaling_and_estimate_take_module_objects(place):
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(10)(nn.relu(nn.Dense(16)(x)))

    by_object = xla_cost.estimate(MLP(), samples=100, input_shape=(1, 8), batch_size=4, bound=True)
    assert by_object.model == "MLP" and by_object.samples == 100
    # the same step as analyze gives for the object: FLOP per sample x samples
    report = xla_cost.analyze(MLP(), jax.ShapeDtypeStruct((4, 8), jnp.float32), optimizer="adam")
    assert by_object.total_flops == report.phases["train_step"].flops / 4 * 100
    fitted = xla_cost.max_batch_size(MLP(), input_shape=(1, 8), device_memory_bytes=2e6)
    assert fitted.model == "MLP" and fitted.fits.peak <= 1.5e6 < fitted.does_not_fit.peak
    curve = xla_cost.scaling(MLP(), devices=(1, 2), input_shape=(1, 8), batch_size=4, bound=True)
    assert curve.model == "MLP" and [s.devices for s in curve.steps] == [1, 2]
    with pytest.raises(InputError, match="--input-shape for a custom model"):
        xla_cost.estimate(MLP(), samples=100)
    with pytest.raises(InputError, match="a Linen or NNX module, got an instance of object"):
        xla_cost.max_batch_size(object(), input_shape=(1, 8), device_memory_bytes=2e6)


# ------------------------------------------------------------------ presets


def test_every_device_is_usable_by_every_command_or_refused_in_one_line(capsys, place):
    """For each device of the registry: fit, a bound, a prediction and a
    cluster either answer or say in one line why not (and what to do)."""
    for name in devices.names():
        found = devices.DEVICES[name]
        # fit: the memory (the whole search on the device the registry gained)
        argv = ["fit", "one_net", "--device", name, "--format", "json"]
        if found.memory is None:
            _refused(capsys, place, *argv, words="a device with a known memory")
        elif name == "tpu-v5e":
            assert main(argv) == 0, capsys.readouterr().err
            assert '"capacity": 16000000000.0' in capsys.readouterr().out
        else:
            assert fit_module.device_memory(name) == devices.allocatable(found)
        # estimate: a bound and a prediction both need a peak, and nothing else (issue 32: the time
        # model's constants are one set for every device, no per-device profile to lack)
        bound = ["estimate", "one_net", "--samples", "10", "--device", name, "--bound", "--format", "json"]
        predicted = bound[:-3] + ["--format", "json"]
        if found.peak is None:
            _refused(capsys, place, *bound, words="a device with a published peak")
            _refused(capsys, place, *predicted, words="a device with a published peak")
        else:
            assert main(bound) == 0, capsys.readouterr().err
            capsys.readouterr()
            assert main(predicted) == 0, capsys.readouterr().err
            shown = json.loads(capsys.readouterr().out)
            assert (shown["priced_as"], shown["calibration"]) == ("prediction", calibration.describe(
                calibration.constants(), gpu=found.gpu is not None))
        if found.has_cluster:
            assert comm.cluster(name) == comm.CLUSTERS[name]
    assert xla_cost.estimate("one_net", samples=10, device="tpu-v5e", bound=True).hardware.device == "tpu-v5e"
    assert comm.cluster("h200").node_size == 8


def test_a_dtype_a_device_has_no_units_for_is_refused(capsys, place):
    # the P100 has no bfloat16 units (0.0 in its row): a ZeroDivisionError used to come out
    _refused(capsys, place, "estimate", "one_net", "--samples", "10", "--device", "p100", "--dtype", "bfloat16",
             "--bound", words="a dtype the NVIDIA Tesla P100 SXM2 has a published peak for (float16, float32), "
                              "got 'bfloat16'")
