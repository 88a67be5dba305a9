"""The depth rule (`xla_cost.study.depth`): an unrolled program of L identical blocks from its
compiles at 2 and 3 blocks, every figure f(3) + (L - 3) (f(3) - f(2)), against the whole program."""

from __future__ import annotations

import pytest

from xla_cost.errors import InputError
from xla_cost.study import depth
from xla_cost.study.cases import Setup
from xla_cost.study.validation import analyse_by_depth, extrapolated_depths

# The three GPU programs (2, 3 and 4 blocks) share their kernels: XLA's kernel cache on the run's shared caches
# assembles each once (19.5 s to 14.9 s for the module alone, 2026-11-30).
pytestmark = pytest.mark.usefixtures("module_caches")

D, T, V, B, HEADS, LAYERS, TENSOR = 32, 16, 64, 2, 2, 4, 2
CONFIG = {"n_layer": LAYERS, "d_model": D, "n_head": HEADS, "vocab_size": V, "seq_len": T, "scan_layers": False}


def _jaxpr(blocks: int):
    from xla_cost.runs.configs import RunConfig

    return RunConfig("gpt2-small", batch_size=B, config={**CONFIG, "n_layer": blocks}, optimizer="adam",
                     dtype="bfloat16", counter="jaxpr").canonical().run(cache=False)


def test_the_extension_of_the_jaxpr_counts_is_the_whole_model():
    # three counts without a compile (about 0.5 s each): a stack of identical blocks is linear in its blocks, so
    # f(3) + (L - 3)(f(3) - f(2)) is every figure of the whole model, exactly
    from xla_cost.analysis.report import ADDITIVE

    layers = 6
    extended = depth.extend_depth(_jaxpr(2), _jaxpr(3), layers, "h")
    whole = _jaxpr(layers)
    # GPT-2's parameters: per block 12 d^2 + 13 d (attention 4 d^2 + 4 d, MLP 8 d^2 + 5 d, two norms 4 d),
    # embeddings (V + T) d, the final norm 2 d
    assert extended.parameters == whole.parameters == layers * (12 * D * D + 13 * D) + (V + T) * D + 2 * D
    assert extended.config["n_layer"] == layers
    for phase in ("forward", "backward", "grad", "update", "train_step"):
        for figure in ADDITIVE:
            assert getattr(extended.phases[phase], figure) == getattr(whole.phases[phase], figure), (phase, figure)


@pytest.fixture(scope="module")
def programs():
    """A tiny unrolled GPT on 2 H100s (tensor-parallel, deviceless): extended from 2 and 3 blocks, and whole."""
    from xla_cost.runs.configs import RunConfig

    setup = Setup(label="tiny", model="gpt2-small", batch_size=B, config=CONFIG, dtype="bfloat16", optimizer="sgd",
                  mesh={"model": TENSOR}, hardware={"device": "h100"})
    whole = RunConfig("gpt2-small", batch_size=B, config=CONFIG, optimizer="sgd", dtype="bfloat16",
                      mesh={"model": TENSOR}, target="h100").canonical().run(cache=False)
    return analyse_by_depth(setup, store=False), whole


@pytest.mark.slow  # three analyses of a tiny GPT compiled for 2 H100s (`programs`): 10-20 s on 2 busy cores
def test_the_extension_is_the_whole_program(programs):
    from xla_cost.timemodel.calibration import constants
    from xla_cost.timemodel.kernel_time import price_kernels

    extended, whole = programs
    assert extrapolated_depths(extended) == depth.DEPTHS and extrapolated_depths(whole) is None
    assert extended.config["n_layer"] == LAYERS and any(n.startswith(depth.NOTE) for n in extended.notes)
    assert extended.parameters == whole.parameters == LAYERS * (12 * D * D + 13 * D) + (V + T) * D + 2 * D
    for phase in ("forward", "grad", "update"):
        a, b = extended.phases[phase], whole.phases[phase]
        # the jaxpr counts every block alike: the extension is exact
        assert a.jaxpr_flops == b.jaxpr_flops and a.matmul_flops == b.matmul_flops
        assert a.arguments == b.arguments
        # the tensor-parallel all-reduces, block by block: the same rows (kind, bytes, layer, runs)
        assert sorted(c.key() + (c.executions,) for c in a.communication) == \
            sorted(c.key() + (c.executions,) for c in b.communication)
        # the compiler fuses a few small kernels otherwise at 2 blocks than at 3 (the extension's signed runs):
        # the priced kernels within 1% of the whole program's
        seconds = [price_kernels(p.kernel_list, "h100", constants()).seconds for p in (a, b)]
        assert seconds[0] == pytest.approx(seconds[1], rel=0.01)
    # each block's two all-reduces in the forward pass (attention's and the MLP's output projections), of its
    # activations B T d in bfloat16
    forward = [c for c in extended.phases["forward"].communication if c.layer.startswith("h_")]
    assert sorted(c.layer for c in forward) == sorted(f"h_{i}/{m}/c_proj" for i in range(LAYERS) for m in ("attn", "mlp"))
    assert {c.bytes for c in forward} == {B * T * D * 2}


def test_the_formula_number_by_number():
    # f(3) + (L - 3)(f(3) - f(2)): 13 + 4 * 3 at L = 7; unknown stays unknown; strings are the 3-block program's
    assert depth.extend_figures({"a": 10, "b": None, "c": "x"}, {"a": 13, "b": 4, "c": "y"}, 7) == \
        {"a": 25, "b": None, "c": "y"}
    assert depth.extend_figures([1.0, 2.0], [1.5, 2.0], 5) == [2.5, 2.0]
    with pytest.raises(InputError, match="other keys"):
        depth.extend_figures({"a": 1}, {"b": 1}, 5)


def test_collectives_block_by_block():
    # a forward pass runs the blocks in order (h_0, h_1, ...), a backward pass in reverse: the middle block's rows
    # (block 1 of the 3-block program) repeated for blocks 1 .. L-2 in that order, the last block's renamed L-1; a row
    # outside the blocks run once per block beyond the first (the formula: 2 + 2 (2 - 1) = 4 at L = 5)
    def row(layer: str, runs: int = 1) -> dict:
        return {"kind": "all-reduce", "axes": ["model"], "group_size": 2, "bytes": 64, "layer": layer,
                "executions": runs}

    forward = depth.extend_collectives([row("h_0"), row("h_1"), row("", 1)],
                                       [row("h_0"), row("h_1"), row("h_2"), row("", 2)], 5, "h")
    assert [(r["layer"], r["executions"]) for r in forward] == [("h_0", 1), ("h_1", 1), ("h_2", 1), ("h_3", 1),
                                                                ("h_4", 1), ("", 4)]
    backward = depth.extend_collectives([row("h_1"), row("h_0")], [row("h_2"), row("h_1"), row("h_0")], 5, "h")
    assert [r["layer"] for r in backward] == ["h_4", "h_3", "h_2", "h_1", "h_0"]


def test_signed_kernel_runs_keep_every_sum_linear():
    # a kernel the 2-block program has 2 of and the 3-block one 1 (fused otherwise) is taken away L - 3 times; a
    # new one appears (L - 2) times: runs 1 + 4 (1 - 2) = -3 and 1 + 4 (1 - 0) = 5 at L = 7
    def kernel(name: str, bytes_: int, runs: int) -> dict:
        return {"name": name, "category": "fusion", "kind": "kLoop", "bytes": bytes_, "executions": runs}

    out = depth.extend_kernels([kernel("a", 8, 2)], [kernel("b", 8, 1), kernel("c", 16, 1)], 7)
    assert {(k["bytes"], k["executions"]) for k in out} == {(8, -3), (16, 5)}
    # the bytes the pricing sums: f(3) + 4 (f(3) - f(2)) = 24 + 4 (24 - 16)
    assert sum(k["bytes"] * k["executions"] for k in out) == 24 + 4 * (24 - 16)


@pytest.mark.parametrize("modules, layers, why", [
    # DeepSeek-style: n_layer 4 counts a dense first layer named apart from the 3 MoE blocks
    ({"embed": 5, "dense_layers_0/mlp": 9, "layers_0/moe": 20, "layers_1/moe": 20, "layers_2/moe": 20}, 4,
     "no one stack"),
    # MoE every other layer: block 1 unlike block 0
    ({"embed": 5, "layers_0/mlp": 9, "layers_1/moe": 20, "layers_2/mlp": 9, "layers_3/moe": 20}, 4,
     "other parameters"),
])
def test_unlike_blocks_are_refused(modules, layers, why):
    with pytest.raises(InputError, match=why):
        depth.block_structure(modules, layers)


def test_identical_blocks_name_their_prefix():
    modules = {"wte": 10, **{f"h_{i}/{m}": 7 for i in range(4) for m in ("attn", "mlp")}, "ln_f": 2}
    assert depth.block_structure(modules, 4) == "h"


def test_the_rule_applies_to_unrolled_programs_past_three_blocks():
    assert depth.applies({"n_layer": 4, "scan_layers": False})
    assert not depth.applies({"n_layer": 3, "scan_layers": False})
    assert not depth.applies({"n_layer": 40, "scan_layers": True}) and not depth.applies({"n_layer": 40})
