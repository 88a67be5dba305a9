"""The per-layer row: one module's costs in the forward pass, the backward pass
and the update, as `xla_cost.count.attribution` groups a program's equations.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from xla_cost.count.registry import Cost

__all__ = ["LayerCosts", "LAYER_FIELDS", "layer_records"]


@dataclasses.dataclass(frozen=True)
class LayerCosts:
    """The costs of one module in the forward pass, the backward pass and the update.

    Counted from the phases' jaxprs, with the phases' definitions: forward is
    the row's share of the forward phase, backward its share of the grad phase
    minus that, update its share of the update phase (optimizer arithmetic on
    a module's parameters is that module's; what is shared, the remainder's).
    Each column adds up to its phase's ``jaxpr_flops`` exactly.
    `xla_cost.attribute` fills the same type from one program, splitting it
    by pass (the name stack's ``jvp``/``transpose``).

    Attributes:
      path: module path, or ``(remainder)``.
      parameters: parameters the row stands for; None: unknown (a step that
        makes its parameters inside itself, whose rows come from its name stacks).
      forward, backward, update: the row's `xla_cost.Cost` in each pass.
      trip_count: how many times the row's work runs per step: the trip
        counts of the loops that each hold a whole run of it (a scanned layer
        group: its length), plus one per run outside every loop (a first
        micro-batch run before a ``fori_loop`` over the rest); 1 for a layer
        run once. Its FLOP include every run.
      saved_activation_bytes: bytes of the activations the backward pass keeps
        from this row's forward operations (the whole step's; None: not
        asked, ``memory=True`` fills it).
      recomputed: the part of ``backward`` that is the row's forward work
        ``jax.checkpoint`` (remat) runs again in the backward pass: hardware
        FLOP, not the model's (`model_backward_flops` leaves it out).
    """

    path: str
    parameters: int | None
    forward: Cost = Cost()
    backward: Cost = Cost()
    update: Cost = Cost()
    trip_count: int = 1
    saved_activation_bytes: int | None = None
    recomputed: Cost = Cost()

    @property
    def forward_flops(self) -> int:
        return self.forward.flops

    @property
    def backward_flops(self) -> int:
        return self.backward.flops

    @property
    def recomputed_flops(self) -> int:
        """FLOP of the row's forward work recomputed in its backward pass (part of `backward_flops`)."""
        return self.recomputed.flops

    @property
    def recomputed_transcendentals(self) -> int:
        return self.recomputed.transcendentals

    @property
    def recomputed_bytes_accessed(self) -> int:
        return self.recomputed.bytes_accessed

    @property
    def model_backward_flops(self) -> int:
        """The row's backward FLOP without the recomputation: the model's arithmetic."""
        return self.backward.flops - self.recomputed.flops

    @property
    def update_flops(self) -> int:
        return self.update.flops

    @property
    def forward_transcendentals(self) -> int:
        return self.forward.transcendentals

    @property
    def forward_bytes_accessed(self) -> int:
        """The jaxpr's unfused bytes estimate of the row's forward operations."""
        return self.forward.bytes_accessed

    @property
    def backward_bytes_accessed(self) -> int:
        return self.backward.bytes_accessed

    @property
    def update_bytes_accessed(self) -> int:
        return self.update.bytes_accessed

    @property
    def backward_transcendentals(self) -> int:
        return self.backward.transcendentals

    @property
    def update_transcendentals(self) -> int:
        return self.update.transcendentals

    @property
    def total(self) -> Cost:
        """Every pass together."""
        return self.forward + self.backward + self.update

    @property
    def backward_to_forward(self) -> float | None:
        """backward/forward FLOP, None when the forward pass has no FLOP."""
        return self.backward_flops / self.forward_flops if self.forward_flops else None

    @property
    def transcendentals(self) -> int:
        """All transcendentals of the row, every pass."""
        return self.total.transcendentals


LAYER_FIELDS: tuple[str, ...] = (
    "path", "parameters", "forward_flops", "backward_flops", "forward_transcendentals",
    "backward_transcendentals", "update_flops", "update_transcendentals", "trip_count",
    "backward_to_forward", "forward_bytes_accessed", "backward_bytes_accessed",
    "update_bytes_accessed", "saved_activation_bytes", "recomputed_flops", "recomputed_transcendentals",
    "recomputed_bytes_accessed",
)
"""A layer row's fields in the JSON ``layers`` records and the CSV, in order."""


def layer_records(layers: tuple[LayerCosts, ...]) -> list[dict[str, Any]]:
    """The layers as the JSON schema lists them: every field and the backward/forward ratio."""
    return [{key: getattr(layer, key) for key in LAYER_FIELDS} for layer in layers]
