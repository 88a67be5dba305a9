"""The CPU proxy beside the target's own program (issue 31): `xla_cost.compare`,
``analyze(..., compare_cpu=True)``, ``--compare-cpu`` and the page ``targets``.

OneNet (seed 001: fc1 1 -> 4096, fc2 4096 -> 128, fc3 128 -> 10) at batch 2,
Adam, compiled for the CPU and, deviceless, for an H100 (jax's CUDA plugin) and
a TPU v5e chip (libtpu). The rules that name the reasons are checked on rows
built here, each with the figures that do or do not support it.
"""

from __future__ import annotations

import csv
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import pandas as pd
import pytest
from flax import nnx

import xla_cost
from xla_cost import plugins
from xla_cost.analysis.compare import (
    ADDED_WORK, FIGURES, KERNEL_CHANGE, PhaseComparison, TargetComparison, comparison_frame, explain,
)
from xla_cost.errors import InputError
from xla_cost.study.write import write_report
from xla_cost.zoo import build_model, example_inputs

from tests import formulas as F
from tests.refusals import one_line_refusal

B = 2
N_IN = 1  # OneNet's single input feature
needs_plugins = pytest.mark.skipif(plugins.cuda_plugin() is None or not plugins.has_libtpu(),
                                   reason="the gpu and tpu extras (jax's CUDA plugin, libtpu) are not installed")


# The CLI's comparison compiles the fixtures' OneNet programs again, for the H100 and the CPU:
# each compiled once in the module, its kernels built once (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("module_caches")


@pytest.fixture(scope="module")
def h100():
    """OneNet's step for the H100 with the CPU's beside it (``compare_cpu``), memory broken down."""
    return xla_cost.analyze(build_model("one_net"), example_inputs("one_net", B), name="one_net", target="h100",
                            compare_cpu=True, memory=True)


@pytest.fixture(scope="module")
def tpu():
    """The same step for one TPU v5e chip, without a CPU run of its own."""
    return xla_cost.analyze(build_model("one_net"), example_inputs("one_net", B), name="one_net",
                            target="tpu-v5e", memory=True)


@needs_plugins
def test_compare_cpu_keeps_the_cpus_report_and_every_phase_has_a_row(h100, tpu):
    assert h100.cpu is not None and h100.cpu.target is None and h100.cpu.backend == "cpu"
    assert h100.target == "h100" and h100.backend == "gpu"
    for target, comparison in (("h100", h100.comparison()), ("tpu-v5e", xla_cost.compare(h100.cpu, tpu))):
        assert comparison.target == target and comparison.model == "one_net"
        assert comparison.phases == xla_cost.PHASES  # every phase, in report order
        for row in comparison.rows:
            for figure in FIGURES:  # the ratio is the target's figure over the CPU's, exactly
                mine, theirs = row.cpu[figure], row.target[figure]
                expected = None if mine is None or theirs is None or mine == 0 else theirs / mine
                assert row.ratio(figure) == expected
                cell = comparison.to_frame().loc[row.phase, f"{figure}_ratio"]
                assert cell is pd.NA if expected is None else cell == expected
        # each side's figures are its report's own
        step = comparison.row("train_step")
        assert step.cpu["flops"] == h100.cpu.phases["train_step"].flops
        assert step.cpu["peak_bytes"] == h100.cpu.memory_breakdown.peak
        assert step.target["peak_bytes"] is not None and step.target["kernels"] > 0


@needs_plugins
def test_forward_flop_on_every_side_within_2_percent_of_the_closed_form(h100, tpu):
    # the layers 2*B*(1*4096 + 4096*128 + 128*10) + biases B*(4096 + 128 + 10), two ReLUs B*(4096 + 128),
    # the loss 3*B*10 + 12*B; OneNet's length-1 contraction costs B*4096, not 2*B*4096 (F.mlp_forward_phase)
    forward = F.mlp_forward_phase(B, N_IN)
    for report in (h100.cpu, h100, tpu):
        assert math.isclose(report.phases["forward"].flops, forward, rel_tol=0.02), report.target


@needs_plugins
def test_reasons_only_where_the_figures_show_them(h100, tpu):
    gpu = h100.comparison()
    assert gpu.dtype == "float32"
    assert not [r for r in gpu.reasons if r.startswith("bfloat16")]  # a float32 step: no emulation to name
    assert not [r for r in gpu.reasons if r.startswith("layouts and padding")]  # a GPU's arrays are not tiled
    step = gpu.row("train_step")
    if abs(step.ratio("kernels") - 1) >= KERNEL_CHANGE:
        assert any(r.startswith(f"fusion: the h100 compiler") and f"{step.target['kernels']:,} kernel" in r
                   for r in gpu.reasons)
    # the TPU tiles arrays (8 x 128 for 32-bit): the same arguments take more bytes there. fc1's kernel
    # (1, 4096) float32 is 16 KB on the CPU, one padded to 8 rows 128 KB on the TPU
    on_tpu = xla_cost.compare(h100.cpu, tpu)
    forward = on_tpu.row("forward")
    assert forward.target["argument_bytes"] > forward.cpu["argument_bytes"]
    assert any(r.startswith("layouts and padding on the TPU") for r in on_tpu.reasons)


@needs_plugins
def test_the_report_renders_the_comparison_and_reads_it_back(h100):
    text = h100.to_table(width=250)
    assert "h100's own compiler against the CPU proxy" in text
    assert text.index("phases") < text.index("own compiler against") < text.index("backward/forward")
    markdown = h100.to_markdown()
    assert "| phase | FLOP" in markdown.split("own compiler against", 1)[1]
    again = xla_cost.Report.from_json(h100.to_json())
    assert again.cpu is not None and again.comparison() == h100.comparison()
    assert "cpu" not in h100.cpu.to_dict()  # omitted where there is none


def test_compare_refuses_reports_that_are_not_a_cpu_and_a_target_of_one_step():
    with pytest.raises(InputError, match="xla_cost.Report"):
        xla_cost.compare(object(), object())
    with pytest.raises(InputError, match="compare_cpu"):
        xla_cost.analyze(build_model("one_net"), example_inputs("one_net", B), compare_cpu=True)


# ------------------------------------------------------------------ the rules, on rows built here


def _row(phase: str, cpu: dict, target: dict) -> PhaseComparison:
    return PhaseComparison(phase, {f: cpu.get(f) for f in FIGURES}, {f: target.get(f) for f in FIGURES})


JAXPR = 1_000_000


def _rows(**changes: dict) -> list[PhaseComparison]:
    """A step whose figures are equal on both sides, but for ``changes`` (phase -> (cpu, target) dicts)."""
    same = {"flops": JAXPR, "jaxpr_flops": JAXPR, "bytes_accessed": 10_000, "kernels": 100, "argument_bytes": 4_096,
            "temp_bytes": 8_192}
    rows = []
    for phase in ("forward", "backward", "grad", "train_step"):
        cpu, target = changes.get(phase, ({}, {}))
        rows.append(_row(phase, {**same, **cpu}, {**same, **target}))
    return rows


def test_no_reason_where_the_figures_agree():
    assert explain(_rows(), target="h100", platform="gpu", dtype="bfloat16") == ()


def test_library_calls_named_for_a_gpu_that_makes_them():
    rows = _rows(train_step=({}, {"library_calls": 12}))
    (reason,) = explain(rows, target="h100", platform="gpu", dtype="float32")
    assert reason.startswith("library calls: the h100 train step hands 12 operations")
    assert explain(rows, target="tpu-v5e", platform="tpu", dtype="float32") == ()  # a TPU's custom calls are no libraries


def test_fusion_named_past_its_threshold_with_the_kernels_and_bytes():
    # 100 kernels on the CPU, 60 on the target: 0.60x; bytes 10,000 against 6,000
    rows = _rows(train_step=({}, {"kernels": 60, "bytes_accessed": 6_000}))
    (reason,) = explain(rows, target="h100", platform="gpu", dtype="float32")
    assert "fewer kernels: 60 kernel launches per train step against the CPU's 100 (0.60×)" in reason
    assert "(0.60×)" in reason.split("bytes accessed")[1]
    within = _rows(train_step=({}, {"kernels": 100 - int(100 * KERNEL_CHANGE) + 1}))
    assert explain(within, target="h100", platform="gpu", dtype="float32") == ()


def test_bfloat16_emulation_only_for_a_bfloat16_step_on_the_cpu():
    # the CPU's FLOP 2% over the jaxpr (its converts), the target's at it; the CPU's bytes 1.5x the target's
    rows = _rows(train_step=({"flops": JAXPR * 102 // 100, "bytes_accessed": 15_000}, {}))
    reasons = explain(rows, target="h100", platform="gpu", dtype="bfloat16")
    emulation = [r for r in reasons if r.startswith("bfloat16 on the CPU")]
    assert len(emulation) == 1 and "+2.0% over the jaxpr count" in emulation[0] and "1.50×" in emulation[0]
    assert not [r for r in explain(rows, target="h100", platform="gpu", dtype="float32")
                if r.startswith("bfloat16")]
    assert not [r for r in explain(rows, target="h100", platform="gpu", dtype="bfloat16", baseline="gpu")
                if r.startswith("bfloat16")]  # a proxy compiled for a GPU emulates nothing


def test_padding_named_on_a_tpu_whose_arguments_grow():
    rows = _rows(forward=({}, {"argument_bytes": 8_192}))
    (reason,) = explain(rows, target="tpu-v5e", platform="tpu", dtype="float32")
    assert reason.startswith("layouts and padding on the TPU") and "+100.0%" in reason
    assert explain(rows, target="h100", platform="gpu", dtype="float32") == ()


def test_added_work_located_by_pass_and_rematerialisation_only_a_candidate():
    more = JAXPR * 103 // 100  # 3% over the CPU's and the jaxpr's, in the backward pass
    added = _rows(backward=({}, {"flops": more}), grad=({}, {"flops": more}))
    (reason,) = explain(added, target="h100", platform="gpu", dtype="float32")
    assert reason.startswith("work the h100 compiler adds over the jaxpr count: backward 30.00 k FLOP (+3.0%")
    assert "rematerialisation" not in reason  # as many temporaries as the CPU's
    fewer = _rows(backward=({}, {"flops": more}), grad=({}, {"flops": more, "temp_bytes": 4_096}))
    (reason,) = explain(fewer, target="h100", platform="gpu", dtype="float32")
    assert "keeps 0.50× the CPU's temporaries, as rematerialisation" in reason and "do not tell which" in reason
    below = _rows(backward=({}, {"flops": JAXPR + int(JAXPR * ADDED_WORK)}))  # at the threshold: nothing to name
    assert explain(below, target="h100", platform="gpu", dtype="float32") == ()
    # 3% over the jaxpr but below the CPU's 5%: no difference from the proxy to explain
    under_cpu = _rows(backward=({"flops": JAXPR * 105 // 100}, {"flops": more}))
    assert explain(under_cpu, target="h100", platform="gpu", dtype="float32") == ()


RANDOM = 10_000  # the jaxpr's random-number FLOP of the forward pass (and so of grad and the step)


def test_random_numbers_named_with_their_share_and_not_called_added_work():
    """Issue 49: the threefry hash counted as the CPU counts it (41 operations a word) against an
    unrolled one (117): a forward pass up to 117/41 - 1 = 1.85x its random FLOP over the CPU's, a
    backward pass (which draws nothing) up to 117/41 = 2.85x the forward's, drawn again."""
    drawn = {"random_flops": RANDOM}
    forward, backward = JAXPR + RANDOM, JAXPR + 2 * RANDOM  # within both allowances
    rows = _rows(forward=(drawn, {**drawn, "flops": forward}), backward=({}, {"flops": backward}),
                 grad=(drawn, {**drawn, "flops": forward + backward - JAXPR}))
    (reason,) = explain(rows, target="h100", platform="gpu", dtype="float32")
    assert reason.startswith("random numbers: the step draws random bits with jax's threefry hash (10.00 k FLOP")
    assert "41 operations a 32-bit word" in reason and "117 operations a word" in reason
    assert "forward: all of its 10.00 k FLOP (+1.0%) over the CPU's" in reason
    assert "computes the bits again in the backward pass" in reason
    assert "backward: all of its 20.00 k FLOP (+2.0%) over the CPU's" in reason
    # a forward pass 3x its random FLOP over the CPU's: 1.85x of it is the generator's, the rest added work
    rows = _rows(forward=(drawn, {**drawn, "flops": JAXPR + 3 * RANDOM}))
    random, added = explain(rows, target="tpu-v5e", platform="tpu", dtype="float32")
    share = int((117 / 41 - 1) * RANDOM)
    assert f"forward: {share / 1e3:.2f} k of its 30.00 k FLOP (+3.0%) over the CPU's" in random
    assert "bits again" not in random  # the backward pass is the CPU's
    assert added.startswith("work the tpu-v5e compiler adds over the jaxpr count, beyond the random numbers: "
                            f"forward {(3 * RANDOM - share) / 1e3:.2f} k FLOP")
    # without random numbers the same excess is added work alone
    (reason,) = explain(_rows(forward=({}, {"flops": JAXPR + 3 * RANDOM})), target="h100", platform="gpu",
                        dtype="float32")
    assert reason.startswith("work the h100 compiler adds over the jaxpr count: forward 30.00 k FLOP")


# ------------------------------------------------------------------ dropout on a target (issue 49)

DROP_B, DROP_IN, DROP_HIDDEN, DROP_OUT = 8, 32, 64, 10
WORDS = DROP_B * DROP_HIDDEN  # one 32-bit random word per element of the dropout's mask
CPU_WORD, UNROLLED_WORD = 41, 2 + 5 * (4 * 5 + 3)  # the CPU's count of the hash a word; its 5 trips unrolled


class DropoutMLP(nn.Module):
    rate: float = 0.1

    @nn.compact
    def __call__(self, x, deterministic=False):
        x = nn.relu(nn.Dense(DROP_HIDDEN, name="fc1")(x))
        return nn.Dense(DROP_OUT, name="fc2")(nn.Dropout(self.rate, deterministic=deterministic)(x))


@pytest.fixture(scope="module")
def dropout_h100():
    x = jax.ShapeDtypeStruct((DROP_B, DROP_IN), jnp.float32)
    return xla_cost.analyze(DropoutMLP(), x, optimizer="sgd", target="h100", compare_cpu=True)


@needs_plugins
def test_dropout_on_an_h100_is_named_as_random_numbers_not_added_work(dropout_h100):
    """The H100 unrolls the threefry hash's loop, whose body the CPU counts once (117 against 41
    operations a word), and computes the mask again in the backward pass: its forward is
    (117 - 41) x words over the CPU's, its backward about 117 x words; the reason says so."""
    comparison = dropout_h100.comparison()
    forward, backward = comparison.row("forward"), comparison.row("backward")
    assert math.isclose(forward.target["flops"] - forward.cpu["flops"], (UNROLLED_WORD - CPU_WORD) * WORDS,
                        rel_tol=0.03)
    assert math.isclose(backward.target["flops"] - backward.cpu["flops"], UNROLLED_WORD * WORDS, rel_tol=0.05)
    (random,) = [r for r in comparison.reasons if r.startswith("random numbers")]
    assert "forward: all of its" in random and "backward: all of its" in random and "bits again" in random
    assert not [r for r in comparison.reasons if r.startswith("work the h100 compiler adds")]


class DropoutNNX(nnx.Module):
    def __init__(self, *, rngs):
        self.fc1 = nnx.Linear(DROP_IN, DROP_HIDDEN, rngs=rngs)
        self.fc2 = nnx.Linear(DROP_HIDDEN, DROP_OUT, rngs=rngs)
        self.dropout = nnx.Dropout(0.1)

    def __call__(self, x, rngs=None):
        return self.fc2(self.dropout(nnx.relu(self.fc1(x)), rngs=rngs))


@needs_plugins
def test_nnx_dropout_on_a_tpu_slice_notes_the_random_numbers_not_split_k():
    model = nnx.eval_shape(lambda: DropoutNNX(rngs=nnx.Rngs(0)))
    report = xla_cost.analyze(model, jax.ShapeDtypeStruct((DROP_B, DROP_IN), jnp.float32), optimizer="sgd",
                              target="tpu-v5e:2x2")
    forward = report.phases["forward"]
    assert math.isclose(forward.flops - forward.jaxpr_flops, (UNROLLED_WORD - CPU_WORD) * WORDS, rel_tol=0.03)
    (note,) = [n for n in report.notes if n.startswith("forward: the tpu-v5e:2x2 program counts")]
    assert "random-number generator accounts for up to" in note and "threefry" in note
    assert not [n for n in report.notes if n.startswith("forward:") and "split-K" in n]


def test_the_table_shows_each_figure_in_one_unit_and_the_ratio():
    comparison = TargetComparison.of_rows("m", "h100", "gpu", "float32",
                                          _rows(train_step=({}, {"kernels": 50, "library_calls": 3})))
    frame = comparison_frame(comparison)
    assert frame.loc["train_step", "kernels CPU"] == "100" and frame.loc["train_step", "kernels h100"] == "50"
    assert frame.loc["train_step", "kernels ×"] == "0.500"
    assert frame.loc["train_step", "library calls h100"] == "3" and "library calls CPU" not in frame.columns
    shown = comparison._repr_markdown_()
    assert shown.startswith("h100's own compiler against the CPU proxy") and "| train_step | " in shown
    assert "- fusion: the h100 compiler fuses the step into fewer kernels" in shown
    assert "kernels ×" in comparison.to_table(width=300)


# ------------------------------------------------------------------ the command line


def test_compare_cpu_without_a_target_is_one_line(capsys):
    one_line_refusal(capsys, ["analyze", "one_net", "--compare-cpu"], ["--compare-cpu", "--target"])


@needs_plugins
def test_the_cli_prints_the_comparison(capsys):
    from xla_cost.cli import main

    assert main(["analyze", "one_net", "--batch-size", str(B), "--target", "h100", "--compare-cpu"]) == 0
    out = capsys.readouterr().out
    assert "h100's own compiler against the CPU proxy" in out and "kernels h100" in out


# ------------------------------------------------------------------ the page


FIELDS = ["model", "config", "batch", "dtype", "optimizer", "target", "platform", "device", "phase", "flops",
          "jaxpr_flops", "bytes_accessed", "kernels", "library_calls", "argument_bytes", "temp_bytes", "peak_bytes",
          "seconds", "status", "error", "jax_version", "jaxlib_version", "cuda_plugin_version", "libtpu_version",
          "xla_cost_version", "cores", "date", "command"]


def test_the_page_from_a_file_and_without_one(tmp_path):
    # one model on the CPU and an H100: the H100 launches 40 kernels per train step where the CPU launches
    # 80 (0.500x) and moves 600 bytes where the CPU moves 1,000 (0.600x); a V100 that failed
    data = tmp_path / "data"
    data.mkdir()
    env = {"jax_version": "0", "jaxlib_version": "0", "cuda_plugin_version": "0", "libtpu_version": "0",
           "xla_cost_version": "0", "cores": "2", "date": "2026-01-01", "command": "python benchmarks/target_compare.py"}
    run = {"model": "tiny", "config": "", "batch": 4, "dtype": "float32", "optimizer": "adam", "seconds": 1}
    rows = []
    for target, kernels, moved in (("cpu", 80, 1_000), ("h100", 40, 600)):
        for phase in xla_cost.PHASES:
            rows.append({**run, **env, "target": target, "platform": "cpu" if target == "cpu" else "gpu",
                         "device": target, "phase": phase, "flops": 1_000, "jaxpr_flops": 1_000,
                         "bytes_accessed": moved, "kernels": kernels, "library_calls": "" if target == "cpu" else 0,
                         "argument_bytes": 64, "temp_bytes": 32, "peak_bytes": 128 if phase == "train_step" else "",
                         "status": "ok", "error": ""})
    rows.append({**run, **env, "target": "v100-32gb", "status": "error", "error": "RuntimeError: no ptxas"})
    with open(data / "targets_2026-01-01.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    write_report("targets", tmp_path / "out", store=tmp_path / "s.sqlite", jobs=0, data_dir=data, progress=False)
    page = (tmp_path / "out" / "targets.md").read_text()
    assert "| `h100` | 1.000 | 0.600 | 0.500 | 1.000 | 0 |" in page  # FLOP, bytes, kernels, peak ×
    assert "40 kernel launches per train step against the CPU's 80 (0.50×)" in page
    assert "`v100-32gb`: RuntimeError: no ptxas" in page
    assert "targets_2026-01-01.csv" in page and "| libtpu | 0 |" in page
    write_report("targets", tmp_path / "empty", store=tmp_path / "s.sqlite", jobs=0, data_dir=tmp_path / "none",
                 progress=False)
    assert "python benchmarks/target_compare.py" in (tmp_path / "empty" / "targets.md").read_text()
