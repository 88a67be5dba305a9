"""A while loop's trips read from its program where no ``known_trip_count`` is recorded (a TPU's).

libtpu's compiled loops carry no ``known_trip_count`` backend config; their
trips are read from the condition (``i < N``), the counter's start in the
initial tuple and the body's ``i + s`` (``s`` 1, or 2 in XLA's windowed
einsum loops: two steps of a collective matrix product per trip). A loop
of any other form stays unknown (never a guess).
"""

from __future__ import annotations

import pytest

from xla_cost.compiled.hlo import computation_runs, parse_module


def _module(bound: int, start: int, step: int, direction: str = "LT") -> str:
    return f"""HloModule loop

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {{
  %p = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[4] get-tuple-element(%p), index=1
  %one = s32[] constant({step})
  %next = s32[] add(%i, %one)
  %y = f32[4] tanh(%x)
  ROOT %t = (s32[], f32[4]) tuple(%next, %y)
}}

%cond (q: (s32[], f32[4])) -> pred[] {{
  %q = (s32[], f32[4]) parameter(0)
  %n = s32[] constant({bound})
  %j = s32[] get-tuple-element(%q), index=0
  ROOT %lt = pred[] compare(%j, %n), direction={direction}
}}

ENTRY %main (a: f32[4]) -> (s32[], f32[4]) {{
  %a = f32[4] parameter(0)
  %zero = s32[] constant({start})
  %c = s32[] copy(%zero)
  %init = (s32[], f32[4]) tuple(%c, %a)
  ROOT %w = (s32[], f32[4]) while(%init), condition=%cond, body=%body
}}
"""


@pytest.mark.parametrize("bound,start", [(7, 0), (32, 0), (10, 3)])
def test_trips_read_from_the_loop(bound, start):
    runs = computation_runs(parse_module(_module(bound, start, 1)))
    assert runs["body"].executions == bound - start  # i runs start, start + 1, ..., bound - 1
    assert runs["cond"].executions == bound - start + 1  # tested once more, to leave


@pytest.mark.parametrize("bound,start,step", [(4, 0, 2), (7, 0, 2), (16, 1, 3)])
def test_a_loop_stepping_by_more_than_one(bound, start, step):
    # a windowed einsum of 8 devices as libtpu compiles it (i < 4, i += 2): two trips, each two of its steps
    runs = computation_runs(parse_module(_module(bound, start, step)))
    assert runs["body"].executions == -(-(bound - start) // step)  # i = start, start + s, ... while i < bound


@pytest.mark.parametrize("step,direction", [(0, "LT"), (-1, "LT"), (1, "NE")])
def test_a_loop_of_another_form_stays_unknown(step, direction):
    runs = computation_runs(parse_module(_module(7, 0, step, direction)))
    assert runs["body"].executions is None
    assert runs["body"].unknown_loops
