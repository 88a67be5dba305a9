"""Published training runs as cases: each configured as its paper ran it.

A `Case` is one published figure (achieved TFLOP/s per device, days of a
run, a scaling efficiency, a speed-up, a measured step time) and the `Setup`
of each step it depends on: the model and the program analysed (one
micro-batch on one pipeline stage of one replica, sharded over its
tensor-parallel devices, compiled for the device it ran on), the hardware
and the layout around it (pipeline stages, micro-batches, data-parallel
replicas). Every case names its ``paper``: the validation refits the time
model's constants without each paper's cases before predicting them
(`xla_cost.study.validation`).

The published figures and their sources are in `xla_cost.study.published`
and `xla_cost.study.published_runs`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from xla_cost.timemodel import devices as registry
from xla_cost.study.published import (
    GOYAL_EFFICIENCY,
    GOYAL_HOURS,
    GPT3_MEGATRON_DAYS,
    GPT3_TRAINING_TOKENS,
    H100_MEASURED,
    H200_MEASURED,
    IMAGENET_TRAIN_IMAGES,
    JIA_EPOCHS,
    JIA_MINUTES,
    MEGATRON_WEAK_SCALING,
)

__all__ = ["Setup", "Case", "BASE_CASES", "RATIOS", "ARCHITECTURES", "generation", "jia_setup", "megatron_flops",
           "GPT_SEQUENCE", "GPT_VOCABULARY"]

RATIOS: tuple[str, ...] = ("scaling efficiency", "speed-up")
"""The quantities that are a ratio of two runs' speeds; every other one (TFLOP/s, MFU, tokens/s, seconds,
days) is an absolute quantity of one run. The validation reports the two kinds apart and scores a ratio on
its overhead (`Case.overhead`)."""

ARCHITECTURES: Mapping[tuple[int, int], str] = {
    (6, 0): "Pascal", (6, 1): "Pascal", (7, 0): "Volta", (7, 5): "Turing", (8, 0): "Ampere", (8, 6): "Ampere",
    (8, 9): "Ada", (9, 0): "Hopper", (10, 0): "Blackwell",
}
"""NVIDIA's architecture by CUDA compute capability (the CUDA C programming guide's table)."""


def generation(device: str) -> str:
    """A registry device's generation, the unit the validation holds out together beside the
    paper: a GPU's architecture by its compute capability (``Hopper`` for an H100 and an H200,
    ``Pascal`` for a P100 and a P40), a TPU by its version (``TPU v5e``)."""
    found = registry.device(device)
    if found.gpu is not None:
        capability = tuple(found.gpu.compute_capability)
        return ARCHITECTURES.get(capability, "sm_{}{}".format(*capability))  # type: ignore[arg-type]
    if found.tpu is not None:
        return "TPU " + found.name.removeprefix("tpu-")
    return found.title

GPT_SEQUENCE = 2048
"""Sequence length of every Megatron run (Narayanan et al. 2021, §5)."""

GPT_VOCABULARY = 51200
"""Vocabulary of every Megatron run (Narayanan et al. 2021, §5)."""


@dataclasses.dataclass(frozen=True, eq=False)
class Setup:
    """One step as a paper ran it.

    Attributes:
      label: what it is, in a few words.
      model: the zoo model analysed.
      batch_size: the analysed program's batch (per device, or per micro-batch
        of a tensor-parallel group).
      config: the model's fields.
      dtype: the step's dtype.
      optimizer: the optimizer.
      mesh: the analysed program's mesh (its tensor-parallel devices).
      hardware: `xla_cost.Hardware` fields.
      layout: `xla_cost.timemodel.schedule.Layout` fields.
      target: the compile target the program is built for (the device's own
        compiler; default: the hardware's device).
      jit_step: the run was the whole step under one ``jax.jit`` (this
        project's measurements): see `one_program`.
      unfused: the phases whose programs are compiled with XLA's fusion
        passes off, each operation a kernel of its own, as the run's eager
        framework launched them (`xla_cost.study.published_record.Framework.fuses`);
        empty: every program as XLA fuses it.
      loss: the loss the run's framework computes, by name (`xla_cost.LOSSES`:
        ``one-hot``, MaxText's; `xla_cost.study.published_record.Framework.loss`);
        None: the default (`xla_cost.softmax_cross_entropy`).
    """

    label: str
    model: str
    batch_size: int
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    dtype: str = "float32"
    optimizer: str = "sgd"
    mesh: Mapping[str, int] = dataclasses.field(default_factory=dict)
    hardware: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    layout: Mapping[str, int] = dataclasses.field(default_factory=dict)
    target: str | None = None
    jit_step: bool = False
    unfused: tuple[str, ...] = ()
    loss: str | None = None

    @property
    def compile_target(self) -> str:
        """The target the program is compiled for."""
        return self.target or str(self.hardware.get("device", "h100"))

    @property
    def devices(self) -> int:
        """Devices of the whole step: the mesh's, times stages and replicas."""
        mesh = math.prod(self.mesh.values()) if self.mesh else 1
        return mesh * self.layout.get("pipeline", 1) * self.layout.get("data", 1)

    @property
    def one_program(self) -> bool:
        """Whether the step is analysed with ``exact_train_step`` and priced as
        that one program (`xla_cost.predict` does so on one device, with no
        stages, replicas or micro-batches): a ``jax.jit`` of the whole step, as
        this project's harness times it, whose compiler may fuse the update
        into the product that makes each gradient. A published run's framework
        (Megatron-LM, PyTorch) runs its optimizer after the backward pass, as
        the grad and update programs apart are priced."""
        return self.jit_step and self.devices == 1 and self.layout.get("micro_batches", 1) == 1

    def key(self) -> str:
        """What identifies the analysed program (the fields the analysis reads, in order)."""
        return repr((self.model, self.batch_size, sorted(self.config.items()), self.dtype, self.optimizer,
                     sorted(self.mesh.items()), self.compile_target, *(("one program",) if self.one_program else ()),
                     *((("unfused", *self.unfused),) if self.unfused else ()),
                     *((("loss", self.loss),) if self.loss is not None else ())))

    def describe(self) -> str:
        """The setup in one line: devices, parallelism, batch, precision."""
        parts = [f"{self.devices:,} {self.hardware.get('device', 'h100')}"]
        tensor, fsdp = self.mesh.get("model", 1), self.mesh.get("fsdp", 1)
        pipeline, data = self.layout.get("pipeline", 1), self.layout.get("data", 1)
        if tensor > 1 or pipeline > 1 or fsdp > 1:
            parts.append(f"t={tensor}, p={pipeline}, d={data}" + (f", fsdp={fsdp}" if fsdp > 1 else ""))
            if self.layout.get("chunks", 1) > 1:
                parts[-1] += f", {self.layout['chunks']} chunks"
        micro = self.layout.get("micro_batches", 1)
        parts.append(f"{self.batch_size} per program" + (f" × {micro} micro-batches" if micro > 1 else ""))
        parts.append(self.dtype + (f" storage, {self.hardware['arithmetic']} arithmetic"
                                   if self.hardware.get("arithmetic") else ""))
        if self.unfused:
            parts.append(f"{' and '.join(self.unfused)} unfused (each operation its own kernel)")
        if self.loss is not None:
            parts.append(f"{self.loss} loss")
        return ", ".join(parts)


@dataclasses.dataclass(frozen=True)
class Case:
    """One published figure and the steps it depends on.

    Attributes:
      name: a short key.
      title: what was published, in words.
      paper: the publication (or measurement) it comes from: the unit held out together.
      device: the registry device it ran on.
      quantity: the figure's unit (``TFLOP/s per GPU``, ``days``, ...).
      published: the published figure.
      source: where it is published.
      setups: the steps it depends on, priced in order.
      figure: the quantity from the steps' predictions (`StepEstimate`, in ``setups``' order).
      assumptions: what the paper does not say and the case assumes.
      measured_here: a figure this project measured (not a published run).
      devices_ratio: for a speed-up, the run's devices over its base's (a
        perfect speed-up); None for any other quantity.
    """

    name: str
    title: str
    paper: str
    device: str
    quantity: str
    published: float
    source: str
    setups: tuple[Setup, ...]
    figure: Callable[[Sequence[Any]], float]
    assumptions: tuple[str, ...] = ()
    measured_here: bool = False
    devices_ratio: float | None = None

    @property
    def is_time(self) -> bool:
        """Whether the figure grows with the step's time (seconds, days), not with its speed."""
        return "second" in self.quantity or self.quantity == "days"

    @property
    def is_ratio(self) -> bool:
        """Whether the figure is a ratio of two runs (`RATIOS`), not an absolute quantity."""
        return self.quantity in RATIOS

    @property
    def generation(self) -> str:
        """The device's generation (`generation`)."""
        return generation(self.device)

    def overhead(self, value: float) -> float | None:
        """The scaling overhead a ratio ``value`` (this case's quantity) stands for: ``1 -
        efficiency`` for a scaling efficiency, ``1 - speed-up / devices_ratio`` for a speed-up
        (the share of the perfect speed-up lost); None for an absolute quantity, or a speed-up
        without its devices' ratio."""
        if self.quantity == "scaling efficiency":
            return 1 - value
        if self.quantity == "speed-up" and self.devices_ratio:
            return 1 - value / self.devices_ratio
        return None


def megatron_flops(batch: int, layers: int, hidden: int, sequence: int = GPT_SEQUENCE,
                   vocabulary: int = GPT_VOCABULARY) -> float:
    """FLOP of one Megatron training step with full activation recomputation,
    as Narayanan et al. 2021 count them (§5.1):
    ``96 B s l h² (1 + s / 6h + V / 16 l h)``."""
    return 96 * batch * sequence * layers * hidden ** 2 * (
        1 + sequence / (6 * hidden) + vocabulary / (16 * layers * hidden))


def _megatron_setup(parameters: float, heads: int, hidden: int, layers: int, tensor: int, pipeline: int,
                    gpus: int, batch: int) -> Setup:
    data = gpus // (tensor * pipeline)
    return Setup(
        label=f"GPT {parameters:g}B", model="gpt3-175b", batch_size=1,
        config={"n_layer": layers // pipeline, "d_model": hidden, "n_head": heads,
                "vocab_size": GPT_VOCABULARY, "remat": "full"},
        dtype="bfloat16", optimizer="adam", mesh={"model": tensor} if tensor > 1 else {},
        hardware={"device": "a100-80gb"},
        layout={"pipeline": pipeline, "micro_batches": batch // data, "data": data,
                "stage_bytes": GPT_SEQUENCE * hidden * 2},
    )


_MEGATRON_ASSUMPTIONS = (
    "one micro-batch of 1 sequence per program (Table 1 gives the global batch only)",
    "non-interleaved 1F1B schedule; gradients all-reduced after the last micro-batch, in float32",
    "the slowest stage analysed: its layers with the embedding and the output layer; bfloat16 "
    "(the paper trains in 16-bit precision on A100s)",
    "DGX A100 80GB nodes: NVLink 3 within 8 GPUs, one InfiniBand HDR NIC per GPU between them (Selene)",
)

_NARAYANAN = "narayanan2021"


def _tflops_per_gpu(setup: Setup, flops: float) -> Callable[[Sequence[Any]], float]:
    return lambda steps: flops / steps[0].prediction.seconds / setup.devices / 1e12


def _megatron_cases() -> list[Case]:
    cases = []
    for parameters, heads, hidden, layers, tensor, pipeline, gpus, batch, achieved in MEGATRON_WEAK_SCALING:
        setup = _megatron_setup(parameters, heads, hidden, layers, tensor, pipeline, gpus, batch)
        cases.append(Case(
            name=f"megatron-{parameters:g}b",
            title=f"GPT {parameters:g}B on {gpus:,} A100s (t={tensor}, p={pipeline}, batch {batch:,})",
            paper=_NARAYANAN, device="a100-80gb", quantity="TFLOP/s per GPU", published=achieved,
            source="Narayanan et al. 2021 (arXiv:2104.04473), Table 1", setups=(setup,),
            figure=_tflops_per_gpu(setup, megatron_flops(batch, layers, hidden)), assumptions=_MEGATRON_ASSUMPTIONS,
        ))
    return cases


def _gpt3_case() -> Case:
    layers, hidden, heads, batch = 96, 12288, 96, 1536
    setup = _megatron_setup(175, heads, hidden, layers, 8, 8, 1024, batch)
    steps = GPT3_TRAINING_TOKENS / (batch * GPT_SEQUENCE)
    return Case(
        name="gpt3-175b", title="GPT-3 175B, 300B tokens on 1,024 A100s (t=8, p=8, d=16, batch 1,536)",
        paper=_NARAYANAN, device="a100-80gb", quantity="days", published=GPT3_MEGATRON_DAYS,
        source="Narayanan et al. 2021 (arXiv:2104.04473), §5.1: 34 days at 140 TFLOP/s per GPU",
        setups=(setup,), figure=lambda s: steps * s[0].prediction.seconds / 86400,
        assumptions=("the layout of Table 1's 145.6B row (t=8, p=8) on 1,024 GPUs; GPT-3's batch of "
                     "3.2M tokens (Brown et al. 2020, Table 2.1) as 1,536 sequences of 2,048",
                     *_MEGATRON_ASSUMPTIONS),
    )


def _imagenet_steps(epochs: float, batch: int) -> float:
    return epochs * IMAGENET_TRAIN_IMAGES / batch


_GOYAL_HARDWARE = {"device": "p100", "algorithm": "halving-doubling", "bucket_bytes": 0}
"""Goyal et al. 2017, §4.3: Big Basin servers of 8 P100s on NVLink, one 50 Gb/s Ethernet card per
server (the ``big-basin`` node: 6.25 GB/s shared by 8 GPUs); §4.1: recursive halving and doubling
between servers, and "for every gradient, aggregation is done using an allreduce operation" as soon
as backprop computes it (bucket_bytes 0: Caffe2 at b720403c, caffe2/python/data_parallel_model.py
lines 740-817, one Gloo Allreduce per gradient in reverse order, at most 4 at once: line 35)."""

_GOYAL_LAYOUT = {"host_staged_gradients": True}
"""Goyal et al. 2017, §4.1's three phases (a reduce within the server, the all-reduce between
servers, a broadcast) as Gloo's CUDA halving/doubling runs them with its default host workspace:
through host memory (`xla_cost.timemodel.comm.staged_all_reduce`); one server (8 GPUs) reduces
without Gloo (data_parallel_model.py lines 697-698: the single-host path)."""

_GOYAL_ASSUMPTIONS = (
    "float32, 32 images per GPU, momentum SGD; each gradient all-reduced on its own as the backward "
    "pass makes it (§4.1), across servers staged through host memory as Gloo's CUDA all-reduce ran it",
    "the one hour is 90 epochs of 1,281,167 images at a batch of 8,192: every second of it a train step",
)


def _goyal_cases() -> list[Case]:
    def setup(gpus: int) -> Setup:
        return Setup(label=f"ResNet-50 on {gpus} P100s", model="resnet50", batch_size=32,
                     hardware=_GOYAL_HARDWARE, layout={"data": gpus, **_GOYAL_LAYOUT})

    small, large = setup(8), setup(256)
    steps = _imagenet_steps(90, 8192)
    return [
        Case(name="goyal-256-time", title="ResNet-50, batch 8,192 on 256 P100s: seconds per step (one hour, 90 epochs)",
             paper="goyal2017", device="p100", quantity="seconds per step", published=GOYAL_HOURS * 3600 / steps,
             source="Goyal et al. 2017 (arXiv:1706.02677), abstract: 90 epochs in one hour on 256 GPUs",
             setups=(large,), figure=lambda s: s[0].prediction.seconds, assumptions=_GOYAL_ASSUMPTIONS),
        Case(name="goyal-efficiency", title="ResNet-50 weak scaling from 8 to 256 P100s, 32 images per GPU",
             paper="goyal2017", device="p100", quantity="scaling efficiency", published=GOYAL_EFFICIENCY,
             source="Goyal et al. 2017 (arXiv:1706.02677), §5.4: ~90% scaling efficiency from 8 to 256 GPUs",
             setups=(small, large), figure=lambda s: s[0].prediction.seconds / s[1].prediction.seconds,
             assumptions=_GOYAL_ASSUMPTIONS),
    ]


_JIA_HARDWARE = {"device": "p40", "bandwidth": 100e9 / 8 / 8, "arithmetic": "float32"}
"""Jia et al. 2018: servers of 8 Tesla P40s on PCIe 3.0, one 100 Gb/s InfiniBand link per server
(12.5 GB/s shared by 8 GPUs), hierarchical all-reduce; float16 storage with float32 arithmetic
(the P40 has no fast float16)."""


def jia_setup(gpus: int) -> Setup:
    """Jia et al. 2018's ResNet-50 step on ``gpus`` Tesla P40s at a global batch of 65,536:
    the one setup every page prices (`xla_cost.study.pages.scaling` reads it too)."""
    return Setup(label=f"ResNet-50 on {gpus:,} P40s", model="resnet50", batch_size=65536 // gpus,
                 dtype="float16", hardware=_JIA_HARDWARE, layout={"data": gpus})


def _jia_cases() -> list[Case]:
    small, large = jia_setup(1024), jia_setup(2048)
    steps = _imagenet_steps(JIA_EPOCHS, 65536)
    assumptions = (
        "ResNet-50 at a fixed batch of 65,536 (64 then 32 images per GPU), float16 storage with float32 "
        "arithmetic, gradients all-reduced in 25 MB buckets as the backward pass makes them",
        f"the {JIA_MINUTES[0]:g} and {JIA_MINUTES[1]:g} minutes are {JIA_EPOCHS} epochs of train steps",
        "one 100 Gb/s InfiniBand link per server of 8 P40s",
    )
    speedup = JIA_MINUTES[0] / JIA_MINUTES[1]
    return [
        Case(name="jia-1024-time", title="ResNet-50, batch 65,536 on 1,024 P40s: seconds per step",
             paper="jia2018", device="p40", quantity="seconds per step", published=JIA_MINUTES[0] * 60 / steps,
             source="Jia et al. 2018 (arXiv:1807.11205), Table 5: 8.7 minutes, 90 epochs",
             setups=(small,), figure=lambda s: s[0].prediction.seconds, assumptions=assumptions),
        Case(name="jia-2048-time", title="ResNet-50, batch 65,536 on 2,048 P40s: seconds per step",
             paper="jia2018", device="p40", quantity="seconds per step", published=JIA_MINUTES[1] * 60 / steps,
             source="Jia et al. 2018 (arXiv:1807.11205), Table 5: 6.6 minutes, 90 epochs",
             setups=(large,), figure=lambda s: s[0].prediction.seconds, assumptions=assumptions),
    ]


MEASURED_SOURCE = ("measured: reports/data/timing_{file}_{date}.csv (python benchmarks/time_zoo.py, jax 0.11.2, "
                   "median of the train step as one program)")
MEASURED_FILES = {"h100": "nvidia-h100-80gb-hbm3", "h200": "nvidia-h200"}
"""The timing files' device part, by registry device."""


def _config(text: str) -> dict[str, Any]:
    """``key=value`` (integers) as a model config."""
    return {key: int(value) for key, _, value in (part.partition("=") for part in text.split(",") if part)}


def _measured_cases(device: str, rows: Sequence[tuple[str, str, int, str, str, float, str]]) -> list[Case]:
    cases = []
    title = registry.device(device).title
    for model, config, batch, dtype, optimizer, seconds, date in rows:
        setup = Setup(label=f"{model} batch {batch}", model=model, batch_size=batch, config=_config(config),
                      dtype=dtype, optimizer=optimizer, hardware={"device": device}, jit_step=True)
        cases.append(Case(
            name=f"{device}-{date}-{model}-{batch}-{dtype}-{optimizer}",
            title=f"{model}, batch {batch}, {dtype} ({'TF32' if dtype == 'float32' else dtype}), {optimizer}: "
                  f"one train step on an {title}",
            paper=f"{device}-{date}", device=device, quantity="seconds per step", published=seconds,
            source=MEASURED_SOURCE.format(file=MEASURED_FILES[device], date=date), setups=(setup,),
            figure=lambda s: s[0].prediction.seconds, assumptions=("one device: no communication",),
            measured_here=True,
        ))
    return cases


BASE_CASES: tuple[Case, ...] = (*_megatron_cases(), _gpt3_case(), *_goyal_cases(), *_jia_cases(),
                                   *_measured_cases("h100", H100_MEASURED), *_measured_cases("h200", H200_MEASURED))
"""The cases of `xla_cost.study.published` and this project's measurements: A100
(Megatron, GPT-3), P100 (Goyal), P40 (Jia, seed 004), H100 and H200 (measured here).
`xla_cost.study.validation.CASES` adds the runs of `xla_cost.study.run_cases`."""
