"""The alpha-beta communication model: every expected number is a closed form
written beside the assertion."""

from __future__ import annotations

import dataclasses

import pytest

from xla_cost.timemodel import bus, comm
from xla_cost.timemodel.comm import (
    CLUSTERS,
    INTERCONNECTS,
    Cluster,
    Interconnect,
    cluster,
    collective_time,
    communication_time,
    interconnect,
)
from xla_cost.errors import InputError
from xla_cost.timemodel import schedule
from xla_cost.timemodel.schedule import DEFAULT_OVERLAP, predict_step, scaling_curve

NVLINK4 = INTERCONNECTS["nvlink4"]
IB_NDR = INTERCONNECTS["ib-ndr"]


# --- presets -------------------------------------------------------------------------------


# per-hop latencies: the module's stated assumptions (orders of magnitude, not measured): NVLink and
# ICI 1 us, PCIe peer-to-peer 2 us, InfiniBand RDMA 5 us, TCP over Ethernet 10 us
@pytest.mark.parametrize(
    ("name", "bandwidth", "latency"),
    [
        ("nvlink4", 900e9 / 2, 1e-6),  # H100 SXM NVLink, 900 GB/s both ways
        ("nvlink3", 600e9 / 2, 1e-6),  # A100 SXM NVLink, 600 GB/s both ways
        ("nvlink2", 300e9 / 2, 1e-6),  # V100 SXM2 NVLink, 300 GB/s both ways
        ("nvlink1", 160e9 / 2, 1e-6),  # P100 SXM2 NVLink, 160 GB/s both ways
        ("pcie5", 128e9 / 2, 2e-6),  # PCIe 5.0 x16, 128 GB/s both ways
        ("pcie4", 64e9 / 2, 2e-6),
        ("pcie3", 32e9 / 2, 2e-6),
        ("ib-ndr", 400e9 / 8, 5e-6),  # 400 Gb/s line rate, per direction
        ("ib-hdr", 200e9 / 8, 5e-6),
        ("ib-edr", 100e9 / 8, 5e-6),
        ("ethernet-25g", 25e9 / 8, 10e-6),
        ("ethernet-50g", 50e9 / 8, 10e-6),
        ("tpu-v5e-ici", 400e9 / 2, 1e-6),  # v5e: 400 GB/s bidirectional ICI per chip
    ],
)
def test_preset_bandwidths_follow_the_stated_convention(name, bandwidth, latency):
    link = interconnect(name)
    assert link.name == name
    assert link.bandwidth == pytest.approx(bandwidth)
    assert "http" in link.source
    assert link.latency == latency and link.latency_source.startswith("assumed")


def test_every_preset_names_its_sources():
    for name, link in INTERCONNECTS.items():
        assert link.name == name and link.description and "http" in link.source, name
    assert set(CLUSTERS) >= {"h100", "a100", "v100", "p40", "tpu-v5e", "cpu"}
    # a DGX H100 node: its measured NCCL curves (xla_cost.timemodel.bus), the alpha-beta links beside them
    assert CLUSTERS["h100"] == Cluster(NVLINK4, IB_NDR, 8, fabric=bus.FABRICS["nvlink4"])
    assert CLUSTERS["a100"].inter.name == "ib-hdr" and CLUSTERS["a100"].intra.name == "nvlink3"
    assert CLUSTERS["p40"].intra.name == "pcie3" and CLUSTERS["p40"].inter.name == "ib-edr"
    assert set(comm.__all__) <= set(dir(comm))


def test_interconnect_lookup_is_case_insensitive_and_lists_presets_when_unknown():
    assert interconnect("NVLink4") is NVLINK4
    with pytest.raises(InputError) as err:
        interconnect("nvlink9")
    message = str(err.value)
    assert "'nvlink9'" in message
    for name in INTERCONNECTS:
        assert name in message
    assert "\n" not in message


# --- one collective ------------------------------------------------------------------------


def test_all_reduce_on_eight_nvlink4_devices():
    # ring all-reduce of 100 MB on 8 H100s: 2(n-1)/n * S/B + 2(n-1) * alpha
    expected = 2 * 7 / 8 * 1e8 / 450e9 + 14 * 1e-6
    assert collective_time("all-reduce", 1e8, 8, NVLINK4) == pytest.approx(expected)
    assert expected == pytest.approx(402.9e-6, rel=1e-3)  # ~0.4 ms


@pytest.mark.parametrize("kind", ["all-gather", "reduce-scatter", "all-to-all"])
def test_half_ring_collectives(kind):
    # (n-1)/n * S/B + (n-1) * alpha, n = 4 on InfiniBand NDR
    expected = 3 / 4 * 2e9 / 50e9 + 3 * 5e-6
    assert collective_time(kind, 2e9, 4, IB_NDR) == pytest.approx(expected)


# Halving-doubling (Thakur, Rabenseifner and Gropp 2005): for p a power of two, recursive
# doubling all-gather costs lg p alpha + (p-1)/p n beta, recursive halving reduce-scatter
# the same, Rabenseifner's all-reduce twice that. Each round doubles the devices a piece
# has reached, so at any n the model charges the least h with 2^h >= n rounds (the
# paper's non-power-of-two variants take extra steps, which this model does not count):
# 1 -> 2 -> 4 -> 8 reaches n = 6 in h = 3, not lg 6 = 2.58 rounded down to 2.
HD_HOPS = {6: 3, 12: 4, 8: 3}  # 2^3 = 8 >= 6 > 4; 2^4 = 16 >= 12 > 8; 2^3 = 8


@pytest.mark.parametrize("n", [6, 12])
def test_halving_doubling_at_a_group_size_that_is_not_a_power_of_two(n):
    hops = HD_HOPS[n]
    hd = "halving-doubling"
    # Rabenseifner's all-reduce: recursive-halving reduce-scatter + recursive-doubling
    # all-gather, 2 (n-1)/n S/B + 2 h alpha (InfiniBand NDR: B = 50e9 B/s, alpha = 5e-6 s)
    expected = 2 * (n - 1) / n * 1e6 / 50e9 + 2 * hops * 5e-6
    assert collective_time("all-reduce", 1e6, n, IB_NDR, hd) == pytest.approx(expected, rel=1e-12)
    # one pass: (n-1)/n S/B + h alpha
    for kind in ("all-gather", "reduce-scatter"):
        expected = (n - 1) / n * 1e6 / 50e9 + hops * 5e-6
        assert collective_time(kind, 1e6, n, IB_NDR, hd) == pytest.approx(expected, rel=1e-12), kind
    # through a cluster that names the algorithm: one all-reduce of 1 MB on n NDR-linked devices
    flat = Cluster(IB_NDR, IB_NDR, 1, algorithm=hd)
    total, _, _ = communication_time([{"kind": "all-reduce", "bytes": 10**6, "group_size": n, "executions": 2}], flat)
    assert total == pytest.approx(2 * (2 * (n - 1) / n * 1e6 / 50e9 + 2 * hops * 5e-6), rel=1e-12)


@pytest.mark.parametrize("n", [6, 8])
def test_all_to_all_keeps_n_minus_1_hops_under_halving_doubling(n):
    # pairwise exchange: every device sends a piece to each of the n-1 others, whatever the
    # algorithm for the reductions: (n-1)/n S/B + (n-1) alpha, not h = HD_HOPS[n] alphas
    expected = (n - 1) / n * 1e6 / 50e9 + (n - 1) * 5e-6
    assert HD_HOPS[n] < n - 1  # the two charges differ, so the check can fail
    assert collective_time("all-to-all", 1e6, n, IB_NDR, "halving-doubling") == pytest.approx(expected, rel=1e-12)
    assert collective_time("all-to-all", 1e6, n, IB_NDR, "ring") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("kind", ["collective-permute", "collective-broadcast"])
def test_one_hop_collectives(kind):
    # S/B + alpha, whatever the group size
    assert collective_time(kind, 1e9, 16, IB_NDR) == pytest.approx(1e9 / 50e9 + 5e-6)
    assert collective_time(kind, 1e9, 2, IB_NDR) == pytest.approx(1e9 / 50e9 + 5e-6)


@pytest.mark.parametrize("kind", ["all-reduce", "all-gather", "collective-permute"])
def test_a_group_of_one_moves_nothing(kind):
    assert collective_time(kind, 1e9, 1, NVLINK4) == 0.0


def test_kind_spellings_hlo_async_and_jax_primitives():
    reference = collective_time("all-reduce", 1e6, 8, NVLINK4)
    for kind in ("all_reduce", "all-reduce-start", "ALL-REDUCE", "psum"):
        assert collective_time(kind, 1e6, 8, NVLINK4) == reference, kind
    assert collective_time("psum_scatter", 1e6, 8, NVLINK4) == collective_time(
        "reduce-scatter", 1e6, 8, NVLINK4
    )
    assert collective_time("ppermute", 1e6, 8, NVLINK4) == 1e6 / 450e9 + 1e-6


def test_unknown_kind_and_bad_sizes_are_value_errors():
    with pytest.raises(ValueError, match="all-reduce"):
        collective_time("all-shuffle", 1e6, 8, NVLINK4)
    with pytest.raises(ValueError, match="group size"):
        collective_time("all-reduce", 1e6, 0, NVLINK4)
    with pytest.raises(ValueError, match="byte count"):
        collective_time("all-reduce", -1, 8, NVLINK4)


# --- clusters ------------------------------------------------------------------------------


def test_group_within_a_node_uses_intra_and_across_nodes_uses_inter():
    h100 = cluster("h100")
    assert h100.link(8) is NVLINK4  # one 8-GPU node
    assert h100.link(16) is IB_NDR  # two nodes: the ring's slowest link is InfiniBand
    assert h100.link(2, span_nodes=True) is IB_NDR  # a strided group across nodes
    assert h100.link(16, span_nodes=False) is NVLINK4
    # 1 GB all-reduce on 16 GPUs across two nodes: at the NDR rate
    expected = 2 * 15 / 16 * 1e9 / 50e9 + 30 * 5e-6
    assert collective_time("all-reduce", 1e9, 16, h100.link(16)) == pytest.approx(expected)


def test_cluster_overrides():
    # one flat network replaces both links
    flat = cluster("h100", "pcie5")
    assert flat.intra is flat.inter is INTERCONNECTS["pcie5"] and flat.node_size == 8
    # node size: 16 devices now fit in a node
    big = cluster("h100", node_size=16)
    assert big.link(16) is NVLINK4 and big.link(17) is IB_NDR
    # bandwidth and latency replace the inter-node link only
    given = cluster("h100", bandwidth=100e9, latency=2e-6)
    assert given.intra is NVLINK4
    assert (given.inter.bandwidth, given.inter.latency) == (100e9, 2e-6)
    assert given.inter.source == "given" and given.inter.latency_source == "given"
    assert collective_time("all-gather", 1e9, 16, given.link(16)) == pytest.approx(
        15 / 16 * 1e9 / 100e9 + 15 * 2e-6
    )
    # in a flat network they replace the single link (a TPU v4 pod: ICI between slices too, no DCN figure)
    tpu = cluster("tpu-v4", bandwidth=50e9)
    assert tpu.intra.bandwidth == tpu.inter.bandwidth == 50e9
    # issue 32: a TPU v5e pod's network between pods is its hosts' DCN (2 adapters per 8 chips), so the
    # bandwidth given is an adapter's line rate and each chip has 2/8 of it; the ICI stays
    v5e = cluster("tpu-v5e", bandwidth=50e9)
    assert v5e.intra.name == "tpu-v5e-ici" and v5e.inter.bandwidth == pytest.approx(2 * 50e9 / 8)
    both = cluster("a100", "ib-hdr", latency=0.0)
    assert both.intra.latency == both.inter.latency == 0.0
    assert cluster("H100") == CLUSTERS["h100"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"device": "gb999"}, "h100, h100-pcie, h200"),
        ({"device": "h100", "interconnect": "nvlink9"}, "nvlink4"),
        ({"device": "h100", "bandwidth": -1e9}, "bandwidth in bytes/s"),
        ({"device": "h100", "bandwidth": 0}, "bandwidth in bytes/s"),
        ({"device": "h100", "latency": -1e-6}, "latency in seconds"),
        ({"device": "h100", "node_size": 0}, "node size"),
        ({"device": "h100", "node_size": 2.5}, "node size"),
    ],
)
def test_cluster_bad_input_is_one_line_with_a_fix(kwargs, match):
    with pytest.raises(InputError, match=match) as err:
        cluster(**kwargs)
    assert err.value.fix and "\n" not in str(err.value)


def test_negative_bandwidth_on_a_hand_built_link():
    with pytest.raises(InputError, match=r"got -5\.0 instead\. Pass e\.g\. 50e9"):
        dataclasses.replace(NVLINK4, bandwidth=-5.0)
    with pytest.raises(InputError, match="group size"):
        CLUSTERS["h100"].link(0)


# --- a step's collectives ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Collective:  # stands in for a parsed HLO collective
    kind: str
    bytes: int
    group_size: int | None
    executions: int | None


def test_communication_time_sums_executions_over_objects_and_dicts():
    h100 = cluster("h100", curves=False)  # the alpha-beta model at line rate (the curves: test_bus.py)
    step = [
        _Collective("all-reduce", 400_000_000, 8, 1),  # gradients in one bucket
        {"kind": "all-gather", "bytes": 1_000_000, "group_size": 16, "executions": 12},
    ]
    total, times, notes = communication_time(step, h100)
    first = 2 * 7 / 8 * 4e8 / 450e9 + 14 * 1e-6
    second = 12 * (15 / 16 * 1e6 / 50e9 + 15 * 5e-6)
    assert [t.seconds for t in times] == pytest.approx([first, second])
    assert total == pytest.approx(first + second)
    assert [(t.kind, t.nbytes, t.group_size, t.executions, t.link) for t in times] == [
        ("all-reduce", 400_000_000, 8, 1, "nvlink4"),
        ("all-gather", 1_000_000, 16, 12, "ib-ndr"),
    ]
    assert notes == ("collectives at line rate, the alpha-beta model (no measured NCCL curve: a bound, a link given, "
                     "or none published for nvlink4, ib-ndr)",)
    assert communication_time(step, cluster("h100"))[2] == ()  # at the measured curves: nothing to say


def test_unknown_executions_are_counted_once_and_named():
    total, times, notes = communication_time(
        [{"kind": "all-reduce", "bytes": 10**8, "group_size": 8, "executions": None}],
        cluster("h100", curves=False),
    )
    assert total == pytest.approx(2 * 7 / 8 * 1e8 / 450e9 + 14 * 1e-6)
    assert times[0].executions == 1
    assert len(notes) == 2 and "executions per step unknown; counted once" in notes[0] and "alpha-beta" in notes[1]


def test_unknown_group_size_is_skipped_with_a_note_never_silently_zero():
    total, times, notes = communication_time(
        [
            _Collective("all-reduce", 10**8, None, 1),
            _Collective("reduce-scatter", 10**6, 2, 3),
            _Collective("send", 10**6, 2, 1),
        ],
        cluster("h100", curves=False),
    )
    assert len(times) == 1
    assert total == pytest.approx(3 * (1 / 2 * 1e6 / 450e9 + 1 * 1e-6))
    assert any("all-reduce" in n and "group size unknown; skipped" in n for n in notes)
    assert any("send" in n and "not modelled" in n for n in notes)


def test_ragged_all_to_all_is_charged_as_an_all_to_all_with_a_note():
    total, _, notes = communication_time(
        [{"kind": "ragged-all-to-all", "bytes": 10**6, "group_size": 4, "executions": 2}],
        cluster("h100", curves=False),
    )
    assert total == pytest.approx(2 * (3 / 4 * 1e6 / 450e9 + 3 * 1e-6))
    assert len(notes) == 2 and "upper bound" in notes[0] and "alpha-beta" in notes[1]


def test_group_of_one_in_a_step_costs_nothing():
    total, times, _ = communication_time(
        [{"kind": "all-reduce", "bytes": 10**9, "group_size": 1, "executions": 5}], cluster("cpu")
    )
    assert total == 0.0 and times[0].seconds == 0.0


# --- the step ------------------------------------------------------------------------------


def test_predict_step_without_overlap_is_the_upper_bound():
    assert DEFAULT_OVERLAP == 0.0
    # 1e15 FLOP at 1e15 FLOP/s * 0.5 = 2 s; memory 3e12 B / 3e12 B/s = 1 s; roofline 2 s
    p = predict_step(1e15, 3e12, 0.5, peak_flops=1e15, peak_bandwidth=3e12, efficiency=0.5)
    assert p.compute_seconds == pytest.approx(2.0)
    assert p.exposed_communication_seconds == pytest.approx(0.5)
    assert p.seconds == pytest.approx(2.5) and p.overlap == 0.0


def test_predict_step_memory_bound_roofline():
    # 1e12 FLOP / 1e15 = 1 ms; 1e10 B / 1e12 B/s = 10 ms: memory bound
    p = predict_step(1e12, 1e10, 0.0, peak_flops=1e15, peak_bandwidth=1e12)
    assert p.compute_seconds == pytest.approx(0.01) and p.seconds == pytest.approx(0.01)
    # no bytes: the FLOP term alone
    assert predict_step(1e12, None, 0.0, peak_flops=1e15, peak_bandwidth=None).compute_seconds == (
        pytest.approx(1e-3)
    )


@pytest.mark.parametrize(("comm_s", "exposed"), [(0.5, 0.0), (3.0, 3.0 - 2.0)])
def test_predict_step_perfect_overlap_hides_up_to_compute(comm_s, exposed):
    # compute 2 s; with overlap 1 exposed = max(0, comm - compute)
    p = predict_step(2e15, None, comm_s, peak_flops=1e15, peak_bandwidth=None, overlap=1.0)
    assert p.exposed_communication_seconds == pytest.approx(max(0.0, comm_s - 2.0)) == pytest.approx(
        exposed
    )
    assert p.seconds == pytest.approx(2.0 + exposed)


def test_partial_overlap_never_hides_more_than_compute():
    # compute 1 s, comm 4 s, overlap 0.9: (1-0.9)*4 = 0.4 < 4 - 1 = 3, so 3 s show
    p = predict_step(1e15, None, 4.0, peak_flops=1e15, peak_bandwidth=None, overlap=0.9)
    assert p.exposed_communication_seconds == pytest.approx(3.0)
    # comm 1 s, overlap 0.5: (1-0.5)*1 = 0.5 > 1 - 1 = 0
    p = predict_step(1e15, None, 1.0, peak_flops=1e15, peak_bandwidth=None, overlap=0.5)
    assert p.exposed_communication_seconds == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"overlap": 1.5}, r"an overlap in \[0, 1\], got 1\.5"),
        ({"overlap": -0.1}, r"an overlap in \[0, 1\]"),
        ({"efficiency": 0.0}, r"an efficiency in \(0, 1\]"),
        ({"efficiency": 1.2}, r"an efficiency in \(0, 1\]"),
        ({"peak_flops": 0.0}, "peak FLOP/s"),
        ({"peak_bandwidth": -1.0}, "peak memory bandwidth"),
    ],
)
def test_predict_step_bad_input(kwargs, match):
    args = {"peak_flops": 1e15, "peak_bandwidth": 1e12, **kwargs}
    with pytest.raises(InputError, match=match) as err:
        predict_step(1e12, 1e9, 0.1, **args)
    assert err.value.fix and "\n" not in str(err.value)


# --- scaling -------------------------------------------------------------------------------


def _step(compute_s: float, comm_s: float, overlap: float = 0.0) -> schedule.StepPrediction:
    # compute_s seconds of FLOP at 1e15 FLOP/s
    return predict_step(compute_s * 1e15, None, comm_s, peak_flops=1e15, peak_bandwidth=None,
                        overlap=overlap)


def test_weak_scaling_doubling_devices_gives_1_3x():
    # Weak scaling, 32 samples per device: speedup = (2B/t2)/(B/t1) = 2 t1/t2 = 1.3 gives
    # t2 = t1 * 2/1.3, so the exposed communication is t2 - t1 = t1 * 0.7/1.3, i.e. 7/13
    # of the compute time. Compute 1.3 s, communication 0.7 s, no overlap.
    t1 = 1.3
    curve = scaling_curve([(8, 256, _step(t1, 0.0)), (16, 512, _step(t1, 0.7))])
    assert curve[1].step_seconds == pytest.approx(t1 * 2 / 1.3) == pytest.approx(2.0)
    assert curve[1].exposed_communication_seconds == pytest.approx(t1 * 0.7 / 1.3)
    assert curve[0].speedup == 1.0 and curve[0].efficiency == 1.0
    assert curve[0].samples_per_second == pytest.approx(256 / 1.3)
    assert curve[1].samples_per_second == pytest.approx(512 / 2.0)
    assert curve[1].speedup == pytest.approx(2 * t1 / 2.0) == pytest.approx(1.3)
    assert curve[1].efficiency == pytest.approx(1.3 / 2)


def test_strong_scaling_from_collective_times():
    # Strong scaling of a 256-sample batch on H100s: compute halves with the devices and
    # each step all-reduces 1 GB of gradients (1/4 of it hidden behind compute), alpha-beta at line rate.
    h100 = cluster("h100", curves=False)
    points = []
    for devices, compute_s in ((8, 4.0), (16, 2.0), (32, 1.0)):
        seconds, _, _ = communication_time(
            [{"kind": "all-reduce", "bytes": 10**9, "group_size": devices, "executions": 1}], h100
        )
        points.append((devices, 256, _step(compute_s, seconds, overlap=0.25)))
    curve = scaling_curve(points)
    ar = {n: collective_time("all-reduce", 1e9, n, h100.link(n)) for n in (8, 16, 32)}
    assert ar[8] == pytest.approx(2 * 7 / 8 * 1e9 / 450e9 + 14e-6)  # within a node: NVLink
    assert ar[32] == pytest.approx(2 * 31 / 32 * 1e9 / 50e9 + 62 * 5e-6)  # across: NDR
    t = {8: 4.0 + 0.75 * ar[8], 16: 2.0 + 0.75 * ar[16], 32: 1.0 + 0.75 * ar[32]}
    assert [p.step_seconds for p in curve] == pytest.approx([t[8], t[16], t[32]])
    assert curve[2].speedup == pytest.approx(t[8] / t[32])  # same batch: time ratio
    assert curve[2].efficiency == pytest.approx(t[8] / t[32] / 4)


def test_scaling_curve_bad_input():
    with pytest.raises(InputError, match="at least one"):
        scaling_curve([])
    with pytest.raises(InputError, match="increasing"):
        scaling_curve([(8, 64, _step(1, 0)), (8, 64, _step(1, 0))])
    with pytest.raises(InputError, match="global batch"):
        scaling_curve([(8, 0, _step(1, 0))])
    with pytest.raises(InputError, match="step time > 0"):
        scaling_curve([(8, 64, _step(0, 0))])


def test_interconnect_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        NVLINK4.bandwidth = 1.0  # type: ignore[misc]
    assert isinstance(NVLINK4, Interconnect)


def test_a_hierarchical_all_reduce_runs_in_two_levels():
    # 16 H100s in 2 nodes of 8, a 1 GB buffer: reduce-scatter within each node on NVLink 4,
    # all-reduce of each GPU's 1/8 shard between the 2 nodes on NDR, all-gather within the node
    s, nv, ib = 1e9, NVLINK4, IB_NDR
    within = 7 / 8 * s / nv.bandwidth + 7 * nv.latency  # ring reduce-scatter (and all-gather) of 8
    between = 2 * (1 / 2) * (s / 8) / ib.bandwidth + 2 * 1 * ib.latency  # ring all-reduce of 2
    flat = dataclasses.replace(CLUSTERS["h100"], fabric=None)  # the alpha-beta model (the curves: test_bus.py)
    two_level = dataclasses.replace(flat, hierarchical=True)
    assert two_level.time("all-reduce", s, 16) == (pytest.approx(2 * within + between), "nvlink4+ib-ndr")
    assert flat.time("all-reduce", s, 16)[0] == pytest.approx(2 * 15 / 16 * s / ib.bandwidth + 2 * 15 * ib.latency)
    # within one node, or a group that does not fill whole nodes: one ring, as before
    assert two_level.time("all-reduce", s, 8) == flat.time("all-reduce", s, 8)
    assert two_level.time("all-reduce", s, 12) == flat.time("all-reduce", s, 12)
    assert cluster("h100", hierarchical=True, curves=False) == two_level


def test_kept_prices_answer_for_the_values_asked_not_an_earlier_call():
    # `placed_time` and `schedule.zero3` keep their collectives' prices (the validation's fits price each case
    # again with every constant they try); each call must still be priced on its own cluster, mesh and bytes.
    # Ring formulas (alpha-beta, no curves): all-reduce 2 (n-1)/n S/B + 2 (n-1) a, all-gather (n-1)/n S/B + (n-1) a
    from xla_cost.analysis.report import Collective
    from xla_cost.parallel.placement import Span

    size = 2**20
    nvlink, pcie = Cluster(NVLINK4, IB_NDR, 8), Cluster(INTERCONNECTS["pcie3"], IB_NDR, 8)

    def all_reduce(n: int, nbytes: int, link: Interconnect) -> float:
        return 3 * (2 * (n - 1) / n * nbytes / link.bandwidth + 2 * (n - 1) * link.latency)  # 3 executions

    tensor = Collective("all-reduce", ("model",), 8, size, 3)
    within = (("model", 8),)  # one node of 8
    for row, mesh, on, expected in [
        (tensor, within, nvlink, all_reduce(8, size, NVLINK4)),
        (tensor, within, pcie, all_reduce(8, size, INTERCONNECTS["pcie3"])),  # another cluster
        (dataclasses.replace(tensor, bytes=2 * size), within, nvlink, all_reduce(8, 2 * size, NVLINK4)),  # bytes
        (Collective("all-reduce", ("data",), 2, size, 3), (("data", 2),), nvlink, all_reduce(2, size, NVLINK4)),
        # another mesh: model=8 fills each node, so the data pair is one device on each of two nodes
        (Collective("all-reduce", ("data",), 2, size, 3), (("model", 8), ("data", 2)), nvlink,
         all_reduce(2, size, IB_NDR)),
    ]:
        seconds, times, _, _ = comm.placed_time([row], mesh, on)
        assert seconds == pytest.approx(expected, rel=1e-12)
        assert (seconds, times) == communication_time(comm.placed([row], mesh, 8), on)[:2]
        as_dict = {"kind": row.kind, "bytes": row.bytes, "group_size": row.group_size, "executions": 3,
                   "axes": list(row.axes)}  # not hashable: priced as given
        assert comm.placed_time([as_dict], mesh, on)[:2] == (seconds, times)

    class Row:  # a plain object, hashed by its identity: changed after it was priced, priced again
        kind, axes, group_size, bytes, executions = "all-reduce", ("model",), 8, size, 3

    row = Row()
    assert comm.placed_time([row], within, nvlink)[0] == pytest.approx(all_reduce(8, size, NVLINK4), rel=1e-12)
    row.bytes = 2 * size
    assert comm.placed_time([row], within, nvlink)[0] == pytest.approx(all_reduce(8, 2 * size, NVLINK4), rel=1e-12)
    units = (("h_0", size),)
    for on, link, micro_batches in [(nvlink, NVLINK4, 1), (pcie, INTERCONNECTS["pcie3"], 1), (nvlink, NVLINK4, 2)]:
        gathers = schedule.zero3(units, 8, Span(1, 8), on, 0.0, 0.0, micro_batches)[0][0]
        # each unit gathered twice a micro-batch (its forward and its backward)
        assert gathers.seconds == pytest.approx(2 * micro_batches * (7 / 8 * size / link.bandwidth + 7 * link.latency),
                                                rel=1e-12)
