"""Generated markdown reports: the study pages under ``reports/`` and one-model pages.

`write_report` builds the pages of `PAGES` (seed 001's backward/forward study
redone with XLA's counts, the optimizers, measured step time, the zoo, every
quantitative claim of the seeds, an index) and their PNG figures from sweeps
it runs through the results store (`xla_cost.sweep`), or, given a
`xla_cost.Report`, one page for that model.

Determinism: a page holds only counted figures (FLOP, parameters, ratios, each
formatted to a fixed number of digits) and figures read from the committed
data files under ``reports/data/`` (measured times). Nothing measured while
the pages are built (an analysis's seconds, the date) reaches them, so the
same store, or an empty one whose analyses are run again, gives the same
markdown byte for byte. The figures are drawn with matplotlib's Agg canvas,
without the ``Software`` stamp, under a fixed style (the user's matplotlibrc
does not apply).

Collecting data and rendering are separate: a `_Data` object runs the sweeps
(each once, on demand), and each page is a function of it that returns the
page's files as bytes; `write_report` writes them only when all are built.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import math
import os
import pathlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.errors import InputError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from xla_cost.analysis.report import Report
    from xla_cost.compiled.store import Store
    from xla_cost.runs.sweeps import SweepResult

__all__ = [
    "CLAIMS",
    "DEFAULT_PLAN",
    "PAGES",
    "Claim",
    "ReportPlan",
    "check_out",
    "default_data_dir",
    "write_report",
]

PAGES: tuple[str, ...] = (
    "index",
    "backward-forward-ratio",
    "optimizers",
    "step-time",
    "zoo",
    "scaling",
    "memory",
    "claims",
)
"""The study pages, in reading order; ``write_report("all")`` writes every one
(``NAME.md``, its figures under ``figures/``)."""

COMMAND = "xla-cost report all --out reports/"
"""The command that regenerates every page (run from the repository root)."""

DATA_PATTERNS: Mapping[str, str] = {
    "timing": "timing_*.csv",
    "analysis_time": "analysis_time_*.csv",
    "report_time": "report_time_*.csv",
}
"""The committed data files the pages read (under ``reports/data/``): measured
step times (``benchmarks/time_zoo.py``), analysis times
(``benchmarks/time_analysis.py``), the run time of ``xla-cost report all``
(``benchmarks/time_report.py``). Of several files of one kind, the last by name
(the newest date) is used; timing files are all used, one section each."""

DPI = 120
"""Figure resolution: a 9-inch-wide figure is 1080 pixels, legible at 100% zoom."""

TOLERANCE = 0.05
"""A claimed figure is confirmed when the measured one is within 5% of it."""

APPROX_TOLERANCE = 0.10
"""... within 10% when the seed states it as approximate ("~", "about")."""

# --------------------------------------------------------------------------- published figures

SEED_SGD_FLOPS_PER_PARAMETER = 2
"""Seed 001, appendix B: SGD costs 2 FLOP per parameter (w += a * dw)."""

SEED_ADAM_FLOPS_PER_PARAMETER = 18
"""Seed 001, appendix B: Adam costs "~3 + 4 + 3 + 3 + 5 = 18" FLOP per parameter."""

SEED_ADAM_TERMS: tuple[tuple[str, int], ...] = (
    ("first moment m = b1 m + (1 - b1) g", 3),
    ("second moment v = b2 v + (1 - b2) g^2", 4),
    ("bias correction m / (1 - b1^t)", 3),
    ("bias correction v / (1 - b2^t)", 3),
    ("step w -= lr m / (sqrt(v) + eps)", 5),
)
"""Seed 001's five terms of Adam's update (appendix B), in its order."""

DDP_SHARES: Mapping[str, float] = {"forward": 0.23, "backward": 0.74, "update": 0.03}
"""Seed 000: forward / backward / optimizer share of step time, ResNet-50 and
BERT on a V100, read from Figure 6 of the PyTorch DDP paper (Li et al. 2020)."""

DDP_MODELS: tuple[str, ...] = ("resnet50", "bert-base")
"""The models of the DDP paper's Figure 6 (seed 000)."""

PUBLISHED_PARAMETERS: Mapping[str, tuple[float, str]] = {
    "resnet18": (11_689_512, "torchvision"),
    "resnet34": (21_797_672, "torchvision"),
    "resnet50": (25_557_032, "torchvision"),
    "resnet101": (44_549_160, "torchvision"),
    "resnet152": (60_192_808, "torchvision"),
    "bert-base": (109_514_298, "HF BertForMaskedLM"),
    "bert-large": (335_174_458, "HF BertForMaskedLM"),
    "vit-b16": (86_567_656, "timm vit_base_patch16_224"),
    "gpt2-small": (124_439_808, "HF GPT2LMHeadModel"),
    "gpt2-medium": (354_823_168, "HF GPT2LMHeadModel"),
    "gpt2-large": (774_030_080, "HF GPT2LMHeadModel"),
    "gpt2-xl": (1_557_611_200, "HF GPT2LMHeadModel"),
    "gpt3-small": (125e6, "Brown et al. 2020, Table 2.1"),
    "gpt3-medium": (350e6, "Brown et al. 2020, Table 2.1"),
    "gpt3-large": (760e6, "Brown et al. 2020, Table 2.1"),
    "gpt3-xl": (1.3e9, "Brown et al. 2020, Table 2.1"),
    "gpt3-2.7b": (2.7e9, "Brown et al. 2020, Table 2.1"),
    "gpt3-6.7b": (6.7e9, "Brown et al. 2020, Table 2.1"),
    "gpt3-13b": (13.0e9, "Brown et al. 2020, Table 2.1"),
    "gpt3-175b": (175.0e9, "Brown et al. 2020, Table 2.1"),
}
"""Published parameter counts: exact (``num_parameters()`` of torchvision, Hugging
Face and timm models, as tests/test_resnet.py, test_bert_vit.py and test_gpt.py
cite them) or, for GPT-3, as Table 2.1 prints them (rounded; compared at the
digits printed)."""

PUBLISHED_GMAC: Mapping[str, tuple[float, str]] = {
    "resnet18": (1.81, "torchvision"),
    "resnet34": (3.66, "torchvision"),
    "resnet50": (4.09, "torchvision"),
    "resnet101": (7.80, "torchvision"),
    "resnet152": (11.51, "torchvision"),
    "vit-b16": (17.56, "torchvision"),
}
"""Published multiply-accumulates per 224 x 224 image (torchvision's model tables,
"GFLOPS" column, which counts multiply-adds, kernel taps on padding included)."""

GPT3_TRAINING_TOKENS = 300e9
"""Tokens GPT-3 was trained on (Brown et al. 2020, section 2.2 and Table D.1)."""

GPT3_TOTAL_FLOPS = 3.14e23
"""GPT-3 175B's total training compute (Brown et al. 2020, Table D.1:
3.14E+23 FLOP, i.e. 3,640 PF-days)."""

JIA_MINUTES: tuple[float, float] = (8.7, 6.6)
"""ResNet-50 on ImageNet, 90 epochs, on 1,024 and on 2,048 Tesla P40 GPUs
(seed 004; Jia et al. 2018, "Highly Scalable Deep Learning Training System with
Mixed-Precision: Training ImageNet in Four Minutes", arXiv:1807.11205):
8.7 / 6.6 = 1.32, the "1.3x when they doubled their number of GPUs"."""

JIA_EPOCHS = 90
"""Epochs of Jia et al.'s ResNet-50 runs (arXiv:1807.11205, abstract)."""

HALF_PRECISION_STEP = 0.010
"""A float32 train step at least this long (seconds) is taken to be compute-bound
when seed 004's half-precision claim is judged on a GPU."""

SEED004_SPEEDUP = 1.3
"""Seed 004: "a 1.3x speed up when they doubled their number of GPUs"."""

IMAGENET_TRAIN_IMAGES = 1_281_167
"""ImageNet-1k training images (Russakovsky et al. 2015), for seed 004's claim."""

SEED_FILES: Mapping[str, str] = {
    "000": "000_73c9221dd6d85d18.txt",
    "001": "001_2b56b1d1559ca0f7.txt",
    "002": "002_7c3303c11db24dbc.txt",
    "003": "003_56d71bba01c5cb11.txt",
    "004": "004_0ec4d2e8adee7a5c.txt",
}
"""The seed documents (``shared/seeds/``) the claims come from."""

_NET_NAMES = {
    "linear_net": "LinearNet", "one_net": "OneNet", "conv_net": "ConvNet",
    "deeper_conv_net": "DeeperConvNet",
}

_FIRST_LAYER = {"linear_net": "fc1", "one_net": "fc1", "conv_net": "conv1", "deeper_conv_net": "first_layer"}
"""The first parametrised layer of each seed net (seed 001: its ratio is 1:1)."""

REMAINDER = "(remainder)"


def _net(name: str) -> str:
    return _NET_NAMES.get(name, name)


# --------------------------------------------------------------------------- the plan


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
      scaling_device: the device they are priced on (`xla_cost.parallel.comm.CLUSTERS`).
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
        (their memory from the device registry, `xla_cost.parallel.devices`).
      memory_checks: the small steps whose breakdowns the memory page holds
        against XLA's peak, as ``(model, batch, config items)`` (Adam).
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

    @property
    def simulated_devices(self) -> int:
        """The devices the scaling page's sharded analyses need (`xla_cost.simulate_devices`)."""
        counts = [*self.scaling_devices, *(self.seed004_devices if self.seed004_model else ())]
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


# --------------------------------------------------------------------------- formatting


def _sig(value: float | int | None, digits: int = 4) -> str:
    """``value`` to ``digits`` significant digits, without an exponent
    (``1,234``, ``12.35``, ``0.001235``); ``unknown`` for None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown"
    if value == 0:
        return "0"
    rounded = float(f"{value:.{digits - 1}e}")  # 0.99996 to 4 digits is 1.000, not 0.9999
    exponent = math.floor(math.log10(abs(rounded)))
    decimals = max(0, digits - 1 - exponent)
    return f"{rounded:,.{decimals}f}"


def _int(value: int | float | None) -> str:
    """An exact count with thousands separators; ``unknown`` for None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown"
    return f"{int(value):,}"


def _r(value: float | None, digits: int = 3) -> str:
    """A ratio to ``digits`` decimals; ``unknown`` for None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown"
    return f"{value:.{digits}f}"


def _pct(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown"
    return f"{100 * value:.{digits}f}%"


def _pct_sig(value: float | None, digits: int = 3) -> str:
    """A share as a percentage to ``digits`` significant digits (``1.56%``, ``0.000352%``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown"
    return f"{_sig(100 * value, digits)}%"


_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _si(value: float | int | None, digits: int = 4) -> str:
    """A count with an SI prefix, ``digits`` significant digits: ``78.92 G``, ``2,580``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown"
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{_sig(value / scale, digits)} {prefix}"
    return _sig(value, digits) if value != int(value) else _int(value)


def _per(value: float) -> str:
    """A per-parameter figure: two decimals, trailing zeros dropped (``13``, ``4.96``)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


_UNITS = ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"), (1.0, "FLOP"))


def _unit(values: Iterable[float | int | None]) -> tuple[float, str]:
    """The largest FLOP unit in which the largest value reads at least 1."""
    largest = max((abs(v) for v in values if v is not None and not _isnan(v)), default=0)
    return next(((s, u) for s, u in _UNITS if largest >= s), (1.0, "FLOP"))


def _isnan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _range(values: Sequence[float], fmt: Callable[[float], str] = _r) -> str:
    """``a`` if all values print alike, else ``a–b`` (smallest to largest)."""
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low}–{high}"


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """A markdown pipe table; ``align`` is ``l``/``r`` per column (default: the
    first column left, the others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(":---" if a == "l" else "---:" for a in align) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    return "\n".join(lines)


def _join(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def _slug(name: str) -> str:
    """A file name for ``name``: letters, digits, ``.``, ``_`` and ``-``."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return slug or "model"


# --------------------------------------------------------------------------- figures

_STYLE: Mapping[str, Any] = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.titlesize": 12,
    "figure.titleweight": "bold",
}

PASS_COLORS: Mapping[str, str] = {"forward": "#4C72B0", "backward": "#DD8452", "update": "#55A868"}
"""One colour per pass, the same in every figure."""

_LINE_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3",
                "#8C8C8C", "#CCB974", "#64B5CD")


@contextlib.contextmanager
def _style() -> Iterator[None]:
    """Matplotlib's default style plus ours, whatever the user's matplotlibrc;
    restored on exit (nothing global changes)."""
    import matplotlib

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(_STYLE)
        yield


def _figure(width: float, height: float, rows: int = 1, cols: int = 1, **kwargs: Any) -> tuple[Figure, Any]:
    """A figure on the Agg canvas (no pyplot, no global figure registry)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, **kwargs)
    return fig, axes


def _png(draw: Callable[[], Figure]) -> bytes:
    """The PNG of the figure ``draw`` makes, under `_style`, without metadata stamps."""
    with _style():
        fig = draw()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _log2_batch_axis(ax: Axes, batches: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(batches))
    ax.set_xticklabels([str(b) for b in batches], rotation=0)
    ax.set_xlabel("batch size (log scale)")
    ax.minorticks_off()


def _reference(ax: Axes, y: float, label: str, *, horizontal: bool = True, color: str = "0.35") -> None:
    """A dotted reference line with its label at the line's right (or top) end."""
    if horizontal:
        ax.axhline(y, color=color, linestyle=":", linewidth=1.2, zorder=1)
        ax.annotate(label, (1.0, y), xycoords=("axes fraction", "data"), xytext=(-3, 3),
                    textcoords="offset points", ha="right", va="bottom", fontsize=8, color=color)
    else:
        ax.axvline(y, color=color, linestyle=":", linewidth=1.2, zorder=1)
        ax.annotate(label, (y, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -3),
                    textcoords="offset points", ha="left", va="top", fontsize=8, color=color)


# --------------------------------------------------------------------------- data


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts with None for missing values (pandas NA and NaN)."""
    if frame.empty:
        return []
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"] == "ok"] if len(frame) else frame


def _failures(*results: SweepResult) -> list[str]:
    """One line per configuration that did not analyse: what it was and why."""
    out = []
    for result in results:
        for row in _records(result.runs):
            if row["status"] != "ok":
                settings = ", ".join(
                    f"{k}={row[k]}" for k in result.runs.columns
                    if k not in _RUN_FIELDS and not k.endswith(_PHASE_SUFFIXES) and row.get(k) is not None
                )
                out.append(f"{row['model']} batch {row['batch_size']} {row['optimizer']}"
                           + (f" ({settings})" if settings else "") + f": {row['status']}: {row['error']}")
    return out


_RUN_FIELDS = {
    "model", "batch_size", "optimizer", "dtype", "counter", "status", "error", "parameters",
    "backward_to_forward", "backward_with_update_to_forward", "unsupported", "notes", "seconds", "key",
}
_PHASE_SUFFIXES = ("_flops", "_transcendentals", "_bytes", "_bytes_accessed", "_source")


@dataclasses.dataclass(frozen=True)
class UpdateBreakdown:
    """An optimizer's update jaxpr on one model, counted primitive by primitive.

    Attributes:
      optimizer: its name.
      model: the model whose parameters it updates.
      parameters: that model's parameter count.
      flops, transcendentals: per primitive, summed over the update's jaxpr.
    """

    optimizer: str
    model: str
    parameters: int
    flops: Mapping[str, int]
    transcendentals: Mapping[str, int]

    def per_parameter(self, threshold: float = 0.005) -> tuple[dict[str, float], dict[str, float], int, int]:
        """(FLOP per parameter by primitive, transcendentals per parameter by
        primitive, per-step FLOP, per-step transcendentals): a primitive below
        ``threshold`` per parameter is per-step work (scalars such as Adam's
        bias corrections), given in absolute counts."""
        flops, trans, step_f, step_t = {}, {}, 0, 0
        for name, value in sorted(self.flops.items()):
            if value / self.parameters >= threshold:
                flops[name] = value / self.parameters
            else:
                step_f += value
        for name, value in sorted(self.transcendentals.items()):
            if value / self.parameters >= threshold:
                trans[name] = value / self.parameters
            else:
                step_t += value
        return flops, trans, step_f, step_t


class _Data:
    """Everything the pages show, each piece collected once, on demand.

    Sweeps go through ``store`` with ``jobs`` worker processes; committed
    measurements are read from ``data_dir``.
    """

    def __init__(
        self, store: Store, plan: ReportPlan, data_dir: pathlib.Path | None, jobs: int | None,
        progress: bool | None,
    ) -> None:
        self.store = store
        self.plan = plan
        self.data_dir = data_dir
        self.jobs = jobs
        self.progress = progress

    def _sweep(self, models: Sequence[str], **kwargs: Any) -> SweepResult:
        from xla_cost.runs.sweeps import SweepResult, sweep

        if not models:
            import pandas as pd

            empty = pd.DataFrame(columns=["model", "batch_size", "optimizer", "status"])
            return SweepResult(empty, pd.DataFrame(columns=["model", "batch_size", "path"]))
        return sweep(list(models), store=self.store, jobs=self.jobs, progress=self.progress, **kwargs)

    # sweeps ---------------------------------------------------------------

    @functools.cached_property
    def seed_batch(self) -> SweepResult:
        """Seed 001's nets at every batch size, per layer."""
        return self._sweep(self.plan.seed_nets, batch_sizes=self.plan.batch_sizes, per_layer=True)

    @functools.cached_property
    def depth(self) -> SweepResult:
        """DeeperConvNet at every depth, per layer."""
        if not self.plan.depths:
            return self._sweep([])
        return self._sweep(
            ["deeper_conv_net"], batch_sizes=[self.plan.depth_batch],
            settings={"depth": list(self.plan.depths)}, per_layer=True,
        )

    @functools.cached_property
    def resnets(self) -> SweepResult:
        return self._sweep(self.plan.resnets, batch_sizes=self.plan.resnet_batches)

    @functools.cached_property
    def transformers(self) -> SweepResult:
        return self._sweep(self.plan.transformers, batch_sizes=[1])

    @functools.cached_property
    def optimizers(self) -> SweepResult:
        """Every optimizer on each of ``optimizer_models``, batch 1 (the update
        does not depend on the batch)."""
        return self._sweep(self.plan.optimizer_models, batch_sizes=[1], optimizers=self.plan.optimizers)

    @functools.cached_property
    def zoo(self) -> SweepResult:
        return self._sweep(self.plan.zoo, batch_sizes=[1])

    # sharded steps ----------------------------------------------------------

    def _scaling(self, model: str, mesh_axis: str, **kwargs: Any) -> Any:
        from xla_cost.runs.scaling import scaling

        return scaling(model, mesh_axis=mesh_axis, store=self.store, **kwargs)

    @functools.cached_property
    def scaling_curves(self) -> list[dict[str, Any]]:
        """Each weak-scaling curve of the plan, priced with ring and with
        halving-doubling collectives on ``scaling_device``."""
        out = []
        for model, axis, batch in self.plan.scaling_curves:
            common = dict(devices=self.plan.scaling_devices, batch_size=batch, device=self.plan.scaling_device)
            out.append({
                "model": model, "axis": axis, "batch": batch,
                "ring": self._scaling(model, axis, **common),
                "halving-doubling": self._scaling(model, axis, algorithm="halving-doubling", **common),
            })
        return out

    @functools.cached_property
    def seed004(self) -> dict[str, Any] | None:
        """Seed 004's settings analysed: the 1 -> 2 device doubling at
        ``seed004_batch`` per device and the fixed-batch doubling of Jia et al.,
        as sharded reports (priced by the page)."""
        from xla_cost.runs.configs import RunConfig
        from xla_cost.parallel.sharding import simulate_devices

        model = self.plan.seed004_model
        if not model:
            return None
        small, large = self.plan.seed004_devices
        simulate_devices(max(2, large))

        def run(batch: int, devices: int) -> Any:
            config = RunConfig(model, batch, {}, optimizer="sgd", mesh={"data": devices} if devices > 1 else {})
            return config.canonical().run(cache=self.store)

        batch, total = self.plan.seed004_batch, self.plan.seed004_global_batch
        return {
            "model": model, "batch": batch, "global_batch": total, "devices": (small, large),
            "one": run(batch, 1), "two": run(2 * batch, 2),
            "small": run(total, small), "large": run(total, large),
        }

    @functools.cached_property
    def gpt3_estimate(self) -> Any:
        """Brown et al.'s GPT-3 training run (300 billion tokens, Adam) estimated
        on one device: its total FLOP."""
        from xla_cost.runs.scaling import estimate

        if not self.plan.gpt3_model:
            return None
        return estimate(self.plan.gpt3_model, tokens=GPT3_TRAINING_TOKENS, optimizer="adam", store=self.store)

    # memory ---------------------------------------------------------------

    def _memory_run(self, model: str, batch: int, remat: str | None = None,
                    config: Mapping[str, Any] | None = None) -> Any:
        from xla_cost.runs.configs import RunConfig, remat_placement

        config, options = remat_placement(model, remat, config or {})
        run = RunConfig(model, batch, config, optimizer="adam", per_layer=True).canonical()
        return run.run(cache=self.store, memory=True, **options)

    @functools.cached_property
    def memory_checks(self) -> list[tuple[str, int, dict[str, Any], Any]]:
        """``(model, batch, config, report)`` of each small step the page checks."""
        return [(model, batch, dict(items), self._memory_run(model, batch, config=dict(items)))
                for model, batch, items in self.plan.memory_checks]

    @functools.cached_property
    def memory(self) -> list[tuple[str, list[Any]]]:
        """Each memory model's report (``memory=True``) at each of its batch sizes."""
        return [(model, [self._memory_run(model, b) for b in batches])
                for model, batches in self.plan.memory_models]

    @functools.cached_property
    def remat(self) -> list[tuple[str, Any]]:
        """The remat model under every policy."""
        from xla_cost.step.remat import REMAT_POLICIES

        if self.plan.remat_model is None:
            return []
        model, batch = self.plan.remat_model
        return [(name, self._memory_run(model, batch, name)) for name in REMAT_POLICIES]

    @functools.cached_property
    def fits(self) -> list[tuple[str, str, Any]]:
        """``(model, device, FitResult)`` for each memory model on each fit device."""
        from xla_cost.runs.fit import max_batch_size

        return [(model, device, max_batch_size(model, device=device, optimizer="adam"))
                for model, _ in self.plan.memory_models for device in self.plan.fit_devices]

    # the update's jaxpr ---------------------------------------------------

    @functools.cached_property
    def update_breakdown(self) -> dict[str, UpdateBreakdown]:
        """Each optimizer's update jaxpr on ``breakdown_model``, by primitive
        (traced abstractly, not compiled: a fraction of a second each)."""
        from xla_cost.count.interpret import count_function
        from xla_cost.step.workload import build_workload
        from xla_cost.zoo import build_model, example_inputs

        name = self.plan.breakdown_model
        out = {}
        for optimizer in self.plan.optimizers or ():
            workload, _ = build_workload(build_model(name), example_inputs(name, 1), optimizer=optimizer)
            count = count_function(workload.phase_fn("update"), *workload.phase_args("update"))
            flops: dict[str, int] = {}
            trans: dict[str, int] = {}
            for eqn in count.equations:
                if eqn.cost.flops:
                    flops[eqn.primitive] = flops.get(eqn.primitive, 0) + eqn.cost.flops
                if eqn.cost.transcendentals:
                    trans[eqn.primitive] = trans.get(eqn.primitive, 0) + eqn.cost.transcendentals
            out[optimizer] = UpdateBreakdown(optimizer, name, workload.parameters, flops, trans)
        return out

    # committed data ---------------------------------------------------------

    def _files(self, kind: str) -> list[pathlib.Path]:
        if self.data_dir is None or not self.data_dir.is_dir():
            return []
        return sorted(self.data_dir.glob(DATA_PATTERNS[kind]))

    @staticmethod
    def _read(path: pathlib.Path) -> pd.DataFrame:
        import pandas as pd

        return pd.read_csv(path)

    @functools.cached_property
    def timing(self) -> list[tuple[pathlib.Path, pd.DataFrame]]:
        """Every committed timing CSV (``benchmarks/time_zoo.py``), by name."""
        return [(path, self._read(path)) for path in self._files("timing")]

    @functools.cached_property
    def analysis_time(self) -> tuple[pathlib.Path, pd.DataFrame] | None:
        files = self._files("analysis_time")
        return (files[-1], self._read(files[-1])) if files else None

    @functools.cached_property
    def report_time(self) -> tuple[pathlib.Path, pd.DataFrame] | None:
        files = self._files("report_time")
        return (files[-1], self._read(files[-1])) if files else None

    @functools.cached_property
    def environment(self) -> dict[str, str]:
        import matplotlib

        from xla_cost.compiled.store import environment

        return {**environment(), "matplotlib": matplotlib.__version__}


def _data_name(path: pathlib.Path) -> str:
    """A committed data file as pages cite it (its path in the repository)."""
    return f"reports/data/{path.name}"


def _data_link(path: pathlib.Path) -> str:
    return f"[`{_data_name(path)}`](data/{path.name})"


# --------------------------------------------------------------------------- shared views of the data


def _by_model(result: SweepResult) -> dict[str, list[dict[str, Any]]]:
    """The analysed runs of a sweep per model, in the sweep's order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in _records(_ok(result.runs)):
        out.setdefault(row["model"], []).append(row)
    return out


def _layers(result: SweepResult, model: str, batch: int, **settings: Any) -> list[dict[str, Any]]:
    """The layer rows of one configuration, in the report's order (remainder last)."""
    frame = result.layers
    if frame.empty:
        return []
    mask = (frame["model"] == model) & (frame["batch_size"] == batch)
    for key, value in settings.items():
        mask &= frame[key] == value
    return _records(frame[mask])


def _seed_runs(data: _Data) -> dict[str, list[dict[str, Any]]]:
    return _by_model(data.seed_batch)


def _depth_runs(data: _Data) -> list[dict[str, Any]]:
    return sorted(_by_model(data.depth).get("deeper_conv_net", []), key=lambda r: r["depth"])


def _at(rows: Sequence[dict[str, Any]], batch: int) -> dict[str, Any] | None:
    return next((r for r in rows if r["batch_size"] == batch), None)


def _seed_layer_rows(data: _Data, model: str, batch: int | None = None) -> list[dict[str, Any]]:
    return _layers(data.seed_batch, model, data.plan.layer_batch if batch is None else batch)


def _deepest(data: _Data) -> dict[str, Any] | None:
    runs = _depth_runs(data)
    return runs[-1] if runs else None


def _deepest_layers(data: _Data) -> list[dict[str, Any]]:
    row = _deepest(data)
    if row is None:
        return []
    return _layers(data.depth, "deeper_conv_net", row["batch_size"], depth=row["depth"])


def _first_and_other_layers(data: _Data) -> tuple[list[tuple[str, str, float]], list[tuple[str, str, float]]]:
    """(first layers, other parametrised layers) as (net, layer, backward/forward),
    at the per-layer batch (DeeperConvNet: its deepest configuration)."""
    first, other = [], []
    sources = [(m, _seed_layer_rows(data, m)) for m in data.plan.seed_nets]
    sources.append(("deeper_conv_net", _deepest_layers(data)))
    for model, rows in sources:
        for row in rows:
            if row["path"] == REMAINDER or not row["parameters"] or row["backward_to_forward"] is None:
                continue
            target = first if row["path"] == _FIRST_LAYER.get(model) else other
            target.append((model, row["path"], row["backward_to_forward"]))
    return first, other


# textbook multiply-accumulates of seed 001's nets, for the conventions ----------


def _conv_out(size: int, k: int, s: int, p: int) -> int:
    return (size + 2 * p - k) // s + 1


def _textbook_conv_macs(size: int, c_in: int, c_out: int, k: int, s: int, p: int) -> int:
    """Multiply-accumulates of a square convolution as textbooks count them:
    every output times every kernel tap, taps on padding included."""
    out = _conv_out(size, k, s, p)
    return out * out * k * k * c_in * c_out


def _textbook_macs(model: str, config: Mapping[str, Any]) -> dict[str, int] | None:
    """Seed 001's nets layer by layer (per example), from their definitions in
    seed 001's appendix A; None for other models."""
    if model in ("linear_net", "one_net"):
        n_in = 224 * 224 * 3 if model == "linear_net" else 1
        return {"fc1": n_in * 4096, "fc2": 4096 * 128, "fc3": 128 * 10}
    if model == "conv_net":
        size = int(config.get("image_size", 224))
        o1 = _conv_out(size, 7, 2, 3)
        p1 = _conv_out(o1, 3, 2, 1)
        return {"conv1": _textbook_conv_macs(size, 3, 32, 7, 2, 3),
                "conv2": _textbook_conv_macs(p1, 32, 64, 7, 2, 3), "fc1": 64 * 10}
    if model == "deeper_conv_net":
        size = int(config.get("image_size", 224))
        depth = int(config.get("depth", 100))
        o1 = _conv_out(size, 7, 2, 3)
        p1 = _conv_out(o1, 3, 2, 0)
        return {"first_layer": _textbook_conv_macs(size, 3, 32, 7, 2, 3),
                "conv_layer": depth * _textbook_conv_macs(p1, 32, 32, 3, 1, 1),
                "convN": _textbook_conv_macs(p1, 32, 64, 7, 2, 3), "fc1": 64 * 10}
    return None


# --------------------------------------------------------------------------- page: backward-forward-ratio


def _fig_layers(data: _Data) -> bytes:
    batch = data.plan.layer_batch
    nets = [m for m in data.plan.seed_nets if _seed_layer_rows(data, m)]
    first, other = _first_and_other_layers(data)
    first_seed = [r for m, _, r in first if m in nets and m not in _SIZE_ONE_INPUT]
    single = [(m, r) for m, _, r in first if m in nets and m in _SIZE_ONE_INPUT]
    other_seed = [r for m, _, r in other if m in nets]

    def draw() -> Figure:
        fig, axes = _figure(4.3 * len(nets), 5.0, 1, len(nets))
        for ax, model in zip(axes[0], nets):
            rows = _seed_layer_rows(data, model)
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
                    one_input = model in _SIZE_ONE_INPUT and r["path"] == _FIRST_LAYER[model]
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
            ax.set_title(f"{_net(model)}, batch {batch}")
            ax.grid(axis="x", visible=False)
        axes[0][0].legend(loc="upper right", frameon=False)
        exceptions = "".join(f" ({_net(m)}: {_r2(r)}, one input)" for m, r in single)
        fig.suptitle(
            f"Backward ÷ forward FLOP per layer (labels): first layer "
            f"{_range(first_seed, _r2) if first_seed else '–'}:1{exceptions}, other layers {_range(other_seed, _r2)}:1"
        )
        return fig

    return _png(draw)


def _r2(value: float) -> str:
    return f"{value:.2f}"


def _fig_update_vs_batch(data: _Data) -> bytes:
    runs = _seed_runs(data)
    nets = [m for m in data.plan.seed_nets if m in runs]
    constant = all(len({r["update_flops"] for r in runs[m]}) == 1 for m in nets)

    def draw() -> Figure:
        fig, axes = _figure(4.3 * len(nets), 4.4, 1, len(nets))
        for ax, model in zip(axes[0], nets):
            rows = runs[model]
            batches = [r["batch_size"] for r in rows]
            for phase, marker in (("forward", "o"), ("backward", "s"), ("update", "^")):
                ax.plot(batches, [r[f"{phase}_flops"] for r in rows], marker=marker, markersize=4,
                        color=PASS_COLORS[phase], label=phase)
            _log2_batch_axis(ax, _thin(batches))
            ax.set_yscale("log")
            ax.set_ylabel("FLOP per training step (log scale)")
            ax.set_title(_net(model))
        axes[0][0].legend(loc="upper left", frameon=False)
        fig.suptitle(
            "The SGD update costs the same FLOP at every batch size; forward and backward grow with it"
            if constant else "Forward, backward and update FLOP against the batch size (SGD)"
        )
        return fig

    return _png(draw)


def _thin(batches: Sequence[int], most: int = 7) -> list[int]:
    """At most ``most`` tick positions, the first and the last among them."""
    batches = list(batches)
    if len(batches) <= most:
        return batches
    step = math.ceil((len(batches) - 1) / (most - 1))
    picked = batches[::step]
    return picked if picked[-1] == batches[-1] else [*picked[:-1], batches[-1]]


def _fig_ratio_vs_batch(data: _Data) -> bytes:
    runs = _seed_runs(data)
    nets = [m for m in data.plan.seed_nets if m in runs]
    largest = max(data.plan.batch_sizes)
    ends = ", ".join(
        f"{_net(m)} {_r2(runs[m][-1]['backward_to_forward'])}" for m in nets if runs[m][-1]["batch_size"] == largest
    )

    def draw() -> Figure:
        fig, axes = _figure(11.0, 4.6, 1, 2, sharey=True)
        panels = (("backward_to_forward", "backward / forward"),
                  ("backward_with_update_to_forward", "(backward + update) / forward  (seed 001's convention)"))
        top = max(3.3, max(r[key] for m in nets for r in runs[m] for key, _ in panels) * 1.08)
        for ax, (key, title) in zip(axes[0], panels):
            for color, model in zip(_LINE_COLORS, nets):
                rows = runs[model]
                batches = [r["batch_size"] for r in rows]
                values = [r[key] for r in rows]
                ax.plot(batches, values, marker="o", markersize=4, color=color, label=_net(model))
                ax.annotate(_net(model), (batches[-1], values[-1]), xytext=(5, 0), textcoords="offset points",
                            va="center", fontsize=9, color=color, fontweight="bold")
            for y, label in ((1, "1:1"), (2, "2:1"), (3, "3:1 (seed 001's maximum)")):
                _reference(ax, y, label)
            _log2_batch_axis(ax, _thin(sorted({r["batch_size"] for m in nets for r in runs[m]})))
            ax.set_xlim(right=max(data.plan.batch_sizes) * 6)
            ax.set_ylim(0, top)
            ax.set_title(title)
        axes[0][0].set_ylabel("FLOP ratio")
        fig.suptitle(f"Backward/forward FLOP ratio against batch size (SGD); at batch {largest}: {ends}")
        return fig

    return _png(draw)


def _fig_depth(data: _Data) -> bytes:
    runs = _depth_runs(data)

    def draw() -> Figure:
        fig, axes = _figure(8.0, 4.4)
        ax = axes[0][0]
        depths = [r["depth"] for r in runs]
        ax.plot(depths, [r["backward_to_forward"] for r in runs], marker="o", color=PASS_COLORS["backward"],
                label="backward / forward")
        ax.plot(depths, [r["backward_with_update_to_forward"] for r in runs], marker="x", linestyle="--",
                color=PASS_COLORS["update"], label="(backward + update) / forward")
        _reference(ax, 2, "2:1")
        _reference(ax, 1, "1:1")
        ax.set_ylim(0.8, 2.2)
        ax.set_xlabel("intermediate 3×3 conv layers (depth)")
        ax.set_ylabel("FLOP ratio")
        ax.legend(loc="lower right", frameon=False)
        first, last = runs[0], runs[-1]
        fig.suptitle(
            f"DeeperConvNet (batch {first['batch_size']}): backward/forward {_r2(first['backward_to_forward'])} "
            f"at depth {first['depth']}, {_r2(last['backward_to_forward'])} at depth {last['depth']}"
        )
        return fig

    return _png(draw)


def _architecture_rows(data: _Data) -> list[dict[str, Any]]:
    rows = []
    for result in (data.resnets, data.transformers):
        for model, runs in _by_model(result).items():
            rows.extend(runs)
    return rows


def _fig_architectures(data: _Data) -> bytes:
    rows = _architecture_rows(data)
    cnn = {*data.plan.resnets}

    def draw() -> Figure:
        fig, axes = _figure(9.0, 0.32 * len(rows) + 1.6)
        ax = axes[0][0]
        ys = list(range(len(rows)))[::-1]
        for y, row in zip(ys, rows):
            color = PASS_COLORS["forward"] if row["model"] in cnn else PASS_COLORS["backward"]
            ax.plot([row["backward_to_forward"]], [y], "o", color=color, markersize=7)
            ax.plot([row["backward_with_update_to_forward"]], [y], "|", color="black", markersize=11,
                    markeredgewidth=1.5)
            ax.annotate(_r(row["backward_to_forward"]), (row["backward_to_forward"], y), xytext=(-6, 0),
                        textcoords="offset points", ha="right", va="center", fontsize=8)
        ax.set_yticks(ys, [f"{r['model']} · batch {r['batch_size']}" for r in rows])
        values = [v for r in rows for v in (r["backward_to_forward"], r["backward_with_update_to_forward"])]
        ax.set_xlim(min(min(values), 1.9) - 0.06, max(max(values), 2.0) + 0.03)
        _reference(ax, 2.0, "2:1", horizontal=False)
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
            f"ResNets and transformers: backward/forward {_range([r['backward_to_forward'] for r in rows])}"
        )
        return fig

    return _png(draw)


def _ratio_page(data: _Data) -> dict[str, bytes]:
    plan = data.plan
    files: dict[str, bytes] = {}
    runs = _seed_runs(data)
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
    failures = _failures(data.seed_batch, data.depth, data.resnets, data.transformers)

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
    if _depth_runs(data):
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
    if _architecture_rows(data):
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
        "[claims.md](claims.md) (within 5% of the claimed figure: confirmed).",
        "",
    ]
    for claim in CLAIMS:
        if claim.page == "backward-forward-ratio" and "001" in claim.seeds:
            measured, verdict = claim.check(data)
            lines.append(f"- **{claim.text}** {measured} — *{verdict}*")
    lines.append("")
    if failures:
        lines += ["## Configurations that did not analyse", "", *[f"- {f}" for f in failures], ""]
    lines += [_regenerate_line()]
    files["backward-forward-ratio.md"] = _text("\n".join(lines))
    return files


def _regenerate_line() -> str:
    return f"Generated by `{COMMAND}` ([index](index.md)); the counts come from `xla_cost.sweep` through the results store."


def _text(markdown: str) -> bytes:
    return (markdown.rstrip("\n") + "\n").encode("utf-8")


def _layer_table(data: _Data, nets: Sequence[str]) -> list[str]:
    batch = data.plan.layer_batch
    one = 1 if 1 in data.plan.batch_sizes and batch != 1 else None
    header = ["net", "layer", "parameters", f"forward FLOP (batch {batch})", "backward FLOP",
              "backward / forward", "update FLOP (SGD)"]
    if one:
        header.append("backward / forward at batch 1")
    rows = []
    for model in nets:
        at_one = {r["path"]: r for r in _seed_layer_rows(data, model, one)} if one else {}
        for r in _seed_layer_rows(data, model):
            cells = [_net(model), r["path"], _int(r["parameters"]), _si(r["forward_flops"]),
                     _si(r["backward_flops"]), _r(r["backward_to_forward"]), _si(r["update_flops"])]
            if one:
                cells.append(_r(at_one.get(r["path"], {}).get("backward_to_forward")))
            rows.append(cells)
    return [_table(header, rows, "ll" + "r" * (len(header) - 2))]


def _layer_text(data: _Data, nets: Sequence[str]) -> list[str]:
    batch = data.plan.layer_batch
    first, other = _first_and_other_layers(data)
    out = []
    plain = [(m, p, r) for m, p, r in first if m not in _SIZE_ONE_INPUT]
    if plain:
        out.append(
            f"- The first layer's backward pass is its weight gradient alone (nothing needs the gradient "
            f"of the input), as large as its forward pass: {_join([f'{_net(m)} {p} {_r(r)}' for m, p, r in plain])}"
            + _deepest_note(data, batch) + "."
        )
    if other:
        out.append(
            f"- Every other parametrised layer computes a weight gradient and an input gradient, each as "
            f"large as its forward pass: backward/forward {_range([r for _, _, r in other])} over "
            f"{len(other)} layers."
        )
    for model in nets:
        if model not in _SIZE_ONE_INPUT:
            continue
        rows = {r["path"]: r for r in _seed_layer_rows(data, model)}
        layer = rows.get(_FIRST_LAYER[model])
        if layer is None:
            continue
        ratio = layer["backward_to_forward"]
        formula = (3 * batch - 1) / (2 * batch)
        exact = abs(ratio - formula) < 1e-9
        out.append(
            f"- XLA's convention changes {_net(model)}'s first layer: its input has one feature, so its "
            f"forward matmul is a contraction of length 1, which the compiled program turns into a multiply "
            f"(1 FLOP per output, not 2), while its weight gradient contracts over the batch (2 FLOP per "
            f"multiply-add): {layer['path']} reads {_r(ratio)}"
            + (f", (3B − 1)/2B at B = {batch} with the bias add and the bias gradient" if exact else "")
            + ", where seed 001's convention gives 1:1."
        )
    one = 1 if 1 in data.plan.batch_sizes and batch != 1 else None
    if one:
        values = []
        for model in nets:
            for r in _seed_layer_rows(data, model, one):
                if r["path"] != REMAINDER and r["parameters"] and r["backward_to_forward"] is not None:
                    values.append((model, r["path"], r["backward_to_forward"]))
        firsts = [v for v in values if v[1] == _FIRST_LAYER.get(v[0]) and v[0] == "linear_net"]
        dense_others = [v for v in values if v[1] != _FIRST_LAYER.get(v[0]) and v[0] in ("linear_net", "one_net")]
        if firsts or dense_others:
            parts = []
            if firsts:
                parts.append(f"LinearNet's fc1 {_range([r for *_, r in firsts])}")
            if dense_others:
                parts.append(f"the other dense layers {_range([r for *_, r in dense_others])}")
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
        rows = _seed_layer_rows(data, "conv_net")
        layers = [r for r in rows if r["path"] != REMAINDER]
        rest = next((r for r in rows if r["path"] == REMAINDER), None)
        mix = sum(r["backward_flops"] for r in layers) / sum(r["forward_flops"] for r in layers)
        whole = sum(r["backward_flops"] for r in rows) / sum(r["forward_flops"] for r in rows)
        if rest is not None and rest["backward_to_forward"]:
            out.append(
                f"- ConvNet's layers alone give backward/forward {_r(mix)} (conv1 at 1:1 is "
                f"{_pct(layers[0]['forward_flops'] / sum(r['forward_flops'] for r in layers))} of their forward "
                f"FLOP); the remainder's backward is {_r(rest['backward_to_forward'])}× its forward (the max-pool "
                f"gradient, an index-tracking reduce-window and a scatter, costs more than the max), so the "
                f"whole step reads {_r(whole)}."
            )
    return out


def _deepest_note(data: _Data, batch: int) -> str:
    deepest = _deepest(data)
    if deepest is None:
        return f" (batch {batch})"
    return f" (batch {batch}; DeeperConvNet at depth {deepest['depth']}, batch {deepest['batch_size']})"


_SIZE_ONE_INPUT = {"one_net"}
"""Seed nets whose first layer has a single input feature (a contraction of length 1)."""

_POOLED = {"conv_net", "deeper_conv_net"}
"""Seed nets with pooling between their layers."""


def _conv_batch_one(data: _Data, nets: Sequence[str], batch: int) -> str:
    parts = []
    for model in nets:
        if model in ("conv_net",):
            for r in _seed_layer_rows(data, model, batch):
                if r["path"] in ("conv1", "conv2"):
                    parts.append(f"{_net(model)} {r['path']} {_r(r['backward_to_forward'])}")
    return _join(parts) if parts else "no convolution analysed at batch 1"


def _conv_taps(data: _Data) -> str:
    """ConvNet's convolutions counted against the textbook count, from the per-layer rows."""
    if "conv_net" not in data.plan.seed_nets:
        return ""
    batch = data.plan.layer_batch
    rows = {r["path"]: r for r in _seed_layer_rows(data, "conv_net")}
    textbook = _textbook_macs("conv_net", {})
    parts = []
    for path in ("conv1", "conv2"):
        if path in rows and textbook:
            counted = rows[path]["forward_flops"] / batch
            book = 2 * textbook[path]
            parts.append(f"ConvNet's {path} counts {_sig(counted / 1e6)} MFLOP per image against the textbook "
                         f"2 × {_sig(textbook[path] / 1e6)} M multiply-adds ({_r(counted / book)}×)")
    return "; ".join(parts) + " (7×7 stride-2 kernels with padding 3: the border outputs miss taps)" if parts else ""


def _remainder_share(data: _Data, nets: Sequence[str]) -> str:
    parts = []
    for model in nets:
        rows = _seed_layer_rows(data, model)
        total_f = sum(r["forward_flops"] for r in rows)
        total_b = sum(r["backward_flops"] for r in rows)
        rest = next((r for r in rows if r["path"] == REMAINDER), None)
        if rest and total_f:
            parts.append(f"{_pct_sig(rest['forward_flops'] / total_f, 2)} of {_net(model)}'s forward FLOP and "
                         f"{_pct_sig(rest['backward_flops'] / total_b, 2)} of its backward FLOP")
    return "; ".join(parts)


def _update_text(data: _Data, nets: Sequence[str]) -> list[str]:
    runs = _seed_runs(data)
    out = []
    for model in nets:
        rows = runs[model]
        updates = {r["update_flops"] for r in rows}
        first, last = rows[0], rows[-1]
        growth = last["forward_flops"] / first["forward_flops"]
        same = len(updates) == 1
        out.append(
            f"- {_net(model)}: the update is {_int(first['update_flops'])} FLOP "
            f"({_r(first['update_flops'] / first['parameters'])} per parameter)"
            + (" at every batch size" if same else f", between {_int(min(updates))} and {_int(max(updates))}")
            + f"; the forward pass grows {_sig(growth)}× from batch {first['batch_size']} to "
            f"{last['batch_size']} ({_sig(first['forward_flops'] / 1e9)} to {_sig(last['forward_flops'] / 1e9)} GFLOP), "
            f"so the update falls from {_pct_sig(first['update_flops'] / first['forward_flops'])} to "
            f"{_pct_sig(last['update_flops'] / last['forward_flops'])} of the forward FLOP."
        )
    return out


def _batch_table(data: _Data, nets: Sequence[str]) -> str:
    runs = _seed_runs(data)
    batches = sorted({r["batch_size"] for m in nets for r in runs[m]})
    header = ["batch"]
    for model in nets:
        header += [f"{_net(model)} bwd/fwd", f"{_net(model)} (bwd+upd)/fwd"]
    rows = []
    for batch in batches:
        cells: list[str] = [str(batch)]
        for model in nets:
            row = _at(runs[model], batch)
            cells += [_r(row and row["backward_to_forward"]), _r(row and row["backward_with_update_to_forward"])]
        rows.append(cells)
    return _table(header, rows)


def _batch_text(data: _Data, nets: Sequence[str]) -> list[str]:
    runs = _seed_runs(data)
    out = []
    for model in nets:
        rows = runs[model]
        first, last = rows[0], rows[-1]
        peak = max(rows, key=lambda r: r["backward_with_update_to_forward"])
        out.append(
            f"- {_net(model)}: backward/forward goes from {_r(first['backward_to_forward'])} at batch "
            f"{first['batch_size']} to {_r(last['backward_to_forward'])} at batch {last['batch_size']}; "
            f"with the update, from {_r(first['backward_with_update_to_forward'])} to "
            f"{_r(last['backward_with_update_to_forward'])} (largest {_r(peak['backward_with_update_to_forward'])}, "
            f"at batch {peak['batch_size']})."
        )
    if "one_net" in runs and len(runs["one_net"]) > 1:
        rows = runs["one_net"]
        first, second = rows[0], rows[1]
        out.append(
            f"- OneNet's largest ratio stays below seed 001's 3:1: at batch {first['batch_size']} its "
            f"backward/forward is {_r(first['backward_to_forward'])} (a dense weight gradient over a batch of "
            "one is a multiply, not a multiply-add) and the update adds "
            f"{_r(first['update_flops'] / first['forward_flops'])}× the forward pass; at batch "
            f"{second['batch_size']} backward/forward is {_r(second['backward_to_forward'])} but the update adds "
            f"only {_r(second['update_flops'] / second['forward_flops'])}×. With seed 001's convention "
            "(2 FLOP per multiply-add whatever the contraction length) batch 1 would give about 2 + 1 = 3."
        )
    return out


def _depth_table(data: _Data) -> str:
    rows = []
    for run in _depth_runs(data):
        layers = _layers(data.depth, "deeper_conv_net", run["batch_size"], depth=run["depth"])
        total = sum(r["forward_flops"] for r in layers) or None
        first = next((r for r in layers if r["path"] == "first_layer"), None)
        share = first["forward_flops"] / total if first and total else None
        rows.append([run["depth"], _sig(run["forward_flops"] / 1e9), _pct(share),
                     _r(run["backward_to_forward"]), _r(run["backward_with_update_to_forward"])])
    return _table(["depth", "forward GFLOP", "first layer's share of forward", "backward / forward",
                   "(backward + update) / forward"], rows)


def _depth_text(data: _Data) -> list[str]:
    runs = _depth_runs(data)
    first, last = runs[0], runs[-1]
    near = next((r for r in runs if _within(r["backward_to_forward"], 2.0, TOLERANCE)), None)
    out = [
        f"- At depth {first['depth']} (seed 001's \"0 intermediate layers\") backward/forward is "
        f"{_r(first['backward_to_forward'])}: the first layer (1:1) is a large part of the forward FLOP. "
        f"Each added 3×3 layer (2:1) pulls the ratio up: {_r(last['backward_to_forward'])} at depth {last['depth']}"
        + (f"; it is within 5% of 2 from depth {near['depth']} on." if near else "."),
        f"- The update (SGD) is {_pct_sig(last['update_flops'] / last['forward_flops'])} of the forward FLOP "
        f"at depth {last['depth']}: with or without it the ratio is the same to three decimals"
        + ("." if _r(last["backward_to_forward"]) == _r(last["backward_with_update_to_forward"])
           else f" ({_r(last['backward_with_update_to_forward'])} with it)."),
        "- At depth 0 the shared 3×3 layer is never called, so Flax creates no parameters for it (9,216 fewer "
        "than the seed's PyTorch module, whose unused weights get no gradient either).",
    ]
    return out


def _architecture_table(data: _Data) -> str:
    rows = []
    for row in _architecture_rows(data):
        per = _per_unit(row)
        rows.append([row["model"], row["batch_size"], _int(row["parameters"]),
                     f"{_sig(row['forward_flops'] / per[0] / 1e9)} {per[1]}",
                     _r(row["backward_to_forward"]), _r(row["backward_with_update_to_forward"]),
                     row.get("forward_source") or "unknown"])
    return _table(["model", "batch", "parameters", "forward GFLOP", "backward / forward",
                   "(backward + update) / forward", "count"], rows, "lrrrrrl")


def _per_unit(row: Mapping[str, Any]) -> tuple[int, str]:
    """(examples or tokens in the batch, ``/ image``/``/ token``/``/ example``)."""
    from xla_cost import zoo

    try:
        spec = zoo.get_spec(row["model"])
    except InputError:
        return row["batch_size"], "/ example"
    if spec.input_dtype != "float":
        seq = row.get("seq_len") or spec.defaults.get("seq_len") or 1
        return row["batch_size"] * int(seq), "/ token"
    if row["model"] in _NET_NAMES:
        return row["batch_size"], "/ example"
    return row["batch_size"], "/ image"


def _architecture_text(data: _Data) -> list[str]:
    out = []
    resnets = [r for m, rs in _by_model(data.resnets).items() for r in rs]
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
            f"- ResNets ({_join(names)}): "
            f"backward/forward {_range([r['backward_to_forward'] for r in resnets])} over batch sizes "
            f"{_join([str(b) for b in sorted(by_batch)])}"
            + (f", rising with depth ({_join([f'{_r(v)}' for v in at_small])} at batch {small}: the 7×7 stem, a "
               "first layer at 1:1, weighs less in a deeper net)" if rising else "")
            + "; the update moves it by at most "
            f"{_r(max(w - r for w, r in zip(with_update, by_batch[small])))} at batch {small}. Seed 001 saw "
            "ResNets diverge from 2:1 and blamed the profiler's undercounting; XLA's counts sit just below 2:1."
        )
    transformers = [r for m, rs in _by_model(data.transformers).items() for r in rs]
    if transformers:
        looped = [r["model"] for r in transformers if r.get("forward_source") == "xla+loops"]
        out.append(
            f"- Transformers at batch 1 (one sequence of tokens): backward/forward "
            f"{_range([r['backward_to_forward'] for r in transformers])}; with the update "
            f"{_range([r['backward_with_update_to_forward'] for r in transformers])}. Every layer but the "
            "token embedding (a gather, no multiply) computes both gradients."
            + (f" {_join(looped)} {'scan their' if len(looped) > 1 else 'scans its'} layers (`nn.scan`); XLA "
               "counts a loop body once, and the figures are corrected for the iterations it missed "
               "(`xla+loops`)." if looped else "")
        )
    return out


def _within(value: float | None, target: float, tolerance: float) -> bool:
    return value is not None and abs(value - target) <= tolerance * abs(target)


# --------------------------------------------------------------------------- page: optimizers


def _optimizer_runs(data: _Data) -> dict[tuple[str, str], dict[str, Any]]:
    """(model, optimizer) -> the analysed run at batch 1."""
    return {(r["model"], r["optimizer"]): r for r in _records(_ok(data.optimizers.runs))}


def _grad_by_batch(data: _Data, model: str) -> dict[int, int]:
    """The gradient program's FLOP (independent of the optimizer) by batch size."""
    out: dict[int, int] = {}
    for result in (data.seed_batch, data.resnets):
        for row in _by_model(result).get(model, []):
            out[row["batch_size"]] = row["grad_flops"]
    for (m, _), row in _optimizer_runs(data).items():
        if m == model:
            out.setdefault(row["batch_size"], row["grad_flops"])
    return dict(sorted(out.items()))


def _fig_per_parameter(data: _Data) -> bytes:
    runs = _optimizer_runs(data)
    models = [m for m in data.plan.optimizer_models if any(k[0] == m for k in runs)]
    optimizers = [o for o in data.plan.optimizers or () if any(k[1] == o for k in runs)]

    def draw() -> Figure:
        from matplotlib.patches import Patch

        fig, axes = _figure(9.0, 0.5 * len(optimizers) + 1.9)
        ax = axes[0][0]
        ys = list(range(len(optimizers)))[::-1]
        top = 0.0
        for y, name in zip(ys, optimizers):
            rows = [runs[(m, name)] for m in models if (m, name) in runs]
            flops = [r["update_flops"] / r["parameters"] for r in rows]
            trans = [(r["update_transcendentals"] or 0) / r["parameters"] for r in rows]
            low, high = min(flops), max(flops)
            ax.barh(y, low, 0.6, color=PASS_COLORS["update"])
            if _per(high) != _per(low):
                ax.barh(y, high - low, 0.6, left=low, color=PASS_COLORS["update"], alpha=0.45)
            t = max(trans)
            if t >= 0.005:
                ax.barh(y, t, 0.6, left=high, color="white", edgecolor="0.35", hatch="///")
            label = _range(flops, _per) + (f" + {_range(trans, _per)}" if t >= 0.005 else "")
            ax.annotate(label, (high + t, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=9)
            top = max(top, high + t)
        for name, value in (("sgd", SEED_SGD_FLOPS_PER_PARAMETER), ("adam", SEED_ADAM_FLOPS_PER_PARAMETER)):
            if name in optimizers:
                y = ys[optimizers.index(name)]
                ax.plot([value], [y + 0.42], marker="v", markersize=10, color="black", zorder=5)
                ax.annotate(f"seed 001: {value}", (value, y + 0.42), xytext=(8, 0), textcoords="offset points",
                            va="center", fontsize=9, fontweight="bold")
        ax.set_yticks(ys, optimizers)
        ax.set_xlim(0, max(top, SEED_ADAM_FLOPS_PER_PARAMETER) * 1.18)
        ax.set_ylim(-0.7, len(optimizers) - 0.2)
        ax.set_xlabel("update FLOP per parameter")
        ax.grid(axis="y", visible=False)
        handles = [
            Patch(color=PASS_COLORS["update"], label="FLOP per parameter"),
            Patch(color=PASS_COLORS["update"], alpha=0.45, label="range over the models (shape-dependent)"),
            Patch(facecolor="white", edgecolor="0.35", hatch="///", label="+ transcendentals (sqrt, rsqrt, pow)"),
        ]
        fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
        fig.suptitle(f"Optimizer update FLOP per parameter, as XLA counts it\n"
                     f"({_join([_net(m) for m in models])}; ▼ seed 001's estimate)")
        return fig

    return _png(draw)


def _fig_update_share(data: _Data) -> bytes:
    runs = _optimizer_runs(data)
    models = [m for m in data.plan.optimizer_models if len(_grad_by_batch(data, m)) > 1]
    optimizers = [o for o in data.plan.optimizers or () if any(k[1] == o for k in runs)]
    cols = min(2, len(models))
    rows_n = math.ceil(len(models) / cols)
    falling = True
    for model in models:
        grads = _grad_by_batch(data, model)
        falling &= all(a < b for a, b in zip(list(grads.values()), list(grads.values())[1:]))

    def draw() -> Figure:
        fig, axes = _figure(5.2 * cols, 3.8 * rows_n + 0.8, rows_n, cols)
        flat = [ax for row in axes for ax in row]
        for ax, model in zip(flat, models):
            grads = _grad_by_batch(data, model)
            batches = list(grads)
            for color, name in zip(_LINE_COLORS, optimizers):
                row = runs.get((model, name))
                if row is None:
                    continue
                shares = [100 * row["update_flops"] / (grads[b] + row["update_flops"]) for b in batches]
                ax.plot(batches, shares, marker="o", markersize=3, color=color, label=name)
            _log2_batch_axis(ax, _thin(batches))
            ax.set_yscale("log")
            ax.set_ylabel("update share of train-step FLOP (%, log)")
            ax.set_title(_net(model))
        for ax in flat[len(models):]:
            ax.set_visible(False)
        flat[0].legend(loc="lower left", frameon=False, ncols=2, fontsize=8)
        fig.suptitle("The update's share of the training step falls with the batch size" if falling
                     else "The update's share of the training step against the batch size")
        return fig

    return _png(draw)


def _breakdown_text(b: UpdateBreakdown) -> str:
    """``mul 5, add 4, div 3, integer_pow 1 = 13 FLOP + sqrt 1``; per-step work after."""
    flops, trans, step_f, step_t = b.per_parameter()
    parts = ", ".join(f"`{k}` {_per(v)}" for k, v in sorted(flops.items(), key=lambda kv: (-kv[1], kv[0])))
    text = f"{parts} = {_per(sum(flops.values()))} FLOP"
    if trans:
        text += " + " + ", ".join(f"`{k}` {_per(v)}" for k, v in sorted(trans.items())) + " transcendental"
    extra = []
    if step_f:
        extra.append(f"{_int(step_f)} FLOP")
    if step_t:
        extra.append(f"{_int(step_t)} transcendentals")
    if extra:
        text += f"; per step, whatever the size: {' and '.join(extra)}"
    return text


def _optimizers_page(data: _Data) -> dict[str, bytes]:
    plan = data.plan
    runs = _optimizer_runs(data)
    models = [m for m in plan.optimizer_models if any(k[0] == m for k in runs)]
    optimizers = [o for o in plan.optimizers or () if any(k[1] == o for k in runs)]
    breakdown = data.update_breakdown
    files: dict[str, bytes] = {}
    lines = [
        "# Optimizer updates: FLOP per parameter",
        "",
        "Seed 001 (appendix B) assumes SGD for its ratios (2 FLOP per parameter: `w += a·dw`) and "
        f"estimates Adam at ~{SEED_ADAM_FLOPS_PER_PARAMETER} FLOP per parameter. Here is what XLA counts for "
        "each optimizer `xla_cost` knows by name (optax, textbook hyper-parameters), with the reason read "
        f"from the update's jaxpr. The update program is `optimizer.update` + `optax.apply_updates`, analysed at "
        "batch 1 (it does not depend on the batch); square roots and other transcendental functions are "
        "counted apart from FLOP, as XLA counts them.",
        "",
    ]
    if runs:
        files["figures/optimizers-per-parameter.png"] = _fig_per_parameter(data)
        header = ["optimizer", *[f"{_net(m)} FLOP / param" for m in models], "transcendentals / param", "seed 001"]
        rows = []
        for name in optimizers:
            cells: list[str] = [name]
            trans = []
            for model in models:
                row = runs.get((model, name))
                cells.append("failed" if row is None else _sig(row["update_flops"] / row["parameters"]))
                if row is not None:
                    trans.append((row["update_transcendentals"] or 0) / row["parameters"])
            cells.append(_range(trans, lambda v: _sig(v, 3)) if trans else "unknown")
            seed = {"sgd": str(SEED_SGD_FLOPS_PER_PARAMETER), "adam": f"~{SEED_ADAM_FLOPS_PER_PARAMETER}"}
            cells.append(seed.get(name, ""))
            rows.append(cells)
        lines += [
            "![Update FLOP per parameter of every optimizer](figures/optimizers-per-parameter.png)",
            "",
            _table(header, rows),
            "",
            *_optimizer_spread_text(data, models, optimizers),
            "",
        ]
    if breakdown:
        model = plan.breakdown_model
        params = next(iter(breakdown.values())).parameters
        lines += [
            "## Read from the jaxpr",
            "",
            f"The update's jaxpr on {_net(model)} ({_int(params)} parameters), primitive by primitive, per "
            "parameter (a primitive that runs on fewer than 0.5% of the parameters' elements is per-step "
            "work: learning-rate schedules, bias corrections, counters):",
            "",
        ]
        for name in optimizers:
            if name in breakdown:
                lines.append(f"- `{name}`: {_breakdown_text(breakdown[name])}.")
        lines += ["", *_adam_text(data), ""]
        gaps = _jaxpr_gaps(data, model, optimizers)
        if gaps:
            lines += [gaps, ""]
    share = _share_section(data, optimizers)
    if share:
        files["figures/optimizers-update-share.png"] = _fig_update_share(data)
        lines += share
    claims = [c for c in CLAIMS if c.page == "optimizers"]
    if claims:
        lines += ["## Seed 001's claims", ""]
        for claim in claims:
            measured, verdict = claim.check(data)
            lines.append(f"- **{claim.text}** {measured} — *{verdict}*")
        lines.append("")
    failures = _failures(data.optimizers)
    if failures:
        lines += ["## Configurations that did not analyse", "", *[f"- {f}" for f in failures], ""]
    lines.append(_regenerate_line())
    files["optimizers.md"] = _text("\n".join(lines))
    return files


def _optimizer_spread_text(data: _Data, models: Sequence[str], optimizers: Sequence[str]) -> list[str]:
    runs = _optimizer_runs(data)
    same, varies = [], []
    for name in optimizers:
        values = {_sig(runs[(m, name)]["update_flops"] / runs[(m, name)]["parameters"])
                  for m in models if (m, name) in runs}
        (same if len(values) == 1 else varies).append(name)
    out = []
    if same:
        out.append(f"- {_join([f'`{n}`' for n in same])}: the same per parameter on every model — elementwise "
                   "arithmetic on each parameter, its gradient and its moments.")
    if varies:
        out.append(f"- {_join([f'`{n}`' for n in varies])}: the figure depends on the model — per-tensor "
                   "reductions (norms, factored second moments) whose cost depends on the tensors' shapes.")
    return out


def _adam_text(data: _Data) -> list[str]:
    runs = _optimizer_runs(data)
    adam = [r for (m, o), r in runs.items() if o == "adam"]
    b = data.update_breakdown.get("adam")
    if not adam or b is None:
        return []
    flops, trans, step_f, step_t = b.per_parameter()
    per = adam[0]["update_flops"] / adam[0]["parameters"]
    per_t = (adam[0]["update_transcendentals"] or 0) / adam[0]["parameters"]
    divides = flops.get("div", 0.0)
    seed_terms = "; ".join(f"{name}: {count}" for name, count in SEED_ADAM_TERMS)
    # optax's Adam, as the jaxpr reads: moments 3 + 4 (mul, add, integer_pow for g^2), one div per bias
    # correction, and m_hat / (sqrt(v_hat) + eps) * -lr + w: add, div, mul, add. Say so only if that is
    # what the breakdown shows.
    expected = {"mul": 5, "add": 4, "div": 3, "integer_pow": 1}
    if {k: round(v, 2) for k, v in flops.items()} != expected or round(trans.get("sqrt", 0), 2) != 1:
        return [
            f"**Adam: {_sig(per)} FLOP + {_sig(per_t, 3)} transcendental per parameter** against seed 001's "
            f"~{SEED_ADAM_FLOPS_PER_PARAMETER} ({seed_terms}); the jaxpr's primitives are listed above."
        ]
    return [
        f"**Adam: {_sig(per)} FLOP + {_sig(per_t, 3)} transcendental per parameter, not ~{SEED_ADAM_FLOPS_PER_PARAMETER}.** "
        f"Seed 001 counts five terms per parameter ({seed_terms}). The moment updates cost what the seed "
        "says (`mul`, `add` and `integer_pow` for g²). The differences are in the other three: optax "
        "computes the bias-correction denominators 1 − β₁ᵗ and 1 − β₂ᵗ once per step, on scalars "
        f"({_int(step_f)} FLOP and {_int(step_t)} transcendentals per step, whatever the model), which leaves one "
        f"division per parameter for each correction ({_per(divides)} `div` per parameter with the step's "
        "m̂ / (√v̂ + ε)); and the square root is one transcendental, not a FLOP. What remains per parameter "
        "is the add of ε, the multiply by the learning rate and the add of `apply_updates`."
    ]


def _jaxpr_gaps(data: _Data, model: str, optimizers: Sequence[str]) -> str:
    runs = _optimizer_runs(data)
    gaps = []
    for name in optimizers:
        row = runs.get((model, name))
        b = data.update_breakdown.get(name)
        if row is None or b is None or not row["update_jaxpr_flops"]:
            continue
        ratio = row["update_flops"] / row["update_jaxpr_flops"]
        if abs(ratio - 1) > 0.005:
            gaps.append(f"`{name}` {_r(ratio)}")
    if not gaps:
        return (f"On {_net(model)} XLA's compiled count equals the jaxpr's within 0.5% for every optimizer.")
    return (
        f"XLA's compiled count over the jaxpr's on {_net(model)}: {_join(gaps)}; the others agree within 0.5%. "
        "Where they differ, XLA's fusion computes a small elementwise producer (the clipped or scaled "
        "gradient) once per consumer and counts it each time; the headline figures are XLA's."
    )


def _share_batches(batches: Sequence[int]) -> list[int]:
    """The smallest, middle and largest of ``batches`` (sorted, each once)."""
    batches = sorted(batches)
    return sorted({batches[0], batches[len(batches) // 2], batches[-1]})


def _share_section(data: _Data, optimizers: Sequence[str]) -> list[str]:
    runs = _optimizer_runs(data)
    models = [m for m in data.plan.optimizer_models if len(_grad_by_batch(data, m)) > 1]
    if not models:
        return []
    lines = [
        "## The update's share of the training step",
        "",
        "![Update share of the training step against batch size, per optimizer](figures/optimizers-update-share.png)",
        "",
        "The train step is `grad + update`: the gradient program does not depend on the optimizer and the "
        "update does not depend on the batch, so the share at batch B is update / (grad(B) + update), with "
        "grad(B) from the SGD sweeps of [the ratio page](backward-forward-ratio.md) and the update from the "
        "table above.",
        "",
    ]
    table_rows = []
    for model in models:
        grads = _grad_by_batch(data, model)
        for name in optimizers:
            row = runs.get((model, name))
            if row is None:
                continue
            table_rows.append([_net(model), name] + [
                f"{_pct_sig(row['update_flops'] / (grads[b] + row['update_flops']))} (batch {b})"
                for b in _share_batches(grads)
            ])
    width = max(len(r) for r in table_rows)
    table_rows = [r + [""] * (width - len(r)) for r in table_rows]
    lines += [
        _table(["model", "optimizer", *["smallest batch", "middle batch", "largest batch"][: width - 2]],
               table_rows, "ll" + "r" * (width - 2)),
        "",
    ]
    for model in models:
        grads = _grad_by_batch(data, model)
        first, last = min(grads), max(grads)
        shares = {
            name: tuple(runs[(model, name)]["update_flops"] / (grads[b] + runs[(model, name)]["update_flops"])
                        for b in (first, last))
            for name in optimizers if (model, name) in runs
        }
        if not shares:
            continue
        top = max(shares, key=lambda n: shares[n][0])
        lines.append(
            f"- {_net(model)}: at batch {first} the update is {_range([s[0] for s in shares.values()], _pct_sig)} "
            f"of the step's FLOP (`{top}` the most), at batch {last} "
            f"{_range([s[1] for s in shares.values()], _pct_sig)}."
        )
    lines.append("")
    return lines


# --------------------------------------------------------------------------- page: step-time

_SHARE_PHASES = ("forward", "backward", "update")


def _timing_cases(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """One dict per timed case of a `benchmarks/time_zoo.py` CSV: the case's
    columns and, per phase, its row (``phases``), in the file's order."""
    cases: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in _records(frame):
        key = (row["model"], row.get("config"), row["batch"], row["dtype"], row["optimizer"])
        case = cases.setdefault(key, {
            "model": row["model"], "config": row.get("config") or "", "batch": int(row["batch"]),
            "dtype": row["dtype"], "optimizer": row["optimizer"], "device": row["device"],
            "jax_version": row["jax_version"], "date": row["date"],
            "time_ratio": row["backward_to_forward_time"], "flop_ratio": row["backward_to_forward_flops"],
            "skipped": row.get("skipped"), "peak": row.get("peak_flops_per_s"),
            "bandwidth": row.get("peak_bandwidth"), "peak_source": row.get("peak_source"), "phases": {},
        })
        case["phases"][row["phase"]] = row
    return list(cases.values())


def _case_label(case: Mapping[str, Any]) -> str:
    config = f", {case['config'].replace(',', ', ')}" if case["config"] else ""
    return f"{case['model']} (batch {case['batch']}{config})"


def _shares(case: Mapping[str, Any]) -> dict[str, float] | None:
    values = {p: case["phases"].get(p, {}).get("share") for p in _SHARE_PHASES}
    return None if any(v is None for v in values.values()) else values  # type: ignore[return-value]


def _fig_step_shares(cases: Sequence[dict[str, Any]], device: str) -> bytes:
    dtypes = list(dict.fromkeys(c["dtype"] for c in cases))

    def draw() -> Figure:
        per = max(sum(1 for c in cases if c["dtype"] == d and _shares(c)) for d in dtypes)
        fig, axes = _figure(6.2 * len(dtypes), 0.34 * (per + 1) + 1.6, 1, len(dtypes), sharey=False)
        for ax, dtype in zip(axes[0], dtypes):
            chosen = [c for c in cases if c["dtype"] == dtype and _shares(c)]
            labels = ["V100, DDP paper (seed 000)"] + [f"{c['model']} · {c['optimizer']}" for c in chosen]
            bars = [dict(DDP_SHARES)] + [_shares(c) for c in chosen]
            ys = list(range(len(bars)))[::-1]
            for y, shares in zip(ys, bars):
                left = 0.0
                for phase in _SHARE_PHASES:
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

        handles = [Patch(color=PASS_COLORS[p], label=p) for p in _SHARE_PHASES]
        fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
        fig.suptitle("Measured share of step time per phase, against the V100's 23 / 74 / 3 (seed 000)")
        return fig

    return _png(draw)


def _fig_time_vs_flop(cases: Sequence[dict[str, Any]], device: str) -> bytes:
    usable = [c for c in cases if c["time_ratio"] is not None and c["flop_ratio"] is not None]
    dtypes = list(dict.fromkeys(c["dtype"] for c in usable))
    markers = {"sgd": "o", "adam": "s"}

    def draw() -> Figure:
        fig, axes = _figure(8.0, 5.6)
        ax = axes[0][0]
        for color, dtype in zip(_LINE_COLORS, dtypes):
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
        _reference(ax, ddp, f"V100 (seed 000): {ddp:.1f}")
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        ax.set_xlabel("backward / forward FLOP (counted)")
        ax.set_ylabel("backward / forward time (measured)")
        handles = [ax.plot([], [], "o", color=color, label=dtype)[0] for color, dtype in zip(_LINE_COLORS, dtypes)]
        handles += [ax.plot([], [], markers[o], color="0.3", label=o)[0] for o in markers]
        ax.legend(handles=handles, loc="upper left", frameon=False)
        fig.suptitle(f"Measured time ratio against FLOP ratio ({device})")
        return fig

    return _png(draw)


def _fig_mfu(cases: Sequence[dict[str, Any]], device: str) -> bytes:
    chosen = [c for c in cases if c["dtype"] == "float32" and c["optimizer"] == "sgd"] or list(cases)

    def draw() -> Figure:
        fig, axes = _figure(9.0, 4.6)
        ax = axes[0][0]
        width = 0.8 / len(_SHARE_PHASES)
        xs = list(range(len(chosen)))
        for i, phase in enumerate(_SHARE_PHASES):
            values = [100 * (c["phases"].get(phase, {}).get("mfu") or 0) for c in chosen]
            ax.bar([x - 0.4 + width * (i + 0.5) for x in xs], values, width, color=PASS_COLORS[phase], label=phase)
        ax.set_xticks(xs, [c["model"] for c in chosen], rotation=20, ha="right")
        ax.set_ylabel("MFU: achieved FLOP/s ÷ peak (%)")
        ax.legend(loc="upper left", frameon=False)
        ax.grid(axis="x", visible=False)
        fig.suptitle(f"Model FLOP utilisation per phase, float32, SGD ({device})")
        return fig

    return _png(draw)


def _step_time_page(data: _Data) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    lines = [
        "# Measured step time: forward, backward and update",
        "",
        "Seed 000 quotes the PyTorch DDP paper (Li et al. 2020, Figure 6): on a V100, ResNet-50 and BERT "
        f"spend {_pct(DDP_SHARES['forward'], 0)} / {_pct(DDP_SHARES['backward'], 0)} / "
        f"{_pct(DDP_SHARES['update'], 0)} of the step's forward + backward + optimizer time in each phase, so "
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
        cases = _timing_cases(frame)
        if not cases:
            continue
        device = cases[0]["device"]
        slug = _slug(path.stem)
        files[f"figures/step-time-{slug}-shares.png"] = _fig_step_shares(cases, device)
        files[f"figures/step-time-{slug}-ratio.png"] = _fig_time_vs_flop(cases, device)
        files[f"figures/step-time-{slug}-mfu.png"] = _fig_mfu(cases, device)
        peak = cases[0]["peak"]
        bandwidth = cases[0]["bandwidth"]
        lines += [
            f"## {device}: {_data_link(path)}",
            "",
            f"{len(cases)} cases measured with jax {cases[0]['jax_version']} on {cases[0]['date']} "
            + ("(`benchmarks/time_zoo.py --reduced`, the models at CPU-sized shapes)" if device.lower() == "cpu"
               else "(`benchmarks/time_zoo.py`)")
            + (f"; peak {_sig(peak / 1e12, 3)} TFLOP/s and {_sig(bandwidth / 1e9, 3)} GB/s ({cases[0]['peak_source']})"
               if peak and bandwidth else "") + ".",
            "",
        ]
        if device.lower() == "cpu":
            lines += [
                "**This is CPU data** (a 2-core machine, milliseconds-scale runs, noisy: about ±30% from run to "
                "run on the shared machine). bfloat16 on a CPU is emulated in float32 and says nothing about a "
                "GPU. No GPU has run `benchmarks/time_zoo.py` for this page yet"
                + ("." if not gpu else f"; GPU data: {_join([_data_link(p) for p in gpu])}.")
                + " The GPU run (`python benchmarks/time_zoo.py` on the GPU; its CSV committed under "
                "`reports/data/`, and this page rebuilt) will add: the shares on the hardware class of seed 000 "
                "(ResNet-50 at batch 32–256, BERT-base at sequence 128, GPT-2 small at 1024), MFU against the "
                "datasheet's tensor-core peak, bfloat16 against float32 on hardware that has it, and whether "
                "the backward pass's 2:1 FLOP turns into 3:1 time there.",
                "",
            ]
        lines += [
            "![Measured share of step time per phase against the V100's](figures/step-time-" + slug + "-shares.png)",
            "",
            _timing_table(cases),
            "",
            *_timing_text(cases),
            "",
            "![Measured backward/forward time ratio against the FLOP ratio](figures/step-time-" + slug + "-ratio.png)",
            "",
            "![MFU per phase](figures/step-time-" + slug + "-mfu.png)",
            "",
        ]
    claims = [c for c in CLAIMS if c.page == "step-time"]
    if claims:
        lines += ["## The seeds' claims about time", ""]
        for claim in claims:
            measured, verdict = claim.check(data)
            lines.append(f"- **{claim.text}** {measured} — *{verdict}*")
        lines.append("")
    lines.append(_regenerate_line().replace("; the counts come from `xla_cost.sweep` through the results store",
                                            "; the times come from the committed CSV files"))
    files["step-time.md"] = _text("\n".join(lines))
    return files


def _timing_table(cases: Sequence[dict[str, Any]]) -> str:
    rows = []
    for case in cases:
        shares = _shares(case) or {}
        step = case["phases"].get("train_step", {})
        ratio = (step.get("median_s") / step.get("roofline_s")
                 if step.get("median_s") and step.get("roofline_s") else None)
        rows.append([
            _case_label(case), case["dtype"], case["optimizer"],
            *[_pct(shares.get(p), 0) if shares else "skipped" for p in _SHARE_PHASES],
            _r(case["time_ratio"], 2), _r(case["flop_ratio"], 2),
            _pct(step.get("mfu")), _r(ratio, 2) if ratio else "unknown", step.get("bound") or "",
        ])
    return _table(
        ["case", "dtype", "optimizer", "forward", "backward", "update", "bwd/fwd time", "bwd/fwd FLOP",
         "train-step MFU", "time / roofline", "bound"],
        rows, "lll" + "r" * 7 + "l",
    )


def _timing_text(cases: Sequence[dict[str, Any]]) -> list[str]:
    out = []
    for dtype in dict.fromkeys(c["dtype"] for c in cases):
        for optimizer in dict.fromkeys(c["optimizer"] for c in cases):
            chosen = [c for c in cases if c["dtype"] == dtype and c["optimizer"] == optimizer and _shares(c)]
            if not chosen:
                continue
            ddp = [c for c in chosen if c["model"] in DDP_MODELS]
            parts = [f"{p} {_range([_shares(c)[p] for c in chosen], lambda v: _pct(v, 0))}" for p in _SHARE_PHASES]
            text = f"- {dtype}, {optimizer}: {', '.join(parts)} over {len(chosen)} models"
            if ddp:
                text += ("; " + "; ".join(
                    f"{c['model']} {' / '.join(_pct(_shares(c)[p], 0) for p in _SHARE_PHASES)}" for c in ddp)
                    + f" (V100: {' / '.join(_pct(DDP_SHARES[p], 0) for p in _SHARE_PHASES)})")
            top = max(chosen, key=lambda c: _shares(c)["update"])
            out.append(text + f". The largest update share: {top['model']}, {_pct(_shares(top)['update'], 0)}.")
    timed = [c for c in cases if c["time_ratio"] is not None and c["flop_ratio"] is not None]
    for dtype in dict.fromkeys(c["dtype"] for c in timed):
        chosen = [c for c in timed if c["dtype"] == dtype]
        out.append(
            f"- {dtype}: measured backward/forward time {_range([c['time_ratio'] for c in chosen], _r2)} "
            f"against a FLOP ratio of {_range([c['flop_ratio'] for c in chosen], _r2)}."
        )
    bounds = [p.get("bound") for c in cases for name, p in c["phases"].items() if name in _SHARE_PHASES]
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
        out.append(f"- bfloat16 train step / float32 train step: {_range(pairs, _r2)}× the time.")
    return out


# --------------------------------------------------------------------------- page: zoo


def _kaplan_per_token(config: Mapping[str, Any]) -> tuple[float, float]:
    """(adjusted Kaplan forward FLOP per token, Kaplan's N): Kaplan et al. 2020,
    Table 1, 2N + 2 n_layer n_ctx d_model with N = 2 d_model n_layer (2 d_model
    + d_ff) the non-embedding parameters, adjusted for what these models
    compute: attention scores over all n_ctx² pairs (masked, not skipped:
    4 n_layer n_ctx d_model) and the output head (2 d_model V)."""
    d, n_layer = config["d_model"], config["n_layer"]
    d_ff = config.get("d_ff") or 4 * d
    n = n_layer * 2 * d * (2 * d + d_ff)
    return 2 * n + 4 * n_layer * config["seq_len"] * d + 2 * d * config["vocab_size"], n


def _analytic(model: str, parameters: int) -> tuple[float, str] | None:
    """(analytic forward FLOP per example or token, how) for a zoo model."""
    from xla_cost import zoo

    spec = zoo.get_spec(model)
    if model in PUBLISHED_GMAC:
        gmac, source = PUBLISHED_GMAC[model]
        return 2e9 * gmac, f"2 × {gmac} GMAC ({source})"
    macs = _textbook_macs(model, spec.defaults)
    if macs is not None:
        return 2 * sum(macs.values()), "2 × MAC of the layers"
    if spec.input_dtype != "float" and {"d_model", "n_layer", "seq_len", "vocab_size"} <= set(spec.defaults):
        return _kaplan_per_token(spec.defaults)[0], "Kaplan, adjusted"
    return None


def _published_match(model: str, parameters: int) -> str:
    if model not in PUBLISHED_PARAMETERS:
        return "—"
    value, source = PUBLISHED_PARAMETERS[model]
    if parameters == value:
        return f"= {_int(value)} ({source})"
    return f"{_sig(value / 1e9, 2 if value < 1e10 else 3)}B, {_r(parameters / value, 3)}× ({source}, rounded)" \
        if value >= 1e9 else f"{_sig(value / 1e6, 3)}M, {_r(parameters / value, 3)}× ({source}, rounded)"


def _fig_zoo(rows: Sequence[dict[str, Any]]) -> bytes:
    usable = [r for r in rows if r["_analytic"] is not None]

    def draw() -> Figure:
        fig, axes = _figure(9.0, 0.3 * len(usable) + 1.6)
        ax = axes[0][0]
        ys = list(range(len(usable)))[::-1]
        for y, row in zip(ys, usable):
            ratio = row["_per"] / row["_analytic"][0]
            color = PASS_COLORS["forward"] if ratio < 1 else PASS_COLORS["backward"]
            ax.plot([1, ratio], [y, y], color=color, linewidth=2)
            ax.plot([ratio], [y], "o", color=color)
            ax.annotate(f"{ratio:.3f}", (ratio, y), xytext=(5 if ratio >= 1 else -5, 0), textcoords="offset points",
                        ha="left" if ratio >= 1 else "right", va="center", fontsize=8)
        ax.set_yticks(ys, [f"{r['model']} ({r['_analytic'][1]})" for r in usable])
        ax.axvline(1, color="0.3", linewidth=1)
        ratios = [r["_per"] / r["_analytic"][0] for r in usable]
        ax.set_xlim(min(min(ratios), 0.95) - 0.03, max(max(ratios), 1.05) + 0.03)
        ax.set_xlabel("counted forward FLOP ÷ analytic forward FLOP")
        ax.grid(axis="y", visible=False)
        fig.suptitle("XLA's forward count against the analytic figure (left of 1: fewer FLOP counted)")
        return fig

    return _png(draw)


def _zoo_page(data: _Data) -> dict[str, bytes]:
    from xla_cost import zoo

    files: dict[str, bytes] = {}
    runs = {r["model"]: r for r in _records(_ok(data.zoo.runs))}
    times: dict[str, float] = {}
    time_file = data.analysis_time
    if time_file is not None:
        for row in _records(time_file[1]):
            if row.get("seconds") is not None:
                times[row["model"]] = float(row["seconds"])
    rows = []
    for model in data.plan.zoo or ():
        if model not in runs:
            continue
        run = dict(runs[model])
        count, unit = _per_unit(run)
        run["_count"], run["_unit"] = count, unit
        run["_per"] = run["forward_flops"] / count
        run["_analytic"] = _analytic(model, run["parameters"])
        rows.append(run)
    lines = [
        "# The model zoo",
        "",
        "Every model of `xla_cost.zoo` at batch 1 (one image, one example, or one sequence of "
        "`seq_len` tokens), SGD, float32, counted by XLA (`xla-cost analyze NAME`). FLOP are per example or "
        "per token; the train step is `grad + update`. `*`: the model scans its layers (`nn.scan`), XLA "
        "counts the loop body once and the figure is corrected for the missed iterations.",
        "",
    ]
    if rows:
        files["figures/zoo-analytic.png"] = _fig_zoo(rows)
        table = []
        for r in rows:
            count, unit = r["_count"], r["_unit"]
            star = " *" if r.get("forward_source") == "xla+loops" else ""
            analytic = r["_analytic"]
            table.append([
                f"`{r['model']}`", _int(r["parameters"]), _published_match(r["model"], r["parameters"]),
                unit.removeprefix("/ "),
                _sig(r["forward_flops"] / count / 1e9) + star,
                "—" if analytic is None else f"{_sig(analytic[0] / 1e9)} ({analytic[1]})",
                "—" if analytic is None else _r(r["_per"] / analytic[0]),
                _sig(r["backward_flops"] / count / 1e9), _r(r["backward_to_forward"]),
                _sig(r["update_flops"] / count / 1e9),
                _sig(r["train_step_flops"] / count / 1e9),
                f"{times[r['model']]:.1f}" if r["model"] in times else "—",
            ])
        lines += [
            _table(["model", "parameters", "published", "per", "forward GFLOP", "analytic GFLOP",
                    "counted / analytic", "backward GFLOP", "bwd / fwd", "update GFLOP (SGD)",
                    "train step GFLOP", "analysis s"], table, "lrllrlrrrrrr"),
            "",
            *_zoo_text(data, rows, time_file),
            "",
            "![Counted forward FLOP against the analytic figure](figures/zoo-analytic.png)",
            "",
        ]
    failures = _failures(data.zoo)
    if failures:
        lines += ["## Configurations that did not analyse", "", *[f"- {f}" for f in failures], ""]
    sources = sorted({zoo.get_spec(r["model"]).source for r in rows if zoo.get_spec(r["model"]).source})
    if sources:
        lines += ["Architectures: " + "; ".join(sources) + ".", ""]
    lines.append(_regenerate_line())
    files["zoo.md"] = _text("\n".join(lines))
    return files


def _zoo_text(data: _Data, rows: Sequence[dict[str, Any]], time_file: tuple[pathlib.Path, pd.DataFrame] | None) -> list[str]:
    out = []
    exact = [r["model"] for r in rows if r["model"] in PUBLISHED_PARAMETERS
             and r["parameters"] == PUBLISHED_PARAMETERS[r["model"]][0]]
    rounded = [r for r in rows if r["model"] in PUBLISHED_PARAMETERS and r["model"] not in exact]
    if exact:
        out.append(f"- Parameters: {len(exact)} models equal their published counts exactly"
                   + (f"; the GPT-3 sizes against Table 2.1's rounded figures: "
                      f"{_range([r['parameters'] / PUBLISHED_PARAMETERS[r['model']][0] for r in rounded])}×"
                      if rounded else "") + ".")
    cnn = [r for r in rows if r["model"] in PUBLISHED_GMAC]
    if cnn:
        out.append(
            f"- CNNs and ViT against 2 × the published multiply-accumulates: "
            f"{_range([r['_per'] / r['_analytic'][0] for r in cnn])}. The published tables count kernel taps on "
            "padding; XLA counts only taps on real input, then adds BatchNorm, ReLU, pooling, softmax and the "
            "loss, which the tables leave out."
        )
    seeds = [r for r in rows if r["model"] in _NET_NAMES and r["_analytic"] is not None]
    if seeds:
        out.append(
            f"- Seed 001's nets against 2 × their layers' multiply-accumulates: "
            f"{_join([_net(r['model']) + ' ' + _r(r['_per'] / r['_analytic'][0]) for r in seeds])} "
            "(ReLUs, pooling and the loss added; padding taps and OneNet's length-1 contraction, counted as a "
            "multiply, removed)."
        )
    text = [r for r in rows if r["_analytic"] is not None and r["_analytic"][1].startswith("Kaplan")]
    if text:
        out.append(
            "- Transformers against Kaplan et al. (2020, Table 1), 2N + 2·n_layer·n_ctx·d_model per token with "
            "N the non-embedding parameters, adjusted for the attention scores of all n_ctx² pairs (the causal "
            "mask is applied, not exploited) and the output head (2·d_model·V): "
            f"{_range([r['_per'] / r['_analytic'][0] for r in text])}; the rest is LayerNorm, softmax, GELU, "
            "biases and the loss."
        )
    others = [r for r in rows if r["model"] not in _NET_NAMES]
    if others:
        out.append(f"- Forward + backward cost {_range([1 + r['backward_to_forward'] for r in others], _r2)}× the "
                   "forward pass outside seed 001's nets (Kaplan's rule of thumb: 3×).")
    if time_file is not None:
        path, frame = time_file
        records = _records(frame)
        first = records[0] if records else {}
        loads = [float(r["load_average"]) for r in records if r.get("load_average") is not None]
        out.append(
            f"- Analysis seconds: one `analyze()` call per model at batch 1 (SGD, compiled: four programs and "
            f"the jaxpr counts), one model after another, measured by `benchmarks/time_analysis.py` on "
            f"{first.get('device', 'the machine')} ({first.get('cores', '?')} cores, jax "
            f"{first.get('jax_version', '?')}, {first.get('date', '?')}) with the compilation cache off"
            + (f", load average {_range(loads, lambda v: f'{v:.1f}')} (a shared machine: about ±30% from run to run)"
               if loads else "")
            + f": {_data_link(path)}."
        )
    else:
        out.append("- Analysis seconds: no `reports/data/analysis_time_*.csv` is committed "
                   "(`python benchmarks/time_analysis.py` writes it).")
    return out


# --------------------------------------------------------------------------- claims


@dataclasses.dataclass(frozen=True)
class Claim:
    """One quantitative claim of the seeds and how this project tests it.

    Attributes:
      seeds: the seed documents that make it (``001``, ``000``, ...).
      text: the claim, as the seed states it (shortened).
      page: the page that shows the measurement.
      check: `_Data` -> (what the project measured, the verdict by the rules of
        `claims.md`: ``confirmed``, ``refuted``, ``depends on ...``, ``not
        testable here ...``).
    """

    seeds: str
    text: str
    page: str
    check: Callable[[_Data], tuple[str, str]]


def _confirmed(ok: bool) -> str:
    return "confirmed" if ok else "refuted"


_NOT_ANALYSED = ("not analysed in this plan", "not tested")


def _c_first_layer(data: _Data) -> tuple[str, str]:
    first, _ = _first_and_other_layers(data)
    if not first:
        return _NOT_ANALYSED
    plain = [(m, p, r) for m, p, r in first if m not in _SIZE_ONE_INPUT]
    odd = [(m, p, r) for m, p, r in first if m in _SIZE_ONE_INPUT]
    text = "First layers' backward/forward: " + _join([f"{_net(m)} {p} {_r(r)}" for m, p, r in first]) + "."
    if odd:
        text += (" OneNet's fc1 has one input feature: its forward matmul is a length-1 contraction that XLA "
                 "counts as a multiply (1 FLOP, not 2).")
    ok = all(_within(r, 1.0, TOLERANCE) for *_, r in plain)
    verdict = _confirmed(ok)
    if ok and odd and not all(_within(r, 1.0, TOLERANCE) for *_, r in odd):
        verdict = "confirmed where the first layer's input has more than one feature (XLA's length-1 convention)"
    return text, verdict


def _c_other_layers(data: _Data) -> tuple[str, str]:
    _, other = _first_and_other_layers(data)
    if not other:
        return _NOT_ANALYSED
    values = [r for *_, r in other]
    text = (f"Backward/forward of the {len(other)} other parametrised layers at batch {data.plan.layer_batch} "
            f"(DeeperConvNet: depth {(_deepest(data) or {}).get('depth')}): {_range(values)}.")
    one = [r["backward_to_forward"] for m in data.plan.seed_nets if m in ("linear_net", "one_net")
           for r in (_seed_layer_rows(data, m, 1) if 1 in data.plan.batch_sizes else [])
           if r["path"] not in (REMAINDER, _FIRST_LAYER[m])]
    ok = all(_within(v, 2.0, TOLERANCE) for v in values)
    if one:
        text += (f" At batch 1 dense layers read {_range(one)}: a weight gradient over one example is an outer "
                 "product, which XLA counts as M·N multiplies, not 2·M·N.")
        if ok:
            return text, "confirmed from batch 2 on; at batch 1 it depends on counting a length-1 contraction as 2 FLOP"
    return text, _confirmed(ok)


def _all_ratio_rows(data: _Data) -> list[dict[str, Any]]:
    rows = [r for rs in _seed_runs(data).values() for r in rs] + _depth_runs(data) + _architecture_rows(data)
    return [r for r in rows if r.get("backward_with_update_to_forward") is not None]


def _c_between_1_and_3(data: _Data) -> tuple[str, str]:
    rows = _all_ratio_rows(data)
    if not rows:
        return _NOT_ANALYSED
    with_update = [r["backward_with_update_to_forward"] for r in rows]
    without = [r["backward_to_forward"] for r in rows]
    low = min(rows, key=lambda r: r["backward_to_forward"])
    text = (f"Over {len(rows)} configurations (seed nets at every batch size, DeeperConvNet at every depth, "
            f"ResNets, transformers): (backward + update)/forward {_range(with_update)}; backward/forward alone "
            f"{_range(without)} (lowest: {_net(low['model'])} at batch {low['batch_size']}).")
    ok = min(with_update) >= 1 - TOLERANCE and max(with_update) <= 3 * (1 + TOLERANCE)
    return text, _confirmed(ok)


def _c_classic(data: _Data) -> tuple[str, str]:
    rows = []
    resnets = _by_model(data.resnets)
    for model, runs in resnets.items():
        rows.append((f"{model} b{runs[-1]['batch_size']}", runs[-1]["backward_with_update_to_forward"]))
    deepest = _deepest(data)
    if deepest:
        rows.append((f"DeeperConvNet depth {deepest['depth']}", deepest["backward_with_update_to_forward"]))
    if not rows:
        return _NOT_ANALYSED
    values = [v for _, v in rows]
    return (f"(backward + update)/forward of deep CNNs at their largest batch: {_range(values)} "
            f"({_join([f'{n} {_r(v)}' for n, v in rows])})."), _confirmed(all(_within(v, 2.0, TOLERANCE) for v in values))


def _c_three(data: _Data) -> tuple[str, str]:
    rows = _seed_runs(data).get("one_net")
    if not rows:
        return _NOT_ANALYSED
    peak = max(rows, key=lambda r: r["backward_with_update_to_forward"])
    text = (f"OneNet's largest (backward + update)/forward: {_r(peak['backward_with_update_to_forward'])}, at batch "
            f"{peak['batch_size']}, where backward/forward is {_r(peak['backward_to_forward'])}: XLA counts a "
            "dense weight gradient over one example as M·N multiplies, half of seed 001's 2·M·N.")
    if _within(peak["backward_with_update_to_forward"], 3.0, TOLERANCE):
        return text, "confirmed"
    return text, ("depends on the counting convention: 3:1 needs a length-1 contraction counted as 2 FLOP "
                  "per multiply-add; XLA's counts peak below it")


def _c_converges(model: str, target: float) -> Callable[[_Data], tuple[str, str]]:
    def check(data: _Data) -> tuple[str, str]:
        rows = _seed_runs(data).get(model)
        if not rows:
            return _NOT_ANALYSED
        first, last = rows[0], rows[-1]
        text = (f"{_net(model)}'s backward/forward: {_r(first['backward_to_forward'])} at batch {first['batch_size']}, "
                f"{_r(last['backward_to_forward'])} at batch {last['batch_size']}; with the update "
                f"{_r(first['backward_with_update_to_forward'])} → {_r(last['backward_with_update_to_forward'])}.")
        return text, _confirmed(_within(last["backward_with_update_to_forward"], target, TOLERANCE)
                                and _within(last["backward_to_forward"], target, TOLERANCE))

    return check


def _c_cnn_update(data: _Data) -> tuple[str, str]:
    rows = _seed_runs(data).get("conv_net")
    if not rows:
        return _NOT_ANALYSED
    values = [r["backward_with_update_to_forward"] for r in rows]
    share = max(r["update_flops"] / r["train_step_flops"] for r in rows)
    spread = (max(values) - min(values)) / min(values)
    text = (f"ConvNet's (backward + update)/forward is {_range(values)} from batch {rows[0]['batch_size']} to "
            f"{rows[-1]['batch_size']}; the update is at most {_pct(share, 4)} of the step "
            f"({_int(rows[0]['parameters'])} parameters against {_sig(rows[0]['forward_flops'] / rows[0]['batch_size'] / 1e6)} "
            "MFLOP per image forward).")
    return text, _confirmed(spread < 0.01 and share < 0.01)


def _c_update_constant(data: _Data) -> tuple[str, str]:
    runs = _seed_runs(data)
    if not runs:
        return _NOT_ANALYSED
    parts, ok = [], True
    for model, rows in runs.items():
        same = len({r["update_flops"] for r in rows}) == 1
        growth = rows[-1]["forward_flops"] / rows[0]["forward_flops"]
        batches = rows[-1]["batch_size"] / rows[0]["batch_size"]
        ok &= same and _within(growth, batches, TOLERANCE)
        parts.append(f"{_net(model)} update {'constant' if same else 'varies'}, forward ×{_sig(growth)}")
    first = next(iter(runs.values()))
    return (f"From batch {first[0]['batch_size']} to {first[-1]['batch_size']} (×{first[-1]['batch_size'] // first[0]['batch_size']}): "
            + "; ".join(parts) + "."), _confirmed(ok)


def _c_linear_flops(data: _Data) -> tuple[str, str]:
    batch = data.plan.layer_batch
    parts, values, odd = [], [], []
    for model in data.plan.seed_nets:
        for r in _seed_layer_rows(data, model):
            if not r["path"].startswith("fc") or not r["parameters"]:
                continue
            ratio = r["forward_flops"] / batch / r["parameters"]
            (odd if model in _SIZE_ONE_INPUT and r["path"] == _FIRST_LAYER[model] else values).append(ratio)
            parts.append(f"{_net(model)} {r['path']} {_r(ratio)}")
    if not parts:
        return _NOT_ANALYSED
    text = f"Forward FLOP per example ÷ parameters of the dense layers: {_join(parts)}."
    ok = all(_within(v, 2.0, TOLERANCE) for v in values)
    if ok and odd:
        return text + " OneNet's fc1 (one input feature) is a multiply plus the bias: 1 FLOP per parameter.", \
            "confirmed except for a single-input layer (XLA's length-1 convention)"
    return text, _confirmed(ok)


def _c_depth(data: _Data) -> tuple[str, str]:
    runs = _depth_runs(data)
    if len(runs) < 2:
        return _NOT_ANALYSED
    first, last = runs[0], runs[-1]
    text = (f"DeeperConvNet (batch {first['batch_size']}): {_r(first['backward_to_forward'])} at depth {first['depth']}, "
            f"{_r(last['backward_to_forward'])} at depth {last['depth']}.")
    return text, _confirmed(first["backward_to_forward"] < 2 * (1 - TOLERANCE)
                            and _within(last["backward_to_forward"], 2.0, TOLERANCE))


def _c_resnets(data: _Data) -> tuple[str, str]:
    rows = [r for rs in _by_model(data.resnets).values() for r in rs]
    if not rows:
        return _NOT_ANALYSED
    values = [r["backward_to_forward"] for r in rows]
    return (f"{_join(list(dict.fromkeys(r['model'] for r in rows)))} at batch sizes "
            f"{_join([str(b) for b in sorted({r['batch_size'] for r in rows})])}: backward/forward {_range(values)}, "
            f"with the update {_range([r['backward_with_update_to_forward'] for r in rows])}."), \
        _confirmed(all(_within(v, 2.0, TOLERANCE) for v in values))


def _c_relu_loss(data: _Data) -> tuple[str, str]:
    shares = []
    for model in data.plan.seed_nets:
        rows = _seed_layer_rows(data, model)
        rest = next((r for r in rows if r["path"] == REMAINDER), None)
        if rest is None:
            continue
        step = sum(r["forward_flops"] + r["backward_flops"] for r in rows)
        shares.append((model, (rest["forward_flops"] + rest["backward_flops"]) / step))
    if not shares:
        return _NOT_ANALYSED
    return ("Share of forward + backward FLOP outside the parametrised layers (ReLUs, pools, mean, loss) at batch "
            f"{data.plan.layer_batch}: {_join([f'{_net(m)} {_pct_sig(s, 2)}' for m, s in shares])}."), \
        _confirmed(all(s < TOLERANCE for _, s in shares))


def _optimizer_values(data: _Data, name: str) -> list[tuple[str, float, float]]:
    return [(m, r["update_flops"] / r["parameters"], (r["update_transcendentals"] or 0) / r["parameters"])
            for (m, o), r in _optimizer_runs(data).items() if o == name]


def _c_sgd(data: _Data) -> tuple[str, str]:
    values = _optimizer_values(data, "sgd")
    if not values:
        return _NOT_ANALYSED
    return (f"SGD's update per parameter: {_range([v for _, v, _ in values], _sig)} FLOP on "
            f"{_join([_net(m) for m, *_ in values])} (a multiply by the learning rate, an add)."), \
        _confirmed(all(_within(v, SEED_SGD_FLOPS_PER_PARAMETER, TOLERANCE) for _, v, _ in values))


def _c_adam(data: _Data) -> tuple[str, str]:
    values = _optimizer_values(data, "adam")
    if not values:
        return _NOT_ANALYSED
    flops = [v for _, v, _ in values]
    trans = [t for *_, t in values]
    ok = all(_within(v, SEED_ADAM_FLOPS_PER_PARAMETER, APPROX_TOLERANCE) for v in flops)
    return (f"Adam's update per parameter: {_range(flops, _sig)} FLOP + {_range(trans, lambda v: _sig(v, 3))} "
            "transcendental (the square root); optax computes the bias corrections once per step, not per "
            "parameter (see [optimizers.md](optimizers.md))."), _confirmed(ok)


def _c_beyond_three(data: _Data) -> tuple[str, str]:
    runs = _optimizer_runs(data)
    if not runs:
        return _NOT_ANALYSED
    best = max(runs.values(), key=lambda r: (r["backward_flops"] + r["update_flops"]) / r["forward_flops"])
    value = (best["backward_flops"] + best["update_flops"]) / best["forward_flops"]
    over = sorted({o for (m, o), r in runs.items()
                   if (r["backward_flops"] + r["update_flops"]) / r["forward_flops"] > 3})
    text = (f"Largest (backward + update)/forward at batch 1: {_r(value)} ({_net(best['model'])}, {best['optimizer']}); "
            f"above 3 with {_join(over) if over else 'none'}.")
    return text, _confirmed(value > 3)


def _c_adam_classic(data: _Data) -> tuple[str, str]:
    runs = _optimizer_runs(data)
    parts, values = [], []
    for model, rows in _by_model(data.resnets).items():
        last = rows[-1]
        for name in ("momentum", "adam"):
            if (model, name) in runs:
                value = (last["backward_flops"] + runs[(model, name)]["update_flops"]) / last["forward_flops"]
                values.append(value)
                parts.append(f"{model} batch {last['batch_size']} {name} {_r(value)}")
    if not values:
        return _NOT_ANALYSED
    return ("(backward + update)/forward with the update of momentum or Adam (batch-independent, from the batch-1 "
            f"analysis): {_join(parts)}."), _confirmed(all(_within(v, 2.0, TOLERANCE) for v in values))


def _timing_all(data: _Data) -> list[dict[str, Any]]:
    return [c for _, frame in data.timing for c in _timing_cases(frame)]


def _c_ddp_shares(data: _Data) -> tuple[str, str]:
    cases = [c for c in _timing_all(data) if c["model"] in DDP_MODELS and c["dtype"] == "float32" and _shares(c)]
    devices = sorted({c["device"] for c in cases})
    text = "; ".join(
        f"{c['model']} {c['optimizer']} {' / '.join(_pct(_shares(c)[p], 0) for p in _SHARE_PHASES)}" for c in cases
    )
    gpu = [c for c in cases if c["device"].lower() != "cpu"]
    if gpu:
        ok = all(all(abs(_shares(c)[p] - DDP_SHARES[p]) <= TOLERANCE for p in _SHARE_PHASES) for c in gpu)
        return f"Measured forward / backward / update ({_join(devices)}): {text}.", \
            ("confirmed" if ok else "refuted") + " on " + _join(sorted({c['device'] for c in gpu})) + " (not a V100)"
    return (f"Measured on {_join(devices) or 'no device'} only (float32, reduced shapes): {text or 'no data'}. What "
            "would test it: `benchmarks/time_zoo.py` on a V100 (or the GPU at hand) at the paper's shapes."), \
        "not testable here (needs a V100)"


def _c_three_times(data: _Data) -> tuple[str, str]:
    cases = [c for c in _timing_all(data) if c["dtype"] == "float32" and c["time_ratio"] is not None]
    if not cases:
        return "No timing data.", "not testable here"
    claimed = DDP_SHARES["backward"] / DDP_SHARES["forward"]
    times = [c["time_ratio"] for c in cases]
    flops = [c["flop_ratio"] for c in cases if c["flop_ratio"] is not None]
    unknown = len(cases) - len(flops)
    ok = all(_within(t, claimed, APPROX_TOLERANCE) for t in times)
    devices = _join(sorted({c["device"] for c in cases}))
    return (f"Measured backward/forward time on {devices} (float32): {_range(times, _r2)}, against a FLOP ratio of "
            f"{_range(flops, _r2) if flops else 'unknown'}"
            + (f" (unknown in {unknown} case{'s' if unknown > 1 else ''})" if unknown and flops else "")
            + f"; the claim's {claimed:.1f} is the V100's time ratio. What would test it as stated: "
            "the GPU run of `benchmarks/time_zoo.py`."), \
        ("confirmed" if ok else "refuted") + f" on {devices}; depends on the hardware"


def _case_name(case: Mapping[str, Any]) -> str:
    return f"{case['model']} {case['dtype']} {case['optimizer']}"


def _largest_phase(case: Mapping[str, Any]) -> str:
    shares = _shares(case) or {}
    return max(shares, key=lambda p: shares[p]) if shares else "unknown"


def _c_update_fast(data: _Data) -> tuple[str, str]:
    cases = [c for c in _timing_all(data) if _shares(c)]
    if not cases:
        return "No timing data.", "not testable here"
    slow = [c for c in cases if _shares(c)["update"] >= min(_shares(c)["forward"], _shares(c)["backward"])]
    parts = []
    for optimizer in dict.fromkeys(c["optimizer"] for c in cases):
        chosen = [_shares(c)["update"] for c in cases if c["optimizer"] == optimizer]
        parts.append(f"{optimizer} {_range(chosen, lambda v: _pct(v, 0))}")
    text = (f"Update share of step time on {_join(sorted({c['device'] for c in cases}))}: {'; '.join(parts)}; the "
            "update is the smallest phase in " f"{len(cases) - len(slow)} of {len(cases)} cases"
            + (f" (not in: {_join(sorted({_case_name(c) for c in slow}))})" if slow else "")
            + ".")
    if not slow:
        return text, "confirmed"
    return text, "depends on the optimizer and on the parameters per example (Adam on weight-heavy nets)"


def _c_autodiff_two(data: _Data) -> tuple[str, str]:
    rows = [r for r in _records(_ok(data.zoo.runs)) if r["model"] not in _NET_NAMES]
    if not rows:
        return _NOT_ANALYSED
    values = [r["backward_to_forward"] for r in rows]
    seeds = [r for r in _records(_ok(data.zoo.runs)) if r["model"] in _NET_NAMES]
    text = f"Backward/forward of the {len(rows)} ResNets and transformers of the zoo at batch 1: {_range(values)}."
    if seeds:
        text += (f" Seed 001's nets at batch 1: {_range([r['backward_to_forward'] for r in seeds])} (the first layer, "
                 "1:1, dominates LinearNet; batch 1 halves dense weight gradients).")
    return text, _confirmed(all(_within(v, 2.0, TOLERANCE) for v in values))


def _c_kaplan(data: _Data) -> tuple[str, str]:
    from xla_cost import zoo

    parts, close, far = [], [], []
    for r in _records(_ok(data.zoo.runs)):
        spec = zoo.get_spec(r["model"])
        if spec.input_dtype == "float" or "d_model" not in spec.defaults:
            continue
        _, n = _kaplan_per_token(spec.defaults)
        tokens = r["batch_size"] * spec.defaults["seq_len"]
        ratio = (r["forward_flops"] + r["backward_flops"]) / tokens / (6 * n)
        parts.append(f"{r['model']} {_r(ratio, 2)}")
        (close if _within(ratio, 1.0, TOLERANCE) else far).append(r["model"])
    if not parts:
        return _NOT_ANALYSED
    text = ("(Forward + backward) FLOP per token ÷ 6N, N the non-embedding parameters: " + _join(parts)
            + ". What 6N leaves out is the attention over the context (4·n_layer·n_ctx·d_model per token forward) "
            "and the output head (2·d_model·V), large against N for small models.")
    if not far:
        return text, "confirmed"
    if not close:
        return text, "refuted"
    return text, f"depends on model size: within 5% for {_join(close)}"


def _c_backprop_slowest(data: _Data) -> tuple[str, str]:
    cases = [c for c in _timing_all(data) if _shares(c)]
    if not cases:
        return "No timing data.", "not testable here"
    largest = [c for c in cases if _largest_phase(c) == "backward"]
    others = [c for c in cases if c not in largest]
    text = (f"The backward pass is the largest share of step time in {len(largest)} of {len(cases)} measured cases"
            + (f"; not in {_join([_case_name(c) + ' (' + _largest_phase(c) + ')' for c in others])}"
               if others else "") + f" ({_join(sorted({c['device'] for c in cases}))}).")
    if not others:
        return text, "confirmed"
    return text, ("depends on the model and optimizer" if len(largest) >= len(cases) / 2 else "refuted")


def _c_gpu_faster(data: _Data) -> tuple[str, str]:
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
            return (f"Best float32 train-step FLOP/s, {_join(gpu)} ÷ the 2-core CPU (each at its own shapes, "
                    "`benchmarks/time_zoo.py`): " + ", ".join(f"{m} {_sig(r, 3)}×" for m, r in ratios.items())
                    + "."), _confirmed(all(r >= 10 for r in ratios.values()))
        return f"Timing data on {_join(devices)}: compare the step-time sections.", "see step-time.md"
    return ("Only CPU timings exist (no GPU was available to this project). What would test it: the same "
            "`benchmarks/time_zoo.py` cases on a GPU, against the committed CPU CSV (same models, shapes and "
            "counts)."), "not testable here (no GPU)"


def _c_two_gpus(data: _Data) -> tuple[str, str]:
    from xla_cost.runs.scaling import bandwidth_for_speedup, predict, speedup

    seed = data.seed004 if data.plan.seed004_model else None
    if seed is None:
        return _NOT_ANALYSED
    pcie = speedup(predict(seed["one"], device="p40"), predict(seed["two"], device="p40"))
    need = bandwidth_for_speedup(seed["one"], seed["two"], SEED004_SPEEDUP, device="p40", interconnect="pcie3")
    small, large = seed["devices"]
    strong = {a: speedup(predict(seed["small"], device="p40", algorithm=a),
                         predict(seed["large"], device="p40", algorithm=a)) for a in _ALGORITHMS}
    return (f"Sharded {seed['model']} steps priced on Tesla P40s: 1 → 2 GPUs ({seed['batch']} images each) "
            f"{_r(pcie, 3)}× over PCIe 3.0, 1.3× at a link of {_gbs(need)} or less; {_int(small)} → {_int(large)} "
            f"GPUs at a {_int(seed['global_batch'])} batch {_r(strong['ring'], 3)}× with flat-ring all-reduces, "
            f"{_r(strong['halving-doubling'], 3)}× with halving-doubling ones."), \
        "depends on the interconnect and the all-reduce algorithm (scaling.md gives the condition)"


def _c_half_precision(data: _Data) -> tuple[str, str]:
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
    text = f"bfloat16 train-step time ÷ float32: {_range([v for _, v, _, _ in pairs], _r2)}×"
    if gpu:
        text = f"bfloat16 train-step time ÷ float32: {_range([v for v, _, _ in gpu], _r2)}×"
        large = [v for v, step, _ in gpu if step >= HALF_PRECISION_STEP]
        small = sorted({m for v, step, m in gpu if step < HALF_PRECISION_STEP})
        text += (f" (GPU); {_range(large, _r2) if large else 'none'}× for the steps of "
                 f"{_ms(HALF_PRECISION_STEP)} ms or more in float32"
                 + (f"; the shorter ones ({_join(small)}) are launch- and memory-bound, where 16-bit units do not "
                    "help" if small else "") + ".")
        if small and large and all(v < 1 for v in large):
            return text, "depends on the step's size: faster for every model whose float32 step takes " \
                f"{_ms(HALF_PRECISION_STEP)} ms or more"
        return text, _confirmed(all(v < 1 for v, _, _ in gpu))
    return (text + " on the CPU, which emulates bfloat16 in float32 (the counts differ by the conversions only). "
            "What would test it: the bfloat16 cases of `benchmarks/time_zoo.py` on a GPU with bfloat16 units."), \
        "not testable here (CPU emulates bfloat16)" if cpu else "not testable here"


def _c_bigger_batches(data: _Data) -> tuple[str, str]:
    runs = _seed_runs(data)
    if not runs:
        return _NOT_ANALYSED
    parts, changes = [], []
    for model, rows in runs.items():
        first, last = rows[0], rows[-1]
        a = first["train_step_flops"] / first["batch_size"]
        b = last["train_step_flops"] / last["batch_size"]
        changes.append(1 - b / a)
        parts.append(f"{_net(model)} −{_pct_sig(1 - b / a)}")
    first = next(iter(runs.values()))
    text = (f"Train-step FLOP per example from batch {first[0]['batch_size']} to {first[-1]['batch_size']}: "
            f"{_join(parts)} (only the update is shared by the batch). Time per example is not measured against "
            "the batch here.")
    if all(c > TOLERANCE for c in changes):
        return text, "confirmed"
    return text, "depends on the update's share: large for dense nets at small batch, none for CNNs"


def _c_imagenet(data: _Data) -> tuple[str, str]:
    from xla_cost.parallel.devices import device
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
    peak = device("p40", has="peak").peak.for_dtype("float32")
    mfu = total / seconds / small / peak
    comm = {a: predict(step, device="p40", algorithm=a).prediction.communication_seconds for a in _ALGORITHMS}
    budget = seconds / steps
    compute = step.phases["train_step"].flops / peak
    roofline = predict(step, device="p40").prediction.compute_seconds
    return (f"{_sig(per_image / 1e9)} GFLOP per image per train step, {_sig(total / 1e18)} EFLOP for "
            f"{JIA_EPOCHS} epochs: {JIA_MINUTES[0]:g} minutes on {_int(small)} P40s is {_sig(total / seconds / small / 1e12, 3)} "
            f"TFLOP/s per GPU sustained, an MFU of {_pct(mfu)} of the P40's float32 peak with every all-reduce "
            f"hidden. Each of the {_int(steps)} steps ({_int(seed['global_batch'])} images) has {_ms(budget)} ms; "
            f"its FLOP at peak take {_ms(compute)} ms"
            + (f" and its bytes (XLA's count for the CPU program) at the P40's memory bandwidth {_ms(roofline)} ms"
               if roofline > compute else "")
            + f", the gradient all-reduce {_ms(comm['halving-doubling'])} ms "
            f"with halving-doubling over InfiniBand EDR, {_ms(comm['ring'])} ms as flat-ring all-reduces of each "
            "buffer. Accuracy is outside a cost analysis."), \
        (f"depends on an MFU of {_pct(mfu)} or more and a logarithmic-latency all-reduce"
         + (" (flat rings alone exceed the step)" if comm["ring"] > budget else ""))


def _c_gpt3_compute(data: _Data) -> tuple[str, str]:
    result = data.gpt3_estimate if data.plan.gpt3_model else None
    if result is None:
        return _NOT_ANALYSED
    six_n = 6 * result.tokens * PUBLISHED_PARAMETERS.get(data.plan.gpt3_model, (0, ""))[0]
    ratio = result.total_flops / GPT3_TOTAL_FLOPS
    return (f"{_sig(result.flops_per_sample / 1e12)} TFLOP per {_int(round(result.tokens / result.samples))}-token "
            f"sequence (forward + backward + Adam update, loop-corrected), {_sig(result.total_flops / 1e23)}e23 FLOP "
            f"for {_sig(result.tokens / 1e9, 3)} billion tokens: {_r(ratio, 3)}× the table's {_sig(GPT3_TOTAL_FLOPS / 1e23, 3)}e23. "
            f"6N alone gives {_sig(six_n / 1e23)}e23; the rest is the attention's score and value products "
            "(which 6N leaves out) and the update."), _confirmed(abs(ratio - 1) <= TOLERANCE)


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
"""The kinds of verdict, by the word a verdict starts with (`_verdict_kind`)."""


_VERDICT_LABELS = {"depends": "depends on …"}
_VERDICT_LABELS.update({k: k for k in VERDICTS if k != "depends"})


def _verdict_kind(verdict: str) -> str:
    return next((k for k in VERDICTS if verdict.startswith(k)), "not tested")


def _claims_page(data: _Data) -> dict[str, bytes]:
    rows = []
    counts: dict[str, int] = {}
    for index, claim in enumerate(CLAIMS, 1):
        measured, verdict = claim.check(data)
        kind = _verdict_kind(verdict)
        counts[kind] = counts.get(kind, 0) + 1
        rows.append([str(index), claim.seeds, claim.text, measured, f"[{claim.page}]({claim.page}.md)",
                     f"**{verdict}**"])
    lines = [
        "# The seeds' claims, tested",
        "",
        "Every quantitative claim of the seed documents (000–004: "
        + ", ".join(f"`{name}`" for name in SEED_FILES.values())
        + ", kept beside the project, not in this repository), what this project measured, the page that "
        "shows it, and a verdict by these rules, applied in code (`xla_cost.study.reporting.CLAIMS`):",
        "",
        f"- **confirmed**: the measured figure is within {_pct(TOLERANCE, 0)} of the claimed one (within "
        f"{_pct(APPROX_TOLERANCE, 0)} where the seed gives it as approximate, \"~\" or \"about\"), or, for a "
        "qualitative claim, the stated test holds in every measured case;",
        "- **refuted**: it does not;",
        "- **depends on …**: it holds under one condition and not another, named;",
        "- **not testable here**: it needs hardware this project has not measured on; the row says what would "
        "test it.",
        "",
        "Counts are XLA's (SGD, float32, CPU backend: a count does not depend on the device's speed); times are "
        "the committed measurements of [step-time.md](step-time.md).",
        "",
        "Verdicts: " + ", ".join(f"{_VERDICT_LABELS[k]} {counts[k]}" for k in VERDICTS if k in counts)
        + f" (of {len(CLAIMS)}).",
        "",
        _table(["#", "seed", "claim", "measured", "page", "verdict"], rows, "rlllll"),
        "",
        _regenerate_line(),
    ]
    return {"claims.md": _text("\n".join(lines))}


# --------------------------------------------------------------------------- page: scaling

_ALGORITHMS = ("ring", "halving-doubling")


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else _sig(seconds * 1e3, 3)


def _gbs(bandwidth: float | None) -> str:
    return "—" if bandwidth is None else f"{_sig(bandwidth / 1e9, 3)} GB/s ({_sig(8 * bandwidth / 1e9, 3)} Gb/s)"


def _fig_scaling(curves: Sequence[dict[str, Any]], device: str) -> bytes:
    def draw() -> Figure:
        fig, axes = _figure(9.0, 3.8, 1, 2)
        left, right = axes[0]
        for index, curve in enumerate(curves):
            color = _LINE_COLORS[index % len(_LINE_COLORS)]
            for algorithm, style in zip(_ALGORITHMS, ("-", "--")):
                frame = curve[algorithm].to_frame()
                label = f"{curve['model']} ({curve['axis']}, {algorithm})"
                left.plot(frame["devices"], frame["speedup"], style, marker="o", markersize=3, color=color,
                          label=label)
                right.plot(frame["devices"], frame["efficiency"], style, marker="o", markersize=3, color=color)
        devices = [int(k) for k in curves[0]["ring"].to_frame()["devices"]]
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
        fig.suptitle(f"Weak scaling on {device} clusters: ring (solid) and halving-doubling (dashed) collectives",
                     fontsize=10)
        return fig

    return _png(draw)


def _beside_presets(bandwidth: float | None) -> str:
    """Where ``bandwidth`` falls among the interconnect presets."""
    from xla_cost.parallel import comm

    if bandwidth is None:
        return "out of reach in this model"
    links = sorted(comm.INTERCONNECTS.values(), key=lambda i: i.bandwidth)
    below = [i for i in links if i.bandwidth <= bandwidth]
    above = [i for i in links if i.bandwidth > bandwidth]
    if not below:
        return f"slower than every preset (the slowest, `{above[0].name}`, carries {_gbs(above[0].bandwidth)})"
    if not above:
        return f"faster than every preset (the fastest, `{below[-1].name}`, carries {_gbs(below[-1].bandwidth)})"
    return (f"between `{below[-1].name}` ({_gbs(below[-1].bandwidth)}) and `{above[0].name}` "
            f"({_gbs(above[0].bandwidth)})")


def _speedup_condition(target: float, weak: bool) -> str:
    """The exposed communication, as a multiple of compute, that turns a
    doubling into ``target``x (compute halves per device under strong scaling;
    stays under weak scaling)."""
    # weak: 2C / (C + M) = s  ->  M = (2 / s - 1) C
    # strong: (C + M) / (C / 2 + M) = s  ->  M = (1 - s / 2) / (s - 1) C
    ratio = (2 / target - 1) if weak else (1 - target / 2) / (target - 1)
    return _r(ratio, 3)


def _scaling_page(data: _Data) -> dict[str, bytes]:
    from xla_cost.parallel import comm
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
        f"- overlap {comm.DEFAULT_OVERLAP:g} (nothing hidden: an upper bound on the step);",
        "- weak scaling: the samples per device stay, the global batch grows with the devices.",
        "",
        "What the model ignores: topology contention between concurrent collectives, stragglers, the slow-down of "
        "compute that shares memory bandwidth with communication, kernels below peak. The README's \"Sharded steps\" "
        "section gives the presets' sources.",
        "",
        "## Interconnect presets",
        "",
        _table(["preset", "what", "bandwidth per device, one way", "latency per hop (assumed)"], [
            [f"`{i.name}`", i.description, f"{_sig(i.bandwidth / 1e9, 4)} GB/s", f"{_sig(i.latency * 1e6, 2)} µs"]
            for i in comm.INTERCONNECTS.values()
        ], "llrr"),
        "",
        "Clusters: " + "; ".join(
            f"`{name}`: {c.node_size} per node on `{c.intra.name}`, `{c.inter.name}` between nodes"
            for name, c in comm.CLUSTERS.items()
        ) + ".",
        "",
    ]
    curves = data.scaling_curves if plan.scaling_curves and len(plan.scaling_devices) > 1 else []
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
            ring, tree = curve["ring"].to_frame(), curve["halving-doubling"].to_frame()
            what = "data parallel (DDP: gradients all-reduced)" if curve["axis"] == "data" else \
                "fully sharded (FSDP / ZeRO-3: parameters gathered, gradients reduce-scattered)"
            rows = []
            for (_, a), (_, b) in zip(ring.iterrows(), tree.iterrows()):
                rows.append([
                    _int(a["devices"]), _int(a["global_batch"]), _si(a["flops_per_device"]),
                    _si(a["communication_bytes_per_device"]) + "B", _ms(a["compute_s"]),
                    _ms(a["communication_s"]), _r(a["speedup"], 3), _pct(a["efficiency"]),
                    _ms(b["communication_s"]), _r(b["speedup"], 3), _pct(b["efficiency"]),
                ])
            last_ring, last_tree = ring.iloc[-1], tree.iloc[-1]
            lines += [
                f"### {curve['model']}: {what}, {curve['batch']} sample(s) per device",
                "",
                _table(["devices", "global batch", "FLOP / device", "collective bytes / device", "compute ms",
                        "ring comm ms", "ring speed-up", "ring efficiency", "h-d comm ms", "h-d speed-up",
                        "h-d efficiency"], rows, "rrrrrrrrrrr"),
                "",
                f"At {_int(last_ring['devices'])} devices: {_pct(last_ring['efficiency'])} efficiency with ring "
                f"collectives, {_pct(last_tree['efficiency'])} with halving-doubling; the communication is "
                f"{_r(last_ring['communication_s'] / last_ring['compute_s'], 3)}× the compute with rings.",
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
                  for a in _ALGORITHMS}
        steps = math.ceil(IMAGENET_TRAIN_IMAGES * JIA_EPOCHS / seed["global_batch"])
        measured = tuple(60 * minutes / steps for minutes in JIA_MINUTES)
        strong_need = {a: bandwidth_for_speedup(seed["small"], seed["large"], SEED004_SPEEDUP, device="p40",
                                                algorithm=a) for a in _ALGORITHMS}
        lines += [
            "## Seed 004's 1.3× from doubling the GPUs",
            "",
            f"Seed 004 reports a 1.3× speed-up from twice the GPUs (Jia et al. 2018: ResNet-50 in "
            f"{JIA_MINUTES[0]:g} minutes on 1,024 Tesla P40s, {JIA_MINUTES[1]:g} on 2,048; "
            f"{JIA_MINUTES[0]:g} / {JIA_MINUTES[1]:g} = {_r(JIA_MINUTES[0] / JIA_MINUTES[1], 3)}). In this model a "
            "doubling gives 1.3× exactly when the exposed communication is a set multiple of the compute:",
            "",
            f"- weak scaling (same samples per device): 2C / (C + M) = 1.3, so M = "
            f"{_speedup_condition(SEED004_SPEEDUP, True)} C;",
            f"- strong scaling (same global batch, compute per device halves): (C + M) / (C/2 + M) = 1.3, so M = "
            f"{_speedup_condition(SEED004_SPEEDUP, False)} C at the smaller count.",
            "",
            f"**From 1 to 2 GPUs** ({seed['model']}, {seed['batch']} images per GPU, Tesla P40, roofline compute "
            f"{_ms(one.prediction.compute_seconds)} ms at its peaks): the gradient all-reduce moves "
            f"{_sig(gradient / 1e6, 4)} MB per device ({_int(len(seed['two'].phases['train_step'].communication))} "
            f"collectives). Over the P40 servers' PCIe 3.0 it takes {_ms(two.prediction.communication_seconds)} ms "
            f"and the doubling gives {_r(doubling, 3)}×; on H100s with NVLink 4, {_r(nvlink, 3)}×. 1.3× appears when "
            f"the link between the two GPUs carries {_gbs(need)} or less with nothing overlapped: "
            f"{_beside_presets(need)}.",
            "",
            f"**From {_int(small)} to {_int(large)} GPUs at a fixed {_int(seed['global_batch'])}-image batch** "
            f"({_int(seed['global_batch'] // small)} then {_int(seed['global_batch'] // large)} images per GPU, "
            "P40 servers of 8 on PCIe 3.0, InfiniBand EDR between them):",
            "",
            _table(["collectives", f"step ms at {small}", f"comm ms at {small}", f"step ms at {large}",
                    f"comm ms at {large}", "speed-up", "1.3× needs a link of"], [
                *([a, _ms(strong[a][0].prediction.seconds), _ms(strong[a][0].prediction.communication_seconds),
                   _ms(strong[a][1].prediction.seconds), _ms(strong[a][1].prediction.communication_seconds),
                   _r(speedup(*strong[a]), 3), _gbs(strong_need[a])] for a in _ALGORITHMS),
                ["measured (Jia et al.)", _ms(measured[0]), "", _ms(measured[1]), "",
                 _r(measured[0] / measured[1], 3), ""],
            ], "lrrrrrl"),
            "",
            f"The measured rows are {JIA_MINUTES[0]:g} and {JIA_MINUTES[1]:g} minutes over {_int(steps)} steps "
            f"({JIA_EPOCHS} epochs of {_int(IMAGENET_TRAIN_IMAGES)} images at {_int(seed['global_batch'])} per "
            f"step). The compiled step holds {_int(len(seed['small'].phases['train_step'].communication))} "
            f"all-reduces; on one flat ring each pays {_int(2 * (small - 1))} hops of latency, and the doubling "
            + ("slows the step down" if speedup(*strong["ring"]) < 1 else f"gives {_r(speedup(*strong['ring']), 3)}×")
            + f"; with halving-doubling it gives {_r(speedup(*strong['halving-doubling']), 3)}×. The measured "
            f"{_r(measured[0] / measured[1], 3)}× "
            + ("lies between the two schedules" if min(speedup(*strong[a]) for a in _ALGORITHMS)
               <= measured[0] / measured[1] <= max(speedup(*strong[a]) for a in _ALGORITHMS)
               else "lies outside the two schedules")
            + ": the model brackets what Jia et al.'s all-reduce (hierarchical, on fused buffers) achieved; it "
            "does not say which schedule they ran.",
            "",
        ]
    lines += [_regenerate_line(), ""]
    files["scaling.md"] = _text("\n".join(lines))
    return files


# --------------------------------------------------------------------------- page: memory

def _gb(value: int | float | None) -> str:
    return "—" if value is None else _sig(value / 1e9, 4)


def _mb(value: int | float | None) -> str:
    return "—" if value is None else _sig(value / 1e6, 4)


def _memory_page(data: _Data) -> dict[str, bytes]:
    from xla_cost.parallel.devices import device as registry_device
    from xla_cost.runs.fit import DEFAULT_MEMORY_FRACTION

    lines = [
        "# Memory: what one training step holds, and the largest batch that fits",
        "",
        "Per device, in GB (10⁹ bytes), Adam, float32, one device unless said. The program's parts come from "
        "the abstract trees and the jaxpr (`xla_cost.analysis.memory`): parameters, gradients, optimizer state, model "
        "state, the batch, and the activations the backward pass keeps (the residuals of the linearised "
        "forward pass, `jax.vjp`'s jaxpr). XLA's peak is the train step compiled as one program with the "
        "parameters and optimizer state donated: `memory_analysis()`'s arguments + outputs + temporaries − "
        "aliased. The parts at XLA's peak come from replaying the compiled schedule (`xla_cost.compiled.liveness`): "
        "every buffer live when the temporaries peak, sorted by where XLA says it came from (forward "
        "buffers still held, gradients made so far, and workspace: the rest). Every figure here is the "
        "**CPU compiler's** (jax on the 2-core machine); a GPU compile assigns buffers differently (its "
        "convolutions keep fewer temporaries, and it keeps remat's recomputation). The peak, not the "
        "program's parts, decides what fits.",
        "",
    ]
    if data.plan.memory_models:
        lines += ["## Breakdown against the batch size", ""]
        for model, reports in data.memory:
            rows = []
            for report in reports:
                m = report.memory_breakdown
                rows.append([
                    _int(report.batch_size), _gb(m.parameters), _gb(m.gradients), _gb(m.optimizer_state),
                    _gb(m.inputs), _gb(m.saved_activations), _gb(m.parts_total), _gb(m.peak),
                    _r(m.parts_total / m.peak, 3) if m.peak else "—",
                ])
            top = max(reports[-1].layers or (), key=lambda l: l.saved_activation_bytes or 0, default=None)
            lines += [
                f"### {model}",
                "",
                "The program's parts:",
                "",
                _table(["batch", "parameters", "gradients", "optimizer state", "batch data", "saved activations",
                        "sum of parts", "XLA peak", "parts / peak"], rows, "rrrrrrrrr"),
                "",
            ]
            peak_rows = []
            for report in reports:
                m = report.memory_breakdown
                if not m.at_peak:
                    continue
                a = m.at_peak
                arguments = a["parameters"] + a["optimizer_state"] + a["model_state"] + a["inputs"]
                peak_rows.append([
                    _int(report.batch_size), _gb(arguments), _gb(a["saved_activations"]), _gb(a["gradients"]),
                    _gb(a["workspace"]), _gb(a["outputs"]), _gb(m.at_peak_total), _gb(m.peak),
                    _r(m.at_peak_total / m.peak, 4) if m.peak else "—",
                ])
            if peak_rows:
                last = reports[-1].memory_breakdown
                lines += [
                    "At XLA's peak (the compiled schedule replayed):",
                    "",
                    _table(["batch", "arguments", "forward buffers held", "gradients made", "workspace", "outputs",
                            "sum", "XLA peak", "sum / peak"], peak_rows, "rrrrrrrrr"),
                    "",
                ]
                if last.largest_workspace:
                    biggest = ", ".join(
                        f"`{b.shape}` ({_gb(b.nbytes)} GB, {('`' + b.op_name.rsplit('/', 2)[-1] + '`') if b.op_name else 'no source: made by XLA'})"
                        for b in last.largest_workspace[:3])
                    lines += [f"The largest workspace buffers at batch {reports[-1].batch_size}: {biggest}.", ""]
            if top is not None and top.saved_activation_bytes:
                lines += [f"The layer that keeps most at batch {reports[-1].batch_size}: `{top.path}`, "
                          f"{_gb(top.saved_activation_bytes)} GB.", ""]
    if data.plan.memory_checks:
        rows = []
        for model, batch, config, report in data.memory_checks:
            m = report.memory_breakdown
            shape = ", ".join([f"batch {batch}", *(f"{k} {v}" for k, v in config.items())])
            first = m.largest_workspace[0] if m.largest_workspace else None
            rows.append([
                model, shape, _mb(m.parts_total), _mb(m.at_peak_total), _mb(m.peak),
                _r(m.parts_total / m.peak, 3) if m.peak else "—",
                _r(m.at_peak_total / m.peak, 4) if m.peak and m.at_peak_total is not None else "—",
                _mb(m.workspace), "—" if first is None else f"`{first.shape}` ({_mb(first.nbytes)} MB)",
            ])
        lines += [
            "## How close the parts come to XLA's peak on small steps",
            "",
            "The seed nets and GPT-2 small at short sequences, in MB (10⁶ bytes), Adam: the program's parts "
            "(trees and jaxpr) and the parts at XLA's peak (the schedule replayed), each over XLA's peak. The "
            "program's parts miss where XLA departs from the program: its CPU max-pool backward keeps index "
            "tensors and padded copies (ConvNet), it recomputes elementwise residuals (GPT-2), and at its peak "
            "only some gradients exist. The replay names those buffers.",
            "",
            _table(["model", "shape", "program's parts", "at the peak", "XLA peak", "parts / peak",
                    "at the peak / peak", "workspace at the peak", "largest workspace buffer"],
                   rows, "llrrrrrrl"),
            "",
        ]
    if data.plan.remat_model is not None:
        model, batch = data.plan.remat_model
        base = dict(data.remat)["none"]
        rows = []
        for name, report in data.remat:
            m = report.memory_breakdown
            extra = report.hardware_flops - report.model_flops
            rows.append([f"`{name}`", _gb(m.saved_activations), _gb(m.peak), _si(report.model_flops),
                         _si(report.hardware_flops), _pct(extra / report.model_flops)])
        lines += [
            f"## Rematerialisation: {model} at batch {batch}",
            "",
            "Each policy of `--remat` (per block for the zoo's transformers, `nn.remat`): the activations kept, "
            "XLA's peak, the train step's model FLOP (without recomputation) and hardware FLOP (with it).",
            "",
            _table(["policy", "saved activations", "XLA peak (CPU)", "model FLOP", "hardware FLOP",
                    "recomputed"], rows, "lrrrrr"),
            "",
            f"`full` keeps {_pct(dict(data.remat)['full'].memory_breakdown.saved_activations / base.memory_breakdown.saved_activations)} "
            "of the activations without remat. XLA on the CPU removes the recomputation it has memory for, so its "
            "peak barely moves; on a GPU, whose compile keeps it, the saved activations are what shrinks.",
            "",
        ]
    if data.plan.fit_devices and data.plan.memory_models:
        rows = []
        for model, device, result in data.fits:
            rows.append([model, device.upper(), _gb(registry_device(device, has="memory").memory), _gb(result.limit),
                         _int(result.batch_size), _gb(result.fits.peak if result.fits else None),
                         _int(result.next_size), _gb(result.does_not_fit.peak)])
        lines += [
            "## The largest batch that fits",
            "",
            f"`xla-cost fit MODEL --device NAME` (`xla_cost.max_batch_size`): usable memory = the datasheet's "
            f"capacity × {DEFAULT_MEMORY_FRACTION:g} (JAX's GPU allocator default); each batch size is compiled "
            "abstractly, doubling then bisecting, so the answer fits and the next size does not (by XLA's peak).",
            "",
            _table(["model", "device", "memory", "usable", "largest batch", "its peak", "next batch", "its peak"],
                   rows, "llrrrrrr"),
            "",
            "What was checked: on the CPU, that the answer fits and the next size does not, by compiling both "
            "(`tests/test_memory.py`). Not yet checked: a real run on a GPU at the predicted batch (that it runs) "
            "and at 1.25× of it (that it runs out of memory); the GPU's own buffer assignment differs from the "
            "CPU's figures here.",
            "",
        ]
    lines += [_regenerate_line(), ""]
    return {"memory.md": _text("\n".join(lines))}


# --------------------------------------------------------------------------- page: index

_PAGE_TITLES: Mapping[str, str] = {
    "backward-forward-ratio": "Seed 001's backward/forward FLOP ratio study, redone with XLA's counts: per layer, "
                              "against batch size and depth, ResNets and transformers",
    "optimizers": "Update FLOP and transcendentals per parameter of every optimizer, read from the jaxpr; the "
                  "update's share of the step",
    "step-time": "Measured forward/backward/update shares, MFU and roofline against seed 000's 23/74/3",
    "zoo": "Every zoo model: parameters against published counts, FLOP per example or token against the analytic "
           "formula, analysis time",
    "scaling": "Sharded train steps priced on many devices: weak-scaling curves of ResNet-50, GPT-2 and GPT-3, "
               "and the condition for seed 004's 1.3× from twice the GPUs",
    "memory": "Training-step memory per device against the batch, remat policies, and the largest batch that "
              "fits an H100 and an A100",
    "claims": "Every quantitative claim of seeds 000–004 with a verdict",
}


def _index_page(data: _Data) -> dict[str, bytes]:
    env = data.environment
    lines = [
        "# xla_cost reports",
        "",
        "Generated pages: what one training step of a JAX/Flax model costs, checked against the seed documents.",
        "",
        _table(["page", "what it shows"], [[f"[{p}]({p}.md)", _PAGE_TITLES[p]] for p in PAGES if p != "index"],
               "ll"),
        "",
        "## Environment",
        "",
        _table(["", ""], [
            ["jax", env["jax"]], ["jaxlib", env["jaxlib"]], ["flax", env["flax"]], ["optax", env["optax"]],
            ["matplotlib (figures)", env["matplotlib"]], ["xla_cost", env["xla_cost"]],
            ["backend", env["backend"]], ["device", env["device"]],
        ], "ll"),
        "",
        "## Regenerating",
        "",
        "From the repository root:",
        "",
        "```",
        COMMAND,
        "```",
        "",
        "It runs the sweeps the pages need through the results store (`$XLA_COST_STORE`, default "
        "`~/.cache/xla_cost/results.sqlite`; `--store PATH` to choose, `--jobs N` worker processes) and "
        "rewrites the pages and `figures/`. The same store gives byte-identical markdown; an empty one runs the "
        "analyses again and gives the same markdown too. Measured figures (step times, analysis seconds, the run "
        "time below) come from the committed files under `reports/data/`, never from the run that writes the "
        "pages. `xla-cost report NAME ...` writes some pages only; `xla-cost report --model "
        "PACKAGE.MODULE:ATTR --input-shape B,...` writes one page for a model of your own.",
        "",
    ]
    timing = data.report_time
    if timing is not None:
        path, frame = timing
        rows = _records(frame)
        parts = [f"{_duration(float(row['seconds']))} with {row['store']}" for row in rows]
        loads = [str(row["load_average"]) for row in rows if row.get("load_average") is not None]
        first = rows[0] if rows else {}
        lines += [
            f"Run time of `{first.get('command', COMMAND)}` on {first.get('device', '?')} "
            f"({first.get('cores', '?')} cores, jax {first.get('jax_version', '?')}, {first.get('date', '?')}): "
            f"{_join(parts)}"
            + (f"; the load average was {_join(loads)} while they ran" if loads else "")
            + f" ({_data_link(path)}, written by `python benchmarks/time_report.py`).",
            "",
        ]
    else:
        lines += ["Run time: not measured yet (`python benchmarks/time_report.py` writes "
                  "`reports/data/report_time_<device>_<date>.csv`).", ""]
    files = [p.name for kind in ("timing", "analysis_time", "report_time") for p in data._files(kind)]
    if files:
        lines += ["Committed data: " + ", ".join(f"[`{f}`](data/{f})" for f in files) + ".", ""]
    return {"index.md": _text("\n".join(lines))}


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


_BUILDERS: Mapping[str, Callable[[_Data], dict[str, bytes]]] = {
    "index": _index_page,
    "backward-forward-ratio": _ratio_page,
    "optimizers": _optimizers_page,
    "step-time": _step_time_page,
    "zoo": _zoo_page,
    "scaling": _scaling_page,
    "memory": _memory_page,
    "claims": _claims_page,
}


# --------------------------------------------------------------------------- one model

MAX_FIGURE_LAYERS = 40
"""The most layer rows a one-model figure draws; beyond, the rows with the
fewest FLOP are drawn as one bar (the table lists every row)."""


def _model_files(report: Report) -> dict[str, bytes]:
    """The page of one `Report` (``NAME.md``) and its per-layer figure."""
    from xla_cost.analysis.report import PHASES

    if report.layers is None:
        raise InputError(
            "a Report with per-layer rows", f"the report of {report.model!r} without them",
            "Analyse with per_layer=True (xla_cost.analyze(..., per_layer=True)).",
        )
    name = _slug(report.model)
    if name in PAGES:
        name = f"model-{name}"
    figure = f"figures/{name}-layers.png"
    config = ", ".join(f"{k}={v}" for k, v in report.config.items())
    lines = [
        f"# {report.model}: one training step",
        "",
        f"`{report.model}({config})`, batch {report.batch_size}, optimizer {report.optimizer}, {report.dtype}"
        + (f" (parameters {report.param_dtype})" if report.param_dtype not in (None, report.dtype) else "")
        + f", {_int(report.parameters)} parameters; {report.backend} backend, jax {report.jax_version}, counter "
        f"`{report.counter}`.",
        "",
        "## Phases",
        "",
    ]
    rows = []
    for phase in PHASES:
        costs = report.phases[phase]
        rows.append([
            phase, _int(costs.flops) + (" *" if costs.loop_corrected else ""), _int(costs.xla_flops),
            _int(costs.jaxpr_flops), _int(costs.transcendentals), _int(costs.bytes_accessed),
            _int(costs.memory.temp_bytes) if costs.memory.temp_bytes is not None else "—", costs.derivation,
        ])
    lines += [
        _table(["phase", "FLOP", "XLA FLOP", "jaxpr FLOP", "transcendentals", "bytes accessed", "temp bytes",
                "how"], rows, "lrrrrrrl"),
        "",
        f"backward / forward = {_r(report.backward_to_forward)}; (backward + update) / forward = "
        f"{_r(report.backward_with_update_to_forward)}. `FLOP` is XLA's compiled count (corrected for loop "
        "iterations where marked `*`), the jaxpr's where XLA has none; a multiply-add is 2 FLOP.",
        "",
        "## Layers",
        "",
        f"![Forward, backward and update FLOP per layer of {report.model}]({figure})",
        "",
    ]
    layer_rows = []
    looped = any(layer.trip_count > 1 for layer in report.layers)
    for layer in report.layers:
        cells = [f"`{layer.path}`", _int(layer.parameters)]
        if looped:
            cells.append(f"×{layer.trip_count}")
        cells += [_int(layer.forward_flops), _int(layer.backward_flops), _r(layer.backward_to_forward),
                  _int(layer.update_flops), _int(layer.transcendentals)]
        layer_rows.append(cells)
    header = ["layer", "parameters", *(["runs"] if looped else []), "forward FLOP", "backward FLOP",
              "backward / forward", "update FLOP", "transcendentals"]
    lines += [
        _table(header, layer_rows, "l" + "r" * (len(header) - 1)),
        "",
        "Per-layer figures are counted from the jaxprs with XLA's conventions; each column adds up to its phase's "
        "jaxpr FLOP. `(remainder)`: the loss, glue in the root module, shared scalars.",
        "",
    ]
    caveats = list(report.notes)
    if report.unsupported:
        caveats.append("no cost rule (not in jaxpr counts): "
                       + ", ".join(f"{k} ×{v}" for k, v in sorted(report.unsupported.items())))
    if caveats:
        lines += ["## Notes", "", *[f"- {c}" for c in caveats], ""]
    lines.append("Written by `xla_cost.write_report(report, ...)` / `xla-cost report --model ...`.")
    return {f"{name}.md": _text("\n".join(lines)), figure: _fig_model_layers(report)}


def _fig_model_layers(report: Report) -> bytes:
    layers = list(report.layers or ())
    if len(layers) > MAX_FIGURE_LAYERS:
        keep = sorted(range(len(layers)), key=lambda i: -layers[i].total.flops)[: MAX_FIGURE_LAYERS - 1]
        rest = [layers[i] for i in range(len(layers)) if i not in set(keep)]
        shown = [(layers[i].path, layers[i].forward_flops, layers[i].backward_flops, layers[i].update_flops)
                 for i in sorted(keep)]
        shown.append((f"({len(rest)} smaller rows)", sum(x.forward_flops for x in rest),
                      sum(x.backward_flops for x in rest), sum(x.update_flops for x in rest)))
    else:
        shown = [(x.path, x.forward_flops, x.backward_flops, x.update_flops) for x in layers]
    scale, unit = _unit([f + b + u for _, f, b, u in shown])

    def draw() -> Figure:
        fig, axes = _figure(9.0, 0.3 * len(shown) + 1.8)
        ax = axes[0][0]
        ys = list(range(len(shown)))[::-1]
        for y, (_, f, b, u) in zip(ys, shown):
            left = 0.0
            for phase, value in (("forward", f), ("backward", b), ("update", u)):
                ax.barh(y, value / scale, left=left, color=PASS_COLORS[phase], height=0.7,
                        label=phase if y == ys[0] else None)
                left += value / scale
        ax.set_yticks(ys, [path for path, *_ in shown])
        ax.set_xlabel(f"{unit} per training step")
        ax.grid(axis="y", visible=False)
        ax.legend(loc="lower right", frameon=False)
        fig.suptitle(f"{report.model}: FLOP per layer, batch {report.batch_size}, {report.optimizer}")
        return fig

    return _png(draw)


# --------------------------------------------------------------------------- writing


def default_data_dir() -> pathlib.Path:
    """The committed data of a source checkout: ``reports/data`` beside the package."""
    return pathlib.Path(__file__).resolve().parents[2] / "reports" / "data"


def _resolve_pages(target: str | Sequence[str]) -> list[str]:
    names = [target] if isinstance(target, str) else list(target)
    if not names or not all(isinstance(n, str) for n in names):
        raise InputError(
            "page names (a name, a list of names or \"all\") or a Report", repr(target),
            f"Use one of {', '.join(PAGES)}, or \"all\".",
        )
    if "all" in names:
        return list(PAGES)
    import difflib

    for name in names:
        if name not in PAGES:
            close = difflib.get_close_matches(name, PAGES, n=1)
            raise InputError(
                f"a page name ({', '.join(PAGES)}) or \"all\"", repr(name),
                (f"Did you mean `{close[0]}`? " if close else "") + "Run `xla-cost report all` for every page.",
            )
    return [p for p in PAGES if p in names]  # reading order, each once


def check_out(out: str | os.PathLike[str]) -> pathlib.Path:
    path = pathlib.Path(out)
    if str(out).strip() == "":
        raise InputError("--out naming a directory", "an empty name", "Pass e.g. --out reports/.")
    if path.exists() and not path.is_dir():
        raise InputError("--out naming a directory", f"{str(out)!r}, a file", "Pass a directory, e.g. --out reports/.")
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise InputError("--out in a writable place", f"{str(out)!r} ({str(existing)!r} is not writable)",
                         "Pass a directory you can write, e.g. --out reports/.")
    return path


def _write_files(out: pathlib.Path, files: Mapping[str, bytes]) -> list[pathlib.Path]:
    """Writes every file under ``out``, each atomically (a temporary file beside
    it, then a rename): a reader never sees a half-written file."""
    written = []
    for relative in sorted(files):
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as handle:
                handle.write(files[relative])
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        written.append(target)
    return written


def write_report(
    target: str | Sequence[str] | Report,
    out: str | os.PathLike[str] = "reports",
    *,
    store: Store | str | os.PathLike[str] | None = None,
    jobs: int | None = None,
    progress: bool | None = None,
    plan: ReportPlan | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> list[pathlib.Path]:
    """Writes markdown pages and their PNG figures.

    Args:
      target: a page name of `PAGES`, a list of them, ``"all"``, or a
        `xla_cost.Report` analysed with ``per_layer=True`` (one page,
        ``<model>.md``, with the phase table, the per-layer table and a stacked
        bar figure of forward/backward/update per layer).
      out: the directory (created if missing); figures go to ``out/figures/``.
      store: the results store the sweeps go through (a `xla_cost.Store` or a
        path; None: `xla_cost.default_store_path`). Not used for a Report.
      jobs: worker processes for the sweeps (None: one per core; 0: in this process).
      progress: a progress bar on stderr while sweeps run (None: when stderr is
        a terminal).
      plan: the configurations the pages analyse (default `DEFAULT_PLAN`, the
        committed pages'); a smaller plan makes quicker, smaller pages.
      data_dir: the committed measurements (``timing_*.csv``, ...); default
        ``reports/data`` of the source checkout.

    Returns:
      The files written, sorted.

    Raises:
      InputError: an unknown page name, ``out`` naming a file, a Report
        without per-layer rows, or (for the scaling and claims pages) JAX
        already started with fewer CPU devices than the plan's sharded
        analyses simulate (call it before any JAX computation, or
        `xla_cost.simulate_devices` first); raised before anything runs or is
        written.

    Example::

        import xla_cost
        xla_cost.write_report("all")                       # reports/*.md, reports/figures/*.png
        report = xla_cost.analyze(model, x, optimizer="adam", per_layer=True)
        xla_cost.write_report(report, "out/")              # out/<model>.md
    """
    from xla_cost.analysis.report import Report
    from xla_cost.compiled.store import Store

    if isinstance(target, Report):
        directory = check_out(out)
        return _write_files(directory, _model_files(target))
    if not isinstance(target, (str, list, tuple)):
        raise InputError(
            "page names (a name, a list of names or \"all\") or a Report", f"a {type(target).__name__}",
            f"Use one of {', '.join(PAGES)}, or \"all\".",
        )
    pages = _resolve_pages(target)
    directory = check_out(out)
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0):
        raise InputError("jobs a number of worker processes, 0 or more", repr(jobs), "Use e.g. --jobs 2.")
    resolved = (plan or DEFAULT_PLAN).resolved()
    if {"scaling", "claims"} & set(pages):
        from xla_cost.parallel.sharding import simulate_devices

        simulate_devices(resolved.simulated_devices)
    data_path = pathlib.Path(data_dir) if data_dir is not None else default_data_dir()
    own = not isinstance(store, Store)
    db = Store(store) if own else store
    try:
        data = _Data(db, resolved, data_path, jobs, progress)
        files: dict[str, bytes] = {}
        for page in pages:
            files.update(_BUILDERS[page](data))
    finally:
        if own:
            db.close()
    return _write_files(directory, files)
