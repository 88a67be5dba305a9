"""The kernel model's matrix products against products timed on a GPU (issue 32).

`benchmarks/gemm_shapes.py` times single products (``a @ b``) by shape and
dtype on a real GPU (``reports/data/gemm_<device>_<date>.csv``). Each is
priced here as the time model prices a product kernel
(`xla_cost.timemodel.kernel_time`, one kernel): ``work = max(F / (peak * matmul *
shape), B / (bandwidth * memory))``, plus ``min(work, launch)`` and the
measured ``KERNEL_GAP``, with the committed constants, which were
fitted on whole training steps and never on these rows: a held-out check of
the shape model (tiles, waves, split contractions, depth).

Two kinds of row are reported but not held to the band:

- **dispatch-bound**: the model's kernel time is shorter than the shortest
  call measured, so the measurement shows jax's dispatch, not the kernel;
- **misaligned**: a dimension whose bytes are not a multiple of 16 (4,095,
  700); NVIDIA's GEMM guide asks for 16-byte multiples for the tensor cores'
  fast kernels, and the model has no rule for the slow ones (a known miss:
  4,095-cubed took 4.5x the 4,096-cubed time on an H200).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import numpy as np
import pandas as pd

from xla_cost.timemodel import calibration as calibrations
from xla_cost.timemodel import devices as registry
from xla_cost.timemodel import kernel_time
from xla_cost.study.plan import DATA_PATTERNS

__all__ = ["ALIGNMENT_BYTES", "GemmCheck", "check_gemms", "gemm_files"]

ALIGNMENT_BYTES = 16
"""The multiple of bytes a GEMM dimension needs for the tensor cores' fast
kernels (NVIDIA Deep Learning Performance Guide, "Matrix Multiplication
Background": dimensions in multiples of 8 for 16-bit, 4 for 32-bit types)."""

_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclasses.dataclass(frozen=True)
class GemmCheck:
    """Products timed on ``device`` and the kernel model's price of each.

    Attributes:
      device: the registry device the rows were timed on.
      source: the CSV they came from.
      rows: one row per product: ``dtype, batch, m, n, k, measured_s,
        predicted_s, error`` (predicted / measured - 1), ``shape`` (the shape
        efficiency), ``dispatch_bound``, ``misaligned``.
    """

    device: str
    source: str
    rows: pd.DataFrame

    @property
    def held(self) -> pd.DataFrame:
        """The rows held to the band: neither dispatch-bound nor misaligned."""
        return self.rows[~self.rows.dispatch_bound & ~self.rows.misaligned]


def check_gemms(path: str | pathlib.Path, constants: Any = None) -> GemmCheck:
    """The rows of a ``gemm_<device>_<date>.csv`` priced by the kernel model."""
    frame = pd.read_csv(path)
    found = registry.match_kind(str(frame.device.iloc[0]))
    if found is None or found.peak is None:
        raise ValueError(f"{path}: device {frame.device.iloc[0]!r} is not in the registry")
    constants = constants if constants is not None else calibrations.constants()
    units, side = registry.matrix_units(found.name)
    shape = kernel_time.shape_efficiency(frame.batch, frame.m, frame.n, frame.k, units, side, constants.depth)
    size = frame.dtype.map(_BYTES).to_numpy()
    peak = np.asarray([found.peak.require(d) for d in frame.dtype], dtype=np.float64)
    moved = frame.batch * (frame.m * frame.k + frame.k * frame.n + frame.m * frame.n) * size
    kernel = np.maximum(frame.flops / (peak * constants.matmul * shape),
                        moved / (found.peak.bandwidth * constants.memory))
    predicted = kernel + np.minimum(kernel, constants.launch) + kernel_time.KERNEL_GAP  # one kernel (kernel_time)
    aligned = np.ones(len(frame), dtype=bool)
    for dim in ("m", "n", "k"):
        aligned &= (frame[dim] * size) % ALIGNMENT_BYTES == 0
    rows = pd.DataFrame({
        "dtype": frame.dtype, "batch": frame.batch, "m": frame.m, "n": frame.n, "k": frame.k,
        "measured_s": frame.median_s, "predicted_s": predicted, "error": predicted / frame.median_s - 1,
        "shape": shape, "dispatch_bound": kernel < frame.median_s.min(), "misaligned": ~aligned,
    })
    return GemmCheck(found.name, str(path), rows)


def gemm_files(data_dir: str | pathlib.Path) -> list[pathlib.Path]:
    """The committed ``gemm_*.csv`` files of ``data_dir``, by name."""
    return sorted(pathlib.Path(data_dir).glob(DATA_PATTERNS["gemm"]))
