"""The gradient differentiates the forward's trace (`xla_cost.step.workload.replay`): the
model's Python runs once for the forward program, the gradient and train-step programs are
the ones a second trace of the model gives, and a sharded step, whose activation constraints
come from the model's code, traces it again."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from xla_cost.analysis import programs
from xla_cost.parallel import sharding
from xla_cost.count.interpret import count_jaxpr
from xla_cost.step import phases
from xla_cost.step.workload import build_workload, replay

BATCH, D_IN, D_HIDDEN, CLASSES = 4, 16, 32, 10


class Calls:
    """How often a model's Python ran (an object Flax keeps as it is, not a list it freezes)."""

    def __init__(self) -> None:
        self.n = 0

    def __len__(self) -> int:
        return self.n


class Counted(nn.Module):
    """Dense, BatchNorm, dropout, Dense; counts the calls of its Python."""

    calls: Calls

    @nn.compact
    def __call__(self, x, train: bool = True):
        self.calls.n += 1
        x = nn.Dense(D_HIDDEN)(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.Dropout(0.1, deterministic=not train)(nn.relu(x))
        return nn.Dense(CLASSES)(x)


INPUTS = jax.ShapeDtypeStruct((BATCH, D_IN), jnp.float32)


def _jaxpr(workload, phase, **options):
    with workload.tracing():
        return jax.jit(workload.phase_fn(phase, **options)).trace(*workload.phase_args(phase)).jaxpr


def test_the_gradient_is_the_forward_trace_differentiated_and_the_same_program():
    calls = Calls()
    workload, _ = build_workload(Counted(calls), INPUTS, optimizer="adam")
    built = len(calls)
    for phase in ("grad", "train_step"):
        replayed = _jaxpr(workload, phase)
        assert len(calls) == built, phase  # the model's code did not run
        retraced = _jaxpr(workload, phase, retrace=True)
        assert len(calls) > built, phase
        built = len(calls)
        # the same equations, parameters and name stacks: the same costs per module and primitive
        assert str(replayed) == str(retraced), phase
        owners = None if phase == "grad" else workload.input_owners(phase)
        assert count_jaxpr(replayed, owners=owners).equations == count_jaxpr(retraced, owners=owners).equations


def test_a_replay_given_other_shapes_runs_the_function_it_replays():
    def fn(x):
        ran.append(x.shape)
        return jnp.tanh(x).sum()

    ran = []
    traced = jax.jit(fn).trace(jax.ShapeDtypeStruct((3, 5), jnp.float32))
    replayed = replay(traced, fn)
    ran.clear()
    assert jax.jit(replayed).trace(jax.ShapeDtypeStruct((3, 5), jnp.float32)).jaxpr is not None
    assert ran == []  # the traced shapes: its jaxpr, not fn
    jax.jit(replayed).trace(jax.ShapeDtypeStruct((4, 5), jnp.float32))
    assert ran == [(4, 5)]
    assert replay(object(), fn) is fn  # a jax whose Traced has no jaxpr: the function itself


def test_a_sharded_step_traces_the_models_code_again_for_its_constraints():
    calls = Calls()
    workload, _ = build_workload(Counted(calls), INPUTS, optimizer="sgd")
    grad = phases.phase("grad")
    with workload.tracing():
        jit = programs.jit_phase(workload, grad, None)
        assert jit.__wrapped__.__wrapped__ is workload.replayed["grad"]  # through jit_phase's own function
        before = len(calls)
        jit.trace(*workload.phase_args("grad"))
        assert len(calls) == before  # one device: the forward's trace, differentiated
        plan = sharding.plan_sharding(workload, {"data": 2})
        with programs.constraints(plan, workload):
            sharded = programs.jit_phase(workload, grad, plan).trace(*workload.phase_args("grad"))
    assert len(calls) == before + 1  # on a mesh the model runs again, inside the plan's constraints
    # the outputs of Dense, BatchNorm, Dropout, Dense and the model itself (batch on the leading
    # axis) constrained, each again on its gradient in the backward pass: 2 * 5
    assert str(sharded.jaxpr).count("sharding_constraint") == 2 * 5
    assert "sharding_constraint" not in str(jit.trace(*workload.phase_args("grad")).jaxpr)
