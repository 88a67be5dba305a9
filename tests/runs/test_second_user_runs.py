"""The rough edges of issue 30 in `fit`, `report`, `estimate` and the default
optimizer, each through its exact command (in-process) or call.

* ``fit``: its search compiles at most 6 times where the peak is close to
  affine (the one it replaces compiled one_net 15 times on an H100), prints a
  line per compile on stderr even when piped, and tells the batch that fits
  from the one that does not (tests/runs/test_fit.py has the search itself).
* ``report`` with no page, no ``all`` and no ``--model``: refused, nothing written.
* ``estimate``: the communication not hidden is never more than all of it; the
  pipeline bubble is its own line (tests/runs/test_estimate.py has the closed forms).
* one default optimizer, adam (`xla_cost.choices.DEFAULT_OPTIMIZER`), for
  every command and function; the generated pages name theirs.
"""

from __future__ import annotations

import inspect
import json
import re

import jax
import pytest

from xla_cost.timemodel.devices import CUDA_CONTEXT_BYTES

import xla_cost
from xla_cost.analysis.memory import MemoryBreakdown
from xla_cost.choices import DEFAULT_OPTIMIZER
from xla_cost.cli import main
from xla_cost.cli.parser import build_parser
from xla_cost.runs import fit


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working directory of its own, with its own (absent) results store."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XLA_COST_STORE", str(tmp_path / "store.sqlite"))
    return tmp_path


# ------------------------------------------------------------------ fit

# an affine model of one_net's donated Adam step from its dimensions: 4 x 533,898 parameters x 4
# bytes (parameters, gradients, two moments), and per sample (1 + 4,096 x 2 + 128 x 2 + 10 x 2) x 4
# bytes of activations and their gradients (tests/runs/test_fit.py compiles the real one)
FIXED, PER_SAMPLE = 4 * 533_898 * 4, (1 + 4096 * 2 + 128 * 2 + 10 * 2) * 4
USABLE = 0.75 * (81559 * 2**20 - CUDA_CONTEXT_BYTES)  # 63.66 GB: an H100 as its driver reports it, less the context


@pytest.fixture
def compiles(monkeypatch):
    """The compile seam replaced by the affine model; every batch asked for, in order."""
    asked: list[int] = []

    def breakdown_at(run, batch):
        asked.append(batch)
        parameters, per_sample = FIXED // 4, PER_SAMPLE * batch  # the model's parts, its peak all temporaries
        return MemoryBreakdown(parameters, parameters, 2 * parameters, 0, 4 * batch, per_sample - 4 * batch,
                               argument_bytes=FIXED, output_bytes=0, temp_bytes=per_sample, alias_bytes=0)

    monkeypatch.setattr(fit, "breakdown_at", breakdown_at)
    return asked


def test_fit_one_net_shows_each_compile_on_stderr_when_piped(place, capsys, compiles):
    # capsys is a pipe, not a terminal; the answer (1.9 million) is above fit's default bound, 65,536
    code = main(["fit", "one_net", "--format", "json", "--max-batch", str(fit.MAX_BATCH)])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    # 0.75 usable of an H100's 81,559 MiB (as its driver reports it) less the CUDA context: the largest
    # batch the affine model fits
    answer = int((USABLE - FIXED) // PER_SAMPLE)
    assert (result["batch_size"], result["next_size"]) == (answer, answer + 1)
    lines = err.splitlines()
    assert lines.pop(0).startswith(f"fit: searching batches 1 to {fit.MAX_BATCH:,} (max_batch, --max-batch)")
    assert len(lines) == len(compiles) <= 6  # it compiled one_net 15 times (issue 30)
    assert all(re.fullmatch(r"fit: batch [\d,]+ → [\d.]+ GB, (fits|does not fit) \(limit 63\.66 GB\)", line)
               for line in lines), lines
    assert lines[-1].startswith(f"fit: batch {answer + 1:,} → ") and lines[-1].endswith(
        "does not fit (limit 63.66 GB)")


def test_fit_quiet_prints_no_line(place, capsys, compiles):
    assert main(["fit", "one_net", "--quiet", "--format", "json"]) == 0
    assert capsys.readouterr().err == ""


def test_fit_table_tells_the_fitting_batch_from_the_next(place, capsys, compiles):
    assert main(["fit", "one_net", "--quiet", "--max-batch", str(fit.MAX_BATCH)]) == 0
    out = capsys.readouterr().out
    answer = int((USABLE - FIXED) // PER_SAMPLE)
    assert f"batch {answer}: fits" in out and f"batch {answer + 1}: does not fit" in out
    assert "usable (the limit)" in out and "does not fit (limit 63.66 GB)" in out


# ------------------------------------------------------------------ report


def test_report_with_no_target_is_refused_and_writes_nothing(place, capsys):
    code = main(["report"])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "", err
    assert len(lines) == 1 and lines[0].startswith("xla-cost: error: Expected page names, all, or --model")
    assert "`xla-cost report all`" in lines[0]  # how to ask for every page
    assert list(place.iterdir()) == []  # no reports/, no store


# ------------------------------------------------------------------ estimate

TINY = ["--set", "n_layer=4", "--set", "d_model=64", "--set", "n_head=4", "--set", "seq_len=32",
        "--set", "vocab_size=256"]


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 simulated devices (tests/conftest.py)")
def test_estimate_with_a_pipeline_hides_no_more_than_its_communication(place, capsys):
    # issue 30: this printed communication 0.027 ms and "communication not hidden" 1.053 ms
    code = main(["estimate", "gpt2-small", "--tokens", "64000", *TINY, "--batch-size", "2",
                 "--mesh", "data=2,model=2,pipeline=2", "--micro-batches", "1", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    run = json.loads(out)
    assert run["exposed_communication_seconds"] <= run["communication_seconds"]
    # the step: compute + the communication not hidden + the bubble, (p - 1) / m = 1 of one slot, and what
    # it waits for its host's dispatch (a tiny step: its calls' arrays take longer to hand over)
    assert run["step_seconds"] == pytest.approx(
        run["compute_seconds"] + run["exposed_communication_seconds"] + run["pipeline_bubble_seconds"]
        + run["dispatch_wait_seconds"], rel=1e-12)
    slot = (run["matmul_seconds"] + run["memory_seconds"] + run["launch_seconds"] + run["tensor_seconds"]
            + run["stage_transfers_seconds"])
    assert run["pipeline_bubble_seconds"] == pytest.approx((2 - 1) / 1 * slot, rel=1e-9)
    assert main(["estimate", "gpt2-small", "--tokens", "64000", *TINY, "--batch-size", "2",
                 "--mesh", "data=2,model=2,pipeline=2", "--micro-batches", "1"]) == 0
    table = capsys.readouterr().out
    assert re.search(r"│\s+pipeline bubble\s+│", table) and re.search(r"│\s+stage transfers\s+│", table)


# ------------------------------------------------------------------ one default optimizer


def test_every_command_defaults_to_the_one_optimizer():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps them there
    defaults = {name: action.default for name, sub in commands.items() for action in sub._actions  # noqa: SLF001
                if action.dest in ("optimizer", "optimizers")}
    # report --model's is None on the parser (it is refused without --model) and the constant in the command
    assert defaults == {"analyze": DEFAULT_OPTIMIZER, "sweep": DEFAULT_OPTIMIZER, "scaling": DEFAULT_OPTIMIZER,
                        "estimate": DEFAULT_OPTIMIZER, "fit": DEFAULT_OPTIMIZER, "report": None}
    assert DEFAULT_OPTIMIZER == "adam"


def test_every_function_defaults_to_the_one_optimizer():
    def default(function, name):
        return inspect.signature(function).parameters[name].default

    assert default(xla_cost.analyze, "optimizer") == DEFAULT_OPTIMIZER
    assert default(xla_cost.scaling, "optimizer") == DEFAULT_OPTIMIZER
    assert default(xla_cost.estimate, "optimizer") == DEFAULT_OPTIMIZER
    assert default(xla_cost.max_batch_size, "optimizer") == DEFAULT_OPTIMIZER
    assert tuple(default(xla_cost.sweep, "optimizers")) == (DEFAULT_OPTIMIZER,)
    assert xla_cost.RunConfig("one_net").optimizer == DEFAULT_OPTIMIZER


def test_analyze_from_the_command_line_is_adam(place, capsys):
    assert main(["analyze", "one_net", "--counter", "jaxpr", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["optimizer"] == "adam"


def test_the_pages_name_their_optimizer(monkeypatch):
    # seed 001's figures are SGD's: the study's sweeps and scaling curves say so, whatever the default
    from xla_cost.study import data as study_data
    from xla_cost.study.pages import scaling as scaling_page

    seen = {}
    monkeypatch.setattr("xla_cost.runs.sweeps.sweep", lambda models, **kwargs: seen.setdefault("sweep", kwargs))
    study = study_data.StudyData.__new__(study_data.StudyData)
    study.store, study.jobs, study.progress = None, 0, False
    study._sweep(["one_net"], batch_sizes=[1])  # noqa: SLF001
    assert seen["sweep"]["optimizers"] == ["sgd"]
    assert 'optimizer="sgd"' in inspect.getsource(scaling_page.scaling_curves)
