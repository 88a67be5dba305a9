"""What a second new user typed that the command line took wrongly (issue 30,
"Refusals and odd inputs", rows 9-17, 23, 24 and 29), and ``FILE.py:ATTR``
for ``analyze`` and ``report`` as ``step`` takes it.

Each refusal runs the exact command in-process and checks what the other
refusal tests check: one line on stderr saying what was expected, what was
received and how to fix it, exit code 2, nothing on stdout, and nothing
written (no ``--output`` file) or stored (no results store). Each runs in its
own working directory with its own store.
"""

from __future__ import annotations

import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from tests.refusals import one_line_refusal
from xla_cost.cli import main
from xla_cost.errors import InputError
from xla_cost.runs.scaling import scaling

IN, HIDDEN = 4, 3  # the step's parameter w is IN x HIDDEN, its batch B x IN
B = 2

STEP_FILE = f'''
import jax, jax.numpy as jnp


def train_step(state, x):
    def loss_fn(params):
        return jnp.sum(jnp.tanh(x @ params["w"]))

    loss, grads = jax.value_and_grad(loss_fn)(state["params"])
    print("traced train_step")  # a user's own print while the step is traced
    return {{"params": jax.tree.map(lambda p, g: p - 0.1 * g, state["params"], grads)}}, loss


def _state():
    return {{"params": {{"w": jax.ShapeDtypeStruct(({IN}, {HIDDEN}), jnp.float32)}}}}


def make_args():
    return _state(), jax.ShapeDtypeStruct(({B}, {IN}), jnp.float32)


def make_dict():
    return {{"state": _state(), "x": jax.ShapeDtypeStruct(({B}, {IN}), jnp.float32)}}


def make_none():
    state, x = _state(), jax.ShapeDtypeStruct(({B}, {IN}), jnp.float32)  # no return


def make_generator():
    yield _state()
    yield jax.ShapeDtypeStruct(({B}, {IN}), jnp.float32)
'''

WIDTH, CLASSES, FEATURES = 16, 10, 8
NET_FILE = f'''
import flax.linen as nn


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return self.decode(self.encoder(x))

    def encoder(self, x):
        return nn.relu(nn.Dense({WIDTH}, name="fc1")(x))

    def decode(self, x):
        return nn.Dense({CLASSES}, name="fc2")(x)
'''
PARAMETERS = FEATURES * WIDTH + WIDTH + WIDTH * CLASSES + CLASSES  # two Dense layers with biases


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working directory of its own, with the step and net files, its own
    (absent) results store, and the import path restored after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XLA_COST_STORE", str(tmp_path / "store.sqlite"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "my_step.py").write_text(STEP_FILE)
    (tmp_path / "mynet.py").write_text(NET_FILE)
    yield tmp_path
    sys.modules.pop("mynet", None)


def _refused(capsys, place: pathlib.Path, *argv: str, words: str | tuple[str, ...]) -> str:
    """Runs ``xla-cost ARGV`` as given: one line saying what was expected, what
    came and how to fix it, naming ``words``; exit 2; nothing on stdout; no new file."""
    before = sorted(p.name for p in place.iterdir())
    line = one_line_refusal(capsys, argv, words)
    assert sorted(p.name for p in place.iterdir() if p.name != "__pycache__") == \
        [n for n in before if n != "__pycache__"]  # no --output file, no store
    return "xla-cost: error: " + line


STEP = ("step", "my_step.py:train_step")


# ------------------------------------------------------------------ 9-11: what --args returns


def test_row_09_make_args_returning_a_dict_is_blamed(capsys, place):
    line = _refused(capsys, place, *STEP, "--args", "my_step.py:make_dict", "--output", "out.json",
                    words=("--args my_step.py:make_dict() to return the step's positional arguments as a tuple "
                           "or list", "got a dict (keys state, x)", "e.g. return state, batch"))
    assert "missing 1 required positional argument" not in line  # the step is not blamed


def test_row_10_make_args_returning_none_is_blamed(capsys, place):
    line = _refused(capsys, place, *STEP, "--args", "my_step.py:make_none", "--output", "out.json",
                    words=("--args my_step.py:make_none() to return the step's positional arguments",
                           "got None instead", "return state, batch"))
    assert "train_step" not in line


def test_row_11_make_args_returning_a_generator_is_blamed(capsys, place):
    line = _refused(capsys, place, *STEP, "--args", "my_step.py:make_generator", "--output", "out.json",
                    words=("--args my_step.py:make_generator() to return", "got a generator (the function yields)",
                           "instead of yielding them"))
    assert "abstract array" not in line


# ------------------------------------------------------------------ 12: the user's print()s


def test_row_12_a_step_that_prints_leaves_json_alone_on_stdout(capsys, place):
    code = main([*STEP, "--args", "my_step.py:make_args", "--counter", "jaxpr", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)  # stdout is the JSON alone
    assert report["parameters"] == IN * HIDDEN
    assert "traced train_step" in err  # the user's print still shows, on stderr


# ------------------------------------------------------------------ 13-15: options that were ignored


@pytest.mark.parametrize("command", [
    ["analyze", "one_net", "--input-shape", "", "--output", "out.json"],
    ["fit", "one_net", "--input-shape", "", "--output", "out.json"],
    ["sweep", "one_net", "--input-shape", "", "--jobs", "0", "--output", "out.json"],
])
def test_row_13_an_empty_input_shape_is_refused(capsys, place, command):
    _refused(capsys, place, *command,
             words=("--input-shape as positive integers B,D1,... (batch first), got ''", "8,224,224,3"))


@pytest.mark.parametrize("flag, value, keyword", [
    ("--peak-tflops", "100", "peak_tflops"),
    ("--peak-bandwidth", "3.35e12", "peak_bandwidth"),
])
def test_row_14_a_peak_without_time_is_refused(capsys, place, flag, value, keyword):
    _refused(capsys, place, "analyze", "one_net", flag, value, "--counter", "jaxpr", "--output", "out.json",
             words=(f"{keyword} ({flag}) only with timed=True (--time)", f"{keyword}={float(value)!r} without it",
                    "Add timed=True (--time)"))
    # the same from Python (the CLI is a thin layer)
    with pytest.raises(InputError, match=rf"{keyword} \({flag}\) only with timed=True"):
        xla_cost.analyze(xla_cost.zoo.build_model("one_net"), xla_cost.zoo.example_inputs("one_net", 1),
                         optimizer="sgd", counter="jaxpr", **{keyword: float(value)})


def test_row_15_store_without_cache_is_refused(capsys, place):
    _refused(capsys, place, "analyze", "one_net", "--store", "results.sqlite", "--counter", "jaxpr",
             "--output", "out.json",
             words=("--store only with --cache", "--store results.sqlite without --cache",
                    "Add --cache, or drop --store."))


# ------------------------------------------------------------------ 16-17: the file named


@pytest.mark.parametrize("text", ["", "# a file of comments\n", "WIDTH = 16\nimport flax.linen as nn\n"])
def test_row_16_a_file_without_functions_says_it_has_none(capsys, place, text):
    (place / "empty.py").write_text(text)
    line = _refused(capsys, place, "step", "empty.py:step", "--args", "my_step.py:make_args", "--output", "out.json",
                    words="the step 'step' in empty.py, got no such name (it has no functions or classes)")
    assert "(it has ," not in line


def test_row_16_a_misspelt_name_is_answered_with_the_files_functions(capsys, place):
    _refused(capsys, place, "step", "my_step.py:train_stp", "--args", "my_step.py:make_args",
             words=("got no such name (it has make_args, make_dict, make_generator, make_none, train_step)",
                    "Did you mean my_step.py:train_step?"))


def test_row_17_a_file_that_is_not_python_is_refused(capsys, place):
    (place / "env.sh").write_text("#!/bin/sh\nexport STEP=1\n")
    for where in ("env.sh", str(place / "env.sh")):
        line = _refused(capsys, place, "step", f"{where}:step", "--args", "my_step.py:make_args",
                        words=("the step as FILE.py:NAME (a Python source file) or package.module:NAME",
                               f"got {where!r}, a file that is not Python source (.py)", "e.g. train.py:train_step"))
        assert "No module named" not in line
    _refused(capsys, place, "step", "scripts/train:step", "--args", "my_step.py:make_args",
             words="got 'scripts/train', neither a .py file nor a dotted module name")


# ------------------------------------------------------------------ 23-24: scaling


def test_row_23_scaling_batch_size_with_global_batch_is_refused(capsys, place):
    _refused(capsys, place, "scaling", "one_net", "--batch-size", "4", "--global-batch", "8", "--output", "out.json",
             words=("batch_size (--batch-size, weak scaling) or global_batch (--global-batch, strong scaling), "
                    "not both", "got batch_size=4 with global_batch=8", "Drop --batch-size"))
    with pytest.raises(InputError, match="not both"):  # the same from Python
        scaling("one_net", (1, 2), global_batch=8, batch_size=4, store=place / "store.sqlite")
    assert not (place / "store.sqlite").exists()


@pytest.mark.parametrize("argv, words", [
    (["scaling", "one_net", "--plot", "same.png", "--output", "same.png"],
     ("--output and --plot naming different files", "got 'same.png' for both", "--plot same-plot.png")),
    (["scaling", "one_net", "--plot", "./same.png", "--output", "same.png"],
     ("--output and --plot naming different files", "got 'same.png' and './same.png', one file")),
    (["sweep", "one_net", "--per-layer", "--layers", "same.csv", "--output", "same.csv", "--jobs", "0"],
     ("--output and --layers naming different files", "got 'same.csv' for both")),
])
def test_row_24_two_outputs_naming_one_file_are_refused(capsys, place, argv, words):
    (place / "same.png").write_bytes(b"\x89PNG an earlier plot")
    _refused(capsys, place, *argv, words=words)
    assert (place / "same.png").read_bytes() == b"\x89PNG an earlier plot"  # not overwritten


# ------------------------------------------------------------------ 29: --method


def test_row_29_an_unknown_method_of_one_net_says_it_has_only_call(capsys, place):
    line = _refused(capsys, place, "analyze", "one_net", "--method", "encode", "--counter", "jaxpr",
                    "--output", "out.json",
                    words=("method= (--method) naming a method of OneNet, which has only __call__", "got 'encode'",
                           "Drop method= (--method)"))
    assert "method='encode'" not in line  # the name that failed is not suggested


def test_row_29_an_unknown_method_lists_the_models_methods(capsys, place):
    _refused(capsys, place, "analyze", "mynet.py:MLP", "--input-shape", f"2,{FEATURES}", "--method", "encode",
             "--counter", "jaxpr", "--output", "out.json",
             words=("a method of MLP: decode, encoder, got 'encode'", "Did you mean method='encoder'?"))


# ------------------------------------------------------------------ FILE.py:ATTR for analyze and report


def test_analyze_takes_file_py_attr_like_step(capsys, place, monkeypatch):
    argv = ["--input-shape", f"2,{FEATURES}", "--optimizer", "sgd", "--counter", "jaxpr", "--format", "json"]
    assert main(["analyze", "mynet.py:MLP", *argv]) == 0, capsys.readouterr().err
    by_file = json.loads(capsys.readouterr().out)
    assert main(["analyze", "mynet:MLP", *argv]) == 0, capsys.readouterr().err  # the module, by name
    by_module = json.loads(capsys.readouterr().out)
    assert by_file["parameters"] == PARAMETERS
    # the forward's two matmuls, 2 FLOP per multiply-add; SGD's update, 2 FLOP per parameter
    assert by_file["matmul_flops"]["forward"] == 2 * 2 * (FEATURES * WIDTH + WIDTH * CLASSES)
    assert by_file["flops"]["update"] == 2 * PARAMETERS
    assert by_file["flops"] == by_module["flops"] and by_file["model"] == by_module["model"] == "MLP"
    # and from another folder, by its path
    (place / "elsewhere").mkdir()
    monkeypatch.chdir(place / "elsewhere")
    assert main(["analyze", "../mynet.py:MLP", *argv, "--output", "r.json"]) == 0, capsys.readouterr().err
    assert json.loads((place / "elsewhere" / "r.json").read_text())["flops"] == by_file["flops"]


def test_report_takes_file_py_attr_like_step(capsys, place):
    code = main(["report", "--model", "mynet.py:MLP", "--input-shape", f"2,{FEATURES}", "--out", "out"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.split() == ["out/MLP.md", "out/figures/MLP-layers.png"]
    assert f"{PARAMETERS} parameters" in (place / "out" / "MLP.md").read_text()


def test_python_gives_what_the_file_form_loads(place):
    from xla_cost.step.loading import load_attribute

    net = load_attribute("mynet.py:MLP", "MODEL")()
    params = jax.eval_shape(net.init, jax.random.key(0), jnp.zeros((2, FEATURES)))
    assert sum(x.size for x in jax.tree.leaves(params)) == PARAMETERS


def test_row_12_a_table_keeps_stdouts_width_not_stderrs(capsys, place, monkeypatch):
    """While the step runs, ``print`` goes to stderr; the table is still sized
    for stdout (a pipe here: natural width), not for a terminal on stderr."""
    argv = [*STEP, "--args", "my_step.py:make_args", "--counter", "jaxpr"]
    assert main([*argv, "--output", "natural.txt"]) == 0  # a file: the table's natural width
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == (place / "natural.txt").read_text()  # not wrapped to stderr's 40 columns
