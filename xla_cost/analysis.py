"""`analyze`: one training step's costs, from compiled XLA and from the jaxpr."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import concurrent.futures
import contextlib
import dataclasses
import os
import warnings

import jax
import optax

from xla_cost import phases, xla
from xla_cost.choices import COUNTERS
from xla_cost.attribution import REMAINDER, attribute_step, check_depth, module_path
from xla_cost.errors import CostAnalysisUnavailableError, InputError
from xla_cost.interpret import EqnCount, JaxprCount, count_jaxpr
from xla_cost.report import SOURCED, Collective, LayerCosts, MemoryStats, PhaseCosts, Report
from xla_cost import sharding as _sharding
from xla_cost.store import Store, analysis_key, environment
from xla_cost import timing as _timing
from xla_cost.timing import Timing
from xla_cost.workload import LossFn, OutputSelector, Workload, build_workload

__all__ = ["analyze", "check_options", "COMPILED_PHASES", "COUNTERS", "COLLECTIVES"]

COMPILED_PHASES: tuple[str, ...] = phases.PROGRAMS
"""The phases that have a program of their own (`xla_cost.phases`):
``train_step`` is compiled only with ``exact_train_step=True``."""


@dataclasses.dataclass(frozen=True)
class _Program:
    """One phase's program: its jaxpr count and, when compiled, XLA's analyses."""

    counted: JaxprCount
    compiled: xla.CompiledPhase | None


COMPILE_THREADS = 2
"""Programs compiled at once. XLA's compiler releases the GIL: while it
compiles one program, the next is traced and counted (Python), and a second
compile overlaps the first, whose codegen leaves cores idle."""


def _jit(workload: Workload, phase: phases.Phase, plan: _sharding.ShardingPlan | None) -> Any:
    """``jax.jit`` of the phase's program; on a mesh with every argument's and
    result's sharding, so that XLA's SPMD partitioner makes the per-device program."""
    fn = workload.phase_fn(phase.name)
    if plan is None:
        return jax.jit(fn)

    def sharded(*args: Any) -> Any:  # a function of its own: jax's trace cache is keyed
        return fn(*args)             # by function, and this trace adds constraints

    return jax.jit(
        sharded,
        in_shardings=tuple(plan.shardings(n) for n in phase.arguments),
        out_shardings=tuple(plan.shardings(n) for n in phase.results),
    )


def _constraints(plan: _sharding.ShardingPlan | None, workload: Workload) -> Any:
    if plan is None:
        return contextlib.nullcontext()
    return plan.constraints(int(jax.tree.leaves(workload.inputs)[0].shape[0]))


def _run_programs(
    workload: Workload, declared: Sequence[phases.Phase], *, compiled: bool, for_timing: bool,
    plan: _sharding.ShardingPlan | None = None,
) -> dict[str, _Program]:
    """Traces each program once; counts its jaxpr and, if asked, compiles the same trace.

    Compiles run in worker threads while the main thread goes on tracing and
    counting the next program. A program that will also be timed is compiled
    as it would run; one that is only analysed at the lowest backend
    optimization level (the same figures, faster).
    """
    options = None if for_timing else xla.COMPILER_OPTIONS
    counted: dict[str, JaxprCount] = {}
    pending: dict[str, concurrent.futures.Future[xla.CompiledPhase]] = {}
    with concurrent.futures.ThreadPoolExecutor(COMPILE_THREADS, "xla-cost-compile") as pool:
        try:
            for phase in declared:
                traced = workload.traced.get(phase.name) if plan is None else None
                if traced is None:
                    with workload.tracing(), _constraints(plan, workload):
                        traced = _jit(workload, phase, plan).trace(*workload.phase_args(phase.name))
                if compiled:
                    pending[phase.name] = pool.submit(
                        xla.compile_phase, traced.lower(), compiler_options=options,
                        executable=for_timing, **({"collectives": True} if plan is not None else {}),
                    )
                # The optimizer's arithmetic has no module on its name stack: follow the data.
                owners = workload.input_owners(phase.name) if phase.follow_data else None
                counted[phase.name] = count_jaxpr(traced.jaxpr, owners=owners)
            results = {name: future.result() for name, future in pending.items()}
        except BaseException:
            for future in pending.values():
                future.cancel()
            raise
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
    return {name: _Program(counted[name], results.get(name)) for name in counted}


def _describe_loops(counted: JaxprCount) -> str:
    loops = counted.repeated_loops
    kinds = ", ".join(
        f"{loop.kind} x{loop.trip_count} at {loop.name_stack or '<top>'}" for loop in loops[:3]
    )
    return kinds + (f" and {len(loops) - 3} more" if len(loops) > 3 else "")


def _best(
    phase: str, key: str, xla_value: int | None, counted: JaxprCount,
    sharded: xla.CompiledPhase | None = None, devices: int = 1,
) -> tuple[int | None, str, str | None]:
    """The best figure for ``key`` of one phase: (value, source, note or None).

    XLA's figure stands unless its program has loops that run more than once:
    XLA counts a loop body once, so the iterations it misses (the jaxpr count
    with trip counts minus the jaxpr count with every body once) are added
    (source ``xla+loops``). Without an XLA figure, the jaxpr count stands in
    when it is complete (``jaxpr``); with primitives that have no rule it is
    ``unknown`` (None), never the counted part.
    """
    true, once = getattr(counted.total, key), getattr(counted.total_once, key)
    if xla_value is None:
        if counted.unsupported:
            return None, "unknown", (
                f"{phase}: {key} unknown: XLA gave no figure and the jaxpr has primitives "
                f"without a rule ({', '.join(sorted(counted.unsupported))}); "
                f"the counted part is {true:,}"
            )
        return true, "jaxpr", None
    extra = true - once
    if extra == 0:
        return xla_value, "xla", None
    if sharded is not None:
        return _best_sharded(phase, key, xla_value, counted, sharded, devices)
    if abs(xla_value - true) < abs(xla_value - once):
        return xla_value, "xla", (
            f"{phase}: XLA's {key} already include the loop iterations "
            f"({_describe_loops(counted)}): it unrolled them; no correction"
        )
    return xla_value + extra, "xla+loops", (
        f"{phase}: XLA counts a loop body once ({_describe_loops(counted)}); "
        f"{key} corrected from XLA's {xla_value:,} to {xla_value + extra:,}"
    )


LIBRARY_TOLERANCE = 0.02
"""How far XLA's FLOP may be from the jaxpr count before a program with
library calls is taken to have left their FLOP out."""


def _library_flops(
    phase: str, value: int | None, source: str, note: str | None, counted: JaxprCount,
    compiled: xla.CompiledPhase, plan: _sharding.ShardingPlan | None,
) -> tuple[int | None, str, str | None]:
    """The FLOP of a program whose compiled HLO hands work to libraries.

    On GPUs XLA's cost analysis counts some custom calls (cuBLAS gemms, cuDNN
    convolutions, fused attention) as nothing or partly (jax issues 16008,
    20184, 22249): a ResNet-50 forward pass reads 1% of its FLOP. When XLA's
    figure is more than `LIBRARY_TOLERANCE` from a complete jaxpr count (which
    counts the same operations before they became library calls, loops
    included), the jaxpr count stands; with primitives that have no rule,
    neither figure is whole and the FLOP are unknown.
    """
    calls = ", ".join(f"{n} {t}" for t, n in compiled.library_calls or ())
    true = counted.total.flops
    devices = plan.devices if plan is not None else 1
    expected = true / devices
    if value is not None and expected and abs(value - expected) <= LIBRARY_TOLERANCE * expected:
        return value, source, note
    if counted.unsupported:
        return None, "unknown", (
            f"{phase}: flops unknown: the compiled program calls libraries ({calls}) whose FLOP XLA's "
            f"analysis leaves out (it gave {value if value is None else format(value, ',')}), and the jaxpr "
            f"has primitives without a rule ({', '.join(sorted(counted.unsupported))}; counted part {true:,})"
        )
    per_device = round(expected)
    return per_device, "jaxpr", (
        f"{phase}: XLA's compiled flops ({'none' if value is None else format(value, ',')}) leave out the "
        f"library calls of the program ({calls}); using the jaxpr count ({per_device:,}"
        + (f", the step's {true:,} over {devices} devices" if devices > 1 else "") + ")"
    )


def _best_sharded(
    phase: str, key: str, xla_value: int, counted: JaxprCount, compiled: xla.CompiledPhase,
    devices: int,
) -> tuple[int | None, str, str | None]:
    """The loop correction of a per-device figure.

    The jaxpr counts the whole step on every device; XLA's figure is one
    device's. The missed iterations of the loop bodies (the jaxpr's count with
    trip counts minus with each body once) are taken to be split over every
    device of the mesh, as the layers of data-parallel, FSDP and Megatron
    steps are: exact for those, an undercount for a loop body the partitioner
    leaves replicated.
    """
    true, once = getattr(counted.total, key), getattr(counted.total_once, key)
    if compiled.has_loops is False:
        return xla_value, "xla", (
            f"{phase}: the compiled per-device program has no loop left (XLA unrolled "
            f"{_describe_loops(counted)}): no correction"
        )
    extra = round((true - once) / devices)
    return xla_value + extra, "xla+loops", (
        f"{phase}: XLA counts a loop body once ({_describe_loops(counted)}); per-device {key} "
        f"corrected from {xla_value:,} to {xla_value + extra:,}: the jaxpr's missed iterations "
        f"split over the {devices} devices"
    )


_HLO_SCOPES = frozenset({"while", "body", "cond", "closed_call", "checkpoint", "remat", "pjit"})
"""Name-stack entries of an HLO op_name that are jax's control flow, not modules."""


def _layer_of(op_name: str, modules: Sequence[str], root: str) -> str:
    """The module (of ``modules``, longest first) an HLO instruction's op_name names."""
    parts = op_name.split("/")[:-1]  # the last entry is the primitive
    if parts and parts[0].startswith("jit("):
        parts = parts[1:]
    path = module_path("/".join(p for p in parts if p not in _HLO_SCOPES), root)
    return next((m for m in modules if m and (path == m or path.startswith(m + "/"))), "")


def _communication(
    compiled: xla.CompiledPhase | None, plan: _sharding.ShardingPlan | None, modules: Sequence[str],
    root: str = "",
) -> tuple[tuple[Collective, ...], list[str]]:
    """The compiled program's collectives as report rows, grouped by kind, size,
    group and layer, with their runs per step."""
    if compiled is None or plan is None or compiled.collectives is None:
        return (), []
    from xla_cost import hlo

    rows: dict[tuple[Any, ...], Collective] = {}
    known = sorted(modules, key=len, reverse=True)
    for c in compiled.collectives:
        axes = hlo.group_axes(c.groups, plan.sizes) if c.groups is not None else ()
        layer = _layer_of(c.op_name, known, root)
        row = Collective(c.kind, tuple(axes), c.group_size, c.bytes, c.executions, layer)
        before = rows.get(row.key())
        if before is not None:
            runs = None if before.executions is None or c.executions is None else before.executions + c.executions
            row = dataclasses.replace(before, executions=runs)
        rows[row.key()] = row
    return tuple(rows.values()), list(compiled.collective_notes)


ATTENTION_CONVENTIONS: tuple[str, ...] = ("full", "causal")
"""How ``model_flops`` counts the attention's score and value products: every
T x T pair as computed (PaLM, Appendix B: 6N + 12 L H Q T per token), or half
of them for a causal mask (MaxText's convention)."""


def _attention_flops(counted: JaxprCount, modules: Sequence[str], root: str | Sequence[str]) -> int:
    """FLOP of the matrix products computed in modules without parameters of
    their own (an attention core: scores = q k^T, outputs = p v), loops
    multiplied out; the update's optimizer arithmetic has none."""
    total = 0
    for eqn in counted.equations:
        if eqn.primitive != "dot_general":
            continue
        path = module_path(eqn.name_stack, root)
        if not path or any(path == m or path.startswith(m + "/") for m in modules):
            continue
        parts = path.split("/")
        ancestors = ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]
        if any(m.startswith(a + "/") for a in ancestors for m in modules):
            total += eqn.cost.flops
    return total


def _phase_costs(
    name: str, program: _Program, plan: _sharding.ShardingPlan | None = None,
    modules: Sequence[str] = (), root: str = "", attention_convention: str = "full",
) -> tuple[PhaseCosts, list[str]]:
    """The best figures of one program, XLA's raw and the jaxpr's beside them, and its notes."""
    counted, compiled = program.counted, program.compiled
    costs = compiled.costs if compiled is not None else xla.XlaCosts(None, None, None)
    notes: list[str] = []
    values, sources = {}, {}
    for key in SOURCED:
        value, source, note = _best(
            name, key, getattr(costs, key), counted, compiled if plan is not None else None,
            plan.devices if plan is not None else 1,
        )
        if key == "flops" and compiled is not None and compiled.library_calls:
            value, source, note = _library_flops(name, value, source, note, counted, compiled, plan)
        values[key], sources[key] = value, source
        notes += [note] if note else []
        if compiled is not None and source == "jaxpr" and getattr(costs, key) is None:
            reasons = "; ".join(costs.unknown_reasons) or "no figure"
            notes.append(f"{name}: XLA gave no {key} figure ({reasons}); using the jaxpr count ({value:,})")
    corrected = "xla+loops" in sources.values()
    total, recomputed = counted.total, counted.recomputed.flops
    if recomputed and compiled is None:
        notes.append(
            f"{name}: includes {recomputed:,} FLOP that jax.checkpoint recomputes; a compiler "
            "with memory to spare may remove them (XLA on the CPU does)"
        )
    elif recomputed and costs.flops is not None:
        removed = total.flops - costs.flops > recomputed / 2
        notes.append(
            f"{name}: jax.checkpoint recomputes {recomputed:,} FLOP of the forward pass in "
            "the backward pass (in jaxpr_flops); "
            + ("XLA's compiled program removed the recomputation (flops is XLA's: no recompute)"
               if removed else "XLA's compiled program keeps it")
        )
    # Model and hardware FLOP: without remat both are the best figure. With it,
    # XLA may keep all, some or none of the recomputation (the CPU removes what
    # it has memory for), so both come from the jaxpr, which counts the step as
    # jax.checkpoint writes it: hardware = all of it, model = less the recomputed
    # forward work; unknown where the jaxpr is not complete.
    flops = values["flops"]
    if not recomputed:
        model_flops = hardware_flops = flops
    elif counted.unsupported or flops is None:
        model_flops = hardware_flops = None
    else:
        model_flops, hardware_flops = total.flops - recomputed, total.flops
    attention = _attention_flops(counted, modules, root)
    if attention_convention == "causal" and model_flops is not None:
        model_flops -= attention // 2
    if corrected and costs.bytes_accessed is not None:
        notes.append(f"{name}: bytes_accessed is XLA's raw figure, which counts each loop body once")
    memory = compiled.memory if compiled is not None else xla.XlaMemory(None, None, None)
    communication, comm_notes = _communication(compiled, plan, modules, root)
    notes += [f"{name}: {n}" for n in comm_notes]
    result = PhaseCosts(
        flops=values["flops"],
        transcendentals=values["transcendentals"],
        bytes_accessed=costs.bytes_accessed,
        memory=MemoryStats(memory.argument_bytes, memory.output_bytes, memory.temp_bytes),
        xla_flops=costs.flops,
        xla_transcendentals=costs.transcendentals,
        jaxpr_flops=total.flops,
        jaxpr_transcendentals=total.transcendentals,
        jaxpr_bytes_accessed=total.bytes_accessed,
        conversion_flops=_conversions(counted),
        model_flops=model_flops,
        hardware_flops=hardware_flops,
        attention_flops=attention,
        loop_corrected=corrected,
        sources=sources,
        derivation="compiled" if compiled is not None else "jaxpr",
        communication=communication,
    )
    return result, notes + [f"{name}: {n}" for n in counted.notes]


def _all_phases(
    programs: Mapping[str, _Program], plan: _sharding.ShardingPlan | None = None,
    modules: Sequence[str] = (), root: str = "", attention_convention: str = "full",
) -> tuple[dict[str, PhaseCosts], list[str]]:
    """Every declared phase: the programs' costs, then the derived ones by formula."""
    costs: dict[str, PhaseCosts] = {}
    notes: list[str] = []
    for name, program in programs.items():
        costs[name], found = _phase_costs(name, program, plan, modules, root, attention_convention)
        notes += found
    for phase in phases.DECLARED:
        if phase.name not in costs:
            costs[phase.name] = PhaseCosts.derive(phase, costs)
    return {name: costs[name] for name in phases.NAMES}, notes


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
        for name, count in counted.items() if not phases.phase(name).follow_data
        for e in count.equations
    }
    return (workload.root_name, *sorted(f for f in firsts if f and f not in top))


def _layers(
    workload: Workload, counted: Mapping[str, JaxprCount], depth: int | None
) -> tuple[LayerCosts, ...]:
    return attribute_step(
        {name: count.equations for name, count in counted.items()},
        workload.param_paths, root=_roots(workload, counted), depth=depth,
        known_modules=workload.module_paths,
    )


def _time(
    workload: Workload, costs: Mapping[str, PhaseCosts], dtype: str,
    peak_tflops: float | None, peak_bandwidth: float | None,
    executables: Mapping[str, Any],
) -> Timing:
    try:
        peak = _timing.device_peak(peak_tflops=peak_tflops, peak_bandwidth=peak_bandwidth)
    except ValueError as exc:
        raise InputError(
            "a device with a known peak, or --peak-tflops and --peak-bandwidth",
            xla.device_kind(), str(exc).rsplit(". ", 1)[-1],
        ) from exc
    try:
        return _timing.time_workload(
            workload,
            {p: c.flops for p, c in costs.items()},
            {p: c.bytes_accessed for p, c in costs.items()},
            dtype=dtype, peak=peak, executables=executables,
            compiled_memory={
                p: (costs[p].memory.output_bytes, costs[p].memory.temp_bytes) for p in executables
            },
            model_flops={p: c.model_flops for p, c in costs.items()},
            hardware_flops={p: c.hardware_flops for p, c in costs.items()},
        )
    except Exception as exc:  # noqa: BLE001 - the counts must survive a failed run
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return _timing.Timing(
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


def _step_equations(counted: Mapping[str, JaxprCount]) -> list[tuple[int, EqnCount]]:
    """The train step's equations with their weight: its own program's, or its
    formula's programs' (``grad + update``)."""
    step = phases.phase("train_step")
    if "train_step" in counted:
        return [(1, e) for e in counted["train_step"].equations]
    return [(k, e) for name, k in step.formula.items() for e in counted[name].equations]


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




def check_options(
    *, depth: Any = None, dtype: Any = None, peak_tflops: Any = None,
    peak_bandwidth: Any = None, counter: Any = "xla",
) -> None:
    """The option checks of `analyze`, the one place they are made (the CLI's
    arguments reach them unchanged).

    Raises:
      InputError: an option out of its range, saying what was expected.
    """
    if counter not in COUNTERS:
        raise InputError(
            f"counter one of {', '.join(COUNTERS)}", repr(counter),
            "Use counter='xla' (compile) or 'jaxpr' (--counter jaxpr).",
        )
    check_depth(depth)
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
    counter: str = "xla",
    timed: bool = False,
    peak_tflops: float | None = None,
    peak_bandwidth: float | None = None,
    name: str | None = None,
    config: Mapping[str, Any] | None = None,
    dtype: str | None = None,
    call_kwargs: Mapping[str, Any] | None = None,
    method: str | Callable[..., Any] | None = None,
    axis_names: Sequence[str] | str | None = None,
    output: OutputSelector | None = None,
    exact_train_step: bool = False,
    compilation_cache: bool = True,
    cache: bool | str | os.PathLike[str] | Store = False,
    mesh: Mapping[str, int] | str | jax.sharding.Mesh | None = None,
    param_sharding: _sharding.PartitionRules | None = None,
    logical_axis_rules: Sequence[tuple[str, Any]] | None = None,
    memory: bool = False,
    remat: str | None = None,
    attention_flops: str = "full",
    **deprecated: Any,
) -> Report:
    """Counts the FLOP, bytes and memory of one training step of ``model``.

    Each phase with a program (``forward``, ``grad``, ``update``; see
    `xla_cost.phases`) is traced once to a jaxpr and counted with
    `xla_cost.rules`; with ``counter="xla"`` (the default) the same trace is
    also lowered and compiled for the default backend, and its
    ``cost_analysis()`` and ``memory_analysis()`` are read. Nothing is executed
    and nothing the size of the model is allocated (parameters and optimizer
    state come from ``jax.eval_shape``). Compiled programs are kept in JAX's
    persistent compilation cache (`xla_cost.xla.use_compilation_cache`), so a
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
      counter: ``xla`` (compile; XLA's figures, corrected for loops) or
        ``jaxpr`` (count the jaxprs alone: much faster on big models; no XLA
        bytes and no memory figures, only the jaxpr's unfused bytes estimate).
        `COUNTERS` lists them.
      timed: also run every phase on real random arrays on the default device
        and time it (`xla_cost.timing`): seconds, FLOP/s, MFU, a roofline
        prediction, the forward/backward/update split. Never changes a count;
        a step too big for the device is reported as skipped.
      exact_train_step: compile the train step as a program of its own
        instead of adding grad and update: exact train-step memory (buffers
        of two programs do not add up to their fusion's) for about twice the
        compile time.
      compilation_cache: keep compiled programs in JAX's persistent
        compilation cache (default; off with ``XLA_COST_NO_CACHE=1`` too).
      cache: look the whole analysis up in the results store
        (`xla_cost.store`; the one `xla_cost.sweep` writes) and store it
        there when it is not: ``True`` for `default_store_path`, a path, or a
        `Store`. The key is a description of every argument (a Linen module's
        fields, an NNX module's graph and shapes, the source file of its
        class, a loss function's code), with the versions, backend and
        device. A call with an argument that has no stable description (an
        object whose repr holds its memory address) runs and is not stored,
        with a note; a timed call is never cached.
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
      mesh: analyse the step sharded over a device mesh: ``{"data": 8}``,
        ``"fsdp=8,model=8"`` or a `jax.sharding.Mesh` with axes among
        ``data`` (DDP), ``fsdp`` (ZeRO-3) and ``model`` (tensor parallel);
        see `xla_cost.sharding`. Each program is compiled by XLA's SPMD
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
        default `xla_cost.sharding.DEFAULT_LOGICAL_RULES`.
      memory: also break the step's memory down per device
        (`Report.memory_breakdown`, `xla_cost.memory`): parameters, gradients,
        optimizer state, batch and the activations the backward pass keeps
        (per layer in ``layers``), beside XLA's peak of the train step compiled
        as one program with the parameters and optimizer state donated (one
        more compile).
      remat: run the whole model under ``jax.checkpoint`` with this policy
        (``full``, ``dots_saveable``, ``dots_with_no_batch_dims_saveable``;
        `xla_cost.remat`): fewer saved activations, the forward work
        recomputed in the backward pass shows in ``hardware_flops`` (not in
        ``model_flops``). Zoo transformers remat per block instead with
        ``--set remat=...``.
      attention_flops: how ``model_flops`` counts the attention's score and
        value products (`ATTENTION_CONVENTIONS`): ``full`` (every T x T pair,
        as computed) or ``causal`` (half of them, for causal masks).

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
    counter, timed = _deprecated_switches(counter, timed, deprecated)
    check_options(
        depth=depth, dtype=dtype, peak_tflops=peak_tflops, peak_bandwidth=peak_bandwidth,
        counter=counter,
    )
    arguments = dict(
        model=model, inputs=inputs, optimizer=optimizer, loss=loss, targets=targets, params=params,
        per_layer=per_layer, depth=depth, counter=counter, name=name, config=config, dtype=dtype,
        call_kwargs=call_kwargs, method=method, axis_names=axis_names, output=output,
        exact_train_step=exact_train_step,
    )
    if memory:
        arguments["memory"] = True
    if remat not in (None, "none"):
        arguments["remat"] = remat
    if attention_flops not in ATTENTION_CONVENTIONS:
        raise InputError(f"attention_flops one of {', '.join(ATTENTION_CONVENTIONS)}", repr(attention_flops),
                         "Use full (every pair, as computed) or causal (half, for a causal mask).")
    if attention_flops != "full":
        arguments["attention_flops"] = attention_flops
    sizes = _sharding.check_mesh(mesh) if mesh is not None else {}
    if _sharding.mesh_devices(sizes) > 1:
        arguments.update(mesh=sizes, param_sharding=param_sharding, logical_axis_rules=logical_axis_rules)
    if cache is not False and cache is not None and not timed:
        key, why = analysis_key(arguments)
        db = cache if isinstance(cache, Store) else Store(None if cache is True else cache)
        try:
            if key is not None:
                row = db.get(key)
                if row is not None and row.status == "ok":
                    return Report.from_dict(row.report)
            report = analyze(**arguments, timed=False, compilation_cache=compilation_cache)
            if key is None:
                return dataclasses.replace(report, notes=(*report.notes, f"not cached: {why}"))
            db.put(key, model=report.model, config={"analyze": report.model}, environment=environment(),
                   report=report.to_dict(), seconds=None)
            return report
        finally:
            if db is not cache:
                db.close()
    workload, optimizer_name = build_workload(
        model, inputs, optimizer=optimizer, loss=loss, targets=targets, params=params,
        call_kwargs=call_kwargs, method=method, axis_names=axis_names, output=output, remat=remat,
    )
    compiled = counter == "xla"
    plan = None
    if _sharding.mesh_devices(sizes) > 1:
        if workload.axis_names:
            raise InputError(
                "a model without collective axis names of its own on a mesh",
                f"axis names {', '.join(workload.axis_names)} (a BatchNorm(axis_name=...))",
                "Analyse it on one device (no --mesh), where its collectives are bound, or "
                "drop its axis_name: on a mesh XLA inserts the collectives itself.",
            )
        plan = _sharding.plan_sharding(
            workload, mesh if isinstance(mesh, jax.sharding.Mesh) else sizes,
            param_sharding=param_sharding, logical_axis_rules=logical_axis_rules,
            zoo_rules=_zoo_rules(model),
        )
        if timed:
            timed = False
            workload = dataclasses.replace(workload, notes=(
                *workload.notes, "timing skipped: a sharded step is analysed, not run"))
    if compiled:
        xla.use_compilation_cache(compilation_cache)
    programs = _run_programs(
        workload, phases.programs(exact_train_step), compiled=compiled, for_timing=timed,
        plan=plan,
    )
    costs, phase_notes = _all_phases(
        programs, plan, tuple(workload.param_paths), workload.root_name, attention_flops
    )
    counted = {name: program.counted for name, program in programs.items()}

    notes: list[str] = list(workload.notes)
    if plan is not None:
        notes.append(
            f"sharded over {plan.devices} devices ({_sharding._mesh_text(plan.sizes)}): flops, "
            "bytes, memory and communication are per device; jaxpr_* figures and per-layer "
            "rows count the whole step on all devices"
        )
        notes += plan.notes
    if not compiled:
        notes.append(
            "counted from the jaxpr alone (counter jaxpr): no XLA bytes_accessed or memory; "
            "jaxpr_bytes_accessed is the unfused estimate; compile for those (counter xla)"
        )
    notes += phase_notes
    for phase in phases.derived(exact_train_step):
        if phase.program is not None:  # could have been compiled: say what is missing
            notes.append(
                f"{phase.name}: {phase.formula_text}, not compiled as one program: its FLOP "
                "are within about 1e-5 of the fused program's; its bytes count the gradients "
                "written by grad and read by update, which the fused step may keep (more on "
                "small models); its memory is unknown: exact_train_step=True "
                "(--exact-train-step) compiles it"
            )
    unsupported: dict[str, int] = {}
    for count in counted.values():
        for prim, n in count.unsupported.items():
            unsupported[prim] = max(unsupported.get(prim, 0), n)

    compute_dtype = dtype or _dtype_name(workload)
    param_dtype = _param_dtype_name(workload)
    precision = _precision_note(compute_dtype, param_dtype, costs, xla.backend_name())
    if precision:
        notes.insert(0, precision)
    timing = None
    if timed:
        executables = {
            n: p.compiled.executable for n, p in programs.items() if p.compiled is not None
        }
        timing = _time(workload, costs, compute_dtype, peak_tflops, peak_bandwidth, executables)
        if timing.skipped:
            notes.append(f"timing skipped: {timing.skipped}")
    breakdown = _memory(workload, plan, compiled) if memory else None
    layers = _layers(workload, counted, depth) if per_layer or depth else None
    if breakdown is not None:
        notes += list(breakdown.notes)
        if layers is not None:
            layers = _with_saved(layers, breakdown.saved_by_layer)
    step = _step_equations(counted)
    collectives = _collectives(step)
    if collectives:
        notes.append(_collective_note(collectives, step))
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
        phases=costs,
        layers=layers,
        unsupported=unsupported,
        notes=tuple(dict.fromkeys(notes)),
        counter=counter,
        depth=depth,
        timing=timing,
        collectives=collectives,
        sharding=_sharding_summary(workload, plan) if plan is not None else {},
        memory_breakdown=breakdown,
    )


def _memory(workload: Workload, plan: _sharding.ShardingPlan | None, compiled: bool) -> Any:
    """The step's memory breakdown; XLA's figures from the train step compiled as
    one program with the parameters and optimizer state donated."""
    from xla_cost import memory as _memory_module

    step = None
    if compiled:
        declared = phases.phase("train_step")
        fn = workload.phase_fn("train_step")

        def train_step(*args: Any) -> Any:  # its own function: the trace cache is keyed by it
            return fn(*args)

        options: dict[str, Any] = {
            "donate_argnums": tuple(i for i, n in enumerate(declared.arguments) if n in ("params", "opt_state")),
        }
        if plan is not None:
            options["in_shardings"] = tuple(plan.shardings(n) for n in declared.arguments)
            options["out_shardings"] = tuple(plan.shardings(n) for n in declared.results)
        with workload.tracing(), _constraints(plan, workload):
            lowered = jax.jit(train_step, **options).lower(*workload.phase_args("train_step"))
        step = xla.compile_phase(lowered, compiler_options=xla.COMPILER_OPTIONS, executable=False, liveness=True)
    return _memory_module.memory_breakdown(
        workload, plan, root=workload.root_name, modules=tuple(workload.param_paths), compiled=step,
        constraints=_constraints(plan, workload),
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


def _zoo_rules(model: Any) -> Any:
    """The zoo family's partition rules for a zoo model (None for others)."""
    if not type(model).__module__.startswith("xla_cost.zoo"):
        return None
    from xla_cost.zoo import partition_rules

    return partition_rules(model)


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


_DEPRECATED = {"compile": "counter", "time": "timed"}


def _deprecated_switches(counter: str, timed: bool, given: Mapping[str, Any]) -> tuple[str, bool]:
    """``compile=``/``time=`` (before 0.2, names that shadow builtins) to ``counter=``/``timed=``."""
    unknown = set(given) - set(_DEPRECATED)
    if unknown:
        raise TypeError(f"analyze() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    for old, new in _DEPRECATED.items():
        if old in given:
            warnings.warn(
                f"analyze({old}=...) is deprecated; use {new}="
                + ("'xla' or 'jaxpr'" if old == "compile" else "True") + " instead",
                DeprecationWarning, stacklevel=3,
            )
    if "compile" in given:
        counter = "xla" if given["compile"] else "jaxpr"
    if "time" in given:
        timed = bool(given["time"])
    return counter, timed
