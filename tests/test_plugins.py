"""jax's accelerator plugins on a machine without the accelerator (xla_cost.plugins, issue 31)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import xla_cost
from tests.refusals import one_line_refusal
from xla_cost import plugins
from xla_cost.errors import InputError


def test_the_test_command_installs_both_compilers():
    # `pip install -e '.[test]'` brings the gpu and tpu extras: without them the target tests would skip
    assert plugins.cuda_plugin() is not None, "pip install -e '.[test]' (the gpu extra) installs jax's CUDA plugin"
    assert plugins.has_libtpu(), "pip install -e '.[test]' (the tpu extra) installs libtpu"


QUIET = """
import xla_cost, jax
jax.devices()
from xla_cost import plugins
mapped = lambda: "xla_cuda_plugin" in open("/proc/self/maps").read()  # the CUDA plugin's library loaded
before = (mapped(), plugins.cuda_started())
from xla_cost.timemodel.devices import target
print(len(target("tpu-v5e:2x2").devices(4)), len(target("h100").devices(8)))
print(*before, mapped(), plugins.cuda_started())
# a started late, the CUDA plugin still gets what jax registers for every plugin: custom partitioning's
# CustomSPMDPartitioning (cuDNN attention under a model mesh uses it; without it "No registered implementation")
import jax.numpy as jnp, numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import Mesh, NamedSharding, PartitionSpec

@custom_partitioning
def double(x):
    return 2 * x

double.def_partition(partition=lambda mesh, args, result: (mesh, lambda x: 2 * x, args[0].sharding, (args[0].sharding,)),
                     sharding_rule="i -> i")
halves = NamedSharding(Mesh(np.array(target("h100").devices(2)), ("x",)), PartitionSpec("x"))
jax.jit(double, in_shardings=halves, out_shardings=halves).lower(
    jax.ShapeDtypeStruct((8,), jnp.float32, sharding=halves)).compile()
print("partitioned")
"""


@pytest.mark.skipif(plugins.has_gpu_driver() or plugins.has_tpu_device(), reason="a machine with the device")
@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc to see what the process loaded")
def test_the_plugins_start_without_a_line_on_stderr():
    # and without a GPU driver the CUDA plugin (NVIDIA's libraries: cuDNN, cuBLAS, ...) starts only
    # when a GPU target asks for it: not with jax's CPU backend, then at the H100's topology
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_PLATFORMS", "JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "TPU_WORKER_HOSTNAMES",
                        "TPU_SKIP_MDS_QUERY", "ALLOW_MULTIPLE_LIBTPU_LOAD")}
    done = subprocess.run([sys.executable, "-c", QUIET], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["4", "8", "False", "False", "True", "True", "partitioned"]  # 2x2 chips; 8 GPUs
    assert done.stderr == ""


def test_a_missing_compiler_is_one_line_naming_the_install_command(monkeypatch):
    monkeypatch.setattr(plugins, "cuda_plugin", lambda: None)
    monkeypatch.setattr(plugins, "has_libtpu", lambda: False)
    import jax
    import jax.numpy as jnp

    with pytest.raises(InputError, match=r"pip install 'xla-cost\[gpu\]'") as raised:
        xla_cost.analyze(lambda p, x: x @ p, jax.ShapeDtypeStruct((2, 3), jnp.float32),
                         params=jax.ShapeDtypeStruct((3, 4), jnp.float32), target="h100")
    assert "\n" not in str(raised.value)
    with pytest.raises(InputError, match=r"pip install 'xla-cost\[tpu\]'"):
        xla_cost.analyze(lambda p, x: x @ p, jax.ShapeDtypeStruct((2, 3), jnp.float32),
                         params=jax.ShapeDtypeStruct((3, 4), jnp.float32), target="tpu-v5e")


def test_the_cli_refuses_a_missing_compiler_in_one_line(capsys, monkeypatch):
    monkeypatch.setattr(plugins, "cuda_plugin", lambda: None)
    one_line_refusal(capsys, ["analyze", "one_net", "--target", "h100"], ("CUDA plugin", "xla-cost[gpu]"))


@pytest.mark.parametrize("argv, words", [
    (["analyze", "one_net", "--target", "tpu-v9"], ("compile target", "tpu-v9")),
    (["analyze", "one_net", "--target", "tpu-v5e:3"], ("2-D slice", "tpu-v5e:3")),
    (["analyze", "one_net", "--target", "h100", "--time"], ("--target", "--time")),
    (["analyze", "one_net", "--target", "h100", "--counter", "jaxpr"], ("--target", "jaxpr")),
    (["analyze", "one_net", "--compare-cpu"], ("--compare-cpu",)),
])
def test_bad_targets_are_refused_in_one_line(capsys, argv, words):
    one_line_refusal(capsys, argv, words)


def test_prepare_keeps_what_the_user_set():
    env = dict(os.environ, TPU_WORKER_HOSTNAMES="tpu-host-0")
    code = "import os, xla_cost; print(os.environ['TPU_WORKER_HOSTNAMES'])"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "tpu-host-0", done.stderr


PROFILE_AFTER_TPU = """
import tempfile, xla_cost, jax, jax.numpy as jnp
from xla_cost.timemodel.devices import target
target("tpu-v5e").devices(1)   # libtpu loaded and initialised for a deviceless topology
f = jax.jit(lambda x: x @ x)
x = jnp.ones((8, 8))
with tempfile.TemporaryDirectory() as d, jax.profiler.trace(d):
    f(x).block_until_ready()
print("traced")
"""


@pytest.mark.skipif(plugins.has_tpu_device(), reason="a machine with a TPU traces it")
def test_a_profiler_trace_after_a_tpu_target_does_not_crash():
    # libtpu's profiler, registered as jax loads the plugin, crashed the next trace (signal 11)
    done = subprocess.run([sys.executable, "-c", PROFILE_AFTER_TPU], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "traced", done.stderr[-2000:]


PROFILE_AFTER_A_LATE_SETTING = """
import os, tempfile, jax
os.environ["JAX_PLATFORMS"] = "cpu"   # after jax's import, which read it: jax alone would not see it
import xla_cost, jax.numpy as jnp
with tempfile.TemporaryDirectory() as d, jax.profiler.trace(d):
    jnp.ones(3).block_until_ready()
print(jax.default_backend())
"""


@pytest.mark.skipif(plugins.has_gpu_driver() or plugins.has_tpu_device(), reason="a machine with a device starts it")
def test_jax_platforms_set_after_jax_was_imported_is_kept_and_a_trace_does_not_crash():
    # jax read JAX_PLATFORMS as it was imported, and started every plugin: the profiler of the CUDA plugin,
    # whose start xla_cost defers on a machine without a GPU driver, crashed the first trace (signal 11; a
    # timed analysis in a script that set the variable after `import jax`)
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    done = subprocess.run([sys.executable, "-c", PROFILE_AFTER_A_LATE_SETTING], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "cpu", done.stderr[-2000:]


def test_the_gpu_driver_is_found_where_the_dynamic_loader_finds_it(tmp_path, monkeypatch):
    # the loader's cache (what `ldconfig -p` lists) and LD_LIBRARY_PATH, read without a subprocess
    monkeypatch.setattr(plugins.glob, "glob", lambda pattern: [] if pattern.startswith("/dev/") else _real_glob(pattern))
    cache = tmp_path / "ld.so.cache"
    monkeypatch.setattr(plugins, "LOADER_CACHE", str(cache))
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    cache.write_bytes(b"glibc-ld.so.cache1.1\0libm.so.6\0/lib/x86_64-linux-gnu/libm.so.6\0")
    assert not plugins.has_gpu_driver()
    cache.write_bytes(b"glibc-ld.so.cache1.1\0libcuda.so.1\0/usr/lib/x86_64-linux-gnu/libcuda.so.1\0")
    assert plugins.has_gpu_driver()
    cache.unlink()  # no cache (a container without ldconfig's): the library path alone
    driver = tmp_path / "driver"
    driver.mkdir()
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{tmp_path / 'none'}:{driver}")
    assert not plugins.has_gpu_driver()
    (driver / "libcuda.so.1").write_bytes(b"")
    assert plugins.has_gpu_driver()


_real_glob = plugins.glob.glob
