"""The page ``memory``: what one training step holds per device, and the largest batch that fits.

The program's parts (trees and jaxpr) and the parts at XLA's peak (the
compiled schedule replayed) against the batch size, on small steps against
XLA's peak, under each remat policy, and the largest batch that fits the
plan's devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xla_cost.parallel.devices import device as registry_device
from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import count, pct, ratio, si, sig
from xla_cost.runs.configs import RunConfig, remat_placement
from xla_cost.study.data import StudyData, collected
from xla_cost.study.views import environment_section, regenerate_line

NAME = "memory"
TITLE = ("Training-step memory per device against the batch, remat policies, and the largest batch that "
         "fits an H100 and an A100")
ORDER = 60


def gb(value: int | float | None) -> str:
    """Bytes in GB (10⁹ bytes), four significant digits; ``—`` for None."""
    return "—" if value is None else sig(value / 1e9, 4)


def mb(value: int | float | None) -> str:
    """Bytes in MB (10⁶ bytes), four significant digits; ``—`` for None."""
    return "—" if value is None else sig(value / 1e6, 4)


def _memory_run(data: StudyData, model: str, batch: int, remat: str | None = None,
                config: Mapping[str, Any] | None = None) -> Any:
    config, options = remat_placement(model, remat, config or {})
    return data.analyse(RunConfig(model, batch, config, optimizer="adam", per_layer=True), memory=True, **options)


@collected
def memory_checks(data: StudyData) -> list[tuple[str, int, dict[str, Any], Any]]:
    """``(model, batch, config, report)`` of each small step the page checks."""
    return [(model, batch, dict(items), _memory_run(data, model, batch, config=dict(items)))
            for model, batch, items in data.plan.memory_checks]


@collected
def memory_reports(data: StudyData) -> list[tuple[str, list[Any]]]:
    """Each memory model's report (``memory=True``) at each of its batch sizes."""
    return [(model, [_memory_run(data, model, b) for b in batches])
            for model, batches in data.plan.memory_models]


@collected
def remat_reports(data: StudyData) -> list[tuple[str, Any]]:
    """The remat model under every policy."""
    from xla_cost.step.remat import REMAT_POLICIES

    if data.plan.remat_model is None:
        return []
    model, batch = data.plan.remat_model
    return [(name, _memory_run(data, model, batch, name)) for name in REMAT_POLICIES]


@collected
def fits(data: StudyData) -> list[tuple[str, str, Any]]:
    """``(model, device, FitResult)`` for each memory model on each fit device."""
    from xla_cost.runs.fit import max_batch_size

    return [(model, device, max_batch_size(model, device=device, optimizer="adam"))
            for model, _ in data.plan.memory_models for device in data.plan.fit_devices]


def build(data: StudyData) -> dict[str, bytes]:
    from xla_cost.runs.fit import DEFAULT_MEMORY_FRACTION

    lines = [
        "# Memory: what one training step holds, and the largest batch that fits",
        "",
        "Per device, in GB (10⁹ bytes), Adam, float32, one device unless said. The program's parts come from "
        "the abstract trees and the jaxpr (`xla_cost.analysis.memory`): parameters, gradients, optimizer state, model "
        "state, the batch, and the activations the backward pass keeps (the residuals of the linearised "
        "forward pass, `jax.vjp`'s jaxpr). XLA's peak is the train step compiled as one program with the "
        "parameters and optimizer state donated: `memory_analysis()`'s arguments + outputs + temporaries − "
        "aliased. The parts at XLA's peak come from replaying the compiled schedule (`xla_cost.compiled.liveness`): "
        "every buffer live when the temporaries peak, sorted by where XLA says it came from (forward "
        "buffers still held, gradients made so far, and workspace: the rest). Every figure here is the "
        "**CPU compiler's** (jax on the 2-core machine); a GPU compile assigns buffers differently (its "
        "convolutions keep fewer temporaries, and it keeps remat's recomputation). The peak, not the "
        "program's parts, decides what fits.",
        "",
    ]
    if data.plan.memory_models:
        lines += ["## Breakdown against the batch size", ""]
        for model, reports in memory_reports(data):
            rows = []
            for report in reports:
                m = report.memory_breakdown
                rows.append([
                    count(report.batch_size), gb(m.parameters), gb(m.gradients), gb(m.optimizer_state),
                    gb(m.inputs), gb(m.saved_activations), gb(m.parts_total), gb(m.peak),
                    ratio(m.parts_total / m.peak, 3) if m.peak else "—",
                ])
            top = max(reports[-1].layers or (), key=lambda l: l.saved_activation_bytes or 0, default=None)
            lines += [
                f"### {model}",
                "",
                "The program's parts:",
                "",
                pipe_table(["batch", "parameters", "gradients", "optimizer state", "batch data", "saved activations",
                            "sum of parts", "XLA peak", "parts / peak"], rows, "rrrrrrrrr"),
                "",
            ]
            peak_rows = []
            for report in reports:
                m = report.memory_breakdown
                if not m.at_peak:
                    continue
                a = m.at_peak
                arguments = a["parameters"] + a["optimizer_state"] + a["model_state"] + a["inputs"]
                peak_rows.append([
                    count(report.batch_size), gb(arguments), gb(a["saved_activations"]), gb(a["gradients"]),
                    gb(a["workspace"]), gb(a["outputs"]), gb(m.at_peak_total), gb(m.peak),
                    ratio(m.at_peak_total / m.peak, 4) if m.peak else "—",
                ])
            if peak_rows:
                last = reports[-1].memory_breakdown
                lines += [
                    "At XLA's peak (the compiled schedule replayed):",
                    "",
                    pipe_table(["batch", "arguments", "forward buffers held", "gradients made", "workspace", "outputs",
                                "sum", "XLA peak", "sum / peak"], peak_rows, "rrrrrrrrr"),
                    "",
                ]
                if last.largest_workspace:
                    biggest = ", ".join(
                        f"`{b.shape}` ({gb(b.nbytes)} GB, {('`' + b.op_name.rsplit('/', 2)[-1] + '`') if b.op_name else 'no source: made by XLA'})"
                        for b in last.largest_workspace[:3])
                    lines += [f"The largest workspace buffers at batch {reports[-1].batch_size}: {biggest}.", ""]
            if top is not None and top.saved_activation_bytes:
                lines += [f"The layer that keeps most at batch {reports[-1].batch_size}: `{top.path}`, "
                          f"{gb(top.saved_activation_bytes)} GB.", ""]
    if data.plan.memory_checks:
        rows = []
        for model, batch, config, report in memory_checks(data):
            m = report.memory_breakdown
            shape = ", ".join([f"batch {batch}", *(f"{k} {v}" for k, v in config.items())])
            first = m.largest_workspace[0] if m.largest_workspace else None
            rows.append([
                model, shape, mb(m.parts_total), mb(m.at_peak_total), mb(m.peak),
                ratio(m.parts_total / m.peak, 3) if m.peak else "—",
                ratio(m.at_peak_total / m.peak, 4) if m.peak and m.at_peak_total is not None else "—",
                mb(m.workspace), "—" if first is None else f"`{first.shape}` ({mb(first.nbytes)} MB)",
            ])
        lines += [
            "## How close the parts come to XLA's peak on small steps",
            "",
            "The seed nets and GPT-2 small at short sequences, in MB (10⁶ bytes), Adam: the program's parts "
            "(trees and jaxpr) and the parts at XLA's peak (the schedule replayed), each over XLA's peak. The "
            "program's parts miss where XLA departs from the program: its CPU max-pool backward keeps index "
            "tensors and padded copies (ConvNet), it recomputes elementwise residuals (GPT-2), and at its peak "
            "only some gradients exist. The replay names those buffers.",
            "",
            pipe_table(["model", "shape", "program's parts", "at the peak", "XLA peak", "parts / peak",
                        "at the peak / peak", "workspace at the peak", "largest workspace buffer"],
                       rows, "llrrrrrrl"),
            "",
        ]
    if data.plan.remat_model is not None:
        model, batch = data.plan.remat_model
        base = dict(remat_reports(data))["none"]
        rows = []
        for name, report in remat_reports(data):
            m = report.memory_breakdown
            extra = report.hardware_flops - report.model_flops
            rows.append([f"`{name}`", gb(m.saved_activations), gb(m.peak), si(report.model_flops),
                         si(report.hardware_flops), pct(extra / report.model_flops)])
        lines += [
            f"## Rematerialisation: {model} at batch {batch}",
            "",
            "Each policy of `--remat` (per block for the zoo's transformers, `nn.remat`): the activations kept, "
            "XLA's peak, the train step's model FLOP (without recomputation) and hardware FLOP (with it).",
            "",
            pipe_table(["policy", "saved activations", "XLA peak (CPU)", "model FLOP", "hardware FLOP",
                        "recomputed"], rows, "lrrrrr"),
            "",
            f"`full` keeps {pct(dict(remat_reports(data))['full'].memory_breakdown.saved_activations / base.memory_breakdown.saved_activations)} "
            "of the activations without remat. XLA on the CPU removes the recomputation it has memory for, so its "
            "peak barely moves; on a GPU, whose compile keeps it, the saved activations are what shrinks.",
            "",
        ]
    if data.plan.fit_devices and data.plan.memory_models:
        rows = []
        for model, device, result in fits(data):
            rows.append([model, device.upper(), gb(registry_device(device, has="memory").memory), gb(result.limit),
                         count(result.batch_size), gb(result.fits.peak if result.fits else None),
                         count(result.next_size), gb(result.does_not_fit.peak)])
        lines += [
            "## The largest batch that fits",
            "",
            f"`xla-cost fit MODEL --device NAME` (`xla_cost.max_batch_size`): usable memory = the datasheet's "
            f"capacity × {DEFAULT_MEMORY_FRACTION:g} (JAX's GPU allocator default); each batch size is compiled "
            "abstractly, the answer predicted from the batches compiled (the peak is close to affine in the "
            "batch) and checked by compiling it and the next size: it fits and the next does not (by XLA's peak).",
            "",
            pipe_table(["model", "device", "memory", "usable", "largest batch", "its peak", "next batch", "its peak"],
                       rows, "llrrrrrr"),
            "",
            "What was checked: on the CPU, that the answer fits and the next size does not, by compiling both "
            "(`tests/analysis/test_memory.py`). Not yet checked: a real run on a GPU at the predicted batch (that it runs) "
            "and at 1.25× of it (that it runs out of memory); the GPU's own buffer assignment differs from the "
            "CPU's figures here.",
            "",
        ]
    lines += [*environment_section(data), regenerate_line(), ""]
    return {f"{NAME}.md": markdown_file("\n".join(lines))}
