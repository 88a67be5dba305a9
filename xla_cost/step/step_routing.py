"""The routed experts of the model a user's step calls (`xla_cost.step.routing`), for `xla_cost.analyze_step`.

`xla_cost.analyze` knows its model and inputs; a step only calls its model, somewhere inside. The
model it calls is found by recording the calls of a model's root ``__call__`` while the step is
traced (`recording_model_calls`: an NNX model's through `xla_cost.step.nnx_scopes`, a Linen
module's through Flax's method interceptor); the first such call names the model and its inputs,
and a model that declares its routing (`xla_cost.step.routing.ROUTING_ATTRIBUTE`) gives the step's
active parameters, capacity notes and padded modules (their capacity padding is no model FLOP) as it
gives an analysis of the model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax

from xla_cost.step.nnx_scopes import recording_root_calls
from xla_cost.step.routing import ROUTING_ATTRIBUTE, active_parameters, declared_routing, padded_modules, routing_notes

__all__ = ["ModelCall", "Padded", "recording_model_calls", "step_routing"]

ModelCall = tuple[Any, Any, tuple[Any, ...], dict[str, Any]]
"""``(kind, module, args, kwargs)`` of one call of a model's root ``__call__`` (``kind``: ``nnx`` or ``linen``)."""


@contextlib.contextmanager
def recording_model_calls() -> Iterator[list[ModelCall]]:
    """While the block traces a step (NNX modules scoped by `xla_cost.step.nnx_scopes.nnx_name_scopes`),
    the calls of a model's root ``__call__`` from outside the model, in order, into the list it yields."""
    import flax.linen as nn

    calls: list[ModelCall] = []

    def intercept(next_fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any], context: Any) -> Any:
        module = context.module
        if context.method_name == "__call__" and not isinstance(module.parent, nn.Module):  # a root module
            calls.append(("linen", module, tuple(args), dict(kwargs)))
        return next_fun(*args, **kwargs)

    with recording_root_calls() as nnx_calls, nn.intercept_methods(intercept):
        try:
            yield calls
        finally:
            calls.extend(("nnx", module, args, kwargs) for module, args, kwargs in nnx_calls)


def _abstract(tree: Any) -> Any:
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype) if hasattr(a, "shape") else a, tree)


Padded = tuple[tuple[frozenset[str], float], ...]
"""The modules of routed experts with capacity padding and the share of their work that is padding
(`xla_cost.step.routing.padded_modules`)."""


def step_routing(calls: list[ModelCall]) -> tuple[int | None, tuple[str, ...], Padded]:
    """``(active parameters, capacity notes, padded modules)`` of the first model the step called,
    where it declares its routing (`xla_cost.step.routing.declared_routing`, handed the inputs the
    step gave it); ``(None, (), ())`` where it declares none or the step called no model. The padded
    modules are the model's own paths, as an analysis of the model finds them
    (`xla_cost.step.workload.Workload.padded`): their products on empty slots are no model FLOP.

    Raises:
      InputError: the declaration is not a sequence of `Routing`, or its pattern matches no parameter.
    """
    if not calls:
        return None, (), ()
    kind, module, args, kwargs = calls[0]
    if getattr(module, ROUTING_ATTRIBUTE, None) is None or not (args or kwargs):
        return None, (), ()
    inputs = _abstract(args[0] if args else next(iter(kwargs.values())))
    routing = declared_routing(module, inputs)
    if not routing:
        return None, (), ()
    if kind == "nnx":
        from flax import nnx

        params = nnx.state(module, nnx.Param)
    else:
        params = module.variables.get("params", {})
    params = _abstract(params)
    return active_parameters(params, routing), routing_notes(routing), padded_modules(params, routing)
