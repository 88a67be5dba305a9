"""The matrix products' share of a phase (`PhaseCosts.matmul_flops`/`matmul_bytes`),
from OneNet's closed form (seed 001: 1 -> 4096 -> 128 -> 10, ReLU), and the attention's
(`PhaseCosts.attention_flops`) from a Flax attention's shapes."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost.count.interpret import count_jaxpr
from xla_cost.zoo import build_model, example_inputs

B = 8
DENSE = [(1, 4096), (4096, 128), (128, 10)]


def test_matmul_flops_and_bytes_of_a_dense_stack():
    report = xla_cost.analyze(build_model("one_net"), jax.ShapeDtypeStruct((B, 1), jnp.float32),
                              optimizer="sgd", counter="jaxpr")
    # one B x n @ n x m product per layer; the first contracts over n = 1 input feature,
    # which XLA (and the rules) count as one multiply per output, not a multiply-add
    forward = B * 1 * 4096 + sum(2 * B * n * m for n, m in DENSE[1:])
    # backward: the weight gradient of every layer (n x B @ B x m), the input gradient of all
    # but the first (B x m @ m x n, jax.grad w.r.t. parameters only)
    backward = sum(2 * B * n * m for n, m in DENSE) + sum(2 * B * n * m for n, m in DENSE[1:])
    phases = report.phases
    assert phases["forward"].matmul_flops == forward
    assert phases["backward"].matmul_flops == backward
    assert phases["update"].matmul_flops == 0
    # float32 operands and result of each forward product: B*n + n*m + B*m elements
    assert phases["forward"].matmul_bytes == sum(4 * (B * n + n * m + B * m) for n, m in DENSE)
    assert phases["forward"].matmul_flops < phases["forward"].jaxpr_flops  # ReLU, bias, loss: the rest
    assert report.to_dict()["matmul_flops"]["grad"] == forward + backward
    assert xla_cost.Report.from_dict(report.to_dict()).phases["grad"].matmul_bytes == phases["grad"].matmul_bytes


class _WithToken(nn.Module):
    """A module with a parameter of its own (a ViT's ``cls`` token) around a causal attention."""

    @nn.compact
    def __call__(self, x):
        x = x + self.param("cls", nn.initializers.zeros, (1, 1, x.shape[-1]))
        x = nn.MultiHeadDotProductAttention(num_heads=2)(x, x, mask=nn.make_causal_mask(x[..., 0]))
        return nn.Dense(10)(x.mean(1))


class _Tower(nn.Module):
    """The token's module one level down (LiT's image tower inside its two-tower model)."""

    @nn.compact
    def __call__(self, x):
        return _WithToken()(x)


@pytest.mark.parametrize("model", [_WithToken(), _Tower()], ids=["root", "wrapped"])
def test_attention_below_a_module_with_its_own_parameter_is_attention(model):
    b, t, d = 2, 8, 16
    x = jax.ShapeDtypeStruct((b, t, d), jnp.float32)
    full = xla_cost.analyze(model, x, optimizer="sgd", counter="jaxpr")
    causal = xla_cost.analyze(model, x, optimizer="sgd", counter="jaxpr", attention_flops="causal")
    attention = 2 * (2 * b * t * t * d)  # scores q k^T and outputs p v: 2·B·T·T·D each
    assert full.phases["forward"].attention_flops == attention
    assert full.phases["forward"].model_flops - causal.phases["forward"].model_flops == attention // 2


def test_causal_attention_flops_with_no_attention_found_says_it_changes_nothing():
    # jax-llm-examples' qwen3 forward: attention_flops read 0, and the causal note said "0 FLOP fewer than
    # computed" without saying no attention was found. A model without attention (an MLP over a params pytree):
    # causal halves nothing, and the note says so
    b, d, f = 4, 8, 16
    params = {"fc1": {"w": jax.ShapeDtypeStruct((d, f), jnp.float32)}, "fc2": {"w": jax.ShapeDtypeStruct((f, d),
                                                                                                          jnp.float32)}}

    def mlp(params, x):
        return jnp.tanh(x @ params["fc1"]["w"]) @ params["fc2"]["w"]

    x = jax.ShapeDtypeStruct((b, d), jnp.float32)
    full = xla_cost.analyze(mlp, x, params=params, optimizer="sgd", counter="jaxpr")
    causal = xla_cost.analyze(mlp, x, params=params, optimizer="sgd", counter="jaxpr", attention_flops="causal")
    assert causal.phases["forward"].model_flops == full.phases["forward"].model_flops  # 2·B·D·F·2 + B·F, as computed
    [note] = [n for n in causal.notes if n.startswith("attention_flops causal")]
    assert "no attention products found" in note and "causal changes nothing" in note


# Pure JAX attention (no modules: jax-llm-examples' qwen3, a jax.named_scope around einsums) read
# attention_flops 0, and attention_flops="causal" halved nothing. Tiny GQA shapes:
B_, T_, D_, H_, KV_, DH_, L_ = 2, 8, 16, 4, 2, 8, 2


def _attention_params():
    w = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)  # noqa: E731
    return {"layers": [{"wq": w(D_, H_ * DH_), "wk": w(D_, KV_ * DH_), "wv": w(D_, KV_ * DH_),
                        "wo": w(H_ * DH_, D_)} for _ in range(L_)]}


def _gqa_einsum(q, k, v):
    """qwen3's attention: the query heads grouped over the key heads, a causal mask, a softmax."""
    q = q.reshape(B_, T_, KV_, H_ // KV_, DH_)
    scores = jnp.einsum("btkgh,bskh->bkgts", q, k) / jnp.sqrt(DH_)
    scores = jnp.where(jnp.tril(jnp.ones((T_, T_), bool)), scores, -1e9)
    return jnp.einsum("bkgts,bskh->btkgh", jax.nn.softmax(scores, axis=-1), v).reshape(B_, T_, H_ * DH_)


def _dot_product_attention(q, k, v):
    return jax.nn.dot_product_attention(q.reshape(B_, T_, H_, DH_), k, v, is_causal=True).reshape(B_, T_, H_ * DH_)


@pytest.mark.parametrize("core", [_gqa_einsum, _dot_product_attention], ids=["einsum", "dot_product_attention"])
def test_pure_jax_attention_is_found_by_its_data_flow(core):
    def model(params, x):
        for layer in params["layers"]:
            with jax.named_scope("attention"):
                k = (x @ layer["wk"]).reshape(B_, T_, KV_, DH_)
                v = (x @ layer["wv"]).reshape(B_, T_, KV_, DH_)
                x = x + core(x @ layer["wq"], k, v) @ layer["wo"]
        return x

    x = jax.ShapeDtypeStruct((B_, T_, D_), jnp.float32)
    full = xla_cost.analyze(model, x, params=_attention_params(), optimizer="sgd", counter="jaxpr")
    causal = xla_cost.analyze(model, x, params=_attention_params(), optimizer="sgd", counter="jaxpr",
                              attention_flops="causal")
    forward = L_ * 2 * (2 * B_ * H_ * T_ * T_ * DH_)  # per layer q k^T and p v, 2·B·H·T·T·dh each
    assert full.phases["forward"].attention_flops == forward
    assert full.phases["backward"].attention_flops == 2 * forward  # dP, dV, dQ, dK
    assert full.phases["update"].attention_flops == 0
    assert full.phases["forward"].model_flops - causal.phases["forward"].model_flops == forward // 2


# attention_flops="causal" halved every attention found, T5's encoder self-attention and its cross-attention
# too (t5x's T5, B 2 H 4 T 16 dh 8: 196,608 FLOP removed a forward pass, 65,536 expected). Only an attention
# whose scores a causal mask masks is halved. A tiny encoder-decoder, padding masks from the int tokens:
B2, S2, T2, D2, H2, DH2, V2 = 2, 6, 8, 16, 2, 8, 32


def _encdec_params():
    w = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)  # noqa: E731
    block = lambda: {n: w(D2, H2 * DH2) for n in "qkv"} | {"o": w(H2 * DH2, D2)}  # noqa: E731
    return {"emb": w(V2, D2), "enc": block(), "dec": block(), "cross": block()}


def _attend(p, x, y, keep=None, bias=None):
    b, t, s = x.shape[0], x.shape[1], y.shape[1]
    q, k, v = ((z @ p[n]).reshape(b, z.shape[1], H2, DH2) for n, z in (("q", x), ("k", y), ("v", y)))
    scores = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(DH2)
    scores = scores if keep is None else jnp.where(keep, scores, jnp.finfo(scores.dtype).min)
    scores = scores if bias is None else scores + bias
    return x + jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, -1), v).reshape(b, t, H2 * DH2) @ p["o"]


def _encdec(params, src, tgt):
    pad = (src > 0)[:, None, None, :]  # the encoder's padding, from its tokens: the data's mask, not causal
    enc = _attend(params["enc"], params["emb"][src], params["emb"][src], pad)
    causal = jnp.arange(T2)[:, None] >= jnp.arange(T2)[None, :]  # and the decoder's padding with it
    keep = causal[None, None] & (tgt > 0)[:, None, None, :]
    dec = _attend(params["dec"], params["emb"][tgt], params["emb"][tgt], keep)
    return _attend(params["cross"], dec, enc, pad) @ params["emb"].T


def test_causal_halves_the_decoders_self_attention_alone():
    src, tgt = jax.ShapeDtypeStruct((B2, S2), jnp.int32), jax.ShapeDtypeStruct((B2, T2), jnp.int32)
    kw = dict(params=_encdec_params(), call_kwargs={"tgt": tgt}, optimizer="sgd", counter="jaxpr")
    full = xla_cost.analyze(_encdec, src, **kw)
    causal = xla_cost.analyze(_encdec, src, attention_flops="causal", **kw)
    pairs = lambda t, s: 2 * (2 * B2 * H2 * t * s * DH2)  # noqa: E731 - q k^T and p v, 2·B·H·T·S·dh each
    encoder, decoder, cross = pairs(S2, S2), pairs(T2, T2), pairs(T2, S2)
    assert full.phases["forward"].attention_flops == encoder + decoder + cross
    removed = {ph: full.phases[ph].model_flops - causal.phases[ph].model_flops for ph in ("forward", "train_step")}
    assert removed == {"forward": decoder // 2, "train_step": 3 * decoder // 2}  # backward: two products per one
    [note] = [n for n in causal.notes if n.startswith("attention_flops causal")]
    assert f"{3 * decoder // 2:,} FLOP fewer a step" in note
    assert f"{3 * (encoder + cross):,} FLOP of attention not causally masked" in note


def test_causal_leaves_a_padding_masked_bidirectional_attention_whole():
    # the padding mask from the tokens added as a large negative bias (T5's form): no causal mask, nothing halved
    def encoder(params, src):
        bias = jnp.where((src > 0)[:, None, None, :], 0.0, -1e10)
        x = params["emb"][src]
        return _attend(params["enc"], x, x, bias=bias) @ params["emb"].T

    src = jax.ShapeDtypeStruct((B2, S2), jnp.int32)
    kw = dict(params=_encdec_params(), optimizer="sgd", counter="jaxpr")
    full = xla_cost.analyze(encoder, src, **kw)
    causal = xla_cost.analyze(encoder, src, attention_flops="causal", **kw)
    forward = 2 * (2 * B2 * H2 * S2 * S2 * DH2)  # q k^T and p v, 2·B·H·S·S·dh each
    assert full.phases["forward"].attention_flops == forward
    assert causal.model_flops == full.model_flops
    [note] = [n for n in causal.notes if n.startswith("attention_flops causal")]
    assert f"{3 * forward:,} FLOP of attention not causally masked" in note


def test_causal_halves_an_attention_whose_mask_is_passed_in_and_says_so():
    # a bias argument: the data flow cannot see whether it is causal; halved (the convention asked for), noted
    def decoder(params, tgt, bias):
        x = params["emb"][tgt]
        return _attend(params["dec"], x, x, bias=bias) @ params["emb"].T

    tgt, bias = jax.ShapeDtypeStruct((B2, T2), jnp.int32), jax.ShapeDtypeStruct((B2, 1, T2, T2), jnp.float32)
    kw = dict(params=_encdec_params(), call_kwargs={"bias": bias}, optimizer="sgd", counter="jaxpr")
    full = xla_cost.analyze(decoder, tgt, **kw)
    causal = xla_cost.analyze(decoder, tgt, attention_flops="causal", **kw)
    step = 3 * 2 * (2 * B2 * H2 * T2 * T2 * DH2)  # forward q k^T and p v, 2·B·H·T·T·dh each; backward twice that
    assert full.model_flops - causal.model_flops == step // 2
    [note] = [n for n in causal.notes if n.startswith("attention_flops causal")]
    assert f"{step:,} of those halved are of attention whose mask is passed in" in note


# attention_flops="causal" counted a sliding-window layer as a global one, whatever its window (EasyDeL's Gemma 3:
# 65,536 of 131,072 forward FLOP kept for W = 16, 8 and 2). A mask from iotas alone is evaluated: a causal mask
# keeps the pairs it allows less half its diagonal, of T² (a plain causal mask: half, as before).
B3, T3, H3, DH3 = 2, 16, 4, 16


def _windowed(window, padded=False):
    def model(params, x, tokens):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, params[n]) for n in ("wq", "wk", "wv"))
        scores = jnp.einsum("bqhe,bkhe->bhqk", q, k)
        i, j = jnp.arange(T3)[:, None], jnp.arange(T3)[None, :]
        mask = (i >= j) & (i - j < window)  # causal, a sliding window of `window` keys
        mask = mask[None, None] & (tokens > 0)[:, None, None, :] if padded else mask  # the tokens' padding too
        p = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
        return jnp.einsum("bhqk,bkhe->bqhe", p, v).reshape(B3, T3, H3 * DH3)
    return model


def _window_kept(window):
    """Forward attention FLOP the causal convention keeps: scores and outputs, 2·B·H·dh per pair each, over the
    pairs a window of W < T allows (T W - W (W - 1) / 2) less half the diagonal (T / 2); half of T² for W >= T."""
    pairs = T3 * T3 / 2 if window >= T3 else T3 * window - window * (window - 1) / 2 - T3 / 2
    return int(2 * (2 * B3 * H3 * DH3) * pairs)


@pytest.mark.parametrize("window,padded", [(T3, False), (T3 // 2, False), (2, False), (4, True)])
def test_causal_keeps_the_pairs_a_sliding_window_allows(window, padded):
    params = {n: jax.ShapeDtypeStruct((H3 * DH3, H3, DH3), jnp.float32) for n in ("wq", "wk", "wv")}
    x = jax.ShapeDtypeStruct((B3, T3, H3 * DH3), jnp.float32)
    kw = dict(params=params, call_kwargs={"tokens": jax.ShapeDtypeStruct((B3, T3), jnp.int32)}, optimizer="sgd",
              counter="jaxpr")
    full = xla_cost.analyze(_windowed(window, padded), x, **kw)
    causal = xla_cost.analyze(_windowed(window, padded), x, attention_flops="causal", **kw)
    forward = 2 * (2 * B3 * H3 * T3 * T3 * DH3)  # q k^T and p v, 2·B·H·T·T·dh each
    assert full.phases["forward"].attention_flops == forward
    kept = _window_kept(window)
    assert full.phases["forward"].model_flops - causal.phases["forward"].model_flops == forward - kept
    assert full.model_flops - causal.model_flops == 3 * (forward - kept)  # the backward: two products per one
    [note] = [n for n in causal.notes if n.startswith("attention_flops causal")]
    assert (f"sliding window of {window} keys ({T3} x {T3}): {3 * kept:,} FLOP kept of {3 * forward:,}" in note) \
        == (window < T3)
    assert f"{3 * (forward - kept):,} FLOP fewer a step" in note


def test_causal_halves_a_sliding_window_too_large_to_evaluate_and_says_so(monkeypatch):
    from xla_cost.count import mask_values

    monkeypatch.setattr(mask_values, "EVALUATED_LARGEST", T3 * T3 - 1)  # the T x T mask is past the bound
    params = {n: jax.ShapeDtypeStruct((H3 * DH3, H3, DH3), jnp.float32) for n in ("wq", "wk", "wv")}
    x = jax.ShapeDtypeStruct((B3, T3, H3 * DH3), jnp.float32)
    kw = dict(params=params, call_kwargs={"tokens": jax.ShapeDtypeStruct((B3, T3), jnp.int32)}, optimizer="sgd",
              counter="jaxpr")
    full = xla_cost.analyze(_windowed(2), x, **kw)
    causal = xla_cost.analyze(_windowed(2), x, attention_flops="causal", **kw)
    step = 3 * 2 * (2 * B3 * H3 * T3 * T3 * DH3)  # forward q k^T and p v, 2·B·H·T·T·dh each; backward twice that
    assert full.model_flops - causal.model_flops == step // 2
    [note] = [n for n in causal.notes if n.startswith("attention_flops causal")]
    assert f"a causal mask not evaluated: a value of {T3 * T3:,} elements" in note
    assert f"halved, {step // 2:,} FLOP kept of {step:,}" in note


def test_causal_keeps_a_local_layers_window_and_halves_a_global_one():
    # the zoo's Gemma 2: a local layer (a window of W keys) and a global one, scanned as one pair
    b, t, heads, dh, window = 2, 16, 4, 32, 6
    config = dict(vocab_size=128, seq_len=t, n_layer=2, d_model=64, n_head=heads, n_kv_head=2, d_ff=96,
                  head_dim=dh, local_window=window)
    args = (build_model("gemma2-2b", **config), example_inputs("gemma2-2b", b, **config))
    full = xla_cost.analyze(*args, optimizer="sgd", counter="jaxpr")
    causal = xla_cost.analyze(*args, optimizer="sgd", counter="jaxpr", attention_flops="causal")
    layer = 2 * (2 * b * heads * t * t * dh)  # q k^T and p v, 2·B·N·T·T·H each, per layer forward
    assert full.phases["forward"].attention_flops == 2 * layer
    kept = 2 * (2 * b * heads * dh) * (t * window - window * (window - 1) // 2 - t // 2)  # the local layer's
    assert full.phases["forward"].model_flops - causal.phases["forward"].model_flops == layer // 2 + layer - kept
    assert full.model_flops - causal.model_flops == 3 * (layer // 2 + layer - kept)


def test_causal_halves_the_zoo_gpt_as_before():
    # a plain causal mask (j <= i) evaluated keeps half, as MaxText's convention: no window, no note of one
    layers, t, d, b = 2, 16, 64, 2
    small = dict(n_layer=layers, seq_len=t, d_model=d, n_head=4, vocab_size=128)
    args = (build_model("gpt2-small", **small), example_inputs("gpt2-small", b, **small))
    full = xla_cost.analyze(*args, optimizer="sgd", counter="jaxpr")
    causal = xla_cost.analyze(*args, optimizer="sgd", counter="jaxpr", attention_flops="causal")
    forward = layers * 2 * (2 * b * t * t * d)  # scores q k^T and outputs p v, 2·B·T²·D each per layer
    assert full.model_flops - causal.model_flops == 3 * forward // 2
    [note] = [n for n in causal.notes if n.startswith("attention_flops causal")]
    assert "window" not in note and "not evaluated" not in note


def test_moe_products_between_activations_are_not_attention():
    # an MoE layer: a softmax router, einsum dispatch and combine (products between activations batched over
    # B, the combine's weights a softmax), experts batched over E and their weight gradients x_e^T dy_e: no attention
    b, t, d, f, e, c = 2, 8, 16, 32, 4, 4
    w = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)  # noqa: E731
    params = {"router": w(d, e), "w1": w(e, d, f), "w2": w(e, f, d)}

    def moe(params, x):
        gates = jax.nn.softmax(x @ params["router"], axis=-1)  # [b, t, e]
        slot = jax.nn.one_hot(jnp.arange(t) % c, c)[None, :, None]  # token t's slot in its expert
        slots = jax.nn.one_hot(jnp.argmax(gates, -1), e)[..., None] * slot  # [b, t, e, c]
        xe = jnp.einsum("btd,btec->becd", x, slots)  # dispatch, batched over b
        h = jax.nn.gelu(jnp.einsum("becd,edf->becf", xe, params["w1"]))
        ye = jnp.einsum("becf,efd->becd", h, params["w2"])
        return jnp.einsum("becd,btec->btd", ye, slots * gates[..., None])  # combine, weighted by the gates

    x = jax.ShapeDtypeStruct((b, t, d), jnp.float32)
    report = xla_cost.analyze(moe, x, params=params, optimizer="sgd", counter="jaxpr")
    assert all(phase.attention_flops == 0 for phase in report.phases.values())


class _SinkAttention(nn.Module):
    """gpt-oss's attention: a parameter of its own (a sink logit per head) joins the softmax."""

    @nn.compact
    def __call__(self, x):
        q, k, v = (nn.DenseGeneral((H_, DH_), name=n)(x) for n in "qkv")
        sinks = jnp.broadcast_to(self.param("sinks", nn.initializers.zeros, (H_,))[None, :, None, None],
                                 (B_, H_, T_, 1))
        scores = jnp.concatenate([jnp.einsum("bthd,bshd->bhts", q, k), sinks], -1)
        o = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, -1)[..., :T_], v)
        return nn.DenseGeneral(D_, axis=(-2, -1), name="o")(o)


def test_attention_in_a_module_with_its_own_parameter_is_found_by_its_data_flow():
    report = xla_cost.analyze(_SinkAttention(), jax.ShapeDtypeStruct((B_, T_, D_), jnp.float32), optimizer="sgd",
                              counter="jaxpr")
    forward = 2 * (2 * B_ * H_ * T_ * T_ * DH_)  # q k^T and p v, 2·B·H·T·T·dh each
    assert report.phases["forward"].attention_flops == forward
    assert report.phases["backward"].attention_flops == 2 * forward


# Attention normalised without a softmax's exp read attention_flops 0: sigmoid attention (Apple 2024, "Theory,
# Analysis, and Best Practices for Sigmoid Self-Attention": P = sigmoid(Q K^T / sqrt(dh) + b), jax.nn.sigmoid's
# `logistic`) and ReLU attention (P = relu(Q K^T / sqrt(dh)) / T). Each layer is that attention beside an MoE layer
# (an RMSNorm squaring the residual stream the previous combine wrote; einsum dispatch and combine from a
# router's softmax over the experts and its top-1; experts whose nonlinearity is the same normaliser: SiLU's
# logistic, ReLU's max): the attention alone is attention.
_NORMALISERS = {"sigmoid": lambda s: jax.nn.sigmoid(s - jnp.log(T_)), "relu": lambda s: jax.nn.relu(s) / T_}
_ACTIVATIONS = {"sigmoid": jax.nn.silu, "relu": jax.nn.relu}
E_, C_, F_ = 4, 4, 32  # experts, capacity (tokens per expert), expert hidden size


def _attention_and_moe(normaliser):
    score, act = _NORMALISERS[normaliser], _ACTIVATIONS[normaliser]

    def model(params, x):
        for layer in params["layers"]:
            with jax.named_scope("attention"):
                q = (x @ layer["wq"]).reshape(B_, T_, H_, DH_)
                k, v = ((x @ layer[w]).reshape(B_, T_, KV_, DH_).repeat(H_ // KV_, axis=2) for w in ("wk", "wv"))
                s = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(DH_) + layer["bias"]
                p = jnp.where(jnp.tril(jnp.ones((T_, T_), bool)), score(s), 0.0)
                x = x + jnp.einsum("bhts,bshd->bthd", p, v).reshape(B_, T_, H_ * DH_) @ layer["wo"]
            with jax.named_scope("moe"):
                x = x * jax.lax.rsqrt(jnp.maximum(jnp.mean(x ** 2, -1, keepdims=True), 1e-6))  # RMSNorm: x², max
                gates = jax.nn.softmax(x @ layer["router"], axis=-1)  # [b, t, e]: over the experts
                slot = jax.nn.one_hot(jnp.arange(T_) % C_, C_)[None, :, None]  # token t's slot in its expert
                slots = jax.nn.one_hot(jnp.argmax(gates, -1), E_)[..., None] * slot  # [b, t, e, c]
                xe = jnp.einsum("btd,btec->becd", x, slots)  # dispatch
                ye = jnp.einsum("becf,efd->becd", act(jnp.einsum("becd,edf->becf", xe, layer["w1"])), layer["w2"])
                x = x + jnp.einsum("becd,btec->btd", ye, slots * gates[..., None])  # combine
        return x

    w = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)  # noqa: E731
    params = _attention_params()
    for layer in params["layers"]:
        layer.update(bias=w(), router=w(D_, E_), w1=w(E_, D_, F_), w2=w(E_, F_, D_))
    return model, params


@pytest.mark.parametrize("normaliser", sorted(_NORMALISERS))
def test_attention_normalised_without_a_softmax_is_attention_and_an_moe_beside_it_is_not(normaliser):
    model, params = _attention_and_moe(normaliser)
    x = jax.ShapeDtypeStruct((B_, T_, D_), jnp.float32)
    report = xla_cost.analyze(model, x, params=params, optimizer="sgd", counter="jaxpr")
    forward = L_ * 2 * (2 * B_ * H_ * T_ * T_ * DH_)  # per layer q k^T and p v, 2·B·H·T·T·dh each
    assert report.phases["forward"].attention_flops == forward
    assert report.phases["backward"].attention_flops == 2 * forward  # dP, dV, dQ, dK
    # no input named a weight (every one data): the experts' x_e W1 (W1 an input, no projection) is no score
    loss = lambda params, x: model(params, x).sum()  # noqa: E731
    counted = count_jaxpr(jax.make_jaxpr(jax.grad(loss))(params, x))
    assert counted.total.attention == 3 * forward


# Queries computed from parameters alone: learned queries (DETR's object queries, Perceiver's latents, a
# Q-Former's query tokens) broadcast over the batch, projected, attend to the data. attention_flops was 0 (a
# product of a parameter's projection was no product between activations); a raw weight (an MoE's router and
# experts above, a Dense layer's kernel here) stays a weight.
LQ_B, LQ_S, LQ_Q, LQ_D, LQ_H = 2, 16, 8, 32, 4  # batch, image tokens, queries, width, heads


class _LearnedQueries(nn.Module):
    """Learned queries, broadcast over the batch, cross-attend to the image tokens."""

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(LQ_D)(x)
        queries = self.param("queries", nn.initializers.normal(1.0), (LQ_Q, LQ_D))
        q = jnp.broadcast_to(queries[None], (x.shape[0], LQ_Q, LQ_D))
        return nn.Dense(10)(nn.MultiHeadDotProductAttention(num_heads=LQ_H)(q, x))


class _DetrFirstDecoderLayer(nn.Module):
    """DETR's first decoder layer: its target is zeros and its queries the learned query embedding added to
    them, so its self-attention's q, k and v all come from parameters alone; then it cross-attends to the data."""

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(LQ_D)(x)
        query_pos = self.param("query_pos", nn.initializers.normal(1.0), (1, LQ_Q, LQ_D))
        target = jnp.zeros((x.shape[0], LQ_Q, LQ_D))
        y = target + nn.MultiHeadDotProductAttention(num_heads=LQ_H)(target + query_pos, target + query_pos, target)
        y = nn.LayerNorm()(y)
        return nn.Dense(10)(nn.MultiHeadDotProductAttention(num_heads=LQ_H)(y + query_pos, x))


@pytest.mark.parametrize("model", ["cross", "detr"])
def test_attention_whose_queries_come_from_parameters_alone_is_attention(model):
    module = _LearnedQueries() if model == "cross" else _DetrFirstDecoderLayer()
    report = xla_cost.analyze(module, jax.ShapeDtypeStruct((LQ_B, LQ_S, LQ_D), jnp.float32), optimizer="sgd",
                              counter="jaxpr")
    cross = 2 * (2 * LQ_B * LQ_Q * LQ_S * LQ_D)  # q k^T and p v over Q x S pairs, 2·B·H·Q·S·dh = 2·B·Q·S·D each
    own = 2 * (2 * LQ_B * LQ_Q * LQ_Q * LQ_D)  # DETR's self-attention of the queries, over Q x Q pairs
    forward = cross + (own if model == "detr" else 0)
    assert report.phases["forward"].attention_flops == forward
    assert report.phases["backward"].attention_flops == 2 * forward  # dP, dV, dQ, dK


class _Dropout(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dropout(0.1, deterministic=False)(nn.Dense(16)(x))


def _random_figures(note: str) -> tuple[int, int]:
    """(the threefry hash's FLOP, the FLOP more it runs than are counted) a random-number note states."""
    import re

    drawn = re.search(r"threefry hash \(([\d,]+) FLOP", note).group(1)
    hidden = re.search(r"up to ([\d,]+) FLOP more", note).group(1)
    return int(drawn.replace(",", "")), int(hidden.replace(",", ""))


def test_the_random_number_note_states_its_figures_per_device_on_a_mesh():
    # on mesh={'data': 2} the note gave the whole step's threefry FLOP beside one device's uncounted ones
    from xla_cost.analysis.costs import THREEFRY_UNROLLED_WORD_OPS, THREEFRY_WORD_OPS

    x = jax.ShapeDtypeStruct((8, 16), jnp.float32)
    whole = xla_cost.analyze(_Dropout(), x, optimizer="sgd", counter="jaxpr")
    sharded = xla_cost.analyze(_Dropout(), x, optimizer="sgd", mesh={"data": 2})
    [one] = [n for n in whole.notes if n.startswith("forward: random numbers")]
    [each] = [n for n in sharded.notes if n.startswith("forward: random numbers")]
    drawn, hidden = _random_figures(each)
    assert "per device" in each and abs(2 * drawn - _random_figures(one)[0]) <= 1  # each device draws its half
    # the loop unrolled runs 117 operations a word where its body once counts 41: both figures one device's
    assert abs(hidden - (THREEFRY_UNROLLED_WORD_OPS / THREEFRY_WORD_OPS - 1) * drawn) <= 2


def test_analyze_steps_random_number_notes_share_the_step_and_its_parts_basis():
    # a step whose batch is split over 2 devices: the train_step's note was one device's, its forward's (the
    # jaxpr's part, shown shared out over the devices) the whole step's, twice as much for the same bits
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(jax.devices()[:2], ("data",))
    d, b = 16, 8

    def step(w, x, key):
        def loss(w):
            h = x @ w
            return jnp.mean(jnp.where(jax.random.bernoulli(key, 0.9, h.shape), h, 0.0) ** 2)

        return w - 0.1 * jax.grad(loss)(w)

    args = jax.ShapeDtypeStruct((d, d), jnp.float32), jax.ShapeDtypeStruct((b, d), jnp.float32), jax.random.key(0)
    report = xla_cost.analyze_step(jax.jit(step, in_shardings=(None, NamedSharding(mesh, P("data")), None)), *args)
    assert report.devices == 2
    notes = {n.split(":")[0]: _random_figures(n) for n in report.notes if ": random numbers counted" in n}
    assert notes["forward"] == notes["train_step"]  # the mask is drawn in the forward: the same bits, one device's
