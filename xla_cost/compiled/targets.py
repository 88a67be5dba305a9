"""Compile targets: the device a program is compiled for, when it is not the one at hand.

Without a target every program is compiled for jax's default backend (the CPU
on a machine without an accelerator). A `CompileTarget` names another
device, an H100 or a TPU v5e slice, and its own compiler builds the program
on a machine that does not have it: jax's deviceless topologies
(`jax.experimental.topologies.get_topology_desc`) give devices of the target
to place arguments and build meshes on, and ``jax.jit(...).lower(...).compile()``
runs the target's compiler (XLA's GPU compiler with the CUDA plugin, for a
``GpuTargetConfig`` written from the GPU's datasheet; libtpu for a TPU
topology). The compiled program's kernels, memory and collectives are the
target's; its FLOP come from XLA's cost analysis where the target gives one
(TPU) and otherwise from the same analysis run over the target's optimized
HLO module, with the library calls' FLOP counted from their operands.

`use` makes a target active for the code inside it: `xla_cost.compiled.xla`
compiles and caches for it, meshes (`xla_cost.parallel.sharding.make_mesh`)
are built on its devices and unsharded programs are placed on its first
device. The registry entries that describe each target live in
`xla_cost.timemodel.devices`; `xla_cost.timemodel.devices.target` parses a name.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import math
import os
from collections.abc import Iterator
from typing import Any

from xla_cost import plugins
from xla_cost.errors import InputError

__all__ = ["GpuSpec", "TpuSpec", "CompileTarget", "use", "active", "require_plugin", "PLATFORM_BACKENDS",
           "LIBRARY_PRODUCTS", "FUSED_ATTENTION", "fused_attention"]

PLATFORM_BACKENDS = {"cuda": "gpu", "tpu": "tpu"}
"""jax's backend name (``jax.default_backend()``) of each target platform."""

FUSED_ATTENTION: dict[str | None, str] = {"cuda": "cudnn", "tpu": "splash", None: "xla"}
"""Each target platform's fused attention (None: no target, jax's default backend,
the CPU here): ``cudnn``, ``jax.nn.dot_product_attention``'s cuDNN flash attention
on a GPU (``__cudnn$fmha*`` custom calls; tracing it needs the cuDNN library, the
``[gpu]`` extra); ``splash``, jax's Pallas splash attention kernels on a TPU
(``models._transformer.splash_attention``: ``tpu_custom_call`` Mosaic kernels, which
libtpu lowers and compiles deviceless; checked 11-29, jax 0.10.2, libtpu 0.0.52);
``xla``, ``jax.nn.dot_product_attention``'s own on the CPU (XLA writes the scores
out: there is no fused kernel to call). `fused_attention` reads it for the active target."""

ALLOCATOR_FRACTION = 0.75
"""The share of a GPU's free memory JAX's allocator takes by default
(``XLA_PYTHON_CLIENT_MEM_FRACTION``): the memory a step on it may use."""

CONFIGURED_SHARE = 0.8
"""The share of a ``GpuTargetConfig``'s ``device_memory_size`` XLA's GPU
compiler plans a program for (its scheduler's and rematerialization's limit);
on a real device it plans for the allocator's limit itself. Read from the
rematerialization limits the compiler logged for one program on an H200,
2026-11-26: 0.95 x 0.8 x 141e9 + 73.5 MB deviceless, 0.95 x 112,583,507,968
(the allocator's limit) + 73.5 MB on the device
(reports/data/device_check_nvidia-h200_2026-11-26.json). A target's
configured size is therefore its allocator's limit / 0.8
(`CompileTarget.configured_memory`)."""

KERNEL_CACHE_OPTION = "xla_gpu_kernel_cache_file"
"""The XLA option that names the file a GPU target's compiles keep their kernels in
(`CompileTarget.kernel_cache_options`)."""

LIBRARY_PRODUCTS: dict[str, Any] = {"xla_gpu_enable_triton_gemm": False}
"""The XLA option that makes a GPU compile's matrix products cuBLAS calls, not
Triton kernels (`CompileTarget.memory_options`)."""


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """What XLA's GPU compiler is told of a GPU (a ``GpuTargetConfig``), from its datasheet.

    Attributes:
      compute_capability: CUDA compute capability, ``(9, 0)`` for an H100.
      sm_count: streaming multiprocessors.
      fp32_lanes_per_sm: FP32 units per SM (``fpus_per_core``).
      clock_ghz: boost clock.
      l2_bytes: L2 cache.
      shared_memory_per_sm: shared memory (and L1 carve-out) per SM, bytes.
      shared_memory_per_block_optin: the most shared memory one block may opt in to.
      threads_per_sm: resident threads per SM.
      registers_per_sm: 32-bit registers per SM (and per block).
      dnn_version: the cuDNN version the compiler assumes (its fused kernels depend on it).
      description: the device name XLA records (``NVIDIA H100 80GB HBM3``).
      source: where the figures come from.
      memory_bandwidth: the memory bandwidth, bytes/s, as the CUDA driver reports
        it to XLA (twice the memory clock times the bus width), where it is known;
        0: the datasheet's figure. XLA's autotuner keys its results by the device's
        compute capability, SM count, clock, this bandwidth (in whole GB/s) and
        L2 size, so a target compiled with the device's own figures can load what
        a real device's autotuning recorded (``xla_gpu_load_autotune_results_from``).
    """

    compute_capability: tuple[int, int]
    sm_count: int
    fp32_lanes_per_sm: int
    clock_ghz: float
    l2_bytes: int
    shared_memory_per_sm: int
    shared_memory_per_block_optin: int
    threads_per_sm: int = 2048
    registers_per_sm: int = 65536
    dnn_version: tuple[int, int, int] = (9, 1, 0)
    description: str = ""
    source: str = ""
    memory_bandwidth: float = 0.0

    @property
    def vector_flops(self) -> float:
        """FLOP/s of the CUDA cores (no tensor cores): SMs x FP32 lanes x 2 (a
        fused multiply-add) x the boost clock, the datasheets' FP32 figure
        (an H100 SXM's 132 x 128 x 2 x 1.98 GHz = 66.9 TFLOPS)."""
        return self.sm_count * self.fp32_lanes_per_sm * 2 * self.clock_ghz * 1e9

    def config_text(self, memory_bytes: float, bandwidth: float) -> str:
        """The ``GpuTargetConfig`` in protobuf text form, for ``get_topology_desc``
        (``bandwidth``: the datasheet's, where the driver's `memory_bandwidth` is not known)."""
        major, minor = self.compute_capability
        bandwidth = self.memory_bandwidth or bandwidth
        dnn = self.dnn_version
        return (
            "gpu_device_info {\n"
            "  threads_per_block_limit: 1024 threads_per_warp: 32\n"
            f"  shared_memory_per_block: 49152 shared_memory_per_core: {self.shared_memory_per_sm}\n"
            f"  shared_memory_per_block_optin: {self.shared_memory_per_block_optin}\n"
            f"  threads_per_core_limit: {self.threads_per_sm} core_count: {self.sm_count}\n"
            f"  fpus_per_core: {self.fp32_lanes_per_sm}\n"
            "  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535\n"
            f"  memory_bandwidth: {int(bandwidth)} l2_cache_size: {self.l2_bytes} clock_rate_ghz: {self.clock_ghz}\n"
            f"  device_memory_size: {int(memory_bytes)}\n"
            f"  cuda_compute_capability {{ major: {major} minor: {minor} }}\n"
            f"  registers_per_core_limit: {self.registers_per_sm} registers_per_block_limit: {self.registers_per_sm}\n"
            "}\n"
            'platform_name: "CUDA"\n'
            f"dnn_version_info {{ major: {dnn[0]} minor: {dnn[1]} patch: {dnn[2]} }}\n"
            f'device_description_str: "{self.description}"\n'
        )


@dataclasses.dataclass(frozen=True)
class TpuSpec:
    """A TPU generation as libtpu's topologies name it.

    Attributes:
      generation: the topology prefix (``v5e`` in ``v5e:2x2``).
      dimensions: 2 (``v5e:4x4``) or 3 (``v4:2x2x2``): how its slices are shaped.
      cores_per_chip: TensorCores per chip that jax shows as devices of their own
        (a v4's megacore is one device: 1).
      chips_per_host: chips one host drives.
      source: where the figures come from.
      chip_config: libtpu's ``chip_config_name`` for the topology (``megacore``: a
        v4 chip's two TensorCores as one device, as jax shows them on a real v4;
        libtpu's default shows a deviceless v4's cores as two); None: libtpu's default.
      max_chips: the chips of the generation's largest slice, from its
        documentation (`check_slice` refuses more); None: not known.
    """

    generation: str
    dimensions: int = 2
    cores_per_chip: int = 1
    chips_per_host: int = 4
    source: str = ""
    chip_config: str | None = None
    max_chips: int | None = None

    @property
    def host_bounds(self) -> tuple[int, ...]:
        """One host's chips along each side of a slice, as libtpu lays slices
        out: 2x2 (2-D), 2x2x1 (3-D), for a host of 4 chips."""
        side = math.isqrt(self.chips_per_host)
        return (side, side, 1)[:self.dimensions] if self.dimensions == 3 else (side,) * self.dimensions

    def slices(self) -> tuple[str, ...]:
        """The standard slices, smallest first: `topology_for` each power of two
        chips up to `max_chips` (16 chips when none is known)."""
        found: list[str] = []
        chips = 1
        while chips <= (self.max_chips or 16):
            shape = self.topology_for(chips)
            if shape not in found:
                found.append(shape)
            chips *= 2
        return tuple(found)

    def check_slice(self, device: str, given: str) -> str:
        """The topology (``v5e:2x2``) of the slice ``given`` names after
        ``device:`` (``2x2``), as libtpu accepts it without a TPU.

        libtpu builds a deviceless slice only where each side is 1 or a
        multiple of one host's side along it (`host_bounds`: ``v5e:3x3`` is
        refused as "not divisible by ... chips_per_host_bounds 2x2x1",
        ``v5e:6x2`` accepted; ``v5e:0x2`` stops the process with a floating-point
        exception); `max_chips` is the generation's largest slice.

        Raises:
          InputError: an empty slice, one of the wrong dimensions, a side that
            is not a whole number above 0 or not a multiple of the host's, or
            more chips than the generation's largest slice.
        """
        shape = "AxB" if self.dimensions == 2 else "AxBxC"
        name = f"{device}:{given}"
        listed = ", ".join(s.replace(f"{self.generation}:", "") for s in self.slices())
        where = (f"Name one of {device}'s slices ({listed}), or drop ':' for the smallest that holds the mesh; "
                 f"docs/targets.md and `xla-cost analyze --help` (--target) list the targets.")
        parts = given.split("x")
        example = f"{device}:{self.topology_for(4).partition(':')[2]}"
        if not given or len(parts) != self.dimensions:
            raise InputError(f"a {self.dimensions}-D slice after '{device}:', {shape} (e.g. {example})",
                             f"{name!r} ({'no slice' if not given else f'{len(parts)} side(s)'})", where)
        wrong = [p for p in parts if not (p.isdigit() and int(p) > 0)]
        if wrong:
            raise InputError(f"each side of a {device} slice a whole number of chips above 0 (e.g. {example})",
                             f"{name!r} (side{'s' if len(wrong) > 1 else ''} {' and '.join(map(repr, wrong))})",
                             where)
        sides = tuple(int(p) for p in parts)
        uneven = [f"{s}" for s, h in zip(sides, self.host_bounds) if s != 1 and s % h]
        if uneven:
            raise InputError(
                f"a {device} slice whose sides are each 1 or a multiple of one host's "
                f"({'x'.join(map(str, self.host_bounds))} chips, as libtpu lays slices out)",
                f"{name!r} (side{'s' if len(uneven) > 1 else ''} {' and '.join(uneven)}: neither)", where)
        chips = math.prod(sides)
        if self.max_chips is not None and chips > self.max_chips:
            raise InputError(f"a {device} slice of at most {self.max_chips:,} chips (its largest)",
                             f"{name!r} ({chips:,} chips)", where)
        return f"{self.generation}:" + "x".join(map(str, sides))

    def topology_for(self, chips: int) -> str:
        """The smallest standard slice of at least ``chips`` chips: near-square (2-D)
        or near-cubic (3-D) powers of two."""
        need = max(1, chips)
        sides = [1] * self.dimensions
        while math.prod(sides) < need:
            sides[sides.index(min(sides))] *= 2
        return f"{self.generation}:" + "x".join(str(s) for s in sorted(sides))


@dataclasses.dataclass(frozen=True)
class CompileTarget:
    """One device to compile for, and how many of it there may be.

    Attributes:
      name: as given (``h100``, ``tpu-v5e:2x2``).
      device: the registry key of the device (``h100``, ``tpu-v5e``).
      title: the device as reports name it.
      platform: ``cuda`` or ``tpu``.
      memory_bytes: one device's memory (a GPU's: what is free once the CUDA
        context is made, which JAX's allocator takes its share of).
      bandwidth: one device's memory bandwidth, bytes/s.
      gpu: a GPU's compiler description.
      tpu: a TPU generation's topologies.
      topology: a TPU slice named in ``name`` (``v5e:2x2``); None: chosen per mesh.
      node_size: devices per host (GPUs per server; a TPU host's chips).
      memory_fraction: the share of ``memory_bytes`` a program may use (JAX's
        allocator's, `ALLOCATOR_FRACTION`); a GPU's compiler is told it
        (`configured_memory`), as a real device's allocator tells it.
    """

    name: str
    device: str
    title: str
    platform: str
    memory_bytes: float
    bandwidth: float
    gpu: GpuSpec | None = None
    tpu: TpuSpec | None = None
    topology: str | None = None
    node_size: int = 8
    memory_fraction: float = ALLOCATOR_FRACTION

    @property
    def configured_memory(self) -> float:
        """The ``device_memory_size`` a GPU target's compiler is given: the
        allocator's limit over `CONFIGURED_SHARE`, so that it plans (schedules,
        rematerializes) for the limit a real device's compile plans for."""
        return self.memory_bytes * self.memory_fraction / CONFIGURED_SHARE

    @property
    def memory_options(self) -> dict[str, Any]:
        """Compiler options of the program a GPU target's memory is judged by where
        XLA's rematerialization recomputes instructions to fit: its matrix
        products as cuBLAS calls (``xla_gpu_enable_triton_gemm`` off), as a real
        GPU's autotuner made gpt2-small's large products on an H200
        (`xla_cost.analysis.programs.step_memory` compiles again with them).

        Without a device the compiler cannot autotune and keeps the Triton
        products it starts from, which rematerialization can recompute far more
        of. At batch 130 (bfloat16, Adam) the deviceless compile with Triton
        products rematerialized under its limit (a 95.7 GB peak) while the H200's
        own compile went from 170.80 GiB only to 144.19 GiB and ran out of
        memory; with cuBLAS products the deviceless compile reached those 144.19
        GiB to the byte (reports/data/device_check_nvidia-h200_2026-11-26-2_remat.log).
        `fit` then answered batch 110: it ran on the H200, 137 did not, and at
        111 and 113 the H200's rematerialization fell short as the deviceless one
        did (reports/data/device_check_nvidia-h200_2026-11-26-3.json). Where
        nothing is recomputed the default program is the device's: at batch 80
        the two peaks were equal to the byte."""
        return dict(LIBRARY_PRODUCTS) if self.platform == "cuda" else {}

    def kernel_cache_options(self, directory: str) -> dict[str, Any]:
        """Compiler options under which a GPU target's compiles reuse the kernels
        of earlier ones: XLA's kernel cache, one file per target in ``directory``.

        XLA keys a kernel by its fused computation and arguments, not by the
        target, so each target keeps its own file. Only for programs compiled to
        be analysed: the analyses read the optimized HLO and buffer assignment,
        not the binaries, and a deviceless compile spends most of its backend
        time in ptxas (ResNet-50's grad for the H100, batch 32: 3.7 of 3.8 s).
        The same program comes out (checked: optimized HLO and temporaries of
        ResNet-50 and BERT-base, forward, grad and update). Nothing for a TPU.
        """
        if self.platform != "cuda":
            return {}
        name = hashlib.sha256(self.key.encode("utf-8")).hexdigest()[:16]
        return {
            KERNEL_CACHE_OPTION: os.path.join(directory, f"{self.device}-{name}.bin"),
            # jax 0.10.2's XLA keeps the cache only with it; 0.11.2's has no such option
            # (the compile drops an option XLA does not know: kernel_cache.compile_reusing)
            "xla_gpu_enable_llvm_module_compilation_parallelism": True,
        }

    @property
    def attention_implementation(self) -> str:
        """The target's fused attention (`FUSED_ATTENTION`): ``cudnn`` or ``splash``."""
        return FUSED_ATTENTION[self.platform]

    @property
    def backend(self) -> str:
        """jax's backend name for the target (``gpu``, ``tpu``)."""
        return PLATFORM_BACKENDS[self.platform]

    @property
    def key(self) -> str:
        """What the caches key the target's programs by: everything its compiler is told."""
        if self.gpu is not None:
            return f"{self.platform}:{self.device}:{self.gpu.config_text(self.configured_memory, self.bandwidth)}"
        chip = self.tpu.chip_config if self.tpu is not None else None
        return f"{self.platform}:{self.device}:{self.topology or ''}:{chip or ''}"

    def devices(self, count: int = 1) -> list[Any]:
        """``count`` devices of the target, from its deviceless topology (GPUs:
        ``node_size`` per host, as many hosts as they need; a TPU: the slice
        named, or the smallest that holds them).

        Raises:
          InputError: the target's compiler is not installed, or its slice is too small.
        """
        require_plugin(self.platform)
        if self.platform == "cuda":
            hosts = max(1, -(-count // self.node_size))
            per_host = count if hosts == 1 else self.node_size
            found = _topology(self, f"1x{hosts}x{per_host}")
        else:
            spec = self.tpu
            topology = self.topology or spec.topology_for(-(-count // spec.cores_per_chip))
            found = _topology(self, topology)
        if len(found) < count:
            raise InputError(
                f"a {self.name} slice of at least {count} devices for the mesh",
                f"{len(found)} devices in {self.topology}",
                f"Name a larger slice (--target tpu-{spec.topology_for(count)}) or a smaller mesh.",
            )
        return list(found[:count])

    def placement(self) -> Any:
        """The sharding that places a whole array on the target's first device."""
        import jax

        return jax.sharding.SingleDeviceSharding(self.devices(1)[0])


@functools.lru_cache(maxsize=None)
def _topology_devices(platform: str, topology: str, config: str | None) -> tuple[Any, ...]:
    from jax.experimental import topologies

    with plugins.quiet_stderr():
        if platform == "tpu":
            _load_libtpu_without_its_profiler()
        if platform == "cuda":
            plugins.start_cuda()  # deferred by `import xla_cost` on a machine without a GPU driver
            desc = topologies.get_topology_desc(platform="cuda", topology=topology, target_config=config)
        elif config:
            desc = topologies.get_topology_desc(platform="tpu", topology_name=topology, chip_config_name=config)
        else:
            desc = topologies.get_topology_desc(platform="tpu", topology_name=topology)
    return tuple(desc.devices)


def _load_libtpu_without_its_profiler() -> None:
    """Loads libtpu as jax's TPU plugin without registering its profiler, where no TPU is attached.

    jax registers each plugin's profiler as it loads it; libtpu's, initialised for
    a deviceless topology, crashes the process (a segmentation fault) at the next
    ``jax.profiler`` trace, which `xla_cost.compiled.trace` starts to time a step
    on the CPU. With no TPU attached there is nothing for it to trace.
    """
    if plugins.has_tpu_device():
        return
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    if xla_client.pjrt_plugin_loaded("tpu"):
        return
    path = xla_bridge.get_tpu_library_path()
    if path is not None:
        xla_client.load_pjrt_plugin_dynamically("tpu", path)


def _topology(target: CompileTarget, topology: str) -> tuple[Any, ...]:
    config = (target.gpu.config_text(target.configured_memory, target.bandwidth) if target.gpu is not None
              else target.tpu.chip_config if target.tpu is not None else None)
    try:
        return _topology_devices(target.platform, topology, config)
    except Exception as exc:  # noqa: BLE001 - the plugin's own error, made one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise InputError(
            f"a {target.device} slice that {'libtpu' if target.platform == 'tpu' else 'the CUDA plugin'} "
            "builds without the device",
            f"{topology!r}, which it refused ({first})",
            "Name another slice or device; docs/targets.md and `xla-cost analyze --help` (--target) list them.",
        ) from exc


def require_plugin(platform: str) -> None:
    """Refuses, in one line naming the install command, a platform whose compiler is not installed.

    Raises:
      InputError: the CUDA plugin (``cuda``) or libtpu (``tpu``) is not importable.
    """
    have = plugins.cuda_plugin() is not None if platform == "cuda" else plugins.has_libtpu()
    if not have:
        what = "jax's CUDA plugin" if platform == "cuda" else "libtpu"
        raise InputError(
            f"{what} to compile for a {'GPU' if platform == 'cuda' else 'TPU'} target",
            "not installed", f"Install it: {plugins.install_command(platform)}.",
        )


_ACTIVE: contextvars.ContextVar[CompileTarget | None] = contextvars.ContextVar("xla_cost_target", default=None)


def active() -> CompileTarget | None:
    """The target compiles are for now; None: jax's default backend."""
    return _ACTIVE.get()


def fused_attention() -> str:
    """The fused attention a model uses where it is traced: the active target's
    (`FUSED_ATTENTION`: ``cudnn`` for a GPU, ``splash`` for a TPU), ``xla`` without one."""
    target = active()
    return FUSED_ATTENTION[None] if target is None else target.attention_implementation


@contextlib.contextmanager
def _capability_checks(target: CompileTarget | None) -> Iterator[None]:
    """Inside, jax's cuDNN attention checks read the GPU target's compute capability (no change
    for another target): jax asks the attached GPU (``check_compute_capability`` in
    jax/_src/cudnn/fused_attention_stablehlo.py, jax 0.10: heads up to 256 'if is_hopper_or_later',
    else 128), and a deviceless compile has none, so an H100 target's cuDNN flash attention was
    held to the pre-Hopper 128; the target's compiler builds the kernel for its own capability.
    Held for the whole of `use`: the attention's backward is traced when the step is."""
    if target is None or target.gpu is None:
        yield
        return
    from jax._src.cudnn import fused_attention_stablehlo as checks

    have = tuple(target.gpu.compute_capability)
    saved = checks.check_compute_capability, checks.is_cuda_compute_capability_equal

    def _parse(capability: str) -> tuple[int, ...]:
        return tuple(int(x) for x in capability.split("."))

    checks.check_compute_capability = lambda capability: have >= _parse(capability)
    checks.is_cuda_compute_capability_equal = lambda capability: have == _parse(capability)
    try:
        yield
    finally:
        checks.check_compute_capability, checks.is_cuda_compute_capability_equal = saved


@contextlib.contextmanager
def use(target: CompileTarget | None) -> Iterator[CompileTarget | None]:
    """Compiles inside are for ``target`` (None: the default backend); its compiler is checked first."""
    if target is not None:
        require_plugin(target.platform)
    token = _ACTIVE.set(target)
    try:
        with _capability_checks(target):
            yield target
    finally:
        _ACTIVE.reset(token)
