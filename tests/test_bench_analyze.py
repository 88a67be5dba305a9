"""benchmarks/bench_analyze.py's baseline and verdicts (issue 49), without running the benchmark.

The hand-written baseline builds its ResNet from benchmarks/plain_resnet.py, which imports
nothing of xla_cost: it must be the zoo's network (the same parameters, in the same tree),
or the benchmark compares different work. The verdicts: a phase whose FLOP differ between
analyze and the baseline fails the run; a ratio against a baseline that imported xla_cost
is information, never a PASS."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import jax
import numpy as np
import pytest

from xla_cost.zoo import build_model, example_inputs
from xla_cost.zoo.resnet import resnet_parameters

BENCHMARKS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and flax look the module up
    spec.loader.exec_module(module)
    return module


plain = _load("plain_resnet")
bench = _load("bench_analyze")


def _shapes(model, inputs):
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)
    return jax.tree_util.tree_map(lambda x: (x.shape, x.dtype), variables)


@pytest.mark.parametrize(("name", "stages", "bottleneck"), [("resnet18", (2, 2, 2, 2), False),
                                                            ("resnet50", (3, 4, 6, 3), True)])
def test_the_plain_resnet_is_the_zoos_network(name, stages, bottleneck):
    model, inputs = plain.build_model(name, image_size=32), plain.example_inputs(name, 2, image_size=32)
    assert inputs.shape == example_inputs(name, 2, image_size=32).shape == (2, 32, 32, 3)
    shapes = _shapes(model, inputs)
    # every variable of the zoo's model, by path, with its shape and dtype (batch statistics included)
    assert shapes == _shapes(build_model(name, image_size=32), inputs)
    parameters = sum(int(np.prod(shape)) for shape, _ in jax.tree_util.tree_leaves(
        shapes["params"], is_leaf=lambda x: isinstance(x, tuple)))
    assert parameters == resnet_parameters(stages, bottleneck)  # 11,689,512 and 25,557,032 at 1000 classes
    assert "xla_cost" not in plain.__dict__ and not any("xla_cost" in line for line in
                                                        (BENCHMARKS / "plain_resnet.py").read_text().splitlines()
                                                        if line.startswith(("import", "from")))


def _sample(flops: dict[str, float], imported: bool = False) -> dict:
    return {**{f"{p}_flops": v for p, v in flops.items()}, "xla_cost_imported": imported}


def test_different_flop_fail_and_a_baseline_that_imported_xla_cost_is_information():
    model = ("resnet50", 32, {})
    label = bench.label(model)
    same = {"forward": 2.0e11, "grad": 7.0e11, "update": 3.0e8}
    off = {**same, "grad": 7.0e11 * (1 + 10 * bench.FLOP_TOLERANCE)}
    rows = bench.same_flops([model], {label: {"layers": [_sample(same)], "handwritten": [_sample(off)]}})
    assert {r["phase"]: r["verdict"] for r in rows} == {"forward": "PASS", "grad": "FAIL", "update": "PASS"}
    within = {**same, "grad": 7.0e11 * (1 + bench.FLOP_TOLERANCE / 2)}
    rows = bench.same_flops([model], {label: {"layers": [_sample(same)], "handwritten": [_sample(within)]}})
    assert all(r["verdict"] == "PASS" for r in rows)

    medians = {"seconds": {label: {"layers": 6.0, "warm": 2.0, "handwritten": 10.0}},
               "process_seconds": {label: {"layers": 8.0, "warm": 3.0, "handwritten": 12.0}}}
    for imported, verdict in ((False, "PASS"), (True, "info (baseline imported xla_cost)")):
        samples = {label: {"layers": [_sample(same)], "warm": [_sample(same)],
                           "handwritten": [_sample(same, imported)]}}
        rows = {r["check"]: r for r in bench.checks([model], medians, samples)}
        whole = rows["compiled+layers / hand-written, whole processes (issue 49)"]
        assert whole["value"] == pytest.approx(8.0 / 12.0) and whole["verdict"] == verdict
    warm = rows["warm / cold (layers), whole processes (issue 49)"]
    assert warm["value"] == pytest.approx(3.0 / 8.0) and warm["verdict"] == "PASS"  # not against a baseline
