"""The figures the claims page prices rather than counts: seed 000's V100 split, seed 004's doublings, GPT-3's compute.

Each is a `xla_cost.study.data.collected` function of the study data:
`seed000_predicted` compiles seed 000's ResNet-50 and BERT steps for a V100
and prices each phase; `seed004_prices` prices seed 004's doublings on Tesla
P40s (the 1 -> 2 GPU one as a bound, Jia et al.'s fixed-batch one as the
validation prices it, and as a bound); `gpt3_estimate` analyses Brown et
al.'s run. `xla_cost.study.claims` judges the claims with them.
"""

from __future__ import annotations

from typing import Any

from xla_cost.timemodel.devices import device as registry_device
from xla_cost.study.data import StudyData, collected
from xla_cost.study.published import GPT3_TRAINING_TOKENS, SEED004_SPEEDUP

__all__ = ["SEED000_BATCH", "seed000_predicted", "seed004_prices", "gpt3_estimate"]


SEED000_BATCH = 32
"""Samples per V100 of seed 000's predicted split (the DDP paper's Figure 6 gives no batch: an assumption)."""


@collected
def seed000_predicted(data: StudyData) -> dict[str, dict[str, float]]:
    """Seed 000's ResNet-50 and BERT train steps (float32, SGD, `SEED000_BATCH`
    per GPU; BERT at 128 tokens) compiled for a V100 by its own compiler and
    priced phase by phase (`xla_cost.timemodel.kernel_time`, the global
    constants): each phase's share of the step, a prediction. Empty where the
    plan leaves the V100 split out (``seed000_models``)."""
    from xla_cost.timemodel import calibration, kernel_time
    from xla_cost.runs.configs import RunConfig

    constants = calibration.constants()
    found = {}
    for model in data.plan.seed000_models:
        config = {"seq_len": 128} if model.startswith("bert") else {}
        report = data.analyse(RunConfig(model, SEED000_BATCH, config, optimizer="sgd", dtype="float32",
                                        target="v100"))
        seconds = {p: kernel_time.price_kernels(report.phases[p].kernel_list, "v100", constants).seconds
                   for p in ("forward", "grad", "update")}
        backward = max(seconds["grad"] - seconds["forward"], 0.0)
        total = seconds["forward"] + backward + seconds["update"]
        found[model] = {"forward": seconds["forward"] / total, "backward": backward / total,
                        "update": seconds["update"] / total}
    return found



@collected
def seed004_prices(data: StudyData) -> dict[str, Any] | None:
    """Seed 004's settings priced on Tesla P40s, as bounds (compute at peak, no
    communication hidden): the 1 -> 2 GPU doubling over PCIe 3.0 and the link
    that gives 1.3x; Jia et al.'s fixed-batch doubling with each all-reduce
    algorithm; the ImageNet run's FLOP, roofline and all-reduce per step. None
    when the plan has no seed 004 model."""
    from xla_cost.timemodel.hardware import Hardware
    from xla_cost.timemodel.schedule import Layout
    from xla_cost.runs.scaling import bandwidth_for_speedup, predict, speedup

    seed = data.seed004 if data.plan.seed004_model else None
    if seed is None:
        return None
    bound = Hardware(device="p40").bound()  # compute at peak, nothing hidden, each collective on one flat ring
    algorithms = ("ring", "halving-doubling")
    peak = registry_device("p40", has="peak").peak
    small, large = seed["devices"]
    common = {"model": seed["model"], "batch": seed["batch"], "global_batch": seed["global_batch"],
              "devices": seed["devices"], "pcie": speedup(predict(seed["one"], bound), predict(seed["two"], bound)),
              "need": bandwidth_for_speedup(seed["one"], seed["two"], SEED004_SPEEDUP, bound, interconnect="pcie3"),
              "per_image": seed["one"].phases["train_step"].flops / seed["one"].batch_size}
    if seed["small"] is None:  # the plan's doubling is not Jia et al.'s: no committed programs for it
        return {**common, "strong": {}, "predicted": None, "compute": None, "memory": None, "comm": {}}
    layouts = {d: Layout(**seed["setups"][d].layout) for d in (small, large)}
    jia = Hardware(**seed["setups"][small].hardware)  # Jia et al.'s servers, as the validation prices them
    bound_jia = jia.bound()
    step = seed["small"].phases["train_step"]  # one P40's program: 64 images
    return {
        **common,
        "strong": {a: speedup(predict(seed["small"], bound_jia, layouts[small], algorithm=a),
                              predict(seed["large"], bound_jia, layouts[large], algorithm=a)) for a in algorithms},
        "predicted": speedup(predict(seed["small"], jia, layouts[small]), predict(seed["large"], jia, layouts[large])),
        "compute": step.flops / peak.for_dtype("float32"),
        "memory": (step.bytes_accessed or 0) / peak.bandwidth,
        "comm": {a: predict(seed["small"], bound_jia, layouts[small], algorithm=a).prediction.communication_seconds
                 for a in algorithms},
    }


@collected
def gpt3_estimate(data: StudyData) -> Any:
    """Brown et al.'s GPT-3 training run (300 billion tokens, Adam) estimated
    on one device: its total FLOP."""
    from xla_cost.runs.estimates import estimate

    if not data.plan.gpt3_model:
        return None
    # the total FLOP alone are used: the time is priced as a bound, a device without a profile would do
    return estimate(data.plan.gpt3_model, tokens=GPT3_TRAINING_TOKENS, optimizer="adam", bound=True, store=data.store)
