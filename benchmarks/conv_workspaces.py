"""The cuDNN convolutions' workspaces a real GPU compile gives a train step, next to the
deviceless compile of the same step (issue 31: why `fit --target` over-answers a
convolutional network).

A deviceless GPU compile cannot autotune, so XLA's convolution algorithm picker leaves
every ``__cudnn$conv*`` call without a workspace (its result tuple ends in ``u8[0]``);
the real compile gives each the scratch space of the algorithm its autotuner chose. Per
case (model, batch, dtype, optimizer; the step as `fit` sizes it,
``device_check.train_step_lowered``) this compiles the step on the GPU and for the
registry's target of it, and writes:

* per case (the CSV, one row each, with the environment: device, jax, date, driver,
  CUDA, cuDNN): both programs' final peaks (arguments + outputs + temporaries -
  aliases), the largest convolution's operands and result (`fit`'s allowance,
  `xla_cost.compiled.hlo.unsized_conv_scratch`), the largest and the summed
  workspace, the number of convolutions;
* per convolution of the real program (the JSON's ``convolutions``): its target,
  operand and result shapes, the size of its operands and result, and its workspace.

The deviceless compile is made with the target's ``memory_options`` (matrix products as
cuBLAS calls), the program `fit` judges a batch by where the compiler rematerializes;
where it does not, `fit` reads the default (Triton products) program. For the
convolutional networks the two differ little (one matrix product, the classifier);
for ViT-B/16 (batch 64) the real peak was 12% above this cuBLAS program's, which is
not its one convolution's workspace (55 MB of the 897 MB).

Run on the GPU machine from /tmp (the installed package is imported)::

    python3 REPO/benchmarks/conv_workspaces.py --out DIR resnet50:299:bfloat16:sgd resnet18:256:bfloat16:sgd

Writes ``conv_workspaces_<device>_<date>.csv`` (one row per case; the memory page reads
it) and ``.json`` (the environment, the cases and every convolution) into ``--out``,
each case as it ends.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import device_check  # noqa: E402  (imports xla_cost first: jax's plugins start quietly)
from time_zoo import gpu_environment  # noqa: E402
import jax  # noqa: E402
from xla_cost.compiled import hlo, shapes, targets, xla  # noqa: E402
from xla_cost.timemodel import devices  # noqa: E402


def convolutions(hlo_text: str) -> list[dict[str, object]]:
    """Every cuDNN convolution call of an optimized module: target, shapes, workspace."""
    module = hlo.parse_module(hlo_text)
    rows = []
    for computation in module.computations.values():
        named = {i.name: i.shape_text for i in computation.instructions}
        for instruction in computation.instructions:
            target = hlo.library_call_target(instruction)
            if target is None or not target.startswith("__cudnn$conv"):
                continue
            result = shapes.parse_shape(instruction.shape_text)
            leaves = shapes.shape_leaves(result) if result is not None else []
            scratch = leaves[-1] if leaves and leaves[-1].dtype == "u8" else None
            operands = [named.get(name, "?") for name in instruction.operand_names()]
            rows.append({
                "target": target,
                "operands": " ; ".join(operands),
                "result": instruction.shape_text,
                "operand_bytes": sum(_bytes(text) for text in operands),
                "output_bytes": sum(leaf.nbytes() or 0 for leaf in leaves[:-1]) if scratch is not None else None,
                "workspace_bytes": scratch.nbytes() if scratch is not None else None,
            })
    return rows


def _bytes(text: str) -> int:
    shape = shapes.parse_shape(text)
    return (shapes.shape_bytes(shape) or 0) if shape is not None else 0


def case(spec: str) -> tuple[str, int, str, str]:
    """MODEL:BATCH[:DTYPE[:OPTIMIZER]], bfloat16 and SGD unless given."""
    parts = spec.split(":")
    if len(parts) < 2 or not parts[1].isdigit():
        raise SystemExit(f"conv_workspaces: expected MODEL:BATCH[:DTYPE[:OPTIMIZER]], got {spec!r}")
    model, batch, dtype, optimizer = (parts + ["bfloat16", "sgd"][len(parts) - 2:])[:4]
    return model, int(batch), dtype, optimizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", help="MODEL:BATCH[:DTYPE[:OPTIMIZER]] (default bfloat16, sgd)")
    parser.add_argument("--out", default=".")
    args = parser.parse_args(argv)
    entry = devices.match_kind(xla.device_kind())
    if entry is None or entry.gpu is None:
        raise SystemExit(f"conv_workspaces: {xla.device_kind()!r} is not a GPU compile target of the registry")
    stamp = f"{xla.device_kind().lower().replace(' ', '-')}_{time.strftime('%Y-%m-%d')}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_path, cases_path = out / f"conv_workspaces_{stamp}.csv", out / f"conv_workspaces_{stamp}.json"
    stats = jax.devices()[0].memory_stats() or {}
    env = device_check.environment()
    columns = {"device": env["device"], "jax_version": env["jax"], "date": env["date"], **gpu_environment()}
    result: dict[str, object] = {"environment": env, "bytes_limit": stats.get("bytes_limit"), "cases": [],
                                 "convolutions": []}
    target = devices.target(entry.name)
    fraction = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    if fraction:
        target = dataclasses.replace(target, memory_fraction=float(fraction))
    for spec in args.cases:
        model, batch, dtype, optimizer = case(spec)
        start = time.perf_counter()
        lowered, _ = device_check.train_step_lowered(model, batch, dtype, optimizer, None)
        real = lowered.compile()
        real_s = time.perf_counter() - start
        convs = convolutions(real.as_text())
        with targets.use(target):
            lowered, _ = device_check.train_step_lowered(model, batch, dtype, optimizer, target.placement())
            deviceless = lowered.compile(compiler_options=target.memory_options)
        deviceless_convs = convolutions(deviceless.as_text())
        workspaces = [r["workspace_bytes"] or 0 for r in convs]
        row = {**columns, "model": model, "batch": batch, "dtype": dtype, "optimizer": optimizer,
               "real_peak_bytes": device_check.final_peak(real),
               "real_temp_bytes": real.memory_analysis().temp_size_in_bytes,
               "deviceless_peak_bytes": device_check.final_peak(deviceless),
               "deviceless_temp_bytes": deviceless.memory_analysis().temp_size_in_bytes,
               "convolutions": len(convs), "deviceless_convolutions": len(deviceless_convs),
               "deviceless_workspace_bytes": sum(r["workspace_bytes"] or 0 for r in deviceless_convs),
               "allowance_bytes": hlo.unsized_conv_scratch(deviceless.as_text()),
               "largest_workspace_bytes": max(workspaces, default=0), "summed_workspace_bytes": sum(workspaces),
               "compile_s": round(real_s, 1)}
        result["cases"].append(row)
        print(json.dumps(row), flush=True)
        result["convolutions"].extend({"model": model, "batch": batch, "dtype": dtype, "optimizer": optimizer, **r}
                                      for r in convs)
        with rows_path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(row))
            writer.writeheader()
            writer.writerows(result["cases"])
        cases_path.write_text(json.dumps(result, indent=1) + "\n")
        del real, deviceless
        jax.clear_caches()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
