"""The matrix products a compiled kernel runs, as a time model prices them.

A kernel that multiplies matrices (a cuBLAS GEMM, a cuDNN convolution or
fused attention, a fusion holding ``dot`` or ``convolution`` instructions, as
a Triton GEMM on a GPU or every matrix product on a TPU, or an unfused
``dot``) runs at a speed set by its shape as much as by its FLOP: the tiles
of its output over the device's units, how deep its contraction is. A
`Product` gives the shape of the kernel's largest product as a batched GEMM
``[batch, m, k] x [batch, k, n]`` (a convolution as its implicit GEMM: m the
output positions, n the output features, k the taps times the input
features), its element type, and the FLOP of all of the kernel's products.

FLOP follow XLA's conventions: 2 per multiply-add, and only the kernel taps
that read a real input element (not padding, not the holes of a dilated
input: a TPU writes a batched product as a convolution whose batch
dimensions are dilated spatial ones). Only the standard library is used.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from xla_cost.count import attention
from xla_cost.compiled.hlo import (
    Array, Instruction, Module, attribute_value, library_call_target, parse_shape, split_top_level,
)

__all__ = ["Product", "kernel_product", "DTYPE_NAMES", "window", "valid_taps", "PALLAS_TARGET", "pallas_splash",
           "pallas_estimate", "pallas_flops", "splash_blocks"]

PALLAS_TARGET = "tpu_custom_call"
"""The ``custom_call_target`` of a Pallas (Mosaic) kernel in a compiled TPU program."""

FMA = 2
"""FLOP per multiply-add (XLA's convention)."""

DTYPE_NAMES: Mapping[str, str] = {
    "bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64",
    "s8": "int8", "u8": "int8", "f8e4m3fn": "float8", "f8e5m2": "float8",
}
"""HLO element types by the names the device registry's peaks use."""


@dataclasses.dataclass(frozen=True)
class Product:
    """A kernel's matrix products.

    Attributes:
      batch, m, n, k: the largest product as a batched GEMM: ``batch``
        independent ``[m, k] x [k, n]`` products (a convolution's implicit GEMM:
        m output positions, n output features, k input features times taps).
      dtype: its operands' element type, as the registry names dtypes
        (``bfloat16``; `DTYPE_NAMES`), or the HLO's where unnamed there.
      flops: FLOP of every product the kernel runs, per run.
      count: products in the kernel.
      features: a convolution's input features per group (what each of its
        taps contracts over: 3 for an RGB image); 0 for any other product.
      executed: FLOP of the products the kernel RUNS per run, where they differ from
        the ``flops`` counted (a splash attention kernel's: the block pairs its mask
        leaves, the scores it recomputes, `xla_cost.count.attention.SplashCall.executed`);
        0: ``flops``. A time model prices these; every count reads ``flops``.
      executed_note: why ``executed`` is an upper bound, where it is ("" where not).
    """

    batch: int
    m: int
    n: int
    k: int
    dtype: str
    flops: int
    count: int = 1
    features: int = 0
    executed: int = 0
    executed_note: str = ""

    @property
    def run_flops(self) -> int:
        """FLOP of the products the kernel runs (``executed``, else ``flops``)."""
        return self.executed or self.flops

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Product:
        """The inverse of `to_dict`."""
        return cls(int(data["batch"]), int(data["m"]), int(data["n"]), int(data["k"]), str(data["dtype"]),
                   int(data["flops"]), int(data.get("count", 1)), int(data.get("features", 0)),
                   int(data.get("executed", 0)), str(data.get("executed_note", "")))


def kernel_product(module: Module, instruction: Instruction, shapes: Mapping[str, str]) -> Product | None:
    """The matrix products ``instruction`` runs (a library call, a fusion, an
    unfused ``dot`` or ``convolution``); None when it runs none or their shapes
    cannot be read. ``shapes`` maps the names of its computation's
    instructions to their shape text."""
    found = _own(instruction, shapes)
    if found is not None:
        return found
    if instruction.opcode != "fusion" and instruction.opcode != "async-start":
        return None
    products: list[Product] = []
    seen: set[str] = set()
    pending = [callee for _, callee in instruction.callees]
    while pending:
        name = pending.pop()
        computation = module.computations.get(name)
        if computation is None or name in seen:
            continue
        seen.add(name)
        inner = {i.name: i.shape_text for i in computation.instructions}
        for nested in computation.instructions:
            product = _own(nested, inner)
            if product is not None:
                products.append(product)
            pending.extend(callee for _, callee in nested.callees)
    if not products:
        return None
    largest = max(products, key=lambda p: p.batch * p.m * p.n * p.k)
    return dataclasses.replace(largest, flops=sum(p.flops for p in products),
                               count=sum(p.count for p in products))


def _own(instruction: Instruction, shapes: Mapping[str, str]) -> Product | None:
    """The product of one instruction that is itself a product; None otherwise."""
    try:
        if instruction.opcode == "dot":
            return _dot(instruction, shapes)
        if instruction.opcode == "convolution":
            return _convolution(instruction, shapes, None)
        target = library_call_target(instruction)
        if target is None:
            return None
        if target.startswith("__cublas$"):
            return _gemm(instruction, shapes)
        if target.startswith("__cudnn$conv") and not target.endswith("Graph"):
            return _convolution(instruction, shapes, target)
        if target.startswith("__cudnn$fmha"):
            return _attention(instruction, target, shapes)
        if target == PALLAS_TARGET:
            return _splash(instruction, shapes)
    except (ValueError, KeyError, TypeError, IndexError, ZeroDivisionError):
        return None
    return None


def _operands(instruction: Instruction, shapes: Mapping[str, str]) -> list[Array | None]:
    found: list[Array | None] = []
    for operand in split_top_level(re.sub(r"/\*.*?\*/", "", instruction.operands)):
        words = operand.split()
        text = " ".join(words[:-1]) if len(words) > 1 else shapes.get(words[-1].lstrip("%"), "")
        shape = parse_shape(text)
        found.append(shape if isinstance(shape, Array) else None)
    return found


def _result(instruction: Instruction) -> Array:
    shape = parse_shape(instruction.shape_text)
    if isinstance(shape, tuple):  # a library call's (result, scratch)
        shape = next((s for s in shape if isinstance(s, Array) and not (s.dtype in ("u8", "s8") and len(s.dims) == 1)),
                     None)
    if not isinstance(shape, Array):
        raise ValueError("no array result")
    return shape


def _dims(text: str | None) -> list[int]:
    return [int(d) for d in (text or "").strip("{} ").split(",") if d.strip()]


def _gemm_product(lhs: Array, rhs: Array, contracting: list[int], batch_dims: list[int], count_flops: bool = True
                  ) -> Product:
    k = math.prod(lhs.dims[d] for d in contracting)
    batch = math.prod(lhs.dims[d] for d in batch_dims)
    m = math.prod(lhs.dims) // max(1, k * batch)
    n = math.prod(rhs.dims) // max(1, k * batch)
    return Product(batch, m, n, k, DTYPE_NAMES.get(lhs.dtype, lhs.dtype), FMA * batch * m * n * k)


def _dot(instruction: Instruction, shapes: Mapping[str, str]) -> Product | None:
    operands = _operands(instruction, shapes)
    if len(operands) < 2 or operands[0] is None or operands[1] is None:
        return None
    attributes = instruction.attributes
    return _gemm_product(operands[0], operands[1], _dims(attribute_value(attributes, "lhs_contracting_dims")),
                         _dims(attribute_value(attributes, "lhs_batch_dims")))


def _backend_config(instruction: Instruction) -> dict[str, Any]:
    text = attribute_value(instruction.attributes, "backend_config")
    try:
        config = json.loads(text) if text else {}
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def _gemm(instruction: Instruction, shapes: Mapping[str, str]) -> Product | None:
    config = _backend_config(instruction).get("gemm_backend_config")
    operands = _operands(instruction, shapes)
    if not isinstance(config, dict) or len(operands) < 2 or operands[0] is None or operands[1] is None:
        return None
    numbers = config.get("dot_dimension_numbers", {})
    return _gemm_product(operands[0], operands[1], [int(d) for d in numbers.get("lhs_contracting_dimensions", [])],
                         [int(d) for d in numbers.get("lhs_batch_dimensions", [])])


def _convolution(instruction: Instruction, shapes: Mapping[str, str], target: str | None) -> Product | None:
    """A convolution as its implicit GEMM: the call's result (the output, or
    the input's or the kernel's gradient) is ``m x n`` with n its features,
    and k what each of its elements sums over."""
    operands = _operands(instruction, shapes)
    result = _result(instruction)
    labels = attribute_value(instruction.attributes, "dim_labels") or ""
    match = re.fullmatch(r"([a-z0-9]+)_([a-z0-9]+)->([a-z0-9]+)", labels)
    if match is None or len(operands) < 2:
        return None
    lhs_labels, rhs_labels, out_labels = match.groups()
    if target == "__cudnn$convBackwardInput":
        lhs, rhs, out, features = result, operands[1], operands[0], "lhs"
    elif target == "__cudnn$convBackwardFilter":
        lhs, rhs, out, features = operands[0], result, operands[1], "rhs"
    else:
        lhs, rhs, out, features = operands[0], operands[1], result, "out"
    if lhs is None or rhs is None or out is None:
        return None
    groups = int(attribute_value(instruction.attributes, "feature_group_count") or 1)
    batch_groups = int(attribute_value(instruction.attributes, "batch_group_count") or 1)
    spatial = sum(ch.isdigit() for ch in lhs_labels)
    found = window(attribute_value(instruction.attributes, "window") or "{}", spatial)
    pairs = 1  # (output position, kernel tap) pairs that read a real input element, over the spatial dimensions
    for d in range(spatial):
        pairs *= valid_taps(lhs.dims[lhs_labels.index(str(d))], rhs.dims[rhs_labels.index(str(d))],
                            out.dims[out_labels.index(str(d))], *(found[key][d] for key in ("stride", "pad", "lhs", "rhs")))
    batch = lhs.dims[lhs_labels.index("b")] // batch_groups
    cin = lhs.dims[lhs_labels.index("f")] // groups
    cout = out.dims[out_labels.index("f")]
    flops = FMA * batch * pairs * cout * cin
    if features == "out":
        n = cout
    elif features == "lhs":
        n = lhs.dims[lhs_labels.index("f")]
    else:
        n = rhs.dims[rhs_labels.index("o")]
    made = math.prod(result.dims)
    m = made // max(1, n)
    k = max(1, flops // (FMA * max(1, made)))
    return Product(1, m, n, k, DTYPE_NAMES.get(lhs.dtype, lhs.dtype), flops, features=cin)


def _attention(instruction: Instruction, target: str, shapes: Mapping[str, str]) -> Product | None:
    config = _backend_config(instruction).get("cudnn_fmha_backend_config", {})
    dims = config.get("intermediate_tensor_shape", {}).get("dimensions") if isinstance(config, dict) else None
    operands = _operands(instruction, shapes)
    if not dims or len(dims) != 4 or not operands or operands[0] is None:
        return None
    b, heads, t, s = (int(d) for d in dims)
    head = math.prod(operands[0].dims) // max(1, b * heads * t)
    value = operands[2] if len(operands) > 2 and operands[2] is not None else operands[0]
    value_head = math.prod(value.dims) // max(1, b * heads * s)
    # forward: QK^T (query head) and PV (value head); backward: dQ and dK (query head), dV and dP (value head)
    backward = "Backward" in target
    return Product(b * heads, t, s, head, DTYPE_NAMES.get(operands[0].dtype, operands[0].dtype),
                   attention.products(b * heads * t * s, head, value_head, backward), 4 if backward else 2)


def pallas_splash(instruction: Instruction, shapes: Mapping[str, str]) -> attention.SplashCall | None:
    """The splash attention call a Pallas kernel (`PALLAS_TARGET`) is, by its name (the
    instruction's, or its ``op_name``'s: the ``pallas_call``'s) and its operands' shapes
    (`xla_cost.count.attention.splash_call`); None for any other kernel."""
    operands = [o.dims for o in _operands(instruction, shapes) if o is not None and _floating(o.dtype)]
    shape = parse_shape(instruction.shape_text)
    results = [r.dims for r in (shape if isinstance(shape, tuple) else (shape,)) if isinstance(r, Array)]
    return attention.splash_call(f"{instruction.op_name} {instruction.name}", operands, results)


def pallas_estimate(instruction: Instruction) -> dict[str, int] | None:
    """A Pallas kernel's own cost estimate (``pl.CostEstimate``, written into its
    ``custom_call_config``), None where it gave none (`xla_cost.count.attention.kernel_cost_estimate`)."""
    return attention.kernel_cost_estimate(_backend_config(instruction).get("custom_call_config"))


def _floating(dtype: str) -> bool:
    return dtype.startswith(("bf", "f")) and dtype != "fp"


def pallas_flops(instruction: Instruction, shapes: Mapping[str, str]) -> int:
    """A Pallas TPU kernel's FLOP: its own cost estimate where it gave one, else those of jax's
    splash attention kernel it is (`xla_cost.count.attention.SplashCall`).

    Raises:
      ValueError: neither (its FLOP are unknown; the message says why).
    """
    estimate = pallas_estimate(instruction)
    if estimate is not None:
        return estimate["flops"]
    call = pallas_splash(instruction, shapes)
    if call is None:
        raise ValueError("a Pallas kernel without a cost estimate (pl.CostEstimate) and not one of jax's splash "
                         "attention kernels")
    return call.flops


_SPLASH_BLOCKS = re.compile(r'\\?"(block_\w+)\\?":\s*(\d+)')
"""A block size of a splash kernel's ``kernel_metadata`` (jax writes its ``BlockSizes`` there as
``xprof_metadata``: splash_attention_kernel.py at jax 0.10.2, lines 1134, 1637, 2201)."""

_SPLASH_BLOCK_KEYS = {"fwd": ("block_q", "block_kv"), "dq": ("block_q_dq", "block_kv_dq"),
                      "dkv": ("block_q_dkv", "block_kv_dkv")}
"""Each splash kernel's query and key blocks, by its `BlockSizes` names."""


def splash_blocks(instruction: Instruction, phase: str) -> tuple[int, int] | None:
    """The (query, key) block a splash kernel of ``phase`` works on, from its ``kernel_metadata``
    (`_SPLASH_BLOCKS`); None where the program does not say."""
    found = dict(_SPLASH_BLOCKS.findall(instruction.attributes))
    keys = _SPLASH_BLOCK_KEYS.get(phase, ())
    if len(keys) != 2 or not all(key in found for key in keys):
        return None
    return int(found[keys[0]]), int(found[keys[1]])


def _splash(instruction: Instruction, shapes: Mapping[str, str]) -> Product | None:
    """A splash attention kernel's products on the MXU: ``B x N`` products of ``[T, H] x [H, S]``
    (its FLOP `xla_cost.count.attention.SplashCall.products`: every pair, each product of the
    model's arithmetic once); ``executed``: the products it runs, over the block pairs its mask
    leaves (`xla_cost.count.attention.mask_block_pairs`: the mask its ``op_name`` names, the blocks
    its ``kernel_metadata`` gives), every pair and a note where either is unknown (an upper bound)."""
    call = pallas_splash(instruction, shapes)
    operands = [o for o in _operands(instruction, shapes) if o is not None and _floating(o.dtype)]
    if call is None or not operands:
        return None
    q = operands[0]
    rows = math.prod(q.dims[:-1])
    length_q, length_k = q.dims[-2], call.scores // max(1, rows)
    count = {"fwd": 2, "dq": 1, "dkv": 4 if call.with_dq else 3}[call.phase]
    window = attention.splash_mask(instruction.op_name)
    blocks = splash_blocks(instruction, call.phase)
    share, note = 1.0, ""
    if window is None:
        note = "its mask unknown (not named in its op_name): every block pair priced, an upper bound"
    elif blocks is None:
        note = "its block sizes unknown (no kernel_metadata): every block pair priced, an upper bound"
    else:
        computed, every = attention.mask_block_pairs(length_q, length_k, *blocks, window)
        share = computed / max(1, every)
    return Product(rows // length_q, length_q, length_k, q.dims[-1], DTYPE_NAMES.get(q.dtype, q.dtype),
                   call.products, count, executed=call.executed(share), executed_note=note)


def window(text: str, spatial: int) -> dict[str, list[Any]]:
    """``{size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=.. rhs_dilate=..}`` per spatial dimension."""
    found: dict[str, list[Any]] = {"stride": [1] * spatial, "pad": [0] * spatial, "lhs": [1] * spatial,
                                   "rhs": [1] * spatial}
    keys = {"stride": "stride", "lhs_dilate": "lhs", "rhs_dilate": "rhs"}
    for token in text.strip("{} ").split():
        key, _, value = token.partition("=")
        parts = value.split("x")
        if key == "pad":
            found["pad"] = [int(p.split("_")[0]) for p in parts]
        elif key in keys:
            found[keys[key]] = [int(p) for p in parts]
    if any(len(values) != spatial for values in found.values()):
        raise ValueError(f"window {text} does not match the shapes")
    return found


def valid_taps(in_size: int, kernel: int, out_size: int, stride: int, pad_low: int, lhs_dilation: int,
                rhs_dilation: int) -> int:
    """(output position, kernel tap) pairs along one dimension that read a real
    input element: tap ``k`` of output ``o`` reads position ``o*stride - pad_low
    + k*rhs_dilation`` of the padded, ``lhs_dilation``-dilated input, real where
    it is a multiple of the dilation inside the input."""
    count = 0
    for k in range(kernel):
        offset = k * rhs_dilation - pad_low
        if lhs_dilation == 1:  # 0 <= o*stride + offset < in_size: a range of o
            low = max(0, -(offset // stride))
            high = min(out_size - 1, (in_size - 1 - offset) // stride)
            count += max(0, high - low + 1)
            continue
        for o in range(out_size):
            u = o * stride + offset
            if u >= 0 and u % lhs_dilation == 0 and u // lhs_dilation < in_size:
                count += 1
    return count
