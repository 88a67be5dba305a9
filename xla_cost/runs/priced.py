"""What `xla_cost.runs.scaling` prices: one step (`StepEstimate`) and a curve of them (`ScalingResult`).

The results only: how they were priced (`pricing_text`), their figures
(``to_dict``, ``to_frame``), tables and plots. `xla_cost.runs.scaling.predict`
makes them; `xla_cost.runs.estimates` builds a whole run's estimate on one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from xla_cost.timemodel import comm, schedule
from xla_cost.timemodel.hardware import Hardware
from xla_cost.present.document import Rendered, Section
from xla_cost.present.files import write_file
from xla_cost.present.figures import figure, png, style
from xla_cost.present.markdown import markdown_table
from xla_cost.present.units import bytes_unit, duration, flop_unit, pct, scaled, si, sig, time_unit
from xla_cost.present.units import size as bytes_text
from xla_cost.runs.layouts import mesh_text, model_facts

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["StepEstimate", "ScalingResult", "pricing_text"]


@dataclasses.dataclass(frozen=True)
class StepEstimate:
    """One sharded train step priced: per-device work and its predicted time.

    Attributes:
      devices: devices in the step (the analysed mesh, its pipeline stages and replicas).
      global_batch: samples per step over all devices.
      flops: train-step FLOP per device (grad + update, loop-corrected).
      bytes_accessed: train-step bytes per device (XLA's).
      communication_bytes: buffers the train step's collectives work on, per device.
      prediction: compute, communication, exposed communication and step
        seconds: the step is compute + the communication not hidden + the
        pipeline bubble, and the communication not hidden is never more than
        all of it (the bubble is idle time, not communication).
      collectives: each collective's time.
      notes: unknowns and assumptions met.
      parts: the predicted step's seconds by part: ``matmul`` and ``memory``
        (compute, calibrated; or ``roofline`` for a bound), ``tensor`` (the
        analysed mesh's blocking collectives), ``stage_transfers`` (each
        micro-batch's activations sent to the next pipeline stage and their
        gradient back), ``pipeline_bubble`` (the 1F1B schedule's idle slots:
        ``(p - 1) / (v m)`` of the ``m`` micro-batches' time), ``gradients``
        (the exposed gradient reduction), ``update``, ``update_collectives`` (the
        update program's own, once a step, blocking it: Muon's gathers under ``fsdp``;
        absent when it has none); they add up to the step.
      calibration: the time model's constants, described, or "" for a bound.
      interval: the step's seconds as the validation's held-out published cases ran against
        their predictions, (shortest, longest) (`xla_cost.timemodel.calibration.interval`:
        the range around ``prediction.seconds`` that held most of them; it holds the figure);
        None: a bound, or constants without an interval.
      interval_description: what ``interval`` is computed on and its bias, in words (a
        prediction without one: that its constants carry none; "": a bound).
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
    interval: tuple[float, float] | None = None
    interval_description: str = ""

    def describe(self) -> str:
        """One line: the step, its time (and its range, `interval`) and how it was priced."""
        how = f"predicted ({self.calibration})" if self.calibration else "a bound"
        span = "" if self.interval is None else f" ({duration(self.interval[0])} to {duration(self.interval[1])})"
        return (f"one train step on {self.devices:,} device(s), global batch {self.global_batch:,}: "
                f"{duration(self.prediction.seconds)}{span}, {how}")

    def interval_note(self) -> str:
        """What the range beside the step's time is (or that a prediction has none; "" for a bound)."""
        if self.interval is not None:
            return f"the range beside the predicted step time: {self.interval_description}"
        return f"no range beside the predicted step time: {self.interval_description}" \
            if self.interval_description else ""

    def to_dict(self) -> dict[str, Any]:
        """Every figure raw: per-device work, the predicted seconds by part, the collectives' times."""
        p = self.prediction
        return {
            "devices": self.devices, "global_batch": self.global_batch, "flops_per_device": self.flops,
            "bytes_accessed_per_device": self.bytes_accessed,
            "communication_bytes_per_device": self.communication_bytes,
            "step_s": p.seconds, "compute_s": p.compute_seconds, "communication_s": p.communication_seconds,
            "exposed_communication_s": p.exposed_communication_seconds,
            **{f"{part}_s": value for part, value in self.parts.items()},
            "priced_as": "prediction" if self.calibration else "bound", "calibration": self.calibration or None,
            "step_interval_s": None if self.interval is None else list(self.interval),
            "interval_description": self.interval_description or None,
            "collectives": [dataclasses.asdict(c) for c in self.collectives], "notes": list(self.notes),
        }

    def to_frame(self) -> pd.DataFrame:
        """One row: the figures of `to_dict` (estimates of several steps concatenate; the
        interval as ``step_low_s`` and ``step_high_s``)."""
        row = {k: v for k, v in self.to_dict().items() if k not in ("collectives", "notes", "step_interval_s")}
        row.update(step_low_s=None if self.interval is None else self.interval[0],
                   step_high_s=None if self.interval is None else self.interval[1])
        return pd.DataFrame([row])

    def sections(self) -> list[Section]:
        """The step's time by part, in one time unit, and its work per device."""
        p = self.prediction
        times = {"step": p.seconds, "compute": p.compute_seconds, "communication": p.communication_seconds,
                 "communication not hidden": p.exposed_communication_seconds,
                 **{f"  {part.replace('_', ' ')}": value for part, value in self.parts.items() if value}}
        scale, name = time_unit(times.values())
        work = [("FLOP", si(self.flops)), ("bytes accessed", bytes_text(self.bytes_accessed)),
                ("bytes sent by collectives", bytes_text(self.communication_bytes))]
        return [Section("time", pd.DataFrame([(part, scaled(value, scale)) for part, value in times.items()],
                                              columns=["time", name])),
                Section("per device", pd.DataFrame(work, columns=["work", "amount"]))]

    def to_markdown(self) -> str:
        """A markdown section: `describe`, the `sections` as tables, the notes (and `interval_note`) as a list."""
        parts = [self.describe(), *(f"**{s.title}**\n\n{markdown_table(s.cells())}" for s in self.sections())]
        notes = [*self.notes, *([self.interval_note()] if self.interval_note() else [])]
        parts += ["\n".join(f"- {note}" for note in notes)] if notes else []
        return "\n\n".join(parts) + "\n"

    def _repr_markdown_(self) -> str:
        """How a notebook (IPython's display) shows the step: `to_markdown`."""
        return self.to_markdown()


def pricing_text(hardware: Hardware, described: str, *, proxy: bool = False) -> str:
    """How a result was priced, in words: a prediction with the time model's constants, or a bound.

    Args:
      hardware: what it was priced on.
      described: the constants, described (`xla_cost.timemodel.calibration.describe`).
      proxy: no compile target: the step priced from its program's totals (the CPU's,
        where the analysis ran on one), not kernel by kernel
        (`xla_cost.timemodel.calibration.PROXY_NO_RANGE`).
    """
    if hardware.overlap is None:
        hidden = "gradients scheduled against the backward pass" + (
            f" in {hardware.bucket_bytes / 2**20:g} MiB buckets" if hardware.bucket_bytes else ", one by one")
    else:
        hidden = "nothing hidden" if hardware.overlap == 0 else f"{hardware.overlap:g} of the communication hidden"
    levels = "hierarchical all-reduces" if hardware.hierarchical else "flat rings"
    if not hardware.is_bound:
        how = "from the totals of a program compiled without a target" if proxy else "every kernel priced"
        return f"predicted: {how} ({described}), {hidden}, {levels}"
    return f"a bound: compute at {hardware.mfu:.0%} of peak (roofline), {hidden}, {levels}"


@dataclasses.dataclass(frozen=True)
class ScalingResult(Rendered):
    """A scaling curve: one `StepEstimate` per device count, and the curve.

    Attributes:
      model: the canonical zoo name, ``package.module:attr``, or a module object's class name.
      mesh_axis: the axis grown (``data`` or ``fsdp``).
      batch_size: samples per micro-batch per data-parallel rank (weak
        scaling), or None under strong scaling.
      hardware: what the curve is priced on.
      steps: per device count.
      points: speed-up and efficiency per device count (`xla_cost.timemodel.schedule.ScalingPoint`).
      global_batch: samples per step over all devices, fixed (strong scaling),
        or None under weak scaling.
      mesh: the rest of the layout around each point (`Parallelism.mesh`; empty: none).
      micro_batches: micro-batches per step per replica.
      optimizer, dtype: the step's (named in `describe`; the default of
        ``scaling`` and ``estimate`` is `xla_cost.choices.DEFAULT_OPTIMIZER`, adam).
      target: the device every point's program was compiled for
        (`xla_cost.RunConfig.target`), None: the default backend (the CPU).
      settings: the model's arguments as given (``--set``; ``n_layer=2``), named in `describe`.
      parameters: the model's parameters as configured (None: not recorded, or a pipeline's, whose
        analysed program is one stage); named in `describe`.
      layers: ``scanned`` or ``unrolled`` (the zoo's ``scan_layers``; None: a model of your own).
    """

    model: str
    mesh_axis: str
    batch_size: int | None
    hardware: Hardware
    steps: tuple[StepEstimate, ...]
    points: tuple[schedule.ScalingPoint, ...]
    global_batch: int | None = None
    mesh: Mapping[str, int] = dataclasses.field(default_factory=dict)
    micro_batches: int = 1
    optimizer: str = ""
    dtype: str = ""
    target: str | None = None
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    parameters: int | None = None
    layers: str | None = None

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
    def overlap(self) -> float | None:
        """The fixed share of communication hidden, or None: the gradients scheduled against the backward pass."""
        return self.hardware.overlap

    @property
    def efficiency(self) -> float | None:
        """The share of peak FLOP/s of a bound (`xla_cost.Hardware.mfu`), or None: calibrated compute."""
        return self.hardware.mfu

    @property
    def calibration(self) -> str:
        """The time model's constants the curve is predicted with, described, or "" for bounds."""
        return self.steps[0].calibration if self.steps else ""

    def describe(self) -> str:
        """One line: what was priced."""
        batch = (f"{self.global_batch} samples per step over all devices (strong scaling)"
                 if self.global_batch is not None else f"{self.batch_size} sample(s) per device")
        around = f" around {mesh_text(self.mesh)}" if self.mesh else ""
        around += f", {self.micro_batches} micro-batches a step" if self.micro_batches > 1 else ""
        step = "; ".join(x for x in (model_facts(self.parameters, self.layers),
                                     ", ".join(x for x in (self.optimizer, self.dtype) if x)) if x)
        changed = ", ".join(f"{key}={value}" for key, value in self.settings.items())
        model = f"{self.model} with {changed}" if changed else self.model
        name = f"{model} ({step})" if step else model
        name += f" compiled for {self.target}" if self.target is not None else ""
        return (f"{name}: {self.mesh_axis} parallel, {batch}{around}, {self.device} ({self.interconnect} "
                f"interconnect, {self.algorithm} collectives); {pricing_text(self.hardware, self.calibration, proxy=self.target is None)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "settings": dict(self.settings), "parameters": self.parameters, "layers": self.layers,
            "optimizer": self.optimizer, "dtype": self.dtype, "target": self.target, "mesh_axis": self.mesh_axis, "batch_size": self.batch_size,
            "global_batch": self.global_batch, "mesh": dict(self.mesh), "micro_batches": self.micro_batches,
            "device": self.device, "interconnect": self.interconnect, "algorithm": self.algorithm,
            "priced_as": "bound" if self.hardware.is_bound else "prediction",
            "calibration": self.calibration or None, "overlap": self.overlap, "efficiency": self.efficiency,
            "bucket_bytes": self.hardware.bucket_bytes, "hierarchical": self.hardware.hierarchical,
            "points": self.to_frame().to_dict(orient="records"),
        }

    def to_frame(self) -> pd.DataFrame:
        """One row per device count."""
        rows = []
        for step, at in zip(self.steps, self.points):
            rows.append({
                "devices": at.devices, "global_batch": at.global_batch,
                "flops_per_device": step.flops, "communication_bytes_per_device": step.communication_bytes,
                "compute_s": at.compute_seconds, "communication_s": at.communication_seconds,
                "exposed_communication_s": at.exposed_communication_seconds,
                "host_s": step.parts.get("host", 0.0) + step.parts.get("dispatch_wait", 0.0),
                "step_s": at.step_seconds,
                "step_low_s": None if step.interval is None else step.interval[0],
                "step_high_s": None if step.interval is None else step.interval[1],
                "samples_per_s": at.samples_per_second,
                "speedup": at.speedup, "efficiency": at.efficiency,
            })
        return pd.DataFrame(rows)

    def sections(self) -> list[Section]:
        """`to_frame` with headers that wrap and each column in its own unit
        (FLOP, bytes, one time unit for the times), narrow enough for a
        100-column terminal: the communication column is the part not hidden
        (all of it is in `to_frame`, and a note); a predicted step's range
        (`StepEstimate.interval`) in its own column beside the step."""
        frame = self.to_frame()
        flop_scale, flop_name = flop_unit(frame["flops_per_device"])
        byte_scale, byte_name = bytes_unit(frame["communication_bytes_per_device"])
        times = ["compute_s", "exposed_communication_s", "step_s"]
        time_scale, time_name = time_unit(frame[times].to_numpy().ravel())
        shown = pd.DataFrame({
            "devices": frame["devices"],
            "global batch": frame["global_batch"],
            f"{flop_name} per device": frame["flops_per_device"].map(lambda v: scaled(v, flop_scale)),
            f"comm. per device ({byte_name})": frame["communication_bytes_per_device"].map(
                lambda v: scaled(v, byte_scale)),
            **{f"{label} ({time_name})": frame[column].map(lambda v: scaled(v, time_scale, 2))
               for label, column in zip(("compute", "exposed comm.", "step"), times)},
            **({f"step range ({time_name})": [
                f"{scaled(lo, time_scale, 2)}-{scaled(hi, time_scale, 2)}" for lo, hi in
                zip(frame["step_low_s"], frame["step_high_s"])]} if frame["step_low_s"].notna().all() else {}),
            "samples per s": frame["samples_per_s"].map(lambda v: f"{v:,.0f}" if v >= 100 else sig(v, 3)),
            "speed up": frame["speedup"].map(lambda v: f"{v:.2f}x"),
            "efficiency": frame["efficiency"].map(pct),
        })
        return [Section("", shown)]

    def notes(self) -> list[str]:
        scale, name = time_unit([at.communication_seconds for at in self.points])
        notes = ["comm. per device: the buffers the step's collectives work on (an all-reduce's input), not the "
                 "bytes a ring sends (2(n - 1)/n of an all-reduce's)",
                 "exposed comm.: the communication not hidden behind compute; all of it per point: "
                 + ", ".join(f"{at.devices}: {scaled(at.communication_seconds, scale, 2)} {name}"
                             for at in self.points)]
        bubbles = [(at.devices, step.parts.get("pipeline_bubble", 0.0)) for step, at in zip(self.steps, self.points)]
        if any(b for _, b in bubbles):
            scale, name = time_unit([b for _, b in bubbles])
            notes.append("step = compute + exposed comm. + the pipeline bubble (idle stages): "
                         + ", ".join(f"{d}: {scaled(b, scale, 2)} {name}" for d, b in bubbles))
        hosts = [(at.devices, step.parts.get("host", 0.0) + step.parts.get("dispatch_wait", 0.0))
                 for step, at in zip(self.steps, self.points)]
        if any(h for _, h in hosts):  # a step the host's dispatch bounds: compute and communication end before it
            scale, name = time_unit([h for _, h in hosts])
            notes.append("step = compute + exposed comm. + the host's share (its work per step, and the wait "
                         "for its dispatch of the step where that takes longer than the device's work: "
                         "host-bound; `host_s` in the points): "
                         + ", ".join(f"{d}: {scaled(h, scale, 2)} {name}" for d, h in hosts))
        said = self.steps[0].interval_note() if self.steps else ""
        return [*notes, said.replace("predicted step time", "predicted step times")] if said else notes

    def plot(self, path: str | None = None) -> Figure:
        """A matplotlib ``Figure`` of the speed-up and efficiency against devices,
        in the reports' figure style (`xla_cost.present.figures`), as every
        result's ``plot`` returns one.

        Args:
          path: also write it there as a PNG (atomically; a symlink's target, a pipe in place).
        """
        frame = self.to_frame()

        def draw() -> Any:
            fig, axes = figure(10, 4, 1, 2)
            left, right = axes[0]
            kind = "bound" if self.hardware.is_bound else "predicted"
            left.plot(frame["devices"], frame["speedup"], "o-", label=kind)
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
            fig.suptitle(self.describe(), fontsize=9, wrap=True)
            return fig

        with style():
            drawn = draw()
        if path is not None:
            write_file(path, png(lambda: drawn))
        return drawn
