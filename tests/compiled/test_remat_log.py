"""XLA's rematerialization, read from the optimized module and the compiler's log (`fit`'s guard)."""

from __future__ import annotations

import json
import pathlib

from xla_cost.compiled import hlo, xla

DATA = pathlib.Path(__file__).resolve().parents[2] / "reports" / "data"


def test_the_shortfall_line_of_a_real_h200_compile_is_read():
    # the H200's own compile of gpt2-small's bfloat16 Adam step at batch 146, as its log said it
    check = json.loads((DATA / "device_check_nvidia-h200_2026-11-26.json").read_text())
    line = check["fit"]["call_1_compiler_log"][0]
    assert xla.remat_shortfall(line) == (107_027_860_402, 176_620_989_936)
    # several lines (overlapping compiles): the one that reached least far
    both = "\n".join(check["fit"]["call_1_compiler_log"])
    assert xla.remat_shortfall(both) == (107_027_580_236, 228_135_038_224)
    assert xla.remat_shortfall("I0000 hlo_rematerialization.cc:100] Rematerialized 12 instructions") is None


def test_remat_clones_are_counted_by_their_names():
    text = "\n".join([
        "ENTRY %main {",
        "  %fusion.3 = f32[8]{0} fusion(f32[8]{0} %p), kind=kLoop, calls=%fused",
        "  %fusion.3.remat = f32[8]{0} fusion(f32[8]{0} %p), kind=kLoop, calls=%fused",
        "  %copy.remat2 = f32[8]{0} copy(f32[8]{0} %fusion.3.remat)",
        "  ROOT %add.remat3 = f32[8]{0} add(f32[8]{0} %copy.remat2, f32[8]{0} %fusion.3)",
        "}",
    ])
    # three definitions made by the pass; the uses of their names are not counted again
    assert hlo.remat_clones(text) == 3
    assert hlo.remat_clones(text.replace(".remat", ".kept")) == 0


def test_a_compile_without_memory_pressure_rematerializes_nothing():
    import jax
    import jax.numpy as jnp

    phase = xla.compile_phase(lambda x: jnp.tanh(x) * 2, (jax.ShapeDtypeStruct((64,), jnp.float32),),
                              executable=False)
    assert phase.memory.rematerialized == 0 and phase.memory.remat_short_of is None
