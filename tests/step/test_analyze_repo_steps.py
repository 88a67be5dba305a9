"""`xla_cost.analyze_step` on training steps written the way their repositories write them
(tests/repo_steps.py: Flax's ImageNet and MNIST examples, the NNX tutorial, a nanoGPT-style
step with a clipped AdamW schedule and 4-micro-batch accumulation, a jit with donation, a
data-parallel jit with shardings over 8 devices, and the ImageNet step under pmap).

On each (issue 23's acceptance): the forward part within 1% of the closed form; backward over
forward on the matrix products as the closed form says; the update per parameter what
`xla_cost.analyze` gives for the same optax transformation (plus what the step itself adds to
it, named per case); the parts adding up to the step's jaxpr count exactly, and within 2% of
XLA's compiled count of the step.
"""

from __future__ import annotations

import pytest

import xla_cost
from tests.repo_steps import CASES, case

MICRO_BATCHES = 4
"""The GPT step's accumulation loop (tests/repo_steps.py: 4 x 2 sequences)."""

STEP_UPDATE_EXTRA = {
    # the gradients' lax.pmean, bound on a one-device group: XLA counts its all-reduce as one add per element
    "imagenet": 1,
    # under pmap over 8 devices: the all-reduce's add, and the mean's division by 8
    "imagenet_pmap": 2,
    # the accumulation: one add per micro-batch and the division by their number, per parameter
    "gpt": MICRO_BATCHES + 1,
}
"""FLOP per parameter a step's own update adds to the optax transformation's (analyze's update)."""


@pytest.fixture(scope="module")
def reports():
    return {}


def _report(reports, name):
    if name not in reports:
        c = case(name)
        reports[name] = xla_cost.analyze_step(c.step, *c.args, **c.kwargs)
    return reports[name]


@pytest.mark.parametrize("name", list(CASES))
def test_forward_is_the_closed_form(reports, name):
    c, report = case(name), _report(reports, name)
    expected = (c.forward_flops + c.loss_flops) / c.devices  # one device's share where the step is sharded
    assert report.phases["forward"].flops == pytest.approx(expected, rel=0.01)
    assert report.parameters == c.parameters


@pytest.mark.parametrize("name", list(CASES))
def test_backward_over_forward_on_the_matrix_products_is_the_closed_form(reports, name):
    c, report = case(name), _report(reports, name)
    measured = report.phases["backward"].matmul_flops / report.phases["forward"].matmul_flops
    assert measured == pytest.approx(c.backward_to_forward, rel=1e-3)


@pytest.mark.parametrize("name", list(CASES))
def test_update_per_parameter_is_the_optax_transformations(reports, name):
    c, report = case(name), _report(reports, name)
    keywords = {key: value for key, value in (("loss", c.loss), ("targets", c.targets)) if value is not None}
    alone = xla_cost.analyze(c.model, c.inputs, optimizer=c.optimizer, counter="jaxpr", **keywords)
    per_parameter = alone.phases["update"].flops / alone.parameters
    assert report.phases["update"].flops / c.parameters == pytest.approx(
        per_parameter + STEP_UPDATE_EXTRA.get(name, 0), abs=1e-3)


@pytest.mark.parametrize("name", list(CASES))
def test_parts_add_up_to_the_step_and_to_xla_s_count(reports, name):
    c, report = case(name), _report(reports, name)
    parts = ("forward", "backward", "update", "other")
    assert sum(report.phases[p].jaxpr_flops for p in parts) == report.phases["train_step"].jaxpr_flops
    on_one_device = sum(report.phases[p].flops for p in parts)
    if name == "data_parallel":
        # XLA's partitioner adds the gradients' all-reduce, which the jaxpr does not hold: one add per
        # parameter on every device, as XLA counts an all-reduce
        on_one_device += c.parameters
    assert report.phases["train_step"].flops == pytest.approx(on_one_device, rel=0.02)


@pytest.mark.parametrize("name", list(CASES))
def test_the_step_checker_finds_nothing_accidental_in_repository_steps(reports, name):
    """The steps as their repositories write them: no metrics on the gradients, no second forward pass,
    every parameter graded, an optimizer state of at most Adam's two moments (a pmap's replicated state
    against its replicated parameters)."""
    assert [n for n in _report(reports, name).notes if n.startswith("step checker")] == []


def test_the_sharded_steps_list_their_gradient_all_reduce(reports):
    for name in ("data_parallel", "imagenet_pmap"):
        c, report = case(name), _report(reports, name)
        assert report.devices == 8
        rows = [row for part in ("backward", "update") for row in report.phases[part].communication
                if row.kind == "all-reduce"]
        assert rows, name
        # every float32 gradient, in as many all-reduces as XLA's combiner makes (and, combined with them,
        # the loss's scalar or the batch statistics' cotangents)
        moved = sum(row.bytes * (row.executions or 1) for row in rows)
        assert c.gradient_allreduce_bytes <= moved <= 1.1 * c.gradient_allreduce_bytes
