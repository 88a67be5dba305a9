"""The largest batch that fits, compiled for a target (issue 31): ``max_batch_size(target=...)``
and ``xla-cost fit --target``.

Every batch is compiled by the target's own compiler (an H100's: XLA's GPU compiler through
jax's CUDA plugin, deviceless), and the peak is that program's ``memory_analysis()``. The model
is a two-layer MLP whose peak has a closed form (`closed_form`, derived below); the searches
that need no compile replace ``breakdown_at``.
"""

from __future__ import annotations

from types import SimpleNamespace

import flax.linen as nn
import pytest

from xla_cost import plugins
from xla_cost import RunConfig
from xla_cost.analysis.memory import MemoryBreakdown
from xla_cost.cli import main
from xla_cost.compiled import targets
from xla_cost.errors import InputError
from xla_cost.timemodel import devices
from xla_cost.runs import fit

needs_cuda = pytest.mark.skipif(plugins.cuda_plugin() is None,
                                reason="jax's CUDA plugin (pip install 'xla-cost[gpu]') compiles for an H100")

D, H, O = 32, 4096, 8
"""The MLP: D inputs -> H hidden (relu) -> O classes. H >> D, O: the hidden activations are
what grows with the batch (32,900 bytes a sample), and the kernels are small beside them."""

P = D * H + H + H * O + O
"""Its parameters: two kernels and two biases (167,944)."""


class MLP(nn.Module):
    """``Dense(H) -> relu -> Dense(O)`` of float32."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(O)(nn.relu(nn.Dense(H)(x)))


def closed_form(batch: int) -> int:
    """The H100's peak for the donated Adam train step at ``batch`` (2 and up), in bytes.

    The textbook sum, 4P parameters + 4P gradients + 8P Adam moments + the activations the
    backward keeps, overstates it: XLA applies each parameter's Adam update in place (into
    the donated buffers) right after its gradient, so the gradients never coexist, and
    what decides the peak is the backward's working set at one of two moments:

    * held throughout (the arguments less what is donated and updated in place):
      parameters 4P + Adam's mu and nu 8P + its int32 count 4 + the batch: ``x`` 4·B·D
      (float32) and the labels 4·B (int32);
    * while the first layer's gradient is made (dW1 = xᵀ·dz1): the hidden gradient dz1,
      4·B·H, and dW1 itself, 4·D·H;
    * or at the relu's backward: the hidden pre-activation the forward saved (4·B·H) and
      the gradient flowing into it (4·B·H, masked in place), the logits' gradient 4·B·O,
      and a copy of the output kernel 4·H·O (its update is scheduled before the
      gradient into the hidden layer reads it: XLA copies the donated kernel).

    The larger moment is the first below B = H·(D - O)/(H + O) (23.9) and the second above.
    XLA's scalars and the loss add about 1.5 KB (under 0.06% from batch 2 on; at batch 1
    the first layer's gradient is an outer product XLA fuses into the update: no D×H buffer).
    """
    held = 4 * P + 8 * P + 4 + 4 * batch * D + 4 * batch
    first_layer_gradient = 4 * batch * H + 4 * D * H
    relu_backward = 2 * 4 * batch * H + 4 * batch * O + 4 * H * O
    return held + max(first_layer_gradient, relu_backward)


# ------------------------------------------------------------------ compiled for an H100


@needs_cuda
def test_fit_for_an_h100_finds_the_largest_batch_whose_closed_form_fits():
    # a memory halfway between the closed form at batches 100 and 101: 32,900 bytes a sample
    # (4(D + 1) + 8H) on each side, against XLA's ~1.5 KB of scalars
    memory = (closed_form(100) + closed_form(101)) / 2
    expected = max(b for b in range(2, 1000) if closed_form(b) <= memory)
    found = fit.max_batch_size(MLP(), input_shape=(1, D), target="h100", device_memory_bytes=memory,
                               memory_fraction=1.0, progress=False)
    assert (found.batch_size, found.next_size) == (expected, expected + 1) == (100, 101)
    # every batch compiled for the H100 (from 2: see closed_form) peaks at the closed form within 5%,
    # on both sides of the crossover (batches 2 and 9 below it, the rest above)
    assert any(b < 23 for b, _ in found.tried[1:]) and any(b > 24 for b, _ in found.tried)
    for batch, peak in found.tried:
        if batch >= 2:
            assert peak == pytest.approx(closed_form(batch), rel=0.05), batch
    # the peak is what memory_analysis() gives: arguments + outputs + temporaries - aliased
    step = found.fits
    assert step.peak == step.argument_bytes + step.output_bytes + step.temp_bytes - step.alias_bytes
    # fit's compile budget: the knee at the crossover (16,516 bytes a sample below it, 32,900
    # above) makes the line through batches 2 and 9 overshoot once: 7 compiles, not 4
    assert len(found.tried) <= 7
    assert found.capacity_source == "given" and found.target == "h100"
    assert "compiled for NVIDIA H100 SXM by its own compiler" in found.describe()
    assert found.to_dict()["target"] == "h100"


# ------------------------------------------------------------------ the search, without compiles


@pytest.fixture
def compiles(monkeypatch):
    """Replaces the compiles by an affine peak (1,000 bytes + 24,000 a sample); records each
    batch and the target active when it was asked for."""
    asked: list[tuple[int, object]] = []

    def breakdown_at(run, batch):
        active = targets.active()
        asked.append((batch, None if active is None else active.name))
        return SimpleNamespace(peak=1000 + 24_000 * batch)

    monkeypatch.setattr(fit, "breakdown_at", breakdown_at)
    return asked


@needs_cuda
def test_the_target_names_the_device_and_every_compile_is_for_it(compiles):
    # the A100 80GB's datasheet memory (NVIDIA A100 datasheet: 80 GB HBM2e) x JAX's 0.75
    found = fit.max_batch_size("one_net", target="a100-80gb", progress=False, max_batch=fit.MAX_BATCH)
    # the datasheet's 80 GB less the CUDA context (devices.CUDA_CONTEXT_BYTES), which JAX's allocator takes 0.75 of
    usable = 80e9 - devices.CUDA_CONTEXT_BYTES
    assert found.capacity == usable == devices.target("a100-80gb").memory_bytes
    assert found.limit == usable * 0.75
    assert found.batch_size == int((usable * 0.75 - 1000) // 24_000)  # the affine peak's last batch under the limit
    assert compiles and {name for _, name in compiles} == {"a100-80gb"}
    assert targets.active() is None  # the target is active only while fit compiles
    # the same device named twice is the target's
    assert fit.max_batch_size("one_net", device="a100-80gb", target="a100-80gb", progress=False).capacity == usable


def test_without_a_target_nothing_is_compiled_for_one(compiles):
    found = fit.max_batch_size("one_net", device_memory_bytes=24e6, memory_fraction=1.0, progress=False)
    assert found.target is None and {name for _, name in compiles} == {None}
    assert (found.batch_size, found.next_size) == (999, 1000)  # (24e6 - 1,000) // 24,000 = 999
    assert "compiled for" not in found.describe() and len(found.notes()) == 1


@needs_cuda
def test_a_device_other_than_the_targets_is_refused_in_one_line(compiles):
    with pytest.raises(InputError) as refused:
        fit.max_batch_size("one_net", device="v100-32gb", target="h100")
    assert "\n" not in str(refused.value) and "--target h100: h100" in str(refused.value)
    assert compiles == []


@pytest.mark.parametrize("target", ["nonsense", "h100:2x2", "cpu"])
def test_an_unknown_target_is_refused_in_one_line(compiles, target):
    with pytest.raises(InputError, match="a compile target") as refused:
        fit.max_batch_size("one_net", target=target)
    assert "\n" not in str(refused.value) and compiles == []


def test_a_gpu_target_without_the_cuda_plugin_is_refused_in_one_line(compiles, monkeypatch):
    monkeypatch.setattr(plugins, "cuda_plugin", lambda: None)
    with pytest.raises(InputError, match=r"pip install 'xla-cost\[gpu\]'") as refused:
        fit.max_batch_size("one_net", target="h100")
    assert "\n" not in str(refused.value) and compiles == []


@pytest.mark.parametrize("argv, words", [
    (["--target", "nonsense"], "a compile target"),
    (["--target", "h100", "--device", "v100-32gb"], "--device v100-32gb"),
])
def test_the_command_refuses_in_one_line(capsys, compiles, argv, words):
    code = main(["fit", "one_net", "--quiet", *argv])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and words in lines[0], err
    assert compiles == []


def test_the_command_without_the_plugin_refuses_in_one_line(capsys, compiles, monkeypatch):
    monkeypatch.setattr(plugins, "cuda_plugin", lambda: None)
    code = main(["fit", "one_net", "--target", "h100", "--quiet"])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "xla-cost[gpu]" in lines[0], err
    assert compiles == []


# ------------------------------------------------------------------ convolutions' workspaces

B, S, C, F = 8, 32, 16, 32
"""A 3x3 convolution (no bias, SAME padding) of a B x S x S x C float32 image to F channels."""


class Conv(nn.Module):
    """``Conv(F, 3x3) -> mean over the image -> Dense(O)`` of float32."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(O)(nn.Conv(F, (3, 3), padding="SAME", use_bias=False)(x).mean(axis=(1, 2)))


@needs_cuda
def test_a_deviceless_gpu_step_allows_for_its_convolutions_workspaces():
    # the H100's compile of the step calls cuDNN twice on the largest operands (the forward, x * w -> y,
    # and the kernel's gradient, x * dy -> dw), each reading and writing x, a B.S.S.C image, y (or
    # dy), B.S.S.F, and w (or dw), 3.3.C.F, all float32; without a device XLA gives neither a workspace
    largest = 4 * (B * S * S * C + B * S * S * F + 9 * C * F)
    run = RunConfig(Conv(), B, optimizer="sgd", input_shape=(1, S, S, C))
    with targets.use(devices.target("h100")):
        step = fit.breakdown_at(run, B)
    assert step.unsized_scratch == largest
    assert step.needed == step.peak + largest
    assert any("cuDNN convolutions compiled without their workspaces" in note for note in step.notes)
    assert step.to_dict()["needed"] == step.needed
    # a TPU's compiler and the CPU's call no cuDNN: nothing is allowed for
    with targets.use(devices.target("tpu-v5e")):
        assert fit.breakdown_at(run, B).unsized_scratch == 0
    assert fit.breakdown_at(run, B).unsized_scratch == 0


def test_a_batch_is_judged_by_its_peak_and_its_workspace_allowance(monkeypatch):
    # a peak of 1,000 bytes + 24,000 a sample and an allowance of 3,000 a sample (a convolution's
    # operands and result grow with the batch): the last batch under 24 MB is (24e6 - 1,000) // 27,000
    def breakdown_at(run, batch):
        return MemoryBreakdown(parameters=0, gradients=0, optimizer_state=0, model_state=0, inputs=0,
                               saved_activations=0, argument_bytes=1000, output_bytes=0, temp_bytes=24_000 * batch,
                               unsized_scratch=3_000 * batch)

    monkeypatch.setattr(fit, "breakdown_at", breakdown_at)
    found = fit.max_batch_size("one_net", device_memory_bytes=24e6, memory_fraction=1.0, progress=False)
    assert (found.batch_size, found.next_size) == (888, 889)  # (24e6 - 1,000) // 27,000 = 888
    assert all(judged == 1000 + 27_000 * batch for batch, judged in found.tried)
    rows = found.to_frame().set_index("part")
    assert tuple(rows.loc["unsized_scratch"]) == (3_000 * 888, 3_000 * 889)
    assert tuple(rows.loc["needed"]) == (1000 + 27_000 * 888, 1000 + 27_000 * 889)
    assert any("no workspace in a deviceless compile" in note for note in found.notes())


# ------------------------------------------------------------------ a compiler that refuses a batch

TPU_OOM = ("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory required "
           "for HLO temporaries (17.61G) exceeds available HBM (15.75G). HLO module: jit_train_step.")
"""libtpu's refusal of a program too large for a v5e chip (its wording, jax 0.10.2)."""


def test_a_compile_time_out_of_memory_is_a_batch_that_does_not_fit(monkeypatch):
    refused = fit.CompilerRefused.from_error(RuntimeError(TPU_OOM), limit=12e9)
    assert refused.peak == int(17.61 * 2**30)  # XLA's G is 2**30 bytes
    assert fit.CompilerRefused.from_error(RuntimeError("INTERNAL: something else"), limit=12e9) is None
    # a refusal that names no figure is one byte over the limit
    assert fit.CompilerRefused.from_error(RuntimeError("RESOURCE_EXHAUSTED: out of memory"), 12e9).peak == 12e9 + 1

    def breakdown_at(run, batch):  # 1,000 bytes + 24 a sample; the compiler refuses above 500 samples
        if batch > 500:
            raise RuntimeError(TPU_OOM)
        return SimpleNamespace(peak=1000 + 24 * batch)

    monkeypatch.setattr(fit, "breakdown_at", breakdown_at)
    monkeypatch.setattr(targets, "require_plugin", lambda platform: None)  # no libtpu needed: nothing compiles
    monkeypatch.setattr(plugins, "has_libtpu", lambda: True)
    found = fit.max_batch_size("one_net", target="tpu-v5e", device_memory_bytes=1e9, memory_fraction=1.0,
                               progress=False)
    assert (found.batch_size, found.next_size) == (500, 501)  # the last batch the compiler accepts
    assert isinstance(found.does_not_fit, fit.CompilerRefused)
    assert found.to_frame()[f"batch_{found.next_size}"].isna().sum() >= 1  # its parts unknown, not zero


# ------------------------------------------------------------------ the memory page without the GPU extra


def test_the_memory_page_names_the_install_command_without_the_plugin(monkeypatch):
    from xla_cost.study.pages import memory

    monkeypatch.setattr(plugins, "cuda_plugin", lambda: None)
    data = SimpleNamespace(plan=SimpleNamespace(memory_checks=(("one_net", 2, ()),), fit_devices=("h100",)))
    text = "\n".join(memory.target_section(data))  # nothing is compiled: the section says what to install
    assert "pip install 'xla-cost[gpu]'" in text and "| model |" not in text


def test_the_memory_page_sets_the_workspaces_measured_against_the_allowance(tmp_path):
    import pandas as pd

    from xla_cost.study.pages import memory

    # two steps as benchmarks/conv_workspaces.py writes them: a network whose workspaces added
    # 40 of its 100 MB allowance, and one convolution (a patch embedding) beside products
    frame = pd.DataFrame([
        {"device": "NVIDIA H200", "model": "resnet50", "batch": 64, "dtype": "float32", "convolutions": 158,
         "deviceless_peak_bytes": 1_000_000_000, "real_peak_bytes": 1_040_000_000, "allowance_bytes": 100_000_000,
         "largest_workspace_bytes": 60_000_000},
        {"device": "NVIDIA H200", "model": "vit-b16", "batch": 64, "dtype": "bfloat16", "convolutions": 2,
         "deviceless_peak_bytes": 1_000_000_000, "real_peak_bytes": 1_500_000_000, "allowance_bytes": 10_000_000,
         "largest_workspace_bytes": 5_000_000},
    ])
    path = tmp_path / "conv_workspaces_nvidia-h200_2026-11-26.csv"
    data = SimpleNamespace(latest=lambda kind: (path, frame) if kind == "conv_workspaces" else None,
                           data_href=lambda found: f"data/{found.name}")  # a page under reports/ (StudyData's)
    text = "\n".join(memory.workspace_section(data))
    # resnet50: 1,000 and 1,040 MB, 40 MB added of a 100 MB allowance (0.40), the allowance 0.100 of the
    # peak (MB to four significant digits)
    assert "| resnet50 batch 64 float32 | 158 | 1,000 | 1,040 | 40.00 | 100.0 | 0.40 | 0.100 | 60.00 |" in text
    # the most a network's workspaces took is resnet50's; the patch embedding's 50x is not a workspace's
    assert "at most 0.40 of the allowance (resnet50 batch 64 float32)" in text
    assert memory.workspace_section(SimpleNamespace(latest=lambda kind: None)) == []
