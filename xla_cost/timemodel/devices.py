"""The device registry: every device xla_cost knows, declared once.

A `Device` holds what its datasheet publishes: dense peak FLOP/s by dtype,
memory bandwidth and capacity, and the `Node` a cluster of them is built of
(`NODES`: devices per node, the link between them, the network adapters
between nodes and their line rate, `xla_cost.timemodel.comm.INTERCONNECTS`),
each with its source. Timing (MFU, the roofline), `fit`
(capacity), the communication model, `scaling`, `estimate` and the command
line's help all read it; adding a device is one entry in `DEVICES`.

Names are looked up case-insensitively by registry key (``h100``), and a
``jax.Device.device_kind`` (``NVIDIA H100 80GB HBM3``) by the substrings each
entry lists in `Device.kind`, the most specific entry first. Nothing heavy is
imported: the command line builds its help from this module.
"""

from __future__ import annotations

import dataclasses
import re
import math
from collections.abc import Callable, Mapping
from types import MappingProxyType

from xla_cost.choices import FLOAT8
from xla_cost.compiled.targets import ALLOCATOR_FRACTION, CompileTarget, GpuSpec, TpuSpec
from xla_cost.errors import InputError

__all__ = ["CUDA_CONTEXT_BYTES", "allocatable", "DevicePeak", "Node", "NODES", "node", "Dispatch", "Device", "DEVICES",
           "device", "host_dispatch", "match_kind", "names", "target",
           "target_names", "target_slice",
           "TPU_MATRIX_UNITS", "matrix_units", "HostLink", "HOST_LINKS", "host_link"]

_T = 1e12


@dataclasses.dataclass(frozen=True)
class DevicePeak:
    """Peak dense throughput and memory bandwidth of a device.

    Attributes:
      name: the device, as the registry or the measurement names it.
      flops_per_s: peak FLOP/s by computation dtype (``bfloat16``, ``float16``,
        ``float32``; ``float8`` where the device has FP8 tensor cores, which a
        compiled program's FP8 gemms are priced at); for float32 on tensor-core
        GPUs the TF32 peak, which is what XLA uses for float32 matmuls by
        default there.
      bandwidth: peak memory bandwidth, bytes/s.
      source: where the figures come from.
    """

    name: str
    flops_per_s: Mapping[str, float]
    bandwidth: float
    source: str

    def for_dtype(self, dtype: str) -> float:
        """The peak for ``dtype``; float32's for a dtype not listed (0.0 if neither is), but
        float8's alone for float8 (0.0 where the device has no FP8 units: its float32 peak is
        no rate for a product it cannot run)."""
        if dtype == FLOAT8:
            return self.flops_per_s.get(dtype, 0.0)
        return self.flops_per_s.get(dtype, self.flops_per_s.get("float32", 0.0))

    def has_units(self, dtype: str) -> bool:
        """Whether the device multiplies ``dtype`` on units of its own: a peak for it that is not
        merely the float32 rate where another 16-bit dtype runs faster (a V100's bfloat16, run on
        its FP32 cores beside FP16 tensor cores); a TPU's bfloat16, its one rate, counts."""
        peak, single = self.flops_per_s.get(dtype, 0.0), self.flops_per_s.get("float32", 0.0)
        faster = any(value > single for name, value in self.flops_per_s.items() if name not in (dtype, "float32"))
        return peak > 0 and (dtype == "float32" or peak > single or not faster)

    def require(self, dtype: str) -> float:
        """The published peak for ``dtype``, refused where the device has no such units (a
        P100's bfloat16: 0.0) or publishes none (a TPU's float16: not float32's peak under
        float16's name).

        Raises:
          InputError: no published peak for ``dtype``; the message names the dtypes that have one.
        """
        peak = self.flops_per_s.get(dtype, 0.0)
        if peak > 0:
            return peak
        having = [name for name, value in self.flops_per_s.items() if value > 0]
        with_units = [d.name for d in DEVICES.values() if d.peak is not None and d.peak.has_units(dtype)]
        among = f" ({', '.join(with_units)})" if with_units else ""
        raise InputError(f"a dtype the {self.name} has a published peak for ({', '.join(having)})", repr(dtype),
                         f"Use --dtype {' or '.join(having)} (dtype=), or a device with {dtype} units{among}.")


@dataclasses.dataclass(frozen=True)
class Node:
    """What one node of a cluster is: the devices on one fast link, and the
    network adapters that carry their traffic to other nodes.

    A GPU node is one server (one host); a TPU node is a slice, its chips on
    the inter-chip interconnect (ICI), driven by several hosts, and the
    data-center network (DCN) between slices. Between nodes a device has
    its share of its host's adapters: ``nics * line rate / host devices``
    (`xla_cost.timemodel.comm.cluster`).

    Attributes:
      name: the preset key (``dgx-h100``), what ``--node`` takes.
      title: what it is, in words.
      devices: devices per node (a TPU slice's chips).
      intra: the `xla_cost.timemodel.comm.INTERCONNECTS` name of the link
        between devices of the node (per device, one direction).
      nic: the INTERCONNECTS name of one network adapter between nodes (its
        line rate, one direction).
      nics: network adapters per host.
      host_devices: devices per host where a host is not the whole node (a
        TPU host's chips); None: the node is one host.
      links: links per device of the fabric within the node where published
        (a TPU chip's ICI ports: ``intra`` is their aggregate); None: not given.
      source: where the shape comes from (datasheets, or said to be assumed).
    """

    name: str
    title: str
    devices: int
    intra: str
    nic: str
    nics: int
    host_devices: int | None = None
    links: int | None = None
    source: str = ""

    @property
    def per_host(self) -> int:
        """Devices per host: those that share ``nics`` adapters."""
        return self.host_devices or self.devices


_ASSUMED_SERVER = "assumed: one adapter per GPU, as in the DGX H100 (no datasheet for a generic server)"

NODES: Mapping[str, Node] = MappingProxyType({n.name: n for n in (
    Node("dgx-h100", "NVIDIA DGX H100: 8 H100 SXM5 on NVLink 4 (NVSwitch), 8 x 400 Gb/s NDR", 8,
         "nvlink4", "ib-ndr", 8,
         source="NVIDIA DGX H100 user guide: 8 H100 SXM5 GPUs on fourth-generation NVLink through NVSwitch; 8 "
                "single-port ConnectX-7 adapters, 400 Gb/s InfiniBand/Ethernet, for the compute fabric "
                "(https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html)"),
    Node("dgx-h200", "NVIDIA DGX H200: 8 H200 on NVLink 4 (NVSwitch), 8 x 400 Gb/s NDR", 8,
         "nvlink4", "ib-ndr", 8,
         source="NVIDIA DGX H200 datasheet: 8 H200 GPUs, NVLink 900 GB/s per GPU through NVSwitch; 8 single-port "
                "ConnectX-7 VPI adapters, up to 400 Gb/s (https://www.nvidia.com/en-us/data-center/dgx-h200/)"),
    Node("dgx-b200", "NVIDIA DGX B200: 8 B200 on NVLink 5 (NVSwitch), 8 x 400 Gb/s NDR", 8,
         "nvlink5", "ib-ndr", 8,
         source="NVIDIA DGX B200 user guide, hardware overview: 8 NVIDIA B200 GPUs, 1,440 GB in all; 2 fifth-"
                "generation NVLink switches, 14.4 TB/s aggregate (= 8 x 1.8 TB/s); network (cluster) 4 OSFP ports "
                "for 8 single-port ConnectX-7 cards, InfiniBand up to 400 Gb/s each (the 2 BlueField-3 DPUs are "
                "for storage and management) (https://docs.nvidia.com/dgx/dgxb200-user-guide/"
                "introduction-to-dgxb200.html); the DGX BasePOD reference architecture: four of the ConnectX-7 "
                "OSFP ports are the compute fabric (https://docs.nvidia.com/dgx-basepod/reference-architecture-"
                "infrastructure-foundation-enterprise-ai/latest/core-components.html)"),
    Node("dgx-a100", "NVIDIA DGX A100: 8 A100 SXM4 on NVLink 3 (NVSwitch), 8 x 200 Gb/s HDR", 8,
         "nvlink3", "ib-hdr", 8,
         source="NVIDIA DGX A100 user guide: 8 A100 SXM4 GPUs on third-generation NVLink through NVSwitch; 8 "
                "single-port ConnectX-6 adapters, 200 Gb/s HDR InfiniBand, for the cluster network "
                "(https://docs.nvidia.com/dgx/dgxa100-user-guide/introduction-to-dgxa100.html)"),
    Node("dgx-2", "NVIDIA DGX-2: 16 V100 SXM3 on NVLink 2 (NVSwitch), 8 x 100 Gb/s EDR", 16,
         "nvlink2-nvswitch", "ib-edr", 8,
         source="NVIDIA DGX-2 datasheet: 16 Tesla V100 GPUs on NVSwitch (NVLink 300 GB/s per GPU); network "
                "8 x 100 Gb/s InfiniBand EDR / 100 GigE (https://www.nvidia.com/en-us/data-center/dgx-2/)"),
    Node("dgx-1", "NVIDIA DGX-1 with V100: 8 V100 SXM2 on NVLink 2 (hybrid cube-mesh), 4 x 100 Gb/s EDR", 8,
         "nvlink2", "ib-edr", 4,
         source="NVIDIA DGX-1 with Tesla V100 datasheet: 8 Tesla V100 SXM2 GPUs on NVLink (hybrid cube-mesh); "
                "network 4 x InfiniBand EDR 100 Gb/s, dual 10 GbE (https://www.nvidia.com/en-us/data-center/dgx-1/)"),
    Node("pcie5-server", "8 H100 PCIe on PCIe 5.0, 8 x 400 Gb/s NDR", 8, "pcie5", "ib-ndr", 8,
         source=_ASSUMED_SERVER),
    Node("pcie3-server", "8 GPUs on PCIe 3.0 (2017-2018 servers), 8 x 100 Gb/s EDR", 8, "pcie3", "ib-edr", 8,
         source="assumed: the PCIe 3.0 servers of 8 GPUs of 2017-2018 papers, one EDR port per GPU (Jia et al. "
                "2018 had one 100 Gb/s port per server: nics=1)"),
    Node("big-basin", "Facebook Big Basin: 8 P100 SXM2 on NVLink 1, one 50 Gb/s Ethernet adapter", 8,
         "nvlink1", "ethernet-50g", 1,
         source="Goyal et al. 2017 (arXiv:1706.02677) section 4.3: 'Each server contains 8 NVIDIA Tesla P100 GPUs "
                "that are interconnected with NVIDIA NVLink ... the servers have a Mellanox ConnectX-4 50Gbit "
                "Ethernet network card': one adapter per server, shared by its 8 GPUs"),
    Node("tpu-v4-pod", "a TPU v4 pod: 4096 chips on the 3D ICI", 4096, "tpu-v4-ici", "tpu-v4-ici", 4, 4,
         source="Cloud TPU v4 documentation: 4096 chips per Pod on a 3D mesh or torus, 4 chips per host "
                "(https://cloud.google.com/tpu/docs/v4); it publishes no data-center network figure: the ICI is "
                "assumed between slices too (optimistic; give bandwidth= for a multislice job)"),
    Node("tpu-v5e-pod", "a TPU v5e pod: 256 chips on the 2D ICI torus, 2 x 100 Gb/s DCN per host of 8", 256,
         "tpu-v5e-ici", "ethernet-100g", 2, 8, 4,
         source="Cloud TPU v5e documentation: TPU Pod size 256 chips, 2D torus, 4 ICI ports per chip, 8 chips per "
                "host, per-host NIC configuration 2 x 100 Gbps NIC, data center network bandwidth per Pod "
                "6.4 Tbps (= 32 hosts x 200 Gb/s) (https://cloud.google.com/tpu/docs/v5e)"),
    Node("tpu-v5p-slice", "the largest TPU v5p slice: 6144 chips on the 3D ICI torus, 50 Gb/s DCN per chip", 6144,
         "tpu-v5p-ici", "tpu-v5p-dcn", 4, 4,
         source="Cloud TPU v5p documentation: the largest slice 16x16x24 = 6144 chips, 3D torus, 4 chips per host "
                "(VM), data center network (DCN) bandwidth per chip 50 Gbps (https://cloud.google.com/tpu/docs/v5p)"),
    Node("tpu-v6e-pod", "a TPU v6e pod: 256 chips on the 2D ICI torus, 4 x 200 Gb/s DCN per host of 8", 256,
         "tpu-v6e-ici", "ethernet-200g", 4, 8, 4,
         source="Cloud TPU v6e documentation: TPU Pod size 256 chips, 2D torus, 4 ICI ports per chip, 8 chips per "
                "host, per-host NIC configuration 4 x 200 Gbps NIC, data center network bandwidth per Pod "
                "25.6 Tbps (https://cloud.google.com/tpu/docs/v6e)"),
    Node("cpu-host", "one CPU host per node on 25 Gb/s Ethernet", 1, "ethernet-25g", "ethernet-25g", 1,
         source="assumed: one host per node, one 25GbE port"),
)})
"""Node presets by name: the servers and TPU slices a cluster is built of,
each device's default (`Device.node`) among them. ``dgx-2`` (16 V100 with 8
EDR adapters: 6.25 GB/s per GPU between nodes) and ``dgx-1`` (8 V100 with 4)
share their adapters; the TPU pods' devices share their hosts' DCN adapters."""


def node(name: str) -> Node:
    """The `NODES` preset called ``name`` (any case).

    Raises:
      InputError: an unknown name; the message lists the presets.
    """
    found = NODES.get(name.strip().lower()) if isinstance(name, str) else None
    if found is None:
        raise InputError(f"a node preset ({', '.join(NODES)})", repr(name),
                         "Use one of these names, e.g. --node dgx-h100 (node=).")
    return found


@dataclasses.dataclass(frozen=True)
class Dispatch:
    """What a jitted call costs the host that dispatches it to the device,
    measured there (``python benchmarks/dispatch_costs.py``): a step whose
    kernels take less waits for its host.

    Attributes:
      call: seconds of a call of one argument that does next to nothing (the
        ``chain`` program of one kernel).
      per_argument: seconds each further array passed adds (the slope of the
        ``arguments`` program over 1 to 1,024 arrays, each in and out).
      source: the measurement (file, machine, date).
    """

    call: float
    per_argument: float
    source: str

    def seconds(self, arguments: int | None, calls: int = 1) -> float:
        """Seconds to dispatch ``calls`` calls passing ``arguments`` arrays in
        all (None: unknown, the calls alone)."""
        return calls * self.call + self.per_argument * max((arguments or 0) - calls, 0)


@dataclasses.dataclass(frozen=True)
class Device:
    """One device of the registry.

    Attributes:
      name: the registry key (``h100``), what ``--device`` takes.
      title: the device as reports name it (``NVIDIA H100 SXM``).
      kind: substrings of ``jax.Device.device_kind`` that all identify it
        (``("H100", "PCIe")``).
      peak: published dense peaks and bandwidth; None where none is published
        here (a CPU is measured instead).
      memory: capacity in bytes (decimal gigabytes, as datasheets give them);
        None where unknown.
      memory_source: where ``memory`` comes from.
      node: the `NODES` preset a cluster of it is built of (its links, devices
        per node and network adapters); None: no cluster preset.
      gpu: what XLA's GPU compiler is told of it (`xla_cost.compiled.targets.GpuSpec`):
        a GPU with one can be a compile target (``--target h100``).
      tpu: a TPU generation's slices (`xla_cost.compiled.targets.TpuSpec`): a
        compile target as ``tpu-v5e:2x2``.
      dispatch: the host's cost of a call, measured on a machine with this
        device (`Dispatch`); None where none was measured (`host_dispatch`).
    """

    name: str
    title: str
    kind: tuple[str, ...]
    peak: DevicePeak | None = None
    memory: float | None = None
    memory_source: str = ""
    node: str | None = None
    gpu: GpuSpec | None = None
    tpu: TpuSpec | None = None
    dispatch: Dispatch | None = None

    @property
    def has_cluster(self) -> bool:
        """Whether the device has a cluster preset (its node is known)."""
        return self.node is not None

    @property
    def intra(self) -> str | None:
        """The `INTERCONNECTS` name of the link between devices of its node (None: no preset)."""
        return NODES[self.node].intra if self.node is not None else None

    @property
    def inter(self) -> str | None:
        """The `INTERCONNECTS` name of one network adapter between its nodes (None: no preset)."""
        return NODES[self.node].nic if self.node is not None else None

    @property
    def node_size(self) -> int:
        """Devices per node (1 without a preset)."""
        return NODES[self.node].devices if self.node is not None else 1


CUDA_CONTEXT_BYTES = 143771 * 2**20 - 150_111_343_957
"""Memory of a GPU that the CUDA driver and context hold before JAX's allocator
takes its share (``XLA_PYTHON_CLIENT_MEM_FRACTION``) of what is free: 614 MiB
on an H200 of 143,771 MiB, whose allocator limit was 112,583,507,968 bytes at
the default 0.75, i.e. 0.75 of 150,111,343,957 bytes free
(reports/data/device_check_nvidia-h200_2026-11-26.json). Taken for every GPU
(`allocatable`): measured on one."""


def host_dispatch(found: Device) -> tuple[Dispatch, bool]:
    """(the host's `Dispatch` for ``found``, whether it was measured with it):
    where no machine with the device was measured, the fastest host measured
    (a floor: a step takes at least that)."""
    if found.dispatch is not None:
        return found.dispatch, True
    measured = [d.dispatch for d in DEVICES.values() if d.dispatch is not None]
    return min(measured, key=lambda d: (d.call, d.per_argument)), False


def allocatable(found: Device) -> tuple[float, str]:
    """``(bytes, source)``: the memory JAX's allocator takes its share of on
    ``found``: a GPU's memory less `CUDA_CONTEXT_BYTES`; a TPU's whole memory."""
    assert found.memory is not None
    if found.gpu is None:
        return float(found.memory), found.memory_source
    return (float(found.memory - CUDA_CONTEXT_BYTES),
            f"{found.memory_source}; less the {CUDA_CONTEXT_BYTES / 2**20:,.0f} MiB the CUDA context holds "
            "(measured on an H200)")


def _peak(title: str, bf16: float, f16: float, f32: float, bandwidth: float, source: str,
          f8: float | None = None) -> DevicePeak:
    """Dense peaks in TFLOP/s by dtype (bfloat16, float16, float32; float8 where the
    device has FP8 tensor cores), memory bandwidth in bytes/s."""
    peaks = {"bfloat16": bf16 * _T, "float16": f16 * _T, "float32": f32 * _T}
    if f8 is not None:
        peaks["float8"] = f8 * _T
    return DevicePeak(title, peaks, bandwidth, source)


_V100_SOURCE = ("NVIDIA V100 datasheet, SXM2 (FP16 tensor 125 TFLOPS, FP32 15.7; no BF16 tensor cores; "
                "HBM2 900 GB/s)")
_V100_GPU_SOURCE = ("NVIDIA Tesla V100 GPU Architecture whitepaper (2017), SXM2: 80 SMs of 64 FP32 cores, 1,530 MHz "
                    "boost (80 x 64 x 2 x 1.53 GHz = 15.7 TFLOPS), 6,144 KB L2, 2,048 threads, 64K registers and "
                    "up to 96 KB shared memory per SM; CUDA C++ Programming Guide, compute capability 7.0: all "
                    "96 KB to one block")


DEVICES: Mapping[str, Device] = MappingProxyType({d.name: d for d in (
    Device(
        "h100", "NVIDIA H100 SXM", ("H100",),
        _peak("NVIDIA H100 SXM", 989.4, 989.4, 494.7, 3.35e12,
              "NVIDIA H100 datasheet, SXM5 (dense: BF16 989.4 TFLOPS, TF32 494.7, FP8 1,979 = half the 3,958 "
              "with sparsity; HBM3 3.35 TB/s)", f8=1979),
        81559 * 2**20, "81,559 MiB, as the driver reports an H100 SXM's memory (nvidia-smi on this project's "
        "device machine, 2026-11-13; the datasheet's '80 GB' is about 80 GiB)",
        node="dgx-h100",
        gpu=GpuSpec((9, 0), 132, 128, 1.98, 50 * 2**20, 228 * 1024, 227 * 1024,
                    description="NVIDIA H100 80GB HBM3",
                    source="NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), SXM5: 132 SMs of 128 "
                           "FP32 cores, 2,048 threads, 64K registers and 228 KB shared memory per SM (227 KB per "
                           "block), 50 MB L2, 1.98 GHz boost; compute capability 9.0. Memory bandwidth as the "
                           "driver reports it to XLA, 3,352 GB/s: the device key of a real H100's autotuning "
                           "record (reports/data/autotune_nvidia-h100-80gb-hbm3_2026-11-26_resnet50-b32-"
                           "bfloat16-sgd.txt, 699b92c0fb30cb16) is the 64-bit fingerprint of 'CUDA: 9.0, "
                           "Cores: 132, GPU clock: 1.98 GHz, Memory bandwidth: 3352 GB/s, L2 cache: 50 MB'",
                    memory_bandwidth=3352e9),
        dispatch=Dispatch(33.6e-6, 2.74e-6, "reports/data/dispatch_nvidia-h100-80gb-hbm3_2026-11-26.csv: this "
                          "project's H100 machine, jax 0.11.2 (python benchmarks/dispatch_costs.py)")),
    Device(
        "h100-pcie", "NVIDIA H100 PCIe", ("H100", "PCIe"),
        _peak("NVIDIA H100 PCIe", 756, 756, 378, 2.0e12,
              "NVIDIA H100 datasheet, PCIe (dense: BF16 756 TFLOPS, TF32 378, FP8 1,513 = half the 3,026 with "
              "sparsity; 2.0 TB/s)", f8=1513),
        80e9, "NVIDIA H100 datasheet, PCIe: 80 GB HBM2e",
        node="pcie5-server",
        gpu=GpuSpec((9, 0), 114, 128, 1.755, 50 * 2**20, 228 * 1024, 227 * 1024,
                    description="NVIDIA H100 PCIe",
                    source="NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), PCIe: 114 SMs of 128 "
                           "FP32 cores, 2,048 threads, 64K registers and 228 KB shared memory per SM (227 KB per "
                           "block), 50 MB L2; NVIDIA H100 PCIe product brief (PB-11133): 1,755 MHz boost "
                           "(114 x 128 x 2 x 1.755 GHz = 51.2 TFLOPS, the datasheet's FP32 51); compute "
                           "capability 9.0")),
    Device(
        "h200", "NVIDIA H200 SXM", ("H200",),
        _peak("NVIDIA H200 SXM", 989, 989, 494.7, 4.8e12,
              "NVIDIA H200 datasheet (dense: BF16/FP16 989 TFLOPS, TF32 494.7, FP8 1,979 = half the 3,958 with "
              "sparsity; HBM3e 4.8 TB/s)", f8=1979),
        143771 * 2**20, "143,771 MiB, as the driver reports an H200's memory (nvidia-smi on this project's device "
        "machine, 2026-11-26: reports/data/device_check_nvidia-h200_2026-11-26.json; the datasheet's '141 GB' is "
        "about 140 GiB)",
        node="dgx-h200",
        gpu=GpuSpec((9, 0), 132, 128, 1.98, 60 * 2**20, 228 * 1024, 227 * 1024,
                    description="NVIDIA H200",
                    source="the H100 SXM5's GH100 (H100 Tensor Core GPU Architecture whitepaper, 2022: 132 SMs "
                           "of 128 FP32 cores, 2,048 threads, 64K registers and 228 KB shared memory per SM, "
                           "227 KB per block); NVIDIA H200 datasheet: FP32 67 TFLOPS = 132 x 128 x 2 x 1.98 GHz; "
                           "60 MB L2 (NVIDIA publishes none for the H200), 1.98 GHz and the name as the CUDA "
                           "driver reports them on an H200 (cuDeviceGetAttribute, cuDeviceGetName); compute "
                           "capability 9.0. Memory bandwidth as the driver reports it to XLA, 4,814 GB/s: the "
                           "device key of a real H200's autotuning record (reports/data/autotune_nvidia-h200_"
                           "2026-11-26_resnet50-b32-bfloat16-sgd.txt, ed0e56ab8b2a0ecb) is the 64-bit "
                           "fingerprint of 'CUDA: 9.0, Cores: 132, GPU clock: 1.98 GHz, Memory bandwidth: "
                           "4814 GB/s, L2 cache: 60 MB'",
                    memory_bandwidth=4814e9),
        dispatch=Dispatch(36.6e-6, 4.50e-6, "reports/data/dispatch_nvidia-h200_2026-11-26.csv: this project's "
                          "H200 machine, jax 0.11.2 (python benchmarks/dispatch_costs.py)")),
    Device(
        # nothing measured on a B200 here: no dispatch (`host_dispatch` takes the fastest host measured, a
        # floor, and says so), no run among the time model's fitted cases (its constants are every device's)
        "b200", "NVIDIA B200", ("B200",),
        _peak("NVIDIA B200", 2250, 2250, 1100, 7.7e12,
              "NVIDIA HGX B200 specifications, per GPU (https://www.nvidia.com/en-us/data-center/hgx/), 'with "
              "sparsity' halved to dense: FP16/BF16 tensor core 4.5 PFLOPS -> 2,250 TFLOPS, TF32 2.2 PFLOPS -> "
              "1,100, FP8/FP6 9 PFLOPS -> 4,500; HBM3e 7.7 TB/s (the DGX B200 datasheet's 64 TB/s for 8 GPUs "
              "is 8 TB/s each, https://www.nvidia.com/en-us/data-center/dgx-b200/)", f8=4500),
        180e9, "NVIDIA HGX B200 specifications: 180 GB HBM3e per GPU; DGX B200 user guide: 8 GPUs, 1,440 GB in "
        "all (no driver's figure read here: the H100's and H200's are nvidia-smi's)",
        node="dgx-b200",
        gpu=GpuSpec((10, 0), 148, 128, 1.98, int(126.5 * 2**20), 228 * 1024, 227 * 1024,
                    description="NVIDIA B200",
                    source="compute capability 10.0 (sm_100), 148 SMs, 126.5 MB L2, 228 KB shared memory, 2,048 "
                           "threads and 64K registers per SM, as the CUDA driver reports a B200 (a device query "
                           "printed in pytorch/ao pull request 4002, 2026-03-05, not measured here; 148 SMs and "
                           "the name 'NVIDIA B200' also in the issue's deviceless compile); 227 KB per block: "
                           "CUDA C++ Programming Guide, compute capability 10.0 (as 9.0); 128 FP32 lanes per SM "
                           "and a 1.98 GHz clock assumed from the HGX B200 specifications' FP32 75 TFLOPS = "
                           "148 x 128 x 2 x 1.98 GHz (75.0; NVIDIA publishes neither figure). Memory bandwidth "
                           "as that query's driver reports it, a 7,680-bit bus at 3,996 MHz x 2: 7,672 GB/s "
                           "(the key a real B200's autotuning records would carry; the datasheet's 7.7 TB/s "
                           "prices the kernels)",
                    memory_bandwidth=7680 / 8 * 2 * 3996e6)),
    Device(
        "a100", "NVIDIA A100 40GB", ("A100",),
        _peak("NVIDIA A100 40GB", 312, 312, 156, 1.555e12,
              "NVIDIA A100 datasheet (dense: BF16 312 TFLOPS, TF32 156; 40GB 1,555 GB/s)"),
        40e9, "NVIDIA A100 datasheet: 40 GB HBM2 (the 80 GB model: a100-80gb)",
        node="dgx-a100",
        gpu=GpuSpec((8, 0), 108, 64, 1.41, 40 * 2**20, 164 * 1024, 163 * 1024,
                    description="NVIDIA A100-SXM4-40GB",
                    source="NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs of 64 FP32 cores, "
                           "1,410 MHz boost, 40 MB L2, 2,048 threads, 64K registers and up to 164 KB shared "
                           "memory per SM; CUDA C++ Programming Guide, compute capability 8.0: 163 KB per block")),
    Device(
        "a100-80gb", "NVIDIA A100 80GB", ("A100", "80GB"),
        _peak("NVIDIA A100 80GB", 312, 312, 156, 2.039e12,
              "NVIDIA A100 datasheet (dense: BF16 312 TFLOPS, TF32 156; 80GB SXM 2,039 GB/s)"),
        80e9, "NVIDIA A100 datasheet: 80 GB HBM2e",
        node="dgx-a100",
        gpu=GpuSpec((8, 0), 108, 64, 1.41, 40 * 2**20, 164 * 1024, 163 * 1024,
                    description="NVIDIA A100-SXM4-80GB",
                    source="NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs of 64 FP32 cores, "
                           "1,410 MHz boost, 40 MB L2, 2,048 threads, 64K registers and up to 164 KB shared "
                           "memory per SM; CUDA C++ Programming Guide, compute capability 8.0: 163 KB per block")),
    Device(
        "v100", "NVIDIA V100 SXM2", ("V100",),
        _peak("NVIDIA V100 SXM2", 15.7, 125, 15.7, 900e9, _V100_SOURCE),
        16e9, "NVIDIA V100 datasheet: 16 GB HBM2 (32 GB model: v100-32gb)",
        node="pcie3-server",
        gpu=GpuSpec((7, 0), 80, 64, 1.53, 6 * 2**20, 96 * 1024, 96 * 1024,
                    description="Tesla V100-SXM2-16GB", source=_V100_GPU_SOURCE)),
    Device(
        "v100-32gb", "NVIDIA V100 SXM2 32GB", ("V100", "32GB"),
        _peak("NVIDIA V100 SXM2 32GB", 15.7, 125, 15.7, 900e9, _V100_SOURCE),
        32e9, "NVIDIA V100 datasheet: 32 GB HBM2",
        node="pcie3-server",
        gpu=GpuSpec((7, 0), 80, 64, 1.53, 6 * 2**20, 96 * 1024, 96 * 1024,
                    description="Tesla V100-SXM2-32GB", source=_V100_GPU_SOURCE)),
    Device(
        "p100", "NVIDIA Tesla P100 SXM2", ("P100",),
        _peak("NVIDIA Tesla P100 SXM2", 0.0, 21.2, 10.6, 732e9,
              "NVIDIA Tesla P100 datasheet, SXM2 (FP16 21.2 TFLOPS, FP32 10.6; no BF16; CoWoS HBM2 "
              "732 GB/s)"),
        16e9, "NVIDIA Tesla P100 datasheet: 16 GB CoWoS HBM2",
        node="big-basin",
        gpu=GpuSpec((6, 0), 56, 64, 1.48, 4 * 2**20, 64 * 1024, 48 * 1024,
                    description="Tesla P100-SXM2-16GB",
                    source="NVIDIA Tesla P100 whitepaper (2016), SXM2: 56 SMs of 64 FP32 cores, 1,480 MHz boost "
                           "(56 x 64 x 2 x 1.48 GHz = 10.6 TFLOPS), 4,096 KB L2, 2,048 threads, 64K registers "
                           "and 64 KB shared memory per SM; CUDA C++ Programming Guide, compute capability 6.0: "
                           "48 KB per block")),
    Device(
        "p40", "NVIDIA Tesla P40", ("P40",),
        _peak("NVIDIA Tesla P40", 0.0, 11.76 / 64, 11.76, 346e9,
              "NVIDIA Tesla P40 datasheet (FP32 12 TFLOPS at boost: 3840 cores x 2 x 1.531 GHz "
              "= 11.76; FP16 at 1/64 rate; GDDR5 346 GB/s)"),
        24e9, "NVIDIA Tesla P40 datasheet: 24 GB GDDR5",
        node="pcie3-server",
        gpu=GpuSpec((6, 1), 30, 128, 1.531, 3 * 2**20, 96 * 1024, 48 * 1024,
                    description="Tesla P40",
                    source="NVIDIA Tesla P40 datasheet: 3,840 CUDA cores at 1,531 MHz boost, 384-bit GDDR5; its "
                           "GP102 is laid out as the Pascal GP104 whitepaper's (2016) GP104: SMs of 128 FP32 "
                           "cores (3,840 / 128 = 30 SMs), 96 KB shared memory per SM, 256 KB L2 per 32-bit "
                           "memory controller (384 / 32 x 256 KB = 3 MB); CUDA C++ Programming Guide, compute "
                           "capability 6.1: 48 KB per block, 64K registers and 2,048 threads per SM")),
    Device(
        "tpu-v4", "Google TPU v4", ("TPU v4",),
        DevicePeak("Google TPU v4", {"bfloat16": 275 * _T, "float32": 275 * _T}, 1200e9,
                   "Cloud TPU v4 documentation (peak compute per chip: 275 teraflops, bf16; HBM2 1200 GBps; "
                   "float32 matrix products at the bf16 rate, as on the v5e)"),
        32 * 2**30, "Cloud TPU v4 documentation: HBM2 capacity 32 GiB per chip",
        node="tpu-v4-pod",
        tpu=TpuSpec("v4", 3, 1, 4, "Cloud TPU v4 documentation: 3D mesh or torus slices AxBxC of up to "
                    "4096 chips, two TensorCores per chip, one megacore device in jax (libtpu's deviceless "
                    "topologies show each TensorCore as a device unless asked for megacore)",
                    chip_config="megacore", max_chips=4096)),
    Device(
        "tpu-v5e", "Google TPU v5e", ("TPU v5 lite",),
        # JAX multiplies float32 on a TPU in one bfloat16 pass by default (jax_default_matmul_precision)
        DevicePeak("Google TPU v5e", {"bfloat16": 197 * _T, "float32": 197 * _T}, 819e9,
                   "Cloud TPU v5e documentation (peak compute per chip, bf16: 197 TFLOPs; HBM2 819 GBps; "
                   "float32 matrix products at the bf16 rate: JAX's default precision on a TPU is one "
                   "bfloat16 pass)"),
        16e9, "Cloud TPU v5e documentation: HBM2 capacity 16 GB per chip",
        node="tpu-v5e-pod",
        tpu=TpuSpec("v5e", 2, 1, 4, "Cloud TPU v5e documentation: 2D torus slices up to 16x16, "
                    "one TensorCore per chip", max_chips=256)),
    Device(
        # after tpu-v5e: a v5p reports "TPU v5", which "TPU v5 lite" (a v5e) contains
        "tpu-v5p", "Google TPU v5p", ("TPU v5",),
        DevicePeak("Google TPU v5p", {"bfloat16": 459 * _T, "float32": 459 * _T}, 2765e9,
                   "Cloud TPU v5p documentation (peak compute per chip, bf16: 459 TFLOPs; HBM2e 2765 GBps; "
                   "float32 matrix products at the bf16 rate, as on the v5e)"),
        95e9, "Cloud TPU v5p documentation: HBM2e capacity 95 GB per chip",
        node="tpu-v5p-slice",
        tpu=TpuSpec("v5p", 3, 1, 4, "Cloud TPU v5p documentation: 3D torus slices 2x2x1 to 16x16x24 (2x2x1: "
                    "8 TensorCores on 4 chips, one host); jax shows a chip's two TensorCores as one "
                    "megacore device", max_chips=16 * 16 * 24)),
    Device(
        "tpu-v6e", "Google TPU v6e", ("TPU v6 lite",),
        DevicePeak("Google TPU v6e", {"bfloat16": 918 * _T, "float32": 918 * _T}, 1638e9,
                   "Cloud TPU v6e (Trillium) documentation (peak compute per chip, bf16: 918 TFLOPs; HBM "
                   "bandwidth 1638 GBps per chip; float32 matrix products at the bf16 rate, as on the v5e)"),
        32e9, "Cloud TPU v6e documentation: HBM capacity 32 GB per chip",
        node="tpu-v6e-pod",
        tpu=TpuSpec("v6e", 2, 1, 4, "Cloud TPU v6e documentation: 2D torus slices up to 16x16 (a 256-chip "
                    "pod), one TensorCore per chip", max_chips=256)),
    Device(
        # the peak is measured (`xla_cost.analysis.timing.measure_cpu_peak`); one device per host on 25GbE
        "cpu", "CPU", ("cpu",),
        node="cpu-host"),
)})
"""Every device by registry key. Peaks are dense (no sparsity) and from the
datasheet named in each; ``v100`` and ``p40`` clusters are the 2017-2018 PCIe
servers of their papers (price V100s in a DGX-2 or DGX-1 with
``Hardware(device="v100", node="dgx-2")``, `NODES`)."""

_BY_SPECIFICITY = sorted(DEVICES.values(), key=lambda d: -len(d.kind))


_HAS: dict[str | None, Callable[[Device], bool]] = {
    None: lambda d: True, "peak": lambda d: d.peak is not None,
    "memory": lambda d: d.memory is not None, "cluster": lambda d: d.has_cluster,
}
"""What `names` and `device` mean by ``has``."""


def names(has: str | None = None) -> tuple[str, ...]:
    """Registry keys, in order; with ``has`` (``peak``, ``memory`` or
    ``cluster``) only the devices that have it."""
    test = _HAS[has]
    return tuple(d.name for d in DEVICES.values() if test(d))


def match_kind(kind: str) -> Device | None:
    """The entry whose `Device.kind` substrings all occur in ``kind`` (a
    ``jax.Device.device_kind``, case-insensitive) as whole words, the most
    specific first: ``NVIDIA A100-SXM4-80GB`` is an ``a100-80gb``, an
    ``RTX A1000`` (or a typed ``a1000``) none, not an A100."""
    return next((d for d in _BY_SPECIFICITY if all(_word(k).search(kind) for k in d.kind)), None)


def _word(text: str) -> re.Pattern[str]:
    """``text`` as a whole word: no letter or digit just before or after it."""
    return re.compile(rf"(?<![a-z0-9]){re.escape(text)}(?![a-z0-9])", re.IGNORECASE)


def device(name: str, has: str | None = None, fix: str | None = None) -> Device:
    """The registry's `Device` for ``name``: a key (``h100``, any case) or a
    ``jax.Device.device_kind``.

    Args:
      name: what to look up.
      has: ``peak``, ``memory`` or ``cluster``: the figure the caller needs;
        a device without it is refused as unknown.
      fix: the error's advice (default: name a registry key).

    Raises:
      InputError: no such device (or none with ``has``); the message lists
        the devices that qualify.
    """
    found = None
    if isinstance(name, str):
        found = DEVICES.get(name.strip().lower()) or match_kind(name)
    wanted = {None: "a device", "peak": "a device with a published peak",
              "memory": "a device with a known memory", "cluster": "a device with a cluster preset"}[has]
    if found is None or (has is not None and not _HAS[has](found)):
        raise InputError(f"{wanted} ({', '.join(names(has))})", repr(name),
                         fix or "Use one of these names, e.g. --device h100.")
    return found


def target_names() -> tuple[str, ...]:
    """The registry keys that can be compile targets (a GPU compiler description or TPU slices)."""
    return tuple(d.name for d in DEVICES.values() if d.gpu is not None or d.tpu is not None)


def target(name: str | CompileTarget) -> CompileTarget:
    """The `xla_cost.compiled.targets.CompileTarget` for ``name``: a GPU
    (``h100``, ``a100-80gb``) or a TPU generation with an optional slice
    (``tpu-v5e``, ``tpu-v5e:16x16``, ``tpu-v4:2x2x2``).

    Raises:
      InputError: no such target (the message lists them), or a slice libtpu
        would not build (`xla_cost.compiled.targets.TpuSpec.check_slice`): refused
        here, before anything is compiled.
    """
    if isinstance(name, CompileTarget):
        return name
    text = str(name).strip().lower()
    key, _, topology = text.partition(":")
    found = DEVICES.get(key)
    if found is None or (found.gpu is None and found.tpu is None) or (":" in text and found.tpu is None):
        examples = [n + (":2x2" if DEVICES[n].tpu is not None and DEVICES[n].tpu.dimensions == 2 else
                         ":2x2x1" if DEVICES[n].tpu is not None else "") for n in target_names()]
        raise InputError(f"a compile target ({', '.join(examples)})", repr(name),
                         "Use one of these names, e.g. --target h100 or --target tpu-v5e:2x2.")
    # a slice named (even an empty one after ':') is checked as libtpu would build it, before any compile
    sliced = found.tpu.check_slice(found.name, topology) if found.tpu is not None and ":" in text else None
    assert found.memory is not None and found.peak is not None  # every target entry has both
    return CompileTarget(
        device=found.name, title=found.title, platform="cuda" if found.gpu is not None else "tpu",
        memory_bytes=allocatable(found)[0], bandwidth=found.peak.bandwidth, gpu=found.gpu, tpu=found.tpu,
        name=text if sliced is None else f"{found.name}:{sliced.partition(':')[2]}",
        topology=sliced,
        node_size=found.tpu.chips_per_host if found.tpu is not None else found.node_size,
        memory_fraction=ALLOCATOR_FRACTION if found.gpu is not None else 1.0,  # a TPU's runtime takes it all
    )


TPU_MATRIX_UNITS: Mapping[str, tuple[int, int, str]] = MappingProxyType({
    "tpu-v4": (8, 128, "Cloud TPU system architecture: two TensorCores per v4 chip, four 128x128 MXUs each "
                       "(8 x 128^2 x 2 FLOP x 1.05 GHz = 275 TFLOP/s)"),
    "tpu-v5e": (4, 128, "Cloud TPU v5e documentation: one TensorCore per chip with four 128x128 MXUs "
                        "(4 x 128^2 x 2 FLOP x 1.5 GHz = 197 TFLOP/s)"),
    "tpu-v5p": (8, 128, "Cloud TPU v5p documentation: two TensorCores per chip, four 128x128 MXUs each "
                        "(8 x 128^2 x 2 FLOP x 1.75 GHz = 459 TFLOP/s)"),
    "tpu-v6e": (4, 256, "Cloud TPU v6e (Trillium) documentation: 256x256 MXUs, one TensorCore per chip "
                        "(4 x 256^2 x 2 FLOP x 1.75 GHz = 918 TFLOP/s)"),
})
"""Each TPU generation's matrix units per chip, their side and the source."""


def matrix_units(name: str) -> tuple[int, int]:
    """(units, side) of a device's matrix engines: a GPU's streaming
    multiprocessors (side 0: the library picks its tiles), a TPU chip's MXUs
    and their side; (1, 0) for a device with neither (a CPU)."""
    found = device(name)
    if found.gpu is not None:
        return found.gpu.sm_count, 0
    if found.name in TPU_MATRIX_UNITS:
        units, side, _ = TPU_MATRIX_UNITS[found.name]
        return units, side
    return 1, 0


@dataclasses.dataclass(frozen=True)
class HostLink:
    """The link between a device and its host's memory (PCIe), one direction.

    Attributes:
      bandwidth: bytes per second each way.
      source: where the figure comes from.
    """

    bandwidth: float
    source: str


_SCALING_BOOK = ("Austin et al. 2025, How to Scale Your Model, part 2 'How to Think About TPUs' "
                 "(https://jax-ml.github.io/scaling-book/tpus/), 'Key Takeaways'")

HOST_LINKS: Mapping[str, HostLink] = MappingProxyType({
    "p100": HostLink(16e9, "NVIDIA Tesla P100 datasheet (https://www.nvidia.com/en-us/data-center/tesla-p100/): "
                           "PCIe 32 GB/s, the PCIe 3.0 x16 card's; halved per direction. Assumed the SXM2 module's "
                           "host link too (its NVLink joins the GPUs only: the hybrid cube-mesh servers reach their "
                           "CPUs over PCIe 3.0 x16). What Gloo's host-staged all-reduce copies each way "
                           "(xla_cost.timemodel.comm.staged_all_reduce)"),
    "tpu-v4": HostLink(16e9, f"{_SCALING_BOOK}: 'PCIe bandwidth for TPU v4 is 16GB / second each way'"),
    "tpu-v5e": HostLink(1.5e10, f"{_SCALING_BOOK}: 'PCIe bandwidth is typically around 1.5e10 bytes / second per "
                                "chip' (v6e's 'about 2x higher than v5')"),
    "tpu-v5p": HostLink(1.5e10, f"{_SCALING_BOOK}: 'PCIe bandwidth is typically around 1.5e10 bytes / second per "
                                "chip' (v6e's 'about 2x higher than v5')"),
    "tpu-v6e": HostLink(32e9, f"{_SCALING_BOOK}: 'Trillium (TPU v6e) has 32GB/s, about 2x higher than v5'; Cloud "
                              "TPU v6e documentation: each chip 'connects to the host through a PCIe Gen5 interface' "
                              "(https://cloud.google.com/tpu/docs/v6e)"),
})
"""Each device's link to its host's memory, where published: what an activation offloaded to the
host (`xla_cost.compiled.shapes.HOST_SPACE`) crosses each way. A GPU's is here where a run
stages its gradient all-reduce through host memory (`xla_cost.timemodel.comm.staged`: the P100s
of Goyal et al. 2017); a GPU program carries no memory space, so nothing else of it is priced on it."""


def host_link(name: str) -> HostLink | None:
    """The `HOST_LINKS` entry of a device (a registry name); None where none is published here."""
    return HOST_LINKS.get(device(name).name)


def target_slice(name: str | None) -> int | None:
    """Devices of the TPU slice a compile target names (``tpu-v5e:2x2``: 4):
    the node its data-parallel replicas lie beyond; None for a GPU target,
    a TPU without a slice named, or no target.

    Raises:
      InputError: an unknown target (`target`).
    """
    if name is None:
        return None
    found = target(name)
    if found.tpu is None or found.topology is None:
        return None
    sides = found.topology.partition(":")[2].split("x")
    return math.prod(int(side) for side in sides) * found.tpu.cores_per_chip
