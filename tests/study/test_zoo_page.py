"""The zoo page's rows for today's families: published counts from the families'
own tables, total and active parameters of a mixture of experts, the analytic
forward FLOP from the family's closed form, scanned models starred.

The page is built from made-up sweep rows (nothing analysed): the figures under
test are the page's own, each expected figure written here from the models'
dimensions or the papers.
"""

from __future__ import annotations

import pandas as pd
import pytest

from xla_cost.runs.sweeps import SweepResult
from xla_cost.study.data import StudyData
from xla_cost.study.pages import zoo as zoo_page
from xla_cost.study.plan import ReportPlan
from xla_cost.present.units import sig

# Llama 3 8B (Dubey et al. 2024, Table 3): 32 layers, d 4096, 32 heads of 128, 8 KV
# heads, FFN 14,336, vocabulary 128,256, 8,192 tokens.
L, D, N, K, H, F, V, T = 32, 4096, 32, 8, 128, 14_336, 128_256, 8192
LLAMA3_8B = 2 * V * D + L * (2 * D * N * H + 2 * D * K * H + 3 * D * F + 2 * D) + D
# per token: the projections, the SwiGLU's three products and the head, 2 FLOP a
# multiply-add, and q k^T and probs v over all T pairs of each layer
LLAMA3_8B_PER_TOKEN = 2 * (L * (D * (2 * N + 2 * K) * H + 3 * D * F) + D * V) + L * 2 * 2 * N * H * T
# Mixtral 8x7B, total and active (Jiang et al. 2024, Table 1: 32 layers, d 4096, 32
# heads of 128, 8 KV heads, 8 experts of 14,336, top 2, vocabulary 32,000)
_ATTENTION = 2 * 4096 * 32 * 128 + 2 * 4096 * 8 * 128 + 2 * 4096
MIXTRAL = (2 * 32_000 * 4096 + 4096 + 32 * (_ATTENTION + 4096 * 8 + 3 * 4096 * 14_336 * 8),
           2 * 32_000 * 4096 + 4096 + 32 * (_ATTENTION + 4096 * 8 + 3 * 4096 * 14_336 * 2))
GEMMA_2B = 524_550_144 + 1_981_884_416  # Gemma Team 2024a, Table 2: embedding + non-embedding


def _run(model: str, parameters: int, active: int | None, per_token: float) -> dict:
    tokens = {"llama3-8b": T, "mixtral-8x7b": 4096, "gemma-2b": 8192}[model]
    forward = per_token * tokens
    return {"model": model, "batch_size": 1, "optimizer": "sgd", "status": "ok", "parameters": parameters,
            "active_parameters": active, "forward_flops": forward, "backward_flops": 2 * forward,
            "update_flops": 2 * parameters, "train_step_flops": 3 * forward + 2 * parameters,
            "backward_to_forward": 2.0, "forward_source": "xla+loops"}


@pytest.fixture(scope="module")
def page() -> str:
    runs = [_run("llama3-8b", LLAMA3_8B, None, 1.01 * LLAMA3_8B_PER_TOKEN),
            _run("mixtral-8x7b", *MIXTRAL, 40e9), _run("gemma-2b", GEMMA_2B, None, 5e9)]
    frame = pd.DataFrame(runs)
    frame[["parameters", "active_parameters"]] = frame[["parameters", "active_parameters"]].astype("Int64")
    plan = ReportPlan(zoo=("llama3-8b", "mixtral-8x7b", "gemma-2b")).resolved()
    data = StudyData(None, plan, None, jobs=0, progress=False)
    data.__dict__["zoo"] = SweepResult(frame, pd.DataFrame(columns=["model", "batch_size", "path"]))
    return zoo_page.build(data)["zoo.md"].decode()


def _row(page: str, model: str) -> list[str]:
    line = next(line for line in page.splitlines() if line.startswith(f"| `{model}` |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_a_llama_against_its_published_count_and_its_closed_form(page):
    row = _row(page, "llama3-8b")
    assert row[1] == f"{LLAMA3_8B:,}"
    # Dubey et al. 2024 / Meta's model card: 8.03B, rounded
    assert row[2].startswith(f"8.03B, {LLAMA3_8B / 8.03e9:.3f}× (Dubey et al. 2024") and row[2].endswith(", rounded)")
    assert row[4] == sig(1.01 * LLAMA3_8B_PER_TOKEN / 1e9) + " *"  # scanned: starred
    assert row[5] == f"{sig(LLAMA3_8B_PER_TOKEN / 1e9)} (products, closed form)"
    assert row[6] == "1.010"


def test_a_mixture_of_experts_lists_total_and_active_against_both_published(page):
    total, active = MIXTRAL
    row = _row(page, "mixtral-8x7b")
    assert row[1] == f"{total:,} total, {active:,} active"
    assert row[2].startswith(f"46.7B, {total / 46.7e9:.3f}× total; 12.9B active, {active / 12.9e9:.3f}× (Mistral AI")
    assert "active parameters against theirs" in page


def test_an_exact_published_count_reads_equal(page):
    assert _row(page, "gemma-2b")[2] == f"= {GEMMA_2B:,} (Gemma Team 2024a (Gemma), Table 2)"
