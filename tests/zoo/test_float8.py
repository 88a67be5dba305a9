"""``--dtype float8`` in the zoo (issues 50, 51): the gpt, llama, gemma and mixtral families'
projections, MLPs and experts multiply in FP8 with current scaling
(`models._transformer.fp8_dot_general`), the rest in bfloat16.

Counted by the jaxpr counter on tiny configurations, abstractly (nothing is
compiled here: the H100's FP8 gemms are tests/compiled/test_fp8.py's).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost.errors import InputError
from xla_cost.runs.configs import RunConfig
from xla_cost.zoo import build_model, example_inputs, fp8_families

# B tokens of T positions, L layers of width d, N query and K key/value heads of H, MLP width f, vocabulary V
B = 2
# (unrolled: `_fp8_products` reads each layer's equations, not a scan's body once)
LLAMA = {"vocab_size": 128, "seq_len": 16, "n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 2, "d_ff": 96,
         "scan_layers": False}
GEMMA = {"vocab_size": 128, "seq_len": 16, "n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 1, "d_ff": 96,
         "head_dim": 32, "scan_layers": False}
MIXTRAL = {"vocab_size": 128, "seq_len": 16, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 64,
           "d_ff": 96, "n_experts": 4, "top_k": 2, "n_shared_experts": 1, "n_dense_layers": 1, "scan_layers": False}


def _step(name: str, dtype: str, config: dict, grad: bool):
    model = build_model(name, dtype=dtype, **config)
    inputs = example_inputs(name, B, dtype=dtype, **config)
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)

    def loss(p, x):
        return model.apply(p, x).astype(jnp.float32).mean()

    return (jax.grad(loss) if grad else loss), variables, inputs


def _count(name: str, dtype: str, config: dict, grad: bool = False):
    return xla_cost.count_function(*_step(name, dtype, config, grad))


def _dots(count) -> int:
    return sum(e.cost.flops for e in count.equations if e.primitive == "dot_general")


def _fp8_products(name: str, config: dict, grad: bool) -> dict[str, int]:
    """FLOP of the traced program's dot_generals by their operands' FP8 formats, read
    from the jaxpr itself (2 per multiply-add: 2 x output elements x contracted size)."""
    fn, *args = _step(name, "float8", config, grad)
    found: dict[str, int] = {}

    def walk(jaxpr) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                kinds = sorted({str(v.aval.dtype) for v in eqn.invars if "float8" in str(v.aval.dtype)})
                (contract, _), _ = eqn.params["dimension_numbers"]
                depth = 1
                for axis in contract:
                    depth *= eqn.invars[0].aval.shape[axis]
                flops = 2 * eqn.outvars[0].aval.size * depth
                key = "+".join(kinds) or "none"
                found[key] = found.get(key, 0) + flops
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(sub, jax.extend.core.ClosedJaxpr):
                        walk(sub.jaxpr)
                    elif isinstance(sub, jax.extend.core.Jaxpr):
                        walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def _llama_fp8_forward(c: dict) -> int:
    """The FP8 products of a Llama's forward: per token and layer q and o d*N*H, k and v
    d*K*H, gate, up and down d*f multiply-adds; 2 FLOP each."""
    d, n, k, f = c["d_model"], c["n_head"], c["n_kv_head"], c["d_ff"]
    h = d // n
    return 2 * B * c["seq_len"] * c["n_layer"] * (d * (2 * n + 2 * k) * h + 3 * d * f)


def _llama_bf16_forward(c: dict) -> int:
    """What stays bfloat16: per layer q k^T and probs v, 2*N*H*T*T multiply-adds per
    sequence (all T x T pairs); the head d*V per token."""
    t, d = c["seq_len"], c["d_model"]
    return B * (c["n_layer"] * 2 * 2 * d * t * t + 2 * t * d * c["vocab_size"])


def _scaling(x: int, w: int, y: int) -> int:
    """The counter's FLOP for current scaling around one FP8 product of x and w
    elements into y: per operand element abs, the clip's max and min, the divide by
    the scale and two converts (to float32, to float8) = 6; the amax reductions
    x - 1 + w - 1; per output element the rescale = 1 (the product is written in
    bfloat16, as Transformer Engine's FP8 GEMM writes it: no convert after it);
    scalars: the two amaxes' converts, zero guards (max) and divisions by 448, the
    scales' product and its convert to bfloat16 = 8. 7(x + w) + y + 6 in all."""
    return 7 * (x + w) + y + 6


def test_llama_float8_products_count_as_the_bfloat16_models():
    c, m = LLAMA, B * LLAMA["seq_len"]
    d, n, k, f = c["d_model"], c["n_head"], c["n_kv_head"], c["d_ff"]
    h = d // n
    bf16, fp8 = _count("llama3-8b", "bfloat16", c), _count("llama3-8b", "float8", c)
    assert fp8.unsupported == {}
    assert _dots(fp8) == _dots(bf16) == _llama_fp8_forward(c) + _llama_bf16_forward(c)
    # the FP8 products read float8_e4m3fn operands; the attention's and the head's stay bfloat16
    assert _fp8_products("llama3-8b", c, grad=False) == {
        "float8_e4m3fn": _llama_fp8_forward(c), "none": _llama_bf16_forward(c)}
    # the scaling's elementwise work, apart from the products: (x, w, y) of each of the four FP8 products
    # of a layer, q k v as one (Megatron's linear_qkv: N + 2K heads of H) and gate and up as one (linear_fc1:
    # 2f), then o and down
    shapes = [(m * d, d * (n + 2 * k) * h, m * (n + 2 * k) * h), (m * n * h, n * h * d, m * d),
              (m * d, d * 2 * f, m * 2 * f), (m * f, f * d, m * d)]
    scaling = c["n_layer"] * sum(_scaling(*shape) for shape in shapes)
    assert fp8.total.flops - bf16.total.flops == scaling


def test_llama_float8_backward_products_in_fp8_count_as_the_bfloat16_models():
    """The custom VJP's two backward products per forward one: the e5m2 gradient
    against the saved e4m3 weight (d input) and input (d weight), each the forward's
    multiply-adds; the grad's products total the bfloat16 model's."""
    c = LLAMA
    bf16, fp8 = _count("llama3-8b", "bfloat16", c, grad=True), _count("llama3-8b", "float8", c, grad=True)
    assert fp8.unsupported == {}
    assert _dots(fp8) == _dots(bf16)
    found = _fp8_products("llama3-8b", c, grad=True)
    assert found["float8_e4m3fn"] == _llama_fp8_forward(c)  # the forward
    assert found["float8_e4m3fn+float8_e5m2"] == 2 * _llama_fp8_forward(c)  # the backward


def test_gemma_and_mixtral_float8_products_count_as_the_bfloat16_models():
    bf16, fp8 = _count("gemma-2b", "bfloat16", GEMMA), _count("gemma-2b", "float8", GEMMA)
    assert fp8.unsupported == {} and _dots(fp8) == _dots(bf16)
    # Mixtral: every expert computes its C slots of each sequence, C = ceil(1.25 * T * k / E), and the
    # shared expert and the dense first layer's MLP every token: all in FP8 with the projections
    t, d, f, e, kk = (MIXTRAL[key] for key in ("seq_len", "d_model", "d_ff", "n_experts", "top_k"))
    n, k, h, layers = MIXTRAL["n_head"], MIXTRAL["n_kv_head"], d // MIXTRAL["n_head"], MIXTRAL["n_layer"]
    slots = -(-5 * t * kk // (4 * e))
    projections = layers * B * t * 2 * d * (2 * n + 2 * k) * h
    mlps = B * 2 * 3 * d * f * (e * slots + t * 1) + B * t * 2 * 3 * d * f  # MoE layer, then the dense one
    assert _fp8_products("mixtral-8x7b", MIXTRAL, grad=False)["float8_e4m3fn"] == projections + mlps


def test_float8_refused_by_the_other_families_and_recorded_as_bfloat16():
    assert fp8_families() == ("gpt", "llama", "gemma", "mixtral")
    with pytest.raises(InputError) as error:
        build_model("bert-base", dtype="float8")
    message = str(error.value)
    assert "\n" not in message and "gpt, llama, gemma, mixtral" in message and "bert-base" in message
    model, _, _, dtype, notes = RunConfig("llama3-8b", 1, config=LLAMA, dtype="float8").build()
    assert model.fp8 and model.dtype == jnp.bfloat16 and dtype == "bfloat16"
    assert any(note.startswith("--dtype float8:") for note in notes)


GPT = {"vocab_size": 128, "seq_len": 16, "n_layer": 2, "d_model": 64, "n_head": 4, "scan_layers": False}


def test_gpt_float8_products_are_its_blocks_four():
    """The GPT (GPT-3, MPT, NeMo's GPT and Nemotron runs, issue 51) in FP8: per token and layer c_attn
    3d^2, the attention's c_proj d^2, c_fc and the MLP's c_proj 4d^2 each (d_ff = 4d) multiply-adds in
    FP8, 2 FLOP each; the attention's q k^T and probs v and the tied head in bfloat16 (their FLOP as
    _llama_bf16_forward's); the backward's two FP8 products per forward one."""
    c = GPT
    t, d, layers = c["seq_len"], c["d_model"], c["n_layer"]
    forward = 2 * B * t * layers * (3 * d * d + d * d + 2 * 4 * d * d)
    assert _fp8_products("gpt2", c, grad=False) == {
        "float8_e4m3fn": forward, "none": B * (layers * 2 * 2 * d * t * t + 2 * t * d * c["vocab_size"])}
    found = _fp8_products("gpt2", c, grad=True)
    assert found["float8_e4m3fn"] == forward and found["float8_e4m3fn+float8_e5m2"] == 2 * forward
