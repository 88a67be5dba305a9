"""A sweep's worker processes that cannot start are the harness's failure, not the configurations'.

Workers import the calling script again: a script whose sweep is not under
``if __name__ == "__main__":`` is refused before anything starts, and workers
that die before running anything stop the sweep with one line; neither
stores a row.
"""

from __future__ import annotations

import ast
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from xla_cost.runs.sweeps import _under_main_guard

SWEEP = 'xla_cost.sweep(["one_net"], batch_sizes=[1, 2], counter="jaxpr", jobs=2)'


def _run_script(tmp_path, source: str) -> subprocess.CompletedProcess:
    (tmp_path / "script.py").write_text(textwrap.dedent(source))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_COST_STORE": str(tmp_path / "store.sqlite"),
           "PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def _rows(tmp_path, name: str = "store.sqlite") -> int:
    store = tmp_path / name
    if not store.exists():
        return 0
    with sqlite3.connect(store) as db:
        return db.execute("SELECT count(*) FROM results").fetchone()[0]


def test_a_script_without_the_main_guard_is_refused_before_any_worker_starts(tmp_path):
    # the manual's snippet as a plain script, without the guard
    done = _run_script(tmp_path, f"""\
        import xla_cost

        runs, layers = {SWEEP}
        print(runs)
    """)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == (
        "xla_cost.errors.InputError: Expected a script's sweep under `if __name__ == \"__main__\":`, got a call at "
        "script.py:3 outside it instead. Each worker process imports the script again and would run the call too: "
        "put it under the guard, or pass jobs=0."
    )
    # no worker started: none of their tracebacks, no semaphores left behind, nothing stored
    assert "RuntimeError" not in done.stderr and "leaked" not in done.stderr
    assert len(done.stderr.splitlines()) < 15
    assert _rows(tmp_path) == 0


def test_workers_that_die_while_starting_stop_the_sweep_and_store_nothing(tmp_path):
    # the guard is there, but importing the script fails in the workers (the
    # check cannot see that): they die before running anything
    done = _run_script(tmp_path, f"""\
        import xla_cost

        if __name__ == "__mp_main__":
            raise SystemExit("a worker cannot import this script")
        if __name__ == "__main__":
            runs, layers = {SWEEP}
            print(runs)
    """)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == (
        "xla_cost.errors.InputError: Expected worker processes that start, got workers that died before running "
        "anything instead. A script's sweep belongs under `if __name__ == \"__main__\":` (each worker process "
        "imports the script again), or pass jobs=0."
    )
    assert "died 2 times" not in done.stderr
    assert _rows(tmp_path) == 0  # not stored as the configurations' failures, which later runs would return


def test_a_pool_broken_before_a_configuration_is_handed_over_is_the_same_failure(tmp_path, monkeypatch):
    # workers that die as fast as their import of the script fails can break the pool before the second
    # configuration is submitted: submit() then raises (seen once in a fresh clone's run of the test above)
    import concurrent.futures.process
    import multiprocessing

    import xla_cost
    from xla_cost.errors import InputError
    from xla_cost.runs import sweeps

    class Broken:
        def submit(self, *args, **kwargs):
            raise concurrent.futures.process.BrokenProcessPool("A child process terminated abruptly")

        def shutdown(self, wait=True, cancel_futures=False):
            pass

    monkeypatch.setattr(sweeps, "_spawn_pool", lambda jobs: (Broken(), multiprocessing.Value("i", 0)))
    with pytest.raises(InputError, match="workers that died before running anything"):
        xla_cost.sweep(["one_net"], batch_sizes=[1, 2], counter="jaxpr", jobs=2, store=tmp_path / "s.sqlite",
                       progress=False)
    assert _rows(tmp_path, "s.sqlite") == 0


def test_the_guarded_script_runs_its_sweep_in_workers(tmp_path):
    done = _run_script(tmp_path, f"""\
        import xla_cost

        def main():
            runs, layers = {SWEEP}
            print(list(runs["status"]))

        if __name__ == "__main__":
            main()
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['ok', 'ok']"
    assert _rows(tmp_path) == 2


@pytest.mark.parametrize(("source", "guarded"), [
    ('if __name__ == "__main__":\n    run()\n', True),
    ('if "__main__" == __name__:\n    run()\n', True),
    ('if __name__ != "__main__":\n    pass\nelse:\n    run()\n', True),
    ('try:\n    if __name__ == "__main__":\n        run()\nexcept ValueError:\n    pass\n', True),
    ('if __name__ == "__main__":\n    pass\nrun()\n', False),
    ('if __name__ != "__main__":\n    run()\n', False),
    ('if name == "__main__":\n    run()\n', False),
])
def test_the_guard_is_found_in_the_source(source, guarded):
    tree = ast.parse(source)
    line = next(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call))
    assert _under_main_guard(tree, line) is guarded
