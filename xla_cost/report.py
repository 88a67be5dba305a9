"""The analysis result: frozen dataclasses of raw numbers, and their renderings.

Data holds raw integers (FLOP, bytes) and None for unknown; formatting (GFLOP,
MB, %) happens only in the renderers at the bottom of this file.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Mapping
from typing import Any

import pandas as pd

__all__ = [
    "PHASES",
    "MemoryStats",
    "PhaseCosts",
    "LayerCosts",
    "Report",
]

PHASES: tuple[str, ...] = ("forward", "backward", "grad", "update", "train_step")
"""Phases in report order. ``backward`` is ``grad`` minus ``forward``."""


@dataclasses.dataclass(frozen=True)
class MemoryStats:
    """Buffer sizes of one compiled phase, in bytes; None where unknown."""

    argument_bytes: int | None
    output_bytes: int | None
    temp_bytes: int | None


@dataclasses.dataclass(frozen=True)
class PhaseCosts:
    """Costs of one phase.

    Attributes:
      flops, transcendentals, bytes_accessed: the compiled XLA figures (None:
        unknown). For ``backward``: grad minus forward.
      memory: the compiled executable's buffers (None fields for ``backward``,
        which is not a program of its own).
      jaxpr_flops, jaxpr_transcendentals: the same phase counted from its jaxpr
        with `xla_cost.rules` (the cross-check; None if not counted).
      sources: where ``flops`` and ``transcendentals`` come from: ``xla``,
        ``jaxpr`` (XLA gave no figure, the complete jaxpr count stands in), or
        ``unknown``.
    """

    flops: int | None
    transcendentals: int | None
    bytes_accessed: int | None
    memory: MemoryStats
    jaxpr_flops: int | None = None
    jaxpr_transcendentals: int | None = None
    sources: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"flops": "xla", "transcendentals": "xla"}
    )


@dataclasses.dataclass(frozen=True)
class LayerCosts:
    """FLOP of one parametrised module in the forward and the backward pass.

    Counted from the ``grad`` phase's jaxpr: the forward pass is everything under
    ``jvp(...)``, the backward pass everything under ``transpose(jvp(...))``.
    """

    path: str
    parameters: int
    forward_flops: int
    backward_flops: int
    forward_transcendentals: int = 0
    backward_transcendentals: int = 0

    @property
    def backward_to_forward(self) -> float | None:
        """backward/forward FLOP, None when the forward pass has no FLOP."""
        return self.backward_flops / self.forward_flops if self.forward_flops else None


def _sub(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


def _ratio(a: int | None, b: int | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


@dataclasses.dataclass(frozen=True)
class Report:
    """The costs of one training step.

    Attributes:
      model: the model's name (zoo name or class name).
      config: the model's keyword arguments.
      batch_size: the leading axis of the inputs.
      optimizer: the optimizer's name (``custom`` for a user transformation).
      dtype: the computation dtype.
      backend: ``cpu``, ``gpu`` or ``tpu``.
      jax_version: the jax that compiled the programs.
      parameters: number of trainable parameters.
      phases: `PhaseCosts` per phase in `PHASES`.
      layers: per-layer rows (the last one the remainder), or None if not asked.
      unsupported: primitives without a cost rule, with how often they run.
      notes: caveats worth reading (unknown figures, loops, branches).
    """

    model: str
    config: Mapping[str, Any]
    batch_size: int
    optimizer: str
    dtype: str
    backend: str
    jax_version: str
    parameters: int
    phases: Mapping[str, PhaseCosts]
    layers: tuple[LayerCosts, ...] | None = None
    unsupported: Mapping[str, int] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()

    # ------------------------------------------------------------------ ratios

    @property
    def backward_to_forward(self) -> float | None:
        """backward FLOP / forward FLOP."""
        return _ratio(self.phases["backward"].flops, self.phases["forward"].flops)

    @property
    def backward_with_update_to_forward(self) -> float | None:
        """(backward + update) FLOP / forward FLOP, seed 001's convention."""
        backward, update = self.phases["backward"].flops, self.phases["update"].flops
        total = None if backward is None or update is None else backward + update
        return _ratio(total, self.phases["forward"].flops)

    # ------------------------------------------------------------------ data

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict with the stable schema (see README)."""
        data: dict[str, Any] = {
            "model": self.model,
            "config": dict(self.config),
            "batch_size": self.batch_size,
            "optimizer": self.optimizer,
            "dtype": self.dtype,
            "backend": self.backend,
            "jax_version": self.jax_version,
            "parameters": self.parameters,
        }
        for key in ("flops", "transcendentals", "bytes_accessed"):
            data[key] = {p: getattr(self.phases[p], key) for p in PHASES}
        data["memory"] = {p: dataclasses.asdict(self.phases[p].memory) for p in PHASES}
        data["jaxpr_flops"] = {p: self.phases[p].jaxpr_flops for p in PHASES}
        data["sources"] = {p: dict(self.phases[p].sources) for p in PHASES}
        data["ratios"] = {
            "backward_to_forward": self.backward_to_forward,
            "backward_with_update_to_forward": self.backward_with_update_to_forward,
        }
        if self.layers is not None:
            data["layers"] = [
                {
                    "path": layer.path,
                    "parameters": layer.parameters,
                    "forward_flops": layer.forward_flops,
                    "backward_flops": layer.backward_flops,
                    "backward_to_forward": layer.backward_to_forward,
                    "forward_transcendentals": layer.forward_transcendentals,
                    "backward_transcendentals": layer.backward_transcendentals,
                }
                for layer in self.layers
            ]
        data["unsupported"] = dict(self.unsupported)
        data["notes"] = list(self.notes)
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_frame(self) -> pd.DataFrame:
        """One row per phase: flops, transcendentals, bytes, memory, jaxpr_flops."""
        rows = []
        for phase in PHASES:
            costs = self.phases[phase]
            rows.append(
                {
                    "phase": phase,
                    "flops": costs.flops,
                    "transcendentals": costs.transcendentals,
                    "bytes_accessed": costs.bytes_accessed,
                    **dataclasses.asdict(costs.memory),
                    "jaxpr_flops": costs.jaxpr_flops,
                }
            )
        return pd.DataFrame(rows).set_index("phase").astype("Int64")

    def layers_frame(self) -> pd.DataFrame:
        """One row per layer (the remainder last); empty if layers were not asked."""
        columns = ["path", "parameters", "forward_flops", "backward_flops", "backward_to_forward"]
        if not self.layers:
            return pd.DataFrame(columns=columns).set_index("path")
        rows = [
            {
                "path": layer.path,
                "parameters": layer.parameters,
                "forward_flops": layer.forward_flops,
                "backward_flops": layer.backward_flops,
                "backward_to_forward": layer.backward_to_forward,
            }
            for layer in self.layers
        ]
        return pd.DataFrame(rows, columns=columns).set_index("path")

    # ------------------------------------------------------------------ rendering

    def to_csv(self) -> str:
        """The phase table as CSV (raw numbers)."""
        return self.to_frame().to_csv()

    def to_markdown(self) -> str:
        """A markdown section: header, phase table, ratios, layers, caveats."""
        lines = [f"## {self.model}", "", _describe(self), ""]
        lines.append(_phase_frame(self).to_markdown())
        lines += ["", _ratio_line(self), ""]
        if self.layers is not None:
            lines.append(_layer_frame(self).to_markdown())
            lines.append("")
        lines += [f"- {c}" for c in _caveats(self)]
        return "\n".join(lines).rstrip() + "\n"

    def to_table(self) -> str:
        """A plain-text table for terminals (rich, no colours)."""
        from rich.console import Console
        from rich.table import Table

        buffer = io.StringIO()
        console = Console(file=buffer, width=120, color_system=None, force_terminal=False)
        console.print(_describe(self))
        for title, frame in [("phases", _phase_frame(self))] + (
            [("layers (from the grad jaxpr)", _layer_frame(self))] if self.layers is not None else []
        ):
            table = Table(title=title, title_justify="left")
            table.add_column(frame.index.name or "")
            for column in frame.columns:
                table.add_column(str(column), justify="right")
            for index, row in frame.iterrows():
                table.add_row(str(index), *[str(v) for v in row])
            console.print(table)
        console.print(_ratio_line(self))
        for caveat in _caveats(self):
            console.print(f"- {caveat}")
        return buffer.getvalue()

    def __str__(self) -> str:
        return self.to_table()


def _fmt(value: float | int | None, scale: float = 1.0, digits: int = 3) -> str:
    if value is None:
        return "unknown"
    return f"{value / scale:,.{digits}f}"


def _describe(report: Report) -> str:
    config = ", ".join(f"{k}={v}" for k, v in report.config.items())
    return (
        f"{report.model}({config}) batch {report.batch_size}, {report.optimizer}, "
        f"{report.dtype}, {report.parameters:,} parameters, {report.backend}, "
        f"jax {report.jax_version}"
    )


def _phase_frame(report: Report) -> pd.DataFrame:
    rows = []
    for phase in PHASES:
        c = report.phases[phase]
        rows.append(
            {
                "phase": phase,
                "GFLOP": _fmt(c.flops, 1e9),
                "transcendentals (M)": _fmt(c.transcendentals, 1e6),
                "bytes accessed (MB)": _fmt(c.bytes_accessed, 1e6, 1),
                "temp (MB)": _fmt(c.memory.temp_bytes, 1e6, 1),
                "jaxpr GFLOP": _fmt(c.jaxpr_flops, 1e9),
            }
        )
    return pd.DataFrame(rows).set_index("phase")


def _layer_frame(report: Report) -> pd.DataFrame:
    rows = []
    for layer in report.layers or ():
        ratio = layer.backward_to_forward
        rows.append(
            {
                "layer": layer.path,
                "parameters": f"{layer.parameters:,}",
                "forward GFLOP": _fmt(layer.forward_flops, 1e9, 4),
                "backward GFLOP": _fmt(layer.backward_flops, 1e9, 4),
                "backward/forward": "n/a" if ratio is None else f"{ratio:.3f}",
            }
        )
    return pd.DataFrame(rows).set_index("layer")


def _ratio_line(report: Report) -> str:
    def show(value: float | None) -> str:
        return "unknown" if value is None else f"{value:.3f}"

    return (
        f"backward/forward = {show(report.backward_to_forward)}; "
        f"(backward + update)/forward = {show(report.backward_with_update_to_forward)}"
    )


def _caveats(report: Report) -> list[str]:
    caveats = list(report.notes)
    if report.unsupported:
        names = ", ".join(f"{k} x{v}" for k, v in sorted(report.unsupported.items()))
        caveats.append(f"no cost rule (not in jaxpr counts): {names}")
    return caveats
