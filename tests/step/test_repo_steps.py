"""The training steps of tests/repo_steps.py, checked without xla_cost.

Each case builds, its step traces as its repository calls it (a ``pmap``
step's axis bound, an NNX step through split and merge), its parameter count
is the closed form, and the closed-form forward FLOP is what XLA's own cost
analysis counts for the model's forward within 1%. These validate the
closed forms, not the analyzer: the tests of ``analyze_step`` compare its
phases with them.
"""

from __future__ import annotations

import functools
import math
import re

import jax
import pytest
from flax import nnx

from tests import repo_steps as R

JIT = ("jit", "pjit")
"""The nested-jit primitive's name: ``jit`` in the installed JAX (0.10), ``pjit`` in older ones."""


def _xla_flops(fn, *args, **jit_kwargs) -> float:
    return jax.jit(fn, **jit_kwargs).lower(*args).compile().cost_analysis()["flops"]


def _trace(case: R.StepCase) -> jax.core.ClosedJaxpr:
    """The step's jaxpr, called as its training loop calls it."""
    step = functools.partial(case.step, **case.kwargs)
    if isinstance(case.args[0], nnx.Module):
        # An NNX step updates its arguments in place: trace it through split/merge.
        graphdef, state = nnx.split(case.args[:-1])

        def pure(state, batch):
            objects = nnx.merge(graphdef, state)
            step(*objects, batch)
            return nnx.state(objects)

        return jax.make_jaxpr(pure)(state, case.args[-1])
    return jax.make_jaxpr(step, axis_env=[(name, 8) for name in case.axis_names])(*case.args)


def _parameter_count(case: R.StepCase) -> int:
    state = case.args[0]
    if isinstance(state, nnx.Module):
        return sum(math.prod(p.shape) for p in jax.tree.leaves(nnx.state(state, nnx.Param)))
    leading = case.devices if case.name == "imagenet_pmap" else 1  # replicated: a device axis first
    return sum(math.prod(p.shape) for p in jax.tree.leaves(state.params)) // leading


def _model_forward_flops(case: R.StepCase) -> float:
    """XLA's count of the model's forward at the step's batch, called as the step calls it."""
    model = case.model
    if isinstance(model, nnx.Module):
        graphdef, state = nnx.split(model)
        return _xla_flops(lambda state, x: nnx.merge(graphdef, state)(x), state, case.inputs)
    if case.name.startswith("imagenet"):
        # training mode: BatchNorm's batch statistics, their pmean over "batch" bound by vmap
        state = R.case("imagenet").args[0]
        variables = {"params": state.params, "batch_stats": state.batch_stats}
        forward = jax.vmap(lambda v, x: model.apply(v, x, mutable=["batch_stats"]), in_axes=(None, 0),
                           axis_name="batch")
        images = jax.ShapeDtypeStruct((1, *case.inputs.shape), case.inputs.dtype)
        return case.devices * _xla_flops(forward, variables, images)
    return _xla_flops(lambda p, x: model.apply({"params": p}, x), case.args[0].params, case.inputs)


@pytest.mark.parametrize("name", list(R.CASES))
def test_case_builds_and_its_step_traces(name):
    case = R.case(name)
    assert R.case(name) is case  # built once
    jaxpr = _trace(case)
    assert jaxpr.eqns
    assert case.parameters == _parameter_count(case)
    assert 0 < case.loss_flops < 0.005 * case.forward_flops  # a step's forward phase is the model's within 1%
    assert set(case.matmul_terms) <= set(case.forward_terms)
    assert case.first_layer is None or case.first_layer in case.matmul_terms


@pytest.mark.parametrize("name", [n for n in R.CASES if n not in ("mnist_donated", "imagenet_pmap")])
def test_closed_form_forward_is_xla_count(name):
    case = R.case(name)
    assert _model_forward_flops(case) == pytest.approx(case.forward_flops, rel=0.01)


def test_closed_forms():
    """The numbers, for the record (they follow from the formulas; the tests above check those)."""
    figures = {name: (R.case(name).forward_flops, R.case(name).parameters, round(R.case(name).backward_to_forward, 4))
               for name in ("imagenet", "mnist", "nnx", "gpt", "data_parallel")}
    assert figures == {
        "imagenet": (45_191_184, 81_706, 1.6093),
        "mnist": (69_664_848, 824_458, 1.9499),
        "nnx": (69_664_848, 824_458, 1.9499),
        "gpt": (113_218_960, 431_616, 2.0),
        "data_parallel": (85_721_728, 669_706, 1.3997),
    }
    imagenet, pmap = R.case("imagenet"), R.case("imagenet_pmap")
    assert pmap.forward_flops_per_device == imagenet.forward_flops
    assert pmap.gradient_allreduce_bytes == imagenet.gradient_allreduce_bytes == 4 * 81_706
    # the first layer's input gradient is not needed: 2 - conv_init / matmuls
    stem = imagenet.forward_terms["conv_init"]
    assert imagenet.backward_to_forward == pytest.approx(2 - stem / imagenet.matmul_flops)


# ------------------------------------------------------------------ how each step is written


def test_imagenet_step_needs_its_pmap_axis():
    case = R.case("imagenet")
    with pytest.raises(NameError, match="unbound axis name: batch"):
        jax.make_jaxpr(functools.partial(case.step, **case.kwargs))(*case.args)
    # bound by vmap instead of make_jaxpr's axis_env, as a one-device pmap would
    batched = jax.vmap(functools.partial(case.step, **case.kwargs), in_axes=(None, 0), axis_name="batch")
    state, batch = case.args
    new_state, metrics = jax.eval_shape(batched, state, jax.tree.map(lambda a: a[None], batch))
    assert set(metrics) == {"loss", "accuracy", "learning_rate"}
    assert new_state.batch_stats.keys() == state.batch_stats.keys()


def test_mnist_step_is_two_nested_jits_and_its_jitted_variant_donates_the_state():
    bare = _trace(R.case("mnist"))
    assert [e.params["name"] for e in bare.eqns if e.primitive.name in JIT] == ["apply_model", "update_model"]
    donated = _trace(R.case("mnist_donated"))
    (outer,) = donated.eqns
    assert outer.primitive.name in JIT and outer.params["name"] == "mnist_train_step"
    n_state = len(jax.tree.leaves(R.case("mnist_donated").args[0]))
    assert outer.params["donated_invars"] == (True,) * n_state + (False, False)


def test_gpt_step_accumulates_gradients_over_four_micro_batches():
    jaxpr = _trace(R.case("gpt"))
    (scan,) = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
    assert scan.params["length"] == R.GRADIENT_ACCUMULATION_STEPS == 4


def test_nnx_step_updates_its_arguments_in_place():
    case = R.case("nnx")
    model, optimizer, metrics, _ = case.args
    _, state = nnx.split((model, optimizer, metrics))
    jaxpr = _trace(case)
    # every parameter, the optimizer's step and moments, the metrics' totals come back
    assert len(jaxpr.out_avals) == len(jax.tree.leaves(state))
    assert optimizer.tx is case.optimizer


def test_data_parallel_step_splits_the_forward_and_all_reduces_the_gradients():
    case = R.case("data_parallel")
    assert len(jax.devices()) >= case.devices == 8
    batch = case.args[1]
    # each device's forward is 1/8 of the whole: XLA's count of the partitioned program is per device
    per_device = _xla_flops(lambda p, x: case.model.apply({"params": p}, x), case.args[0].params, case.inputs,
                            in_shardings=(jax.sharding.NamedSharding(batch["image"].sharding.mesh,
                                                                     jax.sharding.PartitionSpec()),
                                          batch["image"].sharding))
    assert per_device == pytest.approx(case.forward_flops_per_device, rel=0.01)
    # the partitioner's all-reduces carry every parameter's gradient (and the mean loss, one float)
    hlo = case.step.lower(*case.args).compile().as_text()
    reduced = 0
    for line in hlo.splitlines():
        head, sep, _ = line.partition(" all-reduce(")
        if sep:
            reduced += sum(math.prod(int(d) for d in dims.split(",") if d)
                           for dims in re.findall(r"f32\[([\d,]*)\]", head.partition("=")[2]))
    assert 4 * reduced == case.gradient_allreduce_bytes + 4


def test_importing_the_cases_builds_nothing():
    assert not [k for k, v in vars(R).items() if isinstance(v, (jax.Array, R.StepCase))]
    assert all(callable(build) for build in R.CASES.values())
