"""The expiry bound of Qdrant Edge (:meth:`~memcore_qdrant.edge_engine.EdgeEngine.none_expired`).

A read leaves the live condition out of its query only when the engine says no point can have
expired. That answer comes from a bound the engine keeps across writes, updates, deletes and
purges, so a random sequence of them checks it against counting the expired points each time,
and every read against which records are live.
"""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

from memcore_qdrant import QdrantStore, edge_engine
from memcore_qdrant import payload as fields
from memcore_qdrant.filters import Clause, Range

from memcore.records import MemoryRecord, Message, epoch_micros
from memcore.scope import Scope
from memcore.testing.lifecycle_tests import ManualClock

MINE = Scope(tenant="acme", user_id="alice")


def _expired_points(engine: edge_engine.EdgeEngine, now: int) -> int:
    return engine.count(Clause(must=(Range(fields.EXPIRES_AT, lte=now),)))


def test_the_bound_agrees_with_counting_expired_points_through_every_kind_of_write(tmp_path: Path) -> None:
    rng = random.Random(25)
    with QdrantStore.from_url(f"qdrant://{tmp_path}") as store:
        clock = ManualClock()
        store.clock = clock
        engine = store._engine
        assert isinstance(engine, edge_engine.EdgeEngine)
        stored: dict[str, MemoryRecord] = {}  # by content, which is unique
        for step in range(120):
            action = rng.choice(["add", "add", "add", "update", "delete", "advance", "rewind", "sweep"])
            if step in (40, 80):
                action = "purge"
            if action == "add":
                ttl = rng.choice([None, 5, 30, 300])
                record = MemoryRecord(scope=MINE, message=Message(role="user", content=f"note {step}"))
                store.add([record], ttl=ttl)
                stored[record.message.content] = store.get(MINE, [record.id])[0]
            elif action in ("update", "delete"):
                live = [r for r in stored.values() if r.is_live(clock.now)]
                if not live:
                    continue
                record = rng.choice(live)
                if action == "delete":
                    assert store.delete(MINE, [record.id]) == 1
                    del stored[record.message.content]
                else:  # to a later expiry, or none: the bound may rise
                    ttl = rng.choice([None, 600])
                    stored[record.message.content] = store.update(MINE, record.id, ttl=ttl)
            elif action == "advance":
                clock.advance(rng.choice([1, 10, 100]))
            elif action == "rewind":
                clock.now -= timedelta(seconds=rng.choice([10, 100]))
            elif action == "sweep":
                store.sweep()
                stored = {k: r for k, r in stored.items() if r.is_live(clock.now)}
            else:
                store.purge()
                stored = {k: r for k, r in stored.items() if r.is_live(clock.now)}
            now = epoch_micros(clock.now)
            assert engine.none_expired(now) == (_expired_points(engine, now) == 0), (step, action)
            visible = sorted(r.message.content for r in stored.values() if r.is_live(clock.now))
            assert sorted(r.message.content for r in store.list(MINE)) == visible, (step, action)
            assert store.count(MINE) == len(visible)
