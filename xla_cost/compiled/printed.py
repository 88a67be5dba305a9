"""A compiled program's text as its own compiler prints it, where jaxlib cannot read the program back.

``Compiled.as_text()`` does not ask the compiler for text: jaxlib takes the
optimized module's ``HloModuleProto`` from the executable and rebuilds it with
its own copy of XLA (``HloModule::CreateFromProto``) before printing it. A
compiler newer than jaxlib's XLA can hand over a module that copy refuses.
libtpu 0.0.52 does for a TPU v5p or v6e: it moves scatters (the gradient of a
cross-entropy's ``take_along_axis``, of an embedding lookup) to the chip's
SparseCores as an ``async-start`` / ``async-update`` / ``async-done`` triple
whose ``async-update`` also takes the scatter's operands, where open-source XLA
declares ``async-update`` with one operand (``hlo_opcode.h``:
``V(kAsyncUpdate, "async-update", 1)``); ``as_text()`` then fails with
"RET_CHECK failure ... async-update instruction should have 1 operands but
sees 4" after a compile that succeeded. Every GPT compiled for a v5p failed so
(a v5e or v4 has no such offload: their text reads back).

The compiler prints the module itself when asked to dump it
(``xla_dump_to``, ``xla_dump_hlo_as_text``, XLA's ``DebugOptions``): the
``*.after_codegen.txt`` it writes is the module the executable holds, the
same instructions, shapes, schedule and metadata ``as_text()`` prints where
it works (checked on a v5e GPT: equal line for line once each ``backend_config``
is read as JSON, whose keys it orders differently, and the stack frames are
numbered as printed). A TPU target's compile writes that dump into a
directory of its own (`compiler_dump`), which is read only when ``as_text()``
fails (`program_text`): a program whose text reads back is read as before.
The option does not change the program; jax leaves it out of its compilation
cache's key.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from xla_cost.compiled import hlo, targets

__all__ = ["DUMPED_PLATFORMS", "UPDATE_OPERANDS", "CompilerDump", "compiler_dump", "program_text",
           "unreadable_by_jaxlib"]

_LOG = logging.getLogger("xla_cost")

DUMPED_PLATFORMS = frozenset({"tpu"})
"""The target platforms whose compiles dump their optimized module's text: libtpu's
modules are the ones jaxlib's XLA has been seen to refuse (its SparseCore offload)."""

UPDATE_OPERANDS = 1
"""The operands jaxlib's XLA builds an ``async-update`` with (``hlo_opcode.h``: ``V(kAsyncUpdate,
"async-update", 1)``, checked as it rebuilds a module from its proto)."""

_PRINTED = ".after_codegen.txt"
"""The dump file of the module as compiled: after the passes that run last, the one the
executable keeps (``after_optimizations.txt`` precedes the code generator's last changes
to the instructions' backend configurations)."""


class CompilerDump:
    """A directory the compiler dumps one compile's module into.

    Attributes:
      directory: where the compiler writes (a new temporary directory).
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._text: str | None = None

    @property
    def options(self) -> dict[str, Any]:
        """The compiler options that make XLA print the optimized module into `directory`."""
        return {"xla_dump_to": self.directory, "xla_dump_hlo_as_text": True}

    def read(self) -> str | None:
        """The text of the one module the compile printed, kept once read (the directory goes
        when the compile's context ends); None when it printed none or several."""
        if self._text is None:
            found = sorted(glob.glob(os.path.join(glob.escape(self.directory), "*" + _PRINTED)))
            if len(found) == 1:
                with open(found[0], encoding="utf-8") as handle:
                    self._text = handle.read()
        return self._text


@contextlib.contextmanager
def compiler_dump(target: targets.CompileTarget | None) -> Iterator[CompilerDump | None]:
    """For a target of `DUMPED_PLATFORMS`, a `CompilerDump` in a new temporary
    directory, removed at the end; None for any other target (or none)."""
    if target is None or target.platform not in DUMPED_PLATFORMS:
        yield None
        return
    directory = tempfile.mkdtemp(prefix="xla-cost-dump-")
    try:
        yield CompilerDump(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def unreadable_by_jaxlib(text: str) -> bool:
    """Whether a module's text holds an instruction jaxlib's XLA refuses to rebuild: an
    ``async-update`` with more operands than the one it declares (`UPDATE_OPERANDS`)."""
    for line in text.splitlines():
        if " async-update(" in line:
            instruction = hlo.parse_instruction(line.strip())
            if instruction is not None and instruction.opcode == "async-update" \
                    and len(instruction.operand_names()) > UPDATE_OPERANDS:
                return True
    return False


def program_text(compiled: Any, printed: str | None = None) -> str:
    """``compiled.as_text()``; the compiler's own print of the module (``printed``,
    `CompilerDump.read`) where jaxlib cannot read it back: where the print shows an
    instruction jaxlib refuses (`unreadable_by_jaxlib`: not asked, whose refusal
    would be logged as an error) or ``as_text()`` fails.

    Raises:
      Exception: ``as_text()``'s own error when there is no printed text.
    """
    if printed is not None and unreadable_by_jaxlib(printed):
        _LOG.info("the compiled program's text as its compiler printed it: jaxlib's XLA cannot rebuild its "
                  "async-update instructions of several operands")
        return printed
    try:
        return compiled.as_text() or ""
    except Exception as exc:
        if printed is None:
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        _LOG.info("the compiled program's text as its compiler printed it: jaxlib could not read it back (%s)", first)
        return printed
