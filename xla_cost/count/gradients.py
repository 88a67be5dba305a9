"""How many gradients a step computes: each one forward and one backward pass of a loss.

A step usually takes one gradient (``jax.value_and_grad`` of its loss). Some take more: SAM's
opaque mode (``optax.contrib.sam(..., opaque_mode=True)``) calls the ``grad_fn`` it is given inside
the optimizer's update, at the perturbed parameters, once per adversarial step; gradient
accumulation takes one per micro-batch in a loop; a GAN one per model. Each has its forward (the
``jvp(...)`` work: what its loss needs) and its backward (the ``transpose(...)`` work), and the
step's forward and backward parts hold all of them (`xla_cost.count.step_parts`).

One gradient is one connected piece of the passes' work: the equations of the forward and backward
parts joined by the values one of them makes and another reads, at one level of the step (a loop's
body is a level of its own). Two gradients are joined by no such value: what the second reads of the
first (SAM's perturbed parameters) is made by the update's work between them, which is no pass's.
The pieces are found in the step's jaxpr before dead-code elimination, where a ``jax.grad``'s loss
still joins the work of its parts (the sum of an actor's and a critic's losses), and a piece counts
where some of its backward work is left after it (a gradient nothing reads is no work). A loop
whose own name stack is under no pass (the user's ``lax.scan``, ``fori_loop``) and whose body takes
gradients takes them once per iteration; a loop under a pass (a scanned stack of layers) is part
of the piece it is in; of a ``cond``'s branches, the one that takes the most counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from xla_cost.count.stacks import classify_pass
from xla_cost.count.trip_bounds import static_trip_count
from xla_cost.step.phases import STEP_PARTS

__all__ = ["Gradients", "gradient_work", "matched_nodes"]

FORWARD, BACKWARD, UPDATE, _OTHER = STEP_PARTS
_AFTER_UPDATE, _AT_PERTURBED = "after update", "at perturbed inputs"  # what a gradient is taken at (`_pieces`)


class Gradients(NamedTuple):
    """The gradients a step computes.

    Attributes:
      count: how many, loops multiplied out (a ``while`` loop whose trip count is unknown: once).
      known: False where some are in such a loop: ``count`` is a lower bound.
      looped: of ``count``, those taken in a loop's body.
      after_update: of ``count``, those taken at values the step's update work made from an
        earlier gradient (SAM's perturbed parameters, another model's new parameters).
      at_perturbed: of ``count``, those taken at inputs perturbed along an earlier gradient and
        made from no parameter (an adversarial example: FGSM's ``x + eps * sign(grad_x)``).
    """

    count: int = 0
    known: bool = True
    looped: int = 0
    after_update: int = 0
    at_perturbed: int = 0

    def times(self, n: int | None) -> Gradients:
        """These, taken in a loop ``n`` times (None: unknown, counted once)."""
        k = 1 if n is None else n
        return Gradients(self.count * k, self.known and n is not None, self.count * k, self.after_update * k,
                         self.at_perturbed * k)

    def plus(self, other: Gradients) -> Gradients:
        """These and ``other``."""
        return Gradients(self.count + other.count, self.known and other.known, self.looped + other.looped,
                         self.after_update + other.after_update, self.at_perturbed + other.at_perturbed)


def gradient_work(whole: Any, top: Any, saved: Mapping[Any, int]) -> tuple[Gradients, int]:
    """The gradients a classified step computes, and the bytes of the activations its forward work
    keeps for the backward pass at once.

    Args:
      whole: the step before dead-code elimination, as `xla_cost.count.step_parts` flattened and
        classified it (``nodes``, each with ``eqn``, ``stack``, ``part``, ``ins``, ``outs``, ``adversarial``
        and ``levels``: a loop's bodies, a ``while``'s condition last, or a ``cond``'s branches): a
        ``jax.grad``'s loss still joins its work there.
      top: the step after it (the one counted), classified the same way; or ``whole`` itself.
      saved: per value of ``top``'s own level, the bytes of those its forward work computes and its
        backward work reads. A gradient taken at values an update made from an earlier gradient
        (SAM's perturbed one), or at inputs perturbed along one, runs after that gradient's backward pass, which let its activations
        go: the most either holds counts, not their sum; those of the other gradients (and of work
        in none) add up.
    """
    matched = matched_nodes(whole, top)
    kept = {id(node) for node in matched.values()}
    pieces = _pieces(whole, lambda node: id(node) in kept)
    held: dict[tuple[int, bool] | None, int] = {}
    for node in (node for node in top.nodes if any(var in saved for var in node.outs)):
        piece = next((pieces[id(matched[i])] for i in _leaves(node) if i in matched and id(matched[i]) in pieces),
                     None)
        held[piece] = held.get(piece, 0) + sum(saved.get(var, 0) for var in node.outs)
    bytes_ = sum(saved.values())
    if len({piece for piece in held if piece is not None}) > 1:  # (one gradient: all of them, held together)
        together = sum(n for piece, n in held.items() if piece is None or piece[1] is None)
        bytes_ = max([together, *(n for piece, n in held.items() if piece is not None and piece[1] is not None)])
    return _level(whole, lambda node: id(node) in kept), bytes_


def matched_nodes(whole: Any, top: Any) -> dict[int, Any]:
    """The node of ``whole`` (the step before dead-code elimination, which keeps the equations it
    keeps) that each leaf node of ``top`` (after it) is, by the ``id`` of ``top``'s: the same
    equation, the k-th time each meets it where both meet it as often (a jitted function's jaxpr is
    shared by its calls: the ReLU of SAM's two gradients), else the last time ``whole`` does."""
    def met(level: Any) -> dict[int, list[Any]]:
        found: dict[int, list[Any]] = {}
        for node in _every(level):
            if not node.levels:
                found.setdefault(id(node.eqn), []).append(node)
        return found

    before = met(whole)
    return {id(after): before[key][k] if len(before[key]) == len(nodes) else before[key][-1]
            for key, nodes in met(top).items() if key in before for k, after in enumerate(nodes)}


def _every(level: Any) -> Any:
    for node in level.nodes:
        yield node
        for inner in node.levels:
            yield from _every(inner)


def _pieces(level: Any, kept: Callable[[Any], bool]) -> dict[int, tuple[int, bool]]:
    """The gradients taken at ``level`` (not in its loops): for the ``id`` of each leaf node of
    their passes' work (and of those in a loop's body under a pass), which gradient it is in (a
    number) and what that one is taken at, where it follows an earlier one: values the step's update
    made from it (`_AFTER_UPDATE`), inputs perturbed along it (`_AT_PERTURBED`: a node's ``adversarial``),
    or None."""
    members = [node for node in level.nodes if _in_pass(node)]
    index = {id(node): k for k, node in enumerate(members)}
    parent = list(range(len(members)))

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    made: dict[Any, int] = {}
    update: set[Any] = set()  # the values the update's work makes, at this level
    perturbed: set[Any] = set()  # ... and the inputs perturbed along a gradient (`step_parts.ADVERSARIAL`)
    for node in level.nodes:
        k = index.get(id(node))
        if k is None:
            if node.part == UPDATE:
                update.update(var for var in node.outs if var is not None)
            elif node.adversarial:
                perturbed.update(var for var in node.outs if var is not None)
            continue
        for var in node.ins:
            if var in made:
                parent[root(k)] = root(made[var])
        made.update((var, k) for var in node.outs if var is not None)
    pieces: dict[int, str | None] = {root(k): None for k, node in enumerate(members) if _backward(node, kept)}
    for k, node in enumerate(members):
        if root(k) in pieces and pieces[root(k)] != _AFTER_UPDATE:
            if any(var in update for var in node.ins):
                pieces[root(k)] = _AFTER_UPDATE
            elif any(var in perturbed for var in node.ins):
                pieces[root(k)] = _AT_PERTURBED
    return {i: (root(k), pieces[root(k)]) for k, node in enumerate(members) if root(k) in pieces
            for i in _leaves(node)}


def _level(level: Any, kept: Callable[[Any], bool]) -> Gradients:
    found = Gradients()
    for node in level.nodes:
        if node.levels and not _in_pass(node):
            found = found.plus(_loop(node, kept))
    pieces = list(dict(_pieces(level, kept).values()).values())
    return found.plus(Gradients(len(pieces), True, 0, pieces.count(_AFTER_UPDATE), pieces.count(_AT_PERTURBED)))


def _leaves(node: Any) -> list[int]:
    """The ``id`` of a leaf node, or of every leaf node in a loop's bodies."""
    return [id(node)] if not node.levels else [i for level in node.levels for inner in level.nodes
                                               for i in _leaves(inner)]


def _in_pass(node: Any) -> bool:
    """Whether a node is the passes' work: a forward or backward equation, or a loop under a pass."""
    if node.levels:
        return classify_pass(node.stack) is not None
    return node.part in (FORWARD, BACKWARD)


def _backward(node: Any, kept: Callable[[Any], bool]) -> bool:
    """Whether a member holds backward work left after dead-code elimination."""
    if not node.levels:
        return node.part == BACKWARD and kept(node)
    return any(_backward(inner, kept) for level in node.levels for inner in level.nodes)


def _loop(node: Any, kept: Callable[[Any], bool]) -> Gradients:
    """The gradients a loop outside the passes takes: its body's, once per iteration."""
    name = node.eqn.primitive.name
    if name == "cond":
        return max((_level(branch, kept) for branch in node.levels), key=lambda g: g.count)
    body = _level(node.levels[0], kept)
    if not body.count:
        return body
    if name == "scan":
        return body.times(int(node.eqn.params["length"]))
    return body.times(static_trip_count(node.eqn))
