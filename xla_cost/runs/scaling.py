"""Predicted step time on many devices, the scaling curve, and training-run estimates.

Each point of a curve is a sharded analysis (`xla_cost.analyze` with
``mesh={axis: K}``: XLA's SPMD partitioner makes the per-device program and
its collectives) priced with the stated alpha-beta model of `xla_cost.parallel.comm`:

    step time = compute roofline + communication not hidden behind compute

where the roofline is ``max(FLOP / (peak * efficiency), bytes / bandwidth)``
per device from the device's published peak (the device registry,
`xla_cost.parallel.devices`), and the communication is every collective of the
train step (grad + update) on the device's cluster preset
(`xla_cost.parallel.comm.CLUSTERS`), ``overlap`` of it hidden (default
`xla_cost.parallel.schedule.DEFAULT_OVERLAP`). What it is priced on is one
`xla_cost.Hardware`; every function here takes it, or its fields as keywords.

What the model ignores: topology contention between concurrent
collectives, stragglers and launch jitter, the slow-down of compute that
shares memory bandwidth with communication, and kernels' efficiency below
peak unless ``efficiency`` (an MFU) says so.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from xla_cost.errors import InputError
from xla_cost.options import split_fields
from xla_cost.parallel import calibration, comm, schedule
from xla_cost import zoo
from xla_cost.parallel.hardware import Hardware
from xla_cost.parallel.sharding import simulate_devices
from xla_cost.present.document import Rendered, Section
from xla_cost.present.figures import figure, png
from xla_cost.runs.configs import RunConfig

__all__ = [
    "MESH_AXES_FOR_SCALING",
    "StepEstimate",
    "ScalingResult",
    "TrainingEstimate",
    "predict",
    "scaling",
    "estimate",
    "speedup",
    "bandwidth_for_speedup",
]

MESH_AXES_FOR_SCALING: tuple[str, ...] = ("data", "fsdp")
"""Axes a scaling curve grows (weak scaling: the per-device batch stays)."""


@dataclasses.dataclass(frozen=True)
class StepEstimate:
    """One sharded train step priced: per-device work and its predicted time.

    Attributes:
      devices: devices in the step (the analysed mesh, its pipeline stages and replicas).
      global_batch: samples per step over all devices.
      flops: train-step FLOP per device (grad + update, loop-corrected).
      bytes_accessed: train-step bytes per device (XLA's).
      communication_bytes: buffers the train step's collectives work on, per device.
      prediction: compute, communication, exposed communication and step seconds.
      collectives: each collective's time.
      notes: unknowns and assumptions met.
      parts: the predicted step's seconds by part: ``matmul`` and ``memory``
        (compute, calibrated; or ``roofline`` for a bound), ``tensor`` (the
        analysed mesh's blocking collectives), ``pipeline`` (the bubble and the
        stages' transfers), ``gradients`` (the exposed gradient reduction),
        ``update``.
      calibration: the calibration profile's description, or "" for a bound.
    """

    devices: int
    global_batch: int
    flops: int | None
    bytes_accessed: int | None
    communication_bytes: int | None
    prediction: schedule.StepPrediction
    collectives: tuple[comm.CollectiveTime, ...] = ()
    notes: tuple[str, ...] = ()
    parts: Mapping[str, float] = dataclasses.field(default_factory=dict)
    calibration: str = ""


def _hardware(function: str, hardware: Hardware | None, fields: Mapping[str, Any]) -> Hardware:
    """``hardware`` (default `Hardware()`) with ``fields`` replacing its own."""
    (given,) = split_fields(function, fields, Hardware)
    return dataclasses.replace(hardware or Hardware(), **given)


_GRADIENT_AXES = frozenset({"data", "fsdp"})
_HALF = frozenset({"bfloat16", "float16"})


def predict(report: Any, hardware: Hardware | None = None, layout: schedule.Layout | None = None,
            **fields: Any) -> StepEstimate:
    """The predicted train-step time of a (sharded) `xla_cost.Report` on some hardware.

    The report is one micro-batch's step on one pipeline stage of one replica
    (`xla_cost.parallel.schedule.Layout` says how many there are). Per device:

    * compute: with the device's calibration profile
      (`xla_cost.parallel.calibration`), the matrix products' FLOP at its share
      of the peak plus the memory-bound rest's bytes at its share of the
      bandwidth; with a fixed ``mfu`` (a bound) the roofline
      ``max(FLOP / (peak * mfu), bytes / bandwidth)``;
    * the analysed mesh's collectives over ``model`` block the step (tensor
      parallelism); its gradient collectives over ``data``/``fsdp`` (and the
      layout's replicas) are reduced in buckets that start as the backward pass
      makes them, and only what runs past the backward pass is exposed (or a
      fixed share is hidden: ``overlap``);
    * a pipeline takes ``(m + p - 1) / v``-style slots of the slowest stage
      (`xla_cost.parallel.schedule.pipeline_seconds`), each with its transfers;
    * the optimizer's update at the end.

    A step compiled on the CPU in bfloat16 or float16 moves float32 buffers
    (XLA's CPU emulates 16-bit arithmetic in float32); its memory-bound bytes
    and activation collectives are halved for the 16-bit devices it is priced on.

    Args:
      report: an analysis, sharded (``mesh=``) or on one device.
      hardware: what it is priced on (default `xla_cost.Hardware()`: H100s
        on their cluster, calibrated, scheduled).
      layout: stages, micro-batches and replicas around the analysed step.
      **fields: `xla_cost.Hardware` fields replacing ``hardware``'s.

    Raises:
      InputError: unknown train-step FLOP, or a prediction asked of a device
        without a calibration profile (pass ``mfu=`` for a bound).
    """
    hardware = _hardware("predict", hardware, fields)
    layout = layout or schedule.Layout()
    peak, cluster = hardware.peak(), hardware.cluster()
    step, grad, update = (report.phases[p] for p in ("train_step", "grad", "update"))
    if step.flops is None:
        raise InputError("a report with known train-step FLOP", "unknown FLOP (see its notes)",
                         "Analyse with counter='xla' on a backend with a cost analysis.")
    narrow = 0.5 if report.backend == "cpu" and report.dtype in _HALF else 1.0
    tensor, gradients = [], []
    for c in (*grad.communication, *update.communication):
        (gradients if set(c.axes) <= _GRADIENT_AXES and c.axes else tensor).append(c)
    tensor = [dataclasses.replace(c, bytes=int(c.bytes * narrow)) for c in tensor]
    tensor_s, tensor_times, notes = comm.communication_time(tensor, cluster)
    notes = list(notes)
    if narrow != 1.0:
        notes.append(f"compiled on the CPU in {report.dtype}: memory-bound bytes and activation collectives "
                     "halved for a 16-bit device (XLA's CPU widens them to float32)")
    flops_peak = peak.for_dtype(hardware.arithmetic or report.dtype)
    if hardware.is_bound:
        compute = _roofline(grad, flops_peak, peak.bandwidth, hardware.mfu)
        updating = _roofline(update, flops_peak, peak.bandwidth, hardware.mfu)
        parts, described = {"roofline": compute}, ""
    else:
        profile = calibration.profile(hardware.device)
        if profile is None:
            raise InputError(
                f"a device with a calibration profile ({', '.join(sorted(calibration.profiles()))}) for a prediction",
                repr(hardware.device), "Pass mfu= (e.g. --mfu 1.0) for a bound instead.")
        matmul, memory = _calibrated(grad, report.devices, narrow, flops_peak, peak.bandwidth, profile)
        compute = matmul + memory
        updating = sum(_calibrated(update, report.devices, narrow, flops_peak, peak.bandwidth, profile))
        parts, described = {"matmul": matmul, "memory": memory}, _describe(profile)
    per_micro_batch = compute + tensor_s
    if layout.pipeline > 1:
        link = cluster.inter if cluster.node_size <= report.devices else cluster.intra
        # each of the stage's devices sends its share (Megatron's scatter/gather)
        per_micro_batch += 2 * layout.stage_bytes / report.devices / link.bandwidth + 2 * link.latency
    pipelined = schedule.pipeline_seconds(per_micro_batch, layout.pipeline, layout.micro_batches, layout.chunks)
    grad_s, grad_times, grad_notes, exposed = _gradients(
        gradients, report, layout, cluster, hardware, backward=compute * _backward_share(report))
    notes += grad_notes
    seconds = pipelined + exposed + updating
    parts.update(tensor=tensor_s * layout.micro_batches, update=updating, gradients=exposed,
                 pipeline=pipelined - layout.micro_batches * (compute + tensor_s))
    communication = grad_s + tensor_s * layout.micro_batches
    prediction = schedule.StepPrediction(
        compute_seconds=layout.micro_batches * compute + updating,
        communication_seconds=communication,
        exposed_communication_seconds=exposed + parts["tensor"] + parts["pipeline"],
        seconds=seconds,
        overlap=0.0 if communication == 0 else 1 - (exposed + parts["tensor"]) / communication,
    )
    replicas = layout.data * layout.pipeline
    return StepEstimate(
        devices=report.devices * replicas, global_batch=report.batch_size * layout.micro_batches * layout.data,
        flops=step.flops, bytes_accessed=step.bytes_accessed, communication_bytes=step.communication_bytes,
        prediction=prediction, collectives=(*tensor_times, *grad_times), notes=tuple(dict.fromkeys(notes)),
        parts=parts, calibration=described,
    )


def _roofline(costs: Any, peak_flops: float, bandwidth: float, mfu: float) -> float:
    """``max(flops / (peak * mfu), bytes / bandwidth)`` of one phase (bytes unknown: the FLOP term)."""
    time = (costs.flops or 0) / (peak_flops * mfu)
    return max(time, costs.bytes_accessed / bandwidth) if costs.bytes_accessed is not None else time


def _calibrated(costs: Any, devices: int, narrow: float, peak_flops: float, bandwidth: float,
                profile: calibration.Calibration) -> tuple[float, float]:
    """(matrix products' seconds, memory-bound seconds) of one phase on one device."""
    matmul = (costs.matmul_flops or 0) / devices
    other = (costs.memory_bound_bytes or 0) * narrow
    return (calibration.compute_seconds(matmul, 0, peak_flops, bandwidth, profile),
            calibration.compute_seconds(0, other, peak_flops, bandwidth, profile, kernels=costs.kernels or 0))


def _describe(profile: calibration.Calibration) -> str:
    launch = f", {profile.launch * 1e6:.2f} µs per kernel" if profile.launch else ""
    return (f"{profile.device}: matrix products at {profile.matmul:.3f} of peak, memory-bound work at "
            f"{profile.memory:.3f} of the bandwidth{launch} (fitted on {', '.join(profile.fitted_on) or 'nothing'})")


def _backward_share(report: Any) -> float:
    """The backward pass's share of the grad program's matrix products (2/3
    for dense layers, whose backward pass has two products for the forward's one)."""
    grad, backward = report.phases["grad"].matmul_flops, report.phases["backward"].matmul_flops
    return backward / grad if grad and backward is not None else 2 / 3


PIECES = 16
"""Gradient pieces a reduction not read from the compiled program is split into,
ready at even steps of the backward pass (`predict`'s replicas)."""


def _gradients(
    rows: list[Any], report: Any, layout: schedule.Layout, cluster: comm.Cluster, hardware: Hardware,
    backward: float,
) -> tuple[float, tuple[comm.CollectiveTime, ...], list[str], float]:
    """(seconds, times, notes, exposed seconds) of the gradient reduction.

    The analysed mesh's gradient collectives, in the order XLA runs them (the
    backward pass's), and, over the layout's replicas, an all-reduce of the
    parameter bytes per device (strided over the nodes when the analysed mesh
    fills them), in `PIECES` pieces. Each group of like collectives is reduced
    in buckets of ``bucket_bytes``, each starting once its gradients exist and
    the link is free; what runs past the backward pass is exposed. A pipeline
    reduces after its last micro-batch (Megatron's schedule): nothing hidden.
    """
    strided = True if report.devices > 1 and report.devices >= cluster.node_size else None
    rows = list(rows)
    if layout.data > 1:
        per_device = int(report.sharding.get("params_bytes_per_device") or 0) or 4 * report.parameters
        rows += [{"kind": "all-reduce", "bytes": per_device // PIECES, "group_size": layout.data,
                  "executions": 1, "span_nodes": strided} for _ in range(PIECES)]
    total, times, notes = comm.communication_time(rows, cluster)
    notes = list(notes)
    if not times:
        return 0.0, (), notes, 0.0
    if hardware.overlap is not None:
        return total, times, notes, max((1 - hardware.overlap) * total, total - backward, 0.0)
    if layout.pipeline > 1:
        notes.append("gradients reduced after the pipeline's last micro-batch (Megatron's schedule): nothing hidden")
        hidden_behind = 0.0
    else:
        hidden_behind = backward
    groups: dict[tuple[Any, ...], list[schedule.Piece]] = {}
    spans = [(r.get("span_nodes") if isinstance(r, Mapping) else None) for r in rows]
    for index, (time, span) in enumerate(zip(times, spans)):
        key = (time.kind, time.group_size, span)
        groups.setdefault(key, []).append(schedule.Piece(time.nbytes * time.executions, (index + 1) / len(times)))
    slots = []
    for (kind, size, span), pieces in groups.items():
        for piece in schedule.bucket(pieces, hardware.bucket_bytes):
            slots.append((piece.ready * hidden_behind, cluster.time(kind, piece.nbytes, size, span)[0]))
    slots.sort()
    durations = [d for _, d in slots]
    exposed = schedule.exposed_after([r for r, _ in slots], durations, hidden_behind)
    return sum(durations), times, notes, exposed


def _parameter_bytes(report: Any) -> int:
    """The parameters' bytes on one device of a report without a mesh (float32: 4 per parameter)."""
    return 4 * report.parameters


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

    Returns:
      The bandwidth, or None when ``target`` is out of reach in that range
      (even ``highest`` gives less, or ``lowest`` already gives more).
    """
    flat = _hardware("bandwidth_for_speedup", hardware, fields).flat()

    def at(bandwidth: float) -> float:
        priced = dataclasses.replace(flat, bandwidth=bandwidth)
        return speedup(predict(small, priced), predict(large, priced))

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


@dataclasses.dataclass(frozen=True)
class ScalingResult(Rendered):
    """A scaling curve: one `StepEstimate` per device count, and the curve.

    Attributes:
      model: the zoo name (or ``package.module:attr``).
      mesh_axis: the axis grown (``data`` or ``fsdp``).
      batch_size: samples per device (weak scaling), or None under strong scaling.
      hardware: what the curve is priced on.
      steps: per device count.
      points: speed-up and efficiency per device count (`xla_cost.parallel.schedule.ScalingPoint`).
      global_batch: samples per step over all devices, fixed (strong scaling),
        or None under weak scaling.
    """

    model: str
    mesh_axis: str
    batch_size: int | None
    hardware: Hardware
    steps: tuple[StepEstimate, ...]
    points: tuple[schedule.ScalingPoint, ...]
    global_batch: int | None = None

    @property
    def device(self) -> str:
        return self.hardware.device

    @property
    def interconnect(self) -> str:
        """The interconnect given, or ``preset`` (the device's cluster)."""
        return self.hardware.interconnect or "preset"

    @property
    def algorithm(self) -> str:
        return self.hardware.algorithm

    @property
    def overlap(self) -> float:
        return self.hardware.overlap

    @property
    def efficiency(self) -> float:
        """The share of peak FLOP/s the compute is priced at (`xla_cost.Hardware.mfu`)."""
        return self.hardware.mfu

    def describe(self) -> str:
        """One line: what was priced."""
        batch = (f"{self.global_batch} samples per step over all devices (strong scaling)"
                 if self.global_batch is not None else f"{self.batch_size} sample(s) per device")
        return (
            f"{self.model}: {self.mesh_axis} parallel, {batch}, "
            f"{self.device} ({self.interconnect} interconnect, {self.algorithm} collectives), "
            f"overlap {self.overlap:g}, "
            f"compute at {self.efficiency:g} of peak"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "mesh_axis": self.mesh_axis, "batch_size": self.batch_size,
            "global_batch": self.global_batch,
            "device": self.device, "interconnect": self.interconnect, "algorithm": self.algorithm,
            "overlap": self.overlap,
            "efficiency": self.efficiency, "points": self.to_frame().to_dict(orient="records"),
        }

    def to_frame(self) -> pd.DataFrame:
        """One row per device count."""
        rows = []
        for step, point in zip(self.steps, self.points):
            rows.append({
                "devices": point.devices, "global_batch": point.global_batch,
                "flops_per_device": step.flops, "communication_bytes_per_device": step.communication_bytes,
                "compute_s": point.compute_seconds, "communication_s": point.communication_seconds,
                "exposed_communication_s": point.exposed_communication_seconds,
                "step_s": point.step_seconds, "samples_per_s": point.samples_per_second,
                "speedup": point.speedup, "efficiency": point.efficiency,
            })
        return pd.DataFrame(rows)

    def plot(self, path: str) -> str:
        """Writes the speed-up and efficiency against devices to a PNG, in the
        reports' figure style (`xla_cost.present.figures`)."""
        frame = self.to_frame()

        def draw() -> Any:
            fig, axes = figure(10, 4, 1, 2)
            left, right = axes[0]
            left.plot(frame["devices"], frame["speedup"], "o-", label="predicted")
            left.plot(frame["devices"], frame["devices"] / frame["devices"].iloc[0], "--", color="grey",
                      label="linear")
            right.plot(frame["devices"], frame["efficiency"], "o-")
            for ax, label in ((left, "speed-up (x)"), (right, "scaling efficiency")):
                ax.set_xscale("log", base=2)
                ax.set_xlabel("devices")
                ax.set_ylabel(label)
            left.set_yscale("log", base=2)
            left.legend()
            right.set_ylim(0, 1.05)
            fig.suptitle(self.describe(), fontsize=9)
            return fig

        with open(path, "wb") as handle:
            handle.write(png(draw))
        return path


def _check_devices(devices: Sequence[int]) -> list[int]:
    out = list(devices)
    if not out or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in out) \
            or out != sorted(set(out)):
        raise InputError(
            "device counts as increasing positive integers", repr(devices),
            "Pass e.g. --devices 1,2,4,8,16.",
        )
    return out


def _runs(function: str, model: str, options: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[RunConfig, dict[str, Any]]:
    """``model``'s one-device `RunConfig` from the run fields among ``options``
    (``batch_size``, ``optimizer``, ``dtype``, ``config``, ...), and the
    remaining `Hardware` fields."""
    hardware, run = split_fields(function, options, Hardware, RunConfig)
    run = {**defaults, **run}
    if "model" in run or "mesh" in run:
        raise TypeError(f"{function}() got an unexpected keyword argument {('model' if 'model' in run else 'mesh')!r}")
    run["config"] = dict(run.get("config") or {})
    return RunConfig(model, **run), hardware


def _store(store: Any) -> Any:
    return store if store is not None else True


def scaling(
    model: str,
    devices: Sequence[int] = (1, 2, 4, 8),
    *,
    mesh_axis: str = "data",
    global_batch: int | None = None,
    hardware: Hardware | None = None,
    store: Any = None,
    **options: Any,
) -> ScalingResult:
    """The scaling curve of ``model`` over ``devices`` on ``mesh_axis``.

    Weak scaling by default: each device count K is analysed sharded
    (``mesh={mesh_axis: K}``) at batch ``batch_size * K``. With
    ``global_batch`` the batch stays fixed instead (strong scaling: each device
    gets ``global_batch / K`` samples; every K must divide it). Each analysis
    goes through the results store (a rerun reads it back) and is priced by
    `predict`. The CPU simulates the devices: call
    `xla_cost.simulate_devices(max(devices))` before JAX starts (the CLI does).

    Args:
      model: a zoo name or ``package.module:attr``.
      devices: the device counts, increasing.
      mesh_axis: the axis grown (`MESH_AXES_FOR_SCALING`).
      global_batch: samples per step over all devices, for strong scaling.
      hardware: what the curve is priced on (default `xla_cost.Hardware()`).
      store: the results store (a `xla_cost.Store` or a path; None: the default).
      **options: `xla_cost.Hardware` fields (``device``, ``algorithm``, ...)
        and the run's `xla_cost.RunConfig` fields: ``batch_size`` (samples per
        device, default 1), ``optimizer`` (default ``sgd``), ``dtype``, ``config``.

    Raises:
      InputError: device counts not increasing, an axis that does not grow the
        batch, or a global batch that some device count does not divide.
    """
    run, fields = _runs("scaling", model, options, {})
    hardware = _hardware("scaling", hardware, fields)
    counts = _check_devices(devices)
    if mesh_axis not in MESH_AXES_FOR_SCALING:
        raise InputError(f"--mesh-axis one of {', '.join(MESH_AXES_FOR_SCALING)}", repr(mesh_axis),
                         "Grow data (DDP) or fsdp (ZeRO-3); model parallelism keeps the batch.")
    if global_batch is not None:
        uneven = [k for k in counts if isinstance(global_batch, bool) or not isinstance(global_batch, int)
                  or global_batch < k or global_batch % k]
        if uneven:
            raise InputError(
                "a global batch that every device count divides", f"{global_batch!r} over {uneven} devices",
                f"Pick a global batch that is a multiple of {max(counts)}, or drop the device counts that "
                "do not divide it.",
            )
    simulate_devices(max(counts))
    steps = []
    for k in counts:
        sharded = dataclasses.replace(run, batch_size=global_batch if global_batch is not None else run.batch_size * k,
                                      mesh={mesh_axis: k} if k > 1 else {})
        report = sharded.canonical().run(cache=_store(store))
        steps.append(predict(report, hardware))
    points = schedule.scaling_curve([(s.devices, s.global_batch, s.prediction) for s in steps])
    return ScalingResult(
        model=model, mesh_axis=mesh_axis, batch_size=None if global_batch is not None else run.batch_size,
        hardware=hardware, steps=tuple(steps), points=points, global_batch=global_batch,
    )


@dataclasses.dataclass(frozen=True)
class TrainingEstimate(Rendered):
    """A whole training run: total FLOP and time on ``devices``.

    Attributes:
      model: the model's canonical name.
      devices: devices the run is priced on.
      samples: samples processed (``samples * epochs`` or tokens / sequence length).
      tokens: tokens processed (token models), else None.
      flops_per_sample: train-step FLOP per sample (forward + backward + update).
      total_flops: the run's FLOP.
      steps: optimizer steps at the global batch.
      step: the sharded step priced on the devices.
      seconds: the run's predicted time.
    """

    model: str
    devices: int
    samples: int
    tokens: int | None
    flops_per_sample: float
    total_flops: float
    steps: int
    step: StepEstimate
    seconds: float

    def describe(self) -> str:
        what = f"{self.tokens:,} tokens" if self.tokens is not None else f"{self.samples:,} samples"
        return f"{self.model}: {what} on {self.devices} device(s)"

    def to_dict(self) -> dict[str, Any]:
        p = self.step.prediction
        return {
            "model": self.model, "devices": self.devices, "samples": self.samples, "tokens": self.tokens,
            "flops_per_sample": self.flops_per_sample, "total_flops": self.total_flops, "steps": self.steps,
            "step_seconds": p.seconds, "compute_seconds": p.compute_seconds,
            "communication_seconds": p.communication_seconds, "seconds": self.seconds,
            "hours": self.seconds / 3600,
        }

    def to_frame(self) -> pd.DataFrame:
        """One row: every figure of `to_dict`."""
        return pd.DataFrame([self.to_dict()])

    def sections(self) -> list[Section]:
        rows = [{"figure": key, "value": value} for key, value in self.to_dict().items()
                if key != "model" and value is not None]
        return [Section("", pd.DataFrame(rows, dtype=object))]


def estimate(
    model: str,
    *,
    samples: int | None = None,
    epochs: float = 1,
    tokens: float | None = None,
    devices: int = 1,
    mesh_axis: str = "data",
    hardware: Hardware | None = None,
    store: Any = None,
    **options: Any,
) -> TrainingEstimate:
    """Total training FLOP and time of ``samples * epochs`` (or ``tokens``) on ``devices``.

    The FLOP per sample are the one-device train step's (loop-corrected) over
    its batch; the time is the number of steps at the global batch
    (``batch_size * devices``) times the step `predict` gives for the sharded
    step (`xla_cost.Hardware.mfu` as its compute efficiency; by default 1,
    the roofline at peak: a lower bound on time).

    Args:
      model: a zoo name or ``package.module:attr``.
      samples, epochs: the data set, in samples (images), and passes over it.
      tokens: instead, the tokens of a language model's run.
      devices, mesh_axis: the devices the step is split over, and how.
      hardware: what the run is priced on (default `xla_cost.Hardware()`).
      store: the results store (None: the default).
      **options: `xla_cost.Hardware` fields (``device``, ``mfu``, ...) and
        the run's `xla_cost.RunConfig` fields: ``batch_size`` (per device,
        default 1), ``optimizer`` (default ``adam``), ``dtype``, ``config``.
    """
    run, fields = _runs("estimate", model, options, {"optimizer": "adam"})
    hardware = _hardware("estimate", hardware, fields)
    if (samples is None) == (tokens is None):
        raise InputError("--samples N [--epochs E] or --tokens T", "both or neither",
                         "Give the dataset as samples (images) or tokens (language models).")
    mfu = hardware.mfu
    if devices < 1 or isinstance(mfu, bool) or not isinstance(mfu, (int, float)) or not 0 < mfu <= 1:
        raise InputError("devices >= 1 and mfu in (0, 1]", f"devices={devices}, mfu={mfu}",
                         "Pass e.g. --devices 8 --mfu 0.4.")
    simulate_devices(devices)
    one = run.canonical()
    single = one.run(cache=_store(store))
    flops = single.phases["train_step"].flops
    if flops is None:
        raise InputError("a model whose train-step FLOP are known", "unknown", "See the analysis notes.")
    per_sample = flops / single.batch_size
    sharded = single if devices == 1 else dataclasses.replace(
        one, batch_size=one.batch_size * devices, mesh={mesh_axis: devices}
    ).run(cache=_store(store))
    step = predict(sharded, hardware)
    token_count = None
    if tokens is not None:
        length = zoo.example_inputs(one.model, 1, **dict(one.config)).shape[1]
        token_count = int(tokens)
        n = token_count / length
    else:
        n = samples * epochs  # type: ignore[operator]
    steps = math.ceil(n / (one.batch_size * devices))
    return TrainingEstimate(
        model=one.model, devices=devices, samples=int(n), tokens=token_count,
        flops_per_sample=per_sample, total_flops=per_sample * n, steps=steps, step=step,
        seconds=steps * step.prediction.seconds,
    )
