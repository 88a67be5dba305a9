"""xla_cost: what one training step of a JAX/Flax model costs, and where it goes.

The public API: every name below, one per line, declared once in `_EXPORTS`
(``__all__`` is derived from it); see each object's docstring. Names load on
first use (PEP 562), so ``import xla_cost`` and the ``xla-cost`` command start
without importing jax, flax and optax until they are needed.

The package is layered; a module imports only from the layers below its own:
``errors``, ``choices``, ``options``, ``version`` (the foundation); ``present``
(formatting, tables, figures); ``step`` (what is analysed); ``count`` (jaxprs);
``compiled`` (XLA's programs and the caches); ``parallel`` (devices, meshes,
communication); ``analysis`` (`analyze` and its results); the zoo
(``xla_cost.zoo``); ``runs`` (configurations by name, sweeps, fit, scaling);
``study`` (the report pages); ``cli``. Each subpackage's docstring says what
lives there.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from xla_cost import plugins as _plugins
from xla_cost.version import __version__

_plugins.prepare()  # jax's accelerator plugins, where installed, start quietly without their devices

if TYPE_CHECKING:  # the same names, for type checkers (a test keeps the two lists equal)
    from xla_cost.step.workload import build_workload as build_workload
    from xla_cost.step.workload import ModelOptions as ModelOptions
    from xla_cost.step.optimizers import OPTIMIZERS as OPTIMIZERS
    from xla_cost.step.phases import Phase as Phase
    from xla_cost.step.optimizers import softmax_cross_entropy as softmax_cross_entropy
    from xla_cost.step.optimizers import one_hot_cross_entropy as one_hot_cross_entropy
    from xla_cost.step.optimizers import LOSSES as LOSSES
    from xla_cost.step.workload import Workload as Workload
    from xla_cost.step.routing import Routing as Routing
    from xla_cost.step.routing import ROUTING_ATTRIBUTE as ROUTING_ATTRIBUTE
    from xla_cost.count.attribution import attribute as attribute
    from xla_cost.count.attribution import attribute_step as attribute_step
    from xla_cost.count.attribution import classify_pass as classify_pass
    from xla_cost.count.registry import Cost as Cost
    from xla_cost.count.interpret import count_function as count_function
    from xla_cost.count.interpret import count_jaxpr as count_jaxpr
    from xla_cost.count.registry import DuplicateRuleError as DuplicateRuleError
    from xla_cost.count.registry import FLOPS_PER_FMA as FLOPS_PER_FMA
    from xla_cost.count.interpret import JaxprCount as JaxprCount
    from xla_cost.count.layers import LayerCosts as LayerCosts
    from xla_cost.count.attribution import module_path as module_path
    from xla_cost.count.attribution import module_tree as module_tree
    from xla_cost.count.registry import register as register
    from xla_cost.count.attribution import REMAINDER as REMAINDER
    from xla_cost.compiled.store import default_store_path as default_store_path
    from xla_cost.compiled.liveness import LivenessProfile as LivenessProfile
    from xla_cost.compiled.liveness import simulate as replay_schedule  # noqa: F401
    from xla_cost.compiled.store import Store as Store
    from xla_cost.compiled.store import StoredResult as StoredResult
    from xla_cost.runs.stores import StoreContents as StoreContents
    from xla_cost.runs.stores import store_contents as store_contents
    from xla_cost.runs.stores import store_delete as store_delete
    from xla_cost.runs.stores import store_vacuum as store_vacuum
    from xla_cost.compiled.xla import use_compilation_cache as use_compilation_cache
    from xla_cost.timemodel.devices import Device as Device
    from xla_cost.timemodel.devices import DEVICES as DEVICES
    from xla_cost.timemodel.devices import Dispatch as Dispatch
    from xla_cost.timemodel.calibration import Calibration as Calibration
    from xla_cost.timemodel.calibration import PredictionInterval as PredictionInterval
    from xla_cost.timemodel.hardware import Hardware as Hardware
    from xla_cost.timemodel.schedule import Layout as Layout
    from xla_cost.parallel.sharding import MESH_AXES as MESH_AXES
    from xla_cost.parallel.sharding import ShardingOptions as ShardingOptions
    from xla_cost.parallel.simulated import simulate_devices as simulate_devices
    from xla_cost.analysis.options import AnalysisOptions as AnalysisOptions
    from xla_cost.analysis.pipeline import analyze as analyze
    from xla_cost.analysis.user_step import analyze_step as analyze_step
    from xla_cost.analysis.report import Collective as Collective
    from xla_cost.analysis.compare import compare as compare
    from xla_cost.count.registry import COLLECTIVES as COLLECTIVES
    from xla_cost.analysis.pipeline import COMPILED_PHASES as COMPILED_PHASES
    from xla_cost.analysis.pipeline import COUNTERS as COUNTERS
    from xla_cost.analysis.diff import diff as diff
    from xla_cost.analysis.memory import MemoryBreakdown as MemoryBreakdown
    from xla_cost.analysis.report import MemoryStats as MemoryStats
    from xla_cost.analysis.report import PhaseCosts as PhaseCosts
    from xla_cost.analysis.report import PHASES as PHASES
    from xla_cost.analysis.report import Report as Report
    from xla_cost.analysis.diff import ReportDiff as ReportDiff
    from xla_cost.analysis.compare import TargetComparison as TargetComparison
    from xla_cost.analysis.memory import TargetMemory as TargetMemory
    from xla_cost.runs.sweeps import configurations as configurations
    from xla_cost.runs.estimates import estimate as estimate
    from xla_cost.runs.fit import FitResult as FitResult
    from xla_cost.runs.fit import max_batch_size as max_batch_size
    from xla_cost.runs.configs import RunConfig as RunConfig
    from xla_cost.runs.scaling import predict as predict
    from xla_cost.runs.scaling import scaling as scaling
    from xla_cost.runs.scaling import ScalingResult as ScalingResult
    from xla_cost.runs.scaling import StepEstimate as StepEstimate
    from xla_cost.runs.sweeps import sweep as sweep
    from xla_cost.runs.sweeps import SweepResult as SweepResult
    from xla_cost.runs.estimates import TrainingEstimate as TrainingEstimate
    from xla_cost.study.validation import validate as validate
    from xla_cost.study.write import write_report as write_report
    from xla_cost.errors import CostAnalysisUnavailableError as CostAnalysisUnavailableError
    from xla_cost.errors import InputError as InputError
    from xla_cost.errors import InternalError as InternalError
    from xla_cost.errors import XlaCostError as XlaCostError

_EXPORTS: dict[str, str] = {
    # the step: phases, workloads, optimizers
    "build_workload": "xla_cost.step.workload",
    "ModelOptions": "xla_cost.step.workload",
    "OPTIMIZERS": "xla_cost.step.optimizers",
    "Phase": "xla_cost.step.phases",
    "softmax_cross_entropy": "xla_cost.step.optimizers",
    "one_hot_cross_entropy": "xla_cost.step.optimizers",
    "LOSSES": "xla_cost.step.optimizers",
    "Workload": "xla_cost.step.workload",
    "Routing": "xla_cost.step.routing",
    "ROUTING_ATTRIBUTE": "xla_cost.step.routing",
    # counting jaxprs: rules, the interpreter, per-layer attribution
    "attribute": "xla_cost.count.attribution",
    "attribute_step": "xla_cost.count.attribution",
    "classify_pass": "xla_cost.count.attribution",
    "Cost": "xla_cost.count.registry",
    "count_function": "xla_cost.count.interpret",
    "count_jaxpr": "xla_cost.count.interpret",
    "DuplicateRuleError": "xla_cost.count.registry",
    "FLOPS_PER_FMA": "xla_cost.count.registry",
    "JaxprCount": "xla_cost.count.interpret",
    "LayerCosts": "xla_cost.count.layers",
    "module_path": "xla_cost.count.attribution",
    "module_tree": "xla_cost.count.attribution",
    "register": "xla_cost.count.registry",
    "REMAINDER": "xla_cost.count.attribution",
    # compiled programs: XLA's analyses, caches, the HLO's schedule
    "default_store_path": "xla_cost.compiled.store",
    "LivenessProfile": "xla_cost.compiled.liveness",
    "replay_schedule": "xla_cost.compiled.liveness:simulate",
    "Store": "xla_cost.compiled.store",
    "StoredResult": "xla_cost.compiled.store",
    "StoreContents": "xla_cost.runs.stores",
    "store_contents": "xla_cost.runs.stores",
    "store_delete": "xla_cost.runs.stores",
    "store_vacuum": "xla_cost.runs.stores",
    "use_compilation_cache": "xla_cost.compiled.xla",
    # devices and meshes
    "Device": "xla_cost.timemodel.devices",
    "DEVICES": "xla_cost.timemodel.devices",
    "Dispatch": "xla_cost.timemodel.devices",
    "Calibration": "xla_cost.timemodel.calibration",
    "PredictionInterval": "xla_cost.timemodel.calibration",
    "Hardware": "xla_cost.timemodel.hardware",
    "Layout": "xla_cost.timemodel.schedule",
    "MESH_AXES": "xla_cost.parallel.sharding",
    "ShardingOptions": "xla_cost.parallel.sharding",
    "simulate_devices": "xla_cost.parallel.simulated",
    # analyze and its results
    "AnalysisOptions": "xla_cost.analysis.options",
    "analyze": "xla_cost.analysis.pipeline",
    "analyze_step": "xla_cost.analysis.user_step",
    "Collective": "xla_cost.analysis.report",
    "compare": "xla_cost.analysis.compare",
    "COLLECTIVES": "xla_cost.count.registry",
    "COMPILED_PHASES": "xla_cost.analysis.pipeline",
    "COUNTERS": "xla_cost.analysis.pipeline",
    "diff": "xla_cost.analysis.diff",
    "MemoryBreakdown": "xla_cost.analysis.memory",
    "MemoryStats": "xla_cost.analysis.report",
    "PhaseCosts": "xla_cost.analysis.report",
    "PHASES": "xla_cost.analysis.report",
    "Report": "xla_cost.analysis.report",
    "ReportDiff": "xla_cost.analysis.diff",
    "TargetComparison": "xla_cost.analysis.compare",
    "TargetMemory": "xla_cost.analysis.memory",
    # runs by name: configurations, sweeps, fit, scaling, estimates
    "configurations": "xla_cost.runs.sweeps",
    "estimate": "xla_cost.runs.estimates",
    "FitResult": "xla_cost.runs.fit",
    "max_batch_size": "xla_cost.runs.fit",
    "RunConfig": "xla_cost.runs.configs",
    "predict": "xla_cost.runs.scaling",
    "scaling": "xla_cost.runs.scaling",
    "ScalingResult": "xla_cost.runs.scaling",
    "StepEstimate": "xla_cost.runs.scaling",
    "sweep": "xla_cost.runs.sweeps",
    "SweepResult": "xla_cost.runs.sweeps",
    "TrainingEstimate": "xla_cost.runs.estimates",
    # the generated report pages, and the time model against published runs
    "validate": "xla_cost.study.validation",
    "write_report": "xla_cost.study.write",
    # errors
    "CostAnalysisUnavailableError": "xla_cost.errors",
    "InputError": "xla_cost.errors",
    "InternalError": "xla_cost.errors",
    "XlaCostError": "xla_cost.errors",
}
"""Each public name and the module that defines it (``module:attribute`` where the names differ)."""

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    """Loads a public name, or a subpackage (``xla_cost.count``), on first use."""
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
    """The public names (`__all__`) and the subpackages already loaded: not the module's own imports."""
    loaded = {name for name, value in globals().items() if isinstance(value, type(importlib)) and
              getattr(value, "__name__", "").startswith(f"{__name__}.")}
    return sorted({*__all__, *loaded})
