"""The page ``memory``: what one training step holds per device, and the largest batch that fits.

The program's parts (trees and jaxpr) and the parts at XLA's peak (the
compiled schedule replayed) against the batch size, on small steps against
XLA's peak, under each remat policy, and the largest batch that fits the
plan's devices; then the CPU proxy against the H100's own compiler
(`TARGET`, `xla_cost.compiled.targets`): the small steps' peaks and
temporaries side by side, and the largest batch each finds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xla_cost.timemodel.devices import device as registry_device
from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import count, pct, ratio, si, sig
from xla_cost.runs.configs import RunConfig, remat_placement
from xla_cost.study.data import StudyData, collected
from xla_cost.study.views import data_link, environment_section, regenerate_line

TARGET = "h100"
"""The compile target the page sets beside the CPU proxy (`xla_cost.timemodel.devices.target`)."""

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


def target_missing() -> str | None:
    """None where `TARGET`'s compiler (jax's CUDA plugin) is installed; else the command that installs it."""
    from xla_cost import plugins

    return plugins.install_command("cuda") if plugins.cuda_plugin() is None else None


def _target_steps(data: StudyData) -> list[tuple[str, int, dict[str, Any], str]]:
    """``(model, batch, config, dtype)`` of each step compiled by both: the plan's
    small checks in float32, and the last again in bfloat16 (the CPU widens it)."""
    steps = [(model, batch, dict(items), "float32") for model, batch, items in data.plan.memory_checks]
    return steps + [(*steps[-1][:3], "bfloat16")] if steps else []


@collected
def target_checks(data: StudyData) -> list[tuple[str, int, dict[str, Any], str, Any, Any]]:
    """``(model, batch, config, dtype, CPU breakdown, TARGET breakdown)`` of each step of
    `_target_steps`: the donated train step compiled by each (the CPU's float32 steps are
    `memory_checks`'; the rest `xla_cost.runs.fit.breakdown_at`); the target's None where
    its compiler is not installed."""
    from xla_cost.analysis.options import check_target
    from xla_cost.compiled import targets
    from xla_cost.runs.fit import breakdown_at

    found = None if target_missing() else check_target(TARGET)
    checked = {(model, batch, tuple(config.items())): report.memory_breakdown
               for model, batch, config, report in memory_checks(data)}
    rows = []
    for model, batch, config, dtype in _target_steps(data):
        run = RunConfig(model, batch, config, optimizer="adam", dtype=dtype)
        cpu = checked.get((model, batch, tuple(config.items()))) if dtype == "float32" else None
        cpu = breakdown_at(run, batch) if cpu is None else cpu
        target = None
        if found is not None:
            with targets.use(found):
                target = breakdown_at(run, batch)
        rows.append((model, batch, config, dtype, cpu, target))
    return rows


@collected
def target_fits(data: StudyData) -> list[tuple[str, Any]]:
    """``(model, FitResult)``: the largest batch on `TARGET` by its own compiler, for each
    memory model (empty without its compiler, or when the plan fits no device)."""
    from xla_cost.runs.fit import max_batch_size

    if target_missing() or not data.plan.fit_devices:
        return []
    return [(model, max_batch_size(model, target=TARGET, optimizer="adam")) for model, _ in data.plan.memory_models]


def _buffer(breakdown: Any) -> str:
    """The largest workspace buffer live at a compiled step's peak, and where it comes from."""
    first = breakdown.largest_workspace[0] if breakdown is not None and breakdown.largest_workspace else None
    if first is None:
        return "—"
    where = f"`{first.op_name.rsplit('/', 2)[-1]}`" if first.op_name else f"{first.opcode}, no source"
    return f"`{first.shape}` ({mb(first.nbytes)} MB, {where})"


def _bf16_figures(data: StudyData) -> str:
    """The bfloat16 step's temporaries on each, where the page compiled one: ``(here: ...)``."""
    found = [(m, c, t) for m, _, _, dtype, c, t in target_checks(data) if dtype == "bfloat16" and t is not None]
    if not found or found[0][1].temp_bytes is None or found[0][2].temp_bytes is None:
        return ""
    model, cpu, target = found[0]
    return (f" (the bfloat16 {model} above: {mb(cpu.temp_bytes)} MB of temporaries on the CPU, "
            f"{mb(target.temp_bytes)} MB on the {TARGET.upper()})")


def target_section(data: StudyData) -> list[str]:
    """The CPU proxy against `TARGET`'s compiler: the small steps, the largest batches, the reasons."""
    from xla_cost.timemodel.devices import target as compile_target

    missing = target_missing()
    title = compile_target(TARGET).title
    lines = [
        f"## The CPU proxy against the {title}'s own compiler",
        "",
        f"Every figure above is the CPU compiler's: a proxy for the GPU's. `--target {TARGET}` compiles the same "
        f"step with the {title}'s own compiler (XLA's GPU compiler through jax's CUDA plugin, for a "
        "`GpuTargetConfig` written from the datasheet, with no GPU here; `xla_cost.compiled.targets`), and its "
        "`memory_analysis()` is read as the CPU's is: arguments + outputs + temporaries − aliased, the parameters "
        "and Adam state donated.",
        "",
    ]
    if missing:
        return lines + [f"The {title} column needs jax's CUDA plugin, not installed where this page was built: "
                        f"`{missing}`.", ""]
    rows = []
    for model, batch, config, dtype, cpu, target in target_checks(data):
        shape = ", ".join([f"batch {batch}", *(f"{k} {v}" for k, v in config.items()), dtype])
        rows.append([
            model, shape, mb(cpu.peak), mb(target.peak), ratio(target.peak / cpu.peak, 3) if cpu.peak and target.peak else "—",
            mb(cpu.temp_bytes), mb(target.temp_bytes), _buffer(cpu), _buffer(target),
        ])
    if rows:
        lines += [
            "### Small steps: peak and temporaries (MB, 10⁶ bytes)",
            "",
            "The small steps above, compiled by each (small shapes: the page is rebuilt by `xla-cost report all` "
            "on 2 cores, and each GPU compile takes seconds here), and the last again in bfloat16:",
            "",
            pipe_table(["model", "shape", "CPU peak", f"{TARGET.upper()} peak", f"{TARGET.upper()} / CPU",
                        "CPU temporaries", f"{TARGET.upper()} temporaries", "CPU's largest workspace buffer",
                        f"{TARGET.upper()}'s largest workspace buffer"], rows, "llrrrrrll"),
            "",
        ]
    fitted = target_fits(data)
    proxies = {model: result for model, device, result in fits(data) if device == TARGET}
    if fitted:
        rows = []
        for model, result in fitted:
            proxy = proxies.get(model)
            rows.append([
                model, "—" if proxy is None else count(proxy.batch_size),
                "—" if proxy is None or proxy.fits is None else gb(proxy.fits.peak),
                count(result.batch_size), gb(result.fits.peak if result.fits else None),
                gb(result.fits.unsized_scratch if result.fits else None),
                "—" if proxy is None or not proxy.batch_size else ratio(result.batch_size / proxy.batch_size, 2),
                "—" if result.fits is None or result.fits.rematerialized is None
                else count(result.fits.rematerialized),
                count(len(result.tried)),
            ])
        lines += [
            f"### The largest batch on an {title}: from the CPU proxy and from its compiler",
            "",
            f"`xla-cost fit MODEL` (the CPU's peaks against the {title}'s memory) beside `xla-cost fit MODEL "
            f"--target {TARGET}` (its compiler's peaks), the usable memory the same ({gb(fitted[0][1].limit)} "
            "GB); each batch the search tried is a full compile of the train step (the analyses cache keeps "
            "them: a rebuilt page compiles nothing again).",
            "",
            pipe_table(["model", "CPU proxy: largest batch", "its CPU peak", f"{TARGET.upper()}'s compiler: "
                        "largest batch", f"its {TARGET.upper()} peak", "cuDNN workspaces allowed",
                        f"{TARGET.upper()} / CPU", "instructions recomputed", "compiles"],
                       rows, "lrrrrrrrr"),
            "",
        ]
    lines += [
        "Why the two differ:",
        "",
        "- **Buffer assignment and scheduling.** Each compiler orders the step and packs its buffers its own "
        "way. The GPU's applies each parameter's Adam update in place right after its gradient is made, so "
        "the gradients never all exist at once, and it overwrites elementwise results in place (a relu's "
        "backward masks the incoming gradient in its own buffer); for a two-layer MLP its peak is the "
        "arguments and one layer's backward working set, to within 2 KB (`tests/runs/test_fit_target.py`), "
        "where the CPU's keeps a third hidden-sized buffer.",
        "- **Layouts.** The CPU copies and transposes operands into the layouts its kernels want (the "
        "`copy` buffers in its workspace); the GPU lays arrays out for its matrix units and pads dimensions to "
        "their tiles (GPT-2's vocabulary of 50,257 is 50,304 in its embedding's buffers), and copies a donated "
        "parameter that is still read after its in-place update.",
        "- **bfloat16.** The CPU has no bfloat16 arithmetic: XLA widens it to float32 around its "
        "convolutions, dots and reductions, buffers the GPU, which computes in bfloat16, never holds"
        + _bf16_figures(data) + ".",
        "- **Library calls and their workspace.** The GPU's matrix products and convolutions are library or "
        "Triton kernels: a split-K product keeps a partial-sum buffer per split, and a cuDNN convolution "
        "returns a scratch buffer beside its result. Compiled with no GPU here, XLA picks the kernels by its "
        "heuristics, without autotuning, and gives each cuDNN convolution an empty scratch (`u8[0]`): a real "
        "run's autotuned algorithms add workspace, so for convolutions the target's peak is a floor, and `fit` "
        "judges a batch by it plus the largest convolution's operands and result (the *cuDNN workspaces "
        "allowed* above; without them ResNet-50's answer in a tenth of an H100 ran out of memory there, "
        "`reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-8.json`, and the workspaces measured on "
        "an H200 took 0 to 0.87 of the allowance, `reports/data/conv_workspaces_nvidia-h200_2026-11-26.json`). "
        "The CPU's are Eigen and oneDNN calls, with neither.",
        f"- **The compiler's own limit.** Told the limit JAX's allocator gives a program on the {title} (as a "
        "real device's compile is told it), the GPU's compiler rematerialises a step that outgrows it: past "
        "that point its peaks stay near the limit while the batch grows (the *instructions recomputed* above: "
        "such a batch runs, slower than with the memory), until the pass says it cannot get under its own "
        "limit, set a little under the allocator's. Such a program is compiled again with cuBLAS products, as "
        "the real devices' autotuners chose them (with Triton products the deviceless compile recomputes far "
        "more than a real H200's did: `reports/data/device_check_nvidia-h200_2026-11-26-2.json`), and judged, "
        "as every batch, by its final peak against the allocator's limit: a real H100 ran BERT-base after its "
        "own compile fell short (`reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-4.json`). Fit's "
        "search needs more compiles there. The CPU's compiler never rematerialises.",
        "",
    ]
    return lines


def workspace_section(data: StudyData) -> list[str]:
    """The cuDNN workspaces a real GPU compile gave convolutional train steps, against
    the allowance `fit` makes for them (the latest ``conv_workspaces`` file)."""
    latest = data.latest("conv_workspaces")
    if latest is None:
        return []
    path, frame = latest
    rows, used = [], []
    for case in frame.to_dict(orient="records"):
        added = case["real_peak_bytes"] - case["deviceless_peak_bytes"]
        allowance = case["allowance_bytes"]
        share = added / allowance if allowance else None
        if share is not None and case["convolutions"] > 2:  # a convolutional network, not one patch embedding
            used.append((share, f"{case['model']} batch {case['batch']} {case['dtype']}"))
        rows.append([
            f"{case['model']} batch {case['batch']} {case['dtype']}", count(case["convolutions"]),
            mb(case["deviceless_peak_bytes"]), mb(case["real_peak_bytes"]), mb(added), mb(allowance),
            "—" if share is None else ratio(share, 2),
            ratio(allowance / case["deviceless_peak_bytes"], 3) if case["deviceless_peak_bytes"] else "—",
            mb(case["largest_workspace_bytes"]),
        ])
    device = frame["device"].iloc[0] if "device" in frame.columns and len(frame) else "a GPU"
    lines = [
        f"### Convolutions' workspaces on an {device}",
        "",
        f"Each train step compiled on the {device} and, without it, for its target ({data_link(data, path)}, "
        "`python benchmarks/conv_workspaces.py`; MB, 10⁶ bytes): the real peak less the deviceless one is what "
        "the autotuned convolutions' workspaces add, against `fit`'s allowance for them (the largest "
        "convolution's operands and result, `xla_cost.compiled.hlo.unsized_conv_scratch`):",
        "",
        pipe_table(["step", "convolutions", "deviceless peak", "real peak", "real − deviceless", "allowance",
                    "added / allowance", "allowance / peak", "largest workspace"], rows, "lrrrrrrrr"),
        "",
    ]
    if used:
        most, where = max(used)
        lines += [f"On the convolutional networks the workspaces added at most {ratio(most, 2)} of the allowance "
                  f"({where}); a step with one convolution and many matrix products differs for other reasons "
                  "(its products' kernels, which the deviceless compile cannot autotune either).", ""]
    return lines


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
                    gb(m.inputs), gb(m.saved_activations), gb(m.outputs) if m.outputs is not None else "—",
                    gb(m.parts_total), gb(m.peak),
                    ratio(m.parts_total / m.peak, 3) if m.peak else "—",
                ])
            top = max(reports[-1].layers or (), key=lambda l: l.saved_activation_bytes or 0, default=None)
            lines += [
                f"### {model}",
                "",
                "The program's parts:",
                "",
                pipe_table(["batch", "parameters", "gradients", "optimizer state", "batch data", "saved activations",
                            "returned", "sum of parts", "XLA peak", "parts / peak"], rows, "rrrrrrrrrr"),
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
            "of the activations without remat. The CPU's compiled peak does not move with the policy (XLA's CPU "
            "program keeps all, some or none of the recomputation; its peak is not set by the saved activations); "
            "on a GPU, whose compile keeps it, the saved activations are what shrinks.",
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
            "(`tests/analysis/test_memory.py`). These are the CPU's buffers: the GPU's own buffer assignment "
            "differs (below). The target compiler's answers were run on real GPUs: gpt2-small's float32 Adam "
            "step at `fit --target h100`'s batch (42) ran on an H100 and 1.25× of it (52) ran out of memory "
            "(`reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-2.json`); its bfloat16 step at "
            "`fit --target h200`'s batch (112) ran on an H200 and 1.25× of it (140) did not "
            "(`reports/data/device_check_nvidia-h200_2026-11-26-4.json`), and at `fit --target h100`'s (63) on "
            "an H100, where 78 did not (`reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-7.json`). "
            "bert-base's bfloat16 Adam step at 955 (an earlier answer, before fit judged by the final peak) ran on "
            "an H100, and so did 1,193: there the answer is conservative, by at least a quarter (the deviceless "
            "program it is judged by pads the vocabulary's product for cuBLAS, 7.5 GB the H100's own compile does "
            "not spend: `reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-4.json`).",
            "",
        ]
    if data.plan.memory_checks or data.plan.fit_devices:
        lines += target_section(data)
    lines += workspace_section(data)
    lines += [*environment_section(data, data.files("conv_workspaces")[-1:]), regenerate_line(data), ""]
    return {f"{NAME}.md": markdown_file("\n".join(lines))}
