"""`xla_cost.analyze_step` on the control flow of a hand-written step
(`xla_cost.count.step_parts`): a loop whose carries take a gradient one
iteration after another, a ``lax.cond`` given the parameters before the
gradients, a gradient all-reduce that XLA's combiner merged with the loss's,
a Linen ``nn.scan`` stack's per-layer rows, and a second gradient taken
inside the optimizer's update (SAM's opaque mode).

A multiply-add is 2 FLOP (tests/formulas.py); an elementwise operation 1 per
element.
"""

from __future__ import annotations

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state
from jax import lax
from jax.sharding import Mesh, PartitionSpec

import xla_cost
from tests.formulas import (
    dense_backward_flops, dense_flops, loss_backward_flops, loss_flops, relu_backward_flops,
)
from xla_cost.analysis.user_step import _selector
from xla_cost.count.interpret import EqnCount, JaxprCount
from xla_cost.count.registry import Cost

# ------------------------------------------------------------------ a chain of carries

IN, OUT, B, MICRO = 8, 4, 2, 3
SUMS = 5
"""Running sums after the accumulator: a chain longer than the 4 rounds the classifier once
stopped at. The scan's is as long as its carry (6) and its per-iteration output reads the last
link's carry, which holds a gradient from the 7th round: carry + 1 rounds, exactly the bound."""

N = IN * OUT  # the parameters (one weight matrix)
WIDTH, FC = 8, 16  # the Flax models' widths


def _grad(params, x):
    return jax.grad(lambda p: jnp.sum(x @ p["w"]))(params)


def _carry_sums(carry, grads):
    """acc + g, and each running sum plus the one before it *as it was*: the k-th sum first
    holds a gradient in iteration k + 1."""
    acc, *sums = carry
    return (jax.tree.map(jnp.add, acc, grads),
            *(jax.tree.map(jnp.add, s, before) for s, before in zip(sums, [acc, *sums[:-1]])))


def scan_step(params, xs):
    def body(carry, x):
        # a per-iteration trace of the last running sum, as it entered the iteration
        return _carry_sums(carry, _grad(params, x)), jnp.sum(carry[-1]["w"])

    zeros = jax.tree.map(jnp.zeros_like, params)
    return lax.scan(body, (zeros,) * (1 + SUMS), xs)  # the sums, and the traces


def while_step(params, x):
    def body(state):
        i, carry = state
        return i + 1, _carry_sums(carry, _grad(params, x))

    zeros = jax.tree.map(jnp.zeros_like, params)
    return lax.while_loop(lambda state: state[0] < MICRO, body, (0, (zeros,) * (1 + SUMS)))[1]


@pytest.mark.parametrize("step, data, trace, loop_other", [
    # the trace's N - 1 adds; the scan's counter: an add and a compare per iteration
    (scan_step, (MICRO, B, IN), N - 1, 2 * MICRO),
    # the while loop's i + 1 per iteration and its i < MICRO before each and after the last
    (while_step, (B, IN), 0, MICRO + (MICRO + 1)),
], ids=["scan", "while"])
def test_a_chain_of_carried_sums_is_update_to_its_last_link(step, data, trace, loop_other):
    params = {"w": jax.ShapeDtypeStruct((IN, OUT), jnp.float32)}
    report = xla_cost.analyze_step(step, params, jax.ShapeDtypeStruct(data, jnp.float32), counter="jaxpr")
    # per iteration: the accumulator's add and each running sum's, one per parameter (3 * 6 * 32 = 576),
    # and the trace of the last sum
    assert report.phases["update"].flops == MICRO * ((1 + SUMS) * N + trace)
    assert report.phases["other"].flops == loop_other


# ------------------------------------------------------------------ cond's operands


class _Tanh(nn.Module):
    @nn.compact
    def __call__(self, x):
        return jnp.tanh(nn.Dense(FC, name="fc")(x))


def test_a_cond_given_params_then_grads_charges_the_update_to_their_layer():
    model = _Tanh()

    def step(variables, x, flag):
        params = variables["params"]
        loss, grads = jax.value_and_grad(lambda p: jnp.sum(model.apply({"params": p}, x)))(params)
        new = lax.cond(flag, lambda p, g: jax.tree.map(lambda a, b: a - 0.1 * b * b, p, g),
                       lambda p, g: p, params, grads)
        return {"params": new}, loss

    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.ones((1, IN))))
    report = xla_cost.analyze_step(step, variables, jax.ShapeDtypeStruct((B, IN), jnp.float32),
                                   jax.ShapeDtypeStruct((), jnp.bool_), per_layer=True, counter="jaxpr")
    flops = {p: report.phases[p].flops for p in ("forward", "backward", "update", "other")}
    params = IN * FC + FC  # 144
    # the Dense, and the sum's B * FC - 1 adds (tanh is a transcendental)
    assert flops["forward"] == dense_flops(B, IN, FC) + B * FC - 1  # 544 + 31
    # tanh's derivative (1 - t, times the cotangent, times t, added: 3 per element; the cotangent of the
    # sum is 1, folded), the kernel's gradient (a matmul) and the bias's (a sum over the batch)
    assert flops["backward"] == 3 * B * FC + 2 * B * IN * FC + (B - 1) * FC  # 96 + 512 + 16
    # the branch that computes: g * 0.1, * g, p - ; and the flag's conversion to a branch index,
    # which only the update reads
    assert flops["update"] == 3 * params + 1
    assert flops["other"] == 0
    rows = {row.path: row for row in report.layers}
    assert rows["fc"].update_flops == 3 * params  # the branch's arithmetic on fc's parameters and gradients
    assert rows["(remainder)"].update_flops == 1


def test_a_cond_given_two_layers_params_and_grads_charges_each_layer_its_own_update():
    # the branch's invars are the cond's operands after its index: each parameter and gradient keeps its
    # owner through them (shifted by one, Dense_1's bias would be charged to Dense_0)
    model = _Relu()

    def step(params, x, flag):
        loss, grads = jax.value_and_grad(lambda p: jnp.sum(model.apply({"params": p}, x)))(params)
        new = lax.cond(flag, lambda p, g: jax.tree.map(lambda a, b: a - 0.1 * b * b, p, g),
                       lambda p, g: p, params, grads)
        return new, loss

    x = jax.ShapeDtypeStruct((B, IN), jnp.float32)
    params = jax.eval_shape(model.init, jax.random.key(0), x)["params"]
    report = xla_cost.analyze_step(step, params, x, jax.ShapeDtypeStruct((), jnp.bool_), per_layer=True,
                                   counter="jaxpr")
    rows = {row.path: row.update_flops for row in report.layers}
    # g * 0.1, * g, p - : 3 per parameter of each layer's kernel and bias
    assert rows["Dense_0"] == 3 * (IN * FC + FC) and rows["Dense_1"] == 3 * (FC * OUT + OUT)


# ------------------------------------------------------------------ a rollout of the updated policy

ROLLOUT, ITERATIONS = 3, 2  # the rollout's steps, the training iterations of one jitted loop


def test_a_rollout_of_the_parameters_an_earlier_iteration_updated_is_other_not_update():
    # purejaxrl's train(): one scan over training iterations, each a rollout of the policy (a scan of its
    # forward) then a gradient and Adam's update. From the second iteration the policy's parameters are
    # made from a gradient (the carry), but running the model on them is a forward outside the gradient:
    # other, as the step checker says, never the update. Before, a purejaxrl PPO step's update held its
    # rollout's 628,556 FLOP of network calls (1,294,104 for 2 epochs of 2 minibatches, 4 x 164,810 after)
    model, tx = _Tanh(), optax.adam(1e-3)

    def train(variables, opt_state, obs):
        def iteration(carry, _):
            params, opt = carry
            _, acts = lax.scan(lambda c, o: (c, model.apply({"params": params}, o)), 0, obs)  # the rollout
            grads = jax.grad(lambda p: jnp.sum((model.apply({"params": p}, obs) - acts) ** 2))(params)
            updates, opt = tx.update(grads, opt, params)
            return (optax.apply_updates(params, updates), opt), None

        return lax.scan(iteration, (variables["params"], opt_state), None, ITERATIONS)[0]

    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.ones((1, IN))))
    report = xla_cost.analyze_step(train, variables, jax.eval_shape(tx.init, variables["params"]),
                                   jax.ShapeDtypeStruct((ROLLOUT, B, IN), jnp.float32), counter="jaxpr")
    params = IN * FC + FC  # 144
    # Adam's 13 FLOP per parameter (tests/step/test_optimizers.py), its step counter (3) and bias corrections
    # (2), once per iteration
    assert report.phases["update"].flops == ITERATIONS * (13 * params + 3 + 2)
    # the rollout's Dense per step (tanh is a transcendental) and its loop's counter (an add and a compare
    # per step); the training loop's counter
    assert report.phases["other"].flops == ITERATIONS * ROLLOUT * (dense_flops(B, IN, FC) + 2) + 2 * ITERATIONS


# ------------------------------------------------------------------ several models' trees side by side


class _Trunk(nn.Module):
    @nn.compact
    def __call__(self, x):
        return jnp.tanh(nn.Dense(FC)(x))


class _Actor(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(OUT)(x)


class _Critic(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(x)


@flax.struct.dataclass
class _AgentParams:
    trunk_params: dict
    actor_params: dict
    critic_params: dict


def test_each_models_tree_is_named_after_the_class_applied_to_it():
    # cleanrl's PPO keeps three Linen models' variables in a struct of its own (AgentParams) and applies
    # each with its class: the stacks say _Trunk/Dense_0, _Actor/Dense_0 and _Critic/Dense_0, the parameters
    # trunk_params/params/Dense_0 and so on (Dense_0 in all three). Which class reads which tree is in the
    # data flow: each tree is named after its class. Before, every row showed 0 forward and 0 backward
    # FLOP, the remainder all of them (cleanrl's 64,350,172 FLOP of forward)
    models = _Trunk(), _Actor(), _Critic()
    x = jax.ShapeDtypeStruct((B, IN), jnp.float32)

    def init():
        h = jnp.ones((1, FC))
        return _AgentParams(models[0].init(jax.random.key(0), jnp.ones((1, IN))),
                            models[1].init(jax.random.key(1), h), models[2].init(jax.random.key(2), h))

    def step(params, x):
        def loss(p):
            h = models[0].apply(p.trunk_params, x)
            return jnp.sum(models[1].apply(p.actor_params, h) ** 2) + jnp.sum(models[2].apply(p.critic_params, h) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), value

    report = xla_cost.analyze_step(step, jax.eval_shape(init), x, counter="jaxpr", per_layer=True)
    rows = {r.path: r for r in report.layers}
    assert {path: row.forward_flops for path, row in rows.items() if row.parameters} == {
        "_Trunk/Dense_0": dense_flops(B, IN, FC), "_Actor/Dense_0": dense_flops(B, FC, OUT),
        "_Critic/Dense_0": dense_flops(B, FC, 1)}
    # SGD's 2 FLOP per parameter (g * 0.1, p - ), each on its own tree's row
    assert {path: row.update_flops for path, row in rows.items() if row.parameters} == {
        "_Trunk/Dense_0": 2 * (IN * FC + FC), "_Actor/Dense_0": 2 * (FC * OUT + OUT), "_Critic/Dense_0": 2 * (FC + 1)}
    assert not any("match no row" in note for note in report.notes)


# ------------------------------------------------------------------ a gradient split from a fused one

class _FusedGates(nn.Module):
    @nn.compact
    def __call__(self, x):
        carry = (jnp.zeros((x.shape[0], WIDTH)), jnp.zeros((x.shape[0], WIDTH)))
        return nn.OptimizedLSTMCell(WIDTH)(carry, x)[1].mean()


@pytest.mark.parametrize(("tx", "per_parameter"), [
    (optax.sgd(0.1), 2),  # -lr * g, p + u
    (optax.sgd(0.1, momentum=0.9), 4),  # m * 0.9 + g, -lr * m, p + u
    (optax.adam(1e-3), 13),  # docs/api.md: Adam's 13 FLOP per parameter
], ids=["sgd", "momentum", "adam"])
def test_a_gradient_split_from_the_cells_fused_one_is_each_gates_update(tx, per_parameter):
    """nn.OptimizedLSTMCell concatenates its gates' kernels into one product: their gradients are
    split from one in the cell's scope, and each gate's update is still that gate's."""
    model = _FusedGates()
    x = jax.ShapeDtypeStruct((B, IN), jnp.float32)
    state = jax.eval_shape(lambda: train_state.TrainState.create(
        apply_fn=model.apply, params=model.init(jax.random.key(0), jnp.ones((B, IN)))["params"], tx=tx))

    def step(state, x):
        return state.apply_gradients(grads=jax.grad(lambda p: state.apply_fn({"params": p}, x))(state.params))

    report = xla_cost.analyze_step(step, state, x, per_layer=True, counter="jaxpr")
    gates = [row for row in report.layers if row.parameters]
    # i* gates: an IN x WIDTH kernel; h* gates: a WIDTH x WIDTH kernel and a bias
    assert sorted(row.parameters for row in gates) == [IN * WIDTH] * 4 + [WIDTH * WIDTH + WIDTH] * 4
    for row in gates:
        assert row.update_flops == per_parameter * row.parameters, row.path
    if per_parameter < 13:  # (Adam's bias corrections are scalars: the remainder's)
        assert {row.path: row for row in report.layers}["(remainder)"].update_flops == 0


# ------------------------------------------------------------------ a combined collective

DEVICES = 8  # tests/conftest.py simulates eight CPU devices
HIDDEN = 4


def _data_parallel(params, x):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean(jnp.tanh(x @ p["w1"]) @ p["w2"]))(params)
    with jax.named_scope("metrics"):
        loss = lax.pmean(loss, "data")
    with jax.named_scope("sync"):
        grads = lax.pmean(grads, "data")
    # the loss returned first: XLA's combiner merges the three all-reduces into one and names the
    # loss's first, "(metrics/psum:sync/psum:sync/psum)"
    return loss, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def _analyze_data_parallel(check_vma: bool) -> xla_cost.Report:
    mesh = Mesh(np.array(jax.devices()[:DEVICES]), ("data",))
    step = jax.jit(jax.shard_map(_data_parallel, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec("data")),
                                 out_specs=(PartitionSpec(), PartitionSpec()), check_vma=check_vma))
    params = {"w1": jax.ShapeDtypeStruct((IN, HIDDEN), jnp.float32),
              "w2": jax.ShapeDtypeStruct((HIDDEN, 1), jnp.float32)}
    return xla_cost.analyze_step(step, params, jax.ShapeDtypeStruct((DEVICES * B, IN), jnp.float32))


def test_a_combined_all_reduce_goes_to_the_part_most_of_it_is_in():
    # check_vma=False: lax.pmean is a psum, and the gradients of the replicated parameters are
    # the device's own until the pmean sums them
    report = _analyze_data_parallel(check_vma=False)
    assert report.devices == DEVICES
    rows = {p: [(c.kind, c.axes, c.bytes) for c in report.phases[p].communication] for p in report.phase_names}
    # both gradients (IN * HIDDEN + HIDDEN float32) and the loss (one float32), in one all-reduce: the update's
    assert rows["update"] == [("all-reduce", ("data",), 4 * (IN * HIDDEN + HIDDEN + 1))]  # 148
    assert rows["other"] == rows["forward"] == rows["backward"] == []
    # per device: the gradients' psum (one add per element, XLA's convention), / DEVICES, * 0.1, p -
    assert report.phases["update"].flops == 4 * (IN * HIDDEN + HIDDEN)
    assert report.phases["other"].flops == 2  # the loss's psum and / DEVICES


def test_shard_maps_default_psum_invariant_is_counted_and_filed_like_a_psum():
    # check_vma=True (shard_map's default): lax.pmean is a psum_invariant, and autodiff already sums
    # the replicated parameters' gradients over the devices (the transpose of their pvary), so the
    # step's pmean sums them a second time
    plain, report = _analyze_data_parallel(check_vma=False), _analyze_data_parallel(check_vma=True)
    assert report.unsupported == {}
    gradients = IN * HIDDEN + HIDDEN  # 36 float32
    # backward: the step without the check's, plus autodiff's all-reduce, one add per element
    assert report.phases["backward"].flops == plain.phases["backward"].flops + gradients
    assert report.phases["update"].flops == 4 * gradients  # the pmean's psum, / DEVICES, * 0.1, p -
    assert report.phases["other"].flops == 2  # the loss's psum and / DEVICES
    rows = {p: [c.bytes for c in report.phases[p].communication] for p in ("forward", "backward", "update", "other")}
    # every byte all-reduced: the loss, the gradients by autodiff and the gradients again by the pmean
    assert sum(sum(b) for b in rows.values()) == 4 * (1 + 2 * gradients)  # 292
    # XLA combines the loss's all-reduce with one of autodiff's (w1's 32 elements): as many members
    # of each part, the gradient's the more work, so backward's
    assert rows["backward"] == [4 * (1 + IN * HIDDEN)] and rows["other"] == rows["forward"] == []


def test_a_combined_collective_is_the_part_most_of_its_members_are_in_either_way():
    # the counted step above: the loss's psum (one element) and the gradients' (two, one add per element)
    counted = JaxprCount(equations=(
        EqnCount("metrics", "psum", 1, Cost(flops=1), part="other"),
        EqnCount("sync", "psum", 2, Cost(flops=IN * HIDDEN + HIDDEN), part="update"),
    ), unsupported={}, loops=(), notes=())
    for op_name, part in (("jit(step)/shard_map/(metrics/psum:sync/psum:sync/psum)", "update"),
                          ("jit(step)/shard_map/(sync/psum:metrics/psum:metrics/psum)", "other")):
        assert [p for p in ("forward", "backward", "update", "other") if _selector(p, counted)(op_name)] == [part]


ROWS = DEVICES * B  # each device's rows of a psum_scatter: DEVICES slices of B


def _scattered(params, x):
    # each device's products summed over the group, each keeping its B rows (a reduce_scatter)
    value, grads = jax.value_and_grad(lambda p: jnp.sum(lax.psum_scatter(x @ p["w"], "data", tiled=True)))(params)
    return value, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def test_a_psum_scatter_is_counted_one_add_per_element_kept_and_its_phases_are_known():
    # lax.psum_scatter (the primitive reduce_scatter) had no rule: forward, backward and grad were unknown
    mesh = Mesh(np.array(jax.devices()[:DEVICES]), ("data",))
    step = jax.jit(jax.shard_map(_scattered, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec("data")),
                                 out_specs=(PartitionSpec(), PartitionSpec()), check_vma=False))
    report = xla_cost.analyze_step(step, {"w": jax.ShapeDtypeStruct((IN, OUT), jnp.float32)},
                                   jax.ShapeDtypeStruct((DEVICES * ROWS, IN), jnp.float32))
    # the backward's all_gather (the reduce_scatter's transpose) runs too, moving data without arithmetic
    assert report.unsupported == {} and report.collectives == {"reduce_scatter": 1, "all_gather": 1}
    kept = ROWS // DEVICES * OUT  # the elements each device keeps: one add each, as psum's one per element
    # per device: the products, the reduce_scatter, the loss's sum of the kept elements
    assert report.phases["forward"].flops == 2 * ROWS * IN * OUT + kept + (kept - 1)
    # the cotangent all-gathered back (the transpose: no arithmetic), then the weight gradient x^T dy
    assert report.phases["backward"].flops == 2 * ROWS * IN * OUT
    assert report.phases["update"].flops == 2 * IN * OUT  # * 0.1, p -
    step_phase = report.phases["train_step"]
    assert step_phase.jaxpr_flops == 2 * (2 * ROWS * IN * OUT) + 2 * kept - 1 + 2 * IN * OUT
    assert step_phase.xla_flops == step_phase.jaxpr_flops - kept  # XLA's cost analysis counts a reduce-scatter as 0


def _dispatched(params, x, sizes):
    # an expert-parallel dispatch as MaxText writes it: each device's rows sent to the others by a
    # ragged_all_to_all whose sizes are known at run time, multiplied by the expert's weights there
    offsets = jnp.cumsum(sizes) - sizes
    def loss(p):
        moved = lax.ragged_all_to_all(x, jnp.zeros_like(x), offsets, sizes, offsets, sizes, axis_name="data")
        return jnp.sum(moved @ p["w"])
    value, grads = jax.value_and_grad(loss)(params)
    return value, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def test_a_ragged_all_to_all_moves_rows_and_its_step_is_counted_and_listed():
    # lax.ragged_all_to_all had no rule: the forward and backward were unknown, the collective unlisted; it
    # moves data (no arithmetic: XLA's 0 FLOP), as all_to_all does, and the step lists how often it runs
    mesh = Mesh(np.array(jax.devices()[:DEVICES]), ("data",))
    step = jax.jit(jax.shard_map(_dispatched, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec("data"),
                                                                   PartitionSpec("data")),
                                 out_specs=(PartitionSpec(), PartitionSpec()), check_vma=False))
    report = xla_cost.analyze_step(step, {"w": jax.ShapeDtypeStruct((IN, OUT), jnp.float32)},
                                   jax.ShapeDtypeStruct((DEVICES * ROWS, IN), jnp.float32),
                                   jax.ShapeDtypeStruct((DEVICES * DEVICES,), jnp.int32), counter="jaxpr")
    assert report.unsupported == {}
    # per device: the rows moved there, by the weights, summed; the weights' gradient x^T dy (the cotangent
    # is ones: its rows moved back by the transposed ragged_all_to_all, no arithmetic); * 0.1, p -
    assert report.phases["forward"].flops == 2 * ROWS * IN * OUT + (ROWS * OUT - 1)
    assert report.phases["backward"].flops == 2 * ROWS * IN * OUT
    assert report.phases["update"].flops == 2 * IN * OUT
    assert report.collectives == {"ragged_all_to_all": 1}  # the forward's (the batch is not differentiated)


# ------------------------------------------------------------------ a scanned stack's rows

DEPTH = 3


class _Block(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        return nn.Dense(WIDTH, name="proj")(jnp.tanh(nn.Dense(FC, name="fc")(x))), None


class _Stack(nn.Module):
    @nn.compact
    def __call__(self, x):
        blocks = nn.scan(_Block, variable_axes={"params": 0}, split_rngs={"params": True}, length=DEPTH)
        return blocks(name="blocks")(x, None)[0]


def test_each_row_of_a_linen_scan_stack_runs_the_stack_s_length():
    model = _Stack()

    def create():
        params = model.init(jax.random.key(0), jnp.ones((1, WIDTH)))["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.1))

    def step(state, x):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean(state.apply_fn({"params": p}, x) ** 2))(state.params)
        return state.apply_gradients(grads=grads), loss

    report = xla_cost.analyze_step(step, jax.eval_shape(create), jax.ShapeDtypeStruct((B, WIDTH), jnp.float32),
                                   per_layer=True, counter="jaxpr")
    rows = {row.path: row for row in report.layers}
    for path, n_in, n_out in (("blocks/fc", WIDTH, FC), ("blocks/proj", FC, WIDTH)):
        row = rows[path]
        assert row.trip_count == DEPTH, path  # the forward runs DEPTH times; the update of the stack once
        assert row.parameters == DEPTH * (n_in * n_out + n_out), path
        assert row.forward_flops == DEPTH * dense_flops(B, n_in, n_out), path
        assert row.update_flops == 2 * row.parameters, path  # SGD: -lr * g, p + u


CHUNKS, SEQ = 4, 8  # EasyLM's scan_mlp: the MLP run over the sequence in CHUNKS chunks of SEQ / CHUNKS positions
SCAN_COUNTER = 2  # FLOP per iteration of a scan's own counter (docs/conventions.md)


class _ChunkedBlock(nn.Module):
    """A block whose Dense runs in a scan over chunks of the sequence, its residual add outside the scan."""

    @nn.compact
    def __call__(self, x):
        scan = nn.scan(lambda mdl, carry, chunk: (carry, mdl(chunk)), variable_broadcast="params",
                       split_rngs={"params": False}, in_axes=1, out_axes=1, length=CHUNKS)
        _, y = scan(nn.Dense(WIDTH, name="w"), None, x.reshape(B, CHUNKS, SEQ // CHUNKS, WIDTH))
        return x + y.reshape(x.shape)


class _Chunked(nn.Module):
    @nn.compact
    def __call__(self, x):
        return _ChunkedBlock(name="block")(x)


def test_a_rows_runs_are_those_of_most_of_its_work_in_analyze_and_analyze_step_alike():
    # the block's own forward work is its residual add, B x SEQ x WIDTH adds run once, and the scan's counter,
    # SCAN_COUNTER a chunk; its backward part holds only the counter's CHUNKS x 2 (the add's gradient passes
    # through): the block runs once, its Dense CHUNKS times. analyze_step took the most of any part's runs, the
    # backward's loop: x4 (analyze: x1)
    model, x = _Chunked(), jax.ShapeDtypeStruct((B, SEQ, WIDTH), jnp.float32)
    params = jax.eval_shape(model.init, jax.random.key(0), x)["params"]

    def step(params, x):
        grads = jax.grad(lambda p: jnp.mean(model.apply({"params": p}, x) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    whole = xla_cost.analyze(model, x, optimizer="sgd", per_layer=True, counter="jaxpr")
    stepped = xla_cost.analyze_step(step, params, x, per_layer=True, counter="jaxpr")
    for report in (whole, stepped):
        rows = {row.path: row for row in report.layers}
        assert rows["block"].forward_flops == B * SEQ * WIDTH + SCAN_COUNTER * CHUNKS
        assert rows["block"].trip_count == 1
        assert rows["block/w"].trip_count == CHUNKS
        assert rows["block/w"].forward_flops == dense_flops(B * SEQ, WIDTH, WIDTH)


# ------------------------------------------------------------------ the forward analyze's forward program computes

ACTIVATIONS = {"gelu": lambda x: jax.nn.gelu(x, approximate=True), "cube": lambda x: x ** 3, "relu": jax.nn.relu}


class _Activated(nn.Module):
    act: str

    @nn.compact
    def __call__(self, x):
        return nn.Dense(OUT, use_bias=False)(ACTIVATIONS[self.act](nn.Dense(FC, use_bias=False)(x)))


class _TanhCarry(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        return jnp.tanh(nn.Dense(FC, use_bias=False)(x)), None


class _ScannedTanh(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(FC, use_bias=False)(x)
        x, _ = nn.scan(_TanhCarry, variable_axes={"params": 0}, split_rngs={"params": True}, length=4)(
            name="layers")(x, None)
        return nn.Dense(OUT, use_bias=False, name="head")(x)


DEAD_LOSS = 4 * B + B + B + (B - 1) + 1
"""What a step that drops its loss (``jax.grad``) never computes of optax's mean softmax cross-entropy
(`tests.formulas.loss_flops`): the label logit's gather with its fill mode's 4 checks per example, the
logsumexp's + max, - the label logit, and the mean's sum and / B (the log is a transcendental)."""


@pytest.mark.parametrize("returns_loss", [True, False], ids=["value_and_grad", "grad"])
@pytest.mark.parametrize("model", [_Activated("gelu"), _Activated("cube"), _Activated("relu"), _ScannedTanh()],
                         ids=["gelu", "cube", "relu", "scanned"])
def test_a_steps_forward_is_what_analyze_counts_as_the_forward(model, returns_loss):
    # Forward work that no result of the step needs but through the backward pass (x**2 of x**3's derivative
    # 3x**2, computed beside the forward; a scanned layer's residuals, the forward scan's outputs) is the
    # backward's, as analyze's grad - forward counts it: analyze's forward program never computes it. Before, a
    # fourth new user's step said +128 FLOP for x**3 on 4 x 16 activations (one B*FC multiply: x*x of the
    # derivative), +16,384 a block of a GeLU LM, and +256 for this scanned stack (4 layers' 1 - tanh**2 terms).
    # The same whether the step returns its loss or not (jax.grad: kauldron's TrainStep), but for the loss's
    # last reductions (DEAD_LOSS): before, the jax.grad form's forward kept the GeLU's and the cube's x*x
    # (+B*FC) and gave the backward the abs of the softmax's sums (-B) that the dead log had read.
    x = jax.ShapeDtypeStruct((B, IN), jnp.float32)
    y = jax.ShapeDtypeStruct((B,), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.key(0), x)["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.1))

    def step(state, x, y):
        def loss_fn(p):
            return optax.softmax_cross_entropy_with_integer_labels(state.apply_fn({"params": p}, x), y).mean()
        if not returns_loss:
            return state.apply_gradients(grads=jax.grad(loss_fn)(state.params))
        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    analysed = xla_cost.analyze(model, x, optimizer=optax.sgd(0.1), counter="jaxpr", per_layer=True)
    stepped = xla_cost.analyze_step(step, state, x, y, counter="jaxpr", per_layer=True)
    dead = 0 if returns_loss else DEAD_LOSS
    assert stepped.phases["forward"].jaxpr_flops == analysed.phases["forward"].jaxpr_flops - dead
    assert stepped.phases["backward"].jaxpr_flops == analysed.phases["backward"].jaxpr_flops
    rows = {r.path: (r.forward_flops - (dead if r.path == "(remainder)" else 0), r.backward_flops)
            for r in analysed.layers}  # (the loss is no module's)
    assert {r.path: (r.forward_flops, r.backward_flops) for r in stepped.layers} == rows


def test_a_step_whose_loss_is_dead_keeps_its_forward():
    # jax.grad drops the loss: the forward's last values are read by the backward pass alone, and the dead
    # loss (in the jaxpr before dead-code elimination) still needs them: the last Dense stays the forward's
    model = _Activated("relu")
    x = jax.ShapeDtypeStruct((B, IN), jnp.float32)
    params = jax.eval_shape(model.init, jax.random.key(0), x)["params"]

    def step(params, x):
        grads = jax.grad(lambda p: jnp.sum(model.apply({"params": p}, x) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    stepped = xla_cost.analyze_step(step, params, x, counter="jaxpr", per_layer=True)
    rows = {r.path: r.forward_flops for r in stepped.layers}
    # the last Dense is Dense_0 (`nn.Dense(OUT)` is made before its argument's `nn.Dense(FC)`): its matmul
    assert rows["Dense_0"] == 2 * B * FC * OUT
    assert rows["Dense_1"] == 2 * B * IN * FC


def test_a_step_that_makes_its_parameters_inside_itself_has_a_row_per_module_of_its_name_stacks():
    """purejaxrl's train(rng) calls network.init inside the jit: no parameter is in the arguments, so the
    rows came from none and every module's work was in the (remainder) (before: one row, (remainder),
    forward 2*N*in*h + N*h + 2*N*h*o + N*o + the loss). The rows are the modules the passes' name stacks
    name, the class name kept, each with its parameters unknown (None), not 0."""
    n, d_in, h, o = 8, 4, 5, 3

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            normal = nn.initializers.normal(0.1)  # (a zero bias made in the step is an add XLA folds away)
            x = jnp.tanh(nn.Dense(h, bias_init=normal)(x))
            return nn.Dense(o, bias_init=normal)(x)

    model = MLP()

    def train(rng, x):
        params = model.init(rng, x)
        loss, grads = jax.value_and_grad(lambda p: jnp.mean(model.apply(p, x) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss

    report = xla_cost.analyze_step(train, jax.random.PRNGKey(0), jax.ShapeDtypeStruct((n, d_in), jnp.float32),
                                   per_layer=True, counter="jaxpr")
    rows = {row.path: row for row in report.layers}
    assert list(rows) == ["MLP/Dense_0", "MLP", "MLP/Dense_1", "(remainder)"]
    assert rows["MLP/Dense_0"].forward_flops == dense_flops(n, d_in, h)
    assert rows["MLP/Dense_1"].forward_flops == dense_flops(n, h, o)
    # backward: the kernel's gradient 2*N*in*out, the bias's a sum over the N rows ((N-1)*out adds), and the
    # input's gradient 2*N*in*out where the input is an activation (not the first layer's x)
    assert rows["MLP/Dense_0"].backward_flops == 2 * n * d_in * h + (n - 1) * h
    assert rows["MLP/Dense_1"].backward_flops == 2 * 2 * n * h * o + (n - 1) * o
    assert rows["MLP"].forward.transcendentals == n * h  # the tanh between the layers, in their parent
    # the remainder's forward is the loss alone: the square (N*o), the sum (N*o - 1 adds), the mean's division (1)
    assert rows["(remainder)"].forward_flops == n * o + (n * o - 1) + 1
    assert all(row.parameters is None for path, row in rows.items() if path != "(remainder)")
    [shown] = [line for line in str(report).splitlines() if "MLP/Dense_0" in line]  # the layer table's row
    assert "unknown" in shown
    [note] = [x for x in report.notes if x.startswith("no parameters found in the arguments")]
    assert "name stacks" in note and "parameters unknown" in note
    assert not [x for x in report.notes if "match no row's module" in x]


# ------------------------------------------- a log-sum-exp in a fori_loop over checkpointed chunks

TOKENS, HIDDEN, VOCAB = 8, 4, 16


def _chunked_logps(logits, targets):
    """EasyDeL's DPO ``_compute_token_logps_chunked`` (one chunk): the running max and the running
    sum of exps, each a ``fori_loop`` over a ``jax.checkpoint``-ed chunk."""
    def max_step(running):
        return jnp.maximum(running, jnp.max(logits, axis=-1))

    def sum_step(running):
        return running + jnp.sum(jnp.exp(logits - top[..., None]), axis=-1)

    max_step, sum_step = jax.checkpoint(max_step, prevent_cse=False), jax.checkpoint(sum_step, prevent_cse=False)
    top = lax.fori_loop(0, 1, lambda i, m: max_step(m), jnp.full(logits.shape[:-1], -jnp.inf))
    total = lax.fori_loop(0, 1, lambda i, s: sum_step(s), jnp.zeros_like(top))
    return jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0] - (jnp.log(total) + top)


def test_a_frozen_references_chunked_log_sum_exp_is_other_and_the_policys_forward():
    # DPO: the reference's log-probs (outside the gradient, read by the loss as a constant) and the
    # policy's both computed by the chunked log-sum-exp. The reference's loops made no new state: other,
    # not the update; the policy's exps, which jax hoists out of its differentiated loop, stay forward
    tx = optax.adam(1e-3)

    def logps(w, x, y):
        return _chunked_logps(x @ w["head"], y).sum()

    def step(params, opt_state, ref_params, x, y):
        ref = lax.stop_gradient(logps(ref_params, x, y))
        loss, g = jax.value_and_grad(lambda p: -jax.nn.log_sigmoid(0.1 * (logps(p, x, y) - ref)))(params)
        u, opt_state = tx.update(g, opt_state, params)
        return optax.apply_updates(params, u), opt_state, loss

    params = {"head": jax.ShapeDtypeStruct((HIDDEN, VOCAB), jnp.float32)}
    report = xla_cost.analyze_step(step, params, jax.eval_shape(tx.init, params), params,
                                   jax.ShapeDtypeStruct((TOKENS, HIDDEN), jnp.float32),
                                   jax.ShapeDtypeStruct((TOKENS,), jnp.int32), counter="jaxpr")
    logits = TOKENS * VOCAB
    # Adam: a sqrt per parameter, and its two bias corrections' b1**t and b2**t
    assert report.phases["update"].transcendentals == HIDDEN * VOCAB + 2
    # an exp per logit, a log per token, and log_sigmoid's exp and log1p
    assert report.phases["forward"].transcendentals == logits + TOKENS + 2
    assert report.phases["other"].transcendentals == logits + TOKENS  # the reference's own


# ------------------------------------------------------------------ a privatizer's noise

PAST = 3  # the past noises a BandMF-like privatizer keeps


def _private_step(buffered: bool):
    """Plain gradients, Gaussian noise drawn from a key kept in the state and added to them, then SGD
    (jax_privacy's gaussian_privatizer); ``buffered``: the noise first solved against the past noises
    the state keeps, and written into that buffer (its matrix_factorization_privatizer, BandMF)."""
    tx = optax.sgd(0.1)

    def step(params, opt_state, noise_state, x):
        key, buffer, position = noise_state
        key, sub = jax.random.split(key)
        noise = jax.random.normal(sub, (IN, OUT))
        if buffered:
            noise = noise - jnp.tensordot(jnp.array([0.5, 0.25, 0.125]), buffer, 1)
            buffer = jnp.concatenate([noise[None], buffer[:-1]])
        grads = {"w": _grad(params, x)["w"] + noise}
        updates, opt_state = tx.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, (key, buffer, position + 1)

    params = {"w": jax.ShapeDtypeStruct((IN, OUT), jnp.float32)}
    noise_state = (jax.eval_shape(lambda: jax.random.key(0)), jax.ShapeDtypeStruct((PAST, IN, OUT), jnp.float32),
                   jax.ShapeDtypeStruct((), jnp.int32))
    return xla_cost.analyze_step(step, params, jax.eval_shape(tx.init, params), noise_state,
                                 jax.ShapeDtypeStruct((B, IN), jnp.float32), counter="jaxpr")


def test_a_privatizers_noise_is_the_update_whether_or_not_its_state_keeps_it():
    # the noise reads no gradient but makes the new parameters, and the buffer it is written into is the
    # privatizer's new state: both are update work, the key's split for it too. The buffer's position + 1,
    # which nothing the update reads comes from, stays other (as TrainState.step + 1): 1 FLOP
    plain, buffered = _private_step(False), _private_step(True)
    assert plain.phases["other"].flops == buffered.phases["other"].flops == 1
    # the noise solved against the buffer: PAST multiply-adds (2 FLOP each) and a subtract per parameter
    assert buffered.phases["update"].flops - plain.phases["update"].flops == 2 * PAST * N + N
    assert buffered.phases["update"].transcendentals == plain.phases["update"].transcendentals > 0  # the same draws


# ------------------------------------------- a gradient taken inside the optimizer's update (SAM)

RHO, ASCENTS = 0.05, 3


class _Relu(nn.Module):
    @nn.compact
    def __call__(self, x):
        hidden = nn.relu(nn.Dense(FC)(x))  # Dense_0, then Dense_1
        return nn.Dense(OUT)(hidden)


def _plain_forward() -> int:
    # Dense_0 (IN -> FC, bias), its ReLU (a max per element), Dense_1 (FC -> OUT, bias), the mean cross-entropy
    return dense_flops(B, IN, FC) + B * FC + dense_flops(B, FC, OUT) + loss_flops(B, OUT)


def _plain_backward() -> int:
    # Dense_0 makes no input gradient (first layer); the ReLU's mask and select; Dense_1; the loss's gradient
    return (dense_backward_flops(B, IN, FC, first=True) + relu_backward_flops(B * FC)
            + dense_backward_flops(B, FC, OUT) + loss_backward_flops(B, OUT))


def _sam_steps():
    model = _Relu()

    def loss(p, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply({"params": p}, x), y).mean()

    def sam(opaque):
        # optax's examples/contrib/sam.ipynb, cells 13 (transparent) and 29 (opaque): the opaque optimizer
        # is given grad_fn and calls it in its update, at the perturbed parameters
        tx = optax.contrib.sam(optax.sgd(0.1), optax.chain(optax.contrib.normalize(), optax.sgd(RHO)),
                               sync_period=2, opaque_mode=opaque)

        def step(params, opt_state, x, y):
            value, grads = jax.value_and_grad(loss)(params, x, y)
            extra = {"grad_fn": jax.grad(lambda p, _: loss(p, x, y))} if opaque else {}
            updates, opt_state = tx.update(grads, opt_state, params, **extra)
            return optax.apply_updates(params, updates), opt_state, value

        return step, tx

    def ascent(params, opt_state, x, y):
        # ASCENTS more gradients in a fori_loop, each at the parameters moved along the one before
        value, grads = jax.value_and_grad(loss)(params, x, y)
        grads = lax.fori_loop(0, ASCENTS, lambda i, g: jax.grad(loss)(
            jax.tree.map(lambda p, d: p + RHO * d, params, g), x, y), grads)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), opt_state, value

    return {"transparent": sam(False), "opaque": sam(True), "fori_loop": (ascent, optax.sgd(0.1))}


@pytest.mark.parametrize("form, extra, looped", [("transparent", 0, 0), ("opaque", 1, 0),
                                                  ("fori_loop", ASCENTS, ASCENTS)])
def test_a_gradient_taken_inside_the_update_has_its_forward_and_backward(form, extra, looped):
    # SAM's opaque mode calls the grad_fn it is given in the optimizer's update: a second gradient, whose forward
    # was the backward's (its loss is dead, jax.grad; no result reads its forward but through its backward pass):
    # optax's own example (P = 2,762, batch 8) said forward 44,392 and backward 154,364 = 54,998 + 44,392 +
    # 54,974, backward/forward 3.48, for 2 x 44,392 and 2 x 54,998 (~1.24). Each extra gradient is one forward
    # of the loss as jax.grad computes it (its last reductions dead: DEAD_LOSS) and one whole backward pass.
    # The transparent form takes one gradient per step (it alternates ascent and descent steps in its state).
    step, tx = _sam_steps()[form]
    x, y = jax.ShapeDtypeStruct((B, IN), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.int32)
    params = jax.eval_shape(_Relu().init, jax.random.key(0), x)["params"]
    report = xla_cost.analyze_step(step, params, jax.eval_shape(tx.init, params), x, y, counter="jaxpr",
                                   per_layer=True)
    assert report.phases["forward"].flops == _plain_forward() + extra * (_plain_forward() - DEAD_LOSS)
    assert report.phases["backward"].flops == (1 + extra) * _plain_backward()
    rows = {r.path: (r.forward_flops, r.backward_flops) for r in report.layers}
    assert rows["Dense_0"] == ((1 + extra) * dense_flops(B, IN, FC),
                               (1 + extra) * dense_backward_flops(B, IN, FC, first=True))
    assert rows["Dense_1"] == ((1 + extra) * dense_flops(B, FC, OUT), (1 + extra) * dense_backward_flops(B, FC, OUT))
    said = [note for note in report.notes if "gradients, each one forward and one backward pass" in note]
    if not extra:
        assert said == []
        return
    [note] = said
    assert note.startswith(f"the step computes {1 + extra} gradients") and f"hold all {1 + extra}" in note
    assert f"{extra} taken at values the step's update made from an earlier gradient" in note
    assert (f"{looped} in loops, one per iteration" in note) == bool(looped)


# ------------------------------------------- an input perturbed along its gradient (adversarial training)

EPS, ALPHA, PGD_STEPS = 0.03, 0.01, 3


def _adversarial_steps():
    model = _Relu()
    tx = optax.sgd(0.1)

    def loss(p, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply({"params": p}, x), y).mean()

    def train(params, opt_state, x_adv, y):
        value, grads = jax.value_and_grad(loss)(params, x_adv, y)
        updates, opt_state = tx.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, value

    def fgsm(params, opt_state, x, y):  # Goodfellow et al. 2015: x + eps * sign(grad_x loss)
        x_adv = x + EPS * jnp.sign(jax.grad(loss, argnums=1)(params, x, y))
        return train(params, opt_state, x_adv, y)

    def fgsm_returned(params, opt_state, x, y):  # the same, the adversarial batch returned to be logged
        x_adv = x + EPS * jnp.sign(jax.grad(loss, argnums=1)(params, x, y))
        return *train(params, opt_state, x_adv, y), x_adv

    def pgd(params, opt_state, x, y):  # Madry et al. 2018: PGD_STEPS signed steps, each clipped to the eps-ball
        def ascend(i, x_adv):
            moved = x_adv + ALPHA * jnp.sign(jax.grad(loss, argnums=1)(params, x_adv, y))
            return jnp.clip(moved, x - EPS, x + EPS)

        return train(params, opt_state, lax.fori_loop(0, PGD_STEPS, ascend, x), y)

    return tx, {"fgsm": fgsm, "fgsm_returned": fgsm_returned, "pgd": pgd}


@pytest.mark.parametrize("form, perturbation, attack", [
    ("fgsm", 3 * B * IN, 1),  # sign, multiply by eps, add: one each per input element; one gradient of the input
    ("fgsm_returned", 3 * B * IN, 1),
    # per step: sign, multiply by alpha, add, x - eps and x + eps, the clip's max and min (7 per element);
    # the fori_loop's scan counter: an add and a compare per iteration
    ("pgd", PGD_STEPS * (7 * B * IN + 2), PGD_STEPS),
])
def test_an_input_perturbed_along_its_gradient_is_other_not_the_update_nor_a_parameter(form, perturbation, attack):
    # the adversarial batch is made from a gradient (of the input) and from no parameter, and a gradient's
    # passes read it: no optimizer's work. The update is SGD's alone, -lr * g and p + u: 2 FLOP per parameter,
    # and the batch, even returned beside the new state, is no parameter (its new value is read by the passes)
    tx, steps = _adversarial_steps()
    x, y = jax.ShapeDtypeStruct((B, IN), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.int32)
    params = jax.eval_shape(_Relu().init, jax.random.key(0), x)["params"]
    report = xla_cost.analyze_step(steps[form], params, jax.eval_shape(tx.init, params), x, y, counter="jaxpr")
    parameters = IN * FC + FC + FC * OUT + OUT  # Dense_0 and Dense_1, kernels and biases
    assert report.parameters == parameters
    assert report.phases["update"].flops == 2 * parameters
    assert report.phases["other"].flops == perturbation
    [note] = [n for n in report.notes if "gradients, each one forward and one backward pass" in n]
    assert note.startswith(f"the step computes {attack + 1} gradients")  # the attack's and the training's
    assert "1 taken at inputs perturbed along an earlier gradient" in note
    assert (f"{attack} in loops" in note) == (form == "pgd")
    assert "update made" not in note and "step checker: other holds" not in " ".join(report.notes)


# ------------------------------------------- an optimizer's update run again for a metric

def test_an_update_run_again_for_its_norm_is_other_even_inside_multisteps_cond():
    # octo's finetune.py calls state.tx.update once for an update_norm metric and once in apply_gradients. With
    # plain Adam the copy was other; with optax.MultiSteps (its update a lax.cond) the copy's cond was the update's:
    # update x1.9. The update the step applies is the same with or without the metric's copy
    tx = optax.MultiSteps(optax.adam(1e-3), 4)
    model = _Relu()

    def make(logged):
        def step(params, opt_state, x, y):
            loss, grads = jax.value_and_grad(lambda p: optax.softmax_cross_entropy_with_integer_labels(
                model.apply({"params": p}, x), y).mean())(params)
            info = {"loss": loss}
            if logged:
                info["update_norm"] = optax.tree.norm(tx.update(grads, opt_state, params)[0])
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, info
        return step

    x, y = jax.ShapeDtypeStruct((B, IN), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.key(0), x)["params"]
    state = jax.eval_shape(tx.init, params)
    plain, logged = (xla_cost.analyze_step(make(m), params, state, x, y, counter="jaxpr") for m in (False, True))
    assert logged.phases["update"].flops == plain.phases["update"].flops
    n = IN * FC + FC + FC * OUT + OUT
    # the copy's Adam arithmetic (no more than the applied update's) and the norm's square and add per parameter
    extra = logged.phases["other"].flops - plain.phases["other"].flops
    assert 2 * n < extra <= plain.phases["update"].flops + 2 * n
