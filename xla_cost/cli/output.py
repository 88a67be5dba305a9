"""Where a command's text goes: stdout (no --output, or ``--output -``), or a file.

The file is written by `xla_cost.present.files.write_file`: atomically for a
regular file or a new path, through a symlink to its target, in place for a
device or a pipe (``--output /dev/stdout`` prints).
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from xla_cost.errors import InputError
from xla_cost.present.files import Commit, check_writable, write_file
from xla_cost.present.text import UNLIMITED

__all__ = ["STDOUT", "check_output", "write", "width"]

STDOUT = "-"
"""``--output -``: print, as without ``--output``."""


def width(args: argparse.Namespace) -> int | None:
    """Written to a file, a table keeps its natural width, whatever the terminal's."""
    return UNLIMITED if getattr(args, "output", None) not in (None, STDOUT) else None


def check_output(
    output: str | None, option: str = "--output", example: str = "report.json", *, text: bool = True
) -> None:
    """Raises `InputError` unless ``output`` names a file that can be written.

    Checked before any analysis runs, so that a typo costs nothing; the message
    names ``option``, the flag the path came from. ``-`` (`STDOUT`) prints,
    for text; an option that writes bytes (``text=False``, a PNG) refuses it.
    """
    if output is None:
        return
    if output == STDOUT:
        if text:
            return
        raise InputError(f"{option} naming a file", "'-' (stdout)", f"Pass {option} PATH, e.g. {option} {example}.")
    check_writable(output, option, example)


def write(text: str, output: str | None, commit: Commit = contextlib.nullcontext) -> None:
    """Prints ``text`` or writes it to ``output``; ``commit`` wraps the file's final rename."""
    text = text if text.endswith("\n") else text + "\n"
    if output is None or output == STDOUT:
        sys.stdout.write(text)
        return
    write_file(output, text, commit=commit)
