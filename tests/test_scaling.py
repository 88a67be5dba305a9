"""The scaling curve and training estimates: sharded analyses priced by xla_cost.parallel.comm.

Expected values are recomputed from the reports' own counts with the closed
forms of the cost model (roofline, ring all-reduce), written out here.
"""

from __future__ import annotations

import math

import jax
import pytest

from xla_cost.parallel import comm
from xla_cost.runs import scaling
from xla_cost.errors import InputError
from xla_cost.parallel.devices import DEVICES

pytestmark = pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 simulated devices (tests/conftest.py)")

H100 = DEVICES["h100"].peak


@pytest.fixture(scope="module")
def curve(tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "results.sqlite"
    _STORE[:] = [str(store)]
    return scaling.scaling("conv_net", [1, 2, 4], batch_size=2, device="h100", store=str(store))


def test_each_point_is_the_roofline_plus_the_ring_all_reduce(curve):
    for step in curve.steps:
        compute = max(step.flops / H100.for_dtype("float32"), step.bytes_accessed / H100.bandwidth)
        assert step.prediction.compute_seconds == pytest.approx(compute, rel=1e-12)
        comm_s = sum(t.seconds for t in step.collectives)
        assert step.prediction.communication_seconds == pytest.approx(comm_s, rel=1e-12)
        # no overlap by default: the step is compute plus all of the communication
        assert step.prediction.seconds == pytest.approx(compute + comm_s, rel=1e-12)
    assert curve.steps[0].communication_bytes == 0  # one device talks to no one


def test_all_reduce_time_is_the_ring_formula(curve):
    link = comm.interconnect("nvlink4")
    step = curve.steps[-1]  # 4 devices
    for t in step.collectives:
        if t.kind == "all-reduce" and t.group_size == 4:
            n = 4
            one = 2 * (n - 1) / n * t.nbytes / link.bandwidth + 2 * (n - 1) * link.latency
            assert t.seconds == pytest.approx(t.executions * one, rel=1e-12)


def test_speedup_and_efficiency(curve):
    first = curve.steps[0]
    for step, point in zip(curve.steps, curve.points):
        throughput = step.global_batch / step.prediction.seconds
        speedup = throughput / (first.global_batch / first.prediction.seconds)
        assert point.speedup == pytest.approx(speedup, rel=1e-12)
        assert point.efficiency == pytest.approx(speedup / step.devices, rel=1e-12)
    assert list(curve.to_frame()["devices"]) == [1, 2, 4]
    assert curve.to_markdown().count("\n|") >= 4


def test_halving_doubling_has_log2_hops(curve):
    link = comm.interconnect("nvlink4")
    priced = scaling.predict(_report(curve, 4), device="h100", algorithm="halving-doubling")
    for t in priced.collectives:
        if t.kind == "all-reduce" and t.group_size == 4:
            # Rabenseifner: 2 (n-1)/n S/B + 2 log2(n) alpha, log2(4) = 2 hops per pass
            one = 2 * 3 / 4 * t.nbytes / link.bandwidth + 2 * 2 * link.latency
            assert t.seconds == pytest.approx(t.executions * one, rel=1e-12)
    ring = curve.steps[-1].prediction.communication_seconds
    assert 0 < priced.prediction.communication_seconds < ring  # 2 hops instead of 3


def _report(curve, devices, store=None):
    """The sharded report behind one point of ``curve`` (read back from its store)."""
    from xla_cost.runs.configs import RunConfig

    return RunConfig("conv_net", curve.batch_size * devices, {}, optimizer="sgd",
                     mesh={"data": devices} if devices > 1 else {}).canonical().run(cache=_STORE[0])


_STORE: list = []


def test_strong_scaling_keeps_the_global_batch(tmp_path):
    result = scaling.scaling("conv_net", [1, 2, 4], global_batch=8, device="h100", store=str(tmp_path / "s.sqlite"))
    assert [s.global_batch for s in result.steps] == [8, 8, 8]
    # the per-device compute shrinks with the devices: FLOP per device fall by about K
    assert result.steps[2].flops < result.steps[0].flops / 3
    assert result.batch_size is None and result.global_batch == 8
    with pytest.raises(InputError):
        scaling.scaling("conv_net", [1, 2, 4], global_batch=6)  # 4 does not divide 6


def test_bandwidth_for_speedup_solves_the_doubling(curve):
    one, two = _report(curve, 1), _report(curve, 2)
    bandwidth = scaling.bandwidth_for_speedup(one, two, 1.3, device="p40", interconnect="pcie3")
    assert bandwidth is not None
    priced = [scaling.predict(r, device="p40", interconnect="pcie3", bandwidth=bandwidth) for r in (one, two)]
    assert scaling.speedup(*priced) == pytest.approx(1.3, rel=1e-5)
    # weak scaling: 2 C1 / (C2 + M) = 1.3 gives M = 2 C1 / 1.3 - C2 (C1, C2: compute on 1 and on 2 devices)
    c1, c2 = (p.prediction.compute_seconds for p in priced)
    assert priced[1].prediction.communication_seconds == pytest.approx(2 * c1 / 1.3 - c2, rel=1e-4)
    # out of reach: more than 2x from twice the devices
    assert scaling.bandwidth_for_speedup(one, two, 2.5, device="p40") is None


def test_estimate_total_flop_and_time(tmp_path):
    store = str(tmp_path / "s.sqlite")
    samples, epochs, devices, batch = 1000, 3, 2, 2
    result = scaling.estimate("conv_net", samples=samples, epochs=epochs, devices=devices, batch_size=batch,
                              device="h100", mfu=0.5, store=store)
    assert result.total_flops == pytest.approx(result.flops_per_sample * samples * epochs, rel=1e-12)
    assert result.steps == math.ceil(samples * epochs / (batch * devices))
    assert result.seconds == pytest.approx(result.steps * result.step.prediction.seconds, rel=1e-12)
    # the compute term runs at half the peak
    step = result.step
    assert step.prediction.compute_seconds == pytest.approx(
        max(step.flops / (0.5 * H100.for_dtype("float32")), step.bytes_accessed / H100.bandwidth), rel=1e-12)


def test_bad_arguments():
    from xla_cost.errors import InputError

    with pytest.raises(InputError):
        scaling.scaling("conv_net", [4, 2])
    with pytest.raises(InputError):
        scaling.scaling("conv_net", [1, 2], mesh_axis="model")
    with pytest.raises(InputError):
        scaling.estimate("conv_net", samples=10, tokens=10)
