"""Figures' lines: every line drawn and told apart, however many a figure has."""

from __future__ import annotations

from xla_cost.present.figures import LINE_COLORS, LINE_STYLES, line_style


def test_every_line_has_its_own_colour_and_dashes():
    # the optimizers' share figure has a line per optimizer known by name (11 with muon), one more than
    # there are colours: zipped with the colours, the eleventh was left out of the figure
    lines = len(LINE_COLORS) * len(LINE_STYLES)
    pairs = [(s["color"], s["linestyle"]) for s in map(line_style, range(lines))]
    assert len(set(pairs)) == lines
    assert line_style(len(LINE_COLORS))["color"] == LINE_COLORS[0]
    assert line_style(len(LINE_COLORS))["linestyle"] != line_style(0)["linestyle"]

