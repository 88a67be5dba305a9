"""The ``xla-cost`` command line: parse, call the library, print or write.

Every feature here is a call to the public API (`xla_cost.analyze`,
`models.build_model`, ...); the CLI only translates arguments and output.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

__all__ = ["main", "build_parser", "check_output", "EXIT_INTERRUPTED"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"xla-cost: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``xla-cost`` argument parser; its choices come from the library."""
    from xla_cost._text import FORMATS
    from xla_cost.choices import COUNTERS, DTYPES
    from xla_cost.choices import OPTIMIZER_NAMES as OPTIMIZERS

    parser = _Parser(
        prog="xla-cost",
        description="Static FLOP, bytes and memory of a JAX/Flax training step, from compiled XLA.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    analyze = sub.add_parser(
        "analyze", help="forward, backward and update cost of one training step"
    )
    analyze.add_argument("model", help="a zoo name (see `xla-cost models`) or package.module:attribute")
    analyze.add_argument("--batch-size", type=int, default=None, help="batch size (default 1)")
    analyze.add_argument("--optimizer", default="sgd", metavar="NAME", help=f"{', '.join(OPTIMIZERS)} (default sgd)")
    analyze.add_argument("--dtype", default="float32", choices=DTYPES, help="computation dtype (parameters stay float32)")
    analyze.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE", help="a model argument, e.g. depth=10 (repeatable)")
    analyze.add_argument("--input-shape", default=None, metavar="B,D1,...", help="input shape including the batch axis (required for custom models)")
    analyze.add_argument("--input-dtype", default=None, metavar="DTYPE", help="a custom model's input dtype, e.g. int32 for token ids (default: --dtype)")
    analyze.add_argument("--per-layer", action="store_true", help="attribute forward, backward and update FLOP to each module")
    analyze.add_argument("--depth", type=int, default=None, metavar="N", help="merge per-layer rows to the first N components of the module path (implies --per-layer; default: one row per module that holds parameters)")
    analyze.add_argument("--counter", default=COUNTERS[0], choices=COUNTERS, help="xla: compile and correct XLA's figures for loops (default); jaxpr: count the jaxpr alone, no compilation (fast; no XLA bytes or memory)")
    analyze.add_argument("--remat", default=None, choices=("none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable"), help="rematerialise with this jax.checkpoint policy: per block for zoo models that have blocks (GPT), around the whole model otherwise; recomputation shows in hardware_flops, not model_flops")
    analyze.add_argument("--attention-flops", default="full", choices=("full", "causal"), help="how model_flops counts attention's score and value products: full (every T x T pair, as computed; PaLM's 6N + 12LHQT) or causal (half of them, MaxText's convention)")
    analyze.add_argument("--memory", action="store_true", help="break the step's memory down per device: parameters, gradients, optimizer state, batch, activations saved for the backward pass (per layer with --per-layer), beside XLA's peak of the donated train step (one more compile)")
    analyze.add_argument("--exact-train-step", action="store_true", help="compile the train step as one program (exact train-step memory; about twice the compile time) instead of adding grad and update")
    analyze.add_argument("--no-cache", action="store_true", help="do not use JAX's persistent compilation cache (also: XLA_COST_NO_CACHE=1; location: XLA_COST_CACHE_DIR, default ~/.cache/xla_cost/jax)")
    analyze.add_argument("--cache", action="store_true", help="look the analysis up in the results store and store it there (the store of `xla-cost sweep`; a second identical analysis returns at once)")
    analyze.add_argument("--store", default=None, metavar="PATH", help="the results store for --cache (default: $XLA_COST_STORE or ~/.cache/xla_cost/results.sqlite)")
    analyze.add_argument("--time", action="store_true", help="also run each phase on real random arrays on the default device and time it (seconds, FLOP/s, MFU, roofline, forward/backward/update split)")
    analyze.add_argument("--peak-tflops", type=float, default=None, metavar="T", help="the device's peak TFLOP/s for MFU and the roofline (default: a table of accelerators; measured on a CPU)")
    analyze.add_argument("--peak-bandwidth", type=float, default=None, metavar="B", help="the device's memory bandwidth in bytes/s, e.g. 3.35e12")
    analyze.add_argument("--call-kwarg", dest="call_kwargs", action="append", default=[], metavar="KEY=VALUE", help="a keyword argument of the model's call, e.g. train=True (repeatable; random keys and training flags are supplied already)")
    analyze.add_argument("--method", default=None, metavar="NAME", help="call this method of the module instead of __call__")
    analyze.add_argument("--axis-name", dest="axis_names", action="append", default=[], metavar="NAME", help="bind a collective axis name the model uses (BatchNorm(axis_name=...)); names are also detected (repeatable)")
    analyze.add_argument("--output-index", default=None, metavar="I|KEY", help="for a model returning (logits, loss) or a dict: the output the default loss takes, an index or a key")
    analyze.add_argument("--mesh", default=None, metavar="AXIS=N,...", help="analyse the step sharded over a device mesh: data (DDP), fsdp (ZeRO-3), model (tensor parallel), e.g. data=8 or fsdp=8,model=8; figures per device, with the collectives XLA inserts (devices simulated on the CPU when missing)")
    analyze.add_argument("--param-sharding", dest="param_sharding", action="append", default=[], metavar="REGEX=SPEC", help="a partition rule for parameters whose path matches REGEX, e.g. 'mlp/fc1/kernel=None,model' (repeatable; first match wins; before the model's own metadata and the zoo's rules)")
    analyze.add_argument("--format", default="table", choices=FORMATS)
    analyze.add_argument("--output", default=None, metavar="FILE", help="write to FILE instead of stdout")
    analyze.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    sweep = sub.add_parser(
        "sweep", help="analyse every combination of models, batch sizes, settings, optimizers and dtypes",
        description="Results go into an SQLite store; a rerun skips what is stored.",
    )
    sweep.add_argument("models", nargs="+", metavar="MODEL", help="zoo names or package.module:attribute (with --input-shape)")
    sweep.add_argument("--batch-sizes", default="1", metavar="B,B,...", help="batch sizes, e.g. 1,2,4,8 (default 1)")
    sweep.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=V,V,...", help="a model argument and its values, e.g. depth=0,1,3 (repeatable; every combination runs)")
    sweep.add_argument("--optimizers", default="sgd", metavar="NAME,...", help=f"of {', '.join(OPTIMIZERS)} (default sgd)")
    sweep.add_argument("--dtypes", default="float32", metavar="DTYPE,...", help=f"of {', '.join(DTYPES)} (default float32)")
    sweep.add_argument("--counter", default=COUNTERS[0], choices=COUNTERS, help="xla (default) or jaxpr, as for analyze")
    sweep.add_argument("--per-layer", action="store_true", help="also the per-layer rows (--layers FILE writes them)")
    sweep.add_argument("--depth", type=int, default=None, metavar="N", help="merge per-layer rows to depth N (implies --per-layer)")
    sweep.add_argument("--input-shape", default=None, metavar="B,D1,...", help="a custom model's input shape; the batch axis is replaced by each batch size")
    sweep.add_argument("--store", default=None, metavar="PATH", help="the SQLite results store (default: $XLA_COST_STORE or ~/.cache/xla_cost/results.sqlite)")
    sweep.add_argument("--jobs", type=int, default=None, metavar="N", help="worker processes (default: one per core, as memory allows; 0: in this process)")
    sweep.add_argument("--scheduler", default=None, metavar="ADDRESS", help="run on a Dask distributed scheduler, e.g. tcp://HOST:8786 (pip install 'xla-cost[dask]')")
    sweep.add_argument("--retry-failed", action="store_true", help="analyse again the configurations stored as failed")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep.add_argument("--format", default="table", choices=FORMATS)
    sweep.add_argument("--output", default=None, metavar="FILE", help="write to FILE instead of stdout")
    sweep.add_argument("--layers", default=None, metavar="FILE", help="write the per-layer rows to FILE as CSV")
    sweep.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    scaling = sub.add_parser(
        "scaling", help="predicted speed-up and efficiency of a sharded train step over device counts",
        description="Each device count is a sharded analysis (XLA's SPMD partitioner; devices simulated "
        "on the CPU) priced with the alpha-beta model of xla_cost.comm; results go through the store.",
    )
    scaling.add_argument("model", help="a zoo name or package.module:attribute")
    scaling.add_argument("--devices", default="1,2,4,8", metavar="K,K,...", help="device counts, increasing (default 1,2,4,8)")
    scaling.add_argument("--mesh-axis", default="data", choices=("data", "fsdp"), help="the axis grown: data (DDP) or fsdp (ZeRO-3); the per-device batch stays (weak scaling)")
    scaling.add_argument("--global-batch", type=int, default=None, metavar="B", help="keep B samples per step over all devices instead (strong scaling: B/K per device; every K must divide B)")
    scaling.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE", help="a model argument (repeatable)")
    _hardware_options(scaling, OPTIMIZERS, DTYPES)
    scaling.add_argument("--plot", default=None, metavar="PNG", help="also write the speed-up and efficiency curve to this PNG")
    scaling.add_argument("--format", default="table", choices=FORMATS)
    scaling.add_argument("--output", default=None, metavar="FILE", help="write to FILE instead of stdout")
    scaling.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    estimate = sub.add_parser(
        "estimate", help="total training FLOP and time of a run on K devices",
    )
    estimate.add_argument("model", help="a zoo name or package.module:attribute")
    estimate.add_argument("--samples", type=float, default=None, metavar="N", help="samples per epoch (e.g. 1281167 for ImageNet)")
    estimate.add_argument("--epochs", type=float, default=1, metavar="E", help="epochs (default 1)")
    estimate.add_argument("--tokens", type=float, default=None, metavar="T", help="tokens in all (language models; instead of --samples)")
    estimate.add_argument("--devices", type=int, default=1, metavar="K", help="devices (default 1)")
    estimate.add_argument("--mesh-axis", default="data", choices=("data", "fsdp"), help="how the K devices split the step (default data)")
    estimate.add_argument("--mfu", type=float, default=None, metavar="X", help="the fraction of peak FLOP/s reached (default: the roofline at peak, a lower bound on time)")
    estimate.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE", help="a model argument (repeatable)")
    _hardware_options(estimate, OPTIMIZERS, DTYPES, optimizer="adam")
    estimate.add_argument("--format", default="table", choices=("table", "json"))
    estimate.add_argument("--output", default=None, metavar="FILE", help="write to FILE instead of stdout")
    estimate.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    fit = sub.add_parser(
        "fit", help="the largest batch whose compiled train step fits in a device's memory",
    )
    fit.add_argument("model", help="a zoo name or package.module:attribute")
    fit.add_argument("--device", default="h100", metavar="NAME", help="h100, h200, a100, a100-80gb, v100, v100-32gb or p40: its memory (default h100)")
    fit.add_argument("--device-memory", type=float, default=None, metavar="BYTES", help="the device's memory in bytes instead, e.g. 8e9")
    fit.add_argument("--memory-fraction", type=float, default=0.75, metavar="F", help="the usable share of it (default 0.75, JAX's GPU allocator default)")
    fit.add_argument("--mesh", default=None, metavar="AXIS=N,...", help="shard the step (the batch is then global, the memory per device)")
    fit.add_argument("--optimizer", default="adam", metavar="NAME", help=f"{', '.join(OPTIMIZERS)} (default adam)")
    fit.add_argument("--dtype", default="float32", choices=DTYPES, help="computation dtype")
    fit.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE", help="a model argument (repeatable)")
    fit.add_argument("--input-shape", default=None, metavar="B,D1,...", help="a custom model's input shape (its batch is searched)")
    fit.add_argument("--format", default="table", choices=("table", "json"))
    fit.add_argument("--output", default=None, metavar="FILE", help="write to FILE instead of stdout")
    fit.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    from xla_cost.reporting import PAGES

    report = sub.add_parser(
        "report", help="write the markdown reports and their figures (reports/), or one model's page",
        description="Pages are built from sweeps run through the results store: the same store gives "
        "byte-identical markdown, and a rerun reads the analyses back.",
    )
    report.add_argument("pages", nargs="*", metavar="NAME", help=f"pages to write: {', '.join(PAGES)}, or all (default)")
    report.add_argument("--out", default="reports", metavar="DIR", help="the directory to write to (default reports/; figures in DIR/figures/)")
    report.add_argument("--store", default=None, metavar="PATH", help="the SQLite results store (default: $XLA_COST_STORE or ~/.cache/xla_cost/results.sqlite)")
    report.add_argument("--jobs", type=int, default=None, metavar="N", help="worker processes for the sweeps (default: one per core, as memory allows; 0: in this process)")
    report.add_argument("--quiet", action="store_true", help="no progress bar")
    report.add_argument("--model", default=None, metavar="PACKAGE.MODULE:ATTR", help="write one page for this model instead (phases, layers, a figure of FLOP per layer); a zoo name works too")
    report.add_argument("--input-shape", default=None, metavar="B,D1,...", help="with --model: the input shape, batch first (required for a custom model)")
    report.add_argument("--input-dtype", default=None, metavar="DTYPE", help="with --model: the input dtype, e.g. int32 for token ids")
    report.add_argument("--optimizer", default=None, metavar="NAME", help=f"with --model: {', '.join(OPTIMIZERS)} (default sgd)")
    report.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE", help="with --model: a model argument (repeatable)")
    report.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    models = sub.add_parser("models", help="list the model zoo")
    models.add_argument("--format", default="table", choices=FORMATS)
    models.add_argument("--output", default=None, metavar="FILE", help="write to FILE instead of stdout")
    models.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def _hardware_options(
    parser: argparse.ArgumentParser, optimizers: Sequence[str], dtypes: Sequence[str], optimizer: str = "sgd"
) -> None:
    from xla_cost.comm import DEFAULT_OVERLAP

    parser.add_argument("--batch-size", type=int, default=1, metavar="B", help="samples per device (default 1)")
    parser.add_argument("--optimizer", default=optimizer, metavar="NAME", help=f"{', '.join(optimizers)} (default {optimizer})")
    parser.add_argument("--dtype", default="float32", choices=dtypes, help="computation dtype")
    parser.add_argument("--device", default="h100", metavar="NAME", help="h100, h200, a100, v100 or p40: its peak FLOP/s, memory bandwidth and cluster preset (default h100)")
    parser.add_argument("--interconnect", default=None, metavar="NAME", help="one interconnect for every link instead of the device's cluster: nvlink4, nvlink3, pcie5, pcie4, pcie3, ib-ndr, ib-hdr, ib-edr, ethernet-25g, tpu-v5e-ici")
    parser.add_argument("--overlap", type=float, default=DEFAULT_OVERLAP, metavar="F", help=f"fraction of communication hidden behind compute (default {DEFAULT_OVERLAP}: none, an upper bound on time)")
    parser.add_argument("--algorithm", default="ring", choices=("ring", "halving-doubling"), help="how collectives are scheduled: ring (n-1 hops, default) or halving-doubling (log2 n hops, as tree and hierarchical algorithms at scale)")
    parser.add_argument("--store", default=None, metavar="PATH", help="the results store (default: $XLA_COST_STORE or ~/.cache/xla_cost/results.sqlite)")


def _scaling(args: argparse.Namespace) -> str:
    from xla_cost._text import render_as
    from xla_cost.scaling import scaling
    from xla_cost.sharding import simulate_devices

    devices = [int(k) for k in _list(args.devices, "--devices")]
    simulate_devices(max(devices) if devices and all(isinstance(k, int) for k in devices) else 1)
    result = scaling(
        args.model, devices, mesh_axis=args.mesh_axis, batch_size=args.batch_size,
        global_batch=args.global_batch, device=args.device, interconnect=args.interconnect,
        algorithm=args.algorithm, overlap=args.overlap, optimizer=args.optimizer, dtype=args.dtype,
        config=_parse_settings(args.settings), store=args.store,
    )
    if args.plot:
        check_output(args.plot)
        result.plot(args.plot)
    return render_as(result, args.format, _width(args))


def _estimate(args: argparse.Namespace) -> str:
    import json

    from xla_cost.scaling import estimate
    from xla_cost.sharding import simulate_devices

    simulate_devices(args.devices)
    result = estimate(
        args.model, samples=None if args.samples is None else int(args.samples), epochs=args.epochs,
        tokens=args.tokens, devices=args.devices, mesh_axis=args.mesh_axis, batch_size=args.batch_size,
        device=args.device, mfu=args.mfu, interconnect=args.interconnect, overlap=args.overlap,
        algorithm=args.algorithm, optimizer=args.optimizer, dtype=args.dtype, config=_parse_settings(args.settings), store=args.store,
    )
    p = result.step.prediction
    data = {
        "model": result.model, "devices": result.devices, "samples": result.samples, "tokens": result.tokens,
        "flops_per_sample": result.flops_per_sample, "total_flops": result.total_flops, "steps": result.steps,
        "step_seconds": p.seconds, "compute_seconds": p.compute_seconds,
        "communication_seconds": p.communication_seconds, "seconds": result.seconds,
        "hours": result.seconds / 3600,
    }
    if args.format == "json":
        return json.dumps(data, indent=2)
    return "\n".join(f"{k:>22}: {v:.4g}" if isinstance(v, float) else f"{k:>22}: {v}" for k, v in data.items())


def _fit(args: argparse.Namespace) -> str:
    from xla_cost.configs import parse_shape
    from xla_cost.fit import max_batch_size

    result = max_batch_size(
        args.model, device=args.device, device_memory_bytes=args.device_memory,
        memory_fraction=args.memory_fraction, optimizer=args.optimizer, dtype=args.dtype,
        config=_parse_settings(args.settings), mesh=_mesh(args.mesh) or None,
        input_shape=parse_shape(args.input_shape) if args.input_shape else None,
    )
    return result.to_json() if args.format == "json" else result.to_table()


def _parse_settings(
    settings: Sequence[str], flag: str = "--set", example: str = "depth=10"
) -> dict[str, Any]:
    """``KEY=VALUE`` items to a dict; values are Python literals, else strings."""
    from xla_cost.errors import InputError

    config: dict[str, Any] = {}
    for item in settings:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier() or not raw.strip():
            raise InputError(
                f"{flag} KEY=VALUE with KEY an argument name", repr(item), f"Write e.g. {flag} {example}."
            )
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            value = raw.strip()
        config[key] = value
    return config


def _analyze(args: argparse.Namespace) -> str:
    from xla_cost._text import render_as
    from xla_cost.configs import RunConfig, parse_shape

    config = _parse_settings(args.settings)
    call_kwargs = _parse_settings(args.call_kwargs, "--call-kwarg", "train=True")
    output = args.output_index
    if output is not None:
        output = int(output) if output.lstrip("-").isdigit() else output
    shape = parse_shape(args.input_shape) if args.input_shape else None
    batch = args.batch_size if args.batch_size is not None else (shape[0] if shape else 1)
    mesh = _mesh(args.mesh)
    whole_model_remat = None
    if args.remat not in (None, "none"):
        from xla_cost.remat import per_block

        if per_block(args.model):
            config["remat"] = args.remat
        else:
            whole_model_remat = args.remat
    run = RunConfig(
        args.model, batch, config, optimizer=args.optimizer, dtype=args.dtype,
        counter=args.counter, per_layer=args.per_layer, depth=args.depth, input_shape=shape,
        input_dtype=args.input_dtype, exact_train_step=args.exact_train_step, mesh=mesh,
    )
    rules = _partition_rules(args.param_sharding)
    report = run.run(
        **({"param_sharding": rules} if rules else {}),
        timed=args.time, peak_tflops=args.peak_tflops, peak_bandwidth=args.peak_bandwidth,
        compilation_cache=not args.no_cache, call_kwargs=call_kwargs or None, method=args.method,
        axis_names=args.axis_names or None, output=output,
        cache=(args.store or True) if args.cache else False,
        **({"memory": True} if args.memory else {}),
        **({"remat": whole_model_remat} if whole_model_remat else {}),
        **({"attention_flops": args.attention_flops} if args.attention_flops != "full" else {}),
    )
    return render_as(report, args.format, _width(args))


def _mesh(text: str | None) -> dict[str, int]:
    """``--mesh data=2,model=4`` checked, with the devices it needs made ready:
    the CPU simulates them when JAX's backends have not started (they have not,
    in the CLI), so no re-execution is needed; an older jax that lacks the
    option is re-executed with XLA_FLAGS."""
    from xla_cost import sharding

    mesh = sharding.parse_mesh(text)
    count = sharding.mesh_devices(mesh)
    if count > 1:
        try:
            sharding.simulate_devices(count)
        except AttributeError:  # pragma: no cover - jax without jax_num_cpu_devices
            _reexec_with_devices(count)
    return mesh


def _reexec_with_devices(count: int) -> None:  # pragma: no cover - older jax only
    flag = f"--xla_force_host_platform_device_count={count}"
    if flag in os.environ.get("XLA_FLAGS", ""):
        return
    env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + flag).strip())
    os.execve(sys.executable, [sys.executable, "-m", "xla_cost", *sys.argv[1:]], env)


def _partition_rules(items: Sequence[str]) -> list[tuple[str, tuple[Any, ...]]]:
    """``REGEX=SPEC`` items (``mlp/fc1/kernel=None,model``) to ``[(regex, spec)]``."""
    import re

    from xla_cost.errors import InputError
    from xla_cost.sharding import MESH_AXES

    rules = []
    for item in items:
        pattern, sep, spec = item.rpartition("=")
        entries = tuple(None if e.strip() in ("None", "") else e.strip() for e in spec.split(","))
        bad = [e for e in entries if e is not None and e not in MESH_AXES]
        try:
            re.compile(pattern)
        except re.error:
            bad.append(pattern)
        if not sep or not pattern or bad:
            raise InputError(
                f"--param-sharding REGEX=SPEC with SPEC of {', '.join(MESH_AXES)} or None per dimension",
                repr(item), "Write e.g. --param-sharding 'mlp/fc1/kernel=None,model'.",
            )
        rules.append((pattern, entries))
    return rules


def _list(text: str, flag: str) -> list[Any]:
    """``"1,2,4"`` to ``[1, 2, 4]``: Python literals, else strings."""
    from xla_cost.errors import InputError

    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = tuple(part.strip() for part in text.split(","))
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    if not values or any(v == "" for v in values):
        raise InputError(f"{flag} as comma-separated values", repr(text), f"Write e.g. {flag} 1,2,4.")
    return values


def _sweep(args: argparse.Namespace) -> str:
    from xla_cost._text import render_as
    from xla_cost.configs import parse_shape
    from xla_cost.sweeps import sweep

    settings = {key: _list(value, f"--set {key}=") for key, value in _parse_settings_raw(args.settings).items()}
    check_output(args.layers)
    result = sweep(
        args.models, batch_sizes=_list(args.batch_sizes, "--batch-sizes"), settings=settings,
        optimizers=_list(args.optimizers, "--optimizers"), dtypes=_list(args.dtypes, "--dtypes"),
        counter=args.counter, per_layer=args.per_layer or args.depth is not None, depth=args.depth,
        input_shape=parse_shape(args.input_shape) if args.input_shape else None, store=args.store,
        jobs=args.jobs, scheduler=args.scheduler, progress=False if args.quiet else None,
        retry_failed=args.retry_failed,
    )
    if args.layers:
        _write(result.layers.to_csv(index=False), args.layers)
    return render_as(result, args.format, _width(args))


def _report(args: argparse.Namespace) -> str:
    from xla_cost.errors import InputError
    from xla_cost.reporting import check_out, write_report

    if args.model is None:
        for flag, value in (("--input-shape", args.input_shape), ("--input-dtype", args.input_dtype),
                            ("--set", args.settings or None), ("--optimizer", args.optimizer)):
            if value is not None:
                raise InputError(f"{flag} only with --model", f"{flag} without it",
                                 "Add --model PACKAGE.MODULE:ATTR, or drop the option.")
        paths = write_report(
            args.pages or "all", args.out, store=args.store, jobs=args.jobs,
            progress=False if args.quiet else None,
        )
    else:
        from xla_cost.configs import RunConfig, parse_shape

        if args.pages:
            raise InputError("page names or --model, not both", f"{' '.join(args.pages)} with --model",
                             "Run `xla-cost report NAME ...` and `xla-cost report --model ...` separately.")
        if args.store is not None or args.jobs is not None:
            raise InputError("--store and --jobs only for pages", "them with --model",
                             "Drop --store/--jobs: a one-model page runs one analysis here.")
        check_out(args.out)
        shape = parse_shape(args.input_shape) if args.input_shape else None
        run = RunConfig(
            args.model, shape[0] if shape else 1, _parse_settings(args.settings), optimizer=args.optimizer or "sgd",
            per_layer=True, input_shape=shape, input_dtype=args.input_dtype,
        )
        paths = write_report(run.run(), args.out)
    return "\n".join(str(p) for p in paths)


def _parse_settings_raw(settings: Sequence[str]) -> dict[str, str]:
    """``KEY=V,V`` items to ``{KEY: "V,V"}`` (the values parsed by `_list`)."""
    from xla_cost.errors import InputError

    out: dict[str, str] = {}
    for item in settings:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip().isidentifier() or not raw.strip():
            raise InputError("--set KEY=V,V,... with KEY an argument name", repr(item), "Write e.g. --set depth=0,1,3.")
        out[key.strip()] = raw.strip()
    return out


def _width(args: argparse.Namespace) -> int | None:
    """Written to a file, a table keeps its natural width, whatever the terminal's."""
    from xla_cost._text import UNLIMITED

    return UNLIMITED if getattr(args, "output", None) is not None else None


def _models(args: argparse.Namespace) -> str:
    from xla_cost import zoo as models

    return models.render_zoo(args.format, width=_width(args))


def check_output(output: str | None) -> None:
    """Raises `InputError` unless ``output`` names a file that can be written.

    Checked before any analysis runs, so that a typo costs nothing: not empty,
    not a directory, in an existing directory that is writable, and not an
    existing file that is read-only.
    """
    from xla_cost.errors import InputError

    if output is None:
        return
    fix = "Pass --output PATH to a file in a writable directory, e.g. --output report.json."
    if not output.strip():
        raise InputError("--output naming a file", "an empty name", fix)
    if os.path.isdir(output):
        raise InputError("--output naming a file", f"{output!r}, a directory", fix)
    directory = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(directory):
        raise InputError(
            "--output in an existing directory", repr(output), f"Create {directory!r} first."
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError("--output in a writable directory", f"{output!r} ({directory!r} is not writable)", fix)
    if os.path.exists(output) and not os.access(output, os.W_OK):
        raise InputError("--output a file that can be written", f"{output!r}, which is read-only", fix)


def _file_mode(output: str) -> int:
    """The mode a new file gets (0666 less the umask), or the replaced file's mode."""
    try:
        return os.stat(output).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _write(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    # Write next to the target and rename: no half-written file on failure.
    directory = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".xla-cost-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text if text.endswith("\n") else text + "\n")
        os.chmod(tmp, _file_mode(output))  # mkstemp makes it 0600
        os.replace(tmp, output)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


EXIT_INTERRUPTED = 130
"""The exit code after Ctrl-C (128 + SIGINT), as shells report it."""


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the exit code (0 ok, 2 bad input, 130 interrupted)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    debug = getattr(args, "debug", False)
    try:
        from xla_cost.errors import XlaCostError

        output = getattr(args, "output", None)
        try:
            check_output(output)
            command = {
                "analyze": _analyze, "sweep": _sweep, "models": _models, "report": _report,
                "scaling": _scaling, "estimate": _estimate, "fit": _fit,
            }[args.command]
            text = command(args)
            _write(text, output)
        except XlaCostError as exc:
            if debug:
                raise
            print(f"xla-cost: error: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:  # noqa: BLE001 - one line unless --debug
            if debug:
                raise
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            print(f"xla-cost: error: {type(exc).__name__}: {first} (rerun with --debug for the traceback)", file=sys.stderr)
            return 2
        return 0
    except KeyboardInterrupt:
        # _write removes its temporary file; nothing else is on disk yet.
        print("xla-cost: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
