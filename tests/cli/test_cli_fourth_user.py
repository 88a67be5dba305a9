"""What a fourth new user's first day on the command line broke (each exit 0 with a
figure they did not ask for), now refused in one line before anything runs:

- ``--device "RTX A1000"`` (or a typed ``a1000``, ``p400``, ``h1000``) was taken
  for the registry key it contains (an A100's 40 GB; `tests/timemodel/test_devices.py`
  checks the lookup itself);
- ``--input-shape 4,32 --batch-size 8`` analysed batch 8 without a word;
- ``--set n_layer=1 --set n_layer=3`` kept the last; ``--remat full --set
  remat=dots_saveable`` kept one policy and the header named the other;
- ``--counter jaxpr --exact-train-step`` ignored the flag.

Each runs the exact command in-process (`xla_cost.cli.main`) in a directory of its
own: exit 2, one line on stderr, nothing on stdout, nothing written.
"""

from __future__ import annotations

import sys

import pytest

import xla_cost
from tests.formulas import conv_net_params
from tests.refusals import one_line_refusal
from xla_cost.present.units import short_count
from xla_cost.errors import InputError

MLP_FILE = '''
import flax.linen as nn


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.Dense(16)(x)))
'''


@pytest.fixture
def place(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XLA_COST_STORE", str(tmp_path / "store.sqlite"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "nets.py").write_text(MLP_FILE)
    return tmp_path


def _nothing_written(place):
    assert sorted(p.name for p in place.iterdir() if p.name != "__pycache__") == ["nets.py"]


@pytest.mark.parametrize("argv, words", [
    (["fit", "one_net", "--device", "RTX A1000"], ("a device with a known memory", "'RTX A1000'")),
    (["fit", "one_net", "--device", "a1000"], ("'a1000'",)),
    (["estimate", "one_net", "--device", "h1000", "--samples", "1000"], ("'h1000'",)),
    (["analyze", "nets.py:MLP", "--input-shape", "4,32", "--batch-size", "8", "--counter", "jaxpr"],
     ("--batch-size 8 with --input-shape 4,32", "--input-shape 8,32")),
    (["analyze", "gpt2-small", "--set", "n_layer=1", "--set", "n_layer=3", "--counter", "jaxpr"],
     ("n_layer twice", "--set n_layer=1,3")),
    (["sweep", "gpt2-small", "--set", "n_layer=1", "--set", "n_layer=3", "--counter", "jaxpr", "--jobs", "0"],
     ("n_layer twice",)),
    (["analyze", "gpt2-small", "--set", "n_layer=1", "--remat", "full", "--set", "remat=dots_saveable",
      "--counter", "jaxpr"], ("--remat full with --set remat=dots_saveable",)),
    (["analyze", "one_net", "--counter", "jaxpr", "--exact-train-step"],
     ("exact_train_step=True with counter='jaxpr'",)),
    # a seventh user's: "Expected batch sizes of at least 1, got '2'" for the 'x' of --batch-sizes 2,x
    (["sweep", "one_net", "--batch-sizes", "2,x", "--counter", "jaxpr", "--jobs", "0"],
     ("whole numbers", "got 'x' in '2,x'")),
])
def test_a_conflict_or_a_near_name_is_refused_before_anything_runs(capsys, place, argv, words):
    one_line_refusal(capsys, argv, words)
    _nothing_written(place)


def test_an_input_shape_and_an_equal_batch_size_agree(capsys, place):
    # the same batch given twice is no conflict: analysed at it
    assert xla_cost.cli.main(["analyze", "nets.py:MLP", "--input-shape", "4,32", "--batch-size", "4",
                              "--counter", "jaxpr", "--format", "json", "--quiet"]) == 0
    assert '"batch_size": 4' in capsys.readouterr().out


def test_the_library_refuses_an_exact_train_step_it_would_not_compile():
    import jax
    import jax.numpy as jnp
    from xla_cost.zoo import build_model

    with pytest.raises(InputError, match="exact_train_step .* with counter='xla'"):
        xla_cost.analyze(build_model("one_net"), jax.ShapeDtypeStruct((1, 1), jnp.float32), counter="jaxpr",
                         exact_train_step=True)


def test_a_host_bound_step_says_where_its_time_goes(tmp_path):
    # before: `scaling conv_net --set image_size=32 --batch-size 4 --devices 1,2` showed compute 3.41 us, no
    # exposed communication and a step of 124.74 us, 97% of it unexplained in the table, the CSV and the JSON
    # (the host's dispatch of the step bounds it; the note saying so was built and dropped)
    curve = xla_cost.scaling("conv_net", [1, 2], batch_size=4, config={"image_size": 32}, optimizer="sgd",
                             store=tmp_path / "store.sqlite")
    frame = curve.to_frame()
    parts = frame["compute_s"] + frame["exposed_communication_s"] + frame["host_s"]
    assert parts.tolist() == pytest.approx(frame["step_s"].tolist(), rel=1e-9)
    assert (frame["host_s"] > frame["compute_s"]).all()  # host-bound at this size: the note must say so
    [note] = [n for n in curve.notes() if n.startswith("step = compute + exposed comm. + the host's share")]
    assert "host-bound" in note
    # the model as configured (it read "conv_net (sgd, float32)" after --set image_size=32)
    # and its parameters, which do not depend on the image size (formulas.conv_net_params: 105.7k)
    assert curve.describe().startswith(f"conv_net with image_size=32 ({short_count(conv_net_params())} parameters, "
                                       "layers unrolled; sgd, float32)")
    assert curve.to_dict()["settings"] == {"image_size": 32}


@pytest.mark.parametrize("argv, words, absent", [
    # before, each advised Python a command-line user cannot type: "an `optax.GradientTransformation`" alone,
    # "Expected depth None", and sweep's float8 refusal named a --dtype flag sweep does not have
    (["analyze", "one_net", "--optimizer", "adamm", "--counter", "jaxpr"], ("--optimizer NAME",), ()),
    (["analyze", "one_net", "--depth", "0", "--per-layer", "--counter", "jaxpr"], ("depth (--depth)",), ()),
    (["sweep", "one_net", "--dtypes", "float8", "--jobs", "0", "--counter", "jaxpr"],
     ("float8 (FP8 matrix products)",), ("--dtype",)),
])
def test_a_refusal_names_what_the_command_line_can_type(capsys, place, argv, words, absent):
    line = one_line_refusal(capsys, argv, words)
    assert not any(word in line for word in absent), line


def test_the_train_step_memory_note_points_at_the_breakdown_when_there_is_one():
    # before: `analyze conv_net --memory` showed the train step compiled as one program (XLA's peak) in its
    # breakdown and a note saying its memory is unknown until --exact-train-step compiles it
    import jax
    import jax.numpy as jnp
    from xla_cost.zoo import build_model

    x = jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.float32)
    model = build_model("conv_net", image_size=32)
    for memory, words in ((True, "the memory breakdown's XLA peak is the train step compiled as one program"),
                          (False, "exact_train_step=True (--exact-train-step) compiles it")):
        report = xla_cost.analyze(model, x, optimizer="sgd", memory=memory, compilation_cache=False)
        [note] = [n for n in report.notes if n.startswith("train_step: grad + update, not compiled as one")]
        assert words in note, (memory, note)
        assert (report.memory_breakdown is not None) == memory


def test_the_zoo_in_markdown_leaves_a_dense_models_active_parameters_empty_as_csv_does():
    # before: `models --format markdown` wrote pandas' "<NA>" in 35 cells where the CSV leaves them empty.
    # Two rows of zoo_frame()'s columns (the whole zoo takes seconds to count): a dense model, a mixture
    import pandas as pd

    from xla_cost import zoo

    frame = pd.DataFrame({"name": ["one_net", "mixtral-8x7b"], "description": ["dense", "routed"],
                          "parameters": [533898, 46702792704], "active_parameters": [None, 12879925248],
                          "input_shape": ["(B, 1)", "(B, 4096)"], "input_dtype": ["float", "int32"],
                          "config": ["", ""], "aliases": ["", ""]}).set_index("name")
    frame["active_parameters"] = frame["active_parameters"].astype("Int64")  # as zoo_frame types it
    listing = zoo.ZooListing(frame)
    markdown, csv = listing.to_markdown(), listing.to_csv()
    assert "<NA>" not in markdown
    dense, routed = (line.split("|") for line in markdown.splitlines()[2:])
    assert dense[4].strip() == "" and routed[4].strip() == "12879925248"
    assert csv.splitlines()[1].split(",")[3] == ""  # the CSV's empty cell, which the markdown now matches


def test_causal_attention_flops_say_what_they_changed(capsys):
    # before: `--attention-flops causal` changed JSON's model_flops alone; the table, CSV and markdown were
    # byte-identical to `full`'s. The note gives the FLOP it leaves out: half of the score and value products
    # of the train step, forward (2 products of 2*B*T*T*d a layer) and backward (twice the forward's)
    b, t, d, layers = 2, 64, 768, 2
    argv = ["analyze", "gpt2-small", "--batch-size", str(b), "--set", f"n_layer={layers}", "--set", f"seq_len={t}",
            "--counter", "jaxpr", "--quiet"]
    assert xla_cost.cli.main([*argv, "--attention-flops", "causal"]) == 0
    causal = capsys.readouterr().out
    left_out = 3 * layers * 2 * (2 * b * t * t * d) // 2
    assert (f"count half of the score and value products of the causally masked attention, {left_out:,} FLOP "
            "fewer") in causal
    assert xla_cost.cli.main(argv) == 0
    assert "attention_flops causal" not in capsys.readouterr().out


def test_the_csv_of_an_analysis_with_memory_has_its_breakdown():
    # before: `analyze --memory --format csv` had no memory row at all (8 lines in the table, markdown and JSON)
    import io

    import jax
    import jax.numpy as jnp
    import pandas as pd
    from xla_cost.zoo import build_model

    report = xla_cost.analyze(build_model("conv_net", image_size=32), jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.float32),
                              optimizer="adam", memory=True, compilation_cache=False)
    frame = pd.read_csv(io.StringIO(report.to_csv()))
    memory = frame[frame["kind"] == "memory"].set_index("name")
    parameters = report.memory_breakdown.parameters
    assert parameters == 4 * report.parameters  # float32
    assert memory.loc["parameters", "program_bytes"] == parameters
    assert memory.loc["optimizer_state", "program_bytes"] == 2 * parameters + 4  # two moments, an int32 count
    assert memory.loc["xla_peak", "program_bytes"] == report.memory_breakdown.peak


def test_the_csv_of_a_fit_holds_the_limit_it_was_held_against(tmp_path):
    # before: `fit --format csv` had the parts at both batches but not the usable memory they were held against
    import io

    import pandas as pd

    capacity, fraction = 12e6, 0.75
    found = xla_cost.max_batch_size("one_net", device_memory_bytes=capacity, memory_fraction=fraction,
                                    optimizer="sgd")
    frame = pd.read_csv(io.StringIO(found.to_csv())).set_index("part")
    assert frame.loc["limit"].tolist() == [capacity * fraction] * 2
    assert frame.loc["peak", f"batch_{found.batch_size}"] <= capacity * fraction
    assert frame.loc["peak", f"batch_{found.next_size}"] > capacity * fraction


def test_a_stored_report_reads_back_in_report_order():
    # before: `store show KEY` listed the phases as the store's JSON sorts them (backward, forward, grad,
    # train_step, update); a user's step's `other` stays before the train step it is part of
    import json

    import jax
    import jax.numpy as jnp

    def step(w, x):
        loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w) ** 2))(w)
        return w - 0.1 * g, loss

    report = xla_cost.analyze_step(step, jax.ShapeDtypeStruct((4, 4), jnp.float32),
                                   jax.ShapeDtypeStruct((2, 4), jnp.float32), counter="jaxpr")
    stored = json.loads(json.dumps(report.to_dict(), sort_keys=True))
    assert list(xla_cost.Report.from_dict(stored).phases) == list(report.phases) == [
        "forward", "backward", "grad", "update", "other", "train_step"]


def test_store_list_tells_apart_rows_that_differ_in_their_settings(tmp_path):
    # before: conv_net at image_size 16 and 32, batch 1, SGD: two rows alike but for their keys
    store = tmp_path / "store.sqlite"
    xla_cost.sweep("conv_net", settings={"image_size": [16, 32]}, optimizers="sgd", counter="jaxpr", jobs=0,
                   progress=False, store=store)
    frame = xla_cost.store_contents(store).to_frame()
    assert sorted(frame["settings"]) == ["image_size=16", "image_size=32"]


def test_fit_names_the_device_whose_share_of_a_given_memory_it_used():
    # before: `fit one_net --device h100 --device-memory 12e6` said "usable 9.00 MB of 12.00 MB; given": the
    # device set the usable share (a GPU allocator's 0.75; a TPU's runtime takes all) and was named nowhere
    found = xla_cost.max_batch_size("one_net", device="tpu-v4", device_memory_bytes=12e6, optimizer="sgd")
    assert found.limit == 12e6 and "given; tpu-v4's usable share" in found.describe()
    alone = xla_cost.max_batch_size("one_net", device_memory_bytes=12e6, optimizer="sgd")
    assert alone.limit == 0.75 * 12e6 and alone.describe().endswith("; given)")


def test_fit_names_the_model_as_configured_and_its_cpu_proxy():
    # before: `fit llama3-8b --set n_layer=2 --device h100` said "llama3-8b (adam, bfloat16): the largest batch that
    # fits is 5" (the 8B model does not fit at all), and gave the CPU's peaks as the device's without a word
    found = xla_cost.max_batch_size("one_net", device="a100", config={"num_classes": 12}, optimizer="sgd")
    # an MLP of one input with 12 classes: 4096 + 4096 + 4096 x 128 + 128 + 128 x 12 + 12 parameters
    parameters = 4096 + 4096 + 4096 * 128 + 128 + 128 * 12 + 12
    assert found.describe().startswith(f"one_net with num_classes=12 ({short_count(parameters)} parameters, "
                                       "layers unrolled; sgd, float32)")
    assert found.to_dict()["settings"] == {"num_classes": 12}
    assert any(n.startswith("each peak is the CPU's compile of the step, a proxy") for n in found.notes())


def test_a_mesh_beyond_the_environments_device_count_says_which_setting_wins(tmp_path):
    # before: with XLA_FLAGS=--xla_force_host_platform_device_count=2, `--mesh data=4` was told "the xla-cost
    # CLI does this itself" (simulates the devices), which it cannot: the environment's flag wins
    import os
    import subprocess

    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-m", "xla_cost", "analyze", "one_net", "--batch-size", "8", "--mesh",
                           "data=4", "--counter", "jaxpr"], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("xla-cost: error:")]
    assert "XLA_FLAGS --xla_force_host_platform_device_count=2 wins" in line and "raise it to 4 or unset it" in line
    assert "does this itself" not in line


@pytest.mark.parametrize("content, said", [("[1]", "a JSON list (another command's output?)"),
                                           ("{}", "an empty JSON object (another command's output?)")])
def test_diff_refuses_json_that_is_no_report_in_words(capsys, place, content, said):
    # a seventh user's: "got 'x.json', a JSON list: another command's output? instead" and "with keys none"
    (place / "x.json").write_text(content)
    one_line_refusal(capsys, ["diff", "x.json", "x.json"], said)


@pytest.mark.skipif(not __import__("os").path.isdir("/proc"), reason="a directory that takes no new files")
def test_an_output_in_a_directory_that_takes_no_files_says_so(capsys, place):
    # the same user's: "nothing can be created in '/proc': No such file or directory", of a directory that is there
    line = one_line_refusal(capsys, ["analyze", "one_net", "--counter", "jaxpr", "--output", "/proc/x.json"],
                            "it takes no new files")
    assert "No such file" not in line
