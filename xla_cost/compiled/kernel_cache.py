"""XLA's kernel cache for the programs a GPU target compiles only to be analysed.

A deviceless GPU compile spends most of its backend time in ptxas making
binaries that the analyses never read (ResNet-50's grad for the H100, batch
32: 3.7 of 3.8 s). XLA's kernel cache (``xla_gpu_kernel_cache_file``) keeps the
kernels it built, so a kernel compiled once (the forward's, in the grad; an
earlier analysis's) is read back; the program is the same (tested). Each
target keeps its own file (`xla_cost.compiled.targets.CompileTarget.kernel_cache_options`)
beside the analyses cache; `xla_cost.compiled.xla.compile_phase` uses it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from xla_cost.compiled import targets

__all__ = ["MAX_BYTES", "options", "compile_reusing"]

_LOG = logging.getLogger("xla_cost")

T = TypeVar("T")

MAX_BYTES = 256 << 20
"""A target's kernel cache file larger than this is started again: XLA reads it
whole at every compile and adds to it."""

_UNKNOWN_OPTION = re.compile(r"No such compile option: '(\w+)'")

_UNKNOWN_OPTIONS: set[str] = set()
"""The cache's options this process's XLA refused as unknown (jax 0.11.2's XLA has no
``xla_gpu_enable_llvm_module_compilation_parallelism``, seen on an H200 lease)."""


def options(target: targets.CompileTarget | None, cache_dir: str | None) -> dict[str, Any] | None:
    """The target's kernel cache options, its file under ``cache_dir``/kernels; None for
    the CPU, a TPU, no cache directory, or one that cannot be written."""
    if target is None or cache_dir is None:
        return None
    directory = os.path.join(cache_dir, "kernels")
    found = target.kernel_cache_options(directory)
    if not found:
        return None
    try:
        os.makedirs(directory, exist_ok=True)
        path = found[targets.KERNEL_CACHE_OPTION]
        if os.path.exists(path) and os.path.getsize(path) > MAX_BYTES:
            os.remove(path)
    except OSError as exc:
        _LOG.info("no kernel cache: %s", exc)
        return None
    return found


def compile_reusing(
    compile_with: Callable[[Mapping[str, Any] | None], T], compiler_options: Mapping[str, Any] | None,
    reuse: Mapping[str, Any] | None,
) -> T:
    """``compile_with(compiler_options)``, under the kernel cache's options ``reuse``
    where given. An option of the cache that XLA does not know is dropped (and
    remembered) and the cache kept; a compile that fails under the cache for any
    other reason is compiled again without it: the program is the same."""
    cached = {k: v for k, v in (reuse or {}).items() if k not in _UNKNOWN_OPTIONS}
    while cached:
        try:
            return compile_with({**(compiler_options or {}), **cached})
        except Exception as exc:  # noqa: BLE001 - the same compile without the cache decides
            unknown = _UNKNOWN_OPTION.search(str(exc))
            name = unknown.group(1) if unknown else None
            if name not in cached or name == targets.KERNEL_CACHE_OPTION:
                _LOG.info("compiled again without XLA's kernel cache: %s", str(exc).strip().splitlines()[:1])
                break
            _UNKNOWN_OPTIONS.add(name)
            cached.pop(name)
            _LOG.info("XLA has no option %s: the kernel cache is used without it", name)
    return compile_with(compiler_options)
