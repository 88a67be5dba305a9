"""The report cache: a rerun of the same analysis answered from the forward program's trace.

While xla_cost's persistent caches are on (`xla_cost.compiled.xla.cache_dir`),
`xla_cost.analyze` keys its whole report by what determines it and keeps it
beside the analyses cache (``<cache dir>/reports/<key>.json``). A rerun then
builds the model and traces its forward program (which checks that the model
runs), and reads the report instead of tracing the gradient and the update,
lowering, compiling and counting.

The key (`report_key`) is a hash of: `REPORT_FORMAT`; the results store's
description of every argument (`xla_cost.compiled.store.analysis_key`: a Linen
module's fields, an NNX module's graph, the source file of its class, a
function's code; the versions, backend, device, ``XLA_FLAGS`` and the digest
of xla_cost's and the zoo's sources); the forward program's jaxpr with every
equation's name stack and its arguments' names (`program_digest`: what
per-layer rows read; not the source lines it was traced from, which change
with the caller); the structures, shapes and dtypes of the step's trees and what building
the step found of the model (its module paths, parameter counts, notes); the
optimizer's name, or its update program's digest when it is a
transformation; every option's repr; and the compile target's key. An argument
or option without a stable description (a repr that holds a memory address)
makes no key: the analysis runs, uncached. A timed or sharded analysis is never
cached, and an entry that cannot be read is a miss.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from typing import Any

import jax

from xla_cost.analysis.report import Report
from xla_cost.compiled import targets, xla
from xla_cost.compiled.store import analysis_key, environment
from xla_cost.step.workload import Workload

__all__ = ["REPORT_FORMAT", "report_key", "program_digest", "read_report", "write_report"]

_LOG = logging.getLogger("xla_cost")

REPORT_FORMAT = 3
"""Version of the report cache's keys; a change makes old entries unused (2: a scanned model's
backward adds back the forward's loop-invariant work its grad program hoists, `xla_cost.count.hoisted`;
per-layer rows carry their recomputation, `LayerCosts.recomputed`; 3: `PhaseCosts.float8_flops`)."""


def _trees(workload: Workload) -> dict[str, Any]:
    """Each tree's structure and its leaves' shapes and dtypes."""
    out = {}
    for name in ("params", "state", "opt_state", "inputs", "targets", "extras", "outputs"):
        tree = getattr(workload, name)
        leaves, structure = jax.tree.flatten(tree)
        out[name] = {"structure": str(structure),
                     "leaves": [[list(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x).__name__))]
                                for x in leaves]}
    return out


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _code_digest(code: Any) -> str:
    """A digest of a code object: its bytecode, names and constants, nested code included."""
    digest = hashlib.sha256(code.co_code)
    digest.update(repr((code.co_qualname if hasattr(code, "co_qualname") else code.co_name, code.co_names)).encode())
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            text = _code_digest(const)
        elif isinstance(const, frozenset):  # its repr's order changes with the process's string hashing
            text = repr(sorted(repr(c) for c in const))
        else:
            text = repr(const)
        digest.update(text.encode())
    return digest.hexdigest()


_VERSIONED = frozenset({"jax", "jaxlib", "flax", "optax", "xla_cost"})
"""Top-level packages whose code the key already covers: by their versions, and
xla_cost's by its source digest (`xla_cost.compiled.store.environment`)."""


def _rule(value: Any) -> str | None:
    """The code of a function among an equation's parameters (a custom_vjp's
    ``bwd``, a custom_jvp's ``jvp``), which the jaxpr's text names but does not
    show: its bytecode, the functions its closure holds, and, for a function of
    the user's own (not of jax, Flax, optax or xla_cost), the digest of the file
    it is written in, where the helpers it calls usually are. None for a
    parameter that is no function."""
    function = getattr(value, "f", value)  # a linear_util.WrappedFun holds the function as .f
    function = getattr(function, "func", function)  # a functools.partial
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    parts = [_code_digest(code)]
    for cell in getattr(function, "__closure__", None) or ():
        try:
            held = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if hasattr(held, "__code__"):
            parts.append(_code_digest(held.__code__))
    module = str(getattr(function, "__module__", "") or "")
    if module.partition(".")[0] not in _VERSIONED:
        try:
            with open(code.co_filename, "rb") as handle:
                parts.append(hashlib.sha256(handle.read()).hexdigest())
        except OSError:
            parts.append(code.co_filename)
    return ":".join(parts)


def _name_stacks(jaxpr: Any, out: list[str]) -> None:
    """Every equation's name stack and the code of the functions among its
    parameters, in order, into sub-jaxprs."""
    from jax.extend.core import jaxprs_in_params  # noqa: PLC0415 - jax's own walk of an equation's sub-jaxprs

    for eqn in jaxpr.eqns:
        out.append(str(eqn.source_info.name_stack))
        for name, value in sorted(eqn.params.items()):
            rule = _rule(value)
            if rule is not None:
                out.append(f"{name}={rule}")
        for sub in jaxprs_in_params(eqn.params):
            _name_stacks(sub, out)


def program_digest(traced: Any) -> str | None:
    """A digest of a traced program (``jax.stages.Traced``): its jaxpr as text
    (every equation with its parameters and shapes, sub-jaxprs included), every
    equation's name stack, the code of the functions among its parameters (a
    custom_vjp's backward rule) and its arguments' and results' names: what the
    compiled figures and the per-layer rows are made from, without the source
    lines it was traced from. None where the text holds a memory address (a
    parameter without a stable description): not cached."""
    closed = traced.jaxpr
    text = str(closed)
    if " at 0x" in text:
        return None
    stacks: list[str] = []
    _name_stacks(closed.jaxpr, stacks)
    info = closed.jaxpr.debug_info
    names = [list(getattr(info, "arg_names", None) or ()), list(getattr(info, "result_paths", None) or ())]
    return _text_digest(json.dumps([text, stacks, names]))


def report_key(request: Any, workload: Workload) -> str | None:
    """The report cache's key of ``request`` (an `xla_cost.analysis.pipeline.Request`,
    which imports this module) built as ``workload``; None where it is not
    cached (caches off, timed, sharded, an argument without a stable description).

    Call it on one device (no sharding plan), inside the request's compile target.
    """
    options = request.options
    if xla.cache_dir() is None or options.timed or request.sharding.sharded:
        return None
    reprs = {"model_options": repr(request.model_options), "options": repr(options),
             "sharding": repr(request.sharding)}
    if any(" at 0x" in text for text in reprs.values()):
        return None
    described, _why = analysis_key(request.arguments())
    if described is None:
        return None
    forward = program_digest(workload.traced["forward"])
    if isinstance(request.optimizer, str):
        optimizer: str | None = request.optimizer
    else:  # a transformation: its update program, traced (the gradient still is not)
        with workload.tracing():
            optimizer = program_digest(jax.jit(workload.update).trace(*workload.phase_args("update")))
    if forward is None or optimizer is None:
        return None
    target = targets.active()
    text = json.dumps({
        "format": REPORT_FORMAT, "environment": environment(), "arguments": described,
        "forward": forward, "trees": _trees(workload), "optimizer": optimizer,
        "workload": {"kind": workload.kind, "root_name": workload.root_name,
                     "param_paths": dict(workload.param_paths), "module_paths": list(workload.module_paths),
                     "notes": list(workload.notes), "axis_names": list(workload.axis_names),
                     "path_offset": workload.path_offset, "path_collections": workload.path_collections},
        "options": reprs, "target": None if target is None else [target.name, target.key],
    }, sort_keys=True, default=str)
    return _text_digest(text)


def _path(key: str) -> str | None:
    directory = xla.cache_dir()
    return None if directory is None else os.path.join(directory, "reports", key + ".json")


def read_report(key: str) -> Report | None:
    """The cached report of ``key``; None where there is none or it cannot be read."""
    path = _path(key)
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return Report.from_dict(json.load(handle))
    except Exception:  # noqa: BLE001 - any failure to read is a miss: analyse
        return None


def write_report(key: str, report: Report) -> None:
    """Keeps ``report`` under ``key`` (atomically: a temporary file renamed); a
    cache that cannot be written is no cache."""
    path = _path(key)
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(report.to_dict(), handle)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except (OSError, TypeError, ValueError) as exc:
        _LOG.info("report cache not written: %s", exc)
