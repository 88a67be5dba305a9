"""The ``xla-cost`` command line: parse, call the library, print or write.

Every feature here is a call to the public API (`xla_cost.analyze`,
`models.build_model`, ...); the CLI only translates arguments and output.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
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
    from xla_cost.analysis import COUNTERS
    from xla_cost.workload import OPTIMIZERS
    from xla_cost.zoo import DTYPES

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
    analyze.add_argument("--exact-train-step", action="store_true", help="compile the train step as one program (exact train-step memory; about twice the compile time) instead of adding grad and update")
    analyze.add_argument("--no-cache", action="store_true", help="do not use JAX's persistent compilation cache (also: XLA_COST_NO_CACHE=1; location: XLA_COST_CACHE_DIR, default ~/.cache/xla_cost/jax)")
    analyze.add_argument("--time", action="store_true", help="also run each phase on real random arrays on the default device and time it (seconds, FLOP/s, MFU, roofline, forward/backward/update split)")
    analyze.add_argument("--peak-tflops", type=float, default=None, metavar="T", help="the device's peak TFLOP/s for MFU and the roofline (default: a table of accelerators; measured on a CPU)")
    analyze.add_argument("--peak-bandwidth", type=float, default=None, metavar="B", help="the device's memory bandwidth in bytes/s, e.g. 3.35e12")
    analyze.add_argument("--call-kwarg", dest="call_kwargs", action="append", default=[], metavar="KEY=VALUE", help="a keyword argument of the model's call, e.g. train=True (repeatable; random keys and training flags are supplied already)")
    analyze.add_argument("--method", default=None, metavar="NAME", help="call this method of the module instead of __call__")
    analyze.add_argument("--axis-name", dest="axis_names", action="append", default=[], metavar="NAME", help="bind a collective axis name the model uses (BatchNorm(axis_name=...)); names are also detected (repeatable)")
    analyze.add_argument("--output-index", default=None, metavar="I|KEY", help="for a model returning (logits, loss) or a dict: the output the default loss takes, an index or a key")
    analyze.add_argument("--format", default="table", choices=FORMATS)
    analyze.add_argument("--output", default=None, metavar="FILE", help="write to FILE instead of stdout")
    analyze.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    models = sub.add_parser("models", help="list the model zoo")
    models.add_argument("--format", default="table", choices=FORMATS)
    models.add_argument("--output", default=None, metavar="FILE", help="write to FILE instead of stdout")
    models.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


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


def _parse_shape(text: str) -> tuple[int, ...]:
    from xla_cost.errors import InputError

    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise InputError(
            "--input-shape as positive integers B,D1,... (batch first)", repr(text),
            "Write e.g. --input-shape 8,224,224,3.",
        )
    return shape


def _accepts_dtype(target: Any) -> bool:
    """Whether a Module class or factory takes a ``dtype`` argument."""
    import dataclasses as dc

    if inspect.isclass(target) and dc.is_dataclass(target):  # a Linen module class
        return any(f.name == "dtype" for f in dc.fields(target))
    try:
        init = target.__init__ if inspect.isclass(target) else target
        return "dtype" in inspect.signature(init).parameters
    except (TypeError, ValueError):
        return False


def _input_dtype(name: str) -> Any:
    from xla_cost.errors import InputError

    try:
        import jax.numpy as jnp

        return jnp.dtype(name)
    except TypeError as exc:
        raise InputError(
            "--input-dtype as a dtype name (float32, bfloat16, int32, ...)", repr(name),
            "Use e.g. --input-dtype int32 for token ids.",
        ) from exc


def _load_custom(spec: str, config: dict[str, Any], dtype: str = "float32") -> tuple[Any, str, bool]:
    """``package.module:attribute`` -> a module instance, its name, and whether
    it was built to compute in ``dtype`` (a class or factory with a ``dtype``)."""
    from xla_cost.errors import InputError

    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
        target = getattr(module, attribute)
    except (ImportError, AttributeError) as exc:
        raise InputError(
            "MODEL as a zoo name or an importable package.module:attribute",
            f"{spec!r} ({exc})", "Check the module path and that it is on PYTHONPATH.",
        ) from exc
    name = attribute
    import flax.linen as nn
    from flax import nnx

    if isinstance(target, (nn.Module, nnx.Module)):
        if config:
            raise InputError(
                "--set only with a Module class or a factory function",
                f"an instance of {type(target).__name__}", "Drop --set or point at the class.",
            )
        return target, name, False
    if not callable(target):
        raise InputError(
            "a Module class, instance or zero-argument factory",
            f"{type(target).__name__} {spec!r}", "Point MODEL at one of those.",
        )
    cast = dtype != "float32" and "dtype" not in config and _accepts_dtype(target)
    if cast:
        import jax.numpy as jnp

        config = {**config, "dtype": jnp.dtype(dtype)}
    try:
        if inspect.isclass(target) and issubclass(target, nnx.Module):
            # Build NNX modules abstractly: nothing the size of the model is allocated.
            needs_rngs = "rngs" in inspect.signature(target.__init__).parameters and "rngs" not in config
            cls = target
            target = nnx.eval_shape(
                lambda: cls(**config, rngs=nnx.Rngs(0)) if needs_rngs else cls(**config)
            )
        else:
            target = target(**config)
    except TypeError as exc:
        raise InputError(
            f"arguments that {attribute} accepts", repr(config), f"Check --set ({exc})."
        ) from exc
    return target, name, cast


def _analyze(args: argparse.Namespace) -> str:
    import dataclasses

    import jax

    from xla_cost import zoo as models
    from xla_cost._text import render_as
    from xla_cost.analysis import analyze
    from xla_cost.errors import InputError

    config = _parse_settings(args.settings)
    call_kwargs = _parse_settings(args.call_kwargs, "--call-kwarg", "train=True")
    output = args.output_index
    if output is not None:
        output = int(output) if output.lstrip("-").isdigit() else output
    shape = _parse_shape(args.input_shape) if args.input_shape else None
    notes: list[str] = []
    dtype: str | None = args.dtype
    if ":" in args.model:
        model, name, cast = _load_custom(args.model, config, args.dtype)
        if shape is None:
            raise InputError(
                "--input-shape for a custom model", "none", "Add e.g. --input-shape 8,224,224,3."
            )
        import jax.numpy as jnp

        if args.batch_size is not None:
            shape = (args.batch_size, *shape[1:])
        inputs = jax.ShapeDtypeStruct(shape, _input_dtype(args.input_dtype or args.dtype))
        if args.dtype != "float32" and not cast:
            dtype = None  # the report reads the dtype the model computes in
            notes.append(
                f"--dtype {args.dtype}: only the inputs were cast; {name} is not a class or "
                "factory with a dtype argument, so its layers compute in their own dtype "
                "(see dtype); pass the model's own dtype option with --set to change that"
            )
    else:
        spec = models.get_spec(args.model)
        name = spec.name
        model = models.build_model(name, dtype=args.dtype, **config)
        batch = args.batch_size if args.batch_size is not None else (shape[0] if shape else 1)
        inputs = models.example_inputs(name, batch, dtype=args.dtype, **config)
        if shape is not None:
            inputs = jax.ShapeDtypeStruct((batch, *shape[1:]), inputs.dtype)
    report = analyze(
        model, inputs, optimizer=args.optimizer, per_layer=args.per_layer or args.depth is not None,
        depth=args.depth, counter=args.counter, name=name, config=config, dtype=dtype,
        timed=args.time, peak_tflops=args.peak_tflops, peak_bandwidth=args.peak_bandwidth,
        exact_train_step=args.exact_train_step, compilation_cache=not args.no_cache,
        call_kwargs=call_kwargs or None, method=args.method, axis_names=args.axis_names or None,
        output=output,
    )
    if notes:
        report = dataclasses.replace(report, notes=(*notes, *report.notes))
    return render_as(report, args.format, _width(args))


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
            text = _analyze(args) if args.command == "analyze" else _models(args)
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
