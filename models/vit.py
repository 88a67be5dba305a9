"""ViT: the Vision Transformer of Dosovitskiy et al. (2021), "An Image is Worth
16x16 Words: Transformers for Image Recognition at Scale", in Flax Linen.

The layout and the parameter names follow timm's ``vit_base_patch16_224`` (the
same parameters as the Hugging Face ``ViTForImageClassification``): a patch
embedding ``patch_embed`` (a ``patch x patch`` convolution with stride ``patch``
and a bias), a class token ``cls_token``, a learned position embedding
``pos_embed`` over the ``N + 1`` tokens (``N = (image_size / patch)^2``),
``n_layer`` pre-LayerNorm blocks ``blocks_0`` ... ``blocks_{L-1}`` (or one
scanned stack ``blocks``), a final LayerNorm ``norm`` and a classifier ``head``
on the class token. A block is::

    x = x + attn.proj(attention(attn.qkv(norm1(x))))
    x = x + mlp.fc2(gelu(mlp.fc1(norm2(x))))

GELU is exact (erf), LayerNorm epsilon 1e-6. There is no dropout, no drop-path
and no pre-logits layer. Inputs are NHWC images ``(B, image_size, image_size, 3)``.

Parameters, with ``p`` the patch size, ``N`` the patches, ``d`` the width, ``f``
the MLP width, ``L`` the depth and ``C`` the classes::

    P = (3*p^2*d + d) + d + (N + 1)*d + L*(4d^2 + 2df + 9d + f) + 2d + (d*C + C)

per block: ``norm1`` 2d, ``attn.qkv`` 3d^2 + 3d, ``attn.proj`` d^2 + d, ``norm2``
2d, ``mlp.fc1`` df + f, ``mlp.fc2`` fd + d (12d^2 + 13d for f = 4d). ViT-B/16 at
224 with 1000 classes has 86,567,656: `ViTB16`.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from ._common import expect_input_shape
from ._spec import ModelSpec
from xla_cost.errors import InputError
from xla_cost.parallel.sharding import RULES_ATTRIBUTE

__all__ = ["MLP", "SPECS", "Attention", "Block", "ViT", "ViTB16", "vit_parameters"]

Dtype = Any

_INIT_STD = 0.02
_LN_EPS = 1e-6


def vit_parameters(
    image_size: int, patch_size: int, num_classes: int, n_layer: int, d_model: int, d_ff: int, channels: int = 3
) -> int:
    """The closed-form parameter count of `ViT`."""
    d, f = d_model, d_ff
    tokens = (image_size // patch_size) ** 2 + 1
    embed = (channels * patch_size * patch_size * d + d) + d + tokens * d
    block = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (d * f + f) + (f * d + d)
    return embed + n_layer * block + 2 * d + (d * num_classes + num_classes)


def _dense(features: int, name: str, m: Any) -> nn.Dense:
    return nn.Dense(
        features,
        dtype=m.dtype,
        param_dtype=m.param_dtype,
        kernel_init=nn.initializers.normal(_INIT_STD),
        name=name,
    )


def _layer_norm(name: str, m: Any) -> nn.LayerNorm:
    return nn.LayerNorm(epsilon=_LN_EPS, dtype=m.dtype, param_dtype=m.param_dtype, name=name)


class Attention(nn.Module):
    """Multi-head self-attention with a fused ``qkv`` and a ``proj``.

    Written out (no fused kernel) so that its matmuls appear in the jaxpr under
    this module: ``q k^T / sqrt(head_dim)`` over all token pairs (no mask),
    softmax in float32, then ``probs v``.
    """

    n_head: int
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        batch, length, d = x.shape
        head_dim = d // self.n_head
        qkv = _dense(3 * d, "qkv", self)(x)
        # Head by head ([q k v] of head 0, then head 1, ...) as Megatron-LM lays it
        # out, so that a column split of qkv over heads needs no data movement.
        qkv = qkv.reshape(batch, length, self.n_head, 3, head_dim)
        q, k, v = qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :]
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / math.sqrt(head_dim))
        probs = nn.softmax(scores.astype(jnp.float32), axis=-1).astype(self.dtype)
        out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, length, d)
        return _dense(d, "proj", self)(out)


class MLP(nn.Module):
    """``fc1`` (d -> d_ff), GELU (exact), ``fc2`` (d_ff -> d)."""

    d_ff: int
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        h = nn.gelu(_dense(self.d_ff, "fc1", self)(x), approximate=False)
        return _dense(x.shape[-1], "fc2", self)(h)


class Block(nn.Module):
    """One pre-LayerNorm encoder block; ``(x, _) -> (x, None)`` so `nn.scan` can stack it."""

    n_head: int
    d_ff: int
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jnp.ndarray, _: Any = None) -> tuple[jnp.ndarray, None]:
        kw = {"dtype": self.dtype, "param_dtype": self.param_dtype}
        x = x + Attention(self.n_head, **kw, name="attn")(_layer_norm("norm1", self)(x))
        x = x + MLP(self.d_ff, **kw, name="mlp")(_layer_norm("norm2", self)(x))
        return x, None


class ViT(nn.Module):
    """Vision Transformer: images ``(B, image_size, image_size, 3)`` -> logits ``(B, num_classes)``.

    Attributes:
      image_size: the images' height and width; ``patch_size`` must divide it.
      patch_size: ``p``, the side of a square patch (the patch embedding's
        kernel and stride).
      num_classes: outputs of the classifier ``head``.
      n_layer: number of blocks ``L``.
      n_head: attention heads; must divide ``d_model``.
      d_model: the residual width ``d``.
      d_ff: the MLP's hidden width.
      scan_layers: stack the blocks with `nn.scan` (one module ``blocks`` whose
        parameters have a leading ``n_layer`` axis, traced once) instead of
        unrolling ``blocks_0`` ... ``blocks_{L-1}``. The parameter count is the same.
      dtype: the computation dtype.
      param_dtype: the parameters' dtype.
    """

    image_size: int = 224
    patch_size: int = 16
    num_classes: int = 1000
    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768
    d_ff: int = 3072
    scan_layers: bool = False
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    def _validate(self, images: Any) -> None:
        if self.d_model % self.n_head:
            raise InputError(
                "d_model divisible by n_head",
                f"d_model={self.d_model}, n_head={self.n_head}",
                "Change d_model or n_head with --set so that n_head divides d_model.",
            )
        if self.image_size % self.patch_size:
            raise InputError(
                "image_size divisible by patch_size",
                f"image_size={self.image_size}, patch_size={self.patch_size}",
                "Change image_size or patch_size with --set so that patch_size divides image_size.",
            )
        expect_input_shape(type(self).__name__, images, (self.image_size, self.image_size, 3))
        if not jnp.issubdtype(images.dtype, jnp.floating):
            raise InputError(
                f"{type(self).__name__} inputs of floating-point images",
                f"dtype {images.dtype}",
                "Pass float32 or bfloat16 images (a zoo model's example inputs already are).",
            )

    @nn.compact
    def __call__(self, images: jnp.ndarray) -> jnp.ndarray:
        self._validate(images)
        d, p = self.d_model, self.patch_size
        kw = {"dtype": self.dtype, "param_dtype": self.param_dtype}
        x = nn.Conv(d, (p, p), strides=(p, p), padding="VALID", **kw, name="patch_embed")(images)
        batch = x.shape[0]
        x = x.reshape(batch, -1, d)  # (B, N, d), patches in row-major order
        cls = self.param("cls_token", nn.initializers.zeros_init(), (1, 1, d), self.param_dtype)
        x = jnp.concatenate([jnp.broadcast_to(cls.astype(x.dtype), (batch, 1, d)), x], axis=1)
        pos = self.param("pos_embed", nn.initializers.normal(_INIT_STD), (1, x.shape[1], d), self.param_dtype)
        x = x + pos.astype(x.dtype)

        block_kw = {"n_head": self.n_head, "d_ff": self.d_ff, **kw}
        if self.scan_layers:
            stack = nn.scan(
                Block,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                length=self.n_layer,
            )
            x, _ = stack(**block_kw, name="blocks")(x, None)
        else:
            for i in range(self.n_layer):
                x, _ = Block(**block_kw, name=f"blocks_{i}")(x, None)

        x = _layer_norm("norm", self)(x)
        return _dense(self.num_classes, "head", self)(x[:, 0])


class ViTB16(ViT):
    """ViT-B/16: 224 x 224 images, 16 x 16 patches, 12 layers, 12 heads, d 768; 86,567,656 parameters."""

    image_size: int = 224
    patch_size: int = 16
    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768
    d_ff: int = 3072


MEGATRON_RULES: tuple[tuple[str, tuple[str | None, ...]], ...] = (
    (r"(qkv|fc1)/kernel$", (None, "model")),
    (r"(qkv|fc1)/bias$", ("model",)),
    (r"(proj|fc2)/kernel$", ("model", None)),
)
"""Megatron-LM's tensor parallelism for a sharded step's ``model`` axis: the
fused ``qkv`` (laid out head by head) and ``fc1`` split by columns, ``proj``
and ``fc2`` by rows."""
setattr(ViT, RULES_ATTRIBUTE, MEGATRON_RULES)  # read by `xla_cost.parallel.sharding.model_rules`


SPECS: list[ModelSpec] = [
    ModelSpec(
        "vit-b16",
        "ViT-B/16 vision transformer: 16x16 patches of 224x224, 12 pre-LN layers x 768, 12 heads",
        ViTB16,
        lambda c: (c["image_size"], c["image_size"], 3),
        input_dtype="float",
        source="Dosovitskiy et al. 2021; timm vit_base_patch16_224",
        aliases=("vit-b/16", "vit_base_patch16_224", "google/vit-base-patch16-224"),
    ),
]
"""The zoo entries of this family."""
