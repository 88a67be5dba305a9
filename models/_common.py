"""Helpers shared by the model families."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xla_cost.errors import InputError


def image_shape(config: Mapping[str, Any]) -> tuple[int, ...]:
    """Per-example NHWC input of an image model: ``(image_size, image_size, 3)``."""
    size = config.get("image_size", 224)
    return (size, size, 3)


def expect_input_shape(model: str, x: Any, example_shape: tuple[int, ...]) -> None:
    """Raises `InputError` unless ``x`` is ``(batch, *example_shape)``."""
    if tuple(x.shape[1:]) != tuple(example_shape) or x.ndim != len(example_shape) + 1:
        expected = ", ".join(["B", *map(str, example_shape)])
        raise InputError(
            f"{model} inputs of shape ({expected})",
            f"shape {tuple(x.shape)}",
            f"Pass --input-shape {','.join(['B', *map(str, example_shape)])} "
            "(B the batch size) or change the model's configuration with --set.",
        )
