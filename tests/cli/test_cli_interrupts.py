"""Ctrl-C always stops a command: exit 130, one line, no output written.

Python drops a KeyboardInterrupt raised inside a garbage-collection callback
(JAX registers one; "Exception ignored in: _xla_gc_callback") and turns one
raised while a C extension initialises into an ImportError; `Interrupts`
raises a dropped one again and the command line answers 130 whatever the
command ended with. The last test sends SIGINT to real analyses, at points
spread over importing, tracing and compiling, and while writing to a pipe.
"""

from __future__ import annotations

import gc
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from xla_cost import cli
from xla_cost.cli.interrupts import RAISE_AGAIN_S, Interrupts
from xla_cost.cli.main import EXIT_INTERRUPTED


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _collect_with_an_interrupt() -> None:
    """A garbage collection during which SIGINT comes, as JAX's gc callback sees it:
    the handler's KeyboardInterrupt is raised inside the callback, where Python drops it."""
    def callback(phase, info):
        if phase == "start":
            signal.raise_signal(signal.SIGINT)  # runs the handler here, inside the callback

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)


def test_an_interrupt_dropped_in_a_gc_callback_is_raised_again(capsys):
    with Interrupts() as interrupts, pytest.raises(KeyboardInterrupt):
        _collect_with_an_interrupt()
        deadline = time.monotonic() + 100 * RAISE_AGAIN_S
        while time.monotonic() < deadline:  # Python code running on, as the analysis would
            time.sleep(RAISE_AGAIN_S / 10)
    assert interrupts.received
    assert "Exception ignored" not in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_a_command_that_swallowed_the_interrupt_exits_130_and_writes_nothing(capsys, monkeypatch, tmp_path):
    def analyze(args):
        _collect_with_an_interrupt()
        return "the whole result"  # the command went on to the end

    monkeypatch.setattr(cli.commands, "analyze", analyze)
    code, out, err = run(capsys, "analyze", "one_net", "--output", str(tmp_path / "r.json"))
    assert code == EXIT_INTERRUPTED == 130
    assert err.strip() == "xla-cost: interrupted" and out == ""
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_that_broke_an_import_exits_130_not_2(capsys, monkeypatch, tmp_path):
    def analyze(args):
        # as jaxlib's extension module, interrupted while it initialises
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt as exc:
            raise ImportError("Encountered an error while initializing the extension.") from exc
        return "not reached"

    monkeypatch.setattr(cli.commands, "analyze", analyze)
    code, out, err = run(capsys, "analyze", "one_net", "--output", str(tmp_path / "r.json"))
    assert code == 130
    assert err.strip() == "xla-cost: interrupted" and out == ""
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_during_the_rename_lets_the_whole_file_in_and_exits_0(capsys, monkeypatch, tmp_path):
    real_replace = os.replace

    def replace_interrupted(src, dst):
        signal.raise_signal(signal.SIGINT)  # the rename has begun: recorded, not raised
        real_replace(src, dst)

    monkeypatch.setattr(cli.commands, "analyze", lambda args: "the whole result")
    monkeypatch.setattr(os, "replace", replace_interrupted)
    target = tmp_path / "r.txt"
    code, _, err = run(capsys, "analyze", "one_net", "--output", str(target))
    assert (code, err) == (0, "")
    assert target.read_text() == "the whole result\n"


def test_an_interrupt_after_the_command_finished_is_ignored_while_the_process_exits(tmp_path):
    # the output is whole and main() said 0; a Ctrl-C while Python and JAX shut down (an
    # atexit callback) used to print a traceback and end the process with 130 beside the file
    script = tmp_path / "late.py"
    script.write_text(
        "import atexit, importlib, os, signal\n"
        "entry = importlib.import_module('xla_cost.cli.main')\n"
        "entry.main = lambda argv=None: 0\n"
        "atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))\n"
        "entry.console()\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert (done.returncode, done.stderr) == (0, "")


# ------------------------------------------------------------------ real analyses

MODEL = ("deeper_conv_net", "--batch-size", "2", "--no-cache")
"""A small zoo model (100 shared 3x3 convs) that takes a few seconds to import, trace and compile."""
RUNS = 20


def _start(tmp_path, output) -> subprocess.Popen:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_COST_STORE": str(tmp_path / "store.sqlite"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.Popen([sys.executable, "-m", "xla_cost", "analyze", *MODEL, "--output", str(output)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


@pytest.mark.slow  # 20 analyses of a few seconds each, interrupted: about 40 s on 2 cores
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc to see the process blocked")
def test_sigint_at_any_point_of_a_real_analysis_exits_130_and_writes_nothing(tmp_path):
    output = tmp_path / "out.txt"
    start = time.monotonic()
    whole = _start(tmp_path, output)
    _, err = whole.communicate(timeout=300)
    seconds = time.monotonic() - start
    assert whole.returncode == 0 and output.exists(), err  # uninterrupted, it writes the file
    output.unlink()

    # SIGINT spread over the run: importing jax, building, tracing, compiling
    delays = [0.3 + (0.85 * seconds - 0.3) * i / (RUNS - 2) for i in range(RUNS - 1)]
    outcomes = []
    for delay in delays:
        while True:
            process = _start(tmp_path, output)
            time.sleep(delay)
            if process.poll() is None:
                break
            process.communicate()  # finished before the signal (a quicker run than the first)
            output.unlink(missing_ok=True)
            delay /= 2
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=300)
        outcomes.append((round(delay, 2), process.returncode, output.exists(), err.strip()))
        output.unlink(missing_ok=True)

    # and while writing: the output is a pipe nobody reads, so the command blocks opening it
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    process = _start(tmp_path, pipe)
    idle = 0
    ticks = _cpu_ticks(process.pid)
    deadline = time.monotonic() + 300
    while idle < 3 and time.monotonic() < deadline:  # no CPU for 0.9 s: the analysis is done
        time.sleep(0.3)
        now = _cpu_ticks(process.pid)
        idle, ticks = (idle + 1 if now == ticks else 0), now
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=300)
    written = not stat.S_ISFIFO(os.stat(pipe).st_mode)  # a regular file renamed over the pipe
    if not written:
        reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
        try:
            written = os.read(reader, 1 << 20) != b""  # what the command left in the pipe
        finally:
            os.close(reader)
    outcomes.append(("writing", process.returncode, written, err.strip()))

    assert len(outcomes) == RUNS
    assert [o for o in outcomes if o[1:] != (130, False, "xla-cost: interrupted")] == [], outcomes
