"""A user's own training step, made ready to trace and compile as it runs.

`prepare_step` takes the function the research code runs (bare, a
``functools.partial``, ``jax.jit``-ed with its donation and shardings, or
``nnx.jit``-ed) and its example arguments (concrete or abstract; Flax
``TrainState``s, NNX models, optimizers and metrics included) and returns a
`UserStep`: how to trace and lower it, which input leaves are parameters and
of which module, and what was done to make it traceable (collective axis names
bound, NNX objects split into their state).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import jax
from flax import nnx
from flax.nnx import graph as nnx_graph

from xla_cost.errors import InputError, own_failure, quoted
from xla_cost.step.adapters import bind_axes, concrete_arguments, unbound_axis
from xla_cost.step.checks import check_axis_names
from xla_cost.step.nnx_scopes import bridged_name_scopes, nnx_name_scopes, tagged
from xla_cost.step.step_routing import recording_model_calls, step_routing
from xla_cost.step.trees import is_collections, leaf_roles, named_leaves, path_names

__all__ = ["UserStep", "prepare_step", "step_name", "PARAMS_KEY", "MAX_AXES", "NO_PARAMETERS_NOTE", "check_batch",
           "check_returns", "differentiable"]

def check_batch(prepared: UserStep) -> None:
    """Refuses a batch without examples: an array argument holding no parameter whose leading
    (batch) size is 0. XLA removes the work of no example, and the counts of what is left
    (reductions over nothing) are not a step's."""
    flat = jax.tree_util.tree_flatten_with_path(prepared.args)[0]
    for (path, leaf), owner in zip(flat, prepared.owners):
        shape = tuple(getattr(leaf, "shape", ()))
        if owner is None and shape and shape[0] == 0:
            raise InputError(
                f"the batch of {prepared.name}() to hold at least one example (its arrays' leading size 1 or more)",
                f"args{jax.tree_util.keystr(path)} {leaf.dtype}[{','.join(map(str, shape))}] (batch 0)",
                "Give the batch a leading size of 1 or more (the arrays passed to the step; from the command "
                "line, those --args' function returns).",
            )


def check_returns(jaxpr: Any, name: str) -> None:
    """Refuses a step that returns nothing: XLA removes every operation whose result nothing
    returns, so the compiled step would do no work at all."""
    if not jaxpr.jaxpr.outvars:
        raise InputError(
            f"{name}() to return what it computes (the new state, the loss or metrics)",
            "a step that returns nothing (None), whose work XLA removes entirely: every figure would be 0",
            "End it with `return state, loss` (the new state and the loss), as the training loop uses them.",
        )


PARAMS_KEY = "params"
"""The key (attribute or dict key) under which Linen code keeps the parameters:
``TrainState.params``, ``variables["params"]``."""

NO_PARAMETERS_NOTE = ("no parameters found in the arguments (the leaves the loss is differentiated with respect to, a "
                      "`params` key or attribute, or NNX Params): the parameter count is unknown (0 in the report's "
                      "figures, no FLOP per parameter) and the update has no per-layer rows")
"""The note of a step whose arguments hold no parameter, by name or by its gradient (`UserStep.with_differentiated`)."""

MAX_AXES = 8
"""Unbound collective axis names bound before giving up."""


@dataclasses.dataclass(frozen=True)
class UserStep:
    """One user's step, ready to trace.

    Attributes:
      name: the function's name (``train_step``).
      args: the arguments the traced function takes (NNX objects replaced by
        their state, ``kwargs`` bound).
      jitted: the ``jax.jit`` (the user's own when it can be used as it is) of
        the function of ``args``.
      kind: ``nnx`` when NNX objects were split, else ``jax``.
      owners: per flattened leaf of ``args``, the module path of the parameter
        it is, or None.
      param_paths: parameter count per module path holding parameters, in
        argument order.
      roots: the model classes whose names open the name stacks.
      axis_names: collective axis names bound on a one-device mesh.
      notes: what was done to the step to trace it.
      scopes: a context to trace in (NNX modules' name scopes).
      positional: the step's positional parameter names (`_linen_params`).
      active_parameters: those a token's computation reads, where the model the
        step calls declares its routed experts (`xla_cost.step.step_routing`); None: none declared.
      padded: the modules of those routed experts with capacity padding and the share of their
        work that is padding (`xla_cost.step.step_routing.step_routing`): no model FLOP.
      quantized: flattened leaves of ``args`` that are parameters though of an integer dtype
        (int8 weights the forward reads as weights: `with_quantized`).
      differentiated: flattened leaves of ``args`` that are parameters because the step's loss is
        differentiated with respect to them, where no name says so (``lambda p, o, b: ...``:
        `with_differentiated`); their module path is their keys below the argument.
      own_program: for an NNX step the user jitted (``nnx.jit`` or ``jax.jit``), a function
        that lowers it as that jit compiles it, on the NNX objects themselves: its donated
        arguments and its own outputs (the traced function of ``args`` donates nothing and
        returns the objects' state beside the step's results); None for any other step, whose
        ``jitted`` is that program.
      trees: per flattened leaf of ``args``, the tree its parameter belongs to where several
        arguments hold parameters of one module path and name (TD3's two critics, two TrainStates
        of one network class): the argument's name (``qf1_state``); '' for every leaf otherwise (one
        model: its modules' paths name its parameters) and () for an NNX step (`labelled`).
    """

    name: str
    args: tuple[Any, ...]
    jitted: Any
    kind: str
    owners: tuple[str | None, ...]
    param_paths: Mapping[str, int]
    roots: tuple[str, ...] = ()
    axis_names: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    scopes: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    positional: tuple[str | None, ...] = ()
    active_parameters: int | None = None
    padded: tuple[tuple[frozenset[str], float], ...] = ()
    own_program: Callable[[], Any] | None = None
    quantized: frozenset[int] = frozenset()
    differentiated: frozenset[int] = frozenset()
    trees: tuple[str, ...] = ()

    def labelled(self, index: int, module: str) -> str:
        """The name of the module of the parameter at flattened leaf ``index``: its path, after its
        tree's name where several trees share module paths (``qf1_state/Dense_0``; `trees`). The
        name stacks match the path alone (``owners``): two critics of one class run under one."""
        tree = self.trees[index] if index < len(self.trees) else ""
        return f"{tree}/{module}" if tree and module else tree or module

    @property
    def parameters(self) -> int:
        return sum(self.param_paths.values())

    def integer_parameters(self) -> list[int]:
        """The flattened leaves of ``args`` where parameters are (a plain jax step's) but of an
        integer dtype, which takes no gradient: int8 weights, a schedule's timesteps (an NNX model's integer Params)."""
        if self.kind != "jax":
            return [i for i, (leaf, module) in enumerate(zip(jax.tree.leaves(self.args), self.owners))
                    if module is not None and not differentiable(leaf)]
        ints = {i for i, leaf in enumerate(jax.tree.leaves(self.args)) if not differentiable(leaf)}
        return [i for i, module in enumerate(_linen_params(self.args, self.positional, 0, ints, self.differentiated)[0])
                if i in ints and module is not None]

    def with_quantized(self, leaves: Collection[int]) -> UserStep:
        """The step with the integer leaves ``leaves`` (`integer_parameters`) counted as parameters."""
        owners, counts, trees = _linen_params(self.args, self.positional, 0, leaves, self.differentiated)
        return dataclasses.replace(self, owners=tuple(owners), param_paths=counts, quantized=frozenset(leaves),
                                   trees=trees)

    def mirrors(self) -> frozenset[int]:
        """The flattened leaves of ``args`` that own a module only because their path ends with a
        parameter's (`_follow_params`: an optimizer's moments of it, ``m['fc1']['w']`` beside
        ``params['fc1']['w']``): no parameters themselves, whatever comes first in the arguments.
        Empty for an NNX step: its parameters are its ``Param`` variables (`leaf_roles`)."""
        if self.kind != "jax":
            return frozenset()
        own = _linen_params(self.args, self.positional, 0, self.quantized, self.differentiated, follow=False)[0]
        return frozenset(i for i, (mine, module) in enumerate(zip(own, self.owners))
                         if mine is None and module is not None)

    def roles(self) -> list[str | None]:
        """What holds each flattened leaf of ``args`` (`leaf_roles`), each leaf the loss is
        differentiated with respect to (`differentiated`) a ``parameters`` one whatever holds it:
        ``optax.LookaheadParams(fast, slow)`` is an optax type, and its ``fast`` the parameters."""
        return ["parameters" if i in self.differentiated else role for i, role in enumerate(leaf_roles(self.args))]

    def with_differentiated(self, leaves: Collection[int]) -> UserStep:
        """The step with the leaves ``leaves`` (by flattened index), which its loss is differentiated
        with respect to, parameters as well as those a name marks (a plain jax step's), or as well as
        the model's Params (an NNX step's: `_nnx_differentiated`); the note that none was found dropped
        where some are now."""
        if not leaves:
            return self
        if self.kind != "jax":
            owners, counts = _nnx_differentiated(self.args, self.owners, self.param_paths, leaves)
            return dataclasses.replace(self, owners=tuple(owners), param_paths=counts, differentiated=frozenset(leaves))
        owners, counts, trees = _linen_params(self.args, self.positional, 0, self.quantized, leaves)
        notes = tuple(n for n in self.notes if n != NO_PARAMETERS_NOTE) if counts else self.notes
        return dataclasses.replace(self, owners=tuple(owners), param_paths=counts, notes=notes,
                                   differentiated=frozenset(leaves), trees=trees)

    def stripped(self, strip: int) -> UserStep:
        """The step with ``strip`` leading components left out of every parameter's
        module path (a prefix its name stacks do not carry: ``params/`` of a TrainState
        holding the variables dict, the model's position in a state of several
        objects); itself for 0 or an NNX step (its paths are the model's own)."""
        if strip <= 0 or self.kind != "jax":
            return self
        owners, counts, trees = _linen_params(self.args, self.positional, strip, self.quantized, self.differentiated)
        return dataclasses.replace(self, owners=tuple(owners), param_paths=counts, trees=trees)

    def trace(self) -> Any:
        """``jax.stages.Traced`` of the step (its ``jaxpr`` is what is counted)."""
        with self.scopes():
            return self.jitted.trace(*self.args)

    def lower(self) -> Any:
        """``jax.stages.Lowered`` of the step, with the user's jit options."""
        with self.scopes():
            return self.jitted.lower(*self.args)


def nnx_cached_partial(step: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """``(function, arguments it holds)`` of a step made by ``nnx.cached_partial(f, model,
    optimizer)``, whose call runs ``f(model, optimizer, *args)`` on the graph nodes it
    cloned (sharing their Variables); None for any other step. Read from the wrapper
    Flax returns (its ``__wrapped__`` and the ``cached_args`` it closes over)."""
    code = getattr(step, "__code__", None)
    wrapped = getattr(step, "__wrapped__", None)
    if code is None or wrapped is None or code.co_name != "cache_args_wrapper" \
            or "cached_args" not in code.co_freevars or "flax" not in code.co_filename:
        return None
    held = step.__closure__[code.co_freevars.index("cached_args")].cell_contents
    return wrapped, tuple(held)


def step_name(step: Any) -> str:
    """The name of the function a (partial, jitted) step runs."""
    seen = 0
    while seen < 16:
        seen += 1
        if isinstance(step, functools.partial):
            step = step.func
        elif hasattr(step, "__wrapped__"):
            step = step.__wrapped__
        elif hasattr(step, "fun") and callable(step.fun):  # nnx.jit
            step = step.fun
        else:
            break
    return getattr(step, "__name__", type(step).__name__)


def _fresh(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` as a new function object: jax keeps the traces of a jitted function by the
    function object, and a trace made before the analysis (``jax.eval_shape(step, ...)``, a
    ``jax.jit(step)`` the training loop called) has none of the name scopes the analysis traces
    it under (`nnx_name_scopes`: the modules of a model the step merges itself)."""

    @functools.wraps(function)
    def fresh(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return fresh


def _forget_traces(step: Any) -> None:
    """Drops the traces jax keeps of the user's ``jax.jit`` step (``clear_cache``: its own
    compiled calls and traces), for the reason of `_fresh`: the step's next call traces again."""
    clear = getattr(step, "clear_cache", None)
    if callable(clear):
        clear()


def _is_jax_jit(step: Any) -> bool:
    return isinstance(step, jax.stages.Wrapped) and hasattr(step, "trace") and hasattr(step, "lower")


def _own_lowered(step: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> jax.stages.Lowered:
    """``step`` lowered by its own jit (nnx.jit's wraps jax's ``Lowered``)."""
    lowered = step.lower(*args, **kwargs)
    return lowered if isinstance(lowered, jax.stages.Lowered) else lowered.lowered


def _is_nnx_jit(step: Any) -> bool:
    return type(step).__module__.startswith("flax.nnx") and callable(getattr(step, "fun", None)) and hasattr(
        step, "lower")


def _sharded_nnx_jit(step: Any) -> bool:
    """Whether ``step`` is an ``nnx.jit`` given ``in_shardings``: run as it is on the objects merged
    here (a jit nested in the traced function, whose shardings the analysis reads), not its function."""
    return _is_nnx_jit(step) and any(s is not None for s in jax.tree.leaves(getattr(step, "in_shardings", None),
                                                                         is_leaf=lambda s: s is None))


def _is_graph(value: Any) -> bool:
    return nnx_graph.is_graph_node(value) and not isinstance(value, (list, tuple, dict))


def _linen_params(args: Sequence[Any], names: Sequence[str | None] = (), strip: int = 0,
                  quantized: Collection[int] = (), differentiated: Collection[int] = (), follow: bool = True,
                  ) -> tuple[list[str | None], dict[str, int], tuple[str, ...]]:
    """The module of every parameter leaf, and the counts; then `_follow_params` (unless not
    ``follow``: the parameters' own leaves alone); and the trees the parameters belong to
    (`UserStep.trees`: `_trees`).

    A parameter is a leaf under a ``params`` key (a TrainState's, a variables
    dict's) or in a positional argument the step names ``params`` (``names``:
    the step's positional parameter names, ``step(params, opt_state, batch)``),
    or an NNX ``Param`` in a state the step merges itself (``nnx.split``,
    ``nnx.state``), unless an optimizer's state holds it
    (`xla_cost.step.trees.leaf_roles`: Adam's ``mu['params']['fc1']`` mirrors a
    parameter, it is none). Below that key, a Linen variables dict (``{'params':
    ..., 'batch_stats': ...}``, as ``model.init`` returns it, nested any number
    of times) is looked into: its ``params`` collection holds the parameters,
    its other collections none. ``strip``: leading components of every module
    path to leave out (a prefix the model's name stacks do not carry: the
    position of the model in a state of several objects). ``quantized``: integer leaves (by
    flattened index) that are parameters (int8 weights), which no gradient makes otherwise.
    ``differentiated``: leaves (by flattened index) the step's loss is differentiated with respect
    to, parameters whatever their names and whatever holds them (`UserStep.with_differentiated`: an
    optax type, ``LookaheadParams.fast``): their module path starts below the argument, as an
    argument named ``params``'s does.

    Each parameter is a leaf of its own: two arguments' parameters of one module path, name and
    shape (two TrainStates of one network class) are two, and count twice; within one argument a
    second array of one parameter (an EMA's or a target network's copy beside it) counts once. (An
    argument's positions in a tuple or list, ``step((state_1, state_2), batch)``, are arguments.)
    """
    owners: list[str | None] = []
    counts: dict[str, int] = {}
    counted: set[tuple[tuple[int, ...], str, str, tuple[int, ...]]] = set()
    held: dict[tuple[int, ...], set[tuple[str, str]]] = {}  # per argument, its parameters' (module, name)
    flat = named_leaves(tuple(args))  # a wrapper's own keys left out: ['fc1']['w'], not ['fc1']['w'][<flat index 0>]
    keys = [path_names(path) for path, _ in flat]
    roles = leaf_roles(tuple(args))
    for index, (names_here, (path, leaf), role) in enumerate(zip(keys, flat, roles)):
        # a leaf the loss is differentiated by is a parameter whatever holds it, an optax type included
        # (``optax.LookaheadParams(fast, slow)``'s ``fast``); an optimizer's state holds no other
        mine = index in differentiated or role != "optimizer_state"
        start = _parameter_start(tuple(args), path, names_here, names) if mine else None
        if start is None and (role == "parameters" or index in differentiated):
            start = 1  # an NNX Param in a state, a leaf the loss is differentiated by: its path below the argument
        if start is None or not (differentiable(leaf) or index in quantized):  # an integer array: no parameter
            owners.append(None)
            continue
        module = "/".join(names_here[start:-1][strip:])
        owners.append(module)
        shape = tuple(getattr(leaf, "shape", ()))
        argument = _argument_of(path)
        name = names_here[-1] if names_here else ""
        held.setdefault(argument, set()).add((module, name))
        if (argument, module, name, shape) in counted:
            continue  # a second array of one parameter (an EMA's copy beside it: DiT's model_eps.params) counts once
        counted.add((argument, module, name, shape))
        counts[module] = counts.get(module, 0) + math.prod(shape)
    return _follow_params(keys, owners) if follow else owners, counts, _trees(flat, owners, held, names)


def _argument_of(path: Sequence[Any]) -> tuple[int, ...]:
    """The argument a leaf is in: its position among the step's arguments, and its positions in a
    tuple or list there (``states[1]`` of ``step(states, batch)``)."""
    found: list[int] = []
    for entry in path:
        if not isinstance(entry, jax.tree_util.SequenceKey):
            break
        found.append(entry.idx)
    return tuple(found)


def _trees(flat: Sequence[tuple[Any, Any]], owners: Sequence[str | None],
           held: Mapping[tuple[int, ...], set[tuple[str, str]]], positional: Sequence[str | None]) -> tuple[str, ...]:
    """`UserStep.trees`: per leaf (``flat``, with its module in ``owners``: a parameter's, or
    an optimizer state's that mirrors it), the name of its argument (`_argument_of`: its
    positional name, else ``args[i]``, with its positions in a tuple: ``states[1]``) where two
    arguments hold parameters of one module path and name (``held``), else ''."""
    sets = list(held.values())
    if not any(one & other for i, one in enumerate(sets) for other in sets[i + 1:]):
        return ("",) * len(flat)
    trees = []
    for (path, _), module in zip(flat, owners):
        argument = _argument_of(path)
        if module is None or not argument:
            trees.append("")
            continue
        named = positional[argument[0]] if argument[0] < len(positional) else None
        trees.append((named or f"args[{argument[0]}]") + "".join(f"[{i}]" for i in argument[1:]))
    return tuple(trees)


def differentiable(leaf: Any) -> bool:
    """Whether a leaf can take a gradient: a floating or complex array (an integer one, a schedule's
    timesteps passed among the params, an int8 weight, has none: jax gives it float0 at most; a leaf
    of no known dtype is taken to)."""
    dtype = getattr(leaf, "dtype", None)
    return dtype is None or bool(jax.numpy.issubdtype(dtype, jax.numpy.inexact))


def _parameter_start(args: Any, path: Sequence[Any], names: Sequence[str], positional: Sequence[str | None]
                     ) -> int | None:
    """Where the module path of a parameter leaf starts in its names, or None
    when it is no parameter (`_linen_params`)."""
    position = getattr(path[0], "idx", None) if path else None
    if position is not None and position < len(positional) and positional[position] == PARAMS_KEY:
        start = 1
    elif PARAMS_KEY in names[1:]:
        start = names.index(PARAMS_KEY, 1) + 1
    else:
        return None
    node = _node_at(args, path[:start])
    while start < len(names) - 1 and is_collections(node):
        if names[start] != PARAMS_KEY:
            return None  # another collection of the variables dict (batch_stats, cache)
        start += 1
        node = _node_at(args, path[:start])
    return start


def _node_at(tree: Any, path: Sequence[Any]) -> Any:
    """The node of ``tree`` at a key path (None where a key cannot be followed)."""
    node = tree
    for entry in path:
        try:
            if isinstance(entry, jax.tree_util.GetAttrKey):
                node = getattr(node, entry.name)
            elif isinstance(entry, jax.tree_util.DictKey):
                node = node[entry.key]
            elif isinstance(entry, jax.tree_util.SequenceKey):
                node = node[entry.idx]
            else:
                return None
        except (AttributeError, KeyError, IndexError, TypeError):
            return None
    return node


def _positional_names(step: Any) -> list[str | None]:
    """The names of a step's positional parameters (a jit's or partial's function), [] if unknown."""
    try:
        signature = inspect.signature(step)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in signature.parameters.values() if p.kind in kinds]


def _follow_params(keys: Sequence[Sequence[str]], owners: list[str | None]) -> list[str | None]:
    """Each leaf that is no parameter but ends with a parameter's module path and
    name (an optimizer's moments of it: ``opt_state[0].mu['fc1']['kernel']``)
    owned by that parameter's module."""
    tails: dict[tuple[str, ...], str] = {}
    for names, module in zip(keys, owners):
        if module is not None:
            depth = len(module.split("/")) + 1 if module else 1
            tails[tuple(names[-depth:])] = module
    lengths = sorted({len(t) for t in tails}, reverse=True)
    out = list(owners)
    for i, (names, module) in enumerate(zip(keys, owners)):
        if module is None:
            out[i] = next((tails[t] for n in lengths if len(names) > n and (t := tuple(names[-n:])) in tails), None)
    return out


def _nnx_differentiated(args: Sequence[Any], owners: Sequence[str | None], counts: Mapping[str, int],
                        leaves: Collection[int]) -> tuple[list[str | None], dict[str, int]]:
    """An NNX step's owners and counts with the leaves ``leaves`` (by flattened index), which its loss
    is differentiated with respect to outside the NNX objects (optax's lookahead example's
    ``LookaheadParams(fast, slow)`` of ``nnx.state(model, nnx.Param)``, which the step's loss writes into
    the model with ``nnx.update`` before calling it), parameters: each owned by the model's module
    whose parameter its path ends with (`_follow_params`: ``fast['conv1']['kernel']`` is ``conv1``'s,
    the modules the name stacks show), already counted; else by its keys below its argument (below its
    object, in the NNX objects' state: ``params`` and ``rest``, keyed by the object's position first: a
    variable type of the user's own that the step trains, at the model's root ``''``), counted."""
    flat = named_leaves(tuple(args))
    keys = [path_names(path) for path, _ in flat]
    followed = _follow_params(keys, [module if i not in leaves else None for i, module in enumerate(owners)])
    owners, counts = list(owners), dict(counts)
    for index in sorted(leaves):
        module = followed[index]
        if module is None:
            argument = _argument_of(flat[index][0])
            below = len(argument) + (1 if argument[:1] in ((0,), (1,)) else 0)  # (an object's state: its position)
            module = "/".join(keys[index][below:-1])
            counts[module] = counts.get(module, 0) + math.prod(getattr(flat[index][1], "shape", ()))
        owners[index] = module
    return owners, counts


def _traced_function(step: Any, kwargs: Mapping[str, Any]) -> Callable[..., Any]:
    return functools.partial(step, **kwargs) if kwargs else step


def _nnx_step(step: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[
        Callable[..., Any], tuple[Any, ...], list[str | None], dict[str, int], Any]:
    """The step as a function of the NNX objects' state: it merges them, runs
    the step (which updates them in place) and returns their state after it
    with the step's own results, so that the updates are part of the program."""
    if _is_nnx_jit(step) and not _sharded_nnx_jit(step):
        step = step.fun  # nnx.jit: its function, run on objects merged here (they update in place)
    positions = [i for i, a in enumerate(args) if _is_graph(a)]
    objects = tuple(args[i] for i in positions)
    model = next((args[i] for i in positions if nnx.state(args[i], nnx.Param)), None)
    with tagged(model):  # every copy merged from the graph definition knows its modules' paths
        graphdef, params, rest = nnx.split(objects, nnx.Param, ...)
    owners: list[str | None] = []
    counts: dict[str, int] = {}
    for path, leaf in named_leaves(params):
        names = path_names(path)  # a module named value (an attention's) kept: a Variable's .value goes
        # the first entry is the object's position among the NNX arguments; the model's own paths follow
        module = "/".join(names[1:-1]) if objects[int(names[0])] is model else None
        owners.append(module)
        if module is not None:
            counts[module] = counts.get(module, 0) + math.prod(getattr(leaf, "shape", ()))
    rest_keys = [path_names(path) for path, _ in named_leaves(rest)]
    param_keys = [path_names(path) for path, _ in named_leaves(params)]
    owners = _follow_params([*param_keys, *rest_keys], owners + [None] * len(rest_keys))
    traced = {k: v for k, v in kwargs.items() if _holds_arrays(v)}  # traced as the step's inputs, not constants
    others = [a for i, a in enumerate(args) if i not in positions] + ([traced] if traced else [])
    owners += [None] * len(jax.tree.leaves(others))
    function = _traced_function(step, {k: v for k, v in kwargs.items() if k not in traced})

    def on_state(params: Any, rest: Any, others: list[Any]) -> Any:
        merged = nnx.merge(graphdef, params, rest)
        call, it = [], iter(others)
        for i in range(len(args)):
            call.append(merged[positions.index(i)] if i in positions else next(it))
        out = function(*call, **(others[-1] if traced else {}))
        return out, nnx.split(merged)[1:]

    return on_state, (params, rest, others), owners, counts, model


def prepare_step(step: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None,
                 axis_names: Sequence[str] | str | None = None) -> UserStep:
    """The user's ``step`` and its example arguments, ready to trace (`UserStep`).

    Collective axis names the step uses without binding them (``lax.pmean(grads,
    "batch")`` written for ``pmap``) are found by tracing and bound on a
    one-device mesh (or bound from ``axis_names``), as `xla_cost.analyze` binds
    a model's.

    Raises:
      InputError: ``step`` is not callable, or it fails to trace (its own
        exception, in one line).
    """
    if not callable(step):
        raise InputError("a training step function (bare, functools.partial, jax.jit or nnx.jit)",
                         f"{type(step).__name__} {step!r:.60}", "Pass the function the training loop calls.")
    kwargs = dict(kwargs or {})
    notes: list[str] = []
    cached = None
    for _ in range(8):  # the graph nodes a step holds, taken out as the arguments they are to its function
        found = nnx_cached_partial(step)
        if found is not None:  # the function and the graph nodes it holds: the step the training loop runs
            step, held = cached = found
            args = (*held, *args)
            notes.append(f"nnx.cached_partial of {step_name(step)}: analysed as {step_name(step)} called with the "
                         f"{len(held)} argument(s) it holds first")
        elif isinstance(step, functools.partial) and any(_is_graph(a) for a in step.args):
            # functools.partial(nnx.jit(f), model, optimizer), as tunix's PeftTrainer hands its step over: traced
            # as it is, the held objects would be mutated from inside the trace
            held, kwargs = step.args, {**step.keywords, **kwargs}
            step, args = step.func, (*held, *args)
            notes.append(f"functools.partial of {step_name(step)} holding NNX objects: analysed as {step_name(step)} "
                         f"called with the {len(held)} argument(s) it holds first")
        else:
            break
    name = step_name(step)
    names = check_axis_names(axis_names)
    held: dict[int, Any] = {}
    keywords: dict[str, Any] = {}
    bound: list[str] = []  # notes of the arguments bound to a plain jax step
    merged_roots: set[str] = set()  # the class names of the root objects a step merges itself (their scopes)
    if any(_is_graph(a) for a in args):
        function, traced_args, owners, counts, model = _nnx_step(step, args, kwargs)
        kind, positional, trees = "nnx", (), ()
        roots = (type(model).__name__,) if model is not None else ()
        scopes = functools.partial(nnx_name_scopes, model)  # its modules' methods under their paths' scopes
    else:
        held, given_kwargs, kind, scopes = _held_arguments(step, args), kwargs, "jax", bridged_name_scopes
        function, traced_args, positional, keywords, kwargs, bound = _jax_step(step, args, given_kwargs, held, ())
        owners, counts, trees = _linen_params(traced_args, positional)
        roots = ()
        if "parameters" in leaf_roles(traced_args):  # NNX Params in a state the step merges itself
            scopes = functools.partial(nnx_name_scopes, None, merged=True, roots=merged_roots)
    if not counts:
        notes.append(NO_PARAMETERS_NOTE)  # (until the trace finds the leaves the loss is differentiated by)
    user_jit = kind == "jax" and _is_jax_jit(step) and not names
    concrete: tuple[int, ...] | None = None  # the Python numbers bound once the trace needed them concrete
    own_program = None
    if kind == "nnx" and cached is None and not names and (_is_jax_jit(step) or _is_nnx_jit(step)):
        own_program = functools.partial(_own_lowered, step, args, kwargs)
    if user_jit:  # a trace of it made before (the training loop's call): without this trace's name scopes
        _forget_traces(step)
    while True:
        if user_jit:
            jitted = step if not kwargs and not held and not keywords else _JitWithKwargs(step, kwargs, held, bool(keywords))
        else:
            jitted = jax.jit(_fresh(bind_axes(function, names) if names else function))
        prepared = UserStep(name, tuple(traced_args), jitted, kind, tuple(owners), counts, roots, tuple(names),
                            (*bound, *notes), scopes, positional, own_program=own_program, trees=trees)
        try:
            with recording_model_calls() as calls:
                prepared.trace()
        except Exception as exc:  # noqa: BLE001 - the step's own error, reported in one line
            own = own_failure(exc, name)  # xla_cost's bookkeeping inside the trace failed, not the step
            if own is not None:
                raise own from exc
            axis = unbound_axis(exc)
            if axis is not None and axis not in names and len(names) < MAX_AXES:
                names.append(axis)
                user_jit = False
                continue
            numbers = _python_numbers(args, held) if kind == "jax" and concrete is None else []
            needed = concrete_arguments(exc)  # as jax names them; none for some errors (a traced slice's end)
            named = {i for i, n in enumerate(_positional_names(step)) for a in needed
                     if n is not None and re.match(rf"{re.escape(n)}\b", a)}
            if needed and named:
                numbers = [i for i in numbers if i in named]
            if numbers:  # a Python int the trace needs concrete (a layer's width): bound, as static_argnums would
                concrete = tuple(numbers)
                held = {**held, **{i: args[i] for i in concrete}}
                function, traced_args, positional, keywords, kwargs, bound = _jax_step(step, args, given_kwargs, held,
                                                                                       concrete)
                owners, _, trees = _linen_params(traced_args, positional)
                continue
            first = next((line for line in str(exc).strip().splitlines() if line.strip()), "")
            fix = "Fix the step or its arguments; call it once outside xla_cost to see the full traceback."
            needs = ""
            if needed:  # jax's own line naming the arguments the trace needed concrete, and how to bind them
                listed = " and ".join(needed)
                needs = f" (the trace needs {listed} concrete)"
                fix = (f"Bind {listed} before the trace: functools.partial({name}, {needed[0]}=...), or "
                       f"jax.jit({name}, static_argnames=('{needed[0]}',)) on a jitted step (a Python number given "
                       "to a step xla_cost jits itself is bound as given).")
            if type(exc).__name__ == "TraceContextError" or "different trace level" in str(exc):
                # flax: an NNX object the step holds, used or mutated from inside the trace
                fix = ("The step updates NNX objects it holds rather than takes (a closure, a bound method): pass the "
                       "model and optimizer as the step's arguments, as nnx.jit steps take them.")
            raise InputError(
                f"a step that traces with these arguments (jax.jit({name})(*args))",
                quoted(exc, first, 300) + needs, fix,
            ) from exc
        break
    active, routed, padded = step_routing(calls)  # a mixture of experts the step's model declares
    prepared = dataclasses.replace(prepared, active_parameters=active, padded=padded,
                                   notes=(*prepared.notes, *routed),
                                   roots=tuple(dict.fromkeys([*prepared.roots, *sorted(merged_roots)])))
    if names:
        given = check_axis_names(axis_names)
        how = "bound" if set(names) <= set(given) else "detected and bound"
        prepared = dataclasses.replace(prepared, notes=(*prepared.notes, (
            f"collective axis names {', '.join(names)} {how}: the step runs as one device of a data-parallel "
            "group (a one-device mesh), so its collectives move no data"
            + ("; the step's own jax.jit options (donation, shardings) are not used" if _is_jax_jit(step) else "")
        )))
    return prepared


def _jax_step(step: Any, args: Sequence[Any], kwargs: Mapping[str, Any], held: Mapping[int, Any],
              concrete: Sequence[int]) -> tuple[Callable[..., Any], tuple[Any, ...], tuple[str | None, ...],
                                                dict[str, Any], dict[str, Any], list[str]]:
    """A step of plain jax arguments as the function traced: ``held`` positional arguments bound
    (``concrete``: the Python numbers among them bound because the trace needed them concrete),
    keyword arguments holding arrays traced as one more input, the others bound. Returns the
    function, its traced arguments and their parameters' names, the traced keywords, the bound
    ones and notes saying what was bound."""
    keywords = {k: v for k, v in kwargs.items() if _holds_arrays(v)}  # traced as inputs, not constants
    kwargs = {k: v for k, v in kwargs.items() if k not in keywords}
    function, traced_args, notes = _traced_function(step, kwargs), tuple(args), []
    positional = tuple(_positional_names(step))
    if kwargs:
        notes.append(f"keyword argument(s) {', '.join(kwargs)} bound as they are given (no arrays): not inputs of "
                     "the analysed program")
    if held:  # a jit's static arguments, and objects jax cannot trace (a config, a schedule): bound
        function = _Held(function, held)
        traced_args = tuple(a for i, a in enumerate(args) if i not in held)
        static = [i for i in sorted(held) if i not in concrete]
        if static:
            notes.append(f"argument(s) {_named(static, positional)} bound as they are given (static: a jit's "
                         "static_argnums, or no arrays jax can trace): not inputs of the analysed program")
        if concrete:
            notes.append(f"argument(s) {_named(concrete, positional)} bound as they are given (Python numbers; the "
                         "trace needs a concrete one: a shape, a loop's length), as jax.jit's static_argnums would "
                         "bind them: not inputs of the analysed program")
        positional = tuple(n for i, n in enumerate(positional) if i not in held)
    if keywords:  # the keyword arguments that hold arrays: one more input, a dict, passed by their names
        function = _KeywordsLast(function)
        traced_args = (*traced_args, keywords)
        positional = (*positional[:len(traced_args) - 1], *[None] * max(0, len(traced_args) - 1 - len(positional)),
                      None)
    return function, traced_args, positional, keywords, kwargs, notes


def _named(positions: Sequence[int], names: Sequence[str | None]) -> str:
    """``2 (latents), 3``: argument positions with their parameters' names where known."""
    return ", ".join(f"{i} ({names[i]})" if i < len(names) and names[i] else str(i) for i in positions)


def _python_numbers(args: Sequence[Any], held: Mapping[int, Any]) -> list[int]:
    """The positions of the arguments not held that are Python numbers (or trees of them, a shape
    tuple), no arrays: jax.jit traces them, and a step may need them concrete."""
    def number(leaf: Any) -> bool:
        return isinstance(leaf, (bool, int, float, complex)) and not hasattr(leaf, "shape")

    return [i for i, a in enumerate(args) if i not in held and (leaves := jax.tree.leaves(a))
            and all(number(leaf) for leaf in leaves)]


class _JitWithKwargs:
    """A user's jitted step with keyword arguments and held positional ones bound (its jit options kept);
    ``keywords``: its last argument is a dict of keyword arguments traced as inputs (`_KeywordsLast`)."""

    def __init__(self, jitted: Any, kwargs: Mapping[str, Any], held: Mapping[int, Any] | None = None,
                 keywords: bool = False) -> None:
        self.jitted, self.kwargs, self.held, self.keywords = jitted, dict(kwargs), dict(held or {}), keywords

    def _call(self, how: Callable[..., Any], args: Sequence[Any]) -> Any:
        given = dict(args[-1]) if self.keywords else {}
        return how(*_merged(args[:-1] if self.keywords else args, self.held), **self.kwargs, **given)

    def __call__(self, *args: Any) -> Any:
        return self._call(self.jitted, args)

    def trace(self, *args: Any) -> Any:
        return self._call(self.jitted.trace, args)

    def lower(self, *args: Any) -> Any:
        return self._call(self.jitted.lower, args)


class _KeywordsLast:
    """A step's function taking its array keyword arguments as one last positional dict, so that they are
    inputs of the traced program (abstract ones included: a dropout key given as ``dropout_rng=``)."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        functools.update_wrapper(self, function, updated=())
        del self.__wrapped__  # (its signature is not this one's: jax binds the arguments by it)

    def __call__(self, *args: Any) -> Any:
        return self.function(*args[:-1], **args[-1])


def _holds_arrays(value: Any) -> bool:
    return any(hasattr(leaf, "shape") and hasattr(leaf, "dtype") for leaf in jax.tree.leaves(value))


class _Held:
    """A step's function with its held positional arguments bound in their places."""

    def __init__(self, function: Callable[..., Any], held: Mapping[int, Any]) -> None:
        self.function, self.held = function, dict(held)
        functools.update_wrapper(self, function, updated=())
        del self.__wrapped__  # (its signature is not this one's: jax binds the arguments by it)

    def __call__(self, *args: Any) -> Any:
        return self.function(*_merged(args, self.held))


def _merged(args: Sequence[Any], held: Mapping[int, Any]) -> list[Any]:
    """``args`` with ``held`` (position: value) put back in their positions."""
    merged, rest = [], iter(args)
    for i in range(len(args) + len(held)):
        merged.append(held[i] if i in held else next(rest))
    return merged


def _traceable(leaf: Any) -> bool:
    return hasattr(leaf, "shape") and hasattr(leaf, "dtype") or isinstance(leaf, (bool, int, float, complex))


def _held_arguments(step: Any, args: Sequence[Any]) -> dict[int, Any]:
    """The positional arguments the analysed program does not take as inputs: a user's
    ``jax.jit``'s ``static_argnums`` and ``static_argnames`` (given positionally), and any
    argument holding no array and something jax cannot trace (a config object, a learning-rate
    schedule, a string): Flax's lm1b ``jit_train_step(state, batch, config, learning_rate_fn, 0.0,
    rng)``. An argument mixing arrays with such objects is traced as it is."""
    static: set[int] = set()
    info = getattr(step, "_jit_info", None)  # jax.jit's own record of its options
    if info is not None:
        static.update(i % len(args) for i in (info.static_argnums or ()) if -len(args) <= i < len(args))
        names = _positional_names(step)
        static.update(names.index(n) for n in (info.static_argnames or ()) if n in names and names.index(n) < len(args))
    def untraceable(arg: Any) -> bool:  # holds no array, and something that is no number either
        leaves = jax.tree.leaves(arg)
        return bool(leaves) and not any(hasattr(leaf, "shape") and hasattr(leaf, "dtype") for leaf in leaves) \
            and not all(_traceable(leaf) for leaf in leaves)

    return {i: a for i, a in enumerate(args) if i in static or untraceable(a)}
