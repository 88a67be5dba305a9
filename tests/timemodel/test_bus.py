"""Collectives at NCCL's measured bus bandwidth (xla_cost.timemodel.bus).

Every expected time is nccl-tests' convention (NVIDIA/nccl-tests, doc/PERFORMANCE.md):
t = factor x S / busbw, the factor 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter
and all-to-all; busbw read from the published tables below (typed in from their sources), linear in
log(S) between two published sizes.
"""

from __future__ import annotations

import math

import pytest

from xla_cost.errors import InputError
from xla_cost.parallel.placement import Span
from xla_cost.timemodel import bus
from xla_cost.timemodel.comm import cluster
from xla_cost.timemodel.hardware import Hardware

KiB, MiB, GiB, GB = 2**10, 2**20, 2**30, 1e9
# 8x H200 (NVLink 4) all_reduce_perf busbw, GB/s: Bekman, ML Engineering Open Book,
# network/benchmarks/README.md, 'How the calls are timed', nccl-tests column
H200_ALL_REDUCE = {32 * KiB: 3.20, 1 * MiB: 72.45, 2 * MiB: 91.48, 4 * MiB: 139.97, 64 * MiB: 369.82,
                   1 * GiB: 464.00, 16 * GiB: 480.70}
# the same node with the ring at 16 GiB (network/README.md, 'SHARP'), GB/s
RING = {"all-reduce": 367.2, "all-gather": 361.4, "reduce-scatter": 362.9}
# 4 nodes of 8 B200, 8 x 50 GB/s EFA a node: all-reduce busbw, GB/s (network/README.md, 'Inter-node
# speed depends on intra-node speed'); as a fraction of the node's 400 GB/s
FOUR_NODES = {64 * MiB: 156.74, 1 * GiB: 361.99, 8 * GiB: 380.39, 16 * GiB: 381.80}
NODE_LINE_RATE = 8 * 50  # GB/s: 8 adapters of 400 Gb/s
A100 = 230.0  # GB/s, S. Jeaugey, NVIDIA/nccl-tests issue 149
NDR = 50e9  # one 400 Gb/s adapter per H100, bytes/s


def _ring(kind: str, size: float) -> float:
    """The ring's busbw (bytes/s) within an 8-GPU NVLink 4 node at a published size: the all-reduce
    table's shape scaled to the ring's 16 GiB figure (the module's stated derivation)."""
    return H200_ALL_REDUCE[size] * RING[kind] / H200_ALL_REDUCE[16 * GiB] * GB


def _network(size: float, adapters: int, rate: float = NDR) -> float:
    """A ring's reach over ``adapters`` adapters of ``rate``, the message ``size`` whose share each
    carries is the measured node's (8 adapters) at that size: eff(size) x adapters x rate."""
    return FOUR_NODES[size] / NODE_LINE_RATE * adapters * rate


def test_the_factors_are_nccl_tests():
    # doc/PERFORMANCE.md 'Summary': AllReduce 2(n-1)/n; ReduceScatter, AllGather, AlltoAll (n-1)/n
    assert bus.traffic_factor("all-reduce", 8) == 2 * 7 / 8
    for kind in ("all-gather", "reduce-scatter", "all-to-all"):
        assert bus.traffic_factor(kind, 8) == 7 / 8
    assert bus.traffic_factor("collective-permute", 8) == 1.0
    assert "PERFORMANCE.md" in bus.NCCL_TESTS


def test_within_a_node_an_all_reduce_takes_the_published_busbw():
    h100 = cluster("h100")  # a DGX H100: NVLink 4 as the 8x H200 measured it (the same NVSwitch fabric)
    seconds, link = h100.time("all-reduce", 1 * GiB, 8)
    assert link == "nvlink4@nccl"
    assert seconds == pytest.approx(2 * 7 / 8 * GiB / (H200_ALL_REDUCE[1 * GiB] * GB), rel=1e-12)
    # between published sizes, linear in log(size): 3 MiB is log2(1.5) of the way from 2 to 4 MiB
    w = math.log2(1.5)
    busbw = (H200_ALL_REDUCE[2 * MiB] + w * (H200_ALL_REDUCE[4 * MiB] - H200_ALL_REDUCE[2 * MiB])) * GB
    assert h100.time("all-reduce", 3 * MiB, 8)[0] == pytest.approx(2 * 7 / 8 * 3 * MiB / busbw, rel=1e-12)
    # below the smallest size, the smallest size's time (latency); above the largest, its busbw
    floor = 2 * 7 / 8 * 32 * KiB / (H200_ALL_REDUCE[32 * KiB] * GB)
    assert h100.time("all-reduce", 4 * KiB, 8)[0] == pytest.approx(floor, rel=1e-12)
    assert h100.time("all-reduce", 64 * GiB, 8)[0] == pytest.approx(
        2 * 7 / 8 * 64 * GiB / (H200_ALL_REDUCE[16 * GiB] * GB), rel=1e-12)


def test_rings_and_nvlink_sharp_within_a_node():
    h100 = cluster("h100")
    # all-gather and reduce-scatter run the ring: 361.4 and 362.9 GB/s at 16 GiB
    assert h100.time("all-gather", 16 * GiB, 8)[0] == pytest.approx(7 / 8 * 16 * GiB / _ring("all-gather", 16 * GiB))
    assert h100.time("reduce-scatter", 1 * GiB, 8)[0] == pytest.approx(
        7 / 8 * GiB / _ring("reduce-scatter", 1 * GiB))
    # NCCL runs NVLS from 5 GPUs (Bekman's table: 4 GPUs ring 363.3 GB/s, 5 NVLS): 4 GPUs all-reduce on the ring
    assert h100.time("all-reduce", 16 * GiB, 4)[0] == pytest.approx(2 * 3 / 4 * 16 * GiB / (RING["all-reduce"] * GB))
    assert h100.time("all-reduce", 16 * GiB, 5)[0] == pytest.approx(
        2 * 4 / 5 * 16 * GiB / (H200_ALL_REDUCE[16 * GiB] * GB))


def test_an_all_gather_across_nodes_spreads_over_the_nodes_adapters():
    h100 = cluster("h100")
    n, s = 64, 64 * MiB  # 8 nodes of 8, the fsdp group of a 64-GPU FSDP run
    seconds, link = h100.time("all-gather", s, n, where=Span(8, 8))
    assert link == "nvlink4+ib-ndr@nccl"
    # busbw = min(within the node, eff(S) x 8 adapters x 50 GB/s): at 64 MiB the network binds
    busbw = min(_ring("all-gather", s), _network(s, 8))
    assert busbw == _network(s, 8) and seconds == pytest.approx((n - 1) / n * s / busbw, rel=1e-12)
    # at 1 GiB NVLink binds (348.9 GB/s against 362.0): 7x faster than one GPU's 50 GB/s adapter alone,
    # the flat ring at one adapter's line rate the model priced before
    big, _ = h100.time("all-gather", 1 * GiB, n, where=Span(8, 8))
    assert big == pytest.approx((n - 1) / n * GiB / min(_ring("all-gather", 1 * GiB), _network(1 * GiB, 8)))
    one_adapter = (n - 1) / n * GiB / NDR + (n - 1) * 5e-6  # alpha-beta: 50 GB/s, 5 us a hop
    assert 6.5 < one_adapter / big < 8  # 348.9 / 50 = 6.98, and 63 hops of latency besides
    # one GPU a node: its own adapter, carrying all of S: eff(8 S) x 50 GB/s
    alone, link = h100.time("all-gather", 8 * MiB, 8, where=Span(8, 1))
    assert link == "ib-ndr@nccl"
    assert alone == pytest.approx(7 / 8 * 8 * MiB / _network(64 * MiB, 1), rel=1e-12)


def test_a_hierarchical_all_reduce_runs_the_faster_of_the_ring_and_two_levels():
    h100 = Hardware("h100").cluster()  # hierarchical by default, a prediction's: the curves
    s = 1 * GiB  # 2 nodes of 8
    ring = 2 * 15 / 16 * s / min(_ring("all-reduce", s), _network(s, 8))
    levels = (7 / 8 * s / _ring("reduce-scatter", s)  # within each node
              + 2 * 1 / 2 * (s / 8) / _network(s, 1)  # each GPU's eighth between the 2 nodes, its own adapter
              + 7 / 8 * s / _ring("all-gather", s))
    seconds, link = h100.time("all-reduce", s, 16, where=Span(2, 8))
    assert link == "nvlink4+ib-ndr@nccl" and seconds == pytest.approx(min(ring, levels), rel=1e-12)
    flat = cluster("h100")  # not hierarchical: the ring alone
    assert flat.time("all-reduce", s, 16, where=Span(2, 8))[0] == pytest.approx(ring, rel=1e-12)


def test_an_all_to_all_across_nodes_leaves_through_each_devices_adapter():
    s, n, p = 1 * GiB, 16, 8
    # (n - p)/n of S leaves the node through the device's own adapter: busbw = reach(S) (n-1)/(n-p)
    busbw = min(_ring("all-gather", s), FOUR_NODES[8 * GiB] / NODE_LINE_RATE * NDR * (n - 1) / (n - p))
    assert cluster("h100").time("all-to-all", s, n, where=Span(2, 8))[0] == pytest.approx(
        (n - 1) / n * s / busbw, rel=1e-12)


def test_a_dgx_a100_is_the_h200_shape_at_its_own_rates():
    a100 = cluster("a100")
    # derived: the same shape at the A100's ~230 GB/s (no NVLS on an A100)
    assert a100.time("all-reduce", 16 * GiB, 8)[0] == pytest.approx(2 * 7 / 8 * 16 * GiB / (A100 * GB))
    # across 2 nodes: 8 HDR adapters of 25 GB/s, 0.955 of their line rate at 16 GiB binds (190.9 < 230 GB/s)
    across = min(A100 * GB, _network(16 * GiB, 8, rate=25e9))
    assert a100.time("all-gather", 16 * GiB, 16, where=Span(2, 8))[0] == pytest.approx(15 / 16 * 16 * GiB / across)
    # the plateau's 0.955 of line rate is NVIDIA's '46-48GB/s per NIC' on NDR (nccl-tests issue 290)
    assert 46 <= FOUR_NODES[16 * GiB] / NODE_LINE_RATE * 50 <= 48


def test_bounds_user_links_and_unmeasured_fabrics_keep_the_alpha_beta_model():
    assert Hardware("h100").bound().cluster().fabric is None  # a bound: line rate
    assert cluster("h100", bandwidth=25e9).fabric is None and cluster("h100", "ethernet-25g").fabric is None
    assert cluster("h100", curves=False).time("all-gather", GiB, 8)[1] == "nvlink4"
    for device in ("v100", "p40", "tpu-v5e", "tpu-v4", "cpu"):  # nothing published for their links
        assert cluster(device).fabric is None, device
    assert cluster("h200").fabric is bus.FABRICS["nvlink4"] and cluster("a100").fabric is bus.FABRICS["nvlink3"]


def test_a_dgx_b200_all_reduces_at_its_published_nvls_busbw():
    # 8x B200 (NVLink 5), Bekman's '1 node' column: 845.67 GB/s at 16 GiB; NVLS from 6 GPUs on that node
    # (5 GPUs: the ring, 677.8 GB/s at 8 GiB; the model scales the shape to the 8-GPU ring's 682.2 GB/s)
    b200 = cluster("b200")
    assert b200.fabric is bus.FABRICS["nvlink5"]
    assert b200.time("all-reduce", 16 * GiB, 8)[0] == pytest.approx(2 * 7 / 8 * 16 * GiB / 845.67e9, rel=1e-12)
    assert b200.time("all-reduce", 16 * GiB, 5)[0] == pytest.approx(2 * 4 / 5 * 16 * GiB / 682.2e9, rel=1e-12)


def test_every_curve_names_its_source_and_a_derived_one_its_rule():
    curves = [bus.NETWORK_EFFICIENCY, bus.H200_ALL_REDUCE]
    curves += [c for f in bus.FABRICS.values() for c in f.within.values()]
    for curve in curves:
        assert "https://" in curve.source, curve.name
    assert bus.H200_ALL_REDUCE.derived == ""  # measured
    scaled = [f for name, f in bus.FABRICS.items() if name != "nvlink2-nvswitch"]
    assert all(c.derived for f in scaled for c in f.within.values())  # shapes scaled: said
    dgx2 = bus.FABRICS["nvlink2-nvswitch"].within  # three kinds measured, two taken from the all-gather: said
    assert [k for k, c in dgx2.items() if not c.derived] == ["all-reduce", "all-gather", "reduce-scatter"]
    with pytest.raises(InputError, match="sizes ascending"):
        bus.BusCurve("bad", ((2.0, 1.0), (1.0, 1.0)), "nowhere")


def test_four_h100_nodes_all_reduce_at_an_independently_measured_busbw():
    # NVIDIA/nccl-tests issue 309 (https://github.com/NVIDIA/nccl-tests/issues/309): 4 nodes of 8 H100,
    # one 400 Gb/s adapter per GPU, all_reduce_perf up to 16 GiB: 'max busbw can get 365.84 GB/s'. Not a
    # figure the curves were built from: the model's ring, min(367.2, 0.955 x 400), is within 1% of it
    # (its 2-node figure, 470 GB/s with NVLS trees, is 22% above the model's ring: NVLS trees not modelled)
    s, n = 16 * GiB, 32
    seconds, _ = Hardware("h100").cluster().time("all-reduce", s, n, where=Span(4, 8))
    assert 2 * (n - 1) / n * s / seconds == pytest.approx(365.84e9, rel=0.01)


# 12 V100-SXM3 of a DGX-2 (NVLink 2 through NVSwitch), all_reduce_perf out-of-place busbw, GB/s: J. Wohlbier,
# github.com/wohlbier/nccl-tests README.md at 33ee81a3 (nccl-tests of 2019)
DGX2_ALL_REDUCE = {16 * MiB: 63.71, 32 * MiB: 108.75, 1 * GiB: 123.14}
EDR = 100e9 / 8  # one 100 Gb/s InfiniBand EDR adapter, bytes/s; a DGX-2 has 8 for its 16 GPUs


def test_a_dgx2_all_reduces_at_its_published_busbw():
    dgx2 = cluster("v100-32gb", node="dgx-2")  # Shoeybi et al. 2019's DGX-2H
    assert dgx2.fabric is bus.FABRICS["nvlink2-nvswitch"]
    seconds, link = dgx2.time("all-reduce", 32 * MiB, 8)
    assert link == "nvlink2-nvswitch@nccl"
    assert seconds == pytest.approx(2 * 7 / 8 * 32 * MiB / (DGX2_ALL_REDUCE[32 * MiB] * GB), rel=1e-12)
    # Megatron-LM's 1.2B on 8-way tensor parallelism all-reduces micro-batch 8 x 1,024 positions x 1,536 features
    # in float16: 24 MiB, between the published 16 and 32 MiB rows, linear in log(S)
    size = 8 * 1024 * 1536 * 2
    w = math.log(size / (16 * MiB)) / math.log(2)
    busbw = (DGX2_ALL_REDUCE[16 * MiB] + w * (DGX2_ALL_REDUCE[32 * MiB] - DGX2_ALL_REDUCE[16 * MiB])) * GB
    assert dgx2.time("all-reduce", size, 8)[0] == pytest.approx(2 * 7 / 8 * size / busbw, rel=1e-12)
    assert busbw < 0.61 * 150e9  # 90 GB/s, where NVLink 2's line rate (300 GB/s both ways, halved) priced it before
    # across two DGX-2s, one GPU a node: each GPU's half of an EDR adapter at the measured efficiency
    # (8 GiB through each of 8 adapters: 380.39 of 400 GB/s) binds, not the NVSwitch's 123.14 GB/s
    across, link = dgx2.time("all-reduce", GiB, 2, where=Span(nodes=2, per_node=1))
    assert link == "ib-edr:8/16@nccl"
    assert across == pytest.approx(GiB / (FOUR_NODES[8 * GiB] / NODE_LINE_RATE * EDR / 2), rel=1e-12)
    # a DGX-1's cube mesh has no published sweep: the alpha-beta model at NVLink 2's line rate, said by its name
    assert cluster("v100", node="dgx-1").fabric is None
    assert cluster("v100", node="dgx-1").time("all-reduce", 32 * MiB, 8)[1] == "nvlink2"
