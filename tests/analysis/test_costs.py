"""The matrix products' share of a phase (`PhaseCosts.matmul_flops`/`matmul_bytes`),
from OneNet's closed form (seed 001: 1 -> 4096 -> 128 -> 10, ReLU)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

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
