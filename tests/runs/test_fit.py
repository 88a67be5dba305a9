"""The largest batch that fits (`xla_cost.max_batch_size`): the usable memory it
searches against and the search itself, on peak-memory curves given in the test
in place of compiles (``breakdown_at`` replaced), so every batch it asks for is
seen and the answer is a closed form of the curve, written beside each test.
Compiled peaks: tests/analysis/test_memory.py and tests/cli.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import jax
import pytest

from xla_cost.errors import InputError
from xla_cost.runs import fit

# an affine step: parameters and optimizer state 1,000 bytes, 24 bytes more per sample
BASE, PER_SAMPLE = 1000, 24


def _affine(batch: int) -> int:
    return BASE + PER_SAMPLE * batch


def _knee(batch: int) -> int:
    # 1 byte a sample up to batch 8, then 10,000 bytes a sample more: the secant through
    # batches 4 and 8 (1 byte a sample) overshoots the limit of 2,000 bytes by far
    return BASE + batch + 10_000 * max(0, batch - 8)


@pytest.fixture
def compiles(monkeypatch):
    """Replaces the compiles by ``curve[0]``; returns every batch asked for, in order."""
    asked: list[int] = []
    curve = [_affine]

    def breakdown_at(run, batch):
        asked.append(batch)
        return SimpleNamespace(peak=curve[0](batch))

    monkeypatch.setattr(fit, "breakdown_at", breakdown_at)
    return SimpleNamespace(asked=asked, curve=curve)


@pytest.mark.parametrize("fraction", [0, 0.0, -0.5, 1.0000001, 2, math.nan, math.inf, True, "0.5"])
def test_a_memory_fraction_outside_0_1_is_refused(compiles, fraction):
    with pytest.raises(InputError, match=r"a memory fraction in \(0, 1\]"):
        fit.max_batch_size("one_net", device_memory_bytes=_affine(100), memory_fraction=fraction)
    assert compiles.asked == []  # refused before anything compiles


def test_a_fraction_of_exactly_1_uses_all_of_the_memory(compiles):
    # a device exactly as large as the step at batch 100 needs: 1000 + 24 * 100 = 3400 bytes
    result = fit.max_batch_size("one_net", device_memory_bytes=_affine(100), memory_fraction=1)
    assert result.limit == 3400 and result.capacity == 3400
    assert (result.batch_size, result.next_size) == (100, 101)
    assert (result.fits.peak, result.does_not_fit.peak) == (3400, 3424)  # 1000 + 24 * 101 = 3424
    # half of twice the memory is the same limit
    half = fit.max_batch_size("one_net", device_memory_bytes=2 * 3400, memory_fraction=0.5)
    assert half.limit == 3400 and (half.batch_size, half.next_size) == (100, 101)


def test_a_fraction_just_above_0_is_accepted(compiles):
    # 3400 bytes x 1e-9: not even batch 1 (1000 + 24 = 1024 bytes) fits; an answer, not an error
    result = fit.max_batch_size("one_net", device_memory_bytes=3400, memory_fraction=1e-9)
    assert result.limit == pytest.approx(3400e-9, rel=1e-12)
    assert (result.batch_size, result.next_size, result.fits) == (0, 1, None)
    assert compiles.asked == [1]


needs_4 = pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 simulated devices (tests/conftest.py)")


@needs_4
@pytest.mark.parametrize("capacity, fits, next_size", [
    (3400, 100, 104),  # exactly the peak at batch 100 (1000 + 24 * 100): it fits, 104 does not
    (3399, 96, 100),   # one byte less: 100 no longer fits; the multiple of 4 below it, 96, does
])
def test_a_sharded_batch_is_the_largest_multiple_of_the_batch_axes_that_fits(compiles, capacity, fits, next_size):
    result = fit.max_batch_size("one_net", device_memory_bytes=capacity, memory_fraction=1, mesh={"data": 4})
    assert (result.batch_size, result.next_size) == (fits, next_size)
    assert result.fits.peak == _affine(fits) <= capacity < _affine(next_size) == result.does_not_fit.peak
    assert all(batch % 4 == 0 and batch >= 4 for batch in compiles.asked), compiles.asked


@needs_4
def test_the_downward_search_never_asks_below_the_smallest_batch(compiles):
    compiles.curve[0] = _knee
    # the batch axes split 4 ways: batches are multiples of 4; 2,000 bytes fit batch 8 (1000 + 8 = 1008)
    # and not 12 (1000 + 12 + 10,000 * 4); the secant through 4 and 8 predicts 8 + (2000 - 1008) / 1 = 1000,
    # and the search steps down from there, doubling its step, past batch 4
    result = fit.max_batch_size("one_net", device_memory_bytes=2000, memory_fraction=1, mesh={"data": 4})
    assert (result.batch_size, result.next_size) == (8, 12)
    assert 1000 in compiles.asked  # the overshoot happened
    # every batch asked for is a whole number of samples per device: a positive multiple of 4
    assert all(batch % 4 == 0 and batch >= 4 for batch in compiles.asked), compiles.asked
    assert [batch for batch, _ in result.tried] == compiles.asked  # each compiled once, as the result says
