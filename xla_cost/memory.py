"""Training-step memory per device: what is held, and what XLA's compiled step peaks at.

The parts, from the abstract trees and the jaxpr (nothing is allocated):

* parameters, gradients (the parameters' shapes and dtypes), optimizer state
  and model state (batch-norm statistics), per device under the mesh's specs;
* the batch (inputs and targets), split over the batch axes;
* the activations the backward pass keeps: the residuals of the linearised
  forward pass (``jax.vjp`` traced to a jaxpr; each residual is an output of
  the forward equation that made it, whose name stack gives its layer).
  Residuals that are the parameters or the batch themselves are counted there,
  not twice.

Beside them, XLA's figures for the train step compiled as one program with the
parameters and optimizer state donated (as a training loop does):
``memory_analysis()``'s arguments, outputs, temporaries and aliased bytes, and
its peak ``arguments + outputs + temporaries - aliased``. The difference
between that peak and the sum of the parts is XLA's workspace: intermediate
buffers beyond the saved activations and the gradients (the backward pass's
own temporaries, the update's), less what its buffer assignment overlaps.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

__all__ = ["MemoryBreakdown", "saved_activations", "memory_breakdown"]

PARTS: tuple[str, ...] = (
    "parameters", "gradients", "optimizer_state", "model_state", "inputs", "saved_activations",
)
"""The parts of a training step's memory, in the order reports list them."""


@dataclasses.dataclass(frozen=True)
class MemoryBreakdown:
    """The memory of one training step on one device, in bytes.

    Attributes:
      parameters, gradients, optimizer_state, model_state, inputs,
        saved_activations: the parts (see the module docstring).
      saved_by_layer: saved activations by module path (the whole step's,
        before the split over devices), largest first.
      argument_bytes, output_bytes, temp_bytes, alias_bytes: XLA's
        ``memory_analysis()`` of the donated train step (None: unknown).
      devices: devices of the mesh (1: one device).
      notes: what the figures assume.
    """

    parameters: int
    gradients: int
    optimizer_state: int
    model_state: int
    inputs: int
    saved_activations: int
    saved_by_layer: Mapping[str, int] = dataclasses.field(default_factory=dict)
    argument_bytes: int | None = None
    output_bytes: int | None = None
    temp_bytes: int | None = None
    alias_bytes: int | None = None
    devices: int = 1
    notes: tuple[str, ...] = ()

    @property
    def parts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in PARTS}

    @property
    def parts_total(self) -> int:
        """The sum of the parts."""
        return sum(self.parts.values())

    @property
    def peak(self) -> int | None:
        """XLA's peak of the compiled step: arguments + outputs + temporaries - aliased."""
        if None in (self.argument_bytes, self.output_bytes, self.temp_bytes):
            return None
        return self.argument_bytes + self.output_bytes + self.temp_bytes - (self.alias_bytes or 0)

    @property
    def workspace(self) -> int | None:
        """XLA's peak minus the parts: its other temporaries (negative when its
        buffer assignment overlaps parts that are not live at once)."""
        return None if self.peak is None else self.peak - self.parts_total

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.parts, "saved_by_layer": dict(self.saved_by_layer), "parts_total": self.parts_total,
            "peak": self.peak, "workspace": self.workspace,
            "xla": {"argument_bytes": self.argument_bytes, "output_bytes": self.output_bytes,
                    "temp_bytes": self.temp_bytes, "alias_bytes": self.alias_bytes},
            "devices": self.devices, "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryBreakdown:
        xla = data.get("xla") or {}
        return cls(
            **{name: int(data[name]) for name in PARTS},
            saved_by_layer={str(k): int(v) for k, v in (data.get("saved_by_layer") or {}).items()},
            argument_bytes=xla.get("argument_bytes"), output_bytes=xla.get("output_bytes"),
            temp_bytes=xla.get("temp_bytes"), alias_bytes=xla.get("alias_bytes"),
            devices=int(data.get("devices", 1)), notes=tuple(data.get("notes", ())),
        )


def _nbytes(aval: Any) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize


def _tree_bytes(tree: Any) -> int:
    return sum(_nbytes(leaf) for leaf in jax.tree_util.tree_leaves(tree) if hasattr(leaf, "shape"))


_VIEWS = frozenset({"reshape", "squeeze", "expand_dims", "transpose"})
"""Primitives whose result of an argument XLA does not copy: a reshape is a
bitcast of its operand's buffer, and a transposed weight is read in place by
the dot that uses it (its dimension numbers)."""


def _stack_of(eqn: Any, var: Any) -> str:
    """The name stack of the operation that made ``var``: for an output of a loop
    (a scanned layer's stacked activations), the operation inside its body that
    made the matching output, under the loop's own stack."""
    outer = str(eqn.source_info.name_stack)
    body = eqn.params.get("jaxpr") if eqn.primitive.name == "scan" else None
    if body is None:
        return outer
    inner = getattr(body, "jaxpr", body)
    index = next((i for i, v in enumerate(eqn.outvars) if v is var), None)
    if index is None or index >= len(inner.outvars):
        return outer
    target = inner.outvars[index]
    maker = next((e for e in inner.eqns if any(v is target for v in e.outvars)), None)
    if maker is None:
        return outer
    stack = _stack_of(maker, target)
    return f"{outer}/{stack}" if outer and stack else (stack or outer)


def saved_activations(
    forward: Any, params: Any, rest: Sequence[Any], *, root: str | Sequence[str] = "",
    modules: Sequence[str] = (), context: Any = None,
) -> tuple[dict[str, int], int, int]:
    """What the backward pass of ``forward`` keeps, by layer.

    Args:
      forward: ``forward(params, *rest) -> (loss, aux)``, differentiated in ``params``.
      params, rest: abstract trees (``jax.ShapeDtypeStruct`` leaves).
      root: the model's class name(s), stripped from name stacks.
      modules: module paths that hold parameters (rows are the longest that
        contains a residual's name stack, as per-layer FLOP rows are).
      context: a context manager to trace under (a workload's ``tracing``).

    Returns:
      ``(bytes by layer, residual bytes that are parameters, residual bytes
      that are other arguments)``; the first excludes the other two.
    """
    from jax.extend.core import Literal

    from xla_cost.attribution import REMAINDER, _owner, module_path

    def linearized(p: Any, *r: Any) -> Any:
        _, vjp_fn, _ = jax.vjp(lambda q: forward(q, *r), p, has_aux=True)
        return vjp_fn

    with context if context is not None else contextlib.nullcontext():
        closed = jax.make_jaxpr(linearized)(params, *rest)
    jaxpr = closed.jaxpr
    n_params = len(jax.tree_util.tree_leaves(params))
    param_vars = {id(v) for v in jaxpr.invars[:n_params]}
    other_vars = {id(v) for v in jaxpr.invars[n_params:]} | {id(v) for v in jaxpr.constvars}
    made_by = {id(v): eqn for eqn in jaxpr.eqns for v in eqn.outvars}
    used_by: dict[int, list[Any]] = {}
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            used_by.setdefault(id(v), []).append(eqn)
    known = list(modules)
    by_layer: dict[str, int] = {}
    seen: set[int] = set()
    in_params = in_args = 0
    for var in jaxpr.outvars:
        if not hasattr(var, "aval") or isinstance(var, Literal) or id(var) in seen:
            continue
        seen.add(id(var))
        size = _nbytes(var.aval)
        source = made_by.get(id(var))
        if (source is not None and source.primitive.name == "broadcast_in_dim"
                and (isinstance(source.invars[0], Literal) or not source.invars[0].aval.shape)):
            continue  # a broadcast scalar (ReLU's zeros): XLA fuses it, no buffer
        if source is not None and source.primitive.name in _VIEWS and not isinstance(source.invars[0], Literal):
            origin = id(source.invars[0])  # a reshaped argument is the argument's buffer
        else:
            origin = id(var)
        if origin in param_vars:
            in_params += size
            continue
        if origin in other_vars:
            in_args += size
            continue
        # The layer that made it; where that is no layer (an activation function
        # applied by the parent module), the first layer that reads it in the
        # forward pass (the next Dense keeps its input for its weight gradient).
        layer = REMAINDER
        for eqn in [made_by.get(id(var)), *used_by.get(id(var), ())]:
            if eqn is None:
                continue
            path = module_path(_stack_of(eqn, var), root)
            layer = _owner(path, known) if known else (path or REMAINDER)
            if layer == REMAINDER and path:
                # a module without parameters of its own (an attention core):
                # the deepest of its ancestors that holds parameter modules
                parts = path.split("/")
                ancestors = ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]
                layer = next((a for a in ancestors if any(m.startswith(a + "/") for m in known)), REMAINDER)
            if layer != REMAINDER:
                break
        by_layer[layer] = by_layer.get(layer, 0) + size
    ordered = dict(sorted(by_layer.items(), key=lambda kv: (-kv[1], kv[0])))
    return ordered, in_params, in_args


def memory_breakdown(
    workload: Any, plan: Any = None, *, root: str | Sequence[str] = "", modules: Sequence[str] = (),
    compiled: Any = None, constraints: Any = None,
) -> MemoryBreakdown:
    """The per-device memory of ``workload``'s training step.

    Args:
      workload: an `xla_cost.workload.Workload`.
      plan: its `xla_cost.sharding.ShardingPlan` on a mesh, or None.
      root, modules: as for `saved_activations`.
      compiled: the `xla_cost.xla.CompiledPhase` of the donated train step
        (XLA's figures), or None for the parts alone.
      constraints: the plan's activation constraints (a context manager).
    """
    by_layer, _, _ = saved_activations(
        workload.forward, workload.params, (workload.state, workload.batch, workload.targets),
        root=root, modules=modules, context=_both(workload.tracing(), constraints),
    )
    saved = sum(by_layer.values())
    notes = []
    if plan is None:
        params = _tree_bytes(workload.params)
        parts = dict(parameters=params, gradients=params, optimizer_state=_tree_bytes(workload.opt_state),
                     model_state=_tree_bytes(workload.state),
                     inputs=_tree_bytes(workload.batch) + _tree_bytes(workload.targets), saved_activations=saved)
        devices = 1
    else:
        from xla_cost.sharding import per_device_bytes

        def per(name: str, tree: Any) -> int:
            return per_device_bytes(tree, plan.specs[name], plan.sizes)[1]

        split = plan.batch_split
        params = per("params", workload.params)
        parts = dict(parameters=params, gradients=per("grads", workload.params),
                     optimizer_state=per("opt_state", workload.opt_state), model_state=per("state", workload.state),
                     inputs=-(-(_tree_bytes(workload.batch) + _tree_bytes(workload.targets)) // split),
                     saved_activations=-(-saved // split))
        devices = plan.devices
        notes.append(
            f"saved activations per device: the step's {saved:,} bytes over the {split} devices the batch is "
            "split over (tensor-parallel axes split some activations further; not counted)"
        )
    memory = compiled.memory if compiled is not None else None
    return MemoryBreakdown(
        **parts, saved_by_layer=by_layer,
        argument_bytes=None if memory is None else memory.argument_bytes,
        output_bytes=None if memory is None else memory.output_bytes,
        temp_bytes=None if memory is None else memory.temp_bytes,
        alias_bytes=None if memory is None else memory.alias_bytes,
        devices=devices, notes=tuple(notes),
    )


@contextlib.contextmanager
def _both(first: Any, second: Any) -> Any:
    with first, (second if second is not None else contextlib.nullcontext()):
        yield
