"""Closed-form FLOP and parameter counts of the seed-001 networks, for the tests.

Written independently of xla_cost (no import from it): plain loops over the
definitions. A multiply-add is 2 FLOP; XLA counts only kernel taps that land on
real input (not padding), so convolutions use `valid_pairs`.
"""

from __future__ import annotations


def out_size(i: int, k: int, s: int, p: int) -> int:
    """Output length of a k-wide window with stride s and padding p on each side."""
    return (i + 2 * p - k) // s + 1


def valid_pairs(i: int, k: int, s: int, p: int) -> int:
    """Pairs (output o, tap t) whose input index o*s - p + t lies in [0, i)."""
    o_n = out_size(i, k, s, p)
    return sum(1 for o in range(o_n) for t in range(k) if 0 <= o * s - p + t < i)


def dense_flops(b: int, n_in: int, n_out: int) -> int:
    # matmul 2*B*in*out, bias add B*out
    return 2 * b * n_in * n_out + b * n_out


def conv_flops(b: int, size: int, c_in: int, c_out: int, k: int, s: int, p: int) -> int:
    # 2 * B * C_in * C_out * (valid pairs per spatial dim)^2 (square images)
    return 2 * b * c_in * c_out * valid_pairs(size, k, s, p) ** 2


def mlp_params(n_in: int) -> int:
    # (in*4096 + 4096) + (4096*128 + 128) + (128*10 + 10)
    return n_in * 4096 + 4096 + 4096 * 128 + 128 + 128 * 10 + 10


def conv_net_params() -> int:
    # conv1 3*32*7*7, conv2 32*64*7*7 (no bias), fc1 64*10 + 10
    return 3 * 32 * 49 + 32 * 64 * 49 + 64 * 10 + 10


def deeper_conv_net_params(depth: int = 100) -> int:
    # first_layer 3*32*7*7, conv_layer 32*32*3*3 (shared; Flax creates it only
    # when it is called, depth >= 1), convN 32*64*7*7, fc1 64*10+10
    return 3 * 32 * 49 + (32 * 32 * 9 if depth >= 1 else 0) + 32 * 64 * 49 + 64 * 10 + 10


def mlp_forward_layers(b: int, n_in: int) -> dict[str, int]:
    return {
        "fc1": dense_flops(b, n_in, 4096),
        "fc2": dense_flops(b, 4096, 128),
        "fc3": dense_flops(b, 128, 10),
    }


def mlp_forward_total(b: int, n_in: int) -> int:
    # layers + two ReLUs (1 max per element)
    return sum(mlp_forward_layers(b, n_in).values()) + b * (4096 + 128)


def conv_net_forward_layers(b: int, size: int = 224) -> dict[str, int]:
    o1 = out_size(size, 7, 2, 3)
    p1 = out_size(o1, 3, 2, 1)
    return {
        "conv1": conv_flops(b, size, 3, 32, 7, 2, 3),
        "conv2": conv_flops(b, p1, 32, 64, 7, 2, 3),
        "fc1": dense_flops(b, 64, 10),
    }


def conv_net_forward_total(b: int, size: int = 224) -> int:
    o1 = out_size(size, 7, 2, 3)       # conv1 output
    p1 = out_size(o1, 3, 2, 1)         # max-pool 3/2 pad 1
    o2 = out_size(p1, 7, 2, 3)         # conv2 output
    p2 = out_size(o2, 3, 2, 1)
    glue = (
        b * o1 * o1 * 32               # relu
        + 8 * b * p1 * p1 * 32         # max-pool: 9-1 comparisons per output
        + b * o2 * o2 * 64             # relu
        + 8 * b * p2 * p2 * 64         # max-pool
        + b * (p2 * p2 - 1) * 64 + b * 64  # global mean: sum + divide
    )
    return sum(conv_net_forward_layers(b, size).values()) + glue


def deeper_conv_net_forward_layers(b: int, depth: int, size: int = 224) -> dict[str, int]:
    o1 = out_size(size, 7, 2, 3)
    p1 = out_size(o1, 3, 2, 0)         # first_layer's max-pool has no padding
    return {
        "first_layer": conv_flops(b, size, 3, 32, 7, 2, 3),
        "conv_layer": depth * conv_flops(b, p1, 32, 32, 3, 1, 1),
        "convN": conv_flops(b, p1, 32, 64, 7, 2, 3),
        "fc1": dense_flops(b, 64, 10),
    }


def deeper_conv_net_forward_total(b: int, depth: int, size: int = 224) -> int:
    o1 = out_size(size, 7, 2, 3)
    p1 = out_size(o1, 3, 2, 0)
    o2 = out_size(p1, 7, 2, 3)
    glue = (
        b * o1 * o1 * 32 + 8 * b * p1 * p1 * 32     # relu, max-pool
        + depth * b * p1 * p1 * 32                  # relu after each conv_layer
        + b * o2 * o2 * 64                          # relu after convN
        + b * (o2 * o2 - 1) * 64 + b * 64           # global mean
    )
    return sum(deeper_conv_net_forward_layers(b, depth, size).values()) + glue
