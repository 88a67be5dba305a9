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
* **in sample**: with the constants fitted on every case (the committed ones);
* **held out by device generation**: the constants refitted without every
  case of the case's generation (`xla_cost.study.cases.generation`).

Absolute quantities (TFLOP/s, MFU, tokens/s, seconds, days) and ratios
(scaling efficiency, speed-up) are reported apart; a ratio is also scored on
the overhead it stands for (`Validation.overhead_errors`, `OVERHEAD_BAND`).
The held-out residuals of the published absolute cases give the prediction
interval (`prediction_interval`) that ``python benchmarks/calibrate.py``
commits with the constants (`xla_cost.timemodel.calibration.interval`).

The analysed programs are kept in a committed file
(``reports/data/validation_programs.json.gz``: each setup's `xla_cost.Report`
with its kernel lists, written by `write_programs`, ``python
benchmarks/calibrate.py --programs``, which compiles only the programs the
file lacks), so that the page and the tests price and refit without
compiling; `analyse_setups` compiles them again. An unrolled program of many
identical blocks is built from its compiles at two and three blocks
(`analyse_by_depth`, `xla_cost.study.depth`), marked in the file as
extrapolated, and the page names the cases priced so (`Validation.extrapolated`). A program its compiler
refuses is kept there with its error (`read_refused`): its case is left out
by `REFUSED_RULE` and listed.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import pathlib
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.errors import InputError
from xla_cost.study.cases import BASE_CASES, Case, Setup, megatron_flops
from xla_cost.study.run_cases import run_cases

if TYPE_CHECKING:
    import pandas as pd

    from xla_cost.analysis.report import Report
    from xla_cost.runs.scaling import StepEstimate
    from xla_cost.timemodel.calibration import Calibration, PredictionInterval

__all__ = ["BAND", "LIMIT", "OVERHEAD_BAND", "REFUSED_RULE", "Case", "Setup", "CASES",
           "Validation", "validate", "fit_constants", "held_out", "prediction_interval", "analyse_setups",
           "write_programs", "read_programs", "read_refused", "refused_cases", "price_case", "megatron_flops",
           "analyse_by_depth", "extrapolated_depths",
           "PROGRAMS_FILE",
           "SIMULATED_DEVICES"]

BAND = 0.20
"""How far a prediction may be from its published figure, relative (the issue's ±20%)."""

LIMIT = 0.40
"""No held-out prediction may be further than this from its published figure."""

OVERHEAD_BAND = 0.35
"""How far a ratio case's predicted scaling overhead (`Case.overhead`) may be from the published
overhead, relative (issue 51: ±35%)."""

REFUSED_RULE = ("the device's compiler refuses the run's program (deviceless, for its target); its error is kept "
                "with the analysed programs")
"""The rule applied when the programs are compiled: a case one of whose programs its compiler
refused is left out of the validation, listed with the error (beside the rules of
`xla_cost.study.run_cases.RULES`, applied to the records)."""

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
                       exact_train_step=setup.one_program, unfused=tuple(setup.unfused),
                       loss=setup.loss)
    return config.canonical().run(cache=store if store is not None else True)


def _compiler_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a compiler's refusal raises (jax's runtime error around XLA's status)."""
    import jax

    return tuple(e for e in (getattr(jax.errors, "JaxRuntimeError", None),) if e is not None)


def _module_parameters(setup: Setup) -> dict[str, int]:
    """The setup's model's parameters by module path (`xla_cost.step.trees.module_param_counts`),
    from its abstract initialisation (nothing compiled)."""
    import jax

    from xla_cost.runs.configs import RunConfig
    from xla_cost.step.trees import module_param_counts

    model, inputs, *_ = RunConfig(setup.model, batch_size=1, config=dict(setup.config), optimizer=setup.optimizer,
                                  dtype=setup.dtype).build()
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x),
                               jax.ShapeDtypeStruct((1, *inputs.shape[1:]), inputs.dtype))
    return module_param_counts(variables["params"])


def analyse_by_depth(setup: Setup, store: Any = None) -> Report:
    """``setup``'s unrolled program of ``n_layer`` identical blocks from the same program compiled
    at `xla_cost.study.depth.DEPTHS` blocks (`xla_cost.study.depth.extend_depth`), its blocks
    checked identical on the whole model's parameters first (`xla_cost.study.depth.block_structure`).

    Raises:
      InputError: the rule does not hold for the setup (its message says why).
    """
    from xla_cost.study import depth

    layers = int(setup.config[depth.LAYERS_FIELD])
    modules = _module_parameters(setup)
    prefix = depth.block_structure(modules, layers)
    two, three = (_analyse(dataclasses.replace(setup, config={**setup.config, depth.LAYERS_FIELD: blocks}), store)
                  for blocks in depth.DEPTHS)
    return depth.extend_depth(two, three, layers, prefix, sum(modules.values()))


def extrapolated_depths(report: Report) -> tuple[int, int] | None:
    """The blocks an extended report's program was compiled at (`analyse_by_depth`), None for a
    program compiled whole."""
    from xla_cost.study import depth

    return depth.DEPTHS if any(n.startswith(depth.NOTE) for n in report.notes) else None


def analyse_setups(cases: Sequence[Case] = CASES, store: Any = None, progress: Any = None,
                   known: Collection[str] = (), refused: dict[str, str] | None = None,
                   by_depth: bool = False) -> dict[str, Report]:
    """Every setup of ``cases`` analysed for its target (through the results
    ``store``: None, the default one), by `Setup.key`.

    Args:
      known: keys already analysed (the committed file's): not compiled again.
      refused: where given, a compiler's refusal of a program is recorded
        there (key -> the error's first line) instead of raised, and the
        next setup is compiled (`REFUSED_RULE`).
      by_depth: an unrolled program of more blocks than three
        (`xla_cost.study.depth.applies`) built from its compiles at two and
        three blocks (`analyse_by_depth`); where the rule does not hold, the
        whole program is compiled, and ``progress`` says why.
    """
    from xla_cost.study import depth

    reports: dict[str, Report] = {}
    for case in cases:
        for setup in case.setups:
            key = setup.key()
            if key in reports or key in known or (refused is not None and key in refused):
                continue
            if progress is not None:
                progress(f"{case.name}: {setup.describe()} for {setup.compile_target}")
            try:
                if by_depth and depth.applies(setup.config):
                    try:
                        reports[key] = analyse_by_depth(setup, store)
                        if progress is not None:
                            progress(f"  extended from {depth.DEPTHS[0]} and {depth.DEPTHS[1]} blocks to "
                                     f"{setup.config[depth.LAYERS_FIELD]}")
                        continue
                    except InputError as error:
                        if isinstance(error.__cause__, _compiler_errors()):
                            raise
                        if progress is not None:
                            progress(f"  the depth rule does not hold, the whole program compiled: {error}")
                reports[key] = _analyse(setup, store)
            except (InputError, *_compiler_errors()) as error:
                # the compiler's own error, or the analysis's one line for a refusal out of memory (raised from it)
                compiler = isinstance(error, _compiler_errors()) or isinstance(error.__cause__, _compiler_errors())
                if refused is None or not compiler:
                    raise
                refused[key] = " ".join(str(error).split())[:400]
                if progress is not None:
                    progress(f"  refused: {refused[key]}")
    return reports


def _slim(report: Report) -> dict[str, Any]:
    """What pricing reads of a report: per-layer rows and the kernels' op names and device groups left out,
    and their overlaps but a transfer's to or from the host's memory (what the time model hides it behind,
    `xla_cost.timemodel.kernel_time`)."""
    data = report.to_dict()
    data.pop("layers", None)
    for listed in (data.get("kernel_list") or {}).values():
        for kernel in listed or ():
            kernel["op_name"], kernel["groups"] = "", None
            if not kernel.get("host_bytes"):
                kernel["overlaps"] = []
    return data


def write_programs(reports: Mapping[str, Report], path: str | pathlib.Path,
                   refused: Mapping[str, str] | None = None) -> pathlib.Path:
    """Writes the analysed programs (by setup key) to ``path``, gzipped JSON,
    whole or not at all (a temporary file renamed), with the programs their
    compiler ``refused`` (key -> error) and, under ``extrapolated``, the
    programs extended by depth (`analyse_by_depth`: key -> the blocks they
    were compiled at and the blocks extended to)."""
    import jax

    path = pathlib.Path(path)
    extended = {key: {"compiled_at": list(depths), "blocks": int(report.config.get("n_layer", 0))}
                for key, report in sorted(reports.items()) if (depths := extrapolated_depths(report))}
    body = {"format": PROGRAMS_FORMAT, "jax_version": jax.__version__,
            "programs": {key: _slim(report) for key, report in sorted(reports.items())},
            "refused": dict(sorted((refused or {}).items())), "extrapolated": extended}
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(gzip.compress(json.dumps(body, sort_keys=True).encode(), mtime=0))
    temporary.replace(path)
    _BODY["key"] = None  # a file written within the clock's resolution of the last read is read again
    return path


class _Programs(Mapping[str, "Report"]):
    """Programs by setup key, each made a `xla_cost.Report` when first asked for (the
    file holds every case's kernels: a page of two cases reads two programs' of them)."""

    def __init__(self, programs: Mapping[str, Any]) -> None:
        self._raw = programs
        self._made: dict[str, Report] = {}

    def __getitem__(self, key: str) -> Report:
        from xla_cost.analysis.report import Report

        made = self._made.get(key)
        if made is None:
            made = self._made[key] = Report.from_dict(self._raw[key])
        return made

    def __iter__(self) -> Any:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, key: object) -> bool:
        return key in self._raw


def read_programs(path: str | pathlib.Path) -> Mapping[str, Report]:
    """The analysed programs written by `write_programs`, by setup key (each
    decoded when first looked up).

    Raises:
      InputError: no such file, or one of another format.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise InputError("the validation's analysed programs (reports/data/" + PROGRAMS_FILE + ")", str(path),
                         "Run python benchmarks/calibrate.py --programs to analyse them.")
    body = _body(path)
    if body.get("format") != PROGRAMS_FORMAT:
        raise InputError(f"programs of format {PROGRAMS_FORMAT}", repr(body.get("format")),
                         "Run python benchmarks/calibrate.py --programs to analyse them again.")
    return _Programs(body["programs"])


def read_refused(path: str | pathlib.Path) -> dict[str, str]:
    """The programs their compiler refused (setup key -> error), as `write_programs` wrote them;
    none where the file has no such list or does not exist."""
    path = pathlib.Path(path)
    if not path.is_file():
        return {}
    return dict(_body(path).get("refused") or {})


_BODY: dict[str, Any] = {"key": None, "body": None}


def _body(path: pathlib.Path) -> dict[str, Any]:
    """The programs file's parsed contents (about 50 MB of JSON, a second to parse), kept for the
    last file read while it is unchanged (its path, size and modification time): `read_programs`
    and `read_refused` of one file, and every page of one report run, parse it once. Read only: each
    `read_programs` makes its own reports from it."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if _BODY["key"] != key:
        _BODY["key"], _BODY["body"] = None, json.loads(gzip.decompress(path.read_bytes()))
        _BODY["key"] = key
    return _BODY["body"]


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


FIT_TOLERANCE = 1e-4
"""Where `fit_constants` stops: a step that changes the cost, or the constants, by less than this
share of them (scipy's ``ftol``, ``xtol``, ``gtol``; its default, 1e-8, took 2-4x the evaluations
to move the fourth figure of a constant: ``depth`` 199.91 against 199.89)."""

_PRICES: dict[tuple[Any, ...], tuple[Case, float]] = {}
_PRICES_OF: list[Any] = [None]


def _priced(case: Case, reports: Mapping[str, Report], constants: Calibration) -> float:
    """`price_case`'s figure, kept for the programs last priced: every leave-one-out fit starts from
    the same constants and takes the same first steps (a fifth of the held-out fits' prices)."""
    from xla_cost.timemodel.calibration import MEASURED

    if _PRICES_OF[0] is not reports:
        _PRICES.clear()
        _PRICES_OF[0] = reports
    key = (id(case), constants.values(), *(getattr(constants, name) for name in MEASURED))
    held = _PRICES.get(key)
    if held is None or held[0] is not case:
        held = _PRICES[key] = (case, price_case(case, reports, constants)[0])
    return held[1]


def fit_constants(cases: Sequence[Case], reports: Mapping[str, Report], start: Calibration | None = None
                  ) -> Calibration:
    """The global constants that best predict ``cases``: least squares in the
    logarithm of predicted over published, each paper's cases weighted by
    ``1 / sqrt(cases of the paper)`` (every paper counts alike), within
    `xla_cost.timemodel.calibration.BOUNDS` (searched in the logarithm of each
    share, linearly for the others). A constant no case's price depends on is
    held at its value in ``start`` (None: the committed constants), and the
    source says so.

    Raises:
      InputError: no cases.
    """
    import numpy as np
    from scipy.optimize import least_squares

    from xla_cost.timemodel.calibration import BOUNDS, FIELDS, MEASURED, Calibration, constants

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
                              for f, v in zip(FIELDS, x)}, **MEASURED)

    def residuals(x: Any) -> Any:
        calibration = made(x)
        return weights * np.asarray([_log_miss(c, _priced(c, reports, calibration)) for c in cases])

    # a constant no case's price depends on has a zero column in the fit's Jacobian: the fit leaves it where it
    # started (not driven to a bound), and the source says so. The fit stops once a step changes the cost or the
    # constants by less than `FIT_TOLERANCE`.
    result = least_squares(residuals, x0, bounds=(lows, highs), x_scale="jac", diff_step=1e-3, max_nfev=400,
                           ftol=FIT_TOLERANCE, xtol=FIT_TOLERANCE, gtol=FIT_TOLERANCE)
    free = [bool(np.max(np.abs(result.jac[:, i])) > 1e-12) for i in range(len(FIELDS))]
    x0 = np.where(free, result.x, x0)
    held = [f for f, ok in zip(FIELDS, free) if not ok]
    return dataclasses.replace(
        made(x0), fitted_on=tuple(c.name for c in cases),
        source="fitted by xla_cost.study.validation.fit_constants (python benchmarks/calibrate.py): least squares "
               "in log(predicted / published), every paper weighted alike"
               + (f"; held at the starting value, no case pricing it: {', '.join(held)}" if held else ""))


def held_out(cases: Sequence[Case], reports: Mapping[str, Report], start: Calibration | None = None,
             group: Callable[[Case], str] | None = None) -> tuple[dict[str, float], dict[str, Calibration]]:
    """Leave-one-group-out: for each group (by default a paper; ``group``: a
    case's group, e.g. its device generation), the constants fitted on every
    other group's cases and its own predicted with them. Returns (each case's
    held-out figure by name, the constants each group was predicted with)."""
    key = group or (lambda case: case.paper)
    groups = list(dict.fromkeys(key(c) for c in cases))
    figures: dict[str, float] = {}
    used: dict[str, Calibration] = {}
    from xla_cost.timemodel.calibration import constants as committed

    for name in groups:
        rest = [c for c in cases if key(c) != name]
        # with no other group there is nothing to fit on: the starting constants, and the page says so
        constants = fit_constants(rest, reports, start) if rest else dataclasses.replace(
            start or committed(), fitted_on=(), source="no other group among the cases: the starting constants")
        used[name] = constants
        for case in cases:
            if key(case) == name:
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
      by_generation: each case's figure with the constants fitted without its
        device generation (`xla_cost.study.cases.generation`).
      generation_constants: the constants each generation was predicted with.
      refused: the cases left out because their compiler refused a program
        (`REFUSED_RULE`), by name, with the error.
      unanalysed: the cases set aside because a program of theirs is not
        analysed yet (only where `validate` was asked to list them).
      extrapolated: the cases priced from a program extended by depth
        (`analyse_by_depth`: compiled at two and three blocks), by name.
    """

    cases: tuple[Case, ...]
    in_sample: tuple[float, ...]
    held_out: tuple[float, ...]
    bound: tuple[float, ...]
    constants: Calibration
    held_out_constants: Mapping[str, Calibration]
    estimates: tuple[tuple[StepEstimate, ...], ...]
    by_generation: tuple[float, ...] = ()
    generation_constants: Mapping[str, Calibration] = dataclasses.field(default_factory=dict)
    refused: Mapping[str, str] = dataclasses.field(default_factory=dict)
    unanalysed: tuple[str, ...] = ()
    extrapolated: tuple[str, ...] = ()

    @property
    def predicted(self) -> tuple[float, ...]:
        """The held-out figures: what the model predicts of a run it has not seen."""
        return self.held_out

    def errors(self, held_out: bool | str = True) -> tuple[float, ...]:
        """Each figure's relative error, ``predicted / published - 1``: held out by paper (True),
        in sample (False), or held out by device generation (``"generation"``)."""
        values = self.by_generation if held_out == "generation" else self.held_out if held_out else self.in_sample
        return tuple(p / c.published - 1 for c, p in zip(self.cases, values))

    def overhead_errors(self, held_out: bool | str = True) -> dict[str, tuple[float, float, float]]:
        """The ratio cases' scaling overheads (`Case.overhead`), by name: (published overhead,
        predicted overhead, ``predicted / published - 1``), with the figures of `errors`."""
        values = self.by_generation if held_out == "generation" else self.held_out if held_out else self.in_sample
        found = {}
        for case, value in zip(self.cases, values):
            published, predicted = case.overhead(case.published), case.overhead(value)
            if published is not None and predicted is not None and published > 0:
                found[case.name] = (published, predicted, predicted / published - 1)
        return found

    def residuals(self, held_out: bool = True) -> dict[str, float]:
        """Each published absolute case's ``log(predicted / published seconds)`` (the time its
        figure stands for: positive is predicted too slow), by name, held out by paper or in sample."""
        values = self.held_out if held_out else self.in_sample
        return {c.name: _log_miss(c, v) for c, v in zip(self.cases, values) if not c.is_ratio and not c.measured_here}

    def within(self, band: float = BAND, held_out: bool = True) -> float:
        """The share of cases within ``band``."""
        errors = self.errors(held_out)
        return sum(abs(e) <= band for e in errors) / len(errors) if errors else 0.0

    def devices(self) -> tuple[str, ...]:
        """The devices the cases ran on."""
        return tuple(dict.fromkeys(c.device for c in self.cases))

    def generations(self) -> tuple[str, ...]:
        """The device generations the cases ran on (`xla_cost.study.cases.generation`)."""
        return tuple(dict.fromkeys(c.generation for c in self.cases))

    def to_frame(self) -> pd.DataFrame:
        """One row per case."""
        import pandas as pd

        rows = []
        generations = self.by_generation or (math.nan,) * len(self.cases)
        for case, inside, out, bound, other in zip(self.cases, self.in_sample, self.held_out, self.bound, generations):
            rows.append({
                "case": case.name, "paper": case.paper, "device": case.device, "generation": case.generation,
                "quantity": case.quantity, "ratio": case.is_ratio,
                "published": case.published, "held_out": out, "held_out_error": out / case.published - 1,
                "generation_held_out": other, "generation_held_out_error": other / case.published - 1,
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
             constants: Calibration | None = None, refused: Mapping[str, str] | None = None,
             generations: bool = True, unanalysed: bool = False) -> Validation:
    """Every case priced in sample (``constants``; None: the committed ones),
    held out (refitted without its paper, and without its device generation)
    and as a bound.

    Args:
      programs: the analysed programs (a path written by `write_programs`, or
        reports by setup key, as `analyse_setups` gives them).
      cases: the cases (default `CASES`).
      constants: the in-sample constants (None: the committed ones).
      refused: the programs their compiler refused (key -> error; None: the
        file's, where ``programs`` is a path): a case with one is left out
        (`REFUSED_RULE`) and listed in `Validation.refused`.
      generations: hold each device generation out too (`Validation.by_generation`).
      unanalysed: set a case whose program is not analysed aside, named in
        `Validation.unanalysed` (False: refused, `price_case`'s error).
    """
    from xla_cost.timemodel.calibration import constants as committed

    if isinstance(programs, (str, pathlib.Path)):
        reports = read_programs(programs)
        refused = read_refused(programs) if refused is None else refused
    else:
        reports = dict(programs)
    left = refused_cases(cases, refused or {})
    cases = [c for c in cases if c.name not in left]
    waiting = tuple(c.name for c in cases if unanalysed and any(s.key() not in reports for s in c.setups))
    cases = [c for c in cases if c.name not in waiting]
    used = constants or committed()
    priced = [price_case(case, reports, used) for case in cases]
    bounds = [price_case(case, reports, used, bound=True)[0] for case in cases]
    figures, per_paper = held_out(cases, reports, used)
    by_generation, per_generation = held_out(cases, reports, used, group=lambda c: c.generation) if generations \
        else ({}, {})
    extended = tuple(c.name for c in cases if any(extrapolated_depths(reports[s.key()]) for s in c.setups))
    return Validation(tuple(cases), tuple(p for p, _ in priced), tuple(figures[c.name] for c in cases),
                      tuple(bounds), used, per_paper, tuple(s for _, s in priced),
                      tuple(by_generation[c.name] for c in cases) if generations else (), per_generation, left,
                      waiting, extended)


def refused_cases(cases: Sequence[Case], refused: Mapping[str, str]) -> dict[str, str]:
    """The cases one of whose programs its compiler refused (`REFUSED_RULE`): name -> the error."""
    return {c.name: refused[s.key()] for c in cases for s in c.setups if s.key() in refused}


def prediction_interval(result: Validation, coverage: float | None = None) -> PredictionInterval:
    """The prediction interval of ``result``'s held-out residuals
    (`xla_cost.timemodel.calibration.PredictionInterval.from_residuals`: the range around the
    predicted time that holds ``coverage`` percent of them, each paper weighted alike, and
    their median, the bias): ``log(predicted / published seconds)`` over the published
    absolute cases (`Validation.residuals`: TFLOP/s, MFU, tokens/s, seconds and days, each
    read as the step time it stands for; ratios and this project's own steps left out), each
    predicted with the constants fitted without its paper.

    Args:
      coverage: in percent (None: `xla_cost.timemodel.calibration.INTERVAL_COVERAGE`).

    Raises:
      InputError: fewer than two such cases.
    """
    from xla_cost.timemodel.calibration import INTERVAL_COVERAGE, PredictionInterval

    residuals = result.residuals(held_out=True)
    if len(residuals) < 2:
        raise InputError("at least two published absolute cases held out", str(len(residuals)),
                         "Validate on more published runs.")
    return PredictionInterval.from_residuals(
        residuals, {c.name: c.paper for c in result.cases if c.name in residuals},
        INTERVAL_COVERAGE if coverage is None else coverage,
        "log(predicted / published step time) of the published absolute cases (TFLOP/s, MFU, tokens/s, seconds, "
        "days) held out paper by paper (xla_cost.study.validation.prediction_interval)")
