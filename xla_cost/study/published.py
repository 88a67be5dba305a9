"""The published figures the study pages hold the counts against.

The seeds' own numbers (seed 001's optimizer costs, seed 000's step-time
shares, seed 004's speed-up), the parameter counts and multiply-accumulates of
the reference implementations, Brown et al.'s GPT-3 compute, Jia et al.'s
ImageNet runs, and the seed documents the claims come from. Constants only,
each with its source.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "GOYAL_EFFICIENCY",
    "GOYAL_HOURS",
    "GPT3_MEGATRON_DAYS",
    "H100_MEASURED",
    "H200_MEASURED",
    "MEGATRON_WEAK_SCALING",
    "DDP_MODELS",
    "DDP_SHARES",
    "GPT3_TOTAL_FLOPS",
    "GPT3_TRAINING_TOKENS",
    "IMAGENET_TRAIN_IMAGES",
    "JIA_EPOCHS",
    "JIA_MINUTES",
    "PUBLISHED_GMAC",
    "PUBLISHED_PARAMETERS",
    "SEED004_SPEEDUP",
    "SEED_ADAM_FLOPS_PER_PARAMETER",
    "SEED_ADAM_TERMS",
    "SEED_FILES",
    "SEED_SGD_FLOPS_PER_PARAMETER",
]


SEED_SGD_FLOPS_PER_PARAMETER = 2
"""Seed 001, appendix B: SGD costs 2 FLOP per parameter (w += a * dw)."""

SEED_ADAM_FLOPS_PER_PARAMETER = 18
"""Seed 001, appendix B: Adam costs "~3 + 4 + 3 + 3 + 5 = 18" FLOP per parameter."""

SEED_ADAM_TERMS: tuple[tuple[str, int], ...] = (
    ("first moment m = b1 m + (1 - b1) g", 3),
    ("second moment v = b2 v + (1 - b2) g^2", 4),
    ("bias correction m / (1 - b1^t)", 3),
    ("bias correction v / (1 - b2^t)", 3),
    ("step w -= lr m / (sqrt(v) + eps)", 5),
)
"""Seed 001's five terms of Adam's update (appendix B), in its order."""

DDP_SHARES: Mapping[str, float] = {"forward": 0.23, "backward": 0.74, "update": 0.03}
"""Seed 000: forward / backward / optimizer share of step time, ResNet-50 and
BERT on a V100, read from Figure 6 of the PyTorch DDP paper (Li et al. 2020)."""

DDP_MODELS: tuple[str, ...] = ("resnet50", "bert-base")
"""The models of the DDP paper's Figure 6 (seed 000)."""

PUBLISHED_PARAMETERS: Mapping[str, tuple[float, str]] = {
    "resnet18": (11_689_512, "torchvision"),
    "resnet34": (21_797_672, "torchvision"),
    "resnet50": (25_557_032, "torchvision"),
    "resnet101": (44_549_160, "torchvision"),
    "resnet152": (60_192_808, "torchvision"),
    "bert-base": (109_514_298, "HF BertForMaskedLM"),
    "bert-large": (335_174_458, "HF BertForMaskedLM"),
    "vit-b16": (86_567_656, "timm vit_base_patch16_224"),
    "gpt2-small": (124_439_808, "HF GPT2LMHeadModel"),
    "gpt2-medium": (354_823_168, "HF GPT2LMHeadModel"),
    "gpt2-large": (774_030_080, "HF GPT2LMHeadModel"),
    "gpt2-xl": (1_557_611_200, "HF GPT2LMHeadModel"),
    "gpt3-small": (125e6, "Brown et al. 2020, Table 2.1"),
    "gpt3-medium": (350e6, "Brown et al. 2020, Table 2.1"),
    "gpt3-large": (760e6, "Brown et al. 2020, Table 2.1"),
    "gpt3-xl": (1.3e9, "Brown et al. 2020, Table 2.1"),
    "gpt3-2.7b": (2.7e9, "Brown et al. 2020, Table 2.1"),
    "gpt3-6.7b": (6.7e9, "Brown et al. 2020, Table 2.1"),
    "gpt3-13b": (13.0e9, "Brown et al. 2020, Table 2.1"),
    "gpt3-175b": (175.0e9, "Brown et al. 2020, Table 2.1"),
}
"""Published parameter counts: exact (``num_parameters()`` of torchvision, Hugging
Face and timm models, as tests/test_resnet.py, test_bert_vit.py and test_gpt.py
cite them) or, for GPT-3, as Table 2.1 prints them (rounded; compared at the
digits printed)."""

PUBLISHED_GMAC: Mapping[str, tuple[float, str]] = {
    "resnet18": (1.81, "torchvision"),
    "resnet34": (3.66, "torchvision"),
    "resnet50": (4.09, "torchvision"),
    "resnet101": (7.80, "torchvision"),
    "resnet152": (11.51, "torchvision"),
    "vit-b16": (17.56, "torchvision"),
}
"""Published multiply-accumulates per 224 x 224 image (torchvision's model tables,
"GFLOPS" column, which counts multiply-adds, kernel taps on padding included)."""

GPT3_TRAINING_TOKENS = 300e9
"""Tokens GPT-3 was trained on (Brown et al. 2020, section 2.2 and Table D.1)."""

GPT3_TOTAL_FLOPS = 3.14e23
"""GPT-3 175B's total training compute (Brown et al. 2020, Table D.1:
3.14E+23 FLOP, i.e. 3,640 PF-days)."""

JIA_MINUTES: tuple[float, float] = (8.7, 6.6)
"""ResNet-50 on ImageNet, 90 epochs, on 1,024 and on 2,048 Tesla P40 GPUs
(seed 004; Jia et al. 2018, "Highly Scalable Deep Learning Training System with
Mixed-Precision: Training ImageNet in Four Minutes", arXiv:1807.11205):
8.7 / 6.6 = 1.32, the "1.3x when they doubled their number of GPUs"."""

JIA_EPOCHS = 90
"""Epochs of Jia et al.'s ResNet-50 runs (arXiv:1807.11205, abstract)."""

SEED004_SPEEDUP = 1.3
"""Seed 004: "a 1.3x speed up when they doubled their number of GPUs"."""

IMAGENET_TRAIN_IMAGES = 1_281_167
"""ImageNet-1k training images (Russakovsky et al. 2015), for seed 004's claim."""

SEED_FILES: Mapping[str, str] = {
    "000": "000_73c9221dd6d85d18.txt",
    "001": "001_2b56b1d1559ca0f7.txt",
    "002": "002_7c3303c11db24dbc.txt",
    "003": "003_56d71bba01c5cb11.txt",
    "004": "004_0ec4d2e8adee7a5c.txt",
}
"""The seed documents (``shared/seeds/``) the claims come from."""


MEGATRON_WEAK_SCALING: tuple[tuple[float, int, int, int, int, int, int, int, float], ...] = (
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
)
"""Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM" (arXiv:2104.04473), Table 1, weak scaling on
Selene's A100s: (parameters in billions, attention heads, hidden size, layers,
tensor-parallel size, pipeline-parallel size, GPUs, batch size, achieved
TFLOP/s per GPU). Sequence length 2,048, vocabulary 51,200 (§5)."""

GPT3_MEGATRON_DAYS = 34
"""Narayanan et al. 2021, §5.1: GPT-3 175B on 300B tokens with 1,024 A100s at
140 TFLOP/s per GPU takes "about 34 days"."""

GOYAL_HOURS = 1.0
"""Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1
Hour" (arXiv:1706.02677): ResNet-50, 90 epochs, minibatch 8,192 on 256 P100s,
in one hour."""

GOYAL_EFFICIENCY = 0.90
"""Goyal et al. 2017, §5.4: ~90% scaling efficiency from 8 to 256 GPUs (32
images per GPU)."""

H100_MEASURED: tuple[tuple[str, str, int, str, str, float, str], ...] = (
    # the current harness (one program per step), 2026-11-26: every train step it measured but the bfloat16
    # BERT ones (`xla_cost.study.views.TIMING_ANOMALIES`: the H100's bfloat16 BERT timings are unexplained;
    # on 2026-11-26 its Adam step, 14.0 ms, took less than its SGD step, 22.1 ms)
    ("bert-base", "seq_len=128", 32, "float32", "sgd", 0.023827, "2026-11-26"),
    ("bert-base", "seq_len=128", 32, "float32", "adam", 0.025447, "2026-11-26"),
    ("gpt2-small", "seq_len=1024", 8, "float32", "sgd", 0.064312, "2026-11-26"),
    ("gpt2-small", "seq_len=1024", 8, "float32", "adam", 0.065009, "2026-11-26"),
    ("gpt2-small", "seq_len=1024", 8, "bfloat16", "sgd", 0.046878, "2026-11-26"),
    ("gpt2-small", "seq_len=1024", 8, "bfloat16", "adam", 0.034734, "2026-11-26"),
    ("resnet50", "", 32, "float32", "sgd", 0.013311, "2026-11-26"),
    ("resnet50", "", 32, "float32", "adam", 0.014264, "2026-11-26"),
    # the current harness's second H100 run of the day (the rows of the same file that record the driver, CUDA,
    # cuDNN and clocks): the seed networks and ResNet-50, Adam and SGD; its ResNet-50 batch 32 float32 Adam
    # step (14.15 ms) repeats the first run's (14.26 ms, above) within 0.8%
    ("one_net", "", 64, "float32", "adam", 0.000107, "2026-11-26"),
    ("one_net", "", 64, "bfloat16", "adam", 0.000084, "2026-11-26"),
    ("linear_net", "", 64, "float32", "adam", 0.007559, "2026-11-26"),
    ("linear_net", "", 64, "bfloat16", "adam", 0.007501, "2026-11-26"),
    ("conv_net", "", 64, "float32", "adam", 0.001449, "2026-11-26"),
    ("conv_net", "", 64, "bfloat16", "adam", 0.001217, "2026-11-26"),
    ("deeper_conv_net", "depth=100", 8, "float32", "adam", 0.006792, "2026-11-26"),
    ("deeper_conv_net", "depth=100", 8, "bfloat16", "adam", 0.004388, "2026-11-26"),
    ("resnet50", "", 32, "bfloat16", "adam", 0.009848, "2026-11-26"),
    ("resnet50", "", 64, "float32", "adam", 0.024581, "2026-11-26"),
    ("resnet50", "", 64, "bfloat16", "adam", 0.015614, "2026-11-26"),
    ("linear_net", "", 64, "float32", "sgd", 0.002592, "2026-11-26"),
    ("linear_net", "", 64, "bfloat16", "sgd", 0.004154, "2026-11-26"),
    ("conv_net", "", 64, "float32", "sgd", 0.001666, "2026-11-26"),
    ("conv_net", "", 64, "bfloat16", "sgd", 0.001328, "2026-11-26"),
    ("deeper_conv_net", "depth=100", 8, "float32", "sgd", 0.006792, "2026-11-26"),
    ("deeper_conv_net", "depth=100", 8, "bfloat16", "sgd", 0.004454, "2026-11-26"),
    ("resnet50", "", 64, "float32", "sgd", 0.023455, "2026-11-26"),
    ("resnet50", "", 64, "bfloat16", "sgd", 0.014291, "2026-11-26"),
    ("resnet50", "", 128, "float32", "sgd", 0.042936, "2026-11-26"),
    ("resnet50", "", 128, "bfloat16", "sgd", 0.024626, "2026-11-26"),
    # the current harness's third H100 run of the day (python benchmarks/time_zoo.py --case conv_net:256
    # --case deeper_conv_net:32 --optimizer adam): the convolutional seed networks at four times their batch,
    # each predicted before it was measured (reports/data/predictions_h100_2026-11-26.json: +9.7%, +10.4%,
    # -10.4%, +9.3%)
    ("conv_net", "", 256, "float32", "adam", 0.005209, "2026-11-26"),
    ("conv_net", "", 256, "bfloat16", "adam", 0.004278, "2026-11-26"),
    ("deeper_conv_net", "depth=100", 32, "float32", "adam", 0.016329, "2026-11-26"),
    ("deeper_conv_net", "depth=100", 32, "bfloat16", "adam", 0.008745, "2026-11-26"),
    # the previous harness, 2026-11-23: only the cases the current one has not measured. Where both
    # measured a case the previous harness was 2-60% slower (ResNet-50 batch 64 bfloat16 Adam: 25.1 ms
    # then, 15.6 ms now; batch 64 float32 SGD 29.2 vs 23.5 ms; linear_net 3.0 vs 2.6 ms; conv_net 1.70 vs
    # 1.67 ms): its steps ran as separate programs, whose dispatch gaps it counted
    ("resnet50", "", 256, "float32", "sgd", 0.085563, "2026-11-23"),
    ("resnet50", "", 256, "bfloat16", "sgd", 0.050958, "2026-11-23"),
    ("resnet50", "", 256, "bfloat16", "adam", 0.058089, "2026-11-23"),
)
"""This project's train steps measured on an NVIDIA H100 80GB HBM3: (model,
config as ``key=value``, batch, dtype, optimizer, median seconds of the
``train_step`` row, date of
``reports/data/timing_nvidia-h100-80gb-hbm3_<date>.csv``, written by
``python benchmarks/time_zoo.py`` with jax 0.11.2). Every row of the current
harness (two runs on 2026-11-26) but the unexplained bfloat16 BERT ones, and of the
previous one (2026-11-23) the cases the current one has not measured (it is superseded where both did); each date is held out as one
"paper" by the validation."""

H200_MEASURED: tuple[tuple[str, str, int, str, str, float, str], ...] = (
    ("gpt2-small", "seq_len=1024", 8, "float32", "adam", 0.058264, "2026-11-26"),
    ("gpt2-small", "seq_len=1024", 8, "bfloat16", "adam", 0.030266, "2026-11-26"),
    ("resnet50", "", 32, "float32", "adam", 0.012550, "2026-11-26"),
    ("resnet50", "", 32, "bfloat16", "adam", 0.009722, "2026-11-26"),
    ("resnet50", "", 256, "float32", "adam", 0.066426, "2026-11-26"),
    ("resnet50", "", 256, "bfloat16", "adam", 0.038581, "2026-11-26"),
    # the second run of the day (the same harness, the same machine's kind): the seed networks and BERT
    ("linear_net", "", 64, "float32", "adam", 0.005508, "2026-11-26"),
    ("linear_net", "", 64, "bfloat16", "adam", 0.005351, "2026-11-26"),
    ("conv_net", "", 64, "float32", "adam", 0.001317, "2026-11-26"),
    ("conv_net", "", 64, "bfloat16", "adam", 0.001153, "2026-11-26"),
    ("one_net", "", 64, "float32", "adam", 0.000120, "2026-11-26"),
    ("one_net", "", 64, "bfloat16", "adam", 0.000172, "2026-11-26"),
    ("deeper_conv_net", "depth=100", 8, "float32", "adam", 0.008104, "2026-11-26"),
    ("deeper_conv_net", "depth=100", 8, "bfloat16", "adam", 0.005053, "2026-11-26"),
    ("bert-base", "seq_len=128", 32, "float32", "adam", 0.022914, "2026-11-26"),
    ("bert-base", "seq_len=128", 32, "bfloat16", "adam", 0.013167, "2026-11-26"),
)
"""This project's train steps measured on an NVIDIA H200, as `H100_MEASURED`
(``reports/data/timing_nvidia-h200_<date>.csv``, ``python benchmarks/time_zoo.py``,
jax 0.11.2): every case of that run, the first on a device none of the other
cases ran on."""
