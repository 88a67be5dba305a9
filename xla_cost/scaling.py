"""Predicted step time on many devices, the scaling curve, and training-run estimates.

Each point of a curve is a sharded analysis (`xla_cost.analyze` with
``mesh={axis: K}``: XLA's SPMD partitioner makes the per-device program and
its collectives) priced with the stated alpha-beta model of `xla_cost.comm`:

    step time = compute roofline + communication not hidden behind compute

where the roofline is ``max(FLOP / (peak * efficiency), bytes / bandwidth)``
per device from the device's published peak (`xla_cost.timing.PEAKS`), and
the communication is every collective of the train step (grad + update) on
the device preset's interconnect (`xla_cost.comm.CLUSTERS`), ``overlap``
of it hidden (default `xla_cost.comm.DEFAULT_OVERLAP`).

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

from xla_cost import comm
from xla_cost.errors import InputError

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
      devices: devices in the mesh.
      global_batch: samples per step over all devices.
      flops: train-step FLOP per device (grad + update, loop-corrected).
      bytes_accessed: train-step bytes per device (XLA's).
      communication_bytes: buffers the train step's collectives work on, per device.
      prediction: compute, communication, exposed communication and step seconds.
      collectives: each collective's time.
      notes: unknowns and assumptions met.
    """

    devices: int
    global_batch: int
    flops: int | None
    bytes_accessed: int | None
    communication_bytes: int | None
    prediction: comm.StepPrediction
    collectives: tuple[comm.CollectiveTime, ...] = ()
    notes: tuple[str, ...] = ()


def _peak(device: str, dtype: str) -> tuple[float, float, str]:
    from xla_cost.timing import PEAKS

    key = device.lower()
    found = next((p for keys, p in PEAKS if all(k.lower() in key for k in keys)), None)
    found = found or next((p for _, p in PEAKS if key in p.name.lower()), None)
    if found is not None:
        return found.for_dtype(dtype), found.bandwidth, found.name
    raise InputError(
        f"a device with a published peak ({', '.join(p.name for _, p in PEAKS)})",
        repr(device), "Use e.g. --device h100 (or a100, v100, h200, p40).",
    )


def predict(
    report: Any,
    *,
    device: str = "h100",
    interconnect: str | None = None,
    overlap: float = comm.DEFAULT_OVERLAP,
    efficiency: float = 1.0,
    node_size: int | None = None,
    bandwidth: float | None = None,
    latency: float | None = None,
    algorithm: str | None = None,
) -> StepEstimate:
    """The predicted train-step time of a (sharded) `xla_cost.Report` on ``device``.

    Args:
      report: an analysis, sharded (``mesh=``) or on one device.
      device: a device with a published peak (``h100``, ``a100``, ``v100``,
        ``p40``, ...): its FLOP/s for the report's dtype and memory bandwidth,
        and its cluster preset (`xla_cost.comm.CLUSTERS`).
      interconnect: one interconnect preset for every link instead of the
        device's cluster (`xla_cost.comm.INTERCONNECTS`).
      overlap: the fraction of communication hidden behind compute.
      efficiency: the fraction of peak FLOP/s the kernels reach (an MFU).
      node_size, bandwidth, latency: overrides of the cluster preset.
      algorithm: the collective algorithm (`xla_cost.comm.ALGORITHMS`;
        default ``ring``).
    """
    flops_peak, memory_bandwidth, _ = _peak(device, report.dtype)
    cluster = comm.cluster(device, interconnect, node_size=node_size, bandwidth=bandwidth, latency=latency,
                           algorithm=algorithm)
    step = report.phases["train_step"]
    seconds, times, notes = comm.communication_time(step.communication, cluster)
    if step.flops is None:
        raise InputError("a report with known train-step FLOP", "unknown FLOP (see its notes)",
                         "Analyse with counter='xla' on a backend with a cost analysis.")
    prediction = comm.predict_step(
        step.flops, step.bytes_accessed, seconds, peak_flops=flops_peak,
        peak_bandwidth=memory_bandwidth, efficiency=efficiency, overlap=overlap,
    )
    return StepEstimate(
        devices=report.devices, global_batch=report.batch_size, flops=step.flops,
        bytes_accessed=step.bytes_accessed, communication_bytes=step.communication_bytes,
        prediction=prediction, collectives=times, notes=tuple(notes),
    )


def speedup(small: StepEstimate, large: StepEstimate) -> float:
    """Throughput of ``large`` over ``small`` (samples per second, both priced
    by `predict`): the speed-up of going from one step to the other."""
    return (large.global_batch / large.prediction.seconds) / (small.global_batch / small.prediction.seconds)


def bandwidth_for_speedup(
    small: Any,
    large: Any,
    target: float,
    *,
    device: str = "h100",
    interconnect: str | None = None,
    algorithm: str = "ring",
    overlap: float = comm.DEFAULT_OVERLAP,
    efficiency: float = 1.0,
    lowest: float = 1e6,
    highest: float = 1e13,
) -> float | None:
    """The link bandwidth at which going from the analysis ``small`` to ``large``
    speeds throughput up by exactly ``target``.

    Both reports are priced by `predict` on one flat network of
    ``interconnect`` (default: the device cluster's inter-node link, for its
    latency) whose bandwidth (bytes/s per device per direction) is varied
    between ``lowest`` and ``highest``; the speed-up grows with the bandwidth,
    and the answer is found by bisection to 1e-6 relative.

    Returns:
      The bandwidth, or None when ``target`` is out of reach in that range
      (even ``highest`` gives less, or ``lowest`` already gives more).
    """
    link = interconnect or comm.cluster(device).inter.name

    def at(bandwidth: float) -> float:
        kwargs = dict(device=device, interconnect=link, overlap=overlap, efficiency=efficiency,
                      bandwidth=bandwidth, algorithm=algorithm)
        return speedup(predict(small, **kwargs), predict(large, **kwargs))

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
class ScalingResult:
    """A scaling curve: one `StepEstimate` per device count, and the curve.

    Attributes:
      model: the zoo name (or ``package.module:attr``).
      mesh_axis: the axis grown (``data`` or ``fsdp``).
      batch_size: samples per device (weak scaling), or None under strong scaling.
      global_batch: samples per step over all devices, fixed (strong scaling),
        or None under weak scaling.
      device, interconnect: the hardware priced.
      overlap, efficiency: the cost model's settings.
      steps: per device count.
      points: speed-up and efficiency per device count (`xla_cost.comm.ScalingPoint`).
    """

    model: str
    mesh_axis: str
    batch_size: int | None
    device: str
    interconnect: str
    overlap: float
    efficiency: float
    steps: tuple[StepEstimate, ...]
    points: tuple[comm.ScalingPoint, ...]
    global_batch: int | None = None
    algorithm: str = "ring"

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

    def to_table(self, width: int | None = None) -> str:
        frame = self.to_frame()
        return self.describe() + "\n" + frame.to_string(index=False, float_format=lambda v: f"{v:.4g}")

    def to_csv(self) -> str:
        return self.to_frame().to_csv(index=False)

    def to_markdown(self) -> str:
        return f"{self.describe()}\n\n" + self.to_frame().to_markdown(index=False, floatfmt=".4g") + "\n"

    def to_json(self) -> str:
        import json

        return json.dumps({
            "model": self.model, "mesh_axis": self.mesh_axis, "batch_size": self.batch_size,
            "global_batch": self.global_batch,
            "device": self.device, "interconnect": self.interconnect, "algorithm": self.algorithm,
            "overlap": self.overlap,
            "efficiency": self.efficiency, "points": self.to_frame().to_dict(orient="records"),
        }, indent=2)

    def plot(self, path: str) -> str:
        """Writes the speed-up and efficiency against devices to a PNG (matplotlib, Agg)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        frame = self.to_frame()
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
        left.plot(frame["devices"], frame["speedup"], "o-", label="predicted")
        left.plot(frame["devices"], frame["devices"] / frame["devices"].iloc[0], "--", color="grey",
                  label="linear")
        right.plot(frame["devices"], frame["efficiency"], "o-")
        for ax, label in ((left, "speed-up (x)"), (right, "scaling efficiency")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("devices")
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
        left.set_yscale("log", base=2)
        left.legend()
        right.set_ylim(0, 1.05)
        fig.suptitle(self.describe(), fontsize=9)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return path

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


def _check_devices(devices: Sequence[int]) -> list[int]:
    out = list(devices)
    if not out or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in out) \
            or out != sorted(set(out)):
        raise InputError(
            "device counts as increasing positive integers", repr(devices),
            "Pass e.g. --devices 1,2,4,8,16.",
        )
    return out


def scaling(
    model: str,
    devices: Sequence[int] = (1, 2, 4, 8),
    *,
    mesh_axis: str = "data",
    batch_size: int = 1,
    global_batch: int | None = None,
    device: str = "h100",
    interconnect: str | None = None,
    overlap: float = comm.DEFAULT_OVERLAP,
    efficiency: float = 1.0,
    algorithm: str = "ring",
    optimizer: str = "sgd",
    dtype: str = "float32",
    config: Mapping[str, Any] | None = None,
    store: Any = None,
) -> ScalingResult:
    """The scaling curve of ``model`` over ``devices`` on ``mesh_axis``.

    Weak scaling by default: each device count K is analysed sharded
    (``mesh={mesh_axis: K}``) at batch ``batch_size * K``. With
    ``global_batch`` the batch stays fixed instead (strong scaling: each device
    gets ``global_batch / K`` samples; every K must divide it). Each analysis
    goes through the results store (a rerun reads it back) and is priced by
    `predict`. The CPU simulates the devices: call
    `xla_cost.simulate_devices(max(devices))` before JAX starts (the CLI does).

    Raises:
      InputError: device counts not increasing, an axis that does not grow the
        batch, or a global batch that some device count does not divide.
    """
    from xla_cost.configs import RunConfig
    from xla_cost.sharding import simulate_devices

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
        run = RunConfig(model, global_batch if global_batch is not None else batch_size * k, dict(config or {}), optimizer=optimizer, dtype=dtype,
                        mesh={mesh_axis: k} if k > 1 else {})
        report = run.canonical().run(cache=store if store is not None else True)
        steps.append(predict(report, device=device, interconnect=interconnect, overlap=overlap,
                             efficiency=efficiency, algorithm=algorithm))
    points = comm.scaling_curve([(s.devices, s.global_batch, s.prediction) for s in steps])
    return ScalingResult(
        model=model, mesh_axis=mesh_axis, batch_size=None if global_batch is not None else batch_size,
        device=device, interconnect=interconnect or "preset", overlap=overlap, efficiency=efficiency,
        steps=tuple(steps), points=points, global_batch=global_batch, algorithm=algorithm,
    )


@dataclasses.dataclass(frozen=True)
class TrainingEstimate:
    """A whole training run: total FLOP and time on ``devices``.

    Attributes:
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


def estimate(
    model: str,
    *,
    samples: int | None = None,
    epochs: float = 1,
    tokens: float | None = None,
    devices: int = 1,
    mesh_axis: str = "data",
    batch_size: int = 1,
    device: str = "h100",
    mfu: float | None = None,
    interconnect: str | None = None,
    overlap: float = comm.DEFAULT_OVERLAP,
    algorithm: str = "ring",
    optimizer: str = "adam",
    dtype: str = "float32",
    config: Mapping[str, Any] | None = None,
    store: Any = None,
) -> TrainingEstimate:
    """Total training FLOP and time of ``samples * epochs`` (or ``tokens``) on ``devices``.

    The FLOP per sample are the one-device train step's (loop-corrected) over
    its batch; the time is the number of steps at the global batch
    (``batch_size * devices``) times the step `predict` gives for the sharded
    step (``mfu`` as its compute efficiency; without it, the roofline at
    peak: a lower bound).
    """
    from xla_cost.configs import RunConfig
    from xla_cost.sharding import simulate_devices

    if (samples is None) == (tokens is None):
        raise InputError("--samples N [--epochs E] or --tokens T", "both or neither",
                         "Give the dataset as samples (images) or tokens (language models).")
    if devices < 1 or (mfu is not None and not 0 < mfu <= 1):
        raise InputError("devices >= 1 and mfu in (0, 1]", f"devices={devices}, mfu={mfu}",
                         "Pass e.g. --devices 8 --mfu 0.4.")
    simulate_devices(devices)
    one = RunConfig(model, batch_size, dict(config or {}), optimizer=optimizer, dtype=dtype).canonical()
    single = one.run(cache=store if store is not None else True)
    flops = single.phases["train_step"].flops
    if flops is None:
        raise InputError("a model whose train-step FLOP are known", "unknown", "See the analysis notes.")
    per_sample = flops / single.batch_size
    sharded = single if devices == 1 else dataclasses.replace(
        one, batch_size=batch_size * devices, mesh={mesh_axis: devices}
    ).run(cache=store if store is not None else True)
    step = predict(sharded, device=device, interconnect=interconnect, overlap=overlap,
                   efficiency=mfu if mfu is not None else 1.0, algorithm=algorithm)
    token_count = None
    if tokens is not None:
        from xla_cost import zoo

        length = zoo.example_inputs(one.model, 1, **dict(config or {})).shape[1]
        token_count = int(tokens)
        n = token_count / length
    else:
        n = samples * epochs  # type: ignore[operator]
    steps = math.ceil(n / (batch_size * devices))
    return TrainingEstimate(
        model=one.model, devices=devices, samples=int(n), tokens=token_count,
        flops_per_sample=per_sample, total_flops=per_sample * n, steps=steps, step=step,
        seconds=steps * step.prediction.seconds,
    )
