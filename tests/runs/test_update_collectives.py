"""The update program's own collectives, priced once a step after the gradients, blocking the update.

Muon (optax's ``contrib.muon``) under ``fsdp``: XLA's partitioner keeps the Newton-Schulz products
sharded, so every iteration all-gathers the iterate X (for X X^T, and again for (c1 A + c2 A A) X) and
the Gram matrix A = X X^T (m x m for an m x n matrix). Adam's update is elementwise on each
device's shard and has none. Before, `predict` put the update's collectives with the gradients'
and ZeRO-3's units replaced them: Muon's gathers were never priced.

The analysed step is a 1-layer GPT-2 (d_model 64, 64 positions, 256 tokens) sharded ``fsdp=8``;
prices are bounds at a fixed MFU with ring formulas over the H100 node's NVLink 4 (450 GB/s, 1 us
per hop: `xla_cost.timemodel.comm`'s stated figures), as tests/runs/test_fsdp_pricing.py's.
"""

from __future__ import annotations

import dataclasses

import pytest

import xla_cost
from xla_cost.runs.configs import RunConfig
from xla_cost.runs.scaling import predict
from xla_cost.timemodel.hardware import Hardware

# The estimate below analyses the same programs as the fixture: read back from the module's caches.
pytestmark = pytest.mark.usefixtures("module_caches")

TINY = {"n_layer": 1, "d_model": 64, "n_head": 4, "seq_len": 64, "vocab_size": 256}
BATCH, FSDP, F32, NS_STEPS = 8, 8, 4, 5
NVLINK_B, NVLINK_ALPHA = 450e9, 1e-6
D = TINY["d_model"]
MATRICES = (
    (TINY["vocab_size"], D), (TINY["seq_len"], D),  # the token and position embeddings
    (D, 3 * D), (D, D), (D, 4 * D), (4 * D, D),  # the block's qkv, attention projection, MLP in and out
)
"""The 2-D parameters, which optax's Muon orthogonalizes (its default: every matrix)."""


@pytest.fixture(scope="module")
def reports():
    xla_cost.simulate_devices(FSDP)
    return {name: RunConfig("gpt2-small", BATCH, TINY, optimizer=name, mesh={"fsdp": FSDP}).canonical().run()
            for name in ("muon", "adam")}


def _ring(nbytes: float, n: int) -> float:  # an all-gather of nbytes (the gathered result) over n devices
    return (n - 1) / n * nbytes / NVLINK_B + (n - 1) * NVLINK_ALPHA


def test_muon_under_fsdp_gathers_each_iterate_twice_and_its_gram_once_an_iteration(reports):
    update = reports["muon"].phases["update"]
    gathers = [c for c in update.communication if c.kind == "all-gather"]
    assert gathers and all(c.axes == ("fsdp",) and c.group_size == FSDP for c in gathers)
    # per matrix and iteration: X twice (r c float32 each) and A once (m^2, m = min(r, c))
    assert sum(c.total_bytes for c in gathers) == NS_STEPS * sum(
        (2 * r * c + min(r, c) ** 2) * F32 for r, c in MATRICES)
    # Adam's update: elementwise on each device's shard
    assert reports["adam"].phases["update"].communication == ()


def test_the_update_collectives_block_the_step_once_after_the_gradients(reports):
    report = reports["muon"]
    update = report.phases["update"]
    step = predict(report, Hardware("h100", mfu=1.0))
    gathers = sum(c.executions * _ring(c.bytes, FSDP) for c in update.communication if c.kind == "all-gather")
    # the Frobenius norm's partial sums (a few bytes): a ring all-reduce, twice the hops
    reduces = sum(c.executions * 2 * _ring(c.bytes, FSDP) for c in update.communication if c.kind == "all-reduce")
    assert {c.kind for c in update.communication} == {"all-gather", "all-reduce"}
    assert step.parts["update_collectives"] == pytest.approx(gathers + reduces, rel=1e-9)
    # the step without them is shorter by exactly their time: nothing hides them
    without = dataclasses.replace(report, phases={**report.phases, "update": dataclasses.replace(update, communication=())})
    alone = predict(without, Hardware("h100", mfu=1.0))
    assert "update_collectives" not in alone.parts
    assert step.prediction.seconds == pytest.approx(alone.prediction.seconds + gathers + reduces, rel=1e-9)
    assert step.prediction.exposed_communication_seconds == pytest.approx(
        alone.prediction.exposed_communication_seconds + gathers + reduces, rel=1e-9)
    # Adam's step has none
    assert "update_collectives" not in predict(reports["adam"], Hardware("h100", mfu=1.0)).parts


def test_an_estimate_says_the_update_collectives_are_a_bound():
    run = xla_cost.estimate("gpt2-small", tokens=1e6, config=TINY, batch_size=BATCH, optimizer="muon",
                            mesh={"fsdp": FSDP})
    assert run.step.parts["update_collectives"] > 0
    said = [note for note in run.notes() if note.startswith("update collectives:")]
    assert len(said) == 1 and "a bound" in said[0]
    # and only where the step has them
    quiet = dataclasses.replace(run, step=dataclasses.replace(run.step, parts={
        k: v for k, v in run.step.parts.items() if k != "update_collectives"}))
    assert not [note for note in quiet.notes() if note.startswith("update collectives:")]
