"""The renderings of a `xla_cost.Report`: its tables (phases, layers, memory,
communication, timing), its header line, ratio line and caveats, as the
report's ``to_table``, ``to_markdown`` and ``__str__`` show them. Data stays
raw in the report; formatting (units, digits) happens only here. (A
report's type is not imported: `xla_cost.analysis.report` imports this module.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xla_cost.analysis.memory import PEAK_PARTS
from xla_cost.compiled.kernels import CATEGORIES, summarize_kernels
from xla_cost.present.units import (
    bytes_column, bytes_unit, count_column, duration, flop_column, number, per_parameter, scaled, short_count,
)
from xla_cost.step import phases as _phases

if TYPE_CHECKING:  # pandas (0.3 s to import) loads where a table is made, not with the analysis
    import pandas as pd

__all__ = [
    "describe",
    "param_dtype",
    "phase_frame",
    "kernel_frame",
    "KERNELS_TITLE",
    "PER_PARAMETER_HEADER",
    "flop_per_parameter",
    "fused_update",
    "FUSION_NOTE_GAP",
    "per_unit",
    "jaxpr_devices",
    "comparison_header",
    "comparison_note",
    "layer_frame",
    "MEMORY_WHAT",
    "memory_unit",
    "memory_title",
    "memory_frame",
    "workspace_frame",
    "workspace_title",
    "COMMUNICATION_TITLE",
    "communication_frame",
    "timing_frames",
    "ratio_line",
    "caveats",
]


def describe(report: Any) -> str:
    config = ", ".join(f"{k}={v}" for k, v in report.config.items())
    where = report.backend if report.target is None else f"target {report.target} ({report.backend}, deviceless)"
    active = "" if report.active_parameters is None else (
        f", {report.active_parameters:,} ({short_count(report.active_parameters)}) active per token")
    # no parameter is a count of none found (a step that makes its own inside itself: analyze refuses a model
    # without any), not a model of none: unknown, as its note says
    counted = (f"{report.parameters:,} ({short_count(report.parameters)}) parameters" if report.parameters
               else "parameters unknown (none in the arguments)")
    batch = f"batch {report.batch_size}" if report.batch_size else "no batch in the arguments"  # (0 is refused)
    return (
        f"{report.model}({config}) {batch}, {report.optimizer}, "
        f"{report.dtype}{param_dtype(report)}, {counted}{active}, {where}, "
        f"jax {report.jax_version}, counter {report.counter}"
    )


KERNELS_TITLE = "kernels of the target's programs (per device; launches with loops multiplied out)"


def kernel_frame(report: Any) -> pd.DataFrame | None:
    """Per compiled phase of a compile target's report: its kernels by category
    (`xla_cost.compiled.kernels.summarize_kernels`), the asynchronous
    collectives and what runs beside them, and the compiler's own time
    estimate where it gives one; None without a target."""
    import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
    rows = []
    for phase in report.phase_names:
        listed = report.phases[phase].kernel_list
        if listed is None:
            continue
        summary = summarize_kernels(listed)
        row: dict[str, Any] = {"phase": phase, "launches": f"{summary.launches:,}"}
        for category in CATEGORIES:
            row[category] = f"{summary.by_category.get(category, 0):,}"
        pairs = summary.async_pairs
        row["async (overlapped)"] = f"{len(pairs)} ({sum(len(p.overlaps) for p in pairs):,})" if pairs else "0"
        seconds = report.phases[phase].optimal_seconds
        row["compiler's time"] = "n/a" if seconds is None else duration(seconds)
        rows.append(row)
    return pd.DataFrame(rows).set_index("phase") if rows else None


def param_dtype(report: Any) -> str:
    if report.param_dtype in (None, report.dtype):
        return ""
    return f" (parameters {report.param_dtype})"


def phase_frame(report: Any) -> pd.DataFrame:
    """The phases' figures, formatted: each column in one unit, or each cell in
    its own where the column spans orders of magnitude (`count_column`)."""
    import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
    phases = [report.phases[p] for p in report.phase_names]
    flop, show_flop = flop_column([v for c in phases for v in (c.flops, c.xla_flops, c.jaxpr_flops)])
    t_unit, show_t = count_column([c.transcendentals for c in phases])
    b_unit, show_b = bytes_column([c.bytes_accessed for c in phases])
    m_unit, show_m = bytes_column([c.memory.temp_bytes for c in phases])
    devices = jaxpr_devices(report)
    whole = f" ({devices} devices)" if devices > 1 else ""
    rows = []
    for phase, c in zip(report.phase_names, phases):
        ratio = c.corrected_to_jaxpr  # a scanned program's loop-corrected figure, as the FLOP column's
        row = {"phase": phase, f"{flop}": show_flop(c.flops) + (" *" if c.loop_corrected else "")}
        if report.counter != "jaxpr":  # without compiling there is nothing to compare
            row[f"XLA {flop}"] = show_flop(c.xla_flops)
            row[f"jaxpr {flop}{whole}"] = show_flop(c.jaxpr_flops)
            # like with like: one device's XLA figure times the devices against the jaxpr's whole step
            row[comparison_header(devices)] = "n/a" if ratio is None else f"{ratio * devices:.3f}"
        per = flop_per_parameter(report, phase)
        row[PER_PARAMETER_HEADER] = "unknown" if per is None else per_parameter(per)
        fused = fused_update(report) if phase == "update" else None
        if fused is not None:  # the optimizer's arithmetic once, beside XLA's count with its fusions' copies
            row[PER_PARAMETER_HEADER] += f" (jaxpr {per_parameter(fused[1])})"
        row[per_unit("transcendentals", t_unit)] = show_t(c.transcendentals)
        if report.counter != "jaxpr":
            row[per_unit("bytes accessed", b_unit)] = show_b(c.bytes_accessed)
            row[per_unit("temp", m_unit)] = show_m(c.memory.temp_bytes)
        rows.append(row)
    return pd.DataFrame(rows).set_index("phase")


PER_PARAMETER_HEADER = "FLOP / parameter"
"""The phase table's column of each phase's FLOP over the parameters: the
update's is what the optimizer does per parameter it trains (SGD 2: a multiply and a
subtract; Adam 13); a transformer's train step about 6 per token (6N) plus it."""


def flop_per_parameter(report: Any, phase: str) -> float | None:
    """``phase``'s FLOP over the report's parameters (None: either unknown or no
    parameters); the update's over the parameters it trains (`Report.trained_parameters`,
    where only some are: a LoRA's adapters), or, where it also runs on frozen ones' zero
    gradients, over every parameter it updates (`Report.updated_parameters`). On a mesh
    whose jaxpr counts the whole step
    (`jaxpr_devices`), its jaxpr figure over all the parameters; else the phase's headline
    figure (one device's, over the parameters it holds)."""
    c = report.phases[phase]
    flops = c.jaxpr_flops if jaxpr_devices(report) > 1 else c.flops
    over = _per(report, phase)
    return None if flops is None or not over else flops / over


def _per(report: Any, phase: str) -> int:
    """The parameters `flop_per_parameter` divides ``phase``'s FLOP by."""
    if phase == "update" and getattr(report, "trained_parameters", None):
        return getattr(report, "updated_parameters", None) or report.trained_parameters
    return report.parameters


FUSION_NOTE_GAP = 0.05
"""How far XLA's FLOP of a program may be from its complete jaxpr count before it is said: by
`xla_cost.analysis.costs.fusion_gap_note` (why), and for the update by its FLOP / parameter cell
(`fused_update`)."""


def fused_update(report: Any) -> tuple[float, float] | None:
    """(the update's FLOP per parameter as the phase table gives it, the jaxpr's) where the first is
    XLA's count of the compiled update and more than `FUSION_NOTE_GAP` from the jaxpr's: XLA's
    fusions compute a cheap producer again in each fusion that reads it, and count every copy
    (``optax.MultiSteps(adam)``: about 35 a parameter against the 20 the optimizer's arithmetic
    takes), which the jaxpr counts once, as `analyze_step`'s update (its parts are the jaxpr's)
    does. None otherwise (a user step's parts, a jaxpr count, a mesh's jaxpr figure)."""
    c = report.phases.get("update")
    if (c is None or report.counter == "jaxpr" or jaxpr_devices(report) > 1 or c.flops is None
            or not c.jaxpr_flops or c.sources.get("flops", "xla") == "jaxpr" or not _per(report, "update")
            or abs(c.flops - c.jaxpr_flops) <= FUSION_NOTE_GAP * c.jaxpr_flops):
        return None
    return c.flops / _per(report, "update"), c.jaxpr_flops / _per(report, "update")


def jaxpr_devices(report: Any) -> int:
    """The devices whose work a report's jaxpr figures count: all of a sharded
    step's (``sharding["jaxpr"] == "step"``, the default), or 1 where they are one
    device's (a ``pmap`` or ``shard_map`` body, ``"device"``)."""
    if not report.sharding or report.sharding.get("jaxpr", "step") == "device":
        return 1
    return report.devices


def comparison_header(devices: int) -> str:
    """The phase table's column comparing XLA's FLOP with the jaxpr's, like with
    like: one device's XLA figure times the devices the jaxpr figure counts."""
    return "XLA / jaxpr" if devices == 1 else f"XLA x {devices} / jaxpr"


def comparison_note(devices: int) -> str | None:
    """What `comparison_header`'s column means on a mesh (None on one device)."""
    if devices == 1:
        return None
    return (f"{comparison_header(devices)}: the {devices} devices' XLA FLOP (loop-corrected where marked *) over "
            f"the jaxpr's count of the whole "
            f"step: 1 where the work is split over the devices, {devices} where every device does all of it "
            "(a replicated update)")


def per_unit(name: str, prefix: str) -> str:
    """A column's header: ``transcendentals (M)``, or plain where its counts are
    fewer than a thousand or each cell has its unit (`count_column`)."""
    return f"{name} ({prefix})" if prefix else name


def layer_frame(report: Any) -> pd.DataFrame:
    import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
    layers = report.layers or ()
    looped = any(layer.trip_count > 1 for layer in layers)
    remat = any(layer.recomputed_flops for layer in layers)  # a column only where some block recomputes
    # forward and backward in one unit (their ratio is read across), the update in its own; a column
    # whose rows span orders of magnitude gives each cell its own prefix
    flop, show = flop_column([v for layer in layers for v in (layer.forward_flops, layer.backward_flops)])
    u_flop, show_u = flop_column([layer.update_flops for layer in layers])
    t_unit, show_t = count_column([layer.transcendentals for layer in layers])
    s_unit, show_s = bytes_column([layer.saved_activation_bytes for layer in layers], 2)
    rows = []
    for layer in layers:
        ratio = layer.backward_to_forward
        row = {"layer": layer.path, "parameters": "unknown" if layer.parameters is None else f"{layer.parameters:,}"}
        if looped:
            row["runs"] = f"x{layer.trip_count}"
        row.update(
            {
                f"forward {flop}": show(layer.forward_flops),
                f"backward {flop}": show(layer.backward_flops),
                **({f"recomputed {flop}": show(layer.recomputed_flops)} if remat else {}),  # part of backward
                "bwd / fwd": "n/a" if ratio is None else f"{ratio:.3f}",
                f"update {u_flop}": show_u(layer.update_flops),
                per_unit("transcendentals", t_unit): show_t(layer.transcendentals),
            }
        )
        if any(other.saved_activation_bytes is not None for other in layers):
            row[per_unit("saved for bwd", s_unit)] = show_s(layer.saved_activation_bytes)
        rows.append(row)
    return pd.DataFrame(rows).set_index("layer")


MEMORY_WHAT = {
    "parameters": "parameters", "gradients": "gradients (at the peak: those made so far)",
    "optimizer_state": "optimizer state", "model_state": "model state (batch statistics, step counters, RNG keys, an EMA)",
    "inputs": "batch (inputs, targets)",
    "saved_activations": "kept for the backward pass (program: jaxpr residuals; peak: forward buffers held)",
    "workspace": "XLA's other temporaries (cotangents, copies, indices)",
    "outputs": "returned outside the donated buffers (the loss, metrics; the new state too where not donated)",
}


def outputs_what(breakdown: Any) -> str:
    """What the ``outputs`` row holds: the results outside the donated buffers, which are the loss
    and metrics where the step donates its state, every result (the new state too) where nothing is."""
    donated = getattr(breakdown, "donated", None)
    if donated is None:
        return MEMORY_WHAT["outputs"]
    if donated:
        return "returned outside the donated buffers (the loss, metrics: the returned arrays - aliased)"
    return "returned, nothing donated: every result, the new state with the loss (XLA's outputs)"


def memory_unit(breakdown: Any) -> tuple[float, str]:
    return bytes_unit([*breakdown.parts.values(), *breakdown.at_peak.values(), breakdown.peak, breakdown.parts_total])


def memory_title(breakdown: Any) -> str:
    where = "one device" if breakdown.devices == 1 else f"each of {breakdown.devices} devices"
    return f"memory of the train step on {where} ({memory_unit(breakdown)[1]})"


def memory_frame(breakdown: Any) -> pd.DataFrame:
    """Each part as the program has it (trees and jaxpr) and as XLA holds it at
    its peak (the compiled schedule replayed); their sums; XLA's peak."""
    import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
    program, at_peak = {**breakdown.parts, "outputs": getattr(breakdown, "outputs", None)}, breakdown.at_peak
    scale, name = memory_unit(breakdown)
    replayed, written = f"at XLA's peak ({name})", f"program ({name})"
    rows = [{"part": key, "what": outputs_what(breakdown) if key == "outputs" else MEMORY_WHAT[key],
             written: scaled(program[key], scale, 1) if key in program else "—",
             replayed: scaled(at_peak[key], scale, 1) if at_peak else "unknown"}
            for key in PEAK_PARTS]
    peak = breakdown.peak
    total = breakdown.at_peak_total
    rows += [
        {"part": "sum", "what": "the parts", written: scaled(breakdown.parts_total, scale, 1),
         replayed: scaled(total, scale, 1)},
        {"part": "xla_peak", "what": "XLA: arguments + outputs + temporaries - donated",
         written: scaled(peak, scale, 1), replayed: scaled(peak, scale, 1)},
        {"part": "sum / peak", "what": "how far the parts are from XLA's peak",
         written: "unknown" if not peak else f"{breakdown.parts_total / peak:.3f}",
         replayed: "unknown" if not peak or total is None else f"{total / peak:.3f}"},
    ]
    return pd.DataFrame(rows).set_index("part")


def workspace_frame(breakdown: Any) -> pd.DataFrame | None:
    """The largest workspace buffers live at XLA's peak (None: not replayed)."""
    import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
    if not breakdown.largest_workspace:
        return None
    rows = [{"buffer": b.instruction, "shape": b.shape, "MB": number(b.nbytes, 1e6, 2),
             "made by": b.op_name or "(XLA, no source)"} for b in breakdown.largest_workspace]
    return pd.DataFrame(rows).set_index("buffer")


def workspace_title(breakdown: Any) -> str:
    where = f" (during {breakdown.peak_instruction})" if breakdown.peak_instruction else ""
    return f"largest workspace buffers at XLA's peak{where}"


COMMUNICATION_TITLE = "communication per device (collectives of the compiled programs)"


def communication_frame(report: Any) -> pd.DataFrame | None:
    """The collectives of each compiled phase of a sharded report, by kind,
    mesh axes and group size: how many different ones (by size and layer; a
    program's instructions of one size and layer are one), their runs per step
    (each instruction times its loop's trips) and bytes per device (None for a
    report without collectives)."""
    import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
    rows = []
    # the programs of analyze (backward is grad - forward), or the parts of a user's step (analyze_step)
    shown = _phases.STEP_PARTS if "other" in report.phases else ("forward", "grad", "update")
    for phase in shown:
        groups: dict[tuple[str, tuple[str, ...], int | None], list[Any]] = {}
        for c in report.phases[phase].communication:
            groups.setdefault((c.kind, c.axes, c.group_size), []).append(c)
        for (kind, axes, size), items in groups.items():
            runs = None if any(c.executions is None for c in items) else sum(c.executions for c in items)
            moved = None if runs is None else sum(c.bytes * c.executions for c in items)
            rows.append({
                "phase": phase, "kind": kind, "axes": ",".join(axes) or "?",
                "group": "unknown" if size is None else str(size), "sizes x layers": len(items),
                "runs / step": "unknown" if runs is None else f"{runs:,}",
                "MB / device": number(moved, 1e6, 1),
            })
    if not rows:
        return None
    return pd.DataFrame(rows).set_index("phase")


def timing_frames(report: Any) -> list[tuple[str, pd.DataFrame | None]]:
    """The timing's tables with their titles, then its notes (a title without a
    table): the phases; with per-layer rows, the layers' measured time; the
    separate programs' cross-check."""
    import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
    timing = report.timing
    if timing is None or not timing.phases:
        return []
    out: list[tuple[str, pd.DataFrame | None]] = [(timing.title(), timing.frame())]
    layers = timing.layer_table(report.layers) if report.layers is not None else []
    if layers:
        split = timing.split
        title = (f"measured time per layer in the one-program step (from a trace of {split.traced_steps} "
                 f"steps; the idle time apart; FLOP counted, bytes of the compiled instructions)")
        out.append((title, pd.DataFrame([{
            "layer": r["path"],
            **{f"{p} ms": f"{r[f'{p}_s'] * 1e3:,.3f}" for p in _phases.STEP_PARTS if f"{p}_s" in r},
            "total ms": f"{r['total_s'] * 1e3:,.3f}",
            "95% interval ms": f"{r['low_s'] * 1e3:,.3f} – {r['high_s'] * 1e3:,.3f}",
            "share": "" if r["share"] is None else f"{r['share']:.1%}",
            "GFLOP": number(r["flops"], 1e9),
            "TFLOP/s": number(r["flops_per_s"], 1e12),
            "GB/s": number(r["bytes_per_s"], 1e9, 1),
            "bound": r["bound"] or "",
        } for r in layers]).set_index("layer")))
    if timing.separate:
        gap = timing.dispatch_gap_s
        title = "cross-check: each program run on its own and waited for" + (
            "" if gap is None else f"; dispatch gap {gap * 1e3:,.3f} ms a step")
        out.append((title, pd.DataFrame([{
            "program": phase,
            "median ms": f"{t.median_s * 1e3:,.3f}",
            "95% interval ms": "" if t.low_s is None else f"{t.low_s * 1e3:,.3f} – {t.high_s * 1e3:,.3f}",
            "min ms": "" if t.min_s is None else f"{t.min_s * 1e3:,.3f}",
            "IQR ms": "" if t.iqr_s is None else f"{t.iqr_s * 1e3:,.3f}",
            "runs": t.repeats,
            "source": t.source,
            "in the step ms": f"{timing.phases[phase].median_s * 1e3:,.3f}" if phase in timing.phases else "",
        } for phase in _phases.NAMES if (t := timing.separate.get(phase)) is not None]).set_index("program")))
    out += [(f"timing: {note}", None) for note in timing.notes]
    return out


def ratio_line(report: Any) -> str:
    def show(value: float | None) -> str:
        return "unknown" if value is None else f"{value:.3f}"

    line = (
        f"backward/forward = {show(report.backward_to_forward)}; "
        f"(backward + update)/forward = {show(report.backward_with_update_to_forward)}"
    )
    if report.timing is not None and report.timing.backward_to_forward is not None:
        line += f"; measured time backward/forward = {report.timing.backward_to_forward:.3f}"
    return line


def caveats(report: Any) -> list[str]:
    caveats = []
    if any(report.phases[p].loop_corrected for p in report.phase_names):
        caveats.append(
            "* loop-corrected: XLA counts a loop body once; the iterations it missed are "
            "added from the jaxpr (XLA's raw figure in the XLA column)"
        )
    fused = fused_update(report)
    if fused is not None:
        xla_per, jaxpr_per = (per_parameter(v) for v in fused)
        caveats.append(
            f"update's {PER_PARAMETER_HEADER}: {xla_per} is XLA's count of the compiled update, its fusions' "
            "copies of cheap producers included (each computed again in every fusion that reads it; the update's "
            f"notes give any other reason); (jaxpr {jaxpr_per}) is the optimizer's arithmetic counted once, as "
            "analyze_step counts a step's update")
    note = comparison_note(jaxpr_devices(report)) if report.counter != "jaxpr" else None
    caveats += [note] if note else []
    caveats += list(report.notes)
    if report.unsupported:
        names = ", ".join(f"{k} x{v}" for k, v in sorted(report.unsupported.items()))
        caveats.append(f"no cost rule (not in jaxpr counts): {names}")
    return caveats
