"""Which published runs' programs split the residual stream over the tensor axis (`run_cases.RESIDUAL_SHARDED`)."""

from __future__ import annotations

import pytest

from xla_cost.study import run_cases
from xla_cost.study.published_runs import PUBLISHED_RUNS


@pytest.mark.parametrize("run", PUBLISHED_RUNS, ids=[r.name for r in PUBLISHED_RUNS])
def test_the_residual_stream_is_split_where_the_runs_framework_splits_it(run):
    built = run_cases.program(run)
    # a paper whose framework splits it (MaxText's activation_embed -> tensor), on a tensor axis to split it over;
    # everywhere else the option is absent from the config: the program and its key as without it
    split = run.paper in run_cases.RESIDUAL_SHARDED and run.tensor > 1 and built.family == "gpt"
    assert built.config.get("shard_residual") is (True if split else None)
    assert ("residual stream's width (d_model) split over" in built.description) == split
    if split:
        assert f"over the {run.tensor} tensor-parallel devices" in built.description


def test_every_maxtext_v5p_run_splits_its_residual_stream():
    # the eight v5p runs of MaxText's 2023 table are its GPT-style decoder on tensor axes of 4 to 16
    v5p = [r for r in PUBLISHED_RUNS if r.paper == "maxtext" and r.device == "tpu-v5p"]
    assert len(v5p) == 8
    assert all(run_cases.program(r).config.get("shard_residual") is True for r in v5p)
