"""Training estimates and scaling curves as predictions and as bounds, over a
mesh with tensor-parallel shards, pipeline stages, replicas and micro-batches
(issue 22, section 2).

Expected values are the model's closed forms written out here: the H100
datasheet's peaks, NVLink 4 per device and direction (1 us per hop assumed, as
`xla_cost.timemodel.comm` states), the 1F1B pipeline's m + p - 1 slots of the
slowest stage (Narayanan et al. 2021, section 2.2), the time model's global
constants given in the test, the tiny GPT's dimensions (the activations a stage sends), and the
analyses' own counts (matrix-product FLOP, memory-bound bytes, kernels), which
tests/analysis and tests/compiled check against the models' dimensions. The
steps are compiled on the CPU (no target): their compute is priced from their
totals (`xla_cost.timemodel.kernel_time.price_totals`), so a phase's compute is
its matrix-product FLOP and its memory-bound bytes (the CPU's kernels are not
charged a launch).
"""

from __future__ import annotations

import dataclasses
import math
import types

import jax
import pytest

import xla_cost
from xla_cost.errors import InputError
from xla_cost.plugins import has_libtpu
from xla_cost.present.units import duration, size
from xla_cost.timemodel import devices
from xla_cost.timemodel.calibration import Calibration, describe, use_constants
from xla_cost.timemodel.hardware import Hardware
from xla_cost.timemodel.schedule import Layout
from xla_cost.runs import estimates, scaling
from xla_cost.runs.configs import RunConfig
from xla_cost.runs.step_communication import PIECES
from xla_cost.zoo import build_model, example_inputs

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 simulated devices (tests/conftest.py)")

# NVIDIA H100 datasheet, SXM5: TF32 494.7 TFLOPS dense (XLA's float32 matmuls), HBM3 3.35 TB/s;
# NVLink 4: 450 GB/s per device and direction, 1 us per hop assumed; InfiniBand NDR between nodes:
# 400 Gb/s = 50 GB/s per device and direction, 5 us per hop assumed
H100_TF32, H100_HBM, NVLINK_B, NVLINK_ALPHA = 494.7e12, 3.35e12, 450e9, 1e-6
IB_B, IB_ALPHA = 400e9 / 8, 5e-6
# a pipeline's send/recv within an H100 node at NCCL's measured bus bandwidth (xla_cost.timemodel.bus, its sources
# there): under the table's smallest size, 32 KiB, a message takes that size's time, 32 KiB at the 8x H200
# all-reduce table's 3.20 GB/s (Bekman, network/benchmarks/README.md) in the shape of the ring's all-gather, whose
# 16 GiB busbw is 361.4 GB/s of that table's 480.7 (Bekman, network/README.md 'SHARP')
NVLINK4_SMALLEST_SEND_S = 32 * 1024 / (3.20e9 * 361.4 / 480.7)
CONSTANTS = Calibration(matmul=0.5, memory=0.8, launch=3e-6)  # one set for every device
F32 = 4  # bytes per element

# a GPT-2 small of 4 layers, d_model 64, 4 heads, 32 positions, 256 tokens: seconds to analyse
TINY = {"n_layer": 4, "d_model": 64, "n_head": 4, "seq_len": 32, "vocab_size": 256}
BATCH = 2  # samples per micro-batch per replica
MESH = {"data": 2, "model": 2, "pipeline": 2}


# A pipeline stage, a mesh and its replicas analyse the same programs again (a stage's update, the
# one-device step): each compiled once in the module (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("module_caches")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return str(tmp_path_factory.mktemp("store") / "results.sqlite")


def _calibrated(costs, devices: int = 1) -> float:
    # matrix products at half the TF32 peak, memory-bound bytes at 0.8 of HBM3 (the totals path: no launches)
    return costs.matmul_flops / devices / (0.5 * H100_TF32) + costs.memory_bound_bytes / (0.8 * H100_HBM)


def _roofline(costs) -> float:
    return max(costs.flops / H100_TF32, costs.bytes_accessed / H100_HBM)


def _dispatch(report) -> float:
    """The H100 host's measured dispatch of a one-device step's grad and update calls
    (`xla_cost.timemodel.devices.Dispatch`: a call, then each further array passed)."""
    measured = devices.device("h100").dispatch
    passed = report.phases["grad"].arguments + report.phases["update"].arguments
    return 2 * measured.call + (passed - 2) * measured.per_argument


def test_estimate_predicts_by_default_and_bounds_when_asked(store):
    one = RunConfig("conv_net", 2, {}, optimizer="adam").canonical().run(cache=store)
    with use_constants(CONSTANTS):
        predicted = estimates.estimate("conv_net", samples=1000, batch_size=2, store=store)
    # a prediction: the one-device step's backward pass and update, each calibrated, and never less than
    # the host's dispatch of their two calls (the H100 machine's, measured: a batch of 2 waits for it)
    compute = _calibrated(one.phases["grad"]) + _calibrated(one.phases["update"])
    dispatch = _dispatch(one)
    assert dispatch > compute and predicted.step.parts["dispatch_wait"] == pytest.approx(dispatch - compute, rel=1e-12)
    assert any(n.startswith("host-bound: dispatching the step takes") for n in predicted.step.notes)
    assert predicted.step.prediction.compute_seconds == pytest.approx(compute, rel=1e-12)
    assert predicted.step.prediction.seconds == pytest.approx(dispatch, rel=1e-12)  # one device talks to no one
    assert predicted.steps == math.ceil(1000 / 2)
    assert predicted.seconds == pytest.approx(predicted.steps * dispatch, rel=1e-12)
    assert predicted.priced_as == "prediction" and predicted.to_dict()["mfu"] is None
    assert predicted.step.calibration == describe(CONSTANTS)
    assert predicted.step.calibration.startswith("products at 50.0% of peak")
    assert predicted.to_dict()["calibration"] == predicted.step.calibration
    # compiled on the CPU (no target): priced from its program's totals, and the header says so, not "every kernel"
    assert f"predicted: from the totals of a program compiled without a target ({describe(CONSTANTS)})" \
        in predicted.describe()
    # the parts add up to the step
    assert sum(predicted.step.parts.values()) == pytest.approx(predicted.step.prediction.seconds, rel=1e-12)

    bound = estimates.estimate("conv_net", samples=1000, batch_size=2, bound=True, store=store)
    # a bound: the roofline at the datasheet's peaks, MFU 1
    assert bound.step.prediction.seconds == pytest.approx(_roofline(one.phases["grad"]) + _roofline(one.phases["update"]),
                                                          rel=1e-12)
    assert bound.priced_as == "bound" and bound.to_dict()["calibration"] is None and bound.to_dict()["mfu"] == 1.0
    assert "a bound: compute at 100% of peak (roofline), nothing hidden, flat rings" in bound.describe()
    # Hardware.bound's documented fields on the default device: compute at peak, nothing hidden,
    # every gradient on its own, flat rings
    assert bound.hardware == Hardware(device="h100", overlap=0.0, mfu=1.0, bucket_bytes=0, hierarchical=False)


@pytest.mark.parametrize("samples, steps", [
    (1000, 500),  # 1000 / 2 samples a step: 500 whole steps
    (1001, 501),  # 1001 / 2 = 500.5: the last step, of 1 sample, still runs: ceil gives 501
    (1, 1),       # fewer samples than a step's batch: one (partial) step
])
def test_every_sample_is_in_a_step(store, samples, steps):
    one = RunConfig("conv_net", 2, {}, optimizer="adam").canonical().run(cache=store)
    with use_constants(CONSTANTS):
        result = estimates.estimate("conv_net", samples=samples, batch_size=2, store=store)
    assert result.samples == samples and result.steps == steps
    # each step the one-device step's calibrated backward pass and update, or the host's dispatch of them
    step_s = max(_calibrated(one.phases["grad"]) + _calibrated(one.phases["update"]), _dispatch(one))
    assert result.seconds == pytest.approx(steps * step_s, rel=1e-12)
    # FLOP count samples, not steps: train-step FLOP / batch 2 per sample
    assert result.total_flops == pytest.approx(one.phases["train_step"].flops / 2 * samples, rel=1e-12)


def test_estimate_refuses_what_it_cannot_price(store):
    with pytest.raises(InputError, match="a dtype the NVIDIA Tesla P100 SXM2 has a published peak for"):
        estimates.estimate("conv_net", samples=10, device="p100", dtype="bfloat16")  # no bfloat16 units
    # issue 32: a device without constants of its own (a V100) is no longer refused: one set for every device
    on_v100 = estimates.estimate("conv_net", samples=10, batch_size=2, device="v100", store=store)
    assert on_v100.priced_as == "prediction" and on_v100.hardware.device == "v100"
    with pytest.raises(InputError, match=r"mfu in \(0, 1\]"):
        estimates.estimate("conv_net", samples=10, mfu=1.5)
    with pytest.raises(InputError, match="n_layer"):
        estimates.estimate("conv_net", samples=10, mesh={"pipeline": 2})  # no layers to split
    with pytest.raises(InputError, match="not both"):
        estimates.estimate("conv_net", samples=10, devices=2, mesh={"data": 2})
    with pytest.raises(InputError, match="mesh axes among data, fsdp, expert, context, model, pipeline"):
        estimates.estimate("conv_net", samples=10, mesh="data=2,stage=2")
    with pytest.raises(InputError, match="at most n_layer = 4 pipeline stages"):
        estimates.estimate("gpt2-small", tokens=10, config=TINY, mesh={"pipeline": 8})
    with pytest.raises(InputError, match="micro-batches"):
        estimates.estimate("conv_net", samples=10, micro_batches=0)


def test_the_batch_is_the_input_shapes_first_axis_as_on_the_command_line(store):
    # `xla-cost estimate/scaling --input-shape 8,16` take the batch from the shape's first axis; from Python
    # the same call without batch_size= ran batch 1 (64 samples: 64 steps, each point of a curve 1 per device)
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(10)(nn.relu(nn.Dense(16)(x)))

    samples, shape = 64, (8, 16)
    run = estimates.estimate(MLP(), samples=samples, input_shape=shape, bound=True, store=store)
    assert (run.step.global_batch, run.steps) == (shape[0], samples // shape[0])
    given = estimates.estimate(MLP(), samples=samples, input_shape=shape, batch_size=4, bound=True, store=store)
    assert (given.step.global_batch, given.steps) == (4, samples // 4)  # a batch_size given replaces it
    curve = scaling.scaling(MLP(), devices=(1, 2), input_shape=shape, bound=True, store=store)
    assert curve.batch_size == shape[0] and [s.global_batch for s in curve.steps] == [shape[0], 2 * shape[0]]
    strong = scaling.scaling(MLP(), devices=(1, 2), input_shape=shape, global_batch=16, bound=True, store=store)
    assert [s.global_batch for s in strong.steps] == [16, 16]  # global_batch= splits, the shape's axis aside


def test_layout_mesh_reads_the_pipeline_axis():
    assert scaling.layout_mesh("pipeline=8,model=8,data=16") == {"data": 16, "model": 8, "pipeline": 8}
    assert scaling.layout_mesh({"pipeline": 2}) == {"pipeline": 2}
    assert scaling.layout_mesh(None) == {}
    for bad in ("pipeline=0", "pipeline=2,pipeline=4", "data", {"model": 2.5}):
        with pytest.raises(InputError):
            scaling.layout_mesh(bad)


@pytest.fixture(scope="module")
def pipelined(store):
    with use_constants(CONSTANTS):
        return {m: estimates.estimate("gpt2-small", tokens=64_000, config=TINY, batch_size=BATCH, mesh=MESH,
                                    micro_batches=m, store=store) for m in (1, 4)}


def test_a_pipeline_stage_is_its_share_of_the_layers_on_the_model_axis(pipelined, store):
    result = pipelined[4]
    # the analysed program: one stage of n_layer / pipeline = 4 / 2 = 2 layers, tensor parallel over 2 devices
    stage = RunConfig("gpt2-small", BATCH, {**TINY, "n_layer": 2}, optimizer="adam", mesh={"model": 2}).canonical()
    assert result.step.flops == stage.run(cache=store).phases["train_step"].flops
    # every device: model 2 x pipeline 2 x data 2; a step: 2 samples x 4 micro-batches x 2 replicas
    assert result.devices == 2 * 2 * 2 and result.step.devices == 8
    assert result.step.global_batch == BATCH * 4 * 2
    # FLOP per sample from the whole model (4 layers) on one device, counted from its jaxpr (no device of a
    # pipeline runs the whole model: it is not compiled); a sample is a sequence of 32 tokens
    whole = xla_cost.analyze(build_model("gpt2-small", **TINY), example_inputs("gpt2-small", BATCH, **TINY),
                             optimizer="adam", counter="jaxpr").phases
    # the update once a step of 4 micro-batches (test_the_update_is_spread_over_a_steps_samples_once_...)
    per_sample = (whole["train_step"].flops - whole["update"].flops * (1 - 1 / 4)) / BATCH
    assert result.flops_counted == "jaxpr" and result.flops_per_sample == pytest.approx(per_sample, rel=1e-12)
    assert any("each device of the pipeline runs a stage" in note for note in result.notes())
    assert result.samples == 64_000 // 32 and result.steps == math.ceil(64_000 / 32 / (BATCH * 4 * 2))
    data = result.to_dict()
    assert data["mesh"] == MESH and data["micro_batches"] == 4 and data["priced_as"] == "prediction"
    assert "(data=2,model=2,pipeline=2, 4 micro-batch(es) a step)" in result.describe()


def test_the_pipeline_bubble_shrinks_with_the_micro_batches(pipelined):
    p = MESH["pipeline"]
    # each stage sends its activations (batch x positions x d_model, float32) forward and their
    # gradient back, each of its 2 tensor-parallel devices its half, on NVLink 4 within one node: 8 KiB,
    # under the measured send/recv curve's smallest size, each way in that size's time
    stage_bytes = BATCH * TINY["seq_len"] * TINY["d_model"] * F32
    assert stage_bytes / MESH["model"] < 32 * 1024
    transfer = 2 * NVLINK4_SMALLEST_SEND_S
    shares = {}
    for m, result in pipelined.items():
        parts = result.step.parts
        compute = (parts["matmul"] + parts["memory"] + parts["launch"]) / m  # one micro-batch on the slowest stage
        tensor = parts["tensor"] / m
        slot = compute + tensor + transfer
        # 1F1B: m + p - 1 slots: each micro-batch's transfers, and p - 1 idle slots (the bubble)
        assert parts["stage_transfers"] == pytest.approx(m * transfer, rel=1e-9)
        bubble = (p - 1) * slot
        assert parts["pipeline_bubble"] == pytest.approx(bubble, rel=1e-9)
        shares[m] = bubble / (m * slot + bubble)
        assert shares[m] == pytest.approx((p - 1) / (m + p - 1), rel=1e-9)  # 1/2 at m = 1, 1/5 at m = 4
        assert sum(parts.values()) == pytest.approx(result.step.prediction.seconds, rel=1e-12)
    assert shares[4] < shares[1]
    # the per-sample time falls as the bubble shrinks: 4 micro-batches carry 4x the samples in less than 4x the time
    one, four = pipelined[1].step, pipelined[4].step
    assert four.prediction.seconds / four.global_batch < one.prediction.seconds / one.global_batch


@pytest.mark.parametrize("m", [1, 4])
def test_communication_not_hidden_is_never_more_than_communication(pipelined, m):
    # issue 30: data=2,model=2,pipeline=2 with 1 micro-batch printed communication 0.027 ms and
    # "communication not hidden" 1.053 ms: the pipeline's idle slots were counted as communication
    result = pipelined[m]
    parts, p = result.step.parts, MESH["pipeline"]
    predicted = result.step.prediction
    transfer = 2 * NVLINK4_SMALLEST_SEND_S  # as above: out and back, NVLink 4, 8 KiB each way
    # communication: every collective and transfer; not hidden: the tensor-parallel collectives and the
    # transfers (they block) and the gradients past the backward pass (parts["gradients"])
    assert predicted.exposed_communication_seconds == pytest.approx(
        parts["tensor"] + m * transfer + parts["gradients"], rel=1e-12)
    assert predicted.exposed_communication_seconds <= predicted.communication_seconds
    assert predicted.communication_seconds >= parts["tensor"] + m * transfer
    # the bubble is its own part: (p - 1) / (v m) of the m slots (v = 1 chunk), idle, not communication
    slot = (parts["matmul"] + parts["memory"] + parts["launch"] + parts["tensor"]) / m + transfer
    assert parts["pipeline_bubble"] == pytest.approx((p - 1) / (1 * m) * (m * slot), rel=1e-9)
    # the step is compute + communication not hidden + bubble, and what it waits for its host's dispatch
    assert predicted.seconds == pytest.approx(
        predicted.compute_seconds + predicted.exposed_communication_seconds + parts["pipeline_bubble"]
        + parts["dispatch_wait"], rel=1e-12)
    text = result.to_table(width=100)
    assert "pipeline bubble" in text and "stage transfers" in text


@pytest.mark.parametrize("node_size, bandwidth, alpha", [
    (2, IB_B, IB_ALPHA),            # the 2-device stage fills its node of 2: the next stage is on another
    (4, NVLINK_B, NVLINK_ALPHA),    # a node of 4 holds it and the next stage (node_size / 2)
])
def test_a_stage_that_fills_its_node_talks_to_the_other_stages_and_replicas_over_the_network(
        store, node_size, bandwidth, alpha):
    # the pipelined fixture's analysed stage: 2 of the 4 layers, tensor parallel over 2 devices
    stage = RunConfig("gpt2-small", BATCH, {**TINY, "n_layer": 2}, optimizer="adam",
                      mesh={"model": 2}).canonical().run(cache=store)
    p, m, replicas = 2, 4, 2
    stage_bytes = BATCH * TINY["seq_len"] * TINY["d_model"] * F32  # the residual stream, float32
    with use_constants(CONSTANTS):
        # the network's latency given (the preset's 5 us): the alpha-beta model at the stated figures below
        # (the preset alone prices the measured NCCL curves, tests/timemodel/test_bus.py)
        step = scaling.predict(stage, Hardware("h100", node_size=node_size, latency=IB_ALPHA),
                               Layout(pipeline=p, micro_batches=m, data=replicas, stage_bytes=stage_bytes))
    parts = step.parts
    # each of the stage's 2 devices sends its half of the activations out and of their gradient back:
    # between nodes when the stage fills one, else within it
    transfer = 2 * stage_bytes / 2 / bandwidth + 2 * alpha
    slot = (parts["matmul"] + parts["memory"] + parts["launch"] + parts["tensor"]) / m + transfer
    assert parts["stage_transfers"] == pytest.approx(m * transfer, rel=1e-9)
    assert parts["pipeline_bubble"] == pytest.approx((p - 1) * slot, rel=1e-9)
    # the replicas' gradient all-reduce, of each device's parameter bytes in PIECES pieces over the 2
    # replicas: one replica is 2 (tensor) x 2 (stages) = 4 devices, a node of 4 or two of 2, so the
    # other replica is on other nodes either way (issue 32: a node of 4 priced it on NVLink before)
    piece = stage.sharding["params_bytes_per_device"] // PIECES
    reduced = step.collectives[-PIECES:]
    assert [(t.kind, t.group_size, t.nbytes, t.executions, t.link) for t in reduced] \
        == [("all-reduce", replicas, piece, 1, "ib-ndr")] * PIECES
    for t in reduced:  # a ring of 2: 2 (n - 1) / n S / B + 2 (n - 1) alpha
        assert t.seconds == pytest.approx(2 * 1 / 2 * piece / IB_B + 2 * 1 * IB_ALPHA, rel=1e-12)


def test_scaling_grows_replicas_around_a_mesh(store):
    with use_constants(CONSTANTS):
        curve = scaling.scaling("gpt2-small", [1, 2, 4], mesh={"model": 2, "pipeline": 2}, micro_batches=2,
                                config=TINY, batch_size=1, store=store)
    # K replicas of a 2 x 2 layout: 4, 8 and 16 devices, 1 sample x 2 micro-batches x K a step
    assert [s.devices for s in curve.steps] == [4, 8, 16]
    assert [s.global_batch for s in curve.steps] == [2, 4, 8]
    assert len({s.flops for s in curve.steps}) == 1  # one analysed program: the replicas are the layout's
    assert all(p.efficiency <= 1 for p in curve.points)
    assert curve.to_dict()["mesh"] == {"model": 2, "pipeline": 2} and curve.to_dict()["priced_as"] == "prediction"
    assert "around model=2,pipeline=2, 2 micro-batches a step" in curve.describe()
    with pytest.raises(InputError, match="without the grown axis"):
        scaling.scaling("gpt2-small", [1, 2], mesh={"data": 2}, config=TINY)


def test_fsdp_grows_in_the_program_and_keeps_its_sharded_update(store):
    with use_constants(CONSTANTS):
        curve = scaling.scaling("gpt2-small", [1, 2], mesh_axis="fsdp", mesh={"model": 2}, config=TINY,
                                batch_size=1, store=store)
    one, two = (RunConfig("gpt2-small", k, TINY, mesh={"model": 2, **({"fsdp": 2} if k > 1 else {})}).canonical()
                .run(cache=store) for k in (1, 2))
    assert [s.devices for s in curve.steps] == [2, 4] and curve.steps[1].flops == two.phases["train_step"].flops
    # the point on 4 devices: the backward pass's compute of the 2-device program (1 sample a
    # device), the update of its own program (ZeRO-3 updates each device's half of the parameters)
    matmul = one.phases["grad"].matmul_flops / 2 / (0.5 * H100_TF32)
    backward = matmul + one.phases["grad"].memory_bound_bytes / (0.8 * H100_HBM)
    update = _calibrated(two.phases["update"], two.devices)
    parts = curve.steps[1].parts
    assert parts["matmul"] + parts["memory"] + parts["launch"] == pytest.approx(backward, rel=1e-12)
    assert curve.steps[1].parts["update"] == pytest.approx(update, rel=1e-12)
    assert any("priced from the program on model=2" in n for n in curve.steps[1].notes)


# a GPT-2 small of 2 layers, 256 positions of width 64, 8 sequences per device: the CPU
# compiles its one-device step with 5% more memory traffic than the same step sharded
# over 2 devices (the softmax is fused differently around the sharding constraints)
ARTEFACT = {"n_layer": 2, "seq_len": 256, "d_model": 64, "n_head": 4, "vocab_size": 256}


@pytest.mark.parametrize("bound", [True, False])
def test_weak_scaling_efficiency_is_never_above_one(store, bound):
    curve = scaling.scaling("gpt2-small", [1, 2, 4], batch_size=8, config=ARTEFACT, bound=bound, store=store)
    for point in curve.points:
        assert point.efficiency <= 1
    first = curve.steps[0].prediction.compute_seconds
    # data parallel, 8 samples a device: the same per-device work at every count
    assert all(s.prediction.compute_seconds == pytest.approx(first, rel=1e-12) for s in curve.steps)
    if bound:
        # each point priced on its own program instead: 2 devices above linear, the artefact this fixes
        one, two = (RunConfig("gpt2-small", 8 * k, ARTEFACT, mesh={"data": k} if k > 1 else {}).canonical()
                    .run(cache=store) for k in (1, 2))
        own = [scaling.predict(r, Hardware().bound()) for r in (one, two)]
        assert scaling.speedup(*own) / 2 > 1


def test_a_stage_sends_its_residual_stream():
    from xla_cost.runs import layouts

    # token models: batch x seq_len x d_model x bytes per element (bfloat16: 2)
    gpt = RunConfig("gpt2-small", 2, TINY, dtype="bfloat16")
    assert layouts.activation_bytes(gpt) == 2 * TINY["seq_len"] * TINY["d_model"] * 2
    # a vision transformer: its (image_size / patch_size)^2 patches and the class token, float32
    vit = RunConfig("vit-b16", 2, {"image_size": 32, "patch_size": 16, "d_model": 64})
    assert layouts.activation_bytes(vit) == 2 * ((32 // 16) ** 2 + 1) * 64 * F32
    # a stage holds ceil(n_layer / stages) layers
    assert layouts.pipeline_stage(RunConfig("gpt2-small", 1, {"n_layer": 5}), 2).config["n_layer"] == 3


# --------------------------------------------------------------------------------------------------
# What a planner asks (issue 51): throughput per device and for the run, MFU and HFU, the model as
# configured, totals a reader reads, a memory verdict, a target's layout compiled sharded.

def _forward_products(config: dict) -> int:
    """The tiny GPT-2's forward matrix-product FLOP per sample (a multiply-add is 2 FLOP): per token
    and layer q, k, v and the output projection 2 x 4d^2 and the MLP's two 2 x 4d^2 (d_ff = 4d), the
    scores and the weighted values 2 x 2Td (every T x T pair), and the tied head 2Vd per token."""
    layers, d, t, v = config["n_layer"], config["d_model"], config["seq_len"], config["vocab_size"]
    return t * (layers * (24 * d * d + 4 * t * d) + 2 * v * d)


def test_throughput_mfu_and_hfu_of_a_run(pipelined):
    result = pipelined[4]
    step_s = result.step.prediction.seconds
    # a step carries the global batch: 2 samples x 4 micro-batches x 2 replicas, each seq_len tokens
    assert result.sequence_length == TINY["seq_len"]
    assert result.samples_per_second == pytest.approx(BATCH * 4 * 2 / step_s, rel=1e-12)
    assert result.tokens_per_second == pytest.approx(BATCH * 4 * 2 * TINY["seq_len"] / step_s, rel=1e-12)
    # per device: over the 2 x 2 x 2 devices of data=2,model=2,pipeline=2
    assert result.tokens_per_second_per_device == pytest.approx(result.tokens_per_second / 8, rel=1e-12)
    # the model's FLOP of a sample: forward and backward, each product three times (forward, the
    # input's and the weight's gradient: the embedding's gradient needs the first block's input
    # gradient), the elementwise work (norms, softmax, GELU, the loss) under 5% more at d_model 64
    products = 3 * _forward_products(TINY)
    assert products <= result.model_flops_per_sample <= 1.05 * products
    assert result.hardware_flops_per_sample == result.model_flops_per_sample  # no remat: nothing recomputed
    # MFU (Chowdhery et al. 2022, App. B): model FLOP a second per device over the H100's TF32 peak
    mfu = result.model_flops_per_sample * BATCH * 4 * 2 / step_s / 8 / H100_TF32
    assert result.peak_flops == H100_TF32
    assert result.model_flops_utilization == pytest.approx(mfu, rel=1e-12)
    assert result.hardware_flops_utilization == result.model_flops_utilization
    data = result.to_dict()
    assert data["model_flops_utilization"] == pytest.approx(mfu, rel=1e-12) and data["mfu"] is None  # not a bound
    assert data["tokens_per_second_per_device"] == result.tokens_per_second_per_device
    text = result.to_table(width=200)
    assert "tokens per second per device" in text and "MFU (model FLOP / peak)" in text
    # the header names the model as configured: its changed settings, its parameters (GPT-2's
    # Vd + Td + L(12d^2 + 13d) + 2d: embeddings, blocks with biases and norms, the final norm), its layers
    d, layers = TINY["d_model"], TINY["n_layer"]
    parameters = TINY["vocab_size"] * d + TINY["seq_len"] * d + layers * (12 * d * d + 13 * d) + 2 * d
    assert result.parameters == parameters == 218_496
    assert result.describe().startswith(
        "gpt2-small with n_layer=4, d_model=64, n_head=4, seq_len=32, vocab_size=256 "
        "(218.5k parameters, layers unrolled; adam, float32):")
    assert result.settings == TINY and result.layers == "unrolled"


def test_totals_read_in_powers_of_ten_past_the_largest_prefix(pipelined):
    from xla_cost.present.units import amount

    # GPT-3 175B's training compute, Brown et al. 2020, Table D.1: 3.64e3 petaflop/s-days
    gpt3 = 3.64e3 * 1e15 * 86_400
    assert amount(gpt3, "FLOP") == "3.14e23 FLOP"  # not "314,496,000.000 PFLOP"
    assert amount(2.209e15, "FLOP") == "2.21 PFLOP" and amount(512, "FLOP") == "512 FLOP"
    run = pipelined[4].sections()[0].frame.set_index("figure")["value"]
    assert run["total FLOP"] == amount(pipelined[4].total_flops, "FLOP")


def test_the_memory_verdict_comes_from_a_targets_compile(pipelined):
    from xla_cost.analysis.memory import TargetMemory

    result = pipelined[4]  # compiled on the CPU: no device's memory judged
    assert result.target_memory is None and result.memory_verdict == "unknown"
    assert result.to_dict()["memory_verdict"] == "unknown" and "no target compiled" in result.notes()[0]
    gb = 1e9
    judged = {  # peak, exact, recomputed -> the verdict (usable: 16 GB, a TPU v5e's HBM)
        "fits": (8 * gb, True, {}),
        "recomputes": (15 * gb, True, {"donated_train_step": 12}),
        "does not fit": (30 * gb, False, {}),  # a lower bound above the memory: more is needed still
        "unknown": (8 * gb, False, {}),  # a lower bound within it: the step's own peak not known
    }
    for verdict, (peak, exact, recomputed) in judged.items():
        memory = TargetMemory("tpu-v5e:2x2", "Google TPU v5e", 16 * gb, 16 * gb, int(peak),
                              "the donated train step" if exact else "its grad program", exact, recomputed)
        shown = dataclasses.replace(result, target_memory=memory)
        assert shown.memory_verdict == verdict and shown.to_dict()["target_memory"]["peak"] == int(peak)
        assert shown.memory_text().startswith(verdict)
    assert estimates.MEMORY_VERDICTS == tuple(judged)


@pytest.mark.skipif(not has_libtpu(), reason="needs libtpu (the tpu extra)")
def test_a_tpu_layout_is_compiled_sharded_not_whole_on_one_chip(store, monkeypatch):
    # FSDP over a 2x2 v5e slice: each chip's program is the sharded one; the whole model is never
    # compiled for one chip (libtpu refused a model sharded for want of memory as if FSDP did not fit)
    analysed, stages = [], []
    run = RunConfig.run

    def recorded(self, **options):
        analysed.append(self)
        return run(self, **options)

    monkeypatch.setattr(RunConfig, "run", recorded)
    monkeypatch.setattr(estimates, "progress", types.SimpleNamespace(stage=lambda text, *a: stages.append(text)))
    result = estimates.estimate("one_net", samples=1000, batch_size=2, mesh={"fsdp": 4}, target="tpu-v5e:2x2",
                                store=store)
    compiled = [r for r in analysed if r.target is not None]
    assert compiled and all(r.mesh == {"fsdp": 4} and r.batch_size == 2 * 4 for r in compiled)
    assert [(r.target, r.counter) for r in analysed if r.target is None] == [(None, "jaxpr")]  # counted, not compiled
    assert stages == ["the model on one device (its jaxpr)", "the step on 4 device(s) compiled for tpu-v5e:2x2",
                      "priced"] and result.flops_counted == "jaxpr"
    # OneNet, 1 -> 4096 -> 128 -> 10 with biases: its parameters; each chip runs the forward and
    # backward pass of its 2 of the 8 samples and updates its quarter of the parameters (the one-device
    # step's update: a step's 8 samples share one whole update, sharded over the 4 chips, so (train step -
    # grad) per sample x 8), not all 8 samples and the whole update (4x as much); libtpu counts its
    # program's grad up to 15% above the jaxpr (the loss, its padding)
    parameters = (1 * 4096 + 4096) + (4096 * 128 + 128) + (128 * 10 + 10)
    assert result.parameters == parameters and result.layers == "unrolled"
    update = 4 * 2 * (result.flops_per_sample - result.model_flops_per_sample)
    assert result.step.flops == pytest.approx(2 * result.model_flops_per_sample + update / 4, rel=0.15)
    # the donated train step's exact peak, judged on one v5e's 16 GB: at least each chip's quarter of
    # the float32 parameters and Adam's two moments, donated in place (3 x 4 bytes a parameter)
    memory = result.target_memory
    assert memory.exact and result.memory_verdict == "fits" and result.to_dict()["memory_verdict"] == "fits"
    assert 3 * 4 * parameters / 4 <= memory.peak <= memory.usable == 16e9
    assert result.memory_text() == f"fits: {size(memory.peak)} of 16.0 GB"
    assert "(533.9k parameters, layers unrolled; adam, float32) compiled for tpu-v5e:2x2" in result.describe()
    # the constants a TPU's pricing reads, not a GPU library's (cuDNN's calls, the CUDA cores' convolutions)
    assert "products at" in result.describe() and "cuDNN" not in result.describe() \
        and "CUDA cores" not in result.describe()


def test_hfu_counts_the_recomputation_of_a_scanned_remat_model(store):
    config = {**TINY, "n_layer": 1, "scan_layers": True, "remat": "full"}
    with use_constants(CONSTANTS):
        result = estimates.estimate("gpt2-small", tokens=1e6, config=config, batch_size=1, store=store)
    # remat="full": each block's forward recomputed in the backward pass but for the MLP's down
    # projection, whose output nothing in the block's backward reads: per token and layer q, k, v, the
    # output projection and the up projection 2 x 8d^2, the scores and values 4Td; the elementwise
    # work (norms, softmax, GELU) under 10% more at d_model 64
    t, d, layers = config["seq_len"], config["d_model"], config["n_layer"]
    recomputed = result.hardware_flops_per_sample - result.model_flops_per_sample
    products = t * layers * (16 * d * d + 4 * t * d)
    assert products <= recomputed <= 1.1 * products
    assert result.hardware_flops_utilization / result.model_flops_utilization == pytest.approx(
        result.hardware_flops_per_sample / result.model_flops_per_sample, rel=1e-12)
    # the header: the settings changed from gpt2-small's (scan_layers and remat among them), the program's layers
    assert result.layers == "scanned" and result.describe().startswith(
        "gpt2-small with n_layer=1, d_model=64, n_head=4, seq_len=32, vocab_size=256, scan_layers=True, remat=full (")
    assert "parameters, layers scanned; adam, float32):" in result.describe()


def test_a_prediction_carries_the_held_out_interval_beside_each_figure(pipelined, store):
    from xla_cost.timemodel.calibration import PROXY_NO_RANGE, PredictionInterval

    # held-out residuals r = log(predicted / published) with |r| <= 0.2 in 80% of the cases (the median 0.05):
    # a run predicted at s seconds took s e^-0.2 to s e^0.2. Every case was its device's own program priced kernel
    # by kernel: conv_net compiled for the H100 (deviceless) has the range, 1,000 samples of 4 a step
    spread = PredictionInterval(spread=0.2, bias=0.05, cases=20, papers=5, how="given here")
    run = {"samples": 1_000, "batch_size": 4, "target": "h100", "store": store}
    with use_constants(dataclasses.replace(CONSTANTS, interval=spread)):
        result = estimates.estimate("conv_net", **run)
    with use_constants(CONSTANTS):
        plain = estimates.estimate("conv_net", **run)  # the same analysis, priced again
    s = result.seconds
    assert s == plain.seconds  # the interval moves no prediction
    shortest, longest = s * math.exp(-0.2), s * math.exp(0.2)
    assert result.interval == pytest.approx((shortest, longest), rel=1e-12)
    assert shortest < s < longest  # the range holds its figure
    assert "compiled for h100" in result.describe() and "predicted: every kernel priced (" in result.describe()
    # the step's own range (xla_cost.predict's), of which the run's is every step's
    step = result.step.prediction.seconds
    assert result.step.interval == pytest.approx((step * math.exp(-0.2), step * math.exp(0.2)), rel=1e-12)
    spans = result.intervals()
    # a rate's range is the inverse: the samples over the longest time to the samples over the shortest
    assert spans["samples_per_second"] == pytest.approx(
        (result.samples_per_second * s / longest, result.samples_per_second * s / shortest), rel=1e-12)
    assert spans["model_flops_utilization"] == pytest.approx(
        (result.model_flops_utilization * math.exp(-0.2), result.model_flops_utilization * math.exp(0.2)), rel=1e-12)
    data = result.to_dict()["interval"]
    assert data["seconds"] == pytest.approx([shortest, longest], rel=1e-12) and "20 cases of 5 papers" in data["description"]
    assert "the median case ran at 0.95x its predicted time" in data["description"]  # e^-0.05: the bias, said
    table = result.sections()[0].frame.set_index("figure")["value"]
    assert table["time (prediction)"].endswith(f"({duration(shortest)} to {duration(longest)})")
    assert plain.interval is None  # constants without an interval: none, and the notes say so
    assert any(n.startswith("no range beside the predicted figures: no prediction interval") for n in plain.notes())
    # the CPU's program priced from its totals (no target: the pipelined GPT): none whatever the constants carry,
    # and the notes say why, and how to price the run as the validation did
    with use_constants(dataclasses.replace(CONSTANTS, interval=spread)):
        proxy = estimates.estimate("gpt2-small", tokens=64_000, config=TINY, batch_size=BATCH, mesh=MESH,
                                   micro_batches=4, store=store)
    assert proxy.seconds == pipelined[4].seconds and proxy.interval is None and proxy.step.interval is None
    assert f"no range beside the predicted figures: {PROXY_NO_RANGE}" in proxy.notes()
    assert all(span is None for span in proxy.intervals().values())
    with use_constants(dataclasses.replace(CONSTANTS, interval=spread)):
        bound = estimates.estimate("gpt2-small", tokens=64_000, config=TINY, batch_size=BATCH, mesh=MESH,
                                   micro_batches=4, store=store, bound=True)
    assert bound.interval is None and bound.to_dict()["interval"] is None  # a bound has no such range


def test_products_no_rule_splits_are_priced_whole_on_every_device(store):
    # a fourth new user's `estimate gpt2-small ... --mesh model=5`: no dimension divides by 5, every device
    # computes the whole step, yet its products were priced at a fifth (1/T of the jaxpr's whole-step FLOP):
    # a step faster than one device's. Now a device's share is XLA's per-device FLOP over the step's
    # (scaling.device_share), 1 / T where they split evenly (within 5%)
    def matmul(mesh):
        with use_constants(CONSTANTS):
            run = xla_cost.estimate("gpt2-small", tokens=1e6, config=TINY, batch_size=BATCH, mesh=mesh, store=store)
        return run.step.parts["matmul"], run

    whole, one = matmul({"model": 1})
    unsplit, run = matmul({"model": 5})
    assert unsplit == pytest.approx(whole, rel=0.01)
    assert run.step.prediction.seconds >= one.step.prediction.seconds * 0.99  # never faster than one device
    halves, _ = matmul({"model": 2})  # every dimension of TINY divides by 2: an even split
    assert halves == pytest.approx(whole / 2, rel=1e-9)


def test_the_update_is_spread_over_a_steps_samples_once_and_over_its_fsdp_shards(store):
    # per step each device runs M micro-batches' forward and backward and one update (sharded over an FSDP
    # group): per sample, grad / B + update / (fsdp * B * M), B the micro-batch; the update's share is
    # flops_per_sample - model_flops_per_sample (no remat)
    one = RunConfig("one_net", 2, {}, optimizer="adam").canonical().run(cache=store)
    update, grad = one.phases["update"].flops, one.phases["grad"].flops
    runs = {name: estimates.estimate("one_net", samples=10_000, batch_size=2, store=store, **kw) for name, kw in (
        ("replicas", {"devices": 8}), ("micro", {"devices": 8, "micro_batches": 4}),
        ("fsdp", {"devices": 8, "mesh_axis": "fsdp"}))}
    for name, shares in (("replicas", 1), ("micro", 4), ("fsdp", 8)):
        run = runs[name]
        assert run.flops_per_sample == pytest.approx((grad + update / shares) / 2, rel=1e-12), name
        assert run.flops_per_sample - run.model_flops_per_sample == pytest.approx(update / shares / 2, rel=1e-9)
        assert run.total_flops == pytest.approx(run.flops_per_sample * 10_000, rel=1e-12)
