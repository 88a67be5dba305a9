"""``python -m xla_cost`` is the ``xla-cost`` command."""

from xla_cost.cli import console

console()
