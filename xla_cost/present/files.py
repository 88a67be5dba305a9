"""Writing a result to a path: atomically where a path can be replaced, in place where it cannot.

A regular file, or a new path, is written to a temporary file beside it and
renamed over it: a reader never sees half a file, and a write that fails or is
interrupted leaves the old file as it was. Through a symlink, the target is
what is written and the link stays a link. A device or a named pipe
(``/dev/null``, ``/dev/stdout``, a FIFO) is written in place: a rename would
replace the device or the pipe with a regular file, and its reader would get
nothing. A path that is this process's own stdout or stderr (``/dev/stdout``
when the shell sends it to a file) is written through ``sys.stdout`` or
``sys.stderr``, so a shell's ``>>`` appends as it should.

`check_writable` says, before any work is done, why a path could not be
written, naming the option it came from.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from typing import IO

from xla_cost.errors import InputError

__all__ = ["Commit", "cannot_create_in", "check_writable", "write_file"]

Commit = Callable[[], contextlib.AbstractContextManager[object]]
"""What `write_file`'s final rename runs in: a function returning a context manager."""


def check_writable(path: str | os.PathLike[str], option: str, example: str) -> None:
    """Raises `InputError` unless ``path`` names a file this process can write.

    Not empty, not a directory, not a socket; a device or a pipe that is
    writable; else a file (or a symlink's target) in an existing directory
    where a file can be created, and not read-only. The message names
    ``option`` (``--output``, ``--plot``) and suggests ``option example``.
    Nothing is left on disk: whether a file can be created is tried with a
    temporary file, removed at once (``os.access`` says yes to root even where
    nothing can be created, such as ``/proc``).
    """
    text = os.fspath(path)
    fix = f"Pass {option} PATH to a file in a writable directory, e.g. {option} {example}."
    if not text.strip():
        raise InputError(f"{option} naming a file", "an empty name", fix)
    if os.path.isdir(text):
        raise InputError(f"{option} naming a file", f"{text!r}, a directory", fix)
    if _own_stream(text) is not None:
        return  # this process's stdout or stderr, written through it
    mode = _mode_of(text)
    if mode is not None and stat.S_ISSOCK(mode):
        raise InputError(f"{option} naming a file", f"{text!r}, a socket", fix)
    if mode is not None and not stat.S_ISREG(mode):  # a device or a pipe: written in place
        if not os.access(text, os.W_OK):
            raise InputError(f"{option} a file that can be written", f"{text!r}, which is read-only", fix)
        return
    target = _target(text)
    directory = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(directory):
        blocking = _nearest_existing(directory)
        if blocking is not None and not os.path.isdir(blocking):
            raise InputError(
                f"{option} in a directory", f"{text!r} ({blocking!r} is a file, not a directory)", fix
            )
        raise InputError(f"{option} in an existing directory", repr(text), f"Create {directory!r} first.")
    reason = cannot_create_in(directory)
    if reason is not None:
        raise InputError(
            f"{option} in a writable directory", f"{text!r} (nothing can be created in {directory!r}: {reason})", fix
        )
    if mode is not None and not os.access(target, os.W_OK):
        raise InputError(f"{option} a file that can be written", f"{text!r}, which is read-only", fix)


def write_file(
    path: str | os.PathLike[str], data: str | bytes, *,
    commit: Commit = contextlib.nullcontext,
) -> None:
    """Writes ``data`` (text as UTF-8, or bytes) to ``path``: see the module's docstring.

    Args:
      path: the file; a symlink's target is written, a device or a pipe in place.
      data: the whole content.
      commit: a context manager the final rename runs in (the command line
        holds Ctrl-C off there, so that an interrupt leaves either no new file
        or the whole of it); not used for a device or a pipe, whose writes
        cannot be undone.
    """
    text = os.fspath(path)
    stream = _own_stream(text)
    if stream is not None:
        _write_stream(stream, data)
        return
    mode = _mode_of(text)
    if mode is not None and not stat.S_ISREG(mode):
        with open(text, "wb") as handle:
            handle.write(_bytes(data))
        return
    _replace(_target(text), _bytes(data), commit)


def _replace(target: str, data: bytes, commit: Commit) -> None:
    """Writes next to ``target`` and renames over it: no half-written file on failure."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(target)), prefix=".xla-cost-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, _new_mode(target))  # mkstemp makes it 0600
        with commit():
            os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def _mode_of(path: str) -> int | None:
    """The mode of what ``path`` names, through symlinks; None if nothing is there."""
    try:
        return os.stat(path).st_mode
    except OSError:
        return None


def _target(path: str) -> str:
    """The file a write to ``path`` replaces: a symlink's target (resolved to the end), else the path."""
    return os.path.realpath(path) if os.path.islink(path) else path


def _nearest_existing(directory: str) -> str | None:
    """The deepest of ``directory`` and its parents that exists (as anything)."""
    current = directory
    while not os.path.lexists(current):
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent
    return current


def cannot_create_in(directory: str) -> str | None:
    """Why no file can be created in ``directory``, or None when one can (tried, then removed)."""
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".xla-cost-", suffix=".probe")
    except OSError as exc:
        if exc.errno == errno.ENOENT and os.path.isdir(directory):  # /proc: there, but it makes no new files
            return "it takes no new files (a system directory such as /proc or /sys)"
        return exc.strerror or type(exc).__name__
    os.close(fd)
    os.unlink(probe)
    return None


def _new_mode(target: str) -> int:
    """The replaced file's mode, or a new file's (0666 less the umask)."""
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _own_stream(path: str) -> IO[str] | None:
    """``sys.stdout`` or ``sys.stderr`` when ``path`` is the file behind file descriptor 1 or 2."""
    try:
        named = os.stat(path)
    except OSError:
        return None
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (named.st_dev, named.st_ino) == (own.st_dev, own.st_ino):
            return stream
    return None


def _write_stream(stream: IO[str], data: str | bytes) -> None:
    if isinstance(data, str):
        stream.write(data)
    else:
        stream.flush()
        getattr(stream, "buffer", stream).write(data)
    stream.flush()
