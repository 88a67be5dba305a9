"""How a training step is spread over devices beyond one analysed program.

`Parallelism` (devices on one axis, or a mesh with ``data`` replicas,
``fsdp``, ``expert`` and ``model`` shards and ``pipeline`` stages, and micro-batches) is
what `xla_cost.estimate` and `xla_cost.scaling` take; `point` turns
it into the program to analyse (a `xla_cost.RunConfig`: the mesh's ``fsdp``,
``expert`` and ``model`` axes, a pipeline stage's share of the layers) and the
`xla_cost.timemodel.schedule.Layout` around it, which
`xla_cost.runs.scaling.predict` prices.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from xla_cost import zoo
from xla_cost.choices import FLOAT8, FLOAT8_ACTIVATIONS
from xla_cost.errors import InputError
from xla_cost.timemodel import schedule
from xla_cost.parallel.sharding import MESH_AXES, parse_mesh
from xla_cost.present.units import short_count
from xla_cost.runs.configs import RunConfig

__all__ = [
    "MESH_AXES_FOR_SCALING", "LAYOUT_AXES", "Parallelism", "layout_mesh", "mesh_text", "check_parallel",
    "pipeline_stage", "activation_bytes", "Point", "point", "same_work", "fsdp_units", "analyser", "data_size",
    "layers_of", "model_facts",
]

MESH_AXES_FOR_SCALING: tuple[str, ...] = ("data", "fsdp")
"""Axes a scaling curve grows (weak scaling: the per-device batch stays)."""

LAYOUT_AXES: tuple[str, ...] = (*MESH_AXES, "pipeline")
"""The axes of `Parallelism.mesh`: ``fsdp``, ``expert``, ``context`` and ``model`` shard the
analysed program (``expert`` splitting its batch too, ``context`` its sequences' positions), ``data``
replicates it, ``pipeline`` splits its layers into stages."""


@dataclasses.dataclass(frozen=True)
class Parallelism:
    """How a training step is spread over devices: `estimate` takes it (or its
    fields as keywords), `scaling` its ``mesh`` and ``micro_batches``.

    Attributes:
      devices: devices the step is split over on ``mesh_axis`` (the one-axis
        form, analysed as one sharded program).
      mesh_axis: ``data`` (DDP) or ``fsdp`` (ZeRO-3), for ``devices``.
      mesh: instead of ``devices``, devices per axis of `LAYOUT_AXES`
        (``{"data": 16, "model": 8, "pipeline": 8}`` or
        ``"data=16,model=8,pipeline=8"``): the analysed program is sharded
        over ``model`` (tensor parallel), ``expert`` (its batch too), ``context`` (each sequence's
        positions: context parallelism, `xla_cost.parallel.context`) and ``fsdp`` alone; ``pipeline``
        stages each hold ``ceil(n_layer / pipeline)`` of the layers (the
        analysed stage keeps the embedding and the head: the slowest one);
        ``data`` replicas all-reduce its gradients
        (`xla_cost.timemodel.schedule.Layout`).
      micro_batches: micro-batches per step per replica, each of
        ``batch_size`` samples per data-parallel rank: the pipeline's ``m``
        (its bubble is ``(p - 1) / m`` of the work), gradient accumulation
        without one.
      chunks: model chunks per pipeline stage ``v``, the interleaved schedule
        (Narayanan et al. 2021, section 2.2): the bubble shrinks to
        ``(p - 1) / (v m)``, the stage transfers grow ``v``-fold; ``v`` must
        divide each stage's layers, and needs ``pipeline`` in ``mesh``.
    """

    devices: int = 1
    mesh_axis: str = "data"
    mesh: Mapping[str, int] | str | None = None
    micro_batches: int = 1
    chunks: int = 1


def positive(value: Any, what: str, fix: str) -> int:
    """``value`` as an integer >= 1, or `InputError` (expected ``what``, ``fix``)."""
    try:
        size = int(value) if not isinstance(value, bool) else -1
    except (TypeError, ValueError):
        size = -1
    if size < 1 or (isinstance(value, float) and value != size):
        raise InputError(f"{what}, an integer >= 1", repr(value), fix)
    return size


def _amount(value: Any, what: str, fix: str, whole: bool = False) -> float:
    """``value`` as a finite number > 0 (a whole one if ``whole``), or `InputError`."""
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if number is None or not math.isfinite(number) or number <= 0 or (whole and number != int(number)):
        kind = "a whole number" if whole else "a finite number"
        raise InputError(f"{what} as {kind} > 0", repr(value), fix)
    return number


def data_size(run: RunConfig, samples: Any, epochs: Any, tokens: Any) -> tuple[float, int | None]:
    """``(samples processed, tokens or None)`` of a training run, checked before anything runs.

    ``samples * epochs`` (samples: images, or sequences of a token model), or
    ``tokens`` over the positions of a model whose inputs are token ids
    (`xla_cost.RunConfig.sequence_length`).

    Raises:
      InputError: both or neither of samples and tokens; a count that is not
        positive and finite (samples not whole); epochs with tokens; tokens
        for a model whose inputs are not token ids.
    """
    if (samples is None) == (tokens is None):
        raise InputError("--samples N [--epochs E] or --tokens T", "both or neither",
                         "Give the dataset as samples (images) or tokens (language models).")
    if tokens is None:
        n = _amount(samples, "--samples (samples=)", "Pass the data set's size, e.g. --samples 1281167.", whole=True)
        n *= _amount(epochs, "--epochs (epochs=)", "Pass e.g. --epochs 90 (or 0.5 for half a pass).")
        if not math.isfinite(n):
            raise InputError("samples x epochs finite", f"{samples!r} x {epochs!r}", "Pass smaller figures.")
        return n, None
    count = _amount(tokens, "--tokens (tokens=)", "Pass e.g. --tokens 3e11.")
    if epochs != 1:
        raise InputError("--epochs only with --samples", f"--tokens with --epochs {epochs!r}",
                         "Give the tokens of the whole run, or the data set as --samples and --epochs.")
    length = run.sequence_length()
    if length is None:
        shape, dtype = run.input_spec()
        raise InputError(
            "--tokens only for a model whose inputs are token ids (integers of shape batch x positions)",
            f"{run.name} with inputs {dtype}{list(shape)}", "Give its data set as --samples N [--epochs E].")
    return count / length, int(count)


def layout_mesh(mesh: Mapping[str, int] | str | None) -> dict[str, int]:
    """``"data=16,model=8,pipeline=8"`` (or a mapping) to devices per axis of
    `LAYOUT_AXES`, in that order; empty for None.

    Raises:
      InputError: an unknown axis, an axis twice, or a size that is not a positive integer.
    """
    fix = f"Use e.g. --mesh data=16,model=8,pipeline=8 (axes {', '.join(LAYOUT_AXES)})."
    if mesh is None or (isinstance(mesh, (str, Mapping)) and not mesh):
        return {}
    if isinstance(mesh, str):
        parts = [part.partition("=") for part in mesh.split(",")]
        if any(not sep or not key.strip() for key, sep, _ in parts):
            raise InputError("a mesh as AXIS=SIZE[,AXIS=SIZE...]", repr(mesh), fix)
        pairs = [(key.strip(), value.strip()) for key, _, value in parts]
    elif isinstance(mesh, Mapping):
        pairs = list(mesh.items())
    else:
        raise InputError("a mesh as a dict {axis: size} or 'data=16,model=8,pipeline=8'", type(mesh).__name__, fix)
    unknown = [key for key, _ in pairs if key not in LAYOUT_AXES]
    if unknown:
        raise InputError(f"mesh axes among {', '.join(LAYOUT_AXES)}", repr(unknown[0]), fix)
    keys = [key for key, _ in pairs]
    if len(set(keys)) < len(keys):
        raise InputError("each mesh axis once", repr(mesh), "Give each axis one size.")
    sizes = parse_mesh({key: value for key, value in pairs if key != "pipeline"})
    sizes.update({key: positive(value, f"a size for mesh axis {key}", f"Use e.g. {key}=8.")
                  for key, value in pairs if key == "pipeline"})
    return {axis: sizes[axis] for axis in LAYOUT_AXES if axis in sizes}


def layers_of(run: RunConfig) -> str | None:
    """``scanned`` or ``unrolled``: a zoo model's ``scan_layers`` setting (the
    families without it never loop over their layers); None for a model of
    your own."""
    if run.custom:
        return None
    config = {**zoo.get_spec(run.model).defaults, **run.config}
    return "scanned" if config.get("scan_layers") else "unrolled"


def model_facts(parameters: int | None, layers: str | None, active: int | None = None) -> str:
    """What a result's header says of the model as configured: ``70.1B parameters (12.9B active),
    layers unrolled``; "" when neither is recorded (a result made by hand)."""
    if parameters is None and layers is None:
        return ""
    shown = f" ({short_count(active)} active)" if active is not None else ""
    about = [f"{short_count(parameters)} parameters{shown}" if parameters is not None else "",
             f"layers {layers}" if layers is not None else "layers scanned or unrolled: unknown"]
    return ", ".join(a for a in about if a)


def mesh_text(mesh: Mapping[str, int]) -> str:
    """``data=16,model=8,pipeline=8``."""
    return ",".join(f"{axis}={size}" for axis, size in mesh.items())


def check_parallel(parallel: Parallelism) -> tuple[int, dict[str, int], int]:
    """(devices, the layout's mesh, micro-batches) of ``parallel``, checked."""
    devices = positive(parallel.devices, "devices", "Pass e.g. --devices 8.")
    micro = positive(parallel.micro_batches, "micro-batches per step", "Pass e.g. --micro-batches 8.")
    if parallel.mesh_axis not in MESH_AXES_FOR_SCALING:
        raise InputError(f"--mesh-axis one of {', '.join(MESH_AXES_FOR_SCALING)}", repr(parallel.mesh_axis),
                         "Grow data (DDP) or fsdp (ZeRO-3); --mesh model=N,pipeline=N places the rest.")
    mesh = layout_mesh(parallel.mesh)
    if mesh and devices != 1:
        raise InputError("--devices K or --mesh AXIS=N,..., not both", f"{devices} devices and mesh {mesh_text(mesh)}",
                         "Put the devices in the mesh, e.g. --mesh data=8.")
    return devices, mesh, micro


_WIDTHS = {"float32": 4, "bfloat16": 2, "float16": 2}
ELEMENT_BYTES = {**_WIDTHS, FLOAT8: _WIDTHS[FLOAT8_ACTIVATIONS]}
"""Bytes of an activation element by ``--dtype`` (float8's activations are
`FLOAT8_ACTIVATIONS`: only its products' operands are FP8)."""


def pipeline_stage(run: RunConfig, stages: int, chunks: int = 1) -> RunConfig:
    """The pipeline stage ``run`` analyses: ``ceil(n_layer / stages)`` layers.

    Raises:
      InputError: a model without ``n_layer``, more stages than layers, or
        ``chunks`` that do not divide a stage's layers (or without a pipeline).
    """
    chunks = positive(chunks, "model chunks per pipeline stage", "Pass e.g. --chunks 2 (chunks=2).")
    if chunks > 1 and stages == 1:
        raise InputError("--chunks V only with a pipeline (--mesh ...,pipeline=P, P >= 2)",
                         f"--chunks {chunks} without pipeline stages", "Add pipeline=P to --mesh, or drop --chunks.")
    if stages == 1:
        return run
    config = {} if run.custom else {**zoo.get_spec(run.model).defaults, **run.config}
    if "n_layer" not in config or "d_model" not in config:
        raise InputError("a zoo model with n_layer and d_model settings for a pipeline (gpt2-small, bert-base, "
                         "vit-b16, ...)", repr(run.model), "Drop pipeline= from the mesh, or pick such a model.")
    if stages > config["n_layer"]:
        raise InputError(f"at most n_layer = {config['n_layer']} pipeline stages for {run.model}",
                         f"pipeline={stages}", "Use fewer stages, or more layers (--set n_layer=N).")
    layers = -(-config["n_layer"] // stages)
    if layers % chunks:
        raise InputError(f"model chunks that divide the {layers} layers of each of the {stages} stages",
                         f"--chunks {chunks} (n_layer = {config['n_layer']}, pipeline={stages})",
                         f"Pick a divisor of {layers} for --chunks (chunks=), or another pipeline size.")
    return dataclasses.replace(run, config={**run.config, "n_layer": layers})


def activation_bytes(run: RunConfig) -> int:
    """The activation bytes one micro-batch sends from a stage to the next:
    batch x positions x d_model x bytes per element of the step's dtype, the
    positions being ``seq_len`` (token models) or the patches and the class
    token (``(image_size / patch_size)**2 + 1``, image transformers)."""
    config = {**zoo.get_spec(run.model).defaults, **run.config}
    if "seq_len" in config:
        positions = config["seq_len"]
    elif "image_size" in config and "patch_size" in config:
        positions = (config["image_size"] // config["patch_size"]) ** 2 + 1
    else:
        raise InputError("a pipelined model with seq_len, or image_size and patch_size (its activations' length)",
                         repr(run.model), "Drop pipeline= from the mesh.")
    return run.batch_size * positions * config["d_model"] * ELEMENT_BYTES.get(run.dtype, 4)


@dataclasses.dataclass(frozen=True)
class Point:
    """One priced step: the analysed program, the layout around it, and the
    program whose forward and backward compute it is priced with (None: its own)."""

    run: RunConfig
    layout: schedule.Layout
    reference: RunConfig | None = None
    phases: tuple[str, ...] = ()


def point(one: RunConfig, axis: str, k: int, per_rank: int, mesh: Mapping[str, int], micro: int,
          chunks: int = 1) -> Point:
    """``k`` devices grown on ``axis`` around ``mesh``, ``per_rank`` samples per
    micro-batch on each data-parallel rank, ``chunks`` model chunks a pipeline stage.

    Where the grown axis is in the analysed program, its forward and backward
    compute (and a replicated update's) are priced from the program without it
    at the same samples per device: the same work, which the CPU compiles
    with other fusions when sharded (its activation sharding constraints);
    the sharded program gives the collectives and, under FSDP, the sharded update.
    With a compile ``target`` the ``fsdp`` axis has no such program: the
    target's compiler makes the device's own program, and the step without
    the axis is the whole model on one device, which a model sharded for want
    of memory does not fit (libtpu refuses to compile it): the sharded
    program prices its own compute.
    """
    same = ("forward", "backward", "grad", *(("update",) if axis == "data" else ()))
    stage = pipeline_stage(one, mesh.get("pipeline", 1), chunks)  # checks chunks before anything runs
    if not mesh:
        run = dataclasses.replace(one, batch_size=per_rank * k, mesh={axis: k} if k > 1 else {})
        grown = k > 1 and (axis == "data" or one.target is None)
        reference = dataclasses.replace(one, batch_size=per_rank, mesh={}) if grown else None
        return Point(run, schedule.Layout(micro_batches=micro), reference, same)
    program = {a: mesh[a] for a in ("fsdp", "expert", "context", "model") if a in mesh and mesh[a] > 1}
    split = mesh.get("expert", 1)  # expert parallelism splits the batch (tokens) over its devices too
    data = mesh.get("data", 1)
    reference = None
    if axis == "fsdp" and k > 1:
        run = dataclasses.replace(stage, batch_size=per_rank * k * split, mesh=parse_mesh({**program, "fsdp": k}))
        reference = None if one.target is not None else dataclasses.replace(stage, batch_size=per_rank * split,
                                                                            mesh=program)
    else:
        run = dataclasses.replace(stage, batch_size=per_rank * mesh.get("fsdp", 1) * split, mesh=program)
        data *= k if axis == "data" else 1
    pipeline = mesh.get("pipeline", 1)
    layout = schedule.Layout(pipeline=pipeline, micro_batches=micro, data=data, chunks=chunks,
                             stage_bytes=activation_bytes(run) if pipeline > 1 else 0)
    return Point(run, layout, reference, same)


def same_work(report: Any, reference: Any, phases: Sequence[str]) -> Any:
    """``report`` with the compute figures of ``phases`` read from ``reference``
    (the same per-device work on fewer devices); its collectives stay."""
    scale = report.devices // reference.devices
    replaced = dict(report.phases)
    for name in phases:
        theirs = reference.phases[name]
        replaced[name] = dataclasses.replace(
            report.phases[name], flops=theirs.flops, bytes_accessed=theirs.bytes_accessed,
            memory_bound_bytes=theirs.memory_bound_bytes, kernels=theirs.kernels,
            matmul_flops=None if theirs.matmul_flops is None else theirs.matmul_flops * scale,
            float8_flops=None if theirs.float8_flops is None else theirs.float8_flops * scale)
    return dataclasses.replace(report, phases=replaced)


def fsdp_units(report: Any) -> tuple[tuple[str, int], ...]:
    """The units a ZeRO-3 (FSDP) step gathers, with their parameters' bytes
    per device when gathered: the analysed forward program's all-gathers over
    ``fsdp``, summed per top-level module (a transformer block, the
    embedding), in the order the program runs them. A module whose gathers
    run in a loop (a scanned stack of blocks: one module, its body run once a
    layer; the forward program's kernel list has an all-gather in a loop body
    run ``n`` times, and ``n`` divides the runs of each of the module's
    gathers) is ``n`` units (``layers#0``, ...), each one trip's gathers, as
    an unrolled stack's blocks are units each: each trip gathers its own
    layer's parameters, behind the previous trip's compute. One unit of all
    the parameters where the program has none. Empty without an ``fsdp`` axis.
    """
    fsdp = report.mesh.get("fsdp", 1)
    if fsdp < 2:
        return ()
    gathered: dict[str, list[tuple[int, int]]] = {}
    forward = report.phases.get("forward")
    for c in getattr(forward, "communication", ()) or ():
        if "fsdp" in c.axes and c.kind.replace("_", "-").removesuffix("-start") == "all-gather":
            name = c.layer.split("/")[0] or "(remainder)"
            gathered.setdefault(name, []).append((c.bytes, 1 if c.executions is None else c.executions))
    loops = sorted({k.executions for k in getattr(forward, "kernel_list", None) or ()
                    if k.category == "collective" and k.kind == "all-gather" and (k.executions or 0) > 1},
                   reverse=True)  # the trips of the loops whose bodies gather
    units: dict[str, int] = {}
    for name, rows in gathered.items():
        trips = next((n for n in loops if all(runs % n == 0 for _, runs in rows)), 1)
        per_trip = sum(nbytes * runs for nbytes, runs in rows) // trips
        units.update({name: per_trip} if trips == 1 else {f"{name}#{trip}": per_trip for trip in range(trips)})
    if units:
        return tuple(units.items())
    per_device = int(report.sharding.get("params_bytes_per_device") or 0) or 4 * report.parameters // fsdp
    return (("(all parameters)", per_device * fsdp),)


def analyser(store: Any, judged: RunConfig | None = None) -> Callable[[RunConfig], Any]:
    """Analyses a `RunConfig` through the results store, each one once;
    ``judged``, where it is compiled for a target, with its memory
    (``memory=True``: the donated train step's peak, `xla_cost.Report.target_memory`
    exact)."""
    done: dict[str, Any] = {}

    def analyse(run: RunConfig) -> Any:
        key = str(run)
        if key not in done:
            memory = judged is not None and run.target is not None and key == str(judged)
            done[key] = run.run(cache=store if store is not None else True, **({"memory": True} if memory else {}))
        return done[key]

    return analyse
