"""The seeds' quantitative claims, each with the rule and the check that judge it: `CLAIMS`.

A `Claim` names its seeds, its text, the page that shows the measurement, its
rule (how the verdict is reached, in words, printed beside the claim before
any figure) and a check: a function of `StudyData` that returns what was
measured and the verdict by that rule (`VERDICTS`; the tolerances of
`xla_cost.study.plan`). Every rule can give each of its verdicts
(tests/study/test_claims.py feeds each check made-up data for each);
thresholds come from the claim's wording ("about", "~", "close to":
`APPROX_TOLERANCE`; an exact figure: `TOLERANCE`; "many times": an order of
magnitude), never from the data.

Timings are judged per device, never CPU and GPU together; a claim about GPUs
on GPU timings, about the V100 on a V100's alone (others are context); the
unexplained measurements (`xla_cost.study.views.TIMING_ANOMALIES`) are never
evidence. The checks read the data through `xla_cost.study.views`; the pages
list their claims with `claim_lines`, the claims page lists them all.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from xla_cost.timemodel.devices import device as registry_device
from xla_cost.present.units import count, join_words, pct, pct_sig, ratio, sig, value_range
from xla_cost.study.analytic import kaplan_per_token
from xla_cost.study.data import StudyData, collected
from xla_cost.study.plan import APPROX_TOLERANCE, TOLERANCE
from xla_cost.study.priced_claims import SEED000_BATCH, gpt3_estimate, seed000_predicted, seed004_prices
from xla_cost.study.published import (
    DDP_MODELS, DDP_SHARES, GPT3_TOTAL_FLOPS, GPT3_TRAINING_TOKENS, IMAGENET_TRAIN_IMAGES, JIA_EPOCHS, JIA_MINUTES,
    PUBLISHED_PARAMETERS, SEED004_SPEEDUP, SEED_ADAM_FLOPS_PER_PARAMETER, SEED_SGD_FLOPS_PER_PARAMETER,
)
from xla_cost.study.views import (
    FIRST_LAYER, NET_NAMES, REMAINDER, SHARE_PHASES, SIZE_ONE_INPUT, analysed, anomaly, architecture_rows, by_device,
    by_model, case_label, deepest_run, depth_runs, first_and_other_layers, gbs, hardware, is_gpu, largest_phase, ms,
    net_name, optimizer_runs, phase_shares, r2, records, seed_layer_rows, seed_runs, shares_text, timing_all, twin,
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
      rule: how the verdict is reached: the figure, the threshold and where it
        comes from, the data it is judged on, and what gives each verdict.
      check: `StudyData` -> (what the project measured, the verdict by ``rule``:
        ``confirmed``, ``refuted``, ``depends on ...``, ``not testable here
        ...``).
    """

    seeds: str
    text: str
    page: str
    rule: str
    check: Callable[[StudyData], tuple[str, str]]


def _confirmed(ok: bool) -> str:
    return "confirmed" if ok else "refuted"


def _tally(holds: Iterable[bool], otherwise: str) -> str:
    """``confirmed`` if the test holds in every case, ``refuted`` in none, else ``otherwise``."""
    holds = list(holds)
    return "confirmed" if all(holds) else "refuted" if not any(holds) else otherwise


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
    if one:
        text += f" At batch 1 (shown apart) dense layers read {value_range(one)}" + (
            "" if all(within(v, 2.0, TOLERANCE) for v in one) else ": a weight gradient over one example is an outer "
            "product, which XLA counts as M·N multiplies, not 2·M·N") + "."
    return text, _confirmed(all(within(v, 2.0, TOLERANCE) for v in values))


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
            f"({join_words([f'{n} {ratio(v)}' for n, v in rows])})."), \
        _confirmed(all(within(v, 2.0, APPROX_TOLERANCE) for v in values))


def _c_three(data: StudyData) -> tuple[str, str]:
    rows = seed_runs(data).get("one_net")
    if not rows:
        return _NOT_ANALYSED
    peak = max(rows, key=lambda r: r["backward_with_update_to_forward"])
    text = (f"OneNet's largest (backward + update)/forward: {ratio(peak['backward_with_update_to_forward'])}, at batch "
            f"{peak['batch_size']}, where backward/forward is {ratio(peak['backward_to_forward'])}.")
    if within(peak["backward_with_update_to_forward"], 3.0, TOLERANCE):
        return text, "confirmed"
    double = next((r for r in rows if r["batch_size"] == 2 * peak["batch_size"]), None)
    if double is None:
        return text, "refuted"
    # seed 001's convention is linear in the batch: batch b's passes are half of batch 2b's, where every
    # contraction has length 2 or more and XLA counts 2 FLOP per multiply-add
    seed = (double["backward_flops"] + 2 * double["update_flops"]) / double["forward_flops"]
    text += (f" XLA counts a dense weight gradient over one example as M·N multiplies, where seed 001 counts 2·M·N; "
             f"with seed 001's convention (the passes of batch {peak['batch_size']} as half of batch "
             f"{double['batch_size']}'s) the ratio is {ratio(seed)}.")
    if within(seed, 3.0, TOLERANCE):
        return text, ("depends on the counting convention: 3:1 with 2 FLOP per multiply-add in a length-1 "
                      "contraction (seed 001's), below it with XLA's")
    return text, "refuted"


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
    return text, _confirmed(spread < TOLERANCE and share < TOLERANCE)


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
        _confirmed(all(within(v, 2.0, APPROX_TOLERANCE) for v in values))


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
            f"analysis): {join_words(parts)}."), _confirmed(all(within(v, 2.0, APPROX_TOLERANCE) for v in values))


_Judge = Callable[[list[Mapping[str, Any]]], tuple[str, str]]


def _per_gpu(data: StudyData, judge: _Judge, context: str = "") -> tuple[str, str]:
    """A time claim judged on each GPU's timings apart (never with a CPU's), the
    cases of `xla_cost.study.views.TIMING_ANOMALIES` left out; one verdict when
    the GPUs agree, ``depends on the GPU`` when they do not."""
    gpus = {d: cases for d, cases in by_device(timing_all(data)).items() if is_gpu(d)}
    if not gpus:
        return (context + "No GPU timing is committed; what would test it: `python benchmarks/time_zoo.py` on a "
                "GPU, its CSV under `reports/data/`."), "not testable here (no GPU timing)"
    texts, verdicts = [context.strip()] if context else [], {}
    for device, cases in gpus.items():
        left = sorted({f"{c['model']} {c['dtype']}" for c in cases if anomaly(c)})
        text, verdicts[device] = judge([c for c in cases if not anomaly(c)])
        texts.append(f"{device}: {text}" + (f" Left out as unexplained (step-time.md): {join_words(left)}." if left
                                            else ""))
    kinds = set(verdicts.values())
    verdict = (f"{kinds.pop()} (on {join_words(list(verdicts))})" if len(kinds) == 1
               else "depends on the GPU: " + "; ".join(f"{v} on {d}" for d, v in verdicts.items()))
    return " ".join(texts), verdict


def _v100_only(data: StudyData, judge: _Judge) -> tuple[str, str]:
    """A claim about the V100 judged on V100 timings alone; other GPUs' figures
    are shown as context, without a verdict."""
    cases = [c for c in timing_all(data) if not anomaly(c)]
    v100 = [c for c in cases if (hardware(c["device"]) or "").startswith("v100")]
    if v100:
        text, verdict = judge(v100)
        return text, f"{verdict} (on {join_words(sorted({c['device'] for c in v100}))})"
    shown = "".join(f"Context, not evidence: on {d}: {judge(cs)[0]} " for d, cs in by_device(cases).items() if is_gpu(d))
    return (shown + "No V100 timing is committed; what would test it: `python benchmarks/time_zoo.py` on a V100, "
            "its CSV under `reports/data/`."), "not testable here (needs a V100)"


def _ddp(cases: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Seed 000's cases: ResNet-50 and BERT in float32, with their shares."""
    return [c for c in cases if c["model"] in DDP_MODELS and c["dtype"] == "float32" and phase_shares(c)]


def _c_ddp_shares(data: StudyData) -> tuple[str, str]:
    def judge(cases: list[Mapping[str, Any]]) -> tuple[str, str]:
        chosen = _ddp(cases)
        far = [c for c in chosen if any(abs(phase_shares(c)[p] - DDP_SHARES[p]) > TOLERANCE for p in SHARE_PHASES)]
        return ("forward / backward / update " + "; ".join(f"{case_label(c)} {shares_text(c)}" for c in chosen)
                + "."), _confirmed(not far) if chosen else "not testable here (no case)"

    text, verdict = _v100_only(data, judge)
    predicted = seed000_predicted(data)
    if predicted:
        text += (" Predicted on a V100 (a prediction, not a measurement: each phase's program compiled for the V100 "
                 f"and priced kernel by kernel, float32, SGD, {SEED000_BATCH} per GPU): " + "; ".join(
                     f"{model} {' / '.join(pct(shares[p]) for p in SHARE_PHASES)}" for model, shares in predicted.items())
                 + f", against the published {' / '.join(pct(DDP_SHARES[p]) for p in SHARE_PHASES)}.")
    return text, verdict


def _c_three_times(data: StudyData) -> tuple[str, str]:
    def judge(cases: list[Mapping[str, Any]]) -> tuple[str, str]:
        chosen = [c for c in _ddp(cases) if c["time_ratio"] is not None]
        ok = all(within(c["time_ratio"], 3.0, APPROX_TOLERANCE) for c in chosen)
        return ("backward/forward time " + "; ".join(f"{case_label(c)} {r2(c['time_ratio'])}" for c in chosen)
                + "."), _confirmed(ok) if chosen else "not testable here (no case)"

    return _v100_only(data, judge)


def _c_update_fast(data: StudyData) -> tuple[str, str]:
    def smallest(case: Mapping[str, Any]) -> bool:
        shares = phase_shares(case)
        return shares["update"] < min(shares["forward"], shares["backward"])

    def judge(cases: list[Mapping[str, Any]]) -> tuple[str, str]:
        chosen = [c for c in cases if c["model"] in DDP_MODELS and phase_shares(c)]
        if not chosen:
            return "No ResNet-50 or BERT timing.", "not testable here (no case)"
        groups = {o: [c for c in chosen if c["optimizer"] == o] for o in dict.fromkeys(c["optimizer"] for c in chosen)}
        slow = [c for c in chosen if not smallest(c)]
        text = ("The update is the smallest phase " + "; ".join(
            f"with {o} in {sum(smallest(c) for c in cs)} of {len(cs)} cases" for o, cs in groups.items())
            + (f"; not in {join_words([f'{case_label(c)} ({shares_text(c)})' for c in slow])}" if slow else "") + ".")
        clean = [o for o, cs in groups.items() if all(smallest(c) for c in cs)]
        if not slow:
            return text, "confirmed"
        if clean:
            return text, f"depends on the optimizer: the smallest phase with {join_words(clean)}, not always otherwise"
        return text, "refuted"

    return _per_gpu(data, judge)


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
    return text, _confirmed(all(within(v, 2.0, APPROX_TOLERANCE) for v in values))


def _c_kaplan(data: StudyData) -> tuple[str, str]:
    from xla_cost import zoo

    parts, close, far = [], [], []
    for r in records(analysed(data.zoo.runs)):
        spec = zoo.get_spec(r["model"])
        # Kaplan's N (multi-head attention, a two-matrix MLP) is not the parameters of a
        # family that declares its own closed form (grouped-query attention, gated MLPs, experts)
        if spec.input_dtype == "float" or "d_model" not in spec.defaults or spec.forward_flops is not None:
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
    return text, _tally([True] * len(close) + [False] * len(far),
                        f"depends on model size: within {pct(TOLERANCE, 0)} for {join_words(close)}")


def _c_backprop_slowest(data: StudyData) -> tuple[str, str]:
    def judge(cases: list[Mapping[str, Any]]) -> tuple[str, str]:
        chosen = [c for c in cases if phase_shares(c)]
        if not chosen:
            return "No timing with phase shares.", "not testable here (no case)"
        others = [c for c in chosen if largest_phase(c) != "backward"]
        largest = len(chosen) - len(others)
        return (f"The backward pass is the largest phase in {largest} of {len(chosen)} cases"
                + (f"; not in {join_words([f'{case_label(c)} ({largest_phase(c)})' for c in others])}" if others else "")
                + "."), _confirmed(largest > len(chosen) / 2)

    return _per_gpu(data, judge)


MANY_TIMES = 10.0
"""Claim 24's "many times faster", read as an order of magnitude."""


def _c_gpu_faster(data: StudyData) -> tuple[str, str]:
    cases = timing_all(data)
    cpu = [c for c in cases if hardware(c["device"]) == "cpu" and c["dtype"] == "float32"]

    def grad_s(case: Mapping[str, Any]) -> float | None:
        return case["phases"].get("grad", {}).get("median_s")

    def judge(gpu: list[Mapping[str, Any]]) -> tuple[str, str]:
        pairs = []
        for case in gpu:
            same = next((c for c in cpu if all(c[k] == case[k] for k in ("model", "config", "batch", "optimizer"))),
                        None)
            if case["dtype"] == "float32" and same and grad_s(same) and grad_s(case):
                pairs.append((case, grad_s(same) / grad_s(case)))
        if not pairs:
            return ("No case timed at the same shapes on this GPU and the CPU (float32).",
                    "not testable here (no same-shape pair)")
        text = ("`grad` (forward and backward) time on the CPU ÷ on the GPU, same model, batch and shapes, float32: "
                + "; ".join(f"{case_label(c)} {sig(v, 3)}×" for c, v in pairs) + ".")
        return text, _tally((v >= MANY_TIMES for _, v in pairs), "depends on the model")

    if not cpu:
        return "No CPU timing in float32 to compare with.", "not testable here (no CPU timing)"
    return _per_gpu(data, judge)


_ALGORITHM_NAMES = {"ring": "flat-ring", "halving-doubling": "halving-doubling"}


def _c_two_gpus(data: StudyData) -> tuple[str, str]:
    prices = seed004_prices(data)
    if prices is None:
        return _NOT_ANALYSED
    small, large = prices["devices"]
    priced = {f"1 → 2 GPUs ({prices['batch']} images each) over PCIe 3.0": prices["pcie"]}
    priced.update({f"{count(small)} → {count(large)} GPUs at a {count(prices['global_batch'])} batch with "
                   f"{_ALGORITHM_NAMES.get(a, a)} all-reduces": v for a, v in prices["strong"].items()})
    text = (f"Sharded {prices['model']} steps priced on Tesla P40s (bounds: compute at peak, no communication "
            "hidden): " + "; ".join(f"{k} {ratio(v, 3)}×" for k, v in priced.items())
            + (f". Over one link, 1 → 2 GPUs give 1.3× at {gbs(prices['need'])} or less" if prices["need"] else "")
            + (f". Predicted (a prediction, not a bound: every kernel of the P40's program priced, gradients in "
               f"buckets behind the backward pass, Jia et al.'s servers; the validation page's steps): "
               f"{count(small)} → {count(large)} GPUs give {ratio(prices['predicted'], 3)}×, against Jia et al.'s "
               "measured 8.7 / 6.6 = 1.32×" if prices["predicted"] is not None else "") + ".")
    values = list(priced.values())
    if all(within(v, SEED004_SPEEDUP, TOLERANCE) for v in values):
        return text, "confirmed"
    above = [v > SEED004_SPEEDUP * (1 + TOLERANCE) for v in values]
    below = [v < SEED004_SPEEDUP * (1 - TOLERANCE) for v in values]
    return text, ("refuted" if all(above) or all(below)
                  else "depends on the interconnect and the all-reduce algorithm (scaling.md gives the condition)")


def _c_half_precision(data: StudyData) -> tuple[str, str]:
    def judge(cases: list[Mapping[str, Any]]) -> tuple[str, str]:
        pairs = []
        for case in cases:
            other = twin(case, cases, "float32") if case["dtype"] == "bfloat16" else None
            a = case["phases"].get("train_step", {}).get("median_s")
            b = other["phases"].get("train_step", {}).get("median_s") if other else None
            if a and b:
                pairs.append((case, a / b))
        if not pairs:
            return "No bfloat16 case with its float32 twin.", "not testable here (no pair)"
        faster = [(c["model"], v < 1 - TOLERANCE) for c, v in pairs]
        models = list(dict.fromkeys(m for m, _ in faster))
        yes = [m for m in models if all(ok for n, ok in faster if n == m)]
        return ("bfloat16 ÷ float32 train-step time: " + "; ".join(
            f"{case_label(c, dtype=False)} {r2(v)}" for c, v in pairs) + "."), _tally(
            (ok for _, ok in faster), f"depends on the model: faster in every case of {join_words(yes) or 'none'}, "
            f"not in every case of {join_words([m for m in models if m not in yes])}")

    return _per_gpu(data, judge)


def _c_bigger_batches(data: StudyData) -> tuple[str, str]:
    def judge(cases: list[Mapping[str, Any]]) -> tuple[str, str]:
        series: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
        for case in cases:
            if case["phases"].get("train_step", {}).get("median_s"):
                series.setdefault((case["model"], case["config"], case["dtype"], case["optimizer"]), []).append(case)
        series = {k: sorted(v, key=lambda c: c["batch"]) for k, v in series.items() if len({c["batch"] for c in v}) > 1}
        if not series:
            return "No model timed at two batch sizes.", "not testable here (no batch series)"
        parts, saves = [], {}
        for key, chosen in series.items():
            first, last = chosen[0], chosen[-1]
            per = [c["phases"]["train_step"]["median_s"] / c["batch"] for c in (first, last)]
            saves[key] = per[1] / per[0] < 1 - TOLERANCE
            parts.append(f"{key[0]} {key[2]} {key[3]} {ms(per[0])} ms per example at batch {first['batch']}, "
                         f"{ms(per[1])} at {last['batch']} ({per[1] / per[0] - 1:+.0%})")
        return "Train-step time per example: " + "; ".join(parts) + ".", _tally(
            saves.values(), f"depends on the model: saves for {join_words(sorted({k[0] for k, v in saves.items() if v}))}")

    return _per_gpu(data, judge, "Counted FLOP per example against the batch (only the update is shared by it): "
                                 "[backward-forward-ratio](backward-forward-ratio.md). ")


def _c_imagenet(data: StudyData) -> tuple[str, str]:
    prices = seed004_prices(data)
    if prices is None or prices["compute"] is None:
        return _NOT_ANALYSED
    small, _ = prices["devices"]
    total = prices["per_image"] * IMAGENET_TRAIN_IMAGES * JIA_EPOCHS
    seconds = JIA_MINUTES[0] * 60
    steps = math.ceil(IMAGENET_TRAIN_IMAGES * JIA_EPOCHS / prices["global_batch"])
    budget = seconds / steps
    mfu = total / seconds / small / registry_device("p40", has="peak").peak.for_dtype("float32")
    roofline = max(prices["compute"], prices["memory"])
    fits = {a: roofline + c <= budget for a, c in prices["comm"].items()}
    text = (f"{sig(prices['per_image'] / 1e9)} GFLOP per image per train step, {sig(total / 1e18)} EFLOP for "
            f"{JIA_EPOCHS} epochs: {JIA_MINUTES[0]:g} minutes on {count(small)} P40s is "
            f"{sig(total / seconds / small / 1e12, 3)} TFLOP/s per GPU sustained, an MFU of {pct(mfu)} of the P40's "
            f"float32 peak. Each of the {count(steps)} steps ({count(prices['global_batch'])} images) may take "
            f"{ms(budget)} ms; its roofline is {ms(roofline)} ms (FLOP at peak {ms(prices['compute'])} ms, bytes at "
            f"the P40's bandwidth {ms(prices['memory'])} ms, the P40 compiler's program), its gradient all-reduce "
            + join_words([f"{ms(c)} ms {_ALGORITHM_NAMES.get(a, a)}" for a, c in prices["comm"].items()])
            + " (InfiniBand EDR, not overlapped). Accuracy is outside a cost analysis.")
    if roofline > budget:
        return text, "refuted"
    if all(fits.values()):
        return text, "confirmed"
    return text, ("depends on the all-reduce algorithm: the step fits with "
                  + join_words([_ALGORITHM_NAMES.get(a, a) for a, ok in fits.items() if ok] or ["none"])
                  + " all-reduces, not with " + join_words([_ALGORITHM_NAMES.get(a, a) for a, ok in fits.items()
                                                             if not ok]))


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


_T, _A = pct(TOLERANCE, 0), pct(APPROX_TOLERANCE, 0)
_ABOUT = f"\"about\", \"~\" and \"close to\" read as within {_A}"
_NEGLIGIBLE = f"\"negligible\" read as under {_T}, the tolerance of an exact figure"
_GPU = ("judged on each GPU's timings apart (the CPU's are not evidence for a claim about GPU training; "
        "unexplained measurements left out)")
_V100 = "judged on V100 timings only; other GPUs' figures are shown as context, without a verdict"


def _converges_rule(target: float) -> str:
    return (f"Confirmed if at the largest analysed batch both backward/forward and (backward + update)/forward FLOP "
            f"are within {_T} of {target:g}; refuted otherwise.")


CLAIMS: tuple[Claim, ...] = (
    Claim("001, 002", "The first layer has a backward/forward FLOP ratio of 1:1 (it needs no input gradient).",
          "backward-forward-ratio",
          f"Confirmed if every first layer's backward/forward FLOP (seed nets at the per-layer batch, DeeperConvNet at "
          f"its deepest) is within {_T} of 1; refuted otherwise. A first layer with one input feature (OneNet's fc1) "
          "is shown apart: XLA counts its length-1 contraction as 1 FLOP per multiply-add.", _c_first_layer),
    Claim("001", "All other layers have a ratio of 2:1.", "backward-forward-ratio",
          f"Confirmed if every other parametrised layer's backward/forward FLOP at the per-layer batch is within {_T} "
          "of 2; refuted otherwise. Batch 1 is shown apart (XLA counts a one-example weight gradient as M·N).",
          _c_other_layers),
    Claim("001", "The ratio lies between 1:1 and 3:1, the weight update counted in the backward pass.",
          "backward-forward-ratio",
          f"Confirmed if every analysed (backward + update)/forward FLOP (SGD) lies in [1, 3], each end widened by "
          f"{_T}; refuted otherwise.", _c_between_1_and_3),
    Claim("001", "Deep networks with convolutions and large batches are close to 2:1.", "backward-forward-ratio",
          f"{_ABOUT}: confirmed if (backward + update)/forward FLOP of every ResNet at its largest analysed batch and "
          "of DeeperConvNet at its deepest is within it of 2; refuted otherwise.", _c_classic),
    Claim("001", "The theoretical maximum of 3:1 is observed in practice (OneNet, small batch).",
          "backward-forward-ratio",
          f"Confirmed if OneNet's largest (backward + update)/forward FLOP is within {_T} of 3 with XLA's counts; "
          "depends on the counting convention if it is only with seed 001's (2 FLOP per multiply-add in a length-1 "
          "contraction: batch b's passes as half of batch 2b's); refuted if with neither.", _c_three),
    Claim("001", "LinearNet converges to 1:1 as the batch grows (its weights are in the first layer).",
          "backward-forward-ratio", _converges_rule(1.0), _c_converges("linear_net", 1.0)),
    Claim("001", "OneNet converges to 2:1 as the batch grows (its weights are after the first layer).",
          "backward-forward-ratio", _converges_rule(2.0), _c_converges("one_net", 2.0)),
    Claim("001", "For the CNN the weight update is negligible: no change with the batch size.",
          "backward-forward-ratio",
          f"{_NEGLIGIBLE}: confirmed if ConvNet's (backward + update)/forward FLOP varies by less than it over the "
          "analysed batches and the update is less than it of the train step at each; refuted otherwise.",
          _c_cnn_update),
    Claim("001", "The update's FLOP stay the same at every batch size; the passes' FLOP scale with it.",
          "backward-forward-ratio",
          f"Confirmed if each seed net's update FLOP are identical at every batch and its forward FLOP grow with the "
          f"batch within {_T}; refuted otherwise.", _c_update_constant),
    Claim("001", "A linear layer's pass costs 2× its parameters in FLOP (per example).", "backward-forward-ratio",
          f"Confirmed if every dense layer's forward FLOP per example ÷ its parameters is within {_T} of 2; refuted "
          "otherwise. A single-input layer is shown apart (XLA's length-1 convention).", _c_linear_flops),
    Claim("001", "ReLUs and the loss contribute a negligible amount of FLOP compared to the layers.",
          "backward-forward-ratio",
          f"{_NEGLIGIBLE}: confirmed if the FLOP outside the parametrised layers are less than it of forward + "
          "backward for every seed net at the per-layer batch; refuted otherwise.", _c_relu_loss),
    Claim("001", "Depth: the ratio starts significantly below 2:1 with 0 intermediate layers and converges to 2:1.",
          "backward-forward-ratio",
          f"Confirmed if DeeperConvNet's backward/forward FLOP is more than {_T} below 2 at the smallest depth "
          f"(\"significantly\") and within {_T} of 2 at the largest; refuted otherwise.", _c_depth),
    Claim("001", "ResNets of several depths and batch sizes are close to 2:1 (the seed saw divergence it blames on "
          "its profiler).", "backward-forward-ratio",
          f"{_ABOUT}: confirmed if every ResNet's backward/forward FLOP at every analysed batch is within it of 2; "
          "refuted otherwise.", _c_resnets),
    Claim("001", f"SGD costs {SEED_SGD_FLOPS_PER_PARAMETER} FLOP per parameter (w += a·dw).", "optimizers",
          f"Confirmed if SGD's update FLOP per parameter is within {_T} of {SEED_SGD_FLOPS_PER_PARAMETER} on every "
          "analysed model; refuted otherwise.", _c_sgd),
    Claim("001", f"Adam costs ~{SEED_ADAM_FLOPS_PER_PARAMETER} FLOP per parameter (3 + 4 + 3 + 3 + 5).", "optimizers",
          f"{_ABOUT}: confirmed if Adam's update FLOP per parameter is within it of {SEED_ADAM_FLOPS_PER_PARAMETER} "
          "on every analysed model (transcendentals shown apart); refuted otherwise.", _c_adam),
    Claim("001", "Other optimizers can push the ratio above 3:1 in niche settings.", "optimizers",
          "Confirmed if some optimizer's (backward + update)/forward FLOP at batch 1 exceeds 3 on some analysed "
          "model; refuted if none does.", _c_beyond_three),
    Claim("001", "The 2:1 of the classic setting holds with momentum or Adam too.", "optimizers",
          f"{_ABOUT} (claim 4's reading of the classic setting): confirmed if (backward + update)/forward FLOP of "
          "each ResNet at its largest batch with momentum's and with Adam's update is within it of 2; refuted "
          "otherwise.", _c_adam_classic),
    Claim("000", "Forward 23%, backward 74%, optimizer 3% of step time (ResNet-50 and BERT on a V100).",
          "step-time",
          f"{_V100[0].upper()}{_V100[1:]}. Confirmed if every float32 ResNet-50 and BERT case's forward, backward and update shares are "
          f"each within {round(100 * TOLERANCE)} percentage points of 23 / 74 / 3 (figures read off a plot); "
          "refuted otherwise.", _c_ddp_shares),
    Claim("000", "The backward pass takes about 3× as long as the forward pass.", "step-time",
          f"The seed reads it off the V100 figure of claim 18, so {_V100}. {_ABOUT}: confirmed if every float32 "
          "ResNet-50 and BERT case's backward/forward time is within it of 3; refuted otherwise.", _c_three_times),
    Claim("000", "The optimization step is relatively fast.", "step-time",
          f"Read as: the update is the smallest of the three phases, for the seed's models (ResNet-50 and BERT, every "
          f"dtype, batch and optimizer timed), {_GPU}. Confirmed if it is in every case; depends on the optimizer if it "
          "is in every case of some optimizer only; refuted otherwise.", _c_update_fast),
    Claim("003", "Backpropagation is often the most time-consuming part of training.", "step-time",
          f"\"Often\" read as in more than half of the cases: the backward pass the largest phase, every model timed, "
          f"{_GPU}. Confirmed if it is in more than half; refuted otherwise.", _c_backprop_slowest),
    Claim("002", "The backward pass costs about 2× the forward pass (automatic differentiation).", "zoo",
          f"{_ABOUT}: confirmed if backward/forward FLOP of every zoo model other than seed 001's four nets (whose "
          "first layer, claim 1, dominates) is within it of 2 at batch 1; refuted otherwise.", _c_autodiff_two),
    Claim("002", "Kaplan et al.: training costs 6N FLOP per token (forward 2N, backward 4N).", "zoo",
          f"Confirmed if (forward + backward) FLOP per token ÷ 6N (N: non-embedding parameters) is within {_T} of 1 "
          "for every analysed transformer; depends on model size if for some only (named); refuted if for none.",
          _c_kaplan),
    Claim("003", "GPUs run backpropagation's matrix operations many times faster than CPUs.", "step-time",
          f"\"Many times\" read as {MANY_TIMES:g}× or more (an order of magnitude), on the same work: the `grad` "
          "time (forward and backward) of a case timed at the same model, batch and shapes in float32 on the CPU "
          "÷ on the GPU, each GPU apart. Confirmed if every such pair reaches it; refuted if none does; depends on "
          "the model otherwise. Cases at different shapes are context.", _c_gpu_faster),
    Claim("004", "Doubling the GPUs gave a 1.3× speed-up (communication overhead).", "scaling",
          f"Priced on the seed's Tesla P40s as bounds (1 → 2 GPUs over PCIe 3.0; Jia et al.'s 1,024 → 2,048 at a "
          f"65,536 batch with each all-reduce algorithm): confirmed if every priced doubling is within {_T} of 1.3×; "
          f"depends on the interconnect and the algorithm if 1.3× lies among them; refuted if all are more than "
          f"{_T} above it, or all below.", _c_two_gpus),
    Claim("004", "16-bit (mixed-precision) arithmetic gets more calculations per second.", "step-time",
          f"On the same work (the FLOP are the same): the bfloat16 train-step time ÷ the float32 one of each case, "
          f"{_GPU}; faster means below 1 by more than {_T}. Confirmed if faster in every case; refuted if in none; "
          "depends on the model otherwise (named).", _c_half_precision),
    Claim("004", "Bigger batches save processing time.", "step-time",
          f"The train-step time per example at a model's largest timed batch against its smallest (same dtype and "
          f"optimizer), {_GPU}; saving means lower by more than {_T}. Confirmed if every such series saves; refuted "
          "if none does; depends on the model otherwise.", _c_bigger_batches),
    Claim("004", "ResNet-50 trained on ImageNet in 8.7 minutes on 1,024 GPUs, to 76.2% accuracy.", "scaling",
          "Jia et al.'s run priced on 1,024 Tesla P40s (90 epochs, 65,536 images a step): the time a step may take "
          "(8.7 minutes ÷ steps) against its roofline (FLOP at the float32 peak, bytes at the bandwidth) plus its "
          "gradient all-reduce. Confirmed if both fit with every all-reduce algorithm priced; depends on the "
          "algorithm if with some only; refuted if the roofline alone does not fit. Accuracy is not tested.",
          _c_imagenet),
    Claim("Brown et al. 2020", "GPT-3 175B's training took 3.14e23 FLOP (Table D.1; 300 billion tokens).",
          "zoo",
          f"Confirmed if the loop-corrected total (forward + backward + Adam update over 300 billion tokens) is "
          f"within {_T} of 3.14e23; refuted otherwise.", _c_gpt3_compute),
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
        lines.append(f"- **{claim.text}** Rule: {claim.rule} Measured: {measured} — *{verdict}*")
    return lines
