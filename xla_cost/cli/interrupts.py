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
"""

from __future__ import annotations

import _thread
import contextlib
import importlib.machinery
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["Interrupts", "RAISE_AGAIN_S"]

RAISE_AGAIN_S = 0.01
"""How long after a dropped interrupt it is raised again: long enough for the
garbage collection (or ``__del__``) that dropped it to have returned."""

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
    """

    def __init__(self) -> None:
        self.received = False
        self.committed = False
        self._raising = True
        self._installed = False
        self._previous_handler: Any = None
        self._previous_hook: Any = None
        self._lock = threading.Lock()

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
            self._previous_hook = sys.unraisablehook
            sys.unraisablehook = self._on_unraisable
            self._installed = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._raising = False  # a SIGINT from here on is recorded, not raised halfway through restoring
        with self._lock:
            if self._installed:
                signal.signal(signal.SIGINT, self._previous_handler)
                sys.unraisablehook = self._previous_hook
                self._installed = False

    def check(self) -> None:
        """Raises `KeyboardInterrupt` if one was received, even if it was dropped where it was raised."""
        if self.received:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def committing(self) -> Iterator[None]:
        """Around the rename that puts the output in place: raises first if an
        interrupt came; one that comes from here on lets the rename finish."""
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
        # place that dropped it (which would drop it again).
        self.received = True
        self._raise_soon()

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

