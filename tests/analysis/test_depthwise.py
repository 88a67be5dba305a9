"""A depthwise convolution's weight gradient is a convolution with ``batch_group_count``
equal to the channels; XLA's CPU compiler (jax 0.10.2) makes it dense, the channels
times its products. A fourth new user's MobileNet-style block read backward/forward
90.4 (a 3 x 3 depthwise convolution of 96 channels: backward 78.26 MFLOP where the
model's is 0.82). The jaxpr count now stands where XLA's figure carries that
expansion (`xla_cost.analysis.costs.densified_flops`), and a note says so; grouped
convolutions of several channels a group, which the CPU keeps grouped, are XLA's.

A multiply-add is 2 FLOP; a 3 x 3 convolution with SAME padding on a side of S has
3 S - 2 valid taps a dimension (the kernel taps on the padding are not counted).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import xla_cost

B, S, C, K = 2, 16, 96, 3  # batch, image side, channels, kernel side
TAPS = (K * S - 2) ** 2  # valid taps of a 3 x 3 SAME convolution over an S x S image, both dimensions


class Grouped(nn.Module):
    groups: int

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(C, (K, K), padding="SAME", feature_group_count=self.groups, use_bias=False, name="conv")(x)
        return nn.Dense(10, name="head")(x.mean(axis=(1, 2)))


def _analysed(groups):
    return xla_cost.analyze(Grouped(groups), jax.ShapeDtypeStruct((B, S, S, C), jnp.float32), optimizer="sgd",
                            per_layer=True, compilation_cache=False)


def test_a_depthwise_convolutions_backward_is_the_models():
    report = _analysed(C)
    conv = {r.path: r for r in report.layers}["conv"]
    per_group = C // C  # input channels a group
    assert conv.forward_flops == 2 * B * C * per_group * TAPS
    assert conv.backward_flops == 2 * B * C * per_group * TAPS  # its weight gradient (the first layer: no input's)
    grad = report.phases["grad"]
    assert grad.flops == grad.jaxpr_flops
    said = [n for n in report.notes if "made the grouped products (a depthwise" in n]
    if grad.xla_flops - grad.jaxpr_flops > (C - 1) * conv.backward_flops / 2:  # the CPU made it dense
        assert said and grad.sources["flops"] == "jaxpr"
    else:  # a compiler that keeps it grouped: XLA's figure, nothing said
        assert not said
    assert report.backward_to_forward < 2
    if said:  # backward = grad - forward from one counter: the forward's FLOP are the jaxpr's too
        forward, backward = report.phases["forward"], report.phases["backward"]
        assert forward.sources["flops"] == "jaxpr" and forward.flops == forward.jaxpr_flops
        assert backward.flops == backward.jaxpr_flops == grad.jaxpr_flops - forward.jaxpr_flops
        assert any(n.startswith("forward: flops from the jaxpr") for n in report.notes)


@pytest.mark.parametrize("groups", [48, 4])
def test_grouped_convolutions_the_cpu_keeps_grouped_are_xlas(groups):
    report = _analysed(groups)
    grad = report.phases["grad"]
    assert grad.sources["flops"] == "xla"
    assert not [n for n in report.notes if "made the grouped products (a depthwise" in n]
    conv = {r.path: r for r in report.layers}["conv"]
    assert conv.forward_flops == 2 * B * C * (C // groups) * TAPS


def _densified_note(true, expansion, value):
    from types import SimpleNamespace

    from xla_cost.analysis.costs import densified_flops
    from xla_cost.count.registry import Cost

    counted = SimpleNamespace(total=Cost(flops=true), dense_expansion=Cost(flops=expansion), unsupported={})
    flops, source, note = densified_flops("grad", value, "xla", None, counted)
    assert (flops, source) == (true, "jaxpr")  # the model's count stands either way
    return note


def test_the_dense_forms_note_gives_its_ratio_to_the_digits_that_tell_it_from_one():
    # XLA's figure the jaxpr's plus the whole dense form, 4.6% more: 1.046x, not "1.0x"
    true, expansion = 1_000_000, 46_000
    note = _densified_note(true, expansion, true + expansion)
    assert f"are {(true + expansion) / true:.3f}x the jaxpr count" in note and "1.0x" not in note
    assert "made the grouped products" in note and "at most" not in note


def test_a_difference_larger_than_the_dense_form_is_not_all_put_on_it():
    # AlgoPerf's Conformer: XLA's figure 1,785,877 FLOP above the jaxpr's, the dense form 190,464 of it at most;
    # here 400,000 above, the form 100,000: a quarter of it at most, the other 300,000 or more XLA's own
    true, expansion, gap = 1_000_000, 100_000, 400_000
    note = _densified_note(true, expansion, true + gap)
    assert f"{(true + gap) / true:.2f}x the jaxpr count, {gap:,} more" in note
    assert f"of which that form is {expansion / gap:.0%} at most; the rest, {gap - expansion:,} FLOP or more" in note
    assert "made the grouped products" not in note
    # the form most of the difference (a 96-channel depthwise convolution's): made dense, the other part said
    gap = 120_000
    note = _densified_note(true, expansion, true + gap)
    assert "made the grouped products" in note
    assert f"{gap:,} more: {expansion:,} the dense form's, the other {gap - expansion:,} XLA's own" in note
