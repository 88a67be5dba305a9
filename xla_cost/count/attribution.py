"""Per-layer, per-pass grouping of jaxpr counts that adds up to the phase total.

An equation's name stack says both where it comes from and which pass it is in:

* ``jvp(LinearNet)/fc1``            -> module ``fc1``, forward pass
* ``transpose(jvp(LinearNet))/fc1`` -> module ``fc1``, backward pass
* ``LinearNet/fc1`` (no autodiff)  -> module ``fc1``, the phase's own pass

A name stack is a chain of calls, not a module path: `xla_cost.count.module_paths` resolves
it against the model's modules, and `unmatched_note` names the stacks that resolve to nothing.

Each equation goes to the innermost module on its path that holds parameters
(itself or below it), or to the parameter-free module just below that one (a
Dropout); what belongs to no module (the loss, activations applied in the root
module, the optimizer) goes to the remainder row, so that the rows always add up
to the jaxpr total. Rows can be merged to a module depth.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from xla_cost.step import phases
from xla_cost.choices import REMAINDER
from xla_cost.errors import InputError
from xla_cost.count.hoisted import hoisted_invariants
from xla_cost.count.interpret import EqnCount
from xla_cost.count.stacks import bare_stack, classify_pass, split_name_stack, unwrap
from xla_cost.count.layers import LayerCosts
from xla_cost.count.module_paths import HLO_SCOPES, in_root, module_path, module_tree, op_name_path, \
    with_ancestors
from xla_cost.count.registry import MATRIX_PRODUCTS, Cost

__all__ = [
    "REMAINDER", "LayerCount", "split_name_stack", "classify_pass", "bare_stack", "module_tree", "module_path",
    "in_root", "op_name_path", "owner", "with_ancestors", "model_roots", "stack_modules", "unmatched_stacks",
    "unmatched_note", "root_products_note", "borrowed_note", "ROOT_PRODUCTS_SHARE", "HLO_SCOPES", "attribute",
    "attribute_step", "attribute_parts", "check_depth",
]


LayerCount = LayerCosts
"""The row type `attribute` returns: `xla_cost.LayerCosts`."""


def owner(path: str, modules: Sequence[str], known: Collection[str] = ()) -> str:
    """The row of an equation (or a buffer) at module ``path``: the one mapper
    from a module path to its per-layer row.

    The longest module in ``modules`` (those holding parameters and their
    ancestors, `with_ancestors`) that contains ``path``; where ``path`` goes deeper, into modules without parameters (a
    Dropout, a parameter-free attention core), the first of those below it, so
    that their work (a dropout mask's random bits) has a row of its own. An
    equation outside every module is the `REMAINDER`'s.
    """
    if not path:
        return REMAINDER
    best = ""
    for module in modules:
        if (path == module or path.startswith(module + "/")) and len(module) > len(best):
            best = module
    if path != best:
        below = path[len(best) + 1:] if best else path
        child = f"{best}/{below.split('/')[0]}" if best else below.split("/")[0]
        if child in known:
            return child
    return best or REMAINDER


def model_roots(stacks: Iterable[str], param_paths: Iterable[str]) -> list[str]:
    """The name-stack entries that stand for the whole model (its class name), in sorted
    order: the first entry of a stack (transforms left out) that is no top-level module
    holding parameters and that opens one (``GPT`` of ``GPT/h_0/attn``; a Linen
    ``model.apply`` inside an apply function puts the model's class name there); where every
    parameter is the root's own, any first entry. A scope of the user's own over no module
    (a pure-JAX model's ``jax.named_scope("ffn")``) is no root: its work matches no module."""
    top = {path.split("/")[0] for path in param_paths if path}
    firsts = set()
    for stack in stacks:
        entries = module_path(stack).split("/")
        if entries[0] and entries[0] not in top and (not top or (len(entries) > 1 and entries[1] in top)):
            firsts.add(entries[0])
    return sorted(firsts)


def stack_modules(stacks: Iterable[str], root: str | Sequence[str] | None) -> dict[str, None]:
    """The modules a step's name stacks name, for rows where no parameter says which
    modules there are (a step that makes its parameters inside itself: purejaxrl's
    ``network.init`` in its jitted ``train``): each stack's `module_path` up to its first
    einsum spec (``jvp(ActorCritic)/Dense_0`` -> ``ActorCritic/Dense_0``), the class
    names kept (two models' ``Dense_0`` are two rows), with its ancestors, each with an
    unknown (None) parameter count, as `attribute`'s ``param_paths``."""
    found: dict[str, None] = {}
    for stack in stacks:
        names = module_path(stack, root).split("/")
        cut = next((i for i, name in enumerate(names) if _is_jax_scope(name)), len(names))
        found.update(dict.fromkeys(with_ancestors(["/".join(names[:cut])])))
    return found


def _rows(
    param_paths: Iterable[str], root: str | Sequence[str] | None, known_modules: Collection[str],
) -> Callable[[EqnCount], tuple[str, str]]:
    """The module path and the row of an equation, as `attribute` maps them:
    its name stack resolved against the model's modules (`module_path`), or
    where that names no module, the module whose data it follows
    (`EqnCount.owner`); the row `owner` of that."""
    modules = with_ancestors(p for p in param_paths if p)
    tree = module_tree(modules, known_modules)
    found: dict[tuple[str, str | None], tuple[str, str]] = {}

    def row_of(eqn: EqnCount) -> tuple[str, str]:
        key = (eqn.name_stack, eqn.owner)
        if key not in found:
            path = module_path(eqn.name_stack, root, tree) or (eqn.owner or "")
            row = owner(path, modules, tree)
            if row == REMAINDER and not _unnamed(path):  # a stack that names no module of the model
                path = _below(path, tree) or eqn.owner or path
                row = owner(path, modules, tree)
            found[key] = (path, row)
        return found[key]

    return row_of


def _unnamed(path: str) -> bool:
    """A module path of jax's own scopes alone (an einsum's spec in the root module), or none."""
    return all(_is_jax_scope(name) for name in path.split("/") if name)


def _below(path: str, tree: Collection[str]) -> str | None:
    """``path``, which names no module from the root, as the path of the one module whose path ends
    with its leading entries (the rest kept after it), the most entries first: work that jax
    hoisted out of a scanned stack's loop keeps the scopes inside the loop alone
    (``layers/self_attention/rotary_embedding`` for ``decoder/layers/self_attention/rotary_embedding``).
    None where no such module, or several, end so."""
    names = path.split("/")
    for k in range(len(names), 0, -1):
        tail = "/" + "/".join(names[:k])
        found = [module for module in tree if module.endswith(tail)]
        if len(found) == 1:
            return "/".join([found[0], *names[k:]])
        if found:
            return None
    return None


def check_depth(depth: object) -> None:
    """Raises `xla_cost.InputError` unless ``depth`` is None or an integer >= 1."""
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise InputError(
            "depth (--depth) an integer >= 1, or None (every module)", repr(depth),
            "Use depth=1 (--depth 1) for top-level modules.",
        )


def _truncate(path: str, depth: int | None) -> str:
    if depth is None or path == REMAINDER:
        return path
    return "/".join(path.split("/")[:depth])


def attribute(
    equations: Iterable[EqnCount],
    param_paths: Mapping[str, int | None],
    *,
    root: str | Sequence[str] | None,
    depth: int | None = None,
    default_pass: str = "forward",
    known_modules: Collection[str] = (),
) -> tuple[LayerCosts, ...]:
    """Groups equation costs by module and pass.

    An equation's name stack is resolved against the model's modules (the
    parameters' paths, their ancestors and ``known_modules``; `module_path`),
    and it belongs to the innermost module on that path that holds
    parameters, itself or below it: a parametrised leaf (``fc1``) for the
    layer's own operations, or an enclosing module (``layer1``, ``attn``) for the
    operations it runs between its children (activations, residual adds, the
    attention scores); or, deeper, to the parameter-free module just below
    that one (a Dropout's random bits and mask). Outside every module, an equation with an
    `EqnCount.owner` (optimizer arithmetic on one module's parameters, traced
    from the data) goes to that module. What is left (the loss, glue in the root
    module, optimizer work shared by all modules such as a global norm) goes to
    the `REMAINDER` row. A name stack that names no module from the root goes to
    the one module whose path ends with its entries (work hoisted out of a scanned
    stack's loop), else to the equation's owner; failing both, to the `REMAINDER`
    (`unmatched_note` says which).

    Args:
      equations: counts from `xla_cost.count.interpret.count_jaxpr` of one phase.
      param_paths: parameter count per module path that owns parameters directly,
        in model order; None: unknown (`stack_modules`), and so the row's.
      root: the model's class name (the first name-stack entry to strip), or
        several such names.
      depth: None (default): one row per module as above. N >= 1: module paths
        are cut after N components and rows merged (``layer1/conv1`` -> ``layer1``
        at depth 1), with the parameters of everything under them.
      known_modules: every module path of the model, with parameters or
        without; a parameter-free one gets a row of its own, and name stacks
        are resolved against them too.
      default_pass: the pass of equations outside any autodiff transform
        (``update`` for a train step, whose optimizer has no transform).

    Returns:
      One row per module, in the order the program first uses them (modules it
      never uses last), then the `REMAINDER` row; their costs add up to the sum
      of ``equations`` exactly.

    Raises:
      InputError: ``depth`` is not None or a positive integer (a ValueError).
    """
    check_depth(depth)
    equations = list(equations)
    leaves = [p for p in param_paths if p != ""]
    row_of = _rows(leaves, root, known_modules)
    parameters: dict[str, int | None] = {}
    for leaf in leaves:
        row = _truncate(leaf, depth)
        parameters[row] = _add(parameters.get(row, 0), param_paths[leaf])

    passes = {"forward": {}, "backward": {}, "update": {}}
    recomputed: dict[str, Cost] = {}
    contexts: dict[str, dict[tuple[Any, ...], Cost]] = {}  # (pass, loop, repeat) -> the row's cost there
    mixed: dict[str, int] = {}  # the repeat all of a row's equation groups share; 0: they differ
    first_use: dict[str, int] = {}
    for index, eqn in enumerate(equations):
        row = _truncate(row_of(eqn)[1], depth)
        which = classify_pass(eqn.name_stack) or default_pass
        if which not in passes:
            raise ValueError(
                f"Expected default_pass forward, backward or update, got {which!r} instead."
            )
        target = passes[which]
        target[row] = target.get(row, Cost()) + eqn.cost
        if eqn.recomputed.flops or eqn.recomputed.transcendentals or eqn.recomputed.bytes_accessed:
            recomputed[row] = recomputed.get(row, Cost()) + eqn.recomputed
        first_use.setdefault(row, index)
        where = contexts.setdefault(row, {})
        where[(which, eqn.loop, eqn.repeat)] = where.get((which, eqn.loop, eqn.repeat), Cost()) + eqn.cost
        mixed[row] = mixed.get(row, eqn.repeat) if mixed.get(row, eqn.repeat) == eqn.repeat else 0
    trips = {row: _runs(where) for row, where in contexts.items()}
    if mixed.get(REMAINDER) == 0:  # the root's glue in and out of its loops (a loss, a scan's counter): no count
        trips[REMAINDER] = 1

    paths = [p for p in dict.fromkeys([*parameters, *first_use]) if p != REMAINDER]
    paths.sort(key=lambda p: first_use.get(p, len(equations)))

    def row(path: str) -> LayerCosts:
        return LayerCosts(
            path=path,
            parameters=_add(parameters.get(path, 0), param_paths.get("", 0) if path == REMAINDER else 0),
            forward=passes["forward"].get(path, Cost()),
            backward=passes["backward"].get(path, Cost()),
            update=passes["update"].get(path, Cost()),
            trip_count=trips.get(path, 1),
            recomputed=recomputed.get(path, Cost()),
        )

    return (*[row(p) for p in paths], row(REMAINDER))


def _add(a: int | None, b: int | None) -> int | None:
    """Two parameter counts added; None (unknown) where either is."""
    return None if a is None or b is None else a + int(b)


def _most(rows: Iterable[LayerCosts]) -> int | None:
    """The most parameters of a row's shares; None (unknown) where any is."""
    counts = [row.parameters for row in rows]
    return None if None in counts else max(counts)


def _runs(contexts: Mapping[tuple[Any, ...], Cost]) -> int:
    """How many times a row's work runs in a program (`LayerCosts.trip_count`), from its
    cost by (pass, innermost loop, repeat): in the pass that holds most of its FLOP, the
    repeats (1 outside every loop) of the places that each hold a whole run of it, at least
    half the largest per-run cost there, summed: a scanned layer group's length, its first
    micro-batch outside a ``fori_loop`` over the rest counted as one more run; not the loop
    invariants a grad program computes once outside its loop (a small share of a run)."""
    if not contexts:
        return 1
    weight = (lambda c: c.flops) if any(c.flops for c in contexts.values()) else (lambda c: c.bytes_accessed)
    passes: dict[str, float] = {}
    for (which, _, _), cost in contexts.items():
        passes[which] = passes.get(which, 0) + weight(cost)
    bulk = max(passes, key=passes.__getitem__)
    here = {(loop, repeat): weight(cost) / max(repeat, 1)
            for (which, loop, repeat), cost in contexts.items() if which == bulk}
    most = max(here.values())
    if not most:
        return max(repeat for _, repeat in here)
    return sum(repeat for (_, repeat), per_run in here.items() if 2 * per_run >= most)


def _cost_sum(terms: Sequence[tuple[int, Cost]]) -> Cost:
    return sum((v * k for k, v in terms), Cost())


def attribute_step(
    programs: Mapping[str, Iterable[EqnCount]],
    param_paths: Mapping[str, int | None],
    *,
    root: str | Sequence[str] | None,
    depth: int | None = None,
    known_modules: Collection[str] = (),
) -> tuple[LayerCosts, ...]:
    """Rows whose columns add up to the ``forward``, ``backward`` and ``update`` phases.

    Each program's equations are grouped by module (`attribute`); a row's
    column is then its phase as `xla_cost.step.phases` declares it: its share of
    the forward program, of the update program, and for ``backward`` its share
    of ``grad`` minus its share of ``forward`` (the phase's own formula, so ReLU
    masks and other values autodiff saves land in backward), the forward's loop
    invariants that ``grad`` ran once outside its loop counted with the runs they
    lost (`xla_cost.count.hoisted`), as the backward phase is. Summed over the
    rows, each column equals the jaxpr count of its phase exactly.

    Args:
      programs: equation counts of each program the columns need (``forward``,
        ``grad``, ``update``); rows come in the order these first use them.
      param_paths, root, depth, known_modules: as for `attribute`.

    Raises:
      ValueError: a program a column needs is missing.
    """
    columns = {
        name: (dict(p.formula) if not p.is_program() else {name: 1})
        for name in phases.SPLIT
        for p in (phases.phase(name),)
    }
    needed = {program for formula in columns.values() for program in formula}
    if needed - set(programs):
        raise ValueError(
            f"Expected the equations of {', '.join(sorted(needed))}, got {', '.join(programs)} instead."
        )
    programs = dict(programs)
    if "forward" in programs and "grad" in programs:  # the forward's loop invariants the grad ran once
        programs["forward"], programs["grad"] = tuple(programs["forward"]), tuple(programs["grad"])
        programs["grad"] = hoisted_invariants(programs["forward"], programs["grad"]).restored(programs["grad"])
    shares: dict[str, dict[str, LayerCosts]] = {}
    for name, equations in programs.items():
        pass_of = "update" if phases.phase(name).follow_data else "forward"
        rows = attribute(
            equations, param_paths, root=root, depth=depth, default_pass=pass_of,
            known_modules=known_modules,
        )
        shares[name] = {row.path: row for row in rows}
    order = list(
        dict.fromkeys(
            path for rows in shares.values() for path in rows if path != REMAINDER
        )
    )
    merged = []
    for path in [*order, REMAINDER]:
        found = [rows[path] for rows in shares.values() if path in rows]
        totals = {name: rows[path].total if path in rows else Cost() for name, rows in shares.items()}
        cost = {col: phases.combine(f, totals, add=_cost_sum) for col, f in columns.items()}
        recomputed = {name: rows[path].recomputed if path in rows else Cost() for name, rows in shares.items()}
        merged.append(
            LayerCosts(
                path=path,
                parameters=_most(found),
                forward=cost["forward"],
                backward=cost["backward"],
                update=cost["update"],
                trip_count=next((row.trip_count for row in found), 1),
                recomputed=phases.combine(columns["backward"], recomputed, add=_cost_sum),
            )
        )
    return tuple(merged)


def attribute_parts(
    parts: Mapping[str, Iterable[EqnCount]],
    param_paths: Mapping[str, int | None],
    *,
    root: str | Sequence[str] | None,
    depth: int | None = None,
    known_modules: Collection[str] = (),
) -> tuple[LayerCosts, ...]:
    """Rows whose ``forward``, ``backward`` and ``update`` columns are each
    part's equations grouped by module, for a step classified into parts
    (`xla_cost.count.step_parts`) rather than made of separate programs.

    Each part's equations are grouped by module (`attribute`: the module on
    the name stack, else the equation's owner, else the remainder); a row's
    column is its share of that part, so each column adds up to its part's
    jaxpr count exactly.

    Args:
      parts: equations by part name (``forward``, ``backward``, ``update``).
      param_paths, root, depth, known_modules: as for `attribute`.
    """
    shares = {
        name: {row.path: row for row in attribute(equations, param_paths, root=root, depth=depth,
                                                  default_pass="forward", known_modules=known_modules)}
        for name, equations in parts.items()
    }
    order = list(dict.fromkeys(path for rows in shares.values() for path in rows if path != REMAINDER))
    merged = []
    for path in [*order, REMAINDER]:
        found = [rows[path] for rows in shares.values() if path in rows]
        column = {name: rows[path].total if path in rows else Cost() for name, rows in shares.items()}
        merged.append(LayerCosts(
            path=path, parameters=_most(found),
            forward=column.get("forward", Cost()), backward=column.get("backward", Cost()),
            update=column.get("update", Cost()),
            trip_count=_bulk_runs({name: rows[path] for name, rows in shares.items() if path in rows}),
            recomputed=shares["backward"][path].recomputed if path in shares.get("backward", {}) else Cost(),
        ))
    return tuple(merged)


def _bulk_runs(found: Mapping[str, LayerCosts]) -> int:
    """A row's runs (`LayerCosts.trip_count`) over a classified step's parts, as `_runs` judges
    them in one program: those of the part that holds most of the row's FLOP (else bytes), of
    the forward and backward parts; the update's where the row has none (its runs over the
    stacked parameters of a scanned group, once, are not its layers'). Not the most of any part:
    a block's residual adds run once before a loop of 4 chunks of its MLP, whose backward holds
    only the loop's few FLOP of the block itself, runs once (was x4, the backward part's)."""
    passes = {name: row for name, row in found.items() if name != "update"} or dict(found)
    weight = ((lambda row: row.total.flops) if any(row.total.flops for row in passes.values())
              else (lambda row: row.total.bytes_accessed))
    return max(passes.values(), key=weight).trip_count


def _is_jax_scope(name: str) -> bool:
    """An entry jax puts on the name stack by itself: an einsum's spec
    (``bqhd,bkhd->bhqk``, ``ij,jk``)."""
    return "->" in name or "," in name


def unmatched_stacks(
    equations: Iterable[EqnCount],
    param_paths: Iterable[str],
    *,
    root: str | Sequence[str] | None,
    known_modules: Collection[str] = (),
) -> dict[str, int]:
    """The name stacks whose work `attribute` puts in the `REMAINDER` row
    because they name something that is no module of the model, with their FLOP.

    A stack is given with its transforms left out
    (``transpose(jvp(Net))/blocks.0/fc`` -> ``Net/blocks.0/fc``; the root a
    checkpointed backward pass repeats, ``transpose(jvp(Net))/jvp(Net)/fc``, once),
    so that a module's forward and backward work come under one stack. Work outside
    every module (an empty path, the root's own, an einsum's spec in the root
    module) is the remainder's by design and not listed.

    Args:
      equations: counts of one program, as for `attribute`.
      param_paths: the module paths that hold parameters (``param_paths``'s keys
        for `attribute`); root, known_modules: as for `attribute`.

    Returns:
      FLOP per stack, in the order the program first uses them.
    """
    row_of = _rows(param_paths, root, known_modules)
    out: dict[str, int] = {}
    for eqn in equations:
        path, row = row_of(eqn)
        if row != REMAINDER or _unnamed(path):
            continue
        stack = _shown_stack(eqn.name_stack)
        out[stack] = out.get(stack, 0) + eqn.cost.flops
    return out


ROOT_PRODUCTS_SHARE = 0.01
"""The share of a forward pass's matrix-product FLOP that the `REMAINDER` row may hold
before `root_products_note` says so."""


def root_products_note(
    forward: Iterable[EqnCount],
    param_paths: Iterable[str],
    *,
    root: str | Sequence[str] | None,
    known_modules: Collection[str] = (),
    reads: Iterable[tuple[str, str]] = (),
) -> str | None:
    """A report note where the forward pass's matrix products outside every module (the
    root's own code, which the `REMAINDER` row holds by design) are more than
    `ROOT_PRODUCTS_SHARE` of its products: a tied head written as
    ``x @ self.embed.embedding.T`` in the root's ``__call__`` is a layer's work that no
    row shows. Where no product is on a module's row and those in the `REMAINDER` read
    modules' parameters (``reads``), the code names no module at all (a function of a
    params tree under no ``jax.named_scope`` of its keys): said so, not "the root's own code".
    None otherwise.

    Args:
      forward: the forward program's equation counts; param_paths, root,
        known_modules: as for `attribute`; reads: ``(module, name stack)`` of each product
        reading a module's parameter (`xla_cost.count.param_reads.parameter_reads`).
    """
    row_of = _rows(param_paths, root, known_modules)
    products = [(row_of(eqn), eqn.cost.flops) for eqn in forward if eqn.primitive in MATRIX_PRODUCTS]

    def named(path: str) -> bool:  # a scope that is no module of the model: `unmatched_note` says so
        return not all(_is_jax_scope(name) for name in path.split("/") if name)

    left = sum(flops for (path, row), flops in products if row == REMAINDER and not named(path))
    whole = sum(flops for _, flops in products)
    if not whole or left <= ROOT_PRODUCTS_SHARE * whole:
        return None
    read = sorted({m for m, stack in reads if row_of(EqnCount(stack, "dot_general", 1, Cost()))[1] == REMAINDER})
    if read and all(row == REMAINDER for (_, row), _ in products):  # no stack names a module: no code is any module's
        return (f"per-layer rows: {left:,} FLOP of the forward's matrix products ({left / whole:.0%}) are in the "
                f"{REMAINDER} row with their backward pass, though products there read the parameters of {len(read)} "
                f"module(s) ({', '.join(read[:3])}{' ...' if len(read) > 3 else ''}): no name stack of the forward "
                "names a module (rows follow name stacks), so their rows hold their parameters and update only; "
                f"run each layer's code under a jax.named_scope of its params key (`{read[0]}`) to give it its row")
    return (f"per-layer rows: {left:,} FLOP of the forward's matrix products ({left / whole:.0%}) are computed "
            f"outside every module, in the root's own code, and are in the {REMAINDER} row with their backward "
            "pass (a tied head written as `x @ self.embed.embedding.T`, say): computed in a module's method "
            "(`self.embed.attend(x)`) they would be on that module's row")


def borrowed_note(
    reads: Iterable[tuple[str, str]],
    param_paths: Iterable[str],
    *,
    root: str | Sequence[str] | None,
    known_modules: Collection[str] = (),
    shown: int = 3,
) -> str | None:
    """A report note naming the rows whose parameters matrix products read on another
    module's row (`xla_cost.count.param_reads.parameter_reads`): a block whose own method
    computes with its child's weights (a mixture of experts's ``self.experts.w1.kernel``) has
    the products on its row, and the child's row parameters (and their update) with no forward
    or backward work. None where every product reading a row's parameters is on that row, or on a row
    below it (a parameter handed down is the child's input: a learned query table multiplied by the
    keys of the cross-attention it is passed to). A module
    read on several rows is named once, its rows listed (``counted in moe and moe/router``).

    Args:
      reads: ``(module, name stack)`` of each product reading a module's parameter.
      param_paths, root, known_modules: as for `attribute`.
      shown: how many groups of rows to name (rows alike but for a layer's index: one group).
    """
    row_of = _rows(param_paths, root, known_modules)
    modules = with_ancestors(p for p in param_paths if p)
    tree = module_tree(modules, known_modules)
    computing: dict[str, set[str]] = {}  # each borrowed module: the rows whose products read it
    for module, stack in reads:
        held = owner(module, modules, tree)
        computed = row_of(EqnCount(stack, "dot_general", 1, Cost()))[1]
        if REMAINDER not in (held, computed) and held != computed and not computed.startswith(f"{held}/"):
            # (the root's own: `root_products_note`; an ancestor's parameter handed to a child is its input: a
            # Perceiver's learned latents, the queries its cross-attention multiplies by its keys)
            computing.setdefault(held, set()).add(computed)
    borrowed: dict[tuple[str, ...], set[str]] = {}  # the rows computing alike: the modules they read
    for held, rows in computing.items():
        borrowed.setdefault(tuple(sorted(rows)), set()).add(held)
    groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[tuple[str, ...]]] = {}
    for rows, held in sorted(borrowed.items()):  # named below the rows' common module
        base = posixpath.commonpath(rows)
        relative = tuple(sorted(h[len(base) + 1:] if base and h.startswith(base + "/") else h for h in held))
        groups.setdefault((tuple(re.sub(r"(?<![^/])\d+(?![^/])", "N", r) for r in rows), relative), []).append(rows)
    said = []
    for (_, relative), alike in list(groups.items())[:shown]:
        parent = {r.rpartition("/")[0] for r in relative}
        names = (f"{relative[0]}, " + ", ".join(r.rpartition("/")[2] for r in relative[1:])
                 if len(parent) == 1 and "" not in parent else ", ".join(relative)).rstrip(", ")
        rows = " and ".join(filter(None, (", ".join(alike[0][:-1]), alike[0][-1])))
        others = [r[0] for r in alike[1:]]
        likewise = f" (and likewise {len(others)} more: {', '.join(others[:2])}{', ...' * (len(others) > 2)})"
        said.append(f"the products of {names}'s parameters are counted in {rows}{likewise * bool(others)}")
    more = f"; and {len(groups) - shown} more such rows" if len(groups) > shown else ""
    whose = "method computes" if all(len(a[0]) == 1 for a in list(groups.values())[:shown]) else "methods compute"
    return (f"per-layer rows: {'; '.join(said)}{more}, whose {whose} them (the work of any method is "
            "its module's): the rows holding those parameters count their update, not those products") if said else None


def _shown_stack(name_stack: str) -> str:
    """A name stack with its transforms left out, as `unmatched_stacks` names it: an
    entry a transform repeats (the root of ``transpose(jvp(Net))/jvp(Net)/fc``, a
    checkpointed backward pass's) once (``Net/fc``), not doubled."""
    names: list[str] = []
    for component in split_name_stack(name_stack):
        name, transforms = unwrap(component)
        if name and not (transforms and names and names[-1] == name):
            names.append(name)
    return "/".join(names)


def unmatched_note(
    programs: Mapping[str, Iterable[EqnCount]],
    param_paths: Iterable[str],
    *,
    root: str | Sequence[str] | None,
    known_modules: Collection[str] = (),
    shown: int = 3,
    called: bool = False,
) -> str | None:
    """A report note naming the name stacks that match no module of the model
    (`unmatched_stacks`), whose work the per-layer rows leave in the
    `REMAINDER`; None when every stack matched.

    Args:
      programs: each program's equation counts (``forward``, ``grad``, ...).
      param_paths, root, known_modules: as for `unmatched_stacks`.
      shown: how many stacks to name, the ones with the most FLOP first.
      called: whether ``known_modules`` are every module the analysis saw the
        model's call reach (`xla_cost.analyze`'s), so that the note does not
        send the user to the call they made.
    """
    param_paths = list(param_paths)
    flops: dict[str, int] = {}
    per_program: dict[str, int] = {}
    for name, equations in programs.items():
        found = unmatched_stacks(equations, param_paths, root=root, known_modules=known_modules)
        per_program[name] = sum(found.values())
        for stack, value in found.items():
            flops[stack] = flops.get(stack, 0) + value
    if not flops:
        return None
    stacks = sorted(flops, key=lambda stack: -flops[stack])
    names = ", ".join(f"`{stack}`" for stack in stacks[:shown])
    more = f" and {len(stacks) - shown} more" if len(stacks) > shown else ""
    work = ", ".join(f"{value:,} FLOP of {name}" for name, value in per_program.items() if value)
    why = ("Every module the model's call reached has a row, with parameters or without: these are scopes "
           "of no module (a jax.named_scope of your own); " if called else
           "A module without parameters (a Linen Dropout) has a row only where the analysis calls the Linen or "
           "NNX model itself (xla_cost.analyze of a module; the rows of a step or an apply function come from its "
           "parameters); a scope of your own: ")
    return (
        f"per-layer rows: {len(stacks)} name stack{'s match' if len(stacks) != 1 else ' matches'} no "
        f"row's module ({names}{more}); their work ({work or 'no FLOP'}) is in the {REMAINDER} row. "
        f"{why}name it after its parameters' path (a jax.named_scope of its params key)"
    )
