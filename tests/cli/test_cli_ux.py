"""A new user's first hour: model names, depth 0, tables that fit, one CSV."""

from __future__ import annotations

import io
import json
import re
import sys

import pandas as pd
import pytest

import xla_cost
from tests import formulas as F
from tests.zoo.test_bert_vit import BERT_PUBLISHED
from tests.zoo.test_gpt import PUBLISHED as GPT2_PUBLISHED
from tests.zoo.test_resnet import PUBLISHED as RESNET_PUBLISHED
from xla_cost import zoo
from xla_cost.cli import main
from xla_cost.analysis.report import PHASES
from xla_cost.analysis.report_tables import layer_frame, phase_frame

# xla_cost's caches on, shared with the other modules that opt in (tests/conftest.py): the zoo programs
# this module analyses again are read back, not compiled again.
pytestmark = pytest.mark.usefixtures("module_caches")


# Every alias with the parameter count its source publishes for that checkpoint
# (the Hugging Face architecture in its config.json): an alias must be the same
# architecture with the same parameter count as its zoo model.
HF_PARAMETERS = {
    # GPT2LMHeadModel, tied head: Radford et al. 2019 sizes (models/gpt.py)
    "gpt2": 124_439_808,
    "openai-community/gpt2": 124_439_808,
    "openai-community/gpt2-medium": 354_823_168,
    "openai-community/gpt2-large": 774_030_080,
    "openai-community/gpt2-xl": 1_557_611_200,
    # BertForMaskedLM, vocabulary 30522 (uncased)
    "bert-base-uncased": 109_514_298,
    "google-bert/bert-base-uncased": 109_514_298,
    "bert-large-uncased": 335_174_458,
    "google-bert/bert-large-uncased": 335_174_458,
    # ViTForImageClassification / timm, 1000 classes
    "vit-b/16": 86_567_656,
    "vit_base_patch16_224": 86_567_656,
    "google/vit-base-patch16-224": 86_567_656,
    # ResNetForImageClassification (v1.5, as torchvision)
    "microsoft/resnet-18": 11_689_512,
    "microsoft/resnet-34": 21_797_672,
    "microsoft/resnet-50": 25_557_032,
    "microsoft/resnet-101": 44_549_160,
    "microsoft/resnet-152": 60_192_808,
    # LlamaForCausalLM, untied head, no biases (Llama 2: vocabulary 32,000; Llama 3: 128,256)
    "meta-llama/Llama-2-7b-hf": 6_738_415_616,
    "meta-llama/Llama-2-13b-hf": 13_015_864_320,
    "meta-llama/Llama-2-70b-hf": 68_976_648_192,
    "meta-llama/Meta-Llama-3-8B": 8_030_261_248,
    "meta-llama/Meta-Llama-3-70B": 70_553_706_496,
    "meta-llama/Llama-3.1-405B": 405_853_388_800,
    # MixtralForCausalLM: 32 layers, d 4096, 8 experts of SwiGLU 14,336, untied head, vocabulary 32,000
    # (46.7B: Jiang et al. 2024 and the checkpoint's model card)
    "mistralai/Mixtral-8x7B-v0.1": 46_702_792_704,
    # DeepseekForCausalLM (DeepSeekMoE 16B, Dai et al. 2024: 16.4B): 28 layers, d 2048, vocabulary 102,400,
    # untied head; layer 0 a dense MLP of 10,944; 27 MoE layers of 64 routed + 2 shared experts of 1,408
    "deepseek-ai/deepseek-moe-16b-base": 2 * 102_400 * 2048 + 28 * (4 * 2048**2 + 2 * 2048) + 2048
    + 3 * 2048 * 10_944 + 27 * (66 * 3 * 2048 * 1408 + 64 * 2048),
}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def frame():
    return zoo.zoo_frame()


# ------------------------------------------------------------------ names


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("ResNet50", "resnet50"),
        ("resnet-50", "resnet50"),
        ("RESNET_50", "resnet50"),
        ("LinearNet", "linear_net"),
        ("linear-net", "linear_net"),
        ("Deeper Conv Net", "deeper_conv_net"),
        ("GPT2-Small", "gpt2-small"),
        ("gpt2", "gpt2-small"),
        ("GPT-2", "gpt2-small"),
        ("openai-community/gpt2-xl", "gpt2-xl"),
        ("gpt3_2.7B", "gpt3-2.7b"),
        ("BERT-base-uncased", "bert-base"),
        ("google/vit-base-patch16-224", "vit-b16"),
        ("ViT-B/16", "vit-b16"),
        ("microsoft/resnet-50", "resnet50"),
    ],
)
def test_names_any_case_and_separator(name, canonical):
    assert zoo.get_spec(name).name == canonical
    assert type(zoo.build_model(name)) is zoo.REGISTRY[canonical].module


def test_every_alias_has_its_published_parameter_count(frame):
    aliases = {alias: spec.name for spec in zoo.REGISTRY.values() for alias in spec.aliases}
    assert set(aliases) == set(HF_PARAMETERS)  # a new alias needs its published count here
    for alias, canonical in aliases.items():
        assert zoo.get_spec(alias).name == canonical
        assert frame.loc[canonical, "parameters"] == HF_PARAMETERS[alias], alias


def test_names_that_look_up_the_same_fail_at_registration():
    spec = zoo.REGISTRY["resnet50"]
    clash = zoo.ModelSpec("other", "d", spec.module, spec.input_shape, aliases=("ResNet-50",))
    with pytest.raises(ValueError, match="looks up the same as one of 'resnet50'"):
        zoo._registry([spec, clash])
    with pytest.raises(ValueError, match="zoo model 'resnet50' declared twice"):
        zoo._registry([spec, spec])


@pytest.mark.parametrize(
    "typo, suggestion",
    [
        ("resnt50", "Did you mean `resnet50`?"),
        ("gpt2-smal", "Did you mean `gpt2-small`?"),
        ("bert-base-uncasd", "Did you mean `bert-base-uncased` (= bert-base)?"),
        ("bert", "Did you mean `bert-base` or `bert-large`?"),
    ],
)
def test_typo_suggests_the_closest_name(typo, suggestion):
    with pytest.raises(xla_cost.InputError, match=re.escape(suggestion)) as info:
        zoo.get_spec(typo)
    assert str(info.value).startswith("Expected a zoo model name (linear_net, ")
    assert f"got {typo!r} instead" in str(info.value)


def test_no_suggestion_for_a_name_like_none():
    with pytest.raises(xla_cost.InputError) as info:
        zoo.get_spec("qqqqqqqq")
    assert "Did you mean" not in str(info.value) and "xla-cost models" in str(info.value)


def test_cli_typo_one_line_with_suggestion(capsys):
    code, out, err = run(capsys, "analyze", "resnt50")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "got 'resnt50' instead. Did you mean `resnet50`?" in err


def test_cli_reports_the_canonical_name(capsys):
    argv = ["--set", "n_layer=1", "--set", "seq_len=8", "--counter", "jaxpr", "--format", "json"]
    code, out, err = run(capsys, "analyze", "gpt2", *argv)
    assert code == 0, err
    data = json.loads(out)
    assert data["model"] == "gpt2-small"
    api = xla_cost.analyze(
        zoo.build_model("gpt2-small", n_layer=1, seq_len=8),
        zoo.example_inputs("gpt2-small", 1, n_layer=1, seq_len=8),
        counter="jaxpr", name="gpt2-small", config={"n_layer": 1, "seq_len": 8},  # the default optimizer, adam
    ).to_dict()
    assert data["flops"] == api["flops"] and data["parameters"] == api["parameters"]


# ------------------------------------------------------------------ minimums


def test_depth_0_allowed_negative_rejected():
    assert zoo.build_model("deeper_conv_net", depth=0).depth == 0
    with pytest.raises(xla_cost.InputError, match="depth to be an int >= 0, got -1"):
        zoo.build_model("deeper_conv_net", depth=-1)
    # other sizes stay >= 1; GPT's d_ff = 0 still means 4 * d_model
    with pytest.raises(xla_cost.InputError, match="image_size to be an int >= 1, got 0"):
        zoo.build_model("deeper_conv_net", image_size=0)
    assert zoo.build_model("gpt2-small", d_ff=0).d_ff == 0
    with pytest.raises(xla_cost.InputError, match="n_layer to be an int >= 1"):
        zoo.build_model("gpt2-small", n_layer=0)


def test_minimums_must_name_integer_fields():
    spec = zoo.REGISTRY["deeper_conv_net"]
    with pytest.raises(TypeError, match="not integer fields of DeeperConvNet"):
        zoo.ModelSpec("x", "d", spec.module, spec.input_shape, minimums={"dpeth": 0})


def test_cli_depth_0(capsys):
    code, out, err = run(
        capsys, "analyze", "deeper_conv_net", "--set", "depth=0", "--batch-size", "2",
        "--counter", "jaxpr", "--format", "json",
    )
    assert code == 0, err
    # forward from the closed form, plus the loss: softmax cross-entropy over the
    # B x 10 logits, a few FLOP per logit (max, subtract, exp, sum, log, pick)
    extra = json.loads(out)["jaxpr_flops"]["forward"] - F.deeper_conv_net_forward_total(2, 0)
    assert 0 <= extra <= 8 * 2 * 10
    code, _, err = run(capsys, "analyze", "deeper_conv_net", "--set", "depth=-1")
    assert code == 2 and "depth to be an int >= 0" in err


# ------------------------------------------------------------------ tables


def _header_words(frame: pd.DataFrame) -> set[str]:
    return {w for h in [frame.index.name or "", *map(str, frame.columns)] for w in h.split()}


def _least_width(frame: pd.DataFrame) -> int:
    # each column needs its longest word (header or cell); the box draws an edge
    # and a separator per column and pads each cell with a space either side
    columns = [[frame.index.name or "", *map(str, frame.index)]] + [
        [str(c), *map(str, frame[c])] for c in frame.columns
    ]
    return sum(max(len(w) for cell in col for w in cell.split()) for col in columns) + 3 * len(columns) + 1


def _tokens(text: str) -> set[str]:
    return {w for line in text.splitlines() for w in line.replace("┃", " ").replace("│", " ").split()}


def test_zoo_frame_raw_data(frame):
    assert frame.loc["gpt2-small", "input_dtype"] == "int32"
    assert frame.loc["resnet50", "input_dtype"] == "float"
    assert frame.loc["gpt2-small", "aliases"] == "gpt2, openai-community/gpt2"
    assert frame.loc["linear_net", "aliases"] == ""
    assert frame["parameters"].dtype.kind == "i"
    records = json.loads(zoo.render_zoo("json"))
    assert records[0]["name"] == "linear_net" and records[0]["parameters"] == F.mlp_params(224 * 224 * 3)
    assert {"input_dtype", "aliases", "config"} <= set(records[0])
    csv = pd.read_csv(io.StringIO(zoo.render_zoo("csv")), keep_default_na=False).set_index("name")
    assert list(csv.index) == list(zoo.REGISTRY) and csv.loc["bert-base", "input_dtype"] == "int32"
    with pytest.raises(xla_cost.InputError, match="a format in table, json, csv, markdown"):
        zoo.render_zoo("yaml")


def test_zoo_lists_active_parameters_where_a_model_declares_its_routing(frame):
    # Mixtral 8x7B (Jiang et al. 2024, Table 1): 32 layers of attention (d 4096, 32 heads
    # of 128, 8 KV heads, two norms), a router 4096 x 8 and 8 SwiGLU experts of 14,336, of
    # which a token reads 2; embedding and untied head 32,000 x 4096; the final norm.
    attention = 2 * 4096 * 32 * 128 + 2 * 4096 * 8 * 128 + 2 * 4096
    rest = 2 * 32_000 * 4096 + 4096
    total, active = (rest + 32 * (attention + 4096 * 8 + 3 * 4096 * 14_336 * experts) for experts in (8, 2))
    assert (frame.loc["mixtral-8x7b", "parameters"], frame.loc["mixtral-8x7b", "active_parameters"]) == (total, active)
    assert pd.isna(frame.loc["llama3-8b", "active_parameters"])  # declares no routing: not "all of them"
    records = {r["name"]: r for r in json.loads(zoo.render_zoo("json"))}
    assert records["mixtral-8x7b"]["active_parameters"] == active and records["gpt2-small"]["active_parameters"] is None
    lines = zoo.zoo_table(frame, width=400).splitlines()
    below = {lines[i].split("│")[1].strip(): lines[i + 1] for i in range(len(lines) - 1) if "│" in lines[i]}
    assert f"{active:,} active" in below["mixtral-8x7b"] and " active" not in below["llama3-8b"]
    # the families' options listed with their defaults
    assert "attention=dense, scan_layers=True, remat=none" in frame.loc["llama3-8b", "config"]
    assert "capacity_factor=1.25, dispatch=einsum" in frame.loc["mixtral-8x7b", "config"]


@pytest.mark.parametrize("width", [80, 100, 160])
def test_zoo_table_fits_the_width(frame, width):
    text = zoo.zoo_table(frame, width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text
    words = _tokens(text)
    assert {"name", "parameters", "input", "shape", "dtype", "description", "alias", "model"} <= words
    for name, row in frame.iterrows():
        assert name in words and f"{row.parameters:,}" in words
        assert row.input_dtype in words
        assert set(row.description.split()) <= words, name
    assert set(frame.loc["bert-base", "aliases"].replace(",", "").split()) <= words


def test_zoo_table_natural_width_off_a_terminal(frame):
    text = zoo.zoo_table(frame)  # pytest's stdout is not a terminal
    for row in frame.itertuples():
        assert any(row.description in line for line in text.splitlines()), row.Index


def test_terminal_width_when_stdout_is_a_terminal(monkeypatch, frame):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdout", Terminal())
    monkeypatch.setenv("COLUMNS", "90")
    assert max(len(line) for line in zoo.zoo_table(frame).splitlines()) <= 90


# `models` lists the zoo from `zoo_frame`, traced once per process: its tests are in this file (with
# `frame` above), so that one worker traces the zoo's 37 models once (5-6 CPU seconds), not two.
def test_models_lists_zoo(capsys):
    code, out, _ = run(capsys, "models", "--format", "json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert code == 0
    assert set(rows) == set(zoo.REGISTRY)  # every zoo model, with its count
    # LinearNet: (150528*4096 + 4096) + (4096*128 + 128) + (128*10 + 10)
    assert rows["linear_net"]["parameters"] == F.mlp_params(224 * 224 * 3)
    assert rows["one_net"]["input_shape"] == "(B, 1)"
    # published counts, with their sources, in tests/zoo/test_resnet.py, tests/zoo/test_bert_vit.py, tests/zoo/test_gpt.py
    assert rows["resnet50"]["parameters"] == RESNET_PUBLISHED["resnet50"]
    assert rows["bert-base"]["parameters"] == BERT_PUBLISHED["base"]
    assert rows["gpt2-small"]["parameters"] == GPT2_PUBLISHED["gpt2-small"]
    # GPT-3 175B: the closed form V*d + n_ctx*d + L*(12d^2 + 13d) + 2d
    v, t, n_layer, d = 50257, 2048, 96, 12288
    assert rows["gpt3-175b"]["parameters"] == v * d + t * d + n_layer * (12 * d * d + 13 * d) + 2 * d


def test_cli_models_is_render_zoo(capsys):
    code, out, err = run(capsys, "models")
    assert code == 0, err
    assert out == zoo.render_zoo("table")
    assert "input" in out and "dtype" in out


@pytest.mark.parametrize("width", [60, 80, 100, 200])
def test_report_table_fits_or_is_as_narrow_as_its_words(zoo_report, width):
    report = zoo_report("deeper_conv_net", 2, depth=3)
    text = report.to_table(width=width)
    assert "…" not in text
    frames = [phase_frame(report), layer_frame(report)]
    words = _tokens(text)
    for frame in frames:
        assert _header_words(frame) <= words  # e.g. backward/forward, never backward/forwa…
        assert {str(p) for p in frame.index} <= words
    tables = text.split("\nlayers (from the jaxprs)\n")
    assert len(tables) == 2
    for frame, part in zip(frames, tables):
        lines = [line for line in part.splitlines() if line[:1] in "┏┃┡│└"]
        widest = max(len(line) for line in lines)
        # where the longest words fit, the table fits; else it is no wider than they need
        assert widest <= max(width, _least_width(frame))
        assert widest == len(lines[0])
    prose = [line for line in text.splitlines() if line[:1] not in "┏┃┡│└"]
    assert max(len(line) for line in prose) <= width


def test_report_table_natural_width_off_a_terminal(zoo_report):
    report = zoo_report("deeper_conv_net", 2, depth=3)
    text = report.to_table()
    assert text == str(report)
    # nothing wraps: the header line and every header are whole on their lines
    assert text.splitlines()[0].endswith("counter xla")
    # units chosen per column: deeper_conv_net at batch 2 has 22 transcendentals (a plain count) and moves MBs
    assert "backward/forward" in text and "transcendentals" in text and "bytes accessed (MB)" in text
    with pytest.raises(xla_cost.InputError, match="width None or an integer >= 1"):
        report.to_table(width=0)


def test_report_table_fits_80_when_the_words_do(zoo_report):
    # counted from the jaxpr alone the phase table has three columns: it fits
    from xla_cost.zoo import build_model, example_inputs

    report = xla_cost.analyze(
        build_model("one_net"), example_inputs("one_net", 2), optimizer="sgd", counter="jaxpr",
        name="one_net",
    )
    text = report.to_table(width=80)
    assert _least_width(phase_frame(report)) <= 80
    assert max(len(line) for line in text.splitlines()) <= 80


# ------------------------------------------------------------------ one CSV


def test_cli_csv_per_layer_is_one_table(capsys, zoo_report):
    code, out, err = run(
        capsys, "analyze", "deeper_conv_net", "--batch-size", "2", "--set", "depth=3",
        "--per-layer", "--format", "csv",
    )
    assert code == 0, err
    table = pd.read_csv(io.StringIO(out))
    phases, layers = table[table.kind == "phase"], table[table.kind == "layer"]
    assert list(table.kind.unique()) == ["phase", "layer"]
    assert list(phases.name) == list(PHASES)
    report = zoo_report("deeper_conv_net", 2, "adam", depth=3)  # the command's default optimizer
    assert list(layers.name) == [layer.path for layer in report.layers]
    forward = phases.set_index("name").loc["forward"]
    assert layers.forward_flops.sum() == forward.jaxpr_flops
    grad = phases.set_index("name").loc["grad"]
    assert layers.backward_flops.sum() == grad.jaxpr_flops - forward.jaxpr_flops
    # the layers' forward FLOP from the closed form
    by_name = layers.set_index("name")
    for path, flops in F.deeper_conv_net_forward_layers(2, 3).items():
        assert by_name.loc[path, "forward_flops"] == flops, path
    # the CLI prints what the library renders
    assert out == report.to_csv()


def test_csv_without_layers_has_the_same_leading_columns(zoo_report):
    report = zoo_report("conv_net", 2, per_layer=False)
    table = pd.read_csv(io.StringIO(report.to_csv()))
    assert list(table.columns[:3]) == ["kind", "name", "flops"]
    assert list(table.name) == list(PHASES) and set(table.kind) == {"phase"}
    assert table.set_index("name").loc["grad", "flops"] == report.phases["grad"].flops


def test_version_prints_the_package_version(capsys):
    code, out, err = run(capsys, "--version")
    assert (code, out.strip(), err) == (0, f"xla-cost {xla_cost.__version__}", "")
