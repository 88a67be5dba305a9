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
from xla_cost.timemodel import devices
from xla_cost.present.units import short_count
from xla_cost.runs import fit

from tests.formulas import mlp_params

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
    """Replaces the compiles by ``curve[0]``; returns every batch asked for, in order. The header's
    parameter count (`fit.parameter_count`, one_net's abstract initialisation: about 40 ms, 2,000 times
    over in the exhaustive searches below) is one_net's closed form, ``mlp_params(1)``; the real count
    is checked by `test_one_net_compiled_takes_at_most_6_compiles`."""
    asked: list[int] = []
    curve = [_affine]

    def breakdown_at(run, batch):
        asked.append(batch)
        return SimpleNamespace(peak=curve[0](batch))

    monkeypatch.setattr(fit, "breakdown_at", breakdown_at)
    monkeypatch.setattr(fit, "parameter_count", lambda run: mlp_params(1))
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


def test_a_fraction_just_above_0_is_accepted_and_batch_1_then_refused_with_its_figures(compiles):
    # 3400 bytes x 1e-9 = 3.4e-6 bytes usable: the fraction is accepted, and not even batch 1
    # (1000 + 24 = 1,024 bytes: 1.02 KB) fits, which is refused with both figures (issue 49)
    with pytest.raises(InputError, match=r"not even batch 1 fits: 1\.02 KB needed, 0\.\d+ KB usable") as refused:
        fit.max_batch_size("one_net", device_memory_bytes=3400, memory_fraction=1e-9)
    assert "\n" not in str(refused.value)
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


# ------------------------------------------------------------------ how many compiles (issue 30)

MAX_COMPILES = 6
"""What the search may spend on a peak close to affine in the batch (issue 30: the
search it replaces compiled one_net 15 times on an H100, 93-111 s)."""


def _exhaustive(curve, limit: float, step: int = 1) -> tuple[int, int]:
    """What compiling every batch from ``step`` up would answer: the last that fits, the first that does not."""
    batch = step
    while curve(batch) <= limit:
        batch += step
    return batch - step, batch


def _one_net_like(batch: int) -> int:
    # a first sample dearer than the rest (XLA's small-batch buffers): 1,000 bytes at batch 1, then
    # 24 bytes a sample from batch 2 on, starting 50 bytes above batch 1
    return BASE if batch == 1 else BASE + 50 + PER_SAMPLE * (batch - 2)


def _knee_late(batch: int) -> int:
    # 24 bytes a sample up to batch 500, then 3 x 24 more a sample: a buffer the step stops reusing
    return BASE + PER_SAMPLE * batch + 3 * PER_SAMPLE * max(0, batch - 500)


@pytest.mark.parametrize("curve, limits", [
    # affine: every limit from batch 1's peak to batch 300's, a byte apart around each batch
    (_affine, [_affine(b) + d for b in range(1, 301) for d in (-1, 0, 1)]),
    (_one_net_like, [_one_net_like(b) + d for b in range(1, 301) for d in (-1, 0, 1)]),
    # the knee at 8 (the secant through batches 1 and 2 overshoots by far), on both sides of it
    (_knee, [_knee(b) + d for b in range(1, 40) for d in (-1, 0, 1)]),
    (_knee_late, [_knee_late(b) + d for b in range(400, 800, 7) for d in (-1, 0, 1)]),
])
def test_the_search_answers_as_compiling_every_batch_would_in_at_most_6_compiles(compiles, curve, limits):
    compiles.curve[0] = curve
    for limit in limits:
        compiles.asked.clear()
        if _exhaustive(curve, limit)[0] == 0:  # not even batch 1 fits: refused after that one compile
            with pytest.raises(InputError, match="not even batch 1 fits"):
                fit.max_batch_size("one_net", device_memory_bytes=limit, memory_fraction=1, progress=False)
            assert compiles.asked == [1]
            continue
        result = fit.max_batch_size("one_net", device_memory_bytes=limit, memory_fraction=1, progress=False)
        assert (result.batch_size, result.next_size) == _exhaustive(curve, limit), limit
        assert len(compiles.asked) <= MAX_COMPILES, (limit, compiles.asked)  # compiles counted, not timed
        assert len(set(compiles.asked)) == len(compiles.asked)  # none twice


def test_an_affine_one_net_on_an_h100_takes_4_compiles(compiles):
    # an affine model of one_net's step from its dimensions (not XLA's figures, for which see the next
    # test): its parameters, their gradients and Adam's two moments, 4 x 533,898 parameters x 4 bytes,
    # a constant; and per sample its float32 activations and their gradients, (1 + 4,096 x 2 + 128 x 2
    # + 10 x 2) x 4 bytes; the search needs batches 1 and 2 and the pair that checks their prediction
    parameters = 533_898
    fixed, per_sample = 4 * parameters * 4, (1 + 4096 * 2 + 128 * 2 + 10 * 2) * 4
    compiles.curve[0] = lambda batch: fixed + per_sample * batch
    # 0.75 of what JAX's allocator sees: the H100's 81,559 MiB (as the driver reports it) less the CUDA context
    result = fit.max_batch_size("one_net", device="h100", progress=False, max_batch=fit.MAX_BATCH)
    usable = (81559 * 2**20 - devices.CUDA_CONTEXT_BYTES) * 0.75
    answer = int((usable - fixed) // per_sample)
    assert (result.batch_size, result.next_size) == (answer, answer + 1)
    assert len(compiles.asked) <= 4  # affine from batch 1: 1, 2, the answer and the next


def test_one_net_compiled_takes_at_most_6_compiles(monkeypatch):
    from xla_cost.runs.configs import RunConfig

    compiled = fit.breakdown_at
    asked: list[int] = []

    def counted(run, batch):  # the compile seam, counted
        asked.append(batch)
        return compiled(run, batch)

    # a device exactly as large as one_net's donated Adam step at batch 100 (compiled here, not counted)
    limit = compiled(RunConfig("one_net", config={}, optimizer="adam"), 100).peak
    monkeypatch.setattr(fit, "breakdown_at", counted)
    result = fit.max_batch_size("one_net", device_memory_bytes=limit, memory_fraction=1, progress=False)
    # batch 100 fits exactly and 101 does not: every sample adds its activations
    assert (result.batch_size, result.next_size) == (100, 101)
    assert result.fits.peak == limit < result.does_not_fit.peak
    assert len(asked) <= MAX_COMPILES, asked
    # the header names the model as configured: one_net's parameters (an MLP of one input: mlp_params(1)),
    # its layers (a family without scan_layers never loops), counted without compiling
    assert result.parameters == mlp_params(1) and result.layers == "unrolled"
    assert result.describe().startswith(f"one_net ({short_count(mlp_params(1))} parameters, layers unrolled; adam, "
                                        "float32): the largest batch that fits is 100")
    assert result.to_dict()["parameters"] == mlp_params(1)


@needs_4
def test_a_sharded_knee_takes_at_most_6_compiles(compiles):
    compiles.curve[0] = _knee
    for limit in [_knee(b) + d for b in range(4, 80, 4) for d in (-1, 0, 1)]:
        compiles.asked.clear()
        if limit < _knee(4):  # not even the smallest batch (4, the batch axes) fits: refused
            with pytest.raises(InputError, match="not even batch 4 fits"):
                fit.max_batch_size("one_net", device_memory_bytes=limit, memory_fraction=1, mesh={"data": 4},
                                   progress=False)
            continue
        result = fit.max_batch_size("one_net", device_memory_bytes=limit, memory_fraction=1, mesh={"data": 4},
                                    progress=False)
        assert (result.batch_size, result.next_size) == _exhaustive(_knee, limit, 4), limit
        assert len(compiles.asked) <= MAX_COMPILES, (limit, compiles.asked)


def test_a_curve_far_from_affine_still_gets_the_exact_answer(compiles):
    # quadratic in the batch (no step's peak is): predictions miss, the search falls back on bisection
    compiles.curve[0] = lambda batch: BASE + batch * batch
    for answer in (1, 2, 3, 10, 99, 1000, 12_345):
        compiles.asked.clear()
        result = fit.max_batch_size("one_net", device_memory_bytes=BASE + answer * answer, memory_fraction=1,
                                    progress=False)
        assert (result.batch_size, result.next_size) == (answer, answer + 1)
        # fit.PREDICTED compiles, then bisection of what is left (at most 31 halvings of int32's range)
        assert len(compiles.asked) <= fit.PREDICTED + 31 + 2


def _plateau(batch: int) -> int:
    # 24 bytes a sample up to batch 300; flat up to 600 (the compiler recomputing to stay under its
    # limit); then 2,400 bytes a sample: the leap over the flat stretch (8 x 301) overshoots by far
    return BASE + PER_SAMPLE * min(batch, 300) + 2400 * max(0, batch - 600)


def test_a_flat_stretch_then_a_climb_is_answered_exactly_in_at_most_8_compiles(compiles):
    compiles.curve[0] = _plateau
    for limit in [_plateau(600) + d for d in range(-1, 2400 * 40, 977)]:
        compiles.asked.clear()
        result = fit.max_batch_size("one_net", device_memory_bytes=limit, memory_fraction=1, progress=False)
        assert (result.batch_size, result.next_size) == _exhaustive(_plateau, limit), limit
        # 1, 2, 300, 301 (the flat stretch), the leap to 2,408 and the batch below it (the slope
        # above the knee), then the knee's crossing and its neighbour
        assert len(compiles.asked) <= 8 and len(set(compiles.asked)) == len(compiles.asked), compiles.asked


def test_the_peaks_a_gpu_targets_rematerialization_made_are_searched_without_large_detours(compiles):
    # ViT-B/16's train step (bfloat16, Adam) on the H200 target: the peaks `fit` compiled without the
    # GPU, joined by straight lines. Flat within 105-113 GB from batch 1,029 to 1,646 while the
    # compiler recomputes, 793 GB at 8,864, and not monotonic where it recomputes
    import json
    import pathlib

    data = pathlib.Path(__file__).resolve().parents[2] / "reports" / "data" / "fit_vit-b16_h200_2026-11-26.json"
    answered = json.loads(data.read_text())
    points = sorted(dict(answered["tried"]).items())

    def curve(batch: int) -> int:
        below = max((p for p in points if p[0] <= batch), default=points[0])
        above = min((p for p in points if p[0] >= batch), default=points[-1])
        if below[0] == above[0]:
            return below[1]
        return int(below[1] + (above[1] - below[1]) * (batch - below[0]) / (above[0] - below[0]))

    compiles.curve[0] = curve
    result = fit.max_batch_size("one_net", device_memory_bytes=answered["limit"], memory_fraction=1, progress=False)
    assert (result.batch_size, result.next_size) == _exhaustive(curve, answered["limit"])
    assert result.batch_size == answered["batch_size"] == 1641  # what the compiles answered then
    # the search that answered it compiled 23 batches, 5 of them above 3,500 (8,864 and the three
    # below it, then 5,027 bisecting); after 3 predictions in a row that fit it bisects by ratio
    assert len(compiles.asked) <= 22 and len(set(compiles.asked)) == len(compiles.asked), compiles.asked
    assert sum(b > 3500 for b in compiles.asked) <= 4, compiles.asked


def test_each_compile_is_a_line_on_stderr_even_when_piped(compiles, capsys):
    # 3,400 bytes: batch 100 exactly (1000 + 24 x 100); capsys is not a terminal, as a pipe is not
    result = fit.max_batch_size("one_net", device_memory_bytes=3400, memory_fraction=1, progress=True)
    lines = capsys.readouterr().err.splitlines()
    # first what is searched (up to fit.DEFAULT_MAX_BATCH, 65,536), then a line a compile
    assert lines.pop(0) == ("fit: searching batches 1 to 65,536 (max_batch, --max-batch) of one_net for the "
                            "largest whose step fits 3.40 KB")
    assert len(lines) == len(compiles.asked) == len(result.tried)
    # 1000 + 24 = 1,024 bytes at batch 1 read 1.02 KB (against 3.40 KB usable); 3,424 at batch 101
    # read 3.42 KB, and does not fit
    assert lines[0] == "fit: batch 1 → 1.02 KB, fits (limit 3.40 KB)"
    assert "fit: batch 101 → 3.42 KB, does not fit (limit 3.40 KB)" in lines
    assert "fit: batch 100 → 3.40 KB, fits (limit 3.40 KB)" in lines  # exactly the limit: it fits
    fit.max_batch_size("one_net", device_memory_bytes=3400, memory_fraction=1, progress=False)
    assert capsys.readouterr().err == ""  # progress=False (--quiet): none


def test_a_peak_a_hair_over_the_limit_shows_the_digits_that_tell_them_apart(compiles, capsys):
    # 60 GB usable; the answer 1,000 bytes under it, the next size 33,288 bytes over (a sample of
    # 33,288 bytes): at 2 decimals both read 60.00 GB
    limit = 60e9
    compiles.curve[0] = lambda batch: int(limit - 1000 + 33_288 * (batch - 1_000_000))
    result = fit.max_batch_size("one_net", device_memory_bytes=80e9, progress=True, max_batch=fit.MAX_BATCH)
    assert (result.batch_size, result.next_size) == (1_000_000, 1_000_001)
    err = capsys.readouterr().err
    # 59,999,999,000 bytes read 60.00 until 6 decimals (59.999999); 60,000,032,288 at 5 (60.00003)
    assert "fit: batch 1,000,000 → 59.999999 GB, fits (limit 60.00 GB)" in err
    assert "fit: batch 1,000,001 → 60.00003 GB, does not fit (limit 60.00 GB)" in err
    assert "1000000 (59.999999 GB) fits" in result.notes()[0]
    assert "1000001 (60.00003 GB) does not fit" in result.notes()[0]


def test_the_table_says_which_batch_fits_and_shows_the_limit():
    from xla_cost.analysis.memory import MemoryBreakdown

    def step(peak: int) -> MemoryBreakdown:  # XLA's peak: arguments + outputs + temporaries - aliased
        return MemoryBreakdown(10**9, 10**9, 2 * 10**9, 0, 0, 0, argument_bytes=4 * 10**9, output_bytes=0,
                               temp_bytes=peak - 4 * 10**9, alias_bytes=0)

    # 1.5 GB usable of 2 GB; batch 16 peaks 1,000 bytes under it, 17 a sample of 1,000 bytes over
    limit = 1.5e9
    result = fit.FitResult("one_net", 16, limit, 2e9, "given", step(int(limit) - 1000), 17, step(int(limit) + 1000),
                           ((16, int(limit) - 1000), (17, int(limit) + 1000)))
    table = result.to_table(width=100)
    # both peaks read 1.500 GB: the headings tell them apart, and the limit is the last row
    assert "batch 16: fits" in table and "batch 17: does not fit" in table
    assert [line for line in table.splitlines() if "usable (the limit)" in line][0].count("1.500") == 2
    # the notes give the digits that tell each from the limit: 1.499999 and 1.500001 GB
    assert result.notes() == ["tried: 16 (1.499999 GB) fits, 17 (1.500001 GB) does not fit (limit 1.50 GB)"]


def test_a_batch_whose_rematerialization_fell_short_is_judged_by_its_final_peak(compiles, monkeypatch, capsys):
    # the affine step (1000 + 24 bytes a sample) on 3,400 bytes fits up to batch 100 (1000 + 24 x 100 =
    # 3,400): from batch 60 on the compiler says its rematerialization could not reach its own limit
    # (3,000 bytes, a headroom under the allocator's), and a device still runs what its final peak fits
    # (an H100 ran BERT-base at 1,193 after such a shortfall: device_check_..._2026-11-26-4.json)
    def breakdown_at(run, batch):
        compiles.asked.append(batch)
        short = (3000, 3100 + batch) if batch >= 60 else None
        return SimpleNamespace(peak=_affine(batch), remat_short_of=short)

    monkeypatch.setattr(fit, "breakdown_at", breakdown_at)
    result = fit.max_batch_size("one_net", device_memory_bytes=3400, memory_fraction=1, progress=True)
    assert (result.batch_size, result.next_size) == (100, 101)
    assert all(p == _affine(b) for b, p in result.tried)  # the final peak, shortfall or not
    assert result.remat_short_of and all(b >= 60 and limit == 3000 for b, limit, _ in result.remat_short_of)
    assert any("rematerialization short of its own limit" in note for note in result.notes())
    # the line per compile says both: the final peak judged, and how far the pass got
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fit: batch 100 ")]
    assert lines and "rematerialization only to" in lines[0] and lines[0].endswith("fits (limit 3.40 KB)")
