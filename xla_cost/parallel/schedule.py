"""How a training step's communication is scheduled against its compute.

Three mechanisms real systems use, each a pure function of times and sizes:

* **buckets**: gradients are reduced in buckets, not tensor by tensor (PyTorch
  DDP's 25 MB buckets, Li et al. 2020; XLA's all-reduce combiner on GPUs): one
  collective, one latency, per bucket (`bucket`).
* **overlap**: a bucket is reduced as soon as the backward pass has made its
  gradients, on a link that runs one collective at a time, while the backward
  pass goes on; what remains after the backward pass ends is exposed
  (`exposed_after`).
* **pipelines**: a pipeline of ``p`` stages over ``m`` micro-batches with the
  1F1B schedule takes ``(m + p - 1)`` micro-batch slots of the slowest stage,
  an idle bubble of ``(p - 1) / m`` of the work; with ``v`` interleaved model
  chunks per stage the bubble shrinks to ``(p - 1) / (v m)`` (Narayanan et al.
  2021, section 2.2) (`pipeline_seconds`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from xla_cost.errors import InputError

__all__ = ["DDP_BUCKET_BYTES", "Piece", "bucket", "exposed_after", "pipeline_seconds", "bubble_fraction"]

DDP_BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's default gradient bucket: 25 MB (``bucket_cap_mb=25``; Li et al.
2020, "PyTorch Distributed", section 4.2.2)."""


@dataclasses.dataclass(frozen=True)
class Piece:
    """Gradient bytes that become ready together.

    Attributes:
      nbytes: the bytes to reduce.
      ready: the fraction of the backward pass done when they are ready, in
        [0, 1] (the last layer's gradients first).
    """

    nbytes: int
    ready: float


def bucket(pieces: Sequence[Piece], bucket_bytes: float) -> tuple[Piece, ...]:
    """``pieces`` (in the order the backward pass makes them) merged into buckets
    of at least ``bucket_bytes`` each (the last may be smaller); a bucket is
    ready when its last piece is. ``bucket_bytes`` 0 keeps every piece apart.

    Raises:
      InputError: a negative bucket size.
    """
    if not bucket_bytes >= 0:
        raise InputError("a bucket size >= 0 bytes", repr(bucket_bytes), "Pass e.g. 25 * 2**20 (PyTorch DDP's default).")
    out: list[Piece] = []
    size, ready = 0, 0.0
    for piece in sorted(pieces, key=lambda p: p.ready):
        size, ready = size + piece.nbytes, max(ready, piece.ready)
        if size >= bucket_bytes:
            out.append(Piece(size, ready))
            size, ready = 0, 0.0
    if size:
        out.append(Piece(size, ready))
    return tuple(out)


def exposed_after(ready_seconds: Sequence[float], durations: Sequence[float], end: float) -> float:
    """Seconds the communication runs past ``end`` (the backward pass's end).

    Collectives run one at a time, each no earlier than its ``ready_seconds``
    (in the order given) and after the one before it.
    """
    finish = 0.0
    for ready, seconds in zip(ready_seconds, durations):
        finish = max(finish, ready) + seconds
    return max(0.0, finish - end)


def bubble_fraction(stages: int, micro_batches: int, chunks: int = 1) -> float:
    """The 1F1B pipeline's idle time over its work: ``(p - 1) / (v m)``."""
    for value, what in ((stages, "pipeline stages"), (micro_batches, "micro-batches"), (chunks, "model chunks per stage")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{what}, an integer >= 1", repr(value), "Pass e.g. stages=8, micro_batches=64.")
    return (stages - 1) / (chunks * micro_batches)


def pipeline_seconds(micro_batch_seconds: float, stages: int, micro_batches: int, chunks: int = 1) -> float:
    """The time of ``micro_batches`` through ``stages`` stages, one micro-batch's
    forward and backward on the slowest stage taking ``micro_batch_seconds``:
    ``m t (1 + (p - 1) / (v m))``."""
    return micro_batches * micro_batch_seconds * (1 + bubble_fraction(stages, micro_batches, chunks))
