"""Buckets, overlap with the backward pass, and the pipeline's bubble: the
closed forms of `xla_cost.timemodel.schedule`, worked out beside each test."""

from __future__ import annotations

import pytest

from xla_cost.errors import InputError
from xla_cost.timemodel.schedule import (
    DDP_BUCKET_BYTES, Piece, bubble_fraction, bucket, exposed_after, pipeline_seconds,
)

MB = 2**20


def test_ddp_bucket_is_25_mb():
    assert DDP_BUCKET_BYTES == 25 * MB  # torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25)


def test_pieces_merge_into_buckets_in_the_order_they_become_ready():
    # ten 10 MB gradients, the last layer's first: buckets close once they hold >= 25 MB,
    # so 30, 30, 30 and the 10 left over; each bucket ready with its last piece
    pieces = [Piece(10 * MB, (i + 1) / 10) for i in range(10)]
    buckets = bucket(pieces, 25 * MB)
    assert [b.nbytes for b in buckets] == [30 * MB, 30 * MB, 30 * MB, 10 * MB]
    assert [b.ready for b in buckets] == [0.3, 0.6, 0.9, 1.0]
    assert bucket(pieces, 0) == tuple(sorted(pieces, key=lambda p: p.ready))  # no bucketing
    assert sum(b.nbytes for b in bucket(pieces, 1e12)) == 100 * MB  # one bucket of everything
    with pytest.raises(InputError, match="bucket size"):
        bucket(pieces, -1)


def test_a_bucket_closes_exactly_when_it_reaches_its_size():
    # 10 MB pieces into 20 MB buckets: two pieces reach 20 MB exactly and close the bucket
    # (>= its size); 19 MB buckets close at the same pieces, 21 MB buckets take three
    pieces = [Piece(10 * MB, t / 10) for t in range(1, 5)]
    assert [b.nbytes for b in bucket(pieces, 20 * MB)] == [20 * MB, 20 * MB]
    assert [b.ready for b in bucket(pieces, 20 * MB)] == [0.2, 0.4]
    assert [b.nbytes for b in bucket(pieces, 19 * MB)] == [20 * MB, 20 * MB]
    assert [b.nbytes for b in bucket(pieces, 21 * MB)] == [30 * MB, 10 * MB]


def test_a_collective_waits_for_its_gradients_and_for_the_one_before_it():
    # ready at 1, 2, 3 s, each 1.5 s long: they finish at 2.5, 4.0, 5.5; the backward
    # pass ends at 3 s, so 2.5 s of communication is exposed
    assert exposed_after([1, 2, 3], [1.5, 1.5, 1.5], end=3) == pytest.approx(2.5)
    # short collectives hide entirely behind the backward pass
    assert exposed_after([1, 2, 3], [0.5, 0.5, 0.5], end=4) == 0.0


def test_the_1f1b_bubble():
    # p stages, m micro-batches, v chunks: idle (p - 1) / (v m) of the work
    assert bubble_fraction(8, 64) == 7 / 64
    assert bubble_fraction(8, 64, chunks=2) == 7 / 128
    assert bubble_fraction(1, 1) == 0.0
    # m micro-batches of t seconds each through p stages: (m + p - 1) t
    assert pipeline_seconds(0.1, 4, 16) == pytest.approx((16 + 4 - 1) * 0.1)
    with pytest.raises(InputError, match="pipeline stages"):
        bubble_fraction(0, 4)
