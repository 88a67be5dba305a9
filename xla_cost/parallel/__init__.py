"""Meshes: laying a step out on devices for XLA's SPMD partitioner.

`mesh` names the axes (data, fsdp, expert, context and model) and builds the
mesh; `sharding` lays a step's trees out on it (`simulated`: the devices the
CPU simulates for it; `residual`: a transformer's residual stream split over
``model``, as MaxText splits it; `context`: a sequence split over ``context``,
attention's keys and values gathered over it); `placement` says
where a mesh axis's groups lie on the nodes. What the collectives and kernels
of a sharded step cost in time is `xla_cost.timemodel`'s. It imports `step`,
`compiled` and the foundation.
"""
