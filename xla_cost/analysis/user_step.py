"""`analyze_step`: a user's own training step split into forward, backward,
update and other, per layer, as the research code runs it.

The step is traced once (`xla_cost.step.user_step.prepare_step`); its jaxpr is
counted with every equation classified into a part
(`xla_cost.count.step_parts`); with ``counter="xla"`` the same step is lowered
with the user's jit options (donation, shardings) and compiled once, and XLA's
count of the whole step checks the sum of the parts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
from jax.extend import core as jex_core
from jax.sharding import AbstractMesh, Mesh

from xla_cost.analysis.costs import collective_rows, emulates_narrow_floats, phase_costs, precision_note
from xla_cost.analysis.differentiated import with_differentiated_parameters
from xla_cost.analysis.memory import target_memory, too_big_for
from xla_cost.analysis.options import check_target
from xla_cost.analysis.pipeline import COLLECTIVES, target_note
from xla_cost.analysis.programs import Program
from xla_cost.analysis.report import PhaseCosts, Report
from xla_cost.analysis.step_arguments import PER_EXAMPLE, batch_size, compute_dtype, new_state, parameter_dtype, \
    step_memory, written_arguments
from xla_cost.analysis.quantized import with_quantized_weights
from xla_cost.analysis.step_checks import (
    fusion_note, merged_forward, metric_gradients_note, no_backward_note, second_forward, step_notes, takes_a_gradient,
    trained_parameters,
    without_parameter_copies,
)
from xla_cost.analysis.step_target import target_lowered
from xla_cost.analysis.step_timing import time_user_step
from xla_cost.analysis.trained_notes import trained_note
from xla_cost.analysis.tree_layers import layers_by_tree
from xla_cost.choices import COUNTERS, REMAINDER
from xla_cost.compiled import lowering, targets, xla
from xla_cost.analysis.step_classes import with_class_names
from xla_cost.count.attribution import attribute_parts, check_depth, classify_pass, model_roots, module_path, \
    module_tree, owner, root_products_note, split_name_stack, stack_modules, unmatched_note, with_ancestors, \
    borrowed_note
from xla_cost.count.interpret import JaxprCount, count_jaxpr, join_stack, kept_outputs
from xla_cost.count.param_reads import parameter_reads
from xla_cost.count.routers import undeclared_routing_notes
from xla_cost.count.step_labels import StepLabels
from xla_cost.count.step_parts import classify_step
from xla_cost.count.trip_bounds import unknown_loop_notes
from xla_cost.errors import InputError, quoted
from xla_cost.parallel.sharding import ShardingPlan
from xla_cost.present import progress
from xla_cost.step import phases
from xla_cost.step.user_step import NO_PARAMETERS_NOTE, UserStep, check_batch, check_returns, prepare_step

__all__ = ["analyze_step", "STEP_GRAD"]

FORWARD, BACKWARD, UPDATE, OTHER = phases.STEP_PARTS

STEP_GRAD = phases.Phase("grad", "forward and backward of the step", formula={FORWARD: 1, BACKWARD: 1})
"""``grad`` of a user's step: its forward and backward parts (no program of its own)."""

STACK_ROWS_NOTE = ("no parameters found in the arguments (the leaves the loss is differentiated with respect to, a "
                   "`params` key or attribute, or NNX Params; a step that makes its own inside itself, a Linen "
                   "`init` in the jitted step, has none): the parameter count is unknown (0 in the report's figures), "
                   "the per-layer rows are the "
                   "modules the forward and backward passes' name stacks name, their parameters unknown, and the "
                   f"update, whose stack names no module, is in the {REMAINDER} row")
"""`NO_PARAMETERS_NOTE` where the per-layer rows come from the step's name stacks (`stack_modules`)."""

_OPTIMIZER = "its own optimizer"
"""What a user step's report says for its optimizer (it is in the step)."""
_NO_OPTIMIZER = "no optimizer"
"""What it says for a step that takes no gradient and updates nothing (a decode, an evaluation); one
that takes a gradient nothing it returns reads (its backward pass and update dead code) has its own."""


def analyze_step(
    step: Any,
    *args: Any,
    per_layer: bool = False,
    depth: int | None = None,
    counter: str = "xla",
    axis_names: Sequence[str] | str | None = None,
    timed: bool = False,
    memory: bool = False,
    target: str | None = None,
    compare_cpu: bool = False,
    **kwargs: Any,
) -> Report:
    """Counts one call of a user's own training step, split into its parts.

    ``step`` is the function the training loop runs: bare, a
    ``functools.partial``, ``jax.jit``-ed (its ``donate_argnums`` and
    ``in_shardings``/``out_shardings`` are honoured when it is compiled),
    ``nnx.jit``-ed, or made by ``nnx.cached_partial(train_step, model,
    optimizer)`` (``train_step`` called with what it holds first); ``args`` (and ``kwargs``) are its example arguments,
    concrete or abstract (``jax.eval_shape(create_train_state, ...)``,
    ``jax.ShapeDtypeStruct`` pytrees, ``nnx.eval_shape`` models), NNX models,
    optimizers and metrics included. Nothing the size of the model is
    allocated (unless ``timed``).

    The step's jaxpr is split into parts (`xla_cost.count.step_parts`) from its
    name stacks and data flow, with no names the user must add: ``forward``
    (under ``jvp``, not transposed: what the loss needs, returned or not, so
    ``jax.grad`` and ``value_and_grad`` forms agree), ``backward`` (under
    ``transpose``: custom VJPs' backward rules and ``jax.checkpoint``'s
    recomputation included), ``update`` (what consumes the gradients into the
    new state: the optax chain, clipping, accumulation, loss-scale checks, a
    ``pmean`` of the gradients) and ``other`` (metrics, even those computed on
    the gradients, schedules, data reshapes); notes explain a missing backward
    pass and XLA's count above the parts', and the step checker notes
    accidental work (`xla_cost.analysis.step_checks`); ``grad`` is forward plus
    backward and ``train_step`` the whole step. Nested jits, ``lax.scan``
    accumulation loops (counted trip-count times), ``while`` loops with a
    static trip count and ``lax.cond`` (its most expensive branch, noted) are
    followed. The parts add up to the step's jaxpr count exactly.

    Args:
      step: the training step function.
      *args: its example arguments.
      per_layer: also split each part's FLOP by module (``layers``), from the
        module paths on the name stacks; an update's arithmetic goes to the
        module whose gradient it reads.
      depth: with ``per_layer``: merge rows to the first N components of their path.
      counter: ``xla`` (default: also compile the step once; its XLA count,
        corrected for loops, is ``train_step``'s figure beside the parts' sum)
        or ``jaxpr`` (count only).
      axis_names: collective axis names the step uses unbound (``lax.pmean(grads,
        "batch")`` written for ``pmap``); detected without it. The step then
        runs as one device of a data-parallel group.
      timed: also run the compiled step on the default device and time it
        (``timing``; arguments are made from the abstract ones), split into
        its parts and, with ``per_layer``, its layers from a profiler trace of
        the compiled instructions (their ``op_name``s), with FLOP/s, GB/s and
        the roofline per part.
      memory: also give the step's memory (``memory_breakdown``): parameters,
        gradients, optimizer state, model state, inputs and the activations
        the backward pass reads, beside XLA's figures for the step compiled
        as the user's jit donates.
      target: compile the step for this device instead of the default backend
        (`xla_cost.timemodel.devices.target`: ``h100``, ``tpu-v5e:2x2``), by its
        own compiler, with no such device here: the traced step, as its jit
        donates, placed on the target's first device, or a sharded step's mesh
        laid over as many of the target's devices (the same shape and axes).
        ``train_step``'s XLA figures, the memory and the collectives are then
        the target's program's; the parts are the jaxpr's as ever. Not with
        ``timed`` or ``counter="jaxpr"``; needs the platform's extra.
      compare_cpu: with ``target``, also analyse the step for the default
        backend (the CPU proxy) and keep that report as ``cpu``, so that
        `Report.comparison` sets the two programs side by side, as
        ``analyze(..., compare_cpu=True)`` does. Not a keyword of the step:
        a step that takes one of this name is called with it through
        ``functools.partial``.
      **kwargs: the step's keyword arguments.

    Returns:
      A `Report` whose ``phases`` are forward, backward, grad, update, other
      and train_step; on a sharded step (a jit with ``in_shardings`` over a
      mesh of several devices, ``jax.jit`` or ``nnx.jit``, an NNX step's
      included) FLOP are per device, the parts' and their notes' as
      train_step's, and each part lists its collectives.

    Raises:
      InputError: ``step`` is not callable; it fails to trace (its own
        exception, in one line); ``counter`` or ``depth`` cannot be used; an
        unknown ``target``, its compiler not installed, or one with ``timed``
        or ``counter="jaxpr"``; ``compare_cpu`` without a target.
      CostAnalysisUnavailableError: the backend gives no cost analysis.

    Example::

      report = xla_cost.analyze_step(train_step, state, batch, per_layer=True)
      print(report.to_frame())
    """
    check_depth(depth)
    if counter not in COUNTERS:
        raise InputError(f"counter in {', '.join(COUNTERS)}", repr(counter), "Use counter='xla' or 'jaxpr'.")
    found_target = None if target is None else check_target(target, timed=timed, counter=counter)
    if compare_cpu and found_target is None:
        raise InputError("compare_cpu (--compare-cpu) only with a target (--target): it sets the CPU proxy's "
                         "program beside the target's", f"compare_cpu={compare_cpu!r} without a target",
                         "Add target='h100' (--target h100), or drop compare_cpu (--compare-cpu).")
    options = {"per_layer": per_layer, "depth": depth, "counter": counter, "axis_names": axis_names,
               "timed": timed, "memory": memory}
    with targets.use(found_target):
        report = _analyze_step(step, args, kwargs, **options)
    if compare_cpu:  # the same step for the default backend, kept beside the target's (Report.comparison)
        report = dataclasses.replace(report, cpu=_analyze_step(step, args, kwargs, **options))
    return report


def _analyze_step(step: Any, args: Sequence[Any], kwargs: Mapping[str, Any], *, per_layer: bool,
                  depth: int | None, counter: str, axis_names: Sequence[str] | str | None, timed: bool,
                  memory: bool) -> Report:
    """`analyze_step` with its options checked, under the compile target if any (`targets.use`)."""
    target = targets.active()
    progress.stage("tracing the step")
    prepared = prepare_step(step, args, kwargs, axis_names)
    check_batch(prepared)
    call, shapes = _trace(prepared)
    inner = call.params["jaxpr"] if call is not None else None
    traced = inner if inner is not None else prepared.trace().jaxpr
    check_returns(traced, prepared.name)
    stacks = _stacks(traced)
    # a copy of the parameters kept beside them (an EMA) is state, before and after their paths are matched
    # the leaves the loss is differentiated with respect to are parameters, whatever the arguments' names
    prepared = with_quantized_weights(traced, with_differentiated_parameters(traced, prepared))  # (int8 weights too)
    prepared = without_parameter_copies(traced, _aligned(without_parameter_copies(traced, prepared), stacks))
    # several models' trees side by side (cleanrl's AgentParams): each named after the class applied to it
    prepared = with_class_names(traced, prepared, lambda candidate: _matched(stacks, candidate))
    modules = with_ancestors(prepared.param_paths)
    roots = _roots(stacks, prepared)

    tree = module_tree(prepared.param_paths)

    def module_of(stack: str) -> str | None:
        found = owner(module_path(stack, roots, tree), modules)
        return None if found == REMAINDER else found

    owners = list(prepared.owners)
    invars = len(traced.jaxpr.invars)
    owners = owners + [None] * (invars - len(owners)) if len(owners) <= invars else None
    found: list[StepLabels] = []
    results = new_state(prepared, shapes, traced)
    # (a KV cache returned written: state, not the batch; a batch returned as it came in is the batch)
    written = written_arguments(prepared, shapes, traced)

    def classify(jaxpr: Any, given: Sequence[str | None] | None) -> StepLabels:
        found.append(classify_step(jaxpr, given, module_of, results=results, whole=traced))
        return found[-1]

    counted = count_jaxpr(traced, owners=owners, classify=classify)
    gradients = found[-1].gradients if found else None  # (the step's own classification, before any per tree)
    declared = prepared.active_parameters is not None  # a router the model the step calls does not declare: said
    notes = [*prepared.notes, *undeclared_routing_notes(traced, owners, declared=declared)]
    parts = _parts(counted, notes)
    body = _per_device_body(traced)
    mesh = body.eqn.params["mesh"] if body is not None else _mesh(call, prepared)
    plan = ShardingPlan(mesh, {str(k): int(v) for k, v in mesh.shape.items()}, {}, {}) if mesh is not None else None
    if body is not None:  # pmap (a jit of shard_map in this jax) or a shard_map step: its body is one device's
        prepared = dataclasses.replace(prepared, param_paths=_per_device_parameters(prepared, body, plan))
        notes.append(f"the step maps its body over {plan.devices} devices (pmap or shard_map): the parts and "
                     "the parameters are one device's")
    compiled = None
    if counter == "xla":
        progress.stage("compiling the step")
        if target is None:
            with prepared.scopes(), lowering.kernels_it_lowers():
                lowered = prepared.lower()
        else:
            try:
                lowered = target_lowered(target, prepared, call, traced)
            except InputError:
                raise
            except Exception as exc:  # noqa: BLE001 - jax's own error, in one line
                first = next((line for line in str(exc).strip().splitlines() if line.strip()), "")
                raise InputError(f"a step that can be moved to the {target.name}'s devices (its meshes and "
                                 "shardings laid over them)", quoted(exc, first, 280),
                                 "Analyse it without --target (target=).") from exc
        try:
            compiled = xla.compile_phase(lowered, compiler_options=None if timed else xla.COMPILER_OPTIONS,
                                         executable=timed, collectives=plan is not None,
                                         liveness=memory and (target is not None or prepared.own_program is None))
        except Exception as exc:  # a target's compiler out of memory: the step is too big for it, in one line
            refused = None if target is None else too_big_for(target, exc)
            if refused is None:
                raise
            raise refused from exc
    # a mapped body's figures are already one device's; its arguments' bytes are split by its in_specs
    split = _split(call, prepared, plan) if body is None else _Split(leaves=_body_shards(body, plan))
    costs = _costs(counted, parts, compiled, plan, tuple(prepared.param_paths), roots, notes, split, prepared.padded)
    if parts[BACKWARD].total.flops == 0 and not any(e.part == BACKWARD for e in counted.equations):
        notes.insert(0, no_backward_note(traced, prepared))
    mapped = split.devices > 1 or body is not None
    whole = costs["train_step"] if compiled is not None and not mapped else None  # XLA's count of the step
    merged = merged_forward(counted, whole, second_forward(counted, module_of)[0])
    param_dtype = parameter_dtype(prepared, traced)  # (the parameters as the memory's parts read them)
    dtype = compute_dtype(traced.jaxpr, param_dtype)
    if compiled is not None:
        per_device = [costs[p].flops for p in phases.STEP_PARTS]
        notes += fusion_note(prepared, counted, costs["train_step"], merged=merged, devices=plan.devices
                             if body is not None else 1, shared=split.devices,
                             parts_per_device=None if None in per_device else sum(per_device),
                             narrow=target is None and emulates_narrow_floats(dtype, param_dtype))
    notes += step_notes(counted, prepared, traced, module_of, differentiates=parts[BACKWARD].total.flops > 0,
                        step=whole, gradients=gradients)
    layers = None
    if per_layer or depth is not None:
        equations = {p: parts[p].equations for p in phases.SPLIT}
        paths: Mapping[str, int | None] = prepared.param_paths
        root, known = roots, modules
        # parameters made inside the step (purejaxrl's train calls network.init): its modules are its stacks'
        if not paths and stack_modules(stacks, prepared.roots):
            root, paths = prepared.roots, stack_modules(stacks, prepared.roots)
            known = list(paths)
            notes = [STACK_ROWS_NOTE if note == NO_PARAMETERS_NOTE else note for note in notes]
        layers = layers_by_tree(traced, prepared, owners, classify, root=root, depth=depth, known_modules=known) \
            or attribute_parts(equations, paths, root=root, depth=depth, known_modules=known)
        reads = parameter_reads(traced, owners or ())
        said = (unmatched_note(equations, paths, root=root, known_modules=known),
                root_products_note(equations[phases.SPLIT[0]], paths, root=root, known_modules=known, reads=reads),
                borrowed_note(reads, paths, root=root, known_modules=known))
        notes += [note for note in said if note]
    trained, gradients, updated = trained_parameters(traced.jaxpr, prepared, module_of, shards=split.leaves)
    # gradients only the returned metrics read (a gradient norm over a frozen tower's): computed, not trained
    unmetered = kept_outputs(traced, results) if results is not None and not all(results) else None
    metered = 0
    if unmetered is not None and parts[BACKWARD].total.flops:
        alone = trained_parameters(unmetered.jaxpr, prepared, module_of, shards=split.leaves)[0]
        if 0 < alone < trained:
            notes.append(metric_gradients_note(trained - alone, counted.total.flops
                                               - count_jaxpr(unmetered).total.flops, parts[BACKWARD].total.flops))
            # (the updated ones judged as the same step without the metric would be: those it trains)
            metered, trained, updated = trained - alone, alone, alone
    some = bool(parts[BACKWARD].total.flops) and 0 < trained < prepared.parameters
    updated = updated if some and trained < updated else None  # the optimizer also runs on zero gradients
    if some:
        integer = sum(int(leaf.size) for i, leaf in enumerate(jax.tree.leaves(prepared.args)) if i in prepared.quantized)
        notes.append(trained_note(trained, prepared.parameters, updated, integer, metered))
    breakdown = None
    if memory:
        # XLA's figures of the program the user's jit compiles (its donation, its outputs), where it is
        # not the one traced here: an NNX step under nnx.jit or jax.jit
        held = compiled
        if compiled is not None and target is None and prepared.own_program is not None:
            progress.stage("compiling the step as its jit does (memory)")
            held = xla.compile_phase([prepared.own_program()], compiler_options=None if timed else xla.COMPILER_OPTIONS,
                                     executable=False, liveness=True)
        # on a mesh each part is one device's: the arguments by their shardings, the saved activations
        # by the forward work's shards
        breakdown = step_memory(prepared, held, round(found[-1].saved_bytes / split.compute()), plan, gradients,
                                shards=split.leaves, written=written, jaxpr=traced)
        notes += [note for note in breakdown.notes if note.startswith(PER_EXAMPLE)]  # (why XLA's peak is above)
    timing = time_user_step(prepared, compiled, costs, counted=counted, roots=roots) if timed else None
    if timing is not None and timing.skipped:
        notes.append(f"timing skipped: {timing.skipped}")
    collectives: dict[str, int] = {}
    for e in counted.equations:
        if e.primitive in COLLECTIVES:
            collectives[e.primitive] = collectives.get(e.primitive, 0) + e.executions
    fitted = None
    if target is not None:
        notes += [target_note(target), "the parts (forward, backward, update, other) are counted from the step's "
                  f"jaxpr, as on any device; train_step's XLA figures{', the memory' if memory else ''} and the "
                  f"collectives are those of the program the {target.name} compiler built"]
        if compiled is not None:  # a step too big for its target, and what its compiler recomputed
            fitted = target_memory(target, {"train_step": compiled.memory}, breakdown,
                                   {"train_step": (costs["train_step"].flops, costs["train_step"].jaxpr_flops)},
                                   step="train_step")
            notes += fitted.notes()
    if plan is not None and body is not None:
        notes.append(
            f"mapped over {plan.devices} devices {_along(plan)}: "
            "every figure is one device's (XLA's per-device program, the jaxpr of the mapped body)")
    elif plan is not None:
        notes.append(
            f"sharded over {plan.devices} devices {_along(plan)}: "
            + ("train_step's XLA figures are one device's, its matmul, attention and conversion figures the parts' "
               "sum" if compiled is not None else "train_step is one device's, the parts' sum")
            + "; the parts' are the jaxpr's shared out: forward, backward "
            f"and other over {split.compute()} (the batch's shards times the parameters'), the update over each "
            "module's parameter shards (a replicated update runs whole on every device); jaxpr_* figures and "
            "per-layer rows are the whole step's")
    precision = precision_note(dtype, param_dtype, costs, xla.backend_name())  # as analyze's
    return Report(
        model=prepared.name, config={}, batch_size=batch_size(prepared, traced.jaxpr, device_axis=_pmapped(traced),
                                                                written=written),
        # a step whose backward pass and update are dead code still holds its optimizer (its state is in memory)
        optimizer=_OPTIMIZER if costs[UPDATE].flops or costs[BACKWARD].flops or takes_a_gradient(traced.jaxpr)
        else _NO_OPTIMIZER,
        dtype=dtype, param_dtype=param_dtype,
        backend=xla.backend_name(),
        jax_version=jax.__version__, parameters=prepared.parameters, active_parameters=prepared.active_parameters,
        trained_parameters=trained if some else None, updated_parameters=updated,
        phases=costs, layers=layers,
        unsupported=dict(counted.unsupported), notes=tuple(dict.fromkeys([precision] * bool(precision) + notes)),
        counter=counter,
        depth=depth, timing=timing, collectives=dict(sorted(collectives.items())),
        sharding={"mesh": dict(plan.sizes), "devices": plan.devices, "jaxpr": "step" if body is None else "device"}
        if plan is not None else {},
        memory_breakdown=breakdown, target=None if target is None else target.name, target_memory=fitted,
    )




def _trace(prepared: UserStep) -> tuple[Any, Any]:
    """The step's outer jit equation (its jaxpr, shardings and donation), or
    None when the step does not trace to one jit; and its results' shapes."""
    with prepared.scopes():
        outer, shapes = jax.make_jaxpr(lambda *a: prepared.jitted(*a), return_shape=True)(*prepared.args)
    calls = [e for e in outer.jaxpr.eqns if e.primitive.name in ("pjit", "jit")]
    return (calls[0] if len(outer.jaxpr.eqns) == 1 and calls else None), shapes


def _pmapped(traced: Any) -> frozenset[int]:
    """Where the step is a ``jax.pmap`` (a ``shard_map`` of the whole step, any number of devices, in
    this jax), the positions among its flattened arguments of the arrays it maps: each split on its
    leading axis, which its body sees as 1 (the device axis), so that a batch's samples are its
    second axis; else none. An argument ``in_axes`` leaves unmapped (``None``: Flax's ImageNet
    example's ``in_axes=(None, 0)`` state) is passed whole (``P()``), as are the arrays the step
    closes over, and is no evidence either way."""
    jaxpr = traced.jaxpr
    while len(jaxpr.eqns) == 1 and jaxpr.eqns[0].primitive.name in ("jit", "pjit"):
        jaxpr = jaxpr.eqns[0].params["jaxpr"].jaxpr
    if len(jaxpr.eqns) != 1 or jaxpr.eqns[0].primitive.name != "shard_map":
        return frozenset()
    body = jaxpr.eqns[0]
    given = {id(v): i for i, v in enumerate(jaxpr.invars)}
    mapped = [(given[id(outer)], v) for spec, v, outer in zip(body.params["in_specs"], body.params["jaxpr"].invars,
                                                                body.invars)
              if id(outer) in given and len(spec) >= 1 and spec[0] is not None]
    if mapped and all(getattr(v.aval, "shape", (0,))[:1] == (1,) for _, v in mapped):
        return frozenset(i for i, _ in mapped)
    return frozenset()


class _Mapped(NamedTuple):
    """A step that is one ``shard_map`` over several devices: its equation, and the ``in_specs``
    of the step's own arguments, in their order (the arrays the step closes over left out)."""
    eqn: Any
    specs: tuple[Any, ...]


def _per_device_body(traced: Any) -> _Mapped | None:
    """The ``shard_map`` equation that is the whole step (``jax.pmap`` traces to one in this jax),
    over several devices, or None. Its operands are the step's arguments, each once and in order,
    and the arrays the step closes over (a concrete ``jnp.asarray`` learning rate: constants of the
    jit around it, or literals), which are no argument and are left out of ``specs``."""
    jaxpr = traced.jaxpr
    while len(jaxpr.eqns) == 1 and jaxpr.eqns[0].primitive.name in ("jit", "pjit"):  # pmap's own jit
        jaxpr = jaxpr.eqns[0].params["jaxpr"].jaxpr
    if len(jaxpr.eqns) != 1 or jaxpr.eqns[0].primitive.name != "shard_map":
        return None
    body = jaxpr.eqns[0]
    if getattr(body.params.get("mesh"), "size", 1) <= 1 or len(jaxpr.invars) != len(traced.jaxpr.invars):
        return None
    given = {id(v): i for i, v in enumerate(jaxpr.invars)}
    closed = {id(v) for v in jaxpr.constvars}
    specs, order = [], []
    for var, spec in zip(body.invars, body.params["in_specs"]):
        if id(var) in given:
            specs.append(spec)
            order.append(given[id(var)])
        elif not (id(var) in closed or isinstance(var, jex_core.Literal)):
            return None  # an operand computed before the map: the body is not the whole step
    return _Mapped(body, tuple(specs)) if order == list(range(len(jaxpr.invars))) else None


def _body_shards(body: _Mapped, plan: ShardingPlan) -> tuple[int, ...]:
    """Per argument leaf of a mapped step, the shards its ``in_specs`` entry splits it into: a
    pmap's mapped array over its devices (its leading axis), an unmapped one (``P()``) whole."""
    shards = []
    for spec in body.specs:
        axes = [a for entry in spec if entry is not None for a in (entry if isinstance(entry, tuple) else (entry,))]
        shards.append(math.prod(int(plan.sizes.get(str(a), 1)) for a in axes))
    return tuple(shards)


def _per_device_parameters(prepared: UserStep, body: _Mapped, plan: ShardingPlan) -> dict[str, int]:
    """Parameter counts per module on one device of a mapped step: each leaf over the shards its
    ``in_specs`` entry splits it into (a pmap's replicated state: its leading device axis)."""
    shards: dict[str, int] = {}
    for module, split in zip(prepared.owners, _body_shards(body, plan)):
        if module is not None and module not in shards:
            shards[module] = split
    return {module: count // shards.get(module, 1) for module, count in prepared.param_paths.items()}


def _along(plan: ShardingPlan) -> str:
    """The mesh's axes in words, not to be read as a size (a pmap's axis is often named ``batch``):
    ``along axis 'batch'``, ``along axes 'data' (2) x 'model' (4)``."""
    if len(plan.sizes) == 1:
        return f"along axis '{next(iter(plan.sizes))}'"
    return "along axes " + " x ".join(f"'{k}' ({v})" for k, v in plan.sizes.items())


def _mesh(call: Any, prepared: UserStep) -> Any:
    """The mesh of several devices the step is sharded over (its arguments' shardings: `_given`, else
    a ``with_sharding_constraint``'s inside it: a step whose only sharding is a constraint is
    partitioned all the same), or None."""
    shardings = _given(call, prepared)
    if call is not None:
        shardings += _constraints(call.params.get("jaxpr"))
    for sharding in shardings:
        mesh = getattr(sharding, "mesh", None)
        if isinstance(mesh, AbstractMesh) and mesh.size > 1:  # `jax.set_mesh`'s: its devices are the context's
            context = jax.sharding.get_mesh()
            mesh = context if isinstance(context, Mesh) and context.axis_names == mesh.axis_names else None
        if isinstance(mesh, Mesh) and mesh.size > 1:
            return mesh
    return None


def _given(call: Any, prepared: UserStep) -> list[Any]:
    """Per flattened argument leaf, the ``NamedSharding`` the step gives it, or None: its jit's
    ``in_shardings`` entry, else the leaf's own (a placed array's), else the one a jit nested in the
    step gives it where it passes the leaf on as it is (`_nested`: the user's ``jax.jit(...,
    in_shardings=...)`` or ``nnx.jit``'s inside the function xla_cost traces for an NNX step)."""
    leaves = jax.tree.leaves(prepared.args)
    jitted = list(call.params.get("in_shardings", ())) if call is not None else []
    nested = _nested(call.params["jaxpr"]) if call is not None else {}
    given = []
    for i, leaf in enumerate(leaves):
        found = (jitted[i] if i < len(jitted) else None, getattr(leaf, "sharding", None), nested.get(i))
        given.append(next((s for s in found if getattr(s, "spec", None) is not None), None))
    return given


def _nested(jaxpr: Any) -> dict[int, Any]:
    """Of the inputs of ``jaxpr`` (by position), those a jit equation in it (or nested in such a jit)
    receives as they are, with the ``NamedSharding`` its ``in_shardings`` gives them (the first)."""
    found: dict[int, Any] = {}

    def walk(inner: Any, position: Mapping[Any, int]) -> None:
        for eqn in getattr(inner, "jaxpr", inner).eqns:
            if eqn.primitive.name not in ("jit", "pjit"):
                continue
            body = eqn.params["jaxpr"]
            passed = {}
            for var, sharding, inside in zip(eqn.invars, eqn.params.get("in_shardings", ()), body.jaxpr.invars):
                at = position.get(var) if not isinstance(var, jex_core.Literal) else None
                if at is None:
                    continue
                passed[inside] = at
                if getattr(sharding, "spec", None) is not None:
                    found.setdefault(at, sharding)
            walk(body, passed)

    walk(jaxpr, {v: i for i, v in enumerate(getattr(jaxpr, "jaxpr", jaxpr).invars)})
    return found


def _constraints(jaxpr: Any) -> list[Any]:
    """The shardings of the ``sharding_constraint`` equations of ``jaxpr`` and the jaxprs it nests."""
    found: list[Any] = []
    for eqn in getattr(getattr(jaxpr, "jaxpr", jaxpr), "eqns", ()):
        if eqn.primitive.name == "sharding_constraint":
            found.append(eqn.params.get("sharding"))
        for value in eqn.params.values():
            for item in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(getattr(item, "jaxpr", item), "eqns"):
                    found += _constraints(item)
    return found


def _stacks(traced: Any) -> dict[str, int]:
    """The name stacks of the step's forward and backward equations (under a ``jvp`` or a
    ``transpose``), nested jaxprs' included, with how many equations carry each; in a step
    that differentiates nothing (an eval step: the model's forward alone), every equation's."""
    found: dict[str, int] = {}
    every: dict[str, int] = {}

    def walk(jaxpr: Any, prefix: str) -> None:
        for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
            stack = join_stack(prefix, str(eqn.source_info.name_stack))
            every[stack] = every.get(stack, 0) + 1
            if classify_pass(stack) is not None:
                found[stack] = found.get(stack, 0) + 1
            for value in eqn.params.values():
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    if hasattr(getattr(item, "jaxpr", item), "eqns"):
                        walk(item, stack)

    walk(traced, "")
    return found or every


def _roots(stacks: Mapping[str, int], prepared: UserStep) -> tuple[str, ...]:
    """Name-stack entries that stand for the whole model: the step's model classes' names
    and `model_roots` of the forward and backward stacks."""
    return tuple(dict.fromkeys([*prepared.roots, *model_roots(stacks, prepared.param_paths)]))


def _matched(stacks: Mapping[str, int], prepared: UserStep) -> int:
    """How many forward and backward equations have a name stack that resolves to a module
    holding parameters (`module_path`, `owner`)."""
    modules = with_ancestors(prepared.param_paths)
    tree, roots = module_tree(prepared.param_paths), _roots(stacks, prepared)
    return sum(n for stack, n in stacks.items() if owner(module_path(stack, roots, tree), modules) != REMAINDER)


def _aligned(prepared: UserStep, stacks: Mapping[str, int]) -> UserStep:
    """The step with its parameters' module paths matched to its name stacks: of the
    leading components every parameter's path shares (the model's position ``0/`` in an
    NNX state of ``(model, optimizer)``, a key of the user's own above the model's tree,
    ``{'params': {'model': ...}}``), as many left out as make the most equations' stacks
    resolve to a module (`UserStep.stripped`); none where leaving some out matches no more.
    (A Linen variables dict under ``params`` is looked into before: `prepare_step`.)"""
    paths = [path.split("/") for path in prepared.param_paths if path]
    if prepared.kind != "jax" or not paths or not stacks:
        return prepared
    shared = 0
    while all(len(p) > shared + 1 for p in paths) and len({tuple(p[:shared + 1]) for p in paths}) == 1:
        shared += 1
    if not shared:
        return prepared
    best, most = prepared, _matched(stacks, prepared)
    for strip in range(1, shared + 1):
        candidate = prepared.stripped(strip)
        matched = _matched(stacks, candidate)
        if matched > most:
            best, most = candidate, matched
    return best


def _parts(counted: JaxprCount, notes: list[str]) -> dict[str, JaxprCount]:
    # a while loop of unknown trip count holds each part's work once: said on every part it holds work of
    parts = {p: dataclasses.replace(counted.part(p), notes=tuple(unknown_loop_notes(counted.loops, counted.equations,
                                                                                    p))) for p in phases.STEP_PARTS}
    loose = [e for e in counted.equations if e.part is None]
    if loose:
        other = parts[OTHER]
        parts[OTHER] = dataclasses.replace(other, equations=(*other.equations, *loose))
        flops = sum(e.cost.flops for e in loose)
        notes.append(f"{len(loose)} equation groups ({flops:,} FLOP) could not be classified: counted in other")
    return parts


@dataclasses.dataclass(frozen=True)
class _Split:
    """How a sharded step's work divides over its devices: the batch's shards
    (forward, backward, other), each module's share of its parameters on one device (the
    update), each argument leaf's shards (the memory) and the most shards of a parameter
    (tensor parallelism)."""

    devices: int = 1
    batch: int = 1
    share: Mapping[str, float] = dataclasses.field(default_factory=dict)
    leaves: tuple[int, ...] = ()
    tensor: int = 1

    def compute(self) -> int:
        """Shards of the forward and backward work: the batch's, times the parameters' (tensor
        parallelism), at most every device."""
        return min(self.devices, self.batch * self.tensor)

    def update(self, part: JaxprCount, key: str) -> float:
        """The update's figure on one device: each module's work times the share of its parameters
        one device holds (a replicated parameter's update runs whole on every device, a sharded
        one's on its shard)."""
        return sum(getattr(e.cost, key) * self.share.get(e.owner or "", 1.0) for e in part.equations)


def _split(call: Any, prepared: UserStep, plan: ShardingPlan | None) -> _Split:
    if plan is None:
        return _Split()
    leaves = jax.tree.leaves(prepared.args)
    batch, tensor, held, whole = 1, 1, {}, {}
    shards: list[int] = []
    for i, (leaf, sharding) in enumerate(zip(leaves, _given(call, prepared))):
        spec = getattr(sharding, "spec", None)
        if spec is None:
            shards.append(1)
            continue
        axes = [a for entry in spec if entry is not None for a in (entry if isinstance(entry, tuple) else (entry,))]
        shards.append(math.prod(int(plan.sizes.get(str(a), 1)) for a in axes))
        module = prepared.owners[i] if i < len(prepared.owners) else None
        if module is not None and prepared.param_paths.get(module):
            size = math.prod(getattr(leaf, "shape", ()))
            whole[module] = whole.get(module, 0) + size
            held[module] = held.get(module, 0) + size / shards[-1]
            tensor = max(tensor, shards[-1])
        elif module is None:
            batch = max(batch, shards[-1])
    share = {m: held[m] / whole[m] for m in whole if whole[m]}
    return _Split(plan.devices, batch, share, tuple(shards), tensor)


def _costs(counted: JaxprCount, parts: Mapping[str, JaxprCount], compiled: xla.CompiledPhase | None,
           plan: ShardingPlan | None, modules: tuple[str, ...], roots: tuple[str, ...], notes: list[str],
           split: _Split = _Split(), padded: Sequence[tuple[frozenset[str], float]] = ()) -> dict[str, PhaseCosts]:
    """Each part's figures (the jaxpr's; per device on a mesh), grad, and the whole step (XLA's);
    ``padded``: the routed experts whose capacity padding is no model FLOP (`UserStep.padded`)."""
    # the jaxpr's count is shared over the devices the step is split over; a mapped body's is one device's
    step, found = phase_costs("train_step", Program(counted, compiled, split.devices), plan, modules, roots,
                              padded=padded)
    notes += found
    out: dict[str, PhaseCosts] = {}
    for name in phases.STEP_PARTS:
        shown_over = split.compute() if split.devices > 1 else None  # (`_per_device`, below)
        costs, found = phase_costs(name, Program(parts[name], None, shown_over=shown_over), None, modules, roots,
                                   padded=padded)
        notes += found
        if split.devices > 1:
            costs = _per_device(costs, split, parts[name] if name == UPDATE else None)
        if compiled is not None and plan is not None:
            rows, _ = collective_rows(compiled, plan, modules, roots, select=_selector(name, counted))
            costs = dataclasses.replace(costs, communication=rows)
        out[name] = costs
    out["grad"] = PhaseCosts.derive(STEP_GRAD, out)
    out["train_step"] = _step_per_device(step, out, compiled is not None) if split.devices > 1 else step
    order = (FORWARD, BACKWARD, "grad", UPDATE, OTHER, "train_step")
    return {name: out[name] for name in order}


_PER_DEVICE = ("flops", "transcendentals", "model_flops", "hardware_flops", "attention_flops", "matmul_flops",
               "matmul_bytes", "float8_flops", "conversion_flops")
"""The figures of a part that are the jaxpr's whole step, shown per device on a mesh."""


def _per_device(costs: PhaseCosts, split: _Split, update: JaxprCount | None) -> PhaseCosts:
    """One device's share of a part: the update's by its modules' parameter shards, the rest by
    `_Split.compute`."""
    values = {key: getattr(costs, key) for key in _PER_DEVICE}
    out = {k: None if v is None else round(v / split.compute()) for k, v in values.items()}
    if update is not None:
        for key in ("flops", "transcendentals"):
            if values[key] is not None:
                out[key] = round(split.update(update, key))
        out["model_flops"] = out["hardware_flops"] = out["flops"]
    return dataclasses.replace(costs, **out)


_XLA_FIGURES = ("flops", "transcendentals", "model_flops", "hardware_flops")
"""The figures of a compiled step that are XLA's, already one device's (unless XLA gave none: `PhaseCosts.sources`)."""


def _step_per_device(step: PhaseCosts, parts: Mapping[str, PhaseCosts], compiled: bool) -> PhaseCosts:
    """The whole step on a mesh on the parts' basis, one device's: each figure counted from the jaxpr
    (every one without a compile; the matmul, attention and conversion figures beside XLA's) is the
    parts' per-device sum, as they add up to the jaxpr's count of the step; XLA's stay."""
    out = {}
    for key in _PER_DEVICE:
        xla_figure = key in _XLA_FIGURES and step.sources.get("flops" if key.endswith("_flops") else key) != "jaxpr"
        if compiled and xla_figure:
            continue
        values = [getattr(parts[name], key) for name in phases.STEP_PARTS]
        out[key] = None if None in values else sum(values)
    return dataclasses.replace(step, **out)


def _selector(part: str, counted: JaxprCount) -> Any:
    """Whether a compiled collective (by its ``op_name``) belongs to ``part``: the part of the jaxpr
    equations at its name stack (where several parts have one there, the one with the most work: a
    gradients' pmean beside a metrics' pmean), else its autodiff pass; a collective XLA combined
    from several goes to the part most of them are in, and between parts with as many, to the one
    with the most work (a gradient's all-reduce combined with the loss's goes to the gradient's)."""
    by_stack: dict[tuple[str, str], dict[str | None, int]] = {}
    for e in counted.equations:
        found = by_stack.setdefault((e.name_stack, e.primitive), {})
        found[e.part] = found.get(e.part, 0) + e.cost.flops

    def part_of(name: str) -> tuple[str, int]:
        """A member's part, and the work of its equations in that part."""
        entries = split_name_stack(name)
        stack, primitive = "/".join(entries[:-1]), entries[-1] if entries else ""
        found = {k: v for k, v in by_stack.get((stack, primitive), {}).items() if k is not None}
        if not found:
            return classify_pass(name) or OTHER, 0
        part = max(found, key=found.__getitem__)
        return part, found[part]

    def select(op_name: str) -> bool:
        entries = split_name_stack(op_name)
        while entries and (entries[0].startswith("jit(") or entries[0] in _MAPPED_SCOPES):
            entries = entries[1:]
        rest = "/".join(entries)
        # a combined collective (XLA's combiner) names its parts: "(a/b/dot_general:c/d/reduce_sum)"
        names = rest[1:-1].split(":") if rest.startswith("(") and rest.endswith(")") else [rest]
        members = [part_of(name) for name in names]
        found = [p for p, _ in members]
        work = {p: sum(w for q, w in members if q == p) for p in found}
        # most members; between as many, most work (a gradient's all-reduce beside the loss's)
        return max(dict.fromkeys(found), key=lambda p: (found.count(p), work[p])) == part

    return select


_MAPPED_SCOPES = frozenset({"shard_map", "pmap", "xla_pmap"})
"""Entries of an HLO ``op_name`` that jax adds for a mapped body, not part of the jaxpr's name stacks."""
