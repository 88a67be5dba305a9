"""The published runs as cases (`xla_cost.study.run_cases`): each laid out as its paper ran it.

Every expected figure is derived from the run's published shape beside it.
"""

from __future__ import annotations

import math

import pytest

from xla_cost.study import run_cases
from xla_cost.study.published_runs import PUBLISHED_RUNS
from xla_cost.timemodel.schedule import bubble_fraction

RUNS = {r.name: r for r in PUBLISHED_RUNS}


@pytest.mark.parametrize("run", [RUNS[n] for n in run_cases.CHOSEN], ids=list(run_cases.CHOSEN))
def test_every_chosen_run_is_laid_out_over_its_devices(run):
    setup = run_cases.run_setup(run)
    tensor, fsdp, context = setup.mesh.get("model", 1), setup.mesh.get("fsdp", 1), setup.mesh.get("context", 1)
    assert tensor == run.tensor and context == run.context
    # the program's devices (a context-parallel group in it: its mesh's context axis), times its stages and
    # replicas, are the run's
    assert tensor * fsdp * context * setup.layout["pipeline"] * setup.layout["data"] == run.devices
    # every sequence of the global batch is in some program: per program x micro-batches x replicas
    sequences = setup.batch_size // fsdp * fsdp * setup.layout["micro_batches"] * setup.layout["data"]
    assert sequences == run.global_batch or run.micro_batch is None
    assert setup.config["n_layer"] == math.ceil(run.layers / run.pipeline)


def test_korthikanti_flop_formula():
    # Korthikanti et al. 2022, eq. 7 (model FLOP): 72 B L s h^2 (1 + s / 6h + V / 12 h L); the Megatron count
    # used here (Narayanan et al.'s, 96 B L s h^2 (1 + s / 6h + V / 16 L h)) is eq. 7 with the recomputed
    # forward pass: 96 / 72 = 4 / 3 on the layers, the output layer counted 3 times either way
    run = RUNS["korthikanti2022-175b-full"]
    b, l, s, h, v = run.global_batch, run.layers, run.sequence, run.hidden, run.vocabulary
    assert run_cases.flops_per_step(run) == pytest.approx(
        96 * b * l * s * h * h * (1 + s / (6 * h)) + 72 * b * l * s * h * h * v / (12 * h * l), rel=1e-12)


def test_left_out_runs_are_published_runs_with_a_reason():
    assert set(run_cases.LEFT_OUT) <= set(RUNS)
    assert not set(run_cases.LEFT_OUT) & set(run_cases.CHOSEN)
    assert all(len(reason) > 10 for reason in run_cases.LEFT_OUT.values())


def test_overlaps_the_runs_record_reach_their_layouts():
    # NeMo's llama2_70b.yaml (ub_tp_comm_overlap, overlap_p2p_comm) and llama2_13b.yaml (overlap_p2p_comm),
    # Megatron Bridge's H100 Llama 3 70B FP8 recipe, Llama 3's asynchronous point-to-point (Dubey et al. 2024,
    # §3.3.2); Transformer Engine's overlap needs sequence parallelism (NeMo turns it off without)
    for name in run_cases.CHOSEN:
        run, layout = RUNS[name], run_cases.run_setup(RUNS[name]).layout
        assert layout.get("overlap_tensor", False) == (run.overlap_tensor and run.tensor > 1)
        assert layout.get("overlap_transfers", False) == (run.overlap_p2p and run.pipeline > 1)
        assert layout.get("overlap_context", False) == (run.overlap_context and run.context > 1)
        assert run.sequence_parallel or not run.overlap_tensor or run.framework == "maxtext"  # XLA's own overlap
    # MaxText's v5p scripts: XLA's continuation fusion of collectives with compute (LIBTPU_INIT_ARGS, line 30)
    v5p = {f"maxtext-{size}b-v5p-{cores}" for size, cores in (
        (32, 128), (64, 128), (128, 256), (128, 512), (256, 1024), (512, 1024), (1024, 2048), (1024, 4096))}
    assert {n for n in run_cases.CHOSEN if RUNS[n].overlap_tensor} == {
        "nemo2024-llama2-70b-64", "megatron-bridge2026-llama3-70b-64", "nemo2024-gpt3-20b-64",
        "nemo2024-nemotron-8b-64", "nemo2024-nemotron-22b-64", "nemo2024-llama3-70b-64"} | v5p
    # Transformer Engine's ring overlaps the context-parallel exchange (NeMo's runs); Llama 3's all-gather does not
    # (Dubey et al. 2024, §3.3.2)
    assert {n for n in run_cases.CHOSEN if RUNS[n].context > 1} == {
        "llama3-405b-16384-128k", "nemo2024-llama3-8b-8", "nemo2024-llama3-70b-64"}
    assert {n for n in run_cases.CHOSEN if RUNS[n].overlap_context} == {
        "nemo2024-llama3-8b-8", "nemo2024-llama3-70b-64"}


@pytest.mark.parametrize("name", ["llama3-405b-8192", "llama3-405b-16384"])
def test_llama3_interleaves_chunks_of_one_layer(name):
    # Dubey et al. 2024, §3.3.2: one layer fewer on the first and the last stage, whose first and last chunks
    # hold only the embedding and only the output: a chunk is one layer's place, 126 + 2 = 16 stages x V
    run = RUNS[name]
    layout = run_cases.run_setup(run).layout
    assert layout["chunks"] == (run.layers + 2) // run.pipeline == 8
    # the bubble (PP - 1) / (V M), M the batch size per DP group of Table 4 (32 at 8K GPUs, 16 at 16K)
    per_group = {"llama3-405b-8192": 32, "llama3-405b-16384": 16}[name]
    assert bubble_fraction(layout["pipeline"], layout["micro_batches"], layout["chunks"]) == pytest.approx(
        (16 - 1) / (8 * per_group))
