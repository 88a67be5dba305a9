"""Training-run estimates: the FLOP and the time of a whole run.

`estimate` prices the step `xla_cost.runs.scaling.predict` gives for the
run's layout (one device, a data-parallel axis, or a mesh with pipeline
stages and tensor-parallel shards) and multiplies it by the optimizer steps
of the data set: a prediction (every kernel priced with the time model's
global constants, `xla_cost.timemodel.kernel_time`) by default, a bound when
asked for.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from xla_cost.choices import DEFAULT_OPTIMIZER
from xla_cost.errors import InputError
from xla_cost.options import changed_fields, given_fields
from xla_cost.timemodel.hardware import Hardware
from xla_cost.timemodel.schedule import DDP_BUCKET_BYTES
from xla_cost.parallel.sharding import mesh_devices
from xla_cost.present.document import Rendered, Section
from xla_cost.present.units import count, duration, flop_unit, scaled, time_unit
from xla_cost.runs.layouts import Parallelism, analyser, check_parallel, data_size, mesh_text, point
from xla_cost.runs.configs import RunConfig
from xla_cost.runs.scaling import StepEstimate, priced_step, pricing, pricing_text, ready_devices, run_config, \
    target_pricing

__all__ = ["TrainingEstimate", "estimate"]


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
      step: the sharded step priced on the devices; its ``calibration`` says
        whether it is a prediction (the profile) or a bound ("").
      seconds: the run's time: a prediction, or a bound.
      hardware: what it is priced on (None: not recorded).
      mesh: the layout (`Parallelism.mesh`; empty: ``devices`` on one axis).
      micro_batches: micro-batches per step per replica.
      optimizer, dtype: the step's (named in `describe`; the default optimizer is
        `xla_cost.choices.DEFAULT_OPTIMIZER`, adam).
      target: the device the step's programs were compiled for
        (`xla_cost.RunConfig.target`), None: the default backend (the CPU).
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
    hardware: Hardware | None = None
    mesh: Mapping[str, int] = dataclasses.field(default_factory=dict)
    micro_batches: int = 1
    optimizer: str = ""
    dtype: str = ""
    target: str | None = None

    @property
    def priced_as(self) -> str:
        """``prediction`` (calibrated compute) or ``bound``."""
        return "prediction" if self.step.calibration else "bound"

    def describe(self) -> str:
        what = f"{self.tokens:,} tokens" if self.tokens is not None else f"{self.samples:,} samples"
        step = ", ".join(x for x in (self.optimizer, self.dtype) if x)
        compiled = f" compiled for {self.target}" if self.target is not None else ""
        line = f"{self.model}{f' ({step})' if step else ''}{compiled}: {what} on {self.devices} device(s)"
        if self.mesh or self.micro_batches > 1:
            spread = [mesh_text(self.mesh)] if self.mesh else []
            line += f" ({', '.join([*spread, f'{self.micro_batches} micro-batch(es) a step'])})"
        if self.hardware is not None:
            return f"{line}; {pricing_text(self.hardware, self.step.calibration)}"
        return f"{line}; {self.priced_as}" + (f" ({self.step.calibration})" if self.step.calibration else "")

    def to_dict(self) -> dict[str, Any]:
        p = self.step.prediction
        return {
            "model": self.model, "optimizer": self.optimizer, "dtype": self.dtype, "target": self.target,
            "devices": self.devices,
            "samples": self.samples, "tokens": self.tokens,
            "flops_per_sample": self.flops_per_sample, "total_flops": self.total_flops, "steps": self.steps,
            "global_batch": self.step.global_batch, "mesh": dict(self.mesh), "micro_batches": self.micro_batches,
            "priced_as": self.priced_as, "calibration": self.step.calibration or None,
            "device": self.hardware.device if self.hardware is not None else None,
            "mfu": self.hardware.mfu if self.hardware is not None else None,
            "step_seconds": p.seconds, "compute_seconds": p.compute_seconds,
            "communication_seconds": p.communication_seconds,
            "exposed_communication_seconds": p.exposed_communication_seconds,
            **{f"{part}_seconds": value for part, value in self.step.parts.items()},
            "seconds": self.seconds, "hours": self.seconds / 3600,
        }

    def to_frame(self) -> pd.DataFrame:
        """One row: every figure of `to_dict` (the mesh as ``axis=size,...``)."""
        return pd.DataFrame([{**self.to_dict(), "mesh": mesh_text(self.mesh) or None}])

    def sections(self) -> list[Section]:
        """The run (its size, FLOP and time) and one step's times, each figure in its own unit."""
        p = self.step.prediction
        flop_scale, flop_name = flop_unit([self.total_flops])
        sample_scale, sample_name = flop_unit([self.flops_per_sample])
        run = [
            ("devices", count(self.devices)),
            ("tokens" if self.tokens is not None else "samples",
             count(self.tokens if self.tokens is not None else self.samples)),
            ("global batch", count(self.step.global_batch)),
            ("micro-batches per step", count(self.micro_batches)),
            ("optimizer steps", count(self.steps)),
            ("train-step FLOP per sample", f"{scaled(self.flops_per_sample, sample_scale)} {sample_name}"),
            ("total FLOP", f"{scaled(self.total_flops, flop_scale)} {flop_name}"),
            (f"time ({self.priced_as})", duration(self.seconds)),
        ]
        times = {"step": p.seconds, "compute": p.compute_seconds, "communication": p.communication_seconds,
                 "communication not hidden": p.exposed_communication_seconds,
                 **{f"  {part.replace('_', ' ')}": value for part, value in self.step.parts.items() if value}}
        scale, name = time_unit(times.values())
        return [
            Section("run", pd.DataFrame(run, columns=["figure", "value"])),
            Section("one step", pd.DataFrame([(part, scaled(value, scale)) for part, value in times.items()],
                                             columns=["time", name])),
        ]


def estimate(
    model: Any,
    *,
    samples: int | None = None,
    epochs: float = 1,
    tokens: float | None = None,
    hardware: Hardware | None = None,
    parallelism: Parallelism | None = None,
    bound: bool = False,
    store: Any = None,
    # how the step is spread: `Parallelism`'s fields, replacing ``parallelism``'s
    devices: int = 1,
    mesh_axis: str = "data",
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
    bucket_bytes: float = DDP_BUCKET_BYTES,
    hierarchical: bool = True,
    arithmetic: str | None = None,
) -> TrainingEstimate:
    """Total training FLOP and time of ``samples * epochs`` (or ``tokens``).

    The FLOP per sample are the one-device train step's (loop-corrected) over
    its batch; the time is the number of steps at the global batch times the
    step `predict` gives for the step spread as ``parallelism`` says (default
    one device; ``devices`` on ``mesh_axis``, or a ``mesh`` with pipeline
    stages, tensor-parallel shards and replicas, and ``micro_batches``). By
    default the step is a prediction with the time model's global constants
    (`xla_cost.timemodel.calibration`; the result names them); ``bound=True``
    prices `Hardware.bound` instead (compute at peak, nothing hidden, flat
    rings: a lower bound on time), and an explicit ``mfu`` a roofline at that
    share of peak.

    Args:
      model: a zoo name, ``package.module:attr`` or a Linen or NNX module
        object (both with ``input_shape``).
      samples, epochs: the data set, in samples (images, or sequences), and
        passes over it: positive and finite, samples a whole number.
      tokens: instead, the tokens of a run of a model whose inputs are token
        ids (``(batch, positions)`` integers): each sample is ``positions`` tokens.
      hardware: what the run is priced on (default `xla_cost.Hardware()`).
      parallelism: how the step is spread (`Parallelism`), as one object.
      bound: price a bound instead of a prediction.
      store: the results store (None: the default).
      devices, mesh_axis, mesh, micro_batches, chunks: the fields of `Parallelism`
        (documented there); each one not at its default replaces ``parallelism``'s.
      batch_size: samples per micro-batch per data-parallel rank (None: 1).
      config, optimizer, dtype, input_shape, input_dtype, target: the run's
        `xla_cost.RunConfig` fields (the model's arguments, adam:
        `xla_cost.choices.DEFAULT_OPTIMIZER`, ``float32``, a custom model's
        input shape and dtype, the device the step is compiled for: its own
        compiler's programs, meshes on its devices, and priced on it unless
        ``device`` names it too; another device is refused).
      device, interconnect, node, node_size, nics, bandwidth, latency, algorithm,
        overlap, mfu, bucket_bytes, hierarchical, arithmetic: the fields of
        `xla_cost.Hardware` (documented there); each one not at its default
        replaces ``hardware``'s.

    Raises:
      InputError: both or neither of samples and tokens, a number of them
        (or epochs) that is not positive and finite, tokens for a model
        whose inputs are not token ids, devices and a mesh,
        a bad mesh or mfu, a pipeline of a model without ``n_layer``, a
        device without a published peak for the dtype, or a ``target``
        unknown, without its compiler, or beside another ``device``.
    """
    given = locals()
    options = {**changed_fields(Hardware, given), **changed_fields(Parallelism, given),
               **given_fields(RunConfig, given, exclude=("model", "mesh", *(("batch_size",) if batch_size is None
                                                                            else ())))}
    one, fields, spread = run_config("estimate", model, options, {})
    hardware = pricing("estimate", hardware, target_pricing(one, hardware, fields), bound, one.dtype)
    n, token_count = data_size(one, samples, epochs, tokens)
    parallel = dataclasses.replace(parallelism or Parallelism(), **spread)
    devices, mesh, micro = check_parallel(parallel)
    where = point(one, parallel.mesh_axis, devices, one.batch_size, mesh, micro, parallel.chunks)
    ready_devices(one, mesh_devices(where.run.mesh))
    analyse = analyser(store)
    single = analyse(one)
    flops = single.phases["train_step"].flops
    if flops is None:
        raise InputError("a model whose train-step FLOP are known", "unknown", "See the analysis notes.")
    per_sample = flops / single.batch_size
    step = priced_step(where, hardware, analyse)
    steps = math.ceil(n / step.global_batch)
    return TrainingEstimate(
        model=one.name, devices=step.devices, samples=int(n), tokens=token_count,
        flops_per_sample=per_sample, total_flops=per_sample * n, steps=steps, step=step,
        seconds=steps * step.prediction.seconds, hardware=hardware, mesh=mesh, micro_batches=micro,
        optimizer=one.optimizer, dtype=one.dtype, target=one.target,
    )
