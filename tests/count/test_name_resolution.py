"""Name stacks resolved against the model's modules, whatever the modules are called.

Flax puts a chain of calls on the name stack, not a module path: each called
module's own name, with ``.method`` for a method other than ``__call__``, inside
a lifted transform's name (``vmap(expert)``), at the place it is called (a module
built in one parent and called from another). The stacks below are the ones
Flax 0.12 writes for the models in this file (printed from
``eqn.source_info.name_stack`` of their forward and grad jaxprs). Each model's
Dense rows must carry the matmuls of their own parameters: forward FLOP
2 * B * in * out (bias-free layers), times the experts for a vmapped expert; the
remainder holds the loss alone; every column adds up to its phase.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import xla_cost
from tests import formulas as F
from xla_cost.count.attribution import module_tree, op_name_path, root_products_note, unmatched_note, unmatched_stacks
from xla_cost.count.interpret import EqnCount
from xla_cost.count.registry import Cost

B, D_IN, WIDTH, HIDDEN, CLASSES, EXPERTS = 4, 6, 8, 12, 5, 3
"""Batch, input features, model width, an expert's hidden width, classes, experts."""


def _dense(features: int, name: str) -> nn.Dense:
    return nn.Dense(features, use_bias=False, name=name)


def _report(model: nn.Module) -> xla_cost.Report:
    return xla_cost.analyze(
        model, jax.ShapeDtypeStruct((B, D_IN), jnp.float32), optimizer="sgd", per_layer=True, counter="jaxpr",
    )


def _check_rows(report: xla_cost.Report, forward: dict[str, int]) -> None:
    """The Dense rows' forward FLOP, the remainder's loss alone, the columns' sums."""
    rows = {row.path: row for row in report.layers}
    assert {path: rows[path].forward_flops for path in forward} == forward
    remainder = rows[xla_cost.REMAINDER]
    # the root module only calls its children: its remainder is the loss (no matmul)
    assert remainder.forward_flops == F.loss_flops(B, CLASSES)
    assert remainder.backward_flops == F.loss_backward_flops(B, CLASSES)
    for column in ("forward", "backward", "update"):
        assert sum(getattr(row, f"{column}_flops") for row in report.layers) == report.phases[column].jaxpr_flops
    assert not [note for note in report.notes if "match no row's module" in note or "matches no row's module" in note]


# ------------------------------------------------------------------ dotted names


class _Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(_dense(WIDTH, "conv1")(x))
        return nn.relu(_dense(WIDTH, "conv2")(x))

    def upsample(self, x):
        return self(x) * 2.0


class DottedUNet(nn.Module):
    """Blocks named ``down_0.block_0`` as diffusion code names them; the up
    block is called through a method: ``UNet/up_0.block_0.upsample/up_0.block_0/conv1``."""

    @nn.compact
    def __call__(self, x):
        x = _dense(WIDTH, "stem")(x)
        for level in range(2):
            for block in range(2):
                x = _Block(name=f"down_{level}.block_{block}")(x)
        x = _Block(name="up_0.block_0").upsample(x)
        return _dense(CLASSES, "head")(x)


def test_dotted_module_names_keep_their_rows():
    blocks = [f"down_{i}.block_{j}" for i in range(2) for j in range(2)] + ["up_0.block_0"]
    forward = {
        "stem": 2 * B * D_IN * WIDTH,
        **{f"{block}/{dense}": 2 * B * WIDTH * WIDTH for block in blocks for dense in ("conv1", "conv2")},
        "head": 2 * B * WIDTH * CLASSES,
    }
    report = _report(DottedUNet())
    _check_rows(report, forward)
    rows = {row.path: row for row in report.layers}
    # a block's own row: its two ReLUs (a max per element each); the up block's doubling too
    assert rows["down_0.block_0"].forward_flops == 2 * B * WIDTH
    assert rows["up_0.block_0"].forward_flops == 3 * B * WIDTH
    # the weight gradient 2*B*in*out of every Dense, the input gradient of all but the first
    assert rows["stem"].backward_flops == 2 * B * D_IN * WIDTH
    assert rows["down_1.block_0/conv2"].backward_flops == 2 * (2 * B * WIDTH * WIDTH)


# ------------------------------------------------------------------ mixture of experts


class _Expert(nn.Module):
    @nn.compact
    def __call__(self, x):
        return self.layer_fn(x)

    @nn.compact
    def layer_fn(self, x):
        return _dense(WIDTH, "out")(nn.relu(_dense(HIDDEN, "inp")(x)))


class _MoE(nn.Module):
    """Experts vmapped over their parameters and called through a method, in
    three styles (the stacks of their first Dense):

    * ``call``: ``nn.vmap`` of ``__call__``, which calls ``layer_fn``:
      ``moe/moe._call_experts/vmap(experts)/experts.layer_fn/inp``;
    * ``call+methods``: ``layer_fn`` vmapped too (``methods=``):
      ``moe/moe._call_experts/experts/vmap(experts.layer_fn)/inp``;
    * ``method``: ``layer_fn`` called directly:
      ``moe/moe._call_experts/vmap(experts.layer_fn)/inp``.
    """

    style: str

    def setup(self):
        self.gate = _dense(EXPERTS, "gate")
        self.experts = nn.vmap(
            _Expert, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=None, out_axes=0,
            axis_size=EXPERTS, methods=None if self.style == "call" else ["layer_fn"],
        )()

    def _call_experts(self, x):
        return self.experts.layer_fn(x) if self.style == "method" else self.experts(x)

    def __call__(self, x):
        weights = nn.softmax(self.gate(x))
        return jnp.einsum("be,ebd->bd", weights, self._call_experts(x))


class MoENet(nn.Module):
    style: str = "call"

    @nn.compact
    def __call__(self, x):
        x = _dense(WIDTH, "embed")(x)
        x = _MoE(self.style, name="moe")(x)
        return _dense(CLASSES, "head")(x)


@pytest.mark.parametrize("style", ["call", "call+methods", "method"])
def test_vmapped_experts_carry_their_matmuls(style):
    forward = {
        "embed": 2 * B * D_IN * WIDTH,
        "moe/gate": 2 * B * WIDTH * EXPERTS,
        "moe/experts/inp": EXPERTS * 2 * B * WIDTH * HIDDEN,  # every expert sees the whole batch
        "moe/experts/out": EXPERTS * 2 * B * HIDDEN * WIDTH,
        "head": 2 * B * WIDTH * CLASSES,
    }
    report = _report(MoENet(style))
    _check_rows(report, forward)
    rows = {row.path: row for row in report.layers}
    assert rows["moe/experts/inp"].parameters == EXPERTS * WIDTH * HIDDEN
    # weight and input gradients, each the forward matmul's FLOP
    assert rows["moe/experts/out"].backward_flops == 2 * EXPERTS * 2 * B * HIDDEN * WIDTH
    # the experts' own glue is theirs: the ReLU between their Dense layers, a
    # max per element of every expert's hidden activations
    assert rows["moe/experts"].forward_flops == EXPERTS * B * HIDDEN
    # the parent keeps what it computes itself, no expert's matmul: the weighted
    # sum (einsum be,ebd->bd: 2*B*E*WIDTH) and the gate's softmax over E (reduce_max
    # B*(E-1), max with -inf B, subtract B*E, reduce_sum B*(E-1), divide B*E)
    softmax = B * (EXPERTS - 1) + B + B * EXPERTS + B * (EXPERTS - 1) + B * EXPERTS
    assert rows["moe"].forward_flops == 2 * B * EXPERTS * WIDTH + softmax


# ------------------------------------------------------------------ a submodule's method


class _Encoder(nn.Module):
    @nn.compact
    def encode(self, x):
        return _dense(WIDTH, "fc2")(nn.relu(_dense(WIDTH, "fc1")(x)))


class MethodNet(nn.Module):
    """``MethodNet/encoder.encode/fc1``: the encoder itself is never on the stack."""

    def setup(self):
        self.encoder = _Encoder()
        self.head = _dense(CLASSES, "head")

    def __call__(self, x):
        return self.head(self.encoder.encode(x))


def test_a_submodule_called_through_a_method_keeps_its_rows():
    _check_rows(_report(MethodNet()), {
        "encoder/fc1": 2 * B * D_IN * WIDTH,
        "encoder/fc2": 2 * B * WIDTH * WIDTH,
        "head": 2 * B * WIDTH * CLASSES,
    })


# ------------------------------------------------------------------ a module shared between parents


class _Router(nn.Module):
    expert: nn.Module

    @nn.compact
    def __call__(self, x):
        return self.expert(nn.relu(_dense(WIDTH, "pre")(x)))


class _Layer(nn.Module):
    def setup(self):
        self.expert = _dense(WIDTH, "expert")
        self.moe = _Router(self.expert)

    def __call__(self, x):
        return self.moe(x)


class SharedNet(nn.Module):
    """``layers_0/expert`` is built by the layer and called by its child:
    ``SharedNet/layers_0/moe/expert``."""

    @nn.compact
    def __call__(self, x):
        x = _dense(WIDTH, "embed")(x)
        for i in range(2):
            x = _Layer(name=f"layers_{i}")(x)
        return _dense(CLASSES, "head")(x)


def test_a_module_called_from_another_parent_keeps_its_row():
    _check_rows(_report(SharedNet()), {
        "embed": 2 * B * D_IN * WIDTH,
        **{f"layers_{i}/{name}": 2 * B * WIDTH * WIDTH for i in range(2) for name in ("moe/pre", "expert")},
        "head": 2 * B * WIDTH * CLASSES,
    })


class _Attention(nn.Module):
    def setup(self):
        self.norm = nn.RMSNorm()
        self.proj = _dense(WIDTH, "proj")


class _GrandchildBlock(nn.Module):
    """maxdiffusion's FluxSingleTransformerBlock: its method calls its child's children directly
    (``self.attn.query_norm``, ``self.attn.proj``): Linen pushes ``norm`` and ``proj`` alone."""

    def setup(self):
        self.attn = _Attention()

    def __call__(self, x):
        return self.attn.proj(self.attn.norm(x))


class GrandchildNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        return _dense(CLASSES, "head")(_GrandchildBlock(name="block")(_dense(WIDTH, "embed")(x)))


def test_a_grandchild_a_blocks_method_calls_directly_keeps_its_row():
    # below the root, its work went to the block's parameterless row, the grandchildren's rows 0 (a note named
    # the products only); at the root it was found by the stack's ending
    report = _report(GrandchildNet())
    _check_rows(report, {"embed": 2 * B * D_IN * WIDTH, "block/attn/proj": 2 * B * WIDTH * WIDTH,
                         "head": 2 * B * WIDTH * CLASSES})
    rows = {row.path: row for row in report.layers}
    assert rows["block/attn/norm"].forward_flops > 0 and "block" not in rows  # the RMSNorm's own work
    assert not [n for n in report.notes if "whose method" in n]


class TiedHeadNet(nn.Module):
    """Hugging Face Flax's tied LM head (modeling_flax_gpt2.py): a Dense declared in setup and applied
    on another's weight, ``self.head.apply({"params": {"kernel": w.T}}, x)``, in a root scope of its own."""

    def setup(self):
        self.embed = nn.Dense(WIDTH, use_bias=False)
        self.head = nn.Dense(CLASSES, use_bias=False)
        self.tied = self.param("tied", nn.initializers.lecun_normal(), (CLASSES, WIDTH))

    def __call__(self, x):
        return self.head.apply({"params": {"kernel": self.tied.T}}, self.embed(x))


def test_a_module_applied_on_variables_of_its_callers_making_has_its_row():
    # its name stack `TiedHeadNet/head` matched no module (the interceptor saw it at the empty path of its
    # own root scope): the head's 2*B*WIDTH*CLASSES were in the remainder, with a note sending the user to
    # xla_cost.analyze, the call they had made
    report = _report(TiedHeadNet())
    _check_rows(report, {"embed": 2 * B * D_IN * WIDTH, "head": 2 * B * WIDTH * CLASSES})
    assert {row.path: row.parameters for row in report.layers}["head"] == 0  # its kernel is the root's


# ------------------------------------------------------------------ unmatched stacks
# ------------------------------------------------------------------ unmatched stacks


class UnscopedNet(nn.Module):
    """A projection on the root's own parameter under a ``jax.named_scope``
    that names no module: ``UnscopedNet/projection``."""

    @nn.compact
    def __call__(self, x):
        x = _dense(WIDTH, "embed")(x)
        w = self.param("w", nn.initializers.lecun_normal(), (WIDTH, CLASSES))
        with jax.named_scope("projection"):
            return x @ w


def test_a_stack_that_matches_nothing_is_named_in_a_note():
    report = _report(UnscopedNet())
    notes = [note for note in report.notes if "matches no row's module" in note]
    assert len(notes) == 1
    assert "1 name stack matches no row's module" in notes[0] and "`UnscopedNet/projection`" in notes[0]
    # xla_cost.analyze saw the model called: the note does not say a row needs that call
    assert "jax.named_scope of your own" in notes[0] and "xla_cost.analyze" not in notes[0]
    # the projection's matmul 2*B*WIDTH*CLASSES, in the forward program
    assert f"{2 * B * WIDTH * CLASSES:,} FLOP of forward" in notes[0]
    rows = {row.path: row for row in report.layers}
    assert rows[xla_cost.REMAINDER].forward_flops == 2 * B * WIDTH * CLASSES + F.loss_flops(B, CLASSES)


def _eqn(stack: str, flops: int = 10) -> EqnCount:
    return EqnCount(stack, "dot_general", 1, Cost(flops=flops))


def test_unmatched_stacks_by_hand():
    params = ["fc1", "blocks.0/fc"]
    equations = [
        _eqn("Net/fc1"),                        # a module: its row
        _eqn("transpose(jvp(Net))/blocks.0/fc"),  # a dotted module: its row
        _eqn("Net/ij,jk->ik"),                  # an einsum in the root: the remainder's by design
        _eqn("", 3),                            # the loss
        _eqn("jvp(Net)/fc9", 5),                # no such module
        _eqn("transpose(jvp(Net))/fc9", 7),     # the same, backward
        _eqn("Net/attention/fc", 2),            # no attention module
    ]
    assert unmatched_stacks(equations, params, root="Net") == {"Net/fc9": 12, "Net/attention/fc": 2}
    note = unmatched_note({"grad": equations}, params, root="Net", shown=1)
    assert note is not None
    assert "2 name stacks match no row's module" in note and "`Net/fc9` and 1 more" in note
    assert "14 FLOP of grad" in note  # 5 + 7 + 2
    assert unmatched_note({"grad": equations[:4]}, params, root="Net") is None
    # the products under scopes that are no module (fc9, attention/fc: 7 of the forward's 18 FLOP) are the
    # note above's: not said to be the root's own code, which holds the einsum's 10 and the loss's 3 (13 of 30)
    forward = [e for e in equations if not e.name_stack.startswith("transpose")]
    assert root_products_note(forward, params, root="Net") is not None  # 13 of 30: over 1%
    assert root_products_note([e for e in forward if e.name_stack not in ("Net/ij,jk->ik", "")], params,
                              root="Net") is None  # only unmatched scopes left in the remainder


# ------------------------------------------------------------------ the parser on literal stacks


MODULES = module_tree(
    ["stem", "down_0.block_0/conv1", "moe/gate", "moe/experts/inp", "layers_0/expert", "layers_0/moe/pre",
     "encoder/fc1", "h_0/attn/c_attn", "wte", "stage/body/conv"],
)


@pytest.mark.parametrize("stack, path", [
    # a dotted name is kept whole where such a module exists
    ("UNet/down_0.block_0/conv1", "down_0.block_0/conv1"),
    ("transpose(jvp(UNet))/down_0.block_0/conv1", "down_0.block_0/conv1"),
    # a method of a dotted module, and its own __call__ inside it
    ("UNet/down_0.block_0.upsample/down_0.block_0/conv1", "down_0.block_0/conv1"),
    # a method of the module itself, a transform around a child, a method of that child
    ("Net/moe/moe._call_experts/vmap(experts)/experts.layer_fn/inp", "moe/experts/inp"),
    ("Net/moe/moe._call_experts/vmap(experts.layer_fn)/inp", "moe/experts/inp"),
    ("Net/moe/moe._call_experts/experts/vmap(experts.layer_fn)/inp", "moe/experts/inp"),
    # a method of the root, then of a child that is not on the stack itself
    ("Net/Net._encode/encoder.encode/fc1", "encoder/fc1"),
    ("jvp(Net)/wte.attend", "wte"),
    # a module built in layers_0 and called by its child moe
    ("Net/layers_0/moe/expert", "layers_0/expert"),
    # what names no module stays after the module found before it
    ("Net/h_0/attn/bqhd,bkhd->bhqk", "h_0/attn/bqhd,bkhd->bhqk"),
    ("Net/moe/moe.helper/scores", "moe/scores"),
    ("Net/nothing.here/fc", "nothing.here/fc"),
    # jax's own scope, the root again inside a checkpointed backward pass
    ("transpose(jvp(Net))/rematted_computation/jvp(Net)/stem", "stem"),
    ("", ""),
])
def test_module_path_resolves_against_the_modules(stack, path):
    assert xla_cost.module_path(stack, "Net" if "UNet" not in stack else "UNet", MODULES) == path


def test_module_path_without_modules_guesses_as_before():
    # every entry kept, a method call read as its module's
    assert xla_cost.module_path("UNet/down_0.block_0/conv1", "UNet") == "down_0/conv1"
    assert xla_cost.module_path("Net/moe/moe._call_experts/vmap(experts)/experts.layer_fn/inp", "Net") == (
        "moe/moe/experts/experts/inp"
    )


def test_op_names_resolve_as_name_stacks_do():
    # HLO's op_name: the jit, the primitive, the loop's scopes left out
    assert op_name_path(
        "jit(train_step)/transpose(jvp(Net))/moe/moe._call_experts/experts/vmap(experts.layer_fn)/inp/dot_general",
        "Net", MODULES,
    ) == "moe/experts/inp"
    assert op_name_path("jit(grad)/jvp(UNet)/down_0.block_0/while/body/conv1/dot_general", "UNet", MODULES) == (
        "down_0.block_0/conv1"
    )
    # a module named like a loop scope is a module where one exists
    assert op_name_path("jit(grad)/jvp(Net)/stage/body/conv/conv_general_dilated", "Net", MODULES) == "stage/body/conv"
    assert op_name_path("jit(grad)/jvp(Net)/h_0/while/body/attn/dot_general", "Net") == "h_0/attn"


# ------------------------------------------------------------------ wrappers around a module's call

RANK = 2
"""An adapter's rank."""


class _Proj(nn.Module):
    """A weight in its parent's scope (``nn.share_scope``), as gemma's Einsum in its FeedForward."""

    features: int
    weight: str

    @nn.compact
    def __call__(self, x):
        return x @ self.param(self.weight, nn.initializers.lecun_normal(), (x.shape[-1], self.features))


class _SharedMlp(nn.Module):
    @nn.compact
    def __call__(self, x):
        up, down = _Proj(WIDTH, "up"), _Proj(CLASSES, "down")
        nn.share_scope(self, up)
        nn.share_scope(self, down)
        return down(nn.relu(up(x)))


class _Adapter(nn.Module):
    """A low-rank adapter that calls the module it wraps (gemma's ``_LoRAEinsum``)."""

    wrapped: nn.Module

    @nn.compact
    def __call__(self, x):
        a = self.param("a", nn.initializers.lecun_normal(), (x.shape[-1], RANK))
        b = self.param("b", nn.initializers.zeros, (RANK, self.wrapped.features))
        return self.wrapped(x) + x @ a @ b


class InterceptedNet(nn.Module):
    """Each ``_Proj`` call replaced by an interceptor (``nn.intercept_methods``, as gemma's
    ``gm.nn.LoRA``) with an ``_Adapter`` around it: the stack of the wrapped call enters the
    ``_Proj`` again inside the adapter, ``InterceptedNet/mlp/_Proj_0/_Adapter_up/_Proj_0``."""

    @nn.compact
    def __call__(self, x):
        inside: set[int] = set()

        def intercept(next_fun, args, kwargs, context):
            module = context.module
            if not isinstance(module, _Proj) or context.method_name != "__call__" or id(module) in inside:
                return next_fun(*args, **kwargs)
            inside.add(id(module))
            try:
                return _Adapter(wrapped=module, name=f"_Adapter_{module.weight}")(*args, **kwargs)
            finally:
                inside.discard(id(module))

        with nn.intercept_methods(intercept):
            return _SharedMlp(name="mlp")(x)


def test_a_call_an_interceptor_wraps_is_its_own_modules_work():
    """The wrapped products read the ``mlp``'s weights and are its row's; the adapters' rows
    hold their own low-rank products and the add (were: the base products in the adapters'
    rows, 0 parameters, and ``mlp`` the ReLU alone)."""
    report = _report(InterceptedNet())
    _check_rows(report, {
        # the two products on its own weights, and the ReLU between them (one max an element)
        "mlp": 2 * B * D_IN * WIDTH + 2 * B * WIDTH * CLASSES + B * WIDTH,
        # x a (in x RANK), then (x a) b (RANK x out), then the add to the wrapped call's output
        "mlp/_Adapter_up": 2 * B * D_IN * RANK + 2 * B * RANK * WIDTH + B * WIDTH,
        "mlp/_Adapter_down": 2 * B * WIDTH * RANK + 2 * B * RANK * CLASSES + B * CLASSES,
    })
    rows = {row.path: row for row in report.layers}
    # backward: both weights' gradients and the input gradient of down are mlp's products
    assert rows["mlp"].backward_flops >= 2 * B * D_IN * WIDTH + 2 * (2 * B * WIDTH * CLASSES)


def test_module_path_of_a_wrapped_call():
    modules = module_tree(["mlp", "mlp/_LoRAEinsum_gating_einsum/lora"])
    # gemma's LoRA around a shared-scope Einsum: the wrapped call is mlp's, the adapter's own its row's
    assert xla_cost.module_path("Net/mlp/Einsum_0/_LoRAEinsum_gating_einsum/Einsum_0/ab,bc->ac", "Net",
                                modules) == "mlp/Einsum_0/ab,bc->ac"
    assert xla_cost.module_path("Net/mlp/Einsum_0/_LoRAEinsum_gating_einsum/lora/ab,bc->ac", "Net",
                                modules) == "mlp/_LoRAEinsum_gating_einsum/lora/ab,bc->ac"


# ------------------------------------------------------------------ an NNX module held by a Linen model


@pytest.mark.parametrize("wrapper", ["to_linen", "own"])
def test_nnx_modules_under_to_linen_have_their_rows(wrapper):
    """``nnx.bridge.ToLinen`` (MaxText's Linen path, which has its own copy of it) builds its NNX
    module in the call: its Linears' products are their rows' (were: all in ``layers_0``, 0
    parameters, and 0 FLOP in the Linears' rows). ``own``: a Linen module of the user's own that
    builds the NNX block and loads its parameters from its variables."""
    from flax import nnx
    from flax.nnx import bridge

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.query = nnx.Linear(D_IN, WIDTH, use_bias=False, rngs=rngs)
            self.mlp = nnx.Linear(WIDTH, WIDTH, use_bias=False, rngs=rngs)

        def __call__(self, x):
            return self.mlp(self.query(x))

    class OwnBridge(nn.Module):
        @nn.compact
        def __call__(self, x):
            block = Block(nnx.Rngs(0))
            state = nnx.state(block, nnx.Param)
            if self.is_initializing():
                for name, value in nnx.to_pure_dict(state).items():
                    self.put_variable("params", name, value)
            else:
                nnx.replace_by_pure_dict(state, dict(self.variables["params"]))
                nnx.update(block, state)
            return block(x)

    class Top(nn.Module):
        @nn.compact
        def __call__(self, x):
            layer = bridge.ToLinen(Block, name="layers_0") if wrapper == "to_linen" else OwnBridge(name="layers_0")
            return _dense(CLASSES, "head")(layer(x))

    report = _report(Top())
    _check_rows(report, {
        "layers_0/query": 2 * B * D_IN * WIDTH,
        "layers_0/mlp": 2 * B * WIDTH * WIDTH,
        "head": 2 * B * WIDTH * CLASSES,
    })
    rows = {row.path: row for row in report.layers}
    # backward: the weight gradient of query (x is no parameter: no input gradient), and mlp's two products
    assert rows["layers_0/query"].backward_flops == 2 * B * D_IN * WIDTH
    assert rows["layers_0/mlp"].backward_flops == 2 * (2 * B * WIDTH * WIDTH)


@pytest.mark.parametrize("entry", ["analyze", "analyze_step"])
def test_nnx_model_holding_to_nnx_has_its_rows(entry):
    """``nnx.bridge.ToNNX`` (openpi's Gemma inside its NNX model) reads every attribute of itself as a
    Linen variable in its call: the path xla_cost tags each module with must be no attribute
    (was: ``ValueError: Cannot infer collection name from value: ('enc',)``, both entries). The
    model's attributes seen inside the traced call are the ones it had before."""
    import optax
    from flax import nnx
    from flax.nnx import bridge

    seen = []

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.enc = bridge.ToNNX(_dense(WIDTH, "enc"))
            self.enc.lazy_init(jnp.ones((1, D_IN)), rngs=rngs)
            self.head = nnx.Linear(WIDTH, CLASSES, use_bias=False, rngs=rngs)

        def __call__(self, x):
            seen.append((sorted(vars(self)), sorted(vars(self.enc)), sorted(vars(self.head))))
            return self.head(self.enc(x))

    model = Model(nnx.Rngs(0))
    before = (sorted(vars(model)), sorted(vars(model.enc)), sorted(vars(model.head)))
    x = jax.ShapeDtypeStruct((B, D_IN), jnp.float32)
    if entry == "analyze":
        report = xla_cost.analyze(model, x, optimizer="sgd", per_layer=True, counter="jaxpr")
    else:
        optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)

        @nnx.jit
        def train_step(model, optimizer, x):
            loss, grads = nnx.value_and_grad(lambda m: jnp.mean(m(x) ** 2))(model)
            optimizer.update(model, grads)
            return loss

        report = xla_cost.analyze_step(train_step, model, optimizer, x, per_layer=True, counter="jaxpr")
    assert seen and all(attributes == before for attributes in seen)
    assert (sorted(vars(model)), sorted(vars(model.enc)), sorted(vars(model.head))) == before
    assert report.parameters == D_IN * WIDTH + WIDTH * CLASSES
    rows = {row.path: row for row in report.layers}
    assert rows["enc"].forward_flops == 2 * B * D_IN * WIDTH
    assert rows["head"].forward_flops == 2 * B * WIDTH * CLASSES


# ------------------------------------------------------------------ stacks that name no module from the root


def test_a_stack_ending_one_modules_path_is_that_modules():
    """Work jax hoisted out of a scanned stack's loop keeps the scopes inside the loop alone
    (``layers/attn/rope``): the one module whose path ends so (``decoder/layers/attn/rope``)
    has it; where several do, the remainder (and the note)."""
    params = {"decoder/layers/attn/q": 64, "decoder/layers/mlp": 64}
    known = ["decoder/layers/attn/rope", "decoder/layers/attn/q", "decoder/layers/mlp"]
    rows = xla_cost.attribute([_eqn("transpose(jvp(Net))/layers/attn/rope", 7)], params, root="Net",
                              known_modules=known)
    assert {row.path: row.backward_flops for row in rows if row.backward_flops} == {"decoder/layers/attn/rope": 7}
    twice = ["encoder/layers/attn/rope", *known]
    assert unmatched_stacks([_eqn("jvp(Net)/layers/attn/rope", 7)], params, root="Net",
                            known_modules=twice) == {"Net/layers/attn/rope": 7}


def test_a_stack_that_names_no_module_goes_to_its_datas_owner():
    """An optimizer's update run in a method of an NNX container of the model (MaxText's
    ``TrainStateNNX.apply_gradients``: stack ``TrainState``) follows its data to the layer
    whose parameters it updates (was: the remainder)."""
    params = {"model/fc1": 10, "model/fc2": 10}
    equations = [EqnCount("TrainState", "mul", 1, Cost(flops=5), owner="model/fc1"),
                 EqnCount("TrainState", "add", 1, Cost(flops=3))]
    rows = xla_cost.attribute(equations, params, root=(), default_pass="update")
    assert {row.path: row.update_flops for row in rows if row.update_flops} == {"model/fc1": 5, xla_cost.REMAINDER: 3}
