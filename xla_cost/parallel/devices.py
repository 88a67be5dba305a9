"""The device registry: every device xla_cost knows, declared once.

A `Device` holds what its datasheet publishes: dense peak FLOP/s by dtype,
memory bandwidth and capacity, and how a cluster of them is wired (the links
within a node and between nodes, `xla_cost.parallel.comm.INTERCONNECTS`, and
devices per node), each with its source. Timing (MFU, the roofline), `fit`
(capacity), the communication model, `scaling`, `estimate` and the command
line's help all read it; adding a device is one entry in `DEVICES`.

Names are looked up case-insensitively by registry key (``h100``), and a
``jax.Device.device_kind`` (``NVIDIA H100 80GB HBM3``) by the substrings each
entry lists in `Device.kind`, the most specific entry first. Nothing heavy is
imported: the command line builds its help from this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from xla_cost.compiled.targets import CompileTarget, GpuSpec, TpuSpec
from xla_cost.errors import InputError

__all__ = ["DevicePeak", "Device", "DEVICES", "device", "match_kind", "names", "target", "target_names"]

_T = 1e12


@dataclasses.dataclass(frozen=True)
class DevicePeak:
    """Peak dense throughput and memory bandwidth of a device.

    Attributes:
      name: the device, as the registry or the measurement names it.
      flops_per_s: peak FLOP/s by computation dtype (``bfloat16``, ``float16``,
        ``float32``); for float32 on tensor-core GPUs the TF32 peak, which is
        what XLA uses for float32 matmuls by default there.
      bandwidth: peak memory bandwidth, bytes/s.
      source: where the figures come from.
    """

    name: str
    flops_per_s: Mapping[str, float]
    bandwidth: float
    source: str

    def for_dtype(self, dtype: str) -> float:
        """The peak for ``dtype``; float32's for a dtype not listed (0.0 if neither is)."""
        return self.flops_per_s.get(dtype, self.flops_per_s.get("float32", 0.0))

    def require(self, dtype: str) -> float:
        """`for_dtype`, refused where the device has no such units (a P100's bfloat16: 0.0).

        Raises:
          InputError: no published peak for ``dtype``; the message names the dtypes that have one.
        """
        peak = self.for_dtype(dtype)
        if peak > 0:
            return peak
        having = [name for name, value in self.flops_per_s.items() if value > 0]
        raise InputError(f"a dtype the {self.name} has a published peak for ({', '.join(having)})", repr(dtype),
                         f"Use --dtype {' or '.join(having)} (dtype=), or a device with {dtype} units.")


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
      intra, inter: `xla_cost.parallel.comm.INTERCONNECTS` names of the link
        between devices of a node and between nodes; None: no cluster preset.
      node_size: devices per node.
      gpu: what XLA's GPU compiler is told of it (`xla_cost.compiled.targets.GpuSpec`):
        a GPU with one can be a compile target (``--target h100``).
      tpu: a TPU generation's slices (`xla_cost.compiled.targets.TpuSpec`): a
        compile target as ``tpu-v5e:2x2``.
    """

    name: str
    title: str
    kind: tuple[str, ...]
    peak: DevicePeak | None = None
    memory: float | None = None
    memory_source: str = ""
    intra: str | None = None
    inter: str | None = None
    node_size: int = 1
    gpu: GpuSpec | None = None
    tpu: TpuSpec | None = None

    @property
    def has_cluster(self) -> bool:
        """Whether the device has a cluster preset (its links are known)."""
        return self.intra is not None and self.inter is not None


def _peak(title: str, bf16: float, f16: float, f32: float, bandwidth: float, source: str) -> DevicePeak:
    """Dense peaks in TFLOP/s by dtype (bfloat16, float16, float32), memory bandwidth in bytes/s."""
    return DevicePeak(title, {"bfloat16": bf16 * _T, "float16": f16 * _T, "float32": f32 * _T}, bandwidth, source)


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
              "NVIDIA H100 datasheet, SXM5 (dense: BF16 989.4 TFLOPS, TF32 494.7; HBM3 3.35 TB/s)"),
        80e9, "NVIDIA H100 SXM datasheet: 80 GB HBM3",
        # 8-GPU NVSwitch servers, one NIC per GPU (DGX H100)
        "nvlink4", "ib-ndr", 8,
        gpu=GpuSpec((9, 0), 132, 128, 1.98, 50 * 2**20, 228 * 1024, 227 * 1024,
                    description="NVIDIA H100 80GB HBM3",
                    source="NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), SXM5: 132 SMs of 128 "
                           "FP32 cores, 2,048 threads, 64K registers and 228 KB shared memory per SM (227 KB per "
                           "block), 50 MB L2, 1.98 GHz boost; compute capability 9.0")),
    Device(
        "h100-pcie", "NVIDIA H100 PCIe", ("H100", "PCIe"),
        _peak("NVIDIA H100 PCIe", 756, 756, 378, 2.0e12,
              "NVIDIA H100 datasheet, PCIe (dense: BF16 756 TFLOPS, TF32 378; 2.0 TB/s)"),
        80e9, "NVIDIA H100 datasheet, PCIe: 80 GB HBM2e",
        # PCIe Gen5 servers of 8, InfiniBand NDR between them
        "pcie5", "ib-ndr", 8,
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
              "NVIDIA H200 datasheet (dense: BF16/FP16 989 TFLOPS, TF32 494.7; HBM3e 4.8 TB/s)"),
        141e9, "NVIDIA H200 datasheet: 141 GB HBM3e",
        # the H200 datasheet: NVLink 900 GB/s, as the H100's; DGX H200 has one 400 Gb/s NIC per GPU
        "nvlink4", "ib-ndr", 8,
        gpu=GpuSpec((9, 0), 132, 128, 1.98, 60 * 2**20, 228 * 1024, 227 * 1024,
                    description="NVIDIA H200",
                    source="the H100 SXM5's GH100 (H100 Tensor Core GPU Architecture whitepaper, 2022: 132 SMs "
                           "of 128 FP32 cores, 2,048 threads, 64K registers and 228 KB shared memory per SM, "
                           "227 KB per block); NVIDIA H200 datasheet: FP32 67 TFLOPS = 132 x 128 x 2 x 1.98 GHz; "
                           "60 MB L2 (NVIDIA publishes none for the H200), 1.98 GHz and the name as the CUDA "
                           "driver reports them on an H200 (cuDeviceGetAttribute, cuDeviceGetName); compute "
                           "capability 9.0")),
    Device(
        "a100", "NVIDIA A100 40GB", ("A100",),
        _peak("NVIDIA A100 40GB", 312, 312, 156, 1.555e12,
              "NVIDIA A100 datasheet (dense: BF16 312 TFLOPS, TF32 156; 40GB 1,555 GB/s)"),
        40e9, "NVIDIA A100 datasheet: 40 GB HBM2 (the 80 GB model: a100-80gb)",
        "nvlink3", "ib-hdr", 8,
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
        "nvlink3", "ib-hdr", 8,
        gpu=GpuSpec((8, 0), 108, 64, 1.41, 40 * 2**20, 164 * 1024, 163 * 1024,
                    description="NVIDIA A100-SXM4-80GB",
                    source="NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs of 64 FP32 cores, "
                           "1,410 MHz boost, 40 MB L2, 2,048 threads, 64K registers and up to 164 KB shared "
                           "memory per SM; CUDA C++ Programming Guide, compute capability 8.0: 163 KB per block")),
    Device(
        "v100", "NVIDIA V100 SXM2", ("V100",),
        _peak("NVIDIA V100 SXM2", 15.7, 125, 15.7, 900e9, _V100_SOURCE),
        16e9, "NVIDIA V100 datasheet: 16 GB HBM2 (32 GB model: v100-32gb)",
        # 2017-2018 PCIe servers: 8 GPUs on PCIe 3.0, EDR InfiniBand between nodes
        "pcie3", "ib-edr", 8,
        gpu=GpuSpec((7, 0), 80, 64, 1.53, 6 * 2**20, 96 * 1024, 96 * 1024,
                    description="Tesla V100-SXM2-16GB", source=_V100_GPU_SOURCE)),
    Device(
        "v100-32gb", "NVIDIA V100 SXM2 32GB", ("V100", "32GB"),
        _peak("NVIDIA V100 SXM2 32GB", 15.7, 125, 15.7, 900e9, _V100_SOURCE),
        32e9, "NVIDIA V100 datasheet: 32 GB HBM2",
        "pcie3", "ib-edr", 8,
        gpu=GpuSpec((7, 0), 80, 64, 1.53, 6 * 2**20, 96 * 1024, 96 * 1024,
                    description="Tesla V100-SXM2-32GB", source=_V100_GPU_SOURCE)),
    Device(
        "p100", "NVIDIA Tesla P100 SXM2", ("P100",),
        _peak("NVIDIA Tesla P100 SXM2", 0.0, 21.2, 10.6, 732e9,
              "NVIDIA Tesla P100 datasheet, SXM2 (FP16 21.2 TFLOPS, FP32 10.6; no BF16; CoWoS HBM2 "
              "732 GB/s)"),
        16e9, "NVIDIA Tesla P100 datasheet: 16 GB CoWoS HBM2",
        # Facebook's Big Basin servers of Goyal et al. 2017: 8 GPUs on NVLink, 50 Gb/s Ethernet between
        "nvlink1", "ethernet-50g", 8,
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
        "pcie3", "ib-edr", 8,
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
        # one v4 pod (4096 chips) on ICI
        "tpu-v4-ici", "tpu-v4-ici", 4096,
        tpu=TpuSpec("v4", 3, 1, 4, "Cloud TPU v4 documentation: 3D mesh or torus slices AxBxC of up to "
                    "4096 chips, two TensorCores per chip, one megacore device in jax (libtpu's deviceless "
                    "topologies show each TensorCore as a device unless asked for megacore)",
                    chip_config="megacore")),
    Device(
        "tpu-v5e", "Google TPU v5e", ("TPU v5 lite",),
        # JAX multiplies float32 on a TPU in one bfloat16 pass by default (jax_default_matmul_precision)
        DevicePeak("Google TPU v5e", {"bfloat16": 197 * _T, "float32": 197 * _T}, 819e9,
                   "Cloud TPU v5e documentation (peak compute per chip, bf16: 197 TFLOPs; HBM2 819 GBps; "
                   "float32 matrix products at the bf16 rate: JAX's default precision on a TPU is one "
                   "bfloat16 pass)"),
        16e9, "Cloud TPU v5e documentation: HBM2 capacity 16 GB per chip",
        # one v5e pod (256 chips) on ICI; a multi-pod job would cross the data-center network
        "tpu-v5e-ici", "tpu-v5e-ici", 256,
        tpu=TpuSpec("v5e", 2, 1, 4, "Cloud TPU v5e documentation: 2D torus slices up to 16x16, "
                    "one TensorCore per chip")),
    Device(
        # after tpu-v5e: a v5p reports "TPU v5", which "TPU v5 lite" (a v5e) contains
        "tpu-v5p", "Google TPU v5p", ("TPU v5",),
        DevicePeak("Google TPU v5p", {"bfloat16": 459 * _T, "float32": 459 * _T}, 2765e9,
                   "Cloud TPU v5p documentation (peak compute per chip, bf16: 459 TFLOPs; HBM2e 2765 GBps; "
                   "float32 matrix products at the bf16 rate, as on the v5e)"),
        95e9, "Cloud TPU v5p documentation: HBM2e capacity 95 GB per chip",
        # the largest v5p slice on ICI (16x16x24, 6144 chips); multislice jobs cross the data-center network
        "tpu-v5p-ici", "tpu-v5p-ici", 6144,
        tpu=TpuSpec("v5p", 3, 1, 4, "Cloud TPU v5p documentation: 3D torus slices 2x2x1 to 16x16x24 (2x2x1: "
                    "8 TensorCores on 4 chips, one host); jax shows a chip's two TensorCores as one "
                    "megacore device")),
    Device(
        "tpu-v6e", "Google TPU v6e", ("TPU v6 lite",),
        DevicePeak("Google TPU v6e", {"bfloat16": 918 * _T, "float32": 918 * _T}, 1638e9,
                   "Cloud TPU v6e (Trillium) documentation (peak compute per chip, bf16: 918 TFLOPs; HBM "
                   "bandwidth 1638 GBps per chip; float32 matrix products at the bf16 rate, as on the v5e)"),
        32e9, "Cloud TPU v6e documentation: HBM capacity 32 GB per chip",
        # one v6e pod (256 chips) on ICI, as the v5e's
        "tpu-v6e-ici", "tpu-v6e-ici", 256,
        tpu=TpuSpec("v6e", 2, 1, 4, "Cloud TPU v6e documentation: 2D torus slices up to 16x16 (a 256-chip "
                    "pod), one TensorCore per chip")),
    Device(
        # the peak is measured (`xla_cost.analysis.timing.measure_cpu_peak`); one device per host on 25GbE
        "cpu", "CPU", ("cpu",),
        intra="ethernet-25g", inter="ethernet-25g", node_size=1),
)})
"""Every device by registry key. Peaks are dense (no sparsity) and from the
datasheet named in each; ``v100`` and ``p40`` clusters are the 2017-2018 PCIe
servers of their papers (build an SXM2 cluster with
``Cluster(interconnect("nvlink2"), interconnect("ib-edr"), 8)``)."""

_BY_SPECIFICITY = sorted(DEVICES.values(), key=lambda d: -len(d.kind))


def names(has: str | None = None) -> tuple[str, ...]:
    """Registry keys, in order; with ``has`` (``peak``, ``memory`` or
    ``cluster``) only the devices that have it."""
    test = {None: lambda d: True, "peak": lambda d: d.peak is not None,
            "memory": lambda d: d.memory is not None, "cluster": lambda d: d.has_cluster}[has]
    return tuple(d.name for d in DEVICES.values() if test(d))


def match_kind(kind: str) -> Device | None:
    """The entry whose `Device.kind` substrings all occur in ``kind`` (a
    ``jax.Device.device_kind``, case-insensitive), the most specific first."""
    text = kind.lower()
    return next((d for d in _BY_SPECIFICITY if all(k.lower() in text for k in d.kind)), None)


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
    if found is None or (has is not None and found.name not in names(has)):
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
      InputError: no such target; the message lists them.
    """
    if isinstance(name, CompileTarget):
        return name
    text = str(name).strip().lower()
    key, _, topology = text.partition(":")
    found = DEVICES.get(key)
    if found is None or (found.gpu is None and found.tpu is None) or (topology and found.tpu is None):
        examples = [n + (":2x2" if DEVICES[n].tpu is not None and DEVICES[n].tpu.dimensions == 2 else
                         ":2x2x1" if DEVICES[n].tpu is not None else "") for n in target_names()]
        raise InputError(f"a compile target ({', '.join(examples)})", repr(name),
                         "Use one of these names, e.g. --target h100 or --target tpu-v5e:2x2.")
    if found.tpu is not None and topology:
        parts = topology.split("x")
        if len(parts) != found.tpu.dimensions or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise InputError(f"a {found.tpu.dimensions}-D slice for {found.name} "
                             f"({'AxB' if found.tpu.dimensions == 2 else 'AxBxC'})", repr(name),
                             f"Write it as {found.tpu.topology_for(4).replace(found.tpu.generation, found.name)}.")
    assert found.memory is not None and found.peak is not None  # every target entry has both
    return CompileTarget(
        name=text, device=found.name, title=found.title, platform="cuda" if found.gpu is not None else "tpu",
        memory_bytes=found.memory, bandwidth=found.peak.bandwidth, gpu=found.gpu, tpu=found.tpu,
        topology=f"{found.tpu.generation}:{topology}" if found.tpu is not None and topology else None,
        node_size=found.tpu.chips_per_host if found.tpu is not None else found.node_size,
    )
