"""Predicted step time on many devices, and the scaling curve.

Each point of a curve is a sharded analysis (`xla_cost.analyze` with
``mesh={axis: K}``: XLA's SPMD partitioner makes the per-device program and
its collectives) priced by `predict` on one `xla_cost.Hardware`:

    step time = compute + communication not hidden behind compute

Two kinds of figure come out, and every result says which:

* a **prediction** (the default, ``mfu=None``): every kernel of the
  program priced on the device (`xla_cost.timemodel.kernel_time`, with the
  global constants of `xla_cost.timemodel.calibration`; the CPU proxy's
  program from its totals where no target was compiled), gradient collectives reduced in buckets as the backward pass makes
  them and in two levels over several nodes (`xla_cost.timemodel.schedule`);
* a **bound** (``bound=True``: `Hardware.bound`, or a fixed ``mfu``): the
  roofline ``max(FLOP / (peak * mfu), bytes / bandwidth)`` and every
  collective on a flat ring, nothing hidden; at ``mfu=1`` no step is faster.

Beyond the analysed program, a `Parallelism` says how the step is spread
(`xla_cost.timemodel.schedule.Layout`): tensor-parallel (``model``) and ZeRO-3
(``fsdp``) shards in the program, ``pipeline`` stages each holding its share
of the layers, ``data`` replicas, micro-batches per step.

What the model ignores: topology contention between concurrent
collectives, stragglers and launch jitter, the slow-down of compute that
shares memory bandwidth with communication.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from xla_cost.analysis.options import check_target
from xla_cost.choices import DEFAULT_OPTIMIZER
from xla_cost.errors import InputError
from xla_cost.options import changed_fields, given_fields, split_fields
from xla_cost.timemodel import calibration, comm, context_exchange, kernel_time, schedule
from xla_cost.timemodel.hardware import Hardware
from xla_cost.timemodel import devices
from xla_cost.parallel.mesh import CONTEXT
from xla_cost.parallel.sharding import check_device_count, mesh_devices, simulate_devices
from xla_cost.present import progress
from xla_cost.runs.configs import RunConfig, input_batch
from xla_cost.runs.layouts import (
    LAYOUT_AXES, MESH_AXES_FOR_SCALING, Parallelism, Point, analyser, check_parallel, layout_mesh,
    layers_of, mesh_text, point, same_work,
)
from xla_cost.runs.priced import ScalingResult, StepEstimate, pricing_text
from xla_cost.runs.step_communication import (
    UPDATE_PART, backward_share, gradient_reduction, overlapped, stage_transfers, update_collectives,
)

__all__ = [
    "MESH_AXES_FOR_SCALING", "unknown_runs", "LAYOUT_AXES", "Parallelism", "layout_mesh", "StepEstimate",
    "ScalingResult", "predict", "scaling", "pricing", "pricing_text", "priced_step", "run_config", "target_pricing",
    "target_device", "ready_devices", "speedup", "bandwidth_for_speedup",
]


def _hardware(function: str, hardware: Hardware | None, fields: Mapping[str, Any]) -> Hardware:
    """``hardware`` (default `Hardware()`) with ``fields`` replacing its own."""
    (given,) = split_fields(function, fields, Hardware)
    return dataclasses.replace(hardware or Hardware(), **given)


_GRADIENT_AXES = frozenset({"data", "fsdp"})
_HALF = frozenset({"bfloat16", "float16"})


def _split(collectives: tuple[Any, ...], narrow: float) -> tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]:
    """A step's collectives apart: the tensor-parallel ones, the gradients' (over ``data``, ``fsdp``, and
    ``context``'s all-reduces), context parallelism's keys and values (`context_exchange.exchanges`), the
    first and last with their bytes times ``narrow``; kept per value (`comm.hashed_by_value`): the fits ask again."""
    try:
        return (_kept_split if comm.hashed_by_value(collectives) else _kept_split.__wrapped__)(collectives, narrow)
    except TypeError:  # a collective that is not hashable
        return _kept_split.__wrapped__(collectives, narrow)


@functools.lru_cache(maxsize=1 << 10)
def _kept_split(collectives: tuple[Any, ...], narrow: float) -> tuple[tuple[Any, ...], ...]:
    tensor, gradients, context = [], [], []
    for c in collectives:  # context parallelism's keys and values (not gradients), the gradients', the rest
        (context if context_exchange.exchanges(c) else gradients if c.axes and set(c.axes) - {CONTEXT}
         <= _GRADIENT_AXES else tensor).append(c)
    if narrow != 1.0:  # else the collectives as they are (a copy of each took a sixth of the validation's pricing)
        tensor, context = ([dataclasses.replace(c, bytes=int(c.bytes * narrow)) for c in cs] for cs in (tensor, context))
    return tuple(tensor), tuple(gradients), tuple(context)


def predict(
    report: Any,
    hardware: Hardware | None = None,
    layout: schedule.Layout | None = None,
    *,
    # what it is priced on: `xla_cost.Hardware`'s fields, replacing ``hardware``'s
    device: str = "h100",
    interconnect: str | None = None,
    node: str | None = None,
    node_size: int | None = None,
    nics: int | None = None,
    bandwidth: float | None = None,
    latency: float | None = None,
    algorithm: str = "ring",
    overlap: float | None = None,
    mfu: float | None = None,
    bucket_bytes: float = schedule.DDP_BUCKET_BYTES,
    hierarchical: bool = True,
    arithmetic: str | None = None,
) -> StepEstimate:
    """The predicted train-step time of a (sharded) `xla_cost.Report` on some hardware.

    The report is one micro-batch's step on one pipeline stage of one replica
    (`xla_cost.timemodel.schedule.Layout` says how many there are). Per device:

    * compute: every kernel of the target's program priced on the device
      (`xla_cost.timemodel.kernel_time`: products by their shape, the rest by
      their bytes, each its launch, a host cost per step; a step on one
      device analysed with ``exact_train_step`` as that one program, whose
      update the compiler may have fused into the backward pass), or the CPU program's
      totals where the report has no kernel list; with a fixed ``mfu`` (a bound) the roofline
      ``max(FLOP / (peak * mfu), bytes / bandwidth)``;
    * the analysed mesh's collectives over ``model`` block the step (tensor
      parallelism), or only what outlasts the products where the layout
      overlaps them (`xla_cost.timemodel.schedule.Layout.overlap_tensor`); over ``context`` (context
      parallelism) its exchange of attention's keys and values blocks the step too, or only what
      outlasts the fused attention kernels where the layout overlaps it
      (`xla_cost.timemodel.schedule.Layout.overlap_context`), and its all-reduces reduce gradients,
      as over ``data``; its gradient collectives over ``data`` (and the
      layout's replicas) are reduced in buckets that start as the backward pass
      makes them, and only what runs past the backward pass is exposed (or a
      fixed share is hidden: ``overlap``); over ``fsdp`` (ZeRO-3) each layer's
      parameters are all-gathered before its forward and backward pass and its
      gradients reduce-scattered after it, behind the neighbouring layer's
      compute (`xla_cost.timemodel.schedule.zero3`); every group on the links
      its devices share (`xla_cost.timemodel.schedule.run_mesh`);
    * a pipeline takes ``(m + p - 1) / v``-style slots of the slowest stage
      (`xla_cost.timemodel.schedule.pipeline_seconds`), each with its transfers to
      the next stage and back, at the node's measured send/recv bus bandwidth where
      it has one, else the alpha-beta model (`stage_transfers`; a note says which),
      hidden behind the stage's compute where the layout overlaps them
      (`xla_cost.timemodel.schedule.Layout.overlap_transfers`);
    * the optimizer's update at the end.

    A step compiled on the CPU in bfloat16 or float16 moves float32 buffers
    (XLA's CPU emulates 16-bit arithmetic in float32); its memory-bound bytes
    and activation collectives are halved for the 16-bit devices it is priced on.

    Args:
      report: an analysis, sharded (``mesh=``) or on one device.
      hardware: what it is priced on (default `xla_cost.Hardware()`: H100s
        on their cluster, calibrated, scheduled).
      layout: stages, micro-batches and replicas around the analysed step.
      device, interconnect, node, node_size, nics, bandwidth, latency, algorithm,
        overlap, mfu, bucket_bytes, hierarchical, arithmetic: the fields of
        `xla_cost.Hardware` (documented there); each one not at its default
        replaces ``hardware``'s.

    Raises:
      InputError: unknown train-step FLOP, or a device without a published
        peak for the step's dtype.
    """
    hardware = _hardware("predict", hardware, changed_fields(Hardware, locals()))
    layout = layout or schedule.Layout()
    peak, cluster = hardware.peak(), hardware.cluster(getattr(report, "target", None))
    mesh = schedule.run_mesh(report.mesh, layout)  # where the run's devices lie: the links each group crosses
    step, grad, update = (report.phases[p] for p in ("train_step", "grad", "update"))
    if step.flops is None:
        raise InputError("a report with known train-step FLOP", "unknown FLOP (see its notes)",
                         "Analyse with counter='xla' on a backend with a cost analysis.")
    narrow = 0.5 if report.backend == "cpu" and report.dtype in _HALF else 1.0
    rerun, reran = schedule.rerun_collectives(report.phases.get("forward"), grad, layout)
    tensor, gradients, context = _split(rerun, narrow)
    tensor_s, tensor_times, notes, _ = comm.placed_time(tensor, mesh, cluster)  # kept: the fits price it again
    notes = [*notes, *reran]
    # the update program's own collectives: once a step, after the gradients (Muon's iterates gathered
    # over fsdp, a global norm's partial sums), blocking the update (a bound: XLA may overlap some)
    update_s, update_times, said = update_collectives(update.communication, mesh, cluster)
    notes += said
    context_s, context_times, said, _ = comm.placed_time(context, mesh, cluster)
    notes += said
    if narrow != 1.0:
        notes.append(f"compiled on the CPU in {report.dtype}: memory-bound bytes and activation collectives "
                     "halved for a 16-bit device (XLA's CPU widens them to float32)")
    if getattr(report, "target", None) is not None:
        notes.append(f"the step's programs compiled for {report.target} by its own compiler: FLOP, bytes, kernels "
                     "and collectives are that program's" + ("" if hardware.is_bound else
                     "; every kernel of it priced on the device (xla_cost.timemodel.kernel_time)"))
    flops_peak = peak.require(hardware.arithmetic or report.dtype)
    host, proxy = 0.0, False  # proxy: priced from the CPU program's totals, so no range (calibration.PROXY_NO_RANGE)
    dispatch = 0.0  # the host's dispatch of the step's calls, which the device's work hides when it is longer
    if hardware.is_bound:
        compute = _roofline(grad, flops_peak, peak.bandwidth, hardware.mfu)
        updating = _roofline(update, flops_peak, peak.bandwidth, hardware.mfu)
        parts, described = {"roofline": compute}, ""
    else:
        constants = calibration.constants()
        priced_grad = _priced(grad, report, narrow, hardware, constants)
        priced_update = _priced(update, report, narrow, hardware, constants)
        one_program = _one_program(report, layout, step)
        if one_program:
            # the step XLA compiled as one program (exact_train_step): its kernels, not the grad and update
            # programs' apart, whose gradients it may never write (an update fused into the product making them)
            priced_grad = _priced(step, report, narrow, hardware, constants)
            priced_update = dataclasses.replace(priced_grad, matmul=0.0, memory=0.0, launch=0.0, kernels=0)
            notes.append("one device, one program: the train step priced as the single program XLA compiled for it "
                         "(exact_train_step), its update fused where the compiler fused it")
        unknown = unknown_runs([step] if one_program else [grad, update])
        if unknown:  # unknown is not zero: priced once each, said
            notes.append(f"{len(unknown)} kernel(s) in a loop whose trips the program does not say priced once each "
                         f"({', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''}): their time is a lower bound")
        if proxy := priced_grad.source == "totals":
            notes.append(f"priced from the totals of a program compiled without a target (the {report.backend}'s: its "
                         "products' FLOP and other bytes, its kernels not charged a launch): pass target= (--target) "
                         "to price the device's own program kernel by kernel")
        _optimal_note(report, notes)
        dispatching, measured = devices.host_dispatch(devices.device(hardware.device))
        if not measured:  # unknown is not zero, nor another device's figure said to be this one's
            notes.append(f"no host measured with the {devices.device(hardware.device).title}: its dispatch is the "
                         f"fastest host's measured, a floor ({dispatching.source})")
        # each device's host dispatches its program's calls (measured on one device: a floor on several)
        if one_program:
            dispatch = dispatching.seconds(step.arguments)
        else:
            passed = None if None in (grad.arguments, update.arguments) else \
                layout.micro_batches * grad.arguments + update.arguments
            dispatch = dispatching.seconds(passed, calls=layout.micro_batches + 1)
        compute = priced_grad.seconds
        updating = priced_update.seconds
        host = constants.host
        parts = {"matmul": priced_grad.matmul, "memory": priced_grad.memory, "launch": priced_grad.launch}
        if priced_grad.host_bytes:  # offloaded activations: the link's time XLA's schedule does not hide
            parts["host_transfer"] = priced_grad.host
        notes += [_host_note(priced, hardware.device) for priced in (priced_grad, priced_update) if priced.host_bytes]
        described = calibration.describe(constants, gpu=devices.device(hardware.device).gpu is not None)
    m = layout.micro_batches
    # a micro-batch's activations to the next stage and their gradient back
    transfer, transfers, said = stage_transfers(layout, report.devices, mesh, cluster)
    if said:
        notes.append(said)
    products = compute if hardware.is_bound else parts["matmul"]
    tensor_exposed, transfer_exposed, said = overlapped(layout, tensor_s, transfer, products, compute)
    notes += said
    context_exposed, said = context_exchange.exposed(layout, context_s, grad, hardware.device, hardware.arithmetic,
                                                     hardware.is_bound)
    notes += said
    tensor_exposed += context_exposed  # the attention's K and V exchange blocks the micro-batch as the tensor ones do
    tensor_s += context_s
    slot = compute + tensor_exposed + transfer_exposed  # one micro-batch on the slowest stage
    pipelined = schedule.pipeline_seconds(slot, layout.pipeline, m, layout.chunks)
    grad_s, grad_times, grad_notes, exposed = gradient_reduction(
        gradients, report, layout, cluster, hardware, backward=compute * backward_share(report))
    notes += grad_notes
    busy = pipelined + exposed + updating + update_s
    waiting = max(dispatch - busy, 0.0)  # a step is never shorter than its host's dispatch of it
    if waiting:
        notes.append(f"host-bound: dispatching the step takes {dispatch * 1e6:,.0f} µs on the host "
                     f"({dispatching.source}{'' if measured else '; no host measured with this device: the fastest measured'}), "
                     f"its device work {busy * 1e6:,.0f} µs")
    seconds = busy + waiting + host
    parts = {part: value * m for part, value in parts.items()}  # every micro-batch's compute
    # the bubble is idle, not communication: (p - 1) / (v m) of the m slots
    parts.update(tensor=tensor_exposed * m, update=updating, gradients=exposed, stage_transfers=transfer_exposed * m,
                 pipeline_bubble=pipelined - m * slot, host=host, dispatch_wait=waiting)
    if update_s:
        parts[UPDATE_PART] = update_s
    # every collective and transfer; the tensor-parallel ones and the transfers block the step unless the
    # layout overlaps them, of the gradients' only what runs past the backward pass shows: never more than
    # all; the update's block it
    communication = grad_s + (tensor_s + transfer) * m + update_s
    not_hidden = exposed + (tensor_exposed + transfer_exposed) * m + update_s
    prediction = schedule.StepPrediction(
        compute_seconds=m * compute + updating + host,
        communication_seconds=communication,
        exposed_communication_seconds=not_hidden,
        seconds=seconds,
        overlap=0.0 if communication == 0 else 1 - not_hidden / communication,
    )
    replicas = layout.data * layout.pipeline
    return StepEstimate(
        devices=report.devices * replicas, global_batch=report.batch_size * layout.micro_batches * layout.data,
        flops=step.flops, bytes_accessed=step.bytes_accessed, communication_bytes=step.communication_bytes,
        prediction=prediction, collectives=(*tensor_times, *context_times, *transfers, *grad_times, *update_times),
        notes=tuple(dict.fromkeys(notes)),
        parts=parts, calibration=described,
        # a prediction's range: as the validation's held-out published cases ran against theirs (none for a bound)
        interval=None if hardware.is_bound or proxy else calibration.interval(seconds),
        interval_description="" if hardware.is_bound else calibration.interval_description(proxy=proxy),
    )


def _host_note(priced: kernel_time.KernelSeconds, device: str) -> str:
    """How a program's transfers to and from its host's memory were priced, in words."""
    if priced.host_link is None:  # unknown is not zero
        return (f"{priced.host_bytes / 1e9:,.4g} GB moved to and from the host's memory (offloaded activations) not "
                f"priced: no host link for the {device} in the registry (xla_cost.timemodel.devices.HOST_LINKS): a "
                "lower bound")
    link = devices.host_link(device)
    return (f"{priced.host_bytes / 1e9:,.4g} GB moved to and from the host's memory (offloaded activations) at "
            f"{priced.host_link / 1e9:,.4g} GB/s each way ({link.source if link else ''}), behind the kernels XLA "
            f"scheduled beside each transfer: {priced.host * 1e3:,.4g} ms exposed")


def _one_program(report: Any, layout: schedule.Layout, step: Any) -> bool:
    """Whether the step is priced as its one compiled program: one device, no
    stages, replicas or micro-batches around it, and the train step compiled
    for the target as a program of its own (``exact_train_step``)."""
    return (report.devices == 1 and layout.pipeline == 1 and layout.data == 1 and layout.micro_batches == 1
            and step.kernel_list is not None)


def _roofline(costs: Any, peak_flops: float, bandwidth: float, mfu: float) -> float:
    """``max(flops / (peak * mfu), bytes / bandwidth)`` of one phase (bytes unknown: the FLOP term)."""
    time = (costs.flops or 0) / (peak_flops * mfu)
    return max(time, costs.bytes_accessed / bandwidth) if costs.bytes_accessed is not None else time


def unknown_runs(phases: Sequence[Any]) -> list[str]:
    """The kernels of ``phases``' kernel lists whose runs are unknown (a loop
    whose trip count the program does not say), which `kernel_time.kernel_table`
    prices once each; collectives are priced apart."""
    return [k.name for costs in phases for k in (costs.kernel_list or ())
            if k.executions is None and k.category != "collective"]


def _priced(costs: Any, report: Any, narrow: float, hardware: Hardware,
            constants: calibration.Calibration) -> kernel_time.KernelSeconds:
    """One phase's compute on one device: its kernels priced one by one where
    the report holds the target's kernel list, else its totals."""
    if costs.kernel_list is not None:
        return kernel_time.price_kernels(costs.kernel_list, hardware.device, constants, hardware.arithmetic)
    share = device_share(costs, report.devices)
    return kernel_time.price_totals((costs.matmul_flops or 0) * share, (costs.memory_bound_bytes or 0) * narrow,
                                    costs.kernels or 0, hardware.device, report.dtype, constants, hardware.arithmetic,
                                    float8_flops=(costs.float8_flops or 0) * share)


SPLIT_TOLERANCE = 0.05
"""How far (relative) a device's share of a step's FLOP may be from 1 / devices and still be
taken for an even split: XLA's per-device count carries the work every device repeats (a
normalisation, an all-reduce's adds) and its own fusions' duplicates, a few percent."""


def device_share(costs: Any, devices: int) -> float:
    """The share of a phase's whole-step products (the jaxpr's ``matmul_flops``) that one device of
    its mesh computes: 1 / devices where XLA's per-device FLOP are that share of the whole step's
    (within `SPLIT_TOLERANCE`) or either figure is unknown; else XLA's share, up to 1 (a mesh axis
    no rule splits any parameter over: every device computes it all; a head left whole: 0.80 of a
    2-layer GPT-2 on model=4). One device: 1."""
    if devices <= 1:
        return 1.0
    if not costs.flops or not costs.jaxpr_flops:
        return 1.0 / devices
    share = costs.flops / costs.jaxpr_flops
    if abs(share * devices - 1) <= SPLIT_TOLERANCE:
        return 1.0 / devices
    return min(1.0, max(1.0 / devices, share))


def _optimal_note(report: Any, notes: list[str]) -> None:
    """A TPU target's own estimate of one micro-batch's step (``optimal_seconds``
    of its grad and update programs), beside this model's."""
    phases = getattr(report, "phases", {})
    found = [getattr(phases.get(p), "optimal_seconds", None) for p in ("grad", "update")]
    if all(found):
        notes.append(f"the target compiler's own estimate of one micro-batch's grad and update programs "
                     f"(optimal_seconds): {sum(found):.4g} s")


def speedup(small: StepEstimate, large: StepEstimate) -> float:
    """Throughput of ``large`` over ``small`` (samples per second, both priced
    by `predict`): the speed-up of going from one step to the other."""
    return (large.global_batch / large.prediction.seconds) / (small.global_batch / small.prediction.seconds)


def bandwidth_for_speedup(
    small: Any,
    large: Any,
    target: float,
    hardware: Hardware | None = None,
    *,
    lowest: float = 1e6,
    highest: float = 1e13,
    layouts: tuple[schedule.Layout, schedule.Layout] | None = None,
    **fields: Any,
) -> float | None:
    """The link bandwidth at which going from the analysis ``small`` to ``large``
    speeds throughput up by exactly ``target``.

    Both reports are priced by `predict` on one flat network (`Hardware.flat`:
    the given interconnect, default the device cluster's link between nodes,
    for its latency) whose bandwidth (bytes/s per device per direction) is
    varied between ``lowest`` and ``highest``; the speed-up grows with the
    bandwidth, and the answer is found by bisection to 1e-6 relative.

    Args:
      small, large: the two analyses (`xla_cost.Report`).
      target: the speed-up asked for.
      hardware, **fields: what they are priced on, as for `predict`.
      lowest, highest: the bandwidths searched between.
      layouts: the two steps' layouts (replicas, stages; None: one device each).

    Returns:
      The bandwidth, or None when ``target`` is out of reach in that range
      (even ``highest`` gives less, or ``lowest`` already gives more).
    """
    flat = _hardware("bandwidth_for_speedup", hardware, fields).flat()

    def at(bandwidth: float) -> float:
        priced = dataclasses.replace(flat, bandwidth=bandwidth)
        first, second = layouts or (None, None)
        return speedup(predict(small, priced, first), predict(large, priced, second))

    low, high = lowest, highest
    if not at(low) <= target <= at(high):
        return None
    while high / low > 1 + 1e-6:
        middle = math.sqrt(low * high)
        if at(middle) < target:
            low = middle
        else:
            high = middle
    return math.sqrt(low * high)


def priced_step(at: Point, hardware: Hardware, analyse: Callable[[RunConfig], Any]) -> StepEstimate:
    """`predict` of one point: its program's collectives and layout, its
    forward and backward compute from its reference program where it has one."""
    report = analyse(at.run)
    if at.reference is None:
        return predict(report, hardware, at.layout)
    step = predict(same_work(report, analyse(at.reference), at.phases), hardware, at.layout)
    on = mesh_text(at.reference.mesh) or "1 device"
    compiler = f"the {at.run.target} compiler" if at.run.target is not None else "the CPU"
    note = (f"compute of {', '.join(at.phases)} priced from the program on {on} "
            f"at the same samples per device (the same work; {compiler} compiles the sharded program with other "
            "fusions); the collectives from the sharded program")
    return dataclasses.replace(step, notes=(*step.notes, note))


def pricing(function: str, hardware: Hardware | None, fields: Mapping[str, Any], bound: bool,
             dtype: str) -> Hardware:
    """The hardware asked for, as a bound if ``bound`` (`Hardware.bound`, at the
    given ``mfu`` if any), checked for a step in ``dtype`` before anything is analysed."""
    priced = _hardware(function, hardware, fields)
    if bound:
        priced = dataclasses.replace(priced.bound(), mfu=1.0 if priced.mfu is None else priced.mfu)
    mfu, overlap = priced.mfu, priced.overlap
    if mfu is not None and (isinstance(mfu, bool) or not isinstance(mfu, (int, float)) or not 0 < mfu <= 1):
        raise InputError("mfu in (0, 1], or none for a prediction", repr(mfu),
                         "Pass e.g. --mfu 0.4 for a bound at 40% of peak, or leave it out.")
    if overlap is not None and (isinstance(overlap, bool) or not isinstance(overlap, (int, float))
                                or not 0 <= overlap <= 1):
        raise InputError("overlap in [0, 1], or none to schedule the gradients", repr(overlap),
                         "Pass e.g. --overlap 0 (nothing hidden), or leave it out.")
    priced.peak().require(priced.arithmetic or dtype)  # an unknown device, or one without a peak, is refused here
    return priced


def _check_devices(devices: Sequence[int]) -> list[int]:
    out = list(devices)
    if not out or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in out) \
            or out != sorted(set(out)):
        raise InputError(
            "device counts as increasing positive integers", repr(devices),
            "Pass e.g. --devices 1,2,4,8,16.",
        )
    return out


def run_config(function: str, model: Any, options: Mapping[str, Any],
          defaults: Mapping[str, Any]) -> tuple[RunConfig, dict[str, Any], dict[str, Any]]:
    """``model``'s canonical one-device `RunConfig` from the run fields among
    ``options`` (``batch_size``, ``optimizer``, ``dtype``, ``config``, ...),
    the `Hardware` fields and the `Parallelism` fields."""
    hardware, parallel, run = split_fields(function, options, Hardware, Parallelism, RunConfig)
    run = {**defaults, **run}
    if "model" in run:
        raise TypeError(f"{function}() got an unexpected keyword argument 'model'")
    run["config"] = dict(run.get("config") or {})
    return RunConfig(model, **run).canonical(), hardware, parallel


def target_pricing(run: RunConfig, hardware: Hardware | None, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The `Hardware` fields a run is priced with: for a run compiled for a
    target (`RunConfig.target`), its device where none is named (``device`` at
    its default and no ``hardware``; `target_device`).

    Raises:
      InputError: as `target_device`.
    """
    fields = dict(fields)
    if run.target is not None:
        fields["device"] = target_device(run.target, fields.get("device", getattr(hardware, "device", None)))
    return fields


def target_device(target: str, device: str | None) -> str:
    """The device a step compiled for ``target`` is priced on: the target's
    (``tpu-v5e`` for ``tpu-v5e:2x2``), where ``device`` is None or names it too.

    Raises:
      InputError: ``device`` names another device; an unknown target, or its
        compiler not installed (`xla_cost.analysis.options.check_target`).
    """
    found = check_target(target)
    if device is not None and devices.device(device).name != found.device:
        raise InputError(
            f"the device the step is compiled for (--target {found.name}: {found.device}) to price it on",
            f"--device {device}",
            f"Drop --device (device=): the target's {found.device} prices it; or compile for {device} "
            f"(--target {device}).")
    return found.device


def ready_devices(run: RunConfig, count: int) -> None:
    """Makes ``count`` devices ready for the runs' meshes: the CPU simulates
    them (`simulate_devices`), or a compile target's topology has them."""
    if run.target is None:
        simulate_devices(count)
    else:
        check_device_count(count)


def scaling(
    model: Any,
    devices: Sequence[int] = (1, 2, 4, 8),
    *,
    mesh_axis: str = "data",
    global_batch: int | None = None,
    hardware: Hardware | None = None,
    bound: bool = False,
    store: Any = None,
    # the layout around each point: `Parallelism`'s fields
    mesh: Mapping[str, int] | str | None = None,
    micro_batches: int = 1,
    chunks: int = 1,
    # the run: `xla_cost.RunConfig`'s fields
    batch_size: int | None = None,
    config: Mapping[str, Any] | None = None,
    optimizer: str = DEFAULT_OPTIMIZER,
    dtype: str = "float32",
    input_shape: tuple[int, ...] | None = None,
    input_dtype: str | None = None,
    target: str | None = None,
    # what it is priced on: `xla_cost.Hardware`'s fields, replacing ``hardware``'s
    device: str = "h100",
    interconnect: str | None = None,
    node: str | None = None,
    node_size: int | None = None,
    nics: int | None = None,
    bandwidth: float | None = None,
    latency: float | None = None,
    algorithm: str = "ring",
    overlap: float | None = None,
    mfu: float | None = None,
    bucket_bytes: float = schedule.DDP_BUCKET_BYTES,
    hierarchical: bool = True,
    arithmetic: str | None = None,
) -> ScalingResult:
    """The scaling curve of ``model`` over ``devices`` on ``mesh_axis``.

    Weak scaling by default: each device count K is analysed sharded
    (``mesh={mesh_axis: K}``) at batch ``batch_size * K``. With
    ``global_batch`` the batch stays fixed instead (strong scaling: each device
    gets ``global_batch / K`` samples; every K must divide it). With ``mesh``
    (`Parallelism.mesh`, without ``mesh_axis``), each point is K times that
    layout on ``mesh_axis``: K data-parallel replicas of it, or its analysed
    program sharded K ways more on ``fsdp``. Each analysis goes through the
    results store (a rerun reads it back) and is priced by `predict`: a
    prediction, or a bound with ``bound=True`` (`Hardware.bound`) or an
    ``mfu``. Every point's forward and backward compute is priced from the
    program without the grown axis at the same samples per device (the same
    work; the CPU compiles the sharded program with other fusions), so a weak
    data-parallel curve's efficiency is never above 1. The CPU simulates the
    devices; the function asks for them before JAX starts
    (`xla_cost.simulate_devices`). With a ``target`` every point is compiled
    for it instead, on its devices (GPU hosts, a TPU slice), and priced on it.

    Args:
      model: a zoo name, ``package.module:attr`` or a Linen or NNX module
        object (both with ``input_shape``).
      devices: the device counts grown on ``mesh_axis``, increasing.
      mesh_axis: the axis grown (`MESH_AXES_FOR_SCALING`).
      global_batch: samples per step over all devices, for strong scaling.
      hardware: what the curve is priced on (default `xla_cost.Hardware()`).
      bound: price bounds instead of predictions.
      store: the results store (a `xla_cost.Store` or a path; None: the default).
      mesh, micro_batches, chunks: the layout around each point (`Parallelism`'s
        fields; ``chunks`` model chunks a pipeline stage, the interleaved schedule).
      batch_size: samples per micro-batch per data-parallel rank (weak
        scaling; None: ``input_shape``'s first axis, as ``--input-shape``'s on
        the command line, 1 without it); not with
        ``global_batch``.
      config, optimizer, dtype, input_shape, input_dtype, target: the run's
        `xla_cost.RunConfig` fields (the model's arguments, adam:
        `xla_cost.choices.DEFAULT_OPTIMIZER`, ``float32``, a custom model's
        input shape and dtype, the device every point is compiled for: its
        own compiler's program, meshes on its devices, and priced on it
        unless ``device`` names it too; another device is refused).
      device, interconnect, node, node_size, nics, bandwidth, latency, algorithm,
        overlap, mfu, bucket_bytes, hierarchical, arithmetic: the fields of
        `xla_cost.Hardware` (documented there); each one not at its default
        replaces ``hardware``'s.

    Raises:
      InputError: ``batch_size`` and ``global_batch`` both given; device
        counts not increasing, an axis that does not grow the
        batch or is in ``mesh``, a global batch that some point does not
        divide, a pipeline of a model without ``n_layer``, a device
        without a published peak for the dtype, or a ``target`` unknown,
        without its compiler, or beside another ``device``.
    """
    if global_batch is None:  # weak scaling: the shape's first axis, as the command line takes it
        batch_size = input_batch(batch_size, input_shape)
    given = locals()
    options = {**changed_fields(Hardware, given), "mesh": mesh, "micro_batches": micro_batches, "chunks": chunks,
               **given_fields(RunConfig, given, exclude=("model", "mesh", *(("batch_size",) if batch_size is None
                                                                            else ())))}
    if global_batch is not None and options.get("batch_size") is not None:  # it would be dropped: B/K per device
        raise InputError("batch_size (--batch-size, weak scaling) or global_batch (--global-batch, strong "
                         "scaling), not both", f"batch_size={options['batch_size']!r} with "
                         f"global_batch={global_batch!r}", "Drop --batch-size: with --global-batch B each of K "
                         "devices gets B/K samples; or drop --global-batch to keep B samples per device.")
    one, fields, spread = run_config("scaling", model, options, {})
    hardware = pricing("scaling", hardware, target_pricing(one, hardware, fields), bound, one.dtype)
    counts = _check_devices(devices)
    _, mesh, micro = check_parallel(Parallelism(mesh_axis=mesh_axis, **spread))
    if mesh_axis in mesh:
        raise InputError(f"a mesh without the grown axis {mesh_axis}", mesh_text(mesh),
                         f"Drop {mesh_axis}= from --mesh: --devices grows it.")
    ranks = mesh.get("data", 1) * mesh.get("fsdp", 1) * micro
    if global_batch is not None:
        uneven = [k for k in counts if isinstance(global_batch, bool) or not isinstance(global_batch, int)
                  or global_batch < k * ranks or global_batch % (k * ranks)]
        if uneven:
            raise InputError(
                "a global batch that every point divides (devices x data and fsdp ranks x micro-batches)",
                f"{global_batch!r} over {uneven} devices",
                f"Pick a global batch that is a multiple of {max(counts) * ranks}, or drop the device counts that "
                "do not divide it.",
            )
    points = [point(one, mesh_axis, k, global_batch // (k * ranks) if global_batch is not None else one.batch_size,
                     mesh, micro, spread["chunks"]) for k in counts]
    ready_devices(one, max(mesh_devices(p.run.mesh) for p in points))
    analyse = analyser(store)
    steps = []
    for i, p in enumerate(points):
        progress.stage(f"{mesh_devices(p.run.mesh)} devices", i, len(points))
        steps.append(priced_step(p, hardware, analyse))
    curve = schedule.scaling_curve([(s.devices, s.global_batch, s.prediction) for s in steps])
    return ScalingResult(
        model=one.name, mesh_axis=mesh_axis, batch_size=None if global_batch is not None else one.batch_size,
        hardware=hardware, steps=tuple(steps), points=curve, global_batch=global_batch, mesh=mesh,
        micro_batches=micro, optimizer=one.optimizer, dtype=one.dtype, target=one.target, settings=dict(one.config),
        parameters=None if mesh.get("pipeline", 1) > 1 else analyse(points[0].run).parameters,  # a stage's otherwise
        layers=layers_of(one),
    )
