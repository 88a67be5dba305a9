"""XLA's rematerialization, read from the optimized module and the compiler's log (`fit`'s guard)."""

from __future__ import annotations

import contextlib
import json
import pathlib
from types import SimpleNamespace

import jax.numpy as jnp
import pytest

from xla_cost import plugins
from xla_cost.compiled import compiler_log, hlo, xla

DATA = pathlib.Path(__file__).resolve().parents[2] / "reports" / "data"


def test_the_shortfall_line_of_a_real_h200_compile_is_read():
    # the H200's own compile of gpt2-small's bfloat16 Adam step at batch 146, as its log said it
    check = json.loads((DATA / "device_check_nvidia-h200_2026-11-26.json").read_text())
    line = check["fit"]["call_1_compiler_log"][0]
    assert compiler_log.remat_shortfall(line) == (107_027_860_402, 176_620_989_936)
    # several lines (overlapping compiles): the one that reached least far
    both = "\n".join(check["fit"]["call_1_compiler_log"])
    assert compiler_log.remat_shortfall(both) == (107_027_580_236, 228_135_038_224)
    assert compiler_log.remat_shortfall("I0000 hlo_rematerialization.cc:100] Rematerialized 12 instructions") is None


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


def _ran_and_did_not(answer: dict, check: dict) -> None:
    """The fit answer ran on the device and 1.25x of it ran out of memory there."""
    assert (check["model"], check["dtype"], check["optimizer"]) == (answer["model"], answer["dtype"], answer["optimizer"])
    assert check["fit_batch"]["batch"] == answer["batch_size"]
    assert check["fit_batch"]["ran"] and not check["fit_batch_x1.25"]["ran"]
    assert check["fit_batch_x1.25"]["batch"] == int(answer["batch_size"] * 1.25)
    assert "RESOURCE_EXHAUSTED" in check["fit_batch_x1.25"]["error"]


@pytest.mark.parametrize("answered, checked, probed", [
    # `xla-cost fit gpt2-small --target h200 --dtype bfloat16` (Adam) without a GPU, judged by the final
    # peak (reports/data/fit_gpt2-small_h200_2026-11-26-3.json), run on an H200 (-4.json); the next size
    # compiled there (a probe, -3.json) is over the allocator's limit
    ("fit_gpt2-small_h200_2026-11-26-3.json", "device_check_nvidia-h200_2026-11-26-4.json",
     "device_check_nvidia-h200_2026-11-26-3.json"),
    # the same for an H100 (-7.json: the answer and 1.25x it; -6.json, an earlier answer's check)
    ("fit_gpt2-small_h100_2026-11-26-3.json", "device_check_nvidia-h100-80gb-hbm3_2026-11-26-7.json", None),
])
def test_fits_answer_judged_by_the_final_peak_ran_on_a_real_gpu_and_one_and_a_quarter_times_it_did_not(
        answered, checked, probed):
    answer = json.loads((DATA / answered).read_text())
    check = json.loads((DATA / checked).read_text())["fit"]
    _ran_and_did_not(answer, check)
    # the deviceless program's rematerialization fell short at the answer or next to it, as the
    # device's did: a batch such a shortfall was counted out for under the earlier rule
    assert answer["remat_short_of"]
    if probed is not None:
        probe = {p["batch"]: p for p in json.loads((DATA / probed).read_text())["probe"]}
        assert probe[answer["next_size"]]["xla_peak_bytes"] > answer["limit"]


def test_fits_answer_ran_on_a_real_h100_and_one_and_a_quarter_times_it_did_not():
    # `xla-cost fit gpt2-small --target h100` (float32, Adam) without a GPU
    # (reports/data/fit_gpt2-small_h100_2026-11-26.json), then that batch and 1.25x it run on an
    # H100 (benchmarks/device_check.py, reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-2.json)
    answer = json.loads((DATA / "fit_gpt2-small_h100_2026-11-26.json").read_text())
    check = json.loads((DATA / "device_check_nvidia-h100-80gb-hbm3_2026-11-26-2.json").read_text())["fit"]
    assert (check["model"], check["dtype"], check["optimizer"]) == ("gpt2-small", answer["dtype"], answer["optimizer"])
    assert check["fit_batch"]["batch"] == answer["batch_size"]
    assert check["fit_batch"]["ran"] and not check["fit_batch_x1.25"]["ran"]
    assert check["fit_batch_x1.25"]["batch"] == int(answer["batch_size"] * 1.25)
    assert "RESOURCE_EXHAUSTED" in check["fit_batch_x1.25"]["error"]
    # the deviceless peak at the answer is at or above the H100's own (a conservative answer): the next
    # size, which fit counts out, compiled under the H100's limit (a probe, -3.json)
    assert check["deviceless"]["xla_peak_bytes"] >= check["fit_batch"]["xla_peak_bytes"]
    probed = json.loads((DATA / "device_check_nvidia-h100-80gb-hbm3_2026-11-26-3.json").read_text())
    assert [p["batch"] for p in probed["probe"]] == [answer["batch_size"] + 1]
    assert probed["probe"][0]["xla_peak_bytes"] < probed["fit"]["bytes_limit"]


def test_fits_bert_answer_ran_on_a_real_h100():
    # `xla-cost fit bert-base --target h100 --dtype bfloat16` (Adam) without a GPU
    # (reports/data/fit_bert-base_h100_2026-11-26.json), then that batch and 1.25x it run on an H100
    # (benchmarks/device_check.py, reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-4.json).
    # The answer ran; so did 1.25x it (not asserted: a miss is not held in place). The deviceless
    # program fit judged by (cuBLAS products, CompileTarget.memory_options) pads BERT's 30,522-word
    # vocabulary product to 30,528 columns, a 7.5 GB copy at this batch that the H100's own compile,
    # whose autotuner chose Triton and cuBLASLt kernels for it, does not make: its peak is above the
    # device's, the answer on the safe side.
    answer = json.loads((DATA / "fit_bert-base_h100_2026-11-26.json").read_text())
    check = json.loads((DATA / "device_check_nvidia-h100-80gb-hbm3_2026-11-26-4.json").read_text())["fit"]
    assert (check["model"], check["dtype"], check["optimizer"]) == ("bert-base", answer["dtype"], answer["optimizer"])
    assert check["fit_batch"]["batch"] == answer["batch_size"] and check["fit_batch"]["ran"]
    assert check["fit_batch"]["xla_peak_bytes"] <= check["bytes_limit"]
    assert check["deviceless"]["xla_peak_bytes"] >= check["fit_batch"]["xla_peak_bytes"]  # conservative
    padded = [w for w in answer["fits"]["largest_workspace"] if w["instruction"].startswith("loop_pad_fusion")]
    assert padded and padded[0]["shape"] == f"bf16[{answer['batch_size'] * 128},30528]"  # 128 tokens a sample


@pytest.mark.skipif(plugins.cuda_plugin() is None, reason="jax's CUDA plugin (pip install 'xla-cost[gpu]')")
@pytest.mark.parametrize("recomputed, short, compiles", [(0, None, 1), (5, None, 2), (0, (10, 20), 2)])
def test_a_gpu_targets_memory_is_compiled_again_with_library_products_where_it_recomputes(
        monkeypatch, recomputed, short, compiles):
    # the H200's own compile of gpt2-small at batch 130 (bfloat16, Adam) reached 154,824,624,052
    # bytes where the deviceless one with Triton products rematerialized under its limit; with
    # cuBLAS products the deviceless one reaches the same (CompileTarget.memory_options)
    log = (DATA / "device_check_nvidia-h200_2026-11-26-2_remat.log").read_text().splitlines()
    assert compiler_log.remat_shortfall(log[0])[1] == 154_824_624_052
    from xla_cost.analysis import programs
    from xla_cost.compiled import targets
    from xla_cost.timemodel import devices

    asked = []

    def compile_phase(lowered, compiler_options=None, **_):
        asked.append(dict(compiler_options or {}))
        memory = SimpleNamespace(rematerialized=recomputed if len(asked) == 1 else 0,
                                 remat_short_of=short if len(asked) == 1 else None)
        return SimpleNamespace(memory=memory)

    monkeypatch.setattr(programs.xla, "compile_phase", compile_phase)
    monkeypatch.setattr(programs, "memory_breakdown", lambda *a, **k: k["compiled"])
    workload = SimpleNamespace(phase_fn=lambda name, retrace=False: (lambda x: x * 2), phase_args=lambda name: (jnp.ones(4),),
                               tracing=contextlib.nullcontext, root_name="m", param_paths=())
    monkeypatch.setattr(programs, "constraints", lambda plan, w: contextlib.nullcontext())
    monkeypatch.setattr(programs, "placement", lambda: {})
    with targets.use(devices.target("h100")):
        programs.step_memory(workload, None, True)
    assert len(asked) == compiles
    assert asked[0] == dict(xla.COMPILER_OPTIONS)
    if compiles == 2:
        assert asked[1] == {**xla.COMPILER_OPTIONS, "xla_gpu_enable_triton_gemm": False}
    assert devices.target("tpu-v5e:2x2").memory_options == {}
