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

__all__ = ["main", "build_parser"]

FORMATS = ("table", "json", "csv", "markdown")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"xla-cost: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
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
    analyze.add_argument("--optimizer", default="sgd", help="sgd, momentum, nesterov, adam, adamw, rmsprop, adagrad, lion, adafactor, lamb")
    analyze.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="computation dtype (parameters stay float32)")
    analyze.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE", help="a model argument, e.g. depth=10 (repeatable)")
    analyze.add_argument("--input-shape", default=None, metavar="B,D1,...", help="input shape including the batch axis (required for custom models)")
    analyze.add_argument("--per-layer", action="store_true", help="attribute forward, backward and update FLOP to each module")
    analyze.add_argument("--depth", type=int, default=None, metavar="N", help="merge per-layer rows to the first N components of the module path (implies --per-layer; default: one row per module that holds parameters)")
    analyze.add_argument("--counter", default="xla", choices=("xla", "jaxpr"), help="xla: compile and correct XLA's figures for loops (default); jaxpr: count the jaxpr alone, no compilation (fast; no bytes or memory)")
    analyze.add_argument("--time", action="store_true", help="also run each phase on real random arrays on the default device and time it (seconds, FLOP/s, MFU, roofline, forward/backward/update split)")
    analyze.add_argument("--peak-tflops", type=float, default=None, metavar="T", help="the device's peak TFLOP/s for MFU and the roofline (default: a table of accelerators; measured on a CPU)")
    analyze.add_argument("--peak-bandwidth", type=float, default=None, metavar="B", help="the device's memory bandwidth in bytes/s, e.g. 3.35e12")
    analyze.add_argument("--format", default="table", choices=FORMATS)
    analyze.add_argument("--output", default=None, metavar="FILE", help="write to FILE instead of stdout")
    analyze.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    models = sub.add_parser("models", help="list the model zoo")
    models.add_argument("--format", default="table", choices=FORMATS)
    models.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def _parse_settings(settings: Sequence[str]) -> dict[str, Any]:
    from xla_cost.errors import InputError

    config: dict[str, Any] = {}
    for item in settings:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier() or not raw.strip():
            raise InputError(
                "--set KEY=VALUE with KEY a model argument", repr(item), "Write e.g. --set depth=10."
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


def _load_custom(spec: str, config: dict[str, Any]) -> tuple[Any, str]:
    """``package.module:attribute`` -> a module instance and its name."""
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
        return target, name
    if not callable(target):
        raise InputError(
            "a Module class, instance or zero-argument factory",
            f"{type(target).__name__} {spec!r}", "Point MODEL at one of those.",
        )
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
    return target, name


def _analyze(args: argparse.Namespace) -> str:
    import jax

    from xla_cost import zoo as models
    from xla_cost.analysis import analyze
    from xla_cost.errors import InputError

    config = _parse_settings(args.settings)
    if args.batch_size is not None and args.batch_size < 1:
        raise InputError("--batch-size of at least 1", str(args.batch_size), "Use --batch-size 1 or more.")
    for flag, value in (("--peak-tflops", args.peak_tflops), ("--peak-bandwidth", args.peak_bandwidth)):
        if value is not None and not value > 0:
            raise InputError(f"{flag} > 0", str(value), f"Give the device's peak, e.g. {flag} 989.")
    if args.depth is not None and args.depth < 1:
        raise InputError("--depth of at least 1", str(args.depth), "Use --depth 1 for top-level modules.")
    shape = _parse_shape(args.input_shape) if args.input_shape else None
    if ":" in args.model:
        model, name = _load_custom(args.model, config)
        if shape is None:
            raise InputError(
                "--input-shape for a custom model", "none", "Add e.g. --input-shape 8,224,224,3."
            )
        import jax.numpy as jnp

        if args.batch_size is not None:
            shape = (args.batch_size, *shape[1:])
        inputs = jax.ShapeDtypeStruct(shape, jnp.bfloat16 if args.dtype == "bfloat16" else jnp.float32)
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
        depth=args.depth, compile=args.counter == "xla", name=name, config=config, dtype=args.dtype,
        time=args.time, peak_tflops=args.peak_tflops, peak_bandwidth=args.peak_bandwidth,
    )
    return {
        "table": report.to_table,
        "json": report.to_json,
        "csv": report.to_csv,
        "markdown": report.to_markdown,
    }[args.format]()


def _models(args: argparse.Namespace) -> str:
    from xla_cost import zoo as models

    return models.render_zoo(args.format)


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
        os.replace(tmp, output)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the exit code (0 ok, 2 bad input)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    debug = getattr(args, "debug", False)
    try:
        from xla_cost.errors import XlaCostError

        if args.output if args.command == "analyze" else None:
            directory = os.path.dirname(os.path.abspath(args.output))
            if not os.path.isdir(directory):
                print(
                    f"xla-cost: error: Expected --output in an existing directory, got "
                    f"{args.output!r} instead. Create {directory!r} first.",
                    file=sys.stderr,
                )
                return 2
        text = _analyze(args) if args.command == "analyze" else _models(args)
        _write(text, getattr(args, "output", None))
        return 0
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
