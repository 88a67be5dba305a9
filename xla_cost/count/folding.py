"""XLA's constant folding and algebraic simplification, as the jaxpr interpreter sees them.

`Folding` tracks, for one jaxpr, which values are constants (computed from literals and the
jaxpr's own constants only: the arrays a function closes over, which XLA's program holds as
constants, not arguments) and
which equations XLA turns into their operand (``x + zeros``, ``x * 1``), so that
`xla_cost.count.interpret` counts neither, as XLA's compiled count does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core

from xla_cost.count.primitives import CALL_LIKE

__all__ = ["Folding"]


def _is_number(dtype: np.dtype) -> bool:
    """Whether a literal of ``dtype`` has a scalar value: a bool, an integer or a
    float, the narrow ones included (bfloat16, the float8 and int4 types of
    ml_dtypes, whose NumPy kind is 'V', not 'f' or 'i')."""
    return dtype == np.bool_ or jnp.issubdtype(dtype, np.integer) or jnp.issubdtype(dtype, np.floating)


_FOLDABLE = {
    "broadcast_in_dim": lambda x, **_: x,
    "convert_element_type": lambda x, **_: x,
    "reshape": lambda x, **_: x,
    "neg": lambda x, **_: -x,
    "square": lambda x, **_: x * x,
    "integer_pow": lambda x, *, y, **_: x**y,
    "add": lambda x, y, **_: x + y,
    "sub": lambda x, y, **_: x - y,
    "mul": lambda x, y, **_: x * y,
    "max": lambda x, y, **_: max(x, y),
    "min": lambda x, y, **_: min(x, y),
}
"""Primitives whose value `Folding` tracks when every operand is a known scalar
(or a broadcast of one), so that ``x + zeros`` can be seen to be ``x``."""


class Folding:
    """XLA's constant folding and algebraic simplification, for one jaxpr.

    An equation whose operands are all constants (literals, the jaxpr's
    closed-over constants, or values computed from them only, such as
    ``square(broadcast(0.0))`` in optax's global norm or the square root of a
    closed-over noise-schedule table) is evaluated at compile time: it costs
    nothing. ``x + 0``, ``0 + x``,
    ``x - 0``, ``x * 1``, ``1 * x`` and ``x / 1``, where the constant is a literal
    or a broadcast scalar and ``x`` already has the result's shape, are removed.
    """

    def __init__(self) -> None:
        self.constant: set[Any] = set()
        self.value: dict[Any, float] = {}
        self.arrays: dict[Any, np.ndarray] = {}  # small integer arrays' values (`integer_array`)

    def _known(self, var: Any) -> float | None:
        if isinstance(var, jex_core.Literal):
            array = np.asarray(var.val)
            if array.size != 1 or not _is_number(array.dtype):
                return None
            return float(array.reshape(()))
        return self.value.get(var)

    def _is_constant(self, var: Any) -> bool:
        return isinstance(var, jex_core.Literal) or var in self.constant

    def integer_array(self, var: Any) -> np.ndarray | None:
        """The value of ``var`` where it is a constant integer array of at most `ARRAY_LIMIT`
        elements (a closed-over table, a literal; a ragged_dot's constant group sizes), else None."""
        if isinstance(var, jex_core.Literal):
            return _small_integers(var.val)
        return self.arrays.get(var)

    def describe(self, variables: Sequence[Any]) -> list[tuple[bool, float | np.ndarray | None]]:
        """(is a constant, its scalar value if known, else its value as a small integer array
        if known (`integer_array`)) of each of ``variables``."""
        return [(self._is_constant(v), _either(self._known(v), self.integer_array(v))) for v in variables]

    def seed_constants(self, constvars: Sequence[Any], consts: Sequence[Any] | None = None) -> None:
        """Marks a jaxpr's ``constvars`` as constants: the arrays the traced function
        closes over (a ``functools.partial``'s table, a global), which the compiled
        program holds as literals and XLA folds what is computed from them alone.
        ``consts``, their values where known, give a one-element number's value."""
        values = list(consts) if consts is not None and len(consts) == len(constvars) else [None] * len(constvars)
        for var, const in zip(constvars, values):
            self.constant.add(var)
            try:
                array = np.asarray(const) if const is not None else None
            except Exception:  # noqa: BLE001 - an extended dtype (a PRNG key) has no NumPy value
                array = None
            if array is not None and array.size == 1 and _is_number(array.dtype):
                self.value[var] = float(array.reshape(()))
            elif (integers := _small_integers(array)) is not None:
                self.arrays[var] = integers

    def seed(self, variables: Sequence[Any], known: Sequence[tuple[bool, float | None]]) -> None:
        """Marks ``variables`` known to be constants (`describe`): a called jaxpr's
        inputs that are constants in the caller, a call's constant results."""
        for var, (constant, value) in zip(variables, known):
            if constant:
                self.constant.add(var)
            if isinstance(value, np.ndarray):
                self.arrays[var] = value
            elif value is not None:
                self.value[var] = value

    def fold(self, eqn: Any) -> bool:
        """Whether ``eqn`` is computed at compile time (then it is recorded)."""
        name = eqn.primitive.name
        if name in _NEVER_FOLD or eqn.effects or not eqn.invars:
            return False
        if not all(self._is_constant(v) for v in eqn.invars):
            return False
        self.constant.update(eqn.outvars)
        if (name in _PASSES_ARRAY and len(eqn.outvars) == 1 and jnp.issubdtype(eqn.outvars[0].aval.dtype, np.integer)
                and (array := self.integer_array(eqn.invars[0])) is not None):
            self.arrays[eqn.outvars[0]] = array.reshape(eqn.outvars[0].aval.shape)  # sizes cast to int32, reshaped
        values = [self._known(v) for v in eqn.invars]
        if name in _FOLDABLE and len(eqn.outvars) == 1 and None not in values:
            try:
                self.value[eqn.outvars[0]] = float(_FOLDABLE[name](*values, **eqn.params))
            except (TypeError, ValueError, ArithmeticError):
                pass
        return True

    def is_identity(self, eqn: Any) -> bool:
        """``x + 0``, ``x * 1`` and the like, which XLA's simplifier removes."""
        name, invars = eqn.primitive.name, eqn.invars
        if len(invars) != 2 or name not in ("add", "add_any", "sub", "mul", "div"):
            return False
        a, b = invars
        out_shape = eqn.outvars[0].aval.shape

        def passes(x: Any) -> bool:
            return not isinstance(x, jex_core.Literal) and x.aval.shape == out_shape

        def equals(x: Any, value: float) -> bool:
            return self._known(x) == value

        if name in ("add", "add_any"):
            return (equals(a, 0) and passes(b)) or (equals(b, 0) and passes(a))
        if name == "sub":
            return equals(b, 0) and passes(a)
        if name == "mul":
            return (equals(a, 1) and passes(b)) or (equals(b, 1) and passes(a))
        return equals(b, 1) and passes(a)  # div


ARRAY_LIMIT = 1 << 16
"""The most elements of an integer array whose value `Folding` keeps."""

_PASSES_ARRAY = frozenset({"convert_element_type", "reshape", "copy", "copy_p"})
"""Primitives through which `Folding` follows a constant integer array's value (same elements)."""


def _small_integers(value: Any) -> np.ndarray | None:
    """``value`` as a NumPy integer array of 2 to `ARRAY_LIMIT` elements, else None."""
    try:
        array = np.asarray(value) if value is not None else None
    except Exception:  # noqa: BLE001 - an extended dtype (a PRNG key) has no NumPy value
        return None
    if array is None or not 1 < array.size <= ARRAY_LIMIT or not jnp.issubdtype(array.dtype, np.integer):
        return None
    return array


def _either(scalar: float | None, array: np.ndarray | None) -> float | np.ndarray | None:
    return scalar if scalar is not None else array


_NEVER_FOLD = frozenset(
    {
        "scan", "while", "cond", *CALL_LIKE,
        "random_bits", "random_seed", "random_wrap", "rng_uniform", "rng_bit_generator",
    }
)
"""Never treated as compile-time constants: loops, calls, random numbers."""
