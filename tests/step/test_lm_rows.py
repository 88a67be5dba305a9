"""Per-layer rows of language models as 2025-2026 repositories write them (issue 50).

The work of any method of a module is that module's: a tied LM head computed by
a method of the embedding module (``nn.Embed.attend``, ``nnx.Embed.attend``, the
repository's own ``Embedder.decode``), called by its parent, by a module it is
shared with, or by the training step itself, is in the embedding's row. And the
rows match the parameters to the name stacks whatever the state holds them in:
a TrainState whose ``params`` is ``model.init``'s whole ``{'params': ...}``
(nested, or with another collection beside it), NNX objects, an NNX state the
step merges itself. The models and their closed forms are in `tests.lm_models`;
every expected number is derived there from the dimensions.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx
from flax.training import train_state

import xla_cost
from tests import lm_models as L
from tests.repo_steps import integer_cross_entropy_flops
from xla_cost.count.attribution import unmatched_stacks
from xla_cost.count.interpret import EqnCount
from xla_cost.count.registry import Cost

CFG = L.CONFIG
TOKENS = jax.ShapeDtypeStruct((CFG.batch, CFG.seq), jnp.int32)
BLOCK_ROWS = ("pre_attention_norm", "attn", "attn/q", "attn/k", "attn/v", "attn/o", "pre_ffw_norm", "mlp", "mlp/gate",
              "mlp/up", "mlp/down")
"""A block's rows below it: its norms, attention and feed-forward, each projection."""


def _blocks(style: str) -> list[str]:
    """The blocks' paths: Linen names a list made in setup() ``blocks_0``, NNX's
    nnx.List is ``blocks/0``."""
    return [f"blocks_{i}" if style == "linen" else f"blocks/{i}" for i in range(CFG.layers)]


def _check_rows(report: xla_cost.Report, style: str, head: str) -> None:
    """Exact rows: the embedding's (its lookup and the tied head), each block's and its
    modules', the final norm's and the remainder, which holds the loss alone."""
    rows = {row.path: row for row in report.layers}
    blocks = _blocks(style)
    assert set(rows) == {"embedder", "final_norm", xla_cost.REMAINDER, *blocks,
                         *(f"{b}/{name}" for b in blocks for name in BLOCK_ROWS)}
    # the lookup of B*T tokens + the tied head's 2*B*T*d*V (= 65,536 here)
    assert rows["embedder"].forward_flops == L.embedding_forward_flops(CFG, head)
    assert rows["embedder"].parameters == CFG.vocab * CFG.d_model
    assert L.embedding_forward_flops(CFG, head) > L.head_flops(CFG) == 2 * CFG.batch * CFG.seq * CFG.d_model * CFG.vocab
    n = CFG.batch * CFG.seq
    for block in blocks:
        for name, flops in L.block_matmul_flops(CFG).items():
            if name != "attn":  # bias-free projections: their matmul alone
                assert rows[f"{block}/{name}"].forward_flops == flops, (block, name)
        # the scores and values products, with the softmax beside them
        assert rows[f"{block}/attn"].forward_flops > L.block_matmul_flops(CFG)["attn"]
        assert rows[block].forward_flops == 2 * n * CFG.d_model  # its two residual adds
    # mean next-token cross-entropy over B*T tokens of V logits: nothing of the model
    assert rows[xla_cost.REMAINDER].forward_flops == integer_cross_entropy_flops(n, CFG.vocab)
    forward = report.phases["forward"].jaxpr_flops
    covered = sum(row.forward_flops for path, row in rows.items() if path != xla_cost.REMAINDER)
    assert covered / forward >= 0.99
    assert covered == forward - integer_cross_entropy_flops(n, CFG.vocab)
    assert sum(row.parameters for row in report.layers) == L.lm_parameters(CFG)
    assert not [note for note in report.notes if "match no row's module" in note or "matches no row's module" in note]


def _analyze(model) -> xla_cost.Report:
    return xla_cost.analyze(model, TOKENS, targets=TOKENS, loss=L.lm_loss, optimizer="sgd", per_layer=True,
                            counter="jaxpr")


def _step(step, *args) -> xla_cost.Report:
    return xla_cost.analyze_step(step, *args, per_layer=True, counter="jaxpr")


# ---------------------------------------------------------------- a tied head through a method


@pytest.mark.parametrize("head", ["attend", "shared"])
def test_linen_tied_head_is_the_embeddings_row(head):
    """nn.Embed.attend called by the parent, and the Embedder's own decode called by a head
    module the embedder is handed (outside the module that owns it): both in ``embedder``."""
    _check_rows(_analyze(L.LinenLM(CFG, head)), "linen", "attend" if head == "attend" else "decode")


@pytest.mark.parametrize("head", ["attend", "decode"])
def test_nnx_tied_head_is_the_embeddings_row(head):
    """nnx.Embed.attend and a user's NnxEmbedder.decode (and encode): NNX scopes every method
    of a module, not only __call__ (the head was in the remainder: rows 84% of the forward)."""
    _check_rows(_analyze(L.nnx_model(CFG, head)), "nnx", head)


@pytest.mark.parametrize(("step", "head"), [(L.nnx_train_step, "attend"), (L.nnx_outside_step, "decode")])
def test_nnx_step_with_its_optimizer_has_the_rows(step, head):
    """The model's own nnx.jit step with an nnx.Optimizer, and one that calls
    ``model.embedder.decode(model.hidden(x))`` itself: the copies nnx.value_and_grad
    makes know their modules' paths (the outside step had every block in the remainder)."""
    report = _step(step, L.nnx_model(CFG, head), L.nnx_optimizer(CFG, head), L.batch_of(CFG))
    _check_rows(report, "nnx", head)
    rows = {row.path: row for row in report.layers}
    assert all(rows[f"{b}/attn/q"].update_flops > 0 for b in _blocks("nnx"))  # Adam's arithmetic is each layer's


def test_nnx_state_the_step_merges_itself_has_the_rows():
    """Flax's performance guide: a plain jax.jit of ``nnx.split((model, optimizer))``'s state,
    merged inside the step. Its parameters' paths start with the model's position (``0/``),
    which the name stacks do not carry (was: no module matched, rows 0% of the forward)."""
    graphdef, state = L.nnx_split_state(CFG, "attend")
    _check_rows(_step(L.nnx_state_step, graphdef, state, L.batch_of(CFG)), "nnx", "attend")


def test_nnx_params_state_with_an_optax_optimizer_has_the_rows():
    """``nnx.split(model, nnx.Param, ...)``'s Params as the step's parameters, merged in its
    loss, Adam's moments over them (was: rows 0% of the forward)."""
    report = _step(*L.nnx_functional_step(CFG, "decode"))
    _check_rows(report, "nnx", "decode")
    rows = {row.path: row for row in report.layers}
    assert rows["embedder"].update_flops > 0  # Adam's moments mirror the Params: the layer's update


# ---------------------------------------------------------------- parameters under any prefix


@pytest.mark.parametrize(("nest", "extra", "wrapper"), [(1, False, None), (2, False, None), (1, True, "model")],
                         ids=["params", "params-params", "params-model-and-stats"])
def test_linen_train_state_holding_the_variables_dict(nest, extra, wrapper):
    """``state.params`` is ``model.init``'s ``{'params': ...}`` (``state.params['params']`` the
    tree), nested twice, or with the tree under a key of the user's own (``{'params':
    {'model': ...}}``, a prefix the name stacks do not carry) and another collection beside
    it (not parameters): rows per layer, matched (was: every name stack matched no module,
    rows 0% of the forward)."""
    _, state, batch = L.linen_state(CFG, "attend", nest, extra, wrapper)
    report = _step(L.linen_train_step, state, batch)
    _check_rows(report, "linen", "attend")
    assert report.parameters == L.lm_parameters(CFG)  # the stats collection's d floats are none


class _RematLM(L.LinenLM):
    """Blocks made in setup() as ``nn.remat(Block, policy=nothing_saveable)``, kept in a list."""

    def setup(self):
        self.embedder = nn.Embed(CFG.vocab, CFG.d_model)
        block = nn.remat(L.LinenBlock, policy=jax.checkpoint_policies.nothing_saveable)
        self.blocks = [block(CFG) for _ in range(CFG.layers)]
        self.final_norm = nn.RMSNorm()


def test_remat_blocks_are_one_row_each():
    """A remat'd block's stacks (``transpose(jvp(Net))/jvp(Net)/blocks_0/...`` in the
    recomputing backward pass) give the block's rows once, matched to the parameters of a
    TrainState holding ``{'params': ...}`` (was: 83 stacks matched no module, named with
    the root doubled, ``RematLM/RematLM/blocks_0/...``)."""
    model = _RematLM(CFG)

    def create(rng):
        variables = model.init(rng, jnp.zeros((CFG.batch, CFG.seq), jnp.int32))
        return train_state.TrainState.create(apply_fn=model.apply, params=variables, tx=optax.adamw(1e-3))

    report = _step(L.linen_train_step, jax.eval_shape(create, jax.random.key(0)), L.batch_of(CFG))
    _check_rows(report, "linen", "attend")
    rows = {row.path: row for row in report.layers}
    for block in _blocks("linen"):  # the weight gradient of q (as many FLOP as its forward) is q's
        assert rows[f"{block}/attn/q"].backward_flops >= L.block_matmul_flops(CFG)["attn/q"]


class _RematNnxLM(L.NnxLM):
    """Each block called through ``nnx.remat``: its function gets a copy of the block."""

    def hidden(self, tokens):
        x = self.embedder(tokens)
        for block in self.blocks:
            x = nnx.remat(lambda b, x: b(x), policy=jax.checkpoint_policies.nothing_saveable)(block, x)
        return self.final_norm(x)


def test_nnx_remat_copies_keep_their_rows():
    """Copies of two blocks of one class made by nnx.remat are told apart by their paths
    (was: rows 0.6% of the forward)."""
    _check_rows(_analyze(nnx.eval_shape(lambda: _RematNnxLM(CFG, "attend", rngs=nnx.Rngs(0)))), "nnx", "attend")


def test_unmatched_stacks_name_a_repeated_root_once():
    """The note names a stack the checkpointed backward pass enters twice by its root once."""
    eqns = [EqnCount("transpose(jvp(Net))/jvp(Net)/nowhere/fc", "dot_general", 1, Cost(flops=10))]
    assert unmatched_stacks(eqns, ["head"], root="Net") == {"Net/nowhere/fc": 10}


class _ResidualBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x + nn.Dense(CFG.d_model, name="fc")(nn.relu(nn.Dense(CFG.d_model, name="inp")(x)))


class _RematFunction(nn.Module):
    """``nn.remat`` of a function of the module (``Net.body`` on the name stack)."""

    @nn.compact
    def __call__(self, x):
        x = nn.remat(lambda module, x: _ResidualBlock(name="blocks")(x))(self, x)
        return nn.Dense(CFG.vocab, name="head")(x)


class _RematScan(nn.Module):
    """``nn.remat_scan`` of a block over lengths (2, 2): 4 runs of one stacked block."""

    @nn.compact
    def __call__(self, x):
        x = nn.remat_scan(_ResidualBlock, lengths=(2, 2))(name="blocks")(x)
        return nn.Dense(CFG.vocab, name="head")(x)


@pytest.mark.parametrize(("model", "runs"), [(_RematFunction, 1), (_RematScan, 4)], ids=["remat-function", "remat-scan"])
def test_remat_forms_match_a_train_state_holding_the_variables_dict(model, runs):
    """Remat'd stacks (``Net/Net.<lambda>/blocks/fc``, ``rematted_computation/blocks/fc``
    in the backward pass) are the parameters' rows once, in a TrainState holding
    ``{'params': ...}`` (was: every stack unmatched, named with the root doubled)."""
    module = model()
    x = jax.ShapeDtypeStruct((CFG.batch, CFG.d_model), jnp.float32)
    y = jax.ShapeDtypeStruct((CFG.batch, CFG.vocab), jnp.float32)

    def create(rng):
        return train_state.TrainState.create(apply_fn=module.apply, params=module.init(rng, jnp.zeros(x.shape)),
                                             tx=optax.sgd(0.1))

    def step(state, batch):
        def loss_fn(variables):
            return ((state.apply_fn(variables, batch[0]) - batch[1]) ** 2).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    report = _step(step, jax.eval_shape(create, jax.random.key(0)), (x, y))
    rows = {row.path: row for row in report.layers}
    assert set(rows) == {"blocks", "blocks/inp", "blocks/fc", "head", xla_cost.REMAINDER}
    dense = 2 * CFG.batch * CFG.d_model * CFG.d_model + CFG.batch * CFG.d_model  # matmul and bias, per run
    assert rows["blocks/inp"].forward_flops == rows["blocks/fc"].forward_flops == runs * dense
    assert rows["head"].forward_flops == 2 * CFG.batch * CFG.d_model * CFG.vocab + CFG.batch * CFG.vocab
    # its weight gradient, 2*B*d*d a run, is in its row (the recomputation's accounting is step_parts')
    assert rows["blocks/inp"].backward_flops >= runs * 2 * CFG.batch * CFG.d_model ** 2
    assert not [note for note in report.notes if "match no row's module" in note or "matches no row's module" in note]


# ---------------------------------------------------------------- the optimizer's rows, wherever it runs

_ADAM = 13
"""Adam's FLOP per parameter (tests/step/test_optimizers.py): mu 3, nu 4, two bias corrections 2,
+ eps 1, mu_hat / . 1, -lr 1, p + u 1."""
_IN, _WIDTH, _OUT, _BATCH = 16, 32, 8, 4


class _NnxMlp(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear(_IN, _WIDTH, use_bias=False, rngs=rngs)
        self.fc2 = nnx.Linear(_WIDTH, _OUT, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.fc2(nnx.relu(self.fc1(x)))


def _batch():
    return jax.ShapeDtypeStruct((_BATCH, _IN), jnp.float32), jax.ShapeDtypeStruct((_BATCH,), jnp.int32)


def _adam_state(model, x):
    """A Linen model's TrainState with Adam, abstract."""
    return jax.eval_shape(lambda: train_state.TrainState.create(
        apply_fn=model.apply, params=model.init(jax.random.key(0), jnp.zeros(x.shape)), tx=optax.adam(1e-3)))


def _cross_entropy_step(state, x, y):
    def loss(p):
        return optax.softmax_cross_entropy_with_integer_labels(state.apply_fn(p, x), y).mean()
    value, grads = jax.value_and_grad(loss)(state.params)
    return state.apply_gradients(grads=grads), value


def _update_rows(report) -> dict[str, int]:
    return {row.path: row.update_flops for row in report.layers}


def test_the_update_of_nnx_layers_under_to_linen_is_theirs():
    """A Linen model holding an NNX block through ``nnx.bridge.ToLinen`` (MaxText's Linen path), a
    TrainState step: each Linear's Adam update is its row's (was: fc2 3 FLOP a parameter, the rest in
    ``layers_0`` (0 parameters) and the remainder)."""
    from flax.nnx import bridge

    class Top(nn.Module):
        @nn.compact
        def __call__(self, x):
            return bridge.ToLinen(_NnxMlp, name="layers_0")(x)

    model, (x, y) = Top(), _batch()
    state = _adam_state(model, x)

    rows = _update_rows(_step(_cross_entropy_step, state, x, y))
    assert rows["layers_0/fc1"] == _ADAM * _IN * _WIDTH
    assert rows["layers_0/fc2"] == _ADAM * _WIDTH * _OUT


def test_an_update_run_by_a_method_of_an_nnx_container_is_each_layers():
    """MaxText's ``TrainStateNNX``: an nnx.Module holding the model and its nnx.Optimizer, whose
    method ``apply_gradients`` updates them (stack ``TrainState``, no module of the model): each
    layer's Adam update is its row's (was: all in the remainder, a note that ``TrainState``
    matches no row's module)."""

    class TrainState(nnx.Module):
        def __init__(self, model, optimizer):
            self.model, self.optimizer = model, optimizer

        def apply_gradients(self, grads):
            self.optimizer.update(self.model, grads)

    def make():
        model = _NnxMlp(nnx.Rngs(0))
        return TrainState(model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param))

    graphdef, state = nnx.split(nnx.eval_shape(make))

    def step(state, x, y):
        merged = nnx.merge(graphdef, state)
        value, grads = nnx.value_and_grad(
            lambda m: optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean())(merged.model)
        merged.apply_gradients(grads)
        return nnx.state(merged), value

    report = _step(step, state, *_batch())
    rows = _update_rows(report)
    assert rows["model/fc1"] == _ADAM * _IN * _WIDTH
    assert rows["model/fc2"] == _ADAM * _WIDTH * _OUT
    # the step counter (3 FLOP: test_optimizers.STEP) and Adam's bias corrections (2) are the remainder's:
    # the container's class opens the stack as the root's does, no note that it matches no module
    assert rows[xla_cost.REMAINDER] == 3 + 2
    assert not [note for note in report.notes if "row's module" in note]


def test_nnx_layers_scanned_over_a_parameter_axis_after_the_first_get_their_gradients():
    """MaxText's Linen path scans its ToLinen layers with ``variable_axes={"params": 1}``: each
    layer's weight gradient (``_WIDTH x _WIDTH``) is the stacked kernel's slice along axis 1, so it
    is a gradient (was, once the layer's stacks named it: 'parameters that receive no gradient:
    layers/fc/kernel' and 192 of 232 parameters frozen)."""
    from flax.nnx import bridge

    layers = 3

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.fc = nnx.Linear(_WIDTH, _WIDTH, use_bias=False, rngs=rngs)

        def __call__(self, x, _):
            return nnx.relu(self.fc(x)), None

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            stack = nn.scan(bridge.ToLinen, variable_axes={"params": 1}, split_rngs={"params": True}, length=layers)
            x, _ = stack(Block, name="layers")(x, None)
            return nn.Dense(_OUT, use_bias=False, name="head")(x)

    model = Net()
    x, y = jax.ShapeDtypeStruct((_BATCH, _WIDTH), jnp.float32), jax.ShapeDtypeStruct((_BATCH,), jnp.int32)
    state = _adam_state(model, x)

    report = _step(_cross_entropy_step, state, x, y)
    assert not [note for note in report.notes if "receive no gradient" in note or "trained parameters" in note]
    rows = {row.path: row for row in report.layers}
    assert rows["layers/fc"].forward_flops == layers * 2 * _BATCH * _WIDTH * _WIDTH
    assert rows["layers/fc"].update_flops == _ADAM * layers * _WIDTH * _WIDTH
