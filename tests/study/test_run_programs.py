"""The program each published run is priced as (`xla_cost.study.run_cases.program`): the zoo family that
is what the run ran, scanned or unrolled as its framework runs it, attention fused where the run's was.

Every expected figure is derived from the run's published shape by the formula beside it.
"""

from __future__ import annotations

import math

import pytest

from xla_cost.study import run_cases
from xla_cost.study.published_runs import PUBLISHED_RUNS, framework

RUNS = {r.name: r for r in PUBLISHED_RUNS}


@pytest.mark.parametrize("run", PUBLISHED_RUNS, ids=[r.name for r in PUBLISHED_RUNS])
def test_every_run_is_the_program_its_framework_runs(run):
    built = run_cases.program(run)
    config = built.config
    # the family: experts are the zoo's Mixtral, a gated feed-forward or grouped-query attention its Llama (its MLP
    # gated as the run's), the rest its GPT
    assert built.family == ("mixtral" if run.experts else "llama" if run.gated or run.kv_heads else "gpt")
    assert built.model == run_cases.FAMILY_MODELS[built.family]
    # the run's own shape, no stand-in: every head (not one), the run's feed-forward width (not a FLOP-matched one)
    assert (config["n_head"], config["d_ff"], config["d_model"]) == (run.heads, run.ffn, run.hidden)
    assert config.get("head_dim", 0) == (run.head_dim or 0)
    if built.family != "gpt":
        assert config["n_kv_head"] == (run.kv_heads or run.heads)
    if built.family == "llama":
        assert config["gated_mlp"] == run.gated
    if built.family == "mixtral":
        assert (config["n_experts"], config["top_k"]) == (run.experts, run.experts_per_token)
        # no capacity factor published: no token dropped, each expert's slots every token's (E / k)
        assert config["capacity_factor"] == (run.capacity_factor or run.experts / run.experts_per_token)
    # the slowest stage's layers; scanned exactly where the run's framework scans (unknown: unrolled)
    assert config["n_layer"] == math.ceil(run.layers / run.pipeline)
    assert config["scan_layers"] is (framework(run.framework).scans is True)
    # fused attention where the run's was, in every family (the GPT's too), of heads its GPU kernel takes
    # (cuDNN through jax: at most 256 on a Hopper or later GPU, H100, H200, B200, 128 before, a multiple of 8:
    # Nemotron-4 340B's 192 on H100s are; a TPU's splash kernel takes any); a GPT of dense attention keeps its
    # default (no attention field: its key as before)
    head = run.head_dim or run.hidden // run.heads
    limit = 256 if run.device in ("h100", "h200", "b200") else 128
    takes = run.device.startswith("tpu") or (head <= limit and head % 8 == 0)
    assert (config.get("attention") == "fused") == (run.paper in run_cases.FUSED_ATTENTION and takes)
    assert built.family != "gpt" or config.get("attention") in (None, "fused")
    # the page says which program was priced
    words = built.description
    assert ("scanned" in words) == config["scan_layers"] and ("unrolled" in words) != config["scan_layers"]
    assert ("not published" in words) == (framework(run.framework).scans is None)
    assert ("attention in the zoo's fused attention" in words) == (config.get("attention") == "fused")
    if run.name in run_cases.CHOSEN:
        assert any(words in said for said in run_cases.run_cases([run.name])[0].assumptions)


def test_every_paper_said_to_fuse_attention_is_one_of_the_record():
    # a key naming no paper of the record fuses nothing, silently (torchtitan's H200 runs are paper
    # 'torchtitan2025-h200', its A100 runs 'torchtitan2024'); NeMo's and Megatron Bridge's FP8 runs and
    # torchtitan's H200 benchmark ran fused attention (Transformer Engine's, PyTorch's SDPA), and LLM Foundry's
    # MPT benchmarks FlashAttention's or its Triton kernel (sweep.py's --attn_impl flash / triton)
    assert set(run_cases.FUSED_ATTENTION) <= {r.paper for r in PUBLISHED_RUNS}
    assert {"nemo2024", "megatron-bridge2026", "torchtitan2025-h200", "llm-foundry2024"} <= set(
        run_cases.FUSED_ATTENTION)


def _gpt_block(d: int, f: int, a: int) -> int:
    # c_attn d x 3a + 3a, c_proj a x d + d, c_fc d x f + f, c_proj f x d + d, two LayerNorms 2d each
    return 4 * d * a + 3 * a + 2 * d * f + f + 6 * d


def _llama_block(d: int, n: int, k: int, h: int, f: int, gated: bool) -> int:
    # q and o d x N H each, k and v d x K H each, gate (if gated), up and down d x f each, two RMSNorms d each
    return 2 * d * n * h + 2 * d * k * h + (3 if gated else 2) * d * f + 2 * d


@pytest.mark.parametrize("name", ["maxtext-16b-v5e-256", "nemo2024-nemotron-340b-128", "maxtext-mixtral-8x7b-v6e-256"])
def test_the_program_has_the_runs_parameters(name):
    from xla_cost.zoo import count_parameters

    run = RUNS[name]
    built = run_cases.program(run)
    d, v, layers, heads = run.hidden, run.vocabulary, built.config["n_layer"], run.heads
    head = run.head_dim or d // heads
    if built.family == "mixtral":  # the zoo's Mixtral: a router d x E and E experts of 3 d f where Llama's MLP is
        block = _llama_block(d, heads, run.kv_heads or heads, head, run.ffn, True) + d * run.experts
        expected = layers * (block + 3 * d * run.ffn * (run.experts - 1)) + 2 * v * d + d
    elif built.family == "llama":  # the zoo's Llama: untied embedding and head (V d each), a final RMSNorm (d)
        expected = layers * _llama_block(d, heads, run.kv_heads or heads, head, run.ffn, run.gated) + 2 * v * d + d
    else:  # the zoo's GPT: a tied embedding (V d), learned positions (s d), a final LayerNorm (2d)
        expected = layers * _gpt_block(d, run.ffn, heads * head) + v * d + run.sequence * d + 2 * d
    # counted abstractly (jax.eval_shape); a scanned stack has the unrolled one's parameters and traces one block
    assert count_parameters(built.model, **{**built.config, "scan_layers": True}) == expected


def test_a_pipeline_stage_sends_its_devices_positions():
    """Megatron-Core's send/recv shape (schedules.py get_tensor_shapes): the sequence over the context-parallel
    size, and over the tensor-parallel size with sequence parallelism; bfloat16, 2 bytes a value."""
    runs = {run.name: run for run in PUBLISHED_RUNS}
    layout = lambda name: run_cases.run_setup(runs[name]).layout  # noqa: E731
    # NeMo's Llama 2 70B: sequence parallel over TP 4, micro-batch 1 of 4,096 positions, hidden 8,192
    assert layout("nemo2024-llama2-70b-64")["stage_bytes"] == 1 * (4096 // 4) * 8192 * 2
    # Nemotron-4 340B, no sequence parallelism recorded: the whole sequence, hidden 18,432
    assert layout("nemo2024-nemotron-340b-128")["stage_bytes"] == 1 * 4096 * 18432 * 2
