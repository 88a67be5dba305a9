"""ZeRO-3's prefetch schedule (issue 32): `xla_cost.timemodel.schedule.prefetched`.

Each unit's parameters are all-gathered before its forward and before its
backward pass, its gradients reduce-scattered after it; one collective at a
time on the link, each issued as the neighbouring unit starts computing.
Timelines are written out beside each expectation.
"""

from __future__ import annotations

import pytest

from xla_cost.errors import InputError
from xla_cost.timemodel.schedule import prefetched


def test_compute_bound_exposes_only_the_first_gather_and_the_last_scatter():
    # every collective (1 s, 2 s) is shorter than the unit beside it computes (10 s, 20 s): only the first
    # unit's gather (nothing computes before it) and its reduce-scatter (nothing after it) show
    gather, scatter = 1.0, 2.0
    assert prefetched([gather] * 3, [10.0] * 3, [20.0] * 3, [scatter] * 3) == pytest.approx(gather + scatter)


def test_without_compute_every_collective_shows():
    # nothing to hide behind: 2 gathers and 1 reduce-scatter per unit, one after the other
    gathers, scatters = [1.0, 2.0, 3.0], [0.5, 0.5, 1.5]
    assert prefetched(gathers, [0.0] * 3, [0.0] * 3, scatters) == pytest.approx(2 * sum(gathers) + sum(scatters))


def test_two_units_by_hand():
    # gathers 2 s, forwards 1 s, backwards 2 s, reduce-scatters 3 s:
    #   gather 1 [0, 2]; forward 1 [2, 3]; gather 2, issued at 2: [2, 4]; forward 2 [4, 5]
    #   unit 2's backward gather, issued as forward 2 starts (4): [4, 6]; backward 2 [6, 8]
    #   unit 1's backward gather, issued at 6: [6, 8]; unit 2's reduce-scatter, issued at 8: [8, 11]
    #   backward 1 [8, 10]; its reduce-scatter, issued at 10, the link free at 11: [11, 14]
    # the step ends at 14 with 2 x (1 + 2) = 6 s of compute: 8 s exposed
    assert prefetched([2.0, 2.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]) == pytest.approx(14 - 6)


def test_no_units_nothing_exposed_and_bad_lists_refused():
    assert prefetched([], [], [], []) == 0.0
    with pytest.raises(InputError, match="equal length"):
        prefetched([1.0], [1.0, 2.0], [1.0], [1.0])
    with pytest.raises(InputError, match=">= 0"):
        prefetched([-1.0], [1.0], [1.0], [1.0])
