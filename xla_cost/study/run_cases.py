"""The published runs of `xla_cost.study.published_runs` as validation cases.

Each `PublishedRun` becomes a `xla_cost.study.cases.Case`: the program the
run's framework runs, built from the zoo family that is what the run ran
(`program`): the zoo's GPT (`xla_cost.zoo`'s ``gpt3-175b`` configured) for a
GPT-2/3-style run (a plain GeLU feed-forward), its Llama (``llama3-8b``
configured: SwiGLU, grouped-query attention of ``kv_heads`` key/value heads of
``head_dim``, RoPE, RMSNorm) for a run with a gated feed-forward; its layers
scanned or unrolled as the run's framework runs them
(`xla_cost.study.published_runs.Framework.scans`), attention in the zoo's
fused attention (cuDNN's kernel on a GPU, jax's Pallas splash kernel on a
TPU) where the run's was a fused kernel (`FUSED_ATTENTION`), its recomputation (`xla_cost.step.remat.REMAT_LEVELS`).
It is one micro-batch on one pipeline stage (its share of the layers)
sharded over its tensor-parallel devices, compiled for the run's device, and
laid out as the run was (stages, interleaved chunks, micro-batches,
data-parallel replicas, its node). FSDP without a pipeline (torchtitan,
MaxText) is compiled in the program: its mesh has the ``fsdp`` axis, its
batch the run's sequences per device on every shard, and the layout's
replicas are the sharded groups; with a pipeline, the replicas reduce their
gradients as data-parallel ones (the runs' ZeRO stages 1 and 2 move the same
bytes). Each case's assumptions say which program was priced
(`describe_program`).

The figure of each run is computed from the predicted step as the paper
computes its own: seconds per step, days of its steps, tokens per second,
TFLOP/s per device from the paper's FLOP count (`flops_per_step`), a
speed-up or a weak-scaling efficiency against the run it names.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from xla_cost.errors import InputError
from xla_cost.step.remat import REMAT_LEVELS, custom_policy
from xla_cost.study.cases import RATIOS, Case, Setup, megatron_flops
from xla_cost.study.published_runs import PUBLISHED_RUNS, PublishedRun, framework

__all__ = ["CHOSEN", "LEFT_OUT", "RULES", "Rule", "left_out", "NODES", "FUSED_ATTENTION", "FUSED_HEAD_LIMIT", "fusable",
           "RESIDUAL_SHARDED", "SEQUENCE_PARALLEL", "SEQUENCE_PARALLEL_FAMILIES",
           "CORE_ATTENTION_SELECTIVE",
           "FAMILY_MODELS", "RunProgram", "family", "program", "describe_program", "run_cases", "run_setup",
           "flops_per_step", "megatron_parameters"]


@dataclasses.dataclass(frozen=True)
class Rule:
    """A rule that leaves published runs out of the validation, stated from the
    run's record and its source before its error is known (never from a
    prediction); the page lists each rule with the runs it removes.

    Attributes:
      name: a short key.
      text: the rule in words, as the page states it.
      applies: whether it removes a run.
    """

    name: str
    text: str
    applies: Callable[[PublishedRun], bool]


_BEST_FIGURES: frozenset[str] = frozenset({"opt2022-175b-992"})
"""Runs whose source publishes a best figure rather than a run's: OPT's "utilization of up to 147
TFLOP/s per GPU" (Zhang et al. 2022, §2.5)."""

RULES: tuple[Rule, ...] = (
    Rule("unverified", "the figure was not read in its source or a faithful copy (`PublishedRun.verified`)",
         lambda run: not run.verified),
    Rule("best figure", "the source gives a best or upper figure (\"up to\"), not a run's figure",
         lambda run: run.name in _BEST_FIGURES),
    Rule("ratio to a run in words", "a ratio (speed-up, scaling efficiency) to a run the source describes in words "
                                    "only: no record of `PUBLISHED_RUNS` to price the base run with",
         lambda run: run.quantity in RATIOS and run.relative_to not in {r.name for r in PUBLISHED_RUNS}),
    Rule("no zoo family", "no zoo family has the run's block (`family`: e.g. a plain feed-forward with grouped-query "
                          "attention)", lambda run: _no_family(run)),
    Rule("no FP8 family", "FP8 on a zoo family that has no FP8 products (`xla_cost.zoo.fp8_families`)",
         lambda run: run.dtype == "float8" and family(run) not in _fp8_families()),
)
"""The rules that leave a published run out. One more is applied when the programs are compiled
(`xla_cost.study.validation.REFUSED_RULE`): the device's compiler refuses the run's program, its
error kept with the analysed programs."""


def _fp8_families() -> tuple[str, ...]:
    from xla_cost.zoo import fp8_families

    return fp8_families()


def _no_family(run: PublishedRun) -> bool:
    try:
        family(run)
    except InputError:
        return True
    return False


def left_out(run: PublishedRun) -> Rule | None:
    """The first rule of `RULES` that removes ``run``; None: it is validated."""
    return next((rule for rule in RULES if rule.applies(run)), None)


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
    "dubey2024": "flash attention (Dubey et al. 2024, §3.3.2)",
    "maxtext": "MaxText's Pallas flash attention kernel on a TPU (base.yml attention: 'flash' at the tables' "
               "commit 76bd53b0: MaxText/layers/attentions.py's flash_attention.flash_attention, causal, blocks "
               "of 512; priced as jax's splash kernel, its successor in MaxText: the same causal blocks of 512, "
               "the scores kept in the kernel)",
    "maxtext-trillium": "MaxText's splash attention kernel on a TPU (base.yml attention: 'autoselected' at the "
                        "recipes' tags, which MaxText/layers/attentions.py's AttentionOp.apply_attention runs "
                        "as tpu_flash_attention in training: make_splash_mha, a causal mask; base.yml's sa_block_* "
                        "512, the zoo's; the Llama 3.1 recipes set 2,048 and the fused backward kernel, GPT-3's "
                        "1,024 and 2,048 (benchmarks/maxtext_trillium_model_configs.py at v0.1.4 lines 832-840, "
                        "982-990, at v0.1.2 lines 302-304): not priced as the recipes set them)",
    "nemo2024": "Transformer Engine's DotProductAttention (flash or cuDNN fused attention), Megatron Core's "
                "TEDotProductAttention in its Transformer Engine layer spec (megatron/core/models/gpt/"
                "gpt_layer_specs.py)",
    "megatron-bridge2026": "Transformer Engine's DotProductAttention (flash or cuDNN fused attention), Megatron "
                           "Core's TEDotProductAttention in its Transformer Engine layer spec",
    "torchtitan2025-h200": "PyTorch's scaled_dot_product_attention under torch.compile, its cuDNN and flash "
                           "backends first (torchtitan/models/attention.py, ScaledDotProductAttentionWrapper)",
    "llm-foundry2024": "MPT's FlashAttention or Triton flash attention kernel (mosaicml/llm-foundry at 5e85bd62: "
                       "scripts/train/benchmarking/sweep.py '--attn_impl flash' for the 1B, 3B, 7B and 70B rows, "
                       "'triton' for 13B and 30B, lines 46-81; submit_benchmarks.py's default 'triton', line 144, "
                       "set in the model's attn_config, line 305; the pretrain yamls' 'attn_impl: triton', "
                       "scripts/train/yamls/pretrain/mpt-*.yaml line 20)",
}
"""Papers whose runs computed attention in a fused kernel that keeps the
scores out of memory, and the kernel. Their programs' attention is the zoo's
fused attention (`models._transformer.attention`'s ``fused``, in each family,
the GPT's too: cuDNN's flash attention on a GPU target; on a TPU, jax's Pallas
splash attention kernels, `models._transformer.splash_attention`, which libtpu
compiles without the device)."""

RESIDUAL_SHARDED: dict[str, str] = {
    "maxtext": "MaxText splits it (base.yml at 76bd53b0, line 78: "
               "logical_axis_rules ['activation_embed', 'tensor']; MaxText/layers/models.py's DecoderLayer constrains "
               "its input, its norm's output, the attention's and the MLP's outputs and its output to "
               "('activation_batch', 'activation_length', 'activation_embed'), lines 235-291)",
}
"""Papers whose framework splits a transformer's residual stream ``(batch, positions, d_model)`` over the
tensor-parallel axis, ``d_model`` split between and inside the blocks, and where it says so. Their GPT
programs on a tensor-parallel mesh take the zoo GPT's ``shard_residual``
(`xla_cost.parallel.residual.constrain_residual`): the blocks' saved activations and the row-parallel
projections' outputs ``1 / tensor`` as wide on each device. Without a tensor axis it splits nothing, and
the program (and its key) is the one without it."""

FUSED_HEAD_LIMIT: dict[str, int] = {"before hopper": 128, "hopper or later": 256}
"""The widest head the zoo's fused attention takes on a GPU target, by the target's compute capability:
cuDNN's flash attention through ``jax.nn.dot_product_attention``, whose check (jax 0.10,
jax/_src/cudnn/fused_attention_stablehlo.py, ``check_is_flash_attention``: ``H_max = 256 if
is_hopper_or_later else 128``, a multiple of 8) the compile asks of the target's GPU
(`xla_cost.compiled.targets.use`). The frameworks' kernels take the same on Hopper: FlashAttention-2 "all
head dimensions up to 256" (Dao-AILab/flash-attention README) and Transformer Engine's backend choice
'head_dim_qk <= 256 (>192 requires sm80/90/100+)' (transformer_engine/pytorch/attention.py,
get_attention_backend), so Nemotron-4 340B's heads of 192 run fused on an H100. A run of fused attention
with wider heads keeps dense attention, and its description says why (`fusable`)."""


def _head_limit(device: str) -> int:
    from xla_cost.timemodel.devices import target

    found = target(device).gpu
    return FUSED_HEAD_LIMIT["hopper or later" if found is not None and tuple(found.compute_capability) >= (9, 0)
                            else "before hopper"]


SEQUENCE_PARALLEL = ("Korthikanti et al. 2022, §4.2.2; megatron/mpu/layers.py at d07d29df: the column-parallel "
                     "linear all-gathers its input, forward and again backward, lines 218-229 and 243-258; "
                     "RowParallelLinear reduce-scatters its output, lines 516-517")
"""Where a run's sequence parallelism (`PublishedRun.sequence_parallel`) is read as its program prices it."""

CORE_ATTENTION_SELECTIVE: dict[str, str] = {
    "megatron": "megatron/model/transformer.py at d07d29df, 2022-06-08, lines 356 and 366-382: "
                "checkpoint_core_attention = args.recompute_granularity == 'selective', CoreAttention under "
                "mpu.checkpoint; Korthikanti et al. 2022, §5",
}
"""The frameworks whose ``selective`` recomputation (`PublishedRun.recompute`) recomputes the core
attention alone, and where that is read: their GPT-family runs are priced with the zoo GPT's
``core_attention`` policy (`xla_cost.zoo.gpt.CORE_ATTENTION`), not ``selective``'s
``dots_with_no_batch_dims_saveable`` (which recomputes the layer norms' outputs too and, under
sequence parallelism, gathers them again)."""

SEQUENCE_PARALLEL_FAMILIES: tuple[str, ...] = ("gpt",)
"""The zoo families whose program takes a run's sequence parallelism (the zoo GPT's
``sequence_parallel``: `xla_cost.parallel.residual.constrain_sequence`). A run of another family
with it is priced without it, and its description says so."""


def fusable(run: PublishedRun) -> bool:
    """Whether the zoo's fused attention takes ``run``'s heads on its device (`FUSED_HEAD_LIMIT`;
    on a TPU the fused attention is the splash kernel, of any head)."""
    head = run.head_dim or run.hidden // run.heads
    return run.device.startswith("tpu") or (head <= _head_limit(run.device) and head % 8 == 0)


FAMILY_MODELS: dict[str, str] = {"gpt": "gpt3-175b", "llama": "llama3-8b", "mixtral": "mixtral-8x7b"}
"""The zoo model a run's program is configured from, by family (`family`):
every field its cost reads is set from the run (`program`)."""


def family(run: PublishedRun) -> str:
    """The zoo family that is what ``run`` ran: ``llama`` for a gated
    feed-forward (SwiGLU) or grouped-query attention (Nemotron-4's plain
    squared-ReLU feed-forward with it: the family's plain MLP), with heads of
    any width; ``gpt`` for a GPT-2/3-style run (a plain feed-forward, every
    head its own keys and values, of any width: MaxText's 2023 decoder's
    heads of 256), whose embedding is tied as theirs are; ``mixtral`` for a
    mixture of experts (``experts`` routed SwiGLU experts, ``experts_per_token``
    each token)."""
    if run.experts:
        return "mixtral"
    return "llama" if run.gated or run.kv_heads is not None else "gpt"


@dataclasses.dataclass(frozen=True)
class RunProgram:
    """The program a run's framework runs, as the zoo builds it.

    Attributes:
      family: ``gpt`` or ``llama`` (`family`).
      model: the zoo model configured (`FAMILY_MODELS`).
      config: its fields, from the run.
      scanned: the layers in one scanned loop (``nn.scan``), else unrolled.
      scans_known: whether the run's framework publishes how it runs its
        layers (`xla_cost.study.published_runs.Framework.scans`); unknown is
        priced unrolled, and the description says so.
      fused_attention: attention in the zoo's fused attention.
      description: what was priced, in words (`describe_program`).
      unfused: the programs compiled with XLA's fusion passes off, each
        operation a kernel of its own, where the run's framework ran them
        eager (`xla_cost.study.published_record.Framework.unfused`).
    """

    family: str
    model: str
    config: dict[str, Any]
    scanned: bool
    scans_known: bool
    fused_attention: bool
    description: str
    unfused: tuple[str, ...] = ()


def program(run: PublishedRun) -> RunProgram:
    """The program ``run``'s framework runs on its slowest pipeline stage: the
    zoo family that is what it ran (`family`), its ``ceil(layers / pipeline)``
    layers scanned where its framework scans them and unrolled where it does
    not or does not publish it, attention fused where the run's was
    (`FUSED_ATTENTION`, every family), the run's recomputation
    (`xla_cost.step.remat.REMAT_LEVELS`: Korthikanti et al.'s selective
    recomputation is ``dots_with_no_batch_dims_saveable``)."""
    kind = family(run)
    scans = framework(run.framework).scans
    scanned = bool(scans)
    layers = math.ceil(run.layers / run.pipeline)
    fused = run.paper in FUSED_ATTENTION and fusable(run)
    # MaxText's remat_policy 'custom' (the record's kept_tensors): those tensors kept by name, the rest recomputed
    remat = custom_policy(dict(run.kept_tensors)) if run.kept_tensors and kind != "gpt" else REMAT_LEVELS[run.recompute]
    config: dict[str, Any] = {"n_layer": layers, "d_model": run.hidden, "n_head": run.heads, "d_ff": run.ffn,
                              "vocab_size": run.vocabulary, "seq_len": run.sequence,
                              "remat": remat, "scan_layers": scanned}
    if run.head_dim:
        config["head_dim"] = run.head_dim
    core = run.recompute == "selective" and run.framework in CORE_ATTENTION_SELECTIVE and kind == "gpt"
    if core:  # Megatron's selective recomputation: the core attention recomputed (the zoo GPT's own policy)
        from xla_cost.zoo.gpt import CORE_ATTENTION

        config["remat"] = CORE_ATTENTION
    if kind != "gpt":
        config.update(n_kv_head=run.kv_heads or run.heads, attention="fused" if fused else "dense")
    elif fused:  # the GPT's default is dense: a dense GPT's program (and key) as before
        config.update(attention="fused")
    split_residual = run.paper in RESIDUAL_SHARDED and run.tensor > 1 and kind == "gpt"
    if split_residual:  # off by default: every other program (and key) as before
        config.update(shard_residual=True)
    split_sequence = run.sequence_parallel and run.tensor > 1 and kind in SEQUENCE_PARALLEL_FAMILIES
    if split_sequence:  # off by default: every other program (and key) as before
        config.update(sequence_parallel=True)
    if kind == "llama":
        config.update(gated_mlp=run.gated, activation="silu" if run.gated else "relu")
    if kind == "mixtral":  # no capacity factor: no token dropped, every expert's slots hold every token (E / k)
        config.update(n_experts=run.experts, top_k=run.experts_per_token,
                      capacity_factor=run.capacity_factor or run.experts / run.experts_per_token)
    head = run.head_dim or run.hidden // run.heads
    if kind == "llama":
        mlp = "SwiGLU" if run.gated else "plain ReLU (the record names no activation)"
        shape = (f"the zoo's Llama: {mlp} feed-forward of {run.ffn:,}, {run.heads} heads"
                 + (f" with {run.kv_heads} key/value heads" if run.kv_heads else "") + f" of {head}, RoPE, RMSNorm, "
                 + ("its head untied (the run ties it: the zoo's Llama has no tied head)" if run.tied
                    else "untied head"))
    elif kind == "mixtral":
        shape = (f"the zoo's Mixtral: {run.experts} SwiGLU experts of {run.ffn:,}"
                 + ("" if run.gated else " (the run's are plain: the zoo's experts are gated)")
                 + f", {run.experts_per_token} per token, capacity factor "
                 + (f"{run.capacity_factor:g}" if run.capacity_factor else "none (every token kept)")
                 + f", {run.heads} heads" + (f" with {run.kv_heads} key/value heads" if run.kv_heads else "")
                 + f" of {head}, RoPE, RMSNorm, untied head")
    else:
        shape = f"the zoo's GPT: GeLU feed-forward of {run.ffn:,}, {run.heads} heads of {head}, tied head"
    loop = ("scanned (nn.scan)" if scanned else "unrolled") + f" as {run.framework} runs them"
    if scans is None:
        loop = f"unrolled ({run.framework}: whether it scans its layers is not published)"
    if fused:
        attention = f"attention in the zoo's fused attention, as the run's {FUSED_ATTENTION[run.paper]}" + (
            " (on a TPU target jax's Pallas splash kernels: the scores kept in the kernel, every query-key pair "
            "counted)" if run.device.startswith("tpu") else "")
    elif run.paper in FUSED_ATTENTION:
        attention = (f"dense attention (the run's was {FUSED_ATTENTION[run.paper]}: the zoo's fused attention, "
                     f"cuDNN's through jax, takes heads of at most {_head_limit(run.device)} on a {run.device}, a "
                     f"multiple of 8; these are "
                     f"{head})")
    else:
        attention = "dense attention"
    residual = ""
    if split_residual:
        residual = (f"; the residual stream's width (d_model) split over the {run.tensor} tensor-parallel devices "
                    f"between and inside the blocks, as {RESIDUAL_SHARDED[run.paper]}")
    elif run.paper in RESIDUAL_SHARDED and run.tensor > 1:
        residual = (f"; the residual stream whole on each tensor-parallel device (the run's split it: "
                    f"the zoo's {kind} has no such option)")
    if split_sequence:
        residual += (f"; sequence parallelism as the run's: the residual stream split by its positions over the "
                     f"{run.tensor} tensor-parallel devices between the blocks' linear layers, their inputs "
                     f"all-gathered and their outputs reduce-scattered ({SEQUENCE_PARALLEL})")
    elif run.sequence_parallel and run.tensor > 1:
        residual += (f"; the residual stream whole on each tensor-parallel device, its collectives all-reduces (the "
                     f"run's sequence parallelism split it by positions: the zoo's {kind} has no such option)")
    if run.context > 1:  # the program's mesh has the context axis (run_setup)
        residual += (f"; each sequence's {run.sequence:,} positions split over {run.context} context-parallel devices "
                     f"({run.sequence // run.context:,} each, in 2 x {run.context} load-balanced chunks), attention's "
                     "keys and values all-gathered over them (xla_cost.parallel.context)"
                     + ("; the fused attention over every gathered key (cuDNN's causal mask cannot be offset by "
                        "a chunk's place: every pair is counted either way)" if fused else ""))
    if remat != REMAT_LEVELS[run.recompute]:
        kept = ", ".join(f"{name} {'to the host' if place == 'offload' else 'on the device'}"
                         for name, place in run.kept_tensors)
        recompute = (f"recomputation keeping tensors by name as the run's remat_policy 'custom' does ({kept}; "
                     f"the rest recomputed: {remat})")
    else:
        recompute = f"{run.recompute} recomputation ({REMAT_LEVELS[run.recompute]})"
    runs = framework(run.framework)
    if not runs.softmax_float32 and kind == "gpt" and not fused:  # off by default: every other program as before
        config.update(softmax_float32=False)
        residual += (f"; the attention's masked softmax in {run.dtype}, as {run.framework}'s torch.nn.Softmax ran it "
                     "on the 16-bit scores (not converted to float32 and back)")
    if runs.dropout and kind == "gpt":  # off by default: every other program as before
        config.update(dropout=runs.dropout)
        residual += (f"; dropout at {runs.dropout:g} on the embeddings, the attention's probabilities and each "
                     f"block's two outputs, as {run.framework} ran it")
    if runs.unfused:
        residual += (f"; its {' and '.join(runs.unfused)} programs compiled with XLA's fusion passes off, each "
                     f"operation a kernel of its own (broadcasts and reshapes, views in eager PyTorch, left out), as "
                     f"{run.framework} ran them eager")
    if runs.loss == "one-hot":
        residual += (f"; the loss as {run.framework} computes it: cross-entropy against float32 one-hot targets "
                     "with T5X's custom gradient (xla_cost.one_hot_cross_entropy), no gather of the labels' logits "
                     "nor scatter into their gradient")
    description = (f"priced: {shape}; {layers} layer{'s' if layers > 1 else ''} {loop}; {attention}; "
                   f"{recompute}{residual}")
    if core:
        description = description.replace(
            f"selective recomputation ({REMAT_LEVELS['selective']})",
            f"selective recomputation as {run.framework}'s: the core attention (q k^T, its softmax, the product "
            f"with the values) recomputed, the activations around it kept ({config['remat']}: "
            f"{CORE_ATTENTION_SELECTIVE[run.framework]})")
    return RunProgram(kind, FAMILY_MODELS[kind], config, scanned, scans is not None, fused, description, runs.unfused)


def describe_program(run: PublishedRun) -> str:
    """Which program ``run`` is priced as, in words (`program`): the page shows it."""
    return program(run).description


def _stage_positions(run: PublishedRun) -> int:
    """The positions of a micro-batch a pipeline stage sends the next, as Megatron-Core shapes its
    send/recv (megatron/core/pipeline_parallel/schedules.py, get_tensor_shapes, at cf1d4d12, 2024-07:
    the sequence divided by the context-parallel size, line 1169, and again by the tensor-parallel
    size with sequence parallelism, lines 1173-1174: each device sends its own positions; so in 2022,
    megatron/schedules.py at d07d29df, lines 522-523)."""
    positions = run.sequence // max(run.context, 1)
    return positions // run.tensor if run.sequence_parallel and run.tensor > 1 else positions


def run_setup(run: PublishedRun) -> Setup:
    """The run's step as a `Setup`: one micro-batch on its slowest stage, the program its framework runs
    (`program`)."""
    micro = run.micro_batch or 1
    replicas = run.data  # a context-parallel group is in the program (its mesh's context axis), not a replica
    micro_batches = max(1, run.global_batch // (replicas * micro))
    sharded = run.fsdp if run.fsdp > 1 and run.pipeline == 1 else 1  # FSDP in the program, its gathers compiled
    built = program(run)
    layers = built.config["n_layer"]
    node, extra = NODES.get(run.paper, (None, {}))
    if run.device == "tpu-v5p":
        node = "tpu-v5p-slice"
    hardware: dict[str, Any] = {"device": run.device, **({"node": node} if node else {}), **extra}
    layout: dict[str, Any] = {"pipeline": run.pipeline, "micro_batches": micro_batches, "data": replicas // sharded,
                              "stage_bytes": micro * _stage_positions(run) * run.hidden * 2}
    if run.chunks and run.chunks > 1 and layers % run.chunks == 0:
        layout["chunks"] = run.chunks
    if run.overlap_tensor and run.tensor > 1:
        layout["overlap_tensor"] = True
    if run.overlap_p2p and run.pipeline > 1:
        layout["overlap_transfers"] = True
    if run.overlap_context and run.context > 1:
        layout["overlap_context"] = True
    runs = framework(run.framework)
    if not runs.overlaps_gradient_reduce:
        layout["overlap_gradients"] = False
    if runs.gradient_reduce_bytes is not None:
        layout["gradient_bytes"] = runs.gradient_reduce_bytes
    if runs.reruns_recomputed_collectives and run.recompute == "full" and run.tensor > 1:
        layout["rerun_collectives"] = True
    return Setup(
        label=run.name, model=built.model, batch_size=micro * sharded, config=built.config,
        dtype=run.dtype, optimizer="adam",
        mesh={**({"model": run.tensor} if run.tensor > 1 else {}), **({"fsdp": sharded} if sharded > 1 else {}),
              **({"context": run.context} if run.context > 1 else {})},
        hardware=hardware, layout=layout, unfused=built.unfused, loss=runs.loss,
    )


def _parameters(run: PublishedRun) -> float:
    head = run.head_dim or run.hidden // run.heads
    kv = run.kv_heads or run.heads
    attention = run.hidden * head * (run.heads + 2 * kv) + run.heads * head * run.hidden
    feed = (3 if run.gated else 2) * run.hidden * run.ffn
    embeddings = run.vocabulary * run.hidden * (1 if run.tied else 2)
    return run.layers * (attention + feed) + embeddings


def megatron_parameters(run: PublishedRun) -> float:
    """Every parameter of a GPT-2-style run as Megatron-LM counts them (the sum of its tensors' sizes): per
    layer the attention's and feed-forward's matrices and biases and two LayerNorms (scale and bias), the
    tied word embeddings, the learned positions and the final LayerNorm: ``12 l h² + 13 l h + V h + s h + 2 h``
    where the feed-forward is ``4 h`` wide and heads are ``h / n`` wide."""
    if family(run) != "gpt":
        raise InputError("a GPT-2-style run (plain feed-forward, every head its own keys and values)",
                         f"{run.name}: the {family(run)} family",
                         "Weigh its scaling by its FLOP (scaled_by='flops').")
    width = (run.head_dim or run.hidden // run.heads) * run.heads  # the attention's inner width
    matrices = 4 * run.hidden * width + 2 * run.hidden * run.ffn  # q, k, v and out; the feed-forward's two
    biases = 3 * width + run.hidden + run.ffn + run.hidden
    return (run.layers * (matrices + biases + 4 * run.hidden) + run.vocabulary * run.hidden
            + run.sequence * run.hidden + 2 * run.hidden)


def _weight(run: PublishedRun) -> float:
    """What ``run``'s scaling efficiency weighs its step by, as its source does (`PublishedRun.scaled_by`)."""
    return megatron_parameters(run) if run.scaled_by == "parameters" else flops_per_step(run)


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
    if quantity == "MFU":
        # the model FLOP per second per device over the device's dense peak for the run's dtype
        from xla_cost.timemodel.devices import device

        found = device(run.device, has="peak")
        assert found.peak is not None
        flops, peak = flops_per_step(run), found.peak.require(run.dtype)
        return lambda s: flops / s[0].prediction.seconds / run.devices / peak
    assert base is not None
    if quantity == "speed-up":
        return lambda s: s[1].prediction.seconds / s[0].prediction.seconds
    if quantity == "scaling efficiency":
        ours, theirs = _weight(run) / run.devices, _weight(base) / base.devices
        return lambda s: (ours / s[0].prediction.seconds) / (theirs / s[1].prediction.seconds)
    raise ValueError(f"no figure for {quantity}")


def run_cases(names: Sequence[str] | None = None) -> list[Case]:
    """The runs named (None: `CHOSEN`) as cases, in order."""
    by_name = {r.name: r for r in PUBLISHED_RUNS}
    cases = []
    for name in CHOSEN if names is None else names:
        run = by_name[name]
        base = by_name.get(run.relative_to or "")
        setups = (run_setup(run),) + ((run_setup(base),) if base is not None and run.quantity in RATIOS else ())
        layout = f"t={run.tensor}, p={run.pipeline}, d={run.data}" + (f", ctx={run.context}" if run.context > 1 else "")
        cases.append(Case(
            name=run.name,
            title=f"{run.model.upper()} {run.layers} layers × {run.hidden} on {run.devices:,} {run.device} "
                  f"({layout}, batch {run.global_batch:,} × {run.sequence:,})",
            paper=run.paper, device=run.device, quantity=run.quantity, published=run.published,
            source=run.source, setups=setups, figure=_figure(run, base),
            devices_ratio=run.devices / base.devices if base is not None and run.quantity == "speed-up" else None,
            assumptions=tuple(a for a in (run.notes,) if a) + (
                describe_program(run) + f"; Adam, one micro-batch of {run.micro_batch or 1} on the slowest stage"
                + _overlaps(run),),
        ))
    return cases


def _overlaps(run: PublishedRun) -> str:
    """What the run's framework overlaps, as the layout prices it (`run_setup`), in words."""
    said = [what for on, what in (
        (run.overlap_tensor and run.tensor > 1, "its tensor-parallel collectives beside the products"),
        (run.overlap_p2p and run.pipeline > 1, "its pipeline transfers beside the stage's compute"),
        (run.overlap_context and run.context > 1, "its context-parallel exchange of keys and values beside the "
                                                  "attention")) if on]
    runs = framework(run.framework)
    reduced = "" if run.data == 1 or (runs.overlaps_gradient_reduce and runs.gradient_reduce_bytes is None) else (
        "; its data-parallel gradients all-reduced " + ("behind the backward pass" if runs.overlaps_gradient_reduce
                                                        else "after the backward pass, nothing hidden")
        + (f", {runs.gradient_reduce_bytes} bytes a parameter" if runs.gradient_reduce_bytes else "")
        + f", as {run.framework} reduced them")
    return (("; overlapped, as its configuration says: " + " and ".join(said)) if said else "") + reduced


CHOSEN: tuple[str, ...] = tuple(run.name for run in PUBLISHED_RUNS if left_out(run) is None)
"""The published runs validated: every run of `PUBLISHED_RUNS` no rule of `RULES` removes."""

LEFT_OUT: dict[str, str] = {run.name: rule.text for run in PUBLISHED_RUNS
                            if (rule := left_out(run)) is not None}
"""The published runs a rule of `RULES` leaves out, with the rule (the page lists them)."""
