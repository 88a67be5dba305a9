"""The zoo against published and analytic forward FLOP: the zoo page's table (docs/zoo.md, reports/zoo.md).

For every research-scale zoo model, the forward FLOP counted by xla_cost (one
example for images, one sequence for text, the loss included) against:

* CNNs and ViT: the published multiply-accumulate count (torchvision's model
  tables, which count multiply-adds including the kernel taps on padding),
  times 2;
* transformers: Kaplan et al. 2020 (Table 1), forward FLOP per token
  2N + 2 n_layer n_ctx d_model with N the non-embedding parameters, adjusted
  for what these models compute: attention scores for all n_ctx^2 pairs
  (masked, not skipped; 4 n_layer n_ctx d_model) and the output head
  (2 d_model V, tied or not).

and the training multiple (forward + backward) / forward. Counted from the
jaxpr (``--counter jaxpr``): within 1% of XLA where XLA can count (no loops).
Usage: ``python benchmarks/zoo_ratios.py [name ...]``; prints a markdown table.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import xla_cost  # noqa: E402
from xla_cost.zoo import build_model, example_inputs, get_spec  # noqa: E402

# Published multiply-accumulates per 224x224 image (torchvision model docs,
# "GFLOPS" column, which counts multiply-adds; ViT-B/16 also timm's model card).
PUBLISHED_GMAC = {
    "resnet18": 1.81, "resnet34": 3.66, "resnet50": 4.09, "resnet101": 7.80,
    "resnet152": 11.51, "vit-b16": 17.56,
}

TRANSFORMERS = [
    "bert-base", "bert-large", "gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl",
    "gpt3-175b",
]

DEFAULT = [*PUBLISHED_GMAC, *TRANSFORMERS]


def kaplan_per_token(config: dict) -> float:
    d, n_layer = config["d_model"], config["n_layer"]
    d_ff = config.get("d_ff") or 4 * d
    n = n_layer * 2 * d * (2 * d + d_ff)  # Kaplan's N: attention 4d^2 + MLP 2 d d_ff per layer
    return 2 * n + 4 * n_layer * config["seq_len"] * d + 2 * d * config["vocab_size"]


def row(name: str) -> str:
    spec = get_spec(name)
    config = dict(spec.defaults)
    if "scan_layers" in config:
        config["scan_layers"] = True  # same count, traced once
    report = xla_cost.analyze(
        build_model(name, **config), example_inputs(name, 1, **config),
        optimizer="sgd", counter="jaxpr", name=name,
    )
    forward = report.phases["forward"].flops
    training = (forward + report.phases["backward"].flops) / forward
    if name in PUBLISHED_GMAC:
        analytic, unit, what = 2e9 * PUBLISHED_GMAC[name], "GFLOP / image", "2 x published MAC"
        measured = forward
    else:
        tokens = config["seq_len"]
        analytic, unit, what = kaplan_per_token(config), "GFLOP / token", "Kaplan (adjusted)"
        measured = forward / tokens
    return (
        f"| `{name}` | {report.parameters:,} | {measured / 1e9:.3f} {unit} | "
        f"{analytic / 1e9:.3f} ({what}) | {measured / analytic:.3f} | {training:.2f} |"
    )


def main(argv: list[str]) -> int:
    print("| model | parameters | forward (counted) | analytic | counted / analytic | (fwd + bwd) / fwd |")
    print("|---|---|---|---|---|---|")
    for name in argv or DEFAULT:
        print(row(name), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
