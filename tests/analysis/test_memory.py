"""Saved activations: what the backward pass keeps, from the linearised forward's jaxpr.

Expected bytes are closed forms of the layer sizes written beside each test.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from xla_cost.analysis import memory

# Remat or not, the forward and update programs are the same, and a batch's programs are analysed
# by fit and again by analyze: each compiled once in the module (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("module_caches")

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


@functools.cache
def _one_net_adam():
    """OneNet, batch 8, Adam, with its memory and per-layer rows: the breakdown test's, and the
    one-device side of the sharded test (its breakdown does not depend on the rows)."""
    import xla_cost
    from xla_cost.zoo import build_model, example_inputs

    return xla_cost.analyze(build_model("one_net"), example_inputs("one_net", 8), optimizer="adam",
                            per_layer=True, memory=True)


def test_report_memory_breakdown_parts_and_layers():
    import xla_cost

    report = _one_net_adam()
    m = report.memory_breakdown
    p = report.parameters
    assert m.parameters == m.gradients == 4 * p  # float32
    assert m.optimizer_state == 2 * 4 * p + 4    # Adam's mu and nu, and its int32 step count
    # OneNet keeps fc1's output (after ReLU) for fc2 and fc2's for fc3: B x 4096 and
    # B x 128 float32, and the ReLU masks (bool), B x (4096 + 128), and the loss's own
    assert m.saved_activations >= 8 * (4096 + 128) * 4
    # the ReLU is no layer's: its output belongs to the layer that reads it, fc2 (B x 4096 float32)
    # and fc3 (B x 128); fc1 reads the batch, an argument; masks and loss in the remainder
    saved = {layer.path: layer.saved_activation_bytes for layer in report.layers}
    assert (saved["fc1"], saved["fc2"], saved["fc3"]) == (0, 8 * 4096 * 4, 8 * 128 * 4)
    assert sum(layer.saved_activation_bytes for layer in report.layers) == m.saved_activations
    assert m.peak is not None and m.gap == m.peak - m.parts_total
    # at XLA's peak the arguments are all live: the parameters and Adam's state, as above
    assert m.at_peak["parameters"] == 4 * p and m.at_peak["optimizer_state"] == 2 * 4 * p + 4
    assert m.workspace == m.at_peak["workspace"]
    back = xla_cost.Report.from_dict(report.to_dict())
    assert back.memory_breakdown == m
    table = report.to_table(width=200)
    assert "kept for the backward pass" in table and "largest workspace buffers at XLA's peak" in table


@pytest.mark.parametrize("model, batch, config", [
    ("linear_net", 4, {}), ("one_net", 64, {}), ("conv_net", 8, {}), ("deeper_conv_net", 4, {"depth": 5}),
    ("gpt2-small", 2, {"seq_len": 128}),
], ids=["linear_net", "one_net", "conv_net", "deeper_conv_net", "gpt2-small"])
def test_the_breakdown_at_the_peak_adds_up_to_xlas_peak(model, batch, config):
    """The acceptance: the parts add up to XLA's peak within 10% on the seed nets and
    GPT-2 small (on the CPU). The parts at the peak come from replaying the compiled
    schedule (`xla_cost.compiled.liveness`), XLA's peak from its memory_analysis(): two
    computations of one figure, which agree to 0.3% on every zoo model tried
    (measured on the CPU, jax 0.10.2: conv_net 0.304% under, the others under 0.001%),
    so 0.5% here."""
    from xla_cost.runs.configs import RunConfig
    from xla_cost.runs.fit import breakdown_at

    m = breakdown_at(RunConfig(model, config=config, optimizer="sgd", dtype="float32"), batch)
    assert m.at_peak_total == pytest.approx(m.peak, rel=0.005)
    # the arguments are live throughout: the parameters whole, and the batch (less what the
    # step never reads, such as a dropout key a deterministic model ignores: jit drops it)
    assert m.at_peak["parameters"] == m.parameters and m.at_peak["inputs"] <= m.inputs
    if model == "linear_net":
        # SGD cannot update fc1 (150528 x 4096 float32) in place: its whole weight
        # gradient is live at the peak beside the parameters
        assert m.at_peak["gradients"] >= 150528 * 4096 * 4


def test_sharded_memory_is_per_device():
    import xla_cost
    from xla_cost.zoo import build_model, example_inputs

    if jax.device_count() < 8:
        pytest.skip("needs 8 simulated devices (tests/conftest.py)")
    one = _one_net_adam()
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
    # checked again through analyze(), its own way from the step to the peak (the programs fit compiled
    # are read from the module's analyses cache, as a user's second run reads them): the answer fits,
    # the next size does not
    assert peak(result.batch_size) <= limit < peak(result.next_size)
    assert result.fits.peak <= limit < result.does_not_fit.peak
    with pytest.raises(xla_cost.InputError):
        xla_cost.max_batch_size("one_net", device="h900")


# A small scanned GPT: L blocks of width D over T tokens, batch B_GPT.
L, D, T, B_GPT = 3, 128, 64, 2
GPT = dict(n_layer=L, seq_len=T, d_model=D, n_head=4, vocab_size=512, scan_layers=True)


@functools.cache
def _gpt(remat: str):
    """The small GPT's analysis with its memory and per-layer rows, once per module: the remat
    test's, and the attention test's full count (4 s of CPU each time on 2 cores)."""
    import xla_cost
    from xla_cost.zoo import build_model, example_inputs

    return xla_cost.analyze(build_model("gpt2-small", remat=remat, **GPT), example_inputs("gpt2-small", B_GPT, **GPT),
                            optimizer="sgd", memory=True, per_layer=True)


def test_full_remat_keeps_only_the_block_inputs_and_recomputes_their_forward():
    plain, full = _gpt("none"), _gpt("full")
    outside = sum(l.saved_activation_bytes for l in plain.layers if not l.path.startswith("h"))
    # without remat the blocks keep their insides: each MLP's c_fc output, B x T x 4D float32
    # per layer, that the GELU's derivative reads
    assert next(l.saved_activation_bytes for l in plain.layers if l.path == "h/mlp/c_fc") == L * B_GPT * T * 4 * D * 4
    # remat per block keeps each block's input, B x T x D float32 per layer, and what lies
    # outside the blocks (embeddings, final LayerNorm, loss) as before
    assert full.memory_breakdown.saved_activations == outside + L * B_GPT * T * D * 4
    # the recomputation: the blocks' forward pass, less the MLP's last projection and the
    # residual add after it (L x B x T x D adds), whose outputs no gradient inside the block
    # needs (jax does not recompute them); what the backward pass computes there for the first
    # time (LayerNorm's and GELU's derivatives) is no recomputation
    blocks = sum(l.forward_flops for l in full.layers if l.path == "h" or l.path.startswith("h/"))
    last = next(l.forward_flops for l in full.layers if l.path == "h/mlp/c_proj")
    added = full.hardware_flops - full.model_flops
    assert added == pytest.approx(blocks - last - L * B_GPT * T * D, rel=1e-3)
    assert added <= blocks
    # model FLOP are the step's arithmetic with or without remat (XLA's two programs
    # differ by 0.22% in their own fused counts)
    assert full.model_flops == pytest.approx(plain.model_flops, rel=0.005)
    assert plain.hardware_flops == plain.model_flops  # no remat, nothing recomputed


def test_with_remat_every_phases_model_and_hardware_flops_are_the_jaxprs():
    # XLA counts the forward program otherwise than the jaxpr (its fusions); with remat the grad's model and
    # hardware FLOP are the jaxpr's, so the forward's are too: backward = grad - forward subtracts like from
    # like (was: the jaxpr's grad less XLA's forward, hardware_flops below flops by the difference)
    full = _gpt("full")
    for name in ("forward", "grad", "update", "backward"):
        phase = full.phases[name]
        assert phase.hardware_flops == phase.jaxpr_flops, name
    backward, grad = full.phases["backward"], full.phases["grad"]
    # the recomputation is the backward pass's, all of it
    assert backward.hardware_flops - backward.model_flops == grad.hardware_flops - grad.model_flops > 0


def test_whole_model_remat_for_any_model():
    import xla_cost
    from xla_cost.zoo import build_model, example_inputs

    args = (build_model("one_net"), example_inputs("one_net", 8))
    plain = xla_cost.analyze(*args, optimizer="sgd", memory=True)
    full = xla_cost.analyze(*args, optimizer="sgd", memory=True, remat="full")
    assert full.memory_breakdown.saved_activations < plain.memory_breakdown.saved_activations
    # the whole forward pass but its last layer is recomputed: at least fc1 and fc2's matmuls
    fc = 2 * 8 * (1 * 4096 + 4096 * 128)  # F: 2·B·(d_in·d_out) of fc1 and fc2 (OneNet: 1 -> 4096 -> 128 -> 10)
    assert full.hardware_flops - full.model_flops >= fc
    with pytest.raises(xla_cost.InputError):
        xla_cost.analyze(*args, optimizer="sgd", remat="sometimes")


def test_attention_flops_full_or_causal():
    import xla_cost
    from xla_cost.zoo import build_model, example_inputs

    args = (build_model("gpt2-small", **GPT), example_inputs("gpt2-small", B_GPT, **GPT))
    full = _gpt("none")  # the remat test's: its memory and rows change no FLOP
    causal = xla_cost.analyze(*args, optimizer="sgd", attention_flops="causal")
    # scores q k^T and outputs p v: 2·B·T·T·D FLOP each per layer in the forward pass
    forward = L * 2 * (2 * B_GPT * T * T * D)
    assert full.phases["forward"].attention_flops == forward
    assert full.phases["grad"].attention_flops == 3 * forward  # the backward pass: two products per product
    assert full.model_flops == full.hardware_flops
    # causal: model FLOP count half of the pairs; what executes is unchanged
    assert full.model_flops - causal.model_flops == 3 * forward // 2
    assert causal.hardware_flops == full.hardware_flops
    with pytest.raises(xla_cost.InputError):
        xla_cost.analyze(*args, optimizer="sgd", attention_flops="half")


def test_causal_model_flops_are_the_same_with_and_without_remat():
    # model FLOP leave remat's recomputation out, so the causal convention halves the model's attention products
    # alone: a remat'd backward's recomputed scores and outputs were halved too (EasyLM's causal backward
    # 12,055,424 without remat, 11,924,352 with remat_block; GPT-2 small 24,087,976,000 -> 24,078,538,816)
    import xla_cost
    from xla_cost.zoo import build_model, example_inputs

    layers, t, d, b = 2, 16, 64, 2
    small = dict(n_layer=layers, seq_len=t, d_model=d, n_head=4, vocab_size=128)
    x = example_inputs("gpt2-small", b, **small)
    reports = {(remat, conv): xla_cost.analyze(build_model("gpt2-small", remat=remat, **small), x, optimizer="sgd",
                                               counter="jaxpr", attention_flops=conv)
               for remat in ("none", "full") for conv in ("full", "causal")}
    # forward attention: scores q k^T and outputs p v, 2·B·T²·D each (2·B·H·T²·dh, H·dh = D) per layer
    forward = layers * 2 * (2 * b * t * t * d)
    backward = 2 * forward  # two products per product (dQ and dK, dP and dV)
    for conv in ("full", "causal"):
        plain, remat = reports["none", conv], reports["full", conv]
        assert remat.phases["backward"].model_flops == plain.phases["backward"].model_flops, conv
        assert remat.model_flops == plain.model_flops, conv
        assert remat.hardware_flops > remat.model_flops  # the recomputation is the hardware's alone
    # the remat'd backward recomputes the forward's attention products, which model FLOP leave out
    assert reports["full", "full"].phases["backward"].attention_flops == backward + forward
    full, causal = reports["full", "full"].phases["backward"], reports["full", "causal"].phases["backward"]
    assert full.model_flops - causal.model_flops == backward // 2
    assert reports["full", "full"].model_flops - reports["full", "causal"].model_flops == (forward + backward) // 2
    # and the causal note says by how much (was half the step's attention_flops, the recomputation's included)
    assert any(f"{(forward + backward) // 2:,} FLOP fewer a step" in n for n in reports["full", "causal"].notes)


def test_timing_reports_hfu_from_the_recomputed_flop():
    """MFU divides the model FLOP by time and peak, HFU the hardware FLOP: under
    remat their ratio is the recomputation's, without remat they are equal."""
    import xla_cost
    from xla_cost.zoo import build_model, example_inputs

    small = dict(GPT, n_layer=2, seq_len=16, d_model=64, vocab_size=128)
    report = xla_cost.analyze(build_model("gpt2-small", remat="full", **small),
                              example_inputs("gpt2-small", 1, **small), optimizer="sgd", timed=True,
                              peak_tflops=1.0, peak_bandwidth=1e11)  # a stated peak: not measured
    assert report.timing.skipped is None
    for phase in ("grad", "train_step"):
        t, c = report.timing.phases[phase], report.phases[phase]
        assert t.mfu is not None and t.hfu is not None
        assert c.hardware_flops > c.model_flops  # the blocks' forward pass, recomputed
        assert t.hfu / t.mfu == pytest.approx(c.hardware_flops / c.model_flops, rel=1e-9), phase
    # without recomputation the hardware FLOP are the model's, so HFU is MFU by the same ratio (not timed again)
    plain = xla_cost.analyze(build_model("gpt2-small", remat="none", **small), example_inputs("gpt2-small", 1, **small),
                             optimizer="sgd")
    for phase in ("grad", "train_step"):
        assert plain.phases[phase].hardware_flops == plain.phases[phase].model_flops, phase


def test_nnx_model_memory_on_one_device_and_under_fsdp():
    """An NNX model with BatchNorm and Dropout (its state holds typed PRNG keys)."""
    import xla_cost
    from flax import nnx

    from tests.custom_models import D_HIDDEN, D_IN, NnxNested

    if jax.device_count() < 8:
        pytest.skip("needs 8 simulated devices (tests/conftest.py)")
    model = nnx.eval_shape(lambda: NnxNested(nnx.Rngs(0)))
    x = jax.ShapeDtypeStruct((16, D_IN), jnp.float32)
    one = xla_cost.analyze(model, x, optimizer="adam", memory=True).memory_breakdown
    fsdp = xla_cost.analyze(model, x, optimizer="adam", memory=True, mesh={"fsdp": 8}).memory_breakdown
    p = one.parameters // 4  # float32
    assert one.optimizer_state == 2 * 4 * p + 4  # Adam's mu and nu, and its int32 step count
    # two BatchNorms' running mean and variance, D_HIDDEN float32 each, and each Dropout's RNG
    # stream: a uint32 count (4 bytes) and a threefry key (two uint32, 8 bytes)
    assert one.model_state == 2 * 2 * D_HIDDEN * 4 + 2 * (4 + 8)
    assert fsdp.parameters == pytest.approx(one.parameters / 8, rel=0.05)
    for m in (one, fsdp):
        assert m.at_peak["parameters"] == m.parameters
    # the replay against XLA's peak (measured on the CPU, jax 0.10.2): one device 1.96%
    # under, FSDP over 8 devices 8.93% under
    assert one.at_peak_total == pytest.approx(one.peak, rel=0.025)
    assert fsdp.at_peak_total == pytest.approx(fsdp.peak, rel=0.10)


class _ScannedBlock(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        return x + nn.Dense(WIDTHS[1])(jnp.tanh(nn.Dense(2 * WIDTHS[1])(x))), None


class _ScannedStack(nn.Module):
    layers: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(WIDTHS[1], name="inp")(x)
        stack = nn.scan(nn.remat(_ScannedBlock), variable_axes={"params": 0}, split_rngs={"params": True},
                        length=self.layers)
        x, _ = stack(name="layers")(x, None)
        return nn.Dense(WIDTHS[3], name="head")(x)


def test_a_scanned_remat_stack_keeps_its_block_inputs_in_its_own_row():
    # nn.scan(nn.remat(Block)): the backward pass recomputes each block from its input, stacked by the loop
    # (the loop's body passes its carry out unchanged): L x B x D float32, the stack's own, not the remainder's
    layers, d = 3, WIDTHS[1]
    model = _ScannedStack(layers)
    x = jax.ShapeDtypeStruct((B, WIDTHS[0]), jnp.float32)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
    by_layer, _, in_args = memory.saved_activations(
        lambda p, inputs: (jnp.sum(model.apply(p, inputs)), None), params, (x,), root="_ScannedStack",
        modules=("inp", "layers/Dense_0", "layers/Dense_1", "head"))
    # the stacked block inputs, and the head's input (the last block's output, made in the stack)
    assert by_layer == {"layers": layers * B * d * 4 + B * d * 4}
    assert in_args == B * WIDTHS[0] * 4  # inp's input: the batch


def test_a_mutable_nnx_cache_among_the_call_arguments_is_updated_inside_the_traced_pass():
    # An NNX model that writes a KV cache passed to its call (bonsai's Qwen3 decode): the cache is rebuilt
    # inside the differentiated function, as jit rebuilds it, so the write is allowed (it raised Flax's
    # TraceContextError: "Cannot mutate Cache from a different trace level"). fc1 keeps its input, fc0's
    # B x 16 output, for its weight gradient; fc0's input is the batch (an argument)
    from flax import nnx

    class Cache(nnx.Module):
        def __init__(self):
            self.k = nnx.Cache(jnp.zeros((B, WIDTHS[1])))

    class Net(nnx.Module):
        def __init__(self):
            self.fc0 = nnx.Linear(WIDTHS[0], WIDTHS[1], rngs=nnx.Rngs(0))
            self.fc1 = nnx.Linear(WIDTHS[1], WIDTHS[2], rngs=nnx.Rngs(1))

        def __call__(self, x, *, cache):
            h = self.fc0(x)
            cache.k.set_value(h)
            return self.fc1(h)

    graphdef, params, rest = nnx.split(Net(), nnx.Param, ...)

    def forward(p, inputs, cache):
        return jnp.sum(nnx.merge(graphdef, p, rest)(inputs, cache=cache)), None

    x = jax.ShapeDtypeStruct((B, WIDTHS[0]), jnp.float32)
    by_layer, _, in_args = memory.saved_activations(forward, params, (x, Cache()))
    assert sum(by_layer.values()) == B * WIDTHS[1] * 4
    assert in_args == B * WIDTHS[0] * 4


class _Tower(nn.Module):
    @nn.compact
    def __call__(self, x):
        return jnp.tanh(nn.Dense(WIDTHS[1], name="fc1")(jnp.tanh(nn.Dense(WIDTHS[1], name="fc0")(x))))


class _TowerHead(nn.Module):
    """x[B, 12] -> tower (Dense 16, tanh, Dense 16, tanh) -> head Dense 5."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(WIDTHS[3], name="head")(_Tower(name="tower")(x))


@pytest.mark.parametrize("frozen", [None, "tower", "tower/fc0"])
def test_saved_activations_are_those_of_the_backward_of_the_read_gradients_only(frozen):
    # Only the parameters whose gradient is computed are differentiated (a frozen layer's are constants),
    # as the grad program does. H = 16 float32; jax keeps a tanh's output a and 1 - a (its derivative is
    # computed as (g + g a)(1 - a) in the backward)
    x = jax.ShapeDtypeStruct((B, WIDTHS[0]), jnp.float32)
    params = jax.eval_shape(_TowerHead().init, jax.random.PRNGKey(0), x)["params"]
    read = None if frozen is None else jax.tree_util.tree_map_with_path(
        lambda path, _: not jax.tree_util.keystr(path, simple=True, separator="/").startswith(frozen), params)
    by_layer, in_params, in_args = memory.saved_activations(
        lambda p, inputs: (jnp.sum(_TowerHead().apply({"params": p}, inputs)), None), params, (x,),
        root="_TowerHead", modules=("tower/fc0", "tower/fc1", "head"), read=read)
    h, kernels = B * WIDTHS[1] * 4, (WIDTHS[1] * WIDTHS[3] + WIDTHS[1] ** 2) * 4  # head's and fc1's kernels
    if frozen is None:
        # a1, 1 - a1, a2, 1 - a2 (made in the tower); the head's and fc1's kernels for the input
        # cotangents; the batch for fc0's kernel gradient
        assert (by_layer, in_params, in_args) == ({"tower": 4 * h}, kernels, B * WIDTHS[0] * 4)
    elif frozen == "tower":
        # only the head's input a2, for its kernel gradient: nothing of the frozen tower's backward (was 4 h,
        # its kernels and the batch)
        assert (by_layer, in_params, in_args) == ({"tower": h}, 0, 0)
    else:
        # fc0 frozen, fc1 and the head trained: nothing below fc1 needs a cotangent, so a1 (fc1's kernel
        # gradient's operand), a2 and 1 - a2 are kept, not 1 - a1, fc1's kernel or the batch; the head's kernel
        assert (by_layer, in_params, in_args) == ({"tower": 3 * h}, WIDTHS[1] * WIDTHS[3] * 4, 0)


def test_analyze_keeps_only_the_trained_heads_input_where_the_optimizer_freezes_the_tower():
    # analyze with optax.multi_transform freezing the tower (set_to_zero): the program's saved activations
    # and the rows are the head's input a2 alone, B x 16 float32, in the tower's row (the layer that made
    # it); the loss sum(out * t) keeps only the targets (an argument). Before: 4 x B x 16 x 4, a vjp over
    # every parameter (the frozen tower's tanh outputs and derivatives), though its backward FLOP were 0
    import optax

    import xla_cost

    x = jax.ShapeDtypeStruct((B, WIDTHS[0]), jnp.float32)
    params = jax.eval_shape(_TowerHead().init, jax.random.PRNGKey(0), x)["params"]
    labels = {k: jax.tree.map(lambda _, k=k: "frozen" if k == "tower" else "sgd", v) for k, v in params.items()}
    tx = optax.multi_transform({"sgd": optax.sgd(0.1), "frozen": optax.set_to_zero()}, labels)
    report = xla_cost.analyze(_TowerHead(), x, optimizer=tx, loss=lambda out, t: jnp.sum(out * t),
                              targets=jax.ShapeDtypeStruct((B, WIDTHS[3]), jnp.float32), memory=True,
                              per_layer=True, depth=1, counter="jaxpr")
    assert report.memory_breakdown.saved_activations == B * WIDTHS[1] * 4
    rows = {layer.path: (layer.backward_flops, layer.saved_activation_bytes) for layer in report.layers}
    assert rows["tower"] == (0, B * WIDTHS[1] * 4) and rows["head"][1] == 0


def test_the_outputs_part_is_the_loss_alone_whatever_the_parameter_count():
    # with Adam and the state donated, the outputs part was XLA's outputs - aliased, which counts the output
    # tuple's index table (8 bytes an array): 68 bytes for 2 parameter arrays, 500 for 20, 1,940 for 80
    import xla_cost

    x = jax.ShapeDtypeStruct((B, WIDTHS[0]), jnp.float32)
    report = xla_cost.analyze(DenseStack(), x, optimizer="adam", memory=True)
    m = report.memory_breakdown
    assert m.alias_bytes > 0  # the new parameters and Adam's state written into the donated buffers
    assert m.outputs == 4  # the float32 loss alone
    assert xla_cost.Report.from_dict(report.to_dict()).memory_breakdown.outputs == 4
