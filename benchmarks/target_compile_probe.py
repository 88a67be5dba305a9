"""Probe for issue 31 (compile for the target): ResNet-50's train step compiled
deviceless for an H100 (jax's CUDA plugin, no GPU, no driver) and, on a TPU
v5e 2x2 slice (libtpu), a sharded matmul, beside the CPU compile of the same
step. It measures what the target's compiler gives without a device: compile
time, fusions, library calls, XLA's cost analysis and memory analysis.

Needs the plugins at jaxlib's version, without the CUDA wheels (the smallest
set that compiles: the plugin and its PJRT library, about 460 MB installed)::

    pip install --no-deps "jax-cuda12-plugin==$(python -c 'import jax; print(jax.__version__)')" \\
        "jax-cuda12-pjrt==$(python -c 'import jax; print(jax.__version__)')" libtpu
    JAX_PLATFORMS=cpu JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 python benchmarks/target_compile_probe.py

The H100's compiler description is written from NVIDIA's H100 Tensor Core
GPU Architecture whitepaper (2022): 132 SMs of 128 FP32 lanes, 2,048 threads
and 228 KB of shared memory (227 KB per block opted in) each, a 50 MB L2,
1.98 GHz boost clock, compute capability 9.0; memory size and bandwidth are
the registry's (`xla_cost.parallel.devices`).
"""

from __future__ import annotations

import os
import re
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")  # no driver to check against
os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")  # one host: libtpu need not look for others

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from jax.experimental import topologies  # noqa: E402

from xla_cost.parallel.devices import device as registry_device  # noqa: E402
from xla_cost.zoo import build_model, example_inputs  # noqa: E402

BATCH = 32


def h100_target_config() -> str:
    """The H100 SXM as XLA's GPU compiler takes it (a GpuTargetConfig in text form)."""
    device = registry_device("h100")
    return f"""
gpu_device_info {{
  threads_per_block_limit: 1024 threads_per_warp: 32
  shared_memory_per_block: 49152 shared_memory_per_core: 233472 shared_memory_per_block_optin: 232448
  threads_per_core_limit: 2048 core_count: 132 fpus_per_core: 128
  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535
  memory_bandwidth: {int(device.peak.bandwidth)} l2_cache_size: 52428800 clock_rate_ghz: 1.98
  device_memory_size: {int(device.memory)}
  cuda_compute_capability {{ major: 9 minor: 0 }}
  registers_per_core_limit: 65536 registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 1 patch: 0 }}
device_description_str: "{device.title}"
"""


def _step_and_args(sharding: jax.sharding.Sharding | None):
    model = build_model("resnet50")
    image = example_inputs("resnet50", BATCH)
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.ones(image.shape, jnp.bfloat16)))
    tx = optax.sgd(0.1, momentum=0.9)
    state = jax.eval_shape(tx.init, variables["params"])

    def step(params, stats, opt, x, y):
        def loss(p):
            out, new = model.apply({"params": p, "batch_stats": stats}, x, mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(out.astype(jnp.float32), y).mean(), new
        (_, new), grads = jax.value_and_grad(loss, has_aux=True)(params)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), new["batch_stats"], opt

    def placed(tree):
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), tree)

    args = (variables["params"], variables["batch_stats"], state, jax.ShapeDtypeStruct(image.shape, jnp.bfloat16),
            jax.ShapeDtypeStruct((BATCH,), jnp.int32))
    return step, tuple(placed(a) for a in args) if sharding is not None else args


def _row(target: str, compiled, seconds: float) -> str:
    text = compiled.as_text()
    fusions = len(re.findall(r"^\s*(?:ROOT )?%\S+ = \S+ fusion\(", text, re.M))
    calls = re.findall(r'custom_call_target="([^"]+)"', text)
    costs = compiled.cost_analysis() or {}
    memory = compiled.memory_analysis()
    flops = costs.get("flops")
    return (f"| {target} | {seconds:.1f} | {fusions} | {len(calls)} | "
            f"{'none' if flops is None else f'{flops / 1e9:.1f}'} | {memory.temp_size_in_bytes / 1e9:.2f} |")


def main() -> int:
    try:
        import jax_plugins.xla_cuda12  # noqa: F401 - the CUDA plugin is what compiles for a GPU
    except ImportError:
        print("target_compile_probe: needs jax's CUDA plugin: pip install --no-deps "
              f"jax-cuda12-plugin=={jax.__version__} jax-cuda12-pjrt=={jax.__version__}", file=sys.stderr)
        return 2
    print(f"ResNet-50 train step, batch {BATCH}, bfloat16, SGD with momentum; jax {jax.__version__}\n")
    print("| target | compile s | fusions | library calls | XLA GFLOP | temp GB |")
    print("|---|---|---|---|---|---|")
    step, args = _step_and_args(None)
    start = time.perf_counter()
    compiled = jax.jit(step).lower(*args).compile()
    print(_row("cpu", compiled, time.perf_counter() - start))
    topology = topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=h100_target_config())
    sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(topology.devices, ("d",)), jax.sharding.PartitionSpec())
    step, args = _step_and_args(sharding)
    start = time.perf_counter()
    compiled = jax.jit(step).lower(*args).compile()
    print(_row("h100 (deviceless)", compiled, time.perf_counter() - start))
    try:
        topology = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2")
    except Exception as exc:  # noqa: BLE001 - libtpu absent or refusing: say so, the GPU rows stand
        print(f"\ntpu v5e:2x2: not compiled ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
        return 0
    mesh = jax.sharding.Mesh(topology.devices, ("data",))
    rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    m, k, n = 1024, 512, 256
    compiled = jax.jit(lambda a, b: jnp.tanh(a @ b), in_shardings=(rows, whole), out_shardings=rows).lower(
        jax.ShapeDtypeStruct((m, k), jnp.bfloat16, sharding=rows),
        jax.ShapeDtypeStruct((k, n), jnp.bfloat16, sharding=whole)).compile()
    costs = compiled.cost_analysis() or {}
    # per device: (m / 4) x k x n multiply-adds, 2 FLOP each
    print(f"\ntpu v5e:2x2 ({len(topology.devices)} chips), tanh(x @ w) {m}x{k} @ {k}x{n} bfloat16, rows over 4: "
          f"{costs.get('flops', 0):,.0f} FLOP per chip (formula {2 * m // 4 * k * n:,} + the tanh's), "
          f"optimal_seconds {costs.get('optimal_seconds')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
