"""Where the devices of a run lie, and so which links each of its groups crosses.

A run's devices are numbered with the innermost axis of its mesh fastest
(`xla_cost.timemodel.schedule.run_mesh`: tensor-parallel shards, then FSDP
shards, pipeline stages, replicas), and ``node_size`` consecutive devices
share a node. `span` says how the groups over some axes lie on the nodes
(how many nodes, how many of a group's devices each), `crosses_nodes`
whether neighbours along an axis (pipeline stages) are on different nodes;
`xla_cost.timemodel.comm.Cluster.time` prices a group so placed.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import math
from collections.abc import Iterable, Sequence

from xla_cost.errors import InputError

__all__ = ["Span", "span", "crosses_nodes"]


def _check_node_size(value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError("a node size, the number of devices per node, an integer >= 1", repr(value),
                         "Pass e.g. node_size=8 for an 8-GPU server.")


@dataclasses.dataclass(frozen=True)
class Span:
    """How the devices of a collective's group lie on the nodes (`span`).

    Attributes:
      nodes: nodes the group has devices on (the most of any group).
      per_node: devices of the group on each of those nodes; None where they
        are uneven (some node holds more of the group than another).
    """

    nodes: int
    per_node: int | None

    @property
    def crosses(self) -> bool:
        """Whether the group has devices on more than one node."""
        return self.nodes > 1


_MOST_GROUPS = 4096  # pipeline blocks `crosses_nodes` checks (all of them up to this many)
_MOST_WORK = 1 << 20  # devices `span` looks at (every group's, up to this many)


def span(mesh: Sequence[tuple[str, int]], axes: Iterable[str], node_size: int) -> Span:
    """How the groups over ``axes`` of ``mesh`` lie on nodes of ``node_size``.

    Devices are numbered with ``mesh``'s first axis fastest (the innermost:
    tensor-parallel shards first, replicas last; see
    `xla_cost.timemodel.schedule.run_mesh`), and ``node_size`` consecutive
    devices share a node. A group is the devices that differ only in their
    coordinates on ``axes``: with ``model=8`` innermost on nodes of 8, the
    ``model`` group is one node, and a group over any outer axis has one
    device on each of its nodes.

    Args:
      mesh: ``(axis, size)`` pairs, innermost first.
      axes: the group's axes (names of ``mesh``; unknown names are ignored).
      node_size: devices per node.

    Returns:
      The `Span` of the groups, the worst of them: the most nodes, and
      ``per_node`` None if any group is uneven.
    """
    _check_node_size(node_size)
    sizes = tuple(int(size) for _, size in mesh)
    inside = frozenset(i for i, (name, _) in enumerate(mesh) if name in set(axes))
    return _span(sizes, inside, node_size)


@functools.lru_cache(maxsize=1024)
def _span(sizes: tuple[int, ...], inside: frozenset[int], node_size: int) -> Span:
    strides = [math.prod(sizes[:i]) for i in range(len(sizes))]
    offsets = [sum(c * strides[i] for i, c in zip(sorted(inside), coords))
               for coords in itertools.product(*(range(sizes[i]) for i in sorted(inside)))]
    outside = [i for i in range(len(sizes)) if i not in inside]
    most, even = 1, True
    for count, coords in enumerate(itertools.product(*(range(sizes[i]) for i in outside))):
        if count >= max(1, _MOST_WORK // len(offsets)):
            break
        base = sum(c * strides[i] for i, c in zip(outside, coords))
        held = collections.Counter((base + offset) // node_size for offset in offsets)
        most = max(most, len(held))
        even = even and len(set(held.values())) == 1
    nodes = most
    return Span(nodes, len(offsets) // nodes if even and len(offsets) % nodes == 0 else None)


def crosses_nodes(mesh: Sequence[tuple[str, int]], axis: str, node_size: int) -> bool:
    """Whether some device and its neighbour along ``axis`` (the next
    pipeline stage's device that holds the same shard) are on different nodes.

    Args:
      mesh: ``(axis, size)`` pairs, innermost first (`span`).
      axis: a name in ``mesh``.
      node_size: devices per node.
    """
    _check_node_size(node_size)
    sizes = [int(size) for _, size in mesh]
    names = [name for name, _ in mesh]
    if axis not in names or sizes[names.index(axis)] < 2:
        return False
    # the stages of one shard of one replica are a block of consecutive devices (inner axes x stages):
    # a neighbour is on another node exactly where a block straddles a node's boundary
    block = math.prod(sizes[:names.index(axis) + 1])
    blocks = math.prod(sizes) // block
    return any(k * block // node_size != ((k + 1) * block - 1) // node_size for k in range(min(blocks, _MOST_GROUPS)))
