"""The replayed schedule (`xla_cost.compiled.liveness`) counts the HBM only: an array a TPU program
keeps in its host's memory (``S(5)``, `xla_cost.compiled.shapes.HOST_SPACE`: a remat policy's
offloaded stack, which libtpu's ``memory_analysis`` counts apart, in ``host_temp_size_in_bytes``)
or on its chip (``S(1)``, its vector memory: a prefetch) holds none of the device memory's bytes.
A hand-written module as libtpu prints one (tiled layouts), its peak worked out by hand (f32: 4
bytes an element)."""

from __future__ import annotations

from xla_cost.compiled import liveness

N, ROWS = 256, 4  # a row's elements; the offloaded stack's rows
ROW = N * 4  # bytes of one f32 row
STACK = ROWS * ROW  # bytes of the stack in the host's memory

LAYOUT = f"(f32[{N}]{{0:T(256)}})->f32[{N}]{{0:T(256)}}"
OFFLOAD = f"""HloModule offload, is_scheduled=true, entry_computation_layout={{{LAYOUT}}}

ENTRY %main (p: f32[{N}]) -> f32[{N}] {{
  %p = f32[{N}]{{0:T(256)}} parameter(0), metadata={{op_name="args[0]"}}
  %stack = f32[{ROWS},{N}]{{1,0:T(8,128)S(5)}} custom-call(), custom_call_target="AllocateBuffer"
  %a = f32[{N}]{{0:T(256)}} negate(%p)
  %z = s32[] constant(0)
  %row = f32[1,{N}]{{1,0:T(8,128)}} reshape(%a)
  %written = f32[{ROWS},{N}]{{1,0:T(8,128)S(5)}} dynamic-update-slice(%stack, %row, %z, %z)
  %back = f32[1,{N}]{{1,0:T(8,128)}} dynamic-slice(%written, %z, %z), dynamic_slice_sizes={{1,{N}}}
  %prefetched = f32[{N}]{{0:T(256)S(1)}} copy(%p)
  %b = f32[{N}]{{0:T(256)}} reshape(%back)
  %c = f32[{N}]{{0:T(256)}} add(%b, %prefetched)
  ROOT %n = f32[{N}]{{0:T(256)}} negate(%c)
}}
"""


def test_arrays_outside_the_hbm_hold_none_of_its_bytes():
    profile = liveness.simulate(OFFLOAD)
    # in the HBM two rows at most at once: a and the row made from it; the row read back and its
    # reshape; that reshape and the sum. The stack (4 rows, in the host's memory) and the prefetched
    # copy (on the chip) add nothing, live as they are through the peak
    assert profile.temp_peak_bytes == 2 * ROW
    listed = {b.instruction for b in profile.at_peak}
    assert listed and not listed & {"stack", "written", "prefetched"}
    assert all(b.nbytes == ROW for b in profile.at_peak)
    assert [(b.instruction, b.nbytes) for b in profile.arguments] == [("p", ROW)]
    assert [(b.instruction, b.nbytes) for b in profile.outputs] == [("n", ROW)]
    assert profile.peak_bytes == ROW + ROW + 2 * ROW  # the argument, the output, the temporaries' peak
    assert STACK > profile.temp_peak_bytes  # counted as the HBM's, the stack alone would be the peak


def test_a_cached_replay_of_another_version_is_replayed_again(tmp_path, monkeypatch):
    import json

    import jax
    import jax.numpy as jnp

    from xla_cost.compiled import xla

    monkeypatch.setitem(xla._CACHE_STATE, "dir", str(tmp_path))  # as tests/step/test_phases.py does
    compiles = []
    real_compile = xla._compile
    monkeypatch.setattr(xla, "_compile", lambda *a, **k: compiles.append(1) or real_compile(*a, **k))
    args = (jax.ShapeDtypeStruct((8, 8), jnp.float32),)

    def program(x):
        return jnp.tanh(x @ x).sum()

    first = xla.compile_phase(program, args, executable=False, liveness=True)
    assert len(compiles) == 1 and first.liveness is not None
    assert xla.compile_phase(program, args, executable=False, liveness=True).liveness == first.liveness
    assert len(compiles) == 1  # read back with its replay
    (entry,) = (tmp_path / "analyses").iterdir()
    data = json.loads(entry.read_text())
    assert data["liveness_format"] == xla.LIVENESS_FORMAT
    entry.write_text(json.dumps({**data, "liveness_format": xla.LIVENESS_FORMAT - 1}))
    assert xla.compile_phase(program, args, executable=False).costs == first.costs  # the rest still read
    assert len(compiles) == 1
    again = xla.compile_phase(program, args, executable=False, liveness=True)  # its replay not: compiled again
    assert len(compiles) == 2 and again.liveness == first.liveness
