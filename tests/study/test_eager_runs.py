"""Runs whose framework ran eager and unfused are priced from the unfused program (issue 51).

Shoeybi et al. 2019 ran Megatron-LM of 2019 (a0368ddf): its layers in eager
PyTorch, each elementwise operation a kernel (mpu/transformer.py lines
117-144), apex's FusedAdam (pretrain_gpt2.py line 41), and its data-parallel
gradients all-reduced in float16 after the backward pass (pretrain_gpt2.py
lines 283-299, model/distributed.py lines 37-73, arguments.py line 79). Each
fact is read from the run's `Framework` in one place; nothing is compiled here.
"""

from __future__ import annotations

import dataclasses

import pytest

from xla_cost.errors import InputError
from xla_cost.study.published_record import FRAMEWORKS, framework
from xla_cost.study.published_runs import PUBLISHED_RUNS
from xla_cost.study.run_cases import CHOSEN, program, run_cases, run_setup
from xla_cost.timemodel.schedule import Layout


def test_the_2019_framework_runs_its_layers_unfused_its_optimizer_fused():
    eager = framework("megatron-2019")
    assert (eager.fuses_elementwise, eager.fuses_optimizer) == (False, True)
    assert eager.unfused == ("forward", "grad")  # the update is apex's FusedAdam, one kernel per tensor
    assert (eager.overlaps_gradient_reduce, eager.gradient_reduce_bytes) == (False, 2)  # float16, after backward
    assert "a0368ddf" in eager.runtime
    # LLM Foundry of the MPT tables ran eager too (no torch.compile: train.py's compile_config None), its
    # gradients reduced by FSDP in the program: only its layers' programs unfused
    foundry = framework("llm-foundry")
    assert foundry.unfused == ("forward", "grad") and "5e85bd62" in foundry.runtime
    assert foundry.overlaps_gradient_reduce and foundry.gradient_reduce_bytes is None
    # every other framework fuses, as before: no program of theirs changes (Megatron-LM v1.0 ran eager as 2019
    # did: tests/study/test_megatron_v1_runs.py)
    assert all(f.unfused == () and f.overlaps_gradient_reduce and f.gradient_reduce_bytes is None
               for f in FRAMEWORKS if f.name not in ("megatron-2019", "megatron-v1.0", "llm-foundry"))


def test_each_run_takes_its_frameworks_facts_and_no_other():
    for run in PUBLISHED_RUNS:
        if run.name not in CHOSEN:
            continue
        facts, setup = framework(run.framework), run_setup(run)
        assert setup.unfused == facts.unfused == program(run).unfused, run.name
        assert setup.layout.get("overlap_gradients", True) == facts.overlaps_gradient_reduce, run.name
        assert setup.layout.get("gradient_bytes") == facts.gradient_reduce_bytes, run.name
    shoeybi = [run for run in PUBLISHED_RUNS if run.paper == "shoeybi2019"]
    assert shoeybi and {run.framework for run in shoeybi} == {"megatron-2019"}
    # the v1.0 blog's runs are the later software (multi-tensor fp16 optimizer, new masking): not the 2019 framework
    assert {run.framework for run in PUBLISHED_RUNS if run.paper == "nvadlr2019"} == {"megatron-v1.0"}


def test_an_eager_runs_program_is_the_unfused_one_and_its_case_says_so():
    case, = run_cases(["megatron2019-1.2b-64"])
    for setup in case.setups:  # the run and its 1-GPU base
        assert setup.unfused == ("forward", "grad")
        assert setup.key().endswith("('unfused', 'forward', 'grad'))")  # its own key: its own program
        assert "forward and grad unfused" in setup.describe()
        fused = dataclasses.replace(setup, unfused=())
        assert fused.key() != setup.key() and "unfused" not in repr(fused.key())
    assert "fusion passes off" in case.assumptions[-1]
    assert "after the backward pass, nothing hidden, 2 bytes a parameter" in case.assumptions[-1]


def test_gradient_bytes_are_a_positive_integer_or_none():
    assert Layout(data=2, gradient_bytes=2, overlap_gradients=False).gradient_bytes == 2
    for bad in (0, 2.0, True):
        with pytest.raises(InputError, match="gradient bytes per parameter") as err:
            Layout(data=2, gradient_bytes=bad)
        assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="overlap_gradients True or False"):
        Layout(data=2, overlap_gradients=0)


def test_megatrons_eager_softmax_runs_on_the_float16_scores_and_no_other_frameworks():
    # a0368ddf mpu/transformer.py line 126 and v1.0's line 189: torch.nn.Softmax on the float16 scores (v1.0's
    # --attention-softmax-in-fp32 and --apply-query-key-layer-scaling off); the zoo's dense attention converts
    # the scores to float32 first. Only the programs of those two frameworks change
    eager = {f.name for f in FRAMEWORKS if not f.softmax_float32}
    assert eager == {"megatron-2019", "megatron-v1.0"}
    assert "line 126, torch.nn.Softmax" in framework("megatron-2019").runtime
    for run in PUBLISHED_RUNS:
        if run.name not in CHOSEN:
            continue
        built = program(run)
        expected = run.framework in eager and built.family == "gpt" and not built.fused_attention
        assert built.config.get("softmax_float32", True) is not expected, run.name
        assert ("masked softmax in float16" in built.description) is expected, run.name


def test_megatrons_dropout_is_priced_where_its_layers_ran_eager():
    # a0368ddf arguments.py lines 33 and 46, v1.0 lines 140-143: --attention-dropout and --hidden-dropout 0.1,
    # torch.nn.Dropout on the attention's probabilities, its output, the MLP's output and the embeddings, each
    # an eager kernel; the fused frameworks' dropouts live in their fused kernels: none of their programs changes
    assert {f.name: f.dropout for f in FRAMEWORKS if f.dropout} == {"megatron-2019": 0.1, "megatron-v1.0": 0.1}
    for run in PUBLISHED_RUNS:
        if run.name not in CHOSEN:
            continue
        built = program(run)
        expected = framework(run.framework).dropout if built.family == "gpt" else 0.0
        assert built.config.get("dropout", 0.0) == expected, run.name
        assert ("dropout at 0.1" in built.description) is bool(expected), run.name
