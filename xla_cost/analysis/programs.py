"""The programs of a step: each phase traced once, counted from its jaxpr and,
when asked, compiled from the same trace (`xla_cost.compiled.xla`).

Compiles run in worker threads while the main thread traces and counts the
next program; on a mesh each program is jitted with every argument's and
result's sharding, so that XLA's SPMD partitioner makes the per-device program.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
import gc
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from xla_cost.analysis.memory import MemoryBreakdown, memory_breakdown
from xla_cost.compiled import lowering, targets, xla
from xla_cost.count.interpret import JaxprCount, count_jaxpr
from xla_cost.count.param_reads import parameter_reads
from xla_cost.errors import CostAnalysisUnavailableError, InputError
from xla_cost.parallel import sharding as _sharding
from xla_cost.present import progress
from xla_cost.step import phases
from xla_cost.step.checks import mesh_error
from xla_cost.step.workload import Workload, collector_paused

__all__ = ["COMPILE_THREADS", "Program", "jit_phase", "arguments", "placement", "constraints", "run_programs", "step_memory"]


@dataclasses.dataclass(frozen=True)
class Program:
    """One phase's program: its jaxpr count and, when compiled, XLA's analyses; ``shared``: the devices
    the jaxpr's count is shared over, XLA's figures being one device's (None: the mesh's, its plan's
    devices; 1 for a mapped body, ``pmap`` or a ``shard_map`` step, whose jaxpr is one device's).
    ``shown_over``: the devices an uncompiled program's figures are divided over once counted (a part
    of ``analyze_step``'s step on a mesh), the basis of its notes' figures (None: the whole step's)."""

    counted: JaxprCount
    compiled: xla.CompiledPhase | None
    shared: int | None = None
    shown_over: int | None = None


COMPILE_THREADS = 2
"""Programs compiled at once. XLA's compile releases the GIL and runs on XLA's
own threads (the calling thread used 0.02 s of CPU in a 2.8 s compile of
ResNet-50's grad, which kept about 1.5 of 2 cores busy): while it compiles,
the main thread traces, lowers and counts the next programs, and a second
compile fills the cores the first leaves idle. On 2 cores a third thread gained
nothing measurable (ResNet-50's three programs: 4.4-5.9 s one after another,
4.0-4.5 s two at a time, 3.7-4.4 s three at a time, a lightly loaded machine)."""


def jit_phase(workload: Workload, phase: phases.Phase, plan: _sharding.ShardingPlan | None) -> Any:
    """``jax.jit`` of the phase's program; on a mesh with every argument's and
    result's sharding, so that XLA's SPMD partitioner makes the per-device program."""
    fn = workload.phase_fn(phase.name, retrace=plan is not None)  # the plan's constraints need the model's code

    @functools.wraps(fn)  # the same name, so the same program
    def program(*args: Any) -> Any:  # a function of its own: jax's trace cache is keyed by function, and
        return fn(*args)             # this one's entry (the jaxpr) goes when the caller lets the trace go

    if plan is None:
        return jax.jit(program, **placement())
    return jax.jit(
        program,
        in_shardings=tuple(plan.shardings(n) for n in phase.arguments),
        out_shardings=tuple(plan.shardings(n) for n in phase.results),
    )


def arguments(workload: Workload, phase: phases.Phase, plan: _sharding.ShardingPlan | None) -> tuple[Any, ...]:
    """The phase's abstract arguments; on a mesh of Explicit axes typed with their shardings
    (`ShardingPlan.typed`)."""
    args = workload.phase_args(phase.name)
    return tuple(args) if plan is None else plan.typed(phase.arguments, args)


@contextlib.contextmanager
def _mesh_refused(name: str) -> Any:
    """A phase whose trace fails on the mesh's axis types is refused in one line that says so
    (`xla_cost.step.checks.mesh_error`), not with jax's exception."""
    try:
        yield
    except Exception as exc:
        refused = None if isinstance(exc, InputError) else mesh_error(exc, f"the {name} phase")
        if refused is None:
            raise
        raise refused from exc


def placement() -> dict[str, Any]:
    """``jax.jit`` options that place an unsharded program on the compile
    target's first device (`xla_cost.compiled.targets`); none without a target."""
    target = targets.active()
    if target is None:
        return {}
    where = target.placement()
    return {"in_shardings": where, "out_shardings": where}


def constraints(plan: _sharding.ShardingPlan | None, workload: Workload) -> Any:
    if plan is None:
        return contextlib.nullcontext()
    return plan.constraints(int(jax.tree.leaves(workload.inputs)[0].shape[0]))


def run_programs(
    workload: Workload, declared: Sequence[phases.Phase], *, compiled: bool, for_timing: bool,
    plan: _sharding.ShardingPlan | None = None,
    meanwhile: Callable[[Mapping[str, JaxprCount]], None] | None = None, unfused: Sequence[str] = (),
) -> dict[str, Program]:
    """Traces each program once; counts its jaxpr and, if asked, compiles the same trace.
    The programs named in ``unfused`` are compiled with XLA's fusion passes off
    (`xla_cost.compiled.xla.EAGER_OPTIONS`), each operation a kernel of its own, as an
    eager framework launches them.

    Every program is traced, lowered and handed to the compile threads before
    any is counted, the one already traced (the workload's forward) first: the
    compiles, the longest part, start as early as they can, and the counting
    (Python) runs while they compile. Python's garbage collector is paused
    meanwhile (`collector_paused`). A program that will also be timed is
    compiled as it would run; one that is only analysed at the lowest backend
    optimization level (the same figures, faster).

    Once a single compile is left, the main thread waits for it while it
    leaves part of the cores idle: ResNet-50's gradient (batch 32, 2 CPU
    cores) compiled alone for 1.7 s with about 1.7 cores busy. What the main
    thread did after that compile, on the path that ends the analysis, it does
    then instead: ``meanwhile`` is called with the counts (work that needs them
    and not XLA's figures: the per-layer rows, 0.03 s), and the traces are let
    go (their jaxprs, which jax's trace cache kept as long as the workload's
    functions lived, took 0.06 s to free when the analysis returned; each
    program is traced from a function of its own, `jit_phase`). Done while
    every core compiles, the same work slows the compiles as much.
    """
    options = None if for_timing else xla.COMPILER_OPTIONS
    ready = dict(workload.traced) if plan is None and targets.active() is None else {}
    order = sorted(declared, key=lambda phase: phase.name not in ready)  # else in declared order
    steps = len(order) * (2 if compiled else 1)
    traces: dict[str, Any] = {}
    pending: dict[str, concurrent.futures.Future[xla.CompiledPhase]] = {}
    pool = concurrent.futures.ThreadPoolExecutor(COMPILE_THREADS, "xla-cost-compile")
    with collector_paused():
        try:
            for index, phase in enumerate(order):
                progress.stage(f"tracing {phase.name}", index, steps)
                traced = ready.get(phase.name)
                if traced is None:
                    with workload.tracing(), constraints(plan, workload), _mesh_refused(phase.name):
                        traced = jit_phase(workload, phase, plan).trace(*arguments(workload, phase, plan))
                traces[phase.name] = traced
                if compiled:
                    pending[phase.name] = pool.submit(  # the lowered program handed over, let go aside once compiled
                        contextvars.copy_context().run, xla.compile_phase, [_lowered(traced, plan)],
                        compiler_options=xla.EAGER_OPTIONS if phase.name in unfused else options,
                        executable=for_timing, **({"collectives": True} if plan is not None else {}),
                    )
            counted: dict[str, JaxprCount] = {}
            for phase in order:  # while the compiles run
                # The optimizer's arithmetic has no module on its name stack: follow the data.
                modules = workload.input_owners(phase.name)
                owners = modules if phase.follow_data else None
                counted[phase.name] = count_jaxpr(traces[phase.name].jaxpr, owners=owners,
                                                  weights=[module is not None for module in modules])
                if phase.name == "forward":  # whose parameters its products read: `borrowed_note`
                    counted[phase.name] = dataclasses.replace(
                        counted[phase.name], parameter_reads=parameter_reads(traces[phase.name].jaxpr, modules))
            names = list(pending)
            if names:
                progress.stage(f"compiling {names[0]}", len(order), steps)
            running = set(pending.values())
            while len(running) > 1:  # until the cores are no longer all busy compiling
                running = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED).not_done
            if meanwhile is not None:
                meanwhile(counted)
            traced = None
            traces.clear()  # their jaxprs freed now, not when the caller returns
            if running:
                gc.collect(0)
            results = {}
            for index, (name, future) in enumerate(pending.items()):
                if index:  # the first was shown before the wait above
                    progress.stage(f"compiling {name}", len(order) + index, steps)
                results[name] = future.result()
        except BaseException:
            # Interrupted (Ctrl-C) or failed: a compile under way runs in C++ to its end (ResNet-50's
            # gradient for an H100: 16-24 s), which is abandoned, not waited for; one not started is cancelled.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    pool.shutdown()
    for name, result in results.items():
        costs = result.costs
        if costs.flops is None and costs.transcendentals is None and costs.bytes_accessed is None:
            raise CostAnalysisUnavailableError(
                "a backend whose compiled programs have a cost analysis",
                f"none from backend {xla.backend_name()!r} for phase {name!r} "
                f"({'; '.join(costs.unknown_reasons)})",
                "Run on the CPU (JAX_PLATFORMS=cpu) or a GPU, or count the jaxpr "
                "alone (--counter jaxpr, analyze(..., counter='jaxpr')).",
            )
    return {phase.name: Program(counted[phase.name], results.get(phase.name)) for phase in declared}


def _lowered(traced: Any, plan: _sharding.ShardingPlan | None) -> Any:
    """``traced.lower()``; a model whose variables were made under a mesh (``jax.set_mesh``, which
    Flax 0.12 asks of ``nnx.with_partitioning``) and analysed on no mesh is refused in one line."""
    try:
        with lowering.kernels_it_lowers():
            return traced.lower()
    except ValueError as exc:
        if plan is not None or "AbstractMesh" not in str(exc):
            raise
        raise InputError(
            "a model whose variables carry no mesh for an analysis on one device",
            "variables made under a mesh (jax.set_mesh: their shardings name its axes), analysed without mesh=",
            "Pass mesh= with the same axes (mesh={'data': 2, 'model': 2}, --mesh data=2,model=2), or make the "
            "model outside jax.set_mesh (flax.config.update('flax_always_shard_variable', False) builds "
            "nnx.with_partitioning's variables without one).",
        ) from exc


def step_memory(workload: Workload, plan: _sharding.ShardingPlan | None, compiled: bool) -> MemoryBreakdown:
    """The step's memory breakdown; XLA's figures from the train step compiled as
    one program with the parameters and optimizer state donated."""
    step = None
    if compiled:
        declared = phases.phase("train_step")
        fn = workload.phase_fn("train_step", retrace=plan is not None)

        def train_step(*args: Any) -> Any:  # its own function: the trace cache is keyed by it
            return fn(*args)

        options: dict[str, Any] = {
            "donate_argnums": tuple(i for i, n in enumerate(declared.arguments) if n in ("params", "opt_state")),
        }
        if plan is not None:
            options["in_shardings"] = tuple(plan.shardings(n) for n in declared.arguments)
            options["out_shardings"] = tuple(plan.shardings(n) for n in declared.results)
        else:
            options.update(placement())
        with workload.tracing(), constraints(plan, workload), lowering.kernels_it_lowers():
            lowered = jax.jit(train_step, **options).lower(*arguments(workload, declared, plan))
        step = xla.compile_phase(lowered, compiler_options=xla.COMPILER_OPTIONS, executable=False, liveness=True)
        target = targets.active()
        if target is not None and target.memory_options and (step.memory.rematerialized
                                                              or step.memory.remat_short_of is not None):
            # where the compiler recomputes to fit, the program as a GPU's autotuner makes it decides
            step = xla.compile_phase(lowered, compiler_options={**xla.COMPILER_OPTIONS, **target.memory_options},
                                     executable=False, liveness=True)
    return memory_breakdown(
        workload, plan, root=workload.root_name, modules=tuple(workload.param_paths), compiled=step,
        constraints=constraints(plan, workload),
    )
