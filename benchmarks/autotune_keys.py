"""Why a deviceless compile cannot find the real GPU's cuDNN autotuning results (issue 31).

XLA's autotuner keys a result by the device, the codegen version and a
fingerprint of the instruction's text at the moment it is autotuned. Loading a
real H100 compile's record into the deviceless compile of the same ResNet-50
step finds every fusion's result and none of the 64 cuDNN convolutions'
(reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-5.json), so the
convolutions' text differs between the two compiles when they are autotuned.

This compiles ResNet-50's train step (batch 32, bfloat16 images into float32 parameters, SGD with momentum:
`device_check.resnet_step`) for the GPU here and for the registry's deviceless
target of it, each with XLA's per-pass HLO dump, and keeps, for each compile,
the convolution custom calls' text at every pass that changed it (names and
metadata removed, so that only what the fingerprint can differ on is compared).
Run on the GPU machine (on a machine without one, ``--deviceless-only``)::

    python benchmarks/autotune_keys.py --out DIR

Writes ``autotune_keys_<device>_<date>.json`` into DIR.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import xla_cost  # noqa: F401 - first: jax's plugins start quietly

import jax  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import device_check  # noqa: E402
from xla_cost.compiled import targets, xla  # noqa: E402
from xla_cost.timemodel import devices  # noqa: E402

CONV = re.compile(r'custom_call_target="__cudnn\$conv')
NAME = re.compile(r"^\s*(ROOT\s+)?%?[\w.\-]+\s*=\s*")
METADATA = re.compile(r",?\s*metadata=\{[^}]*\}")
OPERAND_NAMES = re.compile(r"%([\w.\-]+)")
DEFINITION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\S+)\s")


def _canonical(line: str, shapes: dict[str, str]) -> str:
    """An instruction's text without its name and metadata, each operand by its
    shape and layout instead of its name: what a canonical print (the
    autotuner's fingerprint) keeps."""
    body = METADATA.sub("", NAME.sub("", line.strip()))
    return OPERAND_NAMES.sub(lambda m: shapes.get(m.group(1), "?"), body)


def conv_states(dump: Path) -> list[dict[str, object]]:
    """The convolutions' text after each pass that changed it, in pass order."""
    states: list[dict[str, object]] = []
    previous: list[str] | None = None
    for path in sorted(dump.glob("module_*.txt")):
        if "jit_step" not in path.name or "buffer-assignment" in path.name:
            continue
        lines = path.read_text(errors="replace").splitlines()
        shapes = {m.group(1): m.group(2) for m in map(DEFINITION.match, lines) if m}
        convs = sorted(_canonical(line, shapes) for line in lines if CONV.search(line))
        if convs == previous:
            continue
        previous = convs
        states.append({"after": path.name.split(".", 3)[-1], "convolutions": len(convs),
                       "digest": hashlib.sha256("\n".join(convs).encode()).hexdigest()[:16], "text": convs})
    return states


def compile_dumped(step: object, args: tuple, label: str, work: Path) -> dict[str, object]:
    dump = work / label
    options = {"xla_dump_to": str(dump), "xla_dump_hlo_as_text": True, "xla_dump_hlo_pass_re": ".*"}
    start = time.perf_counter()
    jax.jit(step).lower(*args).compile(compiler_options=options)
    seconds = time.perf_counter() - start
    states = conv_states(dump)
    passes = sorted(p.name.split(".", 3)[-1] for p in dump.glob("module_*jit_step*.txt"))
    shutil.rmtree(dump, ignore_errors=True)
    return {"compile_s": round(seconds, 1), "passes": passes, "states": states}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--target", default=None, help="the registry's target (default: the GPU here)")
    parser.add_argument("--deviceless-only", action="store_true")
    args = parser.parse_args(argv)
    name = args.target
    if name is None:
        entry = devices.match_kind(xla.device_kind())
        if entry is None or entry.gpu is None:
            print(f"autotune_keys: {xla.device_kind()!r} is not a GPU of the registry; pass --target", file=sys.stderr)
            return 2
        name = entry.name
    result: dict[str, object] = {"jax": jax.__version__, "device": xla.device_kind(), "target": name,
                                 "date": datetime.date.today().isoformat()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if not args.deviceless_only:
            step, shapes = device_check.resnet_step(None)
            result["real"] = compile_dumped(step, shapes, "real", work)
        target = devices.target(name) if args.deviceless_only else device_check.with_device_dnn(devices.target(name))
        with targets.use(target):
            step, shapes = device_check.resnet_step(target.placement())
            result["deviceless"] = compile_dumped(step, shapes, "deviceless", work)
    stamp = "".join(c if c.isalnum() else "-" for c in str(result["device"]).lower()).strip("-")
    path = Path(args.out) / f"autotune_keys_{stamp}_{result['date']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    for label in ("real", "deviceless"):
        if label in result:
            print(label, [(s["after"], s["convolutions"], s["digest"]) for s in result[label]["states"]])
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
