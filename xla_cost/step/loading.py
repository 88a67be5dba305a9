"""Loading what a command line names: ``FILE.py:NAME`` or ``package.module:NAME`` (a step, a
model, ``--args``'s function) and the step's arguments from that function, each failure one line.

Imports no jax: the CLI loads a model's file before anything of jax is needed.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import pathlib
import sys
from collections.abc import Mapping
from typing import Any

from xla_cost.errors import InputError, quoted

__all__ = ["import_module", "load_attribute", "step_arguments"]


def import_module(where: str, what: str, expected: str | None = None) -> Any:
    """Imports the dotted module ``where`` with the working directory on the
    import path, as ``python -m`` has it; ``what`` names it in errors
    (``MODEL``), ``expected`` says what was expected when it is not found.

    Raises:
      InputError: the module (or a package above it) is not found; or it was
        found and failed while importing: its own error (a missing
        dependency, an exception it raises), in one line.
    """
    if "" not in sys.path and str(pathlib.Path.cwd()) not in sys.path:
        sys.path.insert(0, str(pathlib.Path.cwd()))
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        if exc.name and (where == exc.name or where.startswith(exc.name + ".")):
            raise InputError(expected or f"{what}'s module to be importable", f"{where!r} ({exc})",
                             "Run from the folder that holds it, or put that folder on PYTHONPATH.") from exc
        raise _failed_import(what, where, exc) from exc
    except Exception as exc:  # noqa: BLE001 - the module's own error, in one line
        raise _failed_import(what, where, exc) from exc


def _failed_import(what: str, where: str, exc: BaseException) -> InputError:
    """A module that was found and failed while importing: its own error, in one line."""
    first = next((line for line in str(exc).strip().splitlines() if line.strip()), "")
    fix = ("Install what it imports, or fix the import." if isinstance(exc, ImportError) else
           "Fix the module; import it once in Python to see the traceback.")
    return InputError(f"{what}'s module to import", f"{where} was found and failed while importing: "
                      f"{quoted(exc, first)}", fix)


def load_attribute(spec: str, what: str, expected: str | None = None,
                   example: str = "train.py:train_step") -> Any:
    """``FILE.py:NAME`` or ``package.module:NAME`` to the object it names.

    A file is run as a module named after it, with its folder first on the
    import path (as ``python FILE.py`` has it); a dotted module is imported with
    the working directory on the path (as ``python -m`` has it). ``what`` names
    the object in errors (``the step``, ``MODEL``), ``expected`` says what was
    expected when the module is not found, ``example`` shows the form.

    Raises:
      InputError: no ``:``; a file that is not Python source (``env.sh``) or a
        path that is neither a ``.py`` file nor a dotted module name; the file
        or module is not found; it fails while importing (its own error, in
        one line); or it has no such attribute (its functions and classes
        listed).
    """
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise InputError(f"{what} as FILE.py:NAME or package.module:NAME", repr(spec),
                         f"Name it after a colon, e.g. {example}.")
    try:
        if where.endswith(".py"):
            module = _run_file(where, what)
        else:
            _check_module_name(where, what, example)
            module = import_module(where, what, expected)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - the file's own error, in one line
        raise _failed_import(what, where, exc) from exc
    if not hasattr(module, name):
        raise _no_such_name(what, name, where, module, example)
    return getattr(module, name)


def _run_file(where: str, what: str) -> Any:
    """The module ``where`` (a ``.py`` file) defines, run once per path."""
    path = pathlib.Path(where).expanduser().resolve()
    if not path.is_file():
        raise InputError(f"{what}'s file to exist", repr(where), "Check the path (relative to the working directory).")
    module_name = f"_xla_cost_user_{path.stem}_{abs(hash(str(path))) % 10**8}"
    module = sys.modules.get(module_name)
    if module is None:
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        loader = importlib.util.spec_from_file_location(module_name, path)
        if loader is None or loader.loader is None:
            raise InputError(f"{what}'s file as Python source", repr(where), "Point at a .py file.")
        module = importlib.util.module_from_spec(loader)
        sys.modules[module_name] = module
        try:
            loader.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
    return module


def _check_module_name(where: str, what: str, example: str) -> None:
    """Refuses what is neither a ``.py`` file nor a dotted module name (``env.sh``,
    ``scripts/train``) before Python's import machinery words it as a missing module."""
    path = pathlib.Path(where).expanduser()
    if path.is_file():
        received = f"{where!r}, a file that is not Python source (.py)"
    elif any(sep in where for sep in ("/", "\\")) or not all(part.isidentifier() for part in where.split(".")):
        received = f"{where!r}, neither a .py file nor a dotted module name"
    else:
        return
    raise InputError(f"{what} as FILE.py:NAME (a Python source file) or package.module:NAME", received,
                     f"Point at the .py file that defines it, e.g. {example}.")


def _no_such_name(what: str, name: str, where: str, module: Any, example: str) -> InputError:
    """``name`` missing from ``module``: its functions and classes (those it defines first), or that it has none."""
    own = getattr(module, "__name__", None)
    offered = sorted((n for n, v in vars(module).items()
                      if not n.startswith("_") and callable(v) and not inspect.ismodule(v)),
                     key=lambda n: (getattr(vars(module)[n], "__module__", None) != own, n))
    if not offered:
        return InputError(f"{what} {name!r} in {where}", "no such name (it has no functions or classes)",
                          f"Point at the file or module that defines it, e.g. {example}.")
    close = difflib.get_close_matches(name, offered, 1)
    return InputError(f"{what} {name!r} in {where}",
                      f"no such name (it has {', '.join(offered[:8])}{', ...' if len(offered) > 8 else ''})",
                      f"Did you mean {where}:{close[0]}?" if close else "Check the name after the colon.")


def step_arguments(make_args: Any, spec: str) -> tuple[Any, ...]:
    """The step's positional arguments from ``make_args()``, the function
    ``--args FILE.py:MAKE_ARGS`` (``spec``) names: it takes no arguments and
    returns them as a tuple or list, in the step's order.

    Raises:
      InputError: ``make_args`` is not callable; it fails (its own error, in
        one line); or it returns anything but a tuple or list (a dict, None, a
        generator, a single value), named as its fault rather than the step's.
    """
    if not callable(make_args):
        raise InputError("--args naming a function of no arguments", f"{type(make_args).__name__} {spec!r}",
                         "Point --args at e.g. def make_args(): return state, batch.")
    try:
        given = make_args()
    except Exception as exc:  # noqa: BLE001 - the user's own error, in one line
        first = next((line for line in str(exc).strip().splitlines() if line.strip()), "")
        raise InputError(f"{spec}() to return the step's arguments", quoted(exc, first),
                         "Fix the function; call it once in Python to see the traceback.") from exc
    if isinstance(given, (tuple, list)):
        return tuple(given)
    expected = f"--args {spec}() to return the step's positional arguments as a tuple or list (return state, batch)"
    if given is None:
        raise InputError(expected, "None", "End it with `return state, batch` (the step's arguments, in its order).")
    if inspect.isgenerator(given) or inspect.isasyncgen(given):
        raise InputError(expected, f"a {type(given).__name__} (the function yields)",
                         "Return the arguments (return state, batch) instead of yielding them.")
    keys = ", ".join(map(str, list(given)[:4])) if isinstance(given, Mapping) else ""
    raise InputError(expected, f"a dict (keys {keys})" if keys else f"a {type(given).__name__}",
                     "Return them in the step's order, e.g. return state, batch; a step of one argument: "
                     "return (batch,).")
