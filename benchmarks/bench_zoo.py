"""Time and peak memory of a full `analyze()` on research-scale zoo models.

Each case runs in a fresh process (peak resident memory, ru_maxrss, is the
case's own) with the defaults of the CLI: Adam, compiled, loop-corrected.
Usage:

    python benchmarks/bench_zoo.py                          # the default cases
    python benchmarks/bench_zoo.py gpt3-175b:1:seq_len=2048

Target (issue 4): gpt3-175b at batch 1 x 2048 tokens with Adam on a 2-core CPU
under 4 GB peak resident memory; its parameters alone would be 698 GB.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

DEFAULT_CASES = [
    "resnet50:32",
    "bert-base:32:seq_len=128",
    "gpt2-xl:8:scan_layers=True",
    "gpt3-175b:1:seq_len=2048",
]

_CHILD = r"""
import json, os, resource, sys, time
os.environ.setdefault("JAX_PLATFORMS", "cpu")
t_start = time.perf_counter()
import jax
import xla_cost
from xla_cost.zoo import build_model, example_inputs
name, batch, config = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
t0 = time.perf_counter()
report = xla_cost.analyze(build_model(name, **config), example_inputs(name, batch, **config),
                          optimizer="adam", name=name, config=config)
seconds = time.perf_counter() - t0
step = report.phases["train_step"]
print(json.dumps({
    "parameters": report.parameters, "seconds": seconds,
    "import_seconds": t0 - t_start,
    "train_step_flops": step.flops, "xla_raw": step.xla_flops,
    "loop_corrected": step.loop_corrected,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "jax": jax.__version__, "backend": report.backend,
}))
"""


def parse(case: str) -> tuple[str, int, dict]:
    name, batch, *rest = case.split(":")
    config = {}
    for item in (rest[0].split(",") if rest else []):
        key, value = item.split("=")
        config[key] = ast.literal_eval(value)
    return name, int(batch), config


def main(argv: list[str]) -> int:
    cases = argv or DEFAULT_CASES
    print(
        f"{'model':<36}{'batch':>6}{'parameters':>18}{'weights GB':>12}{'analyze s':>11}"
        f"{'peak RSS MB':>13}{'train_step TFLOP':>18}{'loop-corrected':>16}"
    )
    r: dict = {}
    for case in cases:
        name, batch, config = parse(case)
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, name, str(batch), json.dumps(config)],
            capture_output=True, text=True, check=False,
        )
        if out.returncode != 0:
            print(f"{case}: failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        label = name + ("(" + ",".join(f"{k}={v}" for k, v in config.items()) + ")" if config else "")
        print(
            f"{label:<36}{batch:>6}{r['parameters']:>18,}{4 * r['parameters'] / 1e9:>12.1f}"
            f"{r['seconds']:>11.1f}{r['peak_rss_bytes'] / 1e6:>13.0f}"
            f"{r['train_step_flops'] / 1e12:>18.2f}{'yes' if r['loop_corrected'] else 'no':>16}"
        )
    if r:
        print(
            f"jax {r['jax']}, backend {r['backend']}, Adam. 'analyze s': one analyze() call "
            "(trace, count, compile four phases), after imports; 'weights GB': float32 "
            "parameters, never allocated."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
