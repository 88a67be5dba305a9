"""Measured time of matrix products by shape and dtype on the GPU here (issue 32).

The kernel model (`xla_cost.timemodel.kernel_time`) prices a product from its
shape: output tiles padded, waves over the SMs, ``k / (k + depth)``. This
measures the products it must get right, each as its own jitted program
(``a @ b``, batched where ``batch`` > 1): squares from 512 to 8192, GPT-2
small's projections at 8 x 1,024 tokens and their weight gradients, skinny
(few rows), shallow (small k) and ragged (not a multiple of any tile) shapes,
attention's batched score and value products, in bfloat16 and float32 (jax's
default precision). Each is timed as the median of five blocks of calls
dispatched back to back (each block at least 20 ms; a call shorter than the
dispatch shows the dispatch). One CSV row per product, with the device, the
driver, CUDA, cuDNN and clocks (`time_zoo.gpu_environment`), jax's version
and the date in every row::

    python benchmarks/gemm_shapes.py --out reports/data

The rows are checked against the kernel model's prediction for the device in
tests/study/test_gemm_check.py (the constants were never fitted on them).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import re
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from xla_cost.compiled import xla

sys.path.insert(0, str(Path(__file__).resolve().parent))
from time_zoo import gpu_environment  # noqa: E402 - the timing's GPU environment columns, one reader of them

ROOT = Path(__file__).resolve().parent.parent

TOKENS = 8 * 1024
"""GPT-2 small's tokens per step in the H100 timing (batch 8, seq 1,024)."""

# (batch, m, n, k)
SHAPES = [
    *[(1, s, s, s) for s in (512, 1024, 2048, 4096, 8192)],
    # GPT-2 small (d 768, d_ff 3,072): QKV, out, MLP up and down; their weight gradients (k = tokens)
    (1, TOKENS, 2304, 768), (1, TOKENS, 768, 768), (1, TOKENS, 3072, 768), (1, TOKENS, 768, 3072),
    (1, 768, 2304, TOKENS), (1, 768, 3072, TOKENS),
    # skinny: few rows against a large weight
    (1, 16, 8192, 8192), (1, 64, 8192, 8192), (1, 256, 8192, 8192),
    # shallow: small contractions
    (1, 8192, 8192, 64), (1, 8192, 8192, 128), (1, 8192, 8192, 512),
    # ragged: no tile divides them
    (1, 1000, 1000, 1000), (1, 4095, 4095, 4095), (1, 3000, 5000, 700),
    # attention, 8 x 12 heads of 64 at 1,024 tokens: scores and values
    (96, 1024, 1024, 64), (96, 1024, 64, 1024),
]
FLOAT32 = [(1, s, s, s) for s in (1024, 4096, 8192)] + [(1, TOKENS, 3072, 768), (1, 768, 3072, TOKENS),
                                                         (96, 1024, 1024, 64)]
FIELDS = ["device", "driver_version", "cuda_version", "cudnn_version", "clocks", "jax_version", "date", "dtype", "batch", "m", "n", "k", "flops",
          "median_s", "low_s", "high_s", "calls_per_block", "tflops_per_s"]
BLOCK_S = 0.02


def time_product(batch: int, m: int, n: int, k: int, dtype: str) -> dict[str, float]:
    """The median seconds of one ``a @ b`` of these shapes, over five blocks of back-to-back calls."""
    lead = (batch,) if batch > 1 else ()
    a = jax.random.normal(jax.random.key(0), (*lead, m, k), dtype)
    b = jax.random.normal(jax.random.key(1), (*lead, k, n), dtype)
    product = jax.jit(jnp.matmul)
    for _ in range(3):
        out = product(a, b)
    out.block_until_ready()
    start = time.perf_counter()
    product(a, b).block_until_ready()
    calls = max(1, int(BLOCK_S / max(time.perf_counter() - start, 1e-6)))
    blocks = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            out = product(a, b)
        out.block_until_ready()
        blocks.append((time.perf_counter() - start) / calls)
    return {"median_s": statistics.median(blocks), "low_s": min(blocks), "high_s": max(blocks),
            "calls_per_block": calls}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "reports" / "data"), help="folder of the CSV")
    args = parser.parse_args(argv)
    if jax.default_backend() != "gpu":
        print(f"gemm_shapes: needs a GPU (jax's default backend is {jax.default_backend()})", file=sys.stderr)
        return 2
    today = datetime.date.today().isoformat()
    device = xla.device_kind()
    name = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    path = Path(args.out) / f"gemm_{name}_{today}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    common = {"device": device, **gpu_environment(), "jax_version": jax.__version__, "date": today}
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        for dtype, shapes in (("bfloat16", SHAPES), ("float32", FLOAT32)):
            for batch, m, n, k in shapes:
                flops = 2.0 * batch * m * n * k
                row = {**common, "dtype": dtype, "batch": batch, "m": m, "n": n, "k": k, "flops": flops,
                       **time_product(batch, m, n, k, dtype)}
                row["tflops_per_s"] = flops / row["median_s"] / 1e12
                writer.writerow(row)
                handle.flush()
                print(f"{dtype} {batch}x{m}x{n}x{k}: {1e6 * row['median_s']:.1f} us, "
                      f"{row['tflops_per_s']:.1f} TFLOP/s", flush=True)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
