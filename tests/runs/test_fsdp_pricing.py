"""ZeRO-3 (FSDP) priced as it runs (issue 32): each unit's parameters
all-gathered over the ``fsdp`` group before its forward and its backward
pass, its gradients reduce-scattered after it, behind the neighbouring
unit's compute; not the CPU program's one gradient all-reduce behind the
backward pass.

The analysed step is a 4-layer GPT-2 (d_model 64) sharded ``fsdp=4``;
prices are bounds at a fixed MFU (the roofline: compute from the program's
own FLOP and bytes, which tests/analysis checks), with the gradients
scheduled. Expected figures are ring formulas (Patarasuk and Yuan 2009)
over the H100 cluster's links (NVLink 4 450 GB/s, InfiniBand NDR 50 GB/s per
direction; 1 and 5 us per hop, `xla_cost.timemodel.comm`'s stated assumptions), as a bound prices
them; a prediction's collectives (the last two tests) at the measured NCCL bus bandwidth
(`xla_cost.timemodel.bus`), each figure typed in from its source.
"""

from __future__ import annotations

import math

import pytest

import xla_cost
from xla_cost.parallel.placement import Span, span
from xla_cost.timemodel import schedule
from xla_cost.timemodel.hardware import Hardware
from xla_cost.timemodel.schedule import Layout
from xla_cost.runs.configs import RunConfig
from xla_cost.runs.layouts import fsdp_units
from xla_cost.runs.scaling import predict

TINY = {"n_layer": 4, "d_model": 64, "n_head": 4, "seq_len": 32, "vocab_size": 256}
BATCH, FSDP, F32 = 4, 4, 4
NVLINK_B, NVLINK_ALPHA, IB_ALPHA = 450e9, 1e-6, 5e-6


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    xla_cost.simulate_devices(8)
    store = str(tmp_path_factory.mktemp("store") / "results.sqlite")
    return RunConfig("gpt2-small", BATCH, TINY, optimizer="adam", mesh={"fsdp": FSDP}).canonical().run(cache=store)


def _ring(nbytes: float, n: int, bandwidth: float, alpha: float) -> float:  # all-gather, reduce-scatter
    return (n - 1) / n * nbytes / bandwidth + (n - 1) * alpha


def test_the_units_are_the_layers_parameters(report):
    d, vocab, positions = TINY["d_model"], TINY["vocab_size"], TINY["seq_len"]
    # a block: two layer norms (2 d each), attention's qkv (d x 3d + 3d) and projection (d x d + d), the MLP
    # (d x 4d + 4d, 4d x d + d): 12 d^2 + 13 d parameters, float32
    block = F32 * (12 * d * d + 13 * d)
    units = dict(fsdp_units(report))
    assert [units[f"h_{i}"] for i in range(TINY["n_layer"])] == [block] * TINY["n_layer"]
    assert units["ln_f"] == F32 * 2 * d
    assert units["(remainder)"] == F32 * positions * d  # the position embedding
    # the token embedding (vocab x d), gathered beside the token ids (batch x positions int32)
    assert units["wte"] == F32 * vocab * d + 4 * BATCH * positions
    # all the parameters, as the analysis counts their bytes (and the token ids)
    assert sum(units.values()) == report.sharding["params_bytes"] + 4 * BATCH * positions


def test_each_unit_is_gathered_twice_and_reduce_scattered_once_over_fsdp(report):
    step = predict(report, Hardware("h100", mfu=1.0))
    units = fsdp_units(report)
    zero3 = [t for t in step.collectives if t.kind in ("all-gather", "reduce-scatter")]
    assert [(t.kind, t.nbytes, t.group_size, t.executions) for t in zero3] == [
        row for _, nbytes in units for row in (("all-gather", nbytes, FSDP, 2), ("reduce-scatter", nbytes, FSDP, 1))]
    # fsdp=4 on the first 4 GPUs of an 8-GPU node: NVLink 4
    for t in zero3:
        assert t.link == "nvlink4"
        assert t.seconds == pytest.approx(t.executions * _ring(t.nbytes, FSDP, NVLINK_B, NVLINK_ALPHA), rel=1e-12)
    # the CPU program's gradient all-reduce over fsdp is not priced: ZeRO-3 reduce-scatters instead
    assert not [t for t in step.collectives if t.kind == "all-reduce"]
    assert [c for c in report.phases["grad"].communication if c.kind == "all-reduce" and "fsdp" in c.axes]


def _all_to_all(step) -> float:
    # the embedding's exchange over fsdp, read from the program (an activation, not a parameter): reduced
    # behind the backward pass, ready as it ends: n - 1 hops, (n - 1) / n of the bytes
    exchanges = [t for t in step.collectives if t.kind == "all-to-all"]
    nbytes = sum(t.nbytes * t.executions for t in exchanges)
    return (FSDP - 1) / FSDP * nbytes / NVLINK_B + (FSDP - 1) * NVLINK_ALPHA if exchanges else 0.0


def test_compute_bound_only_the_first_gather_and_the_last_reduce_scatter_show(report):
    # at 1e-6 of peak the compute dwarfs every collective, each hidden behind its neighbour's compute,
    # but the first unit's gather (nothing computes before it) and its reduce-scatter (nothing after)
    step = predict(report, Hardware("h100", mfu=1e-6))
    units = fsdp_units(report)
    compute = step.parts["roofline"]
    smallest = min(nbytes for _, nbytes in units) / sum(nbytes for _, nbytes in units) * compute / 3
    largest = max(_ring(nbytes, FSDP, NVLINK_B, NVLINK_ALPHA) for _, nbytes in units)
    assert smallest > 3 * largest  # the smallest unit's third of the compute outlasts any collective
    first = units[0][1]
    expected = 2 * _ring(first, FSDP, NVLINK_B, NVLINK_ALPHA) + _all_to_all(step)
    assert step.parts["gradients"] == pytest.approx(expected, rel=1e-6)


def test_communication_bound_all_of_it_shows_but_what_compute_hides(report):
    # nodes of 1 GPU: the fsdp group crosses 4 nodes, on 100 MB/s adapters: every collective is slow
    step = predict(report, Hardware("h100", mfu=1.0, node_size=1, bandwidth=1e8))
    units = fsdp_units(report)
    zero3 = sum(3 * _ring(nbytes, FSDP, 1e8, IB_ALPHA) for _, nbytes in units)  # 2 gathers + 1 scatter
    assert sum(t.seconds for t in step.collectives if t.kind != "all-to-all") == pytest.approx(zero3, rel=1e-12)
    exposed, total = step.parts["gradients"], step.prediction.communication_seconds
    # compute hides at most itself (here all of it: the link is never idle while a unit computes)
    assert exposed == pytest.approx(total - step.parts["roofline"], rel=1e-9) and exposed <= total
    # an adapter 10x faster: what crosses nodes is priced at it, 10x less
    fast = predict(report, Hardware("h100", mfu=1.0, node_size=1, bandwidth=1e9))
    assert sum(t.seconds for t in fast.collectives if t.kind != "all-to-all") == pytest.approx(
        sum(3 * _ring(nbytes, FSDP, 1e9, IB_ALPHA) for _, nbytes in units), rel=1e-12)


def test_every_micro_batch_gathers_again(report):
    one = predict(report, Hardware("h100", mfu=1e-6))
    two = predict(report, Hardware("h100", mfu=1e-6), Layout(micro_batches=2))
    gathers = lambda s: [t.executions for t in s.collectives if t.kind == "all-gather"]  # noqa: E731
    assert gathers(two) == [2 * e for e in gathers(one)]
    # each micro-batch exposes its first gather and last reduce-scatter; the embedding's exchange, once
    zero3 = one.parts["gradients"] - _all_to_all(one)
    assert two.parts["gradients"] == pytest.approx(2 * zero3 + _all_to_all(two), rel=1e-6)


def test_a_bound_hides_nothing(report):
    step = predict(report, Hardware("h100").bound())
    assert step.parts["gradients"] == pytest.approx(step.prediction.communication_seconds, rel=1e-12)


# --- across nodes, at the measured bus bandwidth (xla_cost.timemodel.bus) ----------------------------

KIB, MIB, GB = 2**10, 2**20, 1e9
# published busbw (GB/s) at the sizes that bracket the units' bytes: 8x H200 (NVLink 4) all_reduce_perf
# (Bekman, ML Engineering Open Book, network/benchmarks/README.md, nccl-tests column) and 4 nodes of
# 8 B200 on 8 x 50 GB/s EFA (network/README.md, 'Inter-node speed depends on intra-node speed')
NVLINK4_ALL_REDUCE = ((128 * KIB, 12.40), (256 * KIB, 24.63), (512 * KIB, 48.30), (1 * MIB, 72.45),
                      (2 * MIB, 91.48), (16 * 2**30, 480.70))
FOUR_NODES = ((256 * KIB, 1.33), (512 * KIB, 2.84), (1 * MIB, 5.37), (2 * MIB, 10.38), (4 * MIB, 18.90))
ALL_GATHER_RING, NODE_RATE, NDR = 361.4, 400.0, 50e9  # GB/s: the ring's all-gather at 16 GiB; 8 x 50 GB/s


def _published(table, size: float) -> float:
    """busbw at ``size``: linear in log(size) between the table's rows; below its first, that row's time."""
    (s0, b0), *_ = table
    if size <= s0:
        return b0 * size / s0
    for (lo, blo), (hi, bhi) in zip(table, table[1:]):
        if lo <= size <= hi:
            return blo + math.log(size / lo) / math.log(hi / lo) * (bhi - blo)
    raise AssertionError(f"{size} bytes: outside the rows typed in")


def _gather_busbw(nbytes: float, per_node: int) -> float:
    """bytes/s of an all-gather of ``nbytes`` across nodes, ``per_node`` GPUs of the group on each: the
    ring within the node (the all-reduce table's shape at the ring's 361.4 GB/s), or the node's network,
    ``per_node`` adapters each carrying nbytes / per_node at the efficiency the 8-adapter nodes reached
    when each of theirs carried as much (a message of 8 x nbytes / per_node): the slower."""
    within = _published(NVLINK4_ALL_REDUCE, nbytes) * ALL_GATHER_RING / NVLINK4_ALL_REDUCE[-1][1] * GB
    network = _published(FOUR_NODES, 8 * nbytes / per_node) / NODE_RATE * per_node * NDR
    return min(within, network)


def test_an_fsdp_step_over_8_nodes_of_8_h100s_gathers_at_the_measured_bus_bandwidth(report):
    # the compiled program's units (its forward all-gathers over fsdp), priced as a 64-GPU ZeRO-3 run lays
    # them out: fsdp=64 on 8 nodes of 8, each group 8 GPUs on each of 8 nodes
    units = fsdp_units(report)
    where = span((("fsdp", 64),), ("fsdp",), 8)
    assert where == Span(nodes=8, per_node=8)
    times, _ = schedule.zero3(units, 64, where, Hardware("h100").cluster(), forward=1.0, backward=2.0)
    gathers = [t for t in times if t.kind == "all-gather"]
    assert [t.nbytes for t in gathers] == [nbytes for _, nbytes in units]
    for t in gathers:  # twice (forward, backward): 2 x (n-1)/n x S / busbw(S), over the node's 8 adapters
        assert t.link == "nvlink4+ib-ndr@nccl"
        assert t.seconds == pytest.approx(2 * 63 / 64 * t.nbytes / _gather_busbw(t.nbytes, 8), rel=1e-9)


def test_predict_prices_a_zero3_group_across_nodes_at_the_curves(report):
    # the analysed fsdp=4 on nodes of 2: each group 2 GPUs on each of 2 nodes, through predict's own path
    step = predict(report, Hardware("h100", node_size=2))
    gathers = [t for t in step.collectives if t.kind == "all-gather"]
    assert gathers and {t.link for t in gathers} == {"nvlink4+ib-ndr@nccl"}
    for t in gathers:
        assert t.seconds == pytest.approx(2 * 3 / 4 * t.nbytes / _gather_busbw(t.nbytes, 2), rel=1e-9)
