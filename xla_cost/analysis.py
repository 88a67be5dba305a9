"""`analyze`: one training step's costs, from compiled XLA and from the jaxpr."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import optax

from xla_cost import xla
from xla_cost.attribution import attribute
from xla_cost.errors import CostAnalysisUnavailableError
from xla_cost.interpret import JaxprCount, count_jaxpr
from xla_cost.report import LayerCosts, MemoryStats, PhaseCosts, Report
from xla_cost.workload import LossFn, Workload, build_workload

__all__ = ["analyze", "COMPILED_PHASES"]

COMPILED_PHASES: tuple[str, ...] = ("forward", "grad", "update", "train_step")
"""The phases that are compiled as programs of their own."""


def _count(workload: Workload, phase: str) -> JaxprCount:
    with workload.tracing():
        jaxpr = jax.make_jaxpr(workload.phase_fn(phase))(*workload.phase_args(phase))
    return count_jaxpr(jaxpr)


def _compile(workload: Workload, phase: str) -> xla.CompiledPhase:
    with workload.tracing():
        return xla.compile_phase(workload.phase_fn(phase), workload.phase_args(phase))


def _phase_costs(
    phase: str, compiled: xla.CompiledPhase, counted: JaxprCount, notes: list[str]
) -> PhaseCosts:
    """XLA's figures; where XLA has none, the jaxpr count if it is complete."""
    costs, memory = compiled.costs, compiled.memory
    total = counted.total
    sources: dict[str, str] = {}
    values: dict[str, int | None] = {}
    for key in ("flops", "transcendentals"):
        value = getattr(costs, key)
        sources[key] = "xla"
        if value is None:
            if counted.unsupported:
                sources[key] = "unknown"
                notes.append(
                    f"{phase}: {key} unknown: {'; '.join(costs.unknown_reasons)}, and the "
                    f"jaxpr has primitives without a rule ({', '.join(counted.unsupported)})"
                )
            else:
                value = getattr(total, key)
                sources[key] = "jaxpr"
                notes.append(
                    f"{phase}: XLA gave no {key} figure; using the jaxpr count ({value:,})"
                )
        values[key] = value
    return PhaseCosts(
        flops=values["flops"],
        transcendentals=values["transcendentals"],
        bytes_accessed=costs.bytes_accessed,
        memory=MemoryStats(memory.argument_bytes, memory.output_bytes, memory.temp_bytes),
        jaxpr_flops=total.flops,
        jaxpr_transcendentals=total.transcendentals,
        sources=sources,
    )


def _difference(grad: PhaseCosts, forward: PhaseCosts) -> PhaseCosts:
    def sub(a: int | None, b: int | None) -> int | None:
        return None if a is None or b is None else a - b

    sources = {
        key: "unknown" if "unknown" in (grad.sources.get(key), forward.sources.get(key))
        else grad.sources.get(key, "xla")
        for key in ("flops", "transcendentals")
    }
    return PhaseCosts(
        sources=sources,
        flops=sub(grad.flops, forward.flops),
        transcendentals=sub(grad.transcendentals, forward.transcendentals),
        bytes_accessed=sub(grad.bytes_accessed, forward.bytes_accessed),
        memory=MemoryStats(None, None, None),
        jaxpr_flops=sub(grad.jaxpr_flops, forward.jaxpr_flops),
        jaxpr_transcendentals=sub(grad.jaxpr_transcendentals, forward.jaxpr_transcendentals),
    )


def _layers(workload: Workload, grad: JaxprCount) -> tuple[LayerCosts, ...]:
    rows = attribute(grad.equations, workload.param_paths, root=workload.root_name)
    return tuple(
        LayerCosts(
            path=row.path,
            parameters=row.parameters,
            forward_flops=row.forward.flops,
            backward_flops=row.backward.flops,
            forward_transcendentals=row.forward.transcendentals,
            backward_transcendentals=row.backward.transcendentals,
        )
        for row in rows
    )


def _dtype_name(workload: Workload) -> str:
    leaves = jax.tree.leaves(workload.outputs) or jax.tree.leaves(workload.params)
    return str(leaves[0].dtype) if leaves else "unknown"


def analyze(
    model: Any,
    inputs: Any,
    *,
    optimizer: str | optax.GradientTransformation,
    loss: LossFn | None = None,
    targets: Any | None = None,
    per_layer: bool = False,
    name: str | None = None,
    config: Mapping[str, Any] | None = None,
    dtype: str | None = None,
) -> Report:
    """Counts the FLOP, bytes and memory of one training step of ``model``.

    Each phase (``forward``, ``grad``, ``update``, ``train_step``) is jitted,
    lowered and compiled for the default backend, and its ``cost_analysis()`` and
    ``memory_analysis()`` are read; nothing is executed and nothing the size of
    the model is allocated (parameters and optimizer state come from
    ``jax.eval_shape``). ``backward`` is ``grad - forward``: the gradient
    computation as it runs inside a real ``grad`` program, where XLA drops the
    input-gradient of the first layer.

    Args:
      model: a ``flax.linen.Module`` or ``flax.nnx.Module``.
      inputs: an array or ``jax.ShapeDtypeStruct`` (or a pytree of them) with the
        batch on the leading axis.
      optimizer: an ``optax.GradientTransformation`` or one of ``sgd``,
        ``momentum``, ``nesterov``, ``adam``, ``adamw``, ``rmsprop``, ``adagrad``,
        ``lion``, ``adafactor``, ``lamb``.
      loss: ``loss(outputs, targets) -> scalar``; default: mean softmax
        cross-entropy with integer labels (classes from the output's last axis).
      targets: abstract targets; default: derived from the output shape.
      per_layer: also attribute forward and backward FLOP to each parametrised
        module (from the grad phase's jaxpr).
      name: the model's name in the report (default: its class name).
      config: the model's keyword arguments, recorded in the report.
      dtype: the computation dtype to record (default: the output's dtype).

    Returns:
      A `Report`.

    Raises:
      InputError: the model, inputs, loss or optimizer cannot be analysed.
      CostAnalysisUnavailableError: the backend gives no cost analysis.

    Example::

      import jax, jax.numpy as jnp, xla_cost
      from models import build_model
      report = xla_cost.analyze(
          build_model("conv_net"),
          jax.ShapeDtypeStruct((32, 224, 224, 3), jnp.float32),
          optimizer="adam", per_layer=True)
      print(report.to_frame())
    """
    workload, optimizer_name = build_workload(
        model, inputs, optimizer=optimizer, loss=loss, targets=targets
    )
    compiled: dict[str, xla.CompiledPhase] = {}
    counted: dict[str, JaxprCount] = {}
    for phase in COMPILED_PHASES:
        compiled[phase] = _compile(workload, phase)
        counted[phase] = _count(workload, phase)
        costs = compiled[phase].costs
        if costs.flops is None and costs.transcendentals is None and costs.bytes_accessed is None:
            raise CostAnalysisUnavailableError(
                "a backend whose compiled programs have a cost analysis",
                f"none from backend {xla.backend_name()!r} for phase {phase!r} "
                f"({'; '.join(costs.unknown_reasons)})",
                "Run on the CPU (JAX_PLATFORMS=cpu) or a GPU.",
            )

    notes: list[str] = []
    phases = {p: _phase_costs(p, compiled[p], counted[p], notes) for p in COMPILED_PHASES}
    phases["backward"] = _difference(phases["grad"], phases["forward"])

    unsupported: dict[str, int] = {}
    for phase in COMPILED_PHASES:
        notes += [f"{phase}: {n}" for n in counted[phase].notes]
        for prim, n in counted[phase].unsupported.items():
            unsupported[prim] = max(unsupported.get(prim, 0), n)

    first = jax.tree.leaves(workload.inputs)[0]
    return Report(
        model=name or workload.root_name,
        config=dict(config or {}),
        batch_size=int(first.shape[0]),
        optimizer=optimizer_name,
        dtype=dtype or _dtype_name(workload),
        backend=xla.backend_name(),
        jax_version=jax.__version__,
        parameters=workload.parameters,
        phases=phases,
        layers=_layers(workload, counted["grad"]) if per_layer else None,
        unsupported=unsupported,
        notes=tuple(dict.fromkeys(notes)),
    )
