"""`analyze`: one training step's costs, from compiled XLA and from the jaxpr."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import optax

from xla_cost import xla
from xla_cost.attribution import attribute_step, module_path
from xla_cost.errors import CostAnalysisUnavailableError, InputError
from xla_cost.interpret import JaxprCount, count_jaxpr
from xla_cost.report import LayerCosts, MemoryStats, PhaseCosts, Report
from xla_cost import timing
from xla_cost.timing import Timing
from xla_cost.workload import LossFn, OutputSelector, Workload, build_workload

__all__ = ["analyze", "COMPILED_PHASES", "COUNTERS", "COLLECTIVES"]

COMPILED_PHASES: tuple[str, ...] = ("forward", "grad", "update", "train_step")
"""The phases that are compiled as programs of their own."""


def _count(workload: Workload, phase: str) -> JaxprCount:
    with workload.tracing():
        jaxpr = jax.make_jaxpr(workload.phase_fn(phase))(*workload.phase_args(phase))
    # The optimizer's arithmetic has no module on its name stack: follow the data.
    owners = workload.input_owners(phase) if phase == "update" else None
    return count_jaxpr(jaxpr, owners=owners)


def _compile(workload: Workload, phase: str) -> xla.CompiledPhase:
    with workload.tracing():
        return xla.compile_phase(workload.phase_fn(phase), workload.phase_args(phase))


def _describe_loops(counted: JaxprCount) -> str:
    loops = counted.repeated_loops
    kinds = ", ".join(
        f"{loop.kind} x{loop.trip_count} at {loop.name_stack or '<top>'}" for loop in loops[:3]
    )
    return kinds + (f" and {len(loops) - 3} more" if len(loops) > 3 else "")


def _best(
    phase: str, key: str, xla_value: int | None, counted: JaxprCount, notes: list[str]
) -> tuple[int | None, str, bool]:
    """The best figure for ``key`` of one phase: (value, source, loop_corrected).

    XLA's figure stands unless its program has loops that run more than once:
    XLA counts a loop body once, so the iterations it misses (the jaxpr count
    with trip counts minus the jaxpr count with every body once) are added.
    Without an XLA figure, the jaxpr count stands in when it is complete.
    """
    true, once = getattr(counted.total, key), getattr(counted.total_once, key)
    if xla_value is None:
        if counted.unsupported:
            notes.append(
                f"{phase}: {key} unknown: XLA gave no figure and the jaxpr has primitives "
                f"without a rule ({', '.join(sorted(counted.unsupported))}); "
                f"the counted part is {true:,}"
            )
            return None, "unknown", False
        return true, "jaxpr", False
    extra = true - once
    if extra == 0:
        return xla_value, "xla", False
    if abs(xla_value - true) < abs(xla_value - once):
        notes.append(
            f"{phase}: XLA's {key} already include the loop iterations "
            f"({_describe_loops(counted)}): it unrolled them; no correction"
        )
        return xla_value, "xla", False
    notes.append(
        f"{phase}: XLA counts a loop body once ({_describe_loops(counted)}); "
        f"{key} corrected from XLA's {xla_value:,} to {xla_value + extra:,}"
    )
    return xla_value + extra, "xla+loops", True


def _phase_costs(
    phase: str, compiled: xla.CompiledPhase | None, counted: JaxprCount, notes: list[str]
) -> PhaseCosts:
    """The best figures of one phase, with XLA's raw and the jaxpr's beside them."""
    total = counted.total
    if compiled is None:  # counter="jaxpr"
        if counted.recomputed.flops:
            notes.append(
                f"{phase}: includes {counted.recomputed.flops:,} FLOP that jax.checkpoint "
                "recomputes; a compiler with memory to spare may remove them (XLA on the CPU does)"
            )
        values, sources = {}, {}
        for key in ("flops", "transcendentals"):
            values[key], sources[key], _ = _best(phase, key, None, counted, notes)
        return PhaseCosts(
            flops=values["flops"],
            transcendentals=values["transcendentals"],
            bytes_accessed=None,
            memory=MemoryStats(None, None, None),
            jaxpr_flops=total.flops,
            jaxpr_transcendentals=total.transcendentals,
            conversion_flops=_conversions(counted),
            sources=sources,
        )
    costs, memory = compiled.costs, compiled.memory
    values, sources, corrected = {}, {}, False
    for key in ("flops", "transcendentals"):
        value, source, fixed = _best(phase, key, getattr(costs, key), counted, notes)
        if source == "jaxpr":
            reasons = "; ".join(costs.unknown_reasons) or "no figure"
            notes.append(f"{phase}: XLA gave no {key} figure ({reasons}); using the jaxpr count ({value:,})")
        values[key], sources[key] = value, source
        corrected = corrected or fixed
    recomputed = counted.recomputed.flops
    if recomputed and costs.flops is not None:
        removed = total.flops - costs.flops > recomputed / 2
        notes.append(
            f"{phase}: jax.checkpoint recomputes {recomputed:,} FLOP of the forward pass in "
            "the backward pass (in jaxpr_flops); "
            + ("XLA's compiled program removed the recomputation (flops is XLA's: no recompute)"
               if removed else "XLA's compiled program keeps it")
        )
    if corrected and costs.bytes_accessed is not None:
        notes.append(
            f"{phase}: bytes_accessed is XLA's raw figure, which counts each loop body once"
        )
    return PhaseCosts(
        flops=values["flops"],
        transcendentals=values["transcendentals"],
        bytes_accessed=costs.bytes_accessed,
        memory=MemoryStats(memory.argument_bytes, memory.output_bytes, memory.temp_bytes),
        xla_flops=costs.flops,
        xla_transcendentals=costs.transcendentals,
        jaxpr_flops=total.flops,
        jaxpr_transcendentals=total.transcendentals,
        conversion_flops=_conversions(counted),
        loop_corrected=corrected,
        sources=sources,
    )


def _difference(grad: PhaseCosts, forward: PhaseCosts) -> PhaseCosts:
    def sub(a: int | None, b: int | None) -> int | None:
        return None if a is None or b is None else a - b

    def source(key: str) -> str:
        pair = {grad.sources.get(key, "xla"), forward.sources.get(key, "xla")}
        for worst in ("unknown", "xla+loops", "jaxpr"):
            if worst in pair:
                return worst
        return "xla"

    return PhaseCosts(
        sources={key: source(key) for key in ("flops", "transcendentals")},
        flops=sub(grad.flops, forward.flops),
        transcendentals=sub(grad.transcendentals, forward.transcendentals),
        bytes_accessed=sub(grad.bytes_accessed, forward.bytes_accessed),
        memory=MemoryStats(None, None, None),
        xla_flops=sub(grad.xla_flops, forward.xla_flops),
        xla_transcendentals=sub(grad.xla_transcendentals, forward.xla_transcendentals),
        jaxpr_flops=sub(grad.jaxpr_flops, forward.jaxpr_flops),
        jaxpr_transcendentals=sub(grad.jaxpr_transcendentals, forward.jaxpr_transcendentals),
        conversion_flops=sub(grad.conversion_flops, forward.conversion_flops),
        loop_corrected=grad.loop_corrected or forward.loop_corrected,
    )


def _roots(workload: Workload, counted: Mapping[str, JaxprCount]) -> tuple[str, ...]:
    """Name-stack entries that stand for the whole model, to strip from module paths.

    A module's root is its class name. An apply function that calls a Linen
    ``model.apply`` puts that model's class name first on every name stack,
    while its parameter paths start at the model's children: the first entries
    of the stacks that are not top-level modules are such roots.
    """
    if workload.kind != "function":
        return (workload.root_name,)
    top = {path.split("/")[0] for path in workload.param_paths if path}
    firsts = {
        module_path(e.name_stack).split("/")[0]
        for phase in ("forward", "grad") for e in counted[phase].equations
    }
    return (workload.root_name, *sorted(f for f in firsts if f and f not in top))


def _layers(
    workload: Workload, counted: Mapping[str, JaxprCount], depth: int | None
) -> tuple[LayerCosts, ...]:
    rows = attribute_step(
        counted["forward"].equations, counted["grad"].equations, counted["update"].equations,
        workload.param_paths, root=_roots(workload, counted), depth=depth,
        known_modules=workload.module_paths,
    )
    return tuple(
        LayerCosts(
            path=row.path,
            parameters=row.parameters,
            forward_flops=row.forward.flops,
            backward_flops=row.backward.flops,
            forward_transcendentals=row.forward.transcendentals,
            backward_transcendentals=row.backward.transcendentals,
            update_flops=row.update.flops,
            update_transcendentals=row.update.transcendentals,
            trip_count=row.trip_count,
        )
        for row in rows
    )


def _time(
    workload: Workload, phases: Mapping[str, PhaseCosts], dtype: str,
    peak_tflops: float | None, peak_bandwidth: float | None,
    executables: Mapping[str, Any],
) -> Timing:
    try:
        peak = timing.device_peak(peak_tflops=peak_tflops, peak_bandwidth=peak_bandwidth)
    except ValueError as exc:
        raise InputError(
            "a device with a known peak, or --peak-tflops and --peak-bandwidth",
            xla.device_kind(), str(exc).rsplit(". ", 1)[-1],
        ) from exc
    memory = {
        p: (phases[p].memory.output_bytes, phases[p].memory.temp_bytes) for p in executables
    }
    try:
        return timing.time_workload(
            workload,
            {p: c.flops for p, c in phases.items()},
            {p: c.bytes_accessed for p, c in phases.items()},
            dtype=dtype, peak=peak, executables=executables, compiled_memory=memory,
        )
    except Exception as exc:  # noqa: BLE001 - the counts must survive a failed run
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return timing.Timing(
            xla.device_kind(), peak, dtype, {}, {}, None,
            skipped=f"running the step failed: {type(exc).__name__}: {first}",
        )


def _conversions(counted: JaxprCount) -> int:
    return sum(e.cost.flops for e in counted.equations if e.primitive == "convert_element_type")


def _dtype_name(workload: Workload) -> str:
    leaves = jax.tree.leaves(workload.outputs) or jax.tree.leaves(workload.params)
    return str(leaves[0].dtype) if leaves else "unknown"


def _param_dtype_name(workload: Workload) -> str:
    names = sorted({str(x.dtype) for x in jax.tree.leaves(workload.params)})
    return "/".join(names) or "unknown"


def _precision_note(compute: str, params: str, phases: Mapping[str, PhaseCosts], backend: str) -> str | None:
    if compute == params:
        return None
    conversions = phases["train_step"].conversion_flops or 0
    note = (
        f"mixed precision: parameters {params}, computation {compute}; FLOP are the same "
        f"arithmetic as in {params} plus dtype conversions ({conversions:,} in the train "
        "step's jaxpr); where the backend computes in bfloat16, bytes_accessed counts its "
        "activations at their narrower width"
    )
    if backend == "cpu":
        note += (
            ". On the CPU, XLA emulates bfloat16 arithmetic in float32 (it adds converts, "
            "counted as FLOP, and its bytes_accessed grows): compile for a GPU or TPU for "
            "the bytes a bfloat16 step moves"
        )
    return note


COLLECTIVES: frozenset[str] = frozenset(
    {
        "psum", "pmax", "pmin", "psum_scatter", "reduce_scatter", "all_gather", "all_to_all",
        "ppermute", "pbroadcast", "psum_invariant", "all_reduce",
    }
)
"""Primitives that communicate between the devices of a mesh axis."""


def _collectives(counted: JaxprCount) -> dict[str, int]:
    """How often each collective primitive runs in one step (from its jaxpr)."""
    out: dict[str, int] = {}
    for e in counted.equations:
        if e.primitive in COLLECTIVES:
            out[e.primitive] = out.get(e.primitive, 0) + e.executions
    return dict(sorted(out.items()))


def _collective_note(collectives: Mapping[str, int], counted: JaxprCount) -> str:
    flops = sum(e.cost.flops for e in counted.equations if e.primitive in COLLECTIVES)
    names = ", ".join(f"{k} x{v}" for k, v in collectives.items())
    return (
        f"collectives in the train step: {names}; on a group of one device they move no "
        f"data, but XLA counts an all-reduce as one add per element ({flops:,} FLOP of the "
        "train step, in the figures)"
    )


def _check_options(
    *, depth: Any, dtype: Any, peak_tflops: Any, peak_bandwidth: Any
) -> None:
    """The option checks of `analyze` (the CLI relies on them too)."""
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise InputError(
            "depth None or an integer >= 1", repr(depth), "Use depth=1 (--depth 1) for top-level modules."
        )
    if dtype is not None:
        try:
            ok = isinstance(dtype, str) and jax.numpy.issubdtype(jax.numpy.dtype(dtype), jax.numpy.inexact)
        except TypeError:
            ok = False
        if not ok:
            raise InputError(
                "dtype as the name of a floating-point dtype (float32, bfloat16, float16)",
                repr(dtype), "Use e.g. dtype='bfloat16' (--dtype bfloat16).",
            )
    for flag, value in (("peak_tflops", peak_tflops), ("peak_bandwidth", peak_bandwidth)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                or value == float("inf"):
            raise InputError(
                f"{flag} a positive number", repr(value),
                f"Give the device's peak, e.g. {flag}={989 if flag == 'peak_tflops' else 3.35e12} "
                f"(--{flag.replace('_', '-')} {989 if flag == 'peak_tflops' else 3.35e12}).",
            )


COUNTERS: tuple[str, ...] = ("xla", "jaxpr")
"""``xla``: compile every phase and correct XLA's figures for loops; ``jaxpr``:
count the jaxprs alone, without compiling (fast; no bytes or memory)."""


def analyze(
    model: Any,
    inputs: Any,
    *,
    optimizer: str | optax.GradientTransformation,
    loss: LossFn | None = None,
    targets: Any | None = None,
    params: Any | None = None,
    per_layer: bool = False,
    depth: int | None = None,
    compile: bool = True,  # noqa: A002 - the natural name for the switch
    time: bool = False,  # noqa: A002
    peak_tflops: float | None = None,
    peak_bandwidth: float | None = None,
    name: str | None = None,
    config: Mapping[str, Any] | None = None,
    dtype: str | None = None,
    call_kwargs: Mapping[str, Any] | None = None,
    method: str | Callable[..., Any] | None = None,
    axis_names: Sequence[str] | str | None = None,
    output: OutputSelector | None = None,
) -> Report:
    """Counts the FLOP, bytes and memory of one training step of ``model``.

    Each phase (``forward``, ``grad``, ``update``, ``train_step``) is traced to a
    jaxpr and counted with `xla_cost.rules`; unless ``compile=False`` it is also
    jitted, lowered and compiled for the default backend, and its
    ``cost_analysis()`` and ``memory_analysis()`` are read. Nothing is executed
    and nothing the size of the model is allocated (parameters and optimizer
    state come from ``jax.eval_shape``).

    The headline figure of a phase (``flops``) is XLA's, except where the
    program has loops (``lax.scan``, ``nn.scan``, ``fori_loop``): XLA counts a
    loop body once, so the iterations it misses, counted from the jaxpr, are
    added and the phase is marked ``loop_corrected`` (XLA's raw figure stays in
    ``xla_flops``). ``backward`` is ``grad - forward``: the gradient computation
    as it runs inside a real ``grad`` program, where XLA drops the
    input-gradient of the first layer.

    Args:
      model: a ``flax.linen.Module`` or ``flax.nnx.Module``, or a plain function
        ``apply(params, inputs) -> outputs`` together with ``params``.
      inputs: an array or ``jax.ShapeDtypeStruct`` (or a pytree of them) with the
        batch on the leading axis.
      optimizer: an ``optax.GradientTransformation`` or one of ``sgd``,
        ``momentum``, ``nesterov``, ``adam``, ``adamw``, ``rmsprop``, ``adagrad``,
        ``lion``, ``adafactor``, ``lamb``.
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
      compile: False counts the jaxprs alone (``--counter jaxpr``): much faster
        on big models, no ``bytes_accessed`` and no memory figures.
      time: also run every phase on real random arrays on the default device
        and time it (`xla_cost.timing`): seconds, FLOP/s, MFU, a roofline
        prediction, the forward/backward/update split. Never changes a count;
        a step too big for the device is reported as skipped.
      peak_tflops, peak_bandwidth: the device's peak FLOP/s (in TFLOP/s) and
        memory bandwidth (bytes/s) for MFU and the roofline, replacing the
        built-in table (`xla_cost.timing.PEAKS`) or the CPU measurement.
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

    Returns:
      A `Report`.

    Raises:
      InputError: the model, inputs, loss, optimizer or depth cannot be used.
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
    _check_options(depth=depth, dtype=dtype, peak_tflops=peak_tflops, peak_bandwidth=peak_bandwidth)
    workload, optimizer_name = build_workload(
        model, inputs, optimizer=optimizer, loss=loss, targets=targets, params=params,
        call_kwargs=call_kwargs, method=method, axis_names=axis_names, output=output,
    )
    compiled: dict[str, xla.CompiledPhase | None] = {}
    counted: dict[str, JaxprCount] = {}
    for phase in COMPILED_PHASES:
        counted[phase] = _count(workload, phase)
        compiled[phase] = _compile(workload, phase) if compile else None
        costs = compiled[phase].costs if compile else None
        if costs is not None and (
            costs.flops is None and costs.transcendentals is None and costs.bytes_accessed is None
        ):
            raise CostAnalysisUnavailableError(
                "a backend whose compiled programs have a cost analysis",
                f"none from backend {xla.backend_name()!r} for phase {phase!r} "
                f"({'; '.join(costs.unknown_reasons)})",
                "Run on the CPU (JAX_PLATFORMS=cpu) or a GPU, or count the jaxpr "
                "alone (--counter jaxpr, analyze(..., compile=False)).",
            )

    notes: list[str] = list(workload.notes)
    if not compile:
        notes.append(
            "counted from the jaxpr alone (counter jaxpr): no bytes_accessed or memory; "
            "compile for those (counter xla)"
        )
    phases = {p: _phase_costs(p, compiled[p], counted[p], notes) for p in COMPILED_PHASES}
    phases["backward"] = _difference(phases["grad"], phases["forward"])

    unsupported: dict[str, int] = {}
    for phase in COMPILED_PHASES:
        notes += [f"{phase}: {n}" for n in counted[phase].notes]
        for prim, n in counted[phase].unsupported.items():
            unsupported[prim] = max(unsupported.get(prim, 0), n)

    compute_dtype = dtype or _dtype_name(workload)
    param_dtype = _param_dtype_name(workload)
    precision = _precision_note(compute_dtype, param_dtype, phases, xla.backend_name())
    if precision:
        notes.insert(0, precision)
    timing = None
    if time:
        executables = {p: c.executable for p, c in compiled.items() if c is not None}
        timing = _time(workload, phases, compute_dtype, peak_tflops, peak_bandwidth, executables)
        if timing.skipped:
            notes.append(f"timing skipped: {timing.skipped}")
    collectives = _collectives(counted["train_step"])
    if collectives:
        notes.append(_collective_note(collectives, counted["train_step"]))
    first = jax.tree.leaves(workload.inputs)[0]
    return Report(
        model=name or workload.root_name,
        config=dict(config or {}),
        batch_size=int(first.shape[0]),
        optimizer=optimizer_name,
        dtype=compute_dtype,
        param_dtype=param_dtype,
        backend=xla.backend_name(),
        jax_version=jax.__version__,
        parameters=workload.parameters,
        phases=phases,
        layers=_layers(workload, counted, depth) if per_layer or depth else None,
        unsupported=unsupported,
        notes=tuple(dict.fromkeys(notes)),
        counter="xla" if compile else "jaxpr",
        depth=depth,
        timing=timing,
        collectives=collectives,
    )
