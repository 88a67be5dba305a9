"""Closed-form FLOP and parameter counts of the seed-001 networks, for the tests.

Written independently of xla_cost (no import from it): plain loops over the
definitions. A multiply-add is 2 FLOP; XLA counts only kernel taps that land on
real input (not padding), so convolutions use `valid_pairs`.

The phase totals (``*_forward_phase``, ``*_backward_phase``) are what the
jaxpr counter must give for the ``forward`` and ``backward`` phases of
`xla_cost.analyze` with the default loss (mean softmax cross-entropy): the
model's operations, the loss's, and for backward the gradient operations
autodiff emits for each of them (listed beside each formula).
"""

from __future__ import annotations


def out_size(i: int, k: int, s: int, p: int) -> int:
    """Output length of a k-wide window with stride s and padding p on each side."""
    return (i + 2 * p - k) // s + 1


def valid_pairs(i: int, k: int, s: int, p: int) -> int:
    """Pairs (output o, tap t) whose input index o*s - p + t lies in [0, i)."""
    o_n = out_size(i, k, s, p)
    return sum(1 for o in range(o_n) for t in range(k) if 0 <= o * s - p + t < i)


def valid_taps(i: int, k: int, s: int, pad: tuple[int, int], dilation: int = 1) -> int:
    """`valid_pairs` for asymmetric padding and a dilated kernel, by laying the
    padded input out: pad[0] padding cells, i real ones, pad[1] padding cells;
    outputs every s cells; k taps `dilation` cells apart. Counts the taps that
    land on a real cell."""
    padded = [False] * pad[0] + [True] * i + [False] * pad[1]
    span = (k - 1) * dilation + 1
    starts = range(0, len(padded) - span + 1, s)
    return sum(padded[o + t * dilation] for o in starts for t in range(k))


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


# --------------------------------------------------------------------------- loss


def loss_flops(b: int, c: int) -> int:
    """Mean softmax cross-entropy of (b, c) logits with integer labels, forward.

    optax.softmax_cross_entropy_with_integer_labels, op by op:
      label logit (take_along_axis): wrap negative labels (lt, add, select) 3b;
        the gather in "fill" mode checks each index (convert, >= 0, < c, and)
        and selects the fill value: 4b
      max-shift: reduce_max b(c-1); max with -inf, is_finite, select: 3b
      logsumexp: x - max bc; exp (transcendental); reduce_sum b(c-1); abs b;
        log (transcendental); + max b; - label logit b
      mean: reduce_sum b-1; / b: 1 (x / 1 is dropped at b = 1)
    = 3bc + 12b, less the division at b = 1.
    """
    return 3 * b * c + 12 * b - (1 if b == 1 else 0)


def loss_transcendentals(b: int, c: int) -> int:
    # exp per logit, log per example
    return b * c + b


def loss_backward_flops(b: int, c: int) -> int:
    """What the gradient adds for the loss (jvp and transpose of the forward).

    jvp: abs's sign test (ge) b. Transpose: the mean's cotangent / b: b;
    selects of the max-shift and of the label's fill mode 2b; neg b; the two
    cotangents of the logits added (add_any) bc + b; softmax times the
    cotangent bc; the label logit's scatter-add b.
    = 2bc + 7b.
    """
    return 2 * b * c + 7 * b


# --------------------------------------------------------------------------- layers' backward


def contraction_flops(m: int, k: int) -> int:
    """A contraction of length k for m output elements: 2 FLOP per multiply-add,
    but a length-1 contraction is a plain multiply (1 FLOP), as XLA rewrites it."""
    return m * k * (1 if k == 1 else 2)


def dense_backward_flops(b: int, n_in: int, n_out: int, first: bool = False) -> int:
    """Dense layer's gradient: weight gradient (in*out outputs, contracted over
    the batch), input gradient (b*in outputs contracted over out; none for the
    first layer: nothing needs it), bias gradient (sum over the batch: (b-1)*out)."""
    weight = contraction_flops(n_in * n_out, b)
    inputs = 0 if first else contraction_flops(b * n_in, n_out)
    return weight + inputs + (b - 1) * n_out


def relu_backward_flops(n: int) -> int:
    # jvp: the mask x > 0 (1 per element); transpose: select (1 per element)
    return 2 * n


def max_pool_backward_flops(pooled: int, window: int, rank: int = 4) -> int:
    """select_and_scatter_add of ``pooled`` outputs over a ``window``-element
    window of a rank-``rank`` operand, as XLA expands and counts it: an
    index-tracking reduce-window (per step a compare, a select of the value and
    one per index component, 6 + rank) and a scatter (1 add per window element):
    pooled * ((window - 1) * (rank + 6) + window). docs/conventions.md;
    tests/count/test_rules.py checks it against XLA's compiled count."""
    return pooled * ((window - 1) * (rank + 6) + window)


def conv_backward_flops(forward_conv_flops: int, first: bool = False) -> int:
    """A convolution's gradient: the weight gradient reads the same valid
    (output, tap) pairs as the forward pass (same FLOP); so does the input
    gradient, a transposed convolution (none for the first layer)."""
    return forward_conv_flops * (1 if first else 2)


# --------------------------------------------------------------------------- phases


def mlp_forward_phase(b: int, n_in: int) -> int:
    """LinearNet / OneNet forward phase: the layers and ReLUs, then the loss.
    OneNet's fc1 (n_in = 1) is a length-1 contraction: b*4096, not 2*b*4096."""
    layers = mlp_forward_total(b, n_in)
    if n_in == 1:
        layers -= b * 4096
    return layers + loss_flops(b, 10)


def mlp_backward_layers(b: int, n_in: int) -> dict[str, int]:
    return {
        "fc1": dense_backward_flops(b, n_in, 4096, first=True),
        "fc2": dense_backward_flops(b, 4096, 128),
        "fc3": dense_backward_flops(b, 128, 10),
    }


def mlp_backward_phase(b: int, n_in: int) -> int:
    # the layers, two ReLUs (4096 and 128 features), the loss
    return (
        sum(mlp_backward_layers(b, n_in).values())
        + relu_backward_flops(b * (4096 + 128))
        + loss_backward_flops(b, 10)
    )


def conv_net_forward_phase(b: int, size: int = 224) -> int:
    return conv_net_forward_total(b, size) + loss_flops(b, 10)


def conv_net_backward_layers(b: int, size: int = 224) -> dict[str, int]:
    forward = conv_net_forward_layers(b, size)
    return {
        "conv1": conv_backward_flops(forward["conv1"], first=True),
        "conv2": conv_backward_flops(forward["conv2"]),
        "fc1": dense_backward_flops(b, 64, 10),
    }


def conv_net_backward_phase(b: int, size: int = 224) -> int:
    o1 = out_size(size, 7, 2, 3)
    p1 = out_size(o1, 3, 2, 1)
    o2 = out_size(p1, 7, 2, 3)
    p2 = out_size(o2, 3, 2, 1)
    glue = (
        relu_backward_flops(b * o1 * o1 * 32)
        + max_pool_backward_flops(b * p1 * p1 * 32, 9)
        + relu_backward_flops(b * o2 * o2 * 64)
        + max_pool_backward_flops(b * p2 * p2 * 64, 9)
        + b * 64  # global mean: its cotangent divided by the count, per (example, channel)
    )
    return sum(conv_net_backward_layers(b, size).values()) + glue + loss_backward_flops(b, 10)


def deeper_conv_net_forward_phase(b: int, depth: int, size: int = 224) -> int:
    return deeper_conv_net_forward_total(b, depth, size) + loss_flops(b, 10)


def deeper_conv_net_backward_layers(b: int, depth: int, size: int = 224) -> dict[str, int]:
    forward = deeper_conv_net_forward_layers(b, depth, size)
    return {
        "first_layer": conv_backward_flops(forward["first_layer"], first=True),
        # depth applications, each with an input and a weight gradient; the
        # shared kernel's depth weight gradients are summed: (depth-1) * 32*32*9 adds
        "conv_layer": conv_backward_flops(forward["conv_layer"]) + max(depth - 1, 0) * 32 * 32 * 9,
        "convN": conv_backward_flops(forward["convN"]),
        "fc1": dense_backward_flops(b, 64, 10),
    }


def deeper_conv_net_backward_phase(b: int, depth: int, size: int = 224) -> int:
    o1 = out_size(size, 7, 2, 3)
    p1 = out_size(o1, 3, 2, 0)
    o2 = out_size(p1, 7, 2, 3)
    glue = (
        relu_backward_flops(b * o1 * o1 * 32)
        + max_pool_backward_flops(b * p1 * p1 * 32, 9)
        + depth * relu_backward_flops(b * p1 * p1 * 32)
        + relu_backward_flops(b * o2 * o2 * 64)
        + b * 64  # global mean
    )
    return sum(deeper_conv_net_backward_layers(b, depth, size).values()) + glue + loss_backward_flops(b, 10)
