"""How fast is `xla_cost.analyze` next to what a user would write without it (issue 10).

One run measures, on the same models, every variant below; each measurement is a
fresh Python process (so no in-memory compile cache carries over), each variant is
repeated ``--repeats`` times (interleaved: repeat 1 of every model and variant,
then repeat 2, ...) and the table shows the median. Inside the child the clock runs
from just before the model is built (``build_model`` + ``example_inputs``; every
variant then does its own abstract init) to the end of the variant's work, with
``time.perf_counter()``; imports are outside it. The child's peak resident memory
(``ru_maxrss``) is reported too, and its CPU time (``time.process_time()``, every
thread, over the same span) in a second table:
wall-clock ratios mean little on a loaded machine, CPU ones a little more.

Variants:

* ``compiled``: ``xla_cost.analyze(model, inputs, optimizer=...)``.
* ``layers``: the same with ``per_layer=True`` (``depth=None``: one row per module).
* ``jaxpr``: ``analyze(..., counter="jaxpr")``: the jaxpr counts alone.
* ``jaxpr_layers``: ``analyze(..., counter="jaxpr", per_layer=True)`` (not in the
  default set).
* ``warm``: ``layers`` run a second time, in a fresh process, on the persistent
  compilation cache a first ``layers`` process filled. Every ``compiled``,
  ``layers`` and ``jaxpr`` process gets its own new empty cache directory
  (``XLA_COST_CACHE_DIR``), so none is accidentally warm; the ``warm`` process
  reuses the directory of the ``layers`` process of the same repeat (that first
  process is the ``layers`` measurement; ``warm`` implies ``layers``).
* ``handwritten``: the minimal path without the tool: abstract init
  (``jax.eval_shape`` of ``model.init_with_output``), then
  ``jax.jit(f).lower(*abstract_args).compile().cost_analysis()`` for the forward
  loss, its ``jax.value_and_grad`` and the optax update (``optimizer.update`` +
  ``optax.apply_updates``): three compiles, default compiler options, the loss of
  the library's default (mean softmax cross-entropy, integer labels), non-``params``
  collections (BatchNorm's ``batch_stats``) mutable, the model's training flag
  (``train=True``...) set, as `xla_cost.step.workload` does. No persistent cache.
* ``tabulate``: ``flax.linen.tabulate(model, rngs, compute_flops=True,
  compute_vjp_flops=True, depth=None)(inputs)``. It needs concrete arrays (it
  runs the model on what it is given inside ``jax.eval_shape``), so the inputs are
  ``jnp.zeros`` of the input shape, created inside the clock. No persistent cache.

The ``handwritten`` and ``tabulate`` children import nothing of xla_cost: they build
a ResNet from `plain_resnet.py` beside this file (a plain Flax Linen definition with
the zoo's parameters and FLOP), as a user's script would; each reports whether any
``xla_cost`` module got loaded. A model with no plain definition is taken from the
zoo there (which imports the package), and its ratios are printed for information
only. They set ``XLA_COST_NO_CACHE=1`` and switch JAX's persistent cache off
explicitly. The phases' FLOP of analyze and of the hand-written path must be equal
within `FLOP_TOLERANCE` (else FAIL, exit status 1): the two time the same work.

Each child is timed twice: inside it (the clock above) and as a whole process
(python's start to its exit, imports included: the time a user waits), with its
CPU time (user + system of the child, from ``getrusage``). Issue 49's acceptance
is on whole processes, ResNet-50 batch 32, Adam, per layer, fresh caches, on a
quiet machine: analyze <= 0.7x the hand-written script, and the rerun on the
filled compilation cache <= 0.4x the first run::

    python benchmarks/bench_analyze.py --models resnet50:32 --variants layers,warm,handwritten --repeats 5 Every child runs with
``JAX_PLATFORMS=cpu`` unless ``--platform`` says otherwise.

Usage::

    python benchmarks/bench_analyze.py                      # issue 10's models, median of 3
    python benchmarks/bench_analyze.py --models resnet50:32 --repeats 1
    python benchmarks/bench_analyze.py --models resnet18:1:image_size=32,conv_net:2 \\
        --variants handwritten,tabulate --json out.json

A model is ``name:batch[:key=value[,key=value...]]`` (zoo names as in
``xla-cost models``; values parsed as Python literals); models are separated by
commas or given as separate arguments. The acceptance ratios of issue 10 are
printed against their targets; a ratio whose model is not the issue's case is
printed for information only. Issue 2's target (LinearNet analysed in under 2 s and
0.5 GB peak) is ``--models linear_net:64 --variants compiled``. Under load (other processes on the cores) the
timings mean little: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEFAULT_MODELS = ["resnet50:32", "bert-base:32", "gpt2-small:8", "resnet152:8"]
VARIANTS = ["compiled", "layers", "jaxpr", "jaxpr_layers", "warm", "handwritten", "tabulate"]
DEFAULT_VARIANTS = ["compiled", "layers", "jaxpr", "warm", "handwritten", "tabulate"]
VARIANT_HELP = {
    "compiled": "analyze()",
    "layers": "analyze(per_layer=True)",
    "jaxpr": "analyze(counter=jaxpr)",
    "jaxpr_layers": "analyze(counter=jaxpr, per_layer=True)",
    "warm": "layers again, persistent cache filled",
    "handwritten": "jit/lower/compile/cost_analysis x3",
    "tabulate": "nn.tabulate(flops, vjp_flops)",
}

_RESULT = "BENCH_RESULT "

# --------------------------------------------------------------------------- child

_CHILD = r'''
import inspect, json, os, resource, sys, time, warnings
spec = json.loads(sys.argv[1])
variant = spec["variant"]
warnings.simplefilter("ignore")  # e.g. a deprecated keyword: not what is measured
import jax
import jax.numpy as jnp
import flax
import flax.linen as nn
import optax

library = variant not in ("handwritten", "tabulate")
plain = not library and spec["plain"]
if plain:
    # The baseline as a user writes it: the model from a file of its own
    # (benchmarks/plain_resnet.py), nothing of xla_cost imported.
    sys.path.insert(0, spec["benchmarks"])
    from plain_resnet import build_model, example_inputs
else:
    from xla_cost.zoo import build_model, example_inputs
if library:
    import xla_cost
    # Names load on first use (xla_cost/__init__.py): load analyze here, outside
    # the clock, as the other variants import what they call before it starts.
    analyze = xla_cost.analyze
else:
    # No persistent compilation cache, whatever importing the package configured.
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_enable_compilation_cache", False)

name, batch, config, optimizer = spec["name"], spec["batch"], spec["config"], spec["optimizer"]
TRAIN_KWARGS = {"train": True, "training": True, "deterministic": False,
                "use_running_average": False}  # as xla_cost.step.workload sets them

def train_kwargs(model):
    try:
        names = inspect.signature(type(model).__call__).parameters
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in TRAIN_KWARGS.items() if k in names}

def make_optimizer(name):
    known = {"sgd": lambda: optax.sgd(1e-2), "momentum": lambda: optax.sgd(1e-2, momentum=0.9),
             "adam": lambda: optax.adam(1e-3), "adamw": lambda: optax.adamw(1e-3)}
    return known[name]() if name in known else getattr(optax, name)(1e-3)

def flops_of(compiled):
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return float((cost or {}).get("flops", float("nan")))

extra = {}
t0, c0 = time.perf_counter(), time.process_time()
model = build_model(name, **config)
inputs = example_inputs(name, batch, **config)
if library:
    kwargs = {"optimizer": optimizer, "name": name, "config": config}
    if variant in ("layers", "warm", "jaxpr_layers"):
        kwargs.update(per_layer=True, depth=None)
    if variant in ("jaxpr", "jaxpr_layers"):
        kwargs["counter"] = "jaxpr"
    report = analyze(model, inputs, **kwargs)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    for phase in ("forward", "grad", "update"):
        costs = report.phases.get(phase) if hasattr(report.phases, "get") else None
        extra[phase + "_flops"] = getattr(costs, "flops", None)
    extra["layer_rows"] = len(report.layers) if report.layers is not None else None
    extra["counter"] = getattr(report, "counter", None)
elif variant == "handwritten":
    kw = train_kwargs(model)
    key = jax.eval_shape(lambda: jax.random.key(0))
    logits, variables = jax.eval_shape(
        lambda k, x: model.init_with_output({"params": k, "dropout": k}, x, **kw), key, inputs)
    params = variables["params"]
    state = {c: v for c, v in variables.items() if c != "params"}
    mutable = list(state)
    targets = jax.ShapeDtypeStruct(logits.shape[:-1], jnp.int32)

    def loss_fn(params, state, x, y, key):
        v = {"params": params, **state}
        if mutable:
            out, new_state = model.apply(v, x, mutable=mutable, rngs={"dropout": key}, **kw)
        else:
            out, new_state = model.apply(v, x, rngs={"dropout": key}, **kw), state
        # = xla_cost.softmax_cross_entropy, the library's default loss
        loss = optax.softmax_cross_entropy_with_integer_labels(out.astype(jnp.float32), y).mean()
        return loss, new_state

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    opt = make_optimizer(optimizer)
    opt_state = jax.eval_shape(opt.init, params)

    def update(grads, opt_state, params):
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    batch_args = (params, state, inputs, targets, key)
    for phase, fn, args in (("forward", loss_fn, batch_args), ("grad", grad_fn, batch_args),
                            ("update", update, (params, opt_state, params))):
        extra[phase + "_flops"] = flops_of(jax.jit(fn).lower(*args).compile())
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    extra["mutable"] = mutable
elif variant == "tabulate":
    kw = train_kwargs(model)
    x = jnp.zeros(inputs.shape, inputs.dtype)  # tabulate needs concrete arrays
    table = nn.tabulate(model, {"params": jax.random.key(0), "dropout": jax.random.key(1)},
                        compute_flops=True, compute_vjp_flops=True, depth=None)(x, **kw)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    extra["table_lines"] = table.count("\n") + 1
else:
    raise SystemExit(f"unknown variant {variant!r}")

print("''' + _RESULT + r'''" + json.dumps({
    "xla_cost_imported": any(m == "xla_cost" or m.startswith("xla_cost.") for m in sys.modules),
    "seconds": seconds,
    "cpu_seconds": cpu_seconds,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "backend": jax.default_backend(),
    "jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__,
    "cache_dir": jax.config.jax_compilation_cache_dir,
    "cache_enabled": bool(jax.config.jax_enable_compilation_cache),
    **extra,
}), flush=True)
'''


# ------------------------------------------------------------------------- parsing


def parse_value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_models(items: Sequence[str]) -> list[tuple[str, int, dict[str, Any]]]:
    """``name:batch[:k=v[,k=v]]`` items, comma-separated or separate; a comma piece
    with ``=`` and no ``:`` continues the previous model's configuration."""
    pieces: list[str] = []
    for item in items:
        for piece in item.split(","):
            piece = piece.strip()
            if not piece:
                continue
            if "=" in piece and ":" not in piece and pieces:
                pieces[-1] += "," + piece
            else:
                pieces.append(piece)
    models = []
    for piece in pieces:
        name, _, rest = piece.partition(":")
        batch_text, _, config_text = rest.partition(":")
        if not name or not batch_text:
            raise SystemExit(f"bad model {piece!r}: use name:batch[:key=value,...]")
        config: dict[str, Any] = {}
        for entry in config_text.replace(":", ",").split(","):
            if entry.strip():
                key, eq, value = entry.partition("=")
                if not eq:
                    raise SystemExit(f"bad configuration {entry!r} in {piece!r}: use key=value")
                config[key.strip()] = parse_value(value.strip())
        models.append((name, int(batch_text), config))
    return models


def label(model: tuple[str, int, dict[str, Any]]) -> str:
    name, batch, config = model
    text = f"{name} b{batch}"
    if config:
        text += " (" + ",".join(f"{k}={v}" for k, v in config.items()) + ")"
    return text


def key_of(name: str) -> str:
    return "".join(c for c in name.lower() if c not in "-_ ")


PLAIN_MODELS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
"""The zoo models `plain_resnet.py` defines: the hand-written and tabulate children
build these from that file and import nothing of xla_cost; any other model they
take from the zoo (which imports the package: such a baseline is slower than a
user's, and its ratios are printed for information only)."""


def has_plain(name: str) -> bool:
    return key_of(name) in PLAIN_MODELS


# ------------------------------------------------------------------------- running


def child_env(platform: str, cache_dir: str | None) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("XLA_COST_CACHE_DIR", "XLA_COST_NO_CACHE", "JAX_COMPILATION_CACHE_DIR"):
        env.pop(var, None)
    env["JAX_PLATFORMS"] = platform
    if cache_dir is None:
        env["XLA_COST_NO_CACHE"] = "1"
    else:
        env["XLA_COST_CACHE_DIR"] = cache_dir
    return env


def run_child(
    variant: str, model: tuple[str, int, dict[str, Any]], optimizer: str, platform: str,
    cache_dir: str | None, timeout: float,
) -> dict[str, Any]:
    name, batch, config = model
    # `warm` is the `layers` analysis; only the cache directory it finds differs.
    spec = {"variant": "layers" if variant == "warm" else variant, "name": name,
            "batch": batch, "config": config, "optimizer": optimizer,
            "plain": has_plain(name), "benchmarks": os.path.dirname(os.path.abspath(__file__))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(spec)], cwd=REPO, capture_output=True,
            text=True, env=child_env(platform, cache_dir), timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child has been waited for
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_RESULT):
            result = json.loads(line[len(_RESULT):])
            result["process_seconds"] = wall
            result["process_cpu_seconds"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            return result
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
    return {"error": f"exit {proc.returncode}\n{tail}"}


def byte_compile() -> list[str]:
    """Byte-compiles the xla_cost package (with its zoo) and `plain_resnet.py`, as
    ``pip install`` does for an installed package and as jax, flax and optax
    are in site-packages: an editable install is not, and where
    ``PYTHONDONTWRITEBYTECODE`` is set (as in some sandboxes) every child would
    otherwise compile xla_cost's modules from source (0.08 s more for ResNet-50's
    analyze on a 2-core machine), a cost no installed package pays. Returns the
    folders compiled."""
    import compileall
    import importlib.util

    folders = [os.path.dirname(os.path.abspath(__file__))]
    for package in ("xla_cost", "xla_cost.zoo"):
        spec = importlib.util.find_spec(package)
        folders.extend((spec.submodule_search_locations or []) if spec else [])
    for folder in dict.fromkeys(folders):
        compileall.compile_dir(folder, quiet=1, maxlevels=8 if folder != folders[0] else 0)
    return list(dict.fromkeys(folders))


def cache_entries(path: str) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def measure(args: argparse.Namespace, models: list, variants: list[str]) -> dict:
    samples: dict[str, dict[str, list[dict]]] = {label(m): {v: [] for v in variants} for m in models}
    warm_entries: dict[str, list[int]] = {label(m): [] for m in models}
    total = args.repeats * len(models) * len(variants)
    done = 0

    def record(model: tuple, variant: str, result: dict, repeat: int) -> None:
        nonlocal done
        done += 1
        if variant in samples[label(model)]:
            samples[label(model)][variant].append(result)
        if "error" in result:
            text = "FAILED: " + result["error"].replace("\n", "\n    ")
        else:
            text = f"{result['seconds']:.2f} s, peak RSS {result['peak_rss_bytes'] / 1e6:.0f} MB"
        print(f"[{done}/{total}] repeat {repeat + 1} {label(model)} {variant}: {text}",
              file=sys.stderr, flush=True)

    def fresh_dir() -> str:
        return tempfile.mkdtemp(prefix="xla_cost_bench_cache_")

    for repeat in range(args.repeats):
        for model in models:
            for variant in variants:
                if variant == "warm":
                    continue  # run with `layers`, below
                if variant in ("handwritten", "tabulate"):
                    record(model, variant, run_child(
                        variant, model, args.optimizer, args.platform, None, args.timeout), repeat)
                    continue
                cache = fresh_dir()
                try:
                    result = run_child(variant, model, args.optimizer, args.platform, cache,
                                       args.timeout)
                    record(model, variant, result, repeat)
                    if variant == "layers" and "warm" in variants:
                        warm_entries[label(model)].append(cache_entries(cache))
                        if "error" in result:
                            warm = {"error": "not run: its first (layers) run failed"}
                        else:
                            warm = run_child("warm", model, args.optimizer, args.platform, cache,
                                             args.timeout)
                        record(model, "warm", warm, repeat)
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
    return {"samples": samples, "warm_cache_entries": warm_entries}


# ------------------------------------------------------------------------ reporting


def median(results: list[dict], field: str = "seconds") -> float | None:
    values = [r[field] for r in results if "error" not in r and r.get(field) is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


# (description, numerator, denominator or None for an absolute figure, target,
#  comparison, the cases as (zoo key, batch) or None for every model, the
#  measure: "seconds" inside the child's clock, "process_seconds" the whole process)
CHECKS = [
    ("compiled+layers / hand-written", "layers", "handwritten", 1.0, "<=", None, "seconds"),
    ("compiled+layers / hand-written (issue 31)", "layers", "handwritten", 0.7, "<=", {("resnet50", 32)}, "seconds"),
    ("compiled+layers / hand-written, whole processes (issue 49)", "layers", "handwritten", 0.7, "<=",
     {("resnet50", 32)}, "process_seconds"),
    ("compiled / hand-written", "compiled", "handwritten", 1.0, "<=", None, "seconds"),
    ("compiled+layers / tabulate", "layers", "tabulate", 0.8, "<=", {("resnet50", 32)}, "seconds"),
    ("jaxpr-only / tabulate", "jaxpr", "tabulate", 0.2, "<=", {("resnet50", 32)}, "seconds"),
    ("warm / cold (layers)", "warm", "layers", 0.4, "<=", {("resnet50", 32)}, "seconds"),
    ("warm / cold (layers), whole processes (issue 49)", "warm", "layers", 0.4, "<=", {("resnet50", 32)},
     "process_seconds"),
    ("compiled seconds", "compiled", None, 20.0, "<", {("resnet152", 8)}, "seconds"),
]
BASELINES = ("handwritten", "tabulate")


def checks(models: list, medians: dict[str, dict[str, dict[str, float | None]]],
           samples: dict[str, dict[str, list[dict]]]) -> list[dict]:
    """``medians[measure][label][variant]``; a ratio against a baseline that imported
    xla_cost (a model without a plain definition) is for information only."""
    rows = []
    for description, num, den, target, op, cases, measure in CHECKS:
        for model in models:
            m = medians[measure][label(model)]
            if num not in m or (den is not None and den not in m):
                continue
            a, b = m[num], (m[den] if den else 1.0)
            value = None if a is None or b is None or b == 0 else a / b
            applies = cases is None or (key_of(model[0]), model[1]) in cases
            impure = den in BASELINES and any(
                r.get("xla_cost_imported") for r in samples[label(model)][den] if "error" not in r)
            if value is None:
                verdict = "n/a"
            elif not applies or impure:
                verdict = "info" + (" (baseline imported xla_cost)" if impure else "")
            else:
                ok = value <= target if op == "<=" else value < target
                verdict = "PASS" if ok else "FAIL"
            rows.append({"check": description, "model": label(model), "value": value,
                         "target": f"{op} {target:g}" + (" s" if den is None else ""),
                         "applies": applies, "verdict": verdict})
    return rows


FLOP_TOLERANCE = 1e-6
"""How far analyze's FLOP of a phase may be from the hand-written path's, relatively.
Not exactly 0 (jax 0.10.2, CPU, 2026-11-29): ResNet-50's gradient at batch 32 compiles to
765,933,715,456 FLOP from analyze's step and 765,933,846,528 (131,072 more, 1.7e-7) from
the hand-written one; at batch 2 and 64x64 images 3,622,577,664 against 3,622,576,640
(1,024 fewer). Forward and update are equal. Both are jax's gradient of the same model
and loss (the same figure whether analyze replays the forward trace or runs the model
again); the programs differ in how the step's arguments and results are arranged,
and where XLA's optimized gradients part by these few FLOP was not traced further."""


def same_flops(models: list, samples: dict[str, dict[str, list[dict]]]) -> list[dict]:
    """XLA's FLOP of each phase, analyze's against the hand-written path's: the same
    workload, or the timings compare different work (a FAIL, and exit status 1)."""
    rows = []
    for model in models:
        per = samples[label(model)]
        hand = [r for r in per.get("handwritten", []) if "error" not in r]
        libs = [r for v in ("compiled", "layers", "warm") for r in per.get(v, []) if "error" not in r]
        for phase in ("forward", "grad", "update"):
            theirs = {r.get(phase + "_flops") for r in hand}
            ours = {r.get(phase + "_flops") for r in libs}
            if not theirs or not ours:
                continue
            values = [v for v in (*theirs, *ours) if isinstance(v, (int, float))]
            if len(values) < len(theirs) + len(ours) or not values:
                verdict, spread = "FAIL", None
            else:
                spread = (max(values) - min(values)) / max(abs(max(values)), 1.0)
                verdict = "PASS" if spread <= FLOP_TOLERANCE else "FAIL"
            rows.append({"phase": phase, "model": label(model), "analyze": sorted(ours, key=str),
                         "handwritten": sorted(theirs, key=str), "relative_difference": spread,
                         "verdict": verdict})
    return rows


def print_table(models: list, variants: list[str], values: dict, title: str, spec: str) -> None:
    width = max(len(label(m)) for m in models) + 2
    print(title)
    print(f"{'model':<{width}}" + "".join(f"{v:>14}" for v in variants))
    for model in models:
        print(f"{label(model):<{width}}" + "".join(
            f"{fmt(values[label(model)].get(v), spec):>14}" for v in variants))
    print()


def _load() -> float | None:
    """The 1-minute load average (None where the system has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models_pos", nargs="*", metavar="MODEL",
                        help="name:batch[:key=value,...] (also via --models)")
    parser.add_argument("--models", action="append", default=[],
                        help=f"comma-separated name:batch[:key=value,...]; default {','.join(DEFAULT_MODELS)}")
    parser.add_argument("--repeats", type=int, default=3, help="processes per variant (median); default 3")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help=f"comma-separated, of {','.join(VARIANTS)}; default {','.join(DEFAULT_VARIANTS)}")
    parser.add_argument("--optimizer", default="adam", help="optimizer name; default adam")
    parser.add_argument("--platform", default="cpu", help="JAX_PLATFORMS of the children; default cpu")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per child process")
    parser.add_argument("--json", metavar="PATH", help="write every sample, medians and checks here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        parser.error(f"unknown variants {unknown}; choose from {','.join(VARIANTS)}")
    if "warm" in variants:
        variants.append("layers")  # the first, cold run of every warm one
    variants = [v for v in VARIANTS if v in variants]  # canonical order, no duplicates
    models = parse_models(args.models + args.models_pos or DEFAULT_MODELS)

    compiled = byte_compile()
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    load = _load()
    started = time.time()
    data = measure(args, models, variants)
    samples = data["samples"]
    medians = {lab: {v: median(rs) for v, rs in per.items()} for lab, per in samples.items()}
    rss = {lab: {v: (lambda x: None if x is None else x / 1e6)(median(rs, "peak_rss_bytes"))
                 for v, rs in per.items()} for lab, per in samples.items()}
    ok = [r for per in samples.values() for rs in per.values() for r in rs if "error" not in r]
    first = ok[0] if ok else {}

    def version(pkg: str) -> str:
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    versions = {p: first.get(p) or version(p) for p in ("jax", "flax", "optax")}
    backend = first.get("backend", "?")
    print()
    print(f"xla_cost analyzer benchmark: median of {args.repeats} fresh process(es) per cell, "
          f"optimizer {args.optimizer}, float32")
    print(f"jax {versions['jax']}, flax {versions['flax']}, optax {versions['optax']}, backend "
          f"{backend}, {cores} cores ({usable} usable), load average at start "
          f"{fmt(load)}, at the end {fmt(_load())}, {time.time() - started:.0f} s in all")
    print(f"byte-compiled first, as an installed package is: {', '.join(os.path.relpath(f, REPO) for f in compiled)}")
    print()
    print_table(models, variants, medians, "Seconds (build model to end of work, inside the child):", ".2f")
    cpu = {lab: {v: median(rs, "cpu_seconds") for v, rs in per.items()} for lab, per in samples.items()}
    print_table(models, variants, cpu, "CPU seconds (every thread of the child, same span):", ".2f")
    whole = {lab: {v: median(rs, "process_seconds") for v, rs in per.items()} for lab, per in samples.items()}
    print_table(models, variants, whole, "Whole-process seconds (python's start to its exit, imports included):", ".2f")
    whole_cpu = {lab: {v: median(rs, "process_cpu_seconds") for v, rs in per.items()} for lab, per in samples.items()}
    print_table(models, variants, whole_cpu, "Whole-process CPU seconds (user + system, every thread):", ".2f")
    print_table(models, variants, rss, "Peak RSS, MB:", ".0f")
    for v in variants:
        print(f"  {v:<13} {VARIANT_HELP[v]}")
    if "tabulate" in variants:
        print("  tabulate needs concrete inputs: it was given jnp.zeros of the input shape.")
    if "warm" in variants:
        for lab, counts in data["warm_cache_entries"].items():
            used = any(r.get("cache_dir") for r in samples[lab].get("warm", []) if "error" not in r)
            if not used:
                note = " (the library did not configure JAX's cache from XLA_COST_CACHE_DIR: warm = cold)"
            elif not any(counts):
                note = " (cache configured, nothing written: compiles under JAX's minimum time to cache?)"
            else:
                note = ""
            print(f"  persistent-cache files after the first run, {lab}: {counts}{note}")
    for lab, per in samples.items():
        for v in BASELINES:
            if any(r.get("xla_cost_imported") for r in per.get(v, []) if "error" not in r):
                print(f"  {v}, {lab}: no plain definition (benchmarks/plain_resnet.py has the ResNets): "
                      "the baseline imported xla_cost.zoo, so the package; its ratios are information only")
    flop_rows = same_flops(models, samples)  # the same workload? XLA's FLOP of both paths, per phase
    for r in flop_rows:
        print(f"  FLOP {r['phase']:<8} {r['model']}: analyze {', '.join(f'{x:.6g}' for x in r['analyze'])}, "
              f"hand-written {', '.join(f'{x:.6g}' for x in r['handwritten'])}: "
              + ("equal" if r["relative_difference"] == 0 else f"{r['relative_difference']:.1e} apart")
              + ("" if r["verdict"] == "PASS" else " (FAIL: the timings compare different work)"))
    failures = [(lab, v, r["error"]) for lab, per in samples.items() for v, rs in per.items()
                for r in rs if "error" in r]
    for lab, v, err in failures:
        lines = err.strip().splitlines()
        print(f"  FAILED {lab} {v}: {lines[0]}" + (f": {lines[-1].strip()}" if len(lines) > 1 else ""))
    print()

    rows = checks(models, {"seconds": medians, "process_seconds": whole}, samples)
    if rows:
        print("Acceptance, issues 10, 31 and 49 (PASS/FAIL where the model is the issue's case; info otherwise):")
        width = max(len(r["check"]) for r in rows) + 2
        mwidth = max(len(r["model"]) for r in rows) + 2
        for r in rows:
            print(f"  {r['check']:<{width}}{r['model']:<{mwidth}}{fmt(r['value'], '.3f'):>9}  "
                  f"target {r['target']:<9} {r['verdict']}")
    else:
        print("No acceptance ratio: the variants run do not include both sides of one.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({
                "versions": versions, "backend": backend, "cores": cores, "usable_cores": usable,
                "load_average_at_start": load, "load_average_at_end": _load(), "repeats": args.repeats,
                "optimizer": args.optimizer, "variants": variants,
                "models": [{"name": n, "batch": b, "config": c, "label": label((n, b, c))}
                           for n, b, c in models],
                "medians_seconds": medians, "median_cpu_seconds": cpu, "median_peak_rss_mb": rss,
                "median_process_seconds": whole, "median_process_cpu_seconds": whole_cpu,
                "warm_cache_entries": data["warm_cache_entries"], "checks": rows, "same_flops": flop_rows,
                "samples": samples,
            }, f, indent=1)
        print(f"wrote {args.json}")
    return 1 if failures or any(r["verdict"] == "FAIL" for r in flop_rows) else 0


if __name__ == "__main__":
    sys.exit(main())
