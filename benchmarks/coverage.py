"""The coverage table: every Flax layer and common op, jaxpr count against XLA.

For each case of tests/coverage_cases.py (the cases of tests/count/test_coverage.py)
and each phase (forward, grad, update with Adam): the FLOP counted from the
jaxpr, XLA's compiled figure, XLA's figure with the loop iterations it misses
added (nn.RNN's scan; "=" where there is none), their ratio, the known gap of
the test, if any, and the primitives the phase's jaxpr contains (for grad,
those it has beyond the forward pass's, marked "+").

Usage: ``python benchmarks/coverage.py [substring ...]`` (only the cases whose
id contains one of the substrings); prints a markdown table.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from tests import coverage_cases as C  # noqa: E402
from tests.count.test_coverage import KNOWN_GAPS  # noqa: E402

HEADER = (
    "| case | phase | jaxpr FLOP | XLA FLOP | XLA + loops | jaxpr / (XLA + loops) "
    "| known gap | primitives |"
)
SEPARATOR = "|---|---|---:|---:|---:|---:|---|---|"


def rows(case: C.Case) -> list[str]:
    report = C.analyze_case(case)
    jaxprs = C.phase_jaxprs(case)
    out = []
    for phase in C.PHASES:
        p = report.phases[phase]
        ratio = f"{p.jaxpr_flops / p.flops:.4f}" if p.flops else "n/a"
        xla = "n/a" if p.xla_flops is None else f"{p.xla_flops:,}"
        corrected = f"{p.flops:,}" if p.loop_corrected else "="
        gap = KNOWN_GAPS.get((case.id, phase))
        note = f"{gap[1]} (tolerance {gap[0]:.0%})" if gap else ""
        seen = C.primitives_in(jaxprs[phase])
        if phase == "grad":  # what the backward pass adds to the forward pass's primitives
            seen = {f"+{name}" for name in seen - C.primitives_in(jaxprs["forward"])}
        primitives = ", ".join(sorted(seen))
        out.append(
            f"| {case.id} | {phase} | {p.jaxpr_flops:,} | {xla} | {corrected} | {ratio} "
            f"| {note} | {primitives} |"
        )
    if report.unsupported:
        out.append(f"| {case.id} | unsupported | {dict(report.unsupported)} | | | | | |")
    return out


def main(argv: list[str]) -> None:
    selected = [c for c in C.CASES if not argv or any(s in c.id for s in argv)]
    start = time.perf_counter()
    print(HEADER)
    print(SEPARATOR)
    for case in selected:
        for line in rows(case):
            print(line, flush=True)
    print(
        f"\n{len(selected)} cases, optimizer {C.OPTIMIZER}, batch {C.BATCH}, width {C.WIDTH}; "
        f"{time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
