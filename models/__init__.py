"""The model zoo: a registry from names to Flax modules and their inputs.

Example::

    from xla_cost.zoo import build_model, example_inputs
    model = build_model("deeper_conv_net", depth=10)
    inputs = example_inputs("deeper_conv_net", batch_size=8, depth=10)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from . import bert, gpt, resnet, seed_nets, vit
from ._spec import ModelSpec
from xla_cost.errors import InputError

__all__ = [
    "REGISTRY",
    "ModelSpec",
    "build_model",
    "count_parameters",
    "example_inputs",
    "get_spec",
    "zoo_frame",
]

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def _image(config: Mapping[str, Any]) -> tuple[int, ...]:
    size = config.get("image_size", 224)
    return (size, size, 3)


def _tokens(config: Mapping[str, Any]) -> tuple[int, ...]:
    return (config["seq_len"],)


_GPT2_SOURCE = "Radford et al. 2019, GPT-2; HF GPT2LMHeadModel"
_GPT3_SOURCE = "Brown et al. 2020, Table 2.1 (dense attention in every layer)"

REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec(
            "linear_net",
            "Seed 001 LinearNet: 150528 -> 4096 -> 128 -> 10, nearly all weights in fc1",
            seed_nets.LinearNet,
            lambda c: (224, 224, 3),
            source="Epoch AI, backward-forward FLOP ratio, Appendix A",
        ),
        ModelSpec(
            "one_net",
            "Seed 001 OneNet: 1 -> 4096 -> 128 -> 10, nearly all weights after fc1",
            seed_nets.OneNet,
            lambda c: (1,),
            source="Epoch AI, backward-forward FLOP ratio, Appendix A",
        ),
        ModelSpec(
            "conv_net",
            "Seed 001 ConvNet: two 7x7/2 convs with max-pools, global pool, fc1",
            seed_nets.ConvNet,
            _image,
            source="Epoch AI, backward-forward FLOP ratio, Appendix A",
        ),
        ModelSpec(
            "deeper_conv_net",
            "Seed 001 DeeperConvNet: 7x7/2 conv, depth x shared 3x3 conv, 7x7/2 conv, fc1",
            seed_nets.DeeperConvNet,
            _image,
            source="Epoch AI, backward-forward FLOP ratio, Appendix A",
        ),
        ModelSpec(
            "gpt2-small",
            "GPT-2 small decoder-only transformer: 12 layers x 768, 12 heads, tied LM head",
            gpt.GPT2Small,
            _tokens,
            input_dtype="int32",
            source=_GPT2_SOURCE,
        ),
        ModelSpec(
            "gpt2-medium",
            "GPT-2 medium decoder-only transformer: 24 layers x 1024, 16 heads, tied LM head",
            gpt.GPT2Medium,
            _tokens,
            input_dtype="int32",
            source=_GPT2_SOURCE,
        ),
        ModelSpec(
            "gpt2-large",
            "GPT-2 large decoder-only transformer: 36 layers x 1280, 20 heads, tied LM head",
            gpt.GPT2Large,
            _tokens,
            input_dtype="int32",
            source=_GPT2_SOURCE,
        ),
        ModelSpec(
            "gpt2-xl",
            "GPT-2 XL decoder-only transformer: 48 layers x 1600, 25 heads, tied LM head",
            gpt.GPT2XL,
            _tokens,
            input_dtype="int32",
            source=_GPT2_SOURCE,
        ),
        ModelSpec(
            "gpt3-small",
            "GPT-3 Small decoder-only transformer: 12 layers x 768, n_ctx 2048, nn.scan over layers",
            gpt.GPT3Small,
            _tokens,
            input_dtype="int32",
            source=_GPT3_SOURCE,
        ),
        ModelSpec(
            "gpt3-medium",
            "GPT-3 Medium decoder-only transformer: 24 layers x 1024, n_ctx 2048, nn.scan over layers",
            gpt.GPT3Medium,
            _tokens,
            input_dtype="int32",
            source=_GPT3_SOURCE,
        ),
        ModelSpec(
            "gpt3-large",
            "GPT-3 Large decoder-only transformer: 24 layers x 1536, n_ctx 2048, nn.scan over layers",
            gpt.GPT3Large,
            _tokens,
            input_dtype="int32",
            source=_GPT3_SOURCE,
        ),
        ModelSpec(
            "gpt3-xl",
            "GPT-3 XL decoder-only transformer: 24 layers x 2048, n_ctx 2048, nn.scan over layers",
            gpt.GPT3XL,
            _tokens,
            input_dtype="int32",
            source=_GPT3_SOURCE,
        ),
        ModelSpec(
            "gpt3-2.7b",
            "GPT-3 2.7B decoder-only transformer: 32 layers x 2560, n_ctx 2048, nn.scan over layers",
            gpt.GPT3_2_7B,
            _tokens,
            input_dtype="int32",
            source=_GPT3_SOURCE,
        ),
        ModelSpec(
            "gpt3-6.7b",
            "GPT-3 6.7B decoder-only transformer: 32 layers x 4096, n_ctx 2048, nn.scan over layers",
            gpt.GPT3_6_7B,
            _tokens,
            input_dtype="int32",
            source=_GPT3_SOURCE,
        ),
        ModelSpec(
            "gpt3-13b",
            "GPT-3 13B decoder-only transformer: 40 layers x 5120, n_ctx 2048, nn.scan over layers",
            gpt.GPT3_13B,
            _tokens,
            input_dtype="int32",
            source=_GPT3_SOURCE,
        ),
        ModelSpec(
            "gpt3-175b",
            "GPT-3 175B decoder-only transformer: 96 layers x 12288, n_ctx 2048, nn.scan over layers",
            gpt.GPT3_175B,
            _tokens,
            input_dtype="int32",
            source=_GPT3_SOURCE,
        ),
        *resnet.SPECS,
        *bert.SPECS,
        *vit.SPECS,
    ]
}
"""Every zoo model by name."""


def get_spec(name: str) -> ModelSpec:
    """The `ModelSpec` of ``name``; raises `InputError` listing the zoo if unknown."""
    if name not in REGISTRY:
        raise InputError(
            f"a zoo model name ({', '.join(REGISTRY)}) or package.module:attribute",
            repr(name),
            "Run `xla-cost models` to list the zoo.",
        )
    return REGISTRY[name]


def _check_config(spec: ModelSpec, config: Mapping[str, Any]) -> None:
    allowed = spec.defaults
    for key, value in config.items():
        if key not in allowed:
            raise InputError(
                f"a {spec.name} argument ({', '.join(allowed) or 'none'})",
                repr(key),
                "Use --set KEY=VALUE with one of those keys.",
            )
        default = allowed[key]
        # Integer fields are sizes (>= 1); one whose default is 0 uses 0 as "derive
        # it" (GPT's d_ff = 0: 4 * d_model), so 0 is allowed there too.
        least = min(1, default) if isinstance(default, int) else 1
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= least
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = True
        if not ok:
            kind = type(default).__name__
            raise InputError(
                f"{key} to be {'an' if kind[0] in 'aeiou' else 'a'} {kind}"
                + (f" >= {least}" if isinstance(default, int) and not isinstance(default, bool) else ""),
                repr(value),
                f"Use e.g. --set {key}={default!r}.",
            )


def build_model(name: str, *, dtype: str = "float32", **config: Any) -> nn.Module:
    """Instantiates zoo model ``name`` with ``config`` overriding its defaults.

    Args:
      name: a `REGISTRY` name.
      dtype: the computation dtype (``float32`` or ``bfloat16``); parameters stay
        float32.
      **config: the model's fields, e.g. ``depth=10`` for ``deeper_conv_net``.
    """
    spec = get_spec(name)
    _check_config(spec, config)
    if dtype not in _DTYPES:
        raise InputError(
            f"a dtype in {', '.join(_DTYPES)}", repr(dtype), "Use --dtype float32 or bfloat16."
        )
    kwargs = dict(config)
    names = {f.name for f in dataclasses.fields(spec.module)}
    if "dtype" in names:
        kwargs["dtype"] = _DTYPES[dtype]
    return spec.module(**kwargs)


def example_inputs(
    name: str, batch_size: int, *, dtype: str = "float32", **config: Any
) -> jax.ShapeDtypeStruct:
    """Abstract inputs ``(batch_size, *input_shape)`` for zoo model ``name``."""
    spec = get_spec(name)
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
        raise InputError("a batch size of at least 1", repr(batch_size), "Use --batch-size N, N >= 1.")
    shape = (int(batch_size), *spec.input_shape({**spec.defaults, **config}))
    input_dtype = _DTYPES.get(dtype, jnp.float32) if spec.input_dtype == "float" else spec.input_dtype
    return jax.ShapeDtypeStruct(shape, input_dtype)


def count_parameters(name: str, **config: Any) -> int:
    """Trainable parameters of a zoo model, counted abstractly (nothing allocated)."""
    model = build_model(name, **config)
    inputs = example_inputs(name, 1, **config)
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(variables.get("params", {}))))


def _fast_count(spec: ModelSpec) -> dict[str, Any]:
    # A scanned stack traces one layer instead of all of them and has the same
    # parameters (tests/test_gpt.py checks it), so the zoo table counts that way.
    return {"scan_layers": True} if "scan_layers" in spec.defaults else {}


def zoo_frame() -> pd.DataFrame:
    """The zoo as a table: description, parameters, input shape, configuration."""
    rows = []
    for spec in REGISTRY.values():
        shape = ", ".join(["B", *map(str, spec.input_shape(spec.defaults))])
        rows.append(
            {
                "name": spec.name,
                "description": spec.description,
                "parameters": count_parameters(spec.name, **_fast_count(spec)),
                "input_shape": f"({shape})",
                "config": ", ".join(f"{k}={v}" for k, v in spec.defaults.items()),
            }
        )
    return pd.DataFrame(rows).set_index("name")
