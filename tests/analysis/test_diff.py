"""`xla_cost.diff` and ``xla-cost diff``: two analyses side by side (issue 30).

Real analyses of seed 001's networks (counted from the jaxprs: exact and
fast), compared batch 4 against 8, float32 against bfloat16, no remat against
full remat, depth 0 against 3; every expected change is derived from the
networks' dimensions (`tests/formulas.py`) beside it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib

import pandas as pd
import pytest

import xla_cost
from xla_cost.analysis.timing import PhaseTiming, Timing
from xla_cost.cli import main
from xla_cost.errors import InputError

from tests import formulas as F

ONE_NET = 1 * 4096 + 4096 + 4096 * 128 + 128 + 128 * 10 + 10
"""OneNet's parameters: fc1 1 -> 4096, fc2 4096 -> 128, fc3 128 -> 10, with biases (F.mlp_params(1))."""

LAYER_PARAMETERS = {"fc1": 4096 + 4096, "fc2": 4096 * 128 + 128, "fc3": 128 * 10 + 10, xla_cost.REMAINDER: 0}


def _run(model: str, batch: int, remat: str | None = None, **options) -> xla_cost.Report:
    """The analysis ``xla-cost analyze MODEL --batch-size BATCH --optimizer sgd`` runs (from the jaxprs
    unless ``counter``; SGD, whose closed forms the tests use, unless ``optimizer``)."""
    run = xla_cost.RunConfig(model, batch, counter=options.pop("counter", "jaxpr"),
                             optimizer=options.pop("optimizer", "sgd"), **options)
    return run.run(**({"remat": remat} if remat else {}))


@pytest.fixture(scope="module")
def one_net():
    """``one_net(batch, **RunConfig options)``: analyses of OneNet, per layer, cached."""
    cache: dict[tuple, xla_cost.Report] = {}

    def get(batch: int, **options) -> xla_cost.Report:
        key = (batch, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = _run("one_net", batch, per_layer=True, **options)
        return cache[key]

    return get


def _one_net_layers(b: int) -> dict[str, tuple[int, int]]:
    """OneNet's per-layer (forward, backward) FLOP at batch b, from the closed forms."""
    return {
        # fc1's contraction has length 1: XLA and the jaxpr count B*4096 multiplies, plus the bias B*4096
        "fc1": (2 * b * 4096, F.dense_backward_flops(b, 1, 4096, first=True)),
        "fc2": (F.dense_flops(b, 4096, 128), F.dense_backward_flops(b, 4096, 128)),
        "fc3": (F.dense_flops(b, 128, 10), F.dense_backward_flops(b, 128, 10)),
        # the two ReLUs (one max per element; mask and select backward) and the loss
        xla_cost.REMAINDER: (b * (4096 + 128) + F.loss_flops(b, 10),
                             F.relu_backward_flops(b * (4096 + 128)) + F.loss_backward_flops(b, 10)),
    }


# ------------------------------------------------------------------ what changes, exactly


def test_doubling_the_batch(one_net):
    a, b = one_net(4), one_net(8)
    result = xla_cost.diff(a, b)
    assert result.differences == {"batch_size": (4, 8)}
    # the forward phase: the layers, ReLUs and loss of F.mlp_forward_phase at each batch
    forward = result.phase("forward")
    assert (forward.a, forward.b) == (F.mlp_forward_phase(4, 1), F.mlp_forward_phase(8, 1))
    assert forward.change == F.mlp_forward_phase(8, 1) - F.mlp_forward_phase(4, 1)
    assert result.phase("backward").change == F.mlp_backward_phase(8, 1) - F.mlp_backward_phase(4, 1)
    # SGD's update does not see the batch: 2 FLOP a parameter on both sides
    update = result.phase("update")
    assert (update.a, update.b, update.change, update.ratio, update.status) == (2 * ONE_NET, 2 * ONE_NET, 0, 1.0, "same")
    # a Dense layer's forward is 2*B*in*out + B*out: doubling B doubles it exactly
    at_4, at_8 = _one_net_layers(4), _one_net_layers(8)
    fc2 = result.layer("fc2")
    assert fc2.change_in("forward") == F.dense_flops(8, 4096, 128) - F.dense_flops(4, 4096, 128) == 2 * 4 * 4096 * 128 + 4 * 128
    assert fc2.flops("b", "forward") / fc2.flops("a", "forward") == 2.0
    expected = {path: (at_8[path][0] - at_4[path][0]) + (at_8[path][1] - at_4[path][1]) for path in at_4}
    for path, change in expected.items():
        row = result.layer(path)
        assert row.change == change, path
        assert row.change_in("forward") == at_8[path][0] - at_4[path][0], path
        assert row.change_in("backward") == at_8[path][1] - at_4[path][1], path
        assert row.change_in("update") == 0, path
        assert (row.status, row.a.parameters, row.b.parameters) == ("changed", LAYER_PARAMETERS[path], LAYER_PARAMETERS[path])
    # ranked by the absolute change in FLOP: fc2 12,583,936, fc1 81,920, the remainder 50,964, fc3 30,800
    ranking = sorted(expected, key=lambda p: -abs(expected[p]))
    assert ranking == ["fc2", "fc1", xla_cost.REMAINDER, "fc3"]
    assert [row.path for row in result.layers] == ranking
    assert [row.rank for row in result.layers] == [1, 2, 3, 4]


def test_float32_against_bfloat16(one_net):
    result = xla_cost.diff(one_net(4), one_net(4, dtype="bfloat16"))
    assert result.differences == {"dtype": ("float32", "bfloat16")}
    # bfloat16 computes with float32 parameters: each parameter is cast to bfloat16 in the forward
    # pass and its gradient back to float32 in the backward pass (1 FLOP an element each); the
    # loss casts the logits to float32 (B*10) and its cotangent back
    for path, parameters in LAYER_PARAMETERS.items():
        cast = parameters if parameters else 4 * 10
        row = result.layer(path)
        assert (row.change_in("forward"), row.change_in("backward"), row.change_in("update")) == (cast, cast, 0), path
    assert result.phase("forward").change == ONE_NET + 4 * 10
    assert result.phase("update").status == "same"  # the update stays in float32
    # fc2 (2 x 524,416), fc1 (2 x 8,192), fc3 (2 x 1,290), the remainder (2 x 40)
    assert [row.path for row in result.layers] == ["fc2", "fc1", "fc3", xla_cost.REMAINDER]


def test_no_remat_against_full_remat(one_net):
    result = xla_cost.diff(one_net(4), one_net(4, remat="full"))
    # jax.checkpoint around the whole model: the backward pass recomputes what fc3's gradient
    # reads, fc1, its ReLU, fc2 and its ReLU (2*B*4096, 2*B*4096*128 + B*128, B*(4096 + 128));
    # fc3's own output is not read again
    recomputed = {"fc1": 2 * 4 * 4096, "fc2": F.dense_flops(4, 4096, 128), xla_cost.REMAINDER: 4 * (4096 + 128)}
    for path, flops in recomputed.items():
        row = result.layer(path)
        assert (row.change_in("forward"), row.change_in("backward"), row.change_in("update")) == (0, flops, 0), path
    assert result.layer("fc3").status == "same"
    assert result.phase("forward").status == "same"
    assert result.phase("backward").change == sum(recomputed.values())
    assert [row.path for row in result.layers] == ["fc2", "fc1", xla_cost.REMAINDER, "fc3"]
    # the model FLOP (without the recomputation) are shown beside them
    model = result.phase("backward", "model_flops")
    assert model.a == result.phase("backward").a


def test_added_and_removed_layers():
    a = _run("deeper_conv_net", 2, config={"depth": 0}, per_layer=True)
    b = _run("deeper_conv_net", 2, config={"depth": 3}, per_layer=True)
    result = xla_cost.diff(a, b)
    # depth 0 never calls conv_layer: Flax makes no parameters for it, so it has no row in A
    assert result.differences["config"] == ({"depth": 0}, {"depth": 3})
    assert result.differences["parameters"] == (F.deeper_conv_net_params(0), F.deeper_conv_net_params(3))
    forward = F.deeper_conv_net_forward_layers(2, 3)["conv_layer"]
    backward = F.deeper_conv_net_backward_layers(2, 3)["conv_layer"]
    added = result.layer("conv_layer")
    assert (added.status, added.a, added.rank) == ("added", None, 1)
    assert added.flops("a") is None  # absent, not 0
    # SGD: 2 FLOP for each of its 32*32*9 parameters
    assert added.change == forward + backward + 2 * 32 * 32 * 9
    assert added.ratio is None
    # the three ReLUs after it are the remainder's: B*55*55*32 each forward (55: the pooled map)
    p1 = F.out_size(F.out_size(224, 7, 2, 3), 3, 2, 0)
    assert result.layer(xla_cost.REMAINDER).change_in("forward") == 3 * 2 * p1 * p1 * 32
    assert [result.layer(p).status for p in ("first_layer", "convN", "fc1")] == ["same"] * 3
    backwards = xla_cost.diff(b, a, top=2)
    removed = backwards.layer("conv_layer")
    assert (removed.status, removed.b, removed.change) == ("removed", None, -added.change)
    assert [row.path for row in backwards.layers] == ["conv_layer", xla_cost.REMAINDER]
    assert backwards.layers_left_out == 3
    assert "the 2 largest of 5" in backwards.to_table()
    table = result.to_table()
    assert "absent" in table and "added" in table


# ------------------------------------------------------------------ unknown, absent, timed


def test_unknown_is_not_zero(one_net):
    compiled = _run("one_net", 2, counter="xla")
    counted = _run("one_net", 2)
    result = xla_cost.diff(compiled, counted)
    row = result.phase("forward", "bytes_accessed")
    assert row.a == compiled.phases["forward"].bytes_accessed > 0
    assert (row.b, row.change, row.ratio, row.status) == (None, None, None, "unknown")
    assert result.to_frame().loc[("forward", "bytes_accessed"), "b"] is None
    assert "A was counted by xla, B by jaxpr" in " ".join(result.notes)
    assert result.layers is None  # neither has per-layer rows
    # a figure neither side knows has no row: two jaxpr counts have no bytes
    with pytest.raises(KeyError):
        xla_cost.diff(counted, counted).phase("forward", "bytes_accessed")
    # a per-layer report against one without: said, not guessed
    assert "per-layer rows only in A" in " ".join(xla_cost.diff(one_net(2), counted).notes)


def test_a_phase_on_one_side_only(one_net):
    a = one_net(4)
    phases = dict(a.phases)
    train_step = phases.pop("train_step")
    b = dataclasses.replace(a, phases={**phases, "other": a.phases["update"], "train_step": train_step})
    result = xla_cost.diff(a, b)
    order = list(dict.fromkeys(row.phase for row in result.phases))
    assert order == ["forward", "backward", "grad", "update", "other", "train_step"]
    other = result.phase("other")
    assert (other.status, other.a, other.b, other.change) == ("added", None, 2 * ONE_NET, None)
    assert "absent" in result.to_table()


def test_measured_time_read_from_a_timed_json(tmp_path, one_net):
    a = one_net(4)
    # two made-up measurements: 2 ms and 0.5 ms (only their difference and ratio are checked)
    timing = Timing("cpu", None, "float32", {"train_step": PhaseTiming(0.002, None, None, 5),
                                             "forward": PhaseTiming(0.0005, None, None, 5)}, {}, None)
    path = tmp_path / "timed.json"
    path.write_text(dataclasses.replace(a, timing=dataclasses.replace(timing, phases={
        "train_step": PhaseTiming(0.003, None, None, 5), "forward": PhaseTiming(0.0005, None, None, 5)})).to_json())
    result = xla_cost.diff(dataclasses.replace(a, timing=timing), path)
    row = result.phase("train_step", "seconds")
    assert (row.a, row.b) == (0.002, 0.003)
    assert row.change == pytest.approx(0.001) and row.ratio == pytest.approx(1.5)
    assert result.phase("forward", "seconds").status == "same"
    assert result.labels == ("A", str(path))
    assert "measured time only" not in " ".join(result.notes)


def test_different_models_are_compared_with_a_note():
    a, b = _run("one_net", 1, per_layer=True), _run("conv_net", 1, per_layer=True)
    result = xla_cost.diff(a, b, labels=("mlp", "cnn"))
    assert result.differences["model"] == ("one_net", "conv_net")
    assert "different models (one_net, conv_net)" in " ".join(result.notes)
    assert result.labels == ("mlp", "cnn") and result.to_table().startswith("A (mlp): one_net")
    assert {row.status for row in result.layers} >= {"added", "removed", "changed"}  # fc1 is in both


# ------------------------------------------------------------------ renderings


def test_renderings_agree(one_net):
    result = xla_cost.diff(one_net(4), one_net(8), top=3)
    data = json.loads(result.to_json())
    assert data["layers_ranked_by"].startswith("absolute change in FLOP")
    assert [row["path"] for row in data["layers"]] == ["fc2", "fc1", xla_cost.REMAINDER]
    assert data["differences"] == {"batch_size": [4, 8]} and data["layers_left_out"] == 1
    frame = result.to_frame()
    assert frame.loc[("update", "flops"), "change"] == 0
    assert frame.loc[("forward", "flops"), "b"] == F.mlp_forward_phase(8, 1)
    assert isinstance(frame.loc[("forward", "flops"), "b"], int)  # exact, not a float
    layers = result.layers_frame()
    assert list(layers.index) == ["fc2", "fc1", xla_cost.REMAINDER]
    assert layers.loc["fc2", "forward_change"] == 2 * 4 * 4096 * 128 + 4 * 128
    csv = pd.read_csv(io.StringIO(result.to_csv()))
    assert set(csv["kind"]) == {"phase", "layer"}
    assert csv.loc[csv["name"] == "fc2", "change"].item() == layers.loc["fc2", "change"]
    markdown = result.to_markdown()
    assert markdown.startswith("## A -> B") and "| fc2 | changed |" in markdown
    assert result._repr_markdown_() == markdown
    table = result.to_table(width=200)
    assert "largest first" in table and "differs: batch_size 4 -> 8" in table
    layer_rows = table[table.index("largest first"):]
    assert layer_rows.index("fc2") < layer_rows.index("fc1") < layer_rows.index("(remainder)")
    assert "fc3" not in layer_rows  # ranked fourth, below top=3


def test_python_refusals(one_net):
    a = one_net(4)
    with pytest.raises(InputError, match="top None or an integer >= 1"):
        xla_cost.diff(a, a, top=0)
    with pytest.raises(InputError, match="labels as two non-empty strings"):
        xla_cost.diff(a, a, labels=("only one",))
    with pytest.raises(InputError, match="B as a Report or the path"):
        xla_cost.diff(a, a.to_dict())
    with pytest.raises(InputError, match="a phase in common"):
        xla_cost.diff(a, dataclasses.replace(a, phases={"eval": a.phases["forward"]}))


# ------------------------------------------------------------------ the command line


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working directory of its own, with its own (absent) results store."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XLA_COST_STORE", str(tmp_path / "store.sqlite"))
    return tmp_path


def _analyze(capsys, batch: int, output: str) -> None:
    code = main(["analyze", "one_net", "--batch-size", str(batch), "--per-layer", "--counter", "jaxpr",
                 "--format", "json", "--output", output, "--quiet"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()


def test_cli_round_trip(capsys, place):
    _analyze(capsys, 4, "a.json")
    _analyze(capsys, 8, "b.json")
    assert main(["diff", "a.json", "b.json"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("A (a.json): one_net() batch 4")
    layers = out[out.index("largest first"):]
    assert layers.index("fc2") < layers.index("fc1") < layers.index("(remainder)") < layers.index("fc3")
    assert main(["diff", "a.json", "b.json", "--format", "json", "--top", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == xla_cost.diff("a.json", "b.json", top=1).to_dict()  # the CLI is the library's call
    assert [row["path"] for row in data["layers"]] == ["fc2"]
    assert data["layers"][0]["forward_change"] == F.dense_flops(4, 4096, 128)  # 2*B*in*out + B*out at B = 4
    assert main(["diff", "a.json", "b.json", "--format", "markdown", "--output", "diff.md"]) == 0
    assert capsys.readouterr().out == ""
    assert pathlib.Path("diff.md").read_text().startswith("## a.json -> b.json")


def _refused(capsys, place: pathlib.Path, *argv: str, words: str) -> None:
    before = sorted(p.name for p in place.iterdir())
    code = main(["diff", *argv])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "", err
    assert len(lines) == 1 and lines[0].startswith("xla-cost: error: Expected "), err
    assert words in lines[0], lines[0]
    assert sorted(p.name for p in place.iterdir()) == before  # nothing written


def test_cli_refusals(capsys, place):
    _analyze(capsys, 4, "a.json")
    pathlib.Path("table.txt").write_text("phase  FLOP\nforward 1\n")
    assert main(["sweep", "one_net", "--counter", "jaxpr", "--jobs", "0", "--quiet", "--format", "json",
                 "--output", "sweep.json"]) == 0
    capsys.readouterr()
    pathlib.Path("folder").mkdir()
    _refused(capsys, place, "a.json", "missing.json", "--output", "out.txt", words="'missing.json', which does not exist")
    _refused(capsys, place, "a.json", "table.txt", "--output", "out.txt", words="which is not JSON")
    _refused(capsys, place, "sweep.json", "a.json", "--output", "out.txt", words="keys runs")
    _refused(capsys, place, "a.json", "folder", "--output", "out.txt", words="a directory")
    _refused(capsys, place, "a.json", "a.json", "--top", "0", "--output", "out.txt", words="top None or an integer >= 1")
    _refused(capsys, place, "a.json", "a.json", "--output", "a.json", words="--output other than the reports compared")
    assert json.loads(pathlib.Path("a.json").read_text())["batch_size"] == 4  # not overwritten


def test_report_from_json_reads_back_what_to_json_wrote(one_net):
    report = one_net(4)
    again = xla_cost.Report.from_json(report.to_json())
    assert again.phases["forward"].flops == report.phases["forward"].flops == F.mlp_forward_phase(4, 1)
    assert [layer.path for layer in again.layers] == [layer.path for layer in report.layers]
    for text, words in (("phase FLOP", "not JSON"), ("[1, 2]", "a JSON list"), ('{"model": "m"}', "not a report")):
        with pytest.raises(ValueError, match=words):
            xla_cost.Report.from_json(text)


def test_a_layer_whose_parameters_changed_is_changed_even_where_its_flop_are_not(one_net):
    # two analyses whose fc2 differs only in the parameters it holds (the second read from a JSON in which
    # fc2 holds one more bias element: a parameter no equation reads costs no FLOP, in no pass)
    a = one_net(4)
    data = json.loads(a.to_json())
    (row,) = [layer for layer in data["layers"] if layer["path"] == "fc2"]
    row["parameters"] += 1
    b = xla_cost.Report.from_json(json.dumps(data))
    result = xla_cost.diff(a, b)
    fc2 = result.layer("fc2")
    assert all(fc2.change_in(p) == 0 for p in ("forward", "backward", "update"))
    assert fc2.status == "changed"
    assert (fc2.a.parameters, fc2.b.parameters) == (LAYER_PARAMETERS["fc2"], LAYER_PARAMETERS["fc2"] + 1)
    assert [result.layer(p).status for p in ("fc1", "fc3")] == ["same", "same"]
    (line,) = [line for line in result.to_table().splitlines() if "fc2" in line]
    assert "changed" in line and f"{LAYER_PARAMETERS['fc2']:,} -> {LAYER_PARAMETERS['fc2'] + 1:,}" in line
