"""Replaying a compiled schedule (`xla_cost.compiled.liveness`) on small hand-written HLO
modules, whose peaks are worked out by hand beside each test (f32: 4 bytes per
element). The replay against XLA's own buffer assignment is checked on real
compiled steps in tests/analysis/test_memory.py."""

from __future__ import annotations

import pytest

from xla_cost.compiled import hlo, liveness

CHAIN = """HloModule chain, is_scheduled=true, entry_computation_layout={(f32[100]{0})->(f32[100]{0})}

ENTRY %main (p: f32[100]) -> (f32[100]) {
  %p = f32[100]{0} parameter(0), metadata={op_name="args[0]"}
  %a = f32[100]{0} negate(%p), metadata={op_name="jit(f)/jvp(Net)/fc/neg"}
  %b = f32[200]{0} concatenate(%a, %a), dimensions={0}
  %c = f32[100]{0} slice(%b), slice={[0:100]}
  %d = f32[100]{0} add(%c, %p)
  ROOT %t = (f32[100]{0}) tuple(%d)
}
"""


def test_a_chain_peaks_where_two_buffers_overlap():
    profile = liveness.simulate(CHAIN)
    # a (400 B) lives until b (800 B) is made from it: 1,200 B at b; then b and c
    # (also 1,200 B, not more); d is the output, counted apart
    assert profile.temp_peak_bytes == 100 * 4 + 200 * 4
    assert profile.peak_instruction == "main/b"
    assert {b.instruction for b in profile.at_peak} == {"a", "b"}
    assert [b.nbytes for b in profile.at_peak] == [800, 400]  # largest first
    assert [(b.instruction, b.nbytes) for b in profile.arguments] == [("p", 400)]
    assert [(b.instruction, b.nbytes) for b in profile.outputs] == [("d", 400)]
    assert profile.peak_bytes == 400 + 400 + 1200
    a = next(b for b in profile.at_peak if b.instruction == "a")
    assert a.op_name == "jit(f)/jvp(Net)/fc/neg" and a.shape == "f32[100]"


LOOP = """HloModule loop, is_scheduled=true, entry_computation_layout={(f32[1000]{0})->f32[1000]{0}}

%cond (cs: (s32[], f32[1000])) -> pred[] {
  %cs = (s32[], f32[1000]{0}) parameter(0)
  %ci = s32[] get-tuple-element(%cs), index=0
  %cn = s32[] constant(10)
  ROOT %lt = pred[] compare(%ci, %cn), direction=LT
}

%body (bs: (s32[], f32[1000])) -> (s32[], f32[1000]) {
  %bs = (s32[], f32[1000]{0}) parameter(0)
  %bi = s32[] get-tuple-element(%bs), index=0
  %bx = f32[1000]{0} get-tuple-element(%bs), index=1
  %bt = f32[500]{0} slice(%bx), slice={[0:500]}
  %bu = f32[500]{0} negate(%bt)
  %bx2 = f32[1000]{0} dynamic-update-slice(%bx, %bu, %bi)
  %one = s32[] constant(1)
  %bi2 = s32[] add(%bi, %one)
  ROOT %br = (s32[], f32[1000]{0}) tuple(%bi2, %bx2)
}

ENTRY %main (p: f32[1000]) -> f32[1000] {
  %p = f32[1000]{0} parameter(0)
  %z = s32[] constant(0)
  %x0 = f32[1000]{0} copy(%p)
  %init = (s32[], f32[1000]{0}) tuple(%z, /*index=1*/%x0)
  %w = (s32[], f32[1000]{0}) while(%init), condition=%cond, body=%body
  %out = f32[1000]{0} get-tuple-element(%w), index=1
  ROOT %n = f32[1000]{0} negate(%out)
}
"""


def test_a_loop_adds_its_bodys_peak_and_updates_its_state_in_place():
    profile = liveness.simulate(LOOP)
    # the loop state x0 (4,000 B) is live across the loop; the body's own peak is the
    # slice and its negation (2,000 B each) -- the dynamic-update-slice writes into the
    # state, the counter is 4 B and dies first -- and the condition's is 1 B
    assert profile.temp_peak_bytes == 1000 * 4 + 2 * 500 * 4
    assert profile.peak_instruction == "main/w"
    assert {b.instruction for b in profile.at_peak} == {"x0", "bt", "bu"}
    assert {b.computation for b in profile.at_peak} == {"main", "body"}


DONATED = """HloModule donated, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }, entry_computation_layout={(f32[1000]{0}, f32[10]{0})->(f32[1000]{0}, f32[])}

%update (ua: f32[1000], ub: f32[1000]) -> f32[1000] {
  %ua = f32[1000]{0} parameter(0)
  %ub = f32[1000]{0} parameter(1)
  ROOT %us = f32[1000]{0} subtract(%ua, %ub)
}

ENTRY %main (w: f32[1000], x: f32[10]) -> (f32[1000], f32[]) {
  %w = f32[1000]{0} parameter(0), metadata={op_name="args[0]['fc']['kernel']"}
  %x = f32[10]{0} parameter(1), metadata={op_name="args[3]"}
  %wc = f32[1000]{0} copy(%w)
  %g = f32[1000]{0} negate(%wc), metadata={op_name="jit(train_step)/transpose(jvp(Net))/fc/dot_general"}
  %nw = f32[1000]{0} fusion(%wc, %g), kind=kLoop, calls=%update
  %l = f32[] constant(0)
  ROOT %t = (f32[1000]{0}, f32[]) tuple(%nw, %l)
}
"""


def test_temporaries_go_into_a_donated_arguments_buffer_between_its_reads_and_its_write():
    profile = liveness.simulate(DONATED)
    # w is donated to output 0 (nw). Its buffer is free after the copy wc reads it and
    # until nw is written; the gradient g lives in that gap (nw, an elementwise loop
    # fusion, may write over g where g dies), so only the copy wc (4,000 B) is a temporary.
    # The copy itself cannot go there: it is made while w is still being read.
    assert profile.temp_peak_bytes == 1000 * 4
    assert [b.instruction for b in profile.at_peak] == ["wc"]
    assert profile.outputs == ()  # nw is written into w's buffer
    assert [b.op_name for b in profile.arguments] == ["args[0]['fc']['kernel']", "args[3]"]


def test_unscheduled_or_entryless_text_is_refused():
    with pytest.raises(ValueError, match="scheduled"):
        liveness.simulate(CHAIN.replace("is_scheduled=true, ", ""))
    with pytest.raises(ValueError, match="ENTRY"):
        liveness.simulate("HloModule m, is_scheduled=true\n")


def test_operands_after_index_comments_are_read():
    instruction = hlo.parse_instruction(
        "ROOT %t = (f32[], f32[], f32[], f32[], f32[], f32[]) tuple(%a, %b, %c, %d, %e, /*index=5*/%f)"
    )
    assert instruction.operand_names() == ["a", "b", "c", "d", "e", "f"]


def test_profile_round_trips_through_json():
    profile = liveness.simulate(DONATED)
    assert liveness.LivenessProfile.from_dict(profile.to_dict()) == profile


ASYNC = """HloModule async, is_scheduled=true, entry_computation_layout={(f32[100]{0})->f32[800]{0}}

ENTRY %main (p: f32[100]) -> f32[800] {
  %p = f32[100]{0} parameter(0)
  %a = f32[100]{0} negate(%p)
  %ags = (f32[100]{0}, f32[800]{0}) all-gather-start(%a), replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
  %cs = (f32[100]{0}, f32[100]{0}, u32[]) copy-start(%a)
  %cd = f32[100]{0} copy-done(%cs)
  %agd = f32[800]{0} all-gather-done(%ags)
  %m = f32[100]{0} multiply(%cd, %cd)
  ROOT %r = f32[800]{0} add(%agd, %agd)
}
"""


def test_asynchronous_pairs_hold_their_operands_and_make_their_results_once():
    profile = liveness.simulate(ASYNC)
    # all-gather-start holds a (400 B) and makes the gathered 3,200 B; copy-start makes
    # the copy (400 B) and a 4-byte context; all-gather-done and copy-done add nothing.
    # Peak while the copy is in flight: a + gathered + copy + context; then the copy is
    # squared (m, 400 B) as a dies, which is no more
    assert profile.temp_peak_bytes == 400 + 3200 + 400 + 4
    assert {b.instruction for b in profile.at_peak} == {"a", "ags{1}", "cs{0}", "cs{2}"}
