"""Gemma zoo family: published embedding and non-embedding parameters, the tied
head through ``embedder.attend``, local and global layers, dense and fused
attention, scanned pairs, remat.

Abstract throughout (`jax.eval_shape`, the jaxpr counter), but for one real run
of a tiny model that checks the sliding window's mask against the fused call's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import xla_cost
from xla_cost.zoo import build_model, count_parameters, example_inputs, get_spec
from xla_cost.zoo._transformer import attention

# (embedding, non-embedding) parameters as published. Gemma Team 2024a, "Gemma: Open
# Models Based on Gemini Research and Technology", Table 2 (configurations in its
# Table 1: 2B d 2048, 18 layers, 8 heads, 1 KV head (MQA), head 256, feedforward
# 32,768 = 2 x 16,384; 7B d 3072, 28 layers, 16 heads (MHA), 49,152 = 2 x 24,576;
# vocabulary 256,128). Gemma Team 2024b, "Gemma 2: Improving Open Language Models at
# a Practical Size", Table 2 (Table 1: 2B d 2304, 26 layers, 8 heads, 4 KV, 18,432;
# 9B d 3584, 42, 16, 8, 28,672; 27B d 4608, 46, 32, 16, head 128, 73,728). Exact
# figures: compared exactly. The embedding is the head too (tied), counted once.
PUBLISHED = {
    "gemma-2b": (524_550_144, 1_981_884_416),
    "gemma-7b": (786_825_216, 7_751_248_896),
    "gemma2-2b": (590_118_912, 2_024_517_888),
    "gemma2-9b": (917_962_752, 8_324_201_984),
    "gemma2-27b": (1_180_237_824, 26_047_480_320),
}

TINY = {"vocab_size": 128, "seq_len": 16, "n_layer": 4, "d_model": 64, "n_head": 4, "n_kv_head": 2, "d_ff": 96,
        "head_dim": 32, "local_window": 6}


def closed_form(c: dict) -> tuple[int, int]:
    """(V*d, L*(2*d*N*H + 2*d*K*H + 3*d*f + n*d) + d): the tied embedding, and per
    block q_proj and o_proj d*N*H, k_proj and v_proj d*K*H, gate, up and down d*f,
    n RMSNorms of d (2; Gemma 2's post-norms: 4), plus the final norm."""
    v, n_layer, d, n, k, h, f = (c[key] for key in ("vocab_size", "n_layer", "d_model", "n_head", "n_kv_head",
                                                    "head_dim", "d_ff"))
    norms = 4 if c["post_norms"] else 2
    return v * d, n_layer * (2 * d * n * h + 2 * d * k * h + 3 * d * f + norms * d) + d


def forward_matmul_flops(batch: int, c: dict) -> int:
    """2 FLOP per multiply-add: per token and layer d*(2N + 2K)*H + 3*d*f, the tied
    head d*V per token, and per sequence and layer q k^T and probs v, N*H*T*T
    each: local (windowed) layers mask with a select, so they compute all T*T
    pairs as the global ones do."""
    t, n_layer, d, n, k, h, f, v = (c[key] for key in ("seq_len", "n_layer", "d_model", "n_head", "n_kv_head",
                                                       "head_dim", "d_ff", "vocab_size"))
    weights = 2 * batch * t * (n_layer * (d * (2 * n + 2 * k) * h + 3 * d * f) + d * v)
    return weights + n_layer * 2 * 2 * batch * n * h * t * t


def _abstract(model, inputs):
    return jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)


def _count(batch: int, grad: bool = False, **config):
    model = build_model("gemma2-2b", **{**TINY, **config})
    inputs = example_inputs("gemma2-2b", batch, **{**TINY, **config})

    def loss(p, x):
        return model.apply(p, x).astype(jnp.float32).mean()

    return xla_cost.count_function(jax.grad(loss) if grad else loss, _abstract(model, inputs), inputs)


def _dots(count) -> int:
    return sum(e.cost.flops for e in count.equations if e.primitive == "dot_general")


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_parameter_counts(name):
    model = build_model(name)
    params = _abstract(model, example_inputs(name, 1))["params"]
    embedding = int(np.prod(params["embedder"]["embedding"].shape))
    total = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))
    assert (embedding, total - embedding) == PUBLISHED[name] == closed_form(get_spec(name).defaults)


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_the_familys_published_count_and_forward_closed_form_are_the_tests(name):
    # What the zoo page reads (ModelSpec.published, ModelSpec.forward_flops): the
    # family's table and closed form, against the figures and formula written here.
    spec = get_spec(name)
    assert spec.published.parameters == sum(PUBLISHED[name]) and spec.published.active is None
    assert spec.forward_flops(build_model(name)) == forward_matmul_flops(1, spec.defaults)
    assert spec.forward_flops(build_model(name, **TINY)) == forward_matmul_flops(1, {**get_spec(name).defaults, **TINY})


def test_tied_head_is_the_embedders_method_and_its_row():
    # The head's matmul (2*B*T*d*V) is traced under the embedding module's method
    # and lands in its row, with the lookup's sqrt(d) scaling.
    b, c = 2, {**TINY, "n_layer": 2}
    head = 2 * b * c["seq_len"] * c["d_model"] * c["vocab_size"]
    count = _count(b, n_layer=2)
    heads = [e for e in count.equations if e.primitive == "dot_general" and "embedder" in e.name_stack]
    assert sum(e.cost.flops for e in heads) == head
    model = build_model("gemma2-2b", **{**c, "scan_layers": False})
    report = xla_cost.analyze(model, example_inputs("gemma2-2b", b, **c), optimizer="sgd", counter="jaxpr",
                              per_layer=True)
    rows = {row.path: row for row in report.layers}
    assert head <= rows["embedder"].forward.flops <= 1.01 * head
    assert rows["embedder"].parameters == c["vocab_size"] * c["d_model"]


@pytest.mark.parametrize("name", ["gemma-2b", "gemma2-9b"])
def test_forward_matmul_flops_exact(name):
    # Gemma (MQA, global) and Gemma 2 (GQA, local and global) at tiny sizes.
    gemma2 = name.startswith("gemma2")
    config = {**TINY, "n_kv_head": 2 if gemma2 else 1, "local_window": 6 if gemma2 else 0}
    model = build_model(name, **config)
    inputs = example_inputs(name, 3, **config)
    count = xla_cost.count_function(lambda p, x: model.apply(p, x), _abstract(model, inputs), inputs)
    assert _dots(count) == forward_matmul_flops(3, config)
    assert not count.unsupported


def test_scanned_pairs_equal_unrolled_and_fused_equals_dense():
    assert count_parameters("gemma2-2b", scan_layers=False, **TINY) == sum(closed_form({**TINY, "post_norms": True}))
    scanned, unrolled = _count(2), _count(2, scan_layers=False)
    assert _dots(scanned) == _dots(unrolled) == forward_matmul_flops(2, TINY)
    fused = _count(2, attention="fused", attn_softcap=0.0)
    assert _dots(fused) == _dots(scanned)
    assert abs(fused.total.flops - scanned.total.flops) <= 0.01 * scanned.total.flops
    params = _abstract(build_model("gemma2-2b", **TINY), example_inputs("gemma2-2b", 1, **TINY))["params"]
    assert set(params["layers"]) == {"block_0", "block_1"}  # local, global
    assert params["layers"]["block_0"]["self_attn"]["q_proj"]["kernel"].shape == (2, 64, 4 * 32)


def test_sliding_window_and_gqa_dense_and_fused_compute_the_same():
    # Real numbers on tiny arrays: the dense path's causal window mask is the fused
    # call's local_window_size, 8 query heads share 2 key/value heads, and keys
    # further back than the window (6 positions) do not reach a query.
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(2, 12, 8, 16)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(2, 12, 2, 16)), jnp.float32) for _ in range(2))
    run = jax.jit(lambda q, k, v: [attention(q, k, v, implementation=i, causal=True, window=w)
                                   for w in (0, 6) for i in ("dense", "fused")])
    glob_dense, glob_fused, dense, fused = run(q, k, v)
    np.testing.assert_allclose(glob_dense, glob_fused, atol=1e-5)
    np.testing.assert_allclose(dense, fused, atol=1e-5)
    moved = run(q, k, v.at[:, 0].set(9.0))[2]
    np.testing.assert_allclose(moved[:, 6:], dense[:, 6:], atol=1e-6)
    assert not np.allclose(moved[:, 5], dense[:, 5])


def test_remat_recomputation():
    # Backward matmul FLOP beyond the plain model's: selective recomputes q k^T and
    # probs v (2*2*B*N*H*T*T per layer); full the whole block (Gemma 2's post-norm
    # reads down_proj's output, so it is recomputed too).
    b, c = 2, {**TINY, "n_layer": 2}
    scores = 2 * 2 * b * c["n_head"] * c["head_dim"] * c["seq_len"] ** 2
    block = forward_matmul_flops(b, c) - 2 * b * c["seq_len"] * c["d_model"] * c["vocab_size"]
    backward = {remat: _dots(_count(b, True, remat=remat, n_layer=2)) - forward_matmul_flops(b, c)
                for remat in ("none", "selective", "full")}
    assert backward["selective"] - backward["none"] == c["n_layer"] * scores
    assert backward["full"] - backward["none"] == block


def test_bad_options_are_one_line_errors():
    inputs = example_inputs("gemma2-2b", 1, **TINY)
    for bad, match in [({"attention": "fused"}, "soft-capped"), ({"n_layer": 3}, "even n_layer"),
                       ({"n_kv_head": 3}, "n_kv_head dividing n_head")]:
        with pytest.raises(xla_cost.InputError, match=match):
            _abstract(build_model("gemma2-2b", **{**TINY, "attn_softcap": 50.0, **bad}), inputs)
