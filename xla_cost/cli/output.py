"""Where a command's text goes: stdout (no --output, or ``--output -``), or a file.

The file is written by `xla_cost.present.files.write_file`: atomically for a
regular file or a new path, through a symlink to its target, in place for a
device or a pipe (``--output /dev/stdout`` prints).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import TextIO

from xla_cost.errors import InputError
from xla_cost.present.files import Commit, check_writable, write_file
from xla_cost.present.text import UNLIMITED, resolve_width

__all__ = ["STDOUT", "check_output", "check_distinct", "prints_to_stderr", "write", "width"]

STDOUT = "-"
"""``--output -``: print, as without ``--output``."""


def width(args: argparse.Namespace) -> int | None:
    """Written to a file, a table keeps its natural width, whatever the terminal's;
    printed, the terminal's when the command's stdout is one (not stderr's,
    where `prints_to_stderr` sends ``sys.stdout`` while the command runs)."""
    if getattr(args, "output", None) not in (None, STDOUT):
        return UNLIMITED
    with _command_stdout():
        return resolve_width(None) or UNLIMITED


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


def check_distinct(outputs: Mapping[str, str | None]) -> None:
    """Raises `InputError` when two options (``{"--output": path, "--plot": path}``)
    name the same file: the second written would replace the first (a PNG
    overwritten by the table). ``-`` (stdout) and None are not files."""
    seen: dict[str, tuple[str, str]] = {}
    for option, path in outputs.items():
        if path is None or path == STDOUT:
            continue
        key = os.path.normcase(os.path.realpath(os.path.expanduser(path)))
        if key in seen:
            first, given = seen[key]
            received = f"{path!r} for both" if path == given else f"{given!r} and {path!r}, one file"
            raise InputError(f"{first} and {option} naming different files", received,
                             f"Give {option} another path, e.g. {option} {_other_name(path, option)}.")
        seen[key] = (option, path)


def _other_name(path: str, option: str) -> str:
    stem, dot, suffix = os.path.basename(path).rpartition(".")
    return f"{stem}-{option.lstrip('-')}.{suffix}" if dot and stem else f"{path}-{option.lstrip('-')}"


_STDOUT_STREAMS: list[TextIO] = []
"""The stdout that `write` prints to while `prints_to_stderr` holds (innermost last)."""


def _command_stdout() -> contextlib.AbstractContextManager[object]:
    """``sys.stdout`` as the command's own stdout again, inside `prints_to_stderr`."""
    return contextlib.redirect_stdout(_STDOUT_STREAMS[-1]) if _STDOUT_STREAMS else contextlib.nullcontext()


@contextlib.contextmanager
def prints_to_stderr() -> Iterator[None]:
    """What runs inside prints to stderr (a user's step or model that calls
    ``print()`` while it is traced, compiled or timed), while `write` still
    prints the command's output to stdout: ``--format json`` stays JSON alone."""
    _STDOUT_STREAMS.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _STDOUT_STREAMS.pop()


def write(text: str, output: str | None, commit: Commit = contextlib.nullcontext) -> None:
    """Prints ``text`` (to the command's stdout, also under `prints_to_stderr`)
    or writes it to ``output``; ``commit`` wraps the file's final rename."""
    text = text if text.endswith("\n") else text + "\n"
    with _command_stdout():  # ``--layers /dev/stdout`` inside a command: the command's stdout too
        if output is None or output == STDOUT:
            sys.stdout.write(text)
            return
        write_file(output, text, commit=commit)
