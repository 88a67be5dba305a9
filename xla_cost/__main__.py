"""``python -m xla_cost`` is the ``xla-cost`` command."""

import sys

from xla_cost.cli import main

sys.exit(main())
