"""A new user's first hour with the CLI: research models, options, and bad input.

Each bad input gives one line on stderr and exit code 2, before any analysis
runs where the input can be checked up front; nothing half-written is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from tests import research_models as R
from tests.formulas import dense_flops
from xla_cost import cli
from xla_cost.analysis import timing
from xla_cost.compiled import compiler_log, xla
from xla_cost.cli import main

M = "tests.research_models"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------ model options


def test_call_kwarg_and_input_dtype(capsys):
    code, out, err = run(
        capsys, "analyze", f"{M}:GPTPort", "--input-shape", f"2,{R.SEQ}", "--input-dtype", "int32",
        "--counter", "jaxpr", "--call-kwarg", "deterministic=False",
        "--per-layer", "--format", "json",
    )
    assert code == 0, err
    layers = {row["path"]: row for row in json.loads(out)["layers"]}
    # lm_head: (2*SEQ tokens) x d -> V, no bias: 2 * tokens * d * V.
    assert layers["lm_head"]["forward_flops"] == 2 * 2 * R.SEQ * R.D_MODEL * R.VOCAB


def test_axis_name_flag_binds_a_name(capsys):
    code, out, err = run(
        capsys, "analyze", f"{M}:DataParallelResNet", "--input-shape", "2,8,8,3",
        "--axis-name", "batch", "--counter", "jaxpr", "--format", "json",
    )
    assert code == 0, err
    data = json.loads(out)
    # 1 + 2 * num_blocks BatchNorms, each a pmean of its statistics in the forward pass and its
    # transpose in the backward pass; and the gradients' pmean over the group, one per parameter
    # leaf: conv_init, two convs per block, a scale and a bias per BatchNorm, the head's kernel and bias
    blocks = R.DataParallelResNet.num_blocks
    norms = 1 + 2 * blocks
    leaves = 1 + 2 * blocks + 2 * norms + 2
    assert data["collectives"] == {"psum": 2 * norms + leaves}
    assert any("axis names batch bound" in note for note in data["notes"])


def test_method_flag(capsys):
    code, out, err = run(
        capsys, "analyze", f"{M}:MaskedEncoder", "--method", "embed", "--input-shape", f"3,{R.SEQ}",
        "--input-dtype", "int32", "--counter", "jaxpr", "--format", "json",
    )
    assert code == 0, err
    # Initialised through `embed`, the model has only its embedding table.
    assert json.loads(out)["parameters"] == R.VOCAB * R.D_MODEL


@pytest.mark.parametrize(("model", "index"), [("TupleOutput", "0"), ("StructOutput", "logits")])
def test_output_index_picks_the_logits(capsys, model, index):
    # by position in a tuple, by name in a dataclass's fields (gemma's Output.logits)
    code, out, err = run(
        capsys, "analyze", f"{M}:{model}", "--input-shape", "3,12", "--counter", "jaxpr",
        "--output-index", index, "--format", "json",
    )
    assert code == 0, err
    plain = xla_cost.analyze(R.LogitsOnly(), jax.ShapeDtypeStruct((3, 12), jnp.float32), optimizer="sgd", counter="jaxpr")
    assert json.loads(out)["jaxpr_flops"]["forward"] == plain.phases["forward"].jaxpr_flops


def test_output_index_naming_no_field_lists_the_fields(capsys):
    code, _, err = run(capsys, "analyze", f"{M}:StructOutput", "--input-shape", "3,12", "--output-index", "logit")
    assert code == 2 and "'logits', 'cache'" in one_error_line(err)


def test_tuple_output_without_a_choice_is_one_line(capsys):
    code, _, err = run(capsys, "analyze", f"{M}:TupleOutput", "--input-shape", "3,12")
    line = one_error_line(err)
    assert code == 2 and "(float32[3,10], float32[])" in line and "--output-index 0" in line


def test_bfloat16_on_a_model_with_a_dtype_field(capsys):
    code, out, err = run(
        capsys, "analyze", f"{M}:WithDtype", "--input-shape", "3,12", "--dtype", "bfloat16",
        "--counter", "jaxpr", "--format", "json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["dtype"] == "bfloat16" and data["config"] == {}
    assert not any("only the inputs were cast" in note for note in data["notes"])


def test_bfloat16_on_a_model_without_one_says_only_inputs_are_cast(capsys):
    code, out, err = run(
        capsys, "analyze", f"{M}:WithoutDtype", "--input-shape", "3,12", "--dtype", "bfloat16",
        "--counter", "jaxpr", "--format", "json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["dtype"] == "float32"  # what the model computes in
    assert any("only the inputs were cast" in note for note in data["notes"])


_BF16_TOKEN_MODEL = '''
import flax.linen as nn
import jax.numpy as jnp


class Bf16LM(nn.Module):  # nanodo's shape: float32 parameters, its layers computing in bfloat16, token ids in
    @nn.compact
    def __call__(self, ids):
        x = nn.Embed(16, 8, dtype=jnp.bfloat16)(ids)
        return nn.Dense(16, dtype=jnp.bfloat16)(nn.Dense(8, dtype=jnp.bfloat16)(x))


MODEL = Bf16LM()
'''


def test_a_module_computing_in_bfloat16_is_reported_so_as_analyze_does(capsys, tmp_path):
    import importlib.util

    path = tmp_path / "bf16lm.py"
    path.write_text(_BF16_TOKEN_MODEL)
    spec = importlib.util.spec_from_file_location("bf16lm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shape = ["--input-shape", "2,4", "--input-dtype", "int32", "--format", "json"]
    code, out, err = run(capsys, "analyze", f"{path}:MODEL", *shape)
    assert code == 0, err
    shown = json.loads(out)
    api = xla_cost.analyze(module.MODEL, jax.ShapeDtypeStruct((2, 4), jnp.int32))
    # the model's compute dtype, not --dtype's default float32; the same notes (the CPU's 16-bit emulation)
    assert (shown["dtype"], shown["param_dtype"]) == ("bfloat16", "float32") == (api.dtype, api.param_dtype)
    assert shown["notes"] == list(api.notes)
    code, out, err = run(capsys, "analyze", f"{path}:MODEL", *shape, "--dtype", "bfloat16")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    # int32 token ids: nothing was cast, and the note says so rather than "only the inputs were cast"
    assert any("--dtype bfloat16: nothing was cast (the inputs are int32" in note for note in notes), notes
    assert not any("only the inputs were cast" in note for note in notes)


# ------------------------------------------------------------------ bad input


def test_batch_that_overflows_int32_indexing(capsys):
    code, _, err = run(capsys, "analyze", "conv_net", "--batch-size", "1000000000000")
    line = one_error_line(err)
    assert code == 2 and "2,147,483,647" in line and "smaller batch" in line


@pytest.mark.parametrize("target, words", [
    ("", "empty name"),
    ("{tmp}", "a directory"),
    ("{tmp}/missing/r.json", "existing directory"),
])
def test_output_checked_before_the_analysis(capsys, monkeypatch, tmp_path, target, words):
    def never(*_, **__):  # the analysis must not start
        raise AssertionError("analysis ran before --output was checked")

    monkeypatch.setattr(cli.commands, "analyze", never)
    code, _, err = run(capsys, "analyze", "one_net", "--output", target.format(tmp=tmp_path))
    assert code == 2 and words in one_error_line(err)


def test_written_file_has_the_usual_permissions(capsys, tmp_path):
    target = tmp_path / "r.json"
    umask = os.umask(0o022)
    try:
        code, _, err = run(capsys, "analyze", "one_net", "--counter", "jaxpr", "--format", "json", "--output", str(target))
    finally:
        os.umask(umask)
    assert code == 0, err
    assert target.stat().st_mode & 0o777 == 0o666 & ~0o022  # 0644, not mkstemp's 0600
    target.chmod(0o640)  # a replaced file keeps its mode
    assert main(["analyze", "one_net", "--counter", "jaxpr", "--output", str(target)]) == 0
    assert target.stat().st_mode & 0o777 == 0o640


def test_ctrl_c_is_one_line_exit_130_and_leaves_nothing(capsys, monkeypatch, tmp_path):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.commands, "analyze", interrupted)
    code, out, err = run(capsys, "analyze", "one_net", "--output", str(tmp_path / "r.json"))
    assert code == cli.EXIT_INTERRUPTED == 130
    assert one_error_line(err) == "xla-cost: interrupted" and out == ""
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_writing_removes_the_temporary_file(monkeypatch, tmp_path):
    def interrupted_replace(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted_replace)
    with pytest.raises(KeyboardInterrupt):
        cli.output.write("text", str(tmp_path / "r.json"))
    assert list(tmp_path.iterdir()) == []


def test_api_dtype_matches_the_cli_choices():
    with pytest.raises(xla_cost.InputError, match="floating-point dtype"):
        xla_cost.analyze(R.LogitsOnly(), jax.ShapeDtypeStruct((2, 12), jnp.float32), optimizer="sgd", dtype="nonsense")


# ------------------------------------------------------------------ XLA's log lines

ALARM = (
    "E1122 14:00:27.873373    4316 slow_operation_alarm.cc:65] Constant folding an instruction "
    "is taking > 1s:\n\n  %reduce.1 = f32[] reduce(...)\n\nThis isn't necessarily a bug.\n"
)


def test_slow_operation_alarms_are_dropped_other_lines_kept():
    other = "W1122 14:00:28.000000    4316 other.cc:1] a real warning\n"
    text, dropped = compiler_log.filter_compiler_log(ALARM + other + ALARM)
    assert (text, dropped) == (other, 2)


def test_alarm_written_while_compiling_does_not_reach_stderr(capfd):
    with compiler_log.quiet_compiler():
        os.write(2, ALARM.encode())
        os.write(2, b"W1122 14:00:28.000000 1 other.cc:1] kept\n")
    err = capfd.readouterr().err
    assert "slow_operation_alarm" not in err and "kept" in err


# ------------------------------------------------------------------ --time memory


def test_time_skips_a_step_too_big_for_the_device_before_allocating(monkeypatch):
    monkeypatch.setattr(timing, "_available_bytes", lambda: 1000)

    def never(*_, **__):
        raise AssertionError("arrays were allocated for a step that cannot fit")

    monkeypatch.setattr(timing, "_random_like", never)
    report = xla_cost.analyze(R.LogitsOnly(), jax.ShapeDtypeStruct((2, 12), jnp.float32), optimizer="adam", timed=True)
    assert "compiled memory analysis" in report.timing.skipped
    assert report.phases["forward"].flops is not None  # the counts survive


# ------------------------------------------------------------------ namespace


def test_runs_from_a_directory_with_its_own_models_package(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("OWN = 'research'\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-m", "xla_cost", "analyze", "one_net", "--counter", "jaxpr", "--format", "json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["model"] == "one_net"
    own = subprocess.run(
        [sys.executable, "-c", "import models, xla_cost.zoo; print(models.OWN)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert own.stdout.strip() == "research", own.stderr


def test_installing_xla_cost_adds_no_top_level_models(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", "import importlib.util; print(importlib.util.find_spec('models'))"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.stdout.strip() == "None", result.stdout + result.stderr
