"""The ``xla-cost`` command line: parse, call the library, print or write.

A thin layer: every feature is a call to the public API (`xla_cost.analyze`,
`xla_cost.sweep`, ...) with the same result from Python; this package only
translates arguments (`parser`), runs one library call per command
(`commands`), writes its output (`output`) and stops on Ctrl-C without
writing it (`interrupts`). It may import every layer
below it; nothing imports it but the ``xla-cost`` entry point. Imports of the
library stay inside the commands so that ``xla-cost --help`` starts without
jax, flax or optax.
"""

from __future__ import annotations

from xla_cost.cli.main import EXIT_INTERRUPTED, console, main
from xla_cost.cli.output import check_output
from xla_cost.cli.parser import build_parser

__all__ = ["main", "console", "build_parser", "check_output", "EXIT_INTERRUPTED"]
