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
* **prefetch** (ZeRO-3, FSDP): each layer's parameters are all-gathered
  before its forward and again before its backward pass, and its gradients
  reduce-scattered after it, each while the neighbouring layer computes;
  what does not fit behind compute is exposed (`prefetched`).

Where the devices of a run lie, for the links each collective crosses:
`run_mesh` (tensor-parallel shards innermost, then FSDP shards, pipeline
stages, replicas outermost; `xla_cost.parallel.placement.span`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from xla_cost.errors import InputError
from xla_cost.parallel import placement
from xla_cost.timemodel import comm
from xla_cost.timemodel.comm import check_bandwidth, is_finite_number

__all__ = [
    "DDP_BUCKET_BYTES", "Layout", "REPLICAS", "run_mesh", "rerun_collectives", "Piece", "bucket", "exposed_after",
    "prefetched", "zero3",
    "pipeline_seconds", "bubble_fraction",
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
      chunks: model chunks per stage ``v`` of the interleaved schedule
        (Narayanan et al. 2021, section 2.2): the bubble is ``(p - 1) / (v m)``
        of the work, and each micro-batch crosses ``v`` times as many stage
        boundaries; only with a pipeline.
      data: data-parallel replicas besides the analysed mesh's own ``data``
        axis: their gradient all-reduce is priced on the analysed program's
        parameter bytes per device, over the nodes their devices lie on
        (`run_mesh`).
      stage_bytes: activation bytes a stage sends the next per micro-batch
        (and the gradient it receives back).
      overlap_tensor: the tensor-parallel collectives run beside the matrix
        products they feed or follow (Transformer Engine's userbuffers
        overlap, NeMo's and Megatron Bridge's ``tp_comm_overlap``, which
        needs sequence parallelism): only what outlasts the products blocks
        the step. False: each blocks it (Megatron-LM's all-reduces).
      overlap_transfers: the pipeline's send/recv run beside the stage's
        compute (Megatron's ``overlap_p2p_comm`` with the interleaved
        schedule, Llama 3's asynchronous point-to-point): only what outlasts a
        micro-batch's compute blocks the step. False: they block it.
      overlap_context: the exchange of attention's keys and values over the
        analysed program's ``context`` axis (context parallelism,
        `xla_cost.parallel.context`) runs beside the attention it feeds
        (Megatron-Core's ring through Transformer Engine,
        ``AttnFuncWithCPAndKVP2P``: each send/recv of the next chunk's K and V
        beside the attention of the chunk already there): only what outlasts
        the attention's kernels blocks a micro-batch. False: it blocks it
        (Llama 3's all-gather before the attention, Dubey et al. 2024 §3.3.2).
      overlap_gradients: the data-parallel gradient all-reduce runs in
        buckets behind the backward pass as it makes them (PyTorch DDP's
        hooks, XLA's schedule); False: after the backward pass, exposed, as
        one flattened buffer (Megatron-LM of 2019's ``allreduce_params``: one
        buffer per dtype, model/distributed.py lines 40-65 at a0368ddf).
      gradient_bytes: bytes per parameter the all-reduce over the layout's
        replicas moves (2: gradients reduced in float16); None: the analysed
        program's parameter bytes.
      host_staged_gradients: the gradient all-reduce over several nodes is
        staged through each node's host memory (Gloo's CUDA all-reduce with a
        host workspace, as Caffe2 ran it in 2017: an NCCL reduce within the
        node, a copy to the host, the all-reduce between hosts, a copy back,
        an NCCL broadcast; `xla_cost.timemodel.comm.staged_all_reduce`), at
        the device's host link (`xla_cost.timemodel.devices.HOST_LINKS`).
        False: on the devices' own links.
      rerun_collectives: the framework's recomputation reruns each
        recomputed layer's whole forward in the backward pass, its
        collectives too (PyTorch's checkpoint), where XLA's drops a
        recomputed collective nothing of the backward pass reads: priced as
        `rerun_collectives` counts them. False: the program's own count.
    """

    pipeline: int = 1
    micro_batches: int = 1
    chunks: int = 1
    data: int = 1
    stage_bytes: int = 0
    overlap_tensor: bool = False
    overlap_transfers: bool = False
    overlap_context: bool = False
    overlap_gradients: bool = True
    gradient_bytes: int | None = None
    rerun_collectives: bool = False
    host_staged_gradients: bool = False

    def __post_init__(self) -> None:
        bubble_fraction(self.pipeline, self.micro_batches, self.chunks)  # checks the three
        if self.chunks > 1 and self.pipeline == 1:
            raise InputError("model chunks per stage only with a pipeline of 2 or more stages",
                             f"chunks={self.chunks} with pipeline=1",
                             "Add pipeline=P to the mesh (--mesh ...,pipeline=P), or drop chunks (--chunks).")
        if isinstance(self.data, bool) or not isinstance(self.data, int) or self.data < 1:
            raise InputError("data-parallel replicas, an integer >= 1", repr(self.data), "Pass e.g. data=8.")
        if isinstance(self.stage_bytes, bool) or not isinstance(self.stage_bytes, int) or self.stage_bytes < 0:
            raise InputError("stage bytes, an integer >= 0", repr(self.stage_bytes),
                             "Pass the activation bytes a stage sends per micro-batch.")
        if self.gradient_bytes is not None and (isinstance(self.gradient_bytes, bool)
                                                or not isinstance(self.gradient_bytes, int) or self.gradient_bytes < 1):
            raise InputError("gradient bytes per parameter, an integer >= 1 (2 for float16), or None",
                             repr(self.gradient_bytes), "Pass e.g. gradient_bytes=2, or leave it out.")
        for name in ("overlap_tensor", "overlap_transfers", "overlap_context", "overlap_gradients",
                     "rerun_collectives", "host_staged_gradients"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} True or False", repr(getattr(self, name)),
                                 f"Pass {name}=True where the run's framework overlaps them, else leave it out.")


REPLICAS = "replicas"
"""`run_mesh`'s name for the layout's data-parallel replicas (`Layout.data`)."""


def run_mesh(program: Mapping[str, int], layout: Layout) -> tuple[tuple[str, int], ...]:
    """Every axis of a run, innermost first, as runs lay their devices out.

    The analysed program's axes come first, its innermost axis first
    (``model``, then ``context``, then ``fsdp``, then ``data``: `xla_cost.parallel.sharding.MESH_AXES`
    from the inside), then the ``pipeline``'s stages, then the layout's
    replicas (`REPLICAS`). With nodes of ``N`` consecutive devices
    (`xla_cost.parallel.placement.span`), a tensor-parallel group of at most ``N``
    lies in one node, and the replicas' group crosses nodes once the devices
    of one replica (tensor x pipeline) fill a node.

    Args:
      program: the analysed program's mesh, outermost axis first (`xla_cost.Report.mesh`).
      layout: the stages and replicas around it.
    """
    axes = [(axis, int(size)) for axis, size in reversed(list(program.items())) if int(size) > 1]
    return (*axes, ("pipeline", layout.pipeline), (REPLICAS, layout.data))


def rerun_collectives(forward: Any, grad: Any, layout: Layout) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """The grad program's collectives as a framework that reruns each recomputed layer's forward runs
    them (`Layout.rerun_collectives`), and a note saying what was added (none: the program's own).

    A module (a collective's ``layer``, its first scope: ``h_3`` of ``h_3/mlp/c_proj``) is recomputed
    where one of its forward collectives runs more often in the grad program than in the forward
    program. Rerunning its forward runs each of its forward collectives again: each is priced at least
    twice its forward-program executions. XLA keeps only the recomputed collectives the backward pass
    reads (a transformer layer's attention all-reduce, not its last one, whose output is the next
    layer's saved input). A collective of unknown executions is left as it is.
    """
    collectives = tuple(grad.communication)
    if not layout.rerun_collectives or forward is None:
        return collectives, ()
    forward = tuple(forward.communication)
    if comm.hashed_by_value((*forward, *collectives)):
        try:  # kept: a pure function of the collectives' fields, priced again in every evaluation of the fits
            return _rerun(forward, collectives)
        except TypeError:  # a collective that is not hashable
            pass
    return _rerun.__wrapped__(forward, collectives)


@functools.lru_cache(maxsize=1 << 10)
def _rerun(forward: tuple[Any, ...], collectives: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """`rerun_collectives` of a grad program's ``collectives`` beside its ``forward`` program's."""
    def key(c: Any) -> tuple[Any, ...]:
        return (c.layer, c.kind, c.bytes, c.group_size, tuple(c.axes or ()))

    runs: dict[str, dict[tuple[Any, ...], int]] = {"forward": {}, "grad": {}}
    for name, phase in (("forward", forward), ("grad", collectives)):
        for c in phase:
            if c.layer and c.executions is not None:
                runs[name][key(c)] = runs[name].get(key(c), 0) + c.executions
    recomputed = {k[0].split("/")[0] for k, n in runs["grad"].items() if n > runs["forward"].get(k, n)}
    missing = {k: 2 * n - runs["grad"].get(k, 0) for k, n in runs["forward"].items()
               if k[0].split("/")[0] in recomputed and runs["grad"].get(k, 0) < 2 * n}
    out, added = [], 0
    for c in collectives:
        extra = missing.pop(key(c), 0) if c.layer and c.executions is not None else 0
        out.append(dataclasses.replace(c, executions=c.executions + extra) if extra else c)
        added += extra
    if not added:
        return tuple(out), ()
    return tuple(out), (f"{added} collective(s) of recomputed layers run again: the framework's recomputation reruns "
                        f"each layer's whole forward, its collectives too, where XLA's drops those the backward "
                        f"pass does not read (Layout.rerun_collectives)",)


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


def prefetched(
    gathers: Sequence[float], forwards: Sequence[float], backwards: Sequence[float], scatters: Sequence[float],
) -> float:
    """Seconds a ZeRO-3 (FSDP) step's parameter collectives add to its compute.

    Units (layers) ``1..L`` in forward order, each with the seconds of the
    all-gather of its parameters (``gathers``; run again before its backward
    pass), its forward and backward compute, and the reduce-scatter of its
    gradients (``scatters``). The collectives run one at a time on the link,
    in the order they are issued; compute one unit at a time:

    * forward: unit ``i``'s gather is issued as unit ``i - 1`` starts
      computing (prefetch; the first at the start), and unit ``i`` computes
      once both its gather and unit ``i - 1`` are done;
    * backward, from unit ``L`` down: unit ``j``'s gather is issued as unit
      ``j + 1`` starts its backward pass (unit ``L``'s as its forward starts),
      unit ``j``'s reduce-scatter as its backward pass ends.

    Returns:
      The step's end (the last compute or collective) minus all the compute:
      what the collectives do not hide, 0 when every one of them fits behind
      the neighbouring unit's compute but the first gather and the last
      reduce-scatter, which nothing hides.

    Raises:
      InputError: lists of different lengths, or a negative time.
    """
    units = len(gathers)
    if not (len(forwards) == len(backwards) == len(scatters) == units):
        raise InputError("one gather, forward, backward and reduce-scatter time per unit",
                         f"{units}, {len(forwards)}, {len(backwards)} and {len(scatters)}",
                         "Pass lists of equal length, in forward order.")
    for value in (*gathers, *forwards, *backwards, *scatters):
        _check_nonnegative(value, "time in seconds")
    link = 0.0  # when the link is free
    done = 0.0  # when the compute stream is free
    issue = 0.0  # when the next gather is issued
    start_last = 0.0
    for i in range(units):  # forward
        link = max(link, issue) + gathers[i]
        start = max(done, link)
        issue = start  # the next unit's gather is issued as this one starts
        start_last = start
        done = start + forwards[i]
    ready = [0.0] * units  # when each unit's backward gather is done
    link = max(link, start_last) + gathers[-1] if units else link
    if units:
        ready[-1] = link
    for j in range(units - 1, -1, -1):  # backward
        start = max(done, ready[j])
        if j > 0:  # the previous unit's gather, issued as this one starts
            link = max(link, start) + gathers[j - 1]
            ready[j - 1] = link
        done = start + backwards[j]
        link = max(link, done) + scatters[j]
    return max(done, link) - (sum(forwards) + sum(backwards))


def zero3(
    units: Sequence[tuple[str, int]], group_size: int, where: placement.Span | None, cluster: comm.Cluster,
    forward: float, backward: float, micro_batches: int = 1,
) -> tuple[tuple[comm.CollectiveTime, ...], float]:
    """The parameter collectives of a ZeRO-3 (FSDP) step and the seconds they expose.

    Each unit's parameters are all-gathered over the ``fsdp`` group before
    its forward pass and again before its backward pass, and its gradients
    reduce-scattered after it (Rajbhandari et al. 2020, "ZeRO", section 5;
    PyTorch FSDP), every micro-batch; they overlap the neighbouring unit's
    compute as `prefetched` schedules them. A unit's share of the compute is
    its share of the parameter bytes (a dense layer's FLOP are
    ``2 x tokens x parameters``).

    Args:
      units: ``(name, bytes)`` in forward order: each unit's parameters as one
        device holds them gathered (the all-gather's result).
      group_size: devices in the ``fsdp`` group.
      where: how the group lies on the nodes (`xla_cost.parallel.placement.span`).
      cluster: the links.
      forward, backward: one micro-batch's forward and backward compute, seconds.
      micro_batches: micro-batches per step, each gathering and scattering again.

    Returns:
      ``(per-unit collective times, exposed seconds)``: an all-gather
      (``2 x micro_batches`` executions) and a reduce-scatter
      (``micro_batches``) per unit.
    """
    total = sum(nbytes for _, nbytes in units)
    if not units or total <= 0:
        return (), 0.0
    try:  # the collectives alone, kept: the validation's fits price them again with every constant they try
        times, gathers, scatters = _zero3_collectives(tuple(units), group_size, where, cluster, micro_batches)
    except TypeError:  # a unit that is not hashable
        times, gathers, scatters = _zero3_collectives.__wrapped__(tuple(units), group_size, where, cluster,
                                                                  micro_batches)
    shares = [nbytes / total for _, nbytes in units]
    exposed = prefetched(gathers, [forward * s for s in shares], [backward * s for s in shares], scatters)
    return times, micro_batches * exposed


@functools.lru_cache(maxsize=1 << 10)
def _zero3_collectives(units: tuple[tuple[str, int], ...], group_size: int, where: placement.Span | None,
                       cluster: comm.Cluster, micro_batches: int
                       ) -> tuple[tuple[comm.CollectiveTime, ...], tuple[float, ...], tuple[float, ...]]:
    """`zero3`'s collectives and each unit's gather and reduce-scatter seconds (a pure function)."""
    gathers, scatters, times = [], [], []
    for _, nbytes in units:
        gather, link = cluster.time("all-gather", nbytes, group_size, where=where)
        scatter, _ = cluster.time("reduce-scatter", nbytes, group_size, where=where)
        gathers.append(gather)
        scatters.append(scatter)
        times += [comm.CollectiveTime("all-gather", nbytes, group_size, 2 * micro_batches, link,
                                      2 * micro_batches * gather),
                  comm.CollectiveTime("reduce-scatter", nbytes, group_size, micro_batches, link,
                                      micro_batches * scatter)]
    return tuple(times), tuple(gathers), tuple(scatters)


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
