"""Unknown is not zero, end to end: a model with a primitive that has no cost rule.

`MysteryNet` runs a primitive of its own (an abstract evaluation and an XLA
lowering, no rule in `xla_cost.count.rules`) on its inputs before a Dense layer. The
phases whose program contains it (forward, grad, and what is derived from them)
have unknown FLOP: `flops is None`, source ``unknown``, the primitive listed in
`Report.unsupported`, never the counted part (the Dense layer and the loss)
passed off as the whole. The update does not contain it and stays known.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.extend.core import Primitive
from jax.interpreters import mlir

import xla_cost
from tests import formulas as F
from xla_cost.errors import InputError

# A primitive with no cost rule, registered nowhere in xla_cost: doubling, as
# far as XLA is concerned.
MYSTERY = Primitive("xla_cost_test_mystery")
MYSTERY.def_impl(lambda x: 2.0 * x)
MYSTERY.def_abstract_eval(lambda x: x)
mlir.register_lowering(MYSTERY, mlir.lower_fun(lambda x: 2.0 * x, multiple_results=False))

B, D_IN, D_OUT = 4, 6, 5
INPUTS = jax.ShapeDtypeStruct((B, D_IN), jnp.float32)


class MysteryNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(D_OUT, name="fc")(MYSTERY.bind(x))


def total(outputs, targets):
    """The loss: a plain sum (B*D_OUT - 1 adds), so that XLA's count is exact too."""
    del targets
    return jnp.sum(outputs)


def _analyze(**kwargs) -> xla_cost.Report:
    return xla_cost.analyze(MysteryNet(), INPUTS, optimizer="sgd", loss=total, **kwargs)


# the counted part of the forward pass: Dense (matmul + bias) and the sum
COUNTED_FORWARD = F.dense_flops(B, D_IN, D_OUT) + B * D_OUT - 1


# The phases that run the primitive once; the update does not run it.
UNKNOWN = ("forward", "backward", "grad", "train_step")


def _assert_unknown_where_the_primitive_runs(report: xla_cost.Report) -> None:
    assert report.unsupported == {MYSTERY.name: 1}
    for phase in UNKNOWN:
        p = report.phases[phase]
        assert p.flops is None, phase
        assert p.sources["flops"] == "unknown", phase
    # the counted part is there, under its own name, and is not the headline
    forward = report.phases["forward"]
    assert forward.jaxpr_flops == COUNTED_FORWARD
    # the update has no unknown primitive: known, SGD's 2 FLOP per parameter
    update = report.phases["update"]
    parameters = D_IN * D_OUT + D_OUT
    assert report.parameters == parameters
    assert update.flops == 2 * parameters
    assert update.sources["flops"] != "unknown"
    # ratios of an unknown are unknown
    assert report.backward_to_forward is None
    data = report.to_dict()
    assert data["flops"]["forward"] is None and data["unsupported"] == {MYSTERY.name: 1}


def test_unknown_primitive_without_compiling():
    report = _analyze(counter="jaxpr")
    _assert_unknown_where_the_primitive_runs(report)


def test_unknown_primitive_when_xla_has_no_figure_either(monkeypatch):
    # Compiled, XLA would count the lowering (2x per element). Where XLA has no
    # figure (a GPU custom call reports -1), the jaxpr count cannot stand in for
    # a program with an unknown primitive: unknown, not the counted part.
    original = jax.stages.Compiled.cost_analysis

    def custom_call_minus_one(self):
        raw = original(self)
        raw = dict(raw[0] if isinstance(raw, list) else raw)
        raw["flops"] = -1.0
        return raw

    monkeypatch.setattr(jax.stages.Compiled, "cost_analysis", custom_call_minus_one)
    report = _analyze()
    _assert_unknown_where_the_primitive_runs(report)
    for phase in ("forward", "grad"):
        assert report.phases[phase].xla_flops is None, phase
    # the update's program is complete: its jaxpr count stands in, and says so
    assert report.phases["update"].sources["flops"] == "jaxpr"


def test_unknown_primitive_compiled_with_xla_figure_is_xla():
    # With XLA's figure the headline is XLA's (it compiled the lowering): known,
    # and the primitive is still listed as one the jaxpr could not count.
    report = _analyze()
    assert report.unsupported == {MYSTERY.name: 1}
    forward = report.phases["forward"]
    assert forward.sources["flops"] == "xla" and forward.flops == forward.xla_flops
    # XLA's figure is the counted part and the lowering's multiply per input element
    assert forward.jaxpr_flops == COUNTED_FORWARD
    assert forward.xla_flops == COUNTED_FORWARD + B * D_IN


class PlainNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(D_OUT, name="fc")(x)


GEMM_LINE = '  %gemm = f32[4,5]{1,0} custom-call(f32[4,6]{1,0} %p), custom_call_target="__cublas$gemm"\n'


def _as_a_gpu(monkeypatch, kept: float) -> None:
    """Compiles as if for a GPU whose cost analysis counted ``kept`` of the FLOP
    and whose HLO hands a gemm to cuBLAS (jax issues 16008, 20184, 22249)."""
    original_costs, original_text = jax.stages.Compiled.cost_analysis, jax.stages.Compiled.as_text

    def partial_costs(self):
        raw = original_costs(self)
        raw = dict(raw[0] if isinstance(raw, list) else raw)
        raw["flops"] = raw.get("flops", 0.0) * kept
        return raw

    monkeypatch.setattr(jax.stages.Compiled, "cost_analysis", partial_costs)
    monkeypatch.setattr(jax.stages.Compiled, "as_text", lambda self: (original_text(self) or "") + GEMM_LINE)
    monkeypatch.setattr(xla_cost.compiled.xla, "backend_name", lambda: "gpu")


def test_library_calls_that_xla_leaves_out_fall_back_to_the_jaxpr(monkeypatch):
    _as_a_gpu(monkeypatch, kept=0.01)
    report = xla_cost.analyze(PlainNet(), INPUTS, optimizer="sgd", loss=total)
    forward = report.phases["forward"]
    # Dense (matmul + bias) and the sum: the jaxpr's count, not XLA's 1%
    assert forward.flops == F.dense_flops(B, D_IN, D_OUT) + B * D_OUT - 1
    assert forward.sources["flops"] == "jaxpr"
    assert forward.xla_flops == round(0.01 * forward.flops)
    assert any("__cublas$gemm" in n and "leave out" in n for n in report.notes)


def test_library_calls_that_xla_counts_keep_xlas_figure(monkeypatch):
    _as_a_gpu(monkeypatch, kept=1.0)
    report = xla_cost.analyze(PlainNet(), INPUTS, optimizer="sgd", loss=total)
    assert report.phases["forward"].sources["flops"] == "xla"
    assert not any("leave out" in n for n in report.notes)


def test_library_calls_with_an_unknown_primitive_are_unknown(monkeypatch):
    _as_a_gpu(monkeypatch, kept=0.01)
    report = _analyze()
    forward = report.phases["forward"]
    assert forward.flops is None and forward.sources["flops"] == "unknown"
    assert any("whose FLOP XLA's analysis leaves out" in n for n in report.notes)


# ------------------------------------------------- a kernel the CPU cannot lower


def _add_one_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


class PallasNet(nn.Module):
    """A Dense layer after a Pallas kernel written for an accelerator (no ``interpret=True``)."""

    @nn.compact
    def __call__(self, x):
        y = pl.pallas_call(_add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        return nn.Dense(D_OUT, name="fc")(y)


def test_a_pallas_kernel_the_cpu_cannot_lower_is_refused_in_one_line_and_the_jaxpr_counts_around_it():
    with pytest.raises(InputError) as refused:  # was jax's ValueError from deep in the lowering
        xla_cost.analyze(PallasNet(), INPUTS, loss=total)
    message = str(refused.value)
    assert "\n" not in message and "Pallas kernel (pallas_call)" in message and "counter='jaxpr'" in message
    # the fix it names works: the pallas_call is unknown (never 0), the Dense layer after it still counted
    report = xla_cost.analyze(PallasNet(), INPUTS, loss=total, counter="jaxpr")
    assert report.unsupported.get("pallas_call") == 1 and report.phases["forward"].flops is None
