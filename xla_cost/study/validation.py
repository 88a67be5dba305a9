"""Published training runs, each configured as its paper ran it, priced by the time model.

A `Case` is one published figure (achieved TFLOP/s per GPU, days of a run, a
scaling efficiency, a speed-up, a measured step time) and the `Setup` of
each step it depends on: the model and the program analysed (one micro-batch
on one pipeline stage of one replica, sharded over its tensor-parallel
devices), the hardware and the layout around it (pipeline stages,
micro-batches, data-parallel replicas). `validate` analyses every setup
(through the results store), prices it with `xla_cost.runs.scaling.predict`
under the committed calibration profiles (`xla_cost.parallel.calibration`),
and holds each prediction against its published figure; `fit_calibrations`
fits the profiles on the cases marked ``fitted`` and nothing else, one per
device, so that every other case tests them.

The published figures and their sources are in `xla_cost.study.published`;
the page is ``validation`` (`xla_cost.study.pages.validation`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.errors import InputError
from xla_cost.study.published import (
    GOYAL_EFFICIENCY,
    GOYAL_HOURS,
    GPT3_MEGATRON_DAYS,
    GPT3_TRAINING_TOKENS,
    IMAGENET_TRAIN_IMAGES,
    JIA_EPOCHS,
    JIA_MINUTES,
    H100_MEASURED,
    MEGATRON_WEAK_SCALING,
    SEED004_SPEEDUP,
)

if TYPE_CHECKING:
    import pandas as pd

    from xla_cost.analysis.report import Report
    from xla_cost.compiled.store import Store
    from xla_cost.parallel.calibration import Calibration
    from xla_cost.runs.scaling import StepEstimate

__all__ = ["BAND", "Case", "Setup", "CASES", "Validation", "validate", "fit_calibrations", "megatron_flops",
           "SIMULATED_DEVICES"]

BAND = 0.20
"""How far a prediction may be from its published figure, relative (the issue's ±20%)."""

SIMULATED_DEVICES = 8
"""Devices the largest tensor-parallel setup is analysed over (`xla_cost.simulate_devices`)."""

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
      layout: `xla_cost.parallel.schedule.Layout` fields.
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

    @property
    def devices(self) -> int:
        """Devices of the whole step: the mesh's, times stages and replicas."""
        mesh = math.prod(self.mesh.values()) if self.mesh else 1
        return mesh * self.layout.get("pipeline", 1) * self.layout.get("data", 1)

    def key(self) -> str:
        """What identifies the setup (its fields, in order)."""
        return repr(dataclasses.astuple(self))

    def describe(self) -> str:
        """The setup in one line: devices, parallelism, batch, precision."""
        parts = [f"{self.devices:,} {self.hardware.get('device', 'h100')}"]
        tensor = math.prod(self.mesh.values()) if self.mesh else 1
        pipeline, data = self.layout.get("pipeline", 1), self.layout.get("data", 1)
        if tensor > 1 or pipeline > 1:
            parts.append(f"t={tensor}, p={pipeline}, d={data}")
        micro = self.layout.get("micro_batches", 1)
        parts.append(f"{self.batch_size} per program" + (f" × {micro} micro-batches" if micro > 1 else ""))
        parts.append(self.dtype + (f" storage, {self.hardware['arithmetic']} arithmetic"
                                   if self.hardware.get("arithmetic") else ""))
        return ", ".join(parts)


@dataclasses.dataclass(frozen=True)
class Case:
    """One published figure and the steps it depends on.

    Attributes:
      name: a short key.
      title: what was published, in words.
      device: the registry device whose calibration it fits or tests.
      quantity: the figure's unit (``TFLOP/s per GPU``, ``days``, ...).
      published: the published figure.
      source: where it is published.
      setups: the steps it depends on, priced in order.
      figure: the quantity from the steps' predictions (`StepEstimate`, in ``setups``' order).
      assumptions: what the paper does not say and the case assumes.
      fitted: whether the device's calibration is fitted on it (else it tests it).
      gap: for a case known to leave the band: what the published figure holds
        that the model does not (stated on the page; the test expects the miss).
      measured_here: a figure this project measured (not a published run): it
        fits or checks a calibration, and the page shows it apart.
    """

    name: str
    title: str
    device: str
    quantity: str
    published: float
    source: str
    setups: tuple[Setup, ...]
    figure: Callable[[Sequence[StepEstimate]], float]
    assumptions: tuple[str, ...] = ()
    fitted: bool = False
    gap: str = ""
    measured_here: bool = False


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


def _tflops_per_gpu(setup: Setup, layers: int, hidden: int, batch: int) -> Callable[[Sequence[Any]], float]:
    flops = megatron_flops(batch, layers, hidden)
    return lambda steps: flops / steps[0].prediction.seconds / setup.devices / 1e12


def _megatron_cases() -> list[Case]:
    cases = []
    fitted = {MEGATRON_WEAK_SCALING[0][0], MEGATRON_WEAK_SCALING[-1][0]}
    for parameters, heads, hidden, layers, tensor, pipeline, gpus, batch, achieved in MEGATRON_WEAK_SCALING:
        setup = _megatron_setup(parameters, heads, hidden, layers, tensor, pipeline, gpus, batch)
        cases.append(Case(
            name=f"megatron-{parameters:g}b",
            title=f"GPT {parameters:g}B on {gpus:,} A100s (t={tensor}, p={pipeline}, batch {batch:,})",
            device="a100-80gb", quantity="TFLOP/s per GPU", published=achieved,
            source="Narayanan et al. 2021 (arXiv:2104.04473), Table 1", setups=(setup,),
            figure=_tflops_per_gpu(setup, layers, hidden, batch), assumptions=_MEGATRON_ASSUMPTIONS,
            fitted=parameters in fitted,
        ))
    return cases


def _gpt3_case() -> Case:
    layers, hidden, heads, batch = 96, 12288, 96, 1536
    setup = _megatron_setup(175, heads, hidden, layers, 8, 8, 1024, batch)
    steps = GPT3_TRAINING_TOKENS / (batch * GPT_SEQUENCE)
    return Case(
        name="gpt3-175b", title="GPT-3 175B, 300B tokens on 1,024 A100s (t=8, p=8, d=16, batch 1,536)",
        device="a100-80gb", quantity="days", published=GPT3_MEGATRON_DAYS,
        source="Narayanan et al. 2021 (arXiv:2104.04473), §5.1: 34 days at 140 TFLOP/s per GPU",
        setups=(setup,), figure=lambda s: steps * s[0].prediction.seconds / 86400,
        assumptions=("the layout of Table 1's 145.6B row (t=8, p=8) on 1,024 GPUs; GPT-3's batch of "
                     "3.2M tokens (Brown et al. 2020, Table 2.1) as 1,536 sequences of 2,048",
                     *_MEGATRON_ASSUMPTIONS),
    )


def _imagenet_steps(epochs: float, batch: int) -> float:
    return epochs * IMAGENET_TRAIN_IMAGES / batch


_GOYAL_HARDWARE = {"device": "p100", "bandwidth": 50e9 / 8 / 8, "algorithm": "halving-doubling"}
"""Goyal et al. 2017, §5: Big Basin servers of 8 P100s on NVLink, one 50 Gb/s Ethernet link per
server (6.25 GB/s shared by 8 GPUs: 0.78 GB/s each), recursive halving and doubling between servers."""

_GOYAL_ASSUMPTIONS = (
    "float32, 32 images per GPU, momentum SGD; the gradients all-reduced in 25 MB buckets as the "
    "backward pass makes them, within the server first",
    "the one hour is 90 epochs of 1,281,167 images at a batch of 8,192: every second of it a train step",
)


def _goyal_cases() -> list[Case]:
    def setup(gpus: int) -> Setup:
        return Setup(label=f"ResNet-50 on {gpus} P100s", model="resnet50", batch_size=32,
                     hardware=_GOYAL_HARDWARE, layout={"data": gpus})

    small, large = setup(8), setup(256)
    steps = _imagenet_steps(90, 8192)
    return [
        Case(name="goyal-256-time", title="ResNet-50, batch 8,192 on 256 P100s: seconds per step (one hour, 90 epochs)",
             device="p100", quantity="seconds per step", published=GOYAL_HOURS * 3600 / steps,
             source="Goyal et al. 2017 (arXiv:1706.02677), abstract: 90 epochs in one hour on 256 GPUs",
             setups=(large,), figure=lambda s: s[0].prediction.seconds, assumptions=_GOYAL_ASSUMPTIONS,
             fitted=True),
        Case(name="goyal-efficiency", title="ResNet-50 weak scaling from 8 to 256 P100s, 32 images per GPU",
             device="p100", quantity="scaling efficiency", published=GOYAL_EFFICIENCY,
             source="Goyal et al. 2017 (arXiv:1706.02677), §5.4: ~90% scaling efficiency from 8 to 256 GPUs",
             setups=(small, large), figure=lambda s: s[0].prediction.seconds / s[1].prediction.seconds,
             assumptions=_GOYAL_ASSUMPTIONS),
    ]


_JIA_HARDWARE = {"device": "p40", "bandwidth": 100e9 / 8 / 8, "arithmetic": "float32"}
"""Jia et al. 2018: servers of 8 Tesla P40s on PCIe 3.0, one 100 Gb/s InfiniBand link per server
(12.5 GB/s shared by 8 GPUs), hierarchical all-reduce; float16 storage with float32 arithmetic
(the P40 has no fast float16)."""

_JIA_GAP = ("not in the model, which has no per-step cost outside the compiled step (the input pipeline, the "
            "framework's overhead, evaluation) and no contention between concurrent all-reduces")


def _jia_cases() -> list[Case]:
    def setup(gpus: int) -> Setup:
        return Setup(label=f"ResNet-50 on {gpus:,} P40s", model="resnet50", batch_size=65536 // gpus,
                     dtype="float16", hardware=_JIA_HARDWARE, layout={"data": gpus})

    small, large = setup(1024), setup(2048)
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
             device="p40", quantity="seconds per step", published=JIA_MINUTES[0] * 60 / steps,
             source="Jia et al. 2018 (arXiv:1807.11205), Table 5: 8.7 minutes, 90 epochs",
             setups=(small,), figure=lambda s: s[0].prediction.seconds, assumptions=assumptions, fitted=True),
        Case(name="jia-doubling", title="ResNet-50 from 1,024 to 2,048 P40s at a batch of 65,536: speed-up",
             device="p40", quantity="speed-up", published=round(speedup, 3),
             source="Jia et al. 2018 (arXiv:1807.11205), Table 5: 8.7 and 6.6 minutes",
             setups=(small, large), figure=lambda s: s[0].prediction.seconds / s[1].prediction.seconds,
             assumptions=assumptions, gap=_JIA_GAP),
        Case(name="seed-004", title="Seed 004: \"a 1.3x speed up when they doubled their number of GPUs\" "
             "(Jia et al.'s run)", device="p40", quantity="speed-up", published=SEED004_SPEEDUP,
             source="seed 004 (The Register, on Jia et al. 2018)",
             setups=(small, large), figure=lambda s: s[0].prediction.seconds / s[1].prediction.seconds,
             assumptions=assumptions, gap=_JIA_GAP),
    ]


def _h100_cases() -> list[Case]:
    cases = []
    for model, batch, dtype, optimizer, seconds, fitted in H100_MEASURED:
        setup = Setup(label=f"{model} batch {batch}", model=model, batch_size=batch, dtype=dtype,
                      optimizer=optimizer, hardware={"device": "h100"})
        cases.append(Case(
            name=f"h100-{model}-{batch}-{dtype}-{optimizer}",
            title=f"{model}, batch {batch}, {dtype} ({'TF32' if dtype == 'float32' else dtype}), {optimizer}: "
                  "one train step on an H100",
            device="h100", quantity="seconds per step", published=seconds,
            source="measured: reports/data/timing_nvidia-h100-80gb-hbm3_2026-11-23.csv (benchmarks/time_zoo.py, "
                   "jax 0.11.2, the train step as one program)",
            setups=(setup,), figure=lambda s: s[0].prediction.seconds,
            assumptions=("one device: no communication",), fitted=fitted, measured_here=True,
        ))
    return cases


CASES: tuple[Case, ...] = (*_megatron_cases(), _gpt3_case(), *_goyal_cases(), *_jia_cases(), *_h100_cases())
"""Every case, by device: A100 (Megatron, GPT-3), P100 (Goyal), P40 (Jia, seed
004), H100 (this project's measurements)."""


@dataclasses.dataclass(frozen=True)
class Validation:
    """Every case priced: the predictions beside the published figures.

    Attributes:
      cases: the cases, in order.
      predicted: each case's figure from the calibrated model.
      bound: each case's figure from the bound (`xla_cost.Hardware.bound`:
        compute at peak, no communication hidden, gradients reduced one by one
        on flat rings), the model's figure before calibration.
      calibrations: the profiles used, by device.
      estimates: each case's priced steps.
    """

    cases: tuple[Case, ...]
    predicted: tuple[float, ...]
    bound: tuple[float, ...]
    calibrations: Mapping[str, Calibration]
    estimates: tuple[tuple[StepEstimate, ...], ...]

    def errors(self) -> tuple[float, ...]:
        """Each prediction's relative error, ``predicted / published - 1``."""
        return tuple(p / c.published - 1 for c, p in zip(self.cases, self.predicted))

    def to_frame(self) -> pd.DataFrame:
        """One row per case."""
        import pandas as pd

        rows = []
        for case, predicted, bound, error in zip(self.cases, self.predicted, self.bound, self.errors()):
            rows.append({
                "case": case.name, "device": case.device, "quantity": case.quantity,
                "published": case.published, "predicted": predicted, "error": error,
                "within_band": abs(error) <= BAND, "bound": bound, "bound_error": bound / case.published - 1,
                "role": "fitted" if case.fitted else "tested", "known_gap": bool(case.gap),
                "measured_here": case.measured_here,
                "source": case.source,
            })
        return pd.DataFrame(rows)


def _analyse(setup: Setup, store: Any) -> Report:
    from xla_cost.runs.configs import RunConfig

    config = RunConfig(setup.model, batch_size=setup.batch_size, config=dict(setup.config), optimizer=setup.optimizer,
                       dtype=setup.dtype, mesh=dict(setup.mesh))
    return config.canonical().run(cache=store if store is not None else True)


def _price(case: Case, reports: Mapping[str, Report], calibrations: Mapping[str, Calibration] | None,
           bound: bool = False) -> tuple[float, tuple[StepEstimate, ...]]:
    from xla_cost.parallel.calibration import use_profiles
    from xla_cost.parallel.hardware import Hardware
    from xla_cost.parallel.schedule import Layout
    from xla_cost.runs.scaling import predict

    steps = []
    with use_profiles(calibrations):
        for setup in case.setups:
            hardware = Hardware(**setup.hardware)
            steps.append(predict(reports[setup.key()], hardware.bound() if bound else hardware, Layout(**setup.layout)))
    return case.figure(steps), tuple(steps)


def _reports(cases: Sequence[Case], store: Any) -> dict[str, Report]:
    from xla_cost.parallel.sharding import simulate_devices

    simulate_devices(SIMULATED_DEVICES)
    reports: dict[str, Report] = {}
    for case in cases:
        for setup in case.setups:
            if setup.key() not in reports:
                reports[setup.key()] = _analyse(setup, store)
    return reports


def validate(store: Store | str | None = None, cases: Sequence[Case] = CASES,
             calibrations: Mapping[str, Calibration] | None = None) -> Validation:
    """Every case analysed (through the results ``store``), priced and held
    against its published figure.

    Args:
      store: the results store (a `xla_cost.Store` or a path; None: the default).
      cases: the cases (default `CASES`).
      calibrations: the profiles to price with, by device (None: the committed ones).
    """
    from xla_cost.parallel.calibration import profiles

    reports = _reports(cases, store)
    used = dict(calibrations if calibrations is not None else profiles())
    priced = [_price(case, reports, used) for case in cases]
    bounds = [_price(case, reports, used, bound=True)[0] for case in cases]
    return Validation(tuple(cases), tuple(p for p, _ in priced), tuple(bounds),
                      {c.device: used[c.device] for c in cases if c.device in used},
                      tuple(s for _, s in priced))


def _solve(function: Callable[[float], float], low: float, high: float) -> float:
    """The value in [low, high] at which ``function`` (decreasing) crosses 0, by
    bisection to a millionth of the range; a bound when it does not cross."""
    if function(high) > 0:
        return high
    if function(low) < 0:
        return low
    span = (high - low) * 1e-6
    while high - low > span:
        middle = (low + high) / 2
        if function(middle) > 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2


_PARAMETERS: tuple[tuple[str, float, float, bool], ...] = (
    ("launch", 0.0, 1e-4, True), ("memory", 1e-3, 4.0, False), ("matmul", 1e-3, 1.0, False))
"""What a device's fitted cases fit, a case each: (name, lowest, highest,
whether the step grows with it). Three cases fit the three, in this order;
two, the two shares (the first case the memory-bound one); one, one share for
both kinds of work."""


def fit_calibrations(store: Store | str | None = None, cases: Sequence[Case] = CASES) -> dict[str, Calibration]:
    """Each device's calibration fitted on its ``fitted`` cases, and on nothing else.

    Each fitted case's figure is a time or a throughput, and each fits one
    parameter so that its prediction equals the published figure, those
    before it solved again inside: with three cases, the seconds per kernel
    launched (the first case), the memory-bound share (the second) and the
    matrix products' share (the third); with two, the two shares; with one,
    one share for both. A parameter that would leave its range stops at its
    end (the page says what the fit then misses).

    Raises:
      InputError: a device with more than three fitted cases.
    """
    from xla_cost.parallel.calibration import Calibration

    reports = _reports([c for c in cases if c.fitted], store)
    fitted: dict[str, list[Case]] = {}
    for case in cases:
        if case.fitted:
            fitted.setdefault(case.device, []).append(case)
    out = {}
    source = "fitted by xla_cost.study.validation.fit_calibrations (python benchmarks/calibrate.py)"
    for device, chosen in fitted.items():
        if len(chosen) > len(_PARAMETERS):
            raise InputError(f"at most {len(_PARAMETERS)} fitted cases per device", f"{len(chosen)} for {device}",
                             "Mark fewer cases of the device fitted=True.")

        def miss(case: Case, values: Mapping[str, float]) -> float:
            """Predicted time over published, less 1 (positive: too slow), for either kind of figure."""
            calibration = Calibration(device, min(values.get("matmul", values["memory"]), 1.0), values["memory"],
                                      launch=values.get("launch", 0.0))
            value = _price(case, reports, {device: calibration})[0]
            ratio = value / case.published
            return ratio - 1 if "second" in case.quantity or case.quantity == "days" else 1 / ratio - 1

        parameters = _PARAMETERS[len(_PARAMETERS) - max(len(chosen), 2):][:len(chosen)]

        def solve(level: int, given: dict[str, float]) -> dict[str, float]:
            """``given`` with the parameters from ``level`` down fitted on their cases."""
            if level < 0:
                return given
            name, low, high, rising = parameters[level]

            def inner(value: float) -> dict[str, float]:
                return solve(level - 1, {**given, name: value})

            value = _solve(lambda v: -miss(chosen[level], inner(v)) if rising else miss(chosen[level], inner(v)),
                           low, high)
            return inner(value)

        values = solve(len(parameters) - 1, {})
        memory = round(values["memory"], 4)
        out[device] = Calibration(device, min(round(values.get("matmul", memory), 4), 1.0), memory,
                                  tuple(c.name for c in chosen), source, round(values.get("launch", 0.0), 9))
    return out
