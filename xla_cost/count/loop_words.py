"""How the count's notes name a loop: its kind, its trip count or that the count is unknown
(a ``while`` whose bound is a traced value: L-BFGS's optimisation loop and its line search),
where it is and the loops it runs inside; and the note for each loop whose trip count is
unknown, said once per loop, siblings at one place included (`said_once`)."""

from __future__ import annotations

import collections
from collections.abc import Sequence

__all__ = ["loop_label", "nested", "unknown_trip_note", "said_once"]


def loop_label(kind: str, trip: int | None, stack: str) -> str:
    """``scan x2 at <top>``, or ``while of unknown trip count at <top>`` (``trip`` None)."""
    count = f" x{trip}" if trip is not None else " of unknown trip count"
    return f"{kind}{count} at {stack or '<top>'}"


def nested(label: str, within: Sequence[str]) -> str:
    """``label`` and the loops it runs inside, innermost first (``within`` is outermost first):
    ``scan x2 at <top> inside scan x3 at <top>``."""
    return label + "".join(f" inside {outer}" for outer in reversed(within))


def unknown_trip_note(where: str, loops: int = 1) -> str:
    """The note for ``loops`` while loops at ``where`` (a `nested` place) whose trip count is unknown."""
    if loops == 1:
        return f"while loop at {where}: trip count unknown, its body is counted once (the true cost is higher)"
    return (f"{loops} while loops at {where}: trip counts unknown, each body is counted once "
            "(the true cost is higher)")


def said_once(notes: Sequence[str], unknown: Sequence[str]) -> tuple[str, ...]:
    """``notes`` once each, where ``unknown`` holds the place of every while loop of unknown trip
    count met (each once: the walk meets an equation once): a place that holds several (two while
    loops one after the other at the top) says how many, not one."""
    counts = collections.Counter(unknown)
    plural = {unknown_trip_note(where): unknown_trip_note(where, k) for where, k in counts.items() if k > 1}
    return tuple(plural.get(note, note) for note in dict.fromkeys(notes))
