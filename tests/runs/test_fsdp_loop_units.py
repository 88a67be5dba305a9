"""ZeRO-3 units of a scanned stack (issue 51): a loop's gather is one unit a trip.

A scanned stack of blocks is one module whose body runs once a layer; its parameters are gathered
inside the loop, one layer's each trip (MaxText's FSDP runs: a 32-layer 32B model's forward program
compiled for a v5e has its all-gather in a loop body run 32 times). Counted as one unit of every
trip's bytes, the whole stack was gathered before its forward pass behind the embedding's compute
alone; each trip is a unit, as an unrolled stack's blocks are. Hand-made rows (no compile).
"""

from __future__ import annotations

from types import SimpleNamespace

from xla_cost.analysis.report import Collective
from xla_cost.compiled.kernels import Kernel
from xla_cost.runs.layouts import fsdp_units

LAYERS, FSDP = 4, 8
QKV, OUT, EMBED, NORM = 3 * 64 * 64 * 2, 64 * 64 * 2, 256 * 64 * 2, 64 * 2  # bytes gathered, bfloat16


def _report(loop_trips: int | None) -> SimpleNamespace:
    rows = [Collective("all-gather", ("fsdp",), FSDP, EMBED, 1, "wte"),
            Collective("all-gather", ("fsdp",), FSDP, QKV, LAYERS, "h/attn/c_attn"),
            Collective("all-gather", ("fsdp",), FSDP, OUT, 2 * LAYERS, "h/attn/c_proj"),  # twice a trip
            Collective("all-gather", ("fsdp",), FSDP, NORM, 2, "ln_f")]  # twice, outside any loop
    kernels = [] if loop_trips is None else [
        Kernel(name="all-gather.1", category="collective", kind="all-gather", opcode="all-gather",
               computation="body", op_name="", bytes=QKV, executions=loop_trips)]
    forward = SimpleNamespace(communication=rows, kernel_list=kernels)
    return SimpleNamespace(mesh={"fsdp": FSDP}, phases={"forward": forward}, sharding={}, parameters=0)


def test_a_loops_gathers_are_a_unit_each_trip():
    units = fsdp_units(_report(LAYERS))
    per_trip = QKV + 2 * OUT  # one layer's gathers
    assert units == (("wte", EMBED), *((f"h#{trip}", per_trip) for trip in range(LAYERS)), ("ln_f", 2 * NORM))
    assert sum(nbytes for _, nbytes in units) == EMBED + LAYERS * per_trip + 2 * NORM  # every byte, once


def test_without_a_loop_a_module_is_one_unit():
    # no gather in a loop body (an unrolled program, or no kernel list): each module one unit, as before
    assert fsdp_units(_report(None)) == (("wte", EMBED), ("h", LAYERS * (QKV + 2 * OUT)), ("ln_f", 2 * NORM))
