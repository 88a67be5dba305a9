"""The page ``step-time``: measured forward, backward and update times against seed 000's shares.

Read from the committed timing CSVs (``benchmarks/time_zoo.py``), one section
per file: the phases' shares of step time against the V100's 23 / 74 / 3, the
time ratio against the FLOP ratio, MFU and the roofline, and the seeds' claims
about time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.present.figures import LINE_COLORS, PASS_COLORS, figure, png, reference
from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import join_words, pct, ratio, sig, slug, value_range
from xla_cost.study.claims import CLAIMS, claim_lines
from xla_cost.study.data import StudyData
from xla_cost.study.published import DDP_MODELS, DDP_SHARES
from xla_cost.study.views import SHARE_PHASES, data_link, phase_shares, r2, regenerate_line, timing_cases

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "step-time"
TITLE = "Measured forward/backward/update shares, MFU and roofline against seed 000's 23/74/3"
ORDER = 30


def _case_label(case: Mapping[str, Any]) -> str:
    config = f", {case['config'].replace(',', ', ')}" if case["config"] else ""
    return f"{case['model']} (batch {case['batch']}{config})"


def _fig_step_shares(cases: Sequence[dict[str, Any]], device: str) -> bytes:
    dtypes = list(dict.fromkeys(c["dtype"] for c in cases))

    def draw() -> Figure:
        per = max(sum(1 for c in cases if c["dtype"] == d and phase_shares(c)) for d in dtypes)
        fig, axes = figure(6.2 * len(dtypes), 0.34 * (per + 1) + 1.6, 1, len(dtypes), sharey=False)
        for ax, dtype in zip(axes[0], dtypes):
            chosen = [c for c in cases if c["dtype"] == dtype and phase_shares(c)]
            labels = ["V100, DDP paper (seed 000)"] + [f"{c['model']} · {c['optimizer']}" for c in chosen]
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
            ax.set_yticks(ys, labels)
            ax.set_xlim(0, 100)
            ax.set_xlabel("share of forward + backward + update time (%)")
            ax.set_title(f"{dtype} on {device}")
            ax.grid(axis="y", visible=False)
        from matplotlib.patches import Patch

        handles = [Patch(color=PASS_COLORS[p], label=p) for p in SHARE_PHASES]
        fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
        fig.suptitle("Measured share of step time per phase, against the V100's 23 / 74 / 3 (seed 000)")
        return fig

    return png(draw)


def _fig_time_vs_flop(cases: Sequence[dict[str, Any]], device: str) -> bytes:
    usable = [c for c in cases if c["time_ratio"] is not None and c["flop_ratio"] is not None]
    dtypes = list(dict.fromkeys(c["dtype"] for c in usable))
    markers = {"sgd": "o", "adam": "s"}

    def draw() -> Figure:
        fig, axes = figure(8.0, 5.6)
        ax = axes[0][0]
        for color, dtype in zip(LINE_COLORS, dtypes):
            for case in (c for c in usable if c["dtype"] == dtype):
                ax.plot([case["flop_ratio"]], [case["time_ratio"]], markers.get(case["optimizer"], "^"),
                        color=color, markersize=6, alpha=0.85)
                if case["optimizer"] == "sgd":
                    ax.annotate(case["model"], (case["flop_ratio"], case["time_ratio"]), xytext=(4, 2),
                                textcoords="offset points", fontsize=7, color=color)
        values = [v for c in usable for v in (c["flop_ratio"], c["time_ratio"])]
        low, high = min(0.5, min(values) * 0.9), max(3.4, max(values) * 1.05)
        ax.plot([low, high], [low, high], color="0.5", linewidth=1, linestyle="--")
        ax.annotate("time ratio = FLOP ratio", (high * 0.8, high * 0.8), xytext=(8, -8), textcoords="offset points",
                    ha="left", va="top", fontsize=8, color="0.4")
        ddp = DDP_SHARES["backward"] / DDP_SHARES["forward"]
        reference(ax, ddp, f"V100 (seed 000): {ddp:.1f}")
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        ax.set_xlabel("backward / forward FLOP (counted)")
        ax.set_ylabel("backward / forward time (measured)")
        handles = [ax.plot([], [], "o", color=color, label=dtype)[0] for color, dtype in zip(LINE_COLORS, dtypes)]
        handles += [ax.plot([], [], markers[o], color="0.3", label=o)[0] for o in markers]
        ax.legend(handles=handles, loc="upper left", frameon=False)
        fig.suptitle(f"Measured time ratio against FLOP ratio ({device})")
        return fig

    return png(draw)


def _fig_mfu(cases: Sequence[dict[str, Any]], device: str) -> bytes:
    chosen = [c for c in cases if c["dtype"] == "float32" and c["optimizer"] == "sgd"] or list(cases)

    def draw() -> Figure:
        fig, axes = figure(9.0, 4.6)
        ax = axes[0][0]
        width = 0.8 / len(SHARE_PHASES)
        xs = list(range(len(chosen)))
        for i, phase in enumerate(SHARE_PHASES):
            values = [100 * (c["phases"].get(phase, {}).get("mfu") or 0) for c in chosen]
            ax.bar([x - 0.4 + width * (i + 0.5) for x in xs], values, width, color=PASS_COLORS[phase], label=phase)
        ax.set_xticks(xs, [c["model"] for c in chosen], rotation=20, ha="right")
        ax.set_ylabel("MFU: achieved FLOP/s ÷ peak (%)")
        ax.legend(loc="upper left", frameon=False)
        ax.grid(axis="x", visible=False)
        fig.suptitle(f"Model FLOP utilisation per phase, float32, SGD ({device})")
        return fig

    return png(draw)


def build(data: StudyData) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    lines = [
        "# Measured step time: forward, backward and update",
        "",
        "Seed 000 quotes the PyTorch DDP paper (Li et al. 2020, Figure 6): on a V100, ResNet-50 and BERT "
        f"spend {pct(DDP_SHARES['forward'], 0)} / {pct(DDP_SHARES['backward'], 0)} / "
        f"{pct(DDP_SHARES['update'], 0)} of the step's forward + backward + optimizer time in each phase, so "
        "the backward pass takes about 3× the forward pass. This page sets measured times beside those shares "
        "and beside the FLOP ratio the analyzer counts. Times are medians of repeated runs "
        "(`xla-cost analyze --time`: compiled programs, warm-up excluded, `block_until_ready`); `backward` is "
        "`grad − forward`, like the counts; MFU is achieved FLOP/s over the device's peak; the roofline is "
        "max(FLOP / peak, bytes / bandwidth).",
        "",
    ]
    if not data.timing:
        lines += ["No timing data is committed under `reports/data/` (run `python benchmarks/time_zoo.py`).", ""]
    gpu = [p for p, f in data.timing if (f["device"].astype(str).str.lower() != "cpu").any()]
    for path, frame in data.timing:
        cases = timing_cases(frame)
        if not cases:
            continue
        device = cases[0]["device"]
        stem = slug(path.stem)
        files[f"figures/step-time-{stem}-shares.png"] = _fig_step_shares(cases, device)
        files[f"figures/step-time-{stem}-ratio.png"] = _fig_time_vs_flop(cases, device)
        files[f"figures/step-time-{stem}-mfu.png"] = _fig_mfu(cases, device)
        peak = cases[0]["peak"]
        bandwidth = cases[0]["bandwidth"]
        lines += [
            f"## {device}: {data_link(path)}",
            "",
            f"{len(cases)} cases measured with jax {cases[0]['jax_version']} on {cases[0]['date']} "
            + ("(`benchmarks/time_zoo.py --reduced`, the models at CPU-sized shapes)" if device.lower() == "cpu"
               else "(`benchmarks/time_zoo.py`)")
            + (f"; peak {sig(peak / 1e12, 3)} TFLOP/s and {sig(bandwidth / 1e9, 3)} GB/s ({cases[0]['peak_source']})"
               if peak and bandwidth else "") + ".",
            "",
        ]
        if device.lower() == "cpu":
            lines += [
                "**This is CPU data** (a 2-core machine, milliseconds-scale runs, noisy: about ±30% from run to "
                "run on the shared machine). bfloat16 on a CPU is emulated in float32 and says nothing about a "
                "GPU. No GPU has run `benchmarks/time_zoo.py` for this page yet"
                + ("." if not gpu else f"; GPU data: {join_words([data_link(p) for p in gpu])}.")
                + " The GPU run (`python benchmarks/time_zoo.py` on the GPU; its CSV committed under "
                "`reports/data/`, and this page rebuilt) will add: the shares on the hardware class of seed 000 "
                "(ResNet-50 at batch 32–256, BERT-base at sequence 128, GPT-2 small at 1024), MFU against the "
                "datasheet's tensor-core peak, bfloat16 against float32 on hardware that has it, and whether "
                "the backward pass's 2:1 FLOP turns into 3:1 time there.",
                "",
            ]
        lines += [
            "![Measured share of step time per phase against the V100's](figures/step-time-" + stem + "-shares.png)",
            "",
            _timing_table(cases),
            "",
            *_timing_text(cases),
            "",
            "![Measured backward/forward time ratio against the FLOP ratio](figures/step-time-" + stem + "-ratio.png)",
            "",
            "![MFU per phase](figures/step-time-" + stem + "-mfu.png)",
            "",
        ]
    claims = [c for c in CLAIMS if c.page == NAME]
    if claims:
        lines += ["## The seeds' claims about time", "", *claim_lines(data, claims), ""]
    lines.append(regenerate_line().replace("; the counts come from `xla_cost.sweep` through the results store",
                                           "; the times come from the committed CSV files"))
    files[f"{NAME}.md"] = markdown_file("\n".join(lines))
    return files


def _timing_table(cases: Sequence[dict[str, Any]]) -> str:
    rows = []
    for case in cases:
        shares = phase_shares(case) or {}
        step = case["phases"].get("train_step", {})
        over = (step.get("median_s") / step.get("roofline_s")
                if step.get("median_s") and step.get("roofline_s") else None)
        rows.append([
            _case_label(case), case["dtype"], case["optimizer"],
            *[pct(shares.get(p), 0) if shares else "skipped" for p in SHARE_PHASES],
            ratio(case["time_ratio"], 2), ratio(case["flop_ratio"], 2),
            pct(step.get("mfu")), ratio(over, 2) if over else "unknown", step.get("bound") or "",
        ])
    return pipe_table(
        ["case", "dtype", "optimizer", "forward", "backward", "update", "bwd/fwd time", "bwd/fwd FLOP",
         "train-step MFU", "time / roofline", "bound"],
        rows, "lll" + "r" * 7 + "l",
    )


def _timing_text(cases: Sequence[dict[str, Any]]) -> list[str]:
    out = []
    for dtype in dict.fromkeys(c["dtype"] for c in cases):
        for optimizer in dict.fromkeys(c["optimizer"] for c in cases):
            chosen = [c for c in cases if c["dtype"] == dtype and c["optimizer"] == optimizer and phase_shares(c)]
            if not chosen:
                continue
            ddp = [c for c in chosen if c["model"] in DDP_MODELS]
            parts = [f"{p} {value_range([phase_shares(c)[p] for c in chosen], lambda v: pct(v, 0))}" for p in SHARE_PHASES]
            text = f"- {dtype}, {optimizer}: {', '.join(parts)} over {len(chosen)} models"
            if ddp:
                text += ("; " + "; ".join(
                    f"{c['model']} {' / '.join(pct(phase_shares(c)[p], 0) for p in SHARE_PHASES)}" for c in ddp)
                    + f" (V100: {' / '.join(pct(DDP_SHARES[p], 0) for p in SHARE_PHASES)})")
            top = max(chosen, key=lambda c: phase_shares(c)["update"])
            out.append(text + f". The largest update share: {top['model']}, {pct(phase_shares(top)['update'], 0)}.")
    timed = [c for c in cases if c["time_ratio"] is not None and c["flop_ratio"] is not None]
    for dtype in dict.fromkeys(c["dtype"] for c in timed):
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
        if case["dtype"] != "bfloat16":
            continue
        twin = next((c for c in cases if c["dtype"] == "float32" and c["model"] == case["model"]
                     and c["optimizer"] == case["optimizer"] and c["batch"] == case["batch"]), None)
        a = case["phases"].get("train_step", {}).get("median_s")
        b = twin["phases"].get("train_step", {}).get("median_s") if twin else None
        if a and b:
            pairs.append(a / b)
    if pairs:
        out.append(f"- bfloat16 train step / float32 train step: {value_range(pairs, r2)}× the time.")
    return out
