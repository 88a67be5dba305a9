"""Lowering a program for the backend at hand, with a kernel that backend cannot lower refused in one line.

A Pallas kernel (``pallas_call``) lowers for the GPU (Triton or Mosaic GPU) and the TPU
(Mosaic); on the CPU only its interpret mode lowers (jax's ``_pallas_call_lowering``:
"Only interpret mode is supported on CPU backend."), and a platform with no Pallas
lowering at all is refused with "Cannot lower pallas_call on platform". Both reach the
user as jax's ``ValueError`` from deep in the lowering; `kernels_it_lowers` turns them
into an `xla_cost.errors.InputError` that says what to do instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

from xla_cost.errors import InputError, quoted

__all__ = ["PALLAS_REFUSALS", "kernels_it_lowers"]

PALLAS_REFUSALS: tuple[str, ...] = (
    "Only interpret mode is supported on CPU backend",
    "Cannot lower pallas_call on platform",
)
"""The texts of jax's own refusals to lower a ``pallas_call`` (jax/_src/pallas/pallas_call.py)."""


@contextlib.contextmanager
def kernels_it_lowers() -> Iterator[None]:
    """Runs the block (a lowering); a Pallas kernel the backend cannot lower is refused in one line.

    Raises:
      InputError: the block raised jax's refusal to lower a ``pallas_call`` for this backend.
    """
    try:
        yield
    except ValueError as exc:
        message = str(exc)
        if not any(text in message for text in PALLAS_REFUSALS):
            raise
        raise InputError(
            "a program whose kernels the backend can compile",
            f"a Pallas kernel (pallas_call) on backend {jax.default_backend()!r}, which it refused: {quoted(exc)}",
            "Count the jaxpr alone (counter='jaxpr', --counter jaxpr: the pallas_call is reported as "
            "unsupported, its work unknown), or run the kernel in interpret mode "
            "(pl.pallas_call(..., interpret=True)) to count its body.",
        ) from exc
