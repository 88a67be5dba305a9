"""Rematerialisation policies: what ``jax.checkpoint`` keeps for the backward pass.

``none`` keeps every activation (no checkpoint); ``full`` keeps only the
checkpointed function's inputs and recomputes its forward pass in the backward
pass; ``dots_saveable`` keeps the results of matrix multiplications (and
convolutions) and recomputes the elementwise work between them;
``dots_with_no_batch_dims_saveable`` keeps only those without batch dimensions
(`jax.checkpoint_policies`).

A policy may also name the tensors it keeps, as MaxText's ``remat_policy:
custom`` does (MaxText/configs/base.yml at tag tpu-recipes-v0.1.4, lines
215-231; MaxText/layers/decoders.py lines 284-290): ``custom:NAME=WHERE,...``
with each ``WHERE`` ``device`` (saved in the device's memory) or ``offload``
(moved to the host's pinned memory after the forward pass and back for the
backward pass: ``jax.checkpoint_policies.save_and_offload_only_these_names``,
``offload_src="device"``, ``offload_dst="pinned_host"``); every tensor not
named is recomputed. The names are those the blocks give their activations
with ``jax.ad_checkpoint.checkpoint_name`` (`CHECKPOINT_NAMES`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from xla_cost.errors import InputError

__all__ = ["REMAT_LEVELS", "REMAT_POLICIES", "CHECKPOINT_NAMES", "CUSTOM", "check", "checkpoint", "custom_policy",
           "named_tensors", "policy", "resolve"]

REMAT_POLICIES: tuple[str, ...] = ("none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable")
"""The policies ``--remat`` takes."""


REMAT_LEVELS: dict[str, str] = {
    "none": "none",
    "selective": "dots_with_no_batch_dims_saveable",
    "full": "full",
}
"""The coarse remat options language-model repositories name (MaxText's and
Megatron-LM's ``selective``: keep the weight matmuls' outputs, recompute the
attention scores and the elementwise work) and the policy of `REMAT_POLICIES`
each stands for."""


CUSTOM = "custom"
"""The prefix of a policy that names the tensors it keeps (``custom:decoder_layer_input=offload,...``)."""

CHECKPOINT_NAMES: tuple[str, ...] = (
    "decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwi", "mlpwo",
)
"""The activations a decoder block names (`jax.ad_checkpoint.checkpoint_name`), as MaxText names them
(MaxText/layers/llama2.py line 73: the layer's input; attentions.py lines 1782-1784 and 1808: the query,
key and value after the rotary embedding, the output projection's result; linears.py lines 340-390 and
moe.py lines 783-790: the MLP's two input projections and its output), for a `CUSTOM` policy."""

_PLACES = ("device", "offload")


def named_tensors(name: str) -> dict[str, str]:
    """The tensors a `CUSTOM` policy keeps and where (``device`` or ``offload``), in its order.

    Raises:
      InputError: ``name`` is not ``custom:NAME=WHERE,...`` with each name one of `CHECKPOINT_NAMES`
        and each place ``device`` or ``offload``.
    """
    kind, _, listed = str(name).partition(":")
    kept: dict[str, str] = {}
    for item in listed.split(","):
        tensor, _, place = item.strip().partition("=")
        if kind != CUSTOM or tensor not in CHECKPOINT_NAMES or place not in _PLACES or tensor in kept:
            raise InputError(f"a custom remat policy, custom:NAME=WHERE,... (each NAME once, one of "
                             f"{', '.join(CHECKPOINT_NAMES)}; WHERE device or offload)", repr(name),
                             "Use e.g. --remat custom:decoder_layer_input=offload,query_proj=device.")
        kept[tensor] = place
    return kept


def custom_policy(kept: dict[str, str]) -> str:
    """The `CUSTOM` policy keeping ``kept`` (tensor -> ``device`` or ``offload``), as `named_tensors` reads it."""
    return CUSTOM + ":" + ",".join(f"{tensor}={place}" for tensor, place in kept.items())


def resolve(name: Any) -> str:
    """The policy of `REMAT_POLICIES` that ``name`` (a policy or a `REMAT_LEVELS` name) stands for."""
    if isinstance(name, str) and name in REMAT_LEVELS:
        return REMAT_LEVELS[name]
    if isinstance(name, str) and name.startswith(CUSTOM + ":"):
        named_tensors(name)
        return name
    if name not in REMAT_POLICIES:
        names = dict.fromkeys([*REMAT_LEVELS, *REMAT_POLICIES])
        raise InputError(f"a remat option ({', '.join(names)})", repr(name),
                         "Use e.g. --set remat=full (recompute each block's forward pass).")
    return name


def check(name: Any) -> str:
    """``name`` if it is one of `REMAT_POLICIES` or a `CUSTOM` policy, else `InputError`."""
    if isinstance(name, str) and name.startswith(CUSTOM + ":"):
        named_tensors(name)
        return name
    if name not in REMAT_POLICIES:
        raise InputError(f"a remat policy ({', '.join(REMAT_POLICIES)})", repr(name),
                         "Use e.g. --remat full (recompute each block's forward pass).")
    return name


def policy(name: str) -> Callable[..., bool] | None:
    """The ``jax.checkpoint`` policy of ``name`` (None for ``full``: nothing saveable)."""
    check(name)
    if name in ("none", "full"):
        return None
    if name.startswith(CUSTOM + ":"):
        kept = named_tensors(name)
        return jax.checkpoint_policies.save_and_offload_only_these_names(
            names_which_can_be_saved=[t for t, place in kept.items() if place == "device"],
            names_which_can_be_offloaded=[t for t, place in kept.items() if place == "offload"],
            offload_src="device", offload_dst="pinned_host")
    return getattr(jax.checkpoint_policies, name)


def checkpoint(fn: Callable[..., Any], name: str | None) -> Callable[..., Any]:
    """``fn`` under ``jax.checkpoint`` with policy ``name`` (``fn`` itself for None or ``none``)."""
    if name is None or check(name) == "none":
        return fn
    return jax.checkpoint(fn, policy=policy(name))
