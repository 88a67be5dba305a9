"""`analyze`: one training step's costs, from compiled XLA and from the jaxpr.

`analyze` gathers its keyword options into the option objects (`xla_cost.ModelOptions`,
`AnalysisOptions`, `xla_cost.parallel.sharding.ShardingOptions`), checks them,
and runs the pipeline, each stage a function of its own:

1. `build_step`: the model, inputs, loss and optimizer made a `Workload`;
2. `plan_mesh`: on a mesh, every tree's sharding (`xla_cost.parallel.sharding`);
3. `xla_cost.analysis.programs.run_programs`: each phase traced, counted and compiled;
4. `xla_cost.analysis.costs.all_phases`: each phase's best figures, derived ones by formula;
5. `time_step`, `xla_cost.analysis.programs.step_memory`, `per_layer`: what was asked besides;
6. `assemble`: the `Report`.

With ``cache=`` the pipeline runs inside the results store's wrapper
(`xla_cost.analysis.cache.cached`), which answers from the store when it can.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import optax
from jax.sharding import Mesh

from xla_cost.analysis import report_cache
from xla_cost.analysis.cache import cached
from xla_cost.analysis.costs import all_phases, emulates_narrow_floats, precision_note
from xla_cost.analysis.memory import MemoryBreakdown, TargetMemory, target_memory, too_big_for
from xla_cost.analysis.model_flops import causal_halves, causal_note, causal_windows
from xla_cost.analysis.options import AnalysisOptions, check_target
from xla_cost.analysis.programs import Program, run_programs, step_memory
from xla_cost.analysis.report import LayerCosts, PhaseCosts, Report
from xla_cost.analysis.step_arguments import compute_dtype as program_compute_dtype
from xla_cost.analysis.trained_notes import trained_note, ungraded_note
from xla_cost.choices import COUNTERS, DEFAULT_OPTIMIZER
from xla_cost.compiled import targets, xla
from xla_cost.compiled.store import Store
from xla_cost.count.attribution import (REMAINDER, attribute_step, borrowed_note, model_roots, root_products_note,
                                        unmatched_note)
from xla_cost.count.interpret import EqnCount, JaxprCount
from xla_cost.count.registry import COLLECTIVES
from xla_cost.count.routers import undeclared_routing_notes
from xla_cost.errors import InputError
from xla_cost.options import given_fields
from xla_cost.parallel import sharding as _sharding
from xla_cost.parallel.sharding import PartitionRules, ShardingOptions, ShardingPlan
from xla_cost.step import phases
from xla_cost.step.checks import OutputSelector, needs_mesh
from xla_cost.step.optimizers import LossFn
from xla_cost.step.trees import PyTree, named_leaves, path_names
from xla_cost.step.workload import ModelOptions, Workload, build_workload

if TYPE_CHECKING:  # the timing modules load where a step is timed (`time_step`), not with every analysis
    from xla_cost.analysis.timing import Timing

__all__ = ["analyze", "Request", "Stages", "run", "assemble", "COMPILED_PHASES", "COUNTERS"]

COMPILED_PHASES: tuple[str, ...] = phases.PROGRAMS
"""The phases that have a program of their own (`xla_cost.step.phases`):
``train_step`` is compiled only with ``exact_train_step=True``."""


@dataclasses.dataclass(frozen=True)
class Request:
    """One analysis asked for: what `analyze` was given, sorted into its option objects.

    Attributes:
      model, inputs, optimizer: as `analyze` takes them.
      model_options: how the model is called (`xla_cost.ModelOptions`).
      options: how the step is counted (`AnalysisOptions`).
      sharding: the mesh (`xla_cost.parallel.sharding.ShardingOptions`).
    """

    model: Any
    inputs: Any
    optimizer: str | optax.GradientTransformation
    model_options: ModelOptions = ModelOptions()
    options: AnalysisOptions = AnalysisOptions()
    sharding: ShardingOptions = ShardingOptions()
    explicit: tuple[str, ...] = ()
    caller_mesh: bool = False

    def arguments(self) -> dict[str, Any]:
        """Every argument that determines the result (the results store's key):
        options at their defaults left out where earlier versions had none."""
        o, m = self.options, self.model_options
        arguments: dict[str, Any] = dict(
            model=self.model, inputs=self.inputs, optimizer=self.optimizer, loss=m.loss, targets=m.targets,
            params=m.params, per_layer=o.per_layer, depth=o.depth, counter=o.counter, name=o.name,
            config=o.config, dtype=o.dtype, call_kwargs=m.call_kwargs, method=m.method,
            axis_names=m.axis_names, output=m.output, exact_train_step=o.exact_train_step,
        )
        if o.memory:
            arguments["memory"] = True
        if m.remat not in (None, "none"):
            arguments["remat"] = m.remat
        if o.attention_flops != "full":
            arguments["attention_flops"] = o.attention_flops
        if o.target is not None:
            arguments["target"] = o.target
        if o.compare_cpu:
            arguments["compare_cpu"] = True
        if o.unfused:  # the phases, and the version of the eager kernel lists they are read as
            arguments["unfused"] = {"phases": list(o.unfused), "format": xla.EAGER_FORMAT}
        if self.sharding.sharded:
            arguments.update(mesh=self.sharding.sizes(), param_sharding=self.sharding.param_sharding,
                             logical_axis_rules=self.sharding.logical_axis_rules)
        if self.explicit:
            arguments["explicit_axes"] = list(self.explicit)
        return arguments


def analyze(
    model: Any,
    inputs: Any,
    *,
    optimizer: str | optax.GradientTransformation = DEFAULT_OPTIMIZER,
    # how the model is called: `xla_cost.ModelOptions`
    loss: LossFn | None = None,
    targets: PyTree | None = None,
    params: PyTree | None = None,
    call_kwargs: Mapping[str, Any] | None = None,
    method: str | Callable[..., Any] | None = None,
    axis_names: Sequence[str] | str | None = None,
    output: OutputSelector | None = None,
    remat: str | None = None,
    # how the step is counted: `AnalysisOptions`
    per_layer: bool = False,
    depth: int | None = None,
    counter: str = "xla",
    timed: bool = False,
    exact_train_step: bool = False,
    memory: bool = False,
    attention_flops: str = "full",
    peak_tflops: float | None = None,
    peak_bandwidth: float | None = None,
    name: str | None = None,
    config: Mapping[str, Any] | None = None,
    dtype: str | None = None,
    compilation_cache: bool = True,
    cache: bool | str | os.PathLike[str] | Store = False,
    target: str | None = None,
    compare_cpu: bool = False,
    unfused: tuple[str, ...] = (),
    # the mesh: `xla_cost.parallel.sharding.ShardingOptions`
    mesh: Mapping[str, int] | str | Mesh | None = None,
    param_sharding: PartitionRules | None = None,
    logical_axis_rules: Sequence[tuple[str, Any]] | None = None,
) -> Report:
    """Counts the FLOP, bytes and memory of one training step of ``model``.

    Each phase with a program (``forward``, ``grad``, ``update``; see
    `xla_cost.step.phases`) is traced once to a jaxpr and counted with
    `xla_cost.count.rules`; with ``counter="xla"`` (the default) the same trace is
    also lowered and compiled for the default backend, and its
    ``cost_analysis()`` and ``memory_analysis()`` are read. Nothing is executed
    and nothing the size of the model is allocated (parameters and optimizer
    state come from ``jax.eval_shape``). Compiled programs are kept in JAX's
    persistent compilation cache (`xla_cost.compiled.xla.use_compilation_cache`), so a
    second analysis of the same shapes skips compiling.

    The headline figure of a phase (``flops``) is XLA's, except where the
    program has loops (``lax.scan``, ``nn.scan``, ``fori_loop``): XLA counts a
    loop body once, so the iterations it misses, counted from the jaxpr, are
    added and the phase is marked ``loop_corrected`` (XLA's raw figure stays in
    ``xla_flops``). ``backward`` is ``grad - forward``: the gradient computation
    as it runs inside a real ``grad`` program, where XLA drops the
    input-gradient of the first layer. ``train_step`` is ``grad + update``
    unless ``exact_train_step``: compiled as one program, XLA's FLOP for it
    differ from the sum by under 1e-6 and its bytes by about 0.2%.

    The keyword options come in three groups, each the fields of an option
    object that checks them (documented there and below):
    `xla_cost.ModelOptions` (how the model is called: ``loss``,
    ``targets``, ``params``, ``call_kwargs``, ``method``, ``axis_names``,
    ``output``, ``remat``), `AnalysisOptions` (how it is counted:
    ``per_layer``, ``depth``, ``counter``, ``timed``, ``exact_train_step``,
    ``memory``, ``attention_flops``, ``peak_tflops``, ``peak_bandwidth``,
    ``name``, ``config``, ``dtype``, ``compilation_cache``, ``cache``,
    ``target``, ``compare_cpu``) and
    `xla_cost.parallel.sharding.ShardingOptions` (``mesh``,
    ``param_sharding``, ``logical_axis_rules``).

    Args:
      model: a ``flax.linen.Module`` or ``flax.nnx.Module``, or a plain function
        ``apply(params, inputs) -> outputs`` together with ``params``.
      inputs: an array or ``jax.ShapeDtypeStruct`` (or a pytree of them) with the
        batch on the leading axis.
      optimizer: an ``optax.GradientTransformation`` or one of ``sgd``,
        ``momentum``, ``nesterov``, ``adam``, ``adamw``, ``rmsprop``, ``adagrad``,
        ``lion``, ``adafactor``, ``lamb`` (default `xla_cost.choices.DEFAULT_OPTIMIZER`: adam).
      loss: ``loss(outputs, targets) -> scalar``; default: mean softmax
        cross-entropy with integer labels (classes from the output's last axis).
      targets: abstract targets; default: derived from the output shape.
      params: only with an apply function: its parameters, a pytree of arrays or
        ``jax.ShapeDtypeStruct`` (shapes and dtypes are all that is used). For
        per-layer rows, run each layer under ``jax.named_scope(<its params key>)``.
      per_layer: also attribute forward, backward and update FLOP to each module
        (from the phases' jaxprs; each column adds up to its phase's jaxpr count).
      depth: with ``per_layer``: None for one row per module that holds
        parameters, N to merge rows to the first N components of their path.
      counter: ``xla`` (compile; XLA's figures, corrected for loops) or
        ``jaxpr`` (count the jaxprs alone: much faster on big models; no XLA
        bytes and no memory figures, only the jaxpr's unfused bytes estimate).
        `COUNTERS` lists them.
      timed: also run every phase on real random arrays on the default device
        and time it (`xla_cost.analysis.timing`): seconds, FLOP/s, MFU, a roofline
        prediction, the forward/backward/update split. Never changes a count;
        a step too big for the device is reported as skipped.
      exact_train_step: compile the train step as a program of its own
        instead of adding grad and update: exact train-step memory (buffers
        of two programs do not add up to their fusion's) for about twice the
        compile time.
      compilation_cache: keep compiled programs in JAX's persistent
        compilation cache (default; off with ``XLA_COST_NO_CACHE=1`` too).
      target: compile every program for this device instead of the default
        backend: a GPU of the device registry (``h100``, ``a100-80gb``,
        ``v100-32gb``, ``h200``) or a TPU slice (``tpu-v5e:2x2``,
        ``tpu-v4:2x2x1``; `xla_cost.timemodel.devices.target`), by its own
        compiler, with no such device here (jax's deviceless topologies). FLOP,
        bytes, kernels, memory and collectives are then the target's program's
        (`xla_cost.compiled.targets`); a mesh is laid over the target's devices
        (GPU hosts of 8, a TPU slice). Needs ``pip install 'xla-cost[gpu]'``
        (or ``[tpu]``); without it a one-line `InputError`.
      compare_cpu: with ``target``, also analyse the same step for the
        default backend (the CPU proxy: its own compile, as without
        ``target``) and keep that report in ``Report.cpu``;
        ``report.comparison()`` (`xla_cost.compare`) sets the two side by
        side per phase (FLOP, bytes, kernels, library calls, temporaries, the
        step's peak with ``memory``) and names why they differ; the text and
        markdown renderings show it after the phase table. Only with a target.
      unfused: the phases (``forward``, ``grad``, ``update``,
        ``train_step``) whose programs are compiled with XLA's fusion passes
        off (`xla_cost.compiled.xla.EAGER_OPTIONS`), every operation a kernel
        of its own: the program an eager framework such as PyTorch without a
        compiler runs (its kernel list is what the time model prices); only
        with a target. The report's notes say so. Default: none.
      cache: look the whole analysis up in the results store
        (`xla_cost.compiled.store`; the one `xla_cost.sweep` writes) and store it
        there when it is not: ``True`` for `default_store_path`, a path, or a
        `Store`. The key is a description of every argument (a Linen module's
        fields, an NNX module's graph and shapes, the source file of its
        class, a loss function's code), with the versions, backend and
        device. A call with an argument that has no stable description (an
        object whose repr holds its memory address) runs and is not stored,
        with a note; a timed call is never cached (``cache`` with ``timed``
        is refused).
      peak_tflops, peak_bandwidth: the device's peak FLOP/s (in TFLOP/s) and
        memory bandwidth (bytes/s) for MFU and the roofline, replacing the
        device registry's (`xla_cost.timemodel.devices`) or the CPU measurement.
      name: the model's name in the report (default: its class name).
      config: the model's keyword arguments, recorded in the report.
      dtype: the computation dtype to record (default: the output's dtype).
      call_kwargs: keyword arguments of the model's call (``{"train": True}``,
        a mask); arrays among them are traced like the inputs. Random keys are
        supplied without asking: Linen ``rngs`` for every stream the model
        uses, an ``nnx.Rngs`` for an NNX call with an ``rngs`` parameter.
      method: call this method of the module instead of ``__call__`` (a name,
        or a function of the module as for Flax's ``apply(..., method=)``).
      axis_names: collective axis names to bind (``BatchNorm(axis_name=...)``);
        the names a model uses are detected without it. The step runs as one
        device of a data-parallel group; its collectives are listed in
        ``Report.collectives``.
      output: what the loss sees of the outputs, for a model that returns
        more than logits: an index or key (``0`` for ``(logits, loss)``) or a
        function of the outputs.
      mesh: analyse the step sharded over a device mesh: ``{"data": 8}``,
        ``"fsdp=8,model=8"`` or a `jax.sharding.Mesh` with axes among
        ``data`` (DDP), ``fsdp`` (ZeRO-3) and ``model`` (tensor parallel);
        see `xla_cost.parallel.sharding`. Each program is compiled by XLA's SPMD
        partitioner for one device of the mesh: FLOP, bytes and memory are
        per device, and each phase lists its collectives
        (``PhaseCosts.communication``). Without the devices, the CPU
        simulates them (`xla_cost.simulate_devices` before JAX starts).
      param_sharding: ``[(regex, PartitionSpec), ...]`` rules for the
        parameters' ``model`` (or any) axis, first match on the parameter's
        path; they take precedence over the model's partitioning metadata
        and the zoo's rules.
      logical_axis_rules: ``[(logical name, mesh axis), ...]`` for models
        annotated with ``nn.with_partitioning``/``nnx.with_partitioning``;
        default `xla_cost.parallel.sharding.DEFAULT_LOGICAL_RULES`.
      memory: also break the step's memory down per device
        (`Report.memory_breakdown`, `xla_cost.analysis.memory`): parameters, gradients,
        optimizer state, batch and the activations the backward pass keeps
        (per layer in ``layers``), beside XLA's peak of the train step compiled
        as one program with the parameters and optimizer state donated (one
        more compile).
      remat: run the whole model under ``jax.checkpoint`` with this policy
        (``full``, ``dots_saveable``, ``dots_with_no_batch_dims_saveable``;
        `xla_cost.step.remat`): fewer saved activations, the forward work
        recomputed in the backward pass shows in ``hardware_flops`` (not in
        ``model_flops``). Zoo transformers remat per block instead with
        ``--set remat=...``.
      attention_flops: how ``model_flops`` counts the attention's score and
        value products (`ATTENTION_CONVENTIONS`): ``full`` (every T x T pair,
        as computed) or ``causal`` (half of those of causally masked attention).

    Returns:
      A `Report`.

    Raises:
      InputError: the model, inputs, loss, optimizer, counter or depth cannot
        be used.
      CostAnalysisUnavailableError: the backend gives no cost analysis.

    Example::

      import jax, jax.numpy as jnp, xla_cost
      from xla_cost.zoo import build_model
      report = xla_cost.analyze(
          build_model("conv_net"),
          jax.ShapeDtypeStruct((32, 224, 224, 3), jnp.float32),
          optimizer="adam", per_layer=True)
      print(report.to_frame())
    """
    given = locals()
    if isinstance(unfused, list):  # a sequence of phase names, kept as a tuple (the options are hashed)
        given["unfused"] = tuple(unfused)
    request = Request(model, inputs, optimizer, ModelOptions(**given_fields(ModelOptions, given)),
                      AnalysisOptions(**given_fields(AnalysisOptions, given)),
                      ShardingOptions(**given_fields(ShardingOptions, given)))
    request.options.check()
    request.sharding.sizes()  # a bad mesh is refused before anything runs
    request = on_callers_mesh(request)
    if request.options.cached:
        return cached(request.arguments(), request.options.cache, lambda: run(request))
    return run(request)


def run(request: Request) -> Report:
    """The pipeline of `analyze` for one checked `Request`, without the results store;
    every program compiled for the request's target where it names one."""
    target = None if request.options.target is None else check_target(request.options.target)
    with targets.use(target):
        try:
            report = _run(request)
        except Exception as exc:  # a target's compiler out of memory: the step is too big for it, in one line
            refused = None if target is None else too_big_for(target, exc)
            if refused is None:
                raise
            raise refused from exc
    if request.options.compare_cpu:  # the same request for the default backend, kept beside the target's
        proxy = dataclasses.replace(request.options, target=None, compare_cpu=False)
        report = dataclasses.replace(report, cpu=run(dataclasses.replace(request, options=proxy)))
    return report


def on_callers_mesh(request: Request) -> Request:
    """``request`` on the caller's mesh: without mesh=, inside a `jax.set_mesh` of more than one device,
    on the active mesh's axes (`ShardingPlan.notes` says so); its axes laid Explicit where the caller's
    mesh (the active one, or that of the model's arrays) has Explicit axes (`_sharding.explicit_axes`).

    Raises:
      InputError: an active mesh whose axes are not `xla_cost.MESH_AXES`, without mesh=.
    """
    sharding, active, taken = request.sharding, jax.sharding.get_abstract_mesh(), False
    if sharding.mesh is None and not active.empty and math.prod(active.shape.values()) > 1:
        sizes = {str(axis): int(size) for axis, size in active.shape.items()}
        unknown = [axis for axis in sizes if axis not in _sharding.MESH_AXES]
        if unknown:
            raise InputError(
                f"analyze inside jax.set_mesh on a mesh of xla_cost's axes ({', '.join(_sharding.MESH_AXES)}), "
                "or mesh= naming them", f"the active mesh {_sharding.mesh_text(sizes)} and no mesh=",
                f"Pass mesh= with xla_cost's axes for the same devices (e.g. mesh={{'data': {math.prod(sizes.values())}}}"
                "), or call analyze outside the with for one device; for code whose PartitionSpecs name your own axes "
                f"({', '.join(unknown)}), analyse your train step under your mesh with xla_cost.analyze_step "
                "(xla-cost step).")
        sharding, taken = dataclasses.replace(sharding, mesh=_sharding.parse_mesh(sizes)), True
    if not sharding.sharded:
        return request
    mesh = sharding.mesh
    if isinstance(mesh, Mesh):  # the user's own mesh, as its axes are typed
        explicit = tuple(str(a) for a, kind in zip(mesh.axis_names, mesh.axis_types)
                         if kind == jax.sharding.AxisType.Explicit)
    else:
        m = request.model_options
        explicit = _sharding.explicit_axes(sharding.sizes(), _sharding.caller_axis_types(
            request.model, request.inputs, m.params, m.call_kwargs, m.targets))
    return dataclasses.replace(request, sharding=sharding, explicit=explicit, caller_mesh=taken)


def _run(request: Request) -> Report:
    mesh, notes = None, []
    if request.sharding.sharded:  # made first: the step is traced on its axes' types
        mesh = request.sharding.mesh
        if not isinstance(mesh, Mesh):
            mesh, notes = _sharding.make_mesh(request.sharding.sizes(), request.explicit)
        if request.caller_mesh:
            notes.insert(0, f"mesh {_sharding.mesh_text(request.sharding.sizes())}: the active jax.set_mesh's "
                         "axes (no mesh= given; pass mesh= to analyse another)")
    # a step on Explicit axes, or called under the caller's mesh, is traced under its own: its arrays' types
    # name that mesh's axes (the caller's mesh would type them on its own, Explicit or not)
    ours = mesh is not None and (request.explicit or not jax.sharding.get_abstract_mesh().empty)
    try:
        with jax.set_mesh(mesh) if ours else contextlib.nullcontext():
            return _run_on(request, mesh, notes)
    except InputError as exc:
        if ours or mesh is None or not needs_mesh(exc):
            raise
    # a model whose own shardings name mesh axes (with_sharding_constraint(x, P('fsdp')), an out_sharding=),
    # which jax resolves only under a mesh: traced under the plan's (on Auto axes, traced on none, Flax's
    # Partitioned metadata constrains nothing: its names may be logical ones the plan maps)
    with jax.set_mesh(mesh):
        return _run_on(request, mesh, notes)


def _run_on(request: Request, mesh: Mesh | None, mesh_notes: Sequence[str]) -> Report:
    options = request.options
    workload, optimizer_name = build_step(request)
    plan = plan_mesh(request, workload, mesh, mesh_notes)
    timed = options.timed and plan is None
    if options.timed and plan is not None:
        workload = dataclasses.replace(workload, notes=(
            *workload.notes, "timing skipped: a sharded step is analysed, not run"))
    if options.compiled:
        xla.use_compilation_cache(options.compilation_cache)
    key = report_cache.report_key(request, workload) if options.compiled and plan is None else None
    if key is not None and (report := report_cache.read_report(key)) is not None:
        return report
    rows: list[tuple[tuple[LayerCosts, ...], tuple[str, ...]]] = []

    def layer_rows(counted: Mapping[str, JaxprCount]) -> None:  # the counts alone: made while the compiles run
        rows.append(per_layer(workload, counted, options.depth))

    programs = run_programs(
        workload, phases.programs(options.exact_train_step), compiled=options.compiled, for_timing=timed,
        plan=plan, meanwhile=layer_rows if options.per_layer or options.depth else None, unfused=options.unfused,
    )
    compute_dtype = options.dtype or _program_dtype(workload)
    costs, phase_notes = all_phases(
        programs, plan, tuple(workload.param_paths), workload.root_name, options.attention_flops, workload.padded,
        narrow=emulates_narrow_floats(compute_dtype, _param_dtype_name(workload)),
    )
    timing = time_step(workload, programs, costs, compute_dtype, options) if timed else None
    breakdown = step_memory(workload, plan, options.compiled) if options.memory else None
    counted = {name: program.counted for name, program in programs.items()}
    layers, layer_notes = rows[0] if rows else (None, ())
    if layers is not None and breakdown is not None:
        layers = _with_saved(layers, breakdown.saved_by_layer)
    fitted = None
    if targets.active() is not None and options.compiled:  # whether the step fits the target's device
        fitted = target_memory(
            targets.active(), {name: p.compiled.memory for name, p in programs.items() if p.compiled is not None},
            breakdown, {name: (c.flops, c.jaxpr_flops) for name, c in costs.items()})
    report = assemble(request, Stages(workload, optimizer_name, plan, counted, costs, tuple(phase_notes),
                                      compute_dtype, timing, breakdown, layers, layer_notes, fitted))
    if key is not None:
        report_cache.write_report(key, report)
    return report


def build_step(request: Request) -> tuple[Workload, str]:
    """Stage 1: the step's phase functions and abstract arguments (`build_workload`)."""
    return build_workload(request.model, request.inputs, optimizer=request.optimizer, options=request.model_options)


def plan_mesh(request: Request, workload: Workload, mesh: Mesh | None = None,
              mesh_notes: Sequence[str] = ()) -> ShardingPlan | None:
    """Stage 2: the sharding of every tree on the mesh (``mesh``: the one `_run` made, and what it said
    of it); None on one device."""
    if not request.sharding.sharded:
        return None
    if workload.axis_names:
        raise InputError(
            "a model without collective axis names of its own on a mesh",
            f"axis names {', '.join(workload.axis_names)} (a BatchNorm(axis_name=...))",
            "Analyse it on one device (no --mesh), where its collectives are bound, or "
            "drop its axis_name: on a mesh XLA inserts the collectives itself.",
        )
    if mesh is None:
        mesh = request.sharding.mesh
    return _sharding.plan_sharding(
        workload, mesh if isinstance(mesh, jax.sharding.Mesh) else request.sharding.sizes(),
        param_sharding=request.sharding.param_sharding, logical_axis_rules=request.sharding.logical_axis_rules,
        model_rules=_sharding.model_rules(request.model), mesh_notes=mesh_notes,
    )


def time_step(
    workload: Workload, programs: Mapping[str, Program], costs: Mapping[str, PhaseCosts], dtype: str,
    options: AnalysisOptions,
) -> Timing:
    """Stage 5a: the step run and timed on the default device (`xla_cost.analysis.timing`):
    the train step as one program, split by a trace into forward, backward,
    update and the layers the way the counts are attributed (the model's roots
    as `per_layer` strips them), the separate programs as a cross-check; a run
    that fails is reported as skipped, the counts stand."""
    from xla_cost.analysis.split import Attribution  # noqa: PLC0415 - only a timed analysis loads these
    from xla_cost.analysis.timing import StepProgram, Timing, device_peak, time_workload  # noqa: PLC0415

    try:
        peak = device_peak(peak_tflops=options.peak_tflops, peak_bandwidth=options.peak_bandwidth)
    except ValueError as exc:
        raise InputError(
            "a device with a known peak, or --peak-tflops and --peak-bandwidth",
            xla.device_kind(), str(exc).rsplit(". ", 1)[-1],
        ) from exc
    executables = {n: p.compiled.executable for n, p in programs.items() if p.compiled is not None}
    step = StepProgram(
        attribution=Attribution.of_workload(workload, _roots(workload, {n: p.counted for n, p in programs.items()})),
        library_bytes={n: p.compiled.library_bytes for n, p in programs.items() if p.compiled is not None},
    )
    try:
        return time_workload(workload, costs, dtype=dtype, peak=peak, executables=executables, program=step)
    except Exception as exc:  # noqa: BLE001 - the counts must survive a failed run
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Timing(
            xla.device_kind(), peak, dtype, {}, {}, None,
            skipped=f"running the step failed: {type(exc).__name__}: {first}",
        )


def per_layer(
    workload: Workload, counted: Mapping[str, JaxprCount], depth: int | None,
) -> tuple[tuple[LayerCosts, ...], tuple[str, ...]]:
    """Stage 5c: the per-layer rows (`xla_cost.attribute_step`), and a note
    naming the name stacks that match no module (their work is in the
    remainder row; `xla_cost.count.attribution.unmatched_note`). They need the
    jaxpr counts alone, so `run_programs` has them made while the compiles run;
    the activations each row's operations save are added once the memory is
    broken down (`_with_saved`)."""
    programs = {name: count.equations for name, count in counted.items()}
    roots = _roots(workload, counted)
    reads = counted["forward"].parameter_reads if "forward" in counted else ()
    layers = attribute_step(
        programs, workload.param_paths, root=roots, depth=depth, known_modules=workload.module_paths,
    )
    notes = (unmatched_note(programs, workload.param_paths, root=roots, known_modules=workload.module_paths,
                            called=bool(workload.module_paths)),
             root_products_note(programs.get("forward", ()), workload.param_paths, root=roots,
                                known_modules=workload.module_paths, reads=reads),
             borrowed_note(reads, workload.param_paths, root=roots, known_modules=workload.module_paths))
    return layers, tuple(note for note in notes if note)


@dataclasses.dataclass(frozen=True)
class Stages:
    """What the stages of one analysis found, for `assemble`.

    Attributes:
      workload, optimizer_name: stage 1's step and the optimizer's name.
      plan: stage 2's sharding (None on one device).
      counted: each program's jaxpr count.
      costs: stage 4's figures per phase, and ``phase_notes`` its notes.
      compute_dtype: the computation dtype the report records.
      timing, breakdown, layers: stage 5's, where asked.
      layer_notes: what the per-layer rows could not attribute.
      target_memory: whether the step fits a compile target's device (None: no target).
    """

    workload: Workload
    optimizer_name: str
    plan: ShardingPlan | None
    counted: Mapping[str, JaxprCount]
    costs: Mapping[str, PhaseCosts]
    phase_notes: tuple[str, ...]
    compute_dtype: str
    timing: Timing | None = None
    breakdown: MemoryBreakdown | None = None
    layers: tuple[LayerCosts, ...] | None = None
    layer_notes: tuple[str, ...] = ()
    target_memory: TargetMemory | None = None


def assemble(request: Request, found: Stages) -> Report:
    """Stage 6: the `Report`, with every note the stages left, in reading order."""
    options = request.options
    workload, plan, costs, timing, breakdown = found.workload, found.plan, found.costs, found.timing, found.breakdown
    notes: list[str] = list(workload.notes)
    forward = workload.traced.get("forward")  # a router the model does not declare: said
    notes += undeclared_routing_notes(forward and forward.jaxpr, workload.input_owners("forward"),
                                      declared=workload.active_parameters is not None)
    target = targets.active()
    if target is not None:
        notes.append(target_note(target))
    if options.unfused:
        notes.append(f"{', '.join(options.unfused)} compiled with XLA's fusion passes off ("
                     + ", ".join(xla.EAGER_FUSION_PASSES) + "): every operation a kernel of its own, as an eager "
                     "framework launches them")
    if found.target_memory is not None:  # a step too big for its target, and what its compiler recomputed
        notes += found.target_memory.notes()
    step = costs.get("train_step")
    if options.attention_flops == "causal" and step is not None and step.model_flops is not None:
        split = causal_halves(found.counted, tuple(workload.param_paths), workload.root_name)
        notes.append(causal_note(split, step.model_flops, causal_windows(found.counted)))
    if plan is not None:
        notes.append(
            f"sharded over {plan.devices} devices ({_sharding.mesh_text(plan.sizes)}): flops, "
            "bytes, memory and communication are per device; jaxpr_* figures and per-layer "
            "rows count the whole step on all devices"
            if options.compiled else
            f"sharded over {plan.devices} devices ({_sharding.mesh_text(plan.sizes)}), counted from the jaxpr "
            "alone (counter jaxpr): every figure is the whole step's on all devices, no program is partitioned "
            "and no communication is listed; compile (counter xla) for one device's figures and its collectives"
        )
        notes += plan.notes
    if not options.compiled:
        notes.append(
            "counted from the jaxpr alone (counter jaxpr): no XLA bytes_accessed or memory; "
            "jaxpr_bytes_accessed is the unfused estimate; compile for those (counter xla)"
        )
    notes += found.phase_notes
    for phase in phases.derived(options.exact_train_step):
        if phase.program is not None:  # could have been compiled: say what is missing
            notes.append(
                f"{phase.name}: {phase.formula_text}, not compiled as one program: its FLOP "
                "are within about 1e-5 of the fused program's; its bytes count the gradients "
                "written by grad and read by update, which the fused step may keep (more on "
                "small models); "
                + ("its memory in this table is unknown: the memory breakdown's XLA peak is the train step "
                   "compiled as one program (its parameters and optimizer state donated)"
                   if options.memory and options.compiled else
                   "its memory is unknown: exact_train_step=True (--exact-train-step) compiles it")
            )
    unsupported: dict[str, int] = {}
    for count in found.counted.values():
        for prim, n in count.unsupported.items():
            unsupported[prim] = max(unsupported.get(prim, 0), n)
    param_dtype = _param_dtype_name(workload)
    precision = precision_note(found.compute_dtype, param_dtype, costs, xla.backend_name())
    if precision:
        notes.insert(0, precision)
    if timing is not None and timing.skipped:
        notes.append(f"timing skipped: {timing.skipped}")
    if breakdown is not None:
        notes += list(breakdown.notes)
    notes += found.layer_notes
    step = _step_equations(found.counted)
    collectives = _collectives(step)
    if collectives:
        notes.append(_collective_note(collectives, step))
    trained, updated, said = _trained(workload)
    notes += said
    first = jax.tree.leaves(workload.inputs)[0]
    return Report(
        model=options.name or workload.root_name,
        config=dict(options.config or {}),
        batch_size=int(first.shape[0]),
        optimizer=found.optimizer_name,
        dtype=found.compute_dtype,
        param_dtype=param_dtype,
        backend=xla.backend_name(),
        jax_version=jax.__version__,
        parameters=workload.parameters,
        active_parameters=workload.active_parameters,
        trained_parameters=trained, updated_parameters=updated,
        phases=costs,
        layers=found.layers,
        unsupported=unsupported,
        notes=tuple(dict.fromkeys(notes)),
        counter=options.counter,
        depth=options.depth,
        timing=timing,
        collectives=collectives,
        sharding=_sharding_summary(workload, plan) if plan is not None else {},
        memory_breakdown=breakdown,
        target=None if targets.active() is None else targets.active().name,
        target_memory=found.target_memory,
    )


def _roots(workload: Workload, counted: Mapping[str, JaxprCount]) -> tuple[str, ...]:
    """Name-stack entries that stand for the whole model, to strip from module paths.

    A module's root is its class name. An apply function that calls a Linen
    ``model.apply`` puts that model's class name first on every name stack,
    while its parameter paths start at the model's children: `model_roots` of the
    stacks (the rule `xla_cost.analyze_step` follows), so that a pure-JAX function's
    ``jax.named_scope("ffn")`` is a scope over no module, not a root.
    """
    if workload.kind != "function":
        return (workload.root_name,)
    stacks = (e.name_stack for name, count in counted.items() if not phases.phase(name).follow_data
              for e in count.equations)
    return (workload.root_name, *model_roots(stacks, workload.param_paths))


def _dtype_name(workload: Workload) -> str:
    leaves = jax.tree.leaves(workload.outputs) or jax.tree.leaves(workload.params)
    return str(leaves[0].dtype) if leaves else "unknown"


def _program_dtype(workload: Workload) -> str:
    """The dtype the model computes in, read from its forward program: its matrix products'
    operands' (`step_arguments.compute_dtype`; a Linen model whose layers set ``dtype=jnp.bfloat16``
    on float32 parameters, as maxdiffusion's UNet: bfloat16, whatever its last layer returns), or
    its outputs' where it has no products."""
    traced = workload.traced.get("forward")
    fallback = _dtype_name(workload)
    return fallback if traced is None else program_compute_dtype(traced.jaxpr, fallback)


def _param_dtype_name(workload: Workload) -> str | None:
    """The parameters' dtypes (``bfloat16/float32`` where they differ); None for a model without any."""
    names = sorted({str(x.dtype) for x in jax.tree.leaves(workload.params)})
    return "/".join(names) or None







def _step_equations(counted: Mapping[str, JaxprCount]) -> list[tuple[int, EqnCount]]:
    """The train step's equations with their weight: its own program's, or its
    formula's programs' (``grad + update``)."""
    step = phases.phase("train_step")
    if "train_step" in counted:
        return [(1, e) for e in counted["train_step"].equations]
    return [(k, e) for name, k in step.formula.items() for e in counted[name].equations]


def _trained(workload: Workload) -> tuple[int | None, int | None, list[str]]:
    """(the parameters trained: those whose gradients the optimizer reads, where it freezes some
    (`xla_cost.step.workload.unread_gradients`), and that the loss reads (`Workload.loss_reads`),
    None: every one; the parameters the optimizer updates where that is more: the zero gradients
    of those the loss never reads (a tied model's unused ``lm_head``); the notes on them, worded
    as `xla_cost.analyze_step`'s)."""
    paths = named_leaves(workload.params)
    every = [True] * len(paths)
    grads = every if workload.read_gradients is None else jax.tree.leaves(workload.read_gradients)
    reads = every if workload.loss_reads is None else jax.tree.leaves(workload.loss_reads)
    sizes = [int(math.prod(getattr(leaf, "shape", ()))) for _, leaf in paths]
    updated = sum(n for n, g in zip(sizes, grads) if g)
    trained = sum(n for n, g, r in zip(sizes, grads, reads) if g and r)
    if workload.loss_reads is None or trained == updated:
        return (None if workload.read_gradients is None else trained), None, []
    unread = ["/".join(path_names(path)) for (path, _), g, r in zip(paths, grads, reads) if g and not r]
    return trained, updated, [ungraded_note(unread), trained_note(trained, workload.parameters, updated)]


def _collectives(step: Sequence[tuple[int, EqnCount]]) -> dict[str, int]:
    """How often each collective primitive runs in one step (from the jaxprs)."""
    out: dict[str, int] = {}
    for k, e in step:
        if e.primitive in COLLECTIVES:
            out[e.primitive] = out.get(e.primitive, 0) + k * e.executions
    return dict(sorted(out.items()))


def _collective_note(collectives: Mapping[str, int], step: Sequence[tuple[int, EqnCount]]) -> str:
    flops = sum(k * e.cost.flops for k, e in step if e.primitive in COLLECTIVES)
    names = ", ".join(f"{k} x{v}" for k, v in collectives.items())
    return (
        f"collectives in the train step: {names}; on a group of one device they move no "
        f"data, but XLA counts an all-reduce as one add per element ({flops:,} FLOP of the "
        "train step, in the figures)"
    )


def _with_saved(layers: tuple[LayerCosts, ...], saved: Mapping[str, int]) -> tuple[LayerCosts, ...]:
    """Each row with the saved activations of the modules it stands for: a
    saved-activation layer goes to the row with the longest path that contains
    it, else to the remainder."""
    totals = {layer.path: 0 for layer in layers}
    for path, size in saved.items():
        row = max((p for p in totals if path == p or path.startswith(p + "/")), key=len, default=REMAINDER)
        totals[row] = totals.get(row, 0) + size
    return tuple(dataclasses.replace(layer, saved_activation_bytes=totals.get(layer.path, 0)) for layer in layers)


def _sharding_summary(workload: Workload, plan: _sharding.ShardingPlan) -> dict[str, Any]:
    """The mesh, and the bytes of the parameters and optimizer state in total and per device."""
    out: dict[str, Any] = {"mesh": dict(plan.sizes), "devices": plan.devices}
    for name, tree in (("params", workload.params), ("opt_state", workload.opt_state)):
        total, per = _sharding.per_device_bytes(tree, plan.specs[name], plan.sizes)
        out[f"{name}_bytes"], out[f"{name}_bytes_per_device"] = total, per
    out["param_specs"] = {
        path: {"spec": spec, "source": plan.sources[path]} for path, spec in plan.param_table().items()
    }
    return out


def target_note(target: targets.CompileTarget) -> str:
    """What a report compiled for ``target`` says of where its figures come from."""
    how = ("XLA's GPU compiler (jax's CUDA plugin) for a GpuTargetConfig written from the datasheet"
           if target.platform == "cuda" else "libtpu's compiler for the slice")
    return (f"compiled for {target.title} ({target.name}) by its own compiler, with no such device here: "
            f"{how}; kernels, bytes, memory and collectives are that program's; FLOP are its cost analysis's, "
            "or, where it gives none (a GPU compiled without its device), XLA's cost analysis over its optimized "
            "module with the library calls' FLOP counted from their operands")
