"""Name scopes for NNX modules, so that their operations carry module paths.

Linen names its scopes itself (each method call of a module, ``__call__`` or any
other, under the module's name); NNX does not, so per-layer attribution needs
`nnx_name_scopes`: while it is active, every method of the model's module classes
(``__call__``, ``nnx.Embed.attend``, a user's ``decode``: the work of any method
is its module's) runs under a ``jax.named_scope`` of the module's path.

A module knows its path by a tag (`tagged`), which the graph definition keeps,
so that every copy merged from it (``nnx.jit``, ``nnx.grad``, ``nnx.remat``,
``nnx.scan`` hand their functions such copies) carries it. A step that merges
its model itself from a state it split (``model, opt = nnx.merge(graphdef,
state)`` inside a ``jax.jit``) has its merged modules tagged by their paths as
they are merged (``merged=True``).

The tag is no attribute of the module: code that walks a module's attributes
(``flax.nnx.bridge.ToNNX`` reads each one as a Linen variable, a user's
``vars(module)``) must not see it. Flax keeps, in each module's ``_pytree__nodes``
(its own static record of which attributes are data), a hashable mapping that
the graph definition holds by reference and hands every merged copy; the tag is
that mapping replaced by an equal one of a subclass (`_Tag`) that also carries
the path. Where Flax keeps no such mapping (releases before 0.11) the path is
held in a side table of the module objects themselves (their merged copies then
carry none: unscoped, their work is their caller's), keyed by identity: no module's
own ``__hash__`` or ``__eq__`` runs (a library's that hashes the module's state fails
on traced values, as a module merged inside a step holds them).

An exception escaping this bookkeeping, run inside the user's trace, is marked as
xla_cost's own (`xla_cost.errors.mark_own`): the refusal names xla_cost, not the step.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import jax

from xla_cost.errors import mark_own

if TYPE_CHECKING:  # imported where an NNX model is scoped: a Linen analysis never loads it
    from flax import nnx

__all__ = ["bridged_name_scopes", "module_path", "nnx_name_scopes", "recording_root_calls", "tagged", "tag_modules"]

_SCOPE_STATE = threading.local()

_NODES = "_pytree__nodes"
"""Flax's own attribute of an NNX module: the mapping that the tag replaces by an equal one carrying it."""

class _IdentityTable:
    """Values by object identity while the object lives: a weak reference per entry, removed as
    the object dies, and no ``__hash__`` or ``__eq__`` of the object called (``weakref.
    WeakKeyDictionary`` calls both)."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], Any]] = {}

    def get(self, obj: Any) -> Any:
        entry = self._entries.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else None

    def set(self, obj: Any, value: Any) -> None:
        """Raises TypeError for an object that takes no weak reference."""
        key = id(obj)

        def forget(ref: weakref.ref[Any]) -> None:
            if (entry := self._entries.get(key)) is not None and entry[0] is ref:
                del self._entries[key]

        self._entries[key] = (weakref.ref(obj, forget), value)

    def pop(self, obj: Any) -> None:
        entry = self._entries.get(id(obj))
        if entry is not None and entry[0]() is obj:
            del self._entries[id(obj)]


_SIDE_TABLE = _IdentityTable()
"""Tags of modules whose Flax keeps no ``_pytree__nodes`` mapping: (path, bridged) by module identity."""

_TAG_CLASSES: dict[type, type] = {}


def _tag_class(base: type) -> type:
    """The subclass of Flax's mapping type ``base`` that carries a tag: equal to another only with
    the same tag (as a tagged module's graph definition differs from an untagged one's), and whose
    ``update`` (Flax's, as the module gains an attribute) keeps it."""
    if base not in _TAG_CLASSES:
        def __init__(self: Any, mapping: Any, path: tuple[str, ...] | None, bridged: bool) -> None:  # noqa: N807
            base.__init__(self, mapping)
            self.xla_cost_tag = (path, bridged)

        def __eq__(self: Any, other: object) -> bool:  # noqa: N807
            return isinstance(other, _TAG_CLASSES[base]) and self.xla_cost_tag == other.xla_cost_tag \
                and base.__eq__(self, other)

        def __hash__(self: Any) -> int:  # noqa: N807
            return hash((base.__hash__(self), self.xla_cost_tag))

        def update(self: Any, other: Any) -> Any:
            return _TAG_CLASSES[base](dict(base.update(self, other)), *self.xla_cost_tag)

        def plain(self: Any) -> Any:
            return base(dict(self))

        _TAG_CLASSES[base] = type("_Tag", (base,), {"__init__": __init__, "__eq__": __eq__, "__hash__": __hash__,
                                                   "update": update, "plain": plain, "__module__": __name__})
    return _TAG_CLASSES[base]


def _tag_of(module: Any) -> tuple[tuple[str, ...] | None, bool] | None:
    nodes = vars(module).get(_NODES) if hasattr(module, "__dict__") else None
    tag = getattr(nodes, "xla_cost_tag", None)
    return tag if tag is not None else _SIDE_TABLE.get(module)


def module_path(module: Any) -> tuple[str, ...] | None:
    """The path of a tagged module (a copy merged from one included); None: untagged."""
    tag = _tag_of(module)
    return None if tag is None else tag[0]


def _is_bridged(module: Any) -> bool:
    tag = _tag_of(module)
    return bool(tag and tag[1])


def _set_tag(module: Any, path: tuple[str, ...] | None, bridged: bool = False) -> bool:
    """Tags ``module`` (no attribute of it changes but Flax's own mapping); False where it cannot be."""
    from flax.typing import HashableMapping  # noqa: PLC0415 - see the import above

    nodes = vars(module).get(_NODES) if hasattr(module, "__dict__") else None
    if isinstance(nodes, HashableMapping):
        base = next(k for k in type(nodes).__mro__ if k.__name__ != "_Tag" or k.__module__ != __name__)
        object.__setattr__(module, _NODES, _tag_class(base)(dict(nodes), path, bridged))
        return True
    try:
        _SIDE_TABLE.set(module, (path, bridged))
    except TypeError:  # (an object that takes no weak reference)
        return False
    return True


def _clear_tag(module: Any) -> None:
    nodes = vars(module).get(_NODES) if hasattr(module, "__dict__") else None
    if hasattr(nodes, "xla_cost_tag"):
        object.__setattr__(module, _NODES, nodes.plain())
    _SIDE_TABLE.pop(module)


def tag_modules(node: Any) -> list[Any]:
    """Tags each NNX module of ``node`` (a module, or a tuple, list or dict of
    objects: each its own root) with its path below the object that holds it;
    returns the modules tagged that had no tag."""
    from flax import nnx  # noqa: PLC0415 - see the import above

    roots = list(node.values()) if isinstance(node, dict) else list(node) if isinstance(node, (tuple, list)) \
        else [node]
    fresh = []
    for root in roots:
        if not isinstance(root, (nnx.Module, nnx.Pytree)):
            continue
        for path, module in nnx.iter_modules(root):
            if _tag_of(module) is not None:  # the first object holding a module names it
                continue
            if _set_tag(module, tuple(str(p) for p in path)):  # (one that cannot be tagged: left unscoped)
                fresh.append(module)
    return fresh


@contextlib.contextmanager
def tagged(node: Any) -> Iterator[None]:
    """Each NNX module of ``node`` tagged with its path (`tag_modules`) while the
    block runs: what is split inside keeps the tags in its graph definition."""
    fresh = tag_modules(node)
    try:
        yield
    finally:
        for module in fresh:
            _clear_tag(module)


def _module_classes(node: Any) -> set[type]:
    from flax import nnx  # noqa: PLC0415 - see the import above

    roots = list(node.values()) if isinstance(node, dict) else list(node) if isinstance(node, (tuple, list)) \
        else [node]
    return {type(m) for root in roots if isinstance(root, (nnx.Module, nnx.Pytree))
            for _, m in nnx.iter_modules(root)}


def _methods(cls: type) -> Iterator[tuple[type, str]]:
    """(defining class, name) of each method a module of class ``cls`` runs that
    is the module's own work: ``__call__`` and every other plain function its
    classes define below ``nnx.Module``, not the base's own (``train``, ``sow``,
    graph hooks) nor other dunders."""
    from flax import nnx  # noqa: PLC0415 - see the import above

    base = set(dir(nnx.Module))
    seen: set[str] = set()
    for klass in cls.__mro__:
        if klass is nnx.Module or not (isinstance(klass, type) and issubclass(klass, nnx.Module)):
            continue
        for name, value in vars(klass).items():
            if name in seen or not inspect.isfunction(value):
                continue
            seen.add(name)
            if name == "__call__" or not (name.startswith("__") or name in base):
                yield klass, name


@contextlib.contextmanager
def recording_root_calls() -> Iterator[list[tuple[Any, tuple[Any, ...], dict[str, Any]]]]:
    """While the block runs (inside `nnx_name_scopes`), each call of a tagged model's root
    ``__call__`` from outside the model is appended to the list it yields as ``(module, args,
    kwargs)``: what the step hands the model (its inputs), as traced values."""
    previous = getattr(_SCOPE_STATE, "root_calls", None)
    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    _SCOPE_STATE.root_calls = calls
    try:
        yield calls
    finally:
        _SCOPE_STATE.root_calls = previous


def _scope_for(module: Any, name: str, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> tuple[list[tuple[str, ...]] | None, tuple[str, ...], str | None]:
    """``(stack, path, scope)`` of a call of ``module``'s method ``name``: the stack to push its
    path on (None: unscoped) and the name scope to open (None: none, its caller's names it);
    a root's call from outside the model recorded (`recording_root_calls`)."""
    stack: list[tuple[str, ...]] | None = getattr(_SCOPE_STATE, "stack", None)
    path = module_path(module)
    calls = getattr(_SCOPE_STATE, "root_calls", None)
    bridged = path == () and _is_bridged(module)  # built inside a Linen module's call
    if calls is not None and path == () and not stack and name == "__call__" and not bridged:
        calls.append((module, args, kwargs))
    if stack is None or path is None:
        return None, (), None
    parent = stack[-1] if stack else None
    if path == parent or bridged:  # a method of the module calling another of its own; a bridged root
        return stack, path, None  # (the Linen module's scope names it already)
    if not path:
        scope = type(module).__name__
        roots = getattr(_SCOPE_STATE, "roots", None)
        if roots is not None:  # the scope that opens a root's stacks: no module of its own
            roots.add(scope)
    elif parent is not None and path[: len(parent)] == parent:
        scope = "/".join(path[len(parent):])
    else:  # called from outside its parent (a shared module, the step itself)
        scope = "/".join(path)
    return stack, path, scope


def _scoped(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def scoped_method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            stack, path, scope = _scope_for(self, original.__name__, args, kwargs)
        except Exception as exc:
            mark_own(exc, f"naming the scope of an NNX module's {original.__name__}")
            raise
        if stack is None:
            return original(self, *args, **kwargs)
        stack.append(path)
        try:
            if scope is None:
                return original(self, *args, **kwargs)
            with jax.named_scope(scope):
                return original(self, *args, **kwargs)
        finally:
            stack.pop()

    scoped_method.__xla_cost_scoped__ = True  # type: ignore[attr-defined]
    return scoped_method


class _Wrapped:
    """The methods wrapped so far, to restore."""

    def __init__(self) -> None:
        self.originals: dict[tuple[type, str], Any] = {}

    def wrap(self, classes: set[type]) -> None:
        for cls in classes:
            for klass, name in _methods(cls):
                value = vars(klass)[name]
                if (klass, name) in self.originals or getattr(value, "__xla_cost_scoped__", False):
                    continue
                self.originals[(klass, name)] = value
                setattr(klass, name, _scoped(value))

    def restore(self) -> None:
        for (klass, name), value in self.originals.items():
            setattr(klass, name, value)
        self.originals.clear()


@contextlib.contextmanager
def nnx_name_scopes(model: nnx.Module | None = None, *, merged: bool = False,
                    roots: set[str] | None = None) -> Iterator[None]:
    """Runs every method of the model's NNX modules under a ``jax.named_scope`` of
    the module's path, for modules tagged with it (`tagged`, or merged while
    ``merged``).

    A module called from inside its parent's method is scoped by its path below
    the parent's (``blocks/0`` inside the root, ``attn`` inside ``blocks/0``); one
    called from outside it (a module shared with another, or called by the step
    itself) by its whole path; the root by its class's name. The classes'
    methods are wrapped for the duration of the block and restored afterwards,
    whatever happens.

    Args:
      model: the model whose module classes to wrap (None: only those merged).
      merged: also tag the modules ``nnx.merge`` returns while the block runs,
        by their paths below each merged object, and wrap their classes: a step
        that merges its own model from a state, whether it calls ``nnx.merge`` or
        a ``merge`` it imported from ``flax.nnx`` (the function itself is patched).
      roots: a set that receives the class names scoping a root object's methods (a
        container of the model a step merges, whose method runs the optimizer's update):
        the names that open stacks without being modules.
    """
    wrapped = _Wrapped()
    previous = getattr(_SCOPE_STATE, "stack", None)
    previous_roots = getattr(_SCOPE_STATE, "roots", None)
    _SCOPE_STATE.roots = roots
    restore_merge = None
    try:
        if model is not None:
            wrapped.wrap(_module_classes(model))
        if merged:
            restore_merge = _patch_merge(wrapped)
        _SCOPE_STATE.stack = []
        yield
    finally:
        _SCOPE_STATE.stack = previous
        _SCOPE_STATE.roots = previous_roots
        if restore_merge is not None:
            restore_merge()
        wrapped.restore()


@contextlib.contextmanager
def bridged_name_scopes() -> Iterator[None]:
    """Runs the NNX modules that a Linen model builds in its call (``flax.nnx.bridge.ToLinen``,
    MaxText's own copy of it: its layers) under name scopes of their paths below the Linen
    module's own scope: ``Top/layers_0/query`` for the ``query`` of an NNX block wrapped as
    ``layers_0``, whose work Linen names ``Top/layers_0`` alone otherwise.

    While the block runs, each NNX module built outside the construction of another (the
    wrapper's, afresh in each call) is tagged with its submodules' paths below it
    (`tag_modules`) and their classes' methods are wrapped as `nnx_name_scopes` wraps them;
    its own methods open no scope (its work stays the Linen module's) and are no call of a
    step's model (`recording_root_calls`). Nothing is done where Flax NNX is not loaded."""
    nnx = sys.modules.get("flax.nnx")
    module_class = getattr(nnx, "Module", None)
    meta = next((k for k in type(module_class).__mro__ if "__call__" in vars(k)), type) if module_class else type
    if meta is type or getattr(vars(meta)["__call__"], "__xla_cost_scoped__", False):  # (none, or patched above)
        yield
        return
    original = vars(meta)["__call__"]
    wrapped = _Wrapped()

    def build(cls: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_SCOPE_STATE, "building", 0)
        _SCOPE_STATE.building = depth + 1
        try:
            made = original(cls, *args, **kwargs)
        finally:
            _SCOPE_STATE.building = depth
        try:
            if depth == 0 and isinstance(made, module_class) and _tag_of(made) is None:
                tag_modules(made)  # (its tag marked bridged: a root whose own scope is the Linen module's)
                _set_tag(made, (), bridged=True)
                wrapped.wrap(_module_classes(made))
        except Exception as exc:
            mark_own(exc, "tagging the NNX modules a Linen module builds")
            raise
        return made

    build.__xla_cost_scoped__ = True  # type: ignore[attr-defined]
    previous = getattr(_SCOPE_STATE, "stack", None)
    meta.__call__ = build  # type: ignore[method-assign]
    _SCOPE_STATE.stack = [] if previous is None else previous
    try:
        yield
    finally:
        meta.__call__ = original  # type: ignore[method-assign]
        _SCOPE_STATE.stack = previous
        wrapped.restore()


_MERGE_HOOK = "_xla_cost_merge_hook"
"""The name, in ``flax.nnx.graph``'s namespace, of the function ``nnx.merge`` runs while it is patched."""


def _forwarding_code() -> Any:
    """The code of ``def merge(*args, **kwargs): return _xla_cost_merge_hook(*args, **kwargs)``:
    no free variable (it may replace a module-level function's), the hook read from the
    function's own globals when it runs."""
    namespace: dict[str, Any] = {}
    exec(f"def merge(*args, **kwargs):\n    return {_MERGE_HOOK}(*args, **kwargs)\n", {}, namespace)  # noqa: S102
    return namespace["merge"].__code__


def _patch_merge(wrapped: _Wrapped) -> Callable[[], None] | None:
    """``nnx.merge`` tagging what it merges, however the step reaches it: the function object's
    code is replaced (not only the ``flax.nnx`` attribute), so a step that did ``from flax.nnx
    import merge`` before the analysis, holding the function itself, calls the patched one too.
    Returns what restores the function (None: an enclosing block patched it already)."""
    from flax.nnx import graph  # noqa: PLC0415 - see the import above

    from flax import nnx  # noqa: PLC0415

    original = graph.merge
    plain = isinstance(original, types.FunctionType) and not original.__code__.co_freevars
    if plain and _MERGE_HOOK in original.__globals__:  # patched by an enclosing block: its hook tags already
        return None
    inner = original
    if plain:
        inner = types.FunctionType(original.__code__, original.__globals__, original.__name__,
                                   original.__defaults__, original.__closure__)
        inner.__kwdefaults__ = original.__kwdefaults__

    def merge(*args: Any, **kwargs: Any) -> Any:
        node = inner(*args, **kwargs)
        try:
            tag_modules(node)
            wrapped.wrap(_module_classes(node))
        except Exception as exc:
            mark_own(exc, "tagging the modules nnx.merge returns")
            raise
        return node

    if not plain:  # a Flax whose merge is no plain function: the attributes alone (a merge imported before is not)
        owners = [owner for owner in (nnx, graph) if getattr(owner, "merge", None) is original]
        for owner in owners:
            owner.merge = merge

        def restore_attributes() -> None:
            for owner in owners:
                owner.merge = original

        return restore_attributes

    saved = original.__code__
    original.__globals__[_MERGE_HOOK] = merge
    original.__code__ = _forwarding_code()

    def restore() -> None:
        original.__code__ = saved
        original.__globals__.pop(_MERGE_HOOK, None)

    return restore
