"""The names every entry point accepts (and every output uses), in one light module.

The CLI builds its argument choices from these without importing jax, flax or
optax; the modules that give the names their meaning (`xla_cost.analysis.pipeline`,
`xla_cost.step.workload`, `xla_cost.zoo`) check at import that they define exactly
these.
"""

from __future__ import annotations

__all__ = ["COUNTERS", "DTYPES", "FLOAT8", "FLOAT8_ACTIVATIONS", "OPTIMIZER_NAMES", "DEFAULT_OPTIMIZER", "REMAINDER",
           "MESH_AXES"]

MESH_AXES: tuple[str, ...] = ("data", "fsdp", "expert", "context", "model")
"""The mesh axes, outermost first: ``model`` is innermost, so a tensor-parallel
group is consecutive devices (one node's NVLink domain), then ``context``
(Megatron-Core's order, tensor then context; Llama 3's [TP, CP, PP, DP],
Dubey et al. 2024 §3.3.2)."""

COUNTERS: tuple[str, ...] = ("xla", "jaxpr")
"""``xla``: compile every phase and correct XLA's figures for loops; ``jaxpr``:
count the jaxprs alone, without compiling (fast; no bytes or memory)."""

OPTIMIZER_NAMES: tuple[str, ...] = (
    "sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop", "adagrad", "lion", "adafactor", "lamb", "muon",
)
"""The optimizers known by name (`xla_cost.OPTIMIZERS` builds them)."""

DEFAULT_OPTIMIZER: str = "adam"
"""The optimizer of every command and function that takes one by name and is
not given one (`analyze`, `sweep`, `scaling`, `estimate`, `fit`, `report
--model`, `xla_cost.RunConfig`): Adam, what models are trained with. The
pages of `xla_cost.study` name theirs (seed 001's figures are SGD's)."""

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16", "float8")
"""The computation dtypes a zoo model can be built in (parameters stay float32).
``float8``: bfloat16, with the projections' and MLPs' matrix products in FP8
(float8_e4m3fn forward, float8_e5m2 gradients, current scaling), for the
gpt, llama, gemma and mixtral families (`xla_cost.zoo.fp8_families`)."""

FLOAT8: str = "float8"
"""The `DTYPES` name of FP8 matrix products (``--dtype float8``)."""

FLOAT8_ACTIVATIONS: str = "bfloat16"
"""What a ``float8`` model computes in but its FP8 products: the activations, the
attention's softmax products, the head; the dtype its report records."""

REMAINDER: str = "(remainder)"
"""The per-layer row of what no parametrised module owns (`xla_cost.count.attribution`)."""
