"""Which part of a user's own training step each equation of its jaxpr is.

A training step written by hand (``jax.value_and_grad`` of a loss, an optax
update, metrics) is one jaxpr. Its equations fall into the parts of
`xla_cost.step.phases.STEP_PARTS`, decided from the name stack and the data
flow alone, without names the user must add:

* **forward**: under ``jvp(...)`` and not transposed: what computing the loss
  needs, whether or not the loss is returned (``jax.grad`` drops it, and XLA
  its last reduction); an equation that autodiff adds to the forward pass only
  for the backward pass (a ReLU's mask: every reader is under ``transpose``)
  is **backward**, as ``grad - forward`` counts it for `xla_cost.analyze`; so
  is every forward equation that neither the loss nor a result of the step
  needs but through the backward pass (a GeLU's ``x**2`` for its derivative's
  ``3x**2``, a scanned layer's residuals: what ``analyze``'s forward program
  never computes), the loss being a float scalar the forward computes, returned
  or dead (``jax.grad``: found in the jaxpr before dead-code elimination), and
  so is the rounding jax's checkpoint puts on the values a policy saves (a
  ``reduce_precision`` to their own type, which the forward then also reads). A
  ``jax.checkpoint`` recomputation whose primal is dead code (``jax.grad`` of
  a checkpointed loss: nothing is saved, so nothing runs before the backward
  pass; no equation of that checkpoint's repeats one that ran) is the forward,
  the only one that runs. In a step with no gradient at all, the work under
  the model's modules is the forward; where no work is under one (a pure-JAX
  model: an apply function over a params pytree), the work that computes the
  step's results from its parameters is (`_Classifier.undifferentiated`);
* **backward**: under ``transpose(...)``: the gradient computation, a custom
  VJP's backward rule and ``jax.checkpoint``'s recomputation of a forward that
  also ran (matched equation by equation: scope, primitive, result shapes),
  with the derivatives' own work that checkpoint computes beside it (a
  normalisation's rsqrt derivative, a ReLU's mask);
* **update**: outside autodiff, computed from a gradient and kept in the
  step's new state (the optax chain, clipping, a ``pmean`` of the gradients,
  the new parameters and optimizer state, an accumulation over
  micro-batches), and what the update reads and nothing else but the new
  state (an optimizer's step counter, the learning rate its schedule gives),
  or reads the update's values and only the new state reads (a privatizer's
  noise and the buffer it writes it into: `xla_cost.count.update_work`);
  in a step with no gradient, only new parameters made from the old (an EMA
  of them): a KV cache returned written is the forward's state; never the
  model run outside autodiff (under the scopes its passes run it under) on
  parameters an earlier update made (a rollout of the policy in a loop of
  training iterations): that is other; in a loop's body, only where the
  loop's results are new state (`xla_cost.count.update_work`): a frozen
  reference's log-sum-exp summed in a ``fori_loop`` is other;
* **other**: the rest: metrics (a gradient norm or a parameter norm that only
  a returned metric reads, given the step's ``results``; an accuracy returned
  through ``has_aux``, at the top level or in a loop of micro-batches:
  `xla_cost.count.aux_metrics`), a schedule also
  logged, data reshapes, model state made outside autodiff from the forward's
  values alone (a pmapped step's ``pmean`` of BatchNorm's batch statistics).

Calls (nested jits, custom derivatives, checkpoints) are followed as if
inlined; a loop's body (``scan``, ``while``) and each branch of a ``cond`` are
classified on their own, a carry that holds a gradient after one iteration
holding one from the start. Each equation is named by its *path* (indices of
the equations that contain it, ``"body"``/``"cond"`` of a while loop, ``"b0"``..
for a cond's branches), the way `xla_cost.count.interpret.count_jaxpr` walks it.

Each equation also gets an owner, the module its data belongs to: the module
on its name stack for forward and backward work, and for the rest the owner
of its full-size operands (`xla_cost.count.interpret.eqn_owner`), seeded from
the parameters' modules: an optimizer's arithmetic on one layer's gradient is
that layer's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax.numpy as jnp

from xla_cost.count.interpret import CALL_LIKE, CALL_PARAMS, REMAT_PRIMITIVES, combine_owners, eqn_owner, \
    join_stack, public_owner, repeated_forward
from xla_cost.count.jaxpr_values import aval_key, float_scalar, literal, residual_rounding, resolve_alias
from xla_cost.count.aux_metrics import metric_only_forward
from xla_cost.count.gradients import gradient_work, matched_nodes
from xla_cost.count.level_values import MIXED, every_node, losses, made_from_forward, saved_values
from xla_cost.count.update_work import feeding_state, metrics_only_loop, owners_from_readers, perturbed_in_loop, \
    revert_unconfirmed
from xla_cost.count.step_labels import Label, Path, StepLabels
from xla_cost.count.stacks import REMAT_SCOPE, bare_stack, classify_pass, differentiated_scopes
from xla_cost.step.phases import STEP_PARTS

__all__ = ["classify_step", "MIXED", "METRICS", "FEEDS_LOSS", "ADVERSARIAL"]

FORWARD, BACKWARD, UPDATE, OTHER = STEP_PARTS

METRICS = "metrics"
"""The tag (`StepLabels.tags`) of update work that only metrics read."""

FEEDS_LOSS = "feeds the loss"
"""The tag of the model's work outside the gradient whose values the gradient's passes read: a
target or teacher network's forward computing what the loss compares with (`_Classifier.feeding`)."""

ADVERSARIAL = "adversarial"
"""The tag of work outside autodiff, made from a gradient and from no parameter or state, that a
gradient's passes read: an input perturbed along a gradient (FGSM's ``x + eps * sign(grad_x)``, a PGD
step), which is other, not the update (`_Classifier._refine`)."""


_OUTSIDE = "outside"  # a level's results: read by the caller, keeps their producers
_METRIC = "metric"  # a step's result that is not its new state: what only it reads is other
_PERTURBED = "perturbed"  # read as an input the passes read, made from a gradient (`ADVERSARIAL`)
_PERTURBED_READERS = frozenset({FORWARD, BACKWARD, OTHER, _METRIC, _PERTURBED, _OUTSIDE})  # (all it may have)

@dataclasses.dataclass
class _Node:
    path: Path
    eqn: Any
    stack: str
    ins: list[Any]
    outs: list[Any]
    part: str = OTHER
    owner: str | None = None
    levels: list[_Level] = dataclasses.field(default_factory=list)
    reads_state: bool = False  # reads, outside autodiff, a parameter or state the step was given (`classify`)
    adversarial: bool = False  # an input perturbed along a gradient (`ADVERSARIAL`)


@dataclasses.dataclass
class _Level:
    """One jaxpr classified on its own (the step, a loop body, a branch)."""

    nodes: list[_Node]
    invars: list[Any]
    outvars: list[Any]
    labels: dict[Path, Label] = dataclasses.field(default_factory=dict)

    def parts(self) -> set[str]:
        return {label.part for label in self.labels.values()}


class _Classifier:
    def __init__(self, module_of: Callable[[str], str | None], results: Sequence[bool] | None = None) -> None:
        self.module_of = module_of
        self.results = results  # per result of the step: its new state (True) or a metric (False)
        self.top: _Level | None = None
        self.saved: dict[Any, int] = {}  # value -> bytes, of the level refined last
        self.inner_saved = 0  # the most one loop body's own forward keeps for its own backward (`_refine`)
        self.differentiates = True  # some equation is under transpose
        self.first_forward: set[Path] = set()  # recomputations whose primal is dead code
        self.remat_calls: set[Path] = set()  # the backward pass's checkpoint calls (differentiated)
        self.metrics: set[Path] = set()  # update work turned other: only metrics read it
        self.adversarial: set[Path] = set()  # update work turned other: an input perturbed along a gradient
        self.state: list[bool] = []  # per input of the step, whether it is a parameter or state (has an owner)
        self.model_scopes: set[str] = set()  # in a step without a gradient, the scopes that open the model's
        self.model_calls: set[tuple[str, ...]] = set()  # the scopes the gradient's passes run the model under
        self.live: set[Path] = set()  # equations whose values a result of the step needs (`residuals`)
        self.seeds: set[Any] = set()  # values live whoever reads them: a dead loss (`dead_loss`)
        self.feeds: set[Path] = set()  # the model's work outside autodiff that the passes read (`feeding`)
        self.provisional: set[Path] = set()  # update work in a loop's body its results alone read (`_refine`)
        self.whole: _Classifier | None = None  # the step's jaxpr before dead-code elimination, classified (`undead`)

    # ------------------------------------------------------------- pre-pass
    def survey(self, level: _Level, jaxpr: Any) -> None:
        """Whether the step differentiates at all, and which ``jax.checkpoint``
        calls repeat no forward that ran (`repeated_forward`): their primal is dead
        code, their work the forward. In a call that repeats some, the rest is the
        derivatives' own work, computed there instead of beside the forward."""
        nodes = list(every_node(level))
        passes = {node.path: classify_pass(node.stack) for node in nodes}
        self.differentiates = BACKWARD in passes.values()
        self.model_calls = {scopes for n in nodes if passes[n.path] is not None
                            for scopes in [differentiated_scopes(n.stack)] if scopes}
        if not self.differentiates:  # the model's work: under a module, or under the scope that opens them
            self.model_scopes = {scope for n in nodes if self.module_of(n.stack) is not None
                                 for scope in bare_stack(n.stack)[:1]}
        repeated = repeated_forward(jaxpr)
        repeating = {self.remat_call(path) for path in repeated}
        self.first_forward = {n.path for n in nodes if passes[n.path] == BACKWARD and REMAT_SCOPE in n.stack
                              and n.path not in repeated and self.remat_call(n.path) not in repeating}

    def remat_call(self, path: Path) -> Path | None:
        """The innermost checkpoint call of the backward pass that holds the equation at ``path``."""
        return next((path[:k] for k in range(len(path) - 1, 0, -1) if path[:k] in self.remat_calls), None)

    def autodiff_pass(self, node: _Node) -> str | None:
        """The part a node's name stack (and the pre-pass) gives it, None outside autodiff."""
        if node.path in self.first_forward:
            return FORWARD
        found = classify_pass(node.stack)
        if found is None and not self.differentiates and bare_stack(node.stack)[:1] and (
                bare_stack(node.stack)[0] in self.model_scopes):
            return FORWARD
        return found

    def runs_model(self, stack: str) -> bool:
        """Whether work outside autodiff runs the model: its name stack ends with the scopes the
        gradient's passes run a model's code under (``ActorCritic/Dense_0`` of ``jvp(ActorCritic)/Dense_0``).
        Such work on parameters made by an earlier update (a rollout's policy in a loop of training
        iterations, a loss evaluated on the new parameters) is a forward outside the gradient, other:
        the update is the optimizer's arithmetic, under none of the model's scopes."""
        bare = bare_stack(stack)
        return any(bare[len(bare) - len(scopes):] == scopes for scopes in self.model_calls if len(scopes) <= len(bare))

    # -------------------------------------------------------------- flattening
    def flatten(self, jaxpr: Any, path: Path, stack: str) -> _Level:
        jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
        alias: dict[Any, Any] = {}
        nodes: list[_Node] = []
        self._inline(jaxpr, path, (), stack, alias, nodes)

        def top(v: Any) -> Any:
            return None if literal(v) else resolve_alias(alias, ((), v))

        return _Level(nodes, [top(v) for v in jaxpr.invars], [top(v) for v in jaxpr.outvars])

    def _inline(self, jaxpr: Any, path: Path, scope: Path, stack: str, alias: dict[Any, Any],
                nodes: list[_Node]) -> None:
        def key(v: Any) -> Any:
            return None if literal(v) else resolve_alias(alias, (scope, v))

        for i, eqn in enumerate(jaxpr.eqns):
            here = (*path, i)
            eqn_stack = join_stack(stack, str(eqn.source_info.name_stack))
            name = eqn.primitive.name
            sub = next((eqn.params[p] for p in CALL_PARAMS if p in eqn.params), None) if name in CALL_LIKE else None
            if sub is not None:
                if name in REMAT_PRIMITIVES and eqn.params.get("differentiated"):
                    self.remat_calls.add(here)
                inner = getattr(sub, "jaxpr", sub)
                for inner_var, outer_var in zip(inner.invars, eqn.invars):
                    if not literal(outer_var):
                        alias[(here, inner_var)] = key(outer_var)
                self._inline(inner, here, here, eqn_stack, alias, nodes)
                for outer_var, inner_var in zip(eqn.outvars, inner.outvars):
                    if not literal(inner_var):
                        alias[(scope, outer_var)] = resolve_alias(alias, (here, inner_var))
                continue
            node = _Node(here, eqn, eqn_stack, [key(v) for v in eqn.invars], [(scope, v) for v in eqn.outvars])
            if name == "scan":
                node.levels = [self.flatten(eqn.params["jaxpr"], here, eqn_stack)]
            elif name == "while":
                node.levels = [self.flatten(eqn.params["body_jaxpr"], (*here, "body"), eqn_stack),
                               self.flatten(eqn.params["cond_jaxpr"], (*here, "cond"), eqn_stack)]
            elif name == "cond":
                node.levels = [self.flatten(b, (*here, f"b{k}"), eqn_stack)
                               for k, b in enumerate(eqn.params["branches"])]
            nodes.append(node)

    # ------------------------------------------------------------ classifying
    def classify(self, level: _Level, taint: Sequence[bool], owners: Sequence[str | None],
                 state: Sequence[bool] | None = None) -> tuple[list[bool], list[str | None]]:
        """Labels every equation of ``level`` (and of its loops); returns whether
        each result holds a gradient, and its owner. ``state``: per input, whether it is (made
        outside autodiff from) a parameter or state the step was given (default: those with an owner),
        which a node's ``reads_state`` says of its operands."""
        tainted: dict[Any, bool] = {}
        owner: dict[Any, str | None] = {}
        stateful: dict[Any, bool] = {}
        given = state if state is not None else [o is not None for o in owners]
        for var, t, o, held in zip(level.invars, taint, owners, given):
            if var is not None:
                tainted[var] = tainted.get(var, False) or t
                owner[var] = o if owner.get(var) is None else owner[var]
                stateful[var] = stateful.get(var, False) or held
        for node in level.nodes:
            in_taint = [tainted.get(v, False) for v in node.ins if v is not None]
            any_taint = any(in_taint)
            node.reads_state = any(stateful.get(v, False) for v in node.ins if v is not None)
            if node.levels:
                outs_taint, outs_owner = self._loop(node, tainted, owner, stateful)
                # its counter: the update's where its body updates from what it is given, else other
                # (a rollout's loop over the parameters an earlier iteration updated)
                updates = any(UPDATE in inner.parts() for inner in node.levels)
                node.part = self.autodiff_pass(node) or (UPDATE if any_taint and updates else OTHER)
                node.owner = combine_owners([owner.get(v) for v in node.ins if v is not None])
                for var, t, o in zip(node.outs, outs_taint, outs_owner):
                    tainted[var], owner[var], stateful[var] = t, o, node.reads_state
                continue
            autodiff = self.autodiff_pass(node)
            node.part = autodiff or (UPDATE if any_taint and not self.runs_model(node.stack) else OTHER)
            if autodiff is not None:
                node.owner = self.module_of(node.stack)
            else:
                node.owner = eqn_owner(node.eqn, {v: owner.get(k) for v, k in zip(node.eqn.invars, node.ins)
                                                  if k is not None})
            out_taint = node.part in (BACKWARD, UPDATE)
            for var in node.outs:
                tainted[var], owner[var] = out_taint, node.owner
                stateful[var] = autodiff is None and node.reads_state
        self._refine(level)
        owners_from_readers(level)
        for node in level.nodes:
            level.labels[node.path] = Label(node.part, public_owner(node.owner))
            for inner in node.levels:
                level.labels.update(inner.labels)
        return [tainted.get(v, False) for v in level.outvars], [owner.get(v) for v in level.outvars]

    def _loop(self, node: _Node, tainted: Mapping[Any, bool], owner: Mapping[Any, str | None],
              stateful: Mapping[Any, bool]) -> tuple[list[bool], list[str | None]]:
        eqn, name = node.eqn, node.eqn.primitive.name
        operands = [None if literal(v) else k for v, k in zip(eqn.invars, _pad(node.ins, eqn.invars))]
        taint = [tainted.get(k, False) if k is not None else False for k in operands]
        owners = [owner.get(k) if k is not None else None for k in operands]
        state = [stateful.get(k, False) if k is not None else False for k in operands]
        if name == "cond":
            results = [self.classify(b, taint[1:], owners[1:], state[1:]) for b in node.levels]
            return ([any(r[0][j] for r in results) for j in range(len(eqn.outvars))],
                    [combine_owners([r[1][j] for r in results]) for j in range(len(eqn.outvars))])
        if name == "scan":
            consts, carry = eqn.params["num_consts"], eqn.params["num_carry"]
            body = node.levels[0]
            # a carry that holds a gradient after an iteration holds one before; a chain of carries
            # takes one an iteration after another: classified again up to the fixpoint (`_rounds`)
            for _ in range(_rounds(carry)):
                out_taint, out_owner = self.classify(body, taint, owners, state)
                grown = [t or (consts <= j < consts + carry and out_taint[j - consts]) for j, t in enumerate(taint)]
                if grown == taint:
                    break
                taint = grown
            return out_taint, out_owner
        # while: cond_consts, body_consts, carry
        cond_n, body_n = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        carry_taint, carry_owner = taint[cond_n + body_n:], owners[cond_n + body_n:]
        body_state = state[cond_n:]
        body, cond = node.levels
        for _ in range(_rounds(len(carry_taint))):
            out_taint, out_owner = self.classify(body, [*taint[cond_n:cond_n + body_n], *carry_taint],
                                                 [*owners[cond_n:cond_n + body_n], *carry_owner], body_state)
            grown = [a or b for a, b in zip(carry_taint, out_taint)]
            if grown == carry_taint:
                break
            carry_taint = grown
        self.classify(cond, [*taint[:cond_n], *carry_taint], [*owners[:cond_n], *carry_owner],
                      [*state[:cond_n], *state[cond_n + body_n:]])
        return out_taint, out_owner

    def _refine(self, level: _Level) -> None:
        """Forward work that only backward work reads (as the name stacks say: no
        cascade, so a ``jax.grad`` step whose loss is dead keeps its forward) is
        backward; other work that the update reads, and nothing else but the new
        state, is the update's (an optimizer's step counter); update work that
        only metrics read is other. Consumers first (reverse order)."""
        readers: dict[Any, set[str]] = {}  # the parts that read a value, as refined
        stated: dict[Any, set[str]] = {}  # ... as their name stacks say
        marks = self.results if level is self.top and self.results is not None else None
        model_state = made_from_forward(level)
        for j, var in enumerate(level.outvars):
            if var is not None:
                mark = _OUTSIDE if marks is None or j >= len(marks) or marks[j] else _METRIC
                readers.setdefault(var, set()).add(mark)
                stated.setdefault(var, set()).add(mark)
        for node in reversed(level.nodes):
            if not node.levels:
                seen = set().union(*(readers.get(v, set()) for v in node.outs)) if node.outs else set()
                said = set().union(*(stated.get(v, set()) for v in node.outs)) if node.outs else set()
                before = node.part
                rounding = self.differentiates and residual_rounding(node.eqn)
                if node.part == FORWARD and (said == {BACKWARD} or rounding):
                    node.part = BACKWARD
                elif node.part == OTHER and ((UPDATE in seen and seen <= {UPDATE, _OUTSIDE})
                                             or (seen == {_OUTSIDE} and node.owner is not None
                                                 and not any(v in model_state for v in node.ins)
                                                 and not self.runs_model(node.stack))):
                    # what the update reads, and nothing else but the new state; or a module's new
                    # parameters or optimizer state made from no gradient (an optimizer's rule on a
                    # frozen parameter's zeros: Adam's moments decayed, weight decay), not the model
                    # state its forward pass made (a pmapped step's pmean of BatchNorm's batch
                    # statistics: other, as TrainState.step + 1), nor the model run on them (`runs_model`);
                    # in a loop's body, until what reads the loop's results says (`revert_unconfirmed`)
                    node.part = UPDATE
                    if level is not self.top:
                        self.provisional.add(node.path)
                elif node.part == UPDATE and not node.reads_state and seen & {FORWARD, BACKWARD, _PERTURBED} \
                        and seen <= _PERTURBED_READERS:
                    # made from a gradient and from no parameter or state the step was given, and read by a
                    # gradient's passes (and returned, or metrics) but by no update: an input perturbed along a
                    # gradient, FGSM's x + eps * sign(grad_x) (`ADVERSARIAL`), not the update; SAM's perturbed
                    # parameters read the parameters
                    node.part, node.owner = OTHER, None  # (the batch's work: no layer's)
                    node.adversarial = True
                    self.adversarial.add(node.path)
                elif node.part == UPDATE and seen and seen <= {OTHER, _METRIC}:
                    node.part = OTHER
                    self.metrics.add(node.path)
                elif node.part == OTHER and (bare_stack(node.stack) or any(v in model_state for v in node.ins)) \
                        and seen and seen <= {FORWARD, BACKWARD, MIXED}:
                    # a model's work outside autodiff that only the passes read: the forward's loop
                    # invariants jax's scan partial evaluation hoisted out of the loop (a rope's sin
                    # and cos), whose name stack lost its jvp (`xla_cost.count.hoisted`), or, under no
                    # scope, that reads the forward's values (a log-sum-exp's exp before a checkpointed
                    # fori_loop sums it); where only the backward pass reads it, the derivative's own
                    # invariants (a silu's sigmoid of a conditioning vector every scanned block reads)
                    node.part = BACKWARD if seen == {BACKWARD} else FORWARD
                reads_as = _PERTURBED if node.adversarial else node.part
            else:
                outer = [readers.get(v, set()) for v in node.outs]
                revert_unconfirmed(node, outer, self.provisional, {UPDATE, _OUTSIDE})
                metric = metrics_only_loop(node, outer, {OTHER, _METRIC})
                if metric:  # (an optimizer's update run again for a metric: its norm)
                    self.metrics |= metric
                    node.part = OTHER if node.part == UPDATE else node.part
                moved = perturbed_in_loop(node, outer, {FORWARD, BACKWARD}, _PERTURBED_READERS, _PERTURBED)
                if moved:  # (PGD's steps in a fori_loop: the loop makes a perturbed input, no update)
                    self.adversarial |= moved
                    node.adversarial = True
                    if node.part == UPDATE and not any(UPDATE in inner.parts() for inner in node.levels):
                        node.part = OTHER
                parts = set().union(*(inner.parts() for inner in node.levels))
                reads_as = before = parts.pop() if len(parts) == 1 else MIXED
            for var in node.ins:
                if var is not None:
                    readers.setdefault(var, set()).add(reads_as)
                    stated.setdefault(var, set()).add(before)
        self.saved = saved_values(level, readers)
        # what reads no gradient but feeds the new parameters or optimizer state (a privatizer's noise)
        outer = [_OUTSIDE if marks is None or j >= len(marks) or marks[j] else _METRIC
                 for j in range(len(level.outvars))]
        promoted = feeding_state(level, outer, lambda node: self.autodiff_pass(node) is None and not self.runs_model(
            node.stack) and not any(v in model_state for v in node.ins), {UPDATE, _OUTSIDE})
        if level is not self.top:
            self.provisional |= promoted
        if level is not self.top and {FORWARD, BACKWARD} <= level.parts():
            # a loop whose body runs a forward and its backward pass (gradients accumulated over micro-batches
            # by lax.scan): each iteration keeps its own activations, let go before the next
            self.inner_saved = max(self.inner_saved, sum(self.saved.values()))

    # ------------------------------------------- a step without a gradient
    def undifferentiated(self, top: _Level, owners: Sequence[str | None],
                         result_owners: Sequence[str | None]) -> bool:
        """In a step that takes no gradient and whose model's work is under no scope of its modules
        (a pure-JAX model: an apply function over a params pytree, `inference` of a decoder), the
        forward is the work that computes the step's results from its parameters: what reads a
        parameter, directly or through other work, and is needed by a result that is no new
        parameter. With no gradient there is no backward pass and no update by gradients; the
        update is only the work that makes new parameters from the old ones alone (an EMA of them:
        a result of a parameter's shape and dtype owned by its module), and a KV cache or a logit
        returned is the forward's. The work that reads no parameter (a step counter) stays other.
        True if any moved."""
        if self.differentiates or self.model_scopes:
            return False
        shapes = {(o, aval_key(v)) for v, o in zip(top.invars, owners) if v is not None and o is not None}
        if not shapes:
            return False
        made = [var is not None and (self.results is None or j >= len(self.results) or self.results[j])
                and o is not None and (o, aval_key(var)) in shapes
                for j, (var, o) in enumerate(zip(top.outvars, result_owners))]
        read: set[Path] = set()
        self._flows(top, [v is not None and o is not None for v, o in zip(top.invars, owners)], read)
        self.live = set()
        self._live(top, [var is not None and not new for var, new in zip(top.outvars, made)])
        moved = False
        for node in every_node(top):
            if not node.levels and node.part in (OTHER, UPDATE) and node.path in read and node.path in self.live:
                node.part, moved = FORWARD, True
        self.live = set()
        if moved:
            _feeds_forward(top, False)
        return moved

    def _flows(self, level: _Level, given: Sequence[bool], found: set[Path]) -> list[bool]:
        """Adds to ``found`` the paths of the equations of ``level`` (and of its loops) that read a
        value made from a parameter, given which of its inputs are; returns which of its results are.
        A loop's carry that holds one after an iteration holds one before."""
        made = {var for var, flag in zip(level.invars, given) if flag and var is not None}
        for node in level.nodes:
            ins = [var is not None and var in made for var in node.ins]
            if node.levels:
                outs = self._loop_flows(node, ins, found)
            else:
                outs = [any(ins)] * len(node.outs)
            if any(ins) or any(outs):
                found.add(node.path)
            made.update(var for var, flag in zip(node.outs, outs) if flag and var is not None)
        return [var is not None and var in made for var in level.outvars]

    def _loop_flows(self, node: _Node, ins: list[bool], found: set[Path]) -> list[bool]:
        eqn, name = node.eqn, node.eqn.primitive.name
        if name == "cond":
            branches = [self._flows(branch, ins[1:], found) for branch in node.levels]
            return [ins[0] or any(b[j] for b in branches) for j in range(len(eqn.outvars))]
        if name == "scan":
            consts, carry = eqn.params["num_consts"], eqn.params["num_carry"]
            for _ in range(_rounds(carry)):
                outs = self._flows(node.levels[0], ins, found)
                grown = [f or (consts <= j < consts + carry and outs[j - consts]) for j, f in enumerate(ins)]
                if grown == ins:
                    break
                ins = grown
            return outs
        cond_n, body_n = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        carry = ins[cond_n + body_n:]
        body, cond = node.levels
        for _ in range(_rounds(len(carry))):
            outs = self._flows(body, [*ins[cond_n:cond_n + body_n], *carry], found)
            grown = [a or b for a, b in zip(carry, outs)]
            if grown == carry:
                break
            carry = grown
        self._flows(cond, [*ins[:cond_n], *carry], found)
        return carry

    # ------------------------------------------------ the forward the loss needs
    def residuals(self, top: _Level) -> bool:
        """Forward work that no result of the step needs except through the backward pass
        becomes backward, where the step returns its loss; True if any moved.

        A value is *live* when a result of the step reads it through work that is not the
        backward pass (the loss, a model's new state, a metric of the outputs); forward
        work none of whose values is live is what autodiff adds for the backward pass
        alone, and ``analyze``'s forward program, the loss alone, never computes it. Where
        no float scalar the forward computes is a result (``jax.grad``: the loss is dead
        code, and the forward's last values are read by the backward pass alone), the
        step says nothing of where its loss ends here, and nothing moves (`dead_loss`)."""
        if not self.differentiates:
            return False
        self._live(top, losses(top))
        if not any(node.part == FORWARD and node.path in self.live for node in every_node(top)):
            return False
        self.live = set()
        self._live(top, [var is not None for var in top.outvars])
        moved = False
        for node in every_node(top):
            if node.part == FORWARD and not node.levels and node.path not in self.live:
                node.part, moved = BACKWARD, True
        return moved

    def dead_loss(self, top: _Level, whole: Any) -> bool:
        """Where the step returns no loss (``jax.grad``: its value is dead code, which the jaxpr
        counted drops), the forward is still what that loss needs: ``whole``, the step's jaxpr
        before dead-code elimination, computes it: a float scalar the forward makes that no backward
        work reads, at any level (a micro-batch's, in a loop). Its forward work that neither that
        loss nor a result needs but through the backward pass (a GeLU's ``x**2`` for its
        derivative's ``3x**2``) is backward, and what the loss
        needed that only the backward pass reads once its last reductions are dropped (the
        ``abs`` of a softmax's sums, which the dead ``log`` read) is forward: the parts of the
        ``value_and_grad`` form. Where the step returns a loss, another gradient it takes whose loss
        is dead (a ``jax.grad`` in the optimizer's update: SAM's gradient at the perturbed
        parameters, at any level) has its forward too: what that loss, read by nothing, needs is
        moved back from the backward (`residuals` gave it to the backward pass, no result reading
        it), and nothing else moves. Equations matched as themselves (dead-code elimination keeps
        those it keeps); True if any moved."""
        if whole is None or not self.differentiates:
            return False
        returned = any(losses(top))
        undead = self.undead(whole)
        level = undead.top
        nodes = list(every_node(level))
        backward = {var for node in nodes if node.part == BACKWARD for var in node.ins}
        # the losses, at any level (a micro-batch's in a loop): float scalars of the forward no backward work reads
        undead.seeds = {var for node in nodes if node.part == FORWARD and not node.levels for var in node.outs
                        if float_scalar(var) and var not in backward}
        if returned:  # beside the returned loss, the dead ones: read by nothing, at their level or after it
            undead.seeds -= {*level.outvars, *(v for node in nodes for v in node.ins),
                             *(v for node in nodes for inner in node.levels for v in inner.outvars)}
        if not undead.seeds:
            return False
        undead.live = set()
        undead._live(level, [var is not None and not returned for var in level.outvars])
        wanted = {id(node): FORWARD if node.path in undead.live else BACKWARD for node in every_node(level)
                  if not node.levels and classify_pass(node.stack) == FORWARD and not residual_rounding(node.eqn)}
        matched = matched_nodes(level, top)
        moved = False
        for node in every_node(top):
            part = wanted.get(id(matched.get(id(node))))
            if not node.levels and node.part in (FORWARD, BACKWARD) and part not in (None, node.part) \
                    and not (returned and part == BACKWARD):
                node.part, moved = part, True
        return moved

    def undead(self, whole: Any) -> _Classifier:
        """``whole``, the step's jaxpr before dead-code elimination, classified (`classify`), once."""
        if self.whole is None:
            undead = self.whole = _Classifier(self.module_of, self.results)
            level = undead.top = undead.flatten(whole, (), "")
            undead.survey(level, whole)
            n = len(level.invars)  # (the same arguments as the step's: which are parameters or state)
            undead.classify(level, [False] * n, [None] * n, self.state if len(self.state) == n else [False] * n)
        return self.whole

    def aux_metrics(self, top: _Level, owners: Sequence[str | None]) -> bool:
        """Forward work that carries no derivative of the loss and that only the step's metrics
        read is other, not forward (`xla_cost.count.aux_metrics`): an accuracy computed inside the
        differentiated function and returned beside the loss (``has_aux``), at the step's top level
        or in a loop's body (a micro-batch's, in a ``lax.scan`` of gradient accumulation), its
        argmax, comparison and mean. The step's results say which are metrics, and its parameters
        (``owners``) which values carry a derivative: where either is unknown, nothing moves. True
        if any moved."""
        if not self.differentiates or self.results is None or not any(o is not None for o in owners):
            return False
        marks = [{_OUTSIDE if j >= len(self.results) or self.results[j] else _METRIC} for j in range(len(top.outvars))]
        moved = metric_only_forward(top, [var is not None and o is not None for var, o in zip(top.invars, owners)],
                                    marks, {OTHER, _METRIC})
        for node in every_node(top):
            if node.path in moved:
                node.part = OTHER
        return bool(moved)

    def feeding(self, level: _Level, outs: Sequence[bool] = ()) -> list[bool]:
        """Adds to `feeds` the other work under the model's modules, outside autodiff, whose values an
        equation of the forward or backward pass reads, directly or through other work outside them (a
        target network's forward making a TD target, a teacher's logits), given which of ``level``'s
        results are so read (a loop's, by the work after it); returns which of its inputs are."""
        read = {var for var, flag in zip(level.outvars, outs) if flag and var is not None}
        for node in reversed(level.nodes):
            flags = [var in read for var in node.outs]
            if node.levels:  # and the loop's own work, its counter (a scan over positions in the model)
                operands = self._loop_dataflow(node, flags, self.feeding)
                read.update(v for v, flag in zip(_pad(node.ins, node.eqn.invars), operands) if flag and v is not None)
            elif node.part not in (FORWARD, BACKWARD) and not any(flags):
                continue
            if node.part == OTHER and any(flags) and classify_pass(node.stack) is None \
                    and self.module_of(node.stack) is not None:
                self.feeds.add(node.path)
            if not node.levels:
                read.update(var for var in node.ins if var is not None)
        return [var is not None and var in read for var in level.invars]

    def _live(self, level: _Level, live_out: Sequence[bool]) -> list[bool]:
        """Marks the equations of ``level`` (and of its loops) whose values are live
        (`live`), given which of its results are; returns which of its inputs are.
        The backward pass's work passes no liveness on (what it reads is residuals), but for
        the rounding jax's checkpoint puts on a saved value, which the forward reads on."""
        live = {var for var, flag in zip(level.outvars, live_out) if flag and var is not None} | self.seeds
        for node in reversed(level.nodes):
            outs = [var in live for var in node.outs]
            if node.levels:
                operands = self._loop_dataflow(node, outs, self._live)
                live.update(var for var, flag in zip(_pad(node.ins, node.eqn.invars), operands)
                            if flag and var is not None)
            elif not any(outs) or (node.part == BACKWARD and not residual_rounding(node.eqn)):
                self.live.discard(node.path)  # (the rounding of a saved value is on the forward's way)
            else:
                self.live.add(node.path)
                live.update(var for var in node.ins if var is not None)
        return [var is not None and var in live for var in level.invars]

    def _loop_dataflow(self, node: _Node, outs: list[bool],
                       through: Callable[[_Level, Sequence[bool]], list[bool]]) -> list[bool]:
        """Which operands of a loop (or cond) are live (``through``: `_live`; or read by the passes,
        `feeding`), given which of its results are; a carried value that a live iteration reads is
        live after the iteration before."""
        eqn, name = node.eqn, node.eqn.primitive.name
        if name == "cond":
            branches = [through(branch, outs) for branch in node.levels]
            return [any(outs), *(any(b[j] for b in branches) for j in range(len(eqn.invars) - 1))]
        if name == "scan":
            consts, carry = eqn.params["num_consts"], eqn.params["num_carry"]
            wanted = list(outs)
            while True:  # liveness only grows: at most one round per carried value
                operands = through(node.levels[0], wanted)
                grown = [w or (j < carry and operands[consts + j]) for j, w in enumerate(wanted)]
                if grown == wanted:
                    return operands
                wanted = grown
        cond_n, body_n = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        body, cond = node.levels
        wanted = list(outs)
        while True:
            operands = through(body, wanted)
            grown = [w or operands[body_n + j] for j, w in enumerate(wanted)]
            if grown == wanted:
                break
            wanted = grown
        counting = through(cond, [any(wanted)])  # the trip count, for whatever the loop computes
        return [*counting[:cond_n], *operands[:body_n],
                *(w or c for w, c in zip(wanted, counting[cond_n:]))]


def _feeds_forward(level: _Level, results_forward: bool) -> None:
    """Work outside the forward that forward work reads (in a step without a gradient: the
    positions, rope tables and masks a pure-JAX model makes of its inputs) is the forward's too, as
    is a loop that holds forward work (its counter). ``results_forward``: the forward reads the
    level's results (a loop's, outside it). Consumers first."""
    readers: dict[Any, set[str]] = {}
    if results_forward:
        for var in level.outvars:
            if var is not None:
                readers.setdefault(var, set()).add(FORWARD)
    for node in reversed(level.nodes):
        read = any(FORWARD in readers.get(var, ()) for var in node.outs if var is not None)
        if node.levels:
            for inner in node.levels:
                _feeds_forward(inner, read)
            if any(inner.part == FORWARD for level_ in node.levels for inner in every_node(level_)):
                node.part = FORWARD if node.part in (OTHER, UPDATE) else node.part
                reads_as = FORWARD
            else:
                reads_as = node.part
        else:
            if read and node.part in (OTHER, UPDATE):
                node.part = FORWARD
            reads_as = node.part
        for var in node.ins:
            if var is not None:
                readers.setdefault(var, set()).add(reads_as)


def _relabel(level: _Level) -> None:
    """The labels of ``level`` and its loops, again from their nodes' parts."""
    for node in level.nodes:
        level.labels[node.path] = Label(node.part, level.labels[node.path].owner)
        for inner in node.levels:
            _relabel(inner)
            level.labels.update(inner.labels)


def _rounds(carry: int) -> int:
    """How many times a loop body is classified to reach the fixpoint of which of
    its ``carry`` carried values hold a gradient: each round but the last marks
    at least one more (they only grow), and the last finds nothing new."""
    return carry + 1


def _pad(keys: list[Any], invars: Sequence[Any]) -> list[Any]:
    return keys if len(keys) == len(invars) else [None] * len(invars)


def classify_step(
    jaxpr: Any, owners: Sequence[str | None] | None = None,
    module_of: Callable[[str], str | None] = lambda stack: None,
    results: Sequence[bool] | None = None, whole: Any = None,
) -> dict[Path, Label]:
    """The `Label` of every equation of a train step's jaxpr, by its path.

    Args:
      jaxpr: the step's (closed) jaxpr, as `xla_cost.count.interpret.count_jaxpr`
        walks it (after dead-code elimination).
      owners: per input variable, the module it belongs to (a parameter's), or None.
      module_of: the module (per-layer row) a name stack stands for, None
        outside every module: the owner of forward and backward work.
      results: per result of the step, whether it is part of its new state
        (parameters, optimizer state, a counter: True) or a metric (False);
        None: all are state, and update work that only metrics read stays
        the update's.
      whole: the step's jaxpr before dead-code elimination, or None: where the
        step returns no loss, its dead loss says what the forward is (`dead_loss`).

    Returns:
      `StepLabels`: the `Label` of every equation, and the saved activations' bytes.
    """
    classifier = _Classifier(module_of, results)
    level = classifier.flatten(jaxpr, (), "")
    classifier.top = level
    classifier.survey(level, jaxpr)
    n = len(level.invars)
    given = list(owners) if owners is not None else [None] * n
    classifier.state = [o is not None for o in given]
    _, result_owners = classifier.classify(level, [False] * n, given)
    if classifier.undifferentiated(level, given, result_owners):
        _relabel(level)
    if classifier.aux_metrics(level, list(owners) if owners is not None else [None] * n):
        _relabel(level)  # (metrics the backward pass does not read: the saved activations are unchanged)
    if classifier.residuals(level) | classifier.dead_loss(level, whole):  # forward work moved: labelled again
        _relabel(level)
        classifier.saved = saved_values(level)
    labels = StepLabels(level.labels)
    held = sum(classifier.saved.values())
    if classifier.differentiates:  # (a jax.grad's loss joins its work before dead-code elimination)
        classifier.feeding(level)
        labels.gradients, held = gradient_work(level if whole is None else classifier.undead(whole).top, level,
                                               classifier.saved)
    # the top level is refined last; a loop body that differentiates keeps one iteration's at a time
    labels.saved_bytes = held + classifier.inner_saved
    labels.tags = {**{path: FEEDS_LOSS for path in classifier.feeds}, **{path: METRICS for path in classifier.metrics},
                   **{path: ADVERSARIAL for path in classifier.adversarial}}
    return labels
