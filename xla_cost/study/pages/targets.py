"""The page ``targets``: the CPU proxy's program beside each target's own, per model and phase.

Read from the newest committed ``reports/data/targets_<date>.csv``
(``benchmarks/target_compare.py``): ResNet-50, BERT-base and GPT-2 small in
bfloat16 with Adam, compiled for the CPU and, deviceless, by an H100's, an
A100's, a V100's and a TPU v5e's own compiler. Per model, a summary of the
train step on every target, then per target the phases side by side
(`xla_cost.analysis.compare`) and the reasons its rules find in the rows;
the runs that failed, and the environment of the page and of the file. With
no file committed, the page says which command writes one.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import count, join_words, ratio
from xla_cost.study.data import StudyData
from xla_cost.study.views import DATA_COMMANDS, data_link, environment_section, records, regenerate_line

NAME = "targets"
TITLE = "The CPU proxy and the target's compiler"
ORDER = 65

DATA_COMMAND = DATA_COMMANDS["targets"][0]
"""The command that writes the page's data (``reports/data/targets_<date>.csv``), from the repository root."""

_FIGURES = ("flops", "bytes_accessed", "kernels", "library_calls", "argument_bytes", "temp_bytes", "peak_bytes",
            "jaxpr_flops")
_RUN = ("model", "config", "batch", "dtype", "optimizer")
_ENVIRONMENT = (("jax", "jax_version"), ("jaxlib", "jaxlib_version"), ("CUDA plugin", "cuda_plugin_version"),
                ("libtpu", "libtpu_version"), ("xla_cost", "xla_cost_version"), ("cores", "cores"),
                ("date", "date"), ("command", "command"))


def _figure(value: Any) -> int | None:
    """A count read back from the file (text, exact), None where empty."""
    if value is None or value == "":
        return None
    text = str(value)
    return int(text) if text.lstrip("-").isdigit() else int(float(text))


def comparisons(rows: Sequence[Mapping[str, Any]]) -> list[tuple[dict[str, Any], list[Any]]]:
    """The file's rows as comparisons: per run (model, config, batch, dtype,
    optimizer) its settings and one `xla_cost.TargetComparison` per target that
    analysed, beside the CPU's rows, in the file's order."""
    from xla_cost.analysis.compare import PhaseComparison, TargetComparison

    runs: dict[tuple[Any, ...], dict[str, list[Mapping[str, Any]]]] = {}
    for row in rows:
        if row.get("status") == "ok":
            key = tuple(row.get(k) for k in _RUN)
            runs.setdefault(key, {}).setdefault(str(row["target"]), []).append(row)
    out = []
    for key, by_target in runs.items():
        settings = dict(zip(_RUN, key))
        cpu = {r["phase"]: r for r in by_target.get("cpu", [])}
        found = []
        for target, target_rows in by_target.items():
            if target == "cpu" or not cpu:
                continue
            phases = [PhaseComparison(str(r["phase"]), {f: _figure(cpu[r["phase"]].get(f)) for f in _FIGURES},
                                      {f: _figure(r.get(f)) for f in _FIGURES})
                      for r in target_rows if r["phase"] in cpu]
            found.append(TargetComparison.of_rows(str(key[0]), target, str(target_rows[0]["platform"]),
                                                  str(settings["dtype"]), phases))
        out.append((settings, found))
    return out


def _run_title(settings: Mapping[str, Any]) -> str:
    config = str(settings.get("config") or "")
    shape = ", ".join(filter(None, [f"batch {settings['batch']}", config.replace("=", " ").replace(",", ", ")]))
    return f"{settings['model']} ({shape}, {settings['dtype']}, {settings['optimizer']})"


def _seconds(rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Any], target: str) -> str:
    found = next((r for r in rows if r.get("target") == target and r.get("status") == "ok"
                  and all(r.get(k) == v for k, v in settings.items())), None)
    return "—" if found is None or not found.get("seconds") else f"{float(found['seconds']):.0f} s"


def _summary(settings: Mapping[str, Any], found: Sequence[Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The train step on every target against the CPU: the ratios, and the analysis's seconds."""
    table = []
    for comparison in found:
        step = comparison.row("train_step")
        table.append([f"`{comparison.target}`", *(
            "—" if (x := step.ratio(f)) is None else ratio(x, 3)
            for f in ("flops", "bytes_accessed", "kernels", "peak_bytes")),
            count(step.target.get("library_calls")) if step.target.get("library_calls") is not None else "—",
            _seconds(rows, settings, comparison.target)])
    return [
        f"Train step, target / CPU (CPU analysis: {_seconds(rows, settings, 'cpu')}):",
        "",
        pipe_table(["target", "FLOP ×", "bytes ×", "kernels ×", "peak ×", "library / custom calls", "analysis"],
                   table, "lrrrrrr"),
        "",
    ]


def _failures(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    failed = [r for r in rows if r.get("status") not in (None, "ok")]
    if not failed:
        return []
    return ["## Runs that failed", "",
            *(f"- {_run_title(r)} on `{r['target']}`: {r.get('error') or r.get('status')}" for r in failed), ""]


def _file_environment(data: StudyData, path: pathlib.Path, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    def values(column: str) -> str:
        found = [str(r[column]) for r in rows if r.get(column)]
        return join_words(list(dict.fromkeys(found))) or "not recorded"

    return [
        f"The compilers and plugins of {data_link(data, path)}:",
        "",
        pipe_table(["", ""], [[name, values(column) if column != "command" else f"`{values(column)}`"]
                              for name, column in _ENVIRONMENT], "ll"),
        "",
    ]


def build(data: StudyData) -> dict[str, bytes]:
    import pandas as pd

    from xla_cost.analysis.compare import comparison_frame
    from xla_cost.present.markdown import markdown_table

    lines = [
        f"# {TITLE}",
        "",
        "Every figure of the other pages is the program the **CPU** compiler builds (the proxy). Here the same "
        "training steps are compiled by each target's own compiler, on this machine and without the device "
        "(`xla-cost analyze MODEL --target NAME --compare-cpu`; jax's deviceless topologies, "
        "`xla_cost.compiled.targets`): XLA's GPU compiler for an H100, an A100 80GB and a V100 32GB (jax's CUDA "
        "plugin) and libtpu's for one TPU v5e chip. Per phase: FLOP (a GPU's deviceless compile gives no cost "
        "analysis: XLA's analysis over its optimized module, library calls counted from their operands), bytes "
        "accessed, kernel launches (instructions that run code, loops multiplied out), library calls (a GPU's "
        "custom calls: cuBLAS, cuDNN) or a TPU's custom calls (its own kernels, such as gathers' index packing; "
        "not read on the CPU), the program's temporaries, and the step's peak (the train "
        "step compiled as one program, parameters and optimizer state donated); × is target / CPU. The reasons "
        "under each table come from `xla_cost.analysis.compare`'s rules applied to the rows, each named only "
        "where its figures show it.",
        "",
    ]
    files = data.files("targets")  # the newest by name: its date
    if not files:
        lines += [
            f"No compiles committed yet: `{DATA_COMMAND}` (repository root; tens of minutes on 2 cores) writes "
            "`reports/data/targets_<date>.csv`, then `xla-cost report targets` writes this page from it.",
            "",
            *environment_section(data), regenerate_line(data), "",
        ]
        return {f"{NAME}.md": markdown_file("\n".join(lines))}
    path = files[-1]
    rows = records(pd.read_csv(path, dtype=str, keep_default_na=False))  # counts exact, empty cells ""
    for settings, found in comparisons(rows):
        lines += [f"## {_run_title(settings)}", ""]
        if not found:
            lines += ["No target analysed beside the CPU (see the failures below).", ""]
            continue
        lines += _summary(settings, found, rows)
        for comparison in found:
            device = next((r.get("device") for r in rows if r.get("target") == comparison.target
                           and r.get("device")), comparison.target)
            lines += [f"### `{comparison.target}` ({device})", "", markdown_table(comparison_frame(comparison)), ""]
            lines += [*(f"- {reason}" for reason in comparison.reasons), ""] if comparison.reasons else [
                "- No difference the rules name: every figure they read is within their thresholds.", ""]
    lines += _failures(rows)
    lines += [*environment_section(data, [path]), *_file_environment(data, path, rows), regenerate_line(data), ""]
    return {f"{NAME}.md": markdown_file("\n".join(lines))}
