"""The calibrated step-time model (issue 22, part 2): `predict` on one analysed
step, with a calibration given in the test, a pipeline around it and
data-parallel replicas beside it.

Expected values are the model's closed forms written out here: the H100
datasheet's peaks, NVLink 4 and InfiniBand NDR per device and direction (1 us
and 5 us per hop assumed, as `xla_cost.parallel.comm` states), the ring
collectives (Patarasuk and Yuan 2009) and the 1F1B pipeline's (m + p - 1)
slots (Narayanan et al. 2021, section 2.2); the work is the analysis's own
counts (matrix-product FLOP, memory-bound bytes, kernels), which
tests/analysis and tests/compiled check against the model's dimensions.
"""

from __future__ import annotations

import pytest

from xla_cost.errors import InputError
from xla_cost.parallel.calibration import Calibration, use_profiles
from xla_cost.parallel.hardware import Hardware
from xla_cost.parallel.schedule import Layout
from xla_cost.runs.configs import RunConfig
from xla_cost.runs.scaling import PIECES, predict

from tests.formulas import conv_net_forward_layers, conv_net_params

# NVIDIA H100 datasheet, SXM5: TF32 494.7 TFLOPS dense, HBM3 3.35 TB/s; NVLink 4 450 GB/s and
# InfiniBand NDR 400 Gb/s = 50 GB/s per device and direction
H100_TF32, H100_HBM = 494.7e12, 3.35e12
NVLINK_B, NVLINK_ALPHA, IB_B, IB_ALPHA = 450e9, 1e-6, 50e9, 5e-6
CALIBRATION = Calibration("h100", matmul=0.5, memory=0.8, launch=3e-6)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "results.sqlite"
    return RunConfig("conv_net", batch_size=4).canonical().run(cache=str(store))


def _compute(costs) -> float:
    # matrix products at half the TF32 peak, memory-bound bytes at 0.8 of HBM3, 3 us per kernel
    return (costs.matmul_flops / (0.5 * H100_TF32) + costs.memory_bound_bytes / (0.8 * H100_HBM)
            + costs.kernels * 3e-6)


def test_one_device_is_its_calibrated_compute(report):
    grad, update = report.phases["grad"], report.phases["update"]
    # the grad program's matrix products at batch 4: the forward's convolutions and fc1 (2 B 64 10),
    # then the weight gradients of all three and the input gradients of conv2 and fc1 (conv1's
    # input needs none): 2 conv1 + 3 conv2 + 3 fc1
    forward = conv_net_forward_layers(4)
    fc1 = 2 * 4 * 64 * 10
    assert grad.matmul_flops == 2 * forward["conv1"] + 3 * forward["conv2"] + 3 * fc1
    assert update.matmul_flops == 0  # SGD: elementwise only
    # the memory-bound bytes and kernels are the compiled program's (XLA's fusions: no closed form);
    # nonzero, so that each term of the model below is exercised
    assert grad.memory_bound_bytes > 0 and grad.kernels > 0
    with use_profiles({"h100": CALIBRATION}):
        step = predict(report, Hardware("h100"))
    assert step.prediction.seconds == pytest.approx(_compute(grad) + _compute(update), rel=1e-12)
    # each part on its own: the products at half the TF32 peak; the rest at 0.8 of HBM3 and 3 us a kernel
    assert step.parts["matmul"] == pytest.approx(grad.matmul_flops / (0.5 * H100_TF32), rel=1e-12)
    assert step.parts["memory"] == pytest.approx(
        grad.memory_bound_bytes / (0.8 * H100_HBM) + grad.kernels * 3e-6, rel=1e-12)
    assert step.parts["update"] == pytest.approx(_compute(update), rel=1e-12)
    assert step.parts["gradients"] == step.parts["tensor"] == 0
    assert step.parts["stage_transfers"] == step.parts["pipeline_bubble"] == 0
    assert "h100" in step.calibration and "50.0% of peak" in step.calibration


def test_a_pipeline_takes_m_plus_p_minus_1_slots(report):
    stage_bytes = 4 * 2**20  # activations one micro-batch sends to the next stage
    p, m = 4, 8
    with use_profiles({"h100": CALIBRATION}):
        step = predict(report, Hardware("h100"), Layout(pipeline=p, micro_batches=m, stage_bytes=stage_bytes))
        more = predict(report, Hardware("h100"), Layout(pipeline=p, micro_batches=4 * m, stage_bytes=stage_bytes))
    # one device per stage, stages within a node: the activation out and its gradient back over NVLink 4
    slot = _compute(report.phases["grad"]) + 2 * stage_bytes / NVLINK_B + 2 * NVLINK_ALPHA
    update = _compute(report.phases["update"])
    assert step.prediction.seconds == pytest.approx((m + p - 1) * slot + update, rel=1e-9)
    assert step.devices == p and step.global_batch == 4 * m
    # the bubble is (p - 1) of the m + p - 1 slots: more micro-batches, a smaller share
    bubble = lambda s, m: (s.prediction.seconds - update - m * slot) / (s.prediction.seconds - update)  # noqa: E731
    assert bubble(step, m) == pytest.approx((p - 1) / (m + p - 1), rel=1e-6)  # 3 / 11
    assert bubble(more, 4 * m) == pytest.approx((p - 1) / (4 * m + p - 1), rel=1e-6)  # 3 / 35


@pytest.mark.parametrize("node_size, bandwidth, alpha", [
    (1, IB_B, IB_ALPHA),          # the one-device stage fills its node: the next stage is on another node
    (2, NVLINK_B, NVLINK_ALPHA),  # a node of 2 devices holds the stage and the next one: NVLink 4
])
def test_a_stage_that_fills_its_node_sends_to_the_next_over_the_network(report, node_size, bandwidth, alpha):
    stage_bytes = 4 * 2**20
    p, m = 2, 4
    with use_profiles({"h100": CALIBRATION}):
        step = predict(report, Hardware("h100", node_size=node_size),
                       Layout(pipeline=p, micro_batches=m, stage_bytes=stage_bytes))
    # the stage's 1 device sends the activation out and receives its gradient back on the link
    transfer = 2 * stage_bytes / 1 / bandwidth + 2 * alpha
    slot = _compute(report.phases["grad"]) + transfer
    assert step.prediction.seconds == pytest.approx((m + p - 1) * slot + _compute(report.phases["update"]), rel=1e-12)
    # the pipeline's parts: every micro-batch's transfers, and the p - 1 idle slots (the bubble)
    assert step.parts["stage_transfers"] == pytest.approx(m * transfer, rel=1e-9)
    assert step.parts["pipeline_bubble"] == pytest.approx((p - 1) * slot, rel=1e-9)


def _ring(kind: str, nbytes: float, n: int, bandwidth: float, alpha: float) -> float:
    if kind == "all-reduce":
        return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * alpha
    return (n - 1) / n * nbytes / bandwidth + (n - 1) * alpha  # reduce-scatter, all-gather


def test_replicas_all_reduce_the_gradients_in_two_levels(report):
    replicas = 16  # two nodes of 8
    gradient = 4 * conv_net_params() // PIECES  # float32 gradients in PIECES pieces
    with use_profiles({"h100": CALIBRATION}):
        exposed = predict(report, Hardware("h100", overlap=0.0, bucket_bytes=0), Layout(data=replicas))
        flat = predict(report, Hardware("h100", overlap=0.0, bucket_bytes=0, hierarchical=False),
                       Layout(data=replicas))
        scheduled = predict(report, Hardware("h100"), Layout(data=replicas))
    # within each node a reduce-scatter and an all-gather on NVLink, between the two nodes the
    # all-reduce of one eighth on InfiniBand
    one = (_ring("reduce-scatter", gradient, 8, NVLINK_B, NVLINK_ALPHA)
           + _ring("all-reduce", gradient / 8, 2, IB_B, IB_ALPHA)
           + _ring("all-gather", gradient, 8, NVLINK_B, NVLINK_ALPHA))
    assert exposed.prediction.communication_seconds == pytest.approx(PIECES * one, rel=1e-9)
    assert exposed.parts["gradients"] == pytest.approx(PIECES * one, rel=1e-9)  # nothing hidden
    # one flat ring of 16 at the slowest link
    assert flat.prediction.communication_seconds == pytest.approx(
        PIECES * _ring("all-reduce", gradient, 16, IB_B, IB_ALPHA), rel=1e-9)
    # scheduled: 25 MiB buckets started as the backward pass makes them; the 16 pieces (4 x 105,706
    # parameters = 413 KiB in all) fill less than one bucket, which is ready only with the last piece,
    # as the backward pass ends: one two-level all-reduce of all of them, all of it exposed
    whole = PIECES * gradient
    assert scheduled.parts["gradients"] == pytest.approx(
        _ring("reduce-scatter", whole, 8, NVLINK_B, NVLINK_ALPHA) + _ring("all-reduce", whole / 8, 2, IB_B, IB_ALPHA)
        + _ring("all-gather", whole, 8, NVLINK_B, NVLINK_ALPHA), rel=1e-9)
    assert scheduled.devices == replicas and scheduled.global_batch == replicas * 4


def test_a_device_without_a_profile_gives_bounds_only(report):
    with use_profiles({}):
        with pytest.raises(InputError, match="calibration profile"):
            predict(report, Hardware("v100"))
        bound = predict(report, Hardware("v100").bound())
    # the roofline at the V100's float32 peak (15.7 TFLOPS, 900 GB/s: V100 datasheet, SXM2)
    step = report.phases["train_step"]
    grad, update = report.phases["grad"], report.phases["update"]
    roof = lambda c: max(c.flops / 15.7e12, c.bytes_accessed / 900e9)  # noqa: E731
    assert bound.prediction.seconds == pytest.approx(roof(grad) + roof(update), rel=1e-12)
    assert bound.flops == step.flops and bound.calibration == ""
