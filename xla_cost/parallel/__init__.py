"""Devices and meshes: the device registry, sharding a step, and the cost of communication.

`devices` is the one registry of hardware (peaks, memory, bandwidth, cluster
wiring, sources); `hardware` bundles what a step is priced on (`Hardware`);
`sharding` lays a step's trees out on a mesh of data, fsdp, expert and model axes
for XLA's SPMD partitioner (`simulated`: the devices the CPU simulates for it); `comm` prices collectives with the alpha-beta model
(interconnect presets, clusters, the algorithms as a table). It imports
`step` and the foundation.
"""
