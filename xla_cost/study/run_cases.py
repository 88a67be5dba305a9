"""The published runs of `xla_cost.study.published_runs` as validation cases.

Each `PublishedRun` becomes a `xla_cost.study.cases.Case`: the zoo's GPT
(`xla_cost.zoo`, scanned blocks) configured as the run's model, one
micro-batch on one pipeline stage (its share of the layers) sharded over
its tensor-parallel devices, compiled for the run's device, and laid out
as the run was (stages, interleaved chunks, micro-batches, data-parallel
replicas, its node). What the zoo's GPT cannot be is matched in FLOP:

* a gated feed-forward (SwiGLU: three matrices of ``h x ffn``) as GPT's two
  of ``h x 1.5 ffn``;
* grouped-query attention (``kv_heads`` key/value heads) and heads wider
  than ``h / heads`` (``head_dim``) by moving the projections' FLOP the zoo's
  ``4 h^2`` misses or adds onto the feed-forward width;
* FSDP without a pipeline (torchtitan, MaxText) compiled in the program:
  its mesh has the ``fsdp`` axis, its batch the run's sequences per device
  on every shard, and the layout's replicas are the sharded groups;
* fused attention (`FUSED_ATTENTION`) as one head of the zoo's dense
  attention: the same FLOP, the fewest score bytes; with a pipeline, the replicas
  reduce their gradients as data-parallel ones (the runs' ZeRO stages 1
  and 2 move the same bytes);
* selective recomputation (Korthikanti et al.) as the remat policy that
  saves the weight products and recomputes the rest
  (``dots_with_no_batch_dims_saveable``).

The figure of each run is computed from the predicted step as the paper
computes its own: seconds per step, days of its steps, tokens per second,
TFLOP/s per device from the paper's FLOP count (`flops_per_step`), a
speed-up or a weak-scaling efficiency against the run it names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from xla_cost.study.cases import Case, Setup, megatron_flops
from xla_cost.study.published_runs import PUBLISHED_RUNS, PublishedRun

__all__ = ["CHOSEN", "LEFT_OUT", "NODES", "FUSED_ATTENTION", "run_cases", "run_setup", "flops_per_step"]

CHOSEN: tuple[str, ...] = (
    # V100 (Shoeybi et al. 2019, DGX-2H)
    "megatron2019v1-1.2b-1", "megatron2019-2.5b-2", "megatron2019-4.2b-4", "megatron2019-8.3b-8",
    "megatron2019-1.2b-64", "megatron2019-8.3b-512", "megatron2019-1.2b-8-strong",
    # A100
    "korthikanti2022-22b-selective", "korthikanti2022-22b-full", "korthikanti2022-175b-selective",
    "korthikanti2022-175b-full", "korthikanti2022-530b-selective", "korthikanti2022-1t-selective",
    "mtnlg2022-530b-2240", "mtnlg2022-530b-3360", "bloom2022-176b-384",
    "megascale2024-megatron-175b-256", "megascale2024-megatron-175b-1024", "megascale2024-megatron-175b-12288",
    "torchtitan2024-llama3-8b-64",
    # TPU v5e, v5p (MaxText)
    "maxtext-16b-v5e-256", "maxtext-32b-v5e-256",
)
"""The published runs validated: every paper of `PUBLISHED_RUNS` whose
layout this model can lay out, at most a few runs of each (each distinct
program is compiled for its device: the analyses are the slow part)."""

LEFT_OUT: dict[str, str] = {
    "llama3-405b-8192": "the run's attention is flash attention and its pipeline interleaved to a depth Table 4 "
                        "does not give; the zoo's GPT materialises the 8,192 x 8,192 scores (on the H100 their "
                        "bytes outweigh the products) and the schedule's bubble is then 15/32 of the step",
    "llama3-405b-16384": "as llama3-405b-8192",
    "llama3-405b-16384-128k": "as llama3-405b-8192, and context parallelism, which the layouts do not price",
    "palm2022-540b-6144": "the TPU v4 compiler refuses the program deviceless (34.3 GB of temporaries against the "
                          "chip's 30.75 GB: the zoo's GPT keeps float32 parameters and dense attention)",
    "palm2022-540b-two-pods": "as palm2022-540b-6144",
    "maxtext-32b-v5p-128": "the TPU v5p compile stops on an XLA check (an async-update of 3 operands) with "
                           "libtpu 0.0.52",
    "maxtext-64b-v5p-128": "as maxtext-32b-v5p-128",
    "opt2022-175b-992": "an upper figure (\"up to 147 TFLOP/s\"), not a run's",
}
"""Published runs not validated, and why (the page lists them); every other
run of `PUBLISHED_RUNS` outside `CHOSEN` is another run of a paper and
program already validated."""

NODES: dict[str, tuple[str, dict[str, Any]]] = {
    "shoeybi2019": ("dgx-2", {}),
    "nvadlr2019": ("dgx-2", {}),
    "korthikanti2022": ("dgx-a100", {}),
    "smith2022": ("dgx-a100", {}),
    "bigscience2022": ("dgx-a100", {"nics": 4, "bandwidth": 100e9 / 8}),
    "jiang2024": ("dgx-a100", {}),
    "torchtitan2024": ("dgx-a100", {}),
    "dubey2024": ("dgx-h100", {}),
    "chowdhery2022": ("tpu-v4-pod", {}),
    "maxtext": ("tpu-v5e-pod", {}),
}
"""Each paper's node preset (`xla_cost.timemodel.devices.NODES`) and its
overrides, from the run's ``node_links`` (Jean Zay: 4 Omni-Path NICs of
100 Gb/s per node of 8)."""

FUSED_ATTENTION: dict[str, str] = {
    "torchtitan2024": "PyTorch's scaled_dot_product_attention, FlashAttention on an A100",
    "maxtext": "MaxText's flash (splash) attention kernel on a TPU",
}
"""Papers whose runs computed attention in a fused kernel that keeps the
scores out of memory. The zoo's GPT writes its scores to memory; for these
runs it is given one head (the same FLOP: the scores' products scale with
``heads * head_dim = h``), so that the scores it writes are the fewest it can."""

_REMAT = {"none": "none", "full": "full", "selective": "dots_with_no_batch_dims_saveable"}


def _d_ff(run: PublishedRun) -> int:
    """The GPT feed-forward width whose FLOP match the run's feed-forward and
    attention projections: GPT's block has ``4 h^2 + 2 h d_ff`` weights; the
    run's ``h hd (heads + 2 kv) + heads hd h`` in attention and ``3 h ffn``
    (gated) or ``2 h ffn`` in its feed-forward."""
    head = run.head_dim or run.hidden // run.heads
    kv = run.kv_heads or run.heads
    attention = run.hidden * head * (run.heads + 2 * kv) + run.heads * head * run.hidden
    feed = (3 if run.gated else 2) * run.hidden * run.ffn
    return (attention + feed - 4 * run.hidden * run.hidden) // (2 * run.hidden)


def run_setup(run: PublishedRun) -> Setup:
    """The run's step as a `Setup`: one micro-batch on its slowest stage."""
    micro = run.micro_batch or 1
    replicas = run.data * run.context
    micro_batches = max(1, run.global_batch // (replicas * micro))
    sharded = run.fsdp if run.fsdp > 1 and run.pipeline == 1 else 1  # FSDP in the program, its gathers compiled
    layers = math.ceil(run.layers / run.pipeline)
    node, extra = NODES.get(run.paper, (None, {}))
    if run.device == "tpu-v5p":
        node = "tpu-v5p-slice"
    hardware: dict[str, Any] = {"device": run.device, **({"node": node} if node else {}), **extra}
    layout: dict[str, int] = {"pipeline": run.pipeline, "micro_batches": micro_batches, "data": replicas // sharded,
                              "stage_bytes": micro * run.sequence * run.hidden * 2}
    if run.chunks and run.chunks > 1 and layers % run.chunks == 0:
        layout["chunks"] = run.chunks
    return Setup(
        label=run.name, model="gpt3-175b", batch_size=micro * sharded,
        config={"n_layer": layers, "d_model": run.hidden, "n_head": 1 if run.paper in FUSED_ATTENTION else run.heads,
                "d_ff": _d_ff(run),
                "vocab_size": run.vocabulary, "seq_len": run.sequence, "remat": _REMAT[run.recompute]},
        dtype=run.dtype, optimizer="adam",
        mesh={**({"model": run.tensor} if run.tensor > 1 else {}), **({"fsdp": sharded} if sharded > 1 else {})},
        hardware=hardware, layout=layout,
    )


def _parameters(run: PublishedRun) -> float:
    head = run.head_dim or run.hidden // run.heads
    kv = run.kv_heads or run.heads
    attention = run.hidden * head * (run.heads + 2 * kv) + run.heads * head * run.hidden
    feed = (3 if run.gated else 2) * run.hidden * run.ffn
    embeddings = run.vocabulary * run.hidden * (1 if run.tied else 2)
    return run.layers * (attention + feed) + embeddings


def flops_per_step(run: PublishedRun) -> float:
    """The FLOP of one step as the run's paper counts them: Megatron's
    ``96 B s l h² (1 + s/6h + V/16lh)`` (recomputation counted) for the
    Megatron-style papers, PaLM's ``6N + 12 l h s`` per token (Chowdhery et
    al. 2022, Appendix B: no recomputation) for the MFU-style ones."""
    if run.paper in ("chowdhery2022", "dubey2024", "torchtitan2024"):
        per_token = 6 * _parameters(run) + 12 * run.layers * run.hidden * run.sequence
        return per_token * run.global_batch * run.sequence
    if run.paper == "maxtext":
        # calculate_tflops_training_per_device: 3 x (the weight products, the embedding's once) + 3 x attention's
        # QK^T and PV (non-causal), per token
        head = run.head_dim or run.hidden // run.heads
        kv = run.kv_heads or run.heads
        weights = run.layers * (((3 if run.gated else 2) * run.hidden * run.ffn)
                                + run.hidden * head * (run.heads + 2 * kv) + run.heads * head * run.hidden)
        per_token = 3 * 2 * (weights + run.vocabulary * run.hidden)
        per_token += 3 * 2 * 2 * run.sequence * run.heads * head * run.layers
        return per_token * run.global_batch * run.sequence
    return megatron_flops(run.global_batch, run.layers, run.hidden, run.sequence, run.vocabulary)


def _figure(run: PublishedRun, base: PublishedRun | None) -> Callable[[Sequence[Any]], float]:
    tokens = run.global_batch * run.sequence
    quantity = run.quantity
    if quantity == "seconds per step":
        return lambda s: s[0].prediction.seconds
    if quantity == "days":
        assert run.steps is not None
        return lambda s: run.steps * s[0].prediction.seconds / 86400
    if quantity == "tokens/s":
        return lambda s: tokens / s[0].prediction.seconds
    if quantity == "tokens/s per device":
        return lambda s: tokens / s[0].prediction.seconds / run.devices
    if quantity == "TFLOP/s per device":
        flops = flops_per_step(run)
        return lambda s: flops / s[0].prediction.seconds / run.devices / 1e12
    assert base is not None
    if quantity == "speed-up":
        return lambda s: s[1].prediction.seconds / s[0].prediction.seconds
    if quantity == "scaling efficiency":
        ours, theirs = flops_per_step(run) / run.devices, flops_per_step(base) / base.devices
        return lambda s: (ours / s[0].prediction.seconds) / (theirs / s[1].prediction.seconds)
    raise ValueError(f"no figure for {quantity}")


def run_cases(names: Sequence[str] = CHOSEN) -> list[Case]:
    """The runs named (default `CHOSEN`) as cases, in order."""
    by_name = {r.name: r for r in PUBLISHED_RUNS}
    cases = []
    for name in names:
        run = by_name[name]
        base = by_name.get(run.relative_to or "")
        setups = (run_setup(run),) + ((run_setup(base),) if base is not None and run.quantity in
                                      ("speed-up", "scaling efficiency") else ())
        layout = f"t={run.tensor}, p={run.pipeline}, d={run.data}" + (f", ctx={run.context}" if run.context > 1 else "")
        cases.append(Case(
            name=run.name,
            title=f"{run.model.upper()} {run.layers} layers × {run.hidden} on {run.devices:,} {run.device} "
                  f"({layout}, batch {run.global_batch:,} × {run.sequence:,})",
            paper=run.paper, device=run.device, quantity=run.quantity, published=run.published,
            source=run.source, setups=setups, figure=_figure(run, base),
            assumptions=tuple(a for a in (run.notes,) if a) + (
                "the zoo's GPT with the run's FLOP (a gated feed-forward as 1.5x the width, grouped-query "
                "attention's missing key/value FLOP off the feed-forward width), Adam, one micro-batch of "
                f"{run.micro_batch or 1} on the slowest stage",),
        ))
    return cases
