"""The estimate figures docs/sharding.md quotes come from the commands it shows.

The README quotes no estimate; docs/sharding.md quotes ResNet-50's 90 ImageNet
epochs on 8 H100s (FLOP, hours predicted, as a bound and at ``--mfu 0.4``, the
step's parts, ``--mesh data=8``) and GPT-2 XL's pipeline share at 4, 16 and 64
micro-batches. Each figure is recomputed here by running the command through
the CLI (its JSON output) and written back the way the text writes it, so the
text cannot go stale: newly fitted constants (the time model's one set for
every device, xla_cost/timemodel/calibrations/constants.json) or a change to the
time model that moves a figure fails this test until the page says the new figure.
"""

from __future__ import annotations

import json
import pathlib
import re

import jax
import pytest

from xla_cost.cli import main

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARDING = ROOT / "docs" / "sharding.md"

RESNET = "estimate resnet50 --samples 1281167 --epochs 90 --devices 8 --batch-size 32 --device h100"
GPT = "estimate gpt2-xl --tokens 1e10 --mesh data=4,model=4,pipeline=4 --micro-batches 16 --batch-size 1 --dtype bfloat16"
"""The commands as the page's bash block shows them; the prose's variants are derived from them."""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 simulated devices (tests/conftest.py)"),
]


def _text() -> str:
    """docs/sharding.md with its line breaks as spaces (prose wraps anywhere)."""
    return re.sub(r"\s+", " ", SHARDING.read_text())


def _estimate(capsys, command: str) -> dict:
    code = main([*command.split(), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _flop(value: float) -> str:
    """``2.76e18``, as the page writes FLOP."""
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa}e{int(exponent)}"


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_COST_STORE", str(tmp_path / "store.sqlite"))


def test_the_resnet50_estimate_figures(capsys, store):
    assert f"xla-cost {RESNET}\n" in SHARDING.read_text() and f"xla-cost {RESNET} --bound\n" in SHARDING.read_text()
    predicted = _estimate(capsys, RESNET)
    bound = _estimate(capsys, f"{RESNET} --bound")
    at_mfu = _estimate(capsys, f"{RESNET} --mfu 0.4")
    replicas = _estimate(capsys, RESNET.replace("--devices 8", "--mesh data=8"))
    quoted_parts = ("matmul", "memory", "launch", "update", "host", "gradients")
    ms = {part: predicted[f"{part}_seconds"] * 1e3 for part in quoted_parts}
    # the parts the sentence quotes are the whole step: 8 replicas, no tensor parallelism, no pipeline
    assert sum(ms.values()) == pytest.approx(predicted["step_seconds"] * 1e3, rel=1e-9)
    quoted = (
        f"ResNet-50, 90 ImageNet epochs on 8 H100s at 32 images each: {_flop(predicted['total_flops'])} FLOP; "
        f"predicted {predicted['hours']:.1f} h ({predicted['step_seconds'] * 1e3:.1f} ms a step: matrix products "
        f"{ms['matmul']:.1f} ms, memory-bound work {ms['memory']:.1f} ms, kernel launches {ms['launch']:.1f} ms, "
        f"update {ms['update']:.1f} ms, {ms['host']:.1f} ms on the host, {ms['gradients']:.1f} ms of gradient "
        f"all-reduce exposed); {bound['hours']:.1f} h as a bound; {at_mfu['hours']:.1f} h at `--mfu 0.4`"
    )
    assert quoted in _text()
    assert f"`--mesh data=8` prices the replicas' all-reduce in even pieces as the backward pass makes them " \
           f"({replicas['hours']:.2f} h)" in _text()


def test_the_gpt2_xl_pipeline_figures(capsys, store):
    assert f"xla-cost {GPT}\n" in SHARDING.read_text()
    runs = {m: _estimate(capsys, GPT.replace("--micro-batches 16", f"--micro-batches {m}")) for m in (4, 16, 64)}
    ms = {m: ((run["pipeline_bubble_seconds"] + run["stage_transfers_seconds"]) * 1e3, run["step_seconds"] * 1e3)
          for m, run in runs.items()}
    quoted = (
        f"with 4 micro-batches the pipeline's part of the step (bubble and transfers) is {ms[4][0]:.1f} ms of "
        f"{ms[4][1]:.0f} ms; with 16, {ms[16][0]:.1f} of {ms[16][1]:.0f} ms; with 64, {ms[64][0]:.1f} of "
        f"{ms[64][1]:.0f} ms"
    )
    assert quoted in _text()
