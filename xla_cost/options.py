"""Keyword parameters routed to the option objects that declare them.

A public function whose options come in groups (`xla_cost.Hardware`, a run's
configuration, the analysis options) takes every option as a typed keyword
parameter of its own (``help()``, an IDE and a type checker see them all) and,
where a group is accepted whole too (``hardware=Hardware(...)``), the group as
a frozen dataclass besides. `given_fields` collects a group's keywords from
the function's parameters (``locals()``); `changed_fields` keeps those that
differ from the group's defaults, so that they replace an object's own
values; `split_fields` sorts keywords into the groups and refuses one that no
group declares, as Python refuses an unknown keyword.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

__all__ = ["split_fields", "field_names", "given_fields", "changed_fields", "is_default"]


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


def given_fields(cls: type, values: Mapping[str, Any], exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The entries of ``values`` (a function's ``locals()``) named after a
    field of dataclass ``cls``, in field order, less ``exclude``."""
    return {name: values[name] for name in field_names(cls) if name in values and name not in exclude}


@functools.lru_cache(maxsize=512)
def _field(cls: type, name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def is_default(cls: type, name: str, value: Any) -> bool:
    """Whether ``value`` is field ``name``'s default in dataclass ``cls``: the
    same object, or an equal one of the default's own scalar type (an array
    is never compared by value)."""
    field = _field(cls, name)
    if field.default is not dataclasses.MISSING:
        default = field.default
    elif field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
    else:
        return False
    if value is default:
        return True
    scalar = (type(None), bool, int, float, str, tuple, dict)
    return type(value) is type(default) and isinstance(default, scalar) and value == default


def changed_fields(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``cls`` among ``values`` that are not at their default
    (`is_default`): the keywords that replace an option object's own values
    (a keyword left at its default keeps the object's)."""
    return {name: value for name, value in given_fields(cls, values).items() if not is_default(cls, name, value)}
