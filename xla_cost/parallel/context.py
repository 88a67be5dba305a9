"""Context parallelism: a step's sequence split over the ``context`` mesh axis.

Long sequences are split over devices as the runs that train them split them:
every activation ``(batch, positions, ...)`` of the step holds ``T / C`` of
the positions on each of the ``C`` devices of the ``context`` axis
(`xla_cost.parallel.mesh.CONTEXT`), whose weights are replicated over it like a data-parallel
group's (their gradients are all-reduced over it), and only attention, where
each query needs the keys of every earlier position, exchanges anything:

* Llama 3 (Dubey et al. 2024, §3.3.2): "an all-gather based method where we
  first all-gather the key (K) and value (V) tensors, and then compute
  attention output for the local query (Q) tensor chunk"; the sequence split
  into ``2 x CP`` chunks, the ``i``-th device holding chunks ``i`` and
  ``2 x CP - 1 - i`` for load balance under the causal mask;
* Megatron-Core with Transformer Engine (NeMo's runs:
  ``context_parallel_size``): the same ``2 x CP`` chunks
  (megatron/training/utils.py ``get_batch_on_this_cp_rank``), and K and V
  passed around a ring in ``CP - 1`` send/recv steps, each overlapped with
  the attention of the chunk already there (Transformer Engine's
  ``AttnFuncWithCPAndKVP2P``, ``cp_comm_type="p2p"``, its default).

The step is partitioned by JAX's SPMD partitioner: the tokens are split over
``context`` (`xla_cost.parallel.sharding.plan_sharding`), the model's
activations constrained so (`xla_cost.parallel.sharding.ShardingPlan.constraints`),
and attention alone is mapped over the mesh (`gathered_attention`, with
``jax.shard_map`` as MaxText and Transformer Engine's JAX layers map theirs:
cuDNN's fused attention refuses a sequence split in its partitioning rule),
where K and V are all-gathered over ``context`` (``jax.lax.all_gather``; its
gradient is the reduce-scatter of dK and dV). Both frameworks move the same
bytes per device, ``(C - 1) / C`` of the sequence's K and V; the ring's are
priced beside the attention that hides them where the run's framework
overlaps them (`xla_cost.timemodel.schedule.Layout.overlap_context`).

Positions: each device's tokens are the load-balanced chunks (`positions`):
RoPE and the causal mask read them, so attention is the causal attention of
the whole sequence.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec

from xla_cost.compiled import targets
from xla_cost.errors import InputError
from xla_cost.parallel import sharding

from xla_cost.parallel.mesh import CONTEXT

__all__ = ["context_size", "positions", "position_ids", "gathered_attention", "kv_gather_bytes"]


def context_size() -> int:
    """Devices on the `CONTEXT` axis of the sharded step being traced (1 outside one, or without it)."""
    mesh = sharding.active_mesh()
    return int(dict(mesh.shape).get(CONTEXT, 1)) if mesh is not None else 1


def positions(length: int, context: int) -> np.ndarray:
    """The positions of a sequence of ``length`` tokens in the order the ``context`` devices
    hold them: cut into ``2 x context`` chunks, device ``i`` holding chunks ``i`` and
    ``2 x context - 1 - i`` (Llama 3 §3.3.2; Megatron's ``get_batch_on_this_cp_rank``), so
    each has as many causal query-key pairs. ``context`` 1: ``0 .. length - 1``.

    Raises:
      InputError: ``2 x context`` does not divide ``length``.
    """
    if context == 1:
        return np.arange(length)
    if length % (2 * context):
        raise InputError(f"a sequence divisible by 2 x context = {2 * context} (the load-balanced chunks)",
                         f"seq_len {length} with context={context}",
                         f"Use a sequence that is a multiple of {2 * context}, or a smaller context axis.")
    chunks = np.arange(length).reshape(2 * context, length // (2 * context))
    order = [c for i in range(context) for c in (i, 2 * context - 1 - i)]
    return chunks[order].reshape(length)


def position_ids(length: int) -> Any:
    """The positions of a sequence of ``length`` tokens as the step being traced holds them: in
    the order of `positions` over its `CONTEXT` axis, ``jnp.arange(length)`` without one (the
    program unchanged)."""
    context = context_size()
    return jax.numpy.arange(length) if context == 1 else jax.numpy.asarray(positions(length, context))


def kv_gather_bytes(batch: int, length: int, kv_heads: int, head_dim: int, itemsize: int) -> int:
    """One all-gather's result per device for K or V of ``batch`` sequences of ``length``
    tokens, ``kv_heads`` heads of ``head_dim`` (those on the device): ``B T K H x itemsize``
    (each device receives ``(C - 1) / C`` of it)."""
    return batch * length * kv_heads * head_dim * itemsize


def gathered_attention(q: Any, k: Any, v: Any, attend: Callable[..., Any], *, fused: bool = False) -> Any:
    """Attention of ``q`` ``(B, T, N, H)`` over ``k``, ``v`` ``(B, T, K, H)`` with the
    positions split over `CONTEXT`: on each device its ``T / C`` queries against K and V
    all-gathered over the axis, ``attend(q, k, v, positions=(query positions, key positions))``
    (the positions of `positions`, for the causal mask). Mapped over the active mesh
    (``jax.shard_map``): the batch over its batch axes, the heads over ``model`` where it
    divides both, the positions over `CONTEXT`.

    ``fused`` (a fused attention kernel, cuDNN's): ``attend(q, k, v, causal=False, window=0)``,
    every gathered key attended: jax's cuDNN call takes no causal mask offset by the chunk's
    place (its mask is ``j <= i`` within the call); the count is the same, every ``T x S`` pair
    (`xla_cost.count.attention`).

    Raises:
      InputError: outside a sharded step with a `CONTEXT` axis, or fused on a TPU target (its
        splash kernel is mapped over the mesh without the axis).
    """
    mesh = sharding.active_mesh()
    sizes = dict(mesh.shape) if mesh is not None else {}
    context = int(sizes.get(CONTEXT, 1))
    if context == 1:
        raise InputError("a sharded step with a context axis for gathered attention", f"mesh {sizes or 'none'}",
                         "Add context=C to the mesh (--mesh context=2), or call the attention directly.")
    if fused and targets.fused_attention() == "splash":
        raise InputError("context parallelism with attention=fused on a GPU target or the CPU",
                         "a context axis with a TPU target's splash attention kernel",
                         "Use --set attention=dense, or drop context from the mesh.")
    length = q.shape[1]
    order = positions(length, context)
    batch = tuple(a for a in sharding.BATCH_AXES if sizes.get(a, 1) > 1)
    split = math.prod(sizes[a] for a in batch) if batch else 1
    batch_spec = (batch[0] if len(batch) == 1 else batch) if batch and q.shape[0] % split == 0 else None
    model = int(sizes.get("model", 1))
    heads = "model" if model > 1 and q.shape[2] % model == 0 and k.shape[2] % model == 0 else None
    spec = PartitionSpec(batch_spec, CONTEXT, heads, None)
    local_length = length // context

    def local(q: Any, k: Any, v: Any) -> Any:
        k = jax.lax.all_gather(k, CONTEXT, axis=1, tiled=True)
        v = jax.lax.all_gather(v, CONTEXT, axis=1, tiled=True)
        everywhere = jax.numpy.asarray(order)
        mine = jax.lax.dynamic_slice_in_dim(everywhere, jax.lax.axis_index(CONTEXT) * local_length, local_length)
        return attend(q, k, v, causal=False, window=0) if fused else attend(q, k, v, positions=(mine, everywhere))

    mapped = jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)
    return mapped(q, k, v)
