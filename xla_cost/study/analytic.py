"""The analytic FLOP the counts are held against.

Seed 001's nets counted layer by layer as textbooks count them (from their
definitions in seed 001's appendix A), and Kaplan et al.'s per-token formula
for transformers, adjusted for what the zoo's transformers compute.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["kaplan_per_token", "textbook_macs"]


def _conv_out(size: int, k: int, s: int, p: int) -> int:
    return (size + 2 * p - k) // s + 1


def _textbook_conv_macs(size: int, c_in: int, c_out: int, k: int, s: int, p: int) -> int:
    """Multiply-accumulates of a square convolution as textbooks count them:
    every output times every kernel tap, taps on padding included."""
    out = _conv_out(size, k, s, p)
    return out * out * k * k * c_in * c_out


def textbook_macs(model: str, config: Mapping[str, Any]) -> dict[str, int] | None:
    """Seed 001's nets layer by layer (per example), from their definitions in
    seed 001's appendix A; None for other models."""
    if model in ("linear_net", "one_net"):
        n_in = 224 * 224 * 3 if model == "linear_net" else 1
        return {"fc1": n_in * 4096, "fc2": 4096 * 128, "fc3": 128 * 10}
    if model == "conv_net":
        size = int(config.get("image_size", 224))
        o1 = _conv_out(size, 7, 2, 3)
        p1 = _conv_out(o1, 3, 2, 1)
        return {"conv1": _textbook_conv_macs(size, 3, 32, 7, 2, 3),
                "conv2": _textbook_conv_macs(p1, 32, 64, 7, 2, 3), "fc1": 64 * 10}
    if model == "deeper_conv_net":
        size = int(config.get("image_size", 224))
        depth = int(config.get("depth", 100))
        o1 = _conv_out(size, 7, 2, 3)
        p1 = _conv_out(o1, 3, 2, 0)
        return {"first_layer": _textbook_conv_macs(size, 3, 32, 7, 2, 3),
                "conv_layer": depth * _textbook_conv_macs(p1, 32, 32, 3, 1, 1),
                "convN": _textbook_conv_macs(p1, 32, 64, 7, 2, 3), "fc1": 64 * 10}
    return None


def kaplan_per_token(config: Mapping[str, Any]) -> tuple[float, float]:
    """(adjusted Kaplan forward FLOP per token, Kaplan's N): Kaplan et al. 2020,
    Table 1, 2N + 2 n_layer n_ctx d_model with N = 2 d_model n_layer (2 d_model
    + d_ff) the non-embedding parameters, adjusted for what these models
    compute: attention scores over all n_ctx² pairs (masked, not skipped:
    4 n_layer n_ctx d_model) and the output head (2 d_model V)."""
    d, n_layer = config["d_model"], config["n_layer"]
    d_ff = config.get("d_ff") or 4 * d
    n = n_layer * 2 * d * (2 * d + d_ff)
    return 2 * n + 4 * n_layer * config["seq_len"] * d + 2 * d * config["vocab_size"], n
