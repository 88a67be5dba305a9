"""The pairs an attention mask made from positions alone allows, evaluated when counted: `Static`,
`mask_share`; a fused kernel's window in closed form: `window_share`.

A mask built from ``iota`` s and constants (``jnp.arange(T)[:, None] >= jnp.arange(T)[None, :]``, a
sliding window ``(i >= j) & (i - j < W)``, ``jnp.tril``, a closed-over lower-triangular array) reads
no input of the program: its value is known when the program is counted. `Static` records how such a
value is computed (the equations from literals, constants and ``iota`` s); `mask_share` evaluates the
masks an attention's softmax reads and gives the share of the ``T x T`` products that
``attention_flops="causal"`` keeps:

    kept = (A - D / 2) / T²

where ``A`` is the number of (query, key) pairs the mask allows and ``D`` the allowed pairs of its
diagonal the mask bounds (the query's own key, with no allowed pair beyond it on one side). These are
the pairs a kernel that skips the masked blocks computes, with the diagonal halved as the causal
convention halves it: a causal mask keeps ``(T (T + 1) / 2 - T / 2) / T² = 1/2`` (MaxText's
convention, unchanged); a sliding window of ``W < T`` keys (the query's own among them) allows
``A = T W - W (W - 1) / 2`` pairs and keeps ``(T W - W (W - 1) / 2 - T / 2) / T²``.

A boolean or integer mask allows the value its diagonal holds (a causal or windowed mask allows the
query's own key); a float one too where it holds two values (a bias of 0 and a large negative, a 0/1
factor), and otherwise (ALiBi's slopes with a causal bias) the pairs above its minimum where that is
-10,000 or less. Masks of several ``T x T`` slices (per head, per batch element) keep their mean.
What is not evaluated says why (`mask_share`'s second value): the mask depends on the data or on a
loop's counter, it is no square ``T x T`` mask, a value on its way has more than `EVALUATED_LARGEST`
elements, or its values allow no reading above.

A fused attention kernel's mask is no value of the program but a window its parameters name (a splash
kernel's ``LocalMask`` (left, right), cuDNN's ``sliding_window_length``): `window_share` counts its
pairs in closed form by the same convention, no ``T x T`` array made.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import jax
import numpy as np

__all__ = ["Static", "constant", "result", "mask_share", "window_share", "EVALUATED_LARGEST", "HALF"]

EVALUATED_LARGEST = 1 << 26
"""Elements of the largest value a mask's evaluation makes (a ``8192 x 8192`` mask and the ``iota`` s
broadcast to it: 256 MiB of int32 each); a larger mask is halved as a causal one, and said so."""

HALF = Fraction(1, 2)
_MASKED_BIAS = -1e4  # a bias this negative or more masks its pair (BERT's -10,000; -1e9, finfo.min, -inf)
_CACHE: dict[str, tuple[Fraction | None, str]] = {}
_CACHE_LARGEST = 256


class Static:
    """A value the program's inputs do not change: a literal's or a closed-over constant's (``value``),
    or result ``index`` of the equation ``eqn`` applied to such values (``ins``); ``size``: its elements."""

    __slots__ = ("eqn", "index", "ins", "value", "size")

    def __init__(self, eqn: Any = None, index: int = 0, ins: tuple["Static", ...] = (), value: Any = None,
                 size: int = 0) -> None:
        self.eqn, self.index, self.ins, self.value, self.size = eqn, index, ins, value, size


def constant(value: Any) -> Static | None:
    """A literal's or a constant's value, None where it is no array (a PRNG key)."""
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - an opaque constant: not evaluated
        return None
    return Static(value=array, size=int(array.size)) if array.dtype.kind in "biuf" else None


def result(eqn: Any, ins: Sequence[Static]) -> list[Static]:
    """The results of ``eqn`` applied to the static values ``ins``."""
    sizes = [int(np.prod(getattr(v.aval, "shape", ()), dtype=np.int64)) for v in eqn.outvars]
    return [Static(eqn, k, tuple(ins), size=size) for k, size in enumerate(sizes)]


def _key(node: Static, memo: dict[int, tuple[str, int]]) -> tuple[str, int]:
    """A fingerprint of how ``node`` is computed, and the largest value on its way."""
    if id(node) in memo:
        return memo[id(node)]
    if node.eqn is None:
        array = node.value
        text = f"v{array.dtype.str}{array.shape}{hashlib.sha1(array.tobytes()).hexdigest()}"
        found = (hashlib.sha1(text.encode()).hexdigest(), node.size)
    else:
        ins = [_key(i, memo) for i in node.ins]
        text = f"{node.eqn.primitive.name}{node.eqn.params!r}{node.index}{[k for k, _ in ins]}"
        found = (hashlib.sha1(text.encode()).hexdigest(), max([node.size, *(s for _, s in ins)]))
    memo[id(node)] = found
    return found


def _evaluate(node: Static, memo: dict[int, Any]) -> Any:
    if node.eqn is None:
        return node.value
    if id(node) not in memo:
        outs = node.eqn.primitive.bind(*(_evaluate(i, memo) for i in node.ins), **node.eqn.params)
        memo[id(node)] = outs if node.eqn.primitive.multiple_results else [outs]
    return memo[id(node)][node.index]


def _allowed(array: np.ndarray) -> np.ndarray | None:
    """The pairs a mask allows (the module's docstring), None where its values allow no reading."""
    if array.dtype.kind == "f" and array.min() <= _MASKED_BIAS:
        allowed = array > array.min()
        return allowed if np.diagonal(allowed, axis1=-2, axis2=-1).all() else None
    diagonal = np.diagonal(array, axis1=-2, axis2=-1)
    first = diagonal.flat[0]
    if not (diagonal == first).all():
        return None
    allowed = array == first
    rest = array[~allowed]
    return allowed if not rest.size or (rest == rest.flat[0]).all() else None


def _describe(allowed: np.ndarray, share: Fraction) -> str:
    """A mask in words: a sliding window of W keys where it is one."""
    slices, t = allowed.shape[0], allowed.shape[-1]
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    window = int(allowed[0, -1].sum())
    if (allowed == allowed[:1]).all() and (allowed[0] == ((i >= j) & (i - j < window))).all():
        return f"sliding window of {window} keys ({t} x {t})"
    return f"a mask allowing {int(allowed.sum()):,} of {slices * t * t:,} pairs (kept {share})"


def mask_share(candidates: Sequence[Static]) -> tuple[Fraction | None, str]:
    """The share of an attention's products ``attention_flops="causal"`` keeps (the module's docstring)
    under the masks ``candidates`` (each restricts the pairs), and the mask in words; None and why
    where the mask is not evaluated (halved as a causal mask). Each distinct mask is evaluated once."""
    if not candidates:
        return None, "not evaluated: the mask depends on the data or on a loop's counter"
    candidates = [_unbroadcast(c) for c in candidates]
    memo: dict[int, tuple[str, int]] = {}
    keys = [_key(c, memo) for c in candidates]
    largest = max(size for _, size in keys)
    if largest > EVALUATED_LARGEST:
        return None, (f"not evaluated: a value of {largest:,} elements on its way, past the "
                      f"{EVALUATED_LARGEST:,} evaluated")
    key = "".join(sorted(k for k, _ in keys))
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_LARGEST:
            _CACHE.clear()
        _CACHE[key] = _share([c for c in candidates])
    return _CACHE[key]


def _unbroadcast(node: Static) -> Static:
    """A mask before it is broadcast over the scores' batch and heads (``jnp.where``'s broadcast to
    ``[B, H, T, T]``): the same pairs allowed, a share the same, evaluated at ``T x T``."""
    while node.eqn is not None and node.eqn.primitive.name == "broadcast_in_dim":
        into, out = node.eqn.params["broadcast_dimensions"], node.eqn.outvars[0].aval.shape
        shape = node.eqn.invars[0].aval.shape
        if len(shape) < 2 or tuple(into[-2:]) != (len(out) - 2, len(out) - 1) or tuple(shape[-2:]) != out[-2:]:
            break
        node = node.ins[0]
    return node


def _share(candidates: Sequence[Static]) -> tuple[Fraction | None, str]:
    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError:  # no CPU backend: the default device evaluates
        cpu = None
    memo: dict[int, Any] = {}
    allowed = None
    for candidate in candidates:
        with jax.default_device(cpu), jax.ensure_compile_time_eval():
            array = np.asarray(_evaluate(candidate, memo))
        if array.ndim < 2 or array.shape[-1] != array.shape[-2] or array.shape[-1] < 2:
            return None, f"not evaluated: a mask of shape {array.shape}, no square T x T one"
        mask = _allowed(array)
        if mask is None:
            return None, "not evaluated: its values are no mask (neither two values nor a large negative bias)"
        try:
            allowed = mask if allowed is None else allowed & mask
        except ValueError:
            return None, "not evaluated: masks of shapes that do not broadcast"
    t = allowed.shape[-1]
    allowed = allowed.reshape(-1, t, t)
    rows = np.arange(t)
    beside = np.where(rows + 1 < t, rows + 1, rows - 1)  # a neighbour of each diagonal pair
    two_sided = allowed[:, rows, beside] & allowed[:, beside, rows]
    diagonal = int((allowed[:, rows, rows] & ~two_sided).sum())
    share = Fraction(2 * int(allowed.sum()) - diagonal, 2 * allowed.shape[0] * t * t)
    return share, _describe(allowed, share)


def window_share(length_q: int, length_k: int, window: tuple[int | None, int | None]
                 ) -> tuple[Fraction | None, str]:
    """`mask_share` of a fused kernel's window: query ``i`` sees the keys ``i - left .. i + right``
    (``window`` (left, right), None unbounded) of ``length_q == length_k == T`` positions, counted in
    closed form (no ``T x T`` array): ``A = sum_i (min(T-1, i+r) - max(0, i-l) + 1)
    = T (T - 1) / 2 + T r - r (r + 1) / 2 - (T - 1 - l) (T - l) / 2 + T`` (``l``, ``r`` clipped to
    ``T - 1``); its diagonal is bounded (``D = T``) where one side sees no key (``l = 0`` or ``r = 0``),
    else ``D = 0``. A causal window (``l >= T - 1``, ``r = 0``) keeps half; a sliding window of
    ``W = l + 1 < T`` keys, ``(T W - W (W - 1) / 2 - T / 2) / T²``. None and why where the lengths
    differ (no square ``T x T`` mask) or a side is negative: halved as a causal mask."""
    left, right = window
    t = length_q
    if length_q != length_k or t < 2:
        return None, f"not evaluated: a window over {length_q} queries and {length_k} keys, no square T x T one"
    if any(side is not None and side < 0 for side in window):
        return None, f"not evaluated: a window {window} with a negative side"
    l, r = (t - 1 if side is None else min(side, t - 1) for side in (left, right))
    allowed = t * (t - 1) // 2 + t * r - r * (r + 1) // 2 - (t - 1 - l) * (t - l) // 2 + t
    diagonal = t if l == 0 or r == 0 else 0
    share = Fraction(2 * allowed - diagonal, 2 * t * t)
    if r == 0 and l < t - 1:
        return share, f"sliding window of {l + 1} keys ({t} x {t})"
    return share, f"a mask allowing {allowed:,} of {t * t:,} pairs (kept {share})"
