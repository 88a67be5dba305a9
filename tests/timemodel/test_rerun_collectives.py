"""Collectives of recomputed layers as a framework that reruns their forward runs them (issue 51).

Megatron-LM of 2019 (github.com/NVIDIA/Megatron-LM at a0368ddf) checkpoints every transformer
layer (mpu/transformer.py lines 390-397); its CheckpointFunction's backward reruns the layer's
whole forward and backpropagates its outputs (mpu/random.py lines 190-218). A layer's forward
all-reduces its two row-parallel outputs (attention and MLP, mpu/layers.py line 321), its
backward the two column-parallel inputs' gradients (mpu/mappings.py lines 87-88): 2 + 2 + 2 = 6
all-reduces of the (B, s, h) float16 activations a layer, B s h 2 bytes each. XLA's grad program
recomputes only the attention's (its output feeds the MLP's backward): 5 a layer. The rows below
are the compiled program's (its collectives by layer scope), built by hand; nothing is compiled.
"""

from __future__ import annotations

import pytest

from xla_cost.analysis.report import Collective
from xla_cost.errors import InputError
from xla_cost.study.published_record import framework
from xla_cost.study.published_runs import PUBLISHED_RUNS
from xla_cost.study.run_cases import CHOSEN, run_setup
from xla_cost.timemodel.schedule import Layout, rerun_collectives

L, B, S, H, T = 3, 8, 1024, 1536, 8  # layers, micro-batch, sequence, hidden, tensor-parallel GPUs
ACT = B * S * H * 2  # one (B, s, h) float16 activation, bytes


class Phase:
    def __init__(self, rows: list[Collective]) -> None:
        self.communication = tuple(rows)


def _row(layer: str, executions: int = 1, nbytes: int = ACT) -> Collective:
    return Collective("all-reduce", ("model",), T, nbytes, executions, layer)


def _program() -> tuple[Phase, Phase]:
    """The forward and grad programs' tensor-parallel all-reduces as XLA compiles a tied-embedding GPT."""
    forward = [_row("wte")]  # the vocabulary-parallel embedding's output
    grad = [_row("wte", 2)]  # that, and the tied LM head's input gradient (its copy_to region's backward)
    for i in range(L):
        forward += [_row(f"h_{i}/attn/c_proj"), _row(f"h_{i}/mlp/c_proj")]
        grad += [_row(f"h_{i}/attn/c_proj", 2), _row(f"h_{i}/mlp/c_proj"),  # forward; the recompute keeps one
                 _row(f"h_{i}/attn/c_attn"), _row(f"h_{i}/mlp/c_fc")]  # the column-parallel inputs' gradients
    loss = Collective("all-reduce", ("model",), T, B * S * 4, 1, "")  # float32 per-position figures: no scope
    return Phase(forward + [loss]), Phase(grad + [loss])


def _runs(rows: tuple[Collective, ...], nbytes: int = ACT) -> int:
    return sum(c.executions for c in rows if c.bytes == nbytes)


def test_a_rerun_recomputation_all_reduces_six_activations_a_layer():
    forward, grad = _program()
    assert _runs(grad.communication) == 5 * L + 2  # what XLA's program runs
    rows, notes = rerun_collectives(forward, grad, Layout(rerun_collectives=True))
    # 6 a layer (forward 2, recomputed forward 2, backward 2) and the embedding's 2 (forward, tied head's backward)
    assert _runs(rows) == 6 * L + 2
    assert {c.layer: c.executions for c in rows if c.layer.endswith("mlp/c_proj")} == {
        f"h_{i}/mlp/c_proj": 2 for i in range(L)}
    assert dict((c.layer, c.executions) for c in rows)["wte"] == 2  # run twice already: nothing added
    assert _runs(rows, B * S * 4) == 1  # a collective of no scope is left as the program has it
    assert len(notes) == 1 and f"{L} collective(s)" in notes[0]
    # the same grad program beside a forward of the embedding alone (its all-reduce once, twice in grad: run
    # twice already): nothing recomputed to add, an answer of its own (the rerun is kept per value, not per grad)
    assert rerun_collectives(Phase(list(forward.communication[:1])), grad, Layout(rerun_collectives=True)) == (
        grad.communication, ())


def test_without_the_fact_or_a_forward_program_the_programs_count_stands():
    forward, grad = _program()
    for layout, fwd in ((Layout(), forward), (Layout(rerun_collectives=True), None)):
        rows, notes = rerun_collectives(fwd, grad, layout)
        assert rows == grad.communication and notes == ()
    unknown = Phase([_row("h_0/mlp/c_proj", None)])  # executions unknown: not doubled, not zero
    assert rerun_collectives(forward, unknown, Layout(rerun_collectives=True))[0] == unknown.communication
    with pytest.raises(InputError, match="rerun_collectives True or False"):
        Layout(rerun_collectives=1)


def test_the_2019_framework_reruns_and_its_tensor_parallel_runs_say_so():
    assert framework("megatron-2019").reruns_recomputed_collectives
    assert "mpu/random.py" in framework("megatron-2019").runtime
    for run in PUBLISHED_RUNS:
        if run.name not in CHOSEN:
            continue
        wanted = framework(run.framework).reruns_recomputed_collectives and run.recompute == "full" and run.tensor > 1
        assert run_setup(run).layout.get("rerun_collectives", False) == wanted, run.name
    assert run_setup(next(r for r in PUBLISHED_RUNS if r.name == "megatron2019-8.3b-8")).layout["rerun_collectives"]
