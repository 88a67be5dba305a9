"""The notes on parameters a step trains not, worded once for `xla_cost.analyze_step` and
`xla_cost.analyze`: those that receive no gradient (a frozen or unused module, a tied model's
``lm_head``), and how many of the parameters the backward pass trains against how many the
optimizer updates."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ungraded_note", "trained_note"]


def ungraded_note(names: Sequence[str]) -> str:
    """The step checker's note on the parameters (``module/name``) that receive no gradient."""
    return (f"step checker: parameters that receive no gradient: {', '.join(names)}: no equation of the backward "
            "pass computes them (stop_gradient, a frozen or unused module), so their gradients are zeros the "
            "optimizer still applies; optax.masked or optax.set_to_zero leaves them out")


def trained_note(trained: int, parameters: int, updated: int | None, integer: int = 0, metered: int = 0) -> str:
    """How many of the ``parameters`` the backward pass makes gradients for (``trained``; ``integer``
    of the rest quantized) and, where it is more, how many the optimizer updates (``updated``);
    ``metered``: of the rest, those whose gradients the backward pass makes for the step's metrics
    alone (`xla_cost.analysis.step_checks.metric_gradients_note`), which the update does not read."""
    made = ("the update reads gradients of those alone" if metered else
            "the backward pass makes gradients for those alone")
    return (f"trained parameters: {trained:,} of the {parameters:,} ({made}; {parameters - trained:,} frozen"
            + (f", {integer:,} of them integer (quantized), which take no gradient" if integer else "")
            + (f", {metered:,} of them with gradients only the metrics read" if metered else "") + ")"
            + (f"; the optimizer still updates {updated:,} (the frozen ones' zero gradients too): the update's "
               "FLOP per parameter is over those" if updated else ""))
