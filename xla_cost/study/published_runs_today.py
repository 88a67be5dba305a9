"""Published runs on today's machines: H100 and H200 (BF16 and FP8), TPU v6e.

The same records as `xla_cost.study.published_runs` (which gathers them into
`PUBLISHED_RUNS`, with the conventions they follow), from the tables NVIDIA
and the JAX and PyTorch teams keep beside their code: NeMo's H100 performance
table (FP8), Megatron Bridge's, MosaicML LLM Foundry's MPT tables on H100s
(BF16 and FP8, PyTorch FSDP on 8 to 512 GPUs), torchtitan's H200 benchmark
(FP8) and MaxText's Trillium recipes. Each figure and configuration was read in the
repository that publishes it (fetched, at the commit named in the run's
``address``), and each table's own FLOP count is checked against its
throughput in ``tests/study/test_published_runs.py``.
"""

from __future__ import annotations

from xla_cost.study.published_record import PublishedRun, runs_of

__all__ = ["RUNS_TODAY"]

_DGX_H100 = ("DGX H100 (the table's system): 8 H100 SXM 80GB on NVLink 4 and NVSwitch; 8 ConnectX-7 400 Gb/s "
             "InfiniBand adapters per node")

# --- H100, FP8: NeMo 24.07's pre-training table ----------------------------------------------------

_NEMO_COMMIT = "8e3d65dcfe3504689bfc5b6e67d502780aacad41"  # 2024-09-09 '24.07 perf numbers', the table's last version

_NEMO = dict(
    paper="nemo2024", framework="nemo",
    source="NVIDIA NeMo, docs/source/performance/performance_summary.md, 'Pretraining' (container NeMo 24.07, "
           "DGX-H100, FP8)",
    address=f"https://github.com/NVIDIA/NeMo/blob/{_NEMO_COMMIT}/docs/source/performance/performance_summary.md",
    verified_how=f"the table in the fetched NVIDIA/NeMo repository at {_NEMO_COMMIT[:10]} (its last version before "
                 "the page moved to docs.nvidia.com, commit d31653f7; an earlier version, 24.07 before the vboost "
                 "update, gives other figures); the models from that commit's nemo/collections/llm/gpt/model/"
                 "base.py (GPTConfig5B, 20B, 175B), llama.py (Llama2Config7B ... Llama3Config70B) and nemotron.py "
                 "(Nemotron3Config8B, Nemotron4Config22B, Nemotron4Config340B); each row's Model TFLOP/s over its "
                 "tokens/s is the FLOP per token of nemo/utils/flops_formulas.py with non-causal attention",
    device="h100", dtype="float8", recompute="none", node_gpus=8, node_links=_DGX_H100, tied=False,
    quantity="tokens/s per device",
    flops_formula="NeMo's flops_formulas (non-causal attention, as the table's figures give): Llama and Nemotron "
                  "B s L h^2 (12 + 12 g/a + (18 or 12) f/h + 12 s/h + 6 V/(L h)), 18 for a gated feed-forward; "
                  "GPT-3 (24 B s h^2 + 4 B s^2 h) 3 L + 6 B s h V, with V = 51,200 (GPT-3), 32,000 (Llama 2), "
                  "128,256 (Llama 3), 256,000 (Nemotron); Model TFLOP/s per GPU = that count over the step time "
                  "and the GPUs",
    notes="FP8 through Transformer Engine (the linear layers' products; attention's and the rest in bfloat16); "
          "Megatron-Core layers, unrolled. Assumed, not in the table: no activation recomputation, no sequence "
          "parallelism (where a row's configuration below does not set it) and no distributed optimizer recorded (NeMo's usual settings shard the optimizer states "
          "over the data-parallel ranks; not stated here), 8 GPUs per node. VP is the interleaved stages per "
          "device (1: none).",
    confidence="medium",
)

_GPT3 = ("GPT-3 layers as NeMo's GPTConfig: LayerNorm, GeLU, learned absolute positions, biases, the embedding "
         "shared with the output layer. Assumed: the GPT-2 tokenizer's 50,257 padded to a multiple of 128 x TP "
         "(Megatron's make_vocab_size_divisible_by 128).")
_LLAMA = ("Llama layers as NeMo's LlamaConfig: RMSNorm, RoPE, SwiGLU (ffn is each gate's width), no biases, untied "
          "embeddings; grouped-query attention where kv_heads is set.")
_NEMOTRON = ("Nemotron layers as NeMo's NemotronConfig: LayerNorm, squared-ReLU feed-forward of two matrices, RoPE "
             "on half of each head, no biases, untied embeddings, vocabulary 256,000; grouped-query attention where "
             "kv_heads is set.")


def _padded(vocabulary: int, tensor: int) -> int:
    """Megatron's padding: up to a multiple of 128 x the tensor-parallel degree."""
    step = 128 * tensor
    return -(-vocabulary // step) * step


def _nemo(name: str, shape: dict, devices: int, batch: int, micro: int, sequence: int, tensor: int, pipeline: int,
          context: int, chunks: int, tokens: float, tflops: float, notes: str) -> dict:
    return dict(name=f"nemo2024-{name}-{devices}", devices=devices, global_batch=batch, micro_batch=micro,
                sequence=sequence, tensor=tensor, pipeline=pipeline, context=context, chunks=chunks,
                data=devices // (tensor * pipeline * context), published=tokens,
                also=(("TFLOP/s per device", tflops),), notes=_NEMO["notes"] + " " + notes, **shape)


def _gpt3(layers: int, hidden: int, heads: int, tensor: int) -> dict:
    return dict(layers=layers, hidden=hidden, heads=heads, ffn=4 * hidden, vocabulary=_padded(50257, tensor),
                tied=True)


_LAUNCHER = ("NVIDIA/NeMo-Framework-Launcher's training configurations of the container's time (commit c99374bb, "
             "2024-08-06), launcher_scripts/conf/training/llama/")
_OVERLAP_P2P = (" Pipeline send/recv overlapped with compute: '" + "overlap_p2p_comm: true' in " + _LAUNCHER + "{file} "
                "(line {line}), as NeMo 2.0 sets it for every interleaved pipeline (nemo/lightning/pytorch/callbacks/"
                "megatron_comm_overlap.py at the table's commit, lines 135-136: 'if vp_size > 1: overlap_p2p_comm = "
                "True').")
_OVERLAP_TP = (" Sequence parallelism and Transformer Engine's userbuffers overlap of the tensor-parallel collectives "
               "with the products: 'sequence_parallel: true' (line 126), 'ub_tp_comm_overlap: true' (line 140) and "
               "the overlap configuration 'ub_cfg_h100_h8192_tp4_mbs1_seqlen4096' (line 3: this row's hidden, TP, "
               "micro-batch and sequence) in " + _LAUNCHER + "llama2_70b.yaml; NeMo 2.0 turns the overlap off "
               "without sequence parallelism (megatron_comm_overlap.py line 127).")

_CONTEXT = (" Context parallelism as Megatron-Core runs it with Transformer Engine: 'context_parallel_size: 2' (line "
            "63) in " + _LAUNCHER + "{file}; each sequence cut into 2 x CP chunks, rank i holding chunks i and "
            "2 CP - 1 - i (Megatron-LM megatron/training/utils.py, get_batch_on_this_cp_rank: 'we split sequence "
            "into 2*CP ranks'), keys and values passed around the context-parallel ring, each step's send/recv "
            "overlapped with the attention of the chunk already there (Transformer Engine v1.8, transformer_engine/"
            "pytorch/attention.py, AttnFuncWithCP, lines 535-540: 'overlap current-step compute with next-step "
            "communication', the ring at lines 623-660).")

_LAUNCHER_OF = ("NVIDIA/NeMo-Framework-Launcher's training configurations of the container's time (commit c99374bb, "
                "2024-08-06), launcher_scripts/conf/training/{file}: ")
_GPT3_20B_CFG = (" Sequence parallelism and Transformer Engine's userbuffers overlap of the tensor-parallel collectives "
                 "with the products: " + _LAUNCHER_OF.format(file="gpt3/20b.yaml") + "'sequence_parallel: True' (line "
                 "106), 'ub_tp_comm_overlap: True' (line 149) with 'ub_cfg_h100_h6144_tp2_mbs2_seqlen2048' (line 3: "
                 "this row's hidden, TP, micro-batch and sequence); that file's layout is this row's (TP 2, PP 1, "
                 "MBS 2).")
_GPT3_175B_CFG = (" Sequence parallelism and the pipeline's send/recv overlapped with compute, the tensor-parallel "
                  "collectives not: " + _LAUNCHER_OF.format(file="gpt3/175b.yaml") + "'sequence_parallel: True' "
                  "(line 106), 'overlap_p2p_comm: True' (line 108), 'ub_tp_comm_overlap: False' (line 149); that "
                  "file's layout is TP 4, PP 8, VP 6, MBS 1{mbs}.")
_NEMOTRON_CFG = (" Sequence parallelism and Transformer Engine's userbuffers overlap of the tensor-parallel collectives "
                 "with the products: " + _LAUNCHER_OF.format(file="nemotron/{file}") + "'sequence_parallel: true' "
                 "(line 130), 'ub_tp_comm_overlap: true' (line 158){p2p}, 'activation: squared-relu' (line 87); that "
                 "file's layout is {layout}.")

_LLAMA2_7B = dict(layers=32, hidden=4096, heads=32, ffn=11008, vocabulary=32000, gated=True)
_LLAMA2_13B = dict(layers=40, hidden=5120, heads=40, ffn=13824, vocabulary=32000, gated=True)
_LLAMA2_70B = dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocabulary=32000, gated=True)
_LLAMA3_8B = dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocabulary=128256, gated=True)
_LLAMA3_70B = dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocabulary=128256, gated=True)

_RUNS_NEMO = runs_of(
    _NEMO,
    # name, model, GPUs, GBS, MBS, sequence, TP, PP, CP, VP, tokens/s per GPU, model TFLOP/s per GPU
    _nemo("gpt3-5b", _gpt3(24, 4096, 32, 1), 64, 2048, 4, 2048, 1, 1, 1, 1, 23406, 765, _GPT3),
    {**_nemo("gpt3-20b", _gpt3(44, 6144, 48, 2), 64, 256, 2, 2048, 2, 1, 1, 1, 5851, 750, _GPT3 + _GPT3_20B_CFG),
     "sequence_parallel": True, "overlap_tensor": True},
    {**_nemo("gpt3-175b", _gpt3(96, 12288, 96, 4), 128, 256, 1, 2048, 4, 8, 1, 6, 716, 771,
             _GPT3 + _GPT3_175B_CFG.format(mbs=", this row's")),
     "sequence_parallel": True, "overlap_p2p": True},
    {**_nemo("gpt3-175b", _gpt3(96, 12288, 96, 4), 512, 2048, 2, 2048, 4, 8, 1, 6, 825, 888,
             _GPT3 + " The table links this row's TFLOP/s to MLPerf Training (NVIDIA's GPT-3 175B submissions)."
             + _GPT3_175B_CFG.format(mbs=" (this row's is 2)")),
     "sequence_parallel": True, "overlap_p2p": True},
    _nemo("llama2-7b", _LLAMA2_7B, 8, 128, 1, 4096, 1, 1, 1, 1, 16934, 780, _LLAMA),
    {**_nemo("llama2-13b", _LLAMA2_13B, 16, 128, 1, 4096, 1, 4, 1, 10, 8715, 760,
             _LLAMA + _OVERLAP_P2P.format(file="llama2_13b.yaml", line=139)
             + " That file's layout is this row's (TP 1, PP 4, VP 10)."),
     "overlap_p2p": True},
    {**_nemo("llama2-70b", _LLAMA2_70B, 64, 128, 1, 4096, 4, 4, 1, 20, 1728, 768,
             _LLAMA + _OVERLAP_P2P.format(file="llama2_70b.yaml", line=142) + _OVERLAP_TP
             + " That file's layout is TP 4, PP 4 with VP 5 (this row's VP is 20)."),
     "overlap_p2p": True, "overlap_tensor": True, "sequence_parallel": True},
    {**_nemo("nemotron-8b", dict(layers=32, hidden=4096, heads=32, ffn=16384, vocabulary=256000), 64, 256, 4, 4096,
             2, 1, 1, 1, 12507, 643, _NEMOTRON + " Nemotron-3 8B (Nemotron3Config8B)." + _NEMOTRON_CFG.format(
                 file="nemotron_8b.yaml", p2p="", layout="TP 2, PP 1, MBS 2 (this row's MBS is 4)")),
     "sequence_parallel": True, "overlap_tensor": True},
    {**_nemo("nemotron-22b", dict(layers=40, hidden=6144, heads=48, ffn=24576, vocabulary=256000), 64, 256, 2, 4096,
             2, 4, 1, 10, 4312, 562, _NEMOTRON + " Nemotron4Config22B." + _NEMOTRON_CFG.format(
                 file="nemotron_22b.yaml", p2p=", 'overlap_p2p_comm: True' (line 138)",
                 layout="TP 2, PP 4, VP 10, MBS 1 (this row's MBS is 2)")),
     "sequence_parallel": True, "overlap_tensor": True, "overlap_p2p": True},
    _nemo("nemotron-340b", dict(layers=96, hidden=18432, heads=96, kv_heads=8, ffn=73728, vocabulary=256000), 128,
          32, 1, 4096, 8, 8, 1, 12, 326, 686, _NEMOTRON + " Nemotron-4 340B (Nemotron4Config340B). No overlap "
          "recorded: the launcher's nemotron/nemotron_340b.yaml of the time (commit 7c842fcd, 2024-06-17; TP 8, PP "
          "12, VP 8, not this row's layout) sets 'ub_tp_comm_overlap: False' and 'overlap_p2p_comm: False', and "
          "NeMo 2.0's recipe (nemotron4_340b.py) sequence_parallelism=False; this row's own configuration is not "
          "published. The launcher's file of the container's time (commit c99374bb, 2024-08-06, nemotron/"
          "nemotron_340b.yaml: TP 8, PP 12, VP 8, again not this row's) keeps both overlaps off (lines 135, 156) and "
          "sets 'sequence_parallel: true' (line 127) and 'activations_checkpoint_granularity: selective' (line 122), "
          "which neither the table nor the recipe gives this row: priced without."),
    {**_nemo("llama3-8b", _LLAMA3_8B, 8, 128, 1, 8192, 1, 1, 2, 1, 12273, 711,
             _LLAMA + _CONTEXT.format(file="llama3_8b.yaml") + " That file's layout is this row's (TP 1, PP 1, CP 2)."),
     "overlap_context": True},
    {**_nemo("llama3-70b", _LLAMA3_70B, 64, 128, 1, 8192, 4, 4, 2, 5, 1524, 734,
             _LLAMA + _CONTEXT.format(file="llama3_70b.yaml") + _OVERLAP_P2P.format(file="llama3_70b.yaml", line=141)
             + " Sequence parallelism and Transformer Engine's userbuffers overlap of the tensor-parallel collectives "
             "with the products: 'sequence_parallel: true' (line 125), 'ub_tp_comm_overlap: true' (line 139) and the "
             "overlap configuration 'ub_cfg_h100_h8192_tp4_mbs1_seqlen8192' (line 3) in " + _LAUNCHER
             + "llama3_70b.yaml. That file's layout is this row's (TP 4, PP 4, VP 5, CP 2)."),
     "overlap_context": True, "overlap_p2p": True, "overlap_tensor": True, "sequence_parallel": True},
)
"""NeMo 24.07's FP8 pre-training throughput on DGX H100s: GPT-3 5B to 175B,
Llama 2 and 3, Nemotron 8B to 340B, with tensor, pipeline (interleaved) and
context parallelism."""

# --- H100, FP8: Megatron Bridge (NeMo 26.02) ---------------------------------------------------------

_BRIDGE_COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"

_RUNS_BRIDGE = runs_of(
    dict(
        paper="megatron-bridge2026", framework="nemo",
        source="NVIDIA NeMo Megatron Bridge, docs/performance-summary-archive.md, '26.02 NeMo Container', "
               "LLAMA3_70B, DGX-H100 row",
        address=f"https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/{_BRIDGE_COMMIT}/docs/"
                "performance-summary-archive.md",
        verified_how=f"the archive page in the fetched NVIDIA-NeMo/Megatron-Bridge repository at {_BRIDGE_COMMIT[:10]} "
                     "(and the same row in the stored copy at 0a25f911): '| DGX-H100 | 64 | FP8 | 256 | 1 | 8192 | 0 "
                     "| 4 | 8 | 1 | 5 | n/a | 1621 | 728 |'; TFLOP/s over tokens/s is 6 (L (h (h + 2 g d) + h^2 + "
                     "s h + 3 h f) + V h) per token, causal attention (to 0.1%)",
        device="h100", devices=64, dtype="float8", recompute="none", node_gpus=8, node_links=_DGX_H100,
        quantity="tokens/s per device", tied=False,
        flops_formula="Megatron Bridge's flop_utils: per token 6 (L (h (h + 2 g d) + h^2 + s h + 3 h f) + V h), "
                      "causal attention, V = 128,256; Model TFLOP/s per GPU = that count over the step time and the "
                      "GPUs",
        notes=_LLAMA + " FP8 ('FP8' rows: Transformer Engine's current scaling, 'FP8-CS' in the 25.11 table) for "
              "the linear layers. FSDP 0: distributed data parallel. The benchmark's recipe, "
              "src/megatron/bridge/perf_recipes/llama/h100/llama3.py at the commit, "
              "llama3_70b_pretrain_64gpu_h100_fp8cs_config (lines 159-200: TP 4, PP 8, VP 5, GBS 256, MBS 1, this "
              "row's): 'sequence_parallel = True' (line 171) and Transformer Engine's userbuffers overlap of the "
              "tensor-parallel collectives ('tp_comm_overlap_cfg = userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192', "
              "line 175; 'tp_comm_overlap=True' in the recipe it starts from, src/megatron/bridge/recipes/llama/h100/"
              "llama3.py, llama3_70b_pretrain_32gpu_h100_bf16_config, lines 796-797); the pipeline's send/recv overlapped with compute (src/megatron/bridge/training/"
              "comm_overlap.py lines 455-457: 'if vp_size > 1: overlap_p2p_comm = True'). Assumed, not in the "
              "table: no activation recomputation, 8 GPUs per node.",
        confidence="medium",
    ),
    dict(name="megatron-bridge2026-llama3-70b-64", published=1621, also=(("TFLOP/s per device", 728),),
         global_batch=256, micro_batch=1, sequence=8192, tensor=4, pipeline=8, chunks=5, data=2,
         sequence_parallel=True, overlap_tensor=True, overlap_p2p=True, **_LLAMA3_70B),
)
"""Llama 3 70B on 64 H100s in FP8 with interleaved pipelining (Megatron Bridge, NeMo 26.02)."""

# --- H100, BF16 and FP8: MosaicML LLM Foundry's MPT benchmarks ----------------------------------------

_FOUNDRY_COMMIT = "5e85bd62d4ec9e13353ca95877477602ab538e5b"  # 2024-01-06: the large-scale H100 table added

_FOUNDRY = dict(
    paper="llm-foundry2024", framework="llm-foundry", device="h100", node_gpus=8, quantity="tokens/s per device",
    source="MosaicML LLM Foundry, scripts/train/benchmarking/README.md, 'H100 80GB BF16 (Large Scale, >= 128 "
           "GPUs)', 'H100 80GB BF16' and 'H100 80GB FP8'",
    address=f"https://github.com/mosaicml/llm-foundry/blob/{_FOUNDRY_COMMIT}/scripts/train/benchmarking/README.md",
    verified_how=f"the README in the fetched mosaicml/llm-foundry repository at {_FOUNDRY_COMMIT[:10]} (the small-"
                 "scale tables since b2a43a14, 2023-10-19; the same rows in the stored copy at c90b9b31): each row's "
                 "GPUs, sequence, MicroBatchSize, GradAccum, GlobalBatchSize, Throughput (T/s/GPU), MFU, HFU, Model "
                 "TFLOP, precision, sharding strategy, activation checkpointing and NumParams; the models from "
                 "scripts/train/yamls/pretrain/mpt-*.yaml and MPTConfig's defaults at that commit (learned "
                 "positions, biases, tied embeddings), which give each row's NumParams exactly; sweep.py (the "
                 "large-scale rows' arguments)",
    vocabulary=50368, tied=True,
    flops_formula="the README's: per token 6 N + 12 L d s (N every parameter, attention 2 x 2 L d s^2 per "
                  "sequence forward, x 3), non-causal; MFU over 989 TFLOP/s (BF16) or 1,979 (FP8 rows); HFU 8 N + "
                  "16 L d s where activations are checkpointed; 'Model TFLOP' is MFU x the peak per GPU",
    notes="MPT layers as the yamls and MPTConfig's defaults set them: LayerNorm (low_precision_layernorm), GeLU "
          "feed-forward of 4 d_model, learned absolute positions, biases, the embedding shared with the output "
          "layer, vocabulary 50,368; FlashAttention or the Triton kernel (attn_impl). PyTorch FSDP over every GPU "
          "(FULL_SHARD: parameters, gradients and optimizer states; SHARD_GRAD_OP: gradients and optimizer "
          "states), bfloat16 autocast ('amp_bf16'; 'amp_fp8': Transformer Engine's FP8 linear layers); activation "
          "checkpointing of every block where the table says True. Assumed: 8 GPUs per node; "
          "the H100 tables name no interconnect (the A100 ones 1,600 Gb/s RoCE per node).",
    node_links="MosaicML platform H100 80GB nodes; the interconnect is not published for the H100 tables",
    confidence="medium",
)


_MPT = {size: dict(hidden=d_model, heads=heads, layers=layers, ffn=4 * d_model) for size, d_model, heads, layers in (
    ("1b", 2048, 16, 24), ("3b", 2560, 20, 32), ("7b", 4096, 32, 32), ("13b", 5120, 40, 40), ("30b", 7168, 56, 48),
    ("70b", 8192, 64, 80))}
"""mpt-*.yaml at the commit: d_model, n_heads, n_layers; expansion_ratio 4."""


def _foundry(size: str, sequence: int, gpus: int, micro: int, accum: int, batch: int, tokens: float, mfu: float,
             hfu: float, tflops: float, dtype: str, shard: str, checkpointing: bool) -> dict:
    if batch != gpus * micro * accum:
        raise ValueError(f"MPT {size} on {gpus} GPUs: GlobalBatchSize {batch} is not GPUs x MicroBatchSize x GradAccum "
                         f"({gpus} x {micro} x {accum}); fix the row")
    return dict(name=f"llm-foundry2024-mpt-{size}-{sequence // 1024}k-{gpus}" + ("-fp8" if dtype == "float8" else ""),
                devices=gpus, data=gpus, fsdp=gpus, zero_stage={"FULL_SHARD": 3, "SHARD_GRAD_OP": 2}[shard],
                sequence=sequence, micro_batch=micro, global_batch=batch, published=tokens, dtype=dtype,
                recompute="full" if checkpointing else "none",
                also=(("MFU", mfu), ("HFU", hfu), ("TFLOP/s per device", tflops)), **_MPT[size])


_RUNS_FOUNDRY = runs_of(
    _FOUNDRY,
    # size, sequence, GPUs, MicroBatchSize, GradAccum, GlobalBatchSize, T/s/GPU, MFU, HFU, Model TFLOP, precision,
    # sharding strategy, activation checkpointing
    _foundry("70b", 2048, 512, 8, 1, 4096, 1007, 0.4125, 0.550, 408, "bfloat16", "FULL_SHARD", True),
    _foundry("70b", 2048, 256, 8, 1, 2048, 1035, 0.4242, 0.5656, 419, "bfloat16", "FULL_SHARD", True),
    _foundry("70b", 2048, 128, 8, 1, 1024, 1058, 0.4336, 0.5781, 428, "bfloat16", "FULL_SHARD", True),
    _foundry("70b", 2048, 64, 8, 4, 2048, 1039, 0.4257, 0.5676, 421, "bfloat16", "FULL_SHARD", True),
    _foundry("30b", 2048, 32, 14, 3, 1344, 2308, 0.4392, 0.5857, 434, "bfloat16", "FULL_SHARD", True),
    _foundry("13b", 2048, 512, 16, 1, 8192, 4952, 0.4112, 0.5483, 406, "bfloat16", "FULL_SHARD", True),
    _foundry("13b", 2048, 128, 16, 1, 2048, 5080, 0.4218, 0.5624, 417, "bfloat16", "FULL_SHARD", True),
    _foundry("13b", 2048, 8, 2, 1, 16, 4792, 0.3979, 0.3979, 393, "bfloat16", "FULL_SHARD", False),
    _foundry("7b", 2048, 512, 6, 1, 3072, 9670, 0.422, 0.422, 417, "bfloat16", "FULL_SHARD", False),
    _foundry("7b", 2048, 128, 6, 1, 768, 10475, 0.4571, 0.4571, 452, "bfloat16", "FULL_SHARD", False),
    _foundry("7b", 2048, 8, 6, 1, 48, 10643, 0.4644, 0.4644, 459, "bfloat16", "FULL_SHARD", False),
    _foundry("7b", 8192, 8, 8, 2, 128, 6935, 0.3714, 0.4952, 367, "bfloat16", "FULL_SHARD", True),
    _foundry("3b", 2048, 512, 8, 1, 4096, 21664, 0.3924, 0.3924, 388, "bfloat16", "SHARD_GRAD_OP", False),
    _foundry("1b", 2048, 128, 12, 1, 1536, 44123, 0.406, 0.406, 401, "bfloat16", "SHARD_GRAD_OP", False),
    _foundry("1b", 2048, 64, 20, 1, 1280, 44402, 0.4085, 0.4085, 404, "bfloat16", "FULL_SHARD", False),
    _foundry("3b", 2048, 8, 10, 6, 480, 30586, 0.277, 0.277, 548, "float8", "FULL_SHARD", False),
    _foundry("1b", 8192, 8, 2, 4, 64, 32010, 0.2071, 0.2071, 409, "float8", "FULL_SHARD", False),
)
"""MPT 1B to 70B with PyTorch FSDP on 8 to 512 H100s (LLM Foundry's
benchmark tables): weak and strong scaling of FSDP across nodes, BF16 and
two FP8 rows."""

# --- H200, FP8: torchtitan ------------------------------------------------------------------------------

_TITAN_COMMIT = "cbccb387871a5e1f522c1e222c51ab88b03c0392"  # 2025-07-11 "[benchmark] add h200 bench"

_RUNS_TORCHTITAN_H200 = runs_of(
    dict(
        paper="torchtitan2025-h200", framework="torchtitan",
        source="PyTorch torchtitan, benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (Trainy on WhiteFiber, "
               "June 2025)",
        address=f"https://github.com/pytorch/torchtitan/blob/{_TITAN_COMMIT}/benchmarks/llama3-8b_h200_202506_"
                "trainy-whitefiber.md",
        verified_how="the benchmark page in the fetched pytorch/torchtitan repository: '| 4 | 10938 | 47.96 |', '| 8 "
                     "| 10753 | 46.97 |' (TPS/GPU at the 100th iteration), the command (llama3_8b.toml, "
                     "local_batch_size 2, compile, float8 linear converter with float8 all-gather for FSDP) and "
                     "torchtitan e7c0cae; at that commit llama3_8b.toml (seq_len 8192, data_parallel_shard_degree "
                     "-1, activation_checkpoint selective, 'op') and models/llama3/__init__.py's '8B' (dim 4096, 32 "
                     "layers, 32 heads, 8 key/value heads, ffn_dim_multiplier 1.3, multiple_of 1024: 14,336)",
        device="h200", dtype="float8", recompute="selective", node_gpus=8, quantity="tokens/s per device",
        node_links="8 H200 per host on NVLink; hosts on an RDMA fabric of 400 Gb/s (ConnectX-7) per GPU",
        flops_formula="none published (TPS/GPU: tokens per second per GPU, read at the 100th iteration)",
        notes="Llama 3.1 8B (torchtitan's llama3 '8B': RMSNorm, RoPE, SwiGLU, grouped-query attention with 8 "
              "key/value heads, untied embeddings, vocabulary 128,256 from the Llama 3 tokenizer). FSDP2 over "
              "every GPU (data_parallel_shard_degree -1), torch.compile, torchao's float8 training of the linear "
              "layers (dynamic tensorwise scaling; the output layer left in bfloat16 by the toml's filter_fqns), "
              "float8 all-gather of the weights, per-op selective activation checkpointing (models/llama3/"
              "parallelize_llama.py at e7c0cae, lines 218-266: every op's output recomputed but the matrix "
              "products', flash attention's and the amax reductions', and every second matrix product recomputed "
              "too; the priced 'selective', dots_with_no_batch_dims_saveable, recomputes none of the products: "
              "about a sixth of the linear layers' FLOP fewer than the run). Assumed: bfloat16 "
              "elsewhere (FSDP2's mixed precision), sequence 8,192 as the toml at e7c0cae sets it (the command "
              "does not override it).",
        confidence="medium", micro_batch=2, sequence=8192, zero_stage=3, tied=False, **_LLAMA3_8B,
    ),
    *(dict(name=f"torchtitan2025-llama3.1-8b-h200-{gpus}", devices=gpus, data=gpus, fsdp=gpus, global_batch=2 * gpus,
           published=tps) for gpus, tps in ((32, 10938), (64, 10753))),
)
"""Llama 3.1 8B with FSDP2 and float8 on 4 and 8 nodes of 8 H200s (torchtitan)."""

# --- TPU v6e: MaxText's Trillium recipes ---------------------------------------------------------------

_RECIPES = "https://github.com/AI-Hypercomputer/tpu-recipes/blob/main/training/trillium"

_TRILLIUM = dict(
    paper="maxtext-trillium", framework="maxtext", device="tpu-v6e", devices=256, data=256, fsdp=256,
    zero_stage=3, dtype="bfloat16", node_gpus=4, quantity="tokens/s per device", tied=False, gated=True,
    node_links="v6e-256: 256 chips, a 16 x 16 2D torus on ICI (one slice)",
    flops_formula="MaxText's calculate_tflops_training_per_device at the recipes' tags (before PR #1988, July "
                  "2025): per token 6 x the weights of the matrix products (the output layer included, the input "
                  "embedding's lookup not) plus 12 L s H Q, non-causal attention; TFLOP/s per device and MFU over "
                  "918 TFLOP/s",
    notes="MaxText's model configs (configs/models/*.yml at the recipe's tag); synthetic data; FSDP over every chip "
          "(ici_fsdp_parallelism -1); the layers in one scan (base.yml scan_layers: True). Assumed: 4 chips per "
          "host, bfloat16 activations (base.yml's float32 weights).",
    confidence="medium",
)

_LLAMA31 = ("Llama 3.1 (decoder_block llama2: RMSNorm, RoPE, SwiGLU, grouped-query attention with 8 key/value heads, "
            "untied embeddings, vocabulary 128,256). remat_policy 'custom': the decoder layer's input and the "
            "{saved} projections offloaded to host memory, the rest recomputed (kept_tensors; MaxText's "
            "pyconfig.validate_and_assign_remat_tensors and decoders.py's get_remat_policy, lines 284-290 at "
            "tpu-recipes-v0.1.4: jax.checkpoint_policies.save_and_offload_only_these_names, offload_dst "
            "'pinned_host'; base.yml lines 219-231: every named tensor not listed 'remat').")


def _offloaded(*names: str) -> tuple[tuple[str, str], ...]:
    """MaxText's ``remat_policy: custom`` with each of ``names`` set to ``offload`` (the rest ``remat``)."""
    return tuple((name, "offload") for name in names)

_RUNS_TRILLIUM = runs_of(
    _TRILLIUM,
    dict(name="maxtext-llama3.1-8b-v6e-256", published=7207.336,
         also=(("TFLOP/s per device", 417.397), ("seconds per step", 4.546), ("MFU", 0.4546)),
         global_batch=1024, micro_batch=4, sequence=8192, recompute="selective", **_LLAMA3_8B,
         # benchmarks/maxtext_trillium_model_configs.py at tpu-recipes-v0.1.4, lines 815-830
         kept_tensors=_offloaded("decoder_layer_input", "out_proj", "query_proj", "key_proj", "value_proj"),
         source="AI-Hypercomputer tpu-recipes, training/trillium/Llama3.1-8B-MaxText/v6e-256/README.md (MaxText "
                "tpu-recipes-v0.1.4, llama3_1_8b_8192); MaxText docs/reference/tiering.md (45.46%)",
         address=f"{_RECIPES}/Llama3.1-8B-MaxText/v6e-256/README.md",
         verified_how="the stored recipe: 'completed step: 14, seconds: 4.546, TFLOP/s/device: 417.397, "
                      "Tokens/s/device: 7207.336, total_weights: 8388608' and the workload's tuning_params "
                      "(per_device_batch_size 4, ici_fsdp_parallelism -1, remat custom, max_target_length 8192); "
                      "the model in the fetched MaxText repository's configs/models/llama3.1-8b.yml at tag "
                      "tpu-recipes-v0.1.4; tiering.md at commit f588ed57: 'Llama 3.1 8B | 256 Chips, BF16, "
                      "SL=8192 | 45.46% | 7,207'",
         notes=_TRILLIUM["notes"] + " " + _LLAMA31.format(saved="query, key, value and output")),
    dict(name="maxtext-llama3.1-70b-v6e-256", published=960.248,
         also=(("TFLOP/s per device", 462.297), ("seconds per step", 42.656), ("MFU", 0.5033)),
         global_batch=1280, micro_batch=5, sequence=8192, recompute="selective", **_LLAMA3_70B,
         # benchmarks/maxtext_trillium_model_configs.py at tpu-recipes-v0.1.4, lines 965-979 (out_proj recomputed)
         kept_tensors=_offloaded("decoder_layer_input", "query_proj", "key_proj", "value_proj"),
         source="AI-Hypercomputer tpu-recipes, training/trillium/Llama3.1-70B-MaxText/v6e-256/README.md (MaxText "
                "tpu-recipes-v0.1.4, llama3_1_70b_8192); MaxText docs/reference/tiering.md (50.33%)",
         address=f"{_RECIPES}/Llama3.1-70B-MaxText/v6e-256/README.md",
         verified_how="the stored recipe: 'completed step: 14, seconds: 42.656, TFLOP/s/device: 462.297, "
                      "Tokens/s/device: 960.248, total_weights: 10485760' and the workload's tuning_params "
                      "(per_device_batch_size 5, ici_fsdp_parallelism -1, remat custom, max_target_length 8192), "
                      "the same in the fetched MaxText repository's benchmarks/maxtext_trillium_model_configs.py at "
                      "92e59fdf (the tiering page's link); configs/models/llama3.1-70b.yml at tpu-recipes-v0.1.4",
         notes=_TRILLIUM["notes"] + " " + _LLAMA31.format(saved="query, key and value")),
    dict(name="maxtext-gpt3-175b-v6e-256", published=357.580,
         also=(("TFLOP/s per device", 384.891), ("seconds per step", 17.182)),
         global_batch=768, micro_batch=3, sequence=2048, recompute="full", layers=96, hidden=12288, heads=96,
         ffn=49152, vocabulary=50304, tied=True, gated=False,
         source="AI-Hypercomputer tpu-recipes, training/trillium/GPT3-175B-MaxText/bf16/README.md (MaxText "
                "tpu-recipes-v0.1.2, gpt_3_175b_bf16)",
         address=f"{_RECIPES}/GPT3-175B-MaxText/bf16/README.md",
         verified_how="the stored recipe: 'completed step: 15, seconds: 17.182, TFLOP/s/device: 384.891, "
                      "Tokens/s/device: 357.580, total_weights: 1572864' and the workload's tuning_params "
                      "(per_device_batch_size 3, ici_fsdp_parallelism -1, remat_policy full); configs/models/"
                      "gpt3-175b.yml and base.yml (max_target_length 2048) at tag tpu-recipes-v0.1.2 in the fetched "
                      "MaxText repository",
         notes=_TRILLIUM["notes"] + " GPT-3 175B as MaxText's gpt3 decoder block: LayerNorm, GeLU, learned "
                                    "positions, fused QKV, the embedding shared with the output layer, vocabulary "
                                    "50,304; full recomputation."),
    dict(name="maxtext-mixtral-8x7b-v6e-256", published=3645.203,
         also=(("TFLOP/s per device", 302.311), ("seconds per step", 13.484)),
         global_batch=3072, micro_batch=12, sequence=4096, recompute="selective", layers=32, hidden=4096, heads=32,
         kv_heads=8, ffn=14336, vocabulary=32000, experts=8, experts_per_token=2, capacity_factor=1.25,
         # benchmarks/maxtext_trillium_model_configs.py at tpu-recipes-v0.1.2, from line 1473
         kept_tensors=_offloaded("decoder_layer_input", "out_proj", "query_proj", "key_proj", "value_proj"),
         source="AI-Hypercomputer tpu-recipes, training/trillium/Mixtral-8x7B-MaxText/README.md (MaxText "
                "tpu-recipes-v0.1.2, mixtral_8x7b_dropped)",
         address=f"{_RECIPES}/Mixtral-8x7B-MaxText/README.md",
         verified_how="the stored recipe: 'completed step: 11, seconds: 13.484, TFLOP/s/device: 302.311, "
                      "Tokens/s/device: 3645.203, total_weights: 12582912' and the workload's tuning_params "
                      "(per_device_batch_size 12, ici_fsdp_parallelism -1, max_target_length 4096, remat custom, "
                      "megablox False, sparse_matmul False, capacity_factor 1.25); configs/models/mixtral-8x7b.yml at "
                      "tag tpu-recipes-v0.1.2 in the fetched MaxText repository (8 experts, 2 per token)",
         notes=_TRILLIUM["notes"] + " Mixtral 8x7B (decoder_block mixtral: RMSNorm, RoPE, grouped-query attention "
                                    "with 8 key/value heads, untied embeddings, vocabulary 32,000; each layer's "
                                    "feed-forward 8 SwiGLU experts of 14,336, 2 per token); the experts computed "
                                    "dense over capacity slots (megablox and sparse_matmul off), tokens over 1.25 "
                                    "times an even share dropped; the experts' weights sharded by FSDP (no expert "
                                    "parallelism set). " + _LLAMA31.split(". ", 1)[1].format(
                                        saved="query, key, value and output")
               + " Not priced: the recipe's XLA flags (xla_flags lines 1501-1505: MOE_VMEM_LIMIT_FLAG, "
                 "CF_FOR_ALL_GATHER and DATA_PARALLEL_OVERLAP, benchmarks/xla_flags_library.py lines 36, 43-49 "
                 "and 142-145, LIBTPU_INIT_ARGS as benchmarks/maxtext_xpk_runner.py line 395 sets them): libtpu "
                 "0.0.52 refuses them together on a v6e ('FAILED_PRECONDITION: Continuation fusion for AllGather "
                 "is enabled on platform ghostlite ... not supported/recommended on platforms other than TPU "
                 "v5e'), and takes each alone; its splash blocks of queries of 2,048 (sa_block_q, sa_block_q_dkv, "
                 "sa_block_q_dq; the zoo's 512) and use_iota_embed (the embedding a one-hot product). With the "
                 "flags libtpu takes, or either of the two, its grad program needs the same 31.31 GiB (checked "
                 "11-29): at its peak libtpu 0.0.52 relays out the two offloaded (B, T, d) stacks "
                 "(decoder_layer_input's and out_proj's, 32 x 12 x 4,096 x 4,096 in bfloat16, 12 GiB each) "
                 "between the forward and backward loops, each copied from the host's memory into the HBM, "
                 "transposed there into another 12 GiB and copied back."),
)
"""Llama 3.1 8B and 70B, GPT-3 175B and Mixtral 8x7B on one v6e-256 slice
(MaxText's Trillium recipes)."""

RUNS_TODAY: tuple[PublishedRun, ...] = (
    _RUNS_NEMO + _RUNS_BRIDGE + _RUNS_FOUNDRY + _RUNS_TORCHTITAN_H200 + _RUNS_TRILLIUM
)
"""The runs of this module, in `xla_cost.study.published_runs.PUBLISHED_RUNS`."""
