"""Routed parameters: what a mixture of experts declares, and the active parameters it gives.

A routed layer sends each token to ``top_k`` of its ``experts``: the parameters
of its experts are all held (the model's *total* parameters) but a token's
computation reads ``top_k / experts`` of them. The *active parameters* are
those a token's computation reads: the routed experts' parameters scaled by
``top_k / experts``, plus every other parameter (attention, router, shared
experts, embeddings, norms), as Jiang et al. 2024 (Mixtral: 46.7B total, 12.9B
active) and Dai et al. 2024 (DeepSeekMoE 16B: 16.4B total, 2.8B active) count them.

A model declares its routing once, in `ROUTING_ATTRIBUTE`: a method of the model
(or an attribute) that, given the model's abstract inputs, returns its `Routing`
entries. Nothing else is assumed of the model: the active parameters are
computed from its parameter tree (`active_parameters`), and a router with a
capacity (GShard and Switch's einsum dispatch, or a gather into capacity
slots) is described in a note that says which share of the experts' FLOP is
capacity padding (`routing_notes`): the experts compute on every slot, filled or not.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from xla_cost.errors import InputError
from xla_cost.step.trees import PyTree, named_leaves, path_names

__all__ = ["ROUTING_ATTRIBUTE", "ROUTING_NOTE", "Routing", "declared_routing", "active_parameters", "padded_modules", "routing_notes"]

ROUTING_NOTE = "mixture of experts ("
"""How each note of `routing_notes` begins (what reads them back finds them by it)."""

ROUTING_ATTRIBUTE = "xla_cost_routing"
"""The attribute in which a model declares its routed parameters: a method (or a
callable attribute) taking the model's abstract inputs and returning a sequence of
`Routing`, or that sequence itself."""


@dataclasses.dataclass(frozen=True)
class Routing:
    """One routed set of parameters: experts of which each token uses ``top_k``.

    Attributes:
      pattern: a regular expression found (``re.search``) in the path of every
        parameter that belongs to the experts (``experts/``): each such leaf holds
        all the experts (a leading expert axis) or one of them.
      experts: the routed experts ``E``.
      top_k: the experts each token is sent to ``k``.
      capacity: the slots per expert per routing group ``C`` the experts compute
        on (filled or not), None for a dropless router that computes on the
        routed tokens alone.
      group_tokens: the tokens of one routing group ``S`` (a sequence), with ``capacity``.
      layers: how many routed layers the pattern covers (for the note).
      dispatch: how the tokens reach their experts (``einsum``: a one-hot
        dispatch and combine mask, ``gather``: indices, scatter and gather), for the note.
    """

    pattern: str
    experts: int
    top_k: int
    capacity: int | None = None
    group_tokens: int | None = None
    layers: int = 1
    dispatch: str = ""

    def check(self) -> None:
        """Raises `InputError` for a routing that cannot be: ``top_k`` outside
        ``1..experts``, a capacity without its group, a pattern that is not a regex."""
        if not 1 <= self.top_k <= self.experts:
            raise InputError(f"a routing with 1 <= top_k <= experts ({self.experts})", f"top_k={self.top_k}",
                             "Route each token to at least one and at most all of the experts.")
        if (self.capacity is None) != (self.group_tokens is None) or (self.capacity is not None and (
                self.capacity < 1 or self.group_tokens < 1)):
            raise InputError("a routing's capacity and group_tokens both given (>= 1) or both None",
                             f"capacity={self.capacity}, group_tokens={self.group_tokens}",
                             "Declare the slots per expert with the tokens of the group they are counted for.")
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise InputError("a routing pattern that is a regular expression", f"{self.pattern!r} ({exc})",
                             "Escape [ ] ( ) . * + ? to match them literally.") from exc

    @property
    def slots(self) -> int | None:
        """Expert slots computed per routing group, ``E * C`` (None: dropless)."""
        return None if self.capacity is None else self.experts * self.capacity

    @property
    def padding(self) -> float | None:
        """The share of the experts' slots no routed token can fill, ``1 - k S / (E C)``:
        the least share of the experts' FLOP spent on capacity padding (exactly
        that when the router balances the tokens perfectly; dropped tokens leave
        more slots empty). Negative where ``E C < k S``: tokens must be dropped."""
        if self.capacity is None or self.group_tokens is None:
            return None
        return 1.0 - self.top_k * self.group_tokens / (self.experts * self.capacity)


def declared_routing(model: Any, inputs: PyTree) -> tuple[Routing, ...]:
    """The `Routing` entries ``model`` declares in `ROUTING_ATTRIBUTE` for ``inputs``; empty when none.

    Raises:
      InputError: the declaration is not a sequence of `Routing`, or one of them cannot be.
    """
    declared = getattr(model, ROUTING_ATTRIBUTE, None)
    if declared is None:
        return ()
    value = declared(inputs) if callable(declared) else declared
    entries = (value,) if isinstance(value, Routing) else tuple(value or ())
    for entry in entries:
        if not isinstance(entry, Routing):
            raise InputError(f"{ROUTING_ATTRIBUTE} entries of type xla_cost.Routing", repr(entry),
                             f"Return Routing(pattern, experts, top_k, ...) from the model's {ROUTING_ATTRIBUTE}.")
        entry.check()
    return entries


def _path_text(path: Sequence[Any]) -> str:
    return "/".join(path_names(path))


def active_parameters(params: PyTree, routing: Sequence[Routing]) -> int | None:
    """The parameters a token's computation reads: each parameter whose path a
    routing's pattern is found in (the first that matches) counted ``top_k /
    experts``, every other parameter whole; None without routing (unknown:
    nothing was declared, not "all of them").

    Raises:
      InputError: a routing's pattern matches no parameter (a typo would
        silently count its experts whole).
    """
    if not routing:
        return None
    compiled = [re.compile(r.pattern) for r in routing]
    used: set[int] = set()
    total = Fraction(0)
    for path, leaf in named_leaves(params):
        size = int(np.prod(np.shape(leaf)))
        text = _path_text(path)
        share = Fraction(1)
        for index, pattern in enumerate(compiled):
            if pattern.search(text):
                used.add(index)
                share = Fraction(routing[index].top_k, routing[index].experts)
                break
        total += size * share
    idle = [r.pattern for i, r in enumerate(routing) if i not in used]
    if idle:
        paths = [_path_text(p) for p, _ in named_leaves(params)][:4]
        raise InputError("every routing pattern to match some parameter path", f"{', '.join(map(repr, idle))} "
                         f"matching none (paths like {', '.join(paths)})", "Fix the pattern of the routing declared.")
    return round(total)


def padded_modules(params: PyTree, routing: Sequence[Routing]) -> tuple[tuple[frozenset[str], float], ...]:
    """For each routing with capacity padding (`Routing.padding` above 0): the module paths that
    hold its experts' parameters (each matching parameter's path less its own name) and the
    share of their work that is padding. Their products computed on empty slots are no model
    FLOP (`xla_cost.analysis.costs`: MFU's model FLOP leave them out)."""
    compiled = [re.compile(r.pattern) for r in routing]
    found: list[set[str]] = [set() for _ in routing]
    for path, _ in named_leaves(params):
        text = _path_text(path)
        index = next((i for i, pattern in enumerate(compiled) if pattern.search(text)), None)
        if index is not None:
            found[index].add(text.rsplit("/", 1)[0] if "/" in text else "")
    return tuple((frozenset(modules), r.padding) for r, modules in zip(routing, found)
                 if r.padding is not None and r.padding > 0 and modules)


def routing_notes(routing: Sequence[Routing]) -> tuple[str, ...]:
    """One note per routing with a capacity: the slots the experts compute on, and
    the share of their FLOP that is capacity padding (`Routing.padding`)."""
    notes = []
    for r in routing:
        if r.padding is None:
            continue
        layers = f"{r.layers} routed layers" if r.layers != 1 else "a routed layer"
        how = f" ({r.dispatch} dispatch)" if r.dispatch else ""
        if r.padding >= 0:
            share = (f"at least {r.padding:.1%} of the experts' FLOP is capacity padding (exactly that if the "
                     "router balances the tokens perfectly; dropped tokens leave more slots empty)")
        else:
            dropped = 1.0 - r.slots / (r.top_k * r.group_tokens)
            share = (f"at least {dropped:.1%} of the routed assignments are dropped (the capacity holds "
                     "fewer than the tokens route)")
        notes.append(
            f"{ROUTING_NOTE}{r.pattern}, {layers}{how}): each group of {r.group_tokens} tokens routed to "
            f"top {r.top_k} of {r.experts} experts makes {r.top_k * r.group_tokens} assignments for E x C = "
            f"{r.experts} x {r.capacity} = {r.slots} expert slots, all computed: {share}"
        )
    return tuple(notes)
