"""Every kernel of a compiled program priced on a device (issue 32): `xla_cost.timemodel.kernel_time`.

Expected figures are the module's formulas written out here by hand:

    seconds = sum over kernels of runs * max(F / (peak * matmul * shape), B / (bandwidth * memory))
              + kernels * launch
    shape   = padding * waves * tile rate * k / (k + depth)

with the registry's published figures: the H100 SXM5's dense BF16 989.4 and TF32
494.7 TFLOPS, HBM3 3.35 TB/s (NVIDIA H100 datasheet) and its 132 SMs (H100
whitepaper, 2022); the TPU v5e's 197 TFLOPS, 819 GB/s and four 128x128 MXUs
(Cloud TPU v5e documentation). A GPU's tile side is the best of 16, 32, 64,
128 and 256 (`kernel_time.GPU_TILES`), a side-T tile at (T / (T + 64)) /
(256 / (256 + 64)) of the largest tile's rate (`kernel_time.TILE_OVERHEAD`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from xla_cost.compiled.kernels import Kernel
from xla_cost.compiled.products import FMA, Product
from xla_cost.errors import InputError
from xla_cost.timemodel import kernel_time
from xla_cost.timemodel.calibration import Calibration
from xla_cost.timemodel.devices import matrix_units
from xla_cost.timemodel.kernel_time import (
    KERNEL_GAP, TENSOR_CORE_ALIGNMENT, KernelSeconds, KernelTable, kernel_table, price_kernels, price_table, price_totals, shape_efficiency,
)

H100_BF16, H100_TF32, H100_HBM, H100_SMS = 989.4e12, 494.7e12, 3.35e12, 132
V5E_PEAK, V5E_HBM, V5E_MXUS, V5E_SIDE = 197e12, 819e9, 4, 128
CONSTANTS = Calibration(matmul=0.6, memory=0.75, launch=5e-6, depth=128.0, host=1e-3)


def _tile_rate(tile: int) -> float:
    # a side-T tile reads 2k/T operand elements per output: T / (T + 64), relative to the 256 tile's
    return (tile / (tile + 64)) / (256 / (256 + 64))


def _by_tile(batch: int, m: int, n: int, tile: int, units: int = H100_SMS) -> float:
    """One tile side's share, written out: the output padded to whole T x T tiles, the tiles in
    waves over the units (the last one partly idle), at the tile's rate."""
    rows, columns = math.ceil(m / tile), math.ceil(n / tile)
    tiles = batch * rows * columns
    padding = m * n / (rows * tile * columns * tile)
    waves = tiles / (math.ceil(tiles / units) * units)
    return padding * waves * _tile_rate(tile)


def _best_tile(batch: int, m: int, n: int) -> int:
    return max(kernel_time.GPU_TILES, key=lambda tile: _by_tile(batch, m, n, tile))


def _split(batch: int, m: int, n: int, k: int, tile: int, split: int, depth: float, units: int = H100_SMS) -> float:
    """A tile side with the contraction in ``split`` parts, written out: split x the tiles in waves,
    each part's k / split paying the pipeline's fill."""
    rows, columns = math.ceil(m / tile), math.ceil(n / tile)
    parts = batch * rows * columns * split
    padding = m * n / (rows * tile * columns * tile)
    part_k = math.ceil(k / split)
    return padding * parts / (math.ceil(parts / units) * units) * _tile_rate(tile) * part_k / (part_k + depth)


def test_the_registry_gives_the_matrix_units():
    assert matrix_units("h100") == (H100_SMS, 0)  # 132 SMs; side 0: the library picks its tiles
    assert matrix_units("tpu-v5e") == (V5E_MXUS, V5E_SIDE)
    # the tiles the hand derivations below choose among, 256 the largest
    assert kernel_time.GPU_TILES == (16, 32, 64, 128, 256) and kernel_time.TILE_OVERHEAD == 64


def test_a_4096_cube_on_132_sms_takes_256_tiles_in_two_waves():
    m = n = k = 4096
    depth = 128.0
    # tile 256: 16 x 16 = 256 tiles, no padding, ceil(256 / 132) = 2 waves of 132 slots: 256 / 264
    by_256 = (16 * 16) / (math.ceil(16 * 16 / 132) * 132) * 1.0 * _tile_rate(256)
    assert by_256 == pytest.approx(256 / 264) == _by_tile(1, m, n, 256)
    # tile 128: 32 x 32 = 1024 tiles in 8 waves (1056 slots) at 0.833 of the rate; tile 64: 4096 tiles in
    # 32 waves (4224 slots) at 0.625; tile 32: 16384 in 125 (16500) at 0.417; tile 16: 65536 in 497 at 0.25
    by_128, by_64 = 1024 / (8 * 132) * _tile_rate(128), 4096 / (32 * 132) * _tile_rate(64)
    by_32, by_16 = 16384 / (125 * 132) * _tile_rate(32), 65536 / (497 * 132) * _tile_rate(16)
    assert by_256 > by_128 > by_64 > by_32 > by_16 and _best_tile(1, m, n) == 256
    expected = by_256 * k / (k + depth)  # the contraction: half rate at k = depth
    assert float(shape_efficiency(1, m, n, k, H100_SMS, 0, depth)) == pytest.approx(expected, rel=1e-12)
    assert float(shape_efficiency(1, m, n, k, H100_SMS, 0, 0.0)) == pytest.approx(256 / 264, rel=1e-12)
    # half the rate at k = depth, whatever the tiles
    assert float(shape_efficiency(1, m, n, 128, H100_SMS, 0, 128.0)) == pytest.approx(256 / 264 / 2, rel=1e-12)


def test_a_64_square_output_splits_its_contraction_over_the_sms():
    k, depth = 4096, 128.0
    # unsplit, best as 4 x 4 = 16 tiles of 16 (no padding) on 16 SMs of 132, at 0.25 of the rate; 4 tiles
    # of 32 reach 4 / 132 at 0.417, one of 64 1 / 132 at 0.625
    assert _best_tile(1, 64, 64) == 16 and _by_tile(1, 64, 64, 16) == pytest.approx(16 / 132 * 0.25)
    unsplit = 16 / 132 * _tile_rate(16) * k / (k + depth)
    # split in 8: 128 parts in one wave of 132, each k = 512 at 512 / 640; in 16: 256 parts in two
    # waves (264 slots), k = 256 at 256 / 384; 32-tiles in 16: 64 parts at 0.417 and 256 / 384
    by_8 = 128 / 132 * _tile_rate(16) * 512 / (512 + depth)
    assert by_8 == pytest.approx(_split(1, 64, 64, k, 16, 8, depth))
    assert by_8 > _split(1, 64, 64, k, 16, 16, depth) > _split(1, 64, 64, k, 32, 16, depth) > unsplit
    assert by_8 == max(_split(1, 64, 64, k, t, s, depth) for t in kernel_time.GPU_TILES for s in kernel_time.SPLIT_K)
    assert float(shape_efficiency(1, 64, 64, k, H100_SMS, 0, depth)) == pytest.approx(by_8, rel=1e-12)
    # 8192^2: tile 256, 32 x 32 = 1024 tiles in 8 waves (1056 slots), filled without a split
    assert _best_tile(1, 8192, 8192) == 256
    large = 1024 / 1056 * k / (k + depth)
    assert float(shape_efficiency(1, 8192, 8192, k, H100_SMS, 0, depth)) == pytest.approx(large, rel=1e-12)
    # a weight gradient's shape, 768 x 3,072 out of 8,192 tokens: 3 x 12 = 36 tiles of 256 would fill 36 of
    # 132 SMs; 12 x 48 = 576 tiles of 64 in 5 waves (660 slots) at 0.625 lose less
    grad = max(_split(1, 768, 3072, 8192, t, s, depth) for t in kernel_time.GPU_TILES for s in kernel_time.SPLIT_K)
    assert float(shape_efficiency(1, 768, 3072, 8192, H100_SMS, 0, depth)) == pytest.approx(grad, rel=1e-12)
    assert grad > _split(1, 768, 3072, 8192, 256, 1, depth)


def _gemm_call(m: int, n: int, k: int, dtype: str = "bfloat16", size: int = 2) -> Kernel:
    """One cuBLAS call of an ``[m, k] x [k, n]`` product: its operands read and its output written."""
    product = Product(1, m, n, k, dtype, FMA * m * n * k)
    return Kernel("gemm", "library", "__cublas$gemm", "custom-call", "main", "", size * (m * k + k * n + m * n), 1,
                  product=product)


def test_a_small_output_s_time_on_the_h100_is_its_contraction_split_over_the_sms():
    """What a split of the contraction is for: a product with few output tiles and a long k takes
    the time of its best split (cuBLAS's split-K kernels), written out here part by part."""
    k, depth = 4096, 128.0
    constants = Calibration(matmul=0.3, memory=0.9, launch=5e-6, depth=depth)
    bandwidth = H100_HBM * constants.memory

    def seconds(m: int, n: int, shape: float) -> float:
        flop_s = FMA * m * n * k / (H100_BF16 * constants.matmul * shape)
        byte_s = 2 * (m * k + k * n + m * n) / bandwidth
        assert flop_s > byte_s  # FLOP-bound: the shape decides the time
        return flop_s

    # the library's choices: output tiles of side 16 to 256, the contraction in 1, 2, 4, 8 or 16 parts
    # (cuBLAS's and CUTLASS's split-K); the best is taken
    choices = [(tile, split) for tile in (16, 32, 64, 128, 256) for split in (1, 2, 4, 8, 16)]
    # 64 x 64 out of k = 4,096 on 132 SMs: 4 x 4 = 16 tiles of 16 (at 0.25 of the largest tile's rate); split
    # in 8, 128 parts fill 128 of the 132 SMs in one wave, each part's k = 512 at 512 / (512 + depth). Unsplit
    # it would use 16 SMs; in 16 parts, 256 take two waves and each k = 256 pays the fill twice as often
    square = 128 / 132 * _tile_rate(16) * 512 / (512 + depth)
    assert square == pytest.approx(max(_split(1, 64, 64, k, t, s, depth) for t, s in choices), rel=1e-12)
    priced = price_kernels([_gemm_call(64, 64, k)], "h100", constants)
    assert priced.matmul == pytest.approx(seconds(64, 64, square), rel=1e-12)
    # 32 x 64: 2 x 4 = 8 tiles of 16; split in 16, 128 parts fill one wave, each k = 256 (in 8 only 64 SMs work)
    narrow = 128 / 132 * _tile_rate(16) * 256 / (256 + depth)
    assert narrow > 64 / 132 * _tile_rate(16) * 512 / (512 + depth)  # 16 parts beat 8 here
    assert narrow == pytest.approx(max(_split(1, 32, 64, k, t, s, depth) for t, s in choices), rel=1e-12)
    priced = price_kernels([_gemm_call(32, 64, k)], "h100", constants)
    assert priced.matmul == pytest.approx(seconds(32, 64, narrow), rel=1e-12)
    # unsplit, the same 32 x 64 product would take 128 / 8 = 16 times as long, less the longer k's fill
    unsplit = 8 / 132 * _tile_rate(16) * k / (k + depth)
    assert seconds(32, 64, unsplit) > 8 * priced.matmul


def test_the_same_program_priced_with_another_arithmetic_takes_that_arithmetic_s_peak():
    """One kernel list priced several times in one process (a sweep of dtypes, `fit_constants`):
    each price is at the peak its arithmetic names, whatever was asked before."""
    listed = [_gemm_call(4096, 4096, 4096)]  # a 4096^3 bfloat16 product, one cuBLAS call
    shape = 256 / 264 * 4096 / (4096 + CONSTANTS.depth)  # 256 tiles of 256 in two waves of 132 (above)
    own = FMA * 4096**3 / (H100_BF16 * CONSTANTS.matmul * shape)
    assert own > listed[0].bytes / (H100_HBM * CONSTANTS.memory)  # FLOP-bound
    first = price_kernels(listed, "h100", CONSTANTS)
    assert first.matmul == pytest.approx(own, rel=1e-12)
    # float32 arithmetic: TF32's peak, half of BF16's (494.7 against 989.4 TFLOPS): twice the time
    as_float32 = price_kernels(listed, "h100", CONSTANTS, arithmetic="float32")
    assert as_float32.matmul == pytest.approx(own * H100_BF16 / H100_TF32, rel=1e-12)
    assert as_float32.matmul == pytest.approx(2 * first.matmul, rel=1e-3)
    # and its own dtype again: bfloat16's peak
    assert price_kernels(listed, "h100", CONSTANTS, arithmetic="bfloat16").matmul == pytest.approx(own, rel=1e-12)
    assert price_kernels(listed, "h100", CONSTANTS) == first


def test_a_batch_of_products_fills_the_machine_and_a_ragged_output_pads():
    # 132 independent 256^2 outputs: one 256 tile each, one full wave
    assert float(shape_efficiency(132, 256, 256, 1024, H100_SMS, 0, 0.0)) == pytest.approx(1.0, rel=1e-12)
    # one alone: unsplit, best as 16 x 16 = 256 tiles of 16 in 2 waves (264 slots) at 0.25 of the rate; with
    # the contraction split (free at depth 0), 16 tiles of 64 in 8 parts fill 128 of 132 SMs at 0.625
    assert _best_tile(1, 256, 256) == 16 and _by_tile(1, 256, 256, 16) == pytest.approx(256 / 264 * 0.25)
    assert float(shape_efficiency(1, 256, 256, 1024, H100_SMS, 0, 0.0)) == pytest.approx(128 / 132 * 0.625, rel=1e-12)
    # 300 x 300: best as 5 x 5 = 25 tiles of 64 over 320 x 320 (padded) in 4 parts: 100 of 132 SMs at 0.625
    padded = 300 * 300 / (320 * 320) * 100 / 132 * _tile_rate(64)
    assert _split(1, 300, 300, 1024, 64, 4, 0.0) == pytest.approx(padded, rel=1e-12)
    assert float(shape_efficiency(1, 300, 300, 1024, H100_SMS, 0, 0.0)) == pytest.approx(padded, rel=1e-12)


def test_a_tpu_pads_to_its_mxu_and_spreads_over_its_mxus():
    # 4096^2 on 128-side MXUs: 32 x 32 = 1024 tiles, 256 waves of 4, none idle, no padding
    assert float(shape_efficiency(1, 4096, 4096, 4096, V5E_MXUS, V5E_SIDE, 128.0)) == pytest.approx(
        4096 / (4096 + 128), rel=1e-12)
    # 100 x 100: one 128^2 tile (100^2 / 128^2 of it used) on one MXU of 4
    assert float(shape_efficiency(1, 100, 100, 4096, V5E_MXUS, V5E_SIDE, 0.0)) == pytest.approx(
        100 * 100 / (128 * 128) / 4, rel=1e-12)


def test_shape_efficiency_works_element_by_element():
    m = np.array([64, 4096, 300])
    n = np.array([64, 4096, 300])
    k = np.array([4096, 4096, 128])
    together = shape_efficiency(np.ones(3), m, n, k, H100_SMS, 0, 128.0)
    one_by_one = [float(shape_efficiency(1, mi, ni, ki, H100_SMS, 0, 128.0)) for mi, ni, ki in zip(m, n, k)]
    assert together.shape == (3,) and together.tolist() == pytest.approx(one_by_one, rel=1e-12)


def _table() -> KernelTable:
    """Three kernels: a large bfloat16 product run twice (a library call), a small float32 product
    whose bytes outlast its FLOP (a fusion), an elementwise kernel run three times."""
    return KernelTable(
        runs=np.array([2.0, 1.0, 3.0]),
        flops=np.array([2.0 * 4096**3, 2.0 * 64**3, 0.0]),
        bytes=np.array([3 * 4096 * 4096 * 2.0, 64e6, 1e8]),
        batch=np.array([1.0, 1.0, 1.0]),
        m=np.array([4096.0, 64.0, 1.0]),
        n=np.array([4096.0, 64.0, 1.0]),
        k=np.array([4096.0, 64.0, 1.0]),
        dtype=("bfloat16", "float32", ""),
        library=np.array([True, False, False]),
        vector=np.zeros(3, dtype=bool),
    )


def _by_hand(peaks: tuple[float, float]) -> tuple[float, float, float]:
    """(products, the rest, overheads) of `_table` on the H100 with `CONSTANTS`, written out: the
    library call pays the launch, each fusion the launch or its own work, whichever is less, and
    every kernel the measured gap."""
    c = CONSTANTS
    bandwidth = H100_HBM * c.memory
    shape_large = 256 / 264 * 4096 / (4096 + c.depth)  # 256 tiles of 256 in two waves of 132
    shape_small = 16 / 132 * _tile_rate(16) * 64 / (64 + c.depth)  # 16 tiles of 16 on 16 SMs
    large = max(2.0 * 4096**3 / (peaks[0] * c.matmul * shape_large), 3 * 4096 * 4096 * 2.0 / bandwidth)
    small = max(2.0 * 64**3 / (peaks[1] * c.matmul * shape_small), 64e6 / bandwidth)
    assert large == 2.0 * 4096**3 / (peaks[0] * c.matmul * shape_large)  # FLOP-bound
    assert small == 64e6 / bandwidth  # bytes-bound: its 64 MB outlast its FLOP
    overheads = (2 * c.launch + 1 * min(small, c.launch) + 3 * min(1e8 / bandwidth, c.launch)
                 + (2 + 1 + 3) * KERNEL_GAP)
    return 2 * large + 1 * small, 3 * 1e8 / bandwidth, overheads


def test_price_table_is_the_formula_on_the_h100():
    priced = price_table(_table(), "h100", CONSTANTS)
    products, rest, launches = _by_hand((H100_BF16, H100_TF32))  # each product at its own dtype's peak
    assert isinstance(priced, KernelSeconds) and priced.source == "kernels"
    assert (priced.matmul, priced.memory, priced.launch) == pytest.approx((products, rest, launches), rel=1e-12)
    assert priced.seconds == pytest.approx(products + rest + launches, rel=1e-12)  # no host: that is per step
    assert priced.kernels == 6
    assert priced.flops == 2 * 2.0 * 4096**3 + 2.0 * 64**3  # every product's FLOP, times its runs
    assert priced.memory_bytes == 3 * 1e8  # the other kernels' bytes, times their runs


def test_arithmetic_prices_every_product_at_another_dtypes_peak():
    priced = price_table(_table(), "h100", CONSTANTS, arithmetic="float32")
    products, rest, launches = _by_hand((H100_TF32, H100_TF32))  # the bfloat16 product at TF32's peak too
    assert (priced.matmul, priced.memory, priced.launch) == pytest.approx((products, rest, launches), rel=1e-12)


def test_a_convolution_off_the_tensor_cores_is_priced_on_the_cuda_cores():
    # an RGB stem: 64 x 112 x 112 outputs of 32 features, each 7 x 7 taps of 3 input features (3 is no
    # multiple of the 8 a bfloat16 tensor-core kernel wants); a cuDNN call run once
    flops = FMA * 64 * 112 * 112 * 32 * 7 * 7 * 3
    table = KernelTable(runs=np.ones(1), flops=np.array([float(flops)]), bytes=np.array([70e6]), batch=np.ones(1),
                        m=np.array([64 * 112 * 112.0]), n=np.array([32.0]), k=np.array([7 * 7 * 3.0]),
                        dtype=("bfloat16",), library=np.ones(1, dtype=bool), vector=np.ones(1, dtype=bool))
    constants = Calibration(matmul=0.75, memory=0.8, launch=5e-6, depth=128.0, vector=0.4)
    cuda_cores = 132 * 128 * 2 * 1.98e9  # the H100 SXM's SMs x FP32 lanes x an FMA x its boost clock
    priced = price_table(table, "h100", constants)
    assert priced.matmul == pytest.approx(flops / (cuda_cores * 0.4), rel=1e-12)  # its FLOP at 0.4 of the cores
    assert priced.launch == pytest.approx(5e-6 + KERNEL_GAP, rel=1e-12)  # a cuDNN call: the launch
    on_tensor_cores = price_table(dataclasses.replace(table, vector=np.zeros(1, dtype=bool)), "h100", constants)
    assert on_tensor_cores.matmul < priced.matmul / 2  # what the rule is for: the tensor cores' price is far lower


def test_a_gpu_without_tensor_cores_prices_an_rgb_stem_as_any_convolution():
    # a P100 (Pascal, compute capability 6.0: no tensor cores) runs every convolution on its CUDA cores, whose
    # FP32 rate is its peak: 56 SMs x 64 lanes x an FMA x 1.48 GHz = 10.6 TFLOPS; the stem is no exception
    flops = FMA * 32 * 112 * 112 * 64 * 7 * 7 * 3
    table = KernelTable(runs=np.ones(1), flops=np.array([float(flops)]), bytes=np.array([1e6]), batch=np.ones(1),
                        m=np.array([32 * 112 * 112.0]), n=np.array([64.0]), k=np.array([7 * 7 * 3.0]),
                        dtype=("float32",), library=np.ones(1, dtype=bool), vector=np.ones(1, dtype=bool))
    constants = Calibration(matmul=0.75, memory=0.8, launch=5e-6, depth=128.0, vector=0.05)
    stem = price_table(table, "p100", constants)
    aligned = price_table(dataclasses.replace(table, vector=np.zeros(1, dtype=bool)), "p100", constants)
    assert stem.matmul == pytest.approx(aligned.matmul, rel=1e-12)  # priced by its shape, not at `vector`
    assert stem.matmul < flops / (56 * 64 * 2 * 1.48e9 * 0.05)  # what `vector` would have charged


def test_the_vector_flag_is_a_cudnn_convolution_off_its_dtypes_alignment():
    def kernel(kind: str, features: int, dtype: str) -> Kernel:
        return Kernel("k", "library", kind, "custom-call", "main", "", 1000, 1,
                      product=Product(1, 100, 32, 27, dtype, 1000, features=features))

    flags = kernel_table([
        kernel("__cudnn$convForward", 3, "bfloat16"),  # 3 RGB channels: off 8
        kernel("__cudnn$convBackwardFilter", 3, "float32"),  # off 4 (TF32)
        kernel("__cudnn$convForward", 8, "bfloat16"),  # aligned
        kernel("__cudnn$convForward", 4, "float32"),  # aligned for TF32
        kernel("__cublas$gemm", 3, "bfloat16"),  # not a convolution
    ]).vector
    assert flags.tolist() == [True, True, False, False, False]
    assert TENSOR_CORE_ALIGNMENT["bfloat16"] * 2 == TENSOR_CORE_ALIGNMENT["float32"] * 4 == 16  # 16 bytes of channels


def test_a_memory_only_kernel_is_its_bytes_at_the_achieved_bandwidth():
    table = KernelTable(runs=np.array([1.0]), flops=np.array([0.0]), bytes=np.array([1e9]), batch=np.ones(1),
                        m=np.ones(1), n=np.ones(1), k=np.ones(1), dtype=("",), library=np.zeros(1, dtype=bool),
                        vector=np.zeros(1, dtype=bool))
    no_launch = Calibration(matmul=0.6, memory=0.75)
    priced = price_table(table, "h100", no_launch)
    assert priced.memory == pytest.approx(1e9 / (H100_HBM * 0.75), rel=1e-12)
    assert priced.seconds == pytest.approx(priced.memory + KERNEL_GAP, rel=1e-12)  # no launch: the gap alone
    assert priced.matmul == 0 and priced.flops == 0 and priced.memory_bytes == 1e9
    on_v5e = price_table(table, "tpu-v5e", no_launch)
    assert on_v5e.seconds == pytest.approx(1e9 / (V5E_HBM * 0.75) + KERNEL_GAP, rel=1e-12)


def test_price_totals_is_one_large_product_and_the_rest():
    flops, moved, launched = 4e12, 2e9, 300
    priced = price_totals(flops, moved, launched, "h100", "bfloat16", CONSTANTS)
    # the products' FLOP at 0.6 of BF16's peak (one large, well-shaped product: no shape, no depth),
    # the rest's bytes at 0.75 of HBM3; the 300 kernels are the CPU compiler's: counted, not charged a launch
    expected = (flops / (H100_BF16 * 0.6), moved / (H100_HBM * 0.75), 0.0)
    assert (priced.matmul, priced.memory, priced.launch) == pytest.approx(expected, rel=1e-12)
    assert (priced.kernels, priced.flops, priced.memory_bytes, priced.source) == (launched, flops, moved, "totals")
    assert priced.seconds == pytest.approx(sum(expected), rel=1e-12)
    # float32 at TF32's peak; arithmetic= overrides the dtype
    assert price_totals(flops, 0, 0, "h100", "float32", CONSTANTS).matmul == pytest.approx(
        flops / (H100_TF32 * 0.6), rel=1e-12)
    assert price_totals(flops, 0, 0, "h100", "float32", CONSTANTS, arithmetic="bfloat16").matmul == pytest.approx(
        flops / (H100_BF16 * 0.6), rel=1e-12)
    # nothing to price: no time, and no division by zero
    assert price_totals(0, 0, 0, "h100", "float32", CONSTANTS).seconds == 0


def test_a_device_or_dtype_without_a_peak_is_refused():
    with pytest.raises(InputError, match="a dtype the NVIDIA Tesla P100 SXM2 has a published peak for"):
        price_totals(1e12, 0, 0, "p100", "bfloat16", CONSTANTS)
    with pytest.raises(InputError, match="a dtype the NVIDIA Tesla P100 SXM2 has a published peak for"):
        price_table(_table(), "p100", CONSTANTS)  # its bfloat16 product
    with pytest.raises(InputError, match="a device with a published peak"):
        price_totals(1e12, 0, 0, "cpu", "float32", CONSTANTS)


def _kernel(name: str, category: str, nbytes: int | None, executions: int | None,
            product: Product | None = None) -> Kernel:
    return Kernel(name, category, "kLoop", "fusion", "main", "", nbytes, executions, product=product)


def test_kernel_table_of_a_kernel_list():
    gemm = Product(batch=4, m=512, n=256, k=1024, dtype="bfloat16", flops=2 * 4 * 512 * 256 * 1024)
    listed = [
        _kernel("gemm", "fusion", 10_000, 5, gemm),  # in a loop of 5
        _kernel("add", "fusion", 4_000, 1),
        _kernel("ar", "collective", 8_000, 1),  # priced by the communication model: left out
        _kernel("unknown", "other", None, None),  # runs unknown: once; bytes unknown: none
    ]
    table = kernel_table(listed)
    assert table.runs.tolist() == [5, 1, 1] and table.kernels == 7
    assert table.flops.tolist() == [gemm.flops, 0, 0] and table.bytes.tolist() == [10_000, 4_000, 0]
    assert (table.batch.tolist(), table.m.tolist(), table.n.tolist(), table.k.tolist()) == (
        [4, 1, 1], [512, 1, 1], [256, 1, 1], [1024, 1, 1])
    assert table.dtype == ("bfloat16", "", "")
    # price_kernels is price_table of that table, the same list asked twice or not
    once = price_kernels(listed, "h100", CONSTANTS)
    assert once == price_table(table, "h100", CONSTANTS) == price_kernels(listed, "h100", CONSTANTS)
    # the gemm: best as 4 x 8 x 4 = 128 tiles of 64 in one wave of 132, at 0.625 of the rate
    assert _best_tile(4, 512, 256) == 64
    shape = 128 / 132 * _tile_rate(64) * 1024 / (1024 + 128)
    gemm_s = max(gemm.flops / (H100_BF16 * 0.6 * shape), 10_000 / (H100_HBM * 0.75))
    assert once.matmul == pytest.approx(5 * gemm_s, rel=1e-12)
    assert once.memory == pytest.approx(4_000 / (H100_HBM * 0.75), rel=1e-12)
    # every kernel a fusion or an op of XLA's: each pays its own work or the launch, whichever is less
    # (the gemm's 5 runs the launch, the add its work, the unknown nothing), and the gap
    assert table.library.tolist() == [False, False, False]
    add_s = 4_000 / (H100_HBM * 0.75)
    assert once.launch == pytest.approx(5 * min(gemm_s, 5e-6) + min(add_s, 5e-6) + 0 + 7 * KERNEL_GAP, rel=1e-12)
    # a cuDNN call (a convolution, fused attention: kernels of its own) pays the whole launch; a cuBLAS
    # gemm is one kernel, priced as a fusion is
    cudnn = dataclasses.replace(_kernel("conv", "library", 10_000, 1, gemm), kind="__cudnn$convForward")
    cublas = dataclasses.replace(_kernel("gemm", "library", 10_000, 1, gemm), kind="__cublas$gemm")
    called = kernel_table([cudnn, cublas])
    assert called.library.tolist() == [True, False]
    assert price_table(called, "h100", CONSTANTS).launch == pytest.approx(
        5e-6 + min(gemm_s, 5e-6) + 2 * KERNEL_GAP, rel=1e-12)
