"""The page ``backward-forward-ratio``: seed 001's backward/forward FLOP ratio study, redone with XLA's counts.

Per layer (the first layer and the others), the weight update against the
batch size, the ratio against the batch size and against depth, ResNets and
transformers, and seed 001's claims on each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.present.figures import PASS_COLORS, figure, line_style, log2_batch_axis, png, reference
from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import count, join_words, pct, pct_sig, ratio, si, sig, value_range
from xla_cost.study.analytic import textbook_macs
from xla_cost.study.claims import CLAIMS, claim_lines
from xla_cost.study.data import StudyData
from xla_cost.study.plan import APPROX_TOLERANCE, TOLERANCE
from xla_cost.study.views import (
    FIRST_LAYER,
    REMAINDER,
    SIZE_ONE_INPUT,
    architecture_rows,
    by_model,
    deepest_run,
    depth_runs,
    failure_section,
    first_and_other_layers,
    layer_records,
    net_name,
    per_unit,
    r2,
    environment_section,
    regenerate_line,
    seed_layer_rows,
    seed_runs,
    thin_ticks,
    within,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "backward-forward-ratio"
TITLE = ("Seed 001's backward/forward FLOP ratio study, redone with XLA's counts: per layer, against batch size "
         "and depth, ResNets and transformers")
ORDER = 10


def _fig_layers(data: StudyData) -> bytes:
    batch = data.plan.layer_batch
    nets = [m for m in data.plan.seed_nets if seed_layer_rows(data, m)]
    first, other = first_and_other_layers(data)
    first_seed = [r for m, _, r in first if m in nets and m not in SIZE_ONE_INPUT]
    single = [(m, r) for m, _, r in first if m in nets and m in SIZE_ONE_INPUT]
    other_seed = [r for m, _, r in other if m in nets]

    def draw() -> Figure:
        fig, axes = figure(4.3 * len(nets), 5.0, 1, len(nets))
        for ax, model in zip(axes[0], nets):
            rows = seed_layer_rows(data, model)
            glue = "ReLU, pool,\nloss" if model in _POOLED else "ReLU,\nloss"
            labels = [glue if r["path"] == REMAINDER else r["path"] for r in rows]
            xs = list(range(len(rows)))
            fwd = [r["forward_flops"] for r in rows]
            bwd = [r["backward_flops"] for r in rows]
            update = sum(r["update_flops"] for r in rows)
            ax.bar([x - 0.2 for x in xs], fwd, 0.4, color=PASS_COLORS["forward"], label="forward")
            ax.bar([x + 0.2 for x in xs], bwd, 0.4, color=PASS_COLORS["backward"], label="backward")
            ax.bar([len(rows)], [update], 0.4, color=PASS_COLORS["update"], label="update (SGD)")
            for x, f, b, r in zip(xs, fwd, bwd, rows):
                if f:
                    one_input = model in SIZE_ONE_INPUT and r["path"] == FIRST_LAYER[model]
                    ax.annotate(f"{b / f:.2f}:1" + ("\n(1 input:\nXLA multiply)" if one_input else ""),
                                (x, max(f, b)), xytext=(0, 4), textcoords="offset points",
                                ha="center", va="bottom", fontsize=8 if one_input else 9, fontweight="bold")
            params = sum(r["parameters"] for r in rows)
            ax.annotate(f"{update / params:.2f}\n× params", (len(rows), update), xytext=(0, 4),
                        textcoords="offset points", ha="center", va="bottom", fontsize=8)
            ax.set_yscale("log")
            low = min(v for v in [*fwd, *bwd, update] if v)
            ax.set_ylim(low / 3, max([*fwd, *bwd, update]) * 30)
            ax.set_xticks([*xs, len(rows)], [*labels, "update"])
            ax.set_ylabel("FLOP per training step (log scale)")
            ax.set_title(f"{net_name(model)}, batch {batch}")
            ax.grid(axis="x", visible=False)
        axes[0][0].legend(loc="upper right", frameon=False)
        exceptions = "".join(f" ({net_name(m)}: {r2(r)}, one input)" for m, r in single)
        fig.suptitle(
            f"Backward ÷ forward FLOP per layer (labels): first layer "
            f"{value_range(first_seed, r2) if first_seed else '–'}:1{exceptions}, other layers {value_range(other_seed, r2)}:1"
        )
        return fig

    return png(draw)


def _fig_update_vs_batch(data: StudyData) -> bytes:
    runs = seed_runs(data)
    nets = [m for m in data.plan.seed_nets if m in runs]
    constant = all(len({r["update_flops"] for r in runs[m]}) == 1 for m in nets)

    def draw() -> Figure:
        fig, axes = figure(4.3 * len(nets), 4.4, 1, len(nets))
        for ax, model in zip(axes[0], nets):
            rows = runs[model]
            batches = [r["batch_size"] for r in rows]
            for phase, marker in (("forward", "o"), ("backward", "s"), ("update", "^")):
                ax.plot(batches, [r[f"{phase}_flops"] for r in rows], marker=marker, markersize=4,
                        color=PASS_COLORS[phase], label=phase)
            log2_batch_axis(ax, thin_ticks(batches))
            ax.set_yscale("log")
            ax.set_ylabel("FLOP per training step (log scale)")
            ax.set_title(net_name(model))
        axes[0][0].legend(loc="upper left", frameon=False)
        fig.suptitle(
            "The SGD update costs the same FLOP at every batch size; forward and backward grow with it"
            if constant else "Forward, backward and update FLOP against the batch size (SGD)"
        )
        return fig

    return png(draw)


def _fig_ratio_vs_batch(data: StudyData) -> bytes:
    runs = seed_runs(data)
    nets = [m for m in data.plan.seed_nets if m in runs]
    largest = max(data.plan.batch_sizes)
    ends = ", ".join(
        f"{net_name(m)} {r2(runs[m][-1]['backward_to_forward'])}" for m in nets if runs[m][-1]["batch_size"] == largest
    )

    def draw() -> Figure:
        fig, axes = figure(11.0, 4.6, 1, 2, sharey=True)
        panels = (("backward_to_forward", "backward / forward"),
                  ("backward_with_update_to_forward", "(backward + update) / forward  (seed 001's convention)"))
        top = max(3.3, max(r[key] for m in nets for r in runs[m] for key, _ in panels) * 1.08)
        for ax, (key, title) in zip(axes[0], panels):
            for index, model in enumerate(nets):  # every net a line, however many (`line_style`)
                rows = runs[model]
                batches = [r["batch_size"] for r in rows]
                values = [r[key] for r in rows]
                drawn = line_style(index)
                color = drawn["color"]
                ax.plot(batches, values, marker="o", markersize=4, label=net_name(model), **drawn)
                ax.annotate(net_name(model), (batches[-1], values[-1]), xytext=(5, 0), textcoords="offset points",
                            va="center", fontsize=9, color=color, fontweight="bold")
            for y, label in ((1, "1:1"), (2, "2:1"), (3, "3:1 (seed 001's maximum)")):
                reference(ax, y, label)
            log2_batch_axis(ax, thin_ticks(sorted({r["batch_size"] for m in nets for r in runs[m]})))
            ax.set_xlim(right=max(data.plan.batch_sizes) * 6)
            ax.set_ylim(0, top)
            ax.set_title(title)
        axes[0][0].set_ylabel("FLOP ratio")
        fig.suptitle(f"Backward/forward FLOP ratio against batch size (SGD); at batch {largest}: {ends}")
        return fig

    return png(draw)


def _fig_depth(data: StudyData) -> bytes:
    runs = depth_runs(data)

    def draw() -> Figure:
        fig, axes = figure(8.0, 4.4)
        ax = axes[0][0]
        depths = [r["depth"] for r in runs]
        ax.plot(depths, [r["backward_to_forward"] for r in runs], marker="o", color=PASS_COLORS["backward"],
                label="backward / forward")
        ax.plot(depths, [r["backward_with_update_to_forward"] for r in runs], marker="x", linestyle="--",
                color=PASS_COLORS["update"], label="(backward + update) / forward")
        reference(ax, 2, "2:1")
        reference(ax, 1, "1:1")
        ax.set_ylim(0.8, 2.2)
        ax.set_xlabel("intermediate 3×3 conv layers (depth)")
        ax.set_ylabel("FLOP ratio")
        ax.legend(loc="lower right", frameon=False)
        first, last = runs[0], runs[-1]
        fig.suptitle(
            f"DeeperConvNet (batch {first['batch_size']}): backward/forward {r2(first['backward_to_forward'])} "
            f"at depth {first['depth']}, {r2(last['backward_to_forward'])} at depth {last['depth']}"
        )
        return fig

    return png(draw)


def _fig_architectures(data: StudyData) -> bytes:
    rows = architecture_rows(data)
    cnn = {*data.plan.resnets}

    def draw() -> Figure:
        fig, axes = figure(9.0, 0.32 * len(rows) + 1.6)
        ax = axes[0][0]
        ys = list(range(len(rows)))[::-1]
        for y, row in zip(ys, rows):
            color = PASS_COLORS["forward"] if row["model"] in cnn else PASS_COLORS["backward"]
            ax.plot([row["backward_to_forward"]], [y], "o", color=color, markersize=7)
            ax.plot([row["backward_with_update_to_forward"]], [y], "|", color="black", markersize=11,
                    markeredgewidth=1.5)
            ax.annotate(ratio(row["backward_to_forward"]), (row["backward_to_forward"], y), xytext=(-6, 0),
                        textcoords="offset points", ha="right", va="center", fontsize=8)
        ax.set_yticks(ys, [f"{r['model']} · batch {r['batch_size']}" for r in rows])
        values = [v for r in rows for v in (r["backward_to_forward"], r["backward_with_update_to_forward"])]
        ax.set_xlim(min(min(values), 1.9) - 0.06, max(max(values), 2.0) + 0.03)
        reference(ax, 2.0, "2:1", horizontal=False)
        ax.set_xlabel("FLOP ratio (SGD)")
        ax.grid(axis="y", visible=False)
        handles = [
            ax.plot([], [], "o", color=PASS_COLORS["forward"], label="CNN (ResNet): backward / forward")[0],
            ax.plot([], [], "o", color=PASS_COLORS["backward"], label="transformer: backward / forward")[0],
            ax.plot([], [], "|", color="black", markersize=11, markeredgewidth=1.5,
                    label="(backward + update) / forward")[0],
        ]
        fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
        fig.suptitle(
            f"ResNets and transformers: backward/forward {value_range([r['backward_to_forward'] for r in rows])}"
        )
        return fig

    return png(draw)


def build(data: StudyData) -> dict[str, bytes]:
    plan = data.plan
    files: dict[str, bytes] = {}
    runs = seed_runs(data)
    nets = [m for m in plan.seed_nets if m in runs]
    env = data.environment
    lines = [
        "# The backward/forward FLOP ratio, with XLA's counts",
        "",
        "Seed 001 (Epoch AI, *What's the backward-forward FLOP ratio for neural networks?*) measured "
        "with NVIDIA's pyprof profiler on PyTorch how many more FLOP a backward pass takes than a forward "
        "pass. This page redoes its study figure by figure with the FLOP XLA's compiled cost analysis "
        "counts for the same networks (seed 001's appendix A, translated to Flax in `xla_cost.zoo`), "
        f"SGD, float32, on the {env['backend']} backend (a FLOP count does not depend on the device's speed).",
        "",
        "Conventions: a multiply-add is 2 FLOP; `backward` is the gradient program minus the forward "
        "program (`grad − forward`); seed 001 counts the weight update in the backward pass, so both "
        "ratios are shown: backward/forward and (backward + update)/forward. Per-layer figures are counted "
        "from the jaxprs with XLA's conventions and add up to the phase totals.",
        "",
    ]
    # 1. per layer
    if nets:
        files["figures/backward-forward-ratio-layers.png"] = _fig_layers(data)
        lines += [
            "## 1. Per layer: the first layer and the others",
            "",
            "![Forward and backward FLOP per layer of LinearNet, OneNet and ConvNet, with the update]"
            "(figures/backward-forward-ratio-layers.png)",
            "",
        ]
        lines += _layer_table(data, nets)
        lines += ["", *_layer_text(data, nets), ""]
        lines += [
            "## 2. The weight update against the batch size",
            "",
            "![Forward, backward and update FLOP against batch size](figures/backward-forward-ratio-update.png)",
            "",
            *_update_text(data, nets),
            "",
        ]
        files["figures/backward-forward-ratio-update.png"] = _fig_update_vs_batch(data)
        files["figures/backward-forward-ratio-batch.png"] = _fig_ratio_vs_batch(data)
        lines += [
            "## 3. The ratio against the batch size",
            "",
            "![Backward/forward ratio against batch size, without and with the update]"
            "(figures/backward-forward-ratio-batch.png)",
            "",
            _batch_table(data, nets),
            "",
            *_batch_text(data, nets),
            "",
        ]
    if depth_runs(data):
        files["figures/backward-forward-ratio-depth.png"] = _fig_depth(data)
        lines += [
            "## 4. Depth: DeeperConvNet",
            "",
            "![DeeperConvNet's ratio against depth](figures/backward-forward-ratio-depth.png)",
            "",
            _depth_table(data),
            "",
            *_depth_text(data),
            "",
        ]
    if architecture_rows(data):
        files["figures/backward-forward-ratio-architectures.png"] = _fig_architectures(data)
        lines += [
            "## 5. ResNets and transformers",
            "",
            "![Backward/forward ratio of ResNets and transformers](figures/backward-forward-ratio-architectures.png)",
            "",
            _architecture_table(data),
            "",
            *_architecture_text(data),
            "",
        ]
    lines += [
        "## 6. Seed 001's claims against XLA's counts",
        "",
        "Each claim of seed 001 on this page, what XLA's counts show, and the verdict by the rule of "
        f"[claims.md](claims.md) (within {TOLERANCE:.0%} of an exact figure, {APPROX_TOLERANCE:.0%} of one the seed "
        "states as approximate: confirmed).",
        "",
    ]
    lines += claim_lines(data, [c for c in CLAIMS if c.page == NAME and "001" in c.seeds])
    lines.append("")
    lines += failure_section(data.seed_batch, data.depth, data.resnets, data.transformers)
    lines += environment_section(data)
    lines += [regenerate_line(data)]
    files[f"{NAME}.md"] = markdown_file("\n".join(lines))
    return files


def _layer_table(data: StudyData, nets: Sequence[str]) -> list[str]:
    batch = data.plan.layer_batch
    one = 1 if 1 in data.plan.batch_sizes and batch != 1 else None
    header = ["net", "layer", "parameters", f"forward FLOP (batch {batch})", "backward FLOP",
              "backward / forward", "update FLOP (SGD)"]
    if one:
        header.append("backward / forward at batch 1")
    rows = []
    for model in nets:
        at_one = {r["path"]: r for r in seed_layer_rows(data, model, one)} if one else {}
        for r in seed_layer_rows(data, model):
            cells = [net_name(model), r["path"], count(r["parameters"]), si(r["forward_flops"]),
                     si(r["backward_flops"]), ratio(r["backward_to_forward"]), si(r["update_flops"])]
            if one:
                cells.append(ratio(at_one.get(r["path"], {}).get("backward_to_forward")))
            rows.append(cells)
    return [pipe_table(header, rows, "ll" + "r" * (len(header) - 2))]


def _layer_text(data: StudyData, nets: Sequence[str]) -> list[str]:
    batch = data.plan.layer_batch
    first, other = first_and_other_layers(data)
    out = []
    plain = [(m, p, r) for m, p, r in first if m not in SIZE_ONE_INPUT]
    if plain:
        out.append(
            f"- The first layer's backward pass is its weight gradient alone (nothing needs the gradient "
            f"of the input), as large as its forward pass: {join_words([f'{net_name(m)} {p} {ratio(r)}' for m, p, r in plain])}"
            + _deepest_note(data, batch) + "."
        )
    if other:
        out.append(
            f"- Every other parametrised layer computes a weight gradient and an input gradient, each as "
            f"large as its forward pass: backward/forward {value_range([r for _, _, r in other])} over "
            f"{len(other)} layers."
        )
    for model in nets:
        if model not in SIZE_ONE_INPUT:
            continue
        rows = {r["path"]: r for r in seed_layer_rows(data, model)}
        layer = rows.get(FIRST_LAYER[model])
        if layer is None:
            continue
        one_input = layer["backward_to_forward"]
        formula = (3 * batch - 1) / (2 * batch)
        exact = abs(one_input - formula) < 1e-9
        out.append(
            f"- XLA's convention changes {net_name(model)}'s first layer: its input has one feature, so its "
            f"forward matmul is a contraction of length 1, which the compiled program turns into a multiply "
            f"(1 FLOP per output, not 2), while its weight gradient contracts over the batch (2 FLOP per "
            f"multiply-add): {layer['path']} reads {ratio(one_input)}"
            + (f", (3B − 1)/2B at B = {batch} with the bias add and the bias gradient" if exact else "")
            + ", where seed 001's convention gives 1:1."
        )
    one = 1 if 1 in data.plan.batch_sizes and batch != 1 else None
    if one:
        values = []
        for model in nets:
            for r in seed_layer_rows(data, model, one):
                if r["path"] != REMAINDER and r["parameters"] and r["backward_to_forward"] is not None:
                    values.append((model, r["path"], r["backward_to_forward"]))
        firsts = [v for v in values if v[1] == FIRST_LAYER.get(v[0]) and v[0] == "linear_net"]
        dense_others = [v for v in values if v[1] != FIRST_LAYER.get(v[0]) and v[0] in ("linear_net", "one_net")]
        if firsts or dense_others:
            parts = []
            if firsts:
                parts.append(f"LinearNet's fc1 {value_range([r for *_, r in firsts])}")
            if dense_others:
                parts.append(f"the other dense layers {value_range([r for *_, r in dense_others])}")
            out.append(
                "- At batch 1 a dense layer's weight gradient is an outer product, a contraction of length 1 "
                "that XLA counts as a multiply (1 FLOP per weight instead of 2): "
                f"{' and '.join(parts)} (last column). Convolutions keep a spatial contraction: "
                f"{_conv_batch_one(data, nets, one)}."
            )
    conv = _conv_taps(data)
    if conv:
        out.append(f"- Convolutions count only kernel taps that land on real input: {conv}.")
    out.append(
        "- The rest of the step (ReLUs, pooling, the global mean and the loss: the `(remainder)` row) is "
        f"{_remainder_share(data, nets)}."
    )
    if "conv_net" in nets:
        rows = seed_layer_rows(data, "conv_net")
        layers = [r for r in rows if r["path"] != REMAINDER]
        rest = next((r for r in rows if r["path"] == REMAINDER), None)
        mix = sum(r["backward_flops"] for r in layers) / sum(r["forward_flops"] for r in layers)
        whole = sum(r["backward_flops"] for r in rows) / sum(r["forward_flops"] for r in rows)
        if rest is not None and rest["backward_to_forward"]:
            out.append(
                f"- ConvNet's layers alone give backward/forward {ratio(mix)} (conv1 at 1:1 is "
                f"{pct(layers[0]['forward_flops'] / sum(r['forward_flops'] for r in layers))} of their forward "
                f"FLOP); the remainder's backward is {ratio(rest['backward_to_forward'])}× its forward (the max-pool "
                f"gradient, an index-tracking reduce-window and a scatter, costs more than the max), so the "
                f"whole step reads {ratio(whole)}."
            )
    return out


def _deepest_note(data: StudyData, batch: int) -> str:
    deepest = deepest_run(data)
    if deepest is None:
        return f" (batch {batch})"
    return f" (batch {batch}; DeeperConvNet at depth {deepest['depth']}, batch {deepest['batch_size']})"


_POOLED = {"conv_net", "deeper_conv_net"}
"""Seed nets with pooling between their layers."""


def _conv_batch_one(data: StudyData, nets: Sequence[str], batch: int) -> str:
    parts = []
    for model in nets:
        if model in ("conv_net",):
            for r in seed_layer_rows(data, model, batch):
                if r["path"] in ("conv1", "conv2"):
                    parts.append(f"{net_name(model)} {r['path']} {ratio(r['backward_to_forward'])}")
    return join_words(parts) if parts else "no convolution analysed at batch 1"


def _conv_taps(data: StudyData) -> str:
    """ConvNet's convolutions counted against the textbook count, from the per-layer rows."""
    if "conv_net" not in data.plan.seed_nets:
        return ""
    batch = data.plan.layer_batch
    rows = {r["path"]: r for r in seed_layer_rows(data, "conv_net")}
    textbook = textbook_macs("conv_net", {})
    parts = []
    for path in ("conv1", "conv2"):
        if path in rows and textbook:
            counted = rows[path]["forward_flops"] / batch
            book = 2 * textbook[path]
            parts.append(f"ConvNet's {path} counts {sig(counted / 1e6)} MFLOP per image against the textbook "
                         f"2 × {sig(textbook[path] / 1e6)} M multiply-adds ({ratio(counted / book)}×)")
    return "; ".join(parts) + " (7×7 stride-2 kernels with padding 3: the border outputs miss taps)" if parts else ""


def _remainder_share(data: StudyData, nets: Sequence[str]) -> str:
    parts = []
    for model in nets:
        rows = seed_layer_rows(data, model)
        total_f = sum(r["forward_flops"] for r in rows)
        total_b = sum(r["backward_flops"] for r in rows)
        rest = next((r for r in rows if r["path"] == REMAINDER), None)
        if rest and total_f:
            parts.append(f"{pct_sig(rest['forward_flops'] / total_f, 2)} of {net_name(model)}'s forward FLOP and "
                         f"{pct_sig(rest['backward_flops'] / total_b, 2)} of its backward FLOP")
    return "; ".join(parts)


def _update_text(data: StudyData, nets: Sequence[str]) -> list[str]:
    runs = seed_runs(data)
    out = []
    for model in nets:
        rows = runs[model]
        updates = {r["update_flops"] for r in rows}
        first, last = rows[0], rows[-1]
        growth = last["forward_flops"] / first["forward_flops"]
        same = len(updates) == 1
        out.append(
            f"- {net_name(model)}: the update is {count(first['update_flops'])} FLOP "
            f"({ratio(first['update_flops'] / first['parameters'])} per parameter)"
            + (" at every batch size" if same else f", between {count(min(updates))} and {count(max(updates))}")
            + f"; the forward pass grows {sig(growth)}× from batch {first['batch_size']} to "
            f"{last['batch_size']} ({sig(first['forward_flops'] / 1e9)} to {sig(last['forward_flops'] / 1e9)} GFLOP), "
            f"so the update falls from {pct_sig(first['update_flops'] / first['forward_flops'])} to "
            f"{pct_sig(last['update_flops'] / last['forward_flops'])} of the forward FLOP."
        )
    return out


def _at(rows: Sequence[dict[str, Any]], batch: int) -> dict[str, Any] | None:
    return next((r for r in rows if r["batch_size"] == batch), None)


def _batch_table(data: StudyData, nets: Sequence[str]) -> str:
    runs = seed_runs(data)
    batches = sorted({r["batch_size"] for m in nets for r in runs[m]})
    header = ["batch"]
    for model in nets:
        header += [f"{net_name(model)} bwd/fwd", f"{net_name(model)} (bwd+upd)/fwd"]
    rows = []
    for batch in batches:
        cells: list[str] = [str(batch)]
        for model in nets:
            row = _at(runs[model], batch)
            cells += [ratio(row and row["backward_to_forward"]), ratio(row and row["backward_with_update_to_forward"])]
        rows.append(cells)
    return pipe_table(header, rows)


def _batch_text(data: StudyData, nets: Sequence[str]) -> list[str]:
    runs = seed_runs(data)
    out = []
    for model in nets:
        rows = runs[model]
        first, last = rows[0], rows[-1]
        peak = max(rows, key=lambda r: r["backward_with_update_to_forward"])
        out.append(
            f"- {net_name(model)}: backward/forward goes from {ratio(first['backward_to_forward'])} at batch "
            f"{first['batch_size']} to {ratio(last['backward_to_forward'])} at batch {last['batch_size']}; "
            f"with the update, from {ratio(first['backward_with_update_to_forward'])} to "
            f"{ratio(last['backward_with_update_to_forward'])} (largest {ratio(peak['backward_with_update_to_forward'])}, "
            f"at batch {peak['batch_size']})."
        )
    if "one_net" in runs and len(runs["one_net"]) > 1:
        rows = runs["one_net"]
        first, second = rows[0], rows[1]
        out.append(
            f"- OneNet's largest ratio stays below seed 001's 3:1: at batch {first['batch_size']} its "
            f"backward/forward is {ratio(first['backward_to_forward'])} (a dense weight gradient over a batch of "
            "one is a multiply, not a multiply-add) and the update adds "
            f"{ratio(first['update_flops'] / first['forward_flops'])}× the forward pass; at batch "
            f"{second['batch_size']} backward/forward is {ratio(second['backward_to_forward'])} but the update adds "
            f"only {ratio(second['update_flops'] / second['forward_flops'])}×. With seed 001's convention "
            "(2 FLOP per multiply-add whatever the contraction length) batch 1 would give about 2 + 1 = 3."
        )
    return out


def _depth_table(data: StudyData) -> str:
    rows = []
    for run in depth_runs(data):
        layers = layer_records(data.depth, "deeper_conv_net", run["batch_size"], depth=run["depth"])
        total = sum(r["forward_flops"] for r in layers) or None
        first = next((r for r in layers if r["path"] == "first_layer"), None)
        share = first["forward_flops"] / total if first and total else None
        rows.append([run["depth"], sig(run["forward_flops"] / 1e9), pct(share),
                     ratio(run["backward_to_forward"]), ratio(run["backward_with_update_to_forward"])])
    return pipe_table(["depth", "forward GFLOP", "first layer's share of forward", "backward / forward",
                       "(backward + update) / forward"], rows)


def _depth_text(data: StudyData) -> list[str]:
    runs = depth_runs(data)
    first, last = runs[0], runs[-1]
    near = next((r for r in runs if within(r["backward_to_forward"], 2.0, TOLERANCE)), None)
    out = [
        f"- At depth {first['depth']} (seed 001's \"0 intermediate layers\") backward/forward is "
        f"{ratio(first['backward_to_forward'])}: the first layer (1:1) is a large part of the forward FLOP. "
        f"Each added 3×3 layer (2:1) pulls the ratio up: {ratio(last['backward_to_forward'])} at depth {last['depth']}"
        + (f"; it is within {TOLERANCE:.0%} of 2 from depth {near['depth']} on." if near else "."),
        f"- The update (SGD) is {pct_sig(last['update_flops'] / last['forward_flops'])} of the forward FLOP "
        f"at depth {last['depth']}: with or without it the ratio is the same to three decimals"
        + ("." if ratio(last["backward_to_forward"]) == ratio(last["backward_with_update_to_forward"])
           else f" ({ratio(last['backward_with_update_to_forward'])} with it)."),
        "- At depth 0 the shared 3×3 layer is never called, so Flax creates no parameters for it (9,216 fewer "
        "than the seed's PyTorch module, whose unused weights get no gradient either).",
    ]
    return out


def _architecture_table(data: StudyData) -> str:
    rows = []
    for row in architecture_rows(data):
        per = per_unit(row)
        rows.append([row["model"], row["batch_size"], count(row["parameters"]),
                     f"{sig(row['forward_flops'] / per[0] / 1e9)} {per[1]}",
                     ratio(row["backward_to_forward"]), ratio(row["backward_with_update_to_forward"]),
                     row.get("forward_source") or "unknown"])
    return pipe_table(["model", "batch", "parameters", "forward GFLOP", "backward / forward",
                       "(backward + update) / forward", "count"], rows, "lrrrrrl")


def _architecture_text(data: StudyData) -> list[str]:
    out = []
    resnets = [r for m, rs in by_model(data.resnets).items() for r in rs]
    if resnets:
        by_batch: dict[int, list[float]] = {}
        for r in resnets:
            by_batch.setdefault(r["batch_size"], []).append(r["backward_to_forward"])
        small = min(by_batch)
        with_update = [r["backward_with_update_to_forward"] for r in resnets if r["batch_size"] == small]
        names = [m for m in data.plan.resnets if any(r["model"] == m for r in resnets)]
        at_small = [next(r["backward_to_forward"] for r in resnets if r["model"] == m and r["batch_size"] == small)
                    for m in names]
        rising = len(at_small) > 1 and all(a < b for a, b in zip(at_small, at_small[1:]))
        out.append(
            f"- ResNets ({join_words(names)}): "
            f"backward/forward {value_range([r['backward_to_forward'] for r in resnets])} over batch sizes "
            f"{join_words([str(b) for b in sorted(by_batch)])}"
            + (f", rising with depth ({join_words([f'{ratio(v)}' for v in at_small])} at batch {small}: the 7×7 stem, a "
               "first layer at 1:1, weighs less in a deeper net)" if rising else "")
            + "; the update moves it by at most "
            f"{ratio(max(w - r for w, r in zip(with_update, by_batch[small])))} at batch {small}. Seed 001 saw "
            "ResNets diverge from 2:1 and blamed the profiler's undercounting; XLA's counts sit just below 2:1."
        )
    transformers = [r for m, rs in by_model(data.transformers).items() for r in rs]
    if transformers:
        looped = [r["model"] for r in transformers if r.get("forward_source") == "xla+loops"]
        out.append(
            f"- Transformers at batch 1 (one sequence of tokens): backward/forward "
            f"{value_range([r['backward_to_forward'] for r in transformers])}; with the update "
            f"{value_range([r['backward_with_update_to_forward'] for r in transformers])}. Every layer but the "
            "token embedding (a gather, no multiply) computes both gradients."
            + (f" {join_words(looped)} {'scan their' if len(looped) > 1 else 'scans its'} layers (`nn.scan`); XLA "
               "counts a loop body once, and the figures are corrected for the iterations it missed "
               "(`xla+loops`)." if looped else "")
        )
    return out
