"""Per-layer, per-pass grouping of jaxpr counts that adds up to the phase total.

An equation's name stack says both where it comes from and which pass it is in:

* ``jvp(LinearNet)/fc1``            -> module ``fc1``, forward pass
* ``transpose(jvp(LinearNet))/fc1`` -> module ``fc1``, backward pass
* ``LinearNet/fc1`` (no autodiff)  -> module ``fc1``, the phase's own pass

Each equation goes to the innermost module on its path that holds parameters
(itself or below it), or to the parameter-free module just below that one (a
Dropout); what belongs to no module (the loss, activations applied in the root
module, the optimizer) goes to the remainder row, so that the rows always add up
to the jaxpr total. Rows can be merged to a module depth.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable, Mapping, Sequence

from xla_cost.interpret import EqnCount
from xla_cost.rules import Cost

__all__ = [
    "REMAINDER",
    "LayerCount",
    "split_name_stack",
    "classify_pass",
    "module_path",
    "attribute",
    "attribute_step",
]

REMAINDER = "(remainder)"
"""Path of the row that collects what no parametrised module owns."""

_WRAPPER = re.compile(r"^[A-Za-z_][\w.\-]*\((.*)\)$")


def split_name_stack(name_stack: str) -> list[str]:
    """Splits a name stack on the ``/`` that are outside parentheses."""
    parts, depth, current = [], 0, []
    for ch in name_stack:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "/" and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p]


def _unwrap(component: str) -> tuple[str, list[str]]:
    """``transpose(jvp(Net))`` -> (``Net``, [``transpose``, ``jvp``])."""
    transforms = []
    while (match := _WRAPPER.match(component)) is not None:
        transforms.append(component[: component.index("(")])
        component = match.group(1)
    return component, transforms


def classify_pass(name_stack: str) -> str | None:
    """``backward`` under a transpose, ``forward`` under a jvp, else None."""
    transforms = [t for c in split_name_stack(name_stack) for t in _unwrap(c)[1]]
    if "transpose" in transforms:
        return "backward"
    if "jvp" in transforms or "linearize" in transforms:
        return "forward"
    return None


_JAX_SCOPES = frozenset({"rematted_computation"})
"""Name-stack entries that jax adds for its own transforms, not modules."""

_METHOD_CALL = re.compile(r"^([A-Za-z_]\w*)\.[A-Za-z_]\w*$")


def _method_call_module(component: str) -> str:
    """``wte.attend`` (Flax names a call of a module's method so) -> ``wte``."""
    match = _METHOD_CALL.match(component)
    return match.group(1) if match else component


def module_path(name_stack: str, root: str | Sequence[str] | None = None) -> str:
    """The module path of a name stack, transforms and the root class stripped.

    ``transpose(jvp(ResNet))/layer1/conv1`` with root ``ResNet`` -> ``layer1/conv1``;
    a method call ``GPT/wte.attend`` (a tied output head) -> ``wte``. ``root`` may
    be several names (an apply function calling a Linen model: the function's and
    the model's).
    """
    roots = {root} if isinstance(root, str) else set(root or ())
    names = [_method_call_module(_unwrap(c)[0]) for c in split_name_stack(name_stack)]
    # The root can appear more than once (``transpose(jvp(Net))/jvp(Net)/...``
    # inside a checkpointed backward pass); jax's own scopes are not modules.
    names = [n for n in names if n and n not in roots and n not in _JAX_SCOPES]
    return "/".join(names)


@dataclasses.dataclass(frozen=True)
class LayerCount:
    """The costs of one module (or the remainder) in each pass of the counted phase.

    Attributes:
      path: the module path (``layer1/conv1``), or `REMAINDER`.
      parameters: the parameters this row stands for (at the default depth: the
        module's own; at depth N: everything under the path).
      forward, backward, update: the summed costs of its equations in each pass.
      trip_count: how many times the row's bulk (its most expensive equations)
        runs per step when it sits inside loops (a scanned layer group: its
        length); 1 outside loops.
    """

    path: str
    parameters: int
    forward: Cost
    backward: Cost
    update: Cost = Cost()
    trip_count: int = 1

    @property
    def total(self) -> Cost:
        return self.forward + self.backward + self.update


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _owner(path: str, modules: list[str], known: Collection[str] = ()) -> str:
    """The row of an equation at module ``path``.

    The longest module in ``modules`` (those holding parameters) that contains
    ``path``; where ``path`` goes deeper, into modules without parameters (a
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


def _truncate(path: str, depth: int | None) -> str:
    if depth is None or path == REMAINDER:
        return path
    return "/".join(path.split("/")[:depth])


def attribute(
    equations: Iterable[EqnCount],
    param_paths: Mapping[str, int],
    *,
    root: str | Sequence[str] | None,
    depth: int | None = None,
    default_pass: str = "forward",
    known_modules: Collection[str] = (),
) -> tuple[LayerCount, ...]:
    """Groups equation costs by module and pass.

    An equation belongs to the innermost module on its name stack that holds
    parameters, itself or below it: a parametrised leaf (``fc1``) for the
    layer's own operations, or an enclosing module (``layer1``, ``attn``) for the
    operations it runs between its children (activations, residual adds, the
    attention scores); or, deeper, to the parameter-free module just below
    that one (a Dropout's random bits and mask). Outside every module, an equation with an
    `EqnCount.owner` (optimizer arithmetic on one module's parameters, traced
    from the data) goes to that module. What is left (the loss, glue in the root
    module, optimizer work shared by all modules such as a global norm) goes to
    the `REMAINDER` row.

    Args:
      equations: counts from `xla_cost.interpret.count_jaxpr` of one phase.
      param_paths: parameter count per module path that owns parameters directly,
        in model order.
      root: the model's class name (the first name-stack entry to strip), or
        several such names.
      depth: None (default): one row per module as above. N >= 1: module paths
        are cut after N components and rows merged (``layer1/conv1`` -> ``layer1``
        at depth 1), with the parameters of everything under them.
      known_modules: every module path of the model, with parameters or
        without; a parameter-free one gets a row of its own.
      default_pass: the pass of equations outside any autodiff transform
        (``update`` for a train step, whose optimizer has no transform).

    Returns:
      One row per module, in the order the program first uses them (modules it
      never uses last), then the `REMAINDER` row; their costs add up to the sum
      of ``equations`` exactly.

    Raises:
      ValueError: ``depth`` is not None or a positive integer.
    """
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise ValueError(
            f"Expected depth None or an integer >= 1, got {depth!r} instead. "
            "Use depth=1 for top-level modules."
        )
    equations = list(equations)
    known = frozenset(known_modules)
    leaves = [p for p in param_paths if p != ""]
    modules = list(dict.fromkeys(a for leaf in leaves for a in _ancestors(leaf)))
    parameters: dict[str, int] = {}
    for leaf in leaves:
        row = _truncate(leaf, depth)
        parameters[row] = parameters.get(row, 0) + int(param_paths[leaf])

    passes = {"forward": {}, "backward": {}, "update": {}}
    trips: dict[str, int] = {}
    heaviest: dict[str, int] = {}  # the FLOP of the equation group that set trips
    first_use: dict[str, int] = {}
    for index, eqn in enumerate(equations):
        path = module_path(eqn.name_stack, root) or (eqn.owner or "")
        row = _truncate(_owner(path, modules, known), depth)
        which = classify_pass(eqn.name_stack) or default_pass
        if which not in passes:
            raise ValueError(
                f"Expected default_pass forward, backward or update, got {which!r} instead."
            )
        target = passes[which]
        target[row] = target.get(row, Cost()) + eqn.cost
        first_use.setdefault(row, index)
        if eqn.cost.flops > heaviest.get(row, -1):  # the row runs as often as its bulk
            heaviest[row], trips[row] = eqn.cost.flops, eqn.repeat

    paths = [p for p in dict.fromkeys([*parameters, *first_use]) if p != REMAINDER]
    paths.sort(key=lambda p: first_use.get(p, len(equations)))

    def row(path: str) -> LayerCount:
        return LayerCount(
            path=path,
            parameters=parameters.get(path, 0) + (int(param_paths.get("", 0)) if path == REMAINDER else 0),
            forward=passes["forward"].get(path, Cost()),
            backward=passes["backward"].get(path, Cost()),
            update=passes["update"].get(path, Cost()),
            trip_count=trips.get(path, 1),
        )

    return (*[row(p) for p in paths], row(REMAINDER))


def attribute_step(
    forward: Iterable[EqnCount],
    grad: Iterable[EqnCount],
    update: Iterable[EqnCount],
    param_paths: Mapping[str, int],
    *,
    root: str | Sequence[str] | None,
    depth: int | None = None,
    known_modules: Collection[str] = (),
) -> tuple[LayerCount, ...]:
    """Rows that add up to the ``forward``, ``backward`` and ``update`` phases.

    A row's forward cost is its share of the forward phase; its backward cost
    is its share of the grad phase minus that (the phases' own definition of
    ``backward``, so ReLU masks and other values autodiff saves land in
    backward); its update cost is its share of the update phase (optimizer
    arithmetic outside any module: the remainder). Summed over the rows, each
    column equals the jaxpr count of its phase exactly.

    Args:
      forward, grad, update: equation counts of the three phases.
      param_paths, root, depth, known_modules: as for `attribute`.
    """
    by_phase = {
        "forward": attribute(
            forward, param_paths, root=root, depth=depth, default_pass="forward",
            known_modules=known_modules,
        ),
        "grad": attribute(
            grad, param_paths, root=root, depth=depth, default_pass="forward",
            known_modules=known_modules,
        ),
        "update": attribute(
            update, param_paths, root=root, depth=depth, default_pass="update",
            known_modules=known_modules,
        ),
    }
    rows = {phase: {row.path: row for row in result} for phase, result in by_phase.items()}
    order = list(
        dict.fromkeys(
            row.path
            for phase in ("grad", "forward", "update")
            for row in by_phase[phase]
            if row.path != REMAINDER
        )
    )
    empty = LayerCount("", 0, Cost(), Cost())
    merged = []
    for path in [*order, REMAINDER]:
        fw, gr, up = (rows[p].get(path, empty) for p in ("forward", "grad", "update"))
        merged.append(
            LayerCount(
                path=path,
                parameters=max(fw.parameters, gr.parameters, up.parameters),
                forward=fw.forward,
                backward=gr.forward + gr.backward - fw.forward,
                update=up.update + up.forward + up.backward,
                trip_count=next((r.trip_count for r in (gr, fw, up) if r is not empty), 1),
            )
        )
    return tuple(merged)
