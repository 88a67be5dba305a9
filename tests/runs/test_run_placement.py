"""`predict` prices each group on the links its devices share (issue 32).

A run lays its devices out tensor x pipeline x data, tensor innermost
(`xla_cost.timemodel.schedule.run_mesh`): the replicas' gradient all-reduce
crosses nodes once one replica (tensor x stages) fills a node, a pipeline's
transfers run on the link neighbouring stages share, and a TPU slice's
replicas meet on the data-center network. The analysed step is a 4-layer
GPT-2 (d_model 64) tensor parallel over 4 devices; prices are bounds at the
roofline with nothing hidden, so every collective is its ring formula
(Patarasuk and Yuan 2009) on the cited link: NVLink 4 450 GB/s, InfiniBand
NDR 50 GB/s (H100 datasheet, DGX H100 user guide), 1 and 5 us per hop
(`xla_cost.timemodel.comm`'s stated assumptions).
"""

from __future__ import annotations

import dataclasses

import pytest

import xla_cost
from xla_cost.errors import InputError
from xla_cost.timemodel.hardware import Hardware
from xla_cost.timemodel.schedule import Layout
from xla_cost.runs.configs import RunConfig
from xla_cost.runs.scaling import predict
from xla_cost.runs.step_communication import PIECES

TINY = {"n_layer": 4, "d_model": 64, "n_head": 4, "seq_len": 32, "vocab_size": 256}
TENSOR, F32 = 4, 4
NVLINK_B, NVLINK_ALPHA, IB_B, IB_ALPHA = 450e9, 1e-6, 400e9 / 8, 5e-6
EXPOSED = dict(mfu=1.0, overlap=0.0, bucket_bytes=0)  # the roofline, every collective on its own, nothing hidden


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    xla_cost.simulate_devices(8)
    store = str(tmp_path_factory.mktemp("store") / "results.sqlite")
    return RunConfig("gpt2-small", 2, TINY, optimizer="sgd", mesh={"model": TENSOR}).canonical().run(cache=store)


def _all_reduce(nbytes: float, n: int, bandwidth: float, alpha: float) -> float:
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * alpha


def test_the_384_gpu_runs_gradient_all_reduce_crosses_nodes(report):
    # tensor 4 x pipeline 12 x data 8 = 384 H100s, 18.5 GB of parameters per GPU: one replica is 48 GPUs
    # (6 nodes of 8), so each data-parallel group has one GPU on each of 8 nodes: InfiniBand NDR, not NVLink
    big = dataclasses.replace(report, sharding={**report.sharding, "params_bytes_per_device": 18_500_000_000})
    layout = Layout(pipeline=12, data=8, stage_bytes=1)
    step = predict(big, Hardware("h100", **EXPOSED), layout)
    assert step.devices == TENSOR * 12 * 8
    piece = 18_500_000_000 // PIECES
    replicas = step.collectives[-PIECES:]
    assert {(t.kind, t.group_size, t.nbytes, t.link) for t in replicas} == {("all-reduce", 8, piece, "ib-ndr")}
    assert sum(t.seconds for t in replicas) == pytest.approx(PIECES * _all_reduce(piece, 8, IB_B, IB_ALPHA))
    # an interconnect given prices what crosses nodes (25GbE, 10 us a hop); so does an adapter's bandwidth
    slow = predict(big, Hardware("h100", interconnect="ethernet-25g", **EXPOSED), layout)
    assert sum(t.seconds for t in slow.collectives[-PIECES:]) == pytest.approx(
        PIECES * _all_reduce(piece, 8, 25e9 / 8, 10e-6))
    given = predict(big, Hardware("h100", bandwidth=25e9, **EXPOSED), layout)
    assert sum(t.seconds for t in given.collectives[-PIECES:]) == pytest.approx(
        PIECES * _all_reduce(piece, 8, 25e9, IB_ALPHA))
    # two replicas of 4 GPUs share a node of 8 (no pipeline): their all-reduce stays on NVLink
    near = predict(big, Hardware("h100", **EXPOSED), Layout(data=2))
    assert {t.link for t in near.collectives[-PIECES:]} == {"nvlink4"}


@pytest.mark.parametrize("node_size, bandwidth, alpha", [
    (8, NVLINK_B, NVLINK_ALPHA),  # 2 stages of 4 GPUs in one node of 8
    (4, IB_B, IB_ALPHA),          # a stage fills its node of 4: the next stage is on another node
])
@pytest.mark.parametrize("chunks", [1, 2])
def test_stage_transfers_run_on_the_link_neighbouring_stages_share(report, node_size, bandwidth, alpha, chunks):
    p, m = 2, 4
    stage_bytes = 2 * TINY["seq_len"] * TINY["d_model"] * F32  # the residual stream of a micro-batch of 2
    step = predict(report, Hardware("h100", node_size=node_size, **EXPOSED),
                   Layout(pipeline=p, micro_batches=m, chunks=chunks, stage_bytes=stage_bytes))
    # each of the stage's 4 GPUs sends its quarter out and receives its gradient back, at each of the v
    # chunk boundaries (Narayanan et al. 2021, section 2.2: v times the communication)
    transfer = chunks * (2 * stage_bytes / TENSOR / bandwidth + 2 * alpha)
    assert step.parts["stage_transfers"] == pytest.approx(m * transfer, rel=1e-12)
    # the bubble: (p - 1) / (v m) of the m slots
    slot = (step.parts["roofline"] + step.parts["tensor"]) / m + transfer
    assert step.parts["pipeline_bubble"] == pytest.approx((p - 1) / (chunks * m) * m * slot, rel=1e-9)


def test_chunks_need_a_pipeline():
    with pytest.raises(InputError, match="only with a pipeline") as err:
        Layout(chunks=2)
    assert "\n" not in str(err.value)


def test_a_tpu_slices_replicas_meet_on_the_data_center_network(report):
    # the step compiled for a v5e 2x2 slice (4 chips): tensor parallel on its ICI, 2 replicas in 2 slices,
    # on each chip's share of its host's DCN: 2 x 100 Gb/s per 8 chips (Cloud TPU v5e documentation)
    sliced = dataclasses.replace(report, target="tpu-v5e:2x2")
    step = predict(sliced, Hardware("tpu-v5e", **EXPOSED), Layout(data=2))
    dcn = 2 * 100e9 / 8 / 8
    piece = report.sharding["params_bytes_per_device"] // PIECES
    replicas = step.collectives[-PIECES:]
    assert {(t.link, t.group_size) for t in replicas} == {("ethernet-100g:2/8", 2)}
    assert sum(t.seconds for t in replicas) == pytest.approx(PIECES * _all_reduce(piece, 2, dcn, 10e-6))
    assert {t.link for t in step.collectives[:-PIECES]} == {"tpu-v5e-ici"}  # the tensor-parallel ones


@pytest.mark.parametrize("mfu", [1.0, 1e-5])  # the tiny step's compute under its collectives, then over them
def test_overlapped_collectives_and_transfers_block_only_what_outlasts_the_compute(report, mfu):
    # Transformer Engine's userbuffers overlap (NeMo's tp_comm_overlap) runs the tensor-parallel collectives
    # beside the products, Megatron's overlap_p2p_comm the stage transfers beside the stage's compute: of
    # each, only max(its time - the compute, 0) a micro-batch blocks the step (as a bound, the products'
    # time is the roofline's)
    p, m = 2, 4
    hardware = Hardware("h100", **{**EXPOSED, "mfu": mfu})
    layout = Layout(pipeline=p, micro_batches=m, stage_bytes=2 * TINY["seq_len"] * TINY["d_model"] * F32)
    blocking = predict(report, hardware, layout)
    hidden = predict(report, hardware, dataclasses.replace(layout, overlap_tensor=True, overlap_transfers=True))
    compute, tensor, transfer = (blocking.parts[k] / m for k in ("roofline", "tensor", "stage_transfers"))
    assert tensor > 0 and transfer > 0
    exposed_tensor, exposed_transfer = max(tensor - compute, 0.0), max(transfer - compute, 0.0)
    assert hidden.parts["tensor"] == pytest.approx(m * exposed_tensor, rel=1e-12, abs=1e-15)
    assert hidden.parts["stage_transfers"] == pytest.approx(m * exposed_transfer, rel=1e-12, abs=1e-15)
    slot = compute + exposed_tensor + exposed_transfer
    assert hidden.parts["pipeline_bubble"] == pytest.approx((p - 1) / m * m * slot, rel=1e-9)
    assert (exposed_tensor > 0) == (mfu == 1.0)  # both branches of the max
    # the collectives are the same, and counted: only what blocks the step changed
    assert hidden.prediction.communication_seconds == pytest.approx(blocking.prediction.communication_seconds)
    assert hidden.prediction.seconds < blocking.prediction.seconds
    assert any("overlapped with the matrix products" in n for n in hidden.notes)
    assert any("pipeline transfers overlapped" in n for n in hidden.notes)


def test_an_overlap_is_true_or_false():
    with pytest.raises(InputError, match="overlap_tensor True or False") as err:
        Layout(pipeline=2, overlap_tensor=1)
    assert "\n" not in str(err.value)
