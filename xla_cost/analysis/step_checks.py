"""The notes a user's step gets beside its figures: why it has no backward pass,
why XLA's count of it is above its parts', and the step checker: work a step
does by accident (metrics computed on the gradients, the model run again
outside the gradient, parameters that receive no gradient, an optimizer state
larger than the optimizers that hold it).

Each check reads the counted step (`xla_cost.count.interpret.JaxprCount`, its
equations classified by `xla_cost.count.step_parts`), its jaxpr and its
arguments; none changes a figure. Before the count, `without_parameter_copies`
reads the traced jaxpr for which of the arguments' parameter-like leaves are a
copy of the parameters kept beside them (an EMA in the same state): state, not
parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
from jax.extend import core as jex_core

from xla_cost.analysis.costs import flop_gap_reason
from xla_cost.analysis.differentiated import trained_and_rewritten
from xla_cost.analysis.report import PhaseCosts
from xla_cost.analysis.step_arguments import leaf_parts
from xla_cost.analysis.trained_notes import ungraded_note
from xla_cost.compiled import lowering, xla
from xla_cost.count.attribution import classify_pass
from xla_cost.count.gradients import Gradients
from xla_cost.count.interpret import JaxprCount, join_stack
from xla_cost.count.stacks import REMAT_SCOPE, mapped_backward, split_name_stack
from xla_cost.count.step_parts import FEEDS_LOSS, METRICS
from xla_cost.step import phases
from xla_cost.step.trees import named_leaves, nbytes, path_names
from xla_cost.step.user_step import UserStep, differentiable

__all__ = [
    "metric_gradients_note","no_backward_note", "takes_a_gradient", "fusion_note", "step_notes", "gradients_note", "zero_gradients",
           "ungraded_parameters", "second_forward", "fed_forward", "merged_forward", "read_by_a_pass",
           "without_parameter_copies"]

FORWARD, BACKWARD, UPDATE, OTHER = phases.STEP_PARTS


def zero_gradients(jaxpr: Any, prepared: UserStep) -> list[str]:
    """The parameters whose gradients jax built as arrays of zeros (nothing differentiable
    connects them to the loss): each a module's path, or a shape where several modules have
    parameters of that shape and dtype. Zeros that a loop carries (an accumulator's start) are
    not gradients and are left out."""
    modules: dict[tuple[tuple[int, ...], str], list[str]] = {}
    for index, (leaf, module) in enumerate(zip(jax.tree.leaves(prepared.args), prepared.owners)):
        if module is not None and module in prepared.param_paths:
            key = (tuple(getattr(leaf, "shape", ())), str(getattr(leaf, "dtype", "")))
            modules.setdefault(key, [])
            if prepared.labelled(index, module) not in modules[key]:  # (two critics' Dense_0: two modules)
                modules[key].append(prepared.labelled(index, module))
    found: list[str] = []
    for level, prefix in _levels(jaxpr, ""):
        looped = {v for eqn in level.eqns if eqn.primitive.name in ("scan", "while", "cond")
                  for v in eqn.invars if not isinstance(v, jex_core.Literal)}
        for eqn in level.eqns:
            # zeros that autodiff builds inside the passes (a BatchNorm's jvp) are no gradients: those of
            # the gradients jax hands back are made outside them
            if (eqn.primitive.name != "broadcast_in_dim" or not isinstance(eqn.invars[0], jex_core.Literal)
                    or float(eqn.invars[0].val) != 0.0 or eqn.outvars[0] in looped
                    or classify_pass(join_stack(prefix, str(eqn.source_info.name_stack))) is not None):
                continue
            aval = eqn.outvars[0].aval
            owners = modules.get((tuple(aval.shape), str(aval.dtype)), [])
            name = owners[0] if len(owners) == 1 else f"a parameter {aval.str_short()}" if owners else None
            if name is not None and name not in found:
                found.append(name)
    return found


def no_backward_note(traced: Any, prepared: UserStep) -> str:
    """Why no work is under transpose: the step takes a gradient that nothing it returns reads
    (its backward pass and update are dead code: a ``jax.jit`` step that updates NNX objects in
    place and returns the loss alone, or nothing), it takes one of a loss that nothing
    differentiable reaches (jax then builds the gradients as zeros, and no equation under
    transpose), or it takes none. A backward pass in the traced step (before dead-code
    elimination) is what tells the first from the second: zeros of a parameter's shape outside
    the passes are also what an optimizer builds (``optax.MultiSteps`` resetting its accumulated
    gradients), no sign that the gradients are zeros."""
    treated = ("the model's work is reported as forward (under its modules' scopes; where no work is under one, "
               "what computes the step's results from the parameters), new parameters made from the old alone "
               "(an EMA) as update, the rest as other")
    if takes_a_gradient(traced.jaxpr):
        carried = ("jax.jit carries no change made to an NNX object inside the step out of it: use nnx.jit, or "
                   "return nnx.state((model, optimizer)) for the caller to nnx.update, as Flax's examples do"
                   if prepared.kind == "nnx" else "return the new parameters and optimizer state")
        return (f"no backward: the step takes a gradient but returns nothing that reads it, so its backward pass "
                f"and update are dead code that XLA removes ({carried}); {treated}")
    zeros = zero_gradients(traced.jaxpr, prepared)
    if zeros:
        return (f"no backward: the gradients are zeros ({', '.join(zeros)}): nothing the loss depends on is "
                "differentiable (an integer output, argmax, a comparison or stop_gradient between the "
                f"parameters and the loss), so jax builds no backward pass; {treated}")
    return f"no backward found: the step takes no gradient (no equation under transpose); {treated}"


def takes_a_gradient(jaxpr: Any) -> bool:
    """Whether an equation of ``jaxpr`` (at any level, dead or live) is under a transpose."""
    return any(classify_pass(join_stack(prefix, str(eqn.source_info.name_stack))) == BACKWARD
               for level, prefix in _levels(jaxpr, "") for eqn in level.eqns)


def _levels(jaxpr: Any, prefix: str) -> Any:
    """``(jaxpr, its name-stack prefix)`` and the same for every jaxpr nested in it."""
    yield jaxpr, prefix
    for eqn in jaxpr.eqns:
        stack = join_stack(prefix, str(eqn.source_info.name_stack))
        for value in eqn.params.values():
            for item in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(item, "jaxpr", item)
                if hasattr(inner, "eqns"):
                    yield from _levels(inner, stack)


_MOMENTS = 2
"""Copies of the parameters in the state of Adam, the largest of optax's usual optimizers
(mu and nu): an optimizer state beyond it is noted."""


def second_forward(counted: JaxprCount, module_of: Callable[[str], str | None]) -> tuple[int, list[str]]:
    """The FLOP of the model's work outside the gradient (in other, under the model's modules, in
    neither pass: a second forward pass) that the loss does not read (`fed_forward`), and the modules
    the model's work outside the gradient runs under."""
    again = [e for e in counted.equations
             if e.part == OTHER and classify_pass(e.name_stack) is None and module_of(e.name_stack) is not None]
    flops = sum(e.cost.flops for e in again)
    return flops - min(fed_forward(counted), flops), list(dict.fromkeys(str(module_of(e.name_stack)) for e in again))


def fed_forward(counted: JaxprCount) -> int:
    """The FLOP of the model's work outside the gradient whose values the gradient's passes read
    (`xla_cost.count.step_parts.FEEDS_LOSS`): a target or teacher network computing what the loss
    compares with, a constant to the gradient; no second forward pass the loss could return."""
    fed = counted.tagged.get(FEEDS_LOSS)
    return fed.flops if fed is not None else 0


_MERGED = 0.9
"""The share of a second forward pass's FLOP that XLA's compiled step must be below the parts' sum
by for the second pass to be called merged into the first (computed once)."""


def merged_forward(counted: JaxprCount, step: PhaseCosts | None, again: int) -> int:
    """How far XLA's count of the step is below the parts' where that is a second forward pass
    (``again`` FLOP) computed once with the gradient's: at least `_MERGED` of it and no loop
    or recomputation that would explain a gap; 0 otherwise."""
    if step is None or step.flops is None or not again or step.loop_corrected or counted.loops \
            or counted.recomputed.flops:
        return 0
    below = counted.total.flops - step.flops
    return below if below >= _MERGED * again else 0


def gradients_note(gradients: Gradients) -> str | None:
    """Where the step computes several gradients (`xla_cost.count.gradients`): how many, and that
    the forward and backward parts hold them all; None for one or none."""
    if gradients.count <= 1:
        return None
    n = gradients.count
    where = [f"{gradients.after_update:,} taken at values the step's update made from an earlier gradient (SAM's "
             "perturbed parameters, from a grad_fn called in the optimizer's update; a line search's trial point; "
             "another model's new parameters)"] if gradients.after_update else []
    where += [f"{gradients.at_perturbed:,} taken at inputs perturbed along an earlier gradient (an adversarial "
              "example: FGSM's x + eps * sign(grad_x), a PGD step; its arithmetic is other, not the update)"
              ] if gradients.at_perturbed else []
    where += [f"{gradients.looped:,} in loops, one per iteration (micro-batches, ascent or line-search steps)"
              ] if gradients.looped else []
    bound = "at least " if not gradients.known else ""
    return (f"the step computes {bound}{n:,} gradients, each one forward and one backward pass of a loss, and "
            f"forward and backward hold all {n:,}" + (": " + "; ".join(where) if where else "")
            + ("; a while loop's trip count is unknown: its body's gradients are counted once" if bound else ""))


def step_notes(counted: JaxprCount, prepared: UserStep, traced: Any, module_of: Callable[[str], str | None], *,
               differentiates: bool, step: PhaseCosts | None = None, gradients: Gradients | None = None) -> list[str]:
    """The step checker: a note per kind of work the step likely does by accident.

    ``step``: the compiled step's figures, where it was compiled: a second forward pass that XLA
    computes once with the first (`merged_forward`) is said to be free in that program.
    ``gradients``: those the step computes (several: said, `gradients_note`)."""
    notes: list[str] = []
    said = gradients_note(gradients) if gradients is not None and differentiates else None
    if said:
        notes.append(said)
    params = prepared.parameters
    metrics = counted.tagged.get(METRICS)
    if metrics is not None and metrics.flops:
        per = f", {metrics.flops / params:.1f} per parameter" if params else ""
        notes.append(f"step checker: other holds {metrics.flops:,} FLOP{per} computed on the gradients or the new "
                     "parameters that only the returned metrics read (a gradient or parameter norm): they run "
                     "every step; log them from a separate function every N steps if that matters")
    if differentiates:
        flops, where = second_forward(counted, module_of)
        forward = sum(e.cost.flops for e in counted.equations if e.part == FORWARD)
        fed = fed_forward(counted)
        if fed and forward:
            notes.append(f"other: {fed:,} FLOP ({fed / forward:.0%} of the forward) are the model run outside the "
                         f"gradient under {', '.join(where)}, whose result the loss reads as a constant (no "
                         "gradient flows through it): a target or teacher network's forward (a TD target, "
                         "distillation's logits), work the loss needs, not a second forward pass to return from it")
        if flops and forward:
            head = (f"step checker: the model also runs outside the gradient: {flops:,} FLOP in other "
                    f"({flops / forward:.0%} of the forward) under {', '.join(where)}: a second forward pass (for "
                    "metrics?), not a jax.checkpoint recomputation")
            merged = merged_forward(counted, step, flops)
            if merged and step is not None:
                notes.append(head + f"; XLA computes it once with the gradient's forward pass (the same inputs and "
                             f"parameters: common subexpressions), so the compiled step does not pay for it "
                             f"(train_step {step.flops:,} FLOP, {merged:,} below the parts' "
                             f"{counted.total.flops:,}); it would where the two passes differ (dropout, other "
                             "inputs): return what it computes from the loss (has_aux=True) to be sure")
            else:
                notes.append(head + "; return what it computes from the loss (has_aux=True) to reuse the forward "
                             "pass")
        ungraded = ungraded_parameters(traced.jaxpr, prepared, module_of)
        if ungraded:
            notes.append(ungraded_note(ungraded))
    # (the parameters and the optimizer state as the memory's parts read them)
    elements, states = _held(prepared, leaf_parts(prepared, jaxpr=traced))
    total = sum(states.values())
    if elements and total > _MOMENTS * elements:
        held = ", ".join(f"{name} {n / elements:.1f}x" for name, n in states.items())
        notes.append(f"step checker: the optimizer state holds {total / elements:.1f}x the parameters ({held}): "
                     f"more than Adam's {_MOMENTS} moments; check for a state kept twice (a chain that repeats a "
                     "transformation, gradient accumulation's copy, a float32 copy of the parameters; "
                     "optax.lookahead's slow weights are one more by design)")
    return notes


def _made_by_backward(jaxpr: Any, module_of: Callable[[str], str | None], live: bool = False,
                      ) -> tuple[dict[str, set[tuple[int, ...]]], set[str], set[tuple[int, ...]]]:
    """(the shapes the backward equations under each module make, the modules the name stacks show,
    the shapes any backward equation makes, under a module or not), those of a backward pass that a
    ``vmap`` maps (`mapped_backward`: per-example gradients, the examples on any axis inside it: a
    convolution's kernel gradient has them beside its features) also less one axis; ``live``: only
    the equations some result needs (jax's dead-code elimination, as XLA's: the gradients an
    optimizer that freezes parameters never reads are not made). A ``jax.checkpoint``'s
    recomputation of its forward pass in the backward (under jax's remat scope) makes no gradient:
    a frozen norm scale's ``1 + scale`` computed again there has the scale's shape, and is no
    evidence it is trained."""
    made: dict[str, set[tuple[int, ...]]] = {}
    shown: set[str] = set()
    anywhere: set[tuple[int, ...]] = set()
    if live:
        try:
            from jax._src.interpreters import partial_eval as pe

            inner = getattr(jaxpr, "jaxpr", jaxpr)
            jaxpr = pe.dce_jaxpr(inner, [True] * len(inner.outvars), instantiate=True)[0]
        except Exception:  # noqa: BLE001 - jax internals moved: every equation, as written
            pass
    read: dict[str, tuple[str | None, str | None]] = {}  # a stack's pass and module, read once per stack
    for level, prefix in _levels(jaxpr, ""):
        for eqn in level.eqns:
            stack = join_stack(prefix, str(eqn.source_info.name_stack))
            if stack not in read:
                found = classify_pass(stack)
                read[stack] = (found, module_of(stack) if found is not None else None)
            found, module = read[stack]
            if found == BACKWARD and REMAT_SCOPE in split_name_stack(stack):  # forward work, done again
                found = None
            shapes = {tuple(getattr(v.aval, "shape", ())) for v in eqn.outvars}
            if found == BACKWARD and mapped_backward(stack):  # one gradient per example, batched on an axis
                shapes |= {shape[:axis] + shape[axis + 1:] for shape in shapes for axis in range(len(shape))}
            if found == BACKWARD:
                anywhere |= shapes
            if module is None:
                continue
            shown.add(module)
            if found == BACKWARD:
                made.setdefault(module, set()).update(shapes)
    return made, shown, anywhere


_MAPPED = frozenset({"shard_map", "xla_pmap"})
"""Primitives whose body computes on one device's shards: the shapes it makes are no parameter's."""


def read_by_a_pass(jaxpr: Any, reached: set[Any], prefix: str = "") -> tuple[bool, set[Any]]:
    """(whether an equation of the gradient's passes, forward or backward, reads a value of
    ``reached`` or one computed from it by equations outside the passes, the values so
    computed): a parameter whose array no pass reads gets no gradient (an unused module, a
    table read only outside the loss). A nested jaxpr that takes its equation's operands one
    for one (a jit, a remat, a scan's consts and carries) is followed into; any other an operand
    reaches is taken to read it (unknown is not "unread")."""
    reached = set(reached)
    for eqn in jaxpr.eqns:
        hit = [i for i, v in enumerate(eqn.invars) if not isinstance(v, jex_core.Literal) and v in reached]
        if not hit:
            continue
        stack = join_stack(prefix, str(eqn.source_info.name_stack))
        if classify_pass(stack) is not None:
            return True, reached
        inner = [getattr(item, "jaxpr", item) for value in eqn.params.values()
                 for item in (value if isinstance(value, (tuple, list)) else (value,))
                 if hasattr(getattr(item, "jaxpr", item), "eqns")]
        if not inner:
            reached.update(eqn.outvars)
            continue
        body = inner[0]
        if len(inner) > 1 or len(body.invars) != len(eqn.invars) or len(body.outvars) != len(eqn.outvars):
            return True, reached
        carries = (int(eqn.params["num_consts"]), int(eqn.params["num_carry"])) \
            if eqn.primitive.name == "scan" else (0, 0)
        given = set(hit)
        while True:  # a scan's carry that the body makes from a reached value is reached on the next trip
            found, inside = read_by_a_pass(body, {body.invars[i] for i in given}, stack)
            if found:
                return True, reached
            out = {i for i, v in enumerate(body.outvars) if not isinstance(v, jex_core.Literal) and v in inside}
            again = {carries[0] + i for i in out if i < carries[1]} - given
            if not again:
                break
            given |= again
        reached.update(eqn.outvars[i] for i in out)
    return False, reached


def without_parameter_copies(jaxpr: Any, prepared: UserStep) -> UserStep:
    """The step with the copies of its parameters that its arguments hold beside them (openpi's
    ``TrainState.ema_params`` beside ``params``, both NNX ``Param`` states) left out of its
    parameters: their leaves own no module and their modules' counts drop them. The parameters
    are the leaves the loss is differentiated with respect to, and those the model holds but
    freezes; a copy that the update alone reads is model state.

    A copy is a subtree ``prefix/`` of parameter leaves each of which mirrors a parameter outside
    it (``prefix/fc1/kernel`` and ``fc1/kernel``: the path below the prefix, the name, the shape and
    the dtype the same) and none of which an equation of the gradient's passes reads
    (`read_by_a_pass`): a frozen copy the forward reads (a teacher, a LoRA's base) stays a
    parameter, and so does a module of the model's own that no pass reads (an unused one: it is no
    mirror of another subtree). The step as it is where the jaxpr's inputs are not the flattened
    arguments."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    invars = list(getattr(inner, "invars", ()))
    if len(invars) != len(jax.tree.leaves(prepared.args)):
        return prepared
    named = [(index, leaf, module, name.rsplit("/", 1)[-1]) for index, leaf, module, name in _parameter_names(prepared)]

    def key(module: str, name: str, leaf: Any) -> tuple[str, str, tuple[int, ...], str]:
        return module, name, tuple(getattr(leaf, "shape", ())), str(getattr(leaf, "dtype", ""))

    where = {key(module, name, leaf): index for index, leaf, module, name in named}
    # per leaf, the prefixes below which it mirrors another parameter: (prefix, the other's index)
    mirrors: dict[int, dict[str, int]] = {}
    for index, leaf, module, name in named:
        parts = module.split("/") if module else []
        for cut in range(1, len(parts) + 1):
            other = where.get(key("/".join(parts[cut:]), name, leaf))
            if other is not None and other != index:
                mirrors.setdefault(index, {})["/".join(parts[:cut])] = other
    copies: set[int] = set()
    for prefix in sorted({p for found in mirrors.values() for p in found}, key=lambda p: p.count("/")):
        members = [index for index, _, module, _ in named
                   if (module == prefix or module.startswith(prefix + "/")) and index not in copies]
        if not members or any(prefix not in mirrors.get(i, {}) or mirrors[i][prefix] in members for i in members):
            continue
        if read_by_a_pass(inner, {invars[i] for i in members})[0]:
            continue
        copies.update(members)
    if not copies:
        return prepared
    owners = list(prepared.owners)
    counts = dict(prepared.param_paths)
    dropped: set[tuple[str, str, tuple[int, ...], str]] = set()
    for index, leaf, module, name in named:
        if index not in copies:
            continue
        owners[index] = None
        if key(module, name, leaf) not in dropped and module in counts:
            dropped.add(key(module, name, leaf))
            counts[module] -= int(getattr(leaf, "size", 0))
    counts = {module: n for module, n in counts.items() if n > 0 or module not in {k[0] for k in dropped}}
    return dataclasses.replace(prepared, owners=tuple(owners), param_paths=counts)


def _parameter_names(prepared: UserStep) -> list[tuple[int, Any, str, str]]:
    """(index among the flattened arguments, leaf, module, ``module/name``) of every parameter of the
    step's arguments (an optimizer's state left out: Adafactor's factored rows are no parameters);
    the name after its tree's where several trees share module paths (``qf1_state/Dense_0/kernel``:
    `UserStep.labelled`), the module as the name stacks show it."""
    flat = named_leaves(prepared.args)  # a wrapper's own keys left out: the parameter's name is its key's
    parameters = _parameter_indices(prepared)
    named = []
    for index, ((path, leaf), module) in enumerate(zip(flat, prepared.owners)):
        if index not in parameters:
            continue
        keys = path_names(path)  # an NNX Variable's array (.value): the variable's name
        named.append((index, leaf, module, f"{prepared.labelled(index, module)}/{keys[-1] if keys else ''}"))
    return named


def _slices(leaf: Any) -> set[tuple[int, ...]]:
    """``leaf``'s shape and its shape less one axis, whichever (one layer's slice of a scanned stack)."""
    shape = tuple(getattr(leaf, "shape", ()))
    return {shape} | {shape[:axis] + shape[axis + 1:] for axis in range(len(shape))}


def _graded(leaf: Any, module: str, made: Mapping[str, set[tuple[int, ...]]]) -> bool:
    """Whether a backward equation under ``module`` makes an array of ``leaf``'s shape or of one
    layer's slice of it, for a scanned stack: the shape less one axis, whichever axis the layers
    are stacked on (Flax's ``nn.scan`` and NNX's ``vmap`` stack on axis 0 by default, MaxText's
    ``param_scan_axis=1`` on axis 1; the scan's body takes one layer's slice)."""
    return bool(made.get(module, set()) & _slices(leaf))


def _judged(jaxpr: Any, prepared: UserStep, module_of: Callable[[str], str | None], live: bool = False,
            ) -> list[tuple[int, Any, str, str, bool, bool]]:
    """Per parameter (`_parameter_names`): (its index, leaf, module, name, whether the backward pass
    makes it a gradient, whether the optimizer updates it: the step returns an array of its shape
    and dtype, and not it as it came in, as an NNX Optimizer's ``wrt=`` filter or a LoRA's frozen
    base are; a table passed among the params and never returned is not). A gradient is made where

    * the parameter is of a floating (or complex) dtype: an integer one (an int8 quantized weight,
      a parameter by `xla_cost.analysis.quantized`) takes none, jax's float0 at most;
    * some equation of the passes reads the parameter (`read_by_a_pass`; where the jaxpr's inputs
      are the flattened arguments): none reads an unused module's, whatever its name;
    * a backward equation under its module makes an array of its shape or one layer's slice
      (`_graded`), where the name stacks show the module;
    * a module the name stacks never show (a model's root, a pure-JAX params dict): some backward
      equation, under any module, makes one (a per-device body's shapes are no parameter's: taken
      to), else none (a noise schedule's table passed among the params, read outside the loss).

    Where several trees share module paths (`UserStep.trees`: TD3's actor and two critics, under
    one name stack each class), a module's name and a shape tell no tree from another: the data
    flow does (`trained_and_rewritten`): a gradient of its shape and the parameter make its new value,
    and the optimizer updates it where the step returns a value of its shape computed from it, and
    not it as it came in."""
    made, shown, anywhere = _made_by_backward(jaxpr, module_of, live=live)
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    invars = list(getattr(inner, "invars", ()))
    flat = jax.tree.leaves(prepared.args)
    aligned = len(invars) == len(flat)
    outvars = [v for v in getattr(inner, "outvars", ()) if not isinstance(v, jex_core.Literal)]
    returned = {id(v) for v in outvars}
    results = {(tuple(v.aval.shape), str(v.aval.dtype)) for v in outvars if v not in invars}
    mapped = any(eqn.primitive.name in _MAPPED for level, _ in _levels(jaxpr, "") for eqn in level.eqns)
    judged = []
    named = _parameter_names(prepared)
    flows = trained_and_rewritten(jaxpr, len(flat), [n[0] for n in named]) if any(prepared.trees) else None
    for index, leaf, module, name in named:
        if flows is not None and aligned:
            judged.append((index, leaf, module, name, differentiable(leaf) and index in flows[0],
                           index in flows[1] and id(invars[index]) not in returned))
            continue
        if not differentiable(leaf):  # an int8 (quantized) weight: jax makes it no gradient, float0 at most
            graded = False
        elif aligned and not read_by_a_pass(inner, {invars[index]})[0]:
            graded = False
        elif module in shown:
            graded = _graded(leaf, module, made)
        else:
            # (a vector's slice, a scalar, is made by any backward pass: its own shape alone is asked)
            graded = mapped or bool(anywhere & (_slices(leaf) if getattr(leaf, "ndim", 0) > 1 else
                                                {tuple(getattr(leaf, "shape", ()))}))
        updated = not aligned or (id(invars[index]) not in returned
                                  and (tuple(getattr(leaf, "shape", ())), str(getattr(leaf, "dtype", ""))) in results)
        judged.append((index, leaf, module, name, graded, updated))
    return judged


def ungraded_parameters(jaxpr: Any, prepared: UserStep, module_of: Callable[[str], str | None]) -> list[str]:
    """The parameters (``module/name``) that no backward equation computes a gradient of (`_judged`)
    and the optimizer updates all the same; not those it updates not (an NNX Optimizer's ``wrt=``
    filter, a LoRA's frozen base, a table passed among the params): nothing of them is applied,
    nothing to leave out."""
    judged = _judged(jaxpr, prepared, module_of)
    # each parameter once, judged by its first array: a second of one name (a target network's or an
    # EMA's copy in its state, rewritten from it) is no parameter the optimizer applies zeros to
    graded = {name for _, _, _, name, grades, _ in judged if grades}
    first: dict[str, tuple[bool, bool]] = {}
    for _, _, _, name, grades, updated in judged:
        first.setdefault(name, (grades, updated))
    return [name for name, (grades, updated) in first.items() if not grades and updated and name not in graded]


def metric_gradients_note(parameters: int, flops: int, backward: int) -> str:
    """The step checker's note on gradients that only the step's returned metrics read (``parameters``
    of them: a gradient norm over every gradient where the optimizer trains some, its other
    parameters frozen): the backward pass computes them for the metric alone. ``flops``: what the
    step computes for nothing but its metrics (the step less the step without them, from the jaxpr);
    ``backward``: the backward pass's FLOP."""
    share = f" ({flops / backward:.0%} of the backward pass's {backward:,})" if backward else ""
    return (f"step checker: the returned metrics read the gradients of {parameters:,} parameters the update does "
            f"not train (frozen): the backward pass computes them for the metrics alone; the metrics cost "
            f"{flops:,} FLOP the step needs for nothing else{share}: take the metric over the trained "
            "gradients, or compute it apart every N steps")


def trained_parameters(jaxpr: Any, prepared: UserStep, module_of: Callable[[str], str | None],
                       shards: Sequence[int] = ()) -> tuple[int, int, int]:
    """(the parameters the backward pass makes a gradient for, the bytes of those gradients, the
    parameters the optimizer updates: those and the ones whose zero gradients it applies,
    `ungraded_parameters`; not those whose gradients an optimizer that freezes them never reads,
    ``set_to_zero``): each parameter (``module/name``) once (an EMA copy of
    the parameters passed beside them is no second gradient), judged by `_judged` over the live
    equations. ``shards``: per flattened argument leaf, the shards a mesh splits it into: the
    bytes are one device's."""
    sized: dict[str, tuple[int, int]] = {}
    updated: dict[str, int] = {}
    zeros = set(ungraded_parameters(jaxpr, prepared, module_of))
    for index, leaf, _, name, graded, _ in _judged(jaxpr, prepared, module_of, live=True):
        if graded:
            split = shards[index] if index < len(shards) else 1
            sized.setdefault(name, (int(getattr(leaf, "size", 0)), round(nbytes(leaf) / split)))
        if graded or name in zeros:
            updated.setdefault(name, int(getattr(leaf, "size", 0)))
    return sum(n for n, _ in sized.values()), sum(b for _, b in sized.values()), sum(updated.values())


def _is_state(x: Any) -> bool:
    """An optax type (a named tuple of optax's): its name is the kind of state it holds."""
    return type(x).__module__.startswith("optax") and hasattr(x, "_fields")


STATE_KEY = "opt_state"
"""The attribute under which a train state holds its optimizer's state: Flax's Linen ``TrainState``
field and NNX ``nnx.Optimizer``'s attribute (whose optax states NNX holds as its own nodes, not
optax's named tuples)."""


def _state_kinds(args: Any) -> list[str]:
    """Per flattened leaf of ``args``, the kind of optimizer state it would be: its optax type's name
    (``ScaleByAdamState``), or under `STATE_KEY`, where no optax type is left, the field after it
    (``opt_state.mu``), else ``optimizer state`` (one the data flow finds: a plain dict's ``m``).
    Which leaves are optimizer state is `xla_cost.analysis.step_arguments.leaf_parts`' to say."""
    kinds: list[str] = []
    for node in jax.tree.leaves(args, is_leaf=_is_state):
        kinds += [type(node).__name__ if _is_state(node) else ""] * len(jax.tree.leaves(node))
    for index, (path, _) in enumerate(jax.tree_util.tree_flatten_with_path(args)[0]):
        names = [_key_name(key) for key in path]
        if not kinds[index] and STATE_KEY in names:
            field = next((n for n in names[names.index(STATE_KEY) + 1:] if n is not None), "")
            kinds[index] = f"{STATE_KEY}.{field}" if field else STATE_KEY
    return [kind or "optimizer state" for kind in kinds]


def _key_name(key: Any) -> str | None:
    """A path key's name: an attribute's (``.opt_state``) or a mapping's string key (an NNX state's)."""
    name = getattr(key, "name", None)
    if name is None:
        name = getattr(key, "key", None)
    return name if isinstance(name, str) else None


def _parameter_indices(prepared: UserStep) -> set[int]:
    """The flattened leaves of the step's arguments that own a module as parameters: not an
    optimizer's state's (`UserStep.roles`: a leaf the loss is differentiated by is none, whatever
    holds it, ``optax.LookaheadParams.fast``), nor a leaf that only mirrors a parameter's path
    (`UserStep.mirrors`: ``m['fc1']['w']`` beside ``params['fc1']['w']``), as the memory's parts
    read them (`xla_cost.analysis.step_arguments.leaf_parts`)."""
    mirrors = prepared.mirrors()
    return {index for index, (role, module) in enumerate(zip(prepared.roles(), prepared.owners))
            if module is not None and module in prepared.param_paths and role != "optimizer_state"
            and index not in mirrors}


def _held(prepared: UserStep, parts: Sequence[str]) -> tuple[int, dict[str, int]]:
    """(the parameters' array elements, the array elements (not scalars) of each kind of optimizer
    state, `_state_kinds`) in the step's arguments, each leaf as the memory's parts read it
    (``parts``: `xla_cost.analysis.step_arguments.leaf_parts`; a pmap's copies included)."""
    leaves = jax.tree.leaves(prepared.args)
    kinds = _state_kinds(prepared.args)
    elements = 0
    held: dict[str, int] = {}
    for leaf, part, kind in zip(leaves, parts, kinds):
        if part == "parameters":
            elements += int(getattr(leaf, "size", 0))
        elif part == "optimizer_state" and getattr(leaf, "ndim", 0) > 0 \
                and jax.numpy.issubdtype(leaf.dtype, jax.numpy.floating):
            held[kind] = held.get(kind, 0) + int(leaf.size)
    return elements, held


_FUSION_GAP = 0.02
"""The relative difference between XLA's count of a step and its parts' beyond which a
note explains it."""


def fusion_note(prepared: UserStep, counted: JaxprCount, step: PhaseCosts, *, devices: int = 1,
                shared: int = 1, parts_per_device: int | None = None, merged: int = 0,
                narrow: bool = False) -> list[str]:
    """Explains XLA's train_step count where it differs from the parts' (the jaxpr's) by more
    than `_FUSION_GAP`: compiled again without fusion, the duplication XLA's fusions add;
    ``merged``: FLOP below the parts that are a second forward pass XLA computes once
    (`merged_forward`), named as such rather than as XLA's rewriting. ``devices``: the devices a
    mapped body (``pmap``, a ``shard_map`` step) runs on, whose jaxpr and XLA program are both one
    device's: compared as they are, said to be one device's. ``shared``: the devices a sharded
    step's whole jaxpr is shared over, whose XLA count is one device's: held against the parts'
    per-device sum (``parts_per_device``) and, where that is off, said why it is not split further.
    ``narrow``: the CPU computes the step's 16-bit floats in float32 (`costs.emulates_narrow_floats`):
    what the unfused compile counts above the parts is that emulation's converts (`costs.flop_gap_reason`,
    which `analyze`'s phase notes read too)."""
    xla_flops, parts = step.flops, counted.total.flops
    if shared > 1:
        each = parts_per_device
        if xla_flops is None or not each or abs(xla_flops - each) <= _FUSION_GAP * each:
            return []
        return [f"train_step: XLA counts {xla_flops:,} FLOP on one device, {(xla_flops - each) / each:+.1%} "
                f"against the parts' per-device sum {each:,}; not split further: the parts are the "
                f"whole step's jaxpr shared out over {shared} devices by the batch's and the parameters' shards, "
                "which a compile without fusion does not check (the partitioner's replicated work and "
                "collectives' adds are the usual difference beside XLA's fusions)"]
    if xla_flops is None or not parts or abs(xla_flops - parts) <= _FUSION_GAP * parts:
        return []
    where = f" on one device (the step mapped over {devices})" if devices > 1 else ""
    head = (f"train_step: XLA counts {xla_flops:,} FLOP{where}, {(xla_flops - parts) / parts:+.1%} against the "
            f"parts' {parts:,} (the jaxpr's{', one device' + chr(39) + 's' if devices > 1 else ''}; the "
            "difference is in no part)")
    if step.loop_corrected or counted.recomputed.flops:
        # XLA's count of a step whose loops it kept is corrected for them, and a recomputation is one XLA
        # may merge with the forward: a compile without fusion would need the same reading to compare (a
        # loop XLA unrolled whole is counted as the jaxpr counts it: compared as it is)
        what = "loops" if step.loop_corrected else "recomputation"
        return [head + f"; not split further: with the step's {what}, XLA's count is not one a compile without "
                       "fusion compares with as it is (XLA's fusions computing cheap producers again, its own "
                       "rewriting and, for a recomputation, its merging with the forward are the usual difference)"]
    with prepared.scopes(), lowering.kernels_it_lowers():
        lowered = prepared.lower()
    unfused = xla.compile_phase(lowered, compiler_options=xla.UNFUSED_OPTIONS, executable=False).costs.flops
    if unfused is None:
        return [head + "; compiled without fusion, XLA gave no count"]
    if merged and abs(unfused - (parts - merged)) <= _FUSION_GAP * parts:
        return [head + f": compiled without fusion XLA counts {unfused:,} ({(unfused - parts) / parts:+.1%}), so "
                f"{xla_flops - unfused:,} FLOP are XLA's fusions computing cheap producers (normalisations, "
                f"broadcasts, masks) again inside each fusion that reads them, and counting every copy; the rest, "
                f"{parts - unfused:,} below the parts, is the model's second forward pass outside the gradient, "
                "which XLA computes once with the gradient's (the step checker's note)"]
    return [head + ": " + flop_gap_reason(xla_flops, parts, narrow, unfused, tolerance=_FUSION_GAP)]
