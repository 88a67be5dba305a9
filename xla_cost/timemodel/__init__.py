"""The time model: what a compiled step costs in seconds on a device.

`devices` is the one registry of hardware (peaks, memory, bandwidth, nodes and
their wiring, compile targets, sources); `kernel_time` prices a compiled
program kernel by kernel against it; `links` holds the interconnect presets
and their sources; `comm` prices collectives over them (clusters, the
algorithms as a table), at NCCL's measured bus bandwidth where `bus` has a
node's published curves (`context_exchange`: context parallelism's exchange
of keys and values against its attention); `schedule` builds a step's
time from compute, communication, overlap and a pipeline's schedule;
`calibration` holds the fitted constants (`calibrations/constants.json`) and
their physical ranges; `hardware` bundles what a step is priced on
(`Hardware`). It sits beside the mesh code (`xla_cost.parallel`), whose
placement of groups on nodes it reads, and imports `compiled` and the foundation.
"""
