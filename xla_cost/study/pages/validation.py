"""The page ``validation``: the time model against published training runs, held out.

Every case of `xla_cost.study.validation.CASES`, configured as its paper ran it and
compiled for its device, priced kernel by kernel with the global constants
(`xla_cost.timemodel.calibration`): held out (the constants refitted without
the case's paper) and in sample (fitted on every case), beside the published
figure, its source and the relative errors; the bound beside them; the
constants, and those each paper was predicted with.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from xla_cost.errors import InputError
from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import pct, sig
from xla_cost.study.data import StudyData, collected
from xla_cost.study.views import environment_section, regenerate_line

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "validation"
TITLE = ("The time model against published training runs, held out paper by paper: V100, P100, P40, A100, H100, "
         "H200 and TPU v5e runs, every kernel of the device's own program priced with one set of constants")
ORDER = 55
SHARDED = False  # the analysed programs are committed (reports/data/validation_programs.json.gz)


@collected
def validation(data: StudyData) -> Any:
    """Every case priced (`xla_cost.study.validation.validate`), through the results store."""
    from xla_cost.study.validation import CASES, programs_path, validate

    chosen = data.plan.validation_cases
    unknown = sorted(set(chosen or ()) - {c.name for c in CASES})
    if unknown:
        raise InputError(f"validation cases of xla_cost.study.validation.CASES ({', '.join(c.name for c in CASES)})",
                         ", ".join(unknown), "Name cases that exist, or leave validation_cases as None for all.")
    if data.data_dir is None:
        raise InputError("a reports/data directory with the analysed programs", "none",
                         "Write the reports with --data reports/data (the default in the repository).")
    return validate(programs_path(data.data_dir), [c for c in CASES if chosen is None or c.name in chosen])


def _value(value: float, quantity: str) -> str:
    if quantity == "scaling efficiency":
        return pct(value)
    if quantity == "seconds per step":
        return f"{sig(value * 1e3, 3)} ms"
    return sig(value, 3)


def _figure(result: Any) -> Figure:
    from xla_cost.present.figures import figure
    from xla_cost.study.validation import BAND, LIMIT

    fig, axes = figure(9, max(4.8, 0.16 * len(result.cases)))
    ax = axes[0][0]
    names = [c.name for c in result.cases]
    positions = list(range(len(names)))
    ax.barh([p - 0.2 for p in positions], [100 * e for e in result.errors(True)], height=0.4, color="#C44E52",
            label="held out (refitted without its paper)")
    ax.barh([p + 0.2 for p in positions], [100 * e for e in result.errors(False)], height=0.4, color="#4C72B0",
            label="in sample")
    ax.axvspan(-100 * BAND, 100 * BAND, color="grey", alpha=0.12, label=f"±{100 * BAND:g}%")
    for x in (-100 * LIMIT, 100 * LIMIT):
        ax.axvline(x, color="grey", linestyle=":", linewidth=0.8)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(positions, names, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("prediction / published − 1 (%)")
    ax.set_title("Predictions against published figures", fontsize=9)
    ax.legend(loc="lower right", fontsize=7)
    return fig


def _case_rows(result: Any, measured_here: bool) -> list[list[str]]:
    from xla_cost.study.validation import BAND

    rows = []
    for case, out, inside, bound in zip(result.cases, result.held_out, result.in_sample, result.bound):
        if case.measured_here != measured_here:
            continue
        error, error_in = out / case.published - 1, inside / case.published - 1
        rows.append([
            f"`{case.name}`", case.device, case.quantity, _value(case.published, case.quantity),
            _value(out, case.quantity), f"{100 * error:+.1f}%", "yes" if abs(error) <= BAND else "**no**",
            _value(inside, case.quantity), f"{100 * error_in:+.1f}%",
            f"{100 * (bound / case.published - 1):+.0f}%", case.source,
        ])
    return rows


def _setup_rows(result: Any) -> list[list[str]]:
    rows, seen = [], set()
    for case, steps in zip(result.cases, result.estimates):
        for setup, step in zip(case.setups, steps):
            if setup.key() + repr(sorted(setup.layout.items())) in seen:
                continue
            seen.add(setup.key() + repr(sorted(setup.layout.items())))
            p = step.prediction
            parts = ", ".join(f"{name} {sig(seconds * 1e3, 3)}" for name, seconds in step.parts.items() if seconds)
            rows.append([case.name, setup.describe(), f"{sig(p.seconds * 1e3, 4)}", parts])
    return rows


def _distribution(errors: list[float]) -> str:
    magnitudes = sorted(abs(e) for e in errors)
    if not magnitudes:
        return "no cases"
    median = statistics.median(magnitudes)
    p90 = magnitudes[min(len(magnitudes) - 1, int(0.9 * len(magnitudes)))]
    return (f"median |error| {100 * median:.1f}%, 90th percentile {100 * p90:.1f}%, worst {100 * magnitudes[-1]:.1f}%; "
            f"signed: median {100 * statistics.median(errors):+.1f}%")


def _measured_summary(result: Any) -> str:
    """This project's own measurements held out: within the band, beyond the limit (named), the distribution."""
    from xla_cost.study.validation import BAND, LIMIT

    measured = [(c, e) for c, e in zip(result.cases, result.errors(True)) if c.measured_here]
    if not measured:
        return "none"
    beyond = [c.name for c, e in measured if abs(e) > LIMIT]
    return (f"{sum(abs(e) <= BAND for _, e in measured)} of {len(measured)} within ±{100 * BAND:g}%, "
            f"{len(beyond)} beyond ±{100 * LIMIT:g}%" + (f" ({', '.join(f'`{n}`' for n in beyond)})" if beyond else "")
            + f"; {_distribution([e for _, e in measured])}")


def _constants_rows(result: Any) -> list[list[str]]:
    from xla_cost.timemodel.calibration import FIELDS

    def row(label: str, c: Any) -> list[str]:
        return [label, sig(c.matmul, 3), sig(c.memory, 3), sig(c.launch * 1e6, 3), sig(c.depth, 3),
                sig(c.host * 1e3, 3), sig(c.vector, 3)]

    rows = [row("**every case (committed)**", result.constants)]
    rows += [row(f"without `{paper}`", c) for paper, c in result.held_out_constants.items()]
    assert len(FIELDS) == 6
    return rows


def _left_out_lines() -> list[str]:
    from xla_cost.study.published_runs import PUBLISHED_RUNS
    from xla_cost.study.run_cases import LEFT_OUT

    by_name = {r.name: r for r in PUBLISHED_RUNS}
    return [f"- `{name}` ({by_name[name].device}, {by_name[name].quantity} {sig(by_name[name].published, 4)}, "
            f"{by_name[name].source}): {reason}." for name, reason in LEFT_OUT.items()]


def _gemm_lines(data: StudyData) -> list[str]:
    """The kernel model's matrix products against those timed on a GPU
    (`xla_cost.study.gemm_check`), a table per committed ``gemm_*.csv``."""
    from xla_cost.study.gemm_check import check_gemms

    lines: list[str] = []
    for path in data.files("gemm"):
        check = check_gemms(path)
        held = check.held
        rows = [[f"{r.dtype} {'' if r.batch == 1 else f'{r.batch} x '}{r.m} x {r.n} x {r.k}",
                 f"{sig(r.shape, 2)}", f"{sig(r.measured_s * 1e6, 3)}", f"{sig(r.predicted_s * 1e6, 3)}",
                 f"{100 * r.error:+.1f}%",
                 "dispatch-bound" if r.dispatch_bound else "misaligned" if r.misaligned else "held to the band"]
                for r in check.rows.itertuples()]
        errors = held.error.abs()
        lines += [
            f"## Matrix products on an {check.device.upper()}, one by one",
            "",
            f"Single products timed on a real {check.device.upper()} (`{path.name}`, `python "
            "benchmarks/gemm_shapes.py`), each priced as the model prices a product kernel with the committed "
            "constants, which were fitted on whole steps and never on these rows (`xla_cost.study.gemm_check`). "
            f"Of the {len(held)} rows neither dispatch-bound nor misaligned: median |error| {pct(errors.median())}, "
            f"largest {pct(errors.max())}, {int((errors <= 0.2).sum())} within ±20%. *dispatch-bound*: the "
            "model's kernel is shorter than the shortest call timed (the time is jax's dispatch); *misaligned*: a "
            "dimension not a multiple of 16 bytes, which the tensor cores' fast kernels need and the model does "
            "not price.",
            "",
            pipe_table(["product (m x n x k)", "shape efficiency", "measured µs", "predicted µs", "error",
                        "row"], rows, "lrrrrl"),
            "",
        ]
    return lines


def build(data: StudyData) -> dict[str, bytes]:
    from xla_cost.timemodel.calibration import describe
    from xla_cost.timemodel.kernel_time import KERNEL_GAP
    from xla_cost.present.figures import png
    from xla_cost.study.validation import BAND, LIMIT

    result = validation(data)
    published = [(c, e) for c, e in zip(result.cases, result.errors(True)) if not c.measured_here]
    every = list(result.errors(True))
    inside = [c for c, e in published if abs(e) <= BAND]
    beyond = [c for c, e in zip(result.cases, every) if abs(e) > LIMIT]
    in_sample = [e for c, e in zip(result.cases, result.errors(False)) if not c.measured_here]
    papers = list(dict.fromkeys(c.paper for c in result.cases))
    headers = ["case", "device", "quantity", "published", "held out", "error", f"within ±{100 * BAND:g}%",
               "in sample", "error", "bound error", "source"]
    lines = [
        "# Validation: predicted step times against published training runs, held out",
        "",
        "Each case is configured as its paper describes it (model, layout over tensor, pipeline and data "
        "parallelism, batch, precision, recomputation, its nodes), its step compiled for its device by that "
        "device's own compiler (deviceless, on this machine) and priced by `xla_cost.runs.scaling.predict`: every "
        "kernel of the program priced (`xla_cost.timemodel.kernel_time`: matrix products by their shape against "
        "the dtype's peak, tiles and waves over the device's units, the rest by their bytes at the bandwidth, "
        "each kernel its overhead: a cuDNN call's launch, any other kernel's up to its own work, the measured gap every "
        "kernel takes), a host cost per step and never less than the host's measured dispatch of the step, "
        "tensor-parallel collectives in the step, the pipeline's bubble and transfers, the gradient all-reduce in "
        "buckets behind the backward pass. A step measured here (one device, the whole step under one `jax.jit`) "
        "is priced as that one program (`exact_train_step`), the others as their frameworks run them: the grad "
        "and update programs apart. The device figures come from "
        "the registry's datasheets; six constants are shared by every device and fitted jointly "
        "(`python benchmarks/calibrate.py`).",
        "",
        f"**Held out** (leave-one-paper-out: the constants refitted without the case's paper, {len(papers)} "
        f"papers): **{len(inside)} of {len(published)} published cases within ±{100 * BAND:g}%** "
        f"({pct(len(inside) / len(published)) if published else '—'}), "
        f"{len(beyond)} case{'s' if len(beyond) != 1 else ''} of all {len(every)} beyond ±{100 * LIMIT:g}%"
        + (f" ({', '.join(f'`{c.name}`' for c in beyond)})" if beyond else "")
        + f"; {_distribution([e for _, e in published])}. In sample: "
        f"{sum(abs(e) <= BAND for e in in_sample)} of {len(in_sample)}; {_distribution(in_sample)}. "
        f"This project's measurements, held out: {_measured_summary(result)}. "
        f"Device generations: {', '.join(result.devices())}.",
        "",
        "![errors](figures/validation-errors.png)",
        "",
        "## Published runs",
        "",
        "*held out*: predicted with the constants fitted on every other paper; *in sample*: with the committed "
        "constants, fitted on every case; *bound error*: the same steps as a bound (`xla_cost.Hardware.bound`: "
        "compute at peak, no communication hidden).",
        "",
        pipe_table(headers, _case_rows(result, False), "lllrrrlrrrl"),
        "",
        "## This project's H100 and H200 measurements",
        "",
        "Train steps measured on an H100 and an H200 by `python benchmarks/time_zoo.py` (`reports/data/`); each "
        "device's date's measurements are held out together, as a paper's.",
        "",
        pipe_table(headers, _case_rows(result, True), "lllrrrlrrrl"),
        "",
        *_gemm_lines(data),
        "## Published runs not validated",
        "",
        "Runs of `xla_cost.study.published_runs` the validation leaves out, and why (every other run there is "
        "another run of a paper and program validated above):",
        "",
        *_left_out_lines(),
        "",
        "## The constants",
        "",
        f"Committed: {describe(result.constants)}. One set for every device: what differs between devices is "
        "their datasheet figures. Six, because each prices what the others cannot: the products' rate "
        "(`matmul`), the bandwidth the rest reaches (`memory`), the fixed cost of a cuDNN call beyond its work "
        "(`launch`; any other kernel pays it only up to its own work), the slow-down of shallow contractions (`depth`), "
        "the rate of a convolution cuDNN cannot put on the tensor cores (`vector`: input features off their "
        "alignment, an image's 3 channels; a kernel profile on an H100 found conv_net's stem there), "
        "and the per-step cost outside the kernels and their dispatch (`host`). Two figures besides are measured, "
        "not fitted (`python benchmarks/dispatch_costs.py`): the gap every kernel takes "
        f"({KERNEL_GAP * 1e6:.2f} µs, `xla_cost.timemodel.kernel_time.KERNEL_GAP`) and each machine's dispatch "
        "of a call and of each array it is passed (`xla_cost.timemodel.devices.Dispatch`). Each row below is the "
        "set a paper's cases were predicted with.",
        "",
        pipe_table(["fitted on", "matmul (share of peak)", "memory (share of bandwidth)", "launch (µs)",
                    "depth (k at half rate)", "host (ms per step)", "vector (share of the CUDA cores)"],
                   _constants_rows(result), "lrrrrrr"),
        "",
        "## The steps priced",
        "",
        "Per step, in ms: the predicted step (in sample) and its parts (`matmul`, `memory`, `launch`: one "
        "micro-batch's kernels; `tensor`: tensor-parallel collectives; `stage_transfers`; `pipeline_bubble`; "
        "`gradients`: the all-reduce not hidden; `update`: the optimizer; `host`; `dispatch_wait`: the host's "
        "dispatch beyond the device's work).",
        "",
        pipe_table(["case", "setup", "step ms", "parts (ms)"], _setup_rows(result), "llrl"),
        "",
        "## Assumptions",
        "",
    ]
    seen: set[tuple[str, ...]] = set()
    for case in result.cases:
        if case.assumptions in seen:
            continue
        seen.add(case.assumptions)
        same = [c.name for c in result.cases if c.assumptions == case.assumptions]
        lines.append(f"- {', '.join(f'`{n}`' for n in same)}: " + "; ".join(case.assumptions) + ".")
    lines += [
        "",
        "What the model leaves out: contention between concurrent collectives, stragglers, the slow-down of "
        "compute that shares memory bandwidth with communication, and per-step work outside the compiled "
        "step beyond the one host constant (input pipeline, evaluation).",
        "",
    ]
    lines += environment_section(data, data.files("gemm"))
    lines.append(regenerate_line())
    return {
        f"{NAME}.md": markdown_file("\n".join(lines)),
        "figures/validation-errors.png": png(lambda: _figure(result)),
    }
