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
