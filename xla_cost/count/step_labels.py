"""The labels `xla_cost.count.step_parts.classify_step` gives a user's step: the part of each
equation and the module that owns its data, with what the classification measures on the way
(the activations saved for the backward pass, the gradients computed, the equations worth a note).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from xla_cost.count.gradients import Gradients

__all__ = ["Path", "Label", "StepLabels"]

Path = tuple[Any, ...]
"""An equation's place in a jaxpr: the indices of the equations that contain it, ``"body"`` /
``"cond"`` of a while loop, ``"b0"``.. for a cond's branches (`xla_cost.count.interpret.count_jaxpr`'s walk)."""


class Label(NamedTuple):
    """The part an equation is in and the module that owns its data (or None)."""

    part: str
    owner: str | None = None


class StepLabels(dict):  # type: ignore[type-arg]
    """`Label` by equation path, ``saved_bytes``: the bytes of the values
    the forward part computes and the backward part reads (the activations
    autodiff saves), at the step's top level (a scanned stack's residuals
    included, as the loop's results), and ``tags``."""

    saved_bytes: int = 0
    first_forward: frozenset[Path] = frozenset()
    """Paths of the ``jax.checkpoint`` recomputations that are the step's
    forward (their primal is dead code): not a recomputation."""
    gradients: Gradients = Gradients()  # how many the step computes, SAM's in its update too (`gradients`)
    tags: Mapping[Path, str] = {}  # noqa: RUF012 - replaced per instance, never mutated
    """Equations worth a note, by path: ``metrics`` for update work (on gradients or new
    parameters) that only metrics read, which is other; ``feeds the loss`` for other work under
    the model's modules whose values the passes read (`FEEDS_LOSS`)."""
