"""The matrix products' share of a phase (`PhaseCosts.matmul_flops`/`matmul_bytes`),
from OneNet's closed form (seed 001: 1 -> 4096 -> 128 -> 10, ReLU), and the attention's
(`PhaseCosts.attention_flops`) from a Flax attention's shapes."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost.zoo import build_model

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
    """A module with a parameter of its own (a ViT's ``cls`` token) around an attention."""

    @nn.compact
    def __call__(self, x):
        x = x + self.param("cls", nn.initializers.zeros, (1, 1, x.shape[-1]))
        x = nn.MultiHeadDotProductAttention(num_heads=2)(x, x)
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
