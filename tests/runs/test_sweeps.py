"""Sweeps (issue 11): configurations, the SQLite store, worker processes, Dask,
failures as rows, a killed worker's configuration retried in the same sweep, a
SIGKILLed sweep completed by a rerun, dtypes in the keys, analyze(cache=True)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import pandas as pd
import pytest

import xla_cost
from xla_cost import cli
from xla_cost.compiled.store import Store, analysis_key
from xla_cost.runs.sweeps import configurations, sweep
from xla_cost.zoo import build_model, example_inputs

from tests.formulas import mlp_forward_phase, mlp_params

SGD_FLOPS_PER_PARAM = 2  # seed 001, appendix B: SGD costs 2 FLOP per parameter (multiply, subtract)


def test_configurations_product_order_and_names():
    configs = configurations(
        ["OneNet", "linear-net"], batch_sizes=[1, 2], settings=None, optimizers=["sgd", "adam"]
    )
    # models x optimizers x batch sizes, models outermost, names canonical
    assert len(configs) == 2 * 2 * 2
    assert [c.model for c in configs[:4]] == ["one_net"] * 4
    assert [(c.optimizer, c.batch_size) for c in configs[:4]] == [("sgd", 1), ("sgd", 2), ("adam", 1), ("adam", 2)]
    # duplicates (the same model under two spellings) are one configuration
    assert len(configurations(["one_net", "OneNet"], batch_sizes=[1, 1])) == 1
    grid = configurations(["deeper_conv_net"], batch_sizes=[1], settings={"depth": [0, 1, 3]})
    assert [c.config for c in grid] == [{"depth": 0}, {"depth": 1}, {"depth": 3}]


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"models": ["one_nett"]}, "Did you mean `one_net`"),
        ({"models": ["one_net"], "optimizers": ["adamm"]}, "optimizers among"),
        ({"models": ["one_net"], "batch_sizes": [0]}, "batch sizes of at least 1"),
        ({"models": ["one_net"], "dtypes": ["float31"]}, "dtype"),
        ({"models": ["one_net"], "counter": "hlo"}, "counter one of"),
    ],
)
def test_bad_input_fails_before_anything_runs(kwargs, expected, tmp_path):
    store = tmp_path / "s.sqlite"
    with pytest.raises(xla_cost.InputError, match=expected):
        sweep(**kwargs, store=store, jobs=0)
    assert not store.exists() or len(Store(store)) == 0


def test_sweep_in_process_figures_store_and_rerun(tmp_path, monkeypatch):
    store = tmp_path / "results.sqlite"
    first = sweep(["one_net"], batch_sizes=[2, 3], optimizers=["sgd"], store=store, jobs=0, per_layer=True)
    runs = first.runs
    assert list(runs["status"]) == ["ok", "ok"]
    # forward: the layers, the ReLUs and the loss (tests/formulas.py; the jaxpr count,
    # exact; XLA's differs by its loss fusion); SGD 2 FLOP/param
    assert list(runs["forward_jaxpr_flops"]) == [mlp_forward_phase(2, 1), mlp_forward_phase(3, 1)]
    assert list(runs["update_flops"]) == [SGD_FLOPS_PER_PARAM * mlp_params(1)] * 2
    assert list(runs["parameters"]) == [mlp_params(1)] * 2
    assert (runs["backward_flops"] == runs["grad_flops"] - runs["forward_flops"]).all()
    # the layer frame: fc1..fc3 and the remainder per configuration, adding up to the phase
    layers = first.layers
    for batch, group in layers.groupby("batch_size"):
        assert group["forward_flops"].sum() == runs.set_index("batch_size").loc[batch, "forward_jaxpr_flops"]
    with Store(store) as db:
        assert len(db) == 2
    # a rerun reads the store and analyses nothing
    monkeypatch.setattr("xla_cost.runs.sweeps.run_config", lambda config: pytest.fail("rerun analysed again"))
    again = sweep(["one_net"], batch_sizes=[2, 3], optimizers=["sgd"], store=store, jobs=0, per_layer=True)
    pd.testing.assert_frame_equal(again.runs, runs)
    pd.testing.assert_frame_equal(again.layers, layers)


def test_sweep_matches_analyze(tmp_path, zoo_report):
    result = sweep(["conv_net"], batch_sizes=[2], optimizers=["adam"], store=tmp_path / "s.sqlite", jobs=0)
    report = zoo_report("conv_net", 2, "adam")  # analyze(...), kept for the round-trip test below too
    row = result.runs.iloc[0]
    for phase in xla_cost.PHASES:
        assert row[f"{phase}_flops"] == report.phases[phase].flops
        assert row[f"{phase}_bytes_accessed"] == report.phases[phase].bytes_accessed
    assert row["backward_to_forward"] == pytest.approx(report.backward_to_forward, rel=0, abs=0)


def test_failures_are_rows_and_the_sweep_goes_on(tmp_path):
    store = tmp_path / "s.sqlite"
    # NnxMLP takes 12 features (tests/custom_models.py): at OneNet's one it fails to trace, a failed
    # row; OneNet runs. (An out-of-range setting, depth=-1, is refused before anything runs.)
    models = ["tests.custom_models:NnxMLP", "one_net"]
    result = sweep(models, batch_sizes=[1], input_shape=(1, 1), store=store, jobs=0)
    failed, ok = result.runs.iloc[0], result.runs.iloc[1]
    assert failed["status"] == "failed" and "\n" not in failed["error"]
    assert "got (1,) and (12,)" in failed["error"]  # the trace's own reason: 1 feature against fc1's 12
    # OneNet (1 -> 4096 -> 128 -> 10): its layers, ReLUs and the loss at batch 1 (tests/formulas.py)
    assert ok["status"] == "ok" and ok["forward_jaxpr_flops"] == mlp_forward_phase(1, 1)
    # stored: a rerun does not retry it, retry_failed does
    calls = []
    sweep(models, batch_sizes=[1], input_shape=(1, 1), store=store, jobs=0, on_result=lambda c, r: calls.append(c))
    assert calls == []
    sweep(models, batch_sizes=[1], input_shape=(1, 1), store=store, jobs=0, retry_failed=True,
          on_result=lambda c, r: calls.append(c))
    assert [c.model for c in calls] == ["tests.custom_models:NnxMLP"]
    with Store(store) as db:
        assert len(db) == 2


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def _descendants(pid: int) -> list[int]:
    out = []
    for child in _children(pid):
        out += [child, *_descendants(child)]
    return out


def _workers(pid: int) -> list[int]:
    """The sweep's worker processes: forked by its fork server (or spawned by it)."""
    def cmdline(p: int) -> str:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as handle:
                return handle.read().replace(b"\0", b" ").decode()
        except OSError:
            return ""

    servers = [c for c in _children(pid) if "forkserver" in cmdline(c)]
    if servers:
        return [w for server in servers for w in _children(server)]
    return [c for c in _children(pid) if "resource_tracker" not in cmdline(c)]


def _kill_with_descendants(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return  # ended and reaped: its pid may be another process's now
    for pid in [process.pid, *_descendants(process.pid)]:  # listed while they are its descendants
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(30)


def _rows(store) -> list[tuple[str, str]]:
    with sqlite3.connect(store) as db:
        return db.execute("SELECT key, created FROM results").fetchall()


def _stored_batches(store) -> list[int]:
    with sqlite3.connect(store) as db:
        return sorted(json.loads(c)["batch_size"] for (c,) in db.execute("SELECT config FROM results"))


WAIT_S = 240
"""A generous deadline for each wait on the sweep (a hang guard: each step takes seconds)."""

GATE = '''"""Holds each configuration of a sweep's workers until the test lets it run."""
import os
import pathlib
import time

import xla_cost.runs.sweeps as sweeps

_gate = pathlib.Path(os.environ["XLA_COST_TEST_GATE"])
_run_config = sweeps.run_config


def run_config(config):
    batch = config["batch_size"]
    (_gate / f"at-{batch}-{os.getpid()}").touch()  # this worker has reached the configuration
    while not (_gate / f"go-{batch}").exists():
        time.sleep(0.01)
    return _run_config(config)


run_config.__qualname__ = _run_config.__qualname__  # pickled by name, as the pool sends it
sweeps.run_config = run_config
'''
"""A sitecustomize for the sweep's processes (its fork server's workers inherit it): each
configuration waits, before it runs, until the test creates ``go-BATCH``; the worker that
reaches it says so with ``at-BATCH-PID``. Where the sweep is when the test kills something is
then what the test let it do, not how fast the machine ran it."""


def _gated(tmp_path) -> tuple[pathlib.Path, dict[str, str]]:
    hook, gate = tmp_path / "hook", tmp_path / "gate"
    hook.mkdir()
    gate.mkdir()
    (hook / "sitecustomize.py").write_text(GATE)
    path = os.pathsep.join(p for p in (str(hook), os.getcwd(), os.environ.get("PYTHONPATH")) if p)
    return gate, {**os.environ, "XLA_COST_TEST_GATE": str(gate), "PYTHONPATH": path}


def _arrivals(gate) -> set[tuple[int, int]]:
    """(batch, worker pid) of each configuration a worker has reached."""
    return {(int(batch), int(pid)) for _, batch, pid in (f.name.split("-") for f in gate.glob("at-*"))}


def _wait_for(condition, process: subprocess.Popen, log: pathlib.Path, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"{what}: not within {WAIT_S} s"
        time.sleep(0.05)


def _row_count(store) -> int:
    try:
        return len(_rows(store)) if store.exists() else 0
    except sqlite3.OperationalError:  # being created
        return 0


BATCHES = [1, 2, 3, 4, 5, 6]


def _sweep_command(store) -> list[str]:
    # the workers compile (--counter xla), as in a sweep of real models
    return [sys.executable, "-m", "xla_cost", "sweep", "one_net", "--batch-sizes",
            ",".join(map(str, BATCHES)), "--counter", "xla", "--store", str(store), "--jobs", "1",
            "--quiet", "--format", "csv"]


@pytest.mark.slow
def test_sigkill_mid_sweep_loses_nothing_and_the_rerun_completes(tmp_path):
    store = tmp_path / "s.sqlite"
    gate, env = _gated(tmp_path)
    errors = tmp_path / "stderr.txt"
    log = open(errors, "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen(_sweep_command(store), stdout=subprocess.DEVNULL, stderr=log, env=env)
    try:
        # batches 1 and 2 let through: the one worker stores them and waits at batch 3
        for batch in (1, 2):
            (gate / f"go-{batch}").touch()
        _wait_for(lambda: {b for b, _ in _arrivals(gate)} == {1, 2, 3} and _row_count(store) == 2,
                  process, errors, "batches 1 and 2 stored, batch 3 reached")
        [worker] = {pid for _, pid in _arrivals(gate)}
        assert _workers(process.pid) == [worker]  # --jobs 1
        # a real SIGKILL of the worker in batch 3: the sweep replaces it and tries batch 3
        # again before any later one (its next arrival is batch 3, in a new process)
        os.kill(worker, signal.SIGKILL)
        _wait_for(lambda: len(_arrivals(gate)) == 4, process, errors, "a new worker reached a configuration")
        [(batch, replacement)] = _arrivals(gate) - {(1, worker), (2, worker), (3, worker)}
        assert batch == 3 and replacement != worker, (batch, replacement, worker)
        for batch in (3, 4):
            (gate / f"go-{batch}").touch()
        _wait_for(lambda: (5, replacement) in _arrivals(gate) and _row_count(store) == 4,
                  process, errors, "batches 3 and 4 stored, batch 5 reached")
        assert _stored_batches(store) == [1, 2, 3, 4]  # no gap: the killed one was not dropped
        # then of the sweep itself, with its fork server and worker, while batch 5 waits
        _kill_with_descendants(process)
    finally:
        _kill_with_descendants(process)  # a failed test leaves no worker waiting at the gate
        log.close()
    before = dict(_rows(store))
    assert len(before) == 4
    rerun = subprocess.run(_sweep_command(store), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    after = dict(_rows(store))
    # every finished row kept as it was (same creation time), none duplicated, all there
    assert {k: after[k] for k in before} == before
    assert len(after) == len(BATCHES)
    frame = pd.read_csv(__import__("io").StringIO(rerun.stdout))
    assert list(frame["batch_size"]) == BATCHES and set(frame["status"]) == {"ok"}
    assert list(frame["forward_jaxpr_flops"]) == [mlp_forward_phase(b, 1) for b in BATCHES]


def test_a_configuration_whose_worker_died_is_retried_in_the_same_sweep(tmp_path):
    from tests.custom_models import D_IN, D_OUT

    # the model's factory SIGKILLs the worker process the first time it runs (as the
    # out-of-memory killer would); the sweep replaces the worker and tries the
    # configuration again, within this one call
    attempts = tmp_path / "attempts.txt"
    result = sweep(["tests.custom_models:dies_on_its_first_attempt"], batch_sizes=[2],
                   settings={"attempts": [str(attempts)]}, input_shape=(2, D_IN), counter="jaxpr",
                   store=tmp_path / "s.sqlite", jobs=1)
    pids = attempts.read_text().split()
    assert len(pids) == 2 and pids[0] != pids[1]  # killed once, then analysed in a new worker
    row = result.runs.iloc[0]
    assert (row["status"], row["error"]) == ("ok", None)
    assert row["parameters"] == D_IN * D_OUT + D_OUT  # Dense(D_OUT): kernel and bias
    with Store(tmp_path / "s.sqlite") as db:
        stored = db.results()
    assert [(r.status, r.report["parameters"]) for r in stored] == [("ok", D_IN * D_OUT + D_OUT)]


@pytest.mark.slow
def test_sweep_on_a_dask_local_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    store = tmp_path / "s.sqlite"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        result = sweep(["one_net"], batch_sizes=[1, 2], counter="jaxpr", store=store, scheduler=client)
    assert list(result.runs["status"]) == ["ok", "ok"]
    assert list(result.runs["forward_flops"]) == [mlp_forward_phase(b, 1) for b in (1, 2)]
    with Store(store) as db:
        assert len(db) == 2  # written by the client


def test_progress_bar_counts_configurations(tmp_path, capsys):
    sweep(["one_net"], batch_sizes=[1, 2], counter="jaxpr", store=tmp_path / "s.sqlite", jobs=0, progress=True)
    err = capsys.readouterr().err
    assert "2/2" in err and "ETA" in err
    # off when asked, and (progress=None) when stderr is not a terminal
    sweep(["one_net"], batch_sizes=[3], counter="jaxpr", store=tmp_path / "s.sqlite", jobs=0, progress=False)
    sweep(["one_net"], batch_sizes=[4], counter="jaxpr", store=tmp_path / "s.sqlite", jobs=0)
    assert capsys.readouterr().err == ""


def test_worker_processes_give_the_in_process_figures(tmp_path):
    local = sweep(["one_net"], batch_sizes=[1, 4], counter="jaxpr", store=tmp_path / "a.sqlite", jobs=0)
    pooled = sweep(["one_net"], batch_sizes=[1, 4], counter="jaxpr", store=tmp_path / "b.sqlite", jobs=2)
    columns = [c for c in local.runs.columns if c not in ("seconds",)]
    pd.testing.assert_frame_equal(local.runs[columns], pooled.runs[columns])


WORKER_MAIN = '''"""The main script, as a sweep's worker imports it again (as __mp_main__) before its initializer runs."""
import os
import pathlib
import signal

if __name__ == "__mp_main__":
    # beside this script: a worker has the fork server's environment, not the sweep's
    pathlib.Path(__file__).with_name(str(os.getpid())).write_text(repr(signal.getsignal(signal.SIGINT)))
'''


def test_worker_processes_ignore_sigint_before_they_import_the_main_script_again(tmp_path, monkeypatch):
    # Ctrl-C reaches the whole process group. A worker ignored it only from its initializer on, after
    # importing the main script again (the console script: the command line's modules), and a
    # KeyboardInterrupt raised before that landed in jax's gc callback: "Exception ignored in:
    # _xla_gc_callback" on the terminal, after the sweep's one line (CI, 2026-11-29)
    import types

    from xla_cost.runs import sweeps

    script = tmp_path / "research.py"
    script.write_text(WORKER_MAIN)
    main = types.ModuleType("__main__")
    main.__file__, main.__spec__ = str(script), None  # a script run as `python research.py`
    monkeypatch.setitem(sys.modules, "__main__", main)
    pool, _ = sweeps._spawn_pool(1)
    try:
        worker = pool.submit(os.getpid).result(timeout=WAIT_S)
    finally:
        pool.shutdown(wait=True)
    assert (tmp_path / str(worker)).read_text() == repr(signal.SIG_IGN)


def test_a_key_made_under_a_target_leaves_the_next_cpu_keys_as_a_fresh_process_makes_them():
    # the store's environment names the device compiled for: the active target's, else this backend's;
    # a key made under an H100 first must not hand the H100 to the CPU analyses after it
    from xla_cost.compiled import store, targets
    from xla_cost.timemodel import devices

    arguments = {"model": build_model("one_net"), "inputs": example_inputs("one_net", 2)}
    fresh = json.loads(subprocess.run(
        [sys.executable, "-c", "import json; from xla_cost.compiled.store import environment as e; "
         "print(json.dumps(e()))"], capture_output=True, text=True, timeout=120, check=True,
    ).stdout.strip().splitlines()[-1])
    with targets.use(devices.target("h100")):
        under_h100 = store.environment()
        h100_key = analysis_key(arguments)[0]
    assert under_h100["backend"] == "gpu" and "H100" in under_h100["device"]
    assert store.environment() == fresh
    assert analysis_key(arguments)[0] != h100_key


def test_analyze_cache_returns_the_stored_report(tmp_path, monkeypatch):
    store = tmp_path / "s.sqlite"
    model, inputs = build_model("conv_net"), example_inputs("conv_net", 2)
    first = xla_cost.analyze(model, inputs, optimizer="adam", per_layer=True, cache=store)
    monkeypatch.setattr("xla_cost.analysis.pipeline.build_workload", lambda *a, **k: pytest.fail("not cached"))
    second = xla_cost.analyze(build_model("conv_net"), inputs, optimizer="adam", per_layer=True, cache=store)
    assert second.to_dict() == first.to_dict()
    assert second.layers == first.layers
    # another batch size is another key
    assert analysis_key({"inputs": example_inputs("conv_net", 3)})[0] != analysis_key({"inputs": inputs})[0]


F32, BF16, I32 = 4, 2, 4  # bytes per element


def test_float32_and_bfloat16_sweeps_are_two_rows_with_their_own_figures(tmp_path):
    store = tmp_path / "s.sqlite"
    batch = 2
    result = sweep(["one_net"], batch_sizes=[batch], dtypes=["float32", "bfloat16"], store=store, jobs=0)
    runs = result.runs.set_index("dtype")
    assert list(runs.index) == ["float32", "bfloat16"] and set(runs["status"]) == {"ok"}
    assert runs.loc["float32", "key"] != runs.loc["bfloat16", "key"]
    with Store(store) as db:
        assert len(db) == 2
        for dtype in ("float32", "bfloat16"):
            row = db.get(runs.loc[dtype, "key"])
            assert (row.config["dtype"], row.report["dtype"]) == (dtype, dtype)
    # the forward program's arguments: the parameters (float32 in both: mixed precision),
    # the batch of OneNet's one input feature in the computation dtype, int32 labels
    for dtype, itemsize in (("float32", F32), ("bfloat16", BF16)):
        expected = F32 * mlp_params(1) + batch * 1 * itemsize + batch * I32
        assert runs.loc[dtype, "forward_argument_bytes"] == expected, dtype


class ComputesInItsInputsDtype(nn.Module):
    """Dense(features) computing in its input's dtype (float32 parameters)."""

    features: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.features, dtype=x.dtype)(x)


def test_analyze_cache_keys_the_inputs_dtype(tmp_path):
    """The same model on float32, then bfloat16 inputs: two analyses, not the first
    one read back for the second."""
    batch, d_in, d_out = 4, 6, 3
    store = tmp_path / "s.sqlite"
    f32 = jax.ShapeDtypeStruct((batch, d_in), jnp.float32)
    bf16 = jax.ShapeDtypeStruct((batch, d_in), jnp.bfloat16)
    assert analysis_key({"inputs": f32})[0] != analysis_key({"inputs": bf16})[0]
    first = xla_cost.analyze(ComputesInItsInputsDtype(d_out), f32, optimizer="sgd", cache=store)
    second = xla_cost.analyze(ComputesInItsInputsDtype(d_out), bf16, optimizer="sgd", cache=store)
    with Store(store) as db:
        assert len(db) == 2
    assert (first.dtype, second.dtype) == ("float32", "bfloat16")
    # forward arguments: the parameters (float32), the inputs in their dtype, int32 labels
    params = d_in * d_out + d_out
    for report, itemsize in ((first, F32), (second, BF16)):
        expected = F32 * params + batch * d_in * itemsize + batch * I32
        assert report.phases["forward"].memory.argument_bytes == expected, report.dtype
    # and the stored bfloat16 report is the one an uncached analysis gives
    uncached = xla_cost.analyze(ComputesInItsInputsDtype(d_out), bf16, optimizer="sgd")
    assert second.to_dict() == uncached.to_dict()


def test_analyze_cache_skips_what_has_no_stable_key(tmp_path):
    import optax

    class Opaque:  # an object whose repr carries its address
        pass

    key, why = analysis_key({"optimizer": Opaque()})
    assert key is None and "Opaque" in why
    report = xla_cost.analyze(
        build_model("one_net"), example_inputs("one_net", 1), optimizer=optax.sgd(0.1),
        cache=tmp_path / "s.sqlite", counter="jaxpr",
    )
    assert report.phases["forward"].flops == mlp_forward_phase(1, 1)


def test_report_from_dict_round_trip(zoo_report):
    report = zoo_report("conv_net", 2, "adam")
    again = xla_cost.Report.from_dict(json.loads(report.to_json()))
    assert again.to_dict() == report.to_dict()
    assert again.phases == report.phases and again.layers == report.layers


def test_cli_sweep_csv_and_layers(tmp_path, capsys):
    layers = tmp_path / "layers.csv"
    code = cli.main(["sweep", "one_net", "--batch-sizes", "1,2", "--counter", "jaxpr", "--optimizers", "sgd,adam",
                     "--store", str(tmp_path / "s.sqlite"), "--jobs", "0", "--format", "csv",
                     "--per-layer", "--layers", str(layers)])
    assert code == 0
    frame = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert list(zip(frame["optimizer"], frame["batch_size"])) == [("sgd", 1), ("sgd", 2), ("adam", 1), ("adam", 2)]
    assert list(frame["forward_flops"]) == [mlp_forward_phase(b, 1) for b in (1, 2, 1, 2)]
    layer_rows = pd.read_csv(layers)
    assert set(layer_rows["path"]) >= {"fc1", "fc2", "fc3"}


def test_cli_sweep_bad_store_is_one_line(tmp_path, capsys):
    code = cli.main(["sweep", "one_net", "--store", str(tmp_path), "--jobs", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--store" in err


def test_cli_analyze_cache(tmp_path, capsys, monkeypatch):
    args = ["analyze", "one_net", "--batch-size", "2", "--counter", "jaxpr", "--cache",
            "--store", str(tmp_path / "s.sqlite"), "--format", "json"]
    assert cli.main(args) == 0
    first = json.loads(capsys.readouterr().out)
    monkeypatch.setattr("xla_cost.analysis.pipeline.build_workload", lambda *a, **k: pytest.fail("not cached"))
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out) == first
    assert first["jaxpr_flops"]["forward"] == mlp_forward_phase(2, 1)
