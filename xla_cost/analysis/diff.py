"""Two analyses side by side: what changed between two `xla_cost.Report`s.

`diff` compares two reports (or the JSON files ``xla-cost analyze ... --format
json`` wrote) phase by phase and layer by layer: a remat policy against
another, float32 against bfloat16, batch 4 against 8, a code change. Each
figure is given for A and B with the change ``B - A`` and the ratio ``B / A``;
the layers are ranked by the absolute change of their FLOP (forward +
backward + update), largest first. Data stays raw in `ReportDiff`; the
renderings at the bottom format it.

Reports of different models, batch sizes, optimizers or dtypes are compared
(that is what a diff is for) with the differences named in the header; only
inputs that are not reports, and two reports without a phase in common, are
refused.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from xla_cost.analysis.report import Report
from xla_cost.analysis.report_tables import describe
from xla_cost.count.layers import LayerCosts
from xla_cost.errors import InputError, quoted
from xla_cost.present.markdown import pipe_table
from xla_cost.present.text import TextTable, render, resolve_width
from xla_cost.present.units import UNKNOWN, count, duration, ratio, si

__all__ = ["diff", "ReportDiff", "PhaseChange", "LayerChange", "FIGURES", "RANKED_BY"]

FIGURES: dict[str, str] = {
    "flops": "FLOP",
    "model_flops": "model FLOP",
    "hardware_flops": "hardware FLOP",
    "transcendentals": "transcendentals",
    "bytes_accessed": "bytes accessed",
    "temp_bytes": "temp memory",
    "peak_bytes": "peak memory",
    "seconds": "time",
}
"""The per-phase figures a diff compares, in order, and how the tables name them:
the phase's best FLOP (`xla_cost.PhaseCosts.flops`); ``model_flops`` and
``hardware_flops`` only where one of them differs from ``flops`` on either side
(remat's recomputation); transcendentals; XLA's bytes accessed; the compiled
program's temporaries (``memory.temp_bytes``); XLA's peak of the donated train
step (``memory_breakdown.peak``, ``train_step`` only, with ``memory=True``); the
measured median seconds (``timing``). A figure unknown on both sides is left out."""

RANKED_BY = "absolute change in FLOP (forward + backward + update, the jaxprs' per-layer counts), largest first"
"""How `ReportDiff.layers` is ordered."""

ADDED, REMOVED, CHANGED, SAME, UNKNOWN_STATUS = "added", "removed", "changed", "same", "unknown"
"""A row's status: only in B, only in A, different, equal in every figure, or
unknown on one side (a phase figure known in one report only)."""

_FLOP_FIGURES = ("flops", "model_flops", "hardware_flops")
_BYTE_FIGURES = ("bytes_accessed", "temp_bytes", "peak_bytes")
_PASSES = ("forward", "backward", "update")
_REPORT_FIELDS = (
    "model", "config", "batch_size", "optimizer", "dtype", "param_dtype", "counter", "backend",
    "jax_version", "parameters", "devices", "depth",
)


def _change(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or a == 0 else b / a


@dataclasses.dataclass(frozen=True)
class PhaseChange:
    """One figure of one phase in A and in B.

    Attributes:
      phase: the phase (``forward``, ..., ``train_step``; ``other`` for `xla_cost.analyze_step`).
      figure: a key of `FIGURES`.
      a, b: the figure in A and in B; None where unknown, or where the phase is
        absent from that side (``status`` says which).
      status: ``changed``, ``same``, ``unknown`` (on one side), ``added`` (the
        phase only in B) or ``removed`` (only in A).
    """

    phase: str
    figure: str
    a: int | float | None
    b: int | float | None
    status: str

    @property
    def change(self) -> int | float | None:
        """``b - a``; None where either is unknown or absent."""
        return _change(self.a, self.b)

    @property
    def ratio(self) -> float | None:
        """``b / a``; None where either is unknown or absent, or ``a`` is 0."""
        return _ratio(self.a, self.b)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "change": self.change, "ratio": self.ratio}


@dataclasses.dataclass(frozen=True)
class LayerChange:
    """One per-layer row (matched by module path) in A and in B.

    A layer present on one side only is ``added`` or ``removed``: its other
    side is None (absent, not unknown), and its change is all of its FLOP,
    as if the absent side had none (a layer removed takes its work with it).

    Attributes:
      path: the module path (``(remainder)`` for the rest).
      a, b: the row in A and in B (`xla_cost.LayerCosts`), None where absent.
      rank: 1 for the largest absolute change in FLOP (`RANKED_BY`).
    """

    path: str
    a: LayerCosts | None
    b: LayerCosts | None
    rank: int = 0

    def flops(self, side: str, pass_: str | None = None) -> int | None:
        """FLOP of ``side`` (``a`` or ``b``) in ``pass_`` (forward, backward,
        update; None: all three); None where the layer is absent there."""
        layer = getattr(self, side)
        if layer is None:
            return None
        return layer.total.flops if pass_ is None else getattr(layer, pass_).flops

    def change_in(self, pass_: str | None = None) -> int:
        """B's FLOP minus A's in ``pass_`` (None: all passes), an absent side counted as none."""
        return (self.flops("b", pass_) or 0) - (self.flops("a", pass_) or 0)

    @property
    def change(self) -> int:
        """B's FLOP minus A's, every pass: what the ranking orders by (its absolute value)."""
        return self.change_in(None)

    @property
    def ratio(self) -> float | None:
        """B's FLOP over A's; None for an added or removed layer, or none in A."""
        return _ratio(self.flops("a"), self.flops("b"))

    @property
    def status(self) -> str:
        if self.a is None:
            return ADDED
        if self.b is None:
            return REMOVED
        same = self.a.parameters == self.b.parameters and all(self.change_in(p) == 0 for p in _PASSES)
        return SAME if same else CHANGED

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"rank": self.rank, "path": self.path, "status": self.status}
        row["parameters_a"] = None if self.a is None else self.a.parameters
        row["parameters_b"] = None if self.b is None else self.b.parameters
        row.update(flops_a=self.flops("a"), flops_b=self.flops("b"), change=self.change, ratio=self.ratio)
        for pass_ in _PASSES:
            row.update({f"{pass_}_a": self.flops("a", pass_), f"{pass_}_b": self.flops("b", pass_),
                        f"{pass_}_change": self.change_in(pass_)})
        return row


@dataclasses.dataclass(frozen=True)
class ReportDiff:
    """Two analyses compared: `diff`'s result.

    Attributes:
      a, b: the reports compared (a report read from JSON has no ``timing``;
        its measured seconds are in ``phases``).
      labels: how A and B are named (a file's path, else ``A`` and ``B``).
      phases: per phase (A's order, B's own phases after the phase before
        them), a `PhaseChange` per figure of `FIGURES` known on either side.
      layers: the per-layer rows ranked by `RANKED_BY` (the ``top`` largest
        when asked); None unless both reports have per-layer rows.
      layers_left_out: rows ranked below ``top``, not kept.
      differences: the report fields that differ (model, config, batch size,
        optimizer, dtypes, counter, backend, jax version, parameters, devices,
        layer depth), each as ``(A's, B's)``.
      notes: what a reader of the comparison should know (different models,
        counters or devices; layers on one side only).
      top: the ``top`` asked (None: every layer).
    """

    a: Report
    b: Report
    labels: tuple[str, str]
    phases: tuple[PhaseChange, ...]
    layers: tuple[LayerChange, ...] | None
    layers_left_out: int = 0
    differences: Mapping[str, tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()
    top: int | None = None

    def phase(self, phase: str, figure: str = "flops") -> PhaseChange:
        """The row of ``figure`` in ``phase``.

        Raises:
          KeyError: no such row (the phase or figure is on neither side).
        """
        for row in self.phases:
            if (row.phase, row.figure) == (phase, figure):
                return row
        raise KeyError(f"no row for {figure} of {phase}")

    def layer(self, path: str) -> LayerChange:
        """The row of the layer at ``path``.

        Raises:
          KeyError: no such layer kept (no per-layer rows, or ranked below ``top``).
        """
        for row in self.layers or ():
            if row.path == path:
                return row
        raise KeyError(f"no layer row {path!r}")

    # ------------------------------------------------------------------ data

    def to_dict(self) -> dict[str, Any]:
        """JSON values: both sides' descriptions, the differences, the phase
        rows, the ranked layer rows (None without them) and the notes."""
        return {
            "a": _side_dict(self.a, self.labels[0]),
            "b": _side_dict(self.b, self.labels[1]),
            "differences": {k: [_plain(a), _plain(b)] for k, (a, b) in self.differences.items()},
            "phases": [row.to_dict() for row in self.phases],
            "layers": None if self.layers is None else [row.to_dict() for row in self.layers],
            "layers_ranked_by": RANKED_BY,
            "layers_left_out": self.layers_left_out,
            "top": self.top,
            "notes": list(self.notes),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_frame(self) -> pd.DataFrame:
        """One row per phase and figure (index ``phase``, ``figure``): status,
        ``a``, ``b``, ``change`` (exact integers where the figure is one) and ``ratio``."""
        rows = [row.to_dict() for row in self.phases]
        frame = pd.DataFrame(rows, columns=["phase", "figure", "status", "a", "b", "change", "ratio"], dtype=object)
        frame["ratio"] = frame["ratio"].astype(float)
        return frame.set_index(["phase", "figure"])

    def layers_frame(self) -> pd.DataFrame:
        """One row per layer, ranked (index ``path``): rank, status, parameters
        and FLOP in A and B, the change and ratio, and each pass's FLOP and change;
        empty without per-layer rows on both sides."""
        columns = list(LayerChange("", None, None).to_dict())
        frame = pd.DataFrame([row.to_dict() for row in self.layers or ()], columns=columns)
        integers = [c for c in columns if c not in ("path", "status", "ratio")]
        frame[integers] = frame[integers].astype("Int64")
        frame["ratio"] = frame["ratio"].astype(float)
        return frame.set_index("path")

    # ------------------------------------------------------------------ rendering

    def to_csv(self) -> str:
        """One CSV table: a row per phase and figure (``kind`` ``phase``), then a
        row per layer (``kind`` ``layer``, `layers_frame`'s columns); raw numbers."""
        phases = self.to_frame().reset_index().rename(columns={"phase": "name"})
        phases.insert(0, "kind", "phase")
        frames = [phases]
        if self.layers is not None:
            layers = self.layers_frame().reset_index().rename(columns={"path": "name"})
            layers.insert(0, "kind", "layer")
            frames.append(layers)
        return pd.concat(frames, ignore_index=True).to_csv(index=False)

    def header(self) -> list[str]:
        """The lines above the tables: what A and B are, and what differs between them."""
        lines = [f"{_name(label, side)}: {describe(report)}"
                 for label, side, report in ((self.labels[0], "A", self.a), (self.labels[1], "B", self.b))]
        if self.differences:
            changed = "; ".join(
                _config_changes(a, b) if k == "config" else f"{k} {_plain_text(a)} -> {_plain_text(b)}"
                for k, (a, b) in self.differences.items()
            )
            lines.append(f"differs: {changed}")
        else:
            lines.append("same model, configuration, batch, optimizer, dtypes and counter")
        return lines

    def layers_title(self) -> str:
        """The line above the layer table: its ranking and how many rows it keeps."""
        kept = len(self.layers or ())
        shown = f"; the {kept} largest of {kept + self.layers_left_out}" if self.layers_left_out else ""
        return f"layers, by {RANKED_BY}{shown}"

    def to_table(self, width: int | None = None) -> str:
        """Plain text for terminals: the header, the phase table, the ranked layers, the notes.

        Args:
          width: the widest a line may be (`xla_cost.Report.to_table`); None:
            the terminal's when stdout is one, else unlimited.
        """
        blocks: list[str | TextTable] = [*self.header()]
        blocks.append(TextTable(_phase_table(self), "phases (B - A, B / A)", left=("figure",)))
        if self.layers is not None:
            blocks.append(TextTable(_layer_table(self), self.layers_title(), left=("status",)))
        blocks += [f"- {note}" for note in self.notes]
        return render(blocks, resolve_width(width))

    def to_markdown(self) -> str:
        """A markdown section: the header, the phase table, the ranked layers, the notes."""
        lines = [f"## {self.labels[0]} -> {self.labels[1]}", ""]
        lines += [f"- {line}" for line in self.header()]
        lines += ["", _markdown(_phase_table(self), 2), ""]
        if self.layers is not None:
            lines += [self.layers_title(), "", _markdown(_layer_table(self), 2), ""]
        lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines).rstrip() + "\n"

    def _repr_markdown_(self) -> str:
        """How a notebook shows the diff: `to_markdown`."""
        return self.to_markdown()

    def __str__(self) -> str:
        return self.to_table()


# ---------------------------------------------------------------------- building


def diff(
    a: Report | str | os.PathLike[str],
    b: Report | str | os.PathLike[str],
    *,
    top: int | None = None,
    labels: tuple[str, str] | None = None,
) -> ReportDiff:
    """Compares two analyses per phase and per layer, the layers ranked by their change in FLOP.

    ``xla-cost diff A.json B.json`` is the same from the shell.

    Args:
      a, b: the reports (`xla_cost.analyze`, `xla_cost.analyze_step`), or the
        paths of the JSON files ``--format json`` wrote (`xla_cost.Report.to_json`;
        a timed report's measured seconds are read too).
      top: keep the ``top`` layers whose FLOP changed most (None: every layer).
      labels: how to name A and B in the tables (default: a file's path as
        given, else ``A`` and ``B``).

    Returns:
      A `ReportDiff`: per phase, each figure of `FIGURES` known on either side
      in A and B with ``B - A`` and ``B / A``; per layer (when both reports
      have per-layer rows; a layer on one side only is ``added`` or
      ``removed``), the same for FLOP, ranked by `RANKED_BY`. Reports of
      different models, batch sizes, optimizers or dtypes are compared, the
      differences named in the header.

    Raises:
      InputError: ``a`` or ``b`` is not a report, or not a readable file of a
        report's JSON (another command's JSON, a table); the two have no phase
        in common; ``top`` is not None or an integer >= 1; ``labels`` is not two strings.
    """
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise InputError("top None or an integer >= 1 (--top N)", repr(top), "Pass e.g. top=10 (--top 10), or None (no --top) for every layer.")
    if labels is not None and not (isinstance(labels, (tuple, list)) and len(labels) == 2
                                   and all(isinstance(x, str) and x for x in labels)):
        raise InputError("labels as two non-empty strings", repr(labels), "Pass e.g. labels=('float32', 'bfloat16').")
    (report_a, seconds_a, label_a), (report_b, seconds_b, label_b) = _load(a, "A"), _load(b, "B")
    common = set(report_a.phase_names) & set(report_b.phase_names)
    if not common:
        raise InputError(
            "two reports with a phase in common", f"A's {', '.join(report_a.phase_names) or 'none'} against "
            f"B's {', '.join(report_b.phase_names) or 'none'}", "Compare two analyses of training steps.")
    phases = _phase_rows(report_a, report_b, seconds_a, seconds_b)
    layers, left_out = None, 0
    if report_a.layers is not None and report_b.layers is not None:
        ranked = _ranked_layers(report_a.layers, report_b.layers)
        layers, left_out = (ranked, 0) if top is None else (ranked[:top], max(0, len(ranked) - top))
    return ReportDiff(
        a=report_a, b=report_b, labels=tuple(labels) if labels else (label_a, label_b),  # type: ignore[arg-type]
        phases=phases, layers=layers, layers_left_out=left_out,
        differences=_differences(report_a, report_b),
        notes=tuple(_notes(report_a, report_b, seconds_a, seconds_b)), top=top,
    )


def _load(value: Any, side: str) -> tuple[Report, dict[str, float], str]:
    """``(report, measured seconds per phase, label)`` of one side."""
    if isinstance(value, Report):
        return value, _seconds(value), side
    if not isinstance(value, (str, os.PathLike)):
        raise InputError(f"{side} as a Report or the path of a report's JSON", type(value).__name__,
                         "Pass xla_cost.analyze's result, or a file written by "
                         "xla-cost analyze MODEL --format json --output FILE.")
    path = pathlib.Path(value)
    write = f"Write a report's JSON with xla-cost analyze MODEL --format json --output {side}.json."
    if not path.exists():
        raise InputError(f"{side} as a report's JSON file", f"{str(value)!r}, which does not exist", write)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = ("a directory" if path.is_dir() else "not text (a binary file)" if isinstance(exc, UnicodeDecodeError)
                  else f"unreadable ({type(exc).__name__}: {exc.strerror or exc})")
        raise InputError(f"{side} as a report's JSON file", f"{str(value)!r}, {reason}", write) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{side} as a report's JSON file", f"{str(value)!r}, which is not JSON "
                         f"(line {exc.lineno} column {exc.colno}: {exc.msg}; a table?)", write) from exc
    if not isinstance(data, dict) or "flops" not in data or "model" not in data:
        what = (f"a JSON {type(data).__name__}" if not isinstance(data, dict)
                else f"a JSON object with keys {', '.join(list(data)[:6])}" if data else "an empty JSON object")
        raise InputError(f"{side} as a report's JSON file (keys model, flops, ...)",
                         f"{str(value)!r}, {what} (another command's output?)", write)
    timing = data.pop("timing", None)
    try:
        report = Report.from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a hand-edited or damaged file
        raise InputError(f"{side} as a report's JSON file", f"{str(value)!r}, which failed to load with {quoted(exc)}",
                         write) from exc
    wrong = _not_a_number(report)
    if wrong is not None:  # a hand-edited file: "1.5e9" where the number was
        raise InputError(f"{side} as a report's JSON file whose figures are numbers (or null: unknown)",
                         f"{str(value)!r}, whose {wrong}", write)
    seconds: dict[str, float] = {}
    if isinstance(timing, Mapping) and not timing.get("skipped") and isinstance(timing.get("phases"), Mapping):
        seconds = {p: float(t["median_s"]) for p, t in timing["phases"].items()
                   if isinstance(t, Mapping) and isinstance(t.get("median_s"), (int, float))}
    return report, seconds, str(value)


def _not_a_number(report: Report) -> str | None:
    """The first figure a diff reads that is neither a number nor None, described
    (``flops of forward is '3.08e5', a str``); None when every one is a number."""
    def bad(value: Any) -> bool:
        return value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)))

    for phase in report.phase_names:
        for figure in FIGURES:
            if figure != "seconds" and bad(value := _figure(report, phase, figure, {})):
                return f"{figure} of {phase} is {value!r}, a {type(value).__name__}"
    for layer in report.layers or ():
        for pass_ in _PASSES:
            cost = getattr(layer, pass_)
            for name in ("flops", "transcendentals"):
                if bad(value := getattr(cost, name)):
                    return f"{pass_}_{name} of layer {layer.path!r} is {value!r}, a {type(value).__name__}"
    return None


def _seconds(report: Report) -> dict[str, float]:
    timing = report.timing
    if timing is None or timing.skipped:
        return {}
    return {p: t.median_s for p, t in timing.phases.items()}


def _phase_order(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """A's phases, each phase only B has after the phase B lists before it."""
    order = list(a)
    for i, phase in enumerate(b):
        if phase not in order:
            before = next((b[j] for j in range(i - 1, -1, -1) if b[j] in order), None)
            order.insert(0 if before is None else order.index(before) + 1, phase)
    return order


def _figure(report: Report, phase: str, figure: str, seconds: Mapping[str, float]) -> int | float | None:
    costs = report.phases[phase]
    if figure == "temp_bytes":
        return costs.memory.temp_bytes
    if figure == "peak_bytes":
        breakdown = report.memory_breakdown
        return breakdown.peak if breakdown is not None and phase == "train_step" else None
    if figure == "seconds":
        return seconds.get(phase)
    return getattr(costs, figure)


def _phase_rows(
    a: Report, b: Report, seconds_a: Mapping[str, float], seconds_b: Mapping[str, float]
) -> tuple[PhaseChange, ...]:
    rows = []
    for phase in _phase_order(a.phase_names, b.phase_names):
        in_a, in_b = phase in a.phases, phase in b.phases
        for figure in FIGURES:
            va = _figure(a, phase, figure, seconds_a) if in_a else None
            vb = _figure(b, phase, figure, seconds_b) if in_b else None
            if va is None and vb is None:
                continue  # unknown (or absent) on both sides
            if figure in ("model_flops", "hardware_flops") and not _remat_differs(a, b, phase, figure):
                continue
            status = (REMOVED if not in_b else ADDED if not in_a else UNKNOWN_STATUS if va is None or vb is None
                      else SAME if va == vb else CHANGED)
            rows.append(PhaseChange(phase, figure, va, vb, status))
    return tuple(rows)


def _remat_differs(a: Report, b: Report, phase: str, figure: str) -> bool:
    """Whether ``figure`` (model or hardware FLOP) differs from ``flops`` on either side."""
    return any(
        phase in r.phases and getattr(r.phases[phase], figure) is not None
        and getattr(r.phases[phase], figure) != r.phases[phase].flops
        for r in (a, b)
    )


def _ranked_layers(a: Sequence[LayerCosts], b: Sequence[LayerCosts]) -> tuple[LayerChange, ...]:
    by_a = {layer.path: layer for layer in a}
    by_b = {layer.path: layer for layer in b}
    paths = list(by_a) + [p for p in by_b if p not in by_a]
    rows = [LayerChange(p, by_a.get(p), by_b.get(p)) for p in paths]
    ranked = sorted(rows, key=lambda row: -abs(row.change))  # stable: A's order, then B's, among ties
    return tuple(dataclasses.replace(row, rank=i + 1) for i, row in enumerate(ranked))


def _fields(report: Report) -> dict[str, Any]:
    values = {key: getattr(report, key) for key in _REPORT_FIELDS}
    values["config"] = dict(report.config)
    values["param_dtype"] = report.param_dtype or report.dtype
    values["depth"] = report.depth if report.layers is not None else None
    return values


def _differences(a: Report, b: Report) -> dict[str, tuple[Any, Any]]:
    fa, fb = _fields(a), _fields(b)
    out = {key: (fa[key], fb[key]) for key in _REPORT_FIELDS if fa[key] != fb[key]}
    if "depth" in out and (a.layers is None or b.layers is None):
        del out["depth"]  # layers on one side only: said in a note
    return out


def _notes(a: Report, b: Report, seconds_a: Mapping[str, float], seconds_b: Mapping[str, float]) -> list[str]:
    notes = []
    if a.model != b.model:
        notes.append(f"different models ({a.model}, {b.model}), compared as a code change: phase by phase, "
                     "and layers matched by path, so one path may name different modules")
    if a.counter != b.counter:
        notes.append(f"A was counted by {a.counter}, B by {b.counter}: their FLOP come from different counters, "
                     "and bytes and memory are known only where compiled")
    if a.devices != b.devices:
        notes.append(f"figures are per device: A on {a.devices} device(s), B on {b.devices}")
    if (a.layers is None) != (b.layers is None):
        only, other = ("A", "B") if b.layers is None else ("B", "A")
        notes.append(f"per-layer rows only in {only}: analyse {other} with per_layer=True (--per-layer) "
                     "to compare layers")
    elif a.layers is not None and b.layers is not None and a.depth != b.depth:
        notes.append(f"layers at depth {a.depth} in A and {b.depth} in B: only paths both merge alike line up")
    if bool(seconds_a) != bool(seconds_b):
        notes.append(f"measured time only in {'A' if seconds_a else 'B'} (timed=True, --time)")
    if a.layers is not None and b.layers is not None:
        notes.append("layer FLOP are the jaxprs' counts (each pass adds up to its phase's jaxpr_flops); "
                     "an added or removed layer's change is all of its FLOP")
    return notes


# ---------------------------------------------------------------------- formatting


def _name(label: str, side: str) -> str:
    return side if label == side else f"{side} ({label})"


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def _plain_text(value: Any) -> str:
    if isinstance(value, Mapping):
        return "(" + ", ".join(f"{k}={v}" for k, v in value.items()) + ")"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _config_changes(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """``config.depth 0 -> 3; config.remat unset -> full``: the model arguments that differ."""
    keys = list(a) + [k for k in b if k not in a]
    return "; ".join(f"config.{k} {_plain_text(a[k]) if k in a else 'unset'} -> "
                     f"{_plain_text(b[k]) if k in b else 'unset'}" for k in keys if (k in a, a.get(k)) != (k in b, b.get(k)))


def _with_unit(text: str, unit: str) -> str:
    """``12.35 M`` and ``FLOP``: ``12.35 MFLOP``; ``512``: ``512 FLOP``."""
    return f"{text}{unit}" if text[-1:].isalpha() else f"{text} {unit}"


def _value(figure: str, value: float | None, signed: bool = False) -> str:
    """One cell: FLOP and bytes with an SI prefix and their unit, seconds in a
    time unit, transcendentals as a count; ``signed``: a ``+`` before a rise."""
    if value is None:
        return UNKNOWN
    if figure == "seconds":
        text = duration(value)
    elif figure in _FLOP_FIGURES:
        text = _with_unit(si(value), "FLOP")
    elif figure in _BYTE_FIGURES:  # decimal units, written as the reports write them (KB, MB)
        text = _with_unit(si(value).replace(" k", " K"), "B")
    else:
        text = si(value)
    return f"+{text}" if signed and value > 0 else text


def _side_value(figure: str, value: float | None, absent: bool) -> str:
    return "absent" if absent else _value(figure, value)


def _ratio_text(value: float | None, a: float | None, b: float | None) -> str:
    if value is not None:
        return f"{ratio(value)}x"
    return "n/a" if a == 0 and b is not None else UNKNOWN if a is not None or b is not None else "n/a"


def _phase_table(result: ReportDiff) -> pd.DataFrame:
    """The phase rows formatted, one per phase and figure: A, B, B - A, B / A."""
    rows = []
    for row in result.phases:
        absent_a, absent_b = row.status == ADDED, row.status == REMOVED
        rows.append({
            "phase": row.phase,
            "figure": FIGURES[row.figure],
            "A": _side_value(row.figure, row.a, absent_a),
            "B": _side_value(row.figure, row.b, absent_b),
            "B - A": "n/a" if absent_a or absent_b else _value(row.figure, row.change, signed=True),
            "B / A": "n/a" if absent_a or absent_b else _ratio_text(row.ratio, row.a, row.b),
        })
    return pd.DataFrame(rows, columns=["phase", "figure", "A", "B", "B - A", "B / A"]).set_index("phase")


def _markdown(frame: pd.DataFrame, left: int) -> str:
    """``frame`` (its index the first column) as a pipe table: the first ``left`` columns left, the figures right."""
    shown = frame.reset_index()
    return pipe_table([str(c) for c in shown.columns], shown.itertuples(index=False),
                      "l" * left + "r" * (len(shown.columns) - left))


def _parameters(row: LayerChange) -> str:
    a = None if row.a is None else row.a.parameters
    b = None if row.b is None else row.b.parameters
    def shown(n: int | None) -> str:  # (None: a row of a step whose parameters are unknown)
        return "unknown" if n is None else count(n)

    if row.a is None or row.b is None or a == b:
        return shown(a if row.b is None else b)
    return f"{shown(a)} -> {shown(b)}"


def _layer_table(result: ReportDiff) -> pd.DataFrame:
    """The ranked layer rows formatted: status, FLOP in A and B, the change and
    ratio, each pass's change, the parameters (``A -> B`` where they differ)."""
    rows = []
    for row in result.layers or ():
        status = row.status
        rows.append({
            "layer": row.path,
            "status": status,
            "A FLOP": _side_value("flops", row.flops("a"), status == ADDED),
            "B FLOP": _side_value("flops", row.flops("b"), status == REMOVED),
            "B - A": _value("flops", row.change, signed=True),
            "B / A": "n/a" if status in (ADDED, REMOVED) else _ratio_text(row.ratio, row.flops("a"), row.flops("b")),
            **{f"{pass_} B - A": _value("flops", row.change_in(pass_), signed=True) for pass_ in _PASSES},
            "parameters": _parameters(row),
        })
    columns = ["layer", "status", "A FLOP", "B FLOP", "B - A", "B / A",
               *(f"{p} B - A" for p in _PASSES), "parameters"]
    return pd.DataFrame(rows, columns=columns).set_index("layer")


def _side_dict(report: Report, label: str) -> dict[str, Any]:
    return {"label": label, **{k: _plain(v) for k, v in _fields(report).items()}}
