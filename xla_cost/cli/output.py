"""Where a command's text goes: stdout, or a file written atomically."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from xla_cost.errors import InputError
from xla_cost.present.text import UNLIMITED

__all__ = ["check_output", "write", "width"]


def width(args: argparse.Namespace) -> int | None:
    """Written to a file, a table keeps its natural width, whatever the terminal's."""
    return UNLIMITED if getattr(args, "output", None) is not None else None


def check_output(output: str | None) -> None:
    """Raises `InputError` unless ``output`` names a file that can be written.

    Checked before any analysis runs, so that a typo costs nothing: not empty,
    not a directory, in an existing directory that is writable, and not an
    existing file that is read-only.
    """
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


def file_mode(output: str) -> int:
    """The mode a new file gets (0666 less the umask), or the replaced file's mode."""
    try:
        return os.stat(output).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    # Write next to the target and rename: no half-written file on failure.
    directory = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".xla-cost-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text if text.endswith("\n") else text + "\n")
        os.chmod(tmp, file_mode(output))  # mkstemp makes it 0600
        os.replace(tmp, output)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
