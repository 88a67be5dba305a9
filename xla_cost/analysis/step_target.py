"""A user's traced step lowered for a compile target (`xla_cost.compiled.targets`): every device its
program names moved to the target's (`Mover`), as its jit donates (`target_lowered`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex_core
from jax.sharding import AbstractMesh, Mesh, NamedSharding, Sharding, SingleDeviceSharding

from xla_cost.compiled import targets
from xla_cost.step.user_step import UserStep

__all__ = ["Mover", "devices_in", "target_lowered"]


def target_lowered(target: targets.CompileTarget, prepared: UserStep, call: Any, traced: Any) -> Any:
    """The step lowered for ``target``: its traced program (the jaxpr counted) with
    every device it names moved to the target's, in order (each mesh the same
    shape and axes over the target's devices), as its jit donates; a step on no
    mesh is placed whole on the target's first device.

    ``call`` is the step's outer jit equation (its shardings and donation), or None."""
    params = call.params if call is not None else {}
    count = len(traced.in_avals)
    leaves = jax.tree.leaves(prepared.args)
    given = list(params.get("in_shardings", ())) or [None] * count
    if len(leaves) == count:  # a sharding the arguments carry, where the jit names none
        given = [g if isinstance(g, Sharding) else getattr(leaf, "sharding", None) for g, leaf in zip(given, leaves)]
    results = list(params.get("out_shardings", ())) or [None] * len(traced.out_avals)
    found: dict[Any, None] = {}
    devices_in((given, results, traced), found)
    if not found:  # one device: all of it on the target's first
        where = target.placement()
        given, results = [where] * count, [where] * len(traced.out_avals)
        program = traced
    else:
        ordered = sorted(found, key=lambda d: (d.platform, d.id))
        move = Mover(dict(zip(ordered, target.devices(len(ordered)))))
        given, results, program = move(given), move(results), move(traced)
    consts = [np.asarray(c) if isinstance(c, jax.Array) and not jax.dtypes.issubdtype(c.dtype, jax.dtypes.extended)
              else c for c in program.consts]  # the default device's constants: literals of the target's program

    def moved(*flat: Any) -> Any:
        return tuple(jex_core.jaxpr_as_fun(jex_core.ClosedJaxpr(program.jaxpr, consts))(*flat))

    moved.__name__ = moved.__qualname__ = prepared.name  # the HLO module's name, the op_names' jit(...)
    donated = tuple(i for i, d in enumerate(params.get("donated_invars", ())) if d)
    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False)) for a in traced.in_avals]
    return jax.jit(moved, in_shardings=tuple(s if isinstance(s, Sharding) else None for s in given),
                   out_shardings=tuple(s if isinstance(s, Sharding) else None for s in results),
                   donate_argnums=donated).lower(*avals)


def devices_in(value: Any, found: dict[Any, None]) -> None:
    """Every device a mesh or a sharding in ``value`` names (shardings, jaxprs and their equations'
    parameters, nested), into ``found`` in order of appearance."""
    if isinstance(value, jex_core.ClosedJaxpr):
        value = value.jaxpr
    if isinstance(value, jex_core.Jaxpr):
        for eqn in value.eqns:
            devices_in(tuple(eqn.params.values()), found)
    elif isinstance(value, Mesh) and not value.empty:  # (the empty mesh: no mesh in context)
        found.update(dict.fromkeys(value.devices.flat))
    elif isinstance(value, (NamedSharding, SingleDeviceSharding)):
        devices_in(value.mesh if isinstance(value, NamedSharding) else tuple(value.device_set), found)
    elif isinstance(value, (tuple, list)):
        for item in value:
            devices_in(item, found)
    elif isinstance(value, jax.Device):
        found[value] = None


class Mover:
    """Replaces devices in meshes, shardings and jaxprs (their equations' parameters, nested) by
    the target's (``devices``: each default-backend device to its target device); an abstract
    mesh (a mapped body's) says the target's kind of device."""

    def __init__(self, devices: Mapping[Any, Any]) -> None:
        self.devices = dict(devices)
        self.meshes: dict[int, Mesh] = {}
        first = next(iter(self.devices.values()))
        self.abstract_device = Mesh(np.array([first], dtype=object), ("one",)).abstract_mesh.abstract_device

    def __call__(self, value: Any) -> Any:
        if isinstance(value, jex_core.ClosedJaxpr):
            return jex_core.ClosedJaxpr(self(value.jaxpr), value.consts)
        if isinstance(value, jex_core.Jaxpr):
            return self.jaxpr(value)
        if isinstance(value, Mesh) and not value.empty:
            if id(value) not in self.meshes:
                devices = np.array([self.devices[d] for d in value.devices.flat], dtype=object)
                self.meshes[id(value)] = Mesh(devices.reshape(value.devices.shape), value.axis_names,
                                              axis_types=value.axis_types)
            return self.meshes[id(value)]
        if isinstance(value, AbstractMesh) and not value.empty and value.abstract_device is not None:
            return value.update(abstract_device=self.abstract_device)
        if isinstance(value, NamedSharding) and isinstance(value.mesh, (Mesh, AbstractMesh)):
            mesh = self(value.mesh)
            return value if mesh is value.mesh else NamedSharding(mesh, value.spec, memory_kind=value.memory_kind)
        if isinstance(value, SingleDeviceSharding):
            return SingleDeviceSharding(self.devices[next(iter(value.device_set))], memory_kind=value.memory_kind)
        if type(value) in (tuple, list):
            return type(value)(self(item) for item in value)
        return value

    def jaxpr(self, jaxpr: Any) -> Any:
        """``jaxpr`` with its equations' parameters and contexts moved, and every value typed on a
        mapped body's abstract mesh (its aval's sharding) typed on the target's."""
        new: dict[Any, Any] = {}

        def atom(value: Any) -> Any:
            if isinstance(value, jex_core.Literal):
                return self.literal(value)
            if value not in new:
                aval = self.aval(value.aval)
                new[value] = value if aval is value.aval else type(value)(aval)  # a Var, or a DropVar
            return new[value]

        eqns = [e.replace(invars=[atom(v) for v in e.invars], outvars=[atom(v) for v in e.outvars],
                          params={k: self(v) for k, v in e.params.items()}, ctx=self.context(e.ctx))
                for e in jaxpr.eqns]
        return jaxpr.replace(constvars=[atom(v) for v in jaxpr.constvars], invars=[atom(v) for v in jaxpr.invars],
                             outvars=[atom(v) for v in jaxpr.outvars], eqns=eqns)

    def aval(self, aval: Any) -> Any:
        """``aval`` typed on the target's abstract mesh where its sharding names a mapped body's."""
        sharding = getattr(aval, "sharding", None)
        if not isinstance(getattr(sharding, "mesh", None), AbstractMesh):
            return aval
        moved = self(sharding)
        return aval if moved is sharding else aval.update(sharding=moved)

    def literal(self, operand: Any) -> Any:
        """A literal operand typed on the target's abstract mesh where it was on a mapped body's."""
        aval = self.aval(operand.aval)
        if aval is operand.aval:
            return operand
        value = operand.val
        if isinstance(value, np.ndarray) and hasattr(value, "aval"):  # jax's typed host array: its type says it
            value = type(value)(np.asarray(value), aval)
        return type(operand)(value, aval)

    def context(self, ctx: Any) -> Any:
        """An equation's context with its abstract mesh (a mapped body's: ``shard_map``,
        ``pmap``) the target's; jax checks it against the values' own when the body is traced."""
        mesh = getattr(ctx, "cur_abstract_mesh", None)
        if mesh is None or mesh.empty or mesh.abstract_device is None:
            return ctx
        metadata = None if ctx.xla_metadata is None else tuple(sorted(ctx.xla_metadata.items()))
        return type(ctx)._create(ctx.compute_type, ctx.threefry_partitionable, self(mesh),  # jax's own constructor
                                 ctx.remove_size_one_mesh_axis, metadata)
