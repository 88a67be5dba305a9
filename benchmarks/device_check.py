"""The checks that need a real GPU (issue 31): deviceless vs real compile, and `fit` for real.

Run on a machine with an NVIDIA GPU of the registry (an H100 or H200)::

    python benchmarks/device_check.py --fit-model resnet50 --fit-batch B --fit-dtype bfloat16 --out DIR

1. **Deviceless vs real.** ResNet-50's train step (batch 32, bfloat16 images into float32 parameters, SGD
   with momentum, `resnet_step`, which benchmarks/bench_target_compile.py times too) compiled
   twice in one process: for the real GPU (jax's default backend) and for the
   registry's compile target of the same device (`xla_cost.timemodel.devices.target`,
   deviceless, from its datasheet's GpuTargetConfig). Both compiles' kernels
   (fusions, library calls by target, collectives), FLOP (the project's
   counting: `xla_cost.compiled.kernels.module_costs`) and `memory_analysis()`
   are written side by side, with the relative differences. The deviceless
   compile is made again loading what the real compile's autotuner recorded
   (`with_recorded_autotuning`): with the registry's cuDNN version, and with the
   one loaded here.
2. **fit for real.** ``--fit-batch B`` is what ``xla-cost fit MODEL --target
   DEVICE`` answered on a machine without the GPU: the train step
   (`xla_cost.analyze(..., timed=True)`, which runs it with the parameters and
   optimizer state donated) runs at B and is refused at 1.25 x B with JAX's
   default allocator (75% of the GPU's memory preallocated, fit's default
   ``--memory-fraction``).

Writes ``device_check_<device>_<date>.json`` into ``--out`` (default
reports/data/) with the environment (device, driver, jax and plugin versions).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import xla_cost  # first: jax's plugins start quietly (xla_cost.plugins)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from xla_cost.compiled import kernels, targets, xla
from xla_cost.timemodel import devices
from xla_cost.zoo import build_model, example_inputs

ROOT = Path(__file__).resolve().parent.parent
BATCH = 32


def resnet_step(placement: jax.sharding.Sharding | None) -> tuple[object, tuple[object, ...]]:
    model = build_model("resnet50")
    image = example_inputs("resnet50", BATCH)
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.ones(image.shape, jnp.bfloat16)))
    tx = optax.sgd(0.1, momentum=0.9)
    state = jax.eval_shape(tx.init, variables["params"])

    def step(params, stats, opt, x, y):
        def loss(p):
            out, new = model.apply({"params": p, "batch_stats": stats}, x, mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(out.astype(jnp.float32), y).mean(), new
        (_, new), grads = jax.value_and_grad(loss, has_aux=True)(params)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), new["batch_stats"], opt

    args = (variables["params"], variables["batch_stats"], state,
            jax.ShapeDtypeStruct(image.shape, jnp.bfloat16), jax.ShapeDtypeStruct((BATCH,), jnp.int32))
    if placement is not None:
        args = tuple(jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=placement), a)
                     for a in args)
    return step, args


def _describe(compiled: object, seconds: float) -> dict[str, object]:
    text = compiled.as_text()
    listed = kernels.kernel_list(text)
    memory = compiled.memory_analysis()
    costs = kernels.module_costs(compiled)
    by_kind: dict[str, int] = {}
    library: dict[str, int] = {}
    for kernel in listed:
        by_kind[kernel.category] = by_kind.get(kernel.category, 0) + 1
        if kernel.category == "library":
            library[kernel.kind] = library.get(kernel.kind, 0) + 1
    return {
        "compile_s": round(seconds, 2),
        "kernels": len(listed), "by_kind": dict(sorted(by_kind.items())), "library_calls": dict(sorted(library.items())),
        "flops": None if costs is None else costs.costs.get("flops"),
        "flops_source": None if costs is None else costs.source,
        "argument_bytes": memory.argument_size_in_bytes, "output_bytes": memory.output_size_in_bytes,
        "temp_bytes": memory.temp_size_in_bytes, "alias_bytes": memory.alias_size_in_bytes,
    }


def _relative(real: object, deviceless: object) -> float | None:
    if not isinstance(real, (int, float)) or not isinstance(deviceless, (int, float)) or not real:
        return None
    return (deviceless - real) / real


def autotune_summary(recorded: Path) -> dict[str, object]:
    """What a real compile's autotuning chose (its results in text form, as
    ``xla_gpu_dump_autotune_results_to`` writes them): entries by backend, and the
    cuDNN workspaces (the temporaries a deviceless compile, which cannot autotune,
    does not plan for)."""
    text = recorded.read_text()
    backends: dict[str, int] = {}
    for name in re.findall(r"backend: (\w+)", text):
        backends[name] = backends.get(name, 0) + 1
    workspaces = [int(v) for v in re.findall(r"workspace_size \{\s*value: (\d+)", text)]
    return {"recorded": recorded.name, "backends": dict(sorted(backends.items())),
            "workspaces": len(workspaces), "largest_workspace_bytes": max(workspaces, default=0)}


def device_dnn_version() -> tuple[int, int, int] | None:
    """The cuDNN version loaded here (major, minor, patch), as the real device's compile sees it."""
    try:
        from jax._src.lib import cuda_versions

        code = cuda_versions.cudnn_get_version()
    except Exception:  # noqa: BLE001 - no CUDA plugin's version module: unknown
        return None
    return code // 10000, code // 100 % 100, code % 100


def with_recorded_autotuning(lowered: object, recorded: Path, real_row: dict[str, object],
                             options: dict[str, object] | None = None) -> dict[str, object]:
    """A deviceless compile that loads what the real compile's autotuner recorded
    (``xla_gpu_load_autotune_results_from``), against the real compile. The
    autotuner finds a result only where the target's device key (compute
    capability, SMs, clock, memory bandwidth, L2: `xla_cost.compiled.targets.GpuSpec`)
    and its backends' versions (the cuDNN version among them) are the device's;
    the compile is asked first to find every one
    (``xla_gpu_require_complete_aot_autotune_results``), and where it cannot, what
    it could not find is kept and it is compiled without that demand."""
    load = {**(options or {}), "xla_gpu_load_autotune_results_from": str(recorded)}
    row: dict[str, object] = {"recorded": recorded.name}
    start = time.perf_counter()
    try:
        compiled = lowered.compile(compiler_options={**load, "xla_gpu_require_complete_aot_autotune_results": True})
        row["complete"] = True
    except Exception as exc:  # noqa: BLE001 - what it could not find is the finding
        row["complete"] = False
        row["incomplete"] = str(exc).strip().splitlines()[0][:400]
        start = time.perf_counter()
        compiled = lowered.compile(compiler_options=load)
    row["deviceless"] = _describe(compiled, time.perf_counter() - start)
    row["relative_difference"] = {k: _relative(real_row.get(k), row["deviceless"].get(k))
                                  for k in ("kernels", "flops", "temp_bytes") if k in real_row}
    return row


def with_device_dnn(target: targets.CompileTarget) -> targets.CompileTarget:
    """The target with the cuDNN version loaded here (the real compile's), where it differs."""
    dnn = device_dnn_version()
    if dnn is None or target.gpu is None or dnn == target.gpu.dnn_version:
        return target
    return dataclasses.replace(target, gpu=dataclasses.replace(target.gpu, dnn_version=dnn))


def compare_compiles(out: Path, stamp: str) -> dict[str, object]:
    entry = devices.match_kind(xla.device_kind())
    if entry is None or entry.gpu is None:
        raise SystemExit(f"device_check: {xla.device_kind()!r} is not a GPU compile target of the registry")
    recorded = out / f"autotune_{stamp}_resnet50-b32-bfloat16-sgd.txt"
    step, args = resnet_step(None)
    start = time.perf_counter()
    real = jax.jit(step).lower(*args).compile(compiler_options={"xla_gpu_dump_autotune_results_to": str(recorded)})
    real_row = _describe(real, time.perf_counter() - start)
    target = devices.target(entry.name)
    with targets.use(target):
        step, args = resnet_step(target.placement())
        lowered = jax.jit(step).lower(*args)
        start = time.perf_counter()
        deviceless = lowered.compile()
        deviceless_row = _describe(deviceless, time.perf_counter() - start)
    keys = ("kernels", "flops", "argument_bytes", "output_bytes", "temp_bytes")
    row = {
        "case": f"resnet50 train step, batch {BATCH}, bfloat16 images, float32 parameters and convolutions, SGD momentum 0.9",
        "target": entry.name, "real": real_row, "deviceless": deviceless_row,
        "relative_difference": {k: _relative(real_row[k], deviceless_row[k]) for k in keys},
        "autotuned": autotune_summary(recorded) if recorded.exists() else None,
        "device_dnn_version": device_dnn_version(), "target_dnn_version": target.gpu.dnn_version,
    }
    if recorded.exists():  # the registry's target, then with the cuDNN version here
        for label, chosen in (("with_autotune_results", target), ("with_autotune_results_device_dnn", with_device_dnn(target))):
            if label.endswith("_dnn") and chosen is target:
                continue
            with targets.use(chosen):
                step, args = resnet_step(chosen.placement())
                row[label] = with_recorded_autotuning(jax.jit(step).lower(*args), recorded, real_row)
            print(f"device_check: {label}: {json.dumps(row[label]['relative_difference'])}", file=sys.stderr, flush=True)
    return row


def train_step_lowered(model: str, batch: int, dtype: str, optimizer: str, placement: object | None) -> tuple[object, tuple]:
    """The train step as `fit` sizes it (`xla_cost.analysis.programs.step_memory`: parameters
    and optimizer state donated), jitted, and its arguments' shapes (on ``placement``)."""
    from xla_cost.step import phases

    built, inputs, _, _, _ = xla_cost.RunConfig(model, batch, {}, optimizer=optimizer, dtype=dtype).build()
    workload, _ = xla_cost.build_workload(built, inputs, optimizer=optimizer)
    declared = phases.phase("train_step")
    donate = tuple(i for i, n in enumerate(declared.arguments) if n in ("params", "opt_state"))
    with workload.tracing():
        shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=placement),
                              workload.phase_args("train_step"))
        lowered = jax.jit(workload.phase_fn("train_step"), donate_argnums=donate).lower(*shapes)
    return lowered, shapes


def final_peak(compiled: object) -> int:
    memory = compiled.memory_analysis()
    return (memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
            - memory.alias_size_in_bytes)


def _run_step(model: str, batch: int, dtype: str, optimizer: str, record: Path | None) -> dict[str, object]:
    """The train step run once on the GPU with zeros of every argument's shape; its
    autotuning results written to ``record`` when given."""
    lowered, shapes = train_step_lowered(model, batch, dtype, optimizer, None)
    options = {"xla_gpu_dump_autotune_results_to": str(record)} if record is not None else None
    start = time.perf_counter()
    compiled = lowered.compile(compiler_options=options)
    compile_s = time.perf_counter() - start
    args = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)
    start = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    return {"seconds": round(time.perf_counter() - start, 3), "compile_s": round(compile_s, 1),
            "xla_peak_bytes": final_peak(compiled), "temp_bytes": compiled.memory_analysis().temp_size_in_bytes}


def check_fit(model: str, batch: int, dtype: str, optimizer: str, out: Path, stamp: str,
              save: Callable[[dict[str, object]], None] = lambda rows: None) -> dict[str, object]:
    """The fit batch run, then 1.25x of it; ``save`` is given what is known after each
    run (a limit that ends the check keeps the runs it finished)."""
    rows: dict[str, object] = {}
    recorded = out / f"autotune_{stamp}_{model}-b{batch}-{dtype}-{optimizer}.txt"
    for label, b in (("fit_batch", batch), ("fit_batch_x1.25", int(batch * 1.25))):
        print(f"device_check: fit run batch {b}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            rows[label] = {"batch": b, "ran": True,
                           **_run_step(model, b, dtype, optimizer, recorded if b == batch else None)}
        except Exception as exc:  # noqa: BLE001 - an out-of-memory is the answer, not a failure
            rows[label] = {"batch": b, "ran": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
        rows[label]["wall_s"] = round(time.perf_counter() - start, 1)
        print(f"device_check: {label} {json.dumps(rows[label])}", file=sys.stderr, flush=True)
        save(dict(rows))
        jax.clear_caches()
    stats = jax.devices()[0].memory_stats() or {}
    result = {"model": model, "dtype": dtype, "optimizer": optimizer, "bytes_limit": stats.get("bytes_limit"),
              "bytes_reservable_limit": stats.get("bytes_reservable_limit"), **rows}
    if recorded.exists():
        result["autotuned"] = autotune_summary(recorded)
    entry = devices.match_kind(xla.device_kind())
    if entry is not None:  # the step for the registry's target of this GPU, deviceless, as `fit` compiles it
        target = devices.target(entry.name)
        fraction = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
        if fraction:  # the allocator's share, as `fit --memory-fraction` gave it to the target
            target = dataclasses.replace(target, memory_fraction=float(fraction))
        with targets.use(target):
            lowered, _ = train_step_lowered(model, batch, dtype, optimizer, target.placement())
            start = time.perf_counter()
            compiled = lowered.compile(compiler_options=target.memory_options)
            result["deviceless"] = {"batch": batch, "options": target.memory_options, "xla_peak_bytes": final_peak(compiled),
                                    "temp_bytes": compiled.memory_analysis().temp_size_in_bytes,
                                    "compile_s": round(time.perf_counter() - start, 1)}
        real = rows.get("fit_batch")
        if recorded.exists() and isinstance(real, dict) and "temp_bytes" in real:
            chosen = with_device_dnn(target)
            with targets.use(chosen):
                lowered, _ = train_step_lowered(model, batch, dtype, optimizer, chosen.placement())
                result["with_autotune_results"] = with_recorded_autotuning(lowered, recorded, real)
    return result


def probe(model: str, batches: list[int], dtype: str, optimizer: str) -> list[dict[str, object]]:
    """The train step compiled (not run) on the GPU at each batch: XLA's peak. Each compile is
    announced on stderr first, so that the compiler's rematerialization lines that follow are its."""
    rows = []
    for batch in batches:
        print(f"device_check: probe batch {batch}", file=sys.stderr, flush=True)
        lowered, _ = train_step_lowered(model, batch, dtype, optimizer, None)
        start = time.perf_counter()
        compiled = lowered.compile()
        rows.append({"batch": batch, "xla_peak_bytes": final_peak(compiled),
                     "temp_bytes": compiled.memory_analysis().temp_size_in_bytes,
                     "compile_s": round(time.perf_counter() - start, 1)})
        print(json.dumps(rows[-1]), flush=True)
        del compiled
        jax.clear_caches()
    return rows


def search_fit(model: str, dtype: str, optimizer: str) -> dict[str, object]:
    """`xla_cost.max_batch_size` for the registry's compile target of the GPU here,
    deviceless, by the jax installed here (the batch `check_fit` then runs)."""
    from xla_cost.runs.fit import max_batch_size

    entry = devices.match_kind(xla.device_kind())
    assert entry is not None
    start = time.perf_counter()
    found = max_batch_size(model, target=entry.name, optimizer=optimizer, dtype=dtype, progress=False)
    jax.clear_caches()
    return {"model": model, "target": entry.name, "jax": jax.__version__, "batch_size": found.batch_size, "limit": found.limit,
            "tried": [list(t) if isinstance(t, tuple) else str(t) for t in found.tried],
            "seconds": round(time.perf_counter() - start, 1)}


def environment() -> dict[str, object]:
    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        smi = None
    return {
        "device": xla.device_kind(), "nvidia_smi": smi, "python": platform.python_version(),
        "jax": jax.__version__, "jaxlib": version("jaxlib"),
        "cuda_plugin": version("jax-cuda13-plugin") or version("jax-cuda12-plugin"),
        "flax": version("flax"), "optax": version("optax"), "xla_cost": xla_cost.__version__,
        "date": datetime.date.today().isoformat(), "command": " ".join(sys.argv),
        "xla_python_client_mem_fraction": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75 (default)"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit-model", default=None)
    parser.add_argument("--fit-batch", type=int, default=None,
                        help="the batch `xla-cost fit` answered; without it, searched here (deviceless, this jax)")
    parser.add_argument("--fit-dtype", default="float32")
    parser.add_argument("--fit-optimizer", default="adam")
    parser.add_argument("--skip-compare", action="store_true")
    parser.add_argument("--probe", default="", help="comma-separated batches to compile (not run) on the GPU after the fit check")
    parser.add_argument("--out", default=str(ROOT / "reports" / "data"))
    args = parser.parse_args(argv)
    if jax.default_backend() != "gpu":
        print("device_check: needs a GPU (jax's default backend is " + jax.default_backend() + ")", file=sys.stderr)
        return 2
    name = "".join(c if c.isalnum() else "-" for c in xla.device_kind().lower()).strip("-")
    stamp = f"{name}_{datetime.date.today().isoformat()}"
    path = Path(args.out) / f"device_check_{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, object] = {"environment": environment()}
    path.write_text(json.dumps(result, indent=1) + "\n")  # each part written as it ends: a timeout keeps the rest
    if not args.skip_compare:
        result["deviceless_vs_real"] = compare_compiles(path.parent, stamp)
        print(json.dumps(result["deviceless_vs_real"], indent=1), flush=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
    if args.fit_model and not args.fit_batch:
        result["fit_search"] = search_fit(args.fit_model, args.fit_dtype, args.fit_optimizer)
        print(json.dumps(result["fit_search"], indent=1), flush=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
        args.fit_batch = result["fit_search"]["batch_size"]
    if args.fit_model and args.fit_batch:
        def save(rows: dict[str, object]) -> None:
            result["fit"] = rows
            path.write_text(json.dumps(result, indent=1) + "\n")

        result["fit"] = check_fit(args.fit_model, args.fit_batch, args.fit_dtype, args.fit_optimizer, path.parent, stamp,
                                  save)
        print(json.dumps(result["fit"], indent=1), flush=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
    if args.fit_model and args.probe:
        result["probe"] = probe(args.fit_model, [int(b) for b in args.probe.split(",")], args.fit_dtype,
                                args.fit_optimizer)
        path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
