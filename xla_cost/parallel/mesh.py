"""Meshes: the axes a step's devices are arranged on, their sizes, and the devices themselves.

`xla_cost.parallel.sharding` shards a step over a mesh of these axes (its
module text says what each axis splits); this module names them, reads and
checks their sizes, and builds the `jax.sharding.Mesh` (of the CPU's simulated
devices, or a compile target's).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding

from xla_cost.choices import MESH_AXES
from xla_cost.compiled import targets
from xla_cost.errors import InputError
from xla_cost.parallel.simulated import check_device_count

__all__ = ["CONTEXT", "MESH_AXES", "BATCH_AXES", "parse_mesh", "check_mesh", "check_batch_split", "mesh_devices",
           "make_mesh", "mesh_text", "caller_axis_types", "explicit_axes"]

CONTEXT = "context"
"""The mesh axis a sequence's positions are split over: context parallelism (`xla_cost.parallel.context`)."""

assert CONTEXT in MESH_AXES  # (`xla_cost.choices.MESH_AXES`: the step's refusals name them too)

BATCH_AXES: tuple[str, ...] = ("data", "fsdp", "expert")
"""The axes the batch is split over."""


def parse_mesh(text: str | Mapping[str, int] | None) -> dict[str, int]:
    """``"data=2,model=4"`` (or a mapping) to ``{"data": 2, "model": 4}`` in `MESH_AXES` order.

    Raises:
      InputError: an unknown axis, a size that is not a positive integer, an axis twice.
    """
    if text is None or text == "" or text == {}:
        return {}
    if isinstance(text, Mapping):
        items = list(text.items())
    elif isinstance(text, str):
        items = []
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise InputError(
                    "a mesh as AXIS=SIZE[,AXIS=SIZE...]", repr(text),
                    f"Use e.g. --mesh data=8 or --mesh fsdp=8,model=8 (axes {', '.join(MESH_AXES)}).",
                )
            items.append((key.strip(), value.strip()))
    else:
        raise InputError(
            "mesh as a dict {axis: size} or 'data=2,model=4'", type(text).__name__,
            "Pass e.g. mesh={'data': 8}.",
        )
    sizes: dict[str, int] = {}
    for key, value in items:
        if key not in MESH_AXES:
            raise InputError(
                f"mesh axes among {', '.join(MESH_AXES)}", repr(key),
                "Use data (batch split, DDP), fsdp (parameters sharded, ZeRO-3), expert (experts "
                "sharded, tokens split), context (sequence split) or model (tensor parallel).",
            )
        if key in sizes:
            raise InputError("each mesh axis once", f"{key} twice in {text!r}", "Give each axis one size.")
        try:
            size = int(value) if not isinstance(value, bool) else -1
        except (TypeError, ValueError):
            size = -1
        if size < 1 or (isinstance(value, float) and value != size):
            raise InputError(
                f"a positive integer size for mesh axis {key}", repr(value), f"Use e.g. {key}=8.",
            )
        sizes[key] = size
    return {axis: sizes[axis] for axis in MESH_AXES if axis in sizes}


def check_mesh(mesh: Any) -> dict[str, int]:
    """The mesh as sizes by axis (`parse_mesh`), or a `jax.sharding.Mesh`'s own axes."""
    if isinstance(mesh, Mesh):
        unknown = [a for a in mesh.axis_names if a not in MESH_AXES]
        if unknown:
            raise InputError(
                f"a Mesh whose axes are among {', '.join(MESH_AXES)}",
                f"axes {mesh.axis_names}", "Name the mesh axes data, fsdp, expert, context and model.",
            )
        return {str(a): int(mesh.shape[a]) for a in mesh.axis_names}
    return parse_mesh(mesh)


def check_batch_split(mesh: Mapping[str, int], batch: int, what: str = "inputs") -> None:
    """Refuses a batch the mesh's batch axes (`BATCH_AXES`) do not divide, before anything runs.

    Raises:
      InputError: the product of the batch axes' sizes does not divide ``batch``.
    """
    axes = tuple(a for a in BATCH_AXES if mesh.get(a, 1) > 1)
    size = math.prod(mesh[a] for a in axes) if axes else 1
    if axes and batch % size:
        raise InputError(
            f"a batch size divisible by {'x'.join(axes)} = {size} (the {what} are split over "
            "the batch axes)",
            f"batch {batch} on mesh {mesh_text(mesh)}",
            f"Use a batch that is a multiple of {size}, e.g. {size * max(1, batch // size)}.",
        )


def mesh_devices(mesh: Mapping[str, int]) -> int:
    """Devices a mesh needs: the product of its sizes (1 for an empty mesh)."""
    return math.prod(mesh.values()) if mesh else 1


def make_mesh(sizes: Mapping[str, int], explicit: tuple[str, ...] = ()) -> tuple[Mesh, list[str]]:
    """A `jax.sharding.Mesh` of ``sizes`` over the default backend's devices, and notes; the axes
    named in ``explicit`` of `jax.sharding.AxisType.Explicit` (`explicit_axes`), the others Auto.

    Under a compile target (`xla_cost.compiled.targets.use`) the mesh is the
    target's devices instead, from its deviceless topology (GPU hosts of
    ``node_size`` devices, a TPU slice).

    Falls back to the CPU's (simulated) devices when the default backend has
    fewer than the mesh needs, with a note: the figures are then the CPU
    compiler's for the sharded program.

    Raises:
      InputError: not enough devices anywhere.
    """
    need = mesh_devices(sizes)
    notes: list[str] = []
    target = targets.active()
    if target is not None:  # the compile target's devices, from its deviceless topology
        check_device_count(need)
        array = np.array(target.devices(need), dtype=object).reshape(tuple(sizes.values()))
        return Mesh(array, tuple(sizes), axis_types=_types(sizes, explicit)), notes
    devices = jax.devices()
    if len(devices) < need:
        cpu = jax.devices("cpu") if jax.default_backend() != "cpu" else devices
        if len(cpu) < need:
            flag = next((f for f in os.environ.get("XLA_FLAGS", "").split()
                         if f.startswith("--xla_force_host_platform_device_count")), None)
            raise InputError(
                f"{need} devices for mesh {mesh_text(sizes)}",
                f"{len(devices)} {jax.default_backend()} device(s)",
                f"The environment's XLA_FLAGS {flag} wins over the simulation the mesh asks for: raise it to "
                f"{need} or unset it." if flag is not None else
                f"Simulate them on the CPU: xla_cost.simulate_devices({need}) right after "
                f"`import jax`, or XLA_FLAGS=--xla_force_host_platform_device_count={need} "
                "(the xla-cost CLI does this itself).",
            )
        notes.append(
            f"the {jax.default_backend()} backend has {len(devices)} device(s): the mesh "
            f"{mesh_text(sizes)} is compiled for {need} simulated CPU devices (XLA's CPU cost "
            "analysis of the sharded program)"
        )
        devices = cpu
    array = np.array(devices[:need], dtype=object).reshape(tuple(sizes.values()))
    return Mesh(array, tuple(sizes), axis_types=_types(sizes, explicit)), notes


def _types(sizes: Mapping[str, int], explicit: tuple[str, ...]) -> tuple[AxisType, ...]:
    return tuple(AxisType.Explicit if axis in explicit else AxisType.Auto for axis in sizes)


def caller_axis_types(*trees: Any) -> dict[str, AxisType]:
    """The axis types of the mesh the caller works on: the active one (`jax.set_mesh`), else the
    mesh of the first array (or ``jax.ShapeDtypeStruct``) of ``trees`` placed with a
    `NamedSharding` (a model's variables made under the mesh and used outside it); {} for none."""
    mesh: Any = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        shardings = (getattr(leaf, "sharding", None) for leaf in jax.tree.leaves(trees)
                     if isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)))
        mesh = next((s.mesh for s in shardings if isinstance(s, NamedSharding)), None)
        if mesh is None:
            return {}
    return {str(name): kind for name, kind in zip(mesh.axis_names, mesh.axis_types)}


def explicit_axes(sizes: Mapping[str, int], caller: Mapping[str, AxisType]) -> tuple[str, ...]:
    """The axes of ``sizes`` a mesh laid for the caller makes Explicit: each axis of the caller's
    mesh as the caller typed it, any other as the caller's axes all are where they agree (Auto
    where they do not): a model written for Explicit axes (``reshard``, ``out_sharding=``) runs only
    under them, and one whose arrays are typed on Explicit axes meets the laid mesh's."""
    kinds = set(caller.values())
    default = kinds.pop() if len(kinds) == 1 else AxisType.Auto
    return tuple(axis for axis in sizes if caller.get(axis, default) == AxisType.Explicit)


def mesh_text(sizes: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sizes.items()) or "(one device)"
