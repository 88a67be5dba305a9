"""Published training runs, each with its exact figure and the configuration it ran.

Data for holding the time model out of sample (issue 32): every `PublishedRun`
is one figure a paper, a report or a maintained repository published (TFLOP/s
per device, MFU, tokens/s, seconds per step, a scaling efficiency, a speed-up,
days), the model, the layout over devices and the machine it ran on, where the
figure was read, and what the source leaves unsaid and is assumed here. The
`paper` key groups the runs of one publication, for leave-one-paper-out
validation. These runs are new beside `xla_cost.study.published` (Goyal et
al. 2017, Jia et al. 2018, Narayanan et al. 2021 Table 1 and GPT-3's 34 days).

Conventions. ``data`` counts every replica of the batch, sharded or not
(``tensor * pipeline * data * context == devices``); ``fsdp`` is the group,
within ``data``, that shards the model states (a ZeRO stage or FSDP), 1 if
none. A field the source does not give and no assumption fills is None.
Figures were read through stored copies of the sources or the publishing
repository fetched at a commit (the address is the canonical one;
``verified_how`` says what was read). The record's type and the names its
fields take are `xla_cost.study.published_record`'s; the runs on today's
machines (H100 and H200 in BF16 and FP8, TPU v6e) are
`xla_cost.study.published_runs_today`'s.

Left out, and why: Gopher's 32.5% MFU (4,096 TPU v3 chips; the v3 is not in
the device registry); GPT-3's 21.3% MFU on V100s (no GPU count or layout
published); ZeRO's 15 PFLOP/s (the per-configuration figures are bars of a
plot); MaxText's TPU v4 table (two versions of its README publish different
figures for one configuration: 165 and 156 TFLOP/s per chip); MaxText's
top-level README row '1024B | v5p-2048 | 249 | 64.05%' (249 TFLOP/s is 54% of
459: the configs README's 254 and 55.35% are the run's); torchtitan's H100
tables (Grand Teton's 96 GB HBM2e H100 at 500 W, whose peak the page itself
says is unknown, 'between SXM and NVL'); MaxText's Trillium Llama 2 70B recipe
(its log's total_weights, 2,097,152 tokens, is 2 sequences per chip where its
configuration says per_device_batch_size 3) and Llama 3.1 405B tiering row
('256 Chips', its linked configuration two slices: dcn_fsdp_parallelism 2);
MaxText's v5p Llama 2 70B tiering row ('512 Chips', its linked configuration
named for a v5p-128; tokens/s only 'approx'); Megatron Bridge's H100 Llama 3.1
405B rows (126 layers over 8 x 8 interleaved stages: the partition is not in
the table) and its MoE rows (GPT-OSS 120B: sliding-window attention on
alternate layers and attention sinks, not fields of the record; DeepSeek-V3:
latent attention and multi-token prediction, likewise; Qwen3 30B-A3B on 16
H100s: 5,113 tokens/s per GPU in 26.02, 9,058 in 26.02.01 with the same
configuration, and expert parallelism is not a field); NeMo's BF16 H100 tables (not found in a stored source:
NeMo 24.07's table is FP8 throughout, Megatron Bridge's dense H100 rows are
FP8); MLPerf Training's GPT-3 175B results (minutes to a target quality; the
steps taken are not in the results table), whose per-GPU throughput NeMo's
512-GPU row gives; MegaScale's own Table 2 rows (not read again here).
"""

from __future__ import annotations

from xla_cost.study.published_record import (
    CONFIDENCE, DTYPES, FRAMEWORKS, QUANTITIES, RECOMPUTE, SCALED_BY, Framework, PublishedRun, framework, runs_of,
)
from xla_cost.study.published_runs_today import RUNS_TODAY

__all__ = ["CONFIDENCE", "DTYPES", "FRAMEWORKS", "QUANTITIES", "RECOMPUTE", "SCALED_BY", "Framework", "PublishedRun",
           "PUBLISHED_RUNS", "framework", "runs_of"]


# --- V100: Shoeybi et al. 2019, Megatron-LM -------------------------------------------------------

_MEGATRON_2019 = dict(
    paper="shoeybi2019", framework="megatron-2019",
    source="Shoeybi et al. 2019, Megatron-LM: Training Multi-Billion Parameter Language Models Using Model "
           "Parallelism, arXiv:1909.08053",
    address="https://arxiv.org/abs/1909.08053",
    verified_how="stored full text of the paper (a translation of every section, tables verbatim; the "
                 "English abstract and §5.1 in two further stored copies): §4.2, §5, §5.1, Tables 1, 2, 7 and 8",
    device="v100-32gb", vocabulary=51200, sequence=1024, dtype="float16", recompute="full",
    node_gpus=16,
    node_links="DGX-2H: 16 V100 SXM3 32GB on NVSwitch, 300 GB/s between GPUs; 8 InfiniBand adapters per "
               "server, 100 GB/s between servers (§5)",
    flops_formula="not stated; 39 TFLOP/s is '30% of the theoretical peak FLOPS for a single GPU in a DGX-2H "
                  "server'; a weak-scaling efficiency is FLOP/s per GPU over the 1-GPU baseline's (§5.1.1)",
    notes="GPT-2 layers (learned positions, GeLU, pre-LayerNorm); mixed precision with dynamic loss scaling, "
          "Adam, activation checkpointing after every layer (§4.2). Vocabulary padded from 50,257 to 51,200 "
          "(§5.1). Assumed: sequence 1,024 in the scaling runs (§4.2's, §5.1 names none), no gradient "
          "accumulation (each replica's batch one micro-batch). The DGX-2H's V100 SXM3 runs at a higher "
          "clock than the registry's SXM2 (125 TFLOP/s float16).",
)

_SOFTWARE_2019 = (
    " The paper's figures ran Megatron-LM of 2019 (github.com/NVIDIA/Megatron-LM at a0368ddf, 2019-08-12): "
    "attention scores scaled, masked and dropped out one elementwise kernel at a time on the s x s scores "
    "(mpu/transformer.py lines 119-130: 'attention_scores / math.sqrt(...)', 'torch.mul(attention_scores, "
    "ltor_mask) - 10000.0 * (1.0 - ltor_mask)', softmax, dropout 0.1: arguments.py lines 33 and 46) and "
    "the fp16 optimizer's gradients scaled and copied to the master weights tensor by tensor (fp16/fp16.py and "
    "loss_scaler.py: a Python loop over the parameters). Release v1.0 (2020-04-21) replaced these "
    "(commits 99410264 'added multi-tensor-apply to fp16', 3ea5491e 'added faster L2 grad clipping and new "
    "torch gelu', 8ceed7c7 'changed gpt2 masking to binary and masked_fill', 2020-04-14), and NVIDIA's blog "
    "of v1.0 gives its 1.2B baseline (1,920 x 24: run megatron2019v1-1.2b-1) 62.4 TFLOP/s, 'a 60% improvement "
    "over our previously 39 teraFLOPs published number'. Priced as that code ran (framework 'megatron-2019'): its "
    "forward and gradient programs compiled with XLA's fusion passes off, one kernel per call of the model's "
    "code (broadcasts and reshapes, which PyTorch takes as views, left out; a softmax, a LayerNorm, a GeLU "
    "one kernel each, as PyTorch's softmax, apex's FusedLayerNorm and the scripted gelu were), the update "
    "fused (apex's FusedAdam, one kernel per tensor), the data-parallel gradients all-reduced in float16 "
    "after the backward pass, each layer's two row-parallel all-reduces run again by the checkpoint's rerun "
    "of its forward (mpu/random.py lines 190-218: six float16 all-reduces of the activations a layer, where "
    "XLA's recomputation keeps five), every collective at the measured bus bandwidth of NCCL on a DGX-2 (12 "
    "V100-SXM3, nccl-tests of 2019: github.com/wohlbier/nccl-tests at 33ee81a3). Not priced: the dropouts "
    "(the zoo's GPT has none: three kernels a layer on the scores and the hidden states), the mask as a "
    "multiplication and a subtraction (the zoo selects: one pass "
    "over the scores), the fp16 optimizer's per-tensor copies, overflow check (a host synchronization per "
    "tensor, fp16/loss_scaler.py line 132) and clipping: fewer bytes priced than ran; and the zoo's softmax "
    "in float32 where the 2019 code kept float16: more.")

_TABLE1 = {  # Table 1: hidden, heads, layers by model-parallel GPUs (hidden per head 96)
    1: dict(hidden=1536, heads=16, layers=40, ffn=6144),
    2: dict(hidden=1920, heads=20, layers=54, ffn=7680),
    4: dict(hidden=2304, heads=24, layers=64, ffn=9216),
    8: dict(hidden=3072, heads=32, layers=72, ffn=12288),
}

_FIGURE5 = ("; Figure 5's bar labels (100, 95, 82, 77% with model parallelism, 96, 83, 79, 74% with 64-way data "
            "parallelism) as two stored paper notes transcribe them; the text states the 77% and the 74%")


def _megatron2019_weak(tensor: int, size: str, data: int, efficiency: float, text: bool) -> dict:
    return dict(name=f"megatron2019-{size}-{tensor * data}", devices=tensor * data, quantity="scaling efficiency",
                published=efficiency, relative_to="megatron2019-1.2b-1", tensor=tensor, data=data,
                global_batch=8 * data, micro_batch=8, **_TABLE1[tensor],
                verified_how=_MEGATRON_2019["verified_how"] + _FIGURE5,
                confidence="high" if text else "medium",
                source=_MEGATRON_2019["source"] + ", §5.1.1, Figure 5 (Table 1's configuration)")


_RUNS_V100 = runs_of(
    {**_MEGATRON_2019, "notes": _MEGATRON_2019["notes"] + _SOFTWARE_2019},
    dict(name="megatron2019-1.2b-1", devices=1, quantity="TFLOP/s per device", published=39.0,
         also=(("MFU", 0.30),), global_batch=8, micro_batch=8, **_TABLE1[1],
         source=_MEGATRON_2019["source"] + ", abstract and §5.1.1 (Table 1's 1.2B on one GPU, batch 8)"),
    _megatron2019_weak(2, "2.5b", 1, 0.95, False),
    _megatron2019_weak(4, "4.2b", 1, 0.82, False),
    _megatron2019_weak(8, "8.3b", 1, 0.77, True),
    _megatron2019_weak(1, "1.2b", 64, 0.96, False),
    _megatron2019_weak(2, "2.5b", 64, 0.83, False),
    _megatron2019_weak(4, "4.2b", 64, 0.79, False),
    {**_megatron2019_weak(8, "8.3b", 64, 0.74, True),
     "notes": _MEGATRON_2019["notes"] + " The abstract gives this run as 15.1 PFLOP/s, '76% scaling "
              "efficiency' (15.1 P / (512 x 39 T) = 0.756); Figure 5 and §5.1.1 give 74%." + _SOFTWARE_2019},
    *(dict(name=f"megatron2019-8.3b-8-{heads}heads", devices=8, quantity="scaling efficiency", published=eff,
           relative_to="megatron2019-1.2b-1", tensor=8, global_batch=8, micro_batch=8, hidden=3072, heads=heads,
           layers=72, ffn=12288, source=_MEGATRON_2019["source"] + ", Appendix D.1, Table 7")
      for heads, eff in ((16, 0.82), (24, 0.80))),
    *(dict(name=f"megatron2019-1.2b-{gpus}-strong", devices=gpus, quantity="speed-up", published=speedup,
           relative_to="megatron2019-1.2b-1", tensor=gpus, global_batch=8, micro_batch=8, **_TABLE1[1],
           source=_MEGATRON_2019["source"] + ", Appendix D.2, Table 8 (1.2B, batch 8, model parallel)")
      for gpus, speedup in ((2, 1.64), (4, 2.34), (8, 2.98))),
    *(dict(name=f"megatron2019-gpt2-{size}-{gpus}", devices=gpus, quantity="days", published=days, steps=68507,
           tensor=gpus // 64, data=64, global_batch=512, micro_batch=8, hidden=hidden, heads=heads, layers=layers,
           ffn=4 * hidden,
           source=_MEGATRON_2019["source"] + ", §5.2, Table 2 (time per epoch: 68,507 iterations of 512 x 1,024 "
                                             "tokens, §4.2)")
      for size, layers, hidden, heads, gpus, days in (("355m", 24, 1024, 16, 64, 0.86),
                                                      ("2.5b", 54, 1920, 20, 128, 2.27),
                                                      ("8.3b", 72, 3072, 24, 512, 2.10))),
)
"""Megatron-LM 2019 on DGX-2H V100s: the 1-GPU baseline, weak scaling with
model and with model+data parallelism (Figure 5), the attention heads' effect
(Table 7), strong scaling of the 1.2B model (Table 8), and the GPT-2 models'
days per epoch (Table 2)."""

_V1_CASES = {  # Megatron-LM's README cases 1B ... 8B (5281919420, images/tables.tex): hidden, heads, layers
    1: dict(hidden=1920, heads=15, layers=24, ffn=7680),
    2: dict(hidden=2304, heads=18, layers=30, ffn=9216),
    4: dict(hidden=3072, heads=24, layers=36, ffn=12288),
    8: dict(hidden=4096, heads=32, layers=42, ffn=16384),
}

_V1_BLOG = dict(
    paper="nvadlr2019", framework="megatron-v1.0",
    source="NVIDIA ADLR, MegatronLM's Supercharged V1.0 (blog), Table 1 'Weak model parallel scaling'",
    address="https://nv-adlr.github.io/MegatronLMV1",
    verified_how="the stored blog page (search tool, pages corpus): Table 1 '1.2 | 1 | 1288 | Baseline (100%)', "
                 "'2.0 | 2 | 1242 | 90.7%', '4.2 | 4 | 1357 | 86.5%', '8.7 | 8 | 1508 | 79.6%', 'We fixed the batch "
                 "size to 8', '62.4 teraFLOPs which is 48% of the theoretical peak'; the configurations from "
                 "github.com/NVIDIA/Megatron-LM at 5281919420 (2020-09-11), images/tables.tex and README.md lines 5-9",
    flops_formula="TFLOP/s: 96 B s l h^2 (1 + s/6h + V/16lh) over the iteration time gives 62.6 for the 1B case "
                  "at 1,288 ms (the blog: 62.4); weak scaling weighs each run by its parameters, (N / n t) / "
                  "(N_1 / t_1): the blog's 90.7, 86.5 and 79.6% follow from its times and the cases' parameters",
    scaled_by="parameters", confidence="medium",
    notes="GPT-2 layers (learned positions, GeLU, pre-LayerNorm), vocabulary 51,200 and sequence 1,024 ('All "
          "models use a vocabulary size of 51,200 and a sequence length of 1024', Megatron-LM README at "
          "5281919420), float16 mixed precision, Adam; model parallelism alone (batch 8 on every layout). The blog "
          "names parameters, GPUs, batch and iteration times only; the configurations are the README's cases 1B, "
          "2B, 4B, 8B of 2020-09-11 (images/tables.tex: 1920/15/24, 2304/18/30, 3072/24/36, 4096/32/42 hidden/"
          "heads/layers; 1.16, 2.03, 4.24, 8.67 billion parameters, the blog's 1.2, 2.0, 4.2, 8.7 rounded), "
          "whose parameters give the blog's three weak-scaling figures from its times (90.6, 86.5, 79.6%) and "
          "whose 1B gives its 62.4 TFLOP/s within 0.3% (Shoeybi et al.'s Table 1 1.2B, 1,536 x 40, would give "
          "67.0). That README's own DGX-2 times (1,121, 1,093, 1,238, 1,407 ms) are of later code, merged the "
          "same minute as 51a2e6b0's fused kernels (19301985, 2020-09-11), not these. Assumed: every layer's "
          "activations checkpointed (the release's example scripts pass --checkpoint-activations; the 96 B s l "
          "h^2 count includes the "
          "recomputed forward), the release's dropouts 0.1 (arguments.py lines 140-143). The blog's date is not "
          "in its stored copy; it announces release v1.0, tagged 2020-04-21 (the paper key's 2019 is kept). "
          "Priced as that code ran (framework 'megatron-v1.0'): the forward and gradient programs compiled with "
          "XLA's fusion passes off, one kernel per call of the model's code (apex's LayerNorm, torch's gelu and "
          "softmax one kernel each), the update fused (FusedAdam), each layer's row-parallel all-reduces run "
          "again by the checkpoint's rerun of its forward, every collective at NCCL's measured bus bandwidth on a "
          "DGX-2. Not priced: the dropouts (the zoo's GPT has none: three kernels a layer, on the scores and the "
          "hidden states), the query and key each scaled (two passes over b np s hn where the zoo scales the "
          "scores once), the fp16 optimizer's copies; the zoo's softmax in float32 where v1.0 kept float16: "
          "more bytes priced.",
)


def _v1_weak(gpus: int, size: str, seconds: float, efficiency: float) -> dict:
    return dict(name=f"megatron2019v1-{size}-{gpus}", devices=gpus, quantity="scaling efficiency",
                published=efficiency, also=(("seconds per step", seconds),), relative_to="megatron2019v1-1.2b-1",
                tensor=gpus, global_batch=8, micro_batch=8, **_V1_CASES[gpus])


_RUNS_V100_BLOG = runs_of(
    {**_MEGATRON_2019, **_V1_BLOG},
    dict(name="megatron2019v1-1.2b-1", devices=1, quantity="seconds per step", published=1.288,
         also=(("TFLOP/s per device", 62.4), ("MFU", 0.48)), global_batch=8, micro_batch=8, **_V1_CASES[1]),
    _v1_weak(2, "2.0b", 1.242, 0.907),
    _v1_weak(4, "4.2b", 1.357, 0.865),
    _v1_weak(8, "8.7b", 1.508, 0.796),
)
"""Megatron-LM v1.0 on a DGX-2H: the 1B case on one GPU and its weak scaling
with model parallelism to 2, 4 and 8 GPUs (the blog's Table 1)."""


# --- A100 -----------------------------------------------------------------------------------------

_SELENE = ("DGX A100: 8 A100 80GB on NVLink 3 and NVSwitch; 8 Mellanox HDR InfiniBand HCAs of 200 Gb/s per node "
           "(Korthikanti et al. 2022, §6)")

_KORTHIKANTI = dict(
    paper="korthikanti2022", framework="megatron",
    source="Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models, "
           "arXiv:2205.05198, Tables 3 and 5",
    address="https://arxiv.org/abs/2205.05198",
    verified_how="stored full text of the paper: Table 3 (configurations), Table 5 (iteration times, MFU, HFU), "
                 "§6 and §6.3 (2,240 GPUs), Appendix A (FLOP formulas); the MFU and HFU recomputed from them",
    device="a100-80gb", vocabulary=51200, sequence=2048, dtype="bfloat16", node_gpus=8, node_links=_SELENE,
    flops_formula="model FLOP per iteration 72 B L s h^2 (1 + s/6h + v/12hL) (eq. 7); hardware FLOP with "
                  "selective recomputation 72 B L s h^2 (1 + s/3h + v/12hL) (eq. 8); MFU and HFU over the "
                  "A100's peak",
    notes="GPT-3-style layers; no data parallelism except the 2,240-GPU run (§6). 'Mixed precision': the 16-bit "
          "format is not named (bfloat16 assumed; the A100's peak is 312 TFLOP/s for either). Micro-batches per "
          "step are global batch / micro batch; 'Full Recompute' runs without sequence parallelism, 'Present "
          "Work' with sequence parallelism and selective recomputation (§6.3). Selective recomputation as "
          "Megatron-LM ran it recomputes the core attention alone (megatron/model/transformer.py at d07d29df, "
          "2022-06-08, lines 356 and 366-382: checkpoint_core_attention, CoreAttention under mpu.checkpoint): "
          "priced with the zoo GPT's core_attention policy (the activations around it kept by name), not "
          "selective's dots_with_no_batch_dims_saveable, which recomputes the layer norms' outputs and, "
          "sequence-parallel, gathers them again (175B's stage: 2.66 s of tensor-parallel collectives a step "
          "against 2.24 s).",
)


def _korthikanti(size: str, layers: int, hidden: int, heads: int, pipeline: int, batch: int, micro: int,
                 full: float, present: float, mfu: float, hfu: float) -> tuple[dict, dict]:
    shape = dict(layers=layers, hidden=hidden, heads=heads, ffn=4 * hidden, devices=8 * pipeline, tensor=8,
                 pipeline=pipeline, global_batch=batch, micro_batch=micro,
                 chunks=3 if size in ("175b", "530b") else 1)
    return (dict(name=f"korthikanti2022-{size}-selective", quantity="seconds per step", published=present,
                 also=(("MFU", mfu), ("HFU", hfu)), recompute="selective", sequence_parallel=True, **shape),
            dict(name=f"korthikanti2022-{size}-full", quantity="seconds per step", published=full,
                 recompute="full", **shape))


_RUNS_KORTHIKANTI = runs_of(
    _KORTHIKANTI,
    *_korthikanti("22b", 48, 6144, 64, 1, 4, 4, 1.42, 1.10, 0.415, 0.437),
    *_korthikanti("175b", 96, 12288, 96, 8, 64, 1, 18.13, 13.75, 0.514, 0.528),
    *_korthikanti("530b", 105, 20480, 128, 35, 280, 1, 49.05, 37.83, 0.560, 0.570),
    *_korthikanti("1t", 128, 25600, 160, 64, 512, 1, 94.42, 71.49, 0.563, 0.570),
    dict(name="korthikanti2022-530b-2240", quantity="seconds per step", published=39.15, also=(("MFU", 0.542),),
         layers=105, hidden=20480, heads=128, ffn=81920, devices=2240, tensor=8, pipeline=35, data=8,
         global_batch=2240, micro_batch=1, chunks=3, recompute="selective", sequence_parallel=True,
         source=_KORTHIKANTI["source"] + ", §6.3 (8-way data parallelism, batch 280 per replica) and abstract"),
)
"""Korthikanti et al. 2022 on Selene: four models with full recomputation and
with sequence parallelism plus selective recomputation (Table 5), and the
530B model over 2,240 GPUs (§6.3)."""

_MT_NLG = dict(
    paper="smith2022", framework="deepspeed",
    source="Smith et al. 2022, Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B, arXiv:2201.11990, "
           "§2.4 and §3.2",
    address="https://arxiv.org/abs/2201.11990",
    verified_how="§2.4's figures as github.com/cli99/llm-analysis examples/megatron-turing-nlg/README.md quotes "
                 "them ('60.1, 50.2, and 44.4 seconds ... 126, 121, and 113 TFLOP/s per GPU'), and PaLM's "
                 "§4.1 (stored text: 65.43K tokens/s = 1,920 x 2,048 / 60.1 s, 30.2% MFU); the paper itself "
                 "was not read here",
    device="a100-80gb", layers=105, hidden=20480, heads=128, ffn=81920, vocabulary=50272, sequence=2048,
    global_batch=1920, micro_batch=None, tensor=8, pipeline=35, dtype="bfloat16", recompute="full",
    node_gpus=8,
    node_links="Selene's DGX A100: NVLink and NVSwitch within a node; HDR InfiniBand, full fat tree, between",
    flops_formula="not restated here; the figures agree with Narayanan et al. 2021's 96 B s l h^2 (1 + s/6h + "
                  "V/16lh), which counts the recomputed forward",
    notes="GPT-3-style layers; 8-way tensor slicing in a node, 35-way pipeline across nodes, data parallelism "
          "to thousands of GPUs (whether ZeRO shards the optimizer states over it is not read here). "
          "Assumed: bfloat16, full recomputation, the GPT-2 vocabulary of 50,272; micro-batch not published. "
          "The A100s: 80GB per the Selene descriptions; llm-analysis's README says 40GB.",
    confidence="medium",
)

_RUNS_MT_NLG = runs_of(
    _MT_NLG,
    *(dict(name=f"mtnlg2022-530b-{8 * nodes}", devices=8 * nodes, data=nodes // 35, quantity="seconds per step",
           published=seconds, also=(("TFLOP/s per device", tflops),))
      for nodes, seconds, tflops in ((280, 60.1, 126.0), (350, 50.2, 121.0), (420, 44.4, 113.0))),
)
"""MT-NLG 530B's iteration times on 280, 350 and 420 DGX A100 servers."""

_RUNS_BLOOM = runs_of(
    dict(
        paper="bigscience2022", framework="deepspeed",
        source="BigScience 2022, tr11-176B-ml training README (the run of Le Scao et al. 2022, BLOOM, "
               "arXiv:2211.05100), 'Important checkpoints': the log line of iteration 85,376",
        address="https://github.com/bigscience-workshop/bigscience/blob/master/train/tr11-176B-ml/README.md",
        verified_how="the stored README: 'elapsed time per iteration (s): 104.70 | global batch size: 2048 | ... "
                     "samples per second: 19.561 | TFLOPs: 149.77', TP=4 PP=12 DP=8 MBS=2, NHIDDEN=14336, "
                     "NLAYERS=70, NHEADS=112, SEQ_LEN=2048, bf16, ZeRO stage 1 in the BF16 optimizer, activation "
                     "checkpointing; the TFLOPs recomputed from its formula",
        device="a100-80gb", devices=384,
        node_gpus=8, node_links="Jean Zay: 8 A100 80GB per node on NVLink (4 inter-GPU links); 4 Omni-Path "
                                   "100 Gb/s links per node",
        flops_formula="hardware FLOP, recomputation included ('4*2 co-efficient'): 96 B s l h^2 (1 + s/6h + "
                      "V/16lh) per iteration, V = 250,880 (the padded embedding)",
        notes="ALiBi positions, LayerNorm after the embedding, GeLU; embeddings tied; the pipeline partitions "
              "the tied embedding as a layer: stages of 5, 6 x 10 and 5 layers. The paper (Le Scao et al. "
              "2022) and the model card round the throughput to about 150 TFLOP/s per GPU.",
    ),
    dict(name="bloom2022-176b-384", quantity="seconds per step", published=104.70,
         also=(("TFLOP/s per device", 149.77),), layers=70, hidden=14336, heads=112, ffn=57344, vocabulary=250880,
         sequence=2048, global_batch=2048, micro_batch=2, tensor=4, pipeline=12, data=8, fsdp=8, zero_stage=1,
         dtype="bfloat16", recompute="full"),
)
"""BLOOM 176B's steady state on 384 A100 80GB GPUs."""

_RUNS_OPT = runs_of(
    dict(
        paper="zhang2022", framework="metaseq",
        source="Zhang et al. 2022, OPT: Open Pre-trained Transformer Language Models, arXiv:2205.01068, §2.4 "
               "and Table 1",
        address="https://arxiv.org/abs/2205.01068",
        verified_how="stored paper text, §2.4: 'We trained OPT-175B on 992 80GB A100 GPUs, by utilizing Fully "
                     "Sharded Data Parallel with Megatron-LM Tensor Parallelism. We achieve utilization of up to "
                     "147 TFLOP/s per GPU'; 124 hosts and 8x tensor parallelism in "
                     "github.com/facebookresearch/metaseq projects/OPT/download_opt175b.md",
        device="a100-80gb", devices=992,
        node_gpus=8, node_links="not published",
        flops_formula="not published ('utilization of up to 147 TFLOP/s per GPU')",
        notes="GPT-3's 175B shape with ReLU; weights in float16, Adam state in float32 sharded across all hosts. "
              "'Up to': a best figure, not an average. Assumed: 992 sequences per step (Table 1 gives 2M "
              "tokens; 8 sequences for each of the 124 data-parallel groups), FSDP sharding the model states "
              "over the 124 groups (stage 3), full recomputation; micro-batch not published.",
        confidence="medium",
    ),
    dict(name="opt2022-175b-992", quantity="TFLOP/s per device", published=147.0, layers=96, hidden=12288,
         heads=96, ffn=49152, vocabulary=50272, sequence=2048, global_batch=992, micro_batch=None, tensor=8,
         data=124, fsdp=124, zero_stage=3, dtype="float16", recompute="full"),
)
"""OPT-175B's best throughput on 992 A100 80GB GPUs."""

_MEGASCALE = dict(
    paper="jiang2024", framework="megatron",
    source="Jiang et al. 2024, MegaScale: Scaling Large Language Model Training to More Than 10,000 GPUs, "
           "arXiv:2402.15627, Table 2 (Megatron-LM rows), Table 1, §6.1",
    address="https://arxiv.org/abs/2402.15627",
    verified_how="stored full text of the paper: Table 2's iteration times, tokens/s and MFU, Table 1 (175B: "
                 "128 heads, hidden 12,288, 96 layers, TP 8, PP 8), §6.1 (six interleaved stages, sequence 2,048, "
                 "vocabulary 64,000); the MFU recomputed from them",
    device="a100-80gb", layers=96, hidden=12288, heads=128, ffn=49152, vocabulary=64000, sequence=2048,
    micro_batch=None, tensor=8, pipeline=8, chunks=6, dtype="bfloat16", recompute="selective",
    sequence_parallel=True, node_gpus=8,
    node_links="not published for these runs (ByteDance's clusters: Broadcom Tomahawk 4 switches, 64 x 400 Gb/s "
               "ports, three-layer CLOS)",
    flops_formula="MFU: model FLOP per iteration 72 B L s h^2 (1 + s/6h + V/12hL) over 312 TFLOP/s per GPU "
                  "(it reproduces Table 2's MFU to 0.2%)",
    notes="The baseline rows: Megatron-LM (commit 285068c8) on ByteDance's cluster. The paper names only "
          "'NVIDIA Ampere GPUs'; MFU at 312 TFLOP/s implies an A100-class peak (an A800, with 400 GB/s NVLink, "
          "is possible). Assumed: bfloat16, selective recomputation with sequence parallelism (Korthikanti et al.'s "
          "pairing; §3.2 describes the tensor-parallel layer MegaScale starts from with it: 'operations like "
          "LayerNorm and Dropout are partitioned along the sequence dimension ... This necessitates all-gather "
          "and reduce-scatter operations', Figure 3a; that the baseline rows ran with it is not said), 8 GPUs per "
          "node; micro-batch not published. The baseline's attention: Megatron-LM's at 285068c8 (flash attention "
          "there only with --use-flash-attn; §3.3 names FlashAttention-2 among MegaScale's own operators): priced "
          "dense.",
    confidence="medium",
)

_RUNS_MEGASCALE = runs_of(
    _MEGASCALE,
    *(dict(name=f"megascale2024-megatron-175b-{gpus}", devices=gpus, data=gpus // 64, global_batch=batch,
           quantity="seconds per step", published=seconds, also=(("tokens/s", tokens), ("MFU", mfu)))
      for batch, gpus, seconds, tokens, mfu in (
          (768, 256, 40.0, 39.3e3, 0.530), (768, 512, 21.2, 74.1e3, 0.499), (768, 768, 15.2, 103.8e3, 0.467),
          (768, 1024, 11.9, 132.7e3, 0.447), (6144, 3072, 29.02, 433.6e3, 0.487),
          (6144, 6144, 14.78, 851.6e3, 0.478), (6144, 8192, 12.24, 1027.9e3, 0.433),
          (6144, 12288, 8.57, 1466.8e3, 0.412))),
)
"""Megatron-LM's strong scaling of a 175B model from 256 to 12,288 GPUs, the
baseline of MegaScale's Table 2."""

_TORCHTITAN = dict(
    paper="torchtitan2024", framework="torchtitan",
    source="PyTorch torchtitan, docs/performance.md, 'Llama 3 performance numbers' (FSDP2 on 64 A100 80GB)",
    address="https://github.com/pytorch/torchtitan/blob/041336434916bdc0f88c1f89fda176fd3c2092e4/docs/"
            "performance.md",
    verified_how="the stored file at that commit: '8B | 1 | selective op | 2973 | 58.2%' and '70B | 1 | full | "
                 "331 | 51.7%', local batch 1, global batch 64; the MFU recomputed from them",
    device="a100-80gb", devices=64, vocabulary=128256, sequence=8192, kv_heads=8, gated=True, tied=False,
    global_batch=64, micro_batch=1, data=64, fsdp=64, zero_stage=3, dtype="bfloat16", node_gpus=8,
    node_links="not published",
    flops_formula="per token 6N + 12 l h q t (PaLM's, Appendix B), N all parameters embeddings included, "
                  "non-causal attention; MFU over 312 TFLOP/s",
    notes="Llama 3 layers: RMSNorm, RoPE, SwiGLU (ffn is each gate's width), grouped-query attention with 8 "
          "key/value heads, untied embeddings. Sequence 8,192 (the Llama 3 default; the page says Llama 2's "
          "4,096 is half of it). Assumed: bfloat16 FSDP2 mixed precision, 8 GPUs per node. 'selective op' "
          "recomputation is torchtitan's per-op policy (torchtitan/parallelisms/parallelize_llama.py at the "
          "commit, lines 51-56): every op's output recomputed but the matrix products', of which every second "
          "('meta[mm_count_key] % 2 == 0') is recomputed too; the priced 'selective' (Korthikanti et al.'s, "
          "dots_with_no_batch_dims_saveable) recomputes none of the products, about a sixth of the linear "
          "layers' FLOP fewer than the run.",
    confidence="medium",
)

_RUNS_TORCHTITAN = runs_of(
    _TORCHTITAN,
    dict(name="torchtitan2024-llama3-8b-64", quantity="tokens/s per device", published=2973.0,
         also=(("MFU", 0.582),), layers=32, hidden=4096, heads=32, ffn=14336, recompute="selective"),
    dict(name="torchtitan2024-llama3-70b-64", quantity="tokens/s per device", published=331.0,
         also=(("MFU", 0.517),), layers=80, hidden=8192, heads=64, ffn=28672, recompute="full"),
)
"""Llama 3 8B and 70B with FSDP2 on 64 A100 80GB GPUs (torchtitan)."""


# --- H100: Dubey et al. 2024, Llama 3 --------------------------------------------------------------

_LLAMA3 = dict(
    paper="dubey2024", framework="pytorch",
    source="Dubey et al. 2024, The Llama 3 Herd of Models, arXiv:2407.21783 (v3), Table 4 and §3.3.2",
    address="https://arxiv.org/abs/2407.21783",
    verified_how="stored paper text (four copies): Table 3 (model), Table 4 (layout, TFLOPs/GPU, BF16 MFU), "
                 "§3.3.1 (servers, network), §3.3.2 (FSDP, pipeline schedule, no activation checkpointing at 8K); "
                 "Table 4's last DP is 8 in v3 and in two copies, 4 in one (only 8 multiplies out to 16,384)",
    device="h100", layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248, gated=True, tied=False,
    vocabulary=128000, micro_batch=None, tensor=8, pipeline=16, chunks=8, overlap_p2p=True, zero_stage=3,
    dtype="bfloat16", node_gpus=8,
    node_links="Grand Teton: 8 H100 80GB HBM3 (700 W) on NVLink; RoCE at 400 Gb/s per GPU, 24K-GPU Clos with "
               "1:7 oversubscription above each 3,072-GPU pod",
    flops_formula="model FLOP (MFU as Chowdhery et al. 2022 define it) over the H100's dense BF16 peak; TFLOPs/GPU "
                  "rounded to tens",
    notes="Llama 3 layers: RMSNorm, RoPE, SwiGLU (ffn is each gate's width), grouped-query attention with 8 "
          "key/value heads, untied embeddings; vocabulary 128,000 as Table 3 gives it (the released tokenizer has "
          "128,256). DP is FSDP: optimizer states and gradients sharded, parameters not resharded after the "
          "forward pass. Interleaved 1F1B with a tunable number of micro-batches, 'bubble ratio (PP - 1) / (V * "
          "M)', asynchronous point-to-point communication (§3.3.2). V = 8 chunks of one layer per stage, from "
          "§3.3.2's balancing: 'we reduce one Transformer layer each from the first and the last stages ... the "
          "first model chunk on the first stage has only the embedding, and the last model chunk on the last "
          "stage has only output projection and loss': a chunk is one layer's place, 126 layers + 2 = 128 = 16 "
          "stages x 8. The micro-batch is not published (1 sequence assumed: M = Table 4's batch size per DP "
          "group, 32 and 16). Context parallelism all-gathers K and V.",
)

_RUNS_LLAMA3 = runs_of(
    _LLAMA3,
    dict(name="llama3-405b-8192", devices=8192, data=64, fsdp=64, sequence=8192, global_batch=2048,
         quantity="TFLOP/s per device", published=430.0, also=(("MFU", 0.43),), recompute="none"),
    dict(name="llama3-405b-16384", devices=16384, data=128, fsdp=128, sequence=8192, global_batch=2048,
         quantity="TFLOP/s per device", published=400.0, also=(("MFU", 0.41),), recompute="none"),
    dict(name="llama3-405b-16384-128k", devices=16384, data=8, fsdp=8, context=16, sequence=131072,
         global_batch=128, quantity="TFLOP/s per device", published=380.0, also=(("MFU", 0.38),),
         recompute="none", confidence="medium",
         notes=_LLAMA3["notes"] + " Recomputation at 131,072 tokens is not stated (none assumed, as at 8K). Context "
               "parallelism as §3.3.2 describes it: each sequence cut into 2 x CP chunks, the i-th CP rank holding "
               "the i-th and the (2 x CP - 1 - i)-th; K and V all-gathered over the CP group, then the attention of "
               "the local Q chunk; the all-gather's latency exposed on the critical path, not overlapped as ring "
               "implementations overlap theirs (small, the paper says, as GQA's K and V are much smaller than Q): "
               "overlap_context False. Order of the dimensions [TP, CP, PP, DP]: TP 8 fills a node, so each CP "
               "group of 16 is one GPU of each of 16 nodes."),
)
"""Llama 3 405B's three pre-training layouts on 8,192 and 16,384 H100s."""


# --- TPU v4: Chowdhery et al. 2022, PaLM --------------------------------------------------------------

_PALM = dict(
    paper="chowdhery2022", framework="jax-pathways",
    source="Chowdhery et al. 2022, PaLM: Scaling Language Modeling with Pathways, arXiv:2204.02311, §4 and §4.1",
    address="https://arxiv.org/abs/2204.02311",
    verified_how="stored paper text: §2 (architecture), Table 1 (118 layers, 48 heads, d_model 18,432, 540.35B, "
                 "batch 512 to 2,048), §4 (layout, 1.95x over one pod), §4.1 and Table 3 (238.3K tokens/s, MFU); "
                 "d_ff = 4 d_model and head width 256 from a stored summary of Table 1, confirmed by the "
                 "parameter count they give (540.35B)",
    device="tpu-v4", layers=118, hidden=18432, heads=48, kv_heads=1, head_dim=256, ffn=73728, gated=True,
    vocabulary=256000, sequence=2048, micro_batch=None, tensor=12, fsdp=256, zero_stage=3, dtype="bfloat16",
    recompute="full", node_gpus=4,
    node_links="TPU v4 pods of 3,072 chips on ICI (768 hosts of 4 chips); the two pods over the datacenter "
               "network, 1.3 GB of gradients between each host pair per step (81 Tbps burst)",
    flops_formula="per token 6N + 12 L H Q T (Appendix B): non-attention matmuls plus attention, without "
                  "rematerialization; MFU over 275 TFLOP/s per chip",
    notes="Parallel attention and MLP blocks, SwiGLU, multi-query attention (one key/value head of width 256), "
          "RoPE, no biases, shared input/output embeddings. Weights all-gathered over the data axis in the "
          "forward pass; one activation per layer saved, the rest rematerialized (HFU 57.8%). Assumed: "
          "bfloat16; micro-batch not published (the batch of 2,048 at the final stage).",
)

_RUNS_PALM = runs_of(
    _PALM,
    dict(name="palm2022-540b-6144", devices=6144, data=512, global_batch=2048, quantity="tokens/s",
         published=238.3e3, also=(("MFU", 0.462), ("HFU", 0.578))),
    dict(name="palm2022-540b-two-pods", devices=6144, data=512, global_batch=2048, quantity="scaling efficiency",
         published=0.97, also=(("speed-up", 1.95),),
         relative_to="one pod: 3,072 chips, 12-way model and 256-way sharded data parallelism, half the batch",
         confidence="medium",
         notes=_PALM["notes"] + " 'About 1.95x relative to the throughput on a single pod ... 97% of the perfect "
                                "weak scaling'; which stage of the batch schedule is not said (2,048 assumed)."),
)
"""PaLM 540B on two TPU v4 pods."""


# --- TPU v5e and v5p: MaxText ------------------------------------------------------------------------

_MAXTEXT_2023 = "76bd53b0f44caf989c88189afadeb1062f9254f0"  # 2023-12-15: the v5p README and configs added

_MAXTEXT = dict(
    paper="maxtext", framework="maxtext",
    address=f"https://github.com/AI-Hypercomputer/maxtext/tree/{_MAXTEXT_2023}/MaxText/configs",
    vocabulary=32768, sequence=2048, gated=False, tied=True, head_dim=256, dtype="bfloat16", fsdp=1,
    zero_stage=3,
    flops_formula="MaxText's calculate_training_tflops (train.py at the tables' commits): per device per step "
                  "6 N B S (N every parameter, the shared embedding once) plus attention 12 H L Q S^2 B, halved "
                  "for causality from December 2023 (the v5p table's commit), not in October 2023 (the v5e "
                  "table's); MFU over the chip's bfloat16 peak",
    notes="MaxText's default decoder of 2023 (base.yml until commit 3b2ac811, 2024-02-14, 'Modify default config "
          "for good convergence', after which every model is smaller-headed and gated): base_emb_dim 2560, 8 "
          "heads of width 256, base_mlp_dim 8192 with one ReLU matrix pair (mlp_activations ['relu']), 16 "
          "layers, vocabulary 32,768, logits through the shared embedding; sizes by global_parameter_scale "
          "(pyconfig.get_individual_scales: heads and mlp_dim double at scale 2, 8, ..., emb_dim at 4, 32, "
          "..., layers at 8, 64, ...). Synthetic data. The batch is sharded over every mesh axis (data, fsdp, "
          "tensor): global batch = per_device_batch_size x chips. The tables were not measured again when "
          "the default decoder changed (the README rows are the 2023 ones to this day), so the 2023 decoder is "
          "the one they ran. Assumed: bfloat16 activations (base.yml's float32 weights).",
    confidence="medium",
)

_V5E = dict(
    device="tpu-v5e", node_gpus=4, recompute="full",
    source="MaxText, MaxText/configs/v5e/README.md (1x and 2x v5e-256) and 16b.sh / 32b.sh",
    verified_how=f"the v5e README and 16b.sh / 32b.sh at commit {_MAXTEXT_2023[:9]} (fetched repository; the "
                 "table added in October 2023, commits ebb226da and 5ebcd67f): '1x v5e-256 | 120 | 61.10% | 132 "
                 "| 66.86%', '2x v5e-256 | 117 | 59.37%'; per_device_batch_size 6 and 4, remat_policy full, "
                 "global_parameter_scale 16 and 32, max_target_length 2048; sizes from that commit's pyconfig "
                 "and base.yml",
    node_links="v5e-256: a 16 x 16 2D torus on ICI, 4 chips per host; slices joined over the datacenter network",
)

_V5P = dict(
    device="tpu-v5p", node_gpus=4,
    source="MaxText, MaxText/configs/v5p/README.md and 32b.sh ... 1024b.sh",
    verified_how=f"the v5p README and the 32b ... 1024b.sh scripts as added together at commit {_MAXTEXT_2023[:9]} "
                 "(fetched repository): '1x v5p-128 | 328 | 71.47%', '1x v5p-128 | 323 | 70.31%', '1x v5p-256 "
                 "| 315 | 68.68%', '1x v5p-512 | 316 | 68.83%', '1x v5p-1024 | 308 | 67.09%', '1x v5p-1024 | "
                 "294 | 63.99%', '1x v5p-2048 | 254 | 55.35%', '1x v5p-4096 | 297 | 64.80%'; each script's "
                 "per_device_batch_size, remat_policy, ici_fsdp_parallelism -1 and ici_tensor_parallelism; "
                 "v5p-N has N TensorCores, N/2 chips. The scripts changed later (commit e301755d, 2024-02-01: "
                 "32B per_device_batch_size 8 -> 7, 256B 2 -> 1, 512B tensor 16 -> 8) with the README unchanged",
    node_links="v5p slices: 3D tori of chips on ICI, 4 chips per host",
    # every v5p script's LIBTPU_INIT_ARGS (line 30 of 32b.sh ... 1024b.sh at 76bd53b0): XLA's asynchronous collective
    # fusion over several steps and compute overlapped with collectives on the TensorCore
    overlap_tensor=True,
    notes=_MAXTEXT["notes"] + " Every v5p script sets LIBTPU_INIT_ARGS (line 30 of 32b.sh ... 1024b.sh): "
          "--xla_tpu_enable_async_collective_fusion=true --xla_tpu_enable_async_collective_fusion_multiple_steps=true "
          "--xla_tpu_overlap_compute_collective_tc=true --xla_enable_async_all_gather=true "
          "--xla_enable_async_collective_permute=true, which MaxText's own flag library names 'Continuation Fusion "
          "(CF) for All Gather Collectives: Continuation Fusion is a form of parallelizing compute work with "
          "collectives' (benchmarks/xla_flags_library.py at tpu-recipes-v0.1.4, lines 39-47): the tensor-parallel "
          "collectives run beside the products (overlap_tensor).",
)


def _maxtext_scale(scale: int) -> dict:
    """The 2023 default decoder at a global_parameter_scale: pyconfig.get_individual_scales (log2 of the scale
    split into thirds: heads and mlp_dim double first, then emb_dim, then layers) over base.yml's 2560, 8 heads,
    8192, 16 layers."""
    base, rest = divmod(scale.bit_length() - 1, 3)
    heads = base + (rest > 0)
    return dict(hidden=2560 * 2 ** (base + (rest > 1)), heads=8 * 2 ** heads, ffn=8192 * 2 ** heads,
                layers=16 * 2 ** base)


def _v5p(size: int, cores: int, tensor: int, per_chip: int, recompute: str, tflops: float, mfu: float) -> dict:
    chips = cores // 2
    return dict(**_V5P, name=f"maxtext-{size}b-v5p-{cores}", devices=chips, tensor=tensor, data=chips // tensor,
                fsdp=chips // tensor, global_batch=per_chip * chips, micro_batch=per_chip * tensor,
                recompute=recompute, quantity="TFLOP/s per device", published=tflops, also=(("MFU", mfu),),
                **_maxtext_scale(size))


_RUNS_MAXTEXT = runs_of(
    _MAXTEXT,
    dict(**_V5E, name="maxtext-16b-v5e-256", devices=256, data=256, fsdp=256, global_batch=1536, micro_batch=6,
         quantity="TFLOP/s per device", published=120.0, also=(("MFU", 0.6110),), **_maxtext_scale(16)),
    dict(**_V5E, name="maxtext-32b-v5e-256", devices=256, data=256, fsdp=256, global_batch=1024, micro_batch=4,
         quantity="TFLOP/s per device", published=132.0, also=(("MFU", 0.6686),), **_maxtext_scale(32)),
    dict(**_V5E, name="maxtext-16b-2x-v5e-256", devices=512, data=512, fsdp=256, global_batch=3072,
         micro_batch=6, quantity="TFLOP/s per device", published=117.0, also=(("MFU", 0.5937),),
         **_maxtext_scale(16)),
    # size, TensorCores, ici_tensor_parallelism, per_device_batch_size, remat_policy, TFLOP/s per chip, MFU
    _v5p(32, 128, 4, 8, "selective", 328.0, 0.7147),
    _v5p(64, 128, 4, 4, "selective", 323.0, 0.7031),
    _v5p(128, 256, 8, 2, "selective", 315.0, 0.6868),
    _v5p(128, 512, 8, 2, "selective", 316.0, 0.6883),
    _v5p(256, 1024, 8, 2, "selective", 308.0, 0.6709),
    _v5p(512, 1024, 16, 2, "full", 294.0, 0.6399),
    _v5p(1024, 2048, 16, 2, "full", 254.0, 0.5535),
    _v5p(1024, 4096, 16, 2, "full", 297.0, 0.6480),
)
"""MaxText's published throughput on TPU v5e and v5p slices (the 2023
tables), each run with its configuration script at the commit that published
it. remat_policy ``minimal`` is recorded as selective recomputation."""


PUBLISHED_RUNS: tuple[PublishedRun, ...] = (
    _RUNS_V100 + _RUNS_V100_BLOG + _RUNS_KORTHIKANTI + _RUNS_MT_NLG + _RUNS_BLOOM + _RUNS_OPT + _RUNS_MEGASCALE
    + _RUNS_TORCHTITAN + _RUNS_LLAMA3 + _RUNS_PALM + _RUNS_MAXTEXT + RUNS_TODAY
)
"""Every published run, V100 to TPU v6e: Megatron-LM 2019 (V100), Korthikanti
et al. 2022, MT-NLG, BLOOM, OPT, MegaScale's Megatron-LM baseline and
torchtitan (A100), Llama 3 (H100), PaLM (TPU v4), MaxText (TPU v5e, v5p), and
`xla_cost.study.published_runs_today.RUNS_TODAY`: NeMo and Megatron Bridge
(H100, FP8), LLM Foundry's MPT (H100, BF16 and FP8), torchtitan (H200, FP8),
MaxText's Trillium recipes (TPU v6e, Mixtral 8x7B among them)."""
