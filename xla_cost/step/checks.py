"""What the model, its inputs, outputs and loss must be, and one-line errors when they are not.

Every check raises `xla_cost.InputError` saying what was expected, what was
received and how to fix it; `trace_error` turns a failure while tracing the
model into such a line, naming the probable cause.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from xla_cost.choices import MESH_AXES
from xla_cost.errors import InputError, XlaCostError, own_failure, quoted
from xla_cost.step.optimizers import LOSSES, LossFn
from xla_cost.step.trees import (
    PyTree, abstract, describe_tree, field_names, is_array, loaded_nnx, named_leaves, path_names,
)

__all__ = [
    "OutputSelector", "INT32_MAX", "check_arrays", "check_inputs", "check_model", "check_axis_names", "check_params",
    "check_float_params", "check_logits", "check_float_outputs", "check_loss", "selector", "select_outputs",
    "default_targets",
    "first_line", "mesh_error", "needs_mesh", "trace_error",
]


def check_float_params(params: PyTree) -> None:
    for path, leaf in named_leaves(params):
        if not jnp.issubdtype(leaf.dtype, jnp.floating):
            name = "/".join(path_names(path))
            raise InputError(
                "floating-point parameters (gradients are taken with respect to them)",
                f"{leaf.dtype} for parameter {name!r}",
                "Keep integer tables and counters out of the `params` collection "
                "(Linen) or out of `nnx.Param` (NNX).",
            )


def check_arrays(tree: PyTree, expected: str, fix: str, received: str | None = None) -> list[Any]:
    """The leaves of ``tree``; `InputError` unless it is a non-empty pytree of
    arrays or ``jax.ShapeDtypeStruct`` (what was received: ``received``,
    default the tree's type)."""
    leaves = jax.tree.leaves(tree)
    if not leaves or not all(hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves):
        raise InputError(expected, received or type(tree).__name__, fix)
    return leaves


def check_inputs(inputs: PyTree) -> PyTree:
    leaves = check_arrays(inputs, "inputs as an array or `jax.ShapeDtypeStruct` (or a pytree of them)",
                          "Pass e.g. `jax.ShapeDtypeStruct((batch, 224, 224, 3), jnp.float32)`.")
    first = leaves[0]
    if len(first.shape) == 0:
        raise InputError(
            "inputs with a leading batch axis",
            f"a scalar of dtype {first.dtype}",
            "Give the inputs a shape (batch, ...).",
        )
    batch = first.shape[0]
    if batch < 1:
        raise InputError(
            "a batch size of at least 1", f"{batch} (inputs of shape {tuple(first.shape)})",
            "Use a leading axis of length >= 1.",
        )
    if not jax.config.jax_enable_x64:
        for leaf in leaves:
            too_big = [d for d in leaf.shape if d > INT32_MAX]
            if too_big:
                raise InputError(
                    f"every input dimension at most {INT32_MAX:,} (jax indexes arrays with "
                    "int32 unless jax_enable_x64 is set)",
                    f"a dimension of {too_big[0]:,} in inputs of shape {tuple(leaf.shape)}",
                    "Use a smaller batch: FLOP scale linearly with it, so multiply a "
                    "smaller batch's figures.",
                )
    return abstract(inputs)

INT32_MAX = 2**31 - 1


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    # Flax appends a documentation link to every error; it is noise on one line.
    return re.sub(r"\s*\(https?://\S+\)\s*$", "", line).rstrip(".")

# Words of the errors that a wrong input shape produces (jax shape checks,
# Flax's parameter-shape check, numpy broadcasting).
_SHAPE_WORDS = re.compile(
    r"shape|dimension|broadcast|incompatible|contracting|rank|ndim|axis \d|size \d",
    re.IGNORECASE,
)

_MISSING_ARGUMENT = re.compile(r"missing (\d+ )?required (positional |keyword-only )?argument")


_CALLED = re.compile(r"^(?:\S+\.)?(\w+)\(\) (?:got an unexpected keyword argument '(\w+)'|missing )")
"""A TypeError of a call's arguments: the function called (its last name), and the keyword it did not take."""


_MESHES = re.compile(r"AbstractMesh\(.*AbstractMesh\(", re.DOTALL)
"""jax's words of two arrays on different meshes (``... AbstractMesh('fsdp': 2, ...) but ... AbstractMesh(())``);
the Explicit branch of `mesh_error` takes them only where the message names Explicit axes."""


def _active_mesh() -> str:
    """`` (the caller's: fsdp=2, Explicit)``: the mesh the call runs under (`jax.set_mesh`), or nothing."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return ""
    axes = ", ".join(f"{name}={size}" for name, size in mesh.shape.items())
    kinds = ", ".join(sorted({str(kind).rsplit(".", 1)[-1] for kind in mesh.axis_types}))
    return f" (the caller's: {axes}; {kinds})"


_ANNOTATION = re.compile(r"incompatible with its sharding annotation|only valid for values of rank at least \d+, "
                         r"but was applied to a value of rank \d+")
"""jax's words of a sharding constraint whose spec does not fit the array it is applied to (a model's
``nn.with_partitioning`` spec of 3 axes on the rank-2 kernel Flax's DenseGeneral makes of it, under any mesh)."""

_ANNOTATION_DETAIL = re.compile(r"spec=(P\([^()]*\))\) is (only valid for values of rank at least \d+, but was "
                                r"applied to a value of rank \d+)")
"""The spec and the ranks in jax's words, quoted in the refusal (the meshes before them are long)."""


_AXIS_TYPES = re.compile(r"context mesh .*axis_types=\((.*?)\).* should match the aval mesh .*axis_types=\((.*?)\)")
"""jax's words of an array typed on a mesh of other axis types than the mesh the trace runs under."""


_MISSING_AXIS = re.compile(r"Resource axis: (\S+) of (.*?) is not found in mesh: \((.*?)\)")
"""jax's words of a sharding (``with_sharding_constraint``, an ``out_sharding=``) naming an axis the mesh lacks."""

_NO_MESH = re.compile(r"requires a non-empty mesh in context|PartitionSpec when you are not under a mesh context")
"""jax's words of a sharding given by mesh axis names (a ``PartitionSpec``) traced under no mesh."""


_AUTO_AXIS = re.compile(r"cannot contain axis names that are of type Auto.*?axis name: (\S+) of type")
"""jax's words of a sharding that takes Explicit axes only (``dot_general``'s ``out_sharding``) given an Auto one."""


def needs_mesh(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is jax's refusal of a sharding given by mesh
    axis names traced under no mesh: the model's own shardings, which a mesh in context resolves."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if _NO_MESH.search(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def mesh_error(exc: BaseException, what: str = "the model") -> InputError | None:
    """The one-line refusal of a failure that is the mesh's, not the inputs' or the optimizer's: arrays typed on
    a mesh of other axis types (Explicit, Auto) than the one the step is traced under, or arrays on a mesh's
    Explicit axes meeting others on none (jax's ShardingTypeError); None for any other failure."""
    first = first_line(exc)
    missing = _MISSING_AXIS.search(first)
    if missing:
        axis, spec = missing.group(1), missing.group(2)
        axes = [a.strip(" '\",") for a in missing.group(3).split(",") if a.strip(" '\",")]
        if axis in MESH_AXES:
            sizes = ", ".join([*(f"'{a}': ..." for a in axes), f"'{axis}': 1"])
            fix = (f"Analyse it on a mesh with that axis (mesh={{{sizes}}}: size 1 leaves it unsplit), or configure "
                   "the model's shardings with the mesh's axes (its sharding config).")
        else:
            fix = (f"Configure the model's shardings with xla_cost's mesh axes ({', '.join(MESH_AXES)}; 'model' "
                   f"for a tensor-parallel one) in place of '{axis}', in its sharding config, and pass mesh= with "
                   "them (size 1 leaves an axis unsplit).")
        return InputError(
            f"the mesh axes {what}'s own shardings name",
            f"{what} constraining an array to {spec}, whose axis '{axis}' the analysed mesh "
            f"({', '.join(axes) or 'no axes'}) lacks", fix)
    auto = _AUTO_AXIS.search(first)
    if auto:
        return InputError(
            f"mesh axes of the type {what}'s own shardings need",
            f"{what} naming the mesh's Auto axis '{auto.group(1)}' where jax takes Explicit ones only (an "
            f"out_sharding=): {quoted(exc, first, 120)}",
            "Pass mesh= as a mesh of Explicit axes: mesh=jax.make_mesh(sizes, names, "
            "axis_types=(jax.sharding.AxisType.Explicit,) * len(names)).")
    if _NO_MESH.search(first):
        return InputError(
            f"{what}'s own shardings traced under a mesh",
            f"{what} constraining an array by mesh axis names ({quoted(exc, first, 120)}) in an analysis on no mesh",
            "Pass mesh= with the axes the model's shardings name (e.g. mesh={'data': 2}; size 1 leaves an axis "
            "unsplit), or analyse your own train step under your mesh with xla_cost.analyze_step.")
    types = _AXIS_TYPES.search(first)
    if types:
        return InputError(
            f"{what} traced on arrays typed on the mesh it runs under",
            f"arrays typed on a mesh of {types.group(2).strip(',')} axes traced under one of "
            f"{types.group(1).strip(',')} axes: {quoted(exc, first, 160)}",
            "Make the mesh's axis types agree: pass mesh= as a dict of sizes (xla_cost lays it with the axis "
            "types of your arrays' mesh), or a jax.sharding.Mesh of your arrays' axis_types; or analyse your own "
            "train step under your mesh with xla_cost.analyze_step (xla-cost step).")
    if _ANNOTATION.search(first):  # the model's own sharding annotation, applied under the mesh, does not fit
        detail = _ANNOTATION_DETAIL.search(first)
        mesh = jax.sharding.get_abstract_mesh()  # xla_cost's own (mesh=) or the caller's: not said which
        under = "" if mesh.empty else " " + ", ".join(f"{name}={size}" for name, size in mesh.shape.items()) + (
            f" ({', '.join(sorted({str(kind).rsplit('.', 1)[-1] for kind in mesh.axis_types}))} axes)")
        return InputError(
            f"sharding annotations of the model's own code that fit the arrays they constrain ({what})",
            f"an annotation of its own that fails under the mesh{under}: "
            + (f"{detail.group(1)}, which jax says is {detail.group(2)} ({quoted(exc, first, 100)})" if detail
               else quoted(exc, first, 240)),
            "The model's code applies it (e.g. nn.with_partitioning's spec, which Flax's DenseGeneral applies to "
            "its flattened kernel), not xla_cost's layout: analyse it without a mesh (no mesh=, --mesh), or fix "
            "the annotation (a PartitionSpec of the rank of the array it constrains), or analyse your own train "
            "step under your mesh with xla_cost.analyze_step (xla-cost step).")
    if type(exc).__name__ == "ShardingTypeError" or (_MESHES.search(first) and "Explicit" in first):
        # arrays on a mesh's Explicit axes meeting others on none: the call's concrete arrays come in without their
        # shardings (abstract), while the model reshards under the caller's mesh (jax.set_mesh), or its
        # ShapeDtypeStructs keep theirs; it is the mesh, not the inputs' shapes
        return InputError(
            f"{what} traced on arrays of one mesh",
            f"{what} mixing arrays on a mesh of Explicit axes{_active_mesh()} with arrays on none, where it failed "
            f"with {quoted(exc, first, 160)}",
            "analyze keeps no concrete array's sharding (it lays its own from mesh=): analyse your own train step under "
            "your mesh with xla_cost.analyze_step (xla-cost step), which keeps them; or, where the model's code allows it, "
            "build the model and its call arguments outside the Explicit mesh and pass mesh= with its axes.")
    return None


def trace_error(exc: Exception, inputs: PyTree, what: str = "the model", *,
                call_kwargs: Mapping[str, Any] | None = None, method: str | None = None) -> XlaCostError:
    """One line naming the probable cause of a failure while tracing the model.

    A TypeError of arguments is blamed on the call into the model (``call_kwargs``,
    ``method``) only where the call is the model's: a missing argument of the
    model's ``method`` (``__call__`` when None), or a keyword given in
    ``call_kwargs``; one raised by a function the model's own code calls is the
    model's exception, as any other."""
    if isinstance(exc, InputError):
        return exc
    own = own_failure(exc, what)  # xla_cost's bookkeeping inside the trace failed, not the model
    if own is not None:
        return own
    shapes = ", ".join(f"{x.dtype}{list(x.shape)}" for x in jax.tree.leaves(inputs))
    first = first_line(exc)
    received = f"inputs {shapes}, on which {what} failed with {quoted(exc, first)}"
    called = _CALLED.match(first) if isinstance(exc, TypeError) else None
    entry = method if isinstance(method, str) else "__call__"
    refused = mesh_error(exc, what)
    if refused is not None:
        return refused
    if isinstance(exc, NameError) and "axis name" in first:
        fix = ("The model uses a collective axis name xla_cost could not bind; pass it with "
               "axis_names=[...] (--axis-name NAME).")
    elif called and called.group(2) is None and _MISSING_ARGUMENT.search(first) and called.group(1) == entry:
        fix = ("The model's call needs more arguments: pass them with call_kwargs={...} "
               "(--call-kwarg KEY=VALUE), or pick another method with method=.")
    elif called and called.group(2) is not None and called.group(2) in (call_kwargs or {}):
        fix = "Drop that argument from call_kwargs (--call-kwarg), or check method=."
    elif _SHAPE_WORDS.search(first) or "ScopeParamShapeError" in type(exc).__name__:
        fix = ("Check the input shape (--input-shape, batch first) and the model's "
               "configuration (--set).")
    else:
        fix = ("Rerun with --debug (or call the model directly) for the traceback; check the "
               "model's configuration (--set) and call arguments (--call-kwarg).")
    return InputError(f"inputs and call arguments {what} accepts", received, fix)

OutputSelector = int | str | Callable[[Any], Any]


def selector(output: OutputSelector | None) -> Callable[[Any], Any]:
    """The function that picks the outputs the loss sees (the logits)."""
    if output is None:
        return lambda outputs: outputs
    if isinstance(output, bool) or not isinstance(output, (int, str)) and not callable(output):
        raise InputError(
            "output= as an index, a key or a function of the model's outputs",
            f"{type(output).__name__} {output!r}", "Pass e.g. output=0 for (logits, loss).",
        )
    if callable(output):
        return output

    def pick(outputs: Any) -> Any:
        fields = None if isinstance(outputs, Mapping) else field_names(outputs)
        if fields is not None and isinstance(output, str):  # a dataclass's or NamedTuple's field, by name
            if output in fields:
                return getattr(outputs, output)
        else:
            try:
                return outputs[output]
            except (KeyError, IndexError, TypeError):
                pass
        raise InputError(
            "output= naming one of the model's outputs",
            f"{output!r} for outputs {describe_tree(abstract(outputs))}", _output_fix(outputs, fields),
        )

    return pick


def _output_fix(outputs: Any, fields: list[str] | None) -> str:
    """How to name one of ``outputs``: its fields, keys or indices."""
    if fields is not None:
        return (f"Name one of its fields: {', '.join(map(repr, fields))} "
                f"(--output-index {_logits_name(fields)}).")
    if isinstance(outputs, Mapping):
        return f"Name one of its keys: {', '.join(map(repr, outputs))} (--output-index KEY)."
    if isinstance(outputs, (tuple, list)):
        return f"Use an index from 0 to {len(outputs) - 1} (--output-index 0)."
    return ("The model returns one output: drop output= (--output-index); or, from Python, pass "
            "output=lambda outputs: ... to pick the logits.")


def _logits_name(names: Sequence[str]) -> str:
    """The field or key most likely the logits: ``logits`` where there is one, else the first."""
    return "logits" if "logits" in names else str(names[0])


def check_model(model: Any, params: PyTree | None) -> None:
    nnx = loaded_nnx()  # an NNX module exists only once flax.nnx is imported
    modules = (nn.Module,) if nnx is None else (nn.Module, nnx.Module)
    if params is not None and isinstance(model, modules):
        raise InputError(
            "params only with an apply function (a Flax module brings its own)",
            f"params and a {type(model).__name__} module",
            "Drop params=, or pass the module's apply function instead.",
        )
    if isinstance(model, modules):
        return
    if callable(model) and not isinstance(model, type):
        if params is None:
            raise InputError(
                "params= (abstract parameters) with an apply(params, inputs) function",
                "no params",
                "Pass e.g. params=jax.eval_shape(init, key, inputs).",
            )
        return
    raise InputError(
        "a `flax.linen.Module` or `flax.nnx.Module` instance, or an apply(params, inputs) function",
        f"{type(model).__module__}.{type(model).__qualname__}",
        "Instantiate the module (e.g. `MyNet()`), not its class, or use a zoo name.",
    )


def check_axis_names(axis_names: Sequence[str] | str | None) -> list[str]:
    if axis_names is None:
        return []
    names = [axis_names] if isinstance(axis_names, str) else list(axis_names)
    if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise InputError(
            "axis_names as distinct non-empty strings", repr(axis_names),
            "Pass e.g. axis_names=['batch'] (--axis-name batch).",
        )
    return names


def select_outputs(select: Callable[[Any], Any], raw_outputs: Any, inputs: PyTree) -> Any:
    try:
        return select(raw_outputs)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a user's selector failed
        raise trace_error(exc, inputs, "output=") from exc


def default_targets(outputs: Any, loss: LossFn | None) -> PyTree:
    """Integer labels (the outputs' shape without its last axis, int32) for the default loss and every
    loss known by name (`xla_cost.step.optimizers.LOSSES`); for a user's loss, outputs-shaped targets,
    or the integer labels where the loss takes those alone (a one-hot cross-entropy of integer ``t``)."""
    out = jax.tree.leaves(outputs)[0]
    labels = jax.ShapeDtypeStruct(out.shape[:-1], jnp.int32)
    if loss is None or any(loss is known for known in LOSSES.values()):
        return labels
    like = jax.ShapeDtypeStruct(out.shape, out.dtype)
    if out.ndim and not _takes(loss, outputs, like) and _takes(loss, outputs, labels):
        return labels
    return like


def _takes(loss: LossFn, outputs: Any, targets: PyTree) -> bool:
    """Whether ``loss(outputs, targets)`` traces to a scalar."""
    try:
        return getattr(jax.eval_shape(loss, outputs, targets), "shape", None) == ()
    except Exception:  # noqa: BLE001 - a loss that fails on these targets
        return False


def check_loss(loss_fn: LossFn, outputs: Any, targets: PyTree, *, made: bool = False) -> None:
    """The loss must take the (abstract) outputs and targets and return a scalar; ``made``: the
    targets are `default_targets`' (none given), which the refusal says."""
    try:
        loss_shape = jax.eval_shape(loss_fn, outputs, targets)
    except Exception as exc:  # noqa: BLE001
        given = (f"targets {describe_tree(targets)} made by default (no targets= given)" if made
                 else f"targets {describe_tree(targets)}")
        out = jax.tree.leaves(outputs)[0]
        labels = f"jax.ShapeDtypeStruct({tuple(out.shape[:-1])}, jnp.int32)"
        fix = ("Pass targets= as the loss takes them, e.g. integer labels of shape batch x positions."
               if made else "Check the loss function and the targets' shape.")
        if type(exc).__name__ == "ShardingTypeError":  # outputs sharded over a mesh's Explicit axes
            fix = ("The outputs are sharded over a mesh's Explicit axes (jax.make_mesh's default), which the loss's "
                   "indexing cannot resolve: pass loss= one that works under them (the default, loss=None, or a "
                   "one-hot cross-entropy: -(jax.nn.one_hot(t, o.shape[-1]) * jax.nn.log_softmax(o)).sum(-1).mean()) "
                   "on integer "
                   f"targets t ({labels}, made so where no targets= given), or build the model under a mesh of "
                   "AxisType.Auto axes.")
        raise InputError(
            "a loss(outputs, targets) that accepts the model's outputs",
            f"outputs {describe_tree(outputs)} and {given}, on which the loss failed with {quoted(exc, first_line(exc))}",
            fix,
        ) from exc
    if getattr(loss_shape, "shape", None) != ():
        raise InputError(
            "a loss that returns a scalar",
            f"an output of shape {getattr(loss_shape, 'shape', type(loss_shape).__name__)}",
            "Reduce the loss, e.g. with `.mean()`.",
        )


def check_params(params: PyTree, model: Any) -> None:
    leaves = jax.tree.leaves(params)
    if not leaves:
        raise InputError(
            "a model with trainable parameters (the gradient is taken with respect to them)",
            f"{type(model).__name__} with no parameters",
            "Analyze a model that has parameters (Linen `params` collection, NNX `nnx.Param`), "
            "or pass an apply function with params=.",
        )
    check_float_params(params)


def check_float_outputs(outputs: Any) -> None:
    """The loss is differentiated through the outputs: outputs that are all integers or booleans (a
    final ``argmax``, a cast) carry no gradient to the parameters, which would all be zeros."""
    leaves = [leaf for leaf in jax.tree.leaves(outputs) if is_array(leaf)]
    if leaves and not any(jnp.issubdtype(leaf.dtype, jnp.inexact) for leaf in leaves):
        raise InputError(
            "a model whose outputs are floating point (the loss is differentiated through them to the parameters)",
            f"outputs {describe_tree(outputs)}, integers (a final argmax or cast), through which no gradient "
            "flows: backward would be 0",
            "Return the logits and take the argmax in your metrics, or pick a floating output with "
            "output= (--output-index).",
        )


def check_logits(outputs: Any, raw_outputs: Any, output: Any) -> None:
    """The default loss needs one array of logits; say how to get there if not."""
    if is_array(outputs) and not isinstance(outputs, (tuple, list, Mapping)):
        if len(outputs.shape) >= 1:
            return
    described = describe_tree(outputs)
    if field_names(raw_outputs) and output is None:
        name = _logits_name(field_names(raw_outputs))
        fix = (f"Pick the logits by their field with output={name!r} (--output-index {name}), or, from Python, "
               "pass loss=lambda outputs, targets: ... to use your own loss.")
    elif isinstance(raw_outputs, (tuple, list)) and output is None:
        fix = ("Pick the logits with output=0 (--output-index 0), or, from Python, use the model's own loss "
               "with loss=lambda outputs, targets: outputs[1].")
    elif isinstance(raw_outputs, Mapping) and output is None:
        key = next(iter(raw_outputs), "logits")
        fix = (f"Pick the logits with output={key!r} (--output-index {key}), or, from Python, pass "
               "loss=lambda outputs, targets: ... to use your own loss.")
    else:
        fix = ("From Python, pass loss=lambda outputs, targets: ... for outputs that are not logits "
               "(xla_cost.analyze; the command line's loss is the default).")
    raise InputError(
        "the model to return one array of logits (classes last) for the default "
        "softmax cross-entropy loss",
        f"outputs {described}", fix,
    )
