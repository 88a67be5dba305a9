"""A sharded target program's notes agree with each other (issue 49): a phase every device
runs whole (a replicated update) is explained by the table's "XLA x N / jaxpr" line and
not also called work the compiler adds (`xla_cost.analysis.costs.library_flops`)."""

from __future__ import annotations

from types import SimpleNamespace

from xla_cost.analysis.costs import library_flops

DEVICES = 4
PARAMS = 1_000_000
WHOLE = 13 * PARAMS  # Adam's update as XLA counts it: 13 FLOP a parameter (DESIGN.md), on every device


def _library_flops(value: int) -> str | None:
    counted = SimpleNamespace(total=SimpleNamespace(flops=WHOLE), unsupported={})
    compiled = SimpleNamespace(library_calls=(("a_custom_call", 1),), target="tpu-v5e:2x2",
                               costs=SimpleNamespace(source="cost_analysis"))
    found, source, note = library_flops("update", value, "xla", None, counted, compiled, DEVICES)
    assert found == value and source == "xla"  # a target's own count stands either way
    return note


def test_a_replicated_update_is_not_called_work_the_compiler_adds():
    # every device updates all the parameters: the per-device figure is the whole count, 4x its share
    assert _library_flops(WHOLE) is None
    # a per-device figure 10% over its share (WHOLE / 4) is the compiler's, and named so
    note = _library_flops(WHOLE // DEVICES * 110 // 100)
    assert note is not None and "+10.0% from the jaxpr count" in note and "its compiler adds work" in note
