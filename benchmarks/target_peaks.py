"""A train step compiled for a GPU target, without the GPU, at the batches given: its final peak.

The peak a step's buffers take once XLA has compiled it (arguments + outputs +
temporaries - aliased, `device_check.final_peak`) decides whether it runs on the
device: JAX's allocator refuses a program whose buffers pass its limit
(`CompileTarget.memory_bytes` x its fraction), whatever XLA's rematerialization
logged on the way. The step is compiled twice per batch, as the target's compiler
builds it by default (Triton matrix products) and with cuBLAS products
(`CompileTarget.memory_options`, the program `fit` judges a GPU target's memory
by where it rematerializes). docs/memory.md compares these peaks with the ones
real GPUs compiled (reports/data/device_check_*.json)::

    python benchmarks/target_peaks.py h200 gpt2-small bfloat16 adam 111,113
    python benchmarks/target_peaks.py h100 bert-base bfloat16 adam 980,1000 --cublas
"""

from __future__ import annotations

import argparse
import sys
import time

from device_check import final_peak, train_step_lowered  # noqa: E402  (the same step device_check runs)

import jax  # noqa: E402
from xla_cost.compiled import targets  # noqa: E402
from xla_cost.timemodel import devices  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a GPU of the registry: h100, h200, a100-80gb, ...")
    parser.add_argument("model")
    parser.add_argument("dtype")
    parser.add_argument("optimizer")
    parser.add_argument("batches", help="comma-separated")
    parser.add_argument("--cublas", action="store_true", help="only the program with cuBLAS products")
    args = parser.parse_args(argv)
    target = devices.target(args.target)
    if target.gpu is None:
        raise SystemExit(f"target_peaks: expected a GPU target, got {args.target!r}; name one of the registry's GPUs")
    limit = target.memory_bytes * target.memory_fraction
    programs = [("cublas", target.memory_options)] if args.cublas else [("triton", {}), ("cublas", target.memory_options)]
    print(f"{target.name}: {args.model} {args.dtype} {args.optimizer}; the allocator's limit {limit / 1e9:.2f} GB")
    for batch in (int(b) for b in args.batches.split(",")):
        with targets.use(target):
            lowered, _ = train_step_lowered(args.model, batch, args.dtype, args.optimizer, target.placement())
            for label, options in programs:
                start = time.perf_counter()
                peak = final_peak(lowered.compile(compiler_options=options))
                print(f"batch {batch} {label}: {peak / 1e9:.2f} GB ({peak:,} bytes), "
                      f"{'under' if peak <= limit else 'over'} the limit; compiled in {time.perf_counter() - start:.1f} s",
                      flush=True)
        jax.clear_caches()
    return 0


if __name__ == "__main__":
    sys.exit(main())
