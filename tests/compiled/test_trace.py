"""The trace reader: op events from a profiler trace, each execution's wall clock
shared out over its instructions, and what each instruction stands for."""

from __future__ import annotations

import gzip
import json

import jax
import jax.numpy as jnp
import pytest

from xla_cost.compiled import hlo, trace
from xla_cost.compiled.trace import OpEvent, Source
from xla_cost.count.attribution import classify_pass


def _event(op, start, end, thread=1, run="a"):
    return OpEvent(op, float(start), float(end), thread, run)


def test_wall_shares_share_overlaps_give_nested_ops_their_time_and_count_idle():
    events = sorted([
        # execution a, from 0 us to the next one's first op at 40 us
        _event("x", 0, 10, thread=1), _event("y", 5, 15, thread=2),   # overlap 5..10 on two threads
        _event("z", 20, 30, thread=1), _event("w", 22, 26, thread=1),  # w runs inside z
        # execution b, 40 to 60; c only closes b's period
        _event("x", 40, 50, run="b"), _event("x", 60, 61, run="c"),
    ], key=lambda e: e.start_us)
    a, b = trace.wall_shares(events)
    us = 1e-6
    # x alone 0..5 (5), shared with y 5..10 (2.5 each), y alone 10..15 (5): x 7.5, y 7.5;
    # z 20..22 and 26..30 (6), w 22..26 (4); nothing 15..20 and 30..40: idle 15
    assert a.run == "a" and a.period_s == pytest.approx(40 * us)
    assert a.seconds == pytest.approx({"x": 7.5 * us, "y": 7.5 * us, "z": 6 * us, "w": 4 * us})
    assert a.idle_s == pytest.approx(15 * us)
    assert a.busy_s + a.idle_s == pytest.approx(a.period_s)  # the shares add up to the period
    assert a.runs == {"x": 1, "y": 1, "z": 1, "w": 1}
    assert (b.run, b.period_s, b.idle_s) == ("b", pytest.approx(20 * us), pytest.approx(10 * us))
    assert b.seconds == pytest.approx({"x": 10 * us})


def test_wall_shares_need_a_next_execution_to_close_a_period():
    assert trace.wall_shares([_event("x", 0, 10)]) == ()
    assert trace.wall_shares([]) == ()


def test_read_events_keeps_complete_hlo_op_events_of_one_module(tmp_path):
    events = [
        {"ph": "M", "pid": 1, "name": "thread_name", "args": {"name": "python"}},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 5.0, "dur": 2.5, "name": "dot",
         "args": {"hlo_op": "dot", "hlo_module": "jit_step", "run_id": "12"}},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 1.0, "dur": 1.0, "name": "fusion",
         "args": {"hlo_op": "fusion", "hlo_module": "jit_step", "run_id": "12"}},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 9.0, "dur": 1.0, "name": "other",
         "args": {"hlo_op": "add", "hlo_module": "jit_other", "run_id": "3"}},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 9.0, "dur": 0.1, "name": "end: dot", "args": {}},
    ]
    path = tmp_path / "host.trace.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump({"displayTimeUnit": "ns", "traceEvents": events}, handle)
    found = trace.read_events(str(path), "jit_step")
    assert found == (OpEvent("fusion", 1.0, 2.0, (1, 7), "12"), OpEvent("dot", 5.0, 7.5, (1, 7), "12"))
    assert len(trace.read_events(str(path))) == 3  # every module


HLO = r"""HloModule jit_train_step, is_scheduled=true

%fused_update (param_0: f32[4,3], param_1: f32[4,3]) -> f32[4,3] {
  %param_0 = f32[4,3]{1,0} parameter(0)
  %param_1 = f32[4,3]{1,0} parameter(1)
  %integer_pow.1 = f32[4,3]{1,0} multiply(%param_1, %param_1), metadata={op_name="jit(train_step)/integer_pow"}
  ROOT %add.1 = f32[4,3]{1,0} add(%param_0, %integer_pow.1), metadata={op_name="jit(train_step)/add"}
}

%fused_transpose (param_0: f32[8,3]) -> f32[3,8] {
  %param_0 = f32[8,3]{1,0} parameter(0)
  ROOT %transpose.1 = f32[3,8]{1,0} transpose(%param_0), dimensions={1,0}, metadata={op_name="jit(train_step)/jvp(Net)/fc1/dot_general"}
}

ENTRY %main (p: f32[4,3], m: f32[4,3], x: f32[8,4]) -> (f32[4,3], f32[4,3], f32[8,3], f32[3,3], f32[4,3]) {
  %p = f32[4,3]{1,0} parameter(0), metadata={op_name="params[\'fc1\'][\'kernel\']"}
  %m = f32[4,3]{1,0} parameter(1), metadata={op_name="opt_state[0].mu[\'fc1\'][\'kernel\']"}
  %x = f32[8,4]{1,0} parameter(2), metadata={op_name="batch[0]"}
  %y = f32[8,3]{1,0} dot(%x, %p), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(train_step)/jvp(Net)/fc1/dot_general"}
  %g = f32[8,3]{1,0} multiply(%y, %y), metadata={op_name="jit(train_step)/transpose(jvp(Net))/fc2/mul"}
  %t = f32[4,8]{1,0} transpose(%x), dimensions={1,0}
  %w = f32[4,3]{1,0} dot(%t, %g), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %u = f32[4,3]{1,0} fusion(%m, %w), kind=kLoop, calls=%fused_update, metadata={op_name="jit(train_step)/add"}
  %n = f32[8,3]{1,0} negate(%g)
  %k = f32[8,3]{1,0} add(%n, %n), metadata={op_name="jit(train_step)/sub"}
  %v = f32[8,3]{1,0} negate(%g)
  %f = f32[8,3]{1,0} add(%v, %y), metadata={op_name="jit(train_step)/jvp(Net)/fc2/add"}
  %c = f32[4,3]{1,0} copy(%p)
  %tr = f32[3,8]{1,0} fusion(%y), kind=kLoop, calls=%fused_transpose
  %bk = f32[3,3]{1,0} dot(%tr, %g), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(train_step)/transpose(jvp(Net))/fc2/dot_general"}
  ROOT %r = (f32[4,3]{1,0}, f32[4,3]{1,0}, f32[8,3]{1,0}, f32[3,3]{1,0}, f32[8,3]{1,0}) tuple(%u, %c, %f, %bk, %k)
}
"""

FORWARD_FC1 = "jit(train_step)/jvp(Net)/fc1/dot_general"
BACKWARD_FC2 = "jit(train_step)/transpose(jvp(Net))/fc2/mul"
KERNEL, MU = "params['fc1']['kernel']", "opt_state[0].mu['fc1']['kernel']"


def test_instruction_sources_name_what_xla_made_after_its_neighbours():
    sources = trace.instruction_sources(hlo.parse_module(HLO))
    assert sources["y"] == Source(FORWARD_FC1, reads=("batch[0]", KERNEL))  # its own metadata
    # a weight gradient XLA rewrote, without a name: made from a backward value (g), read by
    # the optimizer (u's integer_pow): a matrix product there is the gradient's last step,
    # named after its input, its row what its reader reads (fc1's optimizer state)
    assert sources["w"] == Source(BACKWARD_FC2, inferred=True, reads=(MU,))
    # the layout transpose only moves data: part of what reads it (the gradient), with its reads
    assert sources["t"] == Source(BACKWARD_FC2, inferred=True, reads=(MU,))
    # plain arithmetic at that boundary (backward in, update out) is the update's
    assert sources["n"] == Source("jit(train_step)/sub", inferred=True)
    # a value is made after its inputs: read by a forward op, made from a backward one,
    # it is the backward op's
    assert sources["v"] == Source(BACKWARD_FC2, inferred=True)
    # a transpose keeping its producer's (forward) name is part of its backward reader
    assert sources["tr"] == Source("jit(train_step)/transpose(jvp(Net))/fc2/dot_general", inferred=True)
    # a copy of an argument into the results: nothing names it
    assert sources["c"] == Source("", reads=(KERNEL,))
    # the optimizer's fusion reads the optimizer state: its argument's name, unescaped
    assert sources["u"] == Source("jit(train_step)/add", reads=(MU,))
    assert "p" not in sources and "r" not in sources  # parameters and tuples run no code


def test_instruction_bytes_are_operands_and_result():
    sizes = trace.instruction_bytes(hlo.parse_module(HLO))
    # y = x @ p: x f32[8,4] + p f32[4,3] read, f32[8,3] written: (32 + 12 + 24) * 4 bytes
    assert sizes["y"] == (32 + 12 + 24) * 4
    # the fusion reads m and w (12 + 12 floats) and writes 12
    assert sizes["u"] == (12 + 12 + 12) * 4


def test_module_name():
    assert trace.module_name(HLO) == "jit_train_step"
    assert trace.module_name("no module here") is None


def test_record_gives_every_run_of_every_instruction_of_a_program():
    program = jax.jit(lambda a: jnp.tanh(a @ a) @ a)
    x = jnp.ones((64, 64), jnp.float32)
    compiled = program.lower(x).compile()
    text = compiled.as_text()
    compiled(x).block_until_ready()

    def run():
        for _ in range(3):
            out = compiled(x)
        out.block_until_ready()

    events = trace.record(run, trace.module_name(text))
    names = {i.name for c in hlo.parse_module(text).computations.values() for i in c.instructions}
    assert events and {e.op for e in events} <= names  # every event is an instruction of the program
    assert len({e.run for e in events}) == 3  # one run_id per execution
    shares = trace.wall_shares(events)
    assert len(shares) == 2  # the last execution closes the second's period
    for run in shares:
        assert run.busy_s + run.idle_s == pytest.approx(run.period_s)


def test_a_copy_of_a_donated_argument_is_the_updates():
    # the same program with p donated (its buffer taken by the first result): XLA copies p
    # so that the update can write the new value in place while the old one is still read
    donated = HLO.replace("HloModule jit_train_step, is_scheduled=true",
                          "HloModule jit_train_step, is_scheduled=true, input_output_alias={ {0}: (0, {}, "
                          "may-alias) }, entry_computation_layout={(f32[4,3]{1,0})->f32[4,3]{1,0}}")
    module = hlo.parse_module(donated)
    assert module.aliased_parameters == frozenset({0})
    sources = trace.instruction_sources(module)
    assert sources["c"] == Source(trace.DONATED_COPY, inferred=True, reads=(KERNEL,))
    # no pass of autodiff names it: the update's, on the row of the module whose argument it copies
    assert classify_pass(sources["c"].op_name) is None
    assert hlo.parse_module(HLO).aliased_parameters == frozenset()  # nothing donated: a plain copy


DONATED = r"""HloModule jit_train_step, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }

ENTRY %main (p: f32[4,3], g: f32[4,3], x: f32[8,4]) -> (f32[4,3], f32[4,3], f32[8,3]) {
  %p = f32[4,3]{1,0} parameter(0), metadata={op_name="params[\'fc1\'][\'kernel\']"}
  %g = f32[4,3]{1,0} parameter(1), metadata={op_name="grads[\'fc1\'][\'kernel\']"}
  %x = f32[8,4]{1,0} parameter(2), metadata={op_name="batch[0]"}
  %keep = f32[4,3]{1,0} copy(%p)
  %layout = f32[4,3]{0,1} copy(%p)
  %y = f32[8,3]{1,0} dot(%x, %layout), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(train_step)/jvp(Net)/fc1/dot_general"}
  %new = f32[4,3]{1,0} subtract(%p, %g), metadata={op_name="jit(train_step)/sub"}
  ROOT %r = (f32[4,3]{1,0}, f32[4,3]{1,0}, f32[8,3]{1,0}) tuple(%new, %keep, %y)
}
"""


def test_only_a_same_layout_copy_of_a_donated_argument_is_the_updates():
    module = hlo.parse_module(DONATED)
    assert module.aliased_parameters == frozenset({0})  # p's buffer is the first result's
    sources = trace.instruction_sources(module)
    # f32[4,3]{1,0}, as p: the old value kept while the update writes p's buffer
    assert sources["keep"] == Source(trace.DONATED_COPY, inferred=True, reads=(KERNEL,))
    # a copy into the other layout ({0,1}: the weight transposed in memory) is a layout change
    # for its reader, not copy insertion keeping the old value: part of the forward product
    # that reads it, with that product's reads
    assert sources["layout"] == Source(FORWARD_FC1, inferred=True, reads=("batch[0]", KERNEL))
    assert classify_pass(sources["layout"].op_name) == "forward"
    assert sources["new"] == Source("jit(train_step)/sub", reads=(KERNEL, "grads['fc1']['kernel']"))
