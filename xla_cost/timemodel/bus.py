"""Collectives priced as NCCL runs them: measured bus bandwidth against message size.

nccl-tests report a collective's *bus bandwidth* (NVIDIA/nccl-tests,
doc/PERFORMANCE.md, https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
``busbw = algbw x factor`` with ``algbw = S / t`` for a buffer of ``S`` bytes
(the gathered result of an all-gather, the input of a reduce-scatter) and the
factor ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for reduce-scatter, all-gather
and all-to-all, 1 for broadcast and send/recv. So a collective takes

    t = factor(kind, n) x S / busbw(S)

and busbw is what the hardware's bottleneck delivers at that size: the same
number whatever ``n``, which is what makes one measured curve price every
group size. Between measured sizes the curve is interpolated linearly in
``log(S)``; below its smallest size the time stays that size's (a latency
floor); above its largest, busbw stays the largest size's.

Every figure below is a published measurement, with its source beside it;
where no curve is published for a case, one is derived from the nearest
measured curve by the rule written beside it (`BusCurve.derived`). Where no
figure at all is published for a link (a DGX-1's NVLink 2 cube mesh, PCIe,
Ethernet, TPU ICI and DCN), there is no `Fabric`, and `xla_cost.timemodel.comm` prices the link with
its alpha-beta model at line rate, saying so in its notes (a link priced at a
curve is named with ``@nccl``).

Across nodes (`Fabric.time`): NCCL lays its rings out so that each crosses a
node boundary once per node, and runs several rings (channels) whose
boundary crossings go out through different network adapters. A ring over
``n`` devices with ``p`` of them on each node therefore moves its boundary
traffic over ``p`` adapters at once, and its bus bandwidth is

    busbw = min(within-node busbw(S), eff(8 S / p) x p x per-device network rate)

where ``eff`` is the measured fraction of the node's network line rate that
a multi-node NCCL collective reaches (`NETWORK_EFFICIENCY`, measured on nodes
of 8 adapters: read at the message that puts as many bytes, ``S / p``,
through each adapter).
An all-reduce may instead run in two levels (reduce-scatter within each node,
all-reduce of each device's ``1/p`` between the nodes, all-gather within the
node); NCCL's tuner runs whichever is faster, and so does `Fabric.time`.

Left out: ``eff`` was measured on AWS EFA, whose busbw rises with the size
more slowly than InfiniBand's (4 HDR adapters per 8 A100s reached 96 of 100
GB/s by 128 MB, NVIDIA/nccl-tests issue 119, where ``eff`` gives about half):
cross-node collectives of 16-512 MiB may be priced up to ~2x slow. NVLS trees
across 2 nodes (470 GB/s all-reduce busbw on 16 H100s, nccl-tests issue 309)
are not modelled: the ring's 367 GB/s is charged.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from xla_cost.errors import InputError

__all__ = ["BusCurve", "Fabric", "FABRICS", "NETWORK_EFFICIENCY", "MEASURED_NICS", "NCCL_TESTS", "traffic_factor",
           "reach", "fabric"]

NCCL_TESTS = "NVIDIA/nccl-tests, doc/PERFORMANCE.md (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md)"
"""Where the bus-bandwidth convention is defined."""

KiB, MiB, GiB = 2**10, 2**20, 2**30
GB = 1e9  # the tables' GB/s are 10^9 bytes/s (nccl-tests prints decimal GB/s)


def traffic_factor(kind: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor of ``kind`` over ``n`` devices
    (`NCCL_TESTS`, 'Summary'): all-reduce ``2(n-1)/n``; all-gather,
    reduce-scatter, all-to-all ``(n-1)/n``; send/recv (collective-permute)
    and broadcast 1."""
    if kind == "all-reduce":
        return 2 * (n - 1) / n
    if kind in ("all-gather", "reduce-scatter", "all-to-all"):
        return (n - 1) / n
    return 1.0


@dataclasses.dataclass(frozen=True)
class BusCurve:
    """Bus bandwidth against message size, as published.

    Attributes:
      name: what it measures, e.g. ``"8x H200 NVLink 4 all-reduce (NVLS)"``.
      points: ``(bytes, busbw in bytes/s)`` pairs, sizes ascending.
      source: the document, table and address the figures come from.
      derived: empty for a measured curve; else the rule that made it from
        a measured one.

    Raises:
      InputError: fewer than one point, sizes not ascending, or a size or
        bandwidth that is not > 0.
    """

    name: str
    points: tuple[tuple[float, float], ...]
    source: str
    derived: str = ""

    def __post_init__(self) -> None:
        sizes = [s for s, _ in self.points]
        if not self.points or any(not (s > 0 and b > 0) for s, b in self.points) or sizes != sorted(set(sizes)):
            raise InputError("a bus-bandwidth curve: (bytes, bytes/s) pairs > 0, sizes ascending", repr(self.points),
                             "List the published table's rows from the smallest size up.")

    def busbw(self, nbytes: float) -> float:
        """Bus bandwidth (bytes/s) at ``nbytes``: linear in ``log(nbytes)``
        between the published sizes; below the smallest, the smallest size's
        time (busbw in proportion to the size); above the largest, its busbw."""
        sizes = [s for s, _ in self.points]
        first_size, first = self.points[0]
        if nbytes <= first_size:
            return first * nbytes / first_size
        if nbytes >= sizes[-1]:
            return self.points[-1][1]
        i = bisect.bisect_right(sizes, nbytes)
        (s0, b0), (s1, b1) = self.points[i - 1], self.points[i]
        w = (math.log(nbytes) - math.log(s0)) / (math.log(s1) - math.log(s0))
        return b0 + w * (b1 - b0)

    @property
    def plateau(self) -> float:
        """The busbw at the largest published size."""
        return self.points[-1][1]

    def scaled(self, plateau: float, name: str, rule: str) -> BusCurve:
        """The same shape with its largest size's busbw at ``plateau`` (a derived curve, ``rule`` said)."""
        factor = plateau / self.plateau
        return BusCurve(name, tuple((s, b * factor) for s, b in self.points), self.source,
                        f"{rule}: {self.name} scaled by {factor:.4f} ({self.plateau / GB:g} -> {plateau / GB:g} GB/s)")


def _table(rows: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    return tuple((float(size), busbw * GB) for size, busbw in rows)


_BEKMAN = ("Bekman, Machine Learning Engineering Open Book, network/benchmarks/README.md, 'How the calls are timed' "
           "(github.com/stas00/ml-engineering, commit 744d01e, 2026-08; "
           "https://github.com/stas00/ml-engineering/blob/master/network/benchmarks/README.md)")

H200_ALL_REDUCE = BusCurve(
    "8x H200 NVLink 4 all-reduce (NCCL 2.30.7: ring LL to 1 MiB, NVLS from 2 MiB)",
    # the table's nccl-tests column: all_reduce_perf on one 8x H200 SXM node (NVLink 4, NVSwitch)
    _table(((32 * KiB, 3.20), (64 * KiB, 6.26), (128 * KiB, 12.40), (256 * KiB, 24.63), (512 * KiB, 48.30),
            (1 * MiB, 72.45), (2 * MiB, 91.48), (4 * MiB, 139.97), (8 * MiB, 182.03), (16 * MiB, 242.45),
            (32 * MiB, 298.44), (64 * MiB, 369.82), (128 * MiB, 411.21), (256 * MiB, 442.27), (512 * MiB, 455.82),
            (1 * GiB, 464.00), (2 * GiB, 468.31), (4 * GiB, 473.10), (8 * GiB, 475.16), (16 * GiB, 480.70))),
    _BEKMAN + "; NVIDIA's S. Jeaugey gives ~480 GB/s NVLS peak busbw on 8 H100s (NVIDIA/nccl-tests issue 212, "
              "https://github.com/NVIDIA/nccl-tests/issues/212)")

_RING_SOURCE = ("Bekman, ibid., network/README.md 'SHARP': nccl-tests on 8x H200 at 16 GiB, all-reduce with "
                "NCCL_NVLS_ENABLE=0 (ring) 367.2 GB/s, all-gather 361.4, reduce-scatter 362.9; ring at 4 GPUs "
                "363.3 (NVLS only from 5 GPUs) (https://github.com/stas00/ml-engineering/blob/master/network/"
                "README.md); S. Jeaugey (NVIDIA): 'NCCL can get an effective NVLink bandwidth of 370GB/s' on H100 "
                "for non-all-reduce operations or NCCL_ALGO=RING (https://github.com/NVIDIA/nccl-tests/issues/212)")

NVLINK4_RING_PLATEAU = {"all-reduce": 367.2 * GB, "all-gather": 361.4 * GB, "reduce-scatter": 362.9 * GB}
"""The ring's busbw on 8 H200s (NVLink 4) at 16 GiB, by kind (`_RING_SOURCE`)."""

A100_PLATEAU = 230 * GB
"""S. Jeaugey (NVIDIA), NVIDIA/nccl-tests issue 149 (https://github.com/NVIDIA/nccl-tests/issues/149): 12 NVLinks
at ~20 GB/s effective each on an A100, 'some other bottlenecks on the GPUs limits it to ~230GB/s' busbw, reached
at 8 GB; a DGX A100's all_reduce_perf measured 232.54 GB/s (NVIDIA/nccl-tests issue 175)."""

MEASURED_NICS = 8
"""Network adapters per node in the `NETWORK_EFFICIENCY` measurement (a message of ``S`` bytes crossed
them ``S / 8`` each)."""

NETWORK_EFFICIENCY = BusCurve(
    "4 nodes x 8 B200, 8 x 400 Gb/s EFA per node: all-reduce busbw over the node's 8 x 50 GB/s",
    # the '4 nodes' column of Bekman's table, all_reduce_bench.py (torch 2.9.1, NCCL 2.27.7), divided by the
    # node's network line rate 8 x 50 GB/s = 400 GB/s: the fraction of it a multi-node collective reaches.
    # Left out: its 32, 64 and 128 KiB rows (0.01, 0.04, 0.45 GB/s: 6.4, 3.3 and 0.56 ms, each slower than the
    # 256 KiB row's 0.38 ms, which no collective of fewer bytes is): smaller sizes take the 256 KiB row's time
    tuple((size, busbw / 400) for size, busbw in (
        (256 * KiB, 1.33), (512 * KiB, 2.84),
        (1 * MiB, 5.37), (2 * MiB, 10.38), (4 * MiB, 18.90), (8 * MiB, 35.12), (16 * MiB, 64.43),
        (32 * MiB, 91.19), (64 * MiB, 156.74), (128 * MiB, 197.94), (256 * MiB, 229.09), (512 * MiB, 326.90),
        (1 * GiB, 361.99), (2 * GiB, 372.42), (4 * GiB, 377.34), (8 * GiB, 380.39), (16 * GiB, 381.80))),
    "Bekman, ibid., network/README.md 'Inter-node speed depends on intra-node speed' (1x and 4x AWS P6-B200, "
    "8 EFA v4 of 50 GB/s per node, the same per-GPU rate as a DGX H100's 400 Gb/s NDR); its plateau, 0.955 of "
    "the line rate, is NVIDIA's 'For NDR @ 400Gbps you should see 46-48GB/s per NIC' (A. Lade, "
    "https://github.com/NVIDIA/nccl-tests/issues/290) and 96 GB/s busbw on 4 HDR NICs per 8 A100s (0.96 of "
    "4 x 25 GB/s; https://github.com/NVIDIA/nccl-tests/issues/119)",
    derived="applied to every InfiniBand/EFA network as a fraction of its line rate (the curve's bytes/s are "
            "fractions, not bytes/s): measured on 50 GB/s adapters, used for 25 GB/s HDR too")
"""The fraction of a node's network line rate a multi-node NCCL collective
reaches, against its size (``points``' second column is a fraction)."""


@dataclasses.dataclass(frozen=True, eq=False)
class Fabric:
    """A node's fabric as NCCL measures it: within-node curves by kind, and
    how multi-node collectives reach the network.

    Attributes:
      name: the intra-node link (an `xla_cost.timemodel.comm.INTERCONNECTS` name).
      within: the within-node curve of each kind (``all-reduce`` with the
        ring, ``all-gather``, ``reduce-scatter``, ``all-to-all``,
        ``collective-permute``).
      nvls: the all-reduce curve with NVLink SHARP, used within a node
        from ``nvls_from`` devices (None: none).
      nvls_from: the fewest devices NCCL runs NVLS on.
    """

    name: str
    within: Mapping[str, BusCurve]
    nvls: BusCurve | None = None
    nvls_from: int = 5

    def curve(self, kind: str, n: int) -> BusCurve:
        """The within-node curve of ``kind`` over ``n`` devices of a node."""
        if kind == "all-reduce" and self.nvls is not None and n >= self.nvls_from:
            return self.nvls
        return self.within.get(kind, self.within["all-gather"])

    def time(self, kind: str, nbytes: float, n: int, per_node: int, nodes: int, network: float,
             hierarchical: bool) -> float:
        """Seconds of one collective of ``nbytes`` (nccl-tests' ``S``) over
        ``n`` devices, ``per_node`` of them on each of ``nodes`` nodes (1
        node: within it), each device with ``network`` bytes/s of its node's
        network line rate (`xla_cost.timemodel.comm.Cluster.inter`).

        Within a node: ``factor x S / curve(S)``. Across nodes (module
        docstring; ``reach(b) = eff(8 b) x network``, an adapter carrying
        ``b`` bytes): a ring at ``min(curve(S), reach(S / per_node) x
        per_node)``; an all-to-all sends ``(n - per_node)/n`` of ``S`` off
        the node through each device's own adapter, ``min(curve(S), reach(S)
        x (n-1)/(n-per_node))``; a send/recv at ``min(curve(S), reach(S))``;
        an all-reduce of a ``hierarchical`` cluster the faster of that ring
        and the two levels (a within-node reduce-scatter and all-gather over
        ``per_node``, between them an all-reduce of ``S / per_node`` over
        ``nodes`` at ``reach(S / per_node)``).
        """
        if n <= 1 or nbytes <= 0:
            return 0.0
        factor = traffic_factor(kind, n)
        if nodes <= 1:
            return factor * nbytes / self.curve(kind, n).busbw(nbytes)
        near = self.within.get(kind, self.within["all-gather"]).busbw(nbytes)  # a ring: no NVLS across nodes
        if kind == "all-to-all":  # each device's own adapter carries what leaves the node
            busbw = min(near, reach(nbytes, network) * (n - 1) / max(n - per_node, 1))
        elif kind in ("collective-permute", "collective-broadcast"):
            busbw = min(near, reach(nbytes, network))
        else:  # the ring's channels cross the node boundary over per_node adapters, S / per_node each
            busbw = min(near, reach(nbytes / per_node, network) * per_node)
        ring = factor * nbytes / busbw
        if kind != "all-reduce" or not hierarchical or per_node <= 1:
            return ring
        levels = (self.time("reduce-scatter", nbytes, per_node, per_node, 1, network, False)
                  + traffic_factor("all-reduce", nodes) * nbytes / per_node / reach(nbytes / per_node, network)
                  + self.time("all-gather", nbytes, per_node, per_node, 1, network, False))
        return min(ring, levels)


def reach(per_adapter: float, network: float) -> float:
    """Bytes/s one network adapter of line rate ``network`` carries for a
    collective that sends ``per_adapter`` bytes through it: the measured
    efficiency (`NETWORK_EFFICIENCY`) at the message that put as many bytes
    through each of its node's `MEASURED_NICS` adapters."""
    return NETWORK_EFFICIENCY.busbw(MEASURED_NICS * per_adapter) * network


def _nvlink4() -> Fabric:
    rule = "no ring size sweep published for NVLink 4; the NVLS all-reduce curve's shape scaled to the ring's 16 GiB busbw"
    within = {kind: H200_ALL_REDUCE.scaled(plateau, f"8x H200 NVLink 4 {kind} (ring)", rule)
              for kind, plateau in NVLINK4_RING_PLATEAU.items()}
    within = {k: dataclasses.replace(c, source=f"{c.source}; {_RING_SOURCE}") for k, c in within.items()}
    within["all-to-all"] = dataclasses.replace(
        within["all-gather"], name="8x H200 NVLink 4 all-to-all",
        derived=within["all-gather"].derived + "; all-to-all as all-gather (the same busbw factor; no NVLink 4 "
                "all-to-all sweep published)")
    within["collective-permute"] = dataclasses.replace(
        within["all-gather"], name="8x H200 NVLink 4 send/recv",
        derived=within["all-gather"].derived + "; send/recv as the ring's all-gather (a ring's step is a send/recv)")
    return Fabric("nvlink4", MappingProxyType(within), nvls=H200_ALL_REDUCE, nvls_from=5)


def _nvlink3() -> Fabric:
    rule = ("no A100 size sweep found; the 8x H200 all-reduce curve's shape scaled to the A100's ~230 GB/s "
            "(an A100 has no NVLS: its all-reduce is the ring)")
    curve = H200_ALL_REDUCE.scaled(A100_PLATEAU, "8x A100 NVLink 3 (ring)", rule)
    curve = dataclasses.replace(curve, source=f"{curve.source}; S. Jeaugey (NVIDIA), ~230 GB/s on 8 A100s, "
                                "https://github.com/NVIDIA/nccl-tests/issues/149")
    kinds = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
    return Fabric("nvlink3", MappingProxyType({k: dataclasses.replace(curve, name=f"8x A100 NVLink 3 {k}")
                                               for k in kinds}))


B200_ALL_REDUCE = BusCurve(
    "8x B200 NVLink 5 all-reduce (NCCL 2.27.7; NVLS from 6 GPUs at large sizes)",
    # the '1 node' column: all_reduce_bench.py (torch 2.9.1) on one AWS P6-B200 node of 8 B200
    _table(((32 * KiB, 1.20), (64 * KiB, 2.17), (128 * KiB, 4.86), (256 * KiB, 9.54), (512 * KiB, 18.71),
            (1 * MiB, 36.06), (2 * MiB, 63.09), (4 * MiB, 76.48), (8 * MiB, 126.49), (16 * MiB, 254.96),
            (32 * MiB, 325.97), (64 * MiB, 400.60), (128 * MiB, 568.38), (256 * MiB, 646.11), (512 * MiB, 688.99),
            (1 * GiB, 723.34), (2 * GiB, 734.97), (4 * GiB, 740.64), (8 * GiB, 839.07), (16 * GiB, 845.67))),
    "Bekman, ibid., network/README.md 'Inter-node speed depends on intra-node speed' "
    "(https://github.com/stas00/ml-engineering/blob/master/network/README.md)")

B200_RING = 682.2 * GB
"""8x B200 all-reduce with NCCL_NVLS_ENABLE=0 (the ring) at 8 GiB, nccl-tests (Bekman, ibid., 'SHARP': 673-682
GB/s from 4 to 8 GPUs; NVLS from 6 GPUs on that node)."""


def _nvlink5() -> Fabric:
    rule = ("no ring size sweep or all-gather figure published for NVLink 5; the all-reduce curve's shape "
            "scaled to the ring all-reduce's 8 GiB busbw, every kind alike")
    kinds = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
    ring = B200_ALL_REDUCE.scaled(B200_RING, "8x B200 NVLink 5 (ring)", rule)
    return Fabric("nvlink5", MappingProxyType({k: dataclasses.replace(ring, name=f"8x B200 NVLink 5 {k}")
                                               for k in kinds}), nvls=B200_ALL_REDUCE, nvls_from=6)


_DGX2 = ("J. Wohlbier, nccl-tests results on a DGX-2 (github.com/wohlbier/nccl-tests, README.md at 33ee81a3, "
         "nccl-tests of 2019: https://github.com/wohlbier/nccl-tests/blob/33ee81a3ec6c5e8fdd1e61f713a5c5185b000cd1/"
         "README.md): all_reduce_perf, all_gather_perf and reduce_scatter_perf, one process driving 12 of the "
         "DGX-2's 16 Tesla V100-SXM3-32GB ('-g 12', four GPUs busy with another job), float, out-of-place columns")

DGX2_ALL_REDUCE = BusCurve(
    "12 V100 SXM3 of a DGX-2, NVLink 2 through NVSwitch: all-reduce (ring)",
    # all_reduce_perf's out-of-place busbw, from 32 KiB (its time, 63 us, is the single-threaded launch's floor
    # of every smaller size: 60-63 us from 8 bytes up) to the largest size run
    _table(((32 * KiB, 0.95), (64 * KiB, 1.85), (128 * KiB, 3.65), (256 * KiB, 7.03), (512 * KiB, 12.67),
            (1 * MiB, 21.56), (2 * MiB, 26.80), (4 * MiB, 41.87), (8 * MiB, 54.25), (16 * MiB, 63.71),
            (32 * MiB, 108.75), (64 * MiB, 116.98), (128 * MiB, 120.17), (256 * MiB, 121.92), (512 * MiB, 122.70),
            (1 * GiB, 123.14), (2 * GiB, 123.31), (4 * GiB, 123.50), (8 * GiB, 123.56))),
    _DGX2)

DGX2_ALL_GATHER = BusCurve(
    "12 V100 SXM3 of a DGX-2, NVLink 2 through NVSwitch: all-gather (ring)",
    # all_gather_perf's out-of-place busbw; its sizes are 48 x 2^k - 48 bytes below a power of two (1,048,560 for
    # 1 MiB): listed at their own sizes. The in-place column reaches 112 GB/s from 64 MiB; XLA's all-gather
    # writes a new buffer (out-of-place)
    _table(((32736, 0.52), (65520, 1.02), (131040, 2.00), (262128, 3.80), (524256, 6.80), (1048560, 13.20),
            (2097120, 18.10), (4194288, 28.76), (8388576, 41.25), (16777200, 49.08), (33554400, 66.04),
            (67108848, 67.21), (134217696, 69.69), (268435440, 70.69), (536870880, 71.11), (1073741808, 71.61),
            (2147483616, 72.41), (4294967280, 73.04), (8589934560, 73.75))),
    _DGX2)

DGX2_REDUCE_SCATTER = BusCurve(
    "12 V100 SXM3 of a DGX-2, NVLink 2 through NVSwitch: reduce-scatter (ring)",
    # reduce_scatter_perf's out-of-place busbw at the same sizes; from 64 MiB it alternates between ~47 and ~60
    # GB/s from one size to the next, both listed as measured
    _table(((32736, 0.49), (65520, 0.98), (131040, 1.90), (262128, 3.67), (524256, 6.52), (1048560, 12.63),
            (2097120, 14.79), (4194288, 22.81), (8388576, 31.84), (16777200, 45.49), (33554400, 55.43),
            (67108848, 45.45), (134217696, 58.73), (268435440, 47.45), (536870880, 60.01), (1073741808, 48.21),
            (2147483616, 61.96), (4294967280, 48.80), (8589934560, 64.16))),
    _DGX2)


def _nvswitch2() -> Fabric:
    """A DGX-2's 16 V100 on NVSwitch: the three kinds measured (`_DGX2`); all-to-all and send/recv as the
    all-gather, NVLink 4's rule (the same busbw factor; a ring's step is a send/recv). Measured over 12 of the
    node's GPUs, used for any group within it (busbw is the same number whatever ``n``, the module docstring)."""
    rule = "no DGX-2 {kind} sweep published; as the measured all-gather ({why})"
    within = {"all-reduce": DGX2_ALL_REDUCE, "all-gather": DGX2_ALL_GATHER, "reduce-scatter": DGX2_REDUCE_SCATTER,
              "all-to-all": dataclasses.replace(DGX2_ALL_GATHER, name="DGX-2 all-to-all",
                                                derived=rule.format(kind="all-to-all", why="the same busbw factor")),
              "collective-permute": dataclasses.replace(
                  DGX2_ALL_GATHER, name="DGX-2 send/recv",
                  derived=rule.format(kind="send/recv", why="a ring's step is a send/recv"))}
    return Fabric("nvlink2-nvswitch", MappingProxyType(within))


FABRICS: Mapping[str, Fabric] = MappingProxyType({f.name: f for f in (_nvlink5(), _nvlink4(), _nvlink3(),
                                                                      _nvswitch2())})
"""The fabrics with published NCCL curves, by intra-node link: ``nvlink5``
(DGX B200), ``nvlink4`` (DGX H100 and H200), ``nvlink3`` (DGX A100) and
``nvlink2-nvswitch`` (DGX-2). Any other link (a DGX-1's NVLink 2 cube mesh,
``nvlink2``, among them) is priced with the alpha-beta model
(`xla_cost.timemodel.comm`)."""


def fabric(intra: str) -> Fabric | None:
    """The `Fabric` of intra-node link ``intra``, or None where no curve is published."""
    return FABRICS.get(intra)
