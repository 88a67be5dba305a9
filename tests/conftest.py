"""Shared fixtures: strict JAX, and a cache so each configuration compiles once."""

from __future__ import annotations

import functools
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# No persistent caches while testing: tests that stand in for a backend (a
# patched cost_analysis) must see it run, and nothing a test patches may reach
# the user's cache. Tests of the caches run child processes with their own.
os.environ["XLA_COST_NO_CACHE"] = "1"

import xla_cost  # noqa: E402  (first: jax's accelerator plugins start quietly, xla_cost.plugins)

import jax  # noqa: E402
import pytest  # noqa: E402

# Rank promotion hides shape bugs; make it an error while testing. (Strict dtype
# promotion is not usable: optax's Adam adds a Python float to an int32 count.)
jax.config.update("jax_numpy_rank_promotion", "raise")
# Eight simulated CPU devices for the sharded tests (tests/parallel/test_sharding.py), set
# before any backend starts, as JAX's own test suite does. Unsharded analyses
# use one device and are unchanged by it.
xla_cost_devices = 8
jax.config.update("jax_num_cpu_devices", xla_cost_devices)

from xla_cost.zoo import build_model, example_inputs  # noqa: E402


@functools.lru_cache(maxsize=None)
def _zoo_report(name: str, batch: int, optimizer: str, per_layer: bool, config: tuple) -> xla_cost.Report:
    cfg = dict(config)
    return xla_cost.analyze(
        build_model(name, **cfg),
        example_inputs(name, batch, **cfg),
        optimizer=optimizer,
        per_layer=per_layer,
        name=name,
        config=cfg,
    )


@pytest.fixture(scope="session")
def zoo_report():
    """``zoo_report(name, batch, optimizer='sgd', per_layer=True, **config)``, cached."""

    def get(name: str, batch: int, optimizer: str = "sgd", per_layer: bool = True, **config):
        return _zoo_report(name, batch, optimizer, per_layer, tuple(sorted(config.items())))

    return get


# Timing in tests: a step is run and timed to check what the figures are (a split that adds
# up, MFU and HFU in the ratio of their FLOP, a skipped step reported), never how precise they
# are: a few short blocks and at most a second per separate program, instead of a user's
# defaults (blocks of 0.1 s, up to 200 repeats or 10 s per program until the median settles
# within 2%), which on a loaded 2-core machine took most of a timed test's seconds. Tests of
# the measurement loop itself pass their own `TimingOptions`.
from xla_cost.analysis import timing as _timing  # noqa: E402

_timing.time_workload.__kwdefaults__["options"] = _timing.TimingOptions(
    warmup=1, min_repeats=3, max_repeats=20, budget_s=1.0, block_s=0.01, min_blocks=3, max_blocks=5, trace_s=0.05)
