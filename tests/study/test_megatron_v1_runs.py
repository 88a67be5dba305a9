"""Megatron-LM v1.0's weak model-parallel scaling on a DGX-2H (NVIDIA ADLR's blog, Table 1), issue 51.

The blog gives parameters (1.2, 2.0, 4.2, 8.7 billion), GPUs, batch 8 and
iteration times (1288, 1242, 1357, 1508 ms) with weak-scaling efficiencies
(90.7, 86.5, 79.6%); the configurations are Megatron-LM's README cases 1B ...
8B (5281919420, images/tables.tex). Each figure here is derived from the
published times and those configurations by the formula beside it; the
framework's facts are read from its `Framework` (v1.0 at 03d28809). Nothing is
compiled.
"""

from __future__ import annotations

import types

import pytest

from xla_cost.errors import InputError
from xla_cost.study.published_record import SCALED_BY, framework
from xla_cost.study.published_runs import PUBLISHED_RUNS
from xla_cost.study.run_cases import CHOSEN, megatron_parameters, run_cases, run_setup

RUNS = {run.name: run for run in PUBLISHED_RUNS}
BLOG = ("megatron2019v1-1.2b-1", "megatron2019v1-2.0b-2", "megatron2019v1-4.2b-4", "megatron2019v1-8.7b-8")


def _seconds(run) -> float:
    return run.published if run.quantity == "seconds per step" else dict(run.also)["seconds per step"]


def _gpt2_parameters(layers: int, hidden: int, vocabulary: int = 51200, sequence: int = 1024) -> int:
    # a GPT-2 layer: 12 h^2 weights (qkv 3h^2, out h^2, fc 4h^2, proj 4h^2) and 13 h biases and LayerNorms
    # (qkv 3h, out h, fc 4h, proj h, two LayerNorms 4h); tied embeddings V h, positions s h, final LayerNorm 2h
    return 12 * layers * hidden ** 2 + 13 * layers * hidden + vocabulary * hidden + sequence * hidden + 2 * hidden


@pytest.mark.parametrize("name, blog, readme", [
    # the blog's Table 1 (billions, rounded to one decimal) and the README's tables.tex (two decimals)
    ("megatron2019v1-1.2b-1", 1.2, 1.16), ("megatron2019v1-2.0b-2", 2.0, 2.03),
    ("megatron2019v1-4.2b-4", 4.2, 4.24), ("megatron2019v1-8.7b-8", 8.7, 8.67),
])
def test_the_readme_cases_have_the_blogs_sizes(name, blog, readme):
    run = RUNS[name]
    counted = _gpt2_parameters(run.layers, run.hidden)
    assert megatron_parameters(run) == counted
    assert round(counted / 1e9, 1) == blog and round(counted / 1e9, 2) == readme
    assert run.hidden // run.heads == 128 and run.ffn == 4 * run.hidden  # every case's heads of 128, 4h


def test_the_blogs_efficiencies_follow_from_its_times_weighed_by_parameters():
    # weak scaling as Megatron-LM's tables compute it: (N_n / (n t_n)) / (N_1 / t_1), N every parameter; the
    # blog's printed percentages to their last digit (the times are rounded to the millisecond)
    base = RUNS["megatron2019v1-1.2b-1"]
    per_gpu_base = _gpt2_parameters(base.layers, base.hidden) / _seconds(base)
    for name in BLOG[1:]:
        run = RUNS[name]
        assert run.relative_to == base.name and run.scaled_by == "parameters" and run.tensor == run.devices
        efficiency = _gpt2_parameters(run.layers, run.hidden) / (run.devices * _seconds(run)) / per_gpu_base
        assert efficiency == pytest.approx(run.published, abs=0.0007), name


def test_the_baseline_tflops_and_its_share_of_the_peak():
    # 62.4 TFLOP/s: Megatron's 96 B s l h^2 (1 + s/6h + V/16lh) over 1,288 ms gives 62.6 (0.3%); the paper's
    # Table 1 1.2B (1,536 x 40) would give 67.0: the blog's 1.2B is the README's case 1B. 48% of 130 TFLOP/s
    base = RUNS["megatron2019v1-1.2b-1"]
    b, s, l, h, v = 8, 1024, base.layers, base.hidden, base.vocabulary
    flops = 96 * b * s * l * h ** 2 * (1 + s / (6 * h) + v / (16 * l * h))
    assert flops / base.published / 1e12 == pytest.approx(dict(base.also)["TFLOP/s per device"], rel=0.005)
    table1 = 96 * b * s * 40 * 1536 ** 2 * (1 + s / (6 * 1536) + v / (16 * 40 * 1536))
    assert table1 / base.published / 1e12 > 66
    assert dict(base.also)["TFLOP/s per device"] / dict(base.also)["MFU"] == pytest.approx(130, abs=1)


def test_a_case_weighs_its_steps_as_its_source_does():
    # the blog's own times priced give back the blog's efficiency: the case divides parameters, not the
    # 96 B s l h^2 FLOP (which would give 77.8% for the 8.7B at those times)
    for name in BLOG[1:]:
        case, = run_cases([name])
        run, base = RUNS[name], RUNS["megatron2019v1-1.2b-1"]
        steps = [types.SimpleNamespace(prediction=types.SimpleNamespace(seconds=_seconds(r))) for r in (run, base)]
        assert case.figure(steps) == pytest.approx(run.published, abs=0.0007), name
    assert all(run.scaled_by in SCALED_BY for run in PUBLISHED_RUNS)


def test_parameters_are_counted_for_a_gpt2_style_run_only():
    llama = next(run for run in PUBLISHED_RUNS if run.gated)
    with pytest.raises(InputError, match="GPT-2-style") as err:
        megatron_parameters(llama)
    assert "\n" not in str(err.value)


def test_v1_ran_eager_as_2019_did_its_own_code_cited():
    v1 = framework("megatron-v1.0")
    assert v1.scans is False and v1.unfused == ("forward", "grad")  # no fused elementwise kernel until 51a2e6b0
    assert (v1.overlaps_gradient_reduce, v1.gradient_reduce_bytes) == (False, 2)  # --DDP-impl local, float16
    assert v1.reruns_recomputed_collectives
    assert "03d28809" in v1.why and "v1.0" in v1.runtime and "51a2e6b0" in v1.runtime
    assert {run.framework for run in PUBLISHED_RUNS if run.paper == "nvadlr2019"} == {"megatron-v1.0"}
    for name in BLOG:
        assert name in CHOSEN
        setup = run_setup(RUNS[name])
        assert setup.unfused == ("forward", "grad")
        assert setup.layout.get("rerun_collectives", False) == (RUNS[name].tensor > 1)  # checkpoint's rerun
        assert setup.mesh == ({"model": RUNS[name].tensor} if RUNS[name].tensor > 1 else {})
