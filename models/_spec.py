"""`ModelSpec`: what the zoo registry knows about a model family member."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn

__all__ = ["ModelSpec"]


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A zoo entry.

    Attributes:
      name: the registry name (``linear_net``).
      description: one line.
      module: the Flax module class; its fields are the model's configuration.
      input_shape: per-example input shape from the configuration.
      input_dtype: ``"float"`` (images, follows ``--dtype``) or an integer dtype.
      source: where the architecture comes from.
    """

    name: str
    description: str
    module: type[nn.Module]
    input_shape: Callable[[Mapping[str, Any]], tuple[int, ...]]
    input_dtype: str = "float"
    source: str = ""

    @property
    def defaults(self) -> dict[str, Any]:
        """Configurable fields and their defaults (``dtype``/``param_dtype`` excluded)."""
        out = {}
        for field in dataclasses.fields(self.module):
            if field.name in ("parent", "name", "dtype", "param_dtype"):
                continue
            if field.default is not dataclasses.MISSING:
                out[field.name] = field.default
        return out
