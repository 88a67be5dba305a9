"""``xla-cost``'s entry point: parse, run the command, print its output or one error line."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from xla_cost.cli import commands
from xla_cost.errors import XlaCostError
from xla_cost.cli.output import check_output, write
from xla_cost.cli.parser import build_parser

__all__ = ["main", "EXIT_INTERRUPTED"]


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
        output = getattr(args, "output", None)
        try:
            check_output(output)
            text = getattr(commands, args.command)(args)  # each subcommand has its function
            write(text, output)
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
        # write removes its temporary file; nothing else is on disk yet.
        print("xla-cost: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
