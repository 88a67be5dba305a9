"""Sharded training steps: meshes, partition rules and the shardings of every phase.

The engine is JAX's own SPMD partitioner: `plan_sharding` decides a
`jax.sharding.NamedSharding` for every argument and result of every phase
program, ``jax.jit(..., in_shardings=, out_shardings=)`` compiles the program
one device of a real multi-device run executes, and XLA inserts the
collectives. Nothing about parallelism is computed by hand here.

Mesh axes (`MESH_AXES`), outermost first:

* ``data``: the batch is split over it, parameters are replicated (DDP);
  gradients are all-reduced.
* ``fsdp``: the batch is split over it too, and parameters, gradients and
  optimizer state are sharded (ZeRO-3 / FSDP): each parameter is split along
  its largest dimension that ``fsdp`` divides, gathered for compute, and its
  gradient reduce-scattered.
* ``expert``: expert parallelism. The batch is split over it too (tokens
  data-parallel), and the experts' stacked weights of a mixture of experts
  are split by expert (the model's rules, ``exp`` in logical names); a model
  constrains its dispatched tokens to be split by expert
  (``nn.with_logical_constraint``, which the plan's `ShardingPlan.constraints`
  applies), and XLA's partitioner moves them there and back with all-to-alls.
* ``context``: context parallelism. Every sequence's positions are split
  over it (the tokens, every activation ``(batch, positions, ...)``), the
  parameters replicated and their gradients all-reduced over it, and
  attention's keys and values all-gathered over it
  (`xla_cost.parallel.context`).
* ``model``: tensor parallelism. Which dimension of a parameter it splits comes
  from partition rules: the ``param_sharding`` regex rules a user passes, the
  partitioning metadata of the model (``nn.with_partitioning``,
  ``nnx.with_partitioning``, logical axis names mapped by
  `DEFAULT_LOGICAL_RULES` or the user's ``logical_axis_rules``), or the rules
  the model's class declares (`model_rules`: the zoo's Megatron column/row
  splits for the transformers, output channels for the convolutional nets).

A rule's spec may be shorter than the parameter: it names the *last*
dimensions, so one rule covers a layer and its ``nn.scan`` stack (which has a
leading layer axis). A rule that names an axis the mesh lacks, or a dimension
the axis does not divide, leaves that dimension whole (said in a note).

Devices: a mesh needs that many devices. On a machine without them, the CPU
simulates them (`xla_cost.parallel.simulated.simulate_devices`, which must run before JAX starts its
backends; the CLI does it for ``--mesh``): ``compiled.cost_analysis()`` and
``memory_analysis()`` of the partitioned program are then per device.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from xla_cost.errors import InputError
from xla_cost.parallel.mesh import (BATCH_AXES, CONTEXT, MESH_AXES, caller_axis_types, check_batch_split, check_mesh,
                                    explicit_axes, make_mesh, mesh_devices, mesh_text, parse_mesh)
from xla_cost.parallel.simulated import MAX_SIMULATED_DEVICES, check_device_count, simulate_devices
from xla_cost.step.trees import named_leaves, nbytes, path_names

__all__ = [
    "ShardingOptions",
    "MESH_AXES",
    "BATCH_AXES",
    "DEFAULT_LOGICAL_RULES",
    "ShardingPlan",
    "parse_mesh",
    "check_mesh",
    "mesh_devices",
    "simulate_devices",
    "check_device_count",
    "MAX_SIMULATED_DEVICES",
    "check_batch_split",
    "compile_rules",
    "make_mesh",
    "caller_axis_types",
    "explicit_axes",
    "mesh_text",
    "active_mesh",
    "axes_of",
    "model_rules",
    "RULES_ATTRIBUTE",
    "param_specs",
    "plan_sharding",
    "per_device_bytes",
]

DEFAULT_LOGICAL_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
    ("batch", ("data", "fsdp")),
    ("embed", "fsdp"),
    ("mlp", "model"),
    ("heads", "model"),
    ("q_heads", "model"),
    ("kv_heads", "model"),
    ("joined_kv", "model"),
    ("vocab", "model"),
    ("kv", None),
    ("head_dim", None),
    ("layers", None),
    ("length", None),
    ("norm", None),
    ("conv_out", "model"),
    ("exp", "expert"),
    ("activation_exp", "expert"),
    ("activation_batch", ("data", "fsdp", "expert")),
    ("activation_batch_no_exp", ("data", "fsdp")),
    ("activation_length", "context"),
    ("activation_embed", "model"),
)
"""Logical axis names (Flax's ``nn.with_partitioning(init, ("embed", "mlp"))``
and MaxText's vocabulary) mapped to this mesh's axes; names equal to a mesh
axis (``"model"``) map to it. Override with ``logical_axis_rules=``.
``activation_embed`` (a residual stream's width: `xla_cost.parallel.residual`)
maps to ``model`` as MaxText's to ``tensor`` (base.yml at 76bd53b0, line 78);
``activation_length`` (its positions) to ``context``."""

PartitionRules = Sequence[tuple[str, Any]]
"""``[(regex, spec), ...]``: the first regex found (``re.search``) in a
parameter's path (``h_0/attn/c_attn/kernel``) gives its spec: a
`jax.sharding.PartitionSpec` or a tuple of mesh axis names / None / tuples of
names, aligned to the parameter's last dimensions."""


@dataclasses.dataclass(frozen=True)
class ShardingOptions:
    """How a step is sharded: the mesh options `xla_cost.analyze` takes.

    Attributes:
      mesh: devices per axis, ``{"data": 8}``, ``"fsdp=8,model=8"`` or a
        `jax.sharding.Mesh`, with axes among `MESH_AXES` (None: one device).
      param_sharding: ``[(regex, PartitionSpec), ...]`` rules for the
        parameters, first match on the parameter's path, before the model's
        partitioning metadata and its class's rules (`model_rules`).
      logical_axis_rules: ``[(logical name, mesh axis), ...]`` for models
        annotated with ``nn.with_partitioning``/``nnx.with_partitioning``
        (default `DEFAULT_LOGICAL_RULES`).
    """

    mesh: Mapping[str, int] | str | Mesh | None = None
    param_sharding: PartitionRules | None = None
    logical_axis_rules: Sequence[tuple[str, Any]] | None = None

    def sizes(self) -> dict[str, int]:
        """Devices per mesh axis, checked (`check_mesh`); empty for one device."""
        return check_mesh(self.mesh) if self.mesh is not None else {}

    @property
    def sharded(self) -> bool:
        """Whether the mesh has more than one device."""
        return mesh_devices(self.sizes()) > 1


def compile_rules(rules: PartitionRules | None, flag: str = "param_sharding") -> list[tuple[re.Pattern[str], Any]]:
    """The rules' regexes compiled; `InputError` naming the first that is not a regular expression."""
    compiled = []
    for pattern, spec in rules or ():
        try:
            compiled.append((re.compile(pattern), spec))
        except (re.error, TypeError) as exc:
            raise InputError(
                f"{flag} REGEX as a Python regular expression", f"{pattern!r} ({exc})",
                "Escape the characters [ ] ( ) . * + ? with a backslash to match them literally.",
            ) from exc
    return compiled


# ------------------------------------------------------------------ parameter specs


def _path_texts(tree: Any) -> Iterator[str]:
    """Each leaf's parameter path (`named_leaves`: a wrapper's and a box's ``.value`` keys left out)."""
    return iter(["/".join(path_names(path)) for path, _ in named_leaves(tree)])


def _is_box(x: Any) -> bool:
    """A Flax box around a parameter: Linen ``nn.Partitioned``, an NNX Variable."""
    from flax import nnx
    import flax.linen as nn

    return isinstance(x, (nn.meta.AxisMetadata, nnx.Variable)) or type(x).__name__ == "VariableState"


def _box_names(box: Any) -> tuple[Any, ...] | None:
    """The logical (or mesh) axis names a box carries, if any."""
    names = getattr(box, "names", None)
    if names is None and hasattr(box, "get_metadata"):
        try:
            meta = box.get_metadata()
        except Exception:  # noqa: BLE001 - metadata is optional
            meta = {}
        # the key has moved with Flax: sharding (0.10), sharding_names (0.11), out_sharding (0.12)
        names = meta.get("sharding_names") or meta.get("sharding") or meta.get("out_sharding")
    names = getattr(names, "spec", names)  # a NamedSharding: its spec
    if names is None:
        return None
    if isinstance(names, PartitionSpec):
        names = tuple(names)
    return tuple(names)


def _logical_box(box: Any) -> bool:
    """Whether a box's names are logical ones (Linen ``nn.with_logical_partitioning``, an NNX Variable
    with ``sharding_rules``), which the logical rules map and Flax leaves whole where they map none."""
    import flax.linen as nn

    if isinstance(box, nn.LogicallyPartitioned):
        return True
    try:
        return bool(box.get_metadata().get("sharding_rules")) if hasattr(box, "get_metadata") else False
    except Exception:  # noqa: BLE001 - metadata is optional
        return False


def _normalise_spec(spec: Any, where: str) -> tuple[Any, ...]:
    if isinstance(spec, PartitionSpec):
        return tuple(spec)
    if isinstance(spec, (str, type(None))):
        return (spec,)
    if isinstance(spec, (tuple, list)):
        return tuple(tuple(s) if isinstance(s, list) else s for s in spec)
    raise InputError(
        "a partition spec: a PartitionSpec or a tuple of mesh axis names / None",
        f"{spec!r} for {where}", "Use e.g. PartitionSpec(None, 'model').",
    )


def _logical_to_mesh(
    names: Sequence[Any], rules: Sequence[tuple[str, Any]], mesh: Mapping[str, int]
) -> tuple[Any, ...]:
    table = dict(rules)
    out = []
    for name in names:
        if name is None:
            out.append(None)
        elif isinstance(name, tuple):
            out.append(tuple(n for n in name if n in mesh) or None)
        elif name in MESH_AXES:
            out.append(name)
        else:
            out.append(table.get(name))
    return tuple(out)


def axes_of(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def _fit(
    spec: Sequence[Any], shape: Sequence[int], mesh: Mapping[str, int], path: str,
    notes: list[str],
) -> list[Any]:
    """``spec`` aligned to the last dims of ``shape``, keeping only axes the mesh has
    (size > 1) and that divide their dimension."""
    spec = list(spec)[-len(shape):] if shape else []
    full: list[Any] = [None] * (len(shape) - len(spec)) + spec
    used: set[str] = set()
    for i, entry in enumerate(full):
        axes = tuple(a for a in axes_of(entry) if mesh.get(a, 1) > 1 and a not in used)
        if not axes:
            full[i] = None
            continue
        size = math.prod(mesh[a] for a in axes)
        if shape[i] % size:
            notes.append(
                f"{path}: dimension {i} ({shape[i]}) is not divisible by {'x'.join(axes)} "
                f"({size}): left whole"
            )
            full[i] = None
            continue
        used.update(axes)
        full[i] = axes[0] if len(axes) == 1 else axes
    return full


def _add_fsdp(
    full: list[Any], shape: Sequence[int], size: int, common: Mapping[int, int] | None = None
) -> bool:
    """Splits one dimension ``fsdp`` divides (not already split) over it.

    The dimension is the one whose size is most common among all the
    model's parameter dimensions (``common``: the model width of a
    transformer, which MaxText's rules shard over fsdp as ``embed``), then
    the largest: every layer then splits the same activation dimension, and
    the partitioner gathers the weights instead of resharding activations.
    """
    if any("fsdp" in axes_of(e) for e in full):
        return True
    free = [i for i, e in enumerate(full) if e is None and shape[i] % size == 0 and shape[i] >= size]
    if not free:
        return False
    common = common or {}
    best = max(free, key=lambda i: (common.get(shape[i], 0), shape[i], -i))
    full[best] = "fsdp"
    return True


def _dimension_counts(params: Any) -> dict[int, int]:
    """How often each size occurs among the dimensions of the parameters."""
    counts: dict[int, int] = {}
    for leaf in jax.tree_util.tree_leaves(params):
        for d in getattr(leaf, "shape", ()):
            counts[d] = counts.get(d, 0) + 1
    return counts


RULES_ATTRIBUTE = "xla_cost_partition_rules"
"""The class attribute in which a model declares its default partition rules,
``((regex, spec), ...)`` as ``param_sharding`` takes them: used after the
user's rules and the parameters' own partitioning metadata. The zoo's families
declare theirs (Megatron splits for the transformers, output channels for the
convolutional nets); any model class may."""


def model_rules(model: Any) -> PartitionRules:
    """The partition rules ``model``'s class (or its nearest base) declares in
    `RULES_ATTRIBUTE`; empty when it declares none."""
    return tuple(getattr(type(model), RULES_ATTRIBUTE, ()) or ())


def param_specs(
    params: Any,
    mesh: Mapping[str, int],
    *,
    param_sharding: PartitionRules | None = None,
    logical_axis_rules: Sequence[tuple[str, Any]] | None = None,
    model_rules: PartitionRules | None = None,
    explicit: Sequence[str] = (),
) -> tuple[Any, dict[str, str], list[str]]:
    """A `PartitionSpec` for every parameter leaf, where each came from, and notes.

    The spec of a parameter, by precedence: the first ``param_sharding`` rule
    whose regex is found in its path; the box's own partitioning metadata
    (logical names through ``logical_axis_rules``, default
    `DEFAULT_LOGICAL_RULES`); the first ``model_rules`` rule (source ``zoo``:
    the zoo's families declare theirs, `model_rules`); else replicated.
    Then, on an ``fsdp`` mesh, the largest dimension ``fsdp`` divides that is
    not split yet is split over it, unless ``fsdp`` is among ``explicit``, the
    mesh's axes of `jax.sharding.AxisType.Explicit`: there jax types every array
    with its sharding and the model's code computes on the layout its own
    annotations give (as the user's ``jax.jit`` lays it), which a split of
    xla_cost's own would break (jax refuses a norm's scale split over ``fsdp``
    times activations whose batch is: ``illegally sharded result``), so the
    parameters keep their annotations', rules' or zoo's specs, the rest
    replicated.

    Raises:
      InputError: on a mesh with Explicit axes, annotations that name axes
        neither the mesh has nor the logical rules map (``tensor`` on a mesh of
        ``fsdp`` and ``model``): the model's code, typed on them, cannot run on it.

    Returns:
      ``(specs, sources, notes)``: a tree of `PartitionSpec` with the
      structure of ``params`` (boxes included), the source of each parameter's
      spec by path (``rule``, ``metadata``, ``zoo``, ``replicated``), notes.
    """
    rules = compile_rules(param_sharding)
    zoo = [(re.compile(p), s) for p, s in (model_rules or ())]
    used: set[int] = set()
    found: set[int] = set()
    logical = list(logical_axis_rules) if logical_axis_rules is not None else list(DEFAULT_LOGICAL_RULES)
    notes: list[str] = []
    sources: dict[str, str] = {}
    box_names: dict[str, tuple[Any, ...]] = {}
    mesh_named: dict[str, tuple[Any, ...]] = {}  # the boxes whose names are mesh axes, not logical ones
    for path, leaf in named_leaves(params, is_leaf=_is_box):
        if _is_box(leaf):
            names = _box_names(leaf)
            if names is not None:
                box_names["/".join(path_names(path))] = names
                if not _logical_box(leaf):
                    mesh_named["/".join(path_names(path))] = names
    if explicit:
        _check_box_axes(mesh_named, logical, mesh)
    fsdp = mesh.get("fsdp", 1) if "fsdp" not in explicit else 1  # Explicit: the model's own layout
    common = _dimension_counts(params)
    unsplit: list[str] = []

    def leaf_spec(text: str, leaf: Any) -> PartitionSpec:
        shape = tuple(getattr(leaf, "shape", ()))
        spec: tuple[Any, ...] = ()
        source = "replicated"
        found.update(i for i, (pattern, _) in enumerate(rules) if pattern.search(text))
        for index, (pattern, rule) in enumerate(rules):
            if pattern.search(text):
                spec, source = _normalise_spec(rule, f"param_sharding rule {pattern.pattern!r}"), "rule"
                used.add(index)
                break
        else:
            if text in box_names:
                spec, source = _logical_to_mesh(box_names[text], logical, mesh), "metadata"
            else:
                for pattern, rule in zoo:
                    if pattern.search(text):
                        spec, source = _normalise_spec(rule, "zoo rule"), "zoo"
                        break
        full = _fit(spec, shape, mesh, text, notes)
        given = any("fsdp" in axes_of(e) for e in full)  # a rule's or the metadata's own fsdp
        if fsdp > 1 and shape and not _add_fsdp(full, shape, fsdp, common):
            unsplit.append(text)
        if all(e is None for e in full) and source != "replicated" and spec:
            source += " (nothing split)"
        if not given and any("fsdp" in axes_of(e) for e in full):  # split over fsdp here: said so
            source = "fsdp" if source == "replicated" else f"{source} + fsdp"
        sources[text] = source
        return PartitionSpec(*full)

    texts = _path_texts(params)
    specs = jax.tree.map(lambda leaf: leaf_spec(next(texts), leaf), params)
    _check_rules_used(rules, used, found, list(sources))
    if unsplit:
        notes.append(
            f"fsdp: {len(unsplit)} parameter(s) with no dimension fsdp={fsdp} divides stay "
            f"replicated ({', '.join(unsplit[:4])}{' ...' if len(unsplit) > 4 else ''})"
        )
    return specs, sources, notes


def _check_box_axes(box_names: Mapping[str, tuple[Any, ...]], logical: Sequence[tuple[str, Any]],
                    mesh: Mapping[str, int]) -> None:
    """Refuses parameters' mesh-axis annotations (``box_names``: not logical ones) naming axes that are
    neither xla_cost's mesh axes (`MESH_AXES`) nor names the logical rules map: on Explicit axes the
    model's code is typed on them."""
    table = dict(logical)
    lacking: dict[str, str] = {}
    for path, names in box_names.items():
        for name in names:
            for axis in (name if isinstance(name, tuple) else (name,)):
                if isinstance(axis, str) and axis not in MESH_AXES and axis not in table:
                    lacking.setdefault(axis, path)
    if lacking:
        shown = ", ".join(f"{axis!r} ({path})" for axis, path in lacking.items())
        raise InputError(
            f"parameters' sharding annotations naming this mesh's axes ({mesh_text(mesh)}; Explicit)",
            f"annotations naming axes it lacks: {shown}",
            "Rename them in the model's sharding config to the mesh's axes (xla_cost's: "
            f"{', '.join(MESH_AXES)}), or map each to one with logical_axis_rules=[(name, axis)].",
        )


def _check_rules_used(rules: Sequence[tuple[re.Pattern[str], Any]], used: set[int], found: set[int],
                      paths: Sequence[str]) -> None:
    """Refuses ``param_sharding`` rules that gave no parameter its spec: a
    typo in a rule would otherwise leave the parameters it meant replicated."""
    idle = [pattern.pattern for index, (pattern, _) in enumerate(rules) if index not in used]
    if not idle:
        return
    why = {pattern.pattern: "only parameters an earlier rule takes (first match wins)" if index in found
           else "no parameter path" for index, (pattern, _) in enumerate(rules)}
    shown = ", ".join(paths[:4]) + (", ..." if len(paths) > 4 else "")
    raise InputError(
        "every param_sharding rule to give some parameter its spec",
        "; ".join(f"{p!r} matching {why[p]}" for p in idle) + f" (the parameters: {shown})",
        "Fix the regex (it is searched in paths like those) or drop the rule.",
    )


def _match_params(
    tree: Any, params: Any, specs: Any, mesh: Mapping[str, int], explicit: Sequence[str] = ()
) -> Any:
    """Specs for a params-like tree (optimizer state): a leaf whose path ends with a
    parameter's path and has its shape takes its spec; other leaves are split over
    ``fsdp`` alone (Adafactor's factored moments; not where ``fsdp`` is Explicit, as
    in `param_specs`) or replicated (counters)."""
    by_path: dict[tuple[str, ...], tuple[tuple[int, ...], PartitionSpec]] = {}
    spec_leaves = jax.tree_util.tree_leaves(specs, is_leaf=lambda x: isinstance(x, PartitionSpec))
    for text, leaf, spec in zip(_path_texts(params), jax.tree.leaves(params), spec_leaves):
        by_path[tuple(text.split("/"))] = (tuple(leaf.shape), spec)
    fsdp = mesh.get("fsdp", 1) if "fsdp" not in explicit else 1
    common = _dimension_counts(params)

    def leaf_spec(text: str, leaf: Any) -> PartitionSpec:
        names = tuple(text.split("/"))
        shape = tuple(getattr(leaf, "shape", ()))
        best = None
        for key, (pshape, spec) in by_path.items():
            if len(key) <= len(names) and names[-len(key):] == key and pshape == shape:
                if best is None or len(key) > len(best[0]):
                    best = (key, spec)
        if best is not None:
            return best[1]
        full: list[Any] = [None] * len(shape)
        if fsdp > 1 and shape:
            _add_fsdp(full, shape, fsdp, common)
        return PartitionSpec(*full)

    texts = _path_texts(tree)
    return jax.tree.map(lambda leaf: leaf_spec(next(texts), leaf), tree)


@dataclasses.dataclass(frozen=True)
class ShardingPlan:
    """The shardings of one sharded training step.

    Attributes:
      mesh: the `jax.sharding.Mesh`.
      sizes: devices per mesh axis, in `MESH_AXES` order.
      specs: `PartitionSpec` trees by argument-tree name (``params``,
        ``grads``, ``opt_state``, ``state``, ``batch``, ``targets``, ``loss``),
        each with the structure of the workload's tree.
      sources: where each parameter's spec came from, by path: ``rule``, ``metadata``, ``zoo`` or
        ``replicated``, with `` + fsdp`` (or ``fsdp`` alone) where the fsdp axis split it here.
      notes: what a reader should know (dimensions left whole, fallbacks).
      logical_rules: the logical axis rules (`DEFAULT_LOGICAL_RULES` or the
        user's) under which the model's own ``nn.with_logical_constraint``
        calls are applied (`constraints`); None: they are not (a note says why).
      sequence: with a ``context`` axis, the positions per sequence (the
        inputs' second dimension) that are split over it; None without one.
    """

    mesh: Mesh
    sizes: Mapping[str, int]
    specs: Mapping[str, Any]
    sources: Mapping[str, str]
    notes: tuple[str, ...] = ()
    logical_rules: tuple[tuple[str, Any], ...] | None = DEFAULT_LOGICAL_RULES
    sequence: int | None = None

    @property
    def devices(self) -> int:
        return mesh_devices(self.sizes)

    @property
    def batch_split(self) -> int:
        """Devices the batch is split over (the product of the batch axes)."""
        return math.prod(self.sizes.get(a, 1) for a in BATCH_AXES)

    def shardings(self, name: str) -> Any:
        """`NamedSharding` tree of an argument tree (or ``loss``)."""
        return jax.tree.map(
            lambda s: NamedSharding(self.mesh, s), self.specs[name],
            is_leaf=lambda x: isinstance(x, PartitionSpec),
        )

    def typed(self, names: Sequence[str], args: Sequence[Any]) -> tuple[Any, ...]:
        """``args``, the trees named ``names``, as ``jax.ShapeDtypeStruct`` leaves typed with their shardings
        where the mesh has Explicit axes (jax types an argument by the sharding it comes with, not by
        ``jit``'s in_shardings, which would leave the batch replicated); as they are on Auto axes."""
        if jax.sharding.AxisType.Explicit not in tuple(self.mesh.axis_types):
            return tuple(args)

        def place(sharding: NamedSharding, tree: Any) -> Any:
            return jax.tree.map(lambda a: jax.ShapeDtypeStruct(
                a.shape, a.dtype, sharding=sharding, weak_type=getattr(a, "weak_type", False),
            ) if hasattr(a, "shape") and hasattr(a, "dtype") else a, tree)

        return tuple(jax.tree.map(place, self.shardings(name), arg, is_leaf=lambda x: isinstance(x, NamedSharding))
                     for name, arg in zip(names, args))

    def constraints(self, batch: int) -> Any:
        """A context in which every Linen module method's outputs with the batch on
        their leading axis are constrained to be split over the batch axes
        (their other dimensions left to the partitioner), as MaxText's
        activation constraints do (and, with a ``context`` axis, their
        positions, a second axis of `sequence`, over it): the partitioner then gathers ``fsdp``
        weights for compute instead of splitting the work by weights, and
        Megatron's ``model`` splits stay free. And the model's own logical
        constraints (``nn.with_logical_constraint``, as MaxText writes them: a
        mixture of experts' tokens split by expert) apply on this mesh under
        `logical_rules`, each logical name mapped to the axes of this mesh it
        names (none: that dimension is left to the partitioner), unless
        `logical_rules` is None. Entered once, by a ``with``."""
        return self._constrained(batch)

    @contextlib.contextmanager
    def _constrained(self, batch: int) -> Any:
        import flax.linen as nn

        present = {a for a, n in self.sizes.items() if n > 1}
        rules = tuple((name, tuple(a for a in axes_of(axes) if a in present) or None)
                      for name, axes in self.logical_rules or ())
        axes = tuple(a for a in BATCH_AXES if self.sizes.get(a, 1) > 1)
        first = axes[0] if len(axes) == 1 else axes

        sequence = self.sequence

        def constrain(x: Any) -> Any:
            shape = getattr(x, "shape", ())
            if not isinstance(x, jax.Array) or not shape or shape[0] != batch:
                return x
            rest = [PartitionSpec.UNCONSTRAINED] * (len(shape) - 1)
            if sequence is not None and len(shape) >= 2 and shape[1] == sequence:
                rest[0] = CONTEXT
            spec = PartitionSpec(first if axes else None, *rest)
            return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, spec))

        def interceptor(next_fun: Any, args: Any, kwargs: Any, context: Any) -> Any:
            name = context.method_name
            if name in ("setup", "init", "apply") or (name.startswith("_") and name != "__call__"):
                return next_fun(*args, **kwargs)
            return jax.tree.map(constrain, next_fun(*args, **kwargs))

        logical = self.logical_rules is not None
        # on Explicit axes alone every array's type carries its sharding from the arguments' (`typed`): nothing
        # to constrain, and no UNCONSTRAINED dimension such a mesh allows
        typed = jax.sharding.AxisType.Auto not in tuple(self.mesh.axis_types)
        token = _ACTIVE_MESH.set(self.mesh)
        with _reset(_ACTIVE_MESH, token), (jax.set_mesh(self.mesh) if logical else contextlib.nullcontext()), (
                nn.logical_axis_rules(rules) if logical else contextlib.nullcontext()), (
                nn.intercept_methods(interceptor) if (axes or sequence is not None) and not typed
                else contextlib.nullcontext()):
            yield

    def param_table(self) -> dict[str, str]:
        """``{path: "PartitionSpec(None, 'model')"}`` for the report."""
        out = {}
        leaves = jax.tree_util.tree_leaves(self.specs["params"], is_leaf=lambda x: isinstance(x, PartitionSpec))
        for path, spec in zip(self.sources, leaves):
            out[path] = _spec_text(spec)
        return out


_ACTIVE_MESH: contextvars.ContextVar[Mesh | None] = contextvars.ContextVar("xla_cost_mesh", default=None)


@contextlib.contextmanager
def _reset(variable: contextvars.ContextVar[Any], token: Any) -> Any:
    try:
        yield
    finally:
        variable.reset(token)


def active_mesh() -> Mesh | None:
    """The mesh of the sharded step being traced (inside `ShardingPlan.constraints`); None outside
    one. A kernel XLA's partitioner cannot split (a Pallas TPU kernel: a custom call it would run
    whole on every device, its operands gathered) is mapped over it by its caller, as MaxText maps
    its splash attention with ``shard_map``."""
    return _ACTIVE_MESH.get()


def _spec_text(spec: PartitionSpec) -> str:
    parts = []
    for e in spec:
        parts.append("None" if e is None else (repr(e) if isinstance(e, str) else "(" + ",".join(map(repr, e)) + ")"))
    return "(" + ", ".join(parts) + ")"


def _batch_specs(tree: Any, batch: int, mesh: Mapping[str, int], what: str, sequence: int | None = None) -> Any:
    """Specs splitting each leaf with the batch on its leading axis over the batch axes, and its
    positions (a second axis of ``sequence``) over ``context``."""
    axes = tuple(a for a in BATCH_AXES if mesh.get(a, 1) > 1)

    def leaf_spec(leaf: Any) -> PartitionSpec:
        shape = tuple(getattr(leaf, "shape", ()))
        first = (axes[0] if len(axes) == 1 else axes) if axes else None
        if sequence is not None and len(shape) >= 2 and shape[0] == batch and shape[1] == sequence:
            return PartitionSpec(first, CONTEXT)
        if axes and shape and shape[0] == batch:
            return PartitionSpec(first)
        return PartitionSpec()

    check_batch_split(mesh, batch, what)
    return jax.tree.map(leaf_spec, tree)


def plan_sharding(
    workload: Any,
    mesh: Mapping[str, int] | Mesh,
    *,
    param_sharding: PartitionRules | None = None,
    logical_axis_rules: Sequence[tuple[str, Any]] | None = None,
    model_rules: PartitionRules | None = None,
    mesh_notes: Sequence[str] = (),
) -> ShardingPlan:
    """The shardings of every tree of a `xla_cost.step.workload.Workload` on ``mesh``
    (``mesh_notes``: what `make_mesh` said of a ``mesh`` it made).

    Parameters (and gradients) follow `param_specs`; optimizer state follows
    the parameters it mirrors; the batch (inputs, targets, array call
    arguments with the batch on their leading axis) is split over ``data``
    and ``fsdp``; the model's other variables (BatchNorm statistics), the
    random key and the loss are replicated.
    """
    if isinstance(mesh, Mesh):
        sizes, jax_mesh, notes = check_mesh(mesh), mesh, list(mesh_notes)
    else:
        sizes = check_mesh(mesh)
        jax_mesh, notes = make_mesh(sizes)
    explicit = tuple(axis for axis, kind in zip(jax_mesh.axis_names, getattr(jax_mesh, "axis_types", ()))
                     if kind == jax.sharding.AxisType.Explicit)
    specs, sources, param_notes = param_specs(
        workload.params, sizes, param_sharding=param_sharding,
        logical_axis_rules=logical_axis_rules, model_rules=model_rules, explicit=explicit,
    )
    notes += param_notes
    if sizes.get("fsdp", 1) > 1 and "fsdp" in explicit:
        kept = sum(1 for spec in jax.tree_util.tree_leaves(specs, is_leaf=lambda x: isinstance(x, PartitionSpec))
                   if not any("fsdp" in axes_of(e) for e in spec))
        notes.append(
            f"fsdp={sizes['fsdp']} on Explicit axes: the parameters are laid as the model's own annotations (and "
            "param_sharding= rules) say, as its jax.jit would lay them, xla_cost adding no fsdp split of its own "
            f"(jax types the model's code on that layout); {kept} parameter(s) not split over fsdp")
    batch = int(jax.tree.leaves(workload.inputs)[0].shape[0])
    sequence = _context_sequence(workload.inputs, sizes)
    replicated = PartitionSpec()
    inputs_specs = _batch_specs(workload.inputs, batch, sizes, "inputs", sequence)
    extras = workload.extras
    extras_specs = {
        "rng": jax.tree.map(lambda _: replicated, extras["rng"]),
        "kwargs": _batch_specs(extras["kwargs"], batch, sizes, "call arguments", sequence),
    }
    extras_specs.update({k: jax.tree.map(lambda _: replicated, v) for k, v in extras.items()
                         if k not in extras_specs})
    tree_specs = {
        "params": specs,
        "grads": specs,
        "opt_state": _match_params(workload.opt_state, workload.params, specs, sizes, explicit),
        "state": replicated,  # a prefix: every leaf, whatever the new state's structure
        "batch": (inputs_specs, extras_specs),
        "targets": _batch_specs(workload.targets, batch, sizes, "targets", sequence),
        "loss": replicated,
    }
    if "model" in sizes and sizes["model"] > 1 and not any(
        s in ("rule", "metadata", "zoo") for s in sources.values()
    ):
        notes.append(
            f"model={sizes['model']}: no partition rule or metadata split any parameter over "
            "model, so its devices compute the same thing (pass param_sharding= rules or use "
            "nn.with_partitioning)"
        )
    split = {a for spec in jax.tree_util.tree_leaves(specs, is_leaf=lambda x: isinstance(x, PartitionSpec))
             for entry in spec for a in axes_of(entry)}
    if sizes.get("expert", 1) > 1 and "expert" not in split:
        notes.append(
            f"expert={sizes['expert']}: no parameter is split over expert (no experts' partition rule or "
            "metadata), so it splits the batch alone, as data does")
    logical: tuple[tuple[str, Any], ...] | None = (
        tuple(logical_axis_rules) if logical_axis_rules is not None else DEFAULT_LOGICAL_RULES)
    foreign = _foreign_box_names(workload.params, tuple(jax_mesh.axis_names))
    if foreign:  # Flax's unboxing would constrain those parameters to axes the mesh lacks
        logical = None
        notes.append(
            f"the model's own activation constraints (nn.with_logical_constraint) are not applied: its "
            f"parameters' nn.Partitioned names ({', '.join(foreign)}) are not mesh axes, which Flax's "
            "unboxing refuses under a mesh (nn.with_logical_partitioning names map through the logical rules)")
    if sequence is not None:
        notes.append(f"context={sizes[CONTEXT]}: each sequence's {sequence} positions split over it "
                     f"({sequence // sizes[CONTEXT]} a device), attention's keys and values all-gathered over it "
                     "(xla_cost.parallel.context)")
    return ShardingPlan(jax_mesh, sizes, tree_specs, sources, tuple(notes), logical, sequence)


def _context_sequence(inputs: Any, sizes: Mapping[str, int]) -> int | None:
    """The positions per sequence a ``context`` axis splits: the inputs' second dimension; None
    without the axis.

    Raises:
      InputError: inputs without a second dimension, or one the axis does not divide.
    """
    context = sizes.get(CONTEXT, 1)
    if context == 1:
        return None
    shape = tuple(getattr(jax.tree.leaves(inputs)[0], "shape", ()))
    if len(shape) < 2 or shape[1] % context:
        raise InputError(f"inputs (batch, positions, ...) whose positions context={context} divides (the "
                         "sequence is split over it)", f"inputs of shape {shape}",
                         f"Use a sequence that is a multiple of {context}, or drop context from the mesh.")
    return int(shape[1])


def _foreign_box_names(params: Any, axes: Sequence[str]) -> list[str]:
    """The names of Linen ``nn.Partitioned`` boxes (not the logical ones, which the
    logical rules map) that are not axes of the mesh, sorted."""
    import flax.linen as nn

    names: set[str] = set()
    for leaf in jax.tree_util.tree_leaves(params, is_leaf=_is_box):
        if isinstance(leaf, nn.Partitioned) and not isinstance(leaf, nn.LogicallyPartitioned):
            names.update(a for entry in leaf.names for a in axes_of(entry) if a not in axes)
    return sorted(names)


def per_device_bytes(tree: Any, specs: Any, sizes: Mapping[str, int]) -> tuple[int, int]:
    """``(total, per device)`` bytes of an abstract tree under its specs."""
    total = per = 0
    spec_leaves = jax.tree_util.tree_leaves(specs, is_leaf=lambda x: isinstance(x, PartitionSpec))
    leaves = jax.tree_util.tree_leaves(tree)
    if len(spec_leaves) == 1 and len(leaves) != 1:
        spec_leaves = spec_leaves * len(leaves)
    for leaf, spec in zip(leaves, spec_leaves):
        n = nbytes(leaf)
        split = math.prod(sizes.get(a, 1) for e in spec for a in axes_of(e))
        total += n
        per += -(-n // split)
    return total, per
