"""`Hardware`: the devices a step is priced on, as one option object.

A device of the registry (`xla_cost.timemodel.devices`) for its peak FLOP/s and
memory bandwidth and its cluster preset, the overrides of that cluster
(another node preset, one interconnect for every link, devices per node,
network adapters per host, their bandwidth, latency), the
collective algorithm, and the two factors of the time model: the share of
communication hidden behind compute and the share of peak FLOP/s reached.
`xla_cost.scaling`, `xla_cost.estimate` and the command line's
``--device``/``--node``/``--nics``/... take it.
"""

from __future__ import annotations

import dataclasses

from xla_cost.errors import InputError
from xla_cost.timemodel import comm, schedule
from xla_cost.timemodel import devices as registry

__all__ = ["Hardware"]


@dataclasses.dataclass(frozen=True)
class Hardware:
    """What a sharded step is priced on.

    Attributes:
      device: a device of the registry with a published peak (``h100``,
        ``a100``, ``v100``, ``p40``, ...): its FLOP/s for the step's dtype,
        its memory bandwidth and its cluster preset.
      interconnect: one `xla_cost.timemodel.comm.INTERCONNECTS` preset for
        every link instead of the device's cluster (None: the cluster's).
      node: a node preset of `xla_cost.timemodel.devices.NODES` (``dgx-2``:
        16 V100 on NVSwitch sharing 8 EDR adapters) instead of the device's
        own (None: the device's).
      node_size: devices per node (a TPU slice's chips; None: the node's, or
        for a step compiled for a TPU slice, ``tpu-v5e:2x2``, that slice's).
      nics: network adapters per host (None: the node's): a device's share
        of the network between nodes is ``nics * bandwidth / devices per host``.
      bandwidth, latency: overrides of one network adapter's line rate
        (bytes/s per direction) and of the seconds per hop between nodes, or
        of the single link of a flat network.
      algorithm: the collective algorithm (`xla_cost.timemodel.comm.ALGORITHMS`).
      overlap: None (default) to schedule the gradient collectives against
        the backward pass (`xla_cost.timemodel.schedule`: buckets of
        ``bucket_bytes``, each reduced once its gradients exist), or a fixed
        share of all communication hidden behind compute, in [0, 1].
      mfu: None (default) to time compute kernel by kernel
        (`xla_cost.timemodel.kernel_time`, with the time model's global
        constants, `xla_cost.timemodel.calibration`), or a
        fixed share of peak FLOP/s (model FLOP utilisation) in (0, 1] for a
        roofline: 1.0 is compute at peak (a lower bound on the compute's time
        where the device's own program's bytes are priced; from a CPU program's
        totals its bytes include the products' operands, and it may not be).
      bucket_bytes: the gradient buckets' size (default PyTorch DDP's 25 MB;
        0: every gradient reduced on its own).
      hierarchical: all-reduces over several nodes in two levels (within the
        nodes, then between them), as NCCL runs them; False: one flat ring
        at the slowest link.
      arithmetic: the dtype whose peak the matrix products run at, where it is
        not the step's (None: the step's dtype). ``float32`` prices a float16
        step as float16 storage with float32 arithmetic, as cuDNN runs it on
        GPUs without fast float16 (the Tesla P40).
    """

    device: str = "h100"
    interconnect: str | None = None
    node: str | None = None
    node_size: int | None = None
    nics: int | None = None
    bandwidth: float | None = None
    latency: float | None = None
    algorithm: str = "ring"
    overlap: float | None = None
    mfu: float | None = None
    bucket_bytes: float = schedule.DDP_BUCKET_BYTES
    hierarchical: bool = True
    arithmetic: str | None = None

    def __post_init__(self) -> None:
        # the cluster's overrides, checked where the hardware is named (before anything is analysed)
        if self.node is not None:
            registry.node(self.node)
        for value, what, fix in ((self.node_size, "devices per node", "Pass e.g. --node-size 8 (node_size=8)."),
                                 (self.nics, "network adapters per host", "Pass e.g. --nics 8 (nics=8).")):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InputError(f"{what}, an integer >= 1", repr(value), fix)
        if self.bandwidth is not None:
            comm.check_bandwidth(self.bandwidth)

    def bound(self) -> Hardware:
        """The same hardware priced as a bound: compute at peak (``mfu=1``), no
        communication hidden, gradients reduced one by one on flat rings: no
        step can be faster."""
        return dataclasses.replace(self, overlap=0.0, mfu=1.0, bucket_bytes=0, hierarchical=False)

    @property
    def is_bound(self) -> bool:
        """Whether the hardware prices bounds rather than predictions (a fixed ``mfu``)."""
        return self.mfu is not None

    def cluster(self, target: str | None = None) -> comm.Cluster:
        """The device's cluster preset with this object's overrides (`xla_cost.timemodel.comm.cluster`):
        a prediction prices collectives at the node's measured NCCL curves where it has them
        (`xla_cost.timemodel.bus`), a bound (`is_bound`) at line rate.

        Args:
          target: the compile target of the step priced (`xla_cost.Report.target`):
            a TPU slice (``tpu-v5e:2x2``) is the node where ``node_size`` is not
            given, so replicas beyond it meet on the data-center network.
        """
        size = self.node_size if self.node_size is not None else registry.target_slice(target)
        return comm.cluster(self.device, self.interconnect, node=self.node, node_size=size, nics=self.nics,
                            bandwidth=self.bandwidth, latency=self.latency, algorithm=self.algorithm,
                            hierarchical=self.hierarchical, curves=not self.is_bound)

    def peak(self) -> registry.DevicePeak:
        """The device's published peak (`xla_cost.timemodel.devices.DevicePeak`).

        Raises:
          InputError: a device without a published peak.
        """
        peak = registry.device(self.device, has="peak").peak
        if peak is None:  # pragma: no cover - `has="peak"` guarantees one
            raise InputError("a device with a published peak", repr(self.device), "Use e.g. device='h100'.")
        return peak

    def flat(self) -> Hardware:
        """The same hardware on one flat network: the node's network adapter
        for every link, one a device, unless an interconnect is given."""
        if self.interconnect is not None:
            return dataclasses.replace(self, nics=None)
        node = registry.node(self.node) if self.node is not None else registry.NODES[
            registry.device(self.device, has="cluster").node or ""]
        return dataclasses.replace(self, interconnect=node.nic, nics=None)
