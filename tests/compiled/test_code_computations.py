"""A computation that runs as code of its own is read once however it is reached
(issue 49): `xla_cost.compiled.hlo.code_computations` and the kernels and bytes
`xla_cost.compiled.work.work_bytes` counts from it.

The body below negates 1,024 float32 elements: one kernel that reads 1,024 x 4
bytes and writes as many, 8,192 bytes a run. It runs twice in both programs,
so the program launches 2 kernels and moves 2 x 8,192 = 16,384 bytes; a body
listed twice would be counted 2 x 2 = 4 kernels and 32,768 bytes.
"""

from __future__ import annotations

from xla_cost.compiled import hlo, work

ELEMENTS = 1024
BODY_BYTES = 2 * ELEMENTS * 4  # the negate reads and writes 1,024 float32
RUNS = 2

_BODY = [
    '%body (p: f32[1024]) -> f32[1024] {',
    '  %p = f32[1024]{0} parameter(0)',
    '  ROOT %n = f32[1024]{0} negate(%p)',
    '}',
]


def test_a_computation_called_twice_by_one_computation_is_read_once():
    text = "\n".join(['HloModule m', *_BODY,
                      'ENTRY %main {',
                      '  %x = f32[1024]{0} parameter(0)',
                      '  %a = f32[1024]{0} call(%x), to_apply=%body',
                      '  ROOT %b = f32[1024]{0} call(%a), to_apply=%body',
                      '}'])
    module = hlo.parse_module(text)
    assert hlo.code_computations(module) == ["main", "body"]
    assert hlo.computation_runs(module)["body"].executions == RUNS  # the runs are counted there
    found = work.work_bytes(text)
    assert (found.kernels, found.other, found.matmul) == (RUNS, RUNS * BODY_BYTES, 0)  # 2, 16,384 B


def test_a_computation_reached_by_two_paths_is_read_once():
    text = "\n".join(['HloModule m', *_BODY,
                      '%left (p: f32[1024]) -> f32[1024] {',
                      '  %p = f32[1024]{0} parameter(0)',
                      '  ROOT %c = f32[1024]{0} call(%p), to_apply=%body',
                      '}',
                      '%right (p: f32[1024]) -> f32[1024] {',
                      '  %p = f32[1024]{0} parameter(0)',
                      '  ROOT %c = f32[1024]{0} call(%p), to_apply=%body',
                      '}',
                      'ENTRY %main {',
                      '  %x = f32[1024]{0} parameter(0)',
                      '  %a = f32[1024]{0} call(%x), to_apply=%left',
                      '  ROOT %b = f32[1024]{0} call(%a), to_apply=%right',
                      '}'])
    module = hlo.parse_module(text)
    names = hlo.code_computations(module)
    assert sorted(names) == ["body", "left", "main", "right"] and len(names) == len(set(names))
    assert hlo.computation_runs(module)["body"].executions == RUNS  # once through left, once through right
    found = work.work_bytes(text)
    assert (found.kernels, found.other, found.matmul) == (RUNS, RUNS * BODY_BYTES, 0)  # 2, 16,384 B
