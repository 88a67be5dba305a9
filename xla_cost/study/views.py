"""What several study pages read from the collected data, and the lines they share.

Analysed runs as rows (per model, per layer, at a batch size), seed 001's nets
by name and first layer, the timing cases of the committed CSVs and their
phase shares, and the few formats (milliseconds, link speeds) and page lines
(the failures, the regenerate line) every page writes alike. Functions of
`StudyData` or of its frames: they compute no new figure.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xla_cost.choices import REMAINDER
from xla_cost.errors import InputError
from xla_cost.present.units import sig
from xla_cost.study.data import StudyData
from xla_cost.study.plan import COMMAND

if TYPE_CHECKING:
    import pandas as pd

    from xla_cost.runs.sweeps import SweepResult

__all__ = [
    "FIRST_LAYER",
    "NET_NAMES",
    "REMAINDER",
    "SHARE_PHASES",
    "SIZE_ONE_INPUT",
    "analysed",
    "architecture_rows",
    "by_model",
    "data_link",
    "deepest_layers",
    "deepest_run",
    "depth_runs",
    "failure_section",
    "first_and_other_layers",
    "gbs",
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
    "thin_ticks",
    "timing_cases",
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
    """Rows as dicts with None for missing values (pandas NA and NaN)."""
    if frame.empty:
        return []
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


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


def _data_name(path: pathlib.Path) -> str:
    """A committed data file as pages cite it (its path in the repository)."""
    return f"reports/data/{path.name}"


def data_link(path: pathlib.Path) -> str:
    """A markdown link to a committed data file, from a page under ``reports/``."""
    return f"[`{_data_name(path)}`](data/{path.name})"


def regenerate_line() -> str:
    """A page's last line: the command that generated it, and where the counts come from."""
    return f"Generated by `{COMMAND}` ([index](index.md)); the counts come from `xla_cost.sweep` through the results store."


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
