"""``xla-cost``'s entry point: parse, run the command, print its output or one error line."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from xla_cost.cli import commands
from xla_cost.errors import XlaCostError
from xla_cost.cli.interrupts import Interrupts, standard_error
from xla_cost.cli.output import check_distinct, check_output, prints_to_stderr, write
from xla_cost.cli.parser import build_parser

__all__ = ["main", "console", "EXIT_INTERRUPTED"]


EXIT_INTERRUPTED = 130
"""The exit code after Ctrl-C (128 + SIGINT), as shells report it."""


def main(argv: Sequence[str] | None = None, *, exit_when_stuck: bool = False) -> int:
    """Runs the CLI; returns the exit code (0 ok, 2 bad input, 130 interrupted).

    After Ctrl-C the exit code is 130 and the output is not written, whatever
    the command did with the interrupt (`Interrupts`); a file already being
    renamed into place when it came is written whole, and the code is 0.

    Args:
      argv: the arguments (None: ``sys.argv[1:]``).
      exit_when_stuck: after Ctrl-C that Python cannot deliver for
        `xla_cost.cli.interrupts.STUCK_AFTER_S` (the main thread in a compile), say the one line and
        end the process with 130 at once (`console`); else wait for the call.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    with standard_error() as say:
        interrupts = Interrupts(stuck=(lambda: _end_now(say)) if exit_when_stuck else None)
        try:
            with interrupts:
                code = _run(args, interrupts)
        except KeyboardInterrupt:  # raised in the command, or just as the handler was restored
            code = 0 if interrupts.committed else EXIT_INTERRUPTED
        if interrupts.received and not interrupts.committed:
            code = EXIT_INTERRUPTED  # the command's own ending (an ImportError, a result) is not the answer
        if code == EXIT_INTERRUPTED:
            # the output's temporary file is removed; nothing else is on disk. A compile the
            # interrupt abandoned may hold descriptor 2: the line goes to the command's own stderr.
            say("xla-cost: interrupted")
            # CPython remembers a KeyboardInterrupt that ended an exec() of a string
            # (a dataclass being made as the interrupt came) and would end the
            # process by SIGINT instead of this code; an exec() that ends clears it.
            exec("pass")  # noqa: S102 - a constant string
    return code


def _end_now(say: Callable[..., None]) -> NoReturn:
    """Ctrl-C while the main thread is held in compiled code (`Interrupts`' ``stuck``):
    the one line, then the end of the process; nothing of the command's is half-written."""
    say("xla-cost: interrupted", now=True)
    os._exit(EXIT_INTERRUPTED)


def console() -> NoReturn:
    """The ``xla-cost`` program (and ``python -m xla_cost``): `main`, then the
    process's exit with its code. A Ctrl-C that comes once the command has
    finished, while Python and JAX shut down, is ignored: the output is whole
    (or was never written) and the code already says which."""
    code = main(exit_when_stuck=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if code == EXIT_INTERRUPTED:
        # Interrupted inside a compile, XLA's own threads (its slow-compile alarm, its
        # thread pools) may still hold the state the interrupt unwound: finalising the
        # interpreter then crashed the process (a segmentation fault, exit 139, after
        # "interrupted"). Nothing is left to write or close: the process ends here.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _run(args: argparse.Namespace, interrupts: Interrupts) -> int:
    debug = getattr(args, "debug", False)
    output = getattr(args, "output", None)
    try:
        check_output(output)
        check_distinct({"--output": output, "--plot": getattr(args, "plot", None),
                        "--layers": getattr(args, "layers", None)})
        with prints_to_stderr():  # the user's own print()s; stdout holds the output alone
            text = getattr(commands, args.command)(args)  # each subcommand has its function
        interrupts.check()  # one dropped inside the command (a gc callback) still stops it here
        write(text, output, commit=interrupts.committing)
    except Exception as exc:  # noqa: BLE001 - one line unless --debug
        if interrupts.received:
            return EXIT_INTERRUPTED  # e.g. an ImportError: the interrupt came while a module loaded
        if debug:
            raise
        if isinstance(exc, XlaCostError):
            print(f"xla-cost: error: {exc}", file=sys.stderr)
            return 2
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"xla-cost: error: {type(exc).__name__}: {first} (rerun with --debug for the traceback)", file=sys.stderr)
        return 2
    return 0
