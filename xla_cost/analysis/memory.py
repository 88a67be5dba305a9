"""Training-step memory per device: what is held, and what XLA's compiled step peaks at.

The parts, from the abstract trees and the jaxpr (nothing is allocated):

* parameters, gradients (the parameters' shapes and dtypes; none for those an optimizer freezes), optimizer state
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
its peak ``arguments + outputs + temporaries - aliased``.

That peak is explained buffer by buffer: the compiled schedule is replayed
(`xla_cost.compiled.liveness`) and what is live when the temporaries peak is sorted into
the same parts (`PEAK_PARTS`), by where XLA says each buffer came from (the
``op_name`` it kept from the jaxpr):

* the arguments, by the argument they are (parameters, optimizer state, model
  state, inputs);
* saved activations: buffers the forward pass made that are still held;
* gradients: buffers the backward pass made with a parameter's shape;
* workspace: the rest (the backward pass's cotangents and temporaries, the
  update's, and buffers XLA made without a source: layout copies, the
  parameters' copies a donated step makes, index tensors);
* outputs: what the step returns outside the donated buffers: the loss and metrics where the new
  state is written into the donated arguments, every result (the new state too) where nothing is
  donated. Beside the program's parts it is the returned arrays' bytes less XLA's aliased ones
  (`MemoryBreakdown.outputs`: XLA's ``outputs`` also counts the output tuple's index table).

The two views differ where XLA departs from the program: it recomputes
elementwise residuals inside backward fusions (fewer saved activations than the
jaxpr keeps), holds only the gradients made so far at its peak, and adds
workspace the jaxpr does not name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
from jax.extend.core import Literal
from jax.sharding import PartitionSpec
import numpy as np

from xla_cost.compiled.compiler_log import out_of_memory
from xla_cost.compiled.liveness import LiveBuffer, LivenessProfile
from xla_cost.errors import InputError
from xla_cost.parallel.sharding import axes_of, per_device_bytes
from xla_cost.present.markdown import markdown_table
from xla_cost.present.units import size as bytes_text
from xla_cost.step import phases
from xla_cost.step.trees import nbytes, tree_bytes
from xla_cost.count.attribution import (
    REMAINDER, classify_pass, module_path, module_tree, op_name_path, owner, with_ancestors,
)
from xla_cost.count.primitives import VIEWS
from xla_cost.count.rules import ragged_groups

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MemoryBreakdown", "TargetMemory", "saved_activations", "dense_ragged_note", "memory_breakdown", "peak_parts", "target_memory",
           "too_big_for"]

PARTS: tuple[str, ...] = (
    "parameters", "gradients", "optimizer_state", "model_state", "inputs", "saved_activations",
)
"""The parts of a training step's memory, in the order reports list them."""

PEAK_PARTS: tuple[str, ...] = (*PARTS, "workspace", "outputs")
"""The parts of what is live at XLA's peak (`MemoryBreakdown.at_peak`)."""

_ARGUMENT_PARTS: dict[str, str] = {
    "params": "parameters", "opt_state": "optimizer_state", "state": "model_state",
    "batch": "inputs", "targets": "inputs",
}
"""The train step's arguments (`xla_cost.step.phases`) and the part each is."""


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
      output_array_bytes: the bytes of the arrays the compiled step returns, by their own shapes
        (XLA's ``output_bytes`` less its output tuple's index table; None: not read).
      devices: devices of the mesh (1: one device).
      notes: what the figures assume.
      at_peak: what is live when XLA's temporaries peak, by `PEAK_PARTS`
        (the compiled schedule replayed; empty: not replayed).
      held_by_layer: the saved activations live at that point, by module path.
      largest_workspace: the largest workspace buffers live at that point
        (`xla_cost.compiled.liveness.LiveBuffer`), largest first.
      peak_instruction: the HLO instruction running at that point.
      rematerialized: instructions XLA's rematerialization pass recomputed to
        bring the peak under the device's memory (0: none; None: not read).
      remat_short_of: ``(limit, reached)`` bytes when that pass said it could
        not reach its limit: the compiler's own word that the step does not
        fit, whatever ``peak`` says (`xla_cost.runs.fit` judges it so); None:
        it did not say so.
      unsized_scratch: an allowance for the cuDNN convolution workspaces a
        deviceless GPU compile leaves out of ``peak``
        (`xla_cost.compiled.hlo.unsized_conv_scratch`); 0: none left out.
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
    output_array_bytes: int | None = None
    devices: int = 1
    notes: tuple[str, ...] = ()
    at_peak: Mapping[str, int] = dataclasses.field(default_factory=dict)
    held_by_layer: Mapping[str, int] = dataclasses.field(default_factory=dict)
    largest_workspace: tuple[Any, ...] = ()
    peak_instruction: str = ""
    rematerialized: int | None = None
    remat_short_of: tuple[int, int] | None = None
    unsized_scratch: int = 0

    @property
    def parts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in PARTS}

    @property
    def outputs(self) -> int | None:
        """What the step returns outside the donated buffers, the returned arrays' bytes less XLA's
        aliased ones (not XLA's ``outputs``, which counts the output tuple's index table, 8 bytes an
        array: where the program's arrays are not read, those): the loss where the new state is written
        into the donated arguments, the new state with it where nothing is donated (None: XLA's figures
        unknown)."""
        returned = self.output_array_bytes if self.output_array_bytes is not None else self.output_bytes
        return None if returned is None else max(returned - (self.alias_bytes or 0), 0)

    @property
    def donated(self) -> bool | None:
        """Whether any result is written into a donated argument's buffer (None: unknown)."""
        return None if self.alias_bytes is None else self.alias_bytes > 0

    @property
    def parts_total(self) -> int:
        """The sum of the parts, and the `outputs` where XLA's figures give them."""
        return sum(self.parts.values()) + (self.outputs or 0)

    @property
    def peak(self) -> int | None:
        """XLA's peak of the compiled step: arguments + outputs + temporaries - aliased."""
        if None in (self.argument_bytes, self.output_bytes, self.temp_bytes):
            return None
        return self.argument_bytes + self.output_bytes + self.temp_bytes - (self.alias_bytes or 0)

    @property
    def needed(self) -> int | None:
        """What a device needs to run the step: XLA's `peak` plus `unsized_scratch`
        (the workspaces of convolutions a deviceless compile could not size)."""
        return None if self.peak is None else self.peak + self.unsized_scratch

    @property
    def gap(self) -> int | None:
        """XLA's peak minus the parts (negative when XLA holds less than the
        program's parts at once); `at_peak` says what makes it up."""
        return None if self.peak is None else self.peak - self.parts_total

    @property
    def workspace(self) -> int | None:
        """XLA's workspace live at its peak (None: the schedule not replayed)."""
        return self.at_peak.get("workspace") if self.at_peak else None

    @property
    def at_peak_total(self) -> int | None:
        """The sum of `at_peak`: the replay's peak, beside XLA's `peak`."""
        return sum(self.at_peak.values()) if self.at_peak else None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.parts, "outputs": self.outputs, "saved_by_layer": dict(self.saved_by_layer),
            "parts_total": self.parts_total,
            "peak": self.peak, "gap": self.gap,
            "xla": {"argument_bytes": self.argument_bytes, "output_bytes": self.output_bytes,
                    "temp_bytes": self.temp_bytes, "alias_bytes": self.alias_bytes,
                    "output_array_bytes": self.output_array_bytes},
            "at_peak": dict(self.at_peak), "at_peak_total": self.at_peak_total,
            "held_by_layer": dict(self.held_by_layer),
            "largest_workspace": [b.to_dict() for b in self.largest_workspace],
            "peak_instruction": self.peak_instruction,
            "rematerialized": self.rematerialized,
            "remat_short_of": None if self.remat_short_of is None else list(self.remat_short_of),
            "unsized_scratch": self.unsized_scratch, "needed": self.needed,
            "devices": self.devices, "notes": list(self.notes),
        }

    def to_frame(self) -> pd.DataFrame:
        """One row per part (`PEAK_PARTS`), then ``sum`` and ``xla_peak``, raw
        bytes: ``program_bytes`` as the program holds them (None for
        ``workspace``, which only XLA's schedule has; ``outputs`` the returned arrays less the aliased) and
        ``at_peak_bytes`` live at XLA's peak (None: the schedule not replayed)."""
        import pandas as pd

        return pd.DataFrame(self._rows(), columns=["part", "program_bytes", "at_peak_bytes"]).astype(
            {"program_bytes": "Int64", "at_peak_bytes": "Int64"})

    def _rows(self) -> list[tuple[str, int | None, int | None]]:
        at_peak = self.at_peak or {}
        program = {**self.parts, "outputs": self.outputs}
        return [*((part, program.get(part), at_peak.get(part)) for part in PEAK_PARTS),
                ("sum", self.parts_total, self.at_peak_total), ("xla_peak", self.peak, self.peak)]

    def _repr_markdown_(self) -> str:
        """How a notebook (IPython's display) shows the breakdown: `to_frame`
        as a table, each figure in its own unit, then the notes."""
        import pandas as pd

        where = "one device" if self.devices == 1 else f"each of {self.devices} devices"
        shown = pd.DataFrame([(part, "—" if part == "workspace" else bytes_text(program),
                               bytes_text(peak))
                              for part, program, peak in self._rows()],
                             columns=["part", "program", "at XLA's peak"]).set_index("part")
        notes = "".join(f"- {note}\n" for note in self.notes)
        return f"memory of the train step on {where}\n\n{markdown_table(shown)}\n" + (f"\n{notes}" if notes else "")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryBreakdown:
        xla = data.get("xla") or {}
        return cls(
            **{name: int(data[name]) for name in PARTS},
            saved_by_layer={str(k): int(v) for k, v in (data.get("saved_by_layer") or {}).items()},
            argument_bytes=xla.get("argument_bytes"), output_bytes=xla.get("output_bytes"),
            temp_bytes=xla.get("temp_bytes"), alias_bytes=xla.get("alias_bytes"),
            output_array_bytes=xla.get("output_array_bytes"),
            devices=int(data.get("devices", 1)), notes=tuple(data.get("notes", ())),
            at_peak={str(k): int(v) for k, v in (data.get("at_peak") or {}).items()},
            held_by_layer={str(k): int(v) for k, v in (data.get("held_by_layer") or {}).items()},
            largest_workspace=tuple(LiveBuffer.from_dict(b) for b in data.get("largest_workspace", ())),
            peak_instruction=str(data.get("peak_instruction", "")),
            rematerialized=data.get("rematerialized"),
            remat_short_of=None if data.get("remat_short_of") is None else
            (int(data["remat_short_of"][0]), int(data["remat_short_of"][1])),
            unsized_scratch=int(data.get("unsized_scratch") or 0),
        )


def _stack_of(eqn: Any, var: Any) -> str:
    """The name stack of the operation that made ``var``: for an output of a loop
    (a scanned layer's stacked activations), the operation inside its body that
    made the matching output, under the loop's own stack; where the body passes
    one of its inputs out unchanged (a remat'd scanned block's input, stacked for
    the backward pass to recompute from), the first operation that reads it."""
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
    if maker is not None:
        stack = _stack_of(maker, target)
    else:  # an input passed through: the scope that holds all its readers (the block, not one of its layers)
        readers = [str(e.source_info.name_stack).split("/") for e in inner.eqns if any(v is target for v in e.invars)]
        if not readers:
            return outer
        common = readers[0]
        for parts in readers[1:]:
            common = common[:next((i for i, (a, b) in enumerate(zip(common, parts)) if a != b),
                                  min(len(common), len(parts)))]
        stack = "/".join(common)
    return f"{outer}/{stack}" if outer and stack else (stack or outer)


def _layer(path: str, modules: Sequence[str]) -> str:
    """The row of module ``path`` among ``modules`` (parameter modules and their
    ancestors, `xla_cost.count.attribution.with_ancestors`), as per-layer FLOP
    rows are; without modules (an apply function), the path itself."""
    return owner(path, modules) if modules else (path or REMAINDER)


_ARGUMENT_INDEX = re.compile(r"^args\[(\d+)\]")
_DIMS = re.compile(r"\[([\d,]*)\]")
def _dims(shape: str) -> tuple[int, ...]:
    match = _DIMS.search(shape)
    return tuple(int(d) for d in match.group(1).split(",") if d) if match else ()


def peak_parts(
    profile: LivenessProfile, arguments: Sequence[str], parameter_shapes: Sequence[Sequence[int]], *,
    root: str | Sequence[str] = "", modules: Sequence[str] = (), largest: int = 8,
) -> tuple[dict[str, int], dict[str, int], tuple[LiveBuffer, ...], tuple[str, ...]]:
    """What is live at a compiled step's peak, by `PEAK_PARTS` (see the module docstring).

    Args:
      profile: the step's replayed schedule (`xla_cost.compiled.liveness.simulate`).
      arguments: the step's argument names (``params``, ``opt_state``, ...),
        in order: an entry parameter's ``op_name`` ``args[i]...`` is argument i.
      parameter_shapes: the parameters' shapes per device; a backward buffer
        of one of them (its dimensions in any order) is a gradient.
      root, modules: as for `saved_activations` (the held activations' layers).
      largest: how many of the largest workspace buffers to return.

    Returns:
      ``(bytes by part, saved activations by layer, largest workspace
      buffers, notes)``.
    """
    roots = {root} if isinstance(root, str) else set(root)
    containing = with_ancestors(modules)
    tree = module_tree(modules)
    parts = dict.fromkeys(PEAK_PARTS, 0)
    notes = []
    unmapped = 0
    for buffer in profile.arguments:
        match = _ARGUMENT_INDEX.match(buffer.op_name)
        index = int(match.group(1)) if match else -1
        part = _ARGUMENT_PARTS.get(arguments[index]) if 0 <= index < len(arguments) else None
        if part is None:
            unmapped += buffer.nbytes
            part = "inputs"
        parts[part] += buffer.nbytes
    if unmapped:
        notes.append(f"{unmapped:,} argument bytes at the peak not named by XLA's metadata: counted as inputs")
    parts["outputs"] = sum(buffer.nbytes for buffer in profile.outputs)
    gradient_shapes = {tuple(sorted(shape)) for shape in parameter_shapes}
    held: dict[str, int] = {}
    workspace: list[LiveBuffer] = []
    for buffer in profile.at_peak:
        source = classify_pass(buffer.op_name)
        if source == "forward":
            parts["saved_activations"] += buffer.nbytes
            layer = _layer(op_name_path(buffer.op_name, tuple(roots), tree), containing)
            held[layer] = held.get(layer, 0) + buffer.nbytes
        elif source == "backward" and tuple(sorted(_dims(buffer.shape))) in gradient_shapes:
            parts["gradients"] += buffer.nbytes
        else:
            parts["workspace"] += buffer.nbytes
            workspace.append(buffer)
    notes.extend(profile.notes)
    ordered = dict(sorted(held.items(), key=lambda kv: (-kv[1], kv[0])))
    return parts, ordered, tuple(workspace[:largest]), tuple(notes)


def saved_activations(
    forward: Any, params: Any, rest: Sequence[Any], *, root: str | Sequence[str] = "",
    modules: Sequence[str] = (), context: Any = None, read: Any = None,
) -> tuple[dict[str, int], int, int]:
    """What the backward pass of ``forward`` keeps, by layer.

    Args:
      forward: ``forward(params, *rest) -> (loss, aux)``, differentiated in ``params``.
      params, rest: abstract trees (``jax.ShapeDtypeStruct`` leaves).
      root: the model's class name(s), stripped from name stacks.
      modules: module paths that hold parameters (rows are the longest that
        contains a residual's name stack, as per-layer FLOP rows are).
      context: a context manager to trace under (a workload's ``tracing``).
      read: a tree like ``params`` of whether each parameter's gradient is computed (a workload's
        ``read_gradients``: an optimizer that freezes some reads none of theirs); None: every one.
        Only those are differentiated, the others are constants: the residuals are those of the
        backward the ``grad`` program computes (a frozen layer before every trained one saves
        nothing; a frozen layer after one saves what its input's cotangent needs).

    Returns:
      ``(bytes by layer, residual bytes that are parameters, residual bytes
      that are other arguments)``; the first excludes the other two.
    """
    with context if context is not None else contextlib.nullcontext():
        closed = _linearized(forward, params, rest, read)
    return _residuals(closed, params, root, modules)


def _linearized(forward: Any, params: Any, rest: Sequence[Any], read: Any = None) -> Any:
    """The closed jaxpr of ``forward``'s VJP function (its outputs: the residuals the backward pass reads),
    differentiated in the parameters ``read`` marks (`saved_activations`)."""
    def linearized(p: Any, *r: Any) -> Any:
        # The other arguments are rebuilt inside the differentiated function, as jit rebuilds them
        # inside its trace: a mutable object among them (an NNX KV cache passed as a call argument)
        # is then one of this trace level's, which the model may update (Flax refuses a write to a
        # Variable of the outer trace: TraceContextError).
        leaves, tree = jax.tree_util.tree_flatten(r)
        # Only the parameters whose gradient is computed are differentiated; the frozen ones are
        # closed over (this trace's arguments still: a frozen parameter the backward reads is a
        # parameter's residual, counted there).
        p_leaves, p_tree = jax.tree_util.tree_flatten(p)

        def of_trained(trained: list[Any]) -> Any:
            given = iter(trained)
            whole = [next(given) if flag else leaf for leaf, flag in zip(p_leaves, flags)]
            return forward(jax.tree_util.tree_unflatten(p_tree, whole), *jax.tree_util.tree_unflatten(tree, leaves))

        _, vjp_fn, _ = jax.vjp(of_trained, [leaf for leaf, flag in zip(p_leaves, flags) if flag], has_aux=True)
        return vjp_fn

    n_params = len(jax.tree_util.tree_leaves(params))
    flags = [True] * n_params if read is None else [bool(flag) for flag in jax.tree_util.tree_leaves(read)]
    if len(flags) != n_params:
        raise ValueError(f"Expected a read tree of {n_params} leaves (one per parameter), got {len(flags)}; "
                         "pass the workload's read_gradients")
    return jax.make_jaxpr(linearized)(params, *rest)


def _residuals(closed: Any, params: Any, root: str | Sequence[str], modules: Sequence[str],
               ) -> tuple[dict[str, int], int, int]:
    """`saved_activations` of the VJP's closed jaxpr (`_linearized`)."""
    jaxpr = closed.jaxpr
    n_params = len(jax.tree_util.tree_leaves(params))
    param_vars = {id(v) for v in jaxpr.invars[:n_params]}
    other_vars = {id(v) for v in jaxpr.invars[n_params:]} | {id(v) for v in jaxpr.constvars}
    made_by = {id(v): eqn for eqn in jaxpr.eqns for v in eqn.outvars}
    used_by: dict[int, list[Any]] = {}
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            used_by.setdefault(id(v), []).append(eqn)
    known = with_ancestors(modules)
    tree = module_tree(modules)
    by_layer: dict[str, int] = {}
    seen: set[int] = set()
    in_params = in_args = 0
    for var in jaxpr.outvars:
        if not hasattr(var, "aval") or isinstance(var, Literal) or id(var) in seen:
            continue
        seen.add(id(var))
        size = nbytes(var.aval)
        source = made_by.get(id(var))
        if (source is not None and source.primitive.name == "broadcast_in_dim"
                and (isinstance(source.invars[0], Literal) or not source.invars[0].aval.shape)):
            continue  # a broadcast scalar (ReLU's zeros): XLA fuses it, no buffer
        if source is not None and source.primitive.name in VIEWS and not isinstance(source.invars[0], Literal):
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
            layer = _layer(module_path(_stack_of(eqn, var), root, tree), known)
            if layer != REMAINDER:
                break
        by_layer[layer] = by_layer.get(layer, 0) + size
    ordered = dict(sorted(by_layer.items(), key=lambda kv: (-kv[1], kv[0])))
    return ordered, in_params, in_args


def _ragged_dots(jaxpr: Any) -> list[tuple[int, Any, Any, Any]]:
    """``(G, lhs aval, result aval, rhs aval)`` of each ``ragged_dot_general`` in ``jaxpr`` and the jaxprs it calls."""
    found = []
    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        if eqn.primitive.name == "ragged_dot_general":
            ins = [v.aval for v in eqn.invars]
            found.append((ragged_groups(ins), ins[0], eqn.outvars[0].aval, ins[1]))
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(getattr(inner, "jaxpr", inner), "eqns"):
                    found += _ragged_dots(inner)
    return found


def dense_ragged_note(jaxpr: Any, buffers: Sequence[LiveBuffer]) -> str | None:
    """A note on the buffers live at a compiled peak that are a ``ragged_dot``'s lhs or result G
    times over (their dimensions in any order), G its groups: the program computes it densely
    (XLA's CPU compiler: every row times every group's matrix), so its peak holds them. That is
    the program's real peak on its backend; a compiler that keeps the groups apart needs none of
    them. None where no such buffer is live."""
    dense, weights = {}, set()
    for groups, lhs, out, rhs in _ragged_dots(jaxpr):
        weights.add(tuple(sorted(rhs.shape)))  # a matrix of each group (its gradient): no expansion
        if groups > 1:
            for aval in (lhs, out):
                dense[tuple(sorted((groups, *aval.shape)))] = (groups, aval)
    dense = {dims: found for dims, found in dense.items() if dims not in weights}
    held = [b for b in buffers if tuple(sorted(_dims(b.shape))) in dense]
    if not held:
        return None
    groups, aval = dense[tuple(sorted(_dims(held[0].shape)))]
    shapes = ", ".join(dict.fromkeys(b.shape for b in held))
    return (f"{len(held)} buffer(s) at XLA's peak are a ragged_dot's lhs or result {groups} times over ({shapes}: "
            f"{bytes_text(sum(b.nbytes for b in held))} in all; one {aval.str_short()} is {bytes_text(nbytes(aval))}): "
            "the compiler's program expands ragged_dot densely (every row times each of the G "
            "groups' matrices, G x the lhs); this peak is that program's real one on this backend, and a compiler "
            "that keeps the groups apart (a grouped-matmul kernel) needs none of them")


def memory_breakdown(
    workload: Any, plan: Any = None, *, root: str | Sequence[str] = "", modules: Sequence[str] = (),
    compiled: Any = None, constraints: Any = None,
) -> MemoryBreakdown:
    """The per-device memory of ``workload``'s training step.

    Args:
      workload: an `xla_cost.step.workload.Workload`.
      plan: its `xla_cost.parallel.sharding.ShardingPlan` on a mesh, or None.
      root, modules: as for `saved_activations`.
      compiled: the `xla_cost.compiled.xla.CompiledPhase` of the donated train step
        (XLA's figures), or None for the parts alone.
      constraints: the plan's activation constraints (a context manager).
    """
    with _both(workload.tracing(), constraints):
        closed = _linearized(workload.forward, workload.params, (workload.state, workload.batch, workload.targets),
                             workload.read_gradients)
    by_layer, _, _ = _residuals(closed, workload.params, root, modules)
    saved = sum(by_layer.values())
    notes = []
    if plan is None:
        params = tree_bytes(workload.params)
        parts = dict(parameters=params, gradients=tree_bytes(workload.gradients()),
                     optimizer_state=tree_bytes(workload.opt_state),
                     model_state=tree_bytes(workload.state),
                     inputs=tree_bytes(workload.batch) + tree_bytes(workload.targets), saved_activations=saved)
        devices = 1
    else:
        def per(name: str, tree: Any) -> int:
            return per_device_bytes(tree, plan.specs[name], plan.sizes)[1]

        split = plan.batch_split
        params = per("params", workload.params)
        parts = dict(parameters=params, gradients=per("grads", workload.gradients()),
                     optimizer_state=per("opt_state", workload.opt_state), model_state=per("state", workload.state),
                     inputs=-(-(tree_bytes(workload.batch) + tree_bytes(workload.targets)) // split),
                     saved_activations=-(-saved // split))
        devices = plan.devices
        notes.append(
            f"saved activations per device: the step's {saved:,} bytes over the {split} devices the batch is "
            "split over (tensor-parallel axes split some activations further; not counted)"
        )
    memory = compiled.memory if compiled is not None else None
    if memory is not None and memory.unsized_scratch:
        notes.append(
            f"cuDNN convolutions compiled without their workspaces (a deviceless compile cannot autotune): "
            f"{bytes_text(memory.unsized_scratch)} allowed for them besides XLA's peak, the largest "
            "convolution's operands and result (`needed`)")
    replay: dict[str, Any] = {}
    profile = getattr(compiled, "liveness", None)
    if profile is not None:
        shapes = _local_shapes(workload.params, None if plan is None else plan.specs["params"],
                               {} if plan is None else plan.sizes)
        at_peak, held, largest, replay_notes = peak_parts(
            profile, phases.phase("train_step").arguments, shapes, root=root, modules=modules,
        )
        replay = dict(at_peak=at_peak, held_by_layer=held, largest_workspace=largest,
                      peak_instruction=profile.peak_instruction)
        notes.extend(replay_notes)
        notes.extend(filter(None, [dense_ragged_note(closed.jaxpr, profile.at_peak)]))
    elif compiled is not None and getattr(compiled, "liveness_error", ""):
        notes.append(f"XLA's peak not explained buffer by buffer: {compiled.liveness_error}")
    return MemoryBreakdown(
        **parts, saved_by_layer=by_layer,
        argument_bytes=None if memory is None else memory.argument_bytes,
        output_bytes=None if memory is None else memory.output_bytes,
        temp_bytes=None if memory is None else memory.temp_bytes,
        alias_bytes=None if memory is None else memory.alias_bytes,
        output_array_bytes=None if memory is None else memory.output_array_bytes,
        rematerialized=None if memory is None else memory.rematerialized,
        remat_short_of=None if memory is None else memory.remat_short_of,
        unsized_scratch=0 if memory is None else memory.unsized_scratch,
        devices=devices, notes=tuple(notes), **replay,
    )


DONATED = "donated_train_step"
"""`TargetMemory`'s name for the train step compiled with its parameters and
optimizer state donated (``memory=True``: `MemoryBreakdown`), beside the phases'."""


_AS_COMPILED = "the step as compiled"
"""`TargetMemory.peak_of` of a user's own step (`xla_cost.analyze_step`), judged as it is compiled."""


@dataclasses.dataclass(frozen=True)
class TargetMemory:
    """Whether a step compiled for a target fits in one of its devices, and
    what the target's compiler recomputed to make its programs fit.

    Attributes:
      target: the compile target (``h100``, ``tpu-v5e:2x2``).
      title: its device as reports name it (``NVIDIA H100 SXM``).
      capacity: one device's memory in bytes (a GPU's less the CUDA context:
        `xla_cost.timemodel.devices.allocatable`).
      usable: what a program may use: ``capacity`` x the share its runtime
        gives it (a GPU's JAX allocator 0.75, a TPU's 1), the limit
        `xla_cost.runs.fit` searches against.
      peak: the bytes the step is judged by: with ``memory=True`` the donated
        train step's `MemoryBreakdown.needed`; else the largest peak of the
        forward and grad programs, which is less than the step's (the
        optimizer state is not among their arguments); None: unknown.
      peak_of: the program ``peak`` is of (``train_step (donated)``, ``grad``).
      exact: whether ``peak`` is the step's own (the donated train step's)
        rather than a lower bound of it.
      rematerialized: instructions the target's compiler recomputed in each
        program that recomputed any (XLA's rematerialization: ``*.remat``
        clones in the optimized module); their FLOP are in that program's.
      remat_short_of: ``(limit, reached)`` bytes where the donated train
        step's rematerialization could not reach the compiler's own limit (its
        log; the phase programs compile at once, and their logs mix).
      flops: ``(compiled, jaxpr)`` FLOP by phase, for the notes (not in `to_dict`
        and not compared: the report's own figures, read back from a stored report
        as its phases).
    """

    target: str
    title: str
    capacity: float
    usable: float
    peak: int | None
    peak_of: str = ""
    exact: bool = False
    rematerialized: Mapping[str, int] = dataclasses.field(default_factory=dict)
    remat_short_of: Mapping[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    flops: Mapping[str, tuple[int | None, int | None]] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def fits(self) -> bool | None:
        """False: the step needs more than ``usable``; True: its exact peak is
        within it; None: unknown (no peak, or only a lower bound within it)."""
        if self.peak is None:
            return None
        if self.peak > self.usable:
            return False
        return True if self.exact else None

    def notes(self) -> list[str]:
        """What a report says: that the step does not fit, and which programs' figures hold recomputation."""
        said: list[str] = []
        if self.fits is False:
            said.append(
                f"the step does not fit in the {self.title}'s memory ({self.target}): {self.peak_of} peaks at "
                f"{bytes_text(self.peak)}"
                + ("" if self.exact else " (the step needs more: the optimizer state is not among its arguments)")
                + f" against {bytes_text(self.usable)} usable ({self.usable / self.capacity:g} of "
                f"{bytes_text(self.capacity)}), so on the device it runs out of memory; "
                + ("a smaller batch (from --args) or a sharded step may fit" if self.peak_of.startswith(_AS_COMPILED)
                   else f"`xla-cost fit MODEL --target {self.target}` (max_batch_size) finds the largest batch "
                        "that fits"))
        for program, count in self.rematerialized.items():
            shown = "backward" if program == "grad" and "backward" in self.flops else program
            compiled, counted = self.flops.get(shown, (None, None))
            short = self.remat_short_of.get(program)
            said.append(
                f"{'the donated train step (memory=True, --memory)' if program == DONATED else program}: the {self.title}'s compiler recomputed {count:,} instruction{'s' if count != 1 else ''} "
                "to bring the program toward its memory (XLA's rematerialization: `.remat` clones in the optimized "
                "module), and its figures include them"
                + (" (backward = grad - forward, and train_step, too)" if program == "grad" else "")
                + (f": {shown} {compiled:,} FLOP against the jaxpr's {counted:,} ({compiled / counted:.2f}x)"
                   if compiled is not None and counted else "")
                + (f"; it still fell short of the compiler's own limit ({bytes_text(short[1])} reached, "
                   f"{bytes_text(short[0])} sought)" if short is not None else ""))
        for program, short in self.remat_short_of.items():
            if program not in self.rematerialized:
                said.append(f"{'the donated train step (memory=True, --memory)' if program == DONATED else program}: the {self.title}'s compiler could not rematerialize the program under its "
                            f"own limit ({bytes_text(short[1])} reached, {bytes_text(short[0])} sought)")
        return said

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target, "title": self.title, "capacity": self.capacity, "usable": self.usable,
            "peak": self.peak, "peak_of": self.peak_of, "exact": self.exact, "fits": self.fits,
            "rematerialized": dict(self.rematerialized),
            "remat_short_of": {k: list(v) for k, v in self.remat_short_of.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TargetMemory:
        return cls(
            target=str(data["target"]), title=str(data.get("title", "")), capacity=float(data["capacity"]),
            usable=float(data["usable"]), peak=None if data.get("peak") is None else int(data["peak"]),
            peak_of=str(data.get("peak_of", "")), exact=bool(data.get("exact", False)),
            rematerialized={str(k): int(v) for k, v in (data.get("rematerialized") or {}).items()},
            remat_short_of={str(k): (int(v[0]), int(v[1])) for k, v in (data.get("remat_short_of") or {}).items()},
        )


def target_memory(
    target: Any, programs: Mapping[str, Any], breakdown: MemoryBreakdown | None = None,
    flops: Mapping[str, tuple[int | None, int | None]] | None = None, step: str | None = None,
) -> TargetMemory:
    """Whether the step compiled for ``target`` fits in one of its devices (`TargetMemory`).

    Args:
      target: the `xla_cost.compiled.targets.CompileTarget` the programs were compiled for.
      programs: each compiled program's `xla_cost.compiled.xla.XlaMemory` by phase name.
      breakdown: the donated train step's memory (``memory=True``), which the
        step is then judged by; None: judged by the forward and grad programs.
      flops: ``(compiled, jaxpr)`` FLOP by phase name, for the programs that recomputed.
      step: the name in ``programs`` of a program that is the whole step as its
        user compiles it (`xla_cost.analyze_step`'s ``train_step``): judged by its
        own peak, exactly, where there is no ``breakdown``.
    """
    usable = target.memory_bytes * target.memory_fraction
    whole = None if step is None or programs.get(step) is None else programs[step].peak_bytes
    if breakdown is not None and breakdown.needed is not None:
        peak, peak_of, exact = breakdown.needed, "the donated train step", True
    elif whole is not None:
        peak, peak_of, exact = whole, f"{_AS_COMPILED} ({step})", True
    else:
        peaks = {name: m.peak_bytes for name, m in programs.items()
                 if name in ("forward", "grad") and m is not None and m.peak_bytes is not None}
        peak_of = max(peaks, key=peaks.__getitem__) if peaks else ""
        peak, exact = peaks.get(peak_of), False
        peak_of = f"its {peak_of} program" if peak_of else ""
    recomputed = {name: m.rematerialized for name, m in programs.items() if m is not None and m.rematerialized}
    short: dict[str, tuple[int, int]] = {}  # the phase programs' logs mix (they compile at once): not theirs
    if breakdown is not None and breakdown.rematerialized:
        recomputed[DONATED] = breakdown.rematerialized
    if breakdown is not None and breakdown.remat_short_of is not None:
        short[DONATED] = breakdown.remat_short_of
    return TargetMemory(
        target=target.name, title=target.title, capacity=float(target.memory_bytes), usable=float(usable),
        peak=peak, peak_of=peak_of, exact=exact, rematerialized=recomputed, remat_short_of=short,
        flops=dict(flops or {}),
    )


def too_big_for(target: Any, error: BaseException) -> InputError | None:
    """The one-line refusal of a step whose program ``target``'s compiler refused for
    want of memory (a TPU's compile-time out-of-memory,
    `xla_cost.compiled.compiler_log.out_of_memory`); None: ``error`` is another."""
    found = out_of_memory(str(error))
    if found is None:
        return None
    first, required, available = found
    figures = (f"{bytes_text(required)} of temporaries needed, {bytes_text(available)} available"
               if required is not None and available is not None else first)
    return InputError(
        f"a step whose programs fit in one {target.title}'s memory ({target.name})",
        f"its compiler refused one: {figures}",
        f"Analyse a smaller batch (`xla-cost fit MODEL --target {target.name}` finds the largest that fits) "
        "or shard the step (--mesh).")


def _local_shapes(tree: Any, specs: Any, sizes: Mapping[str, int]) -> list[tuple[int, ...]]:
    """The shapes of ``tree``'s leaves on one device under ``specs`` (None: whole)."""
    leaves = [leaf for leaf in jax.tree_util.tree_leaves(tree) if hasattr(leaf, "shape")]
    if specs is None:
        return [tuple(leaf.shape) for leaf in leaves]
    spec_leaves = jax.tree_util.tree_leaves(specs, is_leaf=lambda x: isinstance(x, PartitionSpec))
    if len(spec_leaves) == 1 and len(leaves) != 1:
        spec_leaves = spec_leaves * len(leaves)
    shapes = []
    for leaf, spec in zip(leaves, spec_leaves):
        entries = list(spec) + [None] * (len(leaf.shape) - len(spec))
        shapes.append(tuple(
            -(-dim // max(1, int(np.prod([sizes.get(a, 1) for a in axes_of(entry)])))) if entry else dim
            for dim, entry in zip(leaf.shape, entries)
        ))
    return shapes


@contextlib.contextmanager
def _both(first: Any, second: Any) -> Any:
    with first, (second if second is not None else contextlib.nullcontext()):
        yield
