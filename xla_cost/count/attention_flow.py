"""Attention's matrix products found by following the data through a jaxpr, whatever
modules (or none) the code has: `attention_products`.

Dense attention written out (pure JAX: ``jnp.einsum`` under a ``jax.named_scope``,
``jax.nn.dot_product_attention``'s XLA implementation, a Linen or NNX module with a
parameter of its own such as gpt-oss's sinks) is, in the data flow:

* two matrix products between activations: values that depend on the program's data
  inputs, or that come from its weights alone through a matrix product (learned queries after
  their query projection: DETR's object queries, whose first decoder layer attends with no
  data at all, Perceiver's latents, a Q-Former's query tokens), each with batch dimensions
  (batch, heads); a weight itself, or a view of it (reshaped, sliced, broadcast), is none; the
  scores ``S = Q K^T`` and the outputs ``O = P V``;
* between them, the softmax: ``P`` is computed from ``S`` by an ``exp`` and other
  operations that are no matrix product (scale, mask, max, subtract, sum, divide,
  concatenate a sink, cast).

So a product between activations with batch dimensions is attention when one of its
operands comes, through no other matrix product, from an ``exp`` of a value that comes,
through no other matrix product, from such a product (``P V``); so is every such
product its operands come from (``Q K^T``). The ``exp`` must be a softmax that such a
product reads in the pass that computes it (forward, or backward: the name stack's
``jvp``/``transpose``): a loss's softmax of a product between activations (an MoE layer
whose combine is the model's output) is read by the backward pass's products alone.
The backward pass has the same shape: ``dV = P^T dO`` reads ``P``; ``dQ = dS K`` and
``dK = dS^T Q`` read ``dS = P (dP - sum(P dP))``, which comes from ``P`` and from
``dP = dO V^T``; all four are attention.

Attention normalised without an ``exp`` (sigmoid attention, Apple 2024's
``P = sigmoid(S / sqrt(d) + b)``, whose ``jax.nn.sigmoid`` lowers to ``logistic``; ReLU and
ReLU² attention, ``max(S, 0)`` and its ``square``/``integer_pow``) is found the same way,
but ``logistic``, ``max`` with a constant and a square are everywhere in a network (SiLU
experts, ReLU MLPs, a norm's ``x**2``), so one of them seeds attention only where the data
has attention's shape, which an MoE layer's products do not (an ``exp`` needs no shape: one
between products between activations is a softmax of scores, a router's is of a product
with a weight):

* the normaliser's input comes from a *score*: a product between activations with batch
  dimensions whose two operands each keep free dimensions of more than one element (query
  positions x key positions), both operands coming from a matrix product (projections of
  activations) or being data inputs known as such (with no weights named an input may be a
  weight, so ``x_e W_1`` of an expert, an input ``W_1``, is no score);
* a product between activations reads the normalised tensor in its own pass with all of it
  (as many elements as the score) and contracts its query or key positions (as many elements
  as either free side of the score), as ``P V`` contracts the keys with values of the same
  sequence.

An MoE layer's dispatch and combine masks come from a ``top_k`` or a softmax over experts of
a router's product with a weight (no score), and what its one-hot dispatch products compute
(``[tokens, experts, capacity]``) reaches no normaliser before the experts' products with
weights; its experts' ``silu``/ReLU read products with a weight. Once such a normaliser is
read so, every product between activations one of whose operands comes, through no other
product, from its score is attention too, in any pass: ReLU's backward masks ``dP`` by
``S > 0`` and a square's by ``2 S``, reading ``S`` and not ``P``, so ``dQ = dS K`` and
``dK = dS^T Q`` are found from ``S`` (and ``dP`` as their origin).

What this leaves out: a weight's product (one operand a weight or a view of it, unprojected),
an MLP's and a router's (a router's softmax is of a product with a weight), an MoE
layer's expert products and their weight gradients (``x_e^T dy_e`` reads no softmax of
scores), a contrastive loss's logits (no batch dimension). Linear attention
(``phi(Q) (phi(K)^T V)``) forms no T x T score matrix at all: it has no quadratic term
and none of its products is attention here. Not found either: an unbatched single-head
attention (no batch dimension), and a non-softmax attention whose queries and keys are the
program's inputs themselves when no weights are named. The weights are the program's inputs
the caller names (a model's parameters, their gradients, an optimizer's state); with none
named every input is data.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core

from xla_cost.count.attention import splash_mask
from xla_cost.count.mask_values import HALF, Static, constant, mask_share, result, window_share
from xla_cost.count.primitives import CALL_LIKE, CALL_PARAMS
from xla_cost.count.stacks import classify_pass

__all__ = ["attention_products", "SOFTMAX_EXP", "NORMALISERS", "attention_masks", "attention_windows", "CAUSAL",
           "FULL", "UNSEEN"]

SOFTMAX_EXP: frozenset[str] = frozenset({"exp", "exp2"})
"""The primitives of a softmax's exponential (``exp2``: a flash attention written with base 2)."""

NORMALISERS: frozenset[str] = frozenset({"logistic", "max", "integer_pow", "square", "mul"})
"""The other primitives that may normalise attention's scores (`_normaliser` says when they do):
a sigmoid's ``logistic``, ReLU's ``max`` with a constant, ReLU²'s square (``integer_pow`` with
``y=2``, ``square``, ``mul`` of a value by itself)."""

_PRODUCTS = frozenset({"dot_general", "conv_general_dilated", "ragged_dot_general",
                       "dot_product_attention_fwd_wrapper", "dot_product_attention_bwd_wrapper", "pallas_call"})
"""Primitives whose results come from no operand elementwise: the data's origins stop there."""

_Path = tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class _Value:
    """What is known of one variable: whether it depends on a data input (``data``); the
    products between activations it comes from through no other product (``origins``, their
    paths); the normalisers (an ``exp``, `NORMALISERS`) of values with such origins among its
    sources (``softmax``); whether it comes from a matrix product or a data input known as
    such (``derived``: a score's operands)."""

    data: bool = False
    origins: frozenset[_Path] = frozenset()
    softmax: frozenset[_Path] = frozenset()
    derived: bool = False

    def __or__(self, other: "_Value") -> "_Value":
        return _Value(self.data or other.data, self.origins | other.origins, self.softmax | other.softmax,
                      self.derived or other.derived)


@dataclasses.dataclass
class _Found:
    """What the walk meets: each normaliser with its pass (``exps``); the scores (``scores``: the
    score's elements, its two free sides'); the scores each normaliser other than an ``exp``
    normalises (``normalised``); each product between activations that reads a normaliser, with
    its pass, the normalisers, the origins its operands come from and the normalisers it reads
    with attention's shape (``readers``); every product between activations and those origins
    (``between``)."""

    exps: dict[_Path, str | None] = dataclasses.field(default_factory=dict)
    scores: dict[_Path, tuple[int, int, int]] = dataclasses.field(default_factory=dict)
    normalised: dict[_Path, frozenset[_Path]] = dataclasses.field(default_factory=dict)
    readers: list[tuple[_Path, str | None, frozenset[_Path], frozenset[_Path], frozenset[_Path]]] = (
        dataclasses.field(default_factory=list))
    between: list[tuple[_Path, frozenset[_Path]]] = dataclasses.field(default_factory=list)

    def products(self) -> frozenset[_Path]:
        """Attention's products: those that read a normaliser read in its own pass (with attention's
        shape), and their origins; those that read the scores of such a normaliser other than an ``exp``."""
        read = {seed for _, pass_, _, _, fits in self.readers for seed in fits if self.exps.get(seed) == pass_}
        found: set[_Path] = set()
        for path, _, seeds, origins, _ in self.readers:
            if seeds & read:
                found.add(path)
                found.update(origins)
        scores = frozenset().union(*(self.normalised.get(seed, ()) for seed in read))
        for path, origins in self.between:
            if origins & scores:
                found.add(path)
                found.update(origins)
        return frozenset(found)

    def fits(self, seed: _Path, shape: Sequence[int], contracting: Sequence[int]) -> bool:
        """Whether a product reads the normaliser ``seed`` with attention's shape through an operand of
        ``shape`` contracting its dimensions ``contracting`` (an ``exp``: always)."""
        if seed not in self.normalised:
            return True
        size, contracted = _elements(shape), _elements([shape[d] for d in contracting])
        return any(self.scores[score][0] == size and contracted in self.scores[score][1:]
                   for score in self.normalised[seed])


_NOTHING = _Value()


def attention_products(jaxpr: Any, weights: Sequence[bool] | None = None) -> frozenset[_Path]:
    """The paths (as `xla_cost.count.interpret.count_jaxpr` walks: an index per level,
    ``"body"``/``"cond"`` of a while loop, ``"b0"``.. of a cond's branches) of the
    ``dot_general`` equations of ``jaxpr`` that are attention's products (the module's
    docstring), forward and backward. ``weights``: per input variable of ``jaxpr``, whether it
    is a weight (a parameter, its gradient, an optimizer's state) rather than data; None:
    every input is data."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    named = weights is not None and len(weights) == len(inner.invars)
    flags = list(weights) if named else [False] * len(inner.invars)
    found = _Found()
    _walk(inner, (), "", [_Value(data=not w, derived=named and not w) for w in flags], found)
    return found.products()


def _walk(jaxpr: Any, base: _Path, prefix: str, ins: Sequence[_Value], found: _Found) -> list[_Value]:
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    env: dict[Any, _Value] = dict(zip(jaxpr.invars, ins))

    def read(var: Any) -> _Value:
        return _NOTHING if isinstance(var, jex_core.Literal) else env.get(var, _NOTHING)

    for index, eqn in enumerate(jaxpr.eqns):
        path, name = (*base, index), eqn.primitive.name
        scope = str(eqn.source_info.name_stack)
        stack = f"{prefix}/{scope}" if prefix and scope else prefix or scope
        operands = [read(v) for v in eqn.invars]
        outs = _equation(eqn, name, path, stack, operands, found)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _join(values: Sequence[_Value]) -> _Value:
    joined = _NOTHING
    for value in values:
        joined = joined | value
    return joined


def _equation(eqn: Any, name: str, path: _Path, stack: str, operands: list[_Value], found: _Found) -> list[_Value]:
    """The values of ``eqn``'s results, adding the attention products met to ``found``."""
    params, n = eqn.params, len(eqn.outvars)
    if name in CALL_LIKE:
        sub = next((params[p] for p in CALL_PARAMS if p in params), None)
        inner = getattr(sub, "jaxpr", sub)
        if inner is not None and len(inner.invars) == len(operands) and len(inner.outvars) == n:
            return _walk(inner, path, stack, operands, found)
    elif name == "scan":
        consts, carried = int(params["num_consts"]), int(params["num_carry"])
        return _loop(params["jaxpr"], path, stack, operands, consts, carried, found)
    elif name == "while":
        cond_n, body_n = int(params["cond_nconsts"]), int(params["body_nconsts"])
        carry = _loop(params["body_jaxpr"], (*path, "body"), stack, operands[cond_n:], body_n, n, found)
        _walk(params["cond_jaxpr"], (*path, "cond"), stack, [*operands[:cond_n], *carry], found)
        return carry
    elif name == "cond":
        results = [_walk(b, (*path, f"b{k}"), stack, operands[1:], found) for k, b in enumerate(params["branches"])]
        return [_join(values) for values in zip(*results)] if results else [_join(operands)] * n
    elif name in _PRODUCTS:
        return [_product(eqn, name, path, stack, operands, found)] * n
    size = _elements(getattr(eqn.outvars[0].aval, "shape", ())) if n else 0
    joined = _join([_reaching(var, value, size, found) for var, value in zip(eqn.invars, operands)])
    if name in SOFTMAX_EXP and joined.origins:
        found.exps[path] = classify_pass(stack)
        joined = dataclasses.replace(joined, softmax=joined.softmax | {path})
    elif name in NORMALISERS and _normaliser(eqn, name, operands):
        scores = frozenset(s for s in joined.origins if s in found.scores and found.scores[s][0] == size)
        if scores:
            found.exps[path] = classify_pass(stack)
            found.normalised[path] = scores
            joined = dataclasses.replace(joined, softmax=joined.softmax | {path})
    return [joined] * n


def _reaching(var: Any, value: _Value, size: int, found: _Found) -> _Value:
    """An operand's value as it reaches a result of ``size`` elements: a normaliser other than an
    ``exp`` does not pass a reduction or a slice (a result smaller than the operand): a statistic
    of its tensor (a norm's ``mean(x**2)``) is no normalised score."""
    dropped = value.softmax & found.normalised.keys()
    if dropped and _elements(getattr(var.aval, "shape", ())) > size:
        return dataclasses.replace(value, softmax=value.softmax - dropped)
    return value


def _normaliser(eqn: Any, name: str, operands: list[_Value]) -> bool:
    """Whether ``eqn`` (a `NORMALISERS` primitive) is one: a ``logistic``; a ``max`` with a constant
    (ReLU's, ``max(S, 0)``); a square (``integer_pow`` with ``y=2``, ``square``, ``x * x``)."""
    if name == "max":
        return any(not o.data for o in operands)
    if name == "integer_pow":
        return eqn.params.get("y") == 2
    if name == "mul":
        a, b = eqn.invars
        return a is b and not isinstance(a, jex_core.Literal)
    return True


def _elements(shape: Sequence[int]) -> int:
    """The number of elements of an array of ``shape``."""
    count = 1
    for extent in shape:
        count *= int(extent)
    return count


def _product(eqn: Any, name: str, path: _Path, stack: str, operands: list[_Value], found: _Found) -> _Value:
    """A matrix product's result: the origin of what follows when it is one between activations
    with batch dimensions (a score too when both operands are derived and keep more than one element
    of free dimensions each), attention when one of its operands comes from a normaliser."""
    data = any(o.data for o in operands)
    if name != "dot_general" or len(operands) < 2:
        return _Value(data=data, derived=True)
    lhs, rhs = operands[:2]
    (lhs_contracting, rhs_contracting), (batch, rhs_batch) = eqn.params["dimension_numbers"]
    if not (_activation(lhs) and _activation(rhs) and batch):
        return _Value(data=data, derived=True)
    shapes = [tuple(v.aval.shape) for v in eqn.invars[:2]]
    sides = [_elements([extent for d, extent in enumerate(shape) if d not in {*contracting, *batched}])
             for shape, contracting, batched in zip(shapes, (lhs_contracting, rhs_contracting), (batch, rhs_batch))]
    if lhs.derived and rhs.derived and lhs_contracting and min(sides) > 1:
        found.scores[path] = (_elements(eqn.outvars[0].aval.shape), *sides)
    if lhs.softmax or rhs.softmax:
        fits = frozenset(seed for value, shape, contracting in zip((lhs, rhs), shapes,
                                                                   (lhs_contracting, rhs_contracting))
                         for seed in value.softmax if found.fits(seed, shape, contracting))
        found.readers.append((path, classify_pass(stack), lhs.softmax | rhs.softmax, lhs.origins | rhs.origins, fits))
    found.between.append((path, lhs.origins | rhs.origins))
    return _Value(data=data, origins=frozenset({path}), derived=True)


def _activation(value: _Value) -> bool:
    """Whether a product's operand is an activation: a value that depends on the data, or one
    computed from weights alone through a matrix product (learned queries after their query
    projection: DETR's object queries, Perceiver's latents, a Q-Former's query tokens); not a raw
    weight (an input named a weight, or a view of one: reshaped, sliced, broadcast, cast) nor a
    constant."""
    return value.data or value.derived


def _loop(body: Any, path: _Path, stack: str, operands: Sequence[_Value], consts: int, carried: int,
          found: _Found) -> list[_Value]:
    """A loop body's results (a scan's carry then its stacked outputs; a while loop's carry), its
    carry's values joined over the iterations until they hold (at most one pass per bit known)."""
    ins = list(operands)
    for _ in range(5):
        outs = _walk(body, path, stack, ins, found)
        carry = [a | b for a, b in zip(ins[consts:consts + carried], outs[:carried])]
        if carry == ins[consts:consts + carried]:
            return outs
        ins[consts:consts + carried] = carry
    return outs


# ------------------------------------------------------------------ masks: causal or not

CAUSAL, FULL, UNSEEN = "causal", "full", "unseen"
"""How `attention_masks` classes each attention: its scores masked causally (a mask compares two
positions), masked by data alone or not at all (every pair is the model's), or masked by what the
data flow cannot see (a mask or a bias passed in as an argument)."""

_IOTA, _CAUSAL, _UNSEEN, _DATA = 1, 2, 4, 8
_LARGEST = 1 << 24  # elements of the largest constant read as a mask (a weight closed over is none)
_ORDER = frozenset({"lt", "le", "gt", "ge"})
_FUSED_MASKED = frozenset({"dot_product_attention_fwd_wrapper", "dot_product_attention_bwd_wrapper",
                           "dot_product_attention_fwd", "dot_product_attention_bwd"})


def attention_masks(jaxpr: Any, weights: Sequence[bool] | None = None) -> dict[_Path, str]:
    """Each attention product's mask (`CAUSAL`, `FULL`, `UNSEEN`), by its path as `attention_products`
    gives it, and each fused attention call's (cuDNN's primitives, jax's splash kernels).

    A dense attention's class is its softmax's: what the ``exp`` reads besides the scores. A value
    that comes from two positions compared in order (``<``, ``<=``, ``>``, ``>=``: two values both
    from an ``iota``: ``jnp.arange``, ``broadcasted_iota``, ``jnp.tril``, flax's
    ``make_causal_mask``), or a constant that is lower-triangular (one value on and below the
    diagonal, another above), is a causal mask, whatever it is combined with (a padding mask from
    the tokens: ``and``, ``*``) and however it meets the scores (``where``/``select``, an added
    large negative bias): `CAUSAL`. Without such a mask, a mask of the integer data (token ids
    compared with the padding id) or none: `FULL`. A float or boolean data input (a mask or a bias
    passed in), integer data compared with each other in order (positions passed in), a constant of
    unknown value: `UNSEEN`. A mask applied after the ``exp`` is not seen. Fused attention: cuDNN's
    ``mask_type`` (causal) or ``sliding_window_length``, or its bias operand as above; a splash kernel
    by the mask its scope names (`xla_cost.count.attention.SPLASH_MASK_SCOPE`: causal, or a local
    window; full; none named, or a window open to the future over keys as many as the queries:
    `UNSEEN`)."""
    return attention_windows(jaxpr, weights)[0]


def attention_windows(jaxpr: Any, weights: Sequence[bool] | None = None
                      ) -> tuple[dict[_Path, str], dict[_Path, tuple[Fraction | None, str]]]:
    """`attention_masks`, and for each `CAUSAL` dense attention product whose mask is no plain causal
    one, the share of its products ``attention_flops="causal"`` keeps and the mask in words
    (`xla_cost.count.mask_values.mask_share`: a sliding window of W keys keeps
    ``(T W - W (W - 1) / 2 - T / 2) / T²``), or None and why the mask was not evaluated (halved).
    The part of a mask made from ``iota`` s and constants alone is evaluated (a padding mask from the
    tokens combined with it is not), once per distinct mask (a scanned layer's, every iteration's).
    A fused call's window (a splash ``LocalMask``, cuDNN's ``sliding_window_length``) is counted in
    closed form over the sequence lengths of its operands (`xla_cost.count.mask_values.window_share`)."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    flags = list(weights) if weights is not None and len(weights) == len(inner.invars) else [False] * len(inner.invars)
    found = _Found()
    _walk(inner, (), "", [_Value(data=not w) for w in flags], found)
    walked = _Masks()
    ins = [_Mask(0 if w else _input_flags(v.aval)) for v, w in zip(inner.invars, flags)]
    _mask_walk(jaxpr, (), "", ins, walked)
    products = found.products()
    masks: dict[_Path, str] = dict(walked.fused)
    windows = {path: window for path, window in walked.windows.items()
               if masks.get(path) == CAUSAL and window[0] != HALF}
    rank = {FULL: 0, UNSEEN: 1, CAUSAL: 2}
    for path, _, seeds, origins, _fits in found.readers:
        if path not in products:
            continue
        kind = max((_kind(walked.seen.get(seed, 0)) for seed in seeds), key=rank.__getitem__, default=FULL)
        window = None
        if kind == CAUSAL:
            window = mask_share(list(dict.fromkeys(s for seed in seeds for s in walked.reach.get(seed, ()))))
        for product in (path, *origins):
            if product in products and rank[kind] >= rank[masks.get(product, FULL)]:
                masks[product] = kind
                if window is not None and window[0] != HALF:
                    windows[product] = window
    return masks, windows


class _Mask(NamedTuple):
    """What is known of a variable's mask: its flags (`_IOTA`, `_CAUSAL`, `_UNSEEN`, `_DATA`); how its
    value is computed where no input changes it (``static``); the causal masks made so that meet the
    data on its way (``reach``: `mask_share` evaluates them)."""

    flags: int = 0
    static: Static | None = None
    reach: frozenset[Static] = frozenset()

    def join(self, other: "_Mask") -> "_Mask":
        return _Mask(self.flags | other.flags, None, self.reach | other.reach)


@dataclasses.dataclass
class _Masks:
    """What the mask walk meets: each equation's operands' flags joined (``seen``, non-zero ones) and
    the causal masks made from ``iota`` s and constants that reach them (``reach``); each fused
    attention call's class (``fused``) and, where a window its parameters name bounds it, the share
    ``attention_flops="causal"`` keeps and the window in words (``windows``: `window_share`'s)."""

    seen: dict[_Path, int] = dataclasses.field(default_factory=dict)
    reach: dict[_Path, frozenset[Static]] = dataclasses.field(default_factory=dict)
    fused: dict[_Path, str] = dataclasses.field(default_factory=dict)
    windows: dict[_Path, tuple[Fraction | None, str]] = dataclasses.field(default_factory=dict)


def _kind(flags: int) -> str:
    return CAUSAL if flags & _CAUSAL else UNSEEN if flags & _UNSEEN else FULL


def _input_flags(aval: Any) -> int:
    """A data input's: a float or boolean one may be a mask or a bias passed in (unseen)."""
    kind = getattr(getattr(aval, "dtype", None), "kind", "")
    return _DATA | (_UNSEEN if kind in ("f", "b", "c", "V") else 0)


def _constant_flags(value: Any) -> int:
    """A constant's: causal where lower-triangular (one value on and below the diagonal, another above)."""
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - an opaque constant (a PRNG key): no mask
        return 0
    if array.ndim < 2 or min(array.shape[-2:]) < 2 or array.dtype.kind not in "biuf" or array.size > _LARGEST:
        return 0
    rows, columns = array.shape[-2:]
    above = np.triu(np.ones((rows, columns), bool), k=1 + columns - rows)
    upper, lower = array[..., above], array[..., ~above]
    if upper.size and lower.size and (upper == upper.flat[0]).all() and (lower == lower.flat[0]).all() \
            and upper.flat[0] != lower.flat[0]:
        return _CAUSAL
    return 0


def _mask_walk(jaxpr: Any, base: _Path, prefix: str, ins: Sequence[_Mask], walked: _Masks) -> list[_Mask]:
    """The masks of ``jaxpr``'s results, noting in ``walked`` what each equation reads."""
    consts = getattr(jaxpr, "consts", None)
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    env: dict[Any, _Mask] = dict(zip(jaxpr.invars, ins))
    values = consts if consts is not None and len(consts) == len(jaxpr.constvars) else [None] * len(jaxpr.constvars)
    env.update((v, _Mask(_constant_flags(c), constant(c)) if c is not None
                else _Mask(_UNSEEN if len(v.aval.shape) >= 2 else 0)) for v, c in zip(jaxpr.constvars, values))

    def read(var: Any) -> _Mask:
        if isinstance(var, jex_core.Literal):
            return _Mask(_constant_flags(var.val), constant(var.val))
        return env.get(var, _NO_MASK)

    for index, eqn in enumerate(jaxpr.eqns):
        path, name, params = (*base, index), eqn.primitive.name, eqn.params
        scope = str(eqn.source_info.name_stack)
        stack = f"{prefix}/{scope}" if prefix and scope else prefix or scope
        operands = [read(v) for v in eqn.invars]
        joined = functools.reduce(operator.or_, (o.flags for o in operands), 0)
        static = all(o.static is not None for o in operands) and not eqn.effects
        # a causal mask made from iotas and constants, meeting what the inputs change: the mask to evaluate
        reach = functools.reduce(operator.or_, (o.reach for o in operands), frozenset()) | frozenset(
            o.static for o in operands if not static and o.static is not None and o.flags & _CAUSAL)
        if joined:
            walked.seen[path] = joined
        if reach:
            walked.reach[path] = reach
        n = len(eqn.outvars)
        outs: list[_Mask] | None = None
        if name in CALL_LIKE:
            sub = next((params[p] for p in CALL_PARAMS if p in params), None)
            inner = getattr(sub, "jaxpr", sub)
            if inner is not None and len(inner.invars) == len(operands) and len(inner.outvars) == n:
                outs = _mask_walk(sub, path, stack, operands, walked)
            static = False
        elif name == "scan":
            outs = _mask_loop(params["jaxpr"], path, stack, operands, int(params["num_consts"]),
                              int(params["num_carry"]), walked)
        elif name == "while":
            cond_n, body_n = int(params["cond_nconsts"]), int(params["body_nconsts"])
            outs = _mask_loop(params["body_jaxpr"], (*path, "body"), stack, operands[cond_n:], body_n, n, walked)
        elif name == "cond":
            results = [_mask_walk(b, (*path, f"b{k}"), stack, operands[1:], walked)
                       for k, b in enumerate(params["branches"])]
            outs = [functools.reduce(_Mask.join, values) for values in zip(*results)] if results else None
            static = False
        elif name in _PRODUCTS:
            _fused_mask(eqn, name, path, stack, [o.flags for o in operands], walked)
            outs = [_Mask(0, s) for s in result(eqn, [o.static for o in operands])] if static else [_NO_MASK] * n
        elif name == "iota":
            joined = _IOTA
        elif name in _ORDER and len(operands) == 2:
            lhs, rhs = (o.flags for o in operands)
            if lhs & rhs & _IOTA:
                joined |= _CAUSAL
            elif lhs & rhs & _DATA and not (lhs | rhs) & _IOTA and all(
                    getattr(getattr(v.aval, "dtype", None), "kind", "") in "iu" for v in eqn.invars):
                joined |= _UNSEEN  # positions passed in, compared: a causal mask or not, unseen
        if outs is None:
            statics = result(eqn, [o.static for o in operands]) if static else [None] * n
            outs = [_Mask(joined, s, reach) for s in statics]
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


_NO_MASK = _Mask()


def _mask_loop(body: Any, path: _Path, stack: str, operands: Sequence[_Mask], consts: int, carried: int,
               walked: _Masks) -> list[_Mask]:
    """A loop body's results, its carry's masks joined over the iterations until they hold; the constants
    alone keep their static values (a mask made outside the loop is every iteration's)."""
    ins = [o if k < consts else o._replace(static=None) for k, o in enumerate(operands)]
    outs = ins
    for _ in range(4):
        outs = [o._replace(static=None) for o in _mask_walk(body, path, stack, ins, walked)]
        carry = [a.join(b) for a, b in zip(ins[consts:consts + carried], outs[:carried])]
        if carry == ins[consts:consts + carried]:
            return outs
        ins[consts:consts + carried] = carry
    return outs


def _fused_mask(eqn: Any, name: str, path: _Path, stack: str, operands: Sequence[int], walked: _Masks) -> None:
    """A fused attention call's class: cuDNN's ``mask_type``, ``sliding_window_length`` or bias; a splash
    kernel's scope. A window bounded on a side (a splash ``LocalMask`` (left, right); cuDNN's
    ``sliding_window_length`` W: the keys ``(i - W, i]``, left ``W - 1``, right 0, as jax's
    ``dot_product_attention`` passes ``local_window_size``'s left + 1) is `CAUSAL`, its share counted over
    its operands' sequence lengths (`window_share`); where those differ, a window open to the past alone
    is halved as a causal mask, one open to the future is `UNSEEN`."""
    window: tuple[int | None, int | None] | None = None
    lengths: list[int] | None = None
    if name in _FUSED_MASKED:
        params = eqn.params
        mask = str(getattr(params.get("mask_type"), "name", params.get("mask_type", ""))).upper()
        bias = operands[3] if len(operands) > 3 and getattr(eqn.invars[3].aval, "size", 0) else 0
        sliding = params.get("sliding_window_length") or 0
        window = (int(sliding) - 1, 0) if sliding > 0 else (None, 0) if "CAUSAL" in mask else None
        sequence = 1 if int(getattr(params.get("layout", 0), "value", params.get("layout", 0))) == 0 else 2
        shapes = [tuple(v.aval.shape) for v in eqn.invars[:2]]
        lengths = [s[sequence] for s in shapes] if all(len(s) == 4 for s in shapes) else None
        walked.fused[path] = CAUSAL if window is not None else _kind(bias)
    elif name == "pallas_call" and "splash" in str(eqn.params.get("name", "")):
        window = splash_mask(stack)
        floating = [tuple(v.aval.shape) for v in eqn.invars  # q [..., T, H], k [..., S, H]
                    if jnp.issubdtype(getattr(v.aval, "dtype", np.int8), jnp.floating)][:2]
        lengths = [s[-2] for s in floating] if len(floating) == 2 and min(map(len, floating)) >= 2 else None
        square = lengths is not None and lengths[0] == lengths[1]
        bounded = window is not None and window != (None, None) and (window[1] == 0 or square)
        walked.fused[path] = CAUSAL if bounded else FULL if window == (None, None) else UNSEEN
        window = window if bounded else None
    if window is not None and window != (None, 0):
        walked.windows[path] = window_share(*lengths, window) if lengths else (
            None, "not evaluated: a window over operands of no known sequence length")
