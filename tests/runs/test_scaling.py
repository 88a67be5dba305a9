"""The scaling curve and training estimates priced as bounds (`Hardware.bound()`:
compute at peak, nothing hidden, every collective on a flat ring): the old
roofline model, whose closed forms hold exactly.

Expected values come from the closed forms of the cost model (roofline, ring and
halving-doubling all-reduce) written out here, with the H100 datasheet's figures,
the gradient bytes from conv_net's parameter count (tests/formulas.py), and the
FLOP and bytes of the analyses themselves (train-step FLOP / batch for an
estimate's FLOP per sample, from an analysis of its own). Predictions, meshes
with pipelines and the command line: tests/runs/test_estimate.py.
"""

from __future__ import annotations

import jax
import pytest

from xla_cost.errors import InputError
from xla_cost.timemodel.hardware import Hardware
from xla_cost.runs import estimates, scaling

from tests.formulas import conv_net_params

# The curve's points, the strong-scaling curve's 4-device point and the estimate's one-device step are
# the same programs: each compiled once in the module, read back after (tests/conftest.py).
pytestmark = [
    pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 simulated devices (tests/conftest.py)"),
    pytest.mark.usefixtures("module_caches"),
]

# NVIDIA H100 datasheet, SXM5: TF32 494.7 TFLOPS dense (XLA's float32 matmuls on H100),
# HBM3 3.35 TB/s; NVLink 4: 900 GB/s both directions, 450 GB/s each way; 1 us per hop assumed
H100_TF32, H100_HBM, NVLINK_B, NVLINK_ALPHA = 494.7e12, 3.35e12, 900e9 / 2, 1e-6
F32 = 4  # bytes


def _ring_all_reduce(nbytes: int, n: int) -> float:
    # 2 (n-1)/n S/B + 2 (n-1) alpha on NVLink 4 (Patarasuk and Yuan 2009)
    return 2 * (n - 1) / n * nbytes / NVLINK_B + 2 * (n - 1) * NVLINK_ALPHA


@pytest.fixture(scope="module")
def curve(tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "results.sqlite"
    _STORE[:] = [str(store)]
    return scaling.scaling("conv_net", [1, 2, 4], batch_size=2, device="h100", bound=True, store=str(store))


def _roofline(costs) -> float:
    # max(FLOP / peak, bytes / bandwidth) of one phase at the datasheet's peaks (MFU 1)
    return max(costs.flops / H100_TF32, costs.bytes_accessed / H100_HBM)


def test_each_point_is_the_roofline_plus_the_ring_all_reduce(curve):
    one = _report(curve, 1)  # the one-device program: every point's per-device work (2 samples a device)
    for step in curve.steps:
        report = _report(curve, step.devices)  # the analysis behind the point
        flops, moved = report.phases["train_step"].flops, report.phases["train_step"].bytes_accessed
        assert (step.flops, step.bytes_accessed) == (flops, moved)
        # the roofline of the backward pass (grad) and of the update, of the same per-device work
        # compiled on one device: the sharded compile fuses otherwise, no property of the devices
        compute = _roofline(one.phases["grad"]) + _roofline(one.phases["update"])
        assert step.prediction.compute_seconds == pytest.approx(compute, rel=1e-12)
        # data parallel: one ring all-reduce over the K devices of the gradients of every
        # parameter and of the mean loss, float32, per step
        k = step.devices
        reduced = F32 * conv_net_params() + F32 if k > 1 else 0
        comm_s = _ring_all_reduce(reduced, k) if k > 1 else 0.0
        assert step.communication_bytes == reduced
        assert step.prediction.communication_seconds == pytest.approx(comm_s, rel=1e-12)
        # no overlap by default: the step is compute plus all of the communication
        assert step.prediction.seconds == pytest.approx(compute + comm_s, rel=1e-12)
    assert curve.steps[0].communication_bytes == 0  # one device talks to no one


def test_all_reduce_time_is_the_ring_formula(curve):
    step = curve.steps[-1]  # 4 devices
    reduces = [t for t in step.collectives if t.kind == "all-reduce" and t.group_size == 4]
    assert reduces, step.collectives  # data parallel: the gradients are all-reduced
    assert sum(t.nbytes * t.executions for t in reduces) == F32 * conv_net_params() + F32
    for t in reduces:
        assert t.link == "nvlink4"  # 4 devices fit in one 8-GPU node
        assert t.seconds == pytest.approx(t.executions * _ring_all_reduce(t.nbytes, 4), rel=1e-12)


def test_speedup_and_efficiency(curve):
    first = curve.steps[0]
    assert first.devices == 1
    for step, point in zip(curve.steps, curve.points):
        throughput = step.global_batch / step.prediction.seconds
        speedup = throughput / (first.global_batch / first.prediction.seconds)
        assert point.speedup == pytest.approx(speedup, rel=1e-12)
        # efficiency: the speed-up over the linear one, devices / the first point's devices
        assert point.efficiency == pytest.approx(speedup / (step.devices / first.devices), rel=1e-12)
        assert point.efficiency <= 1  # the same per-device work at every count, plus communication
    assert list(curve.to_frame()["devices"]) == [1, 2, 4]
    assert curve.to_markdown().count("\n|") >= 4
    assert "a bound: compute at 100% of peak" in curve.describe()
    assert curve.to_dict()["priced_as"] == "bound" and curve.to_dict()["calibration"] is None


def test_efficiency_of_a_curve_that_starts_at_two_devices(curve):
    # the same analyses (read back from the curve's store), priced from 2 devices on
    later = scaling.scaling("conv_net", [2, 4], batch_size=2, device="h100", bound=True, store=_STORE[0])
    two, four = later.steps
    assert (two.prediction.seconds, four.prediction.seconds) == (
        curve.steps[1].prediction.seconds, curve.steps[2].prediction.seconds)
    # weak scaling, 2 samples per device: speed-up (8 / t4) / (4 / t2); linear would be 4 / 2 = 2
    speedup = (8 / four.prediction.seconds) / (4 / two.prediction.seconds)
    assert later.points[0].speedup == 1.0 and later.points[0].efficiency == 1.0
    assert later.points[1].speedup == pytest.approx(speedup, rel=1e-12)
    assert later.points[1].efficiency == pytest.approx(speedup / 2, rel=1e-12)
    # which is the 1-device curve's speed-up from 2 to 4 devices
    assert speedup == pytest.approx(curve.points[2].speedup / curve.points[1].speedup, rel=1e-12)
    assert later.points[1].efficiency != pytest.approx(speedup / 4)  # not speed-up / devices


def test_halving_doubling_has_log2_hops(curve):
    priced = scaling.predict(_report(curve, 4), Hardware(device="h100", algorithm="halving-doubling").bound())
    reduces = [t for t in priced.collectives if t.kind == "all-reduce" and t.group_size == 4]
    assert reduces, priced.collectives
    for t in reduces:
        # Rabenseifner: 2 (n-1)/n S/B + 2 log2(n) alpha, log2(4) = 2 hops per pass
        one = 2 * 3 / 4 * t.nbytes / NVLINK_B + 2 * 2 * NVLINK_ALPHA
        assert t.seconds == pytest.approx(t.executions * one, rel=1e-12)
    ring = curve.steps[-1].prediction.communication_seconds
    # the same bytes, 2 hops per pass instead of 3: one alpha less per pass, two passes
    assert ring - priced.prediction.communication_seconds == pytest.approx(
        sum(t.executions for t in reduces) * 2 * NVLINK_ALPHA, rel=1e-9)


def _report(curve, devices, store=None):
    """The sharded report behind one point of ``curve`` (read back from its store)."""
    from xla_cost.runs.configs import RunConfig

    return RunConfig("conv_net", curve.batch_size * devices, {}, optimizer=curve.optimizer,  # scaling's default
                     mesh={"data": devices} if devices > 1 else {}).canonical().run(cache=_STORE[0])


_STORE: list = []


def test_the_header_names_the_model_as_configured(curve):
    # the curve's model: its parameters (conv_net_params, its layers' weights) and its layers, beside the optimizer
    from xla_cost.present.units import short_count

    assert curve.parameters == conv_net_params() and curve.layers == "unrolled"
    assert curve.describe().startswith(f"conv_net ({short_count(conv_net_params())} parameters, layers unrolled; "
                                       "adam, float32): data parallel")
    assert curve.to_dict()["parameters"] == conv_net_params()


def test_strong_scaling_keeps_the_global_batch(tmp_path):
    result = scaling.scaling("conv_net", [1, 2, 4], global_batch=8, device="h100", bound=True,
                             store=str(tmp_path / "s.sqlite"))
    assert [s.global_batch for s in result.steps] == [8, 8, 8]
    # the per-device compute shrinks with the devices: FLOP per device fall by about K
    assert result.steps[2].flops < result.steps[0].flops / 3
    assert result.batch_size is None and result.global_batch == 8
    with pytest.raises(InputError):
        scaling.scaling("conv_net", [1, 2, 4], global_batch=6)  # 4 does not divide 6


def test_bandwidth_for_speedup_solves_the_doubling(curve):
    one, two = _report(curve, 1), _report(curve, 2)
    p40 = Hardware(device="p40", interconnect="pcie3").bound()  # nothing hidden: the closed form below
    bandwidth = scaling.bandwidth_for_speedup(one, two, 1.3, p40)
    assert bandwidth is not None
    priced = [scaling.predict(r, p40, bandwidth=bandwidth) for r in (one, two)]
    assert scaling.speedup(*priced) == pytest.approx(1.3, rel=1e-5)
    # weak scaling: 2 C1 / (C2 + M) = 1.3 gives M = 2 C1 / 1.3 - C2 (C1, C2: compute on 1 and on 2 devices)
    c1, c2 = (p.prediction.compute_seconds for p in priced)
    assert priced[1].prediction.communication_seconds == pytest.approx(2 * c1 / 1.3 - c2, rel=1e-4)
    # out of reach: more than 2x from twice the devices, as a bound or predicted (the global constants)
    assert scaling.bandwidth_for_speedup(one, two, 2.5, p40) is None
    assert scaling.bandwidth_for_speedup(one, two, 2.5, device="p40") is None


def test_estimate_total_flop_and_time(tmp_path, zoo_report):
    store = str(tmp_path / "s.sqlite")
    samples, epochs, devices, batch = 999, 3, 2, 2
    result = estimates.estimate("conv_net", samples=samples, epochs=epochs, devices=devices, batch_size=batch,
                              device="h100", mfu=0.5, store=store)
    # an analysis of its own of the one-device step at the same batch (estimate's default
    # optimizer, Adam): FLOP per sample = train-step FLOP / batch; the run does
    # samples * epochs = 2997 of them
    step_flops = zoo_report("conv_net", batch, "adam").phases["train_step"].flops
    assert result.flops_per_sample == pytest.approx(step_flops / batch, rel=1e-12)
    assert result.samples == samples * epochs
    assert result.total_flops == pytest.approx(step_flops / batch * samples * epochs, rel=1e-12)
    # 2997 samples at 2 x 2 a step: 749 whole steps and a last one of 1 sample, 750
    assert result.steps == 750
    assert result.seconds == pytest.approx(result.steps * result.step.prediction.seconds, rel=1e-12)
    # an explicit MFU is a bound at that MFU: the roofline at half the peak, of the backward
    # pass and of the update, each of the one-device program (the per-device work of 2 devices)
    single = zoo_report("conv_net", batch, "adam")
    compute = sum(max(single.phases[p].flops / (0.5 * H100_TF32), single.phases[p].bytes_accessed / H100_HBM)
                  for p in ("grad", "update"))
    assert result.step.prediction.compute_seconds == pytest.approx(compute, rel=1e-12)
    assert result.priced_as == "bound" and result.to_dict()["mfu"] == 0.5


def test_bad_arguments():
    from xla_cost.errors import InputError

    with pytest.raises(InputError):
        scaling.scaling("conv_net", [4, 2])
    with pytest.raises(InputError):
        scaling.scaling("conv_net", [1, 2], mesh_axis="model")
    with pytest.raises(InputError):
        estimates.estimate("conv_net", samples=10, tokens=10)
