"""A layer's matrix products computed in the root's own code (a tied head written as
``x @ self.embed.embedding.T`` in ``__call__``) land in the remainder row by design
(name stacks attribute work); a fourth new user's NNX LM put 13% of its forward there
and no note said so. `xla_cost.count.attribution.root_products_note` now does, in
``analyze`` and ``analyze_step``; a head computed by the embedding's method is on its
row and gets no note.

A multiply-add is 2 FLOP.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import nnx
import pytest
from flax.training import train_state

import xla_cost
from xla_cost.count.attribution import ROOT_PRODUCTS_SHARE
from xla_cost.count.param_reads import parameter_reads

V, D, B, T = 64, 16, 2, 8  # vocabulary, width, batch, sequence


class TiedLM(nn.Module):
    method: bool  # the head through the embedding's method (attend), or a matmul in __call__

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(V, D, name="embed")
        x = jnp.tanh(nn.Dense(D, name="mix")(embed(tokens)))
        return embed.attend(x) if self.method else x @ embed.embedding.T


TOKENS = jax.ShapeDtypeStruct((B, T), jnp.int32)
HEAD = 2 * B * T * D * V  # the head's forward products
MIX = 2 * B * T * D * D  # the Dense's


def _step(model):
    params = jax.eval_shape(model.init, jax.random.key(0), TOKENS)["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.1))

    def step(state, tokens):
        def loss_fn(p):
            logits = state.apply_fn({"params": p}, tokens)
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens).mean()
        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    return step, state


@pytest.mark.parametrize("method", [False, True], ids=["matmul in the root", "embed.attend"])
def test_a_head_computed_in_the_root_is_named(method):
    model = TiedLM(method)
    analysed = xla_cost.analyze(model, TOKENS, optimizer="sgd", counter="jaxpr", per_layer=True, loss=lambda o, t:
                                optax.softmax_cross_entropy_with_integer_labels(o, t).mean(), targets=TOKENS)
    step, state = _step(model)
    stepped = xla_cost.analyze_step(step, state, TOKENS, counter="jaxpr", per_layer=True)
    assert HEAD / (HEAD + MIX) > ROOT_PRODUCTS_SHARE  # the head is most of the products here
    for report in (analysed, stepped):
        rows = {r.path: r.forward_flops for r in report.layers}
        said = [n for n in report.notes if "computed outside every module" in n]
        if method:
            assert not said
            assert rows["embed"] >= HEAD  # the head on the embedding's row (with its gather)
        else:
            [note] = said
            assert f"{HEAD:,} FLOP of the forward's matrix products" in note
            assert rows[xla_cost.REMAINDER] >= HEAD


class NarrowBlock(nn.Module):
    """LayerNorm, a GeLU MLP and a residual at width 4: XLA's fusions duplicate the cheap producers of the
    LayerNorm's and the GeLU's backward passes in every fusion that reads them (measured, jax 0.10.2: the grad
    program +7.0% over the jaxpr at width 4, +4.1% at 8, +1.2% at 32)."""

    @nn.compact
    def __call__(self, x):
        for i in range(3):
            h = nn.LayerNorm(name=f"ln{i}")(x)
            x = x + nn.Dense(4, name=f"out{i}")(nn.gelu(nn.Dense(16, name=f"fc{i}")(h)))
        return nn.Dense(4, name="head")(x)


def test_a_gap_between_xla_and_the_jaxpr_is_explained():
    # a fourth new user's ViT of width 32: backward XLA 3.28 M against the jaxpr's 2.83 M (+16%) and no note,
    # where analyze_step's note explained it. XLA's count of a narrow LayerNorm/GeLU stack is above the jaxpr's
    report = xla_cost.analyze(NarrowBlock(), jax.ShapeDtypeStruct((4, 4), jnp.float32), optimizer="sgd",
                              compilation_cache=False)
    for phase in ("forward", "grad", "update"):
        costs = report.phases[phase]
        gap = (costs.flops - costs.jaxpr_flops) / costs.jaxpr_flops
        said = [n for n in report.notes if n.startswith(f"{phase}: XLA's flops (") and "from the jaxpr count" in n]
        assert bool(said) == (abs(gap) > 0.05), (phase, gap, said)
    assert any(n.startswith("grad: XLA's flops (") for n in report.notes)  # this stack's grad is over the line


def test_xla_below_the_jaxpr_is_said_to_be_xlas_simplification_not_duplication():
    # a sixth new user's Adafactor update: XLA 5.6% below the jaxpr count, and the note blamed fusions
    # counting copies, which only adds
    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(10)(nn.relu(nn.Dense(128)(x)))

    report = xla_cost.analyze(MLP(), jax.ShapeDtypeStruct((4, 64), jnp.float32), optimizer=optax.adafactor(1e-3),
                              compilation_cache=False)
    update = report.phases["update"]
    assert update.flops < 0.95 * update.jaxpr_flops
    [said] = [n for n in report.notes if n.startswith("update: XLA's flops (")]
    assert "simplification" in said and "count every copy" not in said


def test_a_bfloat16_models_gap_on_the_cpu_is_said_to_be_its_emulation():
    # a tunix user's Gemma with bfloat16 parameters: Adam's update on the CPU counted 3x the jaxpr's (XLA's CPU
    # compiler emulates bfloat16 arithmetic in float32, a convert around each operation, counted as FLOP), and
    # the note blamed fusions duplicating cheap producers
    model = nn.Dense(64, param_dtype=jnp.bfloat16, dtype=jnp.bfloat16)
    report = xla_cost.analyze(model, jax.ShapeDtypeStruct((8, 64), jnp.bfloat16), optimizer="adam",
                              compilation_cache=False)
    update = report.phases["update"]
    assert update.flops > 1.05 * update.jaxpr_flops
    [note] = [n for n in report.notes if n.startswith("update: XLA's flops (")]
    assert "emulates 16-bit float arithmetic in float32" in note


def _rest_of_the_gap(note: str) -> tuple[int, int, int]:
    """(XLA's count, the parts', the unfused count) as a train_step note gives them."""
    def number(after: str) -> int:
        return int(note.split(after)[1].split(" ")[0].replace(",", ""))
    return number("XLA counts "), number("against the parts' "), number("compiled without fusion XLA counts ")


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_analyze_and_analyze_step_give_one_reason_for_a_bfloat16_steps_gap(dtype):
    # jax-llm-examples' Llama 3 in bfloat16: analyze said the CPU's emulation of bfloat16 in float32, analyze_step
    # "the rest is XLA's own rewriting" for what its compile without fusion still counted above the jaxpr (the
    # same emulation's converts: 339,357 of the prefill's 393,085). One rule (costs.flop_gap_reason) says both.
    # Adam on a bfloat16 Dense(W x W): the step counts above the jaxpr's by more than 2% only in bfloat16
    W = 64
    model = nn.Dense(W, param_dtype=dtype, dtype=dtype)
    x = jax.ShapeDtypeStruct((8, W), dtype)
    tx = optax.adam(1e-3)
    params = jax.eval_shape(model.init, jax.random.key(0), x)

    def step(params, opt_state, x):
        grads = jax.grad(lambda p: jnp.mean(jnp.square(model.apply(p, x).astype(jnp.float32))))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    stepped = xla_cost.analyze_step(step, params, jax.eval_shape(tx.init, params), x)
    notes = [n for n in stepped.notes if n.startswith("train_step: XLA counts")]
    if dtype == jnp.float32:  # no emulation: within 2% of the parts, or, if not, never said to be it
        assert not any("emulates 16-bit" in n for n in notes)
        return
    [note] = notes
    xla_flops, parts, unfused = _rest_of_the_gap(note)
    assert unfused > 1.02 * parts  # the unfused compile keeps most of the gap: not fusions
    assert f"{xla_flops - unfused:,} FLOP are XLA's fusions" in note
    assert f"the rest, {unfused - parts:,} FLOP, is because the CPU's compiler emulates 16-bit float arithmetic " \
           "in float32" in note and "own rewriting" not in note
    analysed = xla_cost.analyze(model, x, optimizer="adam", compilation_cache=False)
    [said] = [n for n in analysed.notes if n.startswith("update: XLA's flops (")]
    assert "the CPU's compiler emulates 16-bit float arithmetic in float32" in said


def test_a_model_computing_in_bfloat16_by_its_own_dtype_is_reported_so():
    # maxdiffusion's UNet: Linen layers with dtype=jnp.bfloat16 on float32 parameters, its last layer float32:
    # the report said float32 (its outputs'), no mixed-precision note, and blamed fusions for the CPU's bf16
    # emulation, where analyze(..., dtype="bfloat16") of the same model explained it. The compute dtype is
    # its products' operands': bfloat16 for the first Dense (8x64 @ 64x64), float32 for the last (8x64 @ 64x10)
    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.gelu(nn.Dense(64, dtype=jnp.bfloat16)(nn.LayerNorm(dtype=jnp.bfloat16)(x)))
            return nn.Dense(10, dtype=jnp.float32)(x)

    report = xla_cost.analyze(Model(), jax.ShapeDtypeStruct((8, 64), jnp.float32), optimizer="sgd",
                              compilation_cache=False)
    assert (report.dtype, report.param_dtype) == ("bfloat16", "float32")
    assert any(n.startswith("mixed precision: parameters float32, computation bfloat16") for n in report.notes)
    forward = report.phases["forward"]
    assert forward.flops > 1.05 * forward.jaxpr_flops
    [note] = [n for n in report.notes if n.startswith("forward: XLA's flops (")]
    assert "emulates 16-bit float arithmetic in float32" in note


def test_a_scan_xla_unrolled_whole_is_held_against_the_jaxpr_and_its_gap_said():
    # recurrentgemma's RG-LRU: lax.scan(..., unroll=128) over 32 steps after a gate chain; XLA unrolls the loop
    # whole (no loop kept: nothing to correct), and each step's fusion holds the chain again at full width,
    # which XLA's analysis counts each time: its forward far above the jaxpr's, where no note said why
    class Recurrence(nn.Module):
        @nn.compact
        def __call__(self, x):
            s = self.param("s", nn.initializers.ones, (x.shape[-1],))[None, None]
            a = jnp.exp(-8.0 * jax.nn.sigmoid(x * s) * jax.nn.softplus(s))
            u = x * jax.nn.sigmoid(x + s) * jnp.sqrt(1 - a * a)

            def body(h, ua):
                h = ua[1] * h + ua[0]
                return h, h

            scan = jax.vmap(lambda h0, xs: jax.lax.scan(body, h0, xs, unroll=128))
            return scan(jnp.zeros_like(u[:, 0]), (u, a))[1]

    x = jax.ShapeDtypeStruct((2, 32, 16), jnp.float32)
    report = xla_cost.analyze(Recurrence(), x, optimizer="sgd", loss=lambda y, t: jnp.sum(y), targets=x,
                              compilation_cache=False)
    forward = report.phases["forward"]
    assert not forward.loop_corrected and forward.flops > 1.05 * forward.jaxpr_flops
    assert any(n.startswith("forward: XLA's flops (") and "from the jaxpr count" in n for n in report.notes)


def test_an_apply_functions_own_scopes_match_no_module_as_in_analyze_step():
    # jax-llm-examples' pure-JAX models: analyze of an apply function over a params pytree took the first entry of
    # every stack that is no top-level parameter key (`qkv`, `ffn`) for a model class's name and stripped it, so
    # their products were "in the root's own code" (49,152 FLOP, 60%) where analyze_step of the same function said
    # scopes of no module. Both now follow `model_roots`: a root opens a top-level module's stack
    def apply(params, x):
        for layer in params["layers"]:
            with jax.named_scope("qkv"):
                x = x @ layer["q"]
            with jax.named_scope("ffn"), jax.named_scope("gate"):
                x = x @ layer["w_in"]
            with jax.named_scope("ffn"):
                x = x @ layer["w_out"]
        return x

    S = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)  # noqa: E731
    layers = 2
    params = {"layers": [{"q": S(D, D), "w_in": S(D, V), "w_out": S(V, D)} for _ in range(layers)]}
    report = xla_cost.analyze(apply, S(B, D), params=params, optimizer="sgd", per_layer=True, counter="jaxpr")
    forward = layers * (2 * B * D * D + 2 * B * D * V + 2 * B * V * D)  # every product is under a scope of no module
    [unmatched] = [n for n in report.notes if "no row's module" in n]
    assert unmatched.startswith("per-layer rows: 3 name stacks match no row's module")
    assert "`qkv`" in unmatched and "`ffn`" in unmatched and "`ffn/gate`" in unmatched
    assert f"{forward:,} FLOP of forward" in unmatched
    assert not [n for n in report.notes if "in the root's own code" in n]



@pytest.mark.parametrize("entry", ["analyze", "analyze_step"])
def test_products_of_code_that_names_no_module_are_not_said_to_be_the_roots_own(entry):
    # google-deepmind/simply: each layer a function of its params dict, under no jax.named_scope; every product
    # (2 * 128 * 164k of 46 MFLOP) is in the remainder row, and the note said "computed outside every module, in
    # the root's own code" of products that read the blocks' Q/K/V/O and FFN weights. It says their code names no
    # module, and whose parameters they read (`xla_cost.count.param_reads.parameter_reads`)
    S = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)  # noqa: E731
    params = {"fc1": {"w": S(D, V), "b": S(V)}, "fc2": {"w": S(V, D)}}

    def apply(params, x):
        return jnp.tanh(x @ params["fc1"]["w"] + params["fc1"]["b"][None]) @ params["fc2"]["w"]

    x = S(B, D)
    if entry == "analyze":
        report = xla_cost.analyze(apply, x, params=params, optimizer="sgd", per_layer=True, counter="jaxpr")
    else:
        def step(params, x):
            grads = jax.grad(lambda p: jnp.mean(apply(p, x) ** 2))(params)
            return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

        report = xla_cost.analyze_step(step, params, x, per_layer=True, counter="jaxpr")
    forward = 2 * B * D * V + 2 * B * V * D  # the two products, both in the remainder
    [note] = [n for n in report.notes if "of the forward's matrix products" in n]
    assert note.startswith(f"per-layer rows: {forward:,} FLOP of the forward's matrix products (100%) are in the "
                           f"{xla_cost.REMAINDER} row")
    assert "read the parameters of 2 module(s) (fc1, fc2)" in note and "jax.named_scope" in note
    assert "root's own code" not in note


# A mixture of experts whose block computes with its experts' weights in its own method (EasyDeL's
# Mixtral passes experts.w1.kernel to its routed product): the products are the block's work (the work
# of any method is its module's), and the experts' rows held parameters, an update and no forward or
# backward work, with no note. `xla_cost.count.attribution.borrowed_note` now names where their work is.
E, N, DM, F, C = 4, 6, 8, 16, 5  # experts, tokens, width, expert width, classes


class _ExpertWeights(nnx.Module):
    def __init__(self, d_in: int, d_out: int, rngs: nnx.Rngs):
        self.kernel = nnx.Param(jax.random.normal(rngs.params(), (E, d_in, d_out)))


class _Experts(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.w1, self.w2 = _ExpertWeights(DM, F, rngs), _ExpertWeights(F, DM, rngs)


class _MoE(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.router = nnx.Linear(DM, E, use_bias=False, rngs=rngs)
        self.experts = _Experts(rngs)

    def __call__(self, x):  # every expert on every token (dense), combined by the router's weights
        h = jnp.einsum("nd,edf->enf", x, self.experts.w1.kernel[...])
        y = jnp.einsum("enf,efd->end", h, self.experts.w2.kernel[...])
        return jnp.einsum("end,ne->nd", y, self.router(x))


class _MoENet(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.moe, self.head = _MoE(rngs), nnx.Linear(DM, C, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.head(self.moe(x))


def test_rows_whose_parameters_another_modules_method_computes_with_are_named():
    x, y = jax.ShapeDtypeStruct((N, DM), jnp.float32), jax.ShapeDtypeStruct((N,), jnp.int32)
    model = nnx.eval_shape(lambda: _MoENet(nnx.Rngs(0)))
    loss = lambda o, t: optax.softmax_cross_entropy_with_integer_labels(o, t).mean()  # noqa: E731
    analysed = xla_cost.analyze(model, x, loss=loss, targets=y, optimizer="sgd", counter="jaxpr", per_layer=True)

    @nnx.jit
    def step(model, optimizer, x, y):
        value, grads = nnx.value_and_grad(lambda m: loss(m(x), y))(model)
        optimizer.update(model, grads)
        return value

    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(_MoENet(nnx.Rngs(0)), optax.sgd(0.1), wrt=nnx.Param))
    stepped = xla_cost.analyze_step(step, model, optimizer, x, y, counter="jaxpr", per_layer=True)
    # the block's own products: x by w1 (2 N DM F per expert), by w2 (2 N F DM per expert), the router's combine
    block = E * 2 * N * DM * F + E * 2 * N * F * DM + 2 * N * E * DM
    for report in (analysed, stepped):
        rows = {r.path: r for r in report.layers}
        assert rows["moe"].forward_flops == block
        assert rows["moe/router"].forward_flops == 2 * N * DM * E  # its own method's product, on its row
        for name, size in (("w1", DM * F), ("w2", F * DM)):
            assert (rows[f"moe/experts/{name}"].parameters, rows[f"moe/experts/{name}"].forward_flops) == (E * size, 0)
        [note] = [n for n in report.notes if "whose method computes them" in n]
        assert "the products of experts/w1, w2's parameters are counted in moe," in note
        assert "router" not in note and "head" not in note


# An embedding lookup is rows of the table: activations. A Dense after nn.Embed reads them with its own kernel,
# yet the lookup (a gather) was followed back to the table as a view of it, and a note said "the products of
# embed's parameters are counted in mix" (a sweep of google/flaxformer's MoE: "counted in moe"). Rows picked
# from a parameter (`xla_cost.count.param_reads.picks_rows`) are no view of it; a slab (an expert's matrix picked
# from the stack) still is, and a product with the table itself (a tied head) still reads it.
class _Dispatch(nn.Module):  # a parametrised block multiplying its input by a data-dependent matrix
    @nn.compact
    def __call__(self, x):
        m = jax.nn.one_hot(jnp.argmax(nn.Dense(E, name="router")(x), -1), E)
        return jnp.einsum("bed,bte->btd", jnp.einsum("btd,bte->bed", x, m), m)


class _EmbedThen(nn.Module):
    then: str

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(V, D, name="embed")(tokens)
        y = nn.Dense(D, name="mix")(x) if self.then == "dense" else _Dispatch(name="block")(x)
        return nn.Dense(V, name="head")(x + y)


@pytest.mark.parametrize("then", ["dense", "dispatch"])
def test_an_embedding_lookup_read_by_another_modules_products_is_no_borrowed_parameter(then):
    report = xla_cost.analyze(_EmbedThen(then), TOKENS, optimizer="sgd", per_layer=True, counter="jaxpr")
    rows = {r.path: r.forward_flops for r in report.layers}
    if then == "dense":  # its kernel by the B*T looked-up rows, and its bias
        assert rows["mix"] == 2 * B * T * D * D + B * T * D
    else:  # the router, then the two dispatch einsums (B*T*D*E multiply-adds each) on the block's row
        assert rows["block/router"] == 2 * B * T * D * E + B * T * E
        assert rows["block"] >= 2 * (2 * B * T * D * E)
    assert not [n for n in report.notes if "whose method" in n]


def test_parameter_reads_follow_slabs_and_whole_tables_not_rows_picked():
    H = 5  # an expert's width

    def f(table, stack, w, tokens, i, experts, x):
        with jax.named_scope("lookup"):
            a = table[tokens] @ w  # rows picked (a gather (1, D)): w read, the table not
        with jax.named_scope("take"):
            a = a + jnp.take(table, tokens, axis=0) @ w
        with jax.named_scope("along"):
            a = a + jnp.take_along_axis(table, jnp.zeros((B * T, D), jnp.int32), axis=0).reshape(B, T, D) @ w
        with jax.named_scope("row"):
            a = a + (table[i] @ w)[None, None]  # one row: a dynamic slice (1, D)
        with jax.named_scope("picked"):
            e = jnp.einsum("nd,ndh->nh", x, stack[experts])  # each token's expert: a gather (1, D, H)
        with jax.named_scope("one"):
            e = e + x @ stack[i]  # one expert: a dynamic slice (1, D, H)
        with jax.named_scope("tied"):
            t = x @ table.T  # the table itself
        return a, e, t

    S = jax.ShapeDtypeStruct
    args = (S((V, D), jnp.float32), S((E, D, H), jnp.float32), S((D, D), jnp.float32), S((B, T), jnp.int32),
            S((), jnp.int32), S((N,), jnp.int32), S((N, D), jnp.float32))
    reads = parameter_reads(jax.make_jaxpr(f)(*args), ["embed", "experts", "mix", None, None, None, None])
    by_stack: dict[str, set[str]] = {}
    for module, stack in reads:
        by_stack.setdefault(stack.split("/")[0], set()).add(module)
    assert by_stack == {"lookup": {"mix"}, "take": {"mix"}, "along": {"mix"}, "row": {"mix"},
                        "picked": {"experts"}, "one": {"experts"}, "tied": {"embed"}}


class _Stack(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.kernel = nnx.Param(jax.random.normal(rngs.params(), (E, DM, F)))


class _PickingMoE(nnx.Module):  # each token's expert matrix picked from its child's stack (a gather (1, DM, F))
    def __init__(self, rngs: nnx.Rngs):
        self.router, self.experts = nnx.Linear(DM, E, use_bias=False, rngs=rngs), _Stack(rngs)

    def __call__(self, x):
        return jnp.einsum("nd,ndf->nf", x, self.experts.kernel[...][jnp.argmax(self.router(x), -1)])


class _TiedLM(nnx.Module):  # looks up, routes, and multiplies by the embedding's table in its own method
    def __init__(self, rngs: nnx.Rngs):
        self.embed, self.moe = nnx.Embed(V, DM, rngs=rngs), _PickingMoE(rngs)
        self.out = nnx.Linear(F, DM, use_bias=False, rngs=rngs)

    def __call__(self, tokens):
        return self.out(self.moe(self.embed(tokens))) @ self.embed.embedding[...].T


class _TiedNet(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.lm = _TiedLM(rngs)

    def __call__(self, tokens):
        return self.lm(tokens)


def test_an_expert_picked_from_the_stack_and_a_tied_head_in_a_blocks_method_are_named():
    tokens = jax.ShapeDtypeStruct((N,), jnp.int32)
    report = xla_cost.analyze(nnx.eval_shape(lambda: _TiedNet(nnx.Rngs(0))), tokens, optimizer="sgd",
                              counter="jaxpr", per_layer=True)
    rows = {r.path: r.forward_flops for r in report.layers}
    assert rows["lm/moe"] >= 2 * N * DM * F  # each token by its expert's (DM, F) matrix (and the argmax, gather)
    assert rows["lm"] == 2 * N * DM * V  # the tied head: N outputs of width DM by the (V, DM) table
    assert rows["lm/moe/experts"] == 0
    [note] = [n for n in report.notes if "whose method" in n]
    # the lookup feeding the block's product is no read of the embedding's table: only the head is
    assert note.startswith("per-layer rows: the products of embed's parameters are counted in lm; "
                           "the products of experts's parameters are counted in lm/moe, whose method computes them")


# A module whose parameters products read on several rows was named once per row ("the products of embed's
# parameters are counted in moe; the products of embed's parameters are counted in moe/router/router_weights/w",
# flaxformer's MoE): it is named once, the rows listed.
class _Reader(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.out = nnx.Linear(DM, DM, rngs=rngs)

    def __call__(self, h, w):
        return self.out(h @ w)


class _SharedBlock(nnx.Module):  # reads its child's kernel itself, and hands it to another child
    def __init__(self, rngs: nnx.Rngs):
        self.proj, self.sub = nnx.Linear(DM, DM, use_bias=False, rngs=rngs), _Reader(rngs)

    def __call__(self, x):
        return self.sub(x @ self.proj.kernel[...], self.proj.kernel[...])


class _SharedNet(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.layers = nnx.List([_SharedBlock(rngs) for _ in range(2)])

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_a_modules_parameters_read_on_several_rows_are_named_once_with_the_rows():
    report = xla_cost.analyze(nnx.eval_shape(lambda: _SharedNet(nnx.Rngs(0))), jax.ShapeDtypeStruct((N, DM), jnp.float32),
                              optimizer="sgd", counter="jaxpr", per_layer=True)
    rows = {r.path: r.forward_flops for r in report.layers}
    for i in range(2):
        assert rows[f"layers/{i}"] == rows[f"layers/{i}/sub"] == 2 * N * DM * DM  # x by proj's kernel; h by it
        assert rows[f"layers/{i}/proj"] == 0
    [note] = [n for n in report.notes if "whose method" in n]
    assert note.startswith("per-layer rows: the products of proj's parameters are counted in layers/0 and "
                           "layers/0/sub (and likewise 1 more: layers/1), whose methods compute them")


# A Perceiver's learned latents: a parameter of the encoder handed to its cross-attention as the queries. The
# cross-attention multiplies them by its keys: its input, as an activation would be, and no weight of the
# encoder's its method borrows ("the products of encoder's parameters are counted in encoder/cross").
LATENTS = 4


class _CrossAttention(nn.Module):
    @nn.compact
    def __call__(self, queries, x):
        keys, values = nn.Dense(D, name="key")(x), nn.Dense(D, name="value")(x)
        weights = jax.nn.softmax(jnp.einsum("qd,btd->bqt", queries, keys))
        return jnp.einsum("bqt,btd->bqd", weights, values)


class _Encoder(nn.Module):
    @nn.compact
    def __call__(self, x):
        return _CrossAttention(name="cross")(self.param("latents", nn.initializers.normal(0.02), (LATENTS, D)), x)


class _Perceiver(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(V, name="head")(_Encoder(name="encoder")(x).mean(1))


def test_a_learned_query_table_handed_to_a_child_is_its_input_not_a_borrowed_weight():
    report = xla_cost.analyze(_Perceiver(), jax.ShapeDtypeStruct((B, T, D), jnp.float32), optimizer="sgd",
                              counter="jaxpr", per_layer=True)
    rows = {r.path: r for r in report.layers}
    assert rows["encoder"].parameters == LATENTS * D and rows["encoder"].forward_flops == 0
    # the queries by the keys and the weights by the values: 2 * B * LATENTS * T * D each, on the cross's row
    # (with its softmax's elementwise work)
    assert rows["encoder/cross"].forward_flops >= 2 * (2 * B * LATENTS * T * D)
    assert not [n for n in report.notes if "whose method" in n]
