"""The time model held against published training runs, held out paper by paper.

Every `xla_cost.study.cases.Case` is analysed as its paper ran it: each of its
setups compiled by its device's own compiler (``target=``, deviceless) and
priced by `xla_cost.runs.scaling.predict`, kernel by kernel
(`xla_cost.timemodel.kernel_time`). The time model has one set of global
constants (`xla_cost.timemodel.calibration.Calibration`); `fit_constants`
fits them on a set of cases (least squares in the logarithm of predicted
over published, each paper weighted alike), and `validate` reports every
case twice:

* **held out**: the constants refitted without the case's paper, then its
  cases predicted (leave-one-paper-out): the figure a user can expect of a
  run the model has not seen;
* **in sample**: with the constants fitted on every case (the committed ones).

The analysed programs are kept in a committed file
(``reports/data/validation_programs.json.gz``: each setup's `xla_cost.Report`
with its kernel lists, written by `write_programs`, ``python
benchmarks/calibrate.py --programs``), so that the page and the tests price
and refit without compiling; `analyse_setups` compiles them again.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.errors import InputError
from xla_cost.study.cases import BASE_CASES, Case, Setup, megatron_flops
from xla_cost.study.run_cases import run_cases

if TYPE_CHECKING:
    import pandas as pd

    from xla_cost.analysis.report import Report
    from xla_cost.timemodel.calibration import Calibration
    from xla_cost.runs.scaling import StepEstimate

__all__ = ["BAND", "LIMIT", "Case", "Setup", "CASES", "Validation", "validate", "fit_constants", "held_out",
           "analyse_setups", "write_programs", "read_programs", "price_case", "megatron_flops", "PROGRAMS_FILE",
           "SIMULATED_DEVICES"]

BAND = 0.20
"""How far a prediction may be from its published figure, relative (the issue's ±20%)."""

LIMIT = 0.40
"""No held-out prediction may be further than this from its published figure."""

SIMULATED_DEVICES = 8
"""Devices the largest tensor-parallel setup is analysed over."""

CASES: tuple[Case, ...] = (*BASE_CASES, *run_cases())
"""Every case: `xla_cost.study.cases.BASE_CASES` and the published runs of
`xla_cost.study.run_cases`."""

PROGRAMS_FILE = "validation_programs.json.gz"
"""The committed analyses' file name, under ``reports/data/``."""

PROGRAMS_FORMAT = 1
"""The layout of the programs file; a file of another is refused."""


# ---------------------------------------------------------------------------
# The analysed programs


def _analyse(setup: Setup, store: Any) -> Report:
    from xla_cost.runs.configs import RunConfig

    config = RunConfig(setup.model, batch_size=setup.batch_size, config=dict(setup.config), optimizer=setup.optimizer,
                       dtype=setup.dtype, mesh=dict(setup.mesh), target=setup.compile_target,
                       exact_train_step=setup.one_program)
    return config.canonical().run(cache=store if store is not None else True)


def analyse_setups(cases: Sequence[Case] = CASES, store: Any = None,
                   progress: Any = None) -> dict[str, Report]:
    """Every setup of ``cases`` analysed for its target (through the results
    ``store``: None, the default one), by `Setup.key`."""
    reports: dict[str, Report] = {}
    for case in cases:
        for setup in case.setups:
            if setup.key() not in reports:
                if progress is not None:
                    progress(f"{case.name}: {setup.describe()} for {setup.compile_target}")
                reports[setup.key()] = _analyse(setup, store)
    return reports


def _slim(report: Report) -> dict[str, Any]:
    """What pricing reads of a report: per-layer rows and the kernels' names and overlaps left out."""
    data = report.to_dict()
    data.pop("layers", None)
    for listed in (data.get("kernel_list") or {}).values():
        for kernel in listed or ():
            kernel["overlaps"], kernel["op_name"], kernel["groups"] = [], "", None
    return data


def write_programs(reports: Mapping[str, Report], path: str | pathlib.Path) -> pathlib.Path:
    """Writes the analysed programs (by setup key) to ``path``, gzipped JSON,
    whole or not at all (a temporary file renamed)."""
    import jax

    path = pathlib.Path(path)
    body = {"format": PROGRAMS_FORMAT, "jax_version": jax.__version__,
            "programs": {key: _slim(report) for key, report in sorted(reports.items())}}
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(gzip.compress(json.dumps(body, sort_keys=True).encode(), mtime=0))
    temporary.replace(path)
    return path


def read_programs(path: str | pathlib.Path) -> dict[str, Report]:
    """The analysed programs written by `write_programs`, by setup key.

    Raises:
      InputError: no such file, or one of another format.
    """
    from xla_cost.analysis.report import Report

    path = pathlib.Path(path)
    if not path.is_file():
        raise InputError("the validation's analysed programs (reports/data/" + PROGRAMS_FILE + ")", str(path),
                         "Run python benchmarks/calibrate.py --programs to analyse them.")
    body = json.loads(gzip.decompress(path.read_bytes()))
    if body.get("format") != PROGRAMS_FORMAT:
        raise InputError(f"programs of format {PROGRAMS_FORMAT}", repr(body.get("format")),
                         "Run python benchmarks/calibrate.py --programs to analyse them again.")
    return {key: Report.from_dict(data) for key, data in body["programs"].items()}


# ---------------------------------------------------------------------------
# Pricing and fitting


def price_case(case: Case, reports: Mapping[str, Report], constants: Calibration | None = None,
               bound: bool = False) -> tuple[float, tuple[StepEstimate, ...]]:
    """(the case's figure, its steps priced) with ``constants`` (None: the
    committed ones); ``bound``: every step as `xla_cost.Hardware.bound` prices it."""
    from xla_cost.timemodel.calibration import use_constants
    from xla_cost.timemodel.hardware import Hardware
    from xla_cost.timemodel.schedule import Layout
    from xla_cost.runs.scaling import predict

    steps = []
    with use_constants(constants):
        for setup in case.setups:
            if setup.key() not in reports:
                raise InputError(f"an analysed program for every setup of {case.name}", "none for " + setup.label,
                                 "Run python benchmarks/calibrate.py --programs to analyse the cases again.")
            hardware = Hardware(**setup.hardware)
            steps.append(predict(reports[setup.key()], hardware.bound() if bound else hardware,
                                 Layout(**setup.layout)))
    return case.figure(steps), tuple(steps)


def _log_miss(case: Case, value: float) -> float:
    """log(predicted / published), signed so that positive is too slow."""
    ratio = math.log(value / case.published) if value > 0 else math.log(1e-9)
    return ratio if case.is_time or case.quantity in ("scaling efficiency", "speed-up") else -ratio


def fit_constants(cases: Sequence[Case], reports: Mapping[str, Report], start: Calibration | None = None
                  ) -> Calibration:
    """The global constants that best predict ``cases``: least squares in the
    logarithm of predicted over published, each paper's cases weighted by
    ``1 / sqrt(cases of the paper)`` (every paper counts alike), within
    `xla_cost.timemodel.calibration.BOUNDS` (searched in the logarithm of each
    share, linearly for the others).

    Raises:
      InputError: no cases.
    """
    import numpy as np
    from scipy.optimize import least_squares

    from xla_cost.timemodel.calibration import BOUNDS, FIELDS, Calibration, constants

    if not cases:
        raise InputError("at least one case to fit the constants on", "none", "Pass cases.")
    per_paper: dict[str, int] = {}
    for case in cases:
        per_paper[case.paper] = per_paper.get(case.paper, 0) + 1
    weights = np.asarray([1 / math.sqrt(per_paper[c.paper]) for c in cases])
    scale = {"matmul": 1.0, "memory": 1.0, "launch": 1e-6, "depth": 100.0, "host": 1e-3, "vector": 1.0}
    lows = np.asarray([BOUNDS[f][0] / scale[f] for f in FIELDS])
    highs = np.asarray([BOUNDS[f][1] / scale[f] for f in FIELDS])
    begin = (start or constants()).values()
    x0 = np.clip(np.asarray([v / scale[f] for f, v in zip(FIELDS, begin)]), lows + 1e-9, highs - 1e-9)

    def made(x: Any) -> Calibration:
        return Calibration(**{f: float(min(max(v * scale[f], BOUNDS[f][0]), BOUNDS[f][1]))
                              for f, v in zip(FIELDS, x)})

    def residuals(x: Any) -> Any:
        calibration = made(x)
        return weights * np.asarray([_log_miss(c, price_case(c, reports, calibration)[0]) for c in cases])

    result = least_squares(residuals, x0, bounds=(lows, highs), x_scale="jac", diff_step=1e-3, max_nfev=400)
    fitted = made(result.x)
    return dataclasses.replace(
        fitted, fitted_on=tuple(c.name for c in cases),
        source="fitted by xla_cost.study.validation.fit_constants (python benchmarks/calibrate.py): least squares "
               "in log(predicted / published), every paper weighted alike")


def held_out(cases: Sequence[Case], reports: Mapping[str, Report], start: Calibration | None = None
             ) -> tuple[dict[str, float], dict[str, Calibration]]:
    """Leave-one-paper-out: for each paper, the constants fitted on every
    other paper's cases and its own predicted with them. Returns (each case's
    held-out figure by name, the constants each paper was predicted with)."""
    papers = list(dict.fromkeys(c.paper for c in cases))
    figures: dict[str, float] = {}
    used: dict[str, Calibration] = {}
    from xla_cost.timemodel.calibration import constants as committed

    for paper in papers:
        rest = [c for c in cases if c.paper != paper]
        # with no other paper there is nothing to fit on: the starting constants, and the page says so
        constants = fit_constants(rest, reports, start) if rest else dataclasses.replace(
            start or committed(), fitted_on=(), source="no other paper among the cases: the starting constants")
        used[paper] = constants
        for case in cases:
            if case.paper == paper:
                figures[case.name] = price_case(case, reports, constants)[0]
    return figures, used


# ---------------------------------------------------------------------------
# The validation


@dataclasses.dataclass(frozen=True)
class Validation:
    """Every case priced: in sample, held out, and as a bound.

    Attributes:
      cases: the cases, in order.
      in_sample: each case's figure with the constants fitted on every case.
      held_out: each case's figure with the constants fitted without its paper.
      bound: each case's figure as a bound (`xla_cost.Hardware.bound`:
        compute at peak, no communication hidden).
      constants: the constants of the in-sample figures.
      held_out_constants: the constants each paper was predicted with, by paper.
      estimates: each case's steps priced in sample.
    """

    cases: tuple[Case, ...]
    in_sample: tuple[float, ...]
    held_out: tuple[float, ...]
    bound: tuple[float, ...]
    constants: Calibration
    held_out_constants: Mapping[str, Calibration]
    estimates: tuple[tuple[StepEstimate, ...], ...]

    @property
    def predicted(self) -> tuple[float, ...]:
        """The held-out figures: what the model predicts of a run it has not seen."""
        return self.held_out

    def errors(self, held_out: bool = True) -> tuple[float, ...]:
        """Each figure's relative error, ``predicted / published - 1`` (held out, or in sample)."""
        values = self.held_out if held_out else self.in_sample
        return tuple(p / c.published - 1 for c, p in zip(self.cases, values))

    def within(self, band: float = BAND, held_out: bool = True) -> float:
        """The share of cases within ``band``."""
        errors = self.errors(held_out)
        return sum(abs(e) <= band for e in errors) / len(errors) if errors else 0.0

    def devices(self) -> tuple[str, ...]:
        """The device generations the cases ran on."""
        return tuple(dict.fromkeys(c.device for c in self.cases))

    def to_frame(self) -> pd.DataFrame:
        """One row per case."""
        import pandas as pd

        rows = []
        for case, inside, out, bound in zip(self.cases, self.in_sample, self.held_out, self.bound):
            rows.append({
                "case": case.name, "paper": case.paper, "device": case.device, "quantity": case.quantity,
                "published": case.published, "held_out": out, "held_out_error": out / case.published - 1,
                "in_sample": inside, "in_sample_error": inside / case.published - 1,
                "within_band": abs(out / case.published - 1) <= BAND, "bound": bound,
                "bound_error": bound / case.published - 1, "measured_here": case.measured_here,
                "source": case.source,
            })
        return pd.DataFrame(rows)


def programs_path(data_dir: str | pathlib.Path) -> pathlib.Path:
    """The programs file under a ``reports/data`` directory."""
    return pathlib.Path(data_dir) / PROGRAMS_FILE


def validate(programs: str | pathlib.Path | Mapping[str, Report], cases: Sequence[Case] = CASES,
             constants: Calibration | None = None) -> Validation:
    """Every case priced in sample (``constants``; None: the committed ones),
    held out (refitted without its paper) and as a bound.

    Args:
      programs: the analysed programs (a path written by `write_programs`, or
        reports by setup key, as `analyse_setups` gives them).
      cases: the cases (default `CASES`).
      constants: the in-sample constants (None: the committed ones).
    """
    from xla_cost.timemodel.calibration import constants as committed

    reports = read_programs(programs) if isinstance(programs, (str, pathlib.Path)) else dict(programs)
    used = constants or committed()
    priced = [price_case(case, reports, used) for case in cases]
    bounds = [price_case(case, reports, used, bound=True)[0] for case in cases]
    figures, per_paper = held_out(cases, reports, used)
    return Validation(tuple(cases), tuple(p for p, _ in priced), tuple(figures[c.name] for c in cases),
                      tuple(bounds), used, per_paper, tuple(s for _, s in priced))
