"""Module paths from name stacks: which module of a model an equation's name stack names.

A name stack is a chain of calls, not a module path: Flax pushes one entry per
method call, the called module's own name (``moe``), with the method after a dot
when it is not ``__call__`` (``moe._call_experts``, ``sub.encode``), inside the
name of a lifted transform (``vmap(expert)``); a module constructed in one parent
and called from another is named where it is called (``layers_0/moe/expert`` for
parameters at ``layers_0/expert``); a module's own name may hold a dot
(``down_0.block_0``). Given the model's modules (`module_tree`), `module_path`
resolves each entry against them (`xla_cost.count.attribution` groups the counts by them).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

from xla_cost.count.stacks import JAX_SCOPES, split_name_stack, unwrap

__all__ = ["HLO_SCOPES", "in_root", "module_path", "module_tree", "op_name_path", "with_ancestors"]


_METHOD_CALL = re.compile(r"^([A-Za-z_]\w*)\.[A-Za-z_]\w*$")


def _method_call_module(component: str) -> str:
    """``wte.attend`` (Flax names a call of a module's method so) -> ``wte``."""
    match = _METHOD_CALL.match(component)
    return match.group(1) if match else component


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def with_ancestors(paths: Iterable[str]) -> list[str]:
    """Every module that holds parameters or contains one that does: ``paths``
    (modules holding parameters) and their ancestors, in first-seen order."""
    return list(dict.fromkeys(a for path in paths if path for a in _ancestors(path)))


def module_tree(param_paths: Iterable[str], reached: Iterable[str] = ()) -> frozenset[str]:
    """Every module path of a model, for `module_path` to resolve name stacks against.

    Args:
      param_paths: the paths of the modules that hold parameters (the
        parameter tree's, ``""`` for the root's own).
      reached: other module paths, with parameters or without (a Linen call's
        every module, ``Workload.module_paths``), and their ancestors.
    """
    return frozenset(with_ancestors([*param_paths, *reached]))


def _join(scope: str, name: str) -> str:
    return f"{scope}/{name}" if scope else name


def _resolve(name: str, current: str, roots: Collection[str], modules: Collection[str]) -> str | None:
    """The module a name-stack entry names, called from module ``current``
    (``""``: the root), or None.

    From ``current`` out to the root, nearest first: a child of that name (a
    dotted name whole); for ``X.method``, the scope itself when it is ``X``
    (the root when ``X`` is a root name), else its child ``X``.
    """
    head = name.rpartition(".")[0]
    scope: str | None = current
    while scope is not None:
        if _join(scope, name) in modules:
            return _join(scope, name)
        if head:
            if (head == scope.rpartition("/")[2]) if scope else head in roots:
                return scope
            if _join(scope, head) in modules:
                return _join(scope, head)
        scope = scope.rpartition("/")[0] if scope else None
    return None


def _grandchild(name: str, current: str, modules: Collection[str]) -> str | None:
    """The one module named ``name`` below ``current`` (not the root), or None: a module's method calling
    its grandchild directly (``self.attn.proj(x)``: Linen pushes ``proj`` alone; maxdiffusion's Flux blocks
    call ``self.attn.query_norm``)."""
    below = [m for m in modules if m.startswith(f"{current}/") and m.endswith(f"/{name}")] if current else []
    return below[0] if len(below) == 1 else None


def _path(
    components: Sequence[str], roots: Collection[str], modules: Collection[str] | None,
    skip: Collection[str] = JAX_SCOPES,
) -> str:
    """`module_path` of name-stack entries; ``skip``: scopes that are no module."""
    names = [unwrap(c)[0] for c in components]
    if not modules:
        # The root can appear more than once (``transpose(jvp(Net))/jvp(Net)/...``
        # inside a checkpointed backward pass); jax's own scopes are not modules.
        names = [_method_call_module(n) for n in names]
        return "/".join(n for n in names if n and n not in roots and n not in skip)
    current, rest = "", []  # the innermost module found, and what follows it
    called: dict[str, tuple[str, list[str]]] = {}  # an entry that names no module: where it was called
    for name in names:
        found = _resolve(name, current, roots, modules) if name else None
        if found is None and name and not rest:  # (right after the module found: a grandchild it calls)
            found = _grandchild(name, current, modules)
        if found is not None:
            current, rest = found, []
        elif name and name not in roots and name not in skip:
            where = called.setdefault(name, (current, list(rest)))
            if where[0] != current and (not where[0] or current.startswith(where[0] + "/")):
                # the same call again, inside a module it called (a wrapper an interceptor put around it:
                # ``mlp/Einsum_0/_LoRAEinsum_gating_einsum/Einsum_0``): the wrapped call's work is its own
                current, rest = where[0], list(where[1])
            rest.append(name)
    return "/".join(n for n in (current, *rest) if n)


def module_path(
    name_stack: str, root: str | Sequence[str] | None = None, modules: Collection[str] | None = None,
) -> str:
    """The module path of a name stack, transforms and the root class stripped.

    ``transpose(jvp(ResNet))/layer1/conv1`` with root ``ResNet`` -> ``layer1/conv1``.
    ``root`` may be several names (an apply function calling a Linen model: the
    function's and the model's).

    With ``modules``, the model's module paths (`module_tree`; a set, looked up
    once per entry), each entry is resolved against them, seen from the
    module the entries before it resolved to and, failing that, from its
    ancestors out to the root: a child of that name, a dotted name kept whole
    (``UNet/down_0.block_0/conv1`` -> ``down_0.block_0/conv1``); a method call
    ``X.method`` of that module itself or of its child ``X``
    (``moe/moe._call_experts/vmap(expert)/expert.layer_fn/inp`` ->
    ``moe/expert/inp``); a module constructed in an ancestor and called here
    (``layers_0/moe/expert`` -> ``layers_0/expert``); right after a module below the root, the one
    module of that name below it (a grandchild its method calls directly, ``self.attn.proj(x)``:
    ``Net/block/proj`` -> ``block/attn/proj``); an entry that names no module,
    entered again inside a module its first call went through (an interceptor's
    wrapper: ``mlp/Einsum_0/_LoRAEinsum_gating_einsum/Einsum_0`` -> ``mlp/Einsum_0``),
    is where it was first called. Entries that resolve to
    nothing (jax's own scopes, an einsum's spec, a ``jax.named_scope`` inside a
    module) stay after the module found before them, the root names and
    ``rematted_computation`` left out: ``GPT/h/attn/bqhd,bkhd->bhqk`` ->
    ``h/attn/bqhd,bkhd->bhqk``.

    Without ``modules`` (None or empty), every entry is kept, a method call read as its
    module's (``GPT/wte.attend`` -> ``wte``, ``UNet/down_0.block_0`` ->
    ``down_0``: a guess that only the modules can correct).

    Args:
      name_stack: an equation's name stack.
      root: the model's root name(s), stripped (None: none).
      modules: the model's module paths (`module_tree`), or None.
    """
    roots = {root} if isinstance(root, str) else set(root or ())
    return _path(split_name_stack(name_stack), roots, modules)


def in_root(name_stack: str, root: str | Sequence[str] | None) -> bool:
    """Whether a name stack lies inside the model's call: one of its entries (transforms stripped) is a
    root name (``jvp(MoE)/btd,edf->btef`` with root ``MoE``); work outside it (a loss after the model)
    has none. `module_path` strips the root, so that the root module's own work and the work outside
    the model both read as path ``""``: this tells them apart."""
    roots = {root} if isinstance(root, str) else set(root or ())
    return any(_method_call_module(unwrap(c)[0]) in roots for c in split_name_stack(name_stack))


HLO_SCOPES = frozenset({"train_step", "while", "body", "cond", "closed_call", "checkpoint", "remat", "pjit"})
"""Entries of a compiled HLO instruction's ``op_name`` that are jax's control
flow or the step's own function, not modules (a scan's loop, a call)."""


def op_name_path(
    op_name: str, root: str | Sequence[str] | None = None, modules: Collection[str] | None = None,
) -> str:
    """The module path of a compiled HLO instruction's ``op_name``.

    ``jit(grad)/transpose(jvp(GPT))/h_0/while/body/attn/dot_general`` with root
    ``GPT`` -> ``h_0/attn``: the jit that wraps the program, the primitive, the
    transforms, the root and `HLO_SCOPES` (where no module of that name is in
    ``modules``) are left out, the rest resolved as `module_path` resolves a
    name stack.
    """
    parts = split_name_stack(op_name)[:-1]  # the last entry is the primitive
    if parts and parts[0].startswith("jit("):
        parts = parts[1:]
    roots = {root} if isinstance(root, str) else set(root or ())
    return _path(parts, roots, modules, JAX_SCOPES | HLO_SCOPES)
