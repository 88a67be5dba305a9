"""A scatter that updates its buffer in place moves its updates, not its buffer (issue 51).

The gradient of ``take_along_axis`` over a language model's logits is a
scatter-add of one element a token into the ``[tokens, vocabulary]`` gradient,
which XLA fuses onto the softmax's gradient and runs in place (its dataflow
analysis pairs a scatter's buffer with its result): an H100 ran GPT-2's
(8,192 tokens into ``f32[8, 1024, 50257]``) in 1.7 µs
(``reports/data/kernels_nvidia-h100-80gb-hbm3_2026-11-26-2.csv``,
``input_scatter_fusion_2``), where its operand and result whole are 3.3 GB.
Counted whole, the logits were priced twice more per step than they are moved.
A tiny loss compiled for the H100 (deviceless, about a second): the scatter's
kernel reads each token's index, and reads and writes each token's element.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from xla_cost import plugins
from xla_cost.compiled import kernels
from xla_cost.timemodel.devices import target

TOKENS, VOCABULARY = 256, 4096
F32, S32 = 4, 4  # bytes per element


@pytest.fixture(scope="module")
def listed():
    if plugins.cuda_plugin() is None:
        pytest.skip("the gpu extra (jax's CUDA plugin) is not installed")
    placement = target("h100").placement()

    def loss(logits, targets):
        chosen = jnp.take_along_axis(jax.nn.log_softmax(logits), targets[:, None], axis=-1)
        return -chosen.sum()

    args = (jax.ShapeDtypeStruct((TOKENS, VOCABULARY), jnp.float32, sharding=placement),
            jax.ShapeDtypeStruct((TOKENS,), jnp.int32, sharding=placement))
    text = jax.jit(jax.grad(loss)).lower(*args).compile().as_text()
    return text, kernels.kernel_list(text)


def test_the_logits_scatter_moves_its_tokens_elements_not_the_logits(listed):
    text, found = listed
    scatters = [k for k in found if "scatter" in k.name]
    assert len(scatters) == 1, [k.name for k in found]
    # in place: each token's index read, its element of the gradient read by the combiner and written
    assert scatters[0].bytes == TOKENS * (S32 + 2 * F32)
    # the buffer it updates is the whole gradient, written by the kernel before it
    assert f"f32[{TOKENS},{VOCABULARY}]" in text
    assert any(k.bytes is not None and k.bytes >= TOKENS * VOCABULARY * F32 for k in found if k is not scatters[0])
