"""Nodes and where a run's groups lie on them (issue 32).

A node is devices on one fast link and the network adapters its hosts share
(`xla_cost.timemodel.devices.NODES`); a device's share of the network between
nodes is ``nics * line rate / devices per host``. A run's devices are laid
out tensor shards innermost, then FSDP shards, pipeline stages, replicas
(`xla_cost.timemodel.schedule.run_mesh`), and each collective is priced on the
links its group crosses (`xla_cost.parallel.placement.span`). Every expected
figure is a datasheet's (cited beside it) over a device count, or a ring
formula (Patarasuk and Yuan 2009) written out.
"""

from __future__ import annotations

import pytest

from xla_cost.errors import InputError
from xla_cost.timemodel import comm, devices
from xla_cost.timemodel.comm import INTERCONNECTS, cluster
from xla_cost.parallel.placement import Span, crosses_nodes, span
from xla_cost.timemodel.hardware import Hardware
from xla_cost.timemodel.schedule import REPLICAS, Layout, run_mesh

GB = 1e9
# link rates per direction: InfiniBand EDR 100, HDR 200, NDR 400 Gb/s (InfiniBand Trade Association roadmap);
# NVLink 2 300 GB/s and NVLink 3 600 GB/s per GPU both ways (V100, A100 datasheets), halved
EDR, HDR, NDR = 100e9 / 8, 200e9 / 8, 400e9 / 8
NVLINK2, NVLINK3, NVLINK4 = 300e9 / 2, 600e9 / 2, 900e9 / 2
NDR_ALPHA, NVLINK_ALPHA = 5e-6, 1e-6  # comm's stated per-hop latencies (assumed)


def _ring_all_reduce(nbytes: float, n: int, bandwidth: float, alpha: float) -> float:
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * alpha


def _ring(nbytes: float, n: int, bandwidth: float, alpha: float) -> float:  # all-gather, reduce-scatter
    return (n - 1) / n * nbytes / bandwidth + (n - 1) * alpha


# --- nodes: devices, their link, the adapters they share -------------------------------------


@pytest.mark.parametrize("node, size, intra, per_device", [
    # DGX-2 datasheet: 16 V100 on NVSwitch (NVLink 2), 8 x 100 Gb/s EDR: two GPUs share an adapter
    ("dgx-2", 16, NVLINK2, 8 * EDR / 16),
    # DGX-1 (V100) datasheet: 8 V100 on NVLink 2, 4 x EDR
    ("dgx-1", 8, NVLINK2, 4 * EDR / 8),
    # DGX A100 user guide: 8 A100 on NVLink 3, 8 x 200 Gb/s HDR
    ("dgx-a100", 8, NVLINK3, 8 * HDR / 8),
    # DGX H100 user guide: 8 H100 on NVLink 4, 8 x 400 Gb/s NDR
    ("dgx-h100", 8, NVLINK4, 8 * NDR / 8),
])
def test_a_node_gives_each_device_its_share_of_the_adapters(node, size, intra, per_device):
    found = cluster("v100", node=node)  # a node preset replaces the device's own
    assert found.node_size == size
    assert found.intra.bandwidth == pytest.approx(intra)
    assert found.inter.bandwidth == pytest.approx(per_device)
    assert "http" in devices.node(node).source


def test_the_dgx2_prices_what_crosses_nodes_at_its_share():
    # 32 V100s in 2 DGX-2s, 1 GB all-reduced over a group with one GPU in each (tensor parallel fills the node):
    # a ring of 2 on each GPU's half of an EDR adapter (at line rate: the measured curves,
    # tests/timemodel/test_bus.py, take the adapter's measured efficiency)
    dgx2 = cluster("v100", node="dgx-2", curves=False)
    seconds, link = dgx2.time("all-reduce", GB, 2, where=Span(nodes=2, per_node=1))
    assert link == "ib-edr:8/16"
    assert seconds == pytest.approx(_ring_all_reduce(GB, 2, EDR / 2, 5e-6))


def test_node_size_nics_and_bandwidth_override_the_preset():
    # a node of 16 H100s keeps one adapter per GPU unless told otherwise
    assert cluster("h100", node_size=16).inter is INTERCONNECTS["ib-ndr"]
    # 16 GPUs sharing 8 NDR adapters: half of one each
    assert cluster("h100", node_size=16, nics=8).inter.bandwidth == pytest.approx(8 * NDR / 16)
    # 4 adapters for 8 GPUs
    assert cluster("h100", nics=4).inter.bandwidth == pytest.approx(4 * NDR / 8)
    # the bandwidth given is an adapter's line rate: 8 of 25 GB/s over the DGX-2's 16 GPUs
    given = cluster("v100", node="dgx-2", bandwidth=25e9)
    assert given.inter.bandwidth == pytest.approx(8 * 25e9 / 16) and given.intra.bandwidth == pytest.approx(NVLINK2)
    # Hardware carries them to the cluster
    assert Hardware("v100", node="dgx-2", nics=16).cluster().inter.bandwidth == pytest.approx(16 * EDR / 16)


@pytest.mark.parametrize("fields, match", [
    ({"node": "dgx-9"}, "node preset .*dgx-2"),
    ({"nics": 0}, "network adapters per host"),
    ({"node_size": 2.5}, "devices per node"),
])
def test_bad_node_options_are_refused_in_one_line(fields, match):
    with pytest.raises(InputError, match=match) as err:
        Hardware("h100", **fields)
    assert "\n" not in str(err.value) and err.value.fix


# --- TPU slices: ICI within, the data-center network between --------------------------------


@pytest.mark.parametrize("device, ici, links, port, dcn", [
    # Cloud TPU v5e: 400 GBps ICI per chip both ways, 4 ICI ports (100 GBps each both ways);
    # 2 x 100 Gbps NICs per host of 8 chips
    ("tpu-v5e", 400e9 / 2, 4, 100e9 / 2, 2 * 100e9 / 8 / 8),
    # Cloud TPU v6e: 800 GBps ICI per chip both ways, 4 ports; 4 x 200 Gbps NICs per host of 8 chips
    ("tpu-v6e", 800e9 / 2, 4, 200e9 / 2, 4 * 200e9 / 8 / 8),
    # Cloud TPU v5p: 4800 Gbps ICI per chip one way (ports not given here); DCN 50 Gbps per chip
    ("tpu-v5p", 4800e9 / 8, None, None, 50e9 / 8),
])
def test_a_tpu_slice_is_a_node_on_ici_with_dcn_between(device, ici, links, port, dcn):
    found = cluster(device)
    assert found.intra.bandwidth == pytest.approx(ici)
    assert found.inter.bandwidth == pytest.approx(dcn)
    node = devices.NODES[devices.DEVICES[device].node]
    assert node.links == links
    if links:  # the per-chip ICI figure is the aggregate of the chip's ports
        assert found.intra.bandwidth == pytest.approx(links * port)


def test_a_tpu_targets_slice_is_its_node():
    # tpu-v5e:2x2 is 4 chips: replicas beyond them meet on the DCN; a GPU target keeps its server
    assert devices.target_slice("tpu-v5e:2x2") == 2 * 2
    assert devices.target_slice("tpu-v4:2x2x2") == 2 * 2 * 2
    assert devices.target_slice("h100") is None and devices.target_slice(None) is None
    assert Hardware("tpu-v5e").cluster("tpu-v5e:2x2").node_size == 4
    assert Hardware("tpu-v5e", node_size=16).cluster("tpu-v5e:2x2").node_size == 16  # given wins
    assert Hardware("h100").cluster("h100").node_size == 8


# --- where a run's groups lie ----------------------------------------------------------------


def test_run_mesh_lays_tensor_innermost_then_pipeline_then_replicas():
    mesh = run_mesh({"fsdp": 2, "model": 4}, Layout(pipeline=3, data=5))
    assert mesh == (("model", 4), ("fsdp", 2), ("pipeline", 3), (REPLICAS, 5))


def test_the_384_gpu_replicas_cross_nodes():
    # tensor 4 x pipeline 12 x data 8 = 384 GPUs on nodes of 8: one replica is 48 GPUs (6 nodes), so the
    # data-parallel group has one GPU on each of 8 nodes; the stages of one shard are 4 apart (2 a node)
    mesh = run_mesh({"model": 4}, Layout(pipeline=12, data=8))
    assert span(mesh, (REPLICAS,), 8) == Span(nodes=8, per_node=1)
    assert span(mesh, ("pipeline",), 8) == Span(nodes=48 // 8, per_node=8 // 4)
    assert span(mesh, ("model",), 8) == Span(nodes=1, per_node=4)
    # its 18.5 GB gradient all-reduce on one NDR adapter per GPU, not on NVLink (a bound's cluster: the
    # alpha-beta model at line rate; a prediction's prices the measured curves, tests/timemodel/test_bus.py)
    nbytes = 18.5e9
    h100 = Hardware("h100", mfu=1.0).cluster()
    seconds, link = h100.time("all-reduce", nbytes, 8, where=span(mesh, (REPLICAS,), 8))
    assert link == "ib-ndr" and seconds == pytest.approx(_ring_all_reduce(nbytes, 8, NDR, NDR_ALPHA))
    # an interconnect or bandwidth given changes what crosses nodes: 25GbE, or 25 GB/s adapters
    slow, _ = Hardware("h100", interconnect="ethernet-25g").cluster().time("all-reduce", nbytes, 8,
                                                                          where=Span(8, 1))
    assert slow == pytest.approx(_ring_all_reduce(nbytes, 8, 25e9 / 8, 10e-6))
    half, _ = Hardware("h100", bandwidth=25e9, mfu=1.0).cluster().time("all-reduce", nbytes, 8, where=Span(8, 1))
    assert half == pytest.approx(_ring_all_reduce(nbytes, 8, 25e9, NDR_ALPHA))


def test_a_group_with_several_devices_a_node_reduces_in_two_levels():
    # data 16 alone on nodes of 8: 8 a node on 2 nodes; a reduce-scatter among the 8, an all-reduce of
    # each one's eighth between the 2 nodes, an all-gather among the 8
    h100 = Hardware("h100", mfu=1.0).cluster()  # hierarchical by default; a bound's: alpha-beta at line rate
    where = span(run_mesh({}, Layout(data=16)), (REPLICAS,), 8)
    assert where == Span(2, 8)
    seconds, link = h100.time("all-reduce", GB, 16, where=where)
    assert link == "nvlink4+ib-ndr"
    assert seconds == pytest.approx(2 * _ring(GB, 8, NVLINK4, NVLINK_ALPHA)
                                    + _ring_all_reduce(GB / 8, 2, NDR, NDR_ALPHA))
    # uneven (tensor 3 on nodes of 8: some groups straddle two nodes): one flat ring on the network
    uneven = span((("model", 3), (REPLICAS, 4)), ("model",), 8)
    assert uneven == Span(2, None)
    assert h100.time("all-reduce", GB, 3, where=uneven) == (
        pytest.approx(_ring_all_reduce(GB, 3, NDR, NDR_ALPHA)), "ib-ndr")


@pytest.mark.parametrize("mesh, node_size, crosses", [
    ((("model", 4), ("pipeline", 2)), 8, False),   # both stages of a shard in one node of 8
    ((("model", 4), ("pipeline", 2)), 4, True),    # a stage fills its node: the next is on another
    ((("model", 1), ("pipeline", 4), (REPLICAS, 2)), 8, False),  # 4 stages of one device, 2 replicas: 8
    ((("model", 3), ("pipeline", 2), (REPLICAS, 2)), 8, True),   # the 2nd replica's stages straddle 8
])
def test_pipeline_neighbours_share_a_node_or_not(mesh, node_size, crosses):
    assert crosses_nodes(mesh, "pipeline", node_size) is crosses


def test_placed_collectives_carry_their_span():
    rows = [{"kind": "all-reduce", "bytes": 100, "group_size": 4, "executions": 1, "axes": ("model",)},
            {"kind": "all-reduce", "bytes": 100, "group_size": 3, "executions": 1, "axes": ("model",)}]
    placed = comm.placed(rows, (("model", 4), (REPLICAS, 2)), 2)
    assert placed[0]["span"] == Span(2, 2)  # 4 shards on nodes of 2
    assert "span" not in placed[1]  # a group its axes do not make: no placement (consecutive devices)
