"""What several study pages read from the collected data, and the lines they share.

Analysed runs as rows (per model, per layer, at a batch size), seed 001's nets
by name and first layer, the timing cases of the committed CSVs (their phase
shares, their time intervals, the hardware they ran on, the measurements
marked unexplained), and the few formats (milliseconds, link speeds) and page
sections (the failures, the environment, the regenerate line) every page
writes alike. Functions of `StudyData` or of its frames: they compute no new
figure.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.choices import REMAINDER
from xla_cost.errors import InputError
from xla_cost.timemodel.devices import match_kind
from xla_cost.present.markdown import pipe_table
from xla_cost.present.units import join_words, pct, sig
from xla_cost.study.data import StudyData
from xla_cost.study.plan import DATA_PATTERNS

if TYPE_CHECKING:
    import pandas as pd

    from xla_cost.runs.sweeps import SweepResult

__all__ = [
    "DATA_COMMANDS",
    "FIRST_LAYER",
    "NET_NAMES",
    "REMAINDER",
    "SHARE_PHASES",
    "SIZE_ONE_INPUT",
    "TIMING_ANOMALIES",
    "Interval",
    "TimingAnomaly",
    "analysed",
    "anomaly",
    "architecture_rows",
    "by_device",
    "by_model",
    "case_label",
    "data_link",
    "deepest_layers",
    "deepest_run",
    "depth_runs",
    "environment_section",
    "failure_section",
    "first_and_other_layers",
    "gbs",
    "hardware",
    "is_gpu",
    "largest_phase",
    "layer_records",
    "ms",
    "net_name",
    "optimizer_runs",
    "per_unit",
    "phase_shares",
    "r2",
    "records",
    "regenerate_line",
    "seed_layer_rows",
    "seed_runs",
    "shares_text",
    "thin_ticks",
    "time_interval",
    "timing_all",
    "timing_cases",
    "twin",
    "within",
]


NET_NAMES: Mapping[str, str] = {
    "linear_net": "LinearNet", "one_net": "OneNet", "conv_net": "ConvNet",
    "deeper_conv_net": "DeeperConvNet",
}
"""Seed 001's nets (appendix A) by the names the seed gives them."""

FIRST_LAYER = {"linear_net": "fc1", "one_net": "fc1", "conv_net": "conv1", "deeper_conv_net": "first_layer"}
"""The first parametrised layer of each seed net (seed 001: its ratio is 1:1)."""

SIZE_ONE_INPUT = {"one_net"}
"""Seed nets whose first layer has a single input feature (a contraction of length 1)."""


def net_name(name: str) -> str:
    """A seed net by its seed name (``OneNet``); any other model by its own."""
    return NET_NAMES.get(name, name)


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts with None for missing values (pandas NA and NaT, NaN)."""
    if frame.empty:
        return []
    import pandas as pd

    na, nat = pd.NA, pd.NaT
    # one pass over the rows pandas made (3x faster than pandas' own ``where`` on an object copy of the frame:
    # the pages read the timing files' rows hundreds of times)
    return [{k: None if v is None or v is na or v is nat or (isinstance(v, float) and v != v) else v
             for k, v in row.items()} for row in frame.to_dict("records")]


def analysed(frame: pd.DataFrame) -> pd.DataFrame:
    """The runs of a sweep's frame that analysed (status ``ok``)."""
    return frame[frame["status"] == "ok"] if len(frame) else frame


_RUN_FIELDS = {
    "model", "batch_size", "optimizer", "dtype", "counter", "status", "error", "parameters",
    "backward_to_forward", "backward_with_update_to_forward", "unsupported", "notes", "seconds", "key",
}

_PHASE_SUFFIXES = ("_flops", "_transcendentals", "_bytes", "_bytes_accessed", "_source")


def failure_section(*results: SweepResult) -> list[str]:
    """A page's section on the configurations of ``results`` that did not
    analyse, one line each (what it was and why); nothing when all did."""
    out = []
    for result in results:
        for row in records(result.runs):
            if row["status"] != "ok":
                settings = ", ".join(
                    f"{k}={row[k]}" for k in result.runs.columns
                    if k not in _RUN_FIELDS and not k.endswith(_PHASE_SUFFIXES) and row.get(k) is not None
                )
                out.append(f"{row['model']} batch {row['batch_size']} {row['optimizer']}"
                           + (f" ({settings})" if settings else "") + f": {row['status']}: {row['error']}")
    if not out:
        return []
    return ["## Configurations that did not analyse", "", *[f"- {f}" for f in out], ""]


def by_model(result: SweepResult) -> dict[str, list[dict[str, Any]]]:
    """The analysed runs of a sweep per model, in the sweep's order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in records(analysed(result.runs)):
        out.setdefault(row["model"], []).append(row)
    return out


def layer_records(result: SweepResult, model: str, batch: int, **settings: Any) -> list[dict[str, Any]]:
    """The layer rows of one configuration, in the report's order (remainder last)."""
    frame = result.layers
    if frame.empty:
        return []
    mask = (frame["model"] == model) & (frame["batch_size"] == batch)
    for key, value in settings.items():
        mask &= frame[key] == value
    return records(frame[mask])


def seed_runs(data: StudyData) -> dict[str, list[dict[str, Any]]]:
    """Seed 001's nets' analysed runs per net, by batch size."""
    return by_model(data.seed_batch)


def depth_runs(data: StudyData) -> list[dict[str, Any]]:
    """DeeperConvNet's analysed runs, by depth."""
    return sorted(by_model(data.depth).get("deeper_conv_net", []), key=lambda r: r["depth"])


def seed_layer_rows(data: StudyData, model: str, batch: int | None = None) -> list[dict[str, Any]]:
    """A seed net's layer rows at ``batch`` (default: the plan's per-layer batch)."""
    return layer_records(data.seed_batch, model, data.plan.layer_batch if batch is None else batch)


def deepest_run(data: StudyData) -> dict[str, Any] | None:
    """DeeperConvNet's deepest analysed run; None when there is none."""
    runs = depth_runs(data)
    return runs[-1] if runs else None


def deepest_layers(data: StudyData) -> list[dict[str, Any]]:
    """The layer rows of `deepest_run`."""
    row = deepest_run(data)
    if row is None:
        return []
    return layer_records(data.depth, "deeper_conv_net", row["batch_size"], depth=row["depth"])


def first_and_other_layers(data: StudyData) -> tuple[list[tuple[str, str, float]], list[tuple[str, str, float]]]:
    """(first layers, other parametrised layers) as (net, layer, backward/forward),
    at the per-layer batch (DeeperConvNet: its deepest configuration)."""
    first, other = [], []
    sources = [(m, seed_layer_rows(data, m)) for m in data.plan.seed_nets]
    sources.append(("deeper_conv_net", deepest_layers(data)))
    for model, rows in sources:
        for row in rows:
            if row["path"] == REMAINDER or not row["parameters"] or row["backward_to_forward"] is None:
                continue
            target = first if row["path"] == FIRST_LAYER.get(model) else other
            target.append((model, row["path"], row["backward_to_forward"]))
    return first, other


def architecture_rows(data: StudyData) -> list[dict[str, Any]]:
    """The analysed runs of the ResNets, then of the transformers."""
    rows = []
    for result in (data.resnets, data.transformers):
        for model, runs in by_model(result).items():
            rows.extend(runs)
    return rows


def optimizer_runs(data: StudyData) -> dict[tuple[str, str], dict[str, Any]]:
    """(model, optimizer) -> the analysed run at batch 1."""
    return {(r["model"], r["optimizer"]): r for r in records(analysed(data.optimizers.runs))}


def per_unit(row: Mapping[str, Any]) -> tuple[int, str]:
    """(examples or tokens in the batch, ``/ image``/``/ token``/``/ example``)."""
    from xla_cost import zoo

    try:
        spec = zoo.get_spec(row["model"])
    except InputError:
        return row["batch_size"], "/ example"
    if spec.input_dtype != "float":
        seq = row.get("seq_len") or spec.defaults.get("seq_len") or 1
        return row["batch_size"] * int(seq), "/ token"
    if row["model"] in NET_NAMES:
        return row["batch_size"], "/ example"
    return row["batch_size"], "/ image"


def within(value: float | None, target: float, tolerance: float) -> bool:
    """Whether ``value`` is known and within ``tolerance`` (a share) of ``target``."""
    return value is not None and abs(value - target) <= tolerance * abs(target)


SHARE_PHASES = ("forward", "backward", "update")
"""The phases whose shares of step time the timing CSVs give (they add up to 1)."""


def timing_cases(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """One dict per timed case of a `benchmarks/time_zoo.py` CSV: the case's
    columns and, per phase, its row (``phases``), in the file's order."""
    cases: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in records(frame):
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


def phase_shares(case: Mapping[str, Any]) -> dict[str, float] | None:
    """A timing case's share of step time per phase of `SHARE_PHASES`; None if one is missing."""
    values = {p: case["phases"].get(p, {}).get("share") for p in SHARE_PHASES}
    return None if any(v is None for v in values.values()) else values  # type: ignore[return-value]


_RUN_OF_DAY = re.compile(r"_(\d{4}-\d{2}-\d{2})(?:-(\d+))?\.csv$")


def run_order(path: str | pathlib.Path) -> tuple[str, int]:
    """When a measurement file was written, from its name: its date and its run of the
    day (``timing_<device>_<date>.csv`` the first, ``..._<date>-2.csv`` the second)."""
    match = _RUN_OF_DAY.search(pathlib.Path(path).name)
    return ("", 0) if match is None else (match.group(1), int(match.group(2) or 1))


UNSETTLED = 0.10
"""A train-step median whose 95% interval is wider than this share of it is
unsettled: the harness times until a median moves less than 2% between rounds
(`xla_cost.analysis.timing.TimingOptions.tolerance`), and an interval five times
that says the step's time changed during the measurement (ResNet-50's bfloat16
step on an H100, 2026-11-26: 13.81 ms, interval 10.67 to 14.26 ms, where two
earlier runs had 9.84 and 10.74 ms within 0.5%)."""


def unsettled(case: Mapping[str, Any]) -> bool:
    """Whether a timing case's train-step median is `UNSETTLED` (its interval not recorded: settled)."""
    step = case["phases"].get("train_step") or {}
    median, low, high = step.get("median_s"), step.get("low_s"), step.get("high_s")
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (median, low, high)) or not median:
        return False
    return (high - low) / median > UNSETTLED


def timing_all(data: StudyData) -> list[dict[str, Any]]:
    """Every case timed on each device (`timing_cases` of every committed timing CSV),
    once: a case a later run measured again is its latest measurement, in the place
    of its first (a repeat is the same case, not more evidence for a claim), unless
    that measurement is `unsettled` and an earlier one is not."""
    cases: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path, frame in sorted(data.timing, key=lambda item: run_order(item[0])):
        for case in timing_cases(frame):
            key = (case["device"], case["model"], case["config"], case["batch"], case["dtype"], case["optimizer"])
            if key not in cases or not unsettled(case) or unsettled(cases[key]):
                cases[key] = case
    return list(cases.values())


def by_device(cases: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Timing cases per measured device, in their order."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for case in cases:
        out.setdefault(case["device"], []).append(case)
    return out


def case_label(case: Mapping[str, Any], *, dtype: bool = True, optimizer: bool = True) -> str:
    """A timing case as pages name it: model, batch, shapes, dtype and optimizer
    (``resnet50 batch 32 float32 sgd``)."""
    config = f" {case['config'].replace(',', ', ')}" if case["config"] else ""
    return (f"{case['model']} batch {case['batch']}{config}" + (f" {case['dtype']}" if dtype else "")
            + (f" {case['optimizer']}" if optimizer else ""))


def shares_text(case: Mapping[str, Any]) -> str:
    """A case's forward / backward / update shares (``31% / 57% / 12%``)."""
    shares = phase_shares(case) or {}
    return " / ".join(pct(shares.get(p), 0) for p in SHARE_PHASES)


def largest_phase(case: Mapping[str, Any]) -> str:
    """The phase of `SHARE_PHASES` with the largest share of a case's step time; ``unknown`` without shares."""
    shares = phase_shares(case) or {}
    return max(shares, key=lambda p: shares[p]) if shares else "unknown"


def twin(case: Mapping[str, Any], cases: Sequence[Mapping[str, Any]], dtype: str) -> Mapping[str, Any] | None:
    """The case of ``cases`` that is ``case`` in ``dtype``: the same model,
    shapes, batch, optimizer and device; None when it was not measured."""
    keys = ("model", "config", "batch", "optimizer", "device")
    return next((c for c in cases if c["dtype"] == dtype and all(c[k] == case[k] for k in keys)), None)


def hardware(device: str) -> str | None:
    """The device registry's key for a measured device kind (``NVIDIA H100 80GB
    HBM3`` -> ``h100``, ``cpu``); None for a device the registry does not know."""
    entry = match_kind(str(device))
    return None if entry is None else entry.name


def is_gpu(device: str) -> bool:
    """Whether a measured device kind is a GPU the registry knows (not a CPU, not a TPU)."""
    key = hardware(device)
    return key is not None and key != "cpu" and not key.startswith("tpu")


@dataclasses.dataclass(frozen=True)
class Interval:
    """A phase's measured time and its spread.

    Attributes:
      median: the median, seconds.
      low, high: the interval's ends, seconds: the CSV's own interval columns,
        or, without them, the interquartile range's width centred on the median
        (the CSVs of ``benchmarks/time_zoo.py`` give the IQR, not the quartiles).
      kind: ``interval`` (the CSV's columns) or ``iqr``.
      repeats: the timed runs the median is of (None: not recorded).
    """

    median: float
    low: float
    high: float
    kind: str
    repeats: int | None


_INTERVAL_PREFIX = {"train_step": "step"}
"""The prefix of a phase's interval columns (``step_low_s``) where it is not the phase's name."""


def time_interval(case: Mapping[str, Any], phase: str) -> Interval | None:
    """The measured time of ``phase`` of a timing case with its interval: the
    CSV's ``<prefix>_median_s``, ``<prefix>_low_s`` and ``<prefix>_high_s``
    (``step_`` for the train step, the phase's name otherwise) where the file
    has them, else the median and the IQR (``median_s``, ``iqr_s``); None for
    a phase without a median (``backward`` is derived: grad − forward)."""
    row = case["phases"].get(phase) or {}
    prefix = _INTERVAL_PREFIX.get(phase, phase)
    median = row.get(f"{prefix}_median_s", row.get("median_s"))
    if median is None:
        return None
    repeats = row.get("repeats")
    repeats = None if repeats is None else int(repeats)
    low, high = row.get(f"{prefix}_low_s"), row.get(f"{prefix}_high_s")
    if low is not None and high is not None:
        return Interval(float(median), float(low), float(high), "interval", repeats)
    iqr = row.get("iqr_s")
    if iqr is None:
        return None
    return Interval(float(median), float(median) - float(iqr) / 2, float(median) + float(iqr) / 2, "iqr", repeats)


@dataclasses.dataclass(frozen=True)
class TimingAnomaly:
    """A committed measurement this project cannot explain: shown on the
    step-time page, never used as evidence for a claim.

    Attributes:
      device: the registry key of the device it was measured on (`hardware`).
      model, dtype, phase: the cases and the phase it is in (every batch and optimizer).
      note: what is odd about it, and what is known.
    """

    device: str
    model: str
    dtype: str
    phase: str
    note: str


TIMING_ANOMALIES: tuple[TimingAnomaly, ...] = (
    TimingAnomaly(
        "h100", "bert-base", "bfloat16", "backward",
        "the bfloat16 backward pass takes longer than the float32 one although its forward pass is faster, and "
        "XLA's GPU cost analysis counts several times the float32 FLOP for it while the analyzer's counts of the two "
        "agree: unexplained (not profiled); the case's bfloat16 shares and times are shown but are not evidence "
        "for any claim",
    ),
)
"""The unexplained measurements of the committed timing CSVs, declared once."""


def anomaly(case: Mapping[str, Any]) -> TimingAnomaly | None:
    """The `TIMING_ANOMALIES` entry a timing case falls under; None for most."""
    key = hardware(case["device"])
    return next((a for a in TIMING_ANOMALIES
                 if a.device == key and a.model == case["model"] and a.dtype == case["dtype"]), None)


def _data_name(path: pathlib.Path) -> str:
    """A committed data file as pages cite it (its path in the repository)."""
    return f"reports/data/{path.name}"


def data_link(data: StudyData, path: pathlib.Path) -> str:
    """A markdown link to a committed data file from a page of ``data`` (`StudyData.data_href`)."""
    return f"[`{_data_name(path)}`]({data.data_href(path)})"


DATA_COMMANDS: Mapping[str, tuple[str, str]] = {
    "timing": ("python benchmarks/time_zoo.py", "python benchmarks/time_zoo.py --reduced"),
    "analysis_time": ("python benchmarks/time_analysis.py",) * 2,
    "report_time": ("python benchmarks/time_report.py",) * 2,
    "targets": ("python benchmarks/target_compare.py",) * 2,
    "gemm": ("python benchmarks/gemm_shapes.py",) * 2,
    "dispatch": ("python benchmarks/dispatch_costs.py",) * 2,
    "kernels": ("python benchmarks/kernel_profile.py",) * 2,
    "conv_workspaces": ("python benchmarks/conv_workspaces.py",) * 2,
}
"""The command that writes each kind of committed data file (`DATA_PATTERNS`),
run from the repository root: (on a GPU, on a CPU)."""

_UNRECORDED: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("CUDA", ("cuda_version", "cuda"), True),
    ("cuDNN", ("cudnn_version", "cudnn"), True),
    ("driver", ("driver_version", "driver"), True),
    ("clocks", ("clocks", "sm_clock_mhz", "memory_clock_mhz"), False),
)
"""What a measurement's environment needs beyond the device and jax: its name,
the CSV columns that would hold it, and whether it is a GPU's alone."""


def _data_kind(path: pathlib.Path) -> str | None:
    return next((k for k, pattern in DATA_PATTERNS.items() if fnmatch.fnmatch(path.name, pattern)), None)


def _column(frame: pd.DataFrame, names: Sequence[str]) -> str | None:
    """The distinct values of the first of ``names`` the frame has, joined; None if it has none."""
    for name in names:
        if name in frame.columns:
            values = [str(v) for v in dict.fromkeys(frame[name].dropna().tolist())]
            return join_words(values) if values else None
    return None


def environment_section(data: StudyData, paths: Sequence[pathlib.Path] = ()) -> list[str]:
    """A page's environment section: the versions, backend and device the page's
    counts were made with (`StudyData.environment`), and for each committed
    measurement file it reads (``paths``) the device, jax version, date and
    the command that wrote it, and what the file does not record."""
    import pandas as pd

    env = data.environment
    lines = [
        "## Environment",
        "",
        f"Counts and figures built with `{data.command}` in this environment:",
        "",
        pipe_table(["", ""], [
            ["jax", env["jax"]], ["jaxlib", env["jaxlib"]], ["flax", env["flax"]], ["optax", env["optax"]],
            ["matplotlib (figures)", env["matplotlib"]], ["xla_cost", env["xla_cost"]],
            ["backend", env["backend"]], ["device", env["device"]],
        ], "ll"),
        "",
    ]
    if not paths:
        return lines
    rows = []
    for path in paths:
        frame = pd.read_csv(path)
        kind = _data_kind(path)
        device = _column(frame, ["device"]) or "not recorded"
        on_cpu = all(hardware(d) == "cpu" for d in frame["device"].dropna()) if "device" in frame.columns else False
        command = DATA_COMMANDS[kind][1 if on_cpu else 0] if kind in DATA_COMMANDS else "not recorded"
        cores = _column(frame, ["cores"])
        row = [data_link(data, path), device + (f" ({cores} cores)" if cores else ""),
               _column(frame, ["jax_version", "jax"]) or "not recorded", _column(frame, ["date"]) or "not recorded",
               f"`{command}`"]
        for _, columns, gpu_only in _UNRECORDED:
            row.append(_column(frame, columns) or ("n/a (CPU)" if on_cpu and gpu_only else "not recorded"))
        rows.append(row)
    lines += [
        "Measurements this page reads (committed; never re-measured when the page is built):",
        "",
        pipe_table(["file", "device", "jax", "date", "command (repository root)",
                    *(name for name, _, _ in _UNRECORDED)], rows, "l" * (5 + len(_UNRECORDED))),
        "",
    ]
    return lines


def regenerate_line(data: StudyData) -> str:
    """A page's last line: the command that generated it (`StudyData.command`), and where the counts come from."""
    return (f"Generated by `{data.command}` ([index](index.md)); the counts come from `xla_cost.sweep` through the "
            "results store.")


def r2(value: float) -> str:
    """A ratio to two decimals, for figure titles and ranges."""
    return f"{value:.2f}"


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds, three significant digits; ``—`` for None."""
    return "—" if seconds is None else sig(seconds * 1e3, 3)


def gbs(bandwidth: float | None) -> str:
    """A bandwidth (bytes/s) in GB/s and Gb/s; ``—`` for None."""
    return "—" if bandwidth is None else f"{sig(bandwidth / 1e9, 3)} GB/s ({sig(8 * bandwidth / 1e9, 3)} Gb/s)"


def thin_ticks(batches: Sequence[int], most: int = 7) -> list[int]:
    """At most ``most`` tick positions, the first and the last among them."""
    batches = list(batches)
    if len(batches) <= most:
        return batches
    step = math.ceil((len(batches) - 1) / (most - 1))
    picked = batches[::step]
    return picked if picked[-1] == batches[-1] else [*picked[:-1], batches[-1]]
