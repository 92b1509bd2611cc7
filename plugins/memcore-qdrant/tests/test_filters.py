"""The compiled filters themselves: scope first, no empty ``should``, exact fallbacks."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from memcore_qdrant import QdrantMemoryStore, QdrantStore, edge_engine
from memcore_qdrant import payload as fields
from memcore_qdrant.client_engine import render_filter
from memcore_qdrant.engine import Engine, Hit, Point
from memcore_qdrant.filters import (
    NOTHING,
    Clause,
    Condition,
    IsEmpty,
    Match,
    MatchAny,
    Range,
    ScopeIs,
    compile_filter,
    expresses,
    flattened,
    scope_conditions,
    scoped,
)
from qdrant_client import models

from memcore.filters import evaluate, parse_filter, split_filter
from memcore.records import MemoryRecord, Message, epoch_micros
from memcore.scope import Scope
from memcore.testing.lifecycle_tests import ManualClock
from memcore.testing.strategies import filters


def _client_filters(item: Any) -> Iterator[models.Filter]:
    if isinstance(item, models.Filter):
        yield item
        for part in (item.must, item.should, item.must_not):
            for child in part or []:
                yield from _client_filters(child)


def _edge_filters(item: Any) -> Iterator[Any]:
    if isinstance(item, edge_engine.edge.Filter):
        yield item
        for part in (item.must, item.should, item.must_not):
            for child in part or []:
                yield from _edge_filters(child)


def _clauses(condition: Condition) -> Iterator[Clause]:
    if isinstance(condition, Clause):
        yield condition
        for child in (*condition.must, *condition.should, *condition.must_not):
            yield from _clauses(child)


@settings(max_examples=200, deadline=None)
@given(spec=filters())
@example(spec={"metadata.k": {"$in": []}})
@example(spec={"metadata.k": {"$nin": []}})
@example(spec={"$or": [{"metadata.k": {"$in": []}}, {"role": {"$in": []}}]})
@example(spec={"$not": {"metadata.k": {"$in": []}}})
def test_no_filter_ever_renders_an_empty_should(spec: dict[str, Any]) -> None:
    """No compiled filter holds an empty clause, which Qdrant would take as "match everything".

    Checked on the neutral tree itself: once rendered, an empty ``should`` is ``None``
    and looks exactly like "no should", so the rendered filters cannot show the hazard.
    """
    native, _ = split_filter(parse_filter(spec), expresses)  # type: ignore[arg-type]
    if native is None:
        return
    compiled = compile_filter(native)
    for clause in _clauses(compiled):
        assert clause.must or clause.should or clause.must_not, f"{spec} compiles to an empty clause"
    clause = scoped(Scope(tenant="acme"), compiled)
    for rendered in _client_filters(render_filter(clause)):
        assert rendered.should is None or len(rendered.should) > 0
    for rendered in _edge_filters(edge_engine.render_filter(clause)):
        assert rendered.should is None or len(rendered.should) > 0


def test_empty_in_matches_nothing_rather_than_an_empty_should() -> None:
    assert compile_filter(parse_filter({"metadata.k": {"$in": []}})) == NOTHING  # type: ignore[arg-type]
    assert compile_filter(parse_filter({"role": {"$in": []}})) == NOTHING  # type: ignore[arg-type]


def test_nested_must_and_must_not_are_flattened_into_the_top_level() -> None:
    scope = Scope(tenant="acme", user_id="alice")
    node = parse_filter({"$and": [{"role": {"$nin": ["system", "tool"]}}, {"kind": "turn"}]})
    clause = flattened(scoped(scope, compile_filter(node)))  # type: ignore[arg-type]
    assert clause.must == (ScopeIs((("tenant", "acme"), ("user_id", "alice"))), Match("kind", "turn"))
    assert clause.must_not == (MatchAny("role", ("system", "tool")),)
    either = Clause(should=(Match("role", "user"), Match("kind", "fact")))
    assert flattened(Clause(must=(either,))) == Clause(must=(either,))  # a should stays a clause


def test_an_exact_scope_requires_its_unset_fields_empty_natively_on_both_engines() -> None:
    exact = Scope(tenant="acme", user_id="alice").exact()
    clause = scoped(exact, Match("kind", "turn"))
    pairs = (("tenant", "acme"), ("user_id", "alice"))
    assert clause.must == (ScopeIs(pairs), IsEmpty("agent_id"), IsEmpty("session_id"), Match("kind", "turn"))
    assert scoped(Scope(tenant="acme", user_id="alice")).must == (ScopeIs(pairs),)  # not exact: any level
    on_server = render_filter(clause)
    assert on_server.must is not None
    assert [c for c in on_server.must if isinstance(c, models.IsEmptyCondition)] == [
        models.IsEmptyCondition(is_empty=models.PayloadField(key=name)) for name in ("agent_id", "session_id")
    ]
    embedded = edge_engine.render_filter(clause)
    keys = [c.key for c in embedded.must or [] if type(c).__name__ == "IsEmptyCondition"]
    assert keys == ["agent_id", "session_id"]


def test_scope_is_the_top_level_must() -> None:
    scope = Scope(tenant="acme", user_id="alice", session_id="s1")
    clause = scoped(scope, compile_filter(parse_filter({"$or": [{"role": "user"}, {"kind": "fact"}]})))
    assert clause.must[0] == ScopeIs((("tenant", "acme"), ("user_id", "alice"), ("session_id", "s1")))
    assert clause.should == () and clause.must_not == ()
    on_server = render_filter(clause)
    assert on_server.must is not None
    assert on_server.must[:3] == [
        models.FieldCondition(key=name, match=models.MatchValue(value=value))
        for name, value in (("tenant", "acme"), ("user_id", "alice"), ("session_id", "s1"))
    ]
    embedded = edge_engine.render_filter(clause)
    assert embedded.must is not None
    assert embedded.must[0].key == "scope_keys"
    assert embedded.must[0].match.value == "tenant=acme|user_id=alice|session_id=s1"


def test_large_range_bounds_are_evaluated_exactly(tmp_path: Path) -> None:
    scope = Scope(tenant="acme")
    big = MemoryRecord(scope=scope, message=Message(role="user", content="big"), metadata={"n": 2**53 + 1})
    edge = MemoryRecord(scope=scope, message=Message(role="user", content="edge"), metadata={"n": 2**53})
    spec = {"metadata.n": {"$gt": 2**53}}
    assert split_filter(parse_filter(spec), expresses)[1] is not None  # type: ignore[arg-type]
    with QdrantStore.from_url(f"qdrant://{tmp_path / 'store'}") as store:
        store.add([big, edge])
        assert [r.id for r in store.list(scope, filter=spec)] == [big.id]
        assert store.count(scope, filter=spec) == 1
        assert store.count(Scope(tenant="other"), filter=spec) == 0
        assert store.delete_where(scope, spec) == 1
        assert [r.id for r in store.list(scope)] == [edge.id]


class RecordingEngine:
    """Wraps an engine and records the filter of every call."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.location = inner.location
        self.filters: list[Clause] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def scroll(self, where: Clause, **options: Any) -> list[Point]:
        self.filters.append(where)
        return self.inner.scroll(where, **options)

    def query(self, vector: Any, where: Clause, limit: int) -> list[Hit]:
        self.filters.append(where)
        return self.inner.query(vector, where, limit)

    def keyword_query(self, vector: Any, where: Clause, limit: int) -> list[Hit]:
        self.filters.append(where)
        return self.inner.keyword_query(vector, where, limit)

    def count(self, where: Clause) -> int:
        self.filters.append(where)
        return self.inner.count(where)

    def facet(self, key: str, where: Clause, limit: int) -> list[tuple[str, int]]:
        self.filters.append(where)
        return self.inner.facet(key, where, limit)

    def replace(self, point: Point, where: Clause) -> None:
        self.filters.append(where)
        self.inner.replace(point, where)

    def delete(self, where: Clause) -> None:
        self.filters.append(where)
        self.inner.delete(where)


ALICE = Scope(tenant="acme", user_id="alice")
ALICE_FIRST: tuple[Condition, ...] = (ScopeIs((("tenant", "acme"), ("user_id", "alice"))),)


def _recorded_store(path: Path, engine: str) -> tuple[QdrantStore, RecordingEngine, ManualClock]:
    store = (
        QdrantStore.from_url(f"qdrant://{path}") if engine == "edge" else QdrantStore.open_local_client(path)
    )
    recorder = RecordingEngine(store._engine)
    store._engine = recorder  # type: ignore[assignment]
    clock = ManualClock()
    store.clock = clock
    return store, recorder, clock


def _read_everything(store: QdrantStore, records: list[MemoryRecord]) -> None:
    """Every read path, in alice's scope."""
    store.get(ALICE, [records[0].id])
    store.vectors(ALICE, [records[0].id])
    store.list(ALICE, filter={"role": "user"}, limit=2, order="desc")
    store.search(ALICE, vector=[1.0, 0.0], filter={"kind": "turn"})
    store.search(ALICE, vector=[1.0, 0.0], filter={"kind": {"$ne": "fact"}})  # checked on the best hits
    store.search(ALICE, text="R1")
    store.search(ALICE, keywords="r1")
    store.count(ALICE, filter={"metadata.x": {"$exists": False}})
    store.scopes(ALICE)


@pytest.mark.parametrize("engine", ["edge", "local client"])
def test_every_read_and_delete_sends_the_scope_first_and_every_read_the_live_condition(
    tmp_path: Path, engine: str
) -> None:
    store, recorder, clock = _recorded_store(tmp_path / "store", engine)
    try:
        records = [MemoryRecord(scope=ALICE, message=Message(role="user", content=f"r{i}")) for i in range(3)]
        store.add(records, [[1.0, float(i)] for i in range(3)])
        store.add([MemoryRecord(scope=ALICE, message=Message(role="user", content="gone"))], ttl=1)
        clock.advance(1)
        recorder.filters.clear()
        _read_everything(store, records)
        store.update(ALICE, records[2].id, content="r2 again")
        reads = len(recorder.filters)
        store.delete(ALICE, [records[1].id])
        store.delete_where(ALICE, {"role": "assistant"})
        assert reads >= 13
        for where in recorder.filters:
            assert where.must[:1] == ALICE_FIRST
        # Not expired at the store's clock: a range on the integer index, true of a missing key. Qdrant
        # Edge counts the scope's expired points first (one here), to leave it out when there are none.
        alive = Range(fields.EXPIRES_AT, lte=float(epoch_micros(clock.now)))
        probes = [where for where in recorder.filters if alive in where.must]
        live = [alive in flattened(where).must_not for where in recorder.filters if where not in probes]
        assert live == [True] * (reads - len(probes)) + [False] * 3
        assert len(probes) == (11 if engine == "edge" else 0)  # each read, and the update's two
        by_id = [w for w in recorder.filters if any(isinstance(c, MatchAny) for c in w.must)]
        exact = (*scope_conditions(ALICE.exact()),)

        def read(scope: tuple[Condition, ...], record: MemoryRecord) -> Clause:
            match = MatchAny(fields.RECORD_ID, (str(record.id),))
            return Clause(must=(*scope, match, Clause(must_not=(alive,))))

        removal = Clause(must=(*ALICE_FIRST, MatchAny(fields.RECORD_ID, (str(records[1].id),))))
        was = read(exact, records[2])
        unchanged = Clause(must=(*was.must, Match(fields.RECORD, records[2].model_dump_json())))
        assert by_id == [
            read(ALICE_FIRST, records[0]),  # get
            read(ALICE_FIRST, records[0]),  # vectors
            read(ALICE_FIRST, records[2]),  # update: the record, through the scope given,
            *[read(exact, records[2])] * 2,  # then its vector and its point, in its exact scope,
            unchanged,  # its write, on condition that the point still holds the record read,
            read(exact, records[2]),  # and the point read back
            removal,  # delete: counted,
            removal,  # then deleted
        ]
    finally:
        store.close()


def test_qdrant_edge_leaves_the_live_condition_out_where_nothing_has_expired(tmp_path: Path) -> None:
    store, recorder, clock = _recorded_store(tmp_path / "store", "edge")
    try:
        records = [MemoryRecord(scope=ALICE, message=Message(role="user", content=f"r{i}")) for i in range(3)]
        store.add(records, [[1.0, float(i)] for i in range(3)])
        bob = Scope(tenant="acme", user_id="bob")
        store.add([MemoryRecord(scope=bob, message=Message(role="user", content="gone"))], ttl=1)
        store.add([MemoryRecord(scope=ALICE, message=Message(role="user", content="later"))], ttl=60)
        clock.advance(1)  # bob's record has expired, none of alice's
        recorder.filters.clear()
        _read_everything(store, records)
        alive = Range(fields.EXPIRES_AT, lte=float(epoch_micros(clock.now)))
        probes = [where for where in recorder.filters if alive in where.must]
        assert probes == [Clause(must=(*ALICE_FIRST, alive))] * 9  # each read counts the expired first:
        assert not any(alive in flattened(where).must_not for where in recorder.filters)  # none
        assert len(store.list(ALICE)) == 4
        assert store.count(Scope(tenant="acme")) == 4  # bob's expired point is in this scope,
        assert alive in flattened(recorder.filters[-1]).must_not  # so the count carries the condition
    finally:
        store.close()


def test_ordered_reads_settle_ties_on_the_boundary(tmp_path: Path) -> None:
    scope = Scope(tenant="acme")
    first = MemoryRecord(scope=scope, message=Message(role="user", content="a"))
    tied = [
        first.model_copy(update={"id": MemoryRecord(scope=scope, message=first.message).id}) for _ in range(5)
    ]
    with QdrantStore.from_url(f"qdrant://{tmp_path / 'store'}") as store:
        store.add(tied)
        expected = sorted(tied, key=lambda r: r.id.int)
        assert [r.id for r in store.list(scope, limit=2)] == [r.id for r in expected[:2]]
        assert [r.id for r in store.list(scope, limit=2, order="desc")] == [r.id for r in expected[::-1][:2]]


FAR = datetime(9000, 1, 1, tzinfo=UTC)
"""Beyond 2**53 microseconds since 1970: a float64 cannot tell FAR from FAR + 1 µs."""


@pytest.mark.parametrize(
    "spec",
    [
        {"created_at": {"$gt": FAR + timedelta(microseconds=1)}},
        {"created_at": {"$gte": FAR + timedelta(microseconds=2)}},
        {"created_at": {"$lt": FAR + timedelta(microseconds=2)}},
        {"created_at": {"$lte": FAR}},
        {"$not": {"created_at": {"$gt": FAR}}},
    ],
)
def test_far_future_time_ranges_are_evaluated_exactly(spec: dict[str, Any]) -> None:
    scope = Scope(tenant="acme")
    records = [
        MemoryRecord(
            scope=scope,
            message=Message(role="user", content=f"r{i}"),
            created_at=FAR + timedelta(microseconds=i),
        )
        for i in range(4)
    ]
    node = parse_filter(spec)  # type: ignore[arg-type]
    assert node is not None
    assert split_filter(node, expresses)[1] is not None
    with QdrantMemoryStore.from_url("qdrant+memory://") as store:
        store.add(records)
        expected = [r.id for r in records if evaluate(node, r)]
        assert [r.id for r in store.list(scope, filter=spec)] == expected
        assert store.count(scope, filter=spec) == len(expected)


def test_far_future_list_bounds_are_exact() -> None:
    scope = Scope(tenant="acme")
    records = [
        MemoryRecord(
            scope=scope,
            message=Message(role="user", content=f"r{i}"),
            created_at=FAR + timedelta(microseconds=i),
        )
        for i in range(4)
    ]
    with QdrantMemoryStore.from_url("qdrant+memory://") as store:
        store.add(records)
        after = store.list(scope, after=FAR + timedelta(microseconds=1))
        assert [r.id for r in after] == [r.id for r in records[2:]]
        before = store.list(scope, before=FAR + timedelta(microseconds=2), order="desc", limit=5)
        assert [r.id for r in before] == [r.id for r in records[1::-1]]
        both = store.list(scope, after=FAR, before=FAR + timedelta(microseconds=3), filter={"role": "user"})
        assert [r.id for r in both] == [r.id for r in records[1:3]]
