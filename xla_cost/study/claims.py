"""The seeds' quantitative claims, each with the test that judges it: `CLAIMS`.

A `Claim` names its seeds, its text, the page that shows the measurement and a
check: a function of `StudyData` that returns what was measured and the
verdict, by the rules of ``claims.md`` (`VERDICTS`; tolerances in
`xla_cost.study.plan`). The checks read the data several pages show, through
`xla_cost.study.views`; the pages list their claims with `claim_lines`, and the
claims page lists them all.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from xla_cost.parallel.devices import device as registry_device
from xla_cost.present.units import count, join_words, pct, pct_sig, ratio, sig, value_range
from xla_cost.study.analytic import kaplan_per_token
from xla_cost.study.data import StudyData, collected
from xla_cost.study.plan import APPROX_TOLERANCE, HALF_PRECISION_STEP, TOLERANCE
from xla_cost.study.published import (
    DDP_MODELS,
    DDP_SHARES,
    GPT3_TOTAL_FLOPS,
    GPT3_TRAINING_TOKENS,
    IMAGENET_TRAIN_IMAGES,
    JIA_EPOCHS,
    JIA_MINUTES,
    PUBLISHED_PARAMETERS,
    SEED004_SPEEDUP,
    SEED_ADAM_FLOPS_PER_PARAMETER,
    SEED_SGD_FLOPS_PER_PARAMETER,
)
from xla_cost.study.views import (
    FIRST_LAYER,
    NET_NAMES,
    REMAINDER,
    SHARE_PHASES,
    SIZE_ONE_INPUT,
    analysed,
    architecture_rows,
    by_model,
    deepest_run,
    depth_runs,
    first_and_other_layers,
    gbs,
    ms,
    net_name,
    optimizer_runs,
    phase_shares,
    r2,
    records,
    seed_layer_rows,
    seed_runs,
    timing_cases,
    within,
)

__all__ = ["CLAIMS", "VERDICTS", "VERDICT_LABELS", "Claim", "claim_lines", "verdict_kind"]


@dataclasses.dataclass(frozen=True)
class Claim:
    """One quantitative claim of the seeds and how this project tests it.

    Attributes:
      seeds: the seed documents that make it (``001``, ``000``, ...).
      text: the claim, as the seed states it (shortened).
      page: the page that shows the measurement.
      check: `StudyData` -> (what the project measured, the verdict by the rules of
        `claims.md`: ``confirmed``, ``refuted``, ``depends on ...``, ``not
        testable here ...``).
    """

    seeds: str
    text: str
    page: str
    check: Callable[[StudyData], tuple[str, str]]


def _confirmed(ok: bool) -> str:
    return "confirmed" if ok else "refuted"


_NOT_ANALYSED = ("not analysed in this plan", "not tested")


def _c_first_layer(data: StudyData) -> tuple[str, str]:
    first, _ = first_and_other_layers(data)
    if not first:
        return _NOT_ANALYSED
    plain = [(m, p, r) for m, p, r in first if m not in SIZE_ONE_INPUT]
    odd = [(m, p, r) for m, p, r in first if m in SIZE_ONE_INPUT]
    text = "First layers' backward/forward: " + join_words([f"{net_name(m)} {p} {ratio(r)}" for m, p, r in first]) + "."
    if odd:
        text += (" OneNet's fc1 has one input feature: its forward matmul is a length-1 contraction that XLA "
                 "counts as a multiply (1 FLOP, not 2).")
    ok = all(within(r, 1.0, TOLERANCE) for *_, r in plain)
    verdict = _confirmed(ok)
    if ok and odd and not all(within(r, 1.0, TOLERANCE) for *_, r in odd):
        verdict = "confirmed where the first layer's input has more than one feature (XLA's length-1 convention)"
    return text, verdict


def _c_other_layers(data: StudyData) -> tuple[str, str]:
    _, other = first_and_other_layers(data)
    if not other:
        return _NOT_ANALYSED
    values = [r for *_, r in other]
    text = (f"Backward/forward of the {len(other)} other parametrised layers at batch {data.plan.layer_batch} "
            f"(DeeperConvNet: depth {(deepest_run(data) or {}).get('depth')}): {value_range(values)}.")
    one = [r["backward_to_forward"] for m in data.plan.seed_nets if m in ("linear_net", "one_net")
           for r in (seed_layer_rows(data, m, 1) if 1 in data.plan.batch_sizes else [])
           if r["path"] not in (REMAINDER, FIRST_LAYER[m])]
    ok = all(within(v, 2.0, TOLERANCE) for v in values)
    if one:
        text += (f" At batch 1 dense layers read {value_range(one)}: a weight gradient over one example is an outer "
                 "product, which XLA counts as M·N multiplies, not 2·M·N.")
        if ok:
            return text, "confirmed from batch 2 on; at batch 1 it depends on counting a length-1 contraction as 2 FLOP"
    return text, _confirmed(ok)


def _all_ratio_rows(data: StudyData) -> list[dict[str, Any]]:
    rows = [r for rs in seed_runs(data).values() for r in rs] + depth_runs(data) + architecture_rows(data)
    return [r for r in rows if r.get("backward_with_update_to_forward") is not None]


def _c_between_1_and_3(data: StudyData) -> tuple[str, str]:
    rows = _all_ratio_rows(data)
    if not rows:
        return _NOT_ANALYSED
    with_update = [r["backward_with_update_to_forward"] for r in rows]
    without = [r["backward_to_forward"] for r in rows]
    low = min(rows, key=lambda r: r["backward_to_forward"])
    text = (f"Over {len(rows)} configurations (seed nets at every batch size, DeeperConvNet at every depth, "
            f"ResNets, transformers): (backward + update)/forward {value_range(with_update)}; backward/forward alone "
            f"{value_range(without)} (lowest: {net_name(low['model'])} at batch {low['batch_size']}).")
    ok = min(with_update) >= 1 - TOLERANCE and max(with_update) <= 3 * (1 + TOLERANCE)
    return text, _confirmed(ok)


def _c_classic(data: StudyData) -> tuple[str, str]:
    rows = []
    resnets = by_model(data.resnets)
    for model, runs in resnets.items():
        rows.append((f"{model} b{runs[-1]['batch_size']}", runs[-1]["backward_with_update_to_forward"]))
    deepest = deepest_run(data)
    if deepest:
        rows.append((f"DeeperConvNet depth {deepest['depth']}", deepest["backward_with_update_to_forward"]))
    if not rows:
        return _NOT_ANALYSED
    values = [v for _, v in rows]
    return (f"(backward + update)/forward of deep CNNs at their largest batch: {value_range(values)} "
            f"({join_words([f'{n} {ratio(v)}' for n, v in rows])})."), _confirmed(all(within(v, 2.0, TOLERANCE) for v in values))


def _c_three(data: StudyData) -> tuple[str, str]:
    rows = seed_runs(data).get("one_net")
    if not rows:
        return _NOT_ANALYSED
    peak = max(rows, key=lambda r: r["backward_with_update_to_forward"])
    text = (f"OneNet's largest (backward + update)/forward: {ratio(peak['backward_with_update_to_forward'])}, at batch "
            f"{peak['batch_size']}, where backward/forward is {ratio(peak['backward_to_forward'])}: XLA counts a "
            "dense weight gradient over one example as M·N multiplies, half of seed 001's 2·M·N.")
    if within(peak["backward_with_update_to_forward"], 3.0, TOLERANCE):
        return text, "confirmed"
    return text, ("depends on the counting convention: 3:1 needs a length-1 contraction counted as 2 FLOP "
                  "per multiply-add; XLA's counts peak below it")


def _c_converges(model: str, target: float) -> Callable[[StudyData], tuple[str, str]]:
    def check(data: StudyData) -> tuple[str, str]:
        rows = seed_runs(data).get(model)
        if not rows:
            return _NOT_ANALYSED
        first, last = rows[0], rows[-1]
        text = (f"{net_name(model)}'s backward/forward: {ratio(first['backward_to_forward'])} at batch {first['batch_size']}, "
                f"{ratio(last['backward_to_forward'])} at batch {last['batch_size']}; with the update "
                f"{ratio(first['backward_with_update_to_forward'])} → {ratio(last['backward_with_update_to_forward'])}.")
        return text, _confirmed(within(last["backward_with_update_to_forward"], target, TOLERANCE)
                                and within(last["backward_to_forward"], target, TOLERANCE))

    return check


def _c_cnn_update(data: StudyData) -> tuple[str, str]:
    rows = seed_runs(data).get("conv_net")
    if not rows:
        return _NOT_ANALYSED
    values = [r["backward_with_update_to_forward"] for r in rows]
    share = max(r["update_flops"] / r["train_step_flops"] for r in rows)
    spread = (max(values) - min(values)) / min(values)
    text = (f"ConvNet's (backward + update)/forward is {value_range(values)} from batch {rows[0]['batch_size']} to "
            f"{rows[-1]['batch_size']}; the update is at most {pct(share, 4)} of the step "
            f"({count(rows[0]['parameters'])} parameters against {sig(rows[0]['forward_flops'] / rows[0]['batch_size'] / 1e6)} "
            "MFLOP per image forward).")
    return text, _confirmed(spread < 0.01 and share < 0.01)


def _c_update_constant(data: StudyData) -> tuple[str, str]:
    runs = seed_runs(data)
    if not runs:
        return _NOT_ANALYSED
    parts, ok = [], True
    for model, rows in runs.items():
        same = len({r["update_flops"] for r in rows}) == 1
        growth = rows[-1]["forward_flops"] / rows[0]["forward_flops"]
        batches = rows[-1]["batch_size"] / rows[0]["batch_size"]
        ok &= same and within(growth, batches, TOLERANCE)
        parts.append(f"{net_name(model)} update {'constant' if same else 'varies'}, forward ×{sig(growth)}")
    first = next(iter(runs.values()))
    return (f"From batch {first[0]['batch_size']} to {first[-1]['batch_size']} (×{first[-1]['batch_size'] // first[0]['batch_size']}): "
            + "; ".join(parts) + "."), _confirmed(ok)


def _c_linear_flops(data: StudyData) -> tuple[str, str]:
    batch = data.plan.layer_batch
    parts, values, odd = [], [], []
    for model in data.plan.seed_nets:
        for r in seed_layer_rows(data, model):
            if not r["path"].startswith("fc") or not r["parameters"]:
                continue
            quotient = r["forward_flops"] / batch / r["parameters"]
            (odd if model in SIZE_ONE_INPUT and r["path"] == FIRST_LAYER[model] else values).append(quotient)
            parts.append(f"{net_name(model)} {r['path']} {ratio(quotient)}")
    if not parts:
        return _NOT_ANALYSED
    text = f"Forward FLOP per example ÷ parameters of the dense layers: {join_words(parts)}."
    ok = all(within(v, 2.0, TOLERANCE) for v in values)
    if ok and odd:
        return text + " OneNet's fc1 (one input feature) is a multiply plus the bias: 1 FLOP per parameter.", \
            "confirmed except for a single-input layer (XLA's length-1 convention)"
    return text, _confirmed(ok)


def _c_depth(data: StudyData) -> tuple[str, str]:
    runs = depth_runs(data)
    if len(runs) < 2:
        return _NOT_ANALYSED
    first, last = runs[0], runs[-1]
    text = (f"DeeperConvNet (batch {first['batch_size']}): {ratio(first['backward_to_forward'])} at depth {first['depth']}, "
            f"{ratio(last['backward_to_forward'])} at depth {last['depth']}.")
    return text, _confirmed(first["backward_to_forward"] < 2 * (1 - TOLERANCE)
                            and within(last["backward_to_forward"], 2.0, TOLERANCE))


def _c_resnets(data: StudyData) -> tuple[str, str]:
    rows = [r for rs in by_model(data.resnets).values() for r in rs]
    if not rows:
        return _NOT_ANALYSED
    values = [r["backward_to_forward"] for r in rows]
    return (f"{join_words(list(dict.fromkeys(r['model'] for r in rows)))} at batch sizes "
            f"{join_words([str(b) for b in sorted({r['batch_size'] for r in rows})])}: backward/forward {value_range(values)}, "
            f"with the update {value_range([r['backward_with_update_to_forward'] for r in rows])}."), \
        _confirmed(all(within(v, 2.0, TOLERANCE) for v in values))


def _c_relu_loss(data: StudyData) -> tuple[str, str]:
    shares = []
    for model in data.plan.seed_nets:
        rows = seed_layer_rows(data, model)
        rest = next((r for r in rows if r["path"] == REMAINDER), None)
        if rest is None:
            continue
        step = sum(r["forward_flops"] + r["backward_flops"] for r in rows)
        shares.append((model, (rest["forward_flops"] + rest["backward_flops"]) / step))
    if not shares:
        return _NOT_ANALYSED
    return ("Share of forward + backward FLOP outside the parametrised layers (ReLUs, pools, mean, loss) at batch "
            f"{data.plan.layer_batch}: {join_words([f'{net_name(m)} {pct_sig(s, 2)}' for m, s in shares])}."), \
        _confirmed(all(s < TOLERANCE for _, s in shares))


def _optimizer_values(data: StudyData, name: str) -> list[tuple[str, float, float]]:
    return [(m, r["update_flops"] / r["parameters"], (r["update_transcendentals"] or 0) / r["parameters"])
            for (m, o), r in optimizer_runs(data).items() if o == name]


def _c_sgd(data: StudyData) -> tuple[str, str]:
    values = _optimizer_values(data, "sgd")
    if not values:
        return _NOT_ANALYSED
    return (f"SGD's update per parameter: {value_range([v for _, v, _ in values], sig)} FLOP on "
            f"{join_words([net_name(m) for m, *_ in values])} (a multiply by the learning rate, an add)."), \
        _confirmed(all(within(v, SEED_SGD_FLOPS_PER_PARAMETER, TOLERANCE) for _, v, _ in values))


def _c_adam(data: StudyData) -> tuple[str, str]:
    values = _optimizer_values(data, "adam")
    if not values:
        return _NOT_ANALYSED
    flops = [v for _, v, _ in values]
    trans = [t for *_, t in values]
    ok = all(within(v, SEED_ADAM_FLOPS_PER_PARAMETER, APPROX_TOLERANCE) for v in flops)
    return (f"Adam's update per parameter: {value_range(flops, sig)} FLOP + {value_range(trans, lambda v: sig(v, 3))} "
            "transcendental (the square root); optax computes the bias corrections once per step, not per "
            "parameter (see [optimizers.md](optimizers.md))."), _confirmed(ok)


def _c_beyond_three(data: StudyData) -> tuple[str, str]:
    runs = optimizer_runs(data)
    if not runs:
        return _NOT_ANALYSED
    best = max(runs.values(), key=lambda r: (r["backward_flops"] + r["update_flops"]) / r["forward_flops"])
    value = (best["backward_flops"] + best["update_flops"]) / best["forward_flops"]
    over = sorted({o for (m, o), r in runs.items()
                   if (r["backward_flops"] + r["update_flops"]) / r["forward_flops"] > 3})
    text = (f"Largest (backward + update)/forward at batch 1: {ratio(value)} ({net_name(best['model'])}, {best['optimizer']}); "
            f"above 3 with {join_words(over) if over else 'none'}.")
    return text, _confirmed(value > 3)


def _c_adam_classic(data: StudyData) -> tuple[str, str]:
    runs = optimizer_runs(data)
    parts, values = [], []
    for model, rows in by_model(data.resnets).items():
        last = rows[-1]
        for name in ("momentum", "adam"):
            if (model, name) in runs:
                value = (last["backward_flops"] + runs[(model, name)]["update_flops"]) / last["forward_flops"]
                values.append(value)
                parts.append(f"{model} batch {last['batch_size']} {name} {ratio(value)}")
    if not values:
        return _NOT_ANALYSED
    return ("(backward + update)/forward with the update of momentum or Adam (batch-independent, from the batch-1 "
            f"analysis): {join_words(parts)}."), _confirmed(all(within(v, 2.0, TOLERANCE) for v in values))


def _timing_all(data: StudyData) -> list[dict[str, Any]]:
    return [c for _, frame in data.timing for c in timing_cases(frame)]


def _c_ddp_shares(data: StudyData) -> tuple[str, str]:
    cases = [c for c in _timing_all(data) if c["model"] in DDP_MODELS and c["dtype"] == "float32" and phase_shares(c)]
    devices = sorted({c["device"] for c in cases})
    text = "; ".join(
        f"{c['model']} {c['optimizer']} {' / '.join(pct(phase_shares(c)[p], 0) for p in SHARE_PHASES)}" for c in cases
    )
    gpu = [c for c in cases if c["device"].lower() != "cpu"]
    if gpu:
        ok = all(all(abs(phase_shares(c)[p] - DDP_SHARES[p]) <= TOLERANCE for p in SHARE_PHASES) for c in gpu)
        return f"Measured forward / backward / update ({join_words(devices)}): {text}.", \
            ("confirmed" if ok else "refuted") + " on " + join_words(sorted({c['device'] for c in gpu})) + " (not a V100)"
    return (f"Measured on {join_words(devices) or 'no device'} only (float32, reduced shapes): {text or 'no data'}. What "
            "would test it: `benchmarks/time_zoo.py` on a V100 (or the GPU at hand) at the paper's shapes."), \
        "not testable here (needs a V100)"


def _c_three_times(data: StudyData) -> tuple[str, str]:
    cases = [c for c in _timing_all(data) if c["dtype"] == "float32" and c["time_ratio"] is not None]
    if not cases:
        return "No timing data.", "not testable here"
    claimed = DDP_SHARES["backward"] / DDP_SHARES["forward"]
    times = [c["time_ratio"] for c in cases]
    flops = [c["flop_ratio"] for c in cases if c["flop_ratio"] is not None]
    unknown = len(cases) - len(flops)
    ok = all(within(t, claimed, APPROX_TOLERANCE) for t in times)
    devices = join_words(sorted({c["device"] for c in cases}))
    return (f"Measured backward/forward time on {devices} (float32): {value_range(times, r2)}, against a FLOP ratio of "
            f"{value_range(flops, r2) if flops else 'unknown'}"
            + (f" (unknown in {unknown} case{'s' if unknown > 1 else ''})" if unknown and flops else "")
            + f"; the claim's {claimed:.1f} is the V100's time ratio. What would test it as stated: "
            "the GPU run of `benchmarks/time_zoo.py`."), \
        ("confirmed" if ok else "refuted") + f" on {devices}; depends on the hardware"


def _case_name(case: Mapping[str, Any]) -> str:
    return f"{case['model']} {case['dtype']} {case['optimizer']}"


def _largest_phase(case: Mapping[str, Any]) -> str:
    shares = phase_shares(case) or {}
    return max(shares, key=lambda p: shares[p]) if shares else "unknown"


def _c_update_fast(data: StudyData) -> tuple[str, str]:
    cases = [c for c in _timing_all(data) if phase_shares(c)]
    if not cases:
        return "No timing data.", "not testable here"
    slow = [c for c in cases if phase_shares(c)["update"] >= min(phase_shares(c)["forward"], phase_shares(c)["backward"])]
    parts = []
    for optimizer in dict.fromkeys(c["optimizer"] for c in cases):
        chosen = [phase_shares(c)["update"] for c in cases if c["optimizer"] == optimizer]
        parts.append(f"{optimizer} {value_range(chosen, lambda v: pct(v, 0))}")
    text = (f"Update share of step time on {join_words(sorted({c['device'] for c in cases}))}: {'; '.join(parts)}; the "
            "update is the smallest phase in " f"{len(cases) - len(slow)} of {len(cases)} cases"
            + (f" (not in: {join_words(sorted({_case_name(c) for c in slow}))})" if slow else "")
            + ".")
    if not slow:
        return text, "confirmed"
    return text, "depends on the optimizer and on the parameters per example (Adam on weight-heavy nets)"


def _c_autodiff_two(data: StudyData) -> tuple[str, str]:
    rows = [r for r in records(analysed(data.zoo.runs)) if r["model"] not in NET_NAMES]
    if not rows:
        return _NOT_ANALYSED
    values = [r["backward_to_forward"] for r in rows]
    seeds = [r for r in records(analysed(data.zoo.runs)) if r["model"] in NET_NAMES]
    text = f"Backward/forward of the {len(rows)} ResNets and transformers of the zoo at batch 1: {value_range(values)}."
    if seeds:
        text += (f" Seed 001's nets at batch 1: {value_range([r['backward_to_forward'] for r in seeds])} (the first layer, "
                 "1:1, dominates LinearNet; batch 1 halves dense weight gradients).")
    return text, _confirmed(all(within(v, 2.0, TOLERANCE) for v in values))


def _c_kaplan(data: StudyData) -> tuple[str, str]:
    from xla_cost import zoo

    parts, close, far = [], [], []
    for r in records(analysed(data.zoo.runs)):
        spec = zoo.get_spec(r["model"])
        if spec.input_dtype == "float" or "d_model" not in spec.defaults:
            continue
        _, n = kaplan_per_token(spec.defaults)
        tokens = r["batch_size"] * spec.defaults["seq_len"]
        quotient = (r["forward_flops"] + r["backward_flops"]) / tokens / (6 * n)
        parts.append(f"{r['model']} {ratio(quotient, 2)}")
        (close if within(quotient, 1.0, TOLERANCE) else far).append(r["model"])
    if not parts:
        return _NOT_ANALYSED
    text = ("(Forward + backward) FLOP per token ÷ 6N, N the non-embedding parameters: " + join_words(parts)
            + ". What 6N leaves out is the attention over the context (4·n_layer·n_ctx·d_model per token forward) "
            "and the output head (2·d_model·V), large against N for small models.")
    if not far:
        return text, "confirmed"
    if not close:
        return text, "refuted"
    return text, f"depends on model size: within 5% for {join_words(close)}"


def _c_backprop_slowest(data: StudyData) -> tuple[str, str]:
    cases = [c for c in _timing_all(data) if phase_shares(c)]
    if not cases:
        return "No timing data.", "not testable here"
    largest = [c for c in cases if _largest_phase(c) == "backward"]
    others = [c for c in cases if c not in largest]
    text = (f"The backward pass is the largest share of step time in {len(largest)} of {len(cases)} measured cases"
            + (f"; not in {join_words([_case_name(c) + ' (' + _largest_phase(c) + ')' for c in others])}"
               if others else "") + f" ({join_words(sorted({c['device'] for c in cases}))}).")
    if not others:
        return text, "confirmed"
    return text, ("depends on the model and optimizer" if len(largest) >= len(cases) / 2 else "refuted")


def _c_gpu_faster(data: StudyData) -> tuple[str, str]:
    devices = sorted({c["device"] for c in _timing_all(data)})
    gpu = [d for d in devices if d.lower() != "cpu"]
    if gpu:
        best: dict[tuple[str, str], float] = {}
        for case in _timing_all(data):
            if case["dtype"] != "float32":
                continue
            rate = case["phases"].get("train_step", {}).get("flops_per_s")
            if rate:
                key = (case["model"], "cpu" if case["device"].lower() == "cpu" else "gpu")
                best[key] = max(best.get(key, 0.0), float(rate))
        both = sorted(m for m, where in best if where == "gpu" and (m, "cpu") in best)
        if both:
            ratios = {m: best[(m, "gpu")] / best[(m, "cpu")] for m in both}
            return (f"Best float32 train-step FLOP/s, {join_words(gpu)} ÷ the 2-core CPU (each at its own shapes, "
                    "`benchmarks/time_zoo.py`): " + ", ".join(f"{m} {sig(r, 3)}×" for m, r in ratios.items())
                    + "."), _confirmed(all(r >= 10 for r in ratios.values()))
        return f"Timing data on {join_words(devices)}: compare the step-time sections.", "see step-time.md"
    return ("Only CPU timings exist (no GPU was available to this project). What would test it: the same "
            "`benchmarks/time_zoo.py` cases on a GPU, against the committed CPU CSV (same models, shapes and "
            "counts)."), "not testable here (no GPU)"


def _c_two_gpus(data: StudyData) -> tuple[str, str]:
    from xla_cost.runs.scaling import bandwidth_for_speedup, predict, speedup

    seed = data.seed004 if data.plan.seed004_model else None
    if seed is None:
        return _NOT_ANALYSED
    pcie = speedup(predict(seed["one"], device="p40"), predict(seed["two"], device="p40"))
    need = bandwidth_for_speedup(seed["one"], seed["two"], SEED004_SPEEDUP, device="p40", interconnect="pcie3")
    small, large = seed["devices"]
    strong = {a: speedup(predict(seed["small"], device="p40", algorithm=a),
                         predict(seed["large"], device="p40", algorithm=a))
              for a in ("ring", "halving-doubling")}
    return (f"Sharded {seed['model']} steps priced on Tesla P40s: 1 → 2 GPUs ({seed['batch']} images each) "
            f"{ratio(pcie, 3)}× over PCIe 3.0, 1.3× at a link of {gbs(need)} or less; {count(small)} → {count(large)} "
            f"GPUs at a {count(seed['global_batch'])} batch {ratio(strong['ring'], 3)}× with flat-ring all-reduces, "
            f"{ratio(strong['halving-doubling'], 3)}× with halving-doubling ones."), \
        "depends on the interconnect and the all-reduce algorithm (scaling.md gives the condition)"


def _c_half_precision(data: StudyData) -> tuple[str, str]:
    cases = _timing_all(data)
    pairs = []
    for case in cases:
        if case["dtype"] != "bfloat16":
            continue
        twin = next((c for c in cases if c["dtype"] == "float32" and c["model"] == case["model"]
                     and c["optimizer"] == case["optimizer"] and c["batch"] == case["batch"]
                     and c["device"] == case["device"]), None)
        a = case["phases"].get("train_step", {}).get("median_s")
        b = twin["phases"].get("train_step", {}).get("median_s") if twin else None
        if a and b:
            pairs.append((case["device"], a / b, b, case["model"]))
    if not pairs:
        return "No bfloat16 timing.", "not testable here"
    gpu = [(v, step, model) for d, v, step, model in pairs if d.lower() != "cpu"]
    cpu = [v for d, v, _, _ in pairs if d.lower() == "cpu"]
    text = f"bfloat16 train-step time ÷ float32: {value_range([v for _, v, _, _ in pairs], r2)}×"
    if gpu:
        text = f"bfloat16 train-step time ÷ float32: {value_range([v for v, _, _ in gpu], r2)}×"
        large = [v for v, step, _ in gpu if step >= HALF_PRECISION_STEP]
        small = sorted({m for v, step, m in gpu if step < HALF_PRECISION_STEP})
        text += (f" (GPU); {value_range(large, r2) if large else 'none'}× for the steps of "
                 f"{ms(HALF_PRECISION_STEP)} ms or more in float32"
                 + (f"; the shorter ones ({join_words(small)}) are launch- and memory-bound, where 16-bit units do not "
                    "help" if small else "") + ".")
        if small and large and all(v < 1 for v in large):
            return text, "depends on the step's size: faster for every model whose float32 step takes " \
                f"{ms(HALF_PRECISION_STEP)} ms or more"
        return text, _confirmed(all(v < 1 for v, _, _ in gpu))
    return (text + " on the CPU, which emulates bfloat16 in float32 (the counts differ by the conversions only). "
            "What would test it: the bfloat16 cases of `benchmarks/time_zoo.py` on a GPU with bfloat16 units."), \
        "not testable here (CPU emulates bfloat16)" if cpu else "not testable here"


def _c_bigger_batches(data: StudyData) -> tuple[str, str]:
    runs = seed_runs(data)
    if not runs:
        return _NOT_ANALYSED
    parts, changes = [], []
    for model, rows in runs.items():
        first, last = rows[0], rows[-1]
        a = first["train_step_flops"] / first["batch_size"]
        b = last["train_step_flops"] / last["batch_size"]
        changes.append(1 - b / a)
        parts.append(f"{net_name(model)} −{pct_sig(1 - b / a)}")
    first = next(iter(runs.values()))
    text = (f"Train-step FLOP per example from batch {first[0]['batch_size']} to {first[-1]['batch_size']}: "
            f"{join_words(parts)} (only the update is shared by the batch). Time per example is not measured against "
            "the batch here.")
    if all(c > TOLERANCE for c in changes):
        return text, "confirmed"
    return text, "depends on the update's share: large for dense nets at small batch, none for CNNs"


def _c_imagenet(data: StudyData) -> tuple[str, str]:
    from xla_cost.runs.scaling import predict

    seed = data.seed004 if data.plan.seed004_model else None
    if seed is None:
        return _NOT_ANALYSED
    small, _ = seed["devices"]
    step = seed["small"]
    per_image = seed["one"].phases["train_step"].flops / seed["one"].batch_size
    total = per_image * IMAGENET_TRAIN_IMAGES * JIA_EPOCHS
    seconds = JIA_MINUTES[0] * 60
    steps = math.ceil(IMAGENET_TRAIN_IMAGES * JIA_EPOCHS / seed["global_batch"])
    peak = registry_device("p40", has="peak").peak.for_dtype("float32")
    mfu = total / seconds / small / peak
    comm = {a: predict(step, device="p40", algorithm=a).prediction.communication_seconds
            for a in ("ring", "halving-doubling")}
    budget = seconds / steps
    compute = step.phases["train_step"].flops / peak
    roofline = predict(step, device="p40").prediction.compute_seconds
    return (f"{sig(per_image / 1e9)} GFLOP per image per train step, {sig(total / 1e18)} EFLOP for "
            f"{JIA_EPOCHS} epochs: {JIA_MINUTES[0]:g} minutes on {count(small)} P40s is {sig(total / seconds / small / 1e12, 3)} "
            f"TFLOP/s per GPU sustained, an MFU of {pct(mfu)} of the P40's float32 peak with every all-reduce "
            f"hidden. Each of the {count(steps)} steps ({count(seed['global_batch'])} images) has {ms(budget)} ms; "
            f"its FLOP at peak take {ms(compute)} ms"
            + (f" and its bytes (XLA's count for the CPU program) at the P40's memory bandwidth {ms(roofline)} ms"
               if roofline > compute else "")
            + f", the gradient all-reduce {ms(comm['halving-doubling'])} ms "
            f"with halving-doubling over InfiniBand EDR, {ms(comm['ring'])} ms as flat-ring all-reduces of each "
            "buffer. Accuracy is outside a cost analysis."), \
        (f"depends on an MFU of {pct(mfu)} or more and a logarithmic-latency all-reduce"
         + (" (flat rings alone exceed the step)" if comm["ring"] > budget else ""))


@collected
def gpt3_estimate(data: StudyData) -> Any:
    """Brown et al.'s GPT-3 training run (300 billion tokens, Adam) estimated
    on one device: its total FLOP."""
    from xla_cost.runs.scaling import estimate

    if not data.plan.gpt3_model:
        return None
    return estimate(data.plan.gpt3_model, tokens=GPT3_TRAINING_TOKENS, optimizer="adam", store=data.store)


def _c_gpt3_compute(data: StudyData) -> tuple[str, str]:
    result = gpt3_estimate(data) if data.plan.gpt3_model else None
    if result is None:
        return _NOT_ANALYSED
    six_n = 6 * result.tokens * PUBLISHED_PARAMETERS.get(data.plan.gpt3_model, (0, ""))[0]
    quotient = result.total_flops / GPT3_TOTAL_FLOPS
    return (f"{sig(result.flops_per_sample / 1e12)} TFLOP per {count(round(result.tokens / result.samples))}-token "
            f"sequence (forward + backward + Adam update, loop-corrected), {sig(result.total_flops / 1e23)}e23 FLOP "
            f"for {sig(result.tokens / 1e9, 3)} billion tokens: {ratio(quotient, 3)}× the table's {sig(GPT3_TOTAL_FLOPS / 1e23, 3)}e23. "
            f"6N alone gives {sig(six_n / 1e23)}e23; the rest is the attention's score and value products "
            "(which 6N leaves out) and the update."), _confirmed(abs(quotient - 1) <= TOLERANCE)


CLAIMS: tuple[Claim, ...] = (
    Claim("001, 002", "The first layer has a backward/forward FLOP ratio of 1:1 (it needs no input gradient).",
          "backward-forward-ratio", _c_first_layer),
    Claim("001", "All other layers have a ratio of 2:1.", "backward-forward-ratio", _c_other_layers),
    Claim("001", "The ratio lies between 1:1 and 3:1, the weight update counted in the backward pass.",
          "backward-forward-ratio", _c_between_1_and_3),
    Claim("001", "Deep networks with convolutions and large batches are close to 2:1.", "backward-forward-ratio",
          _c_classic),
    Claim("001", "The theoretical maximum of 3:1 is observed in practice (OneNet, small batch).",
          "backward-forward-ratio", _c_three),
    Claim("001", "LinearNet converges to 1:1 as the batch grows (its weights are in the first layer).",
          "backward-forward-ratio", _c_converges("linear_net", 1.0)),
    Claim("001", "OneNet converges to 2:1 as the batch grows (its weights are after the first layer).",
          "backward-forward-ratio", _c_converges("one_net", 2.0)),
    Claim("001", "For the CNN the weight update is negligible: no change with the batch size.",
          "backward-forward-ratio", _c_cnn_update),
    Claim("001", "The update's FLOP stay the same at every batch size; the passes' FLOP scale with it.",
          "backward-forward-ratio", _c_update_constant),
    Claim("001", "A linear layer's pass costs 2× its parameters in FLOP (per example).", "backward-forward-ratio",
          _c_linear_flops),
    Claim("001", "ReLUs and the loss contribute a negligible amount of FLOP compared to the layers.",
          "backward-forward-ratio", _c_relu_loss),
    Claim("001", "Depth: the ratio starts significantly below 2:1 with 0 intermediate layers and converges to 2:1.",
          "backward-forward-ratio", _c_depth),
    Claim("001", "ResNets of several depths and batch sizes are close to 2:1 (the seed saw divergence it blames on "
          "its profiler).", "backward-forward-ratio", _c_resnets),
    Claim("001", f"SGD costs {SEED_SGD_FLOPS_PER_PARAMETER} FLOP per parameter (w += a·dw).", "optimizers", _c_sgd),
    Claim("001", f"Adam costs ~{SEED_ADAM_FLOPS_PER_PARAMETER} FLOP per parameter (3 + 4 + 3 + 3 + 5).", "optimizers",
          _c_adam),
    Claim("001", "Other optimizers can push the ratio above 3:1 in niche settings.", "optimizers", _c_beyond_three),
    Claim("001", "The 2:1 of the classic setting holds with momentum or Adam too.", "optimizers", _c_adam_classic),
    Claim("000", "Forward 23%, backward 74%, optimizer 3% of step time (ResNet-50 and BERT on a V100).",
          "step-time", _c_ddp_shares),
    Claim("000", "The backward pass takes about 3× as long as the forward pass.", "step-time", _c_three_times),
    Claim("000", "The optimization step is relatively fast.", "step-time", _c_update_fast),
    Claim("003", "Backpropagation is often the most time-consuming part of training.", "step-time",
          _c_backprop_slowest),
    Claim("002", "The backward pass costs about 2× the forward pass (automatic differentiation).", "zoo",
          _c_autodiff_two),
    Claim("002", "Kaplan et al.: training costs 6N FLOP per token (forward 2N, backward 4N).", "zoo", _c_kaplan),
    Claim("003", "GPUs run backpropagation's matrix operations many times faster than CPUs.", "step-time",
          _c_gpu_faster),
    Claim("004", "Doubling the GPUs gave a 1.3× speed-up (communication overhead).", "scaling", _c_two_gpus),
    Claim("004", "16-bit (mixed-precision) arithmetic gets more calculations per second.", "step-time",
          _c_half_precision),
    Claim("004", "Bigger batches save processing time.", "backward-forward-ratio", _c_bigger_batches),
    Claim("004", "ResNet-50 trained on ImageNet in 8.7 minutes on 1,024 GPUs, to 76.2% accuracy.", "scaling",
          _c_imagenet),
    Claim("Brown et al. 2020", "GPT-3 175B's training took 3.14e23 FLOP (Table D.1; 300 billion tokens).",
          "zoo", _c_gpt3_compute),
)
"""Every quantitative claim of seeds 000–004, in seed order within each topic."""

VERDICTS: tuple[str, ...] = ("confirmed", "refuted", "depends", "not testable here", "not tested")
"""The kinds of verdict, by the word a verdict starts with (`verdict_kind`)."""

VERDICT_LABELS = {"depends": "depends on …"}
VERDICT_LABELS.update({k: k for k in VERDICTS if k != "depends"})


def verdict_kind(verdict: str) -> str:
    return next((k for k in VERDICTS if verdict.startswith(k)), "not tested")


def claim_lines(data: StudyData, claims: Iterable[Claim]) -> list[str]:
    """One markdown line per claim: the claim, what was measured, the verdict."""
    lines = []
    for claim in claims:
        measured, verdict = claim.check(data)
        lines.append(f"- **{claim.text}** {measured} — *{verdict}*")
    return lines
