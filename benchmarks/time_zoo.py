"""Measured forward, backward and update time of zoo models, saved as CSV.

The data the reports are built from (issue 5). For every case: the counts
(compiled, loop-corrected) and the measured time of each phase on the default
device (`xla_cost.analysis.timing`: the train step as one program, its
forward / backward / update split from a profiler trace of it, the separate
programs as a cross-check), with FLOP/s, MFU and the roofline prediction; one
CSV row per case and phase, written to
``reports/data/timing_<device>_<date>.csv`` with the device name, jax version
and date in every row. Every row of a case also holds the one-program step
(``step_median_s``, ``step_low_s``, ``step_high_s``: its median and 95%
interval) and each part of the trace's split (``forward_median_s``,
``forward_low_s``, ``forward_high_s``, and so for ``backward``, ``update``,
``idle`` and ``grad``). Rows are appended as each case finishes, so an
interrupted run keeps the cases it finished.

    python benchmarks/time_zoo.py            # the GPU matrix (run it on a GPU)
    python benchmarks/time_zoo.py --reduced  # the same models at CPU-sized shapes
    python benchmarks/time_zoo.py --reduced --only conv_net

The GPU matrix: ResNet-50 at batch 32, 64, 128, 256; BERT-base at seq 128,
batch 32; GPT-2 small at seq 1024, batch 8; the four seed nets (batch 64;
DeeperConvNet at depth 100, batch 8); each in float32 and bfloat16, with SGD
and with Adam. A case that does not fit is written with its counts and the
reason it was not timed.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import re
import sys
from pathlib import Path

import jax

import xla_cost
from xla_cost.compiled import xla
from xla_cost.zoo import build_model, example_inputs

ROOT = Path(__file__).resolve().parent.parent

# (model, batch, config)
GPU_CASES = [
    *[("resnet50", b, {}) for b in (32, 64, 128, 256)],
    ("bert-base", 32, {"seq_len": 128}),
    ("gpt2-small", 8, {"seq_len": 1024}),
    ("linear_net", 64, {}),
    ("one_net", 64, {}),
    ("conv_net", 64, {}),
    ("deeper_conv_net", 8, {"depth": 100}),
]

# The same models at shapes a 2-core CPU times in seconds.
REDUCED_CASES = [
    ("resnet50", 2, {"image_size": 64}),
    ("bert-base", 4, {"seq_len": 32}),
    ("gpt2-small", 2, {"seq_len": 128}),
    ("linear_net", 8, {}),
    ("one_net", 64, {}),
    ("conv_net", 4, {"image_size": 112}),
    ("deeper_conv_net", 2, {"depth": 10, "image_size": 112}),
]

DTYPES = ("float32", "bfloat16")
OPTIMIZERS = ("sgd", "adam")
PHASES = ("forward", "backward", "grad", "update", "train_step")

SPLIT_PARTS = ("forward", "backward", "update", "idle", "grad")
"""The parts of the traced split, each with ``<part>_median_s``, ``_low_s``, ``_high_s`` columns."""

FIELDS = [
    "device", "jax_version", "date", "model", "config", "batch", "dtype", "optimizer",
    "parameters", "phase", "flops", "xla_flops", "loop_corrected", "bytes_accessed",
    "median_s", "min_s", "iqr_s", "repeats", "flops_per_s", "mfu", "roofline_s", "bound",
    "share", "backward_to_forward_time", "backward_to_forward_flops", "peak_flops_per_s",
    "peak_bandwidth", "peak_source", "skipped",
    # added with the one-program harness (the report pages read the columns above)
    "low_s", "high_s", "bytes_per_s", "source",
    "step_median_s", "step_low_s", "step_high_s", "steps_per_block", "blocks",
    *[f"{part}_{end}" for part in SPLIT_PARTS for end in ("median_s", "low_s", "high_s")],
    "traced_steps", "traced_period_s", "trace_overhead",
    "separate_median_s", "separate_low_s", "separate_high_s", "dispatch_gap_s",
    # the GPU's environment (empty on a CPU): what the step-time page's environment table reads
    "driver_version", "cuda_version", "cudnn_version", "clocks",
]


def gpu_environment() -> dict[str, str]:
    """The driver (nvidia-smi), the CUDA runtime and cuDNN jax loaded, and the SM and memory clocks
    (current / maximum, MHz) of the GPU here; empty strings where there is none or it is not known."""
    import subprocess

    found = {"driver_version": "", "cuda_version": "", "cudnn_version": "", "clocks": ""}
    if jax.default_backend() != "gpu":
        return found
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm,clocks.mem,"
                              "clocks.max.mem", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        driver, sm, sm_max, mem, mem_max = (x.strip() for x in smi.split(","))
        found.update(driver_version=driver, clocks=f"SM {sm}/{sm_max} MHz, memory {mem}/{mem_max} MHz")
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        pass
    try:
        from jax._src.lib import cuda_versions  # jax's CUDA plugin: the libraries it loaded

        def dotted(v: int) -> str:  # 12080 -> 12.8, 91000 -> 9.10.0
            return f"{v // 1000}.{v % 1000 // 10}" if v < 20000 else f"{v // 10000}.{v % 10000 // 100}.{v % 100}"

        found.update(cuda_version=dotted(cuda_versions.cuda_runtime_get_version()),
                     cudnn_version=dotted(cuda_versions.cudnn_get_version()))
    except Exception:  # noqa: BLE001 - a plugin without these calls: not recorded
        pass
    return found


ENVIRONMENT: dict[str, str] = {}
"""`gpu_environment`, read once per run, in every row."""


def rows_for(name: str, batch: int, config: dict, dtype: str, optimizer: str, today: str) -> list[dict]:
    report = xla_cost.analyze(
        build_model(name, dtype=dtype, **config), example_inputs(name, batch, dtype=dtype, **config),
        optimizer=optimizer, name=name, config=config, dtype=dtype, timed=True,
    )
    timing = report.timing
    step = timing.phases.get("train_step")
    split = timing.split
    common = {
        **ENVIRONMENT,
        "device": timing.device, "jax_version": jax.__version__, "date": today,
        "model": name, "config": ",".join(f"{k}={v}" for k, v in config.items()),
        "batch": batch, "dtype": dtype, "optimizer": optimizer,
        "parameters": report.parameters,
        "backward_to_forward_time": timing.backward_to_forward,
        "backward_to_forward_flops": report.backward_to_forward,
        "peak_flops_per_s": None if timing.peak is None else timing.peak.for_dtype(dtype),
        "peak_bandwidth": None if timing.peak is None else timing.peak.bandwidth,
        "peak_source": None if timing.peak is None else timing.peak.source,
        "skipped": timing.skipped,
        "step_median_s": None if step is None else step.median_s,
        "step_low_s": None if step is None else step.low_s,
        "step_high_s": None if step is None else step.high_s,
        "steps_per_block": None if timing.step is None else timing.step.steps_per_block,
        "blocks": None if timing.step is None else len(timing.step.block_s),
        "traced_steps": None if split is None else split.traced_steps,
        "traced_period_s": None if split is None else split.traced_period_s,
        "trace_overhead": None if split is None else split.trace_overhead,
        "dispatch_gap_s": timing.dispatch_gap_s,
    }
    for part in SPLIT_PARTS:
        spread = None if split is None else split.parts[part]
        common.update({
            f"{part}_median_s": None if spread is None else spread.seconds,
            f"{part}_low_s": None if spread is None else spread.low_s,
            f"{part}_high_s": None if spread is None else spread.high_s,
        })
    rows = []
    for phase in PHASES:
        costs, measured = report.phases[phase], timing.phases.get(phase)
        row = {
            **common, "phase": phase, "flops": costs.flops, "xla_flops": costs.xla_flops,
            "loop_corrected": costs.loop_corrected, "bytes_accessed": costs.bytes_accessed,
            "share": timing.fractions.get(phase),
        }
        if measured is not None:
            row.update({k: getattr(measured, k) for k in (
                "median_s", "min_s", "iqr_s", "repeats", "flops_per_s", "mfu", "roofline_s", "bound",
                "low_s", "high_s", "bytes_per_s", "source")})
        separate = timing.separate.get(phase)
        if separate is not None:
            row.update({"separate_median_s": separate.median_s, "separate_low_s": separate.low_s,
                        "separate_high_s": separate.high_s})
        rows.append(row)
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reduced", action="store_true", help="CPU-sized shapes")
    parser.add_argument("--only", action="append", default=[], help="run only this model (repeatable; the models run in the order given)")
    parser.add_argument("--batch", action="append", type=int, default=[], help="run only cases of this batch (repeatable)")
    parser.add_argument("--dtype", action="append", choices=DTYPES, default=[], help="run only this dtype (repeatable)")
    parser.add_argument("--optimizer", action="append", choices=OPTIMIZERS, default=[],
                        help="run only this optimizer (repeatable)")
    parser.add_argument("--case", action="append", default=[],
                        help="MODEL:BATCH, a model of the matrix at another batch (its configuration kept; "
                             "repeatable; replaces the matrix)")
    parser.add_argument("--output", default=None, help="CSV path (default reports/data/timing_<device>_<date>.csv)")
    args = parser.parse_args(argv)

    ENVIRONMENT.update(gpu_environment())
    base = REDUCED_CASES if args.reduced else GPU_CASES
    cases = [c for name in args.only for c in base if c[0] == name] if args.only else base  # --only's order
    cases = [c for c in cases if not args.batch or c[1] in args.batch]
    if args.case:
        configs = {name: config for name, _, config in base}
        try:
            cases = [(name, int(batch), configs[name]) for name, batch in (c.split(":") for c in args.case)]
        except (KeyError, ValueError):
            parser.error(f"--case expects MODEL:BATCH with MODEL one of {', '.join(configs)}, got {args.case}")
    today = datetime.date.today().isoformat()
    device = re.sub(r"[^a-z0-9]+", "-", xla.device_kind().lower()).strip("-")
    path = Path(args.output) if args.output else ROOT / "reports" / "data" / f"timing_{device}_{today}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        for name, batch, config in cases:
            for dtype in args.dtype or DTYPES:
                for optimizer in args.optimizer or OPTIMIZERS:
                    label = f"{name} b{batch} {config or ''} {dtype} {optimizer}"
                    try:
                        rows = rows_for(name, batch, config, dtype, optimizer, today)
                    except Exception as exc:  # noqa: BLE001 - one failed case must not lose the rest
                        print(f"{label}: failed: {type(exc).__name__}: {str(exc).splitlines()[0]}", flush=True)
                        continue
                    writer.writerows(rows)
                    handle.flush()
                    written += 1
                    step = {r["phase"]: r for r in rows}
                    shares = "/".join(
                        "-" if step[p]["share"] is None else f"{100 * step[p]['share']:.0f}"
                        for p in ("forward", "backward", "update")
                    )
                    ratio = rows[0]["backward_to_forward_time"]
                    counted = rows[0]["backward_to_forward_flops"]
                    first = rows[0]
                    steps = "" if first["step_median_s"] is None else (
                        f"step {1e3 * first['step_median_s']:,.3f} ms "
                        f"[{1e3 * first['step_low_s']:,.3f}, {1e3 * first['step_high_s']:,.3f}], ")
                    print(
                        f"{label}: {steps}fwd/bwd/upd % {shares}, bwd/fwd time "
                        f"{'-' if ratio is None else f'{ratio:.2f}'} vs FLOP "
                        f"{'unknown' if counted is None else f'{counted:.2f}'}"
                        + (f" (skipped: {rows[0]['skipped']})" if rows[0]["skipped"] else ""),
                        flush=True,
                    )
    print(f"{written} cases -> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
