"""jax's accelerator plugins on a machine that may have no accelerator.

Compiling for a target (`xla_cost.compiled.targets`) needs the target's own
compiler: jax's CUDA plugin for a GPU (the ``gpu`` extra) and libtpu for a TPU
(the ``tpu`` extra), at the installed jaxlib's version. Neither needs a device:
jax's deviceless topologies (`jax.experimental.topologies`) compile for a
described device. On a machine without the device, the plugins, as jax loads
them, would check a CUDA driver that is not there, look for TPU workers that
are not there, and print a line for each on the standard error.
`prepare` (run by ``import xla_cost`` before jax starts its backends) tells
them there is nothing to look for and keeps their start-up lines off the
standard error; where a GPU driver or a TPU is present nothing is changed.

This module imports nothing heavy: the command line's help reads it.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["EXTRAS", "prepare", "cuda_plugin", "has_libtpu", "has_gpu_driver", "LOADER_CACHE", "has_tpu_device",
           "install_command", "quiet_stderr", "NOISE", "start_cuda", "cuda_started"]

EXTRAS = {"cuda": "gpu", "tpu": "tpu"}
"""The package extra that brings each platform's compiler (``pip install 'xla-cost[gpu]'``)."""

NOISE = re.compile(
    r"cudart_stub\.cc.*Could not find cuda drivers"
    r"|^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|^Failed to find host bounds for accelerator type"
    r"|could not determine TPU (worker hostnames|accelerator type)"
)
"""Lines the plugins print when they start on a machine without their device."""

_CUDA_PLUGINS = ("jax_cuda13_plugin", "jax_cuda12_plugin")


def cuda_plugin() -> str | None:
    """The installed CUDA plugin's package (``jax_cuda12_plugin``), or None."""
    return next((name for name in _CUDA_PLUGINS if importlib.util.find_spec(name) is not None), None)


def has_libtpu() -> bool:
    """Whether libtpu (the TPU compiler) is installed."""
    return importlib.util.find_spec("libtpu") is not None


LOADER_CACHE = "/etc/ld.so.cache"
"""The dynamic loader's cache of the system's libraries (what ``ldconfig -p`` prints)."""


def has_gpu_driver() -> bool:
    """Whether this machine has an NVIDIA driver (``libcuda``) or device files.

    The driver's library is looked for where the dynamic loader finds it: in
    its cache (`LOADER_CACHE`) and on ``LD_LIBRARY_PATH``. Not through
    ``ctypes.util.find_library``, which runs ``ldconfig`` (and on a miss
    ``gcc``) in a subprocess: 35-50 ms of every ``import xla_cost``.
    """
    if glob.glob("/dev/nvidia[0-9]*"):
        return True
    with contextlib.suppress(OSError):
        with open(LOADER_CACHE, "rb") as cache:
            if b"libcuda.so" in cache.read():
                return True
    return any(glob.glob(os.path.join(folder, "libcuda.so*"))
               for folder in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if folder)


def has_tpu_device() -> bool:
    """Whether this machine has TPU chips attached."""
    return bool(glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*"))


def install_command(platform: str) -> str:
    """The one command that installs ``platform``'s compiler for the installed jax."""
    extra = EXTRAS[platform]
    try:
        from importlib.metadata import version

        pinned = f"jaxlib=={version('jaxlib')}"
    except Exception:  # noqa: BLE001 - jaxlib's metadata missing: the extra pins it
        pinned = ""
    return f"pip install 'xla-cost[{extra}]'" + (f" (it pins the plugin to {pinned})" if pinned else "")


@contextlib.contextmanager
def quiet_stderr(pattern: re.Pattern[str] = NOISE) -> Iterator[None]:
    """The standard error's file descriptor captured; on exit every captured
    line that is not the plugins' start-up ``pattern`` is written back."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real standard error (an embedded interpreter)
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(ValueError, OSError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture.read().decode("utf-8", "replace").splitlines(keepends=True)
                    if not pattern.search(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


_PREPARED = {"done": False}


def prepare() -> None:
    """Readies jax's plugins for deviceless compiles; called once by ``import xla_cost``.

    Without a GPU driver: the CUDA plugin's driver-version check is skipped
    (``JAX_SKIP_CUDA_CONSTRAINTS_CHECK``). Without TPU chips: libtpu is told it
    runs alone (``TPU_WORKER_HOSTNAMES``, ``TPU_SKIP_MDS_QUERY``). With neither
    device but a plugin installed, and ``JAX_PLATFORMS`` unset, jax runs on the
    CPU (the plugins stay loaded for deviceless compiles). Variables the user
    set are kept. Where a plugin is installed, jax's import and its plugins'
    discovery, whenever they come, keep the plugins' start-up lines off the
    standard error. Without a GPU driver the CUDA plugin is discovered but not
    started: its start loads NVIDIA's libraries (cuDNN, cuBLAS, cuFFT, NCCL,
    ...: 0.2-0.4 CPU seconds and 230 MB in every process), which only a
    compile for a GPU target needs; `start_cuda` starts it then. Nothing is
    imported here: without the extras this costs three package lookups.
    """
    if _PREPARED["done"]:
        return
    _PREPARED["done"] = True
    cuda, tpu = cuda_plugin(), has_libtpu()
    if not (cuda or tpu):
        return
    gpu_device, tpu_device = (cuda is not None and has_gpu_driver()), (tpu and has_tpu_device())
    if cuda and not gpu_device:
        os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    if tpu and not tpu_device:
        os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
        os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
        # libtpu locks itself to one process per machine, for the chips it would drive; deviceless
        # compiles drive none, and parallel test processes or sweep workers each load it
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    cpu_only = not gpu_device and not tpu_device
    if "jax" in sys.modules:
        _start_quietly(cpu_only)
    else:
        if cpu_only:
            os.environ.setdefault("JAX_PLATFORMS", "cpu")
        sys.meta_path.insert(0, _QuietJaxImport(cpu_only))


def _start_quietly(cpu_only: bool) -> None:
    """jax's plugins discovered now, their start-up lines kept off the standard error."""
    import jax
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        return
    if cpu_only and jax.config.jax_platforms in (None, ""):
        # jax read JAX_PLATFORMS when it was imported: a value set since then (a test's conftest, a notebook's
        # cell) is what the user meant, and jax would not see it; left to itself jax would start every plugin,
        # and the deferred CUDA plugin's profiler then crashed the process in the first timed step
        jax.config.update("jax_platforms", os.environ.get("JAX_PLATFORMS") or "cpu")
    with quiet_stderr(), contextlib.suppress(Exception):  # a plugin that fails says so when a target asks
        if cpu_only:
            _defer_cuda()
        xla_bridge._discover_and_register_pjrt_plugins()


_CUDA_START: dict[str, object] = {}
"""The CUDA plugin module's own ``initialize``, kept while its start is deferred (`_defer_cuda`)."""

_LATE_CALLBACKS: list[object] = []
"""Callbacks jax's modules registered for every plugin (``xla_bridge.register_plugin_callbacks``:
custom partitioners, batch-partitionable FFI targets) after the discovery, while the CUDA
plugin's start was deferred: jax applies those only to the plugins registered then, so
`start_cuda` applies them to the CUDA plugin itself."""


def _cuda_plugin_modules() -> tuple[str, ...]:
    """The CUDA plugins' modules under jax's ``jax_plugins`` namespace (``jax_plugins.xla_cuda12``)."""
    import pkgutil

    try:
        import jax_plugins
    except ImportError:
        return ()
    return tuple(name for _, name, _ in pkgutil.iter_modules(jax_plugins.__path__, "jax_plugins.")
                 if name.startswith("jax_plugins.xla_cuda"))


def _defer_cuda() -> None:
    """The CUDA plugin discovered by jax as usual, its ``initialize`` (NVIDIA's libraries
    loaded, the ``cuda`` platform registered) deferred to `start_cuda`."""
    import importlib

    from jax._src import xla_bridge

    for name in _cuda_plugin_modules():
        module = importlib.import_module(name)
        if name not in _CUDA_START:
            _CUDA_START[name] = module.initialize
            module.initialize = lambda: None  # jax's discovery calls it: nothing until a GPU target
    if _CUDA_START and "register" not in _CUDA_START:
        register = xla_bridge.register_plugin_callbacks

        def recorded(callback: object) -> None:
            _LATE_CALLBACKS.append(callback)
            register(callback)

        _CUDA_START["register"] = register
        xla_bridge.register_plugin_callbacks = recorded


def start_cuda() -> None:
    """Starts jax's CUDA plugin where `prepare` deferred it (no GPU driver): NVIDIA's
    libraries loaded and the ``cuda`` platform registered for deviceless compiles,
    its start-up lines kept off the standard error. Called before a GPU target's
    first compile (`xla_cost.compiled.targets`); nothing where the plugin started
    with jax (a GPU machine) or has started already."""
    import importlib

    from jax._src import xla_bridge

    register = _CUDA_START.pop("register", None)
    if register is None:
        return
    xla_bridge.register_plugin_callbacks = register
    for name, initialize in list(_CUDA_START.items()):
        module = importlib.import_module(name)
        module.initialize = initialize
        del _CUDA_START[name]
        with quiet_stderr():
            initialize()  # type: ignore[operator]
    # what jax's discovery does for each plugin it registers: the callbacks registered for every
    # plugin (custom partitioning's CustomSPMDPartitioning, FFI targets), now for the CUDA plugin
    factory = xla_bridge._backend_factories.get("cuda")
    if factory is not None and factory.c_api is not None:
        done: set[int] = set()
        with xla_bridge._plugin_callback_lock:
            for callback in (*xla_bridge._plugin_callbacks, *_LATE_CALLBACKS):
                if id(callback) not in done:
                    done.add(id(callback))
                    callback(c_api=factory.c_api)  # type: ignore[operator]


def cuda_started() -> bool:
    """Whether the CUDA plugin has started in this process (NVIDIA's libraries loaded):
    False only while `prepare` defers it and no GPU target has asked for it."""
    return "register" not in _CUDA_START


class _QuietJaxImport(importlib.abc.MetaPathFinder):
    """Finds ``jax`` once, for a loader that imports it, then discovers its
    plugins, with the plugins' start-up lines kept off the standard error."""

    def __init__(self, cpu_only: bool) -> None:
        self.cpu_only = cpu_only

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name != "jax":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader, cpu_only = spec.loader, self.cpu_only

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: object) -> object:
                return loader.create_module(spec)

            def exec_module(self, module: object) -> None:
                with quiet_stderr():
                    loader.exec_module(module)
                _start_quietly(cpu_only)

        spec.loader = Loader()
        return spec
