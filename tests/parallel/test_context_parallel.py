"""Context parallelism (`xla_cost.parallel.context`): a sequence split over the mesh's ``context`` axis.

A one-block Llama with fused attention (cuDNN's, as the runs' Transformer Engine) is analysed for a
deviceless H100 on ``context=2`` (one analysis: its forward, grad and update programs). Each device
holds half of each sequence's positions: its attention runs its ``T / 2`` queries against every
key, the keys and values all-gathered over the axis (and their gradients reduce-scattered back),
and that exchange is priced at the NVLink bus bandwidth NCCL measured for its message size. On
the CPU, a one-block Llama split over the axis computes the causal attention of the whole sequence.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import xla_cost
from xla_cost.count import attention
from xla_cost.parallel import context, sharding
from xla_cost.runs.scaling import predict
from xla_cost.timemodel import bus, schedule
from xla_cost.timemodel.hardware import Hardware
from xla_cost.step.workload import build_workload
from xla_cost.zoo import build_model, example_inputs

B, T, L, N, K, D, F, V = 2, 256, 1, 4, 2, 256, 512, 256
H = D // N  # head dimension: 64
C = 2  # the context-parallel devices
BF16 = 2  # bytes per element of the step's activations
CONFIG = dict(vocab_size=V, seq_len=T, n_layer=L, n_head=N, n_kv_head=K, d_model=D, d_ff=F, scan_layers=False)


@pytest.fixture(scope="module")
def report() -> xla_cost.Report:
    return xla_cost.analyze(
        build_model("llama3-8b", attention="fused", dtype="bfloat16", **CONFIG),
        example_inputs("llama3-8b", B, **CONFIG), optimizer="sgd", dtype="bfloat16", target="h100",
        mesh={"context": C},
    )


def _over_context(report: xla_cost.Report, kind: str) -> int:
    return sum(c.bytes * c.executions for c in report.phases["grad"].communication
               if c.axes == ("context",) and c.kind == kind)


def test_the_load_balanced_chunks():
    # 2 x C chunks of T / 2C positions, device i holding chunks i and 2C - 1 - i (Dubey et al. 2024, §3.3.2;
    # Megatron's get_batch_on_this_cp_rank): with C = 2 and 16 positions, chunks of 4 in the order 0, 3, 1, 2
    chunk = 16 // (2 * C)
    expected = np.concatenate([np.arange(c * chunk, (c + 1) * chunk) for c in (0, 3, 1, 2)])
    assert context.positions(16, C).tolist() == expected.tolist()
    assert context.positions(16, 1).tolist() == list(range(16))
    with pytest.raises(xla_cost.InputError, match="divisible by 2 x context = 4"):
        context.positions(18, C)


@pytest.mark.skipif(jax.device_count() < C, reason="needs 2 (simulated) devices: tests/conftest.py sets them")
def test_split_over_context_the_attention_is_the_whole_sequences_causal_attention():
    # a one-block Llama's logits, dense attention, on the CPU: the sequence split over context=2 in the
    # load-balanced order computes what one device computes over the whole sequence, in that order
    config = dict(n_layer=1, seq_len=16, d_model=32, n_head=4, n_kv_head=2, d_ff=64, vocab_size=64, scan_layers=False)
    model = build_model("llama3-8b", **config)
    workload, _ = build_workload(model, example_inputs("llama3-8b", B, **config), optimizer="sgd")
    draw = np.random.default_rng(0)
    params = {"params": jax.tree.map(lambda leaf: draw.normal(0, 0.1, leaf.shape).astype(np.float32), workload.params)}
    tokens = draw.integers(0, 64, (B, 16))
    whole = jax.jit(model.apply)(params, tokens)
    plan = sharding.plan_sharding(workload, {"context": C}, model_rules=sharding.model_rules(model))
    order = context.positions(16, C)
    with plan.constraints(B):
        split = jax.jit(model.apply)(params, tokens[:, order])
    np.testing.assert_allclose(np.asarray(split), np.asarray(whole[:, order]), atol=1e-5)


def test_each_device_attends_with_its_half_of_the_queries_to_every_key(report):
    scores = B * N * (T // C) * T  # this device's query-key pairs: T / C queries, all T keys, every head
    products = attention.products(scores, H, H, backward=False)  # Q K^T and P V: 2 x scores x (H + H)
    forward = products + attention.SOFTMAX_FLOP * scores
    backward = 2 * products + attention.SOFTMAX_FLOP * scores
    calls = {k.kind: k.flops for k in report.phases["grad"].kernel_list
             if k.kind.startswith(attention.FUSED_ATTENTION_CALL)}
    assert calls == {"__cudnn$fmhaSoftmax": forward, "__cudnn$fmhaSoftmaxBackward": backward}


def test_keys_and_values_are_all_gathered_over_context_and_their_gradients_reduce_scattered(report):
    gathered = 2 * context.kv_gather_bytes(B, T, K, H, BF16)  # K and V of every position: 2 x B T K H x 2 bytes
    assert gathered == 2 * B * T * K * H * BF16
    assert _over_context(report, "all-gather") == gathered
    assert _over_context(report, "reduce-scatter") == gathered  # dK and dV, each device's input its whole gradient
    # the weights' gradients, computed from each device's positions, all-reduced over context as over data
    assert _over_context(report, "all-reduce") > 0


def test_the_exchange_is_priced_at_the_bus_bandwidth_for_its_size_and_blocks_unless_overlapped(report):
    hardware = Hardware(device="h100", node="dgx-h100")
    blocking = predict(report, hardware, schedule.Layout())
    gathered = 2 * context.kv_gather_bytes(B, T, K, H, BF16)
    # nccl-tests' convention: t = (n - 1) / n x S / busbw(S) for an all-gather of S bytes over n devices, busbw from
    # the DGX H100's NVLink 4 curve at that size (both devices in one node)
    curve = bus.fabric("nvlink4").curve("all-gather", C)
    (gather,) = [t for t in blocking.collectives if t.kind == "all-gather" and t.nbytes == gathered]
    assert gather.seconds == pytest.approx(bus.traffic_factor("all-gather", C) * gathered / curve.busbw(gathered),
                                           rel=1e-9)
    exchange = sum(t.seconds for t in blocking.collectives if t.kind in ("all-gather", "reduce-scatter"))
    assert blocking.parts["tensor"] == pytest.approx(exchange, rel=1e-9)  # Llama 3's all-gather: on the critical path
    ring = predict(report, hardware, schedule.Layout(overlap_context=True))
    assert ring.parts["tensor"] < blocking.parts["tensor"]  # Transformer Engine's ring: hidden behind the attention
    assert any("overlap_context" in note for note in ring.notes)
