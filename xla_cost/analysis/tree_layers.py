"""`analyze_step`'s per-layer rows split by tree where several arguments hold parameters of one
module path (`xla_cost.step.user_step.UserStep.trees`: TD3's actor and two critics): one row per
tree and module (``qf1_state/Dense_0``), each with its own parameters and work, told apart by the
data flow (`xla_cost.count.tree_split`), as the rows of one model are by their modules."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

import jax

from xla_cost.count.interpret import count_jaxpr
from xla_cost.count.layers import LayerCosts
from xla_cost.count.step_labels import StepLabels
from xla_cost.count.tree_split import rows_by_tree, tree_labels
from xla_cost.step import phases
from xla_cost.step.trees import named_leaves
from xla_cost.step.user_step import UserStep

__all__ = ["layers_by_tree"]


def layers_by_tree(
    traced: Any, prepared: UserStep, owners: Sequence[str | None] | None,
    classify: Callable[[Any, Sequence[str | None] | None], StepLabels], *,
    root: str | Sequence[str] | None, depth: int | None, known_modules: Collection[str],
) -> tuple[LayerCosts, ...] | None:
    """The step's per-layer rows, one per tree and module; None where no two arguments share module
    paths (the rows by module are the step's), or the trees' parameters do not add up to the
    modules' (then the rows stay by module). ``traced``: the step's jaxpr; ``owners``: per input,
    its module (as counted); ``classify``: the step's classification (`classify_step`), which the
    step's jaxpr is counted with again, its owners named after their trees."""
    params = _tree_parameters(prepared)
    if params is None or owners is None:
        return None
    leaf_trees = _argument_trees(prepared)
    inner = getattr(traced, "jaxpr", traced)
    if len(leaf_trees) != len(inner.invars):
        return None
    by_var = dict(zip(inner.invars, leaf_trees))

    def labelled(jaxpr: Any, given: Sequence[str | None] | None) -> StepLabels:
        invars = getattr(jaxpr, "jaxpr", jaxpr).invars
        return tree_labels(jaxpr, classify(jaxpr, given), [by_var.get(v, "") for v in invars])

    counted = count_jaxpr(traced, owners=owners, classify=labelled)
    parts = {p: [e for e in counted.equations if e.part == p] for p in phases.SPLIT}
    return rows_by_tree(parts, params, root=root, depth=depth, known_modules=known_modules)


def _argument_trees(prepared: UserStep) -> list[str]:
    """Per flattened leaf of the step's arguments, the tree of the argument it is in (its
    parameters', optimizer state's and counter's alike), '' for an argument of no tree."""
    flat = jax.tree_util.tree_flatten_with_path(tuple(prepared.args))[0]
    arguments = [_argument(path) for path, _ in flat]
    named: dict[tuple[int, ...], str] = {}
    for argument, tree in zip(arguments, prepared.trees):
        if tree:
            named.setdefault(argument, tree)
    return [named.get(argument, "") for argument in arguments]


def _argument(path: Sequence[Any]) -> tuple[int, ...]:
    """A leaf's argument: its positions in the arguments and in a tuple or list there."""
    found = []
    for entry in path:
        if not isinstance(entry, jax.tree_util.SequenceKey):
            break
        found.append(entry.idx)
    return tuple(found)


def _tree_parameters(prepared: UserStep) -> dict[str, dict[str, int]] | None:
    """Per tree, its parameter count per module path, each parameter counted once in its tree (a
    target network's copy beside it is the same parameter, as `UserStep.param_paths` counts it);
    None where no tree is named, or the trees' counts do not add up to each module's."""
    if not any(prepared.trees):
        return None
    flat = named_leaves(tuple(prepared.args))  # a parameter's own key last, not a wrapper's [<flat index 0>]
    counts: dict[str, dict[str, int]] = {}
    seen: set[tuple[str, str, str, tuple[int, ...]]] = set()
    for (path, leaf), module, tree in zip(flat, prepared.owners, prepared.trees):
        if not tree or module is None:
            continue
        shape = tuple(getattr(leaf, "shape", ()))
        key = (tree, module, jax.tree_util.keystr(path[-1:]), shape)
        if key in seen:
            continue
        seen.add(key)
        counts.setdefault(tree, {})
        counts[tree][module] = counts[tree].get(module, 0) + math.prod(shape)
    totals: dict[str, int] = {}
    for modules in counts.values():
        for module, count in modules.items():
            totals[module] = totals.get(module, 0) + count
    return counts if totals == {m: c for m, c in prepared.param_paths.items() if c} else None
