"""The page ``validation``: the time model against published training runs, held out.

Every case of `xla_cost.study.validation.CASES`, configured as its paper ran it and
compiled for its device, priced kernel by kernel with the global constants
(`xla_cost.timemodel.calibration`): held out (the constants refitted without
the case's paper, and without its device generation) and in sample (fitted on
every case), beside the published figure, its source and the relative errors;
the bound beside them. Absolute quantities and ratios are counted apart, the
ratios scored on their overhead too, with the papers the cases come from (the
effective sample); the prediction interval; the rules that leave runs out with
the runs they remove; the constants, and those each paper and generation was
predicted with, with any at a bound.
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
TITLE = ("The time model against every verified published training run, held out paper by paper and device "
         "generation by generation: absolute figures and scaling overheads apart, every kernel of the device's own "
         "program priced with one set of constants")
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
    return validate(programs_path(data.data_dir), [c for c in CASES if chosen is None or c.name in chosen],
                    unanalysed=True)


def _share(count: int, total: int) -> str:
    return f"{count} of {total}" + (f" ({pct(count / total)})" if total else "")


def _papers(cases: list[Any]) -> str:
    count = len({c.paper for c in cases})
    return f"{count} paper{'s' if count != 1 else ''}"


def _paper_weighted(pairs: list[tuple[Any, bool]]) -> str:
    """The share of the cases that pass, each paper weighted alike (the papers' own shares averaged)."""
    by_paper: dict[str, list[bool]] = {}
    for case, ok in pairs:
        by_paper.setdefault(case.paper, []).append(ok)
    return pct(sum(sum(v) / len(v) for v in by_paper.values()) / len(by_paper)) if by_paper else "—"


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
    generations = result.by_generation or (float("nan"),) * len(result.cases)
    for case, out, inside, bound, other in zip(result.cases, result.held_out, result.in_sample, result.bound,
                                               generations):
        if case.measured_here != measured_here:
            continue
        error, error_in = out / case.published - 1, inside / case.published - 1
        rows.append([
            f"`{case.name}`", case.device, case.quantity, _value(case.published, case.quantity),
            _value(out, case.quantity), f"{100 * error:+.1f}%", "yes" if abs(error) <= BAND else "**no**",
            f"{100 * (other / case.published - 1):+.1f}%", _value(inside, case.quantity), f"{100 * error_in:+.1f}%",
            f"{100 * (bound / case.published - 1):+.0f}%", case.source,
        ])
    return rows


def _overhead_rows(result: Any) -> list[list[str]]:
    """The ratio cases scored on their overhead (`xla_cost.study.cases.Case.overhead`), held out."""
    from xla_cost.study.validation import OVERHEAD_BAND

    by_generation = result.overhead_errors("generation") if result.by_generation else {}
    rows = []
    for name, (published, predicted, error) in result.overhead_errors(True).items():
        case = next(c for c in result.cases if c.name == name)
        other = by_generation.get(name)
        rows.append([f"`{name}`", case.device, case.quantity, _value(case.published, case.quantity),
                     pct(published), pct(predicted), f"{100 * error:+.0f}%",
                     "yes" if abs(error) <= OVERHEAD_BAND else "**no**",
                     f"{100 * other[2]:+.0f}%" if other else "—"])
    return rows


def _generation_rows(result: Any) -> list[list[str]]:
    """Per device generation: its devices, cases, papers, and the held-out shares within the band."""
    from xla_cost.study.validation import BAND

    rows = []
    by_paper, by_generation = result.errors(True), result.errors("generation") if result.by_generation else None
    for name in result.generations():
        index = [i for i, c in enumerate(result.cases) if c.generation == name]
        cases = [result.cases[i] for i in index]
        published = [i for i in index if not result.cases[i].measured_here]
        rows.append([
            name, ", ".join(dict.fromkeys(c.device for c in cases)), str(len(published)),
            str(len(index) - len(published)), str(len({c.paper for c in cases})),
            _share(sum(abs(by_paper[i]) <= BAND for i in index), len(index)),
            _share(sum(abs(by_generation[i]) <= BAND for i in index), len(index)) if by_generation else "—",
            f"{100 * statistics.median(abs(by_generation[i]) for i in index):.1f}%" if by_generation else "—",
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


_CONSTANT_UNITS = {"matmul": ("share of peak", 1.0), "memory": ("share of bandwidth", 1.0),
                   "launch": ("µs", 1e6), "depth": ("k at half rate", 1.0), "host": ("ms per step", 1e3),
                   "vector": ("share of the CUDA cores", 1.0)}
"""How the page shows each constant: its unit and the scale to it."""


def _constants_headers() -> list[str]:
    from xla_cost.timemodel.calibration import FIELDS

    return ["fitted on", *(f"{f} ({_CONSTANT_UNITS.get(f, ('', 1.0))[0]})" for f in FIELDS), "at a bound"]


def _constants_rows(result: Any) -> list[list[str]]:
    from xla_cost.timemodel.calibration import FIELDS, at_bound

    def row(label: str, c: Any) -> list[str]:
        return [label, *(sig(getattr(c, f) * _CONSTANT_UNITS.get(f, ("", 1.0))[1], 3) for f in FIELDS),
                ", ".join(f"**{name}**" for name in at_bound(c)) or "none"]

    rows = [row("**every case (committed)**", result.constants)]
    rows += [row(f"without `{paper}`", c) for paper, c in result.held_out_constants.items()]
    rows += [row(f"without the {name} generation", c) for name, c in result.generation_constants.items()]
    return rows


def _refits_at_bound(result: Any) -> list[str]:
    """The refits (every case, each paper's, each generation's) that end at a bound, named."""
    from xla_cost.timemodel.calibration import at_bound

    refits = [("every case", result.constants), *((f"without {p}", c) for p, c in result.held_out_constants.items()),
              *((f"without {g}", c) for g, c in result.generation_constants.items())]
    return [f"{label}: {', '.join(at_bound(c))}" for label, c in refits if at_bound(c)]


def _left_out_lines(result: Any) -> list[str]:
    """Each rule that leaves runs out, with the runs it removes (`xla_cost.study.run_cases.RULES`, and the
    compiler's refusals with their errors: `xla_cost.study.validation.REFUSED_RULE`)."""
    from xla_cost.study.published_runs import PUBLISHED_RUNS
    from xla_cost.study.run_cases import RULES, left_out
    from xla_cost.study.validation import REFUSED_RULE

    def run_line(name: str, why: str = "") -> str:
        run = by_name.get(name)
        where = f" ({run.device}, {run.quantity} {sig(run.published, 4)}, {run.source})" if run else ""
        return f"  - `{name}`{where}" + (f": {why}" if why else "")

    by_name = {r.name: r for r in PUBLISHED_RUNS}
    lines = []
    for rule in RULES:
        removed = [r.name for r in PUBLISHED_RUNS if left_out(r) is rule]
        lines.append(f"- **{rule.text}**: " + (f"{len(removed)} run{'s' if len(removed) != 1 else ''}" if removed
                                               else "no run"))
        lines += [run_line(name) for name in removed]
    lines.append(f"- **{REFUSED_RULE}**: " + (f"{len(result.refused)} case{'s' if len(result.refused) != 1 else ''}"
                                              if result.refused else "no case"))
    lines += [run_line(name, f"`{error}`") for name, error in result.refused.items()]
    if result.unanalysed:  # not a rule: work not done yet, said so
        lines.append(f"- **not priced yet: a program of the case is not analysed** (`python benchmarks/calibrate.py "
                     f"--programs` compiles the programs the file lacks): {len(result.unanalysed)} "
                     f"case{'s' if len(result.unanalysed) != 1 else ''}")
        lines += [run_line(name) for name in result.unanalysed]
    return lines


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
    from xla_cost.study.validation import BAND, LIMIT, OVERHEAD_BAND, prediction_interval

    result = validation(data)
    published = [(c, e) for c, e in zip(result.cases, result.errors(True)) if not c.measured_here]
    every = list(result.errors(True))
    inside = [c for c, e in published if abs(e) <= BAND]
    beyond = [c for c, e in zip(result.cases, every) if abs(e) > LIMIT]
    in_sample = [e for c, e in zip(result.cases, result.errors(False)) if not c.measured_here]
    papers = list(dict.fromkeys(c.paper for c in result.cases))
    absolute = [(c, e) for c, e in published if not c.is_ratio]
    ratios = [(c, e) for c, e in published if c.is_ratio]
    overheads = result.overhead_errors(True)
    overhead_cases = [c for c in result.cases if c.name in overheads]
    by_generation = [(c, e) for c, e in zip(result.cases, result.errors("generation")) if not c.measured_here] \
        if result.by_generation else []
    try:
        interval = prediction_interval(result).describe()
    except InputError:
        interval = "too few published absolute cases to compute one"
    headers = ["case", "device", "quantity", "published", "held out", "error", f"within ±{100 * BAND:g}%",
               "held out by generation: error", "in sample", "error", "bound error", "source"]
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
        f"the registry's datasheets; {len(result.constants.values())} constants are shared by every device and "
        "fitted jointly (`python benchmarks/calibrate.py`). Every verified run of "
        "`xla_cost.study.published_runs.PUBLISHED_RUNS` is a case unless a rule stated before its error is known "
        "leaves it out (listed below with the runs it removes).",
        "",
        f"**Held out** (leave-one-paper-out: the constants refitted without the case's paper): **{len(inside)} of "
        f"{len(published)} published cases within ±{100 * BAND:g}%** "
        f"({pct(len(inside) / len(published)) if published else '—'}; the cases come from "
        f"{_papers([c for c, _ in published])}, "
        "whose errors cluster: each paper weighted alike, "
        f"{_paper_weighted([(c, abs(e) <= BAND) for c, e in published])}), "
        f"{len(beyond)} case{'s' if len(beyond) != 1 else ''} of all {len(every)} beyond ±{100 * LIMIT:g}%"
        + (f" ({', '.join(f'`{c.name}`' for c in beyond)})" if beyond else "")
        + f"; {_distribution([e for _, e in published])}.",
        "",
        f"- **Absolute quantities** (TFLOP/s, MFU, tokens/s, seconds, days) alone: "
        f"{_share(sum(abs(e) <= BAND for _, e in absolute), len(absolute))} within ±{100 * BAND:g}% held out "
        f"({_papers([c for c, _ in absolute])}; each paper alike "
        f"{_paper_weighted([(c, abs(e) <= BAND) for c, e in absolute])}); {_distribution([e for _, e in absolute])}.",
        f"- **Ratios** (scaling efficiency, speed-up): {_share(sum(abs(e) <= BAND for _, e in ratios), len(ratios))} "
        f"within ±{100 * BAND:g}% on the figure ({_papers([c for c, _ in ratios])}), which a prediction of "
        "no overhead at all passes easily; scored on the **overhead** (1 − efficiency, 1 − speed-up / devices' "
        f"ratio) against the published overhead: "
        f"{_share(sum(abs(v[2]) <= OVERHEAD_BAND for v in overheads.values()), len(overheads))} within "
        f"±{100 * OVERHEAD_BAND:g}% ({_papers(overhead_cases)}); "
        f"{_distribution([v[2] for v in overheads.values()])}.",
        f"- **Held out by device generation** (the constants refitted without every case of the case's "
        f"generation, {len(result.generation_constants)} generations: {', '.join(result.generations())}): "
        + (f"{_share(sum(abs(e) <= BAND for _, e in by_generation), len(by_generation))} published cases within "
           f"±{100 * BAND:g}%, {sum(abs(e) > LIMIT for _, e in by_generation)} beyond ±{100 * LIMIT:g}%; "
           f"{_distribution([e for _, e in by_generation])}." if by_generation else "not computed."),
        *([f"- **Not priced yet**: {len(result.unanalysed)} case{'s' if len(result.unanalysed) != 1 else ''} "
            "whose programs are not analysed (listed under "
             "*Published runs not validated*); every figure here is of the other cases."] if result.unanalysed else []),
        *([f"- **Priced from a program extended by depth**: {len(result.extrapolated)} "
           f"case{'s' if len(result.extrapolated) != 1 else ''} whose unrolled program of L identical blocks was "
           "compiled at 2 and 3 blocks and every figure the pricing reads extended as f(3) + (L − 3) (f(3) − f(2)) "
           "(`xla_cost.study.depth`; marked `extrapolated` in the programs file): "
           + ", ".join(f"`{name}`" for name in result.extrapolated) + "."] if result.extrapolated else []),
        f"- **In sample**: {sum(abs(e) <= BAND for e in in_sample)} of {len(in_sample)}; {_distribution(in_sample)}.",
        f"- **This project's measurements**, held out: {_measured_summary(result)}.",
        f"- **Prediction interval** (`xla_cost.timemodel.calibration.interval`, committed with the constants by "
        f"`python benchmarks/calibrate.py`; here from this page's residuals): {interval}.",
        f"- **Refits at a bound** of `xla_cost.timemodel.calibration.BOUNDS` (the fit on every case, each paper's "
        f"and each generation's refit): " + ("; ".join(_refits_at_bound(result)) or "none") + ".",
        "",
        "![errors](figures/validation-errors.png)",
        "",
        "## Published runs",
        "",
        "*held out*: predicted with the constants fitted on every other paper; *in sample*: with the committed "
        "constants, fitted on every case; *bound error*: the same steps as a bound (`xla_cost.Hardware.bound`: "
        "compute at peak, no communication hidden).",
        "",
        pipe_table(headers, _case_rows(result, False), "lllrrrlrrrrl"),
        "",
        "## Scaling cases on their overhead",
        "",
        "A scaling efficiency near 100% is easy to predict within ±20%; what the model must get right is the "
        "overhead the published run lost to communication and idle time: 1 − efficiency for a weak-scaling "
        "efficiency, 1 − speed-up / (devices over the base run's) for a speed-up. Held out paper by paper (and, "
        f"in the last column, by device generation); the band is ±{100 * OVERHEAD_BAND:g}% of the published "
        "overhead.",
        "",
        pipe_table(["case", "device", "quantity", "published", "published overhead", "predicted overhead (held out)",
                    "error", f"within ±{100 * OVERHEAD_BAND:g}%", "by generation"], _overhead_rows(result),
                   "lllrrrrlr"),
        "",
        "## By device generation",
        "",
        "Each generation (`xla_cost.study.cases.generation`: a GPU's architecture by its compute capability, a "
        "TPU by its version) held out as a whole: the constants refitted on the other generations' cases only, "
        "beside the leave-one-paper-out figures. All cases (published and measured here).",
        "",
        pipe_table(["generation", "devices", "published cases", "measured here", "papers",
                    f"within ±{100 * BAND:g}%, paper held out", f"within ±{100 * BAND:g}%, generation held out",
                    "median |error|, generation held out"], _generation_rows(result), "llrrrrrr"),
        "",
        "## This project's H100 and H200 measurements",
        "",
        "Train steps measured on an H100 and an H200 by `python benchmarks/time_zoo.py` (`reports/data/`); each "
        "device's date's measurements are held out together, as a paper's.",
        "",
        pipe_table(headers, _case_rows(result, True), "lllrrrlrrrrl"),
        "",
        *_gemm_lines(data),
        "## Published runs not validated",
        "",
        "The rules that leave a run of `xla_cost.study.published_runs` out, each stated from the run's record and "
        "its source (or the compiler's refusal) before its error is known, with the runs it removes "
        "(`xla_cost.study.run_cases.RULES`); every other verified run is a case above.",
        "",
        *_left_out_lines(result),
        "",
        "## The constants",
        "",
        f"Committed: {describe(result.constants)}. One set for every device: what differs between devices is "
        "their datasheet figures. Two are fitted, each pricing what the others cannot: the slow-down of shallow "
        "contractions (`depth`), and the rate "
        "of a convolution cuDNN cannot put on the tensor cores (`vector`: input features off their alignment, an "
        "image's 3 channels; a kernel profile on an H100 found conv_net's stem there). Four more are set by "
        "measurements (`xla_cost.timemodel.calibration.MEASURED`), because every fit drove them to the edge of "
        "their physical range (products faster than cuBLAS ran them, bandwidth-bound kernels faster than any "
        "measured, cuDNN calls longer than any profiled, no host cost at all), each compensating another: a large "
        "product's share of the peak (`matmul`, "
        f"{result.constants.matmul:.1%}: the best cuBLAS product timed here, its tiles' and waves' losses taken "
        f"out: `MATMUL_CEILING`), the share of the bandwidth a kernel that is not a product reaches (`memory`, "
        f"{result.constants.memory:.1%}: the most of it a kernel reached on an H100, `MEMORY_CEILING`), "
        f"a cuDNN call's cost beyond its work (`launch`, {result.constants.launch * 1e6:.2f} "
        "µs: the shortest call profiled, `LAUNCH_CEILING`; any other kernel pays it only up to its own work) and "
        "a step's cost outside its kernels and its dispatch (`host`, 0). Two figures besides are measured, "
        "not fitted (`python benchmarks/dispatch_costs.py`): the gap every kernel takes "
        f"({KERNEL_GAP * 1e6:.2f} µs, `xla_cost.timemodel.kernel_time.KERNEL_GAP`) and each machine's dispatch "
        "of a call and of each array it is passed (`xla_cost.timemodel.devices.Dispatch`). Each row below is the "
        "set a paper's (or a generation's) cases were predicted with; *at a bound*: a fitted constant within "
        "0.1% of its range's edge (`xla_cost.timemodel.calibration.at_bound`). A refit whose cases never price a "
        "constant holds it at the committed value (its source says so).",
        "",
        pipe_table(_constants_headers(), _constants_rows(result), "l" + "r" * len(result.constants.values()) + "l"),
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
    lines.append(regenerate_line(data))
    return {
        f"{NAME}.md": markdown_file("\n".join(lines)),
        "figures/validation-errors.png": png(lambda: _figure(result)),
    }
