"""What a target compiler's program runs: its kernels, and the FLOP of the library calls XLA's analysis leaves out.

A GPU program hands its matrix products, convolutions and fused attention to
cuBLAS and cuDNN: ``custom-call`` instructions that XLA's cost analysis counts
as -1 FLOP, -1 byte and -1 second each (seen on a deviceless H100 compile with
jax 0.10.2 and on a real H200 with jax 0.11.2); a deviceless GPU compile gives
no ``cost_analysis()`` at all. `library_flops` counts those calls from their
shapes and attributes, under XLA's conventions; `module_costs` gives a
compiled program's figures (the target's own analysis, or XLA's run over the
optimized module, the library calls put in place of their -1s) and names the
source; `kernel_list` lists the kernels in schedule order, with their bytes,
``op_name``, runs, device groups and asynchronous pairs; `summarize_kernels`
counts them. Only the standard library is used (`module_costs` asks jax).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from xla_cost.count import attention
from xla_cost.compiled.collectives import HloCollective, parse_collectives
from xla_cost.compiled.products import (
    PALLAS_TARGET, Product, kernel_product, pallas_flops, pallas_splash, valid_taps as _valid_taps,
    window as _window_of,
)
from xla_cost.compiled.hlo import (
    CONTROL_FLOW, Array, AsyncChain, Computation, Instruction, Module, Shape, async_chains, attribute_value,
    computation_runs, describe_instruction,
    instruction_bytes, library_call_bytes, library_call_target, parse_module, parse_shape, Runs, split_top_level,
)
from xla_cost.compiled.kernel_summary import AsyncPair, KernelSummary, summarize_kernels
from xla_cost.compiled.offload import host_transfer_bytes
from xla_cost.errors import InputError

__all__ = [
    "LibraryCall", "LibraryFlops", "library_flops", "ModuleCosts", "module_costs", "Kernel", "kernel_list",
    "AsyncPair", "KernelSummary", "summarize_kernels", "CATEGORIES", "SOURCES",
]

FMA = 2
"""FLOP per multiply-add (XLA's convention)."""

CONV_ACTIVATION_FLOP: Mapping[str, int] = {
    "kNone": 0,
    "kRelu": 1,        # max(x, 0)
    "kRelu6": 1,       # clamp(0, x, 6): one ternary elementwise op
    "kElu": 2,         # compare, select (the expm1 is a transcendental)
    "kLeakyRelu": 3,   # compare, multiply by alpha, select
}
"""FLOP per output element of a fused convolution's activation: the HLO ops
XLA's cuDNN fusion pass matched, one FLOP per elementwise op (tanh, exp and
other transcendentals count 0 FLOP, as XLA counts them)."""

GEMM_EPILOGUE_FLOP: Mapping[str, int] = {
    "DEFAULT": 0,
    "BIAS": 1,   # add
    "RELU": 1,   # max(x, 0)
    "GELU": 8,   # jax.nn.gelu(approximate=True): x*x*x (2), *0.044715, +x, *sqrt(2/pi), +1, *0.5, *x
    "AUX": 0,    # the pre-activation also written out: no arithmetic
}
"""FLOP per output element of each word of a cuBLAS epilogue (``BIAS_RELU`` = 2)."""

CATEGORIES = ("fusion", "library", "collective", "copy", "other")
"""`Kernel.category` values."""

_NO_LAUNCH = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while", "call", "conditional",
    "after-all", "partition-id", "replica-id", "opt-barrier", "add-dependency", "domain",
})
"""Opcodes that launch nothing of their own (a called computation's kernels are listed where they run)."""


# ---------------------------------------------------------------------------
# Library calls


@dataclasses.dataclass(frozen=True)
class LibraryCall:
    """One library call of a program.

    Attributes:
      name: the HLO instruction's name.
      target: its ``custom_call_target``.
      computation: the computation that holds it.
      op_name: the ``op_name`` of its metadata.
      flops: FLOP of one execution; None where they could not be read.
      executions: runs per execution of the program (None: in a loop of unknown trip count).
      reason: why ``flops`` or ``executions`` is unknown ("" when both are known).
    """

    name: str
    target: str
    computation: str
    op_name: str
    flops: int | None
    executions: int | None
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class LibraryFlops:
    """The FLOP of a program's library calls, per execution of the program.

    Attributes:
      flops: the sum over the calls whose FLOP and runs are known, each times
        its runs; a lower bound while ``unknown`` is not empty.
      per_target: the same, per ``custom_call_target``.
      unknown: the calls whose FLOP could not be read (``name (op_name): why``).
      calls: every library call, in text order.
    """

    flops: int
    per_target: dict[str, int]
    unknown: tuple[str, ...] = ()
    calls: tuple[LibraryCall, ...] = ()


def library_flops(hlo_text: str) -> LibraryFlops:
    """The FLOP of every library call (a custom call that does arithmetic) of an
    optimized HLO module, from its operand and result shapes and attributes.

    A convolution (cuDNN forward, backward-input, backward-filter and the fused
    forward with bias and activation) is ``2 x batch x out features x in features
    per group x`` the (output position, kernel tap) pairs that read real input,
    all read as the forward convolution its ``window`` and ``dim_labels``
    describe: a backward-input call's result is that convolution's input, a
    backward-filter call's its kernel, so each costs what the forward does; a
    fused one adds one FLOP per output element for its bias, its side input,
    its scaling and its activation (`CONV_ACTIVATION_FLOP`). A cuBLAS gemm is
    ``2 x batch x M x N x K`` from its ``dot_dimension_numbers``, plus its
    epilogue (`GEMM_EPILOGUE_FLOP`) and its ``alpha``/``beta`` scaling. cuDNN
    fused attention is its two products (``2 x B x N x T x S x head dim``
    each; four in the backward pass) and its softmax, every ``T x S`` pair
    counted, a causal mask's too (`xla_cost.count.attention`, as the jaxpr counts it).
    A call in a loop counts once per iteration (`xla_cost.compiled.hlo.computation_runs`);
    anything else (Pallas kernels, unknown epilogues, a loop of unknown trip
    count) is named in ``unknown``, never counted as 0.

    Raises:
      InputError: ``hlo_text`` is not the text of an HLO module.
    """
    module = _module(hlo_text)
    return _library_flops(module, computation_runs(module))


def _library_flops(module: Module, runs: Mapping[str, Runs]) -> LibraryFlops:
    calls: list[LibraryCall] = []
    for computation in module.computations.values():
        shapes = {i.name: i.shape_text for i in computation.instructions}
        run = runs[computation.name]
        if not run.reachable:
            continue
        for instruction in computation.instructions:
            target = library_call_target(instruction)
            if target is None:
                continue
            flops, reason = _call_flops(instruction, target, shapes)
            if run.executions is None and not reason:
                reason = f"in a loop of unknown trip count ({', '.join(run.unknown_loops)})"
            calls.append(LibraryCall(instruction.name, target, computation.name, instruction.op_name, flops,
                                     run.executions, reason))
    per_target: dict[str, int] = {}
    for call in calls:
        if call.flops is not None and call.executions is not None:
            per_target[call.target] = per_target.get(call.target, 0) + call.flops * call.executions
    unknown = tuple(f"{call.name} ({call.op_name}): {call.target}: {call.reason}" for call in calls if call.reason)
    return LibraryFlops(sum(per_target.values()), per_target, unknown, tuple(calls))


def _module(hlo_text: Any) -> Module:
    if not isinstance(hlo_text, str):
        raise InputError("HLO text (compiled.as_text())", type(hlo_text).__name__,
                         "Pass the text of the compiled program: compiled.as_text().")
    module = parse_module(hlo_text)
    if module.entry is None:
        raise InputError("HLO text with an ENTRY computation", repr(hlo_text[:60]),
                         "Pass the text of the compiled program: compiled.as_text().")
    return module


def _operand_shapes(instruction: Instruction, shapes: Mapping[str, str]) -> list[Shape | None]:
    """Each operand's shape: the one printed beside it, else its instruction's."""
    found: list[Shape | None] = []
    for operand in split_top_level(re.sub(r"/\*.*?\*/", "", instruction.operands)):
        words = operand.split()
        name = words[-1].lstrip("%")
        text = " ".join(words[:-1]) if len(words) > 1 else shapes.get(name, "")
        found.append(parse_shape(text))
    return found


def _results(instruction: Instruction) -> list[Array]:
    """The result's arrays, a library's scratch space (a 1-D ``u8``/``s8``) left out."""
    shape = parse_shape(instruction.shape_text)
    if shape is None:
        return []
    elements = list(shape) if isinstance(shape, tuple) else [shape]
    return [e for e in elements if isinstance(e, Array)
            and not (e.dtype in ("u8", "s8") and len(e.dims) == 1 and isinstance(shape, tuple))]


def _backend_config(instruction: Instruction) -> dict[str, Any]:
    text = attribute_value(instruction.attributes, "backend_config")
    if not text:
        return {}
    try:
        config = json.loads(text)
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def _call_flops(instruction: Instruction, target: str, shapes: Mapping[str, str]) -> tuple[int | None, str]:
    """(FLOP of one execution, why unknown) of a library call."""
    try:
        if target.startswith("__cudnn$conv") and not target.endswith("Graph"):
            return _conv_flops(instruction, target, shapes), ""
        if target.startswith("__cublas$"):
            return _gemm_flops(instruction, shapes), ""
        if target.startswith("__cudnn$fmha"):
            return _attention_flops(instruction, target, shapes), ""
        if target == PALLAS_TARGET:
            return pallas_flops(instruction, shapes), ""
    except (ValueError, KeyError, TypeError, IndexError, ZeroDivisionError) as exc:  # _Unread among them
        return None, str(exc) or type(exc).__name__
    return None, "a library call whose FLOP are not modelled"


class _Unread(ValueError):
    """A library call's FLOP could not be read (the message says why)."""


def _array(shape: Shape | None, what: str) -> Array:
    if not isinstance(shape, Array):
        raise _Unread(f"the {what}'s shape not understood")
    return shape


def _conv_flops(instruction: Instruction, target: str, shapes: Mapping[str, str]) -> int:
    operands = _operand_shapes(instruction, shapes)
    results = _results(instruction)
    if len(operands) < 2 or not results:
        raise _Unread("fewer operands or results than a convolution has")
    result = results[0]
    if target == "__cudnn$convBackwardInput":
        lhs, rhs, out = result, _array(operands[1], "kernel"), _array(operands[0], "output gradient")
    elif target == "__cudnn$convBackwardFilter":
        lhs, rhs, out = _array(operands[0], "input"), result, _array(operands[1], "output gradient")
    elif target in ("__cudnn$convForward", "__cudnn$convBiasActivationForward"):
        lhs, rhs, out = _array(operands[0], "input"), _array(operands[1], "kernel"), result
    else:
        raise _Unread("a convolution call of a kind not modelled")
    labels = attribute_value(instruction.attributes, "dim_labels") or ""
    match = re.fullmatch(r"([a-z0-9]+)_([a-z0-9]+)->([a-z0-9]+)", labels)
    if match is None:
        raise _Unread(f"dim_labels {labels!r} not understood")
    lhs_labels, rhs_labels, out_labels = match.groups()
    spatial = sum(ch.isdigit() for ch in lhs_labels)
    if not (len(lhs_labels) == len(lhs.dims) and len(rhs_labels) == len(rhs.dims) == len(out.dims)):
        raise _Unread(f"dim_labels {labels!r} do not match the shapes")
    window = _window_of(attribute_value(instruction.attributes, "window") or "{}", spatial)
    groups = int(attribute_value(instruction.attributes, "feature_group_count") or 1)
    batch_groups = int(attribute_value(instruction.attributes, "batch_group_count") or 1)
    positions = 1
    for d in range(spatial):
        positions *= _valid_taps(
            lhs.dims[lhs_labels.index(str(d))], rhs.dims[rhs_labels.index(str(d))],
            out.dims[out_labels.index(str(d))], *(window[key][d] for key in ("stride", "pad", "lhs", "rhs")))
    batch = lhs.dims[lhs_labels.index("b")] // batch_groups
    in_features = lhs.dims[lhs_labels.index("f")] // groups
    out_features = out.dims[out_labels.index("f")]
    flops = FMA * batch * in_features * out_features * positions
    if target == "__cudnn$convBiasActivationForward":
        flops += math.prod(result.dims) * _conv_epilogue(instruction, len(operands))
    return flops


def _conv_epilogue(instruction: Instruction, operands: int) -> int:
    config = _backend_config(instruction).get("cudnn_conv_backend_config", {})
    mode = str(config.get("activation_mode", "kNone"))
    if mode not in CONV_ACTIVATION_FLOP:
        raise _Unread(f"activation {mode} not modelled")
    per_element = CONV_ACTIVATION_FLOP[mode] + (1 if operands >= 3 else 0)  # the bias add
    if float(config.get("conv_result_scale", 1)) != 1:
        per_element += 1
    side_scale = float(config.get("side_input_scale", 0))
    if operands >= 4 and side_scale != 0:
        per_element += 1 if side_scale == 1 else 2  # add, and scale
    return per_element


def _gemm_flops(instruction: Instruction, shapes: Mapping[str, str]) -> int:
    config = _backend_config(instruction).get("gemm_backend_config")
    if not isinstance(config, dict) or "dot_dimension_numbers" not in config:
        raise _Unread("no gemm_backend_config with dot_dimension_numbers")
    numbers = config["dot_dimension_numbers"]
    operands = _operand_shapes(instruction, shapes)
    if len(operands) < 2:
        raise _Unread("fewer than two operands")
    lhs, rhs = _array(operands[0], "left operand"), _array(operands[1], "right operand")
    contracting = [int(d) for d in numbers.get("lhs_contracting_dimensions", [])]
    batch_dims = [int(d) for d in numbers.get("lhs_batch_dimensions", [])]
    k = math.prod(lhs.dims[d] for d in contracting)
    batch = math.prod(lhs.dims[d] for d in batch_dims)
    m = math.prod(lhs.dims) // max(1, k * batch)
    n = math.prod(rhs.dims) // max(1, k * batch)
    out_elements = batch * m * n
    flops = FMA * out_elements * k
    per_element = 0
    for word in str(config.get("epilogue", "DEFAULT")).split("_"):
        if word not in GEMM_EPILOGUE_FLOP:
            raise _Unread(f"epilogue {config.get('epilogue')} not modelled")
        per_element += GEMM_EPILOGUE_FLOP[word]
    if float(config.get("alpha_real", 1)) != 1 or float(config.get("alpha_imag", 0)) != 0:
        per_element += 1
    beta = float(config.get("beta", 0))
    if beta != 0:
        per_element += 1 if beta == 1 else 2  # add the matrix, and scale it
    return flops + out_elements * per_element


def _attention_flops(instruction: Instruction, target: str, shapes: Mapping[str, str]) -> int:
    config = _backend_config(instruction).get("cudnn_fmha_backend_config", {})
    dims = config.get("intermediate_tensor_shape", {}).get("dimensions") if isinstance(config, dict) else None
    if not dims or len(dims) != 4:
        raise _Unread("no intermediate_tensor_shape [B, N, T, S] in its backend_config")
    b, n, t, s = (int(d) for d in dims)
    scores = b * n * t * s
    rows = b * n * t
    operands = _operand_shapes(instruction, shapes)
    backward = "Backward" in target
    if len(operands) < (5 if backward else 3):
        raise _Unread("fewer operands than fused attention has")
    qk_head = math.prod(_array(operands[0], "query").dims) // rows
    if backward:  # operands: Q, K, V, softmax statistics, dO, ...: dO is [B, T, N, v head]
        v_head = math.prod(_array(operands[4], "output gradient").dims) // rows
    else:
        results = _results(instruction)
        if not results:
            raise _Unread("no result")
        v_head = math.prod(results[0].dims) // rows
    return attention.attention_flops(scores, qk_head, v_head, backward, "Bias" in target)


# ---------------------------------------------------------------------------
# A compiled program's costs


SOURCES = ("cost_analysis", "cost_analysis+library", "module+library", "none")
"""`ModuleCosts.source` values."""


@dataclasses.dataclass(frozen=True)
class ModuleCosts:
    """A compiled program's cost figures, and where they come from.

    Attributes:
      costs: XLA's keys (``flops``, ``transcendentals``, ``bytes accessed``,
        ``optimal_seconds``); None where no analysis could be had (``reason``).
      source: one of `SOURCES`: ``cost_analysis`` (the target's own, as given: a
        TPU's); ``cost_analysis+library`` (a GPU's own, each library call's -1
        replaced by its FLOP and bytes, a TPU's its Pallas kernels' added); ``module+library`` (no own
        analysis, a GPU without its device: XLA's analysis over the optimized module, the
        calls replaced the same way); ``none``.
      unknown: what could not be counted (unread library calls; why no costs).
      notes: what the figures leave out (a loop body XLA counted once).
      library: the library calls' FLOP (`library_flops`), where read.
      reason: why ``costs`` is None ("" otherwise).
    """

    costs: dict[str, float] | None
    source: str
    unknown: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    library: LibraryFlops | None = None
    reason: str = ""


def module_costs(compiled: Any, platform: str | None = None, *, text: str | None = None) -> ModuleCosts:
    """The cost figures of a compiled program (``jax.jit(f).lower(...).compile()``).

    The target's own ``cost_analysis()`` where it gives FLOP and no library call
    is counted -1 in it (a TPU's, a CPU's). A GPU's analysis (none at all
    deviceless) counts each custom call as -1 FLOP, byte and second: its own, or
    else XLA's analysis over the optimized module (``runtime_executable().hlo_modules()``,
    with the CPU client), has the -1s taken out, the library calls' FLOP
    (`library_flops`) and bytes (`xla_cost.compiled.hlo.library_call_bytes`)
    put in and its time estimate dropped. XLA counts a loop's body once
    (``notes`` says so), and so are the library calls in it counted in these
    figures (`xla_cost.analysis.costs.best` adds the other iterations from the
    jaxpr, theirs with the rest); ``library`` counts them once per iteration.
    Fused attention's exps are put in its transcendentals.

    Args:
      compiled: a ``jax.stages.Compiled``.
      platform: jax's platform of its devices (``gpu``, ``tpu``); read from its shardings if not given.
      text: its HLO text, where it was read already (`xla_cost.compiled.printed.program_text`:
        the compiler's own print where ``as_text()`` fails); None: ``compiled.as_text()``.

    Returns:
      `ModuleCosts`; on failure its ``costs`` is None and ``reason`` says why.

    Raises:
      InputError: ``compiled`` is not a compiled program.
    """
    if not all(hasattr(compiled, key) for key in ("as_text", "cost_analysis", "runtime_executable")):
        raise InputError("a compiled program (jax.jit(f).lower(*args).compile())", type(compiled).__name__,
                         "Compile first: jax.jit(f).lower(*args).compile().")
    if text is None:
        text = _call(compiled.as_text) or ""
    module = parse_module(text) if isinstance(text, str) else None
    if module is None or module.entry is None:
        return _no_costs("the compiled program's HLO text could not be read")
    runs = computation_runs(module)
    library, counted, notes = _library_flops(module, runs), _custom_calls(module, runs), _loop_notes(module, runs)
    platform = platform or _platform(compiled)
    own = _as_dict(_call(compiled.cost_analysis))
    gpu = platform in ("gpu", "cuda", "rocm")
    if own is not None and not gpu and PALLAS_TARGET in library.per_target:
        return _with_pallas(own, module, library, notes)
    if own is not None and own.get("flops", -1) >= 0 and not (counted and gpu):
        return ModuleCosts(own, "cost_analysis", library.unknown, notes, library)
    if own is not None and gpu and "flops" in own:
        raw, source = own, "cost_analysis+library"
    else:
        raw, reason = _module_analysis(compiled)
        if raw is None:
            return _no_costs(reason, library)
        source = "module+library"
    once = computation_runs(module, loops_once=True)
    costs, unknown = _with_library(raw, counted, _library_flops(module, once), text)
    exps = _library_transcendentals(module, once)
    if exps:
        costs["transcendentals"] = costs.get("transcendentals", 0.0) + exps
    return ModuleCosts(costs, source, unknown, notes, library)


def _with_pallas(own: Mapping[str, float], module: Module, library: LibraryFlops,
                 notes: tuple[str, ...]) -> ModuleCosts:
    """A TPU's own analysis, which counts none of a Pallas kernel's work (libtpu 0.0.52), with their
    FLOP and exps put in, once per loop body as XLA counts the rest, its time estimate dropped."""
    once = computation_runs(module, loops_once=True)
    costs = {key: value for key, value in own.items() if key != "optimal_seconds"}
    costs["flops"] = costs.get("flops", 0.0) + _library_flops(module, once).per_target.get(PALLAS_TARGET, 0)
    exps = _library_transcendentals(module, once)
    if exps:
        costs["transcendentals"] = costs.get("transcendentals", 0.0) + exps
    return ModuleCosts(costs, "cost_analysis+library", library.unknown, notes, library)


def _library_transcendentals(module: Module, runs: Mapping[str, Runs]) -> int:
    """The transcendentals of the library calls XLA's analysis leaves out: the exps
    of cuDNN's fused attention and the splash kernels (`xla_cost.count.attention.attention_transcendentals`),
    each call times ``runs``; a call whose shape cannot be read adds none (its FLOP
    are named unknown)."""
    total = 0
    for computation in module.computations.values():
        run, shapes = runs[computation.name], {i.name: i.shape_text for i in computation.instructions}
        if not run.reachable or run.executions is None:
            continue
        for instruction in computation.instructions:
            target = library_call_target(instruction)
            if target == PALLAS_TARGET and (call := pallas_splash(instruction, shapes)):
                total += call.transcendentals * run.executions
            if target is None or not target.startswith("__cudnn$fmha"):
                continue
            config = _backend_config(instruction).get("cudnn_fmha_backend_config", {})
            dims = config.get("intermediate_tensor_shape", {}).get("dimensions") if isinstance(config, dict) else None
            if dims and len(dims) == 4:
                scores = math.prod(int(d) for d in dims)
                total += attention.attention_transcendentals(scores, "Backward" in target) * run.executions
    return total


def _no_costs(reason: str, library: LibraryFlops | None = None) -> ModuleCosts:
    return ModuleCosts(None, "none", (reason,), (), library, reason)


def _call(method: Any) -> Any:
    try:
        return method()
    except Exception:  # noqa: BLE001 - a backend without the analysis: unknown
        return None


def _as_dict(raw: Any) -> dict[str, float] | None:
    if isinstance(raw, (list, tuple)) and len(raw) == 1:
        raw = raw[0]
    if not isinstance(raw, Mapping):
        return None
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float))}


def _platform(compiled: Any) -> str:
    import jax  # noqa: PLC0415 - only module_costs needs jax

    shardings = jax.tree.leaves([_call(lambda: compiled.input_shardings), _call(lambda: compiled.output_shardings)])
    devices = [d for s in shardings for d in getattr(s, "device_set", ())]
    return str(getattr(devices[0], "platform", "")) if devices else ""


def _module_analysis(compiled: Any) -> tuple[dict[str, float] | None, str]:
    """XLA's cost analysis over the optimized module(s), summed; (None, why) on failure."""
    try:
        import jax  # noqa: PLC0415 - only this reader needs jax
        from jax._src.lib import _jax  # noqa: PLC0415 - jax's binding of XLA's HloCostAnalysis

        client = jax.devices("cpu")[0].client
        totals: dict[str, float] = {}
        for hlo_module in compiled.runtime_executable().hlo_modules():
            for key, value in _jax.hlo_module_cost_analysis(client, hlo_module).items():
                totals[key] = totals.get(key, 0.0) + float(value)
    except Exception as exc:  # noqa: BLE001 - jax's own error, made one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return None, f"XLA's cost analysis over the optimized module failed: {first}"
    return totals, ""


def _custom_calls(module: Module, runs: Mapping[str, Runs]) -> int:
    """The custom calls XLA's analysis visits (each once, each -1): those of every
    computation reachable from ENTRY."""
    return sum(1 for computation in module.computations.values() if runs[computation.name].reachable
               for instruction in computation.instructions if instruction.opcode == "custom-call")


def _loop_notes(module: Module, runs: Mapping[str, Runs]) -> tuple[str, ...]:
    notes: list[str] = []
    for computation in module.computations.values():
        if not runs[computation.name].reachable:
            continue
        for instruction in computation.instructions:
            if instruction.opcode != "while":
                continue
            trip = re.search(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)', instruction.attributes)
            if trip is None:
                notes.append(f"loop {describe_instruction(instruction)}: trip count unknown; XLA's analysis "
                             "counts its body once")
            elif int(trip.group(1)) > 1:
                notes.append(f"loop {describe_instruction(instruction)} runs {trip.group(1)} times; XLA's "
                             "analysis counts its body once (its library calls too)")
    return tuple(notes)


def _with_library(raw: Mapping[str, float], counted: int, library: LibraryFlops,
                  text: str) -> tuple[dict[str, float], tuple[str, ...]]:
    """``raw`` with each custom call's -1 taken out and the library calls' FLOP and bytes put in."""
    costs = {k: v for k, v in raw.items() if not (counted and "{" in k)}
    unknown = list(library.unknown)
    if counted:
        costs.pop("optimal_seconds", None)  # -1 per call: the estimate is no estimate
    if "flops" in costs or library.flops or counted:
        costs["flops"] = costs.get("flops", 0.0) + counted + library.flops
    if counted:
        moved = library_call_bytes(text)
        if "bytes accessed" in costs and moved.bytes is not None:
            costs["bytes accessed"] += counted + moved.bytes
        else:
            costs.pop("bytes accessed", None)
            unknown.append("bytes accessed: the library calls' bytes could not be read "
                           f"({', '.join(moved.unknown) or 'a loop of unknown trip count'})")
    return costs, tuple(unknown)


# ---------------------------------------------------------------------------
# The kernel list


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One kernel (or library call, or collective) a compiled program launches.

    Attributes:
      name: the HLO instruction's name (of the ``*-start`` for an asynchronous pair).
      category: one of `CATEGORIES` (``other``: an op left outside any fusion).
      kind: the fusion's kind (``kLoop``, ``kInput``, ``kOutput``, ``kCustom``), the
        library call's target, the collective's kind (``all-reduce``), or the opcode.
      opcode, computation: the instruction's opcode and the computation that holds it.
      op_name: the ``op_name`` of its metadata (the module path), or of the first
        fused instruction that has one; "" if none.
      bytes: what it reads and writes (operands and result, as
        `xla_cost.compiled.work.work_bytes` counts them); None where a shape is unknown.
      executions: runs per execution of the program (loops multiplied; None: unknown).
      backend: a fusion's backend kind (``__triton_nested_gemm_fusion``); "" if none.
      flops: a library call's FLOP per run (`library_flops`); None otherwise or unknown.
      asynchronous, done, overlaps: the start of a start/done pair, the name of its
        done, and the kernels the schedule runs between the two.
      groups, group_size, comm_bytes: a collective's device groups (global ids; a
        collective-permute's pairs), devices per group, and its buffer (`HloCollective.bytes`).
      product: the matrix products it runs (`xla_cost.compiled.products.Product`:
        the largest one's shape, all of their FLOP); None where it runs none.
      host_bytes: the bytes it moves over the link between the device and its
        host's memory (`xla_cost.compiled.shapes.HOST_SPACE`: an offloaded
        activation written to the host or read back, `xla_cost.compiled.offload.host_transfer_bytes`);
        0 where it moves none, None where a shape is unknown. ``bytes`` is
        then its side in the device's memory.
    """

    name: str
    category: str
    kind: str
    opcode: str
    computation: str
    op_name: str
    bytes: int | None
    executions: int | None
    backend: str = ""
    flops: int | None = None
    asynchronous: bool = False
    done: str = ""
    overlaps: tuple[str, ...] = ()
    groups: tuple[tuple[int, ...], ...] | None = None
    group_size: int | None = None
    comm_bytes: int | None = None
    product: Product | None = None
    host_bytes: int | None = 0

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain JSON-able values."""
        data = dataclasses.asdict(self)
        data["product"] = None if self.product is None else self.product.to_dict()
        data["overlaps"] = list(self.overlaps)
        data["groups"] = None if self.groups is None else [list(g) for g in self.groups]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Kernel:
        """The inverse of `to_dict`."""
        fields = _field_names(cls)
        values = {key: value for key, value in data.items() if key in fields}
        values["overlaps"] = tuple(values.get("overlaps") or ())
        if values.get("groups") is not None:
            values["groups"] = tuple(tuple(int(i) for i in g) for g in values["groups"])
        if values.get("product") is not None:
            values["product"] = Product.from_dict(values["product"])
        return cls(**values)


def kernel_list(hlo_text: str) -> tuple[Kernel, ...]:
    """The kernels a scheduled HLO module (``compiled.as_text()``) launches, in the order it runs them.

    From ENTRY, instruction by instruction; a loop's condition and body, a
    called computation and a conditional's branches are listed where they run
    (each kernel once, with how often it runs). Parameters, tuples, bitcasts
    and the like launch nothing and are left out, as are the ``*-done`` of
    asynchronous pairs: their start names its done and the kernels run in
    between. Collectives carry their device groups and buffer from
    `xla_cost.compiled.collectives.parse_collectives`.

    Raises:
      InputError: ``hlo_text`` is not the text of an HLO module.
    """
    module = _module(hlo_text)
    runs = computation_runs(module)
    found, _notes = parse_collectives(hlo_text)
    collectives = {(c.computation, c.name): c for c in found}
    kernels: list[Kernel] = []

    def visit(name: str, active: frozenset[str]) -> None:
        computation = module.computations[name]
        shapes = {i.name: i.shape_text for i in computation.instructions}
        chains = async_chains(computation)
        waiting: dict[str, int] = {}  # done name -> index of its start in kernels
        for instruction in computation.instructions:
            opcode = instruction.opcode
            if instruction.name in waiting:
                start = waiting.pop(instruction.name)
                names = tuple(k.name for k in kernels[start + 1:])
                kernels[start] = dataclasses.replace(kernels[start], overlaps=names)
            if opcode in CONTROL_FLOW:
                for _, callee in instruction.callees:
                    if callee in module.computations and callee not in active:
                        visit(callee, active | {callee})
                continue
            if opcode in _NO_LAUNCH or opcode.endswith(("-done", "-update")):
                continue
            kernel = _kernel(module, computation, instruction, shapes, runs[name].executions,
                             collectives.get((name, instruction.name)), chains.get(instruction.name, AsyncChain()))
            if kernel is not None:
                if kernel.done:
                    waiting[kernel.done] = len(kernels)
                kernels.append(kernel)

    visit(module.entry, frozenset({module.entry}))
    return tuple(kernels)


def _kernel(module: Module, computation: Computation, instruction: Instruction, shapes: dict[str, str],
            executions: int | None, collective: HloCollective | None, chain: AsyncChain) -> Kernel | None:
    opcode, done = instruction.opcode, chain.done
    body, body_shapes = instruction, shapes
    if opcode == "async-start":  # the computation it wraps runs one op: describe that op
        callee = next((c for k, c in instruction.callees if k == "calls"), "")
        wrapped = module.computations.get(callee)
        if wrapped is not None and wrapped.root() is not None:
            body, body_shapes = wrapped.root(), {i.name: i.shape_text for i in wrapped.instructions}
    target = library_call_target(body)
    if body.opcode == "custom-call" and target is None:
        return None  # an annotation (Sharding, ...): no work
    result = next((i.shape_text for i in computation.instructions if i.name == done), None) if done else None
    sized = dataclasses.replace(instruction, shape_text=result) if result else instruction
    if chain.fed:  # the op reads what its updates hand it as well
        fed = ", ".join("%" + name for name in chain.fed)
        sized = dataclasses.replace(sized, operands=f"{instruction.operands}, {fed}" if instruction.operands else fed)
    size = instruction_bytes(sized, shapes, module if opcode == "fusion" or opcode.startswith("dynamic-") else None)
    common: dict[str, Any] = dict(
        name=instruction.name, opcode=opcode, computation=computation.name, bytes=size, executions=executions,
        op_name=instruction.op_name or body.op_name or _fused_op_name(module, body),
        asynchronous=bool(done), done=done, host_bytes=host_transfer_bytes(sized, shapes, body.opcode))
    if collective is not None:
        return Kernel(category="collective", kind=collective.kind, groups=collective.groups,
                      group_size=collective.group_size, comm_bytes=collective.bytes, **common)
    if body.opcode.startswith(("send", "recv")):
        return Kernel(category="collective", kind=body.opcode.removesuffix("-start"), **common)
    common["product"] = kernel_product(module, body, body_shapes)
    if body.opcode == "fusion":
        backend = _backend_config(body).get("fusion_backend_config", {})
        return Kernel(category="fusion", kind=attribute_value(body.attributes, "kind") or "",
                      backend=str(backend.get("kind", "")) if isinstance(backend, dict) else "", **common)
    if target is not None:
        return Kernel(category="library", kind=target, flops=_call_flops(body, target, body_shapes)[0], **common)
    if body.opcode in ("copy", "copy-start"):
        return Kernel(category="copy", kind="copy", **common)
    return Kernel(category="other", kind=body.opcode, **common)


def _fused_op_name(module: Module, instruction: Instruction) -> str:
    """The first ``op_name`` inside the computations ``instruction`` calls."""
    for _, callee in instruction.callees:
        called = module.computations.get(callee)
        for inner in called.instructions if called is not None else ():
            if inner.op_name:
                return inner.op_name
    return ""


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    """The fields of dataclass ``cls`` by name, read once (`Kernel.from_dict` reads a
    program's kernels by the thousand: the validation's 141 programs, 117,155)."""
    return frozenset(field.name for field in dataclasses.fields(cls))
