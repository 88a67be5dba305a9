"""The cost-rule registry and the result type every rule returns.

`register` binds a rule to primitives (one rule per primitive, loudly: a second
is a `DuplicateRuleError`), `get_rule` finds it, `ZERO_COST` lists the
structural primitives that cost nothing, and `Cost` adds and scales so that the
interpreter only sums. ``FLOPS_PER_FMA`` is the one place the multiply-add
convention is declared. The rules themselves, with the conventions they follow,
are in `xla_cost.count.rules` and `xla_cost.count.random_rules`.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from xla_cost.step.trees import nbytes

__all__ = [
    "FLOPS_PER_FMA",
    "Cost",
    "ZERO_COST",
    "MOVING_COLLECTIVES",
    "COLLECTIVES",
    "Aval",
    "Rule",
    "DuplicateRuleError",
    "register",
    "get_rule",
    "takes_values",
    "registered_primitives",
    "size",
    "io_bytes",
    "MATRIX_PRODUCTS",
]

FLOPS_PER_FMA = 2
"""A fused multiply-add is two floating-point operations (one mul, one add)."""

MATRIX_PRODUCTS: frozenset[str] = frozenset({"dot_general", "conv_general_dilated", "ragged_dot_general"})
"""The primitives whose whole work is matrix products, for the matrix units (tensor cores, the
MXU): `xla_cost.analysis.costs.MATMULS` and the per-layer checks read it. A fused primitive's
products inside it are its `Cost.products` instead."""


@dataclasses.dataclass(frozen=True)
class Cost:
    """Operation counts of one equation, or of a sum of equations.

    Attributes:
      flops: floating-point operations (a multiply-add is `FLOPS_PER_FMA`).
      transcendentals: exp, log, tanh, sqrt, rsqrt, power, ... (not FLOP).
      bytes_accessed: bytes read and written, every operand once (unfused).
      products: of ``flops``, those of the matrix products a fused primitive
        runs inside it (fused attention's ``Q K^T`` and ``P V``,
        `xla_cost.count.attention`): work for the matrix units, as a
        ``dot_general``'s whole ``flops`` are; 0 for every other primitive.
        A detail of ``flops``, not compared (a per-layer row read back from
        JSON, which does not keep it, equals the one counted).
      float8: of ``flops``, those of matrix products whose operands are both
        8-bit floats (``float8_e4m3fn``, ``float8_e5m2``): work for FP8 tensor
        cores, priced at a device's float8 peak; a detail of ``flops`` as
        ``products`` is, not compared.
      attention: of ``flops``, those of a ``dot_general`` that is dense attention's
        (``Q K^T``, ``P V`` and their gradients) by the data flow
        (`xla_cost.count.attention_flow`); a detail of ``flops``, not compared.
      causal: of ``attention`` (or of a fused attention primitive's ``products``), those of an
        attention whose scores a causal mask masks (`xla_cost.count.attention_flow.attention_masks`):
        what ``attention_flops="causal"`` halves; a detail of ``flops``, not compared.
      unseen: of ``attention`` (or ``products``), those of an attention whose mask the data flow
        cannot see (passed in as an argument): halved too, and said so; a detail, not compared.
      window: of ``causal``, what ``attention_flops="causal"`` leaves out beyond half of them where
        the mask was evaluated (`xla_cost.count.mask_values`: a sliding window of W < T keys keeps
        ``(T W - W (W - 1) / 2 - T / 2) / T²`` of them, so ``causal (1/2 - that)``); 0 for a causal
        mask's; a detail, not compared.
    """

    flops: int = 0
    transcendentals: int = 0
    bytes_accessed: int = 0
    products: int = dataclasses.field(default=0, compare=False)
    float8: int = dataclasses.field(default=0, compare=False)
    attention: int = dataclasses.field(default=0, compare=False)
    causal: int = dataclasses.field(default=0, compare=False)
    unseen: int = dataclasses.field(default=0, compare=False)
    window: int = dataclasses.field(default=0, compare=False)

    def __add__(self, other: "Cost") -> "Cost":
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(
            self.flops + other.flops,
            self.transcendentals + other.transcendentals,
            self.bytes_accessed + other.bytes_accessed,
            self.products + other.products,
            self.float8 + other.float8,
            self.attention + other.attention,
            self.causal + other.causal,
            self.unseen + other.unseen,
            self.window + other.window,
        )

    def __sub__(self, other: "Cost") -> "Cost":
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(
            self.flops - other.flops,
            self.transcendentals - other.transcendentals,
            self.bytes_accessed - other.bytes_accessed,
            self.products - other.products,
            self.float8 - other.float8,
            self.attention - other.attention,
            self.causal - other.causal,
            self.unseen - other.unseen,
            self.window - other.window,
        )

    def __mul__(self, times: int) -> "Cost":
        if not isinstance(times, int) or isinstance(times, bool):
            return NotImplemented
        return Cost(
            self.flops * times, self.transcendentals * times, self.bytes_accessed * times,
            self.products * times, self.float8 * times, self.attention * times,
            self.causal * times, self.unseen * times, self.window * times,
        )

    __rmul__ = __mul__


class Aval(Protocol):
    """What a rule may read of an operand: jax's ``ShapedArray`` satisfies it."""

    shape: tuple[int, ...]
    dtype: Any


class Rule(Protocol):
    """A cost rule; it returns None when it cannot cost these operands or params
    (another PRNG implementation, a reducer with an unknown primitive): the
    interpreter then reports the primitive as unsupported.

    Besides the equation's params, the interpreter passes ``constant_operands``:
    for each operand, whether it is a compile-time constant (a literal, or
    computed from literals only), which XLA folds into the operation; and, to a
    rule that names it (`takes_values`), ``constant_values`` where some operand is a
    small constant integer array: per operand its NumPy value, or None (a
    ``ragged_dot``'s constant group sizes, which say how many rows it computes).
    """

    def __call__(self, ins: Sequence[Aval], outs: Sequence[Aval], **params: Any) -> Cost | None: ...


class DuplicateRuleError(ValueError):
    """A second rule was registered for a primitive that already has one."""


_RULES: dict[str, Rule] = {}


def _primitive_name(primitive: Any) -> str:
    name = primitive if isinstance(primitive, str) else getattr(primitive, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(
            "Expected a jax Primitive or a primitive name (str), got "
            f"{primitive!r} instead. Pass e.g. `jax.lax.dot_general_p` or 'dot_general'."
        )
    return name


def register(*primitives: Any) -> Callable[[Rule], Rule]:
    """Registers the decorated function as the cost rule of ``primitives``.

    Args:
      *primitives: jax primitives or their names.

    Raises:
      DuplicateRuleError: a primitive already has a rule or is in `ZERO_COST`.

    Example::

      @register("my_matmul")
      def _my_matmul(ins, outs, **_):
          (m, k), (_, n) = ins[0].shape, ins[1].shape
          return Cost(flops=FLOPS_PER_FMA * m * k * n)
    """
    names = [_primitive_name(p) for p in primitives]

    def decorator(rule: Rule) -> Rule:
        for name in names:
            if name in _RULES or name in ZERO_COST:
                raise DuplicateRuleError(
                    f"Expected one cost rule per primitive, got a second one for {name!r} "
                    f"({getattr(rule, '__name__', rule)!r}). Remove one of them."
                )
            _RULES[name] = rule
        return rule

    return decorator


def takes_values(rule: Rule) -> bool:
    """Whether ``rule`` names a ``constant_values`` parameter (`Rule`)."""
    try:
        return "constant_values" in inspect.signature(rule).parameters
    except (TypeError, ValueError):  # a callable without a signature
        return False


def get_rule(primitive: Any) -> Rule | None:
    """The rule registered for ``primitive`` (a primitive or its name), or None."""
    return _RULES.get(_primitive_name(primitive))


def registered_primitives() -> frozenset[str]:
    """Names of all primitives with a rule (the coverage test checks every
    primitive Flax produces against it)."""
    return frozenset(_RULES)


# --------------------------------------------------------------------------- helpers


def size(aval: Aval) -> int:
    """Elements of an operand."""
    return int(math.prod(aval.shape))


def io_bytes(ins: Sequence[Aval], outs: Sequence[Aval]) -> int:
    """Unfused traffic: each operand read once, each result written once."""
    return sum(nbytes(a) for a in ins if hasattr(a, "shape")) + sum(
        nbytes(a) for a in outs if hasattr(a, "shape")
    )


# ------------------------------------------------------------------ zero-cost set

ZERO_COST: frozenset[str] = frozenset(
    {
        # shape and layout
        "reshape", "squeeze", "expand_dims", "broadcast_in_dim", "transpose", "rev",
        "concatenate", "pad", "slice", "dynamic_slice", "dynamic_update_slice",
        "copy", "copy_p", "iota",
        "split",
        # markers and no-ops
        "stop_gradient", "sharding_constraint", "device_put", "optimization_barrier",
        "name", "pvary", "mesh_cast", "reshard", "empty", "empty2",
        "create_token", "after_all", "tie", "dce_sink", "platform_index",
        "layout_constraint", "zeros_like", "reduced_vary_cast_p", "vary_unreduced_cast_p",
        "shard_alike",
        # stacking, unstacking and tiling are concatenations, slices and broadcasts
        "stack", "unstack", "tile",
        # key arrays relabelled as their uint32 data and back, or copied; the
        # hashing primitives (random_seed, random_split, random_fold_in,
        # random_bits) have rules below
        "random_wrap", "random_unwrap", "random_clone", "to_edtype", "from_edtype",
        # host-side debugging hooks: no device arithmetic
        "debug_callback", "debug_print", "inspect_sharding",
        # collectives that move data without arithmetic: an all-to-all of sizes known at run time (an
        # expert-parallel MoE's dispatch, MaxText's), an all-gather of shard_map's invariant form,
        # a broadcast from one device, a pipeline's send and receive
        "all_gather", "all_to_all", "ppermute", "axis_index",
        "ragged_all_to_all", "all_gather_invariant", "pbroadcast", "psend", "precv",
    }
)
"""Primitives that move or relabel data and do no arithmetic (XLA: 0 FLOP)."""

MOVING_COLLECTIVES: frozenset[str] = frozenset({
    "all_gather", "all_to_all", "ppermute", "ragged_all_to_all", "all_gather_invariant", "pbroadcast", "psend",
    "precv",
})
"""The collectives of `ZERO_COST`: they move data between devices and do no arithmetic; a count
still records how often each runs (`xla_cost.count.interpret`), for the step's collectives."""

COLLECTIVES: frozenset[str] = MOVING_COLLECTIVES | {
    "psum", "pmax", "pmin", "psum_scatter", "reduce_scatter", "psum_invariant", "all_reduce",
}
"""Primitives that communicate between the devices of a mesh axis: those that move data and those
that reduce it (an all-reduce counted as one operation per element, XLA's convention)."""

