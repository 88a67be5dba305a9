"""Scanned layers are priced as the unrolled ones (issue 32's scan defect).

A scanned stack's predicted time per layer must not grow with the depth (the
defect: 0.0395 / 0.0512 / 0.075 s a layer at 10 / 20 / 40 scanned layers,
flat unrolled), must equal the unrolled stack's, and full recomputation must
never be predicted faster than none. Per-layer time is the slope of the step
time in the depth, ``(t(2L) - t(L)) / L``: what one more layer costs, the
embedding and the output layer cancelled. Checked on the CPU proxy's
program (priced from its totals) and on an H100's (kernel by kernel).
"""

from __future__ import annotations

import pytest

from xla_cost.runs.configs import RunConfig
from xla_cost.runs.scaling import predict

TINY = {"d_model": 128, "n_head": 4, "seq_len": 64, "vocab_size": 512}
DEPTHS = (4, 8, 16)


def _seconds(layers: int, scan: bool, remat: str = "none", target: str | None = None) -> float:
    run = RunConfig("gpt2-small", batch_size=2, config={**TINY, "n_layer": layers, "scan_layers": scan,
                                                         "remat": remat}, optimizer="sgd", target=target)
    return predict(run.canonical().run(cache=False), device="h100").prediction.seconds


@pytest.mark.parametrize("target", [None, "h100"])
def test_per_layer_time_of_a_scanned_stack_is_constant_and_equals_the_unrolled(target):
    scanned = {n: _seconds(n, True, target=target) for n in DEPTHS}
    unrolled = {n: _seconds(n, False, target=target) for n in DEPTHS}
    slopes = [(scanned[b] - scanned[a]) / (b - a) for a, b in zip(DEPTHS, DEPTHS[1:])]
    flat = [(unrolled[b] - unrolled[a]) / (b - a) for a, b in zip(DEPTHS, DEPTHS[1:])]
    assert slopes[1] == pytest.approx(slopes[0], rel=0.05)  # constant in depth: 4 -> 8 and 8 -> 16 alike
    for scan_slope, unrolled_slope in zip(slopes, flat):
        assert scan_slope == pytest.approx(unrolled_slope, rel=0.05)


@pytest.mark.parametrize("target", [None, "h100"])
def test_full_recomputation_is_never_predicted_faster(target):
    for layers in (4, 16):
        assert _seconds(layers, True, "full", target) >= _seconds(layers, True, "none", target)
