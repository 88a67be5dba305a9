"""The results store's listing order: oldest first, as `Store.results` and `Store.select` document."""

from __future__ import annotations

import time
import types

import pytest

from xla_cost.compiled import store as store_module
from xla_cost.compiled.store import Store

ENV = {"jax": "0.10.2"}

# (key, model, seconds after the clock's start, failed): stored in this order, each at its
# second; keys chosen against the time order, so that ordering by key alone reads differently
ROWS = [
    ("k-c", "one_net", 0, False),
    ("k-e", "conv_net", 0, False),  # the same second as k-c: the key orders them
    ("k-b", "one_net", 1, False),
    ("k-a", "one_net", 2, True),
]
START = 1_700_000_000  # 2023-11-14T22:13:20Z


@pytest.fixture()
def db(monkeypatch):
    """A store in memory whose rows were created at START + their seconds (the store's
    clock replaced: `Store.put` stamps each row with the UTC second it is stored)."""
    clock = iter(time.gmtime(START + seconds) for _, _, seconds, _ in ROWS)
    monkeypatch.setattr(store_module, "time", types.SimpleNamespace(strftime=time.strftime, gmtime=lambda: next(clock)))
    with Store(":memory:") as opened:
        for key, model, _, failed in ROWS:
            outcome = {"error": "refused"} if failed else {"report": {"model": model}}
            assert opened.put(key, model=model, config={"model": model}, environment=ENV, **outcome)
        yield opened


def test_rows_are_stamped_with_the_second_they_were_stored(db):
    # START is 2023-11-14T22:13:20Z; the rows 0, 0, 1 and 2 seconds later
    assert [db.created(key) for key, *_ in ROWS] == [
        "2023-11-14T22:13:20Z", "2023-11-14T22:13:20Z", "2023-11-14T22:13:21Z", "2023-11-14T22:13:22Z"]


def test_every_row_is_listed_oldest_first_and_a_shared_second_by_key(db):
    # k-c and k-e at START (k-c first by key), k-b a second later, k-a two
    assert [r.key for r in db.results()] == ["k-c", "k-e", "k-b", "k-a"]


def test_a_selection_is_listed_oldest_first(db):
    assert [r.key for r in db.select()] == ["k-c", "k-e", "k-b", "k-a"]
    assert [r.key for r in db.select(model="one_net")] == ["k-c", "k-b", "k-a"]
    assert [r.key for r in db.select(key="k-")] == ["k-c", "k-e", "k-b", "k-a"]
    assert [(r.key, r.status, r.error) for r in db.select(failed=True)] == [("k-a", "failed", "refused")]
