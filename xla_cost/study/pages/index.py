"""The page ``index``: what each page shows, the environment, and how to regenerate them.

The pages are listed from their modules (`xla_cost.study.pages`), each with
its ``TITLE``; the run time of ``xla-cost report all`` comes from a committed
CSV (``benchmarks/time_report.py``).
"""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING

from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import join_words
from xla_cost.study import pages
from xla_cost.study.data import StudyData, collected
from xla_cost.study.plan import COMMAND, DATA_PATTERNS
from xla_cost.study.views import data_link, environment_section, records

if TYPE_CHECKING:
    import pandas as pd

NAME = "index"
TITLE = "The pages, the environment that made them, and how to regenerate them"
ORDER = 0


@collected
def report_time(data: StudyData) -> tuple[pathlib.Path, pd.DataFrame] | None:
    """The committed run times of ``xla-cost report all``, the newest file."""
    return data.latest("report_time")


def build(data: StudyData) -> dict[str, bytes]:
    lines = [
        "# xla_cost reports",
        "",
        "Generated pages: what one training step of a JAX/Flax model costs, checked against the seed documents.",
        "",
        pipe_table(["page", "what it shows"],
                   [[f"[{p}]({p}.md)", pages.TITLES[p]] for p in pages.PAGES if p != NAME], "ll"),
        "",
        *environment_section(data, [p for kind in DATA_PATTERNS for p in data.files(kind)]),
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
        "FILE.py:ATTR --input-shape B,...` (or `package.module:ATTR`) writes one page for a model of your own.",
        "",
    ]
    timing = report_time(data)
    if timing is not None:
        path, frame = timing
        rows = records(frame)
        parts = [f"{_duration(float(row['seconds']))} with {row['store']}" for row in rows]
        loads = [str(row["load_average"]) for row in rows if row.get("load_average") is not None]
        first = rows[0] if rows else {}
        lines += [
            f"Run time of `{first.get('command', COMMAND)}` on {first.get('device', '?')} "
            f"({first.get('cores', '?')} cores, jax {first.get('jax_version', '?')}, {first.get('date', '?')}): "
            f"{join_words(parts)}"
            + (f"; the load average was {join_words(loads)} while they ran" if loads else "")
            + f" ({data_link(data, path)}, written by `python benchmarks/time_report.py`).",
            "",
        ]
    else:
        lines += ["Run time: not measured yet (`python benchmarks/time_report.py` writes "
                  "`reports/data/report_time_<device>_<date>.csv`).", ""]
    files = [p for kind in DATA_PATTERNS for p in data.files(kind)]
    if files:
        lines += ["Committed data: " + ", ".join(f"[`{p.name}`]({data.data_href(p)})" for p in files) + ".", ""]
    return {f"{NAME}.md": markdown_file("\n".join(lines))}


def _duration(seconds: float) -> str:
    """``42 s``, or ``6 min 14 s`` from a minute on."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"
