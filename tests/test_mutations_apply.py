"""Every planted bug of ``benchmarks/mutations.py`` still applies to the code (issue 49).

A mutation is an exact text replacement in the library; a refactor that changes the
text it replaces makes it fail to apply, and the mutation no longer tests anything.
``python benchmarks/mutations.py --check`` applies and reverts each one in a copy of
the repository (seconds, no test is run); here it runs with the suite, so that such a
refactor fails CI and the mutation is updated with it.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "mutations.py"


@functools.cache
def _mutations():
    spec = importlib.util.spec_from_file_location("xla_cost_mutations", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(os.environ.get("XLA_COST_MUTATION_COPY") == "1",
                    reason="run by benchmarks/mutations.py in a copy that holds a planted bug (and no .git)")
def test_every_mutation_applies_to_the_working_tree(capsys):
    assert _mutations().main(["--check"]) == 0
    assert "mutations apply to worktree" in capsys.readouterr().out


def test_a_mutation_whose_text_is_gone_is_refused_with_its_name(tmp_path):
    mutations = _mutations()
    (tmp_path / "m.py").write_text("x = 1\n")
    stale = mutations.Mutation("stale", "text that no longer occurs", (mutations.Edit("m.py", "x = 2", "x = 3"),))
    with pytest.raises(SystemExit, match="mutation stale: the old text occurs 0 times in m.py"):
        mutations.apply(tmp_path, stale)
    assert (tmp_path / "m.py").read_text() == "x = 1\n"
