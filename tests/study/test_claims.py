"""Every claim's rule can give each of its verdicts (issue 22, part 3).

Each check of `xla_cost.study.claims.CLAIMS` is fed made-up data (sweep rows
and timing CSV rows built here from named dimensions; no analysis runs): a
world in which the seeds are right, where every claim must be "confirmed",
and, claim by claim, the one change that must make it "refuted" (and
"depends on ..." or "not testable here" where its rule has them). Timings are
judged per device: a V100 claim on V100 rows only, a GPU claim never on CPU
rows, and the unexplained measurements are left out.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import pytest

from xla_cost import zoo
from xla_cost.choices import REMAINDER
from xla_cost.runs.sweeps import SweepResult
from xla_cost.study import claims
from xla_cost.study.analytic import kaplan_per_token
from xla_cost.study.plan import ReportPlan
from xla_cost.study.published import GPT3_TOTAL_FLOPS, GPT3_TRAINING_TOKENS

H100 = "NVIDIA H100 80GB HBM3"  # the registry's h100
V100 = "Tesla V100-SXM2-16GB"  # the registry's v100
CPU = "cpu"

PLAN = ReportPlan(
    seed_nets=("linear_net", "one_net", "conv_net"), batch_sizes=(1, 2, 64, 4096), layer_batch=64,
    depths=(0, 100), depth_batch=8, resnets=("resnet50",), resnet_batches=(1, 64), transformers=("gpt2-small",),
    optimizer_models=("one_net", "resnet50"), optimizers=("sgd", "momentum", "adam"),
    zoo=("one_net", "resnet50", "gpt2-small", "gpt3-175b"), seed004_model="resnet50", gpt3_model="gpt3-175b",
    seed000_models=(),  # the V100 compiles of the predicted split are the full report's (tests/study/test_seed000.py)
)

# Seed 001's world: a multiply-add is 2 FLOP everywhere; a first layer's backward is its
# forward (weight gradient only), every other layer's backward twice its forward (weight and
# input gradients); ReLUs and the loss (the remainder) are one FLOP per activation each way.
# Layers as (path, parameters, forward FLOP per example).
IMAGE = 224 * 224 * 3
NETS: dict[str, list[tuple[str, int, int]]] = {
    "linear_net": [("fc1", IMAGE * 4096 + 4096, 2 * IMAGE * 4096), ("fc2", 4096 * 128 + 128, 2 * 4096 * 128),
                   ("fc3", 128 * 10 + 10, 2 * 128 * 10), (REMAINDER, 0, 4096 + 128 + 10)],
    "one_net": [("fc1", 4096 + 4096, 2 * 4096), ("fc2", 4096 * 128 + 128, 2 * 4096 * 128),
                ("fc3", 128 * 10 + 10, 2 * 128 * 10), (REMAINDER, 0, 4096 + 128 + 10)],
    # conv1 3 -> 32 channels, 7x7, on a 112x112 output; conv2 32 -> 64, 7x7, on 28x28; fc1 64 -> 10
    "conv_net": [("conv1", 3 * 32 * 49 + 32, 2 * 112 * 112 * 3 * 32 * 49),
                 ("conv2", 32 * 64 * 49 + 64, 2 * 28 * 28 * 32 * 64 * 49), ("fc1", 64 * 10 + 10, 2 * 64 * 10),
                 (REMAINDER, 0, 112 * 112 * 32)],
}
FIRST = {"linear_net": "fc1", "one_net": "fc1", "conv_net": "conv1", "deeper_conv_net": "first_layer"}
SGD, MOMENTUM, ADAM = 2, 4, 18  # update FLOP per parameter (seed 001's appendix B; momentum: a multiply-add more)
RESNET50 = (25_557_032, 8_200_000_000)  # parameters, forward FLOP per image
GPT3_SEQUENCES = GPT3_TRAINING_TOKENS / 2048


def _backward(path: str, model: str, forward: float) -> float:
    return forward if path in (FIRST.get(model), REMAINDER) else 2 * forward


def _run(model: str, batch: int, forward: float, backward: float, parameters: int, per_parameter: int = SGD,
         **extra: Any) -> dict[str, Any]:
    forward, backward, update = float(forward), float(backward), float(per_parameter * parameters)
    return {"model": model, "batch_size": batch, "optimizer": "sgd", "dtype": "float32", "status": "ok",
            "error": None, "parameters": parameters, "forward_flops": forward, "backward_flops": backward,
            "update_flops": update, "train_step_flops": forward + backward + update,
            "update_transcendentals": parameters if per_parameter == ADAM else 0,
            "backward_to_forward": backward / forward, "backward_with_update_to_forward": (backward + update) / forward,
            **extra}


def _net_rows(model: str, layers: Sequence[tuple[str, int, int]], batch: int, **extra: Any) -> tuple[dict, list]:
    layer_rows = [{"model": model, "batch_size": batch, "path": path, "parameters": params,
                   "forward_flops": float(batch * fwd), "backward_flops": float(batch * _backward(path, model, fwd)),
                   "backward_to_forward": _backward(path, model, fwd) / fwd, **extra}
                  for path, params, fwd in layers]
    run = _run(model, batch, sum(r["forward_flops"] for r in layer_rows),
               sum(r["backward_flops"] for r in layer_rows), sum(p for _, p, _ in layers), **extra)
    return run, layer_rows


def _sweep(runs: list[dict], layers: list[dict] | None = None) -> SweepResult:
    return SweepResult(pd.DataFrame(runs), pd.DataFrame(layers or [], columns=None if layers else ["model"]))


def _deeper(depth: int) -> list[tuple[str, int, int]]:
    # first_layer 3 -> 32 channels on 112x112; conv_layer 32 -> 32, 3x3 on 28x28, applied depth times
    first = ("first_layer", 3 * 32 * 49 + 32, 2 * 112 * 112 * 3 * 32 * 49)
    conv = ("conv_layer", 32 * 32 * 9 + 32, depth * 2 * 28 * 28 * 32 * 32 * 9)
    head = ("fc1", 64 * 10 + 10, 2 * 64 * 10)
    return [first, *([conv] if depth else []), head, (REMAINDER, 0, 112 * 112 * 32)]


def _kaplan_run(model: str, quotient: float = 1.0) -> dict[str, Any]:
    spec = zoo.get_spec(model)
    _, n = kaplan_per_token(spec.defaults)
    tokens = spec.defaults["seq_len"]  # batch 1
    # Kaplan et al.: forward 2N, backward 4N FLOP per token
    return _run(model, 1, quotient * 2 * n * tokens, quotient * 4 * n * tokens, 1_000_000)


def seed_world() -> FakeData:
    """The data of a world in which every claim of the seeds about counts holds."""
    seed_runs, seed_layers = [], []
    for model, layers in NETS.items():
        for batch in PLAN.batch_sizes:
            run, rows = _net_rows(model, layers, batch)
            seed_runs.append(run)
            seed_layers += rows
    depth_runs, depth_layers = [], []
    for depth in PLAN.depths:
        run, rows = _net_rows("deeper_conv_net", _deeper(depth), PLAN.depth_batch, depth=depth)
        depth_runs.append(run)
        depth_layers += rows
    params, per_image = RESNET50
    resnets = [_run("resnet50", b, b * per_image, 2 * b * per_image, params) for b in PLAN.resnet_batches]
    optimizer_runs = []
    for model in PLAN.optimizer_models:
        base = next(r for r in seed_runs if r["model"] == model and r["batch_size"] == 1) if model in NETS \
            else resnets[0]
        for name, k in (("sgd", SGD), ("momentum", MOMENTUM), ("adam", ADAM)):
            optimizer_runs.append({**_run(model, 1, base["forward_flops"], base["backward_flops"],
                                          base["parameters"], k), "optimizer": name})
    zoo_runs = [next(r for r in seed_runs if r["model"] == "one_net" and r["batch_size"] == 1), resnets[0],
                _kaplan_run("gpt2-small"), _kaplan_run("gpt3-175b")]
    gpt3 = types.SimpleNamespace(total_flops=GPT3_TOTAL_FLOPS, tokens=GPT3_TRAINING_TOKENS, samples=GPT3_SEQUENCES,
                                 flops_per_sample=GPT3_TOTAL_FLOPS / GPT3_SEQUENCES)
    return FakeData(
        seed_batch=_sweep(seed_runs, seed_layers), depth=_sweep(depth_runs, depth_layers), resnets=_sweep(resnets),
        transformers=_sweep([zoo_runs[2]]), optimizers=_sweep(optimizer_runs), zoo=_sweep(zoo_runs),
        made={claims.gpt3_estimate.__wrapped__: gpt3, claims.seed004_prices.__wrapped__: prices(),
              claims.seed000_predicted.__wrapped__: {}},
    )


@dataclasses.dataclass
class FakeData:
    """What `xla_cost.study.data.StudyData` gives the checks, made up: the plan,
    the sweeps, the timing files, and what its `collected` functions return."""

    seed_batch: SweepResult
    depth: SweepResult
    resnets: SweepResult
    transformers: SweepResult
    optimizers: SweepResult
    zoo: SweepResult
    made: dict[Callable[..., Any], Any]
    timing: list[tuple[Any, pd.DataFrame]] = dataclasses.field(default_factory=list)
    plan: ReportPlan = PLAN

    def collect(self, function: Callable[[Any], Any]) -> Any:
        return self.made[function] if function in self.made else function(self)


def prices(pcie: float = 1.3, ring: float = 1.3, halving: float = 1.3, roofline: float = 0.2,
           comm: tuple[float, float] = (0.05, 0.02)) -> dict[str, Any]:
    """Seed 004's settings priced (`xla_cost.study.priced_claims.seed004_prices`): the
    doublings' speed-ups, the ImageNet step's roofline and all-reduce seconds."""
    return {"model": "resnet50", "batch": 32, "global_batch": 65536, "devices": (1024, 2048), "pcie": pcie,
            "need": None, "strong": {"ring": ring, "halving-doubling": halving}, "predicted": None,
            "per_image": 3 * 4.1e9 * 2, "compute": roofline / 2, "memory": roofline,
            "comm": {"ring": comm[0], "halving-doubling": comm[1]}}


# Timing rows as benchmarks/time_zoo.py writes them, one per phase.
def timing(device: str, model: str, batch: int, dtype: str, optimizer: str, forward: float, backward: float,
           update: float, config: str = "") -> list[dict[str, Any]]:
    seconds = {"forward": forward, "backward": backward, "grad": forward + backward, "update": update,
               "train_step": forward + backward + update}
    step = forward + backward + update
    return [{"device": device, "jax_version": "0", "date": "2026-01-01", "model": model, "config": config,
             "batch": batch, "dtype": dtype, "optimizer": optimizer, "parameters": 1, "phase": phase,
             "flops": 1.0, "xla_flops": 1.0, "median_s": s, "iqr_s": None if phase == "backward" else s / 50,
             "repeats": 7, "flops_per_s": 1.0 / s, "mfu": 0.5,
             "share": s / step if phase in ("forward", "backward", "update") else None,
             "backward_to_forward_time": backward / forward, "backward_to_forward_flops": 2.0,
             "peak_flops_per_s": 1e15, "peak_bandwidth": 1e12, "peak_source": "test", "skipped": None}
            for phase, s in seconds.items()]


def with_timing(*rows: list[dict[str, Any]]) -> FakeData:
    data = seed_world()
    frame = pd.DataFrame([r for case in rows for r in case])
    data.timing = [(f"timing_{device}.csv", part) for device, part in frame.groupby("device", sort=False)]
    return data


def verdict(number: int, data: Any) -> str:
    """The verdict of claim ``number`` (as the claims page numbers them) on ``data``."""
    return claims.CLAIMS[number - 1].check(data)[1]


def kind(number: int, data: Any) -> str:
    return claims.verdict_kind(verdict(number, data))


def _set(sweep: SweepResult, where: dict[str, Any], table: str = "runs", **values: Any) -> None:
    frame = getattr(sweep, table)
    mask = pd.Series(True, index=frame.index)
    for key, value in where.items():
        mask &= frame[key] == value
    assert mask.any(), where
    for key, value in values.items():
        frame.loc[mask, key] = value


COUNT_CLAIMS = [n for n, c in enumerate(claims.CLAIMS, 1) if c.page not in ("step-time",)]


@pytest.mark.parametrize("number", COUNT_CLAIMS)
def test_every_count_claim_is_confirmed_where_the_seeds_are_right(number):
    assert kind(number, seed_world()) == "confirmed", verdict(number, seed_world())


def _scale_one_net_backward(data: FakeData, factor: float, batches: Sequence[int]) -> None:
    for b in batches:
        row = data.seed_batch.runs[(data.seed_batch.runs["model"] == "one_net")
                                   & (data.seed_batch.runs["batch_size"] == b)].iloc[0]
        backward = factor * row["backward_flops"]
        _set(data.seed_batch, {"model": "one_net", "batch_size": b}, backward_flops=backward,
             backward_to_forward=backward / row["forward_flops"],
             backward_with_update_to_forward=(backward + row["update_flops"]) / row["forward_flops"])


def _params(data: FakeData, model: str, optimizer: str) -> float:
    runs = data.optimizers.runs
    return runs[(runs["model"] == model) & (runs["optimizer"] == optimizer)]["parameters"].iloc[0]


# claim number -> a change of the seed world that must refute it
REFUTE: dict[int, Callable[[FakeData], None]] = {
    1: lambda d: _set(d.seed_batch, {"model": "linear_net", "path": "fc1"}, "layers", backward_to_forward=1.5),
    2: lambda d: _set(d.seed_batch, {"model": "conv_net", "path": "conv2"}, "layers", backward_to_forward=1.5),
    3: lambda d: _set(d.seed_batch, {"model": "one_net", "batch_size": 1}, backward_with_update_to_forward=3.5),
    4: lambda d: _set(d.resnets, {"batch_size": 64}, backward_with_update_to_forward=1.5),
    # XLA's length-1 convention at every batch: no batch reads 3:1 with either convention
    5: lambda d: _scale_one_net_backward(d, 0.75, [1, 2]),
    6: lambda d: _set(d.seed_batch, {"model": "linear_net", "batch_size": 4096}, backward_to_forward=1.3),
    7: lambda d: _set(d.seed_batch, {"model": "one_net", "batch_size": 4096}, backward_to_forward=1.5),
    # an update of 10% of the batch-1 step and a ratio that moves with the batch
    8: lambda d: _set(d.seed_batch, {"model": "conv_net", "batch_size": 1}, update_flops=5e7,
                      backward_with_update_to_forward=1.8),
    9: lambda d: _set(d.seed_batch, {"model": "one_net", "batch_size": 2}, update_flops=1.0),
    10: lambda d: _set(d.seed_batch, {"model": "linear_net", "path": "fc2"}, "layers", forward_flops=64 * 4096 * 128),
    11: lambda d: _set(d.seed_batch, {"model": "one_net", "path": REMAINDER, "batch_size": 64}, "layers",
                       forward_flops=64 * 1e6),
    12: lambda d: _set(d.depth, {"depth": 0}, backward_to_forward=1.98),
    13: lambda d: _set(d.resnets, {"batch_size": 1}, backward_to_forward=1.5),
    14: lambda d: _set(d.optimizers, {"model": "one_net", "optimizer": "sgd"},
                       update_flops=3 * _params(d, "one_net", "sgd")),
    # what XLA counts: 13 FLOP per parameter
    15: lambda d: [_set(d.optimizers, {"model": m, "optimizer": "adam"}, update_flops=13 * _params(d, m, "adam"))
                   for m in PLAN.optimizer_models],
    16: lambda d: _set(d.optimizers, {}, update_flops=1.0),
    17: lambda d: _set(d.optimizers, {"model": "resnet50", "optimizer": "adam"}, update_flops=0.5 * 64 * 8.2e9),
    22: lambda d: _set(d.zoo, {"model": "resnet50"}, backward_to_forward=1.5),
    23: lambda d: [_set(d.zoo, {"model": m}, forward_flops=0.7 * r["forward_flops"])
                   for m in ("gpt2-small", "gpt3-175b")
                   for r in [d.zoo.runs[d.zoo.runs["model"] == m].iloc[0]]],
    25: lambda d: d.made.update({claims.seed004_prices.__wrapped__: prices(1.9, 1.8, 1.9)}),
    28: lambda d: d.made.update({claims.seed004_prices.__wrapped__: prices(roofline=1.0)}),
    29: lambda d: d.made.update({claims.gpt3_estimate.__wrapped__: types.SimpleNamespace(
        total_flops=4e23, tokens=GPT3_TRAINING_TOKENS, samples=GPT3_SEQUENCES, flops_per_sample=4e23 / GPT3_SEQUENCES)}),
}

# claim number -> a change that must give "depends on ..."
DEPENDS: dict[int, Callable[[FakeData], None]] = {
    # XLA's length-1 convention at batch 1 only (batch 2's contractions have length 2)
    5: lambda d: _scale_one_net_backward(d, 0.75, [1]),
    23: lambda d: _set(d.zoo, {"model": "gpt2-small"}, forward_flops=0.7 * d.zoo.runs.loc[
        d.zoo.runs["model"] == "gpt2-small", "forward_flops"].iloc[0]),
    # seed 004's numbers: 1.3x lies between the priced doublings
    25: lambda d: d.made.update({claims.seed004_prices.__wrapped__: prices(1.9, 0.6, 1.8)}),
    # the roofline and a halving-doubling all-reduce fit in the step, a flat-ring one does not
    28: lambda d: d.made.update({claims.seed004_prices.__wrapped__: prices(roofline=0.25, comm=(1.0, 0.02))}),
}


def test_every_count_claim_has_a_refuting_change():
    assert set(REFUTE) == set(COUNT_CLAIMS)


@pytest.mark.parametrize("number", sorted(REFUTE))
def test_each_count_claim_can_be_refuted(number):
    data = seed_world()
    REFUTE[number](data)
    assert kind(number, data) == "refuted", verdict(number, data)


@pytest.mark.parametrize("number", sorted(DEPENDS))
def test_claims_with_a_condition_can_depend_on_it(number):
    data = seed_world()
    DEPENDS[number](data)
    assert kind(number, data) == "depends", verdict(number, data)


# Timings. Seed 000's V100: forward 23%, backward 74%, update 3% (backward/forward 3.2).
def ddp(device: str, forward: float = 0.23, backward: float = 0.74, update: float = 0.03, dtype: str = "float32",
        **kw: Any) -> list[list[dict[str, Any]]]:
    return [timing(device, m, 32, dtype, o, forward, backward, update, **kw) for m in ("resnet50", "bert-base")
            for o in ("sgd", "adam")]


SHARES, THREE_TIMES, UPDATE_FAST, BACKPROP_SLOWEST, GPU_FASTER, HALF, BATCH = 18, 19, 20, 21, 24, 26, 27


def test_a_case_measured_again_counts_once_as_its_latest_measurement():
    from xla_cost.study.views import run_order, timing_all

    names = ["timing_H100_2026-11-26.csv", "timing_H100_2026-11-23.csv", "timing_H100_2026-11-26-2.csv",
             "timing_H100_2026-11-27.csv"]
    # the date, then the run of the day: a file without a suffix is the day's first run
    assert sorted(names, key=run_order) == [names[1], names[0], names[2], names[3]]
    data = seed_world()
    first = pd.DataFrame(timing("H100", "resnet50", 32, "float32", "sgd", 0.2, 0.7, 0.1)
                         + timing("H100", "bert-base", 32, "float32", "sgd", 0.3, 0.6, 0.1))
    again = pd.DataFrame(timing("H100", "resnet50", 32, "float32", "sgd", 0.3, 0.6, 0.1))
    data.timing = [("timing_H100_2026-11-26-2.csv", again), ("timing_H100_2026-11-26.csv", first)]
    cases = timing_all(data)
    # two cases, not three: resnet50's is the second run's (forward 0.3 s of a 1.0 s step), in its first place
    assert [c["model"] for c in cases] == ["resnet50", "bert-base"]
    assert cases[0]["phases"]["forward"]["share"] == pytest.approx(0.3 / (0.3 + 0.6 + 0.1))


def test_an_unsettled_measurement_does_not_replace_a_settled_one():
    from xla_cost.study.views import UNSETTLED, timing_all

    def run(forward: float, spread: float) -> pd.DataFrame:
        # a 1 s step (forward, backward 0.6, the rest the update) whose train-step median has a
        # 95% interval of ``spread`` of it
        frame = pd.DataFrame(timing("H100", "resnet50", 32, "bfloat16", "adam", forward, 0.6, 0.4 - forward))
        step = frame["phase"] == "train_step"
        frame.loc[step, "low_s"], frame.loc[step, "high_s"] = 1.0 - spread / 2, 1.0 + spread / 2
        return frame

    def forward_share(*runs: pd.DataFrame) -> float:
        data = seed_world()
        data.timing = [(f"timing_H100_2026-11-26-{i + 1}.csv", frame) for i, frame in enumerate(runs)]
        (case,) = timing_all(data)
        return case["phases"]["forward"]["share"]

    settled, wide = 0.005, 2.6 * UNSETTLED  # the H100's 0.5% and 26% (reports/data/timing_nvidia-h100-*-3, -4)
    assert forward_share(run(0.2, settled), run(0.3, wide)) == pytest.approx(0.2)  # the earlier, settled one
    assert forward_share(run(0.2, wide), run(0.3, settled)) == pytest.approx(0.3)  # the later, settled one
    assert forward_share(run(0.2, wide), run(0.3, wide)) == pytest.approx(0.3)  # none settled: the latest
    assert forward_share(run(0.2, settled), run(0.3, UNSETTLED * 0.99)) == pytest.approx(0.3)  # within the bound


def test_time_claim_numbers():
    texts = {n: claims.CLAIMS[n - 1].text for n in (SHARES, THREE_TIMES, UPDATE_FAST, BACKPROP_SLOWEST, GPU_FASTER,
                                                      HALF, BATCH)}
    assert "V100" in texts[SHARES] and "3×" in texts[THREE_TIMES] and "optimization" in texts[UPDATE_FAST]
    assert "Backpropagation" in texts[BACKPROP_SLOWEST] and "CPUs" in texts[GPU_FASTER]
    assert "16-bit" in texts[HALF] and "batches" in texts[BATCH]


@pytest.mark.parametrize("number", [SHARES, THREE_TIMES])
def test_v100_claims_are_judged_on_v100_timings_only(number):
    assert kind(number, with_timing(*ddp(V100))) == "confirmed"
    # 31 / 57 / 12 with a time ratio of 1.8: what the H100 measured
    assert kind(number, with_timing(*ddp(V100, 0.31, 0.57, 0.12))) == "refuted"
    # the seed's shares measured on an H100 (and on the CPU) are context, not a verdict
    measured, said = claims.CLAIMS[number - 1].check(with_timing(*ddp(H100), *ddp(CPU)))
    assert said == "not testable here (needs a V100)"
    assert f"Context, not evidence: on {H100}" in measured and "on cpu" not in measured


def test_update_fast_on_the_seed_models_per_gpu():
    assert kind(UPDATE_FAST, with_timing(*ddp(H100))) == "confirmed"
    # with Adam the update outgrows the forward pass, with SGD it stays the smallest
    adam = [timing(H100, m, 32, "float32", "adam", 0.25, 0.45, 0.30) for m in ("resnet50", "bert-base")]
    sgd = [timing(H100, m, 32, "float32", "sgd", 0.3, 0.6, 0.1) for m in ("resnet50", "bert-base")]
    said = verdict(UPDATE_FAST, with_timing(*adam, *sgd))
    assert said.startswith("depends on the optimizer: the smallest phase with sgd")
    assert kind(UPDATE_FAST, with_timing(*ddp(H100, 0.2, 0.4, 0.4))) == "refuted"
    # a CPU is never a GPU claim's evidence
    assert verdict(UPDATE_FAST, with_timing(*ddp(CPU))) == "not testable here (no GPU timing)"


def test_backprop_slowest_more_often_than_not():
    assert kind(BACKPROP_SLOWEST, with_timing(*ddp(H100))) == "confirmed"
    assert kind(BACKPROP_SLOWEST, with_timing(*ddp(H100, 0.5, 0.3, 0.2))) == "refuted"
    # the CPU's shares do not count: backward largest on the GPU, smallest on the CPU
    assert kind(BACKPROP_SLOWEST, with_timing(*ddp(H100), *ddp(CPU, 0.5, 0.3, 0.2))) == "confirmed"


def test_unexplained_measurements_are_left_out():
    # bert-base bfloat16 on an H100 (views.TIMING_ANOMALIES): its backward-smallest shares do not refute
    odd = [timing(H100, "bert-base", 32, "bfloat16", o, 0.6, 0.1, 0.3) for o in ("sgd", "adam")]
    measured, said = claims.CLAIMS[BACKPROP_SLOWEST - 1].check(with_timing(*ddp(H100), *odd))
    assert claims.verdict_kind(said) == "confirmed" and "Left out as unexplained" in measured
    # the same shares on another GPU are evidence
    other = [timing(V100, "bert-base", 32, "bfloat16", o, 0.6, 0.1, 0.3) for o in ("sgd", "adam")]
    assert verdict(BACKPROP_SLOWEST, with_timing(*ddp(H100), *other)).startswith("depends on the GPU")


def test_gpu_faster_on_the_same_work():
    def pair(model: str, cpu_seconds: float, gpu_seconds: float) -> list[list[dict[str, Any]]]:
        return [timing(CPU, model, 64, "float32", "sgd", cpu_seconds / 3, 2 * cpu_seconds / 3, 0.01),
                timing(H100, model, 64, "float32", "sgd", gpu_seconds / 3, 2 * gpu_seconds / 3, 0.01)]

    # grad time CPU / GPU: 30x, 3x
    assert kind(GPU_FASTER, with_timing(*pair("one_net", 0.3, 0.01))) == "confirmed"
    assert kind(GPU_FASTER, with_timing(*pair("one_net", 0.03, 0.01))) == "refuted"
    assert verdict(GPU_FASTER, with_timing(*pair("one_net", 0.3, 0.01), *pair("conv_net", 0.03, 0.01))).startswith(
        "depends on the model")
    # different shapes on the two devices are no pair
    shapes = [timing(CPU, "one_net", 8, "float32", "sgd", 0.1, 0.2, 0.01),
              timing(H100, "one_net", 64, "float32", "sgd", 0.001, 0.002, 0.001)]
    assert verdict(GPU_FASTER, with_timing(*shapes)).startswith("not testable here")


def test_half_precision_per_pair():
    def pair(model: str, ratio: float) -> list[list[dict[str, Any]]]:
        return [timing(H100, model, 32, "float32", "sgd", 0.3, 0.6, 0.1),
                timing(H100, model, 32, "bfloat16", "sgd", 0.3 * ratio, 0.6 * ratio, 0.1 * ratio)]

    assert kind(HALF, with_timing(*pair("resnet50", 0.6), *pair("gpt2-small", 0.7))) == "confirmed"
    # within 5% of the float32 time is not faster
    assert kind(HALF, with_timing(*pair("resnet50", 0.97), *pair("one_net", 1.2))) == "refuted"
    said = verdict(HALF, with_timing(*pair("resnet50", 0.6), *pair("one_net", 1.2)))
    assert said.startswith("depends on the model: faster in every case of resnet50, not in every case of one_net")
    # bfloat16 on a CPU is emulated: no verdict from it
    cpu = [timing(CPU, "resnet50", 2, d, "sgd", 0.1, 0.2, 0.01) for d in ("float32", "bfloat16")]
    assert verdict(HALF, with_timing(*cpu)) == "not testable here (no GPU timing)"


def test_bigger_batches_time_per_example():
    def series(model: str, seconds: dict[int, float]) -> list[list[dict[str, Any]]]:
        return [timing(H100, model, b, "float32", "sgd", s / 3, 2 * s / 3 - 0.001, 0.001) for b, s in seconds.items()]

    # ResNet-50 on the H100: 17.5 ms at batch 32, 85.6 ms at 256: 0.55 -> 0.33 ms per image
    saves = series("resnet50", {32: 0.0175, 256: 0.0856})
    same = series("gpt2-small", {8: 0.08, 16: 0.16})  # time grows with the batch: nothing saved
    assert kind(BATCH, with_timing(*saves)) == "confirmed"
    assert kind(BATCH, with_timing(*same)) == "refuted"
    assert verdict(BATCH, with_timing(*saves, *same)) == "depends on the model: saves for resnet50 (on " + H100 + ")"
    assert verdict(BATCH, with_timing(timing(H100, "resnet50", 32, "float32", "sgd", 0.1, 0.2, 0.01))).startswith(
        "not testable here")


def test_every_time_claim_without_a_gpu_says_what_would_test_it():
    cpu_only = with_timing(*ddp(CPU))
    for number in (SHARES, THREE_TIMES, UPDATE_FAST, BACKPROP_SLOWEST, HALF, BATCH):
        measured, said = claims.CLAIMS[number - 1].check(cpu_only)
        assert said.startswith("not testable here") and "what would test it" in measured, number


def test_every_claim_states_its_rule():
    for claim in claims.CLAIMS:
        assert claim.rule.endswith(".") and claim.rule != claim.text, claim.text
        assert "|" not in claim.rule  # a cell of the claims table
