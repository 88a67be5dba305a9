"""The study pages: one module per page, found by discovery.

Each module of this folder is a page. It declares its ``NAME`` (the page is
``NAME.md``), its ``TITLE`` (what the index says it shows), its ``ORDER`` (its
place in the reading order) and ``build(data) -> dict[str, bytes]``: the
page's files (markdown, and PNG figures under ``figures/``) from a
`xla_cost.study.data.StudyData`. A page that analyses sharded steps also sets
``SHARDED = True`` (the CPU's devices are then simulated before JAX starts).
Adding a page is adding a module here (and its test); `PAGES`, the index,
``xla-cost report NAME`` and its ``--help`` follow.

A page module is light at import (the command line lists `PAGES` without
pandas, matplotlib or jax): those, and the layers that load them, are imported
inside the functions that use them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from types import MappingProxyType, ModuleType
from typing import Any

__all__ = ["BUILDERS", "MODULES", "PAGES", "SHARDED", "TITLES"]

_DECLARED: Mapping[str, type] = {"NAME": str, "TITLE": str, "ORDER": int}


def _page(name: str) -> ModuleType:
    """The page module ``name`` of this folder, checked: it declares `_DECLARED` and ``build``."""
    module = importlib.import_module(f"{__name__}.{name}")
    for attribute, kind in _DECLARED.items():
        if not isinstance(getattr(module, attribute, None), kind):
            raise TypeError(
                f"Expected the page module {module.__name__} to declare {attribute} "
                f"({kind.__name__}), got {getattr(module, attribute, None)!r} instead. Declare NAME, TITLE, "
                "ORDER and build(data) in every module of xla_cost/study/pages/."
            )
    if not callable(getattr(module, "build", None)):
        raise TypeError(f"Expected the page module {module.__name__} to define build(data), got none instead.")
    return module


def _discover() -> tuple[ModuleType, ...]:
    """Every page module of this folder, in reading order (by ``ORDER``)."""
    modules = sorted((_page(info.name) for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")),
                     key=lambda m: m.ORDER)
    for key in ("NAME", "ORDER"):
        values = [getattr(m, key) for m in modules]
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:
            raise TypeError(f"Expected each page module's {key} to be unique, got {', '.join(twice)} twice instead. "
                            f"Give the new page its own {key}.")
    return tuple(modules)


MODULES: tuple[ModuleType, ...] = _discover()
"""The page modules, in reading order."""

PAGES: tuple[str, ...] = tuple(m.NAME for m in MODULES)
"""The study pages, in reading order; ``write_report("all")`` writes every one
(``NAME.md``, its figures under ``figures/``)."""

TITLES: Mapping[str, str] = MappingProxyType({m.NAME: m.TITLE for m in MODULES})
"""What each page shows, as the index lists it."""

BUILDERS: Mapping[str, Callable[[Any], dict[str, bytes]]] = MappingProxyType({m.NAME: m.build for m in MODULES})
"""Each page's ``build(data)``."""

SHARDED: frozenset[str] = frozenset(m.NAME for m in MODULES if getattr(m, "SHARDED", False))
"""The pages that analyse sharded steps (`xla_cost.simulate_devices` first)."""
