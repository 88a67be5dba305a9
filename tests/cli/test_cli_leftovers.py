"""The edges of issue 30 that the first fixes left (rows 15, 19 and 20's
neighbours, and ``FILE.py:ATTR``'s hints):

- ``analyze --cache --time``: a timed analysis is never cached, so the pair
  is refused, by the library's own check (``analyze(cache=..., timed=True)``);
- every hint that names the model's forms names ``FILE.py:ATTR`` too;
- ``sweep --set depth=-1``: a setting out of the zoo model's range is refused
  before anything runs, not a failed row;
- ``sweep --layers`` when every configuration fails: nothing written (no
  header-only file, no table, no ``--output``) and exit 2, the failures in
  the line.

Each runs the exact command in-process (`xla_cost.cli.main`) in a working
directory of its own with its own results store: a refusal is one line on
stderr saying what was expected, what was received and how to fix it, exit
code 2, nothing on stdout, nothing written and nothing stored.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pandas as pd
import pytest

import xla_cost
from tests.formulas import dense_flops
from tests.refusals import one_line_refusal
from xla_cost.cli import main
from xla_cost.compiled.store import Store
from xla_cost.errors import InputError, XlaCostError

FEATURES, HIDDEN, OTHER = 8, 4, 3  # Broken: Dense(HIDDEN) on FEATURES, then a matmul that wants OTHER
BROKEN_FILE = f'''
import flax.linen as nn
import jax.numpy as jnp


class Broken(nn.Module):
    """Fails to trace: its Dense gives {HIDDEN} features, the matmul after it contracts {OTHER}."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense({HIDDEN})(x) @ jnp.ones(({OTHER}, 2))
'''
TRACE_ERROR = f"dot_general requires contracting dimensions to have the same shape, got ({HIDDEN},) and ({OTHER},)"


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working directory of its own with the broken model's file and its own
    (absent) results store; the import path is restored after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XLA_COST_STORE", str(tmp_path / "store.sqlite"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "broken.py").write_text(BROKEN_FILE)
    return tmp_path


def _files(place: pathlib.Path) -> list[str]:
    return sorted(p.name for p in place.iterdir() if p.name != "__pycache__")


def _one_line(capsys, *argv: str, words: tuple[str, ...]) -> str:
    """Runs ``xla-cost ARGV``: the one-line refusal naming every one of ``words``."""
    return one_line_refusal(capsys, argv, words)


def _refused(capsys, place: pathlib.Path, *argv: str, words: tuple[str, ...]) -> str:
    """`_one_line`, and no file made: no ``--output``, no results store."""
    before = _files(place)
    line = _one_line(capsys, *argv, words=words)
    assert _files(place) == before
    return line


# ------------------------------------------------------------------ 1: --cache with --time


def test_cache_with_time_is_refused(capsys, place):
    # before: exit 0, the timed report, --cache silently ignored
    line = _refused(capsys, place, "analyze", "one_net", "--cache", "--time", "--counter", "jaxpr",
                    "--output", "out.json",
                    words=("cache (--cache) only without timed=True (--time): a timed analysis is never cached",
                           "got cache=True (--cache) with timed=True (--time)", "Drop cache= (--cache) to time the step"))
    # the CLI only passes its options on: the refusal is the library's, word for word
    model, inputs = xla_cost.zoo.build_model("one_net"), xla_cost.zoo.example_inputs("one_net", 1)
    with pytest.raises(InputError) as info:
        xla_cost.analyze(model, inputs, optimizer="sgd", counter="jaxpr", cache=True, timed=True)
    assert str(info.value) == line


def test_cache_with_time_names_the_store_and_makes_none(capsys, place):
    _refused(capsys, place, "analyze", "one_net", "--cache", "--store", "results.sqlite", "--time",
             "--counter", "jaxpr", "--output", "out.json",
             words=("got cache='results.sqlite' (--cache) with timed=True (--time)",))
    model, inputs = xla_cost.zoo.build_model("one_net"), xla_cost.zoo.example_inputs("one_net", 1)
    with pytest.raises(InputError, match="only without timed=True"):
        xla_cost.analyze(model, inputs, optimizer="sgd", counter="jaxpr", cache=place / "r.sqlite", timed=True)
    assert _files(place) == ["broken.py"]  # neither store was made
    # each alone still works: cached untimed, timed uncached
    assert xla_cost.analyze(model, inputs, optimizer="sgd", counter="jaxpr", cache=place / "r.sqlite").parameters \
        == 1 * 4096 + 4096 + 4096 * 128 + 128 + 128 * 10 + 10  # OneNet 1 -> 4096 -> 128 -> 10, kernels and biases
    assert (place / "r.sqlite").exists()


# ------------------------------------------------------------------ 2: the model's forms in every hint


def test_report_option_without_model_names_file_py_attr(capsys, place):
    # before: "Add --model PACKAGE.MODULE:ATTR, or drop the option."
    line = _refused(capsys, place, "report", "index", "--input-shape", "2,8", "--out", "out",
                    words=("--input-shape only with --model",
                           "Add --model FILE.py:ATTR (or package.module:ATTR, a zoo name), or drop the option."))
    assert "PACKAGE.MODULE" not in line


def test_report_with_a_wrong_model_names_every_form(capsys, place):
    # before: "a zoo model name (...) or package.module:attribute"
    _refused(capsys, place, "report", "--model", "nosuch", "--out", "out",
             words=("a zoo model name (linear_net, one_net", "), FILE.py:attribute or package.module:attribute",
                    "got 'nosuch'"))
    _refused(capsys, place, "report", "--model", "broken.py:Nope", "--input-shape", "2,8", "--out", "out",
             words=("MODEL 'Nope' in broken.py, got no such name (it has Broken)",))


def test_no_hint_names_the_model_as_package_module_alone():
    """Every text that shows ``--model``'s forms, in the package, the docs and
    the index page, names ``FILE.py:ATTR``; the old ``PACKAGE.MODULE:ATTR`` is gone."""
    root = pathlib.Path(__file__).resolve().parents[2]
    texts = [*root.joinpath("xla_cost").rglob("*.py"), *root.joinpath("models").rglob("*.py"),
             *root.joinpath("docs").glob("*.md"), root / "README.md", root / "reports" / "index.md"]
    assert [str(p.relative_to(root)) for p in texts if "PACKAGE.MODULE" in p.read_text()] == []
    with pytest.raises(InputError, match="FILE.py:attribute, package.module:attribute or a Linen or NNX module"):
        xla_cost.RunConfig(object(), input_shape=(1, 8)).build()


# ------------------------------------------------------------------ 3: a setting out of its range


@pytest.mark.parametrize("argv, words", [
    # before: exit 0, a failed row in the table and in the store
    (["deeper_conv_net", "--set", "depth=-1"], ("depth to be an int >= 0, got -1", "--set depth=100")),
    (["deeper_conv_net", "--set", "depth=0,-1"], ("depth to be an int >= 0, got -1",)),  # 0 does not run either
    (["conv_net", "--set", "image_size=0"], ("image_size to be an int >= 1, got 0",)),
    # a fourth new user: a dropout rate of 1.5 or -0.5 ran (exit 0), priced as 0.1 is, and was stored as ok
    (["gpt2-small", "--set", "n_layer=1", "--set", "seq_len=32", "--set", "dropout=-0.5,1.5"],
     ("dropout to be a float in [0, 1], got -0.5", "--set dropout=0.0")),
    (["llama3-8b", "--set", "n_layer=1", "--set", "norm_eps=0"], ("norm_eps to be a float > 0, got 0",)),
])
def test_sweep_refuses_a_setting_out_of_range_before_anything_runs(capsys, place, argv, words):
    _refused(capsys, place, "sweep", *argv, "--jobs", "0", "--counter", "jaxpr", "--output", "out.json", words=words)


def test_sweep_out_of_range_leaves_an_existing_store_alone(capsys, place):
    store = place / "store.sqlite"
    xla_cost.sweep("one_net", counter="jaxpr", jobs=0, progress=False, store=store)
    _one_line(capsys, "sweep", "deeper_conv_net", "--set", "depth=-1", "--jobs", "0", "--counter", "jaxpr",
              words=("depth to be an int >= 0, got -1",))
    with Store(store) as db:
        assert len(db) == 1  # one_net's row alone: no failed row for depth=-1
    # the same from Python, before anything runs
    with pytest.raises(InputError, match="depth to be an int >= 0, got -1"):
        xla_cost.configurations("deeper_conv_net", settings={"depth": ["-1"]})  # text, read as the int -1
    with pytest.raises(InputError, match="depth to be an int >= 0, got -1"):
        xla_cost.sweep("deeper_conv_net", settings={"depth": [-1]}, jobs=0, store=place / "other.sqlite")
    assert not (place / "other.sqlite").exists()
    # in range, the settings come back typed; a custom model's are its own to check
    (config,) = xla_cost.configurations("deeper_conv_net", settings={"depth": ["0"]})
    assert config.config == {"depth": 0}
    custom = xla_cost.RunConfig("broken.py:Broken", config={"width": -1}, input_shape=(1, FEATURES))
    assert custom.checked_settings() is custom


# ------------------------------------------------------------------ 4: every configuration failed


def test_sweep_where_every_configuration_fails_writes_nothing(capsys, place):
    argv = ["sweep", "broken.py:Broken", "--input-shape", f"1,{FEATURES}", "--batch-sizes", "1,2",
            "--layers", "l.csv", "--format", "csv", "--output", "runs.csv", "--jobs", "0", "--counter", "jaxpr"]
    # before: exit 0, a header-only l.csv and runs.csv of two failed rows
    line = _one_line(capsys, *argv, words=(
        "Expected at least one configuration analysed, got 2 of 2 failed ([1] ", "; [2] ", TRACE_ERROR,
        f"float32[1, {FEATURES}]", f"float32[2, {FEATURES}]", "rerun with --retry-failed"))
    assert _files(place) == ["broken.py", "store.sqlite"]  # no l.csv, no runs.csv
    with Store(place / "store.sqlite") as db:
        assert sorted(r.status for r in db.select()) == ["failed", "failed"]  # failures are rows
    # a rerun answers from the store: the same line, still nothing written
    assert _one_line(capsys, *argv, words=()) == line
    assert _files(place) == ["broken.py", "store.sqlite"]
    # from Python: the sweep returns its rows; the check the CLI makes is the result's own
    result = xla_cost.sweep("broken.py:Broken", input_shape=(1, FEATURES), batch_sizes=[1, 2], counter="jaxpr",
                            per_layer=True, jobs=0, progress=False)
    assert list(result.runs["status"]) == ["failed", "failed"] and len(result.layers) == 0
    with pytest.raises(XlaCostError) as info:
        result.raise_if_all_failed()
    assert str(info.value) == line


def test_sweep_where_some_configurations_fail_writes_the_rest(capsys, place):
    code = main(["sweep", "broken.py:Broken", "one_net", "--input-shape", "1,1", "--layers", "l.csv",
                 "--format", "json", "--jobs", "0", "--counter", "jaxpr"])
    out, err = capsys.readouterr()
    assert code == 0, err
    runs = json.loads(out)["runs"]
    assert [(r["model"], r["status"]) for r in runs] == [("broken.py:Broken", "failed"), ("one_net", "ok")]
    layers = pd.read_csv(place / "l.csv").set_index("path")
    assert set(layers["model"]) == {"one_net"}
    # OneNet: 1 -> 4096 -> 128 -> 10 (xla_cost.zoo.seed_nets), batch 1; parameters kernel + bias
    assert layers.loc["fc1", "parameters"] == 1 * 4096 + 4096
    assert layers.loc["fc3", "forward_flops"] == dense_flops(1, 128, 10)
    result = xla_cost.sweep(["broken.py:Broken", "one_net"], input_shape=(1, 1), counter="jaxpr", jobs=0)
    assert result.raise_if_all_failed() is None  # one ok row: nothing to raise
    # the table too (it crashed on the failed row's figures, pandas' NA: "boolean value of NA is ambiguous")
    for fmt in ("table", "markdown"):
        code = main(["sweep", "broken.py:Broken", "one_net", "--input-shape", "1,1", "--jobs", "0", "--counter",
                     "jaxpr", "--format", fmt])
        out, err = capsys.readouterr()
        assert code == 0 and err == "", err
        failed = next(line for line in out.splitlines() if "broken.py:Broken" in line)
        assert "unknown" in failed and "failed" in failed  # its FLOP unknown, not 0
