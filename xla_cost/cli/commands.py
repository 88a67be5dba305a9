"""One function per command: arguments in, the library's answer as text out."""

from __future__ import annotations

import argparse
import ast
import os
import sys
from collections.abc import Sequence
from typing import Any

from xla_cost.cli.output import check_output, width, write
from xla_cost.present import progress


_QUIET_IN_JSON = ("estimate",)
"""Commands that show no progress line with ``--format json`` either (their output is for a program)."""


def _progress(command: Any) -> Any:
    """The command under a progress line on a terminal (stage, steps, elapsed, ETA), none with --quiet
    (nor, for `_QUIET_IN_JSON`, with --format json)."""
    def run(args: argparse.Namespace) -> str:
        quiet = getattr(args, "quiet", False) or (
            command.__name__ in _QUIET_IN_JSON and getattr(args, "format", None) == "json")
        with progress.shown(command.__name__, False if quiet else None):
            return command(args)

    run.__name__, run.__doc__ = command.__name__, command.__doc__
    return run

__all__ = ["analyze", "step", "sweep", "store", "models", "report", "scaling", "estimate", "fit", "diff"]


@_progress
def analyze(args: argparse.Namespace) -> str:
    from xla_cost.errors import InputError
    from xla_cost.present.formats import render_as
    from xla_cost.runs.configs import RunConfig, remat_placement

    if args.store is not None and not args.cache:  # it would be ignored: nothing is stored without --cache
        raise InputError("--store only with --cache (the store --cache reads and writes)",
                         f"--store {args.store} without --cache", "Add --cache, or drop --store.")
    if args.compare_cpu:  # refused before the model is built: --compare-cpu needs --target
        from xla_cost.analysis.options import AnalysisOptions

        AnalysisOptions(target=args.target, compare_cpu=True).check()
    config = _parse_settings(args.settings)
    call_kwargs = _parse_settings(args.call_kwargs, "--call-kwarg", "train=True")
    output = args.output_index
    if output is not None:
        output = int(output) if output.lstrip("-").isdigit() else output
    shape, batch = _input_batch(args)
    batch = batch if batch is not None else _mesh_batch(args.mesh)
    rules = _partition_rules(args.param_sharding)
    mesh = _mesh(args.mesh, batch, None if args.compare_cpu else args.target)  # the CPU proxy needs its devices
    if args.remat != "none" and "remat" in config:  # two policies: refused, not one of them dropped
        raise InputError("one remat policy: --remat or --set remat=", f"--remat {args.remat} with --set remat="
                         f"{config['remat']}", "Keep one of them (a zoo GPT takes either, per block).")
    config, remat = remat_placement(args.model, args.remat if args.remat != "none" else None, config)
    run = RunConfig(
        args.model, batch, config, optimizer=args.optimizer, dtype=args.dtype,
        counter=args.counter, per_layer=args.per_layer, depth=args.depth, input_shape=shape,
        input_dtype=args.input_dtype, exact_train_step=args.exact_train_step, mesh=mesh,
    )
    report = run.run(
        **({"param_sharding": rules} if rules else {}),
        timed=args.time, peak_tflops=args.peak_tflops, peak_bandwidth=args.peak_bandwidth,
        compilation_cache=not args.no_cache, call_kwargs=call_kwargs or None, method=args.method,
        axis_names=args.axis_names or None, output=output,
        cache=(args.store or True) if args.cache else False,
        **({"memory": True} if args.memory else {}),
        **remat,
        **({"attention_flops": args.attention_flops} if args.attention_flops != "full" else {}),
        **({"target": args.target} if args.target is not None else {}),
        **({"compare_cpu": True} if args.compare_cpu else {}),
    )
    return render_as(report, args.format, width(args))


@_progress
def step(args: argparse.Namespace) -> str:
    from xla_cost.analysis.user_step import analyze_step
    from xla_cost.present.formats import render_as
    from xla_cost.step.loading import load_attribute, step_arguments

    function = load_attribute(args.function, "the step")
    arguments = step_arguments(load_attribute(args.make_args, "--args", example="train.py:make_args"), args.make_args)
    report = analyze_step(
        function, *arguments, per_layer=args.per_layer, depth=args.depth, counter=args.counter,
        axis_names=args.axis_names or None, timed=args.time, memory=args.memory,
        **({"target": args.target} if args.target is not None else {}),
        **({"compare_cpu": True} if args.compare_cpu else {}),
    )
    return render_as(report, args.format, width(args))


def sweep(args: argparse.Namespace) -> str:
    from xla_cost.present.formats import render_as
    from xla_cost.runs.configs import parse_shape
    from xla_cost.runs.sweeps import sweep

    settings = {key: _list(value, f"--set {key}=") for key, value in _parse_settings_raw(args.settings).items()}
    check_output(args.layers, "--layers", "layers.csv")
    result = sweep(
        args.models, batch_sizes=_ints(args.batch_sizes, "--batch-sizes"), settings=settings,
        optimizers=_list(args.optimizers, "--optimizers"), dtypes=_list(args.dtypes, "--dtypes"),
        counter=args.counter, per_layer=args.per_layer or args.depth is not None or args.layers is not None,
        depth=args.depth,
        input_shape=parse_shape(args.input_shape) if args.input_shape is not None else None,
        input_dtype=args.input_dtype, store=args.store, jobs=args.jobs, scheduler=args.scheduler, progress=False if args.quiet else None,
        retry_failed=args.retry_failed, target=args.target,
    )
    result.raise_if_all_failed()  # nothing analysed: no table, no --output, no header-only --layers file
    if args.layers:
        write(result.layers.to_csv(index=False), args.layers)
    return render_as(result, args.format, width(args))


def store(args: argparse.Namespace) -> str:
    from xla_cost.analysis.report import Report
    from xla_cost.errors import InputError
    from xla_cost.present.formats import render_as
    from xla_cost.runs.stores import store_contents, store_delete, store_vacuum

    if args.key is not None and args.key_prefix is not None and args.key != args.key_prefix:
        raise InputError("one KEY: as the argument or as --key", f"{args.key!r} and --key {args.key_prefix!r}",
                         "Give one of them.")
    prefix = args.key_prefix if args.key_prefix is not None else args.key
    if args.action in ("list", "show", "vacuum") and args.everything:
        raise InputError("--all only with delete", f"store {args.action} --all", "Drop --all.")
    if args.action == "vacuum" and (prefix is not None or args.failed or args.model is not None):
        raise InputError("no selection with vacuum (it compacts the whole file)", "KEY, --key, --failed or --model",
                         "Run `xla-cost store delete ...` first, then `xla-cost store vacuum`.")
    if args.action == "list":
        found = store_contents(args.store, failed=args.failed, model=args.model, key=prefix)
        return render_as(found, args.format, width(args))
    if args.action == "show":
        if not prefix:
            raise InputError("a KEY to show (as `xla-cost store list` prints it)", "none", "Run: xla-cost store show KEY.")
        rows = store_contents(args.store, key=prefix).rows
        if len(rows) != 1:
            raise InputError("a KEY that names one stored row", f"{prefix!r} matching {len(rows)}",
                             "Give more of the key (xla-cost store list shows them).")
        row = rows[0]
        if row.report is None:
            return f"{row.key[:12]} {row.model}: failed: {row.error}\n"
        return render_as(Report.from_dict(row.report), args.format, width(args))
    if args.action == "delete":
        removed = store_delete(args.store, failed=args.failed, model=args.model, key=prefix,
                               everything=args.everything)
        return f"deleted {removed} stored result{'s' if removed != 1 else ''}\n"
    before, after = store_vacuum(args.store)
    return f"vacuumed: {before:,} bytes before, {after:,} after\n"


def diff(args: argparse.Namespace) -> str:
    from xla_cost.analysis.diff import diff
    from xla_cost.errors import InputError
    from xla_cost.present.formats import render_as

    if args.output not in (None, "-") and any(
        os.path.exists(args.output) and os.path.exists(path) and os.path.samefile(args.output, path)
        for path in (args.a, args.b)
    ):
        raise InputError("--output other than the reports compared", repr(args.output),
                         "Write the diff to a file of its own, e.g. --output diff.txt.")
    return render_as(diff(args.a, args.b, top=args.top), args.format, width(args))


def models(args: argparse.Namespace) -> str:
    from xla_cost import zoo as models

    return models.render_zoo(args.format, width=width(args))


def report(args: argparse.Namespace) -> str:
    from xla_cost.errors import InputError
    from xla_cost.study.write import check_out, write_report

    if args.model is None:
        for flag, value in (("--input-shape", args.input_shape), ("--input-dtype", args.input_dtype),
                            ("--set", args.settings or None), ("--optimizer", args.optimizer),
                            ("--target", args.target)):
            if value is not None:
                raise InputError(f"{flag} only with --model", f"{flag} without it",
                                 "Add --model FILE.py:ATTR (or package.module:ATTR, a zoo name), or drop the option.")
        if not args.pages:  # every page runs for minutes: asked for by name only
            from xla_cost.study.pages import PAGES

            raise InputError("page names, all, or --model", "`xla-cost report` with none of them",
                             "Run `xla-cost report all` for every page (it runs for minutes), "
                             f"`xla-cost report NAME ...` for some ({', '.join(PAGES)}), "
                             "or `xla-cost report --model FILE.py:ATTR` for one model's page.")
        paths = write_report(
            args.pages, args.out, store=args.store, jobs=args.jobs,
            progress=False if args.quiet else None,
        )
    else:
        from xla_cost.choices import DEFAULT_OPTIMIZER
        from xla_cost.runs.configs import RunConfig, parse_shape

        if args.pages:
            raise InputError("page names or --model, not both", f"{' '.join(args.pages)} with --model",
                             "Run `xla-cost report NAME ...` and `xla-cost report --model ...` separately.")
        if args.store is not None or args.jobs is not None:
            raise InputError("--store and --jobs only for pages", "them with --model",
                             "Drop --store/--jobs: a one-model page runs one analysis here.")
        check_out(args.out)
        shape = parse_shape(args.input_shape) if args.input_shape is not None else None
        run = RunConfig(
            args.model, shape[0] if shape else 1, _parse_settings(args.settings), optimizer=args.optimizer or DEFAULT_OPTIMIZER,
            per_layer=True, input_shape=shape, input_dtype=args.input_dtype, target=args.target,
        )
        paths = write_report(run.run(), args.out)
    return "\n".join(str(p) for p in paths)


@_progress
def scaling(args: argparse.Namespace) -> str:
    from xla_cost.present.formats import render_as
    from xla_cost.runs.scaling import scaling

    devices = _list(args.devices, "--devices")
    check_output(args.plot, "--plot", "scaling.png", text=False)
    result = scaling(
        args.model, devices, mesh_axis=args.mesh_axis, global_batch=args.global_batch, bound=args.bound,
        store=args.store, mesh=args.mesh, micro_batches=args.micro_batches, chunks=args.chunks, **_run_options(args),
        **_hardware(args),
    )
    if args.plot:
        result.plot(args.plot)
    return render_as(result, args.format, width(args))


@_progress
def estimate(args: argparse.Namespace) -> str:
    from xla_cost.present.formats import render_as
    from xla_cost.runs.estimates import estimate

    result = estimate(
        args.model, samples=_amount(args.samples, "--samples"), epochs=args.epochs,
        tokens=_amount(args.tokens, "--tokens"), bound=args.bound, store=args.store, devices=args.devices, mesh_axis=args.mesh_axis,
        mesh=args.mesh, micro_batches=args.micro_batches, chunks=args.chunks, **_run_options(args), **_hardware(args),
    )
    return render_as(result, args.format, width(args))


@_progress
def fit(args: argparse.Namespace) -> str:
    from xla_cost.present.formats import render_as
    from xla_cost.runs.configs import parse_shape
    from xla_cost.runs.fit import max_batch_size

    result = max_batch_size(
        args.model, device=args.device, device_memory_bytes=args.device_memory, target=args.target,
        memory_fraction=args.memory_fraction, mesh=_mesh(args.mesh, None, args.target) or None, progress=not args.quiet,
        optimizer=args.optimizer, max_batch=args.max_batch,
        dtype=args.dtype, config=_parse_settings(args.settings),
        input_shape=parse_shape(args.input_shape) if args.input_shape is not None else None,
        input_dtype=args.input_dtype,
    )
    return render_as(result, args.format, width(args))


def _hardware(args: argparse.Namespace) -> dict[str, Any]:
    """The `xla_cost.Hardware` fields the command line sets (``mfu`` and
    ``overlap`` None unless given: a prediction, scheduled; ``device`` only
    where given: h100, or ``--target``'s device, one named beside it checked)."""
    device = args.device
    if args.target is not None:
        from xla_cost.runs.scaling import target_device

        device = target_device(args.target, args.device)
    return dict(interconnect=args.interconnect, node=args.node, node_size=args.node_size, nics=args.nics,
                bandwidth=args.bandwidth, overlap=args.overlap, algorithm=args.algorithm, mfu=args.mfu,
                **({"device": device} if device is not None else {}))


def _input_batch(args: argparse.Namespace) -> tuple[tuple[int, ...] | None, int | None]:
    """``--input-shape`` parsed, and the batch: ``--batch-size``, else the shape's first axis, else None
    (`xla_cost.runs.configs.input_batch`, the Python functions' rule); the two given and different are
    refused (which batch is not guessed)."""
    from xla_cost.errors import InputError
    from xla_cost.runs.configs import input_batch, parse_shape

    shape = parse_shape(args.input_shape) if args.input_shape is not None else None
    if shape and args.batch_size is not None and args.batch_size != shape[0]:
        raise InputError("--batch-size equal to --input-shape's first (batch) axis, or one of the two",
                         f"--batch-size {args.batch_size} with --input-shape {args.input_shape}",
                         f"Drop --batch-size (the batch is {shape[0]}), or give --input-shape "
                         f"{','.join(map(str, (args.batch_size, *shape[1:])))}.")
    return shape, input_batch(args.batch_size, shape)


def _run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The run's `xla_cost.RunConfig` fields the command line sets, as the Python functions take them
    (``batch_size`` only when given: `xla_cost.estimate` and `xla_cost.scaling` take the batch from
    ``input_shape``'s first axis without it, and `xla_cost.scaling` refuses it beside ``global_batch``)."""
    shape, _ = _input_batch(args)  # (a --batch-size beside another --input-shape batch refused)
    given = {} if args.batch_size is None else {"batch_size": args.batch_size}
    return dict(given, optimizer=args.optimizer, dtype=args.dtype, config=_parse_settings(args.settings),
                input_shape=shape, input_dtype=args.input_dtype, target=args.target)


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
        if key in config:
            _twice(flag, key, config[key], raw.strip())
        config[key] = _literal(raw.strip(), f"{flag} {key}=")
    return config


def _twice(flag: str, key: str, first: Any, second: str) -> None:
    """Refuses a key given twice (the last would win unseen)."""
    from xla_cost.errors import InputError

    raise InputError(f"each {flag} key once", f"{key} twice ({flag} {key}={first}, then {key}={second})",
                     f"Keep one {flag} {key}=... (the last would win unseen); `xla-cost sweep` takes several "
                     f"values as {flag} {key}={first},{second}." if flag == "--set" else
                     f"Keep one {flag} {key}=... (the last would win unseen).")


_LITERAL_OPENERS = ("[", "(", "{", "'", '"')
"""How a value that means to be a Python literal (a list, tuple, dict or quoted string) starts."""


def _literal(text: str, flag: str) -> Any:
    """``text`` as a Python literal, else as the string itself; a value that
    starts like a list, tuple, dict or quoted string must parse as one."""
    from xla_cost.errors import InputError

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        if text.startswith(_LITERAL_OPENERS):
            reason = exc.msg if isinstance(exc, SyntaxError) else str(exc)
            raise InputError(f"{flag}VALUE as a Python literal", f"{text!r} ({reason})",
                             f"Close its brackets and quotes (e.g. {flag}[[1, 2]]), or drop the opening one "
                             "for a plain string.") from exc
        return text


def _parse_settings_raw(settings: Sequence[str]) -> dict[str, str]:
    """``KEY=V,V`` items to ``{KEY: "V,V"}`` (the values parsed by `_list`)."""
    from xla_cost.errors import InputError

    out: dict[str, str] = {}
    for item in settings:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip().isidentifier() or not raw.strip():
            raise InputError("--set KEY=V,V,... with KEY an argument name", repr(item), "Write e.g. --set depth=0,1,3.")
        if key.strip() in out:
            _twice("--set", key.strip(), out[key.strip()], raw.strip())
        out[key.strip()] = raw.strip()
    return out


_SUFFIXES = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
"""What a count may end in, as planners write them: 15T tokens, 1.2M samples (B and G both a billion)."""


def _amount(text: str | None, flag: str) -> float | None:
    """A count as a number (``3e11``, ``300_000_000_000``, ``15,000,000``) or with a
    suffix of `_SUFFIXES` (``15T``, ``300B``); None for None. Anything else refused in one line."""
    from xla_cost.errors import InputError

    if text is None:
        return None
    plain = text.strip().replace(",", "")
    scale = _SUFFIXES.get(plain[-1:], 1.0)
    try:
        return float(plain[:-1] if scale != 1.0 else plain) * scale
    except ValueError:
        raise InputError(f"{flag} as a number, in full or with a suffix k, M, B (or G) or T",
                         repr(text), f"Write e.g. {flag} 3e11, {flag} 300B or {flag} 300_000_000_000.") from None


def _ints(text: str, flag: str) -> list[int]:
    """``"1,2,4"`` to ``[1, 2, 4]``; an item that is not a whole number refused by name."""
    from xla_cost.errors import InputError

    values = []
    for part in text.split(","):
        try:
            values.append(int(part.strip()))
        except ValueError:
            raise InputError(f"{flag} as comma-separated whole numbers", f"{part.strip()!r} in {text!r}",
                             f"Write e.g. {flag} 1,2,4.") from None
    return values


def _list(text: str, flag: str) -> list[Any]:
    """``"1,2,4"`` to ``[1, 2, 4]``: Python literals, else strings."""
    from xla_cost.errors import InputError

    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        _literal(text, flag if flag.endswith("=") else f"{flag} ")  # refuses a literal that does not parse
        value = tuple(part.strip() for part in text.split(","))
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    if not values or any(v == "" for v in values):
        raise InputError(f"{flag} as comma-separated values", repr(text), f"Write e.g. {flag} 1,2,4.")
    return values


def _mesh(text: str | None, batch: int | None = None, target: str | None = None) -> dict[str, int]:
    """``--mesh data=2,model=4`` checked (against ``batch``, when it is known,
    and the devices the CPU can simulate) before anything runs, with the
    devices it needs made ready: the CPU simulates them when JAX's backends
    have not started (they have not, in the CLI), so no re-execution is
    needed; an older jax that lacks the option is re-executed with XLA_FLAGS.
    With a ``--target`` the target's topology has the devices: none simulated."""
    from xla_cost.parallel import sharding

    mesh = sharding.parse_mesh(text)
    if batch is not None:
        sharding.check_batch_split(mesh, batch)
    count = sharding.mesh_devices(mesh)
    if target is not None:
        sharding.check_device_count(count)
    elif count > 1:
        try:
            sharding.simulate_devices(count)
        except AttributeError:  # pragma: no cover - jax without jax_num_cpu_devices
            _reexec_with_devices(count)
    return mesh


def _mesh_batch(text: str | None) -> int:
    """The default batch: 1, or one example per device of the mesh's batch axes (``data=4``: 4)."""
    import math

    from xla_cost.parallel import sharding

    sizes = sharding.parse_mesh(text)
    return math.prod(sizes.get(axis, 1) for axis in sharding.BATCH_AXES)


def _reexec_with_devices(count: int) -> None:  # pragma: no cover - older jax only
    flag = f"--xla_force_host_platform_device_count={count}"
    if flag in os.environ.get("XLA_FLAGS", ""):
        return
    env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + flag).strip())
    os.execve(sys.executable, [sys.executable, "-m", "xla_cost", *sys.argv[1:]], env)


def _partition_rules(items: Sequence[str]) -> list[tuple[str, tuple[Any, ...]]]:
    """``REGEX=SPEC`` items (``mlp/fc1/kernel=None,model``) to ``[(regex, spec)]``."""
    from xla_cost.errors import InputError
    from xla_cost.parallel.sharding import MESH_AXES

    from xla_cost.parallel.sharding import compile_rules

    rules = []
    for item in items:
        pattern, sep, spec = item.rpartition("=")
        entries = tuple(None if e.strip() in ("None", "") else e.strip() for e in spec.split(","))
        bad = [e for e in entries if e is not None and e not in MESH_AXES]
        if not sep or not pattern or bad:
            raise InputError(
                f"--param-sharding REGEX=SPEC with SPEC of {', '.join(MESH_AXES)} or None per dimension",
                repr(item), "Write e.g. --param-sharding 'mlp/fc1/kernel=None,model'.",
            )
        rules.append((pattern, entries))
    compile_rules(rules, "--param-sharding")
    return rules
