"""The progress line of long work (issue 24): stages on a terminal, nothing piped or with --quiet."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp

import xla_cost
from xla_cost.present import progress
from xla_cost.zoo import build_model


def test_stages_are_shown_only_inside_a_progress_line(monkeypatch):
    seen: list[tuple[str, int | None, int | None]] = []
    monkeypatch.setattr(progress._Line, "update", lambda self, text, done, total: seen.append((text, done, total)))
    progress.stage("nothing is shown")  # no line: a no-op
    assert not progress.active()
    with progress.shown("analyze", enabled=True):
        assert progress.active()
        xla_cost.analyze(build_model("one_net"), jax.ShapeDtypeStruct((2, 1), jnp.float32), optimizer="sgd")
    assert not progress.active()
    texts = [text for text, _, _ in seen]
    # every program traced, then compiled, each a step of the total (3 programs: 6 steps)
    assert texts[:3] == ["tracing forward", "tracing grad", "tracing update"]
    assert texts[3:] == ["compiling forward", "compiling grad", "compiling update"]
    assert [done for _, done, _ in seen] == [0, 1, 2, 3, 4, 5] and {total for _, _, total in seen} == {6}


def test_piped_or_quiet_prints_no_progress(tmp_path):
    for quiet in ([], ["--quiet"]):
        done = subprocess.run(
            [sys.executable, "-m", "xla_cost", "analyze", "one_net", "--batch-size", "2", "--counter", "jaxpr",
             "--output", str(tmp_path / "out.txt"), *quiet],
            capture_output=True, text=True,
        )
        assert done.returncode == 0 and done.stderr == "" and done.stdout == ""
