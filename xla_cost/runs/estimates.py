"""Training-run estimates: the FLOP and the time of a whole run.

`estimate` prices the step `xla_cost.runs.scaling.predict` gives for the
run's layout (one device, a data-parallel axis, or a mesh with pipeline
stages and tensor-parallel shards) and multiplies it by the optimizer steps
of the data set: a prediction (every kernel priced with the time model's
global constants, `xla_cost.timemodel.kernel_time`) by default, a bound when
asked for.

Beside the totals it answers what a planner asks: tokens (or samples) per
second for the run and per device, MFU and HFU (Chowdhery et al. 2022, §4.1
and Appendix B: the model's FLOP, without and with remat's recomputation, over
the devices' peak for the dtype), the model as configured (its changed
settings, its parameters, its layers scanned or unrolled) and, where the step
is compiled for a target, whether it fits in a device's memory.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from xla_cost import zoo
from xla_cost.analysis.memory import TargetMemory
from xla_cost.choices import DEFAULT_OPTIMIZER
from xla_cost.errors import InputError
from xla_cost.options import changed_fields, given_fields
from xla_cost.timemodel.hardware import Hardware
from xla_cost.timemodel.schedule import DDP_BUCKET_BYTES
from xla_cost.parallel.sharding import mesh_devices
from xla_cost.present import progress
from xla_cost.present.document import Rendered, Section
from xla_cost.count.routers import UNDECLARED_ROUTING_NOTE
from xla_cost.step.routing import ROUTING_NOTE
from xla_cost.present.units import UNKNOWN, amount, count, duration, pct_sig, scaled, short_count, sig, size, time_unit
from xla_cost.runs.layouts import Parallelism, analyser, check_parallel, data_size, layers_of, mesh_text, \
    model_facts, point
from xla_cost.runs.configs import RunConfig, input_batch
from xla_cost.runs.step_communication import UPDATE_PART, UPDATE_PART_NOTE
from xla_cost.runs.scaling import StepEstimate, priced_step, pricing, pricing_text, ready_devices, run_config, \
    target_pricing

__all__ = ["MEMORY_VERDICTS", "TrainingEstimate", "estimate", "whole_model_compiled"]

MEMORY_VERDICTS: tuple[str, ...] = ("fits", "recomputes", "does not fit", "unknown")
"""`TrainingEstimate.memory_verdict`'s answers: the step's program fits in one
device's memory; fits as the target's compiler recomputes instructions to
bring it there (XLA's rematerialization, whose work is in the priced figures);
needs more than the device has; not known (no target compiled, or no exact peak)."""


@dataclasses.dataclass(frozen=True)
class TrainingEstimate(Rendered):
    """A whole training run: total FLOP and time on ``devices``.

    Attributes:
      model: the model's canonical name.
      devices: devices the run is priced on.
      samples: samples processed (``samples * epochs`` or tokens / sequence length).
      tokens: tokens processed (token models), else None.
      flops_per_sample: train-step FLOP per sample (forward + backward + update):
        every device's work, the update's spread over a step's samples (once a step,
        not once a micro-batch; sharded over an FSDP group, not run whole on each).
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
      parameters: the model's parameters (None: not recorded).
      settings: the model's settings that differ from the zoo's defaults (a
        model of your own: its arguments as given), named in `describe`.
      layers: ``scanned`` (the layers one loop: `nn.scan`), ``unrolled``, or
        None: not known (a model of your own).
      sequence_length: positions per sample of a token model, None otherwise.
      model_flops_per_sample: the forward and backward FLOP of one sample
        without remat's recomputation (the grad program's
        `xla_cost.PhaseCosts.model_flops`): what MFU counts; None: unknown.
      hardware_flops_per_sample: the same with the recomputation
        (`xla_cost.PhaseCosts.hardware_flops`): what HFU counts.
      peak_flops: one device's published peak FLOP/s for the dtype (or
        `xla_cost.Hardware.arithmetic`) that MFU and HFU divide by.
      target_memory: whether the priced step's program fits one device of the
        target it was compiled for (`xla_cost.Report.target_memory`, judged
        by the donated train step's exact peak); None: no target compiled.
      flops_counted: how ``flops_per_sample`` was counted: ``compiled`` (the
        one-device step compiled on the CPU) or ``jaxpr`` (counted from its
        jaxpr: with a target or a pipeline, where no device runs the whole
        model, `whole_model_compiled`; the CPU's compile where the jaxpr holds
        operations it cannot count).
      interval: the run's time as the validation's held-out published cases
        ran against their predictions, (shortest, longest) seconds
        (`xla_cost.timemodel.calibration.interval`); the rates' and MFU's
        ranges follow from it (`intervals`); None: a bound, or constants
        without an interval.
      interval_description: what ``interval`` is computed on, in words (a
        prediction without one: that its constants carry none; "": a bound).
      routing_notes: a mixture of experts' capacity notes, from the model's analysis
        (`xla_cost.step.routing.routing_notes`): its padding is in HFU, not in MFU; or the note that the
        model routes tokens to experts it does not declare (`xla_cost.count.routers`): MFU counts all their work.
      active_parameters: a mixture of experts' parameters a token reads
        (`xla_cost.Report.active_parameters`); None: no routing declared.
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
    parameters: int | None = None
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    layers: str | None = None
    sequence_length: int | None = None
    model_flops_per_sample: float | None = None
    hardware_flops_per_sample: float | None = None
    peak_flops: float | None = None
    target_memory: TargetMemory | None = None
    flops_counted: str = "compiled"
    interval: tuple[float, float] | None = None
    interval_description: str = ""
    routing_notes: tuple[str, ...] = ()
    active_parameters: int | None = None

    @property
    def priced_as(self) -> str:
        """``prediction`` (calibrated compute) or ``bound``."""
        return "prediction" if self.step.calibration else "bound"

    @property
    def samples_per_second(self) -> float:
        """Samples a second over the whole run: the global batch over the step's time."""
        return self.step.global_batch / self.step.prediction.seconds

    @property
    def samples_per_second_per_device(self) -> float:
        """`samples_per_second` over the run's devices."""
        return self.samples_per_second / self.devices

    @property
    def tokens_per_second(self) -> float | None:
        """Tokens a second over the whole run (`samples_per_second` x `sequence_length`);
        None for a model whose samples are not token sequences."""
        return None if self.sequence_length is None else self.samples_per_second * self.sequence_length

    @property
    def tokens_per_second_per_device(self) -> float | None:
        """`tokens_per_second` over the run's devices."""
        return None if self.sequence_length is None else self.samples_per_second_per_device * self.sequence_length

    def _utilisation(self, per_sample: float | None) -> float | None:
        if per_sample is None or not self.peak_flops:
            return None
        return per_sample * self.samples_per_second_per_device / self.peak_flops

    @property
    def model_flops_utilization(self) -> float | None:
        """MFU: the model's FLOP a second per device (`model_flops_per_sample` x
        `samples_per_second_per_device`) over `peak_flops` (Chowdhery et al. 2022,
        Appendix B); None: unknown. Not ``to_dict()["mfu"]``, a bound's fixed share."""
        return self._utilisation(self.model_flops_per_sample)

    @property
    def hardware_flops_utilization(self) -> float | None:
        """HFU: as `model_flops_utilization` with remat's recomputation counted
        (`hardware_flops_per_sample`); equal to MFU without remat."""
        return self._utilisation(self.hardware_flops_per_sample)

    @property
    def memory_verdict(self) -> str:
        """Whether the priced step's program fits in one device's memory, one of
        `MEMORY_VERDICTS`, from the target's compile (`target_memory`):
        ``does not fit`` (its peak above the device's usable memory),
        ``recomputes`` (within it as the compiler recomputed instructions),
        ``fits`` (its exact peak within it), ``unknown`` (no target compiled,
        or no exact peak)."""
        judged = self.target_memory
        if judged is None:
            return "unknown"
        if judged.fits is False:
            return "does not fit"
        if judged.fits is None:
            return "unknown"
        return "recomputes" if judged.rematerialized else "fits"

    def intervals(self) -> dict[str, tuple[float, float] | None]:
        """Each figure's range under `interval` (None: no interval, or the figure unknown):
        ``seconds``, ``samples_per_second``, ``tokens_per_second`` (and per device),
        ``model_flops_utilization``, ``hardware_flops_utilization``: a rate scales as
        the inverse of the time (its low end from the longest time)."""
        figures: dict[str, float | None] = {
            "samples_per_second": self.samples_per_second,
            "samples_per_second_per_device": self.samples_per_second_per_device,
            "tokens_per_second": self.tokens_per_second,
            "tokens_per_second_per_device": self.tokens_per_second_per_device,
            "model_flops_utilization": self.model_flops_utilization,
            "hardware_flops_utilization": self.hardware_flops_utilization,
        }
        if self.interval is None:
            return {"seconds": None, **{name: None for name in figures}}
        shortest, longest = self.interval
        return {"seconds": (shortest, longest), **{
            name: None if value is None else (value * self.seconds / longest, value * self.seconds / shortest)
            for name, value in figures.items()}}

    def memory_text(self) -> str:
        """`memory_verdict` with the peak and the usable memory it was judged by:
        ``fits: 8.07 GB of 16.0 GB``."""
        judged = self.target_memory
        if judged is None or judged.peak is None:
            return self.memory_verdict
        text = f"{self.memory_verdict}: {size(judged.peak)} of {size(judged.usable)}"
        if judged.rematerialized:
            text += f", {sum(judged.rematerialized.values()):,} instruction(s) recomputed"
        return text

    def memory_note(self) -> str:
        """What the memory verdict judged, in words."""
        judged = self.target_memory
        if judged is None:
            return ("memory per device unknown: no target compiled (--target DEVICE, target=, compiles the device's "
                    "own program and judges it)")
        if judged.peak is None:
            return f"memory per device unknown: the {judged.target} compile gave no peak"
        program = (f"{judged.peak_of} of the priced program" if judged.exact
                   else f"the priced program's {judged.peak_of.removeprefix('its ')}")
        said = (f"memory per device: {program} peaks at {size(judged.peak)} of the "
                f"{size(judged.usable)} a program may use on one {judged.title} ({judged.target})")
        if not judged.exact:
            said += ", a lower bound of the step's (the optimizer state is not among its arguments)"
        if judged.rematerialized:
            said += ("; the compiler recomputed instructions to fit (XLA's rematerialization: " + ", ".join(
                f"{n:,} in {program}" for program, n in judged.rematerialized.items()) + "), in the priced figures")
        return said

    def model_text(self) -> str:
        """The model as configured: ``gpt2-small with n_layer=80, d_model=8192``
        (the settings changed from its defaults) and ``70.1B parameters, layers unrolled``."""
        changed = ", ".join(f"{key}={value}" for key, value in self.settings.items())
        return f"{self.model}{f' with {changed}' if changed else ''}"

    def describe(self) -> str:
        what = f"{self.tokens:,} tokens" if self.tokens is not None else f"{self.samples:,} samples"
        about_text = "; ".join(x for x in (model_facts(self.parameters, self.layers, self.active_parameters),
                                           ", ".join(x for x in (self.optimizer, self.dtype) if x)) if x)
        compiled = f" compiled for {self.target}" if self.target is not None else ""
        line = (f"{self.model_text()}{f' ({about_text})' if about_text else ''}{compiled}: "
                f"{what} on {self.devices} device(s)")
        if self.mesh or self.micro_batches > 1:
            spread = [mesh_text(self.mesh)] if self.mesh else []
            line += f" ({', '.join([*spread, f'{self.micro_batches} micro-batch(es) a step'])})"
        if self.hardware is not None:
            return f"{line}; {pricing_text(self.hardware, self.step.calibration, proxy=self.target is None)}"
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
            "parameters": self.parameters, "active_parameters": self.active_parameters,
            "settings": dict(self.settings), "layers": self.layers,
            "sequence_length": self.sequence_length, "flops_counted": self.flops_counted,
            "samples_per_second": self.samples_per_second,
            "samples_per_second_per_device": self.samples_per_second_per_device,
            "tokens_per_second": self.tokens_per_second,
            "tokens_per_second_per_device": self.tokens_per_second_per_device,
            "model_flops_per_sample": self.model_flops_per_sample,
            "hardware_flops_per_sample": self.hardware_flops_per_sample, "peak_flops": self.peak_flops,
            "model_flops_utilization": self.model_flops_utilization,
            "hardware_flops_utilization": self.hardware_flops_utilization,
            "memory_verdict": self.memory_verdict,
            "target_memory": self.target_memory.to_dict() if self.target_memory is not None else None,
            "interval": None if self.interval is None else {
                **{name: list(span) if span is not None else None for name, span in self.intervals().items()},
                "description": self.interval_description},
            "notes": self.notes(),
        }

    def to_frame(self) -> pd.DataFrame:
        """One row: every figure of `to_dict` (the mesh and the settings as
        ``key=value,...``; of the target's memory the verdict alone)."""
        row = {key: value for key, value in self.to_dict().items() if key not in ("target_memory", "interval")}
        row.update({f"{name}_{end}": None if span is None else span[i]
                    for name, span in self.intervals().items() for i, end in enumerate(("low", "high"))})
        row.update(mesh=mesh_text(self.mesh) or None, settings=mesh_text(self.settings) or None,
                   notes=json.dumps(row["notes"]))  # a list in one cell, as a sweep's CSV holds a run's notes
        return pd.DataFrame([row])

    def sections(self) -> list[Section]:
        """The run (its size, FLOP and time) and one step's times, each figure in its own unit."""
        p = self.step.prediction
        spans = self.intervals()

        def shown(value: float | None, name: str, text: Any) -> str:  # a figure and, predicted, its range
            span = spans[name]
            return text(value) + ("" if span is None else f" ({text(span[0])} to {text(span[1])})")

        rate = (lambda v: UNKNOWN if v is None else f"{v:,.0f}" if v >= 100 else sig(v, 3))
        unit = "tokens" if self.sequence_length is not None else "samples"
        per_second = self.tokens_per_second if self.sequence_length is not None else self.samples_per_second
        per_device = (self.tokens_per_second_per_device if self.sequence_length is not None
                      else self.samples_per_second_per_device)
        run = [
            ("devices", count(self.devices)),
            ("tokens" if self.tokens is not None else "samples",
             count(self.tokens if self.tokens is not None else self.samples)),
            ("global batch", count(self.step.global_batch)),
            ("micro-batches per step", count(self.micro_batches)),
            ("optimizer steps", count(self.steps)),
            ("train-step FLOP per sample", amount(self.flops_per_sample, "FLOP")),
            ("total FLOP", amount(self.total_flops, "FLOP")),
            (f"time ({self.priced_as})", shown(self.seconds, "seconds", duration)),
            (f"{unit} per second", shown(per_second, f"{unit}_per_second", rate)),
            (f"{unit} per second per device", shown(per_device, f"{unit}_per_second_per_device", rate)),
            ("MFU (model FLOP / peak)", shown(self.model_flops_utilization, "model_flops_utilization", pct_sig)),
            ("HFU (with recomputation)", shown(self.hardware_flops_utilization, "hardware_flops_utilization",
                                               pct_sig)),
            ("memory per device", self.memory_text()),
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

    def notes(self) -> list[str]:
        """How the FLOP per sample, MFU and HFU were counted, and what the memory verdict judged."""
        said = [self.memory_note()]
        if self.interval is not None:
            said.append(f"the ranges beside the predicted figures: {self.interval_description}")
        elif self.interval_description:
            said.append(f"no range beside the predicted figures: {self.interval_description}")
        if not whole_model_compiled(self.target, self.mesh):
            how = ("counted from the one-device step's jaxpr" if self.flops_counted == "jaxpr" else
                   "from the one-device step the CPU compiles (its jaxpr holds operations it cannot count)")
            why = (f"the whole model is not compiled for one {self.target} device" if self.target is not None else
                   "each device of the pipeline runs a stage, and the whole model is not compiled")
            said.append(f"FLOP per sample {how}: {why}; the priced step is the layout's sharded program")
        if self.step.parts.get(UPDATE_PART):
            said.append(f"update collectives: {UPDATE_PART_NOTE}")
        arithmetic = (self.hardware.arithmetic if self.hardware is not None else None) or self.dtype
        if self.peak_flops is None:
            return [*said, "MFU and HFU unknown: no device peak recorded"]
        said.extend(self.routing_notes)
        padding = " and the routed experts' capacity padding" if any(  # (declared: an undeclared one's is in both)
            note.startswith(ROUTING_NOTE) and "capacity padding" in note for note in self.routing_notes) else ""
        said.append(f"MFU and HFU: the model's FLOP per sample (forward and backward; HFU with remat's recomputation"
                    f"{padding}, the optimizer's update in neither) x samples per second per device over one device's "
                    f"{arithmetic} peak, {amount(self.peak_flops, 'FLOP/s')} (Chowdhery et al. 2022, Appendix B)")
        if self.target_memory is not None and (self.micro_batches > 1 or self.mesh.get("pipeline", 1) > 1):
            said.append("memory judged on one micro-batch's program" + (
                " of the slowest pipeline stage: 1F1B holds up to P micro-batches' activations at once, more"
                if self.mesh.get("pipeline", 1) > 1 else ": accumulating gradients over micro-batches needs more"))
        return said


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
    rings: a lower bound on time where the device's own program is priced,
    ``target``; from the CPU program's totals the roofline charges every byte,
    the products' operands included, at the bandwidth, and can exceed the
    prediction: a 2-layer GPT-2 small, 2 sequences of 64 a step, 1.13 ms
    against 0.91 ms), and an explicit ``mfu`` a roofline at that
    share of peak; a prediction carries the validation's held-out range
    (`xla_cost.timemodel.calibration.interval`) where the constants have one.

    With a ``target``, or a pipeline, the FLOP per sample are counted from the
    one-device step's jaxpr (the CPU's compile where it cannot count them):
    the whole model is never compiled for one of the target's devices, which a
    layout sharded for want of memory does not fit, nor for a pipeline, whose
    devices each run a stage (`whole_model_compiled`); the layout's sharded program is
    compiled for the target, priced, and judged against one device's memory
    (``memory=True``: `TrainingEstimate.memory_verdict`). The result also gives
    the run's and each device's samples (tokens) per second, MFU and HFU.

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
      batch_size: samples per micro-batch per data-parallel rank (None: ``input_shape``'s first axis,
        as ``--input-shape``'s on the command line; 1 without it).
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
    batch_size = input_batch(batch_size, input_shape)  # the shape's first axis, as the command line takes it
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
    analyse = analyser(store, judged=where.run)  # the priced program's memory judged on its target
    # the model's FLOP from one device, the step the CPU compiles; counted from its jaxpr where no device
    # runs the whole model (`whole_model_compiled`); where the jaxpr has operations it cannot count, the
    # CPU's compile after all (which refuses no memory)
    whole = whole_model_compiled(one.target, mesh)
    counted = one if whole else dataclasses.replace(one, target=None, counter="jaxpr")
    progress.stage(f"the model on one device ({'compiled on the CPU' if whole else 'its jaxpr'})", 0, 2)
    single = analyse(counted)
    if single.phases["train_step"].flops is None and counted.counter == "jaxpr":
        counted = dataclasses.replace(counted, counter="xla")
        single = analyse(counted)
    flops = single.phases["train_step"].flops
    if flops is None:
        raise InputError("a model whose train-step FLOP are known", "unknown", "See the analysis notes.")
    # the update runs once a step, not once a micro-batch, and FSDP shards it: over a step's global batch
    # (data x B x M samples) the data-parallel copies run data / fsdp whole updates
    update = single.phases["update"].flops or 0
    shards = where.run.mesh.get("fsdp", 1) if where.run.mesh else 1
    per_sample = (flops - update + update / (micro * shards)) / single.batch_size
    compiled = f" compiled for {one.target}" if one.target is not None else ""
    progress.stage(f"the step on {mesh_devices(where.run.mesh)} device(s){compiled}", 1, 2)
    step = priced_step(where, hardware, analyse)
    progress.stage("priced", 2, 2)
    steps = math.ceil(n / step.global_batch)
    # the step's range (`StepEstimate.interval`, none for a bound) over every step: the same factor of the time
    interval = None if step.interval is None else (steps * step.interval[0], steps * step.interval[1])
    grad = single.phases["grad"]
    per = (lambda value: None if value is None else value / single.batch_size)
    return TrainingEstimate(
        model=one.name, devices=step.devices, samples=int(n), tokens=token_count,
        flops_per_sample=per_sample, total_flops=per_sample * n, steps=steps, step=step,
        seconds=steps * step.prediction.seconds, hardware=hardware, mesh=mesh, micro_batches=micro,
        optimizer=one.optimizer, dtype=one.dtype, target=one.target,
        parameters=single.parameters, settings=_settings(one), layers=layers_of(one),
        sequence_length=one.sequence_length(), model_flops_per_sample=per(grad.model_flops),
        hardware_flops_per_sample=per(grad.hardware_flops),
        peak_flops=hardware.peak().require(hardware.arithmetic or one.dtype),
        target_memory=analyse(where.run).target_memory, flops_counted=counted.counter.replace("xla", "compiled"),
        interval=interval, interval_description=step.interval_description,
        routing_notes=tuple(note for note in single.notes if note.startswith((ROUTING_NOTE, UNDECLARED_ROUTING_NOTE))),
        active_parameters=single.active_parameters,
    )


def whole_model_compiled(target: str | None, mesh: Mapping[str, int]) -> bool:
    """Whether `estimate` compiles the whole model on the CPU for its FLOP per
    sample, rather than count them from the one-device step's jaxpr: only
    where a device of the layout runs the whole model. Not with a ``target``
    (the whole model on one chip may not fit it, and libtpu refuses such a
    program: a layout sharded for want of memory read as if it did not fit),
    nor in a pipeline (each device runs a stage; the whole unrolled model
    compiled on the CPU was 13.6 s of GPT-2 XL's 19.2 s estimate on 64 devices,
    and grows with the layers a pipeline is there to split)."""
    return target is None and mesh.get("pipeline", 1) <= 1


def _settings(run: RunConfig) -> dict[str, Any]:
    """The settings of ``run``'s model that differ from its zoo defaults (a
    model of your own: its arguments as given), in the order given."""
    if run.custom:
        return dict(run.config)
    defaults = zoo.get_spec(run.model).defaults
    return {key: value for key, value in run.config.items() if defaults.get(key) != value}


