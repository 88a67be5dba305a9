"""The phases of a training step, declared once.

Every part of the analyzer (counting, compiling, timing, per-layer rows, the
report and its renderings) iterates over `DECLARED`; adding a phase is one
`Phase` here (and the phase function in `xla_cost.step.workload`) plus its test.

A phase is either a *program* (a function of the workload's arrays, traced to a
jaxpr, compiled and run) or *derived* from other phases by a linear `formula`
(``backward = grad - forward``), or both: ``train_step`` is derived as
``grad + update`` by default (XLA's figures for the fused step differ from the
sum by under 1e-6 in FLOP and about 0.2% in bytes, and compiling it costs as
much as the other three together) and compiled as a program of its own only on
request (``exact_train_step=True``), which exact train-step memory needs: the
buffers of two programs do not add up to those of their fusion.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = [
    "Phase",
    "DECLARED",
    "NAMES",
    "PROGRAMS",
    "SPLIT",
    "STEP_PARTS",
    "REPORT_ORDER",
    "PART_SUMMARIES",
    "phase",
    "programs",
    "derived",
    "combine",
]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Phase:
    """One phase of a training step.

    Attributes:
      name: the phase's name in reports (``forward``).
      summary: one line: what the phase computes.
      program: the `xla_cost.step.workload.Workload` attribute holding the phase
        function, or None for a phase that is only derived.
      arguments: the workload's argument trees the program takes, in order
        (names of `xla_cost.step.workload.Workload.trees`).
      formula: a derived phase's coefficients over other phases
        (``{"grad": 1, "forward": -1}``); empty for a program only.
      follow_data: attribute the program's work outside every module to the
        module whose arrays it computes on (the optimizer's arithmetic).
      results: the trees the program returns, in order, by the same names as
        ``arguments`` (``loss`` for the scalar loss): a sharded step gives
        each result the sharding of its tree (gradients split like the
        parameters, `xla_cost.parallel.sharding`).
    """

    name: str
    summary: str
    program: str | None = None
    arguments: tuple[str, ...] = ()
    formula: Mapping[str, int] = dataclasses.field(default_factory=dict)
    follow_data: bool = False
    results: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.program is None and not self.formula:
            raise ValueError(f"phase {self.name!r} needs a program, a formula or both")
        if self.program is not None and not (self.arguments and self.results):
            raise ValueError(f"phase {self.name!r}: a program needs its arguments and results")

    def is_program(self, exact: bool = False) -> bool:
        """Whether this phase is traced and compiled as a program of its own.

        Args:
          exact: compile phases that can be derived but also have a program
            (``train_step`` with ``exact_train_step=True``).
        """
        return self.program is not None and (not self.formula or exact)

    @property
    def formula_text(self) -> str:
        """The formula as people write it: ``grad - forward``."""
        text = ""
        for i, (name, k) in enumerate(self.formula.items()):
            sign = ("-" if k < 0 else "+") if i else ("-" if k < 0 else "")
            factor = "" if abs(k) == 1 else f"{abs(k)} * "
            text += (f" {sign} " if i else sign) + factor + name
        return text


_STEP_INPUTS = ("params", "state", "batch", "targets")

DECLARED: tuple[Phase, ...] = (
    Phase(
        "forward", "the loss of one batch", program="forward", arguments=_STEP_INPUTS,
        results=("loss", "state"),
    ),
    Phase(
        "backward", "the gradient computation alone: grad minus forward",
        formula={"grad": 1, "forward": -1},
    ),
    Phase(
        "grad", "the loss and its gradient with respect to the parameters",
        program="grad", arguments=_STEP_INPUTS, results=("loss", "grads", "state"),
    ),
    Phase(
        "update", "the optimizer's update of the parameters from the gradients",
        program="update", arguments=("grads", "opt_state", "params"), follow_data=True,
        results=("params", "opt_state"),
    ),
    Phase(
        "train_step", "grad and update in one program",
        program="train_step", arguments=("params", "opt_state", *_STEP_INPUTS[1:]),
        results=("params", "opt_state", "state", "loss"),
        formula={"grad": 1, "update": 1},
    ),
)
"""The phases in report order."""

NAMES: tuple[str, ...] = tuple(p.name for p in DECLARED)
"""The phases' names in report order."""

PROGRAMS: tuple[str, ...] = tuple(p.name for p in DECLARED if p.program is not None)
"""The phases that have a program (compiled and run when asked)."""

SPLIT: tuple[str, ...] = ("forward", "backward", "update")
"""The parts one step splits into, without overlap: the per-layer columns and
the measured time shares (seed 000's 23% / 74% / 3%)."""

STEP_PARTS: tuple[str, ...] = (*SPLIT, "other")
"""The parts a user's own train step splits into (`xla_cost.analyze_step`),
which add up to the whole step: `SPLIT` and ``other``, what neither feeds the
loss nor consumes the gradients (`xla_cost.count.step_parts`)."""

REPORT_ORDER: tuple[str, ...] = (*NAMES[:NAMES.index("train_step")], STEP_PARTS[-1],
                                 *NAMES[NAMES.index("train_step"):])
"""Every phase a report may hold, in report order: `NAMES`, with a user's step's
``other`` (`STEP_PARTS`) before the train step it is part of."""

PART_SUMMARIES: dict[str, str] = {
    "forward": "the loss and what it needs: equations under jvp, not transposed",
    "backward": "the gradients: equations under transpose, and forward work only they read",
    "update": "what consumes the gradients, up to the new parameters and optimizer state",
    "other": "the rest: metrics, schedules, data reshapes",
}
"""One line per part of a user's step: what it holds."""

_BY_NAME = {p.name: p for p in DECLARED}


def _check() -> None:
    for p in DECLARED:
        unknown = set(p.formula) - set(_BY_NAME)
        if unknown:
            raise ValueError(f"phase {p.name!r}: its formula names unknown phases {sorted(unknown)}")
        if any(not _BY_NAME[q].is_program() for q in p.formula):
            raise ValueError(f"phase {p.name!r}: a formula may only name programs")
    if set(SPLIT) - set(_BY_NAME):
        raise ValueError(f"SPLIT names unknown phases: {sorted(set(SPLIT) - set(_BY_NAME))}")


_check()


def phase(name: str) -> Phase:
    """The declared `Phase` called ``name``.

    Raises:
      KeyError: no such phase (the message lists them).
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"Expected a phase in {', '.join(NAMES)}, got {name!r} instead.") from None


def programs(exact: bool = False) -> tuple[Phase, ...]:
    """The phases compiled (or traced) as programs of their own, in report order."""
    return tuple(p for p in DECLARED if p.is_program(exact))


def derived(exact: bool = False) -> tuple[Phase, ...]:
    """The phases computed from others by their formula, in report order."""
    return tuple(p for p in DECLARED if not p.is_program(exact))


def combine(
    formula: Mapping[str, int],
    values: Mapping[str, T],
    add: Callable[[Sequence[tuple[int, T]]], T] | None = None,
) -> Any:
    """The linear combination ``sum(k * values[name])`` over ``formula``.

    Args:
      formula: coefficient per phase name.
      values: the value of each phase named (numbers, None for unknown, or
        any type ``add`` handles).
      add: combines ``[(coefficient, value), ...]``; default: numbers, where
        an unknown (None) or missing term makes the result unknown.
    """
    terms = [(k, values.get(name)) for name, k in formula.items()]
    if add is not None:
        return add(terms)
    if any(v is None for _, v in terms):
        return None
    return sum(k * v for k, v in terms)  # type: ignore[operator]
