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
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from xla_cost.errors import InputError

__all__ = [
    "OPTIMIZERS",
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

    @property
    def parameters(self) -> int:
        return sum(self.param_paths.values())

    def phase_args(self, phase: str) -> tuple[Any, ...]:
        """The abstract arguments of ``phase``."""
        if phase in ("forward", "grad"):
            return (self.params, self.state, self.inputs, self.targets)
        if phase == "update":
            return (self.params, self.opt_state, self.params)  # grads are params-shaped
        if phase == "train_step":
            return (self.params, self.opt_state, self.state, self.inputs, self.targets)
        raise ValueError(f"unknown phase {phase!r}")

    def input_owners(self, phase: str) -> list[str | None]:
        """The module of every flattened argument of ``phase`` (None: no module).

        Parameters and gradients belong to the module that owns the parameter;
        an optimizer-state leaf (Adam's ``mu['fc1']['kernel']``) to the module
        of the parameter whose path ends its own; counters and inputs to none.
        """
        modules = {
            tuple(_key_name(k) for k in path): module
            for path, module in _leaf_modules(self.params)
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
        return {
            "forward": self.forward,
            "grad": self.grad,
            "update": self.update,
            "train_step": self.train_step,
        }[phase]


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


def _leaf_modules(params: PyTree) -> list[tuple[Any, str]]:
    """(key path, module path) of every parameter leaf; the module drops the variable name."""
    out = []
    for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]:
        names = [_key_name(p) for p in path]
        if path and isinstance(path[-1], jax.tree_util.GetAttrKey) and names[-1] == "value":
            names = names[:-1]  # NNX: State leaves end in `.value`
        out.append((path, "/".join(names[:-1])))
    return out


def _module_param_counts(params: PyTree) -> dict[str, int]:
    """Parameter count per module path; the path drops the variable's own name."""
    counts: dict[str, int] = {}
    leaves = jax.tree_util.tree_leaves(params)
    for (_, module), leaf in zip(_leaf_modules(params), leaves):
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
    return _abstract(inputs)


def _train_kwargs(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        names = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in _TRAIN_KWARGS.items() if k in names}


def _trace_error(exc: Exception, inputs: PyTree) -> InputError:
    shapes = ", ".join(f"{tuple(x.shape)} {x.dtype}" for x in jax.tree.leaves(inputs))
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, InputError):
        return exc
    return InputError(
        "inputs the model accepts",
        f"inputs of shape {shapes}, on which the model failed: {first}",
        "Check the input shape (--input-shape) and the model's configuration.",
    )


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


def _linen_apply(
    model: nn.Module, inputs: PyTree
) -> tuple[Callable[..., Any], PyTree, PyTree]:
    kwargs = _train_kwargs(model.__call__)
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    try:
        variables = jax.eval_shape(lambda x: model.init(rngs, x, **kwargs), inputs)
    except Exception as exc:  # noqa: BLE001 - reported as bad input, chained
        raise _trace_error(exc, inputs) from exc
    variables = dict(variables)
    params = variables.pop("params", {})
    state = variables
    mutable = list(state)
    dropout_key = jax.random.key(2)

    def apply(params: PyTree, state: PyTree, inputs: PyTree) -> tuple[Any, PyTree]:
        variables = {"params": params, **state}
        rngs = {"dropout": dropout_key}
        if mutable:
            return model.apply(variables, inputs, mutable=mutable, rngs=rngs, **kwargs)
        return model.apply(variables, inputs, rngs=rngs, **kwargs), state

    return apply, params, state


def _function_apply(
    fn: Callable[..., Any], params: PyTree
) -> tuple[Callable[..., Any], PyTree, PyTree]:
    leaves = jax.tree.leaves(params)
    if not leaves or not all(hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves):
        raise InputError(
            "params as a pytree of arrays or `jax.ShapeDtypeStruct`",
            f"{type(params).__name__} with {len(leaves)} array leaves",
            "Pass e.g. params=jax.eval_shape(init, key, inputs).",
        )

    def apply(params: PyTree, state: PyTree, inputs: PyTree) -> tuple[Any, PyTree]:
        return fn(params, inputs), state

    return apply, _abstract(params), {}


def _nnx_apply(
    model: nnx.Module,
) -> tuple[Callable[..., Any], PyTree, PyTree, Callable[[], Any]]:
    graphdef, params, state = nnx.split(model, nnx.Param, ...)
    params, state = _abstract(params), _abstract(state)

    def apply(params: PyTree, state: PyTree, inputs: PyTree) -> tuple[Any, PyTree]:
        module = nnx.merge(graphdef, params, state, copy=True)
        if callable(getattr(module, "train", None)):
            module.train()
        with _scoped_paths(module):
            outputs = module(inputs)
        _, _, new_state = nnx.split(module, nnx.Param, ...)
        return outputs, new_state

    return apply, params, state, lambda: _nnx_name_scopes(model)


def build_workload(
    model: Any,
    inputs: PyTree,
    *,
    optimizer: str | optax.GradientTransformation,
    loss: LossFn | None = None,
    targets: PyTree | None = None,
    params: PyTree | None = None,
) -> tuple[Workload, str]:
    """Builds the phase functions of one training step, abstractly.

    Args:
      model: a ``flax.linen.Module``, a ``flax.nnx.Module`` (concrete, or
        abstract from ``nnx.eval_shape``), or a plain function
        ``apply(params, inputs) -> outputs`` (then ``params`` is required).
      inputs: an array or ``jax.ShapeDtypeStruct`` (or a pytree of them), batch on
        the leading axis of the first leaf.
      optimizer: an optax transformation or a name in `OPTIMIZERS`.
      loss: ``loss(outputs, targets) -> scalar``; default `softmax_cross_entropy`.
      targets: abstract targets; default integer labels of shape
        ``outputs.shape[:-1]`` for the default loss, else outputs-shaped.
      params: with an apply function: its parameters, a pytree of arrays or
        ``jax.ShapeDtypeStruct`` (only their shapes and dtypes are used). Nested
        dicts name the modules: ``{"fc1": {"w": ...}}`` is module ``fc1``.

    Returns:
      ``(workload, optimizer_name)``.
    """
    optimizer_name, transform = resolve_optimizer(optimizer)
    inputs = _check_inputs(inputs)
    tracing: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    if params is not None and isinstance(model, (nn.Module, nnx.Module)):
        raise InputError(
            "params only with an apply function (a Flax module brings its own)",
            f"params and a {type(model).__name__} module",
            "Drop params=, or pass the module's apply function instead.",
        )
    if isinstance(model, nn.Module):
        kind, root_name = "linen", type(model).__name__
        apply, params, state = _linen_apply(model, inputs)
    elif isinstance(model, nnx.Module):
        kind, root_name = "nnx", type(model).__name__
        apply, params, state, tracing = _nnx_apply(model)
    elif callable(model) and not isinstance(model, type):
        if params is None:
            raise InputError(
                "params= (abstract parameters) with an apply(params, inputs) function",
                "no params",
                "Pass e.g. params=jax.eval_shape(init, key, inputs).",
            )
        kind, root_name = "function", getattr(model, "__name__", type(model).__name__)
        apply, params, state = _function_apply(model, params)
    else:
        raise InputError(
            "a `flax.linen.Module` or `flax.nnx.Module` instance, or an apply(params, inputs) function",
            f"{type(model).__module__}.{type(model).__qualname__}",
            "Instantiate the module (e.g. `MyNet()`), not its class, or use a zoo name.",
        )
    _check_float_params(params)

    def outputs_of(params: PyTree, state: PyTree, inputs: PyTree) -> Any:
        return apply(params, state, inputs)[0]

    try:
        with tracing():
            outputs = jax.eval_shape(outputs_of, params, state, inputs)
    except Exception as exc:  # noqa: BLE001 - reported as bad input, chained
        raise _trace_error(exc, inputs) from exc

    loss_fn = loss if loss is not None else softmax_cross_entropy
    if targets is None:
        out = jax.tree.leaves(outputs)[0]
        if loss is None:
            targets = jax.ShapeDtypeStruct(out.shape[:-1], jnp.int32)
        else:
            targets = jax.ShapeDtypeStruct(out.shape, out.dtype)
    targets = _abstract(targets)

    def forward(params: PyTree, state: PyTree, inputs: PyTree, targets: PyTree) -> Any:
        outputs, new_state = apply(params, state, inputs)
        return loss_fn(outputs, targets), new_state

    def grad(params: PyTree, state: PyTree, inputs: PyTree, targets: PyTree) -> Any:
        (value, new_state), grads = jax.value_and_grad(forward, has_aux=True)(
            params, state, inputs, targets
        )
        return value, grads, new_state

    def update(grads: PyTree, opt_state: PyTree, params: PyTree) -> Any:
        updates, opt_state = transform.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def train_step(
        params: PyTree, opt_state: PyTree, state: PyTree, inputs: PyTree, targets: PyTree
    ) -> Any:
        value, grads, new_state = grad(params, state, inputs, targets)
        new_params, opt_state = update(grads, opt_state, params)
        return new_params, opt_state, new_state, value

    try:
        with tracing():
            loss_shape = jax.eval_shape(forward, params, state, inputs, targets)[0]
    except Exception as exc:  # noqa: BLE001
        raise InputError(
            "a loss(outputs, targets) that accepts the model's outputs",
            f"a failure: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}",
            "Check the loss function and the targets' shape.",
        ) from exc
    if getattr(loss_shape, "shape", None) != ():
        raise InputError(
            "a loss that returns a scalar",
            f"an output of shape {getattr(loss_shape, 'shape', type(loss_shape).__name__)}",
            "Reduce the loss, e.g. with `.mean()`.",
        )
    opt_state = jax.eval_shape(transform.init, params)
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
        param_paths=_module_param_counts(params),
        tracing=tracing,
    )
    return workload, optimizer_name
