"""A training step made abstract: model, inputs, loss and optimizer to phase functions.

`build_workload` turns a Flax module (Linen or NNX), inputs, a loss and an optax
optimizer into four pure, jittable phase functions and abstract arguments for
them. Parameters and optimizer state come from ``jax.eval_shape``: nothing the
size of the model is ever allocated.

The phases (the project's vocabulary):

* ``forward(params, state, inputs, targets) -> (loss, new_state)``
* ``grad(params, state, inputs, targets) -> (loss, grads, new_state)``: the loss
  and its gradient with respect to the parameters only (not the inputs).
* ``update(grads, opt_state, params) -> (new_params, new_opt_state)``:
  ``optimizer.update`` followed by ``optax.apply_updates``.
* ``train_step(params, opt_state, state, inputs, targets)``: all three in one jit.

``state`` holds the model's non-parameter variables (Linen ``batch_stats``, NNX
``BatchStat`` and RNG counters); models run in training mode: a ``train=True``,
``training=True``, ``deterministic=False`` or ``use_running_average=False``
argument of ``__call__`` is set, and NNX modules are put in ``.train()`` mode.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.extend.core
import optax

from xla_cost.errors import InputError, quoted
from xla_cost.options import changed_fields
from xla_cost.step import phases
from xla_cost.step import remat as _remat
from xla_cost.step.remat import check as check_remat
from xla_cost.step.adapters import MAX_RESOLVE, RNG_KEY, CallPlan, learn, prepare, split_call_kwargs
from xla_cost.step.checks import (
    OutputSelector, check_axis_names, check_float_outputs, check_inputs, check_logits, check_loss, check_model,
    check_params, default_targets, mesh_error, select_outputs, selector, trace_error,
)
from xla_cost.step.optimizers import LOSSES, LossFn, resolve_optimizer, softmax_cross_entropy
from xla_cost.step.routing import active_parameters, declared_routing, padded_modules, routing_notes
from xla_cost.step.trees import (
    PyTree, abstract, describe_tree, is_collections, key_name, leaf_modules, named_leaves,
    path_names, module_param_counts,
)

__all__ = ["Workload", "ModelOptions", "build_workload", "collector_paused", "replay"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside (back on after, if it was on).

    Tracing a model and counting its jaxprs allocate hundreds of thousands of
    objects, few of them garbage in cycles: in ResNet-50's analysis (batch 32,
    Adam, per layer) the collector ran about 500 times, 0.5 s on the main
    thread, the critical path; paused, 4 times and 0.1 s, and the peak memory
    was no higher. Also a decorator.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclasses.dataclass(frozen=True)
class Workload:
    """Phase functions and the abstract arguments they are lowered with.

    Attributes:
      kind: ``"linen"`` or ``"nnx"``.
      root_name: the model's class name, the first entry of its name stack.
      params, state, opt_state, inputs, targets: abstract pytrees
        (``jax.ShapeDtypeStruct`` leaves).
      outputs: the abstract model output.
      forward, grad, update, train_step: the phase functions.
      param_paths: parameter count per module path (``"fc1"``, ``"layer1/conv"``).
      tracing: a context manager factory; trace (make_jaxpr, lower) the phase
        functions inside it, so that NNX modules carry their name scopes.
      extras: abstract traced call arguments besides the inputs: ``rng`` (the
        step's random key, `RNG_KEY`) and ``kwargs`` (array call_kwargs).
      axis_names: collective axis names bound on a 1-device mesh (empty: none).
      notes: what the builder did that a reader should know (names it bound).
      path_offset: leading parameter-path components that are not modules (the
        collection names of an apply function's variables dict: ``path_collections``).
      path_collections: parameter paths leave out, leaf by leaf, the collection names of the
        Linen variables dicts (nested or not, ``batch_stats`` beside ``params``) an apply
        function's params are (`xla_cost.step.trees.leaf_modules`).
      module_paths: every module the model's call reaches, with parameters or
        without (a Dropout); empty for an apply function.
      traced: programs already traced (``jax.stages.Traced``) with their
        `phase_args`, by phase: building traces ``forward`` to check that the
        model runs, and the analysis reuses that trace.
      replayed: phase functions whose model code is not run again: ``grad``
        and ``train_step`` differentiating the ``forward`` trace's jaxpr
        (`replay`) instead of the model's Python. `phase_fn` gives them unless
        told to trace the model again.
      active_parameters: the parameters a token's computation reads, where the
        model declares routed experts (`xla_cost.step.routing`); None: none declared.
      padded: the modules of routed experts with capacity padding, and the share of
        their work that is padding (`xla_cost.step.routing.padded_modules`).
      read_gradients: a tree like ``params`` of whether the optimizer's update reads each
        parameter's gradient (`unread_gradients`); None: it reads every one. The ``grad``
        phase computes only those it reads, as the fused step does.
      loss_reads: a tree like ``params`` of whether the loss reads each parameter (`loss_reads`);
        None: it reads every one (or that could not be told). One it never reads (a tied model's
        unused ``lm_head``, a head the selected output leaves out) gets a zero gradient.
    """

    kind: str
    root_name: str
    params: PyTree
    state: PyTree
    opt_state: PyTree
    inputs: PyTree
    targets: PyTree
    outputs: PyTree
    forward: Callable[..., Any]
    grad: Callable[..., Any]
    update: Callable[..., Any]
    train_step: Callable[..., Any]
    param_paths: Mapping[str, int]
    tracing: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    extras: PyTree = dataclasses.field(default_factory=lambda: {"rng": RNG_KEY, "kwargs": {}})
    axis_names: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    path_offset: int = 0
    path_collections: bool = False
    module_paths: tuple[str, ...] = ()
    traced: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    replayed: Mapping[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    active_parameters: int | None = None
    padded: tuple[tuple[frozenset[str], float], ...] = ()
    read_gradients: PyTree | None = None
    loss_reads: PyTree | None = None

    @property
    def parameters(self) -> int:
        return sum(self.param_paths.values())

    def gradients(self) -> PyTree:
        """The gradients the step makes, abstract: ``params``, each leaf whose gradient the
        optimizer does not read (`read_gradients`) replaced by an empty array of its dtype."""
        if self.read_gradients is None:
            return self.params
        return jax.tree.map(lambda leaf, read: leaf if read else jax.ShapeDtypeStruct((0,), leaf.dtype),
                            self.params, self.read_gradients)

    @property
    def batch(self) -> PyTree:
        """What the phases take in their inputs slot: ``(inputs, extras)``."""
        return (self.inputs, self.extras)

    def trees(self) -> dict[str, PyTree]:
        """The argument trees the phases take, by the names `xla_cost.step.phases`
        declares: ``params``, ``grads`` (params-shaped: the very same tree),
        ``state``, ``opt_state``, ``batch``, ``targets``."""
        return {
            "params": self.params, "grads": self.params, "state": self.state,
            "opt_state": self.opt_state, "batch": self.batch, "targets": self.targets,
        }

    def phase_args(self, phase: str) -> tuple[Any, ...]:
        """The abstract arguments of ``phase``'s program, as `xla_cost.step.phases` declares them."""
        trees = self.trees()
        return tuple(trees[name] for name in phases.phase(phase).arguments)

    def input_owners(self, phase: str) -> list[str | None]:
        """The module of every flattened argument of ``phase`` (None: no module).

        Parameters and gradients belong to the module that owns the parameter;
        an optimizer-state leaf (Adam's ``mu['fc1']['kernel']``) to the module
        of the parameter whose path ends its own; counters and inputs to none.
        """
        modules = {
            tuple(key_name(k) for k in path): module
            for path, module in leaf_modules(self.params, self.path_offset, self.path_collections)
        }
        owners: list[str | None] = []
        for path, _ in named_leaves(self.phase_args(phase)):
            names = tuple(key_name(k) for k in path)
            # The longest parameter path that ends this one (and is shorter):
            # one dictionary look-up per suffix length, longest first.
            owners.append(next(
                (modules[names[-n:]] for n in range(len(names) - 1, 0, -1) if names[-n:] in modules), None
            ))
        return owners

    def phase_fn(self, phase: str, *, retrace: bool = False) -> Callable[..., Any]:
        """The program of ``phase`` (a pure function of `phase_args`).

        Args:
          phase: a phase with a program (`xla_cost.step.phases.PROGRAMS`).
          retrace: run the model's Python again when the program is traced,
            instead of the forward's trace (`replayed`): for a trace under a
            context that changes what the model's code does (Flax method
            interceptors adding sharding constraints). The program is the same
            either way.
        """
        declared = phases.phase(phase)
        if declared.program is None:
            raise ValueError(
                f"Expected a phase with a program ({', '.join(phases.PROGRAMS)}), got {phase!r}, "
                f"which is derived: {declared.formula_text}."
            )
        if not retrace and declared.program in self.replayed:
            return self.replayed[declared.program]
        return getattr(self, declared.program)


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    """How the model is called and its loss taken: the keywords `build_workload`
    (and `xla_cost.analyze`) take besides the optimizer.

    Attributes:
      loss: ``loss(outputs, targets) -> scalar``; default `softmax_cross_entropy`.
      targets: abstract targets; default integer labels of shape
        ``outputs.shape[:-1]`` for the default loss, else outputs-shaped.
      params: with an apply function: its parameters, a pytree of arrays or
        ``jax.ShapeDtypeStruct`` (only their shapes and dtypes are used). Nested
        dicts name the modules: ``{"fc1": {"w": ...}}`` is module ``fc1``; a Linen
        variables dict ``{"params": {...}}`` works as it is.
      call_kwargs: keyword arguments of the model's call. Arrays (or
        ``jax.ShapeDtypeStruct``) among them are traced like the inputs (a mask,
        a second input); other values are passed as they are (flags, strings).
        Training flags (``train``, ``deterministic``, ...) are set already;
        random keys are supplied: Linen gets ``rngs`` for every stream it asks
        for, an NNX call with an ``rngs`` parameter gets an ``nnx.Rngs``.
      method: the Linen/NNX method to call instead of ``__call__`` (a name, or a
        function of the module as for Flax's ``apply(..., method=)``).
      axis_names: collective axis names to bind (``BatchNorm(axis_name="batch")``);
        names the model uses are also detected. The step then runs as one device
        of a data-parallel group (``jax.shard_map`` over a 1-device mesh).
      output: what the loss sees of the model's outputs: an index or key
        (``0`` for ``(logits, loss)``) or a function; default all of them.
      remat: run the whole model under ``jax.checkpoint`` with this policy
        (`xla_cost.step.remat.REMAT_POLICIES`); None or ``none``: as written (a
        model's own ``nn.remat``/``jax.checkpoint`` is left as it is).
    """

    loss: LossFn | None = None
    targets: PyTree | None = None
    params: PyTree | None = None
    call_kwargs: Mapping[str, Any] | None = None
    method: str | Callable[..., Any] | None = None
    axis_names: Sequence[str] | str | None = None
    output: OutputSelector | None = None
    remat: str | None = None


@collector_paused()
def _optimizer_refused(exc: Exception) -> InputError:
    """The one-line refusal of an optax transformation whose ``init`` or ``update`` fails on the
    model's parameters as they are (``optax.lookahead`` wants `LookaheadParams`; ``value=`` of
    ``reduce_on_plateau`` and ``lbfgs``), in place of optax's own exception from inside the analysis."""
    return InputError(
        "an optax transformation whose init(params) and update(grads, state, params) run on the model's "
        "parameters", quoted(exc, limit=200),
        "Pass one that does (optax.lookahead wants optax.LookaheadParams; reduce_on_plateau and lbfgs want "
        "update(..., value=...)), or analyse your own train step, which calls it as it needs: "
        "xla_cost.analyze_step (xla-cost step).")


def _gradient_refused(exc: Exception) -> InputError:
    """The one-line refusal of a model whose forward pass traces but whose gradient jax cannot build (a
    primitive without a differentiation rule: ``ragged_dot_general`` ragged in its contraction), in place of
    jax's own exception from inside the analysis."""
    return InputError(
        "a model jax can differentiate (the loss's gradient in the parameters; its forward pass traced)",
        f"a failure while differentiating the model: {quoted(exc, limit=200)}",
        "Write the operation in a form jax differentiates (a ragged contraction as jax.lax.ragged_dot over "
        "ragged rows, or a dense einsum), or analyse the forward pass alone: xla_cost.analyze_step of a step "
        "that calls the model without a gradient.")


def build_workload(
    model: Any,
    inputs: PyTree,
    *,
    optimizer: str | optax.GradientTransformation,
    options: ModelOptions | None = None,
    loss: LossFn | None = None,
    targets: PyTree | None = None,
    params: PyTree | None = None,
    call_kwargs: Mapping[str, Any] | None = None,
    method: str | Callable[..., Any] | None = None,
    axis_names: Sequence[str] | str | None = None,
    output: OutputSelector | None = None,
    remat: str | None = None,
) -> tuple[Workload, str]:
    """Builds the phase functions of one training step, abstractly.

    Args:
      model: a ``flax.linen.Module``, a ``flax.nnx.Module`` (concrete, or
        abstract from ``nnx.eval_shape``), or a plain function
        ``apply(params, inputs, **call_kwargs) -> outputs`` (then ``params`` is
        required).
      inputs: an array or ``jax.ShapeDtypeStruct`` (or a pytree of them), batch on
        the leading axis of the first leaf; the model's first positional argument.
      optimizer: an optax transformation or a name in `OPTIMIZERS`.
      options: how the model is called (`ModelOptions`), as one object; the
        keywords below replace its fields where they are not None.
      loss, targets, params, call_kwargs, method, axis_names, output, remat:
        the fields of `ModelOptions`, documented there.

    Returns:
      ``(workload, optimizer_name)``.
    """
    options = dataclasses.replace(options or ModelOptions(), **changed_fields(ModelOptions, locals()))
    loss, targets, params, output, remat = options.loss, options.targets, options.params, options.output, options.remat
    if remat is not None:
        check_remat(remat)
    optimizer_name, transform = resolve_optimizer(optimizer)
    inputs = check_inputs(inputs)
    check_model(model, params)
    static, traced = split_call_kwargs(options.call_kwargs)
    extras = {"rng": RNG_KEY, "kwargs": traced}
    plan = CallPlan(
        method=options.method, static=static, axis_names=check_axis_names(options.axis_names),
        rng_names=["dropout"],
    )
    user_params, user_targets = params, targets
    select = selector(output)
    loss_fn = loss if loss is not None else softmax_cross_entropy
    # Each round traces the model once for its parameters (Linen: with its
    # outputs) and once in the forward phase; an axis name or RNG stream the
    # model asks for is learned and the round repeated. The forward trace is
    # jax's to cache: the forward program is traced from it again for free.
    for _ in range(MAX_RESOLVE):
        try:
            kind, root_name, apply, params, state, tracing, raw_outputs = prepare(
                model, user_params, inputs, extras, plan
            )
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as bad input, chained
            if learn(exc, plan):
                continue
            raise trace_error(exc, inputs, call_kwargs=options.call_kwargs, method=options.method) from exc
        check_params(params, model)
        outputs = select_outputs(select, raw_outputs, inputs)
        check_float_outputs(outputs)
        if loss is None:
            check_logits(outputs, raw_outputs, output)
        targets = abstract(
            user_targets if user_targets is not None else default_targets(outputs, loss)
        )
        labelled = (user_targets is None and loss is not None and not any(loss is k for k in LOSSES.values())
                    and jax.tree.leaves(targets)[0].dtype == jax.numpy.int32)  # a user's loss took integer labels
        check_loss(loss_fn, outputs, targets, made=user_targets is None)
        forward = _forward_phase(apply, select, loss_fn, remat)
        try:
            with tracing():  # the forward program's trace, kept for the analysis
                traced_forward = jax.jit(forward).trace(params, state, (inputs, extras), targets)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001
            if learn(exc, plan):
                continue
            raise trace_error(exc, inputs, call_kwargs=options.call_kwargs, method=options.method) from exc
        break
    else:  # pragma: no cover - a model asking for ever more names
        raise InputError(
            f"a model that needs at most {MAX_RESOLVE} axis names and RNG streams",
            f"more ({', '.join(plan.axis_names + plan.rng_names)})", "Bind them with axis_names=.",
        )

    def update(grads: PyTree, opt_state: PyTree, params: PyTree) -> Any:
        try:  # traced with the update's program: no trace of its own
            updates, opt_state = transform.update(grads, opt_state, params)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as bad input, chained; the mesh's failure as the mesh's
            raise mesh_error(exc, "the optimizer's update") or _optimizer_refused(exc) from exc
        return optax.apply_updates(params, updates), opt_state

    try:
        opt_state = jax.eval_shape(transform.init, params)
    except Exception as exc:  # noqa: BLE001 - reported as bad input, chained
        raise mesh_error(exc, "the optimizer's init") or _optimizer_refused(exc) from exc
    # a named optimizer of `xla_cost.OPTIMIZERS` reads every gradient; a transformation of the user's
    # may freeze some (one more trace of its update: 0.2-0.5 s for ResNet-50's Adam on 2 cores)
    read = None if isinstance(optimizer, str) else unread_gradients(update, params, opt_state)
    grad, train_step = _gradient_phases(forward, update, read)
    replayed_grad, replayed_step = _gradient_phases(replay(traced_forward, forward), update, read)
    notes = []
    if labelled:
        notes.append(f"targets: none given, and the loss refuses outputs-shaped ones: analysed on integer labels "
                     f"{describe_tree(targets)} (the outputs' shape without its last axis); pass targets= to change")
    if read is not None:
        notes.append(_frozen_note(params, read))
    if plan.axis_names:
        how = "detected" if plan.detected_axes == plan.axis_names else "bound"
        notes.append(
            f"collective axis names {', '.join(plan.axis_names)} {how}: the step runs as one "
            "device of a data-parallel group (jax.shard_map over a 1-device mesh); its "
            "collectives move nothing there (see collectives)"
        )
    if plan.detected_rngs:
        notes.append(f"RNG streams the model asked for, supplied: {', '.join(plan.detected_rngs)}")
    routing = declared_routing(model, inputs)
    notes += routing_notes(routing)
    collections = kind == "function" and is_collections(params)
    workload = Workload(
        kind=kind,
        root_name=root_name,
        params=params,
        state=state,
        opt_state=opt_state,
        inputs=inputs,
        targets=targets,
        outputs=outputs,
        forward=forward,
        grad=grad,
        update=update,
        train_step=train_step,
        param_paths=module_param_counts(params, collections=collections),
        tracing=tracing,
        extras=extras,
        axis_names=tuple(plan.axis_names),
        notes=tuple(notes),
        path_collections=collections,
        module_paths=plan.module_paths,
        traced={"forward": traced_forward},
        replayed={"grad": replayed_grad, "train_step": replayed_step},
        active_parameters=active_parameters(params, routing),
        padded=padded_modules(params, routing),
        read_gradients=read,
        loss_reads=loss_reads(traced_forward, params),
    )
    return workload, optimizer_name


def unread_gradients(update: Callable[..., Any], params: PyTree, opt_state: PyTree) -> PyTree | None:
    """A tree like ``params`` of whether ``update(grads, opt_state, params)`` reads each
    gradient; None where it reads every one, or where that cannot be told.

    An optimizer that freezes parameters (``optax.multi_transform`` with ``set_to_zero``,
    ``optax.transforms.freeze``) never reads their gradients: its update is the same for
    any. The fused train step then never computes them (XLA removes work no output
    needs), so the ``grad`` phase leaves them out too. Read from the update's jaxpr with
    its unused equations removed (jax's own dead-code elimination, as
    `xla_cost.count.interpret` uses it)."""
    try:
        closed = jax.make_jaxpr(update)(params, opt_state, params)
    except Exception:  # noqa: BLE001 - an update that does not trace abstractly
        return None
    return _reads(closed.jaxpr, len(closed.jaxpr.outvars), params)


def _reads(jaxpr: Any, results: int, params: PyTree) -> PyTree | None:
    """A tree like ``params`` (the jaxpr's first inputs) of whether its first ``results`` results read each
    leaf, from the jaxpr with the equations they do not need removed (jax's own dead-code elimination,
    as `xla_cost.count.interpret` uses it); None where they read every one, or where jax's internals moved."""
    try:
        from jax._src.interpreters import partial_eval as pe

        wanted = [True] * results + [False] * (len(jaxpr.outvars) - results)
        _, used = pe.dce_jaxpr(jaxpr, wanted, instantiate=False)
    except Exception:  # noqa: BLE001 - jax internals moved
        return None
    leaves, tree = jax.tree_util.tree_flatten(params)
    read = [bool(u) for u in used[:len(leaves)]]
    if len(used) < len(leaves) or all(read):
        return None
    return jax.tree_util.tree_unflatten(tree, read)


def loss_reads(traced: Any, params: PyTree) -> PyTree | None:
    """A tree like ``params`` of whether the forward program's loss (its first result) reads each
    parameter (`_reads`); None where it reads every one, or where that cannot be told. The
    gradient of a parameter it never reads is zeros: no backward work computes it."""
    return _reads(traced.jaxpr.jaxpr, 1, params)


def _frozen_note(params: PyTree, read: PyTree) -> str:
    """What leaving the unread gradients out (`unread_gradients`) did, with the parameters named."""
    paths = named_leaves(params)
    frozen = [("/".join(path_names(path)), leaf)
              for (path, leaf), r in zip(paths, jax.tree.leaves(read)) if not r]
    count = sum(int(math.prod(leaf.shape)) for _, leaf in frozen)
    names = ", ".join(name for name, _ in frozen[:6]) + (f" and {len(frozen) - 6} more" if len(frozen) > 6 else "")
    return (f"frozen by the optimizer: its update reads no gradient of {len(frozen)} parameter array(s) "
            f"({count:,} parameters: {names}), so grad computes none of them (nor the backward work only they "
            "need, nor keeps the activations only that work reads), as the fused train step does; their update "
            "is the optimizer's own (set_to_zero: none)")


def _gradient_phases(
    forward: Callable[..., Any], update: Callable[..., Any], read: PyTree | None = None,
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The ``grad`` and ``train_step`` phases of ``forward`` and ``update``; ``read``: the gradients
    the update reads (`unread_gradients`), the others zeros (nothing computes them)."""

    def grad(params: PyTree, state: PyTree, batch: PyTree, targets: PyTree) -> Any:
        try:
            (value, new_state), grads = jax.value_and_grad(forward, has_aux=True)(
                params, state, batch, targets
            )
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - jax's refusal to differentiate (the forward traced), in one line
            raise _gradient_refused(exc) from exc
        if read is not None:
            grads = jax.tree.map(lambda g, r: g if r else jax.numpy.zeros_like(g), grads, read)
        return value, grads, new_state

    def train_step(
        params: PyTree, opt_state: PyTree, state: PyTree, batch: PyTree, targets: PyTree
    ) -> Any:
        value, grads, new_state = grad(params, state, batch, targets)
        new_params, opt_state = update(grads, opt_state, params)
        return new_params, opt_state, new_state, value

    return grad, train_step


def replay(traced: jax.stages.Traced, fallback: Callable[..., Any]) -> Callable[..., Any]:
    """A function of the traced program's arguments that evaluates its jaxpr again.

    Differentiating it gives the same program as differentiating the function
    that was traced (the same primitives with the same parameters and name
    stacks, so the same per-layer attribution), without running the model's
    Python a second time. Tracing and lowering the gradient took 0.95 s instead
    of 1.07 s for ResNet-50 at batch 32, 0.62 instead of 0.76 s for BERT-base
    (batch 32) and GPT-2 small (batch 8), alone on a 2-core CPU; in an analysis
    that time is on the path that ends when the gradient's compile does.
    Arguments whose leaves do not match the traced ones (in number, shape or
    dtype) are given to ``fallback``, the function that was traced; so is
    every call where this jax's ``Traced`` has no ``jaxpr`` or ``out_tree``.
    """
    try:
        closed, out_tree = traced.jaxpr, traced.out_tree
    except AttributeError:
        return fallback
    evaluate = jax.extend.core.jaxpr_as_fun(closed)
    expected = tuple((tuple(a.shape), a.dtype) for a in closed.in_avals)

    def replayed(*args: Any) -> Any:
        leaves = jax.tree_util.tree_leaves(args)
        if tuple((tuple(jax.typeof(x).shape), jax.typeof(x).dtype) for x in leaves) != expected:
            return fallback(*args)
        return jax.tree_util.tree_unflatten(out_tree, evaluate(*leaves))

    return replayed


def _forward_phase(
    apply: Callable[..., Any], select: Callable[[Any], Any], loss_fn: LossFn, remat: str | None = None
) -> Callable[..., Any]:
    """The forward phase: the loss of one batch, and the model's new state.

    The phases see ``(inputs, extras)`` in the inputs slot: the model's inputs,
    its traced call arguments and the step's random key. With ``remat`` the
    whole model runs under ``jax.checkpoint`` with that policy
    (`xla_cost.step.remat`); the loss stays outside it.
    """
    def forward(params: PyTree, state: PyTree, batch: PyTree, targets: PyTree) -> Any:
        inputs, extras = batch
        model = _remat.checkpoint(lambda p, s, x: apply(p, s, x, extras), remat)
        outputs, new_state = model(params, state, inputs)
        return loss_fn(select(outputs), targets), new_state

    return forward
