"""Sweeps, the results store, the cache directory and `SweepResult.plot` as a second new user
broke them (issue 30, rows 18-22, 25-28 and 31 of "Refusals and odd inputs").

Each case runs its exact command in-process (`xla_cost.cli.main`), in a working directory of
its own with its own results store: a refusal is one line on stderr saying what was expected,
what came and how to fix it, exit code 2, nothing on stdout and nothing written or stored (no
store file); the others do what the row says they should.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import threading
import time

import matplotlib.figure
import pandas as pd
import pytest

import xla_cost
from tests.formulas import conv_net_params, dense_flops, mlp_params
from tests.refusals import one_line_refusal
from xla_cost.cli import main
from xla_cost.choices import DTYPES, FLOAT8
from xla_cost.compiled.store import STORE_ENV, Store
from xla_cost.compiled.xla import CACHE_DIR_ENV, NO_CACHE_ENV, check_cache_dir

SGD_FLOPS_PER_PARAM = 2  # seed 001, appendix B: SGD costs 2 FLOP per parameter (multiply, subtract)


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working directory of its own with its own (absent) results store."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "store.sqlite"))
    return tmp_path


def _refused(capsys, place: pathlib.Path, *argv: str, words: str) -> str:
    """Runs ``xla-cost ARGV``: one line naming ``words``, exit 2, nothing printed, nothing left."""
    before = sorted(p.name for p in place.iterdir())
    line = one_line_refusal(capsys, argv, words)
    assert sorted(p.name for p in place.iterdir()) == before  # no store file, no output
    return "xla-cost: error: " + line


def _put(db: Store, key: str, model: str, **config) -> None:
    db.put(key, model=model, config={"model": model, **config}, environment={}, report={"model": model})


# ------------------------------------------------------------------ 18: dtypes and jobs


def test_row_18_sweep_float64_is_refused_before_anything_runs(capsys, place):
    # before: exit 0, a table with one failed row, and the failed row stored
    _refused(capsys, place, "sweep", "one_net", "--dtypes", "float64", "--jobs", "0",
             words="dtypes among float32, bfloat16, float16, float8, got 'float64'")
    with pytest.raises(xla_cost.InputError, match="dtypes among"):
        xla_cost.sweep("one_net", dtypes=["float32", "float64"], jobs=0, store=place / "store.sqlite")
    assert not (place / "store.sqlite").exists()


def test_row_18_a_bad_jobs_count_is_refused_before_anything_runs(capsys, place):
    _refused(capsys, place, "sweep", "one_net", "--jobs", "-1",
             words="jobs a number of worker processes, 0 or more, got -1")


def test_row_18_every_dtype_the_sweep_accepts_runs(capsys, place):
    # the dtypes that are not refused are the ones that work: one ok row each; float8 (FP8 products) is the
    # gpt, llama, gemma and mixtral families' alone, refused for one_net before anything runs
    dtypes = [dtype for dtype in DTYPES if dtype != FLOAT8]
    result = xla_cost.sweep("one_net", dtypes=dtypes, counter="jaxpr", jobs=0, progress=False)
    assert list(result.runs["dtype"]) == dtypes
    assert list(result.runs["status"]) == ["ok"] * len(dtypes), list(result.runs["error"])
    _refused(capsys, place, "sweep", "one_net", "--dtypes", "float8", "--jobs", "0",
             words="float8 (FP8 matrix products) with a model of the gpt, llama, gemma, mixtral families")


# ------------------------------------------------------------------ 19: settings read by their field's type


def test_row_19_a_setting_that_is_not_its_fields_type_is_refused(capsys, place):
    # before: both values strings, both configurations stored as failed, exit 0
    _refused(capsys, place, "sweep", "deeper_conv_net", "--set", "depth=1,x",
             words="depth (a deeper_conv_net setting) as an int, got 'x'")


def test_row_19_a_setting_given_as_text_is_read_as_its_fields_type(place):
    (config,) = xla_cost.configurations("deeper_conv_net", settings={"depth": ["1"]})
    assert config.config == {"depth": 1} and type(config.config["depth"]) is int
    # "1" and 1 are the same configuration
    assert len(xla_cost.configurations("deeper_conv_net", settings={"depth": ["1", 1]})) == 1
    for bad in (1.5, True, "1.0"):
        with pytest.raises(xla_cost.InputError, match="depth .a deeper_conv_net setting. as an int"):
            xla_cost.configurations("deeper_conv_net", settings={"depth": [bad]})


# ------------------------------------------------------------------ 20: --layers implies --per-layer


def test_row_20_layers_without_per_layer_writes_the_layers(capsys, place):
    # before: a header-only file; --layers now implies --per-layer, as --depth does
    code = main(["sweep", "one_net", "--layers", "l.csv", "--jobs", "0", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0 and err == "", err
    layers = pd.read_csv(place / "l.csv").set_index("path")
    # OneNet: 1 -> 4096 -> 128 -> 10 (xla_cost.zoo.seed_nets), batch 1; parameters kernel + bias
    assert layers.loc["fc1", "parameters"] == 1 * 4096 + 4096
    assert layers.loc["fc2", "parameters"] == 4096 * 128 + 128
    assert layers.loc["fc3", "parameters"] == 128 * 10 + 10
    assert layers.loc["fc2", "forward_flops"] == dense_flops(1, 4096, 128)
    assert layers.loc["fc3", "forward_flops"] == dense_flops(1, 128, 10)


# ------------------------------------------------------------------ 21, 22: --scheduler


def test_row_21_a_scheduler_address_where_nothing_listens_fails_fast(capsys, place):
    pytest.importorskip("distributed")
    start = time.monotonic()
    # before: 64 s of silence, then "after 30 s", and a store file left behind
    _refused(capsys, place, "sweep", "one_net", "--scheduler", "tcp://127.0.0.1:1",
             words="'tcp://127.0.0.1:1', where nothing answered")
    assert time.monotonic() - start < 5


class _NotDask:
    """A loopback server that answers every connection with an HTTP reply and closes it."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = "tcp://127.0.0.1:%d" % self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:  # closed
                return
            with connection:
                connection.sendall(b"HTTP/1.1 200 OK\r\n\r\nhello")

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept() waiting in the thread
        self.server.close()
        self.thread.join(timeout=5)


def test_row_22_an_address_where_something_else_answers_is_no_scheduler(capsys, place):
    pytest.importorskip("distributed")
    server = _NotDask()
    try:
        start = time.monotonic()
        # before: MemoryError: Unable to allocate 3.07 EiB (and a store file)
        line = _refused(capsys, place, "sweep", "one_net", "--scheduler", server.address,
                        words=f"'{server.address}', where no Dask scheduler answered")
        assert "MemoryError" not in line
        assert time.monotonic() - start < 5
    finally:
        server.close()


# ------------------------------------------------------------------ 25-27, counts: the store command


@pytest.fixture
def two_models(place):
    """A store of three one_net rows and one conv_net row, keys chosen to share prefixes."""
    path = place / "store.sqlite"
    with Store(path) as db:
        for key, model in (("abc1", "one_net"), ("abc2", "conv_net"), ("abd3", "one_net"), ("xyz4", "one_net")):
            _put(db, key, model, batch_size=8)
    return path


def _listed(capsys, *argv: str) -> list[str]:
    code = main(["store", "list", *argv, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return [r["key"] for r in json.loads(out)["rows"]]


def test_row_25_store_list_key_lists_the_rows_whose_key_starts_with_it(capsys, two_models):
    # before: the key ignored, every row listed
    assert _listed(capsys, "abc") == ["abc1", "abc2"]
    assert _listed(capsys, "--key", "abc") == ["abc1", "abc2"]
    assert _listed(capsys, "abc", "--model", "one_net") == ["abc1"]
    _refused(capsys, two_models.parent, "store", "list", "abc", "--key", "abd",
             words="one KEY: as the argument or as --key, got 'abc' and --key 'abd'")


def test_row_26_delete_all_of_one_model_keeps_the_others(capsys, two_models):
    # before: "deleted 4 stored results", conv_net's row with them
    code = main(["store", "delete", "--all", "--model", "one_net"])
    out, err = capsys.readouterr()
    assert code == 0 and err == "" and out == "deleted 3 stored results\n"
    assert [(r.key, r.model) for r in xla_cost.store_contents(two_models).rows] == [("abc2", "conv_net")]
    assert xla_cost.store_delete(two_models, everything=True, model="one_net") == 0  # none left of one_net
    assert xla_cost.store_delete(two_models, everything=True) == 1  # --all alone: every row


def test_row_26_an_empty_model_beside_all_is_refused(capsys, two_models):
    _refused(capsys, two_models.parent, "store", "delete", "--all", "--model", "",
             words="--model naming the rows to delete, got --model ''")
    assert len(xla_cost.store_contents(two_models).rows) == 4  # nothing went


def test_row_27_store_vacuum_reports_the_files_real_sizes(capsys, place):
    path = place / "store.sqlite"
    with Store(path) as db:  # 200 rows of ~4 KB each, then all but one deleted: space to give back
        for i in range(200):
            db.put(f"k{i:03d}", model="one_net", config={"i": i}, environment={}, report={"pad": "x" * 4096})
        db.delete(f"k{i:03d}" for i in range(1, 200))
    before = os.path.getsize(path)
    code = main(["store", "vacuum"])
    out, err = capsys.readouterr()
    after = os.path.getsize(path)
    assert code == 0 and err == ""
    # before: "176,128 bytes before, 176,128 after" for a file then 12,288 bytes long
    assert out == f"vacuumed: {before:,} bytes before, {after:,} after\n"
    assert after < before
    assert not os.path.exists(f"{path}-wal") or os.path.getsize(f"{path}-wal") == 0
    assert xla_cost.store_contents(path).size == after


def test_store_list_shows_counts_as_whole_numbers(capsys, place):
    # a sweep's row has a batch size, `analyze --cache`'s has none: the column stayed float ("8.000")
    path = place / "store.sqlite"
    with Store(path) as db:
        _put(db, "aaa1", "one_net", batch_size=8, optimizer="sgd", dtype="float32")
        db.put("aaa2", model="one_net", config={"analyze": "one_net"}, environment={}, report={"model": "one_net"})
    code = main(["store", "list", "--format", "csv"])
    out, _ = capsys.readouterr()
    assert code == 0 and pd.read_csv(pd.io.common.StringIO(out), dtype=str)["batch_size"].tolist()[0] == "8"
    code = main(["store", "list"])
    out, _ = capsys.readouterr()
    assert code == 0 and "8.000" not in out and " 8 " in out


# ------------------------------------------------------------------ 28: XLA_COST_CACHE_DIR


@pytest.mark.parametrize("argv", [["analyze", "one_net"], ["analyze", "one_net", "--cache"],
                                  ["sweep", "one_net", "--jobs", "0"]])
def test_row_28_a_cache_dir_that_is_a_file_is_refused(capsys, place, monkeypatch, argv):
    (place / "afile").write_text("not a directory")
    monkeypatch.delenv(NO_CACHE_ENV, raising=False)  # the tests keep the cache off; the user's is on
    monkeypatch.setenv(CACHE_DIR_ENV, str(place / "afile"))
    # before: no message, the cache silently off
    _refused(capsys, place, *argv, words=f"{CACHE_DIR_ENV} naming a directory for the compilation cache")
    monkeypatch.setenv(NO_CACHE_ENV, "1")  # with the cache off the variable is not used, and not refused
    check_cache_dir()


# ------------------------------------------------------------------ 31: SweepResult.plot


def test_row_31_plot_draws_no_line_across_two_models(place):
    result = xla_cost.sweep(["one_net", "conv_net"], batch_sizes=[1, 2], optimizers=["sgd", "adam"],
                            counter="jaxpr", jobs=0, progress=False)
    figure = result.plot(y="update_flops", hue="optimizer")
    assert isinstance(figure, matplotlib.figure.Figure)
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    # before: two lines (one per optimizer), each zigzagging between the models' points
    assert sorted(lines) == sorted(f"optimizer, model={o}, {m}" for o in ("sgd", "adam")
                                   for m in ("one_net", "conv_net"))
    for label, line in lines.items():
        assert list(line.get_xdata()) == [1.0, 2.0]
        assert len(set(line.get_ydata())) == 1, label  # one model's update: the same at every batch
    # SGD: 2 FLOP per parameter of the line's own model (OneNet 1 -> 4096 -> 128 -> 10; ConvNet)
    assert set(lines["optimizer, model=sgd, one_net"].get_ydata()) == {SGD_FLOPS_PER_PARAM * mlp_params(1)}
    assert set(lines["optimizer, model=sgd, conv_net"].get_ydata()) == {SGD_FLOPS_PER_PARAM * conv_net_params()}
    # hue=None over two models: a line per model and optimizer, never one line through all of them
    assert len(result.plot(y="update_flops", hue=None).axes[0].get_lines()) == 4
    assert len(result.plot(y="update_flops").axes[0].get_lines()) == 4  # hue="model": optimizer splits too
