"""The page ``optimizers``: every optimizer's update FLOP and transcendentals per parameter.

What XLA counts for each optimizer's update, the reason read from the update's
jaxpr primitive by primitive (`UpdateBreakdown`), the update's share of the
training step against the batch size, and seed 001's claims about optimizers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from xla_cost.present.figures import PASS_COLORS, figure, line_style, log2_batch_axis, png
from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import count, join_words, pct_sig, per_parameter, ratio, sig, value_range
from xla_cost.study.claims import CLAIMS, claim_lines
from xla_cost.study.data import StudyData, collected
from xla_cost.study.published import SEED_ADAM_FLOPS_PER_PARAMETER, SEED_ADAM_TERMS, SEED_SGD_FLOPS_PER_PARAMETER
from xla_cost.study.views import (
    by_model,
    environment_section,
    failure_section,
    net_name,
    optimizer_runs,
    regenerate_line,
    thin_ticks,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "optimizers"
TITLE = ("Update FLOP and transcendentals per parameter of every optimizer, read from the jaxpr; the update's "
         "share of the step")
ORDER = 20


@dataclasses.dataclass(frozen=True)
class UpdateBreakdown:
    """An optimizer's update jaxpr on one model, counted primitive by primitive.

    Attributes:
      optimizer: its name.
      model: the model whose parameters it updates.
      parameters: that model's parameter count.
      flops, transcendentals: per primitive, summed over the update's jaxpr.
    """

    optimizer: str
    model: str
    parameters: int
    flops: Mapping[str, int]
    transcendentals: Mapping[str, int]

    def per_parameter(self, threshold: float = 0.005) -> tuple[dict[str, float], dict[str, float], int, int]:
        """(FLOP per parameter by primitive, transcendentals per parameter by
        primitive, per-step FLOP, per-step transcendentals): a primitive below
        ``threshold`` per parameter is per-step work (scalars such as Adam's
        bias corrections), given in absolute counts."""
        flops, trans, step_f, step_t = {}, {}, 0, 0
        for name, value in sorted(self.flops.items()):
            if value / self.parameters >= threshold:
                flops[name] = value / self.parameters
            else:
                step_f += value
        for name, value in sorted(self.transcendentals.items()):
            if value / self.parameters >= threshold:
                trans[name] = value / self.parameters
            else:
                step_t += value
        return flops, trans, step_f, step_t


@collected
def update_breakdown(data: StudyData) -> dict[str, UpdateBreakdown]:
    """Each optimizer's update jaxpr on ``breakdown_model``, by primitive
    (traced abstractly, not compiled: a fraction of a second each)."""
    from xla_cost.count.interpret import count_function
    from xla_cost.step.workload import build_workload
    from xla_cost.zoo import build_model, example_inputs

    name = data.plan.breakdown_model
    out = {}
    for optimizer in data.plan.optimizers or ():
        workload, _ = build_workload(build_model(name), example_inputs(name, 1), optimizer=optimizer)
        counted = count_function(workload.phase_fn("update"), *workload.phase_args("update"))
        flops: dict[str, int] = {}
        trans: dict[str, int] = {}
        for eqn in counted.equations:
            if eqn.cost.flops:
                flops[eqn.primitive] = flops.get(eqn.primitive, 0) + eqn.cost.flops
            if eqn.cost.transcendentals:
                trans[eqn.primitive] = trans.get(eqn.primitive, 0) + eqn.cost.transcendentals
        out[optimizer] = UpdateBreakdown(optimizer, name, workload.parameters, flops, trans)
    return out


def _grad_by_batch(data: StudyData, model: str) -> dict[int, int]:
    """The gradient program's FLOP (independent of the optimizer) by batch size."""
    out: dict[int, int] = {}
    for result in (data.seed_batch, data.resnets):
        for row in by_model(result).get(model, []):
            out[row["batch_size"]] = row["grad_flops"]
    for (m, _), row in optimizer_runs(data).items():
        if m == model:
            out.setdefault(row["batch_size"], row["grad_flops"])
    return dict(sorted(out.items()))


def _fig_per_parameter(data: StudyData) -> bytes:
    runs = optimizer_runs(data)
    models = [m for m in data.plan.optimizer_models if any(k[0] == m for k in runs)]
    optimizers = [o for o in data.plan.optimizers or () if any(k[1] == o for k in runs)]

    def draw() -> Figure:
        from matplotlib.patches import Patch

        fig, axes = figure(9.0, 0.5 * len(optimizers) + 1.9)
        ax = axes[0][0]
        ys = list(range(len(optimizers)))[::-1]
        top = 0.0
        for y, name in zip(ys, optimizers):
            rows = [runs[(m, name)] for m in models if (m, name) in runs]
            flops = [r["update_flops"] / r["parameters"] for r in rows]
            trans = [(r["update_transcendentals"] or 0) / r["parameters"] for r in rows]
            low, high = min(flops), max(flops)
            ax.barh(y, low, 0.6, color=PASS_COLORS["update"])
            if per_parameter(high) != per_parameter(low):
                ax.barh(y, high - low, 0.6, left=low, color=PASS_COLORS["update"], alpha=0.45)
            t = max(trans)
            if t >= 0.005:
                ax.barh(y, t, 0.6, left=high, color="white", edgecolor="0.35", hatch="///")
            label = value_range(flops, per_parameter) + (f" + {value_range(trans, per_parameter)}" if t >= 0.005 else "")
            ax.annotate(label, (high + t, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=9)
            top = max(top, high + t)
        for name, value in (("sgd", SEED_SGD_FLOPS_PER_PARAMETER), ("adam", SEED_ADAM_FLOPS_PER_PARAMETER)):
            if name in optimizers:
                y = ys[optimizers.index(name)]
                ax.plot([value], [y + 0.42], marker="v", markersize=10, color="black", zorder=5)
                ax.annotate(f"seed 001: {value}", (value, y + 0.42), xytext=(8, 0), textcoords="offset points",
                            va="center", fontsize=9, fontweight="bold")
        ax.set_yticks(ys, optimizers)
        ax.set_xlim(0, max(top, SEED_ADAM_FLOPS_PER_PARAMETER) * 1.18)
        ax.set_ylim(-0.7, len(optimizers) - 0.2)
        ax.set_xlabel("update FLOP per parameter")
        ax.grid(axis="y", visible=False)
        handles = [
            Patch(color=PASS_COLORS["update"], label="FLOP per parameter"),
            Patch(color=PASS_COLORS["update"], alpha=0.45, label="range over the models (shape-dependent)"),
            Patch(facecolor="white", edgecolor="0.35", hatch="///", label="+ transcendentals (sqrt, rsqrt, pow)"),
        ]
        fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
        fig.suptitle(f"Optimizer update FLOP per parameter, as XLA counts it\n"
                     f"({join_words([net_name(m) for m in models])}; ▼ seed 001's estimate)")
        return fig

    return png(draw)


def _fig_update_share(data: StudyData) -> bytes:
    runs = optimizer_runs(data)
    models = [m for m in data.plan.optimizer_models if len(_grad_by_batch(data, m)) > 1]
    optimizers = [o for o in data.plan.optimizers or () if any(k[1] == o for k in runs)]
    cols = min(2, len(models))
    rows_n = math.ceil(len(models) / cols)
    falling = True
    for model in models:
        grads = _grad_by_batch(data, model)
        falling &= all(a < b for a, b in zip(list(grads.values()), list(grads.values())[1:]))

    def draw() -> Figure:
        fig, axes = figure(5.2 * cols, 3.8 * rows_n + 0.8, rows_n, cols)
        flat = [ax for row in axes for ax in row]
        for ax, model in zip(flat, models):
            grads = _grad_by_batch(data, model)
            batches = list(grads)
            for index, name in enumerate(optimizers):  # every optimizer a line, however many (`line_style`)
                row = runs.get((model, name))
                if row is None:
                    continue
                shares = [100 * row["update_flops"] / (grads[b] + row["update_flops"]) for b in batches]
                ax.plot(batches, shares, marker="o", markersize=3, label=name, **line_style(index))
            log2_batch_axis(ax, thin_ticks(batches))
            ax.set_yscale("log")
            ax.set_ylabel("update share of train-step FLOP (%, log)")
            ax.set_title(net_name(model))
        for ax in flat[len(models):]:
            ax.set_visible(False)
        flat[0].legend(loc="lower left", frameon=False, ncols=2, fontsize=8)
        fig.suptitle("The update's share of the training step falls with the batch size" if falling
                     else "The update's share of the training step against the batch size")
        return fig

    return png(draw)


def _breakdown_text(b: UpdateBreakdown) -> str:
    """``mul 5, add 4, div 3, integer_pow 1 = 13 FLOP + sqrt 1``; per-step work after."""
    flops, trans, step_f, step_t = b.per_parameter()
    parts = ", ".join(f"`{k}` {per_parameter(v)}" for k, v in sorted(flops.items(), key=lambda kv: (-kv[1], kv[0])))
    text = f"{parts} = {per_parameter(sum(flops.values()))} FLOP"
    if trans:
        text += " + " + ", ".join(f"`{k}` {per_parameter(v)}" for k, v in sorted(trans.items())) + " transcendental"
    extra = []
    if step_f:
        extra.append(f"{count(step_f)} FLOP")
    if step_t:
        extra.append(f"{count(step_t)} transcendentals")
    if extra:
        text += f"; per step, whatever the size: {' and '.join(extra)}"
    return text


def build(data: StudyData) -> dict[str, bytes]:
    plan = data.plan
    runs = optimizer_runs(data)
    models = [m for m in plan.optimizer_models if any(k[0] == m for k in runs)]
    optimizers = [o for o in plan.optimizers or () if any(k[1] == o for k in runs)]
    breakdown = update_breakdown(data)
    files: dict[str, bytes] = {}
    lines = [
        "# Optimizer updates: FLOP per parameter",
        "",
        "Seed 001 (appendix B) assumes SGD for its ratios (2 FLOP per parameter: `w += a·dw`) and "
        f"estimates Adam at ~{SEED_ADAM_FLOPS_PER_PARAMETER} FLOP per parameter. Here is what XLA counts for "
        "each optimizer `xla_cost` knows by name (optax, textbook hyper-parameters), with the reason read "
        f"from the update's jaxpr. The update program is `optimizer.update` + `optax.apply_updates`, analysed at "
        "batch 1 (it does not depend on the batch); square roots and other transcendental functions are "
        "counted apart from FLOP, as XLA counts them.",
        "",
    ]
    if runs:
        files["figures/optimizers-per-parameter.png"] = _fig_per_parameter(data)
        header = ["optimizer", *[f"{net_name(m)} FLOP / param" for m in models], "transcendentals / param", "seed 001"]
        rows = []
        for name in optimizers:
            cells: list[str] = [name]
            trans = []
            for model in models:
                row = runs.get((model, name))
                cells.append("failed" if row is None else sig(row["update_flops"] / row["parameters"]))
                if row is not None:
                    trans.append((row["update_transcendentals"] or 0) / row["parameters"])
            cells.append(value_range(trans, lambda v: sig(v, 3)) if trans else "unknown")
            seed = {"sgd": str(SEED_SGD_FLOPS_PER_PARAMETER), "adam": f"~{SEED_ADAM_FLOPS_PER_PARAMETER}"}
            cells.append(seed.get(name, ""))
            rows.append(cells)
        lines += [
            "![Update FLOP per parameter of every optimizer](figures/optimizers-per-parameter.png)",
            "",
            pipe_table(header, rows),
            "",
            *_optimizer_spread_text(data, models, optimizers),
            "",
        ]
    if breakdown:
        model = plan.breakdown_model
        params = next(iter(breakdown.values())).parameters
        lines += [
            "## Read from the jaxpr",
            "",
            f"The update's jaxpr on {net_name(model)} ({count(params)} parameters), primitive by primitive, per "
            "parameter (a primitive that runs on fewer than 0.5% of the parameters' elements is per-step "
            "work: learning-rate schedules, bias corrections, counters):",
            "",
        ]
        for name in optimizers:
            if name in breakdown:
                lines.append(f"- `{name}`: {_breakdown_text(breakdown[name])}.")
        lines += ["", *_adam_text(data), ""]
        gaps = _jaxpr_gaps(data, model, optimizers)
        if gaps:
            lines += [gaps, ""]
    share = _share_section(data, optimizers)
    if share:
        files["figures/optimizers-update-share.png"] = _fig_update_share(data)
        lines += share
    claims = [c for c in CLAIMS if c.page == NAME]
    if claims:
        lines += ["## Seed 001's claims", "", *claim_lines(data, claims), ""]
    lines += failure_section(data.optimizers)
    lines += environment_section(data)
    lines.append(regenerate_line(data))
    files[f"{NAME}.md"] = markdown_file("\n".join(lines))
    return files


def _optimizer_spread_text(data: StudyData, models: Sequence[str], optimizers: Sequence[str]) -> list[str]:
    runs = optimizer_runs(data)
    same, varies = [], []
    for name in optimizers:
        values = {sig(runs[(m, name)]["update_flops"] / runs[(m, name)]["parameters"])
                  for m in models if (m, name) in runs}
        (same if len(values) == 1 else varies).append(name)
    out = []
    if same:
        out.append(f"- {join_words([f'`{n}`' for n in same])}: the same per parameter on every model — elementwise "
                   "arithmetic on each parameter, its gradient and its moments.")
    breakdown = update_breakdown(data)
    multiplied = [n for n in varies if n in breakdown and breakdown[n].flops.get(PRODUCT, 0)]
    reduced = [n for n in varies if n not in multiplied]
    if reduced:
        out.append(f"- {join_words([f'`{n}`' for n in reduced])}: the figure depends on the model — per-tensor "
                   "reductions (norms, factored second moments) whose cost depends on the tensors' shapes.")
    if multiplied:
        out.append(f"- {join_words([f'`{n}`' for n in multiplied])}: the figure depends on the model — matrix "
                   f"products on each 2-D parameter (`{PRODUCT}` in the update's jaxpr; Muon's Newton–Schulz "
                   "iterations take 4m²n + 2m³ FLOP each on an m × n matrix, m ≤ n, so per parameter they grow "
                   "with the matrix's smaller side, and the parameters that are not matrices take Adam).")
    return out


PRODUCT = "dot_general"
"""The jaxpr's matrix-product primitive: an update that has it multiplies matrices, whose cost per
parameter depends on their shapes."""


def _adam_text(data: StudyData) -> list[str]:
    runs = optimizer_runs(data)
    adam = [r for (m, o), r in runs.items() if o == "adam"]
    b = update_breakdown(data).get("adam")
    if not adam or b is None:
        return []
    flops, trans, step_f, step_t = b.per_parameter()
    per = adam[0]["update_flops"] / adam[0]["parameters"]
    per_t = (adam[0]["update_transcendentals"] or 0) / adam[0]["parameters"]
    divides = flops.get("div", 0.0)
    seed_terms = "; ".join(f"{name}: {cost}" for name, cost in SEED_ADAM_TERMS)
    # optax's Adam, as the jaxpr reads: moments 3 + 4 (mul, add, integer_pow for g^2), one div per bias
    # correction, and m_hat / (sqrt(v_hat) + eps) * -lr + w: add, div, mul, add. Say so only if that is
    # what the breakdown shows.
    expected = {"mul": 5, "add": 4, "div": 3, "integer_pow": 1}
    if {k: round(v, 2) for k, v in flops.items()} != expected or round(trans.get("sqrt", 0), 2) != 1:
        return [
            f"**Adam: {sig(per)} FLOP + {sig(per_t, 3)} transcendental per parameter** against seed 001's "
            f"~{SEED_ADAM_FLOPS_PER_PARAMETER} ({seed_terms}); the jaxpr's primitives are listed above."
        ]
    return [
        f"**Adam: {sig(per)} FLOP + {sig(per_t, 3)} transcendental per parameter, not ~{SEED_ADAM_FLOPS_PER_PARAMETER}.** "
        f"Seed 001 counts five terms per parameter ({seed_terms}). The moment updates cost what the seed "
        "says (`mul`, `add` and `integer_pow` for g²). The differences are in the other three: optax "
        "computes the bias-correction denominators 1 − β₁ᵗ and 1 − β₂ᵗ once per step, on scalars "
        f"({count(step_f)} FLOP and {count(step_t)} transcendentals per step, whatever the model), which leaves one "
        f"division per parameter for each correction ({per_parameter(divides)} `div` per parameter with the step's "
        "m̂ / (√v̂ + ε)); and the square root is one transcendental, not a FLOP. What remains per parameter "
        "is the add of ε, the multiply by the learning rate and the add of `apply_updates`."
    ]


def _jaxpr_gaps(data: StudyData, model: str, optimizers: Sequence[str]) -> str:
    runs = optimizer_runs(data)
    gaps = []
    for name in optimizers:
        row = runs.get((model, name))
        b = update_breakdown(data).get(name)
        if row is None or b is None or not row["update_jaxpr_flops"]:
            continue
        compiled = row["update_flops"] / row["update_jaxpr_flops"]
        if abs(compiled - 1) > 0.005:
            gaps.append(f"`{name}` {ratio(compiled)}")
    if not gaps:
        return (f"On {net_name(model)} XLA's compiled count equals the jaxpr's within 0.5% for every optimizer.")
    return (
        f"XLA's compiled count over the jaxpr's on {net_name(model)}: {join_words(gaps)}; the others agree within 0.5%. "
        "Where they differ, XLA's fusion computes a small elementwise producer (the clipped or scaled "
        "gradient) once per consumer and counts it each time; the headline figures are XLA's."
    )


def _share_batches(batches: Sequence[int]) -> list[int]:
    """The smallest, middle and largest of ``batches`` (sorted, each once)."""
    batches = sorted(batches)
    return sorted({batches[0], batches[len(batches) // 2], batches[-1]})


def _share_section(data: StudyData, optimizers: Sequence[str]) -> list[str]:
    runs = optimizer_runs(data)
    models = [m for m in data.plan.optimizer_models if len(_grad_by_batch(data, m)) > 1]
    if not models:
        return []
    lines = [
        "## The update's share of the training step",
        "",
        "![Update share of the training step against batch size, per optimizer](figures/optimizers-update-share.png)",
        "",
        "The train step is `grad + update`: the gradient program does not depend on the optimizer and the "
        "update does not depend on the batch, so the share at batch B is update / (grad(B) + update), with "
        "grad(B) from the SGD sweeps of [the ratio page](backward-forward-ratio.md) and the update from the "
        "table above.",
        "",
    ]
    table_rows = []
    for model in models:
        grads = _grad_by_batch(data, model)
        for name in optimizers:
            row = runs.get((model, name))
            if row is None:
                continue
            table_rows.append([net_name(model), name] + [
                f"{pct_sig(row['update_flops'] / (grads[b] + row['update_flops']))} (batch {b})"
                for b in _share_batches(grads)
            ])
    width = max(len(r) for r in table_rows)
    table_rows = [r + [""] * (width - len(r)) for r in table_rows]
    lines += [
        pipe_table(["model", "optimizer", *["smallest batch", "middle batch", "largest batch"][: width - 2]],
                   table_rows, "ll" + "r" * (width - 2)),
        "",
    ]
    for model in models:
        grads = _grad_by_batch(data, model)
        first, last = min(grads), max(grads)
        shares = {
            name: tuple(runs[(model, name)]["update_flops"] / (grads[b] + runs[(model, name)]["update_flops"])
                        for b in (first, last))
            for name in optimizers if (model, name) in runs
        }
        if not shares:
            continue
        top = max(shares, key=lambda n: shares[n][0])
        lines.append(
            f"- {net_name(model)}: at batch {first} the update is {value_range([s[0] for s in shares.values()], pct_sig)} "
            f"of the step's FLOP (`{top}` the most), at batch {last} "
            f"{value_range([s[1] for s in shares.values()], pct_sig)}."
        )
    lines.append("")
    return lines
