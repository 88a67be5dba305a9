"""The page ``scaling``: sharded train steps priced on many devices.

Weak-scaling curves of the plan, priced with each collective algorithm of
`xla_cost.parallel.comm.ALGORITHMS` (a new algorithm there is a new set of
columns here), and the condition for seed 004's 1.3x from twice the GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.parallel import comm, schedule
from xla_cost.present.figures import LINE_COLORS, figure, png
from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import count, join_words, pct, ratio, si, sig
from xla_cost.study.data import StudyData, collected
from xla_cost.study.published import IMAGENET_TRAIN_IMAGES, JIA_EPOCHS, JIA_MINUTES, SEED004_SPEEDUP
from xla_cost.study.views import environment_section, gbs, ms, regenerate_line

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "scaling"
TITLE = ("Sharded train steps priced on many devices: weak-scaling curves of ResNet-50, GPT-2 and GPT-3, and the "
         "condition for seed 004's 1.3× from twice the GPUs")
ORDER = 50
SHARDED = True


@collected
def scaling_curves(data: StudyData) -> list[dict[str, Any]]:
    """Each weak-scaling curve of the plan, priced on ``scaling_device`` with
    each collective algorithm (``priced``: algorithm -> `xla_cost.ScalingResult`)."""
    from xla_cost.runs.scaling import scaling

    plan = data.plan
    out = []
    for model, axis, batch in plan.scaling_curves:
        common = dict(devices=plan.scaling_devices, batch_size=batch, device=plan.scaling_device)
        out.append({
            "model": model, "axis": axis, "batch": batch,
            "priced": {a: scaling(model, mesh_axis=axis, store=data.store, algorithm=a, **common)
                       for a in comm.ALGORITHMS},
        })
    return out


_LINE_STYLES: tuple[tuple[str, str], ...] = (("-", "solid"), ("--", "dashed"), ("-.", "dash-dotted"))
"""The line of each collective algorithm in the figure (matplotlib's style, its
name), in the order of `comm.ALGORITHMS`, again from the first past the third."""

_SHORT_NAMES: Mapping[str, str] = {"halving-doubling": "h-d"}
"""Collective algorithms whose names the table headings shorten."""


def _line_style(index: int) -> tuple[str, str]:
    return _LINE_STYLES[index % len(_LINE_STYLES)]


def _fig_scaling(curves: Sequence[dict[str, Any]], device: str) -> bytes:
    def draw() -> Figure:
        fig, axes = figure(9.0, 3.8, 1, 2)
        left, right = axes[0]
        for index, curve in enumerate(curves):
            color = LINE_COLORS[index % len(LINE_COLORS)]
            for index, (algorithm, result) in enumerate(curve["priced"].items()):
                style, _ = _line_style(index)
                frame = result.to_frame()
                label = f"{curve['model']} ({curve['axis']}, {algorithm})"
                left.plot(frame["devices"], frame["speedup"], style, marker="o", markersize=3, color=color,
                          label=label)
                right.plot(frame["devices"], frame["efficiency"], style, marker="o", markersize=3, color=color)
        devices = [int(k) for k in next(iter(curves[0]["priced"].values())).to_frame()["devices"]]
        left.plot(devices, [k / devices[0] for k in devices], ":", color="0.5", label="linear")
        for ax, label in ((left, "speed-up (x, log scale)"), (right, "scaling efficiency")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(devices)
            ax.set_xticklabels([str(k) for k in devices])
            ax.minorticks_off()
            ax.set_xlabel("devices (log scale)")
            ax.set_ylabel(label)
        left.set_yscale("log", base=2)
        right.set_ylim(0, 1.05)
        left.legend(fontsize=7, loc="upper left")
        styles = join_words([f"{a} ({_line_style(i)[1]})" for i, a in enumerate(comm.ALGORITHMS)])
        fig.suptitle(f"Weak scaling on {device} clusters: {styles} collectives", fontsize=10)
        return fig

    return png(draw)


def _beside_presets(bandwidth: float | None) -> str:
    """Where ``bandwidth`` falls among the interconnect presets."""
    if bandwidth is None:
        return "out of reach in this model"
    links = sorted(comm.INTERCONNECTS.values(), key=lambda i: i.bandwidth)
    below = [i for i in links if i.bandwidth <= bandwidth]
    above = [i for i in links if i.bandwidth > bandwidth]
    if not below:
        return f"slower than every preset (the slowest, `{above[0].name}`, carries {gbs(above[0].bandwidth)})"
    if not above:
        return f"faster than every preset (the fastest, `{below[-1].name}`, carries {gbs(below[-1].bandwidth)})"
    return (f"between `{below[-1].name}` ({gbs(below[-1].bandwidth)}) and `{above[0].name}` "
            f"({gbs(above[0].bandwidth)})")


def _speedup_condition(target: float, weak: bool) -> str:
    """The exposed communication, as a multiple of compute, that turns a
    doubling into ``target``x (compute halves per device under strong scaling;
    stays under weak scaling)."""
    # weak: 2C / (C + M) = s  ->  M = (2 / s - 1) C
    # strong: (C + M) / (C / 2 + M) = s  ->  M = (1 - s / 2) / (s - 1) C
    multiple = (2 / target - 1) if weak else (1 - target / 2) / (target - 1)
    return ratio(multiple, 3)


def build(data: StudyData) -> dict[str, bytes]:
    from xla_cost.runs.scaling import bandwidth_for_speedup, predict, speedup

    plan = data.plan
    files: dict[str, bytes] = {}
    cluster = comm.cluster(plan.scaling_device)
    lines = [
        "# Scaling: sharded train steps on many devices",
        "",
        "Each point is a sharded analysis: the train step compiled for a mesh of K devices by JAX's SPMD partitioner "
        "(`xla_cost.analyze(..., mesh={axis: K})`, devices simulated on the CPU, nothing allocated), whose per-device "
        "FLOP and bytes and whose collectives (read from the compiled HLO, with their loop multiplicity) are priced by "
        "the alpha-beta model of `xla_cost.parallel.comm`:",
        "",
        "- step time = compute roofline + communication not hidden behind compute;",
        "- compute roofline = max(FLOP / peak FLOP/s, bytes / memory bandwidth) per device, at the device's published "
        "peak (an MFU of 1: the fastest compute, so the largest share for communication);",
        "- ring all-reduce 2(n−1)/n·S/B + 2(n−1)·α, all-gather and reduce-scatter (n−1)/n·S/B + (n−1)·α; "
        "halving-doubling (Thakur et al. 2005) has the same bandwidth term and ⌈log2 n⌉ hops instead of n−1, as tree "
        "and hierarchical algorithms at scale;",
        f"- overlap {schedule.DEFAULT_OVERLAP:g} (nothing hidden: an upper bound on the step);",
        "- weak scaling: the samples per device stay, the global batch grows with the devices.",
        "",
        "What the model ignores: topology contention between concurrent collectives, stragglers, the slow-down of "
        "compute that shares memory bandwidth with communication, kernels below peak. `docs/sharding.md` "
        "gives the presets' sources.",
        "",
        "## Interconnect presets",
        "",
        pipe_table(["preset", "what", "bandwidth per device, one way", "latency per hop (assumed)"], [
            [f"`{i.name}`", i.description, f"{sig(i.bandwidth / 1e9, 4)} GB/s", f"{sig(i.latency * 1e6, 2)} µs"]
            for i in comm.INTERCONNECTS.values()
        ], "llrr"),
        "",
        "Clusters: " + "; ".join(
            f"`{name}`: {c.node_size} per node on `{c.intra.name}`, `{c.inter.name}` between nodes"
            for name, c in comm.CLUSTERS.items()
        ) + ".",
        "",
    ]
    curves = scaling_curves(data) if plan.scaling_curves and len(plan.scaling_devices) > 1 else []
    if curves:
        files["figures/scaling-curves.png"] = _fig_scaling(curves, plan.scaling_device)
        lines += [
            f"## Weak scaling on {plan.scaling_device} clusters",
            "",
            f"{cluster.node_size} devices per node on `{cluster.intra.name}`, `{cluster.inter.name}` between nodes; "
            "SGD, float32. FLOP and communication bytes are per device per train step.",
            "",
            "![Speed-up and scaling efficiency against devices](figures/scaling-curves.png)",
            "",
        ]
        for curve in curves:
            frames = {a: result.to_frame() for a, result in curve["priced"].items()}
            what = "data parallel (DDP: gradients all-reduced)" if curve["axis"] == "data" else \
                "fully sharded (FSDP / ZeRO-3: parameters gathered, gradients reduce-scattered)"
            rows = []
            for points in zip(*(frame.iterrows() for frame in frames.values())):
                a = points[0][1]  # what the algorithm does not change: the first's
                cells = [count(a["devices"]), count(a["global_batch"]), si(a["flops_per_device"]),
                         si(a["communication_bytes_per_device"]) + "B", ms(a["compute_s"])]
                for _, b in points:
                    cells += [ms(b["communication_s"]), ratio(b["speedup"], 3), pct(b["efficiency"])]
                rows.append(cells)
            header = ["devices", "global batch", "FLOP / device", "collective bytes / device", "compute ms"]
            header += [f"{_SHORT_NAMES.get(a, a)} {column}" for a in frames
                       for column in ("comm ms", "speed-up", "efficiency")]
            last = {a: frame.iloc[-1] for a, frame in frames.items()}
            first, *others = last
            efficiency = ", ".join([f"{pct(last[first]['efficiency'])} efficiency with {first} collectives",
                                    *[f"{pct(last[a]['efficiency'])} with {a}" for a in others]])
            lines += [
                f"### {curve['model']}: {what}, {curve['batch']} sample(s) per device",
                "",
                pipe_table(header, rows, "r" * len(header)),
                "",
                f"At {count(last[first]['devices'])} devices: {efficiency}; the communication is "
                f"{ratio(last['ring']['communication_s'] / last['ring']['compute_s'], 3)}× the compute with rings.",
                "",
            ]
    seed = data.seed004 if plan.seed004_model else None
    if seed is not None:
        small, large = seed["devices"]
        p40 = dict(device="p40")
        one, two = predict(seed["one"], **p40), predict(seed["two"], **p40)
        doubling = speedup(one, two)
        gradient = seed["two"].phases["train_step"].communication_bytes
        need = bandwidth_for_speedup(seed["one"], seed["two"], SEED004_SPEEDUP, device="p40",
                                     interconnect="pcie3")
        nvlink = speedup(predict(seed["one"], device="h100"), predict(seed["two"], device="h100"))
        strong = {a: (predict(seed["small"], device="p40", algorithm=a), predict(seed["large"], device="p40",
                                                                                 algorithm=a))
                  for a in comm.ALGORITHMS}
        steps = math.ceil(IMAGENET_TRAIN_IMAGES * JIA_EPOCHS / seed["global_batch"])
        measured = tuple(60 * minutes / steps for minutes in JIA_MINUTES)
        strong_need = {a: bandwidth_for_speedup(seed["small"], seed["large"], SEED004_SPEEDUP, device="p40",
                                                algorithm=a) for a in comm.ALGORITHMS}
        lines += [
            "## Seed 004's 1.3× from doubling the GPUs",
            "",
            f"Seed 004 reports a 1.3× speed-up from twice the GPUs (Jia et al. 2018: ResNet-50 in "
            f"{JIA_MINUTES[0]:g} minutes on 1,024 Tesla P40s, {JIA_MINUTES[1]:g} on 2,048; "
            f"{JIA_MINUTES[0]:g} / {JIA_MINUTES[1]:g} = {ratio(JIA_MINUTES[0] / JIA_MINUTES[1], 3)}). In this model a "
            "doubling gives 1.3× exactly when the exposed communication is a set multiple of the compute:",
            "",
            f"- weak scaling (same samples per device): 2C / (C + M) = 1.3, so M = "
            f"{_speedup_condition(SEED004_SPEEDUP, True)} C;",
            f"- strong scaling (same global batch, compute per device halves): (C + M) / (C/2 + M) = 1.3, so M = "
            f"{_speedup_condition(SEED004_SPEEDUP, False)} C at the smaller count.",
            "",
            f"**From 1 to 2 GPUs** ({seed['model']}, {seed['batch']} images per GPU, Tesla P40, roofline compute "
            f"{ms(one.prediction.compute_seconds)} ms at its peaks): the gradient all-reduce moves "
            f"{sig(gradient / 1e6, 4)} MB per device ({count(len(seed['two'].phases['train_step'].communication))} "
            f"collectives). Over the P40 servers' PCIe 3.0 it takes {ms(two.prediction.communication_seconds)} ms "
            f"and the doubling gives {ratio(doubling, 3)}×; on H100s with NVLink 4, {ratio(nvlink, 3)}×. 1.3× appears when "
            f"the link between the two GPUs carries {gbs(need)} or less with nothing overlapped: "
            f"{_beside_presets(need)}.",
            "",
            f"**From {count(small)} to {count(large)} GPUs at a fixed {count(seed['global_batch'])}-image batch** "
            f"({count(seed['global_batch'] // small)} then {count(seed['global_batch'] // large)} images per GPU, "
            "P40 servers of 8 on PCIe 3.0, InfiniBand EDR between them):",
            "",
            pipe_table(["collectives", f"step ms at {small}", f"comm ms at {small}", f"step ms at {large}",
                        f"comm ms at {large}", "speed-up", "1.3× needs a link of"], [
                *([a, ms(strong[a][0].prediction.seconds), ms(strong[a][0].prediction.communication_seconds),
                   ms(strong[a][1].prediction.seconds), ms(strong[a][1].prediction.communication_seconds),
                   ratio(speedup(*strong[a]), 3), gbs(strong_need[a])] for a in comm.ALGORITHMS),
                ["measured (Jia et al.)", ms(measured[0]), "", ms(measured[1]), "",
                 ratio(measured[0] / measured[1], 3), ""],
            ], "lrrrrrl"),
            "",
            f"The measured rows are {JIA_MINUTES[0]:g} and {JIA_MINUTES[1]:g} minutes over {count(steps)} steps "
            f"({JIA_EPOCHS} epochs of {count(IMAGENET_TRAIN_IMAGES)} images at {count(seed['global_batch'])} per "
            f"step). The compiled step holds {count(len(seed['small'].phases['train_step'].communication))} "
            f"all-reduces; on one flat ring each pays {count(2 * (small - 1))} hops of latency, and the doubling "
            + ("slows the step down" if speedup(*strong["ring"]) < 1 else f"gives {ratio(speedup(*strong['ring']), 3)}×")
            + f"; with halving-doubling it gives {ratio(speedup(*strong['halving-doubling']), 3)}×. The measured "
            f"{ratio(measured[0] / measured[1], 3)}× "
            + ("lies between the two schedules" if min(speedup(*strong[a]) for a in comm.ALGORITHMS)
               <= measured[0] / measured[1] <= max(speedup(*strong[a]) for a in comm.ALGORITHMS)
               else "lies outside the two schedules")
            + ": the model brackets what Jia et al.'s all-reduce (hierarchical, on fused buffers) achieved; it "
            "does not say which schedule they ran.",
            "",
        ]
    lines += [*environment_section(data), regenerate_line(), ""]
    files[f"{NAME}.md"] = markdown_file("\n".join(lines))
    return files
