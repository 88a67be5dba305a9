"""The memory a GPU target's compiler plans a program for is what the device's
allocator gives a step (issue 49): `xla_cost.compiled.targets.CompileTarget`'s
``configured_memory``, seen through a deviceless H100 compile.

JAX's allocator takes 0.75 of a GPU's free memory (``XLA_PYTHON_CLIENT_MEM_FRACTION``);
a real H100's compile schedules and rematerializes for that limit (an H200's logged
0.95 x its allocator's limit + 73.5 MB: reports/data/device_check_nvidia-h200_2026-11-26.json).
A deviceless compile must plan for the same limit, or it recomputes (and `fit
--target` counts out) steps that fit.

The program: K products of m x m float32 outputs stacked into one result, so that
all of them are live at once and nothing can be recomputed to save memory (the
products and the stacked result are separate buffers: 2 x K x m^2 x 4 bytes).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import pytest

from xla_cost import plugins
from xla_cost.compiled import targets, xla
from xla_cost.timemodel import devices

pytestmark = pytest.mark.skipif(plugins.cuda_plugin() is None,
                                reason="the gpu extra (jax's CUDA plugin) is not installed")

PRODUCTS = 4


def _compiled(target: targets.CompileTarget, share: float) -> tuple[float, xla.XlaMemory]:
    """A program that needs about ``share`` of the target's allocator's limit, compiled for it:
    (what it needs, its memory as compiled)."""
    limit = target.memory_bytes * target.memory_fraction
    m = int(math.sqrt(share * limit / (2 * PRODUCTS * 4)))

    def stacked(x, w):
        return jnp.stack([jnp.dot(x * (i + 1), w) for i in range(PRODUCTS)])

    args = [jax.ShapeDtypeStruct(shape, jnp.float32, sharding=target.placement()) for shape in ((m, 128), (128, m))]
    with targets.use(target):
        phase = xla.compile_phase(stacked, args, executable=False,
                                  compiler_options={**xla.COMPILER_OPTIONS, **target.memory_options})
    memory = phase.memory
    return (memory.argument_bytes + memory.output_bytes + memory.temp_bytes) / limit, memory


def test_a_program_within_the_h100_s_allocator_limit_is_compiled_as_fitting():
    h100 = devices.target("h100")
    needs, memory = _compiled(h100, 0.84)
    assert 0.8 < needs < 0.9  # about 0.84 of the 60 GiB a step may use on an 80 GB H100 (0.75 of its free memory)
    # it fits: the compiler neither recomputed nor fell short (it did with 0.64 of the limit)
    assert memory.remat_short_of is None and memory.rematerialized == 0


def test_a_program_beyond_the_h100_s_allocator_limit_falls_short_of_that_limit():
    h100 = devices.target("h100")
    needs, memory = _compiled(h100, 1.2)
    assert needs > 1.1
    limit, reached = memory.remat_short_of
    allocator = h100.memory_bytes * h100.memory_fraction
    # the limit the compiler could not get under is the allocator's (a real GPU's compile: 0.95 x it + 73.5 MB)
    assert 0.95 * allocator <= limit <= allocator
    assert reached == memory.argument_bytes + memory.output_bytes + memory.temp_bytes or reached > limit
