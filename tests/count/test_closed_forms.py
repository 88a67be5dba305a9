"""The jaxpr counter against closed forms, phase by phase and row by row.

The headline `flops` of a loop-free phase is XLA's, so a wrong jaxpr rule does
not show there; these tests hold `jaxpr_flops` (and the per-layer columns, which
are counted from the jaxprs) to formulas written from the models' dimensions in
`tests/formulas.py`, exactly. They count without compiling (`counter="jaxpr"`):
fast, and the compiled figures are checked elsewhere (`tests/zoo/test_seed_nets.py`,
`tests/analysis/test_jaxpr_vs_xla.py`).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import xla_cost
from tests import formulas as F
from xla_cost.zoo import build_model, example_inputs

IMAGE = 224 * 224 * 3


def _jaxpr_report(name: str, batch: int, optimizer: str = "sgd", **config) -> xla_cost.Report:
    return xla_cost.analyze(
        build_model(name, **config), example_inputs(name, batch, **config),
        optimizer=optimizer, per_layer=True, counter="jaxpr",
    )


# (zoo name, batch, config, forward phase, backward phase, forward rows, backward rows)
SEED_NETS = [
    pytest.param(
        "linear_net", b, {},
        F.mlp_forward_phase(b, IMAGE), F.mlp_backward_phase(b, IMAGE),
        F.mlp_forward_layers(b, IMAGE), F.mlp_backward_layers(b, IMAGE),
        id=f"linear_net-b{b}",
    )
    for b in (1, 3)
] + [
    pytest.param(
        "one_net", b, {},
        F.mlp_forward_phase(b, 1), F.mlp_backward_phase(b, 1),
        # fc1 contracts over a single input: b*4096 multiplies + b*4096 bias adds
        {**F.mlp_forward_layers(b, 1), "fc1": 2 * b * 4096}, F.mlp_backward_layers(b, 1),
        id=f"one_net-b{b}",
    )
    for b in (1, 2)
] + [
    pytest.param(
        "conv_net", b, {"image_size": s},
        F.conv_net_forward_phase(b, s), F.conv_net_backward_phase(b, s),
        F.conv_net_forward_layers(b, s), F.conv_net_backward_layers(b, s),
        id=f"conv_net-b{b}-{s}px",
    )
    for b, s in ((1, 224), (2, 64), (3, 33))
] + [
    pytest.param(
        "deeper_conv_net", b, {"depth": d, "image_size": s},
        F.deeper_conv_net_forward_phase(b, d, s), F.deeper_conv_net_backward_phase(b, d, s),
        F.deeper_conv_net_forward_layers(b, d, s), F.deeper_conv_net_backward_layers(b, d, s),
        id=f"deeper_conv_net-b{b}-d{d}-{s}px",
    )
    for b, d, s in ((2, 3, 224), (1, 1, 64), (3, 4, 33))
]


@pytest.mark.parametrize("name, batch, config, forward, backward, forward_rows, backward_rows", SEED_NETS)
def test_seed_net_jaxpr_counts_are_the_closed_forms(
    name, batch, config, forward, backward, forward_rows, backward_rows
):
    report = _jaxpr_report(name, batch, **config)
    p = report.phases
    assert p["forward"].jaxpr_flops == forward
    assert p["backward"].jaxpr_flops == backward
    assert p["grad"].jaxpr_flops == forward + backward
    # The transcendentals: the loss's exp per logit and log per example only;
    # its backward reuses them.
    assert p["forward"].jaxpr_transcendentals == F.loss_transcendentals(batch, 10)
    assert p["backward"].jaxpr_transcendentals == 0
    # SGD: u = -lr * g (1), p + u (1) per parameter
    assert p["update"].jaxpr_flops == 2 * report.parameters
    # Without compiling, the headline is the jaxpr count.
    assert p["forward"].flops == forward and p["backward"].flops == backward
    rows = {row.path: row for row in report.layers}
    for path, flops in forward_rows.items():
        assert rows[path].forward_flops == flops, path
    for path, flops in backward_rows.items():
        assert rows[path].backward_flops == flops, path
    # SGD per layer: 2 FLOP per parameter of the row
    for path in forward_rows:
        assert rows[path].update_flops == 2 * rows[path].parameters, path


# --------------------------------------------------------------------------- a dense stack


class DenseStack(nn.Module):
    """Dense layers of the given widths with a ReLU between consecutive ones."""

    widths: tuple[int, ...]

    @nn.compact
    def __call__(self, x):
        for i, width in enumerate(self.widths[1:]):
            if i:
                x = nn.relu(x)
            x = nn.Dense(width, name=f"dense_{i}")(x)
        return x


@pytest.mark.parametrize("batch, widths", [(1, (12, 32, 5)), (4, (12, 48, 32, 7)), (9, (3, 1, 16, 10))])
def test_dense_stack_every_phase_and_row(batch, widths):
    report = xla_cost.analyze(
        DenseStack(widths), jax.ShapeDtypeStruct((batch, widths[0]), jnp.float32),
        optimizer="sgd", per_layer=True, counter="jaxpr",
    )
    layers = list(zip(widths[:-1], widths[1:]))
    hidden = sum(widths[1:-1])  # one ReLU per hidden feature
    classes = widths[-1]
    # dense: the contraction (2 per multiply-add, 1 for a length-1 contraction) + bias
    forward_rows = [F.contraction_flops(batch * n_out, n_in) + batch * n_out for n_in, n_out in layers]
    backward_rows = [
        F.dense_backward_flops(batch, n_in, n_out, first=(i == 0)) for i, (n_in, n_out) in enumerate(layers)
    ]
    forward = sum(forward_rows) + batch * hidden + F.loss_flops(batch, classes)
    backward = sum(backward_rows) + F.relu_backward_flops(batch * hidden) + F.loss_backward_flops(batch, classes)
    parameters = sum(n_in * n_out + n_out for n_in, n_out in layers)
    assert report.parameters == parameters
    p = report.phases
    assert p["forward"].jaxpr_flops == forward
    assert p["backward"].jaxpr_flops == backward
    assert p["update"].jaxpr_flops == 2 * parameters
    rows = {row.path: row for row in report.layers}
    assert list(rows) == [f"dense_{i}" for i in range(len(layers))] + [xla_cost.REMAINDER]
    for i, (n_in, n_out) in enumerate(layers):
        row = rows[f"dense_{i}"]
        assert row.forward_flops == forward_rows[i], i
        assert row.backward_flops == backward_rows[i], i
        assert row.parameters == n_in * n_out + n_out
        assert row.update_flops == 2 * row.parameters
    # the ReLUs (in the root module) and the loss are the remainder
    remainder = rows[xla_cost.REMAINDER]
    assert remainder.forward_flops == batch * hidden + F.loss_flops(batch, classes)
    assert remainder.backward_flops == F.relu_backward_flops(batch * hidden) + F.loss_backward_flops(batch, classes)


# --------------------------------------------------------------------------- convolutions


class ConvPair(nn.Module):
    """A first conv (its backward: weight gradient only) and a second, strided,
    asymmetrically padded, dilated or grouped one (input and weight gradients)."""

    kernel: int
    stride: int
    padding: tuple[int, int]
    dilation: int = 1
    groups: int = 1

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(8, (3, 3), padding=((1, 1), (1, 1)), use_bias=False, name="first")(x)
        x = nn.Conv(
            8, (self.kernel, self.kernel), strides=self.stride, padding=(self.padding, self.padding),
            kernel_dilation=self.dilation, feature_group_count=self.groups, use_bias=False,
            name="second",
        )(x)
        return jnp.sum(x, axis=(1, 2))


@pytest.mark.parametrize(
    "size, kernel, stride, padding, dilation, groups",
    [
        (9, 3, 2, (1, 1), 1, 1),
        (10, 4, 3, (2, 0), 1, 1),  # asymmetric padding, stride that skips the right border
        (11, 3, 1, (2, 2), 2, 1),  # dilated kernel: taps 2 apart
        (8, 3, 1, (1, 1), 1, 4),  # 4 groups of 2 channels
        (7, 7, 2, (3, 3), 1, 1),  # the seed nets' 7x7/2, padding 3
    ],
)
def test_conv_forward_and_backward_count_valid_taps(size, kernel, stride, padding, dilation, groups):
    b = 2
    report = xla_cost.analyze(
        ConvPair(kernel, stride, padding, dilation, groups),
        jax.ShapeDtypeStruct((b, size, size, 3), jnp.float32),
        optimizer="sgd", per_layer=True, counter="jaxpr",
    )
    rows = {row.path: row for row in report.layers}
    # first: 3x3, stride 1, padding 1, 3 -> 8 channels
    first = 2 * b * 3 * 8 * F.valid_taps(size, 3, 1, (1, 1)) ** 2
    # second: 8 -> 8 channels in `groups` groups: (8 / groups) inputs per output
    second = 2 * b * (8 // groups) * 8 * F.valid_taps(size, kernel, stride, padding, dilation) ** 2
    assert rows["first"].forward_flops == first
    assert rows["second"].forward_flops == second
    assert rows["first"].backward_flops == F.conv_backward_flops(first, first=True)
    assert rows["second"].backward_flops == F.conv_backward_flops(second)
