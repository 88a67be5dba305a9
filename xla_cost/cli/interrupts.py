"""Ctrl-C while a command runs: it always stops the command, and nothing is written after it.

Python turns SIGINT into a `KeyboardInterrupt` raised wherever the main thread
happens to be, and some places drop it: raised inside a garbage-collection
callback (JAX registers one) or a ``__del__``, it is printed as "Exception
ignored in: ..." and the program goes on; raised while a C extension module
initialises, it becomes an `ImportError`, or crashes the process (jaxlib's
``_jax``, whose initialisation imports Python modules: a segmentation fault).
So `Interrupts` remembers every SIGINT it receives, raises `KeyboardInterrupt`
again when one was dropped (at the next point where Python can raise), holds
one that comes while an extension module initialises (or while jax
discovers its plugins, which would print it as a configuration error and go
on) until that has returned, and lets the command line ask, before it writes
and whatever the command ended with, whether one came.

The output file is put in place inside `Interrupts.committing`: an interrupt
received before that raises there (the temporary file is removed, the old
output kept); one received during the rename is recorded and lets it finish,
so the file is either untouched or whole, and the exit status says which.

Python runs its handler only when the main thread comes back to Python code; a
compile holds it in C++ for as long as the compile takes (ResNet-50's train
step for an H100: 16-24 s after the signal). Given ``stuck``, `Interrupts`
watches for SIGINT from a thread of its own (the signal's wakeup descriptor)
and calls ``stuck`` when Python's handler has not run `STUCK_AFTER_S` after
it: the command line then says its one line and ends the process (exit 130).
The main thread is then inside one call into compiled code, not writing a file
of the command's own (those writes are Python code that the handler
interrupts, and a rename in `committing` is not abandoned).
"""

from __future__ import annotations

import _thread
import contextlib
import importlib.machinery
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = ["Interrupts", "RAISE_AGAIN_S", "STUCK_AFTER_S", "standard_error"]

RAISE_AGAIN_S = 0.01
"""How long after a dropped interrupt it is raised again: long enough for the
garbage collection (or ``__del__``) that dropped it to have returned."""

STUCK_AFTER_S = 1.0
"""How long after SIGINT Python's handler may not have run before `Interrupts` calls
its ``stuck``: the main thread is held in compiled code (a compile). The handler
runs within milliseconds wherever the main thread runs Python or waits in a
system call that the signal interrupts."""

_EXTENSION_INIT = frozenset({
    importlib.machinery.ExtensionFileLoader.create_module.__code__,
    importlib.machinery.ExtensionFileLoader.exec_module.__code__,
})
"""The import system's frames that run a C extension module's initialisation."""

_SWALLOWING = frozenset({
    ("discover_pjrt_plugins", "xla_bridge.py"),
})
"""(function, file) of the frames that catch any exception and print it: jax's plugin discovery
logs a `KeyboardInterrupt` raised in a plugin's initialisation as a configuration error, with its
traceback, and goes on. Named, not imported: jax is not loaded when this module is."""


class Interrupts:
    """A context in which SIGINT is recorded (`received`) and raised until the
    output is `committed`; SIGINT's and ``sys.unraisablehook``'s previous
    handlers are restored on exit.

    Nothing is installed when SIGINT is ignored (a background job of a
    non-interactive shell), already has a handler of the program's own, or when
    not on the main thread: then Python's own handling applies.

    Args:
      stuck: called (from a thread of its own) when SIGINT came and Python's
        handler has not run `STUCK_AFTER_S` later, before the output is
        committed: the main thread is held in compiled code. The command line
        ends the process there; None: nothing is watched.
    """

    def __init__(self, stuck: Callable[[], object] | None = None) -> None:
        self.received = False
        self.committed = False
        self._raising = True
        self._installed = False
        self._previous_handler: Any = None
        self._previous_hook: Any = None
        self._lock = threading.Lock()
        self._stuck = stuck
        self._wakeup: tuple[int, int] | None = None  # the watched pipe: (read, write)
        self._previous_wakeup = -1
        self._hooked = False  # inside `_on_unraisable`, where a raise would be dropped once more
        self._landed = False  # the raise again came while `_on_unraisable` still started its timer

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
            self._previous_hook = sys.unraisablehook
            sys.unraisablehook = self._on_unraisable
            self._installed = True
            if self._stuck is not None:
                self._watch()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._raising = False  # a SIGINT from here on is recorded, not raised halfway through restoring
        with self._lock:
            if self._installed:
                signal.signal(signal.SIGINT, self._previous_handler)
                sys.unraisablehook = self._previous_hook
                self._installed = False
        if self._wakeup is not None:
            signal.set_wakeup_fd(self._previous_wakeup)
            read, write = self._wakeup
            self._wakeup = None
            with contextlib.suppress(OSError):
                os.write(write, b"\0")  # not a signal's number: the watcher returns (and closes its end)
            os.close(write)

    def _watch(self) -> None:
        """The C-level handler writes each signal's number to a pipe (Python's wakeup
        descriptor), which a thread reads, whatever the main thread is doing."""
        read, write = os.pipe()
        os.set_blocking(write, False)  # as set_wakeup_fd requires
        try:
            self._previous_wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except (ValueError, OSError):  # not the main thread of the main interpreter
            os.close(read)
            os.close(write)
            return
        self._wakeup = (read, write)
        threading.Thread(target=self._watcher, args=(read,), name="xla-cost-interrupts", daemon=True).start()

    def _watcher(self, read: int) -> None:
        try:
            while (data := os.read(read, 64)) and 0 not in data:
                if signal.SIGINT in data and not self.received:
                    self._wait_for_the_handler()
        finally:
            os.close(read)

    def _wait_for_the_handler(self) -> None:
        deadline = time.monotonic() + STUCK_AFTER_S
        while time.monotonic() < deadline:
            if self.received or not self._installed:
                return
            time.sleep(STUCK_AFTER_S / 50)
        with self._lock:  # held: the handler's restoring (__exit__) waits, and nothing is committed meanwhile
            if self._installed and self._raising and not self.received and self._stuck is not None:
                self.received = True
                self._stuck()

    def check(self) -> None:
        """Raises `KeyboardInterrupt` if one was received, even if it was dropped where it was raised."""
        if self.received:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def committing(self) -> Iterator[None]:
        """Around the rename that puts the output in place: raises first if an
        interrupt came; one that comes from here on lets the rename finish."""
        with self._lock:  # not while the watcher ends a stuck command
            self._raising = False
        try:
            self.check()
            yield
            self.committed = True
        finally:
            self._raising = not self.committed

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.received = True
        if self._raising:
            if self._hooked:  # raised here, it would be dropped as the first was: `_on_unraisable` raises it again
                self._landed = True
                return
            if _initialising_an_extension(frame) or _inside_a_swallower(frame):
                self._raise_soon()  # once the initialisation (or the discovery) has returned
                return
            raise KeyboardInterrupt

    def _on_unraisable(self, unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            self._previous_hook(unraisable)
            return
        # Dropped where Python cannot raise (a gc callback, a __del__): raised
        # again shortly, from a thread, so that it is not raised inside the
        # place that dropped it (which would drop it again). Starting the timer
        # waits for its thread; on a loaded machine the timer can fire before
        # that wait returns, and its interrupt then comes inside this hook,
        # where raising drops it too: it is recorded, and a timer started again.
        self.received = True
        self._hooked = True
        try:
            while True:
                self._landed = False
                self._raise_soon()
                if not self._landed:
                    break
        finally:
            self._hooked = False

    def _raise_soon(self) -> None:
        timer = threading.Timer(RAISE_AGAIN_S, self._raise_again)
        timer.daemon = True
        timer.start()

    def _raise_again(self) -> None:
        with self._lock:
            if self._installed and self._raising:
                _thread.interrupt_main(signal.SIGINT)  # runs _on_sigint in the main thread


def _initialising_an_extension(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a C extension module's initialisation (Python code it calls)."""
    while frame is not None:
        if frame.f_code in _EXTENSION_INIT:
            return True
        frame = frame.f_back
    return False


def _inside_a_swallower(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside one of `_SWALLOWING`'s functions."""
    while frame is not None:
        code = frame.f_code
        if any(code.co_name == name and code.co_filename.endswith(file) for name, file in _SWALLOWING):
            return True
        frame = frame.f_back
    return False



@contextlib.contextmanager
def standard_error() -> Iterator[Callable[..., None]]:
    """A function that writes a line to the standard error the command started with.

    A compile that Ctrl-C abandoned may still hold file descriptor 2
    (`xla_cost.compiled.compiler_log.quiet_compiler` redirects it while XLA
    compiles, in a thread the interrupted command no longer waits for), and the
    process ends before it gives it back: written to ``sys.stderr`` then, the
    command's last line went into the compiler's held-back log and was lost. The
    function writes to ``sys.stderr`` while descriptor 2 is what it was when the
    block began (or ``sys.stderr`` is not the process's, as under a test's
    capture), else to a copy of that descriptor made then; with ``now=True``, to
    that copy (no lock of ``sys.stderr`` taken: from a thread while the main
    thread is stuck).
    """
    try:
        saved: int | None = os.dup(2)
        began = os.fstat(saved)
    except (OSError, ValueError):  # no descriptor 2 (an embedded interpreter)
        saved, began = None, None

    def write(line: str, now: bool = False) -> None:
        text = line if line.endswith("\n") else line + "\n"
        if saved is not None and (now or _is_fd2(sys.stderr) and not _same_file(2, began)):
            if not now:
                sys.stderr.flush()
            elif os.isatty(saved):  # a progress line drawn there is not stopped: cleared, its cursor shown again
                text = _CLEAR_LINE + text + _SHOW_CURSOR
            os.write(saved, text.encode("utf-8", "replace"))
            return
        sys.stderr.write(text)
        sys.stderr.flush()

    try:
        yield write
    finally:
        if saved is not None:
            os.close(saved)


_CLEAR_LINE, _SHOW_CURSOR = "\r\x1b[2K", "\x1b[?25h"
"""What a terminal's progress line (rich's, hidden cursor and all) needs when the process ends under it."""


def _is_fd2(stream: Any) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # a test's capture, a StringIO
        return False


def _same_file(fd: int, began: os.stat_result | None) -> bool:
    try:
        now = os.fstat(fd)
    except OSError:
        return False
    return began is not None and (now.st_dev, now.st_ino) == (began.st_dev, began.st_ino)
