"""The time model's constants: one set for every device, fitted jointly, named.

`xla_cost.timemodel.kernel_time` prices every kernel of a compiled program
from the device's datasheet figures (the dtype's peak, the memory bandwidth,
its matrix units, its CUDA cores) and six global constants, a `Calibration`:

* ``matmul``: the share of the peak a large, well-shaped matrix product reaches;
* ``memory``: the share of the memory bandwidth a bandwidth-bound kernel reaches;
* ``launch``: seconds a cuDNN call costs beyond its work (its set-up, its
  own kernels' ramps and tails), and any other kernel (a fusion, a cuBLAS
  gemm) up to its own work
  (`xla_cost.timemodel.kernel_time`; every kernel pays the measured
  ``KERNEL_GAP`` besides);
* ``depth``: the contraction depth at which a product runs at half its rate
  (filling and draining the pipeline of a small-k product);
* ``vector``: the share of the CUDA cores' FP32 rate a convolution reaches
  that cuDNN cannot run on the tensor cores (input features off their
  alignment: an image's 3 channels; `xla_cost.timemodel.kernel_time`);
* ``host``: seconds each step costs outside its kernels and its dispatch (a
  step is never shorter than its host's measured dispatch of it:
  `xla_cost.timemodel.devices.Dispatch`).

They are the same for a V100, an H100 and a TPU: what differs is in the
registry. Four are set by measurements (`MEASURED`: ``matmul``, ``memory``,
``launch``, ``host``, which no fit could identify); ``depth`` and ``vector``
are fitted on published runs by
`xla_cost.study.validation.fit_constants` (least squares in the logarithm of
each case's predicted over published figure) and committed in
``calibrations/constants.json`` beside this module with the cases they were
fitted on; the validation page refits them without each paper in turn to
predict that paper's cases held out. Those held-out errors give the prediction
interval committed with them (`PredictionInterval`: the range around a predicted
time that held most held-out published cases, its bias stated), which
`interval` puts beside a predicted figure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import pathlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from xla_cost.errors import InputError

__all__ = ["Calibration", "PredictionInterval", "INTERVAL_COVERAGE", "weighted_quantile", "PATH", "BOUNDS",
           "MATMUL_CEILING", "MEMORY_CEILING", "LAUNCH_CEILING", "MEASURED", "FIELDS", "CONSTANTS", "constants",
           "use_constants", "write_constants", "describe", "interval", "interval_description", "PROXY_NO_RANGE",
           "at_bound"]

PATH = pathlib.Path(__file__).resolve().parent / "calibrations" / "constants.json"
"""Where the committed constants are."""

MATMUL_CEILING = 0.780
"""The most of the dtype's peak a product kernel reached on a device timed here, the kernel
model's tile and wave losses taken out (`xla_cost.timemodel.kernel_time.shape_efficiency` at
depth 0): cuBLAS's 4,096³ bfloat16 product on an H100 at 748.3 TFLOP/s of 989.4 (75.6%) over
that shape's 0.970 (``reports/data/gemm_nvidia-h100-80gb-hbm3_2026-11-26.csv``; its 8,192³ at
762.7: 77.1% over 0.993, 0.776; the H200's best, 8,192³ at 768.4 of 989: 0.783). The least of
the devices' best, so that ``matmul`` never prices a product above what cuBLAS delivered
(`tests/study/test_validation.py` recomputes it from the files)."""

LAUNCH_CEILING = 6.0e-6
"""The shortest cuDNN call a kernel profile measured on an H100, its work included: 6.03 µs
(a 3x3 convolution of deeper_conv_net at batch 8, bfloat16, one kernel;
``reports/data/kernels_nvidia-h100-80gb-hbm3_2026-11-26.csv``, every ``cudnn-*`` instruction's
kernels summed per call; the median call took 10.8 µs). A call's cost beyond its work is no
more than the whole call (`tests/study/test_validation.py` recomputes it)."""

MEMORY_CEILING = 0.919
"""The most of the datasheet memory bandwidth a kernel that is not a product reached on a device
timed here: XLA's conversion of GPT-2's logits from float32 to bfloat16 (``f32[8, 1024, 50257]``
read, its ``bf16`` written: 8 x 1,024 x 50,257 x 6 bytes, 2.470 GB, far beyond the 50 MB L2) in
802.2 µs on an H100, 3.08 TB/s of its 3.35 (``reports/data/kernels_nvidia-h100-80gb-hbm3_2026-11-26.csv``,
``wrapped_convert_61``; the same kernel in the 10 other GPT-2 steps profiled took 802.7-804.2 µs; the softmax
gradient over the same logits 0.874, Adam's update of the 50,257 x 768 embedding, 28 bytes a
parameter, 0.902). STREAM-like copies reach about as much of the datasheet figure (the issue's
85-93% on A100s and H100s). A bandwidth-bound kernel is priced no faster than that
(`tests/timemodel/test_memory_ceiling.py` recomputes it from the files)."""

BOUNDS: Mapping[str, tuple[float, float]] = {
    "matmul": (0.05, MATMUL_CEILING),
    "memory": (0.05, MEMORY_CEILING),
    "launch": (0.0, LAUNCH_CEILING),
    "depth": (0.0, 4096.0),
    "host": (0.0, 0.05),
    "vector": (0.05, 1.0),
}
"""Each constant's physical range: ``matmul`` up to the best product measured
(`MATMUL_CEILING`); ``memory`` up to the most of the datasheet bandwidth a
kernel reached (`MEMORY_CEILING`); ``vector`` a share of the CUDA cores'
datasheet rate, at most 1 (no CUDA-core test here sets a lower ceiling);
``launch`` up to the shortest cuDNN call profiled (`LAUNCH_CEILING`); a
half-rate ``depth`` under 4,096 (the deepest product timed has k = 8,192); a
``host`` cost under 50 ms per step. A fit that ends at a bound
(`at_bound`) is held there by the bound, not by the data."""

MEASURED: Mapping[str, float] = {"matmul": MATMUL_CEILING, "memory": MEMORY_CEILING, "launch": LAUNCH_CEILING,
                                 "host": 0.0}
"""The constants set by a measurement, not fitted: every fit on the published runs and this
project's steps (and each leave-one-paper-out refit) drove ``matmul`` and ``launch`` to their
ceilings (the data asked for products faster than cuBLAS ran them and cuDNN calls longer than
any profiled, each compensating the other) and ``host`` to 0 (the host's measured dispatch,
`xla_cost.timemodel.devices.Dispatch`, leaves nothing for it), and ``memory`` to its bound of 1
in the fit on every case and in every refit (issue 51, the 135 cases of 2026-11-29): more than any
kernel reached (`MEMORY_CEILING`), the data asking the bandwidth-bound kernels to make up for
time priced elsewhere. Bounded by its measurement, the fit on every case put it at 0.914, 0.5%
under it, and 7 of the 24 paper and generation refits at it (the 132 cases priced without the 3
MaxText v5e runs, whose programs wrote the attention scores MaxText's kernel never writes): the data
cannot identify it either. So a large product runs at the best share measured (`MATMUL_CEILING`),
a bandwidth-bound kernel at the best share of the bandwidth measured (`MEMORY_CEILING`), a cuDNN
call costs the shortest call profiled (`LAUNCH_CEILING`), and a step nothing beyond its kernels
and its dispatch. `xla_cost.study.validation.fit_constants` sets them to these figures, and a
constants file is read with them, whatever figure it holds for them (`Calibration.from_dict`)."""

DEFAULTS: Mapping[str, float] = {"vector": 1.0}
"""What a constants file without a fitted field reads it as (the others: 0):
the CUDA cores at their datasheet rate."""

FIELDS = tuple(name for name in BOUNDS if name not in MEASURED)
"""The fitted constants, in the order they are fitted (`MEASURED` are not)."""

CONSTANTS = tuple(BOUNDS)
"""Every constant, fitted or measured."""


INTERVAL_COVERAGE = 80.0
"""The share (percent) of the held-out published cases, each paper weighted alike, that the
prediction interval holds (`PredictionInterval`)."""


def weighted_quantile(values: Sequence[float], weights: Sequence[float], share: float) -> float:
    """The smallest of ``values`` at which the ``weights`` of the values at or below it reach
    ``share`` (0 to 1) of their total: the inverse of the weighted empirical distribution
    function (no interpolation; equal weights give the ``ceil(share n)``-th smallest of ``n``).

    Raises:
      InputError: no values, values and weights of different lengths, a weight that is not > 0,
        or a share outside [0, 1].
    """
    if not values or len(values) != len(weights) or any(not w > 0 for w in weights) or not 0 <= share <= 1:
        raise InputError("values with as many weights > 0, and a share in [0, 1]",
                         f"{len(values)} values, {len(weights)} weights, share {share!r}",
                         "Pass one weight > 0 per value and a share such as 0.8.")
    pairs = sorted(zip(values, weights))
    total, reached = math.fsum(weights), 0.0
    for value, weight in pairs:
        reached += weight
        if reached >= share * total * (1 - 1e-12):
            return float(value)
    return float(pairs[-1][0])


@dataclasses.dataclass(frozen=True)
class PredictionInterval:
    """How far a predicted step time is from the published one, from the validation's
    held-out residuals ``r = log(predicted / published seconds)`` over ``cases`` published
    cases of ``papers`` papers, each predicted with the constants fitted without its paper
    (no constant was fitted on the case it tests).

    The interval is centred on the prediction, on a log scale: a step predicted at ``s``
    seconds ran in ``s exp(-spread)`` to ``s exp(spread)`` (`seconds`) in ``coverage``
    percent of the held-out cases, each paper weighted alike as the fit weights them
    (``spread`` is that `weighted_quantile` of ``|r|``: `from_residuals`). It holds its own
    point, and it is as wide as the model's held-out error, its bias included. The bias is
    stated apart, never applied to the point (the point is the model's, as every other
    figure printed with it): ``bias`` is the weighted median of ``r``, the median case ran
    at ``exp(-bias)`` times its predicted time (positive: predicted too slow).

    Attributes:
      spread: the ``coverage`` weighted quantile of ``|r|`` (a log factor, >= 0).
      bias: the weighted median of ``r``.
      coverage: the share of the held-out cases the interval holds, in percent.
      cases: the held-out residuals it is computed on.
      papers: the papers they come from (the residuals cluster by paper: each paper weighs
        as much as any other, whatever its number of cases).
      how: what the residuals are, in words.
    """

    spread: float
    bias: float
    coverage: float = INTERVAL_COVERAGE
    cases: int = 0
    papers: int = 0
    how: str = ""

    @classmethod
    def from_residuals(cls, residuals: Mapping[str, float], papers: Mapping[str, str],
                       coverage: float = INTERVAL_COVERAGE, how: str = "") -> PredictionInterval:
        """The interval of held-out ``residuals`` (case -> ``log(predicted / published)``), each
        case weighted ``1 / (its paper's cases)`` (``papers``: case -> paper): ``spread`` the
        ``coverage`` weighted quantile of ``|r|``, ``bias`` the weighted median of ``r``.

        Raises:
          InputError: fewer than two residuals, or a case without its paper.
        """
        if len(residuals) < 2 or any(name not in papers for name in residuals):
            raise InputError("at least two held-out residuals, each with its paper",
                             f"{len(residuals)} residual(s), papers of {sorted(set(residuals) & set(papers))}",
                             "Validate on more published runs, and give each case's paper.")
        per_paper: dict[str, int] = {}
        for name in residuals:
            per_paper[papers[name]] = per_paper.get(papers[name], 0) + 1
        names = list(residuals)
        weights = [1 / per_paper[papers[name]] for name in names]
        values = [float(residuals[name]) for name in names]
        return cls(weighted_quantile([abs(v) for v in values], weights, coverage / 100),
                   weighted_quantile(values, weights, 0.5), float(coverage), len(values), len(per_paper), how)

    @property
    def factor(self) -> float:
        """``exp(spread)``: the published time was within this factor of the predicted one."""
        return math.exp(self.spread)

    def seconds(self, predicted: float) -> tuple[float, float]:
        """The range a step predicted at ``predicted`` seconds took, (shortest, longest):
        ``predicted / factor`` to ``predicted x factor``."""
        return predicted * math.exp(-self.spread), predicted * math.exp(self.spread)

    def describe(self) -> str:
        """The interval in one line: its range around a prediction, its coverage, what it
        rests on, and the bias it holds."""
        lo, hi = self.seconds(1.0)
        return (f"in {self.coverage:g}% of the held-out published cases (each paper weighted alike) the published "
                f"step time was {lo:.2f}x to {hi:.2f}x the predicted one (within a factor {self.factor:.2f}; "
                f"{self.cases} cases of {self.papers} papers, each predicted with the constants fitted without its "
                f"paper); the median case ran at {math.exp(-self.bias):.2f}x its predicted time (the model's "
                f"bias: the range holds it, the figure is the model's, uncorrected)")

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PredictionInterval:
        """The inverse of `to_dict`.

        Raises:
          InputError: a dict without ``spread`` and ``bias`` (an interval of percentiles, as
            constants fitted before the interval was centred wrote it).
        """
        if "spread" not in data or "bias" not in data:
            raise InputError("a prediction interval with 'spread' and 'bias'", f"the fields {sorted(data)}",
                             "Fit the constants again (python benchmarks/calibrate.py), which writes the interval.")
        return cls(float(data["spread"]), float(data["bias"]), float(data.get("coverage", INTERVAL_COVERAGE)),
                   int(data.get("cases", 0)), int(data.get("papers", 0)), str(data.get("how", "")))


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The time model's global constants (see the module's docstring).

    Attributes:
      matmul: share of the dtype's peak a large, well-shaped product reaches.
      memory: share of the memory bandwidth a bandwidth-bound kernel reaches.
      launch: seconds per cuDNN call beyond its work (any other kernel's: up to its work).
      depth: contraction depth at which a product runs at half its rate.
      host: seconds per step outside the kernels.
      vector: share of the CUDA cores' FP32 rate a convolution off the tensor cores reaches.
      fitted_on: the cases they were fitted on.
      source: how they were fitted (the command).
      interval: the prediction interval of the held-out residuals (`PredictionInterval`),
        written with the constants by the command that fits them; None where none was.
    """

    matmul: float
    memory: float
    launch: float = 0.0
    depth: float = 0.0
    host: float = 0.0
    vector: float = 1.0
    fitted_on: tuple[str, ...] = ()
    source: str = ""
    interval: PredictionInterval | None = None

    def __post_init__(self) -> None:
        for name, (low, high) in BOUNDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high \
                    or (low == 0.05 and value <= 0):
                raise InputError(f"a time-model constant {name} in [{low:g}, {high:g}]", repr(value),
                                 "Fit the constants again (python benchmarks/calibrate.py) or edit "
                                 "xla_cost/timemodel/calibrations/constants.json.")

    def values(self) -> tuple[float, ...]:
        """The fitted constants in `FIELDS` order."""
        return tuple(float(getattr(self, name)) for name in FIELDS)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values."""
        return {**dataclasses.asdict(self), "fitted_on": list(self.fitted_on),
                "interval": self.interval.to_dict() if self.interval is not None else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        """The inverse of `to_dict`, the measured constants (`MEASURED`) their measurement whatever
        figure ``data`` holds for them (a file fitted before one was measured: ``memory``); an
        interval of an older form (percentiles of the residuals, not centred: ``spread`` missing)
        is read as none, which the next fit replaces."""
        found = data.get("interval")
        return cls(**{name: MEASURED[name] if name in MEASURED else float(data.get(name, DEFAULTS.get(name, 0.0)))
                      for name in CONSTANTS},
                   fitted_on=tuple(data.get("fitted_on", ())), source=str(data.get("source", "")),
                   interval=PredictionInterval.from_dict(found) if found and "spread" in found else None)


@functools.cache
def _committed() -> Calibration:
    return Calibration.from_dict(json.loads(PATH.read_text()))


_IN_USE: list[Calibration] = []
"""Constants `use_constants` put in place of the committed ones, innermost last."""


@contextlib.contextmanager
def use_constants(given: Calibration | None) -> Iterator[None]:
    """Within the block, `constants` answers ``given`` (None: the committed
    ones): how constants are fitted and tried before they are written."""
    if given is None:
        yield
        return
    _IN_USE.append(given)
    try:
        yield
    finally:
        _IN_USE.pop()


def constants() -> Calibration:
    """The constants in use: the committed ones, or those `use_constants` put in place."""
    return _IN_USE[-1] if _IN_USE else _committed()


def write_constants(calibration: Calibration, path: pathlib.Path = PATH) -> pathlib.Path:
    """Writes ``calibration`` to ``path`` (sorted keys, one field a line); `constants` reads it next."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(calibration.to_dict(), indent=2, sort_keys=True) + "\n")
    _committed.cache_clear()
    return path


def describe(calibration: Calibration, *, gpu: bool = True) -> str:
    """The constants in one line, with what they were fitted on; ``gpu=False`` (a TPU) leaves
    out the two a GPU's libraries alone read (cuDNN's call, the CUDA cores' convolutions)."""
    library = (f"{calibration.launch * 1e6:.2f} µs per cuDNN call (other kernels up to their work), convolutions "
               f"off the tensor cores at {calibration.vector:.1%} of the CUDA cores, ") if gpu else ""
    return (f"products at {calibration.matmul:.1%} of peak (half rate at k = {calibration.depth:.0f}), "
            f"other kernels at {calibration.memory:.1%} of the bandwidth, {library}"
            f"{calibration.host * 1e3:.2f} ms per step; one set for every device, fitted on "
            f"{len(calibration.fitted_on)} cases (published runs and this project's measurements)")


PROXY_NO_RANGE = (
    "the step was priced from the totals of a program compiled without a target (on a CPU: XLA's CPU fusions, "
    "not the device's), as none of the validation's cases was: each was its device's own program, compiled by "
    "that device's compiler and priced kernel by kernel (xla_cost.study.validation); --target DEVICE (target=) "
    "prices the run so")
"""Why a prediction priced from the totals of a program compiled without a target (the
CPU's, where the analysis ran on one) carries no range: the held-out
range measures the model on the devices' own programs alone, and the CPU's fusions are
not a GPU's (a long-context language model's memory-bound bytes come out several times
the device program's)."""


def interval(seconds: float) -> tuple[float, float] | None:
    """The range a step predicted at ``seconds`` took in the validation's held-out cases,
    (shortest, longest) in seconds: the committed constants' `PredictionInterval` (the one
    in use under `use_constants`); None where the constants carry none. A throughput's
    range is the inverse: ``tokens / longest`` to ``tokens / shortest``."""
    found = constants().interval
    return found.seconds(seconds) if found is not None else None


def interval_description(*, proxy: bool = False) -> str:
    """What `interval` is, in one line (or that the constants in use carry none).

    Args:
      proxy: the step was priced from the totals of a program compiled without a
        target (the CPU's, where the analysis ran on one): why it has no range, which
        measures the model on the devices' own programs alone (`PROXY_NO_RANGE`).
    """
    if proxy:
        return PROXY_NO_RANGE
    found = constants().interval
    return found.describe() if found is not None else ("no prediction interval with these constants (python "
                                                       "benchmarks/calibrate.py fits them and writes one)")


def at_bound(calibration: Calibration, tolerance: float = 1e-3) -> tuple[str, ...]:
    """The fitted constants (`FIELDS`) of ``calibration`` at (within ``tolerance`` of the range
    of) a bound of `BOUNDS`: a fit that ends there is held by the bound, not by the data."""
    found = []
    for name in FIELDS:
        low, high = BOUNDS[name]
        value = getattr(calibration, name)
        if value - low <= tolerance * (high - low) or high - value <= tolerance * (high - low):
            found.append(name)
    return tuple(found)
