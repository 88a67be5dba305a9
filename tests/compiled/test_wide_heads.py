"""cuDNN's fused attention of heads wider than 128 on a Hopper target (issue 51).

jax's check (jax/_src/cudnn/fused_attention_stablehlo.py, ``check_is_flash_attention``)
takes heads up to 256 on a GPU of compute capability 9.0 or later and 128 before, asking
the attached GPU; a deviceless compile has none, so `xla_cost.compiled.targets.use`
answers for the target's. Nemotron-4 340B's heads of 192 compile for an H100 (one cuDNN
call each way); an A100 (8.0) refuses them in one line.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from xla_cost.analysis import programs
from xla_cost.compiled import kernels, targets
from xla_cost.errors import InputError
from xla_cost.timemodel.devices import target
from xla_cost.zoo import build_model, example_inputs

B, T, N, K, H = 1, 128, 2, 1, 192  # batch, positions, query heads, key/value heads, Nemotron-4 340B's head
CONFIG = dict(vocab_size=128, seq_len=T, n_layer=1, n_head=N, n_kv_head=K, d_model=N * H, d_ff=256,
              gated_mlp=False, activation="relu", attention="fused", scan_layers=False)


def _grad(device: str) -> str:
    model = build_model("llama3-8b", dtype="bfloat16", **CONFIG)
    inputs = example_inputs("llama3-8b", B, dtype="bfloat16", **CONFIG)
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)

    def loss(p, x):
        return model.apply(p, x).astype(jnp.float32).mean()

    with targets.use(target(device)):
        return jax.jit(jax.grad(loss), **programs.placement()).lower(variables, inputs).compile().as_text()


def test_heads_of_192_are_cudnn_fused_attention_on_an_h100_and_refused_on_an_a100():
    listed = kernels.kernel_list(_grad("h100"))
    # one fused call forward, one backward: no T x T scores written out
    fused = sorted(k.name.rsplit(".", 1)[0] for k in listed if "dot_product_attention" in k.name)
    assert fused == ["dot_product_attention_bwd", "dot_product_attention_fwd"]
    with pytest.raises(InputError) as refused:
        _grad("a100")
    assert "\n" not in str(refused.value) and "192" in str(refused.value)
