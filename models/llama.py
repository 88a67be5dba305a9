"""Llama 2 and Llama 3: decoder-only transformers with grouped-query attention,
SwiGLU, rotary embeddings and RMSNorm, in Flax Linen (`models._transformer`'s
blocks).

The layout and parameter names follow the Hugging Face ``LlamaForCausalLM``: token
embedding ``embed_tokens``, ``n_layer`` pre-norm blocks ``layers_0`` ...
``layers_{L-1}`` (or one scanned stack ``layers``, the default), each
``input_layernorm``, ``self_attn`` (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``),
``post_attention_layernorm``, ``mlp`` (``gate_proj``, ``up_proj``,
``down_proj``); a final RMSNorm ``norm`` and an untied head ``lm_head``. No
biases, no dropout.

Parameters, with ``V`` the vocabulary, ``d`` the width, ``L`` the depth, ``N``
query heads and ``K`` key/value heads of ``H = d / N``, ``f`` the MLP's hidden width::

    P = 2*V*d + L*(2*d*N*H + 2*d*K*H + 3*d*f + 2*d) + d

per block: ``q_proj`` and ``o_proj`` d·N·H each, ``k_proj`` and ``v_proj``
d·K·H each, the MLP 3·d·f, two norms d each; plus the embedding and the head
V·d each and the final norm d (`llama_parameters`). The sequence length adds
none (rotary embeddings have no parameters). With ``gated_mlp=False`` the MLP
is two matrices, ``up_proj`` and ``down_proj`` (2·d·f: a plain feed-forward,
as Nemotron-4's squared ReLU), not three.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from ._spec import ModelSpec, Published
from ._transformer import (
    MEGATRON_RULES, MLP_ACTIVATIONS, BlockConfig, RMSNorm, check_options, check_tokens, decoder_stack,
)
from xla_cost.errors import InputError
from xla_cost.parallel.sharding import RULES_ATTRIBUTE

__all__ = [
    "LLAMA_PUBLISHED",
    "SPECS",
    "Llama",
    "Llama2_7B",
    "Llama2_13B",
    "Llama2_70B",
    "Llama3_8B",
    "Llama3_70B",
    "Llama3_405B",
    "llama_forward_flops",
    "llama_parameters",
]

Dtype = Any


def llama_parameters(vocab_size: int, n_layer: int, d_model: int, n_head: int, n_kv_head: int, d_ff: int,
                     head_dim: int = 0, tied: bool = False) -> int:
    """The closed-form parameter count of `Llama` (``head_dim = 0`` means ``d_model / n_head``), its MLP
    gated (``gated_mlp=False``: ``d * d_ff`` fewer per layer)."""
    d, h = d_model, head_dim or d_model // n_head
    block = 2 * d * n_head * h + 2 * d * n_kv_head * h + 3 * d * d_ff + 2 * d
    return (1 if tied else 2) * vocab_size * d + n_layer * block + d


def llama_forward_flops(model: Llama) -> int:
    """The matrix products' FLOP of one forward pass of `Llama` over one sequence
    of ``T = seq_len`` tokens, 2 per multiply-add: per token and layer the
    projections ``2 d (2N + 2K) H`` and the SwiGLU MLP ``2 * 3 d f`` (a plain
    one's ``2 * 2 d f``), the head
    ``2 d V`` per token; per layer ``q k^T`` and ``probs v``, ``2 N H T^2`` each
    (the causal mask is a select: all ``T x T`` pairs are computed)."""
    t, d, n, k = model.seq_len, model.d_model, model.n_head, model.n_kv_head
    h = model.head_dim or d // n
    matrices = 3 if model.gated_mlp else 2
    per_token = (model.n_layer * (2 * d * (2 * n + 2 * k) * h + 2 * matrices * d * model.d_ff)
                 + 2 * d * model.vocab_size)
    return t * per_token + model.n_layer * 2 * 2 * n * h * t * t


class Llama(nn.Module):
    """A Llama language model: token ids ``(B, seq_len)`` -> logits ``(B, seq_len, vocab_size)``.

    Attributes:
      vocab_size: ``V``.
      seq_len: the inputs' length (no parameters depend on it).
      n_layer: blocks ``L``.
      n_head: query heads ``N``.
      n_kv_head: key/value heads ``K`` dividing ``N`` (``N``: MHA, as Llama 2
        7B and 13B; 8: GQA, as Llama 2 70B and Llama 3).
      d_model: the residual width ``d``.
      d_ff: the SwiGLU MLP's hidden width ``f``.
      head_dim: ``H``; 0 means ``d_model / n_head``.
      gated_mlp: the MLP gated (SwiGLU: ``gate_proj``, ``up_proj``,
        ``down_proj``); False: a plain one (``up_proj``, ``down_proj``).
      activation: the MLP's activation, one of
        `models._transformer.MLP_ACTIVATIONS` (``silu``: SwiGLU gated;
        ``relu2``: Nemotron-4's squared ReLU in a plain MLP).
      rope_theta: the rotary base (10,000 for Llama 2, 500,000 for Llama 3).
      rope_scaling: Llama 3.1's rotary scaling factor (8); 0: none.
      norm_eps: the RMSNorms' epsilon.
      attention: ``dense`` or ``fused`` (`models._transformer.attention`).
      scan_layers: stack the blocks with `nn.scan` (one module ``layers``, traced
        once) instead of unrolling ``layers_0`` ... ``layers_{L-1}``.
      remat: rematerialise each block: ``none``, ``selective`` or ``full``
        (`xla_cost.step.remat.REMAT_LEVELS`), or a policy of `REMAT_POLICIES`.
      fp8: the projections' and the MLP's matrix products in FP8
        (`models._transformer.fp8_dot_general`: current scaling, e4m3 forward,
        e5m2 gradients, float32 accumulation), the rest in ``dtype``; the
        zoo's ``--dtype float8`` (bfloat16 and this).
      dtype: the computation dtype.
      param_dtype: the parameters' dtype.
    """

    vocab_size: int = 32_000
    seq_len: int = 4096
    n_layer: int = 32
    n_head: int = 32
    n_kv_head: int = 32
    d_model: int = 4096
    d_ff: int = 11_008
    head_dim: int = 0
    gated_mlp: bool = True
    activation: str = "silu"
    rope_theta: float = 10_000.0
    rope_scaling: float = 0.0
    norm_eps: float = 1e-5
    attention: str = "dense"
    scan_layers: bool = True
    remat: str = "none"
    fp8: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    def block_configs(self) -> tuple[BlockConfig, ...]:
        """One `BlockConfig` per layer (all equal)."""
        config = BlockConfig(
            n_heads=self.n_head, n_kv_heads=self.n_kv_head, head_dim=self.head_dim or self.d_model // self.n_head,
            d_ff=self.d_ff, activation=self.activation, gated=self.gated_mlp, norm_eps=self.norm_eps,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling, attention=self.attention, fp8=self.fp8,
        )
        return (config,) * self.n_layer

    @nn.compact
    def __call__(self, tokens: jnp.ndarray) -> jnp.ndarray:
        name = type(self).__name__
        check_options(name, attention_implementation=self.attention, remat=self.remat, n_heads=self.n_head,
                      n_kv_heads=self.n_kv_head, d_model=self.d_model, head_dim=self.head_dim)
        if self.activation not in MLP_ACTIVATIONS:
            raise InputError(f"a {name} MLP activation ({', '.join(MLP_ACTIVATIONS)})", repr(self.activation),
                             "Use e.g. --set activation=silu.")
        check_tokens(name, tokens, self.seq_len)
        embed = nn.Embed(
            self.vocab_size, self.d_model, dtype=self.dtype, param_dtype=self.param_dtype,
            embedding_init=nn.initializers.normal(0.02), name="embed_tokens",
        )
        x = decoder_stack(embed(tokens), self.block_configs(), scan_layers=self.scan_layers, remat=self.remat,
                          dtype=self.dtype, param_dtype=self.param_dtype)
        x = RMSNorm(self.norm_eps, dtype=self.dtype, param_dtype=self.param_dtype, name="norm")(x)
        head = nn.Dense(self.vocab_size, use_bias=False, dtype=self.dtype, param_dtype=self.param_dtype,
                        kernel_init=nn.initializers.normal(0.02), name="lm_head")
        return head(x)


setattr(Llama, RULES_ATTRIBUTE, MEGATRON_RULES)  # read by `xla_cost.parallel.sharding.model_rules`


class Llama2_7B(Llama):  # noqa: N801 - the paper's name
    """Llama 2 7B: 32 layers, d 4096, 32 heads (MHA), f 11008, V 32000."""


class Llama2_13B(Llama):  # noqa: N801
    """Llama 2 13B: 40 layers, d 5120, 40 heads (MHA), f 13824, V 32000."""

    n_layer: int = 40
    n_head: int = 40
    n_kv_head: int = 40
    d_model: int = 5120
    d_ff: int = 13_824


class Llama2_70B(Llama):  # noqa: N801
    """Llama 2 70B: 80 layers, d 8192, 64 heads, 8 key/value heads (GQA), f 28672, V 32000."""

    n_layer: int = 80
    n_head: int = 64
    n_kv_head: int = 8
    d_model: int = 8192
    d_ff: int = 28_672


class _Llama3(Llama):
    """Llama 3 (Dubey et al. 2024, Table 3): V 128,256, rotary base 500,000,
    8 key/value heads, trained at 8,192 tokens."""

    vocab_size: int = 128_256
    seq_len: int = 8192
    n_kv_head: int = 8
    rope_theta: float = 500_000.0


class Llama3_8B(_Llama3):  # noqa: N801
    """Llama 3 8B: 32 layers, d 4096, 32 heads, 8 key/value heads, f 14336."""

    n_layer: int = 32
    n_head: int = 32
    d_model: int = 4096
    d_ff: int = 14_336


class Llama3_70B(_Llama3):  # noqa: N801
    """Llama 3 70B: 80 layers, d 8192, 64 heads, 8 key/value heads, f 28672."""

    n_layer: int = 80
    n_head: int = 64
    d_model: int = 8192
    d_ff: int = 28_672


class Llama3_405B(_Llama3):  # noqa: N801
    """Llama 3.1 405B: 126 layers, d 16384, 128 heads, 8 key/value heads, f 53248,
    Llama 3.1's rotary scaling (factor 8)."""

    n_layer: int = 126
    n_head: int = 128
    d_model: int = 16_384
    d_ff: int = 53_248
    rope_scaling: float = 8.0


LLAMA_PUBLISHED: dict[str, tuple[float, str]] = {
    "llama2-7b": (6.7e9, "Touvron et al. 2023a (LLaMA), Table 2: 6.7B (LLaMA 7B, the same configuration)"),
    "llama2-13b": (13.0e9, "Touvron et al. 2023a (LLaMA), Table 2: 13.0B (LLaMA 13B, the same configuration)"),
    "llama2-70b": (70e9, "Touvron et al. 2023b (Llama 2), Table 1: 70B (a nominal size)"),
    "llama3-8b": (8.03e9, "Dubey et al. 2024 (The Llama 3 Herd of Models), Table 3: 8B; 8.03B on Meta's model card"),
    "llama3-70b": (70.6e9, "Dubey et al. 2024, Table 3: 70B; 70.6B on Meta's model card"),
    "llama3-405b": (405.9e9, "Dubey et al. 2024, Table 3: 405B; 405.9B on Meta's model card"),
}
"""Published parameter counts (rounded, as published) and where each is from."""


# --------------------------------------------------------------------------- zoo

_MINIMUMS = {"head_dim": 0}  # 0 means d_model / n_head
_LLAMA2_SOURCE = "Touvron et al. 2023, Llama 2; HF LlamaForCausalLM"
_LLAMA3_SOURCE = "Dubey et al. 2024, The Llama 3 Herd of Models, Table 3; HF LlamaForCausalLM"


def _tokens(config: Any) -> tuple[int, ...]:
    return (config["seq_len"],)


def _spec(name: str, label: str, module: type[Llama], source: str, *aliases: str) -> ModelSpec:
    heads = "MHA" if module.n_kv_head == module.n_head else f"GQA {module.n_head}/{module.n_kv_head} heads"
    description = (
        f"{label} decoder-only transformer: {module.n_layer} layers x {module.d_model}, {heads}, "
        f"SwiGLU {module.d_ff}, RoPE, RMSNorm, untied head, vocabulary {module.vocab_size:,}"
    )
    parameters, published = LLAMA_PUBLISHED[name]
    return ModelSpec(name, description, module, _tokens, input_dtype="int32", source=source,
                     aliases=aliases, minimums=_MINIMUMS, published=Published(parameters, published),
                     forward_flops=llama_forward_flops)


SPECS: list[ModelSpec] = [
    _spec("llama2-7b", "Llama 2 7B", Llama2_7B, _LLAMA2_SOURCE, "meta-llama/Llama-2-7b-hf"),
    _spec("llama2-13b", "Llama 2 13B", Llama2_13B, _LLAMA2_SOURCE, "meta-llama/Llama-2-13b-hf"),
    _spec("llama2-70b", "Llama 2 70B", Llama2_70B, _LLAMA2_SOURCE, "meta-llama/Llama-2-70b-hf"),
    _spec("llama3-8b", "Llama 3 8B", Llama3_8B, _LLAMA3_SOURCE, "meta-llama/Meta-Llama-3-8B"),
    _spec("llama3-70b", "Llama 3 70B", Llama3_70B, _LLAMA3_SOURCE, "meta-llama/Meta-Llama-3-70B"),
    _spec("llama3-405b", "Llama 3.1 405B", Llama3_405B, _LLAMA3_SOURCE, "meta-llama/Llama-3.1-405B"),
]
"""The zoo entries of this family."""
