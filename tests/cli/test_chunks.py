"""``--chunks V``: the interleaved pipeline schedule from the command line
(issue 32), beside ``--mesh ...,pipeline=P`` in ``estimate`` and ``scaling``,
with the Python API's result; refused in one line where V does not divide
a stage's layers or there is no pipeline. The bubble is ``(p - 1) / (v m)``
of the work (Narayanan et al. 2021, section 2.2)."""

from __future__ import annotations

import json

import pytest

from xla_cost.cli import main
from xla_cost.runs import estimates

# xla_cost's caches on, shared with the other modules that opt in (tests/conftest.py): the zoo programs
# this module analyses again are read back, not compiled again.
pytestmark = pytest.mark.usefixtures("module_caches")


TINY = {"n_layer": 4, "d_model": 64, "n_head": 4, "seq_len": 32, "vocab_size": 256}
SETTINGS = [arg for key, value in TINY.items() for arg in ("--set", f"{key}={value}")]
P, M = 2, 4  # stages, micro-batches


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return str(tmp_path_factory.mktemp("store") / "s.sqlite")


def test_estimate_with_chunks_is_the_api_and_shrinks_the_bubble(capsys, store):
    argv = ["estimate", "gpt2-small", "--tokens", "64000", *SETTINGS, "--batch-size", "2", "--mesh",
            f"model=2,pipeline={P}", "--micro-batches", str(M), "--mfu", "1.0", "--store", store, "--format", "json"]
    shown = {}
    for v in (1, 2):
        code, out, err = run(capsys, *argv, "--chunks", str(v))
        assert code == 0, err
        shown[v] = json.loads(out)
        api = estimates.estimate("gpt2-small", tokens=64000, config=TINY, batch_size=2, mesh=f"model=2,pipeline={P}",
                                 micro_batches=M, chunks=v, mfu=1.0, store=store).to_dict()
        assert shown[v] == json.loads(json.dumps(api))
    for v, row in shown.items():
        # a slot is one micro-batch's compute, tensor collectives and its v stage transfers; the bubble
        # is (p - 1) / (v m) of the m slots
        slot = (row["roofline_seconds"] + row["tensor_seconds"] + row["stage_transfers_seconds"]) / M
        assert row["pipeline_bubble_seconds"] == pytest.approx((P - 1) / (v * M) * M * slot, rel=1e-9)
    # two chunks a stage: the transfers double (each micro-batch crosses twice the stage boundaries)
    assert shown[2]["stage_transfers_seconds"] == pytest.approx(2 * shown[1]["stage_transfers_seconds"], rel=1e-12)


@pytest.mark.parametrize("extra, match", [
    # 4 layers over 2 stages: 2 a stage, which 3 chunks do not divide
    (["--mesh", "pipeline=2", "--chunks", "3"], "divide the 2 layers"),
    (["--chunks", "2"], "only with a pipeline"),
    (["--mesh", "model=2", "--chunks", "2"], "only with a pipeline"),
    (["--mesh", "pipeline=2", "--chunks", "0"], "chunks"),
])
def test_bad_chunks_are_one_line(capsys, store, extra, match):
    code, out, err = run(capsys, "estimate", "gpt2-small", "--tokens", "64000", *SETTINGS, "--mfu", "1.0",
                         "--store", store, *extra)
    assert code == 2 and out == ""
    assert match in err and len(err.strip().splitlines()) == 1


def test_scaling_takes_chunks(capsys, store):
    code, out, err = run(capsys, "scaling", "gpt2-small", "--devices", "1,2", "--mesh", f"pipeline={P}", "--chunks",
                         "2", "--micro-batches", str(M), *SETTINGS, "--mfu", "1.0", "--store", store, "--format", "json")
    assert code == 0, err
    code, out, err = run(capsys, "scaling", "gpt2-small", "--devices", "1,2", "--mesh", f"pipeline={P}", "--chunks",
                         "3", *SETTINGS, "--mfu", "1.0", "--store", store)
    assert code == 2 and "divide the 2 layers" in err
