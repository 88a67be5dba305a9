"""What the study pages analyse, and the rules they judge by.

`ReportPlan` lists the configurations every counted figure comes from
(`DEFAULT_PLAN`: the committed pages'); `DATA_PATTERNS` names the committed
measurements the pages read; `COMMAND` regenerates the pages; the tolerances
decide the claims' verdicts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from xla_cost.errors import InputError

__all__ = [
    "APPROX_TOLERANCE",
    "COMMAND",
    "DATA_PATTERNS",
    "DEFAULT_PLAN",
    "TOLERANCE",
    "ReportPlan",
]


COMMAND = "xla-cost report all --out reports/"
"""The command that regenerates every page (run from the repository root)."""

DATA_PATTERNS: Mapping[str, str] = {
    "timing": "timing_*.csv",
    "analysis_time": "analysis_time_*.csv",
    "report_time": "report_time_*.csv",
    "targets": "targets_*.csv",
    "gemm": "gemm_*.csv",
    "dispatch": "dispatch_*.csv",
    "kernels": "kernels_*.csv",
    "conv_workspaces": "conv_workspaces_*.csv",
}
"""The committed data files the pages read (under ``reports/data/``): measured
step times (``benchmarks/time_zoo.py``), analysis times
(``benchmarks/time_analysis.py``), the run time of ``xla-cost report all``
(``benchmarks/time_report.py``), the steps compiled for the CPU and each
target (``benchmarks/target_compare.py``), single matrix products timed on a
GPU (``benchmarks/gemm_shapes.py``), a kernel's and a step's cost apart from any
work (``benchmarks/dispatch_costs.py``), each kernel of a few train steps
timed by the profiler (``benchmarks/kernel_profile.py``), convolutional train steps
compiled on a GPU and for its target, with each convolution's workspace
(``benchmarks/conv_workspaces.py``). Of several files of one kind, the last by name
(the newest date) is used; timing files are all used, one section each."""

TOLERANCE = 0.05
"""A claimed figure is confirmed when the measured one is within 5% of it."""

APPROX_TOLERANCE = 0.10
"""... within 10% when the seed states it as approximate ("~", "about")."""

@dataclasses.dataclass(frozen=True)
class ReportPlan:
    """The configurations the study pages analyse; every counted figure on them
    comes from these sweeps (SGD and float32 unless said).

    Attributes:
      seed_nets: seed 001's networks of the batch-size study (per-layer).
      batch_sizes: their batch sizes (seed 001: "exponentially increasing").
      layer_batch: the batch size of the per-layer bars (one of ``batch_sizes``).
      depths: DeeperConvNet's numbers of intermediate layers.
      depth_batch: DeeperConvNet's batch size.
      resnets: the ResNets (seed 001: "multiple different types of resnets").
      resnet_batches: their batch sizes.
      transformers: zoo transformers analysed for comparison (batch 1).
      optimizer_models: models whose update is analysed with every optimizer.
      optimizers: the optimizers (`xla_cost.OPTIMIZERS`).
      breakdown_model: the model whose update jaxpr is read primitive by primitive.
      zoo: the models of the zoo page (batch 1).
      scaling_curves: the scaling page's weak-scaling curves, as ``(model,
        mesh axis, samples per device)``.
      scaling_devices: their device counts (simulated on the CPU).
      scaling_device: the device they are priced on (`xla_cost.timemodel.comm.CLUSTERS`).
      seed004_model: the model of seed 004's two claims (ResNet-50 in 8.7
        minutes on 1,024 GPUs; 1.3x from doubling them); None: not analysed.
      seed004_batch: its samples per device in the 1 -> 2 device doubling.
      seed004_devices: the two device counts of the fixed-batch doubling
        (Jia et al. 2018: 1,024 and 2,048 Tesla P40s).
      seed004_global_batch: its samples per step (Jia et al.: 64K).
      gpt3_model: the model of Brown et al.'s total training compute (Table
        D.1); None: not analysed.
      memory_models: the memory page's models, as ``(model, batch sizes)``
        (Adam, float32, one device).
      remat_model: the model whose remat policies the memory page compares,
        as ``(model, batch)``; None: not compared.
      fit_devices: the devices whose largest batch the memory page finds
        (their memory from the device registry, `xla_cost.timemodel.devices`).
      memory_checks: the small steps whose breakdowns the memory page holds
        against XLA's peak, as ``(model, batch, config items)`` (Adam).
      validation_cases: the published cases the validation page prices, by
        name (`xla_cost.study.validation.CASES`); None: every one.
      seed000_models: the models whose forward / backward / update split the
        claims page predicts on a V100 (seed 000), compiled for it; (): none.
    """

    seed_nets: tuple[str, ...] = ("linear_net", "one_net", "conv_net")
    batch_sizes: tuple[int, ...] = tuple(2**i for i in range(13))
    layer_batch: int = 64
    depths: tuple[int, ...] = (0, 1, 2, 3, 5, 10, 20, 30, 50, 75, 100)
    depth_batch: int = 8
    resnets: tuple[str, ...] = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
    resnet_batches: tuple[int, ...] = (1, 8, 64)
    transformers: tuple[str, ...] = (
        "vit-b16", "bert-base", "bert-large", "gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl",
        "gpt3-small", "gpt3-xl", "gpt3-13b", "gpt3-175b",
    )
    optimizer_models: tuple[str, ...] = ("linear_net", "one_net", "conv_net", "resnet50")
    optimizers: tuple[str, ...] | None = None
    breakdown_model: str = "one_net"
    zoo: tuple[str, ...] | None = None
    scaling_curves: tuple[tuple[str, str, int], ...] = (
        ("resnet50", "data", 32), ("gpt2-small", "data", 8), ("gpt3-xl", "fsdp", 8), ("gpt3-6.7b", "fsdp", 8),
    )
    scaling_devices: tuple[int, ...] = (1, 2, 4, 8, 16, 64, 256, 1024)
    scaling_device: str = "h100"
    seed004_model: str | None = "resnet50"
    seed004_batch: int = 32
    seed004_devices: tuple[int, int] = (1024, 2048)
    seed004_global_batch: int = 65536
    gpt3_model: str | None = "gpt3-175b"
    memory_models: tuple[tuple[str, tuple[int, ...]], ...] = (
        ("resnet50", (1, 8, 32, 128)), ("bert-base", (1, 8, 32)), ("gpt2-small", (1, 4, 8)),
    )
    remat_model: tuple[str, int] | None = ("gpt2-small", 8)
    fit_devices: tuple[str, ...] = ("h100", "a100")
    memory_checks: tuple[tuple[str, int, tuple[tuple[str, Any], ...]], ...] = (
        ("linear_net", 4, ()), ("one_net", 64, ()), ("conv_net", 8, ()),
        ("deeper_conv_net", 4, (("depth", 5),)), ("gpt2-small", 2, (("seq_len", 128),)),
        ("gpt2-small", 2, (("seq_len", 128), ("scan_layers", True))),
    )
    validation_cases: tuple[str, ...] | None = None
    seed000_models: tuple[str, ...] = ("resnet50", "bert-base")

    @property
    def simulated_devices(self) -> int:
        """The devices the sharded analyses of the scaling and validation pages need (`xla_cost.simulate_devices`)."""
        from xla_cost.study.validation import SIMULATED_DEVICES

        counts = [*self.scaling_devices, *(self.seed004_devices if self.seed004_model else ()), SIMULATED_DEVICES]
        return max([1, *counts])

    def resolved(self) -> ReportPlan:
        """The plan with its defaults filled (every optimizer, the whole zoo),
        checked: `InputError` for a batch size of the per-layer bars that is
        not analysed."""
        from xla_cost import zoo
        from xla_cost.step.optimizers import OPTIMIZERS

        plan = dataclasses.replace(
            self,
            optimizers=tuple(OPTIMIZERS) if self.optimizers is None else tuple(self.optimizers),
            zoo=tuple(zoo.REGISTRY) if self.zoo is None else tuple(self.zoo),
        )
        if plan.seed_nets and plan.layer_batch not in plan.batch_sizes:
            raise InputError(
                "ReportPlan.layer_batch among ReportPlan.batch_sizes", repr(plan.layer_batch),
                f"Use one of {list(plan.batch_sizes)}.",
            )
        return plan


DEFAULT_PLAN = ReportPlan()
"""The plan of the committed pages."""
