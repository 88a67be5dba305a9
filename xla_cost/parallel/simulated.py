"""Devices the CPU simulates for a mesh: how many it may be asked for, and asking.

A sharded analysis needs as many devices as its mesh (`xla_cost.parallel.sharding`);
on a machine without them the CPU backend simulates them, which must be set before
JAX starts its backends. Nothing is allocated per device.
"""

from __future__ import annotations

import os

import jax

from xla_cost.errors import InputError

__all__ = ["MAX_SIMULATED_DEVICES", "check_device_count", "simulate_devices"]

MAX_SIMULATED_DEVICES = 4096
"""The most devices `simulate_devices` asks the CPU for (`check_device_count`):
twice the largest mesh the reports analyse (2,048). Starting the CPU backend
takes about 2 s with 4,096 devices and grows faster than linearly (16,384:
over 10 minutes)."""


def check_device_count(count: int) -> None:
    """Refuses a mesh of more devices than the CPU may be asked to simulate.

    Raises:
      InputError: more than `MAX_SIMULATED_DEVICES` devices (exactly that many are allowed).
    """
    if count > MAX_SIMULATED_DEVICES:
        raise InputError(
            f"a mesh of at most {MAX_SIMULATED_DEVICES:,} devices (the CPU simulates them; more take minutes "
            "to start)", f"{count:,} devices",
            "Price a larger run as replicas of a smaller analysed mesh: estimate and scaling take "
            "--mesh data=D,... with the data replicas outside the analysed program.",
        )


def simulate_devices(count: int) -> None:
    """Lets the CPU backend simulate ``count`` devices, before JAX starts its backends.

    Call it first thing (right after ``import jax``), or set
    ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before Python starts.
    Nothing is allocated per device; a sharded analysis compiles for the mesh.

    Args:
      count: the devices the CPU backend is to have.

    Raises:
      InputError: JAX's backends already started with fewer devices, or more
        than `MAX_SIMULATED_DEVICES` asked for.
    """
    if count <= 1:
        return
    from jax._src import xla_bridge

    started = xla_bridge.backends_are_initialized()
    if started and (len(jax.devices()) >= count or len(jax.devices("cpu")) >= count):
        return
    check_device_count(count)
    if started:
        raise InputError(
            f"{count} devices for the mesh",
            f"{len(jax.devices())} {jax.default_backend()} device(s)",
            f"JAX's backends started before the CPU could be told to simulate more: call "
            f"xla_cost.simulate_devices({count}) right after `import jax` (before any JAX computation), or set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={count} before starting Python.",
        )
    flags = " ".join(f for f in _xla_flags() if "xla_force_host_platform_device_count" in f)
    if flags:  # the environment already says how many: it wins
        return
    jax.config.update("jax_num_cpu_devices", max(count, int(jax.config.jax_num_cpu_devices or 1)))


def _xla_flags() -> list[str]:
    return os.environ.get("XLA_FLAGS", "").split()
