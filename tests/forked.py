"""Python processes for many short jobs, each forked from one that has imported xla_cost, jax, flax and optax.

tests/test_docs.py runs every snippet of the manual and the README's commands, each in a process of its own:
started afresh, each one spent about a CPU second importing the same modules (34 jobs, a quarter of their
CPU). A `Server` is a Python process that imports them once (xla_cost first, as a script that starts with
``import xla_cost`` does; nothing of jax's backends is started) and forks a child per job: the child takes
the job's working directory, environment, arguments and warning filters, writes its standard output and error
to files, runs the script (``runpy``, as ``python script.py`` or ``python -m module`` would) and exits as a
Python process exits (``atexit`` handlers run). What the child writes never reaches the server's pipes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

PRELOAD = ("xla_cost", "jax", "jax.numpy", "flax.linen", "optax", "xla_cost.cli", "xla_cost.zoo")
"""Modules each server imports before it forks (what the jobs import first)."""

_SERVE = r"""
import importlib, json, os, re, runpy, sys, traceback, warnings
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
sys.stdout.write("ready\n"); sys.stdout.flush()
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid:
        sys.stdout.write(json.dumps({"pid": pid}) + "\n"); sys.stdout.flush()
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n"); sys.stdout.flush()
        continue
    # the child: the job's process
    os.chdir(job["cwd"])
    os.environ.clear(); os.environ.update(job["env"])
    null = os.open(os.devnull, os.O_RDONLY); os.dup2(null, 0); os.close(null)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        out = os.open(job[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644); os.dup2(out, fd); os.close(out)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    warnings.resetwarnings()
    for spec in job["warnings"]:  # as -W options: action:message:category
        action, _, rest = spec.partition(":")
        message, _, category = rest.partition(":")
        warnings.filterwarnings(action, re.escape(message), getattr(__builtins__, category, Warning) if category else Warning)
    sys.argv = list(job["argv"])
    code = 0
    try:
        if job["module"]:
            runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(job["argv"][0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            sys.stderr.write(f"{exc.code}\n")
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush(); sys.stderr.flush()
    sys.exit(code)
"""


class Server:
    """A Python process that forks a child per job (`run`), one job at a time."""

    def __init__(self, env: Mapping[str, str], preload: Sequence[str] = PRELOAD) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", _SERVE, json.dumps(list(preload))], env=dict(env),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stdout.readline() == "ready\n"

    def _message(self, timeout: float) -> dict:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"no answer in {timeout} s")
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the server ended (exit {self.process.wait()})")
        return json.loads(line)

    def run(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], module: str | None = None,
            warnings: Sequence[str] = (), timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Runs ``argv`` (a script and its arguments, or ``module``'s arguments after its name) as a Python
        process in ``cwd`` with ``env`` and ``-W``-style ``warnings`` would; its output read back from files."""
        assert self.process.stdin is not None
        out, err = os.path.join(cwd, ".job.stdout"), os.path.join(cwd, ".job.stderr")
        job = {"cwd": cwd, "env": dict(env), "argv": list(argv), "module": module, "warnings": list(warnings),
               "stdout": out, "stderr": err}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        pid = self._message(30)["pid"]
        try:
            code = self._message(timeout)["code"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._message(30)
            raise
        with open(out, encoding="utf-8", errors="replace") as o, open(err, encoding="utf-8", errors="replace") as e:
            return subprocess.CompletedProcess(list(argv), code, o.read(), e.read())

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
