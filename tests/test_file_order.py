"""The order the test files run in under `-n 2`: the longest first (tests/conftest.py).

A file renamed or removed would drop out of the order without a word, and xdist's own
order (the files with the most tests first) would come back if pyproject's addopts lost
``--no-loadscope-reorder``: both fail here."""

from __future__ import annotations

import pathlib
import sys
import tomllib
import types

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _conftest() -> types.ModuleType:
    """The conftest pytest loaded (importing it again would run its jax settings twice)."""
    path = ROOT / "tests" / "conftest.py"
    return next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(path))


def test_every_file_of_the_order_exists_once_and_xdist_keeps_the_order():
    order = _conftest().LONGEST_FILES
    assert len(order) >= 10 and len(set(order)) == len(order)
    missing = [path for path in order if not (ROOT / path).is_file()]
    assert missing == []
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--dist loadfile" in addopts and "--no-loadscope-reorder" in addopts.split()


def test_the_listed_files_run_first_longest_first_and_each_files_tests_keep_their_order():
    conftest = _conftest()
    first, second = conftest.LONGEST_FILES[:2]
    ids = ["tests/a/test_x.py::t1", f"{second}::b1", "tests/a/test_x.py::t2", f"{first}::a1",
           "tests/b/test_y.py::u1", f"{second}::b2", f"{first}::a2"]
    items = [types.SimpleNamespace(nodeid=i) for i in ids]
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == [
        f"{first}::a1", f"{first}::a2", f"{second}::b1", f"{second}::b2",
        "tests/a/test_x.py::t1", "tests/a/test_x.py::t2", "tests/b/test_y.py::u1",
    ]
