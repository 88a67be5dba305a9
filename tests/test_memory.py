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


def test_report_memory_breakdown_parts_and_layers():
    import xla_cost
    from xla_cost.zoo import build_model, example_inputs

    report = xla_cost.analyze(build_model("one_net"), example_inputs("one_net", 8), optimizer="adam",
                              per_layer=True, memory=True)
    m = report.memory_breakdown
    p = report.parameters
    assert m.parameters == m.gradients == 4 * p  # float32
    assert m.optimizer_state == 2 * 4 * p + 4    # Adam's mu and nu, and its int32 step count
    # OneNet keeps fc1's output (after ReLU) for fc2 and fc2's for fc3: B x 4096 and
    # B x 128 float32, and the ReLU masks (bool), B x (4096 + 128), and the loss's own
    assert m.saved_activations >= 8 * (4096 + 128) * 4
    assert sum(layer.saved_activation_bytes for layer in report.layers) == m.saved_activations
    assert m.peak is not None and m.workspace == m.peak - m.parts_total
    back = xla_cost.Report.from_dict(report.to_dict())
    assert back.memory_breakdown == m
    assert "activations saved for the backward pass" in report.to_table(width=200)


def test_sharded_memory_is_per_device():
    import xla_cost
    from xla_cost.zoo import build_model, example_inputs

    if jax.device_count() < 8:
        pytest.skip("needs 8 simulated devices (tests/conftest.py)")
    one = xla_cost.analyze(build_model("one_net"), example_inputs("one_net", 8), optimizer="adam", memory=True)
    fsdp = xla_cost.analyze(build_model("one_net"), example_inputs("one_net", 8), optimizer="adam", memory=True,
                            mesh={"fsdp": 8})
    a, b = one.memory_breakdown, fsdp.memory_breakdown
    # FSDP: parameters, gradients and optimizer state split eight ways (to the byte, rounding up
    # per array, and the step count replicated); the batch and saved activations over the batch split
    assert b.parameters == pytest.approx(a.parameters / 8, rel=0.01)
    assert b.optimizer_state == pytest.approx(a.optimizer_state / 8, rel=0.01)
    assert b.saved_activations == -(-a.saved_activations // 8)
    assert b.devices == 8


def test_fit_returns_a_batch_that_fits_and_the_next_that_does_not():
    import xla_cost
    from xla_cost.zoo import build_model, example_inputs

    def peak(batch):
        report = xla_cost.analyze(build_model("one_net"), example_inputs("one_net", batch), optimizer="sgd",
                                  memory=True)
        return report.memory_breakdown.peak

    limit = peak(100)  # a CPU "device" exactly as large as the step at batch 100 needs
    result = xla_cost.max_batch_size("one_net", device_memory_bytes=limit, memory_fraction=1.0, optimizer="sgd")
    assert result.batch_size >= 100 and result.next_size == result.batch_size + 1
    # checked by compiling again through analyze(): the answer fits, the next size does not
    assert peak(result.batch_size) <= limit < peak(result.next_size)
    assert result.fits.peak <= limit < result.does_not_fit.peak
    with pytest.raises(xla_cost.InputError):
        xla_cost.max_batch_size("one_net", device="h900")
