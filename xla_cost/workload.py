"""A training step made abstract: model, inputs, loss and optimizer to phase functions.

`build_workload` turns a Flax module (Linen or NNX), inputs, a loss and an optax
optimizer into four pure, jittable phase functions and abstract arguments for
them. Parameters and optimizer state come from ``jax.eval_shape``: nothing the
size of the model is ever allocated.

The phases (the project's vocabulary):

* ``forward(params, state, inputs, targets) -> (loss, new_state)``
* ``grad(params, state, inputs, targets) -> (loss, grads, new_state)``: the loss
  and its gradient with respect to the parameters only (not the inputs).
* ``update(grads, opt_state, params) -> (new_params, new_opt_state)``:
  ``optimizer.update`` followed by ``optax.apply_updates``.
* ``train_step(params, opt_state, state, inputs, targets)``: all three in one jit.

``state`` holds the model's non-parameter variables (Linen ``batch_stats``, NNX
``BatchStat`` and RNG counters); models run in training mode: a ``train=True``,
``training=True``, ``deterministic=False`` or ``use_running_average=False``
argument of ``__call__`` is set, and NNX modules are put in ``.train()`` mode.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from xla_cost.choices import OPTIMIZER_NAMES
from xla_cost import phases
from xla_cost.errors import InputError

__all__ = [
    "OPTIMIZERS",
    "RNG_KEY",
    "Workload",
    "build_workload",
    "resolve_optimizer",
    "softmax_cross_entropy",
]

PyTree = Any
LossFn = Callable[[jax.Array, jax.Array], jax.Array]

# Default hyper-parameters: the FLOP count of an update does not depend on them.
OPTIMIZERS: Mapping[str, Callable[[], optax.GradientTransformation]] = {
    "sgd": lambda: optax.sgd(1e-2),
    "momentum": lambda: optax.sgd(1e-2, momentum=0.9),
    "nesterov": lambda: optax.sgd(1e-2, momentum=0.9, nesterov=True),
    "adam": lambda: optax.adam(1e-3),
    "adamw": lambda: optax.adamw(1e-3),
    "rmsprop": lambda: optax.rmsprop(1e-3),
    "adagrad": lambda: optax.adagrad(1e-2),
    "lion": lambda: optax.lion(1e-4),
    "adafactor": lambda: optax.adafactor(1e-3),
    "lamb": lambda: optax.lamb(1e-3),
}
"""Optimizers known by name, each with the textbook default hyper-parameters."""
if tuple(OPTIMIZERS) != OPTIMIZER_NAMES:  # pragma: no cover - a name added in one place only
    raise ImportError("xla_cost.workload.OPTIMIZERS and xla_cost.choices.OPTIMIZER_NAMES differ")

# Keyword arguments of ``__call__`` that select training mode, and their value.
_TRAIN_KWARGS = {
    "train": True,
    "training": True,
    "deterministic": False,
    "use_running_average": False,
}


def softmax_cross_entropy(outputs: jax.Array, targets: jax.Array) -> jax.Array:
    """The default loss: mean softmax cross-entropy with integer class labels.

    Args:
      outputs: logits, classes on the last axis (cast to float32 first).
      targets: integer labels of shape ``outputs.shape[:-1]``.
    """
    logits = outputs.astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def resolve_optimizer(
    optimizer: str | optax.GradientTransformation,
) -> tuple[str, optax.GradientTransformation]:
    """Returns ``(name, transformation)`` for a name in `OPTIMIZERS` or an optax object."""
    if isinstance(optimizer, str):
        key = optimizer.strip().lower()
        if key not in OPTIMIZERS:
            raise InputError(
                f"an optimizer name, one of {', '.join(OPTIMIZERS)}",
                repr(optimizer),
                "Pass one of these names or an `optax.GradientTransformation`.",
            )
        return key, OPTIMIZERS[key]()
    if isinstance(optimizer, optax.GradientTransformation) or (
        callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))
    ):
        return "custom", optimizer
    raise InputError(
        "an `optax.GradientTransformation` or an optimizer name",
        f"{type(optimizer).__name__}",
        f"Use e.g. `optax.adam(1e-3)` or one of: {', '.join(OPTIMIZERS)}.",
    )


@dataclasses.dataclass(frozen=True)
class Workload:
    """Phase functions and the abstract arguments they are lowered with.

    Attributes:
      kind: ``"linen"`` or ``"nnx"``.
      root_name: the model's class name, the first entry of its name stack.
      params, state, opt_state, inputs, targets: abstract pytrees
        (``jax.ShapeDtypeStruct`` leaves).
      outputs: the abstract model output.
      forward, grad, update, train_step: the phase functions.
      param_paths: parameter count per module path (``"fc1"``, ``"layer1/conv"``).
      tracing: a context manager factory; trace (make_jaxpr, lower) the phase
        functions inside it, so that NNX modules carry their name scopes.
      extras: abstract traced call arguments besides the inputs: ``rng`` (the
        step's random key, `RNG_KEY`) and ``kwargs`` (array call_kwargs).
      axis_names: collective axis names bound on a 1-device mesh (empty: none).
      notes: what the builder did that a reader should know (names it bound).
      path_offset: leading parameter-path components that are not modules
        (1 for a Linen variables dict ``{"params": ...}`` given to a function).
      module_paths: every module the model's call reaches, with parameters or
        without (a Dropout); empty for an apply function.
      traced: programs already traced (``jax.stages.Traced``) with their
        `phase_args`, by phase: building traces ``forward`` to check that the
        model runs, and the analysis reuses that trace.
    """

    kind: str
    root_name: str
    params: PyTree
    state: PyTree
    opt_state: PyTree
    inputs: PyTree
    targets: PyTree
    outputs: PyTree
    forward: Callable[..., Any]
    grad: Callable[..., Any]
    update: Callable[..., Any]
    train_step: Callable[..., Any]
    param_paths: Mapping[str, int]
    tracing: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    extras: PyTree = dataclasses.field(default_factory=lambda: {"rng": RNG_KEY, "kwargs": {}})
    axis_names: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    path_offset: int = 0
    module_paths: tuple[str, ...] = ()
    traced: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def parameters(self) -> int:
        return sum(self.param_paths.values())

    @property
    def batch(self) -> PyTree:
        """What the phases take in their inputs slot: ``(inputs, extras)``."""
        return (self.inputs, self.extras)

    def trees(self) -> dict[str, PyTree]:
        """The argument trees the phases take, by the names `xla_cost.phases`
        declares: ``params``, ``grads`` (params-shaped: the very same tree),
        ``state``, ``opt_state``, ``batch``, ``targets``."""
        return {
            "params": self.params, "grads": self.params, "state": self.state,
            "opt_state": self.opt_state, "batch": self.batch, "targets": self.targets,
        }

    def phase_args(self, phase: str) -> tuple[Any, ...]:
        """The abstract arguments of ``phase``'s program, as `xla_cost.phases` declares them."""
        trees = self.trees()
        return tuple(trees[name] for name in phases.phase(phase).arguments)

    def input_owners(self, phase: str) -> list[str | None]:
        """The module of every flattened argument of ``phase`` (None: no module).

        Parameters and gradients belong to the module that owns the parameter;
        an optimizer-state leaf (Adam's ``mu['fc1']['kernel']``) to the module
        of the parameter whose path ends its own; counters and inputs to none.
        """
        modules = {
            tuple(_key_name(k) for k in path): module
            for path, module in _leaf_modules(self.params, self.path_offset)
        }
        owners: list[str | None] = []
        for path, _ in jax.tree_util.tree_flatten_with_path(self.phase_args(phase))[0]:
            names = tuple(_key_name(k) for k in path)
            match = max(
                (key for key in modules if len(key) < len(names) and names[-len(key):] == key),
                key=len, default=None,
            )
            owners.append(None if match is None else modules[match])
        return owners

    def phase_fn(self, phase: str) -> Callable[..., Any]:
        """The program of ``phase`` (a pure function of `phase_args`)."""
        declared = phases.phase(phase)
        if declared.program is None:
            raise ValueError(
                f"Expected a phase with a program ({', '.join(phases.PROGRAMS)}), got {phase!r}, "
                f"which is derived: {declared.formula_text}."
            )
        return getattr(self, declared.program)


def _abstract(tree: PyTree) -> PyTree:
    """Replaces every array leaf by its ``ShapeDtypeStruct``."""

    def leaf(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct):
            return x
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return jax.ShapeDtypeStruct(np.shape(x), x.dtype)
        return x

    return jax.tree.map(leaf, tree)


def _key_name(entry: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def _leaf_modules(params: PyTree, offset: int = 0) -> list[tuple[Any, str]]:
    """(key path, module path) of every parameter leaf; the module drops the variable
    name, and the first ``offset`` components (a ``params`` collection name)."""
    out = []
    for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]:
        names = [_key_name(p) for p in path]
        if path and isinstance(path[-1], jax.tree_util.GetAttrKey) and names[-1] == "value":
            names = names[:-1]  # NNX: State leaves end in `.value`
        out.append((path, "/".join(names[offset:-1])))
    return out


def _module_param_counts(params: PyTree, offset: int = 0) -> dict[str, int]:
    """Parameter count per module path; the path drops the variable's own name."""
    counts: dict[str, int] = {}
    leaves = jax.tree_util.tree_leaves(params)
    for (_, module), leaf in zip(_leaf_modules(params, offset), leaves):
        counts[module] = counts.get(module, 0) + int(np.prod(np.shape(leaf)))
    return counts


def _check_float_params(params: PyTree) -> None:
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        if not jnp.issubdtype(leaf.dtype, jnp.floating):
            name = "/".join(_key_name(p) for p in path)
            raise InputError(
                "floating-point parameters (gradients are taken with respect to them)",
                f"{leaf.dtype} for parameter {name!r}",
                "Keep integer tables and counters out of the `params` collection "
                "(Linen) or out of `nnx.Param` (NNX).",
            )


def _check_inputs(inputs: PyTree) -> PyTree:
    leaves = jax.tree.leaves(inputs)
    if not leaves or not all(hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves):
        raise InputError(
            "inputs as an array or `jax.ShapeDtypeStruct` (or a pytree of them)",
            f"{type(inputs).__name__}",
            "Pass e.g. `jax.ShapeDtypeStruct((batch, 224, 224, 3), jnp.float32)`.",
        )
    first = leaves[0]
    if len(first.shape) == 0:
        raise InputError(
            "inputs with a leading batch axis",
            f"a scalar of dtype {first.dtype}",
            "Give the inputs a shape (batch, ...).",
        )
    batch = first.shape[0]
    if batch < 1:
        raise InputError(
            "a batch size of at least 1", f"{batch} (inputs of shape {tuple(first.shape)})",
            "Use a leading axis of length >= 1.",
        )
    if not jax.config.jax_enable_x64:
        for leaf in leaves:
            too_big = [d for d in leaf.shape if d > _INT32_MAX]
            if too_big:
                raise InputError(
                    f"every input dimension at most {_INT32_MAX:,} (jax indexes arrays with "
                    "int32 unless jax_enable_x64 is set)",
                    f"a dimension of {too_big[0]:,} in inputs of shape {tuple(leaf.shape)}",
                    "Use a smaller batch: FLOP scale linearly with it, so multiply a "
                    "smaller batch's figures.",
                )
    return _abstract(inputs)


_INT32_MAX = 2**31 - 1


def _train_kwargs(fn: Callable[..., Any]) -> dict[str, Any]:
    names = _signature_names(fn)
    return {k: v for k, v in _TRAIN_KWARGS.items() if k in names}


def _signature_names(fn: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    # Flax appends a documentation link to every error; it is noise on one line.
    return re.sub(r"\s*\(https?://\S+\)\s*$", "", line).rstrip(".")


# Words of the errors that a wrong input shape produces (jax shape checks,
# Flax's parameter-shape check, numpy broadcasting).
_SHAPE_WORDS = re.compile(
    r"shape|dimension|broadcast|incompatible|contracting|rank|ndim|axis \d|size \d",
    re.IGNORECASE,
)
_MISSING_ARGUMENT = re.compile(r"missing (\d+ )?required (positional |keyword-only )?argument")


def _trace_error(exc: Exception, inputs: PyTree, what: str = "the model") -> InputError:
    """One line naming the probable cause of a failure while tracing the model."""
    if isinstance(exc, InputError):
        return exc
    shapes = ", ".join(f"{x.dtype}{list(x.shape)}" for x in jax.tree.leaves(inputs))
    first = _first_line(exc)
    received = f"inputs {shapes}, on which {what} failed with {type(exc).__name__}: {first}"
    if isinstance(exc, NameError) and "axis name" in first:
        fix = ("The model uses a collective axis name xla_cost could not bind; pass it with "
               "axis_names=[...] (--axis-name NAME).")
    elif isinstance(exc, TypeError) and _MISSING_ARGUMENT.search(first):
        fix = ("The model's call needs more arguments: pass them with call_kwargs={...} "
               "(--call-kwarg KEY=VALUE), or pick another method with method=.")
    elif isinstance(exc, TypeError) and "unexpected keyword argument" in first:
        fix = "Drop that argument from call_kwargs (--call-kwarg), or check method=."
    elif _SHAPE_WORDS.search(first) or "ScopeParamShapeError" in type(exc).__name__:
        fix = ("Check the input shape (--input-shape, batch first) and the model's "
               "configuration (--set).")
    else:
        fix = ("Rerun with --debug (or call the model directly) for the traceback; check the "
               "model's configuration (--set) and call arguments (--call-kwarg).")
    return InputError(f"inputs and call arguments {what} accepts", received, fix)


# ------------------------------------------------------------------------ NNX scopes

_SCOPE_STATE = threading.local()


@contextlib.contextmanager
def _nnx_name_scopes(model: nnx.Module) -> Iterator[None]:
    """Runs every submodule's ``__call__`` under a ``jax.named_scope`` of its path.

    Linen names its scopes itself; NNX does not, so per-layer attribution needs
    this. The classes' ``__call__`` are wrapped for the duration of the block and
    restored afterwards, whatever happens.
    """
    # Wrap each class that defines the ``__call__`` a module runs, once.
    defining = {
        next(k for k in type(m).__mro__ if "__call__" in vars(k))
        for _, m in nnx.iter_modules(model)
        if any("__call__" in vars(k) for k in type(m).__mro__[:-1])
    }
    originals: dict[type, Any] = {}

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def scoped_call(self: nnx.Module, *args: Any, **kwargs: Any) -> Any:
            paths: dict[int, tuple[str, ...]] | None = getattr(_SCOPE_STATE, "paths", None)
            if paths is None:
                return original(self, *args, **kwargs)
            path = paths.get(id(self))
            if path is None:
                # A copy made by a lifted transform (nnx.scan/vmap hand the body a
                # module merged from sliced state): known by its type when only one
                # module of the model has it.
                same_type = _SCOPE_STATE.types.get(type(self), [])
                if len(same_type) != 1:
                    return original(self, *args, **kwargs)
                path = same_type[0]
            for sub, module in nnx.iter_modules(self):  # its children, copies too
                paths.setdefault(id(module), path + tuple(str(p) for p in sub))
            stack: list[tuple[str, ...]] = _SCOPE_STATE.stack
            parent = stack[-1] if stack else None
            if not path:
                scope = type(self).__name__
            elif parent is not None and path[: len(parent)] == parent:
                scope = "/".join(path[len(parent):])
            else:
                scope = "/".join(path)
            stack.append(path)
            try:
                with jax.named_scope(scope):
                    return original(self, *args, **kwargs)
            finally:
                stack.pop()

        scoped_call.__wrapped__ = original  # type: ignore[attr-defined]
        return scoped_call

    try:
        for cls in defining:
            originals[cls] = vars(cls)["__call__"]
            cls.__call__ = wrap(originals[cls])  # type: ignore[method-assign]
        yield
    finally:
        for cls, original in originals.items():
            cls.__call__ = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _scoped_paths(model: nnx.Module) -> Iterator[None]:
    previous = getattr(_SCOPE_STATE, "paths", None), getattr(_SCOPE_STATE, "types", None)
    modules = [(tuple(str(p) for p in path), m) for path, m in nnx.iter_modules(model)]
    _SCOPE_STATE.paths = {id(m): path for path, m in modules}
    types: dict[type, list[tuple[str, ...]]] = {}
    for path, m in modules:
        types.setdefault(type(m), []).append(path)
    _SCOPE_STATE.types = types
    _SCOPE_STATE.stack = []
    try:
        yield
    finally:
        _SCOPE_STATE.paths, _SCOPE_STATE.types = previous


# ------------------------------------------------------------------------ builders

RNG_KEY = jax.ShapeDtypeStruct((2,), jnp.uint32)
"""The step's random key, as raw threefry key data: an argument of every phase.

Dropout masks and other random draws come from it. It is traced, not a constant:
XLA would otherwise fold the random bits of a constant key at compile time (slowly,
and without counting them), which no real training step does."""

_MAX_RESOLVE = 16  # rounds of binding axis names and RNG streams the model asks for
_UNBOUND_AXIS = re.compile(r"unbound axis name:?\s*([A-Za-z_][\w.\-]*?)\.?(?:\s|$)")
_MISSING_RNG = re.compile(r'needs PRNG for "([^"]+)"')


@dataclasses.dataclass
class _CallPlan:
    """How to call the model; grows as the model reveals what it needs."""

    method: str | Callable[..., Any] | None
    static: dict[str, Any]
    axis_names: list[str]
    rng_names: list[str]
    detected_axes: list[str] = dataclasses.field(default_factory=list)
    detected_rngs: list[str] = dataclasses.field(default_factory=list)
    module_paths: tuple[str, ...] = ()


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, jax.ShapeDtypeStruct)) or (
        hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (nn.Module, nnx.Object))
    )


def _split_call_kwargs(call_kwargs: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(static, traced): a keyword whose value is arrays (any pytree of them) is traced.

    Static values (flags, strings, numbers, None) are passed as they are; arrays
    and ``jax.ShapeDtypeStruct`` become abstract arguments of every phase, like
    the inputs, so that a mask or a second input is data, not a constant.
    """
    if call_kwargs is None:
        return {}, {}
    if not isinstance(call_kwargs, Mapping) or not all(isinstance(k, str) for k in call_kwargs):
        raise InputError(
            "call_kwargs as a dict of keyword arguments by name",
            f"{type(call_kwargs).__name__}", "Pass e.g. call_kwargs={'train': True}.",
        )
    static, traced = {}, {}
    for key, value in call_kwargs.items():
        leaves = jax.tree.leaves(value)
        if leaves and all(_is_array(x) for x in leaves):
            traced[key] = _abstract(value)
        else:
            static[key] = value
    return static, traced


def _rng_dict(raw_key: jax.Array, names: Sequence[str]) -> dict[str, jax.Array]:
    """One key per RNG stream name, all derived from the step's traced key."""
    if not names:
        return {}
    key = jax.random.wrap_key_data(raw_key)
    keys = jax.random.split(key, len(names))
    return {name: keys[i] for i, name in enumerate(names)}


def _bind_axes(fn: Callable[..., Any], axis_names: Sequence[str]) -> Callable[..., Any]:
    """``fn`` run as one device of a data-parallel group over ``axis_names``.

    The model's collectives (``psum``/``pmean`` of a BatchNorm with ``axis_name``)
    need their axis bound: ``fn`` runs under ``jax.shard_map`` on a mesh of the
    first device, every named axis of size 1. Arguments are replicated, so the
    gradient of a parameter is all-reduced over the group as in data parallelism.
    """
    if not axis_names:
        return fn
    from jax.sharding import Mesh, PartitionSpec

    devices = np.array(jax.devices()[:1]).reshape((1,) * len(axis_names))
    mesh = Mesh(devices, tuple(axis_names))

    def bound(*args: Any) -> Any:
        return jax.shard_map(
            fn, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec(), check_vma=False
        )(*args)

    return bound


def _method_of(model: Any, method: str | Callable[..., Any] | None) -> Callable[..., Any]:
    """The function the model is called through (for its signature)."""
    if method is None:
        return model.__call__
    if isinstance(method, str):
        target = getattr(model, method, None)
        if not callable(target):
            raise InputError(
                f"method= naming a method of {type(model).__name__}",
                repr(method), "Pass the name of one of its methods, e.g. method='encode'.",
            )
        return target
    if callable(method):
        return method
    raise InputError(
        "method= as a method name or a function", type(method).__name__, "Pass e.g. method='encode'."
    )


def _linen_apply(
    model: nn.Module, inputs: PyTree, extras: PyTree, plan: _CallPlan
) -> tuple[Callable[..., Any], PyTree, PyTree, PyTree]:
    """(apply, params, state, abstract outputs) of a Linen module, from one init trace."""
    target = _method_of(model, plan.method)
    kwargs = {**_train_kwargs(target), **plan.static}
    method = plan.method
    init_streams = ["params", *(n for n in plan.rng_names if n != "params")]
    apply_streams = [n for n in plan.rng_names if n != "params"]

    def init(inputs: PyTree, extras: PyTree) -> PyTree:
        # Flax's own Module.init_with_output, not an init the class may override
        # (GPT ports often replace init(self, rng) with their own signature); the
        # outputs come with the variables, from the one trace.
        return nn.Module.init_with_output(
            model, _rng_dict(extras["rng"], init_streams), inputs,
            method=method, **kwargs, **extras["kwargs"],
        )

    paths: set[str] = set()

    def record(next_fun: Callable[..., Any], args: Any, kwargs: Any, context: Any) -> Any:
        paths.add("/".join(str(p) for p in context.module.path))
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):  # every module the call reaches, parameters or not
        outputs, variables = jax.eval_shape(_bind_axes(init, plan.axis_names), inputs, extras)
    plan.module_paths = tuple(sorted(p for p in paths if p))
    variables = dict(variables)
    params = variables.pop("params", {})
    state = variables
    mutable = list(state)

    def apply(params: PyTree, state: PyTree, inputs: PyTree, extras: PyTree) -> tuple[Any, PyTree]:
        variables = {"params": params, **state}
        rngs = _rng_dict(extras["rng"], apply_streams)
        if mutable:
            outputs, new_state = nn.Module.apply(
                model, variables, inputs, mutable=mutable, rngs=rngs, method=method,
                **kwargs, **extras["kwargs"],
            )
            return outputs, dict(new_state)
        return nn.Module.apply(
            model, variables, inputs, rngs=rngs, method=method, **kwargs, **extras["kwargs"]
        ), state

    return apply, params, state, outputs


def _function_apply(
    fn: Callable[..., Any], params: PyTree, plan: _CallPlan
) -> tuple[Callable[..., Any], PyTree, PyTree]:
    leaves = jax.tree.leaves(params)
    if not leaves or not all(hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves):
        raise InputError(
            "params as a pytree of arrays or `jax.ShapeDtypeStruct`",
            f"{type(params).__name__} with {len(leaves)} array leaves",
            "Pass e.g. params=jax.eval_shape(init, key, inputs).",
        )
    static = plan.static

    def apply(params: PyTree, state: PyTree, inputs: PyTree, extras: PyTree) -> tuple[Any, PyTree]:
        return fn(params, inputs, **static, **extras["kwargs"]), state

    return apply, _abstract(params), {}


def _nnx_apply(
    model: nnx.Module, plan: _CallPlan
) -> tuple[Callable[..., Any], PyTree, PyTree, Callable[[], Any]]:
    graphdef, params, state = nnx.split(model, nnx.Param, ...)
    params, state = _abstract(params), _abstract(state)
    plan.module_paths = tuple(
        sorted("/".join(str(p) for p in path) for path, _ in nnx.iter_modules(model) if path)
    )
    signature = _signature_names(_method_of(model, plan.method))
    kwargs = {**_train_kwargs(_method_of(model, plan.method)), **plan.static}
    # An `rngs` argument (Flax's NNX MNIST example: `model(x, rngs=rngs)`) gets a
    # fresh nnx.Rngs on the step's traced key; an nnx.Rngs the caller passed is
    # replaced the same way (one made outside the trace cannot be used inside it).
    wants_rngs = "rngs" in signature and (
        "rngs" not in kwargs or isinstance(kwargs["rngs"], nnx.Rngs)
    )
    kwargs.pop("rngs", None) if wants_rngs else None
    method = plan.method

    def apply(params: PyTree, state: PyTree, inputs: PyTree, extras: PyTree) -> tuple[Any, PyTree]:
        module = nnx.merge(graphdef, params, state, copy=True)
        if callable(getattr(module, "train", None)):
            module.train()
        call = dict(kwargs, **extras["kwargs"])
        if wants_rngs:
            call["rngs"] = nnx.Rngs(jax.random.wrap_key_data(extras["rng"]))
        target = module if method is None else (
            getattr(module, method) if isinstance(method, str) else functools.partial(method, module)
        )
        with _scoped_paths(module):
            outputs = target(inputs, **call)
        _, _, new_state = nnx.split(module, nnx.Param, ...)
        return outputs, new_state

    return apply, params, state, lambda: _nnx_name_scopes(model)


def _describe_tree(tree: PyTree) -> str:
    """``(float32[8,10], float32[])``: a pytree's structure with abstract leaves."""

    def leaf(x: Any) -> str:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return f"{x.dtype}[{','.join(map(str, x.shape))}]"
        return type(x).__name__

    if isinstance(tree, (tuple, list)):
        inner = ", ".join(_describe_tree(x) for x in tree)
        return f"({inner})" if isinstance(tree, tuple) else f"[{inner}]"
    if isinstance(tree, Mapping):
        return "{" + ", ".join(f"{k!r}: {_describe_tree(v)}" for k, v in tree.items()) + "}"
    return leaf(tree)


OutputSelector = int | str | Callable[[Any], Any]


def _selector(output: OutputSelector | None) -> Callable[[Any], Any]:
    """The function that picks the outputs the loss sees (the logits)."""
    if output is None:
        return lambda outputs: outputs
    if isinstance(output, bool) or not isinstance(output, (int, str)) and not callable(output):
        raise InputError(
            "output= as an index, a key or a function of the model's outputs",
            f"{type(output).__name__} {output!r}", "Pass e.g. output=0 for (logits, loss).",
        )
    if callable(output):
        return output

    def pick(outputs: Any) -> Any:
        try:
            return outputs[output]
        except (KeyError, IndexError, TypeError) as exc:
            raise InputError(
                "output= naming one of the model's outputs",
                f"{output!r} for outputs {_describe_tree(_abstract(outputs))}",
                "Use an index of a tuple (--output-index 0) or a key of a dict.",
            ) from exc

    return pick


def _prepare(
    model: Any, params: PyTree | None, inputs: PyTree, extras: PyTree, plan: _CallPlan
) -> tuple[str, str, Callable[..., Any], PyTree, PyTree, Callable[[], Any], Any]:
    """(kind, root name, apply, params, state, tracing, raw outputs) for ``plan``."""
    tracing: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    if isinstance(model, nn.Module):
        kind, root_name = "linen", type(model).__name__
        apply, params, state, outputs = _linen_apply(model, inputs, extras, plan)
    elif isinstance(model, nnx.Module):
        kind, root_name = "nnx", type(model).__name__
        apply, params, state, tracing = _nnx_apply(model, plan)
    else:
        kind, root_name = "function", getattr(model, "__name__", type(model).__name__)
        apply, params, state = _function_apply(model, params, plan)
    apply = _bind_axes(apply, plan.axis_names)
    if not isinstance(model, nn.Module):  # Linen's init gave them already
        with tracing():
            outputs = jax.eval_shape(lambda *a: apply(*a)[0], params, state, inputs, extras)
    return kind, root_name, apply, params, state, tracing, outputs


def _cause_chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _learn(exc: BaseException, plan: _CallPlan) -> bool:
    """Adds the axis name or RNG stream ``exc`` says is missing; False if neither."""
    for cause in _cause_chain(exc):
        text = str(cause)
        match = _UNBOUND_AXIS.search(text)
        if isinstance(cause, NameError) and match and match.group(1) not in plan.axis_names:
            plan.axis_names.append(match.group(1))
            plan.detected_axes.append(match.group(1))
            return True
        match = _MISSING_RNG.search(text)
        if match and match.group(1) not in plan.rng_names:
            plan.rng_names.append(match.group(1))
            plan.detected_rngs.append(match.group(1))
            return True
    return False


def _check_model(model: Any, params: PyTree | None) -> None:
    if params is not None and isinstance(model, (nn.Module, nnx.Module)):
        raise InputError(
            "params only with an apply function (a Flax module brings its own)",
            f"params and a {type(model).__name__} module",
            "Drop params=, or pass the module's apply function instead.",
        )
    if isinstance(model, (nn.Module, nnx.Module)):
        return
    if callable(model) and not isinstance(model, type):
        if params is None:
            raise InputError(
                "params= (abstract parameters) with an apply(params, inputs) function",
                "no params",
                "Pass e.g. params=jax.eval_shape(init, key, inputs).",
            )
        return
    raise InputError(
        "a `flax.linen.Module` or `flax.nnx.Module` instance, or an apply(params, inputs) function",
        f"{type(model).__module__}.{type(model).__qualname__}",
        "Instantiate the module (e.g. `MyNet()`), not its class, or use a zoo name.",
    )


def _check_axis_names(axis_names: Sequence[str] | str | None) -> list[str]:
    if axis_names is None:
        return []
    names = [axis_names] if isinstance(axis_names, str) else list(axis_names)
    if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise InputError(
            "axis_names as distinct non-empty strings", repr(axis_names),
            "Pass e.g. axis_names=['batch'] (--axis-name batch).",
        )
    return names


def build_workload(
    model: Any,
    inputs: PyTree,
    *,
    optimizer: str | optax.GradientTransformation,
    loss: LossFn | None = None,
    targets: PyTree | None = None,
    params: PyTree | None = None,
    call_kwargs: Mapping[str, Any] | None = None,
    method: str | Callable[..., Any] | None = None,
    axis_names: Sequence[str] | str | None = None,
    output: OutputSelector | None = None,
    remat: str | None = None,
) -> tuple[Workload, str]:
    """Builds the phase functions of one training step, abstractly.

    Args:
      model: a ``flax.linen.Module``, a ``flax.nnx.Module`` (concrete, or
        abstract from ``nnx.eval_shape``), or a plain function
        ``apply(params, inputs, **call_kwargs) -> outputs`` (then ``params`` is
        required).
      inputs: an array or ``jax.ShapeDtypeStruct`` (or a pytree of them), batch on
        the leading axis of the first leaf; the model's first positional argument.
      optimizer: an optax transformation or a name in `OPTIMIZERS`.
      loss: ``loss(outputs, targets) -> scalar``; default `softmax_cross_entropy`.
      targets: abstract targets; default integer labels of shape
        ``outputs.shape[:-1]`` for the default loss, else outputs-shaped.
      params: with an apply function: its parameters, a pytree of arrays or
        ``jax.ShapeDtypeStruct`` (only their shapes and dtypes are used). Nested
        dicts name the modules: ``{"fc1": {"w": ...}}`` is module ``fc1``; a Linen
        variables dict ``{"params": {...}}`` works as it is.
      call_kwargs: keyword arguments of the model's call. Arrays (or
        ``jax.ShapeDtypeStruct``) among them are traced like the inputs (a mask,
        a second input); other values are passed as they are (flags, strings).
        Training flags (``train``, ``deterministic``, ...) are set already;
        random keys are supplied: Linen gets ``rngs`` for every stream it asks
        for, an NNX call with an ``rngs`` parameter gets an ``nnx.Rngs``.
      method: the Linen/NNX method to call instead of ``__call__`` (a name, or a
        function of the module as for Flax's ``apply(..., method=)``).
      axis_names: collective axis names to bind (``BatchNorm(axis_name="batch")``);
        names the model uses are also detected. The step then runs as one device
        of a data-parallel group (``jax.shard_map`` over a 1-device mesh).
      output: what the loss sees of the model's outputs: an index or key
        (``0`` for ``(logits, loss)``) or a function; default all of them.
      remat: run the whole model under ``jax.checkpoint`` with this policy
        (`xla_cost.remat.REMAT_POLICIES`); None or ``none``: as written (a
        model's own ``nn.remat``/``jax.checkpoint`` is left as it is).

    Returns:
      ``(workload, optimizer_name)``.
    """
    if remat is not None:
        from xla_cost.remat import check

        check(remat)
    optimizer_name, transform = resolve_optimizer(optimizer)
    inputs = _check_inputs(inputs)
    _check_model(model, params)
    static, traced = _split_call_kwargs(call_kwargs)
    extras = {"rng": RNG_KEY, "kwargs": traced}
    plan = _CallPlan(
        method=method, static=static, axis_names=_check_axis_names(axis_names),
        rng_names=["dropout"],
    )
    user_params, user_targets = params, targets
    select = _selector(output)
    loss_fn = loss if loss is not None else softmax_cross_entropy
    # Each round traces the model once for its parameters (Linen: with its
    # outputs) and once in the forward phase; an axis name or RNG stream the
    # model asks for is learned and the round repeated. The forward trace is
    # jax's to cache: the forward program is traced from it again for free.
    for _ in range(_MAX_RESOLVE):
        try:
            kind, root_name, apply, params, state, tracing, raw_outputs = _prepare(
                model, user_params, inputs, extras, plan
            )
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as bad input, chained
            if _learn(exc, plan):
                continue
            raise _trace_error(exc, inputs) from exc
        _check_params(params, model)
        outputs = _select_outputs(select, raw_outputs, inputs)
        if loss is None:
            _check_logits(outputs, raw_outputs, output)
        targets = _abstract(
            user_targets if user_targets is not None else _default_targets(outputs, loss)
        )
        _check_loss(loss_fn, outputs, targets)
        forward = _forward_phase(apply, select, loss_fn, remat)
        try:
            with tracing():  # the forward program's trace, kept for the analysis
                traced_forward = jax.jit(forward).trace(params, state, (inputs, extras), targets)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001
            if _learn(exc, plan):
                continue
            raise _trace_error(exc, inputs) from exc
        break
    else:  # pragma: no cover - a model asking for ever more names
        raise InputError(
            f"a model that needs at most {_MAX_RESOLVE} axis names and RNG streams",
            f"more ({', '.join(plan.axis_names + plan.rng_names)})", "Bind them with axis_names=.",
        )

    def grad(params: PyTree, state: PyTree, batch: PyTree, targets: PyTree) -> Any:
        (value, new_state), grads = jax.value_and_grad(forward, has_aux=True)(
            params, state, batch, targets
        )
        return value, grads, new_state

    def update(grads: PyTree, opt_state: PyTree, params: PyTree) -> Any:
        updates, opt_state = transform.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def train_step(
        params: PyTree, opt_state: PyTree, state: PyTree, batch: PyTree, targets: PyTree
    ) -> Any:
        value, grads, new_state = grad(params, state, batch, targets)
        new_params, opt_state = update(grads, opt_state, params)
        return new_params, opt_state, new_state, value

    opt_state = jax.eval_shape(transform.init, params)
    notes = []
    if plan.axis_names:
        how = "detected" if plan.detected_axes == plan.axis_names else "bound"
        notes.append(
            f"collective axis names {', '.join(plan.axis_names)} {how}: the step runs as one "
            "device of a data-parallel group (jax.shard_map over a 1-device mesh); its "
            "collectives move nothing there (see collectives)"
        )
    if plan.detected_rngs:
        notes.append(f"RNG streams the model asked for, supplied: {', '.join(plan.detected_rngs)}")
    strip = 1 if kind == "function" and _is_variables_dict(params) else 0
    workload = Workload(
        kind=kind,
        root_name=root_name,
        params=params,
        state=state,
        opt_state=opt_state,
        inputs=inputs,
        targets=targets,
        outputs=outputs,
        forward=forward,
        grad=grad,
        update=update,
        train_step=train_step,
        param_paths=_module_param_counts(params, strip),
        tracing=tracing,
        extras=extras,
        axis_names=tuple(plan.axis_names),
        notes=tuple(notes),
        path_offset=strip,
        module_paths=plan.module_paths,
        traced={"forward": traced_forward},
    )
    return workload, optimizer_name


def _select_outputs(select: Callable[[Any], Any], raw_outputs: Any, inputs: PyTree) -> Any:
    try:
        return select(raw_outputs)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a user's selector failed
        raise _trace_error(exc, inputs, "output=") from exc


def _default_targets(outputs: Any, loss: LossFn | None) -> PyTree:
    """Integer labels for the default loss; outputs-shaped targets for a user's loss."""
    out = jax.tree.leaves(outputs)[0]
    if loss is None:
        return jax.ShapeDtypeStruct(out.shape[:-1], jnp.int32)
    return jax.ShapeDtypeStruct(out.shape, out.dtype)


def _check_loss(loss_fn: LossFn, outputs: Any, targets: PyTree) -> None:
    """The loss must take the (abstract) outputs and targets and return a scalar."""
    try:
        loss_shape = jax.eval_shape(loss_fn, outputs, targets)
    except Exception as exc:  # noqa: BLE001
        raise InputError(
            "a loss(outputs, targets) that accepts the model's outputs",
            f"{type(exc).__name__} on outputs {_describe_tree(outputs)}: {_first_line(exc)}",
            "Check the loss function and the targets' shape.",
        ) from exc
    if getattr(loss_shape, "shape", None) != ():
        raise InputError(
            "a loss that returns a scalar",
            f"an output of shape {getattr(loss_shape, 'shape', type(loss_shape).__name__)}",
            "Reduce the loss, e.g. with `.mean()`.",
        )


def _forward_phase(
    apply: Callable[..., Any], select: Callable[[Any], Any], loss_fn: LossFn, remat: str | None = None
) -> Callable[..., Any]:
    """The forward phase: the loss of one batch, and the model's new state.

    The phases see ``(inputs, extras)`` in the inputs slot: the model's inputs,
    its traced call arguments and the step's random key. With ``remat`` the
    whole model runs under ``jax.checkpoint`` with that policy
    (`xla_cost.remat`); the loss stays outside it.
    """
    from xla_cost import remat as _remat

    def forward(params: PyTree, state: PyTree, batch: PyTree, targets: PyTree) -> Any:
        inputs, extras = batch
        model = _remat.checkpoint(lambda p, s, x: apply(p, s, x, extras), remat)
        outputs, new_state = model(params, state, inputs)
        return loss_fn(select(outputs), targets), new_state

    return forward


def _is_variables_dict(params: PyTree) -> bool:
    """A Linen variables dict (``{"params": {...}}``) passed as an apply function's params."""
    return isinstance(params, Mapping) and list(params) == ["params"] and isinstance(
        params["params"], Mapping
    )


def _check_params(params: PyTree, model: Any) -> None:
    leaves = jax.tree.leaves(params)
    if not leaves:
        raise InputError(
            "a model with trainable parameters (the gradient is taken with respect to them)",
            f"{type(model).__name__} with no parameters",
            "Analyze a model that has parameters (Linen `params` collection, NNX `nnx.Param`), "
            "or pass an apply function with params=.",
        )
    _check_float_params(params)


def _check_logits(outputs: Any, raw_outputs: Any, output: Any) -> None:
    """The default loss needs one array of logits; say how to get there if not."""
    if _is_array(outputs) and not isinstance(outputs, (tuple, list, Mapping)):
        if len(outputs.shape) >= 1:
            return
    described = _describe_tree(outputs)
    if isinstance(raw_outputs, (tuple, list)) and output is None:
        fix = ("Pick the logits with output=0 (--output-index 0), or use the model's own loss "
               "with loss=lambda outputs, targets: outputs[1].")
    elif isinstance(raw_outputs, Mapping) and output is None:
        key = next(iter(raw_outputs), "logits")
        fix = (f"Pick the logits with output={key!r} (--output-index {key}), or pass "
               "loss=lambda outputs, targets: ... to use your own loss.")
    else:
        fix = "Pass loss=lambda outputs, targets: ... for outputs that are not logits."
    raise InputError(
        "the model to return one array of logits (classes last) for the default "
        "softmax cross-entropy loss",
        f"outputs {described}", fix,
    )
