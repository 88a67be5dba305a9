"""Keyword arguments routed to the option objects that declare them.

A public function whose options come in groups (`xla_cost.Hardware`, a run's
configuration, the analysis options) takes the groups as frozen dataclasses
and, for convenience, their fields as keywords; `split_fields` sorts the
keywords into the groups and refuses one that no group declares, as Python
refuses an unknown keyword.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["split_fields", "field_names"]


def field_names(cls: type) -> tuple[str, ...]:
    """The fields of dataclass ``cls``, in order."""
    return tuple(f.name for f in dataclasses.fields(cls))


def split_fields(function: str, given: Mapping[str, Any], *classes: type) -> list[dict[str, Any]]:
    """``given`` sorted into one dict per dataclass of ``classes``, by the
    fields each declares (the first that declares a name takes it).

    Raises:
      TypeError: a keyword no class declares, worded as Python words it:
        ``function() got an unexpected keyword argument 'x'``.
    """
    groups: list[dict[str, Any]] = [{} for _ in classes]
    for key, value in given.items():
        index = next((i for i, cls in enumerate(classes) if key in field_names(cls)), None)
        if index is None:
            raise TypeError(f"{function}() got an unexpected keyword argument {key!r}")
        groups[index][key] = value
    return groups
