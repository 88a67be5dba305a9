"""Rematerialisation policies: what ``jax.checkpoint`` keeps for the backward pass.

``none`` keeps every activation (no checkpoint); ``full`` keeps only the
checkpointed function's inputs and recomputes its forward pass in the backward
pass; ``dots_saveable`` keeps the results of matrix multiplications (and
convolutions) and recomputes the elementwise work between them;
``dots_with_no_batch_dims_saveable`` keeps only those without batch dimensions
(`jax.checkpoint_policies`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from xla_cost.errors import InputError

__all__ = ["REMAT_LEVELS", "REMAT_POLICIES", "check", "checkpoint", "policy", "resolve"]

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


def resolve(name: Any) -> str:
    """The policy of `REMAT_POLICIES` that ``name`` (a policy or a `REMAT_LEVELS` name) stands for."""
    if isinstance(name, str) and name in REMAT_LEVELS:
        return REMAT_LEVELS[name]
    if name not in REMAT_POLICIES:
        names = dict.fromkeys([*REMAT_LEVELS, *REMAT_POLICIES])
        raise InputError(f"a remat option ({', '.join(names)})", repr(name),
                         "Use e.g. --set remat=full (recompute each block's forward pass).")
    return name


def check(name: Any) -> str:
    """``name`` if it is one of `REMAT_POLICIES`, else `InputError`."""
    if name not in REMAT_POLICIES:
        raise InputError(f"a remat policy ({', '.join(REMAT_POLICIES)})", repr(name),
                         "Use e.g. --remat full (recompute each block's forward pass).")
    return name


def policy(name: str) -> Callable[..., bool] | None:
    """The ``jax.checkpoint`` policy of ``name`` (None for ``full``: nothing saveable)."""
    check(name)
    if name in ("none", "full"):
        return None
    return getattr(jax.checkpoint_policies, name)


def checkpoint(fn: Callable[..., Any], name: str | None) -> Callable[..., Any]:
    """``fn`` under ``jax.checkpoint`` with policy ``name`` (``fn`` itself for None or ``none``)."""
    if name is None or check(name) == "none":
        return fn
    return jax.checkpoint(fn, policy=policy(name))
