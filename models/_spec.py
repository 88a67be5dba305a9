"""`ModelSpec`: what the zoo registry knows about a model family member."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn

__all__ = ["FP8_FIELD", "ModelSpec", "Published", "lookup_key"]

FP8_FIELD = "fp8"
"""A family that takes ``--dtype float8`` declares a boolean module field of this
name (its projections' and MLPs' products in FP8,
`models._transformer.fp8_dot_general`); `xla_cost.zoo.build_model` sets it, with
bfloat16 for the rest."""

_NOT_SETTINGS = ("parent", "name", "dtype", "param_dtype", FP8_FIELD)
"""Module fields that are not ``--set`` settings: Flax's own, and those ``--dtype`` sets."""

_SIZE_MINIMUM = 1
"""The least value of an integer field that declares none: fields are sizes."""

FLOAT_RANGES: Mapping[str, tuple[float, bool, float]] = {
    "dropout": (0.0, False, 1.0),  # a rate
    "rope_theta": (0.0, True, math.inf),  # RoPE's base wavelength
    "rope_scaling": (0.0, False, math.inf),  # 0: none
    "norm_eps": (0.0, True, math.inf),
    "attn_softcap": (0.0, False, math.inf),  # 0: none
    "final_softcap": (0.0, False, math.inf),  # 0: none
    "query_scale": (0.0, False, math.inf),  # 0: the head dimension's
    "capacity_factor": (0.0, True, math.inf),
}
"""The values the zoo's float fields accept, by field name: (low, whether low itself
is excluded, high); a field not named takes any finite value."""


def float_range(key: str) -> tuple[float, bool, float]:
    """The range of float field ``key`` (`FLOAT_RANGES`; any finite value if it names none)."""
    return FLOAT_RANGES.get(key, (-math.inf, True, math.inf))


def describe_range(key: str) -> str:
    """`float_range` in words: ``in [0, 1]``, ``> 0``, ``>= 0`` or ``finite``."""
    low, open_low, high = float_range(key)
    if math.isinf(low):
        return "finite"
    if math.isinf(high):
        return f"{'>' if open_low else '>='} {low:g}"
    return f"in {'(' if open_low else '['}{low:g}, {high:g}]"


def lookup_key(name: str) -> str:
    """``name`` as the zoo compares names: lower case, without ``-``, ``_`` or spaces.

    ``ResNet50``, ``resnet-50`` and ``RESNET_50`` all give ``resnet50``; dots and
    slashes stay (``gpt3-2.7b``, ``microsoft/resnet-50``).
    """
    return "".join(c for c in name.lower() if c not in "-_ ")


@dataclasses.dataclass(frozen=True)
class Published:
    """A model's parameter count as its source publishes it (rounded as published).

    Attributes:
      parameters: the total.
      source: where it is published.
      active: the parameters a token's computation reads, for a mixture of
        experts that publishes them (None: not published).
    """

    parameters: float
    source: str
    active: float | None = None


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A zoo entry.

    Attributes:
      name: the registry name (``linear_net``); reports use it.
      description: one line.
      module: the Flax module class; its fields are the model's configuration.
      input_shape: per-example input shape from the configuration.
      input_dtype: ``"float"`` (images, follows ``--dtype``) or an integer dtype.
      source: where the architecture comes from.
      aliases: other names of the same architecture with the same parameter
        count (Hugging Face ids such as ``gpt2`` or ``microsoft/resnet-50``).
      minimums: the least value of integer fields that accept less than 1 (a
        size): ``{"depth": 0}``.
      published: the parameter count its source publishes, where the family
        declares it (`Published`, from the family's own table).
      forward_flops: the family's closed form of the matrix products' FLOP of
        one forward pass over one example (one sequence of ``seq_len``
        tokens), 2 per multiply-add, given the model (`build_model`'s); None:
        the family declares none.
    """

    name: str
    description: str
    module: type[nn.Module]
    input_shape: Callable[[Mapping[str, Any]], tuple[int, ...]]
    input_dtype: str = "float"
    source: str = ""
    aliases: tuple[str, ...] = ()
    minimums: Mapping[str, int] = dataclasses.field(default_factory=dict, hash=False)
    published: Published | None = None
    forward_flops: Callable[[nn.Module], int] | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.aliases, str):
            raise TypeError(f"ModelSpec {self.name!r}: aliases must be a tuple of names, got a str")
        ints = {k for k, v in self.defaults.items() if isinstance(v, int) and not isinstance(v, bool)}
        unknown = set(self.minimums) - ints
        if unknown:
            raise TypeError(
                f"ModelSpec {self.name!r}: minimums for {sorted(unknown)}, which are not "
                f"integer fields of {self.module.__name__} ({', '.join(sorted(ints))})"
            )

    @property
    def defaults(self) -> dict[str, Any]:
        """Configurable fields and their defaults (``dtype``, ``param_dtype`` and ``fp8``,
        which ``--dtype`` sets, excluded)."""
        out = {}
        for field in dataclasses.fields(self.module):
            if field.name in _NOT_SETTINGS:
                continue
            if field.default is not dataclasses.MISSING:
                out[field.name] = field.default
        return out

    def minimum(self, key: str) -> int:
        """The least value integer field ``key`` accepts: declared in ``minimums``, else 1."""
        return self.minimums.get(key, _SIZE_MINIMUM)
