"""An all-reduce over several nodes staged through host memory, as Gloo's CUDA
halving/doubling ran it for Goyal et al. 2017 (arXiv:1706.02677, §4.1: a
reduce within each server, the all-reduce between servers, a broadcast; Gloo
at 49befe3 with its default host workspace: a copy to the host and back).

Expected seconds are the closed form of `xla_cost.timemodel.comm.staged_all_reduce`
written out from the cited rates: NVLink 1 of a P100 SXM2 (datasheet 160 GB/s,
80 GB/s per direction, 1 us a hop assumed), its PCIe 3.0 x16 host link (32 GB/s,
16 GB/s each way), one 50 Gb/s Ethernet card per Big Basin server (§4.3:
6.25 GB/s, 10 us a hop assumed), recursive halving and doubling between the
servers (ceil(log2 p) hops a pass, Thakur et al. 2005).
"""

from __future__ import annotations

import math

import pytest

from xla_cost.errors import InputError
from xla_cost.parallel.placement import Span
from xla_cost.timemodel import comm

NVLINK1, NVLINK1_ALPHA = 160e9 / 2, 1e-6  # P100 SXM2 datasheet, per direction
PCIE3 = 32e9 / 2  # PCIe 3.0 x16, each way
ETHERNET_50G, ETHERNET_ALPHA = 50e9 / 8, 1e-5  # one ConnectX-4 50GbE card per server (Goyal et al. §4.3)
S = 102_228_128  # ResNet-50's 25,557,032 float32 gradients (4 bytes each)


def _cluster() -> comm.Cluster:
    return comm.staged(comm.cluster("p100", algorithm="halving-doubling", curves=False), "p100")


def test_a_big_basin_server_shares_one_50g_card_among_its_8_gpus():
    cluster = comm.cluster("p100")
    assert cluster.node_size == 8
    assert cluster.inter.bandwidth == pytest.approx(ETHERNET_50G / 8)  # one card, 8 GPUs
    assert cluster.host is None  # on the devices unless a run stages it
    assert _cluster().host == PCIE3


@pytest.mark.parametrize("servers", [2, 32])
def test_the_three_phases_and_the_two_copies_add_up(servers):
    seconds, links = _cluster().time("all-reduce", S, 8 * servers, where=Span(servers, 8))
    hops = math.ceil(math.log2(servers))
    reduce = S / NVLINK1 + 7 * NVLINK1_ALPHA  # (1) an NCCL reduce onto one GPU: the whole buffer down a chain of 8
    copies = 2 * S / PCIE3  # to the host's memory and back, one GPU's PCIe link
    between = 2 * (servers - 1) / servers * S / ETHERNET_50G + 2 * hops * ETHERNET_ALPHA  # (2) at the server's card
    assert seconds == pytest.approx(2 * reduce + copies + between, rel=1e-12)  # (3) the broadcast as (1)
    assert links == "nvlink1+host+ethernet-50g:1/8x8"


def test_within_one_server_nothing_is_staged_and_other_kinds_keep_their_price():
    staged, plain = _cluster(), comm.cluster("p100", algorithm="halving-doubling", curves=False)
    assert staged.time("all-reduce", S, 8, where=Span(1, 8)) == plain.time("all-reduce", S, 8, where=Span(1, 8))
    assert staged.time("all-gather", S, 16, where=Span(2, 8)) == plain.time("all-gather", S, 16, where=Span(2, 8))
    # without a placement, a group of more than a node's devices spans nodes (consecutive devices)
    assert staged.time("all-reduce", S, 16)[0] == pytest.approx(comm.staged_all_reduce(S, 2, 8, staged)[0])


def test_the_note_says_it_and_a_device_without_a_host_link_is_refused():
    _, _, notes = comm.communication_time(
        [{"kind": "all-reduce", "bytes": S, "group_size": 16, "executions": 1, "span": Span(2, 8)}], _cluster())
    assert any("staged through host memory" in n and "16 GB/s host link" in n for n in notes)
    with pytest.raises(InputError, match="HOST_LINKS"):
        comm.staged(comm.cluster("h100"), "h100")
