"""The links between devices: what each is, its bandwidth and latency, and where they come from.

An `Interconnect` is one kind of link (NVLink, PCIe, InfiniBand, Ethernet, a TPU's
ICI or its hosts' data-center network) with its per-device bandwidth, its
per-hop latency and the sources of both; `INTERCONNECTS` holds the presets by
name (`interconnect` looks one up). `xla_cost.timemodel.comm` wires them into
clusters and prices collectives over them; `xla_cost.timemodel.devices.NODES`
names the links each node is built of. The checks of a link's figures
(`check_bandwidth`, `check_latency`, `check_count`, `check_node_size`) are here,
where the figures are declared.

Bandwidth convention: `Interconnect.bandwidth` is bytes/s per device in one
direction. Accelerator datasheets quote the bidirectional aggregate (NVLink
900 GB/s on H100 is 450 GB/s each way; PCIe 5.0 x16 128 GB/s is 64 GB/s each
way), so those figures are halved. Network line rates (InfiniBand, Ethernet)
are already per direction (the links are full duplex), so they are only
converted from bits to bytes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from xla_cost.errors import InputError

__all__ = ["Interconnect", "INTERCONNECTS", "interconnect", "is_finite_number", "check_bandwidth", "check_latency",
           "check_count", "check_node_size"]


def is_finite_number(value: Any) -> bool:
    """Whether ``value`` is an int or float (not a bool) and finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_bandwidth(value: Any, what: str = "bandwidth") -> None:
    """`InputError` unless ``value`` is a finite number of bytes/s > 0 (``what``: what it is)."""
    if not is_finite_number(value) or value <= 0:
        raise InputError(
            f"a {what} in bytes/s per device per direction, a finite number > 0",
            repr(value),
            "Pass e.g. 50e9 for InfiniBand NDR (400 Gb/s).",
        )


def check_latency(value: Any) -> None:
    """`InputError` unless ``value`` is a finite number of seconds per hop >= 0."""
    if not is_finite_number(value) or value < 0:
        raise InputError(
            "a latency in seconds per hop, a finite number >= 0",
            repr(value),
            "Pass e.g. 5e-6 for InfiniBand.",
        )


def check_count(value: Any, what: str, fix: str) -> None:
    """`InputError` unless ``value`` is an integer >= 1 (``what``: what it counts)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"{what}, an integer >= 1", repr(value), fix)


def check_node_size(value: Any) -> None:
    """`InputError` unless ``value`` is a number of devices per node, an integer >= 1."""
    check_count(value, "a node size, the number of devices per node", "Pass e.g. node_size=8 for an 8-GPU server.")


@dataclasses.dataclass(frozen=True)
class Interconnect:
    """One kind of link between devices, with where its figures come from.

    Attributes:
      name: the preset key, e.g. ``"nvlink4"``.
      description: what it is, with the datasheet figure, e.g.
        ``"NVLink 4 (H100 SXM): 900 GB/s per GPU, both directions"``.
      bandwidth: bytes/s per device in one direction, the ``1/beta`` of the
        model: half of a datasheet's bidirectional aggregate, or a network's
        line rate in bytes (see the module docstring).
      latency: seconds per hop, the ``alpha`` of the model.
      source: the datasheet or specification the bandwidth comes from, with URL.
      latency_source: where ``latency`` comes from; for the presets an assumed
        typical value, said as such.

    Raises:
      InputError: a bandwidth that is not > 0 or a latency that is not >= 0.
    """

    name: str
    description: str
    bandwidth: float
    latency: float
    source: str
    latency_source: str

    def __post_init__(self) -> None:
        check_bandwidth(self.bandwidth)
        check_latency(self.latency)


_ASSUMED = "assumed: typical {what} per-hop latency (order of magnitude, not measured here)"


def _preset(name: str, description: str, bandwidth: float, latency: float, source: str,
            what: str) -> Interconnect:
    return Interconnect(name, description, bandwidth, latency, source, _ASSUMED.format(what=what))


INTERCONNECTS: Mapping[str, Interconnect] = MappingProxyType({
    i.name: i
    for i in (
        _preset(
            "nvlink5", "NVLink 5 (B200): 1.8 TB/s per GPU, both directions",
            900e9, 1e-6,
            "NVIDIA DGX B200 user guide: 2 fifth-generation NVLink switches, 14.4 TB/s aggregate for 8 B200 "
            "(https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html); HGX B200 "
            "specifications: NVLink 1.8 TB/s per GPU (https://www.nvidia.com/en-us/data-center/hgx/); halved "
            "per direction",
            "NVLink (NCCL)"),
        _preset(
            "nvlink4", "NVLink 4 (H100 SXM): 900 GB/s per GPU, both directions",
            450e9, 1e-6,
            "NVIDIA H100 Tensor Core GPU datasheet, SXM: NVLink 900 GB/s "
            "(https://www.nvidia.com/en-us/data-center/h100/); halved per direction",
            "NVLink (NCCL)"),
        _preset(
            "nvlink3", "NVLink 3 (A100 SXM): 600 GB/s per GPU, both directions",
            300e9, 1e-6,
            "NVIDIA A100 Tensor Core GPU datasheet, SXM: NVLink 600 GB/s "
            "(https://www.nvidia.com/en-us/data-center/a100/); halved per direction",
            "NVLink (NCCL)"),
        _preset(
            "nvlink2", "NVLink 2 (V100 SXM2): 300 GB/s per GPU, both directions",
            150e9, 1e-6,
            "NVIDIA V100 Tensor Core GPU datasheet, SXM2: NVLink 300 GB/s "
            "(https://www.nvidia.com/en-us/data-center/v100/); halved per direction",
            "NVLink (NCCL)"),
        _preset(
            "nvlink2-nvswitch", "NVLink 2 through NVSwitch (DGX-2, 16 V100 SXM3): 300 GB/s per GPU, both directions",
            150e9, 1e-6,
            "NVIDIA DGX-2 datasheet: 16 Tesla V100 on NVSwitch, 2.4 TB/s bisection bandwidth, NVLink 300 GB/s per "
            "GPU (https://www.nvidia.com/en-us/data-center/dgx-2/); halved per direction. The same NVLink 2 as "
            "'nvlink2', every GPU's six links to the NVSwitch planes rather than to its DGX-1 cube-mesh "
            "neighbours: NCCL's measured curve differs (xla_cost.timemodel.bus.FABRICS)",
            "NVLink (NCCL)"),
        _preset(
            "nvlink1", "NVLink 1 (P100 SXM2): 160 GB/s per GPU, both directions",
            80e9, 1e-6,
            "NVIDIA Tesla P100 datasheet, SXM2: NVLink interconnect bandwidth 160 GB/s "
            "(https://www.nvidia.com/en-us/data-center/tesla-p100/); halved per direction",
            "NVLink (NCCL)"),
        _preset(
            "pcie5", "PCIe 5.0 x16: 128 GB/s, both directions",
            64e9, 2e-6,
            "NVIDIA H100 datasheet: PCIe Gen5 128 GB/s "
            "(https://www.nvidia.com/en-us/data-center/h100/); halved per direction",
            "PCIe peer-to-peer (NCCL)"),
        _preset(
            "pcie4", "PCIe 4.0 x16: 64 GB/s, both directions",
            32e9, 2e-6,
            "NVIDIA A100 datasheet: PCIe Gen4 64 GB/s "
            "(https://www.nvidia.com/en-us/data-center/a100/); halved per direction",
            "PCIe peer-to-peer (NCCL)"),
        _preset(
            "pcie3", "PCIe 3.0 x16: 32 GB/s, both directions (2017-era P40 / V100 PCIe servers)",
            16e9, 2e-6,
            "NVIDIA V100 datasheet, PCIe: interconnect bandwidth PCIe 32 GB/s "
            "(https://www.nvidia.com/en-us/data-center/v100/); Tesla P40 is PCIe 3.0 x16 too; "
            "halved per direction",
            "PCIe peer-to-peer (NCCL)"),
        _preset(
            "ib-ndr", "InfiniBand NDR: 400 Gb/s per GPU (one ConnectX-7 per GPU, DGX H100)",
            50e9, 5e-6,
            "InfiniBand Trade Association roadmap, NDR 400 Gb/s per 4x port "
            "(https://www.infinibandta.org/infiniband-roadmap/); NVIDIA DGX H100 user guide: "
            "8 single-port ConnectX-7 400 Gb/s "
            "(https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html); "
            "line rate per direction, /8 bits",
            "InfiniBand RDMA (NCCL)"),
        _preset(
            "ib-hdr", "InfiniBand HDR: 200 Gb/s per GPU (one ConnectX-6 per GPU, DGX A100)",
            25e9, 5e-6,
            "InfiniBand Trade Association roadmap, HDR 200 Gb/s per 4x port "
            "(https://www.infinibandta.org/infiniband-roadmap/); NVIDIA DGX A100 user guide: "
            "8 single-port ConnectX-6 200 Gb/s HDR "
            "(https://docs.nvidia.com/dgx/dgxa100-user-guide/introduction-to-dgxa100.html); "
            "line rate per direction, /8 bits",
            "InfiniBand RDMA (NCCL)"),
        _preset(
            "ib-edr", "InfiniBand EDR: 100 Gb/s (2016-2018 clusters)",
            12.5e9, 5e-6,
            "InfiniBand Trade Association roadmap, EDR 100 Gb/s per 4x port "
            "(https://www.infinibandta.org/infiniband-roadmap/); line rate per direction, /8 bits",
            "InfiniBand RDMA (NCCL)"),
        _preset(
            "ethernet-25g", "Ethernet 25GbE: 25 Gb/s",
            3.125e9, 1e-5,
            "IEEE Std 802.3by-2016, 25 Gb/s Ethernet (IEEE P802.3by task force, "
            "https://www.ieee802.org/3/by/); line rate per direction, /8 bits",
            "TCP over Ethernet"),
        _preset(
            "ethernet-50g", "Ethernet 50GbE: 50 Gb/s",
            6.25e9, 1e-5,
            "IEEE Std 802.3cd-2018, 50 Gb/s Ethernet (https://www.ieee802.org/3/cd/); line rate per "
            "direction, /8 bits",
            "TCP over Ethernet"),
        _preset(
            "ethernet-100g", "Ethernet 100GbE: 100 Gb/s (a TPU v5e host has two)",
            12.5e9, 1e-5,
            "IEEE Std 802.3ba-2010, 100 Gb/s Ethernet (https://www.ieee802.org/3/ba/); line rate per direction, "
            "/8 bits",
            "TCP over Ethernet (data-center network)"),
        _preset(
            "ethernet-200g", "Ethernet 200GbE: 200 Gb/s (a TPU v6e host has four)",
            25e9, 1e-5,
            "IEEE Std 802.3bs-2017, 200 Gb/s and 400 Gb/s Ethernet (https://www.ieee802.org/3/bs/); line rate per "
            "direction, /8 bits",
            "TCP over Ethernet (data-center network)"),
        _preset(
            "tpu-v5p-dcn", "TPU v5p data-center network: 50 Gb/s per chip",
            6.25e9, 1e-5,
            "Cloud TPU v5p documentation: data center network (DCN) bandwidth per chip 50 Gbps "
            "(https://cloud.google.com/tpu/docs/v5p); /8 bits, per direction",
            "the data-center network between TPU slices"),
        _preset(
            "tpu-v5e-ici", "TPU v5e inter-chip interconnect: 400 GB/s per chip, both directions "
            "(4 ICI ports, 2D torus)",
            200e9, 1e-6,
            "Cloud TPU v5e documentation: bidirectional ICI bandwidth per chip 400 GBps, "
            "4 ICI ports per chip (earlier versions of the page: 'Interchip Interconnect BW "
            "1,600 Gbps', the same 200 GB/s one way); all-reduce bandwidth per 256-chip pod "
            "51.2 TB/s = 200 GB/s per chip (https://cloud.google.com/tpu/docs/v5e); halved per "
            "direction; the aggregate of all 4 ports",
            "TPU ICI"),
        _preset(
            "tpu-v4-ici", "TPU v4 inter-chip interconnect: 3D mesh or torus, all-reduce 1.1 PB/s per "
            "4096-chip pod",
            1.1e15 / 4096, 1e-6,
            "Cloud TPU v4 documentation: all-reduce bandwidth per Pod 1.1 PB/s, 4096 chips per Pod "
            "(https://cloud.google.com/tpu/docs/v4); per chip, 1.1e15 / 4096 = 269 GB/s, as the v5e's "
            "51.2 TB/s / 256 = 200 GB/s",
            "TPU ICI"),
        _preset(
            "tpu-v5p-ici", "TPU v5p inter-chip interconnect: 4800 Gbps per chip (3D torus)",
            600e9, 1e-6,
            "Cloud TPU v5p documentation: Interchip Interconnect BW 4800 Gbps per chip "
            "(https://cloud.google.com/tpu/docs/v5p); /8 bits, one way, as the v5e's 1,600 Gbps "
            "(= 400 GBps both directions)",
            "TPU ICI"),
        _preset(
            "tpu-v6e-ici", "TPU v6e inter-chip interconnect: 800 GB/s per chip, both directions "
            "(4 ICI ports, 2D torus)",
            400e9, 1e-6,
            "Cloud TPU v6e documentation: bidirectional ICI bandwidth per chip 800 GBps, 4 ICI ports per "
            "chip; all-reduce bandwidth per 256-chip Pod 102.4 TB/s = 400 GB/s per chip "
            "(https://cloud.google.com/tpu/docs/v6e); halved per direction",
            "TPU ICI"),
    )
})
"""Interconnect presets by name. Bandwidths are from the sources named in each
entry, per device and per direction; latencies are assumed typical values."""


def interconnect(name: str) -> Interconnect:
    """The preset `Interconnect` called ``name`` (case-insensitive).

    Raises:
      InputError: an unknown name; the message lists the presets.
    """
    found = INTERCONNECTS.get(name.lower()) if isinstance(name, str) else None
    if found is None:
        raise InputError(
            f"an interconnect preset ({', '.join(INTERCONNECTS)})",
            repr(name),
            "Pick one of these, or override bandwidth= and latency= in cluster().",
        )
    return found
