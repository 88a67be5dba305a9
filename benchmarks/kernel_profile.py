"""Each GPU kernel of a train step, timed by the profiler: where the time model's kernel prices miss.

Run on a machine with an NVIDIA GPU (issue 32: the time model checked kernel by kernel)::

    python benchmarks/kernel_profile.py --out DIR [--case conv_net:64:bfloat16:adam ...]

For each case the train step (`xla_cost.build_workload`, parameters and
optimizer state donated, as the timing harness runs it) is compiled for the
GPU here, run a few times, then ``--steps`` steps are recorded under
``jax.profiler.trace``. Every complete event on a GPU stream of the trace
(the kernels CUPTI saw, cuDNN's and cuBLAS's own included) is summed by
kernel name and by the HLO instruction the event names where it names one
(``hlo_op``), divided by the steps. Written into ``--out``:

- ``kernels_<device>_<date>.csv``: case, kernel, hlo_op, calls per step,
  microseconds per step, with the environment in every row;
- ``kernels_<device>_<date>_<case>.hlo.gz``: the compiled program's text, whose
  instruction names the ``hlo_op`` column uses (to join with this project's
  kernel list of the same program compiled deviceless);
- ``kernels_<device>_<date>_trace_format.json``: the trace's process and
  thread names and a few raw events of each kind, so that a reader of the CSV
  can see what was summed.

Then each layer of conv_net (seed 001's small CNN) is timed alone, forward
and both gradients, so that a slow kernel of its step is named even where the
profiler records nothing (``--layers``).
"""

from __future__ import annotations

import argparse
import collections
import csv
import datetime
import glob
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import xla_cost  # first: jax's plugins start quietly (xla_cost.plugins)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from xla_cost.compiled import xla  # noqa: E402
from xla_cost.step import phases  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_CASES = (
    "conv_net:64:bfloat16:adam",
    "gpt2-small:8:bfloat16:adam",
    "gpt2-small:8:bfloat16:adam:scan_layers=true",
    "deeper_conv_net:8:bfloat16:adam",
    "conv_net:64:float32:adam",
    "one_net:64:bfloat16:adam",
    "resnet50:32:bfloat16:adam",
)
"""model:batch:dtype:optimizer[:key=value,...] (the model's fields), most wanted first: conv_net,
which the held-out validation misses most; GPT-2 small unrolled and scanned (the scan defect: is a
scanned layer slower than an unrolled one on the device?); then the other misses."""

FIELDS = ("device", "jax_version", "date", "case", "kernel", "hlo_op", "calls_per_step", "us_per_step",
          "step_us", "steps")


def _random(shapes: Any, key: jax.Array) -> Any:
    """Arrays of ``shapes``: small normals, integers in {0, 1} (a label, a token id, a count)."""
    leaves, treedef = jax.tree.flatten(shapes)
    out = []
    for leaf, k in zip(leaves, jax.random.split(key, max(len(leaves), 1))):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            out.append((0.02 * jax.random.normal(k, leaf.shape, jnp.float32)).astype(leaf.dtype))
        elif jnp.issubdtype(leaf.dtype, jnp.integer):
            out.append(jax.random.randint(k, leaf.shape, 0, 2, leaf.dtype))
        else:
            out.append(jnp.zeros(leaf.shape, leaf.dtype))
    return jax.tree.unflatten(treedef, out)


def _config(text: str) -> dict[str, Any]:
    """``key=value,...`` as model fields: integers, true/false, else strings."""
    found: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, value = item.split("=", 1)
        found[key] = {"true": True, "false": False}.get(value.lower(), int(value) if value.isdigit() else value)
    return found


def _step(model: str, batch: int, dtype: str, optimizer: str, config: dict[str, Any]
          ) -> tuple[Any, list[Any], dict[int, int]]:
    """The train step compiled for the GPU, real arguments, and which result feeds which argument."""
    built, inputs, _, _, _ = xla_cost.RunConfig(model, batch, config, optimizer=optimizer, dtype=dtype).build()
    workload, _ = xla_cost.build_workload(built, inputs, optimizer=optimizer)
    declared = phases.phase("train_step")
    fed = {i: declared.results.index(n) for i, n in enumerate(declared.arguments) if n in declared.results}
    with workload.tracing():
        shapes = workload.phase_args("train_step")
        compiled = jax.jit(workload.phase_fn("train_step"), donate_argnums=tuple(sorted(fed))).lower(*shapes).compile()
    return compiled, list(_random(shapes, jax.random.key(0))), fed


def _run(compiled: Any, args: list[Any], fed: dict[int, int], steps: int) -> None:
    out = None
    for _ in range(steps):
        out = compiled(*args)
        for position, result in fed.items():
            args[position] = out[result]
    jax.block_until_ready(out)


def _trace(compiled: Any, args: list[Any], fed: dict[int, int], steps: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="kernel_profile_") as directory:
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
        with jax.profiler.trace(directory, profiler_options=options):
            _run(compiled, args, fed, steps)
        found = sorted(glob.glob(os.path.join(directory, "**", "*.trace.json.gz"), recursive=True))
        if not found:
            raise RuntimeError(f"the profiler wrote no *.trace.json.gz under {directory}")
        with gzip.open(found[-1], "rt", encoding="utf-8") as handle:
            data = json.load(handle)
    return data.get("traceEvents", []) if isinstance(data, dict) else data


def _names(events: list[dict[str, Any]]) -> tuple[dict[Any, str], dict[Any, str]]:
    processes, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            processes[e.get("pid")] = str((e.get("args") or {}).get("name", ""))
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e.get("pid"), e.get("tid"))] = str((e.get("args") or {}).get("name", ""))
    return processes, threads


def _on_gpu(process: str) -> bool:
    return "/device:GPU" in process or process.startswith("GPU") or "gpu" in process.lower() and "host" not in process.lower()


def profile(case: str, steps: int, out: Path, stamp: str, common: dict[str, Any], formats: dict[str, Any]) -> list[dict]:
    model, batch, dtype, optimizer, *config = case.split(":")
    compiled, args, fed = _step(model, int(batch), dtype, optimizer, _config(config[0] if config else ""))
    text = compiled.as_text() or ""
    with gzip.open(out / f"kernels_{stamp}_{case.replace(':', '-').replace('=', '-').replace(',', '-')}.hlo.gz", "wt", encoding="utf-8") as handle:
        handle.write(text)
    _run(compiled, args, fed, 5)
    start = time.perf_counter()
    _run(compiled, args, fed, steps)
    step_us = (time.perf_counter() - start) / steps * 1e6
    events = _trace(compiled, args, fed, steps)
    processes, threads = _names(events)
    sums: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for e in events:
        if e.get("ph") != "X" or not _on_gpu(processes.get(e.get("pid"), "")):
            continue
        a = e.get("args") or {}
        key = (str(e.get("name", "")), str(a.get("hlo_op", "")))
        sums[key][0] += 1
        sums[key][1] += float(e.get("dur", 0.0))
    if case not in formats:
        gpu = [e for e in events if e.get("ph") == "X" and _on_gpu(processes.get(e.get("pid"), ""))]
        host = [e for e in events if e.get("ph") == "X" and "hlo_op" in (e.get("args") or {})
                and not _on_gpu(processes.get(e.get("pid"), ""))]
        formats[case] = {"processes": {str(k): v for k, v in processes.items()},
                         "threads": {str(k): v for k, v in list(threads.items())[:60]},
                         "gpu_events": gpu[:25], "host_hlo_events": host[:10], "events": len(events)}
    rows = [{**common, "case": case, "kernel": k, "hlo_op": op, "calls_per_step": round(c / steps, 3),
             "us_per_step": round(d / steps, 3), "step_us": round(step_us, 2), "steps": steps}
            for (k, op), (c, d) in sorted(sums.items(), key=lambda kv: -kv[1][1])]
    total = sum(r["us_per_step"] for r in rows)
    print(f"{case}: step {step_us:,.1f} us untraced, GPU events {total:,.1f} us a step over {len(rows)} kernels", flush=True)
    for r in rows[:12]:
        print(f"  {r['us_per_step']:9.1f} us  x{r['calls_per_step']:<6g} {r['hlo_op'][:28]:28s} {r['kernel'][:90]}", flush=True)
    return rows


def _median_us(fn: Any, args: tuple, repeats: int = 30) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e6


def layers(out: Path, stamp: str, common: dict[str, Any]) -> list[dict]:
    """conv_net's layers timed alone (batch 64, 224x224x3): each a jitted program,
    the median of 30 runs (its dispatch included: compare to the empty program's)."""
    rows = []
    dn = ("NHWC", "HWIO", "NHWC")
    for dtype in (jnp.bfloat16, jnp.float32):
        key = jax.random.key(1)
        x1 = jax.random.normal(key, (64, 224, 224, 3), dtype)
        w1 = jax.random.normal(key, (7, 7, 3, 32), dtype)
        x2 = jax.random.normal(key, (64, 56, 56, 32), dtype)
        w2 = jax.random.normal(key, (7, 7, 32, 64), dtype)
        p1 = jax.random.normal(key, (64, 112, 112, 32), dtype)

        def conv(x, w):
            return jax.lax.conv_general_dilated(x, w, (2, 2), ((3, 3), (3, 3)), dimension_numbers=dn)

        def pool(x):
            return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                                         ((0, 0), (1, 1), (1, 1), (0, 0)))

        programs = {
            "empty": (jax.jit(lambda x: x), (jnp.zeros((), dtype),)),
            "conv1 forward (3->32, 7x7/2)": (jax.jit(conv), (x1, w1)),
            "conv1 weight gradient": (jax.jit(jax.grad(lambda w, x: conv(x, w).astype(jnp.float32).sum())), (w1, x1)),
            "pool1 forward (3x3/2)": (jax.jit(pool), (p1,)),
            "pool1 gradient (select-and-scatter)": (jax.jit(jax.grad(lambda x: pool(x).astype(jnp.float32).sum())), (p1,)),
            "conv2 forward (32->64, 7x7/2)": (jax.jit(conv), (x2, w2)),
            "conv2 weight gradient": (jax.jit(jax.grad(lambda w, x: conv(x, w).astype(jnp.float32).sum())), (w2, x2)),
            "conv2 input gradient": (jax.jit(jax.grad(lambda x, w: conv(x, w).astype(jnp.float32).sum())), (x2, w2)),
        }
        for label, (fn, args) in programs.items():
            try:
                us = _median_us(fn, args)
            except Exception as exc:  # noqa: BLE001 - one failed layer must not lose the rest
                print(f"layer {label} {jnp.dtype(dtype).name}: failed: {type(exc).__name__}: {exc}", flush=True)
                continue
            rows.append({**common, "case": f"conv_net-layers:64:{jnp.dtype(dtype).name}", "kernel": label,
                         "hlo_op": "", "calls_per_step": 1, "us_per_step": round(us, 2), "step_us": "", "steps": 30})
            print(f"layer {label} {jnp.dtype(dtype).name}: {us:,.1f} us", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="model:batch:dtype:optimizer[:key=value,...] (repeatable)")
    parser.add_argument("--steps", type=int, default=10, help="steps traced per case")
    parser.add_argument("--no-layers", action="store_true", help="skip conv_net's layers timed alone")
    parser.add_argument("--out", default=str(ROOT / "reports" / "data"))
    args = parser.parse_args(argv)
    if jax.default_backend() != "gpu":
        print("kernel_profile: needs a GPU (jax's default backend is " + jax.default_backend() + ")", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "".join(c if c.isalnum() else "-" for c in xla.device_kind().lower()).strip("-")
    stamp = f"{name}_{datetime.date.today().isoformat()}"
    common = {"device": xla.device_kind(), "jax_version": jax.__version__, "date": datetime.date.today().isoformat()}
    formats: dict[str, Any] = {}
    path = out / f"kernels_{stamp}.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        if not args.no_layers:
            writer.writerows(layers(out, stamp, common))
            handle.flush()
        for case in args.case or DEFAULT_CASES:
            try:
                writer.writerows(profile(case, args.steps, out, stamp, common, formats))
            except Exception as exc:  # noqa: BLE001 - one failed case must not lose the rest
                print(f"{case}: failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}", flush=True)
            handle.flush()
            (out / f"kernels_{stamp}_trace_format.json").write_text(json.dumps(formats, indent=1, default=str))
            jax.clear_caches()
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
