"""A transformer's residual stream split over the tensor-parallel axis, as MaxText splits it.

Megatron-LM's tensor parallelism (the zoo's `model_rules`) leaves the residual
stream ``(batch, positions, d_model)`` whole on every device of the ``model``
axis: each row-parallel projection (attention's and the MLP's output
projections) ends in an all-reduce, and the activations a block saves for its
backward pass are ``d_model`` wide on each device. MaxText splits the width
instead: its logical rule ``['activation_embed', 'tensor']`` (MaxText/configs/
base.yml at 76bd53b0, line 78) maps the residual stream's ``activation_embed``
axis to its tensor axis, and its ``DecoderLayer`` (MaxText/layers/models.py at
76bd53b0, lines 235-291) constrains its input, its norm's output, the
attention's and the MLP's outputs and its own output to
``('activation_batch', 'activation_length', 'activation_embed')``. The
partitioner then reduce-scatters the projections' outputs, all-gathers the
column-parallel projections' inputs, and every ``(B, T, d)`` array a block
keeps is ``1 / model`` as wide.

Here the same logical names (`RESIDUAL_STREAM`) map to the mesh's axes under
`xla_cost.parallel.sharding.DEFAULT_LOGICAL_RULES` (``activation_embed`` ->
``model``); a model opts in by calling `constrain_residual` where MaxText
constrains (the zoo GPT's ``shard_residual``). Off, nothing is constrained and
every program is the one without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RESIDUAL_STREAM", "constrain_residual"]

RESIDUAL_STREAM: tuple[str, str, str] = ("activation_batch", "activation_length", "activation_embed")
"""The logical axes of a transformer's residual stream ``(batch, positions, d_model)``, MaxText's names."""


def constrain_residual(x: Any) -> Any:
    """``x``, a residual stream ``(batch, positions, d_model)``, constrained to `RESIDUAL_STREAM`
    (``nn.with_logical_constraint``). Inside a sharded step
    (`xla_cost.parallel.sharding.ShardingPlan.constraints`) its batch is split over the batch axes
    and its ``d_model`` over ``model``; outside one (no mesh), ``x`` unchanged."""
    import flax.linen as nn

    return nn.with_logical_constraint(x, RESIDUAL_STREAM)
