"""The one place that lowers, compiles and reads XLA's cost and memory analyses.

``Compiled.cost_analysis()`` is unstable across jax versions and backends: it has
been a dict, a list holding one dict per program, or ``None``; keys go missing (a
program without arithmetic has no ``flops``); GPU custom calls (cuBLAS, cuDNN,
Pallas) add ``-1`` for "unknown". Everything here turns that into numbers or
``None`` (unknown), never a made-up zero, and says why a figure is unknown.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import math
import os
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from xla_cost.compiled import hlo, kernel_cache, printed, targets, work
from xla_cost.compiled import eager
from xla_cost.compiled import kernels as kernel_lists
from xla_cost.compiled.collectives import HloCollective, parse_collectives
from xla_cost.compiled.compiler_log import quiet_compiler, remat_shortfall
from xla_cost.compiled.liveness import LivenessProfile
from xla_cost.compiled.liveness import simulate as simulate_schedule
from xla_cost.errors import InputError

_LOG = logging.getLogger("xla_cost")

__all__ = [
    "XlaCosts",
    "XlaMemory",
    "CompiledPhase",
    "normalize_cost_analysis",
    "normalize_memory_analysis",
    "compile_phase",
    "compile_executable",
    "COMPILER_OPTIONS",
    "EAGER_FORMAT",
    "LIVENESS_FORMAT",
    "EAGER_FUSION_PASSES",
    "EAGER_OPTIONS",
    "UNFUSED_OPTIONS",
    "use_compilation_cache",
    "default_cache_dir",
    "cache_dir",
    "check_cache_dir",
    "device_kind",
    "device_memory_bytes",
    "backend_name",
]

# Keys of ``cost_analysis()`` mapped to our field names.
_COST_KEYS = {
    "flops": "flops",
    "transcendentals": "transcendentals",
    "bytes accessed": "bytes_accessed",
}


@dataclasses.dataclass(frozen=True)
class XlaCosts:
    """Whole-program costs as XLA's ``HloCostAnalysis`` counts them.

    Attributes:
      flops: floating-point operations (a multiply-add is 2), or None if unknown.
      transcendentals: exp, log, tanh, sqrt, rsqrt, power, ... (one per element).
      bytes_accessed: bytes read and written by the (fused) HLO instructions.
      unknown_reasons: one line per field that is None, saying why.
    """

    flops: int | None
    transcendentals: int | None
    bytes_accessed: int | None
    unknown_reasons: tuple[str, ...] = ()
    source: str = "cost_analysis"
    """Where the figures come from: ``cost_analysis`` (the compiled program's own),
    or ``module+library`` (a target compiler that gives none, a GPU's without its
    device: XLA's cost analysis over its optimized module, the library calls'
    FLOP counted from their operands, `xla_cost.compiled.kernels`)."""
    optimal_seconds: float | None = None
    """The target compiler's own estimate of the program's time (a TPU's), where it gives one."""


@dataclasses.dataclass(frozen=True)
class XlaMemory:
    """Buffer sizes of a compiled executable (``Compiled.memory_analysis()``)."""

    argument_bytes: int | None
    output_bytes: int | None
    temp_bytes: int | None
    alias_bytes: int | None = None
    """Output bytes that share an argument's buffer (donated arguments)."""
    output_array_bytes: int | None = None
    """The returned arrays' own bytes (`xla_cost.compiled.hlo.entry_output_bytes`), no tuple table; None: unread."""
    rematerialized: int | None = None
    """Instructions XLA's rematerialization pass recomputed to bring the peak
    under the device's memory (clones named ``*.remat*`` in the optimized
    module: `xla_cost.compiled.hlo.remat_clones`); 0: none; None: not read."""
    remat_short_of: tuple[int, int] | None = None
    """``(limit, reached)`` bytes when the rematerialization pass said it could
    not bring the program under its limit (`xla_cost.compiled.compiler_log.remat_shortfall` of the compiler's
    log): the compiler's own word that the program does not fit; None: it did
    not say so (or the log was not seen: the analyses read from the cache keep it)."""
    unsized_scratch: int = 0
    """An allowance for the cuDNN convolution workspaces a deviceless GPU compile
    leaves out (`xla_cost.compiled.hlo.unsized_conv_scratch`), which a device
    needs besides `peak_bytes`; 0: none left out."""

    @property
    def peak_bytes(self) -> int | None:
        """XLA's live-buffer bound: arguments + outputs + temporaries - aliased."""
        if None in (self.argument_bytes, self.output_bytes, self.temp_bytes):
            return None
        return self.argument_bytes + self.output_bytes + self.temp_bytes - (self.alias_bytes or 0)


@dataclasses.dataclass(frozen=True)
class CompiledPhase:
    """What compiling one phase function yields (the executable, for timing)."""

    costs: XlaCosts
    memory: XlaMemory
    executable: Any = dataclasses.field(default=None, compare=False, repr=False)
    collectives: tuple[Any, ...] | None = None
    """`xla_cost.compiled.collectives.HloCollective` of the compiled HLO, when asked for."""
    collective_notes: tuple[str, ...] = ()
    has_loops: bool | None = None
    """Whether the compiled HLO kept a ``while`` loop (None: not looked at)."""
    library_calls: tuple[tuple[str, int], ...] | None = None
    """``(custom_call_target, count)`` of the compiled HLO's custom calls
    (cuBLAS gemms, cuDNN convolutions, fused attention, Pallas kernels), read
    on accelerator backends, whose cost analysis may leave their FLOP out
    (None: not looked at, as on the CPU)."""
    library_bytes: int | None = None
    """The library calls' operand and result bytes per execution
    (`xla_cost.compiled.hlo.library_call_bytes`), which XLA's ``bytes accessed``
    leaves out on accelerators; read with ``library_calls`` (None: not looked
    at, or a shape or a trip count unknown)."""
    memory_bound_bytes: int | None = None
    """Operand and result bytes of the instructions that are not matrix
    products, convolutions, library calls or collectives, loops multiplied out
    (`xla_cost.compiled.work.work_bytes`): the memory-bound work of the time
    model (None: not read, or a shape unknown)."""
    kernels: int | None = None
    """Executions of instructions that run code, loops multiplied out
    (`xla_cost.compiled.work.work_bytes`): about the kernels an accelerator launches."""
    arguments: int | None = None
    """The arrays a call of the program is passed (`xla_cost.compiled.hlo.entry_arguments`):
    what the host hands over each call (None: not read)."""
    liveness: Any = None
    """`xla_cost.compiled.liveness.LivenessProfile` of the compiled schedule: the
    buffers live at the temporaries' peak (None: not asked for, or the
    compiled text could not be replayed)."""
    liveness_error: str = ""
    """Why the schedule could not be replayed, where it was asked for."""
    target: str | None = None
    """The compile target's name (`xla_cost.compiled.targets`); None: jax's default backend."""
    kernel_list: tuple[Any, ...] | None = None
    """`xla_cost.compiled.kernels.Kernel` of the compiled program in schedule order, read for a
    compile target (None: not read)."""
    notes: tuple[str, ...] = ()
    """What a reader of the figures should know of how the program was compiled (a retry)."""


def _as_count(value: Any) -> int | None:
    """A non-negative finite number as an int; anything else is unknown."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return int(round(value))


def normalize_cost_analysis(raw: Any) -> XlaCosts:
    """Turns whatever ``cost_analysis()`` returned into `XlaCosts`.

    Args:
      raw: a dict of costs; a list holding exactly one such dict (the form jax
        used before 0.4.30 for a single program); or ``None``.

    Returns:
      ``XlaCosts`` whose fields are None where the analysis gave no usable number:
      the whole analysis missing, a list of several programs (no single figure), a
      missing key, or a negative value (GPU custom calls report -1 for unknown).
    """
    if isinstance(raw, Sequence) and not isinstance(raw, (str, bytes)):
        if len(raw) == 1:
            raw = raw[0]
        else:
            reason = (
                f"cost_analysis() returned a list of {len(raw)} entries, not one "
                "program's costs"
            )
            return XlaCosts(None, None, None, (reason,))
    if not isinstance(raw, Mapping):
        reason = f"cost_analysis() returned {type(raw).__name__}, not a dict of costs"
        return XlaCosts(None, None, None, (reason,))
    values: dict[str, int | None] = {}
    reasons: list[str] = []
    for key, field in _COST_KEYS.items():
        if key not in raw:
            values[field] = None
            reasons.append(f"cost_analysis() has no {key!r} key")
            continue
        count = _as_count(raw[key])
        if count is None:
            reasons.append(
                f"cost_analysis() gave {key!r} = {raw[key]!r} (negative means a custom "
                "call XLA cannot count)"
            )
        values[field] = count
    return XlaCosts(**values, unknown_reasons=tuple(reasons))


def normalize_memory_analysis(raw: Any) -> XlaMemory:
    """Reads argument, output and temporary buffer sizes; missing ones are None."""

    def read(name: str) -> int | None:
        return _as_count(getattr(raw, name, None)) if raw is not None else None

    return XlaMemory(
        argument_bytes=read("argument_size_in_bytes"),
        output_bytes=read("output_size_in_bytes"),
        temp_bytes=read("temp_size_in_bytes"),
        alias_bytes=read("alias_size_in_bytes"),
    )


def _safe_call(method: Callable[[], Any]) -> Any:
    # Some backends raise instead of returning None (NotImplementedError,
    # XlaRuntimeError "Unimplemented"); both mean "no analysis".
    try:
        return method()
    except Exception:  # noqa: BLE001 - any failure here means "unknown"
        return None


COMPILER_OPTIONS: Mapping[str, Any] = {"xla_backend_optimization_level": 0, "xla_gpu_disable_gpuasm_optimizations": True}
"""Compiler options for the programs that are only analysed, never run.

The backend optimization level changes how XLA generates machine code (LLVM
passes on the CPU), not the HLO its cost analysis reads: every FLOP,
transcendental, byte and buffer figure is the same at level 0 (checked on a
loop-free and a scanned model, every phase, by ``tests/step/test_phases.py``) and
compiling is about a quarter faster. A GPU target's binaries are assembled by
ptxas at -O0 (``xla_gpu_disable_gpuasm_optimizations``; other backends do not
read it): the kernels, their buffers and the costs are fixed before, the same
(checked on a GPT's grad for the H100, the same test file), and `xla-cost analyze
resnet50 --batch-size 32 --target h100` took 14.7 CPU s against 15.4-17.2.
Programs that are timed are compiled with the default options.
"""


UNFUSED_OPTIONS: Mapping[str, Any] = {**COMPILER_OPTIONS, "xla_disable_hlo_passes": "fusion"}
"""`COMPILER_OPTIONS` with XLA's fusion pass off: the program whose cost analysis
counts every instruction once. A fused program counts a cheap producer again
in every fusion that reads it (XLA duplicates it rather than write it out);
the difference between the two counts is that duplication."""


EAGER_FUSION_PASSES: tuple[str, ...] = (
    "fusion", "priority-fusion", "multi_output_fusion", "horizontal-loop-fusion", "copy_fusion",
)
"""XLA's fusion passes, by the names ``xla_disable_hlo_passes`` takes: the CPU's
``fusion``, and the GPU pipeline's (jax 0.10.2's CUDA plugin, read from its
``--xla_dump_hlo_pass_re`` dump: ``priority-fusion`` and ``multi_output_fusion`` in
its ``fusion`` pipeline, ``copy_fusion`` after copy insertion, the horizontal
loop fusion after). With them off, the GPU compiler's ``fusion-wrapper`` puts
each remaining op in a kernel of its own (``wrapped_<opcode>``); cuBLAS calls
(``cublas-gemm-rewriter``) are made as before."""

EAGER_FORMAT = 3
"""Version of the eager kernel lists (`xla_cost.compiled.eager.eager_kernels`):
part of the key of an unfused program's cached analyses and of a report with ``unfused``
phases, beside `ANALYSES_FORMAT`; a change makes only those entries unused."""

EAGER_OPTIONS: Mapping[str, Any] = {**COMPILER_OPTIONS, "xla_disable_hlo_passes": ",".join(EAGER_FUSION_PASSES)}
"""`COMPILER_OPTIONS` with every fusion pass of `EAGER_FUSION_PASSES` off: the
program an eager framework runs, one kernel per operation (`xla_cost.analyze`'s
``unfused``); its kernel list is the one such a framework launches
(`xla_cost.compiled.eager.eager_kernels`)."""


def _kernel_list(text: str, compiler_options: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """The program's kernels (`xla_cost.compiled.kernels.kernel_list`); an unfused one's as the eager
    framework it stands for launches them (`xla_cost.compiled.eager.eager_kernels`)."""
    listed = kernel_lists.kernel_list(text)
    return eager.eager_kernels(text, listed) if _eager(compiler_options) else listed


def _eager(compiler_options: Mapping[str, Any] | None) -> bool:
    """Whether ``compiler_options`` turn the fusion passes off as `EAGER_OPTIONS` does."""
    return bool(compiler_options) and compiler_options.get("xla_disable_hlo_passes") \
        == EAGER_OPTIONS["xla_disable_hlo_passes"]


def compile_phase(
    program: Any,
    args: Sequence[Any] = (),
    *,
    compiler_options: Mapping[str, Any] | None = None,
    executable: bool = True,
    collectives: bool = False,
    liveness: bool = False,
) -> CompiledPhase:
    """Compiles one phase and reads its analyses.

    Args:
      program: a pure function of ``args``, or a phase already traced or lowered
        (``jax.jit(fn).trace(*args)``, a ``jax.stages.Traced`` or ``Lowered``):
        then ``args`` is not used and nothing is traced again. Or a list holding
        one of these, handed over: it is emptied, so that the caller keeps no
        reference and the lowered program (with what jax keeps on it) is let go
        in the thread aside once compiled (`_ASIDE`), not on the caller's path.
      args: pytrees of arrays or ``jax.ShapeDtypeStruct`` (nothing is allocated).
      compiler_options: XLA options for the compile (`COMPILER_OPTIONS` for a
        program that is analysed only); None: the defaults, for a program that
        will run.
      executable: False when only the analyses are wanted: while the
        compilation cache is on, they are read from the analyses cache beside
        it when this very program (its StableHLO, the options, backend, device
        and versions) was analysed before, without compiling or loading it.
      collectives: also list the collectives of the compiled HLO
        (`xla_cost.compiled.collectives.parse_collectives`) and whether it kept loops.
      liveness: also replay the compiled schedule (`xla_cost.compiled.liveness`): the
        buffers live when the temporaries peak.

    Returns:
      The compiled program's costs and memory, unknown fields as None, and
      the executable (None when not asked for).
    """
    handed = isinstance(program, list)
    if handed:
        program = program.pop()
    key = None
    if not executable and _CACHE_STATE["dir"] is not None:
        lowered = _lowered(program, args)
        key = _analyses_key(lowered, compiler_options)
        cached = _read_analyses(key)
        if (cached is not None and (not collectives or cached.collectives is not None)
                and (not liveness or cached.liveness is not None or cached.liveness_error)):
            return cached
        program = lowered
    reuse = kernel_cache.options(targets.active(), _CACHE_STATE["dir"]) if key is not None else None
    with _not_in_jax_cache() if key is not None else contextlib.nullcontext():
        compiled, compile_note, log, printed_text = _compile(program, args, compiler_options, reuse=reuse)
    buffers = _ASIDE.submit(_safe_call, compiled.memory_analysis)  # read while the text is (`_ASIDE`)
    if handed:
        done, program, lowered = [program], None, None
        _ASIDE.submit(done.clear)  # the last reference to the program
    target = targets.active()
    text = printed.program_text(compiled, printed_text)
    costs = normalize_cost_analysis(_safe_call(compiled.cost_analysis))
    if target is not None:
        costs = _target_costs(compiled, costs, target, text)
    if not executable:  # nothing more is read from it: destroyed aside, while its text is read
        held, compiled = [compiled], None
        _ASIDE.submit(held.clear)  # the last reference: the caller keeps none
    found: tuple[Any, ...] | None = None
    notes: tuple[str, ...] = ()
    loops: bool | None = None
    library: tuple[tuple[str, int], ...] | None = None
    library_bytes: int | None = None
    profile, profile_error = None, ""
    moved = work.work_bytes(text) if text else None
    memory_bound = None if moved is None else moved.other
    launches = None if moved is None else moved.kernels
    if collectives or liveness or backend_name() != "cpu":
        if liveness:
            try:
                profile = simulate_schedule(text)
            except ValueError as exc:
                profile_error = str(exc)
        if collectives:
            found, notes = parse_collectives(text)
        if backend_name() != "cpu":
            library = tuple(sorted(hlo.custom_call_targets(text).items()))
            library_bytes = hlo.library_call_bytes(text).bytes if library else 0
    loops = hlo.has_while_loop(text) if text else loops  # whether XLA kept a loop (`xla_cost.analysis.costs.best`)
    memory = dataclasses.replace(normalize_memory_analysis(buffers.result()),  # read aside meanwhile
                                 rematerialized=hlo.remat_clones(text) if text else None,
                                 output_array_bytes=hlo.entry_output_bytes(text) if text else None,
                                 remat_short_of=remat_shortfall(log),
                                 unsized_scratch=hlo.unsized_conv_scratch(text) if text and target is not None else 0)
    result = CompiledPhase(
        costs=costs, memory=memory, executable=compiled, collectives=found,
        collective_notes=tuple(notes), has_loops=loops, library_calls=library, library_bytes=library_bytes,
        memory_bound_bytes=memory_bound, kernels=launches, liveness=profile, liveness_error=profile_error,
        arguments=hlo.entry_arguments(text) if text else None,
        target=None if target is None else target.name,
        kernel_list=None if target is None or not text else _kernel_list(text, compiler_options),
        notes=(compile_note,) if compile_note else (),
    )
    if key is not None and None not in (costs.flops, costs.transcendentals, costs.bytes_accessed):
        _write_analyses(key, result)  # an unknown is asked again next time
    return result


_ASIDE = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="xla-cost-aside")
"""A thread for the calls on a compiled program that release the interpreter
lock, run beside the Python that reads its text (in the thread that compiled
it, on the path that ends an analysis when it is the last compile). On
ResNet-50's gradient (batch 32, a 2-core CPU): ``memory_analysis()`` took
0.05 s, destroying the executable of a program that will not run 0.03 to
0.055 s and the lowered program handed over (`compile_phase`) 0.04 s; done in
line, they came after the compile and before its result or the end of the
analysis. Calls run in the order given: the executable is let go after its
memory is read."""


def _not_in_jax_cache() -> contextlib.AbstractContextManager[Any]:
    """A context in which this thread's compiles are not written to JAX's persistent
    cache: a program compiled only to be analysed is cached by its analyses
    (`compile_phase`), which a later analysis reads without its executable.
    Writing the executable as well took 0.1-0.2 s of CPU in ResNet-50's
    gradient compile (2.2 s). JAX's threshold is read in the thread that
    compiles, and set here for that thread only; nothing where this jax has
    no such setting."""
    from jax._src import config as jax_config  # noqa: PLC0415 - its thread-local settings

    setting = getattr(jax_config, "persistent_cache_min_compile_time_secs", None)
    return contextlib.nullcontext() if setting is None else setting(math.inf)


def _target_costs(compiled: Any, costs: XlaCosts, target: targets.CompileTarget, text: str) -> XlaCosts:
    """A target's figures (`xla_cost.compiled.kernels.module_costs`): its own
    cost analysis where it gives FLOP with no library call left out (a TPU's,
    with its ``optimal_seconds``), else XLA's cost analysis over its optimized
    module with the library calls' FLOP and bytes counted from their operands."""
    found = kernel_lists.module_costs(compiled, target.backend, text=text)
    if found.costs is None:
        return dataclasses.replace(costs, unknown_reasons=(*costs.unknown_reasons, *found.unknown))
    optimal = found.costs.get("optimal_seconds")
    optimal = float(optimal) if isinstance(optimal, (int, float)) and math.isfinite(optimal) and optimal >= 0 else None
    normalized = normalize_cost_analysis(found.costs)
    return dataclasses.replace(normalized, source=found.source, optimal_seconds=optimal,
                               unknown_reasons=(*normalized.unknown_reasons, *found.unknown))


def _lowered(program: Any, args: Sequence[Any]) -> Any:
    if isinstance(program, jax.stages.Lowered):
        return program
    if isinstance(program, jax.stages.Traced):
        return program.lower()
    return jax.jit(program).lower(*args)


ANALYSES_FORMAT = 29
"""Version of the analyses cache's entries; a change makes old entries unused (21: a GPU
target's library calls in a loop's body counted once in its FLOP, as XLA counts the body,
`xla_cost.compiled.kernels.module_costs`; 22: fused attention's exps in its transcendentals;
23: a TPU target's Pallas kernels (splash attention) in its FLOP and transcendentals, libtpu's
``ConcatBitcast`` no library call, a kernel's multi-line ``kernel_metadata`` read; 24: a scatter
that updates its buffer in place counted at its updates, `xla_cost.compiled.reads.untouched_bytes`; 25: a TPU
kernel's bytes those of the HBM, its arrays on the chip left out, `xla_cost.compiled.shapes.ON_CHIP_SPACES`;
26: a TPU loop whose counter steps by more than 1, XLA's windowed einsum, its trips read; 27: a TPU
kernel's arrays in its host's memory, `xla_cost.compiled.shapes.HOST_SPACE`, not the HBM's, and the
bytes each kernel moves over the host link, `xla_cost.compiled.kernels.Kernel.host_bytes`; 28: a splash
attention kernel's products as it runs them, `xla_cost.compiled.products.Product.executed`, its mask named in
its ``op_name``, its blocks read from its ``kernel_metadata``; 29: whether the program kept a ``while`` loop,
read on every backend, `CompiledPhase.has_loops`)."""

LIVENESS_FORMAT = 1
"""Version of the replayed schedules (`xla_cost.compiled.liveness`) the analyses cache keeps: an entry's
replay of another version is not read, and a compile that asks for one compiles again; no other entry
changes (1: the HBM only, a TPU's arrays in its host's memory or on its chip left out)."""


def _analyses_key(lowered: Any, compiler_options: Mapping[str, Any] | None) -> str:
    """A hash of everything the analyses of ``lowered`` depend on."""
    import jaxlib

    digest = hashlib.sha256()
    for part in (
        str(ANALYSES_FORMAT) + (f" eager {EAGER_FORMAT}" if _eager(compiler_options) else ""),
        _program_bytes(lowered), json.dumps(dict(compiler_options or {}), sort_keys=True),
        backend_name(), device_kind(), jax.__version__, jaxlib.__version__, _target_key(),
        os.environ.get("XLA_FLAGS", ""),
    ):
        digest.update(part if isinstance(part, bytes) else part.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


def _program_bytes(lowered: Any) -> bytes:
    """The lowered program without its debug information (where its code came
    from), as MLIR bytecode: what its text without locations says, read in 0.013
    s instead of 0.037 s for ResNet-50's gradient (batch 32), before its compile
    can start. Its text where the module cannot be had so."""
    try:
        from jaxlib.mlir import passmanager  # noqa: PLC0415 - the MLIR bindings jax lowers with

        module = lowered.compiler_ir("stablehlo")
        with module.context:
            stripped = module.operation.clone()
            passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(stripped)
            out = io.BytesIO()
            stripped.write_bytecode(out)
        return b"bytecode:" + out.getvalue()
    except Exception:  # noqa: BLE001 - any failure: the text, as before
        return b"text:" + lowered.as_text().encode("utf-8")


def _target_key() -> str:
    target = targets.active()
    return "" if target is None else target.key


def _analyses_path(key: str) -> str:
    return os.path.join(_CACHE_STATE["dir"], "analyses", key + ".json")


def _memory_from(data: Mapping[str, Any]) -> XlaMemory:
    short = data.get("remat_short_of")
    return XlaMemory(**{**data, "remat_short_of": None if short is None else (int(short[0]), int(short[1]))})


def _read_analyses(key: str) -> CompiledPhase | None:
    try:
        with open(_analyses_path(key), encoding="utf-8") as handle:
            data = json.load(handle)
        costs = XlaCosts(**{**data["costs"], "unknown_reasons": tuple(data["costs"]["unknown_reasons"])})
        found = None
        if data.get("collectives") is not None:
            found = tuple(HloCollective.from_dict(c) for c in data["collectives"])
        return CompiledPhase(
            costs=costs, memory=_memory_from(data["memory"]), executable=None, collectives=found,
            collective_notes=tuple(data.get("collective_notes", ())), has_loops=data.get("has_loops"),
            library_calls=None if data.get("library_calls") is None
            else tuple((str(t), int(n)) for t, n in data["library_calls"]),
            library_bytes=data.get("library_bytes"), memory_bound_bytes=data.get("memory_bound_bytes"),
            kernels=data.get("kernels"), arguments=data.get("arguments"),
            **({"liveness": _liveness_from(data.get("liveness")),
                "liveness_error": str(data.get("liveness_error", ""))}
               if data.get("liveness_format") == LIVENESS_FORMAT else {}),  # another version's: not read
            target=data.get("target"),
            kernel_list=None if data.get("kernel_list") is None
            else tuple(kernel_lists.Kernel.from_dict(k) for k in data["kernel_list"]),
            notes=tuple(data.get("notes", ())),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not there, or unreadable: compile


def _liveness_from(data: Any) -> Any:
    if data is None:
        return None
    return LivenessProfile.from_dict(data)


def _write_analyses(key: str, phase: CompiledPhase) -> None:
    path = _analyses_path(key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({
                "costs": dataclasses.asdict(phase.costs), "memory": dataclasses.asdict(phase.memory),
                "collectives": None if phase.collectives is None
                else [dataclasses.asdict(c) for c in phase.collectives],
                "collective_notes": list(phase.collective_notes), "has_loops": phase.has_loops,
                "library_calls": None if phase.library_calls is None else [list(c) for c in phase.library_calls],
                "library_bytes": phase.library_bytes, "memory_bound_bytes": phase.memory_bound_bytes,
                "kernels": phase.kernels, "arguments": phase.arguments,
                "liveness": None if phase.liveness is None else phase.liveness.to_dict(),
                "liveness_error": phase.liveness_error, "liveness_format": LIVENESS_FORMAT, "target": phase.target,
                "kernel_list": None if phase.kernel_list is None else [k.to_dict() for k in phase.kernel_list],
                "notes": list(phase.notes),
            }, handle)
        os.replace(tmp, path)
    except OSError as exc:  # a cache that cannot be written is no cache
        _LOG.info("analyses cache not written: %s", exc)


def compile_executable(
    program: Any, args: Sequence[Any] = (), *, compiler_options: Mapping[str, Any] | None = None
) -> Any:
    """Jits, lowers and compiles ``program`` for ``args``' shapes; returns the executable.

    ``program`` is a function of ``args`` or a traced or lowered stage (see
    `compile_phase`). For timing: call the result with concrete arrays of
    those shapes. Compiling here keeps compilation out of any measured time.
    What XLA writes to the standard error while compiling reaches it, without
    its slow-operation alarms (`xla_cost.compiled.compiler_log.filter_compiler_log`).
    """
    return _compile(program, args, compiler_options)[0]


TRITON_GEMM_RETRY = {"xla_gpu_enable_triton_gemm": False}
"""The option a GPU target's compile is retried with when XLA's Triton gemm emitter
finds no tiling for a matrix product without a device to autotune on (seen for
GPT-2's attention projection on an A100, sm_80): its products go to cuBLAS."""


def _compile(
    program: Any, args: Sequence[Any], compiler_options: Mapping[str, Any] | None,
    reuse: Mapping[str, Any] | None = None,
) -> tuple[Any, str, str, str | None]:
    """The executable, a note when it took a retry (`TRITON_GEMM_RETRY`),
    what the compiler logged meanwhile
    (`xla_cost.compiled.compiler_log.quiet_compiler`) and the module's text as
    the compiler printed it, where it does (`_compile_lowered`). With ``reuse`` (a
    target's kernel cache options) the compile reuses cached kernels; one that
    fails under them is compiled again without (the program is the same)."""
    if isinstance(program, jax.stages.Traced):
        program = program.lower()
    elif not isinstance(program, jax.stages.Lowered):
        program = jax.jit(program).lower(*args)
    return kernel_cache.compile_reusing(lambda options: _compile_lowered(program, options), compiler_options, reuse)


def _compile_lowered(program: Any, compiler_options: Mapping[str, Any] | None) -> tuple[Any, str, str, str | None]:
    """The executable, its retry note, the compiler's log and, for a target whose compiler
    prints its module (`xla_cost.compiled.printed`), that text (read where ``as_text()`` fails)."""
    options = dict(compiler_options) if compiler_options else None
    target = targets.active()
    with quiet_compiler() as log, warnings.catch_warnings(), printed.compiler_dump(target) as dump:
        if dump is not None:
            options = {**(options or {}), **dump.options}
        if target is not None:
            # A deviceless compile has no client to load an executable into: jax's persistent cache,
            # which the compile goes through, cannot read back the entries it writes for one and says
            # so before compiling again. A target's analyses are cached by `compile_phase` instead.
            warnings.filterwarnings("ignore", message="Error reading persistent compilation cache entry")
        try:
            executable, note = program.compile(compiler_options=options), ""
        except Exception as exc:  # noqa: BLE001 - one known failure is retried, any other raised
            if target is None or target.platform != "cuda" or "output tile sizes" not in str(exc):
                raise
            first = str(exc).strip().splitlines()[0][:160]
            executable = program.compile(compiler_options={**(options or {}), **TRITON_GEMM_RETRY})
            note = (
                f"the {target.name} compile failed in XLA's Triton gemm emitter without a device to autotune on "
                f"({first}); compiled again with xla_gpu_enable_triton_gemm=False: its matrix products are cuBLAS "
                "calls, where a real device's autotuner might have chosen Triton kernels")
        text = dump.read() if dump is not None else None
    return executable, note, "".join(log), text


CACHE_DIR_ENV = "XLA_COST_CACHE_DIR"
"""Environment variable: where JAX's persistent compilation cache is kept."""

NO_CACHE_ENV = "XLA_COST_NO_CACHE"
"""Environment variable: ``1`` turns the compilation cache off (as ``--no-cache``)."""

CACHE_MAX_BYTES = 2 << 30
"""The cache's size limit when xla_cost configures it (least recently used go)."""

_CACHE_STATE: dict[str, Any] = {"owned": None, "dir": None}


def default_cache_dir() -> str:
    """``$XLA_COST_CACHE_DIR``, else ``$XDG_CACHE_HOME/xla_cost/jax``, else
    ``~/.cache/xla_cost/jax``."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "xla_cost", "jax")


def cache_dir() -> str | None:
    """The directory of xla_cost's persistent caches (the analyses cache, the
    report cache), or None while they are off: on once `use_compilation_cache`
    turned JAX's cache on in a directory xla_cost owns (not with
    ``XLA_COST_NO_CACHE=1``, ``compilation_cache=False`` or a cache directory
    the user configured)."""
    return _CACHE_STATE["dir"]


def _env_off() -> bool:
    return os.environ.get(NO_CACHE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def check_cache_dir() -> None:
    """Refuses a ``$XLA_COST_CACHE_DIR`` that is not a directory and cannot be made one
    (a file, a path under a file, an unwritable place), unless the cache is off
    (``XLA_COST_NO_CACHE=1``). The default directory, which nobody asked for, is
    never refused: the cache is then off, as for any cache that cannot be written.

    Raises:
      InputError: the variable's path, and why it is not a directory, in one line.
    """
    explicit = os.environ.get(CACHE_DIR_ENV)
    if not explicit or _env_off():
        return
    path = default_cache_dir()
    if os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK):
        return
    try:
        os.makedirs(path, exist_ok=True)
        if os.access(path, os.W_OK | os.X_OK):
            return
        why = "a directory this user cannot write"
    except OSError as exc:
        why = "a file" if os.path.isfile(path) else (exc.strerror or type(exc).__name__)
    raise InputError(
        f"{CACHE_DIR_ENV} naming a directory for the compilation cache (created if missing)",
        f"{explicit!r} ({why})",
        f"Point {CACHE_DIR_ENV} at a directory, unset it (default ~/.cache/xla_cost/jax), "
        f"or turn the cache off with {NO_CACHE_ENV}=1.",
    )


def use_compilation_cache(enabled: bool = True) -> str | None:
    """Turns JAX's persistent compilation cache on (or off) for what xla_cost compiles.

    A second analysis of the same shapes, in a new process, then reads the
    compiled programs from disk instead of compiling them again. The cache is
    JAX's own (``jax_compilation_cache_dir``), kept in `default_cache_dir`,
    with every program cached however fast it compiled, up to
    `CACHE_MAX_BYTES`. A cache directory the user configured is used as it is;
    ``XLA_COST_NO_CACHE=1`` or ``enabled=False`` keeps the cache off (and
    turns off one xla_cost turned on earlier in the process). Being JAX's
    process-wide setting, it also serves the user's own jitted functions.

    While xla_cost owns the cache, programs compiled only to be analysed are
    cached by their analyses, beside it (``analyses/``, one small JSON file
    per program), not by their executables: a second analysis of the same
    programs reads them without compiling or loading anything.

    Args:
      enabled: True to turn the cache on, False to turn it off.

    Returns:
      The cache directory in use, or None when the cache is off.
    """
    path = _use_compilation_cache(enabled)
    _CACHE_STATE["dir"] = path if path is not None and path == _CACHE_STATE["owned"] else None
    return path


def _use_compilation_cache(enabled: bool) -> str | None:
    from jax.experimental.compilation_cache import compilation_cache

    configured = jax.config.jax_compilation_cache_dir
    owned = _CACHE_STATE["owned"]
    if configured is not None and configured != owned:
        return str(configured) if enabled and not _env_off() else None  # the user's own
    if not enabled or _env_off():
        if owned is not None:
            jax.config.update("jax_compilation_cache_dir", None)
            _CACHE_STATE["owned"] = None
            compilation_cache.reset_cache()
        return None
    check_cache_dir()
    path = default_cache_dir()
    if owned == path:
        return path
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        _LOG.info("compilation cache off: cannot create %s (%s)", path, exc)
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)
    _CACHE_STATE["owned"] = path
    compilation_cache.reset_cache()  # JAX decides once per process whether to use it
    return path


def device_kind() -> str:
    """The kind of the device compiled for: the active compile target's
    (`xla_cost.compiled.targets`), else the default device's, e.g.
    ``NVIDIA H100 80GB HBM3`` or ``cpu``."""
    target = targets.active()
    if target is not None:
        return target.gpu.description if target.gpu is not None and target.gpu.description else target.title
    return str(getattr(jax.devices()[0], "device_kind", jax.default_backend()))


def device_memory_bytes() -> int | None:
    """Memory a program may use on the device compiled for: the active
    target's share of its memory (`xla_cost.compiled.targets.CompileTarget.memory_fraction`),
    else what the default device can allocate (GPU/TPU ``bytes_limit``), else None."""
    target = targets.active()
    if target is not None:
        return int(target.memory_bytes * target.memory_fraction)
    stats = _safe_call(jax.devices()[0].memory_stats)
    if isinstance(stats, Mapping):
        return _as_count(stats.get("bytes_limit"))
    return None


def backend_name() -> str:
    """The platform compiled for: the active compile target's (``gpu``, ``tpu``),
    else the default backend's, e.g. ``cpu``, ``gpu`` or ``tpu``."""
    target = targets.active()
    return target.backend if target is not None else jax.default_backend()
