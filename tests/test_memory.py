"""Saved activations: what the backward pass keeps, from the linearised forward's jaxpr.

Expected bytes are closed forms of the layer sizes written beside each test.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from xla_cost import memory

B = 4
WIDTHS = (12, 16, 8, 5)  # input, then the outputs of three Dense layers


class DenseStack(nn.Module):
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        for i, width in enumerate(WIDTHS[1:]):
            x = nn.Dense(width, dtype=self.dtype, param_dtype=self.dtype, name=f"fc{i}")(x)
        return x


def _saved(model: nn.Module, dtype) -> tuple[dict[str, int], int, int]:
    x = jax.ShapeDtypeStruct((B, WIDTHS[0]), dtype)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)

    def forward(p, inputs):
        return jnp.sum(model.apply(p, inputs)), None

    return memory.saved_activations(forward, params, (x,), root=type(model).__name__,
                                    modules=("fc0", "fc1", "fc2"))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
def test_dense_stack_keeps_the_input_of_each_matmul(dtype):
    by_layer, in_params, in_args = _saved(DenseStack(dtype=dtype), dtype)
    size = jnp.dtype(dtype).itemsize
    # fc1 and fc2 keep their inputs (B x 16 and B x 8) for their weight gradients;
    # fc0's input is the batch itself (an argument, not a new buffer)
    assert sum(by_layer.values()) == B * (WIDTHS[1] + WIDTHS[2]) * size
    # each kept array belongs to the layer that made it
    assert by_layer == {"fc0": B * WIDTHS[1] * size, "fc1": B * WIDTHS[2] * size}
    assert in_args == B * WIDTHS[0] * size
    # the input gradients need the weights of fc1 and fc2 (fc0's is not needed: no input gradient)
    assert in_params == (WIDTHS[1] * WIDTHS[2] + WIDTHS[2] * WIDTHS[3]) * size
