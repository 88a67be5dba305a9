"""The page ``claims``: every quantitative claim of the seeds, with a verdict.

One row per claim of `xla_cost.study.claims.CLAIMS`: what was measured, the
page that shows it, and the verdict by the rules the page states.
"""

from __future__ import annotations

from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import pct
from xla_cost.study.claims import CLAIMS, VERDICT_LABELS, VERDICTS, verdict_kind
from xla_cost.study.data import StudyData
from xla_cost.study.plan import APPROX_TOLERANCE, TOLERANCE
from xla_cost.study.published import SEED_FILES
from xla_cost.study.views import regenerate_line

NAME = "claims"
TITLE = "Every quantitative claim of seeds 000–004 with a verdict"
ORDER = 90
SHARDED = True  # seed 004's claims price sharded steps


def build(data: StudyData) -> dict[str, bytes]:
    rows = []
    counts: dict[str, int] = {}
    for index, claim in enumerate(CLAIMS, 1):
        measured, verdict = claim.check(data)
        kind = verdict_kind(verdict)
        counts[kind] = counts.get(kind, 0) + 1
        rows.append([str(index), claim.seeds, claim.text, measured, f"[{claim.page}]({claim.page}.md)",
                     f"**{verdict}**"])
    lines = [
        "# The seeds' claims, tested",
        "",
        "Every quantitative claim of the seed documents (000–004: "
        + ", ".join(f"`{name}`" for name in SEED_FILES.values())
        + ", kept beside the project, not in this repository), what this project measured, the page that "
        "shows it, and a verdict by these rules, applied in code (`xla_cost.study.claims.CLAIMS`):",
        "",
        f"- **confirmed**: the measured figure is within {pct(TOLERANCE, 0)} of the claimed one (within "
        f"{pct(APPROX_TOLERANCE, 0)} where the seed gives it as approximate, \"~\" or \"about\"), or, for a "
        "qualitative claim, the stated test holds in every measured case;",
        "- **refuted**: it does not;",
        "- **depends on …**: it holds under one condition and not another, named;",
        "- **not testable here**: it needs hardware this project has not measured on; the row says what would "
        "test it.",
        "",
        "Counts are XLA's (SGD, float32, CPU backend: a count does not depend on the device's speed); times are "
        "the committed measurements of [step-time.md](step-time.md).",
        "",
        "Verdicts: " + ", ".join(f"{VERDICT_LABELS[k]} {counts[k]}" for k in VERDICTS if k in counts)
        + f" (of {len(CLAIMS)}).",
        "",
        pipe_table(["#", "seed", "claim", "measured", "page", "verdict"], rows, "rlllll"),
        "",
        regenerate_line(),
    ]
    return {f"{NAME}.md": markdown_file("\n".join(lines))}
