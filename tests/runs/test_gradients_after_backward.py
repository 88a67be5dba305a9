"""A data-parallel gradient all-reduce after the backward pass, in the framework's precision (issue 51).

Megatron-LM of 2019 all-reduced its gradients after the backward pass
(pretrain_gpt2.py lines 283-299 at a0368ddf: ``optimizer.backward``, then
``model.allreduce_params``; its hooks commented out, model/distributed.py
lines 68-73), in the model's float16 (``--fp32-allreduce`` off by default,
arguments.py line 79). `Layout.overlap_gradients` False exposes it, one flattened buffer;
`Layout.gradient_bytes` sizes the all-reduce at that many bytes a parameter.
A two-layer GPT-2 counted from its jaxpr (nothing compiled), priced as a bound.
"""

from __future__ import annotations

import pytest

from xla_cost.runs.configs import RunConfig
from xla_cost.runs.scaling import predict
from xla_cost.runs.step_communication import PIECES
from xla_cost.timemodel.hardware import Hardware
from xla_cost.timemodel.schedule import Layout

TINY = {"n_layer": 2, "d_model": 64, "n_head": 4, "seq_len": 32, "vocab_size": 256}
REPLICAS, F32, F16 = 8, 4, 2


@pytest.fixture(scope="module")
def report():
    return RunConfig("gpt2-small", 2, TINY, counter="jaxpr").canonical().run()


def test_gradients_reduced_after_the_backward_pass_are_exposed_whole(report):
    slow = Hardware("v100-32gb", mfu=1e-5, bucket_bytes=0)  # a backward pass long enough to hide them all
    behind = predict(report, slow, Layout(data=REPLICAS))
    after = predict(report, slow, Layout(data=REPLICAS, overlap_gradients=False))
    pieces = behind.collectives[-PIECES:]
    # behind the backward pass: only the last of PIECES equal pieces, made as it ends, runs past it
    assert {t.nbytes for t in pieces} == {F32 * report.parameters // PIECES}
    assert behind.parts["gradients"] == pytest.approx(pieces[-1].seconds, rel=1e-9)
    # after it: one flattened buffer of every parameter's gradient (model/distributed.py lines 40-65), exposed
    whole = after.collectives[-1]
    assert whole.nbytes == F32 * report.parameters and not any(t.nbytes == whole.nbytes // PIECES
                                                               for t in after.collectives)
    reduced = whole.seconds
    assert reduced > 0 and after.parts["gradients"] == pytest.approx(reduced, rel=1e-12)
    assert after.prediction.seconds == pytest.approx(behind.prediction.seconds - behind.parts["gradients"] + reduced)
    assert any("after the backward pass" in note for note in after.notes)


def test_gradients_all_reduced_in_float16_move_two_bytes_a_parameter(report):
    bound = Hardware("v100-32gb", mfu=1.0, bucket_bytes=0)
    own = predict(report, bound, Layout(data=REPLICAS))
    half = predict(report, bound, Layout(data=REPLICAS, gradient_bytes=F16))
    # the parameters' own float32 bytes, and float16's, each in PIECES pieces
    assert {t.nbytes for t in own.collectives[-PIECES:]} == {F32 * report.parameters // PIECES}
    assert {t.nbytes for t in half.collectives[-PIECES:]} == {F16 * report.parameters // PIECES}
