"""The CPU proxy beside the target's own program: per phase, each figure and its ratio, and why they differ.

`compare` takes two reports of one step: one compiled for the default backend
(the CPU proxy on a machine without an accelerator) and one compiled for a
target by its own compiler (``analyze(..., target="h100")``; both at once with
``compare_cpu=True``, `xla_cost.Report.cpu`). Each phase gets its FLOP, bytes
accessed, kernels, library calls, temporaries and, for the train step, the
step's peak memory on both sides, with target / CPU ratios; the reasons
(`explain`) name what makes the two programs differ, each with the figures
that show it, and only where those figures show it:

* library calls: the target's program hands matrix products and convolutions
  to libraries (cuBLAS, cuDNN custom calls), whose FLOP are counted from their
  operands;
* fusion: the two compilers launch different numbers of kernels, and move
  different bytes;
* the CPU's bfloat16 emulation: XLA's CPU compiler computes bfloat16 in
  float32, adding converts (counted as FLOP) and moving wider buffers;
* layouts and padding on a TPU: arrays tiled in 8 x 128 blocks, so the same
  arguments take more bytes;
* random numbers: jax's threefry hash, whose 20 rounds XLA's CPU program runs
  as a loop whose body its cost analysis counts once (the jaxpr count follows
  it), while a GPU's or TPU's compiler unrolls the loop and counts every round,
  and a GPU may compute the bits again in the backward pass rather than keep
  the mask;
* work the target's compiler adds over the jaxpr count and the CPU's, per
  pass, beyond the random numbers; with fewer temporaries than the CPU's, as rematerialisation by the
  compiler would show, but so would algorithms that do more arithmetic (a
  V100's input gradients of strided convolutions over zero-dilated inputs,
  split-K gemms' partial sums, padded tiles): the rows cannot tell them
  apart, and the reason says so.

The rules read rows of figures, not reports, so a page applies them to rows
read back from a CSV (`TargetComparison.of_rows`). A report's type is not
imported here: `xla_cost.analysis.report` renders the comparison.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.count.random_rules import THREEFRY_UNROLLED_WORD_OPS, THREEFRY_WORD_OPS
from xla_cost.errors import InputError
from xla_cost.present.markdown import markdown_table
from xla_cost.present.text import TextTable, render, resolve_width
from xla_cost.present.units import bytes_column, count, flop_column, ratio, si, size

if TYPE_CHECKING:  # pandas (0.3 s to import) loads where a table is made, not with the analysis
    import pandas as pd

__all__ = [
    "FIGURES",
    "SHOWN",
    "PhaseComparison",
    "TargetComparison",
    "compare",
    "explain",
    "phase_figures",
    "comparison_frame",
    "comparison_title",
    "KERNEL_CHANGE",
    "ADDED_WORK",
    "BYTES_CHANGE",
    "calls_label",
]

FIGURES: tuple[str, ...] = (
    "flops", "bytes_accessed", "kernels", "library_calls", "argument_bytes", "temp_bytes", "peak_bytes",
    "jaxpr_flops", "random_flops",
)
"""The figures of one side of a phase (`phase_figures`): the phase's FLOP,
bytes accessed, kernel launches and library calls (`xla_cost.PhaseCosts`), its
program's arguments and temporaries (``memory_analysis()``), the step's peak
(the train step's row only: `xla_cost.MemoryBreakdown.peak`, with
``memory=True``), the jaxpr's FLOP count of the phase (the same program
before either compiler) and the part of it that is the random-number
generator's (`xla_cost.PhaseCosts.random_flops`)."""

SHOWN: tuple[str, ...] = ("flops", "bytes_accessed", "kernels", "library_calls", "temp_bytes", "peak_bytes")
"""The figures the comparison's table shows (`TargetComparison.to_frame` has them all)."""

KERNEL_CHANGE = 0.05
"""Kernel counts that differ by less than this share are not called a difference in fusion."""

ADDED_WORK = 0.001
"""A target program's FLOP above the jaxpr's count and the CPU's by more than this share is work its compiler added."""

BYTES_CHANGE = 0.05
"""Bytes accessed that differ by less than this share are not called the CPU's wider bfloat16 buffers."""

_STEP = "train_step"
_PROGRAMS = ("grad", "forward", "update")  # the compiled programs whose memory the rules read, first the largest
_PASSES = ("forward", "backward", "update")  # where added work is located


@dataclasses.dataclass(frozen=True)
class PhaseComparison:
    """One phase on both sides.

    Attributes:
      phase: the phase (``forward``, ``backward``, ``grad``, ``update``, ``train_step``).
      cpu: the CPU proxy's figures (`FIGURES`; None: unknown or not read).
      target: the target program's figures.
    """

    phase: str
    cpu: Mapping[str, int | None]
    target: Mapping[str, int | None]

    def ratio(self, figure: str) -> float | None:
        """The target's figure over the CPU's (None where either is unknown or the CPU's is 0)."""
        return _ratio(self.target.get(figure), self.cpu.get(figure))


@dataclasses.dataclass(frozen=True)
class TargetComparison:
    """A step compiled by the CPU proxy and by a target's own compiler, side by side.

    Attributes:
      model: the model's name.
      target: the compile target (``h100``, ``tpu-v5e:2x2``).
      platform: the target's backend (``gpu``, ``tpu``).
      dtype: the computation dtype of both runs.
      rows: one `PhaseComparison` per phase, in report order.
      reasons: why the figures differ, each with its figures (`explain`).
      baseline: the backend the proxy compiled for (``cpu``; a machine with
        an accelerator compiles the proxy for it).
    """

    model: str
    target: str
    platform: str
    dtype: str
    rows: tuple[PhaseComparison, ...]
    reasons: tuple[str, ...] = ()
    baseline: str = "cpu"

    @classmethod
    def of_rows(
        cls, model: str, target: str, platform: str, dtype: str, rows: Sequence[PhaseComparison],
        baseline: str = "cpu",
    ) -> TargetComparison:
        """A comparison of ``rows`` with its reasons (`explain`): how a page
        builds one from rows read back from a CSV.

        Args:
          model: the model's name.
          target: the compile target's name.
          platform: the target's backend (``gpu``, ``tpu``).
          dtype: the computation dtype.
          rows: the phases' figures on both sides.
          baseline: the proxy's backend.
        """
        rows = tuple(rows)
        return cls(model, target, platform, dtype, rows, explain(rows, target=target, platform=platform,
                                                                 dtype=dtype, baseline=baseline), baseline)

    @property
    def phases(self) -> tuple[str, ...]:
        """The phases compared, in report order."""
        return tuple(r.phase for r in self.rows)

    def row(self, phase: str) -> PhaseComparison:
        """The row of ``phase``.

        Raises:
          InputError: no such phase in the comparison.
        """
        found = next((r for r in self.rows if r.phase == phase), None)
        if found is None:
            raise InputError(f"a phase of the comparison ({', '.join(self.phases)})", repr(phase),
                             "Use one of those phases.")
        return found

    def to_frame(self) -> pd.DataFrame:
        """Raw numbers, one row per phase: ``cpu_<figure>``, ``target_<figure>`` and
        ``<figure>_ratio`` (target / CPU) for every figure of `FIGURES`; missing: NA."""
        import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
        records = []
        for r in self.rows:
            record: dict[str, Any] = {"phase": r.phase}
            for figure in FIGURES:
                record[f"cpu_{figure}"] = r.cpu.get(figure)
                record[f"target_{figure}"] = r.target.get(figure)
            records.append(record)
        frame = pd.DataFrame(records).set_index("phase").astype("Int64")
        for figure in FIGURES:
            frame[f"{figure}_ratio"] = pd.array([r.ratio(figure) for r in self.rows], dtype="Float64")
        return frame

    def blocks(self) -> list[str | TextTable]:
        """The table and the reasons as `xla_cost.present.text.render` lays them out (a report's text adds them)."""
        reasons = ["why the programs differ:", *(f"- {r}" for r in self.reasons)] if self.reasons else []
        return [TextTable(comparison_frame(self), comparison_title(self)), *reasons]

    def to_table(self, width: int | None = None) -> str:
        """Plain text for terminals: the table, then the reasons.

        Args:
          width: the widest a line may be (None: the terminal's, when stdout is one).
        """
        return render(self.blocks(), resolve_width(width))

    def to_markdown(self) -> str:
        """A markdown section: the title, the table, the reasons as a list."""
        lines = [comparison_title(self), "", markdown_table(comparison_frame(self)), ""]
        if self.reasons:
            lines += ["Why the programs differ:", "", *(f"- {r}" for r in self.reasons)]
        return "\n".join(lines).rstrip() + "\n"

    def _repr_markdown_(self) -> str:
        """How a notebook shows the comparison: `to_markdown`."""
        return self.to_markdown()

    def __str__(self) -> str:
        return self.to_table()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict: the names, each phase's figures on both sides, the reasons."""
        return {
            "model": self.model, "target": self.target, "platform": self.platform, "dtype": self.dtype,
            "baseline": self.baseline,
            "phases": {r.phase: {"cpu": dict(r.cpu), "target": dict(r.target),
                                 "ratios": {f: r.ratio(f) for f in FIGURES}} for r in self.rows},
            "reasons": list(self.reasons),
        }


def phase_figures(report: Any, phase: str) -> dict[str, int | None]:
    """The figures (`FIGURES`) of ``phase`` in ``report`` (a `xla_cost.Report`):
    the step's peak on the train step's row alone, where the memory was broken down."""
    costs = report.phases[phase]
    breakdown = report.memory_breakdown
    return {
        "flops": costs.flops,
        "bytes_accessed": costs.bytes_accessed,
        "kernels": costs.kernels,
        "library_calls": costs.library_calls,
        "argument_bytes": costs.memory.argument_bytes,
        "temp_bytes": costs.memory.temp_bytes,
        "peak_bytes": breakdown.peak if phase == _STEP and breakdown is not None else None,
        "jaxpr_flops": costs.jaxpr_flops,
        "random_flops": costs.random_flops,
    }


def compare(cpu: Any, target: Any) -> TargetComparison:
    """The step of two `xla_cost.Report`s side by side: the CPU proxy's and a target's.

    Every phase both reports have, each figure of `FIGURES` on both sides and
    its ratio (target / CPU), and the reasons the two programs differ
    (`explain`). ``analyze(..., target=..., compare_cpu=True)`` gives both
    reports at once: ``compare(report.cpu, report)`` (`xla_cost.Report.comparison`).

    Args:
      cpu: the report compiled for the default backend (``target`` None).
      target: the same step's report compiled for a target (``target="h100"``).

    Raises:
      InputError: ``cpu`` has a target, ``target`` has none, or the two
        reports are not of one step (model, batch, optimizer, dtype).
    """
    for name, report in (("cpu", cpu), ("target", target)):
        if not all(hasattr(report, key) for key in ("phases", "target", "model", "memory_breakdown")):
            raise InputError(f"{name} as an xla_cost.Report", type(report).__name__,
                             "Pass the reports analyze() returns: compare(report.cpu, report).")
    if cpu.target is not None:
        raise InputError("cpu as a report compiled for the default backend (no target)",
                         f"one compiled for {cpu.target}", "Analyse it without target=, or use report.cpu.")
    if target.target is None:
        raise InputError("target as a report compiled for a target (analyze(..., target='h100'))",
                         f"one compiled for the default backend ({target.backend})",
                         "Analyse it with target=..., and compare_cpu=True for both at once.")
    mine = (cpu.model, cpu.batch_size, cpu.optimizer, cpu.dtype)
    theirs = (target.model, target.batch_size, target.optimizer, target.dtype)
    if mine != theirs:
        raise InputError("two reports of one step (model, batch, optimizer, dtype)",
                         f"{mine} against {theirs}", "Analyse the same step twice, with and without target=.")
    rows = [PhaseComparison(p, phase_figures(cpu, p), phase_figures(target, p))
            for p in target.phase_names if p in cpu.phases]
    return TargetComparison.of_rows(cpu.model, target.target, target.backend, target.dtype, rows, cpu.backend)


# ---------------------------------------------------------------------------
# The reasons


def explain(
    rows: Sequence[PhaseComparison], *, target: str, platform: str, dtype: str, baseline: str = "cpu",
) -> tuple[str, ...]:
    """Why the target's program differs from the CPU proxy's, each reason with
    the figures that show it, and only where they show it (every rule below
    needs both of its figures known):

    * library calls: a GPU target whose train step makes library calls
      (custom calls: cuBLAS, cuDNN), which the proxy does not make;
    * fusion: the train step's kernels differ by `KERNEL_CHANGE` or more
      (named with the bytes accessed of both);
    * bfloat16 emulation: a bfloat16 step on a CPU proxy whose FLOP exceed the
      target's by more than `ADDED_WORK` of the jaxpr count, or whose bytes
      exceed the target's by `BYTES_CHANGE` or more;
    * TPU layouts and padding: a TPU program whose arguments (the same arrays
      on both sides) take more bytes than the CPU's;
    * random numbers: a step that draws random bits (the jaxpr's
      ``random_flops``) whose target passes count more than the CPU's, up to
      what the hash unrolled counts (`THREEFRY_UNROLLED_WORD_OPS` operations a
      word where the CPU counts `THREEFRY_WORD_OPS`) for the bits the pass
      draws, and for the backward pass the forward's bits drawn once more
      (`random_work`);
    * added work: a pass (forward, backward, update) whose FLOP, less the
      random numbers' share, are above both
      the jaxpr count and the CPU's by more than `ADDED_WORK`; where the grad
      program also keeps fewer temporaries than the CPU's, rematerialisation
      is named as one candidate among algorithms that do more arithmetic, never
      as the cause (the rows cannot tell them apart: a V100's ResNet-50
      backward pass is 14% over the jaxpr count with 0.55× the CPU's
      temporaries, from convolutions over zero-dilated inputs, not from
      recomputation).

    Args:
      rows: the phases' figures on both sides (`PhaseComparison`).
      target: the target's name, as the reasons call it.
      platform: the target's backend: ``gpu`` or ``tpu``.
      dtype: the computation dtype.
      baseline: the proxy's backend (the bfloat16 rule is the CPU's alone).
    """
    by_phase = {r.phase: r for r in rows}
    step = by_phase.get(_STEP)
    programs = [by_phase[p] for p in _PROGRAMS if p in by_phase]
    found: list[str] = []
    if step is not None:
        found += _library_reason(step, target, platform)
        found += _fusion_reason(step, target)
        if dtype == "bfloat16" and baseline == "cpu":
            found += _bfloat16_reason(step, target)
    if platform == "tpu":
        found += _padding_reason(programs, target)
    explained = random_work(by_phase)
    found += _random_reason(by_phase, explained, target)
    found += _added_work_reason(by_phase, target, explained)
    return tuple(found)


UNROLLED = THREEFRY_UNROLLED_WORD_OPS / THREEFRY_WORD_OPS
"""How many times the CPU's count of a threefry hash a compiler that unrolls its loop counts (117 / 41)."""


def random_work(rows: Mapping[str, PhaseComparison]) -> dict[str, int]:
    """Per pass, the target's FLOP over the CPU's that the random-number generator accounts for.

    The jaxpr counts the threefry hash as XLA's CPU program does, its loop body
    once (``random_flops``); a compiler that unrolls the loop counts up to
    `UNROLLED` times that. A pass's excess over the CPU's is the generator's up
    to (`UNROLLED` - 1) x the random FLOP it draws, and for the backward pass
    (which draws none: the forward's mask is a residual) up to `UNROLLED` x the
    forward's, the bits drawn once more where a fusion recomputes them rather
    than keep the mask. Passes without random numbers, or not above the CPU, are
    left out.
    """
    drawn = {p: _side(rows.get(p), "random_flops") for p in _PASSES}
    explained = {}
    for phase in _PASSES:
        row = rows.get(phase)
        if row is None:
            continue
        theirs, mine = row.target.get("flops"), row.cpu.get("flops")
        if theirs is None or mine is None or theirs <= mine:
            continue
        allowance = (UNROLLED - 1) * (drawn[phase] or 0)
        if phase == "backward":
            allowance += UNROLLED * (drawn["forward"] or 0)
        if allowance > 0:
            explained[phase] = int(min(theirs - mine, allowance))
    return explained


def _side(row: PhaseComparison | None, figure: str) -> int | None:
    if row is None:
        return None
    value = row.target.get(figure)
    return row.cpu.get(figure) if value is None else value


def _random_reason(by_phase: Mapping[str, PhaseComparison], explained: Mapping[str, int], target: str) -> list[str]:
    shown = {p: n for p, n in explained.items() if _beyond(by_phase[p], n)}
    if not shown:
        return []
    drawn = _side(by_phase.get("forward"), "random_flops") or 0
    text = (f"random numbers: the step draws random bits with jax's threefry hash ({si(drawn)} FLOP in the "
            f"forward pass as the jaxpr counts them, as XLA's CPU program does: it runs the hash's 20 rounds as a "
            f"loop of 5 trips whose body its cost analysis counts once, {THREEFRY_WORD_OPS} operations a 32-bit "
            f"word); the {target} compiler unrolls the loop and counts every round ({THREEFRY_UNROLLED_WORD_OPS} "
            f"operations a word, up to {ratio(UNROLLED, 3)}× the CPU's count)")
    if "backward" in shown:
        text += (" and computes the bits again in the backward pass, in the fusion that reads the mask, "
                 "rather than keeping the mask")
    parts = []
    for phase in _PASSES:
        if phase in shown:
            row = by_phase[phase]
            extra = row.target["flops"] - row.cpu["flops"]  # type: ignore[operator]
            over = _signed(extra / row.cpu["flops"])  # type: ignore[operator]
            parts.append(f"{phase}: all of its {si(extra)} FLOP ({over}) over the CPU's" if shown[phase] == extra
                         else f"{phase}: {si(shown[phase])} of its {si(extra)} FLOP ({over}) over the CPU's")
    return [text + ": " + ", ".join(parts) + " (integer arithmetic of the generator, not the model's)"]


def _beyond(row: PhaseComparison, explained: int) -> bool:
    """Whether ``explained`` FLOP of a pass are more than `ADDED_WORK` of its jaxpr count (worth a word)."""
    jaxpr = row.target.get("jaxpr_flops") or row.cpu.get("jaxpr_flops")
    return bool(jaxpr) and explained / jaxpr > ADDED_WORK  # type: ignore[operator]


def _library_reason(step: PhaseComparison, target: str, platform: str) -> list[str]:
    calls, own = step.target.get("library_calls"), step.cpu.get("library_calls")
    if platform != "gpu" or not calls or (own is not None and own >= calls):  # none, unknown, or no difference
        return []
    flop = step.ratio("flops")
    return [
        f"library calls: the {target} train step hands {calls:,} operations to libraries (custom calls: "
        f"cuBLAS gemms, cuDNN convolutions) that the CPU program computes in its own kernels"
        + ("" if own is None else f" (it makes {own:,})")
        + "; their FLOP are counted from their operands, as XLA's analysis leaves them out"
        + ("" if flop is None else f" (train-step FLOP {ratio(flop, 4)}× the CPU's)")
    ]


def _fusion_reason(step: PhaseComparison, target: str) -> list[str]:
    mine, theirs = step.cpu.get("kernels"), step.target.get("kernels")
    change = step.ratio("kernels")
    if change is None or abs(change - 1) < KERNEL_CHANGE:
        return []
    how = "fuses the step into fewer kernels" if change < 1 else "splits the step into more kernels"
    text = (f"fusion: the {target} compiler {how}: {theirs:,} kernel launches per train step against the "
            f"CPU's {mine:,} ({ratio(change, 2)}×)")
    moved = step.ratio("bytes_accessed")
    if moved is not None:
        text += (f"; bytes accessed {size(step.target['bytes_accessed'])} against {size(step.cpu['bytes_accessed'])}"
                 f" ({ratio(moved, 2)}×)")
    return [text]


def _bfloat16_reason(step: PhaseComparison, target: str) -> list[str]:
    jaxpr = step.cpu.get("jaxpr_flops")
    mine, theirs = step.cpu.get("flops"), step.target.get("flops")
    parts = []
    if None not in (jaxpr, mine, theirs) and jaxpr and (mine - theirs) / jaxpr > ADDED_WORK:  # type: ignore[operator]
        parts.append(f"its train-step FLOP are {_signed(mine / jaxpr - 1)} over the jaxpr count against the "  # type: ignore[operator]
                     f"{target}'s {_signed(theirs / jaxpr - 1)} (the converts, counted as FLOP)")  # type: ignore[operator]
    moved = step.ratio("bytes_accessed")
    if moved is not None and 1 / moved - 1 >= BYTES_CHANGE:
        parts.append(f"its bytes accessed are {ratio(1 / moved, 2)}× the {target}'s, float32 buffers where "
                     "the target moves bfloat16 among them")
    if not parts:
        return []
    return ["bfloat16 on the CPU: XLA's CPU compiler computes bfloat16 arithmetic in float32, converting "
            "around each operation: " + "; ".join(parts)]


def _padding_reason(programs: Sequence[PhaseComparison], target: str) -> list[str]:
    for row in programs:
        grown = row.ratio("argument_bytes")
        if grown is None or grown <= 1:
            continue
        extra = row.target["argument_bytes"] - row.cpu["argument_bytes"]  # type: ignore[operator]
        text = (f"layouts and padding on the TPU: arrays are laid out in tiles of 8 × 128 elements (32-bit; "
                f"narrower types pack more rows), dimensions that are not multiples of them padded: the same "
                f"arguments of the {row.phase} program take {size(extra)} more on the {target} "
                f"({size(row.target['argument_bytes'])} against the CPU's {size(row.cpu['argument_bytes'])}, "
                f"{_signed(grown - 1)})")
        temp = row.ratio("temp_bytes")
        if temp is not None and temp > 1:
            text += f"; its temporaries {ratio(temp, 2)}×"
        return [text]
    return []


def _added_work_reason(
    by_phase: Mapping[str, PhaseComparison], target: str, explained: Mapping[str, int] | None = None,
) -> list[str]:
    added = []
    explained = explained or {}
    for phase in _PASSES:
        row = by_phase.get(phase)
        if row is None:
            continue
        theirs, jaxpr, mine = row.target.get("flops"), row.target.get("jaxpr_flops"), row.cpu.get("flops")
        if theirs is not None:
            theirs -= explained.get(phase, 0)  # the random numbers' share, named by `_random_reason`
        if theirs is None or mine is None or not jaxpr or theirs / jaxpr - 1 <= ADDED_WORK or \
                theirs / mine - 1 <= ADDED_WORK:  # above the jaxpr, and above the proxy: a difference to explain
            continue
        added.append(f"{phase} {si(theirs - jaxpr)} FLOP ({_signed(theirs / jaxpr - 1)}; "
                     f"{_signed(theirs / mine - 1)} over the CPU's)")
    if not added:
        return []
    grad = by_phase.get("grad")
    temp = None if grad is None else grad.ratio("temp_bytes")
    text = f"work the {target} compiler adds over the jaxpr count: " + ", ".join(added)
    if any(explained.get(p) for p in _PASSES):
        text = text.replace(" over the jaxpr count", " over the jaxpr count, beyond the random numbers", 1)
    if temp is not None and temp < 1:
        return [text + f"; its grad program keeps {ratio(temp, 2)}× the CPU's temporaries, as rematerialisation by "
                "the compiler (recomputing rather than keeping) would, but algorithms that do more arithmetic "
                "(convolutions over zero-dilated or padded inputs, split-K gemms' partial sums) add FLOP too: these "
                "figures do not tell which"]
    return [text + " (convolutions over zero-dilated or padded inputs, split-K gemms' partial sums and padded tiles "
            "add such work; these figures do not tell which)"]


def _signed(share: float) -> str:
    return f"{share:+.2%}" if abs(share) < 0.01 else f"{share:+.1%}"


def _ratio(a: int | float | None, b: int | float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


# ---------------------------------------------------------------------------
# The table


_LABELS = {"flops": "FLOP", "bytes_accessed": "bytes", "kernels": "kernels", "library_calls": "library calls",
           "temp_bytes": "temp", "peak_bytes": "peak"}
_RATIOS = ("flops", "bytes_accessed", "kernels", "temp_bytes", "peak_bytes")


def calls_label(platform: str) -> str:
    """What a target's custom calls are called: ``library calls`` on a GPU (cuBLAS,
    cuDNN), ``custom calls`` elsewhere (a TPU's are its own kernels, gathers' index packing)."""
    return "library calls" if platform == "gpu" else "custom calls"


def comparison_title(comparison: TargetComparison) -> str:
    """The title line of the comparison's table."""
    return (f"{comparison.target}'s own compiler against the {comparison.baseline.upper()} proxy "
            "(× : target / proxy; peak: the train step compiled as one program)")


def comparison_frame(comparison: TargetComparison) -> pd.DataFrame:
    """The comparison's table, formatted: per phase and figure of `SHOWN`, the
    proxy's, the target's and their ratio, each pair of columns in one unit
    where its figures allow (``—``: unknown, or not a program of its own);
    library calls on the side that read them, the peak where the memory was
    broken down."""
    import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
    base, name = comparison.baseline.upper(), comparison.target
    columns: dict[str, list[str]] = {}
    for figure in SHOWN:
        mine = [r.cpu.get(figure) for r in comparison.rows]
        theirs = [r.target.get(figure) for r in comparison.rows]
        if all(v is None for v in (*mine, *theirs)):
            continue
        if figure == "flops":
            unit, show = flop_column([*mine, *theirs])
        elif figure.endswith("_bytes") or figure == "bytes_accessed":
            unit, show = bytes_column([*mine, *theirs])
        else:
            unit, show = "", count
        label = (calls_label(comparison.platform) if figure == "library_calls" else _LABELS[figure]) + (
            f" ({unit})" if unit and unit != "FLOP" else "")
        for side, values in ((base, mine), (name, theirs)):
            if figure == "library_calls" and all(v is None for v in values):
                continue  # not read on that side (the CPU's)
            columns[f"{label} {side}"] = ["—" if v is None else show(v) for v in values]
        if figure in _RATIOS:
            columns[f"{_LABELS[figure]} ×"] = ["—" if (x := r.ratio(figure)) is None else ratio(x, 3)
                                                for r in comparison.rows]
    return pd.DataFrame(columns, index=pd.Index(comparison.phases, name="phase"))
