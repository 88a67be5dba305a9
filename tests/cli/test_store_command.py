"""``xla-cost store list|show|delete|vacuum``: what the results store holds, and cleaning it (issue 24)."""

from __future__ import annotations

import json
import time
import types

import pytest

import xla_cost
from xla_cost.cli.main import main
from xla_cost.compiled import store as store_module


FAILING = "tests.custom_models:NnxMLP"


@pytest.fixture()
def store(tmp_path):
    path = tmp_path / "s.sqlite"
    # two analyses that work and one that fails (NnxMLP takes 12 features: at 7 it fails to trace)
    xla_cost.sweep(["one_net"], batch_sizes=[1, 2], counter="jaxpr", jobs=0, progress=False, store=path)
    xla_cost.sweep([FAILING], batch_sizes=[1], input_shape=(1, 7), counter="jaxpr", jobs=0,
                   progress=False, store=path)
    return path


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_every_row_and_filters(store, capsys):
    code, out, _ = _run(capsys, "store", "list", "--store", str(store), "--format", "json")
    assert code == 0
    rows = json.loads(out)["rows"]
    assert sorted((r["model"], r["status"]) for r in rows) == [
        ("one_net", "ok"), ("one_net", "ok"), (FAILING, "failed")]
    _, out, _ = _run(capsys, "store", "list", "--store", str(store), "--failed")
    assert out.startswith("1 stored results (failed), 1 failed")
    _, out, _ = _run(capsys, "store", "list", "--store", str(store), "--failed", "--format", "json")
    (row,) = json.loads(out)["rows"]
    assert row["model"] == FAILING and "got (7,) and (12,)" in row["error"]  # 7 features against fc1's 12
    _, out, _ = _run(capsys, "store", "list", "--store", str(store), "--model", "one_net", "--format", "json")
    assert [r["model"] for r in json.loads(out)["rows"]] == ["one_net", "one_net"]
    assert xla_cost.store_contents(store, model="one_net").to_frame()["model"].tolist() == ["one_net", "one_net"]


def test_show_renders_a_stored_report(store, capsys):
    key = xla_cost.store_contents(store, model="one_net").rows[0].key
    code, out, _ = _run(capsys, "store", "show", key[:8], "--store", str(store))
    assert code == 0 and out.startswith("one_net() batch")
    code, _, err = _run(capsys, "store", "show", "", "--store", str(store))
    assert code == 2 and err.count("\n") == 1


def test_delete_needs_a_selection_and_removes_only_it(store, capsys):
    code, _, err = _run(capsys, "store", "delete", "--store", str(store))
    assert code == 2 and "what to delete" in err and err.count("\n") == 1
    assert len(xla_cost.store_contents(store).rows) == 3  # nothing went
    code, out, _ = _run(capsys, "store", "delete", "--failed", "--store", str(store))
    assert code == 0 and out == "deleted 1 stored result\n"
    assert [r.status for r in xla_cost.store_contents(store).rows] == ["ok", "ok"]
    assert xla_cost.store_delete(store, model="one_net") == 2
    code, out, _ = _run(capsys, "store", "vacuum", "--store", str(store))
    assert code == 0 and out.startswith("vacuumed:")


def test_a_missing_store_is_one_line_and_nothing_is_created(tmp_path, capsys):
    missing = tmp_path / "nope.sqlite"
    code, out, err = _run(capsys, "store", "list", "--store", str(missing))
    assert code == 2 and not out and "an existing results store" in err and err.count("\n") == 1
    assert not missing.exists()


# (key, model, seconds after 2023-11-14T22:13:20Z): stored in this order; the keys run against the
# time order, so that a listing by key alone, or newest first, reads differently
DATED = [("abc3", "one_net", 0), ("abc2", "one_net", 1), ("abd1", "conv_net", 2), ("xyz0", "one_net", 3)]
START = 1_700_000_000  # 2023-11-14T22:13:20Z


@pytest.fixture()
def dated(tmp_path, monkeypatch):
    """A store file whose rows were stored at known seconds (the store's clock replaced)."""
    clock = iter(time.gmtime(START + seconds) for *_, seconds in DATED)
    monkeypatch.setattr(store_module, "time", types.SimpleNamespace(strftime=time.strftime, gmtime=lambda: next(clock)))
    path = tmp_path / "dated.sqlite"
    with store_module.Store(path) as db:
        for key, model, _ in DATED:
            db.put(key, model=model, config={"model": model}, environment={}, report={"model": model})
    return path


def test_list_shows_the_oldest_row_first(dated, capsys):
    code, out, _ = _run(capsys, "store", "list", "--store", str(dated), "--format", "json")
    assert code == 0
    # stored at 22:13:20, :21, :22 and :23
    assert [(r["key"], r["created"]) for r in json.loads(out)["rows"]] == [
        ("abc3", "2023-11-14T22:13:20Z"), ("abc2", "2023-11-14T22:13:21Z"),
        ("abd1", "2023-11-14T22:13:22Z"), ("xyz0", "2023-11-14T22:13:23Z")]
    _, out, _ = _run(capsys, "store", "list", "--store", str(dated), "--model", "one_net", "--format", "json")
    assert [r["key"] for r in json.loads(out)["rows"]] == ["abc3", "abc2", "xyz0"]
    assert [r.key for r in xla_cost.store_contents(dated, key="abc").rows] == ["abc3", "abc2"]


def test_an_empty_key_or_model_selects_nothing_to_delete(dated, capsys):
    for empty in ({"key": ""}, {"model": ""}, {"key": "", "model": ""}):
        with pytest.raises(xla_cost.InputError, match="what to delete") as refused:
            xla_cost.store_delete(dated, **empty)
        assert "\n" not in str(refused.value)  # one line
    # `store delete ""`: the key given empty, refused on one line, as the key left out is
    code, out, err = _run(capsys, "store", "delete", "", "--store", str(dated))
    assert code == 2 and not out and "what to delete" in err and err.count("\n") == 1
    assert len(xla_cost.store_contents(dated).rows) == len(DATED)  # nothing went
    # a prefix deletes the rows whose key starts with it: abc3 and abc2, not abd1 or xyz0
    assert xla_cost.store_delete(dated, key="abc") == 2
    assert [r.key for r in xla_cost.store_contents(dated).rows] == ["abd1", "xyz0"]
    code, out, _ = _run(capsys, "store", "delete", "--key", "abd1", "--store", str(dated))
    assert code == 0 and out == "deleted 1 stored result\n"
    assert [r.key for r in xla_cost.store_contents(dated).rows] == ["xyz0"]


def test_a_zoo_model_is_selected_by_any_of_its_names(store, capsys):
    # a seventh new user's `store list --model gpt2` (an alias `analyze gpt2` takes) matched none of the
    # gpt2-small rows, and `store delete` deleted nothing, exit 0 both
    for name in ("One-Net", "ONE_NET"):
        _, out, _ = _run(capsys, "store", "list", "--store", str(store), "--model", name, "--format", "json")
        assert [r["model"] for r in json.loads(out)["rows"]] == ["one_net", "one_net"], name
    assert xla_cost.store_contents(store, model=FAILING).rows  # a model outside the zoo: by its name as given
    code, out, _ = _run(capsys, "store", "delete", "--store", str(store), "--model", "OneNet")
    assert code == 0 and xla_cost.store_contents(store, model="one_net").rows == ()
