"""Jaxpr-only counting (``--counter jaxpr``) against compiled counting, timed.

Each case runs in a fresh process: a small warm-up analysis first (so that
neither mode pays for jax's own start-up), then ``analyze(counter="jaxpr")`` and
``analyze()`` on the same model, each timed once. Usage:

    python benchmarks/bench_counter.py                       # the default cases
    python benchmarks/bench_counter.py gpt2-medium:8:scan_layers=True,seq_len=1024

Cases (issue 3): the largest seed nets (LinearNet, 617M parameters; and
DeeperConvNet at depth 100, the most operations) and a 24-layer scanned
transformer stack (GPT-2 medium with ``scan_layers=True``).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

DEFAULT_CASES = [
    "linear_net:64",
    "deeper_conv_net:8:depth=100",
    "gpt2-medium:8:scan_layers=True,seq_len=1024",
]

_CHILD = r"""
import json, os, resource, sys, time
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax
import xla_cost
from xla_cost.zoo import build_model, example_inputs
name, batch, config = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
xla_cost.analyze(build_model("one_net"), example_inputs("one_net", 2), optimizer="adam")
model, inputs = build_model(name, **config), example_inputs(name, batch, **config)
t0 = time.perf_counter()
fast = xla_cost.analyze(model, inputs, optimizer="adam", per_layer=True, counter="jaxpr")
t1 = time.perf_counter()
full = xla_cost.analyze(model, inputs, optimizer="adam", per_layer=True)
t2 = time.perf_counter()
print(json.dumps({
    "parameters": full.parameters,
    "jaxpr_seconds": t1 - t0, "compiled_seconds": t2 - t1,
    "jaxpr_train_step": fast.phases["train_step"].flops,
    "compiled_train_step": full.phases["train_step"].flops,
    "xla_raw_train_step": full.phases["train_step"].xla_flops,
    "loop_corrected": full.phases["train_step"].loop_corrected,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "jax": jax.__version__, "backend": full.backend,
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
        f"{'model':<44}{'batch':>6}{'params':>14}{'jaxpr s':>9}{'compiled s':>12}{'speed-up':>10}"
        f"{'train_step TFLOP':>18}{'XLA raw':>10}{'jaxpr/best':>12}{'peak MB':>9}"
    )
    r = {}
    for case in cases:
        name, batch, config = parse(case)
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, name, str(batch), json.dumps(config)],
            capture_output=True, text=True,
        )
        if out.returncode != 0:
            print(f"{case}: failed: {out.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        label = name + ("(" + ",".join(f"{k}={v}" for k, v in config.items()) + ")" if config else "")
        print(
            f"{label:<44}{batch:>6}{r['parameters']:>14,}{r['jaxpr_seconds']:>9.2f}"
            f"{r['compiled_seconds']:>12.2f}{r['compiled_seconds'] / r['jaxpr_seconds']:>9.1f}x"
            f"{r['compiled_train_step'] / 1e12:>18.3f}{r['xla_raw_train_step'] / 1e12:>10.3f}"
            f"{r['jaxpr_train_step'] / r['compiled_train_step']:>12.4f}{r['peak_rss_bytes'] / 1e6:>9.0f}"
        )
    if r:
        print(
            f"jax {r['jax']}, backend {r['backend']}, Adam, per_layer=True. 'jaxpr s': "
            "analyze(counter=jaxpr); 'compiled s': analyze() (three programs compiled, loop-"
            "corrected); 'XLA raw': the compiled train_step before loop correction."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
