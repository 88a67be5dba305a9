"""Two refinements of the update's work that the step classifier makes once a level's parts are known.

Whose module an optimizer's arithmetic is (`owners_from_readers`): the module whose update reads it.

Update work in a loop's body that no gradient made, kept only where the loop's results are new state
(`revert_unconfirmed`). The step classifier (`xla_cost.count.step_parts`) classifies a loop's body (``scan``, ``while``, each
branch of a ``cond``) on its own, before the work after the loop: there the body's results are only
"read by the caller". Work that no gradient reaches but that a module's values make and only those
results read is the update's *provisionally* (an optimizer's rule on a frozen parameter's zeros inside
a loop of training iterations: Adam's moments decayed). Whether it is depends on what reads the loop's
results: a loop that makes new parameters or optimizer state keeps it, a loop whose results other
work reads (a frozen reference model's log-sum-exp computed in a ``fori_loop`` over chunks, whose
result the loss reads as a constant: EasyDeL's DPO ``_compute_token_logps_chunked``) is other work,
and so is its body. `revert_unconfirmed` takes those back, given the readers of the loop's results.

Work outside autodiff that reads no gradient but whose values feed the new parameters or the new
optimizer state is the update's too (`feeding_state`): a DP-SGD privatizer's noise, sampled from a
key and a buffer of past noise (jax_privacy's BandMF: the noise is solved against the buffer, added
to the gradient and written into the buffer, the privatizer's new state), and the new state that
work writes from the update's values.

Work made from a gradient and from no parameter or state, that a gradient's passes read, is no
update: an input perturbed along its gradient (FGSM's ``x + eps * sign(grad_x)``). The classifier
turns it into other work where it sees its readers; in a loop's body (PGD's steps in a
``fori_loop``) the body's results are read after the loop and, as the loop's carry, by the next
iteration's passes: `perturbed_in_loop` reads both.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from xla_cost.step.phases import STEP_PARTS

__all__ = ["feeding_state", "metrics_only_loop", "owners_from_readers", "perturbed_in_loop", "revert_unconfirmed"]

_FORWARD, _BACKWARD, UPDATE, OTHER = STEP_PARTS
_SEVERAL = "mixed"  # what a loop of several parts reads a value as
_STATE = "new state"  # what other work that only new state reads reads a value as


def revert_unconfirmed(node: Any, outer: Sequence[Collection[str]], provisional: Collection[Any],
                       confirming: Collection[str]) -> bool:
    """Turns back into other work the provisional update work in the loop ``node``'s body (and in
    the loops nested in it) whose values reach no result of the loop that only ``confirming``
    readers read (the update, the step's new state); a result that nothing reads keeps what made it.

    Args:
      node: a loop or cond of the classifier's flattened levels (its ``levels``: the bodies, whose
        results are the loop's results in order, a ``while``'s condition last).
      outer: per result of the loop, the parts (and marks) of what reads it after the loop.
      provisional: paths of the equations turned update only because a level's results read them.
      confirming: the readers that make a value new state: the update, the caller's results.

    Returns:
      Whether any equation changed part (the bodies' labels are updated; the caller's are not).
    """
    bodies = node.levels[:1] if node.eqn.primitive.name == "while" else node.levels
    changed = False
    for body in bodies:
        changed |= _revert(body, outer, provisional, confirming)
    return changed


def _revert(level: Any, marks: Sequence[Collection[str]], provisional: Collection[Any],
            confirming: Collection[str]) -> bool:
    readers: dict[Any, set[str]] = {}
    for var, mark in zip(level.outvars, marks):
        if var is not None:
            readers.setdefault(var, set()).update(mark or confirming)
    changed = False
    for node in reversed(level.nodes):
        seen = set().union(*(readers.get(v, set()) for v in node.outs)) if node.outs else set()
        if node.levels:
            if revert_unconfirmed(node, [readers.get(v, set()) for v in node.outs], provisional, confirming):
                changed = True
                for inner in node.levels:
                    level.labels.update(inner.labels)
            parts = {label.part for inner in node.levels for label in inner.labels.values()}
            reads_as = parts.pop() if len(parts) == 1 else None
        else:
            if node.part == UPDATE and node.path in provisional and not (seen and seen <= set(confirming)):
                node.part, changed = OTHER, True
                level.labels[node.path] = level.labels[node.path]._replace(part=OTHER)
            reads_as = node.part
        for var in node.ins:
            if var is not None:
                readers.setdefault(var, set()).add(reads_as if reads_as is not None else _SEVERAL)
    return changed


def feeding_state(level: Any, marks: Sequence[str], eligible: Callable[[Any], bool],
                  confirming: Collection[str]) -> set[Any]:
    """Turns into update work the other work of ``level`` (not its loops') whose values the update
    reads, or that reads the update's values, where every reader of its values is the update or
    new state: the parameters and optimizer state the step returns, and other work that only they
    read (through it). A privatizer's noise, drawn from a key, that the update adds to the gradient
    and that the privatizer also keeps in its state, is the update's, as the noise of a privatizer
    that keeps none; so is that state written from the noise. Work that only new state reads and
    that touches no update (``TrainState.step + 1``, the next PRNG key) stays other, and so does
    work a metric, the passes or other work also read.

    Args:
      level: one level of the classifier's flattened jaxpr (``nodes``, ``outvars``), its parts set.
      marks: per result of the level, what reads it (a mark in ``confirming`` for new state).
      eligible: whether an equation may be the update's at all: outside autodiff, not the model run
        outside the gradient, not the model state its forward pass made.
      confirming: the readers that make a value new state: the update, the caller's results.

    Returns:
      The paths of the equations turned update (their ``part`` is set; the labels are not).
    """
    promoted: set[Any] = set()
    allowed = {*confirming, _STATE}
    changed = True
    while changed:  # a promotion lets the work before it (read by it) and after it (reading it) follow
        changed = False
        made = {var for node in level.nodes if node.part == UPDATE and not node.levels for var in node.outs}
        readers: dict[Any, set[str]] = {}
        for var, mark in zip(level.outvars, marks):
            if var is not None:
                readers.setdefault(var, set()).add(mark)
        for node in reversed(level.nodes):
            if node.levels:
                parts = {label.part for inner in node.levels for label in inner.labels.values()}
                reads_as = parts.pop() if len(parts) == 1 else _SEVERAL
            else:
                seen = set().union(*(readers.get(v, set()) for v in node.outs)) if node.outs else set()
                reads_as = node.part
                if node.part == OTHER and seen and seen <= allowed and eligible(node):
                    if UPDATE in seen or any(v in made for v in node.ins if v is not None):
                        node.part = reads_as = UPDATE
                        promoted.add(node.path)
                        changed = True
                    else:
                        reads_as = _STATE
            for var in node.ins:
                if var is not None:
                    readers.setdefault(var, set()).add(reads_as)
    return promoted


def owners_from_readers(level: Any) -> None:
    """Update work on a value of no module's, read by one module's update work alone, is that
    module's: an optimizer's arithmetic on a gradient that a backward pass outside every module
    made (a pure-JAX model's ``params['layers'][0]['w']``, no name scope: AdamW's ``(1 - b1) g``,
    ``g * g``) belongs to the layer whose moments it updates, as in a model of modules; so is
    update work on a value of a module around that layer's (a gradient split from the fused
    gradient an ``nn.OptimizedLSTMCell`` computes for its gates' kernels concatenated). Consumers
    first, so a chain of such work follows its last reader."""
    readers: dict[Any, set[str | None]] = {}
    for node in reversed(level.nodes):
        if (node.part == UPDATE and not node.levels and node.outs
                and all(getattr(out.aval, "shape", ()) for out in node.eqn.outvars)):  # (a scalar is no layer's)
            found = set().union(*(readers.get(v, set()) for v in node.outs))
            reader = next(iter(found)) if len(found) == 1 else None
            if reader is not None and (node.owner is None or reader.startswith(f"{node.owner}/")):
                node.owner = reader
        if node.part == UPDATE and not node.levels and node.owner is None and node.outs \
                and not any(v in readers for v in node.outs):
            continue  # new state of no module's that nothing here reads (a privatizer's buffer of its noise): no say
        for var in node.ins:
            if var is not None:  # (a loop or a cond reads for every module it holds: it names none)
                readers.setdefault(var, set()).add(node.owner if node.part == UPDATE and not node.levels else None)


def perturbed_in_loop(node: Any, outer: Sequence[Collection[str]], passes: Collection[str],
                      allowed: Collection[str], mark: str) -> set[Any]:
    """Turns into other work the update work in the body of the loop ``node`` (a ``scan`` or a
    ``while``; not its nested loops) that reads no parameter or state (a node's ``reads_state``) and
    whose values are read by a gradient's passes and by ``allowed`` readers alone: here, after the
    loop (``outer``, per result of the loop) and, for a carry, by the body's next iteration (what
    the body reads its input as). PGD's steps: the adversarial batch a ``fori_loop`` carries, each
    iteration's gradient taken at it, moved along its sign and clipped.

    Args:
      node: a loop of the classifier's flattened levels (``eqn``, ``levels``: the body first).
      outer: per result of the loop, what reads it after the loop.
      passes: the readers that are a gradient's passes (and ``mark``: a perturbed input's work).
      allowed: every reader such work may have (``passes`` among them).
      mark: what the work turned other is read as, and the node attribute ``adversarial`` set.

    Returns:
      The paths of the equations turned other (their part, owner and the body's labels are set).
    """
    name = node.eqn.primitive.name
    if name == "scan":
        first, count = int(node.eqn.params["num_consts"]), int(node.eqn.params["num_carry"])
    elif name == "while":
        first, count = int(node.eqn.params["body_nconsts"]), len(node.eqn.outvars)
    else:
        return set()
    body = node.levels[0]
    # who reads each value: the body's nodes, and for a result, what reads it after the loop and, as a
    # carry, whoever reads that input in the next iteration
    reading: dict[Any, list[Any]] = {}
    for inner in body.nodes:
        for var in inner.ins:
            if var is not None:
                reading.setdefault(var, []).append(inner)
    after: dict[Any, set[str]] = {}
    for j, var in enumerate(body.outvars):
        if var is not None:
            after.setdefault(var, set()).update(outer[j] if j < len(outer) else ())
            carry = body.invars[first + j] if j < count and first + j < len(body.invars) else None
            reading.setdefault(var, []).extend(reading.get(carry, []) if carry is not None else [])

    def readers(inner: Any) -> tuple[list[Any], set[str]]:
        return ([r for v in inner.outs if v is not None for r in reading.get(v, [])],
                set().union(*(after.get(v, set()) for v in inner.outs if v is not None)))

    # such work in the loop: read by nothing but ``allowed`` readers (each other, read as ``mark``), and
    # leading to a pass (through each other: the body's next iteration reads the carry through the same
    # work, PGD's x + alpha * sign(g) reads x); taken away one by one until both hold of all that is left
    kept = {id(inner): inner for inner in body.nodes
            if not inner.levels and inner.part == UPDATE and not inner.reads_state}
    changed = True
    while changed:
        changed = False
        for key, inner in list(kept.items()):
            nodes, marks = readers(inner)
            parts = marks | {mark if id(r) in kept else _SEVERAL if r.levels else r.part for r in nodes}
            if not parts <= set(allowed):
                del kept[key]
                changed = True
        leads: set[int] = set()
        grown = True
        while grown:
            grown = False
            for key, inner in kept.items():
                nodes, marks = readers(inner)
                if key not in leads and (marks & {*passes, mark} or any(
                        id(r) in leads or (id(r) not in kept and not r.levels and r.part in passes) for r in nodes)):
                    leads.add(key)
                    grown = True
        if len(leads) < len(kept):
            kept = {key: inner for key, inner in kept.items() if key in leads}
            changed = True
    moved: set[Any] = set()
    for inner in body.nodes:
        if id(inner) in kept:
            inner.part, inner.owner, inner.adversarial = OTHER, None, True
            body.labels[inner.path] = body.labels[inner.path]._replace(part=OTHER, owner=None)
            moved.add(inner.path)
    return moved


def metrics_only_loop(node: Any, outer: Sequence[Collection[str]], metrics: Collection[str]) -> set[Any]:
    """Turns into other work the update work in the bodies and branches of the loop or cond ``node``
    (at any depth) where every result of it that something reads is read by ``metrics`` alone: an
    optimizer's update run a second time for a metric (octo's finetune step logs the norm of
    ``tx.update``'s updates, computed apart from the one it applies; an ``optax.MultiSteps`` update
    is a ``cond``). Returns the paths turned (their parts and the bodies' labels are set)."""
    read = [marks for marks in outer if marks]
    if not read or not all(set(marks) <= set(metrics) for marks in read):
        return set()
    moved: set[Any] = set()

    def turn(level: Any) -> None:
        for inner in level.nodes:
            for nested in inner.levels:
                turn(nested)
                level.labels.update(nested.labels)
            if not inner.levels and inner.part == UPDATE:
                inner.part = OTHER
                level.labels[inner.path] = level.labels[inner.path]._replace(part=OTHER)
                moved.add(inner.path)

    for body in node.levels:
        turn(body)
    return moved
