"""The page ``zoo``: every model of the zoo at batch 1.

Parameters (a mixture of experts' active ones too) against the published counts
(`xla_cost.study.published`, or the family's own table: `ModelSpec.published`),
forward FLOP per example or token against the analytic figure
(`xla_cost.study.analytic`, or the family's closed form of its products:
`ModelSpec.forward_flops`), backward, update and train-step FLOP, and the
analysis time of each model (a committed CSV).
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.present.figures import PASS_COLORS, figure, png
from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import count, join_words, ratio, sig, value_range
from xla_cost.study.analytic import kaplan_per_token, textbook_macs
from xla_cost.study.data import StudyData, collected
from xla_cost.study.published import PUBLISHED_GMAC, PUBLISHED_PARAMETERS
from xla_cost.study.views import (
    NET_NAMES,
    analysed,
    data_link,
    environment_section,
    failure_section,
    net_name,
    per_unit,
    r2,
    records,
    regenerate_line,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

NAME = "zoo"
TITLE = ("Every zoo model: parameters against published counts, FLOP per example or token against the analytic "
         "formula, analysis time")
ORDER = 40


@collected
def analysis_time(data: StudyData) -> tuple[pathlib.Path, pd.DataFrame] | None:
    """The committed analysis times (``benchmarks/time_analysis.py``), the newest file."""
    return data.latest("analysis_time")


_CLOSED_FORM = "products, closed form"
"""How the analytic figure of a family that declares its closed form (`ModelSpec.forward_flops`) reads."""


def _analytic(model: str, parameters: int) -> tuple[float, str] | None:
    """(analytic forward FLOP per example or token, how) for a zoo model."""
    from xla_cost import zoo

    spec = zoo.get_spec(model)
    if spec.forward_flops is not None:  # the family's own closed form, per example (one sequence)
        size, _ = per_unit({"model": model, "batch_size": 1})
        return spec.forward_flops(zoo.build_model(model)) / size, _CLOSED_FORM
    if model in PUBLISHED_GMAC:
        gmac, source = PUBLISHED_GMAC[model]
        return 2e9 * gmac, f"2 × {gmac} GMAC ({source})"
    macs = textbook_macs(model, spec.defaults)
    if macs is not None:
        return 2 * sum(macs.values()), "2 × MAC of the layers"
    if spec.input_dtype != "float" and {"d_model", "n_layer", "seq_len", "vocab_size"} <= set(spec.defaults):
        return kaplan_per_token(spec.defaults)[0], "Kaplan, adjusted"
    return None


def _published(model: str) -> tuple[float, float | None, str] | None:
    """(published total, published active or None, source) of a zoo model: its
    family's table (`ModelSpec.published`), else `PUBLISHED_PARAMETERS`; None: unpublished."""
    from xla_cost import zoo

    spec = zoo.get_spec(model)
    if spec.published is not None:
        return spec.published.parameters, spec.published.active, spec.published.source
    if model in PUBLISHED_PARAMETERS:
        value, source = PUBLISHED_PARAMETERS[model]
        return value, None, source
    return None


def _as_published(value: float) -> str:
    """A rounded published count as it is written: ``1.3B``, ``405.9B``, ``125M``."""
    scale, letter = (1e9, "B") if value >= 1e9 else (1e6, "M")
    return f"{float(f'{value / scale:.4g}'):g}{letter}"


def _published_match(model: str, parameters: int, active: int | None) -> str:
    published = _published(model)
    if published is None:
        return "—"
    value, published_active, source = published
    if parameters == value and published_active in (None, active):
        return f"= {count(value)} ({source})"
    text = f"{_as_published(value)}, {ratio(parameters / value, 3)}×"
    if published_active is not None:
        text = (f"{text} total; {_as_published(published_active)} active, "
                f"{ratio(None if active is None else active / published_active, 3)}×")
    return f"{text} ({source}, rounded)"


def _parameters(row: dict[str, Any]) -> str:
    """The parameters cell: the total, and the active ones of a model that declares its routing."""
    if row.get("active_parameters") is None:
        return count(row["parameters"])
    return f"{count(row['parameters'])} total, {count(row['active_parameters'])} active"


def _fig_zoo(rows: Sequence[dict[str, Any]]) -> bytes:
    usable = [r for r in rows if r["_analytic"] is not None]

    def draw() -> Figure:
        fig, axes = figure(9.0, 0.3 * len(usable) + 1.6)
        ax = axes[0][0]
        ys = list(range(len(usable)))[::-1]
        for y, row in zip(ys, usable):
            quotient = row["_per"] / row["_analytic"][0]
            color = PASS_COLORS["forward"] if quotient < 1 else PASS_COLORS["backward"]
            ax.plot([1, quotient], [y, y], color=color, linewidth=2)
            ax.plot([quotient], [y], "o", color=color)
            ax.annotate(f"{quotient:.3f}", (quotient, y), xytext=(5 if quotient >= 1 else -5, 0), textcoords="offset points",
                        ha="left" if quotient >= 1 else "right", va="center", fontsize=8)
        ax.set_yticks(ys, [f"{r['model']} ({r['_analytic'][1]})" for r in usable])
        ax.axvline(1, color="0.3", linewidth=1)
        ratios = [r["_per"] / r["_analytic"][0] for r in usable]
        ax.set_xlim(min(min(ratios), 0.95) - 0.03, max(max(ratios), 1.05) + 0.03)
        ax.set_xlabel("counted forward FLOP ÷ analytic forward FLOP")
        ax.grid(axis="y", visible=False)
        fig.suptitle("XLA's forward count against the analytic figure (left of 1: fewer FLOP counted)")
        return fig

    return png(draw)


def build(data: StudyData) -> dict[str, bytes]:
    from xla_cost import zoo

    files: dict[str, bytes] = {}
    runs = {r["model"]: r for r in records(analysed(data.zoo.runs))}
    times: dict[str, float] = {}
    time_file = analysis_time(data)
    if time_file is not None:
        for row in records(time_file[1]):
            if row.get("seconds") is not None:
                times[row["model"]] = float(row["seconds"])
    rows = []
    for model in data.plan.zoo or ():
        if model not in runs:
            continue
        run = dict(runs[model])
        size, unit = per_unit(run)
        run["_count"], run["_unit"] = size, unit
        run["_per"] = run["forward_flops"] / size
        run["_analytic"] = _analytic(model, run["parameters"])
        rows.append(run)
    lines = [
        "# The model zoo",
        "",
        "Every model of `xla_cost.zoo` at batch 1 (one image, one example, or one sequence of "
        "`seq_len` tokens), SGD, float32, each at its zoo defaults (`xla-cost models` lists them: the "
        "sequence length, the mixtures of experts' capacity factor and dispatch), counted by XLA "
        "(`xla-cost analyze NAME`). FLOP are per example or "
        "per token; the train step is `grad + update`. `*`: the model scans its layers (`nn.scan`), XLA "
        "counts the loop body once and the figure is corrected for the missed iterations. A mixture of "
        "experts lists its total and its active parameters (those a token's computation reads: the routed "
        "experts counted top_k / experts, `xla_cost.step.routing`).",
        "",
    ]
    if rows:
        files["figures/zoo-analytic.png"] = _fig_zoo(rows)
        table = []
        for r in rows:
            size, unit = r["_count"], r["_unit"]
            star = " *" if r.get("forward_source") == "xla+loops" else ""
            analytic = r["_analytic"]
            table.append([
                f"`{r['model']}`", _parameters(r),
                _published_match(r["model"], r["parameters"], r.get("active_parameters")),
                unit.removeprefix("/ "),
                sig(r["forward_flops"] / size / 1e9) + star,
                "—" if analytic is None else f"{sig(analytic[0] / 1e9)} ({analytic[1]})",
                "—" if analytic is None else ratio(r["_per"] / analytic[0]),
                sig(r["backward_flops"] / size / 1e9), ratio(r["backward_to_forward"]),
                sig(r["update_flops"] / size / 1e9),
                sig(r["train_step_flops"] / size / 1e9),
                f"{times[r['model']]:.1f}" if r["model"] in times else "—",
            ])
        lines += [
            pipe_table(["model", "parameters", "published", "per", "forward GFLOP", "analytic GFLOP",
                        "counted / analytic", "backward GFLOP", "bwd / fwd", "update GFLOP (SGD)",
                        "train step GFLOP", "analysis s"], table, "lrllrlrrrrrr"),
            "",
            *_zoo_text(data, rows, time_file),
            "",
            "![Counted forward FLOP against the analytic figure](figures/zoo-analytic.png)",
            "",
        ]
    lines += failure_section(data.zoo)
    sources = sorted({zoo.get_spec(r["model"]).source for r in rows if zoo.get_spec(r["model"]).source})
    if sources:
        lines += ["Architectures: " + "; ".join(sources) + ".", ""]
    lines += environment_section(data, [time_file[0]] if time_file is not None else [])
    lines.append(regenerate_line(data))
    files[f"{NAME}.md"] = markdown_file("\n".join(lines))
    return files


def _zoo_text(data: StudyData, rows: Sequence[dict[str, Any]], time_file: tuple[pathlib.Path, pd.DataFrame] | None) -> list[str]:
    out = []
    published = {r["model"]: _published(r["model"]) for r in rows}
    exact = [r["model"] for r in rows if published[r["model"]] is not None
             and r["parameters"] == published[r["model"]][0]]
    rounded = [r for r in rows if published[r["model"]] is not None and r["model"] not in exact]
    actives = [r for r in rows if published[r["model"]] is not None and published[r["model"]][1] is not None
               and r.get("active_parameters") is not None]
    if exact or rounded:
        out.append(f"- Parameters: {len(exact)} models equal their published counts exactly"
                   + (f"; {len(rounded)} against their published figures, rounded as published: "
                      f"{value_range([r['parameters'] / published[r['model']][0] for r in rounded])}×"
                      if rounded else "")
                   + (f"; the mixtures of experts' active parameters against theirs: "
                      f"{value_range([r['active_parameters'] / published[r['model']][1] for r in actives])}×"
                      if actives else "") + ".")
    cnn = [r for r in rows if r["model"] in PUBLISHED_GMAC]
    if cnn:
        out.append(
            f"- CNNs and ViT against 2 × the published multiply-accumulates: "
            f"{value_range([r['_per'] / r['_analytic'][0] for r in cnn])}. The published tables count kernel taps on "
            "padding; XLA counts only taps on real input, then adds BatchNorm, ReLU, pooling, softmax and the "
            "loss, which the tables leave out."
        )
    seeds = [r for r in rows if r["model"] in NET_NAMES and r["_analytic"] is not None]
    if seeds:
        out.append(
            f"- Seed 001's nets against 2 × their layers' multiply-accumulates: "
            f"{join_words([net_name(r['model']) + ' ' + ratio(r['_per'] / r['_analytic'][0]) for r in seeds])} "
            "(ReLUs, pooling and the loss added; padding taps and OneNet's length-1 contraction, counted as a "
            "multiply, removed)."
        )
    text = [r for r in rows if r["_analytic"] is not None and r["_analytic"][1].startswith("Kaplan")]
    if text:
        out.append(
            "- Transformers against Kaplan et al. (2020, Table 1), 2N + 2·n_layer·n_ctx·d_model per token with "
            "N the non-embedding parameters, adjusted for the attention scores of all n_ctx² pairs (the causal "
            "mask is applied, not exploited) and the output head (2·d_model·V): "
            f"{value_range([r['_per'] / r['_analytic'][0] for r in text])}; the rest is LayerNorm, softmax, GELU, "
            "biases and the loss."
        )
    closed = [r for r in rows if r["_analytic"] is not None and r["_analytic"][1] == _CLOSED_FORM]
    if closed:
        out.append(
            "- Llama, Gemma and the mixtures of experts against the matrix products of their families' closed "
            "forms (`ModelSpec.forward_flops`: the projections, the gated MLP or the experts, the head, the "
            "attention's q·kᵀ and probs·v over all seq_len² pairs; the experts on every capacity slot, filled or "
            "not, and the einsum dispatch's masks): "
            f"{value_range([r['_per'] / r['_analytic'][0] for r in closed])}; the rest is RMSNorm, rotary "
            "embeddings, softmax, the gates' activations, the router and the loss."
        )
    others = [r for r in rows if r["model"] not in NET_NAMES]
    if others:
        out.append(f"- Forward + backward cost {value_range([1 + r['backward_to_forward'] for r in others], r2)}× the "
                   "forward pass outside seed 001's nets (Kaplan's rule of thumb: 3×).")
    if time_file is not None:
        path, frame = time_file
        timed = records(frame)
        first = timed[0] if timed else {}
        loads = [float(r["load_average"]) for r in timed if r.get("load_average") is not None]
        out.append(
            f"- Analysis seconds: one `analyze()` call per model at batch 1 (SGD, compiled: four programs and "
            f"the jaxpr counts), one model after another, measured by `benchmarks/time_analysis.py` on "
            f"{first.get('device', 'the machine')} ({first.get('cores', '?')} cores, jax "
            f"{first.get('jax_version', '?')}, {first.get('date', '?')}) with the compilation cache off"
            + (f", load average {value_range(loads, lambda v: f'{v:.1f}')} (a shared machine: about ±30% from run to run)"
               if loads else "")
            + f": {data_link(data, path)}."
        )
    else:
        out.append("- Analysis seconds: no `reports/data/analysis_time_*.csv` is committed "
                   "(`python benchmarks/time_analysis.py` writes it).")
    return out
