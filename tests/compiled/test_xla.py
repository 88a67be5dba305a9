"""The XLA adapter: every odd shape of cost_analysis() is unknown, never 0."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost.compiled import xla


def test_plain_dict():
    costs = xla.normalize_cost_analysis(
        {"flops": 10.0, "transcendentals": 2.0, "bytes accessed": 48.0, "utilization0{}": 1.0}
    )
    assert (costs.flops, costs.transcendentals, costs.bytes_accessed) == (10, 2, 48)
    assert costs.unknown_reasons == ()


def test_single_program_list_is_read():
    # jax < 0.4.30 returned [dict] for one program.
    assert xla.normalize_cost_analysis([{"flops": 4.0, "transcendentals": 0.0, "bytes accessed": 8.0}]).flops == 4


@pytest.mark.parametrize(
    "raw",
    [None, [], [{"flops": 1.0}, {"flops": 2.0}], "flops", 3.0],
)
def test_unusable_analysis_is_unknown(raw):
    costs = xla.normalize_cost_analysis(raw)
    assert costs.flops is None and costs.transcendentals is None and costs.bytes_accessed is None
    assert costs.unknown_reasons


def test_missing_key_and_negative_value_are_unknown():
    costs = xla.normalize_cost_analysis({"flops": -1.0, "bytes accessed": 16.0})
    assert costs.flops is None  # a GPU custom call reports -1
    assert costs.transcendentals is None  # key absent
    assert costs.bytes_accessed == 16
    assert len(costs.unknown_reasons) == 2


def test_memory_analysis_missing():
    memory = xla.normalize_memory_analysis(None)
    assert memory == xla.XlaMemory(None, None, None)


def test_lone_tanh_has_no_flops_key():
    # XLA omits the flops key for a program without FLOP: unknown from XLA.
    compiled = xla.compile_phase(jnp.tanh, (jax.ShapeDtypeStruct((8,), jnp.float32),))
    assert compiled.costs.flops is None
    assert compiled.costs.transcendentals == 8  # one per element


def test_backend_without_cost_analysis(monkeypatch):
    from xla_cost.zoo import build_model

    monkeypatch.setattr(jax.stages.Compiled, "cost_analysis", lambda self: None)
    with pytest.raises(xla_cost.CostAnalysisUnavailableError, match="cost analysis"):
        xla_cost.analyze(
            build_model("one_net"), jax.ShapeDtypeStruct((2, 1), jnp.float32), optimizer="sgd"
        )


def test_missing_key_falls_back_to_complete_jaxpr_count(zoo_report):
    # SGD's update has no transcendentals; XLA omits the key; the jaxpr count
    # (complete: every primitive has a rule) stands in and says so.
    report = zoo_report("one_net", 2, per_layer=False)
    update = report.phases["update"]
    assert update.transcendentals == 0
    assert update.sources["transcendentals"] == "jaxpr"
    assert any("update: XLA gave no transcendentals" in n for n in report.notes)


def test_library_call_bytes_are_read_where_library_calls_are(monkeypatch):
    gemm = "\n".join([
        "HloModule jit_f",
        "ENTRY %main {",
        "  %p = f32[4,6]{1,0} parameter(0)",
        "  %w = f32[6,5]{1,0} parameter(1)",
        '  ROOT %a = f32[4,5]{1,0} custom-call(%p, %w), custom_call_target="__cublas$gemm"',
        "}",
    ])
    monkeypatch.setattr(jax.stages.Compiled, "as_text", lambda self: gemm)
    monkeypatch.setattr(xla, "backend_name", lambda: "gpu")
    found = xla.compile_phase(lambda a: a @ a.T, (jax.ShapeDtypeStruct((4, 6), jnp.float32),))
    assert found.library_calls == (("__cublas$gemm", 1),)
    assert found.library_bytes == (24 + 30 + 20) * 4  # p and w read, the result written, float32
    monkeypatch.setattr(xla, "backend_name", lambda: "cpu")
    assert xla.compile_phase(lambda a: a * 2, (jax.ShapeDtypeStruct((4,), jnp.float32),)).library_bytes is None
