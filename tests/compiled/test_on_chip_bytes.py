"""A TPU kernel's bytes are those it moves to and from the chip's HBM (issue 51).

XLA's memory-space assignment on a TPU copies arrays into the chip's own memories ahead of
the kernels that read them (``copy-start`` and ``slice-start`` into ``S(1)``, a v5e's vector
memory, or ``S(3)``, a v4's CMEM: a small GPT's update program compiled for either moves most
of its operands so). Counted as HBM traffic, each such array was priced three times: read
from the HBM and written on the chip by the copy, then read by its kernel. The copy reads
it from the HBM once; what lies on the chip is not priced at the HBM's bandwidth.

Hand-written HLO, as libtpu prints it (deviceless v4 and v5e compiles of a GPT's grad and
update, jax 0.10.2, libtpu 0.0.52): an array prefetched into vector memory and added to
one in the HBM.
"""

from __future__ import annotations

from xla_cost.compiled import kernels
from xla_cost.compiled.shapes import device_memory_bytes, parse_shape, shape_bytes

ROWS, COLUMNS, F32 = 1024, 1024, 4
ARRAY = ROWS * COLUMNS * F32  # bytes of one f32[1024, 1024]
HBM = f"f32[{ROWS},{COLUMNS}]{{1,0:T(8,128)}}"
VMEM = f"f32[{ROWS},{COLUMNS}]{{1,0:T(8,128)S(1)}}"

PROGRAM = "\n".join([
    "HloModule prefetch",
    "",
    f"%fused_add (p0: f32[{ROWS},{COLUMNS}], p1: f32[{ROWS},{COLUMNS}]) -> f32[{ROWS},{COLUMNS}] {{",
    f"  %p0 = {VMEM} parameter(0)",
    f"  %p1 = {HBM} parameter(1)",
    f"  ROOT %sum = {HBM} add(%p0, %p1)",
    "}",
    "",
    f"ENTRY %main (x: f32[{ROWS},{COLUMNS}], y: f32[{ROWS},{COLUMNS}]) -> f32[{ROWS},{COLUMNS}] {{",
    f"  %x = {HBM} parameter(0)",
    f"  %y = {HBM} parameter(1)",
    f"  %copy-start = ({VMEM}, {HBM}, u32[]{{:S(2)}}) copy-start(%x)",
    f"  %copy-done = {VMEM} copy-done(%copy-start)",
    f"  ROOT %fusion = {HBM} fusion(%copy-done, %y), kind=kLoop, calls=%fused_add",
    "}",
])


def test_an_array_prefetched_on_the_chip_is_read_from_the_hbm_once():
    listed = {k.name: k for k in kernels.kernel_list(PROGRAM)}
    assert set(listed) == {"copy-start", "fusion"}
    assert listed["copy-start"].bytes == ARRAY  # x read from the HBM; its copy in vector memory not priced
    assert listed["fusion"].bytes == 2 * ARRAY  # y read and the sum written; x's copy read on the chip


def test_a_layout_names_its_memory_space():
    # a tiled layout in S(1) or S(3) is on a TPU's chip, a scalar's S(2) too; a GPU's host memory S(5), or a
    # memory space of an untiled layout, is the device's memory
    assert shape_bytes(parse_shape(VMEM)) == ARRAY and device_memory_bytes(parse_shape(VMEM)) == 0
    assert device_memory_bytes(parse_shape(VMEM.replace("S(1)", "S(3)"))) == 0
    assert device_memory_bytes(parse_shape("u32[]{:S(2)}")) == 0
    assert device_memory_bytes(parse_shape("f32[8]{0:S(5)}")) == 32
    assert device_memory_bytes(parse_shape("f32[8]{0:S(1)}")) == 32
    assert parse_shape(VMEM) == parse_shape(HBM)  # the same array wherever it lies
    assert device_memory_bytes(parse_shape(f"({VMEM}, {HBM}, u32[]{{:S(2)}})")) == ARRAY
