"""Per-layer, per-pass grouping of jaxpr counts that adds up to the phase total.

An equation's name stack says both where it comes from and which pass it is in:

* ``jvp(LinearNet)/fc1``            -> module ``fc1``, forward pass
* ``transpose(jvp(LinearNet))/fc1`` -> module ``fc1``, backward pass
* ``LinearNet/fc1`` (no autodiff)  -> module ``fc1``, the phase's own pass

Each equation goes to the longest parametrised module path that contains it;
what belongs to none (the loss, activations applied outside layers, glue) goes
to the remainder row, so that the rows always add up to the jaxpr total.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from xla_cost.interpret import EqnCount
from xla_cost.rules import Cost

__all__ = [
    "REMAINDER",
    "LayerCount",
    "split_name_stack",
    "classify_pass",
    "module_path",
    "attribute",
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


def module_path(name_stack: str, root: str | None = None) -> str:
    """The module path of a name stack, transforms and the root class stripped.

    ``transpose(jvp(ResNet))/layer1/conv1`` with root ``ResNet`` -> ``layer1/conv1``.
    """
    names = [_unwrap(c)[0] for c in split_name_stack(name_stack)]
    names = [n for n in names if n]
    if root is not None and names and names[0] == root:
        names = names[1:]
    return "/".join(names)


@dataclasses.dataclass(frozen=True)
class LayerCount:
    """Forward and backward costs of one parametrised module (or the remainder)."""

    path: str
    parameters: int
    forward: Cost
    backward: Cost


def _owner(path: str, layers: list[str]) -> str:
    best = REMAINDER
    for layer in layers:
        if path == layer or path.startswith(layer + "/"):
            if best == REMAINDER or len(layer) > len(best):
                best = layer
    return best


def attribute(
    equations: Iterable[EqnCount],
    param_paths: Mapping[str, int],
    *,
    root: str | None,
    default_pass: str = "forward",
) -> tuple[LayerCount, ...]:
    """Groups equation costs by parametrised module and pass.

    Args:
      equations: counts from `xla_cost.interpret.count_jaxpr` of one phase.
      param_paths: parameter count per module path, in model order.
      root: the model's class name (the first name-stack entry to strip).
      default_pass: the pass of equations outside any autodiff transform.

    Returns:
      One row per parametrised module, in the order the program first uses them
      (modules it never uses last), then the `REMAINDER` row; their costs add up
      to the sum of ``equations``.
    """
    equations = list(equations)
    layers = [p for p in param_paths if p != ""]
    forward: dict[str, Cost] = {p: Cost() for p in [*layers, REMAINDER]}
    backward: dict[str, Cost] = {p: Cost() for p in [*layers, REMAINDER]}
    for eqn in equations:
        owner = _owner(module_path(eqn.name_stack, root), layers)
        which = classify_pass(eqn.name_stack) or default_pass
        target = backward if which == "backward" else forward
        target[owner] = target[owner] + eqn.cost
    first_use: dict[str, int] = {}
    for index, eqn in enumerate(equations):
        first_use.setdefault(_owner(module_path(eqn.name_stack, root), layers), index)
    layers.sort(key=lambda p: first_use.get(p, len(equations)))
    rows = [LayerCount(p, param_paths[p], forward[p], backward[p]) for p in layers]
    rows.append(
        LayerCount(REMAINDER, param_paths.get("", 0), forward[REMAINDER], backward[REMAINDER])
    )
    return tuple(rows)
