"""The report cache (`xla_cost.analysis.report_cache`): a rerun answered from the forward trace.

The persistent caches are off while testing (tests/conftest.py); each test
turns xla_cost's on in its own temporary directory without touching JAX's
compilation cache, so that the switch (`compilation_cache`) is the real one.
"""

from __future__ import annotations

import glob
import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost.analysis import pipeline
from xla_cost.compiled import xla

WIDTH, HIDDEN, CLASSES, BATCH = 8, 16, 4, 4


class Net(nn.Module):
    """Two Dense layers whose names the test chooses: the same math under other names."""

    first: str = "fc1"
    second: str = "fc2"
    hidden: int = HIDDEN

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(self.hidden, name=self.first)(x))
        return nn.Dense(CLASSES, name=self.second)(x)


INPUTS = jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32)


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """xla_cost's caches on in ``tmp_path`` (the analyses and the report cache), and a
    list that records every run of the programs (tracing the gradient and the update)."""
    directory = str(tmp_path)
    monkeypatch.setitem(xla._CACHE_STATE, "owned", directory)
    monkeypatch.setattr(xla, "_use_compilation_cache", lambda enabled: directory if enabled else None)
    runs = []
    real = pipeline.run_programs

    def counting(*args, **kwargs):
        runs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "run_programs", counting)
    return tmp_path, runs


def entries(tmp_path):
    return sorted(glob.glob(os.path.join(str(tmp_path), "reports", "*.json")))


def test_a_rerun_is_answered_from_the_cache_without_tracing_the_gradient(caches):
    tmp_path, runs = caches
    first = xla_cost.analyze(Net(), INPUTS, optimizer="sgd", per_layer=True)
    assert len(runs) == 1 and len(entries(tmp_path)) == 1
    second = xla_cost.analyze(Net(), INPUTS, optimizer="sgd", per_layer=True)
    assert len(runs) == 1  # no programs traced, lowered or counted the second time
    assert second.to_dict() == first.to_dict()
    assert second == xla_cost.Report.from_dict(first.to_dict())
    # forward FLOP of the two Dense layers: 2*B*(W*H + H*C) for the products
    assert first.phases["forward"].jaxpr_flops >= 2 * BATCH * (WIDTH * HIDDEN + HIDDEN * CLASSES)
    assert {layer.path for layer in second.layers} >= {"fc1", "fc2"}


def test_what_changes_the_report_misses(caches):
    tmp_path, runs = caches
    base = xla_cost.analyze(Net(), INPUTS, optimizer="sgd", per_layer=True)
    renamed = xla_cost.analyze(Net(first="a", second="b"), INPUTS, optimizer="sgd", per_layer=True)
    assert len(runs) == 2
    assert {layer.path for layer in renamed.layers} >= {"a", "b"}
    assert not {layer.path for layer in renamed.layers} & {"fc1", "fc2"}
    assert base.phases["forward"].jaxpr_flops == renamed.phases["forward"].jaxpr_flops  # the same math
    others = [
        dict(optimizer="adam", per_layer=True),
        dict(optimizer="sgd", per_layer=True, depth=1),
        dict(optimizer="sgd", per_layer=False),
        dict(optimizer="sgd", per_layer=True, dtype="bfloat16"),
    ]
    for n, kwargs in enumerate(others, start=3):
        report = xla_cost.analyze(Net(), INPUTS, **kwargs)
        assert len(runs) == n, kwargs
        assert report.to_dict() != base.to_dict(), kwargs
    bigger = xla_cost.analyze(Net(), jax.ShapeDtypeStruct((2 * BATCH, WIDTH), jnp.float32), optimizer="sgd",
                              per_layer=True)
    assert len(runs) == len(others) + 3 and bigger.batch_size == 2 * BATCH
    wider = xla_cost.analyze(Net(hidden=2 * HIDDEN), INPUTS, optimizer="sgd", per_layer=True)
    assert len(runs) == len(others) + 4
    assert wider.parameters == WIDTH * 2 * HIDDEN + 2 * HIDDEN + 2 * HIDDEN * CLASSES + CLASSES
    assert len(entries(tmp_path)) == len(runs)


def test_an_optimizer_transformation_is_keyed_by_its_update_program(caches):
    import optax

    tmp_path, runs = caches
    first = xla_cost.analyze(Net(), INPUTS, optimizer=optax.sgd(0.1))
    again = xla_cost.analyze(Net(), INPUTS, optimizer=optax.sgd(0.1))
    assert len(runs) == 1 and again.to_dict() == first.to_dict()
    other = xla_cost.analyze(Net(), INPUTS, optimizer=optax.adam(0.1))
    assert len(runs) == 2 and other.to_dict() != first.to_dict()


def test_an_unreadable_entry_is_a_miss(caches):
    tmp_path, runs = caches
    first = xla_cost.analyze(Net(), INPUTS, optimizer="sgd")
    (path,) = entries(tmp_path)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write('{"model": ')  # cut short
    again = xla_cost.analyze(Net(), INPUTS, optimizer="sgd")
    assert len(runs) == 2 and again.to_dict() == first.to_dict()
    with open(path, encoding="utf-8") as handle:  # written again, whole
        assert xla_cost.Report.from_dict(json.load(handle)) == again


def test_off_with_the_caches_and_never_for_timed_or_sharded_analyses(caches):
    tmp_path, runs = caches
    xla_cost.analyze(Net(), INPUTS, optimizer="sgd", compilation_cache=False)
    xla_cost.analyze(Net(), INPUTS, optimizer="sgd", compilation_cache=False)
    assert len(runs) == 2 and entries(tmp_path) == []
    assert xla.cache_dir() is None
    xla_cost.analyze(Net(), INPUTS, optimizer="sgd", mesh={"data": 2})
    xla_cost.analyze(Net(), INPUTS, optimizer="sgd", mesh={"data": 2})
    assert len(runs) == 4 and entries(tmp_path) == []
    assert xla.cache_dir() == str(tmp_path)  # the caches were on: the mesh kept it out
    xla_cost.analyze(Net(), INPUTS, optimizer="sgd", timed=True)
    assert len(runs) == 5 and entries(tmp_path) == []
    xla_cost.analyze(Net(), INPUTS, optimizer="sgd")  # an untimed one is written: the timed one was not read
    assert len(runs) == 6 and len(entries(tmp_path)) == 1


@pytest.mark.parametrize(("name", "batch", "kwargs"), [("conv_net", 2, {}), ("deeper_conv_net", 2, {"depth": 3})])
def test_a_zoo_report_read_back_from_its_json_is_the_same_report(zoo_report, name, batch, kwargs):
    # what the cache keeps is to_dict()'s JSON: read back, it must be the report itself
    report = zoo_report(name, batch, **kwargs)
    assert xla_cost.Report.from_dict(json.loads(json.dumps(report.to_dict()))) == report


def _twice(x, g):
    return (2 * x * g,)


def _thrice(x, g):
    return (3 * x * g,)


_twice.__name__ = _twice.__qualname__ = _thrice.__name__ = _thrice.__qualname__ = "backward"  # one name in the jaxpr
BACKWARD = {"rule": _twice}


def _square(x):
    @jax.custom_vjp
    def square(x):
        return x * x

    square.defvjp(lambda x: (x * x, x), BACKWARD["rule"])
    return square(x)


class Squared(nn.Module):
    """A Dense layer after a custom_vjp square whose backward rule the test swaps (no field changes)."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(CLASSES, name="fc")(_square(x))


def test_a_custom_backward_rule_is_in_the_key(caches, monkeypatch):
    tmp_path, runs = caches
    xla_cost.analyze(Squared(), INPUTS, optimizer="sgd")
    xla_cost.analyze(Squared(), INPUTS, optimizer="sgd")
    assert len(runs) == 1
    # the same forward program and arguments, another backward rule: its code, not its name, differs
    monkeypatch.setitem(BACKWARD, "rule", _thrice)
    xla_cost.analyze(Squared(), INPUTS, optimizer="sgd")
    assert len(runs) == 2 and len(entries(tmp_path)) == 2


RULE_FILE = '''
def helper(x, g):
    return ({factor} * x * g,)


def rule(x, g):  # the same code in both versions of the file: only the helper it calls changes
    return helper(x, g)
'''


def test_a_helper_that_a_custom_rule_of_the_users_calls_is_in_the_key(caches, monkeypatch):
    # a backward rule written in the user's own file calls a helper of that file; editing the helper
    # (2x g -> 3x g: another gradient, the same forward program and rule code) must not read the old report
    import importlib.util
    import sys

    tmp_path, runs = caches
    source = tmp_path / "user_rules_for_the_report_cache.py"

    def load(factor):
        source.write_text(RULE_FILE.format(factor=factor))
        spec = importlib.util.spec_from_file_location(source.stem, source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        monkeypatch.setitem(sys.modules, source.stem, module)
        monkeypatch.setitem(BACKWARD, "rule", module.rule)

    load(2.0)
    xla_cost.analyze(Squared(), INPUTS, optimizer="sgd")
    xla_cost.analyze(Squared(), INPUTS, optimizer="sgd")
    assert len(runs) == 1
    load(3.0)
    xla_cost.analyze(Squared(), INPUTS, optimizer="sgd")
    assert len(runs) == 2 and len(entries(tmp_path)) == 2


@pytest.mark.skipif(__import__("xla_cost.plugins").plugins.cuda_plugin() is None,
                    reason="needs jax's CUDA plugin (the gpu extra) to compile for an H100")
def test_a_target_analysis_with_its_memory_verdict_reads_back_equal(caches):
    # a deviceless H100 compile with memory=True: the report holds target_memory (whether the step
    # fits), which a rerun must read back as the first run made it, notes included
    tmp_path, runs = caches
    first = xla_cost.analyze(Net(), INPUTS, optimizer="sgd", target="h100", memory=True)
    again = xla_cost.analyze(Net(), INPUTS, optimizer="sgd", target="h100", memory=True)
    assert len(runs) == 1 and len(entries(tmp_path)) == 1
    assert first.target_memory is not None and again == first and again.notes == first.notes
