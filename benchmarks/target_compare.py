"""The CPU proxy against the targets' own compilers (issue 31): the data of reports/targets.md.

ResNet-50 (batch 32), BERT-base (sequence 128, batch 32) and GPT-2 small
(sequence 1024, batch 8), bfloat16, Adam, ``memory=True``: each step analysed
once for the CPU (the proxy, jax's default backend here) and once for each
target, compiled deviceless by its own compiler (`xla_cost.analyze(...,
target=...)`): an H100, an A100 80GB, a V100 32GB (jax's CUDA plugin) and one
TPU v5e chip (libtpu). Every program is compiled (the persistent compilation
cache off). Writes ``reports/data/targets_<date>.csv``, one row per model x
target x phase (``cpu`` is a target's name there too): FLOP, the jaxpr's FLOP,
bytes accessed, kernel launches, library calls, the programs' arguments and
temporaries, the step's peak (train_step rows), the analysis's wall seconds
(trace, compile and memory breakdown of the whole step; the same on each
phase row of a run), and the environment (jax, jaxlib, the plugins' versions,
cores, date, command). The file is rewritten after every run, so a stopped
run keeps what it finished; a run that fails is a row with its error.

    python benchmarks/target_compare.py                      # everything (tens of minutes on 2 cores)
    python benchmarks/target_compare.py --models resnet50 --targets h100 tpu-v5e
    python benchmarks/target_compare.py --gpt2-seq 512       # a shorter GPT-2 sequence
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.metadata
import os
import sys
import time
from pathlib import Path

os.environ["XLA_COST_NO_CACHE"] = "1"  # compile every program: the compile seconds are a first analysis's

import xla_cost  # noqa: E402  (prepares the plugins before jax starts)
from xla_cost.analysis.compare import phase_figures  # noqa: E402
from xla_cost.runs.configs import RunConfig  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

MODELS: dict[str, tuple[int, dict[str, int]]] = {
    "resnet50": (32, {}),
    "bert-base": (32, {"seq_len": 128}),
    "gpt2-small": (8, {"seq_len": 1024}),
}
"""Each model: (batch, model settings)."""

TARGETS = ("h100", "a100-80gb", "v100-32gb", "tpu-v5e")
"""The compile targets besides the CPU (``tpu-v5e``: one chip)."""

DTYPE, OPTIMIZER = "bfloat16", "adam"

FIELDS = [
    "model", "config", "batch", "dtype", "optimizer", "target", "platform", "device", "phase", "flops",
    "jaxpr_flops", "bytes_accessed", "kernels", "library_calls", "argument_bytes", "temp_bytes", "peak_bytes",
    "seconds", "status", "error", "jax_version", "jaxlib_version", "cuda_plugin_version", "libtpu_version",
    "xla_cost_version", "cores", "date", "command",
]


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment(command: str) -> dict[str, str]:
    """The columns every row repeats: versions, cores, date, command."""
    import jax
    import jaxlib

    return {
        "jax_version": jax.__version__, "jaxlib_version": jaxlib.__version__,
        "cuda_plugin_version": _version("jax-cuda12-plugin"), "libtpu_version": _version("libtpu"),
        "xla_cost_version": xla_cost.__version__, "cores": str(os.cpu_count()),
        "date": datetime.date.today().isoformat(), "command": command,
    }


def rows_of(model: str, config: dict[str, int], batch: int, target: str, env: dict[str, str]) -> list[dict]:
    """One run's rows: every phase, or one row with the error."""
    from xla_cost.compiled import xla
    from xla_cost.timemodel import devices

    base = {"model": model, "config": ",".join(f"{k}={v}" for k, v in config.items()), "batch": batch,
            "dtype": DTYPE, "optimizer": OPTIMIZER, "target": target, **env}
    start = time.perf_counter()
    try:
        report = RunConfig(model, batch, config, optimizer=OPTIMIZER, dtype=DTYPE).run(
            memory=True, compilation_cache=False, **({} if target == "cpu" else {"target": target}))
    except Exception as exc:  # noqa: BLE001 - a target that fails is a row saying why
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        return [{**base, "status": "error", "error": f"{type(exc).__name__}: {first}",
                 "seconds": f"{time.perf_counter() - start:.1f}"}]
    seconds = f"{time.perf_counter() - start:.1f}"
    device = xla.device_kind() if target == "cpu" else devices.target(target).title
    return [{**base, "platform": report.backend, "device": device, "phase": phase,
             **{k: ("" if v is None else v) for k, v in phase_figures(report, phase).items()},
             "seconds": seconds, "status": "ok", "error": ""} for phase in report.phase_names]


def write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--targets", nargs="+", default=list(TARGETS))
    parser.add_argument("--gpt2-seq", type=int, default=None, help="GPT-2 small's sequence (default 1024)")
    parser.add_argument("--out", default=None, help="the CSV (default reports/data/targets_<date>.csv)")
    args = parser.parse_args(argv)
    command = " ".join(["python benchmarks/target_compare.py", *argv])
    env = environment(command)
    path = Path(args.out) if args.out else ROOT / "reports" / "data" / f"targets_{env['date']}.csv"
    rows: list[dict] = []
    for model in args.models:
        batch, config = MODELS[model]
        if model == "gpt2-small" and args.gpt2_seq is not None:
            config = {**config, "seq_len": args.gpt2_seq}
        for target in ("cpu", *args.targets):
            found = rows_of(model, config, batch, target, env)
            rows += found
            write(path, rows)
            print(f"{model} {target}: {found[0]['status']} {found[0]['seconds']} s"
                  + (f" {found[0]['error']}" if found[0]["status"] != "ok" else ""), flush=True)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
