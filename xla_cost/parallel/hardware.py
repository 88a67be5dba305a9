"""`Hardware`: the devices a step is priced on, as one option object.

A device of the registry (`xla_cost.parallel.devices`) for its peak FLOP/s and
memory bandwidth and its cluster preset, the overrides of that cluster
(one interconnect for every link, devices per node, bandwidth, latency), the
collective algorithm, and the two factors of the time model: the share of
communication hidden behind compute and the share of peak FLOP/s reached.
`xla_cost.predict_scaling`, `xla_cost.estimate` and the command line's
``--device``/``--interconnect``/... take it.
"""

from __future__ import annotations

import dataclasses

from xla_cost.errors import InputError
from xla_cost.parallel import comm, schedule
from xla_cost.parallel import devices as registry

__all__ = ["Hardware"]


@dataclasses.dataclass(frozen=True)
class Hardware:
    """What a sharded step is priced on.

    Attributes:
      device: a device of the registry with a published peak (``h100``,
        ``a100``, ``v100``, ``p40``, ...): its FLOP/s for the step's dtype,
        its memory bandwidth and its cluster preset.
      interconnect: one `xla_cost.parallel.comm.INTERCONNECTS` preset for
        every link instead of the device's cluster (None: the cluster's).
      node_size, bandwidth, latency: overrides of the cluster preset (devices
        per node; bytes/s per device per direction and seconds per hop of the
        link between nodes, or of the single link of a flat network).
      algorithm: the collective algorithm (`xla_cost.parallel.comm.ALGORITHMS`).
      overlap: the share of communication hidden behind compute, in [0, 1]
        (`xla_cost.parallel.schedule.DEFAULT_OVERLAP`: none).
      mfu: the share of peak FLOP/s the kernels reach (model FLOP
        utilisation), in (0, 1]; 1.0, the default, prices compute at peak (a
        lower bound on time).
    """

    device: str = "h100"
    interconnect: str | None = None
    node_size: int | None = None
    bandwidth: float | None = None
    latency: float | None = None
    algorithm: str = "ring"
    overlap: float = schedule.DEFAULT_OVERLAP
    mfu: float = 1.0

    def cluster(self) -> comm.Cluster:
        """The device's cluster preset with this object's overrides (`xla_cost.parallel.comm.cluster`)."""
        return comm.cluster(self.device, self.interconnect, node_size=self.node_size, bandwidth=self.bandwidth,
                            latency=self.latency, algorithm=self.algorithm)

    def peak(self) -> registry.DevicePeak:
        """The device's published peak (`xla_cost.parallel.devices.DevicePeak`).

        Raises:
          InputError: a device without a published peak.
        """
        peak = registry.device(self.device, has="peak").peak
        if peak is None:  # pragma: no cover - `has="peak"` guarantees one
            raise InputError("a device with a published peak", repr(self.device), "Use e.g. device='h100'.")
        return peak

    def flat(self) -> Hardware:
        """The same hardware on one flat network: the device cluster's link
        between nodes for every link, unless an interconnect is given."""
        return dataclasses.replace(self, interconnect=self.interconnect or self.cluster().inter.name)
