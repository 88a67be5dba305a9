"""What a user's training step's arguments hold: the batch, the parameters' and the products'
dtypes, which results are new state, and the step's memory by part (`xla_cost.analysis.user_step`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.extend import core as jex_core

from xla_cost.analysis.differentiated import new_values, optimizer_state_leaves, per_example_gradients
from xla_cost.analysis.memory import MemoryBreakdown, dense_ragged_note
from xla_cost.compiled import xla
from xla_cost.count.primitives import CALL_LIKE, CALL_PARAMS
from xla_cost.parallel.sharding import ShardingPlan
from xla_cost.present.units import size
from xla_cost.step.trees import elements_key, leaf_roles, named_leaves, nbytes, path_names

if TYPE_CHECKING:  # (a type only: xla_cost.step.user_step imports flax.nnx, which a Linen analysis never needs)
    from xla_cost.step.user_step import UserStep

__all__ = ["PER_EXAMPLE", "PRODUCTS", "arguments", "batch_size", "compute_dtype", "leaf_parts", "new_state",
           "parameter_dtype", "step_memory", "written_arguments"]


def _leaf_key(path: Any, leaf: Any) -> tuple[Any, ...]:
    """A leaf's path, and its shape up to unit axes and dtype (`elements_key`): a result at an argument's
    path with the same elements in the same order is its new value, whatever unit axes it is viewed
    with (a BatchNorm's running mean kept ``(C,)`` and written back ``(1, 1, C)``: AlgoPerf's Conformer)."""
    return (tuple(path), *elements_key(leaf))


def new_state(prepared: UserStep, shapes: Any, jaxpr: Any = None) -> list[bool]:
    """Per result of the step, whether it is part of its new state rather than a
    metric: an NNX step's objects after it, or a result with the path (below the
    argument or result position), dtype and shape (up to unit axes: `_leaf_key`) of an argument (a TrainState's
    parameters, optimizer state and counter; new parameters returned alone); with the
    step's ``jaxpr``, also the new value of an array the gradient's passes read, made
    from it and its gradient (`new_values`: parameters the step initialises itself)."""
    found = _state_by_path(prepared, shapes)
    updated = new_values(jaxpr) if jaxpr is not None and not all(found) else set()
    return [state or j in updated for j, state in enumerate(found)]


def _state_by_path(prepared: UserStep, shapes: Any) -> list[bool]:
    """`new_state` read from the results' and the arguments' paths, shapes and dtypes."""
    results = jax.tree_util.tree_flatten_with_path(shapes)[0]

    if prepared.kind == "nnx":  # (the step's own results, the objects' state after it)
        # an own result with the path (below its position), shape and dtype of an array of an argument
        # is state too: an EMA's nnx.State passed in and returned updated; the objects' own state
        # returned as ``nnx.state((model, optimizer))`` from a ``jax.jit`` step for the caller to
        # ``nnx.update`` (Flax's examples/gemma/train.py), which carries no NNX object's change out itself
        given = set()
        for path, leaf in jax.tree_util.tree_flatten_with_path(prepared.args)[0]:
            if not path:
                continue
            if getattr(path[0], "idx", None) != 2:  # an NNX object's state
                given.update((_leaf_key(path[1:], leaf), _leaf_key(path[2:], leaf)))
            elif getattr(leaf, "shape", ()) and path[2:]:  # an argument that is no NNX object: the arrays it holds
                # (not a bare array, the batch: a result of its shape and dtype is a layer's output as often)
                given.add(_leaf_key(path[2:], leaf))
        metric = _metric_leaves(shapes)
        return [bool(path) and not is_metric and (getattr(path[0], "idx", None) == 1
                                                  or _leaf_key(path[1:], leaf) in given or _leaf_key(path[2:], leaf) in given)
                for (path, leaf), is_metric in zip(results, metric)]

    inputs = {_leaf_key(path[1:], leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(prepared.args)[0]}
    # (at a result's position, or in a tuple there: ``return (qf1_state, qf2_state), losses``, the
    # path below the tuple's positions, not empty: a scalar in a tuple is a metric as often)
    return [any(_leaf_key(path[k:], leaf) in inputs for k in range(_positions(path) + 1) if k < 2 or path[k:])
            for path, leaf in results]


def _positions(path: Any) -> int:
    """How many of a result's path's first keys are positions in a tuple or list."""
    count = 0
    while count < len(path) and isinstance(path[count], jax.tree_util.SequenceKey):
        count += 1
    return count


def arguments(prepared: UserStep) -> list[tuple[Any, Sequence[str | None]]]:
    """The step's arguments with their leaves' owners (`UserStep.owners`); a list or tuple argument
    element by element (an NNX step's arguments that are no graph objects come as one list:
    an EMA's ``nnx.State`` beside the batch; a Linen step's ``(x, y)``)."""
    found = []
    offset = 0
    for arg in prepared.args:
        for part in (arg if isinstance(arg, (list, tuple)) and not hasattr(arg, "_fields") else [arg]):
            n = len(jax.tree.leaves(part))
            found.append((part, prepared.owners[offset:offset + n]))
            offset += n
    return found


def written_arguments(prepared: UserStep, shapes: Any, jaxpr: Any = None) -> list[bool]:
    """Per argument (as `arguments` splits them), whether the step returns it written back: it holds
    no parameter, it is a tree (not a bare array, whose shape an output shares as often), every
    one of its leaves is a result's, at the same path below the argument and the result's position,
    with its dtype and its shape up to unit axes (`_leaf_key`: a KV cache a decode step returns with its
    new rows, its counters; a BatchNorm's running statistics written back ``(1, 1, C)``, kept ``(C,)``),
    and the step computes at least one of those results anew: an argument every leaf of which the
    step's ``jaxpr`` returns as it came in (the same value passed through, `_passed_through`: a batch
    kauldron's ``Context`` carries out) is not written. Such an argument is state the step carries
    from one call to the next, not the batch. Without the jaxpr, or where its inputs and results are
    not the flattened arguments and results, every result is taken as computed anew."""
    results = jax.tree_util.tree_flatten_with_path(shapes)[0]
    sources = _passed_through(jaxpr, len(jax.tree.leaves(prepared.args)), len(results))
    returned: dict[tuple[Any, ...], list[int | None]] = {}
    for (path, leaf), source in zip(results, sources):
        for k in range(min(len(path), 2) + 1):  # (returned alone, at a position, an NNX step's own)
            returned.setdefault(_leaf_key(path[k:], leaf), []).append(source)
    flags = []
    offset = 0
    for part, owners in arguments(prepared):
        flat = jax.tree_util.tree_flatten_with_path(part)[0]
        anew = any(any(source != offset + i for source in returned.get(_leaf_key(path, leaf), ()))
                   for i, (path, leaf) in enumerate(flat))
        flags.append(bool(flat) and all(o is None for o in owners) and anew
                     and all(path and _leaf_key(path, leaf) in returned for path, leaf in flat))
        offset += len(flat)
    return flags


def _passed_through(jaxpr: Any, inputs: int, outputs: int) -> list[int | None]:
    """Per result of the step's ``jaxpr``, the input (by index) it returns as it came in, through
    the calls it passes one for one (a jit's), or None where it computes it; all None where the
    jaxpr takes or returns other than ``inputs`` and ``outputs`` values."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    if inner is None or len(inner.invars) != inputs or len(inner.outvars) != outputs:
        return [None] * outputs

    def sources(level: Any) -> list[Any]:  # per result, the level's input variable it is, or None
        given = {v: v for v in level.invars}
        for eqn in level.eqns:
            sub = next((eqn.params[p] for p in CALL_PARAMS if p in eqn.params), None) \
                if eqn.primitive.name in CALL_LIKE else None
            called = getattr(sub, "jaxpr", sub)
            if called is None or len(called.invars) != len(eqn.invars):
                continue
            for out, made in zip(eqn.outvars, sources(called)):
                if made is not None:
                    operand = eqn.invars[called.invars.index(made)]
                    if not isinstance(operand, jex_core.Literal) and operand in given:
                        given[out] = given[operand]
        return [None if isinstance(v, jex_core.Literal) else given.get(v) for v in level.outvars]

    position = {v: i for i, v in enumerate(inner.invars)}
    return [None if v is None else position[v] for v in sources(inner)]


def batch_size(prepared: UserStep, jaxpr: Any = None, device_axis: Collection[int] = (),
               written: Sequence[bool] = ()) -> int:
    """The leading dimension of the first argument that holds no parameter and whose arrays all
    share it (a batch: ``x`` and ``y``, ``{'image', 'label'}``), else of the first that holds no
    parameter; 0 where none does. Scalars (a step count, a learning rate) and random keys (a
    ``jax.random.PRNGKey``'s ``uint32[2]``, a typed key array: `_random_key`) are no batch: an
    argument of those alone is passed over. A tree of frozen weights or an EMA copy of the parameters passed on its own holds
    no module's parameter either, but its arrays' leading dimensions differ (a kernel's rows, a
    bias's width): it is not taken for the batch. Where the step's ``jaxpr`` scans that argument's
    arrays over their leading axis (gradient accumulation over ``(micro_batches, b, ...)``
    batches), the batch is both axes: ``micro_batches x b`` samples a step. ``device_axis``: the
    positions (in the flattened arguments' order) of the arrays a ``pmap`` maps: their leading axis
    is its devices, and where the batch is one of them, the batch is one device's, their second.
    ``written``: per argument, whether the step returns it written back (`written_arguments`: a KV
    cache), which is state, no batch."""
    candidates = []
    offset = 0
    for index, (arg, mine) in enumerate(arguments(prepared)):
        leaves = jax.tree.leaves(arg)
        # arrays of data: no scalar (judged by one device's shape where a pmap maps it: a per-device
        # step count) and no random key (a batch dict's dropout key beside its arrays)
        shaped = [(offset + i, leaf) for i, leaf in enumerate(leaves)
                  if tuple(getattr(leaf, "shape", ()))[1 if offset + i in device_axis else 0:]
                  and not _random_key(leaf)]
        offset += len(leaves)
        if shaped and all(o is None for o in mine) and not (index < len(written) and written[index]):
            # (a root module's parameters' owner is "")
            leading = {int(leaf.shape[0]) for _, leaf in shaped}
            candidates.append((len(leading) == 1, shaped))
    alike = [shaped for same, shaped in candidates if same]
    chosen = alike[0] if alike else candidates[0][1] if candidates else None
    if chosen is None:
        return 0
    first = chosen[0][1]
    if chosen[0][0] in device_axis and len(first.shape) > 1:
        return int(first.shape[1])
    if alike and jaxpr is not None and len(first.shape) > 1 and _scanned_over(jaxpr, [i for i, _ in chosen],
                                                                              int(first.shape[0])):
        return int(first.shape[0]) * int(first.shape[1])
    return int(first.shape[0])


def _random_key(leaf: Any) -> bool:
    """Whether an array is random keys, not data: a typed key array (``jax.random.key``), or keys in
    jax's legacy raw layout (``jax.random.PRNGKey``, ``jax.random.split``'s): ``uint32`` whose last
    axis holds one key's words (2 for the default threefry implementation, as
    ``jax.random.key_data`` gives them)."""
    dtype = getattr(leaf, "dtype", None)
    if dtype is None:
        return False
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return True
    shape = tuple(getattr(leaf, "shape", ()))
    return np.dtype(dtype) == np.uint32 and bool(shape) and shape[-1] == _key_words()


def _key_words() -> int:
    """How many ``uint32`` words one raw key of jax's default PRNG implementation holds."""
    return int(jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0))).shape[-1])


def _scanned_over(jaxpr: Any, indices: Sequence[int], length: int) -> bool:
    """Whether the step's own scans of ``length`` iterations take every one of the arguments' leaves
    at ``indices`` (in the flattened arguments' order) as what they iterate over."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    invars = list(inner.invars)
    if not indices or max(indices) >= len(invars):
        return False
    wanted = {id(invars[i]) for i in indices}
    iterated: set[int] = set()
    for eqn in inner.eqns:
        if eqn.primitive.name == "scan" and int(eqn.params["length"]) == length:
            start = int(eqn.params["num_consts"]) + int(eqn.params["num_carry"])
            iterated |= {id(v) for v in eqn.invars[start:]}
    return wanted <= iterated


PRODUCTS = frozenset({"dot_general", "conv_general_dilated"})


def compute_dtype(jaxpr: Any, fallback: str | None) -> str:
    """The dtype the step's matrix products take their operands in, weighted by their operands' and
    results' elements (a bfloat16 forward of float32 parameters: bfloat16), or ``fallback`` (the
    parameters') where the step has none (``unknown`` where neither is known)."""
    weight: dict[str, int] = {}
    stack = [getattr(jaxpr, "jaxpr", jaxpr)]
    while stack:
        level = stack.pop()
        for eqn in level.eqns:
            for value in eqn.params.values():
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    inner = getattr(item, "jaxpr", item)
                    if hasattr(inner, "eqns"):
                        stack.append(inner)
            if eqn.primitive.name in PRODUCTS and eqn.invars:
                dtype = str(getattr(eqn.invars[0].aval, "dtype", ""))
                weight[dtype] = weight.get(dtype, 0) + sum(
                    int(np.prod(getattr(v.aval, "shape", ()))) for v in (*eqn.invars, *eqn.outvars))
    return max(weight, key=weight.__getitem__) if weight else fallback or "unknown"


def parameter_dtype(prepared: UserStep, jaxpr: Any = None) -> str | None:
    """The parameters' dtypes (``float32``; ``bfloat16/float32`` where they differ): of the leaves
    that are parameters as `step_memory` reads them (`leaf_parts`), not an optimizer state's copies
    of them (Adam's moments kept in bfloat16 by ``mu_dtype``, a bfloat16 moment in a plain dict);
    None where the arguments hold no parameter (a step that makes its parameters inside itself:
    their dtype is not known, and no mixed precision is)."""
    parts = leaf_parts(prepared, jaxpr=jaxpr)
    names = {str(leaf.dtype) for leaf, part in zip(jax.tree.leaves(prepared.args), parts) if part == "parameters"}
    return "/".join(sorted(names)) or None


def _metric_leaves(shapes: Any) -> list[bool]:
    """Per leaf of ``shapes``, whether it is an NNX metric's state (``nnx.metrics.MetricState``: an
    ``nnx.MultiMetric`` the step updates, Flax's examples' accuracy and loss averages): a metric the
    step keeps, not the model's or its optimizer's new state."""
    from flax import nnx

    flags: list[bool] = []
    for node in jax.tree.leaves(shapes, is_leaf=lambda x: isinstance(x, nnx.Variable)):
        flags += [isinstance(node, nnx.metrics.MetricState)] * len(jax.tree.leaves(node))
    return flags


def _leaf_names(path: Any) -> list[str]:
    """A leaf's path as names (`named_leaves`'s path: a wrapper's keys left out), its own last (an
    NNX variable's array, ``.value``, named as the variable); positions in a list or tuple left out."""
    return [name for key, name in zip(path, path_names(path)) if not isinstance(key, jax.tree_util.SequenceKey)]


def _below_root(names: Sequence[str], modules: Collection[str]) -> str:
    """A copy's module path below the keys of the collection or state that hold it (``ema/params/Dense_0``:
    ``Dense_0``): the longest tail of ``names`` that is a module path of the parameters (``modules``), so
    that a copy of ``Block_0/Dense_0`` is never one of the root's ``Dense_0``; ``names`` whole where none is."""
    for start in range(len(names) + 1):
        if "/".join(names[start:]) in modules:
            return "/".join(names[start:])
    return "/".join(names)


def _same_module(one: tuple[str | None, str], other: tuple[str | None, str]) -> bool:
    """Whether two parameters' modules (each its label, None for a copy no module owns, and its module
    path below the collection's root: `step_memory`) are one: the same label where both are found
    parameters (``Block_0/Dense_0`` is not the root's ``Dense_0``), else the same path below the root."""
    if one[0] is not None and other[0] is not None:
        return one[0] == other[0]
    return one[1] == other[1]


def _held_with(located: dict[int, tuple[int, tuple[Any, ...]]], states: set[int], candidates: Sequence[int]) -> set[int]:
    """Of the leaves ``candidates``, those in a container (a tuple, a NamedTuple, a dict: the node of the
    argument that holds them) whose every other leaf is optimizer state (``states``): the step counter an
    optimizer's own state keeps beside its moments (AlgoPerf's NAdamW, ``ScaleByAdamState(count, mu, nu)``
    of its own, not optax's type), which reads no gradient. A ``TrainState``'s ``step`` is beside the
    parameters: model state."""
    found = set()
    for index in candidates:
        if index in states or index not in located:
            continue
        position, path = located[index]
        others = [j for j, (at, there) in located.items()
                  if j != index and at == position and there[:len(path) - 1] == path[:-1]]
        if others and all(j in states for j in others):
            found.add(index)
    return found


def leaf_parts(prepared: UserStep, written: Sequence[bool] = (), jaxpr: Any = None) -> list[str]:
    """Per flattened leaf of the step's arguments, the part of its memory it is: ``parameters``,
    ``optimizer_state``, ``model_state`` or ``inputs``.

    A parameter is a leaf that is one itself (its module found by its name or because the loss is
    differentiated with respect to it, `UserStep.owners`, whatever holds it: `UserStep.roles`,
    ``optax.LookaheadParams``' ``fast``; or an NNX ``Param``), each once: a second
    array of a parameter already counted (its module, name and shape: an EMA of the parameters
    passed or kept beside them; the leaves the loss is differentiated by are counted first, so an NNX
    model's Params that the step overwrites from them are the copy) is model state, modules matched by
    their whole paths below the collection's root (`_same_module`: the root's ``LayerNorm_0`` is not
    ``Block_0/LayerNorm_0``); a leaf that owns a module only because its path ends with a parameter's
    (`UserStep.mirrors`: ``m['fc1']['w']`` beside ``params['fc1']['w']``) is none.
    A leaf is optimizer state where an optimizer's state holds it by type or name (`leaf_roles`: an
    optax state, an NNX ``OptState``, an ``opt_state`` key), though it mirrors a parameter's module
    (``mu['fc1']['kernel']``), or, with the step's ``jaxpr``, by the data flow whatever holds it
    (`optimizer_state_leaves`: written back, its new value depends on a gradient other than through
    the parameters' new values: a hand-written Adam's ``m`` and ``v`` in a plain dict), and so is a
    leaf whose container holds optimizer state alone besides it (`_held_with`: a count in an optimizer's own
    NamedTuple beside its moments). Model state
    is the rest of what the step's state holds (other NNX variables, RNG keys included; the rest of
    an argument that holds parameters or state, ``TrainState.step``, an argument the step returns
    written back: ``written``, `written_arguments`, a KV cache); else an input."""
    mirrors = prepared.mirrors()
    leaves = jax.tree.leaves(prepared.args)
    roles = prepared.roles()  # (a leaf the loss is differentiated by is a parameter whatever holds it)
    owners = list(prepared.owners) + [None] * (len(leaves) - len(prepared.owners))
    own = [role == "parameters" or (role is None and module is not None and i not in mirrors)
           for i, (role, module) in enumerate(zip(roles, owners))]
    states = optimizer_state_leaves(jaxpr, len(leaves), [i for i, mine in enumerate(own) if mine],
                                    [i for i, role in enumerate(roles) if role is None]) if jaxpr is not None else set()
    entries = []  # (index, path, leaf, whether its argument holds state)
    located: dict[int, tuple[int, tuple[Any, ...]]] = {}  # index -> (its argument, its path there)
    for position, (arg, arg_owners) in enumerate(arguments(prepared)):
        holds = any(o is not None for o in arg_owners) or any(leaf_roles(arg))  # a model's root module's path is ""
        holds = holds or (position < len(written) and written[position])
        for path, leaf in named_leaves(arg):
            located[len(entries)] = (position, tuple(path))
            entries.append((len(entries), path, leaf, holds))
    if states:  # (a counter kept beside an optimizer's moments: NAdamW's own NamedTuple's count)
        states |= _held_with(located, states, [i for i, role in enumerate(roles) if role is None and not own[i]])
    parts: list[str] = [""] * len(entries)
    counted: dict[tuple[str, tuple[int, ...]], list[tuple[str | None, str]]] = {}
    modules = set(prepared.param_paths) | {o for o in prepared.owners if o is not None}
    # the leaves the loss is differentiated by are the parameters before any other array of theirs (an NNX
    # model's Params that the step overwrites from them with nnx.update, optax's lookahead example's)
    for index, path, leaf, holds in sorted(entries, key=lambda entry: entry[0] not in prepared.differentiated):
        role, module = roles[index], owners[index]
        if role == "parameters" and module is None and index not in prepared.quantized and _integer(leaf):
            role = None  # an integer Param no weight reads (an index table): `xla_cost.analysis.quantized`
        if index in states:
            role = "optimizer_state"
        elif role == "parameters" or (role is None and module is not None and index not in mirrors):
            names = _leaf_names(path)
            # a parameter found is known by its module's whole path (after its tree's name: `labelled`), a copy
            # no module owns (an NNX Param of an EMA's state) by its path below its collection's keys
            here = (prepared.labelled(index, module), module) if module is not None else \
                (None, _below_root(names[:-1], modules))
            seen = counted.setdefault((names[-1] if names else "", tuple(getattr(leaf, "shape", ()))), [])
            role = "model_state" if any(_same_module(here, other) for other in seen) else "parameters"
            seen.append(here)
        elif role is None:
            role = "model_state" if holds else "inputs"
        parts[index] = role
    return parts


def step_memory(prepared: UserStep, compiled: xla.CompiledPhase | None, saved: int,
                plan: ShardingPlan | None, gradients: int, shards: Sequence[int] = (),
                written: Sequence[bool] = (), jaxpr: Any = None) -> MemoryBreakdown:
    """The step's memory by part (each leaf's as `leaf_parts` reads it), beside XLA's figures for
    the step as compiled. ``shards``: per flattened argument leaf, the shards a mesh splits it into
    (its sharding's axes): each leaf's bytes are one device's. ``jaxpr``: the step's, read for the
    optimizer state whatever holds it (`leaf_parts`), and with ``compiled``'s replayed schedule
    (its ``liveness``) for the buffers at XLA's peak that are a ragged_dot's lhs or result G times
    over (`dense_ragged_note`, as `xla_cost.analyze` says it), and for the gradients its backward
    pass makes one per example (`per_example_gradients`: ``jax.vmap(jax.grad(loss))``): no part (the
    gradients are the parameters' shapes, once), their bytes said in a note (`_per_example_note`)."""
    totals = {"parameters": 0, "optimizer_state": 0, "model_state": 0, "inputs": 0}
    examples = per_example_gradients(jaxpr) if jaxpr is not None else {}
    per_example = 0
    for index, (leaf, part) in enumerate(zip(jax.tree.leaves(prepared.args), leaf_parts(prepared, written, jaxpr))):
        totals[part] += round(nbytes(leaf) / (shards[index] if index < len(shards) else 1))
        if part == "parameters" and gradients:  # (a parameter with per-example gradients of its shape and dtype)
            held = examples.get((tuple(getattr(leaf, "shape", ())), str(getattr(leaf, "dtype", ""))), 0)
            per_example += round(held * nbytes(leaf) / (shards[index] if index < len(shards) else 1))
    memory = compiled.memory if compiled is not None else xla.XlaMemory(None, None, None)
    profile = getattr(compiled, "liveness", None)
    dense = dense_ragged_note(jaxpr, profile.at_peak) if profile is not None and jaxpr is not None else None
    return MemoryBreakdown(
        parameters=totals["parameters"], gradients=gradients, optimizer_state=totals["optimizer_state"],
        model_state=totals["model_state"], inputs=totals["inputs"], saved_activations=saved,
        argument_bytes=memory.argument_bytes, output_bytes=memory.output_bytes, temp_bytes=memory.temp_bytes,
        alias_bytes=memory.alias_bytes, output_array_bytes=memory.output_array_bytes, devices=plan.devices if plan is not None else 1,
        notes=(("the parts are one device's: each argument by its sharding's shards, the saved activations by the "
                "forward work's; " if plan is not None and plan.devices > 1 else "")
               + "gradients are those of the parameters "
               "the backward pass makes one for (each once); optimizer state is what an optimizer's state holds (an optax state, an NNX "
               "OptState, an opt_state key, or any state the step writes back whose new value depends on a gradient other than "
               "through the parameters' new values: a hand-written Adam's moments), model state what else the step's state holds "
               "(TrainState.step, batch statistics, RNG keys, a copy of the parameters such as an EMA); saved activations are the "
               "forward pass's values the backward pass reads; XLA's figures are the step compiled with its own jit's donation",)
        + ((dense,) if dense else ())
        + ((_per_example_note(per_example, gradients),) if per_example else ()),
    )


PER_EXAMPLE = "per-example gradients: "
"""How the memory's note on the gradients a step makes one per example begins (`step_memory`)."""


def _per_example_note(per_example: int, gradients: int) -> str:
    """The bytes of the gradients a step makes one per example, beside the gradients part."""
    times = f", {per_example / gradients:.3g} times the gradients" if gradients else ""
    return (f"{PER_EXAMPLE}the backward pass runs under jax.vmap (jax.vmap(jax.grad(loss)), as DP-SGD "
            f"computes each example's gradient to clip it) and makes one gradient per example: "
            f"{size(per_example)}{times}, not in the gradients part (the parameters' shapes, once); XLA's "
            "temporaries hold them at its peak where the step reads them whole before summing them over the examples "
            "(a clip by each example's norm), not where XLA fuses the sum into their computation; microbatching (a "
            "lax.map or scan over groups of examples) holds one group's")


def _integer(leaf: Any) -> bool:
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and not np.issubdtype(dtype, np.inexact)
