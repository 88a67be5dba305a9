"""Wrong figures a third new user got from ``step`` and ``analyze`` (issue 49, "Wrong figures
from `step` and `analyze`"), now one-line refusals: a step given a batch of 0 examples (it
reported backward -266 FLOP), a step that returns nothing (0 everywhere, blamed on "nothing
differentiable") and a model ending in ``argmax`` (backward 0 and no note), on the CPU and
for an H100.

Each runs the exact command in-process, in a working directory of its own: exit 2, nothing
on stdout, one line saying what was expected, what came and how to fix it, no file written.
The Python calls (`xla_cost.analyze_step`, `xla_cost.analyze`) raise the same `InputError`.
"""

from __future__ import annotations

import importlib
import pathlib
import sys

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from tests.refusals import one_line_refusal
from xla_cost import plugins
from xla_cost.cli import main
from xla_cost.errors import InputError

B, IN, CLASSES = 4, 8, 3

STEP_FILE = f'''
import jax, jax.numpy as jnp


def _loss(params, x, y):
    logits = x @ params["w"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=-1))


def train_step(state, x, y):
    loss, grads = jax.value_and_grad(_loss)(state["params"], x, y)
    return {{"params": jax.tree.map(lambda p, g: p - 0.1 * g, state["params"], grads)}}, loss


def forgets_to_return(state, x, y):
    loss, grads = jax.value_and_grad(_loss)(state["params"], x, y)
    jax.tree.map(lambda p, g: p - 0.1 * g, state["params"], grads)  # the new state, never returned


def _args(batch):
    state = {{"params": {{"w": jax.ShapeDtypeStruct(({IN}, {CLASSES}), jnp.float32)}}}}
    return state, jax.ShapeDtypeStruct((batch, {IN}), jnp.float32), jax.ShapeDtypeStruct((batch,), jnp.int32)


def make_args():
    return _args({B})


def make_empty_batch():
    return _args(0)
'''

NET_FILE = f'''
import jax.numpy as jnp
import flax.linen as nn


class ArgmaxNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        return jnp.argmax(nn.Dense({CLASSES})(nn.relu(nn.Dense(16)(x))), -1)  # class ids, not logits
'''


@pytest.fixture
def place(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XLA_COST_STORE", str(tmp_path / "store.sqlite"))
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    (tmp_path / "third_step.py").write_text(STEP_FILE)
    (tmp_path / "third_net.py").write_text(NET_FILE)
    yield tmp_path
    for name in ("third_step", "third_net"):
        sys.modules.pop(name, None)


def _refused(capsys, place: pathlib.Path, argv: list[str], words: tuple[str, ...]) -> str:
    before = sorted(p.name for p in place.iterdir())
    line = one_line_refusal(capsys, argv, words)
    assert sorted(p.name for p in place.iterdir()) == before  # no --output, no store
    return line


def test_a_step_given_a_batch_of_0_is_refused(capsys, place):
    _refused(capsys, place, ["step", "third_step.py:train_step", "--args", "third_step.py:make_empty_batch",
                             "--output", "out.json", "--format", "json"],
             ("at least one example", f"float32[0,{IN}] (batch 0)", "leading size of 1 or more"))
    # the same step with a batch: every part counted, none negative
    assert main(["step", "third_step.py:train_step", "--args", "third_step.py:make_args",
                          "--counter", "jaxpr"]) == 0
    capsys.readouterr()
    module = importlib.import_module("third_step")
    report = xla_cost.analyze_step(module.train_step, *module.make_args(), counter="jaxpr")
    assert all(report.phases[p].flops >= 0 for p in report.phase_names)
    assert report.phases["backward"].flops > 0
    with pytest.raises(InputError, match="batch 0"):
        xla_cost.analyze_step(module.train_step, *module.make_empty_batch(), counter="jaxpr")


def test_a_step_that_returns_nothing_is_refused_as_such(capsys, place):
    line = _refused(capsys, place, ["step", "third_step.py:forgets_to_return", "--args", "third_step.py:make_args"],
                    ("forgets_to_return() to return what it computes", "returns nothing", "return state, loss"))
    assert "differentiable" not in line  # not blamed on the loss
    module = importlib.import_module("third_step")
    with pytest.raises(InputError, match="returns nothing"):
        xla_cost.analyze_step(module.forgets_to_return, *module.make_args())


@pytest.mark.parametrize("target", [
    None,
    pytest.param("h100", marks=pytest.mark.skipif(plugins.cuda_plugin() is None,
                                                  reason="jax's CUDA plugin (the gpu extra) is not installed")),
])
def test_a_model_ending_in_argmax_is_refused_on_the_cpu_and_a_target(capsys, place, target):
    argv = ["analyze", "third_net.py:ArgmaxNet", "--input-shape", f"{B},{IN}", "--output", "out.json"]
    _refused(capsys, place, argv + (["--target", target] if target else []),
             ("outputs are floating point", f"int32[{B}]", "argmax", "Return the logits"))
    model = importlib.import_module("third_net").ArgmaxNet()
    with pytest.raises(InputError, match="integers"):
        xla_cost.analyze(model, jax.ShapeDtypeStruct((B, IN), jnp.float32), target=target)  # before any compile
