"""Walks a closed jaxpr and counts every equation with the rules of `xla_cost.count.rules`.

Nested jaxprs (jit, custom_jvp/custom_vjp calls, checkpoint) are walked once; a
``scan`` body is counted ``length`` times and a ``while`` body as many times as its
static trip count, when one can be read off the loop (``fori_loop`` with literal
bounds). A loop whose trip count cannot be known is counted once and reported in
`JaxprCount.notes`; a ``cond`` is charged its most expensive branch and noted.

Two totals come out: `JaxprCount.total`, with every loop multiplied out, and
`JaxprCount.total_once`, with every loop body counted once, the way XLA's
``cost_analysis()`` counts a while loop. Their difference is what a compiled
figure misses, which `xla_cost.analysis.pipeline` adds back (the loop correction).

Equations that XLA's algebraic simplifier removes before it counts (``x + 0``,
``x - 0``, ``x * 1``, ``x / 1`` with a literal) are not counted either, nor are
those computed from constants alone, also inside a call that receives them
(``jax.random.uniform``'s jit with the literal bounds 0 and 1) or a loop that
reads them unchanged (a scan's or while loop's constants): XLA inlines the
call, or sinks the constant into the loop's body, and folds them.

Every count keeps the equation's full name stack (``jvp(Net)/fc1``,
``transpose(jvp(Net))/fc1``), which `xla_cost.count.attribution` turns into a module
path and a pass.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.extend import core as jex_core

from xla_cost.count import random_rules, rules  # noqa: F401 - each registers its rules on import
from xla_cost.count.attention_flow import CAUSAL, UNSEEN, attention_products, attention_windows
from xla_cost.count.folding import Folding
from xla_cost.count.loop_words import loop_label, nested, said_once, unknown_trip_note
from xla_cost.count.primitives import CALL_LIKE, CALL_PARAMS, REMAT_PRIMITIVES, WALKED
from xla_cost.count.registry import MOVING_COLLECTIVES, ZERO_COST, Cost, get_rule, takes_values
from xla_cost.count.stacks import REMAT_SCOPE, classify_pass, model_scopes
from xla_cost.count.trip_bounds import TripBound, static_trip_count, trip_bound
from xla_cost.present.markdown import markdown_table
from xla_cost.present.units import count, si, size

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "EqnCount", "LoopInfo", "JaxprCount", "count_jaxpr", "count_function", "SCAN_COUNTER_FLOPS",
    "WALKED", "CALL_LIKE", "CALL_PARAMS", "REMAT_PRIMITIVES", "join_stack", "repeated_forward", "eqn_owner",
    "combine_owners", "public_owner", "kept_outputs",
]


@dataclasses.dataclass(frozen=True)
class EqnCount:
    """The summed cost of one primitive at one name stack.

    Attributes:
      name_stack: the full JAX name stack, e.g. ``transpose(jvp(Net))/fc1``.
      primitive: the primitive's name, e.g. ``dot_general``.
      executions: how often it runs (equations times loop trip counts).
      cost: the summed cost of those executions.
      repeat: the product of the trip counts of the loops around it (1 outside
        any loop): a scanned layer's equations have the scan's length.
      owner: the module whose parameters (or gradients, or optimizer state)
        the equation computes on, found by following the data from the
        jaxpr's inputs (`count_jaxpr`'s ``owners``); None if unknown or shared.
      part: the part of a user's train step it belongs to (`count_jaxpr`'s
        ``classify``; `xla_cost.step.phases.STEP_PARTS`), None when not asked.
      recomputed: the part of ``cost`` that is forward work ``jax.checkpoint``
        repeats in the backward pass (`JaxprCount.recomputed`, by equation group).
      loop: where the innermost loop around it sits (its equation's path, as
        `count_jaxpr` walks; ``()``: outside every loop): two loops, or a loop
        and the code outside it, are told apart even when their trip counts
        (``repeat``) are equal (a layer's first micro-batch run before a
        ``fori_loop`` that runs the rest).
    """

    name_stack: str
    primitive: str
    executions: int
    cost: Cost
    repeat: int = 1
    owner: str | None = None
    part: str | None = None
    recomputed: Cost = Cost()
    loop: tuple[Any, ...] = ()


@dataclasses.dataclass(frozen=True)
class LoopInfo:
    """A loop met in the jaxpr: ``scan`` or ``while``, and its trip count."""

    name_stack: str
    kind: str
    trip_count: int | None
    body_cost: Cost  # one iteration, nested loops included
    within: tuple[str, ...] = ()  # the loops it is nested in, outermost first (``scan x2 at <top>``)
    path: tuple[Any, ...] = ()  # its equation's (`EqnCount.loop` of the work in its body starts with it)
    bound: TripBound | None = None  # a while's of unknown trip count, where its counter indexes a static axis

    def describe(self) -> str:
        """``scan x2 at <top>`` (``while of unknown trip count at <top>``), and the loops it runs
        inside (``inside scan x2 at <top>``)."""
        return nested(loop_label(self.kind, self.trip_count, self.name_stack), self.within)


@dataclasses.dataclass(frozen=True)
class JaxprCount:
    """The result of counting one jaxpr.

    Attributes:
      equations: costs summed per (name stack, primitive, loop repeat).
      unsupported: primitives without a rule, with how often they run; their cost
        is unknown and not in any total.
      loops: every scan and while loop, with its trip count (None: unknown).
      notes: human-readable caveats (unknown trip counts, cond branches).
      total_once: the cost with every loop body counted once, as XLA's compiled
        cost analysis counts it.
      recomputed: the forward-pass work that ``jax.checkpoint`` (remat) repeats
        inside the backward pass; part of ``total``. XLA may remove some or all
        of it when it compiles (on the CPU it kept a 4-layer GPT-2's and removed
        a small MLP's): `xla_cost.analysis.costs.phase_costs` notes which.
      part_recomputed: ``recomputed`` by part of a classified step (`part`):
        the backward part's, in practice.
      part_unsupported: per part of a classified step (`part`), the
        primitives without a rule met there (empty: not classified).
      dense_expansion: what a compiler that makes the grouped products dense
        (a depthwise convolution's weight gradient: ``batch_group_count`` G > 1;
        a ``ragged_dot``'s G groups) would add: (G - 1) times their cost, loops
        multiplied out. XLA's CPU compiler does so for a depthwise convolution
        and for ``ragged_dot`` (`xla_cost.analysis.costs`).
      tagged: the cost of the equations a classifier tagged, by tag
        (`xla_cost.count.step_labels.StepLabels.tags`: ``metrics`` is the work
        on gradients or new parameters that only metrics read); loops
        multiplied out; each is also in its part's figures.
      parameter_reads: ``(module, name stack)`` of each matrix product reading a
        module's parameter (`xla_cost.count.param_reads`), where the counter's caller asked.
      windows: per causal mask that is no plain causal one (`attention_windows`: a sliding window
        in words, or why it was not evaluated), the cost of its attention products (`Cost.causal`,
        `Cost.window`), loops multiplied out, remat's recomputation left out.
    """

    equations: tuple[EqnCount, ...]
    unsupported: Mapping[str, int]
    loops: tuple[LoopInfo, ...]
    notes: tuple[str, ...]
    total_once: Cost = Cost()
    recomputed: Cost = Cost()
    part_recomputed: Mapping[str, Cost] = dataclasses.field(default_factory=dict)
    part_unsupported: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    tagged: Mapping[str, Cost] = dataclasses.field(default_factory=dict)
    dense_expansion: Cost = Cost()
    parameter_reads: tuple[tuple[str, str], ...] = ()
    windows: Mapping[str, Cost] = dataclasses.field(default_factory=dict)

    @property
    def total(self) -> Cost:
        """The cost with every loop multiplied by its trip count: of the counted
        equations only, a lower bound when `complete` is False."""
        return sum((e.cost for e in self.equations), Cost())

    @property
    def complete(self) -> bool:
        """Whether every primitive had a cost rule: when False, ``unsupported``
        names those that had none, and `total` leaves their unknown cost out."""
        return not self.unsupported

    @property
    def repeated_loops(self) -> tuple[LoopInfo, ...]:
        """The loops that run their body more than once (what XLA undercounts)."""
        return tuple(loop for loop in self.loops if (loop.trip_count or 1) > 1)

    def part(self, name: str) -> JaxprCount:
        """The equations of one part of a classified step (`EqnCount.part`), with
        the primitives without a rule met there and the recomputation among them
        (`part_recomputed`); loops multiplied out in both totals."""
        equations = tuple(e for e in self.equations if e.part == name)
        total = sum((e.cost for e in equations), Cost())
        return JaxprCount(
            equations=equations, unsupported=dict(self.part_unsupported.get(name, {})), loops=(),
            notes=(), total_once=total, recomputed=self.part_recomputed.get(name, Cost()),
        )

    def to_frame(self) -> pd.DataFrame:
        """One row per counted `EqnCount` (name stack, primitive, loop repeat,
        owner, part), its executions and summed costs, raw; they add up to `total`."""
        import pandas as pd

        columns = ["name_stack", "primitive", "executions", "repeat", "owner", "part", "flops", "transcendentals",
                   "bytes_accessed"]
        return pd.DataFrame([(e.name_stack, e.primitive, e.executions, e.repeat, e.owner, e.part, e.cost.flops,
                              e.cost.transcendentals, e.cost.bytes_accessed) for e in self.equations],
                            columns=columns)

    def _repr_markdown_(self) -> str:
        """How a notebook (IPython's display) shows the count: the totals, the
        costs by primitive (largest first, each figure in its own unit), the
        loops, the primitives without a rule and the notes."""
        import pandas as pd

        total = self.total
        least = "" if self.complete else "at least "
        counted, unknown = sum(e.executions for e in self.equations), sum(self.unsupported.values())
        lines = [f"{counted:,} operation{'' if counted == 1 else 's'} counted: {least}{si(total.flops)} FLOP, "
                 f"{least}{si(total.transcendentals)} transcendentals, {least}{size(total.bytes_accessed)} accessed "
                 f"(every loop body once, as XLA counts: {least}{si(self.total_once.flops)} FLOP)"]
        if not self.complete:
            lines.append(f"{unknown:,} operation{' has' if unknown == 1 else 's have'} no cost rule: unknown, "
                         "left out of these totals (below)")
        lines.append("")
        frame = self.to_frame()
        if len(frame):
            by = frame.groupby("primitive")[["executions", "flops", "transcendentals", "bytes_accessed"]].sum()
            by = by.sort_values(["flops", "bytes_accessed"], ascending=False)
            shown = pd.DataFrame({"executions": by["executions"].map(count), "FLOP": by["flops"].map(si),
                                  "transcendentals": by["transcendentals"].map(si),
                                  "bytes accessed": by["bytes_accessed"].map(size)}, index=by.index)
            lines += [markdown_table(shown), ""]
        lines += [f"- {loop.kind} at `{loop.name_stack or '(top)'}`: "
                  f"{'unknown' if loop.trip_count is None else f'{loop.trip_count:,}'} iterations"
                  for loop in self.loops]
        if self.unsupported:
            lines.append("- no cost rule (unknown, not 0): "
                         + ", ".join(f"{k} x{v}" for k, v in sorted(self.unsupported.items())))
        lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines).rstrip("\n") + "\n"


def join_stack(prefix: str, stack: str) -> str:
    """``prefix/stack``, either of them possibly empty: a called jaxpr's name stack
    below its call's."""
    if not prefix:
        return stack
    if not stack:
        return prefix
    return f"{prefix}/{stack}"


SCAN_COUNTER_FLOPS = 2
"""FLOP per scan iteration for the loop counter (an add and a compare), which XLA
counts in the while loop a scan becomes."""

# (name stack, primitive, loop repeat, owner, part, innermost loop's path: `EqnCount.loop`)
_Key = tuple[str, str, int, "str | None", "str | None", tuple[Any, ...]]

_SHARED = "\0shared"  # the owner of values computed from several modules' data


def combine_owners(owners: Sequence[str | None]) -> str | None:
    """The one owner of values computed from data of ``owners``; a sentinel
    for several (`public_owner` turns it into None), None for none known.
    Owners on one line of descent are one: the innermost module's (a layer's
    momentum plus its gradient split from the fused gradient of the module
    around it, an ``nn.OptimizedLSTMCell``'s gates')."""
    known = {o for o in owners if o is not None}
    if not known:
        return None
    inner = max(known, key=len)
    return inner if all(o == inner or (o and inner.startswith(o + "/")) for o in known) else _SHARED


def public_owner(owner: str | None) -> str | None:
    """An owner as reports show it: None for values shared by several modules."""
    return None if owner == _SHARED else owner


RAGGED_BOUND_NOTE = (
    "ragged_dot with group_sizes computed at run time (data-dependent): counted as every lhs row, 2 M K N FLOP "
    "(and so its gradients), an upper bound: rows past sum(group_sizes) belong to no group and are not computed "
    "(a router's rows padded to a tile, dropped tokens); with constant group_sizes the count is exact, "
    "2 sum(group_sizes) K N")
"""The note of a count holding a ``ragged_dot`` whose group sizes are not known when counted."""


class _Counter:
    """Walks a jaxpr; with ``trip_counts=False`` every loop body counts once."""

    def __init__(self, trip_counts: bool = True, labels: Mapping[tuple[Any, ...], Any] | None = None,
                 repeated: frozenset[tuple[Any, ...]] = frozenset(),
                 attention: frozenset[tuple[Any, ...]] = frozenset(),
                 masks: Mapping[tuple[Any, ...], str] | None = None, windows: Mapping[Any, Any] | None = None) -> None:
        self.trip_counts = trip_counts
        self.attention = attention  # paths of attention's products (`attention_products`): `Cost.attention`
        self.masks = masks or {}  # path -> an attention's mask (`attention_masks`): `Cost.causal`, `Cost.unseen`
        self.windows = windows or {}  # path -> (share kept, words) of a mask no plain causal one: `Cost.window`
        self.windowed: dict[str, Cost] = collections.defaultdict(Cost)  # `JaxprCount.windows`
        self.labels = labels  # path -> (part, owner) of a classified step
        self.repeated = repeated  # paths of the recomputations that repeat a forward (`repeated_forward`)
        self.path: tuple[Any, ...] = ()  # of the equation being counted (`xla_cost.count.step_parts`)
        self.loop: tuple[Any, ...] = ()  # the path of the innermost loop being walked (`EqnCount.loop`)
        self.within: tuple[str, ...] = ()  # the loops being walked, outermost first (`LoopInfo.within`)
        self.part_unsupported: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.costs: dict[_Key, Cost] = collections.defaultdict(Cost)
        self.executions: collections.Counter[_Key] = collections.Counter()
        self.unsupported: collections.Counter[str] = collections.Counter()
        self.loops: list[LoopInfo] = []
        self.notes: list[str] = []
        self.unknown: list[str] = []  # where each while loop of unknown trip count is (`said_once`)
        self.recomputed = Cost()
        self.recomputed_at: dict[_Key, Cost] = collections.defaultdict(Cost)  # by equation group
        self.part_recomputed: dict[str, Cost] = collections.defaultdict(Cost)
        self.tagged: dict[str, Cost] = collections.defaultdict(Cost)
        self.dense_expansion = Cost()  # `JaxprCount.dense_expansion`
        self.in_remat = False
        self.mapped_step: Any = None  # the shard_map that is the whole step: its body one device's (`_mapped_step`)

    # Returns the cost of one execution of ``jaxpr`` and records it ``times`` times.
    # ``owner``: of every equation (inside a call or loop), or, with ``owners``
    # (one per input variable), followed through the data flow. ``constants``:
    # per input variable, what the caller knows of it (`Folding.describe`), so
    # that a call with literal arguments folds as XLA folds it once inlined;
    # ``out_constants`` receives the same for the outputs.
    def walk(
        self, jaxpr: Any, prefix: str, times: int, owner: str | None = None,
        owners: list[str | None] | None = None, out_owners: list[str | None] | None = None,
        constants: Sequence[tuple[bool, float | None]] | None = None,
        out_constants: list[tuple[bool, float | None]] | None = None,
    ) -> Cost:
        consts = getattr(jaxpr, "consts", None)
        jaxpr = getattr(jaxpr, "jaxpr", jaxpr)  # ClosedJaxpr -> Jaxpr
        base = self.path  # each equation's path: its index below the equation that holds this jaxpr
        env: dict[Any, str | None] = dict(zip(jaxpr.invars, owners or []))
        folded = Folding()
        folded.seed(jaxpr.invars, constants or ())
        folded.seed_constants(jaxpr.constvars, consts)  # closed-over arrays: constants of the program
        total = Cost()
        for index, eqn in enumerate(jaxpr.eqns):
            self.path = (*base, index)
            stack = join_stack(prefix, str(eqn.source_info.name_stack))
            if folded.fold(eqn):  # computed from constants only: XLA folds it
                continue
            if owners is not None and eqn.primitive.name in CALL_LIKE:
                sub = next((eqn.params[p] for p in CALL_PARAMS if p in eqn.params), None)
                if sub is not None:  # follow the data into the call
                    results: list[str | None] = []
                    known: list[tuple[bool, float | None]] = []
                    total = total + self.walk(
                        sub, stack, times, owners=[_owner_of(v, env) for v in eqn.invars],
                        out_owners=results, constants=folded.describe(eqn.invars),
                        out_constants=known,
                    )
                    env.update(zip(eqn.outvars, results))
                    folded.seed(eqn.outvars, known)
                    continue
            owner_here = owner
            if owners is not None:
                owner_here = eqn_owner(eqn, env)
                for var in eqn.outvars:
                    env[var] = owner_here
            if folded.is_identity(eqn):
                continue
            known, branch = [], [] if owners is not None and eqn.primitive.name == "cond" else None
            total = total + self.eqn(eqn, stack, times, owner_here, folded.describe(eqn.invars), known,
                                     None if branch is None else [_owner_of(v, env) for v in eqn.invars[1:]], branch)
            env.update(zip(eqn.outvars, branch or ()))  # a cond's results: its branch's owners
            folded.seed(eqn.outvars, known)  # a call's constant results
        self.path = base
        if out_owners is not None:
            out_owners.extend(
                None if isinstance(v, jex_core.Literal) else env.get(v) for v in jaxpr.outvars
            )
        if out_constants is not None:
            out_constants.extend(folded.describe(jaxpr.outvars))
        return total

    def eqn(
        self, eqn: Any, stack: str, times: int, owner: str | None = None,
        constants: Sequence[tuple[bool, float | None]] | None = None,
        out_constants: list[tuple[bool, float | None]] | None = None,
        branch_owners: list[str | None] | None = None, branch_results: list[str | None] | None = None,
    ) -> Cost:
        name = eqn.primitive.name
        path = self.path
        params = eqn.params
        part = None
        if self.labels is not None and path in self.labels:
            part, owner = self.labels[path]
        if name == "scan":
            length = int(params["length"])
            # with every body once, as XLA's compiled count has it: a scan unrolled k times is a loop whose
            # body holds k copies, and the length % k left over run outside it (all of them: unroll=True)
            unroll = params.get("unroll", 1)
            k = length if unroll is True else max(1, int(unroll or 1))
            n = length if self.trip_counts else min(length, k + length % k)
            # a constant the loop reads unchanged (jax hoists ``zeros`` out of a scanned layer) is one
            # to XLA too, which sinks it into the body and simplifies there (``x - 0``: nothing)
            outer, self.loop = self.loop, path
            within, self.within = self.within, (*self.within, loop_label("scan", length, stack))
            try:
                body = self.walk(params["jaxpr"], stack, times * n, owner,
                                 constants=[*(constants or ())][:int(params["num_consts"])])
            finally:
                self.loop, self.within = outer, within
            # XLA runs a scan as a while loop: each iteration also increments
            # and compares the counter (SCAN_COUNTER_FLOPS).
            counter = Cost(flops=SCAN_COUNTER_FLOPS)
            key = (stack, "scan", times * n, public_owner(owner), part, path)  # once per iteration
            self.costs[key] = self.costs[key] + counter * (times * n)
            self.executions[key] += times * n
            tag = getattr(self.labels, "tags", {}).get(path)  # (a target network's scan: its counter too)
            if tag is not None:
                self.tagged[tag] = self.tagged[tag] + counter * (times * n)
            self.loops.append(LoopInfo(stack, "scan", length, body + counter, within))
            return (body + counter) * n
        if name == "while":
            trip = static_trip_count(eqn)
            bound = trip_bound(eqn) if trip is None else None
            if trip is None:  # said for each such loop, with those it runs inside (`said_once`) and its bound
                self.unknown.append(nested(stack or "<top>", self.within))
                self.notes.append(unknown_trip_note(self.unknown[-1]) + (f"; {bound.describe()}" if bound else ""))
            n = 1 if trip is None or not self.trip_counts else trip
            self.path = (*path, "body")
            cond_n, body_n = int(params["cond_nconsts"]), int(params["body_nconsts"])
            known = [*(constants or ())]
            outer, self.loop = self.loop, path
            within, self.within = self.within, (*self.within, loop_label("while", trip, stack))
            try:
                body = self.walk(params["body_jaxpr"], stack, times * n, owner,
                                 constants=known[cond_n:cond_n + body_n])
                checks = n + 1 if self.trip_counts and trip is not None else 1  # unknown trips: the body's once
                self.path = (*path, "cond")
                cond = self.walk(params["cond_jaxpr"], stack, times * checks, owner, constants=known[:cond_n])
            finally:
                self.loop, self.within = outer, within
            self.path = path
            self.loops.append(LoopInfo(stack, "while", trip, body + cond, within, path, bound))
            return body * n + cond * checks
        if name == "cond":  # following the data (an optimizer's update): into each branch
            return self.cond(params["branches"], stack, times, owner, branch_owners, branch_results)
        if name in CALL_LIKE:
            sub = next((params[p] for p in CALL_PARAMS if p in params), None)
            if sub is not None:
                remat = name in REMAT_PRIMITIVES and bool(params.get("differentiated"))
                outer, self.in_remat = self.in_remat, self.in_remat or remat
                # a shard_map inside the step (a Pallas kernel mapped over the mesh) runs its body on each
                # device of its manual axes; the whole step's (pmap's) is counted as one device's
                devices = _mapped_devices(eqn) if name == "shard_map" and eqn is not self.mapped_step else 1
                try:
                    return self.walk(
                        sub, stack, times * devices, owner, constants=constants, out_constants=out_constants
                    ) * devices
                finally:
                    self.in_remat = outer
        if name in ZERO_COST:
            if name in MOVING_COLLECTIVES:  # no arithmetic, but the step's collectives list how often it runs
                key = (stack, name, times, public_owner(owner), part, self.loop)
                self.costs[key] = self.costs[key] + Cost()
                self.executions[key] += times
            return Cost()
        rule = get_rule(name)
        if rule is None:
            return self._unknown(name, times, part)
        ins = [v.aval for v in eqn.invars]
        outs = [v.aval for v in eqn.outvars]
        constant = tuple(c for c, _ in constants) if constants else (False,) * len(ins)
        arrays = tuple(v if isinstance(v, np.ndarray) else None for _, v in constants) if constants else ()
        if any(a is not None for a in arrays) and takes_values(rule):  # a constant array's value (group sizes)
            cost = rule(ins, outs, constant_operands=constant, constant_values=arrays, **params)
        else:
            cost = rule(ins, outs, constant_operands=constant, **params)
        if cost is None:  # the rule cannot cost these operands: unknown, not 0
            return self._unknown(name, times, part)
        if path in self.attention:
            cost = dataclasses.replace(cost, attention=cost.flops)
        mask = self.masks.get(path)
        if mask in (CAUSAL, UNSEEN):
            cost = dataclasses.replace(cost, **{mask: cost.attention or cost.products})
        share, words = self.windows.get(path, (None, None)) if mask == CAUSAL else (None, None)
        if share is not None:  # causal (1/2 - share), floored
            cost = dataclasses.replace(cost, window=cost.causal * (share.denominator - 2 * share.numerator)
                                       // (2 * share.denominator))
        if words and not (self.in_remat and path in self.repeated):
            self.windowed[words] = self.windowed[words] + cost * times
        key = (stack, name, times, public_owner(owner), part, self.loop)
        self.costs[key] = self.costs[key] + cost * times
        if self.in_remat and path in self.repeated:  # forward work, done again
            self.recomputed = self.recomputed + cost * times
            self.recomputed_at[key] = self.recomputed_at[key] + cost * times
            if part is not None:
                self.part_recomputed[part] = self.part_recomputed[part] + cost * times
        tag = getattr(self.labels, "tags", {}).get(path)
        if tag is not None:
            self.tagged[tag] = self.tagged[tag] + cost * times
        # a grouped product a compiler may make dense: a depthwise convolution's weight gradient, a ragged_dot
        groups = (int(params.get("batch_group_count", 1)) if name == "conv_general_dilated"
                  else rules.ragged_groups(ins) if name == "ragged_dot_general" else 1)
        if groups > 1:
            self.dense_expansion = self.dense_expansion + cost * (times * (groups - 1))
        if name == "ragged_dot_general" and not (len(arrays) > 2 and arrays[2] is not None):
            self.notes.append(RAGGED_BOUND_NOTE)
        self.executions[key] += times
        return cost

    def _unknown(self, name: str, times: int, part: str | None) -> Cost:
        """A primitive without a rule, or whose rule cannot cost its operands: listed with how
        often it runs (unknown, not 0); nothing is added to the sums."""
        self.unsupported[name] += times
        if part is not None:
            self.part_unsupported[part][name] += times
        return Cost()

    def cond(self, branches: Any, stack: str, times: int, owner: str | None,
             owners: list[str | None] | None = None, out_owners: list[str | None] | None = None) -> Cost:
        # Count each branch on the side, charge the most expensive one.
        trial = [_Counter(self.trip_counts, self.labels, self.repeated, self.attention, self.masks)
                 for _ in branches]
        results: list[list[str | None]] = [[] for _ in branches]
        for k, t in enumerate(trial):
            t.in_remat = self.in_remat
            t.path, t.loop, t.within = (*self.path, f"b{k}"), self.loop, self.within
        costs = [t.walk(b, stack, times, owner, owners=owners, out_owners=r if owners is not None else None)
                 for t, b, r in zip(trial, branches, results)]
        index = max(range(len(costs)), key=lambda i: (costs[i].flops, costs[i].transcendentals))
        chosen = trial[index]
        if out_owners is not None:
            out_owners.extend(results[index])
        for key, cost in chosen.costs.items():
            self.costs[key] = self.costs[key] + cost
            self.executions[key] += chosen.executions[key]
        self.unsupported.update(chosen.unsupported)
        for part, missing in chosen.part_unsupported.items():
            self.part_unsupported[part].update(missing)
        self.recomputed = self.recomputed + chosen.recomputed
        self.dense_expansion = self.dense_expansion + chosen.dense_expansion
        for key, cost in chosen.recomputed_at.items():
            self.recomputed_at[key] = self.recomputed_at[key] + cost
        for part, cost in chosen.part_recomputed.items():
            self.part_recomputed[part] = self.part_recomputed[part] + cost
        for tag, cost in chosen.tagged.items():
            self.tagged[tag] = self.tagged[tag] + cost
        self.loops.extend(chosen.loops)
        self.notes.extend(chosen.notes)
        self.unknown.extend(chosen.unknown)
        if len(branches) > 1:
            self.notes.append(
                f"cond at {stack or '<top>'}: charged its most expensive branch "
                f"({index} of {len(branches)})"
            )
        return costs[index]


def _owner_of(var: Any, env: Mapping[Any, str | None]) -> str | None:
    return None if isinstance(var, jex_core.Literal) else env.get(var)


def eqn_owner(eqn: Any, env: Mapping[Any, str | None]) -> str | None:
    """Whose data an equation works on: that of its full-size operands.

    An elementwise update ``p - lr * g`` belongs to the module of ``p`` and
    ``g`` even when the learning rate or a global clipping factor (a scalar
    computed from every module) comes in too; a reduction belongs to its
    operand's module. Values mixing several modules' full-size data are shared. A ``select_n``'s
    predicate picks, it is no data (DP-SGD's ``where(skip_example, 0, g)``, a mask of every module's norms).
    """
    operands = [v for v in eqn.invars if not isinstance(v, jex_core.Literal)]
    data = [v for v in eqn.invars[eqn.primitive.name == "select_n":] if not isinstance(v, jex_core.Literal)]
    if not operands:
        return None
    out_size = max((math.prod(v.aval.shape) for v in eqn.outvars if hasattr(v.aval, "shape")), default=1)
    largest = max((math.prod(getattr(v.aval, "shape", ())) for v in data), default=0)
    big = [v for v in data if math.prod(getattr(v.aval, "shape", ())) >= min(largest, out_size)]
    owner = combine_owners([env.get(v) for v in big])
    return owner if owner is not None else combine_owners([env.get(v) for v in operands])


def _dead_code_eliminated(jaxpr: Any) -> tuple[Any, list[bool]]:
    """Drops equations whose results no output needs, as XLA does.

    ``jax.grad`` keeps the primal output's computation in the jaxpr even when only
    the gradient is returned; XLA removes it, and so must a count meant to agree
    with XLA. jax has no public DCE, so this uses the internal one and counts the
    jaxpr as it is if that ever moves.
    """
    every = [True] * len(jaxpr.invars)
    try:
        from jax._src.interpreters import partial_eval as pe
    except ImportError:  # pragma: no cover - depends on jax internals
        return jaxpr, every
    try:
        pruned, used = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate=True)
    except Exception:  # noqa: BLE001 - counting the undead jaxpr is still right
        return jaxpr, every
    if len(pruned.invars) != len(jaxpr.invars):  # pruned inputs: keep the flags aligned
        return pruned, list(used)
    return pruned, every


def kept_outputs(closed_jaxpr: Any, keep: Sequence[bool]) -> Any:
    """``closed_jaxpr`` (a ``ClosedJaxpr``) with only the results ``keep`` marks, and the equations only
    the others needed removed (its inputs all kept): a step without its metrics. None where jax's
    dead-code elimination is not reachable (its internals moved) or ``keep`` does not fit the results."""
    jaxpr = closed_jaxpr.jaxpr
    if len(keep) != len(jaxpr.outvars):
        return None
    try:
        from jax._src.interpreters import partial_eval as pe
        from jax.extend import core as jex_core

        pruned, _ = pe.dce_jaxpr(jaxpr, list(keep), instantiate=True)
        return jex_core.ClosedJaxpr(pruned, closed_jaxpr.consts)
    except Exception:  # noqa: BLE001 - depends on jax internals: the step is judged whole instead
        return None


def count_jaxpr(
    closed_jaxpr: Any, owners: Sequence[str | None] | None = None,
    classify: Callable[[Any, Sequence[str | None] | None], Mapping[tuple[Any, ...], Any]] | None = None,
    weights: Sequence[bool] | None = None,
) -> JaxprCount:
    """Counts every equation of ``closed_jaxpr`` (loops multiplied out).

    Equations whose results are never used are removed first, as XLA does.

    Args:
      closed_jaxpr: a ``ClosedJaxpr`` (from ``jax.make_jaxpr``) or a ``Jaxpr``.
      owners: optionally, for each input variable, the module it belongs to
        (a parameter, its gradient, its optimizer state) or None; each
        equation's `EqnCount.owner` then follows the data from them. This is how
        an optimizer's arithmetic, which has no module on its name stack, is
        attributed to layers.
      classify: optionally, ``classify(jaxpr, owners)`` giving each equation's
        ``(part, owner)`` by its path (`xla_cost.count.step_parts.classify_step`),
        called on the jaxpr as counted (dead code removed): each `EqnCount`
        then has its part and that owner.
      weights: optionally, for each input variable, whether it is a weight (a
        parameter, its gradient, an optimizer's state) rather than data; None:
        those with an owner. Attention's products are found by following the
        data from the others (`xla_cost.count.attention_flow`: `Cost.attention`).

    Returns:
      A `JaxprCount` with costs per (name stack, primitive, loop repeat, owner, part, loop).
    """
    original = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    if owners is not None and len(owners) != len(original.invars):
        raise ValueError(
            f"Expected one owner per jaxpr input ({len(original.invars)}), got "
            f"{len(owners)} instead. Pass one entry (or None) per flattened argument."
        )
    if weights is None and owners is not None:
        weights = [o is not None for o in owners]
    if weights is not None and len(weights) != len(original.invars):
        raise ValueError(
            f"Expected one weight flag per jaxpr input ({len(original.invars)}), got "
            f"{len(weights)} instead. Pass one bool per flattened argument."
        )
    jaxpr, used = _dead_code_eliminated(original)
    if owners is not None and len(used) == len(owners) and len(jaxpr.invars) < len(owners):
        owners = [o for o, keep in zip(owners, used) if keep]
    if weights is not None and len(used) == len(weights) and len(jaxpr.invars) < len(weights):
        weights = [w for w, keep in zip(weights, used) if keep]
    labels = classify(jaxpr, owners) if classify is not None else None
    consts = getattr(closed_jaxpr, "consts", None)
    if consts is not None and len(consts) == len(jaxpr.constvars) == len(original.constvars):
        jaxpr = jex_core.ClosedJaxpr(jaxpr, consts)  # the closed-over arrays' values (constant group sizes)
    masks, windows = attention_windows(jaxpr, weights)
    counter = _Counter(labels=labels, repeated=repeated_forward(jaxpr), attention=attention_products(jaxpr, weights),
                       masks=masks, windows=windows)
    counter.mapped_step = _mapped_step(jaxpr)
    counter.walk(jaxpr, "", 1, owners=None if owners is None or labels is not None else list(owners))
    once = _Counter(trip_counts=False)
    once.mapped_step = counter.mapped_step
    total_once = once.walk(jaxpr, "", 1) if counter.loops else None
    equations = tuple(
        EqnCount(stack, prim, counter.executions[key], cost, repeat, owner, part,
                 counter.recomputed_at.get(key, Cost()), loop)
        for key, cost in counter.costs.items()
        for stack, prim, repeat, owner, part, loop in [key]
    )
    total = sum((e.cost for e in equations), Cost())
    return JaxprCount(
        equations=equations,
        unsupported=dict(counter.unsupported),
        loops=tuple(counter.loops),
        notes=said_once(counter.notes, counter.unknown),
        total_once=total if total_once is None else total_once,
        recomputed=counter.recomputed,
        part_recomputed=dict(counter.part_recomputed),
        tagged=dict(counter.tagged),
        dense_expansion=counter.dense_expansion,
        part_unsupported={part: dict(missing) for part, missing in counter.part_unsupported.items()},
        windows=dict(counter.windowed),
    )


def _mapped_step(jaxpr: Any) -> Any:
    """The ``shard_map`` equation that is the whole of ``jaxpr`` (under ``jit`` wrappers: a
    ``jax.pmap``'d or ``shard_map``'d step), whose body is counted as one device's; None."""
    while len(jaxpr.eqns) == 1 and jaxpr.eqns[0].primitive.name in ("jit", "pjit"):
        jaxpr = getattr(jaxpr.eqns[0].params["jaxpr"], "jaxpr", jaxpr.eqns[0].params["jaxpr"])
    return jaxpr.eqns[0] if len(jaxpr.eqns) == 1 and jaxpr.eqns[0].primitive.name == "shard_map" else None


def _mapped_devices(eqn: Any) -> int:
    """The devices a ``shard_map`` equation runs its body on: its mesh's sizes over the axes it maps."""
    mesh = eqn.params.get("mesh")
    shape = dict(getattr(mesh, "shape", {}) or {})
    axes = eqn.params.get("newly_manual_axes", eqn.params.get("manual_axes", frozenset(shape)))
    return math.prod(int(shape.get(a, 1)) for a in axes)


def repeated_forward(jaxpr: Any) -> frozenset[tuple[Any, ...]]:
    """The paths (as `count_jaxpr` walks: an index per level, ``"body"``/``"cond"`` of a
    while loop, ``"b0"``.. of a cond's branches) of the ``jax.checkpoint`` recomputations
    that repeat a forward equation that also ran: each equation under ``transpose`` in the
    remat scope is matched, in order, to one that ran before it with the same scopes
    (`xla_cost.count.stacks.model_scopes`), primitive and result shapes: under ``jvp``
    outside every checkpoint, or, for a checkpoint inside a checkpoint's backward pass
    (a rematted block in a rematted stack), in the remat scope of a checkpoint around it,
    which ran it again first. The rest ran only there: the forward of ``jax.grad`` of a
    checkpointed loss (its primal is dead code), the masks autodiff adds for the backward
    pass (a ReLU's), not a recomputation."""
    found: list[tuple[tuple[Any, ...], str, Any, int]] = []  # path, stack, equation, checkpoints around it

    def walk(inner: Any, base: tuple[Any, ...], prefix: str, depth: int) -> None:
        for index, eqn in enumerate(getattr(inner, "jaxpr", inner).eqns):
            path, name = (*base, index), eqn.primitive.name
            stack = join_stack(prefix, str(eqn.source_info.name_stack))
            sub = next((eqn.params[p] for p in CALL_PARAMS if p in eqn.params), None) if name in CALL_LIKE else None
            if sub is not None:
                remat = name in REMAT_PRIMITIVES and bool(eqn.params.get("differentiated"))
                walk(sub, path, stack, depth + remat)
                continue
            found.append((path, stack, eqn, depth))
            if name == "scan":
                walk(eqn.params["jaxpr"], path, stack, depth)
            elif name == "while":
                walk(eqn.params["body_jaxpr"], (*path, "body"), stack, depth)
                walk(eqn.params["cond_jaxpr"], (*path, "cond"), stack, depth)
            elif name == "cond":
                for k, branch in enumerate(eqn.params["branches"]):
                    walk(branch, (*path, f"b{k}"), stack, depth)

    def twin(stack: str, eqn: Any) -> tuple[Any, ...]:
        # a remat repeats its call site: transpose(jvp(LM))/model/jvp(LM)/model/rematted_computation/b0; a
        # remat in a scanned body, the scan's: transpose(jvp(Net))/blocks/blocks/rematted_computation/mlp,
        # whose forward ran under jvp(Net)/blocks/mlp (a scope repeated in a row is one, on either side)
        scopes = model_scopes(stack)
        return (tuple(s for i, s in enumerate(scopes) if i == 0 or s != scopes[i - 1]), eqn.primitive.name,
                tuple((tuple(getattr(v.aval, "shape", ())), str(getattr(v.aval, "dtype", ""))) for v in eqn.outvars))

    walk(jaxpr, (), "", 0)
    # (the forward's own work, in or out of a checkpoint's call: a scanned body keeps its checkpoint's primal
    # in the call, under jvp, where the backward scan's body recomputes it)
    primal = collections.Counter(twin(stack, eqn) for _, stack, eqn, depth in found
                                 if classify_pass(stack) == "forward" and REMAT_SCOPE not in stack)
    recomputing = [(path, max(depth, 1), twin(stack, eqn)) for path, stack, eqn, depth in found
                   if REMAT_SCOPE in stack and classify_pass(stack) == "backward"]
    repeated = set()
    for level in sorted({depth for _, depth, _ in recomputing}):  # outer checkpoints first
        ran = [(path, key) for path, depth, key in recomputing if depth == level]
        for path, key in ran:
            if primal[key] > 0:
                primal[key] -= 1
                repeated.add(path)
        primal.update(key for _, key in ran)  # what a checkpoint inside this one's backward pass repeats
    return frozenset(repeated)


def count_function(fn: Callable[..., Any], *args: Any) -> JaxprCount:
    """Traces ``fn(*args)`` (abstract arguments are fine) and counts its jaxpr.

    Args:
      fn: any function jax can trace.
      *args: its arguments: arrays or ``jax.ShapeDtypeStruct`` pytrees.

    Returns:
      The `JaxprCount` of ``jax.make_jaxpr(fn)(*args)`` (`count_jaxpr`).
    """
    return count_jaxpr(jax.make_jaxpr(fn)(*args))
