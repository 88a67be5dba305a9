"""Every kernel of a compiled program priced on a device: the compute of the time model.

A kernel that runs matrix products (`xla_cost.compiled.products.Product`)
takes the longer of its FLOP at the share of the dtype's peak its shape
allows and its bytes at the achievable bandwidth; any other kernel takes its
bytes at the achievable bandwidth. Each kernel costs its overhead besides,
and each step a fixed host cost:

    work     = max(F / (peak * matmul * shape), B / (bandwidth * memory))
               F / (cuda_cores * vector)     a cuDNN convolution whose input features are not a
                                             multiple of the tensor cores' alignment (an RGB stem)
    overhead = launch                 a cuDNN call (a convolution, fused attention: its set-up and
                                      kernels of its own)
               min(work, launch)      any other kernel (a fusion, a cuBLAS gemm): one kernel, which
                                      pays at most its own work again when shorter than the ramp
               + KERNEL_GAP           each kernel's slot in the stream (measured)
    seconds  = sum over kernels of (work + overhead) + host transfers exposed + host

F is the FLOP of the products a kernel RUNS: its count everywhere but in jax's splash
attention kernels for a TPU, which skip the block pairs their mask leaves out and
recompute the scores and ``dP`` in the backward (`xla_cost.count.attention.SplashCall.executed`;
their counted FLOP, `xla_cost.count.attention`'s convention, are unchanged).

A kernel that moves an array between the device and its host's memory (an
activation a remat policy offloads and fetches back: `xla_cost.compiled.kernels.Kernel.host_bytes`)
is priced as any other by its bytes in the device's memory, and its bytes over
the host link at the link's bandwidth (`xla_cost.timemodel.devices.host_link`),
asynchronously: in each computation (a loop's body) the link's seconds are
hidden behind the kernels XLA scheduled between each transfer's start and its
done, and only what outlasts them is exposed:

    exposed  = max(sum of its transfers' host bytes / link - those kernels' seconds, 0)

``matmul``, ``memory``, ``launch``, ``depth`` (inside ``shape``), ``vector`` and ``host`` are
the few global constants of `xla_cost.timemodel.calibration.Calibration`, one
set for every device. What differs between devices comes from the registry
(`xla_cost.timemodel.devices`): the peak of the dtype, the bandwidth, and the
matrix units the output tiles are spread over, the CUDA cores' FP32 rate
(``cuda_cores``: `xla_cost.compiled.targets.GpuSpec.vector_flops`). The shape's efficiency is

    shape = tiles(m, n) * waves(tiles x split, units) * (k / split) / (k / split + depth)

where, on a GPU, the library's tile side T is the best of `GPU_TILES` (the
rows and columns of the output padded to whole tiles; a T-side tile reaching
``T / (T + TILE_OVERHEAD)`` of the largest tile's rate, its operands read
once per tile) and the tiles run in waves over the streaming
multiprocessors (the last wave partly idle), the contraction split in
``split`` parts (`SPLIT_K`) where tiles are too few to fill them; on a TPU the output is padded to
the MXU's side and spread over its MXUs. Small contractions (k) pay for
filling and draining the pipeline: half the rate at ``k = depth``.

A convolution whose input features per group are not a multiple of
`TENSOR_CORE_ALIGNMENT` (the 3 channels of an image) gets no implicit-GEMM
tensor-core kernel of its shape from cuDNN: on an H100 its forward pass ran a
direct kernel on the CUDA cores (``convolve_common_engine_float_NHWC``) and its
weight gradient padded the channels first, 18-66 TFLOP/s for six such kernels
(conv_net's and ResNet-50's 7x7 stems,
``reports/data/kernels_nvidia-h100-80gb-hbm3_2026-11-26.csv``, ``python
benchmarks/kernel_profile.py``) where the tensor cores would give hundreds. It
is priced at ``vector`` of the CUDA cores' rate, on a GPU with tensor cores
(`TENSOR_CORES_FROM`); on one without, every convolution runs on the CUDA
cores at the dtype's peak and is priced as any product.

A program without a kernel list (the CPU proxy's, compiled here) is priced
from its totals: the products' FLOP at ``matmul`` of the peak (an FP8 run's
FP8 products at the float8 peak, the others at its dtype's), the rest's
bytes at ``memory`` of the bandwidth, no launches (its kernels are the CPU
compiler's, not the device's: `price_totals`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from xla_cost.choices import FLOAT8
from xla_cost.timemodel import devices as registry

__all__ = ["GPU_TILES", "SPLIT_K", "TILE_OVERHEAD", "KERNEL_GAP", "TENSOR_CORE_ALIGNMENT", "TENSOR_CORES_FROM", "KernelSeconds", "KernelTable", "kernel_table", "shape_efficiency",
           "price_kernels", "price_table", "price_totals"]

GPU_TILES = (16, 32, 64, 128, 256)
"""Output tile sides a GPU's GEMM library chooses among (CUTLASS and cuBLAS
thread-block tiles; the best for the shape is assumed chosen)."""

SPLIT_K = (1, 2, 4, 8, 16)
"""Parts a GPU's GEMM library may split a product's contraction into when its
output tiles are too few to fill the SMs (cuBLAS's and CUTLASS's split-K and
stream-K kernels), the best assumed chosen; each part pays the pipeline's
fill (``depth``) again."""

TILE_OVERHEAD = 64
"""A tile of side T reaches ``T / (T + TILE_OVERHEAD)`` of the rate, relative
to the largest tile: per output element it reads ``2 k / T`` operand elements,
so a smaller tile moves more bytes per FLOP (a structural constant, not fitted)."""

KERNEL_GAP = 0.67e-6
"""Seconds each kernel of a program takes however little it does: the slope
of a chain of dependent one-element kernels in one jitted call, measured by
``python benchmarks/dispatch_costs.py`` on an H100 (0.67 µs,
``reports/data/dispatch_nvidia-h100-80gb-hbm3_2026-11-26.csv``) and an H200
(0.66 µs, ``reports/data/dispatch_nvidia-h200_2026-11-26.csv``); measured, not
fitted (``tests/timemodel/test_dispatch_data.py`` holds it to the files)."""


TENSOR_CORE_ALIGNMENT = {"float16": 8, "bfloat16": 8, "float32": 4, "int8": 16}
"""Input features per group a cuDNN convolution's tensor-core kernels want a
multiple of, by element type (16 bytes of channels: NVIDIA's Deep Learning
Performance Guide, *Convolutional Layers*, "Channels In and Out": multiples of
8 for FP16, 4 for TF32, 16 for INT8). A convolution off it is priced on the
CUDA cores (`price_table`)."""

TENSOR_CORES_FROM = (7, 0)
"""The first compute capability with tensor cores (Volta, sm_70: NVIDIA Tesla V100
GPU Architecture whitepaper, 2017, "New Tensor Cores"). Before it (Pascal's P100
and P40) every convolution runs on the CUDA cores, whose rate is the dtype's
peak there: none is off the tensor cores, and each is priced as any product
(its shape's share of the peak), not at ``vector``."""


@dataclasses.dataclass(frozen=True)
class KernelSeconds:
    """A program's kernels priced.

    Attributes:
      matmul: seconds of the kernels that run matrix products.
      memory: seconds of the other kernels (their bytes at the bandwidth).
      launch: seconds of the kernels' overheads (each cuDNN call's launch,
        each fusion's up to its own work, every kernel's `KERNEL_GAP`).
      kernels: kernels launched per run of the program.
      flops: the matrix products' FLOP, as counted (a splash kernel's time is priced from the
        products it runs: `KernelTable.executed`).
      memory_bytes: the other kernels' bytes priced.
      source: ``kernels`` (kernel by kernel) or ``totals`` (the program's totals).
      host: seconds of the transfers to and from the host's memory not hidden
        behind the kernels scheduled beside them (see the module's docstring).
      host_bytes: the bytes those transfers move over the host link.
      host_link: the link's bandwidth they were priced at (bytes/s, one
        direction); None where the device has none in the registry (then
        ``host`` is 0 and unknown: a lower bound).
    """

    matmul: float
    memory: float
    launch: float
    kernels: int
    flops: float
    memory_bytes: float
    source: str
    host: float = 0.0
    host_bytes: float = 0.0
    host_link: float | None = None

    @property
    def seconds(self) -> float:
        """The program's compute: products, the rest, the launches and the host transfers exposed."""
        return self.matmul + self.memory + self.launch + self.host


@dataclasses.dataclass(frozen=True, eq=False)
class KernelTable:
    """A kernel list as arrays, one row per kernel that computes (collectives
    left out: the communication model prices them).

    Attributes:
      runs: runs per execution of the program.
      flops: the products' FLOP per run (0: no product), as counted.
      executed: the products' FLOP per run as the kernel runs them, what the time is priced
        from (`xla_cost.compiled.products.Product.run_flops`: a splash attention kernel's
        computed block pairs and recomputed products; any other kernel's ``flops``).
      bytes: bytes read and written per run.
      batch, m, n, k: the largest product's shape (1 where none).
      dtype: each kernel's products' dtype ("" where none).
      library: whether each kernel is a cuDNN call (a convolution, fused
        attention), which runs kernels of its own and pays the whole launch.
      vector: whether each kernel is a cuDNN convolution whose input features
        are off `TENSOR_CORE_ALIGNMENT` (priced on the CUDA cores).
      host: the transfers to and from the host's memory, one entry per
        computation that starts any: (runs of its transfers, their host bytes
        a run, the rows of the kernels scheduled beside any of them).
    """

    runs: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    batch: np.ndarray
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    dtype: tuple[str, ...]
    library: np.ndarray
    vector: np.ndarray
    host: tuple[tuple[float, float, np.ndarray], ...] = ()
    executed: np.ndarray | None = None

    @property
    def priced_flops(self) -> np.ndarray:
        """``executed``, else ``flops``: the FLOP each kernel's time is priced from."""
        return self.flops if self.executed is None else self.executed

    @property
    def kernels(self) -> int:
        """Launches per run of the program."""
        return int(self.runs.sum())


def kernel_table(kernels: Sequence[Any]) -> KernelTable:
    """The `KernelTable` of a kernel list (`xla_cost.compiled.kernels.Kernel`s).
    A kernel of unknown runs counts once, of unknown bytes none (both are named
    in the kernel summary's ``unknown``)."""
    rows = [k for k in kernels if k.category != "collective"]
    product = [k.product for k in rows]

    def column(values: list[Any]) -> np.ndarray:
        return np.asarray(values, dtype=np.float64)

    return KernelTable(
        runs=column([1 if k.executions is None else k.executions for k in rows]),
        flops=column([p.flops if p is not None else 0 for p in product]),
        bytes=column([k.bytes or 0 for k in rows]),
        batch=column([p.batch if p is not None else 1 for p in product]),
        m=column([p.m if p is not None else 1 for p in product]),
        n=column([p.n if p is not None else 1 for p in product]),
        k=column([p.k if p is not None else 1 for p in product]),
        dtype=tuple(p.dtype if p is not None else "" for p in product),
        library=np.asarray([k.category == "library" and k.kind.startswith("__cudnn") for k in rows], dtype=bool),
        vector=np.asarray([_off_tensor_cores(k) for k in rows], dtype=bool),
        host=_host_transfers(rows),
        executed=column([p.run_flops if p is not None else 0 for p in product]),
    )


def _host_transfers(rows: Sequence[Any]) -> tuple[tuple[float, float, np.ndarray], ...]:
    """`KernelTable.host` of a kernel list's rows: per computation, its transfers' runs and host bytes
    (a shape unknown: none, the kernel's ``host_bytes`` None), and the rows scheduled between any of
    their starts and dones (each once)."""
    index = {k.name: i for i, k in enumerate(rows)}
    grouped: dict[str, tuple[float, float, set[int]]] = {}
    for k in rows:
        if not k.host_bytes:
            continue
        runs, moved, beside = grouped.get(k.computation, (1.0 if k.executions is None else float(k.executions), 0.0,
                                                          set()))
        beside.update(index[name] for name in k.overlaps if name in index and not rows[index[name]].host_bytes)
        grouped[k.computation] = (runs, moved + k.host_bytes, beside)
    return tuple((runs, moved, np.asarray(sorted(beside), dtype=np.int64)) for runs, moved, beside in grouped.values())


def _off_tensor_cores(kernel: Any) -> bool:
    """A cuDNN convolution whose input features per group are not a multiple of its dtype's
    `TENSOR_CORE_ALIGNMENT`."""
    product = kernel.product
    if product is None or product.features <= 0 or kernel.category != "library" \
            or not kernel.kind.startswith("__cudnn$conv"):
        return False
    return product.features % TENSOR_CORE_ALIGNMENT.get(product.dtype, 8) != 0


def _padded(size: np.ndarray, side: float) -> np.ndarray:
    return np.ceil(size / side) * side


def shape_efficiency(batch: Any, m: Any, n: Any, k: Any, units: int, side: int, depth: float) -> np.ndarray:
    """The share of the matrix engines' rate products of these shapes reach
    (arrays or numbers, element by element): output tiles padded and spread in
    waves over ``units``, times ``k / (k + depth)``. ``side`` 0: a GPU (the best
    of `GPU_TILES`, and of `SPLIT_K` splits of the contraction: a product of few
    tiles and a long ``k`` runs each tile's ``k`` in parts on several units);
    else the TPU MXU's side."""
    return _efficiency(*_shape_terms(batch, m, n, k, units, side), depth)


def _shape_terms(batch: Any, m: Any, n: Any, k: Any, units: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """`shape_efficiency`'s terms that do not depend on ``depth``, one row per
    (tile, split) choice: the padding, waves and tile rate, and each part's ``k``."""
    batch, m, n, k = (np.asarray(x, dtype=np.float64) for x in (batch, m, n, k))
    shape = np.broadcast(batch, m, n, k).shape
    largest = max(GPU_TILES)
    rates, parts_k = [], []
    for tile in (GPU_TILES if side == 0 else (side,)):
        tiles = batch * np.ceil(m / tile) * np.ceil(n / tile)
        padding = (m * n) / (_padded(m, tile) * _padded(n, tile))
        rate = (tile / (tile + TILE_OVERHEAD)) / (largest / (largest + TILE_OVERHEAD)) if side == 0 else 1.0
        for split in (SPLIT_K if side == 0 else (1,)):
            parts = tiles * split
            waves = parts / (np.ceil(parts / units) * units)
            rates.append(np.broadcast_to(padding * waves * rate, shape))
            parts_k.append(np.broadcast_to(np.ceil(k / split), shape))
    return np.stack(rates), np.stack(parts_k)


def _efficiency(rates: np.ndarray, parts_k: np.ndarray, depth: float) -> np.ndarray:
    """The best (tile, split) choice's share at ``depth`` (`_shape_terms`' rows)."""
    return np.maximum(np.max(rates * parts_k / (parts_k + depth), axis=0), 0.0)


def _peak(device: registry.Device, dtype: str, arithmetic: str | None) -> float:
    assert device.peak is not None
    return device.peak.require(arithmetic or dtype or "float32")


def price_table(table: KernelTable, device: str, calibration: Any, arithmetic: str | None = None) -> KernelSeconds:
    """The `KernelSeconds` of a `KernelTable` on ``device`` (a registry name)
    with the constants of ``calibration`` (`xla_cost.timemodel.calibration.Calibration`).
    ``arithmetic``: the dtype whose peak products run at, where it is not their own.

    Raises:
      InputError: the device has no published peak for a product's dtype.
    """
    found = registry.device(device, has="peak")
    assert found.peak is not None
    units, side = registry.matrix_units(found.name)
    bandwidth = found.peak.bandwidth * calibration.memory
    memory_s = table.bytes / bandwidth
    has_product = table.flops > 0
    peaks = _table_peaks(table, found, arithmetic)
    shape = _efficiency(*_table_terms(table, units, side), calibration.depth)
    run = table.priced_flops  # the products each kernel runs (a splash kernel's differ from its count)
    with np.errstate(divide="ignore", invalid="ignore"):
        product_s = np.where(has_product, run / (peaks * calibration.matmul * shape), 0.0)
    if found.gpu is not None and found.gpu.compute_capability >= TENSOR_CORES_FROM and table.vector.any():
        product_s = np.where(table.vector, run / (found.gpu.vector_flops * calibration.vector), product_s)
    work = np.where(has_product, np.maximum(product_s, memory_s), memory_s)
    overhead = np.where(table.library, calibration.launch, np.minimum(work, calibration.launch)) + KERNEL_GAP
    matmul = float((work * table.runs)[has_product].sum())
    memory = float((work * table.runs)[~has_product].sum())
    kernels = table.kernels
    host, moved, link = _host_exposed(table, (work + overhead) * table.runs, found.name)
    return KernelSeconds(matmul, memory, float((overhead * table.runs).sum()), kernels,
                         float((table.flops * table.runs).sum()), float((table.bytes * table.runs)[~has_product].sum()),
                         "kernels", host, moved, link)


def _host_exposed(table: KernelTable, seconds: np.ndarray, device: str) -> tuple[float, float, float | None]:
    """(seconds of host transfers exposed, their bytes, the link's bandwidth or None): each computation's
    transfers at the host link's bandwidth, less the kernels scheduled beside them (``seconds``: each row's
    every run), per run of the computation."""
    if not table.host:
        return 0.0, 0.0, None
    moved = sum(runs * per_run for runs, per_run, _ in table.host)
    link = registry.host_link(device)
    if link is None:
        return 0.0, float(moved), None
    exposed = 0.0
    for runs, per_run, beside in table.host:
        hidden = float(seconds[beside].sum()) / runs if beside.size else 0.0
        exposed += runs * max(per_run / link.bandwidth - hidden, 0.0)
    return exposed, float(moved), link.bandwidth


_TERMS: dict[tuple[int, int, int], tuple[KernelTable, np.ndarray, np.ndarray]] = {}
"""`_shape_terms` of kernel tables, by the table's identity and the device's units (the table kept
alive beside them): a fit prices one program thousands of times with other constants."""


def _table_terms(table: KernelTable, units: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    held = _TERMS.get((id(table), units, side))
    if held is None or held[0] is not table:
        if len(_TERMS) > 4096:
            _TERMS.clear()
        held = _TERMS[(id(table), units, side)] = (table, *_shape_terms(table.batch, table.m, table.n, table.k,
                                                                          units, side))
    return held[1], held[2]


_PEAKS: dict[tuple[int, str, str | None], tuple[KernelTable, np.ndarray]] = {}
"""Each kernel's peak FLOP/s by the table's identity, the device and the arithmetic (the table kept
alive beside them): the same table priced with other constants needs no new lookups."""


def _table_peaks(table: KernelTable, device: registry.Device, arithmetic: str | None) -> np.ndarray:
    key = (id(table), device.name, arithmetic)
    held = _PEAKS.get(key)
    if held is None or held[0] is not table:
        if len(_PEAKS) > 4096:
            _PEAKS.clear()
        by_dtype = {d: _peak(device, d, arithmetic) if d else 1.0 for d in set(table.dtype)}
        held = _PEAKS[key] = (table, np.asarray([by_dtype[d] for d in table.dtype], dtype=np.float64))
    return held[1]


_TABLES: dict[int, tuple[Any, KernelTable]] = {}
"""Kernel lists made tables, by identity (the list kept alive beside its table)."""


def price_kernels(kernels: Sequence[Any], device: str, calibration: Any, arithmetic: str | None = None
                  ) -> KernelSeconds:
    """`price_table` of a kernel list (`xla_cost.compiled.kernels.kernel_list`);
    the list's table is made once and kept while the list lives."""
    held = _TABLES.get(id(kernels))
    if held is None or held[0] is not kernels:
        if len(_TABLES) > 4096:
            _TABLES.clear()
        held = _TABLES[id(kernels)] = (kernels, kernel_table(kernels))
    return price_table(held[1], device, calibration, arithmetic)


def price_totals(matmul_flops: float, memory_bytes: float, kernels: int, device: str, dtype: str,
                 calibration: Any, arithmetic: str | None = None, float8_flops: float = 0.0) -> KernelSeconds:
    """A program priced from its totals (no kernel list: the CPU proxy's
    program): its products' FLOP at ``matmul`` of the dtype's peak, as one
    large well-shaped product, and the rest's bytes at ``memory`` of the
    bandwidth. Its ``kernels`` are the CPU compiler's, not the device's
    (several times as many, unfused): they are counted, not charged a launch.
    ``float8_flops``: the part of ``matmul_flops`` in FP8 products
    (`xla_cost.analysis.report.PhaseCosts.float8_flops`), at the device's
    float8 peak (where ``arithmetic`` names no peak for every product).

    Raises:
      InputError: the device has no published peak for ``dtype``, or FP8
        products on a device without FP8 units.
    """
    found = registry.device(device, has="peak")
    peak = _peak(found, dtype, arithmetic)
    assert found.peak is not None
    narrow = min(float8_flops, matmul_flops) if arithmetic is None else 0.0
    matmul = (matmul_flops - narrow) / (peak * calibration.matmul) if matmul_flops else 0.0
    if narrow:
        matmul += narrow / (_peak(found, FLOAT8, None) * calibration.matmul)
    memory = memory_bytes / (found.peak.bandwidth * calibration.memory) if memory_bytes else 0.0
    return KernelSeconds(matmul, memory, 0.0, kernels, float(matmul_flops), float(memory_bytes), "totals")

