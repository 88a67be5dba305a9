"""BERT (MLM head) and ViT-B/16: exact parameter counts, exact forward matmul FLOP,
scan vs unrolled, the Kaplan et al. forward estimate, configuration errors.

Everything but one tiny numeric check is abstract (`jax.eval_shape`,
`jax.ShapeDtypeStruct`): nothing the size of BERT or ViT is ever allocated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import xla_cost
from xla_cost.zoo.bert import SPECS as BERT_SPECS
from xla_cost.zoo.bert import Bert, BertBase, BertLarge, bert_parameters
from xla_cost.zoo.vit import SPECS as VIT_SPECS
from xla_cost.zoo.vit import ViT, ViTB16, vit_parameters

# Source: Hugging Face `BertForMaskedLM.from_pretrained(name).num_parameters()` for
# bert-base-uncased and bert-large-uncased (decoder tied to the word embeddings, so
# the head adds its transform, LayerNorm and the V output bias; no pooler).
# Devlin et al. 2019 quote 110M and 340M (BERT with pooler, without the MLM head).
BERT_PUBLISHED = {"base": 109_514_298, "large": 335_174_458}

# Source: timm `vit_base_patch16_224` (and HF `google/vit-base-patch16-224`,
# `ViTForImageClassification`) parameter count; Dosovitskiy et al. 2021, Table 1,
# quote ViT-Base as 86M.
VIT_B16_PUBLISHED = 86_567_656

BERT_TINY = {"vocab_size": 100, "seq_len": 16, "max_position": 32, "n_layer": 3, "n_head": 4, "d_model": 64, "d_ff": 96}
VIT_TINY = {"image_size": 32, "patch_size": 8, "num_classes": 10, "n_layer": 3, "n_head": 4, "d_model": 64, "d_ff": 96}


def _abstract_params(model, inputs):
    return jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)


def _count(model, inputs) -> int:
    params = _abstract_params(model, inputs)["params"]
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))


def _tokens(batch: int, seq_len: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((batch, seq_len), jnp.int32)


def _images(batch: int, size: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((batch, size, size, 3), jnp.float32)


# --------------------------------------------------------------------------- closed forms


def bert_closed_form(v: int, n_layer: int, d: int, f: int, max_position: int = 512, types: int = 2) -> int:
    """Embeddings + encoder layers + MLM head, term by term (HF BertForMaskedLM layout)."""
    embeddings = v * d + max_position * d + types * d + 2 * d  # word, position, token type, LayerNorm
    # query, key, value, attention output (d^2 + d each); attention LayerNorm;
    # intermediate (d*f + f); output (f*d + d); output LayerNorm.
    layer = 4 * (d * d + d) + 2 * d + (d * f + f) + (f * d + d) + 2 * d
    head = (d * d + d) + 2 * d + v  # transform dense, transform LayerNorm, decoder bias (weight tied)
    return embeddings + n_layer * layer + head


def vit_closed_form(image: int, patch: int, classes: int, n_layer: int, d: int, f: int) -> int:
    """Patch conv + cls + position + blocks + final LayerNorm + head (timm layout)."""
    tokens = (image // patch) ** 2 + 1
    embed = (patch * patch * 3 * d + d) + d + tokens * d  # patch_embed (kernel, bias), cls_token, pos_embed
    # norm1 2d, qkv 3d^2+3d, proj d^2+d, norm2 2d, fc1 df+f, fc2 fd+d
    block = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (d * f + f) + (f * d + d)
    if f == 4 * d:
        assert block == 12 * d * d + 13 * d
    return embed + n_layer * block + 2 * d + (d * classes + classes)


def test_closed_forms_give_the_published_counts():
    assert bert_closed_form(30522, 12, 768, 3072) == BERT_PUBLISHED["base"]
    assert bert_closed_form(30522, 24, 1024, 4096) == BERT_PUBLISHED["large"]
    assert vit_closed_form(224, 16, 1000, 12, 768, 3072) == VIT_B16_PUBLISHED
    # The modules' own helpers agree with the test's term-by-term forms.
    assert bert_parameters(30522, 12, 768, 3072) == BERT_PUBLISHED["base"]
    assert vit_parameters(224, 16, 1000, 12, 768, 3072) == VIT_B16_PUBLISHED


# --------------------------------------------------------------------------- parameter counts


@pytest.mark.parametrize(
    "cls, size, scan_layers",
    [(BertBase, "base", False), (BertBase, "base", True), (BertLarge, "large", True)],
)
def test_bert_published_parameter_counts(cls, size, scan_layers):
    model = cls(scan_layers=scan_layers)
    assert model.seq_len == 128 and model.max_position == 512
    assert _count(model, _tokens(1, model.seq_len)) == BERT_PUBLISHED[size]


def test_bert_large_unrolled_count():
    assert _count(BertLarge(), _tokens(1, 128)) == BERT_PUBLISHED["large"]


@pytest.mark.parametrize("scan_layers", [False, True])
def test_vit_b16_published_parameter_count(scan_layers):
    assert _count(ViTB16(scan_layers=scan_layers), _images(1, 224)) == VIT_B16_PUBLISHED


def test_bert_count_does_not_depend_on_seq_len():
    # The position table has max_position rows whatever the input length.
    assert _count(BertBase(scan_layers=True, seq_len=512), _tokens(1, 512)) == BERT_PUBLISHED["base"]


def test_tiny_counts_match_closed_forms():
    c = BERT_TINY
    bert = bert_closed_form(c["vocab_size"], c["n_layer"], c["d_model"], c["d_ff"], c["max_position"])
    for scan in (False, True):
        assert _count(Bert(scan_layers=scan, **c), _tokens(2, c["seq_len"])) == bert
    c = VIT_TINY
    vit = vit_closed_form(c["image_size"], c["patch_size"], c["num_classes"], c["n_layer"], c["d_model"], c["d_ff"])
    for scan in (False, True):
        assert _count(ViT(scan_layers=scan, **c), _images(2, c["image_size"])) == vit


def test_param_trees_and_output_shapes():
    c = BERT_TINY
    model, tokens = Bert(**c), _tokens(2, c["seq_len"])
    variables = _abstract_params(model, tokens)
    params = variables["params"]
    assert set(params) == {"embeddings", "layer_0", "layer_1", "layer_2", "cls"}  # no pooler, no NSP
    assert set(params["embeddings"]) == {
        "word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm",
    }
    assert params["embeddings"]["position_embeddings"]["embedding"].shape == (c["max_position"], c["d_model"])
    assert set(params["layer_0"]) == {"attention", "intermediate", "output", "LayerNorm"}
    assert set(params["layer_0"]["attention"]) == {"query", "key", "value", "output", "LayerNorm"}
    assert set(params["cls"]) == {"dense", "LayerNorm", "bias"}  # decoder weight tied
    assert jax.eval_shape(model.apply, variables, tokens).shape == (2, c["seq_len"], c["vocab_size"])
    scanned = _abstract_params(Bert(scan_layers=True, **c), tokens)["params"]
    assert set(scanned) == {"embeddings", "layer", "cls"}
    assert scanned["layer"]["attention"]["query"]["kernel"].shape == (3, 64, 64)

    c = VIT_TINY
    model, images = ViT(**c), _images(2, c["image_size"])
    variables = _abstract_params(model, images)
    params = variables["params"]
    assert set(params) == {"patch_embed", "cls_token", "pos_embed", "blocks_0", "blocks_1", "blocks_2", "norm", "head"}
    assert params["patch_embed"]["kernel"].shape == (8, 8, 3, 64)
    assert params["pos_embed"].shape == (1, 17, 64)
    assert set(params["blocks_0"]) == {"norm1", "attn", "norm2", "mlp"}
    assert jax.eval_shape(model.apply, variables, images).shape == (2, c["num_classes"])


# --------------------------------------------------------------------------- forward FLOP


def bert_forward_matmul_flops(batch: int, c: dict) -> int:
    """dot_general FLOP of one BERT forward pass, 2 FLOP per multiply-add.

    Per token and layer: query, key, value, attention output 4d^2, intermediate
    and output 2*d*d_ff multiply-adds. Per token: MLM transform d^2 and tied
    decoder d*V. Attention: q k^T and probs v are each T*T*d per sequence and
    layer (bidirectional, no mask).
    """
    b, t, n_layer, d, f, v = batch, c["seq_len"], c["n_layer"], c["d_model"], c["d_ff"], c["vocab_size"]
    weights = 2 * b * t * (n_layer * (4 * d * d + 2 * d * f) + d * d + d * v)
    attention = 2 * 2 * b * n_layer * t * t * d
    return weights + attention


def vit_forward_matmul_flops(batch: int, c: dict) -> tuple[int, int]:
    """(dot_general, conv) FLOP of one ViT forward pass, 2 FLOP per multiply-add.

    ``n = (image/patch)^2 + 1`` tokens. Per token and layer: qkv 3d^2, proj d^2,
    fc1 and fc2 2*d*d_ff; attention 2*n*n*d per sequence and layer; the head d*C
    on the class token only. The patch convolution: p*p*3*d per patch.
    """
    b, n_layer, d, f = batch, c["n_layer"], c["d_model"], c["d_ff"]
    patches = (c["image_size"] // c["patch_size"]) ** 2
    n = patches + 1
    weights = 2 * b * n * n_layer * (4 * d * d + 2 * d * f)
    attention = 2 * 2 * b * n_layer * n * n * d
    head = 2 * b * d * c["num_classes"]
    dots = weights + attention + head
    conv = 2 * b * patches * c["patch_size"] ** 2 * 3 * d
    return dots, conv


def _forward_count(model, inputs) -> xla_cost.JaxprCount:
    variables = _abstract_params(model, inputs)
    return xla_cost.count_function(lambda p, x: model.apply(p, x), variables, inputs)


@pytest.mark.parametrize("scan_layers", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_bert_forward_matmul_flops_exact(batch, scan_layers):
    c = BERT_TINY
    count = _forward_count(Bert(scan_layers=scan_layers, **c), _tokens(batch, c["seq_len"]))
    assert not count.unsupported
    dots = [e for e in count.equations if e.primitive == "dot_general"]
    assert sum(e.cost.flops for e in dots) == bert_forward_matmul_flops(batch, c)
    # The attention matmuls are attributed to the attention module, the decoder to cls.
    attn = [e for e in dots if "/attention/" in e.name_stack and "->" in e.name_stack]
    assert sum(e.cost.flops for e in attn) == 4 * batch * c["n_layer"] * c["seq_len"] ** 2 * c["d_model"]
    decoder = [e for e in dots if e.name_stack.startswith("Bert/cls/") and "->" in e.name_stack]
    assert sum(e.cost.flops for e in decoder) == 2 * batch * c["seq_len"] * c["d_model"] * c["vocab_size"]


@pytest.mark.parametrize("scan_layers", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_vit_forward_matmul_flops_exact(batch, scan_layers):
    c = VIT_TINY
    count = _forward_count(ViT(scan_layers=scan_layers, **c), _images(batch, c["image_size"]))
    assert not count.unsupported
    dots, conv = vit_forward_matmul_flops(batch, c)
    assert sum(e.cost.flops for e in count.equations if e.primitive == "dot_general") == dots
    assert sum(e.cost.flops for e in count.equations if e.primitive == "conv_general_dilated") == conv
    n = (c["image_size"] // c["patch_size"]) ** 2 + 1
    dot_eqns = [e for e in count.equations if e.primitive == "dot_general"]
    attn = [e for e in dot_eqns if "/attn/" in e.name_stack and "->" in e.name_stack]
    assert sum(e.cost.flops for e in attn) == 4 * batch * c["n_layer"] * n * n * c["d_model"]


def test_vit_b16_published_macs():
    # Source: the timm model card of vit_base_patch16_224 (augreg2_in21k_ft_in1k):
    # "GMACs: 17.6" at 224 x 224. Multiply-adds of the matmuls and the patch
    # convolution, from the formula, and as counted (2 FLOP per multiply-add).
    c = {f: getattr(ViTB16(), f) for f in VIT_TINY}
    assert (c["image_size"], c["patch_size"], c["n_layer"], c["d_model"], c["d_ff"]) == (224, 16, 12, 768, 3072)
    dots, conv = vit_forward_matmul_flops(1, c)
    # ViT-B/16 written out: 196 patches + the class token = 197 tokens, 12 layers,
    # d 768, d_ff 3072, 1000 classes; multiply-adds (half the FLOP):
    n, L, d, f = 197, 12, 768, 3072
    macs = n * L * (4 * d * d + 2 * d * f) + 2 * L * n * n * d + d * 1000 + 196 * 16 * 16 * 3 * d
    assert dots + conv == 2 * macs
    assert round(macs / 1e9, 1) == 17.6
    count = _forward_count(ViTB16(scan_layers=True), _images(1, 224))
    counted = sum(e.cost.flops for e in count.equations if e.primitive in ("dot_general", "conv_general_dilated"))
    assert counted == dots + conv


@pytest.mark.parametrize(
    "cls, config, inputs",
    [(Bert, BERT_TINY, _tokens(2, BERT_TINY["seq_len"])), (ViT, VIT_TINY, _images(2, VIT_TINY["image_size"]))],
    ids=["bert", "vit"],
)
def test_scan_and_unrolled_same_phase_flops(cls, config, inputs):
    reports = [
        xla_cost.analyze(cls(scan_layers=scan, **config), inputs, optimizer="sgd", counter="jaxpr")
        for scan in (False, True)
    ]
    unrolled, scanned = reports
    assert unrolled.parameters == scanned.parameters
    for phase in xla_cost.PHASES:
        a, b = unrolled.phases[phase].flops, scanned.phases[phase].flops
        assert a > 0 and abs(a - b) <= 1e-3 * a, (phase, a, b)


def test_kaplan_forward_estimate_bert_base():
    """Kaplan et al. 2020, Table 1: C_forward ~ 2N + 2 n_layer n_ctx d_attn per token.

    N is Kaplan's non-embedding parameter count, 2 d_model n_layer (2 d_attn + d_ff)
    (= 12 L d^2 here; no biases, LayerNorms, embeddings or MLM transform). Kaplan's
    total leaves out the de-embedding, but BERT computes it at every position, so
    its 2 d_model n_vocab (Table 1, "De-embed") is added::

        estimate = 2 * (2*d*L*(2*d + d_ff)) + 2*L*n_ctx*d + 2*d*V

    The matmuls BERT runs are that estimate plus two terms it leaves out: q k^T
    and probs v are both counted (2 L n_ctx d more), and the MLM transform
    (2 d^2). Everything else (LayerNorm, GELU, softmax, biases, the loss) is
    elementwise, 1.3% of the forward pass here.
    """
    model = BertBase(scan_layers=True)
    d, n_layer, n_ctx, d_ff, v = model.d_model, model.n_layer, model.seq_len, model.d_ff, model.vocab_size
    report = xla_cost.analyze(model, _tokens(1, n_ctx), optimizer="sgd", counter="jaxpr")
    per_token = report.phases["forward"].flops / n_ctx
    n_kaplan = 2 * d * n_layer * (2 * d + d_ff)
    estimate = 2 * n_kaplan + 2 * n_layer * n_ctx * d + 2 * d * v
    assert d_ff == 4 * d and n_kaplan == 12 * n_layer * d * d  # d_attn = d_model
    # Kaplan's N is within 1% of the module's non-embedding count (all but the
    # tables): its biases and LayerNorms, 13 L d + the MLM head's d^2 + 4d + V.
    non_embedding = BERT_PUBLISHED["base"] - (v + model.max_position + model.type_vocab_size) * d
    assert non_embedding - n_kaplan == n_layer * (9 * d + d_ff) + 2 * d + (d * d + d) + 2 * d + v
    # the matmuls, exactly: the estimate and the two terms it leaves out
    matmuls = estimate + 2 * n_layer * n_ctx * d + 2 * d * d
    assert matmuls == bert_forward_matmul_flops(1, {**BERT_TINY, **_bert_base_config(model)}) / n_ctx
    # the elementwise rest: measured 1.29% of the matmuls
    assert 1.0 < per_token / matmuls < 1.015, per_token / matmuls


def _bert_base_config(model) -> dict:
    return {k: getattr(model, k) for k in ("vocab_size", "seq_len", "n_layer", "d_model", "d_ff")}


# --------------------------------------------------------------------------- errors and specs


def test_bad_configurations_raise_input_error():
    with pytest.raises(xla_cost.InputError, match="d_model divisible by n_head"):
        _count(Bert(**{**BERT_TINY, "n_head": 5}), _tokens(1, BERT_TINY["seq_len"]))
    with pytest.raises(xla_cost.InputError, match="seq_len <= max_position"):
        _count(Bert(**{**BERT_TINY, "seq_len": 64}), _tokens(1, 64))
    with pytest.raises(xla_cost.InputError, match=r"\(B, 16\)"):
        _count(Bert(**BERT_TINY), _tokens(1, 8))
    with pytest.raises(xla_cost.InputError, match="integer token ids"):
        _count(Bert(**BERT_TINY), jax.ShapeDtypeStruct((1, 16), jnp.float32))
    with pytest.raises(xla_cost.InputError, match="image_size divisible by patch_size"):
        _count(ViT(**{**VIT_TINY, "image_size": 36}), _images(1, 36))
    with pytest.raises(xla_cost.InputError, match="d_model divisible by n_head"):
        _count(ViT(**{**VIT_TINY, "n_head": 5}), _images(1, VIT_TINY["image_size"]))
    with pytest.raises(xla_cost.InputError, match=r"\(B, 32, 32, 3\)"):
        _count(ViT(**VIT_TINY), _images(1, 64))


def test_specs():
    specs = {s.name: s for s in BERT_SPECS + VIT_SPECS}
    assert set(specs) == {"bert-base", "bert-large", "vit-b16"}
    for name in ("bert-base", "bert-large"):
        spec = specs[name]
        assert spec.input_dtype == "int32" and spec.source == "Devlin et al. 2019; HF BertForMaskedLM"
        assert spec.defaults["seq_len"] == 128 and spec.defaults["max_position"] == 512
        assert "dtype" not in spec.defaults and "param_dtype" not in spec.defaults
        assert spec.input_shape(spec.defaults) == (128,)
        assert spec.input_shape({**spec.defaults, "seq_len": 512}) == (512,)
    vit = specs["vit-b16"]
    assert vit.module is ViTB16 and vit.input_dtype == "float"
    assert vit.input_shape(vit.defaults) == (224, 224, 3)
    assert vit.defaults["patch_size"] == 16 and vit.defaults["num_classes"] == 1000


def test_bert_bidirectional_and_scan_equivalent_numerically():
    # Tiny real run: every position sees the last token (no causal mask), and the
    # scanned stack computes the same function as the unrolled one.
    c = {**BERT_TINY, "n_layer": 2}
    tokens = (jnp.arange(32, dtype=jnp.int32).reshape(2, 16) * 7) % c["vocab_size"]
    model = Bert(**c)
    rng = np.random.default_rng(0)  # NumPy weights: compiling Flax's initialisers is slow
    variables = jax.tree.map(
        lambda a: jnp.asarray(rng.normal(0.0, 0.1, a.shape), a.dtype), _abstract_params(model, tokens)
    )
    apply = jax.jit(model.apply)
    logits = apply(variables, tokens)
    changed = apply(variables, tokens.at[:, -1].set(3))
    assert not jnp.allclose(logits[:, 0], changed[:, 0])

    params = dict(variables["params"])
    layers = [params.pop(f"layer_{i}") for i in range(c["n_layer"])]
    params["layer"] = jax.tree.map(lambda *xs: jnp.stack(xs), *layers)
    scanned = Bert(scan_layers=True, **c)
    assert jnp.allclose(jax.jit(scanned.apply)({"params": params}, tokens), logits, atol=1e-5)
