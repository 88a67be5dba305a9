"""Where output goes: a symlink's target, a named pipe, stdout, and the errors for paths
that cannot be written (each naming its own option, said before anything runs).

Every path is in a temporary directory: ``/dev/stdout`` is stood in for by a
symlink to ``/proc/self/fd/1``, never the machine's own ``/dev``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

import xla_cost
from xla_cost.cli import main
from xla_cost.study import write as study_write

# one_net's analysis counted from the jaxpr: a second or less, no compile
ANALYZE = ("analyze", "one_net", "--counter", "jaxpr", "--format", "json")
PROC_FD_1 = "/proc/self/fd/1"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _cli(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p),
           "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "xla_cost", *argv], env=env, timeout=300, check=False, **kwargs)


# ------------------------------------------------------------------ where it goes


def test_a_symlink_gets_its_target_written_and_stays_a_link(capsys, tmp_path):
    target = tmp_path / "target.json"
    target.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    code, _, err = run(capsys, *ANALYZE, "--output", str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == target.name
    assert json.loads(target.read_text())["model"] == "one_net"  # the target has the new content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "target.json"]  # no temporary file left


def test_a_named_pipe_is_written_in_place_for_its_reader(capsys, tmp_path):
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    # the reader holds the pipe open read-write: the command's open does not block,
    # and what it writes waits in the pipe (4 KB, far below its 64 KB buffer)
    reader = os.open(pipe, os.O_RDWR | os.O_NONBLOCK)
    try:
        code, _, err = run(capsys, *ANALYZE, "--output", str(pipe))
        assert code == 0, err
        received = os.read(reader, 1 << 20)  # BlockingIOError if nothing came through the pipe
    finally:
        os.close(reader)
    assert json.loads(received)["model"] == "one_net"
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)  # still the pipe, not a regular file in its place
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


def test_output_dash_prints_and_writes_no_file(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *ANALYZE, "--output", "-")
    assert code == 0, err
    assert json.loads(out)["model"] == "one_net"
    assert list(tmp_path.iterdir()) == []  # no file called "-"


@pytest.mark.skipif(not os.path.exists(PROC_FD_1), reason="needs /proc/self/fd")
def test_a_path_to_this_process_stdout_prints(tmp_path):
    # as `--output /dev/stdout` (a symlink to /proc/self/fd/1), with stdout a pipe
    stdout = tmp_path / "stdout"
    stdout.symlink_to(PROC_FD_1)
    done = _cli(*ANALYZE, "--output", str(stdout), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model"] == "one_net"
    assert stdout.is_symlink() and os.readlink(stdout) == PROC_FD_1  # not replaced by a regular file
    assert [p.name for p in tmp_path.iterdir()] == ["stdout"]


@pytest.mark.skipif(not os.path.exists(PROC_FD_1), reason="needs /proc/self/fd")
def test_stdout_appended_to_a_file_keeps_what_was_there(tmp_path):
    # `xla-cost ... --output /dev/stdout >> log`: the log keeps its lines, the result is added
    stdout = tmp_path / "stdout"
    stdout.symlink_to(PROC_FD_1)
    log = tmp_path / "log.txt"
    log.write_text("an earlier line\n")
    with open(log, "a") as handle:
        done = _cli(*ANALYZE, "--output", str(stdout), stdout=handle, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr
    first, rest = log.read_text().split("\n", 1)
    assert first == "an earlier line"
    assert json.loads(rest)["model"] == "one_net"


# ------------------------------------------------------------------ paths that cannot be written


def test_output_under_a_file_says_the_file_is_not_a_directory(capsys, tmp_path):
    # as --output /etc/passwd/x.json: the parent exists, as a file
    parent = tmp_path / "file.txt"
    parent.write_text("a file\n")
    path = parent / "x.json"
    code, out, err = run(capsys, *ANALYZE, "--output", str(path))
    assert code == 2 and out == ""
    assert one_error_line(err) == (
        f"xla-cost: error: Expected --output in a directory, got {str(path)!r} ({str(parent)!r} is a file, "
        "not a directory) instead. Pass --output PATH to a file in a writable directory, e.g. --output report.json."
    )
    assert [p.name for p in tmp_path.iterdir()] == ["file.txt"] and parent.read_text() == "a file\n"


def test_a_socket_is_refused_before_the_run(capsys, tmp_path):
    import socket

    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        code, out, err = run(capsys, *ANALYZE, "--output", str(path))
    assert code == 2 and out == ""
    assert one_error_line(err).startswith(f"xla-cost: error: Expected --output naming a file, got {str(path)!r}, "
                                          "a socket instead.")
    assert stat.S_ISSOCK(os.stat(path).st_mode)


def test_plot_error_names_plot_and_comes_before_the_run(capsys, tmp_path, monkeypatch):
    import xla_cost.runs.scaling

    def ran(*args, **kwargs):
        raise AssertionError("scaling ran before --plot was checked")

    monkeypatch.setattr(xla_cost.runs.scaling, "scaling", ran)
    directory = tmp_path / "plots"
    directory.mkdir()
    for plot, received in ((f"{directory}/", f"{str(directory) + '/'!r}, a directory"), ("-", "'-' (stdout)")):
        code, out, err = run(capsys, "scaling", "one_net", "--devices", "1,2", "--plot", plot)
        assert code == 2 and out == ""
        line = one_error_line(err)
        assert line.startswith(f"xla-cost: error: Expected --plot naming a file, got {received} instead. Pass --plot ")
        assert "--output" not in line
    assert [p.name for p in tmp_path.iterdir()] == ["plots"] and list(directory.iterdir()) == []


def test_layers_error_names_layers_and_stores_nothing(capsys, tmp_path):
    directory = tmp_path / "rows"
    directory.mkdir()
    store = tmp_path / "s.sqlite"
    code, out, err = run(capsys, "sweep", "one_net", "--jobs", "0", "--store", str(store), "--layers", f"{directory}/")
    assert code == 2 and out == ""
    assert one_error_line(err) == (
        f"xla-cost: error: Expected --layers naming a file, got {str(directory) + '/'!r}, a directory instead. "
        "Pass --layers PATH to a file in a writable directory, e.g. --layers layers.csv."
    )
    assert not store.exists() and list(directory.iterdir()) == []


# ------------------------------------------------------------------ write_report's directory


@pytest.fixture(scope="module")
def report():
    from xla_cost.runs.configs import RunConfig

    return RunConfig("one_net", 2, optimizer="sgd", counter="jaxpr", per_layer=True).run()


def test_write_report_under_a_file_is_one_input_error(report, tmp_path):
    parent = tmp_path / "file.txt"
    parent.write_text("a file\n")
    with pytest.raises(xla_cost.InputError) as caught:
        xla_cost.write_report(report, out=parent / "pages")
    assert str(caught.value) == (
        f"Expected --out naming a directory, got {str(parent / 'pages')!r} ({str(parent)!r} is a file, "
        "not a directory) instead. Pass a directory you can write, e.g. --out reports/."
    )
    assert [p.name for p in tmp_path.iterdir()] == ["file.txt"]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_write_report_where_nothing_can_be_created_is_one_input_error(report):
    # /proc refuses new entries even to root (os.access says yes to root): a probe says no
    with pytest.raises(xla_cost.InputError) as caught:
        xla_cost.write_report(report, out="/proc/xla-cost-pages")
    message = str(caught.value)
    assert message.startswith("Expected --out in a writable place, got '/proc/xla-cost-pages' (nothing can be "
                              "created in '/proc': ") and "\n" not in message
    assert not os.path.exists("/proc/xla-cost-pages")


def test_write_report_that_cannot_make_its_figures_directory_is_one_input_error(report, tmp_path):
    # out is a writable directory, but figures/ in it is a file: the mkdir fails while writing
    (tmp_path / "figures").write_text("not a directory\n")
    with pytest.raises(xla_cost.InputError) as caught:
        study_write.write_report(report, out=tmp_path)
    message = str(caught.value)
    assert message.startswith(f"Expected --out a directory the pages can be written to, got {str(tmp_path)!r} (")
    assert "\n" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figures"]  # no temporary file left behind
