"""Pytrees of abstract arrays: shapes, bytes, and the module paths of parameters.

The helpers every layer above uses to read a tree of ``jax.ShapeDtypeStruct``
leaves: `abstract` makes one, `tree_bytes` weighs one (`nbytes`, `itemsize`: the one
place that knows a typed PRNG key's size), `leaf_modules` names the module that owns
each parameter (`named_leaves` and `path_names`: a parameter's key path and its names, the keys
of a wrapper around its array left out), `leaf_roles` what holds each leaf (an optimizer's state, an NNX variable).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np

__all__ = [
    "PyTree", "abstract", "loaded_nnx", "key_name", "named_leaves", "path_names", "leaf_modules",
    "module_param_counts", "describe_tree", "field_names",
    "is_array", "is_collections", "itemsize", "nbytes", "tree_bytes", "leaf_roles", "OPTIMIZER_STATE_NAMES",
    "elements_key",
]

PyTree = Any


def loaded_nnx() -> types.ModuleType | None:
    """``flax.nnx`` where something has imported it, else None.

    No object is an NNX module or variable before ``flax.nnx`` is imported (its
    classes are defined there), so the NNX checks ask only once it is: importing it
    took 0.45 s of CPU (IPython with it), a sixth of a whole analysis's start-up,
    for a Linen model or a function that never needs it."""
    return sys.modules.get("flax.nnx")


def abstract(tree: PyTree) -> PyTree:
    """Replaces every array leaf by its ``ShapeDtypeStruct``."""

    def leaf(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct):
            return x
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return jax.ShapeDtypeStruct(np.shape(x), x.dtype)
        return x

    return jax.tree.map(leaf, tree)


def key_name(entry: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def is_wrapper(node: Any) -> bool:
    """A node that wraps one array, its keys naming no module: a custom pytree node whose one
    leaf it gives without keys (jax's ``[<flat index 0>]``: simply's ``AnnotatedArray``), or
    that presents itself as that array (has a ``shape`` and a ``dtype``: an NNX ``Variable``,
    a dataclass node's ``.array``)."""
    if node is None or isinstance(node, (Mapping, list, tuple, jax.Array, np.ndarray, jax.ShapeDtypeStruct)):
        return False
    flat = jax.tree_util.tree_flatten_with_path(node)[0]
    if len(flat) != 1 or not flat[0][0]:
        return False
    unnamed = all(isinstance(k, jax.tree_util.FlattenedIndexKey) for k in flat[0][0])
    return unnamed or (hasattr(node, "shape") and hasattr(node, "dtype"))


def named_leaves(tree: PyTree, is_leaf: Callable[[Any], bool] | None = None) -> list[tuple[tuple[Any, ...], Any]]:
    """``jax.tree_util.tree_flatten_with_path(tree, is_leaf)``'s (key path, leaf), in its order,
    each path ending at the key that holds the parameter: the keys a wrapper (`is_wrapper`) adds
    below it are no module's, so ``{'fc1': {'w': AnnotatedArray(a)}}``'s leaf is ``['fc1']['w']``
    (module ``fc1``, name ``w``), not ``['fc1']['w'][<flat index 0>]``."""
    def stop(node: Any) -> bool:
        return (is_leaf is not None and is_leaf(node)) or is_wrapper(node)

    out = []
    for path, node in jax.tree_util.tree_flatten_with_path(tree, is_leaf=stop)[0]:
        wrapped = is_wrapper(node) and not (is_leaf is not None and is_leaf(node))
        out.append((path, jax.tree_util.tree_leaves(node)[0] if wrapped else node))
    return out


def path_names(path: Sequence[Any]) -> list[str]:
    """A key path's names (`named_leaves`'s), a box's trailing ``.value`` (``.raw_value``) left
    out: an NNX variable's, a Linen ``nn.Partitioned``'s."""
    names = [key_name(p) for p in path]
    while names and names[-1] in ("value", "raw_value") and isinstance(path[len(names) - 1],
                                                                        jax.tree_util.GetAttrKey):
        names.pop()
    return names


def leaf_modules(params: PyTree, offset: int = 0, collections: bool = False) -> list[tuple[Any, str]]:
    """(key path, module path) of every parameter leaf; the module drops the variable
    name, and the first ``offset`` components (a ``params`` collection name); with
    ``collections``, past those, every key that names a collection of a Linen variables
    dict the leaf sits in (`is_collections`), however deep they nest: ``params/params/
    Dense_0/kernel`` and ``batch_stats/BatchNorm_0/mean`` of ``{'params': {'params': ...}}``
    or ``{'params': ..., 'batch_stats': ...}`` -> ``Dense_0``, ``BatchNorm_0``."""
    out = []
    for path, _ in named_leaves(params):
        names = path_names(path)
        start = offset
        if collections:
            node = _subtree(params, path[:start])
            while start < len(names) - 1 and is_collections(node):
                node, start = _subtree(node, path[start:start + 1]), start + 1
        out.append((path, "/".join(names[start:-1])))
    return out


def _subtree(tree: Any, path: Sequence[Any]) -> Any:
    for entry in path:
        tree = tree[entry.key] if isinstance(tree, Mapping) and hasattr(entry, "key") else None
    return tree


def module_param_counts(params: PyTree, offset: int = 0, collections: bool = False) -> dict[str, int]:
    """Parameter count per module path (`leaf_modules`); the path drops the variable's own name."""
    counts: dict[str, int] = {}
    leaves = jax.tree_util.tree_leaves(params)
    for (_, module), leaf in zip(leaf_modules(params, offset, collections), leaves):
        counts[module] = counts.get(module, 0) + int(np.prod(np.shape(leaf)))
    return counts


def field_names(tree: Any) -> list[str] | None:
    """The fields of a record a model may return, by name: a dataclass instance's
    (a ``flax.struct.dataclass`` among them) or a NamedTuple's; None for anything else."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return [f.name for f in dataclasses.fields(tree)]
    if isinstance(tree, tuple) and isinstance(getattr(type(tree), "_fields", None), tuple):
        return list(type(tree)._fields)
    return None


def describe_tree(tree: PyTree) -> str:
    """``(float32[8,10], float32[])``: a pytree's structure with abstract leaves; a
    dataclass or NamedTuple as ``Output(logits=float32[8,10], cache=NoneType)``."""

    def leaf(x: Any) -> str:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return f"{x.dtype}[{','.join(map(str, x.shape))}]"
        return type(x).__name__

    fields = None if is_array(tree) else field_names(tree)
    if fields is not None:
        inner = ", ".join(f"{name}={describe_tree(getattr(tree, name))}" for name in fields)
        return f"{type(tree).__name__}({inner})"
    if isinstance(tree, (tuple, list)):
        inner = ", ".join(describe_tree(x) for x in tree)
        return f"({inner})" if isinstance(tree, tuple) else f"[{inner}]"
    if isinstance(tree, Mapping):
        return "{" + ", ".join(f"{k!r}: {describe_tree(v)}" for k, v in tree.items()) + "}"
    return leaf(tree)


def is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, jax.ShapeDtypeStruct)) or (
        hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, nn.Module)
        and not ((nnx := loaded_nnx()) is not None and isinstance(x, nnx.Object))
    )


def is_collections(node: Any) -> bool:
    """A Linen variables dict: collections by name (``params`` among them), each a
    mapping (``{'params': {...}, 'batch_stats': {...}}``, as ``model.init`` returns it)."""
    return isinstance(node, Mapping) and "params" in node and all(isinstance(v, Mapping) for v in node.values())


def itemsize(dtype: Any) -> int:
    """Bytes per element; a typed PRNG key's dtype (``key<fry>``), which numpy
    cannot read, has its own ``itemsize`` (its key data: 8 bytes for threefry)."""
    size = getattr(dtype, "itemsize", None)
    return int(size) if size is not None else np.dtype(dtype).itemsize


def nbytes(aval: Any) -> int:
    """Bytes of one array, abstract or not (``shape`` and ``dtype``; a typed PRNG key's
    dtype included, `itemsize`); a Python scalar leaf as jax holds it (``jnp.asarray``)."""
    if not (hasattr(aval, "shape") and hasattr(aval, "dtype")):
        aval = jax.eval_shape(lambda: jax.numpy.asarray(aval))
    return int(math.prod(aval.shape)) * itemsize(aval.dtype)


def elements_key(aval: Any) -> tuple[tuple[int, ...], str]:
    """An array's shape up to its unit axes, and its dtype: the same elements in the same order whatever
    unit axes they are viewed with (a BatchNorm's running mean kept ``(C,)`` and written back ``(1, 1, C)``
    by ``keepdims`` means; a ``pmap``'s body's ``(1, *shape)`` block of one device)."""
    return tuple(int(d) for d in getattr(aval, "shape", ()) if d != 1), str(getattr(aval, "dtype", ""))


def tree_bytes(tree: Any) -> int:
    """Bytes of every array leaf of ``tree``."""
    return sum(nbytes(leaf) for leaf in jax.tree_util.tree_leaves(tree) if hasattr(leaf, "shape"))


OPTIMIZER_STATE_NAMES = frozenset({"opt_state", "optstate", "optimizer_state", "optimizer"})
"""Key names (lower case) under which a tree holds an optimizer's state: `leaf_roles` labels
every leaf under one ``optimizer_state``."""


def _is_optax_state(node: Any) -> bool:
    """An optax state (``ScaleByAdamState``, ``TraceState``, ``InjectHyperparamsState``, ...):
    the state types optax defines, told by their module (optax is not imported here)."""
    return type(node).__module__.split(".")[0] == "optax" and isinstance(node, tuple)


def leaf_roles(tree: PyTree) -> list[str | None]:
    """What holds each leaf of ``tree`` (in ``jax.tree_util.tree_leaves`` order), by the
    containers' types and key names, not by shapes:

    * ``optimizer_state``: a leaf inside an optax state (``ScaleByAdamState``'s ``mu`` and
      ``nu``, ``TraceState``, ...), an NNX ``OptState`` variable (``nnx.Optimizer``'s state and
      step), or under a key named as in `OPTIMIZER_STATE_NAMES`;
    * ``parameters``: an NNX ``Param``;
    * ``model_state``: any other NNX variable (batch statistics, RNG keys and counts, metrics);
    * None: a plain leaf (a Linen ``params`` tree, a batch): the caller decides.
    """
    nnx = loaded_nnx()
    variable = () if nnx is None else nnx.Variable  # isinstance(x, ()) is False

    def marker(node: Any) -> bool:
        return isinstance(node, variable) or _is_optax_state(node)

    roles: list[str | None] = []
    for path, node in jax.tree_util.tree_flatten_with_path(tree, is_leaf=marker)[0]:
        named = any(key_name(entry).lower() in OPTIMIZER_STATE_NAMES for entry in path)
        if named or _is_optax_state(node) or (nnx is not None and isinstance(node, nnx.OptState)):
            role: str | None = "optimizer_state"
        elif nnx is not None and isinstance(node, nnx.Param):
            role = "parameters"
        elif isinstance(node, variable):
            role = "model_state"
        else:
            role = None
        roles += [role] * (len(jax.tree_util.tree_leaves(node)) if marker(node) else 1)
    return roles
