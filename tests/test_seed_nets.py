"""Seed 001's four networks: parameters, forward FLOP, per-layer backward/forward."""

from __future__ import annotations

import pytest

import xla_cost
from xla_cost.zoo import count_parameters
from tests import formulas as F

IMAGE = 224 * 224 * 3


def test_parameter_counts_exact():
    assert count_parameters("linear_net") == F.mlp_params(IMAGE) == 617_092_490
    assert count_parameters("one_net") == F.mlp_params(1)
    assert count_parameters("conv_net") == F.conv_net_params()
    assert count_parameters("deeper_conv_net", depth=3) == F.deeper_conv_net_params()
    # The shared conv_layer is one set of weights whatever the depth.
    assert count_parameters("deeper_conv_net") == F.deeper_conv_net_params()


def test_convolution_padding_convention():
    # conv1: 7 taps, stride 2, padding 3 over 224 -> 112 outputs; at the borders
    # o=0 misses 3 taps, o=1 one, o=111 two: 112*7 - 6 = 778 valid pairs.
    assert F.valid_pairs(224, 7, 2, 3) == 112 * 7 - 6


@pytest.mark.parametrize("batch", [3, 16])
def test_linear_net_forward(zoo_report, batch):
    report = zoo_report("linear_net", batch)
    expected = F.mlp_forward_total(batch, IMAGE)
    assert report.phases["forward"].flops == pytest.approx(expected, rel=5e-3)
    assert report.parameters == F.mlp_params(IMAGE)


@pytest.mark.parametrize("batch", [2, 8])
def test_one_net_forward(zoo_report, batch):
    report = zoo_report("one_net", batch)
    expected = F.mlp_forward_total(batch, 1)
    # XLA turns fc1's contraction of size 1 into a multiply: B*4096 FLOP instead
    # of the 2*B*4096 of the multiply-add convention.
    expected -= batch * 4096
    assert report.phases["forward"].flops == pytest.approx(expected, rel=5e-3)


@pytest.mark.parametrize("batch", [1, 4])
def test_conv_net_forward(zoo_report, batch):
    report = zoo_report("conv_net", batch)
    assert report.phases["forward"].flops == pytest.approx(
        F.conv_net_forward_total(batch), rel=5e-3
    )


@pytest.mark.parametrize("depth", [0, 3, 7])
def test_deeper_conv_net_forward(zoo_report, depth):
    report = zoo_report("deeper_conv_net", 2, depth=depth)
    assert report.phases["forward"].flops == pytest.approx(
        F.deeper_conv_net_forward_total(2, depth), rel=5e-3
    )


def test_deeper_conv_net_depth_0(zoo_report):
    # Seed 001's "0 intermediate layers": conv_layer is never called, so Flax
    # creates no parameters for it and there is no row for it.
    report = zoo_report("deeper_conv_net", 2, depth=0)
    assert report.parameters == F.deeper_conv_net_params(depth=0) == F.deeper_conv_net_params() - 32 * 32 * 9
    expected = F.deeper_conv_net_forward_layers(2, 0)
    assert expected.pop("conv_layer") == 0
    rows = {layer.path: layer for layer in report.layers}
    assert list(rows) == [*expected, xla_cost.REMAINDER]
    for path, flops in expected.items():
        assert rows[path].forward_flops == flops, path
    # the rows add up to every phase's jaxpr count
    p = report.phases
    assert sum(r.forward_flops for r in rows.values()) == p["forward"].jaxpr_flops
    assert sum(r.backward_flops for r in rows.values()) == p["grad"].jaxpr_flops - p["forward"].jaxpr_flops
    assert sum(r.update_flops for r in rows.values()) == p["update"].jaxpr_flops
    # first_layer 1:1 (no input gradient), convN and fc1 2:1, over the whole
    # forward pass: well below 2:1. The glue's backward (ReLU, max-pool, mean)
    # adds a few percent of the forward pass.
    ratio = (expected["first_layer"] + 2 * (expected["convN"] + expected["fc1"])) / F.deeper_conv_net_forward_total(2, 0)
    assert report.backward_to_forward == pytest.approx(ratio, abs=0.05)


@pytest.mark.parametrize(
    "name, batch, config, expected",
    [
        ("linear_net", 4, {}, F.mlp_forward_layers(4, IMAGE)),
        ("conv_net", 2, {}, F.conv_net_forward_layers(2)),
        ("deeper_conv_net", 2, {"depth": 3}, F.deeper_conv_net_forward_layers(2, 3)),
    ],
)
def test_layer_forward_flops_match_closed_form(zoo_report, name, batch, config, expected):
    report = zoo_report(name, batch, **config)
    rows = {layer.path: layer for layer in report.layers}
    for path, flops in expected.items():
        assert rows[path].forward_flops == flops, path
    assert [layer.path for layer in report.layers[:-1]] == list(expected)


@pytest.mark.parametrize(
    "name, batch, config, first, others",
    [
        ("linear_net", 4, {}, "fc1", ["fc2", "fc3"]),
        ("conv_net", 2, {}, "conv1", ["conv2", "fc1"]),
        ("deeper_conv_net", 2, {"depth": 3}, "first_layer", ["conv_layer", "convN", "fc1"]),
    ],
)
def test_first_layer_one_to_one_others_two_to_one(zoo_report, name, batch, config, first, others):
    # Seed 001: the first layer computes no input gradient (1:1); every other
    # layer computes the input gradient and the weight gradient (2:1).
    report = zoo_report(name, batch, **config)
    rows = {layer.path: layer for layer in report.layers}
    assert rows[first].backward_to_forward == pytest.approx(1.0, rel=0.05)
    for path in others:
        assert rows[path].backward_to_forward == pytest.approx(2.0, rel=0.05), path


@pytest.mark.parametrize(
    "name, config", [("linear_net", {}), ("one_net", {}), ("conv_net", {}), ("deeper_conv_net", {"depth": 3})]
)
def test_forward_plus_backward_is_grad(zoo_report, name, config):
    report = zoo_report(name, 2, **config)
    p = report.phases
    assert p["forward"].flops + p["backward"].flops == pytest.approx(p["grad"].flops, rel=0.01)
    # backward is grad - forward, so the identity above is exact by construction;
    # what is not: the train step is grad + update, compiled as one program.
    assert p["train_step"].flops == pytest.approx(p["grad"].flops + p["update"].flops, rel=0.01)


def test_layers_add_up_to_jaxpr_grad_total(zoo_report):
    report = zoo_report("conv_net", 2)
    total = sum(layer.forward_flops + layer.backward_flops for layer in report.layers)
    assert total == report.phases["grad"].jaxpr_flops
    assert report.layers[-1].path == xla_cost.REMAINDER


def test_batch_size_trends_of_seed_001(zoo_report):
    # LinearNet's weights sit in fc1 (ratio 1:1), OneNet's after it (2:1): as the
    # batch grows and the update's share shrinks, (backward+update)/forward tends
    # to 1 for LinearNet and to 2 for OneNet; small batches sit higher.
    small, large = zoo_report("linear_net", 1), zoo_report("linear_net", 64)
    assert small.backward_with_update_to_forward > large.backward_with_update_to_forward
    assert large.backward_to_forward == pytest.approx(1.0, abs=0.02)
    one = zoo_report("one_net", 512, per_layer=False)
    assert one.backward_to_forward == pytest.approx(2.0, abs=0.1)
