"""Time of the collectives of a sharded training step, and the step time built on it.

The model is the alpha-beta (latency-bandwidth) model of ring collectives
(Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication
Operations in MPICH", IJHPCA 19(1), 2005; Patarasuk and Yuan, "Bandwidth
optimal all-reduce algorithms for clusters of workstations", JPDC 69(2), 2009).
On a ring of ``n`` devices with per-device per-direction bandwidth ``B``
(bytes/s) and per-hop latency ``alpha`` (s), for a buffer of ``S`` bytes per
device:

* all-reduce (reduce-scatter then all-gather):
  ``2 (n-1)/n * S / B + 2 (n-1) * alpha``;
* all-gather, reduce-scatter, all-to-all: ``(n-1)/n * S / B + (n-1) * alpha``;
* collective-permute, collective-broadcast (one hop): ``S / B + alpha``.

(All-to-all is charged as a pairwise exchange through a switch, where each
device sends and receives ``(n-1)/n * S``; over a physical ring without a
switch it would take longer.)

``algorithm="halving-doubling"`` (`ALGORITHMS`) prices the latency-optimal
variants of the same paper instead: recursive halving for reduce-scatter,
recursive doubling for all-gather, Rabenseifner's reduce-scatter + all-gather
for all-reduce, with ``ceil(log2 n)`` hops in place of ``n - 1`` and the same
bandwidth term. It stands for the tree and hierarchical algorithms that
large jobs use (NCCL switches to trees at scale); all-to-all and one-hop
collectives keep their formulas.

Where a node's fabric has published NCCL measurements (DGX H100/H200 and DGX
A100: `xla_cost.timemodel.bus.FABRICS`), a `Cluster` carries its `Fabric` and
prices each collective at the measured bus bandwidth for its message size
and placement instead (`xla_cost.timemodel.bus`: within a node, across nodes
over all of a node's network adapters, in two levels); its link name ends in
``@nccl``. Bounds (`xla_cost.Hardware.bound`) and every other link keep the
alpha-beta model at line rate, their link names the presets'.

What the alpha-beta model leaves out, so that its numbers are read as estimates: the
exact tree, hierarchical and ring-of-rings schedules, in-switch reduction (NVLink SHARP), contention
between collectives that run at the same time, the torus topology of TPU slices
(a collective over one torus dimension uses only some of a chip's ports, so the
per-chip aggregate of `INTERCONNECTS` ``"tpu-v5e-ici"`` is an optimistic rate),
and protocol overheads (achieved bandwidth is typically 70-90% of a link's
rate). A group that spans nodes is charged at the slowest link it uses for the
whole ring (`Cluster.link`), or, for an all-reduce, in two levels (`Cluster.time`).

Where a group lies follows from the run's mesh (`xla_cost.parallel.placement.span`): devices are laid out
with the innermost axis fastest (tensor-parallel shards, then the FSDP shards,
then the pipeline's stages, then the data-parallel replicas), ``node_size``
consecutive devices a node. Between nodes a device has its share of its host's
network adapters (`cluster`: ``nics * line rate / devices per host``, from the
node presets of `xla_cost.timemodel.devices.NODES`).

The links themselves (`Interconnect`, the `INTERCONNECTS` presets with their
sources, the bandwidth convention) live in `xla_cost.timemodel.links`, and are
importable from here too; this module chooses how a collective runs (`ALGORITHMS`,
`Cluster`, the placement of its group) and prices it. On the times it gives,
`xla_cost.timemodel.schedule.predict_step` adds the communication to a roofline
compute time, with a stated overlap.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from xla_cost.errors import InputError
from xla_cost.timemodel import bus
from xla_cost.timemodel import devices as registry
from xla_cost.timemodel.links import (
    INTERCONNECTS, Interconnect, check_bandwidth, check_count, check_latency, check_node_size, interconnect,
    is_finite_number,
)
from xla_cost.parallel.placement import Span, span

__all__ = [
    "is_finite_number",
    "check_bandwidth",
    "Interconnect",
    "INTERCONNECTS",
    "placed",
    "Cluster",
    "CLUSTERS",
    "interconnect",
    "cluster",
    "collective_time",
    "CollectiveTime",
    "communication_time",
    "placed_time",
    "hashed_by_value",
    "staged_all_reduce",
    "staged",
]


_interconnect = interconnect  # `cluster` has a parameter of that name


def _ring_hops(n: int) -> int:
    return n - 1


def _halving_doubling_hops(n: int) -> int:
    return math.ceil(math.log2(n))


ALGORITHMS: Mapping[str, Callable[[int], int]] = MappingProxyType({
    "ring": _ring_hops,
    "halving-doubling": _halving_doubling_hops,
})
"""The collective algorithms priced, each as its hops per pass over a group of
``n`` devices: ``ring`` (``n - 1``, the default) and ``halving-doubling``
(``ceil(log2 n)``; Thakur et al. 2005). Adding an algorithm is one entry; the
bandwidth term is the same for all (each moves ``(n-1)/n`` of the buffer)."""


def _check_algorithm(algorithm: Any) -> str:
    if algorithm not in ALGORITHMS:
        raise InputError(f"a collective algorithm ({', '.join(ALGORITHMS)})", repr(algorithm),
                         f"Use one of {', '.join(ALGORITHMS)} (ring, n - 1 hops per pass, is the default).")
    return algorithm



def placed(collectives: Iterable[Mapping[str, Any] | Any], mesh: Sequence[tuple[str, int]],
           node_size: int) -> list[dict[str, Any]]:
    """``collectives`` (objects or dicts with ``kind``, ``bytes``, ``group_size``,
    ``executions`` and ``axes``) as dicts with their
    `xla_cost.parallel.placement.Span` on ``mesh``, for
    `communication_time`: a group whose axes' sizes do not make its size keeps
    no span (the consecutive-devices assumption of `Cluster.link`)."""
    sizes = dict(mesh)
    out = []
    for item in collectives:
        kind, nbytes, group_size, executions, _, _, axes = _fields(item)
        axes = tuple(axes or ())
        row = {"kind": kind, "bytes": nbytes, "group_size": group_size, "executions": executions}
        if axes and all(a in sizes for a in axes) and math.prod(sizes[a] for a in axes) == row["group_size"]:
            row["span"] = span(mesh, axes, node_size)
        out.append(row)
    return out


@dataclasses.dataclass(frozen=True)
class Cluster:
    """How devices are wired: node_size devices per node share intra (e.g. NVLink);
    groups that span nodes run at inter (e.g. InfiniBand): a ring's speed is its
    slowest link.

    Attributes:
      intra: the link between devices of one node.
      inter: the link between nodes, per device (see `Interconnect.bandwidth`).
      node_size: devices per node.
      algorithm: how collectives are scheduled (`ALGORITHMS`): ``ring``
        (default) or ``halving-doubling``.
      hierarchical: an all-reduce over devices of several nodes runs as NCCL
        and Horovod run it: a reduce-scatter within each node, an all-reduce of
        each device's ``1/node_size`` shard between the nodes (with
        ``algorithm``), an all-gather within each node (`time`). False: one
        flat ring at the slowest link.
      fabric: the node's measured NCCL curves (`xla_cost.timemodel.bus.Fabric`):
        collectives priced at them (``algorithm`` then unused); None: the
        alpha-beta model.
      host: bytes/s each way of a device's link to its host's memory where an
        all-reduce over several nodes is staged through host memory
        (`staged_all_reduce`: Gloo's CUDA all-reduce with a host workspace);
        None: the devices reduce on their own links (`staged`).

    Raises:
      InputError: a node size that is not an integer >= 1, or an unknown algorithm.
    """

    intra: Interconnect
    inter: Interconnect
    node_size: int
    algorithm: str = "ring"
    hierarchical: bool = False
    fabric: bus.Fabric | None = None
    host: float | None = None

    def __post_init__(self) -> None:
        check_node_size(self.node_size)
        _check_algorithm(self.algorithm)

    def link(self, group_size: int, span_nodes: bool | None = None) -> Interconnect:
        """The link that sets the speed of a ring of ``group_size`` devices.

        Args:
          group_size: devices in the group, >= 1.
          span_nodes: whether the group has devices on more than one node. None:
            assume groups are laid out on consecutive device ids, so a group
            spans nodes exactly when ``group_size > node_size``. Pass True for
            strided groups (e.g. the data-parallel groups of a 2D mesh whose
            model axis fills each node).

        Raises:
          InputError: a group size that is not an integer >= 1.
        """
        _check_group_size(group_size)
        if span_nodes is None:
            span_nodes = group_size > self.node_size
        return self.inter if span_nodes else self.intra

    def time(self, kind: str, nbytes: float, group_size: int, span_nodes: bool | None = None,
             where: Span | None = None) -> tuple[float, str]:
        """Seconds of one collective on this cluster, and the link(s) it runs on.

        A group within a node runs at ``intra``; one that spans nodes at
        ``inter``, or, for an all-reduce of a `hierarchical` cluster whose group
        fills whole nodes, as intra-node reduce-scatter, inter-node all-reduce
        of the ``1/node_size`` shard, intra-node all-gather.

        Args:
          kind, nbytes, group_size: as `collective_time`.
          span_nodes: as `link`, where ``where`` is None.
          where: how the group lies on the nodes (`xla_cost.parallel.placement.span`): within one node at
            ``intra``; one device a node at ``inter``; ``per_node`` devices on
            each of several nodes, for an all-reduce of a `hierarchical`
            cluster, in two levels (a reduce-scatter among the ``per_node``,
            an all-reduce of each one's ``1/per_node`` between the nodes, an
            all-gather), else a ring at ``inter``.
        """
        try:  # a pure function of its arguments: the validation prices the same collectives thousands of times
            return _cluster_time(self, kind, nbytes, group_size, span_nodes, where)
        except TypeError:  # an argument that is not hashable
            return self._time(kind, nbytes, group_size, span_nodes, where)

    def _time(self, kind: str, nbytes: float, group_size: int, span_nodes: bool | None,
              where: Span | None) -> tuple[float, str]:
        if self.host is not None and _kind(kind) == "all-reduce":
            crosses = where.crosses if where is not None else self.link(group_size, span_nodes) is self.inter
            if crosses:  # uneven groups (per_node None): the most devices a node holds
                nodes = where.nodes if where is not None else -(-group_size // self.node_size)
                per_node = (where.per_node if where is not None else None) or -(-group_size // nodes)
                return staged_all_reduce(nbytes, nodes, per_node, self)
        if self.fabric is not None and _kind(kind) is not None:
            return self._measured_time(_kind(kind), nbytes, group_size, span_nodes, where)  # type: ignore[arg-type]
        if where is not None:
            return self._placed_time(kind, nbytes, group_size, where)
        link = self.link(group_size, span_nodes)
        nodes, rest = divmod(group_size, self.node_size)
        if (self.hierarchical and link is self.inter and _kind(kind) == "all-reduce" and self.node_size > 1
                and rest == 0 and nodes > 1 and span_nodes is not True):
            within = self.node_size
            seconds = (collective_time("reduce-scatter", nbytes, within, self.intra, self.algorithm)
                       + collective_time("all-reduce", nbytes / within, nodes, self.inter, self.algorithm)
                       + collective_time("all-gather", nbytes, within, self.intra, self.algorithm))
            return seconds, f"{self.intra.name}+{self.inter.name}"
        return collective_time(kind, nbytes, group_size, link, self.algorithm), link.name

    def _measured_time(self, kind: str, nbytes: float, group_size: int, span_nodes: bool | None,
                       where: Span | None) -> tuple[float, str]:
        collective_time(kind, nbytes, group_size, self.intra)  # checks the kind, size and group as the model does
        if where is None:  # consecutive devices, or a strided group (span_nodes=True: one device a node, the worst)
            crosses = self.link(group_size, span_nodes) is self.inter
            nodes = -(-group_size // self.node_size) if crosses else 1
            per_node = self.node_size if crosses and span_nodes is None and group_size % self.node_size == 0 else 1
            where = Span(nodes, per_node if crosses else group_size)
        per_node = where.per_node or 1  # uneven groups: as one device a node, the slowest
        nodes = where.nodes if where.crosses else 1
        seconds = self.fabric.time(kind, nbytes, group_size, per_node, nodes,  # type: ignore[union-attr]
                                   self.inter.bandwidth, self.hierarchical)
        links = self.inter.name if per_node == 1 else f"{self.intra.name}+{self.inter.name}"
        return seconds, (links if where.crosses else self.intra.name) + "@nccl"

    def _placed_time(self, kind: str, nbytes: float, group_size: int, where: Span) -> tuple[float, str]:
        if not where.crosses:
            return collective_time(kind, nbytes, group_size, self.intra, self.algorithm), self.intra.name
        within = where.per_node
        if (self.hierarchical and _kind(kind) == "all-reduce" and within is not None and within > 1
                and group_size == within * where.nodes):
            seconds = (collective_time("reduce-scatter", nbytes, within, self.intra, self.algorithm)
                       + collective_time("all-reduce", nbytes / within, where.nodes, self.inter, self.algorithm)
                       + collective_time("all-gather", nbytes, within, self.intra, self.algorithm))
            return seconds, f"{self.intra.name}+{self.inter.name}"
        return collective_time(kind, nbytes, group_size, self.inter, self.algorithm), self.inter.name


@functools.lru_cache(maxsize=1 << 16, typed=True)
def _cluster_time(cluster: Cluster, kind: str, nbytes: float, group_size: int, span_nodes: bool | None,
                  where: Span | None) -> tuple[float, str]:
    """`Cluster.time`, kept: a cluster is a frozen value and its pricing reads nothing else.
    `xla_cost.study.validation` prices each case's collectives again in every evaluation of
    every fit: 1.76 million calls for 1,090 distinct collectives (the held-out validation of
    2026-11-29, 160 cases): 33.2 CPU s before, 27.4 kept (and the ZeRO-3 rows set apart by id)."""
    return cluster._time(kind, nbytes, group_size, span_nodes, where)


def staged_all_reduce(nbytes: float, nodes: int, per_node: int, cluster: Cluster) -> tuple[float, str]:
    """Seconds of an all-reduce of ``nbytes`` over ``per_node`` devices on each
    of ``nodes`` nodes, staged through each node's host memory as Gloo's
    CUDA all-reduce with a host workspace runs it, and the links it runs on.

    Goyal et al. 2017 (arXiv:1706.02677) §4.1: "(1) buffers from the 8 GPUs
    within a server are summed into a single buffer for each server, (2) the
    results buffers are shared and summed across all servers, and finally
    (3) the results are broadcast onto each GPU". Gloo at 49befe3
    (2017-05-22), ``gloo/cuda_allreduce_halving_doubling.cc`` lines 446-474:
    with a ``CudaHostWorkspace`` (the default, ``.h`` line 23) the scratch
    buffer is host memory ("reduction is executed on the CPU"); phase (1) is
    an NCCL reduce onto the first GPU and a copy of its buffer to the host
    (``cuda_collectives.h`` lines 113-161), phase (3) a copy back and an
    NCCL broadcast (lines 214-260); phase (2) runs between the hosts, each at
    its whole network adapter. One after another: Caffe2's Allreduce op
    builds the algorithm without ``pipelineBroadcastAndReduce`` (default
    false, ``.h`` line 31; github.com/caffe2/caffe2 at b720403c, 2017-06-06,
    ``caffe2/contrib/gloo/allreduce_ops_gpu.cc`` lines 13-26).
    With ``S = nbytes``, the node's link ``B``, latency ``a``, the host link
    ``H = cluster.host``:

    ``2 (S / B + (per_node - 1) a) + 2 S / H + collective_time("all-reduce", S, nodes, network)``

    where the network is a node's adapters (``cluster.inter``, one device's
    share, times the node's ``node_size`` devices: a GPU server is one
    host) with ``cluster.algorithm``. An NCCL reduce or broadcast carries
    the whole buffer over every link of its chain (nccl-tests'
    doc/PERFORMANCE.md: their bus bandwidth is their algorithm bandwidth).
    The host's own additions (phase (2)'s reductions on the CPU) are not
    priced: no measured figure here.
    """
    local = 2 * (nbytes / cluster.intra.bandwidth + (per_node - 1) * cluster.intra.latency) if per_node > 1 else 0.0
    adapters = dataclasses.replace(cluster.inter, name=f"{cluster.inter.name}x{cluster.node_size}",
                                   bandwidth=cluster.inter.bandwidth * cluster.node_size)
    network = collective_time("all-reduce", nbytes, nodes, adapters, cluster.algorithm)
    host = cluster.host or math.inf
    return local + 2 * nbytes / host + network, f"{cluster.intra.name}+host+{adapters.name}"


def staged(cluster: Cluster, device: str) -> Cluster:
    """``cluster`` with its all-reduces over several nodes staged through host
    memory (`staged_all_reduce`) at ``device``'s link to its host
    (`xla_cost.timemodel.devices.HOST_LINKS`).

    Raises:
      InputError: a device without a published host link.
    """
    link = registry.host_link(device)
    if link is None:
        raise InputError("a device with a published link to its host's memory (xla_cost.timemodel.devices."
                         f"HOST_LINKS: {', '.join(registry.HOST_LINKS)})", repr(device),
                         "Add the device's host link with its source, or price the all-reduce on the devices "
                         "(host_staged_gradients=False).")
    return dataclasses.replace(cluster, host=link.bandwidth)


def _share(nic: Interconnect, nics: int, devices: int) -> Interconnect:
    """One device's share of ``nics`` adapters of link ``nic`` that ``devices`` devices use at once."""
    if nics == devices:
        return nic
    return dataclasses.replace(
        nic, name=f"{nic.name}:{nics}/{devices}", bandwidth=nic.bandwidth * nics / devices,
        description=f"{nic.description}; {nics} per {devices} devices: {nic.bandwidth * nics / devices:g} B/s each")


def _node_cluster(node: registry.Node) -> Cluster:
    return Cluster(INTERCONNECTS[node.intra], _share(INTERCONNECTS[node.nic], node.nics, node.per_host), node.devices,
                   fabric=bus.fabric(node.intra))


CLUSTERS: Mapping[str, Cluster] = MappingProxyType({
    d.name: _node_cluster(registry.NODES[d.node])  # type: ignore[index]
    for d in registry.DEVICES.values() if d.has_cluster
})
"""Cluster presets by device, from the node each device of the registry is
built of (`xla_cost.timemodel.devices.NODES`): ``h100`` (a DGX H100: NVLink 4
within 8 GPUs, one InfiniBand NDR adapter per GPU between), ``a100`` (DGX
A100: NVLink 3, HDR), ``v100`` and ``p40`` (PCIe 3.0 servers of 8, EDR),
``tpu-v5e`` (ICI within a 256-chip pod, the hosts' data-center network
between pods: 2 x 100 Gb/s per 8 chips), ``cpu`` (25GbE), and the other
devices of the registry. Other nodes: `cluster`'s ``node`` (``dgx-2``:
16 V100 sharing 8 EDR adapters)."""


def cluster(
    device: str,
    interconnect: str | None = None,
    *,
    node: str | None = None,
    node_size: int | None = None,
    nics: int | None = None,
    bandwidth: float | None = None,
    latency: float | None = None,
    algorithm: str | None = None,
    hierarchical: bool | None = None,
    curves: bool = True,
) -> Cluster:
    """The cluster preset of ``device`` (or of ``node``), with overrides.

    Between nodes each device has its share of its host's network adapters:
    ``nics * bandwidth / devices per host`` (a GPU server is one host of
    ``node_size`` devices; a TPU host drives a fixed number of a slice's chips).

    Args:
      device: a device of the registry with a cluster preset (`CLUSTERS`;
        a key in any case, or a ``device_kind``).
      interconnect: an `INTERCONNECTS` preset that replaces both links (one
        flat network, one adapter per device).
      node: a node preset (`xla_cost.timemodel.devices.NODES`, e.g. ``dgx-2``)
        instead of the device's own.
      node_size: devices per node (a TPU slice's chips); the adapters per
        device stay the preset's unless ``nics`` is given.
      nics: network adapters per host, shared by its devices.
      bandwidth: bytes/s per direction of one network adapter (its line
        rate); replaces the preset's, so the share of every device between
        nodes follows (in a flat network, the single link's).
      latency: seconds per hop; replaces the inter-node link's (in a flat
        network, the single link's).
      algorithm: the collective algorithm (`ALGORITHMS`; default ``ring``).
      hierarchical: all-reduces over several nodes in two levels (`Cluster`).
      curves: price collectives at the node's measured NCCL curves where it
        has them (`xla_cost.timemodel.bus.FABRICS`); not with ``interconnect``,
        ``bandwidth`` or ``latency`` given (a link of the user's figures: the
        alpha-beta model at them). False: the alpha-beta model at line rate
        (a bound's).

    Raises:
      InputError: an unknown device, node, interconnect or algorithm, or an
        override out of range.
    """
    spec = registry.node(node) if node is not None else registry.NODES[registry.device(device, has="cluster").node]
    intra, nic = INTERCONNECTS[spec.intra], INTERCONNECTS[spec.nic]
    if interconnect is not None:
        intra = nic = _interconnect(interconnect)
    if node_size is not None:
        check_node_size(node_size)
    if nics is not None:
        check_count(nics, "network adapters per host", "Pass e.g. nics=8 (--nics 8) for one per GPU of an 8-GPU "
                     "server.")
    if bandwidth is not None:
        check_bandwidth(bandwidth)
    if latency is not None:
        check_latency(latency)
    size = spec.devices if node_size is None else node_size
    host = spec.host_devices or size  # a server is one host: its devices share its adapters
    flat = intra == nic and nics is None
    given = _given(nic, bandwidth, latency)
    if flat or (interconnect is not None and nics is None):
        inter = given  # one adapter (one link) per device
    elif nics is None:  # the preset's adapters per device, on a node of any size
        inter = _share(given, spec.nics, spec.per_host)
    else:
        inter = _share(given, nics, host)
    return Cluster(
        intra=given if flat else intra,
        inter=inter,
        node_size=size,
        algorithm="ring" if algorithm is None else _check_algorithm(algorithm),
        hierarchical=False if hierarchical is None else bool(hierarchical),
        fabric=bus.fabric(spec.intra) if curves and all(v is None for v in (interconnect, bandwidth, latency)) else None,
    )


def _given(link: Interconnect, bandwidth: float | None, latency: float | None) -> Interconnect:
    if bandwidth is not None:
        link = dataclasses.replace(
            link, bandwidth=float(bandwidth),
            description=f"{link.description}; bandwidth given: {bandwidth:g} B/s",
            source="given",
        )
    if latency is not None:
        link = dataclasses.replace(
            link, latency=float(latency),
            description=f"{link.description}; latency given: {latency:g} s",
            latency_source="given",
        )
    return link


_RING = ("all-gather", "reduce-scatter", "all-to-all")
_ONE_HOP = ("collective-permute", "collective-broadcast")
_KINDS = ("all-reduce", *_RING, *_ONE_HOP)

_ALIASES = {
    # JAX primitives, for collectives read from a jaxpr
    "psum": "all-reduce", "pmax": "all-reduce", "pmin": "all-reduce",
    "psum-scatter": "reduce-scatter", "ppermute": "collective-permute",
    # sizes known only at run time: charged as an all-to-all of the whole buffer, an upper bound
    "ragged-all-to-all": "all-to-all",
}


def _kind_name(kind: Any) -> str:
    if not isinstance(kind, str):
        return ""
    return _normalized_kind(kind)


@functools.lru_cache(maxsize=256)
def _normalized_kind(kind: str) -> str:
    return kind.strip().lower().replace("_", "-").removesuffix("-start")


def _kind(kind: Any) -> str | None:
    """The HLO name of ``kind`` (``all_reduce``, ``all-reduce-start``, ``psum``
    -> ``all-reduce``), or None if it is not a modelled collective."""
    name = _kind_name(kind)
    name = _ALIASES.get(name, name)
    return name if name in _KINDS else None


def _check_group_size(group_size: Any) -> None:
    check_count(group_size, "a group size, the number of devices in the collective",
                 "Pass the size of the replica group (1 means no communication).")


def collective_time(
    kind: str, nbytes: float, group_size: int, link: Interconnect, algorithm: str = "ring"
) -> float:
    """Seconds for one collective on a ring of group_size devices, nbytes = the
    full buffer per device (for all-gather: the gathered result; reduce-scatter:
    the buffer before scattering; all-reduce: the buffer).

    With ``n = group_size``, ``B = link.bandwidth``, ``a = link.latency`` and
    ``h`` hops per pass (``n - 1`` for ``ring``, ``ceil(log2 n)`` for
    ``halving-doubling``):

    * all-reduce: ``2(n-1)/n * nbytes / B + 2 h * a``;
    * all-gather, reduce-scatter: ``(n-1)/n * nbytes / B + h * a``;
    * all-to-all: ``(n-1)/n * nbytes / B + (n-1) * a`` (either algorithm);
    * collective-permute, collective-broadcast: ``nbytes / B + a``.

    A group of one device moves nothing: 0.0.

    Args:
      kind: an HLO collective (``all-reduce``; ``_`` for ``-`` and a ``-start``
        suffix are accepted, and the JAX primitives ``psum``, ``pmax``,
        ``pmin``, ``psum_scatter``, ``all_gather``, ``all_to_all``, ``ppermute``);
        ``ragged-all-to-all`` is charged as an all-to-all of the whole buffer.
      nbytes: bytes per device, >= 0.
      group_size: devices in the group, >= 1.
      link: the link of the ring (`Cluster.link`).
      algorithm: one of `ALGORITHMS`.

    Raises:
      ValueError: an unknown kind or algorithm (an `InputError`, which is a
        ValueError), a negative ``nbytes`` or a group size < 1.
    """
    name = _kind(kind)
    if name is None:
        raise InputError(f"a collective kind ({', '.join(_KINDS)})", repr(kind),
                         "Use the HLO opcode name, e.g. 'all-reduce'.")
    if not is_finite_number(nbytes) or nbytes < 0:
        raise InputError("a byte count >= 0", repr(nbytes), "Pass the buffer size per device in bytes.")
    _check_group_size(group_size)
    _check_algorithm(algorithm)
    n = group_size
    if n == 1:
        return 0.0
    hops = ALGORITHMS[algorithm](n)
    if name == "all-reduce":
        return 2 * (n - 1) / n * nbytes / link.bandwidth + 2 * hops * link.latency
    if name == "all-to-all":
        return (n - 1) / n * nbytes / link.bandwidth + (n - 1) * link.latency
    if name in _RING:
        return (n - 1) / n * nbytes / link.bandwidth + hops * link.latency
    return nbytes / link.bandwidth + link.latency


@dataclasses.dataclass(frozen=True)
class CollectiveTime:
    """The modelled time of one collective of a step.

    Attributes:
      kind: the HLO collective (``all-reduce``, ...).
      nbytes: bytes per device, as `collective_time` defines them.
      group_size: devices in the group.
      executions: times it runs per step (1 when unknown, with a note).
      link: name of the link(s) that set its speed (`Cluster.time`).
      seconds: ``executions * collective_time(kind, nbytes, group_size, link)``.
    """

    kind: str
    nbytes: int
    group_size: int
    executions: int
    link: str
    seconds: float


def _fields(item: Any) -> tuple[Any, Any, Any, Any, Any, Any, Any]:
    """A collective's ``kind``, ``bytes`` (else ``nbytes``), ``group_size``, ``executions``,
    ``span_nodes``, ``span`` and ``axes``, from a mapping or an object; None for a field it lacks."""
    if type(item) is dict or isinstance(item, Mapping):  # a dict first: the ABC's check is slower
        get = item.get
        return (get("kind"), item["bytes"] if "bytes" in item else get("nbytes"), get("group_size"),
                get("executions"), get("span_nodes"), get("span"), get("axes"))
    return (getattr(item, "kind", None), item.bytes if hasattr(item, "bytes") else getattr(item, "nbytes", None),
            getattr(item, "group_size", None), getattr(item, "executions", None),
            getattr(item, "span_nodes", None), getattr(item, "span", None), getattr(item, "axes", None))


def communication_time(
    collectives: Iterable[Mapping[str, Any] | Any], cluster: Cluster
) -> tuple[float, tuple[CollectiveTime, ...], tuple[str, ...]]:
    """Total seconds per step for a list of collectives given as objects or dicts
    with fields kind, bytes, group_size, executions.

    Unknowns are never silently zero: ``executions`` None is counted once and
    named in the notes; ``group_size`` or ``bytes`` None, or a kind the model
    does not cover, is skipped and named in the notes. An optional
    ``span`` field (a `xla_cost.parallel.placement.Span`, see `placed`) or ``span_nodes`` field is passed
    to `Cluster.time`.

    Args:
      collectives: e.g. the collectives of a compiled phase (``kind``,
        ``bytes`` (or ``nbytes``), ``group_size``, ``executions``).
      cluster: the devices' wiring.

    Returns:
      ``(seconds, per-collective times, notes)``; the seconds are the sum of
      the per-collective times.

    Raises:
      InputError: a negative byte count or execution count, or a group size < 1.
    """
    times: list[CollectiveTime] = []
    notes: list[str] = []
    for item in collectives:
        raw_kind, nbytes, group_size, executions, span_nodes, where, _ = _fields(item)
        what = f"{raw_kind} of {nbytes} bytes"
        kind = _kind(raw_kind)
        if kind is None:
            notes.append(f"{what}: kind not modelled ({', '.join(_KINDS)}); skipped")
            continue
        if nbytes is None:
            notes.append(f"{raw_kind} of unknown size: skipped")
            continue
        if group_size is None:
            notes.append(f"{what}: group size unknown; skipped")
            continue
        if _kind_name(raw_kind) == "ragged-all-to-all":
            notes.append(f"{what}: charged as an all-to-all of the whole buffer (an upper bound)")
        if executions is None:
            notes.append(f"{what} over {group_size} devices: executions per step unknown; counted once")
            executions = 1
        elif not isinstance(executions, int) or isinstance(executions, bool) or executions < 0:
            raise InputError("an execution count, an integer >= 0", repr(executions),
                             "Pass None when the count is unknown.")
        once, link = cluster.time(kind, nbytes, group_size, span_nodes, where)
        times.append(CollectiveTime(kind, int(nbytes), group_size, executions, link, executions * once))
    if cluster.host is not None and any("+host+" in t.link for t in times):
        notes.append("all-reduces over several nodes staged through host memory (Gloo's CUDA all-reduce with a host "
                     f"workspace: staged_all_reduce): each node's buffer copied over its {cluster.host / 1e9:g} GB/s "
                     "host link and back; the host's own reductions not priced")
    if cluster.fabric is None and any(t.group_size > 1 for t in times):
        notes.append("collectives at line rate, the alpha-beta model (no measured NCCL curve: a bound, a link "
                     "given, or none published for " + ", ".join(dict.fromkeys(t.link for t in times)) + ")")
    return sum(t.seconds for t in times), tuple(times), tuple(dict.fromkeys(notes))


def placed_time(collectives: Sequence[Any], mesh: Sequence[tuple[str, int]], cluster: Cluster
                ) -> tuple[float, tuple[CollectiveTime, ...], tuple[str, ...], tuple[Span | None, ...]]:
    """`communication_time` of ``collectives`` `placed` on ``mesh``, and each one's span (None:
    none kept), in their order: a pure function of the collectives' fields, the mesh and the
    (frozen) cluster, kept per value where every collective hashes by its fields
    (`hashed_by_value`: a `xla_cost.Report`'s, frozen), else priced as given:
    `xla_cost.study.validation` prices each case's collectives again in every evaluation of
    every fit, only its compute changing with the constants."""
    collectives, mesh = tuple(collectives), tuple(mesh)
    if hashed_by_value(collectives):
        try:  # the key holds the values themselves: equal collectives, mesh and cluster, the same answer
            return _placed_time(collectives, mesh, cluster)
        except TypeError:  # a collective or mesh that is not hashable (a dict)
            pass
    return _placed_time.__wrapped__(collectives, mesh, cluster)  # priced as given


def hashed_by_value(items: Iterable[Any]) -> bool:
    """Whether no item hashes by its identity (an object of a class without ``__eq__``, which may be
    changed after an answer was kept for it): what an answer kept per value may be keyed on (frozen
    dataclasses, tuples, numbers and strings hash by their fields; a dict does not hash at all)."""
    return all(type(item).__hash__ is not object.__hash__ for item in items)


@functools.lru_cache(maxsize=1 << 12)
def _placed_time(collectives: tuple[Any, ...], mesh: tuple[tuple[str, int], ...], cluster: Cluster
                 ) -> tuple[float, tuple[CollectiveTime, ...], tuple[str, ...], tuple[Span | None, ...]]:
    rows = placed(collectives, mesh, cluster.node_size)
    return (*communication_time(rows, cluster), tuple(row.get("span") for row in rows))
