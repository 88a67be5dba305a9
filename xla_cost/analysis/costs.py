"""The figures of each phase: XLA's compiled count where it is whole, corrected
for the loop iterations it misses, the jaxpr's count where XLA has none or
leaves library calls out, unknown where neither is whole; and the derived
phases (``backward = grad - forward``) by their formulas.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from xla_cost.analysis.model_flops import attention_flops, causal_attention, padding_flops, window_flops
from xla_cost.analysis.programs import Program
from xla_cost.analysis.report import SOURCED, Collective, MemoryStats, PhaseCosts
from xla_cost.analysis.report_tables import FUSION_NOTE_GAP
from xla_cost.compiled import xla
from xla_cost.compiled.collectives import group_axes
from xla_cost.count.attribution import REMAINDER, module_tree, op_name_path, owner
from xla_cost.count.hoisted import Hoisted, hoisted_invariants
from xla_cost.count.interpret import JaxprCount
from xla_cost.count.registry import MATRIX_PRODUCTS
from xla_cost.count.random_rules import RANDOM_PRIMITIVES, THREEFRY_UNROLLED_WORD_OPS, THREEFRY_WORD_OPS
from xla_cost.parallel import sharding as _sharding
from xla_cost.step import phases

__all__ = [
    "LIBRARY_TOLERANCE", "best", "library_flops", "best_sharded", "collective_rows",
    "expanded_model_flops", "phase_costs", "all_phases", "with_hoisted", "without_negatives",
    "conversions", "MATMULS", "precision_note", "NARROW_FLOATS", "emulates_narrow_floats", "flop_gap_reason",
]


RECOMPUTE_SHARE = 0.05
"""How close to none or all of a recomputation XLA's count must fall short of the jaxpr's for
the note to say XLA kept it or removed it; between, it gives the shares (XLA's count also
differs from the jaxpr's by its fusions' own duplication, a few percent)."""


def describe_loops(counted: JaxprCount) -> str:
    loops = counted.repeated_loops
    kinds = ", ".join(loop.describe() for loop in loops[:3])  # a nested loop with those it runs inside
    return kinds + (f" and {len(loops) - 3} more" if len(loops) > 3 else "")


def best(
    phase: str, key: str, xla_value: int | None, counted: JaxprCount,
    sharded: xla.CompiledPhase | None = None, devices: int = 1, *, kept_loops: bool | None = None,
) -> tuple[int | None, str, str | None]:
    """The best figure for ``key`` of one phase: (value, source, note or None).

    XLA's figure stands unless its program has loops that run more than once:
    XLA counts a loop body once, so the iterations it misses (the jaxpr count
    with trip counts minus the jaxpr count with every body once) are added
    (source ``xla+loops``). Without an XLA figure, the jaxpr count stands in
    when it is complete (``jaxpr``); with primitives that have no rule it is
    ``unknown`` (None), never the counted part.

    ``kept_loops``: whether the compiled program kept a ``while`` loop
    (`xla_cost.compiled.xla.CompiledPhase.has_loops`): False, XLA unrolled
    every loop and counted every iteration; None (not read), the figure nearer
    to XLA's says, which XLA's fusions can mislead (a fused body's duplicated
    producers put XLA's count of one body nearer the unrolled total).
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
        return best_sharded(phase, key, xla_value, counted, sharded, devices)
    if kept_loops is False or (kept_loops is None and abs(xla_value - true) < abs(xla_value - once)):
        return xla_value, "xla", (
            f"{phase}: XLA's {key} already include the loop iterations "
            f"({describe_loops(counted)}): it unrolled them; no correction"
        )
    return xla_value + extra, "xla+loops", (
        f"{phase}: XLA counts a loop body once ({describe_loops(counted)}); "
        f"{key} corrected from XLA's {xla_value:,} to {xla_value + extra:,}"
    )


LIBRARY_TOLERANCE = 0.02
"""How far XLA's FLOP may be from the jaxpr count before a program with
library calls is taken to have left their FLOP out."""


def library_flops(
    phase: str, value: int | None, source: str, note: str | None, counted: JaxprCount,
    compiled: xla.CompiledPhase, devices: int = 1, random: float = 0,
) -> tuple[int | None, str, str | None]:
    """The FLOP of a program whose compiled HLO hands work to libraries.

    ``devices``: the devices the jaxpr's count is shared over, XLA's figure being one
    device's (`Program.shared`). ``random``: the most a target's count may exceed the jaxpr's by its random
    numbers (`random_allowance`), which `random_note` names instead of the
    compiler's added work.

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
    expected = true / devices  # the devices the jaxpr's count is shared over (`phase_costs`)
    if value is not None and expected and abs(value - expected) <= LIBRARY_TOLERANCE * expected:
        return value, source, note
    if compiled.target is not None and value is not None:  # a target's own count has its library calls in it
        if expected and 0 <= value - expected <= random / devices:  # the random numbers' (`random_note`)
            return value, source, note
        if devices > 1 and abs(value - true) <= LIBRARY_TOLERANCE * true:  # every device runs all of it (a
            return value, source, note  # replicated update), as the table's "XLA x N / jaxpr" says: no added work
        return value, source, note if not expected else "; ".join(filter(None, (note, (
            f"{phase}: the {compiled.target} program's flops ({value:,}, {compiled.costs.source}) are "
            f"{(value - expected) / expected:+.1%} from the jaxpr count ({round(expected):,}"
            + (f", the step's {true:,} over {devices} devices" if devices > 1 else "") + "): its compiler "
            "adds work (split-K reductions, padding, collectives' adds) or removes it (simplification)"))))
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


NARROW_FLOATS = frozenset({"bfloat16", "float16"})
"""The 16-bit floats XLA's CPU compiler computes in float32 (`emulates_narrow_floats`)."""

_EMULATION = ("the CPU's compiler emulates 16-bit float arithmetic in float32, a convert around each operation, and "
              "counts them as FLOP (a GPU's or TPU's compile computes in bfloat16: --target)")


def emulates_narrow_floats(*dtypes: str) -> bool:
    """Whether the program compiles for the CPU and its parameters or computation (``dtypes``, names
    such as ``bfloat16`` or ``bfloat16/float32``) hold a 16-bit float, which XLA's CPU compiler
    computes in float32: it converts around each operation and its cost analysis counts every
    convert as a FLOP (measured, jax 0.10.2: Llama 3's prefill at D 64, L 2, T 16 in bfloat16,
    compiled without fusion, 353,437 FLOP above the jaxpr's, its HLO 352,816 more convert
    elements than the jaxpr's converts; the same model in float32, 2,653)."""
    return xla.backend_name() == "cpu" and any(
        part in NARROW_FLOATS for dtype in dtypes for part in str(dtype or "").split("/"))


def flop_gap_reason(value: int, true: int, emulated: bool, unfused: int | None = None,
                    tolerance: float = 0.02) -> str:
    """Why XLA's FLOP count of a program (``value``) differs from its jaxpr count (``true``): the
    one place `fusion_gap_note` (`xla_cost.analyze`'s phases) and `step_checks.fusion_note`
    (`xla_cost.analyze_step`'s step) read it from. ``emulated``: the CPU computes the program's
    16-bit floats in float32 (`emulates_narrow_floats`). ``unfused``: XLA's count of the program
    compiled without fusion, where measured: the difference from it is XLA's fusions computing
    cheap producers again; the rest (beyond ``tolerance`` of ``true``) is the CPU's emulation
    where ``emulated``, else XLA's own rewriting. Without it, the gap is said to be the emulation
    (with fusions adding to it) where ``emulated`` and above, the fusions where above, XLA's
    simplification where below."""
    if unfused is not None:
        rest = unfused - true
        said = (f"compiled without fusion XLA counts {unfused:,} ({rest / true:+.1%}), so {value - unfused:,} FLOP "
                "are XLA's fusions computing cheap producers (normalisations, broadcasts, masks) again inside each "
                "fusion that reads them, and counting every copy")
        if abs(rest) <= tolerance * true:
            return said
        if emulated and rest > 0:
            return said + f"; the rest, {rest:,} FLOP, is because {_EMULATION}"
        return said + ("; the rest is XLA's own rewriting of the program (simplification, common subexpressions, "
                       "its own expansion of some operations)")
    if value > true and emulated:
        return _EMULATION + "; XLA's fusions computing cheap producers again add to it"
    if value > true:
        return ("XLA's fusions compute cheap producers (normalisations, broadcasts, masks, an activation's "
                "derivative) again inside each fusion that reads them and count every copy, which the jaxpr counts "
                "once (more on narrow layers)")
    return ("XLA's simplification passes compute fewer operations than the program writes (a multiplication by a "
            "constant folded into another, an expression computed once for several uses), which the jaxpr counts "
            "as written")


def fusion_gap_note(
    phase: str, value: int | None, source: str, counted: JaxprCount, compiled: xla.CompiledPhase | None,
    narrow: bool = False,
) -> list[str]:
    """A note where XLA's CPU figure for a program (its headline) is more than `FUSION_NOTE_GAP`
    from the jaxpr count for none of the reasons another note gives (loops XLA kept, remat,
    library calls; a target's own notes; a loop XLA unrolled whole is its program's, as the
    jaxpr counts it: recurrentgemma's ``lax.scan(unroll=128)`` over 32 steps): above it, XLA's fusions duplicating cheap producers, as
    measured (`docs/conventions.md`: a ViT of width 32, its backward +16%, the GeLU's and the
    LayerNorms' backward passes), and in a step of 16-bit floats (``narrow``: `emulates_narrow_floats`),
    the CPU's emulation of their arithmetic in float32 (Adam on bfloat16 parameters: the update 3x the
    jaxpr's, converts around each operation); below it, XLA's simplifications (Adafactor's update, -5.6%).
    The reason is `flop_gap_reason`'s, as `analyze_step`'s note's."""
    true = counted.total.flops
    if (compiled is None or compiled.target is not None or value is None or source != "xla" or not true
            or counted.unsupported or (counted.loops and compiled.has_loops is not False)
            or counted.recomputed.flops or compiled.library_calls
            or abs(value - true) <= FUSION_NOTE_GAP * true):
        return []
    why = flop_gap_reason(value, true, narrow)
    return [f"{phase}: XLA's flops ({value:,}) are {(value - true) / true:+.1%} from the jaxpr count ({true:,}): "
            f"{why}; the per-layer rows add up to the jaxpr count"]


def cpu_dense_excess(value: int | None, source: str, counted: JaxprCount) -> int:
    """The most XLA's CPU figure ``value`` holds beyond the model's for its dense form of the grouped
    products: what that form adds (`JaxprCount.dense_expansion`) where the figure exceeds the jaxpr
    count by more than half of it, else 0 (`densified_flops`'s test)."""
    expansion, true = counted.dense_expansion.flops, counted.total.flops
    if not expansion or value is None or source not in ("xla", "xla+loops") or value - true <= expansion / 2:
        return 0
    return expansion


def densified_flops(
    phase: str, value: int | None, source: str, note: str | None, counted: JaxprCount,
) -> tuple[int | None, str, str | None]:
    """The FLOP of a program whose compiler made its grouped products dense.

    The weight gradient of a depthwise convolution (one input channel a group) is a
    convolution with ``batch_group_count`` G, the channels; ``jax.lax.ragged_dot`` (a
    mixture of experts' grouped matmul) multiplies each group of rows by its own one of
    G matrices. XLA's CPU compiler makes both dense, G times their products (measured,
    jax 0.10.2: a 3 x 3 depthwise convolution of 96 channels, the gradient program 46.9x
    the jaxpr's count; 48 groups of 2 channels, or 4 of 24, no change; a ragged_dot of 4
    groups 4.2x). Where XLA's figure exceeds a complete jaxpr count by more than half of
    what that would add (`JaxprCount.dense_expansion`), the expansion is the CPU's, not
    the model's: the jaxpr count stands (XLA's stays in ``xla_flops``), and a note says so, with
    the ratio to the digits that tell it from 1 and the part of the difference that is XLA's own
    (fusions, rewriting) where the dense form adds less; where that form is under half of it
    (AlgoPerf's Conformer: 1,785,877 FLOP, the form 190,464), the note does not say the CPU made it,
    only that it is that small a part of the difference at most.
    """
    expansion, true = cpu_dense_excess(value, source, counted), counted.total.flops
    if not expansion:
        return value, source, note
    what = "the grouped products (a depthwise convolution's weight gradient, a ragged_dot's groups)"
    if counted.unsupported:
        return value, source, "; ".join(filter(None, (note, (
            f"{phase}: XLA's flops ({value:,}) include its CPU compiler's dense form of {what} (up to "
            f"{expansion:,} FLOP more than the model's), which the jaxpr count, incomplete here, cannot replace"))))
    gap, own = value - true, "XLA's own (its fusions computing cheap producers again, its rewriting of the program)"
    if expansion >= gap / 2:  # the dense form is the difference, or most of it: the CPU made it
        said = (f"{phase}: XLA's CPU compiler made {what} dense, G x their products: its flops ({value:,}) are "
                f"{_times(value / true)} the jaxpr count" + (f", {gap:,} more: {expansion:,} the dense form's, the "
                f"other {gap - expansion:,} {own}" if gap > expansion else "") + "; the expansion is the CPU's")
    else:  # the dense form a minority of the difference at most: not what the difference is
        said = (f"{phase}: XLA's CPU compiler makes {what} dense, G x their products, up to {expansion:,} FLOP more "
                f"than the model's: its flops ({value:,}) are {_times(value / true)} the jaxpr count, {gap:,} more, "
                f"of which that form is {expansion / gap:.0%} at most; the rest, {gap - expansion:,} FLOP or more, "
                f"is {own}, as in a program of no grouped product; neither is the model's")
    return true, "jaxpr", "; ".join(filter(None, (note, (
        f"{said}: using the jaxpr count ({true:,}); a target's compiler (--target) gives its own program's"))))


def _times(ratio: float) -> str:
    """A ratio above 1 as ``1.046x``, ``4.20x``, ``46.9x``: with the digits that tell it from 1 (two of
    what it is above 1 where that is under 1), not ``1.0x`` for 4.6% more."""
    if ratio >= 10:
        return f"{ratio:.1f}x"
    above = ratio - 1
    digits = 2 if above >= 1 or above <= 0 else max(2, 1 - math.floor(math.log10(above)))
    return f"{ratio:.{digits}f}x"


def expanded_model_flops(
    phase: str, flops: int | None, source: str, counted: JaxprCount, devices: int,
) -> tuple[int, str] | None:
    """The model FLOP of a compiled program that computes its grouped products densely, where
    `densified_flops` leaves its figure standing (a target's compiler: that is its program's
    real work; a mesh's per-device program), with the note saying so; None where it does not.

    The same rule as `densified_flops`: XLA's figure above a complete jaxpr count by more than
    half of what the dense form adds (`JaxprCount.dense_expansion`, G - 1 times each grouped
    product). The program really computes G x those products (hardware FLOP: ``flops``), but
    the model's arithmetic (MFU's numerator, ``model_flops``) is the jaxpr's count, one
    product per group (measured, jax 0.10.2, an H100 target: a ragged_dot of 32 groups,
    32.2x the jaxpr's count).
    """
    expansion = counted.dense_expansion.flops / devices
    true = counted.total.flops / devices
    if (not expansion or flops is None or counted.unsupported or source not in ("xla", "xla+loops")
            or flops - true <= expansion / 2):
        return None
    model = round(true)
    return model, (
        f"{phase}: the compiled program computes the grouped products (a depthwise convolution's weight "
        f"gradient, a ragged_dot's groups) densely, G x their products: its flops ({flops:,}, {_times(flops / true)} "
        f"the jaxpr count) are the hardware's work (flops, hardware_flops); model_flops (MFU) is the model's "
        f"arithmetic, the jaxpr count ({model:,})")


def best_sharded(
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
            f"{describe_loops(counted)}): no correction"
        )
    extra = round((true - once) / devices)
    return xla_value + extra, "xla+loops", (
        f"{phase}: XLA counts a loop body once ({describe_loops(counted)}); per-device {key} "
        f"corrected from {xla_value:,} to {xla_value + extra:,}: the jaxpr's missed iterations "
        f"split over the {devices} devices"
    )


def collective_rows(
    compiled: xla.CompiledPhase | None, plan: _sharding.ShardingPlan | None, modules: Sequence[str],
    root: str | Sequence[str] = "", select: Callable[[str], bool] | None = None,
) -> tuple[tuple[Collective, ...], list[str]]:
    """The compiled program's collectives as report rows, grouped by kind, size,
    group and layer, with their runs per step; with ``select``, only those
    whose HLO ``op_name`` it accepts (a part of a user's step)."""
    if compiled is None or plan is None or compiled.collectives is None:
        return (), []
    rows: dict[tuple[Any, ...], Collective] = {}
    tree = module_tree(modules)
    for c in compiled.collectives:
        if select is not None and not select(c.op_name):
            continue
        axes = group_axes(c.groups, plan.sizes) if c.groups is not None else ()
        row = owner(op_name_path(c.op_name, root, tree), modules)
        layer = "" if row == REMAINDER else row
        row = Collective(c.kind, tuple(axes), c.group_size, c.bytes, c.executions, layer)
        before = rows.get(row.key())
        if before is not None:
            runs = None if before.executions is None or c.executions is None else before.executions + c.executions
            row = dataclasses.replace(before, executions=runs)
        rows[row.key()] = row
    return tuple(rows.values()), list(compiled.collective_notes)


def phase_costs(
    name: str, program: Program, plan: _sharding.ShardingPlan | None = None,
    modules: Sequence[str] = (), root: str = "", attention_convention: str = "full",
    padded: Sequence[tuple[frozenset[str], float]] = (), jaxpr_model: bool = False,
) -> tuple[PhaseCosts, list[str]]:
    """The best figures of one program, XLA's raw and the jaxpr's beside them, and its notes;
    ``padded``: the routed experts whose capacity padding is no model FLOP (`padding_flops`);
    ``jaxpr_model``: model and hardware FLOP from the jaxpr even without recomputation here (another
    program of the step recomputes: a derived phase, backward = grad - forward, subtracts like from like).
    The jaxpr's figures are divided by the devices its count is shared over (`Program.shared`: the
    plan's unless the program says) to compare with XLA's per-device ones."""
    counted, compiled = program.counted, program.compiled
    devices = program.shared if program.shared is not None else plan.devices if plan is not None else 1
    costs = compiled.costs if compiled is not None else xla.XlaCosts(None, None, None)
    notes: list[str] = [f"{name}: {note}" for note in (compiled.notes if compiled is not None else ())]
    values, sources = {}, {}
    random = sum(e.cost.flops for e in counted.equations if e.primitive in RANDOM_PRIMITIVES)
    for key in SOURCED:
        value, source, note = best(
            name, key, getattr(costs, key), counted, compiled if plan is not None else None,
            devices, kept_loops=compiled.has_loops if compiled is not None else None,
        )
        if key == "flops" and compiled is not None and compiled.library_calls:
            value, source, note = library_flops(name, value, source, note, counted, compiled, devices,
                                                random_allowance(name, random))
        if key == "flops" and compiled is not None and compiled.target is None and plan is None:
            value, source, note = densified_flops(name, value, source, note, counted)
        values[key], sources[key] = value, source
        notes += [note] if note else []
        if compiled is not None and source == "jaxpr" and getattr(costs, key) is None:
            reasons = "; ".join(costs.unknown_reasons) or "no figure"
            notes.append(f"{name}: XLA gave no {key} figure ({reasons}); using the jaxpr count ({value:,})")
    if counted.unsupported and sources.get("flops") in ("xla", "xla+loops") and compiled is not None:
        rule_less = ", ".join(f"{prim} x{n}" for prim, n in sorted(counted.unsupported.items()))
        # where XLA's CPU figure holds the dense form of grouped products (densified_flops's note: up to
        # `excess` more than the model's), the bound is that figure less the excess
        cpu = compiled.target is None and plan is None
        excess = cpu_dense_excess(values["flops"], sources["flops"], counted) if cpu else 0
        least = (f"{values['flops'] - excess:,} (XLA's {values['flops']:,} less the up to {excess:,} FLOP of its CPU "
                 "compiler's dense grouped products)" if excess else f"{values['flops']:,}")
        notes.append(f"{name}: flops at least {least}: the jaxpr holds primitives without a cost rule "
                     f"({rule_less}); XLA's figure stands, which leaves out any of them its program hands to a "
                     "library call (a LAPACK or cuSOLVER custom call counts nothing)"
                     + (", and the loop correction misses their iterations" if sources["flops"] == "xla+loops"
                        else ""))
    corrected = "xla+loops" in sources.values()
    total, recomputed = counted.total, counted.recomputed.flops
    basis = devices if compiled is not None else program.shown_over or 1  # the devices the figures are each one's share of
    notes += random_note(name, values["flops"], total.flops, random, compiled, basis)
    if recomputed and compiled is None:
        notes.append(
            f"{name}: includes {recomputed:,} FLOP that jax.checkpoint recomputes (counted from the "
            "jaxpr); a compiler may remove some of them where it has the memory: a compiled program's "
            "note says whether XLA did"
        )
    elif recomputed and costs.flops is not None:
        # XLA's raw figure counts each loop body once: it is held against the jaxpr's count with
        # every body once, and against the recomputation one body of each loop holds
        once = sum(e.recomputed.flops / e.repeat for e in counted.equations)
        gone = min(max(counted.total_once.flops - costs.flops, 0.0), once) / once if once else 0.0
        if gone >= 1 - RECOMPUTE_SHARE:
            kept = "XLA's compiled program removed the recomputation (flops is XLA's: no recompute)"
        elif gone <= RECOMPUTE_SHARE:
            kept = "XLA's compiled program keeps it"
        else:  # XLA's count below the jaxpr's by part of the recomputation: it kept the rest
            kept = (f"XLA's compiled program removed about {gone:.0%} of it and keeps about {1 - gone:.0%} (read "
                    "from its count's shortfall against the jaxpr's; flops is XLA's)")
        notes.append(
            f"{name}: jax.checkpoint recomputes {recomputed:,} FLOP of the forward pass in "
            f"the backward pass (in jaxpr_flops); {kept}"
        )
    # Model and hardware FLOP: without remat both are the best figure. With it,
    # XLA may keep all, some or none of the recomputation (the CPU removes what
    # it has memory for), so both come from the jaxpr, which counts the step as
    # jax.checkpoint writes it: hardware = all of it, model = less the recomputed
    # forward work; unknown where the jaxpr is not complete. Beside XLA's figures, which are one device's,
    # the jaxpr's are too: its count divided by the devices it is shared over (without a compile, every
    # figure is the whole step's).
    share = devices if compiled is not None else 1
    flops = values["flops"]
    if not recomputed and not jaxpr_model:
        model_flops = hardware_flops = flops
        expanded = expanded_model_flops(name, flops, sources["flops"], counted, devices)
        if expanded is not None:  # a target's (or a mesh's) program computes the grouped products densely
            model_flops, note = expanded
            notes.append(note)
    elif counted.unsupported or flops is None:
        model_flops = hardware_flops = None
    else:
        model_flops, hardware_flops = round((total.flops - recomputed) / share), round(total.flops / share)
    attention = attention_flops(counted, modules, root)
    if attention_convention == "causal" and model_flops is not None:  # half the causal pairs, no recompute
        model_flops -= round((sum(causal_attention(counted)) // 2 + window_flops(counted)) / share)
    padding = padding_flops(counted, modules, root, padded)
    if padding and model_flops is not None:
        model_flops -= round(padding / share)
        notes.append(f"{name}: {padding:,} FLOP of the routed experts' products are computed on capacity padding "
                     "(slots no token fills, if the router balances the tokens): in flops and hardware_flops, "
                     "not in model_flops (MFU)")
    if corrected and costs.bytes_accessed is not None:
        notes.append(f"{name}: bytes_accessed is XLA's raw figure, which counts each loop body once")
    memory = compiled.memory if compiled is not None else xla.XlaMemory(None, None, None)
    communication, comm_notes = collective_rows(compiled, plan, modules, root)
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
        conversion_flops=conversions(counted),
        random_flops=random,
        model_flops=model_flops,
        hardware_flops=hardware_flops,
        attention_flops=attention,
        matmul_flops=sum(e.cost.flops if e.primitive in MATMULS else e.cost.products for e in counted.equations),
        matmul_bytes=sum(e.cost.bytes_accessed for e in counted.equations if e.primitive in MATMULS or e.cost.products),
        float8_flops=sum(e.cost.float8 for e in counted.equations),
        memory_bound_bytes=compiled.memory_bound_bytes if compiled is not None else None,
        kernels=compiled.kernels if compiled is not None else None,
        arguments=compiled.arguments if compiled is not None else None,
        library_calls=None if compiled is None or compiled.library_calls is None
        else sum(n for _, n in compiled.library_calls),
        optimal_seconds=None if compiled is None else compiled.costs.optimal_seconds,
        kernel_list=None if compiled is None else compiled.kernel_list,
        loop_corrected=corrected,
        sources=sources,
        derivation="compiled" if compiled is not None else "jaxpr",
        communication=communication,
    )
    return result, notes + [f"{name}: {n}" for n in counted.notes]


def all_phases(
    programs: Mapping[str, Program], plan: _sharding.ShardingPlan | None = None,
    modules: Sequence[str] = (), root: str = "", attention_convention: str = "full",
    padded: Sequence[tuple[frozenset[str], float]] = (), narrow: bool = False,
) -> tuple[dict[str, PhaseCosts], list[str]]:
    """Every declared phase: the programs' costs, then the derived ones by formula; ``narrow``: the
    step's parameters or computation are a 16-bit float (`fusion_gap_note`)."""
    costs: dict[str, PhaseCosts] = {}
    notes: list[str] = []
    recomputing = any(program.counted.recomputed.flops for program in programs.values())
    for name, program in programs.items():
        costs[name], found = phase_costs(name, program, plan, modules, root, attention_convention, padded,
                                         jaxpr_model=recomputing)
        notes += found
        # (a user's step says why by compiling it again without fusion: `step_checks.fusion_note`)
        if plan is None:  # (sharded, XLA's figure is one device's)
            notes += fusion_gap_note(name, costs[name].flops, costs[name].sources.get("flops", ""),
                                     program.counted, program.compiled, narrow=narrow)
    if plan is None and "forward" in costs and "grad" in costs:  # backward = grad - forward: like from like
        notes += _one_counter(costs, programs, modules, root, attention_convention, padded, recomputing)
    for phase in phases.DECLARED:
        if phase.name not in costs:
            costs[phase.name] = PhaseCosts.derive(phase, costs)
    if "forward" in programs and "grad" in programs and "backward" in costs:
        costs["backward"], found = with_hoisted(
            costs["backward"], hoisted_invariants(programs["forward"].counted, programs["grad"].counted, MATMULS),
            plan.devices if plan is not None else 1)
        notes += found
    if "backward" in costs:
        costs["backward"], found = without_negatives("backward", costs["backward"])
        notes += found
    return {name: costs[name] for name in phases.NAMES}, notes


def _one_counter(
    costs: dict[str, PhaseCosts], programs: Mapping[str, Program], modules: Sequence[str], root: str,
    attention_convention: str, padded: Sequence[tuple[frozenset[str], float]], recomputing: bool,
) -> list[str]:
    """Where one of forward and grad has its FLOP from the jaxpr (XLA's CPU figure set aside: a
    densified convolution, a library call) and the other from XLA, the other's from the jaxpr too
    (in ``costs``), so that backward = grad - forward subtracts like from like: XLA's CPU count of a
    fused program is above the jaxpr's by the producers its fusions duplicate, which the difference
    would put in the backward pass (or take out of it). Returns the note."""
    kinds = {name: "jaxpr" if costs[name].sources.get("flops") == "jaxpr" else "xla" for name in ("forward", "grad")}
    if len(set(kinds.values())) == 1 or any(costs[name].flops is None for name in kinds):
        return []
    xla_sourced = next(name for name, kind in kinds.items() if kind == "xla")
    other = next(name for name in kinds if name != xla_sourced)
    program = programs[xla_sourced]
    alone, _ = phase_costs(xla_sourced, dataclasses.replace(program, compiled=None), None, modules, root,
                           attention_convention, padded, jaxpr_model=recomputing)
    if alone.flops is None:
        return []
    was = costs[xla_sourced]
    costs[xla_sourced] = dataclasses.replace(
        was, flops=alone.flops, model_flops=alone.model_flops, hardware_flops=alone.hardware_flops,
        sources={**was.sources, "flops": "jaxpr"}, loop_corrected=was.sources.get("transcendentals") == "xla+loops")
    return [f"{xla_sourced}: flops from the jaxpr ({alone.flops:,}), as {other}'s are, not XLA's "
            f"{was.flops:,}: backward = grad - forward subtracts like from like (XLA's CPU count of a fused "
            "program holds the producers its fusions duplicate)"]


def with_hoisted(backward: PhaseCosts, hoisted: Hoisted, devices: int = 1) -> tuple[PhaseCosts, list[str]]:
    """``backward`` (grad - forward) with the forward's loop-invariant work that the grad program
    computed once outside its loop added back (`xla_cost.count.hoisted`): the grad program's forward
    share is the forward less that work, and the backward pass is what the grad program does beyond
    its forward share. Per-device figures (``flops``, ``transcendentals``, model and hardware FLOP)
    take ``1/devices`` of it, the jaxpr's figures all of it. Returns the costs and a note saying how
    much and where; ``backward`` itself and no note where nothing was hoisted."""
    cost = hoisted.cost
    if not (cost.flops or cost.transcendentals or cost.bytes_accessed):
        return backward, []

    def plus(value: int | None, extra: int, share: int = devices) -> int | None:
        return None if value is None else value + round(extra / share)

    updated = dataclasses.replace(
        backward,
        flops=plus(backward.flops, cost.flops), transcendentals=plus(backward.transcendentals, cost.transcendentals),
        jaxpr_flops=plus(backward.jaxpr_flops, cost.flops, 1),
        jaxpr_transcendentals=plus(backward.jaxpr_transcendentals, cost.transcendentals, 1),
        jaxpr_bytes_accessed=plus(backward.jaxpr_bytes_accessed, cost.bytes_accessed, 1),
        model_flops=plus(backward.model_flops, cost.flops), hardware_flops=plus(backward.hardware_flops, cost.flops),
        matmul_flops=plus(backward.matmul_flops, hoisted.matmul_flops, 1),
    )
    shown = "; ".join(hoisted.where[:4]) + (f" and {len(hoisted.where) - 4} more" if len(hoisted.where) > 4 else "")
    return updated, [
        f"backward: the grad program computes {cost.flops:,} FLOP and {cost.transcendentals:,} transcendentals of "
        f"the forward's loop-invariant work once, outside the loop, where the forward program repeats it in every "
        f"iteration (jax's scan partial evaluation hoists it: {shown}); backward is grad less the grad's own "
        f"forward share (forward less that work), so forward + backward exceed grad by it"
    ]


def without_negatives(name: str, costs: PhaseCosts) -> tuple[PhaseCosts, list[str]]:
    """A derived phase's counts with any below zero made unknown (None), each with a note giving
    the difference its formula gave: a count is never negative, and one that comes out so says
    that the programs it is derived from do not split as the formula assumes."""
    negative = {key: getattr(costs, key) for key in ("flops", "transcendentals", "model_flops", "hardware_flops",
                                                     "jaxpr_flops", "jaxpr_transcendentals")
                if getattr(costs, key) is not None and getattr(costs, key) < 0}
    if not negative:
        return costs, []
    return dataclasses.replace(costs, **dict.fromkeys(negative)), [
        f"{name}: {key} unknown: its formula gives {value:,} (below zero: the programs it is derived from do "
        "not split as the formula assumes)" for key, value in negative.items()
    ]


MATMULS: frozenset[str] = MATRIX_PRODUCTS
"""The primitives whose work runs on matrix units (tensor cores): `PhaseCosts.matmul_flops`, with
the products a fused primitive runs inside it (`xla_cost.count.registry.Cost.products`)."""


def random_allowance(name: str, random: int) -> float:
    """The most a target's count of program ``name`` may exceed the jaxpr's by
    its random numbers, ``random`` FLOP as the jaxpr counts them (XLA's CPU
    count: the threefry hash's loop body once): a compiler that unrolls the
    loop counts `THREEFRY_UNROLLED_WORD_OPS` / `THREEFRY_WORD_OPS` times as
    much, and a gradient program may draw the forward's bits once more where
    the backward pass reads them rather than keep the mask."""
    unrolled = THREEFRY_UNROLLED_WORD_OPS / THREEFRY_WORD_OPS
    return (unrolled - 1) * random + (unrolled * random if name in ("grad", "train_step") else 0)


def random_note(
    name: str, flops: int | None, jaxpr: int, random: int, compiled: xla.CompiledPhase | None, devices: int = 1,
) -> list[str]:
    """A target program's FLOP over the jaxpr count that its random numbers may account for, named
    (`random_allowance`); on the CPU (or counted from the jaxpr), what its count of the threefry hash
    leaves out. Nothing where the program draws nothing, or a target's is not above the jaxpr count
    (every figure one device's share of ``devices``, the random numbers' too)."""
    expected = jaxpr / devices
    drawn = f"{round(random / devices):,} FLOP" + (" per device" if devices > 1 else "")
    if random and (compiled is None or compiled.target is None):  # the CPU's count, or the jaxpr's alike
        hidden = round((THREEFRY_UNROLLED_WORD_OPS / THREEFRY_WORD_OPS - 1) * random / devices)
        return [f"{name}: random numbers counted as XLA's CPU program counts jax's threefry hash ({drawn}): "
                f"its 5-trip loop's body once, {THREEFRY_WORD_OPS} operations a 32-bit word of the "
                f"{THREEFRY_UNROLLED_WORD_OPS} it runs; up to {hidden:,} FLOP more run than are counted "
                "(a GPU's or TPU's compile unrolls the loop and counts them: --target)"]
    if compiled is None or compiled.target is None or not random or flops is None or flops <= expected:
        return []
    bound = round(random_allowance(name, random) / devices)
    return [
        f"{name}: the {compiled.target} program counts {round(flops - expected):,} FLOP over the jaxpr count "
        f"({(flops - expected) / expected:+.1%}); its random-number generator accounts for up to {bound:,}: "
        f"the jaxpr counts jax's threefry hash ({drawn}) as XLA's CPU program does, its 5-trip loop's "
        f"body once ({THREEFRY_WORD_OPS} operations a word), where the {compiled.target} compiler unrolls the "
        f"loop ({THREEFRY_UNROLLED_WORD_OPS})"
        + (" and may draw the bits again where the backward pass reads them (a dropout mask)"
           if name in ("grad", "train_step") else "")
        + ("" if flops - expected <= bound else "; the rest is work its compiler adds (split-K reductions, padding)")
    ]


def conversions(counted: JaxprCount) -> int:
    return sum(e.cost.flops for e in counted.equations if e.primitive == "convert_element_type")


def precision_note(compute: str, params: str | None, phases: Mapping[str, PhaseCosts], backend: str) -> str | None:
    """The mixed-precision note of a step computing in ``compute`` on parameters of ``params`` (None: the
    same dtype, or no parameters known: a step that makes its own, a model without any), with the dtype
    conversions of its ``train_step`` phase; ``backend``: where it is compiled."""
    if params is None or compute == params:
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
