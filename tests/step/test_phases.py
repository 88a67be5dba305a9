"""The declared phases, and what makes the analyzer fast without changing a figure:
train_step derived from grad + update, the lowest backend optimization level,
one trace per program, JAX's persistent compilation cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost.step import phases
from xla_cost.compiled import xla
from xla_cost.zoo.resnet import ResNet
from xla_cost.zoo import build_model, example_inputs

from tests import custom_models as M
from tests.formulas import conv_net_params


# ------------------------------------------------------------------ declarations


def test_phases_are_declared_once_in_report_order():
    assert xla_cost.PHASES == phases.NAMES == ("forward", "backward", "grad", "update", "train_step")
    assert phases.phase("backward").formula_text == "grad - forward"
    assert phases.phase("train_step").formula_text == "grad + update"
    assert [p.name for p in phases.programs()] == ["forward", "grad", "update"]
    assert [p.name for p in phases.programs(exact=True)] == ["forward", "grad", "update", "train_step"]
    assert [p.name for p in phases.derived()] == ["backward", "train_step"]
    assert xla_cost.COMPILED_PHASES == ("forward", "grad", "update", "train_step")


def test_a_phase_needs_a_program_or_a_formula():
    with pytest.raises(ValueError, match="needs a program, a formula or both"):
        phases.Phase("nothing", "no way to get it")
    with pytest.raises(ValueError, match="needs its arguments"):
        phases.Phase("half", "a program without arguments", program="forward")
    with pytest.raises(KeyError, match="Expected a phase in forward, backward"):
        phases.phase("sideways")


def test_combine_is_unknown_when_a_term_is():
    assert phases.combine({"grad": 1, "forward": -1}, {"grad": 10, "forward": 3}) == 7
    assert phases.combine({"grad": 1, "forward": -1}, {"grad": 10, "forward": None}) is None


# ------------------------------------------------------------------ train_step


@pytest.fixture(scope="module")
def step_reports():
    model, inputs = build_model("conv_net", image_size=32), example_inputs("conv_net", 2, image_size=32)
    derived = xla_cost.analyze(model, inputs, optimizer="adam")
    exact = xla_cost.analyze(model, inputs, optimizer="adam", exact_train_step=True)
    return derived, exact


def test_train_step_is_grad_plus_update_by_default(step_reports):
    derived, _ = step_reports
    p = derived.phases
    step = p["train_step"]
    for key in ("flops", "xla_flops", "jaxpr_flops", "transcendentals", "bytes_accessed"):
        assert getattr(step, key) == getattr(p["grad"], key) + getattr(p["update"], key), key
    assert step.memory == xla_cost.MemoryStats(None, None, None)  # not a program: unknown
    assert derived.to_dict()["sources"]["train_step"]["derivation"] == "grad + update"
    assert derived.to_dict()["sources"]["backward"]["derivation"] == "grad - forward"
    assert derived.to_dict()["sources"]["grad"]["derivation"] == "compiled"
    assert any("exact_train_step=True" in n for n in derived.notes)


def test_exact_train_step_is_compiled_and_close_to_the_sum(step_reports):
    derived, exact = step_reports
    step = exact.phases["train_step"]
    assert exact.to_dict()["sources"]["train_step"]["derivation"] == "compiled"
    # its arguments (float32 but the int32 labels and count): the parameters and Adam's two moments, Adam's
    # step count, the images (2, 32, 32, 3) and their 2 labels
    assert step.memory.argument_bytes == 4 * 3 * conv_net_params() + 4 + 4 * 2 * 32 * 32 * 3 + 4 * 2
    assert step.memory.temp_bytes is not None
    # Every other phase is the same program either way.
    for name in ("forward", "backward", "grad", "update"):
        assert exact.phases[name] == derived.phases[name], name
    # XLA fuses across the grad/update boundary in the one program: its FLOP
    # differ from the sum by a few elementwise operations (measured 8e-8 here),
    # the jaxpr's not at all (the same equations).
    assert step.jaxpr_flops == derived.phases["train_step"].jaxpr_flops
    assert step.flops == pytest.approx(derived.phases["train_step"].flops, rel=1e-5)


# ------------------------------------------------------------------ optimization level


def _compiled_at_both_levels(workload):
    out = {}
    for phase in phases.programs(exact=True):
        with workload.tracing():
            traced = jax.jit(workload.phase_fn(phase.name)).trace(*workload.phase_args(phase.name))
        out[phase.name] = (
            xla.compile_phase(traced),
            xla.compile_phase(traced, compiler_options=xla.COMPILER_OPTIONS),
        )
    return out


@pytest.mark.parametrize(
    "model, inputs",
    [
        # loop-free, with BatchNorm state, max pooling and a strided shortcut: two stages of one basic block
        (lambda: ResNet(stage_sizes=(1, 1), bottleneck=False, num_classes=10, image_size=32),
         lambda: jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.float32)),
        # scanned layer group (a while loop in the HLO)
        (lambda: M.ScannedMLP(), lambda: jax.ShapeDtypeStruct((4, 8), jnp.float32)),
    ],
    ids=["resnet_two_blocks", "scanned_mlp"],
)
def test_lowest_optimization_level_gives_identical_figures(model, inputs):
    workload, _ = xla_cost.build_workload(model(), inputs(), optimizer="adam")
    for name, (default, lowest) in _compiled_at_both_levels(workload).items():
        assert lowest.costs == default.costs, name  # flops, transcendentals, bytes
        assert lowest.memory == default.memory, name  # argument, output, temp bytes


def test_a_gpu_targets_analysed_program_is_the_one_it_would_run():
    # the analysed programs' options (ptxas at -O0 too) change the binaries only: a GPU's grad program has the same
    # costs, memory, kernels and buffers live at its peak as compiled with the defaults
    from xla_cost.compiled import targets
    from xla_cost.timemodel.devices import target

    small = {"n_layer": 1, "d_model": 64, "n_head": 2, "seq_len": 16, "vocab_size": 128}
    workload, _ = xla_cost.build_workload(build_model("gpt2-small", **small), example_inputs("gpt2-small", 2, **small),
                                          optimizer="sgd")
    with workload.tracing():
        traced = jax.jit(workload.phase_fn("grad")).trace(*workload.phase_args("grad"))
    with targets.use(target("h100")):
        default, analysed = (xla.compile_phase(traced, compiler_options=options, executable=False, liveness=True)
                             for options in (None, xla.COMPILER_OPTIONS))
    assert analysed.kernel_list and analysed.kernel_list == default.kernel_list
    assert (analysed.costs, analysed.memory, analysed.liveness) == (default.costs, default.memory, default.liveness)


def test_analysed_programs_compile_at_the_lowest_level(monkeypatch):
    seen = []
    original = xla.compile_phase

    def spy(program, args=(), *, compiler_options=None, executable=True):
        seen.append(compiler_options)
        return original(program, args, compiler_options=compiler_options, executable=executable)

    monkeypatch.setattr(xla, "compile_phase", spy)
    inputs = jax.ShapeDtypeStruct((2, 1), jnp.float32)
    xla_cost.analyze(build_model("one_net"), inputs, optimizer="sgd")
    assert seen == [xla.COMPILER_OPTIONS] * 3  # forward, grad, update
    seen.clear()
    xla_cost.analyze(build_model("one_net"), inputs, optimizer="sgd", timed=True)
    assert seen == [None] * 3  # programs that run are compiled as they would run


def test_a_handed_program_is_taken_and_a_program_that_will_not_run_is_not_kept():
    args = (jax.ShapeDtypeStruct((8, 8), jnp.float32),)

    def program(x):
        return jnp.tanh(x @ x).sum()

    kept = xla.compile_phase(program, args)  # to run: its executable comes back
    assert kept.executable is not None
    handed = [jax.jit(program).lower(*args)]
    taken = xla.compile_phase(handed, compiler_options=xla.COMPILER_OPTIONS, executable=False)
    assert handed == [] and taken.executable is None  # emptied; nothing kept that will not run
    assert (taken.costs, taken.memory) == (kept.costs, kept.memory)
    # 8x8 @ 8x8: 2*8^3 FLOP, 64 tanh, 63 adds of the sum
    assert taken.costs.flops == 2 * 8**3 + 63 and taken.costs.transcendentals == 64


def test_run_programs_hands_the_counts_over_while_the_last_compile_runs():
    from xla_cost.analysis import programs

    workload, _ = xla_cost.build_workload(build_model("one_net"), jax.ShapeDtypeStruct((2, 1), jnp.float32),
                                          optimizer="sgd")
    declared = phases.programs()
    given = []
    found = programs.run_programs(workload, declared, compiled=True, for_timing=False,
                                  meanwhile=lambda counted: given.append(dict(counted)))
    assert len(given) == 1 and list(given[0]) == [p.name for p in declared]
    assert all(given[0][name] is found[name].counted for name in given[0])  # the counts the programs keep
    assert all(program.compiled is not None and program.compiled.executable is None for program in found.values())


# ------------------------------------------------------------------ the jaxpr's bytes


def test_jaxpr_counter_reports_the_unfused_bytes_estimate():
    # A bias-free dense layer's forward: x (B, I) @ w (I, O) reads B*I + I*O and
    # writes B*O float32 values; the loss adds its own reads and writes.
    b, i, o = 4, 8, 16
    counted = xla_cost.count_function(
        lambda x, w: x @ w,
        jax.ShapeDtypeStruct((b, i), jnp.float32), jax.ShapeDtypeStruct((i, o), jnp.float32),
    )
    assert counted.total.bytes_accessed == 4 * (b * i + i * o + b * o)
    report = xla_cost.analyze(M.ScannedMLP(), jax.ShapeDtypeStruct((4, 8), jnp.float32),
                              optimizer="sgd", counter="jaxpr")
    for name in xla_cost.PHASES:
        p = report.phases[name]
        assert p.bytes_accessed is None and p.jaxpr_bytes_accessed > 0, name
    p = report.phases
    assert p["backward"].jaxpr_bytes_accessed == p["grad"].jaxpr_bytes_accessed - p["forward"].jaxpr_bytes_accessed
    assert report.to_dict()["jaxpr_bytes_accessed"]["forward"] == p["forward"].jaxpr_bytes_accessed


# ------------------------------------------------------------------ no names before 0.2


def test_the_pre_release_switch_names_are_gone_and_an_unknown_keyword_is_refused():
    # compile= and time= (they shadowed builtins) were renamed counter= and timed= before 0.1 shipped:
    # an alias is no part of a 0.1 API, so Python refuses them as any unknown keyword
    inputs = jax.ShapeDtypeStruct((2, 1), jnp.float32)
    for old in ("compile", "time", "compiled"):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{old}'"):
            xla_cost.analyze(build_model("one_net"), inputs, optimizer="sgd", **{old: False})
    with pytest.raises(xla_cost.InputError, match="counter one of xla, jaxpr"):
        xla_cost.analyze(build_model("one_net"), inputs, optimizer="sgd", counter="hlo")


# ------------------------------------------------------------------ the compilation cache

_CHILD = r"""
import json, sys
import jax, jax.numpy as jnp
import xla_cost
from xla_cost.zoo import build_model
if sys.argv[1] != "-":
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
report = xla_cost.analyze(build_model("one_net"), jax.ShapeDtypeStruct((2, 1), jnp.float32),
                          optimizer="adam")
data = report.to_dict()
print(json.dumps({"dir": jax.config.jax_compilation_cache_dir, "flops": data["flops"],
                  "bytes": data["bytes_accessed"], "memory": data["memory"]}))
"""


def _child(env_extra, user_dir="-"):
    env = {k: v for k, v in os.environ.items() if k != "XLA_COST_NO_CACHE"}  # on unless asked
    env = {**env, "JAX_PLATFORMS": "cpu", **env_extra}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, user_dir], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _entries(cache):
    # JAX keeps one "-cache" file per executable (beside "-atime" files and a lock).
    return sorted(name for name in os.listdir(cache) if name.endswith("-cache"))


def test_compilation_cache_is_on_by_default_and_gives_the_same_figures(tmp_path):
    cache = tmp_path / "cache"
    first = _child({"XLA_COST_CACHE_DIR": str(cache)})
    entries = _entries(cache)
    # forward, grad and update are compiled only to be analysed: their analyses are cached,
    # read back without an executable, and JAX's cache is not given the executables
    assert first["dir"] == str(cache) and entries == []
    analyses = sorted(os.listdir(cache / "analyses"))
    assert len(analyses) == 3 and all(name.endswith(".json") for name in analyses)
    second = _child({"XLA_COST_CACHE_DIR": str(cache)})
    assert _entries(cache) == entries and sorted(os.listdir(cache / "analyses")) == analyses
    assert second == first  # every FLOP, byte and memory figure


def test_compilation_cache_off_and_a_users_own_directory(tmp_path):
    off = _child({"XLA_COST_CACHE_DIR": str(tmp_path / "unused"), "XLA_COST_NO_CACHE": "1"})
    assert off["dir"] is None and not (tmp_path / "unused").exists()
    mine = tmp_path / "mine"
    own = _child({"XLA_COST_CACHE_DIR": str(tmp_path / "unused")}, user_dir=str(mine))
    assert own["dir"] == str(mine)  # used as configured (JAX's own thresholds apply)
    assert not (tmp_path / "unused").exists()


def test_cli_exact_train_step_and_no_cache(capsys):
    from xla_cost.cli import main

    code = main(["analyze", "one_net", "--batch-size", "2", "--exact-train-step", "--no-cache",
                 "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["sources"]["train_step"]["derivation"] == "compiled"
    xla.use_compilation_cache(True)  # as the other tests run it (off: tests/conftest.py)


def test_analyses_cache_reads_back_and_survives_a_corrupt_entry(tmp_path, monkeypatch):
    monkeypatch.setitem(xla._CACHE_STATE, "dir", str(tmp_path))
    args = (jax.ShapeDtypeStruct((8, 8), jnp.float32),)

    def program(x):
        return jnp.tanh(x @ x).sum()

    compiles = []
    real_compile = xla._compile
    monkeypatch.setattr(xla, "_compile", lambda *a, **k: compiles.append(1) or real_compile(*a, **k))
    first = xla.compile_phase(program, args, executable=False)
    assert len(compiles) == 1 and first.executable is None  # compiled (nothing cached yet), not kept
    (entry,) = (tmp_path / "analyses").iterdir()
    second = xla.compile_phase(program, args, executable=False)
    assert len(compiles) == 1 and (second.costs, second.memory) == (first.costs, first.memory)
    # 8x8 @ 8x8: 2*8^3 FLOP, 64 tanh, 63 adds of the sum
    assert second.costs.flops == 2 * 8**3 + 63 and second.costs.transcendentals == 64
    entry.write_text("{not json")
    third = xla.compile_phase(program, args, executable=False)
    assert len(compiles) == 2 and third.costs == first.costs
    # another compiler option is another entry
    xla.compile_phase(program, args, compiler_options=xla.COMPILER_OPTIONS, executable=False)
    assert len(list((tmp_path / "analyses").iterdir())) == 2
