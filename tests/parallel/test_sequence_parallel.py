"""Megatron-LM's sequence parallelism and selective recomputation in the zoo GPT (its
``sequence_parallel``: `xla_cost.parallel.residual.constrain_sequence`, ``gather_sequence``,
``split_features``; its ``core_attention`` remat: `xla_cost.zoo.gpt.CORE_ATTENTION`), and which
published runs' programs take them (`xla_cost.study.run_cases.SEQUENCE_PARALLEL_FAMILIES`,
``CORE_ATTENTION_SELECTIVE``). What the policy keeps is read from the gradient's saved residuals
(``jax.ad_checkpoint.print_saved_residuals``: nothing compiled).

A two-block GPT, scanned and fully recomputed (the blocks' inputs are all its backward pass keeps),
its gradient compiled for two simulated CPU devices on a ``model`` axis with the option (one compile:
without it, the same program keeps the whole stream, ``L B T d`` floats, on each device, as
tests/parallel/test_residual_sharding.py finds). On a GPU target the partitioner's all-reduce and
slice of each row-parallel output is a reduce-scatter (XLA's reduce-scatter creator, a GPU and TPU
pass: the priced programs have them).
"""

from __future__ import annotations

import contextlib
import functools
import io
import re

import jax
import pytest

from xla_cost.analysis.programs import jit_phase
from xla_cost.compiled import kernels, liveness, xla
from xla_cost.parallel import sharding
from xla_cost.step import phases
from xla_cost.step.workload import build_workload
from xla_cost.study import run_cases
from xla_cost.study.published_runs import PUBLISHED_RUNS
from xla_cost.zoo import build_model, example_inputs
from xla_cost.zoo.gpt import CORE_ATTENTION, CORE_ATTENTION_KEEPS

pytestmark = pytest.mark.skipif(jax.device_count() < 2, reason="needs 2 (simulated) devices: tests/conftest.py sets them")

B, T, D, L, V, HEADS = 4, 32, 64, 2, 256, 4
MODEL = 2  # the tensor-parallel devices
F32 = 4


@functools.lru_cache(maxsize=None)
def grad_program() -> str:
    """The compiled gradient's HLO text, one device's program of the ``model=2`` mesh, the option on."""
    config = dict(n_layer=L, seq_len=T, d_model=D, n_head=HEADS, vocab_size=V, scan_layers=True, remat="full",
                  sequence_parallel=True)
    model = build_model("gpt2-small", **config)
    workload, _ = build_workload(model, example_inputs("gpt2-small", B, **config), optimizer="sgd")
    plan = sharding.plan_sharding(workload, {"model": MODEL}, model_rules=sharding.model_rules(model))
    with workload.tracing(), plan.constraints(B):
        lowered = jit_phase(workload, phases.phase("grad"), plan).lower(*workload.phase_args("grad"))
    return lowered.compile(dict(xla.COMPILER_OPTIONS)).as_text()


def saved_block_inputs(text: str, positions: int) -> int:
    """Bytes of the forward pass's buffers live at the gradient's peak that stack one ``(B, positions, width)``
    array per block: the scan's saved block inputs."""
    total = 0
    for buffer in liveness.simulate(text).at_peak:
        dims = [int(d) for d in re.findall(r"\d+", buffer.shape.split("[", 1)[1])]
        if "transpose(" not in buffer.op_name and dims[:3] == [L, B, positions]:
            total += buffer.nbytes
    return total


def test_the_saved_block_inputs_are_split_by_positions():
    whole = L * B * T * D * F32  # each block's input (B, T, d) in float32: each device's without the option
    # T / model positions of each on each device, as Megatron's sequence parallelism keeps them; none whole
    assert saved_block_inputs(grad_program(), T // MODEL) == whole // MODEL
    assert saved_block_inputs(grad_program(), T) == 0


def test_the_products_are_megatrons():
    # Per device, as without the option, every product split over model=2 (Megatron's columns and rows, the head
    # by vocabulary rows): a block's forward 2BT(3d² + d² + 4d² + 4d²) + 2 * 2BT²d (the dense attention's two
    # products); the full recomputation all of it but the MLP's c_proj (its output is not read by the backward:
    # XLA drops it); the backward twice the forward; the tied head 2BTdV forward and twice in the backward.
    forward = 2 * B * T * 12 * D * D + 2 * 2 * B * T * T * D
    recompute = forward - 2 * B * T * 4 * D * D
    head = 2 * B * T * D * V
    expected = (L * (forward + recompute + 2 * forward) + 3 * head) // MODEL
    products = sum(k.product.flops * k.executions for k in kernels.kernel_list(grad_program()) if k.product is not None)
    assert products == expected  # the split moves no product


def test_core_attention_keeps_what_megatron_keeps():
    config = dict(n_layer=L, seq_len=T, d_model=D, n_head=HEADS, vocab_size=V, scan_layers=False, remat=CORE_ATTENTION)
    model = build_model("gpt2-small", **config)
    tokens = example_inputs("gpt2-small", B, **config)
    shapes = jax.eval_shape(model.init, jax.random.key(0), tokens)
    params = jax.tree.map(lambda a: jax.numpy.zeros(a.shape, a.dtype), shapes)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        jax.ad_checkpoint.print_saved_residuals(lambda p: model.apply(p, tokens).astype("float32").mean(), params)
    named = re.findall(r"^f32\[([\d,]+)\] named '(\w+)'", printed.getvalue(), re.M)
    # each block keeps the six (B, T, width) activations Megatron's layer keeps, by name: the layer norms' outputs
    # and the residual after the attention d wide, c_attn's output 3d, c_fc's and the GeLU's 4d; the attention's
    # scores (B, heads, T, T) are not kept: recomputed, as checkpoint_core_attention recomputes them
    width = {"ln_1": D, "qkv": 3 * D, "attn_residual": D, "ln_2": D, "mlp_fc": 4 * D, "mlp_gelu": 4 * D}
    assert set(width) == set(CORE_ATTENTION_KEEPS)
    assert sorted(named) == sorted((f"{B},{T},{w}", n) for n, w in width.items() for _ in range(L))
    assert f"[{B},{HEADS},{T},{T}]" not in printed.getvalue()


@pytest.mark.parametrize("run", PUBLISHED_RUNS, ids=[r.name for r in PUBLISHED_RUNS])
def test_the_runs_take_megatrons_sequence_parallelism_and_selective_recomputation(run):
    built = run_cases.program(run)
    # a run recorded with it, on a tensor axis, of a family that has it; elsewhere the option is absent from the
    # config: the program and its key as without it
    split = run.sequence_parallel and run.tensor > 1 and built.family in run_cases.SEQUENCE_PARALLEL_FAMILIES
    assert built.config.get("sequence_parallel") is (True if split else None)
    assert ("sequence parallelism as the run's" in built.description) == split
    # Megatron's selective recomputation (checkpoint_core_attention) on a GPT: the zoo GPT's core_attention
    core = (run.recompute == "selective" and run.framework in run_cases.CORE_ATTENTION_SELECTIVE
            and built.family == "gpt")
    assert (built.config["remat"] == CORE_ATTENTION) == core
    if run.paper == "korthikanti2022":  # Table 5's 'Present Work' rows with both, 'Full Recompute' with neither (§6.3)
        assert split == core == (run.recompute == "selective")
