"""A target's analyses are cached like the CPU's (issue 31): a second analysis compiles nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from xla_cost import plugins

# The test command installs both extras; a machine with jax's CUDA plugin alone (a GPU
# machine's own jax, where these tests ran on jax 0.11.2) checks the GPU target.
TARGETS = ("h100", "tpu-v5e") if plugins.has_libtpu() else ("h100",)

CHILD = """
import jax, jax.numpy as jnp, flax.linen as nn
import xla_cost
from xla_cost.compiled import xla

class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.Dense(32)(x)))

compiled = []
real = xla._compile
def counting(program, args, options, **reuse):
    compiled.append(1)
    return real(program, args, options, **reuse)
xla._compile = counting
report = xla_cost.analyze(MLP(), jax.ShapeDtypeStruct((4, 16), jnp.float32), optimizer="sgd", target={target})
print(len(compiled), report.phases["forward"].flops, report.target)
"""


def _run(tmp_path, target: str | None) -> list[str]:
    import os
    import shutil

    # No report cache (xla_cost.analysis.report_cache, tests/analysis/test_report_cache.py): it would
    # answer before any program is compiled, and these tests are of the analyses and kernel caches.
    shutil.rmtree(tmp_path / "cache" / "reports", ignore_errors=True)
    env = {"XLA_COST_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}

    env = {**os.environ, **env}
    env.pop("XLA_COST_NO_CACHE", None)
    done = subprocess.run([sys.executable, "-c", CHILD.replace("{target}", repr(target))], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


@pytest.fixture(scope="module")
def two_of_each(tmp_path_factory):
    """Each target analysed twice in fresh processes, one cache for all (the CPU's first):
    the outputs by target, and the directory, whose kernel cache the next test reuses."""
    root = tmp_path_factory.mktemp("targets_cache")
    return {target: [_run(root, target), _run(root, target)] for target in (None, *TARGETS)}, root


def test_a_second_target_analysis_compiles_what_a_second_cpu_analysis_compiles(two_of_each):
    # Programs whose analyses are whole are read back; one with an unknown figure (SGD's update has
    # no transcendentals key in XLA's analysis) is compiled again, on the CPU as for a target.
    runs, _ = two_of_each
    cpu = runs[None]
    assert cpu[0][0] == "3" and int(cpu[1][0]) < 3 and cpu[1][1:] == cpu[0][1:]
    for target in TARGETS:
        first, second = runs[target]
        assert first[0] == "3"  # forward, grad and update: the CPU's cache entries are not the target's
        assert second[0] == cpu[1][0] and second[1:] == first[1:], (first, second)


def test_a_gpu_targets_compiles_reuse_kernels_from_a_file_of_their_own_and_give_the_same_figures(two_of_each):
    # the cache of the runs above: the H100's compiles wrote XLA's kernel cache, a file of its own,
    # and the TPU's, after them, wrote none (a TPU has no such cache)
    runs, root = two_of_each
    (kernels,) = (root / "cache" / "kernels").iterdir()
    assert kernels.name.startswith("h100-") and kernels.stat().st_size > 0
    for entry in (root / "cache" / "analyses").iterdir():
        entry.unlink()  # compiled again, now from the cached kernels
    again = _run(root, "h100")
    assert again == runs["h100"][0]  # three compiles, the same figures
    assert list((root / "cache" / "kernels").iterdir()) == [kernels]


def _tiny_target_compile(tmp_path, monkeypatch, caplog, cache_options, compile_lowered=None):
    """A small program compiled for the H100 target without the kernel cache, then with
    ``cache_options(real_options)`` as its cache (``compile_lowered`` standing in for XLA's
    compile where given): both results and the log."""
    import jax
    import jax.numpy as jnp

    from xla_cost.compiled import kernel_cache, targets, xla
    from xla_cost.timemodel import devices

    args = (jax.ShapeDtypeStruct((64, 64), jnp.float32),)

    def program(x):
        return jnp.tanh(x @ x).sum()

    target = devices.target("h100")
    with targets.use(target):
        plain = xla.compile_phase(program, args, compiler_options=xla.COMPILER_OPTIONS, executable=False)
    real = targets.CompileTarget.kernel_cache_options
    monkeypatch.setitem(xla._CACHE_STATE, "dir", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_UNKNOWN_OPTIONS", set())
    monkeypatch.setattr(targets.CompileTarget, "kernel_cache_options",
                        lambda self, directory: cache_options(real(self, directory)))
    if compile_lowered is not None:
        monkeypatch.setattr(xla, "_compile_lowered", compile_lowered(xla._compile_lowered))
    with targets.use(target), caplog.at_level("INFO", logger="xla_cost"):
        result = xla.compile_phase(program, args, compiler_options=xla.COMPILER_OPTIONS, executable=False)
    # 64x64 @ 64x64 and its tanh: 2*64^3 FLOP of the product at least, 64*64 transcendentals
    assert plain.costs.flops >= 2 * 64**3 and plain.costs.transcendentals == 64 * 64
    assert (result.costs, result.memory) == (plain.costs, plain.memory)
    return kernel_cache, caplog.text


def test_an_option_of_the_kernel_cache_that_xla_does_not_know_is_dropped_and_the_cache_kept(
        tmp_path, monkeypatch, caplog):
    # jax 0.11.2's XLA has no xla_gpu_enable_llvm_module_compilation_parallelism (seen on an H200
    # lease, 2026-11-26): every compile under the cache failed and was done again without it
    from xla_cost.compiled import targets

    seen = []

    def spy(real):
        def compile_lowered(program, options):
            seen.append(dict(options or {}))
            return real(program, options)
        return compile_lowered

    kernel_cache, log = _tiny_target_compile(tmp_path, monkeypatch, caplog,
                                    lambda options: {**options, "xla_gpu_no_such_option": True}, spy)
    assert "XLA has no option xla_gpu_no_such_option" in log and "without XLA's kernel cache" not in log
    assert "xla_gpu_no_such_option" in seen[0] and "xla_gpu_no_such_option" not in seen[-1]
    assert targets.KERNEL_CACHE_OPTION in seen[-1]  # the last compile kept the cache
    assert "xla_gpu_no_such_option" in kernel_cache._UNKNOWN_OPTIONS


def test_a_compile_that_fails_under_the_kernel_cache_is_compiled_again_without(tmp_path, monkeypatch, caplog):
    from xla_cost.compiled import targets

    def failing(real):
        def compile_lowered(program, options):
            if targets.KERNEL_CACHE_OPTION in (options or {}):
                raise RuntimeError("INTERNAL: the kernel cache file could not be read")
            return real(program, options)
        return compile_lowered

    _, log = _tiny_target_compile(tmp_path, monkeypatch, caplog, lambda options: options, failing)
    assert "compiled again without XLA's kernel cache" in log and "could not be read" in log
