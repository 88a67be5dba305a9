"""How a model is called: Linen modules, NNX modules and apply functions as one
``apply(params, state, inputs, extras) -> (outputs, new_state)``.

`prepare` traces the model once, abstractly, for its parameters, state and
outputs; a `CallPlan` records how to call it and grows as the model reveals
what it needs (`learn`: a collective axis name to bind, an RNG stream to supply).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from xla_cost.errors import InputError
from xla_cost.step.checks import check_arrays
from xla_cost.step.nnx_scopes import bridged_name_scopes, nnx_name_scopes, tagged
from xla_cost.step.trees import PyTree, abstract, is_array, loaded_nnx

if TYPE_CHECKING:  # an NNX model comes with flax.nnx imported: `_nnx_apply` imports it then
    from flax import nnx

__all__ = ["RNG_KEY", "MAX_RESOLVE", "CallPlan", "split_call_kwargs", "prepare", "learn", "method_of", "bind_axes",
           "unbound_axis", "concrete_arguments"]

# Keyword arguments of ``__call__`` that select training mode, and their value.
_TRAIN_KWARGS = {
    "train": True,
    "training": True,
    "deterministic": False,
    "use_running_average": False,
}

RNG_KEY = jax.ShapeDtypeStruct((2,), jnp.uint32)
"""The step's random key, as raw threefry key data: an argument of every phase.

Dropout masks and other random draws come from it. It is traced, not a constant:
XLA would otherwise fold the random bits of a constant key at compile time (slowly,
and without counting them), which no real training step does."""

MAX_RESOLVE = 16  # rounds of binding axis names and RNG streams the model asks for

_UNBOUND_AXIS = re.compile(r"unbound axis name:?\s*([A-Za-z_][\w.\-]*?)\.?(?:\s|$)")

_MISSING_RNG = re.compile(r'needs PRNG for "([^"]+)"')


@dataclasses.dataclass
class CallPlan:
    """How to call the model; grows as the model reveals what it needs."""

    method: str | Callable[..., Any] | None
    static: dict[str, Any]
    axis_names: list[str]
    rng_names: list[str]
    detected_axes: list[str] = dataclasses.field(default_factory=list)
    detected_rngs: list[str] = dataclasses.field(default_factory=list)
    module_paths: tuple[str, ...] = ()


def train_kwargs(fn: Callable[..., Any]) -> dict[str, Any]:
    names = signature_names(fn)
    return {k: v for k, v in _TRAIN_KWARGS.items() if k in names}


def signature_names(fn: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def split_call_kwargs(call_kwargs: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
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
        if leaves and all(is_array(x) for x in leaves):
            traced[key] = abstract(value)
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


def bind_axes(fn: Callable[..., Any], axis_names: Sequence[str]) -> Callable[..., Any]:
    """``fn`` run as one device of a data-parallel group over ``axis_names``.

    The model's collectives (``psum``/``pmean`` of a BatchNorm with ``axis_name``)
    need their axis bound: ``fn`` runs under ``jax.shard_map`` on a mesh of the
    first device, every named axis of size 1. Arguments are replicated, so the
    gradient of a parameter is all-reduced over the group as in data parallelism.
    """
    if not axis_names:
        return fn
    devices = np.array(jax.devices()[:1]).reshape((1,) * len(axis_names))
    mesh = Mesh(devices, tuple(axis_names))

    def bound(*args: Any) -> Any:
        return jax.shard_map(
            fn, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec(), check_vma=False
        )(*args)

    return bound


def method_of(model: Any, method: str | Callable[..., Any] | None) -> Callable[..., Any]:
    """The function the model is called through (for its signature)."""
    if method is None:
        return model.__call__
    if isinstance(method, str):
        target = getattr(model, method, None)
        if not callable(target):
            raise _no_method(model, method)
        return target
    if callable(method):
        return method
    raise InputError(
        "method= as a method name or a function", type(method).__name__, "Pass e.g. method='encode'."
    )


def _no_method(model: Any, method: str) -> InputError:
    """``method`` missing from ``model``: the methods its own classes define
    (Flax's base classes' left out), or that it has only ``__call__``."""
    import difflib

    methods: list[str] = []
    for klass in type(model).__mro__:
        if klass is object or klass.__module__.split(".")[0] in ("flax", "builtins"):
            continue
        methods += [n for n, v in vars(klass).items() if inspect.isfunction(v) and n not in methods
                    and (n == "__call__" or not n.startswith("_")) and n != "setup"]
    name, others = type(model).__name__, sorted(n for n in methods if n != "__call__")
    if not others:
        return InputError(f"method= (--method) naming a method of {name}, which has only __call__", repr(method),
                          "Drop method= (--method): __call__ is what is called without it.")
    close = difflib.get_close_matches(method, others, 1)
    return InputError(f"method= (--method) naming a method of {name}: {', '.join(others)}", repr(method),
                      f"Did you mean method={close[0]!r}?" if close else
                      f"Pass one of those, e.g. method={others[0]!r}, or none to call __call__.")


def _linen_apply(
    model: nn.Module, inputs: PyTree, extras: PyTree, plan: CallPlan
) -> tuple[Callable[..., Any], PyTree, PyTree, PyTree]:
    """(apply, params, state, abstract outputs) of a Linen module, from one init trace."""
    target = method_of(model, plan.method)
    kwargs = {**train_kwargs(target), **plan.static}
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
    # A module applied on variables of the call's own making inside another's call (Hugging Face's tied
    # head: `self.lm_head.apply({"params": {"kernel": wte.T}}, x)`) runs in a root scope of its own, its
    # path empty; its name stack is the caller's with its name below it, and so is its path here.
    roots: dict[int, tuple[Any, str]] = {}  # id of a root scope -> (that scope, kept alive; its path)
    calling: list[str] = []  # the paths of the calls under way, innermost last

    def record(next_fun: Callable[..., Any], args: Any, kwargs: Any, context: Any) -> Any:
        module = context.module
        root = getattr(getattr(module, "scope", None), "root", None)
        if id(root) not in roots:  # the model's own root first (no call under way), then any nested apply's
            where = "/".join(p for p in (*calling[-1:], module.name or type(module).__name__) if p)
            roots[id(root)] = (root, where if calling and not module.path else "")
        here = "/".join(p for p in (roots[id(root)][1], *(str(p) for p in module.path)) if p)
        paths.add(here)
        calling.append(here)
        try:
            return next_fun(*args, **kwargs)
        finally:
            calling.pop()

    with nn.intercept_methods(record):  # every module the call reaches, parameters or not
        outputs, variables = jax.eval_shape(bind_axes(init, plan.axis_names), inputs, extras)
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
    fn: Callable[..., Any], params: PyTree, plan: CallPlan
) -> tuple[Callable[..., Any], PyTree, PyTree]:
    check_arrays(params, "params as a pytree of arrays or `jax.ShapeDtypeStruct`",
                 "Pass e.g. params=jax.eval_shape(init, key, inputs).",
                 f"{type(params).__name__} with {len(jax.tree.leaves(params))} array leaves")
    static = plan.static

    def apply(params: PyTree, state: PyTree, inputs: PyTree, extras: PyTree) -> tuple[Any, PyTree]:
        return fn(params, inputs, **static, **extras["kwargs"]), state

    return apply, abstract(params), {}


def _nnx_apply(
    model: nnx.Module, plan: CallPlan
) -> tuple[Callable[..., Any], PyTree, PyTree, Callable[[], Any]]:
    from flax import nnx  # noqa: PLC0415 - loaded already: the model is one of its modules

    with tagged(model):  # every copy merged from the graph definition knows its modules' paths
        graphdef, params, state = nnx.split(model, nnx.Param, ...)
    params, state = abstract(params), abstract(state)
    plan.module_paths = tuple(
        sorted("/".join(str(p) for p in path) for path, _ in nnx.iter_modules(model) if path)
    )
    signature = signature_names(method_of(model, plan.method))
    kwargs = {**train_kwargs(method_of(model, plan.method)), **plan.static}
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
        outputs = target(inputs, **call)
        _, _, new_state = nnx.split(module, nnx.Param, ...)
        return outputs, new_state

    return apply, params, state, lambda: nnx_name_scopes(model)


def prepare(
    model: Any, params: PyTree | None, inputs: PyTree, extras: PyTree, plan: CallPlan
) -> tuple[str, str, Callable[..., Any], PyTree, PyTree, Callable[[], Any], Any]:
    """(kind, root name, apply, params, state, tracing, raw outputs) for ``plan``."""
    tracing: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    if isinstance(model, nn.Module):
        kind, root_name = "linen", type(model).__name__
        apply, params, state, outputs = _linen_apply(model, inputs, extras, plan)
        tracing = bridged_name_scopes  # NNX modules it holds through nnx.bridge.ToLinen
    elif (nnx := loaded_nnx()) is not None and isinstance(model, nnx.Module):
        kind, root_name = "nnx", type(model).__name__
        apply, params, state, tracing = _nnx_apply(model, plan)
    else:
        kind, root_name = "function", getattr(model, "__name__", type(model).__name__)
        apply, params, state = _function_apply(model, params, plan)
    apply = bind_axes(apply, plan.axis_names)
    if not isinstance(model, nn.Module):  # Linen's init gave them already
        with tracing():
            outputs = jax.eval_shape(lambda *a: apply(*a)[0], params, state, inputs, extras)
    return kind, root_name, apply, params, state, tracing, outputs


def unbound_axis(exc: BaseException) -> str | None:
    """The collective axis name ``exc`` (or an exception it was raised from)
    says is unbound (``lax.pmean(x, "batch")`` outside ``pmap``), or None."""
    for cause in _cause_chain(exc):
        match = _UNBOUND_AXIS.search(str(cause))
        if isinstance(cause, NameError) and match:
            return match.group(1)
    return None


_CONCRETE = re.compile(r"depends on the values? of the arguments? (.+?)\.(?:$|\n)", re.M)
"""jax's line naming the arguments a value the trace needs concrete comes from (a shape, a
Python ``if``, ``range(n)``): ``... because it depends on the value of the argument latents.``"""


def concrete_arguments(exc: BaseException) -> list[str]:
    """The arguments ``exc`` (or an exception it was raised from) says the trace needed
    concrete, as jax names them (``latents``, ``config['size']``); [] where it names none."""
    for cause in _cause_chain(exc):
        match = _CONCRETE.search(str(cause))
        if match:
            return [n.strip() for n in re.split(r", and |, | and ", match.group(1)) if n.strip()]
    return []


def _cause_chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def learn(exc: BaseException, plan: CallPlan) -> bool:
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
