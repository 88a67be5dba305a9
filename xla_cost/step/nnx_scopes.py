"""Name scopes for NNX modules, so that their operations carry module paths.

Linen names its scopes itself; NNX does not, so per-layer attribution needs
`nnx_name_scopes`: while it is active, every submodule's ``__call__`` runs under
a ``jax.named_scope`` of its path (`scoped_paths` tells it the paths of the
module being called).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import jax

if TYPE_CHECKING:  # imported where an NNX model is scoped: a Linen analysis never loads it
    from flax import nnx

__all__ = ["nnx_name_scopes", "scoped_paths"]

_SCOPE_STATE = threading.local()


@contextlib.contextmanager
def nnx_name_scopes(model: nnx.Module) -> Iterator[None]:
    """Runs every submodule's ``__call__`` under a ``jax.named_scope`` of its path.

    Linen names its scopes itself; NNX does not, so per-layer attribution needs
    this. The classes' ``__call__`` are wrapped for the duration of the block and
    restored afterwards, whatever happens.
    """
    from flax import nnx  # noqa: PLC0415 - see the import above

    # Wrap each class that defines the ``__call__`` a module runs, once.
    defining = {
        next(k for k in type(m).__mro__ if "__call__" in vars(k))
        for _, m in nnx.iter_modules(model)
        if any("__call__" in vars(k) for k in type(m).__mro__[:-1])
    }
    originals: dict[type, Any] = {}

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def scoped_call(self: nnx.Module, *args: Any, **kwargs: Any) -> Any:
            paths: dict[int, tuple[str, ...]] | None = getattr(_SCOPE_STATE, "paths", None)
            if paths is None:
                return original(self, *args, **kwargs)
            path = paths.get(id(self))
            if path is None:
                # A copy made by a lifted transform (nnx.scan/vmap hand the body a
                # module merged from sliced state): known by its type when only one
                # module of the model has it.
                same_type = _SCOPE_STATE.types.get(type(self), [])
                if len(same_type) != 1:
                    return original(self, *args, **kwargs)
                path = same_type[0]
            for sub, module in nnx.iter_modules(self):  # its children, copies too
                paths.setdefault(id(module), path + tuple(str(p) for p in sub))
            stack: list[tuple[str, ...]] = _SCOPE_STATE.stack
            parent = stack[-1] if stack else None
            if not path:
                scope = type(self).__name__
            elif parent is not None and path[: len(parent)] == parent:
                scope = "/".join(path[len(parent):])
            else:
                scope = "/".join(path)
            stack.append(path)
            try:
                with jax.named_scope(scope):
                    return original(self, *args, **kwargs)
            finally:
                stack.pop()

        scoped_call.__wrapped__ = original  # type: ignore[attr-defined]
        return scoped_call

    try:
        for cls in defining:
            originals[cls] = vars(cls)["__call__"]
            cls.__call__ = wrap(originals[cls])  # type: ignore[method-assign]
        yield
    finally:
        for cls, original in originals.items():
            cls.__call__ = original  # type: ignore[method-assign]


@contextlib.contextmanager
def scoped_paths(model: nnx.Module) -> Iterator[None]:
    from flax import nnx  # noqa: PLC0415 - see the import above

    previous = getattr(_SCOPE_STATE, "paths", None), getattr(_SCOPE_STATE, "types", None)
    modules = [(tuple(str(p) for p in path), m) for path, m in nnx.iter_modules(model)]
    _SCOPE_STATE.paths = {id(m): path for path, m in modules}
    types: dict[type, list[tuple[str, ...]]] = {}
    for path, m in modules:
        types.setdefault(type(m), []).append(path)
    _SCOPE_STATE.types = types
    _SCOPE_STATE.stack = []
    try:
        yield
    finally:
        _SCOPE_STATE.paths, _SCOPE_STATE.types = previous
