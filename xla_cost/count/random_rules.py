"""Cost rules of jax's random numbers: threefry hashing and the bits it makes.

The counts are what XLA's cost analysis counts on the CPU (so that the jaxpr
count and the compiled count compare), derived and measured as each constant
says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from xla_cost.count.registry import Aval, Cost, io_bytes, register, size

__all__ = [
    "THREEFRY_WORD_OPS",
    "THREEFRY_CALL_OPS",
    "THREEFRY_KEY_OPS",
    "RANDOM_BITS_COMBINE_OPS",
    "THREEFRY_UNROLLED_WORD_OPS",
    "RANDOM_PRIMITIVES",
    "threefry_counter_ops",
]

# ------------------------------------------------------------------ random numbers
#
# jax's default generator is threefry2x32 in its "partitionable" form: the bits
# of an array of shape S are the threefry hash, under the key, of the 64-bit
# position of each element (two 32-bit counter words, `iota_2x32_shape`). On
# the CPU the hash's 20 rounds run as a 5-trip while loop (4 rounds per trip),
# and XLA's cost analysis counts a while body once: the figures below are what
# XLA counts (so that the jaxpr and the compiled counts compare), not the
# operations executed, about 2 + 5 * 39 = 197 per word. The GPU
# lowering unrolls the loop and counts more.

THREEFRY_WORD_OPS = 41
"""Operations XLA counts per 32-bit word of the threefry2x32 hash (CPU).

Two key additions before the rounds, then the loop body once: 4 rounds of
(add, shift left, shift right, or, xor) and the key injection (3 adds) for the
two words, 23 operations, of which XLA's fusion recomputes 16 (each output word
is fused with its own copy of the other word's rounds): 2 + 39 = 41. Measured
with jax 0.10 on the CPU (`threefry2x32` on 1 to 256 words: 41 per word + 11 +
2 per key, exactly)."""

THREEFRY_UNROLLED_WORD_OPS = 2 + 5 * (4 * 5 + 3)
"""Operations per 32-bit word of the threefry2x32 hash where the compiler unrolls
its loop (a GPU's, a TPU's), so that its cost analysis counts every trip: the two
key additions, then 5 trips of 4 rounds (add, shift left, shift right, or, xor)
and a key injection (3 adds): 117, against the CPU's `THREEFRY_WORD_OPS`. An
H100's and a TPU v5e's forward pass of a dropout over 8 x 64 words count
74.5 and 75.2 per word over the CPU's (jax 0.10, deviceless), against
117 - 41 = 76 here: they fold a few of the key's operations."""

RANDOM_PRIMITIVES: tuple[str, ...] = (
    "random_bits", "random_split", "random_fold_in", "random_seed", "threefry2x32", "iota_2x32_shape",
)
"""The primitives whose work is the random-number generator's: the counts of
this module (`xla_cost.PhaseCosts.random_flops` sums them)."""

THREEFRY_KEY_OPS = 2
"""Per key: the third key word ``k1 ^ k2 ^ 0x1BD11BDA`` (2 xors). XLA folds as
many operations away when the counter is the constant 0 (one word per key)."""

THREEFRY_CALL_OPS = 11
"""Scalar operations per hash call: the loop counter and the rotation amounts
``32 - r`` of each fused round (measured, as above)."""

RANDOM_BITS_COMBINE_OPS: Mapping[int, int] = {8: 2, 16: 2, 32: 1, 64: 4}
"""Operations per output element that turn the hash's two words into the bits of
``random_bits`` of a bit width: 32, the xor of the words; 8 and 16, the xor and
a conversion; 64, two conversions, a shift and an or. Measured, as above."""

_SEED_OPS = {"uint32": 1, "int32": 3, "uint64": 4, "int64": 4}
"""Operations per seed of ``random_seed`` (threefry): the seed's high word
(a shift), its low word (an and) and their conversions, as far as XLA keeps
them; 32-bit seeds measured in jax's default 32-bit mode, 64-bit ones with
``jax_enable_x64``."""


def threefry_counter_ops(shape: Sequence[int]) -> int:
    """Operations XLA counts for the counters (`iota_2x32_shape`) of an array of ``shape``.

    The 64-bit position of each element is ``sum(iota_d * stride_d)`` over the
    ``r`` axes longer than 1 (size-1 axes are constant and folded); XLA computes
    it once for the high and once for the low word: per word a multiply per
    element of each non-trailing axis (its own length ``d``, before
    broadcasting) and ``r - 1`` adds per element; then a shift and two
    conversions per element. A single element's counter is the constant 0.

    Example: shape (8, 32), m = 256: ``3*256 + 2*8 + 2*1*256 = 1296``.
    """
    dims = [int(d) for d in shape if d != 1]
    m = math.prod(dims)
    if m <= 1:
        return 0
    return 3 * m + 2 * sum(dims[:-1]) + 2 * (len(dims) - 1) * m


def _threefry_hash_ops(words: int, keys: int, *, constant_counter: bool = False) -> int:
    # THREEFRY_WORD_OPS per hashed word, THREEFRY_KEY_OPS per key (folded when
    # the counter is constant), THREEFRY_CALL_OPS once.
    key_ops = 0 if constant_counter else THREEFRY_KEY_OPS * keys
    return THREEFRY_WORD_OPS * words + key_ops + THREEFRY_CALL_OPS


def _threefry_impl(impl: Any, *, partitionable: bool = True) -> bool:
    """Whether ``impl`` (a PRNG implementation) is threefry2x32 as the rules assume.

    ``partitionable``: the rule also depends on jax's ``jax_threefry_partitionable``
    layout of counters (the default since jax 0.5), so the other one is unknown.
    """
    if getattr(impl, "name", None) != "threefry2x32":
        return False
    return not partitionable or bool(jax.config.jax_threefry_partitionable)


def _key_impl(aval: Aval) -> Any:
    return getattr(aval.dtype, "_impl", None)


@register("random_bits")
def _random_bits(
    ins: Sequence[Aval], outs: Sequence[Aval], *, bit_width: int, shape: Sequence[int], **_: Any
) -> Cost | None:
    # K keys, m = prod(shape) elements per key, n = K*m outputs: the hash of n
    # words (its counter is constant when m == 1), the counters of the shape
    # (shared by all keys) and RANDOM_BITS_COMBINE_OPS per output element.
    # Another generator (rbg, unsafe_rbg) or counter layout: unknown.
    if not _threefry_impl(_key_impl(ins[0])) or bit_width not in RANDOM_BITS_COMBINE_OPS:
        return None
    keys, m = size(ins[0]), math.prod(shape)
    n = keys * m
    ops = (
        _threefry_hash_ops(n, keys, constant_counter=m == 1)
        + threefry_counter_ops(shape)
        + RANDOM_BITS_COMBINE_OPS[bit_width] * n
    )
    return Cost(flops=ops, bytes_accessed=io_bytes(ins, outs))


@register("random_split")
def _random_split(
    ins: Sequence[Aval], outs: Sequence[Aval], *, shape: Sequence[int], **_: Any
) -> Cost | None:
    # K keys split into m = prod(shape) each: a new key is the hash's two words
    # for its position, so random_bits without the combining step.
    if not _threefry_impl(_key_impl(ins[0])):
        return None
    keys, m = size(ins[0]), math.prod(shape)
    ops = _threefry_hash_ops(keys * m, keys, constant_counter=m == 1) + threefry_counter_ops(shape)
    return Cost(flops=ops, bytes_accessed=io_bytes(ins, outs))


@register("random_fold_in")
def _random_fold_in(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost | None:
    # Each of the K new keys hashes one word pair (the message as a seed: its
    # low word masked, 1 operation): K * (THREEFRY_WORD_OPS + THREEFRY_KEY_OPS
    # + 1) + THREEFRY_CALL_OPS. Exact for one key; XLA counts about 1 more per
    # key for a batch of keys.
    if not _threefry_impl(_key_impl(outs[0]), partitionable=False):
        return None
    keys = size(outs[0])
    return Cost(
        flops=_threefry_hash_ops(keys, keys) + keys, bytes_accessed=io_bytes(ins, outs)
    )


@register("random_seed")
def _random_seed(ins: Sequence[Aval], outs: Sequence[Aval], *, impl: Any, **_: Any) -> Cost | None:
    # _SEED_OPS per seed, by the seed's dtype.
    per_seed = _SEED_OPS.get(np.dtype(ins[0].dtype).name)
    if not _threefry_impl(impl, partitionable=False) or per_seed is None:
        return None
    return Cost(flops=per_seed * size(ins[0]), bytes_accessed=io_bytes(ins, outs))


@register("threefry2x32")
def _threefry2x32(ins: Sequence[Aval], outs: Sequence[Aval], **_: Any) -> Cost:
    # The hash itself (jax.random.threefry_2x32, raw uint32 keys): operands
    # k1, k2, x1, x2 broadcast to the words' shape; n word pairs in, two words out.
    keys = max(size(ins[0]), size(ins[1]))
    return Cost(
        flops=_threefry_hash_ops(size(outs[0]), keys), bytes_accessed=io_bytes(ins, outs)
    )


@register("iota_2x32_shape")
def _iota_2x32_shape(
    ins: Sequence[Aval], outs: Sequence[Aval], *, shape: Sequence[int], **_: Any
) -> Cost:
    # The counters alone: threefry_counter_ops.
    return Cost(flops=threefry_counter_ops(shape), bytes_accessed=io_bytes(ins, outs))


