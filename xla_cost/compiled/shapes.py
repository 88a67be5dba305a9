"""Shapes in HLO text and their sizes: ``f32[8,16]{1,0}``, ``(f32[], s32[2])``.

`parse_shape` reads a shape (an `Array`, or a tuple of shapes), `shape_bytes`
its size, `element_bits` an element type's width; `split_top_level` splits
HLO text at commas outside brackets. `xla_cost.compiled.hlo` reads programs
with them (and names them again). Only the standard library is used; it
imports nothing of xla_cost.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any

__all__ = [
    "COMMENT", "Array", "Shape", "element_bits", "split_top_level", "parse_shape", "shape_leaves", "shape_bytes",
    "shape_dtypes", "ON_CHIP_SPACES", "HOST_SPACE", "device_memory_bytes", "host_memory_bytes",
]

_ELEMENT_BITS: dict[str, int] = {
    "pred": 8, "s8": 8, "u8": 8,
    "s16": 16, "u16": 16, "f16": 16, "bf16": 16,
    "s32": 32, "u32": 32, "f32": 32,
    "s64": 64, "u64": 64, "f64": 64, "c64": 64,
    "c128": 128,
    "s4": 4, "u4": 4, "s2": 2, "u2": 2, "s1": 1, "u1": 1,
    "token": 0, "opaque": 0,
}
"""Bits per element; ``f8*`` (8), ``f6*`` (6) and ``f4*`` (4) are matched by prefix."""

_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_SPACE = re.compile(r"\{([^{}]*?)S\((\d+)\)[^{}]*\}")
"""A layout that names a memory space (``{1,0:T(8,128)S(1)}``), right after an array's dims."""

COMMENT = re.compile(r"/\*.*?\*/")
"""A comment in HLO text (``/*index=5*/``)."""


def element_bits(dtype: str) -> int | None:
    if dtype in _ELEMENT_BITS:
        return _ELEMENT_BITS[dtype]
    for prefix, bits in (("f8", 8), ("f6", 6), ("f4", 4)):
        if dtype.startswith(prefix):
            return bits
    return None


ON_CHIP_SPACES = frozenset({1, 2, 3})
"""Memory spaces of a TPU's layouts (``{1,0:T(8,128)S(1)}``) that are on the chip, not its HBM:
its vector memory (``S(1)``: a v5e's prefetches), its scalar memory (``S(2)``: an async op's
context) and a v4's CMEM (``S(3)``: its prefetches), where XLA's memory-space assignment copies
an array (``copy-start``, ``slice-start``) for the kernels that read it there. A GPU's host memory
(``S(5)``: offloading) and any space of an untiled layout (a GPU's) stay the device's memory."""

HOST_SPACE = 5
"""The memory space of an array a TPU program keeps in its host's memory (``{...:T(8,128)(2,1)S(5)}``):
jax's ``pinned_host`` memory kind, where a remat policy's offloaded activations go
(``jax.checkpoint_policies.save_and_offload_only_these_names``; seen in libtpu 0.0.52's deviceless
v6e programs: the stacks a scanned block's offloaded names are written to, and read back from, by
``dynamic-update-slice-start`` and ``dynamic-slice-start``). Its bytes cross the host link, not the
HBM's (`Array.on_host`). A GPU program's layouts carry no memory space."""


@dataclasses.dataclass(frozen=True)
class Array:
    dtype: str
    dims: tuple[int, ...]
    on_chip: bool = dataclasses.field(default=False, compare=False)
    """Whether its layout puts it in a TPU's on-chip memory (`ON_CHIP_SPACES`, a tiled layout;
    a scalar's has no tiles), not in the device memory a kernel's bytes are priced against."""
    on_host: bool = dataclasses.field(default=False, compare=False)
    """Whether its layout puts it in the host's memory (`HOST_SPACE`, a tiled layout), not the device's."""

    def nbytes(self) -> int | None:
        bits = element_bits(self.dtype)
        if bits is None:
            return None
        return math.ceil(math.prod(self.dims) * bits / 8)

Shape = Any
"""An `Array`, or a tuple of shapes."""


_BRACKET = re.compile(r"[()\[\]{}]")


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` outside any (), [] or {}."""
    if len(sep) == 1 and _BRACKET.search(text) is None:  # nothing nested: most operand lists
        return [part.strip() for part in text.split(sep) if part.strip()]
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


@functools.lru_cache(maxsize=16384)
def parse_shape(text: str) -> Shape | None:
    """``f32[8,16]{1,0}``, ``f32[]``, ``(f32[], (s32[2], u32[]))``; None if not a shape.
    (Frozen, so a text met again, as most are in one module, is parsed once.)"""
    text = COMMENT.sub("", text).strip()
    if text.startswith("("):
        if not text.endswith(")"):
            return None
        elements = [parse_shape(part) for part in split_top_level(text[1:-1])]
        return None if any(element is None for element in elements) else tuple(elements)
    match = _ARRAY.match(text)
    if match is None:
        return None
    dims: list[int] = []
    for dim in match.group(2).split(","):
        dim = dim.strip().removeprefix("<=")  # a dynamic dimension: its bound
        if not dim:
            continue
        if not dim.isdigit():
            return None
        dims.append(int(dim))
    space = _SPACE.match(text, match.end())
    on_chip = space is not None and int(space.group(2)) in ON_CHIP_SPACES and ("T(" in space.group(1) or not dims)
    on_host = space is not None and int(space.group(2)) == HOST_SPACE and "T(" in space.group(1)
    return Array(match.group(1), tuple(dims), on_chip, on_host)


def shape_leaves(shape: Shape) -> list[Array]:
    if isinstance(shape, Array):
        return [shape]
    return [leaf for element in shape for leaf in shape_leaves(element)]


def shape_bytes(shape: Shape) -> int | None:
    sizes = [leaf.nbytes() for leaf in shape_leaves(shape)]
    return None if None in sizes else sum(sizes)


def device_memory_bytes(shape: Shape) -> int | None:
    """`shape_bytes` of the leaves in the device's memory, those on a TPU's chip
    (`Array.on_chip`) and in its host's memory (`Array.on_host`) left out: what a kernel
    moves to and from its HBM."""
    sizes = [leaf.nbytes() for leaf in shape_leaves(shape) if not leaf.on_chip and not leaf.on_host]
    return None if None in sizes else sum(sizes)  # type: ignore[arg-type]


def host_memory_bytes(shape: Shape) -> int | None:
    """`shape_bytes` of the leaves in the host's memory (`Array.on_host`)."""
    sizes = [leaf.nbytes() for leaf in shape_leaves(shape) if leaf.on_host]
    return None if None in sizes else sum(sizes)  # type: ignore[arg-type]


def shape_dtypes(shape: Shape) -> str:
    names: list[str] = []
    for leaf in shape_leaves(shape):
        if leaf.dtype not in names:
            names.append(leaf.dtype)
    return ",".join(names)
