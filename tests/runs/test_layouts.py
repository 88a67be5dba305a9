"""The layouts a scaling or estimate run is priced on: a pipeline's stage, the mesh's checks."""

from __future__ import annotations

import pytest

from xla_cost.errors import InputError
from xla_cost.runs import layouts
from xla_cost.runs.configs import RunConfig

N_LAYER = 6
"""A GPT whose 6 blocks a pipeline splits."""


@pytest.mark.parametrize("stages, per_stage", [(1, 6), (2, 3), (4, 2), (5, 2), (6, 1)])
def test_a_stage_holds_the_ceiling_of_the_layers_over_the_stages(stages, per_stage):
    # ceil(6 / stages): 6, 3, 2 (6/4 = 1.5), 2 (6/5 = 1.2), 1 (one layer a stage, the most stages)
    run = RunConfig("gpt2-small", 1, {"n_layer": N_LAYER})
    assert layouts.pipeline_stage(run, stages).config["n_layer"] == per_stage


def test_more_stages_than_layers_are_refused():
    # 7 stages for 6 layers would leave a stage empty
    with pytest.raises(InputError, match=r"at most n_layer = 6 pipeline stages .* got pipeline=7"):
        layouts.pipeline_stage(RunConfig("gpt2-small", 1, {"n_layer": N_LAYER}), N_LAYER + 1)
