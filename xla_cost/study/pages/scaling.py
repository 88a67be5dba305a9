"""The page ``scaling``: sharded train steps priced on many devices.

Weak-scaling curves of the plan, predicted (the time model's global constants;
bounds for a device without one) with each collective algorithm of
`xla_cost.timemodel.comm.ALGORITHMS` (a new algorithm there is a new set of
columns here), and the condition for seed 004's 1.3x from twice the GPUs,
predicted and as bounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.timemodel import calibration, comm
from xla_cost.timemodel.hardware import Hardware
from xla_cost.timemodel.schedule import Layout
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
    each collective algorithm (``priced``: algorithm -> `xla_cost.ScalingResult`):
    predictions."""
    from xla_cost.runs.scaling import scaling

    plan = data.plan
    out = []
    for model, axis, batch in plan.scaling_curves:
        common = dict(devices=plan.scaling_devices, batch_size=batch, device=plan.scaling_device, optimizer="sgd",
                      bound=False)
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
        kind = "predicted"
        fig.suptitle(f"Weak scaling on {device} clusters ({kind}): {styles} collectives", fontsize=10)
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


def _needed(bandwidth: float | None) -> str:
    """The link a doubling needs for 1.3x, and where it falls among the presets."""
    if bandwidth is None:
        return "with no link between the two GPUs (out of reach in this model)"
    return f"with a link between the two GPUs of {gbs(bandwidth)} ({_beside_presets(bandwidth)})"


def _speedup_condition(target: float, weak: bool) -> str:
    """The exposed communication, as a multiple of compute, that turns a
    doubling into ``target``x (compute halves per device under strong scaling;
    stays under weak scaling)."""
    # weak: 2C / (C + M) = s  ->  M = (2 / s - 1) C
    # strong: (C + M) / (C / 2 + M) = s  ->  M = (1 - s / 2) / (s - 1) C
    multiple = (2 / target - 1) if weak else (1 - target / 2) / (target - 1)
    return ratio(multiple, 3)


def _pricing_lines(device: str) -> list[str]:
    """The page's list of how its curves are priced on ``device``: predicted
    with the time model's global constants."""
    constants = calibration.constants()
    steps = [
        "- weak scaling: the samples per device stay, the global batch grows with the devices; every point's forward "
        "and backward compute (and its update, replicated under DDP) is the one-device program's at the same samples "
        "per device: the same work (the CPU compiles the sharded program with other fusions, which no GPU shares), so "
        "a curve shows what communication costs (a data-parallel one never passes 100% efficiency);",
        "- ring all-reduce 2(n−1)/n·S/B + 2(n−1)·α, all-gather and reduce-scatter (n−1)/n·S/B + (n−1)·α; "
        "halving-doubling (Thakur et al. 2005) has the same bandwidth term and ⌈log2 n⌉ hops instead of n−1, as tree "
        "and hierarchical algorithms at scale;",
    ]
    bucket = Hardware(device).bucket_bytes
    return [
        "- step time = compute + the communication not hidden behind it, **predicted** (`xla_cost.predict`; "
        "`xla-cost scaling --bound` gives the bounds: compute at peak, nothing hidden, flat rings);",
        "- compute priced kernel by kernel where a target was compiled, else from the CPU program's totals, with "
        "the time model's global constants (`xla_cost.timemodel.calibration`, [validation](validation.md)): "
        f"{calibration.describe(constants)};",
        f"- gradients reduced in {sig(bucket / 2**20, 3)} MiB buckets (PyTorch DDP's) as the backward pass makes "
        "them, in two levels over several nodes (within each node, then between them, as NCCL does); what runs past "
        "the backward pass is exposed;",
        *steps,
    ]


def build(data: StudyData) -> dict[str, bytes]:
    plan = data.plan
    files: dict[str, bytes] = {}
    cluster = comm.cluster(plan.scaling_device)
    lines = [
        "# Scaling: sharded train steps on many devices",
        "",
        "Each point is a sharded analysis: the train step compiled for a mesh of K devices by JAX's SPMD partitioner "
        "(`xla_cost.analyze(..., mesh={axis: K})`, devices simulated on the CPU, nothing allocated), whose per-device "
        "work and whose collectives (read from the compiled HLO, with their loop multiplicity) are priced by the "
        "time model (`docs/time-model.md`) and the alpha-beta model of `xla_cost.timemodel.comm`:",
        "",
        *_pricing_lines(plan.scaling_device),
        "",
        "What the model ignores: topology contention between concurrent collectives, stragglers, the slow-down of "
        "compute that shares memory bandwidth with communication. `docs/sharding.md` gives the presets' sources.",
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
        kind = "predicted"
        lines += [
            f"## Weak scaling on {plan.scaling_device} clusters ({kind})",
            "",
            f"{cluster.node_size} devices per node on `{cluster.intra.name}`, `{cluster.inter.name}` between nodes; "
            "SGD, float32. FLOP and communication bytes are per device per train step; compute and communication "
            "ms per step, the communication before any of it is hidden.",
            "",
            "![Speed-up and scaling efficiency against devices](figures/scaling-curves.png)",
            "",
        ]
        for curve in curves:
            lines += _curve_lines(curve)
    seed = data.seed004 if plan.seed004_model else None
    if seed is not None:
        lines += _seed004_lines(seed)
    lines += [*environment_section(data), regenerate_line(data), ""]
    files[f"{NAME}.md"] = markdown_file("\n".join(lines))
    return files


def _curve_lines(curve: Mapping[str, Any]) -> list[str]:
    """One curve's table (a set of columns per collective algorithm) and its summary."""
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
    header += [f"{_SHORT_NAMES.get(a, a)} {column}" for a in frames for column in ("comm ms", "speed-up", "efficiency")]
    last = {a: frame.iloc[-1] for a, frame in frames.items()}
    first, *others = last
    efficiency = ", ".join([f"{pct(last[first]['efficiency'])} efficiency with {first} collectives",
                            *[f"{pct(last[a]['efficiency'])} with {a}" for a in others]])
    return [
        f"### {curve['model']}: {what}, {curve['batch']} sample(s) per device",
        "",
        pipe_table(header, rows, "r" * len(header)),
        "",
        f"At {count(last[first]['devices'])} devices: {efficiency}; the communication is "
        f"{ratio(last['ring']['communication_s'] / last['ring']['compute_s'], 3)}× the compute with rings.",
        "",
    ]


def _bandwidth_for(seed: Mapping[str, Any], layouts: Mapping[int, Any], hardware: Hardware, algorithm: str
                   ) -> float | None:
    """The link bandwidth at which Jia et al.'s doubling gives seed 004's 1.3x."""
    from xla_cost.runs.scaling import bandwidth_for_speedup

    small, large = seed["devices"]
    return bandwidth_for_speedup(seed["small"], seed["large"], SEED004_SPEEDUP, hardware, algorithm=algorithm,
                                 layouts=(layouts[small], layouts[large]))


def _seed004_one_two(seed: Mapping[str, Any], one: Any, two: Any, doubling: Mapping[str, float],
                     need: Mapping[str, float | None], gradient: int, nvlink: float) -> list[str]:
    """Seed 004's section up to the 1 -> 2 GPU doubling."""
    described = "the time model's global constants: " + calibration.describe(calibration.constants())
    return [
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
        "Each step is priced twice: **predicted** (compute with "
        f"{described}; gradients in buckets, hidden behind the backward pass where they can be, in two levels over "
        "several nodes) and as a **bound** (compute at peak, nothing hidden, every collective on one flat ring).",
        "",
        f"**From 1 to 2 GPUs** ({seed['model']}, {seed['batch']} images per GPU, Tesla P40, predicted compute "
        f"{ms(one.prediction.compute_seconds)} ms): the gradient all-reduce moves {sig(gradient / 1e6, 4)} MB per "
        f"device ({count(len(seed['two'].phases['train_step'].communication))} collectives). Over the P40 servers' "
        f"PCIe 3.0 it takes {ms(two.prediction.communication_seconds)} ms, "
        f"{ms(two.prediction.exposed_communication_seconds)} ms of it not hidden, and the doubling gives "
        f"{ratio(doubling['predicted'], 3)}× predicted, {ratio(doubling['bound'], 3)}× as a bound; on H100s with "
        f"NVLink 4, {ratio(nvlink, 3)}× predicted. The doubling gives exactly 1.3× predicted "
        f"{_needed(need['predicted'])}; as a bound {_needed(need['bound'])}.",
        "",
    ]


def _seed004_lines(seed: Mapping[str, Any]) -> list[str]:
    """Seed 004's doublings on Tesla P40s, predicted (the time model's global
    constants) and as bounds (compute at peak, nothing hidden, flat rings);
    Jia et al.'s fixed-batch doubling is the validation's two steps."""
    from xla_cost.runs.scaling import bandwidth_for_speedup, predict, speedup

    small, large = seed["devices"]
    p40 = Hardware(device="p40")
    priced = {"predicted": p40, "bound": p40.bound()}
    one, two = (predict(seed[k], p40) for k in ("one", "two"))
    doubling = {kind: speedup(predict(seed["one"], hw), predict(seed["two"], hw)) for kind, hw in priced.items()}
    need = {kind: bandwidth_for_speedup(seed["one"], seed["two"], SEED004_SPEEDUP, hw, interconnect="pcie3")
            for kind, hw in priced.items()}
    gradient = seed["two"].phases["train_step"].communication_bytes
    nvlink = speedup(predict(seed["one"], device="h100"), predict(seed["two"], device="h100"))
    if seed["small"] is None:  # the plan's doubling is not Jia et al.'s (no committed programs): the 1 -> 2 only
        return _seed004_one_two(seed, one, two, doubling, need, gradient, nvlink)
    # Jia et al.'s steps as the validation prices them: the same programs, hardware and layout (one figure per step)
    jia = Hardware(**seed["setups"][small].hardware)
    layouts = {d: Layout(**seed["setups"][d].layout) for d in (small, large)}
    jia_priced = {"predicted": jia, "bound": jia.bound()}
    strong = {(a, kind): (predict(seed["small"], hw, layouts[small], algorithm=a),
                          predict(seed["large"], hw, layouts[large], algorithm=a))
              for kind, hw in jia_priced.items() for a in comm.ALGORITHMS}
    strong_need = {(a, kind): _bandwidth_for(seed, layouts, hw, a) for kind, hw in jia_priced.items()
                   for a in comm.ALGORITHMS}
    steps = math.ceil(IMAGENET_TRAIN_IMAGES * JIA_EPOCHS / seed["global_batch"])
    measured = tuple(60 * minutes / steps for minutes in JIA_MINUTES)
    jia_speedup = measured[0] / measured[1]
    bounds = [speedup(*strong[a, "bound"]) for a in comm.ALGORITHMS]
    predictions = [speedup(*strong[a, "predicted"]) for a in comm.ALGORITHMS]
    lines = _seed004_one_two(seed, one, two, doubling, need, gradient, nvlink)
    return lines + [
        f"**From {count(small)} to {count(large)} GPUs at a fixed {count(seed['global_batch'])}-image batch** "
        f"({count(seed['global_batch'] // small)} then {count(seed['global_batch'] // large)} images per GPU, "
        "float16 storage and float32 arithmetic, P40 servers of 8, one 100 Gb/s InfiniBand link per server: "
        "the steps, programs and hardware of the [validation](validation.md) page's `jia-1024-time` and "
        "`jia-2048-time`, compiled for the P40):",
        "",
        pipe_table(["collectives", f"step ms at {small}", f"comm ms at {small}", f"step ms at {large}",
                    f"comm ms at {large}", "speed-up", "1.3× needs a link of"], [
            *([f"{a}, {kind}", ms(strong[a, kind][0].prediction.seconds),
               ms(strong[a, kind][0].prediction.communication_seconds), ms(strong[a, kind][1].prediction.seconds),
               ms(strong[a, kind][1].prediction.communication_seconds), ratio(speedup(*strong[a, kind]), 3),
               gbs(strong_need[a, kind])] for kind in jia_priced for a in comm.ALGORITHMS),
            ["measured (Jia et al.)", ms(measured[0]), "", ms(measured[1]), "", ratio(jia_speedup, 3), ""],
        ], "lrrrrrl"),
        "",
        f"The measured rows are {JIA_MINUTES[0]:g} and {JIA_MINUTES[1]:g} minutes over {count(steps)} steps "
        f"({JIA_EPOCHS} epochs of {count(IMAGENET_TRAIN_IMAGES)} images at {count(seed['global_batch'])} per "
        f"step). As a bound each all-reduce pays {count(2 * (small - 1))} hops of latency on one flat ring, and the "
        "doubling " + ("slows the step down" if bounds[0] < 1 else f"gives {ratio(bounds[0], 3)}×")
        + f"; with halving-doubling it gives {ratio(bounds[1], 3)}×. The measured {ratio(jia_speedup, 3)}× "
        + ("lies between the two bounds" if min(bounds) <= jia_speedup <= max(bounds)
           else "lies outside the two bounds")
        + ". Predicted (buckets, two levels, overlap) the doubling gives "
        + join_words([f"{ratio(v, 3)}× with {a}" for a, v in zip(comm.ALGORITHMS, predictions)])
        + ": the [validation](validation.md) page states what the prediction leaves out of Jia et al.'s step.",
        "",
    ]
