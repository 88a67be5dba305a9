"""Issue 49, what a third new user broke in the output, the store and the Python API's edges.

- ``analyze --target h100 --compare-cpu --format csv`` dropped the comparison: now its rows follow.
- ``store list`` had no target column (CPU, H100 and A100 rows of one configuration looked the
  same) and left an ``analyze --cache`` row's batch, optimizer and dtype blank.
- ``report --model ... --target h100`` said "gpu backend" and never named the H100.
- ``diff`` of a JSON whose FLOP are strings leaked ``ValueError: Unknown format code 'e'``.
- ``analyze_step(..., target='h100', compare_cpu=True)`` passed ``compare_cpu`` to the user's step.
- ``analyze(..., target='h100')`` from Python: the CUDA plugin's start-up lines on stderr.

The model is the zoo's ``one_net`` (1 -> 4096 -> 128 -> 10, seed 001) at batch 2 and a two-layer
MLP step; expected FLOP come from their dimensions (a multiply-add is 2 FLOP).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import optax
import pandas as pd
import pytest

import xla_cost
from xla_cost.cli import main
from xla_cost.errors import InputError
from xla_cost.timemodel import devices as registry
from xla_cost.plugins import cuda_plugin

from tests.refusals import one_line_refusal

pytestmark = pytest.mark.skipif(cuda_plugin() is None, reason="needs the gpu extra (jax's CUDA plugin)")

B = 2  # batch
ONE_NET = (1, 4096, 128, 10)  # one_net's widths (models/seed_nets.py)
FORWARD_MATMULS = 2 * B * sum(a * b for a, b in zip(ONE_NET, ONE_NET[1:]))  # 2·B·(1·4096 + 4096·128 + 128·10)
WITHIN = 0.02  # the bias adds, the ReLUs and the loss on top of the products: under 1% here


def _cli(*argv: str) -> tuple[int, str]:
    """``xla-cost ARGV`` in this process: (exit code, stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """One configuration of one_net stored three ways: ``analyze --cache`` for the H100 (with the CPU
    beside it, as CSV) and for the CPU, and a sweep for the A100; the CSV and the store's path."""
    where = tmp_path_factory.mktemp("third_user")
    store = str(where / "store.sqlite")
    code, csv = _cli("analyze", "one_net", "--batch-size", str(B), "--target", "h100", "--compare-cpu",
                     "--format", "csv", "--cache", "--store", store, "--quiet")
    assert code == 0
    code, cpu_json = _cli("analyze", "one_net", "--batch-size", str(B), "--format", "json", "--cache",
                          "--store", store, "--quiet")
    assert code == 0
    (where / "cpu.json").write_text(cpu_json)
    assert _cli("sweep", "one_net", "--batch-sizes", str(B), "--target", "a100", "--store", store, "--jobs", "0",
                "--quiet")[0] == 0
    return {"csv": csv, "store": store, "dir": where}


def test_compare_cpu_as_csv_carries_the_comparison(stored):
    table = pd.read_csv(io.StringIO(stored["csv"]))
    phases = table[table["kind"] == "phase"].set_index("name")
    compared = table[table["kind"] == "comparison"].set_index("name")
    assert list(compared.index) == list(phases.index) == ["forward", "backward", "grad", "update", "train_step"]
    # the target's side is the report's own phase rows; the ratio is target over CPU
    assert (compared["target_flops"] == phases["flops"]).all()
    assert compared["flops_ratio"].tolist() == pytest.approx((compared["target_flops"] / compared["cpu_flops"]).tolist())
    # both programs are one step: the same jaxpr, and the products of one_net's layers within 2%
    assert (compared["cpu_jaxpr_flops"] == compared["target_jaxpr_flops"]).all()
    for side in ("cpu_flops", "target_flops"):
        assert compared.loc["forward", side] == pytest.approx(FORWARD_MATMULS, rel=WITHIN)
    assert compared["target_kernels"].notna().all() and compared["cpu_kernels"].notna().all()


def test_store_list_names_each_rows_target_and_fills_analyze_cache_rows(stored):
    code, out = _cli("store", "list", "--store", stored["store"], "--format", "json")
    assert code == 0
    rows = json.loads(out)["rows"]
    # the H100 and the CPU rows are analyze --cache's (their configuration holds the model alone)
    assert sorted(r["target"] for r in rows) == ["a100", "cpu", "h100"]
    frame = xla_cost.store_contents(stored["store"]).to_frame()
    assert sorted(frame["target"]) == ["a100", "cpu", "h100"]
    assert frame["batch_size"].tolist() == [B] * 3
    assert set(frame["optimizer"]) == {"adam"} and set(frame["dtype"]) == {"float32"}
    code, table = _cli("store", "list", "--store", stored["store"])
    assert code == 0 and "target" in table and all(name in table for name in ("a100", "cpu", "h100"))


def test_report_of_one_model_for_a_target_names_the_device(tmp_path, stored):
    out = tmp_path / "page"
    assert _cli("report", "--model", "one_net", "--target", "h100", "--out", str(out), "--quiet")[0] == 0
    header = (out / "one_net.md").read_text().splitlines()[2]
    title = registry.target("h100").title  # "NVIDIA H100 SXM", the registry's name of the device
    assert f"compiled for the {title} (`h100`" in header and "gpu backend" not in header


def test_diff_of_a_report_whose_flop_are_strings_is_one_line(capsys, tmp_path, stored):
    good = stored["dir"] / "cpu.json"
    data = json.loads(good.read_text())
    data["flops"] = {phase: str(value) for phase, value in data["flops"].items()}
    bad = tmp_path / "strings.json"
    bad.write_text(json.dumps(data))
    output = tmp_path / "diff.txt"
    line = one_line_refusal(capsys, ["diff", str(good), str(bad), "--output", str(output)],
                            ["B as a report's JSON file whose figures are numbers", "flops of forward", "a str"])
    assert "Unknown format code" not in line and not output.exists()
    data = json.loads(good.read_text())
    data["layers"] = [{"path": "fc1", "parameters": 1, "trip_count": 1, "forward_flops": "12",
                       "forward_transcendentals": 0, "backward_flops": 0, "backward_transcendentals": 0,
                       "update_flops": 0, "update_transcendentals": 0}]
    bad.write_text(json.dumps(data))
    one_line_refusal(capsys, ["diff", str(bad), str(good)], ["A as a report's JSON file", "forward_flops of layer 'fc1'"])


# ------------------------------------------------------------------ analyze_step(compare_cpu=True)

D, H, C = 64, 128, 16  # a two-layer MLP step: inputs, hidden units, outputs (no biases)
STEP_FORWARD = 2 * B * (D * H + H * C)  # x @ W1, h @ W2
OPTIMIZER = optax.sgd(0.1)


def _loss(params, x, y):
    h = jax.nn.relu(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def train_step(params, opt_state, x, y):  # takes no compare_cpu: it was passed one and failed
    loss, grads = jax.value_and_grad(_loss)(params, x, y)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def _arguments():
    params = {"w1": jax.ShapeDtypeStruct((D, H), jnp.float32), "w2": jax.ShapeDtypeStruct((H, C), jnp.float32)}
    return (params, jax.eval_shape(OPTIMIZER.init, params),
            jax.ShapeDtypeStruct((B, D), jnp.float32), jax.ShapeDtypeStruct((B, C), jnp.float32))


def test_analyze_step_compares_with_the_cpu_as_analyze_does():
    report = xla_cost.analyze_step(train_step, *_arguments(), target="h100", compare_cpu=True)
    assert report.target == "h100" and report.cpu is not None and report.cpu.target is None
    comparison = report.comparison()  # the advice "compare_cpu=True" is one analyze_step takes
    assert comparison.target == "h100" and "train_step" in comparison.phases
    forward = comparison.row("forward")
    assert forward.cpu["jaxpr_flops"] == forward.target["jaxpr_flops"] == pytest.approx(STEP_FORWARD, rel=WITHIN)
    step = comparison.row("train_step")
    assert step.target["flops"] == report.phases["train_step"].flops
    assert step.cpu["flops"] == report.cpu.phases["train_step"].flops
    assert "kind,name" in report.to_csv() and "comparison,train_step" in report.to_csv()


def test_analyze_step_compare_cpu_without_a_target_is_refused():
    with pytest.raises(InputError, match=r"compare_cpu \(--compare-cpu\) only with a target.*Add target='h100'"):
        xla_cost.analyze_step(train_step, *_arguments(), compare_cpu=True)


# ------------------------------------------------------------------ the CUDA plugin's start-up lines

def test_analyze_for_a_target_from_python_keeps_the_plugins_lines_off_stderr(tmp_path):
    # docs/targets.md's example, xla_cost imported first: nothing on stderr (the CUDA plugin's
    # "cudart_stub.cc: Could not find cuda drivers" and absl's lines, three times each, came when
    # jax was imported before xla_cost: jax's own import prints them, docs/targets.md says so)
    script = tmp_path / "example.py"
    script.write_text(textwrap.dedent("""\
        import xla_cost
        import jax, jax.numpy as jnp, flax.linen as nn

        class MLP(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.Dense(10)(nn.relu(nn.Dense(128)(x)))

        report = xla_cost.analyze(MLP(), jax.ShapeDtypeStruct((16, 64), jnp.float32), optimizer="sgd",
                                  target="h100")
        print(report.target)
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_COST_NO_CACHE")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout, done.stderr) == (0, "h100\n", "")


HERE = "tests.cli.test_cli_third_user_output"


def test_step_command_compares_with_the_cpu(capsys):
    code = main(["step", f"{HERE}:train_step", "--args", f"{HERE}:_arguments", "--target", "h100", "--compare-cpu",
                 "--format", "json"])
    out, _ = capsys.readouterr()
    data = json.loads(out)
    assert code == 0 and data["target"] == "h100" and data["cpu"]["target"] is None
    assert data["cpu"]["jaxpr_flops"]["forward"] == data["jaxpr_flops"]["forward"]


def test_step_command_compare_cpu_without_a_target_is_one_line(capsys):
    one_line_refusal(capsys, ["step", f"{HERE}:train_step", "--args", f"{HERE}:_arguments", "--compare-cpu"],
                     ["compare_cpu (--compare-cpu) only with a target", "Add target='h100' (--target h100)"])
