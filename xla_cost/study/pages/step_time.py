"""The page ``step-time``: measured forward, backward and update times against seed 000's shares.

Read from the committed timing CSVs (``benchmarks/time_zoo.py``), one section
per file: the device, the command and the peaks per dtype it is judged
against; the phases' shares of step time against the V100's 23 / 74 / 3, the
time ratio against the FLOP ratio and MFU, one panel per dtype; time per
example against the batch where a model was timed at several; the
measurements this project cannot explain (`xla_cost.study.views.TIMING_ANOMALIES`);
then the seeds' claims about time and the environment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.present.figures import LINE_COLORS, PASS_COLORS, figure, log2_batch_axis, png, reference
from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import join_words, pct, ratio, sig, slug, value_range
from xla_cost.study.claims import CLAIMS, claim_lines
from xla_cost.study.data import StudyData
from xla_cost.study.published import DDP_MODELS, DDP_SHARES
from xla_cost.study.views import (
    SHARE_PHASES,
    anomaly,
    case_label,
    data_link,
    environment_section,
    hardware,
    ms,
    phase_shares,
    r2,
    regenerate_line,
    shares_text,
    time_interval,
    timing_cases,
    twin,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

NAME = "step-time"
TITLE = "Measured forward/backward/update shares, MFU and roofline against seed 000's 23/74/3"
ORDER = 30

MARK = "†"
"""The mark of a case with an unexplained measurement, in tables and figures."""


def _label(case: Mapping[str, Any], **parts: bool) -> str:
    """`case_label`, marked when the case is unexplained."""
    return case_label(case, **parts) + (f" {MARK}" if anomaly(case) else "")


def _dtypes(cases: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(c["dtype"] for c in cases))


def _batches(cases: Sequence[Mapping[str, Any]]) -> str:
    return "batch " + value_range([c["batch"] for c in cases], lambda v: f"{v:g}")


def _tf32(cases: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the peaks the file was judged against give float32 as TF32 (a tensor-core GPU)."""
    return any("TF32" in str(c.get("peak_source") or "") for c in cases)


def _dtype_title(dtype: str, cases: Sequence[Mapping[str, Any]]) -> str:
    return f"{dtype} (TF32 matmuls)" if dtype == "float32" and _tf32(cases) else dtype


def _fig_step_shares(cases: Sequence[dict[str, Any]], device: str) -> bytes:
    dtypes = _dtypes(cases)

    def draw() -> Figure:
        per = max(sum(1 for c in cases if c["dtype"] == d and phase_shares(c)) for d in dtypes)
        fig, axes = figure(7.2 * len(dtypes), 0.34 * (per + 1) + 1.8, 1, len(dtypes), sharey=False)
        for ax, dtype in zip(axes[0], dtypes):
            chosen = [c for c in cases if c["dtype"] == dtype and phase_shares(c)]
            labels = ["V100, DDP paper (seed 000)"] + [_label(c, dtype=False) for c in chosen]
            bars = [dict(DDP_SHARES)] + [phase_shares(c) for c in chosen]
            ys = list(range(len(bars)))[::-1]
            for y, shares in zip(ys, bars):
                left = 0.0
                for phase in SHARE_PHASES:
                    width = 100 * shares[phase]
                    ax.barh(y, width, left=left, color=PASS_COLORS[phase], height=0.7,
                            edgecolor="black" if y == ys[0] else None, linewidth=1.0)
                    if width >= 7:
                        ax.annotate(f"{width:.0f}", (left + width / 2, y), ha="center", va="center",
                                    fontsize=8, color="white", fontweight="bold")
                    left += width
            ax.set_yticks(ys, labels, fontsize=8)
            ax.set_xlim(0, 100)
            ax.set_xlabel("share of forward + backward + update time (%)")
            ax.set_title(f"{_dtype_title(dtype, cases)}, {_batches(chosen)}")
            ax.grid(axis="y", visible=False)
        from matplotlib.patches import Patch

        handles = [Patch(color=PASS_COLORS[p], label=p) for p in SHARE_PHASES]
        fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
        fig.suptitle(f"Share of step time per phase on {device} ({join_words(dtypes)}; batch in each label), "
                     "against the V100's 23 / 74 / 3")
        return fig

    return png(draw)


def _spread(wanted: Sequence[float], gap: float, low: float = 0.0, high: float = 1.0) -> list[float]:
    """Positions for labels wanted at ``wanted`` (ascending), at least ``gap``
    apart and within [low, high] where they fit, each moved as little as the
    gaps allow (a pass up, then one down from ``high``)."""
    out: list[float] = []
    for value in wanted:
        out.append(max(value, low) if not out else max(value, out[-1] + gap))
    if out and out[-1] > high:
        out[-1] = high
        for i in range(len(out) - 2, -1, -1):
            out[i] = min(out[i], out[i + 1] - gap)
    return out


def _labels_at_right(ax: Axes, points: Sequence[tuple[float, float, str, str]], gap: float) -> None:
    """Each point's label in a column right of the axes, in the points' vertical
    order, never closer than ``gap`` (axes fraction), a thin line to its point."""
    low, high = ax.get_ylim()
    order = sorted(points, key=lambda p: p[1])
    wanted = [(y - low) / (high - low) for _, y, _, _ in order]
    for (x, y, text, color), at in zip(order, _spread(wanted, gap)):
        ax.annotate(text, (x, y), xytext=(1.03, at), textcoords="axes fraction", fontsize=7, color=color,
                    va="center", ha="left", annotation_clip=False,
                    arrowprops={"arrowstyle": "-", "color": color, "linewidth": 0.4, "alpha": 0.6})


def _draw_time_vs_flop(cases: Sequence[dict[str, Any]], device: str) -> Figure:
    usable = [c for c in cases if c["time_ratio"] is not None and c["flop_ratio"] is not None]
    dtypes = _dtypes(usable)
    markers = {"sgd": "o", "adam": "s"}
    most = max(sum(1 for c in usable if c["dtype"] == d) for d in dtypes)
    height = max(5.6, 0.2 * most + 1.8)
    fig, axes = figure(7.4 * len(dtypes), height, 1, len(dtypes))
    values = [v for c in usable for v in (c["flop_ratio"], c["time_ratio"])]
    low, high = min(0.5, min(values) * 0.9), max(3.4, max(values) * 1.05)
    ddp = DDP_SHARES["backward"] / DDP_SHARES["forward"]
    for ax, dtype in zip(axes[0], dtypes):
        chosen = [c for c in usable if c["dtype"] == dtype]
        models = list(dict.fromkeys(c["model"] for c in chosen))
        points = []
        for case in chosen:
            color = LINE_COLORS[models.index(case["model"]) % len(LINE_COLORS)]
            ax.plot([case["flop_ratio"]], [case["time_ratio"]], markers.get(case["optimizer"], "^"), color=color,
                    markersize=6, alpha=0.85)
            points.append((case["flop_ratio"], case["time_ratio"], _label(case, dtype=False), color))
        ax.plot([low, high], [low, high], color="0.5", linewidth=1, linestyle="--")
        ax.annotate("time ratio = FLOP ratio", (low, low), xytext=(6, 2), textcoords="offset points", fontsize=8,
                    color="0.4", rotation=0)
        reference(ax, ddp, f"V100 (seed 000): {ddp:.1f}")
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        ax.set_xlabel("backward / forward FLOP (counted)")
        ax.set_ylabel("backward / forward time (measured)")
        ax.set_title(f"{_dtype_title(dtype, cases)}, {_batches(chosen)}")
        handles = [ax.plot([], [], markers[o], color="0.3", label=o)[0] for o in markers]
        ax.legend(handles=handles, loc="upper left", frameon=False)
        # the labels' column: one line of 7-point text each, over the axes' height
        _labels_at_right(ax, points, gap=11 / (72 * 0.78 * height))
    fig.suptitle(f"Measured time ratio against FLOP ratio on {device} ({join_words(dtypes)}; batch in each label)")
    return fig


def _fig_time_vs_flop(cases: Sequence[dict[str, Any]], device: str) -> bytes:
    return png(lambda: _draw_time_vs_flop(cases, device))


def _fig_mfu(cases: Sequence[dict[str, Any]], device: str) -> bytes:
    dtypes = _dtypes(cases)

    def draw() -> Figure:
        fig, axes = figure(7.0 * len(dtypes), 4.8, 1, len(dtypes))
        for ax, dtype in zip(axes[0], dtypes):
            chosen = [c for c in cases if c["dtype"] == dtype and c["optimizer"] == "sgd"] or \
                [c for c in cases if c["dtype"] == dtype]
            width = 0.8 / len(SHARE_PHASES)
            xs = list(range(len(chosen)))
            for i, phase in enumerate(SHARE_PHASES):
                values = [100 * (c["phases"].get(phase, {}).get("mfu") or 0) for c in chosen]
                ax.bar([x - 0.4 + width * (i + 0.5) for x in xs], values, width, color=PASS_COLORS[phase],
                       label=phase)
            ax.set_xticks(xs, [_label(c, dtype=False, optimizer=False) for c in chosen], rotation=30, ha="right",
                          fontsize=8)
            ax.set_ylabel("MFU: achieved FLOP/s ÷ peak (%)")
            peak = chosen[0].get("peak") if chosen else None
            ax.set_title(f"{_dtype_title(dtype, cases)}, SGD: against {sig((peak or 0) / 1e12, 4)} TFLOP/s")
            ax.legend(loc="upper left", frameon=False)
            ax.grid(axis="x", visible=False)
        fig.suptitle(f"Model FLOP utilisation per phase on {device} ({join_words(dtypes)}; batch in each label)")
        return fig

    return png(draw)


def _series(cases: Sequence[dict[str, Any]]) -> dict[tuple[str, str, str, str], list[dict[str, Any]]]:
    """Cases of one model, shapes, dtype and optimizer timed at several batch sizes, by batch."""
    out: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for case in cases:
        if time_interval(case, "train_step") is not None:
            out.setdefault((case["model"], case["config"], case["dtype"], case["optimizer"]), []).append(case)
    return {k: sorted(v, key=lambda c: c["batch"]) for k, v in out.items() if len({c["batch"] for c in v}) > 1}


def _fig_batch(series: Mapping[tuple[str, str, str, str], list[dict[str, Any]]], device: str) -> bytes:
    def draw() -> Figure:
        fig, axes = figure(10.0, 5.4)
        ax = axes[0][0]
        batches = sorted({c["batch"] for cs in series.values() for c in cs})
        kinds = {time_interval(c, "train_step").kind for cs in series.values() for c in cs}
        for i, ((model, _, dtype, optimizer), chosen) in enumerate(series.items()):
            spans = [time_interval(c, "train_step") for c in chosen]
            ys = [1e3 * s.median / c["batch"] for s, c in zip(spans, chosen)]
            below = [y - 1e3 * s.low / c["batch"] for y, s, c in zip(ys, spans, chosen)]
            above = [1e3 * s.high / c["batch"] - y for y, s, c in zip(ys, spans, chosen)]
            ax.errorbar([c["batch"] for c in chosen], ys, yerr=[below, above], color=LINE_COLORS[i % len(LINE_COLORS)],
                        marker="os"[optimizer == "adam"], capsize=3, linewidth=1.4,
                        label=f"{model} {dtype} {optimizer}")
        log2_batch_axis(ax, batches)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("train-step time per example (ms)")
        ax.legend(loc="upper right", frameon=False, fontsize=8)
        models = join_words(sorted({k[0] for k in series}))
        dtypes = join_words(list(dict.fromkeys(k[2] for k in series)))
        bars = "the file's interval" if kinds == {"interval"} else "the IQR's width, centred on the median"
        fig.suptitle(f"Train-step time per example against the batch on {device}\n{models}, batch "
                     f"{batches[0]}–{batches[-1]}, {dtypes}; bars: {bars}", fontsize=11)
        return fig

    return png(draw)


def _peaks_line(cases: Sequence[dict[str, Any]]) -> str:
    """The peaks MFU and the roofline were computed against, per dtype, and what float32 means there."""
    peaks = {c["dtype"]: c["peak"] for c in cases if c.get("peak")}
    bandwidth = next((c["bandwidth"] for c in cases if c.get("bandwidth")), None)
    if not peaks:
        return "No peak is recorded: MFU and the roofline are unknown."
    text = ("Peaks used for MFU and the roofline, per dtype: "
            + ", ".join(f"{d} {sig(p / 1e12, 4)} TFLOP/s" for d, p in peaks.items())
            + (f"; memory bandwidth {sig(bandwidth / 1e9, 4)} GB/s" if bandwidth else "")
            + f" ({cases[0].get('peak_source') or 'source not recorded'}).")
    if _tf32(cases):
        text += (" float32 here means TF32: on a tensor-core GPU XLA runs float32 matrix products in TF32 by "
                 "default, so float32 MFU is against the TF32 peak.")
    elif hardware(cases[0]["device"]) == "cpu":
        text += " The CPU has no 16-bit units: bfloat16 is emulated in float32, against the same peak."
    return text


def _interval_line(cases: Sequence[dict[str, Any]]) -> str:
    spans = [s for c in cases for p in ("forward", "grad", "update", "train_step") if (s := time_interval(c, p))]
    if not spans:
        return "The file records no spread of the times."
    repeats = sorted({s.repeats for s in spans if s.repeats})
    runs = f"medians of {value_range(repeats, lambda v: f'{v:g}')} timed runs" if repeats else "medians"
    spread = value_range([(s.high - s.low) / s.median for s in spans], lambda v: pct(v, 1))
    if all(s.kind == "interval" for s in spans):
        return f"Times are {runs}, with the interval the file records (width {spread} of the median)."
    return (f"Times are {runs}. The file records the interquartile range (IQR), not an interval: {spread} of the "
            "median; tables give it, figures draw its width centred on the median. `backward` (grad − forward) "
            "has none of its own.")


def _sci(value: float | None, digits: int = 3) -> str:
    """A large count in scientific notation (``8.44e11``); ``unknown`` for None."""
    return "unknown" if value is None else f"{value:.{digits - 1}e}".replace("e+", "e")


def _anomaly_lines(cases: Sequence[dict[str, Any]]) -> list[str]:
    """One paragraph per unexplained measurement of this file, with its figures beside the float32 twin's."""
    out = []
    for found in dict.fromkeys(a for c in cases if (a := anomaly(c))):
        pairs = [(c, other) for c in cases if anomaly(c) == found and (other := twin(c, cases, "float32"))]
        if not pairs:
            continue
        phase = found.phase
        parts = []
        for case, other in pairs:
            a, b = (c["phases"].get(phase, {}).get("median_s") for c in (case, other))
            fa, fb = (c["phases"].get("forward", {}).get("median_s") for c in (case, other))
            parts.append(f"{case['optimizer']}: {ms(a)} ms against {ms(b)} ms in float32 (the forward pass "
                         f"{r2(fa / fb) if fa and fb else 'unknown'}× the float32 one)")
        case, other = pairs[0]
        counts = [c["phases"].get(phase, {}) for c in (case, other)]
        out.append(
            f"{MARK} **Unexplained: the {found.dtype} {phase} pass of {case_label(case, dtype=False, optimizer=False)}.** "
            + "; ".join(parts) + f". XLA's GPU cost analysis counts {_sci(counts[0].get('xla_flops'))} FLOP for the "
            f"{found.dtype} {phase} against {_sci(counts[1].get('xla_flops'))} in float32; the analyzer counts "
            f"{_sci(counts[0].get('flops'), 4)} against {_sci(counts[1].get('flops'), 4)}. "
            f"{found.note[0].upper() + found.note[1:]}.")
    return [line for paragraph in out for line in (paragraph, "")]


def build(data: StudyData) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    lines = [
        "# Measured step time: forward, backward and update",
        "",
        "Seed 000 quotes the PyTorch DDP paper (Li et al. 2020, Figure 6): on a V100, ResNet-50 and BERT "
        f"spend {pct(DDP_SHARES['forward'], 0)} / {pct(DDP_SHARES['backward'], 0)} / "
        f"{pct(DDP_SHARES['update'], 0)} of the step's forward + backward + optimizer time in each phase, so "
        "the backward pass takes about 3× the forward pass. This page sets measured times beside those shares "
        "and beside the FLOP ratio the analyzer counts, one section per committed timing file. Times are "
        "medians of repeated runs of compiled programs (warm-up excluded, `block_until_ready`); `backward` is "
        "`grad − forward`, like the counts; MFU is achieved FLOP/s over the device's peak for the case's "
        "dtype; the roofline is max(FLOP / peak, bytes / bandwidth). Every label names the case's batch and "
        f"every panel its dtype; {MARK} marks a measurement this project cannot explain.",
        "",
    ]
    if not data.timing:
        lines += ["No timing data is committed under `reports/data/` (run `python benchmarks/time_zoo.py`).", ""]
    for path, frame in data.timing:
        cases = timing_cases(frame)
        if not cases:
            continue
        device = cases[0]["device"]
        on_cpu = hardware(device) == "cpu"
        stem = slug(path.stem)
        files[f"figures/step-time-{stem}-shares.png"] = _fig_step_shares(cases, device)
        files[f"figures/step-time-{stem}-ratio.png"] = _fig_time_vs_flop(cases, device)
        files[f"figures/step-time-{stem}-mfu.png"] = _fig_mfu(cases, device)
        lines += [
            f"## {device}: {data_link(data, path)}",
            "",
            f"{len(cases)} cases measured with jax {cases[0]['jax_version']} on {cases[0]['date']} by "
            + ("`python benchmarks/time_zoo.py --reduced` (the models at CPU-sized shapes)." if on_cpu
               else "`python benchmarks/time_zoo.py`.") + f" {_peaks_line(cases)} {_interval_line(cases)}",
            "",
        ]
        if on_cpu:
            lines += ["**This is CPU data**: a 2-core shared machine, milliseconds-scale runs at reduced shapes. "
                      "bfloat16 on a CPU is emulated in float32 and says nothing about a GPU. The claims about GPU "
                      "training are not judged on it; it is the CPU side of the GPU-against-CPU claim only.", ""]
        lines += [
            f"![Share of step time per phase on {device}, against the V100's](figures/step-time-{stem}-shares.png)",
            "",
            _timing_table(cases),
            "",
            *_anomaly_lines(cases),
            *_timing_text(cases),
            "",
            f"![Backward/forward time ratio against the FLOP ratio on {device}](figures/step-time-{stem}-ratio.png)",
            "",
            f"![MFU per phase on {device}](figures/step-time-{stem}-mfu.png)",
            "",
        ]
        series = _series(cases)
        if series:
            files[f"figures/step-time-{stem}-batch.png"] = _fig_batch(series, device)
            lines += [f"![Time per example against the batch on {device}](figures/step-time-{stem}-batch.png)", ""]
    claims = [c for c in CLAIMS if c.page == NAME]
    if claims:
        lines += ["## The seeds' claims about time", "", *claim_lines(data, claims), ""]
    lines += environment_section(data, [p for p, _ in data.timing])
    lines.append(regenerate_line(data).replace("; the counts come from `xla_cost.sweep` through the results store",
                                           "; the times come from the committed CSV files"))
    files[f"{NAME}.md"] = markdown_file("\n".join(lines))
    return files


def _spread_cell(case: Mapping[str, Any]) -> str:
    span = time_interval(case, "train_step")
    if span is None:
        return "unknown"
    runs = f", {span.repeats} runs" if span.repeats else ""
    if span.kind == "interval":
        return f"{ms(span.median)} [{ms(span.low)}, {ms(span.high)}{runs}]"
    return f"{ms(span.median)} (IQR {ms(span.high - span.low)}{runs})"


def _timing_table(cases: Sequence[dict[str, Any]]) -> str:
    rows = []
    for case in cases:
        shares = phase_shares(case) or {}
        step = case["phases"].get("train_step", {})
        over = (step.get("median_s") / step.get("roofline_s")
                if step.get("median_s") and step.get("roofline_s") else None)
        rows.append([
            _label(case, dtype=False, optimizer=False), case["dtype"], case["optimizer"], _spread_cell(case),
            *[pct(shares.get(p), 0) if shares else "skipped" for p in SHARE_PHASES],
            ratio(case["time_ratio"], 2), ratio(case["flop_ratio"], 2),
            pct(step.get("mfu")), ratio(over, 2) if over else "unknown", step.get("bound") or "",
        ])
    return pipe_table(
        ["case", "dtype", "optimizer", "train step ms", "forward", "backward", "update", "bwd/fwd time",
         "bwd/fwd FLOP", "train-step MFU", "time / roofline", "bound"],
        rows, "lll" + "r" * 8 + "l",
    )


def _timing_text(cases: Sequence[dict[str, Any]]) -> list[str]:
    out = []
    for dtype in _dtypes(cases):
        for optimizer in dict.fromkeys(c["optimizer"] for c in cases):
            chosen = [c for c in cases if c["dtype"] == dtype and c["optimizer"] == optimizer and phase_shares(c)]
            if not chosen:
                continue
            ddp = [c for c in chosen if c["model"] in DDP_MODELS]
            parts = [f"{p} {value_range([phase_shares(c)[p] for c in chosen], lambda v: pct(v, 0))}" for p in SHARE_PHASES]
            text = (f"- {dtype}, {optimizer}: {', '.join(parts)} over {len(chosen)} cases of "
                    f"{len({c['model'] for c in chosen})} models")
            if ddp:
                text += ("; " + "; ".join(f"{_label(c, dtype=False, optimizer=False)} {shares_text(c)}" for c in ddp)
                         + f" (V100: {' / '.join(pct(DDP_SHARES[p], 0) for p in SHARE_PHASES)})")
            top = max(chosen, key=lambda c: phase_shares(c)["update"])
            out.append(text + f". The largest update share: {_label(top, dtype=False, optimizer=False)}, "
                       f"{pct(phase_shares(top)['update'], 0)}.")
    timed = [c for c in cases if c["time_ratio"] is not None and c["flop_ratio"] is not None]
    for dtype in _dtypes(timed):
        chosen = [c for c in timed if c["dtype"] == dtype]
        out.append(
            f"- {dtype}: measured backward/forward time {value_range([c['time_ratio'] for c in chosen], r2)} "
            f"against a FLOP ratio of {value_range([c['flop_ratio'] for c in chosen], r2)}."
        )
    bounds = [p.get("bound") for c in cases for name, p in c["phases"].items() if name in SHARE_PHASES]
    memory = sum(1 for b in bounds if b == "memory")
    if bounds:
        out.append(f"- The roofline calls {memory} of {len(bounds)} timed phases memory-bound (bytes / bandwidth "
                   "above FLOP / peak).")
    pairs = []
    for case in cases:
        other = twin(case, cases, "float32") if case["dtype"] == "bfloat16" and not anomaly(case) else None
        a = case["phases"].get("train_step", {}).get("median_s")
        b = other["phases"].get("train_step", {}).get("median_s") if other else None
        if a and b:
            pairs.append(a / b)
    if pairs:
        out.append(f"- bfloat16 train step / float32 train step: {value_range(pairs, r2)}× the time"
                   + (f" ({MARK} cases left out)." if any(anomaly(c) for c in cases) else "."))
    return out
