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

Megatron-LM's sequence parallelism (Korthikanti et al. 2022, §4.2.2) splits
the same stream over the tensor-parallel devices by its positions instead:
between the blocks' linear layers (their layer norms, dropouts and residual
sums) each device holds ``T / model`` positions of the whole width; a
column-parallel linear all-gathers its input over the axis (and gathers it
again in the backward pass for its weight gradient) and a row-parallel one
reduce-scatters its output (megatron/mpu/layers.py at d07d29df, 2022-06-08:
``LinearWithGradAccumulationAndAsyncCommunication``, lines 203-311;
``RowParallelLinear.forward``, lines 516-517). `constrain_sequence` puts a
stream there and `gather_sequence` gathers it whole before a column-parallel
linear; the zoo GPT's ``sequence_parallel`` calls the first where
`constrain_residual` would be called and the second on its projections' inputs.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec

from xla_cost.parallel.sharding import BATCH_AXES, active_mesh

__all__ = ["RESIDUAL_STREAM", "constrain_residual", "constrain_sequence", "gather_sequence", "split_features"]

RESIDUAL_STREAM: tuple[str, str, str] = ("activation_batch", "activation_length", "activation_embed")
"""The logical axes of a transformer's residual stream ``(batch, positions, d_model)``, MaxText's names."""


def constrain_residual(x: Any) -> Any:
    """``x``, a residual stream ``(batch, positions, d_model)``, constrained to `RESIDUAL_STREAM`
    (``nn.with_logical_constraint``). Inside a sharded step
    (`xla_cost.parallel.sharding.ShardingPlan.constraints`) its batch is split over the batch axes
    and its ``d_model`` over ``model``; outside one (no mesh), ``x`` unchanged."""
    import flax.linen as nn

    return nn.with_logical_constraint(x, RESIDUAL_STREAM)


def constrain_sequence(x: Any) -> Any:
    """``x``, a residual stream ``(batch, positions, d_model)``, split over the tensor-parallel
    ``model`` axis by its positions, as Megatron-LM's sequence parallelism holds it (the module's
    docstring): its batch over the step's batch axes where they divide it, its width whole. Outside a
    sharded step, on a mesh without a ``model`` axis or one that does not divide the positions,
    ``x`` unchanged."""
    return _on_model(x, "model")


def gather_sequence(x: Any) -> Any:
    """``x``, a residual stream split by `constrain_sequence`, whole on every device of ``model``
    again: the all-gather before a column-parallel linear under sequence parallelism. Where
    `constrain_sequence` leaves a stream unchanged, so does this."""
    return _on_model(x, None)


def split_features(x: Any) -> Any:
    """``x``, a ``(batch, positions, features)`` activation of a tensor-parallel layer (a column-parallel
    projection's output, a row-parallel one's input: heads or the feed-forward's width), split over
    ``model`` by its features, as Megatron-LM lays it out; with it pinned, the partitioner keeps the
    attention and its backward pass split by heads under sequence parallelism (else it splits them by
    positions after the reduce-scatters and moves them back with all-to-alls). Where the mesh has no
    ``model`` axis, or it does not divide the features, ``x`` unchanged."""
    mesh = active_mesh()
    model = dict(mesh.shape).get("model", 1) if mesh is not None else 1
    if model == 1 or len(x.shape) != 3 or x.shape[2] % model:
        return x
    return _on_model(x, None, "model")


def _on_model(x: Any, positions: str | None, features: str | None = None) -> Any:
    mesh = active_mesh()
    sizes = dict(mesh.shape) if mesh is not None else {}
    model = sizes.get("model", 1)
    if model == 1 or len(x.shape) != 3 or (positions and x.shape[1] % model):
        return x
    batch = tuple(a for a in BATCH_AXES if sizes.get(a, 1) > 1)
    split = 1
    for axis in batch:
        split *= sizes[axis]
    spec = PartitionSpec((batch[0] if len(batch) == 1 else batch) if batch and x.shape[0] % split == 0 else None,
                         positions, features)
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))
