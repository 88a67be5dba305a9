"""`calibration.MEMORY_CEILING`, recomputed from the kernel profiles it cites (issue 51).

GPT-2 small's step (batch 8, sequence 1,024, vocabulary 50,257, bfloat16) converts its float32
logits gradient to bfloat16 in one kernel of its own, ``wrapped_convert_*``, the largest
conversion of the step by far: it reads 8 x 1,024 x 50,257 float32 elements and writes as many
bfloat16 ones (2.47 GB, fifty times the H100's L2). Every profiled GPT-2 step on the H100 (three
files, eleven steps: 4 to 16 blocks, scanned or not, recomputed or not) ran it; the best of them
is the ceiling, the share of the datasheet bandwidth (the registry's) it reached.
"""

from __future__ import annotations

import csv
import pathlib

import pytest

from xla_cost.timemodel import calibration
from xla_cost.timemodel.devices import device

ROOT = pathlib.Path(__file__).resolve().parents[2]
FILES = [ROOT / "reports" / "data" / f"kernels_nvidia-h100-80gb-hbm3_2026-11-26{tail}.csv" for tail in ("", "-2", "-3")]
BATCH, SEQUENCE, VOCABULARY = 8, 1024, 50257
LOGITS_CONVERT = BATCH * SEQUENCE * VOCABULARY * (4 + 2)  # float32 read, bfloat16 written, bytes


def _shares() -> list[float]:
    """Each profiled GPT-2 step's logits conversion: bytes over its time, over the H100's bandwidth."""
    bandwidth = device("h100", has="peak").peak.bandwidth
    found = []
    for path in FILES:
        largest: dict[str, float] = {}
        with path.open() as f:
            for row in csv.DictReader(f):
                if row["case"].startswith("gpt2-small:8:bfloat16") and row["kernel"].startswith("wrapped_convert") \
                        and float(row["calls_per_step"]) == 1:
                    largest[row["case"]] = max(largest.get(row["case"], 0.0), float(row["us_per_step"]))
        found += [LOGITS_CONVERT / (us * 1e-6) / bandwidth for us in largest.values()]
    return found


def test_the_ceiling_is_the_best_share_of_the_bandwidth_a_profiled_kernel_reached():
    shares = _shares()
    assert len(shares) == 11
    assert calibration.MEMORY_CEILING == pytest.approx(max(shares), abs=5e-4)
    # the same kernel in every step within half a percent of each other: a measurement, not an outlier
    assert min(shares) > 0.995 * max(shares)
    # and the bound the fit and the pricing read
    assert calibration.BOUNDS["memory"] == (0.05, calibration.MEMORY_CEILING)
    assert calibration.MEASURED["memory"] == calibration.MEMORY_CEILING == calibration.constants().memory
