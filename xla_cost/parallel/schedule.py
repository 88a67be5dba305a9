"""How a training step's communication is scheduled against its compute.

Three mechanisms real systems use, each a pure function of times and sizes:

* **buckets**: gradients are reduced in buckets, not tensor by tensor (PyTorch
  DDP's 25 MB buckets, Li et al. 2020; XLA's all-reduce combiner on GPUs): one
  collective, one latency, per bucket (`bucket`).
* **overlap**: a bucket is reduced as soon as the backward pass has made its
  gradients, on a link that runs one collective at a time, while the backward
  pass goes on; what remains after the backward pass ends is exposed
  (`exposed_after`).
* **pipelines**: a pipeline of ``p`` stages over ``m`` micro-batches with the
  1F1B schedule takes ``(m + p - 1)`` micro-batch slots of the slowest stage,
  an idle bubble of ``(p - 1) / m`` of the work; with ``v`` interleaved model
  chunks per stage the bubble shrinks to ``(p - 1) / (v m)`` (Narayanan et al.
  2021, section 2.2) (`pipeline_seconds`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from xla_cost.errors import InputError
from xla_cost.parallel.comm import check_bandwidth, is_finite_number

__all__ = [
    "DDP_BUCKET_BYTES", "Layout", "Piece", "bucket", "exposed_after", "pipeline_seconds", "bubble_fraction",
    "DEFAULT_OVERLAP", "StepPrediction", "predict_step", "ScalingPoint", "scaling_curve",
]

DDP_BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's default gradient bucket: 25 MB (``bucket_cap_mb=25``; Li et al.
2020, "PyTorch Distributed", section 4.2.2)."""


@dataclasses.dataclass(frozen=True)
class Piece:
    """Gradient bytes that become ready together.

    Attributes:
      nbytes: the bytes to reduce.
      ready: the fraction of the backward pass done when they are ready, in
        [0, 1] (the last layer's gradients first).
    """

    nbytes: int
    ready: float


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a step is spread beyond the analysed program: pipeline stages,
    micro-batches and data-parallel replicas.

    The analysed program (a `xla_cost.Report`, sharded over its own mesh or
    not) is one micro-batch's forward and backward pass on one pipeline stage
    of one replica; the layout says how many of each there are.

    Attributes:
      pipeline: pipeline stages ``p`` (the analysed program is the slowest).
      micro_batches: micro-batches per step ``m`` per replica (gradient
        accumulation without a pipeline).
      chunks: model chunks per stage ``v`` of the interleaved schedule.
      data: data-parallel replicas besides the analysed mesh's own ``data``
        axis: their gradient all-reduce is priced on the analysed program's
        parameter bytes per device, one device per node in each group.
      stage_bytes: activation bytes a stage sends the next per micro-batch
        (and the gradient it receives back).
    """

    pipeline: int = 1
    micro_batches: int = 1
    chunks: int = 1
    data: int = 1
    stage_bytes: int = 0

    def __post_init__(self) -> None:
        bubble_fraction(self.pipeline, self.micro_batches, self.chunks)  # checks the three
        if isinstance(self.data, bool) or not isinstance(self.data, int) or self.data < 1:
            raise InputError("data-parallel replicas, an integer >= 1", repr(self.data), "Pass e.g. data=8.")
        if isinstance(self.stage_bytes, bool) or not isinstance(self.stage_bytes, int) or self.stage_bytes < 0:
            raise InputError("stage bytes, an integer >= 0", repr(self.stage_bytes),
                             "Pass the activation bytes a stage sends per micro-batch.")


def bucket(pieces: Sequence[Piece], bucket_bytes: float) -> tuple[Piece, ...]:
    """``pieces`` (in the order the backward pass makes them) merged into buckets
    of at least ``bucket_bytes`` each (the last may be smaller); a bucket is
    ready when its last piece is. ``bucket_bytes`` 0 keeps every piece apart.

    Raises:
      InputError: a negative bucket size.
    """
    if not bucket_bytes >= 0:
        raise InputError("a bucket size >= 0 bytes", repr(bucket_bytes), "Pass e.g. 25 * 2**20 (PyTorch DDP's default).")
    out: list[Piece] = []
    size, ready = 0, 0.0
    for piece in sorted(pieces, key=lambda p: p.ready):
        size, ready = size + piece.nbytes, max(ready, piece.ready)
        if size >= bucket_bytes:
            out.append(Piece(size, ready))
            size, ready = 0, 0.0
    if size:
        out.append(Piece(size, ready))
    return tuple(out)


def exposed_after(ready_seconds: Sequence[float], durations: Sequence[float], end: float) -> float:
    """Seconds the communication runs past ``end`` (the backward pass's end).

    Collectives run one at a time, each no earlier than its ``ready_seconds``
    (in the order given) and after the one before it.
    """
    finish = 0.0
    for ready, seconds in zip(ready_seconds, durations):
        finish = max(finish, ready) + seconds
    return max(0.0, finish - end)


def bubble_fraction(stages: int, micro_batches: int, chunks: int = 1) -> float:
    """The 1F1B pipeline's idle time over its work: ``(p - 1) / (v m)``."""
    for value, what in ((stages, "pipeline stages"), (micro_batches, "micro-batches"), (chunks, "model chunks per stage")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{what}, an integer >= 1", repr(value), "Pass e.g. stages=8, micro_batches=64.")
    return (stages - 1) / (chunks * micro_batches)


def pipeline_seconds(micro_batch_seconds: float, stages: int, micro_batches: int, chunks: int = 1) -> float:
    """The time of ``micro_batches`` through ``stages`` stages, one micro-batch's
    forward and backward on the slowest stage taking ``micro_batch_seconds``:
    ``m t (1 + (p - 1) / (v m))``."""
    return micro_batches * micro_batch_seconds * (1 + bubble_fraction(stages, micro_batches, chunks))


DEFAULT_OVERLAP: float = 0.0
"""The share of communication that hides behind compute by default: none.

Data-parallel training (PyTorch DDP, FSDP, XLA's asynchronous collectives)
does overlap the gradient collectives with the backward pass, but how much
depends on the bucket sizes, the scheduler and the order of layers, which a
static count does not know. With 0.0 the predicted step time is an upper
bound (compute + all of the communication). Pass ``overlap=1.0`` for perfect
overlap, where only what exceeds compute shows: ``max(0, comm - compute)``.
"""


@dataclasses.dataclass(frozen=True)
class StepPrediction:
    """Predicted time of one training step on one device of a sharded run.

    Attributes:
      compute_seconds: the roofline,
        ``max(flops / (peak_flops * efficiency), bytes / peak_bandwidth)``.
      communication_seconds: the collectives' time (`communication_time`).
      exposed_communication_seconds: what does not hide behind compute:
        ``max((1 - overlap) * communication, communication - compute, 0)``.
      seconds: ``compute_seconds + exposed_communication_seconds``.
      overlap: the share of communication assumed to overlap compute.
    """

    compute_seconds: float
    communication_seconds: float
    exposed_communication_seconds: float
    seconds: float
    overlap: float


def _check_fraction(value: Any, what: str, low_open: bool, fix: str) -> None:
    ok = is_finite_number(value) and (0 < value <= 1 if low_open else 0 <= value <= 1)
    if not ok:
        interval = "(0, 1]" if low_open else "[0, 1]"
        raise InputError(f"{what} in {interval}", repr(value), fix)


def _check_nonnegative(value: Any, what: str) -> None:
    if not is_finite_number(value) or value < 0:
        raise InputError(f"{what}, a finite number >= 0", repr(value), f"Pass the {what} of the step.")


def predict_step(
    flops: float,
    bytes_accessed: float | None,
    communication_seconds: float,
    *,
    peak_flops: float,
    peak_bandwidth: float | None,
    efficiency: float = 1.0,
    overlap: float = DEFAULT_OVERLAP,
) -> StepPrediction:
    """Step time = roofline compute + the communication that compute does not hide.

    Args:
      flops: FLOP per step per device.
      bytes_accessed: bytes of memory traffic per step per device; None leaves
        the memory term out.
      communication_seconds: the collectives' time per step.
      peak_flops: the device's peak FLOP/s (e.g. `xla_cost.analysis.timing.device_peak`).
      peak_bandwidth: the device's memory bandwidth, bytes/s; None leaves the
        memory term out.
      efficiency: the share of peak FLOP/s reached (an MFU-like factor), in
        (0, 1]; applied to the FLOP term only.
      overlap: the share of communication that overlaps compute, in [0, 1]
        (`DEFAULT_OVERLAP`).

    Raises:
      InputError: an overlap outside [0, 1], an efficiency outside (0, 1], a
        peak that is not > 0, or a negative count.
    """
    _check_fraction(overlap, "an overlap", False,
                    "Pass 0 for no overlap (the default) up to 1 for perfect overlap.")
    _check_fraction(efficiency, "an efficiency", True,
                    "Pass the share of peak FLOP/s reached, e.g. 0.4 for 40% MFU.")
    _check_nonnegative(flops, "FLOP count")
    _check_nonnegative(communication_seconds, "communication seconds")
    if not is_finite_number(peak_flops) or peak_flops <= 0:
        raise InputError("a peak FLOP/s > 0", repr(peak_flops),
                         "Pass the device's peak, e.g. 989.4e12 for an H100 SXM in bfloat16.")
    compute = flops / (peak_flops * efficiency)
    if bytes_accessed is not None and peak_bandwidth is not None:
        _check_nonnegative(bytes_accessed, "bytes accessed")
        check_bandwidth(peak_bandwidth, "peak memory bandwidth")
        compute = max(compute, bytes_accessed / peak_bandwidth)
    comm = float(communication_seconds)
    exposed = max((1 - overlap) * comm, comm - compute, 0.0)
    return StepPrediction(
        compute_seconds=compute,
        communication_seconds=comm,
        exposed_communication_seconds=exposed,
        seconds=compute + exposed,
        overlap=float(overlap),
    )


@dataclasses.dataclass(frozen=True)
class ScalingPoint:
    """One point of a scaling curve.

    Attributes:
      devices: number of devices.
      global_batch: samples per step over all devices.
      step_seconds, compute_seconds, communication_seconds,
        exposed_communication_seconds: from the point's `StepPrediction`.
      samples_per_second: ``global_batch / step_seconds``.
      speedup: throughput over the first point's throughput.
      efficiency: ``speedup / (devices / first point's devices)``; 1.0 is
        linear scaling.
    """

    devices: int
    global_batch: int
    step_seconds: float
    compute_seconds: float
    communication_seconds: float
    exposed_communication_seconds: float
    samples_per_second: float
    speedup: float
    efficiency: float


def scaling_curve(points: Sequence[tuple[int, int, StepPrediction]]) -> tuple[ScalingPoint, ...]:
    """Throughput, speed-up and scaling efficiency over device counts.

    Args:
      points: ``(devices, global_batch, prediction)`` in increasing devices;
        for weak scaling the global batch grows with the devices, for strong
        scaling it stays fixed.

    Returns:
      One `ScalingPoint` per point; the first has speed-up and efficiency 1.

    Raises:
      InputError: no points, devices not increasing integers >= 1, a global
        batch < 1, or a prediction of zero seconds.
    """
    if not points:
        raise InputError("at least one (devices, global_batch, prediction) point", "none",
                         "Pass the predictions at each device count.")
    out: list[ScalingPoint] = []
    previous = 0
    for devices, batch, prediction in points:
        if not isinstance(devices, int) or isinstance(devices, bool) or devices <= previous:
            raise InputError("device counts that are increasing integers >= 1", repr(devices),
                             "Sort the points by device count, each count once.")
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise InputError("a global batch, an integer >= 1", repr(batch),
                             "Pass the samples per step over all devices.")
        if not prediction.seconds > 0:
            raise InputError("a step time > 0", repr(prediction.seconds),
                             "Predict the step with a FLOP count > 0.")
        previous = devices
        throughput = batch / prediction.seconds
        first = out[0] if out else None
        speedup = throughput / first.samples_per_second if first else 1.0
        efficiency = speedup / (devices / first.devices) if first else 1.0
        out.append(ScalingPoint(
            devices=devices, global_batch=batch, step_seconds=prediction.seconds,
            compute_seconds=prediction.compute_seconds,
            communication_seconds=prediction.communication_seconds,
            exposed_communication_seconds=prediction.exposed_communication_seconds,
            samples_per_second=throughput, speedup=speedup, efficiency=efficiency,
        ))
    return tuple(out)
