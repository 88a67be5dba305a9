"""The measured time of a user's own training step (`xla_cost.analyze_step(timed=True)`), split.

The step runs as its own jit compiles it (its donation included), on arrays made
from the example arguments (the concrete ones as given, abstract ones as zeros,
random keys from key 0), timed and split as `xla_cost.analyze` times its train
step (`xla_cost.analysis.timing`):

1. The step as it runs: blocks of steps back to back, waited for once, each
   step fed the results of the last where a result has an argument's structure
   (the new ``TrainState`` for the state, the new parameters and optimizer
   state for a ``(params, opt_state, batch)`` step), as a training loop feeds
   them. Where no argument can be fed (an NNX step: its objects come back as
   one state), each step is waited for before the next starts (steps that share
   no data would overlap), so dispatch is in its time. A donated argument no
   result can feed (a donated batch) is copied afresh before each step, outside
   the clock, and its blocks are of one step.
2. The split: a profiler trace of a few more steps gives each HLO instruction's
   share of the step (`xla_cost.analysis.split`). Each instruction goes to the
   part (forward, backward, update, other) that the counts give the jaxpr
   equations at its ``op_name``: its name stack and primitive, nested jits'
   names aside (`xla_cost.count.step_parts` classified them); where no equation
   is there, its autodiff pass (``jvp`` forward, ``transpose`` backward), else
   the part with the most work of that primitive outside autodiff. Its row is
   found as `xla_cost.analyze`'s are. Each part's time is the step's median time
   times its mean share: the parts and the idle time add up to the step.

A user's step has no cross-check: its parts are one function, not programs of
their own that could be run apart (`xla_cost.analyze` builds its forward, grad
and update from the model). The parts' FLOP are the counts'; their bytes are the
operands and results of the compiled instructions attributed to them (as the
per-layer rows' bytes), from which GB/s and the roofline; ``train_step``'s
bytes are XLA's ``bytes accessed``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from xla_cost.analysis.report import PhaseCosts
from xla_cost.analysis.split import Attribution, StepSplit, bootstrap, traced_program
from xla_cost.analysis.timing import (
    PhaseTiming, Stepper, Timing, TimingOptions, against_counts, device_peak, run_blocks, trace_split,
)
from xla_cost.compiled import xla
from xla_cost.count.stacks import classify_pass, split_name_stack
from xla_cost.count.interpret import JaxprCount
from xla_cost.timemodel.devices import DevicePeak
from xla_cost.step import phases
from xla_cost.step.trees import leaf_roles
from xla_cost.step.user_step import UserStep

__all__ = ["time_user_step", "StepAttribution", "STEP_OPTIONS"]

STEP_OPTIONS = TimingOptions(phases=())
"""How a user's step is run and timed: as `xla_cost.analyze`'s one-program step
(`TimingOptions`' defaults), without separate programs."""

_JIT = re.compile(r"\bjit\([^()]*\)")
_SCOPES = frozenset({"shard_map", "pmap", "xla_pmap", "while", "body", "cond", "checkpoint", "remat",
                     "rematted_computation"})
"""Name-stack entries one side (the HLO ``op_name``, the jaxpr's name stack) may have and the other not."""


def _stack_key(name: str) -> tuple[str, ...]:
    """A name stack (an ``op_name``, its primitive last) with nested jits' names and loop and
    mapping scopes left out: ``jit(step)/jvp(jit(take_along_axis))/gather`` -> ``('jvp()', 'gather')``."""
    entries = (_JIT.sub("", entry) for entry in split_name_stack(name))
    return tuple(e for e in entries if e and e not in _SCOPES)


@dataclasses.dataclass(frozen=True)
class StepAttribution(Attribution):
    """`xla_cost.analysis.split.Attribution` for a user's step: the pass of an instruction
    is the part of the step (`xla_cost.step.phases.STEP_PARTS`) its ``op_name`` has in the
    counts (see the module docstring).

    Attributes:
      at: per ``(name-stack entries..., primitive)`` (`_stack_key`), the work of each part
        there (FLOP + transcendentals + executions, so that moving data counts).
      loose: per primitive, the work of each part outside autodiff.
      default: the part of an instruction with no name or none of the above.
    """

    at: Mapping[tuple[str, ...], Mapping[str, int]] = dataclasses.field(default_factory=dict)
    loose: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    default: str = "update"

    @classmethod
    def of_step(cls, counted: JaxprCount, param_paths: Sequence[str], roots: Sequence[str] = (),
                inputs: Mapping[str, str] | None = None) -> StepAttribution:
        """The attribution of a step whose jaxpr count (its equations labelled with parts) is ``counted``."""
        at: dict[tuple[str, ...], dict[str, int]] = {}
        loose: dict[str, dict[str, int]] = {}
        for e in counted.equations:
            part = e.part or "other"
            work = e.cost.flops + e.cost.transcendentals + e.executions
            found = at.setdefault((*_stack_key(e.name_stack), e.primitive), {})
            found[part] = found.get(part, 0) + work
            if classify_pass(e.name_stack) is None:
                found = loose.setdefault(e.primitive, {})
                found[part] = found.get(part, 0) + work
        parts = {e.part for e in counted.equations}
        base = Attribution.of(list(param_paths), (), roots, inputs)
        return cls(base.roots, base.modules, base.known, base.inputs, at=at, loose=loose,
                   default="update" if "update" in parts else "other")

    def pass_of(self, op_name: str) -> str:  # type: ignore[override] - the step's parts, not the model's passes
        """The part of the step an instruction named ``op_name`` is in."""
        key = _stack_key(op_name)
        found = self.at.get(key) or {}
        if not found:
            autodiff = classify_pass(op_name) if op_name else None
            if autodiff is not None:
                return autodiff
            found = self.loose.get(key[-1], {}) if key else {}
        return max(found, key=lambda part: (found[part], part)) if found else self.default


def _inputs(names: Sequence[str], args: Sequence[Any], owners: Sequence[str | None]) -> dict[str, str]:
    """The module of each program argument jax names ``names`` (``state.params['fc1']['kernel']``:
    an argument's name, then its leaf's path), for `Attribution.row`."""
    ends: dict[str, set[str | None]] = {}
    for (path, _), module in zip(jax.tree_util.tree_flatten_with_path(tuple(args))[0], owners):
        ends.setdefault(jax.tree_util.keystr(tuple(path[1:])), set()).add(module)
    out = {}
    for name in names:
        found = {frozenset(m) for end, m in ends.items()
                 if name.endswith(end) and re.fullmatch(r"[A-Za-z_]\w*", name[:len(name) - len(end)])}
        modules = set().union(*found) if found else set()
        if len(modules) == 1 and None not in modules:
            out[name] = modules.pop()
    return out


def _concrete(tree: Any) -> Any:
    def make(leaf: Any) -> Any:
        if isinstance(leaf, jax.Array):
            return leaf
        dtype = getattr(leaf, "dtype", None)
        shape = tuple(getattr(leaf, "shape", ()))
        if dtype is None:
            return leaf
        if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            keys = jax.random.split(jax.random.key(0), int(np.prod(shape)) or 1)
            return keys[: int(np.prod(shape))].reshape(shape)
        return jnp.zeros(shape, dtype)

    return jax.tree.map(make, tree)


def _same(a: Any, b: Any) -> bool:
    """Whether two pytrees have one structure and leaves of one shape and dtype."""
    if jax.tree.structure(a) != jax.tree.structure(b):
        return False
    return all(tuple(x.shape) == tuple(y.shape) and x.dtype == y.dtype
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _feeds(out: Any, args: Sequence[Any], state: Sequence[int]) -> dict[int, tuple[int, ...]]:
    """For each argument in ``state``, the path (indices into nested tuples, at most two deep)
    of the first result with its structure; the argument is then fed that result."""
    candidates: list[tuple[tuple[int, ...], Any]] = [((), out)]
    for i, item in enumerate(out if isinstance(out, (tuple, list)) else ()):
        candidates.append(((i,), item))
        candidates += [((i, j), sub) for j, sub in enumerate(item if isinstance(item, (tuple, list)) else ())]
    fed: dict[int, tuple[int, ...]] = {}
    for position in state:
        path = next((p for p, c in candidates if p not in fed.values() and _same(c, args[position])), None)
        if path is not None:
            fed[position] = path
    return fed


class _StepRunner(Stepper):
    """The user's compiled step: fed arguments take their results (`_feeds`); the donated
    arguments nothing feeds are copied from the originals before the clock starts; without a
    fed argument each step is waited for."""

    def __init__(self, executable: Any, args: list[Any], fed: Mapping[int, tuple[int, ...]],
                 copied: Sequence[int]) -> None:
        super().__init__(executable, args, {})
        self.paths, self.originals = dict(fed), {i: args[i] for i in copied}
        self.ready: list[dict[int, Any]] = []

    def prepare(self, steps: int) -> None:
        """Fresh copies of the donated arguments nothing feeds, for the next ``steps`` steps."""
        self.ready = [{i: jax.tree.map(lambda a: a.copy(), a) for i, a in self.originals.items()}
                      for _ in range(steps)] if self.originals else []
        jax.block_until_ready(self.ready)

    def run(self, steps: int) -> None:
        if self.originals and len(self.ready) < steps:
            self.prepare(steps)
        out = None
        for _ in range(steps):
            for i, fresh in (self.ready.pop() if self.originals else {}).items():
                self.args[i] = fresh
            out = self.executable(*self.args)
            for position, path in self.paths.items():
                result = out
                for index in path:
                    result = result[index]
                self.args[position] = result
            if not self.paths:
                jax.block_until_ready(out)
        jax.block_until_ready(out)

    def timed(self, steps: int) -> float:
        if self.originals:
            self.prepare(steps)
        return super().timed(steps)


def time_user_step(prepared: UserStep, compiled: xla.CompiledPhase | None, costs: Mapping[str, PhaseCosts], *,
                   counted: JaxprCount | None = None, roots: Sequence[str] = (),
                   options: TimingOptions | None = None) -> Timing:
    """Runs the compiled step, times it and splits it by a trace (see the module docstring).

    Args:
      prepared: the step and its arguments (`xla_cost.step.user_step.prepare_step`).
      compiled: the step compiled with its executable (``counter='xla'``); None: not timed.
      costs: the report's figures per part (`PhaseCosts`): FLOP, model FLOP and
        ``train_step``'s bytes for FLOP/s, MFU, GB/s and the roofline.
      counted: the step's jaxpr count, its equations labelled with parts; None:
        no split (``train_step`` only).
      roots: the model classes' names that open the name stacks.
      options: how the step is run and traced (None: `STEP_OPTIONS`).

    Returns:
      A `Timing`: ``train_step`` the step as one program; ``forward``, ``backward``,
      ``grad``, ``update`` and ``other`` from the trace (where one could be had), each
      with FLOP/s, MFU, GB/s and the roofline; ``skipped`` where it could not run.
    """
    options = options if options is not None else STEP_OPTIONS
    device = xla.device_kind()
    dtype = next((str(leaf.dtype) for leaf, o in zip(jax.tree.leaves(prepared.args), prepared.owners)
                  if o is not None), "float32")
    try:
        peak = device_peak()
    except ValueError:
        peak = None
    if compiled is None or compiled.executable is None:
        return Timing(device, peak, dtype, {}, {}, None, skipped="timing needs the compiled step (counter='xla')")
    executable = compiled.executable
    notes: list[str] = []
    try:
        donated = [any(getattr(a, "donated", False) for a in jax.tree.leaves(info))
                   for info in executable.args_info[0]]
        # the caller's own arrays are never donated: a donated argument runs on a copy
        args = [jax.tree.map(lambda a: a.copy() if isinstance(a, jax.Array) else a, arg) if donated[i] else arg
                for i, arg in enumerate(_concrete(prepared.args))]
        roles = [any(leaf_roles(a)) for a in prepared.args]
        offset, state = 0, []
        for i, arg in enumerate(prepared.args):
            count = len(jax.tree.leaves(arg))
            if donated[i] or roles[i] or any(o is not None for o in prepared.owners[offset:offset + count]):
                state.append(i)
            offset += count
        fed = _feeds(executable.out_info, args, state)
        copied = [i for i, d in enumerate(donated) if d and i not in fed]
        if copied:
            options = dataclasses.replace(options, max_steps_per_block=1, max_traced=options.min_traced)
        runner = _StepRunner(executable, args, fed, copied)
        run = run_blocks(runner, options, tuple(f"args[{i}]" for i, d in enumerate(donated) if d))
        text = executable.as_text() or ""
        split = None
        if counted is not None and text:
            names = {n for s in traced_program(text).sources.values() for n in s.reads}
            attribution = StepAttribution.of_step(counted, list(prepared.param_paths), roots,
                                                  _inputs(sorted(names), prepared.args, prepared.owners))
            split = trace_split(runner, text, attribution, options, notes, how=_HOW, instead=_INSTEAD)
    except Exception as exc:  # noqa: BLE001 - the counts must survive a failed run
        first = next((line for line in str(exc).strip().splitlines() if line.strip()), type(exc).__name__)
        return Timing(device, peak, dtype, {}, {}, None,
                      skipped=f"running the step failed: {type(exc).__name__}: {first}")
    results = _results(run.block_s, split, options)
    library = {"train_step": compiled.library_bytes} if compiled.library_bytes else {}
    for part, t in results.items():
        cost = costs.get(part)
        if cost is not None and part != "train_step":
            moved = None if split is None else _part_bytes(split.pass_bytes, part)
            cost = dataclasses.replace(cost, bytes_accessed=moved)
        # an accelerator of no known peak: FLOP/s and bytes/s still, no MFU and no roofline
        results[part] = against_counts(t, cost, library.get(part, 0), peak or DevicePeak(device, {}, 0.0, ""), dtype)
    fractions: dict[str, float] = {}
    ratio = None
    if split is not None:
        shares = {p: results[p].median_s for p in phases.SPLIT}
        total = sum(shares.values())
        fractions = {p: v / total for p, v in shares.items()} if total > 0 else {}
        ratio = shares["backward"] / shares["forward"] if shares["forward"] > 0 else None
    fed_names = ", ".join(f"args[{i}]" for i in sorted(fed)) or "none"
    notes.insert(0, (
        f"the step as its own jit compiles it, on arrays made from its arguments (zeros where they were "
        f"abstract), {run.steps_per_block} steps a block; fed each step's results: {fed_names}"
        + ("; each step waited for (no argument is fed: dispatch is in its time)" if not fed else "")
        + (f"; donated arguments no result feeds ({', '.join(f'args[{i}]' for i in copied)}) copied afresh "
           "before each step, outside the clock" if copied else "")))
    if split is not None:
        notes.append("parts' GB/s and roofline: the bytes of the compiled instructions attributed to each part "
                     "(as per-layer rows'), FLOP the counts'; train_step's: XLA's bytes accessed; no cross-check: "
                     "a user's step is one function, its parts no programs to run apart")
    return Timing(device, peak, dtype, results, fractions, ratio, step=run, split=split, notes=tuple(notes),
                  library_bytes=library)


_HOW = ("to the part of the step (forward, backward, update, other) the counts give the jaxpr equations at its "
        "op_name (name stack and primitive), else its autodiff pass")
_INSTEAD = "the step is timed whole (its parts have no programs of their own)"


def _part_bytes(found: Mapping[str, int | None], part: str) -> int | None:
    """A part's bytes in the trace's split (``grad``: forward + backward); None where unknown."""
    names = ("forward", "backward") if part == "grad" else (part,)
    values = [found.get(name, 0) for name in names]
    return None if None in values else sum(values)  # type: ignore[arg-type]


def _results(blocks: Sequence[float], split: StepSplit | None, options: TimingOptions) -> dict[str, PhaseTiming]:
    """The parts from the trace (in report order) and the one-program step."""
    out: dict[str, PhaseTiming] = {}
    if split is not None:
        for part in ("forward", "backward", "grad", "update", "other"):
            if part in split.parts:
                spread = split.parts[part]
                out[part] = PhaseTiming(spread.seconds, None, None, split.traced_steps, low_s=spread.low_s,
                                        high_s=spread.high_s, source="trace")
    q25, q75 = np.percentile(blocks, [25, 75])
    interval = bootstrap(blocks, options.bootstrap)
    out["train_step"] = PhaseTiming(interval.seconds, min(blocks), float(q75 - q25), len(blocks),
                                    low_s=interval.low_s, high_s=interval.high_s, source="one program")
    return out
