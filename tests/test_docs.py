"""The README and the manual under docs/ stay true.

Every ```python block of README.md and docs/*.md runs, each in a Python process
of its own (forked from one that imported xla_cost, jax, flax and optax:
tests/forked.py) whose working directory is a new temporary directory (with its own
results store, and the compilation cache the run's tests share, so nothing lands in the
repository or the user's caches). Every ``xla-cost`` command of a ```bash, ```console or
```sh block parses with the CLI's own parser, and the README's commands run.
The synopsis of docs/cli.md names exactly the parser's options; relative links,
repository paths and ``xla_cost.*`` names resolve; the README stays a front
door (under 10 KB, two quickstart commands, a map of docs/).

A block right below ``<!-- not run: <reason> -->`` is skipped with that reason;
keep such blocks rare.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import importlib
import os
import pathlib
import queue
import re
import shlex
import subprocess
import sys
import tempfile

import pytest

from xla_cost.cli import build_parser

from tests import forked

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = (README, *sorted(DOCS.glob("*.md")))

README_LIMIT = 10 * 1024
"""The front door's size limit in bytes (the issue: "under ~10 KB")."""

REQUIRED_DOCS = (
    "README.md", "api.md", "cli.md", "own-models.md", "sweeps-and-reports.md",
    "sharding.md", "memory.md", "timing.md", "conventions.md",
)
"""The manual's pages: the map first, then one page per topic."""

SHELL = ("bash", "console", "sh", "shell")
"""Fence languages whose ``xla-cost`` commands are parsed."""

SNIPPET_TIMEOUT_S = 300
WARNINGS = ("-W", "error", "-W", "ignore:An NVIDIA GPU may be present:UserWarning")
"""As pyproject.toml's filterwarnings: a snippet that warns fails."""

_FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)\s*$")
_NOT_RUN = re.compile(r"^<!--\s*not run:\s*(\S.*?)\s*-->$")


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: pathlib.Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip: str | None  # the reason given by a ``not run`` marker

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _blocks(page: pathlib.Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, lang, start = opening.group(1), opening.group(2).lower(), i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{page.relative_to(ROOT)}:{start + 1}: a code block that never closes")
        above = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = _NOT_RUN.match(above)
        found.append(Block(page, start + 1, lang, "\n".join(body) + "\n", marker.group(1) if marker else None))
        i += 1
    return found


BLOCKS = [block for page in PAGES for block in _blocks(page)]
PYTHON = [b for b in BLOCKS if b.lang == "python"]


def _prose(page: pathlib.Path) -> str:
    """The page without its fenced blocks (links and names in prose)."""
    text = page.read_text(encoding="utf-8")
    for block in _blocks(page):
        text = text.replace(block.code, "")
    return text


# --------------------------------------------------------------------- commands


def _commands(block: Block) -> list[list[str]]:
    """The argv of every ``xla-cost`` (or ``python -m xla_cost``) command of a shell block."""
    text = block.code.replace("\\\n", " ")
    lines = text.splitlines()
    if block.lang == "console":  # commands are the prompt lines; the rest is output
        lines = [line.strip()[2:] for line in lines if line.strip().startswith("$ ")]
    commands = []
    for line in lines:
        tokens = shlex.split(line, comments=True)
        segment: list[str] = []
        for token in [*tokens, "&&"]:
            if token not in ("&&", "||", ";", "|"):
                segment.append(token)
                continue
            while segment and re.fullmatch(r"\w+=\S*", segment[0]):  # VAR=value before a command
                segment.pop(0)
            if segment[:1] == ["xla-cost"]:
                commands.append(segment[1:])
            elif segment[:3] == ["python", "-m", "xla_cost"]:
                commands.append(segment[3:])
            segment = []
    return commands


COMMANDS = [(b, argv) for b in BLOCKS if b.lang in SHELL for argv in _commands(b)]
README_COMMANDS = [(b, argv) for b, argv in COMMANDS if b.page == README]


@pytest.mark.parametrize(("block", "argv"), COMMANDS, ids=[f"{b.id}:{' '.join(a[:2])}" for b, a in COMMANDS])
def test_every_command_shown_parses(block, argv, capsys):
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{block.id}: `xla-cost {shlex.join(argv)}` does not parse: "
                    f"{capsys.readouterr().err.strip() or exc}")


def test_the_pages_show_commands_and_snippets():
    # The parametrized tests above and below would pass vacuously on pages
    # whose blocks the parser misses.
    assert len(PYTHON) >= 10 and len(COMMANDS) >= 20, (len(PYTHON), len(COMMANDS))
    assert all(b.skip is None for b in BLOCKS if b.page == README), "the README's blocks all run"


# ----------------------------------------------------------------- running them


@dataclasses.dataclass(frozen=True)
class Job:
    """A snippet or a README command, run in its own process and directory."""

    id: str
    argv: tuple[str, ...]
    source: str | None = None  # a python snippet, written to the directory first
    skip: str | None = None


JOBS = [Job(b.id, (sys.executable, *WARNINGS, "snippet.py"), b.code, b.skip) for b in PYTHON]
JOBS += [Job(f"{b.id}:xla-cost {' '.join(a[:2])}", (sys.executable, "-m", "xla_cost", *a), skip=b.skip)
         for b, a in README_COMMANDS]


def _env(here: pathlib.Path | None = None, cache: pathlib.Path | None = None) -> dict[str, str]:
    """A job's environment: a results store and a cache home of its own directory, and xla_cost's
    compilation and analyses caches on in ``cache``, which the module's jobs share, as a user's
    commands share theirs (the README's commands and the pages' snippets analyse the same zoo
    programs again: read back, not compiled again). Without ``cache``, none."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "JAX_PLATFORMS": "cpu",
        "XLA_COST_NO_CACHE": "1",
        "MPLBACKEND": "Agg",
    }
    if cache is not None:
        del env["XLA_COST_NO_CACHE"]
        env["XLA_COST_CACHE_DIR"] = str(cache)
    if here is not None:
        env.update(XLA_COST_STORE=str(here / "results.sqlite"), XDG_CACHE_HOME=str(here / "cache"))
    return env


def _run(job: Job, server: forked.Server, cache: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """The job in a process forked by ``server`` (tests/forked.py: a Python process that imported xla_cost,
    jax, flax and optax once), as ``python -W ... snippet.py`` or ``python -m xla_cost ...`` runs it."""
    with tempfile.TemporaryDirectory(prefix="xla_cost_docs_") as tmp:
        here = pathlib.Path(tmp)
        if job.source is not None:
            (here / "snippet.py").write_text(job.source, encoding="utf-8")
            return server.run(["snippet.py"], cwd=tmp, env=_env(here, cache), warnings=WARNINGS[1::2],
                              timeout=SNIPPET_TIMEOUT_S)
        module = job.argv.index("-m") + 1
        return server.run([job.argv[module], *job.argv[module + 1:]], cwd=tmp, env=_env(here, cache),
                          module=job.argv[module], timeout=SNIPPET_TIMEOUT_S)


@pytest.fixture(scope="module")
def results(request, shared_cache_dir):
    """Runs the jobs the session selected, as many at a time as there are cores, each in a process of its own
    forked from a server's (one server a thread)."""
    selected = {item.callspec.params["job"].id for item in request.session.items
                if getattr(item, "module", None) is sys.modules[__name__]
                and "job" in getattr(getattr(item, "callspec", None), "params", {})}
    jobs = [job for job in JOBS if job.id in selected and not job.skip]
    workers = max(1, min(4, os.cpu_count() or 1, len(jobs)))
    servers: queue.Queue[forked.Server] = queue.Queue()

    def run(job: Job) -> subprocess.CompletedProcess[str]:
        server = servers.get()
        try:
            return _run(job, server, shared_cache_dir)
        finally:
            servers.put(server)

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for server in pool.map(lambda _: forked.Server(_env()), range(workers if jobs else 0)):
            servers.put(server)
        futures = {job.id: pool.submit(run, job) for job in jobs}
        yield futures
        for future in futures.values():
            future.cancel()
    while not servers.empty():
        servers.get().close()


@pytest.mark.parametrize("job", [
    pytest.param(job, id=job.id, marks=[pytest.mark.skip(reason=f"not run: {job.skip}")] if job.skip else [])
    for job in JOBS
])
def test_snippets_and_readme_commands_run(job, results):
    done = results[job.id].result()
    assert done.returncode == 0, f"{job.id} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


# ------------------------------------------------------------------ the pages


def test_readme_is_a_front_door():
    size = len(README.read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes; move manual content to docs/ (limit {README_LIMIT})"
    prose = _prose(README)
    for page in sorted(DOCS.glob("*.md")):
        assert f"(docs/{page.name})" in prose, f"the README's map of docs/ has no link to {page.name}"


def test_docs_has_every_page():
    missing = [name for name in REQUIRED_DOCS if not (DOCS / name).is_file()]
    assert not missing, f"docs/ lacks {missing}"
    listed = _prose(DOCS / "README.md")
    for page in sorted(DOCS.glob("*.md")):
        if page.name != "README.md":
            assert f"]({page.name})" in listed, f"docs/README.md does not list {page.name}"


def test_quickstart_is_two_commands_and_ci_runs_the_second():
    section = README.read_text(encoding="utf-8").split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = next(b for b in _blocks(README) if b.lang in SHELL and b.code in section)
    install_and_run, install_and_test = [line for line in block.code.splitlines() if line.strip()]
    install, run = install_and_run.split(" && ")
    assert install == "pip install -e ." and run.startswith("xla-cost analyze ")
    from xla_cost.zoo import get_spec  # the quickstart analyses a zoo model

    get_spec(shlex.split(run)[2])
    install, test = install_and_test.split(" && ")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert install == "pip install -e '.[test]'" and "install -q -e '.[test]'" in ci
    assert test in ci.splitlines(), f"`.ci/run` does not run the README's test command {test!r}"


def test_readme_layout_names_every_subpackage():
    section = README.read_text(encoding="utf-8").split("## Project layout", 1)[1]
    # the package's subpackages, and the zoo (models/, installed as xla_cost.zoo)
    subpackages = sorted({p.parent.name for p in (ROOT / "xla_cost").glob("*/__init__.py")} | {"zoo"})
    assert "cli" in subpackages and (ROOT / "models" / "__init__.py").is_file()
    missing = [name for name in subpackages if f"`{name}/`" not in section and f"`{name}`" not in section]
    assert not missing, f"the README's project layout does not name {missing}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]{1,2}(.+?)[`*_]{1,2}", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: pathlib.Path) -> set[str]:
    anchors: set[str] = set()
    for line in _prose(page).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*)$", line)
        if heading:
            slug, n = _slug(heading.group(1)), 0
            while (slug if n == 0 else f"{slug}-{n}") in anchors:
                n += 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_point_to_existing_files(page):
    broken = []
    for target in _LINK.findall(_prose(page)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or not file.is_relative_to(ROOT):
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


_REPO_PATH = re.compile(r"`((?:tests|benchmarks|xla_cost|models|reports|docs|\.ci)/[\w./-]+)`")
_NAME = re.compile(r"`(xla_cost(?:\.\w+)+)")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_paths_and_names_in_prose_exist(page):
    # The paths a page names in code spans, and every `xla_cost.a.b` it names,
    # as of this tree (module paths go stale when the package is reorganised).
    prose = _prose(page)
    missing = [p for p in _REPO_PATH.findall(prose) if not (ROOT / p.rstrip("/")).exists()]
    for name in sorted(set(_NAME.findall(prose))):
        parts = name.split(".")
        value, i = None, len(parts)
        while i > 0:
            try:
                value = importlib.import_module(".".join(parts[:i]))
                break
            except ModuleNotFoundError:
                i -= 1
        try:
            for attribute in parts[i:]:
                value = getattr(value, attribute)
        except AttributeError:
            missing.append(name)
    assert not missing, f"{page.relative_to(ROOT)} names what does not exist: {missing}"


def test_python_commands_name_existing_scripts():
    missing = []
    for block in (b for b in BLOCKS if b.lang in SHELL):
        for script in re.findall(r"\bpython3? ((?:\./)?[\w/.-]+\.py)\b", block.code):
            if not (ROOT / script).is_file():
                missing.append(f"{block.id}: {script}")
    for page in PAGES:
        for script in re.findall(r"`python3? ([\w/.-]+\.py)", _prose(page)):
            if not (ROOT / script).is_file():
                missing.append(f"{page.relative_to(ROOT)}: {script}")
    assert not missing, missing


# ------------------------------------------------------------ the CLI reference


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {option: action for action in parser._actions for option in action.option_strings
            if option.startswith("--") and option != "--help" and action.help != argparse.SUPPRESS}


def test_cli_synopsis_matches_the_parser():
    page = DOCS / "cli.md"
    text = page.read_text(encoding="utf-8")
    block = next(b for b in _blocks(page) if b.lang == "text"
                 and "<!-- synopsis" in text.splitlines()[b.line - 2])
    parser = build_parser()
    subcommands = _subcommands(parser)
    shown: dict[str, set[str]] = {name: set() for name in subcommands}
    current = None
    problems = []
    for line in block.code.splitlines():
        words = line.split()
        if words[:1] == ["xla-cost"]:
            current = words[1] if words[1] in subcommands else None
        target = subcommands[current] if current else parser
        options = _options(target)
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line):
            if flag not in options and not (current is None and flag == "--debug"):
                problems.append(f"`xla-cost {current or ''}` has no {flag}")
            elif current:
                shown[current].add(flag)
        for flag, alternatives in re.findall(r"(--[a-z][a-z0-9-]*)[ =]([\w.-]+(?:\|[\w.-]+)+)", line):
            choices = getattr(options.get(flag), "choices", None)
            if choices is not None and set(alternatives.split("|")) != set(choices):
                problems.append(f"`xla-cost {current} {flag}` shows {alternatives}, the parser takes {'|'.join(choices)}")
    for name, sub in subcommands.items():
        for flag in sorted(set(_options(sub)) - shown[name]):
            problems.append(f"the synopsis of `xla-cost {name}` lacks {flag}")
    assert not problems, problems


def test_every_keyword_of_analyze_and_hardware_is_documented():
    import xla_cost

    api, sharding = _prose(DOCS / "api.md"), _prose(DOCS / "sharding.md")
    for options, page, text in (
        (xla_cost.ModelOptions, "api.md", api),
        (xla_cost.AnalysisOptions, "api.md", api),
        (xla_cost.ShardingOptions, "api.md", api),
        (xla_cost.Hardware, "sharding.md", sharding),
    ):
        missing = [f.name for f in dataclasses.fields(options) if f"`{f.name}`" not in text]
        assert not missing, f"docs/{page} does not name {options.__name__}'s {missing}"
