"""The page ``validation``: the time model against published training runs.

Every case of `xla_cost.study.validation.CASES`, configured as its paper ran
it, priced with the committed calibration profiles, beside the published
figure, its source and the relative error; the bound (the model before
calibration) beside it; the profiles and what each was fitted on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xla_cost.errors import InputError
from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import pct, sig
from xla_cost.study.data import StudyData, collected
from xla_cost.study.views import environment_section, regenerate_line

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "validation"
TITLE = ("The time model against published training runs: Megatron-LM's weak scaling and GPT-3 on A100s, "
         "Goyal et al.'s ResNet-50 on P100s, Jia et al.'s on P40s, and this project's H100 steps")
ORDER = 55
SHARDED = True  # the tensor-parallel stages are analysed over 8 simulated devices


@collected
def validation(data: StudyData) -> Any:
    """Every case priced (`xla_cost.study.validation.validate`), through the results store."""
    from xla_cost.study.validation import CASES, validate

    chosen = data.plan.validation_cases
    unknown = sorted(set(chosen or ()) - {c.name for c in CASES})
    if unknown:
        raise InputError(f"validation cases of xla_cost.study.validation.CASES ({', '.join(c.name for c in CASES)})",
                         ", ".join(unknown), "Name cases that exist, or leave validation_cases as None for all.")
    return validate(data.store, [c for c in CASES if chosen is None or c.name in chosen])


def _value(value: float, quantity: str) -> str:
    if quantity == "scaling efficiency":
        return pct(value)
    if quantity == "seconds per step":
        return f"{sig(value * 1e3, 3)} ms"
    return sig(value, 3)


def _figure(result: Any) -> Figure:
    from xla_cost.present.figures import figure
    from xla_cost.study.validation import BAND

    fig, axes = figure(9, 4.8)
    ax = axes[0][0]
    errors = result.errors()
    names = [c.name for c in result.cases]
    colors = ["#4C72B0" if c.fitted else ("#C44E52" if c.gap else "#55A868") for c in result.cases]
    positions = list(range(len(names)))
    ax.barh(positions, [100 * e for e in errors], color=colors)
    ax.axvspan(-100 * BAND, 100 * BAND, color="grey", alpha=0.12, label=f"±{100 * BAND:g}%")
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(positions, names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("prediction / published − 1 (%)")
    ax.set_title("Calibrated predictions against published figures (blue: fitted, green: tested, "
                 "red: known gap)", fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    return fig


def _case_rows(result: Any, measured_here: bool) -> list[list[str]]:
    from xla_cost.study.validation import BAND

    rows = []
    for case, predicted, bound, error in zip(result.cases, result.predicted, result.bound, result.errors()):
        if case.measured_here != measured_here:
            continue
        verdict = "fitted" if case.fitted else ("yes" if abs(error) <= BAND else "**no**")
        rows.append([
            f"`{case.name}`", case.title, case.quantity, _value(case.published, case.quantity),
            _value(predicted, case.quantity), f"{100 * error:+.1f}%", verdict,
            _value(bound, case.quantity), f"{100 * (bound / case.published - 1):+.0f}%", case.source,
        ])
    return rows


def _setup_rows(result: Any) -> list[list[str]]:
    rows, seen = [], set()
    for case, steps in zip(result.cases, result.estimates):
        for setup, step in zip(case.setups, steps):
            if setup.key() in seen:
                continue
            seen.add(setup.key())
            p = step.prediction
            parts = ", ".join(f"{name} {sig(seconds * 1e3, 3)}" for name, seconds in step.parts.items() if seconds)
            rows.append([case.name, setup.describe(), f"{sig(p.seconds * 1e3, 4)}", parts])
    return rows


def _at_limit(result: Any) -> str:
    """What the fit could not reach, where a share stopped at its limit."""
    from xla_cost.parallel.calibration import MEMORY_LIMIT

    said = []
    for device, calibration in sorted(result.calibrations.items()):
        if calibration.matmul < 1 and calibration.memory < MEMORY_LIMIT:
            continue
        missed = [f"`{c.name}` {100 * e:+.1f}%" for c, e in zip(result.cases, result.errors())
                  if c.fitted and c.device == device and abs(e) > 1e-3]
        if missed:
            said.append(f"{device}'s stops there, and its fit leaves {', '.join(missed)}: the compiled program on "
                        "this machine (the CPU compiler's fusions) moves more memory-bound bytes than the "
                        "device's compiler made it move")
    return (": " + "; ".join(said) + ".") if said else "; no profile reaches either."


def _gap(case: Any, result: Any) -> str:
    """What a case out of the band leaves unexplained, in figures where it compares two steps."""
    steps = result.estimates[result.cases.index(case)]
    if len(steps) != 2 or case.quantity != "speed-up":
        return case.gap + "."
    small, large = steps
    implied = small.prediction.seconds * large.global_batch / (small.global_batch * case.published)
    return (f"the published {sig(case.published, 3)}× from {small.devices:,} to {large.devices:,} devices implies a "
            f"{sig(implied * 1e3, 3)} ms step on {large.devices:,} (the {small.devices:,}-device step predicted at "
            f"{sig(small.prediction.seconds * 1e3, 3)} ms, as fitted); the model predicts "
            f"{sig(large.prediction.seconds * 1e3, 3)} ms: compute {sig(large.prediction.compute_seconds * 1e3, 3)} ms "
            f"and a gradient all-reduce of {sig(large.prediction.communication_seconds * 1e3, 3)} ms, "
            f"{sig(large.parts.get('gradients', 0) * 1e3, 3)} ms of it not hidden behind the backward pass. The "
            f"{sig((implied - large.prediction.seconds) * 1e3, 3)} ms a step between them are {case.gap}.")


def _h100_section(result: Any, headers: list[str], here: list[tuple[Any, float]]) -> list[str]:
    """The H100's measured steps: its calibration's fit and checks."""
    from xla_cost.study.validation import BAND

    worst = max((f"{100 * e:+.0f}%" for _, e in here), key=lambda t: abs(float(t[:-1])), default="—")
    fitted = result.calibrations["h100"].fitted_on if "h100" in result.calibrations else ()
    return [
        "## This project's H100 measurements",
        "",
        "No published run gives an H100 step of a model this tool analyses, so the H100's calibration is "
        "fitted on train steps this project measured on one (" + ", ".join(
            f"`{n}`" for n in fitted) + ": the seconds per kernel launched, the "
        "memory-bound share and the matrix products' share, in that order) and checked on the others: "
        f"{sum(abs(e) <= BAND for _, e in here)} of {len(here)} within ±{100 * BAND:g}%, the worst {worst}. "
        "A memory-bound share above 1 says the GPU compiler moves fewer bytes than the program compiled here "
        "(its fusions are larger); one set of shares fits neither the convolutional and the transformer "
        "steps nor float32 and bfloat16 alike. The measurements are the previous timing harness's; "
        "re-measuring with the one-program harness (`python benchmarks/time_zoo.py` on a GPU) and "
        "re-fitting (`python benchmarks/calibrate.py`) waits for a GPU session. Until then an H100 "
        f"prediction is good to about ±{100 * max((abs(e) for _, e in here), default=0):.0f}%.",
        "",
        pipe_table(headers, _case_rows(result, True), "llllrrrrrl"),
        "",
    ]


def build(data: StudyData) -> dict[str, bytes]:
    from xla_cost.parallel.calibration import MEMORY_LIMIT
    from xla_cost.present.figures import png
    from xla_cost.study.validation import BAND

    result = validation(data)
    errors = result.errors()
    tested = [(c, e) for c, e in zip(result.cases, errors) if not c.fitted and not c.measured_here]
    here = [(c, e) for c, e in zip(result.cases, errors) if not c.fitted and c.measured_here]
    headers = ["case", "what was published", "quantity", "published", "predicted", "error",
               f"within ±{100 * BAND:g}%", "bound", "bound error", "source"]
    inside = [c for c, e in tested if abs(e) <= BAND]
    gaps = [c for c, e in tested if abs(e) > BAND and c.gap]
    misses = [c for c, e in tested if abs(e) > BAND and not c.gap]
    lines = [
        "# Validation: predicted step times against published training runs",
        "",
        "Each case is configured as its paper describes it (model, mesh, batch, precision, hardware), analysed "
        "on this machine (the compiled program of one micro-batch on one pipeline stage, sharded over its "
        "tensor-parallel devices) and priced by `xla_cost.runs.scaling.predict`: matrix products and "
        "convolutions at the device's calibrated share of its peak FLOP/s, the compiled program's memory-bound "
        "bytes at its calibrated share of the memory bandwidth, tensor-parallel collectives in the step, the "
        "1F1B pipeline's bubble and its transfers between stages, and the gradient all-reduce in 25 MB buckets "
        "that start as the backward pass makes them, hierarchical within and between nodes. One calibration per "
        "device (`xla_cost/parallel/calibrations/`), fitted on the cases marked *fitted* and nothing else "
        "(`python benchmarks/calibrate.py`); every other case tests it.",
        "",
        f"**{len(inside)} of {len(tested)} tested published cases are within ±{100 * BAND:g}%.** "
        + (f"Out of the band with a known gap: {', '.join(f'`{c.name}`' for c in gaps)}. " if gaps else "")
        + (f"Out of the band, unexplained: {', '.join(f'`{c.name}`' for c in misses)}." if misses else ""),
        "",
        "![errors](figures/validation-errors.png)",
        "",
        "## Published runs",
        "",
        "*bound*: the same steps priced as a bound (`xla_cost.Hardware.bound`: compute at peak, no communication "
        "hidden, every gradient reduced on its own on a flat ring), the model before this calibration.",
        "",
        pipe_table(headers, _case_rows(result, False), "llllrrrrrl"),
        "",
        *(_h100_section(result, headers, here) if here or any(c.measured_here for c in result.cases) else []),
        "## The calibration profiles",
        "",
        pipe_table(["device", "matrix products: share of peak FLOP/s", "memory-bound bytes: share of bandwidth",
                    "µs per kernel", "fitted on"],
                   [[d, sig(c.matmul, 3), sig(c.memory, 3), sig(c.launch * 1e6, 3) if c.launch else "—",
                     ", ".join(f"`{n}`" for n in c.fitted_on)]
                    for d, c in sorted(result.calibrations.items())], "lrrrl"),
        "",
        "A profile fitted on one case has one share for both kinds of work and no cost per kernel; on two, the "
        "two shares. The fit keeps the matrix products' share at most 1 and the memory-bound share at most "
        f"{MEMORY_LIMIT:g}" + _at_limit(result),
        "",
        "## The steps priced",
        "",
        "Per step, in ms: the predicted step and its parts (`matmul` and `memory`: compute of every micro-batch; "
        "`tensor`: tensor-parallel collectives; `stage_transfers`: the activations and their gradients sent "
        "between pipeline stages; `pipeline_bubble`: the 1F1B schedule's idle slots; "
        "`gradients`: the all-reduce not hidden behind the backward pass; `update`: the optimizer).",
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
    lines.append("")
    if gaps:
        lines += ["## Known gaps", ""]
        for case in gaps:
            lines.append(f"- `{case.name}`: {_gap(case, result)}")
        lines.append("")
    lines += [
        "What the model leaves out: contention between concurrent collectives, stragglers, the slow-down of "
        "compute that shares memory bandwidth with communication, and any per-step work outside the compiled "
        "step (input pipeline, framework overhead, evaluation).",
        "",
    ]
    lines += environment_section(data)
    lines.append(regenerate_line())
    return {
        f"{NAME}.md": markdown_file("\n".join(lines)),
        "figures/validation-errors.png": png(lambda: _figure(result)),
    }
