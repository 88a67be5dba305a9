"""The page of one model: `model_files` of a `xla_cost.Report` analysed per layer.

``<model>.md`` holds the phase table, the per-layer table and a stacked bar
figure of forward, backward and update FLOP per layer
(``figures/<model>-layers.png``); `xla_cost.study.write.write_report` writes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xla_cost.errors import InputError
from xla_cost.present.figures import png
from xla_cost.present.plots import MAX_LAYERS as MAX_FIGURE_LAYERS
from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import count, ratio, slug
from xla_cost.step import phases
from xla_cost.study.pages import PAGES

if TYPE_CHECKING:
    from xla_cost.analysis.report import Report

__all__ = ["MAX_FIGURE_LAYERS", "model_files"]


def model_files(report: Report) -> dict[str, bytes]:
    """The page of one `Report` (``NAME.md``) and its per-layer figure."""
    if report.layers is None:
        raise InputError(
            "a Report with per-layer rows", f"the report of {report.model!r} without them",
            "Analyse with per_layer=True (xla_cost.analyze(..., per_layer=True)).",
        )
    name = slug(report.model)
    if name in PAGES:
        name = f"model-{name}"
    figure_file = f"figures/{name}-layers.png"
    config = ", ".join(f"{k}={v}" for k, v in report.config.items())
    lines = [
        f"# {report.model}: one training step",
        "",
        f"`{report.model}({config})`, batch {report.batch_size}, optimizer {report.optimizer}, {report.dtype}"
        + (f" (parameters {report.param_dtype})" if report.param_dtype not in (None, report.dtype) else "")
        + f", {count(report.parameters)} parameters; {_compiled_for(report)}, jax {report.jax_version}, counter "
        f"`{report.counter}`.",
        "",
        "## Phases",
        "",
    ]
    rows = []
    for phase in phases.NAMES:
        costs = report.phases[phase]
        rows.append([
            phase, count(costs.flops) + (" *" if costs.loop_corrected else ""), count(costs.xla_flops),
            count(costs.jaxpr_flops), count(costs.transcendentals), count(costs.bytes_accessed),
            count(costs.memory.temp_bytes) if costs.memory.temp_bytes is not None else "—", costs.derivation,
        ])
    lines += [
        pipe_table(["phase", "FLOP", "XLA FLOP", "jaxpr FLOP", "transcendentals", "bytes accessed", "temp bytes",
                    "how"], rows, "lrrrrrrl"),
        "",
        f"backward / forward = {ratio(report.backward_to_forward)}; (backward + update) / forward = "
        f"{ratio(report.backward_with_update_to_forward)}. `FLOP` is XLA's compiled count (corrected for loop "
        "iterations where marked `*`), the jaxpr's where XLA has none; a multiply-add is 2 FLOP.",
        "",
        "## Layers",
        "",
        f"![Forward, backward and update FLOP per layer of {report.model}]({figure_file})",
        "",
    ]
    layer_rows = []
    looped = any(layer.trip_count > 1 for layer in report.layers)
    for layer in report.layers:
        cells = [f"`{layer.path}`", count(layer.parameters)]
        if looped:
            cells.append(f"×{layer.trip_count}")
        cells += [count(layer.forward_flops), count(layer.backward_flops), ratio(layer.backward_to_forward),
                  count(layer.update_flops), count(layer.transcendentals)]
        layer_rows.append(cells)
    header = ["layer", "parameters", *(["runs"] if looped else []), "forward FLOP", "backward FLOP",
              "backward / forward", "update FLOP", "transcendentals"]
    lines += [
        pipe_table(header, layer_rows, "l" + "r" * (len(header) - 1)),
        "",
        "Per-layer figures are counted from the jaxprs with XLA's conventions; each column adds up to its phase's "
        "jaxpr FLOP. `(remainder)`: the loss, glue in the root module, shared scalars.",
        "",
    ]
    caveats = list(report.notes)
    if report.unsupported:
        caveats.append("no cost rule (not in jaxpr counts): "
                       + ", ".join(f"{k} ×{v}" for k, v in sorted(report.unsupported.items())))
    if caveats:
        lines += ["## Notes", "", *[f"- {c}" for c in caveats], ""]
    lines.append("Written by `xla_cost.write_report(report, ...)` / `xla-cost report --model ...`.")
    return {f"{name}.md": markdown_file("\n".join(lines)), figure_file: _fig_model_layers(report)}


def _compiled_for(report: Report) -> str:
    """Where the programs were compiled: the target device by name (``compiled for the NVIDIA
    H100 SXM (`h100`, its own compiler, no such device here)``), else the backend."""
    if report.target is None:
        return f"{report.backend} backend"
    from xla_cost.timemodel.devices import target  # the registry, loaded only for a target's page

    try:
        title = target(report.target).title
    except InputError:  # a stored report of a target this version no longer knows: its name alone
        title = report.target
    return f"compiled for the {title} (`{report.target}`, by its own compiler, with no such device here)"


def _fig_model_layers(report: Report) -> bytes:
    return png(report.plot)
