"""``xla-cost store list|show|delete|vacuum``: what the results store holds, and cleaning it (issue 24)."""

from __future__ import annotations

import json

import pytest

import xla_cost
from xla_cost.cli.main import main


@pytest.fixture()
def store(tmp_path):
    path = tmp_path / "s.sqlite"
    # two analyses that work and one that fails (deeper_conv_net refuses a negative depth)
    xla_cost.sweep(["one_net"], batch_sizes=[1, 2], counter="jaxpr", jobs=0, progress=False, store=path)
    xla_cost.sweep(["deeper_conv_net"], batch_sizes=[1], settings={"depth": [-1]}, counter="jaxpr", jobs=0,
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
        ("deeper_conv_net", "failed"), ("one_net", "ok"), ("one_net", "ok")]
    _, out, _ = _run(capsys, "store", "list", "--store", str(store), "--failed")
    assert out.startswith("1 stored results (failed), 1 failed") and "depth" in out
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
