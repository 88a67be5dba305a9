"""xla_cost: what one training step of a JAX/Flax model costs, and where it goes.

The public API, one name per line; see each object's docstring. Names load on
first use (PEP 562), so ``import xla_cost`` and the ``xla-cost`` command start
without importing jax, flax and optax until they are needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xla_cost.analysis import COLLECTIVES as COLLECTIVES
    from xla_cost.analysis import COMPILED_PHASES as COMPILED_PHASES
    from xla_cost.analysis import COUNTERS as COUNTERS
    from xla_cost.analysis import analyze as analyze
    from xla_cost.attribution import REMAINDER as REMAINDER
    from xla_cost.attribution import attribute as attribute
    from xla_cost.attribution import attribute_step as attribute_step
    from xla_cost.attribution import classify_pass as classify_pass
    from xla_cost.attribution import module_path as module_path
    from xla_cost.configs import RunConfig as RunConfig
    from xla_cost.errors import CostAnalysisUnavailableError as CostAnalysisUnavailableError
    from xla_cost.errors import InputError as InputError
    from xla_cost.errors import XlaCostError as XlaCostError
    from xla_cost.interpret import JaxprCount as JaxprCount
    from xla_cost.interpret import count_function as count_function
    from xla_cost.interpret import count_jaxpr as count_jaxpr
    from xla_cost.phases import Phase as Phase
    from xla_cost.report import PHASES as PHASES
    from xla_cost.report import LayerCosts as LayerCosts
    from xla_cost.report import MemoryStats as MemoryStats
    from xla_cost.report import PhaseCosts as PhaseCosts
    from xla_cost.report import Report as Report
    from xla_cost.reporting import write_report as write_report
    from xla_cost.rules import FLOPS_PER_FMA as FLOPS_PER_FMA
    from xla_cost.rules import Cost as Cost
    from xla_cost.rules import DuplicateRuleError as DuplicateRuleError
    from xla_cost.report import Collective as Collective
    from xla_cost.rules import register as register
    from xla_cost.scaling import ScalingResult as ScalingResult
    from xla_cost.scaling import TrainingEstimate as TrainingEstimate
    from xla_cost.scaling import estimate as estimate
    from xla_cost.scaling import scaling as predict_scaling
    from xla_cost.fit import FitResult as FitResult
    from xla_cost.fit import max_batch_size as max_batch_size
    from xla_cost.memory import MemoryBreakdown as MemoryBreakdown
    from xla_cost.liveness import LivenessProfile as LivenessProfile
    from xla_cost.liveness import simulate as replay_schedule
    from xla_cost.sharding import MESH_AXES as MESH_AXES
    from xla_cost.sharding import simulate_devices as simulate_devices
    from xla_cost.store import Store as Store
    from xla_cost.store import StoredResult as StoredResult
    from xla_cost.store import default_store_path as default_store_path
    from xla_cost.sweeps import SweepResult as SweepResult
    from xla_cost.sweeps import configurations as configurations
    from xla_cost.sweeps import sweep as sweep
    from xla_cost.workload import OPTIMIZERS as OPTIMIZERS
    from xla_cost.workload import Workload as Workload
    from xla_cost.workload import build_workload as build_workload
    from xla_cost.workload import softmax_cross_entropy as softmax_cross_entropy
    from xla_cost.xla import use_compilation_cache as use_compilation_cache

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Collective": "xla_cost.report",
    "ScalingResult": "xla_cost.scaling",
    "TrainingEstimate": "xla_cost.scaling",
    "estimate": "xla_cost.scaling",
    "max_batch_size": "xla_cost.fit",
    "FitResult": "xla_cost.fit",
    "MemoryBreakdown": "xla_cost.memory",
    "LivenessProfile": "xla_cost.liveness",
    "replay_schedule": "xla_cost.liveness:simulate",
    "predict_scaling": "xla_cost.scaling:scaling",
    "MESH_AXES": "xla_cost.sharding",
    "simulate_devices": "xla_cost.sharding",
    "COLLECTIVES": "xla_cost.analysis",
    "COMPILED_PHASES": "xla_cost.analysis",
    "COUNTERS": "xla_cost.analysis",
    "analyze": "xla_cost.analysis",
    "REMAINDER": "xla_cost.attribution",
    "attribute": "xla_cost.attribution",
    "attribute_step": "xla_cost.attribution",
    "classify_pass": "xla_cost.attribution",
    "module_path": "xla_cost.attribution",
    "RunConfig": "xla_cost.configs",
    "CostAnalysisUnavailableError": "xla_cost.errors",
    "InputError": "xla_cost.errors",
    "XlaCostError": "xla_cost.errors",
    "JaxprCount": "xla_cost.interpret",
    "count_function": "xla_cost.interpret",
    "count_jaxpr": "xla_cost.interpret",
    "Phase": "xla_cost.phases",
    "PHASES": "xla_cost.report",
    "LayerCosts": "xla_cost.report",
    "MemoryStats": "xla_cost.report",
    "PhaseCosts": "xla_cost.report",
    "Report": "xla_cost.report",
    "write_report": "xla_cost.reporting",
    "FLOPS_PER_FMA": "xla_cost.rules",
    "Cost": "xla_cost.rules",
    "DuplicateRuleError": "xla_cost.rules",
    "register": "xla_cost.rules",
    "Store": "xla_cost.store",
    "StoredResult": "xla_cost.store",
    "default_store_path": "xla_cost.store",
    "SweepResult": "xla_cost.sweeps",
    "configurations": "xla_cost.sweeps",
    "sweep": "xla_cost.sweeps",
    "OPTIMIZERS": "xla_cost.workload",
    "Workload": "xla_cost.workload",
    "build_workload": "xla_cost.workload",
    "softmax_cross_entropy": "xla_cost.workload",
    "use_compilation_cache": "xla_cost.xla",
}
"""Each public name and the module that defines it."""

__all__ = [
    "Collective",
    "ScalingResult",
    "TrainingEstimate",
    "estimate",
    "max_batch_size",
    "FitResult",
    "MemoryBreakdown",
    "LivenessProfile",
    "replay_schedule",
    "predict_scaling",
    "MESH_AXES",
    "simulate_devices",
    "COLLECTIVES",
    "COMPILED_PHASES",
    "COUNTERS",
    "CostAnalysisUnavailableError",
    "Cost",
    "DuplicateRuleError",
    "FLOPS_PER_FMA",
    "InputError",
    "JaxprCount",
    "LayerCosts",
    "MemoryStats",
    "OPTIMIZERS",
    "PHASES",
    "Phase",
    "PhaseCosts",
    "REMAINDER",
    "Report",
    "RunConfig",
    "Store",
    "StoredResult",
    "SweepResult",
    "Workload",
    "XlaCostError",
    "analyze",
    "attribute",
    "attribute_step",
    "build_workload",
    "classify_pass",
    "configurations",
    "count_function",
    "count_jaxpr",
    "default_store_path",
    "module_path",
    "register",
    "softmax_cross_entropy",
    "sweep",
    "use_compilation_cache",
    "write_report",
]


def __getattr__(name: str) -> Any:
    """Loads a public name, or a submodule (``xla_cost.rules``), on first use."""
    module = _EXPORTS.get(name)
    if module is not None:
        module, _, attribute = module.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
