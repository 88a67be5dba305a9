"""A kernel list (`xla_cost.compiled.kernels.kernel_list`) counted: launches by category and kind,
bytes, and the asynchronous pairs with what runs while each is in flight. Only the standard library
is used; `xla_cost.compiled.kernels` re-exports these names."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

__all__ = ["AsyncPair", "KernelSummary", "summarize_kernels"]


@dataclasses.dataclass(frozen=True)
class AsyncPair:
    """An asynchronous start/done pair and what runs while it is in flight.

    Attributes:
      start, done: the instructions' names.
      category, kind: the started kernel's (`xla_cost.compiled.kernels.Kernel`).
      overlaps: the kernels scheduled between start and done.
      executions: runs per execution of the program (None: unknown).
    """

    start: str
    done: str
    category: str
    kind: str
    overlaps: tuple[str, ...]
    executions: int | None


@dataclasses.dataclass(frozen=True)
class KernelSummary:
    """A kernel list counted.

    Attributes:
      kernels: kernels listed (each once).
      launches: kernels run per execution of the program (loops multiplied); a
        kernel of unknown runs counts once and is named in ``unknown``.
      by_category: launches per `CATEGORIES` value.
      by_kind: launches per category and kind (``fusion kLoop``, ``library __cudnn$convForward``).
      bytes: bytes read and written per execution; None where one is unknown.
      async_pairs: the asynchronous pairs, with what overlaps each.
      unknown: kernels whose runs or bytes are unknown, or whose products run are priced at
        an upper bound (`xla_cost.compiled.products.Product.executed_note`).
    """

    kernels: int
    launches: int
    by_category: dict[str, int]
    by_kind: dict[str, int]
    bytes: int | None
    async_pairs: tuple[AsyncPair, ...]
    unknown: tuple[str, ...] = ()


def summarize_kernels(kernels: Sequence[Any]) -> KernelSummary:
    """Counts of a `kernel_list`: launches by category and kind, bytes, and the
    asynchronous pairs with the kernels that run while each is in flight."""
    launches = 0
    by_category: dict[str, int] = {}
    by_kind: dict[str, int] = {}
    total: int | None = 0
    unknown: list[str] = []
    pairs: list[AsyncPair] = []
    for kernel in kernels:
        runs = 1 if kernel.executions is None else kernel.executions
        if kernel.executions is None or kernel.bytes is None:
            unknown.append(f"{kernel.name}: {'runs' if kernel.executions is None else 'bytes'} unknown")
        if kernel.product is not None and kernel.product.executed_note:  # a splash kernel at every block pair
            unknown.append(f"{kernel.name}: {kernel.product.executed_note}")
        launches += runs
        by_category[kernel.category] = by_category.get(kernel.category, 0) + runs
        label = f"{kernel.category} {kernel.kind}"
        by_kind[label] = by_kind.get(label, 0) + runs
        total = None if total is None or kernel.bytes is None else total + kernel.bytes * runs
        if kernel.done:
            pairs.append(AsyncPair(kernel.name, kernel.done, kernel.category, kernel.kind, kernel.overlaps,
                                   kernel.executions))
    return KernelSummary(len(kernels), launches, by_category, by_kind, total, tuple(pairs), tuple(unknown))
