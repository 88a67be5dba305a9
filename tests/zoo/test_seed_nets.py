"""Seed 001's four networks: parameters, forward FLOP, per-layer backward/forward."""

from __future__ import annotations

import pytest

import xla_cost
from xla_cost.zoo import count_parameters
from tests import formulas as F

# xla_cost's caches on, shared with the other modules that opt in (tests/conftest.py): the zoo programs
# this module analyses again are read back, not compiled again.
pytestmark = pytest.mark.usefixtures("module_caches")


IMAGE = 224 * 224 * 3

# XLA's compiled count (the headline) against the closed forms. The forward
# phase: XLA's count of the loss and pooling glue differs from the jaxpr's by a
# few FLOP per example (LinearNet -52, OneNet +9, ConvNet +12, DeeperConvNet
# -20..+12): at most 8.5e-6 of the phase. The backward phase: XLA's fusion
# computes ReLU masks and other small producers once per consumer; measured
# (XLA - closed form) / closed form: LinearNet 3e-6 (2e-5 at batch 1), ConvNet
# 1.1e-3, DeeperConvNet 2.4e-4..5.3e-4, OneNet 3.9e-3 (its 4096 hidden units
# per example). The jaxpr counts equal the closed forms exactly
# (tests/count/test_closed_forms.py).
XLA_FORWARD_REL = 1e-5
XLA_BACKWARD_REL = 5e-3


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


def _assert_forward(report, expected):
    forward = report.phases["forward"]
    assert forward.jaxpr_flops == expected
    assert forward.flops == pytest.approx(expected, rel=XLA_FORWARD_REL)


@pytest.mark.parametrize("batch", [3, 16])
def test_linear_net_forward(zoo_report, batch):
    report = zoo_report("linear_net", batch)
    # layers, ReLUs and the loss (F.mlp_forward_phase)
    _assert_forward(report, F.mlp_forward_phase(batch, IMAGE))
    assert report.parameters == F.mlp_params(IMAGE)


@pytest.mark.parametrize("batch", [2, 8])
def test_one_net_forward(zoo_report, batch):
    report = zoo_report("one_net", batch)
    # XLA turns fc1's contraction of size 1 into a multiply: B*4096 FLOP instead
    # of the 2*B*4096 of the multiply-add convention (F.mlp_forward_phase).
    expected = F.mlp_forward_phase(batch, 1)
    assert expected == F.mlp_forward_total(batch, 1) - batch * 4096 + F.loss_flops(batch, 10)
    _assert_forward(report, expected)


@pytest.mark.parametrize("batch", [1, 4])
def test_conv_net_forward(zoo_report, batch):
    _assert_forward(zoo_report("conv_net", batch), F.conv_net_forward_phase(batch))


@pytest.mark.parametrize("depth", [0, 3, 7])
def test_deeper_conv_net_forward(zoo_report, depth):
    _assert_forward(zoo_report("deeper_conv_net", 2, depth=depth), F.deeper_conv_net_forward_phase(2, depth))


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
    # and the loss's are in the closed form too.
    backward = F.deeper_conv_net_backward_phase(2, 0)
    forward = F.deeper_conv_net_forward_phase(2, 0)
    assert p["backward"].jaxpr_flops == backward
    # XLA's backward is 2.4e-4 above the closed form (XLA_BACKWARD_REL)
    assert report.backward_to_forward == pytest.approx(backward / forward, rel=XLA_BACKWARD_REL)


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
    "name, batch, config, forward, backward",
    [
        ("linear_net", 4, {}, F.mlp_forward_layers(4, IMAGE), F.mlp_backward_layers(4, IMAGE)),
        ("conv_net", 2, {}, F.conv_net_forward_layers(2), F.conv_net_backward_layers(2)),
        (
            "deeper_conv_net", 2, {"depth": 3},
            F.deeper_conv_net_forward_layers(2, 3), F.deeper_conv_net_backward_layers(2, 3),
        ),
    ],
)
def test_first_layer_one_to_one_others_two_to_one(zoo_report, name, batch, config, forward, backward):
    # Seed 001: the first layer computes no input gradient (1:1); every other
    # layer computes the input gradient and the weight gradient (2:1). Exactly:
    # a dense layer's bias costs B*out forward and (B-1)*out backward, a shared
    # conv kernel adds the sum of its weight gradients (F.*_backward_layers).
    report = zoo_report(name, batch, **config)
    rows = {layer.path: layer for layer in report.layers}
    for path in forward:
        assert rows[path].backward_flops == backward[path], path
        assert rows[path].backward_to_forward == backward[path] / forward[path], path
    # The closed forms are the seed's 1:1 and 2:1 up to the bias terms (at most
    # 1/128 of a layer: fc1 of ConvNet, 64 -> 10) and the shared kernel's sum.
    first, *others = list(forward)
    assert backward[first] / forward[first] == pytest.approx(1.0, rel=1e-3)
    for path in others:
        assert backward[path] / forward[path] == pytest.approx(2.0, rel=1e-2), path


@pytest.mark.parametrize(
    "name, config", [("linear_net", {}), ("one_net", {}), ("conv_net", {}), ("deeper_conv_net", {"depth": 3})]
)
def test_forward_plus_backward_is_grad(zoo_report, name, config):
    report = zoo_report(name, 2, **config)
    p = report.phases
    # backward is defined as grad - forward; what can fail is its value: the
    # closed form of the gradient computation (tests/formulas.py).
    expected = {
        "linear_net": F.mlp_backward_phase(2, IMAGE),
        "one_net": F.mlp_backward_phase(2, 1),
        "conv_net": F.conv_net_backward_phase(2),
        "deeper_conv_net": F.deeper_conv_net_backward_phase(2, config.get("depth", 0)),
    }[name]
    assert p["backward"].jaxpr_flops == expected
    assert p["backward"].flops == pytest.approx(expected, rel=XLA_BACKWARD_REL)
    # the train step is grad + update, compiled as one program.
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
    def ratios(b, n_in):
        forward, backward = F.mlp_forward_phase(b, n_in), F.mlp_backward_phase(b, n_in)
        update = 2 * F.mlp_params(n_in)  # SGD
        return backward / forward, (backward + update) / forward

    small, large = zoo_report("linear_net", 1), zoo_report("linear_net", 64)
    one = zoo_report("one_net", 512, per_layer=False)
    for report, (b, n_in) in ((small, (1, IMAGE)), (large, (64, IMAGE)), (one, (512, 1))):
        backward, with_update = ratios(b, n_in)
        # XLA's backward: 2e-5 (LinearNet) and 3.9e-3 (OneNet) above the closed form
        assert report.backward_to_forward == pytest.approx(backward, rel=XLA_BACKWARD_REL)
        assert report.backward_with_update_to_forward == pytest.approx(with_update, rel=XLA_BACKWARD_REL)
    # batch 1: fc1's weight gradient is a contraction of length 1 (1 FLOP per
    # weight against 2 in the forward pass): backward/forward 0.50
    assert ratios(1, IMAGE)[0] == pytest.approx(0.5, abs=1e-3)
    # batch 1 with the update (2 FLOP per parameter) sits at 1.5, batch 64 near 1
    assert ratios(1, IMAGE)[1] > ratios(64, IMAGE)[1]
    assert ratios(64, IMAGE)[0] == pytest.approx(1.0, abs=1e-3)
    assert ratios(512, 1)[0] == pytest.approx(2.0, abs=5e-3)
