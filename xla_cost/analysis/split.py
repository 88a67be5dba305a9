"""The measured split of one training step: forward, backward, update and each layer, from a trace.

The step runs as one program; a profiler trace of it
(`xla_cost.compiled.trace`) gives each HLO instruction's share of each traced
step's wall clock. Each instruction is attributed the way the counts are,
through the one mapper of `xla_cost.count.attribution`: its ``op_name``
(`xla_cost.compiled.trace.instruction_sources`) gives the pass
(`classify_pass`: ``jvp(...)`` forward, ``transpose(jvp(...))`` backward, the
rest the update) and the row (`op_name_path`, `owner`: the innermost module
holding parameters, else the `REMAINDER`). The time no instruction ran is the
``idle`` part: the runtime between thunks and the host between steps.

A part's seconds are the one-program step's median time (from repeated blocks
of steps, untraced) times its mean share of the traced steps, so that the
parts add up to the step time exactly and the rows to the parts; each has a
95% interval by bootstrap (blocks and traced steps resampled together, fixed
seed). The traced steps' own mean period is kept beside it: the trace's
overhead is their difference.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from xla_cost.choices import REMAINDER
from xla_cost.compiled import hlo
from xla_cost.compiled.trace import RunShares, Source, instruction_bytes, instruction_sources
from xla_cost.count.attribution import classify_pass, module_tree, op_name_path, owner, with_ancestors
from xla_cost.step import phases
from xla_cost.step.workload import Workload

__all__ = [
    "Bootstrap", "Spread", "bootstrap", "Attribution", "TracedProgram", "traced_program", "LayerTiming",
    "StepSplit", "split_step", "roofline", "PARTS", "IDLE",
]

IDLE = "idle"
"""The part of a traced step when no instruction of the program ran."""

PARTS: tuple[str, ...] = (*phases.SPLIT, IDLE)
"""What a traced step splits into: the passes (`xla_cost.step.phases.SPLIT`) and the idle time."""


@dataclasses.dataclass(frozen=True)
class Bootstrap:
    """How intervals are drawn: ``resamples`` bootstrap resamples, the central
    ``confidence`` of them, from a generator seeded with ``seed`` (deterministic)."""

    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0

    def bounds(self, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The interval's ends over axis 0 of ``draws`` (percentiles)."""
        tail = 100 * (1 - self.confidence) / 2
        low, high = np.percentile(draws, [tail, 100 - tail], axis=0)
        return low, high


@dataclasses.dataclass(frozen=True)
class Spread:
    """A measured time and its interval, in seconds."""

    seconds: float
    low_s: float
    high_s: float

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def bootstrap(samples: Sequence[float], how: Bootstrap = Bootstrap()) -> Spread:
    """The median of ``samples`` and the bootstrap interval of the median.

    Resamples ``samples`` with replacement ``how.resamples`` times and takes
    the percentiles of the resampled medians; one sample gives an interval of
    width 0.
    """
    values = np.asarray(samples, dtype=float)
    if values.size == 0:
        raise ValueError("Expected at least one sample to bootstrap, got none.")
    rng = np.random.default_rng(how.seed)
    draws = np.median(values[rng.integers(0, values.size, (how.resamples, values.size))], axis=1)
    low, high = how.bounds(draws)
    return Spread(float(np.median(values)), float(low), float(high))


@dataclasses.dataclass(frozen=True)
class Attribution:
    """What an instruction is attributed by.

    Attributes:
      roots: the model's root names (stripped from module paths).
      modules: the modules holding parameters and their ancestors.
      known: every module of the model (a parameter-free one gets its row;
        `xla_cost.count.attribution.module_tree`), that ``op_name`` entries
        are resolved against.
      inputs: the module of each program argument, by the name jax gives its
        entry parameter (``opt_state[0].mu['fc1']['kernel']`` -> ``fc1``).
    """

    roots: tuple[str, ...]
    modules: tuple[str, ...]
    known: frozenset[str] = frozenset()
    inputs: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, param_paths: Sequence[str], module_paths: Sequence[str] = (), roots: Sequence[str] = (),
           inputs: Mapping[str, str] | None = None) -> Attribution:
        modules = tuple(with_ancestors(p for p in param_paths if p))
        return cls(tuple(roots), modules, module_tree(modules, module_paths), dict(inputs or {}))

    @classmethod
    def of_workload(cls, workload: Workload, roots: Sequence[str] = (), phase: str = "train_step") -> Attribution:
        """The attribution of ``phase``'s program of ``workload`` (roots: its root name by default)."""
        names = phases.phase(phase).arguments
        leaves = jax.tree_util.tree_flatten_with_path(workload.phase_args(phase))[0]
        inputs = {
            names[path[0].idx] + jax.tree_util.keystr(tuple(path[1:])): module
            for (path, _), module in zip(leaves, workload.input_owners(phase)) if module
        }
        return cls.of(list(workload.param_paths), workload.module_paths, tuple(roots) or (workload.root_name,), inputs)

    def row(self, source: Source) -> str:
        """The module row of an instruction: `owner` of its `op_name_path`; the
        update's arithmetic outside every module, and an instruction whose name
        was inferred, go to the one module whose arguments it reads (as
        `xla_cost.count.attribution.attribute` follows the optimizer's data): a
        weight gradient XLA rewrote is its parameter's module's."""
        if not source.op_name:
            return REMAINDER
        row = owner(op_name_path(source.op_name, self.roots, self.known), self.modules, self.known)
        read = {self.inputs[name] for name in source.reads if name in self.inputs}
        if len(read) == 1 and (source.inferred or (row == REMAINDER and self.pass_of(source.op_name) == "update")):
            return owner(read.pop(), self.modules, self.known)
        return row

    @staticmethod
    def pass_of(op_name: str) -> str:
        """``forward``, ``backward``, or ``update`` for the rest (the step's
        optimizer, and what has no name)."""
        return classify_pass(op_name) or "update" if op_name else "update"


@dataclasses.dataclass(frozen=True)
class TracedProgram:
    """What the trace's instructions stand for: their sources and their bytes."""

    sources: Mapping[str, Source]
    bytes: Mapping[str, int]


def traced_program(hlo_text: str) -> TracedProgram:
    """The instructions' sources and bytes of a compiled program's text."""
    module = hlo.parse_module(hlo_text)
    return TracedProgram(instruction_sources(module), instruction_bytes(module))


@dataclasses.dataclass(frozen=True)
class LayerTiming:
    """One row's measured time in the one-program step.

    Attributes:
      path: the module path (the `REMAINDER` for what belongs to no module).
      seconds: per pass (``forward``, ``backward``, ``update``): the step's
        median time times the row's mean share of the traced steps.
      low_s, high_s: the 95% interval of the row's total.
      trace_s: its mean seconds per traced step, as traced.
      bytes: what its instructions read and write per step (compiled HLO
        shapes, every run of each); None if a shape could not be read.
    """

    path: str
    seconds: Mapping[str, float]
    low_s: float
    high_s: float
    trace_s: float
    bytes: int | None

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            **{f"{p}_s": self.seconds.get(p, 0.0) for p in dict.fromkeys([*phases.SPLIT, *self.seconds])},
            "total_s": self.total_s, "low_s": self.low_s, "high_s": self.high_s,
            "trace_s": self.trace_s, "bytes": self.bytes,
        }


@dataclasses.dataclass(frozen=True)
class StepSplit:
    """The one-program step split by a trace: the traced shares, and what they give.

    Attributes:
      columns: ``(row, pass)`` of each column of ``shares``; the last is
        ``(IDLE, IDLE)``.
      shares: per traced step, each column's share of the step's period.
      block_s: the untraced step times (one a block) whose median the shares
        are scaled to.
      traced_period_s: the traced steps' mean period (first op to the next
        step's first op).
      bytes: per row, what its instructions read and write in a step.
      pass_bytes: the same per pass (forward, backward, update, and ``other`` in a user's
        step); None where a shape could not be read.
      inferred_s, unnamed_s: mean traced seconds per step of instructions
        whose ``op_name`` was inferred from their neighbours, and of those
        left without one (counted in the update's remainder).
      how: the bootstrap's settings; an interval is drawn afresh from the
        same seed for any grouping of the columns (`spread`), so that every
        figure is the same for the same data.
    """

    columns: tuple[tuple[str, str], ...]
    shares: tuple[tuple[float, ...], ...]
    block_s: tuple[float, ...]
    traced_period_s: float
    bytes: Mapping[str, int | None] = dataclasses.field(default_factory=dict)
    pass_bytes: Mapping[str, int | None] = dataclasses.field(default_factory=dict)
    inferred_s: float = 0.0
    unnamed_s: float = 0.0
    how: Bootstrap = Bootstrap()

    @property
    def traced_steps(self) -> int:
        return len(self.shares)

    @property
    def step_s(self) -> float:
        """The untraced step's median time."""
        return float(np.median(self.block_s))

    @property
    def trace_overhead(self) -> float | None:
        """The traced period over the untraced step time, minus 1."""
        return self.traced_period_s / self.step_s - 1 if self.step_s > 0 else None

    @functools.cached_property
    def _draws(self) -> tuple[np.ndarray, np.ndarray]:
        """The resampled step medians, and the resampled traced steps' indices."""
        rng = np.random.default_rng(self.how.seed)
        blocks = np.asarray(self.block_s, dtype=float)
        steps = np.median(blocks[rng.integers(0, blocks.size, (self.how.resamples, blocks.size))], axis=1)
        return steps, rng.integers(0, self.traced_steps, (self.how.resamples, self.traced_steps))

    def spread(self, columns: Sequence[int]) -> Spread:
        """The seconds of the columns together and their interval: the step's
        median time times their mean share; blocks and traced steps resampled."""
        matrix = np.asarray(self.shares, dtype=float).reshape(self.traced_steps, len(self.columns))
        share = matrix[:, list(columns)].sum(axis=1)
        steps, picks = self._draws
        low, high = self.how.bounds(steps * share[picks].mean(axis=1))
        return Spread(self.step_s * float(share.mean()), float(low), float(high))

    def _indices(self, row: str | None = None, which: str | None = None) -> list[int]:
        return [i for i, (r, p) in enumerate(self.columns)
                if (row is None or r == row) and (which is None or p == which)]

    @property
    def passes(self) -> tuple[str, ...]:
        """The passes of the columns: `xla_cost.step.phases.SPLIT`, and ``other`` where a
        user's step has it (`xla_cost.step.phases.STEP_PARTS`)."""
        found = {p for _, p in self.columns}
        return tuple(p for p in phases.STEP_PARTS if p in phases.SPLIT or p in found)

    @functools.cached_property
    def parts(self) -> dict[str, Spread]:
        """`Spread` of each pass (`passes`), the idle time and ``grad`` (forward +
        backward): the passes and the idle time add up to the step's median time."""
        out = {p: self.spread(self._indices(which=p)) for p in (*self.passes, IDLE)}
        out["grad"] = self.spread(self._indices(which="forward") + self._indices(which="backward"))
        return out

    @property
    def trace_s(self) -> dict[str, float]:
        """Each part's mean seconds per traced step, as traced."""
        matrix = np.asarray(self.shares, dtype=float).reshape(self.traced_steps, len(self.columns))
        return {p: float(matrix[:, self._indices(which=p)].sum(axis=1).mean()) * self.traced_period_s
                for p in (*self.passes, IDLE)}

    def layers(self, rows: Sequence[str] | None = None) -> tuple[LayerTiming, ...]:
        """The measured rows, their seconds adding up to the passes'.

        Args:
          rows: the rows to group into (the report's, `xla_cost.Report.layers`,
            maybe merged to a depth): each module row goes to the longest of
            them that contains it, else to the `REMAINDER`. None: the module
            rows as traced, in the order the step first runs them.
        """
        traced = list(dict.fromkeys(r for r, p in self.columns if p != IDLE and r != REMAINDER))
        targets = [r for r in (rows if rows is not None else traced) if r != REMAINDER] + [REMAINDER]
        home = {r: _containing(r, targets) for r in [*traced, REMAINDER]}
        matrix = np.asarray(self.shares, dtype=float).reshape(self.traced_steps, len(self.columns))
        out = []
        for target in targets:
            members = [r for r, t in home.items() if t == target]
            indices = [i for i, (r, p) in enumerate(self.columns) if r in members and p != IDLE]
            total = self.spread(indices)
            sizes = [self.bytes.get(r, 0) for r in members]
            out.append(LayerTiming(
                path=target,
                seconds={p: self.step_s * float(matrix[:, [i for i in indices if self.columns[i][1] == p]]
                                                .sum(axis=1).mean()) for p in self.passes},
                low_s=total.low_s, high_s=total.high_s,
                trace_s=float(matrix[:, indices].sum(axis=1).mean()) * self.traced_period_s,
                bytes=None if None in sizes else sum(sizes),  # type: ignore[arg-type]
            ))
        return tuple(out)

    def table(
        self, layers: Sequence[Any] | None = None, peak_flops: float = 0.0, bandwidth: float = 0.0,
    ) -> list[dict[str, Any]]:
        """`layers` as raw records, the counts beside them: seconds per pass and
        in total with its interval, the share of the step, the counted FLOP
        (``layers``' rows, `xla_cost.LayerCosts`, whose paths the measured rows
        are grouped onto; None: the modules as traced, FLOP unknown), FLOP/s,
        bytes/s, the roofline on ``peak_flops`` and ``bandwidth`` and its bound."""
        counted = {layer.path: layer for layer in layers or ()}
        rows = []
        for row in self.layers([layer.path for layer in layers] if layers is not None else None):
            costs = counted.get(row.path)
            flops = None if costs is None else sum(getattr(costs, f"{p}_flops") for p in phases.SPLIT)
            roof, bound = roofline(flops, row.bytes, peak_flops, bandwidth)
            total = row.total_s
            rows.append({
                **row.to_dict(),
                "share": total / self.step_s if self.step_s > 0 else None,
                "flops": flops,
                "flops_per_s": None if flops is None or total <= 0 else flops / total,
                "bytes_per_s": None if row.bytes is None or total <= 0 else row.bytes / total,
                "roofline_s": roof,
                "bound": bound,
            })
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "parts": {name: spread.to_dict() for name, spread in self.parts.items()},
            "trace_s": self.trace_s,
            "traced_steps": self.traced_steps,
            "traced_period_s": self.traced_period_s,
            "trace_overhead": self.trace_overhead,
            "pass_bytes": dict(self.pass_bytes),
            "inferred_s": self.inferred_s,
            "unnamed_s": self.unnamed_s,
            "layers": [layer.to_dict() for layer in self.layers()],
        }


def roofline(flops: int | None, moved: int | None, peak_flops: float, bandwidth: float) -> tuple[float | None, str | None]:
    """``max(flops / peak, bytes / bandwidth)`` and which term is larger
    (``compute`` or ``memory``); (None, None) where a figure is unknown."""
    if flops is None or moved is None or peak_flops <= 0 or bandwidth <= 0:
        return None, None
    compute, memory = flops / peak_flops, moved / bandwidth
    return max(compute, memory), "compute" if compute >= memory else "memory"


def _containing(row: str, targets: Sequence[str]) -> str:
    """The longest of ``targets`` that is ``row`` or contains it, else the `REMAINDER`."""
    if row == REMAINDER:
        return REMAINDER
    found = [t for t in targets if t != REMAINDER and (row == t or row.startswith(t + "/"))]
    return max(found, key=len, default=REMAINDER)


def split_step(
    runs: Sequence[RunShares], program: TracedProgram, attribution: Attribution, blocks: Sequence[float],
    how: Bootstrap = Bootstrap(),
) -> StepSplit:
    """Splits the step whose traced executions are ``runs``.

    Args:
      runs: the traced steps (`xla_cost.compiled.trace.wall_shares`).
      program: the traced program's instructions (`traced_program`).
      attribution: the model's modules (`Attribution.of_workload`).
      blocks: the untraced step times (one per block of steps), whose median
        the shares are scaled to.
      how: the bootstrap's settings.

    Raises:
      ValueError: no traced step, or no block.
    """
    if not runs or not len(blocks):
        raise ValueError(f"Expected traced steps and step times, got {len(runs)} and {len(blocks)} instead.")
    columns: dict[tuple[str, str], int] = {}
    per_run: list[dict[int, float]] = []
    inferred, unnamed = [], []
    for run in runs:
        shares: dict[int, float] = {}
        guessed = missing = 0.0
        for op, seconds in run.seconds.items():
            source = program.sources.get(op, Source(""))
            column = columns.setdefault((attribution.row(source), attribution.pass_of(source.op_name)),
                                        len(columns))
            shares[column] = shares.get(column, 0.0) + seconds / run.period_s
            guessed += seconds if source.inferred else 0.0
            missing += seconds if not source.op_name else 0.0
        per_run.append(shares)
        inferred.append(guessed)
        unnamed.append(missing)
    width = len(columns) + 1  # the last column: idle
    matrix = []
    for run, shares in zip(runs, per_run):
        row = [shares.get(i, 0.0) for i in range(width - 1)] + [run.idle_s / run.period_s]
        matrix.append(tuple(row))
    sizes: dict[str, int | None] = {}
    passes: dict[str, int | None] = {}
    for op, count in runs[0].runs.items():
        source = program.sources.get(op, Source(""))
        size = program.bytes.get(op)
        for found, key in ((sizes, attribution.row(source)), (passes, attribution.pass_of(source.op_name))):
            before = found.get(key, 0)
            found[key] = None if before is None or size is None else before + count * size
    return StepSplit(
        columns=(*columns, (IDLE, IDLE)), shares=tuple(matrix), block_s=tuple(float(b) for b in blocks),
        traced_period_s=float(np.mean([run.period_s for run in runs])), bytes=sizes, pass_bytes=passes,
        inferred_s=float(np.mean(inferred)), unnamed_s=float(np.mean(unnamed)), how=how,
    )
