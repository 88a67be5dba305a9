"""The page ``claims``: every quantitative claim of the seeds, with a verdict.

One row per claim of `xla_cost.study.claims.CLAIMS`: its rule (stated before
the figures), what was measured, the page that shows it, and the verdict by
that rule; then the environment the counts and the measurements come from.
"""

from __future__ import annotations

from xla_cost.present.markdown import markdown_file, pipe_table
from xla_cost.present.units import pct
from xla_cost.study.claims import CLAIMS, VERDICT_LABELS, VERDICTS, verdict_kind
from xla_cost.study.data import StudyData
from xla_cost.study.plan import APPROX_TOLERANCE, TOLERANCE
from xla_cost.study.published import SEED_FILES
from xla_cost.study.views import environment_section, regenerate_line

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
        rows.append([str(index), claim.seeds, claim.text, claim.rule, measured, f"[{claim.page}]({claim.page}.md)",
                     f"**{verdict}**"])
    lines = [
        "# The seeds' claims, tested",
        "",
        "Every quantitative claim of the seed documents (000–004: "
        + ", ".join(f"`{name}`" for name in SEED_FILES.values())
        + ", kept beside the project, not in this repository), what this project measured, the page that "
        "shows it, and a verdict. Each claim's rule (the `rule` column) was written before the figures were "
        "read and is applied in code (`xla_cost.study.claims.CLAIMS`); each rule can give each of its verdicts "
        "(`tests/study/test_claims.py` feeds every check made-up data for each). The conventions the rules share:",
        "",
        f"- **confirmed**: the rule's test holds. A figure the seed states exactly must be within "
        f"{pct(TOLERANCE, 0)} of it; one it gives as approximate (\"~\", \"about\", \"close to\") within "
        f"{pct(APPROX_TOLERANCE, 0)}; a qualitative claim is read as the test its rule names, with any threshold "
        "taken from the claim's wording or these two conventions, never from the data;",
        "- **refuted**: the test fails;",
        "- **depends on …**: it holds under one condition and not another, named in the verdict;",
        "- **not testable here**: it needs hardware or data this project has not measured; the row says what "
        "would test it. A claim about the V100 is judged on V100 timings only; other GPUs' figures are shown as "
        "context, not evidence.",
        "",
        "Counts are XLA's (SGD, float32, CPU backend: a count does not depend on the device's speed); times are "
        "the committed measurements of [step-time.md](step-time.md), judged per device: a claim about GPU "
        "training on each GPU's timings apart, never on a CPU's, and the measurements step-time.md marks "
        "unexplained are never evidence.",
        "",
        "Verdicts: " + ", ".join(f"{VERDICT_LABELS[k]} {counts[k]}" for k in VERDICTS if k in counts)
        + f" (of {len(CLAIMS)}).",
        "",
        pipe_table(["#", "seed", "claim", "rule", "measured", "page", "verdict"], rows, "rllllll"),
        "",
        *environment_section(data, [p for p, _ in data.timing]),
        regenerate_line(data),
    ]
    return {f"{NAME}.md": markdown_file("\n".join(lines))}
