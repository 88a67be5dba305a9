"""The record of a published training run: `PublishedRun` and the names its fields take.

`xla_cost.study.published_runs` holds the runs themselves (`PUBLISHED_RUNS`,
with the conventions the records follow); this module declares what a record
is, for every module that writes runs (`xla_cost.study.published_runs_today`)
and every one that reads them.
"""

from __future__ import annotations

import dataclasses

from xla_cost.choices import FLOAT8

__all__ = ["CONFIDENCE", "DTYPES", "FRAMEWORKS", "QUANTITIES", "RECOMPUTE", "SCALED_BY", "Framework", "PublishedRun",
           "framework", "runs_of"]

QUANTITIES: tuple[str, ...] = (
    "TFLOP/s per device", "MFU", "HFU", "tokens/s", "tokens/s per device", "seconds per step",
    "scaling efficiency", "speed-up", "days",
)
"""What a published figure measures. ``tokens/s`` is the whole run's,
``tokens/s per device`` one device's; ``MFU`` and ``HFU`` are fractions of the
device's peak (model FLOP without and with recomputation, Chowdhery et al.
2022, §4.1); ``scaling efficiency`` and ``speed-up`` are relative to the run
named in `PublishedRun.relative_to`; ``days`` covers `PublishedRun.steps`."""

DTYPES: tuple[str, ...] = ("bfloat16", "float16", "float32", FLOAT8)
"""The format of the run's matrix products: 16- or 32-bit, or FP8
(`xla_cost.choices.FLOAT8`: the linear layers' products in an FP8 format with
per-tensor scaling, attention's and the rest in bfloat16, as Transformer
Engine and torchao run them; the run's ``notes`` say which recipe)."""

SCALED_BY: tuple[str, ...] = ("flops", "parameters")
"""What a ``scaling efficiency`` weighs each run's step by (`PublishedRun.scaled_by`):
``flops``, the FLOP of its step as its source counts them (per device per
second, over its base's); ``parameters``, its model's parameters (every
weight, bias and norm, as Megatron-LM counts them), as Megatron-LM's
weak-scaling tables weigh them: (N / n t) / (N₁ / t₁)."""

RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")
"""Activation recomputation: none, part of each layer (Korthikanti et al.'s
selective recomputation, MaxText's ``minimal`` policy), or every layer."""



@dataclasses.dataclass(frozen=True, kw_only=True)
class Framework:
    """The software a published run trained with, and how it runs a model's layers.

    Attributes:
      name: the key a `PublishedRun.framework` names.
      scans: whether the framework runs its layers as one scanned loop (one
        compiled body run ``layers`` times: `jax.lax.scan`, Flax's ``nn.scan``)
        rather than unrolled, each layer its own kernels; None where it is a
        per-run option the run's source does not give.
      why: where the fact was read, or why it holds.
      fuses_elementwise: whether the layers' elementwise work (scaling,
        masking, activations, dropout, residual additions) runs fused: a
        compiler's fusions or hand-fused kernels. False: eager, each
        operation its own kernel, as eager PyTorch launches them: the
        forward and gradient programs are priced compiled with XLA's fusion
        passes off (`xla_cost.compiled.xla.EAGER_OPTIONS`).
      fuses_optimizer: whether the optimizer's update runs as fused kernels
        (apex's FusedAdam, a multi-tensor apply, a compiler's fusions); False:
        its update program priced unfused too.
      overlaps_gradient_reduce: whether the data-parallel gradient all-reduce
        runs in buckets behind the backward pass (PyTorch DDP's hooks); False:
        after the backward pass, nothing of it hidden.
      gradient_reduce_bytes: bytes per gradient element the data-parallel
        all-reduce moves; None: the parameters' own.
      reruns_recomputed_collectives: whether its activation recomputation
        reruns each recomputed layer's whole forward in the backward pass,
        its tensor-parallel collectives too (PyTorch's checkpoint); XLA's
        rematerialization drops a recomputed collective the backward pass
        does not read (`xla_cost.timemodel.schedule.rerun_collectives`).
      runtime: where the eager facts were read (file and line), "" where the
        defaults hold.
      loss: the loss its training step computes, by name (`xla_cost.LOSSES`,
        with where it was read); None: the default (optax's integer-label
        cross-entropy, `xla_cost.softmax_cross_entropy`).
      softmax_float32: whether its attention's masked softmax runs in float32
        on 16-bit scores (converted first, the probabilities back; the zoo's
        default); False: in the scores' own dtype, as eager PyTorch's
        ``torch.nn.Softmax`` reads and writes float16 (the zoo GPT's
        ``softmax_float32=False``, written out dense attention only).
      dropout: the dropout rate its layers ran (embeddings, attention
        probabilities, each block's two outputs), each dropout a kernel of
        its own where the layers run eager; 0: none priced (a fused kernel's
        share of the work, or none run).
    """

    name: str
    scans: bool | None
    why: str
    fuses_elementwise: bool = True
    fuses_optimizer: bool = True
    overlaps_gradient_reduce: bool = True
    gradient_reduce_bytes: int | None = None
    reruns_recomputed_collectives: bool = False
    runtime: str = ""
    loss: str | None = None
    softmax_float32: bool = True
    dropout: float = 0.0

    @property
    def unfused(self) -> tuple[str, ...]:
        """The programs priced unfused (`xla_cost.analyze`'s ``unfused``): the forward and gradient
        programs where the layers run eager, the update where the optimizer does."""
        return ((() if self.fuses_elementwise else ("forward", "grad"))
                + (() if self.fuses_optimizer else ("update",)))


FRAMEWORKS: tuple[Framework, ...] = (
    Framework(name="megatron", scans=False,
              why="Megatron-LM (and Megatron-Core's TransformerBlock) keeps its layers in a torch.nn.ModuleList "
                  "and calls them one after another in eager PyTorch: every layer launches its own kernels"),
    Framework(name="megatron-2019", scans=False,
              why="Megatron-LM of 2019 (github.com/NVIDIA/Megatron-LM at a0368ddf, 2019-08-12): "
                  "mpu/transformer.py's GPT2ParallelTransformer keeps its layers in a torch.nn.ModuleList "
                  "called one after another in eager PyTorch",
              fuses_elementwise=False, fuses_optimizer=True, overlaps_gradient_reduce=False,
              gradient_reduce_bytes=2, reruns_recomputed_collectives=True, softmax_float32=False, dropout=0.1,
              runtime="a0368ddf: mpu/transformer.py lines 117-144, the attention's scores divided by sqrt(hn), "
                      "multiplied by the mask, 10000 (1 - mask) subtracted, softmaxed (line 126, torch.nn.Softmax "
                      "on the float16 scores of the model FP16_Module makes half, pretrain_gpt2.py lines 78-79) and "
                      "dropped out (torch.nn.Dropout at --attention-dropout 0.1, arguments.py line 33; the attention's and the "
                      "MLP's outputs at --hidden-dropout 0.1, line 46, mpu/transformer.py lines 144 and 203, the "
                      "embeddings model/gpt2_modeling.py line 91), each an eager PyTorch operation and kernel, the context permuted and made contiguous (a copy), "
                      "the output dropped out, lines 280 and 286 the residual additions; apex's FusedLayerNorm "
                      "(line 22) and gelu under torch.jit.script (lines 149-153) are one kernel each where the "
                      "unfused program runs several; the optimizer apex's FusedAdam (pretrain_gpt2.py line 41), "
                      "one kernel per parameter tensor; the gradients all-reduced after the backward pass "
                      "(pretrain_gpt2.py lines 283-299: optimizer.backward, then model.allreduce_params), its "
                      "hooks commented out (model/distributed.py lines 68-73), all of a dtype's gradients "
                      "flattened into one buffer, all-reduced and copied back (lines 40-65), in the model's "
                      "float16 unless --fp32-allreduce (arguments.py line 79, off by default); "
                      "each layer checkpointed (mpu/transformer.py lines 390-397, checkpoint_num_layers 1) by "
                      "mpu/random.py's CheckpointFunction, whose backward reruns the layer's whole forward under "
                      "enable_grad and backpropagates its outputs (lines 190-218): both row-parallel all-reduces of "
                      "the layer (mpu/layers.py line 321, reduce_from_model_parallel_region) run again, each a "
                      "blocking torch.distributed.all_reduce of the float16 activations (mpu/mappings.py line 31); "
                      "6 a layer in all with the 2 of the column-parallel inputs' gradients (copy_to_model_parallel_"
                      "region's backward, mappings.py lines 87-88), where XLA's program runs 5"),
    Framework(name="megatron-v1.0", scans=False,
              why="Megatron-LM release v1.0 (github.com/NVIDIA/Megatron-LM tag v1.0, 03d28809, 2020-04-21): "
                  "megatron/model/transformer.py's ParallelTransformer keeps its layers in a torch.nn.ModuleList "
                  "(lines 369-370) called one after another in eager PyTorch",
              fuses_elementwise=False, fuses_optimizer=True, overlaps_gradient_reduce=False,
              gradient_reduce_bytes=2, reruns_recomputed_collectives=True, softmax_float32=False, dropout=0.1,
              runtime="v1.0 (03d28809): no fused elementwise kernel of its own (megatron/fused_kernels, the "
                      "scaled upper-triangular masked softmax and fused_bias_gelu.py came with 51a2e6b0, "
                      "2020-09-11); megatron/model/transformer.py lines 176-180, the query and the key each divided "
                      "by sqrt(sqrt(hn)) (two eager kernels on b np s hn, where 2019 divided the s x s scores), "
                      "line 189 torch.nn.Softmax in float16 (--attention-softmax-in-fp32 off, arguments.py line "
                      "259, and --apply-query-key-layer-scaling, which turns it on, lines 110-111, off: neither in "
                      "examples/pretrain_gpt2.sh), lines 192-193 the scores' dropout, line 203 the context permuted and made contiguous "
                      "(a copy), lines 90 and 215 the outputs' dropouts (each at 0.1: --attention-dropout and "
                      "--hidden-dropout, arguments.py lines 140-143; the embeddings' too, model/language_model.py "
                      "line 148), lines 333 and 343 the residual additions, "
                      "each an eager kernel; the mask one in-place masked_fill_ (model/gpt2_model.py line 30, where "
                      "2019 multiplied and subtracted); apex's FusedLayerNorm (transformer.py line 21) and torch's "
                      "F.gelu (model/language_model.py lines 52-54; the scripted OpenAI gelu only with "
                      "--openai-gelu) one kernel each where the unfused program runs several; the column-parallel "
                      "F.linear's bias in its product's call (mpu/layers.py line 250), the row-parallel bias "
                      "added after the all-reduce (lines 326-330); the optimizer apex's FusedAdam (training.py "
                      "line 24), the fp16 optimizer's gradient copies and overflow check by apex's "
                      "multi_tensor_applier (fp16/fp16util.py line 177, fp16/loss_scaler.py lines 64-66); the "
                      "data-parallel gradients all-reduced after the backward pass (--DDP-impl local by default, "
                      "arguments.py line 285; training.py lines 236-241), the hooks commented out "
                      "(model/distributed.py lines 66-71), a dtype's gradients flattened into one buffer and "
                      "all-reduced in float16 unless --fp32-allreduce (distributed.py lines 50-58, arguments.py "
                      "line 261); each layer checkpointed (transformer.py lines 377-396, --checkpoint-num-layers 1, "
                      "arguments.py line 162) by mpu/random.py's CheckpointFunction, whose backward reruns the "
                      "layer's forward under enable_grad (lines 207-237): both row-parallel all-reduces "
                      "(mpu/layers.py line 328, mpu/mappings.py lines 91-96 and 31) run again, 6 a layer with the "
                      "2 of the column-parallel inputs' gradients (mappings.py lines 79-88)"),
    Framework(name="deepspeed", scans=False,
              why="Megatron-DeepSpeed: Megatron-LM's PyTorch layers, as a list of LayerSpecs per pipeline stage "
                  "under DeepSpeed's engine; run one after another, unrolled"),
    Framework(name="metaseq", scans=False,
              why="metaseq (fairseq's descendant, OPT): a torch.nn.ModuleList of decoder layers in eager "
                  "PyTorch, FSDP-wrapped"),
    Framework(name="torchtitan", scans=False,
              why="torchtitan: PyTorch FSDP2; the model's TransformerBlocks in an nn.ModuleDict called in a "
                  "Python loop (torch.compile, where on, compiles each block apart): unrolled"),
    Framework(name="pytorch", scans=False,
              why="another PyTorch code base (Llama 3's: Meta's in-house 4D-parallel PyTorch stack, Dubey et "
                  "al. 2024 §3.3.2): eager PyTorch runs each layer's kernels; no scan exists in it"),
    Framework(name="llm-foundry", scans=False,
              why="MosaicML LLM Foundry on Composer: MPT's blocks in a torch.nn.ModuleList (modeling_mpt.py) run "
                  "one after another in eager PyTorch under FSDP",
              fuses_elementwise=False,
              runtime="mosaicml/llm-foundry at 5e85bd62 (the H100 tables' commit): scripts/train/train.py lines "
                      "385-388, compile_config popped with the default None (torch.compile only where a yaml sets "
                      "one; the pretrain yamls and scripts/train/benchmarking/submit_benchmarks.py set none), so "
                      "each operation of llmfoundry/models/layers/blocks.py's MPTBlock.forward (lines 129-150: "
                      "norm_1, the attention, the residual addition through resid_attn_dropout, norm_2, the "
                      "feed-forward, the second addition) and of ffn.py (torch.nn.functional.gelu, line 47) is an "
                      "eager kernel; torch's layer_norm and gelu are one kernel each where the unfused program runs "
                      "several; the optimizer (the yamls' decoupled_adamw) priced fused, its kernels not read"),
    Framework(name="nemo", scans=False,
              why="NVIDIA NeMo's language models run Megatron-Core's TransformerBlock (a ModuleList of "
                  "layers, unrolled), as 'megatron'"),
    Framework(name="maxtext", scans=True,
              why="MaxText's base.yml: 'scan_layers: True' (the decoder's layers in one nn.scan; a run's "
                  "config may turn it off, none of the runs here does)",
              # MaxText/train.py loss_fn (tpu-recipes-v0.1.4 lines 290-291; 76bd53b0 lines 193-194; v0.1.2 lines
              # 385-386): jax.nn.one_hot(targets, vocab_size) and max_utils.cross_entropy_with_logits (T5X's custom
              # gradient, z_loss 0.0), on logits cast to float32 (base.yml cast_logits_to_fp32: True, line 134)
              loss="one-hot"),
    Framework(name="jax-pathways", scans=None,
              why="a JAX program on Google's Pathways runtime (PaLM's abstract: 'trained PaLM on 6144 TPU v4 "
                  "chips using Pathways'); whether its layers are one scanned loop is not published"),
    Framework(name="other", scans=None, why="a framework not named above; whether it scans is not known"),
)
"""Every framework a published run names, each with its "scans its layers"
fact (the program the run's framework runs: scanned or unrolled) and, where it
ran eager and unfused, which programs are priced unfused and how it reduced
its gradients."""


def framework(name: str) -> Framework:
    """The `Framework` of that name (a `PublishedRun.framework`); KeyError on another."""
    for entry in FRAMEWORKS:
        if entry.name == name:
            return entry
    raise KeyError(f"no framework {name!r}: expected one of {', '.join(f.name for f in FRAMEWORKS)}")


CONFIDENCE: tuple[str, ...] = ("high", "medium", "low")
"""How sure the record is: ``high``, figure and configuration read in the
source; ``medium``, the figure read but part of the configuration assumed or
read second-hand; ``low``, the figure itself read second-hand."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PublishedRun:
    """One published figure and the run that produced it.

    Attributes:
      name: short unique key (``megatron2019-8.3b-512``).
      paper: key shared by every run of one publication (leave-one-paper-out).
      source: citation: authors, year, arXiv id or repository, table or section.
      address: the canonical address of the source.
      verified_how: what was read to check the figure (stored copies, through
        the search tool), and what it agreed with.
      device: a registry key of `xla_cost.timemodel.devices`.
      devices: devices of the whole run.
      quantity: one of `QUANTITIES`.
      published: the figure, as published (fractions for percentages).
      also: other figures the source publishes for the same run, as
        ``(quantity, figure)`` pairs.
      relative_to: for a scaling efficiency or a speed-up, the run it is
        relative to: a name in `PUBLISHED_RUNS`, or the run in words where the
        source publishes no figure for it.
      scaled_by: for a scaling efficiency, what the source weighs each run's
        step by: one of `SCALED_BY` (``flops`` unless the source says otherwise).
      steps: for ``days``, the optimizer steps the figure covers.
      framework: the software it trained with: a `Framework` name in
        `FRAMEWORKS` (which says whether it scans its layers).
      model: the model family: ``gpt`` for every decoder-only language model
        here, mixtures of experts included; its variants are the fields below
        and ``notes``.
      layers, hidden, heads, ffn, vocabulary, sequence: the model; ``ffn`` is
        the feed-forward width (of each of the two input matrices where
        ``gated``).
      kv_heads: key/value heads where fewer than ``heads`` (grouped or
        multi-query attention), else None.
      head_dim: the head width where ``heads * head_dim != hidden``, else None.
      gated: a gated feed-forward (SwiGLU: three matrices, not two).
      tied: input and output embeddings shared.
      experts: routed experts in each layer's feed-forward, a mixture of
        experts; 0 for a dense feed-forward. Where set, ``ffn`` is each
        expert's width and a router of ``hidden x experts`` precedes them.
      experts_per_token: the experts each token is routed to (top-k); 0 where
        ``experts`` is 0.
      capacity_factor: the tokens each expert takes, as a multiple of an even
        share (tokens x top-k / experts), the rest dropped; None where no token
        is dropped or the model is dense.
      global_batch: sequences per optimizer step; micro_batch: sequences per
        forward-backward pass of one replica (None: not published).
      tensor, pipeline, data, context: the layout's degrees (their product is
        ``devices``); fsdp: the sharding group within ``data`` (1 if none);
        zero_stage: what it shards (0 nothing, 1 optimizer states, 2 and
        gradients, 3 and parameters); chunks: interleaved pipeline stages per
        device (1 if none, None: interleaved, number not published);
        sequence_parallel: Megatron's sequence parallelism within ``tensor``;
        overlap_tensor: the tensor-parallel collectives overlapped with the
        products (Transformer Engine's userbuffers: NeMo's and Megatron
        Bridge's ``tp_comm_overlap``, which needs sequence parallelism);
        overlap_p2p: the pipeline's send/recv overlapped with compute
        (Megatron's ``overlap_p2p_comm``, Llama 3's asynchronous
        point-to-point); overlap_context: context parallelism's exchange of
        keys and values overlapped with the attention (Megatron-Core's ring
        through Transformer Engine; Llama 3's all-gather is not). Each False
        unless the run's configuration says so.
      dtype: one of `DTYPES`; recompute: one of `RECOMPUTE`.
      kept_tensors: where recomputation keeps tensors by name (MaxText's
        ``remat_policy: custom``), each named tensor kept and where, as
        ``(name, "device" | "offload")`` pairs (names of
        `xla_cost.step.remat.CHECKPOINT_NAMES`; ``offload``: moved to the
        host's memory and back), the rest recomputed; () where it does not.
      node_gpus: devices per node (a GPU server's GPUs, a TPU host's chips).
      node_links: the links within a node and between nodes, in words.
      flops_formula: how the source counts the FLOP behind its figure.
      notes: what the source does not say and is assumed, and the model's
        departures from GPT-2's (SwiGLU, GQA, ALiBi, parallel blocks).
      verified: the published figure was read in its source or a faithful copy.
      confidence: one of `CONFIDENCE`.
    """

    name: str
    paper: str
    source: str
    address: str
    verified_how: str
    device: str
    devices: int
    quantity: str
    published: float
    also: tuple[tuple[str, float], ...] = ()
    relative_to: str | None = None
    scaled_by: str = "flops"
    steps: int | None = None
    framework: str
    model: str = "gpt"
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocabulary: int
    sequence: int
    kv_heads: int | None = None
    head_dim: int | None = None
    gated: bool = False
    tied: bool = True
    experts: int = 0
    experts_per_token: int = 0
    capacity_factor: float | None = None
    global_batch: int
    micro_batch: int | None
    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    fsdp: int = 1
    zero_stage: int = 0
    chunks: int | None = 1
    context: int = 1
    sequence_parallel: bool = False
    overlap_tensor: bool = False
    overlap_p2p: bool = False
    overlap_context: bool = False
    dtype: str
    recompute: str
    kept_tensors: tuple[tuple[str, str], ...] = ()
    node_gpus: int
    node_links: str
    flops_formula: str
    notes: str
    verified: bool = True
    confidence: str = "high"


def runs_of(base: dict, *rows: dict) -> tuple[PublishedRun, ...]:
    """Runs of one source: its shared fields (``base``), each row's own over them."""
    return tuple(PublishedRun(**{**base, **row}) for row in rows)
