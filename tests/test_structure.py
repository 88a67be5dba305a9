"""The shape of the package, checked by reading its source (`ast`), not by importing it.

The folder tree shows the layers; a module imports only from its own layer or
those below, never another module's private name, and the import graph has no
cycle. Imports inside functions are there only to keep a light module light
(the command line starts without jax); `LAZY_IMPORTERS` says which modules do
that, and why. The public API is one list; the store's source digest reads
every module that computes results, at any depth.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import pathlib
import tomllib

import pytest

import xla_cost
from xla_cost.compiled import store

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "xla_cost"
ZOO = ROOT / "models"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("xla_cost.errors", "xla_cost.choices", "xla_cost.options", "xla_cost.version", "xla_cost.plugins"),
    ("xla_cost.present",),
    ("xla_cost.step",),
    ("xla_cost.count",),
    ("xla_cost.compiled",),
    ("xla_cost.parallel",),
    ("xla_cost.timemodel",),
    ("xla_cost.analysis",),
    ("xla_cost.zoo",),
    ("xla_cost.runs",),
    ("xla_cost.study",),
    ("xla_cost.cli",),
    ("xla_cost", "xla_cost.__main__"),
)
"""The layers, lowest first: a module of layer i imports from layers 0..i only."""

LAZY_IMPORTERS: dict[str, str] = {
    "xla_cost.cli.commands": "each command imports the library it runs: `xla-cost --help` starts without jax",
    "xla_cost.study": "the report pages are listed (the CLI's --help) without loading what they compute with",
    "xla_cost.compiled.store": "a sweep answered from the store imports no jax; the environment needs it",
    "xla_cost.runs.configs": "a RunConfig is built and keyed without jax; building its model needs the zoo",
    "xla_cost.runs.sweeps": "a sweep whose every configuration is stored imports no model code",
    "xla_cost.runs.stores": "`store list` loads the zoo (flax, jax) only to read a --model name's aliases",
    "xla_cost.analysis.pipeline": "an untimed analysis does not load the timing modules (issue 49: analyze's start-up)",
}
"""The modules (or subpackages) that import other xla_cost modules inside functions, and why."""


def _module_name(path: pathlib.Path) -> str:
    if path.is_relative_to(ZOO):
        parts = ("xla_cost", "zoo", *path.relative_to(ZOO).with_suffix("").parts)
    else:
        parts = ("xla_cost", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, pathlib.Path]:
    files = [p for p in PACKAGE.rglob("*.py") if not p.is_relative_to(PACKAGE / "zoo")]
    files += list(ZOO.rglob("*.py"))
    return {_module_name(p): p for p in files if "__pycache__" not in p.parts}


MODULES = _sources()


@dataclasses.dataclass(frozen=True)
class _Import:
    source: str
    target: str  # an xla_cost module
    names: tuple[str, ...]
    in_function: bool
    line: int


def _imports(name: str, path: pathlib.Path) -> list[_Import]:
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[_Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom):
                module = child.module or ""
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    module = ".".join([*base, *([module] if module else [])])
                if module.startswith("xla_cost"):
                    for alias in child.names:
                        sub = f"{module}.{alias.name}"
                        if sub in MODULES:  # `from xla_cost.step import phases`: the module itself
                            found.append(_Import(name, sub, (), inside, child.lineno))
                        else:
                            found.append(_Import(name, module, (alias.name,), inside, child.lineno))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("xla_cost"):
                        found.append(_Import(name, alias.name, (), inside, child.lineno))
            visit(child, inside)

    visit(tree, False)
    return [i for i in found if i.target != name]


@functools.cache
def _all_imports() -> tuple[_Import, ...]:
    """Every xla_cost import of the package's modules, parsed when a test first asks: not at collection,
    which every pytest-xdist worker does (about a CPU second each), only where these tests run."""
    return tuple(i for name, path in MODULES.items() for i in _imports(name, path))


def _layer(module: str) -> int:
    best = None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (module.startswith(prefix + ".") and prefix != "xla_cost"):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    assert best is not None, f"{module} is in no layer of LAYERS: add its subpackage there"
    return best[0]


def test_every_module_is_in_a_layer_and_every_subpackage_says_what_it_holds():
    for name in MODULES:
        _layer(name)
    for init in PACKAGE.glob("*/__init__.py"):
        if init.parent.name == "zoo":
            continue
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and "import" in doc, f"{init.relative_to(ROOT)}: say what lives here and what it may import"


def test_imports_only_go_down_the_layers():
    upward = [
        f"{i.source} (line {i.line}) imports {i.target}"
        for i in _all_imports()
        if i.target in MODULES and _layer(i.target) > _layer(i.source)
    ]
    assert upward == []


def test_the_import_graph_has_no_cycle():
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for i in _all_imports():
        if i.target in MODULES:
            graph[i.source].add(i.target)
    state: dict[str, int] = {}
    cycles = []

    def walk(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                walk(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    assert cycles == []


def test_no_module_imports_a_private_name_of_another():
    private = [
        f"{i.source} (line {i.line}) imports {i.target}.{n}"
        for i in _all_imports() for n in i.names if n.startswith("_") and not n.startswith("__")
    ]
    private += [f"{i.source} imports the private module {i.target}" for i in _all_imports()
                if any(part.startswith("_") and not part.startswith("__") for part in i.target.split(".")[1:])
                and not i.target.startswith("xla_cost.zoo._")]
    assert private == []


def test_imports_inside_functions_only_where_load_time_needs_them():
    lazy = sorted({i.source for i in _all_imports() if i.in_function})
    unexplained = [m for m in lazy if not any(m == k or m.startswith(k + ".") for k in LAZY_IMPORTERS)]
    assert unexplained == []


def test_no_module_is_past_800_lines():
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > 800}
    assert long == {}


def _public_functions():
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                yield name, node


def _option_fields() -> frozenset[str]:
    """The fields of the option objects: options grouped,
    documented and checked in one place, which a function may spell out as
    keyword-only parameters (tests/test_signatures.py checks that they match)."""
    from xla_cost.analysis.options import AnalysisOptions
    from xla_cost.timemodel.hardware import Hardware
    from xla_cost.parallel.sharding import ShardingOptions
    from xla_cost.runs.configs import RunConfig
    from xla_cost.runs.layouts import Parallelism
    from xla_cost.runs.sweeps import Grid
    from xla_cost.step.workload import ModelOptions

    groups = (ModelOptions, AnalysisOptions, ShardingOptions, Hardware, Parallelism, RunConfig, Grid)
    return frozenset(f.name for group in groups for f in dataclasses.fields(group))


def test_no_public_function_takes_more_than_8_parameters():
    # A function does one thing: at most 8 parameters of its own. Options beyond them belong to an option
    # object (a frozen dataclass that documents and checks them once); the function spells that object's
    # fields out as keyword-only parameters (help(), an IDE and a type checker see them, where a
    # `**fields` hid them), and those do not count. Every other parameter does, keyword-only ones included,
    # so a new ad-hoc option still has to join a group or replace one.
    grouped = _option_fields()
    wide = []
    for module, node in _public_functions():
        args = node.args
        names = [a.arg for a in (*args.posonlyargs, *args.args)] + [
            a.arg for a in args.kwonlyargs if a.arg not in grouped]
        names = [n for n in names if n not in ("self", "cls")]
        if len(names) > 8:
            wide.append(f"{module}.{node.name}: {len(names)}")
    assert wide == []


# ------------------------------------------------------------------ the public API


def _type_checking_names() -> dict[str, str]:
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    names = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            target = node.module if alias.name == (alias.asname or alias.name) else f"{node.module}:{alias.name}"
            names[alias.asname or alias.name] = target
    return names


def test_public_names_are_one_list_and_all_import():
    exports = xla_cost._EXPORTS  # noqa: SLF001 - the list under test
    assert xla_cost.__all__ == [*exports, "__version__"]
    assert _type_checking_names() == dict(exports)  # the type checkers' copy agrees
    for name in exports:
        value = getattr(xla_cost, name)
        assert value is not None, name
        if callable(value) and not isinstance(value, type):
            assert inspect.getdoc(value), f"xla_cost.{name} has no docstring"


def test_pyproject_installs_every_subpackage():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {_module_name(p) for p in PACKAGE.rglob("__init__.py") if not p.is_relative_to(PACKAGE / "zoo")}
    assert found <= listed and "xla_cost.zoo" in listed


# ------------------------------------------------------------------ the results store's source digest


def test_source_digest_reads_every_computing_module_at_any_depth():
    names = {name for name, _ in store.source_files()}
    for name, path in MODULES.items():
        relative = path.relative_to(ZOO) if path.is_relative_to(ZOO) else path.relative_to(PACKAGE)
        presentation = not path.is_relative_to(ZOO) and relative.parts[0] in store.PRESENTATION
        key = f"xla_cost.zoo/{relative.as_posix()}" if path.is_relative_to(ZOO) else f"xla_cost/{relative.as_posix()}"
        assert (key in names) != presentation, key


def test_source_digest_changes_with_a_nested_module_not_with_presentation(tmp_path):
    package, zoo = tmp_path / "xla_cost", tmp_path / "models"
    for relative in ("__init__.py", "errors.py", "count/__init__.py", "count/rules.py", "present/text.py",
                     "cli/main.py"):
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text(f"# {relative}\n")
    zoo.mkdir()
    (zoo / "__init__.py").write_text("# zoo\n")
    roots = {"xla_cost": package, "xla_cost.zoo": zoo}
    assert [name for name, _ in store.source_files(roots)] == [
        "xla_cost/count/__init__.py", "xla_cost/count/rules.py", "xla_cost/errors.py", "xla_cost.zoo/__init__.py",
    ]
    before = store.source_digest(store.source_files(roots))
    (package / "present" / "text.py").write_text("# a renderer changed\n")
    (package / "cli" / "main.py").write_text("# the command line changed\n")
    assert store.source_digest(store.source_files(roots)) == before
    (package / "count" / "rules.py").write_text("# a rule changed\n")
    assert store.source_digest(store.source_files(roots)) != before


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.count(".") == 1 and m != "xla_cost.zoo"
                                           and (PACKAGE / m.split(".")[1]).is_dir()))
def test_subpackage_imports_light(module):
    """Each subpackage's ``__init__`` imports nothing: importing one is free."""
    tree = ast.parse(MODULES[module].read_text())
    assert not [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) and not (
        isinstance(n, ast.ImportFrom) and n.module == "__future__") and module != "xla_cost.cli"]
