"""The analysis result: frozen dataclasses of raw numbers, and their renderings.

Data holds raw integers (FLOP, bytes) and None for unknown; formatting (GFLOP,
MB, %) happens only in the renderers at the bottom of this file.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from xla_cost.step import phases as _phases
from xla_cost.count.layers import LayerCosts, layer_records
from xla_cost.analysis.compare import TargetComparison, compare
from xla_cost.analysis.memory import MemoryBreakdown, TargetMemory
from xla_cost.compiled.kernels import Kernel
from xla_cost.count.registry import Cost
from xla_cost.errors import InputError
from xla_cost.present.markdown import markdown_table
from xla_cost.present.plots import layer_bars
from xla_cost.present.text import TextTable, render, resolve_width
from xla_cost.analysis.report_tables import (
    COMMUNICATION_TITLE, KERNELS_TITLE, caveats, communication_frame, describe, kernel_frame, layer_frame, memory_frame, memory_title, phase_frame, ratio_line, timing_frames, workspace_frame, workspace_title,
)

if TYPE_CHECKING:  # pandas (0.3 s to import) loads where a table is made, not with the analysis
    import pandas as pd

    from xla_cost.analysis.timing import Timing  # loaded where a step is timed

__all__ = [
    "PHASES",
    "Collective",
    "MemoryStats",
    "PhaseCosts",
    "LayerCosts",
    "Report",
]

PHASES: tuple[str, ...] = _phases.NAMES
"""Phases in report order (declared in `xla_cost.step.phases`). ``backward`` is
``grad`` minus ``forward``; ``train_step`` is ``grad`` plus ``update`` unless
compiled on its own (``exact_train_step``)."""


@dataclasses.dataclass(frozen=True)
class MemoryStats:
    """Buffer sizes of one compiled phase, in bytes; None where unknown.

    Attributes:
      argument_bytes: the program's arguments (``memory_analysis()``).
      output_bytes: its outputs.
      temp_bytes: its temporaries (XLA's workspace).
    """

    argument_bytes: int | None
    output_bytes: int | None
    temp_bytes: int | None


@dataclasses.dataclass(frozen=True)
class Collective:
    """Collectives of one kind, size, group and layer in a sharded phase, per device.

    Read from the compiled HLO (`xla_cost.compiled.hlo`): one row stands for every
    instruction with the same key; ``executions`` counts their runs per step,
    loops multiplied out (a collective inside a scanned layer runs trip-count
    times), None where a loop's trip count is unknown.

    Attributes:
      kind: ``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all``,
        ``collective-permute`` (an asynchronous start/done pair is one).
      axes: the mesh axes its device groups span (``("data",)``); empty when
        the groups could not be read.
      group_size: devices per group (None: unknown).
      bytes: the buffer it works on, per device and run: the reduced buffer,
        the gathered result, the buffer before a reduce-scatter.
      executions: runs per step, every instruction and loop iteration.
      layer: the module whose operation it serves (from the HLO's op_name
        name stack), ``""`` when none.
    """

    kind: str
    axes: tuple[str, ...]
    group_size: int | None
    bytes: int
    executions: int | None
    layer: str = ""

    @property
    def total_bytes(self) -> int | None:
        """``bytes * executions``: the buffers it works on in one step."""
        return None if self.executions is None else self.bytes * self.executions

    def key(self) -> tuple[Any, ...]:
        return (self.kind, self.axes, self.group_size, self.bytes, self.layer)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "axes": list(self.axes)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Collective:
        return cls(**{**data, "axes": tuple(data["axes"])})


def combine_collectives(
    formula: Mapping[str, int], parts: Mapping[str, tuple[Collective, ...]]
) -> tuple[Collective, ...]:
    """A derived phase's collectives: the formula applied to the runs of each key
    (``backward = grad - forward`` keeps the gradient's reductions and the
    gathers the backward pass repeats); rows that end at zero or below go."""
    runs: dict[tuple[Any, ...], int | None] = {}
    rows: dict[tuple[Any, ...], Collective] = {}
    for name, k in formula.items():
        for c in parts.get(name, ()):
            key = c.key()
            rows.setdefault(key, c)
            before = runs.get(key, 0)
            runs[key] = None if before is None or c.executions is None else before + k * c.executions
    return tuple(
        dataclasses.replace(rows[key], executions=n)
        for key, n in runs.items() if n is None or n > 0
    )


@dataclasses.dataclass(frozen=True)
class PhaseCosts:
    """Costs of one phase.

    Attributes:
      flops, transcendentals: the best figures (None: unknown). XLA's compiled
        count, corrected for loops when the program has any (XLA counts a loop
        body once); the jaxpr count where XLA gives none. For ``backward``: grad
        minus forward.
      bytes_accessed: XLA's compiled figure (None: unknown, or not compiled). For
        programs with loops it counts each loop body once.
      memory: the compiled executable's buffers (None fields for a derived
        phase, which is not a program of its own, and when not compiled).
      xla_flops, xla_transcendentals: XLA's raw compiled figures (None: not
        compiled, or XLA gave none).
      jaxpr_flops, jaxpr_transcendentals: the phase counted from its jaxpr with
        `xla_cost.count.rules`, loops multiplied out (None if not counted).
      loop_corrected: ``flops`` is XLA's figure plus the loop iterations it
        missed.
      conversion_flops: the jaxpr's FLOP spent converting between dtypes
        (mixed precision adds them; the rest is the model's arithmetic).
      random_flops: the jaxpr's FLOP of the random-number generator (jax's
        threefry hash and its counters: a dropout's masks), as XLA's CPU
        program counts them (`xla_cost.count.random_rules`: the hash's loop
        body once); a compiler that unrolls the loop counts more.
      sources: where ``flops`` and ``transcendentals`` come from: ``xla``,
        ``xla+loops`` (corrected), ``jaxpr`` (XLA gave none or was not asked),
        or ``unknown``.
      jaxpr_bytes_accessed: the jaxpr's unfused estimate of the bytes moved
        (every operand read once, every result written once, loops multiplied
        out): an upper bound of what a fused program moves, and the only bytes
        figure without compiling.
      derivation: how the phase's figures were obtained: ``compiled`` (XLA,
        corrected for loops), ``jaxpr`` (counted without compiling), or the
        formula of a derived phase (``grad - forward``, ``grad + update``).
      communication: the collectives of a sharded phase, per device (empty
        on one device).
      model_flops: the phase's FLOP without the forward work that
        ``jax.checkpoint`` (remat) recomputes: the model's arithmetic, what MFU
        divides by. ``flops`` itself without remat; with remat both this and
        ``hardware_flops`` are the jaxpr's counts (XLA keeps all, some or none
        of the recomputation, so its figure is neither).
      hardware_flops: ``model_flops`` plus that recomputation: what a device
        that keeps it executes (HFU). Equal without remat. XLA on the CPU
        removes recomputation it has the memory to avoid; a GPU compile keeps it.
      attention_flops: the jaxpr's FLOP of the attention's score and value
        products (matrix products of activations by activations, in a module
        without parameters of its own or, wherever they run, two such products
        with batch dimensions and a softmax between them as the data flows:
        pure JAX, `xla_cost.count.attention_flow`; and those inside fused attention), all
        T x T pairs counted, remat's recomputation of them included; with
        ``attention_flops="causal"`` ``model_flops`` counts half of those it
        holds (none recomputed: remat changes no ``model_flops``).
      matmul_flops, matmul_bytes: the jaxpr's FLOP of its matrix products and
        convolutions (``dot_general``, ``conv_general_dilated``, the products
        inside fused attention; remat's recomputation and loops included) and
        their operands' and results' bytes: the work tensor cores do, apart
        from the memory-bound rest (`xla_cost.timemodel.calibration` times the two apart).
      float8_flops: of ``matmul_flops``, those of products whose operands are
        both 8-bit floats (`xla_cost.count.registry.Cost.float8`: ``--dtype
        float8``'s projections), which a device's float8 peak prices where the
        step is priced from its totals.
      memory_bound_bytes: per device, the compiled program's bytes read and
        written by everything but its matrix products, convolutions, library
        calls and collectives, loops multiplied out
        (`xla_cost.compiled.work.work_bytes`): the memory-bound work.
      kernels: per device, executions of the compiled program's instructions
        that run code, loops multiplied out: about the kernels a GPU launches.
      library_calls: the compiled program's library calls (custom calls that
        do arithmetic: cuBLAS gemms, cuDNN convolutions, fused attention), as
        instructions of the program; read for an accelerator's program (a
        compile target's), None where not read (the CPU's).
      optimal_seconds: the target compiler's own estimate of the program's
        time (a TPU's ``cost_analysis()``), None where it gives none.
      arguments: the arrays a call of the program is passed (its entry
        computation's parameters): what the host hands over each call, for
        the time model's dispatch (None: not compiled; for a derived phase,
        its programs' together).
      kernel_list: a compile target's program's kernels in schedule order
        (`xla_cost.compiled.kernels.Kernel`: fusions, library calls,
        collectives with their groups, asynchronous start/done pairs and what
        runs between them); None without a target or for a derived phase.
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
    xla_flops: int | None = None
    xla_transcendentals: int | None = None
    loop_corrected: bool = False
    conversion_flops: int | None = None
    random_flops: int | None = None
    model_flops: int | None = None
    hardware_flops: int | None = None
    attention_flops: int | None = None
    matmul_flops: int | None = None
    matmul_bytes: int | None = None
    float8_flops: int | None = None
    memory_bound_bytes: int | None = None
    kernels: int | None = None
    library_calls: int | None = None
    optimal_seconds: float | None = None
    kernel_list: tuple[Any, ...] | None = None
    arguments: int | None = None
    jaxpr_bytes_accessed: int | None = None
    derivation: str = "compiled"
    communication: tuple[Collective, ...] = ()

    @property
    def communication_bytes(self) -> int | None:
        """Bytes of the buffers the phase's collectives work on, per device and
        step (None if a loop's trip count is unknown)."""
        totals = [c.total_bytes for c in self.communication]
        return None if None in totals else sum(totals)  # type: ignore[arg-type]

    @property
    def xla_to_jaxpr(self) -> float | None:
        """XLA's raw FLOP over the jaxpr count: about 1 without loops, well below with."""
        return _ratio(self.xla_flops, self.jaxpr_flops)

    @property
    def corrected_to_jaxpr(self) -> float | None:
        """XLA's FLOP over the jaxpr count as the phase table compares them: the loop-corrected
        figure (``flops``) where XLA counted a loop body once (`loop_corrected`), else XLA's raw
        one (`xla_to_jaxpr`); one device's on a mesh (the table multiplies by the devices)."""
        return _ratio(self.flops if self.loop_corrected else self.xla_flops, self.jaxpr_flops)

    @classmethod
    def derive(cls, phase: _phases.Phase, parts: Mapping[str, PhaseCosts]) -> PhaseCosts:
        """The costs of derived ``phase``: its formula applied to every additive
        figure of ``parts`` (unknown if a term is); no memory (not a program);
        each source the least certain of the parts'; loop-corrected if one is."""
        used = [parts[name] for name in phase.formula]
        values = {
            key: _phases.combine(phase.formula, {n: getattr(parts[n], key) for n in phase.formula})
            for key in ADDITIVE
        }
        return cls(
            **values,
            memory=MemoryStats(None, None, None),
            sources={key: _least_certain(p.sources.get(key, "xla") for p in used) for key in SOURCED},
            loop_corrected=any(p.loop_corrected for p in used),
            derivation=phase.formula_text,
            communication=combine_collectives(
                phase.formula, {n: parts[n].communication for n in phase.formula}
            ),
        )


ADDITIVE: tuple[str, ...] = (
    "flops", "transcendentals", "bytes_accessed", "xla_flops", "xla_transcendentals",
    "jaxpr_flops", "jaxpr_transcendentals", "jaxpr_bytes_accessed", "conversion_flops",
    "model_flops", "hardware_flops", "attention_flops", "matmul_flops", "matmul_bytes", "float8_flops",
    "memory_bound_bytes", "kernels", "library_calls", "arguments", "random_flops",
)
"""`PhaseCosts` figures that add up across phases (a derived phase's formula applies)."""

SOURCED: tuple[str, ...] = ("flops", "transcendentals")
"""`PhaseCosts` figures whose source is recorded in ``sources``."""

_CERTAINTY = ("unknown", "xla+loops", "jaxpr", "xla")  # least certain first


def _least_certain(sources: Any) -> str:
    found = set(sources)
    return next((s for s in _CERTAINTY if s in found), "xla")


def _plain(value: Any) -> Any:
    """Mappings and tuples as JSON has them (dicts and lists)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _memory_from(data: Mapping[str, Any] | None) -> Any:
    if data is None:
        return None
    return MemoryBreakdown.from_dict(data)


def _ratio(a: int | None, b: int | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


@dataclasses.dataclass(frozen=True)
class Report:
    """The costs of one training step.

    ``sources`` in `to_dict` says, per phase, where ``flops`` and
    ``transcendentals`` come from and how the phase was obtained
    (``derivation``: ``compiled``, ``jaxpr``, or a formula such as
    ``grad + update``).

    Attributes:
      model: the model's name (zoo name or class name).
      config: the model's keyword arguments.
      batch_size: the leading axis of the inputs.
      optimizer: the optimizer's name (``custom`` for a user transformation).
      dtype: the computation dtype.
      backend: ``cpu``, ``gpu`` or ``tpu``.
      jax_version: the jax that compiled the programs.
      parameters: number of trainable parameters.
      phases: `PhaseCosts` per phase, in report order: those of `PHASES` for
        `analyze`; `analyze_step` adds ``other`` (`xla_cost.step.phases.STEP_PARTS`).
      layers: per-layer rows (the last one the remainder), or None if not asked.
      unsupported: primitives without a cost rule, with how often they run.
      notes: caveats worth reading (unknown figures, loops, branches).
      counter: ``xla`` (compiled, loop-corrected) or ``jaxpr`` (jaxpr alone).
      param_dtype: the parameters' dtype (``dtype`` is the computation's); None where the
        step's arguments hold no parameter (a step that makes its own: their dtype is unknown).
      timing: measured seconds per phase (`xla_cost.analysis.timing.Timing`), if asked.
      depth: the module depth of ``layers`` (None: one row per module).
      collectives: collective primitives (``psum``, ``all_gather``, ...) and how
        often each runs in the train step; empty when the step has none.
      sharding: for a sharded step (``mesh=``): ``mesh`` (devices per axis),
        ``devices``, total and per-device bytes of ``params`` and
        ``opt_state``, and ``param_specs`` (each parameter's partition spec
        and where it came from), and ``jaxpr``: what the jaxpr_* figures
        count, ``step`` (the whole step on all devices; the default) or
        ``device`` (a mapped body: one device's); empty on one device. Phase
        figures are then per device.
      memory_breakdown: the step's memory per device
        (`xla_cost.MemoryBreakdown`) with ``memory=True``, else None.
      target: the compile target the programs were built for (``h100``,
        ``tpu-v5e:2x2``; `xla_cost.compiled.targets`), None: the default backend.
      cpu: with ``compare_cpu=True``, the same step compiled for the default
        backend (the CPU proxy), which `comparison` sets beside this one; else None.
      target_memory: with a ``target``, whether the step fits one of its
        devices and which programs the target's compiler rematerialized
        (`xla_cost.analysis.memory.TargetMemory`); None without a target.
      active_parameters: the parameters a token's computation reads, for a model
        that declares routed experts (`xla_cost.step.routing`: a mixture of
        experts' ``top_k / experts`` of its experts, everything else whole);
        None where none are declared (``parameters`` is the total).
      trained_parameters: the parameters the step trains where it trains only some (a LoRA,
        a linear probe, an optimizer that freezes parameters): those the backward pass makes a
        gradient for, or whose gradient the optimizer reads; the update's FLOP per parameter
        is over them. None: every parameter is trained.
      updated_parameters: where the optimizer also updates parameters it trains not (the zero
        gradients of a module under stop_gradient or unused: its work on them is in the update),
        the parameters it updates, over which the update's FLOP per parameter is; else None.
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
    counter: str = "xla"
    depth: int | None = None
    param_dtype: str | None = None
    timing: Timing | None = None
    collectives: Mapping[str, int] = dataclasses.field(default_factory=dict)
    sharding: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    memory_breakdown: Any = None
    """`xla_cost.analysis.memory.MemoryBreakdown` of the step per device (``memory=True``), else None."""
    target: str | None = None
    cpu: Report | None = None
    target_memory: TargetMemory | None = None
    active_parameters: int | None = None
    trained_parameters: int | None = None
    updated_parameters: int | None = None

    @property
    def mesh(self) -> dict[str, int]:
        """Devices per mesh axis (empty: one device)."""
        return dict(self.sharding.get("mesh", {}))

    @property
    def devices(self) -> int:
        """Devices the step runs on (its figures are per device)."""
        return int(self.sharding.get("devices", 1))

    # ------------------------------------------------------------------ ratios

    @property
    def phase_names(self) -> tuple[str, ...]:
        """The phases this report has, in report order."""
        return tuple(self.phases)

    @property
    def backward_to_forward(self) -> float | None:
        """backward FLOP / forward FLOP."""
        return _ratio(self.phases["backward"].flops, self.phases["forward"].flops)

    @property
    def model_flops(self) -> int | None:
        """The train step's FLOP without remat's recomputation (`PhaseCosts.model_flops`)."""
        return self.phases["train_step"].model_flops

    @property
    def hardware_flops(self) -> int | None:
        """The train step's FLOP with remat's recomputation (`PhaseCosts.hardware_flops`)."""
        return self.phases["train_step"].hardware_flops

    @property
    def backward_with_update_to_forward(self) -> float | None:
        """(backward + update) FLOP / forward FLOP, seed 001's convention."""
        backward, update = self.phases["backward"].flops, self.phases["update"].flops
        total = None if backward is None or update is None else backward + update
        return _ratio(total, self.phases["forward"].flops)

    def comparison(self) -> TargetComparison:
        """This target's program beside the CPU proxy's (`cpu`): `xla_cost.compare`.

        Raises:
          InputError: the report has no CPU run beside it (analyse with
            ``target=...`` and ``compare_cpu=True``).
        """
        if self.cpu is None:
            raise InputError("a report analysed with compare_cpu=True (--compare-cpu)", "a report without a CPU run",
                             "Analyse with target=... and compare_cpu=True.")
        return compare(self.cpu, self)

    # ------------------------------------------------------------------ data

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict with the stable schema (docs/api.md)."""
        data: dict[str, Any] = {
            "model": self.model,
            "config": dict(self.config),
            "batch_size": self.batch_size,
            "optimizer": self.optimizer,
            "dtype": self.dtype,
            "param_dtype": self.param_dtype,
            "backend": self.backend,
            "target": self.target,
            "jax_version": self.jax_version,
            "counter": self.counter,
            "parameters": self.parameters,
            "active_parameters": self.active_parameters,
            "trained_parameters": self.trained_parameters,
            "updated_parameters": self.updated_parameters,
        }
        for key in (
            "flops", "xla_flops", "jaxpr_flops", "loop_corrected", "xla_to_jaxpr",
            "transcendentals", "xla_transcendentals", "jaxpr_transcendentals",
            "conversion_flops", "bytes_accessed", "jaxpr_bytes_accessed", "model_flops", "hardware_flops",
            "attention_flops", "matmul_flops", "matmul_bytes", "float8_flops", "memory_bound_bytes", "kernels",
            "library_calls", "arguments", "random_flops",
        ):
            data[key] = {p: getattr(self.phases[p], key) for p in self.phase_names}
        data["memory"] = {p: dataclasses.asdict(self.phases[p].memory) for p in self.phase_names}
        if self.target is not None:
            data["optimal_seconds"] = {p: self.phases[p].optimal_seconds for p in self.phase_names}
            data["kernel_list"] = {p: None if self.phases[p].kernel_list is None
                                   else [k.to_dict() for k in self.phases[p].kernel_list] for p in self.phase_names}
        data["sources"] = {
            p: {**self.phases[p].sources, "derivation": self.phases[p].derivation} for p in self.phase_names
        }
        data["ratios"] = {
            "backward_to_forward": self.backward_to_forward,
            "backward_with_update_to_forward": self.backward_with_update_to_forward,
        }
        if self.layers is not None:
            data["depth"] = self.depth
            data["layers"] = layer_records(self.layers)
        if self.timing is not None:
            data["timing"] = self.timing.to_dict(
                _ratio(self.phases["backward"].flops, self.phases["forward"].flops), self.layers)
        data["unsupported"] = dict(self.unsupported)
        data["collectives"] = dict(self.collectives)
        if self.sharding:
            data["sharding"] = _plain(self.sharding)
            data["communication"] = {
                p: [c.to_dict() for c in self.phases[p].communication] for p in self.phase_names
            }
            data["communication_bytes"] = {p: self.phases[p].communication_bytes for p in self.phase_names}
        if self.memory_breakdown is not None:
            data["memory_breakdown"] = self.memory_breakdown.to_dict()
        if self.target_memory is not None:
            data["target_memory"] = self.target_memory.to_dict()
        data["notes"] = list(self.notes)
        if self.cpu is not None:
            data["cpu"] = self.cpu.to_dict()
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Report:
        """The report `to_json` (``--format json``) wrote, read back: `from_dict` of the parsed text.

        Raises:
          ValueError: ``text`` is not JSON, or not an untimed report's (`from_dict`).
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"Report.from_json: not JSON ({exc})") from exc
        if not isinstance(data, Mapping):
            raise ValueError(f"Report.from_json: not a report's JSON (a JSON {type(data).__name__})")
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        """The report `to_dict` gave (read back from JSON or the results store).

        Raises:
          ValueError: ``data`` holds a ``timing`` section (measured seconds are
            not stored; time the step again) or is not a report's dict.
        """
        if data.get("timing") is not None:
            raise ValueError("Report.from_dict: a timed report is not read back; time the step again")
        try:
            phases = {
                p: PhaseCosts(
                    **{key: data[key][p] for key in ADDITIVE if key in data},
                    **{key: data["flops"][p] for key in ("model_flops", "hardware_flops") if key not in data},
                    **{key: None for key in ("attention_flops", "matmul_flops", "matmul_bytes", "float8_flops",
                                             "memory_bound_bytes", "kernels", "library_calls", "arguments",
                                             "random_flops")
                       if key not in data},
                    memory=MemoryStats(**data["memory"][p]),
                    optimal_seconds=(data.get("optimal_seconds") or {}).get(p),
                    kernel_list=None if (data.get("kernel_list") or {}).get(p) is None
                    else tuple(Kernel.from_dict(k) for k in data["kernel_list"][p]),
                    sources={k: v for k, v in data["sources"][p].items() if k != "derivation"},
                    loop_corrected=bool(data["loop_corrected"][p]),
                    derivation=data["sources"][p]["derivation"],
                    communication=tuple(
                        Collective.from_dict(c) for c in data.get("communication", {}).get(p, ())
                    ),
                )
                # in report order (`xla_cost.step.phases.REPORT_ORDER`): a store's JSON may hold them sorted
                for p in sorted(data["flops"], key=lambda name: (_phases.REPORT_ORDER.index(name)
                                                                  if name in _phases.REPORT_ORDER else
                                                                  len(_phases.REPORT_ORDER), name))
            }
            layers = None
            if data.get("layers") is not None:
                layers = tuple(
                    LayerCosts(
                        path=row["path"], parameters=row["parameters"], trip_count=row["trip_count"],
                        saved_activation_bytes=row.get("saved_activation_bytes"),
                        recomputed=Cost(row.get("recomputed_flops") or 0, row.get("recomputed_transcendentals") or 0,
                                        row.get("recomputed_bytes_accessed") or 0),
                        **{
                            pass_: Cost(
                                row[f"{pass_}_flops"], row[f"{pass_}_transcendentals"],
                                row.get(f"{pass_}_bytes_accessed", 0),
                            )
                            for pass_ in ("forward", "backward", "update")
                        },
                    )
                    for row in data["layers"]
                )
            return cls(
                model=data["model"], config=dict(data["config"]), batch_size=data["batch_size"],
                optimizer=data["optimizer"], dtype=data["dtype"], backend=data["backend"],
                jax_version=data["jax_version"], parameters=data["parameters"], phases=phases,
                active_parameters=data.get("active_parameters"), trained_parameters=data.get("trained_parameters"),
                updated_parameters=data.get("updated_parameters"),
                layers=layers, unsupported=dict(data["unsupported"]), notes=tuple(data["notes"]),
                counter=data["counter"], depth=data.get("depth"), param_dtype=data["param_dtype"],
                collectives=dict(data["collectives"]),
                sharding=dict(data.get("sharding", {})),
                memory_breakdown=_memory_from(data.get("memory_breakdown")),
                target=data.get("target"),
                cpu=None if data.get("cpu") is None else cls.from_dict(data["cpu"]),
                target_memory=None if data.get("target_memory") is None
                else TargetMemory.from_dict(data["target_memory"]),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"Report.from_dict: not a report's dict ({type(exc).__name__}: {exc})") from exc

    def to_frame(self) -> pd.DataFrame:
        """One row per phase: best, XLA and jaxpr FLOP, transcendentals, bytes, memory."""
        import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
        rows = []
        for phase in self.phase_names:
            costs = self.phases[phase]
            rows.append(
                {
                    "phase": phase,
                    "flops": costs.flops,
                    "xla_flops": costs.xla_flops,
                    "jaxpr_flops": costs.jaxpr_flops,
                    "transcendentals": costs.transcendentals,
                    "bytes_accessed": costs.bytes_accessed,
                    **dataclasses.asdict(costs.memory),
                }
            )
        frame = pd.DataFrame(rows).set_index("phase").astype("Int64")
        frame["loop_corrected"] = [self.phases[p].loop_corrected for p in self.phase_names]
        return frame

    def layers_frame(self) -> pd.DataFrame:
        """One row per layer (the remainder last); empty if layers were not asked."""
        import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
        columns = [
            "path", "parameters", "trip_count", "forward_flops", "backward_flops", "recomputed_flops",
            "backward_to_forward", "update_flops", "transcendentals",
        ]
        if not self.layers:
            return pd.DataFrame(columns=columns).set_index("path")
        rows = [
            {key: getattr(layer, key) for key in columns}
            for layer in self.layers
        ]
        return pd.DataFrame(rows, columns=columns).set_index("path")

    # ------------------------------------------------------------------ rendering

    def to_csv(self) -> str:
        """One CSV table of raw numbers: a row per phase, then a row per layer if asked.

        ``kind`` is ``phase`` or ``layer`` and ``name`` the phase or the layer's
        path. Phase rows fill `to_frame`'s columns (``flops``, ``jaxpr_flops``,
        ...); layer rows fill the JSON ``layers`` fields (``forward_flops``,
        ``backward_flops``, ``update_flops``, per-pass transcendentals, ...);
        the other cells are empty. ``pandas.read_csv`` reads it back; the layer
        rows' ``forward_flops`` add up to the forward phase's ``jaxpr_flops``.
        With a CPU run beside the target's (``compare_cpu=True``), a row per
        phase of kind ``comparison`` follows the phase rows: `comparison`'s
        `TargetComparison.to_frame` columns (``cpu_flops``, ``target_flops``,
        ``flops_ratio``, ...); the reasons are in the table, markdown and JSON.
        With ``memory``, a row per part of kind ``memory`` comes last
        (`MemoryBreakdown.to_frame`: ``program_bytes``, ``at_peak_bytes``;
        ``sum`` and ``xla_peak`` among them). The notes and the header are in
        the table, markdown and JSON.
        """
        import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
        phases = self.to_frame().reset_index(names="name")
        phases.insert(0, "kind", "phase")
        frames = [phases]
        if self.cpu is not None:
            compared = self.comparison().to_frame().reset_index(names="name")
            compared.insert(0, "kind", "comparison")
            frames.append(compared)
        if self.layers is not None:
            layers = pd.DataFrame(layer_records(self.layers)).rename(columns={"path": "name"})
            integers = [c for c in layers.columns if c not in ("name", "backward_to_forward")]
            layers[integers] = layers[integers].astype("Int64")
            layers.insert(0, "kind", "layer")
            frames.append(layers)
        if self.memory_breakdown is not None:
            memory = self.memory_breakdown.to_frame().rename(columns={"part": "name"})
            memory.insert(0, "kind", "memory")
            frames.append(memory)
        return pd.concat(frames, ignore_index=True).to_csv(index=False)

    def to_markdown(self) -> str:
        """A markdown section: header, phase table, ratios, layers, caveats."""
        lines = [f"## {self.model}", "", describe(self), ""]
        lines.append(markdown_table(phase_frame(self)))
        lines += ["", ratio_line(self), ""]
        if self.cpu is not None:
            lines += [self.comparison().to_markdown(), ""]
        kernels = kernel_frame(self)
        if kernels is not None:
            lines += [KERNELS_TITLE, "", markdown_table(kernels), ""]
        if self.layers is not None:
            lines.append(markdown_table(layer_frame(self)))
            lines.append("")
        communication = communication_frame(self)
        if communication is not None:
            lines += [COMMUNICATION_TITLE, "", markdown_table(communication), ""]
        if self.memory_breakdown is not None:
            lines += [memory_title(self.memory_breakdown), "", markdown_table(memory_frame(self.memory_breakdown)), ""]
            workspace = workspace_frame(self.memory_breakdown)
            if workspace is not None:
                lines += [workspace_title(self.memory_breakdown), "", markdown_table(workspace), ""]
        for title, frame in timing_frames(self):
            lines += [title, "", markdown_table(frame), ""] if frame is not None else [f"- {title}"]
        if any(frame is None for _, frame in timing_frames(self)):
            lines.append("")
        lines += [f"- {c}" for c in caveats(self)]
        return "\n".join(lines).rstrip() + "\n"

    def to_table(self, width: int | None = None) -> str:
        """Plain-text tables for terminals (no colours).

        Args:
          width: the widest a line may be. None: the terminal's width when stdout
            is a terminal, else unlimited (every line at its natural width).
            Columns wrap at spaces to fit; a word (a header, a number) is never
            cut, so a table whose longest words alone are wider stays wider.
        """
        blocks: list[str | TextTable] = [describe(self), TextTable(phase_frame(self), "phases")]
        if self.cpu is not None:
            blocks += self.comparison().blocks()
        kernels = kernel_frame(self)
        if kernels is not None:
            blocks.append(TextTable(kernels, KERNELS_TITLE))
        if self.layers is not None:
            blocks.append(TextTable(layer_frame(self), "layers (from the jaxprs)"))
        communication = communication_frame(self)
        if communication is not None:
            blocks.append(TextTable(communication, COMMUNICATION_TITLE, left=("kind", "axes")))
        if self.memory_breakdown is not None:
            blocks.append(TextTable(memory_frame(self.memory_breakdown), memory_title(self.memory_breakdown),
                                    left=("what",)))
            workspace = workspace_frame(self.memory_breakdown)
            if workspace is not None:
                blocks.append(TextTable(workspace, workspace_title(self.memory_breakdown),
                                        left=("shape", "made by")))
        for title, frame in timing_frames(self):
            blocks.append(title if frame is None else TextTable(frame, title, left=("bound", "source")))
        blocks.append(ratio_line(self))
        blocks += [f"- {caveat}" for caveat in caveats(self)]
        return render(blocks, resolve_width(width))

    def _repr_markdown_(self) -> str:
        """How a notebook (IPython's display) shows the report: `to_markdown`'s tables."""
        return self.to_markdown()

    def plot(self) -> Any:
        """A matplotlib ``Figure``: per-layer bars of forward, backward and update FLOP stacked, as the
        one-model report page draws them (`xla_cost.present.plots.layer_bars`).

        Raises:
          InputError: the report has no per-layer rows (analyse with ``per_layer=True``).
        """
        if not self.layers:
            raise InputError("a report with per-layer rows", "a report without them",
                             "Analyse with per_layer=True (--per-layer).")
        rows = [(x.path, x.forward_flops, x.backward_flops, x.update_flops) for x in self.layers]
        return layer_bars(rows, f"{self.model}: FLOP per layer, batch {self.batch_size}, {self.optimizer}")

    def __str__(self) -> str:
        return self.to_table()
