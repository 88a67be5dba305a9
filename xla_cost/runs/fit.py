"""The largest batch whose compiled training step fits in a device's memory.

Each candidate batch is traced and its train step compiled as one program with
the parameters and optimizer state donated, abstractly (nothing is allocated);
XLA's ``memory_analysis()`` gives its peak (arguments + outputs + temporaries
- donated), which must not exceed the usable memory: the device's capacity
times ``memory_fraction`` (JAX's GPU allocator takes 75% of the memory by
default, ``XLA_PYTHON_CLIENT_MEM_FRACTION``; a TPU's runtime all of it).

The search predicts, and checks each prediction with compiles. The peak is
close to affine in the batch (one_net: 33,288 bytes a sample from batch 2 on),
so the line through the smallest batch and twice it predicts the largest
batch that fits; that batch is compiled, and while every batch fits the line
through the last two predicts the next. A batch predicted to fit that does
not (an overshoot) is followed by the batch just below it: the answer if it
fits, and the slope above the limit if not. Once batches on both sides are
known the line between the nearest two (their chord) predicts, or, where the
slopes on each side of the limit differ from it by more than `BEND` (a knee
in the curve), the nearer of the lines through the two batches on each side.
A prediction that is a batch already compiled is checked by its neighbour:
the answer ``B`` fits and ``B + 1`` does not, each established by a compile;
for a peak affine near the limit that takes 4 to 6 compiles. Checks that
keep missing step twice as far each time, and after `PREDICTED` compiles, or
`SHORT` predictions in a row that fit, the search bisects, by ratio while the
bounds are more than a factor 2 apart.

No batch above ``max_batch`` (``--max-batch``; default `DEFAULT_MAX_BATCH`,
65,536, the largest batches published for training) is tried: a memory that
batch still fits is answered with it, saying that the search stopped at the
bound rather than at a batch that does not fit. A memory in which not even the
smallest batch fits is refused, with what that batch needs and what is usable.

With a compile target (``target="h100"``, ``--target``) every batch is
compiled by the target's own compiler (`xla_cost.compiled.targets`, on a
machine without the device): the peak is that program's ``memory_analysis()``,
its buffer assignment, layouts and kernels the target's (a GPU keeps its own
workspace, and runs bfloat16 natively where the CPU widens it), and the
capacity is the target's memory in the registry unless one is given (a GPU's
less the CUDA context: `xla_cost.timemodel.devices.allocatable`). Every batch
is judged by its final peak, also where XLA's rematerialization says it fell
short of its own limit (a device's allocator runs it by the final peak: BERT-base
at 1,193 on an H100). Where a GPU target's compile recomputes anything to fit,
its memory is that of the program compiled again with cuBLAS products, as the
device's autotuner made gpt2-small's
(`xla_cost.compiled.targets.CompileTarget.memory_options`): so compiled, the
answer for gpt2-small's bfloat16 Adam step on an H200, 112, ran there and
1.25 x 112 did not (reports/data/device_check_nvidia-h200_2026-11-26-4.json).
A device whose autotuner fuses more into its products recomputes better than
that program: ViT-B/16's answer on the H200, 1,641, ran and so did 2,051
(reports/data/device_check_nvidia-h200_2026-11-26-5.json), so a GPU target's
answer that the compiler reaches by recomputing is a batch that fits, not
always the largest (its note says so). A GPU target's cuDNN convolutions have
no workspace in a deviceless compile (no device to autotune them on), while
the device's autotuner gives each one: ResNet-50's answer judged by XLA's peak
alone, batch 299 in a tenth of an H100, ran out of memory there
(reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-8.json). Such a
step is judged by its peak plus the largest convolution's operands and result
(`xla_cost.analysis.memory.MemoryBreakdown.needed`,
`xla_cost.compiled.hlo.unsized_conv_scratch`), a row of the result. A TPU's
compiler refuses a program whose temporaries exceed the chip's memory (a
compile-time out-of-memory): that batch does not fit, its peak at least the
temporaries the compiler reports (`CompilerRefused`).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from xla_cost.analysis.memory import PARTS, MemoryBreakdown
from xla_cost.analysis.options import check_target
from xla_cost.analysis.programs import step_memory
from xla_cost.choices import DEFAULT_OPTIMIZER
from xla_cost.compiled import targets
from xla_cost.compiled.compiler_log import out_of_memory
from xla_cost.errors import InputError
from xla_cost.present import progress as progress_line
from xla_cost.timemodel import devices as registry
from xla_cost.parallel import sharding
from xla_cost.present.document import Rendered, Section
from xla_cost.present.units import bytes_unit, scaled
from xla_cost.runs.configs import RunConfig
from xla_cost.runs.layouts import layers_of, model_facts
from xla_cost.step.checks import INT32_MAX
from xla_cost.step.workload import build_workload

__all__ = ["FitResult", "CompilerRefused", "max_batch_size", "breakdown_at", "device_memory",
           "DEFAULT_MEMORY_FRACTION", "DEFAULT_DEVICE", "DEFAULT_MAX_BATCH"]

PREDICTED = 10
"""Compiles after which the search stops predicting and bisects (`_search`);
a peak close to affine in the batch needs 4 to 6."""

SHORT = 3
"""Line predictions in a row that fit after which the search bisects: each was a chord
from the largest fit to a failure far above, under a curve that stays flat while the
compiler recomputes to fit and then climbs (ViT-B/16 on the H200 target: 1,108 to
1,641 within 105-113 GB, 8,864 at 793 GB)."""

BEND = 1.25
"""How far (a factor) the slopes on either side of the limit may differ from
the line between them before the search reads the curve as bent (`_predict`)."""

DEFAULT_DEVICE = "h100"
"""The device whose memory is searched when neither a device nor a target is named."""

DEFAULT_MEMORY_FRACTION = targets.ALLOCATOR_FRACTION
"""The share of the memory a JAX program may use: JAX's GPU default."""

MAX_BATCH = INT32_MAX
"""The largest ``max_batch`` accepted: the largest dimension jax indexes with int32
(`xla_cost.step.checks.INT32_MAX`), which `xla_cost.analyze` refuses beyond."""

DEFAULT_MAX_BATCH = 65_536
"""The largest batch `max_batch_size` searches unless told otherwise (``max_batch=``,
``--max-batch``): a batch a real training step is fed. The largest published are
65,536 samples a step: ResNet-50 on ImageNet (Ying et al. 2018, "Image
Classification at Supercomputer Scale", a TPU v3 pod) and BERT's pre-training
with LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning:
Training BERT in 76 minutes"); language models count their batches of millions of
tokens in sequences, a few thousand (GPT-3: 3.2M tokens, 1,536 sequences of
2,048). Above it a small model's search only compiles batches no one feeds
(one_net on a TPU v5e's compiler: 25 compiles up to 14,009,344, 524 s)."""


def device_memory(device: str) -> tuple[float, str]:
    """``(bytes, source)`` of a device of the registry (`xla_cost.timemodel.devices`).

    Raises:
      InputError: a device whose memory is not known; the message lists those that are.
    """
    found = registry.device(device, has="memory",
                            fix="Pass one of these, or the bytes with --device-memory / device_memory=.")
    return registry.allocatable(found)



@dataclasses.dataclass(frozen=True)
class CompilerRefused:
    """A batch the compile target's compiler refused for want of memory (a
    TPU's compile-time out-of-memory, ``RESOURCE_EXHAUSTED``): it does not fit.

    Attributes:
      peak: a lower bound of the step's peak: the temporaries the compiler
        says the program needs, or one byte over the limit where it names none.
      message: the compiler's first line.
    """

    peak: int
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"peak_at_least": self.peak, "compiler_refused": self.message}

    @classmethod
    def from_error(cls, error: BaseException, limit: float) -> CompilerRefused | None:
        """The refusal in ``error``, a compile that ran out of the device's memory; None: another error."""
        found = out_of_memory(str(error))
        if found is None:
            return None
        first, required, _ = found
        return cls(peak=max(required or 0, math.floor(limit) + 1), message=first or type(error).__name__)


@dataclasses.dataclass(frozen=True)
class FitResult(Rendered):
    """The answer of `max_batch_size`.

    Attributes:
      model: the model's name.
      batch_size: the largest batch that fits (at least the smallest: a memory
        that not even it fits is refused); with ``at_bound``, the bound itself.
      limit: the usable bytes per device (capacity x fraction).
      capacity: the device's memory in bytes.
      capacity_source: where ``capacity`` comes from (the device registry's
        source, or ``given``).
      fits: the memory breakdown at ``batch_size``.
      next_size: ``batch_size + 1`` (the batch axes' size, sharded), the smallest
        that does not fit; with ``at_bound``, the next batch, not tried.
      does_not_fit: the breakdown at ``next_size`` (None with ``at_bound``).
      tried: every batch compiled and the peak it was judged by, in the order
        tried (XLA's final peak, with an allowance for the convolution
        workspaces a deviceless GPU compile leaves out,
        `xla_cost.analysis.memory.MemoryBreakdown.needed`; a compiler's
        refusal's lower bound).
      mesh: the mesh the step was sharded over (empty: one device).
      optimizer, dtype: the step's (named in the sentence; the default is
        `xla_cost.choices.DEFAULT_OPTIMIZER`, adam, as every command's).
      target: the compile target every batch was compiled for
        (`xla_cost.compiled.targets`, ``h100``); None: jax's default backend (the
        CPU's compiler on a machine without an accelerator).
      target_title: the target's device as reports name it (``NVIDIA H100 SXM``).
      remat_short_of: ``(batch, limit, reached)`` of each batch tried whose
        compile XLA's rematerialization pass could bring only to ``reached``
        bytes, short of its own ``limit`` (a headroom under the allocator's):
        such a batch is still judged by its final peak, as a device runs it.
      max_batch: the largest batch searched (``max_batch=``, ``--max-batch``).
      at_bound: whether ``max_batch`` itself fit, so that the search stopped
        there and not at a batch that does not fit: the largest that fits is
        at least ``batch_size``.
      settings: the model's arguments as given (``--set``; ``n_layer=2``), named in the header.
      parameters: the model's parameters as configured (None: not recorded); named in the header.
      layers: ``scanned`` or ``unrolled`` (the zoo's ``scan_layers``; None: a model of your own).
    """

    model: str
    batch_size: int
    limit: float
    capacity: float
    capacity_source: str
    fits: Any
    next_size: int
    does_not_fit: Any
    tried: tuple[tuple[int, int], ...]
    mesh: Mapping[str, int] = dataclasses.field(default_factory=dict)
    optimizer: str = ""
    dtype: str = ""
    target: str | None = None
    target_title: str = ""
    remat_short_of: tuple[tuple[int, int, int], ...] = ()
    max_batch: int = DEFAULT_MAX_BATCH
    at_bound: bool = False
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    parameters: int | None = None
    layers: str | None = None

    def describe(self) -> str:
        scale, unit = self._unit()
        step = "; ".join(x for x in (model_facts(self.parameters, self.layers),
                                     ", ".join(x for x in (self.optimizer, self.dtype) if x)) if x)
        answer = (f"every batch searched fits, up to {self.batch_size:,} (the bound, max_batch / --max-batch): "
                  f"the largest batch that fits is at least {self.batch_size:,}" if self.at_bound
                  else f"the largest batch that fits is {self.batch_size}")
        changed = ", ".join(f"{key}={value}" for key, value in self.settings.items())
        return (
            f"{self.model}{f' with {changed}' if changed else ''}{f' ({step})' if step else ''}: {answer}"
            + (f" per step over {'x'.join(f'{k}={v}' for k, v in self.mesh.items())}" if self.mesh else "")
            + f" (usable {scaled(self.limit, scale, 2)} {unit} of {scaled(self.capacity, scale, 2)} {unit}; "
            f"{self.capacity_source})"
            + (f"; compiled for {self.target_title or self.target} by its own compiler" if self.target else "")
        )

    def _unit(self) -> tuple[float, str]:
        """One byte unit for the result's sentence, table and notes, chosen by
        the capacity (`xla_cost.present.units.bytes_unit`)."""
        return bytes_unit([self.capacity])

    def _rows(self) -> list[tuple[str, str, int | None, int | None]]:
        """``(name, label, bytes at batch_size, bytes at next_size)`` per part
        (`xla_cost.analysis.memory.PARTS`), their sums and XLA's peak."""
        labels = {"parts_total": "sum of parts", "workspace": "workspace (at peak)",
                  "at_peak_total": "sum at XLA's peak", "peak": "XLA's peak",
                  "unsized_scratch": "cuDNN workspaces (allowed)", "needed": "needed (judged)"}
        scratch = any(getattr(b, "unsized_scratch", 0) for b in (self.fits, self.does_not_fit))
        names = (*PARTS, "parts_total", "workspace", "at_peak_total", "peak",
                 *(("unsized_scratch", "needed") if scratch else ()))
        return [
            (name, labels.get(name, name),
             *(None if b is None else getattr(b, name, None) for b in (self.fits, self.does_not_fit)))
            for name in names
        ]

    def to_frame(self) -> pd.DataFrame:
        """One row per part: its bytes per device at ``batch_size`` and at ``next_size``
        (not tried, no column, with ``at_bound``); the last row, ``limit``, the usable
        bytes the peak is held against (the same in both columns), as the table's."""
        rows = [*((name, a, b) for name, _, a, b in self._rows()), ("limit", round(self.limit), round(self.limit))]
        frame = pd.DataFrame(
            [{"part": name, f"batch_{self.batch_size}": a, f"batch_{self.next_size}": b} for name, a, b in rows]
        ).astype({f"batch_{self.batch_size}": "Int64", f"batch_{self.next_size}": "Int64"})
        return frame.drop(columns=[f"batch_{self.next_size}"]) if self.at_bound else frame

    def sections(self) -> list[Section]:
        # the two columns read alike (1.500 GB and 1.500 GB) when a sample adds little: each
        # says which side of the limit it is on, and the limit is the last row
        rows = [*self._rows(), ("limit", "usable (the limit)", self.limit, self.limit)]
        scale, unit = bytes_unit([v for _, _, a, b in rows for v in (a, b)])
        frame = pd.DataFrame(
            [{f"part ({unit} per device)": label,
              f"batch {self.batch_size}: fits": None if a is None else a / scale,
              f"batch {self.next_size}: does not fit": None if b is None else b / scale}
             for _, label, a, b in rows],
            dtype=object,
        )
        if self.at_bound:  # the next batch was not tried (above max_batch): no column of unknowns
            frame = frame.drop(columns=[f"batch {self.next_size}: does not fit"])
        return [Section("", frame)]

    def notes(self) -> list[str]:
        scale, unit = bytes_unit([p for _, p in self.tried])
        tried = ("tried: " + ", ".join(f"{b} ({_against(p, self.limit, scale)} {unit}) {_verdict(p, self.limit)}"
                                       for b, p in self.tried)
                 + f" (limit {scaled(self.limit, scale, 2)} {unit})")
        remat = []
        if self.at_bound:
            remat.append(
                f"the search stops at max_batch {self.max_batch:,} (--max-batch; default {DEFAULT_MAX_BATCH:,}, "
                "the largest batches published for training): that batch fits, and no larger one was tried")
        count = getattr(self.fits, "rematerialized", None)
        if count:
            remat.append(
                f"at batch {self.batch_size} the compiler recomputes {count:,} instructions to fit (XLA's "
                "rematerialization: the step runs slower than it would with the memory)"
                + ("; on a GPU target that program's products are cuBLAS calls, as a real H200's autotuner made "
                   "gpt2-small's (reports/data/device_check_nvidia-h200_2026-11-26-3.json), so the answer is a "
                   "batch that fits, not always the largest: where a device's autotuner fuses more into its "
                   "products it recomputes less, and 1.25x of the answer ran for BERT-base on an H100 and "
                   "ViT-B/16 on an H200 (reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-4.json, "
                   "device_check_nvidia-h200_2026-11-26-5.json)"
                   if self.target is not None and registry.target(self.target).platform == "cuda" else ""))
        short = self.remat_short_of
        if short:
            remat.append(
                "rematerialization short of its own limit (the compiler's log; judged by the final peak, "
                "as a GPU's allocator runs it): " + ", ".join(
                    f"batch {b} ({scaled(reached, scale, 2)} {unit} reached, {scaled(sought, scale, 2)} {unit} sought)"
                    for b, sought, reached in short))
        scratch = getattr(self.fits, "unsized_scratch", 0) or getattr(self.does_not_fit, "unsized_scratch", 0)
        if scratch:
            remat.append(
                "the target's cuDNN convolutions have no workspace in a deviceless compile (no device to autotune "
                "on); each batch is judged by XLA's peak plus its largest convolution's operands and result, "
                f"{scaled(scratch, scale, 2)} {unit} at batch {self.batch_size if self.fits is not None else self.next_size}: "
                "ResNet-50's answer without it ran out of memory on an H100 "
                "(reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-8.json), and the workspaces measured "
                "took 0 to 0.87 of it on an H200 (reports/data/conv_workspaces_nvidia-h200_2026-11-26.json): an "
                "answer that fits, up to a quarter below the largest")
        if self.target is None and self.capacity_source == "given":  # a budget of bytes, no device's: the CPU's own
            return [tried, *remat]
        if self.target is None:
            return [tried, *remat, "each peak is the CPU's compile of the step, a proxy: its fusions and buffers "
                    "are not a GPU's or a TPU's (gpt2-small, float32, Adam, on an H100: 19 from the CPU's peaks, where "
                    "`--target h100`'s 42 ran on an H100, reports/memory.md); --target DEVICE (target=) compiles the "
                    "device's own program"]
        return [tried, *remat, f"compiled for {self.target_title or self.target} ({self.target}) by its own compiler, with "
                "no such device here: each peak is that program's memory_analysis() (arguments + outputs + "
                "temporaries - aliased), its buffers, layouts and kernels the target's"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "parameters": self.parameters, "layers": self.layers,
            "optimizer": self.optimizer, "dtype": self.dtype, "batch_size": self.batch_size, "limit": self.limit,
            "capacity": self.capacity, "capacity_source": self.capacity_source, "mesh": dict(self.mesh),
            "fits": None if self.fits is None else self.fits.to_dict(),
            "next_size": self.next_size,
            "does_not_fit": None if self.does_not_fit is None else self.does_not_fit.to_dict(),
            "tried": [list(t) for t in self.tried], "target": self.target,
            "remat_short_of": [list(t) for t in self.remat_short_of],
            "max_batch": self.max_batch, "at_bound": self.at_bound, "settings": dict(self.settings),
        }


def _judged(result: MemoryBreakdown | CompilerRefused) -> int:
    """The bytes a batch is judged by: a breakdown's `needed` (XLA's peak and the
    workspaces of convolutions a deviceless compile could not size), a refusal's
    lower bound."""
    if isinstance(result, MemoryBreakdown):
        return result.needed  # type: ignore[return-value]  (a peak of None is refused before)
    return result.peak


def _verdict(peak: float, limit: float) -> str:
    return "fits" if peak <= limit else "does not fit"


def _against(peak: float, limit: float, scale: float) -> str:
    """The peak in a unit of ``scale`` bytes with the decimals (2 to 9) that
    tell it from the limit: ``60.000023`` against ``60.00``."""
    digits = next((d for d in range(2, 9) if scaled(peak, scale, d) != scaled(limit, scale, d)), 9) \
        if peak != limit else 2
    return scaled(peak, scale, digits)


def breakdown_at(run: RunConfig, batch: int) -> MemoryBreakdown:
    """The memory breakdown of ``run``'s donated train step at ``batch`` (its mesh applied)."""
    run = dataclasses.replace(run, batch_size=batch)
    built, inputs, _, _, _ = run.build()
    workload, _ = build_workload(built, inputs, optimizer=run.optimizer)
    plan = None
    if sharding.mesh_devices(run.mesh) > 1:
        plan = sharding.plan_sharding(workload, dict(run.mesh), model_rules=sharding.model_rules(built))
    return step_memory(workload, plan, True)


def parameter_count(run: RunConfig) -> int:
    """The parameters of ``run``'s model as configured, from its abstract initialisation (nothing
    compiled, no array made)."""
    built, inputs, _, _, _ = run.build()
    return build_workload(built, inputs, optimizer=run.optimizer)[0].parameters


def max_batch_size(
    model: Any,
    *,
    device: str | None = None,
    device_memory_bytes: float | None = None,
    memory_fraction: float | None = None,
    mesh: Mapping[str, int] | None = None,
    progress: bool | None = None,
    # the run: `xla_cost.RunConfig`'s fields
    config: Mapping[str, Any] | None = None,
    optimizer: str = DEFAULT_OPTIMIZER,
    dtype: str = "float32",
    input_shape: tuple[int, ...] | None = None,
    input_dtype: str | None = None,
    target: str | None = None,
    max_batch: int = DEFAULT_MAX_BATCH,
) -> FitResult:
    """The largest batch whose train step fits in ``device``'s memory.

    Args:
      model: a zoo name, ``package.module:attr`` or a Linen or NNX module
        object (both with ``input_shape``).
      device: a device of the registry with a known memory
        (`xla_cost.timemodel.devices`); None: the target's, else `DEFAULT_DEVICE` (h100).
      device_memory_bytes: the capacity in bytes instead (e.g. a CPU budget).
      memory_fraction: the usable share of the capacity; None: the device's
        runtime's, `DEFAULT_MEMORY_FRACTION` (0.75, JAX's GPU allocator) on a GPU,
        1 on a TPU (as `xla_cost.Report.target_memory` judges a step).
      mesh: shard the step (``{"fsdp": 8}``); the batch is then the global
        batch and the memory per device; it must divide by the batch axes.
      progress: a line on stderr per batch compiled, its peak and whether it
        fits (``fit: batch 256 → 1.23 GB, fits``); None: when stderr is a
        terminal (the command line shows them unless ``--quiet``).
      config: the model's arguments (`xla_cost.RunConfig.config`).
      optimizer, dtype: the step's optimizer (default
        `xla_cost.choices.DEFAULT_OPTIMIZER`: adam) and computation dtype.
      input_shape: a custom model's input shape; its first entry is replaced
        by each batch tried.
      input_dtype: a custom model's input dtype (default: ``dtype``).
      target: compile every batch for this device with its own compiler
        (`xla_cost.timemodel.devices.target`: ``h100``, ``a100-80gb``,
        ``tpu-v5e``), on a machine without it; its datasheet memory is the
        capacity unless ``device_memory_bytes`` is given. Needs the platform's
        extra (``pip install 'xla-cost[gpu]'`` or ``[tpu]``). None: jax's default
        backend (the CPU's compiler, a proxy for the device's).
      max_batch: the largest batch searched (``--max-batch``; default
        `DEFAULT_MAX_BATCH`, 65,536): where it fits the answer is it, with
        ``at_bound`` set, and no larger batch is compiled.

    Raises:
      InputError: an unknown device or target, a target whose compiler is not
        installed, a device and a target that name different devices, a
        fraction outside (0, 1], a capacity that is not finite and positive,
        a ``max_batch`` that is not a whole number from the smallest batch (1,
        or the mesh's batch axes) to `MAX_BATCH`, or a memory in which not even
        the smallest batch fits (the message gives what it needs and what is usable).
    """
    found = None if target is None else check_target(target)
    if found is not None and device is not None and registry.device(device).name != found.device:
        raise InputError(
            f"the device the step is compiled for (--target {found.name}: {found.device}), whose memory is searched",
            f"--device {device}",
            f"Drop --device (device=): the target's {found.device} memory is searched; or compile for {device} "
            f"(--target {device}).")
    named = device  # a device named beside --device-memory sets the usable share: the header says whose
    device = device if device is not None else found.device if found is not None else DEFAULT_DEVICE
    if device_memory_bytes is None:
        capacity, source = device_memory(device)  # a target's too: the registry's, with its source
    else:
        if isinstance(device_memory_bytes, bool) or not isinstance(device_memory_bytes, (int, float)) \
                or not 0 < device_memory_bytes < math.inf:
            raise InputError("a device memory in bytes, finite and > 0", repr(device_memory_bytes),
                             "Pass e.g. --device-memory 8e9.")
        capacity, source = float(device_memory_bytes), "given" if named is None else f"given; {named}'s usable share"
    if memory_fraction is None:  # a TPU's runtime takes all of its memory (no allocator's share)
        memory_fraction = 1.0 if registry.device(device).tpu is not None else DEFAULT_MEMORY_FRACTION
    if isinstance(memory_fraction, bool) or not isinstance(memory_fraction, (int, float)) \
            or not 0 < memory_fraction <= 1:
        raise InputError("a memory fraction in (0, 1]", repr(memory_fraction), "Pass e.g. --memory-fraction 0.9.")
    if found is not None and found.gpu is not None:  # its compiler plans for the share, as a device's is told it
        found = dataclasses.replace(found, memory_fraction=memory_fraction)
    mesh = dict(mesh or {})
    run = RunConfig(model, config=dict(config or {}), optimizer=optimizer, dtype=dtype, input_shape=input_shape,
                    input_dtype=input_dtype, mesh=mesh)
    step = 1
    if mesh:
        sizes = sharding.check_mesh(mesh)
        if found is None:  # a target's devices come from its topology: none simulated
            sharding.simulate_devices(sharding.mesh_devices(sizes))
        else:
            sharding.check_device_count(sharding.mesh_devices(sizes))
        step = max(1, sharding.mesh_devices({a: sizes.get(a, 1) for a in sharding.BATCH_AXES}))
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or not step <= max_batch <= MAX_BATCH:
        raise InputError(f"a largest batch to search (max_batch, --max-batch) from {step:,} "
                         f"({'the batch axes of the mesh' if mesh else 'one sample'}) to {MAX_BATCH:,} "
                         "(jax indexes arrays with int32)", repr(max_batch),
                         f"Pass e.g. --max-batch {DEFAULT_MAX_BATCH} (the default).")
    limit = capacity * memory_fraction
    cache: dict[int, Any] = {}
    tried: list[tuple[int, int]] = []
    shown = sys.stderr.isatty() if progress is None else progress
    scale, unit = bytes_unit([limit])

    def peak(batch: int) -> int:
        if batch not in cache:
            progress_line.stage(f"compiling the step at batch {batch}", len(tried))
            try:
                cache[batch] = breakdown_at(run, batch)
            except Exception as exc:  # a target's compiler out of memory: a batch that does not fit
                refused = None if found is None else CompilerRefused.from_error(exc, limit)
                if refused is None:
                    raise
                cache[batch] = refused
            if cache[batch].peak is None:
                raise InputError("a backend whose compiled step has a memory analysis",
                                 "no memory_analysis() figures", "Run on a CPU or GPU backend of jax >= 0.4.30.")
            # judged by the final peak (arguments + outputs + temporaries - aliased; a refusal's lower
            # bound), also where the compiler's rematerialization fell short of its own limit: a
            # device runs by the final peak against its allocator's limit. On an H100, BERT-base's
            # own compile fell short at batch 1,193 and ran (58.95 GB final,
            # reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-4.json); gpt2-small's
            # deviceless one fell short at 63 (62.38 GB final) and 63 ran there (-7.json)
            tried.append((batch, _judged(cache[batch])))
            if shown:  # a line each, which a pipe or a log keeps (the progress bar is the terminal's)
                over = "over " if isinstance(cache[batch], CompilerRefused) else ""
                short = getattr(cache[batch], "remat_short_of", None)
                remat = "" if short is None else (
                    f" (rematerialization only to {scaled(short[1], scale, 2)} {unit}, short of its "
                    f"{scaled(short[0], scale, 2)} {unit})")
                print(f"fit: batch {batch:,} → {over}{_against(tried[-1][1], limit, scale)} {unit}{remat}, "
                      f"{_verdict(tried[-1][1], limit)} "
                      f"(limit {scaled(limit, scale, 2)} {unit})", file=sys.stderr, flush=True)
        return _judged(cache[batch])

    bound = max_batch // step * step
    if shown:
        print(f"fit: searching batches {step:,} to {bound:,} (max_batch, --max-batch) of {run.name} for the largest "
              f"whose step fits {scaled(limit, scale, 2)} {unit}"
              + (f", compiled for {found.name}" if found is not None else ""), file=sys.stderr, flush=True)
    with targets.use(found):
        low, high = _search(peak, limit, step, bound)
    if low == 0:
        needed = _judged(cache[high])
        least = "at least " if isinstance(cache[high], CompilerRefused) else ""
        unit = bytes_unit([needed, limit])
        raise InputError(
            f"a device memory that holds {run.name}'s train step ({run.optimizer}, {run.dtype}) at batch {step:,}",
            f"not even batch {step:,} fits: {least}{_sized(needed, unit)} needed, {_sized(limit, unit)} usable "
            f"({_sized(capacity, unit)} {source if source == 'given' else 'capacity'} x {memory_fraction:g})",
            "Give it more memory (--device, --device-memory, --memory-fraction), a cheaper step (--optimizer sgd, "
            "--dtype bfloat16) or shard it (--mesh fsdp=N).")
    at_bound = high > bound
    return FitResult(
        model=run.name, batch_size=low, limit=limit, capacity=capacity, capacity_source=source,
        fits=cache.get(low), next_size=high, does_not_fit=cache.get(high), tried=tuple(tried), mesh=mesh,
        optimizer=run.optimizer, dtype=run.dtype, settings=dict(config or {}),
        target=None if found is None else found.name, target_title="" if found is None else found.title,
        remat_short_of=tuple((b, *cache[b].remat_short_of) for b, _ in tried
                             if getattr(cache[b], "remat_short_of", None) is not None),
        max_batch=max_batch, at_bound=at_bound, layers=layers_of(run),
        parameters=parameter_count(dataclasses.replace(run, batch_size=step)),
    )


def _sized(value: float, unit: tuple[float, str]) -> str:
    """``value`` bytes in ``unit`` (`xla_cost.present.units.bytes_unit`), 2 decimals: ``7.41 GB``."""
    return f"{scaled(value, unit[0], 2)} {unit[1]}"


def _search(peak: Callable[[int], int], limit: float, step: int, bound: int) -> tuple[int, int]:
    """``(low, high)``: the largest multiple of ``step`` up to ``bound`` whose
    ``peak`` is within ``limit`` (0: not even ``step``) and the next multiple,
    which is not (beyond ``bound`` when ``bound`` fits).

    The peak is close to affine in the batch, so each batch compiled is a
    prediction: where a line through batches already compiled reaches the
    limit (see the module's docstring). When the prediction is a batch already
    known to fit (or not to), its neighbour is compiled: the answer is verified
    by the pair. A prediction that misses is refined; one that keeps missing
    falls back on steps that double and, after `PREDICTED` compiles, bisection.
    """
    if peak(step) > limit:
        return 0, step
    if 2 * step > bound:
        return step, 2 * step
    fit, fail = [step], []  # the batches compiled that fit and that do not, ascending
    up = down = step  # the next check above the largest fit / below the smallest failure
    predicted = False  # whether the batch compiled last was a prediction (not a check)
    short = 0  # predictions in a row that fit: the curve bends up between the bounds

    def slope(a: int, b: int) -> float:
        return (peak(b) - peak(a)) / (b - a)

    def crossing(at: int, grows: float) -> int | None:
        """The multiple of ``step`` where the line through ``at`` rising ``grows``
        a sample reaches the limit (None: a line that does not rise)."""
        return None if grows <= 0 else int(at + (limit - peak(at)) / grows) // step * step

    current = 2 * step
    while True:
        fits = peak(current) <= limit
        bisect.insort(fit if fits else fail, current)
        low, high = fit[-1], (fail[0] if fail else None)
        if high is None and low >= bound:
            return low, bound + step
        if high is not None and high - low <= step:
            return low, high
        line = True  # whether the guess is where a line through compiled batches reaches the limit
        short = short + 1 if predicted and fits else 0
        if predicted and not fits:  # an overshoot: the batch below it is the answer if it fits,
            guess = high - step  # and if not, gives the slope above the limit (past a knee)
        else:
            guess, line = _predict(fit, fail, slope, crossing, bound)
        predicted = False
        top = bound + step if high is None else high
        if high is not None and (len(fit) + len(fail) >= PREDICTED or short >= SHORT):
            # the predictions did not converge: bisect, by ratio while the bounds are far apart
            guess = math.isqrt(low * high) if high > 2 * low else (low + high) // 2
        elif guess <= low:  # the largest fit is predicted the answer: check the next batch up (and
            up = step if guess == low else up  # further, twice each time, while the line is below it)
            guess, up = low + up, 2 * up
        elif guess >= top - step:
            down = step if guess == top - step else down
            guess, down = top - down, 2 * down
        else:
            up = down = step
            # a line's crossing is checked from below when it overshoots; a leap over a flat
            # stretch (rematerialization holding the peak) is not a crossing: one beyond the
            # limit bounds the search, and the next guess is the chord's
            predicted = True
        guess = guess // step * step
        current = min(guess, bound) if high is None else min(max(guess, low + step), high - step)


def _predict(fit: list[int], fail: list[int], slope: Callable[[int, int], float],
             crossing: Callable[[int, float], int | None], bound: int) -> tuple[int, bool]:
    """The batch predicted the largest that fits, from the batches compiled
    (``fit`` and ``fail``, ascending, ``fit`` at least two), and whether it is
    where a line through them reaches the limit (not a leap over a flat stretch)."""
    low = fit[-1]
    below = slope(fit[-2], low)  # the slope where the step still fits
    if not fail:  # every batch fits so far: extrapolate (a flat stretch: 8 times further)
        guess = crossing(low, below)
        return (min(8 * low, bound), False) if guess is None else (min(guess, bound), True)
    high = fail[0]
    chord = slope(low, high)
    if len(fail) > 1:
        above = slope(high, fail[1])
        if not all(chord / BEND <= s <= chord * BEND for s in (below, above)):
            # the curve bends between them: the line on each side, and the nearer crossing
            # (a convex curve, steeper above, is above both lines: it crosses first)
            ends = [x for x in (crossing(low, below), crossing(high, above)) if x is not None]
            if ends:
                guess = min(ends) if above > below else max(ends)
                if low < guess < high:
                    return guess, True
    guess = crossing(low, chord)
    return ((low + high) // 2, False) if guess is None else (guess, True)  # (rounded down to a step by the caller)
