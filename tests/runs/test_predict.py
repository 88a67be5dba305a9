"""The step-time model (issue 22, part 2; issue 32): `predict` on one analysed
step, with the time model's global constants given in the test, a pipeline
around it and data-parallel replicas beside it.

Expected values are the model's closed forms written out here: the H100
datasheet's peaks, NVLink 4 and InfiniBand NDR per device and direction (1 us
and 5 us per hop assumed, as `xla_cost.timemodel.comm` states), the ring
collectives (Patarasuk and Yuan 2009) and the 1F1B pipeline's (m + p - 1)
slots (Narayanan et al. 2021, section 2.2); the work is the analysis's own
counts (matrix-product FLOP, memory-bound bytes, kernels), which
tests/analysis and tests/compiled check against the model's dimensions. The
step is compiled on the CPU (no target): it has no kernel list, so its compute
is priced from its totals (`xla_cost.timemodel.kernel_time.price_totals`;
kernel by kernel: tests/timemodel/test_kernel_time.py).
"""

from __future__ import annotations

import pytest

from xla_cost.errors import InputError
from xla_cost.timemodel import devices
from xla_cost.timemodel.calibration import Calibration, describe, use_constants
from xla_cost.timemodel.hardware import Hardware
from xla_cost.timemodel.schedule import Layout
from xla_cost.runs.configs import RunConfig
from xla_cost.runs.scaling import predict
from xla_cost.runs.step_communication import PIECES

from tests.formulas import conv_net_forward_layers, conv_net_params

# xla_cost's caches on, shared with the other modules that opt in (tests/conftest.py): the zoo programs
# this module analyses again are read back, not compiled again.
pytestmark = pytest.mark.usefixtures("module_caches")


# NVIDIA H100 datasheet, SXM5: TF32 494.7 TFLOPS dense, HBM3 3.35 TB/s; NVLink 4 450 GB/s and
# InfiniBand NDR 400 Gb/s = 50 GB/s per device and direction
H100_TF32, H100_HBM = 494.7e12, 3.35e12
NVLINK_B, NVLINK_ALPHA, IB_B, IB_ALPHA = 450e9, 1e-6, 50e9, 5e-6
CONSTANTS = Calibration(matmul=0.5, memory=0.8, launch=3e-6)  # one set for every device


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "results.sqlite"
    return RunConfig("conv_net", batch_size=4).canonical().run(cache=str(store))


def _compute(costs, peak: float = H100_TF32, bandwidth: float = H100_HBM) -> float:
    # matrix products at half the float32 peak, memory-bound bytes at 0.8 of the bandwidth; the CPU program's
    # kernels are not the device's: no launch charged for them (the totals path)
    return costs.matmul_flops / (0.5 * peak) + costs.memory_bound_bytes / (0.8 * bandwidth)


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
    with use_constants(CONSTANTS):
        step = predict(report, Hardware("h100"))
    # a batch of 4 on an H100 waits for its host: the measured dispatch of the two calls and their arrays
    host = devices.device("h100").dispatch
    dispatch = 2 * host.call + (grad.arguments + update.arguments - 2) * host.per_argument
    assert step.prediction.compute_seconds == pytest.approx(_compute(grad) + _compute(update), rel=1e-12)
    assert step.prediction.seconds == pytest.approx(max(_compute(grad) + _compute(update), dispatch), rel=1e-12)
    assert step.parts["dispatch_wait"] == pytest.approx(max(dispatch - _compute(grad) - _compute(update), 0), rel=1e-12)
    # each part on its own: the products at half the TF32 peak; the rest at 0.8 of HBM3; no launches
    assert step.parts["matmul"] == pytest.approx(grad.matmul_flops / (0.5 * H100_TF32), rel=1e-12)
    assert step.parts["memory"] == pytest.approx(grad.memory_bound_bytes / (0.8 * H100_HBM), rel=1e-12)
    assert step.parts["launch"] == 0
    assert step.parts["update"] == pytest.approx(_compute(update), rel=1e-12)
    assert step.parts["gradients"] == step.parts["tensor"] == step.parts["host"] == 0
    assert step.parts["stage_transfers"] == step.parts["pipeline_bubble"] == 0
    assert sum(step.parts.values()) == pytest.approx(step.prediction.seconds, rel=1e-12)
    assert step.calibration == describe(CONSTANTS) and "products at 50.0% of peak" in step.calibration
    # no target compiled: the CPU program's totals, and the step says so
    assert any(note.startswith("priced from the totals of a program compiled without a target (the cpu's:")
               for note in step.notes)


def test_the_host_cost_is_added_once_a_step_and_depth_leaves_totals_alone(report):
    host = 2e-3  # seconds a step outside the kernels
    p, m, stage_bytes = 2, 4, 4 * 2**20
    layout = Layout(pipeline=p, micro_batches=m, stage_bytes=stage_bytes)
    with use_constants(CONSTANTS):
        plain, piped = predict(report, Hardware("h100")), predict(report, Hardware("h100"), layout)
    with use_constants(Calibration(matmul=0.5, memory=0.8, launch=3e-6, depth=4096.0, host=host)):
        hosted, hosted_piped = predict(report, Hardware("h100")), predict(report, Hardware("h100"), layout)
    # once per step, not per micro-batch: the pipeline's m slots are unchanged
    for without, with_host in ((plain, hosted), (piped, hosted_piped)):
        assert with_host.prediction.seconds == pytest.approx(without.prediction.seconds + host, rel=1e-12)
        assert with_host.prediction.compute_seconds == pytest.approx(without.prediction.compute_seconds + host,
                                                                     rel=1e-12)
        assert with_host.parts["host"] == host
        # priced from its totals, the products are one large well-shaped product: no depth penalty
        assert with_host.parts["matmul"] == pytest.approx(without.parts["matmul"], rel=1e-12)
        assert sum(with_host.parts.values()) == pytest.approx(with_host.prediction.seconds, rel=1e-12)


def test_a_pipeline_takes_m_plus_p_minus_1_slots(report):
    stage_bytes = 4 * 2**20  # activations one micro-batch sends to the next stage
    p, m = 4, 8
    with use_constants(CONSTANTS):
        step = predict(report, Hardware("h100"), Layout(pipeline=p, micro_batches=m, stage_bytes=stage_bytes))
        more = predict(report, Hardware("h100"), Layout(pipeline=p, micro_batches=4 * m, stage_bytes=stage_bytes))
    # one device per stage, stages within a node: the activation out and its gradient back over NVLink 4, each at
    # the send/recv bus bandwidth NCCL measured for 4 MiB (NVLINK4_SEND_4MIB)
    slot = _compute(report.phases["grad"]) + 2 * stage_bytes / NVLINK4_SEND_4MIB
    update = _compute(report.phases["update"])
    assert step.prediction.seconds == pytest.approx((m + p - 1) * slot + update, rel=1e-9)
    assert step.devices == p and step.global_batch == 4 * m
    # the bubble is (p - 1) of the m + p - 1 slots: more micro-batches, a smaller share
    bubble = lambda s, m: (s.prediction.seconds - update - m * slot) / (s.prediction.seconds - update)  # noqa: E731
    assert bubble(step, m) == pytest.approx((p - 1) / (m + p - 1), rel=1e-6)  # 3 / 11
    assert bubble(more, 4 * m) == pytest.approx((p - 1) / (4 * m + p - 1), rel=1e-6)  # 3 / 35


# NCCL's send/recv bus bandwidth at 4 MiB on NVLink 4 (xla_cost.timemodel.bus, its sources there): the 8x H200
# all-reduce table's 4 MiB row, 139.97 GB/s (Bekman, network/benchmarks/README.md), in the shape of the ring's
# all-gather, whose 16 GiB busbw is 361.4 GB/s of that table's 480.7 (Bekman, network/README.md 'SHARP')
NVLINK4_SEND_4MIB = 139.97e9 * 361.4 / 480.7
# across nodes, a device's own NDR adapter (50 GB/s) at the efficiency a multi-node NCCL collective reached when each
# of a node's 8 adapters carried 4 MiB: the 4-node B200 table's 32 MiB row, 91.19 of the node's 400 GB/s
NDR_SEND_4MIB = 91.19 / 400 * IB_B


@pytest.mark.parametrize("node_size, busbw, where", [
    (1, NDR_SEND_4MIB, "across nodes on ib-ndr@nccl"),  # the one-device stage fills its node: the next is on another
    (2, NVLINK4_SEND_4MIB, "within a node on nvlink4@nccl"),  # a node of 2 holds the stage and the next: NVLink 4
])
def test_a_stage_sends_to_the_next_at_the_measured_send_recv_bus_bandwidth(report, node_size, busbw, where):
    stage_bytes = 4 * 2**20
    p, m = 2, 4
    with use_constants(CONSTANTS):
        step = predict(report, Hardware("h100", node_size=node_size),
                       Layout(pipeline=p, micro_batches=m, stage_bytes=stage_bytes))
    # the stage's 1 device sends the activation out and receives its gradient back: twice S / busbw(S), no
    # line rate, no assumed latency (the curve's time holds them); across nodes the slower of NVLink's curve
    # and the adapter's, the adapter's
    assert NDR_SEND_4MIB < NVLINK4_SEND_4MIB
    transfer = 2 * stage_bytes / busbw
    slot = _compute(report.phases["grad"]) + transfer
    assert step.prediction.seconds == pytest.approx((m + p - 1) * slot + _compute(report.phases["update"]), rel=1e-12)
    # the pipeline's parts: every micro-batch's transfers, and the p - 1 idle slots (the bubble)
    assert step.parts["stage_transfers"] == pytest.approx(m * transfer, rel=1e-9)
    assert step.parts["pipeline_bubble"] == pytest.approx((p - 1) * slot, rel=1e-9)
    # said: the transfers among the step's collectives (2 a micro-batch) and how they were priced
    sent = [t for t in step.collectives if t.kind == "collective-permute"]
    assert [(t.nbytes, t.group_size, t.executions) for t in sent] == [(stage_bytes, 2, 2 * m)]
    assert sent[0].seconds == pytest.approx(m * transfer, rel=1e-12)
    note = next(n for n in step.notes if n.startswith("pipeline stage transfers"))
    assert where in note and f"({busbw / 1e9:,.1f} GB/s at that size)" in note


def test_stage_transfers_without_a_measured_curve_are_alpha_beta_and_say_so(report):
    # a V100 node's GPUs share PCIe 3.0 x16 (no NCCL curve published): S / B + alpha each way, at 16 GB/s and 2 us
    # (xla_cost.timemodel.links: the V100 datasheet's PCIe 32 GB/s both ways, halved; the latency assumed)
    stage_bytes, p, m = 4 * 2**20, 2, 4
    with use_constants(CONSTANTS):
        step = predict(report, Hardware("v100"), Layout(pipeline=p, micro_batches=m, stage_bytes=stage_bytes))
    transfer = 2 * (stage_bytes / 16e9 + 2e-6)
    assert step.parts["stage_transfers"] == pytest.approx(m * transfer, rel=1e-12)
    note = next(n for n in step.notes if n.startswith("pipeline stage transfers"))
    assert "at line rate, the alpha-beta model (no measured send/recv curve for pcie3)" in note


def _ring(kind: str, nbytes: float, n: int, bandwidth: float, alpha: float) -> float:
    if kind == "all-reduce":
        return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * alpha
    return (n - 1) / n * nbytes / bandwidth + (n - 1) * alpha  # reduce-scatter, all-gather


def test_replicas_all_reduce_the_gradients_in_two_levels(report):
    replicas = 16  # two nodes of 8
    gradient = 4 * conv_net_params() // PIECES  # float32 gradients in PIECES pieces
    with use_constants(CONSTANTS):
        # roofline compute (mfu=1): its collectives at line rate, the alpha-beta model below (a prediction's
        # measured NCCL curves: tests/timemodel/test_bus.py)
        exposed = predict(report, Hardware("h100", overlap=0.0, bucket_bytes=0, mfu=1.0), Layout(data=replicas))
        flat = predict(report, Hardware("h100", overlap=0.0, bucket_bytes=0, hierarchical=False, mfu=1.0),
                       Layout(data=replicas))
        scheduled = predict(report, Hardware("h100", mfu=1.0), Layout(data=replicas))
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


def test_replicas_staged_through_host_memory_pay_the_copies_and_the_servers_card(report):
    # Goyal et al. 2017's P100s (Big Basin: NVLink 1 at 80 GB/s per direction, PCIe 3.0 x16 at 16 GB/s each way
    # to the host, one 50 Gb/s card per server, §4.3), all-reduced as Gloo's host workspace ran it (§4.1): an NCCL
    # reduce onto one GPU, a copy to the host, halving/doubling between the 2 servers, a copy back, a broadcast
    gradient = 4 * conv_net_params() // PIECES
    hardware = Hardware("p100", overlap=0.0, bucket_bytes=0, algorithm="halving-doubling", mfu=1.0)
    with use_constants(CONSTANTS):
        staged = predict(report, hardware, Layout(data=16, host_staged_gradients=True))
        one_server = predict(report, hardware, Layout(data=8, host_staged_gradients=True))
    one = (2 * (gradient / 80e9 + 7 * 1e-6) + 2 * gradient / 16e9
           + 2 * (1 / 2) * gradient / (50e9 / 8) + 2 * 1 * 1e-5)  # ceil(log2 2) = 1 hop a pass, 10 us each
    assert staged.parts["gradients"] == pytest.approx(PIECES * one, rel=1e-9)
    assert any("staged through host memory" in note for note in staged.notes)
    # one server reduces on its own NVLink (Caffe2's single-host path), nothing through the host: halving and
    # doubling among 8, ceil(log2 8) = 3 hops a pass
    assert one_server.parts["gradients"] == pytest.approx(PIECES * (2 * 7 / 8 * gradient / 80e9 + 2 * 3 * 1e-6),
                                                          rel=1e-9)


@pytest.mark.parametrize("device, peak, bandwidth", [
    ("v100", 15.7e12, 900e9),  # V100 datasheet, SXM2: FP32 15.7 TFLOPS (no TF32), HBM2 900 GB/s
    ("p40", 11.76e12, 346e9),  # Tesla P40 datasheet: FP32 11.76 TFLOPS at boost, GDDR5 346 GB/s
    ("tpu-v5e", 197e12, 819e9),  # Cloud TPU v5e: 197 TFLOPS (float32 products at the bf16 rate), 819 GB/s
])
def test_every_device_predicts_with_the_same_constants_and_bounds_as_before(report, device, peak, bandwidth):
    # issue 32: no per-device profile, no refusal: the same constants, the device's own peak and bandwidth
    with use_constants(CONSTANTS):
        predicted = predict(report, Hardware(device))
        on_h100 = predict(report, Hardware("h100"))
        bound = predict(report, Hardware(device).bound())
    grad, update = report.phases["grad"], report.phases["update"]
    assert predicted.prediction.seconds == pytest.approx(
        _compute(grad, peak, bandwidth) + _compute(update, peak, bandwidth), rel=1e-12)
    # the same constants; a TPU's description leaves out the two a GPU's libraries alone read
    assert on_h100.calibration == describe(CONSTANTS)
    assert predicted.calibration == describe(CONSTANTS, gpu=not device.startswith("tpu"))
    # a slower device, the same work: more time (every figure of the three is below the H100's)
    assert predicted.prediction.seconds > on_h100.prediction.seconds
    # the roofline at the device's float32 peak, as before
    step = report.phases["train_step"]
    roof = lambda c: max(c.flops / peak, c.bytes_accessed / bandwidth)  # noqa: E731
    assert bound.prediction.seconds == pytest.approx(roof(grad) + roof(update), rel=1e-12)
    assert bound.flops == step.flops and bound.calibration == ""


def test_a_dtype_the_device_has_no_peak_for_is_refused(report):
    # the P100 publishes no bfloat16 peak (its row: 0): refused, prediction or bound
    for hardware in (Hardware("p100", arithmetic="bfloat16"), Hardware("p100", arithmetic="bfloat16").bound()):
        with pytest.raises(InputError, match="a dtype the NVIDIA Tesla P100 SXM2 has a published peak for"):
            predict(report, hardware)


@pytest.fixture(scope="module")
def target_report(tmp_path_factory):
    """conv_net compiled for an H100 by its own compiler (deviceless): its kernel list, as every validated case."""
    store = tmp_path_factory.mktemp("target_store") / "results.sqlite"
    return RunConfig("conv_net", batch_size=4, target="h100").canonical().run(cache=str(store))


def test_a_prediction_carries_its_held_out_range_and_a_bound_none(report, target_report):
    import dataclasses
    import math

    from xla_cost.timemodel.calibration import PROXY_NO_RANGE, PredictionInterval

    # the held-out published cases ran within a factor e^0.3 of their predictions in 80% of them (median e^-0.1):
    # a step predicted at s seconds took s e^-0.3 to s e^0.3. Every one was its device's own program priced
    # kernel by kernel: a step compiled for the H100 (its kernel list) has the range; the CPU's program, priced
    # from its totals, has none, and says why (the validation never measured the model there)
    given = PredictionInterval(spread=0.3, bias=0.1, cases=12, papers=4, how="given here")
    with use_constants(dataclasses.replace(CONSTANTS, interval=given)):
        step = predict(target_report, Hardware("h100"))
        bound = predict(target_report, Hardware("h100").bound())
        proxy = predict(report, Hardware("h100"))
    with use_constants(CONSTANTS):
        plain = predict(target_report, Hardware("h100"))
    assert target_report.phases["grad"].kernel_list and report.phases["grad"].kernel_list is None
    assert proxy.interval is None and proxy.interval_description == PROXY_NO_RANGE
    assert proxy.to_dict()["step_interval_s"] is None and "--target DEVICE" in proxy.interval_note()
    assert f"- no range beside the predicted step time: {PROXY_NO_RANGE}" in proxy.to_markdown()
    s = step.prediction.seconds
    assert s == plain.prediction.seconds  # the range moves no prediction
    assert step.interval == pytest.approx((s * math.exp(-0.3), s * math.exp(0.3)), rel=1e-12)
    data = step.to_dict()
    assert data["step_interval_s"] == pytest.approx([s * math.exp(-0.3), s * math.exp(0.3)], rel=1e-12)
    assert "12 cases of 4 papers" in data["interval_description"]
    row = step.to_frame().iloc[0]
    assert (row["step_low_s"], row["step_high_s"]) == pytest.approx(step.interval, rel=1e-12)
    # printed beside the step time, and what it is said in the notes
    from xla_cost.present.units import duration

    assert f"{duration(s)} ({duration(step.interval[0])} to {duration(step.interval[1])})" in step.describe()
    assert "- the range beside the predicted step time: in 80% of the held-out" in step.to_markdown()
    # constants without an interval: none, said; a bound: none, nothing to say
    assert plain.interval is None and "no range beside the predicted step time" in plain.to_markdown()
    assert bound.interval is None and bound.to_dict()["step_interval_s"] is None and bound.interval_note() == ""
    # a curve of such steps (xla-cost scaling's table): the range in its own column beside each step, in the
    # step's unit (seconds x 1e6 here), and the note under it
    from xla_cost.runs.priced import ScalingResult
    from xla_cost.timemodel.schedule import scaling_curve

    curve = ScalingResult("conv_net", "data", 4, Hardware("h100"), (step,),
                          scaling_curve([(1, 4, step.prediction)]))
    table = curve.sections()[0].frame
    assert table["step range (µs)"].tolist() == [f"{step.interval[0] * 1e6:,.2f}-{step.interval[1] * 1e6:,.2f}"]
    assert curve.to_frame()["step_high_s"].tolist() == pytest.approx([s * math.exp(0.3)], rel=1e-12)
    assert any(n.startswith("the range beside the predicted step times: in 80%") for n in curve.notes())


def test_a_kernel_of_unknown_runs_is_priced_once_and_said(report):
    # a loop whose trips its program does not say (i != 7: not the `i < N` form read) runs its tanh an unknown
    # number of times: priced once, a lower bound, and the step's notes say so; a loop of known trips says nothing
    import dataclasses

    from xla_cost.compiled.kernels import kernel_list
    from xla_cost.runs.scaling import unknown_runs
    from tests.compiled.test_trip_count import _module

    def with_grad_kernels(text: str):
        grad = dataclasses.replace(report.phases["grad"], kernel_list=kernel_list(text))
        update = dataclasses.replace(report.phases["update"], kernel_list=())
        return dataclasses.replace(report, phases={**report.phases, "grad": grad, "update": update})

    unknown, known = with_grad_kernels(_module(7, 0, 1, "NE")), with_grad_kernels(_module(7, 0, 1, "LT"))
    names = unknown_runs([unknown.phases["grad"]])
    assert names and unknown_runs([known.phases["grad"]]) == []
    with use_constants(CONSTANTS):
        said = [n for n in predict(unknown, device="h100").notes if "lower bound" in n]
        assert said == [f"{len(names)} kernel(s) in a loop whose trips the program does not say priced once each "
                        f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}): their time is a lower bound"]
        assert not any("lower bound" in n for n in predict(known, device="h100").notes)


def test_the_manual_quotes_todays_interval():
    # docs/time-model.md quoted an interval of 0.52x to 1.94x on 20 cases of 7 papers, two calibrations old
    import pathlib
    import re

    from xla_cost.timemodel import calibration

    text = (pathlib.Path(__file__).parents[2] / "docs" / "time-model.md").read_text()
    said = re.search(r"Today's interval is ([\d.]+)× to ([\d.]+)× the predicted time, rests on (\d+) cases of\s+"
                     r"(\d+) papers, and has a median of ([\d.]+)×", text)
    assert said, "docs/time-model.md: the interval's sentence"
    description = calibration.interval_description()
    low, high = calibration.interval(1.0)
    assert (said[1], said[2]) == (f"{low:.2f}", f"{high:.2f}")
    assert f"{said[3]} cases of {said[4]} papers" in description and f"median case ran at {said[5]}x" in description


def test_a_combined_data_parallel_all_reduce_is_reduced_as_the_backward_pass_makes_its_bytes(tmp_path):
    # nanodo / gpt2-small on --devices 8: XLA's CPU combiner merged every gradient into one all-reduce at the end of
    # the backward pass, priced as one bucket ready when it ends: all of it exposed (2.491 of 2.491 ms) under a header
    # saying "gradients scheduled against the backward pass in 25 MiB buckets"
    report = RunConfig("conv_net", batch_size=8, mesh={"data": 8}).canonical().run(cache=str(tmp_path / "s.sqlite"))
    gradient = 4 * conv_net_params()  # float32 gradients, all-reduced over the 8 devices of data
    reduced = [c for c in report.phases["backward"].communication if c.kind == "all-reduce" and c.axes == ("data",)]
    assert sum(c.bytes * c.executions for c in reduced) >= gradient  # (and the loss's mean: a few bytes)
    buckets = 4
    slow = Hardware("h100", mfu=1e-5, bucket_bytes=gradient // buckets)  # a backward pass long enough to hide them
    with use_constants(CONSTANTS):
        step = predict(report, slow, Layout())
    # the bytes made through the backward pass in 4 buckets, ready at 1/4, 2/4, 3/4 and its end: only the last,
    # a quarter of them on NVLink in a ring of 8, runs past it
    bucket = _ring("all-reduce", gradient / buckets, 8, NVLINK_B, NVLINK_ALPHA)
    assert step.parts["gradients"] == pytest.approx(bucket, rel=1e-3)
    assert step.prediction.communication_seconds == pytest.approx(buckets * bucket, rel=1e-3)  # 4 all-reduces
    assert any("reduced as the backward pass makes their bytes" in note for note in step.notes)
