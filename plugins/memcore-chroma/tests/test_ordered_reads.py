"""Ordered reads with a limit (a memory's recent window) read only the newest or oldest records.

Chroma cannot order by a field; the store bounds the read by the times of the records inserted
last (or first). These tests insert records out of time order, beside another scope's records,
so that a bound taken from insertion order alone would give a wrong answer.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from memcore_chroma import ChromaStore, reads
from memcore_chroma.reads import LISTING_SAMPLE

from memcore.records import MemoryRecord, Message
from memcore.scope import Scope

MINE, OTHER = Scope(tenant="t", user_id="me"), Scope(tenant="t", user_id="other")
START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ChromaStore]:
    opened = ChromaStore(tmp_path / "chroma")
    try:
        yield opened
    finally:
        opened.close()


def _records(scope: Scope, minutes: list[int]) -> list[MemoryRecord]:
    return [
        MemoryRecord(
            scope=scope,
            message=Message(role="user" if m % 3 else "assistant", content=f"turn at minute {m}"),
            created_at=START + timedelta(minutes=m),
        )
        for m in minutes
    ]


def _expected(records: list[MemoryRecord], descending: bool, limit: int, **match: Any) -> list[MemoryRecord]:
    kept = [r for r in records if all(getattr(r.message, k) == v for k, v in match.items())]
    return sorted(kept, key=lambda r: (r.created_at, r.id), reverse=descending)[:limit]


@pytest.mark.parametrize("insertion", ["in time order", "newest first", "shuffled", "oldest last"])
@pytest.mark.parametrize("order", ["desc", "asc"])
def test_limited_reads_match_a_full_sort(
    store: ChromaStore, insertion: str, order: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    minutes = list(range(300))
    if insertion == "newest first":
        minutes.reverse()
    elif insertion == "shuffled":
        random.Random(7).shuffle(minutes)
    elif insertion == "oldest last":
        minutes = minutes[1:] + minutes[:1]
    mine = _records(MINE, minutes)
    other = _records(OTHER, [m + 1_000 for m in range(300)])  # newer, inserted in between
    for start in range(0, 300, 50):
        store.add(mine[start : start + 50])
        store.add(other[start : start + 50])
    actions: list[str] = []
    call = ChromaStore._call

    def recorded(self: ChromaStore, action: str, operation: Any) -> Any:
        actions.append(action)
        return call(self, action, operation)

    monkeypatch.setattr(ChromaStore, "_call", recorded)
    # The time bound read alone (ids of every scope, intersected with the scope's), and with the
    # scope's where once other scopes wrote more than BOUND_READ windows' worth since.
    for bound_read in (1, 1_000):
        monkeypatch.setattr(reads, "BOUND_READ", bound_read)
        for limit in (1, 10, 20, 149):
            got = store.list(MINE, order=order, limit=limit)  # type: ignore[arg-type]
            assert got == _expected(mine, order == "desc", limit)
    assert "sampling times" in actions, "the bounded read was not used"
    assert "listing records" not in actions, "the bounded read fell back to sorting every match"
    by_role = store.list(MINE, filter={"role": "assistant"}, order=order, limit=10)  # type: ignore[arg-type]
    assert by_role == _expected(mine, order == "desc", 10, role="assistant")


def test_bounds_and_small_results(store: ChromaStore) -> None:
    mine = _records(MINE, list(range(100)))
    store.add(mine)
    middle = START + timedelta(minutes=50)
    assert store.list(MINE, order="desc", limit=5, before=middle) == _expected(mine[:50], True, 5)
    assert store.list(MINE, order="asc", limit=5, after=middle) == _expected(mine[51:], False, 5)
    small = LISTING_SAMPLE * 100  # more than there are: read whole
    assert store.list(MINE, order="desc", limit=small) == _expected(mine, True, small)
    assert store.list(OTHER, order="desc", limit=5) == []


def test_records_of_one_moment_are_ordered_by_id(store: ChromaStore) -> None:
    same = [
        MemoryRecord(scope=MINE, message=Message(role="user", content=f"tie {i}"), created_at=START)
        for i in range(60)
    ]
    later = _records(MINE, [1, 2])
    store.add(later + same)  # the ties inserted last, then read with a bound equal to their time
    for order in ("desc", "asc"):
        for limit in (3, 10):
            got = store.list(MINE, order=order, limit=limit)  # type: ignore[arg-type]
            assert got == _expected(later + same, order == "desc", limit)


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_records_of_one_time_come_in_id_order_under_a_filter_checked_afterwards(
    store: ChromaStore, order: Any
) -> None:
    # Numbers from 2**53 on are post-filtered (the filter is not exact), so the metadata path runs.
    same_time = [
        MemoryRecord(
            scope=MINE,
            message=Message(role="user", content=f"tie {i}"),
            created_at=START,
            metadata={"n": 2**53 + i},
        )
        for i in range(8)
    ]
    store.add(same_time)
    found = store.list(MINE, filter={"metadata.n": {"$gte": 2**53}}, order=order, limit=3)
    assert found == _expected(same_time, order == "desc", 3)
