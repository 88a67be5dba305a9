"""An FP8 run priced from its totals (issue 51): ``--dtype float8`` without a target.

The step is counted from its jaxprs (no compile: the CPU proxy gives no kernel
list), so its compute is priced from its totals
(`xla_cost.timemodel.kernel_time.price_totals`): the FP8 products' FLOP
(`PhaseCosts.float8_flops`, both operands 8-bit floats) at the device's float8
peak, the other products (attention's softmax products, the head) at its
bfloat16 peak. The FLOP are the tiny Llama's closed forms; the peaks are the
datasheets' dense figures: NVIDIA H100 SXM5 BF16 989.4 and FP8 1,979 TFLOPS
(3,958 with sparsity); HGX B200 specifications per GPU BF16 2,250 and FP8
4,500 TFLOPS (4.5 and 9 PFLOPS with sparsity). Priced kernel by kernel on a
target's program: tests/compiled/test_fp8.py. A B200's step says that its host's
dispatch was measured on no B200's machine.
"""

from __future__ import annotations

import pytest

from xla_cost.errors import InputError
from xla_cost.runs.configs import RunConfig
from xla_cost.runs.scaling import predict
from xla_cost.timemodel import devices
from xla_cost.timemodel.calibration import Calibration, use_constants

T = 1e12
PEAKS = {"h100": (989.4 * T, 1979 * T), "b200": (2250 * T, 4500 * T)}  # (bfloat16, float8), dense
CONSTANTS = Calibration(matmul=0.5, memory=0.8, launch=3e-6)  # one set for every device

# batch, positions, layers, d_model, query heads, key-value heads, MLP width, vocabulary
B, S, L, D, N, K, F, V = 2, 16, 2, 64, 4, 2, 96, 128
HEAD = D // N
CONFIG = {"vocab_size": V, "seq_len": S, "n_layer": L, "d_model": D, "n_head": N, "n_kv_head": K, "d_ff": F,
          "scan_layers": False}
# forward, per sample: each layer's q and o d*N*H, k and v d*K*H, gate, up and down d*f multiply-adds per
# token in FP8; attention's q k^T and probs v, N*H*S*S each, and the head d*V per token in bfloat16
FP8_FORWARD = 2 * S * L * (D * (2 * N + 2 * K) * HEAD + 3 * D * F)
BF16_FORWARD = 2 * (L * 2 * N * HEAD * S * S + S * D * V)
# grad: the forward, then two products per product backward (the input's and the weight's gradient;
# FP8's are e5m2 x e4m3): 3x the forward's of each kind (the embedding is a parameter: the first
# projection's input gradient is computed too)
FP8_GRAD, BF16_GRAD = 3 * B * FP8_FORWARD, 3 * B * BF16_FORWARD


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "results.sqlite"
    return RunConfig("llama3-8b", batch_size=B, config=CONFIG, dtype="float8", counter="jaxpr").canonical().run(
        cache=str(store))


def test_an_fp8_runs_products_are_counted_apart(report):
    grad = report.phases["grad"]
    assert grad.float8_flops == FP8_GRAD
    assert grad.matmul_flops - grad.float8_flops == BF16_GRAD
    assert report.phases["forward"].float8_flops == B * FP8_FORWARD
    assert report.phases["update"].float8_flops == 0


@pytest.mark.parametrize("device", ["h100", "b200"])
def test_its_fp8_products_are_priced_at_the_fp8_peak_and_the_rest_at_bfloat16s(report, device):
    bf16, fp8 = PEAKS[device]
    with use_constants(CONSTANTS):
        step = predict(report, device=device)
    # one device, one micro-batch: the grad program's products at half of each kind's peak
    assert step.parts["matmul"] == pytest.approx(FP8_GRAD / (0.5 * fp8) + BF16_GRAD / (0.5 * bf16), rel=1e-12)


def test_a_device_without_fp8_units_refuses_them_in_one_line(report):
    with pytest.raises(InputError, match="a device with float8 units") as refused:
        predict(report, device="a100")
    assert "\n" not in str(refused.value)


def test_a_b200s_dispatch_is_no_measurement_and_its_step_says_so(report):
    # nothing measured on a B200's machine: its host's dispatch is the fastest host measured (the H100's
    # machine: 33.6 us a call, reports/data/dispatch_nvidia-h100-80gb-hbm3_2026-11-26.csv), a floor, in a note
    with use_constants(CONSTANTS):
        on_b200, on_h100 = predict(report, device="b200"), predict(report, device="h100")
    assert devices.device("b200").dispatch is None
    assert devices.host_dispatch(devices.device("b200")) == (devices.device("h100").dispatch, False)
    assert any(n.startswith("no host measured with the NVIDIA B200: its dispatch is the fastest host's measured, "
                            "a floor (reports/data/dispatch_nvidia-h100") for n in on_b200.notes)
    assert not any(n.startswith("no host measured") for n in on_h100.notes)
